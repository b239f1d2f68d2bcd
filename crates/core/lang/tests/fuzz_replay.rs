//! Replays inputs kept from fuzzing (crates/core/lang/fuzz/regressions: crash inputs found by
//! the `parse` target, and hand-picked hostile inputs) as ordinary tests.

#[test]
fn parse_regressions() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("regressions directory") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        lang::fuzzing::run_parse(&data);
        n += 1;
    }
    assert!(n >= 10, "expected the committed fuzz inputs, found {n}");
}
