//! A legacy reader's capture: one subscription to a shared capture in the daemon, read in
//! place from the shared rings. Safe Rust; `ffi` turns it into libpcap's calls.
//!
//! Owns: connecting to `streamlined`, the `capture` request and its two rings (the
//! subscriber's own tag ring and the capture's shared data ring, mapped as an observer:
//! the reader can never hold the capture back), delivering packets in place with libpcap's
//! header, counting what the reader lost (`pcap_stats`'s `ps_drop`), changing the filter
//! (a new subscription replaces the old one), sleeping until the capture wakes the reader,
//! and reconnecting after a daemon restart. Does not own: libpcap's handle, its options or
//! its C types (`ffi`).
//!
//! # Wake-ups in batches (thesis 5.2.2)
//!
//! The reader registers on its own tag ring (FRP: the capture never waits for it) and,
//! when the ring is empty, sleeps in `poll` on the ring's wake-up eventfd after setting
//! the ring's sleep bit (`beltway::Reader::arm`). The capture wakes it per the ring's
//! moderation: once [`Params::wake`]'s packets wait, or its latency bound after the first
//! of them (libpcap's timeout), whichever first; in immediate mode the
//! reader sleeps as a deep sleeper, woken at every batch. Nothing wakes an idle reader:
//! the same `poll` waits on `pcap_breakloop`'s eventfd and on a pidfd of the capture's
//! process (its death ends the stream). The eventfd is `pcap_get_selectable_fd`.

use beltway::{Armed, BufTable, IbufReader, Ready, RingRef, Start, Tag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use protocol::client::{Client, ClientError};
use protocol::proto::{BpfInsn, Reply, Request, Wake};
use protocol::tap::RecordHeader;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Why a capture failed, with libpcap's status code for it.
#[derive(Debug)]
pub struct CaptureError {
    /// PCAP_ERROR_* (negative).
    pub status: i32,
    pub message: String,
}

pub const PCAP_ERROR: i32 = -1;
pub const PCAP_ERROR_NO_SUCH_DEVICE: i32 = -5;
pub const PCAP_ERROR_PERM_DENIED: i32 = -8;

impl CaptureError {
    fn new(status: i32, message: impl Into<String>) -> CaptureError {
        CaptureError {
            status,
            message: message.into(),
        }
    }
}

/// Why a capture could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The daemon does not serve this device (a framing `rx` does not capture): the
    /// caller hands it to the real libpcap.
    NotOurs(String),
    /// No daemon answers (the caller may fall back to the real libpcap).
    Unreachable(CaptureError),
    Failed(CaptureError),
}

/// What a capture asks of the daemon.
#[derive(Debug, Clone)]
pub struct Params {
    pub device: String,
    pub snaplen: u32,
    pub program: Vec<BpfInsn>,
    /// How the capture wakes this reader (see [`wake_for`]).
    pub wake: Wake,
    /// libpcap's immediate mode: a wake-up at every batch (the reader sleeps as a deep
    /// sleeper).
    pub immediate: bool,
    /// Bytes of the reader's share (`pcap_set_buffer_size`; 0: the daemon's default).
    pub buffer: u32,
    /// Promiscuous mode (`pcap_set_promisc`): the daemon holds the interface in it while
    /// this reader is subscribed.
    pub promisc: bool,
    /// `pcap_setdirection`: `in`, `out`, or empty for both.
    pub direction: String,
}

impl Params {
    /// The daemon's `capture` request for these parameters.
    fn request(&self) -> Request {
        Request::Capture {
            device: self.device.clone(),
            program: self.program.clone(),
            snaplen: self.snaplen,
            wake: self.wake,
            buffer: self.buffer,
            promisc: self.promisc,
            direction: self.direction.clone(),
        }
    }
}

/// The moderation a libpcap reader asks for: its timeout (`pcap_set_timeout`, ms) bounds
/// the batching delay as libpcap's TPACKET_V3 block timeout does (0 or less, libpcap's
/// "no timeout": the capture's default, 20 ms), at most `$STREAMLINE_PCAP_WAKE_US` µs if
/// set (the capture clamps it to 1 s); a wake-up once `$STREAMLINE_PCAP_WAKE_PACKETS`
/// packets wait (default: the capture's, 256); one per packet in immediate mode.
pub fn wake_for(timeout_ms: i32, immediate: bool) -> Wake {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    let cap = env("STREAMLINE_PCAP_WAKE_US").map(|c| c.max(1));
    let us = match (timeout_ms, cap) {
        (t, Some(c)) if t > 0 => (t as u64 * 1000).min(c as u64) as u32,
        (t, None) if t > 0 => (t as u64 * 1000).min(u32::MAX as u64) as u32,
        (_, c) => c.unwrap_or(0),
    };
    let packets = if immediate {
        1
    } else {
        env("STREAMLINE_PCAP_WAKE_PACKETS").unwrap_or(0)
    };
    Wake { packets, us }
}

/// One packet in place: its header fields and its bytes (valid until the next call on the
/// capture).
pub struct Packet<'a> {
    pub ts_ns: u64,
    pub orig_len: u32,
    pub data: &'a [u8],
}

/// What happened when asked for the next packet.
pub enum Next<'a> {
    Packet(Packet<'a>),
    /// Nothing within the time given.
    TimedOut,
    /// The stream ended (a `streamline:` device's run ended).
    End,
}

/// A subscription's rings: its own tag ring (registered, to be woken), the shared data
/// ring (observed).
struct Sub {
    client: Client,
    id: u64,
    reader: IbufReader,
    /// Tags the subscription's ring had lost when last looked at.
    lost_seen: u64,
    /// The tag ring's wake-up (a descriptor of its eventfd; None from a daemon that sent
    /// none: the reader then looks every [`LOOK`]).
    wake: Option<OwnedFd>,
    /// The capture's process (the tag ring's writer): readable when it ends.
    writer: Option<OwnedFd>,
}

/// How often a reader that cannot be woken looks for packets (and a reader that cannot
/// watch the capture's process for its end looks whether it lives).
const LOOK: Duration = Duration::from_millis(50);

/// A live capture for one legacy reader.
pub struct Capture {
    pub params: Params,
    pub link_type: u32,
    socket: PathBuf,
    sub: Sub,
    /// Packets handed to the reader, and packets it lost (overwritten before it read them,
    /// or while it read them).
    pub delivered: u64,
    pub dropped: u64,
    /// What earlier subscriptions of this capture (before a filter or direction change,
    /// or a reconnect) missed because the capture's socket had no room, and what the
    /// current one had missed when last asked ([`Capture::kernel_lost`]).
    lost_before: u64,
    lost_known: u64,
    /// The interface's own drop counters when the capture began (libpcap's `ps_ifdrop`
    /// counts from there): None for a `streamline:` device.
    ifdrops_at_open: Option<u64>,
    /// A packet handed out in place and not yet completed.
    held: bool,
    /// The program has the selectable descriptor: keep it readable while packets wait.
    selectable: bool,
}

/// The daemon's socket: `$STREAMLINE_SOCKET`, else the default.
pub fn socket() -> PathBuf {
    protocol::client::socket_path(None)
        .unwrap_or_else(|| PathBuf::from(protocol::proto::DEFAULT_SOCKET))
}

fn subscribe(socket: &std::path::Path, p: &Params) -> Result<(Sub, u32), ClientError> {
    subscribe_on(Client::connect(socket)?, p)
}

/// Subscribe on an open connection: a connection made before the program dropped its
/// privileges keeps the identity it was made with (as a descriptor opened before does),
/// so a reader that sets its filter after dropping root still may.
fn subscribe_on(mut client: Client, p: &Params) -> Result<(Sub, u32), ClientError> {
    let (reply, fds) = client.call_fds(p.request(), &[])?;
    let Reply::Captured { sub, link_type, .. } = reply else {
        return Err(ClientError::Unexpected(Box::new(reply)));
    };
    let sub = map(&p.device, fds)
        .map(|(reader, wake, writer)| Sub {
            client,
            id: sub,
            reader,
            lost_seen: 0,
            wake,
            writer,
        })
        .map_err(|e| ClientError::Refused {
            code: "EIO".into(),
            errno: libc::EIO,
            message: format!("mapping the capture's rings: {e}"),
        })?;
    Ok((sub, link_type))
}

type Mapped = (IbufReader, Option<OwnedFd>, Option<OwnedFd>);

/// Make an eventfd readable.
fn signal(fd: &OwnedFd) {
    let _ = nix::unistd::write(fd, &1u64.to_ne_bytes());
}

/// Reset an eventfd (non-blocking: the capture's side made it so).
fn drain(fd: &OwnedFd) {
    let mut b = [0u8; 8];
    let _ = nix::unistd::read(fd, &mut b);
}

/// The rings of a `captured` answer (see `Request::Capture`): the tag ring's and the data
/// ring's data segments, then the tag ring's control segment and wake-up.
fn map(device: &str, fds: Vec<OwnedFd>) -> beltway::Result<Mapped> {
    let mut it = fds.into_iter();
    let (Some(t), Some(d)) = (it.next(), it.next()) else {
        return Err(beltway::Error::Unsupported {
            name: device.to_string(),
            what: "a capture answer without its two ring descriptors",
        });
    };
    let name = format!("{device}.tags");
    let (tags, wake) = match (it.next(), it.next()) {
        (Some(ctl), Some(wake)) => {
            let mine = wake.try_clone().map_err(|e| beltway::Error::BadRing {
                name: name.clone(),
                why: format!("keeping its wake-up descriptor: {e}"),
            })?;
            let tags = RingRef::from_fds_with_wake(&name, t, ctl, wake)?;
            (tags, Some(mine))
        }
        _ => (RingRef::from_fds(&name, t, None)?, None),
    };
    let data = RingRef::from_fds(&format!("{device}.data"), d, None)?;
    let mut table = BufTable::new();
    table.register(&data)?;
    let reader = IbufReader::new(tags.reader(Start::Oldest)?, table)?;
    // Without a pidfd (another pid namespace), liveness is looked at every LOOK.
    let writer = beltway::sys::pidfd_open(reader.tags().writer_pid()).ok();
    Ok((reader, wake, writer))
}

fn error_of(device: &str, e: ClientError) -> CaptureError {
    match &e {
        ClientError::Connect { path, source } => CaptureError::new(PCAP_ERROR, format!("{device}: streamline: no daemon answers at {path} ({source}); start streamlined, or set STREAMLINE_PCAP_FALLBACK=1 to capture through the system's libpcap")),
        ClientError::Refused { errno, message, .. } => {
            let status = match *errno {
                libc::ENODEV | libc::ENOENT | libc::ESRCH => PCAP_ERROR_NO_SUCH_DEVICE,
                libc::EPERM | libc::EACCES => PCAP_ERROR_PERM_DENIED,
                _ => PCAP_ERROR,
            };
            CaptureError::new(status, format!("streamline: {message}"))
        }
        _ => CaptureError::new(PCAP_ERROR, format!("{device}: streamline: {e}")),
    }
}

impl Capture {
    /// Subscribe to `params.device` through the daemon at `socket`.
    pub fn open(socket: PathBuf, params: Params) -> Result<Capture, OpenError> {
        match subscribe(&socket, &params) {
            Ok((sub, link_type)) => Ok(Capture {
                link_type,
                socket,
                sub,
                delivered: 0,
                dropped: 0,
                lost_before: 0,
                lost_known: 0,
                ifdrops_at_open: interface_drops(&params.device),
                params,
                held: false,
                selectable: false,
            }),
            Err(ClientError::Refused { errno, message, .. }) if errno == libc::ENOTSUP => {
                Err(OpenError::NotOurs(message))
            }
            Err(e @ ClientError::Connect { .. }) => {
                Err(OpenError::Unreachable(error_of(&params.device, e)))
            }
            Err(e) => Err(OpenError::Failed(error_of(&params.device, e))),
        }
    }

    /// Replace the filter: a new subscription with `program`, then the old one released.
    /// What the old one held unread is dropped, as libpcap drops what its buffer held
    /// when a filter is set (so no packet the new filter rejects is ever seen).
    pub fn set_filter(&mut self, program: Vec<BpfInsn>) -> Result<(), CaptureError> {
        self.resubscribe(Params {
            program,
            ..self.params.clone()
        })
    }

    /// Capture only the packets of one direction (`in`, `out`; empty: both), from the
    /// next packet on, as libpcap's `pcap_setdirection`: a new subscription to the
    /// daemon's capture of that direction replaces the old one.
    pub fn set_direction(&mut self, direction: &str) -> Result<(), CaptureError> {
        if self.params.direction == direction {
            return Ok(());
        }
        self.resubscribe(Params {
            direction: direction.to_string(),
            ..self.params.clone()
        })
    }

    /// A new subscription with `p`, then the old one released.
    fn resubscribe(&mut self, p: Params) -> Result<(), CaptureError> {
        let (reply, fds) = self
            .sub
            .client
            .call_fds(p.request(), &[])
            .map_err(|e| error_of(&p.device, e))?;
        let Reply::Captured { sub, .. } = reply else {
            return Err(CaptureError::new(
                PCAP_ERROR,
                format!("{}: unexpected answer to capture: {reply:?}", p.device),
            ));
        };
        let (reader, wake, writer) = map(&p.device, fds).map_err(|e| {
            CaptureError::new(
                PCAP_ERROR,
                format!("{}: mapping the capture's rings: {e}", p.device),
            )
        })?;
        self.complete();
        // What the old subscription missed stays counted.
        self.kernel_lost();
        self.lost_before += std::mem::take(&mut self.lost_known);
        let old = std::mem::replace(&mut self.sub.id, sub);
        self.sub.reader = reader;
        self.sub.lost_seen = 0;
        self.sub.writer = writer;
        // The descriptor the program may hold (`pcap_get_selectable_fd`) stays the same
        // number: the new ring's wake-up takes its place.
        keep_number(&mut self.sub.wake, wake);
        let _ = self.sub.client.call(Request::Release { sub: old });
        self.params = p;
        self.rearm();
        Ok(())
    }

    /// The selectable descriptor: the tag ring's wake-up eventfd, readable once the
    /// capture woke this reader (per its moderation) and kept readable while packets wait
    /// ([`Capture::rearm`]).
    pub fn selectable_fd(&mut self) -> std::io::Result<RawFd> {
        let fd = self.sub.wake.as_ref().map(|w| w.as_raw_fd());
        let fd = fd.ok_or_else(|| {
            std::io::Error::other("the daemon sent no wake-up descriptor with the capture")
        })?;
        self.selectable = true;
        self.rearm();
        Ok(fd)
    }

    /// After reading: the selectable descriptor is readable while packets wait (we signal
    /// it ourselves) or, when none wait, once the capture wakes us (the ring's sleep bit is
    /// set, as before a sleep).
    pub fn rearm(&mut self) {
        let Some(w) = self.sub.wake.as_ref().filter(|_| self.selectable) else {
            return;
        };
        drain(w);
        let tags = self.sub.reader.tags_mut();
        if !matches!(tags.arm(self.params.immediate), Ok(Armed::Asleep)) {
            signal(w);
        }
    }

    /// Packets waiting now.
    pub fn ready(&mut self) -> bool {
        self.sub.reader.tags_mut().readable() > 0
    }

    /// Release the packet handed out last (it was read in place): if the capture overwrote
    /// it meanwhile, it counts as lost.
    pub fn complete(&mut self) {
        if std::mem::take(&mut self.held) && self.sub.reader.peek_complete().is_err() {
            self.dropped += 1;
            self.delivered = self.delivered.saturating_sub(1);
        }
    }

    /// Packets this capture missed because the shared capture's socket had no room for
    /// them (the kernel's drops; libpcap's `ps_drop` counts its own socket's), since it
    /// began, as the daemon last heard from the capture (a few hundred ms behind). The
    /// capture is shared: these are packets some reader wanted, not necessarily this one.
    /// A daemon that cannot answer leaves the last answer standing.
    pub fn kernel_lost(&mut self) -> u64 {
        if let Ok(Reply::CaptureStats { lost }) =
            self.sub.client.call(Request::CaptureStats { sub: self.sub.id })
        {
            self.lost_known = lost;
        }
        self.lost_before + self.lost_known
    }

    /// Drops counted by the interface itself since the capture began, as libpcap counts
    /// `ps_ifdrop` on Linux (the device's `rx_missed_errors` and `rx_fifo_errors`).
    pub fn interface_dropped(&self) -> u64 {
        match (self.ifdrops_at_open, interface_drops(&self.params.device)) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        }
    }

    fn count_lost(&mut self) {
        let lost = self.sub.reader.tags().lost() / Tag::SIZE as u64;
        self.dropped += lost - self.sub.lost_seen.min(lost);
        self.sub.lost_seen = lost;
    }

    /// The next packet, waiting at most `timeout` (`None`: until one comes) or until
    /// `stop_fd` is signalled and `stop` says so (`pcap_breakloop`).
    pub fn next(
        &mut self,
        timeout: Option<Duration>,
        stop_fd: BorrowedFd<'_>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Next<'_>, CaptureError> {
        self.complete();
        // Awake now: no longer a sleeper the capture must wake (a deep one would be woken
        // at every batch while we read).
        self.sub.reader.tags_mut().disarm();
        // Made only when the ring is empty: the fast path reads no clock.
        let mut deadline: Option<Option<Instant>> = None;
        loop {
            // One look, no wait: a packet that is there is taken at once.
            match self.sub.reader.try_peek_acquire() {
                Ok(Some(_)) => {
                    self.held = true;
                    self.delivered += 1;
                    break;
                }
                Ok(None) => {}
                // Overwritten before we got to it: lost, on to the next.
                Err(e) if e.is_overrun() => {
                    self.dropped += 1;
                    continue;
                }
                Err(e) => {
                    return Err(CaptureError::new(
                        PCAP_ERROR,
                        format!("{}: reading the capture: {e}", self.params.device),
                    ))
                }
            }
            self.count_lost();
            if self.sub.reader.tags().writer_died() {
                return self.ended();
            }
            if stop() {
                return Ok(Next::TimedOut);
            }
            let deadline = *deadline.get_or_insert_with(|| timeout.map(|t| Instant::now() + t));
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Next::TimedOut);
            }
            match self.sleep(deadline, stop_fd) {
                Ok(Ready::Eof) if self.sub.reader.tags_mut().readable() == 0 => {
                    return self.ended()
                }
                Ok(_) => {}
                Err(e) => {
                    return Err(CaptureError::new(
                        PCAP_ERROR,
                        format!("{}: waiting for packets: {e}", self.params.device),
                    ))
                }
            }
        }
        self.count_lost();
        let (_, p) = self.sub.reader.held().expect("held just above");
        Ok(Next::Packet(match RecordHeader::decode(p.data) {
            Ok((h, block)) => Packet {
                ts_ns: h.ts_ns,
                orig_len: h.orig_len.max(block.len() as u32),
                data: block,
            },
            Err(_) => Packet {
                ts_ns: 0,
                orig_len: p.data.len() as u32,
                data: p.data,
            },
        }))
    }

    /// Sleep until the capture wakes us (see the module's notes), the stream ends,
    /// `deadline` passes or `stop_fd` is signalled. `Data`/`Eof` when arming found them;
    /// else `TimedOut` (the caller looks again).
    fn sleep(
        &mut self,
        deadline: Option<Instant>,
        stop_fd: BorrowedFd<'_>,
    ) -> std::io::Result<Ready> {
        let left = |cap: Option<Duration>| {
            let d = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match (d, cap) {
                (Some(d), Some(c)) => Some(d.min(c)),
                (d, c) => d.or(c),
            }
        };
        let tags = self.sub.reader.tags_mut();
        let armed = tags
            .arm(self.params.immediate)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let wake = match (armed, &self.sub.wake) {
            (Armed::Data, _) => return Ok(Ready::Data),
            (Armed::Eof, _) => return Ok(Ready::Eof),
            (Armed::Asleep, Some(w)) => w,
            // A ring we cannot sleep on: look again after a while.
            (_, _) => {
                return tags
                    .block(left(Some(LOOK)))
                    .map_err(|e| std::io::Error::other(e.to_string()))
            }
        };
        let mut fds = vec![
            PollFd::new(wake.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop_fd, PollFlags::POLLIN),
        ];
        if let Some(p) = &self.sub.writer {
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        let cap = self.sub.writer.is_none().then_some(LOOK);
        let timeout = left(cap).map_or(PollTimeout::NONE, |d| {
            PollTimeout::try_from(d.as_millis().max(1).min(i32::MAX as u128) as i32)
                .unwrap_or(PollTimeout::MAX)
        });
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let fired = |f: Option<&PollFd>| f.is_some_and(|f| f.any().unwrap_or(false));
        let (died, stopped) = (fired(fds.get(2)), fired(fds.get(1)));
        drop(fds);
        drain(wake);
        if stopped {
            // The caller looks at the flag next; a signal the flag no longer backs would
            // otherwise end every sleep at once.
            let mut b = [0u8; 8];
            let _ = nix::unistd::read(stop_fd, &mut b);
        }
        if died || self.sub.writer.is_none() {
            tags.check_writer();
        }
        tags.disarm();
        Ok(Ready::TimedOut)
    }

    /// The stream ended: a run's node ends for good; an interface's capture ended because
    /// the daemon went (restart): subscribe again for a while before giving up.
    fn ended(&mut self) -> Result<Next<'_>, CaptureError> {
        if self.params.device.starts_with("streamline:") {
            return Ok(Next::End);
        }
        let until = Instant::now() + reconnect_window();
        loop {
            match subscribe(&self.socket, &self.params) {
                Ok((sub, _)) => {
                    self.held = false;
                    // The daemon that went away cannot be asked: what it last said counts.
                    self.lost_before += std::mem::take(&mut self.lost_known);
                    let mut old = std::mem::replace(&mut self.sub, sub);
                    // The program's selectable descriptor keeps its number.
                    keep_number(&mut old.wake, self.sub.wake.take());
                    self.sub.wake = old.wake.take();
                    self.rearm();
                    return Ok(Next::TimedOut);
                }
                Err(e) if Instant::now() >= until => {
                    return Err(CaptureError::new(PCAP_ERROR, format!("{}: the capture ended (the daemon went away) and could not be resumed: {}", self.params.device, error_of(&self.params.device, e).message)));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

/// The interface's own drop counters (sysfs statistics `rx_missed_errors` plus
/// `rx_fifo_errors`, what libpcap's `ps_ifdrop` counts on Linux); None for a device that
/// is not an interface.
fn interface_drops(device: &str) -> Option<u64> {
    if device.is_empty() || device.contains('/') || device.starts_with('.') || device.contains(':') {
        return None;
    }
    let stat = |name: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{device}/statistics/{name}"))
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    match (stat("rx_missed_errors"), stat("rx_fifo_errors")) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// A new subscription's wake-up takes the place of the old one's descriptor number, which
/// the program may hold (`pcap_get_selectable_fd`); `held` keeps that number.
fn keep_number(held: &mut Option<OwnedFd>, new: Option<OwnedFd>) {
    match (held.as_mut(), new) {
        (Some(h), Some(n)) => {
            if nix::unistd::dup2(&n, h).is_err() {
                *held = Some(n);
            }
        }
        (_, n) => *held = n,
    }
}

/// How long a reader whose daemon went away tries to subscribe again
/// (`$STREAMLINE_PCAP_RECONNECT_S`, default 10 s).
fn reconnect_window() -> Duration {
    Duration::from_secs_f64(
        std::env::var("STREAMLINE_PCAP_RECONNECT_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10.0),
    )
}

/// The streams of running runs a reader may capture: `streamline:RUN/NODE` and a line
/// describing it, from the daemon's `ps` (empty when no daemon answers).
pub fn devices(socket: &std::path::Path) -> Vec<(String, String)> {
    let Ok(mut c) = Client::connect(socket) else {
        return Vec::new();
    };
    let Ok(Reply::Runs { runs }) = c.call(Request::Ps {}) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in runs {
        // Internal nodes (`__publish`, channel ends) are no one's stream.
        for n in r.nodes.iter().filter(|n| !n.label.starts_with("__")) {
            out.push((
                format!("streamline:{}/{}", r.run, n.label),
                format!(
                    "Streamline run {} ({}), node {}",
                    r.run, r.pipeline, n.label
                ),
            ));
        }
    }
    out
}
