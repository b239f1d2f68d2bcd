//! Signals as the kernel would deliver them to a program whose pipes are rings.
//!
//! Owns two things the kernel gets for free because a system call is indivisible:
//!
//! - **Restart or EINTR** (man 7 signal, "Interruption of system calls and library
//!   functions by signal handlers"): a read or write blocked on a kernel pipe that a
//!   handler interrupts is restarted when the handler was installed with SA_RESTART and
//!   fails with EINTR otherwise; `poll`, `select` and `epoll_wait` fail with EINTR either
//!   way. A ring pipe blocks in user space and sleeps in `ppoll`, which always says EINTR,
//!   so the library must know whether the handlers that ran had SA_RESTART. The program's
//!   handlers are installed through the interposed `sigaction`/`signal` (ffi) as one
//!   trampoline; this module keeps the program's own actions (`set_action`, `action`) and,
//!   per thread, how many handlers ran and how many of them without SA_RESTART
//!   ([`marks`], [`since`]).
//! - **No handler inside the library's locks**: a handler that writes to a ring pipe while
//!   its thread holds the fd table's lock (or a pipe's) would wait for itself. While a
//!   thread is inside a [`crit`] section, the trampoline only notes an asynchronous signal
//!   (`defer`); the handler runs when the section ends, with the signal's mask, as if the
//!   signal had come a moment later. Synchronous faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
//!   SIGTRAP, SIGSYS) are never deferred.
//!
//! Safe: the C side (the trampoline, calling a handler, `sigaction`) is `ffi::sig`'s,
//! which registers the runner of deferred signals ([`set_runner`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Signal numbers 1..NSIG.
pub const NSIG: usize = 65;

/// An action word: the handler's address in the low bits, flags in the top three.
const F_PRESENT: u64 = 1 << 63;
const F_SIGINFO: u64 = 1 << 62;
const F_RESTART: u64 = 1 << 61;
const ADDR: u64 = (1 << 61) - 1;

/// The program's handler for each signal, when the trampoline stands in for it (0: none).
/// One word each, so the trampoline reads a consistent action without a lock.
static ACTIONS: [AtomicU64; NSIG] = [const { AtomicU64::new(0) }; NSIG];

/// The program's handler as it installed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    /// The handler's address (`sa_handler` or `sa_sigaction`).
    pub handler: usize,
    /// It takes (sig, siginfo, context): SA_SIGINFO.
    pub siginfo: bool,
    /// SA_RESTART.
    pub restart: bool,
}

fn valid(sig: i32) -> bool {
    sig > 0 && (sig as usize) < NSIG
}

/// The trampoline now stands in for `a` on `sig`.
pub fn set_action(sig: i32, a: Action) {
    if !valid(sig) || a.handler as u64 & !ADDR != 0 {
        return;
    }
    let mut w = F_PRESENT | a.handler as u64;
    if a.siginfo {
        w |= F_SIGINFO;
    }
    if a.restart {
        w |= F_RESTART;
    }
    ACTIONS[sig as usize].store(w, Ordering::Release);
}

/// The program's handler for `sig` is no longer the trampoline's (SIG_DFL, SIG_IGN).
pub fn clear_action(sig: i32) {
    if valid(sig) {
        ACTIONS[sig as usize].store(0, Ordering::Release);
    }
}

/// The program's handler behind the trampoline for `sig`.
pub fn action(sig: i32) -> Option<Action> {
    if !valid(sig) {
        return None;
    }
    let w = ACTIONS[sig as usize].load(Ordering::Acquire);
    (w & F_PRESENT != 0).then_some(Action {
        handler: (w & ADDR) as usize,
        siginfo: w & F_SIGINFO != 0,
        restart: w & F_RESTART != 0,
    })
}

/// A handler's address fits an action word (user-space addresses do).
pub fn fits(handler: usize) -> bool {
    handler as u64 & !ADDR == 0
}

/// Saved `siginfo_t` (128 bytes) of a deferred signal.
pub type Info = [u64; 16];

thread_local! {
    /// Handlers run on this thread, and how many of them without SA_RESTART.
    static RAN: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
    /// Depth of `crit` sections on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Deferred signals (bit `sig - 1`) and their siginfo.
    static PENDING: Cell<u64> = const { Cell::new(0) };
    static INFO: [Cell<Info>; NSIG] = const { [const { Cell::new([0; 16]) }; NSIG] };
}

/// What had run on this thread at some moment (see [`since`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marks(u32, u32);

/// Now.
pub fn marks() -> Marks {
    let (a, b) = RAN.with(Cell::get);
    Marks(a, b)
}

/// A handler is about to run on this thread (the trampoline calls this).
pub fn note_ran(restart: bool) {
    RAN.with(|c| {
        let (a, b) = c.get();
        c.set((a.wrapping_add(1), b.wrapping_add(!restart as u32)));
    });
}

/// What a blocking call interrupted since `m` does, as the kernel would decide it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    /// No handler of the program ran.
    Nothing,
    /// Handlers ran, all with SA_RESTART: a read or write goes on.
    Restart,
    /// A handler without SA_RESTART ran: EINTR (or the count done so far).
    Interrupt,
}

/// Which handlers ran on this thread since `m`.
pub fn since(m: Marks) -> Since {
    let now = marks();
    if now.1 != m.1 {
        Since::Interrupt
    } else if now.0 != m.0 {
        Since::Restart
    } else {
        Since::Nothing
    }
}

/// A blocking wait of a read or write failed with `EINTR`: go on (`Ok`) or give up with
/// EINTR (`Err`), as the kernel would have for a pipe. A wake-up no handler of the
/// program's explains (a handler installed behind the library's back) is EINTR, as
/// before the library knew better.
pub fn restart_after_eintr(m: Marks) -> Result<(), i32> {
    match since(m) {
        Since::Restart => Ok(()),
        _ => Err(libc::EINTR),
    }
}

/// Signals that report a fault of the instruction just run: never deferred (the
/// instruction would fault again).
fn synchronous(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP | libc::SIGSYS
    )
}

/// The trampoline got `sig`: if this thread is inside a [`crit`] section, keep it for
/// the section's end and return true.
pub fn defer(sig: i32, info: &Info) -> bool {
    if !valid(sig) || synchronous(sig) || DEPTH.with(Cell::get) == 0 {
        return false;
    }
    INFO.with(|i| i[sig as usize].set(*info));
    PENDING.with(|p| p.set(p.get() | 1u64 << (sig - 1)));
    true
}

/// The next deferred signal of this thread, taken off the list.
pub fn take_pending() -> Option<(i32, Info)> {
    let p = PENDING.with(Cell::get);
    if p == 0 {
        return None;
    }
    let sig = p.trailing_zeros() as i32 + 1;
    PENDING.with(|c| c.set(p & !(1u64 << (sig - 1))));
    Some((sig, INFO.with(|i| i[sig as usize].get())))
}

/// What runs the signals deferred on a thread when its [`crit`] section ends: the C side's
/// (`ffi::sig`), which says so ([`set_runner`]) before it first installs the trampoline. A
/// signal is only ever deferred by the trampoline, so the runner is known by then.
static RUNNER: OnceLock<fn()> = OnceLock::new();

/// `run` runs the deferred signals of the calling thread, each with its saved siginfo
/// ([`take_pending`]). The first caller's `run` stays.
pub fn set_runner(run: fn()) {
    let _ = RUNNER.set(run);
}

/// A stretch of the library's work during which this thread holds a lock another
/// library call may take (the fd table, a pipe's list of fds, a ring's lock): the
/// program's handlers wait for its end.
pub struct Crit(());

/// Enter a [`Crit`] section (sections nest).
pub fn crit() -> Crit {
    DEPTH.with(|d| d.set(d.get() + 1));
    Crit(())
}

impl Drop for Crit {
    fn drop(&mut self) {
        let left = DEPTH.with(|d| {
            let v = d.get() - 1;
            d.set(v);
            v
        });
        if left == 0 && PENDING.with(Cell::get) != 0 {
            if let Some(run) = RUNNER.get() {
                run();
            }
        }
    }
}

/// A mutex of the library, locked inside a [`Crit`] section (the guard goes first, then
/// the section ends).
pub struct Locked<'a, T> {
    guard: std::sync::MutexGuard<'a, T>,
    _crit: Crit,
}

/// Lock `m` (a poisoned lock is taken as it is: the library never leaves data half made).
pub fn lock<T>(m: &std::sync::Mutex<T>) -> Locked<'_, T> {
    let crit = crit();
    Locked {
        guard: m.lock().unwrap_or_else(|p| p.into_inner()),
        _crit: crit,
    }
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip_through_one_word() {
        let a = Action {
            handler: 0x7f12_3456_7890,
            siginfo: true,
            restart: false,
        };
        set_action(libc::SIGUSR1, a);
        assert_eq!(action(libc::SIGUSR1), Some(a));
        clear_action(libc::SIGUSR1);
        assert_eq!(action(libc::SIGUSR1), None);
        assert_eq!(action(0), None);
        assert_eq!(action(NSIG as i32), None);
        assert!(!fits(usize::MAX));
    }

    #[test]
    fn restart_only_when_every_handler_that_ran_had_sa_restart() {
        let m = marks();
        assert_eq!(since(m), Since::Nothing);
        assert_eq!(restart_after_eintr(m), Err(libc::EINTR));
        note_ran(true);
        assert_eq!(since(m), Since::Restart);
        assert_eq!(restart_after_eintr(m), Ok(()));
        note_ran(false);
        note_ran(true);
        assert_eq!(since(m), Since::Interrupt);
        assert_eq!(restart_after_eintr(m), Err(libc::EINTR));
    }

    #[test]
    fn signals_wait_for_the_end_of_a_section_but_faults_do_not() {
        let info = [7u64; 16];
        assert!(!defer(libc::SIGALRM, &info), "outside a section: run now");
        let c = crit();
        let inner = crit();
        assert!(defer(libc::SIGALRM, &info));
        assert!(defer(libc::SIGUSR2, &info));
        assert!(!defer(libc::SIGSEGV, &info), "a fault is never deferred");
        drop(inner);
        // Still inside the outer section: nothing ran.
        assert_eq!(PENDING.with(Cell::get).count_ones(), 2);
        std::mem::forget(c);
        DEPTH.with(|d| d.set(0));
        assert_eq!(
            take_pending(),
            Some((libc::SIGUSR2.min(libc::SIGALRM), info))
        );
        assert_eq!(
            take_pending(),
            Some((libc::SIGUSR2.max(libc::SIGALRM), info))
        );
        assert_eq!(take_pending(), None);
    }
}
