//! What is the library's own rather than the program's: the calls it makes itself (which
//! the interposed entry points pass straight to the kernel, [`internal`]) and the
//! descriptors it keeps for itself (a ring's memfd and doorbell ends, the shaping
//! segment), which the program never made and must not close or see ([`is_ours`]).
//!
//! Owns: those two marks. Does not own what the descriptors are (`pipe`, `shape`).

use crate::vfd;
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

/// Per fd of this process: one of the library's own (a memfd, a doorbell end), which the
/// program never made and must not close.
static OURS: [AtomicU8; vfd::MAX_FD] = [const { AtomicU8::new(0) }; vfd::MAX_FD];

thread_local! {
    static INTERNAL: Cell<u32> = const { Cell::new(0) };
}

/// Run `f` as the library (the interposed calls it makes go straight to the kernel).
pub fn internal<R>(f: impl FnOnce() -> R) -> R {
    INTERNAL.with(|c| c.set(c.get() + 1));
    let r = f();
    INTERNAL.with(|c| c.set(c.get() - 1));
    r
}

/// Is the library itself making this call?
pub fn is_internal() -> bool {
    INTERNAL.with(|c| c.get() > 0)
}

/// Is `fd` one of the library's own descriptors (memfd, doorbell)?
pub fn is_ours(fd: i32) -> bool {
    (fd as u32 as usize) < vfd::MAX_FD && OURS[fd as usize].load(Ordering::Relaxed) != 0
}

pub(crate) fn mark_ours(fd: i32, on: bool) {
    if (fd as u32 as usize) < vfd::MAX_FD {
        OURS[fd as usize].store(on as u8, Ordering::Relaxed);
    }
}
