//! How far the lossless readers have released, which is what a producer waits on: the
//! control segment's small lock (reader attach against producer re-scan), the scan of the
//! reader slots (reaping dead readers), MRP's shared pointer R, the producer's
//! [`ReleaseCache`], and the writer's sleep until readers make room.
//!
//! Owns: the producer side of the space handshake and freeing reader slots. Used by both
//! producers ([`super::Writer`], [`crate::mp::MpWriter`]) and by readers attaching.

use super::notify::SPIN_ROUNDS;
use super::{fences, Shared, SyncMode};
use crate::error::{Error, Result};
use crate::layout::*;
use crate::sys::{self, Wake};
use std::sync::atomic::{AtomicU32, Ordering::*};

impl Shared {
    /// Lock the control segment's small lock (reader attach vs. writer re-scan). The lock
    /// word holds the owner's pid; a dead owner's lock is broken.
    pub(super) fn lock_ctl(&self) -> Option<CtlGuard<'_>> {
        let ctl = self.ctl()?;
        let me = sys::getpid();
        let mut spins = 0u32;
        loop {
            let cur = ctl.lock.0.load(Relaxed);
            if cur == 0 {
                // SYNC POINT: Acquire on taking the lock orders the protected loads after it.
                if ctl.lock.0.compare_exchange_weak(0, me, Acquire, Relaxed).is_ok() {
                    return Some(CtlGuard { word: &ctl.lock.0 });
                }
            } else {
                spins += 1;
                if spins % 64 == 0 {
                    std::thread::yield_now();
                }
                if spins % 100_000 == 0 && cur != me && std::fs::metadata(format!("/proc/{cur}")).is_err() {
                    let _ = ctl.lock.0.compare_exchange(cur, 0, AcqRel, Relaxed);
                }
            }
        }
    }


    /// Minimum position over lossless readers, reaping dead ones when `reap`.
    /// Returns None when no lossless reader is attached.
    pub(super) fn scan_min(&self, reap: bool) -> Option<u64> {
        let mut min = None;
        for i in 0..self.max_readers {
            let s = self.slot(i)?;
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
            // SYNC POINT: Acquire pairs with the reader's release of its position: the
            // reader's loads of the released data happened before we overwrite it.
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
        let min = match self.sync {
            SyncMode::Srp => self.scan_min(false),
            _ if ctl.r.0.active.load(Acquire) == 0 => None,
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
    pub(crate) fn wait_released(&self, need: u64, slack: u64, cache: &mut ReleaseCache) -> Result<bool> {
        let ctl = self.ctl().expect("producers map the control segment");
        let gen = ctl.r.0.attached_ever.load(Relaxed);
        if self.sync == SyncMode::Frp || (need <= cache.min && gen == cache.gen) {
            return Ok(false);
        }
        let mut waited = false;
        let mut reap = false;
        let done = |waited: bool| {
            if waited {
                ctl.w.0.waiting.store(0, Relaxed);
            }
        };
        loop {
            let min = {
                let _g = self.lock_ctl();
                cache.gen = ctl.r.0.attached_ever.load(Relaxed);
                let min = match self.sync {
                    SyncMode::Frp => None,
                    SyncMode::Srp => {
                        let m = self.scan_min(reap);
                        if m.is_none() && ctl.r.0.attached_ever.load(Relaxed) > 0 && !self.detachable {
                            done(waited);
                            return Err(Error::BrokenPipe { name: self.name.clone() });
                        }
                        m
                    }
                    SyncMode::Mrp => {
                        if reap {
                            self.scan_min(true);
                        }
                        if ctl.r.0.active.load(Acquire) == 0 {
                            None
                        } else {
                            Some(ctl.w.0.mrp_r.load(Acquire))
                        }
                    }
                };
                let m = min.unwrap_or(u64::MAX);
                cache.min = m;
                // SYNC POINT: guard is read under the same lock by attaching readers.
                self.hdr().p.0.guard.store(m, Relaxed);
                m
            };
            if min >= need {
                done(waited);
                return Ok(waited);
            }
            if !waited {
                // Spin briefly before sleeping: a reader about to release saves us a sleep.
                let spun = (0..SPIN_ROUNDS / 8).any(|_| {
                    std::hint::spin_loop();
                    let m = match self.sync {
                        SyncMode::Srp => self.scan_min(false).unwrap_or(u64::MAX),
                        _ => ctl.w.0.mrp_r.load(Acquire),
                    };
                    m >= need
                });
                if spun {
                    continue;
                }
                self.hdr().m.0.writer_waits.fetch_add(1, Relaxed);
            }
            waited = true;
            ctl.w.0.target.store(need + slack, Relaxed);
            let seq = ctl.w.0.space_seq.load(Acquire);
            // SYNC POINT: SeqCst store of `waiting` then SeqCst re-scan, against the reader's
            // SeqCst position store then `waiting` load: one side always sees the other.
            ctl.w.0.waiting.store(1, SeqCst);
            fences::heavy();
            let again = match self.sync {
                SyncMode::Srp => self.scan_min(false).unwrap_or(u64::MAX),
                _ => ctl.w.0.mrp_r.load(SeqCst),
            };
            if again >= need {
                continue;
            }
            reap = sys::futex_wait(&ctl.w.0.space_seq, seq, Some(self.liveness)) == Wake::TimedOut;
        }
    }

    pub(super) fn release_slot(&self, s: &ReaderSlot) {
        if s.state.swap(SLOT_FREE, AcqRel) == SLOT_ACTIVE {
            if let Some(ctl) = self.ctl() {
                ctl.r.0.active.fetch_sub(1, AcqRel);
                // Wake a writer that may be waiting on this reader.
                ctl.w.0.space_seq.fetch_add(1, Release);
                sys::futex_wake(&ctl.w.0.space_seq, i32::MAX);
            }
        }
    }

}

pub(super) struct CtlGuard<'a> {
    word: &'a AtomicU32,
}
impl Drop for CtlGuard<'_> {
    fn drop(&mut self) {
        // SYNC POINT: Release publishes the protected stores (slot activation, guard).
        self.word.store(0, Release);
    }
}

/// A producer's cached knowledge of how far all lossless readers have released.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseCache {
    pub(crate) min: u64,
    /// `attached_ever` when `min` was computed; a new reader forces a re-scan.
    pub(crate) gen: u32,
}
impl Default for ReleaseCache {
    fn default() -> Self {
        ReleaseCache { min: 0, gen: u32::MAX }
    }
}
