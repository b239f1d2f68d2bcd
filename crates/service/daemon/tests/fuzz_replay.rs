//! Replays the decoder fuzz target's corpus (crates/service/daemon/fuzz/corpus/decode: the seeds
//! and what fuzzing kept) as an ordinary test: no input may panic the decoder, and the
//! seeds that are valid messages must still decode.

#[test]
fn decoder_corpus_replays_without_panics() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/decode");
    let (mut n, mut decoded) = (0, 0);
    for entry in std::fs::read_dir(dir).expect("the corpus directory") {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        decoded += daemon::proto::decode_stream(&data);
        n += 1;
    }
    assert!(n >= 20, "expected the committed corpus, found {n} inputs");
    assert!(
        decoded >= 16,
        "the valid seeds (one per message kind) decode: only {decoded} did"
    );
}
