//! Multiple producers on one ring (thesis 4.5.4, "Multiproducer Synchronization"):
//! producers acquire containers (slots) concurrently, fill them in parallel without any
//! lock, and complete them in any order; readers see only whole records, in slot order.
//!
//! Shared state is an open/closed bitmap of [`MP_PAIRS`] bit pairs. Pair *i* describes the
//! container *i* slots beyond the write pointer: the even bit says "opened", the odd bit
//! "closed". Acquire sets the next even bit; complete sets its odd bit and, when that makes
//! a run of closed pairs at the front, shifts them out and advances the write pointer by
//! the run's length. Both steps take a short lock (the bitmap and the write pointer change
//! together); the copying in between does not.
//!
//! A producer that dies between acquire and complete would block the ring forever: each
//! open pair records its owner's pid, and a blocked producer that finds the front pair's
//! owner dead closes that container as *abandoned* (readers skip it).

use crate::error::{Error, Result};
use crate::layout::{MultiProducer, DATA_OFFSET, MP_PAIRS};
use crate::ring::notify::{publish_position, wake_all};
use crate::ring::release::PidLock;
use crate::ring::{ReleaseCache, RingRef, Shared};
use crate::shm::WriteToken;
use crate::sys::{self, Wake};
use std::sync::atomic::{fence, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

/// Length word marking a slot whose producer died before completing it.
pub use crate::ring::format::ABANDONED;

const EVEN: u64 = 0x5555_5555_5555_5555;

/// One producer of a multi-producer ring. Create one per thread or process.
#[derive(Debug)]
pub struct MpWriter {
    sh: Arc<Shared>,
    token: WriteToken,
    release: ReleaseCache,
    me: u32,
}

/// A container acquired by [`MpWriter::acquire`]; fill it, then [`MpSlot::complete`].
#[derive(Debug)]
pub struct MpSlot<'a> {
    w: &'a mut MpWriter,
    index: u64,
    len: usize,
}

impl MpWriter {
    /// A producer for a multi-producer ring mapped in this process.
    pub fn new(ring: &RingRef) -> Result<MpWriter> {
        let sh = ring.0.clone();
        if !sh.multi_producer {
            return Err(Error::Unsupported {
                name: sh.name.clone(),
                what: "MpWriter on a single-producer ring",
            });
        }
        if !sh.data.writable() || sh.ctl.is_none() {
            return Err(Error::Permission {
                name: sh.name.clone(),
                what: "producers need write access to both segments".into(),
            });
        }
        Ok(MpWriter {
            sh,
            token: WriteToken::default(),
            release: ReleaseCache::default(),
            me: sys::getpid(),
        })
    }

    /// Open a named multi-producer ring as an additional producer.
    pub fn open(name: &str) -> Result<MpWriter> {
        Self::new(&RingRef(Shared::open_named(name, true)?))
    }

    fn mp(&self) -> &MultiProducer {
        &self.sh.hdr().mp.0
    }

    /// Largest payload a slot holds.
    pub fn max_record(&self) -> usize {
        self.sh
            .layout
            .max_payload(self.sh.slot_size, self.sh.min_cap)
    }

    /// Acquire the next free container. Blocks while the ring is full (lossless rings) or
    /// while all [`MP_PAIRS`] containers are open.
    pub fn acquire(&mut self) -> Result<MpSlot<'_>> {
        let sh = self.sh.clone();
        let s = sh.slot_size;
        let size = sh.max_cap;
        loop {
            let need;
            {
                let hdr = sh.hdr();
                let mp = &hdr.mp.0;
                let _l = PidLock::take(&mp.lock);
                let bm = mp.bitmap.load(Relaxed);
                let k = (bm & EVEN).count_ones() as u64;
                if k as usize >= MP_PAIRS {
                    drop(_l);
                    self.wait_bitmap(bm)?;
                    continue;
                }
                let head = sh.hdr().p.0.write_pos.load(Relaxed) / s;
                let index = head + k;
                let end = (index + 1) * s;
                need = end.saturating_sub(size);
                if need <= self.release.min
                    && sh.ctl().unwrap().r.0.attached_ever.load(Relaxed) == self.release.gen
                    || sh.sync == crate::SyncMode::Frp
                {
                    let t = &sh.hdr().t.0;
                    if need > t.tail.load(Relaxed) {
                        // SYNC POINT: tail before the data stores that overwrite (see Writer).
                        t.tail.store(need, Relaxed);
                    }
                    mp.bitmap.store(bm | 1 << (2 * k), Relaxed);
                    mp.owners[k as usize].store(self.me, Relaxed);
                    // SYNC POINT: orders the tail store above before the caller's data stores
                    // into the container (which may overwrite old bytes); pairs with the
                    // Acquire fence in `Reader::check` / `IbufReader::check`, as the fence
                    // after the tail store in `Writer::prepare`. (The bitmap and owners are
                    // published by the lock's Release.)
                    fence(Release);
                    let len = self.max_record();
                    return Ok(MpSlot {
                        w: self,
                        index,
                        len,
                    });
                }
            }
            // Not enough released space: wake readers sitting on a partial batch, then
            // wait outside the bitmap lock.
            if self.mp().pending.load(Relaxed) > 0 {
                self.flush();
            }
            sh.wait_released(need, 0, &mut self.release)?;
        }
    }

    /// Sleep until the bitmap changes, recovering a dead producer's front container.
    fn wait_bitmap(&self, seen: u64) -> Result<()> {
        let mp = self.mp();
        // SYNC POINT: eventcount, then condition: Acquire pairs with the Release increment
        // in `close_pair`, which follows its bitmap store, so seeing the new seq means the
        // bitmap load below sees the new bitmap; a close after the seq load changes the
        // futex word and futex_wait returns at once.
        let seq = mp.seq.load(Acquire);
        // SYNC POINT: Acquire, pairs with the Release bitmap store in `close_pair` (read
        // outside the lock, for its value).
        if mp.bitmap.load(Acquire) != seen {
            return Ok(());
        }
        if sys::futex_wait(&mp.seq, seq, Some(Duration::from_millis(50))) == Wake::TimedOut {
            self.recover_dead_front();
        }
        Ok(())
    }

    /// If the front container is open and its producer is dead, close it as abandoned.
    fn recover_dead_front(&self) {
        let mp = self.mp();
        // SYNC POINT: Acquire, pairs with the Release bitmap store in `close_pair`: the
        // owners shifted before it are visible (read outside the lock).
        let bm = mp.bitmap.load(Acquire);
        if bm & 0b11 != 0b01 {
            return;
        }
        let owner = mp.owners[0].load(Relaxed);
        if std::fs::metadata(format!("/proc/{owner}")).is_ok() {
            return;
        }
        // SYNC POINT: Acquire, pairs with `fences::publish` in `close_pair` (for the value:
        // the front container is open, so write_pos cannot move until it closes).
        let head = self.sh.hdr().p.0.write_pos.load(Acquire) / self.sh.slot_size;
        self.mark_abandoned(head);
        self.close_pair(head);
    }

    fn mark_abandoned(&self, index: u64) {
        let off = DATA_OFFSET + ((index * self.sh.slot_size) & (self.sh.max_cap - 1)) as usize;
        self.sh
            .data
            .write_at(off, self.sh.layout.abandoned_marker());
    }

    /// Mark container `index` closed and advance the write pointer over closed pairs.
    fn close_pair(&self, index: u64) {
        let sh = &*self.sh;
        let s = sh.slot_size;
        let _l = PidLock::take(&self.mp().lock);
        let mp = self.mp();
        let p = &sh.hdr().p.0;
        let head = p.write_pos.load(Relaxed) / s;
        let k = index - head;
        let mut bm = mp.bitmap.load(Relaxed) | 1 << (2 * k + 1);
        let was_full = (bm & EVEN).count_ones() as usize >= MP_PAIRS;
        let mut run = 0u64;
        while run < MP_PAIRS as u64 && (bm >> (2 * run)) & 0b11 == 0b11 {
            run += 1;
        }
        if run > 0 {
            bm = if run as usize == MP_PAIRS {
                0
            } else {
                bm >> (2 * run)
            };
            for i in 0..MP_PAIRS {
                let next = if i + (run as usize) < MP_PAIRS {
                    mp.owners[i + run as usize].load(Relaxed)
                } else {
                    0
                };
                mp.owners[i].store(next, Relaxed);
            }
        }
        // SYNC POINT: Release (under the lock, which releases it again); pairs with the
        // Acquire bitmap loads outside the lock in `wait_bitmap` and `recover_dead_front`.
        mp.bitmap.store(bm, Release);
        if run > 0 {
            // SYNC POINT: as in Writer::publish — publish the data (Release, pairs with the
            // readers' Acquire load of write_pos), then look for sleepers (the fast side of
            // the sleep handshake against the readers' fetch_or, heavy fence, re-check).
            publish_position(&p.write_pos, (head + run) * s);
            let ctl = sh.ctl().expect("producers map ctl");
            let pending = mp.pending.fetch_add(run as u32, Relaxed) + run as u32;
            if ctl.r.0.data_seq.load(Relaxed) & 1 == 1 {
                let threshold = sh.hdr().m.0.threshold.load(Relaxed);
                if ctl.r.0.deep_sleepers.load(Relaxed) > 0 || pending >= threshold {
                    mp.pending.store(0, Relaxed);
                    wake_all(sh);
                }
            } else {
                mp.pending.store(0, Relaxed);
            }
        }
        if was_full || run > 0 {
            // SYNC POINT: Release eventcount bump after the bitmap store; pairs with the
            // Acquire load of `seq` in `wait_bitmap`.
            mp.seq.fetch_add(1, Release);
            sys::futex_wake(&mp.seq, i32::MAX);
        }
    }

    /// Wake readers for commits still below the batching threshold.
    pub fn flush(&self) {
        self.mp().pending.store(0, Relaxed);
        wake_all(&self.sh);
    }
}

impl MpSlot<'_> {
    /// Absolute position of the container.
    pub fn position(&self) -> u64 {
        self.index * self.w.sh.slot_size
    }
    /// The writable payload area of the container.
    pub fn buf(&mut self) -> &mut [u8] {
        let sh = &self.w.sh;
        let off = DATA_OFFSET
            + ((self.index * sh.slot_size) & (sh.max_cap - 1)) as usize
            + sh.layout.payload_hdr() as usize;
        sh.data.reserved_mut(&mut self.w.token, off, self.len)
    }
    /// Publish the container holding `len` payload bytes. Returns the payload position.
    pub fn complete(self, len: usize) -> Result<u64> {
        let sh = self.w.sh.clone();
        if len > self.len {
            return Err(Error::TooLarge {
                name: sh.name.clone(),
                len,
                max: self.len,
            });
        }
        let base = self.index * sh.slot_size;
        let hdr = sh.layout.header(len as u32);
        if !hdr.bytes().is_empty() {
            let off = DATA_OFFSET + (base & (sh.max_cap - 1)) as usize;
            sh.data.write_at(off, hdr.bytes());
        }
        self.w.close_pair(self.index);
        Ok(base + sh.layout.payload_hdr())
    }
}

impl MpWriter {
    /// Convenience: acquire, copy `data`, complete.
    pub fn write(&mut self, data: &[u8]) -> Result<u64> {
        if data.len() > self.max_record() {
            return Err(Error::TooLarge {
                name: self.sh.name.clone(),
                len: data.len(),
                max: self.max_record(),
            });
        }
        let mut slot = self.acquire()?;
        slot.buf()[..data.len()].copy_from_slice(data);
        slot.complete(data.len())
    }
}
