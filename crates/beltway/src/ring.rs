//! The shared ring: creation and opening, the single producer ([`Writer`]) and the
//! consumers ([`Reader`]), with every specialization of thesis 4.5 selected by
//! [`RingConfig`]:
//!
//! - layout: byte stream, fixed-slot records, variable records with inline length, tags;
//! - synchronization: SRP (lossless, writer blocks on the slowest reader, Unix pipe
//!   semantics), FRP (writer never waits, readers validate), MRP (writer waits on a shared
//!   pointer R that readers advance);
//! - size: static, or self-scaling by deck-cut between a minimum and the mapped maximum;
//! - event moderation: wake-ups batched by a threshold with a latency bound (thesis 5.2.2).
//!
//! Blocking uses futex words in shared memory. Blocked parties wake at least every
//! `liveness` interval to check that the peer they wait for is alive, so a peer killed with
//! SIGKILL never wedges the others (its reader slot is reclaimed; a dead writer reads as EOF).

use crate::error::{Error, Result};
use crate::layout::*;
use crate::pos::{self, Epoch, LapReport, ScaleState, Scaling};
use crate::shm::{Backing, Segment, WriteToken};
use crate::sys::{self, Wake};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicU32, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Data layout of a ring (thesis 4.5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// b-DBuf: an unstructured byte stream; writes may wrap.
    Bytes = 1,
    /// fr-DBuf: one record per fixed-size slot (4-byte length, then payload).
    Slots = 2,
    /// vr-DBuf: variable records with an inline 8-byte header, never wrapping.
    Records = 3,
    /// Fixed 16-byte slots holding tags (the IBuf layout).
    Tags = 4,
}

impl Layout {
    fn from_code(c: u32) -> Option<Layout> {
        Some(match c {
            1 => Layout::Bytes,
            2 => Layout::Slots,
            3 => Layout::Records,
            4 => Layout::Tags,
            _ => return None,
        })
    }
    pub fn is_record(self) -> bool {
        self != Layout::Bytes
    }
}

/// Multi-consumer synchronization (thesis 4.5.4; SRP here is the lossless, blocking form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Slow reader preference: lossless; the writer blocks on the slowest reader.
    Srp = 1,
    /// Fast reader preference: the writer never waits; late readers detect overwrite.
    Frp = 2,
    /// Medium reader preference: the writer waits on a shared pointer R that each reader
    /// raises to its previous position; tardy readers may lose data and detect it.
    Mrp = 3,
}

impl SyncMode {
    fn from_code(c: u32) -> Option<SyncMode> {
        Some(match c {
            1 => SyncMode::Srp,
            2 => SyncMode::Frp,
            3 => SyncMode::Mrp,
            _ => return None,
        })
    }
}

/// Where a newly attached reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The oldest data still in the ring that the reader may have (for SRP: the oldest data
    /// some existing reader has not released; for lossy rings: the tail).
    Oldest,
    /// Only data written from now on.
    Latest,
}

/// Everything that specializes a ring.
#[derive(Debug, Clone)]
pub struct RingConfig {
    /// Size of the data area in bytes (power of two, at least 4 KiB). With self-scaling this
    /// is the maximum size.
    pub size: usize,
    /// Enables deck-cut self-scaling down to this size (power of two).
    pub min_size: Option<usize>,
    /// Active size at creation for a self-scaling ring (default: `size`).
    pub initial_size: Option<usize>,
    /// Unsaturated windows (the writer never waited) before a self-scaling ring halves.
    pub calm_laps: u32,
    /// Minimum bytes between two scaling decisions (at least one lap).
    pub scaling_window: usize,
    pub layout: Layout,
    /// Slot size for [`Layout::Slots`] (power of two, >= 16).
    pub slot_size: u32,
    pub sync: SyncMode,
    /// Reader slots in the control segment.
    pub max_readers: u32,
    /// Event batching threshold (commits per wake-up); 1 disables batching.
    pub threshold: u32,
    /// Latency bound for batched wake-ups.
    pub latency: Duration,
    /// Permission bits of the data segment (named rings).
    pub mode: u32,
    /// Permission bits of the control segment; readers that cannot write it are
    /// unregistered observers. Default: same as `mode`.
    pub ctl_mode: Option<u32>,
    /// Allow several producers (acquire/complete with the open/closed bitmap); slot and
    /// tag layouts only.
    pub multi_producer: bool,
    /// Identifier of this DBuf inside tags.
    pub buf_id: u16,
    /// How often a blocked party checks that its peer is still alive.
    pub liveness: Duration,
    /// SRP only: readers may come and go. The writer stays lossless towards the readers
    /// attached, and writes on without waiting while none is (no broken pipe when the
    /// last one leaves). For a lossless stream offered to whoever attaches (a stream that
    /// must not wait for its readers, like a published capture, is FRP instead).
    pub detachable: bool,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            size: 1 << 20,
            min_size: None,
            initial_size: None,
            calm_laps: 1,
            scaling_window: 4 << 20,
            layout: Layout::Bytes,
            slot_size: 2048,
            sync: SyncMode::Srp,
            max_readers: 64,
            threshold: 32,
            latency: Duration::from_millis(1),
            mode: 0o600,
            ctl_mode: None,
            multi_producer: false,
            buf_id: 1,
            liveness: Duration::from_millis(100),
            detachable: false,
        }
    }
}

impl RingConfig {
    pub fn bytes(size: usize) -> Self {
        RingConfig { size, ..Default::default() }
    }
    pub fn layout(mut self, l: Layout) -> Self {
        self.layout = l;
        if l == Layout::Tags {
            self.slot_size = 16;
        }
        self
    }
    pub fn sync(mut self, s: SyncMode) -> Self {
        self.sync = s;
        self
    }
    pub fn slots(mut self, slot: u32) -> Self {
        self.layout = Layout::Slots;
        self.slot_size = slot;
        self
    }
    pub fn threshold(mut self, t: u32) -> Self {
        self.threshold = t;
        self
    }
    pub fn self_scaling(mut self, min: usize, initial: usize) -> Self {
        self.min_size = Some(min);
        self.initial_size = Some(initial);
        self
    }

    fn validate(&self, name: &str) -> Result<()> {
        let bad = |why: String| Err(Error::Config { name: name.to_string(), why });
        if !self.size.is_power_of_two() || self.size < 4096 {
            return bad(format!("size {} is not a power of two >= 4096", self.size));
        }
        if let Some(min) = self.min_size {
            if !min.is_power_of_two() || min > self.size || min < 4096 {
                return bad(format!("min_size {min} must be a power of two in 4096..={}", self.size));
            }
            let init = self.initial_size.unwrap_or(self.size);
            if !init.is_power_of_two() || init < min || init > self.size {
                return bad(format!("initial_size {init} must be a power of two in {min}..={}", self.size));
            }
            if self.multi_producer {
                return bad("self-scaling rings take a single producer".into());
            }
        }
        if matches!(self.layout, Layout::Slots | Layout::Tags)
            && (!self.slot_size.is_power_of_two() || self.slot_size < 16 || self.slot_size as usize > self.min_cap())
        {
            return bad(format!("slot size {} must be a power of two in 16..=ring size", self.slot_size));
        }
        if self.layout == Layout::Tags && self.slot_size != 16 {
            return bad("tag rings have 16-byte slots".into());
        }
        if self.multi_producer && !matches!(self.layout, Layout::Slots | Layout::Tags) {
            return bad("multiple producers need a slot or tag layout (containers)".into());
        }
        if self.max_readers == 0 || self.max_readers > 4096 {
            return bad(format!("max_readers {} must be in 1..=4096", self.max_readers));
        }
        if self.threshold == 0 {
            return bad("threshold must be at least 1".into());
        }
        Ok(())
    }

    fn min_cap(&self) -> usize {
        self.min_size.unwrap_or(self.size)
    }
}

/// The mapped segments of one ring, shared by all handles of this process.
#[derive(Debug)]
pub struct Shared {
    pub(crate) name: String,
    pub(crate) data: Segment,
    pub(crate) ctl: Option<Segment>,
    pub(crate) layout: Layout,
    pub(crate) sync: SyncMode,
    pub(crate) slot_size: u64,
    pub(crate) max_cap: u64,
    pub(crate) min_cap: u64,
    pub(crate) max_readers: usize,
    pub(crate) buf_id: u16,
    pub(crate) multi_producer: bool,
    liveness: Duration,
    /// Readers may all leave without breaking the pipe (the creator's [`RingConfig`]).
    detachable: bool,
    /// Remove the names from /dev/shm when this (creating) handle set is dropped.
    unlink_on_drop: bool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.unlink_on_drop {
            if let Backing::Path(p) = self.data.backing() {
                let _ = sys::unlink(p);
                let _ = sys::unlink(&format!("{p}.ctl"));
            }
        }
    }
}

fn shm_path(name: &str) -> Result<String> {
    if name.is_empty() || name.len() > 200 || name.contains('/') || name.starts_with('.') || name.contains('\0') {
        return Err(Error::Config {
            name: name.to_string(),
            why: "a ring name is 1-200 characters without '/' or NUL and does not start with '.'".into(),
        });
    }
    Ok(format!("/dev/shm/{name}"))
}

impl Shared {
    pub(crate) fn hdr(&self) -> &RingHeader {
        self.data.get::<RingHeader>(0)
    }
    pub(crate) fn ctl(&self) -> Option<&CtlHeader> {
        self.ctl.as_ref().map(|c| c.get::<CtlHeader>(0))
    }
    pub(crate) fn slot(&self, i: usize) -> Option<&ReaderSlot> {
        self.ctl.as_ref().map(|c| c.get::<ReaderSlot>(slot_offset(i)))
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn buf_id(&self) -> u16 {
        self.buf_id
    }
    pub fn layout(&self) -> Layout {
        self.layout
    }
    pub fn sync(&self) -> SyncMode {
        self.sync
    }
    pub fn max_size(&self) -> u64 {
        self.max_cap
    }

    fn create(name: &str, cfg: &RingConfig, named: bool) -> Result<Arc<Shared>> {
        cfg.validate(name)?;
        fences::init();
        let data_len = DATA_OFFSET + cfg.size;
        let ctl_len = ctl_len(cfg.max_readers as usize);
        let os = |op: &'static str| move |e| Error::os(name, op, e);
        let (data, ctl) = if named {
            let path = shm_path(name)?;
            let data = match Segment::create_path(&path, data_len, cfg.mode) {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    Self::remove_stale(name, &path)?;
                    Segment::create_path(&path, data_len, cfg.mode).map_err(os("create data segment"))?
                }
                Err(e) => return Err(Error::os(name, "create data segment", e)),
            };
            let ctl_path = format!("{path}.ctl");
            let _ = sys::unlink(&ctl_path);
            let ctl = match Segment::create_path(&ctl_path, ctl_len, cfg.ctl_mode.unwrap_or(cfg.mode)) {
                Ok(c) => c,
                Err(e) => {
                    let _ = sys::unlink(&path);
                    return Err(Error::os(name, "create control segment", e));
                }
            };
            (data, ctl)
        } else {
            let data = Segment::create_memfd(&format!("beltway:{name}"), data_len).map_err(os("memfd data"))?;
            let ctl = Segment::create_memfd(&format!("beltway:{name}.ctl"), ctl_len).map_err(os("memfd ctl"))?;
            (data, ctl)
        };
        let h = data.get::<RingHeader>(0);
        let c = &h.c.0;
        c.version.store(VERSION, Relaxed);
        c.layout.store(cfg.layout as u32, Relaxed);
        c.sync.store(cfg.sync as u32, Relaxed);
        c.slot_size.store(if cfg.layout.is_record() && cfg.layout != Layout::Records { cfg.slot_size } else { 0 }, Relaxed);
        c.max_cap.store(cfg.size as u64, Relaxed);
        c.min_cap.store(cfg.min_cap() as u64, Relaxed);
        c.writer_pid.store(sys::getpid(), Relaxed);
        c.writer_start.store(sys::process_start_time(sys::getpid()).unwrap_or(0), Relaxed);
        c.multi_producer.store(cfg.multi_producer as u32, Relaxed);
        c.buf_id.store(cfg.buf_id as u32, Relaxed);
        c.max_readers.store(cfg.max_readers, Relaxed);
        let initial = if cfg.min_size.is_some() { cfg.initial_size.unwrap_or(cfg.size) } else { cfg.size };
        let e = &h.epochs.0;
        e.entries[0][0].store(0, Relaxed);
        e.entries[0][1].store(initial as u64, Relaxed);
        e.count.store(1, Relaxed);
        h.p.0.epoch_gen.store(1, Relaxed);
        h.p.0.guard.store(u64::MAX, Relaxed);
        h.m.0.threshold.store(cfg.threshold, Relaxed);
        h.m.0.latency_us.store(cfg.latency.as_micros().min(u32::MAX as u128) as u32, Relaxed);
        let ch = ctl.get::<CtlHeader>(0);
        // SYNC POINT: magic words are stored last with Release; openers load them with
        // Acquire, so they never observe a half-initialised header.
        ch.magic.0.store(MAGIC_CTL, Release);
        c.magic.store(MAGIC_DATA, Release);
        Ok(Arc::new(Shared {
            name: name.to_string(),
            data,
            ctl: Some(ctl),
            layout: cfg.layout,
            sync: cfg.sync,
            slot_size: if matches!(cfg.layout, Layout::Slots | Layout::Tags) { cfg.slot_size as u64 } else { 0 },
            max_cap: cfg.size as u64,
            min_cap: cfg.min_cap() as u64,
            max_readers: cfg.max_readers as usize,
            buf_id: cfg.buf_id,
            multi_producer: cfg.multi_producer,
            liveness: cfg.liveness,
            detachable: cfg.detachable,
            unlink_on_drop: named,
        }))
    }

    /// A ring with this name exists. If its writer is dead (crash), remove it so it can be
    /// re-created; if the writer lives, refuse.
    fn remove_stale(name: &str, path: &str) -> Result<()> {
        match Segment::open_path(path, false) {
            Ok(seg) => {
                if seg.len() >= DATA_OFFSET {
                    let h = seg.get::<RingHeader>(0);
                    let pid = h.c.0.writer_pid.load(Relaxed);
                    let start = h.c.0.writer_start.load(Relaxed);
                    let closed = h.p.0.state.load(Relaxed) & STATE_CLOSED != 0;
                    if h.c.0.magic.load(Acquire) == MAGIC_DATA && !closed && sys::process_alive(pid, start) {
                        return Err(Error::InUse { name: name.to_string(), pid });
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::os(name, "inspect existing ring", e)),
        }
        let _ = sys::unlink(path);
        let _ = sys::unlink(&format!("{path}.ctl"));
        Ok(())
    }

    /// Validate a mapped data segment (it may come from a hostile or corrupt peer).
    fn from_segments(name: &str, data: Segment, ctl: Option<Segment>) -> Result<Arc<Shared>> {
        fences::init();
        let bad = |why: String| Err(Error::BadRing { name: name.to_string(), why });
        if data.len() < DATA_OFFSET + 4096 {
            return bad(format!("data segment of {} bytes is too small", data.len()));
        }
        let h = data.get::<RingHeader>(0);
        let c = &h.c.0;
        if c.magic.load(Acquire) != MAGIC_DATA {
            return bad("bad magic in data segment (not a beltway ring, or still being created)".into());
        }
        if c.version.load(Relaxed) != VERSION {
            return bad(format!("version {} (expected {VERSION})", c.version.load(Relaxed)));
        }
        let Some(layout) = Layout::from_code(c.layout.load(Relaxed)) else {
            return bad(format!("unknown layout code {}", c.layout.load(Relaxed)));
        };
        let Some(sync) = SyncMode::from_code(c.sync.load(Relaxed)) else {
            return bad(format!("unknown sync code {}", c.sync.load(Relaxed)));
        };
        let max_cap = c.max_cap.load(Relaxed);
        let min_cap = c.min_cap.load(Relaxed);
        if !max_cap.is_power_of_two() || max_cap as usize + DATA_OFFSET > data.len() {
            return bad(format!("data area of {max_cap} bytes does not fit a {}-byte segment", data.len()));
        }
        if !min_cap.is_power_of_two() || min_cap > max_cap || min_cap < 4096 {
            return bad(format!("minimum size {min_cap} is invalid"));
        }
        let slot_size = c.slot_size.load(Relaxed) as u64;
        if matches!(layout, Layout::Slots | Layout::Tags) && (!slot_size.is_power_of_two() || slot_size < 16 || slot_size > min_cap) {
            return bad(format!("slot size {slot_size} is invalid"));
        }
        let max_readers = c.max_readers.load(Relaxed) as usize;
        if max_readers == 0 || max_readers > 4096 {
            return bad(format!("reader slot count {max_readers} is invalid"));
        }
        let ctl = match ctl {
            Some(seg) => {
                if seg.len() < ctl_len(max_readers) {
                    return bad(format!("control segment of {} bytes holds fewer than {max_readers} slots", seg.len()));
                }
                if seg.get::<CtlHeader>(0).magic.0.load(Acquire) != MAGIC_CTL {
                    return bad("bad magic in control segment".into());
                }
                Some(seg)
            }
            None => None,
        };
        let latency_us = h.m.0.latency_us.load(Relaxed);
        Ok(Arc::new(Shared {
            name: name.to_string(),
            layout,
            sync,
            slot_size: if matches!(layout, Layout::Slots | Layout::Tags) { slot_size } else { 0 },
            max_cap,
            min_cap,
            max_readers,
            buf_id: c.buf_id.load(Relaxed) as u16,
            multi_producer: c.multi_producer.load(Relaxed) != 0,
            liveness: Duration::from_micros((latency_us as u64 * 100).clamp(20_000, 200_000)),
            detachable: false,
            unlink_on_drop: false,
            data,
            ctl,
        }))
    }

    /// Open a named ring. The data segment is mapped read-write only when `write` is asked
    /// and permitted; the control segment read-write when permitted (else the client is an
    /// unregistered observer).
    pub(crate) fn open_named(name: &str, write: bool) -> Result<Arc<Shared>> {
        let path = shm_path(name)?;
        let data = Segment::open_path(&path, write).map_err(|e| Error::os(name, "open data segment", e))?;
        if write && !data.writable() {
            return Err(Error::Permission { name: name.to_string(), what: "write access to the data segment".into() });
        }
        // A client that cannot write the control segment (or finds none) is an observer.
        let ctl = match Segment::open_path(&format!("{path}.ctl"), true) {
            Ok(c) if c.writable() => Some(c),
            Ok(_) => None,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::ENOENT)) => None,
            Err(e) => return Err(Error::os(name, "open control segment", e)),
        };
        Self::from_segments(name, data, ctl)
    }

    /// Current epochs (previous, current) from the seqlocked table.
    pub(crate) fn load_epochs(&self) -> (Option<Epoch>, Epoch, u64) {
        let t = &self.hdr().epochs.0;
        loop {
            // SYNC POINT: seqlock read side; pairs with the writer's odd/even stores.
            let s1 = t.seq.load(Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let count = t.count.load(Relaxed);
            let get = |i: u64| {
                let e = &t.entries[(i % EPOCHS as u64) as usize];
                Epoch { start: e[0].load(Relaxed), size: e[1].load(Relaxed) }
            };
            let cur = get(count.saturating_sub(1));
            let prev = if count >= 2 { Some(get(count - 2)) } else { None };
            fence(Acquire);
            if t.seq.load(Relaxed) == s1 {
                // A corrupt table must not make us index outside the data area.
                let sane = |e: &Epoch| e.size.is_power_of_two() && e.size <= self.max_cap && e.size >= self.min_cap;
                let cur = if sane(&cur) { cur } else { Epoch { start: cur.start, size: self.min_cap } };
                let prev = prev.filter(sane);
                return (prev, cur, count);
            }
        }
    }

    /// Lock the control segment's small lock (reader attach vs. writer re-scan). The lock
    /// word holds the owner's pid; a dead owner's lock is broken.
    fn lock_ctl(&self) -> Option<CtlGuard<'_>> {
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

    fn writer_alive(&self) -> bool {
        let c = &self.hdr().c.0;
        sys::process_alive(c.writer_pid.load(Relaxed), c.writer_start.load(Relaxed))
    }

    /// Minimum position over lossless readers, reaping dead ones when `reap`.
    /// Returns None when no lossless reader is attached.
    fn scan_min(&self, reap: bool) -> Option<u64> {
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

    fn release_slot(&self, s: &ReaderSlot) {
        if s.state.swap(SLOT_FREE, AcqRel) == SLOT_ACTIVE {
            if let Some(ctl) = self.ctl() {
                ctl.r.0.active.fetch_sub(1, AcqRel);
                // Wake a writer that may be waiting on this reader.
                ctl.w.0.space_seq.fetch_add(1, Release);
                sys::futex_wake(&ctl.w.0.space_seq, i32::MAX);
            }
        }
    }

    /// Statistics snapshot.
    pub fn stats(&self) -> RingStats {
        let h = self.hdr();
        let (_, cur, _) = self.load_epochs();
        RingStats {
            write_pos: h.p.0.write_pos.load(Relaxed),
            tail: h.t.0.tail.load(Relaxed),
            active_size: cur.size,
            wakeups: h.m.0.wakeups.load(Relaxed),
            writer_waits: h.m.0.writer_waits.load(Relaxed),
            resizes: h.m.0.resizes.load(Relaxed),
            readers: self.ctl().map_or(0, |c| c.r.0.active.load(Relaxed)),
        }
    }

    /// Descriptors of both segments (for passing to another process).
    pub fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        let mut v = vec![self.data.fd()];
        if let Some(c) = &self.ctl {
            v.push(c.fd());
        }
        v
    }

    /// Send this ring to another process over a Unix socket (SCM_RIGHTS).
    pub fn send(&self, sock: &UnixStream) -> Result<()> {
        let fds: Vec<_> = self.fds().iter().map(|f| f.as_raw_fd()).collect();
        let mut payload = Vec::from(self.name.as_bytes());
        payload.truncate(200);
        payload.insert(0, payload.len() as u8);
        sys::send_fds(sock, &payload, &fds).map_err(|e| Error::os(&self.name, "send ring descriptors", e))
    }

    /// Receive a ring sent with [`Shared::send`].
    pub fn recv(sock: &UnixStream) -> Result<Arc<Shared>> {
        let mut buf = [0u8; 256];
        let (n, fds) = sys::recv_fds(sock, &mut buf, 2).map_err(|e| Error::os("<socket>", "receive ring descriptors", e))?;
        if n == 0 {
            return Err(Error::BadRing { name: "<socket>".into(), why: "peer closed before sending a ring".into() });
        }
        let len = (buf[0] as usize).min(n - 1);
        let name = String::from_utf8_lossy(&buf[1..1 + len]).into_owned();
        let mut fds = fds.into_iter();
        let data: OwnedFd = fds.next().ok_or_else(|| Error::BadRing { name: name.clone(), why: "no descriptors received".into() })?;
        let data = Segment::from_fd(data).map_err(|e| Error::os(&name, "map received data segment", e))?;
        let ctl = match fds.next() {
            Some(fd) => {
                let seg = Segment::from_fd(fd).map_err(|e| Error::os(&name, "map received control segment", e))?;
                seg.writable().then_some(seg)
            }
            None => None,
        };
        Self::from_segments(&name, data, ctl)
    }
}

struct CtlGuard<'a> {
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

/// A snapshot of ring statistics.
#[derive(Debug, Clone, Copy, Default)]
pub struct RingStats {
    pub write_pos: u64,
    pub tail: u64,
    pub active_size: u64,
    pub wakeups: u64,
    pub writer_waits: u64,
    pub resizes: u64,
    pub readers: u32,
}

/// A handle to a ring that can attach readers or be sent to another process.
#[derive(Debug, Clone)]
pub struct RingRef(pub(crate) Arc<Shared>);

impl RingRef {
    /// Whether the process that created the ring (its writer) still runs, and its pid.
    pub fn writer(&self) -> (u32, bool) {
        (self.0.hdr().c.0.writer_pid.load(Relaxed) as u32, self.0.writer_alive())
    }

    /// Readers attached right now (registered, lossless or not).
    pub fn readers(&self) -> u32 {
        self.0.ctl().map_or(0, |c| c.r.0.active.load(Acquire))
    }

    /// Free the reader slots of processes that died and return the readers still attached.
    /// The writer of a lossy ring never waits for its readers, so it never notices a
    /// reader killed without detaching; a writer that works only while someone reads (a
    /// published stream) asks now and then.
    pub fn reap(&self) -> u32 {
        if self.0.ctl().is_some() {
            let _g = self.0.lock_ctl();
            self.0.scan_min(true);
        }
        self.readers()
    }

    /// Open a named ring (under /dev/shm) for reading.
    pub fn open(name: &str) -> Result<RingRef> {
        Ok(RingRef(Shared::open_named(name, false)?))
    }
    pub fn reader(&self, start: Start) -> Result<Reader> {
        Reader::attach(self.0.clone(), start)
    }
    pub fn shared(&self) -> &Shared {
        &self.0
    }
    pub fn send(&self, sock: &UnixStream) -> Result<()> {
        self.0.send(sock)
    }
    pub fn recv(sock: &UnixStream) -> Result<RingRef> {
        Ok(RingRef(Shared::recv(sock)?))
    }
    /// Producer side: wait until every lossless reader has released everything below
    /// `pos` (e.g. the tags that point into data the producer is about to reuse).
    pub fn wait_released(&self, pos: u64) -> Result<()> {
        let mut cache = ReleaseCache::default();
        self.0.wait_released(pos, 0, &mut cache).map(|_| ())
    }
    /// Producer side: how far every lossless reader has released now (`u64::MAX` when
    /// nothing constrains).
    pub fn released(&self) -> u64 {
        let mut cache = ReleaseCache::default();
        self.0.released_now(&mut cache)
    }
    pub fn stats(&self) -> RingStats {
        self.0.stats()
    }
}

/// Spin iterations before a blocked party goes to sleep.
const SPIN_ROUNDS: u32 = 256;

/// Record header of the variable-record layout: `len` payload bytes follow (padded to 8).
pub(crate) const REC_HDR: u64 = 8;
pub(crate) const REC_DATA: u32 = 0x5245_4301; // "REC\x01"
pub(crate) const REC_PAD: u32 = 0x5041_4401; // "PAD\x01"
/// Slot layout: 4-byte length before the payload.
pub(crate) const SLOT_HDR: u64 = 4;

#[inline]
fn align8(n: u64) -> u64 {
    (n + 7) & !7
}

/// Asymmetric fences for the sleep/wake handshakes (a Dekker pattern between a fast side
/// that publishes a position and then loads a sleep flag, and a slow side that sets the flag
/// and then loads the position). The fast side runs on every read and write; the slow side
/// only when a party is about to sleep. With expedited global membarrier the fast side needs
/// only a compiler fence and the slow side makes every CPU running a registered process
/// execute a full barrier; without it both sides use SeqCst.
mod fences {
    use std::sync::atomic::{compiler_fence, fence, AtomicU64, Ordering::*};
    use std::sync::OnceLock;

    /// (kernel offers expedited global membarrier, this process is registered for it)
    fn state() -> (bool, bool) {
        static S: OnceLock<(bool, bool)> = OnceLock::new();
        *S.get_or_init(|| {
            let supported = std::env::var_os("BELTWAY_NO_MEMBARRIER").is_none() && crate::sys::membarrier_global_supported();
            (supported, supported && crate::sys::membarrier_register_global().is_ok())
        })
    }

    /// Make sure this process takes part in the handshakes (call before mapping a ring).
    pub fn init() {
        state();
    }

    /// Fast side: publish `v` into `word`, ordered before the caller's next load.
    #[inline]
    pub fn publish(word: &AtomicU64, v: u64) {
        if state().1 {
            // SYNC POINT: Release publishes the data below v; the compiler fence keeps the
            // following flag load after this store in program order; the store-load order
            // across CPUs is enforced by the slow side's membarrier.
            word.store(v, Release);
            compiler_fence(SeqCst);
        } else {
            // SYNC POINT: a SeqCst RMW is a full barrier on its own.
            word.swap(v, SeqCst);
        }
    }

    /// Slow side: after setting its flag, before loading the other side's position.
    pub fn heavy() {
        let (supported, _) = state();
        if !(supported && crate::sys::membarrier_global().is_ok()) {
            fence(SeqCst);
        }
    }
}

/// Publish a producer position (fast side of the sleep handshake); see [`fences`].
pub(crate) fn publish_position(word: &std::sync::atomic::AtomicU64, v: u64) {
    fences::publish(word, v);
}

/// Clear the sleep bit, advance the eventcount and wake every reader sleeping on it.
pub(crate) fn wake_all(sh: &Shared) {
    let r = &sh.ctl().expect("producers map the control segment").r.0;
    let s = r.data_seq.load(Relaxed);
    // SYNC POINT: Release orders our earlier commits before the changed word a woken
    // reader observes (it then re-reads write_pos with Acquire anyway).
    r.data_seq.store((s | 1).wrapping_add(1), Release);
    sys::futex_wake(&r.data_seq, i32::MAX);
    sh.hdr().m.0.wakeups.fetch_add(1, Relaxed);
}

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
        let scaling = cfg.min_size.map(|min| Scaling { window_bytes: cfg.scaling_window as u64, ..Scaling::new(min as u64, cfg.size as u64, cfg.calm_laps) });
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
        }
    }

    /// A handle for attaching readers or sending the ring elsewhere.
    pub fn ring(&self) -> RingRef {
        RingRef(self.sh.clone())
    }
    pub fn shared(&self) -> &Arc<Shared> {
        &self.sh
    }
    /// Next position to be written (everything below is committed).
    pub fn position(&self) -> u64 {
        self.pos
    }
    pub fn active_size(&self) -> u64 {
        self.cur.size
    }
    /// Largest record this ring accepts (payload bytes).
    pub fn max_record(&self) -> usize {
        match self.sh.layout {
            Layout::Bytes => usize::MAX,
            Layout::Records => (self.sh.min_cap / 2 - REC_HDR) as usize,
            Layout::Slots => (self.sh.slot_size - SLOT_HDR) as usize,
            Layout::Tags => 16,
        }
    }

    /// Block until `n` readers are attached (FIFO open semantics) or the timeout passes.
    pub fn wait_for_readers(&self, n: u32, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let ctl = self.sh.ctl().expect("a writer always maps the control segment");
        while ctl.r.0.active.load(Acquire) < n {
            if Instant::now() >= deadline {
                return Err(Error::TimedOut { name: self.sh.name.clone(), what: "waiting for readers" });
            }
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
        if !self.cur.at_lap_boundary(self.pos) || self.pos - self.window.0 < policy.window_bytes.max(self.cur.size) {
            return;
        }
        let now = sys::now_ns();
        let report = LapReport { bytes: self.pos - self.window.0, nanos: now - self.window.1, writer_blocked: std::mem::take(&mut self.lap_blocked) };
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
            fence(Release);
        }
        let e = Epoch { start: self.pos, size: next };
        let t = &self.sh.hdr().epochs.0;
        let count = t.count.load(Relaxed);
        // SYNC POINT: seqlock write side. The odd store happens before the entry stores
        // (Release fence), the even store after them (Release).
        t.seq.fetch_add(1, Relaxed);
        fence(Release);
        let slot = &t.entries[(count % EPOCHS as u64) as usize];
        slot[0].store(e.start, Relaxed);
        slot[1].store(e.size, Relaxed);
        t.count.store(count + 1, Relaxed);
        t.seq.fetch_add(1, Release);
        // SYNC POINT: published before any data of the new epoch is committed (write_pos is
        // stored with Release later), so a reader that sees such data sees the new epoch.
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
            return Err(Error::Closed { name: self.sh.name.clone() });
        }
        let end = self.pos + n;
        let need = pos::horizon(self.prev, self.cur, end);
        if need > self.tail {
            self.ensure_released(need)?;
            self.tail = need;
            // SYNC POINT: the new tail is published before the data stores that overwrite
            // the old bytes (Release fence orders this store before later stores); lossy
            // readers load it after copying (Acquire fence) to detect overwrite.
            self.sh.hdr().t.0.tail.store(need, Relaxed);
            fence(Release);
        }
        Ok(self.cur.offset(self.pos))
    }

    /// Wait until every lossless reader has released positions below `need`.
    fn ensure_released(&mut self, need: u64) -> Result<()> {
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

    /// Commit everything below `end` and wake readers per the moderation policy.
    fn publish(&mut self, end: u64) {
        self.pos = end;
        let sh = &*self.sh;
        // SYNC POINT: publish (Release) then load the eventcount; pairs with the readers'
        // fetch_or of the sleep bit, heavy fence, write_pos re-check: no lost wake-up.
        fences::publish(&sh.hdr().p.0.write_pos, end);
        let r = &sh.ctl().expect("writer has ctl").r.0;
        if r.data_seq.load(Relaxed) & 1 == 0 {
            // Nobody asleep (the common case at high rates): one load, no system call.
            self.pending = 0;
            return;
        }
        self.pending += 1;
        let mut wake = self.pending >= self.threshold || r.deep_sleepers.load(Relaxed) != 0;
        if !wake {
            let now = sys::now_ns();
            if self.pending == 1 {
                self.first_pending_ns = now;
            } else if now - self.first_pending_ns >= self.latency_ns {
                wake = true;
            }
        }
        if wake {
            self.wake_readers();
        }
    }

    fn wake_readers(&mut self) {
        self.pending = 0;
        wake_all(&self.sh);
    }

    /// Wake sleeping readers now (flush a partial batch).
    pub fn flush(&mut self) {
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
            self.sh.data.write_at(DATA_OFFSET + off as usize, &data[done..done + n as usize]);
            done += n as usize;
            self.publish(self.pos + n);
        }
        Ok(done)
    }

    /// Reserve a contiguous record of `total` bytes (header included), padding to the lap
    /// end first if needed. Returns the data-area offset.
    fn reserve_record(&mut self, total: u64) -> Result<u64> {
        let room = self.room();
        if room < total {
            // Pad the rest of the lap (records never wrap).
            let off = self.prepare(room)?;
            if self.sh.layout == Layout::Records {
                let mut hdr = [0u8; 8];
                hdr[..4].copy_from_slice(&((room - REC_HDR) as u32).to_le_bytes());
                hdr[4..].copy_from_slice(&REC_PAD.to_le_bytes());
                self.sh.data.write_at(DATA_OFFSET + off as usize, &hdr);
            }
            self.publish(self.pos + room);
            let _ = self.room();
        }
        self.prepare(total)
    }

    fn record_size(&self, len: usize) -> Result<u64> {
        if len > self.max_record() {
            return Err(Error::TooLarge { name: self.sh.name.clone(), len, max: self.max_record() });
        }
        Ok(match self.sh.layout {
            Layout::Records => REC_HDR + align8(len as u64),
            Layout::Slots | Layout::Tags => self.sh.slot_size,
            Layout::Bytes => len as u64,
        })
    }

    /// Append one record (record layouts) and return the absolute position of its payload.
    pub fn append_record(&mut self, data: &[u8]) -> Result<u64> {
        let mut rec = self.open_record(data.len())?;
        rec.append(data)?;
        rec.commit()
    }

    /// Open a record of at most `max` payload bytes, to be filled with
    /// [`RecordBuilder::append`] (thesis `slfile_append`): appends adjust the open record's
    /// length without moving the write pointer until commit.
    pub fn open_record(&mut self, max: usize) -> Result<RecordBuilder<'_>> {
        if !self.sh.layout.is_record() {
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "records on a byte ring" });
        }
        self.check_single_producer()?;
        let total = self.record_size(max)?;
        let off = self.reserve_record(total)?;
        let hdr = match self.sh.layout {
            Layout::Records => REC_HDR,
            Layout::Slots => SLOT_HDR,
            _ => 0,
        };
        Ok(RecordBuilder { w: self, off, hdr, cap: max, len: 0, total })
    }

    fn check_single_producer(&self) -> Result<()> {
        if self.sh.multi_producer {
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "single-producer writes on a multi-producer ring (use MpWriter)" });
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
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "a second poke_acquire before poke_complete" });
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
                let off = self.reserve_record(total)?;
                let hdr = if self.sh.layout == Layout::Records { REC_HDR } else if self.sh.layout == Layout::Slots { SLOT_HDR } else { 0 };
                (off + hdr, len as u64, self.pos)
            }
        };
        self.open = Some((start, n));
        Ok(self.sh.data.reserved_mut(&mut self.token, DATA_OFFSET + off as usize, n as usize))
    }

    /// `poke_complete`: commit the first `len` bytes of the acquired window (records: the
    /// record's final payload length). Returns the payload's absolute position.
    pub fn poke_complete(&mut self, len: usize) -> Result<u64> {
        let Some((start, cap)) = self.open.take() else {
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "poke_complete without poke_acquire" });
        };
        if len as u64 > cap {
            self.open = Some((start, cap));
            return Err(Error::TooLarge { name: self.sh.name.clone(), len, max: cap as usize });
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
        match self.sh.layout {
            Layout::Records => {
                let mut hdr = [0u8; 8];
                hdr[..4].copy_from_slice(&(len as u32).to_le_bytes());
                hdr[4..].copy_from_slice(&REC_DATA.to_le_bytes());
                self.sh.data.write_at(off, &hdr);
                // Return unused reservation: the record occupies only its padded length.
                let used = REC_HDR + align8(len);
                self.publish(start + used.min(total));
                Ok(start + REC_HDR)
            }
            Layout::Slots => {
                self.sh.data.write_at(off, &(len as u32).to_le_bytes());
                self.publish(start + total);
                Ok(start + SLOT_HDR)
            }
            Layout::Tags => {
                self.publish(start + total);
                Ok(start)
            }
            Layout::Bytes => unreachable!("byte rings have no records"),
        }
    }

    /// The tail a contiguous write of `len` bytes at the current position would need
    /// (including skipping to the next lap when it does not fit before the lap end).
    pub fn contiguous_need(&mut self, len: usize) -> Result<u64> {
        let len = len as u64;
        if len > self.sh.min_cap {
            return Err(Error::TooLarge { name: self.sh.name.clone(), len: len as usize, max: self.sh.min_cap as usize });
        }
        let room = self.room();
        let end = if room < len { self.pos + room + len } else { self.pos + len };
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
        if self.sh.layout != Layout::Bytes {
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "contiguous writes on a record ring" });
        }
        let n = len as u64;
        if n > self.sh.min_cap {
            return Err(Error::TooLarge { name: self.sh.name.clone(), len, max: self.sh.min_cap as usize });
        }
        let room = self.room();
        if room < n {
            self.prepare(room)?;
            self.publish(self.pos + room);
            let _ = self.room();
        }
        let off = self.prepare(n)?;
        let at = self.pos;
        self.publish(at + n);
        Ok((at, self.sh.data.reserved_mut(&mut self.token, DATA_OFFSET + off as usize, len)))
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
        Some(self.sh.data.reserved_mut(&mut self.token, DATA_OFFSET + off as usize, len))
    }

    /// Return the unused end of the last [`Writer::alloc_contiguous`] (at `at`, of `len`
    /// bytes, of which `used` were written): the write position moves back to `at + used`.
    /// Only for rings without readers of their own (whose blocks are found through tags
    /// sent later), and only before any tag for that allocation was sent.
    pub fn give_back(&mut self, at: u64, len: usize, used: usize) {
        if used < len && self.pos == at + len as u64 && self.open.is_none() {
            self.pos = at + used as u64;
            fences::publish(&self.sh.hdr().p.0.write_pos, self.pos);
        }
    }

    /// [`Writer::write_contiguous`] of the concatenation of `parts` (no intermediate copy).
    pub fn write_contiguous_parts(&mut self, parts: &[&[u8]]) -> Result<u64> {
        if self.sh.layout != Layout::Bytes {
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "contiguous writes on a record ring" });
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let len = total as u64;
        if len > self.sh.min_cap {
            return Err(Error::TooLarge { name: self.sh.name.clone(), len: total, max: self.sh.min_cap as usize });
        }
        let room = self.room();
        if room < len {
            self.prepare(room)?;
            self.publish(self.pos + room);
            let _ = self.room();
        }
        let off = self.prepare(len)?;
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
        self.closed = true;
        let h = self.sh.hdr();
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
            return Err(Error::TooLarge { name: self.w.sh.name.clone(), len: self.len + data.len(), max: self.cap });
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

/// What [`Reader::block`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    Data,
    Eof,
    TimedOut,
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
    sh: Arc<Shared>,
    slot: Option<usize>,
    pos: u64,
    wpos: u64,
    prev: Option<Epoch>,
    cur: Epoch,
    gen: u64,
    lossy: bool,
    latency: Duration,
    /// Acquired but not yet completed: (position of the block, bytes to release).
    held: Option<(u64, u64)>,
    /// `peek` advanced past a block the caller may still be looking at; its release to the
    /// writer happens at the next call (the borrow of the block ends before any call).
    deferred: bool,
    /// The writer's process died without closing the stream (seen by this reader; readers
    /// never write the data segment, which they may have mapped read-only).
    writer_dead: bool,
    lost: u64,
    /// Manual release: reads advance the position privately; the writer sees it only at
    /// [`Reader::release`] (a consumer that processes what it read in batches).
    manual: bool,
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
        let mut r = Reader { sh: sh.clone(), slot: None, pos: 0, wpos: 0, prev, cur, gen, lossy, latency, held: None, deferred: false, writer_dead: false, lost: 0, manual: false };
        let Some(ctl) = sh.ctl() else {
            // Observer: private position, cannot hold back the writer.
            r.pos = match start {
                Start::Latest => h.p.0.write_pos.load(Acquire),
                // Lossy record rings: the tail may lie inside a record, so start at a known
                // boundary (0 before the first overwrite, else the write position).
                Start::Oldest if sh.layout == Layout::Records => match h.t.0.tail.load(Acquire) {
                    0 => 0,
                    _ => h.p.0.write_pos.load(Acquire),
                },
                Start::Oldest => h.t.0.tail.load(Acquire).div_ceil(sh.slot_size.max(1)) * sh.slot_size.max(1),
            };
            return Ok(r);
        };
        let _g = sh.lock_ctl();
        let mut found = None;
        for i in 0..sh.max_readers {
            let s = sh.slot(i).expect("ctl mapped");
            let st = s.state.load(Acquire);
            if st == SLOT_FREE || (st == SLOT_ACTIVE && !sys::process_alive(s.pid.load(Relaxed), s.start.load(Relaxed))) {
                if st == SLOT_ACTIVE {
                    sh.release_slot(s);
                }
                found = Some(i);
                break;
            }
        }
        let Some(i) = found else {
            return Err(Error::NoSlots { name: sh.name.clone(), max: sh.max_readers });
        };
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
        // A lossy ring's tail may lie inside a record: start at a boundary.
        r.pos = match sh.layout {
            Layout::Records if pos < w && pos != 0 && sh.sync != SyncMode::Srp => w,
            Layout::Slots | Layout::Tags => pos.div_ceil(sh.slot_size) * sh.slot_size,
            _ => pos,
        };
        let s = sh.slot(i).expect("ctl mapped");
        s.pid.store(sys::getpid(), Relaxed);
        s.start.store(sys::process_start_time(sys::getpid()).unwrap_or(0), Relaxed);
        s.pos.store(r.pos, Relaxed);
        s.lost.store(0, Relaxed);
        s.lossy.store(lossy as u32, Relaxed);
        s.state.store(SLOT_ACTIVE, Release);
        if sh.sync == SyncMode::Mrp {
            ctl.w.0.mrp_r.fetch_max(r.pos, AcqRel);
        }
        ctl.r.0.active.fetch_add(1, AcqRel);
        ctl.r.0.attached_ever.fetch_add(1, AcqRel);
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
    fn ended(&self) -> bool {
        self.writer_dead || self.sh.hdr().p.0.state.load(Acquire) & STATE_CLOSED != 0
    }

    /// Resume after data below the tail was lost: at the tail for bytes, at the next slot
    /// for slot layouts, and at the write position for variable records, whose boundaries
    /// cannot be found inside lost data (thesis 4.5.3). Records the loss and returns the
    /// overrun error to report.
    fn skip_lost(&mut self, from: u64) -> Error {
        let h = self.sh.hdr();
        let tail = h.t.0.tail.load(Acquire);
        let p = &h.p.0;
        self.pos = match self.sh.layout {
            Layout::Bytes => tail.max(self.pos),
            Layout::Slots | Layout::Tags => tail.max(self.pos).div_ceil(self.sh.slot_size) * self.sh.slot_size,
            Layout::Records => p.write_pos.load(Acquire).max(self.pos),
        };
        self.lost += self.pos - from;
        self.held = None;
        self.release_position();
        if let Some(s) = self.slot.and_then(|i| self.sh.slot(i)) {
            s.lost.store(self.lost, Relaxed);
        }
        Error::Overrun { name: self.sh.name.clone(), from, to: self.pos }
    }

    /// Refresh the cached write position and epochs; returns bytes available.
    #[inline]
    fn refresh(&mut self) -> u64 {
        let p = &self.sh.hdr().p.0;
        // SYNC POINT: Acquire pairs with the writer's publishing swap: data below write_pos
        // is visible. epoch_gen is read after it (same cache line), so an epoch that data
        // we can now see lives in is already published.
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
    fn available(&mut self) -> u64 {
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
        let tail = self.sh.hdr().t.0.tail.load(Acquire);
        if self.pos < tail {
            return Err(self.skip_lost(self.pos));
        }
        Ok(())
    }

    /// `check`: verify that data read at or after `pos` was not overwritten while in use.
    pub fn check(&self, pos: u64) -> Result<()> {
        // SYNC POINT: Acquire fence orders the caller's data loads before the tail load
        // (seqlock read side, against the writer's tail store + Release fence).
        fence(Acquire);
        let tail = self.sh.hdr().t.0.tail.load(Relaxed);
        if pos < tail {
            return Err(Error::Overrun { name: self.sh.name.clone(), from: pos, to: tail });
        }
        Ok(())
    }

    /// `block`: wait until data is available, the stream ends, or the timeout passes.
    pub fn block(&mut self, timeout: Option<Duration>) -> Result<Ready> {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.wait(deadline)
    }

    #[inline]
    fn flush_deferred(&mut self) {
        if self.deferred {
            self.deferred = false;
            self.release_position();
        }
    }

    fn wait(&mut self, deadline: Option<Instant>) -> Result<Ready> {
        self.flush_deferred();
        let sh = self.sh.clone();
        let h = sh.hdr();
        let mut deep = false;
        loop {
            if self.available() > 0 {
                return Ok(Ready::Data);
            }
            if self.ended() {
                // The state bit is set after the final publish: re-check, then EOF.
                return Ok(if self.refresh() > 0 { Ready::Data } else { Ready::Eof });
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
                    ctl.w.0.mrp_r.fetch_max(self.pos, SeqCst);
                    self.wake_writer_if_due(ctl);
                }
                let counter = if deep { &ctl.r.0.deep_sleepers } else { &ctl.r.0.sleepers };
                // SYNC POINT: SeqCst registration, then SeqCst re-check of write_pos, against
                // the writer's SeqCst publish then sleeper load: no lost wake-up.
                counter.fetch_add(1, SeqCst);
                // SYNC POINT: set the sleep bit (SeqCst RMW), then re-check write_pos
                // (SeqCst), against the writer's publish then eventcount load.
                let seq = ctl.r.0.data_seq.fetch_or(1, SeqCst) | 1;
                fences::heavy();
                let ready = h.p.0.write_pos.load(SeqCst) > self.pos || h.p.0.state.load(SeqCst) != 0;
                let res = if ready { Wake::Woken } else { sys::futex_wait(&ctl.r.0.data_seq, seq, Some(timeout)) };
                counter.fetch_sub(1, Relaxed);
                res
            } else {
                // Observers may not write the control segment, so they cannot ask to be
                // woken: they look again after the latency bound (or the liveness period).
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
        // SYNC POINT: releases our loads of the data below pos to the writer (Release) and
        // orders the store before the `waiting` load (asymmetric Dekker with the writer's
        // waiting store + heavy fence + re-scan).
        fences::publish(&s.pos, self.pos);
        let ctl = sh.ctl().expect("ctl mapped");
        if sh.sync == SyncMode::Mrp {
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
            let mine = if self.sh.sync == SyncMode::Mrp { w.mrp_r.load(Relaxed) } else { self.pos };
            // Take the flag: one wake-up per writer sleep, not one per read until it runs.
            if mine >= target && w.waiting.swap(0, AcqRel) != 0 {
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
                        Ready::TimedOut => return Err(Error::TimedOut { name: self.sh.name.clone(), what: "reading" }),
                    },
                }
            }
            let Some(e) = pos::epoch_for(self.prev, self.cur, self.pos) else {
                return Err(self.skip_lost(self.pos));
            };
            let off = e.offset(self.pos);
            let room = e.room_to_lap_end(self.pos);
            let avail = self.available();
            let word = |at: u64| u32::from_le_bytes(self.sh.data.bytes(DATA_OFFSET + at as usize, 4).try_into().unwrap());
            let unit = match self.sh.layout {
                Layout::Bytes => {
                    let n = (max as u64).min(avail).min(room);
                    Unit { total: n, payload_off: off, len: n }
                }
                Layout::Tags => {
                    if off + self.sh.slot_size > e.size {
                        return Err(self.corrupt(format!("tag slot at offset {off} crosses the ring end")));
                    }
                    Unit { total: self.sh.slot_size, payload_off: off, len: self.sh.slot_size }
                }
                Layout::Slots => {
                    let len = word(off);
                    if off + self.sh.slot_size > e.size {
                        return Err(self.corrupt(format!("slot at offset {off} crosses the ring end")));
                    }
                    if len == crate::mp::ABANDONED {
                        skipped += self.sh.slot_size;
                        self.pos += self.sh.slot_size;
                        self.release_position();
                        continue;
                    }
                    if len as u64 > self.sh.slot_size - SLOT_HDR {
                        return Err(self.corrupt(format!("slot length {len} exceeds the slot size {}", self.sh.slot_size)));
                    }
                    Unit { total: self.sh.slot_size, payload_off: off + SLOT_HDR, len: len as u64 }
                }
                Layout::Records => {
                    let len = word(off) as u64;
                    let kind = word(off + 4);
                    let total = REC_HDR + align8(len);
                    if !((kind == REC_DATA || kind == REC_PAD) && total <= room && total <= avail) {
                        return Err(self.corrupt(format!("record header (len {len}, kind {kind:#x}) does not fit the {room} bytes to the lap end")));
                    }
                    if kind == REC_PAD {
                        if self.lossy && self.check(self.pos).is_err() {
                            return Err(self.skip_lost(self.pos));
                        }
                        skipped += total;
                        self.pos += total;
                        self.release_position();
                        continue;
                    }
                    Unit { total, payload_off: off + REC_HDR, len }
                }
            };
            return Ok(Some(unit));
        }
    }

    /// A header that makes no sense: an overrun if it was overwritten under a lossy
    /// reader, otherwise corruption (a hostile or broken writer), reported with its position.
    fn corrupt(&mut self, why: String) -> Error {
        if self.lossy && self.check(self.pos).is_err() {
            return self.skip_lost(self.pos);
        }
        Error::Corrupt { name: self.sh.name.clone(), pos: self.pos, why }
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
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "read while a peek_acquire is outstanding" });
        }
        let Some(u) = self.next_unit(buf.len(), Some(deadline))? else { return Ok(0) };
        let n = u.len as usize;
        if n > buf.len() {
            if self.lossy && self.check(self.pos).is_err() {
                return Err(self.skip_lost(self.pos));
            }
            return Err(Error::BufferTooSmall { name: self.sh.name.clone(), need: n, got: buf.len() });
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
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "two peek_acquire without peek_complete" });
        }
        let Some(u) = self.next_unit(max, None)? else { return Ok(None) };
        Ok(Some(self.finish_peek(u)))
    }

    fn peek_until(&mut self, max: usize, deadline: Option<Instant>) -> Result<Option<Peeked<'_>>> {
        if self.held.is_some() {
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "two peek_acquire without peek_complete" });
        }
        let Some(u) = self.next_unit(max, Some(deadline))? else { return Ok(None) };
        Ok(Some(self.finish_peek(u)))
    }

    fn finish_peek(&mut self, u: Unit) -> Peeked<'_> {
        let ppos = self.unit_pos(&u);
        self.held = Some((self.pos, u.total));
        Peeked { pos: ppos, data: self.sh.data.bytes(DATA_OFFSET + u.payload_off as usize, u.len as usize) }
    }

    /// Absolute position of a unit's payload (the unit starts at our position).
    fn unit_pos(&self, u: &Unit) -> u64 {
        let start_off = pos::epoch_for(self.prev, self.cur, self.pos).map_or(0, |e| e.offset(self.pos));
        self.pos + (u.payload_off - start_off)
    }

    /// `peek_complete`: release the block returned by the last `peek_acquire`.
    pub fn peek_complete(&mut self) -> Result<()> {
        let Some((at, total)) = self.held.take() else {
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "peek_complete without peek_acquire" });
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
            return Err(Error::Unsupported { name: self.sh.name.clone(), what: "peek while a peek_acquire is outstanding" });
        }
        let Some(u) = self.next_unit(max, Some(None))? else { return Ok(None) };
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
        Ok(Some(Peeked { pos: ppos, data: self.sh.data.bytes(DATA_OFFSET + poff as usize, plen as usize) }))
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
        if let Some(i) = self.slot {
            if let Some(s) = self.sh.slot(i) {
                self.sh.release_slot(s);
            }
        }
    }
}

/// Wait on several readers at once with futex_waitv: the index of one that has data or has
/// ended, or `None` on timeout.
pub fn select(readers: &mut [&mut Reader], timeout: Option<Duration>) -> Result<Option<usize>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut deep = false;
    loop {
        for (i, r) in readers.iter_mut().enumerate() {
            r.flush_deferred();
            if r.available() > 0 || r.ended() {
                return Ok(Some(i));
            }
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(None);
        }
        let mut wait = Duration::MAX;
        let mut words = Vec::with_capacity(readers.len());
        for r in readers.iter() {
            wait = wait.min(if deep { r.sh.liveness } else { r.latency });
            if let Some(ctl) = r.sh.ctl() {
                let c = if deep { &ctl.r.0.deep_sleepers } else { &ctl.r.0.sleepers };
                // SYNC POINT: as in Reader::wait: register, set the sleep bit, re-check.
                c.fetch_add(1, SeqCst);
                let seq = ctl.r.0.data_seq.fetch_or(1, SeqCst) | 1;
                words.push((&ctl.r.0.data_seq, seq));
            }
        }
        if let Some(d) = deadline {
            wait = wait.min(d - now);
        }
        fences::heavy();
        let ready = readers.iter().any(|r| r.sh.hdr().p.0.write_pos.load(SeqCst) > r.pos);
        let res = if ready {
            Ok(Some(0))
        } else if words.is_empty() {
            // Only observers: they cannot be woken, look again after the bound.
            std::thread::sleep(wait);
            Ok(None)
        } else {
            sys::futex_waitv(&words, Some(wait))
        };
        drop(words);
        for r in readers.iter() {
            if let Some(ctl) = r.sh.ctl() {
                let c = if deep { &ctl.r.0.deep_sleepers } else { &ctl.r.0.sleepers };
                c.fetch_sub(1, Relaxed);
            }
        }
        match res {
            Ok(Some(_)) => {}
            Ok(None) => {
                if deep {
                    for r in readers.iter_mut() {
                        if !r.sh.writer_alive() {
                            r.writer_dead = true;
                        }
                    }
                }
                deep = true;
            }
            Err(e) => return Err(Error::os(&readers[0].sh.name, "futex_waitv", e)),
        }
    }
}
