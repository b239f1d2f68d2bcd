//! Parses arbitrary bytes with the fixed test resolver: the parser must never panic, and
//! every result keeps the invariants of `lang::fuzzing::run_parse`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    lang::fuzzing::run_parse(data);
});
