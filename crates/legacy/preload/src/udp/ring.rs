//! Reception through a packet ring (`STREAMLINE_UDP_RX=ring`): an AF_PACKET SOCK_DGRAM
//! socket bound to IPv4 or IPv6, with a TPACKET_V2 memory-mapped ring and a classic BPF
//! filter for the socket's port (and address, when bound to one) in the kernel; the
//! program's own socket keeps sending and drops its own copy (a one-instruction filter
//! returning 0). Reading a datagram costs no system call while the ring holds some.
//!
//! Owns: the ring's mapping, walking its frames, and turning a captured packet into what
//! `recvmsg` returns (payload, source address, IP_PKTINFO / IPV6_PKTINFO). FFI: the
//! `unsafe` of reading the shared ring lives here.
//!
//! The two paths split the datagrams by UDP length, so none is lost or delivered twice: the
//! ring takes unfragmented datagrams of at most [`SMALL`] bytes (UDP header included), the
//! socket drops exactly those and keeps the larger ones (read with `recvmmsg`, as in `mmsg`
//! mode). A datagram of at most [`SMALL`] bytes fits the IPv6 minimum MTU (1280), so it
//! arrives unfragmented on any link that carries IPv6 (and on loopback and Ethernet);
//! larger ones may arrive as fragments, which only the socket sees reassembled. Left: an
//! IPv4 path with an MTU below 1268 that fragments a small datagram, or an IPv6 datagram
//! behind extension headers, is dropped by the socket and refused by the ring: lost.
//! Datagrams keep their order within each path, not between the two (UDP promises none).
//!
//! Limits: an AF_INET6 socket must be IPV6_V6ONLY (else `mmsg` is used); only the
//! IP_PKTINFO / IPV6_RECVPKTINFO control messages are made (a socket asking for others at
//! bind uses `mmsg`; asking later is refused with ENOPROTOOPT).

use super::parse::parse;
use super::sock;
use std::sync::atomic::{fence, Ordering};

/// One frame per block, large enough for the largest IPv4/IPv6 datagram on loopback.
const FRAME: usize = 17 * 4096;
/// Frames in the ring (the receive buffer, in datagrams).
const FRAMES: usize = 128;
const TP_STATUS_CSUM_VALID: u32 = 1 << 7;
/// Largest UDP length (header + payload) the ring takes: 1280 (IPv6 minimum MTU) - 40.
pub const SMALL: u32 = 1240;

pub struct Ring {
    pub fd: i32,
    /// An epoll descriptor watching the ring and the program's socket (for its large
    /// datagrams): what a waiting thread polls.
    pub efd: i32,
    base: *mut u8,
    head: usize,
    pub ipv6: bool,
    /// Packets seen that were not deliverable datagrams (see [`super::parse::ParseError`]).
    pub bad: u64,
}

// SAFETY: the mapping is owned by this object and only touched under the socket's rx lock.
unsafe impl Send for Ring {}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The port (and address) filter run by the kernel on every captured IP packet: accept
/// UDP datagrams to `port` (and `addr` unless unspecified) of at most [`SMALL`] bytes, not
/// IPv4 fragments.
pub fn port_filter(ipv6: bool, port: u16, addr: &[u8]) -> Vec<libc::sock_filter> {
    use libc::{
        BPF_ABS, BPF_B, BPF_H, BPF_IND, BPF_JEQ, BPF_JGT, BPF_JMP, BPF_JSET, BPF_K, BPF_LD,
        BPF_LDX, BPF_MSH, BPF_RET, BPF_W,
    };
    let ld = |sz: u32, k: u32| insn((BPF_LD | sz | BPF_ABS) as u16, 0, 0, k);
    // Jumps to "drop" are patched once the program's length is known (jf/jt = 0xff marks).
    let jeq_else_drop = |k: u32| insn((BPF_JMP | BPF_JEQ | BPF_K) as u16, 0, 0xff, k);
    let mut p = Vec::new();
    if !ipv6 {
        p.push(ld(BPF_B, 9));
        p.push(jeq_else_drop(17));
        p.push(ld(BPF_H, 6));
        p.push(insn((BPF_JMP | BPF_JSET | BPF_K) as u16, 0xff, 0, 0x3fff));
        p.push(insn((BPF_LDX | BPF_B | BPF_MSH) as u16, 0, 0, 0));
        p.push(insn((BPF_LD | BPF_H | BPF_IND) as u16, 0, 0, 2));
        p.push(jeq_else_drop(port as u32));
        p.push(insn((BPF_LD | BPF_H | BPF_IND) as u16, 0, 0, 4));
        p.push(insn((BPF_JMP | BPF_JGT | BPF_K) as u16, 0xff, 0, SMALL));
        if addr.len() == 4 && addr != [0, 0, 0, 0] {
            p.push(ld(BPF_W, 16));
            p.push(jeq_else_drop(u32::from_be_bytes([
                addr[0], addr[1], addr[2], addr[3],
            ])));
        }
    } else {
        p.push(ld(BPF_B, 6));
        p.push(jeq_else_drop(17));
        p.push(ld(BPF_H, 42));
        p.push(jeq_else_drop(port as u32));
        p.push(ld(BPF_H, 44));
        p.push(insn((BPF_JMP | BPF_JGT | BPF_K) as u16, 0xff, 0, SMALL));
        if addr.len() == 16 && addr.iter().any(|&b| b != 0) {
            for i in 0..4 {
                p.push(ld(BPF_W, 24 + 4 * i as u32));
                let w = &addr[4 * i..4 * i + 4];
                p.push(jeq_else_drop(u32::from_be_bytes([w[0], w[1], w[2], w[3]])));
            }
        }
    }
    p.push(insn((BPF_RET | BPF_K) as u16, 0, 0, 0x0004_0000));
    p.push(insn((BPF_RET | BPF_K) as u16, 0, 0, 0));
    let drop_at = p.len() - 1;
    for (i, ins) in p.iter_mut().enumerate().take(drop_at) {
        let to_drop = (drop_at - i - 1) as u8;
        if ins.jf == 0xff {
            ins.jf = to_drop;
        }
        if ins.jt == 0xff {
            ins.jt = to_drop;
        }
    }
    p
}

pub fn attach(fd: i32, prog: &[libc::sock_filter]) -> Result<(), i32> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    sock::setsockopt_val(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog).map(|_| ())
}

/// Make the program's socket drop the datagrams the ring receives (UDP length at most
/// [`SMALL`]; a socket filter sees the datagram from its UDP header on).
pub fn drop_own_copy(fd: i32) -> Result<(), i32> {
    use libc::{BPF_JGT, BPF_JMP, BPF_K, BPF_LD, BPF_LEN, BPF_RET, BPF_W};
    attach(
        fd,
        &[
            insn((BPF_LD | BPF_W | BPF_LEN) as u16, 0, 0, 0),
            insn((BPF_JMP | BPF_JGT | BPF_K) as u16, 0, 1, SMALL),
            insn((BPF_RET | BPF_K) as u16, 0, 0, u32::MAX),
            insn((BPF_RET | BPF_K) as u16, 0, 0, 0),
        ],
    )
}

/// Undo [`drop_own_copy`].
pub fn undrop(fd: i32) {
    let zero: i32 = 0;
    let _ = sock::setsockopt_val(fd, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, &zero);
}

impl Ring {
    /// A capturing ring for UDP datagrams to `port`/`addr` (network-order address bytes;
    /// all zero for a wildcard socket). Needs CAP_NET_RAW.
    pub fn open(ipv6: bool, port: u16, addr: &[u8], sockfd: i32) -> Result<Ring, i32> {
        // Protocol 0: the socket receives nothing until bound, after its filter is in place.
        let fd = sock::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )? as i32;
        let mut r = Ring {
            fd,
            efd: -1,
            base: std::ptr::null_mut(),
            head: 0,
            ipv6,
            bad: 0,
        };
        r.efd = sock::epoll_create()? as i32;
        sock::epoll_add(r.efd, fd, libc::EPOLLIN as u32)?;
        sock::epoll_add(r.efd, sockfd, libc::EPOLLIN as u32)?;
        attach(fd, &port_filter(ipv6, port, addr))?;
        let v: i32 = libc::tpacket_versions::TPACKET_V2 as i32;
        sock::setsockopt_val(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &v)?;
        let req = libc::tpacket_req {
            tp_block_size: FRAME as u32,
            tp_block_nr: FRAMES as u32,
            tp_frame_size: FRAME as u32,
            tp_frame_nr: FRAMES as u32,
        };
        sock::setsockopt_val(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)?;
        r.base = sock::mmap_shared(fd, FRAME * FRAMES)?;
        let proto = if ipv6 {
            libc::ETH_P_IPV6
        } else {
            libc::ETH_P_IP
        } as u16;
        // SAFETY: sockaddr_ll is plain data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto.to_be();
        // SAFETY: sll is a live sockaddr_ll of the size given.
        unsafe {
            sock::bind(
                fd,
                &sll as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        }?;
        Ok(r)
    }

    fn frame(&self, i: usize) -> *mut libc::tpacket2_hdr {
        // SAFETY: i < FRAMES, so the offset stays inside the mapping.
        unsafe { self.base.add(i * FRAME) as *mut libc::tpacket2_hdr }
    }

    fn status(&self, i: usize) -> u32 {
        // SAFETY: the frame header is inside our mapping; the kernel writes tp_status last,
        // so a volatile read then an acquire fence orders our reads of the frame after it.
        let s = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.frame(i)).tp_status)) };
        fence(Ordering::Acquire);
        s
    }

    /// Is a captured packet waiting (no system call)?
    pub fn ready(&self) -> bool {
        self.status(self.head) & libc::TP_STATUS_USER != 0
    }

    fn release_head(&mut self) {
        fence(Ordering::Release);
        // SAFETY: the head frame is ours (TP_STATUS_USER) until handed back here.
        unsafe {
            std::ptr::write_volatile(
                std::ptr::addr_of_mut!((*self.frame(self.head)).tp_status),
                libc::TP_STATUS_KERNEL,
            )
        };
        self.head = (self.head + 1) % FRAMES;
    }

    /// The next deliverable datagram, dropping captured packets that are not one; `None`
    /// when the ring is empty. Stays at the head until [`Ring::pop`].
    pub fn peek(
        &mut self,
        want_pktinfo: bool,
        out: &mut super::synth::Synth,
    ) -> Option<(*const u8, usize)> {
        loop {
            let st = self.status(self.head);
            if st & libc::TP_STATUS_USER == 0 {
                return None;
            }
            let h = self.frame(self.head);
            // SAFETY: the frame is ours (TP_STATUS_USER); its header fields are plain data.
            let (net, snap, len) = unsafe {
                (
                    (*h).tp_net as usize,
                    (*h).tp_snaplen as usize,
                    (*h).tp_len as usize,
                )
            };
            let sll_off = (std::mem::size_of::<libc::tpacket2_hdr>() + 15) & !15;
            // SAFETY: the sockaddr_ll follows the aligned header inside the frame.
            let sll = unsafe {
                std::ptr::read_unaligned((h as *const u8).add(sll_off) as *const libc::sockaddr_ll)
            };
            if net + snap > FRAME || snap != len || sll.sll_pkttype == libc::PACKET_OUTGOING {
                self.bad += 1;
                self.release_head();
                continue;
            }
            // SAFETY: net + snap <= FRAME: the packet bytes lie inside this frame.
            let pkt = unsafe { std::slice::from_raw_parts((h as *const u8).add(net), snap) };
            let verify = st & (libc::TP_STATUS_CSUMNOTREADY | TP_STATUS_CSUM_VALID) == 0;
            match parse(pkt, verify) {
                Ok(d) => {
                    out.set(&d, sll.sll_ifindex, self.ipv6, want_pktinfo);
                    return Some((pkt[d.payload.clone()].as_ptr(), d.payload.len()));
                }
                Err(_) => {
                    self.bad += 1;
                    self.release_head();
                }
            }
        }
    }

    /// Hand the head frame back to the kernel.
    pub fn pop(&mut self) {
        if self.ready() {
            self.release_head();
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if !self.base.is_null() {
            // SAFETY: our own mapping, unused from now on.
            unsafe { sock::munmap(self.base, FRAME * FRAMES) };
        }
        let _ = crate::sys::close(self.fd);
        if self.efd >= 0 {
            let _ = crate::sys::close(self.efd);
        }
    }
}
