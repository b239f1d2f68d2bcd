//! Pipes as Beltway rings: a [`beltway::stream::Stream`] beside every kernel pipe the
//! program makes, carrying its bytes while every process that holds an end of it can serve
//! them (thesis 3.4: "by reimplementing the pipe and mkfifo calls to create a Streamline
//! ring ... the transport optimizations apply to all Unix IPC applications").
//!
//! Owns: making a ring pipe, finding the ring of a pipe this process inherited, reading
//! and writing with Unix pipe semantics, readiness, and turning a ring pipe back into the
//! plain kernel pipe ("demotion") when an end is about to reach a program that cannot
//! serve the ring.
//!
//! ## How a ring pipe works
//!
//! - The kernel pipe stays: the program's fds are its ends, so `fstat`, `/proc`, fd
//!   passing and the kernel's count of readers and writers are exactly as without the
//!   library. The kernel tells us end of file (POLLHUP on the read end: no writer left,
//!   however the writers went, SIGKILL included) and broken pipe (POLLERR on the write end).
//! - The ring lives in a memfd named `slpipe:INODE` (the kernel pipe's inode), kept at a
//!   high fd number without close-on-exec, so it crosses `fork` and `exec`; a new program's
//!   library finds it by listing /proc/self/fd (see `discover`), and closes it if the
//!   program holds no end of that pipe. The program cannot close it by accident (`close`,
//!   `close_range` and `dup2` step around it).
//! - Bytes go through the ring. Waking a reader goes through a **doorbell**: a second,
//!   private kernel pipe per ring (its ends kept like the memfd, its inode in the ring's
//!   header). A reader that has to sleep (in `read`, `poll`, `select`, `epoll_wait`)
//!   counts itself in the ring's `pollers` and sleeps in the kernel on the doorbell and on
//!   the data pipe's read end (which says POLLHUP when the last writer goes); a writer that
//!   publishes while someone sleeps writes one byte to the doorbell (at most one is
//!   pending: the `bell` flag); a woken reader drains it. Writers that wait for space
//!   sleep on a futex in the ring with a bounded timeout, re-checking for readers.
//! - Bytes that reach the kernel pipe anyway (a writer in this library's blind spot, e.g.
//!   glibc-internal writes) are not lost: a reader that finds the ring empty takes what
//!   the kernel pipe holds.
//! - **Demotion**: with both ring locks held, move the ring's bytes
//!   into the kernel pipe (enlarged to hold them), and set the ring's mode to KERNEL; from
//!   then on every process serves that pipe through the kernel, bytes in order. The
//!   library demotes before `exec` of a program it will not be loaded into (static,
//!   setuid, or without LD_PRELOAD), before an end is sent over a socket, and for calls it
//!   does not serve on rings (`tee`).

use crate::own::{internal, is_ours, mark_ours};
use crate::{signal, sys, vfd};
use beltway::stream::Stream;
use std::any::Any;
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The ring carries the bytes.
pub const MODE_RING: u32 = 0;
/// Demoted: the kernel pipe carries them, for good.
pub const MODE_KERNEL: u32 = 1;
/// POSIX: writes of up to this many bytes are atomic.
pub const PIPE_BUF: usize = 4096;
/// Ring size unless `STREAMLINE_PIPE_SIZE` says otherwise.
pub const DEFAULT_CAPACITY: usize = 256 * 1024;

const READER: u8 = 1;
const WRITER: u8 = 2;
const NONBLOCK: u8 = 4;

/// Per fd of this process: the end it is, and the O_NONBLOCK flag as last seen or set.
static ROLE: [AtomicU8; vfd::MAX_FD] = [const { AtomicU8::new(0) }; vfd::MAX_FD];
/// The pipes this process holds an end of.
static PIPES: Mutex<Vec<Arc<Pipe>>> = Mutex::new(Vec::new());
/// The process the tables above describe (a `vfork` child shares our memory but not our
/// fds, so it must not change them).
static OWNER: AtomicI32 = AtomicI32::new(0);

/// Note which process owns the tables (at load, and in a forked child).
pub fn set_owner() {
    OWNER.store(sys::getpid(), Ordering::Relaxed);
}

/// Our pid as the tables know it (the parent's in a vfork child, which is alive while the
/// child runs), for the ring locks.
fn me() -> u32 {
    match OWNER.load(Ordering::Relaxed) {
        0 => sys::getpid() as u32,
        p => p as u32,
    }
}

/// Are we a `vfork` (or `posix_spawn`) child, sharing the parent's memory?
pub fn foreign() -> bool {
    sys::getpid() != OWNER.load(Ordering::Relaxed)
}

fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("STREAMLINE_PIPES")
            .map(|v| v != "off" && v != "0")
            .unwrap_or(true)
    })
}

/// The longest a sleeping reader waits before it looks at the ring again anyway (ms).
pub const HEAL_MS: u64 = 1000;

/// The size the kernel gives a pipe for F_SETPIPE_SZ(`size`) (fs/pipe.c,
/// `round_pipe_size`): at least a page, rounded up to a power of two; None above 2^31.
pub fn round_pipe_size(size: u32) -> Option<usize> {
    if size > 1 << 31 {
        return None;
    }
    Some((size as usize).max(4096).next_power_of_two())
}

/// The data area a new ring maps: room to grow to what an unprivileged program may ask
/// of F_SETPIPE_SZ (/proc/sys/fs/pipe-max-size), or its own size if larger. Pages are only
/// allocated when used.
fn room(cap: usize) -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let max = *MAX.get_or_init(|| {
        let mut b = [0u8; 32];
        let n = sys::open(
            c"/proc/sys/fs/pipe-max-size",
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
        .ok()
        .and_then(|fd| {
            let r = sys::read(fd as i32, &mut b).ok();
            let _ = sys::close(fd as i32);
            r
        })
        .unwrap_or(0);
        std::str::from_utf8(&b[..n])
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(1 << 20)
    });
    cap.max(max.min(beltway::stream::MAX_CAPACITY as usize))
}

/// Ring size of new pipes; None when `STREAMLINE_PIPE_SIZE` is refused (said once on
/// stderr: this process's new pipes stay kernel pipes).
fn capacity() -> Option<usize> {
    static CAP: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| match std::env::var("STREAMLINE_PIPE_SIZE") {
        Err(_) => Some(DEFAULT_CAPACITY),
        Ok(v) => match beltway::stream::parse_capacity(&v) {
            Ok(n) => Some(n),
            Err(e) => {
                let msg = format!(
                    "libslpreload: STREAMLINE_PIPE_SIZE={v}: {e}; this program's new pipes stay kernel pipes\n"
                );
                let _ = sys::write(2, msg.as_bytes());
                None
            }
        },
    })
}

fn role(fd: i32) -> u8 {
    ROLE[fd as usize].load(Ordering::Relaxed)
}

/// Record the O_NONBLOCK flag of `fd` (after F_SETFL or FIONBIO).
pub fn set_nonblock(fd: i32, on: bool) {
    if vfd::is_virtual(fd) {
        if on {
            ROLE[fd as usize].fetch_or(NONBLOCK, Ordering::Relaxed);
        } else {
            ROLE[fd as usize].fetch_and(!NONBLOCK, Ordering::Relaxed);
        }
    }
}

/// What this process knows of one pipe.
struct Local {
    /// Our fds that are ends of it.
    fds: Vec<i32>,
}

/// One ring pipe, as mapped in this process.
pub struct Pipe {
    stream: Stream,
    ino: u64,
    memfd: AtomicI32,
    /// The doorbell's read end (non-blocking) and write end (non-blocking), ours.
    bell_r: AtomicI32,
    bell_w: AtomicI32,
    /// `readers_left` when we last checked for a broken pipe.
    seen_left: AtomicU32,
    local: Mutex<Local>,
}

impl Pipe {
    fn mode(&self) -> u32 {
        // SYNC POINT: Acquire pairs with the demoter's Release store of MODE_KERNEL, after
        // it moved the ring's bytes into the kernel pipe.
        self.stream.header().mode.load(Ordering::Acquire)
    }

    fn kernel(&self) -> bool {
        self.mode() == MODE_KERNEL
    }

    /// The kernel side of a read end, in one zero-timeout poll: (bytes in the kernel pipe
    /// itself, written past the ring or after demotion; no writer left, POLLHUP).
    fn kernel_side(&self, fd: i32) -> (bool, bool) {
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        match sys::poll(&mut p, Some(0)) {
            Ok(1) => (
                p[0].revents & libc::POLLIN != 0,
                p[0].revents & libc::POLLHUP != 0,
            ),
            _ => (false, false),
        }
    }

    /// No reader is left (the kernel's POLLERR on a write end).
    fn readers_gone(&self, fd: i32) -> bool {
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        }];
        matches!(sys::poll(&mut p, Some(0)), Ok(1)) && p[0].revents & libc::POLLERR != 0
    }

    /// read(2) on a read end.
    pub fn read(&self, fd: i32, buf: &mut [u8]) -> sys::Res {
        // Not open for reading (the pipe's write end): the kernel's EBADF.
        if role(fd) & READER == 0 {
            return Err(libc::EBADF);
        }
        let marks = signal::marks();
        loop {
            if self.kernel() {
                return sys::read(fd, buf);
            }
            {
                let _c = signal::crit();
                let g = self.stream.lock_read_as(me());
                if self.kernel() {
                    continue;
                }
                // A header no stream could have (a hostile or broken party): EIO.
                let n = self.stream.take(&g, buf).map_err(|_| libc::EIO)?;
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
            }
            let (pending, hup) = self.kernel_side(fd);
            if pending {
                return sys::read(fd, buf);
            }
            if role(fd) & NONBLOCK != 0 {
                if hup {
                    if self.stream.available() > 0 || self.kernel() || self.kernel_side(fd).0 {
                        continue;
                    }
                    return Ok(0);
                }
                return Err(libc::EAGAIN);
            }
            // Nothing to read and a handler without SA_RESTART ran while this read
            // waited (in the spin, or deferred): the kernel would say EINTR before it
            // slept again.
            if signal::since(marks) == signal::Since::Interrupt {
                return Err(libc::EINTR);
            }
            // A handler interrupting the sleep: the kernel restarts a pipe read if it was
            // installed with SA_RESTART, and fails it with EINTR otherwise.
            let gone = match self.wait_readable(fd) {
                Ok(g) => g,
                Err(libc::EINTR) => {
                    signal::restart_after_eintr(marks)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if gone && self.stream.available() == 0 && !self.kernel() && !self.kernel_side(fd).0 {
                return Ok(0);
            }
        }
    }

    /// fcntl(F_GETPIPE_SZ): the ring's size (None once the kernel pipe carries the bytes).
    pub fn size(&self) -> Option<usize> {
        (!self.kernel()).then(|| self.stream.capacity())
    }

    /// fcntl(F_SETPIPE_SZ, arg) on end `fd`: the ring gets the size the kernel would give
    /// its pipe (rounded up to a power-of-two number of pages, at least one; EINVAL above
    /// 2^31; EBUSY below what is buffered). The kernel pipe underneath is sized alike
    /// first, so its limits apply as they are (EPERM above /proc/sys/fs/pipe-max-size
    /// without CAP_SYS_RESOURCE, the per-user page limits). A size beyond the ring's
    /// mapping turns the pipe into the kernel's, which then holds what was asked.
    pub fn set_size(&self, fd: i32, arg: usize) -> sys::Res {
        let want = round_pipe_size(arg as u32).ok_or(libc::EINVAL)?;
        {
            let _c = signal::crit();
            let w = self.stream.lock_write_as(me());
            let r = self.stream.lock_read_as(me());
            if !self.kernel() && want <= self.stream.room() {
                if self.stream.available() > want {
                    return Err(libc::EBUSY);
                }
                let got = sys::fcntl(fd, libc::F_SETPIPE_SZ, want)?;
                return match self.stream.resize(&w, &r, got as u64) {
                    Ok(()) => Ok(got),
                    Err(beltway::stream::ResizeError::Busy { .. }) => Err(libc::EBUSY),
                    Err(_) => Err(libc::EIO),
                };
            }
        }
        self.demote(fd);
        sys::fcntl(fd, libc::F_SETPIPE_SZ, arg as u32 as usize)
    }

    /// FIONREAD.
    pub fn readable_bytes(&self, fd: i32) -> Option<usize> {
        (!self.kernel() && role(fd) & READER != 0).then(|| self.stream.available())
    }

    /// Sleep until the ring may have data (or the kernel pipe has, or the writers are
    /// gone, or the pipe was demoted); true when the writers are gone. EINTR when a signal
    /// interrupts the sleep. Spins briefly first: on another core the writer's next bytes
    /// usually come sooner than a sleep and a wake-up would cost.
    fn wait_readable(&self, fd: i32) -> Result<bool, i32> {
        if spin_until(|| self.stream.available() > 0 || self.kernel()) {
            return Ok(false);
        }
        self.arm(fd, libc::POLLIN);
        let r = if self.stream.available() > 0 || self.kernel() {
            Ok(false)
        } else {
            vfd::before_block();
            let mut p = [
                libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.bell_r.load(Ordering::Relaxed),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // Bounded: a wake-up lost to a garbage header (`bell` stuck) costs a second,
            // not the pipe.
            sys::poll(&mut p, Some(HEAL_MS)).map(|_| p[0].revents & libc::POLLHUP != 0)
        };
        self.disarm(fd, libc::POLLIN);
        r
    }

    /// write(2) on a write end: all of `data` unless non-blocking (or interrupted after
    /// some was written); writes of up to PIPE_BUF bytes land whole.
    pub fn write(&self, fd: i32, data: &[u8]) -> sys::Res {
        if role(fd) & WRITER == 0 {
            return Err(libc::EBADF);
        }
        let atomic = data.len() <= PIPE_BUF;
        let mut off = 0;
        let marks = signal::marks();
        loop {
            if self.kernel() {
                return match sys::write(fd, &data[off..]) {
                    Ok(n) => Ok(off + n),
                    Err(e) if off > 0 && e != libc::EPIPE => Ok(off),
                    Err(e) => Err(e),
                };
            }
            self.check_broken(fd)?;
            {
                let _c = signal::crit();
                let g = self.stream.lock_write_as(me());
                if self.kernel() {
                    continue;
                }
                // A large write goes in pieces of at least a quarter ring (or what is
                // left): trickling in every byte a reader frees would make both sides move
                // tiny pieces (silly window syndrome).
                let piece = if atomic {
                    data.len() - off
                } else {
                    (data.len() - off).min(self.stream.capacity() / 4)
                };
                let n = match self.stream.put_min(&g, &data[off..], piece) {
                    Ok(n) => n,
                    Err(_) if off > 0 => return Ok(off),
                    Err(_) => return Err(libc::EIO),
                };
                off += n;
                if n > 0 {
                    self.ring_bell(fd);
                }
                if off == data.len() {
                    return Ok(off);
                }
            }
            if role(fd) & NONBLOCK != 0 {
                return if off > 0 { Ok(off) } else { Err(libc::EAGAIN) };
            }
            // Full: wait for a reader to make room, checking that one is left.
            // Full: wait until a quarter of the ring is free (at least what this write
            // needs), not for the first bytes a reader frees, so that a reader that takes
            // little at a time is not slowed by a writer that re-checks after every read.
            let need = if atomic {
                data.len() - off
            } else {
                (data.len() - off).min(self.stream.capacity() / 4)
            };
            let want = need.max(self.stream.capacity() / 4);
            if spin_until(|| self.stream.space() >= want || self.kernel()) {
                continue;
            }
            vfd::before_block();
            self.stream.wait_space(want, Duration::from_millis(50));
            // A handler without SA_RESTART ran while we waited: the kernel returns what was
            // written, or EINTR.
            if signal::since(marks) == signal::Since::Interrupt {
                return if off > 0 { Ok(off) } else { Err(libc::EINTR) };
            }
            if self.stream.space() < need && self.readers_gone(fd) {
                return self.broken(off);
            }
        }
    }

    /// EPIPE (and SIGPIPE) if a reader left and none is left.
    fn check_broken(&self, fd: i32) -> Result<(), i32> {
        let left = self.stream.header().readers_left.load(Ordering::Acquire);
        if self.seen_left.load(Ordering::Relaxed) == left {
            return Ok(());
        }
        self.seen_left.store(left, Ordering::Relaxed);
        if self.readers_gone(fd) {
            return self.broken(0).map(|_| ());
        }
        Ok(())
    }

    fn broken(&self, written: usize) -> sys::Res {
        if written > 0 {
            return Ok(written);
        }
        sys::raise_sigpipe();
        Err(libc::EPIPE)
    }

    /// After publishing: wake sleeping readers through the doorbell, once.
    fn ring_bell(&self, _fd: i32) {
        let h = self.stream.header();
        // SYNC POINT: `put_min` published head with the fast half of an asymmetric fence;
        // the reader's increment of pollers is followed by the slow half
        // (`sleeper_fence`) before it re-checks the ring (`arm`): either we see it
        // sleeping or it sees our bytes.
        if h.pollers.load(Ordering::Relaxed) > 0
            && h.bell.load(Ordering::SeqCst) == 0
            && h.bell
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            let _ = sys::write(self.bell_w.load(Ordering::Relaxed), &[0u8]);
        }
    }

    /// Remove pending doorbells, then clear the flag (in that order: a writer that set
    /// the flag and has not written its byte yet leaves a byte with the flag clear, which
    /// costs one spurious wake-up; the other order could eat a byte whose flag is set, and
    /// lose a wake-up).
    fn drain_bell(&self) {
        let mut buf = [0u8; 64];
        while matches!(sys::read(self.bell_r.load(Ordering::Relaxed), &mut buf), Ok(n) if n > 0) {}
        self.stream.header().bell.store(0, Ordering::SeqCst);
    }

    fn arm(&self, fd: i32, events: i16) {
        if events & libc::POLLIN != 0 && role(fd) & READER != 0 {
            // SYNC POINT: see `ring_bell`.
            self.stream.header().pollers.fetch_add(1, Ordering::SeqCst);
            self.stream.sleeper_fence();
        }
    }

    fn disarm(&self, fd: i32, events: i16) {
        if events & libc::POLLIN != 0 && role(fd) & READER != 0 {
            self.drain_bell();
            self.stream.header().pollers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Turn this pipe into the plain kernel pipe for every process, bytes in order.
    /// `fd` is any end of it in this process.
    pub fn demote(&self, fd: i32) {
        if self.kernel() {
            return;
        }
        let _c = signal::crit();
        let w = self.stream.lock_write_as(me());
        let r = self.stream.lock_read_as(me());
        if self.kernel() {
            return;
        }
        let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
        // A corrupt ring's bytes are lost; the pipe goes on as the kernel's.
        let bytes = self.stream.drain_all(&r).unwrap_or_default();
        if !bytes.is_empty() {
            // The kernel pipe must hold them all at once: nobody may be reading yet. (Only
            // ever enlarged: the program may have sized it.)
            let want = bytes.len().next_power_of_two().max(65536);
            if sys::fcntl(fd, libc::F_GETPIPE_SZ, 0).is_ok_and(|n| n < want) {
                let _ = sys::fcntl(fd, libc::F_SETPIPE_SZ, want);
            }
            // Write through a write end of our own, blocking, whichever end `fd` is.
            // (Non-blocking open: with no reader left it fails, and the bytes go where a
            // pipe's bytes go when nobody reads them; then blocking writes.)
            let wr = sys::open(&path, libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .map(|f| f as i32);
            if let Ok(wr) = wr {
                let _ = sys::fcntl(wr, libc::F_SETFL, 0);
                let mut off = 0;
                while off < bytes.len() {
                    match sys::write(wr, &bytes[off..]) {
                        Ok(n) => off += n,
                        Err(libc::EINTR) => {}
                        Err(_) => break,
                    }
                }
                let _ = sys::close(wr);
            }
        }
        // SYNC POINT: Release pairs with `mode`'s Acquire: the bytes are in the kernel pipe.
        self.stream
            .header()
            .mode
            .store(MODE_KERNEL, Ordering::Release);
        drop(r);
        drop(w);
        self.stream.wake_writers();
        // Readers asleep on the doorbell re-check (and find the mode changed).
        let _ = sys::write(self.bell_w.load(Ordering::Relaxed), &[0u8]);
    }

    /// Our fds of this pipe.
    pub fn fds(&self) -> Vec<i32> {
        signal::lock(&self.local).fds.clone()
    }

    /// One of our descriptors sits on `fd`, which the program wants: move it elsewhere.
    fn move_ours(&self, fd: i32) {
        for slot in [&self.memfd, &self.bell_r, &self.bell_w] {
            let old = slot.load(Ordering::Relaxed);
            if old != fd {
                continue;
            }
            let cloexec = sys::fcntl(old, libc::F_GETFD, 0)
                .map(|f| f as i32 & libc::FD_CLOEXEC != 0)
                .unwrap_or(false);
            let cmd = if cloexec {
                libc::F_DUPFD_CLOEXEC
            } else {
                libc::F_DUPFD
            };
            if let Ok(new) = sys::fcntl(old, cmd, sys::HIGH_FD) {
                mark_ours(new as i32, true);
                slot.store(new as i32, Ordering::Relaxed);
                mark_ours(old, false);
                let _ = sys::close(old);
            }
        }
    }

    /// Our own descriptors for this pipe.
    fn own_fds(&self) -> [i32; 3] {
        [
            self.memfd.load(Ordering::Relaxed),
            self.bell_r.load(Ordering::Relaxed),
            self.bell_w.load(Ordering::Relaxed),
        ]
    }
}

impl vfd::Virtual for Pipe {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn revents(&self, fd: i32, events: i16) -> i16 {
        if self.kernel() {
            let mut p = [libc::pollfd {
                fd,
                events,
                revents: 0,
            }];
            let _ = sys::poll(&mut p, Some(0));
            return p[0].revents;
        }
        let r = role(fd);
        let mut out = 0;
        if r & READER != 0 {
            if self.stream.available() > 0 {
                out |= libc::POLLIN | libc::POLLRDNORM;
            } else {
                match self.kernel_side(fd) {
                    (true, _) => out |= libc::POLLIN | libc::POLLRDNORM,
                    (false, true) if self.stream.available() == 0 => out |= libc::POLLHUP,
                    _ => {}
                }
            }
        }
        if r & WRITER != 0 {
            let left = self.stream.header().readers_left.load(Ordering::Relaxed);
            let check = self.seen_left.load(Ordering::Relaxed) != left;
            if check && self.readers_gone(fd) {
                out |= libc::POLLERR;
            } else if self.stream.space() >= PIPE_BUF.min(self.stream.capacity()) {
                out |= libc::POLLOUT | libc::POLLWRNORM;
            }
        }
        out & (events | libc::POLLHUP | libc::POLLERR)
    }

    fn revents_cheap(&self, fd: i32, events: i16) -> i16 {
        if self.kernel() {
            return 0;
        }
        let r = role(fd);
        let mut out = 0;
        if r & READER != 0 && self.stream.available() > 0 {
            out |= libc::POLLIN | libc::POLLRDNORM;
        }
        if r & WRITER != 0 && self.stream.space() >= PIPE_BUF.min(self.stream.capacity()) {
            out |= libc::POLLOUT | libc::POLLWRNORM;
        }
        out & events
    }

    fn wait_on(&self, fd: i32, events: i16) -> Option<(i32, i16)> {
        if self.kernel() {
            return Some((fd, events));
        }
        if role(fd) & READER != 0 {
            Some((fd, libc::POLLIN))
        } else {
            // A write end wakes on POLLERR (no reader left); space is re-checked in slices.
            Some((fd, 0))
        }
    }

    fn extra_wait(&self, fd: i32, events: i16) -> Option<(i32, i16)> {
        (!self.kernel() && role(fd) & READER != 0 && events & libc::POLLIN != 0)
            .then(|| (self.bell_r.load(Ordering::Relaxed), libc::POLLIN))
    }

    fn needs_slices(&self, fd: i32, events: i16) -> bool {
        !self.kernel() && role(fd) & WRITER != 0 && events & libc::POLLOUT != 0
    }

    fn arm(&self, fd: i32, events: i16) {
        Pipe::arm(self, fd, events)
    }

    fn disarm(&self, fd: i32, events: i16) {
        Pipe::disarm(self, fd, events)
    }

    fn dup(&self, old: i32, new: i32) {
        ROLE[new as usize].store(role(old), Ordering::Relaxed);
        signal::lock(&self.local).fds.push(new);
    }

    fn close(&self, fd: i32) {
        let was = role(fd);
        ROLE[fd as usize].store(0, Ordering::Relaxed);
        let mut l = signal::lock(&self.local);
        l.fds.retain(|&f| f != fd);
        let readers_here = l.fds.iter().any(|&f| role(f) & READER != 0);
        if was & READER != 0 && !readers_here {
            drop(l);
            // Our last read end goes: writers re-check for a broken pipe.
            self.stream
                .header()
                .readers_left
                .fetch_add(1, Ordering::Release);
            self.stream.wake_writers();
            l = signal::lock(&self.local);
        }
        if l.fds.is_empty() {
            drop(l);
            forget(self.ino);
        }
    }
}

/// Drop a pipe this process no longer holds any end of (its memfd and doorbell close).
fn forget(ino: u64) {
    let mut p = signal::lock(&PIPES);
    if let Some(i) = p.iter().position(|x| x.ino == ino) {
        let pipe = p.swap_remove(i);
        drop(p);
        let [_, br, bw] = pipe.own_fds();
        for f in pipe.own_fds() {
            mark_ours(f, false);
        }
        let _ = sys::close(br);
        let _ = sys::close(bw);
        // The memfd closes with the Stream when the last reference goes.
        internal(|| drop(pipe));
    }
}

/// Make `fd` an end of `pipe` in this process.
fn adopt(fd: i32, pipe: &Arc<Pipe>, role_bits: u8) {
    ROLE[fd as usize].store(role_bits, Ordering::Relaxed);
    signal::lock(&pipe.local).fds.push(fd);
    vfd::register(fd, pipe.clone());
}

fn role_of(fd: i32) -> u8 {
    let fl = sys::fcntl(fd, libc::F_GETFL, 0).unwrap_or(0) as i32;
    let mut r = match fl & libc::O_ACCMODE {
        libc::O_RDONLY => READER,
        libc::O_WRONLY => WRITER,
        _ => READER | WRITER,
    };
    if fl & libc::O_NONBLOCK != 0 {
        r |= NONBLOCK;
    }
    r
}

/// pipe2(2): the kernel pipe, and a ring beside it when the library can serve it.
pub fn pipe2(flags: i32) -> Result<[i32; 2], i32> {
    let fds = sys::pipe2(flags)?;
    if enabled() && !foreign() && fds.iter().all(|&f| (f as usize) < vfd::MAX_FD) {
        if let Some(cap) = internal(capacity) {
            internal(|| attach_new(fds, flags, cap));
        }
    }
    Ok(fds)
}

fn attach_new(fds: [i32; 2], flags: i32, cap: usize) {
    let Ok(st) = sys::fstat(fds[0]) else { return };
    let ino = st.st_ino;
    let Ok(bell) = sys::pipe2(libc::O_NONBLOCK) else {
        return;
    };
    let (br, bw) = (
        sys::move_high(bell[0], false),
        sys::move_high(bell[1], false),
    );
    let bell_ino = sys::fstat(br).map(|s| s.st_ino).unwrap_or(0);
    let fail = |memfd: Option<i32>| {
        let _ = sys::close(br);
        let _ = sys::close(bw);
        if let Some(m) = memfd {
            let _ = sys::close(m);
        }
    };
    let Ok(stream) = Stream::create_with_room(&format!("slpipe:{ino}"), cap, room(cap), ino) else {
        return fail(None);
    };
    // The memfd goes high and inheritable; map it again from there.
    let Ok(high) = sys::fcntl(
        stream.segment().fd().as_raw_fd(),
        libc::F_DUPFD,
        sys::HIGH_FD,
    ) else {
        return fail(None);
    };
    drop(stream);
    let Ok(stream) = Stream::open(sys::owned(high as i32)) else {
        return fail(None);
    };
    stream.header().ident2.store(bell_ino, Ordering::Relaxed);
    let pipe = Arc::new(Pipe {
        stream,
        ino,
        memfd: AtomicI32::new(high as i32),
        bell_r: AtomicI32::new(br),
        bell_w: AtomicI32::new(bw),
        seen_left: AtomicU32::new(0),
        local: Mutex::new(Local { fds: Vec::new() }),
    });
    for f in pipe.own_fds() {
        mark_ours(f, true);
    }
    let nb = if flags & libc::O_NONBLOCK != 0 {
        NONBLOCK
    } else {
        0
    };
    adopt(fds[0], &pipe, READER | nb);
    adopt(fds[1], &pipe, WRITER | nb);
    signal::lock(&PIPES).push(pipe);
}

/// At load: find the rings of the pipes this program inherited (memfds named
/// `slpipe:INODE` beside fds of pipe INODE), and close the memfds of pipes it holds no
/// end of.
pub fn discover() {
    set_owner();
    if !enabled() {
        return;
    }
    internal(|| {
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return;
        };
        let mut pipes: Vec<(u64, i32)> = Vec::new();
        let mut memfds: Vec<(u64, i32)> = Vec::new();
        for e in dir.flatten() {
            let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(target) = std::fs::read_link(e.path()) else {
                continue;
            };
            let t = target.to_string_lossy();
            if let Some(ino) = t
                .strip_prefix("pipe:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse().ok())
            {
                pipes.push((ino, fd));
            } else if let Some(ino) = t
                .strip_prefix("/memfd:slpipe:")
                .and_then(|s| s.split(' ').next())
                .and_then(|s| s.parse().ok())
            {
                memfds.push((ino, fd));
            }
        }
        for (ino, memfd) in memfds {
            let ends: Vec<i32> = pipes.iter().filter(|p| p.0 == ino).map(|p| p.1).collect();
            let Ok(stream) = Stream::open(sys::owned(memfd)) else {
                continue;
            };
            if ends.is_empty()
                || (memfd as usize) >= vfd::MAX_FD
                || ends.iter().any(|&f| f as usize >= vfd::MAX_FD)
            {
                // A pipe this program holds no end of: its memfd and doorbell go.
                let bell_ino = stream.header().ident2.load(Ordering::Relaxed);
                for &(_, f) in pipes.iter().filter(|p| p.0 == bell_ino) {
                    let _ = sys::close(f);
                }
                continue; // dropping the stream closes the memfd
            }
            if stream.header().ident.load(Ordering::Relaxed) != ino
                || stream.header().mode.load(Ordering::Acquire) == MODE_KERNEL
            {
                continue; // dropping the stream closes the memfd
            }
            let bell_ino = stream.header().ident2.load(Ordering::Relaxed);
            let mut br = -1;
            let mut bw = -1;
            for &(_, f) in pipes.iter().filter(|p| p.0 == bell_ino) {
                match sys::fcntl(f, libc::F_GETFL, 0).map(|fl| fl as i32 & libc::O_ACCMODE) {
                    Ok(m) if m == libc::O_RDONLY => br = f,
                    Ok(m) if m == libc::O_WRONLY => bw = f,
                    _ => {}
                }
            }
            let pipe = Arc::new(Pipe {
                stream,
                ino,
                memfd: AtomicI32::new(memfd),
                bell_r: AtomicI32::new(br),
                bell_w: AtomicI32::new(bw),
                seen_left: AtomicU32::new(0),
                local: Mutex::new(Local { fds: Vec::new() }),
            });
            if br < 0 || bw < 0 {
                // Without its doorbell the ring cannot wake anyone: back to the kernel.
                pipe.demote(ends[0]);
                continue;
            }
            // The first write checks for readers (they may all have gone before we came).
            pipe.seen_left.store(
                pipe.stream
                    .header()
                    .readers_left
                    .load(Ordering::Relaxed)
                    .wrapping_sub(1),
                Ordering::Relaxed,
            );
            for f in pipe.own_fds() {
                mark_ours(f, true);
            }
            for fd in ends {
                adopt(fd, &pipe, role_of(fd));
            }
            signal::lock(&PIPES).push(pipe);
        }
    });
}

/// The pipe whose kernel inode is `ino`, if this process holds it as a ring.
pub fn by_inode(ino: u64) -> Option<Arc<Pipe>> {
    signal::lock(&PIPES).iter().find(|p| p.ino == ino).cloned()
}

/// A descriptor the program just opened (e.g. /dev/fd/N, /proc/self/fd/N): if it is an
/// end of a ring pipe we hold, serve it too.
pub fn adopt_opened(fd: i32) {
    if foreign() || fd < 0 || fd as usize >= vfd::MAX_FD {
        return;
    }
    let Ok(st) = sys::fstat(fd) else { return };
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return;
    }
    if let Some(p) = by_inode(st.st_ino) {
        if !p.kernel() {
            adopt(fd, &p, role_of(fd));
        }
    }
}

/// The ring pipe `o` is, if it is one.
pub fn as_pipe(o: &dyn vfd::Virtual) -> Option<&Pipe> {
    o.as_any().downcast_ref()
}

/// The ring pipe behind `fd`, if any.
pub fn get(fd: i32) -> Option<PipeRef> {
    let o = vfd::get(fd)?;
    as_pipe(&*o)?;
    Some(PipeRef(o))
}

/// A ring pipe, held through the fd table.
pub struct PipeRef(Arc<dyn vfd::Virtual>);

impl std::ops::Deref for PipeRef {
    type Target = Pipe;
    fn deref(&self) -> &Pipe {
        as_pipe(&*self.0).expect("PipeRef holds a pipe")
    }
}

/// The program is about to put something on fd `fd`'s number (dup2/dup3 target): if a
/// descriptor of ours sits there, move it away first.
pub fn clear_target(fd: i32) {
    if !is_ours(fd) {
        return;
    }
    let p = signal::lock(&PIPES)
        .iter()
        .find(|p| p.own_fds().contains(&fd))
        .cloned();
    if let Some(p) = p {
        p.move_ours(fd);
    }
}

/// The library's own descriptors, sorted (for close_range).
pub fn own_fds() -> Vec<i32> {
    let mut v: Vec<i32> = signal::lock(&PIPES)
        .iter()
        .flat_map(|p| p.own_fds())
        .collect();
    v.extend(crate::shape::own_fd());
    v.sort_unstable();
    v
}

/// Before `exec` of a program the library will not be loaded into: every ring pipe with
/// an end that survives the exec goes back to the kernel; memfds of pipes with no such end
/// are not inherited.
pub fn before_foreign_exec() {
    let pipes: Vec<Arc<Pipe>> = signal::lock(&PIPES).clone();
    for p in pipes {
        let fds = p.fds();
        let inherited = fds.iter().find(|&&f| {
            sys::fcntl(f, libc::F_GETFD, 0)
                .map(|fl| fl as i32 & libc::FD_CLOEXEC == 0)
                .unwrap_or(false)
        });
        if let Some(&fd) = inherited {
            p.demote(fd);
        }
        for f in p.own_fds() {
            let _ = sys::fcntl(f, libc::F_SETFD, libc::FD_CLOEXEC as usize);
        }
    }
}

/// At exit: our read ends go, so writers re-check for a broken pipe now rather than when
/// their ring fills.
pub fn at_exit() {
    if foreign() {
        return;
    }
    let pipes: Vec<Arc<Pipe>> = match PIPES.try_lock() {
        Ok(p) => p.clone(),
        Err(_) => return,
    };
    for p in pipes {
        if p.fds().iter().any(|&f| role(f) & READER != 0) {
            p.stream
                .header()
                .readers_left
                .fetch_add(1, Ordering::Release);
            p.stream.wake_writers();
        }
    }
}

/// How long a party spins for the other side before it sleeps: about what a sleep and a
/// wake-up cost in CPU on a virtual machine (20-50 us). No spinning on one CPU.
const SPIN: Duration = Duration::from_micros(50);

/// Spin until `cond` holds (true) or the spin budget is spent (false).
fn spin_until(cond: impl Fn() -> bool) -> bool {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())) < 2 {
        return cond();
    }
    let start = std::time::Instant::now();
    loop {
        for _ in 0..64 {
            if cond() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= SPIN {
            return cond();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_sizes_round_as_the_kernel_rounds_them() {
        assert_eq!(round_pipe_size(0), Some(4096));
        assert_eq!(round_pipe_size(1), Some(4096));
        assert_eq!(round_pipe_size(4097), Some(8192));
        assert_eq!(round_pipe_size(100_000), Some(131072));
        assert_eq!(round_pipe_size(1 << 31), Some(1 << 31));
        assert_eq!(round_pipe_size((1 << 31) + 1), None);
    }
}
