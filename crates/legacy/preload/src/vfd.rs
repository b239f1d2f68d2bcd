//! The descriptors this library serves itself ("virtual" descriptors): a table from fd
//! number to the object behind it, and the interface every such object offers to the
//! generic calls (`close`, `dup*`, `poll`/`select`/`epoll`).
//!
//! Owns: which fd numbers are ours (a lock-free byte per fd, so a call on any other fd costs
//! one load before it goes to the kernel), the objects behind them, and the hook run before
//! a thread blocks. Does not own what an object is (`pipe`: Beltway-ring pipes; `udp`:
//! batched UDP sockets) nor the waiting itself (`wait`).
//!
//! Every virtual fd is also a real kernel descriptor of the right type (the kernel pipe or
//! socket the program asked for), so `fstat`, `lseek`, `getsockname` and everything this
//! library does not know still see what they expect; the object says which kernel fd and
//! events to wait on while the thread blocks ([`Virtual::wait_on`]).

use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// Highest fd number (exclusive) this library serves; higher ones stay kernel-only.
pub const MAX_FD: usize = 65536;

/// An object behind one or more fds of this process.
pub trait Virtual: Send + Sync {
    /// Readiness now (POLLIN/POLLOUT/POLLHUP/POLLERR as poll(2) reports them) for the
    /// requested `events`, without blocking.
    fn revents(&self, fd: i32, events: i16) -> i16;
    /// [`Virtual::revents`] without system calls, from what the object holds itself: what a
    /// waiter uses before it sleeps on the kernel fds (`wait_on`) anyway, which would report
    /// the rest.
    fn revents_cheap(&self, fd: i32, events: i16) -> i16 {
        self.revents(fd, events)
    }
    /// While a thread blocks waiting for `events` on `fd`: which kernel fd and events to
    /// poll so that it wakes when the readiness may have changed. `None`: nothing to poll;
    /// the waiter re-checks [`Virtual::revents`] in short time slices.
    fn wait_on(&self, fd: i32, events: i16) -> Option<(i32, i16)>;
    /// A second kernel fd to sleep on beside `wait_on`'s (a pipe's doorbell).
    fn extra_wait(&self, _fd: i32, _events: i16) -> Option<(i32, i16)> {
        None
    }
    /// Readiness for `events` can change without anything to poll in the kernel (a pipe's
    /// writer waiting for space): the waiter re-checks in short time slices.
    fn needs_slices(&self, _fd: i32, _events: i16) -> bool {
        false
    }
    /// The object itself, for a caller that knows what it may be (`pipe::get`, which
    /// looks for a ring pipe).
    fn as_any(&self) -> &dyn Any;
    /// The thread is about to block on `wait_on` (e.g. ask writers to ring a doorbell).
    fn arm(&self, _fd: i32, _events: i16) {}
    /// The thread woke up (undo `arm`, drain doorbells).
    fn disarm(&self, _fd: i32, _events: i16) {}
    /// `new` now refers to the same open file as `old` (dup, dup2, dup3, F_DUPFD).
    fn dup(&self, _old: i32, _new: i32) {}
    /// The program closes `fd` (before the kernel descriptor is closed).
    fn close(&self, _fd: i32) {}
}

static MARK: [AtomicU8; MAX_FD] = [const { AtomicU8::new(0) }; MAX_FD];
static TABLE: RwLock<Vec<Option<Arc<dyn Virtual>>>> = RwLock::new(Vec::new());

/// Is `fd` one of ours? One relaxed load: the fast path of every interposed call.
#[inline]
pub fn is_virtual(fd: i32) -> bool {
    (fd as u32 as usize) < MAX_FD && MARK[fd as usize].load(Ordering::Relaxed) != 0
}

/// The object behind `fd`, if it is ours.
pub fn get(fd: i32) -> Option<Arc<dyn Virtual>> {
    if !is_virtual(fd) {
        return None;
    }
    // A signal handler that comes while this thread holds the table must not wait for it.
    let _c = crate::signal::crit();
    let t = TABLE.read().unwrap_or_else(|p| p.into_inner());
    t.get(fd as usize).and_then(|o| o.clone())
}

/// Make `fd` ours. Returns false (and leaves it a plain kernel fd) beyond [`MAX_FD`].
pub fn register(fd: i32, obj: Arc<dyn Virtual>) -> bool {
    if fd < 0 || fd as usize >= MAX_FD {
        return false;
    }
    let _c = crate::signal::crit();
    let mut t = TABLE.write().unwrap_or_else(|p| p.into_inner());
    if t.len() <= fd as usize {
        t.resize(fd as usize + 1, None);
    }
    t[fd as usize] = Some(obj);
    MARK[fd as usize].store(1, Ordering::Release);
    true
}

/// Forget `fd` (it was closed or replaced); returns what was behind it.
pub fn unregister(fd: i32) -> Option<Arc<dyn Virtual>> {
    if !is_virtual(fd) {
        return None;
    }
    let _c = crate::signal::crit();
    let mut t = TABLE.write().unwrap_or_else(|p| p.into_inner());
    MARK[fd as usize].store(0, Ordering::Release);
    t.get_mut(fd as usize).and_then(Option::take)
}

/// Every fd of ours with its object (for exec and exit handling).
pub fn all() -> Vec<(i32, Arc<dyn Virtual>)> {
    let _c = crate::signal::crit();
    let t = TABLE.read().unwrap_or_else(|p| p.into_inner());
    t.iter()
        .enumerate()
        .filter_map(|(fd, o)| o.clone().map(|o| (fd as i32, o)))
        .collect()
}

/// What [`before_block`] runs, once a module with something to send has said
/// ([`on_before_block`]).
static BEFORE_BLOCK: OnceLock<fn()> = OnceLock::new();

/// Have `f` run by every [`before_block`] from now on (`udp`, when it makes its first
/// batched socket: nothing is batched before that). The first caller's `f` stays.
pub fn on_before_block(f: fn()) {
    let _ = BEFORE_BLOCK.set(f);
}

/// Run before any interposed call blocks the thread in the kernel: what is batched for
/// later (UDP sends) goes out now, so a peer waiting for it is never held up by our wait.
pub fn before_block() {
    if let Some(f) = BEFORE_BLOCK.get() {
        f();
    }
}
