//! The single producer of a ring ([`Writer`]) and records filled by appends
//! ([`RecordBuilder`]): reserving room (waiting for lossless readers), publishing the tail
//! before overwriting, committing positions with event moderation, deck-cut resizing, the
//! byte-ring extras used by double rings (contiguous writes, in-place rewrite).
//!
//! Owns: the writer's private state and the order of its stores. Does not own: the wait
//! for readers (`release`) or the wake-up handshake (`notify`, `fences`).

use super::notify::wake_all;
use super::{fences, Layout, ReleaseCache, RingConfig, RingRef, RingStats, Shared};
use crate::error::{Error, Result};
use crate::layout::*;
use crate::pos::{self, Epoch, LapReport, ScaleState, Scaling};
use crate::shm::WriteToken;
use crate::sys;
use std::sync::atomic::{fence, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The single producer of a ring.
#[derive(Debug)]
pub struct Writer {
    sh: Arc<Shared>,
    token: WriteToken,
    pos: u64,
    prev: Option<Epoch>,
    cur: Epoch,
    tail: u64,
    /// Positions below this are released by every lossless reader (cached scan result).
    release: ReleaseCache,
    pending: u32,
    first_pending_ns: u64,
    threshold: u32,
    latency_ns: u64,
    scaling: Option<Scaling>,
    scale: ScaleState,
    /// The writer waited for space during the current scaling window.
    lap_blocked: bool,
    /// Start of the current scaling window (position, time).
    window: (u64, u64),
    /// Open poke reservation (start position, length).
    open: Option<(u64, u64)>,
    closed: bool,
    /// Batched commits ([`Writer::set_deferred`]): writes become visible only at
    /// [`Writer::commit`].
    deferred: bool,
    /// Units written since the last commit (deferred mode).
    staged: u32,
}

impl Writer {
    /// Create an anonymous (memfd) ring; share it with [`Writer::ring`] and
    /// [`RingRef::send`].
    pub fn create(name: &str, cfg: RingConfig) -> Result<Writer> {
        let sh = Shared::create(name, &cfg, false)?;
        Ok(Self::with_shared(sh, &cfg))
    }

    /// Create a ring named `/dev/shm/NAME` (and `NAME.ctl`) with `cfg.mode` permissions. A
    /// stale ring of that name whose writer died is replaced; a live one is an error.
    pub fn create_named(name: &str, cfg: RingConfig) -> Result<Writer> {
        let sh = Shared::create(name, &cfg, true)?;
        Ok(Self::with_shared(sh, &cfg))
    }

    fn with_shared(sh: Arc<Shared>, cfg: &RingConfig) -> Writer {
        let (prev, cur, _) = sh.load_epochs();
        let scaling = cfg.min_size.map(|min| Scaling {
            window_bytes: cfg.scaling_window as u64,
            ..Scaling::new(min as u64, cfg.size as u64, cfg.calm_laps)
        });
        Writer {
            sh,
            token: WriteToken::default(),
            pos: 0,
            prev,
            cur,
            tail: 0,
            release: ReleaseCache::default(),
            pending: 0,
            first_pending_ns: 0,
            threshold: cfg.threshold,
            latency_ns: cfg.latency.as_nanos() as u64,
            scaling,
            scale: ScaleState::default(),
            lap_blocked: false,
            window: (0, sys::now_ns()),
            open: None,
            closed: false,
            deferred: false,
            staged: 0,
        }
    }

    /// A handle for attaching readers or sending the ring elsewhere.
    pub fn ring(&self) -> RingRef {
        RingRef(self.sh.clone())
    }
    pub fn shared(&self) -> &Arc<Shared> {
        &self.sh
    }
    /// Batched commits (thesis 5.2.2: signals are batched by the sender). Off: every write
    /// is committed at once (one release store of the write position, one look at whether
    /// a reader sleeps). On: writes are only staged; [`Writer::commit`] (or
    /// [`Writer::flush`], [`Writer::close`]) makes all of them visible with one store, and
    /// the write position's cache line moves to the readers' core once per batch instead
    /// of once per record. A writer never waits for room with writes staged (it commits
    /// them first, or the readers could never release what it waits for), and a sleeping
    /// reader is still woken after `threshold` staged units.
    pub fn set_deferred(&mut self, on: bool) {
        if !on {
            self.commit();
        }
        self.deferred = on;
    }

    /// Make every staged write visible to readers (deferred mode; see
    /// [`Writer::set_deferred`]), waking sleeping readers per the moderation policy.
    pub fn commit(&mut self) {
        if self.staged > 0 {
            let n = std::mem::take(&mut self.staged);
            self.commit_units(self.pos, n);
        }
    }

    /// Next position to be written (everything below is written; in deferred mode, not
    /// necessarily committed).
    pub fn position(&self) -> u64 {
        self.pos
    }
    pub fn active_size(&self) -> u64 {
        self.cur.size
    }
    /// Largest record this ring accepts (payload bytes).
    pub fn max_record(&self) -> usize {
        self.sh
            .layout
            .max_payload(self.sh.slot_size, self.sh.min_cap)
    }

    /// Block until `n` readers are attached (FIFO open semantics) or the timeout passes.
    pub fn wait_for_readers(&self, n: u32, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let ctl = self
            .sh
            .ctl()
            .expect("a writer always maps the control segment");
        // SYNC POINT: Acquire loads of the reader count, pair with the AcqRel increment in
        // `Reader::attach` (a count: nothing is read through it).
        while ctl.r.0.active.load(Acquire) < n {
            if Instant::now() >= deadline {
                return Err(Error::TimedOut {
                    name: self.sh.name.clone(),
                    what: "waiting for readers",
                });
            }
            // SYNC POINT: eventcount read before the re-check; Acquire pairs with the Release
            // increment in `Reader::attach`, which follows its increment of `active`, so
            // seeing the new seq means the re-check below sees the new count.
            let seq = ctl.w.0.space_seq.load(Acquire);
            if ctl.r.0.active.load(Acquire) >= n {
                break;
            }
            sys::futex_wait(&ctl.w.0.space_seq, seq, Some(Duration::from_millis(10)));
        }
        Ok(())
    }

    /// Deck-cut: at a lap boundary that closes a scaling window, decide the next size.
    fn maybe_resize(&mut self) {
        let Some(policy) = self.scaling else { return };
        if !self.cur.at_lap_boundary(self.pos)
            || self.pos - self.window.0 < policy.window_bytes.max(self.cur.size)
        {
            return;
        }
        let now = sys::now_ns();
        let report = LapReport {
            bytes: self.pos - self.window.0,
            nanos: now - self.window.1,
            writer_blocked: std::mem::take(&mut self.lap_blocked),
        };
        self.window = (self.pos, now);
        let next = policy.next_size(self.cur.size, report, &mut self.scale);
        if next == self.cur.size {
            return;
        }
        // After the switch readers address only the current and the new epoch, so every
        // position still owed to a reader must lie in the current one. A lossless reader
        // still in an older epoch postpones the resize to a later lap; for lossy readers
        // older data is declared lost.
        if self.sh.released_now(&mut self.release) < self.cur.start {
            return;
        }
        if self.tail < self.cur.start {
            self.tail = self.cur.start;
            self.sh.hdr().t.0.tail.store(self.tail, Relaxed);
            // SYNC POINT: as in `prepare`: orders the tail store before the later stores
            // (the epoch table, and data of the new epoch); pairs with the Acquire fence in
            // `Reader::check` / `IbufReader` checks that precede their tail load.
            fence(Release);
        }
        let e = Epoch {
            start: self.pos,
            size: next,
        };
        let t = &self.sh.hdr().epochs.0;
        let count = t.count.load(Relaxed);
        // SYNC POINT: seqlock write side. The odd increment, then a Release fence that orders
        // it before the entry stores: pairs with the Acquire fence in `Shared::load_epochs`
        // (a reader that loads a new entry then re-loads seq and sees it odd or changed).
        t.seq.fetch_add(1, Relaxed);
        fence(Release);
        let slot = &t.entries[(count % EPOCHS as u64) as usize];
        slot[0].store(e.start, Relaxed);
        slot[1].store(e.size, Relaxed);
        t.count.store(count + 1, Relaxed);
        // SYNC POINT: the even increment, Release: pairs with the Acquire load of seq that
        // starts `Shared::load_epochs`; a reader that sees it sees the entries and count.
        t.seq.fetch_add(1, Release);
        // SYNC POINT: published before any data of the new epoch is committed (write_pos is
        // stored with Release later), so a reader that sees such data sees the new epoch.
        // Release pairs with the Acquire load of epoch_gen in `Reader::refresh` and the
        // IBuf readers, which then re-read the table through its seqlock.
        self.sh.hdr().p.0.epoch_gen.store(count + 1, Release);
        self.sh.hdr().m.0.resizes.fetch_add(1, Relaxed);
        self.prev = Some(self.cur);
        self.cur = e;
    }

    /// Contiguous room from the write position to the end of the current lap.
    fn room(&mut self) -> u64 {
        self.maybe_resize();
        self.cur.room_to_lap_end(self.pos)
    }

    /// Make `[pos, pos+n)` writable: wait for lossless readers, publish the new tail.
    /// `n` must not exceed the room to the lap end.
    fn prepare(&mut self, n: u64) -> Result<u64> {
        debug_assert!(n <= self.cur.room_to_lap_end(self.pos));
        if self.closed {
            return Err(Error::Closed {
                name: self.sh.name.clone(),
            });
        }
        let end = self.pos + n;
        let need = pos::horizon(self.prev, self.cur, end);
        if need > self.tail {
            self.ensure_released(need)?;
            self.tail = need;
            // SYNC POINT: the new tail is published before the data stores that overwrite
            // the old bytes (Release fence orders this store before later stores); lossy
            // readers load it after copying (Acquire fence) to detect overwrite. Pairs with
            // the Acquire fence in `Reader::check` and `IbufReader::check`: a reader whose
            // copy saw an overwriting byte then sees this tail. (The tail is stored Relaxed,
            // so the readers' plain Acquire loads of it pair with no Release store.)
            self.sh.hdr().t.0.tail.store(need, Relaxed);
            fence(Release);
        }
        Ok(self.cur.offset(self.pos))
    }

    /// Wait until every lossless reader has released positions below `need`.
    fn ensure_released(&mut self, need: u64) -> Result<()> {
        if need > self.release.min {
            // Readers release only what they can see.
            self.commit();
        }
        if need > self.release.min && self.pending > 0 {
            // We may have to wait for readers: they must not sit on a partial batch
            // meanwhile (the batch can never fill while we wait).
            self.wake_readers();
        }
        let slack = (self.cur.size / 4).min(self.pos.saturating_sub(need));
        // Borrow the two fields separately: cloning the Arc here would put two locked
        // read-modify-writes (store-buffer drains) on every write.
        if self.sh.wait_released(need, slack, &mut self.release)? {
            self.lap_blocked = true;
        }
        Ok(())
    }

    /// Commit everything below `end` (deferred mode: stage it) and wake readers per the
    /// moderation policy.
    fn publish(&mut self, end: u64) {
        self.pos = end;
        if self.deferred {
            self.staged += 1;
            // A sleeping reader is owed a wake-up after `threshold` units even while the
            // batch goes on (one look per `threshold` units at the sleep bit).
            if self.staged % self.threshold.max(1) == 0 && self.reader_sleeps() {
                self.commit();
            }
            return;
        }
        self.commit_units(end, 1);
    }

    /// Whether a reader has set the sleep bit (a hint: `commit_units` does the handshake).
    fn reader_sleeps(&self) -> bool {
        self.sh
            .ctl()
            .is_some_and(|c| c.r.0.data_seq.load(Relaxed) & 1 != 0)
    }

    /// Commit everything below `end`, `units` records or writes since the last commit.
    fn commit_units(&mut self, end: u64, units: u32) {
        let sh = &*self.sh;
        // SYNC POINT: publish (Release, see `fences::publish`; pairs with the readers'
        // Acquire load of write_pos in `refresh`) then load the eventcount (Relaxed);
        // the fast side of the sleep handshake against the readers' SeqCst fetch_or of the
        // sleep bit, heavy fence, SeqCst write_pos re-check in `Reader::wait`/`select`:
        // either we see the bit or they see the position. No lost wake-up.
        fences::publish(&sh.hdr().p.0.write_pos, end);
        let r = &sh.ctl().expect("writer has ctl").r.0;
        if r.data_seq.load(Relaxed) & 1 == 0 {
            // Nobody asleep (the common case at high rates): one load, no system call.
            self.pending = 0;
            return;
        }
        self.pending += units;
        let mut wake = self.pending >= self.threshold || r.deep_sleepers.load(Relaxed) != 0;
        if !wake {
            let now = sys::now_ns();
            if self.pending == units {
                self.first_pending_ns = now;
            } else if now - self.first_pending_ns >= self.latency_ns {
                wake = true;
            }
        }
        if wake {
            self.wake_readers();
        }
    }

    /// How long until the wake-up the moderation owes sleeping readers falls due: commits
    /// they were not woken for (fewer than the threshold, no deep sleeper) wait at most the
    /// latency bound, counted from the first of them, and only a later commit looks at the
    /// clock. A producer whose commits stop (its input went quiet) calls
    /// [`Writer::wake_if_due`] when this runs out. `None`: nothing is owed.
    pub fn wake_owed(&self) -> Option<Duration> {
        (self.pending > 0).then(|| {
            let due = self.first_pending_ns.saturating_add(self.latency_ns);
            Duration::from_nanos(due.saturating_sub(sys::now_ns()))
        })
    }

    /// Wake the sleeping readers if the wake-up owed them ([`Writer::wake_owed`]) is due;
    /// returns how long until it is, if it is still owed.
    pub fn wake_if_due(&mut self) -> Option<Duration> {
        let left = self.wake_owed()?;
        if left.is_zero() {
            self.wake_readers();
            return None;
        }
        Some(left)
    }

    fn wake_readers(&mut self) {
        self.pending = 0;
        wake_all(&self.sh);
    }

    /// Commit what is staged and wake sleeping readers now (flush a partial batch).
    pub fn flush(&mut self) {
        self.commit();
        if self.pending > 0 {
            self.wake_readers();
        }
    }

    fn write_bytes(&mut self, data: &[u8]) -> Result<usize> {
        let mut done = 0;
        while done < data.len() {
            let room = self.room();
            let n = room.min((data.len() - done) as u64);
            let off = self.prepare(n)?;
            self.sh
                .data
                .write_at(DATA_OFFSET + off as usize, &data[done..done + n as usize]);
            done += n as usize;
            self.publish(self.pos + n);
        }
        Ok(done)
    }

    /// Reserve `total` contiguous bytes (a record with its header, or a block of a byte
    /// ring that must not wrap), first skipping the rest of the lap if they do not fit
    /// there (behind a padding header where the layout has one). Returns the data-area
    /// offset.
    fn reserve_whole(&mut self, total: u64) -> Result<u64> {
        let room = self.room();
        if room < total {
            // Pad the rest of the lap (records never wrap).
            let off = self.prepare(room)?;
            if let Some(pad) = self.sh.layout.padding(room) {
                self.sh
                    .data
                    .write_at(DATA_OFFSET + off as usize, pad.bytes());
            }
            self.publish(self.pos + room);
            let _ = self.room();
        }
        self.prepare(total)
    }

    fn record_size(&self, len: usize) -> Result<u64> {
        if len > self.max_record() {
            return Err(Error::TooLarge {
                name: self.sh.name.clone(),
                len,
                max: self.max_record(),
            });
        }
        Ok(self.sh.layout.record_total(len as u64, self.sh.slot_size))
    }

    /// Byte rings: reserve `len` bytes that do not wrap (see `reserve_whole`).
    fn reserve_contiguous(&mut self, len: usize) -> Result<u64> {
        if self.sh.layout != Layout::Bytes {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "contiguous writes on a record ring",
            });
        }
        if len as u64 > self.sh.min_cap {
            return Err(Error::TooLarge {
                name: self.sh.name.clone(),
                len,
                max: self.sh.min_cap as usize,
            });
        }
        self.reserve_whole(len as u64)
    }

    /// Append one record (record layouts) and return the absolute position of its payload.
    pub fn append_record(&mut self, data: &[u8]) -> Result<u64> {
        let mut rec = self.open_record(data.len())?;
        rec.append(data)?;
        rec.commit()
    }

    /// Tag rings: append whole tags (`data`, a multiple of the tag size) with one copy per
    /// stretch up to the lap end instead of one record each. Returns the position of the
    /// first. In deferred mode they count as that many staged units.
    pub fn append_tags(&mut self, data: &[u8]) -> Result<u64> {
        let unit = self.sh.slot_size as usize;
        if self.sh.layout != Layout::Tags || data.len() % unit != 0 {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "runs of tags on anything but a tag ring",
            });
        }
        self.check_single_producer()?;
        let first = self.pos;
        let mut done = 0;
        while done < data.len() {
            // Never more than a quarter of the ring at once: readers release while we write.
            let n = (self.room() as usize)
                .min(data.len() - done)
                .min((self.cur.size as usize / 4).max(unit))
                / unit
                * unit;
            let off = self.prepare(n as u64)?;
            self.sh
                .data
                .write_at(DATA_OFFSET + off as usize, &data[done..done + n]);
            done += n;
            let units = (n / unit) as u32;
            self.pos += n as u64;
            if self.deferred {
                let before = self.staged;
                self.staged += units;
                let t = self.threshold.max(1);
                if before / t != self.staged / t && self.reader_sleeps() {
                    self.commit();
                }
            } else {
                self.commit_units(self.pos, units);
            }
        }
        Ok(first)
    }

    /// Open a record of at most `max` payload bytes, to be filled with
    /// [`RecordBuilder::append`] (thesis `slfile_append`): appends adjust the open record's
    /// length without moving the write pointer until commit.
    pub fn open_record(&mut self, max: usize) -> Result<RecordBuilder<'_>> {
        if !self.sh.layout.is_record() {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "records on a byte ring",
            });
        }
        self.check_single_producer()?;
        let total = self.record_size(max)?;
        let off = self.reserve_whole(total)?;
        let hdr = self.sh.layout.payload_hdr();
        Ok(RecordBuilder {
            w: self,
            off,
            hdr,
            cap: max,
            len: 0,
            total,
        })
    }

    fn check_single_producer(&self) -> Result<()> {
        if self.sh.multi_producer {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "single-producer writes on a multi-producer ring (use MpWriter)",
            });
        }
        Ok(())
    }

    /// Unix `write`: byte rings take all of `data` (blocking as needed), record rings store
    /// it as one record.
    pub fn write(&mut self, data: &[u8]) -> Result<usize> {
        self.check_single_producer()?;
        if self.sh.layout == Layout::Bytes {
            self.write_bytes(data)
        } else {
            self.append_record(data)?;
            Ok(data.len())
        }
    }

    /// `poke_acquire`: a writable window of up to `len` bytes at the write position, not yet
    /// visible to readers. Byte rings may return less (up to the lap end); record rings
    /// return exactly `len` bytes of record payload.
    pub fn poke_acquire(&mut self, len: usize) -> Result<&mut [u8]> {
        self.check_single_producer()?;
        if self.open.is_some() {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "a second poke_acquire before poke_complete",
            });
        }
        let (off, n, start) = match self.sh.layout {
            Layout::Bytes => {
                let room = self.room();
                let n = room.min(len as u64).min(self.cur.size);
                let off = self.prepare(n)?;
                (off, n, self.pos)
            }
            _ => {
                let total = self.record_size(len)?;
                let off = self.reserve_whole(total)?;
                (off + self.sh.layout.payload_hdr(), len as u64, self.pos)
            }
        };
        self.open = Some((start, n));
        Ok(self
            .sh
            .data
            .reserved_mut(&mut self.token, DATA_OFFSET + off as usize, n as usize))
    }

    /// `poke_complete`: commit the first `len` bytes of the acquired window (records: the
    /// record's final payload length). Returns the payload's absolute position.
    pub fn poke_complete(&mut self, len: usize) -> Result<u64> {
        let Some((start, cap)) = self.open.take() else {
            return Err(Error::Unsupported {
                name: self.sh.name.clone(),
                what: "poke_complete without poke_acquire",
            });
        };
        if len as u64 > cap {
            self.open = Some((start, cap));
            return Err(Error::TooLarge {
                name: self.sh.name.clone(),
                len,
                max: cap as usize,
            });
        }
        match self.sh.layout {
            Layout::Bytes => {
                self.publish(start + len as u64);
                Ok(start)
            }
            _ => {
                let off = self.cur.offset(start) as usize + DATA_OFFSET;
                let total = self.record_size(cap as usize)?;
                self.finish_record(off, len as u64, total)
            }
        }
    }

    fn finish_record(&mut self, off: usize, len: u64, total: u64) -> Result<u64> {
        let start = self.pos;
        let layout = self.sh.layout;
        debug_assert!(layout.is_record(), "byte rings have no records");
        let hdr = layout.header(len as u32);
        if !hdr.bytes().is_empty() {
            self.sh.data.write_at(off, hdr.bytes());
        }
        // A variable record returns the unused end of its reservation.
        self.publish(start + layout.record_used(len, total));
        Ok(start + layout.payload_hdr())
    }

    /// The tail a contiguous write of `len` bytes at the current position would need
    /// (including skipping to the next lap when it does not fit before the lap end).
    pub fn contiguous_need(&mut self, len: usize) -> Result<u64> {
        let len = len as u64;
        if len > self.sh.min_cap {
            return Err(Error::TooLarge {
                name: self.sh.name.clone(),
                len: len as usize,
                max: self.sh.min_cap as usize,
            });
        }
        let room = self.room();
        let end = if room < len {
            self.pos + room + len
        } else {
            self.pos + len
        };
        Ok(pos::horizon(self.prev, self.cur, end).max(self.tail))
    }

    /// Byte rings: write `data` contiguously (skipping to the next lap if it would wrap) and
    /// return its absolute position. Used for double rings, where headers live elsewhere.
    pub fn write_contiguous(&mut self, data: &[u8]) -> Result<u64> {
        self.write_contiguous_parts(&[data])
    }

    /// Byte rings: reserve `len` contiguous bytes (skipping to the next lap if they would
    /// wrap), commit them at once, and return their position and a writable view. For a
    /// ring whose readers learn where blocks are only from tags sent afterwards (a space's
    /// data shared with other spaces through IBufs): fill the view, then send the tag.
    /// Readers attached to the ring itself would see the bytes before they are written.
    pub fn alloc_contiguous(&mut self, len: usize) -> Result<(u64, &mut [u8])> {
        let off = self.reserve_contiguous(len)?;
        let at = self.pos;
        self.publish(at + len as u64);
        Ok((
            at,
            self.sh
                .data
                .reserved_mut(&mut self.token, DATA_OFFSET + off as usize, len),
        ))
    }

    /// A writable view of `len` committed bytes at `at` that the ring still holds (not
    /// overwritten, not wrapping): for the producer's own in-place edit of a block no
    /// reader holds (a space editing a block of its shared data ring that it has not sent
    /// yet). None when the bytes are gone or the ring is not a byte ring.
    pub fn rewrite(&mut self, at: u64, len: usize) -> Option<&mut [u8]> {
        if self.sh.layout != Layout::Bytes {
            return None;
        }
        let end = at.checked_add(len as u64)?;
        // Relaxed: this writer is the only one that stores the tail.
        let tail = self.sh.hdr().t.0.tail.load(Relaxed);
        if at < tail || end > self.pos {
            return None;
        }
        let (prev, cur, _) = self.sh.load_epochs();
        let ep = pos::epoch_for(prev, cur, at)?;
        let off = ep.offset(at);
        if off + len as u64 > ep.size {
            return None;
        }
        Some(
            self.sh
                .data
                .reserved_mut(&mut self.token, DATA_OFFSET + off as usize, len),
        )
    }

    /// Return the unused end of the last [`Writer::alloc_contiguous`] (at `at`, of `len`
    /// bytes, of which `used` were written): the write position moves back to `at + used`.
    /// Only for rings without readers of their own (whose blocks are found through tags
    /// sent later), and only before any tag for that allocation was sent.
    pub fn give_back(&mut self, at: u64, len: usize, used: usize) {
        if used < len && self.pos == at + len as u64 && self.open.is_none() {
            self.pos = at + used as u64;
            if !self.deferred {
                // SYNC POINT: as in `publish` (no reader of this ring's own waits on it).
                fences::publish(&self.sh.hdr().p.0.write_pos, self.pos);
            }
        }
    }

    /// Byte rings whose readers learn where blocks are only from tags (see
    /// [`Writer::alloc_contiguous`]): move the write position to the start of the next lap,
    /// leaving the rest of this one unwritten (a producer that lays out its laps itself).
    pub fn skip_lap(&mut self) {
        let room = self.room();
        if self.sh.layout == Layout::Bytes && room < self.cur.size && self.prepare(room).is_ok() {
            self.publish(self.pos + room);
        }
    }

    /// [`Writer::write_contiguous`] of the concatenation of `parts` (no intermediate copy).
    pub fn write_contiguous_parts(&mut self, parts: &[&[u8]]) -> Result<u64> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let len = total as u64;
        let off = self.reserve_contiguous(total)?;
        let at = self.pos;
        let mut o = DATA_OFFSET + off as usize;
        for p in parts {
            self.sh.data.write_at(o, p);
            o += p.len();
        }
        self.publish(at + len);
        Ok(at)
    }

    /// Close the stream: readers drain what was written, then see EOF.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.commit();
        self.closed = true;
        let h = self.sh.hdr();
        // SYNC POINT: the Release half pairs with the Acquire load in `Reader::ended` and
        // the SeqCst re-check in `Reader::wait`: a reader that sees CLOSED sees every
        // commit before it. `wake_readers` then wakes unconditionally, so no handshake
        // needs the SeqCst; Release would do.
        h.p.0.state.fetch_or(STATE_CLOSED, SeqCst);
        self.wake_readers();
    }

    pub fn stats(&self) -> RingStats {
        self.sh.stats()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.close();
    }
}

/// An open record being filled by appends.
#[derive(Debug)]
pub struct RecordBuilder<'a> {
    w: &'a mut Writer,
    off: u64,
    hdr: u64,
    cap: usize,
    len: usize,
    total: u64,
}

impl RecordBuilder<'_> {
    /// Append to the open record (thesis `slfile_append`); never wraps.
    pub fn append(&mut self, data: &[u8]) -> Result<&mut Self> {
        if self.len + data.len() > self.cap {
            return Err(Error::TooLarge {
                name: self.w.sh.name.clone(),
                len: self.len + data.len(),
                max: self.cap,
            });
        }
        let at = DATA_OFFSET + (self.off + self.hdr) as usize + self.len;
        self.w.sh.data.write_at(at, data);
        self.len += data.len();
        Ok(self)
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Publish the record; returns the absolute position of its payload.
    pub fn commit(self) -> Result<u64> {
        let off = DATA_OFFSET + self.off as usize;
        self.w.finish_record(off, self.len as u64, self.total)
    }
}
