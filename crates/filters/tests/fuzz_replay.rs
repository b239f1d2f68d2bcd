//! Replays inputs kept from fuzzing the capture path (crates/filters/fuzz/regressions).

#[test]
fn capture_regressions() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/regressions");
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("regressions directory") {
        filters::fuzzing::run_capture(&std::fs::read(e.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n >= 10, "expected the committed fuzz inputs, found {n}");
}
