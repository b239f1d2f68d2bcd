//! The kernel mechanism: shaping programs an `LD_PRELOAD` library cannot reach (static and
//! Go binaries, setuid programs, raw system calls) through seccomp user notification.
//!
//! Owns: the filter, the supervisor and the emulation of shaped calls.
//! - **Filter**: the child installs (before `exec`, with `no_new_privs`) a classic BPF
//!   program that sends `read`, `write`, `pread64`, `pwrite64`, `readv`, `writev`,
//!   `recvfrom`, `sendto`, `recvmsg`, `sendmsg`, `recvmmsg`, `sendmmsg`, `sendfile`,
//!   `preadv(2)`, `pwritev(2)` to the supervisor and allows everything else; the wrong
//!   architecture is killed, x32 calls pass. The program is written here (25
//!   instructions) because the flag it needs, `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`
//!   (once the supervisor holds a call, only a fatal signal can end it, so data the
//!   supervisor moved is never lost to an interrupted wait), is not in Debian's
//!   libseccomp 2.5. The listener fd reaches the parent over a socket pair whose end
//!   the filter lets through.
//! - **Supervisor**: one thread receives notifications and hands each to a worker (the
//!   pool grows while every worker is busy, so one blocking call never stalls the others);
//!   it ends when the listener reports that no process uses the filter any more (the
//!   program and every descendant have exited).
//! - **Emulation**: a worker takes a copy of the caller's fd (`pidfd_getfd`: the same open
//!   file, offset and flags), classifies it as the library does (inet stream socket: cut;
//!   datagram: whole, the rest debt; regular file or block device: disk), and for `read`,
//!   `write`, `pread64`, `pwrite64`, `readv`, `writev`, `recvfrom`, `sendto` makes the call
//!   itself on the copy, cut to the grant, moving the bytes with `process_vm_readv` /
//!   `process_vm_writev`, and answers with its result. A blocking socket is waited on in
//!   slices of 20 ms, between which the supervisor checks that the caller still waits and
//!   has no signal to take (then the call answers `-ERESTARTSYS`: the kernel restarts it
//!   or returns EINTR as SA_RESTART says). The other shaped calls wait for the budget and
//!   continue in the kernel, charged their requested length (an upper bound for receives).
//!   Calls on other fds continue untouched.
//!
//! Priorities: the program's base level; the per-connection policies need the library.
//!
//! `unsafe`: system calls (seccomp, pidfd, process_vm_*, ioctl) and the child's
//! `pre_exec` hook; each block says why it holds.

use crate::config::Resource;
use crate::segment::Segment;
use crate::shaper::Shaper;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use thiserror::Error;

/// Why the supervisor could not run a program.
#[derive(Debug, Error)]
pub enum SupervisorError {
    #[error("cannot make the supervisor's socket pair: {0}")]
    Socket(io::Error),
    #[error("cannot run {prog}: {source}")]
    Spawn { prog: String, source: io::Error },
    #[error("seccomp user notification unavailable (the kernel refused the filter with its listener; needs Linux 5.19 with CONFIG_SECCOMP_FILTER): {0}")]
    Unavailable(String),
    #[error("waiting for {prog}: {source}")]
    Wait { prog: String, source: io::Error },
}

// ---- kernel ABI (linux/seccomp.h, linux/filter.h, linux/audit.h) ----
const SECCOMP_SET_MODE_FILTER: libc::c_ulong = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
const SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV: libc::c_ulong = 1 << 5;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_USER_NOTIF_FLAG_CONTINUE: u32 = 1;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
// _IOWR('!', 0, struct seccomp_notif), _IOWR('!', 1, struct seccomp_notif_resp), _IOW('!', 2, __u64)
const NOTIF_RECV: libc::c_ulong = 0xc050_2100;
const NOTIF_SEND: libc::c_ulong = 0xc018_2101;
const NOTIF_ID_VALID: libc::c_ulong = 0x4008_2102;
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
const ERESTARTSYS: i32 = 512;

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct SeccompData {
    nr: i32,
    arch: u32,
    ip: u64,
    args: [u64; 6],
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Notif {
    id: u64,
    pid: u32,
    flags: u32,
    data: SeccompData,
}

#[repr(C)]
#[derive(Default)]
struct Resp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

/// The fd number the child keeps its socket-pair end at while it installs the filter
/// (calls on it pass the filter).
const CHANNEL_FD: u32 = 1019;

/// The system calls that go to the supervisor.
const SHAPED: [u32; 17] = [
    libc::SYS_read as u32,
    libc::SYS_write as u32,
    libc::SYS_pread64 as u32,
    libc::SYS_pwrite64 as u32,
    libc::SYS_readv as u32,
    libc::SYS_writev as u32,
    libc::SYS_sendfile as u32,
    libc::SYS_sendto as u32,
    libc::SYS_recvfrom as u32,
    libc::SYS_sendmsg as u32,
    libc::SYS_recvmsg as u32,
    libc::SYS_preadv as u32,
    libc::SYS_pwritev as u32,
    libc::SYS_recvmmsg as u32,
    libc::SYS_sendmmsg as u32,
    libc::SYS_preadv2 as u32,
    libc::SYS_pwritev2 as u32,
];

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter program (see the module documentation).
fn program() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let n = SHAPED.len() as u8;
    let mut p = vec![
        stmt(LD_W_ABS, 4), // arch
        jump(JEQ, AUDIT_ARCH_X86_64, 1, 0),
        stmt(RET, SECCOMP_RET_KILL_PROCESS),
        stmt(LD_W_ABS, 0), // nr
        jump(JGE, X32_SYSCALL_BIT, n, 0),
    ];
    // each: equal -> the fd check (after the remaining compares and the allow)
    for (i, nr) in SHAPED.iter().enumerate() {
        p.push(jump(JEQ, *nr, n - i as u8, 0));
    }
    p.push(stmt(RET, SECCOMP_RET_ALLOW));
    p.push(stmt(LD_W_ABS, 16)); // args[0], low 32 bits (little endian)
    p.push(jump(JEQ, CHANNEL_FD, 0, 1));
    p.push(stmt(RET, SECCOMP_RET_ALLOW));
    p.push(stmt(RET, SECCOMP_RET_USER_NOTIF));
    // the x32 jump lands on the allow: nr compares (n) + allow at index 5 + n
    debug_assert_eq!(p[5 + n as usize].k, SECCOMP_RET_ALLOW);
    p
}

/// Run `cmd` with its network and disk calls shaped by `seg` at base priority `prio`,
/// supervised through seccomp user notification. `on_spawn(pid)` is called once the
/// child runs (the caller forwards signals to it). Returns when the child and every
/// process it started that still used the filter have exited, with the child's status.
pub fn run(seg: &Segment, prio: u8, cmd: &mut Command, on_spawn: impl FnOnce(u32)) -> Result<ExitStatus, SupervisorError> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let mut sv = [0; 2];
    // SAFETY: socketpair fills the two-int array it is given.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, sv.as_mut_ptr()) } < 0 {
        return Err(SupervisorError::Socket(io::Error::last_os_error()));
    }
    // SAFETY: both fds were just created and are ours alone.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
    let child_end = theirs.as_raw_fd();
    let prog_filter = program();
    // SAFETY: the hook runs in the forked child before exec and makes only async-signal-
    // safe system calls (dup2, prctl, seccomp, sendmsg, close) on memory prepared before
    // the fork (the filter program, captured by reference, is not touched by the parent).
    unsafe {
        cmd.pre_exec(move || install(child_end, &prog_filter));
    }
    // The listener arrives over the socket pair, and the supervisor serves from then on:
    // the child's own calls after the filter (std's exec-error pipe among them) are
    // supervised, so it must already serve while `spawn` waits for the exec.
    let ours_fd = ours.as_raw_fd();
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<Result<(), String>>();
        let server = s.spawn(move || match recv_fd(ours_fd) {
            Ok(listener) => {
                let _ = tx.send(Ok(()));
                serve(&listener, seg, prio);
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        });
        let spawned = cmd.spawn();
        drop(theirs);
        let got = rx.recv().unwrap_or_else(|_| Err("the supervisor thread ended".into()));
        let mut child = match (spawned, got) {
            (Ok(c), Ok(())) => c,
            (Ok(mut c), Err(e)) => {
                let _ = c.kill();
                let _ = c.wait();
                return Err(SupervisorError::Unavailable(e));
            }
            (Err(e), Err(why)) if e.kind() != io::ErrorKind::NotFound => return Err(SupervisorError::Unavailable(format!("{why} ({e})"))),
            (Err(e), _) => {
                let _ = server.join();
                return Err(SupervisorError::Spawn { prog: prog.clone(), source: e });
            }
        };
        on_spawn(child.id());
        let st = child.wait();
        let _ = server.join();
        st.map_err(|e| SupervisorError::Wait { prog, source: e })
    })
}

/// In the child: install the filter and send its listener to the parent.
fn install(child_end: RawFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let err = || io::Error::last_os_error();
    // SAFETY: plain system calls on descriptors and memory this process owns.
    unsafe {
        if libc::dup2(child_end, CHANNEL_FD as i32) < 0 {
            return Err(err());
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(err());
        }
        let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut _ };
        let flags = SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
        let listener = libc::syscall(libc::SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog as *const libc::sock_fprog);
        if listener < 0 {
            // tell the parent why, then fail the spawn
            let e = err();
            let msg = format!("seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER|WAIT_KILLABLE_RECV): {e}");
            libc::send(CHANNEL_FD as i32, msg.as_ptr().cast(), msg.len(), 0);
            return Err(e);
        }
        let r = send_fd(CHANNEL_FD as i32, listener as RawFd);
        libc::close(listener as RawFd);
        libc::close(CHANNEL_FD as i32);
        r
    }
}

/// Send `fd` over the socket `sock` (SCM_RIGHTS).
///
/// # Safety
/// `sock` and `fd` are open descriptors.
unsafe fn send_fd(sock: RawFd, fd: RawFd) -> io::Result<()> {
    let mut byte = [1u8];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut cbuf = [0u64; 4]; // CMSG_SPACE(sizeof(int)) = 24 bytes, 8-aligned
    // SAFETY: a zeroed msghdr is valid; the fields set below point at live locals.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // SAFETY: msg_control holds CMSG_SPACE(int) bytes, so the first header and its data fit.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        if libc::sendmsg(sock, &msg, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Receive the listener, or the child's message saying why there is none.
fn recv_fd(sock: RawFd) -> Result<OwnedFd, String> {
    let mut buf = [0u8; 512];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; the fields point at live locals.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: recvmsg into the buffers described by msg.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(format!("receiving the listener: {}", io::Error::last_os_error()));
    }
    // SAFETY: the kernel filled msg_control/msg_controllen; CMSG_FIRSTHDR checks the length.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if !c.is_null() && (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
            return Ok(OwnedFd::from_raw_fd(fd));
        }
    }
    if n == 0 {
        return Err("the child exited before installing the filter (exec failed?)".into());
    }
    Err(String::from_utf8_lossy(&buf[..n as usize]).into_owned())
}

/// Receive notifications until no process uses the filter; hand each to a worker.
fn serve(listener: &OwnedFd, seg: &Segment, prio: u8) {
    let lfd = listener.as_raw_fd();
    let idle = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<Notif>();
    let rx = Arc::new(Mutex::new(rx));
    std::thread::scope(|s| {
        let worker = |rx: Arc<Mutex<mpsc::Receiver<Notif>>>| {
            let idle = &idle;
            move || {
                let mut scratch = Vec::new();
                loop {
                    idle.fetch_add(1, Ordering::AcqRel);
                    let n = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    idle.fetch_sub(1, Ordering::AcqRel);
                    let Ok(n) = n else { return };
                    handle(lfd, &n, &Shaper::new(seg.shared()), prio, &mut scratch);
                }
            }
        };
        let mut workers = 0usize;
        loop {
            let mut pfd = libc::pollfd { fd: lfd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, -1) };
            if r < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            if pfd.revents & libc::POLLIN != 0 {
                let mut n = Notif::default();
                // SAFETY: NOTIF_RECV fills a struct seccomp_notif (zeroed, as it requires).
                if unsafe { libc::ioctl(lfd, NOTIF_RECV, &mut n as *mut Notif) } < 0 {
                    continue; // the caller went away (ENOENT) or a signal
                }
                if idle.load(Ordering::Acquire) == 0 && workers < 256 {
                    workers += 1;
                    s.spawn(worker(rx.clone()));
                }
                if tx.send(n).is_err() {
                    break;
                }
            } else if pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                break; // no process uses the filter any more
            }
        }
        drop(tx);
    });
}

/// The class of an fd, as the library sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Stream,
    Dgram,
    Disk,
    Other,
}

fn class(fd: RawFd) -> Class {
    // SAFETY: fstat/getsockopt fill their out-parameters.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) < 0 {
            return Class::Other;
        }
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG | libc::S_IFBLK => Class::Disk,
            libc::S_IFSOCK => {
                let opt = |name| {
                    let mut v: libc::c_int = 0;
                    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                    (libc::getsockopt(fd, libc::SOL_SOCKET, name, (&mut v as *mut libc::c_int).cast(), &mut len) == 0).then_some(v)
                };
                match (opt(libc::SO_DOMAIN), opt(libc::SO_TYPE)) {
                    (Some(libc::AF_INET | libc::AF_INET6), Some(libc::SOCK_STREAM)) => Class::Stream,
                    (Some(libc::AF_INET | libc::AF_INET6), Some(_)) => Class::Dgram,
                    _ => Class::Other,
                }
            }
            _ => Class::Other,
        }
    }
}

/// The caller of one notification.
struct Caller<'a> {
    lfd: RawFd,
    n: &'a Notif,
    pidfd: OwnedFd,
}

impl Caller<'_> {
    fn valid(&self) -> bool {
        let mut id = self.n.id;
        // SAFETY: NOTIF_ID_VALID reads one u64.
        unsafe { libc::ioctl(self.lfd, NOTIF_ID_VALID, &mut id as *mut u64) == 0 }
    }

    /// A copy of the caller's fd `fd`.
    fn getfd(&self, fd: u64) -> io::Result<OwnedFd> {
        // SAFETY: pidfd_getfd returns a new descriptor (or -1).
        let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.pidfd.as_raw_fd(), fd as libc::c_int, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: r is a fresh descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
    }

    /// Read `len` bytes at `addr` in the caller.
    fn read_mem(&self, addr: u64, len: usize, out: &mut Vec<u8>) -> Result<(), i32> {
        out.resize(len, 0);
        if len == 0 {
            return Ok(());
        }
        let local = libc::iovec { iov_base: out.as_mut_ptr().cast(), iov_len: len };
        let remote = libc::iovec { iov_base: addr as *mut _, iov_len: len };
        // SAFETY: local is our buffer of len bytes; the kernel checks the remote range.
        let r = unsafe { libc::process_vm_readv(self.n.pid as i32, &local, 1, &remote, 1, 0) };
        if r as usize == len {
            Ok(())
        } else {
            Err(libc::EFAULT)
        }
    }

    /// Write `data` to the caller's iovecs `remote` (in order).
    fn write_mem(&self, data: &[u8], remote: &[libc::iovec]) -> Result<(), i32> {
        if data.is_empty() {
            return Ok(());
        }
        let local = libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() };
        let rv = crate::cut_iov(remote, data.len());
        // SAFETY: local is our buffer; the kernel checks the remote ranges.
        let r = unsafe { libc::process_vm_writev(self.n.pid as i32, &local, 1, rv.as_ptr(), rv.len() as libc::c_ulong, 0) };
        if r as usize == data.len() {
            Ok(())
        } else {
            Err(libc::EFAULT)
        }
    }

    /// The caller's iovec array.
    fn iovecs(&self, addr: u64, n: u64, scratch: &mut Vec<u8>) -> Result<Vec<libc::iovec>, i32> {
        if n > 1024 {
            return Err(libc::EINVAL);
        }
        let size = std::mem::size_of::<libc::iovec>();
        self.read_mem(addr, n as usize * size, scratch)?;
        Ok(scratch.chunks_exact(size).map(|c| libc::iovec { iov_base: u64::from_ne_bytes(c[..8].try_into().unwrap()) as *mut _, iov_len: u64::from_ne_bytes(c[8..16].try_into().unwrap()) as usize }).collect())
    }

    /// Has the calling thread a signal to take (pending, not blocked, not ignored)?
    fn signal_pending(&self) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{}/status", self.n.pid)) else { return false };
        let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).unwrap_or(0);
        (field("SigPnd:") | field("ShdPnd:")) & !field("SigBlk:") & !field("SigIgn:") != 0
    }

    /// Send SIGPIPE to the calling thread (a write to a closed connection).
    fn sigpipe(&self) {
        // SAFETY: pidfd_send_signal on our thread pidfd, no siginfo.
        unsafe { libc::syscall(libc::SYS_pidfd_send_signal, self.pidfd.as_raw_fd(), libc::SIGPIPE, std::ptr::null::<libc::siginfo_t>(), 0) };
    }

    /// Wait until `fd` is ready for `events`, in slices; Err(errno) to answer instead
    /// (ERESTARTSYS for a signal, ENOENT when the caller is gone).
    fn ready(&self, fd: RawFd, events: i16) -> Result<(), i32> {
        loop {
            let mut p = libc::pollfd { fd, events, revents: 0 };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, 20) };
            if r > 0 {
                return Ok(());
            }
            if !self.valid() {
                return Err(libc::ENOENT);
            }
            if self.signal_pending() {
                return Err(ERESTARTSYS);
            }
        }
    }
}

fn respond(lfd: RawFd, id: u64, r: Result<i64, i32>, cont: bool) {
    let mut resp = Resp { id, ..Default::default() };
    if cont {
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    } else {
        match r {
            Ok(v) => resp.val = v,
            Err(e) => resp.error = -e,
        }
    }
    // SAFETY: NOTIF_SEND reads one struct seccomp_notif_resp; a failure (ENOENT: the
    // caller died) leaves nothing to do.
    unsafe { libc::ioctl(lfd, NOTIF_SEND, &mut resp as *mut Resp) };
}

/// Is the open file description behind `fd` non-blocking?
fn nonblocking(fd: RawFd) -> bool {
    // SAFETY: F_GETFL reads the flags.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Most a disk call is emulated for; a larger one continues in the kernel, charged whole.
const DISK_MAX: usize = 64 << 20;

fn handle(lfd: RawFd, n: &Notif, sh: &Shaper, prio: u8, scratch: &mut Vec<u8>) {
    let cont = || respond(lfd, n.id, Ok(0), true);
    // SAFETY: pidfd_open of the calling thread (PIDFD_THREAD: a thread id, not a process).
    let pfd = unsafe { libc::syscall(libc::SYS_pidfd_open, n.pid as libc::pid_t, PIDFD_THREAD) };
    if pfd < 0 {
        return cont();
    }
    // SAFETY: a fresh descriptor we own.
    let caller = Caller { lfd, n, pidfd: unsafe { OwnedFd::from_raw_fd(pfd as RawFd) } };
    let a = n.data.args;
    let Ok(fd) = caller.getfd(a[0] & 0xffff_ffff) else { return cont() };
    // the thread could have died and its id been reused between receive and pidfd_open
    if !caller.valid() {
        return;
    }
    let class = class(fd.as_raw_fd());
    let net = matches!(class, Class::Stream | Class::Dgram);
    if class == Class::Other || (net && !sh.limited(Resource::Net)) || (class == Class::Disk && !sh.limited(Resource::Disk)) {
        return cont();
    }
    let nr = n.data.nr as i64;
    let r = match nr {
        libc::SYS_read | libc::SYS_write | libc::SYS_pread64 | libc::SYS_pwrite64 | libc::SYS_recvfrom | libc::SYS_sendto => {
            let iov = [libc::iovec { iov_base: a[1] as *mut _, iov_len: a[2] as usize }];
            emulate(&caller, sh, prio, fd.as_raw_fd(), class, nr, &iov, scratch)
        }
        libc::SYS_readv | libc::SYS_writev => match caller.iovecs(a[1], a[2], scratch) {
            Ok(v) => emulate(&caller, sh, prio, fd.as_raw_fd(), class, nr, &v, &mut Vec::new()),
            Err(e) => Some(Err(e)),
        },
        _ => None,
    };
    match r {
        Some(r) => respond(lfd, n.id, r, false),
        None => {
            // not emulated: wait for the budget, charge the requested length, continue
            let len = requested(&caller, nr, &a, scratch);
            if net {
                let g = sh.net_grant(prio, len);
                sh.net_done(g, len);
            } else {
                let t = sh.disk_begin(prio);
                sh.disk_done(t, len);
            }
            cont()
        }
    }
}

/// What a call that is not emulated asks to move.
fn requested(c: &Caller, nr: i64, a: &[u64; 6], scratch: &mut Vec<u8>) -> u64 {
    let iov_total = |addr: u64, n: u64, s: &mut Vec<u8>| c.iovecs(addr, n, s).map(|v| v.iter().map(|i| i.iov_len as u64).sum()).unwrap_or(0);
    match nr {
        libc::SYS_sendfile => a[3],
        libc::SYS_preadv | libc::SYS_pwritev | libc::SYS_preadv2 | libc::SYS_pwritev2 => iov_total(a[1], a[2], scratch),
        libc::SYS_sendmsg | libc::SYS_recvmsg => {
            // struct msghdr: name(8) namelen(4+4) iov(8) iovlen(8) ...
            let mut h = Vec::new();
            if c.read_mem(a[1], 32, &mut h).is_err() {
                return 0;
            }
            iov_total(u64::from_ne_bytes(h[16..24].try_into().unwrap()), u64::from_ne_bytes(h[24..32].try_into().unwrap()), scratch)
        }
        libc::SYS_sendmmsg | libc::SYS_recvmmsg => {
            // struct mmsghdr: a msghdr (56 bytes) and msg_len (4+4)
            let vlen = a[2].min(1024);
            let mut h = Vec::new();
            if c.read_mem(a[1], vlen as usize * 64, &mut h).is_err() {
                return 0;
            }
            h.chunks_exact(64).map(|m| iov_total(u64::from_ne_bytes(m[16..24].try_into().unwrap()), u64::from_ne_bytes(m[24..32].try_into().unwrap()), &mut Vec::new())).sum()
        }
        _ => a[2],
    }
}

/// Make the call `nr` on our copy `fd` of the caller's fd, for the caller's buffers
/// `remote`: Some(result) to answer, None to let the kernel run it.
#[allow(clippy::too_many_arguments)]
fn emulate(c: &Caller, sh: &Shaper, prio: u8, fd: RawFd, class: Class, nr: i64, remote: &[libc::iovec], buf: &mut Vec<u8>) -> Option<Result<i64, i32>> {
    let a = c.n.data.args;
    let total: usize = remote.iter().map(|v| v.iov_len).sum();
    let writes = matches!(nr, libc::SYS_write | libc::SYS_pwrite64 | libc::SYS_writev | libc::SYS_sendto);
    let flags = match nr {
        libc::SYS_recvfrom | libc::SYS_sendto => a[3] as i32,
        _ => 0,
    };
    if class == Class::Disk {
        if total > DISK_MAX || matches!(nr, libc::SYS_recvfrom | libc::SYS_sendto) {
            return None;
        }
        let began = sh.disk_begin(prio);
        let r = disk_call(c, fd, nr, remote, total, writes, buf);
        sh.disk_done(began, *r.as_ref().unwrap_or(&0) as u64);
        return Some(r);
    }
    if total == 0 {
        return None;
    }
    let granted = sh.net_grant(prio, total as u64) as usize;
    let n = if class == Class::Stream { granted.min(total) } else { total };
    let r = net_call(c, fd, nr, remote, n, writes, flags, buf);
    let moved = *r.as_ref().unwrap_or(&0) as u64;
    sh.net_done(granted as u64, moved);
    Some(r)
}

fn disk_call(c: &Caller, fd: RawFd, nr: i64, remote: &[libc::iovec], total: usize, writes: bool, buf: &mut Vec<u8>) -> Result<i64, i32> {
    let off = c.n.data.args[3] as libc::off_t;
    if writes {
        gather(c, remote, total, buf)?;
        // SAFETY: buf holds total bytes.
        let r = unsafe {
            match nr {
                libc::SYS_pwrite64 => libc::pwrite(fd, buf.as_ptr().cast(), total, off),
                _ => libc::write(fd, buf.as_ptr().cast(), total),
            }
        };
        if r < 0 {
            return Err(errno());
        }
        Ok(r as i64)
    } else {
        buf.resize(total, 0);
        // SAFETY: buf is writable for total bytes.
        let r = unsafe {
            match nr {
                libc::SYS_pread64 => libc::pread(fd, buf.as_mut_ptr().cast(), total, off),
                _ => libc::read(fd, buf.as_mut_ptr().cast(), total),
            }
        };
        if r < 0 {
            return Err(errno());
        }
        c.write_mem(&buf[..r as usize], remote)?;
        Ok(r as i64)
    }
}

/// The caller's buffers, `total` bytes of them, into `buf`.
fn gather(c: &Caller, remote: &[libc::iovec], total: usize, buf: &mut Vec<u8>) -> Result<(), i32> {
    buf.clear();
    let mut part = Vec::new();
    let mut left = total;
    for v in remote {
        if left == 0 {
            break;
        }
        let k = v.iov_len.min(left);
        c.read_mem(v.iov_base as u64, k, &mut part)?;
        buf.extend_from_slice(&part);
        left -= k;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn net_call(c: &Caller, fd: RawFd, nr: i64, remote: &[libc::iovec], n: usize, writes: bool, flags: i32, buf: &mut Vec<u8>) -> Result<i64, i32> {
    let a = c.n.data.args;
    let blocking = !nonblocking(fd) && flags & libc::MSG_DONTWAIT == 0;
    if writes {
        gather(c, remote, n, buf)?;
        let mut addr = Vec::new();
        if nr == libc::SYS_sendto && a[4] != 0 {
            c.read_mem(a[4], (a[5] as usize).min(128), &mut addr)?;
        }
        loop {
            if blocking {
                c.ready(fd, libc::POLLOUT)?;
            }
            let f = (flags & !libc::MSG_DONTWAIT) | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
            // SAFETY: buf holds n bytes; addr is empty or the caller's address bytes.
            let r = unsafe { libc::sendto(fd, buf.as_ptr().cast(), buf.len(), f, if addr.is_empty() { std::ptr::null() } else { addr.as_ptr().cast() }, addr.len() as libc::socklen_t) };
            if r >= 0 {
                return Ok(r as i64);
            }
            let e = errno();
            if e == libc::EAGAIN && blocking {
                continue;
            }
            if e == libc::EPIPE && flags & libc::MSG_NOSIGNAL == 0 {
                c.sigpipe();
            }
            return Err(e);
        }
    }
    buf.resize(n, 0);
    let want_addr = nr == libc::SYS_recvfrom && a[4] != 0 && a[5] != 0;
    loop {
        if blocking {
            c.ready(fd, libc::POLLIN)?;
        }
        // the last look before taking data: is the caller still waiting for it?
        if !c.valid() {
            return Err(libc::ENOENT);
        }
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut sl = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let f = (flags & !(libc::MSG_WAITALL | libc::MSG_DONTWAIT)) | libc::MSG_DONTWAIT;
        // SAFETY: buf is writable for n bytes; ss/sl describe a sockaddr_storage.
        let r = unsafe { libc::recvfrom(fd, buf.as_mut_ptr().cast(), n, f, (&mut ss as *mut libc::sockaddr_storage).cast(), &mut sl) };
        if r < 0 {
            let e = errno();
            if e == libc::EAGAIN && blocking {
                continue;
            }
            return Err(e);
        }
        let r = r as usize;
        // a datagram larger than asked is cut by the kernel as for the caller (MSG_TRUNC
        // returns its real length, as the kernel would have)
        let got = r.min(n);
        c.write_mem(&buf[..got], remote)?;
        if want_addr {
            let mut lenb = Vec::new();
            c.read_mem(a[5], 4, &mut lenb)?;
            let cap = u32::from_ne_bytes(lenb[..4].try_into().unwrap()) as usize;
            // SAFETY: ss is plain bytes of its size.
            let bytes = unsafe { std::slice::from_raw_parts((&ss as *const libc::sockaddr_storage).cast::<u8>(), sl as usize) };
            c.write_mem(&bytes[..cap.min(sl as usize)], &[libc::iovec { iov_base: a[4] as *mut _, iov_len: cap.min(sl as usize) }])?;
            c.write_mem(&sl.to_ne_bytes(), &[libc::iovec { iov_base: a[5] as *mut _, iov_len: 4 }])?;
        }
        return Ok(r as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_jumps_land_where_they_should() {
        let p = program();
        let n = SHAPED.len();
        // x32 jump: from index 4, jt lands on the allow after the compares
        assert_eq!(4 + 1 + p[4].jt as usize, 5 + n);
        for i in 0..n {
            // each compare's true branch lands on the fd load
            assert_eq!(5 + i + 1 + p[5 + i].jt as usize, 6 + n, "compare {i}");
            assert_eq!(p[6 + n].k, 16);
        }
        assert_eq!(p.last().unwrap().k, SECCOMP_RET_USER_NOTIF);
        assert!(p.len() < 64);
    }
}
