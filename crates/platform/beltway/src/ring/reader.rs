//! One consumer of a ring ([`Reader`]): attaching to a reader slot, finding the next unit
//! (bytes, slot, record, tag) at its position and parsing hostile headers safely, the
//! Unix read and the peek family, releasing positions to the writer, detecting overwrite
//! on lossy rings, and sleeping until data arrives (with the writer's liveness checked).
//!
//! Owns: the reader's private state and its side of the sleep handshake. Does not own:
//! waiting on several readers (`select`).

use super::format::{At, Parsed};
use super::notify::{SPIN_BACKOFF, SPIN_BUDGET_NS, SPIN_ROUNDS};
use super::{fences, Layout, Shared, Start, SyncMode};
use crate::error::{Error, Result};
use crate::layout::*;
use crate::pos::{self, Epoch};
use crate::sys::{self, Wake};
use std::sync::atomic::{fence, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What [`Reader::block`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    Data,
    Eof,
    TimedOut,
}

/// What [`Reader::arm`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Armed {
    /// Data is there: read instead of sleeping.
    Data,
    /// The stream ended (closed, or the writer died) with nothing left to read.
    Eof,
    /// Nothing to read: the ring's wake-up descriptor ([`Reader::wake_fd`]) becomes
    /// readable when the producer wakes its readers.
    Asleep,
    /// This reader cannot sleep on a descriptor (an observer, or a ring opened by name,
    /// whose wake-up no descriptor carries): it waits in [`Reader::block`].
    Unsupported,
}

/// One unit found by `next_unit`: bytes consumed, payload offset in the data area, length.
#[derive(Debug, Clone, Copy)]
struct Unit {
    total: u64,
    payload_off: u64,
    len: u64,
}

/// A block returned by peek: its absolute position (for `check` and tags) and its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Peeked<'a> {
    pub pos: u64,
    pub data: &'a [u8],
}

/// One consumer of a ring, with a private read position.
#[derive(Debug)]
pub struct Reader {
    pub(super) sh: Arc<Shared>,
    slot: Option<usize>,
    pub(super) pos: u64,
    wpos: u64,
    prev: Option<Epoch>,
    cur: Epoch,
    gen: u64,
    lossy: bool,
    pub(super) latency: Duration,
    /// Acquired but not yet completed: (position of the block, bytes to release).
    held: Option<(u64, u64)>,
    /// `peek` advanced past a block the caller may still be looking at; its release to the
    /// writer happens at the next call (the borrow of the block ends before any call).
    deferred: bool,
    /// The writer's process died without closing the stream (seen by this reader; readers
    /// never write the data segment, which they may have mapped read-only).
    pub(super) writer_dead: bool,
    /// Registered as a sleeper on a readiness handle ([`Reader::arm`]): deep or not, and
    /// the eventcount word the sleep bit was set in, with the time the arming began.
    armed: Option<(bool, u32, u64)>,
    lost: u64,
    /// Manual release: reads advance the position privately; the writer sees it only at
    /// [`Reader::release`] (a consumer that processes what it read in batches).
    manual: bool,
    /// How long this reader's recent waits for data lasted (ns, a moving average): what
    /// decides whether a wait spins before it sleeps (see [`Reader::wait`]).
    gap_ns: u64,
    /// Waits left before the next long spin, after one that found nothing (the writer
    /// could not run meanwhile, e.g. it shares our CPU: spinning only delays it).
    no_spin: u32,
}

impl Reader {
    /// Switch manual release on or off. With it on, what this reader consumes stays
    /// protected from the writer until [`Reader::release`] publishes the position: a
    /// consumer reads a batch, works on it in place, then releases it at once. Release
    /// before blocking for more, or a writer waiting for space and this reader wait forever.
    pub fn set_manual_release(&mut self, on: bool) {
        self.manual = on;
        if !on {
            self.release_position();
        }
    }

    /// Publish the position reached (manual release).
    pub fn release(&mut self) {
        let m = std::mem::replace(&mut self.manual, false);
        self.release_position();
        self.manual = m;
    }

    /// Attach a reader to a ring this process has mapped.
    pub fn attach(sh: Arc<Shared>, start: Start) -> Result<Reader> {
        let (prev, cur, gen) = sh.load_epochs();
        let h = sh.hdr();
        let latency = Duration::from_micros(h.m.0.latency_us.load(Relaxed).max(1) as u64);
        let lossy = sh.sync != SyncMode::Srp || sh.ctl.is_none();
        let mut r = Reader {
            sh: sh.clone(),
            slot: None,
            pos: 0,
            wpos: 0,
            prev,
            cur,
            gen,
            lossy,
            latency,
            held: None,
            deferred: false,
            writer_dead: false,
            armed: None,
            lost: 0,
            manual: false,
            gap_ns: SPIN_BUDGET_NS / 2,
            no_spin: 0,
        };
        let Some(ctl) = sh.ctl() else {
            // Observer: private position, cannot hold back the writer.
            // SYNC POINT (all four loads): Acquire on write_pos pairs with the writer's
            // `fences::publish`; the reader reads data only below a write_pos that
            // `refresh` loads again with Acquire, so here only the value matters. The tail
            // is stored Relaxed (then a Release fence), so its Acquire loads pair with no
            // Release store: they read a value, nothing through it.
            r.pos = match start {
                Start::Latest => h.p.0.write_pos.load(Acquire),
                // Lossy record rings: the tail may lie inside a record, so start at a known
                // boundary (0 before the first overwrite, else the write position).
                Start::Oldest if sh.layout == Layout::Records => match h.t.0.tail.load(Acquire) {
                    0 => 0,
                    _ => h.p.0.write_pos.load(Acquire),
                },
                Start::Oldest => {
                    h.t.0.tail.load(Acquire).div_ceil(sh.slot_size.max(1)) * sh.slot_size.max(1)
                }
            };
            return Ok(r);
        };
        let _g = sh.lock_ctl();
        let mut found = None;
        for i in 0..sh.max_readers {
            let s = sh.slot(i).expect("ctl mapped");
            // SYNC POINT: Acquire, pairs with the AcqRel swap to SLOT_FREE in
            // `release_slot` (the previous owner is done with the slot) and the Release
            // store of SLOT_ACTIVE below by another attacher (under the same lock anyway).
            let st = s.state.load(Acquire);
            if st == SLOT_FREE
                || (st == SLOT_ACTIVE
                    && !sys::process_alive(s.pid.load(Relaxed), s.start.load(Relaxed)))
            {
                if st == SLOT_ACTIVE {
                    sh.release_slot(s);
                }
                found = Some(i);
                break;
            }
        }
        let Some(i) = found else {
            return Err(Error::NoSlots {
                name: sh.name.clone(),
                max: sh.max_readers,
            });
        };
        // SYNC POINT: write_pos Acquire pairs with the writer's `fences::publish` (values
        // only; `refresh` re-loads it before any data is read). The tail's Acquire pairs
        // with no Release store (the tail is stored Relaxed, then a Release fence).
        let w = h.p.0.write_pos.load(Acquire);
        let tail = h.t.0.tail.load(Acquire);
        // SRP: the writer promises not to overwrite positions >= guard until it re-scans
        // (under this lock), so start there at the earliest. No reader: start at the end.
        let guard = h.p.0.guard.load(Relaxed).min(w);
        let pos = match (start, sh.sync) {
            (Start::Latest, _) => w,
            (Start::Oldest, SyncMode::Srp) => guard.max(tail),
            (Start::Oldest, _) => tail,
        };
        // A lossy ring's tail may lie inside a record: start at a boundary. (This and the
        // start rules above and in `skip_lost` stay `match`es: each combines the layout
        // with the start, the sync mode and what the reader may load, so a per-layout
        // method would need all of them as arguments and would read worse.)
        r.pos = match sh.layout {
            Layout::Records if pos < w && pos != 0 && sh.sync != SyncMode::Srp => w,
            Layout::Slots | Layout::Tags => pos.div_ceil(sh.slot_size) * sh.slot_size,
            _ => pos,
        };
        let s = sh.slot(i).expect("ctl mapped");
        s.pid.store(sys::getpid(), Relaxed);
        s.start
            .store(sys::process_start_time(sys::getpid()).unwrap_or(0), Relaxed);
        s.pos.store(r.pos, Relaxed);
        s.lost.store(0, Relaxed);
        s.lossy.store(lossy as u32, Relaxed);
        // SYNC POINT: Release publishes the slot's pid, start, pos, lost and lossy stored
        // above; pairs with the Acquire state load in `Shared::scan_min` (which then reads
        // them). We also hold the control lock, whose release publishes them to the
        // writer's re-scan.
        s.state.store(SLOT_ACTIVE, Release);
        if sh.sync == SyncMode::Mrp {
            // SYNC POINT: pairs with the producers' Acquire loads of R (`released_now`,
            // `wait_released`). Raises R to our start; we have read nothing yet, so the
            // Release publishes nothing and the Acquire half pairs with nothing.
            ctl.w.0.mrp_r.fetch_max(r.pos, AcqRel);
        }
        // SYNC POINT: AcqRel on the count; the Release half pairs with the Acquire loads of
        // `active` in `released_now`, `wait_released`, `Writer::wait_for_readers` and
        // `RingRef::readers`. The Acquire half pairs with nothing (Release would do).
        ctl.r.0.active.fetch_add(1, AcqRel);
        // SYNC POINT: AcqRel, but every load of `attached_ever` is Relaxed (the producers
        // read it under the control lock, or as a hint that forces a re-scan under the
        // lock): it pairs with nothing, and Relaxed would do.
        ctl.r.0.attached_ever.fetch_add(1, AcqRel);
        // SYNC POINT: Release eventcount bump after the count: pairs with the Acquire load
        // of `space_seq` in `Writer::wait_for_readers` and `wait_released`.
        ctl.w.0.space_seq.fetch_add(1, Release);
        sys::futex_wake(&ctl.w.0.space_seq, i32::MAX);
        r.slot = Some(i);
        Ok(r)
    }

    /// Open a named ring and attach.
    pub fn open(name: &str, start: Start) -> Result<Reader> {
        Reader::attach(Shared::open_named(name, false)?, start)
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.sh
    }
    /// Next position to read.
    pub fn position(&self) -> u64 {
        self.pos
    }
    /// Bytes this reader lost to overwrite so far (lossy rings).
    pub fn lost(&self) -> u64 {
        self.lost
    }
    /// Whether this reader holds the writer back (registered lossless reader).
    pub fn is_lossless(&self) -> bool {
        !self.lossy
    }
    /// Whether the writer process died (rather than closing the stream).
    pub fn writer_died(&self) -> bool {
        self.writer_dead
    }

    /// End of stream: closed by the writer, or the writer died.
    pub(super) fn ended(&self) -> bool {
        // SYNC POINT: Acquire, pairs with the fetch_or of STATE_CLOSED in `Writer::close`:
        // seeing CLOSED, the final write_pos is visible to the re-check that follows.
        self.writer_dead || self.sh.hdr().p.0.state.load(Acquire) & STATE_CLOSED != 0
    }

    /// Resume after data below the tail was lost: at the tail for bytes, at the next slot
    /// for slot layouts, and at the write position for variable records, whose boundaries
    /// cannot be found inside lost data (thesis 4.5.3). Records the loss and returns the
    /// overrun error to report.
    fn skip_lost(&mut self, from: u64) -> Error {
        let h = self.sh.hdr();
        // SYNC POINT: Acquire loads of the tail and (records) write_pos, for their values:
        // the tail pairs with no Release store (stored Relaxed, then a Release fence);
        // write_pos pairs with `fences::publish`, and data is read only after `refresh`.
        let tail = h.t.0.tail.load(Acquire);
        let p = &h.p.0;
        self.pos = match self.sh.layout {
            Layout::Bytes => tail.max(self.pos),
            Layout::Slots | Layout::Tags => {
                tail.max(self.pos).div_ceil(self.sh.slot_size) * self.sh.slot_size
            }
            Layout::Records => p.write_pos.load(Acquire).max(self.pos),
        };
        self.lost += self.pos - from;
        self.held = None;
        self.release_position();
        if let Some(s) = self.slot.and_then(|i| self.sh.slot(i)) {
            s.lost.store(self.lost, Relaxed);
        }
        Error::Overrun {
            name: self.sh.name.clone(),
            from,
            to: self.pos,
        }
    }

    /// Refresh the cached write position and epochs; returns bytes available.
    #[inline]
    fn refresh(&mut self) -> u64 {
        let p = &self.sh.hdr().p.0;
        // SYNC POINT: Acquire pairs with the writer's publishing store or swap in
        // `fences::publish` (from `Writer::publish`, `MpWriter`'s close_pair): data below
        // write_pos is visible. epoch_gen is read after it (same cache line), so an epoch
        // that data we can now see lives in is already published; its Acquire pairs with
        // the Release store of epoch_gen in `Writer::maybe_resize`.
        self.wpos = p.write_pos.load(Acquire);
        let g = p.epoch_gen.load(Acquire);
        if g != self.gen {
            let (prev, cur, gen) = self.sh.load_epochs();
            self.prev = prev;
            self.cur = cur;
            self.gen = gen;
        }
        self.wpos.saturating_sub(self.pos)
    }

    #[inline]
    pub(super) fn available(&mut self) -> u64 {
        let a = self.wpos.saturating_sub(self.pos);
        if a > 0 {
            a
        } else {
            self.refresh()
        }
    }

    /// Lossy readers: if our position fell below the tail, skip and report the loss.
    fn check_lost(&mut self) -> Result<()> {
        if !self.lossy {
            return Ok(());
        }
        // SYNC POINT: Acquire for the value only; the tail is stored Relaxed (then a
        // Release fence), so this pairs with no Release store. The overwrite check that
        // matters is `check`'s fence.
        let tail = self.sh.hdr().t.0.tail.load(Acquire);
        if self.pos < tail {
            return Err(self.skip_lost(self.pos));
        }
        Ok(())
    }

    /// `check`: verify that data read at or after `pos` was not overwritten while in use.
    pub fn check(&self, pos: u64) -> Result<()> {
        // SYNC POINT: Acquire fence orders the caller's data loads before the tail load
        // (seqlock read side). Pairs with the Release fence after the tail store in
        // `Writer::prepare` / `maybe_resize` and `MpWriter::acquire`: if a data load saw a
        // byte stored after that fence, the tail load below sees the new tail.
        fence(Acquire);
        let tail = self.sh.hdr().t.0.tail.load(Relaxed);
        if pos < tail {
            return Err(Error::Overrun {
                name: self.sh.name.clone(),
                from: pos,
                to: tail,
            });
        }
        Ok(())
    }

    /// `block`: wait until data is available, the stream ends, or the timeout passes.
    pub fn block(&mut self, timeout: Option<Duration>) -> Result<Ready> {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.wait(deadline)
    }

    #[inline]
    pub(super) fn flush_deferred(&mut self) {
        if self.deferred {
            self.deferred = false;
            self.release_position();
        }
    }

    /// Wait for data (or the end, or `deadline`). Polling and sleeping combined (thesis
    /// 5.2.2): a reader whose data lately came within the spin budget (a producer that
    /// commits batch after batch) polls for up to twice that gap before it sleeps, so a
    /// busy stream costs no sleep, no membarrier and no wake-up per batch; one whose data
    /// comes rarely spins only briefly and sleeps, to be woken per the producer's
    /// moderation or by its own latency bound.
    fn wait(&mut self, deadline: Option<Instant>) -> Result<Ready> {
        let t0 = sys::now_ns();
        let r = self.wait_inner(deadline);
        if matches!(r, Ok(Ready::Data)) {
            let took = sys::now_ns().saturating_sub(t0).min(1 << 40);
            self.gap_ns = (self.gap_ns * 3 + took) / 4;
        }
        r
    }

    fn wait_inner(&mut self, deadline: Option<Instant>) -> Result<Ready> {
        self.flush_deferred();
        let sh = self.sh.clone();
        let h = sh.hdr();
        let mut deep = false;
        let long_spin = self.no_spin == 0;
        self.no_spin = self.no_spin.saturating_sub(1);
        if long_spin && self.available() == 0 && self.gap_ns < SPIN_BUDGET_NS && !self.ended() {
            let until = sys::now_ns() + SPIN_BUDGET_NS;
            let until = deadline.map_or(until, |d| {
                until.min(
                    sys::now_ns() + d.saturating_duration_since(Instant::now()).as_nanos() as u64,
                )
            });
            if !self.spin_until(until) {
                self.no_spin = SPIN_BACKOFF;
            }
        }
        loop {
            if self.available() > 0 {
                return Ok(Ready::Data);
            }
            if self.ended() {
                // The state bit is set after the final publish: re-check, then EOF.
                return Ok(if self.refresh() > 0 {
                    Ready::Data
                } else {
                    Ready::Eof
                });
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(Ready::TimedOut);
            }
            // Spin briefly first: a writer that is about to publish saves us a sleep, a
            // membarrier and a wake-up (the common case in a balanced pipeline).
            if !deep && self.spin_for_data() {
                continue;
            }
            let mut timeout = if deep { sh.liveness } else { self.latency };
            if let Some(d) = deadline {
                timeout = timeout.min(d - now);
            }
            let res = if let Some(ctl) = sh.ctl() {
                if sh.sync == SyncMode::Mrp && self.slot.is_some() {
                    // MRP: R normally trails each reader by one read ("one chance" for the
                    // others). A reader with nothing left to read releases everything, or a
                    // writer waiting on R and readers waiting on the writer would deadlock.
                    // SYNC POINT: the fast side of the space handshake for MRP (our store of R,
                    // then `wake_writer_if_due`'s load of `waiting`), against the writer's
                    // SeqCst `waiting` store, heavy fence, SeqCst load of R in
                    // `wait_released`. Its Release half also publishes our loads of the data
                    // below pos (pairs with the producers' Acquire loads of R).
                    ctl.w.0.mrp_r.fetch_max(self.pos, SeqCst);
                    self.wake_writer_if_due(ctl);
                }
                let counter = if deep {
                    &ctl.r.0.deep_sleepers
                } else {
                    &ctl.r.0.sleepers
                };
                // SYNC POINT: register as a sleeper. `sleepers` is never read; `deep_sleepers`
                // is read Relaxed by the producers after they saw the sleep bit, to wake at
                // once instead of batching. It is a hint, not part of the no-lost-wake-up
                // handshake (the sleep bit is): the SeqCst pairs with nothing.
                counter.fetch_add(1, SeqCst);
                // SYNC POINT: set the sleep bit (SeqCst RMW), heavy fence, then re-check
                // write_pos (SeqCst): the slow side of the sleep handshake, against the
                // producer's `fences::publish` of write_pos then Relaxed load of `data_seq`
                // (`Writer::publish`, `MpWriter` close_pair). Either we see the position or
                // the producer sees the bit and wakes us. The RMW also reads the latest
                // `data_seq`, so a `wake_all` Release store after it changes the futex word.
                let seq = ctl.r.0.data_seq.fetch_or(1, SeqCst) | 1;
                fences::heavy();
                // SYNC POINT: the re-check loads (see above). state: a close is followed by an
                // unconditional wake, so its SeqCst only gives the order, not safety.
                let ready =
                    h.p.0.write_pos.load(SeqCst) > self.pos || h.p.0.state.load(SeqCst) != 0;
                let res = if ready {
                    Wake::Woken
                } else {
                    sys::futex_wait(&ctl.r.0.data_seq, seq, Some(timeout))
                };
                counter.fetch_sub(1, Relaxed);
                res
            } else {
                // Observers may not write the control segment, so they cannot ask to be
                // woken: they look again after the latency bound (or the liveness period).
                // SYNC POINT: an observer cannot sleep on the eventcount, so this load takes
                // part in no handshake; SeqCst is stronger than needed (Acquire would do,
                // and `refresh` re-loads with Acquire before reading).
                if h.p.0.write_pos.load(SeqCst) > self.pos {
                    Wake::Woken
                } else {
                    std::thread::sleep(timeout);
                    Wake::TimedOut
                }
            };
            if res == Wake::TimedOut && self.refresh() == 0 {
                if deep && !sh.writer_alive() {
                    self.writer_dead = true;
                }
                deep = true;
            }
        }
    }

    /// Whether data or the end of the stream is there now, without waiting or spinning
    /// (`TimedOut`: neither yet).
    pub fn ready_now(&mut self) -> Ready {
        self.flush_deferred();
        if self.available() > 0 {
            return Ready::Data;
        }
        if self.ended() {
            // The state bit is set after the final publish: re-check, then EOF.
            return if self.refresh() > 0 {
                Ready::Data
            } else {
                Ready::Eof
            };
        }
        Ready::TimedOut
    }

    /// The ring's wake-up descriptor, when this reader may sleep on it ([`Reader::arm`]).
    pub fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.sh.ctl()?;
        self.sh.wake.as_ref().map(|w| w.as_fd())
    }

    /// Get ready to sleep on a readiness handle (an epoll set holding [`Reader::wake_fd`]
    /// among a space's other inputs) instead of in [`Reader::block`]: the sleeping side of
    /// the handshake of `wait` without the futex wait. First the same spin (when recent
    /// waits were short), then the sleep bit, the heavy fence and the re-check: either this
    /// finds the data, or the producer sees the bit and signals the descriptor when it
    /// wakes its readers (a `deep` sleeper at once; otherwise after its threshold or latency
    /// bound, the caller's own latency bound, [`Reader::latency`], bringing it back first).
    /// Arming again while the bit is still ours costs no fence. Ends with [`Reader::disarm`]
    /// (or any read), which the caller does after it woke.
    pub fn arm(&mut self, deep: bool) -> Result<Armed> {
        self.flush_deferred();
        if self.wake_fd().is_none() || self.sh.sync == SyncMode::Mrp || self.slot.is_none() {
            return Ok(Armed::Unsupported);
        }
        if self.available() > 0 {
            self.disarm();
            return Ok(Armed::Data);
        }
        if self.ended() {
            self.disarm();
            // The state bit is set after the final publish: re-check, then EOF.
            return Ok(if self.refresh() > 0 {
                Armed::Data
            } else {
                Armed::Eof
            });
        }
        let sh = self.sh.clone();
        let ctl = sh.ctl().expect("checked by wake_fd");
        let r = &ctl.r.0;
        if let Some((was_deep, seq, _)) = self.armed {
            // SYNC POINT: Relaxed: only whether the word still holds our sleep bit. If it
            // does, the fence after we set it has already made the bit visible to every
            // producer that publishes later, so the re-check below needs no new fence.
            if was_deep == deep && r.data_seq.load(Relaxed) == seq {
                return Ok(if self.refresh() > 0 {
                    Armed::Data
                } else {
                    Armed::Asleep
                });
            }
        }
        let since = self.armed.map_or_else(sys::now_ns, |a| a.2);
        self.disarm();
        if self.gap_ns < SPIN_BUDGET_NS && self.no_spin == 0 {
            if self.spin_until(sys::now_ns() + SPIN_BUDGET_NS) {
                self.note_wait(since);
                return Ok(Armed::Data);
            }
            self.no_spin = SPIN_BACKOFF;
        }
        self.no_spin = self.no_spin.saturating_sub(1);
        let counter = if deep { &r.deep_sleepers } else { &r.sleepers };
        // SYNC POINT: register as a sleeper, as in `wait_inner` (a hint for the producers'
        // moderation; the sleep bit is the handshake).
        counter.fetch_add(1, SeqCst);
        // SYNC POINT: set the sleep bit (SeqCst RMW), heavy fence, then re-check write_pos
        // (SeqCst): the slow side of the sleep handshake, as in `wait_inner`, against the
        // producer's `fences::publish` of write_pos then Relaxed load of `data_seq`. Either
        // we see the position or the producer sees the bit and signals the wake-up fd.
        let seq = r.data_seq.fetch_or(1, SeqCst) | 1;
        fences::heavy();
        self.armed = Some((deep, seq, since));
        // SYNC POINT: the re-check loads (see above).
        let h = sh.hdr();
        if h.p.0.write_pos.load(SeqCst) > self.pos || h.p.0.state.load(SeqCst) != 0 {
            return Ok(if self.refresh() > 0 {
                self.disarm();
                Armed::Data
            } else {
                self.disarm();
                Armed::Eof
            });
        }
        Ok(Armed::Asleep)
    }

    /// No longer asleep on a readiness handle (see [`Reader::arm`]): leaves the sleeper
    /// count, and remembers how long the wait lasted when data came (what decides whether
    /// the next one spins first).
    pub fn disarm(&mut self) {
        let Some((deep, _, since)) = self.armed.take() else {
            return;
        };
        if let Some(ctl) = self.sh.ctl() {
            let r = &ctl.r.0;
            let counter = if deep { &r.deep_sleepers } else { &r.sleepers };
            counter.fetch_sub(1, Relaxed);
        }
        if self.refresh() > 0 {
            self.note_wait(since);
        }
    }

    fn note_wait(&mut self, since_ns: u64) {
        let took = sys::now_ns().saturating_sub(since_ns).min(1 << 40);
        self.gap_ns = (self.gap_ns * 3 + took) / 4;
    }

    /// The latency bound a sleeping reader keeps itself (the ring's moderation config).
    pub fn latency(&self) -> Duration {
        self.latency
    }

    /// The writer's process id (whose death a consumer may watch, e.g. with a pidfd).
    pub fn writer_pid(&self) -> u32 {
        self.sh.hdr().c.0.writer_pid.load(Relaxed)
    }

    /// Look whether the writer's process still runs (a /proc read: call it when told the
    /// process ended, e.g. by its pidfd). A dead writer ends the stream after what was
    /// committed ([`Reader::writer_died`]).
    pub fn check_writer(&mut self) {
        if !self.writer_dead && !self.sh.writer_alive() {
            self.writer_dead = true;
        }
    }

    /// Poll write_pos until data arrives (true) or the clock passes `until_ns` (false).
    fn spin_until(&mut self, until_ns: u64) -> bool {
        loop {
            if self.spin_for_data() {
                return true;
            }
            if sys::now_ns() >= until_ns {
                return false;
            }
        }
    }

    /// Poll write_pos for a short while (about a microsecond); true if data arrived.
    fn spin_for_data(&mut self) -> bool {
        for _ in 0..SPIN_ROUNDS {
            std::hint::spin_loop();
            if self.sh.hdr().p.0.write_pos.load(Relaxed) > self.pos {
                return true;
            }
        }
        false
    }

    /// Release everything below our position to the writer.
    #[inline]
    fn release_position(&mut self) {
        if self.manual {
            return;
        }
        let Some(i) = self.slot else { return };
        let sh = &*self.sh;
        let s = sh.slot(i).expect("ctl mapped");
        let old = s.pos.load(Relaxed);
        // SYNC POINT: releases our loads of the data below pos to the writer (Release;
        // pairs with the Acquire load of our slot's pos in `Shared::scan_min`) and orders
        // the store before the `waiting` load (asymmetric Dekker with the writer's SeqCst
        // `waiting` store + heavy fence + re-scan in `wait_released`).
        fences::publish(&s.pos, self.pos);
        let ctl = sh.ctl().expect("ctl mapped");
        if sh.sync == SyncMode::Mrp {
            // SYNC POINT: MRP raises R to our previous position (one read behind). The
            // Release half publishes our loads of the data below `old`; pairs with the
            // producers' Acquire/SeqCst loads of R. The Acquire half pairs with nothing.
            ctl.w.0.mrp_r.fetch_max(old, AcqRel);
        }
        self.wake_writer_if_due(ctl);
    }

    /// Wake a writer waiting for space once our release reaches its target.
    #[inline]
    fn wake_writer_if_due(&self, ctl: &CtlHeader) {
        let w = &ctl.w.0;
        if w.waiting.load(Relaxed) != 0 {
            let target = w.target.load(Relaxed);
            let mine = if self.sh.sync == SyncMode::Mrp {
                w.mrp_r.load(Relaxed)
            } else {
                self.pos
            };
            // Take the flag: one wake-up per writer sleep, not one per read until it runs.
            // SYNC POINT: taking the flag: the swap makes one reader (of many) do the wake.
            // AcqRel pairs with the writer's SeqCst store of `waiting`, but `target` was
            // loaded before it, after a Relaxed load of `waiting`, so formally it may be an
            // older target (not on x86). Targets grow, so a stale one wakes the writer
            // early; it re-scans and sleeps again. The writer reads nothing through the
            // flag; the eventcount bump below does the waking.
            if mine >= target && w.waiting.swap(0, AcqRel) != 0 {
                // SYNC POINT: Release eventcount bump; pairs with the Acquire load of
                // `space_seq` in `wait_released` taken before its re-check.
                w.space_seq.fetch_add(1, Release);
                sys::futex_wake(&w.space_seq, 1);
            }
        }
    }

    /// Locate the next unit (bytes chunk or record) at our position, parsing its header
    /// exactly once. Skips padding and abandoned slots. `None` at EOF (or, without `wait`,
    /// when nothing is available). On lossy rings a header that makes no sense is first
    /// checked against the tail: overwritten data is an overrun, not corruption.
    fn next_unit(&mut self, max: usize, wait: Option<Option<Instant>>) -> Result<Option<Unit>> {
        self.flush_deferred();
        // A writer pads at most once per lap; a hostile one could chain padding forever.
        let mut skipped = 0u64;
        loop {
            if skipped > self.sh.max_cap {
                return Err(self.corrupt("padding or abandoned slots run past a whole lap".into()));
            }
            self.check_lost()?;
            if self.available() == 0 {
                match wait {
                    None => return Ok(None),
                    Some(deadline) => match self.wait(deadline)? {
                        Ready::Data => continue,
                        Ready::Eof => return Ok(None),
                        Ready::TimedOut => {
                            return Err(Error::TimedOut {
                                name: self.sh.name.clone(),
                                what: "reading",
                            })
                        }
                    },
                }
            }
            let Some(e) = pos::epoch_for(self.prev, self.cur, self.pos) else {
                return Err(self.skip_lost(self.pos));
            };
            let off = e.offset(self.pos);
            let room = e.room_to_lap_end(self.pos);
            let avail = self.available();
            let word = |at: u64| {
                u32::from_le_bytes(
                    self.sh
                        .data
                        .bytes(DATA_OFFSET + at as usize, 4)
                        .try_into()
                        .unwrap(),
                )
            };
            match self.sh.layout.parse(
                At {
                    off,
                    room,
                    avail,
                    epoch_size: e.size,
                },
                self.sh.slot_size,
                max as u64,
                word,
            ) {
                Parsed::Unit {
                    total,
                    payload_off,
                    len,
                } => {
                    return Ok(Some(Unit {
                        total,
                        payload_off,
                        len,
                    }))
                }
                Parsed::Skip {
                    total,
                    sized_by_header,
                } => {
                    if sized_by_header && self.lossy && self.check(self.pos).is_err() {
                        return Err(self.skip_lost(self.pos));
                    }
                    skipped += total;
                    self.pos += total;
                    self.release_position();
                }
                Parsed::Bad(why) => return Err(self.corrupt(why.why())),
            }
        }
    }

    /// A header that makes no sense: an overrun if it was overwritten under a lossy
    /// reader, otherwise corruption (a hostile or broken writer), reported with its position.
    #[cold]
    fn corrupt(&mut self, why: String) -> Error {
        if self.lossy && self.check(self.pos).is_err() {
            return self.skip_lost(self.pos);
        }
        Error::Corrupt {
            name: self.sh.name.clone(),
            pos: self.pos,
            why,
        }
    }

    /// Unix `read`: copy out up to `buf.len()` bytes (byte rings) or one record (record
    /// rings; `buf` must hold it). Blocks while empty; returns 0 at EOF. On a lossy ring a
    /// reader that fell behind gets [`Error::Overrun`] naming the lost range once, then
    /// continues from the oldest valid data.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        self.read_until(buf, None)
    }

    /// `read` with a deadline.
    pub fn read_timeout(&mut self, buf: &mut [u8], timeout: Duration) -> Result<usize> {
        self.read_until(buf, Some(Instant::now() + timeout))
    }

    fn read_until(&mut self, buf: &mut [u8], deadline: Option<Instant>) -> Result<usize> {
        if self.held.is_some() {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "read while a peek_acquire is outstanding",
            });
        }
        let Some(u) = self.next_unit(buf.len(), Some(deadline))? else {
            return Ok(0);
        };
        let n = u.len as usize;
        if n > buf.len() {
            if self.lossy && self.check(self.pos).is_err() {
                return Err(self.skip_lost(self.pos));
            }
            return Err(Error::BufferTooSmall {
                name: self.sh.name.clone(),
                need: n,
                got: buf.len(),
            });
        }
        buf[..n].copy_from_slice(self.sh.data.bytes(DATA_OFFSET + u.payload_off as usize, n));
        if self.lossy && self.check(self.pos).is_err() {
            return Err(self.skip_lost(self.pos));
        }
        let total = u.total;
        self.pos += total;
        self.release_position();
        Ok(n)
    }

    /// `peek_acquire`: borrow the next block (up to `max` bytes on byte rings, one record on
    /// record rings) in place without releasing it. Blocks while empty; `None` at EOF.
    pub fn peek_acquire(&mut self, max: usize) -> Result<Option<Peeked<'_>>> {
        self.peek_until(max, None)
    }

    /// Non-blocking `peek_acquire`: `None` when nothing is available now.
    pub fn try_peek_acquire(&mut self, max: usize) -> Result<Option<Peeked<'_>>> {
        if self.held.is_some() {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "two peek_acquire without peek_complete",
            });
        }
        let Some(u) = self.next_unit(max, None)? else {
            return Ok(None);
        };
        Ok(Some(self.finish_peek(u)))
    }

    fn peek_until(&mut self, max: usize, deadline: Option<Instant>) -> Result<Option<Peeked<'_>>> {
        if self.held.is_some() {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "two peek_acquire without peek_complete",
            });
        }
        let Some(u) = self.next_unit(max, Some(deadline))? else {
            return Ok(None);
        };
        Ok(Some(self.finish_peek(u)))
    }

    fn finish_peek(&mut self, u: Unit) -> Peeked<'_> {
        let ppos = self.unit_pos(&u);
        self.held = Some((self.pos, u.total));
        Peeked {
            pos: ppos,
            data: self
                .sh
                .data
                .bytes(DATA_OFFSET + u.payload_off as usize, u.len as usize),
        }
    }

    /// Tag rings: borrow every committed tag from the read position on, at most `max`
    /// tags and never past the lap end, in place and without releasing them (one look at
    /// the write position for the whole run, not one per tag). Hand back with
    /// [`Reader::consume_tags`]. `None` when nothing is committed now. Lossless readers
    /// only: a lossy one must check every tag after copying it (see [`Reader::check`]).
    pub fn try_peek_tags(&mut self, max: usize) -> Result<Option<Peeked<'_>>> {
        if self.held.is_some() {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "two peek_acquire without peek_complete",
            });
        }
        if self.sh.layout != Layout::Tags || self.lossy {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "runs of tags from anything but a lossless reader of a tag ring",
            });
        }
        self.flush_deferred();
        let avail = self.available();
        if avail == 0 {
            return Ok(None);
        }
        let Some(e) = pos::epoch_for(self.prev, self.cur, self.pos) else {
            return Err(self.skip_lost(self.pos));
        };
        let unit = self.sh.slot_size;
        let off = e.offset(self.pos);
        let n = avail
            .min(e.room_to_lap_end(self.pos))
            .min(max as u64 * unit)
            / unit
            * unit;
        if n == 0 || off + n > e.size || off % unit != 0 {
            return Err(self.corrupt(format!(
                "a run of {n} tag bytes at offset {off} of a {}-byte lap",
                e.size
            )));
        }
        self.held = Some((self.pos, n));
        Ok(Some(Peeked {
            pos: self.pos,
            data: self.sh.data.bytes(DATA_OFFSET + off as usize, n as usize),
        }))
    }

    /// Hand back the run of [`Reader::try_peek_tags`], of which the first `n` bytes were
    /// used (a multiple of the tag size): they count as read (and are released unless the
    /// release is manual); the rest is read again next time.
    pub fn consume_tags(&mut self, n: u64) -> Result<()> {
        let Some((at, len)) = self.held.take() else {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "consume_tags without try_peek_tags",
            });
        };
        if n > len || n % self.sh.slot_size != 0 {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "consuming more than the run, or part of a tag",
            });
        }
        if at == self.pos && n > 0 {
            self.pos += n;
            self.release_position();
        }
        Ok(())
    }

    /// Absolute position of a unit's payload (the unit starts at our position).
    fn unit_pos(&self, u: &Unit) -> u64 {
        let start_off =
            pos::epoch_for(self.prev, self.cur, self.pos).map_or(0, |e| e.offset(self.pos));
        self.pos + (u.payload_off - start_off)
    }

    /// `peek_complete`: release the block returned by the last `peek_acquire`.
    pub fn peek_complete(&mut self) -> Result<()> {
        let Some((at, total)) = self.held.take() else {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "peek_complete without peek_acquire",
            });
        };
        if at == self.pos {
            self.pos += total;
            self.release_position();
        }
        Ok(())
    }

    /// Thesis `peek`: borrow the next block and release it at once. The block stays intact
    /// on lossless rings until the next call; on lossy rings call [`Reader::check`] with its
    /// position after use.
    pub fn peek(&mut self, max: usize) -> Result<Option<Peeked<'_>>> {
        if self.held.is_some() {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "peek while a peek_acquire is outstanding",
            });
        }
        let Some(u) = self.next_unit(max, Some(None))? else {
            return Ok(None);
        };
        let ppos = self.unit_pos(&u);
        let (poff, plen) = (u.payload_off, u.len);
        self.pos += u.total;
        // Lossless rings: do not release yet, the caller still looks at the data. The
        // release happens at the next call.
        if self.lossy {
            self.release_position();
        } else {
            self.deferred = true;
        }
        Ok(Some(Peeked {
            pos: ppos,
            data: self
                .sh
                .data
                .bytes(DATA_OFFSET + poff as usize, plen as usize),
        }))
    }

    /// Move this reader forward to `pos` without reading (a consumer that tracks what it
    /// still needs by other means, like an IBuf writer's shadow on its default DBuf).
    pub(crate) fn release_to(&mut self, pos: u64) {
        if pos > self.pos {
            self.pos = pos;
            self.release_position();
        }
    }

    /// Bytes currently readable without blocking.
    pub fn readable(&mut self) -> u64 {
        self.refresh()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.disarm();
        if let Some(i) = self.slot {
            if let Some(s) = self.sh.slot(i) {
                self.sh.release_slot(s);
            }
        }
    }
}
