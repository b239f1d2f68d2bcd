//! One notification, answered: which class the fd is, and the call carried out on the
//! caller's behalf under the budget (see the parent module for the rules and limits).
//!
//! Owns: the target's memory and fds as seen from the supervisor (`Target`), the
//! blocking discipline for sockets (`Target::sock_call`), and the per-call emulations.
//! Settling follows `preload/src/shape.rs`: a NET call is cut to its grant and refunds the
//! rest; a NET_DGRAM call is never cut and pays what it moved beyond the grant; a DISK call
//! waits for the budget to be out of debt and pays what it moved. A caller that died
//! before its call ran gets its grant refunded; bytes that did cross the network or the
//! disk are charged even when the answer can no longer be delivered.

use super::Pool;
use crate::config::{effective_priority, Resource};
use crate::shaper::Shaper;
use std::io;
use std::mem::{offset_of, size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// What the supervisor answers.
pub(crate) enum Answer {
    /// Let the kernel run the call as it is.
    Continue,
    /// The call's return value.
    Ret(i64),
    /// The call failed with this errno.
    Err(i32),
}

/// Why an emulated call stopped without a result.
enum Fail {
    /// The caller is gone (its notification is no longer valid).
    Dead,
    Errno(i32),
}

impl From<Fail> for Answer {
    fn from(f: Fail) -> Answer {
        match f {
            Fail::Dead => Answer::Err(libc::EINTR),
            Fail::Errno(e) => Answer::Err(e),
        }
    }
}

const ERESTARTSYS: i32 = 512;
/// Largest piece moved per system call on the supervisor's side.
const CHUNK: usize = 1 << 20;
/// Largest datagram buffer (an IPv4/IPv6 datagram is below 64 KiB; GSO sends up to 64 KiB
/// of segments too).
const DGRAM_MAX: usize = 1 << 17;
/// Largest control data copied for sendmsg/recvmsg.
const CONTROL_MAX: usize = 1 << 16;
/// Poll slice of a blocking socket call.
const SLICE_MS: i32 = 50;
const UIO_MAXIOV: u64 = 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Net,
    Dgram,
    Disk,
    Other,
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn res(r: isize) -> Result<usize, Fail> {
    if r < 0 {
        Err(Fail::Errno(errno()))
    } else {
        Ok(r as usize)
    }
}

/// The class of an fd (the preload library's rule), and its file identity.
fn classify(fd: &OwnedFd) -> (Class, (u64, u64)) {
    // SAFETY: fstat into a zeroed stat of a valid fd.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return (Class::Other, (0, 0));
    }
    let id = (st.st_dev, st.st_ino);
    let c = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG | libc::S_IFBLK => Class::Disk,
        libc::S_IFSOCK => match (sockopt(fd, libc::SO_DOMAIN), sockopt(fd, libc::SO_TYPE)) {
            (Some(libc::AF_INET | libc::AF_INET6), Some(libc::SOCK_STREAM)) => Class::Net,
            (Some(libc::AF_INET | libc::AF_INET6), Some(_)) => Class::Dgram,
            _ => Class::Other,
        },
        _ => Class::Other,
    };
    (c, id)
}

fn sockopt(fd: &OwnedFd, opt: i32) -> Option<i32> {
    let mut v: i32 = 0;
    let mut l = size_of::<i32>() as libc::socklen_t;
    // SAFETY: v and l are valid for getsockopt's int-valued options.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut i32).cast(),
            &mut l,
        )
    };
    (r == 0).then_some(v)
}

/// The socket's SO_RCVTIMEO / SO_SNDTIMEO in nanoseconds, if set.
fn timeo(fd: &OwnedFd, opt: i32) -> Option<u64> {
    // SAFETY: zeroed timeval is valid; getsockopt writes at most l bytes.
    let mut tv: libc::timeval = unsafe { zeroed() };
    let mut l = size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: as above.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&mut tv as *mut libc::timeval).cast(),
            &mut l,
        )
    };
    let ns = tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    (r == 0 && ns > 0).then_some(ns)
}

/// A zeroed buffer aligned to 4 KiB, so that calls on `O_DIRECT` files (whose flag the
/// copied fd shares) accept it.
struct Aligned {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl Aligned {
    const ALIGN: usize = 4096;

    fn new(len: usize) -> Aligned {
        let layout =
            std::alloc::Layout::from_size_align(len.max(1), Self::ALIGN).expect("buffer size");
        // SAFETY: the layout has a nonzero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Aligned { ptr, len }
    }
}

impl std::ops::Deref for Aligned {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr holds len initialized (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this very layout.
        unsafe {
            std::alloc::dealloc(
                self.ptr.as_ptr(),
                std::alloc::Layout::from_size_align_unchecked(self.len.max(1), Self::ALIGN),
            )
        };
    }
}

// SAFETY: Aligned owns its memory exclusively, like a Vec<u8>.
unsafe impl Send for Aligned {}

/// A range of the target's memory.
type Span = (u64, usize);

/// `v` after skipping `skip` bytes, at most `len` bytes long.
fn sub(v: &[Span], mut skip: usize, mut len: usize) -> Vec<Span> {
    let mut out = Vec::new();
    for &(a, l) in v {
        if len == 0 {
            break;
        }
        if skip >= l {
            skip -= l;
            continue;
        }
        let k = (l - skip).min(len);
        out.push((a + skip as u64, k));
        len -= k;
        skip = 0;
    }
    out
}

fn total(v: &[Span]) -> Result<usize, Fail> {
    let mut t: usize = 0;
    for &(_, l) in v {
        t = t
            .checked_add(l)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or(Fail::Errno(libc::EINVAL))?;
    }
    Ok(t)
}

/// The caller of one notification.
struct Target<'a> {
    pool: &'a Pool,
    id: u64,
    tid: i32,
    pidfd: OwnedFd,
}

impl<'a> Target<'a> {
    fn open(pool: &'a Pool, n: &libc::seccomp_notif) -> Option<Target<'a>> {
        let tid = n.pid as i32;
        // SAFETY: pidfd_open takes a pid and flags; the result is a new fd or -1.
        let mut fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid, libc::PIDFD_THREAD) };
        if fd < 0 {
            // before Linux 6.9: the thread group's pidfd (the fd table is the group's
            // unless the thread unshared it)
            let tgid = tgid(tid)?;
            // SAFETY: as above.
            fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0) };
        }
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is a fresh pidfd, ours.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let t = Target {
            pool,
            id: n.id,
            tid,
            pidfd,
        };
        // the tid may have been reused between the notification and pidfd_open
        t.valid().then_some(t)
    }

    fn valid(&self) -> bool {
        self.pool.valid(self.id)
    }

    /// A copy of the caller's fd `fd` (same open file description).
    fn getfd(&self, fd: u64) -> Option<OwnedFd> {
        let fd = fd as u32 as i32;
        if fd < 0 {
            return None;
        }
        // SAFETY: pidfd_getfd returns a new fd (close-on-exec) or -1.
        let d = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.pidfd.as_raw_fd(), fd, 0) };
        // SAFETY: d is a fresh fd, ours.
        (d >= 0).then(|| unsafe { OwnedFd::from_raw_fd(d as RawFd) })
    }

    /// Read up to `buf.len()` bytes from the caller's `spans`; returns bytes read.
    fn read(&self, spans: &[Span], buf: &mut [u8]) -> usize {
        let spans = sub(spans, 0, buf.len());
        if spans.is_empty() {
            return 0;
        }
        let remote: Vec<libc::iovec> = spans
            .iter()
            .map(|&(a, l)| libc::iovec {
                iov_base: a as *mut _,
                iov_len: l,
            })
            .collect();
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: local describes buf; remote addresses are the caller's, checked by the
        // kernel against its address space.
        let r = unsafe {
            libc::process_vm_readv(
                self.tid,
                &local,
                1,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        r.max(0) as usize
    }

    /// Write `data` into the caller's `spans`; returns bytes written.
    fn write(&self, spans: &[Span], data: &[u8]) -> usize {
        let spans = sub(spans, 0, data.len());
        if spans.is_empty() {
            return 0;
        }
        let remote: Vec<libc::iovec> = spans
            .iter()
            .map(|&(a, l)| libc::iovec {
                iov_base: a as *mut _,
                iov_len: l,
            })
            .collect();
        let local = libc::iovec {
            iov_base: data.as_ptr() as *mut _,
            iov_len: data.len(),
        };
        // SAFETY: local describes data (read only by the kernel); remote as in `read`.
        let r = unsafe {
            libc::process_vm_writev(
                self.tid,
                &local,
                1,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        r.max(0) as usize
    }

    fn read_exact(&self, addr: u64, len: usize) -> Result<Vec<u8>, Fail> {
        let mut b = vec![0u8; len];
        if len > 0 && self.read(&[(addr, len)], &mut b) != len {
            return Err(Fail::Errno(libc::EFAULT));
        }
        Ok(b)
    }

    fn write_exact(&self, addr: u64, data: &[u8]) -> Result<(), Fail> {
        if !data.is_empty() && self.write(&[(addr, data.len())], data) != data.len() {
            return Err(Fail::Errno(libc::EFAULT));
        }
        Ok(())
    }

    /// A plain-data struct from the caller's memory.
    fn get<T: Copy>(&self, addr: u64) -> Result<T, Fail> {
        let b = self.read_exact(addr, size_of::<T>())?;
        // SAFETY: T is one of the kernel ABI structs used here (msghdr, iovec, integers),
        // for which every bit pattern is valid; b holds size_of::<T>() bytes.
        Ok(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
    }

    fn put<T: Copy>(&self, addr: u64, v: T) -> Result<(), Fail> {
        // SAFETY: viewing a Copy value as its bytes.
        let b =
            unsafe { std::slice::from_raw_parts((&v as *const T).cast::<u8>(), size_of::<T>()) };
        self.write_exact(addr, b)
    }

    /// The caller's iovec array.
    fn iovecs(&self, addr: u64, cnt: u64) -> Result<Vec<Span>, Fail> {
        if cnt > UIO_MAXIOV {
            return Err(Fail::Errno(libc::EINVAL));
        }
        let b = self.read_exact(addr, cnt as usize * 16)?;
        Ok(b.chunks_exact(16)
            .map(|c| {
                (
                    u64::from_ne_bytes(c[..8].try_into().unwrap()),
                    u64::from_ne_bytes(c[8..].try_into().unwrap()) as usize,
                )
            })
            .collect())
    }

    /// Has the caller a signal it will take as soon as its call returns (pending, not
    /// blocked, not ignored, and sent to this thread: thread-directed, or process-directed
    /// to a single-threaded process)? Only then is `-ERESTARTSYS` safe to answer: the
    /// kernel has marked this thread's signal work, so the code is turned into a restart
    /// or EINTR on the way out and never reaches the program. A process-directed signal in
    /// a multi-threaded program may go to another thread; it is left to the kernel (if it
    /// did pick this one, it waits for the supervised call to finish).
    fn signal_pending(&self) -> bool {
        let Ok(s) = std::fs::read_to_string(format!("/proc/{}/status", self.tid)) else {
            return false;
        };
        let field = |name: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(0)
        };
        let threads = s
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let shared = if threads == 1 { field("ShdPnd:") } else { 0 };
        (field("SigPnd:") | shared) & !field("SigBlk:") & !field("SigIgn:") != 0
    }

    /// Raise SIGPIPE in the caller (what a native send/write does on EPIPE).
    fn sigpipe(&self) {
        // SAFETY: pidfd_send_signal on our pidfd with no siginfo.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                libc::SIGPIPE,
                std::ptr::null::<u8>(),
                0,
            )
        };
    }

    /// Run `call(flags)` on socket `fd` as the caller's blocking mode says, without ever
    /// blocking the supervisor: a non-blocking caller gets one attempt; a blocking one
    /// waits for `events` in slices, watching for its death, its signals and the socket's
    /// timeout, and each attempt is made with MSG_DONTWAIT. Right before each attempt the
    /// caller is checked alive, so nothing is taken for the dead.
    fn sock_call(
        &self,
        fd: &OwnedFd,
        events: i16,
        user_flags: i32,
        mut call: impl FnMut(i32) -> isize,
    ) -> Result<usize, Fail> {
        // SAFETY: F_GETFL on a valid fd.
        let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        let nonblock =
            user_flags & libc::MSG_DONTWAIT != 0 || (fl >= 0 && fl & libc::O_NONBLOCK != 0);
        let deadline = timeo(
            fd,
            if events == libc::POLLIN {
                libc::SO_RCVTIMEO
            } else {
                libc::SO_SNDTIMEO
            },
        )
        .map(|t| crate::bucket::now_ns() + t);
        let flags = user_flags
            | libc::MSG_DONTWAIT
            | if events == libc::POLLOUT {
                libc::MSG_NOSIGNAL
            } else {
                0
            };
        loop {
            if !nonblock {
                loop {
                    let mut p = libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    let r = unsafe { libc::poll(&mut p, 1, SLICE_MS) };
                    if r > 0 {
                        break;
                    }
                    if !self.valid() {
                        return Err(Fail::Dead);
                    }
                    if self.signal_pending() {
                        return Err(Fail::Errno(ERESTARTSYS));
                    }
                    if deadline.is_some_and(|d| crate::bucket::now_ns() >= d) {
                        return Err(Fail::Errno(libc::EAGAIN));
                    }
                }
            }
            if !self.valid() {
                return Err(Fail::Dead);
            }
            let r = call(flags);
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = errno();
            match e {
                libc::EAGAIN if !nonblock => continue,
                libc::EINTR => continue,
                libc::EPIPE if events == libc::POLLOUT && user_flags & libc::MSG_NOSIGNAL == 0 => {
                    self.sigpipe();
                    return Err(Fail::Errno(e));
                }
                _ => return Err(Fail::Errno(e)),
            }
        }
    }
}

fn tgid(tid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// One supervised call's context: the pool's budget, and the fd's account.
struct Ctx<'a> {
    t: Target<'a>,
    sh: Shaper<'a>,
}

impl Ctx<'_> {
    fn prio(&self, id: (u64, u64)) -> u8 {
        let c = self
            .t
            .pool
            .consumed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .copied()
            .unwrap_or(0);
        effective_priority(self.sh.shared.config().prio_policy(), self.t.pool.prio, c)
    }

    fn consumed(&self, id: (u64, u64), n: u64) {
        let mut m = self
            .t
            .pool
            .consumed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if m.len() > 4096 {
            m.clear();
        }
        *m.entry(id).or_default() += n;
    }

    fn shaped(&self, c: Class) -> bool {
        match c {
            Class::Net | Class::Dgram => self.sh.limited(Resource::Net),
            Class::Disk => self.sh.limited(Resource::Disk),
            Class::Other => false,
        }
    }

    /// A network transfer of up to `len` bytes: grant, `go(n)` with n the bytes it may
    /// move (cut for streams, whole for datagrams), settle. `go` returns (answer, moved).
    fn net(
        &self,
        c: Class,
        id: (u64, u64),
        len: usize,
        go: impl FnOnce(usize) -> Result<(i64, usize), Fail>,
    ) -> Answer {
        let granted = self.sh.net_grant(self.prio(id), len as u64);
        let n = if c == Class::Net {
            (granted as usize).min(CHUNK)
        } else {
            len.min(DGRAM_MAX)
        };
        match go(n) {
            Ok((ret, moved)) => {
                self.sh.net_done(granted, moved as u64);
                self.consumed(id, moved as u64);
                Answer::Ret(ret)
            }
            Err(f) => {
                self.sh.net_done(granted, 0);
                f.into()
            }
        }
    }

    /// A disk transfer: wait for the budget, `go()`, pay what moved.
    fn disk(&self, id: (u64, u64), go: impl FnOnce() -> Result<usize, Fail>) -> Answer {
        let began = self.sh.disk_begin(self.prio(id));
        let r = go();
        let moved = *r.as_ref().unwrap_or(&0);
        let cost = self.sh.disk_done(began, moved as u64);
        self.consumed(id, cost);
        match r {
            Ok(m) => Answer::Ret(m as i64),
            Err(f) => f.into(),
        }
    }
}

/// Answer notification `n`.
pub(crate) fn handle(pool: &Pool, n: &libc::seccomp_notif) -> Answer {
    let sh = Shaper::new(pool.seg.shared());
    if !sh.limited(Resource::Net) && !sh.limited(Resource::Disk) {
        return Answer::Continue;
    }
    let Some(t) = Target::open(pool, n) else {
        return Answer::Continue;
    };
    let ctx = Ctx { t, sh };
    let a = n.data.args;
    let nr = n.data.nr as libc::c_long;
    if nr == libc::SYS_sendfile {
        return sendfile(&ctx, a);
    }
    let Some(fd) = ctx.t.getfd(a[0]) else {
        return Answer::Continue;
    };
    let (class, id) = classify(&fd);
    if !ctx.shaped(class) {
        return Answer::Continue;
    }
    match nr {
        libc::SYS_read | libc::SYS_write | libc::SYS_pread64 | libc::SYS_pwrite64 => {
            let out = nr == libc::SYS_write || nr == libc::SYS_pwrite64;
            let off = (nr == libc::SYS_pread64 || nr == libc::SYS_pwrite64).then_some(a[3] as i64);
            rw(&ctx, &fd, class, id, out, vec![(a[1], a[2] as usize)], off)
        }
        libc::SYS_readv | libc::SYS_writev | libc::SYS_preadv | libc::SYS_pwritev => {
            let out = nr == libc::SYS_writev || nr == libc::SYS_pwritev;
            let off = (nr == libc::SYS_preadv || nr == libc::SYS_pwritev).then_some(a[3] as i64);
            match ctx.t.iovecs(a[1], a[2]) {
                Ok(v) => rw(&ctx, &fd, class, id, out, v, off),
                // let the kernel give the exact error
                Err(_) => Answer::Continue,
            }
        }
        _ if class == Class::Disk => Answer::Continue, // socket calls on a file: ENOTSOCK
        libc::SYS_recvfrom => recvfrom(&ctx, &fd, class, id, a),
        libc::SYS_sendto => sendto(&ctx, &fd, class, id, a),
        libc::SYS_recvmsg | libc::SYS_sendmsg => {
            let out = nr == libc::SYS_sendmsg;
            match msg(&ctx, &fd, class, id, out, a[1], a[2] as i32) {
                Some(a) => a,
                None => Answer::Continue,
            }
        }
        libc::SYS_recvmmsg | libc::SYS_sendmmsg => {
            mmsg(&ctx, &fd, class, id, nr == libc::SYS_sendmmsg, a)
        }
        _ => Answer::Continue,
    }
}

/// read/write/readv/writev/pread/pwrite/preadv/pwritev.
fn rw(
    ctx: &Ctx,
    fd: &OwnedFd,
    class: Class,
    id: (u64, u64),
    out: bool,
    spans: Vec<Span>,
    off: Option<i64>,
) -> Answer {
    let Ok(len) = total(&spans) else {
        return Answer::Continue;
    };
    if len == 0 {
        return Answer::Continue;
    }
    let t = &ctx.t;
    let raw = fd.as_raw_fd();
    match class {
        Class::Net | Class::Dgram => {
            if off.is_some() || (out && class == Class::Dgram && len > DGRAM_MAX) {
                return Answer::Continue; // ESPIPE / EMSGSIZE from the kernel
            }
            ctx.net(class, id, len, |n| {
                if out {
                    let mut buf = vec![0u8; n];
                    let k = t.read(&spans, &mut buf);
                    // a datagram goes whole or not at all
                    if k == 0 || (class == Class::Dgram && k < n) {
                        return Err(Fail::Errno(libc::EFAULT));
                    }
                    let m = t.sock_call(fd, libc::POLLOUT, 0, |fl| {
                        // SAFETY: buf[..k] is initialized and live.
                        unsafe { libc::send(raw, buf.as_ptr().cast(), k, fl) }
                    })?;
                    Ok((m as i64, m))
                } else {
                    let mut buf = vec![0u8; n];
                    let m = t.sock_call(fd, libc::POLLIN, 0, |fl| {
                        // SAFETY: buf is live and n bytes long.
                        unsafe { libc::recv(raw, buf.as_mut_ptr().cast(), n, fl) }
                    })?;
                    if t.write(&spans, &buf[..m]) != m {
                        return Err(Fail::Errno(libc::EFAULT));
                    }
                    Ok((m as i64, m))
                }
            })
        }
        Class::Disk => ctx.disk(id, || {
            let mut done = 0usize;
            let mut buf = Aligned::new(len.min(CHUNK));
            while done < len {
                let k = (len - done).min(CHUNK);
                let r = if out {
                    let got = t.read(&sub(&spans, done, k), &mut buf[..k]);
                    if got == 0 {
                        if done == 0 {
                            return Err(Fail::Errno(libc::EFAULT));
                        }
                        break;
                    }
                    match off {
                        // SAFETY: buf[..got] is initialized and live.
                        Some(o) => unsafe {
                            libc::pwrite(raw, buf.as_ptr().cast(), got, o + done as i64)
                        },
                        // SAFETY: as above.
                        None => unsafe { libc::write(raw, buf.as_ptr().cast(), got) },
                    }
                } else {
                    match off {
                        // SAFETY: buf is live and at least k bytes long.
                        Some(o) => unsafe {
                            libc::pread(raw, buf.as_mut_ptr().cast(), k, o + done as i64)
                        },
                        // SAFETY: as above.
                        None => unsafe { libc::read(raw, buf.as_mut_ptr().cast(), k) },
                    }
                };
                let m = match res(r) {
                    Ok(m) => m,
                    Err(f) if done == 0 => return Err(f),
                    Err(_) => break,
                };
                if !out && m > 0 && t.write(&sub(&spans, done, m), &buf[..m]) != m {
                    return if done == 0 {
                        Err(Fail::Errno(libc::EFAULT))
                    } else {
                        Ok(done)
                    };
                }
                done += m;
                if m < k {
                    break;
                }
            }
            Ok(done)
        }),
        Class::Other => Answer::Continue,
    }
}

/// recvfrom(fd, buf, len, flags, addr, addrlen*).
fn recvfrom(ctx: &Ctx, fd: &OwnedFd, class: Class, id: (u64, u64), a: [u64; 6]) -> Answer {
    let (buf_at, len, flags, addr, lenp) = (a[1], a[2] as usize, a[3] as i32, a[4], a[5]);
    if len == 0 {
        return Answer::Continue;
    }
    let t = &ctx.t;
    let raw = fd.as_raw_fd();
    let want_addr = addr != 0 && lenp != 0;
    let ulen: u32 = if want_addr {
        match t.get(lenp) {
            Ok(l) => l,
            Err(f) => return f.into(),
        }
    } else {
        0
    };
    if (ulen as i32) < 0 {
        return Answer::Err(libc::EINVAL);
    }
    ctx.net(class, id, len, |n| {
        let mut buf = vec![0u8; n];
        // SAFETY: zeroed sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
        let mut sl = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let m = t.sock_call(fd, libc::POLLIN, flags, |fl| {
            sl = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: buf (n bytes), ss and sl are live.
            unsafe {
                libc::recvfrom(
                    raw,
                    buf.as_mut_ptr().cast(),
                    n,
                    fl,
                    (&mut ss as *mut libc::sockaddr_storage).cast(),
                    &mut sl,
                )
            }
        })?;
        // MSG_TRUNC on a datagram returns its real length, which may exceed the buffer
        let copied = m.min(n);
        if t.write(&[(buf_at, len)], &buf[..copied]) != copied {
            return Err(Fail::Errno(libc::EFAULT));
        }
        if want_addr {
            // SAFETY: ss is sl (≤ its size) valid bytes.
            let sb = unsafe {
                std::slice::from_raw_parts(
                    (&ss as *const libc::sockaddr_storage).cast::<u8>(),
                    sl as usize,
                )
            };
            t.write_exact(addr, &sb[..(ulen as usize).min(sb.len())])?;
            t.put(lenp, sl)?;
        }
        Ok((m as i64, m))
    })
}

/// sendto(fd, buf, len, flags, addr, addrlen).
fn sendto(ctx: &Ctx, fd: &OwnedFd, class: Class, id: (u64, u64), a: [u64; 6]) -> Answer {
    let (buf_at, len, flags, addr, alen) = (a[1], a[2] as usize, a[3] as i32, a[4], a[5] as u32);
    if len == 0
        || alen as usize > size_of::<libc::sockaddr_storage>()
        || (class == Class::Dgram && len > DGRAM_MAX)
    {
        return Answer::Continue; // the kernel's EINVAL / EMSGSIZE
    }
    let t = &ctx.t;
    let raw = fd.as_raw_fd();
    let name = if addr != 0 {
        match t.read_exact(addr, alen as usize) {
            Ok(b) => Some(b),
            Err(f) => return f.into(),
        }
    } else {
        None
    };
    ctx.net(class, id, len, |n| {
        let mut buf = vec![0u8; n];
        let k = t.read(&[(buf_at, len)], &mut buf);
        if k == 0 || (class == Class::Dgram && k < n) {
            return Err(Fail::Errno(libc::EFAULT));
        }
        let (np, nl) = match &name {
            Some(b) => (
                b.as_ptr().cast::<libc::sockaddr>(),
                b.len() as libc::socklen_t,
            ),
            None => (std::ptr::null(), 0),
        };
        let m = t.sock_call(fd, libc::POLLOUT, flags, |fl| {
            // SAFETY: buf[..k] and the name bytes are live.
            unsafe { libc::sendto(raw, buf.as_ptr().cast(), k, fl, np, nl) }
        })?;
        Ok((m as i64, m))
    })
}

/// recvmsg/sendmsg on the caller's msghdr at `at`. Returns the answer and (through
/// `Ok`) what the call returned; None: leave the call to the kernel.
fn msg(
    ctx: &Ctx,
    fd: &OwnedFd,
    class: Class,
    id: (u64, u64),
    out: bool,
    at: u64,
    flags: i32,
) -> Option<Answer> {
    match msg_one(ctx, fd, class, id, out, at, flags) {
        Ok(Some(m)) => Some(Answer::Ret(m as i64)),
        Ok(None) => None,
        Err(f) => Some(f.into()),
    }
}

/// One message: Ok(Some(bytes)), Ok(None) to leave it to the kernel.
fn msg_one(
    ctx: &Ctx,
    fd: &OwnedFd,
    class: Class,
    id: (u64, u64),
    out: bool,
    at: u64,
    flags: i32,
) -> Result<Option<usize>, Fail> {
    let t = &ctx.t;
    let raw = fd.as_raw_fd();
    let h: libc::msghdr = t.get(at)?;
    let spans = t.iovecs(h.msg_iov as u64, h.msg_iovlen as u64)?;
    let len = total(&spans)?;
    let control_len = if h.msg_control.is_null() {
        0
    } else {
        h.msg_controllen
    };
    if control_len > CONTROL_MAX
        || (out
            && (h.msg_namelen as usize > size_of::<libc::sockaddr_storage>()
                || (class == Class::Dgram && len > DGRAM_MAX)))
    {
        // run natively after waiting for the budget, charged its length
        let g = ctx.sh.net_grant(ctx.prio(id), len as u64);
        ctx.sh.net_done(g, len as u64);
        return Ok(None);
    }
    if len == 0 && control_len == 0 {
        return Ok(None);
    }
    let answer = ctx.net(class, id, len.max(1), |n| {
        let n = n.min(len);
        let mut buf = vec![0u8; n];
        let mut name = vec![0u8; size_of::<libc::sockaddr_storage>()];
        let mut control = vec![0u8; control_len];
        // SAFETY: a zeroed msghdr is valid; it is pointed at live local buffers below.
        let mut lm: libc::msghdr = unsafe { zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: n,
        };
        lm.msg_iov = &mut iov;
        lm.msg_iovlen = 1;
        if out {
            let k = t.read(&spans, &mut buf);
            if k < n {
                return Err(Fail::Errno(libc::EFAULT));
            }
            if !h.msg_name.is_null() && h.msg_namelen > 0 {
                let nb = t.read_exact(h.msg_name as u64, h.msg_namelen as usize)?;
                name[..nb.len()].copy_from_slice(&nb);
                lm.msg_name = name.as_mut_ptr().cast();
                lm.msg_namelen = nb.len() as u32;
            }
            if control_len > 0 {
                let cb = t.read_exact(h.msg_control as u64, control_len)?;
                control.copy_from_slice(&cb);
                lm.msg_control = control.as_mut_ptr().cast();
                lm.msg_controllen = control_len;
            }
            let m = t.sock_call(fd, libc::POLLOUT, flags, |fl| {
                // SAFETY: lm points at live local buffers.
                unsafe { libc::sendmsg(raw, &lm, fl) }
            })?;
            Ok((m as i64, m))
        } else {
            let m = t.sock_call(fd, libc::POLLIN, flags, |fl| {
                lm.msg_name = if h.msg_name.is_null() {
                    std::ptr::null_mut()
                } else {
                    name.as_mut_ptr().cast()
                };
                lm.msg_namelen = if h.msg_name.is_null() {
                    0
                } else {
                    name.len() as u32
                };
                lm.msg_control = if control_len > 0 {
                    control.as_mut_ptr().cast()
                } else {
                    std::ptr::null_mut()
                };
                lm.msg_controllen = control_len;
                lm.msg_flags = 0;
                // SAFETY: lm points at live local buffers.
                unsafe { libc::recvmsg(raw, &mut lm, fl) }
            })?;
            let copied = m.min(n);
            if t.write(&spans, &buf[..copied]) != copied {
                return Err(Fail::Errno(libc::EFAULT));
            }
            if !h.msg_name.is_null() {
                let k = (lm.msg_namelen as usize)
                    .min(h.msg_namelen as usize)
                    .min(name.len());
                t.write_exact(h.msg_name as u64, &name[..k])?;
                t.put(
                    at + offset_of!(libc::msghdr, msg_namelen) as u64,
                    lm.msg_namelen,
                )?;
            }
            if control_len > 0 {
                t.write_exact(
                    h.msg_control as u64,
                    &control[..lm.msg_controllen.min(control_len)],
                )?;
            }
            t.put(
                at + offset_of!(libc::msghdr, msg_controllen) as u64,
                if control_len > 0 {
                    lm.msg_controllen
                } else {
                    0
                },
            )?;
            t.put(
                at + offset_of!(libc::msghdr, msg_flags) as u64,
                lm.msg_flags,
            )?;
            Ok((m as i64, m))
        }
    });
    match answer {
        Answer::Ret(m) => Ok(Some(m as usize)),
        Answer::Err(e) => Err(Fail::Errno(e)),
        Answer::Continue => Ok(None),
    }
}

/// recvmmsg(fd, vec, vlen, flags, timeout) / sendmmsg(fd, vec, vlen, flags): one message
/// at a time; after the first, only what can move without waiting.
fn mmsg(ctx: &Ctx, fd: &OwnedFd, class: Class, id: (u64, u64), out: bool, a: [u64; 6]) -> Answer {
    const WAITFORONE: i32 = 0x10000;
    let (vec, vlen, flags) = (
        a[1],
        (a[2] as u32).min(UIO_MAXIOV as u32),
        a[3] as i32 & !WAITFORONE,
    );
    if vlen == 0 {
        return Answer::Continue;
    }
    let stride = size_of::<libc::mmsghdr>() as u64;
    let mut count = 0u32;
    for i in 0..vlen {
        let at = vec + i as u64 * stride;
        let fl = if i == 0 || out {
            flags
        } else {
            flags | libc::MSG_DONTWAIT
        };
        match msg_one(ctx, fd, class, id, out, at, fl) {
            Ok(Some(m)) => {
                if ctx
                    .t
                    .put(at + offset_of!(libc::mmsghdr, msg_len) as u64, m as u32)
                    .is_err()
                {
                    break;
                }
                count += 1;
                // a stream send that was cut ends the batch
                if out && class == Class::Net {
                    let whole = ctx
                        .t
                        .get::<libc::msghdr>(at)
                        .ok()
                        .and_then(|h| ctx.t.iovecs(h.msg_iov as u64, h.msg_iovlen as u64).ok())
                        .and_then(|v| total(&v).ok());
                    if whole != Some(m) {
                        break;
                    }
                }
            }
            Ok(None) if i == 0 => return Answer::Continue,
            Ok(None) => break,
            Err(f) if i == 0 => return f.into(),
            Err(_) => break,
        }
    }
    Answer::Ret(count as i64)
}

/// sendfile(out, in, offset*, count): a file to a socket is read by the supervisor and
/// sent cut to the grant (the file side pays as a disk read); other pairs run natively
/// after waiting for the budget.
fn sendfile(ctx: &Ctx, a: [u64; 6]) -> Answer {
    let t = &ctx.t;
    let (offp, count) = (a[2], a[3] as usize);
    let (Some(ofd), Some(ifd)) = (t.getfd(a[0]), t.getfd(a[1])) else {
        return Answer::Continue;
    };
    let ((oc, oid), (ic, iid)) = (classify(&ofd), classify(&ifd));
    let net = matches!(oc, Class::Net | Class::Dgram) && ctx.sh.limited(Resource::Net);
    let disk = ic == Class::Disk && ctx.sh.limited(Resource::Disk);
    if count == 0 || (!net && !disk) {
        return Answer::Continue;
    }
    let iraw = ifd.as_raw_fd();
    // where the file side starts
    let pos: i64 = if offp != 0 {
        match t.get::<i64>(offp) {
            Ok(p) => p,
            Err(f) => return f.into(),
        }
    } else {
        // SAFETY: lseek on a valid fd.
        unsafe { libc::lseek(iraw, 0, libc::SEEK_CUR) }
    };
    if !net || oc != Class::Net || ic != Class::Disk || pos < 0 {
        // natively, after waiting for the budget; charged what it can move at most: the
        // request, or what a file can still give from `pos`
        let most = if ic == Class::Disk && pos >= 0 {
            (count as u64).min(ifd_size(&ifd).saturating_sub(pos as u64))
        } else {
            count as u64
        };
        if net {
            let g = ctx.sh.net_grant(ctx.prio(oid), most.max(1));
            ctx.sh.net_done(g, most);
        }
        if disk {
            let began = ctx.sh.disk_begin(ctx.prio(iid));
            ctx.sh.disk_done(began, most);
        }
        return Answer::Continue;
    }
    let oraw = ofd.as_raw_fd();
    ctx.net(oc, oid, count, |n| {
        let mut buf = Aligned::new(n);
        let began = disk.then(|| ctx.sh.disk_begin(ctx.prio(iid)));
        // SAFETY: buf has n bytes.
        let r = unsafe { libc::pread(iraw, buf.as_mut_ptr().cast(), n, pos) };
        if let Some(b) = began {
            ctx.sh.disk_done(b, r.max(0) as u64);
        }
        let k = res(r)?;
        if k == 0 {
            return Ok((0, 0));
        }
        let m = t.sock_call(&ofd, libc::POLLOUT, 0, |fl| {
            // SAFETY: buf[..k] is initialized.
            unsafe { libc::send(oraw, buf.as_ptr().cast(), k, fl) }
        })?;
        if offp != 0 {
            t.put(offp, pos + m as i64)?;
        } else {
            // SAFETY: lseek on a valid fd (the caller's shared offset moves by what was sent).
            unsafe { libc::lseek(iraw, pos + m as i64, libc::SEEK_SET) };
        }
        Ok((m as i64, m))
    })
}

fn ifd_size(fd: &OwnedFd) -> u64 {
    // SAFETY: fstat into a zeroed stat.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return u64::MAX;
    }
    if st.st_mode & libc::S_IFMT == libc::S_IFBLK {
        let mut sz: u64 = 0;
        // SAFETY: BLKGETSIZE64 writes one u64.
        if unsafe { libc::ioctl(fd.as_raw_fd(), 0x8008_1272, &mut sz) } == 0 {
            return sz;
        }
        return u64::MAX;
    }
    st.st_size as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_cut_and_skipped() {
        let v = [(100, 10), (200, 0), (300, 5)];
        assert_eq!(sub(&v, 0, 12), vec![(100, 10), (300, 2)]);
        assert_eq!(sub(&v, 8, 4), vec![(108, 2), (300, 2)]);
        assert_eq!(sub(&v, 10, 100), vec![(300, 5)]);
        assert_eq!(sub(&v, 15, 1), vec![]);
        assert!(total(&[(0, usize::MAX), (0, 1)]).is_err());
    }
}
