//! Test support shared by the crates that test rings (beltway's own tests and the
//! dataplane's channel tests, capi's): a watchdog that turns a deadlock into a loud failure,
//! and [`wait_asleep`], which waits until another thread or process blocked in the kernel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Aborts the whole test process (with a message naming the test) if the guard is not
/// dropped within `secs`: a deadlock (a writer waiting for a reader that never reads)
/// fails loudly instead of hanging CI.
pub struct Watchdog {
    done: Arc<AtomicBool>,
}

/// Starts a [`Watchdog`] for the test `name`.
pub fn watchdog(name: &'static str, secs: u64) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            if d.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("WATCHDOG: test '{name}' did not finish within {secs}s (deadlock?); aborting");
        std::process::abort();
    });
    Watchdog { done }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// The id of the calling thread (its gettid(2), read from /proc/thread-self, which links
/// to `PID/task/TID`), for [`wait_asleep`] from another thread.
pub fn this_thread() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name()
        .and_then(|t| t.to_str()?.parse().ok())
        .unwrap_or_else(|| panic!("/proc/thread-self links to {link:?}"))
}

/// What thread `tid` of process `pid` is doing now: its state letter (`R` running, `S`
/// asleep in the kernel, `Z` ended, ...) and the kernel function it waits in (its
/// wchan: `futex_do_wait`, `pipe_read`, `do_sys_poll`, ...). None once it is gone.
pub fn task_state(pid: u32, tid: u32) -> Option<(char, String)> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
    let wchan = std::fs::read_to_string(format!("{dir}/wchan")).unwrap_or_default();
    Some((state, wchan))
}

/// Waits until thread `tid` of process `pid` (for a single-threaded process, `tid` is
/// `pid`) is asleep in the kernel (state S) in a function whose name contains `wchan`
/// (`"futex"`: blocked on a ring's futex word; `""`: any sleep). This is how a test knows
/// the other side blocked (a reader waiting for data, a writer for room) before it acts,
/// instead of sleeping and hoping. Fails after 30 s, or at once if the thread ended,
/// saying what it was last seen doing.
pub fn wait_asleep(pid: u32, tid: u32, wchan: &str) {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = task_state(pid, tid);
        match &seen {
            Some(('S', w)) if w.contains(wchan) => return,
            Some(('Z' | 'X', _)) | None => {
                panic!("thread {tid} of process {pid} ended before it blocked in {wchan:?} (last seen: {seen:?})")
            }
            _ => {}
        }
        assert!(
            Instant::now() < until,
            "thread {tid} of process {pid} did not block in {wchan:?} within 30 s; last seen (state, wchan): {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
