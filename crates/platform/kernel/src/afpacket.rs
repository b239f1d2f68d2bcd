//! Live capture with AF_PACKET and a TPACKET_V3 ring (thesis 4.5.6: the kernel's ring is
//! the data ring). The kernel fills blocks of frames; user space reads a block where it
//! lies and hands it back. Optional: a program on the socket ([`SocketFilter`]: classic
//! BPF, the kernel placement of `bpf`, or an eBPF program of [`crate::ebpf`], the kernel
//! placement of flowcount / sample / bytecount), PACKET_FANOUT (hash) so several sockets share one
//! interface flow by flow, and PACKET_STATISTICS for the kernel's drops.
//!
//! Owns: socket setup, the mapping, block ownership (`TP_STATUS_USER` / `_KERNEL`, and
//! which lap of each block user space holds), frame positions (absolute: `lap * ring
//! length + offset`, never reused, so a position names one frame for the life of the
//! socket and a stale one is refused, never read) and parsing of block and frame headers. The `unsafe` of this crate lives here, in a few
//! small blocks (system calls, the mapping, atomic views of status words), each with a
//! `// SAFETY:` comment.
//!
//! Two ways to wait for blocks: [`RxRing::next_block`] polls whenever the next block is not
//! ready (the fixed scheme: the kernel's retire timeout ends the wait), and the pieces
//! seed 002's Algorithm 2 is built from ([`crate::batching::RxView`] over this ring's
//! [`crate::batching::RxSlots`]: which blocks are ready, [`RxRing::take`],
//! [`RxRing::wait_readable`], [`RxRing::wait_any`] over several rings); the mapping of the
//! seed's avb/curr/limit/threshold onto blocks and status words is in [`crate::batching`].
//!
//! Reading held blocks is sound by construction ([`crate::LentMemory`]):
//! [`RxRing::frame_bytes`] borrows the ring shared and [`RxRing::release`] (and
//! [`RxRing::next_block`]) exclusively, so a slice of a block cannot outlive the block's
//! release, and which lap of each block user space holds is plain memory, changed only
//! through `&mut self`.

#![allow(unsafe_code)]

use crate::cbpf::Program;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const SOL_PACKET: i32 = 263;
const PACKET_RX_RING: i32 = 5;
const PACKET_STATISTICS: i32 = 6;
const PACKET_VERSION: i32 = 10;
const PACKET_FANOUT: i32 = 18;
const TPACKET_V3: i32 = 2;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_KERNEL: u32 = 0;
const ETH_P_ALL: u16 = 0x0003;
const PACKET_FANOUT_HASH: u32 = 0;

// Where the fields of a block's header lie: `tpacket_block_desc` (version, offset_to_priv,
// then the union whose TPACKET_V3 member is `tpacket_hdr_v1`), from libc's definitions of
// the kernel's structs rather than bare numbers.
const BLOCK_HDR: usize = std::mem::offset_of!(libc::tpacket_block_desc, hdr)
    + std::mem::offset_of!(libc::tpacket_bd_header_u, bh1);
const BLOCK_STATUS: usize = BLOCK_HDR + std::mem::offset_of!(libc::tpacket_hdr_v1, block_status);
const BLOCK_NUM_PKTS: usize = BLOCK_HDR + std::mem::offset_of!(libc::tpacket_hdr_v1, num_pkts);
const BLOCK_FIRST: usize =
    BLOCK_HDR + std::mem::offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt);
const BLOCK_LEN: usize = BLOCK_HDR + std::mem::offset_of!(libc::tpacket_hdr_v1, blk_len);
/// linux/if_packet.h (4.20+): drop packets this host sends.
const PACKET_IGNORE_OUTGOING: i32 = 23;
// And of a frame's header (`tpacket3_hdr`).
const FRAME_NEXT: usize = std::mem::offset_of!(libc::tpacket3_hdr, tp_next_offset);
const FRAME_SEC: usize = std::mem::offset_of!(libc::tpacket3_hdr, tp_sec);
const FRAME_NSEC: usize = std::mem::offset_of!(libc::tpacket3_hdr, tp_nsec);
const FRAME_SNAPLEN: usize = std::mem::offset_of!(libc::tpacket3_hdr, tp_snaplen);
const FRAME_LEN: usize = std::mem::offset_of!(libc::tpacket3_hdr, tp_len);
const FRAME_MAC: usize = std::mem::offset_of!(libc::tpacket3_hdr, tp_mac);

/// What [`RxRing::next_block`] reads of a block's header (`tpacket_hdr_v1`).
#[derive(Debug, Clone, Copy)]
struct BlockHeader {
    /// Frames in the block.
    num_pkts: u32,
    /// Offset of the first frame's header from the block's start.
    first: u32,
    /// Bytes of the block in use (its header and frames).
    blk_len: u32,
}

/// What [`RxRing::next_block`] reads of a frame's header (`tpacket3_hdr`).
#[derive(Debug, Clone, Copy)]
struct FrameHeader {
    /// Offset of the next frame's header from this one; 0 for the block's last.
    next: u32,
    sec: u32,
    nsec: u32,
    /// Bytes captured.
    snaplen: u32,
    /// Bytes on the wire.
    wirelen: u32,
    /// Offset of the MAC header from this header.
    mac: u16,
}

/// How to set up the ring.
#[derive(Debug, Clone, Copy)]
pub struct RxConfig {
    /// Bytes per block (a power of two, a multiple of the page size).
    pub block_size: u32,
    /// Blocks in the ring.
    pub blocks: u32,
    /// A block is handed to user space at the latest this long after its first frame,
    /// so a quiet link never holds frames back for long.
    pub latency: Duration,
    /// Join a PACKET_FANOUT group (hash mode) with this id.
    pub fanout: Option<u16>,
}

impl Default for RxConfig {
    fn default() -> Self {
        RxConfig {
            block_size: 1 << 20,
            blocks: 16,
            latency: Duration::from_millis(10),
            fanout: None,
        }
    }
}

/// One frame in a block: where its bytes are, and its metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Position of the frame's first byte (the MAC header): `lap * ring length + offset in
    /// the mapping`, where `lap` counts how often the ring has gone round. Positions only
    /// grow, so one names this frame for the life of the socket ([`RxRing::frame_bytes`]
    /// refuses it once its block has gone back to the kernel).
    pub pos: u64,
    pub snaplen: u32,
    pub wirelen: u32,
    pub ts_ns: u64,
}

/// The program a capture socket runs on every frame before it is queued.
#[derive(Debug, Clone, Copy)]
pub enum SocketFilter<'a> {
    /// Classic BPF (`SO_ATTACH_FILTER`).
    Classic(&'a Program),
    /// A loaded eBPF socket-filter program (`SO_ATTACH_BPF`).
    Ebpf(std::os::fd::BorrowedFd<'a>),
}

/// An AF_PACKET socket with its TPACKET_V3 receive ring.
#[derive(Debug)]
pub struct RxRing {
    fd: OwnedFd,
    map: *mut u8,
    len: usize,
    cfg: RxConfig,
    /// Next block to look at, counted from the start (block `next % blocks` of lap
    /// `next / blocks`).
    next: u64,
    /// Per block: 0 while the kernel owns it, else 1 + the lap in which user space holds it
    /// (between `next_block` and `release`). Plain memory: only `&mut self` changes it, so
    /// no reader (`&self`) sees it change.
    held: Box<[u64]>,
    /// `poll` calls made by [`RxRing::next_block`] (the fixed scheme's wake-ups).
    polls: u64,
}

/// A block user space holds: its index in the ring, its lap and its frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub index: usize,
    pub lap: u64,
    pub frames: Vec<Frame>,
}

// SAFETY: the mapping is owned by this value and lives until drop, whichever thread that
// is on; the kernel's side of it is reached only through the atomic status words.
unsafe impl Send for RxRing {}
// SAFETY: through `&self` the mapping is only read, in blocks user space holds
// (`frame_bytes`, checked by lap), which nothing changes while a `&self` borrow lives:
// taking and giving back blocks (`next_block`, `release`) needs `&mut self`.
unsafe impl Sync for RxRing {}

/// A system call's result, or the OS error with `what` was being done in front of it.
/// Shared with [`crate::tx`].
pub(crate) fn cvt(r: i32, what: &str) -> io::Result<i32> {
    if r < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(r)
    }
}

/// setsockopt(2) with a value of type `T`, the error naming `what`.
pub(crate) fn setsockopt<T>(
    fd: &OwnedFd,
    level: i32,
    name: i32,
    val: &T,
    what: &str,
) -> io::Result<()> {
    // SAFETY: `val` points to a live T of size_of::<T>() bytes for the duration of the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as u32,
        )
    };
    cvt(r, what).map(|_| ())
}

/// `SO_LOCK_FILTER` (asm-generic/socket.h): once set, nobody holding the descriptor can
/// detach or replace the socket's filter, nor take the lock off (EPERM).
pub const SO_LOCK_FILTER: i32 = 44;

/// The ring's shape, checked before any socket exists: the positions' arithmetic
/// (`frame_bytes`) relies on a non-empty ring of whole blocks that each hold a frame slot;
/// the kernel would refuse the rest less clearly.
fn check_ring(cfg: &RxConfig) -> io::Result<()> {
    if cfg.blocks == 0 || !cfg.block_size.is_power_of_two() || cfg.block_size < 4096 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("capture ring: {} blocks of {} bytes: need at least one block, of a power of two >= 4096 bytes", cfg.blocks, cfg.block_size)));
    }
    Ok(())
}

/// A fresh AF_PACKET raw socket with protocol 0 (it receives nothing until bound with a
/// protocol). Creating one needs CAP_NET_RAW: `doing` names what for in the error.
pub(crate) fn packet_socket(doing: &str) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked and owned below.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        let e = io::Error::last_os_error();
        let hint = if e.raw_os_error() == Some(libc::EPERM) {
            format!(" ({doing} needs CAP_NET_RAW: run as root, or through streamlined with a policy template that grants it)")
        } else {
            String::new()
        };
        return Err(io::Error::new(
            e.kind(),
            format!("AF_PACKET socket: {e}{hint}"),
        ));
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A packet socket for someone else to use (issue 33, [`crate::lend`]): `prog` is attached
/// as its classic BPF filter and locked (`SO_LOCK_FILTER`), so whoever receives the
/// descriptor sees only what `prog` accepts, whatever it binds the socket to.
pub fn locked_socket(prog: &[crate::cbpf::Insn]) -> io::Result<OwnedFd> {
    let fd = packet_socket("lending a packet socket")?;
    attach_classic(&fd, prog)?;
    setsockopt(
        &fd,
        libc::SOL_SOCKET,
        SO_LOCK_FILTER,
        &1i32,
        "locking the socket's filter (SO_LOCK_FILTER)",
    )?;
    Ok(fd)
}

/// Attach `insns` as the socket's classic BPF filter (`SO_ATTACH_FILTER`; the kernel
/// checks the program).
pub fn attach_classic(fd: &OwnedFd, insns: &[crate::cbpf::Insn]) -> io::Result<()> {
    let mut raw: Vec<libc::sock_filter> = insns
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let prog = libc::sock_fprog {
        len: raw.len() as u16,
        filter: raw.as_mut_ptr(),
    };
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_ATTACH_FILTER,
        &prog,
        "attaching the BPF program to the socket (SO_ATTACH_FILTER)",
    )
}

/// A descriptor this process inherited, if it is an AF_PACKET socket (checked with
/// `SO_DOMAIN`): the daemon's lent sockets arrive so ([`crate::lend`]).
pub fn inherited_packet_socket(fd: i32) -> io::Result<OwnedFd> {
    let mut domain: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: `domain` and `len` are live for the call; a bad descriptor is an error.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            &mut domain as *mut i32 as *mut libc::c_void,
            &mut len,
        )
    };
    cvt(r, &format!("descriptor {fd}"))?;
    if domain != libc::AF_PACKET {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("descriptor {fd} is not a packet socket (domain {domain})"),
        ));
    }
    // SAFETY: the descriptor was inherited for this purpose and nothing else in this
    // process owns it (the daemon names each lent descriptor once).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Take the socket's filter off (`SO_DETACH_FILTER`): what a holder of a lent socket
/// would try in order to see more; the kernel refuses it (EPERM) once the filter is
/// locked ([`locked_socket`]).
pub fn detach_filter(fd: &OwnedFd) -> io::Result<()> {
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_DETACH_FILTER,
        &0i32,
        "detaching the socket's filter (SO_DETACH_FILTER)",
    )
}

/// Take the lock off the socket's filter (`SO_LOCK_FILTER` 0; EPERM while locked).
pub fn unlock_filter(fd: &OwnedFd) -> io::Result<()> {
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        SO_LOCK_FILTER,
        &0i32,
        "unlocking the socket's filter (SO_LOCK_FILTER 0)",
    )
}

/// A copy of descriptor `fd` of process `pid` (`pidfd_getfd`; needs the right to ptrace
/// it): how the trust tests act as a worker's own code would on its lent sockets.
pub fn take_descriptor(pid: u32, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain system calls on integers; results are checked and owned below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_long, 0) } as i32;
    cvt(pidfd, &format!("pidfd_open({pid})"))?;
    // SAFETY: `pidfd` is a fresh descriptor nobody else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: as above.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) } as i32;
    cvt(got, &format!("pidfd_getfd({pid}, {fd})"))?;
    // SAFETY: `got` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(got) })
}

/// A packet socket that receives nothing (protocol 0, never bound), for holding
/// interfaces in promiscuous mode with [`promisc_membership`] (the daemon's, for legacy
/// readers that ask for it). Closing it ends every membership it holds.
pub fn membership_socket() -> io::Result<OwnedFd> {
    packet_socket("putting an interface in promiscuous mode")
}

/// One more (`on`) or one less PACKET_MR_PROMISC membership of `fd` on interface
/// `ifindex` (PACKET_ADD_MEMBERSHIP / PACKET_DROP_MEMBERSHIP). The kernel counts a
/// socket's equal memberships: the interface's promiscuity goes up with the first and
/// down with the last one dropped, as libpcap's readers each add their own.
pub fn promisc_membership(fd: &OwnedFd, ifindex: u32, on: bool) -> io::Result<()> {
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex as i32,
        mr_type: libc::PACKET_MR_PROMISC as u16,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    let (name, what) = if on {
        (
            libc::PACKET_ADD_MEMBERSHIP,
            "PACKET_ADD_MEMBERSHIP (promiscuous)",
        )
    } else {
        (
            libc::PACKET_DROP_MEMBERSHIP,
            "PACKET_DROP_MEMBERSHIP (promiscuous)",
        )
    };
    setsockopt(fd, libc::SOL_PACKET, name, &mreq, what)
}

/// Index of a network interface, or a clear error naming it.
pub fn ifindex(dev: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(dev).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name '{dev}' contains NUL"),
        )
    })?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no network interface named '{dev}'"),
        ));
    }
    Ok(i)
}

impl RxRing {
    /// Open a capture socket on `dev` with a TPACKET_V3 ring.
    ///
    /// The socket is created with protocol 0, which receives nothing: frames start to
    /// arrive only at `bind` (protocol ETH_P_ALL, this interface), after the filter is
    /// attached and the ring is set up, so no frame slips past the filter.
    pub fn open(dev: &str, cfg: RxConfig, filter: Option<SocketFilter<'_>>) -> io::Result<RxRing> {
        check_ring(&cfg)?;
        ifindex(dev)?;
        let fd = packet_socket("capturing")?;
        match filter {
            None => {}
            Some(SocketFilter::Ebpf(prog)) => {
                let pfd: i32 = prog.as_raw_fd();
                setsockopt(
                    &fd,
                    libc::SOL_SOCKET,
                    libc::SO_ATTACH_BPF,
                    &pfd,
                    "attaching the eBPF program to the socket (SO_ATTACH_BPF)",
                )?;
            }
            Some(SocketFilter::Classic(p)) => attach_classic(&fd, p.insns())?,
        }
        Self::setup(fd, dev, cfg)
    }

    /// Set up the ring on a capture socket the daemon lent (issue 33; [`crate::lend`]):
    /// its filter is attached and locked already, so none is attached here. Everything
    /// else is as [`RxRing::open`] does it, none of it privileged.
    pub fn open_lent(fd: OwnedFd, dev: &str, cfg: RxConfig) -> io::Result<RxRing> {
        check_ring(&cfg)?;
        Self::setup(fd, dev, cfg)
    }

    /// The ring, the mapping, the binding and the fanout group on socket `fd` (which
    /// receives nothing yet: protocol 0 until `bind`).
    fn setup(fd: OwnedFd, dev: &str, cfg: RxConfig) -> io::Result<RxRing> {
        let idx = ifindex(dev)?;
        setsockopt(
            &fd,
            SOL_PACKET,
            PACKET_VERSION,
            &TPACKET_V3,
            "PACKET_VERSION TPACKET_V3",
        )?;
        let frame_size = 2048u32;
        let req: [u32; 7] = [
            cfg.block_size,
            cfg.blocks,
            frame_size,
            cfg.block_size / frame_size * cfg.blocks,
            cfg.latency.as_millis().clamp(1, u32::MAX as u128) as u32,
            0,
            0,
        ];
        setsockopt(&fd, SOL_PACKET, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
        let len = cfg.block_size as usize * cfg.blocks as usize;
        // SAFETY: mapping the ring the kernel just set up on this socket, shared and
        // read-write as TPACKET requires; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd.as_raw_fd(),
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // MAP_LOCKED can fail under RLIMIT_MEMLOCK; retry without it.
            // SAFETY: as above.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return Err(io::Error::new(
                    io::Error::last_os_error().kind(),
                    format!("mapping the capture ring: {}", io::Error::last_os_error()),
                ));
            }
            m
        } else {
            map
        };
        let held = vec![0; cfg.blocks as usize].into_boxed_slice();
        let ring = RxRing {
            fd,
            map: map as *mut u8,
            len,
            cfg,
            next: 0,
            held,
            polls: 0,
        };
        // On loopback every packet passes twice, outgoing and incoming: keep one, as
        // libpcap does (it drops the outgoing copy), so a capture of `lo` counts what
        // tcpdump counts.
        if std::fs::read_to_string(format!("/sys/class/net/{dev}/type"))
            .is_ok_and(|t| t.trim() == "772")
        {
            setsockopt(
                &ring.fd,
                SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                &1i32,
                "PACKET_IGNORE_OUTGOING on loopback",
            )?;
        }
        let mut sll: libc::sockaddr_ll = unsafe_zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = idx as i32;
        // SAFETY: `sll` is a valid sockaddr_ll for the duration of the call.
        let r = unsafe {
            libc::bind(
                ring.fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        cvt(r, &format!("binding to {dev}"))?;
        if let Some(group) = cfg.fanout {
            let v: u32 = group as u32 | (PACKET_FANOUT_HASH << 16);
            setsockopt(
                &ring.fd,
                SOL_PACKET,
                PACKET_FANOUT,
                &v,
                "PACKET_FANOUT (hash)",
            )?;
        }
        Ok(ring)
    }

    /// Bytes in the mapping.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn status(&self, block: usize) -> &AtomicU32 {
        let off = block * self.cfg.block_size as usize + BLOCK_STATUS;
        // SAFETY: the offset lies inside the mapping (block < blocks) and is 4-aligned
        // (blocks are page-aligned); the kernel and we access this word only atomically.
        unsafe { &*(self.map.add(off) as *const AtomicU32) }
    }

    fn read_u32(&self, off: usize) -> u32 {
        debug_assert!(off + 4 <= self.len);
        // SAFETY: in bounds of the mapping, within a block user space owns (checked by
        // the callers through the block status), so the kernel does not write it now.
        unsafe { std::ptr::read_unaligned(self.map.add(off) as *const u32) }
    }

    /// The header of the block starting at `base` (a block user space holds).
    fn block_header(&self, base: usize) -> BlockHeader {
        BlockHeader {
            num_pkts: self.read_u32(base + BLOCK_NUM_PKTS),
            first: self.read_u32(base + BLOCK_FIRST),
            blk_len: self.read_u32(base + BLOCK_LEN),
        }
    }

    /// The header of the frame at offset `off` in the block starting at `base` (a block
    /// user space holds: only `next_block` calls this, between taking the block and
    /// handing it out), or None if the header would run past the block's end (a corrupt
    /// offset). Reads only the fields it returns, each at its `tpacket3_hdr` offset (the
    /// walk is the capture's hot loop).
    #[inline]
    fn frame_header(&self, base: usize, off: usize) -> Option<FrameHeader> {
        if off.checked_add(std::mem::size_of::<libc::tpacket3_hdr>())?
            > self.cfg.block_size as usize
        {
            return None;
        }
        // `base` is a block's start (`b * block_size`, b < blocks), so the header lies in
        // the mapping; `read_u32` reads inside a block user space holds.
        let h = base + off;
        Some(FrameHeader {
            next: self.read_u32(h + FRAME_NEXT),
            sec: self.read_u32(h + FRAME_SEC),
            nsec: self.read_u32(h + FRAME_NSEC),
            snaplen: self.read_u32(h + FRAME_SNAPLEN),
            wirelen: self.read_u32(h + FRAME_LEN),
            // tp_mac is a u16 followed by tp_net: the low half of the u32 there (little-endian).
            mac: (self.read_u32(h + FRAME_MAC) & 0xffff) as u16,
        })
    }

    /// A hint to load the cache line at `off` if it is below `end` (no effect otherwise).
    #[inline]
    fn prefetch(&self, off: usize, end: usize) {
        if off < end.min(self.len) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch never faults and reads nothing architecturally; the
            // address is inside our mapping anyway (checked above).
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    self.map.add(off) as *const i8,
                )
            };
        }
    }

    /// Wait up to `timeout` for the next block the kernel has handed over; returns it (its
    /// frames' positions carry its lap), or None on timeout. The block is user space's
    /// until [`RxRing::release`]. (The fixed scheme: a `poll` whenever the next block is
    /// not ready, ended by the kernel's retire timer at the latest.)
    pub fn next_block(&mut self, timeout: Duration) -> io::Result<Option<Block>> {
        let seq = self.next;
        if !self.ready(seq) {
            self.polls += 1;
            if !self.wait_readable(seq, timeout)? {
                return Ok(None);
            }
        }
        self.take(seq).map(Some)
    }

    /// `poll` calls [`RxRing::next_block`] has made.
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// Whether block `seq` (a sequence number: block `seq % blocks`, lap `seq / blocks`)
    /// has been handed to user space by the kernel and is not held from an earlier lap.
    fn ready(&self, seq: u64) -> bool {
        let b = (seq % self.cfg.blocks as u64) as usize;
        // Acquire pairs with the kernel's write barrier before it sets TP_STATUS_USER on a
        // block it retires: seeing the bit, we see its frames.
        self.held[b] == 0 && self.status(b).load(Ordering::Acquire) & TP_STATUS_USER != 0
    }

    /// `poll` the socket for up to `timeout` until block `seq` is ready; false if it is not
    /// (timeout or signal). A socket error (the interface went down or away) is an error:
    /// a poll that returns at once with nothing to read would spin.
    pub fn wait_readable(&self, seq: u64, timeout: Duration) -> io::Result<bool> {
        RxRing::wait_any(&[(self, seq)], timeout)
    }

    /// `poll` several rings at once for up to `timeout` until one of them has its block
    /// `seq` (paired with it) ready; false if none has (timeout or signal). A socket error
    /// on a ring with nothing ready is an error, as in [`RxRing::wait_readable`].
    pub fn wait_any(rings: &[(&RxRing, u64)], timeout: Duration) -> io::Result<bool> {
        let mut pfds: Vec<libc::pollfd> = rings
            .iter()
            .map(|(r, _)| libc::pollfd {
                fd: r.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            })
            .collect();
        // SAFETY: `pfds` holds `pfds.len()` valid pollfds for the duration of the call.
        let r = unsafe {
            libc::poll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                timeout.as_millis().min(i32::MAX as u128) as i32,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e);
        }
        if rings.iter().any(|(r, seq)| r.ready(*seq)) {
            return Ok(true);
        }
        for ((r, _), p) in rings.iter().zip(&pfds) {
            if p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                return Err(pending_error(r.fd.as_raw_fd()).unwrap_or_else(|| {
                    io::Error::other("the capture socket reports an error condition (POLLERR/POLLHUP) but no error code")
                }));
            }
        }
        Ok(false)
    }

    /// Blocks in the ring.
    pub fn blocks(&self) -> usize {
        self.cfg.blocks as usize
    }

    /// Take block `seq`, which must be ready ([`RxSlots::ready_from`] said so, or
    /// [`RxRing::wait_readable`]): read its frames; it is user space's until
    /// [`RxRing::release`]. The next block is `seq + 1`. A block not ready is an error
    /// (nothing is read from it).
    pub fn take(&mut self, seq: u64) -> io::Result<Block> {
        if !self.ready(seq) {
            return Err(io::Error::other(format!(
                "capture ring: block {seq} taken before the kernel handed it over"
            )));
        }
        let b = (seq % self.cfg.blocks as u64) as usize;
        let lap = seq / self.cfg.blocks as u64;
        let base = b * self.cfg.block_size as usize;
        let bs = self.cfg.block_size as usize;
        let bh = self.block_header(base);
        let num = bh.num_pkts as usize;
        let mut off = bh.first as usize;
        // A frame takes at least a header (`tpacket3_hdr`): a corrupt count cannot ask for more.
        let mut frames =
            Vec::with_capacity(num.min(bs / std::mem::size_of::<libc::tpacket3_hdr>()));
        // End of the block's frames (blk_len), and the next line to prefetch.
        let used = base + (bh.blk_len as usize).min(bs);
        let mut pf = base + off - (base + off) % 64;
        for _ in 0..num {
            let Some(fh) = self.frame_header(base, off) else {
                break; // a corrupt block: stop at what is readable
            };
            let h = base + off;
            // Frames follow each other in the block, but each header names the next:
            // read in a chain, every line the other CPU's softirq wrote is a miss that
            // waits for the one before. Asking for every line up to PREFETCH_AHEAD bytes
            // ahead lets the misses overlap (a frame takes a few ns to walk, a line from
            // another CPU's cache far longer, so the lead must be many frames).
            while pf < (h + PREFETCH_AHEAD).min(used) {
                self.prefetch(pf, used);
                pf += 64;
            }
            let mac = fh.mac as usize;
            if off + mac + fh.snaplen as usize <= bs {
                let pos = lap * self.len as u64 + (h + mac) as u64;
                frames.push(Frame {
                    pos,
                    snaplen: fh.snaplen,
                    wirelen: fh.wirelen,
                    ts_ns: fh.sec as u64 * 1_000_000_000 + fh.nsec as u64,
                });
            }
            if fh.next == 0 {
                break;
            }
            off += fh.next as usize;
        }
        // User space holds block `b` in this lap from now on (`frame_bytes` reads it
        // through a later `&self` borrow: the exclusive borrow here orders the two).
        self.held[b] = lap + 1;
        self.next = seq + 1;
        Ok(Block {
            index: b,
            lap,
            frames,
        })
    }

    /// Hand block `b` back to the kernel. From now on positions in it are refused by
    /// [`RxRing::frame_bytes`]. Nothing read from the block can still be in use: slices
    /// of it borrow the ring shared, and this takes it exclusively. Holding one across
    /// does not compile:
    ///
    /// ```compile_fail,E0502
    /// fn first_byte_after_release(rx: &mut kernel::afpacket::RxRing, b: &kernel::afpacket::Block) -> u8 {
    ///     let f = b.frames[0];
    ///     let bytes = rx.frame_bytes(f.pos, f.snaplen as usize).unwrap();
    ///     rx.release(b.index); // error[E0502]: `*rx` is borrowed by `bytes`
    ///     bytes[0] // would read what the kernel writes into the block now
    /// }
    /// ```
    ///
    /// while copying out what is needed first does:
    ///
    /// ```
    /// fn first_byte_then_release(rx: &mut kernel::afpacket::RxRing, b: &kernel::afpacket::Block) -> u8 {
    ///     let f = b.frames[0];
    ///     let first = rx.frame_bytes(f.pos, f.snaplen as usize).unwrap()[0];
    ///     rx.release(b.index);
    ///     first
    /// }
    /// ```
    pub fn release(&mut self, b: usize) {
        let Some(h) = self.held.get_mut(b) else {
            return;
        };
        // First withdraw the block from readers (a plain store: no `&self` borrow, so no
        // reader, is alive now), then give it to the kernel.
        *h = 0;
        // SYNC POINT: Release on the status word, the kernel's side of TPACKET's
        // handshake: our reads of the block happen before the kernel refills it.
        self.status(b).store(TP_STATUS_KERNEL, Ordering::Release);
    }

    /// The bytes at absolute position `pos` (see [`Frame::pos`]), if they lie in one block
    /// that user space holds in the lap `pos` names; None for a block given back to the
    /// kernel (which may have written other frames there since) or held again in a later
    /// lap, and for positions outside the ring.
    ///
    /// Checked here, for any `pos` and `len` (no panic, no overflow): the range lies in the
    /// mapping and inside one block, and that block is user space's in the lap `pos` names.
    /// Checked by the compiler: the slice borrows the ring, so it is gone before the block
    /// can be released (see [`RxRing::release`]).
    pub fn frame_bytes(&self, pos: u64, len: usize) -> Option<&[u8]> {
        let (lap, off) = (pos / self.len as u64, (pos % self.len as u64) as usize);
        let bs = self.cfg.block_size as usize;
        let b = off / bs;
        if off.checked_add(len)? > (b + 1) * bs || *self.held.get(b)? != lap.checked_add(1)? {
            return None;
        }
        // SAFETY: [off, off + len) lies inside block `b` of the mapping, which user space
        // holds in the lap the position names (checked just above), so the kernel does not
        // write these bytes until `release`, which takes `&mut self` and so cannot run
        // while the returned slice (borrowing `&self`) lives; the mapping lives as long as
        // `self`.
        Some(unsafe { std::slice::from_raw_parts(self.map.add(off), len) })
    }

    /// (packets, drops) counted by the kernel since the last call (PACKET_STATISTICS).
    pub fn stats(&self) -> io::Result<(u64, u64)> {
        let mut st = [0u32; 3];
        let mut len = std::mem::size_of_val(&st) as u32;
        // SAFETY: `st` has room for tpacket_stats_v3 (3 x u32); `len` says so.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                st.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        };
        cvt(r, "PACKET_STATISTICS")?;
        Ok((st[0] as u64, st[1] as u64))
    }
}

/// A socket's pending error (SO_ERROR, which clears it), if any; ENETDOWN (the interface
/// went down or was removed) is worded as such.
pub(crate) fn pending_error(fd: std::os::fd::RawFd) -> Option<io::Error> {
    let mut e: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as u32;
    // SAFETY: `e` has room for the int SO_ERROR returns and `len` says so; `fd` is a
    // descriptor the caller holds open.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut e as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    match (r, e) {
        (0, 0) => None,
        (0, libc::ENETDOWN) => Some(io::Error::new(
            io::ErrorKind::NotConnected,
            "the interface went down or was removed (ENETDOWN)",
        )),
        (0, e) => Some(io::Error::from_raw_os_error(e)),
        _ => Some(io::Error::last_os_error()),
    }
}

/// How far ahead of the frame being read [`RxRing::next_block`] asks for cache lines.
const PREFETCH_AHEAD: usize = 4096;

fn unsafe_zeroed<T>() -> T {
    // SAFETY: only used for plain C structs (sockaddr_ll) for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// The capture socket: readable when the kernel has handed a block over (what a space's
/// readiness handle waits on instead of [`RxRing::next_block`]'s timed `poll`).
impl AsFd for RxRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `open`; no slices outlive `self`
        // (they borrow it).
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.len);
        }
    }
}

/// Algorithm 2's view of the ring ([`crate::batching::RxView`]): its slots are blocks.
impl crate::batching::RxSlots for RxRing {
    fn ready_from(&self, seq: u64, max: usize) -> usize {
        (0..max as u64).take_while(|&k| self.ready(seq + k)).count()
    }
    fn hand_back(&mut self, seq: u64) {
        self.release((seq % self.cfg.blocks as u64) as usize);
    }
    fn slots(&self) -> usize {
        self.cfg.blocks as usize
    }
}

impl crate::LentMemory for RxRing {
    #[inline]
    fn bytes(&self, pos: u64, len: usize) -> Option<&[u8]> {
        self.frame_bytes(pos, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::Veth;
    use proptest::prelude::*;

    /// The header offsets derived from libc's structs are the kernel's TPACKET_V3 layout
    /// (linux/if_packet.h: `tpacket_block_desc` is two u32 before `tpacket_hdr_v1`, whose
    /// first four u32 are status, packet count, first offset and length; a `tpacket3_hdr`
    /// is 48 bytes with `tp_mac` at 24).
    #[test]
    fn header_offsets_are_the_kernels_tpacket_v3_layout() {
        assert_eq!(
            (BLOCK_STATUS, BLOCK_NUM_PKTS, BLOCK_FIRST, BLOCK_LEN),
            (8, 12, 16, 20)
        );
        assert_eq!(std::mem::size_of::<libc::tpacket3_hdr>(), 48);
        assert_eq!(
            (
                FRAME_NEXT,
                FRAME_SEC,
                FRAME_NSEC,
                FRAME_SNAPLEN,
                FRAME_LEN,
                FRAME_MAC
            ),
            (0, 4, 8, 12, 16, 24)
        );
    }

    /// A ring whose positions could not be computed (no blocks, a block size that is not a
    /// power of two or below a page) is refused with an error naming both numbers, before
    /// any socket is made (so no root needed).
    #[test]
    fn open_refuses_an_empty_or_ragged_ring() {
        for (blocks, block_size) in [(0, 1 << 16), (4, 3000), (4, 1024), (4, (1 << 16) + 4096)] {
            let cfg = RxConfig {
                block_size,
                blocks,
                ..RxConfig::default()
            };
            let e = RxRing::open("lo", cfg, None).expect_err("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
            assert!(
                e.to_string()
                    .contains(&format!("{blocks} blocks of {block_size} bytes")),
                "{e}"
            );
        }
    }

    /// `frame_bytes` answers for any position and length exactly as its contract says: a
    /// slice (of the length asked) only for a range inside one block user space holds, in
    /// the lap the position names; None for everything else, never a panic. Positions are
    /// drawn around the held block, across its edges and the ring's, and anywhere.
    /// A real ring on a veth pair with one block held; needs root.
    #[test]
    fn frame_bytes_answers_exactly_for_ranges_in_a_held_block() {
        let v = Veth::new("fb").unwrap_or_else(|e| panic!("{e}"));
        let bs = 1u64 << 16;
        let cfg = RxConfig {
            block_size: bs as u32,
            blocks: 4,
            latency: Duration::from_millis(1),
            fanout: None,
        };
        let mut rx = RxRing::open(&v.here, cfg, None).unwrap_or_else(|e| panic!("{e}"));
        let sock = std::net::UdpSocket::bind(format!("{}:0", v.here_ip)).unwrap();
        // Hold the first block that comes with a frame; two laps' worth of blocks pass by
        // first, so the held block is in lap 2 and earlier laps' positions are stale.
        let mut held = None;
        for i in 0..400 {
            let _ = sock.send_to(
                format!("frame_bytes {i:04}").as_bytes(),
                format!("{}:9", v.peer_ip),
            );
            let Some(b) = rx.next_block(Duration::from_secs(1)).unwrap() else {
                continue;
            };
            if b.lap >= 2 && !b.frames.is_empty() {
                held = Some(b);
                break;
            }
            rx.release(b.index);
        }
        let b = held.expect("a block with a frame in lap 2 within 400 rounds");
        let ring = rx.len() as u64;
        let start = b.lap * ring + b.index as u64 * bs;
        let expect = |pos: u64, len: usize| {
            pos >= start
                && pos
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= start + bs)
        };
        let near = prop_oneof![
            (0..bs + 64).prop_map(move |d| start + d - 32),
            (0..bs).prop_map(move |d| start + d - ring),
            (0..bs).prop_map(move |d| start + d + ring),
            any::<u64>(),
        ];
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(4000));
        runner
            .run(
                &(
                    near,
                    prop_oneof![0usize..128, 0usize..(1 << 17), Just(usize::MAX)],
                ),
                |(pos, len)| {
                    let got = rx.frame_bytes(pos, len);
                    prop_assert_eq!(
                        got.is_some(),
                        expect(pos, len),
                        "pos {} len {} (held block starts at {})",
                        pos,
                        len,
                        start
                    );
                    if let Some(s) = got {
                        prop_assert_eq!(s.len(), len);
                    }
                    Ok(())
                },
            )
            .unwrap_or_else(|e| panic!("{e}"));
        // The frames the block lists resolve, and carry the datagrams sent.
        let f = b.frames[0];
        assert!(rx.frame_bytes(f.pos, f.snaplen as usize).is_some());
        rx.release(b.index);
        assert_eq!(
            rx.frame_bytes(f.pos, f.snaplen as usize),
            None,
            "released: refused"
        );
    }

    /// A frame position names one lap of its block: once the block goes back to the kernel
    /// it is refused, and still refused when the same block is held again in a later lap
    /// (the same offset then holds another frame, which the new lap's position reads).
    /// Real traffic on a veth pair into a namespace of its own; needs root.
    #[test]
    fn a_frame_position_is_refused_once_its_block_went_back_even_when_held_again() {
        let v = Veth::new("ap").unwrap_or_else(|e| panic!("{e}"));
        let cfg = RxConfig {
            block_size: 1 << 16,
            blocks: 2,
            latency: Duration::from_millis(1),
            fanout: None,
        };
        let mut rx = RxRing::open(&v.here, cfg, None).unwrap_or_else(|e| panic!("{e}"));
        let sock = std::net::UdpSocket::bind(format!("{}:0", v.here_ip)).unwrap();
        // (block, lap, first frame, its bytes) of the first block seen with a frame.
        let mut first: Option<(usize, u64, Frame, Vec<u8>)> = None;
        for i in 0..400 {
            // A datagram per round: the timer hands over a block with it (and with ARP).
            let _ = sock.send_to(
                format!("lap test {i:04}").as_bytes(),
                format!("{}:9", v.peer_ip),
            );
            let Some(b) = rx.next_block(Duration::from_secs(1)).unwrap() else {
                continue;
            };
            let Some(&f) = b.frames.first() else {
                rx.release(b.index);
                continue;
            };
            assert_eq!(
                f.pos / rx.len() as u64,
                b.lap,
                "the position carries the lap"
            );
            let bytes = rx
                .frame_bytes(f.pos, f.snaplen as usize)
                .expect("a frame of a held block resolves")
                .to_vec();
            match &first {
                None => {
                    first = Some((b.index, b.lap, f, bytes));
                    rx.release(b.index);
                    assert_eq!(
                        rx.frame_bytes(f.pos, f.snaplen as usize),
                        None,
                        "given back: refused"
                    );
                }
                Some((index, lap, old, old_bytes)) if b.index == *index && b.lap > *lap => {
                    // The same block, held again: its memory is readable, under the new lap.
                    let same_offset = b.lap * rx.len() as u64 + old.pos % rx.len() as u64;
                    assert!(rx.frame_bytes(same_offset, old.snaplen as usize).is_some());
                    assert_eq!(
                        rx.frame_bytes(old.pos, old.snaplen as usize),
                        None,
                        "a position of an earlier lap is refused"
                    );
                    assert_ne!(&bytes, old_bytes, "another datagram in the block now");
                    // Out of the ring, or across its block's end: refused too.
                    assert_eq!(rx.frame_bytes(u64::MAX, 1), None);
                    assert_eq!(
                        rx.frame_bytes(
                            b.lap * rx.len() as u64 + (b.index as u64 + 1) * (1 << 16) - 4,
                            8
                        ),
                        None
                    );
                    rx.release(b.index);
                    assert_eq!(rx.frame_bytes(f.pos, f.snaplen as usize), None);
                    return;
                }
                _ => rx.release(b.index),
            }
        }
        panic!("no block came round a second time in 400 rounds ({first:?})");
    }
}
