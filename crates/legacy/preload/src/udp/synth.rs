//! What `recvmsg` returns beside the payload for a datagram the packet ring took (module
//! [`super::ring`]), made as the kernel would have made it: the source address and the
//! IP_PKTINFO / IPV6_PKTINFO control message. Also the control-message layout the socket
//! uses when it copies a datagram out to the program.
//!
//! Owns: [`Synth`], and the sizes and alignment of control data (`CTRL`, `CMSG_HDR`,
//! `cmsg_align`).

use super::parse::{Addr, Datagram};

/// Control data kept per datagram (bytes).
pub const CTRL: usize = 256;

pub fn zeroed_ss() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// Source address and control messages made for a datagram taken from the ring.
pub struct Synth {
    pub name: libc::sockaddr_storage,
    pub namelen: usize,
    pub ctrl: [u8; CTRL],
    pub ctrllen: usize,
}

pub const CMSG_HDR: usize = std::mem::size_of::<libc::cmsghdr>();
pub fn cmsg_align(n: usize) -> usize {
    (n + 7) & !7
}

impl Synth {
    pub(super) fn new() -> Synth {
        Synth {
            name: zeroed_ss(),
            namelen: 0,
            ctrl: [0; CTRL],
            ctrllen: 0,
        }
    }

    fn put_cmsg(&mut self, level: i32, ty: i32, data: &[u8]) {
        let at = self.ctrllen;
        let len = CMSG_HDR + data.len();
        let hdr = libc::cmsghdr {
            cmsg_len: len as _,
            cmsg_level: level,
            cmsg_type: ty,
        };
        // SAFETY: cmsghdr is plain data of CMSG_HDR bytes.
        let hb = unsafe { std::slice::from_raw_parts(&hdr as *const _ as *const u8, CMSG_HDR) };
        self.ctrl[at..at + CMSG_HDR].copy_from_slice(hb);
        self.ctrl[at + CMSG_HDR..at + len].copy_from_slice(data);
        self.ctrllen = at + cmsg_align(len);
    }

    /// Fill in what the kernel would have given a socket of this family for `d`, which
    /// arrived on interface `ifindex`.
    pub fn set(&mut self, d: &Datagram, ifindex: i32, ipv6: bool, pktinfo: bool) {
        self.ctrllen = 0;
        self.name = zeroed_ss();
        match (d.src, ipv6) {
            (Addr::V4(s), false) => {
                // SAFETY: sockaddr_in fits in sockaddr_storage, which is suitably aligned.
                let sin = unsafe { &mut *(&mut self.name as *mut _ as *mut libc::sockaddr_in) };
                sin.sin_family = libc::AF_INET as u16;
                sin.sin_port = d.sport.to_be();
                sin.sin_addr.s_addr = u32::from_ne_bytes(s.octets());
                self.namelen = std::mem::size_of::<libc::sockaddr_in>();
            }
            _ => {
                let s = match d.src {
                    Addr::V6(a) => a,
                    Addr::V4(a) => a.to_ipv6_mapped(),
                };
                // SAFETY: as above, for sockaddr_in6.
                let sin6 = unsafe { &mut *(&mut self.name as *mut _ as *mut libc::sockaddr_in6) };
                sin6.sin6_family = libc::AF_INET6 as u16;
                sin6.sin6_port = d.sport.to_be();
                sin6.sin6_addr.s6_addr = s.octets();
                // Link-local sources carry the arrival interface, as the kernel's do.
                if s.segments()[0] & 0xffc0 == 0xfe80 {
                    sin6.sin6_scope_id = ifindex as u32;
                }
                self.namelen = std::mem::size_of::<libc::sockaddr_in6>();
            }
        }
        if pktinfo {
            match d.dst {
                Addr::V4(dst) if !ipv6 => {
                    let a = u32::from_ne_bytes(dst.octets());
                    let pi = libc::in_pktinfo {
                        ipi_ifindex: ifindex,
                        ipi_spec_dst: libc::in_addr { s_addr: a },
                        ipi_addr: libc::in_addr { s_addr: a },
                    };
                    // SAFETY: in_pktinfo is plain data.
                    let b = unsafe {
                        std::slice::from_raw_parts(
                            &pi as *const _ as *const u8,
                            std::mem::size_of::<libc::in_pktinfo>(),
                        )
                    };
                    self.put_cmsg(libc::IPPROTO_IP, libc::IP_PKTINFO, b);
                }
                Addr::V6(dst) if ipv6 => {
                    let pi = libc::in6_pktinfo {
                        ipi6_addr: libc::in6_addr {
                            s6_addr: dst.octets(),
                        },
                        ipi6_ifindex: ifindex as u32,
                    };
                    // SAFETY: in6_pktinfo is plain data.
                    let b = unsafe {
                        std::slice::from_raw_parts(
                            &pi as *const _ as *const u8,
                            std::mem::size_of::<libc::in6_pktinfo>(),
                        )
                    };
                    self.put_cmsg(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, b);
                }
                _ => {}
            }
        }
    }
}
