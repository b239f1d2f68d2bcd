//! Test support shared by the crates that test rings (beltway's own tests and the
//! dataplane's channel tests): a watchdog that turns a deadlock into a loud failure.

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
