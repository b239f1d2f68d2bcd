//! How far the lossless readers have released, which is what a producer waits on: the
//! control segment's small lock (reader attach against producer re-scan), the scan of the
//! reader slots (reaping dead readers), MRP's shared pointer R, the producer's
//! [`ReleaseCache`], and the writer's sleep until readers make room.
//!
//! Owns: the producer side of the space handshake and freeing reader slots. Used by both
//! producers ([`super::Writer`], [`crate::mp::MpWriter`]) and by readers attaching.

use super::notify::{SPIN_BACKOFF, SPIN_BUDGET_NS, SPIN_ROUNDS};
use super::{fences, Shared, SyncMode};
use crate::error::{Error, Result};
use crate::layout::*;
use crate::sys::{self, Wake};
use std::sync::atomic::{AtomicU32, Ordering::*};

impl Shared {
    /// Lock the control segment's small lock (reader attach vs. writer re-scan).
    pub(super) fn lock_ctl(&self) -> Option<PidLock<'_>> {
        Some(PidLock::take(&self.ctl()?.lock.0))
    }

    /// Minimum position over lossless readers, reaping dead ones when `reap`.
    /// Returns None when no lossless reader is attached.
    pub(super) fn scan_min(&self, reap: bool) -> Option<u64> {
        let mut min = None;
        for i in 0..self.max_readers {
            let s = self.slot(i)?;
            // SYNC POINT: Acquire, pairs with the Release store of SLOT_ACTIVE in
            // `Reader::attach` (the slot's pid, start, pos and lossy are then the new
            // reader's) and with the AcqRel swap to SLOT_FREE in `release_slot` (a reader
            // that left finished its loads of the data before).
            if s.state.load(Acquire) != SLOT_ACTIVE {
                continue;
            }
            if reap && !sys::process_alive(s.pid.load(Relaxed), s.start.load(Relaxed)) {
                self.release_slot(s);
                continue;
            }
            if s.lossy.load(Relaxed) != 0 {
                continue;
            }
            // SYNC POINT: Acquire, pairs with the Release (or SeqCst) store of the position
            // in `fences::publish` from `Reader::release_position`: the reader's loads of
            // the data below it happened before we overwrite it.
            let p = s.pos.load(Acquire);
            min = Some(min.map_or(p, |m: u64| m.min(p)));
        }
        min
    }

    /// How far every lossless reader has released, without waiting (re-scans under the
    /// control lock when the cache may be stale). `u64::MAX` when nothing constrains.
    pub(crate) fn released_now(&self, cache: &mut ReleaseCache) -> u64 {
        if self.sync == SyncMode::Frp {
            return u64::MAX;
        }
        let ctl = self.ctl().expect("producers map the control segment");
        let _g = self.lock_ctl();
        cache.gen = ctl.r.0.attached_ever.load(Relaxed);
        // The sync modes differ only in what bounds the producer (every lossless reader's
        // slot for SRP, the shared pointer R for MRP, nothing for FRP), inside one locking
        // and sleeping protocol, so they stay `match` arms here rather than a trait per mode:
        // split into implementations, the handshake below would be spread over three places.
        let min = match self.sync {
            SyncMode::Srp => self.scan_min(false),
            // SYNC POINT: Acquire, pairs with the AcqRel decrement in `release_slot`: a
            // reader that left finished its loads before we treat its data as free.
            _ if ctl.r.0.active.load(Acquire) == 0 => None,
            // SYNC POINT: Acquire, pairs with the readers' AcqRel/SeqCst `fetch_max` of R
            // (`Reader::attach`, `release_position`, `wait`): their loads of the data below
            // R happened before we overwrite it.
            _ => Some(ctl.w.0.mrp_r.load(Acquire)),
        };
        if min.is_none() && self.sync == SyncMode::Srp && cache.gen > 0 {
            // Every reader left: the next write reports the broken pipe; do not cache
            // "unconstrained".
            cache.gen = u32::MAX;
            return 0;
        }
        cache.min = min.unwrap_or(u64::MAX);
        self.hdr().p.0.guard.store(cache.min, Relaxed);
        cache.min
    }

    /// Block until every lossless reader (SRP) or the shared pointer R (MRP) has passed
    /// `need`. `slack` asks for that much more before waking, to batch wake-ups. Returns
    /// whether it had to wait. Fails with BrokenPipe when all readers of an SRP ring left.
    pub(crate) fn wait_released(
        &self,
        need: u64,
        slack: u64,
        cache: &mut ReleaseCache,
    ) -> Result<bool> {
        let ctl = self.ctl().expect("producers map the control segment");
        let gen = ctl.r.0.attached_ever.load(Relaxed);
        if self.sync == SyncMode::Frp || (need <= cache.min && gen == cache.gen) {
            return Ok(false);
        }
        let mut waited = false;
        let mut reap = false;
        let t0 = sys::now_ns();
        let done = |waited: bool, cache: &mut ReleaseCache| {
            if waited {
                ctl.w.0.waiting.store(0, Relaxed);
            }
            let took = sys::now_ns().saturating_sub(t0).min(1 << 40);
            cache.wait_ns = (cache.wait_ns * 3 + took) / 4;
        };
        loop {
            let min = {
                let _g = self.lock_ctl();
                cache.gen = ctl.r.0.attached_ever.load(Relaxed);
                let min = match self.sync {
                    SyncMode::Frp => None,
                    SyncMode::Srp => {
                        let m = self.scan_min(reap);
                        if m.is_none()
                            && ctl.r.0.attached_ever.load(Relaxed) > 0
                            && !self.detachable
                        {
                            done(waited, cache);
                            return Err(Error::BrokenPipe {
                                name: self.name.clone(),
                            });
                        }
                        m
                    }
                    SyncMode::Mrp => {
                        if reap {
                            self.scan_min(true);
                        }
                        // SYNC POINT: both Acquire, as in `released_now`: the count pairs with
                        // `release_slot`'s decrement, R with the readers' `fetch_max`.
                        if ctl.r.0.active.load(Acquire) == 0 {
                            None
                        } else {
                            Some(ctl.w.0.mrp_r.load(Acquire))
                        }
                    }
                };
                let m = min.unwrap_or(u64::MAX);
                cache.min = m;
                // Relaxed: guard is read under the same lock by attaching readers (the
                // lock's Release/Acquire orders it).
                self.hdr().p.0.guard.store(m, Relaxed);
                m
            };
            if min >= need {
                done(waited, cache);
                return Ok(waited);
            }
            if !waited {
                // Spin before sleeping: a reader about to release saves us a sleep, a
                // membarrier and its wake-up call. For up to twice what recent waits took
                // when they were short (a reader consuming batch after batch), briefly
                // otherwise (see `Reader::wait`).
                let long_spin = cache.no_spin == 0;
                cache.no_spin = cache.no_spin.saturating_sub(1);
                let budget = if long_spin && cache.wait_ns < SPIN_BUDGET_NS {
                    SPIN_BUDGET_NS
                } else {
                    0
                };
                let until = sys::now_ns() + budget;
                let released = || {
                    (0..SPIN_ROUNDS / 8).any(|_| {
                        std::hint::spin_loop();
                        let m = match self.sync {
                            SyncMode::Srp => self.scan_min(false).unwrap_or(u64::MAX),
                            // SYNC POINT: Acquire, pairs with the readers' `fetch_max` of R.
                            _ => ctl.w.0.mrp_r.load(Acquire),
                        };
                        m >= need
                    })
                };
                let spun = loop {
                    if released() {
                        break true;
                    }
                    if sys::now_ns() >= until {
                        break false;
                    }
                };
                if spun {
                    continue;
                }
                if budget > 0 {
                    cache.no_spin = SPIN_BACKOFF;
                }
                self.hdr().m.0.writer_waits.fetch_add(1, Relaxed);
            }
            waited = true;
            ctl.w.0.target.store(need + slack, Relaxed);
            // SYNC POINT: eventcount read before the re-check, so a wake-up after it changes
            // the word futex_wait compares. Acquire pairs with the Release increments in
            // `wake_writer_if_due`, `Reader::attach` and `release_slot`; the positions are
            // re-read below anyway, so the value is what matters, not the ordering.
            let seq = ctl.w.0.space_seq.load(Acquire);
            // SYNC POINT: the slow side of the space handshake (see `fences`). SeqCst store
            // of `waiting`, heavy fence, then re-scan; against the reader's position
            // publish (`fences::publish` of its slot position, or its `fetch_max` of R)
            // followed by its Relaxed load of `waiting` in `wake_writer_if_due`: either we
            // see the new position here or the reader sees `waiting` and wakes us.
            ctl.w.0.waiting.store(1, SeqCst);
            fences::heavy();
            let again = match self.sync {
                SyncMode::Srp => self.scan_min(false).unwrap_or(u64::MAX),
                // SYNC POINT: SeqCst re-check of R after the heavy fence (same handshake).
                _ => ctl.w.0.mrp_r.load(SeqCst),
            };
            if again >= need {
                continue;
            }
            reap = sys::futex_wait(&ctl.w.0.space_seq, seq, Some(self.liveness)) == Wake::TimedOut;
        }
    }

    pub(super) fn release_slot(&self, s: &ReaderSlot) {
        // SYNC POINT: the swap decides who frees the slot (the leaving reader or a reaping
        // writer/attacher), so only one of them decrements `active`. Release pairs with
        // `scan_min`'s Acquire load of the state: the reader's loads of ring data happened
        // before the writer stops counting it. The Acquire half pairs with `attach`'s
        // Release store of SLOT_ACTIVE.
        if s.state.swap(SLOT_FREE, AcqRel) == SLOT_ACTIVE {
            if let Some(ctl) = self.ctl() {
                // SYNC POINT: Release pairs with the producers' Acquire loads of `active`
                // (`released_now`, `wait_released`; MRP frees R's constraint when it is 0).
                // The Acquire half pairs with nothing (Release would do).
                ctl.r.0.active.fetch_sub(1, AcqRel);
                // Wake a writer that may be waiting on this reader.
                // SYNC POINT: Release eventcount bump, pairs with `wait_released`'s Acquire
                // load of `space_seq` (and `Writer::wait_for_readers`'s).
                ctl.w.0.space_seq.fetch_add(1, Release);
                sys::futex_wake(&ctl.w.0.space_seq, i32::MAX);
            }
        }
    }
}

/// A small spin lock in shared memory whose word holds the owner's pid (0: free); a lock
/// held by a dead process is broken. Guards the control segment (reader attach against a
/// producer's re-scan) and the multi-producer bitmap with the write pointer.
pub(crate) struct PidLock<'a> {
    word: &'a AtomicU32,
}

impl<'a> PidLock<'a> {
    pub(crate) fn take(word: &'a AtomicU32) -> PidLock<'a> {
        let me = sys::getpid();
        let mut spins = 0u32;
        loop {
            let cur = word.load(Relaxed);
            if cur == 0 {
                // SYNC POINT: Acquire, pairs with the Release store in `PidLock::drop`: the
                // previous holder's protected stores (ctl: slot activation, guard; mp: the
                // bitmap, owners and write pointer) are visible.
                if word.compare_exchange_weak(0, me, Acquire, Relaxed).is_ok() {
                    return PidLock { word };
                }
            } else {
                spins += 1;
                if spins.is_multiple_of(64) {
                    std::thread::yield_now();
                }
                if spins.is_multiple_of(100_000)
                    && cur != me
                    && std::fs::metadata(format!("/proc/{cur}")).is_err()
                {
                    // SYNC POINT: breaking a dead owner's lock. AcqRel pairs with nothing
                    // in particular (the dead owner never released); the next taker's
                    // Acquire CAS orders its protected loads. Relaxed would do.
                    let _ = word.compare_exchange(cur, 0, AcqRel, Relaxed);
                }
            }
        }
    }
}

impl Drop for PidLock<'_> {
    fn drop(&mut self) {
        // SYNC POINT: Release publishes the protected stores; pairs with the Acquire CAS in
        // `PidLock::take`.
        self.word.store(0, Release);
    }
}

/// A producer's cached knowledge of how far all lossless readers have released, and how
/// long its recent waits for them took (kept across waits by whoever waits on a ring
/// repeatedly, e.g. a space's shared ring waiting on a channel: see
/// [`super::RingRef::wait_released_with`]).
#[derive(Debug, Clone, Copy)]
pub struct ReleaseCache {
    pub(crate) min: u64,
    /// `attached_ever` when `min` was computed; a new reader forces a re-scan.
    pub(crate) gen: u32,
    /// How long this producer's recent waits for room lasted (ns, a moving average):
    /// whether the next wait spins before it sleeps (see `wait_released`).
    pub(crate) wait_ns: u64,
    /// Waits left before the next long spin, after one that found nothing.
    pub(crate) no_spin: u32,
}
impl Default for ReleaseCache {
    fn default() -> Self {
        ReleaseCache {
            min: 0,
            gen: u32::MAX,
            // Unknown yet: spin up to the budget on the first wait.
            wait_ns: SPIN_BUDGET_NS / 2,
            no_spin: 0,
        }
    }
}
