//! Arbitrary bytes as a frame for every link type, and as a whole capture file read by
//! `pcapin` through every protocol filter: nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    filters::fuzzing::run_capture(data);
});
