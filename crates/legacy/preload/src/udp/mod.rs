//! Batched UDP sockets for the ports a policy names (issue 18, part 2; thesis 7.3, where
//! BIND answered DNS queries through Streamline).
//!
//! Owns: which UDP sockets become ours (the policy, decided at `bind`), and the socket
//! calls on them: `recv`/`recvfrom`/`recvmsg`/`recvmmsg` (and the fortified `__recv_chk`,
//! `__recvfrom_chk`), `send`/`sendto`/`sendmsg`/`sendmmsg`, `setsockopt` (ring mode's
//! control messages). The sockets themselves, their table by fd and [`before_block`],
//! which sends what is batched, are [`socket`]'s. Does not own the
//! waiting (`poll`/`epoll`: the generic wrappers of module `wait`, through [`vfd::Virtual`]).
//!
//! Policy: `STREAMLINE_UDP_PORTS=53,5353` (read once). A `bind` of an AF_INET/AF_INET6 UDP
//! socket to a listed port makes the socket virtual; everything else goes straight to the
//! kernel. Reception, `STREAMLINE_UDP_RX`:
//! - `mmsg` (default): the socket itself, emptied with one `recvmmsg` per batch of up to 32
//!   datagrams into a user-space queue that later calls read without a system call;
//! - `ring`: a Streamline capture ([`ring`]): an AF_PACKET ring with the port filter in the
//!   kernel, read without system calls; the socket drops its own copy of what the ring
//!   takes. Needs CAP_NET_RAW; where it cannot be had, or the socket does not fit the
//!   ring's limits, the socket gets `mmsg` (with a warning on stderr).
//!
//! `mmsg` is the default: under dnsmasq the ring saves dnsmasq's own CPU but adds as much
//! in softirq (the capture's copy and filters), and it needs privilege and has limits
//! (BENCHMARKS.md, "Legacy DNS").
//!
//! Transmission is batched into `sendmmsg` ([`socket`] says when it leaves and what happens
//! to errors). `STREAMLINE_UDP_STATS=1` prints the counters ([`socket::Stats`]) on stderr at exit
//! (`STREAMLINE_UDP_STATS=/path` appends them to that file).
//! Several threads may use a socket: each socket's receive queue and send batch have a lock.
//! Limits: `read`/`write` on a virtual UDP socket go to the kernel (a read then skips what is
//! batched); after `fork` both processes share a ring (only one may receive); a
//! virtual socket passed across `exec` is a plain kernel socket again (ring mode: one that
//! drops everything, as its filter stays).

pub mod parse;
pub mod ring;
pub mod sock;
pub mod socket;
pub mod synth;

use crate::sys::{c_ret, set_errno};
use crate::vfd;
use socket::{before_block, flush_all, get, put, Rx, UdpSock, STATS};
use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Once, OnceLock};

/// How datagrams are received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxMode {
    Mmsg,
    Ring,
}

/// A policy entry that is not a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// 1-based position of the entry in the comma-separated list.
    pub position: usize,
    pub entry: String,
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "STREAMLINE_UDP_PORTS entry {} ({:?}) is not a port number 1-65535",
            self.position, self.entry
        )
    }
}

/// Parse `53,5353` (spaces allowed, empty entries ignored).
pub fn parse_ports(s: &str) -> Result<Vec<u16>, PolicyError> {
    let mut v = Vec::new();
    for (i, e) in s.split(',').enumerate() {
        let t = e.trim();
        if t.is_empty() {
            continue;
        }
        match t.parse::<u16>() {
            Ok(p) if p != 0 => v.push(p),
            _ => {
                return Err(PolicyError {
                    position: i + 1,
                    entry: t.to_string(),
                })
            }
        }
    }
    Ok(v)
}

/// Parse `STREAMLINE_UDP_RX` (empty: the default, `mmsg`).
pub fn parse_mode(s: &str) -> Result<RxMode, String> {
    match s.trim() {
        "" | "mmsg" => Ok(RxMode::Mmsg),
        "ring" => Ok(RxMode::Ring),
        o => Err(format!(
            "STREAMLINE_UDP_RX={o:?}: expected `mmsg` or `ring`"
        )),
    }
}

fn warn(msg: &str) {
    let _ = crate::sys::write(2, format!("libslpreload: {msg}\n").as_bytes());
}

struct Policy {
    ports: Vec<u16>,
    mode: RxMode,
    /// The mode was asked for (a ring that cannot be had is then reported).
    explicit: bool,
}

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| {
        let ports = match std::env::var("STREAMLINE_UDP_PORTS") {
            Ok(s) => parse_ports(&s).unwrap_or_else(|e| {
                warn(&format!("{e}; no UDP socket is batched"));
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        let asked = std::env::var("STREAMLINE_UDP_RX").unwrap_or_default();
        let mode = parse_mode(&asked).unwrap_or_else(|e| {
            warn(&format!("{e}; using the default, mmsg"));
            RxMode::Mmsg
        });
        Policy {
            ports,
            mode,
            explicit: !asked.trim().is_empty(),
        }
    })
}

extern "C" fn at_fork_prepare() {
    // What the parent queued leaves now, so the child does not send it again.
    flush_all();
}

extern "C" fn at_exit() {
    flush_all();
    if let Some(to) = std::env::var_os("STREAMLINE_UDP_STATS") {
        let s = &STATS;
        let line = format!(
            "libslpreload: udp stats: pid={} rx_datagrams={} rx_batches={} tx_datagrams={} tx_batches={} tx_errors={}\n",
            crate::sys::getpid(),
            s.rx_datagrams.load(Ordering::Relaxed),
            s.rx_batches.load(Ordering::Relaxed),
            s.tx_datagrams.load(Ordering::Relaxed),
            s.tx_batches.load(Ordering::Relaxed),
            s.tx_errors.load(Ordering::Relaxed)
        );
        // A path: appended there (daemons often point stderr at /dev/null); else stderr.
        use std::os::unix::ffi::OsStrExt;
        let file = if to.as_bytes().starts_with(b"/") {
            std::ffi::CString::new(to.as_bytes())
                .ok()
                .and_then(|p| sock::open_append(&p).ok())
        } else {
            None
        };
        match file {
            Some(fd) => {
                let _ = crate::sys::write(fd as i32, line.as_bytes());
                let _ = crate::sys::close(fd as i32);
            }
            None => {
                let _ = crate::sys::write(2, line.as_bytes());
            }
        }
    }
}

/// Family, port and address bytes of a bind address, if it is IPv4 or IPv6.
///
/// # Safety
/// `addr` must be readable for `len` bytes (or null).
unsafe fn inet_addr(
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Option<(i32, u16, Vec<u8>)> {
    if addr.is_null() || (len as usize) < 2 {
        return None;
    }
    // SAFETY: at least the family field is readable.
    let fam = unsafe { (*addr).sa_family } as i32;
    if fam == libc::AF_INET && len as usize >= std::mem::size_of::<libc::sockaddr_in>() {
        // SAFETY: len covers a sockaddr_in; read unaligned, as the caller's buffer may be.
        let a = unsafe { std::ptr::read_unaligned(addr as *const libc::sockaddr_in) };
        Some((
            fam,
            u16::from_be(a.sin_port),
            a.sin_addr.s_addr.to_ne_bytes().to_vec(),
        ))
    } else if fam == libc::AF_INET6 && len as usize >= std::mem::size_of::<libc::sockaddr_in6>() {
        // SAFETY: len covers a sockaddr_in6.
        let a = unsafe { std::ptr::read_unaligned(addr as *const libc::sockaddr_in6) };
        Some((fam, u16::from_be(a.sin6_port), a.sin6_addr.s6_addr.to_vec()))
    } else {
        None
    }
}

fn is_udp(fd: i32) -> bool {
    sock::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE) == Ok(libc::SOCK_DGRAM)
        && sock::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) == Ok(libc::IPPROTO_UDP)
}

fn opt_on(fd: i32, level: i32, name: i32) -> bool {
    sock::getsockopt_int(fd, level, name).is_ok_and(|v| v != 0)
}

/// Receive options whose control messages the ring does not make.
fn unsupported_rx_opt(ipv6: bool, level: i32, name: i32) -> bool {
    let common = [
        (libc::SOL_SOCKET, libc::SO_TIMESTAMP),
        (libc::SOL_SOCKET, libc::SO_TIMESTAMPNS),
        (libc::SOL_SOCKET, libc::SO_RXQ_OVFL),
        (libc::SOL_SOCKET, libc::SO_TIMESTAMPING),
    ];
    let v4 = [
        (libc::IPPROTO_IP, libc::IP_RECVTTL),
        (libc::IPPROTO_IP, libc::IP_RECVTOS),
        (libc::IPPROTO_IP, libc::IP_RECVOPTS),
        (libc::IPPROTO_IP, libc::IP_RETOPTS),
        (libc::IPPROTO_IP, libc::IP_RECVORIGDSTADDR),
    ];
    let v6 = [
        (libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT),
        (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS),
        (libc::IPPROTO_IPV6, libc::IPV6_2292PKTINFO),
        (libc::IPPROTO_IPV6, 74 /* IPV6_RECVORIGDSTADDR */),
    ];
    common.contains(&(level, name))
        || if ipv6 {
            v6.contains(&(level, name))
        } else {
            v4.contains(&(level, name))
        }
}

fn pktinfo_opt(ipv6: bool) -> (i32, i32) {
    if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    }
}

/// Can this (not yet bound) socket be served by a ring? (module [`ring`]'s limits)
fn ring_fits(fd: i32, ipv6: bool) -> bool {
    if ipv6 && !opt_on(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) {
        return false;
    }
    let all = [
        (libc::SOL_SOCKET, libc::SO_TIMESTAMP),
        (libc::SOL_SOCKET, libc::SO_TIMESTAMPNS),
        (libc::SOL_SOCKET, libc::SO_RXQ_OVFL),
        (libc::IPPROTO_IP, libc::IP_RECVTTL),
        (libc::IPPROTO_IP, libc::IP_RECVTOS),
        (libc::IPPROTO_IP, libc::IP_RECVOPTS),
        (libc::IPPROTO_IP, libc::IP_RETOPTS),
        (libc::IPPROTO_IP, libc::IP_RECVORIGDSTADDR),
        (libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT),
        (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS),
        (libc::IPPROTO_IPV6, libc::IPV6_2292PKTINFO),
    ];
    !all.iter()
        .any(|&(l, n)| unsupported_rx_opt(ipv6, l, n) && opt_on(fd, l, n))
}

fn install_hooks() {
    static H: Once = Once::new();
    H.call_once(|| {
        // SAFETY: registering plain extern "C" functions of ours with libc.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(Some(at_fork_prepare), None, None);
        }
        // Every blocking call of the library sends what is batched first (nothing is
        // batched before the first socket, made after this).
        vfd::on_before_block(before_block);
    });
}

/// bind(2): the kernel's, then the policy decides whether the socket becomes ours.
///
/// # Safety
/// As bind(2): `addr` readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn bind(fd: i32, addr: *const libc::sockaddr, len: libc::socklen_t) -> i32 {
    let p = policy();
    // SAFETY: the caller's address as given to bind.
    let target = if p.ports.is_empty() {
        None
    } else {
        unsafe { inet_addr(addr, len) }
    };
    let Some((fam, port, bytes)) = target.filter(|t| p.ports.contains(&t.1)) else {
        // SAFETY: passed through.
        return c_ret(unsafe { sock::bind(fd, addr, len) }) as i32;
    };
    if fd < 0 || fd as usize >= vfd::MAX_FD || vfd::is_virtual(fd) || !is_udp(fd) {
        // SAFETY: passed through.
        return c_ret(unsafe { sock::bind(fd, addr, len) }) as i32;
    }
    let ipv6 = fam == libc::AF_INET6;
    // The ring and the socket's drop filter go in before the kernel bind, so no datagram
    // arrives in between to be delivered twice or lost.
    let mut ring = None;
    if p.mode == RxMode::Ring && ring_fits(fd, ipv6) {
        match ring::Ring::open(ipv6, port, &bytes, fd) {
            Ok(r) => match ring::drop_own_copy(fd) {
                Ok(()) => ring = Some(r),
                Err(e) if p.explicit => warn(&format!(
                    "ring for UDP port {port}: SO_ATTACH_FILTER: errno {e}; using mmsg"
                )),
                Err(_) => {}
            },
            Err(e) if p.explicit => warn(&format!(
                "ring for UDP port {port}: errno {e} (needs CAP_NET_RAW); using mmsg"
            )),
            Err(_) => {}
        }
    } else if p.mode == RxMode::Ring && p.explicit {
        warn(&format!("UDP port {port}: the socket does not fit the ring (IPv6 without IPV6_V6ONLY, or control messages the ring does not make); using mmsg"));
    }
    // SAFETY: passed through.
    if let Err(e) = unsafe { sock::bind(fd, addr, len) } {
        if ring.is_some() {
            ring::undrop(fd);
        }
        set_errno(e);
        return -1;
    }
    let rx = match ring {
        Some(r) => {
            let (l, n) = pktinfo_opt(ipv6);
            Rx::ring(r, opt_on(fd, l, n))
        }
        None => Rx::mmsg(),
    };
    install_hooks();
    let s = Arc::new(UdpSock::new(fd, ipv6, rx));
    put(fd, Some(s.clone()));
    if !vfd::register(fd, s) {
        put(fd, None);
    }
    0
}

/// setsockopt(2): straight through; on a ring socket, the control messages it asks for.
///
/// # Safety
/// As setsockopt(2).
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: i32,
    level: i32,
    name: i32,
    val: *const libc::c_void,
    len: libc::socklen_t,
) -> i32 {
    if let Some(s) = get(fd) {
        if s.is_ring() {
            let on = !val.is_null() && len as usize >= 4 && {
                // SAFETY: at least 4 readable bytes, as the option's int.
                unsafe { std::ptr::read_unaligned(val as *const i32) != 0 }
            };
            if unsupported_rx_opt(s.ipv6, level, name) && on {
                set_errno(libc::ENOPROTOOPT);
                return -1;
            }
            // SAFETY: passed through.
            let r = unsafe { sock::setsockopt_raw(fd, level, name, val, len) };
            if r.is_ok() && (level, name) == pktinfo_opt(s.ipv6) {
                s.set_pktinfo(on);
            }
            return c_ret(r) as i32;
        }
    }
    // SAFETY: passed through.
    c_ret(unsafe { sock::setsockopt_raw(fd, level, name, val, len) }) as i32
}

/// A recvmsg/sendmsg on a kernel socket under the budget: a shaped stream socket gets
/// the message's vector cut to its grant.
///
/// # Safety
/// `msg` is a valid msghdr (the C caller's).
unsafe fn msg_io(
    fd: i32,
    msg: *const libc::msghdr,
    call: impl Fn(*const libc::msghdr) -> crate::sys::Res,
) -> crate::sys::Res {
    if msg.is_null() {
        return call(msg);
    }
    // SAFETY: a valid msghdr and its vector, as the caller vouches.
    let m = unsafe { &*msg };
    let v: &[libc::iovec] = if m.msg_iov.is_null() || m.msg_iovlen == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(m.msg_iov, m.msg_iovlen) }
    };
    let total: usize = v.iter().map(|i| i.iov_len).sum();
    let cut = crate::shape::cuts(fd);
    crate::shape::io(fd, total, |k| {
        if cut && k < total {
            let c = crate::shape::cut_iov(v, k);
            let mut m2 = *m;
            m2.msg_iov = c.as_ptr() as *mut _;
            m2.msg_iovlen = c.len() as _;
            let r = call(&m2);
            // what the kernel reports back (flags, name and control lengths) goes to the caller's header
            // SAFETY: msg is the caller's writable msghdr for recvmsg; for sendmsg these fields are unchanged.
            unsafe {
                let w = msg as *mut libc::msghdr;
                (*w).msg_flags = m2.msg_flags;
                (*w).msg_namelen = m2.msg_namelen;
                (*w).msg_controllen = m2.msg_controllen;
            }
            r
        } else {
            call(msg)
        }
    })
}

/// Bytes the buffers of `n` messages hold.
///
/// # Safety
/// `v` points at `n` valid mmsghdrs.
unsafe fn mmsg_len(v: *const libc::mmsghdr, n: u32) -> usize {
    if v.is_null() {
        return 0;
    }
    // SAFETY: as the caller vouches.
    let v = unsafe { std::slice::from_raw_parts(v, n as usize) };
    v.iter()
        .map(|e| {
            if e.msg_hdr.msg_iov.is_null() {
                0
            } else {
                (0..e.msg_hdr.msg_iovlen)
                    .map(|i| unsafe { (*e.msg_hdr.msg_iov.add(i)).iov_len })
                    .sum::<usize>()
            }
        })
        .sum()
}

/// A recvmmsg/sendmmsg under the budget, whole (datagrams are never cut): the budget is
/// settled with the bytes the messages moved; the call returns the message count.
///
/// # Safety
/// `v` points at `n` valid mmsghdrs, and `call` is the system call on them.
unsafe fn mmsg_io(
    fd: i32,
    v: *mut libc::mmsghdr,
    n: u32,
    call: impl FnOnce() -> crate::sys::Res,
) -> crate::sys::Res {
    // SAFETY: as the caller vouches.
    let total = unsafe { mmsg_len(v, n) };
    let mut count = 0usize;
    crate::shape::io(fd, total, |_| {
        let k = call()?;
        count = k;
        // SAFETY: the kernel filled msg_len of the first k entries.
        Ok((0..k)
            .map(|i| unsafe { (*v.add(i)).msg_len as usize })
            .sum())
    })
    .map(|_| count)
}

/// recvmsg(2).
///
/// # Safety
/// As recvmsg(2).
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: i32, msg: *mut libc::msghdr, flags: i32) -> isize {
    match get(fd) {
        // SAFETY: the caller's msghdr.
        Some(s) => c_ret(unsafe { s.recvmsg(msg, flags) }),
        None => {
            // A receive may block: what is batched for other sockets leaves first.
            before_block();
            // SAFETY: passed through (the vector cut, for a shaped stream socket).
            c_ret(unsafe {
                msg_io(fd, msg as *const _, |m| {
                    sock::recvmsg(fd, m as *mut _, flags)
                })
            })
        }
    }
}

/// recvfrom(2).
///
/// # Safety
/// As recvfrom(2).
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: i32,
    buf: *mut libc::c_void,
    len: usize,
    flags: i32,
    addr: *mut libc::sockaddr,
    alen: *mut libc::socklen_t,
) -> isize {
    let Some(s) = get(fd) else {
        before_block();
        // SAFETY: passed through (n ≤ len).
        return c_ret(crate::shape::io(fd, len, |n| unsafe {
            sock::recvfrom(fd, buf, n, flags, addr, alen)
        }));
    };
    let mut iov = libc::iovec {
        iov_base: buf,
        iov_len: len,
    };
    // SAFETY: plain data.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    if !addr.is_null() && !alen.is_null() {
        m.msg_name = addr as *mut _;
        // SAFETY: the caller's address length.
        m.msg_namelen = unsafe { *alen };
    }
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    // SAFETY: m describes the caller's buffers.
    let r = unsafe { s.recvmsg(&mut m, flags) };
    if r.is_ok() && !m.msg_name.is_null() {
        // SAFETY: as above.
        unsafe { *alen = m.msg_namelen };
    }
    c_ret(r)
}

/// recv(2).
///
/// # Safety
/// As recv(2).
#[no_mangle]
pub unsafe extern "C" fn recv(fd: i32, buf: *mut libc::c_void, len: usize, flags: i32) -> isize {
    // SAFETY: as recvfrom with no address.
    unsafe {
        recvfrom(
            fd,
            buf,
            len,
            flags,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
}

/// The fortified recv (`_FORTIFY_SOURCE`).
///
/// # Safety
/// As recv(2).
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: i32,
    buf: *mut libc::c_void,
    len: usize,
    buflen: usize,
    flags: i32,
) -> isize {
    if len > buflen {
        // glibc aborts here (buffer overflow detected); so do we.
        std::process::abort();
    }
    // SAFETY: as recv.
    unsafe { recv(fd, buf, len, flags) }
}

/// The fortified recvfrom.
///
/// # Safety
/// As recvfrom(2).
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: i32,
    buf: *mut libc::c_void,
    len: usize,
    buflen: usize,
    flags: i32,
    addr: *mut libc::sockaddr,
    alen: *mut libc::socklen_t,
) -> isize {
    if len > buflen {
        std::process::abort();
    }
    // SAFETY: as recvfrom.
    unsafe { recvfrom(fd, buf, len, flags, addr, alen) }
}

/// recvmmsg(2): the first datagram as a recvmsg with the caller's flags, the rest without
/// waiting (so it returns what is there after the first, as with MSG_WAITFORONE; the
/// timeout is not used).
///
/// # Safety
/// As recvmmsg(2).
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    fd: i32,
    v: *mut libc::mmsghdr,
    n: u32,
    flags: i32,
    timeout: *mut libc::timespec,
) -> i32 {
    let Some(s) = get(fd) else {
        before_block();
        // SAFETY: the caller's array and arguments.
        return c_ret(unsafe { mmsg_io(fd, v, n, || sock::recvmmsg(fd, v, n, flags, timeout)) })
            as i32;
    };
    let base = flags & !libc::MSG_WAITFORONE;
    let mut got = 0u32;
    while got < n {
        let f = if got == 0 {
            base
        } else {
            base | libc::MSG_DONTWAIT
        };
        // SAFETY: entry `got` of the caller's array of n.
        let e = unsafe { &mut *v.add(got as usize) };
        // SAFETY: the caller's msghdr.
        match unsafe { s.recvmsg(&mut e.msg_hdr, f) } {
            Ok(k) => {
                e.msg_len = k as u32;
                got += 1;
            }
            Err(e) if got == 0 => {
                set_errno(e);
                return -1;
            }
            Err(_) => break,
        }
    }
    got as i32
}

/// Before a message carrying descriptors (SCM_RIGHTS) leaves: a ring pipe end among them
/// goes back to the kernel, since the receiver may be any program. Used by `sendmsg`.
///
/// # Safety
/// `msg` is null or a valid msghdr.
unsafe fn demote_passed(msg: *const libc::msghdr) {
    if msg.is_null() {
        return;
    }
    // SAFETY: a valid msghdr from sendmsg's caller; CMSG_* walk within msg_control.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const c_int;
                let n = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<c_int>();
                for i in 0..n {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    if let Some(p) = crate::pipe::get(fd) {
                        p.demote(fd);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

/// sendmsg(2).
///
/// # Safety
/// As sendmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: i32, msg: *const libc::msghdr, flags: i32) -> isize {
    if !crate::own::is_internal() {
        // A ring pipe end passed in the message goes back to the kernel first.
        // SAFETY: the caller's msghdr.
        unsafe { demote_passed(msg) };
    }
    match get(fd) {
        // SAFETY: the caller's msghdr.
        Some(s) => c_ret(unsafe { s.sendmsg(msg, flags) }),
        // SAFETY: passed through (the vector cut, for a shaped stream socket).
        None => c_ret(unsafe { msg_io(fd, msg, |m| sock::sendmsg(fd, m, flags)) }),
    }
}

/// sendto(2).
///
/// # Safety
/// As sendto(2).
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: i32,
    buf: *const libc::c_void,
    len: usize,
    flags: i32,
    addr: *const libc::sockaddr,
    alen: libc::socklen_t,
) -> isize {
    let Some(s) = get(fd) else {
        // SAFETY: passed through (n ≤ len).
        return c_ret(crate::shape::io(fd, len, |n| unsafe {
            sock::sendto(fd, buf, n, flags, addr, alen)
        }));
    };
    let mut iov = libc::iovec {
        iov_base: buf as *mut _,
        iov_len: len,
    };
    // SAFETY: plain data.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_name = addr as *mut _;
    m.msg_namelen = if addr.is_null() { 0 } else { alen };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    // SAFETY: m describes the caller's buffers.
    c_ret(unsafe { s.sendmsg(&m, flags) })
}

/// send(2).
///
/// # Safety
/// As send(2).
#[no_mangle]
pub unsafe extern "C" fn send(fd: i32, buf: *const libc::c_void, len: usize, flags: i32) -> isize {
    // SAFETY: as sendto with no address.
    unsafe { sendto(fd, buf, len, flags, std::ptr::null(), 0) }
}

/// sendmmsg(2): each message as a sendmsg (batched as those are).
///
/// # Safety
/// As sendmmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(fd: i32, v: *mut libc::mmsghdr, n: u32, flags: i32) -> i32 {
    let Some(s) = get(fd) else {
        // SAFETY: the caller's array and arguments.
        return c_ret(unsafe { mmsg_io(fd, v, n, || sock::sendmmsg(fd, v, n, flags)) }) as i32;
    };
    let mut sent = 0u32;
    while sent < n {
        // SAFETY: entry `sent` of the caller's array of n.
        let e = unsafe { &mut *v.add(sent as usize) };
        // SAFETY: the caller's msghdr.
        match unsafe { s.sendmsg(&e.msg_hdr, flags) } {
            Ok(k) => {
                e.msg_len = k as u32;
                sent += 1;
            }
            Err(e) if sent == 0 => {
                set_errno(e);
                return -1;
            }
            Err(_) => break,
        }
    }
    sent as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_and_bad_entries_are_named_by_position() {
        assert_eq!(parse_ports("53, 5353,,"), Ok(vec![53, 5353]));
        assert_eq!(parse_ports(""), Ok(vec![]));
        assert_eq!(
            parse_ports("53,dns"),
            Err(PolicyError {
                position: 2,
                entry: "dns".into()
            })
        );
        assert_eq!(
            parse_ports("0"),
            Err(PolicyError {
                position: 1,
                entry: "0".into()
            })
        );
        assert_eq!(parse_ports("53,70000").unwrap_err().position, 2);
    }

    #[test]
    fn rx_modes_parse() {
        assert_eq!(parse_mode("ring"), Ok(RxMode::Ring));
        assert_eq!(parse_mode("mmsg"), Ok(RxMode::Mmsg));
        assert_eq!(parse_mode(""), Ok(RxMode::Mmsg));
        assert!(parse_mode("fast").unwrap_err().contains("fast"));
    }

    proptest::proptest! {
        #[test]
        fn any_policy_text_parses_or_names_an_entry(s in ".{0,40}") {
            match parse_ports(&s) {
                Ok(v) => proptest::prop_assert!(v.iter().all(|&p| p != 0)),
                Err(e) => proptest::prop_assert!(e.position >= 1 && e.position <= s.split(',').count()),
            }
        }
    }
}
