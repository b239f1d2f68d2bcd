//! Transmit with AF_PACKET and a PACKET_TX_RING (TPACKET_V2): frames are written into a
//! ring shared with the kernel and marked for sending; one `send` system call (the kick)
//! hands every marked frame to the device at once. When to kick is the caller's policy
//! (seed 002: when the local batch is used up or a latency bound passes, not per frame).
//!
//! Owns: the socket, the mapping, frame ownership (`TP_STATUS_AVAILABLE` /
//! `_SEND_REQUEST` / `_WRONG_FORMAT`) and the kick. The `unsafe` here is system calls, the
//! mapping and atomic views of the frames' status words, each with a `// SAFETY:` comment.

#![allow(unsafe_code)]

use crate::afpacket::{cvt, setsockopt};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const SOL_PACKET: i32 = 263;
const PACKET_VERSION: i32 = 10;
const PACKET_TX_RING: i32 = 13;
const PACKET_QDISC_BYPASS: i32 = 20;
const TPACKET_V2: i32 = 1;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_WRONG_FORMAT: u32 = 4;
/// Frame data starts after the aligned tpacket2_hdr (TPACKET2_HDRLEN - sizeof(sockaddr_ll)).
const DATA_OFF: usize = (std::mem::size_of::<libc::tpacket2_hdr>() + libc::TPACKET_ALIGNMENT - 1)
    & !(libc::TPACKET_ALIGNMENT - 1);
// Where a slot's header (`tpacket2_hdr`) keeps what we read and write, from libc's
// definition of the kernel's struct.
const TP_STATUS: usize = std::mem::offset_of!(libc::tpacket2_hdr, tp_status);
const TP_LEN: usize = std::mem::offset_of!(libc::tpacket2_hdr, tp_len);
const TP_SNAPLEN: usize = std::mem::offset_of!(libc::tpacket2_hdr, tp_snaplen);

/// How to set up the ring.
#[derive(Debug, Clone, Copy)]
pub struct TxConfig {
    /// Bytes per frame slot (a power of two >= 2048); frames up to this minus 32 bytes.
    pub frame_size: u32,
    /// Frame slots in the ring.
    pub frames: u32,
    /// Skip the qdisc layer (PACKET_QDISC_BYPASS): faster, no traffic shaping.
    pub qdisc_bypass: bool,
}

impl Default for TxConfig {
    fn default() -> Self {
        TxConfig {
            frame_size: 2048,
            frames: 1024,
            qdisc_bypass: false,
        }
    }
}

/// An AF_PACKET socket bound to one interface with its transmit ring.
#[derive(Debug)]
pub struct TxRing {
    fd: OwnedFd,
    map: *mut u8,
    len: usize,
    cfg: TxConfig,
    /// Next slot to fill.
    next: usize,
    /// Frames the kernel refused (wrong format) whose slots [`TxSlots::fill`] reused.
    refused: u64,
}

// SAFETY: the mapping is owned by this value and lives until drop; frames are written
// only after their status word (read atomically) says user space owns them.
unsafe impl Send for TxRing {}

impl TxRing {
    /// Open a transmit socket on `dev` with a TPACKET_V2 transmit ring.
    pub fn open(dev: &str, cfg: TxConfig) -> io::Result<TxRing> {
        if !cfg.frame_size.is_power_of_two() || cfg.frame_size < 2048 || cfg.frames == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tx ring: frame size {} must be a power of two >= 2048, frames > 0",
                    cfg.frame_size
                ),
            ));
        }
        crate::afpacket::ifindex(dev)?;
        // Protocol 0: a transmit-only socket, the kernel delivers nothing to it.
        let fd = crate::afpacket::packet_socket("transmitting")?;
        Self::setup(fd, dev, cfg)
    }

    /// Set up the ring on a transmit socket the daemon lent (issue 33; [`crate::lend`]:
    /// its locked filter accepts nothing, so it can never capture).
    pub fn open_lent(fd: OwnedFd, dev: &str, cfg: TxConfig) -> io::Result<TxRing> {
        Self::setup(fd, dev, cfg)
    }

    fn setup(fd: OwnedFd, dev: &str, cfg: TxConfig) -> io::Result<TxRing> {
        if !cfg.frame_size.is_power_of_two() || cfg.frame_size < 2048 || cfg.frames == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tx ring: frame size {} must be a power of two >= 2048, frames > 0",
                    cfg.frame_size
                ),
            ));
        }
        let idx = crate::afpacket::ifindex(dev)?;
        setsockopt(
            &fd,
            SOL_PACKET,
            PACKET_VERSION,
            &TPACKET_V2,
            "PACKET_VERSION TPACKET_V2",
        )?;
        if cfg.qdisc_bypass {
            setsockopt(
                &fd,
                SOL_PACKET,
                PACKET_QDISC_BYPASS,
                &1i32,
                "PACKET_QDISC_BYPASS",
            )?;
        }
        // Blocks of 64 KiB (or one frame if frames are larger); frames never straddle them.
        let block = cfg.frame_size.max(1 << 16);
        let per_block = block / cfg.frame_size;
        let blocks = cfg.frames.div_ceil(per_block);
        let frames = blocks * per_block;
        let req: [u32; 4] = [block, blocks, cfg.frame_size, frames];
        setsockopt(&fd, SOL_PACKET, PACKET_TX_RING, &req, "PACKET_TX_RING")?;
        let len = block as usize * blocks as usize;
        // SAFETY: mapping the ring the kernel just set up on this socket, shared and
        // read-write as TPACKET requires; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("mapping the transmit ring: {e}"),
            ));
        }
        let ring = TxRing {
            fd,
            map: map as *mut u8,
            len,
            cfg: TxConfig { frames, ..cfg },
            next: 0,
            refused: 0,
        };
        // SAFETY: all-zero is a valid sockaddr_ll.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
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
        Ok(ring)
    }

    /// Largest frame a slot holds.
    pub fn max_frame(&self) -> usize {
        self.cfg.frame_size as usize - DATA_OFF
    }

    /// Frame slots in the ring.
    pub fn frames(&self) -> usize {
        self.cfg.frames as usize
    }

    fn status(&self, slot: usize) -> &AtomicU32 {
        let off = slot * self.cfg.frame_size as usize + TP_STATUS;
        debug_assert!(off + 4 <= self.len);
        // SAFETY: slot < frames, so the word lies inside the mapping, 4-aligned (slots are
        // power-of-two sized); the kernel and we access it only atomically.
        unsafe { &*(self.map.add(off) as *const AtomicU32) }
    }

    /// Copy `frame` into the next slot and mark it for sending (it leaves at the next
    /// kick). `Ok(false)`: the slot is still the kernel's (the ring is full: kick, wait,
    /// retry). A frame the kernel refused earlier (wrong format) is counted in `rejected`
    /// and its slot reused.
    pub fn put(&mut self, frame: &[u8], rejected: &mut u64) -> io::Result<bool> {
        if frame.len() > self.max_frame() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a frame of {} bytes does not fit a slot of {}",
                    frame.len(),
                    self.max_frame()
                ),
            ));
        }
        let slot = self.next;
        // Acquire pairs with the kernel's barrier before it hands a slot back
        // (TP_STATUS_AVAILABLE or _WRONG_FORMAT): it is done reading the slot.
        match self.status(slot).load(Ordering::Acquire) {
            TP_STATUS_AVAILABLE => {}
            TP_STATUS_WRONG_FORMAT => *rejected += 1,
            _ => return Ok(false),
        }
        let base = slot * self.cfg.frame_size as usize;
        // SAFETY: the slot is user space's (status AVAILABLE or WRONG_FORMAT, read with
        // Acquire above), the range [base + DATA_OFF, + len) lies inside it (len <=
        // max_frame), and the kernel reads it only after the Release store below.
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.as_ptr(),
                self.map.add(base + DATA_OFF),
                frame.len(),
            );
            std::ptr::write_unaligned(self.map.add(base + TP_LEN) as *mut u32, frame.len() as u32);
            std::ptr::write_unaligned(
                self.map.add(base + TP_SNAPLEN) as *mut u32,
                frame.len() as u32,
            );
        }
        // Release pairs with the kernel's read barrier after it sees TP_STATUS_SEND_REQUEST
        // (at the kick): it reads the frame and lengths written above.
        self.status(slot)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.next = (slot + 1) % self.cfg.frames as usize;
        Ok(true)
    }

    /// The kick: one system call hands every marked frame to the device. A full device
    /// queue (EAGAIN, ENOBUFS) is not an error: the frames stay marked for the next kick.
    pub fn kick(&self) -> io::Result<()> {
        // SAFETY: send(2) with no user buffer: TPACKET transmits from the ring.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if matches!(
                e.raw_os_error(),
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR)
            ) {
                return Ok(());
            }
            return Err(io::Error::new(
                e.kind(),
                format!("transmit (send on the TX ring): {e}"),
            ));
        }
        Ok(())
    }

    /// Wait up to `timeout` for the kernel to give a slot back.
    pub fn wait_writable(&self, timeout: Duration) -> io::Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe {
            libc::poll(
                &mut pfd,
                1,
                timeout.as_millis().clamp(1, i32::MAX as u128) as i32,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Slots the kernel still holds (marked or being sent).
    pub fn in_flight(&self) -> usize {
        // Acquire, as in `put`: pairs with the kernel handing slots back.
        (0..self.cfg.frames as usize)
            .filter(|&s| {
                !matches!(
                    self.status(s).load(Ordering::Acquire),
                    TP_STATUS_AVAILABLE | TP_STATUS_WRONG_FORMAT
                )
            })
            .count()
    }

    /// Frames the kernel refused (wrong format) and nobody has reused yet.
    pub fn rejected_pending(&self) -> u64 {
        // Acquire, as in `put`: pairs with the kernel handing slots back.
        (0..self.cfg.frames as usize)
            .filter(|&s| self.status(s).load(Ordering::Acquire) == TP_STATUS_WRONG_FORMAT)
            .count() as u64
    }
}

impl TxRing {
    /// Frames the kernel refused (wrong format) whose slots [`TxSlots::fill`] reused.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

/// Algorithm 1's view of the ring ([`crate::batching::TxView`]): one frame per slot.
impl crate::batching::TxSlots for TxRing {
    fn free_ahead(&self, max: usize) -> usize {
        let n = self.cfg.frames as usize;
        // Acquire, as in `put`: pairs with the kernel handing slots back.
        (0..max.min(n))
            .take_while(|&k| {
                matches!(
                    self.status((self.next + k) % n).load(Ordering::Acquire),
                    TP_STATUS_AVAILABLE | TP_STATUS_WRONG_FORMAT
                )
            })
            .count()
    }
    fn fill(&mut self, frame: &[u8]) -> io::Result<bool> {
        let mut r = 0;
        let ok = self.put(frame, &mut r)?;
        self.refused += r;
        Ok(ok)
    }
    fn kick(&mut self) -> io::Result<()> {
        TxRing::kick(self)
    }
    fn slots(&self) -> usize {
        self.cfg.frames as usize
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `open`; nothing borrows it.
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.len);
        }
    }
}
