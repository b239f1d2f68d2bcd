//! A legacy reader's capture: one subscription to a shared capture in the daemon, read in
//! place from the shared rings. Safe Rust; `ffi` turns it into libpcap's calls.
//!
//! Owns: connecting to `streamlined`, the `capture` request and its two rings (the
//! subscriber's own tag ring and the capture's shared data ring, mapped as an observer:
//! the reader can never hold the capture back), delivering packets in place with libpcap's
//! header, counting what the reader lost (`pcap_stats`'s `ps_drop`), changing the filter
//! (a new subscription replaces the old one) and reconnecting after a daemon restart. Does
//! not own: libpcap's handle, its options or its C types (`ffi`).

use beltway::{BufTable, IbufReader, Ready, RingRef, Start, Tag};
use protocol::tap::RecordHeader;
use nix::sys::eventfd::{EfdFlags, EventFd};
use protocol::client::{Client, ClientError};
use protocol::proto::{BpfInsn, Reply, Request};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
            buffer: self.buffer,
            promisc: self.promisc,
            direction: self.direction.clone(),
        }
    }
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

/// A subscription's rings, read as an observer.
struct Sub {
    client: Client,
    id: u64,
    /// Its tag ring (for the selectable descriptor's watcher).
    tags: RingRef,
    reader: IbufReader,
    /// Tags the subscription's ring had lost when last looked at.
    lost_seen: u64,
}

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
    /// A packet handed out in place and not yet completed.
    held: bool,
    waker: Option<Waker>,
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
    let (tags, reader) = map(&p.device, fds).map_err(|e| ClientError::Refused {
        code: "EIO".into(),
        errno: libc::EIO,
        message: format!("mapping the capture's rings: {e}"),
    })?;
    Ok((
        Sub {
            client,
            id: sub,
            tags,
            reader,
            lost_seen: 0,
        },
        link_type,
    ))
}

fn map(device: &str, fds: Vec<OwnedFd>) -> beltway::Result<(RingRef, IbufReader)> {
    let mut it = fds.into_iter();
    let (Some(t), Some(d)) = (it.next(), it.next()) else {
        return Err(beltway::Error::Unsupported {
            name: device.to_string(),
            what: "a capture answer without its two ring descriptors",
        });
    };
    let tags = RingRef::from_fds(&format!("{device}.tags"), t, None)?;
    let data = RingRef::from_fds(&format!("{device}.data"), d, None)?;
    let mut table = BufTable::new();
    table.register(&data)?;
    let reader = IbufReader::new(tags.reader(Start::Oldest)?, table)?;
    Ok((tags, reader))
}

/// `pcap_get_selectable_fd`: an eventfd that is readable while packets wait. A watcher
/// thread sleeps on the subscription's tag ring (its own observer position, woken by the
/// capture's batch flushes) and signals the eventfd; the reader clears it when it has read
/// everything and signals it again when it left packets behind.
pub struct Waker {
    fd: EventFd,
    stop: Arc<AtomicBool>,
}

impl Waker {
    fn start(tags: &RingRef) -> std::io::Result<Waker> {
        let fd = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ring, flag, signal) = (tags.clone(), stop.clone(), fd.as_fd().try_clone_to_owned()?);
        std::thread::Builder::new()
            .name("sl-pcap-waker".into())
            .spawn(move || {
                let Ok(mut r) = ring.reader(Start::Latest) else {
                    return;
                };
                let poke = |fd: &OwnedFd| nix::unistd::write(fd, &1u64.to_ne_bytes());
                while !flag.load(Ordering::Relaxed) {
                    match r.block(Some(Duration::from_millis(100))) {
                        Ok(Ready::Data) => {
                            let _ = poke(&signal);
                            while r.readable() > 0 {
                                if !matches!(r.peek(1 << 20), Ok(Some(_))) {
                                    break;
                                }
                            }
                        }
                        Ok(Ready::Eof) | Err(_) => {
                            let _ = poke(&signal);
                            return;
                        }
                        Ok(Ready::TimedOut) => {}
                    }
                }
            })?;
        Ok(Waker { fd, stop })
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
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
                params,
                link_type,
                socket,
                sub,
                delivered: 0,
                dropped: 0,
                held: false,
                waker: None,
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
        let (tags, reader) = map(&p.device, fds).map_err(|e| {
            CaptureError::new(
                PCAP_ERROR,
                format!("{}: mapping the capture's rings: {e}", p.device),
            )
        })?;
        self.complete();
        let old = std::mem::replace(&mut self.sub.id, sub);
        self.sub.tags = tags;
        self.sub.reader = reader;
        self.sub.lost_seen = 0;
        let _ = self.sub.client.call(Request::Release { sub: old });
        self.params = p;
        self.rewake();
        Ok(())
    }

    /// The selectable descriptor (made on first use).
    pub fn selectable_fd(&mut self) -> std::io::Result<RawFd> {
        if self.waker.is_none() {
            self.waker = Some(Waker::start(&self.sub.tags)?);
            self.rearm();
        }
        Ok(self.waker.as_ref().expect("made above").fd.as_raw_fd())
    }

    /// After reading: the selectable descriptor is readable exactly while packets wait.
    pub fn rearm(&mut self) {
        let ready = self.ready();
        if let Some(w) = &self.waker {
            if ready {
                let _ = w.fd.write(1);
            } else {
                let _ = w.fd.read();
            }
        }
    }

    /// The subscription changed: the watcher follows the new tag ring.
    fn rewake(&mut self) {
        if self.waker.take().is_some() {
            let _ = self.selectable_fd();
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

    fn count_lost(&mut self) {
        let lost = self.sub.reader.tags().lost() / Tag::SIZE as u64;
        self.dropped += lost - self.sub.lost_seen.min(lost);
        self.sub.lost_seen = lost;
    }

    /// The next packet, waiting at most `timeout` (`None`: until one comes) in slices of
    /// at most `slice` (so the caller can look at a break flag between them: `stop`).
    pub fn next(
        &mut self,
        timeout: Option<Duration>,
        slice: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<Next<'_>, CaptureError> {
        self.complete();
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
            let wait = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(Next::TimedOut);
                    }
                    (d - now).min(slice)
                }
                None => slice,
            };
            match self.sub.reader.tags_mut().block(Some(wait)) {
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
                    self.sub = sub;
                    self.rewake();
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
