//! Thin, checked wrappers over the Linux system calls beltway needs: memfd, named shared
//! memory under /dev/shm, mmap, futex (wait, wake, waitv), eventfd (a ring's wake-up for
//! a consumer that waits on many things at once), process liveness, and fd passing over
//! Unix sockets (SCM_RIGHTS).
//!
//! This module and [`crate::shm`] are the only places with `unsafe`; every block carries a
//! `// SAFETY:` comment. Everything returns `io::Result` so callers can add ring context.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Create an anonymous memory file (memfd) of `len` bytes.
pub fn memfd_create(name: &str, len: u64) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: cname is a valid NUL-terminated string that outlives the call.
    let fd = cvt(unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: memfd_create returned a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    ftruncate(&fd, len)?;
    Ok(fd)
}

/// Set a file's length.
pub fn ftruncate(fd: &OwnedFd, len: u64) -> io::Result<()> {
    let len =
        libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain syscall on a descriptor we own.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    Ok(())
}

/// Open (or create, with `create = Some(mode)`) a file under /dev/shm or any path.
/// With `exclusive`, creation fails if the file exists.
pub fn open_path(
    path: &str,
    write: bool,
    create: Option<u32>,
    exclusive: bool,
) -> io::Result<OwnedFd> {
    let cpath = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut flags = libc::O_CLOEXEC | if write { libc::O_RDWR } else { libc::O_RDONLY };
    let mut mode = 0;
    if let Some(m) = create {
        flags |= libc::O_CREAT;
        mode = m;
        if exclusive {
            flags |= libc::O_EXCL;
        }
    }
    // SAFETY: cpath is NUL-terminated and lives across the call; mode is passed as the
    // variadic third argument open(2) expects when O_CREAT is set.
    let fd = cvt(unsafe { libc::open(cpath.as_ptr(), flags, mode as libc::c_uint) })?;
    // SAFETY: open returned a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if create.is_some() {
        // The umask may have narrowed the requested mode; set it exactly.
        // SAFETY: plain syscall on a descriptor we own.
        cvt(unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) })?;
    }
    Ok(fd)
}

/// Open an existing file for reading (or reading and writing) without following a
/// symbolic link in its last component: a ring someone else published is opened as the
/// file that stands under its name, never as what a link there points to.
pub fn open_existing_nofollow(path: &str, write: bool) -> io::Result<OwnedFd> {
    let cpath = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags =
        libc::O_CLOEXEC | libc::O_NOFOLLOW | if write { libc::O_RDWR } else { libc::O_RDONLY };
    // SAFETY: cpath is NUL-terminated and lives across the call; no O_CREAT, so open(2)
    // reads no mode argument.
    let fd = cvt(unsafe { libc::open(cpath.as_ptr(), flags) })?;
    // SAFETY: open returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The uid that owns the file behind `fd`.
pub fn fd_owner(fd: &OwnedFd) -> io::Result<u32> {
    // SAFETY: stat is plain data; fstat fills it completely on success.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid, writable stat buffer.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_uid)
}

/// The uid files are created and opened with by this thread (the file-system uid: the
/// effective uid, unless a daemon's worker took its client's with `setfsuid`).
pub fn fsuid() -> u32 {
    // SAFETY: setfsuid with an invalid id (-1) changes nothing and returns the current
    // file-system uid; it takes a plain integer.
    unsafe { libc::setfsuid(u32::MAX) as u32 }
}

/// Size of the file behind `fd`.
pub fn fd_size(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: stat is plain data; fstat fills it completely on success.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid, writable stat buffer.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_size as u64)
}

/// Whether the descriptor was opened for writing.
pub fn fd_writable(fd: &OwnedFd) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no argument and only reads descriptor flags.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    Ok(fl & libc::O_ACCMODE == libc::O_RDWR || fl & libc::O_ACCMODE == libc::O_WRONLY)
}

pub fn unlink(path: &str) -> io::Result<()> {
    std::fs::remove_file(path)
}

/// An owned, shared memory mapping.
#[derive(Debug)]
pub struct Mmap {
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

// SAFETY: the mapping is plain shared memory; all concurrent access to it goes through
// atomics or through the ring protocol, which is process-agnostic, so it is as safe to use
// from several threads as from several processes.
unsafe impl Send for Mmap {}
// SAFETY: see Send; &Mmap only exposes raw pointers and the length.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Map `len` bytes of `fd` from offset 0, shared, read-only or read-write.
    pub fn map(fd: &OwnedFd, len: usize, writable: bool) -> io::Result<Mmap> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "zero-length mapping",
            ));
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh MAP_SHARED mapping at a kernel-chosen address cannot alias any Rust
        // object; fd is a valid descriptor.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: ptr.cast(),
            len,
            writable,
        })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn writable(&self) -> bool {
        self.writable
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned, and no borrow of the mapping can
        // outlive the Mmap (every borrow is tied to a reference to it).
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// Outcome of a futex wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Woken (or the word had already changed, or a signal interrupted us).
    Woken,
    TimedOut,
}

/// FUTEX_WAIT on a word that may live in shared memory (no FUTEX_PRIVATE_FLAG, so it works
/// across processes). Returns when woken, when `*word != expected`, or on timeout.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> Wake {
    let ts = timeout.map(timespec);
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: word points to a live, aligned u32; the kernel only reads it. tsp is null or
    // points to a timespec that outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            tsp,
            0usize,
            0u32,
        )
    };
    if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
        Wake::TimedOut
    } else {
        Wake::Woken
    }
}

/// FUTEX_WAKE up to `n` waiters on `word` (in any process).
pub fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: word points to a live, aligned u32; FUTEX_WAKE does not access it beyond
    // computing its key, which works on read-only shared mappings too.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            0usize,
            0usize,
            0u32,
        );
    }
}

#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

const FUTEX2_SIZE_U32: u32 = 0x02;
const SYS_FUTEX_WAITV: libc::c_long = 449;

/// futex_waitv(2): block until any of the words changes from its expected value or is woken.
/// Returns the index of the word that woke us, `None` on timeout.
pub fn futex_waitv(
    words: &[(&AtomicU32, u32)],
    timeout: Option<Duration>,
) -> io::Result<Option<usize>> {
    if words.is_empty() || words.len() > 128 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "futex_waitv takes 1..=128 words",
        ));
    }
    let v: Vec<FutexWaitv> = words
        .iter()
        .map(|(w, e)| FutexWaitv {
            val: *e as u64,
            uaddr: w.as_ptr() as u64,
            flags: FUTEX2_SIZE_U32,
            reserved: 0,
        })
        .collect();
    // futex_waitv takes an absolute CLOCK_MONOTONIC deadline.
    let deadline = timeout.map(|d| {
        let now = monotonic();
        timespec(now + d)
    });
    let tsp = deadline
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: v is a valid array of futex_waitv structs whose uaddr fields point to live
    // aligned u32 words; tsp is null or a valid timespec; both outlive the call.
    let r = unsafe {
        libc::syscall(
            SYS_FUTEX_WAITV,
            v.as_ptr(),
            v.len() as u32,
            0u32,
            tsp,
            libc::CLOCK_MONOTONIC,
        )
    };
    if r >= 0 {
        return Ok(Some(r as usize));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ETIMEDOUT) => Ok(None),
        // A word already differed: the caller re-checks every stream.
        Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(Some(0)),
        _ => Err(e),
    }
}

/// An eventfd: a wake-up another party can wait for with `poll`/`epoll` (a ring's
/// producer signals it when it wakes its sleeping readers, so a consumer can sleep on one
/// readiness handle for all its inputs; see `dataplane::readiness`). Non-blocking and
/// close-on-exec; passed to another process with the ring's segments.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall with constant flags; no pointers.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: eventfd returned a fresh descriptor that nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// An eventfd received from another process (e.g. with a ring's descriptors).
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    /// Make it readable (wake whoever waits on it). A counter already at its maximum
    /// (EAGAIN) is readable anyway, so that error is no error.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to a descriptor we own.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Reset it; whether it had been signalled since the last drain.
    pub fn drain(&self) -> bool {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; the descriptor is non-blocking.
        let n = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        n == 8 && v > 0
    }
}

impl std::os::fd::AsFd for EventFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A pidfd for process `pid` (readable once it exits): a peer's liveness as something
/// to wait on, instead of reading /proc now and then. The caller checks that `pid` is
/// still the process it means (its start time) after opening, against pid reuse.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments; no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pidfd_open returned a fresh descriptor (close-on-exec) that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Time since an arbitrary fixed point (CLOCK_MONOTONIC).
pub fn monotonic() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Nanoseconds on CLOCK_MONOTONIC (vDSO, no system call).
pub fn now_ns() -> u64 {
    monotonic().as_nanos() as u64
}

/// CPU time this process has used, all threads, user and system (CLOCK_PROCESS_CPUTIME_ID):
/// what benchmarks charge a configuration at a fixed offered load.
pub fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own; the clock id is a constant.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether no process `pid` exists any more (kill(pid, 0) says ESRCH). A zombie still
/// exists; its locks are taken over once it is reaped.
pub fn process_gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission; it delivers nothing.
    let r = unsafe { libc::kill(pid, 0) };
    r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

pub fn getpid() -> u32 {
    std::process::id()
}

/// Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), which
/// together with the pid identifies a process even after its pid is reused.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: skip past the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // rest starts at field 3 (state); starttime is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process identified by (pid, start time) is still alive. A zombie counts as dead.
pub fn process_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    let mut fields = stat[close + 1..].split_whitespace();
    let state = fields.next().unwrap_or("X");
    if state == "Z" || state == "X" {
        return false;
    }
    match fields.nth(18).and_then(|s| s.parse::<u64>().ok()) {
        Some(st) => st == start,
        None => false,
    }
}

/// Send file descriptors with a small payload over a Unix stream socket (SCM_RIGHTS).
pub fn send_fds(sock: &UnixStream, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if payload.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "SCM_RIGHTS needs a non-empty payload",
        ));
    }
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut _,
        iov_len: payload.len(),
    };
    // SAFETY: msghdr is plain data; every field we rely on is set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg_control points to a buffer of CMSG_SPACE(fd_bytes) bytes, so the first
    // header and its data (fd_bytes long) fit; the iovec points to payload, which outlives
    // the sendmsg call.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as usize;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
        if libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Receive a payload and up to `max_fds` descriptors sent by [`send_fds`].
pub fn recv_fds(
    sock: &UnixStream,
    payload: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let fd_bytes = max_fds * std::mem::size_of::<RawFd>();
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: msghdr is plain data; every field we rely on is set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg points to valid buffers that outlive the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control with well-formed cmsg headers up to
    // msg_controllen; CMSG_FIRSTHDR/NXTHDR walk within it and each SCM_RIGHTS payload holds
    // (cmsg_len - CMSG_LEN(0)) / 4 descriptors that are now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let count =
                    ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "control message truncated: too many descriptors",
        ));
    }
    Ok((n as usize, fds))
}

/// Pin the calling thread to one CPU (used by benchmarks and worker spaces).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        libc::CPU_SET(cpu, &mut set);
        cvt(libc::sched_setaffinity(
            0,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        ))?;
    }
    Ok(())
}

/// The CPU the calling thread runs on now, and whether its affinity allows only that one
/// (it is pinned); `None` where the kernel does not say.
pub fn current_cpu() -> Option<(u32, bool)> {
    // SAFETY: sched_getcpu takes no arguments and only returns a number.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        return None;
    }
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size into it,
    // and CPU_COUNT reads within it.
    let pinned = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0
            && libc::CPU_COUNT(&set) == 1
    };
    Some((cpu as u32, pinned))
}

/// The calling thread pinned to one CPU until the guard drops, when its former CPU set
/// comes back (a thread that runs a space for a while, then goes on with other work).
pub struct Pinned(Box<libc::cpu_set_t>);

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: restores a cpu_set_t that sched_getaffinity filled for this thread.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &*self.0);
        }
    }
}

/// [`pin_to_cpu`] for as long as the returned guard lives.
pub fn pin_scoped(cpu: usize) -> io::Result<Pinned> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let old = unsafe {
        let mut set: Box<libc::cpu_set_t> = Box::new(std::mem::zeroed());
        cvt(libc::sched_getaffinity(
            0,
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut *set,
        ))?;
        set
    };
    pin_to_cpu(cpu)?;
    Ok(Pinned(old))
}

/// Scheduling policies a space's thread may ask for (thesis Table 3.3 hints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// SCHED_IDLE: runs only when nothing else wants the CPU (`@background`).
    Idle,
    /// SCHED_RR at a priority (`@realtime`).
    RoundRobin(i32),
    /// SCHED_FIFO at a priority (`@hrealtime`).
    Fifo(i32),
}

/// Give the calling thread a scheduling policy (needs CAP_SYS_NICE for the real-time ones).
pub fn set_scheduler(p: Policy) -> io::Result<()> {
    let (policy, prio) = match p {
        Policy::Idle => (libc::SCHED_IDLE, 0),
        Policy::RoundRobin(n) => (libc::SCHED_RR, n),
        Policy::Fifo(n) => (libc::SCHED_FIFO, n),
    };
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: sched_setscheduler reads one sched_param we own; pid 0 is the calling thread.
    cvt(unsafe { libc::sched_setscheduler(0, policy, &param) })?;
    Ok(())
}

/// The calling thread's scheduling policy and priority (for tests and reports).
pub fn scheduler() -> io::Result<(i32, i32)> {
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: both calls only read the calling thread's settings into memory we own.
    let policy = cvt(unsafe { libc::sched_getscheduler(0) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::sched_getparam(0, &mut param) })?;
    Ok((policy, param.sched_priority))
}

/// Lock the process's pages in memory, present and future (no page faults on a hard
/// real-time path).
pub fn lock_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only.
    cvt(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) })?;
    Ok(())
}

/// Drop to `uid` (and the same gid, no supplementary groups). Used to act as an
/// unprivileged client in permission tests; needs root.
pub fn set_uid(uid: u32) -> io::Result<()> {
    // SAFETY: plain syscalls with no pointers (setgroups with size 0 reads nothing).
    unsafe {
        cvt(libc::setgroups(0, std::ptr::null()))?;
        cvt(libc::setgid(uid))?;
        cvt(libc::setuid(uid))?;
    }
    Ok(())
}

pub fn getuid() -> u32 {
    // SAFETY: getuid cannot fail and takes no arguments.
    unsafe { libc::getuid() }
}

const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;

fn membarrier(cmd: libc::c_long) -> io::Result<libc::c_long> {
    // SAFETY: membarrier takes plain integers (cmd, flags = 0, cpu_id = 0).
    let r = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Whether the kernel offers expedited global membarrier (Linux >= 4.16).
pub fn membarrier_global_supported() -> bool {
    membarrier(MEMBARRIER_CMD_QUERY).is_ok_and(|m| {
        m & MEMBARRIER_CMD_GLOBAL_EXPEDITED != 0
            && m & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED != 0
    })
}

/// Register this process as a target of expedited global membarriers.
pub fn membarrier_register_global() -> io::Result<()> {
    membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED).map(|_| ())
}

/// Run a full memory barrier on every CPU currently running a thread of a registered
/// process (the heavy half of an asymmetric fence).
pub fn membarrier_global() -> io::Result<()> {
    membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED).map(|_| ())
}

/// Let `fd` survive `exec` (clear FD_CLOEXEC), so a child process started with it as an
/// argument can use it.
pub fn inherit_across_exec(fd: &impl AsRawFd) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own (borrowed for the call); F_GETFD/F_SETFD only
    // read and write its descriptor flags.
    unsafe {
        let flags = cvt(libc::fcntl(raw, libc::F_GETFD))?;
        cvt(libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC))?;
    }
    Ok(())
}

/// Mark every open descriptor above 2 close-on-exec: after a library opened some without
/// it (FUSE's mount leaves its socket to fusermount3 open across exec), so that children
/// inherit only what [`inherit_across_exec`] hands them. Returns how many were marked.
pub fn close_on_exec_above_stdio() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let fds: Vec<RawFd> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|fd| *fd > 2)
        .collect();
    let mut n = 0;
    for fd in fds {
        // SAFETY: F_GETFD/F_SETFD only read and write a descriptor's flags; a number that
        // closed since the listing (the listing's own descriptor) fails with EBADF.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0
                && flags & libc::FD_CLOEXEC == 0
                && libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) == 0
            {
                n += 1;
            }
        }
    }
    n
}

/// Take ownership of a Unix stream socket inherited from the parent as descriptor `fd`
/// (checked to be an open socket), and mark it close-on-exec again.
pub fn inherited_unix_stream(fd: RawFd) -> io::Result<UnixStream> {
    // SAFETY: fstat writes into a zeroed stat buffer we own; it only inspects `fd`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("descriptor {fd} is not a socket"),
        ));
    }
    // SAFETY: `fd` is open (fstat succeeded) and a socket; the parent handed it to this
    // process for exactly this use, so nothing else here owns it.
    let s = unsafe { UnixStream::from_raw_fd(fd) };
    // SAFETY: fcntl on the descriptor now owned by `s`.
    unsafe {
        let flags = cvt(libc::fcntl(fd, libc::F_GETFD))?;
        cvt(libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC))?;
    }
    Ok(s)
}
