//! Waiting for a budget: the seed's reactor semantics for one call, run by the calling
//! thread itself against the shared segment.
//!
//! Owns: how a call gets its tokens.
//! - A **network call** waits until its budget holds at least a quantum (or its whole
//!   length, if smaller) and is then *cut* to what the budget holds; bytes granted but
//!   not moved (a short read) are refunded. This is back-pressure with POSIX semantics: a
//!   shorter read or write is always a legal answer.
//! - A **disk call** waits until the budget is open (not in debt), runs on credit, and
//!   pays afterwards what it cost: its bytes, or (device cost) its bytes weighted by the
//!   measured time per byte.
//! - **Turns**: a call that found the budget short waits, then *reserves* one quantum
//!   (GCRA reservation: served in the order reserved), so callers of one level take turns
//!   instead of the first to wake taking everything.
//! - **Priorities**: while a waiter of a more urgent level is waiting for the same budget
//!   (it marked the level's board word within the last [`FRESH_NS`]), a call does not take
//!   tokens. Waiters re-mark every [`SLICE_NS`], so a waiter that died stops counting
//!   within a few milliseconds: nobody is blocked by a dead process.
//!
//! Does not own the buckets' arithmetic (`bucket`), the policy (`config`) or which calls
//! are shaped (the interposition library and the seccomp supervisor decide).

use crate::bucket::{now_ns, sleep_until, Bucket, Take};
use crate::config::{DiskCost, Resource, LEVELS};
use crate::segment::Shared;
use std::sync::atomic::Ordering;

/// Longest sleep between two looks at the board and the bucket.
pub const SLICE_NS: u64 = 2_000_000;
/// How long a board mark counts.
pub const FRESH_NS: u64 = 3 * SLICE_NS;

/// Disk tokens a process has prepaid from a shared budget, spent by its calls without
/// touching the segment (the per-call cost of shaping a page-cache read would otherwise
/// be a clock read and two shared atomics: a tenth of the call). A lease is one quantum
/// of the rate (2 ms), at most [`LEASE_MAX`]; a process can run at most one lease ahead
/// of the budget or of a more urgent waiter.
#[derive(Default)]
pub struct DiskLease {
    /// Prepaid tokens left (negative: spent beyond the lease, paid at the next refill).
    pool: std::sync::atomic::AtomicI64,
    /// Size of the current lease.
    prepaid: std::sync::atomic::AtomicU64,
}

impl DiskLease {
    pub const fn new() -> DiskLease {
        DiskLease {
            pool: std::sync::atomic::AtomicI64::new(0),
            prepaid: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Has the process prepaid tokens left? Then a disk call may go without a look at the
    /// shared budget (or its policy: an edit is felt from the next lease on).
    #[inline]
    pub fn has_credit(&self) -> bool {
        self.pool.load(Ordering::Relaxed) > 0
    }

    /// A call that went on credit moved `moved` bytes.
    #[inline]
    pub fn spend(&self, moved: u64) {
        self.pool.fetch_sub(moved as i64, Ordering::Relaxed);
    }

    /// In a forked child: the parent's lease is the parent's (spending it twice would
    /// overdraw the budget).
    pub fn forget(&self) {
        self.pool.store(0, Ordering::Relaxed);
        self.prepaid.store(0, Ordering::Relaxed);
    }
}

/// Largest disk lease.
pub const LEASE_MAX: u64 = 1 << 20;

fn lease_size(rate: u64) -> u64 {
    crate::config::quantum(rate).min(LEASE_MAX)
}

/// A view of one segment's budgets.
#[derive(Clone, Copy)]
pub struct Shaper<'a> {
    pub shared: &'a Shared,
    /// The policy as of this view's making (one copy per call: it may be edited live).
    pub config: crate::config::Config,
}

impl<'a> Shaper<'a> {
    pub fn new(shared: &'a Shared) -> Self {
        Shaper {
            shared,
            config: shared.config(),
        }
    }

    /// Is `r` limited at all? (Unlimited budgets cost a call nothing but this load.)
    pub fn limited(&self, r: Resource) -> bool {
        self.config.limit(r).is_limited()
    }

    fn buckets(&self, r: Resource) -> [Option<Bucket<'a>>; 2] {
        let ps = self.config.limit(r).buckets();
        let t = &self.shared.tat[r as usize];
        [
            ps[0].map(|p| Bucket { p, tat: &t[0] }),
            ps[1].map(|p| Bucket { p, tat: &t[1] }),
        ]
    }

    fn more_urgent_waiting(&self, r: Resource, prio: u8, now: u64) -> bool {
        self.shared.board[r as usize][..prio.min(LEVELS as u8 - 1) as usize]
            .iter()
            .any(|w| now.saturating_sub(w.load(Ordering::Relaxed)) < FRESH_NS)
    }

    fn mark(&self, r: Resource, prio: u8, now: u64) {
        self.shared.board[r as usize][prio.min(LEVELS as u8 - 1) as usize]
            .fetch_max(now, Ordering::Relaxed);
    }

    /// Try once at `now`: take between `min` and `max` bytes from every bucket of `r`.
    pub fn try_take(&self, r: Resource, now: u64, min: u64, max: u64) -> Take {
        let [a, b] = self.buckets(r);
        let Some(a) = a else { return Take::Got(max) };
        match a.take(now, min, max) {
            Take::Wait(at) => Take::Wait(at),
            Take::Got(k) => match b {
                None => Take::Got(k),
                Some(b) => match b.take(now, min.min(k), k) {
                    Take::Got(k2) => {
                        a.refund(k - k2);
                        Take::Got(k2)
                    }
                    Take::Wait(at) => {
                        a.refund(k);
                        Take::Wait(at)
                    }
                },
            },
        }
    }

    /// A network call of `len` bytes at priority `prio`: wait, then return how many bytes
    /// it may move (at least 1, at most `len`). Settle with [`Shaper::net_done`].
    pub fn net_grant(&self, prio: u8, len: u64) -> u64 {
        let r = Resource::Net;
        if !self.limited(r) || len == 0 {
            return len;
        }
        let q = crate::config::quantum(self.config.net.rate);
        let start = now_ns();
        let mut now = start;
        let mut waited = false;
        loop {
            if !self.more_urgent_waiting(r, prio, now) {
                if waited {
                    // a waiter queues: one quantum reserved in every bucket, served in
                    // the order of reservation, so equal waiters take turns
                    let k = q.min(len);
                    let at = self
                        .buckets(r)
                        .iter()
                        .flatten()
                        .map(|b| b.reserve(now, k))
                        .max()
                        .unwrap_or(now);
                    sleep_until(at);
                    self.count(r, true, start, at.max(now));
                    return k;
                }
                if let Take::Got(k) = self.try_take(r, now, q.min(len), len) {
                    self.count(r, waited, start, now);
                    return k;
                }
            }
            let at = match self.try_peek(r, q.min(len)) {
                Some(at) => at.min(now + SLICE_NS).max(now + 20_000),
                None => now + SLICE_NS,
            };
            self.mark(r, prio, now);
            waited = true;
            sleep_until(at);
            now = now_ns();
        }
    }

    /// When the first bucket of `r` will hold `want` tokens.
    fn try_peek(&self, r: Resource, want: u64) -> Option<u64> {
        let [a, b] = self.buckets(r);
        let a = a?;
        let t = a.p.when(a.tat.load(Ordering::Acquire), want);
        Some(match b {
            Some(b) => t.max(b.p.when(b.tat.load(Ordering::Acquire), want)),
            None => t,
        })
    }

    /// The network call granted `granted` moved `moved` bytes: refund the rest, or (a
    /// datagram, which is never cut) charge what it moved beyond the grant as debt.
    pub fn net_done(&self, granted: u64, moved: u64) {
        let r = Resource::Net;
        if !self.limited(r) {
            return;
        }
        let now = now_ns();
        for b in self.buckets(r).into_iter().flatten() {
            if moved > granted {
                b.charge(now, moved - granted);
            } else {
                b.refund(granted - moved);
            }
        }
        self.shared.stats[r as usize]
            .bytes
            .fetch_add(moved, Ordering::Relaxed);
    }

    /// Before a disk call at priority `prio`: wait until the budget is out of debt.
    pub fn disk_begin(&self, prio: u8) -> u64 {
        let r = Resource::Disk;
        let start = now_ns();
        if !self.limited(r) {
            return start;
        }
        let mut now = start;
        let mut waited = false;
        loop {
            let bs = self.buckets(r);
            if !self.more_urgent_waiting(r, prio, now) && bs.iter().flatten().all(|b| b.open(now)) {
                self.count(r, waited, start, now);
                return now;
            }
            let at = bs
                .iter()
                .flatten()
                .map(|b| b.opens_at(now))
                .max()
                .unwrap_or(now);
            self.mark(r, prio, now);
            waited = true;
            sleep_until(at.min(now + SLICE_NS).max(now + 20_000));
            now = now_ns();
        }
    }

    /// After a disk call that began at `began` (from [`Shaper::disk_begin`]) and moved
    /// `moved` bytes: pay its cost. Returns the tokens charged.
    pub fn disk_done(&self, began: u64, moved: u64) -> u64 {
        let r = Resource::Disk;
        if !self.limited(r) {
            return 0;
        }
        let s = &self.shared.stats[r as usize];
        s.bytes.fetch_add(moved, Ordering::Relaxed);
        // bytes cost: charged as of the call's start (no second clock read per call)
        let (at, cost) = match self.config.disk_cost() {
            DiskCost::Bytes => (began, moved),
            DiskCost::Device => {
                let now = now_ns();
                let cost = (moved as f64 * device_weight(now.saturating_sub(began), moved)) as u64;
                s.tokens.fetch_add(cost, Ordering::Relaxed);
                (now, cost)
            }
        };
        for b in self.buckets(r).into_iter().flatten() {
            b.charge(at, cost);
        }
        cost
    }

    /// A disk call under a process-local [`DiskLease`]: while the process still holds
    /// prepaid tokens, the call goes at once with no clock read and nothing shared
    /// touched; otherwise it waits as [`Shaper::disk_begin`] and prepays the next lease.
    /// Settle with [`Shaper::disk_done_leased`]. Device-cost budgets, which time every
    /// call, take the plain path.
    pub fn disk_begin_leased(&self, lease: &DiskLease, prio: u8) -> u64 {
        if self.config.disk_cost() != DiskCost::Bytes {
            return self.disk_begin(prio);
        }
        if lease.pool.load(Ordering::Relaxed) > 0 {
            return 0;
        }
        let now = self.disk_begin(prio);
        let size = lease_size(self.config.disk.rate);
        // SYNC POINT: what the lease's users spent since the last refill is read and
        // replaced in one step (a concurrent call's spending lands before or after it).
        let left = lease.pool.swap(size as i64, Ordering::AcqRel);
        let prepaid = lease.prepaid.swap(size, Ordering::AcqRel);
        let spent = (prepaid as i64 - left).max(0) as u64;
        // the debt beyond the old lease, and the new lease, are paid now
        let owed = size + (-left).max(0) as u64;
        for b in self.buckets(Resource::Disk).into_iter().flatten() {
            b.charge(now, owed);
        }
        self.shared.stats[Resource::Disk as usize]
            .bytes
            .fetch_add(spent, Ordering::Relaxed);
        now
    }

    /// After a disk call begun with [`Shaper::disk_begin_leased`] that moved `moved`
    /// bytes. Returns the tokens it cost.
    pub fn disk_done_leased(&self, lease: &DiskLease, began: u64, moved: u64) -> u64 {
        if self.config.disk_cost() != DiskCost::Bytes {
            return self.disk_done(began, moved);
        }
        lease.spend(moved);
        moved
    }

    /// Hand back a lease (at exit): what it spent goes into the counters, what it did not
    /// is refunded.
    pub fn disk_lease_return(&self, lease: &DiskLease) {
        let left = lease.pool.swap(0, Ordering::AcqRel);
        let prepaid = lease.prepaid.swap(0, Ordering::AcqRel);
        let spent = (prepaid as i64 - left).max(0) as u64;
        self.shared.stats[Resource::Disk as usize]
            .bytes
            .fetch_add(spent, Ordering::Relaxed);
        if left > 0 {
            for b in self.buckets(Resource::Disk).into_iter().flatten() {
                b.refund(left as u64);
            }
        }
    }

    fn count(&self, r: Resource, waited: bool, start: u64, now: u64) {
        let s = &self.shared.stats[r as usize];
        s.calls.fetch_add(1, Ordering::Relaxed);
        if waited {
            s.waits.fetch_add(1, Ordering::Relaxed);
            s.wait_ns.fetch_add(now - start, Ordering::Relaxed);
        }
    }
}

/// The seed's disk weight from the time a call took per byte: 0 for a page-cache hit,
/// 0.1 for the disk's cache, 1 for sequential access, 5 for a seek. The thresholds are in
/// nanoseconds per byte: a page-cache copy runs at several GB/s (under 0.5 ns/B, counting
/// the system call), a device's cache at about a GB/s, sequential media at hundreds of
/// MB/s, and a seek costs milliseconds whatever the size (over 50 ns/B for calls up to
/// 100 KiB).
pub fn device_weight(ns: u64, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    let per_byte = ns as f64 / bytes as f64;
    if per_byte < 0.5 {
        0.0
    } else if per_byte < 2.0 {
        0.1
    } else if per_byte < 50.0 {
        1.0
    } else {
        5.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Kind, Limit};
    use crate::segment::Segment;

    fn seg(net: &str, kind: Kind) -> Segment {
        Segment::create_private(Config {
            net: Limit::parse("net", net, kind, None).unwrap(),
            disk: Limit::parse("disk", "1M", Kind::Token, None).unwrap(),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn grants_are_cut_to_the_budget() {
        let s = seg("1MB/s:16KiB", Kind::Token);
        let sh = Shaper::new(s.shared());
        // a full bucket: the first call of 1 MiB is cut to the burst
        assert_eq!(sh.net_grant(0, 1 << 20), 16 * 1024);
        sh.net_done(16 * 1024, 16 * 1024);
        // a small call fits once enough has trickled in
        let k = sh.net_grant(0, 100);
        assert_eq!(k, 100);
        sh.net_done(100, 40);
        assert_eq!(
            s.shared().stats[0].bytes.load(Ordering::Relaxed),
            16 * 1024 + 40
        );
        assert!(s.shared().stats[0].waits.load(Ordering::Relaxed) >= 1);
    }

    #[test]
    fn a_more_urgent_waiter_goes_first() {
        let s = seg("1MB/s", Kind::Token);
        let sh = Shaper::new(s.shared());
        let now = now_ns();
        sh.mark(Resource::Net, 1, now);
        assert!(sh.more_urgent_waiting(Resource::Net, 5, now));
        assert!(!sh.more_urgent_waiting(Resource::Net, 1, now));
        assert!(!sh.more_urgent_waiting(Resource::Net, 0, now));
        // the mark goes stale: a dead waiter blocks nobody
        assert!(!sh.more_urgent_waiting(Resource::Net, 5, now + FRESH_NS + 1));
    }

    #[test]
    fn disk_runs_on_credit_and_pays_after() {
        let s = seg("1M", Kind::Token);
        let sh = Shaper::new(s.shared());
        let t = sh.disk_begin(0);
        assert_eq!(sh.disk_done(t, 2_000_000), 2_000_000);
        // now 2 MB in debt at 1 MB/s: the next call waits about two seconds minus the burst
        let t0 = now_ns();
        let b = sh.buckets(Resource::Disk)[0].as_ref().unwrap().opens_at(t0);
        assert!(
            b > t0 + 1_900_000_000 && b < t0 + 2_100_000_000,
            "{}",
            b - t0
        );
    }

    #[test]
    fn weights() {
        assert_eq!(device_weight(1000, 1 << 20), 0.0);
        assert_eq!(device_weight(1_000_000, 1 << 20), 0.1);
        assert_eq!(device_weight(10_000_000, 1 << 20), 1.0);
        assert_eq!(device_weight(8_000_000, 4096), 5.0);
    }

    #[test]
    fn threads_share_one_rate() {
        // Four threads taking as fast as they can on one simulated clock (each attempt
        // advances it 1 us, so no thread's scheduling changes what the bucket sees): together
        // they get the rate, from above exactly (burst + rate*t) and from below within one
        // quantum (nothing is lost while takers keep coming).
        let s = seg("4MB/s:16KiB", Kind::Token);
        let sh = Shaper::new(s.shared());
        let start = now_ns();
        let clock = std::sync::atomic::AtomicU64::new(0);
        let total = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    for _ in 0..50_000 {
                        let now = start + clock.fetch_add(1_000, Ordering::Relaxed);
                        let q = crate::config::quantum(4_000_000);
                        if let Take::Got(k) = sh.try_take(Resource::Net, now, q, 64 * 1024) {
                            total.fetch_add(k, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let secs = clock.load(Ordering::Relaxed) as f64 / 1e9;
        let got = total.load(Ordering::Relaxed) as f64;
        let (burst, rate, q) = (16.0 * 1024.0, 4e6, crate::config::quantum(4_000_000) as f64);
        assert!(got <= burst + rate * secs + 1.0, "{got} in {secs} s");
        assert!(got >= rate * secs - q, "{got} in {secs} s: below the rate");
    }

    #[test]
    fn net_grants_of_threads_never_exceed_one_rate() {
        // four threads pulling through net_grant (waiting on the real clock) for 300 ms
        let s = seg("4MB/s:16KiB", Kind::Token);
        let sh = Shaper::new(s.shared());
        let start = now_ns();
        let total = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    while now_ns() - start < 300_000_000 {
                        let k = sh.net_grant(0, 64 * 1024);
                        sh.net_done(k, k);
                        total.fetch_add(k, Ordering::Relaxed);
                    }
                });
            }
        });
        let secs = (now_ns() - start) as f64 / 1e9;
        let got = total.load(Ordering::Relaxed) as f64;
        // bucket arithmetic bounds it from above exactly: burst + rate·t (from below, a
        // real clock bounds nothing: see threads_share_one_rate)
        assert!(got <= 16.0 * 1024.0 + 4e6 * secs + 1.0, "{got} in {secs}");
    }
}
