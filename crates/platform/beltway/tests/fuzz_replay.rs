//! Replays inputs kept from fuzzing (crates/platform/beltway/fuzz/regressions: the largest corpus
//! entries of the hostile_ring target, and any crash found later) as ordinary tests.

#[test]
fn hostile_ring_regressions() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("regressions directory") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        beltway::fuzzing::run_hostile_ring(&data);
        n += 1;
    }
    assert!(n >= 10, "expected the committed fuzz inputs, found {n}");
}
