//! Producer-side notification, shared by the single producer ([`super::Writer`]) and the
//! multi-producer ([`crate::mp`]): publishing a position (the fast side of the sleep
//! handshake) and waking the readers sleeping on the eventcount.
//!
//! Owns: `publish_position`, `wake_all` and the spin budget before a party sleeps. Does
//! not own: when to wake (the moderation policy lives with each producer).

use super::{fences, Shared};
use crate::sys;
use std::sync::atomic::{AtomicU64, Ordering::*};

/// Spin iterations before a blocked party goes to sleep.
pub(crate) const SPIN_ROUNDS: u32 = 256;

/// The longest a blocked party (a reader waiting for data, a writer for room) spins
/// before it sleeps, when its recent waits were short: about what a sleep and the wake-up
/// cost in CPU (on a VM of our kind a futex wake-up with its IPI and the membarrier before
/// the sleep cost 20-50 us), so spinning never costs more than twice what sleeping would
/// (the classic competitive bound).
pub(crate) const SPIN_BUDGET_NS: u64 = 40_000;

/// Waits that skip the long spin after one found nothing: the other party could not make
/// progress meanwhile (it shares the CPU, or it was descheduled), so spinning again at
/// once would only take its time slice; every this many waits the spin is tried again.
pub(crate) const SPIN_BACKOFF: u32 = 32;

/// Publish a producer position (fast side of the sleep handshake); see [`fences`].
pub(crate) fn publish_position(word: &AtomicU64, v: u64) {
    fences::publish(word, v);
}

/// Clear the sleep bit, advance the eventcount and wake every reader sleeping on it.
pub(crate) fn wake_all(sh: &Shared) {
    let r = &sh.ctl().expect("producers map the control segment").r.0;
    let s = r.data_seq.load(Relaxed);
    // SYNC POINT: Release, pairs with the readers' SeqCst `fetch_or` of the sleep bit in
    // `Reader::wait` and `select` (an RMW reads the latest value, so a reader that sets the
    // bit after this store waits on the new word, not the old one): our earlier commits
    // are ordered before the changed word. Woken readers re-read write_pos with Acquire,
    // which is what actually publishes the data.
    r.data_seq.store((s | 1).wrapping_add(1), Release);
    sys::futex_wake(&r.data_seq, i32::MAX);
    // A consumer asleep on a readiness handle (`Reader::arm`) waits on the eventfd, not
    // the futex word. Its readiness is ordered after our commits like a futex wake-up.
    if let Some(w) = &sh.wake {
        w.signal();
    }
    sh.hdr().m.0.wakeups.fetch_add(1, Relaxed);
}
