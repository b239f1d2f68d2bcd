//! The mapped segments of one ring as this process sees them ([`Shared`]): creating them
//! (anonymous or named under /dev/shm, replacing a dead writer's stale ring), opening and
//! validating them (a peer's header may be hostile), the seqlocked epoch table, statistics,
//! and passing the descriptors to another process. [`RingRef`] is the handle that attaches
//! readers.
//!
//! Owns: header initialisation and validation, the segment names. Does not own: the
//! reader slots and what producers wait on (`release`).

use super::{fences, Layout, Reader, ReleaseCache, RingConfig, Start, SyncMode};
use crate::error::{Error, Result};
use crate::layout::*;
use crate::pos::Epoch;
use crate::shm::{Backing, Segment};
use crate::sys;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

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
    pub(super) liveness: Duration,
    /// Readers may all leave without breaking the pipe (the creator's [`RingConfig`]).
    pub(super) detachable: bool,
    /// Remove the names from /dev/shm when this (creating) handle set is dropped.
    unlink_on_drop: bool,
    /// The ring's wake-up as a descriptor (anonymous rings only: it travels with the
    /// segments in [`Shared::send`]): signalled with every wake of the sleeping readers
    /// (`notify::wake_all`), so a consumer can sleep on it among other things in one
    /// readiness handle instead of on the eventcount futex ([`Reader::arm`]).
    pub(crate) wake: Option<sys::EventFd>,
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
    if name.is_empty()
        || name.len() > 200
        || name.contains('/')
        || name.starts_with('.')
        || name.contains('\0')
    {
        return Err(Error::Config {
            name: name.to_string(),
            why: "a ring name is 1-200 characters without '/' or NUL and does not start with '.'"
                .into(),
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
        self.ctl
            .as_ref()
            .map(|c| c.get::<ReaderSlot>(slot_offset(i)))
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

    pub(super) fn create(name: &str, cfg: &RingConfig, named: bool) -> Result<Arc<Shared>> {
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
                    Segment::create_path(&path, data_len, cfg.mode)
                        .map_err(os("create data segment"))?
                }
                Err(e) => return Err(Error::os(name, "create data segment", e)),
            };
            let ctl_path = format!("{path}.ctl");
            let _ = sys::unlink(&ctl_path);
            let ctl =
                match Segment::create_path(&ctl_path, ctl_len, cfg.ctl_mode.unwrap_or(cfg.mode)) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = sys::unlink(&path);
                        return Err(Error::os(name, "create control segment", e));
                    }
                };
            (data, ctl)
        } else {
            let data = Segment::create_memfd(&format!("beltway:{name}"), data_len)
                .map_err(os("memfd data"))?;
            let ctl = Segment::create_memfd(&format!("beltway:{name}.ctl"), ctl_len)
                .map_err(os("memfd ctl"))?;
            (data, ctl)
        };
        let h = data.get::<RingHeader>(0);
        let c = &h.c.0;
        c.version.store(VERSION, Relaxed);
        c.layout.store(cfg.layout as u32, Relaxed);
        c.sync.store(cfg.sync as u32, Relaxed);
        c.slot_size.store(
            if cfg.layout.is_record() && cfg.layout != Layout::Records {
                cfg.slot_size
            } else {
                0
            },
            Relaxed,
        );
        c.max_cap.store(cfg.size as u64, Relaxed);
        c.min_cap.store(cfg.min_cap() as u64, Relaxed);
        c.writer_pid.store(sys::getpid(), Relaxed);
        c.writer_start
            .store(sys::process_start_time(sys::getpid()).unwrap_or(0), Relaxed);
        c.multi_producer.store(cfg.multi_producer as u32, Relaxed);
        c.buf_id.store(cfg.buf_id as u32, Relaxed);
        c.max_readers.store(cfg.max_readers, Relaxed);
        let initial = if cfg.min_size.is_some() {
            cfg.initial_size.unwrap_or(cfg.size)
        } else {
            cfg.size
        };
        let e = &h.epochs.0;
        e.entries[0][0].store(0, Relaxed);
        e.entries[0][1].store(initial as u64, Relaxed);
        e.count.store(1, Relaxed);
        h.p.0.epoch_gen.store(1, Relaxed);
        h.p.0.guard.store(u64::MAX, Relaxed);
        h.m.0.threshold.store(cfg.threshold, Relaxed);
        h.m.0.latency_us.store(
            cfg.latency.as_micros().min(u32::MAX as u128) as u32,
            Relaxed,
        );
        let ch = ctl.get::<CtlHeader>(0);
        // SYNC POINT: the magic words are stored last. Release publishes every Relaxed
        // header store above; pairs with the Acquire loads of the magics in
        // `from_segments` (an opener never sees a half-initialised header). The control
        // magic goes first, so an opener that sees the data magic sees both.
        ch.magic.0.store(MAGIC_CTL, Release);
        // SYNC POINT: Release, pairs with `from_segments`'s and `remove_stale`'s Acquire
        // load of the data magic.
        c.magic.store(MAGIC_DATA, Release);
        Ok(Arc::new(Shared {
            name: name.to_string(),
            data,
            ctl: Some(ctl),
            layout: cfg.layout,
            sync: cfg.sync,
            slot_size: if matches!(cfg.layout, Layout::Slots | Layout::Tags) {
                cfg.slot_size as u64
            } else {
                0
            },
            max_cap: cfg.size as u64,
            min_cap: cfg.min_cap() as u64,
            max_readers: cfg.max_readers as usize,
            buf_id: cfg.buf_id,
            multi_producer: cfg.multi_producer,
            liveness: cfg.liveness,
            detachable: cfg.detachable,
            unlink_on_drop: named,
            wake: if named || !cfg.wake_fd {
                None
            } else {
                Some(sys::EventFd::new().map_err(os("create the wake-up eventfd"))?)
            },
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
                    // SYNC POINT: Acquire, pairs with `create`'s Release store of the magic.
                    // (It orders only what is loaded after it; pid, start and state above
                    // are Relaxed loads made before it.)
                    if h.c.0.magic.load(Acquire) == MAGIC_DATA
                        && !closed
                        && sys::process_alive(pid, start)
                    {
                        return Err(Error::InUse {
                            name: name.to_string(),
                            pid,
                        });
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
    fn from_segments(
        name: &str,
        data: Segment,
        ctl: Option<Segment>,
        wake: Option<sys::EventFd>,
    ) -> Result<Arc<Shared>> {
        fences::init();
        let bad = |why: String| {
            Err(Error::BadRing {
                name: name.to_string(),
                why,
            })
        };
        if data.len() < DATA_OFFSET + 4096 {
            return bad(format!("data segment of {} bytes is too small", data.len()));
        }
        let h = data.get::<RingHeader>(0);
        let c = &h.c.0;
        // SYNC POINT: Acquire, pairs with `create`'s Release store of the data magic: the
        // header fields loaded below are the creator's.
        if c.magic.load(Acquire) != MAGIC_DATA {
            return bad(
                "bad magic in data segment (not a beltway ring, or still being created)".into(),
            );
        }
        if c.version.load(Relaxed) != VERSION {
            return bad(format!(
                "version {} (expected {VERSION})",
                c.version.load(Relaxed)
            ));
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
            return bad(format!(
                "data area of {max_cap} bytes does not fit a {}-byte segment",
                data.len()
            ));
        }
        if !min_cap.is_power_of_two() || min_cap > max_cap || min_cap < 4096 {
            return bad(format!("minimum size {min_cap} is invalid"));
        }
        let slot_size = c.slot_size.load(Relaxed) as u64;
        if matches!(layout, Layout::Slots | Layout::Tags)
            && (!slot_size.is_power_of_two() || slot_size < 16 || slot_size > min_cap)
        {
            return bad(format!("slot size {slot_size} is invalid"));
        }
        let max_readers = c.max_readers.load(Relaxed) as usize;
        if max_readers == 0 || max_readers > 4096 {
            return bad(format!("reader slot count {max_readers} is invalid"));
        }
        let ctl = match ctl {
            Some(seg) => {
                if seg.len() < ctl_len(max_readers) {
                    return bad(format!(
                        "control segment of {} bytes holds fewer than {max_readers} slots",
                        seg.len()
                    ));
                }
                // SYNC POINT: Acquire, pairs with `create`'s Release store of the control
                // magic (the control segment is zeroed apart from it).
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
            slot_size: if matches!(layout, Layout::Slots | Layout::Tags) {
                slot_size
            } else {
                0
            },
            max_cap,
            min_cap,
            max_readers,
            buf_id: c.buf_id.load(Relaxed) as u16,
            multi_producer: c.multi_producer.load(Relaxed) != 0,
            liveness: Duration::from_micros((latency_us as u64 * 100).clamp(20_000, 200_000)),
            detachable: false,
            unlink_on_drop: false,
            // Only with the control segment: a reader that cannot register cannot sleep.
            wake: wake.filter(|_| ctl.is_some()),
            data,
            ctl,
        }))
    }

    /// Open a named ring. The data segment is mapped read-write only when `write` is asked
    /// and permitted; the control segment read-write when permitted (else the client is an
    /// unregistered observer).
    pub(crate) fn open_named(name: &str, write: bool) -> Result<Arc<Shared>> {
        let path = shm_path(name)?;
        let data = Segment::open_path(&path, write)
            .map_err(|e| Error::os(name, "open data segment", e))?;
        if write && !data.writable() {
            return Err(Error::Permission {
                name: name.to_string(),
                what: "write access to the data segment".into(),
            });
        }
        // A client that cannot write the control segment (or finds none) is an observer.
        let ctl = match Segment::open_path(&format!("{path}.ctl"), true) {
            Ok(c) if c.writable() => Some(c),
            Ok(_) => None,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::ENOENT)) => None,
            Err(e) => return Err(Error::os(name, "open control segment", e)),
        };
        Self::from_segments(name, data, ctl, None)
    }

    /// Open a named ring another process publishes, trusting it only if uid `owner` owns
    /// every segment this opens (a name under /dev/shm can be taken by anyone; its owner
    /// cannot be forged). The data segment is mapped read-only; the control segment is
    /// mapped read-write with `register` (a reader slot there is how the writer knows it
    /// is read), else not at all (an observer). Links are not followed.
    pub(crate) fn open_owned(name: &str, owner: u32, register: bool) -> Result<Arc<Shared>> {
        let path = shm_path(name)?;
        let open = |p: &str, write: bool, op: &'static str| -> Result<Segment> {
            let fd = sys::open_existing_nofollow(p, write).map_err(|e| Error::os(name, op, e))?;
            let uid = sys::fd_owner(&fd).map_err(|e| Error::os(name, op, e))?;
            if uid != owner {
                return Err(Error::Permission {
                    name: name.to_string(),
                    what: format!("{p} belongs to uid {uid}, not to uid {owner}"),
                });
            }
            Segment::from_path_fd(fd, p).map_err(|e| Error::os(name, op, e))
        };
        let data = open(&path, false, "open data segment")?;
        let ctl = match register {
            true => Some(open(&format!("{path}.ctl"), true, "open control segment")?),
            false => None,
        };
        Self::from_segments(name, data, ctl, None)
    }

    /// Current epochs (previous, current) from the seqlocked table.
    pub(crate) fn load_epochs(&self) -> (Option<Epoch>, Epoch, u64) {
        let t = &self.hdr().epochs.0;
        loop {
            // SYNC POINT: seqlock read side. Acquire pairs with the Release increment that
            // ends a resize in `Writer::maybe_resize`: seeing that even value, the entry
            // loads below see the entries stored before it.
            let s1 = t.seq.load(Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let count = t.count.load(Relaxed);
            let get = |i: u64| {
                let e = &t.entries[(i % EPOCHS as u64) as usize];
                Epoch {
                    start: e[0].load(Relaxed),
                    size: e[1].load(Relaxed),
                }
            };
            let cur = get(count.saturating_sub(1));
            let prev = if count >= 2 {
                Some(get(count - 2))
            } else {
                None
            };
            // SYNC POINT: Acquire fence, pairs with the Release fence after the odd increment
            // in `Writer::maybe_resize`: if an entry load above saw a store of a resize in
            // progress, the re-load of seq below sees its odd increment (or later) and
            // we retry.
            fence(Acquire);
            if t.seq.load(Relaxed) == s1 {
                // A corrupt table must not make us index outside the data area.
                let sane = |e: &Epoch| {
                    e.size.is_power_of_two() && e.size <= self.max_cap && e.size >= self.min_cap
                };
                let cur = if sane(&cur) {
                    cur
                } else {
                    Epoch {
                        start: cur.start,
                        size: self.min_cap,
                    }
                };
                let prev = prev.filter(sane);
                return (prev, cur, count);
            }
        }
    }

    pub(super) fn writer_alive(&self) -> bool {
        let c = &self.hdr().c.0;
        sys::process_alive(c.writer_pid.load(Relaxed), c.writer_start.load(Relaxed))
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
    /// The ring's wake-up eventfd (anonymous rings made with [`RingConfig::wake_fd`]), for
    /// passing it beside [`Shared::fds`] by other means than [`Shared::send`].
    pub fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.wake.as_ref().map(|w| w.as_fd())
    }

    pub fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        let mut v = vec![self.data.fd()];
        if let Some(c) = &self.ctl {
            v.push(c.fd());
        }
        v
    }

    /// Send this ring to another process over a Unix socket (SCM_RIGHTS).
    pub fn send(&self, sock: &UnixStream) -> Result<()> {
        let mut fds: Vec<_> = self.fds().iter().map(|f| f.as_raw_fd()).collect();
        // The wake-up third, and only after the control segment (two descriptors are the
        // data and control segments).
        if let (Some(w), Some(_)) = (&self.wake, &self.ctl) {
            fds.push(w.as_raw_fd());
        }
        let mut payload = Vec::from(self.name.as_bytes());
        payload.truncate(200);
        payload.insert(0, payload.len() as u8);
        sys::send_fds(sock, &payload, &fds)
            .map_err(|e| Error::os(&self.name, "send ring descriptors", e))
    }

    /// Receive a ring sent with [`Shared::send`].
    pub fn recv(sock: &UnixStream) -> Result<Arc<Shared>> {
        let mut buf = [0u8; 256];
        let (n, fds) = sys::recv_fds(sock, &mut buf, 3)
            .map_err(|e| Error::os("<socket>", "receive ring descriptors", e))?;
        if n == 0 {
            return Err(Error::BadRing {
                name: "<socket>".into(),
                why: "peer closed before sending a ring".into(),
            });
        }
        let len = (buf[0] as usize).min(n - 1);
        let name = String::from_utf8_lossy(&buf[1..1 + len]).into_owned();
        let mut fds = fds.into_iter();
        let data: OwnedFd = fds.next().ok_or_else(|| Error::BadRing {
            name: name.clone(),
            why: "no descriptors received".into(),
        })?;
        let data =
            Segment::from_fd(data).map_err(|e| Error::os(&name, "map received data segment", e))?;
        let ctl = match fds.next() {
            Some(fd) => {
                let seg = Segment::from_fd(fd)
                    .map_err(|e| Error::os(&name, "map received control segment", e))?;
                seg.writable().then_some(seg)
            }
            None => None,
        };
        // A third descriptor is the ring's wake-up (an eventfd; a consumer only waits on
        // it, so a peer that sent something else can only withhold wake-ups, as it could
        // by not writing).
        let wake = fds.next().map(sys::EventFd::from_fd);
        Self::from_segments(&name, data, ctl, wake)
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
        (
            self.0.hdr().c.0.writer_pid.load(Relaxed),
            self.0.writer_alive(),
        )
    }

    /// Readers attached right now (registered, lossless or not).
    pub fn readers(&self) -> u32 {
        // SYNC POINT: Acquire, pairs with the AcqRel increment in `Reader::attach` and
        // decrement in `release_slot` (a count; nothing is read through it here).
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

    /// A ring from descriptors another process passed by other means than
    /// [`RingRef::send`] (e.g. inside a framed protocol message): its data segment, and its
    /// control segment if the receiver may register as a reader (without one, readers are
    /// observers that cannot hold the writer back).
    pub fn from_fds(name: &str, data: OwnedFd, ctl: Option<OwnedFd>) -> Result<RingRef> {
        let data = Segment::from_fd(data).map_err(|e| Error::os(name, "map data segment", e))?;
        let ctl = match ctl {
            Some(fd) => {
                Some(Segment::from_fd(fd).map_err(|e| Error::os(name, "map control segment", e))?)
                    .filter(|s| s.writable())
            }
            None => None,
        };
        Ok(RingRef(Shared::from_segments(name, data, ctl, None)?))
    }

    /// [`RingRef::from_fds`] with the ring's wake-up eventfd ([`Shared::wake_fd`]) too, so
    /// that a registered reader may sleep on it ([`Reader::arm`]). The wake-up is kept only
    /// with a writable control segment (the sleep bit lives there).
    pub fn from_fds_with_wake(
        name: &str,
        data: OwnedFd,
        ctl: OwnedFd,
        wake: OwnedFd,
    ) -> Result<RingRef> {
        let data = Segment::from_fd(data).map_err(|e| Error::os(name, "map data segment", e))?;
        let ctl =
            Some(Segment::from_fd(ctl).map_err(|e| Error::os(name, "map control segment", e))?)
                .filter(|s| s.writable());
        Ok(RingRef(Shared::from_segments(
            name,
            data,
            ctl,
            Some(sys::EventFd::from_fd(wake)),
        )?))
    }

    /// Open a named ring (under /dev/shm) for reading.
    pub fn open(name: &str) -> Result<RingRef> {
        Ok(RingRef(Shared::open_named(name, false)?))
    }
    /// Open a named ring only if uid `owner` owns it, its data segment read-only (see
    /// `Shared::open_owned`): `register` maps its control segment too, for a reader slot.
    pub fn open_owned(name: &str, owner: u32, register: bool) -> Result<RingRef> {
        Ok(RingRef(Shared::open_owned(name, owner, register)?))
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
    /// [`RingRef::wait_released`] for a party that waits on this ring again and again: the
    /// state it keeps between waits (what was released, how long waits took) decides
    /// whether the next wait spins before it sleeps.
    pub fn wait_released_with(&self, pos: u64, state: &mut ReleaseCache) -> Result<()> {
        self.0.wait_released(pos, 0, state).map(|_| ())
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
