//! The lossless transport: TCP, the sender's batches kept, credits.
//!
//! # Wire format
//!
//! The sender opens the connection with an 8-byte greeting (`SLNET`, 0, version 2, 0);
//! the receiver answers with the same greeting and its window (u64, bytes). Then a batch
//! of blocks is one write of frames (see the parent module). A frame with `len` = `END` ends the
//! stream: a connection that closes without it was cut (a peer killed, a host gone), and
//! the run says so, naming the peer.
//!
//! # Flow control: credits
//!
//! The sender may have at most a window of frame bytes the receiver has not yet taken
//! into its store; the receiver gives bytes back (a u64 on the same connection) as it
//! takes them, a quarter of the window at a time. The sender sends a batch in chunks of
//! at most half the window, each when it fits, so a batch bigger than the window streams.
//! The receiver hands a batch on when all of it has come, so its store holds at most one
//! sender batch beyond the window. A slow receiver slows the sender (its pipeline not
//! pulling, nothing is taken); nothing buffers without bound (the kernel's socket buffers
//! come on top, a fixed amount).
//!
use super::{frame_at, HEAD};
use crate::filter::{Batch, Ctx, Filter};
use crate::store::Store;
use crate::transport::{
    BlockIn, BlockOut, HeaderError, Inlet, Outgoing, Outlet, END_OF_STREAM, LAST,
};
use std::io::IoSlice;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Version 2: frames are block headers (`protocol::block`); version 1 had a header of its own.
const GREETING: [u8; 8] = *b"SLNET\x00\x02\x00";
/// `len` of the frame that ends the stream.
const END: u32 = END_OF_STREAM;
/// The largest block a receiver takes.
pub const MAX_BLOCK: usize = 16 << 20;
/// Default window (bytes in flight).
pub const DEFAULT_WINDOW: u64 = 4 << 20;
/// The receiver's staging area (grown for a small frame bigger than a quarter of it).
const STAGE: usize = 2 << 20;
/// Blocks at least this big are read straight into their place in the store once their
/// head has come (no copy out of the staging area).
const DIRECT: usize = 16 << 10;

/// The sending end: a sink.
pub struct NetOut {
    sock: TcpStream,
    peer: String,
    window: u64,
    /// Frame bytes sent and not yet given back, and the most there ever were.
    outstanding: u64,
    peak: u64,
    /// Times the sender waited for credits (the receiver was slower).
    waits: u64,
    /// The heads of the batch being sent (its blocks' bytes go from where they are).
    heads: Vec<[u8; HEAD]>,
    credit: [u8; 8],
    have: usize,
    /// Blocks and bytes sent; whether the receiver went away.
    outlet: Outlet,
}

impl NetOut {
    /// Connect to the `netin` at `to` (HOST:PORT), trying again while it refuses for up
    /// to `wait` (the receiver may start a moment later).
    pub fn connect(to: &str, wait: Duration) -> Result<NetOut, String> {
        let addrs: Vec<_> = to
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {to}: {e}"))?
            .collect();
        let Some(addr) = addrs.first().copied() else {
            return Err(format!("{to} resolves to no address"));
        };
        let t0 = Instant::now();
        let sock = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
                Ok(s) => break s,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused && t0.elapsed() < wait => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                    return Err(format!(
                        "cannot connect to {to}: connection refused (is a `netin port={}` running there?)",
                        addr.port()
                    ))
                }
                Err(e) => return Err(format!("cannot connect to {to}: {e}")),
            }
        };
        let _ = sock.set_nodelay(true);
        let peer = format!("{to} ({addr})");
        let mut s = sock;
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| format!("{peer}: {e}"))?;
        s.write_all(&GREETING)
            .map_err(|e| format!("{peer}: cannot greet: {e}"))?;
        let mut answer = [0u8; 16];
        s.read_exact(&mut answer)
            .map_err(|e| format!("{peer} did not answer as a netin does: {e}"))?;
        if answer[..8] != GREETING {
            return Err(format!(
                "{peer} is not a netin (it answered {:?})",
                &answer[..8]
            ));
        }
        let window = u64::from_le_bytes(answer[8..].try_into().expect("8 bytes")).max(1 << 16);
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(|e| format!("{peer}: {e}"))?;
        Ok(NetOut {
            sock: s,
            peer,
            window,
            outstanding: 0,
            peak: 0,
            waits: 0,
            heads: Vec::new(),
            credit: [0; 8],
            have: 0,
            outlet: Outlet::default(),
        })
    }

    /// Take the credits the receiver has sent; with `block`, wait (in slices, so a dead
    /// receiver is noticed) until some come.
    fn take_credits(&mut self, block: bool) -> std::io::Result<()> {
        loop {
            // Without `block`, a peek at what has come (MSG_DONTWAIT: no mode switch of
            // the socket); with it, a read that waits up to the socket's read timeout
            // (200 ms, set at connect), again and again, so a dead receiver is noticed.
            let r = if block {
                self.sock.read(&mut self.credit[self.have..])
            } else {
                nix::sys::socket::recv(
                    self.sock.as_raw_fd(),
                    &mut self.credit[self.have..],
                    nix::sys::socket::MsgFlags::MSG_DONTWAIT,
                )
                .map_err(std::io::Error::from)
            };
            match r {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "the receiver closed the connection",
                    ))
                }
                Ok(n) => {
                    self.have += n;
                    if self.have == 8 {
                        self.have = 0;
                        let back = u64::from_le_bytes(self.credit);
                        self.outstanding = self.outstanding.saturating_sub(back);
                        if block {
                            return Ok(());
                        }
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if !block {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Wait until `need` more bytes fit the receiver's window.
    fn room(&mut self, need: u64) -> std::io::Result<()> {
        self.take_credits(false)?;
        if self.outstanding > 0 && self.outstanding + need > self.window {
            self.waits += 1;
        }
        while self.outstanding > 0 && self.outstanding + need > self.window {
            self.take_credits(true)?;
        }
        self.outstanding += need;
        self.peak = self.peak.max(self.outstanding);
        Ok(())
    }

    /// What the run is told when the receiver went away.
    fn gone(&self, e: std::io::Error) -> String {
        format!("the receiver {} went away mid-stream: {e}", self.peer)
    }
}

impl BlockOut for NetOut {
    fn outlet(&mut self) -> &mut Outlet {
        &mut self.outlet
    }

    /// Gather writes (at most IOV_MAX pieces a call): each block's head, then its bytes
    /// where they lie; nothing copied on our side.
    fn write(&mut self, _store: &Store, blocks: &mut [Outgoing<'_>]) -> Result<(), String> {
        if let Some(last) = blocks.last_mut() {
            last.head.frame |= LAST;
        }
        self.heads.clear();
        self.heads.extend(blocks.iter().map(|b| b.head_bytes()));
        // In chunks of at most half the window, each sent when it fits: a batch bigger
        // than the window streams instead of waiting for the receiver to drain.
        let chunk_max = (self.window / 2).max(1);
        let mut from = 0;
        while from < blocks.len() {
            let (mut to, mut bytes) = (from, 0u64);
            while to < blocks.len()
                && (to == from || bytes + (HEAD + blocks[to].data.len()) as u64 <= chunk_max)
            {
                bytes += (HEAD + blocks[to].data.len()) as u64;
                to += 1;
            }
            let r = self.room(bytes).and_then(|_| {
                let mut slices = Vec::with_capacity(2 * (to - from));
                for (h, b) in self.heads[from..to].iter().zip(&blocks[from..to]) {
                    slices.push(IoSlice::new(h));
                    slices.push(IoSlice::new(b.data));
                }
                write_all_vectored(&mut self.sock, &mut slices)
            });
            r.map_err(|e| self.gone(e))?;
            from = to;
        }
        Ok(())
    }
}

impl Filter for NetOut {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        self.send_batch(cx, batch);
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        if self.outlet.failed {
            return;
        }
        let end = crate::transport::Fields {
            len: END,
            ..Default::default()
        }
        .encode();
        let r = self.room(HEAD as u64).and_then(|_| {
            self.sock.write_all(&end)?;
            self.sock.shutdown(Shutdown::Write)?;
            // Wait for the receiver to close: it has then taken every frame.
            self.sock.set_read_timeout(Some(Duration::from_secs(10)))?;
            let mut sink = [0u8; 64];
            loop {
                match self.sock.read(&mut sink) {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        });
        if let Err(e) = r {
            let why = self.gone(e);
            self.outlet.fail(cx, why);
        }
    }

    fn summary(&self) -> Option<String> {
        Some(format!(
            "netout: {} blocks, {} bytes to {}; at most {} bytes in flight (window {}), {} waits for credit",
            self.outlet.blocks, self.outlet.bytes, self.peer, self.peak, self.window, self.waits
        ))
    }
}

/// `write_all` for a gather list (std's is unstable), at most `IOV_MAX` (1024) pieces a call.
fn write_all_vectored(sock: &mut TcpStream, mut bufs: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match sock.write_vectored(&bufs[..bufs.len().min(1024)]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The receiving end: a source.
pub struct NetIn {
    listener: Option<TcpListener>,
    sock: Option<TcpStream>,
    at: String,
    peer: String,
    window: u64,
    /// Bytes read and not yet handed on: `buf[start..end]` (`buf` is a fixed staging
    /// area, grown only for a block bigger than it; no zeroing, no shifting per read).
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The sender's current batch so far: blocks in the store.
    pending: Vec<beltway::Tag>,
    /// A big block being read straight into its place in the store: its tag, the bytes
    /// in it so far, whether it ends the sender's batch.
    partial: Option<(beltway::Tag, usize, bool)>,
    /// Bytes handed on, not yet given back as credit.
    taken: u64,
    ended: bool,
    /// Blocks taken in, with their metadata.
    inlet: Inlet,
}

impl NetIn {
    /// Listen on `bind`:`port` for one sender.
    pub fn listen(bind: &str, port: u16, window: u64) -> Result<NetIn, String> {
        let l = TcpListener::bind((bind, port))
            .map_err(|e| format!("cannot listen on {bind}:{port}: {e}"))?;
        l.set_nonblocking(true)
            .map_err(|e| format!("cannot listen on {bind}:{port}: {e}"))?;
        Ok(NetIn {
            listener: Some(l),
            sock: None,
            at: format!("{bind}:{port}"),
            peer: String::new(),
            window: window.max(1 << 16),
            buf: Vec::new(),
            start: 0,
            end: 0,
            pending: Vec::new(),
            partial: None,
            taken: 0,
            ended: false,
            inlet: Inlet::default(),
        })
    }

    /// Accept the sender if one is waiting (never waits: the space sleeps on the
    /// listener, see `arm`) and greet it.
    fn accept(&mut self) -> Result<bool, String> {
        let Some(l) = &self.listener else {
            return Ok(true);
        };
        let (mut s, addr) = match l.accept() {
            Ok(x) => x,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                return Ok(false)
            }
            Err(e) => return Err(format!("on {}: cannot accept: {e}", self.at)),
        };
        self.peer = addr.to_string();
        let greet = |s: &mut TcpStream| -> std::io::Result<()> {
            s.set_nonblocking(false)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut g = [0u8; 8];
            s.read_exact(&mut g)?;
            if g != GREETING {
                return Err(std::io::Error::new(
                    ErrorKind::InvalidData,
                    format!("it greeted with {g:?}, not as a netout does"),
                ));
            }
            s.write_all(&GREETING)?;
            s.write_all(&self.window.to_le_bytes())?;
            // From here on reads never wait (`recv_now`): the space sleeps on the socket.
            s.set_read_timeout(None)
        };
        greet(&mut s).map_err(|e| format!("on {}: the sender {}: {e}", self.at, self.peer))?;
        self.sock = Some(s);
        self.listener = None;
        Ok(true)
    }

    /// Take what `buf` holds: whole frames become blocks of the sender's current batch
    /// (`pending`); a big block whose bytes are still coming gets its place in the store
    /// now (`partial`), so the rest is read straight into it. Returns whether the batch is
    /// complete (its last block, `max` blocks, or the end of the stream).
    fn parse(&mut self, cx: &mut Ctx<'_>, max: usize) -> Result<bool, String> {
        loop {
            if self.partial.is_some() {
                // Bytes of the partial block already staged go to it first.
                let avail = self.end - self.start;
                if avail > 0 {
                    let (t, filled, _) = self.partial.as_mut().expect("checked");
                    let n = avail.min(t.len as usize - *filled);
                    let (dst, _) = cx.store.writable(t, true).map_err(|e| e.to_string())?;
                    dst[*filled..*filled + n]
                        .copy_from_slice(&self.buf[self.start..self.start + n]);
                    *filled += n;
                    self.start += n;
                }
                let (t, filled, last) = self.partial.expect("checked");
                if filled < t.len as usize {
                    return Ok(false);
                }
                self.partial = None;
                if self.complete(t, last, max) {
                    return Ok(true);
                }
                continue;
            }
            let f = match frame_at(&self.buf[self.start..self.end]) {
                Ok(f) => f,
                Err(HeaderError::Truncated { .. }) => return Ok(false),
                Err(e) => {
                    return Err(format!(
                        "the sender {} sent a frame that is not one ({e}); the stream is corrupt",
                        self.peer
                    ))
                }
            };
            if f.len == END {
                self.ended = true;
                self.start += HEAD;
                self.taken += HEAD as u64;
                return Ok(true);
            }
            let len = f.len as usize;
            if len > MAX_BLOCK {
                return Err(format!(
                    "the sender {} sent a block of {len} bytes, more than netin takes ({MAX_BLOCK}); the stream is corrupt",
                    self.peer
                ));
            }
            let last = f.frame & LAST != 0;
            let staged = self.end - self.start - HEAD;
            if staged >= len {
                let at = self.start + HEAD;
                let t = self.inlet.admit(cx, &f, &self.buf[at..at + len], f.class);
                self.start = at + len;
                if self.complete(t, last, max) {
                    return Ok(true);
                }
            } else if len >= DIRECT {
                // Its place in the store now; the bytes follow (staged ones first).
                let t = self.inlet.reserve(cx, &f, len);
                self.start += HEAD;
                self.partial = Some((t, 0, last));
            } else {
                return Ok(false);
            }
        }
    }

    /// A whole block of the current batch; whether the batch is complete.
    fn complete(&mut self, t: beltway::Tag, last: bool, max: usize) -> bool {
        // Its frame has left the socket and the staging area: credit for it (the store
        // holds at most the sender's batch until it is handed on).
        self.taken += (HEAD + t.len as usize) as u64;
        self.pending.push(t);
        last || self.pending.len() >= max
    }
}

/// Read what the socket holds now, without waiting (the socket itself stays blocking, for
/// the credits written back).
fn recv_now(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    use nix::sys::socket::{recv, MsgFlags};
    recv(s.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT).map_err(std::io::Error::from)
}

impl BlockIn for NetIn {
    fn ended(&self) -> bool {
        self.ended
    }

    fn wait(&mut self, w: &mut crate::readiness::Arm<'_>) {
        use std::os::fd::AsFd;
        if let Some(s) = &self.sock {
            // Whole frames already staged (more than a batch came at once) go first.
            let staged = &self.buf[self.start..self.end];
            // (A frame that is not one: the pull says so.)
            let whole = match frame_at(staged) {
                Ok(f) => f.len == END || staged.len() - HEAD >= f.len as usize,
                Err(HeaderError::Truncated { .. }) => false,
                Err(HeaderError::Invalid { .. }) => true,
            };
            if !staged.is_empty() && (self.partial.is_some() || whole) {
                w.ready();
            } else {
                w.fd(s.as_fd());
            }
        } else if let Some(l) = &self.listener {
            w.fd(l.as_fd());
        } else {
            w.ready();
        }
    }

    fn receive(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> Result<bool, String> {
        if self.sock.is_none() && !self.accept()? {
            return Ok(true);
        }
        loop {
            match self.parse(cx, max) {
                Ok(true) => {
                    for t in self.pending.drain(..) {
                        out.push(t);
                    }
                }
                Ok(false) => {}
                Err(why) => return Err(format!("on {}: {why}", self.at)),
            }
            if self.start == self.end {
                (self.start, self.end) = (0, 0);
            }
            if self.taken >= self.window / 4 || (self.ended && self.taken > 0) {
                let back = self.taken.to_le_bytes();
                self.taken = 0;
                if let Some(s) = self.sock.as_mut() {
                    // A sender that ended may have closed already: nothing to tell it.
                    if let Err(e) = s.write_all(&back) {
                        if !self.ended {
                            return Err(format!(
                                "on {}: the sender {} went away mid-stream: {e}",
                                self.at, self.peer
                            ));
                        }
                    }
                }
            }
            if self.ended {
                self.sock = None;
                return Ok(!out.is_empty());
            }
            if !out.is_empty() {
                return Ok(true);
            }
            let Some(s) = self.sock.as_mut() else {
                return Ok(false);
            };
            // Into the partial block's place (the staging area is empty then: `parse`
            // moved what it held), else into the staging area.
            let r = match self.partial.as_mut() {
                Some((t, filled, _)) => match cx.store.writable(t, true) {
                    Ok((dst, _)) => recv_now(s, &mut dst[*filled..]).inspect(|&n| *filled += n),
                    Err(e) => return Err(format!("on {}: {e}", self.at)),
                },
                None => {
                    // Room: what is left of the staging area, after moving an unfinished
                    // frame to its front when little is; grown (once) for a small frame
                    // that does not fit.
                    if self.buf.len() - self.end < STAGE / 4 {
                        self.buf.copy_within(self.start..self.end, 0);
                        (self.start, self.end) = (0, self.end - self.start);
                        if self.buf.len() - self.end < STAGE / 4 {
                            let grown = (self.buf.len() * 2).max(STAGE);
                            self.buf.resize(grown, 0);
                        }
                    }
                    recv_now(s, &mut self.buf[self.end..]).inspect(|&n| self.end += n)
                }
            };
            match r {
                Ok(0) => {
                    return Err(format!(
                        "on {}: the sender {} went away without ending the stream ({} bytes of an unfinished block; was it killed?)",
                        self.at, self.peer, self.end - self.start + self.partial.map_or(0, |p| p.1)
                    ));
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    return Ok(true);
                }
                Err(e) => {
                    return Err(format!(
                        "on {}: the sender {} went away mid-stream: {e}",
                        self.at, self.peer
                    ));
                }
            }
        }
    }
}

impl Filter for NetIn {
    crate::block_in_source!();

    fn summary(&self) -> Option<String> {
        Some(format!(
            "netin: {} blocks, {} bytes from {}",
            self.inlet.blocks,
            self.inlet.bytes,
            if self.peer.is_empty() {
                "no sender"
            } else {
                &self.peer
            }
        ))
    }
}
