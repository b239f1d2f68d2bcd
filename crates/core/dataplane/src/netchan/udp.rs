//! The lossy transport: UDP, several queues on each side, every datagram numbered so the
//! receiver counts what was lost (seed 002's pipes over UDP with multi-queue I/O).
//!
//! # Queues
//!
//! The sender has `queues` sockets, each with its own source port, and picks one for each
//! block with a queue-choice function, the seed's f(n) ([`QueueChoice`]: random, as the
//! seed found best; round robin; or by class, which keeps a flow's blocks in order when a
//! `hash` or `flow` filter before it made the class the flow's). The receiver has `queues`
//! sockets bound to one port with `SO_REUSEPORT`: the kernel spreads the sender's flows
//! (4-tuples) over them by hash, as a NIC's RSS spreads flows over receive queues. One
//! source reads them all, choosing the next socket round robin and polling all of them
//! only when every one is empty (the seed's Algorithm 2 shape: no system call while there
//! is something to read); data-parallel replicas after it are the engines.
//!
//! # Datagrams
//!
//! A 20-byte head: `SLU` and version 2; the kind ([`DATA`], [`END`], [`HELLO`],
//! [`WELCOME`], [`BUSY`], [`END_ACK`]); the sender's queue and its number of queues (u8 each); a
//! reserved byte; the stream (u32, chosen at random by each sender); `seq` (u64). In DATA,
//! `seq` numbers the datagram on its queue (0, 1, ...) and frames follow (see the parent
//! module) up to the datagram size (`dgram`, 1472 by default: one Ethernet frame; a block
//! too big for that travels alone, up to 64 KiB, fragmented by IP). In END, `seq` is how
//! many DATA datagrams the queue sent.
//!
//! # Start, loss, end
//!
//! The sender greets from its first queue (HELLO, again every 100 ms) until the receiver
//! answers WELCOME; after `wait` seconds without one, the build fails naming the receiver
//! (a receiver serving another sender answers BUSY, and the build fails saying so). The
//! receiver counts per queue the DATA datagrams it got and the highest number it saw; at
//! END, `sent - received` were lost. The receiver answers each END with END_ACK; the
//! sender sends END again every 20 ms until each queue's is answered (an overloaded
//! receiver drops ENDs like any datagram), for up to two seconds. A receiver that hears nothing for `idle` seconds after the stream
//! started stops the run, naming the sender and what was lost so far; a sender whose
//! receiver went away learns it from the ICMP port-unreachable its connected sockets get
//! (`ECONNREFUSED`) and stops the run, naming the receiver.

use super::{frame_at, HEAD};
use crate::filter::{Batch, Ctx, Filter};
use crate::store::Store;
use crate::transport::{BlockIn, BlockOut, Header, Inlet, Outgoing, Outlet, LAST};
use nix::sys::socket::{self as nsock, sockopt, AddressFamily, SockFlag, SockType};
use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Version 2: frames are block headers (`protocol::block`); version 1 had a header of its own.
const MAGIC: [u8; 4] = *b"SLU\x02";
/// Bytes of a datagram's head.
pub const DG_HEAD: usize = 20;
/// The largest UDP payload over IPv4.
pub const MAX_DGRAM: usize = 65507;
/// Default datagram size: one Ethernet frame's UDP payload.
pub const DEFAULT_DGRAM: usize = 1472;
/// Default seconds of silence after which a receiver gives its sender up.
pub const DEFAULT_IDLE: f64 = 5.0;

/// How long a receiver holding part of a sender's batch waits for the rest (ms).
const BATCH_REST_MS: u16 = 200;

const DATA: u8 = 0;
const END: u8 = 1;
const HELLO: u8 = 2;
const WELCOME: u8 = 3;
const BUSY: u8 = 4;
const END_ACK: u8 = 5;

/// A datagram's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    kind: u8,
    queue: u8,
    queues: u8,
    stream: u32,
    seq: u64,
}

impl Head {
    fn write(&self, b: &mut [u8]) {
        b[..4].copy_from_slice(&MAGIC);
        b[4] = self.kind;
        b[5] = self.queue;
        b[6] = self.queues;
        b[7] = 0;
        b[8..12].copy_from_slice(&self.stream.to_le_bytes());
        b[12..20].copy_from_slice(&self.seq.to_le_bytes());
    }
    fn bytes(&self) -> [u8; DG_HEAD] {
        let mut b = [0u8; DG_HEAD];
        self.write(&mut b);
        b
    }
    fn parse(b: &[u8]) -> Option<Head> {
        if b.len() < DG_HEAD || b[..4] != MAGIC || b[4] > END_ACK {
            return None;
        }
        Some(Head {
            kind: b[4],
            queue: b[5],
            queues: b[6],
            stream: u32::from_le_bytes(b[8..12].try_into().ok()?),
            seq: u64::from_le_bytes(b[12..20].try_into().ok()?),
        })
    }
}

/// The seed's f(n): which of the sender's queues a block goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueChoice {
    /// Uniformly at random (the seed's choice).
    Random,
    /// Each queue in turn.
    RoundRobin,
    /// By the block's class: a class stays on one queue, so in order.
    Class,
}

impl std::str::FromStr for QueueChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "random" => Ok(QueueChoice::Random),
            "rr" => Ok(QueueChoice::RoundRobin),
            "class" => Ok(QueueChoice::Class),
            _ => Err(format!("queue={s}: expected random, rr or class")),
        }
    }
}

/// The sending end over UDP: a sink.
pub struct UdpOut {
    socks: Vec<UdpSocket>,
    peer: String,
    stream: u32,
    choice: QueueChoice,
    dgram: usize,
    /// Per queue: the datagram being filled (its head's room first) and its next number.
    bufs: Vec<Vec<u8>>,
    seq: Vec<u64>,
    rr: usize,
    rng: u64,
    /// Blocks and bytes sent; whether the receiver went away.
    outlet: Outlet,
    datagrams: u64,
    /// Datagrams the kernel refused to queue (ENOBUFS, EAGAIN): counted as sent, so the
    /// receiver counts them as lost.
    dropped: u64,
    oversize: u64,
    /// The size of the first block too big for a datagram, until the run is told.
    oversize_first: Option<usize>,
}

fn resolve(to: &str) -> Result<SocketAddr, String> {
    to.to_socket_addrs()
        .map_err(|e| format!("cannot resolve {to}: {e}"))?
        .next()
        .ok_or_else(|| format!("{to} resolves to no address"))
}

impl UdpOut {
    /// Open `queues` sockets towards the `netin proto=udp` at `to` and greet it, trying
    /// for up to `wait`.
    pub fn connect(
        to: &str,
        queues: usize,
        choice: QueueChoice,
        dgram: usize,
        wait: Duration,
    ) -> Result<UdpOut, String> {
        if !(1..=255).contains(&queues) {
            return Err(format!("queues={queues}: between 1 and 255"));
        }
        if !(DG_HEAD + HEAD..=MAX_DGRAM).contains(&dgram) {
            return Err(format!(
                "dgram={dgram}: between {} and {MAX_DGRAM} bytes",
                DG_HEAD + HEAD
            ));
        }
        let addr = resolve(to)?;
        let peer = format!("{to} ({addr}, UDP)");
        let local: SocketAddr = if addr.is_ipv4() {
            "0.0.0.0:0".parse().expect("an address")
        } else {
            "[::]:0".parse().expect("an address")
        };
        let mut socks = Vec::with_capacity(queues);
        for _ in 0..queues {
            let s =
                UdpSocket::bind(local).map_err(|e| format!("{peer}: cannot open a socket: {e}"))?;
            s.connect(addr)
                .map_err(|e| format!("cannot reach {peer}: {e}"))?;
            socks.push(s);
        }
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ ((std::process::id() as u64) << 32);
        let stream = (seed ^ (seed >> 29)) as u32 | 1;
        let hello = Head {
            kind: HELLO,
            queue: 0,
            queues: queues as u8,
            stream,
            seq: 0,
        }
        .bytes();
        let s0 = &socks[0];
        s0.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(|e| format!("{peer}: {e}"))?;
        let t0 = Instant::now();
        let mut refused = false;
        let mut answer = [0u8; 64];
        'greet: loop {
            match s0.send(&hello) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => refused = true,
                Err(e) => return Err(format!("cannot send to {peer}: {e}")),
            }
            loop {
                match s0.recv(&mut answer) {
                    Ok(n) => match Head::parse(&answer[..n]) {
                        Some(h) if h.stream == stream && h.kind == WELCOME => break 'greet,
                        Some(h) if h.stream == stream && h.kind == BUSY => {
                            return Err(format!("{peer} serves another sender already"))
                        }
                        _ => continue,
                    },
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                        refused = true;
                        break;
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) =>
                    {
                        break
                    }
                    Err(e) => return Err(format!("{peer}: {e}")),
                }
            }
            if t0.elapsed() >= wait {
                return Err(format!(
                    "no netin answered at {peer} within {:.1} s{} (is a `netin port={} proto=udp` running there?)",
                    wait.as_secs_f64(),
                    if refused { " (port unreachable)" } else { "" },
                    addr.port()
                ));
            }
            if refused {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let mut bufs = vec![Vec::with_capacity(dgram.max(64 << 10)); queues];
        for b in &mut bufs {
            b.resize(DG_HEAD, 0);
        }
        Ok(UdpOut {
            socks,
            peer,
            stream,
            choice,
            dgram,
            bufs,
            seq: vec![0; queues],
            rr: 0,
            rng: seed | 1,
            outlet: Outlet::default(),
            datagrams: 0,
            dropped: 0,
            oversize: 0,
            oversize_first: None,
        })
    }

    fn choose(&mut self, class: u16) -> usize {
        let n = self.socks.len();
        match self.choice {
            QueueChoice::Random => {
                // xorshift64
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                (self.rng % n as u64) as usize
            }
            QueueChoice::RoundRobin => {
                self.rr = (self.rr + 1) % n;
                self.rr
            }
            QueueChoice::Class => class as usize % n,
        }
    }

    /// Send queue `q`'s datagram if it holds a frame.
    fn flush(&mut self, q: usize) -> std::io::Result<()> {
        if self.bufs[q].len() <= DG_HEAD {
            return Ok(());
        }
        Head {
            kind: DATA,
            queue: q as u8,
            queues: self.socks.len() as u8,
            stream: self.stream,
            seq: self.seq[q],
        }
        .write(&mut self.bufs[q]);
        self.seq[q] += 1;
        self.datagrams += 1;
        let r = match self.socks[q].send(&self.bufs[q]) {
            Ok(_) => Ok(()),
            // The kernel had no room: the datagram is lost like any other; its number
            // is used, so the receiver counts it.
            Err(e)
                if e.raw_os_error() == Some(nix::errno::Errno::ENOBUFS as i32)
                    || e.kind() == ErrorKind::WouldBlock =>
            {
                self.dropped += 1;
                Ok(())
            }
            Err(e) => Err(e),
        };
        self.bufs[q].truncate(DG_HEAD);
        r
    }

    /// What the run is told when the receiver went away.
    fn gone(&self, e: std::io::Error) -> String {
        let why = if e.kind() == ErrorKind::ConnectionRefused {
            "its port is unreachable (the netin is gone)".to_string()
        } else {
            e.to_string()
        };
        format!("the receiver {} went away mid-stream: {why}", self.peer)
    }
}

impl BlockOut for UdpOut {
    fn outlet(&mut self) -> &mut Outlet {
        &mut self.outlet
    }

    fn takes(&mut self, _t: &beltway::Tag, len: usize) -> bool {
        if DG_HEAD + HEAD + len > MAX_DGRAM {
            if self.oversize == 0 {
                self.oversize_first = Some(len);
            }
            self.oversize += 1;
            return false;
        }
        true
    }

    fn write(&mut self, _store: &Store, blocks: &mut [Outgoing<'_>]) -> Result<(), String> {
        let mut last: [Option<usize>; 256] = [None; 256];
        for b in blocks.iter() {
            let q = self.choose(b.tag.class);
            if self.bufs[q].len() + HEAD + b.data.len() > self.dgram {
                self.flush(q).map_err(|e| self.gone(e))?;
                last[q] = None;
            }
            last[q] = Some(self.bufs[q].len());
            self.bufs[q].extend_from_slice(&b.head_bytes());
            self.bufs[q].extend_from_slice(b.data);
        }
        // A batch's end sends what it filled (latency is bounded by the batch), its last
        // block on each queue marked: a receiver of one queue that lost nothing hands on
        // the sender's batches, as TCP's does.
        for q in 0..self.socks.len() {
            if let Some(at) = last[q] {
                if self.bufs[q].len() > at {
                    Header::new_unchecked(&mut self.bufs[q][at..at + HEAD]).set_frame(LAST);
                }
            }
            self.flush(q).map_err(|e| self.gone(e))?;
        }
        Ok(())
    }
}

impl Filter for UdpOut {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        self.send_batch(cx, batch);
        if let Some(len) = self.oversize_first.take() {
            cx.warn(format!(
                "netout proto=udp: a block of {len} bytes does not fit a datagram ({} at most); such blocks are dropped (proto=tcp carries any size)",
                MAX_DGRAM - DG_HEAD - HEAD
            ));
        }
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        if self.outlet.failed {
            return;
        }
        for q in 0..self.socks.len() {
            if let Err(e) = self.flush(q) {
                let why = self.gone(e);
                return self.outlet.fail(cx, why);
            }
        }
        let n = self.socks.len();
        let mut acked = vec![false; n];
        let t0 = Instant::now();
        let mut answer = [0u8; 64];
        while acked.iter().any(|a| !a) && t0.elapsed() < Duration::from_secs(2) {
            for q in (0..n).filter(|&q| !acked[q]) {
                let end = Head {
                    kind: END,
                    queue: q as u8,
                    queues: n as u8,
                    stream: self.stream,
                    seq: self.seq[q],
                }
                .bytes();
                let _ = self.socks[q].send(&end);
            }
            for q in 0..n {
                if acked[q] {
                    continue;
                }
                let _ =
                    self.socks[q].set_read_timeout(Some(Duration::from_millis(20 / n as u64 + 1)));
                match self.socks[q].recv(&mut answer) {
                    Ok(k) => {
                        if let Some(h) = Head::parse(&answer[..k]) {
                            if h.kind == END_ACK && h.stream == self.stream && h.queue as usize == q
                            {
                                acked[q] = true;
                            }
                        }
                    }
                    // Gone after our last datagram: nothing more to tell it.
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => acked[q] = true,
                    Err(_) => {}
                }
            }
        }
        if acked.iter().any(|a| !a) {
            cx.warn(format!(
                "the receiver {} did not confirm the end of the stream within 2 s",
                self.peer
            ));
        }
    }

    fn summary(&self) -> Option<String> {
        let mut s = format!(
            "netout: {} blocks, {} bytes to {} in {} datagrams on {} queues",
            self.outlet.blocks,
            self.outlet.bytes,
            self.peer,
            self.datagrams,
            self.socks.len()
        );
        if self.dropped > 0 {
            s += &format!(", {} dropped by the kernel", self.dropped);
        }
        if self.oversize > 0 {
            s += &format!(", {} blocks too big for a datagram", self.oversize);
        }
        Some(s)
    }
}

/// Per sender queue: what came and what should have.
#[derive(Debug, Default, Clone, Copy)]
struct QueueState {
    received: u64,
    /// One past the highest datagram number seen.
    next: u64,
    /// From END: how many the queue sent.
    end: Option<u64>,
}

/// The receiving end over UDP: a source.
pub struct UdpIn {
    socks: Vec<UdpSocket>,
    at: String,
    idle: Duration,
    buf: Vec<u8>,
    /// The sender this receiver serves (its stream number and address), once it greeted
    /// or sent.
    stream: Option<u32>,
    peer: Option<SocketAddr>,
    queues: Vec<QueueState>,
    next_sock: usize,
    last: Instant,
    ended: bool,
    /// Blocks taken in, with their metadata.
    inlet: Inlet,
    malformed: u64,
    foreign: u64,
}

impl UdpIn {
    /// Bind `queues` sockets to `bind`:`port` with `SO_REUSEPORT`, asking each for a
    /// receive buffer of `rcvbuf` bytes.
    pub fn listen(
        bind: &str,
        port: u16,
        queues: usize,
        rcvbuf: usize,
        idle: Duration,
    ) -> Result<UdpIn, String> {
        if !(1..=64).contains(&queues) {
            return Err(format!("queues={queues}: between 1 and 64"));
        }
        let at = format!("{bind}:{port}");
        let addr = resolve(&at)?;
        let e = |what: &str, err: nix::Error| format!("cannot listen on {at} (UDP): {what}: {err}");
        let mut socks = Vec::with_capacity(queues);
        for _ in 0..queues {
            let fam = if addr.is_ipv4() {
                AddressFamily::Inet
            } else {
                AddressFamily::Inet6
            };
            let fd = nsock::socket(
                fam,
                SockType::Datagram,
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
                None,
            )
            .map_err(|x| e("socket", x))?;
            nsock::setsockopt(&fd, sockopt::ReusePort, &true).map_err(|x| e("SO_REUSEPORT", x))?;
            // Root may exceed net.core.rmem_max; anyone else gets what the sysctl allows.
            if nsock::setsockopt(&fd, sockopt::RcvBufForce, &rcvbuf).is_err() {
                let _ = nsock::setsockopt(&fd, sockopt::RcvBuf, &rcvbuf);
            }
            let sa = nsock::SockaddrStorage::from(addr);
            nsock::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &sa).map_err(|x| e("bind", x))?;
            socks.push(UdpSocket::from(fd));
        }
        Ok(UdpIn {
            socks,
            at,
            idle,
            buf: vec![0; 65536],
            stream: None,
            peer: None,
            queues: Vec::new(),
            next_sock: 0,
            last: Instant::now(),
            ended: false,
            inlet: Inlet::default(),
            malformed: 0,
            foreign: 0,
        })
    }

    /// Datagrams lost so far (and sent so far), over all the sender's queues.
    pub fn loss(&self) -> (u64, u64) {
        self.queues.iter().fold((0, 0), |(l, s), q| {
            let sent = q.end.unwrap_or(q.next).max(q.received);
            (l + (sent - q.received), s + sent)
        })
    }

    fn sender(&self) -> String {
        self.peer.map_or("no sender".into(), |p| p.to_string())
    }

    /// Take one datagram from socket `i`.
    /// Returns whether the datagram ended one of the sender's batches.
    fn handle(
        &mut self,
        cx: &mut Ctx<'_>,
        i: usize,
        n: usize,
        src: SocketAddr,
        out: &mut Batch,
    ) -> bool {
        let Some(h) = Head::parse(&self.buf[..n]) else {
            if self.malformed == 0 {
                cx.warn(format!(
                    "on {} (UDP): a datagram from {src} is not a netout's ({n} bytes); ignored, and counted",
                    self.at
                ));
            }
            self.malformed += 1;
            return false;
        };
        match self.stream {
            // Only a greeting starts a stream: a stray datagram cannot take the channel.
            None if h.kind == HELLO => {
                self.stream = Some(h.stream);
                self.peer = Some(src);
            }
            None => {
                if self.foreign == 0 {
                    cx.warn(format!(
                        "on {} (UDP): {src} sent before any sender greeted; ignored, and counted",
                        self.at
                    ));
                }
                self.foreign += 1;
                return false;
            }
            Some(s) if s != h.stream => {
                if h.kind == HELLO {
                    let busy = Head { kind: BUSY, ..h }.bytes();
                    let _ = self.socks[i].send_to(&busy, src);
                }
                if self.foreign == 0 {
                    cx.warn(format!(
                        "on {} (UDP): {src} sends as a second sender; it is refused (one sender a netin)",
                        self.at
                    ));
                }
                self.foreign += 1;
                return false;
            }
            Some(_) => {}
        }
        self.last = Instant::now();
        let q = h.queue as usize;
        if h.kind != HELLO && (h.queues == 0 || q >= h.queues as usize) {
            self.malformed += 1;
            return false;
        }
        if self.queues.len() < h.queues as usize {
            self.queues.resize(h.queues as usize, QueueState::default());
        }
        match h.kind {
            HELLO => {
                let welcome = Head { kind: WELCOME, ..h }.bytes();
                let _ = self.socks[i].send_to(&welcome, src);
            }
            END => {
                let ack = Head { kind: END_ACK, ..h }.bytes();
                let _ = self.socks[i].send_to(&ack, src);
                self.queues[q].end = Some(h.seq);
                // Each queue's datagrams come in order on one socket (one 4-tuple), so
                // its END comes after all of them that were not lost.
                self.ended = self.queues.iter().all(|s| s.end.is_some());
            }
            DATA => {
                let st = &mut self.queues[q];
                st.received += 1;
                st.next = st.next.max(h.seq + 1);
                let mut at = DG_HEAD;
                let mut batch_end = false;
                while at < n {
                    // Bytes after the last whole frame that are not a frame, or a frame
                    // longer than the datagram: counted, the rest of it ignored.
                    let f = match frame_at(&self.buf[at..n]) {
                        Ok(f) if at + HEAD + f.len as usize <= n => f,
                        _ => {
                            self.malformed += 1;
                            break;
                        }
                    };
                    let len = f.len as usize;
                    let t =
                        self.inlet
                            .admit(cx, &f, &self.buf[at + HEAD..at + HEAD + len], f.class);
                    out.push(t);
                    at += HEAD + len;
                    batch_end = f.frame & LAST != 0;
                }
                return batch_end;
            }
            _ => self.malformed += 1,
        }
        false
    }

    /// The stream failed: it has ended, and the run is told `why` ([`BlockIn::pull_in`]).
    fn stop(&mut self, why: String) -> Result<bool, String> {
        self.ended = true;
        Err(why)
    }
}

impl BlockIn for UdpIn {
    fn ended(&self) -> bool {
        self.ended
    }

    /// The sockets (readable when a datagram came), and the sender's silence limit.
    fn wait(&mut self, w: &mut crate::readiness::Arm<'_>) {
        for s in &self.socks {
            w.fd(s.as_fd());
        }
        if self.stream.is_some() && !self.queues.is_empty() {
            w.deadline(self.last + self.idle);
        }
    }

    fn receive(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> Result<bool, String> {
        if self.ended {
            return Ok(false);
        }
        loop {
            // f(n): the sockets in turn, each drained before the next, no system call
            // beyond the reads while any has something.
            let n = self.socks.len();
            let mut empty = 0;
            let mut batch_end = false;
            while empty < n && out.len() < max && !self.ended {
                let i = self.next_sock;
                let mut buf = std::mem::take(&mut self.buf);
                let r = self.socks[i].recv_from(&mut buf);
                self.buf = buf;
                match r {
                    Ok((len, src)) => {
                        empty = 0;
                        if self.handle(cx, i, len, src, out) && !out.is_empty() {
                            batch_end = true;
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        empty += 1;
                        self.next_sock = (i + 1) % n;
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::Interrupted | ErrorKind::ConnectionRefused
                        ) => {}
                    Err(e) => {
                        let why = format!("on {} (UDP): cannot receive: {e}", self.at);
                        return self.stop(why);
                    }
                }
            }
            if self.ended {
                let (lost, sent) = self.loss();
                if lost > 0 {
                    cx.warn(format!(
                        "on {} (UDP): {lost} of {sent} datagrams from {} were lost ({:.2}%; UDP is lossy, proto=tcp is not)",
                        self.at,
                        self.sender(),
                        100.0 * lost as f64 / sent.max(1) as f64
                    ));
                }
                return Ok(!out.is_empty());
            }
            let mut fds: Vec<_> = self
                .socks
                .iter()
                .map(|s| nix::poll::PollFd::new(s.as_fd(), nix::poll::PollFlags::POLLIN))
                .collect();
            if !out.is_empty() {
                // Part of a sender's batch: wait for the rest, so batches here are the
                // sender's (a `+` after netin passes its branches' blocks batch by batch:
                // other cuts would give another order than on one host). The sender sends
                // a batch back to back; the wait is long enough for a loaded machine to
                // finish it (5 ms was not: a descheduled sender cut batches), and costs
                // only when the batch's last datagram was lost.
                if batch_end
                    || out.len() >= max
                    || nix::poll::poll(&mut fds, BATCH_REST_MS).unwrap_or(0) == 0
                {
                    return Ok(true);
                }
                continue;
            }
            // Nothing on any socket: the space sleeps on them (`arm`), until the sender's
            // silence limit at the latest.
            if self.stream.is_some() && !self.queues.is_empty() && self.last.elapsed() >= self.idle
            {
                let (lost, sent) = self.loss();
                let why = format!(
                    "on {} (UDP): the sender {} went silent for {:.1} s without ending its stream (killed, or its host gone?); {lost} of {sent} datagrams lost",
                    self.at,
                    self.sender(),
                    self.idle.as_secs_f64()
                );
                return self.stop(why);
            }
            return Ok(true);
        }
    }
}

impl Filter for UdpIn {
    crate::block_in_source!();

    fn summary(&self) -> Option<String> {
        let (lost, sent) = self.loss();
        let mut s = format!(
            "netin: {} blocks, {} bytes from {} over UDP on {} queues, {lost} of {sent} datagrams lost",
            self.inlet.blocks,
            self.inlet.bytes,
            self.sender(),
            self.socks.len()
        );
        if self.malformed > 0 {
            s += &format!(", {} malformed", self.malformed);
        }
        if self.foreign > 0 {
            s += &format!(", {} from other senders refused", self.foreign);
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_head_reads_back() {
        let h = Head {
            kind: END,
            queue: 3,
            queues: 4,
            stream: 0xdead_beef,
            seq: 1 << 40,
        };
        assert_eq!(Head::parse(&h.bytes()), Some(h));
        assert_eq!(Head::parse(&h.bytes()[..19]), None);
        let mut b = h.bytes();
        b[0] = b'X';
        assert_eq!(Head::parse(&b), None);
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_are_refused(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Some(h) = Head::parse(&b) {
                prop_assert_eq!(&b[..4], &MAGIC[..]);
                prop_assert!(h.kind <= END_ACK);
            }
        }

        #[test]
        fn loss_is_what_never_came(sent in proptest::collection::vec(0u64..200, 1..5), drop_mask in any::<u64>()) {
            let mut u = UdpIn {
                socks: Vec::new(), at: String::new(), idle: Duration::from_secs(1), buf: Vec::new(),
                stream: Some(1), peer: None, queues: vec![QueueState::default(); sent.len()],
                next_sock: 0, last: Instant::now(), ended: false,
                inlet: Inlet::default(), malformed: 0, foreign: 0,
            };
            let mut lost = 0;
            for (q, &n) in sent.iter().enumerate() {
                for s in 0..n {
                    if (drop_mask >> ((s + q as u64) % 64)) & 1 == 1 { lost += 1; continue; }
                    u.queues[q].received += 1;
                    u.queues[q].next = u.queues[q].next.max(s + 1);
                }
                u.queues[q].end = Some(n);
            }
            prop_assert_eq!(u.loss(), (lost, sent.iter().sum::<u64>()));
        }
    }
}
