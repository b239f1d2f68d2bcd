//! Token and leaky buckets, kept as one word each so that any number of threads and
//! processes share them through atomics, with no lock a dying process could leave held.
//!
//! Owns: the arithmetic of a budget. A bucket of rate `r` bytes/s and depth `B` bytes is
//! kept as its *theoretical arrival time* (the GCRA form of a token bucket): `tat`, the
//! instant at which the bucket would be full again if nothing more were taken. At time
//! `now` it holds `B - max(0, tat - now)·r` tokens; taking `k` moves `tat` to
//! `max(tat, now) + k/r`. One compare-and-swap per call, exact over any time span (no
//! periodic refill whose rounding drifts), and a refund is a subtraction.
//!
//! - **token bucket** (`B` = the burst): idle time saves up to `B` bytes of credit.
//! - **leaky bucket**: the same with `B` one quantum deep, so what leaves is a steady
//!   stream at `r` whatever arrives (the seed: "a token bucket limited to one token").
//! - **token+leaky**: a token bucket followed by a leaky bucket at the peak rate: bursts
//!   are allowed, but drained at no more than the peak.
//!
//! Does not own waiting (see [`crate::shaper`]) or where the words live (a
//! [`crate::segment::Segment`], or a plain struct for the `shape` filter).

use std::sync::atomic::{AtomicU64, Ordering};

/// Below this many bytes, `bytes * 10^9` fits in a u64 and the arithmetic avoids 128-bit
/// division (a library call costing more than the rest of a shaped call).
const FAST: u64 = u64::MAX / 1_000_000_000;

/// Nanoseconds for `bytes` at `rate` bytes/s.
#[inline]
pub fn ns_for(bytes: u64, rate: u64) -> u64 {
    if bytes <= FAST {
        return bytes * 1_000_000_000 / rate;
    }
    ((bytes as u128 * 1_000_000_000) / rate as u128).min(u64::MAX as u128) as u64
}

/// [`ns_for`] rounded up: what taking or charging costs, so rounding never hands out more
/// than the rate.
#[inline]
pub fn ns_for_ceil(bytes: u64, rate: u64) -> u64 {
    if bytes <= FAST {
        return (bytes * 1_000_000_000).div_ceil(rate);
    }
    ((bytes as u128 * 1_000_000_000).div_ceil(rate as u128)).min(u64::MAX as u128) as u64
}

/// Bytes that `ns` nanoseconds earn at `rate`.
#[inline]
pub fn bytes_for(ns: u64, rate: u64) -> u64 {
    ((ns as u128 * rate as u128) / 1_000_000_000).min(u64::MAX as u128) as u64
}

/// One bucket's constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Bytes per second.
    pub rate: u64,
    /// Depth in bytes (the burst; one quantum for a leaky bucket).
    pub depth: u64,
}

impl Params {
    /// Tokens in a bucket whose arrival time is `tat`, at `now`.
    #[inline]
    pub fn tokens(&self, tat: u64, now: u64) -> u64 {
        if tat <= now {
            // idle since its last grant: full (the common case of a budget not reached)
            return self.depth;
        }
        let ns = (tat - now) as u128;
        let backlog = (ns * self.rate as u128)
            .div_ceil(1_000_000_000)
            .min(u64::MAX as u128) as u64;
        self.depth.saturating_sub(backlog)
    }

    /// When (ns) the bucket will hold `want` tokens (`want` at most the depth).
    #[inline]
    pub fn when(&self, tat: u64, want: u64) -> u64 {
        let want = want.min(self.depth);
        tat.saturating_sub(ns_for(self.depth - want, self.rate))
    }
}

/// What a bucket answers to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// This many bytes were taken (at least the minimum asked for).
    Got(u64),
    /// Not enough now; try again at this instant (ns).
    Wait(u64),
}

/// A bucket: its constants and the shared word that holds its arrival time.
pub struct Bucket<'a> {
    pub p: Params,
    pub tat: &'a AtomicU64,
}

impl Bucket<'_> {
    /// Take between `min` and `max` bytes at `now` (`min` is cut to the depth, so a large
    /// request is never refused for ever): as many as the bucket holds, up to `max`.
    pub fn take(&self, now: u64, min: u64, max: u64) -> Take {
        let min = min.min(self.p.depth).max(1).min(max.max(1));
        let mut cur = self.tat.load(Ordering::Acquire);
        loop {
            let have = self.p.tokens(cur, now);
            if have < min {
                return Take::Wait(self.p.when(cur, min));
            }
            let k = have.min(max);
            let next = cur.max(now) + ns_for_ceil(k, self.p.rate);
            match self
                .tat
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Take::Got(k),
                Err(c) => cur = c,
            }
        }
    }

    /// Reserve `k` bytes (at most the depth) at `now`: returns the instant at which they
    /// are the caller's. Reservations are served in the order they are made, which is what
    /// makes waiters of one level take turns (a bare `take` goes to whoever wakes first).
    pub fn reserve(&self, now: u64, k: u64) -> u64 {
        let k = k.min(self.p.depth).max(1);
        let mut cur = self.tat.load(Ordering::Acquire);
        loop {
            let at = self.p.when(cur, k).max(now);
            let next = cur.max(at) + ns_for_ceil(k, self.p.rate);
            match self
                .tat
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return at,
                Err(c) => cur = c,
            }
        }
    }

    /// Charge `bytes` whatever the bucket holds (a call already made on credit): later
    /// calls wait until the debt is paid off.
    pub fn charge(&self, now: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let d = ns_for_ceil(bytes, self.p.rate);
        let mut cur = self.tat.load(Ordering::Acquire);
        loop {
            let next = cur.max(now).saturating_add(d);
            match self
                .tat
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(c) => cur = c,
            }
        }
    }

    /// Give back `bytes` taken but not used (a read that returned less than granted).
    pub fn refund(&self, bytes: u64) {
        if bytes > 0 {
            self.tat.fetch_sub(
                ns_for(bytes, self.p.rate).min(self.tat.load(Ordering::Relaxed)),
                Ordering::AcqRel,
            );
        }
    }

    /// Has the bucket any tokens at `now` (may a call start on credit)?
    pub fn open(&self, now: u64) -> bool {
        self.p.tokens(self.tat.load(Ordering::Acquire), now) > 0
    }

    /// When (ns) it will have any tokens.
    pub fn opens_at(&self, _now: u64) -> u64 {
        self.p.when(self.tat.load(Ordering::Acquire), 1)
    }
}

/// The monotonic clock in nanoseconds (shared by every process of the machine, so one
/// bucket word means the same instant to all of them).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-parameter; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The monotonic clock as of the last tick (CLOCK_MONOTONIC_COARSE: the same clock as
/// [`now_ns`], never ahead of it and at most one tick behind, read in a few ns).
#[inline]
pub fn now_coarse() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-parameter; CLOCK_MONOTONIC_COARSE exists since Linux 2.6.32.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleep until the monotonic instant `at` (ns); returns early on a signal.
pub fn sleep_until(at: u64) {
    let ts = libc::timespec {
        tv_sec: (at / 1_000_000_000) as libc::time_t,
        tv_nsec: (at % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: ts is valid; a null remainder is allowed with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(rate: u64, depth: u64, tat: &AtomicU64) -> Bucket<'_> {
        Bucket {
            p: Params { rate, depth },
            tat,
        }
    }

    #[test]
    fn full_bucket_gives_its_depth_then_the_rate() {
        let tat = AtomicU64::new(0);
        let bk = b(1_000_000, 10_000, &tat);
        let t0 = 5_000_000_000;
        assert_eq!(bk.take(t0, 1, 1 << 30), Take::Got(10_000));
        // empty now: 1000 bytes take 1 ms
        match bk.take(t0, 1000, 1000) {
            Take::Wait(at) => assert_eq!(at, t0 + 1_000_000),
            t => panic!("{t:?}"),
        }
        assert_eq!(bk.take(t0 + 1_000_000, 1000, 1 << 30), Take::Got(1000));
        // a minimum beyond the depth is cut to the depth
        assert!(matches!(
            bk.take(t0 + 1_000_000, 1 << 40, 1 << 40),
            Take::Wait(_)
        ));
        assert_eq!(
            bk.take(t0 + 20_000_000, 1 << 40, 1 << 40),
            Take::Got(10_000)
        );
    }

    #[test]
    fn refund_and_charge() {
        let tat = AtomicU64::new(0);
        let bk = b(1000, 1000, &tat);
        let t0 = 10_000_000_000;
        assert_eq!(bk.take(t0, 1, 1000), Take::Got(1000));
        bk.refund(400);
        assert_eq!(bk.take(t0, 1, 1000), Take::Got(400));
        assert!(!bk.open(t0));
        bk.charge(t0, 2000); // debt: 2 s
        assert!(!bk.open(t0 + 2_000_000_000));
        assert!(bk.open(t0 + 3_000_000_000));
        // one token is back 1 ms after the debt has shrunk to the depth
        assert_eq!(bk.opens_at(t0), t0 + 2_001_000_000);
    }

    #[test]
    fn reservations_queue_in_order_at_the_rate() {
        let tat = AtomicU64::new(0);
        let bk = b(1_000_000, 4000, &tat);
        let t0 = 10_000_000_000;
        assert_eq!(bk.take(t0, 4000, 4000), Take::Got(4000));
        // three waiters reserve 2000 bytes each: 2, 4 and 6 ms from now, in that order
        let r: Vec<u64> = (0..3).map(|_| bk.reserve(t0, 2000) - t0).collect();
        assert_eq!(r, [0, 2_000_000, 4_000_000].map(|x| x + 2_000_000).to_vec());
        // a reservation on an idle, full bucket is immediate
        let tat2 = AtomicU64::new(0);
        assert_eq!(b(1000, 1000, &tat2).reserve(t0, 500), t0);
    }

    proptest::proptest! {
        /// Over any schedule of requests, what a bucket hands out up to time t never
        /// exceeds depth + rate·(t - t0): the promise a budget makes.
        #[test]
        fn never_more_than_depth_plus_rate(
            rate in 1u64..10_000_000, depth in 1u64..1_000_000,
            steps in proptest::collection::vec((0u64..5_000_000, 1u64..2_000_000, 1u64..2_000_000), 1..200)
        ) {
            let tat = AtomicU64::new(0);
            let bk = b(rate, depth, &tat);
            let t0 = 1_000_000_000u64;
            let mut now = t0;
            let mut got = 0u64;
            for (dt, a, c) in steps {
                now += dt;
                if let Take::Got(k) = bk.take(now, a.min(c), a.max(c)) {
                    proptest::prop_assert!(k >= a.min(c).min(depth));
                    proptest::prop_assert!(k <= a.max(c));
                    got += k;
                }
                let bound = depth as u128 + (rate as u128 * (now - t0) as u128) / 1_000_000_000 + 1;
                proptest::prop_assert!((got as u128) <= bound, "got {} > bound {}", got, bound);
            }
        }

        /// A greedy taker gets the rate: within one depth (plus rounding) of rate·elapsed.
        #[test]
        fn greedy_taker_gets_the_rate(rate in 1000u64..10_000_000, depth in 1000u64..100_000, n in 10usize..300) {
            let tat = AtomicU64::new(0);
            let bk = b(rate, depth, &tat);
            let t0 = 1_000_000_000u64;
            let mut now = t0;
            let mut got = 0u64;
            for _ in 0..n {
                match bk.take(now, 1, u64::MAX) {
                    Take::Got(k) => got += k,
                    Take::Wait(at) => now = at.max(now + 1),
                }
            }
            let earned = (rate as u128 * (now - t0) as u128 / 1_000_000_000) as u64 + depth;
            proptest::prop_assert!(got <= earned + 1);
            proptest::prop_assert!(got + depth + n as u64 + 2 >= earned - depth.min(earned), "got {} earned {}", got, earned);
        }
    }
}
