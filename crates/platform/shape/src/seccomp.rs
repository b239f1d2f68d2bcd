//! Process shaping in the kernel's path: a seccomp user-notification supervisor for the
//! programs an `LD_PRELOAD` library cannot reach (static binaries, Go binaries, raw
//! system calls). Same semantics as the interposition library (`preload/src/shape.rs`):
//! internet stream sockets are NET (calls cut to the grant, the rest refunded), internet
//! datagram sockets are NET_DGRAM (never cut; what a datagram moves beyond its grant is
//! charged as debt), regular files and block devices are DISK (run on credit once the
//! budget is out of debt, pay after); every other fd is left to the kernel.
//!
//! Owns: [`run`], the filter the child installs, the pool of supervisor threads and (in
//! `emulate`) how each shaped call is carried out on the target's behalf.
//!
//! **How.** The child, between `fork` and `exec` (`pre_exec`, async-signal-safe work only),
//! sets `PR_SET_NO_NEW_PRIVS` and installs a classic-BPF filter with
//! `SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` that answers
//! `SECCOMP_RET_USER_NOTIF` for `read write readv writev pread64 pwrite64 preadv pwritev
//! recvfrom sendto recvmsg sendmsg recvmmsg sendmmsg sendfile`, `ALLOW` for everything else
//! and for x32 calls, and kills the process on a foreign architecture (i386 `int 0x80`).
//! The listener reaches the parent over a socketpair with `SCM_RIGHTS`: the filter lets
//! exactly one `sendmsg` through unnotified, the one whose unused argument registers 3
//! and 4 carry a random 128-bit cookie chosen for this run (so no fd number is left
//! unshaped for the program, and no program can hit the exception by chance). Children,
//! threads and `exec`ed programs inherit the filter, so the whole tree is supervised.
//!
//! The parent runs a pool of detached worker threads (leader/followers: one receives at
//! a time, the pool grows when every worker is busy, up to [`MAX_WORKERS`]), each
//! answering one notification at a time (synchronous wake-up where the kernel has it,
//! Linux 6.6): it opens the calling thread's pidfd, copies the
//! fd argument with `pidfd_getfd` (same open file description: offsets and `O_NONBLOCK`
//! are shared), classifies it, and either answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE` (not
//! shaped, or that budget unlimited) or *emulates* the call: waits for the budget, copies
//! the target's buffers with `process_vm_readv`/`process_vm_writev`, does the call on the
//! copy (cut to the grant), and answers with its result. Blocking socket calls poll the
//! copy in 50 ms slices, checking between slices that the caller still waits
//! (`SECCOMP_IOCTL_NOTIF_ID_VALID`) and whether a signal is pending for that thread (then
//! the call answers `-ERESTARTSYS`, so the kernel runs the handler and restarts the call
//! under `SA_RESTART`, or fails it with `EINTR`, as for a native blocking call; needed
//! because WAIT_KILLABLE_RECV keeps other signals from interrupting the wait), and
//! honour `SO_RCVTIMEO`/`SO_SNDTIMEO`. A non-blocking caller gets one attempt (`EAGAIN`
//! passes through). The caller is checked alive right before every destructive call. The workers leave when the listener reports that no
//! supervised process is left (`POLLHUP`); [`run`] returns when the direct child exits.
//!
//! **Why hand-written BPF.** Debian 12's libseccomp is 2.5.4, which has no
//! `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (2.6), and `seccompiler` installs its filters
//! itself without `NEW_LISTENER` and has no `USER_NOTIF` action; the filter is 30
//! instructions, simple enough to build and check here (see the tests), and needs no
//! system library.
//!
//! **Limits** (documented, not hidden):
//! - `recvmmsg` returns after the first message once no more are queued (as with
//!   `MSG_WAITFORONE`) and does not update its timeout; `MSG_WAITALL` receives on stream
//!   sockets are cut like any other receive (as in the library).
//! - `sendfile` is emulated from a file to a stream socket only; other pairs (to a
//!   datagram socket, from a non-file, file to file or pipe) run natively after waiting
//!   for the budget, charged what they can move at most (the request, or what the file
//!   still holds past the offset). `sendmsg` with more than 64 KiB of control data, or a
//!   datagram over 128 KiB, runs natively, charged its length.
//! - A receive whose destination buffer faults loses the data it took (`EFAULT`).
//! - A caller that died before its call ran is refunded its grant; bytes that did move
//!   are charged even when the answer can no longer be delivered (they crossed the wire).
//! - A process-directed signal to a multi-threaded program may wait for a supervised call
//!   of the thread the kernel picked to finish.
//! - A dynamically linked program's loader reads are shaped as disk reads.
//! - Every trapped call costs a round trip through the supervisor, shaped or not (about
//!   19 µs for a 4 KiB read or write of /dev/zero here, against 0.2 µs natively), so
//!   `streamline shape` should keep using the library for programs it can reach.
//! - Processes of the tree that outlive the `streamline` process find every trapped call
//!   failing with `ENOSYS` once the listener is gone (the kernel's rule for an orphaned
//!   listener); while it lives, the workers serve them.
//!
//! `unsafe`: raw system calls (seccomp, pidfd, ioctl, process_vm_*), each with its SAFETY.

mod emulate;

use crate::segment::{Segment, SegmentError};
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// Most supervisor threads one run keeps at once (each serves one blocked call).
pub const MAX_WORKERS: usize = 64;
/// Idle workers kept after a burst; more leave.
const SPARE: usize = 2;

/// Why a program could not be run under the supervisor.
#[derive(Debug, Error)]
pub enum SupervisorError {
    #[error("seccomp user notification unavailable: {what} failed in the child: {source} (needs Linux >= 5.19 with CONFIG_SECCOMP_FILTER for SECCOMP_FILTER_FLAG_NEW_LISTENER and SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, and no outer seccomp filter or container policy forbidding seccomp(2))")]
    Unavailable {
        what: &'static str,
        source: io::Error,
    },
    #[error("cannot start the shaped program: {0}")]
    Spawn(io::Error),
    #[error("seccomp supervisor setup: {what}: {source}")]
    Setup {
        what: &'static str,
        source: io::Error,
    },
    #[error("the shaped program started but its seccomp listener never reached the supervisor")]
    NoListener,
    #[error("waiting for the shaped program: {0}")]
    Wait(io::Error),
    #[error("seccomp supervisor: {0}")]
    Segment(#[from] SegmentError),
}

/// Run `cmd` with its network and disk calls shaped by `seg` at base priority `prio`,
/// supervised through seccomp user notification. `on_spawn(pid)` is called once the
/// child runs (the caller forwards signals to it). Returns when the child has exited.
///
/// Adds a `pre_exec` hook to `cmd` (after any the caller set): use a fresh `Command` per
/// call. Supervisor threads keep serving the child's own children until none is left.
pub fn run(
    seg: &Segment,
    prio: u8,
    cmd: &mut Command,
    on_spawn: impl FnOnce(u32),
) -> Result<ExitStatus, SupervisorError> {
    // our own mapping of the segment, for workers that may outlive this call
    let own = Segment::from_fd(seg.fd())?;
    let (mine, theirs) = socketpair().map_err(|e| SupervisorError::Setup {
        what: "socketpair",
        source: e,
    })?;
    let cookie = cookie();
    let filter = filter(cookie);
    let sock = theirs.as_raw_fd();
    // SAFETY: the hook only makes async-signal-safe system calls on memory that was
    // allocated before the fork (the filter, stack buffers); see `install_in_child`.
    unsafe {
        cmd.pre_exec(move || install_in_child(&filter, sock, cookie));
    }
    let prio = prio.min(crate::config::LEVELS as u8 - 1);
    // the listener must be served while `spawn` waits for `exec`: std's child reports an
    // exec failure with a `write`, which the filter traps
    let receiver = std::thread::Builder::new()
        .name("shape-seccomp-rx".into())
        .spawn(move || -> Result<(), Option<(u32, i32)>> {
            let listener = recv_listener(&mine)?;
            Pool::start(listener, own, prio);
            Ok(())
        })
        .map_err(|e| SupervisorError::Setup {
            what: "supervisor thread",
            source: e,
        })?;
    let spawned = cmd.spawn();
    drop(theirs);
    let got = receiver.join().unwrap_or(Err(None));
    let mut child = match (spawned, got) {
        (Ok(c), Ok(())) => c,
        (spawned, Err(Some((stage, errno)))) => {
            if let Ok(mut c) = spawned {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Err(SupervisorError::Unavailable {
                what: stage_name(stage),
                source: io::Error::from_raw_os_error(errno),
            });
        }
        (Err(e), _) => return Err(SupervisorError::Spawn(e)),
        (Ok(mut c), Err(None)) => {
            let _ = c.kill();
            let _ = c.wait();
            return Err(SupervisorError::NoListener);
        }
    };
    on_spawn(child.id());
    child.wait().map_err(SupervisorError::Wait)
}

const STAGE_NNP: u32 = 1;
const STAGE_SECCOMP: u32 = 2;
const STAGE_SEND: u32 = 3;

fn stage_name(stage: u32) -> &'static str {
    match stage {
        STAGE_NNP => "prctl(PR_SET_NO_NEW_PRIVS)",
        STAGE_SECCOMP => "seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER | WAIT_KILLABLE_RECV)",
        _ => "sending the seccomp listener to the supervisor",
    }
}

fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: fds is a valid out-array of two ints.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// 128 random bits (the exception's key); the clock and pid if getrandom fails.
fn cookie() -> [u64; 2] {
    let mut c = [0u64; 2];
    // SAFETY: writes at most 16 bytes into c.
    let r = unsafe { libc::getrandom(c.as_mut_ptr().cast(), 16, 0) };
    if r != 16 {
        let t = crate::bucket::now_ns();
        c = [
            t ^ 0x9e37_79b9_7f4a_7c15,
            (std::process::id() as u64) << 32 ^ t.rotate_left(17),
        ];
    }
    c
}

// ---- the filter ----------------------------------------------------------------------

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const LD_ABS_W: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;

fn off_arg(i: u32, high: bool) -> u32 {
    16 + 8 * i + if high { 4 } else { 0 }
}

/// The calls the supervisor sees (besides `sendmsg`, which has the listener exception).
pub const NOTIFIED: [libc::c_long; 14] = [
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_recvmsg,
    libc::SYS_recvmmsg,
    libc::SYS_sendmmsg,
    libc::SYS_sendfile,
];

/// The BPF program: arch check, x32 allowed, the cookie-keyed `sendmsg`, the list.
pub fn filter(cookie: [u64; 2]) -> Vec<libc::sock_filter> {
    let s = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let j = |code, k, jt: usize, jf: usize| libc::sock_filter {
        code,
        jt: jt as u8,
        jf: jf as u8,
        k,
    };
    const COOKIE_AT: usize = 6;
    const LIST_AT: usize = COOKIE_AT + 8;
    let allow = LIST_AT + NOTIFIED.len();
    let notify = allow + 1;
    let mut p = vec![
        s(LD_ABS_W, OFF_ARCH),
        j(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        s(RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        s(LD_ABS_W, OFF_NR),
        j(JGE_K, X32_SYSCALL_BIT, allow - 5, 0),
        j(JEQ_K, libc::SYS_sendmsg as u32, 0, LIST_AT - 6),
    ];
    let words = [
        (3, false, cookie[0] as u32),
        (3, true, (cookie[0] >> 32) as u32),
        (4, false, cookie[1] as u32),
        (4, true, (cookie[1] >> 32) as u32),
    ];
    for (n, &(arg, high, want)) in words.iter().enumerate() {
        p.push(s(LD_ABS_W, off_arg(arg, high)));
        let here = p.len();
        let last = n == words.len() - 1;
        p.push(j(
            JEQ_K,
            want,
            if last { allow - here - 1 } else { 0 },
            notify - here - 1,
        ));
    }
    debug_assert_eq!(p.len(), LIST_AT);
    for nr in NOTIFIED {
        let here = p.len();
        p.push(j(JEQ_K, nr as u32, notify - here - 1, 0));
    }
    p.push(s(RET_K, libc::SECCOMP_RET_ALLOW));
    p.push(s(RET_K, libc::SECCOMP_RET_USER_NOTIF));
    p
}

/// The child's half, between fork and exec.
///
/// # Safety
/// Must run in a freshly forked child (async-signal-safe context): it allocates nothing
/// and only makes raw system calls; `filter` must be a valid BPF program and `sock` the
/// child's end of the socketpair.
unsafe fn install_in_child(
    filter: &[libc::sock_filter],
    sock: RawFd,
    cookie: [u64; 2],
) -> io::Result<()> {
    // SAFETY (whole function): prctl/seccomp/sendmsg/close with valid pointers to stack
    // or pre-fork memory; no locks, no allocation.
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        let e = *libc::__errno_location();
        send_fd(sock, cookie, STAGE_NNP, e, -1);
        return Err(io::Error::from_raw_os_error(e));
    }
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    let flags =
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
    let fd = libc::syscall(
        libc::SYS_seccomp,
        libc::SECCOMP_SET_MODE_FILTER,
        flags,
        &prog as *const libc::sock_fprog,
    );
    if fd < 0 {
        let e = *libc::__errno_location();
        send_fd(sock, cookie, STAGE_SECCOMP, e, -1);
        return Err(io::Error::from_raw_os_error(e));
    }
    let fd = fd as RawFd;
    let r = send_fd(sock, cookie, 0, 0, fd);
    libc::close(fd);
    libc::close(sock);
    if r < 0 {
        // nobody will answer our calls: do not run the program unsupervised-and-stuck
        return Err(io::Error::from_raw_os_error(*libc::__errno_location()));
    }
    Ok(())
}

/// Send `[stage, errno]` and (if `fd >= 0`) `fd` over `sock`, through the filter's
/// cookie exception.
///
/// # Safety
/// Async-signal-safe: stack memory only.
unsafe fn send_fd(
    sock: RawFd,
    cookie: [u64; 2],
    stage: u32,
    errno: i32,
    fd: RawFd,
) -> libc::c_long {
    let mut body = [0u8; 8];
    body[..4].copy_from_slice(&stage.to_ne_bytes());
    body[4..].copy_from_slice(&errno.to_ne_bytes());
    let mut iov = libc::iovec {
        iov_base: body.as_mut_ptr().cast(),
        iov_len: body.len(),
    };
    // u64 array: aligned for cmsghdr
    let mut cbuf = [0u64; 4];
    let mut msg: libc::msghdr = zeroed();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if fd >= 0 {
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    libc::syscall(
        libc::SYS_sendmsg,
        sock,
        &msg as *const libc::msghdr,
        0,
        cookie[0] as libc::c_long,
        cookie[1] as libc::c_long,
        0,
    )
}

/// The parent's half: the listener, or the child's failure `(stage, errno)`, or None (the
/// child went away without a word).
fn recv_listener(sock: &OwnedFd) -> Result<OwnedFd, Option<(u32, i32)>> {
    let mut body = [0u8; 8];
    let mut cbuf = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: body.as_mut_ptr().cast(),
        iov_len: body.len(),
    };
    // SAFETY: a zeroed msghdr is valid; pointers below are to live stack buffers.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 4]>();
    let n = loop {
        // SAFETY: msg describes valid buffers for the duration of the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break n;
    };
    if n < 8 {
        return Err(None);
    }
    let stage = u32::from_ne_bytes(body[..4].try_into().unwrap());
    let errno = i32::from_ne_bytes(body[4..].try_into().unwrap());
    // SAFETY: msg was filled by recvmsg; CMSG_* walk within msg_controllen.
    let fd = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if !c.is_null() && (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS
        {
            Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>()))
        } else {
            None
        }
    };
    match (stage, fd) {
        // SAFETY: the fd arrived by SCM_RIGHTS just now and is ours alone.
        (0, Some(fd)) => Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
        (0, None) => Err(Some((STAGE_SEND, libc::EPROTO))),
        (s, _) => Err(Some((s, errno))),
    }
}

// ---- the pool --------------------------------------------------------------------------

/// One run's supervisor: the listener and what the workers share.
pub(crate) struct Pool {
    pub(crate) listener: OwnedFd,
    pub(crate) seg: Segment,
    pub(crate) prio: u8,
    leader: Mutex<()>,
    idle: AtomicUsize,
    total: AtomicUsize,
    done: AtomicBool,
    /// Tokens each connection or file has consumed, by (st_dev, st_ino) of its open file.
    pub(crate) consumed: Mutex<std::collections::HashMap<(u64, u64), u64>>,
}

enum Recv {
    Got(libc::seccomp_notif),
    Nothing,
    Hangup,
}

impl Pool {
    fn start(listener: OwnedFd, seg: Segment, prio: u8) {
        // Linux 6.6: wake the caller on the answering CPU (a call round trip costs half as
        // much); older kernels refuse the flag, which changes nothing else
        const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: libc::c_ulong = 1;
        // SAFETY: NOTIF_SET_FLAGS takes its flags by value; no memory is passed.
        unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
            )
        };
        let p = Arc::new(Pool {
            listener,
            seg,
            prio,
            leader: Mutex::new(()),
            idle: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            consumed: Mutex::new(Default::default()),
        });
        Pool::spawn_worker(&p);
    }

    fn spawn_worker(p: &Arc<Pool>) {
        p.idle.fetch_add(1, Ordering::AcqRel);
        p.total.fetch_add(1, Ordering::AcqRel);
        let q = Arc::clone(p);
        let r = std::thread::Builder::new()
            .name("shape-seccomp".into())
            .spawn(move || q.work());
        if r.is_err() {
            p.idle.fetch_sub(1, Ordering::AcqRel);
            p.total.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn work(self: Arc<Self>) {
        loop {
            if self.done.load(Ordering::Acquire) {
                break;
            }
            let got = {
                let _lead = self.leader.lock().unwrap_or_else(|e| e.into_inner());
                if self.done.load(Ordering::Acquire) {
                    break;
                }
                self.recv()
            };
            let n = match got {
                Recv::Got(n) => n,
                Recv::Nothing => continue,
                Recv::Hangup => {
                    self.done.store(true, Ordering::Release);
                    break;
                }
            };
            if self.idle.fetch_sub(1, Ordering::AcqRel) == 1
                && self.total.load(Ordering::Acquire) < MAX_WORKERS
            {
                Pool::spawn_worker(&self);
            }
            let answer = emulate::handle(&self, &n);
            self.respond(n.id, answer);
            if self.idle.load(Ordering::Acquire) >= SPARE {
                self.total.fetch_sub(1, Ordering::AcqRel);
                return;
            }
            self.idle.fetch_add(1, Ordering::AcqRel);
        }
        self.idle.fetch_sub(1, Ordering::AcqRel);
        self.total.fetch_sub(1, Ordering::AcqRel);
    }

    fn recv(&self) -> Recv {
        let mut pfd = libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, 1000) };
        if r <= 0 {
            return Recv::Nothing;
        }
        if pfd.revents & libc::POLLIN == 0 {
            return if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                Recv::Hangup
            } else {
                Recv::Nothing
            };
        }
        // SAFETY: the kernel requires a zeroed seccomp_notif; all-zero is valid for it.
        let mut n: libc::seccomp_notif = unsafe { zeroed() };
        // SAFETY: NOTIF_RECV writes one seccomp_notif into n.
        let r = unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut n,
            )
        };
        if r < 0 {
            return match io::Error::last_os_error().raw_os_error() {
                // the caller died between poll and recv, or we were interrupted
                Some(libc::ENOENT) | Some(libc::EINTR) => Recv::Nothing,
                _ => Recv::Hangup,
            };
        }
        Recv::Got(n)
    }

    /// Does notification `id` still wait for an answer (is its caller alive)?
    pub(crate) fn valid(&self, id: u64) -> bool {
        let mut id = id;
        // SAFETY: NOTIF_ID_VALID reads one u64.
        unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &mut id,
            ) == 0
        }
    }

    fn respond(&self, id: u64, a: emulate::Answer) {
        let (val, error, flags) = match a {
            emulate::Answer::Continue => (0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
            emulate::Answer::Ret(v) => (v, 0, 0),
            emulate::Answer::Err(e) => (0, -e, 0),
        };
        let mut resp = libc::seccomp_notif_resp {
            id,
            val,
            error,
            flags,
        };
        // SAFETY: NOTIF_SEND reads one seccomp_notif_resp. ENOENT (the caller died) needs
        // no handling here: the emulation settled the budget with what really moved.
        unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut resp,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run the filter as the kernel would, on one seccomp_data.
    fn interpret(p: &[libc::sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = p[pc];
            match i.code {
                LD_ABS_W => {
                    acc =
                        u32::from_ne_bytes(data[i.k as usize..i.k as usize + 4].try_into().unwrap())
                }
                JEQ_K => pc += if acc == i.k { i.jt } else { i.jf } as usize,
                JGE_K => pc += if acc >= i.k { i.jt } else { i.jf } as usize,
                RET_K => return i.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn the_filter_says_what_the_module_says() {
        let c = [0x1122_3344_5566_7788, 0x99aa_bbcc_ddee_ff00];
        let p = filter(c);
        assert!(p.len() <= 32, "{}", p.len());
        let a = AUDIT_ARCH_X86_64;
        for nr in NOTIFIED {
            assert_eq!(
                interpret(&p, nr as u32, a, [0; 6]),
                libc::SECCOMP_RET_USER_NOTIF,
                "nr {nr}"
            );
        }
        let sm = libc::SYS_sendmsg as u32;
        assert_eq!(
            interpret(&p, sm, a, [5, 0, 0, 0, 0, 0]),
            libc::SECCOMP_RET_USER_NOTIF
        );
        assert_eq!(
            interpret(&p, sm, a, [5, 0, 0, c[0], c[1], 0]),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            interpret(&p, sm, a, [5, 0, 0, c[0], c[1] ^ (1 << 40), 0]),
            libc::SECCOMP_RET_USER_NOTIF
        );
        assert_eq!(
            interpret(&p, sm, a, [5, 0, 0, c[0] ^ 1, c[1], 0]),
            libc::SECCOMP_RET_USER_NOTIF
        );
        for nr in [
            libc::SYS_openat,
            libc::SYS_close,
            libc::SYS_mmap,
            libc::SYS_exit_group,
            libc::SYS_preadv2,
        ] {
            assert_eq!(
                interpret(&p, nr as u32, a, [0; 6]),
                libc::SECCOMP_RET_ALLOW,
                "nr {nr}"
            );
        }
        // x32 calls pass untouched, foreign architectures die
        assert_eq!(
            interpret(&p, X32_SYSCALL_BIT | 1, a, [0; 6]),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            interpret(&p, 3, 0x4000_0003, [0; 6]),
            libc::SECCOMP_RET_KILL_PROCESS
        );
    }
}
