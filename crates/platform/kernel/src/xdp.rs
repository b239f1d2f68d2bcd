//! Live capture with AF_XDP (through `xsk-rs`, which uses libxdp and loads its default XDP
//! program redirecting the queue to our socket). Our own UMEM is the data ring: the
//! kernel writes frames into UMEM chunks we lend it through the fill ring, the RX ring
//! tells us which chunks hold frames, and we lend them back once read. Copy mode where
//! the driver offers no zero-copy (veth, generic XDP).
//!
//! Owns: socket and UMEM setup, chunk ownership (lent to the kernel through the fill ring
//! or held by us between `next_batch` and `recycle`), frame positions (absolute:
//! `generation * UMEM size + offset`, one generation per batch, so a position names one
//! frame for the life of the socket) and read access to the chunks of the batch we hold
//! ([`XdpRx::get`], which refuses positions of earlier generations). The `unsafe` here:
//! the xsk-rs calls whose contract is chunk ownership, and the slice into the UMEM, each
//! with a `// SAFETY:` comment.
//!
//! Reading held chunks is sound by construction ([`crate::LentMemory`]): [`XdpRx::get`]
//! borrows the socket shared, while [`XdpRx::recycle`] and [`XdpRx::next_batch`] (which
//! recycles first) take it exclusively, so no slice of a chunk outlives the chunk's
//! return to the kernel. The socket owns the UMEM outright (no shared view of it).

#![allow(unsafe_code)]

use std::io;
use std::num::NonZeroU32;
use std::time::Duration;
use xsk_rs::config::{
    BindFlags, FrameSize, Interface, QueueSize, SocketConfig, UmemConfig, XdpFlags,
};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

/// How to set up the socket.
#[derive(Debug, Clone, Copy)]
pub struct XdpConfig {
    /// The interface's queue to bind.
    pub queue: u32,
    /// UMEM chunks (2 KiB each); a power of two.
    pub frames: u32,
    /// Force generic (SKB) XDP instead of letting libxdp pick the driver mode.
    pub skb_mode: bool,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            queue: 0,
            frames: 16384,
            skb_mode: false,
        }
    }
}

/// Bytes per UMEM chunk.
const CHUNK: usize = 2048;

/// The UMEM's mapping and which of its chunks user space holds (owned by [`XdpRx`]).
#[derive(Debug)]
struct UmemView {
    /// Keeps the mapping alive.
    _umem: Umem,
    base: *const u8,
    len: usize,
    /// Per chunk: the generation of the batch in which user space holds it, 0 while it is
    /// the kernel's or spare. Every batch gets a new generation, so positions of an
    /// earlier batch, whose chunks may hold other frames by now, are refused. Plain
    /// memory: only `&mut XdpRx` changes it, so no reader (`&XdpRx`) sees it change.
    held: Box<[u64]>,
}

// SAFETY: the mapping is owned through `_umem` (itself Send) and lives until drop,
// whichever thread that is on; `base` points into it.
unsafe impl Send for UmemView {}

/// An AF_XDP socket bound to one queue of an interface, with its UMEM.
pub struct XdpRx {
    view: UmemView,
    rx: RxQueue,
    fq: FillQueue,
    _tx: TxQueue,
    _cq: CompQueue,
    /// Chunks we hold and have not lent to the kernel.
    spare: Vec<FrameDesc>,
    /// Chunks of the last batch (held until `recycle`).
    held: Vec<FrameDesc>,
    scratch: Vec<FrameDesc>,
    fill_size: u32,
    /// Frames per second seen while gathering (moving average), to size the sleeps.
    rate: f64,
    /// Batches handed out so far (the last one's generation).
    generation: u64,
}

fn err(
    what: &str,
    e: impl std::fmt::Display,
    source: Option<&(dyn std::error::Error + 'static)>,
) -> io::Error {
    let detail = source.map(|s| format!(": {s}")).unwrap_or_default();
    let hint = if detail.contains("Operation not permitted") {
        " (AF_XDP needs CAP_NET_RAW and CAP_BPF or CAP_SYS_ADMIN: run as root)"
    } else {
        ""
    };
    io::Error::other(format!("{what}: {e}{detail}{hint}"))
}

/// Frames the kernel could not hand to an AF_XDP socket, by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpDrops {
    /// The RX ring was full: we did not take frames fast enough.
    pub ring_full: u64,
    /// The fill ring was empty: no chunk lent to copy a frame into (for copy mode this
    /// counts frames dropped for want of a chunk).
    pub fill_empty: u64,
    /// Dropped for other reasons (and invalid descriptors).
    pub other: u64,
}

impl XdpDrops {
    pub fn total(&self) -> u64 {
        self.ring_full + self.fill_empty + self.other
    }
}

/// The shortest gathering sleep (the longest is what is left of the latency bound).
pub const GATHER_STEP: Duration = Duration::from_micros(200);

impl XdpRx {
    /// A duplicate of the socket's descriptor: readable while its RX ring holds frames
    /// (what a space's readiness handle waits on instead of a timed `poll`).
    pub fn dup_fd(&self) -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: dup of the socket's open descriptor (owned by `self.rx` for as long as
        // this call borrows it); the new descriptor is ours alone and owned at once.
        let fd = unsafe { libc::fcntl(self.rx.fd().as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by fcntl(F_DUPFD_CLOEXEC) and nothing else owns it.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// Bind an AF_XDP socket to `dev`'s queue, in copy mode.
    pub fn open(dev: &str, cfg: XdpConfig) -> io::Result<XdpRx> {
        crate::afpacket::ifindex(dev)?;
        if !cfg.frames.is_power_of_two() || cfg.frames < 64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("AF_XDP: frames={} must be a power of two >= 64", cfg.frames),
            ));
        }
        // The fill ring holds half the chunks; the rest are spare for batches we hold.
        let fill_size = cfg.frames / 2;
        let ucfg = UmemConfig::builder()
            .frame_size(FrameSize::new(CHUNK as u32).map_err(|e| err("UMEM frame size", e, None))?)
            .fill_queue_size(QueueSize::new(fill_size).map_err(|e| err("fill ring size", e, None))?)
            .comp_queue_size(QueueSize::new(64).map_err(|e| err("completion ring size", e, None))?)
            .build()
            .map_err(|e| err("UMEM config", e, None))?;
        let count = NonZeroU32::new(cfg.frames).expect("checked above");
        let (umem, descs) = Umem::new(ucfg, count, false).map_err(|e| {
            let s = std::error::Error::source(&e);
            err("creating the UMEM", &e, s)
        })?;
        let mut flags = XdpFlags::empty();
        if cfg.skb_mode {
            flags |= XdpFlags::XDP_FLAGS_SKB_MODE;
        }
        let scfg = SocketConfig::builder()
            .rx_queue_size(QueueSize::new(fill_size).map_err(|e| err("RX ring size", e, None))?)
            .xdp_flags(flags)
            .bind_flags(BindFlags::XDP_COPY)
            .build();
        let ifname: Interface = dev.parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface name '{dev}' contains NUL"),
            )
        })?;
        // SAFETY: the UMEM is not shared with any other socket, so the libxdp program
        // load is ours to do (the contract concerns shared UMEMs only).
        let (tx, rx, fq_cq) =
            unsafe { Socket::new(scfg, &umem, &ifname, cfg.queue) }.map_err(|e| {
                let s = std::error::Error::source(&e);
                err(
                    &format!("AF_XDP socket on {dev} queue {}", cfg.queue),
                    &e,
                    s,
                )
            })?;
        let (mut fq, cq) =
            fq_cq.ok_or_else(|| io::Error::other("AF_XDP: no fill ring for a fresh UMEM"))?;
        // The base of the mapping: chunk 0's data segment minus its offset.
        let first = descs
            .first()
            .copied()
            .ok_or_else(|| io::Error::other("AF_XDP: an empty UMEM"))?;
        // SAFETY: `first` describes a chunk of this UMEM that nobody has lent out yet.
        let p = unsafe { umem.data(&first) }.contents().as_ptr();
        let base = p.wrapping_sub(first.addr());
        let len = cfg.frames as usize * CHUNK;
        let (lend, spare) = descs.split_at(fill_size as usize);
        // SAFETY: these chunks belong to this UMEM and are not lent anywhere else; they
        // stay the kernel's until they come back through the RX ring. Not more than the
        // fill ring holds (else it takes none).
        let lent = unsafe { fq.produce(lend) };
        if lent != lend.len() {
            return Err(io::Error::other(format!(
                "AF_XDP: the fill ring took {lent} of {} chunks",
                lend.len()
            )));
        }
        Ok(XdpRx {
            view: UmemView {
                _umem: umem,
                base,
                len,
                held: vec![0; cfg.frames as usize].into_boxed_slice(),
            },
            rx,
            fq,
            _tx: tx,
            _cq: cq,
            spare: spare.to_vec(),
            held: Vec::new(),
            scratch: descs[..fill_size as usize].to_vec(),
            fill_size,
            rate: 0.0,
            generation: 0,
        })
    }

    /// `len` bytes at absolute position `pos` (`generation * UMEM size + offset`, as
    /// [`XdpRx::next_batch`] hands them out), if they lie in one chunk of the batch user
    /// space holds now; None for a position of an earlier batch (its chunk went back to
    /// the kernel and may hold another frame), outside a chunk or outside the UMEM, for
    /// any `pos` and `len` (no panic, no overflow). The slice borrows the socket, so it is
    /// gone before the chunk can go back (see [`XdpRx::recycle`]).
    pub fn get(&self, pos: u64, len: usize) -> Option<&[u8]> {
        let v = &self.view;
        let (generation, off) = (pos / v.len as u64, (pos % v.len as u64) as usize);
        let chunk = off / CHUNK;
        if generation == 0
            || *v.held.get(chunk)? != generation
            || off.checked_add(len)? > (chunk + 1) * CHUNK
        {
            return None;
        }
        // SAFETY: [off, off + len) lies inside one chunk of the UMEM mapping (alive as long
        // as `self`), and user space holds that chunk in the generation the position names
        // (checked just above), so the kernel does not write it until `recycle`, which
        // takes `&mut self` and so cannot run while the returned slice (borrowing `&self`)
        // lives.
        Some(unsafe { std::slice::from_raw_parts(v.base.add(off), len) })
    }

    /// Bytes in the UMEM.
    pub fn umem_len(&self) -> usize {
        self.view.len
    }

    /// Wait up to `timeout` for frames; returns (position, length) of each, at most
    /// `max` (and at most half the fill ring, so the kernel keeps chunks to fill while we
    /// gather). Once the first frame is there, gathers more for up to `latency`: fewer
    /// wake-ups and larger batches under load, and a quiet link waits at most that long.
    /// The chunks stay ours until [`XdpRx::recycle`], which this calls first. A batch's
    /// positions are `generation * UMEM size + chunk offset` with a generation of its
    /// own (see [`XdpRx::get`]).
    ///
    /// Wake-ups are what AF_XDP costs here (a context switch is microseconds on a VM; the
    /// frame copy is done by the kernel in the sender's context). So frames already in
    /// the ring are taken without a system call, `poll` blocks only on an empty ring, and
    /// the gathering sleeps for as long as the rate seen so far says the batch needs to
    /// fill (at least [`GATHER_STEP`], at most the rest of the bound): a few wake-ups per
    /// batch, like TPACKET_V3's block retirement.
    pub fn next_batch(
        &mut self,
        max: usize,
        timeout: Duration,
        latency: Duration,
    ) -> io::Result<Vec<(u64, usize)>> {
        self.recycle();
        let n = max.min(self.scratch.len() / 2).max(1);
        let ms = |d: Duration| d.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY (every consume below): `scratch` is our own descriptor storage; consume
        // only writes into it the chunks the kernel hands back through this socket's RX
        // ring (our UMEM), and only into the part not yet filled this call.
        let mut got = unsafe { self.rx.consume(&mut self.scratch[..n]) };
        if got == 0 {
            // SAFETY: as above.
            got = unsafe {
                self.rx
                    .poll_and_consume(&mut self.scratch[..n], ms(timeout))
            }?;
            if got == 0 {
                // Nothing in a whole timeout: the interface may have gone (the kernel
                // unbinds the socket and sets ENETDOWN), which poll does not report.
                if let Some(e) =
                    crate::afpacket::pending_error(std::os::fd::AsRawFd::as_raw_fd(self.rx.fd()))
                {
                    return Err(e);
                }
            }
        }
        if got > 0 && got < n && !latency.is_zero() {
            let start = std::time::Instant::now();
            let deadline = start + latency;
            let lent = self.lent();
            while got < n {
                let now = std::time::Instant::now();
                let left = deadline.saturating_duration_since(now);
                if left.is_zero() {
                    break;
                }
                // Never sleep longer than half the time the kernel's lent chunks last at
                // the rate seen: past that it drops frames for want of a chunk.
                let (need, last) = if self.rate > 0.0 {
                    (
                        Duration::from_secs_f64((n - got) as f64 / self.rate),
                        Duration::from_secs_f64(0.5 * self.lent() as f64 / self.rate),
                    )
                } else {
                    (GATHER_STEP, GATHER_STEP)
                };
                std::thread::sleep(need.min(last).max(GATHER_STEP).min(left));
                // SAFETY: as above.
                got += unsafe { self.rx.consume(&mut self.scratch[got..n]) };
            }
            // The rate is what the kernel took from the fill ring meanwhile (frames we
            // gathered and any beyond them): counting only what we gathered would take
            // the batch size over the sleep for the rate, and so sleep ever longer. If
            // the ring ran dry the rate was higher still.
            let secs = start.elapsed().as_secs_f64();
            let left = self.lent();
            if lent > left && secs > 0.0 {
                let r = (lent - left) as f64 / secs * if left == 0 { 2.0 } else { 1.0 };
                self.rate = if self.rate == 0.0 {
                    r
                } else {
                    0.7 * self.rate + 0.3 * r
                };
            }
        }
        let mut out = Vec::with_capacity(got);
        if got == 0 {
            return Ok(out);
        }
        self.generation += 1;
        let base = self.generation * self.view.len as u64;
        for d in &self.scratch[..got] {
            out.push((base + d.addr() as u64, d.lengths().data()));
            self.held.push(*d);
            if let Some(h) = self.view.held.get_mut(d.addr() / CHUNK) {
                // We hold the chunk in this generation (read by `get` through a later
                // `&self` borrow).
                *h = self.generation;
            }
        }
        Ok(out)
    }

    /// Chunks the fill ring holds for the kernel to copy frames into.
    fn lent(&mut self) -> usize {
        (self.fill_size - self.fq.nb_free(self.fill_size)) as usize
    }

    /// The socket's drop counters (XDP_STATISTICS, totals since it was bound).
    pub fn stats(&self) -> io::Result<XdpDrops> {
        let s = self.rx.fd().xdp_statistics()?;
        // The kernel counts a frame dropped for want of a fill chunk in rx_dropped too.
        let fill_empty = s.rx_fill_ring_empty_descs();
        Ok(XdpDrops {
            ring_full: s.rx_ring_full(),
            fill_empty,
            other: s.rx_dropped().saturating_sub(fill_empty) + s.rx_invalid_descs(),
        })
    }

    /// Lend the last batch's chunks back to the kernel. From now on their positions are
    /// refused by [`XdpRx::get`]. Nothing read from them can still be in use: slices of
    /// them borrow the socket shared, and this takes it exclusively. Holding one across
    /// does not compile:
    ///
    /// ```compile_fail,E0502
    /// fn first_byte_after_recycle(rx: &mut kernel::xdp::XdpRx, (pos, len): (u64, usize)) -> u8 {
    ///     let bytes = rx.get(pos, len).unwrap();
    ///     rx.recycle(); // error[E0502]: `*rx` is borrowed by `bytes`
    ///     bytes[0] // would read what the kernel copies into the chunk now
    /// }
    /// ```
    ///
    /// while copying out what is needed first does:
    ///
    /// ```
    /// fn first_byte_then_recycle(rx: &mut kernel::xdp::XdpRx, (pos, len): (u64, usize)) -> u8 {
    ///     let first = rx.get(pos, len).unwrap()[0];
    ///     rx.recycle();
    ///     first
    /// }
    /// ```
    pub fn recycle(&mut self) {
        if self.held.is_empty() {
            return;
        }
        for d in &self.held {
            if let Some(h) = self.view.held.get_mut(d.addr() / CHUNK) {
                // Withdraw the chunk from readers (none is alive: this is `&mut self`)
                // before it can reach the kernel.
                *h = 0;
            }
        }
        self.spare.append(&mut self.held);
        let room = self.fq.nb_free(self.fill_size) as usize;
        let k = room.min(self.spare.len());
        if k == 0 {
            return;
        }
        let from = self.spare.len() - k;
        // SAFETY: the chunks in `spare` are ours (consumed from the RX ring or never
        // lent), belong to this UMEM, and no reader holds them any more (readers borrow
        // `&self`; this is `&mut self`). At most `room` of them: the fill ring takes all
        // or none.
        let lent = unsafe { self.fq.produce(&self.spare[from..]) };
        if lent == k {
            self.spare.truncate(from);
        }
    }
}

impl std::fmt::Debug for XdpRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpRx")
            .field("umem_len", &self.view.len)
            .field("generation", &self.generation)
            .field("held", &self.held.len())
            .field("spare", &self.spare.len())
            .finish()
    }
}

impl crate::LentMemory for XdpRx {
    #[inline]
    fn bytes(&self, pos: u64, len: usize) -> Option<&[u8]> {
        self.get(pos, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::Veth;

    /// The next batch that brings frames (the peer pings meanwhile).
    fn batch(rx: &mut XdpRx) -> Vec<(u64, usize)> {
        for _ in 0..50 {
            let b = rx
                .next_batch(8, Duration::from_millis(200), Duration::ZERO)
                .unwrap_or_else(|e| panic!("{e}"));
            if !b.is_empty() {
                return b;
            }
        }
        panic!("no frames in 10 s");
    }

    /// A batch's positions carry its generation: they resolve while the batch is held and
    /// are refused once its chunks went back to the kernel, also while a later batch is
    /// held. Real frames from a namespace's pings onto a veth pair; needs root.
    #[test]
    fn positions_of_a_recycled_batch_are_refused() {
        let v = Veth::new("xg").unwrap_or_else(|e| panic!("{e}"));
        // AF_XDP takes the frames from the host's stack: nothing answers ARP, so the
        // pinging side gets a static neighbour entry.
        let mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", v.here)).unwrap();
        v.exec(&[
            "ip",
            "neigh",
            "add",
            &v.here_ip,
            "lladdr",
            mac.trim(),
            "dev",
            &v.there,
        ])
        .unwrap();
        let mut rx = XdpRx::open(
            &v.here,
            XdpConfig {
                queue: 0,
                frames: 64,
                skb_mode: false,
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut ping = v
            .command("ping")
            .args(["-c", "400", "-i", "0.005", "-q", &v.here_ip])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let size = rx.umem_len() as u64;
        let first = batch(&mut rx);
        let (p, n) = first[0];
        let g = p / size;
        assert!(g >= 1, "generation 0 is none");
        assert!(
            first.iter().all(|&(q, _)| q / size == g),
            "one generation per batch"
        );
        let bytes = rx.get(p, n).expect("a held frame resolves").to_vec();
        let second = batch(&mut rx);
        let (q, m) = second[0];
        assert!(q / size > g, "a later batch, a later generation");
        assert!(rx.get(q, m).is_some());
        assert_eq!(rx.get(p, n), None, "the first batch went back: refused");
        let in_batch = |off: u64| {
            second
                .iter()
                .any(|&(x, _)| (x % size) / CHUNK as u64 == off / CHUNK as u64)
        };
        assert_eq!(rx.get(q / size * size + p % size, n).is_some(), in_batch(p % size), "the same offset resolves under the new generation only if its chunk is in the new batch");
        // A chunk not in the batch (the kernel's to fill) is refused under any generation.
        let theirs = (0..64u64)
            .map(|c| c * CHUNK as u64)
            .find(|&o| !in_batch(o))
            .expect("the batch holds 8 of 64 chunks");
        assert_eq!(rx.get(q / size * size + theirs, 1), None);
        assert!(!bytes.is_empty());
        // Out of a chunk, or of the UMEM: refused.
        assert_eq!(rx.get(q / size * size + CHUNK as u64 - 4, 8), None);
        assert_eq!(rx.get(u64::MAX, 1), None);
        rx.recycle();
        assert_eq!(rx.get(q, m), None, "recycled: refused");
        let _ = ping.kill();
        let _ = ping.wait();
    }
}
