//! A reader facing arbitrary shared memory: a real ring whose data area and producer
//! metadata a hostile peer (a second read-write mapping) overwrites with fuzzer bytes.
//! Whatever it finds, the reader must return data, `Corrupt`, `Overrun`, `BufferTooSmall`
//! or EOF — never panic, never touch memory outside its mapping.
#![no_main]

use beltway::fuzzing::run_hostile_ring;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    run_hostile_ring(data);
});
