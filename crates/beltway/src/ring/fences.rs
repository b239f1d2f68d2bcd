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
        let supported = std::env::var_os("BELTWAY_NO_MEMBARRIER").is_none() && crate::sys::membarrier_global_supported();
        (supported, supported && crate::sys::membarrier_register_global().is_ok())
    })
}

/// Make sure this process takes part in the handshakes (call before mapping a ring).
pub fn init() {
    state();
}

/// Fast side: publish `v` into `word`, ordered before the caller's next load.
#[inline]
pub fn publish(word: &AtomicU64, v: u64) {
    if state().1 {
        // SYNC POINT: Release publishes the data below v; the compiler fence keeps the
        // following flag load after this store in program order; the store-load order
        // across CPUs is enforced by the slow side's membarrier.
        word.store(v, Release);
        compiler_fence(SeqCst);
    } else {
        // SYNC POINT: a SeqCst RMW is a full barrier on its own.
        word.swap(v, SeqCst);
    }
}

/// Slow side: after setting its flag, before loading the other side's position.
pub fn heavy() {
    let (supported, _) = state();
    if !(supported && crate::sys::membarrier_global().is_ok()) {
        fence(SeqCst);
    }
}
