//! The control protocol's decoder against arbitrary bytes: a stream of frames as a hostile
//! client (or a broken worker) might send them. Must never panic or allocate past the
//! frame limit. Run: `cd crates/service/daemon && cargo +nightly fuzz run decode fuzz/corpus/decode`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    daemon::proto::decode_stream(data);
});
