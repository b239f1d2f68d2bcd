//! One batched UDP socket: its receive queue (a `recvmmsg` batch, or a packet [`Ring`]),
//! its send batch (flushed with `sendmmsg`), and the [`Virtual`] face the generic
//! `poll`/`epoll`/`close`/`dup` wrappers use.
//!
//! Owns: the semantics of `recvmsg`/`sendmsg` on a socket the policy names; the batched
//! sockets of this process by fd (which `dup` and `close` keep up to date), with
//! [`before_block`], which sends what they have batched, and their counters ([`Stats`]).
//! FFI: copying to and from the C caller's `msghdr` happens here (raw pointers the caller
//! vouches for).
//!
//! Send semantics: a datagram queued by `sendto`/`sendmsg` is counted as sent (the call
//! returns its length). It leaves when the batch is full (32), before the thread blocks
//! (any interposed wait, a blocking receive), when a receive finds nothing (a program
//! spinning on non-blocking receives), before `fork`, on `close` and at exit. An error
//! the kernel gives for a batched datagram cannot reach the call that queued it: the
//! datagram is dropped and counted ([`STATS`]), as a datagram lost on the wire
//! would be. Calls the batch cannot keep the order or meaning of go straight to the
//! kernel after the batch is flushed: no destination (connected sends), flags other than
//! MSG_DONTWAIT/MSG_NOSIGNAL/MSG_CONFIRM, over 64 KiB, or more than 256 bytes of control
//! data. Receive flags other than MSG_PEEK/MSG_DONTWAIT/MSG_TRUNC/MSG_WAITALL/
//! MSG_CMSG_CLOEXEC (MSG_ERRQUEUE, MSG_OOB) go to the kernel too.

use super::ring::Ring;
use super::sock;
use super::synth::{cmsg_align, zeroed_ss, Synth, CMSG_HDR, CTRL};
use crate::sys::{self, Res};
use crate::vfd::{self, Virtual};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

pub const BATCH: usize = 32;
const SLOT: usize = 65536;

/// Counters of the batched sockets of this process.
#[derive(Default)]
pub struct Stats {
    pub rx_datagrams: AtomicU64,
    pub rx_batches: AtomicU64,
    pub tx_datagrams: AtomicU64,
    pub tx_batches: AtomicU64,
    /// Batched datagrams the kernel refused (dropped; see the module docs).
    pub tx_errors: AtomicU64,
}

pub static STATS: Stats = Stats {
    rx_datagrams: AtomicU64::new(0),
    rx_batches: AtomicU64::new(0),
    tx_datagrams: AtomicU64::new(0),
    tx_batches: AtomicU64::new(0),
    tx_errors: AtomicU64::new(0),
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A datagram ready to hand to the program.
struct Dg<'a> {
    data: &'a [u8],
    full: usize,
    name: &'a [u8],
    ctrl: &'a [u8],
    kflags: i32,
}

/// Datagrams taken from the kernel socket with one `recvmmsg`, served in order.
pub struct MmsgQ {
    buf: Vec<u8>,
    names: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u8; CTRL]>,
    lens: [usize; BATCH],
    namelens: [usize; BATCH],
    ctrllens: [usize; BATCH],
    flags: [i32; BATCH],
    head: usize,
    count: usize,
}

impl MmsgQ {
    fn new() -> MmsgQ {
        MmsgQ {
            buf: Vec::new(),
            names: vec![zeroed_ss(); BATCH],
            ctrl: vec![[0u8; CTRL]; BATCH],
            lens: [0; BATCH],
            namelens: [0; BATCH],
            ctrllens: [0; BATCH],
            flags: [0; BATCH],
            head: 0,
            count: 0,
        }
    }

    fn head(&self) -> Option<Dg<'_>> {
        if self.count == 0 {
            return None;
        }
        let i = self.head;
        let full = self.lens[i];
        Some(Dg {
            data: &self.buf[i * SLOT..i * SLOT + full.min(SLOT)],
            full,
            // SAFETY: sockaddr_storage is plain data; namelens[i] <= its size.
            name: unsafe {
                std::slice::from_raw_parts(
                    &self.names[i] as *const _ as *const u8,
                    self.namelens[i],
                )
            },
            ctrl: &self.ctrl[i][..self.ctrllens[i]],
            kflags: self.flags[i],
        })
    }

    fn pop(&mut self) {
        if self.count > 0 {
            self.head += 1;
            self.count -= 1;
        }
    }

    /// One `recvmmsg` into an empty queue: the datagrams the kernel holds, up to a batch.
    fn fill(&mut self, fd: i32, flags: i32) -> Res {
        debug_assert_eq!(self.count, 0);
        if self.buf.is_empty() {
            self.buf = vec![0u8; BATCH * SLOT];
        }
        // SAFETY: iovec and mmsghdr are plain data; all-zero is valid.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut v: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..BATCH {
            iov[i] = libc::iovec {
                iov_base: self.buf[i * SLOT..].as_mut_ptr() as *mut _,
                iov_len: SLOT,
            };
            let h = &mut v[i].msg_hdr;
            h.msg_name = &mut self.names[i] as *mut _ as *mut _;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            h.msg_control = self.ctrl[i].as_mut_ptr() as *mut _;
            h.msg_controllen = CTRL;
        }
        // SAFETY: v's entries point at live buffers of ours of the sizes given.
        let n = unsafe {
            sock::recvmmsg(
                fd,
                v.as_mut_ptr(),
                BATCH as u32,
                flags,
                std::ptr::null_mut(),
            )
        }?;
        for (i, m) in v.iter().enumerate().take(n) {
            // A datagram larger than the slot: the kernel says so; its length is unknown
            // beyond SLOT (UDP's own limit is below it, so this does not happen).
            self.lens[i] = m.msg_len as usize;
            self.namelens[i] = m.msg_hdr.msg_namelen as usize;
            self.ctrllens[i] = m.msg_hdr.msg_controllen;
            self.flags[i] = m.msg_hdr.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC);
        }
        self.head = 0;
        self.count = n;
        STATS.rx_batches.fetch_add(1, Ordering::Relaxed);
        STATS.rx_datagrams.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

pub enum Rx {
    Mmsg(MmsgQ),
    /// The ring, and the socket's own queue for datagrams too large for it ([`super::ring`]).
    Ring {
        ring: Ring,
        synth: Box<Synth>,
        pktinfo: bool,
        big: MmsgQ,
    },
}

impl Rx {
    pub fn mmsg() -> Rx {
        Rx::Mmsg(MmsgQ::new())
    }

    pub fn ring(ring: Ring, pktinfo: bool) -> Rx {
        Rx::Ring {
            ring,
            synth: Box::new(Synth::new()),
            pktinfo,
            big: MmsgQ::new(),
        }
    }

    fn has_data(&self) -> bool {
        match self {
            Rx::Mmsg(q) => q.count > 0,
            Rx::Ring { ring, big, .. } => ring.ready() || big.count > 0,
        }
    }

    /// Hand the head datagram to `f`; pop it unless `peek`.
    fn take<R>(&mut self, peek: bool, f: impl FnOnce(&Dg) -> R) -> Option<R> {
        match self {
            Rx::Mmsg(q) => {
                let r = f(&q.head()?);
                if !peek {
                    q.pop();
                }
                Some(r)
            }
            Rx::Ring {
                ring,
                synth,
                pktinfo,
                big,
            } => {
                let Some((p, len)) = ring.peek(*pktinfo, synth) else {
                    let r = f(&big.head()?);
                    if !peek {
                        big.pop();
                    }
                    return Some(r);
                };
                // SAFETY: p/len point into the ring frame at the head, which stays ours
                // until `pop` below.
                let data = unsafe { std::slice::from_raw_parts(p, len) };
                // SAFETY: as in MmsgQ::head.
                let name = unsafe {
                    std::slice::from_raw_parts(&synth.name as *const _ as *const u8, synth.namelen)
                };
                let r = f(&Dg {
                    data,
                    full: len,
                    name,
                    ctrl: &synth.ctrl[..synth.ctrllen],
                    kflags: 0,
                });
                if !peek {
                    ring.pop();
                    STATS.rx_datagrams.fetch_add(1, Ordering::Relaxed);
                }
                Some(r)
            }
        }
    }
}

/// Datagrams queued by the program, sent together.
struct Tx {
    data: Vec<Vec<u8>>,
    names: Vec<libc::sockaddr_storage>,
    namelens: [u32; BATCH],
    ctrl: Vec<Vec<u8>>,
    flags: [i32; BATCH],
    n: usize,
}

impl Tx {
    fn new() -> Tx {
        Tx {
            data: vec![Vec::new(); BATCH],
            names: vec![zeroed_ss(); BATCH],
            namelens: [0; BATCH],
            ctrl: vec![Vec::new(); BATCH],
            flags: [0; BATCH],
            n: 0,
        }
    }

    fn flush(&mut self, fd: i32) {
        if self.n == 0 {
            return;
        }
        // SAFETY: plain data; all-zero is valid.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut v: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..self.n {
            iov[i] = libc::iovec {
                iov_base: self.data[i].as_mut_ptr() as *mut _,
                iov_len: self.data[i].len(),
            };
            let h = &mut v[i].msg_hdr;
            h.msg_name = &mut self.names[i] as *mut _ as *mut _;
            h.msg_namelen = self.namelens[i];
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            if !self.ctrl[i].is_empty() {
                h.msg_control = self.ctrl[i].as_mut_ptr() as *mut _;
                h.msg_controllen = self.ctrl[i].len();
            }
        }
        let mut i = 0;
        while i < self.n {
            // sendmmsg takes one set of flags: send runs of equal flags together.
            let f = self.flags[i];
            let mut j = i + 1;
            while j < self.n && self.flags[j] == f {
                j += 1;
            }
            // SAFETY: v[i..j] point at our queued buffers, alive until the end of flush.
            match unsafe {
                sock::sendmmsg(
                    fd,
                    v[i..].as_mut_ptr(),
                    (j - i) as u32,
                    f | libc::MSG_NOSIGNAL,
                )
            } {
                Ok(k) if k > 0 => {
                    STATS.tx_batches.fetch_add(1, Ordering::Relaxed);
                    STATS.tx_datagrams.fetch_add(k as u64, Ordering::Relaxed);
                    i += k;
                }
                Err(libc::EINTR) => {}
                Ok(_) | Err(_) => {
                    // The datagram at i failed: it is dropped and counted (module docs).
                    STATS.tx_errors.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            }
        }
        self.n = 0;
    }
}

pub struct UdpSock {
    /// The kernel socket (every dup of it refers to the same open file).
    pub fd: i32,
    pub ipv6: bool,
    pub rx: Mutex<Rx>,
    tx: Mutex<Tx>,
    /// Datagrams waiting in `tx` (read without the lock by `before_block`).
    pub queued: std::sync::atomic::AtomicUsize,
    fds: Mutex<Vec<i32>>,
    /// Threads blocked (or about to block) waiting for input on this socket. Changed only
    /// under the `rx` lock, so that a thread leaving datagrams in the queue sees them.
    waiters: std::sync::atomic::AtomicUsize,
    /// An eventfd rung when datagrams are left in the user-space queue while threads wait:
    /// they wait on the kernel, which does not know about the queue.
    wake: i32,
    /// `wake` was rung and not yet reset (so a waiter that wakes reads it only then).
    rung: std::sync::atomic::AtomicBool,
    /// What a thread waiting for input polls: an epoll descriptor over the socket, `wake`
    /// and (ring) the packet socket; -1 if it could not be made (then the socket itself).
    wait_fd: i32,
}

impl Drop for UdpSock {
    fn drop(&mut self) {
        for fd in [self.wake, self.own_wait_fd()] {
            if fd >= 0 {
                let _ = sys::close(fd);
            }
        }
    }
}

/// What a receive call asks for, in a C caller's msghdr.
const RX_FLAGS: i32 = libc::MSG_PEEK
    | libc::MSG_DONTWAIT
    | libc::MSG_TRUNC
    | libc::MSG_WAITALL
    | libc::MSG_CMSG_CLOEXEC;
const TX_FLAGS: i32 = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_CONFIRM;

impl UdpSock {
    pub fn new(fd: i32, ipv6: bool, rx: Rx) -> UdpSock {
        let wake = sock::eventfd().map(|f| f as i32).unwrap_or(-1);
        let wait_fd = match &rx {
            // The ring's epoll descriptor already watches the ring and the socket.
            Rx::Ring { ring, .. } => {
                if wake >= 0 {
                    let _ = sock::epoll_add(ring.efd, wake, libc::EPOLLIN as u32);
                }
                ring.efd
            }
            Rx::Mmsg(_) => match sock::epoll_create() {
                Ok(e) => {
                    let e = e as i32;
                    let ok = sock::epoll_add(e, fd, libc::EPOLLIN as u32).is_ok()
                        && (wake < 0 || sock::epoll_add(e, wake, libc::EPOLLIN as u32).is_ok());
                    if ok {
                        e
                    } else {
                        let _ = sys::close(e);
                        -1
                    }
                }
                Err(_) => -1,
            },
        };
        UdpSock {
            fd,
            ipv6,
            rx: Mutex::new(rx),
            tx: Mutex::new(Tx::new()),
            queued: 0.into(),
            fds: Mutex::new(vec![fd]),
            waiters: 0.into(),
            wake,
            rung: false.into(),
            wait_fd,
        }
    }

    /// `wait_fd` when it is ours to close (the ring closes its own).
    fn own_wait_fd(&self) -> i32 {
        match &*lock(&self.rx) {
            Rx::Ring { .. } => -1,
            Rx::Mmsg(_) => self.wait_fd,
        }
    }

    /// After a datagram was taken (under the rx lock): if more are queued and threads
    /// wait in the kernel, wake them.
    fn wake_waiters(&self, rx: &Rx) {
        if self.wake >= 0 && self.waiters.load(Ordering::Relaxed) > 0 && rx.has_data() {
            self.ring_wake();
        }
    }

    fn ring_wake(&self) {
        self.rung.store(true, Ordering::Release);
        let _ = sys::write(self.wake, &1u64.to_ne_bytes());
    }

    /// A waiting thread woke: reset the doorbell (whoever finds the queue empty waits again).
    fn drain_wake(&self) {
        if self.wake >= 0 && self.rung.swap(false, Ordering::Acquire) {
            let mut b = [0u8; 8];
            let _ = sys::read(self.wake, &mut b);
        }
    }

    pub fn is_ring(&self) -> bool {
        matches!(*lock(&self.rx), Rx::Ring { .. })
    }

    /// Ring mode: a later `setsockopt` changes which control messages the program wants.
    pub fn set_pktinfo(&self, on: bool) {
        if let Rx::Ring { pktinfo, .. } = &mut *lock(&self.rx) {
            *pktinfo = on;
        }
    }

    pub fn flush(&self) {
        let mut tx = lock(&self.tx);
        tx.flush(self.fd);
        self.queued.store(0, Ordering::Relaxed);
    }

    fn nonblocking(&self) -> bool {
        sys::fcntl(self.fd, libc::F_GETFL, 0)
            .map(|f| f as i32 & libc::O_NONBLOCK != 0)
            .unwrap_or(false)
    }

    /// recvmsg(2) on this socket, into the C caller's `msg`.
    ///
    /// # Safety
    /// `msg` must be a valid msghdr whose buffers are writable for the lengths it gives.
    pub unsafe fn recvmsg(&self, msg: *mut libc::msghdr, flags: i32) -> Res {
        if flags & !RX_FLAGS != 0 {
            // SAFETY: the caller's arguments, passed through.
            return unsafe { sock::recvmsg(self.fd, msg, flags) };
        }
        let peek = flags & libc::MSG_PEEK != 0;
        loop {
            {
                let mut rx = lock(&self.rx);
                // SAFETY: msg is the caller's valid msghdr.
                if let Some(n) = rx.take(peek, |d| unsafe { copy_out(d, msg, flags) }) {
                    self.wake_waiters(&rx);
                    return Ok(n);
                }
                let (Rx::Mmsg(q) | Rx::Ring { big: q, .. }) = &mut *rx;
                match q.fill(self.fd, libc::MSG_DONTWAIT) {
                    Ok(n) if n > 0 => continue,
                    Ok(_) | Err(libc::EAGAIN) => {}
                    Err(e) => return Err(e),
                }
                // Counted while the queue is seen empty (see `waiters`).
                self.waiters.fetch_add(1, Ordering::Relaxed);
            }
            // Nothing here: what we queued to send goes out before the program waits.
            before_block();
            let r = if flags & libc::MSG_DONTWAIT != 0 || self.nonblocking() {
                Err(libc::EAGAIN)
            } else {
                self.block_for_input()
            };
            self.waiters.fetch_sub(1, Ordering::Relaxed);
            self.drain_wake();
            r?;
        }
    }

    /// Wait until input may be there, honouring SO_RCVTIMEO.
    fn block_for_input(&self) -> Result<(), i32> {
        let mut tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        let _ = sock::getsockopt_val(self.fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &mut tv);
        let timeout = if tv.tv_sec == 0 && tv.tv_usec == 0 {
            None
        } else {
            Some(tv.tv_sec as u64 * 1000 + (tv.tv_usec as u64).div_ceil(1000))
        };
        let (wfd, ev) = self
            .wait_on(self.fd, libc::POLLIN)
            .unwrap_or((self.fd, libc::POLLIN));
        let mut p = [libc::pollfd {
            fd: wfd,
            events: ev,
            revents: 0,
        }];
        match sys::poll(&mut p, timeout)? {
            0 => Err(libc::EAGAIN),
            _ => Ok(()),
        }
    }

    /// sendmsg(2) on this socket: queued (module docs), or straight to the kernel.
    ///
    /// # Safety
    /// `msg` must be a valid msghdr whose buffers are readable for the lengths it gives.
    pub unsafe fn sendmsg(&self, msg: *const libc::msghdr, flags: i32) -> Res {
        // SAFETY: the caller vouches for msg.
        let m = unsafe { &*msg };
        let iovs: &[libc::iovec] = if m.msg_iovlen == 0 || m.msg_iov.is_null() {
            &[]
        } else {
            // SAFETY: the caller's iovec array of msg_iovlen entries.
            unsafe { std::slice::from_raw_parts(m.msg_iov, m.msg_iovlen) }
        };
        let total: usize = iovs.iter().map(|v| v.iov_len).sum();
        let direct = flags & !TX_FLAGS != 0
            || m.msg_name.is_null()
            || m.msg_namelen as usize > std::mem::size_of::<libc::sockaddr_storage>()
            || m.msg_namelen < 2
            || total > SLOT
            || m.msg_controllen > CTRL
            || (m.msg_controllen > 0 && m.msg_control.is_null());
        if !direct {
            // SAFETY: msg_namelen >= 2: the family field is there.
            let fam = unsafe { *(m.msg_name as *const u16) } as i32;
            let want = if self.ipv6 {
                libc::AF_INET6
            } else {
                libc::AF_INET
            };
            let minlen = if self.ipv6 {
                std::mem::size_of::<libc::sockaddr_in6>()
            } else {
                std::mem::size_of::<libc::sockaddr_in>()
            };
            if fam == want && m.msg_namelen as usize >= minlen {
                let mut tx = lock(&self.tx);
                let i = tx.n;
                let d = &mut tx.data[i];
                d.clear();
                for v in iovs {
                    if v.iov_len > 0 {
                        // SAFETY: the caller's iovec: iov_len readable bytes at iov_base.
                        d.extend_from_slice(unsafe {
                            std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len)
                        });
                    }
                }
                // SAFETY: msg_namelen <= sizeof(sockaddr_storage) bytes of the caller's name.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        m.msg_name as *const u8,
                        &mut tx.names[i] as *mut _ as *mut u8,
                        m.msg_namelen as usize,
                    )
                };
                tx.namelens[i] = m.msg_namelen;
                let c = &mut tx.ctrl[i];
                c.clear();
                if m.msg_controllen > 0 {
                    // SAFETY: msg_controllen readable bytes at msg_control.
                    c.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(m.msg_control as *const u8, m.msg_controllen)
                    });
                }
                tx.flags[i] = flags;
                tx.n += 1;
                if tx.n == BATCH {
                    tx.flush(self.fd);
                    self.queued.store(0, Ordering::Relaxed);
                } else if self.queued.fetch_add(1, Ordering::Relaxed) == 0 {
                    PENDING.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(total);
            }
        }
        // Straight to the kernel, after what was queued before it.
        self.flush();
        // SAFETY: the caller's arguments, passed through.
        unsafe { sock::sendmsg(self.fd, msg, flags) }
    }

    pub fn add_fd(&self, fd: i32) {
        lock(&self.fds).push(fd);
    }

    /// Forget `fd`; true when it was the last descriptor of this socket.
    pub fn remove_fd(&self, fd: i32) -> bool {
        let mut f = lock(&self.fds);
        f.retain(|&x| x != fd);
        f.is_empty()
    }
}

/// Copy datagram `d` into the caller's msghdr as recvmsg(2) would; the return value.
///
/// # Safety
/// `msg` must be a valid msghdr whose buffers are writable for the lengths it gives.
unsafe fn copy_out(d: &Dg, msg: *mut libc::msghdr, flags: i32) -> usize {
    // SAFETY: the caller vouches for msg.
    let m = unsafe { &mut *msg };
    let mut out_flags = d.kflags;
    if !m.msg_name.is_null() {
        let n = (m.msg_namelen as usize).min(d.name.len());
        // SAFETY: msg_namelen writable bytes at msg_name; n is at most that.
        unsafe { std::ptr::copy_nonoverlapping(d.name.as_ptr(), m.msg_name as *mut u8, n) };
    }
    m.msg_namelen = d.name.len() as u32;
    let mut done = 0;
    if !m.msg_iov.is_null() {
        // SAFETY: the caller's iovec array.
        let iovs = unsafe { std::slice::from_raw_parts(m.msg_iov, m.msg_iovlen) };
        for v in iovs {
            if done == d.data.len() {
                break;
            }
            let n = v.iov_len.min(d.data.len() - done);
            if n > 0 {
                // SAFETY: iov_len writable bytes at iov_base; n is at most that.
                unsafe {
                    std::ptr::copy_nonoverlapping(d.data[done..].as_ptr(), v.iov_base as *mut u8, n)
                };
            }
            done += n;
        }
    }
    if done < d.full {
        out_flags |= libc::MSG_TRUNC;
    }
    // Control messages: whole ones while they fit, MSG_CTRUNC if any did not.
    let room = if m.msg_control.is_null() {
        0
    } else {
        m.msg_controllen
    };
    let mut at = 0;
    while at + CMSG_HDR <= d.ctrl.len() {
        // SAFETY: at + CMSG_HDR bytes are inside d.ctrl.
        let hdr =
            unsafe { std::ptr::read_unaligned(d.ctrl[at..].as_ptr() as *const libc::cmsghdr) };
        let len = hdr.cmsg_len as usize;
        if len < CMSG_HDR || at + len > d.ctrl.len() {
            break;
        }
        let space = cmsg_align(len).min(d.ctrl.len() - at);
        if at + len > room {
            out_flags |= libc::MSG_CTRUNC;
            break;
        }
        let n = space.min(room - at);
        // SAFETY: room writable bytes at msg_control; at + n <= room.
        unsafe {
            std::ptr::copy_nonoverlapping(
                d.ctrl[at..].as_ptr(),
                (m.msg_control as *mut u8).add(at),
                n,
            )
        };
        at += n;
    }
    if !m.msg_control.is_null() {
        m.msg_controllen = at;
    }
    m.msg_flags = out_flags;
    if flags & libc::MSG_TRUNC != 0 {
        d.full
    } else {
        done
    }
}

impl Virtual for UdpSock {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn revents(&self, _fd: i32, events: i16) -> i16 {
        let ring = {
            let rx = lock(&self.rx);
            if events & libc::POLLIN != 0 && rx.has_data() {
                return libc::POLLIN
                    | (events & (libc::POLLOUT | libc::POLLWRNORM))
                    | (events & libc::POLLRDNORM);
            }
            match &*rx {
                Rx::Ring { ring, .. } => Some(ring.fd),
                Rx::Mmsg(_) => None,
            }
        };
        match ring {
            // Nothing batched: the kernel socket says (one poll with no wait).
            None => {
                let mut p = [libc::pollfd {
                    fd: self.fd,
                    events,
                    revents: 0,
                }];
                match sys::poll(&mut p, Some(0)) {
                    Ok(_) => p[0].revents,
                    Err(_) => 0,
                }
            }
            // Nothing batched: input is in the ring or the socket (the epoll descriptor
            // watches both); writability and errors are the socket's.
            Some(ring_fd) => {
                let rest = events & !(libc::POLLIN | libc::POLLRDNORM);
                let mut p = [
                    libc::pollfd {
                        fd: if events & libc::POLLIN != 0 {
                            ring_fd
                        } else {
                            -1
                        },
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: self.fd,
                        events: events | libc::POLLIN,
                        revents: 0,
                    },
                ];
                match sys::poll(&mut p, Some(0)) {
                    Ok(_) => {
                        let input = if p[0].revents != 0 || p[1].revents & libc::POLLIN != 0 {
                            events & (libc::POLLIN | libc::POLLRDNORM)
                        } else {
                            0
                        };
                        input | (p[1].revents & rest)
                    }
                    Err(_) => 0,
                }
            }
        }
    }

    fn wait_on(&self, fd: i32, events: i16) -> Option<(i32, i16)> {
        // Input only: the epoll descriptor (socket, doorbell, ring). With POLLOUT too, the
        // socket itself (a UDP socket is writable nearly always, so such a wait is short).
        if events & !(libc::POLLIN | libc::POLLRDNORM) == 0 && self.wait_fd >= 0 {
            return Some((self.wait_fd, libc::POLLIN));
        }
        match &*lock(&self.rx) {
            Rx::Ring { ring, .. } if events & libc::POLLIN != 0 => Some((ring.efd, libc::POLLIN)),
            _ => Some((fd, events)),
        }
    }

    fn arm(&self, _fd: i32, events: i16) {
        if events & libc::POLLIN != 0 {
            let rx = lock(&self.rx);
            self.waiters.fetch_add(1, Ordering::Relaxed);
            // Queued since the caller last looked: ring now, so the wait returns at once.
            if rx.has_data() && self.wake >= 0 {
                self.ring_wake();
            }
        }
    }

    fn disarm(&self, _fd: i32, events: i16) {
        if events & libc::POLLIN != 0 {
            self.waiters.fetch_sub(1, Ordering::Relaxed);
            self.drain_wake();
        }
    }

    fn dup(&self, _old: i32, new: i32) {
        self.add_fd(new);
        alias(self, new);
    }

    fn close(&self, fd: i32) {
        self.flush();
        unalias(fd);
        self.remove_fd(fd);
    }
}

/// Sockets with datagrams waiting to be sent (so [`before_block`] costs one load when none).
static PENDING: AtomicUsize = AtomicUsize::new(0);
static SOCKS: RwLock<Vec<Option<Arc<UdpSock>>>> = RwLock::new(Vec::new());

/// Flush batched sends before the thread blocks.
pub fn before_block() {
    if PENDING.load(Ordering::Relaxed) == 0 {
        return;
    }
    PENDING.store(0, Ordering::Relaxed);
    for s in all_socks() {
        if s.queued.load(Ordering::Relaxed) != 0 {
            s.flush();
        }
    }
}

/// Every batched socket of this process, taken out of the table (the flushes run
/// without its lock).
fn all_socks() -> Vec<Arc<UdpSock>> {
    SOCKS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .flatten()
        .cloned()
        .collect()
}

/// Flush every batched socket (before `fork`, at exit).
pub fn flush_all() {
    for s in all_socks() {
        s.flush();
    }
}

/// The batched socket behind `fd`, if any.
pub fn get(fd: i32) -> Option<Arc<UdpSock>> {
    if !vfd::is_virtual(fd) {
        return None;
    }
    SOCKS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(fd as usize)
        .and_then(|s| s.clone())
}

pub fn put(fd: i32, s: Option<Arc<UdpSock>>) {
    let mut t = SOCKS.write().unwrap_or_else(|p| p.into_inner());
    if t.len() <= fd as usize {
        t.resize(fd as usize + 1, None);
    }
    t[fd as usize] = s;
}

/// `new` is another descriptor of socket `s` (dup).
fn alias(s: &UdpSock, new: i32) {
    let found = SOCKS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .flatten()
        .find(|x| std::ptr::eq(Arc::as_ptr(x), s))
        .cloned();
    if let Some(a) = found {
        put(new, Some(a));
    }
}

/// `fd` was closed.
fn unalias(fd: i32) {
    if fd >= 0 && (fd as usize) < vfd::MAX_FD {
        put(fd, None);
    }
}
