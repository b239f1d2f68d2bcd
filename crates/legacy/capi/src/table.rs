//! The library's descriptor table: small integers (not kernel descriptors) naming open
//! streams, lowest free number first, as the kernel hands out its own.
//!
//! Owns: numbering, lookup, removal, and the locking rule: the table's lock is held only
//! to find or change an entry; each stream has a lock of its own, held for the length of
//! one call on it (so a thread blocked reading one stream never holds up another thread's
//! calls on other streams; two threads on one descriptor take turns).

use crate::error::{Result, SlError};
use crate::stream::Stream;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most streams one process may have open at once.
pub(crate) const MAX_OPEN: usize = 1024;

pub type Entry = Arc<Mutex<Stream>>;

static TABLE: Mutex<Vec<Option<Entry>>> = Mutex::new(Vec::new());

fn table() -> MutexGuard<'static, Vec<Option<Entry>>> {
    // A panic while the table was held cannot leave an entry half made (each change is
    // one assignment), so a poisoned lock is used as it is.
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Enter a stream; its descriptor.
pub fn insert(s: Stream) -> Result<i32> {
    let mut t = table();
    let e = Some(Arc::new(Mutex::new(s)));
    if let Some(i) = t.iter().position(Option::is_none) {
        t[i] = e;
        return Ok(i as i32);
    }
    if t.len() >= MAX_OPEN {
        return Err(SlError::new(
            libc::EMFILE,
            format!("{MAX_OPEN} slfile descriptors are open already"),
        ));
    }
    t.push(e);
    Ok(t.len() as i32 - 1)
}

/// The stream behind `fd`.
pub fn get(fd: i32) -> Result<Entry> {
    let t = table();
    usize::try_from(fd)
        .ok()
        .and_then(|i| t.get(i))
        .and_then(Clone::clone)
        .ok_or_else(|| SlError::badf(fd))
}

/// Take `fd` out of the table (the number is free at once); the stream is the caller's.
pub fn remove(fd: i32) -> Result<Entry> {
    let mut t = table();
    usize::try_from(fd)
        .ok()
        .and_then(|i| t.get_mut(i))
        .and_then(Option::take)
        .ok_or_else(|| SlError::badf(fd))
}

/// Lock one stream for a call.
pub fn lock(e: &Entry) -> MutexGuard<'_, Stream> {
    // A call that panicked is reported as EIO by `ffi`; the stream's state is still that of
    // a finished call or of one that failed, either usable or failing cleanly again.
    e.lock().unwrap_or_else(|p| p.into_inner())
}
