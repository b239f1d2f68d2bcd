//! Asymmetric fences for the sleep/wake handshakes (a Dekker pattern between a fast side
//! that publishes a position and then loads a sleep flag, and a slow side that sets the flag
//! and then loads the position). The fast side runs on every read and write; the slow side
//! only when a party is about to sleep. With expedited global membarrier the fast side needs
//! only a compiler fence and the slow side makes every CPU running a registered process
//! execute a full barrier; without it both sides use SeqCst.
//!
//! Owns: the choice between membarrier and SeqCst, and the two fence halves. Used through
//! [`super::notify`] (writers) and directly by the sleeping side (readers, select, the
//! writer waiting for space).

use std::sync::atomic::{compiler_fence, fence, AtomicU64, Ordering::*};
use std::sync::OnceLock;

/// (kernel offers expedited global membarrier, this process is registered for it)
fn state() -> (bool, bool) {
    static S: OnceLock<(bool, bool)> = OnceLock::new();
    *S.get_or_init(|| {
        let supported = std::env::var_os("BELTWAY_NO_MEMBARRIER").is_none()
            && crate::sys::membarrier_global_supported();
        (
            supported,
            supported && crate::sys::membarrier_register_global().is_ok(),
        )
    })
}

/// Make sure this process takes part in the handshakes (call before mapping a ring).
pub fn init() {
    state();
}

/// In a child after `fork`: a registration for expedited membarrier belongs to an address
/// space, and the child has a new one; register it again (the cached state says the
/// process uses the cheap fast side, which is only sound if it is registered).
pub fn after_fork() {
    if state().1 && crate::sys::membarrier_register_global().is_err() {
        // Cannot happen when the parent could register; if it does, the child would lose
        // wake-ups, so make it loud.
        eprintln!("beltway: membarrier registration failed in a forked child");
        std::process::abort();
    }
}

/// Fast side: publish `v` into `word`, ordered before the caller's next load.
#[inline]
pub fn publish(word: &AtomicU64, v: u64) {
    if state().1 {
        // SYNC POINT: Release publishes what precedes the position (a producer's data
        // below v, or a reader's loads of the data it releases); pairs with the Acquire
        // loads of the same word on the other side (write_pos: `Reader::refresh`, the
        // IBuf readers; a reader slot's pos: `Shared::scan_min`).
        word.store(v, Release);
        // SYNC POINT: the compiler fence keeps the caller's following flag load (the
        // eventcount `data_seq`, or `waiting`) after this store in program order; the
        // store-load order across CPUs is enforced by the slow side's membarrier in
        // `heavy`, which pairs with it.
        compiler_fence(SeqCst);
    } else {
        // SYNC POINT: the Release half pairs with the same Acquire loads as above; the
        // SeqCst swap stands in for the membarrier against the slow side's `fence(SeqCst)`
        // in `heavy` (on x86 a locked instruction, a full barrier). Strictly, the C++ model
        // orders the caller's following Relaxed flag load only with a `fence(SeqCst)` after
        // this swap; see the notes on orderings in ring/mod.rs.
        word.swap(v, SeqCst);
    }
}

/// Slow side: after setting its flag, before loading the other side's position.
pub fn heavy() {
    let (supported, _) = state();
    if !(supported && crate::sys::membarrier_global().is_ok()) {
        // SYNC POINT: without membarrier, a SeqCst fence between the caller's flag store
        // and its position load; pairs with the fast side's SeqCst swap in `publish`.
        fence(SeqCst);
    }
}
