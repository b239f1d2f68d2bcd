//! Process shaping for dynamically linked programs (seed 004's TAP library, without its
//! user-level threads): the network and disk calls of a program started by
//! `streamline shape` wait for tokens from the budget its launcher keeps in a shared
//! segment ([`shape::Segment`]), each call in the calling thread.
//!
//! Owns: which calls are shaped and how each is settled.
//! - **Which fds**: internet sockets (AF_INET/AF_INET6, TCP and UDP) are NET; regular files
//!   and block devices are DISK; everything else (pipes, ttys, Unix sockets) is left
//!   alone. The class is found once per fd (`fstat`, `SO_DOMAIN`) and forgotten when the
//!   fd number is closed or replaced.
//! - **Network calls** (`read`, `write`, `readv`, `writev`, `recv*`, `send*`, `sendfile`)
//!   wait for tokens and are *cut* to what the budget holds (a shorter read or write is
//!   legal POSIX); what a call did not use is refunded. A blocking receive holds its
//!   grant while it waits for data (at most one burst: the depth of the bucket), so the
//!   call keeps every kernel semantic of its own (SO_RCVTIMEO, signals, SA_RESTART).
//!   Non-blocking calls wait for tokens too (never a budget-made `EAGAIN`, which an
//!   edge-triggered epoll loop would never hear the end of).
//! - **Disk calls** (`read`, `write`, `pread`, `pwrite`, `preadv`, `pwritev`, and the
//!   file side of `sendfile`; `O_DIRECT` included) run on credit once the budget is out of
//!   debt, and pay their cost afterwards.
//! - **Priorities**: the program's base level (`--priority`), moved by the priority policy
//!   by what the connection or file has consumed since it was opened or accepted (the
//!   seed's "tokens since the last accept").
//!
//! The segment fd is inherited at a high number and protected like the pipes' memfds, so
//! children, `exec`ed programs and threads share the one budget.

use crate::{own, sys, vfd};
use shape::config::{effective_priority, PrioPolicy, Resource};
use shape::shaper::DiskLease;
use shape::{Segment, Shaper};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static SEG: OnceLock<Segment> = OnceLock::new();
static SEG_FD: AtomicI32 = AtomicI32::new(-1);
static BASE: AtomicU8 = AtomicU8::new(0);
/// This process's prepaid disk tokens.
static LEASE: DiskLease = DiskLease::new();
/// Does the policy (as last seen) order calls by what their fd consumed?
static TRACK: AtomicBool = AtomicBool::new(false);

const UNKNOWN: u8 = 0;
/// An internet stream socket: calls are cut to the grant.
const NET: u8 = 1;
const DISK: u8 = 2;
const NONE: u8 = 3;
/// An internet datagram socket: a datagram is never cut (that would truncate it); it
/// waits for a grant and pays the rest of its size as debt.
const NET_DGRAM: u8 = 4;

static CLASS: [AtomicU8; vfd::MAX_FD] = [const { AtomicU8::new(UNKNOWN) }; vfd::MAX_FD];
static CONSUMED: [AtomicU64; vfd::MAX_FD] = [const { AtomicU64::new(0) }; vfd::MAX_FD];

/// At load: join the budget named by `STREAMLINE_SHAPE_FD`, if any.
pub fn init() {
    let Some(fd) = std::env::var(shape::ENV_FD)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return;
    };
    let seg = own::internal(|| Segment::from_fd(fd));
    match seg {
        Ok(s) => {
            let prio = std::env::var(shape::ENV_PRIO)
                .ok()
                .and_then(|v| v.parse::<u8>().ok())
                .unwrap_or(0);
            BASE.store(prio.min(9), Ordering::Relaxed);
            SEG_FD.store(fd, Ordering::Relaxed);
            own::mark_ours(fd, true);
            let _ = SEG.set(s);
            ACTIVE.store(true, Ordering::Release);
        }
        Err(e) => {
            let msg = format!(
                "streamline shape: cannot join the budget (fd {fd}): {e}; running unshaped\n"
            );
            let _ = sys::write(2, msg.as_bytes());
        }
    }
}

/// At exit: hand back the disk lease (its spending counted, the rest refunded).
pub fn at_exit() {
    if let Some(sh) = shaper() {
        sh.disk_lease_return(&LEASE);
    }
}

/// In a forked child: the parent's lease stays the parent's.
pub fn after_fork() {
    LEASE.forget();
}

/// The segment fd, to keep through close-everything loops.
pub fn own_fd() -> Option<i32> {
    let fd = SEG_FD.load(Ordering::Relaxed);
    (fd >= 0).then_some(fd)
}

#[inline]
fn shaper() -> Option<Shaper<'static>> {
    if !ACTIVE.load(Ordering::Acquire) || own::is_internal() {
        return None;
    }
    SEG.get().map(|s| Shaper::new(s.shared()))
}

/// `fd` was closed, replaced, or newly made: forget what it was.
#[inline]
pub fn forget(fd: i32) {
    if (fd as u32 as usize) < vfd::MAX_FD {
        CLASS[fd as usize].store(UNKNOWN, Ordering::Relaxed);
        CONSUMED[fd as usize].store(0, Ordering::Relaxed);
    }
}

/// Forget a range (close_range).
pub fn forget_range(first: u32, last: u32) {
    let hi = (last as usize).min(vfd::MAX_FD - 1);
    for (fd, c) in CLASS.iter().enumerate().take(hi + 1).skip(first as usize) {
        if c.load(Ordering::Relaxed) != UNKNOWN {
            forget(fd as i32);
        }
    }
}

fn class(fd: i32) -> u8 {
    if (fd as u32 as usize) >= vfd::MAX_FD {
        return NONE;
    }
    let c = CLASS[fd as usize].load(Ordering::Relaxed);
    if c != UNKNOWN {
        return c;
    }
    let c = match sys::fstat(fd) {
        Ok(st) => match st.st_mode & libc::S_IFMT {
            libc::S_IFREG | libc::S_IFBLK => DISK,
            libc::S_IFSOCK => match sys::sockopt(fd, libc::SO_DOMAIN) {
                Ok(d) if d == libc::AF_INET || d == libc::AF_INET6 => {
                    match sys::sockopt(fd, libc::SO_TYPE) {
                        Ok(libc::SOCK_STREAM) => NET,
                        Ok(_) => NET_DGRAM,
                        Err(_) => NONE,
                    }
                }
                _ => NONE,
            },
            _ => NONE,
        },
        // a bad fd: let the call itself fail, and ask again next time
        Err(_) => return NONE,
    };
    CLASS[fd as usize].store(c, Ordering::Relaxed);
    c
}

fn prio(sh: &Shaper, fd: i32) -> u8 {
    let policy = sh.config.prio_policy();
    let base = BASE.load(Ordering::Relaxed);
    if policy == PrioPolicy::Fifo {
        return base;
    }
    let consumed = CONSUMED
        .get(fd as usize)
        .map_or(0, |c| c.load(Ordering::Relaxed));
    effective_priority(policy, base, consumed)
}

/// What `fd` has consumed, kept only where a priority policy reads it.
fn consumed(sh: &Shaper, fd: i32, n: u64) {
    let track = sh.config.prio_policy() != PrioPolicy::Fifo;
    TRACK.store(track, Ordering::Relaxed);
    if track {
        add_consumed(fd, n);
    }
}

fn add_consumed(fd: i32, n: u64) {
    if let Some(c) = CONSUMED.get(fd as usize) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// Run an I/O call of `len` bytes on `fd` under the budget: `call(n)` makes the call for
/// `n` bytes (n ≤ len; cut for network calls). The cheap checks come first: most calls of
/// a shaped program are on fds no budget covers (pipes, ttys, /dev/null).
#[inline]
pub fn io(fd: i32, len: usize, call: impl FnOnce(usize) -> sys::Res) -> sys::Res {
    if !ACTIVE.load(Ordering::Acquire) {
        return call(len);
    }
    let c = class(fd);
    if c == NONE {
        return call(len);
    }
    if c == DISK && LEASE.has_credit() {
        // prepaid disk tokens: no clock, no shared memory, not even the policy's copy
        let r = call(len);
        let moved = *r.as_ref().unwrap_or(&0) as u64;
        LEASE.spend(moved);
        if TRACK.load(Ordering::Relaxed) {
            add_consumed(fd, moved);
        }
        return r;
    }
    let Some(sh) = shaper() else { return call(len) };
    match c {
        NET if sh.limited(Resource::Net) => net(&sh, fd, len, true, call),
        NET_DGRAM if sh.limited(Resource::Net) => net(&sh, fd, len, false, call),
        DISK if sh.limited(Resource::Disk) => disk(&sh, fd, len, call),
        _ => call(len),
    }
}

fn net(
    sh: &Shaper,
    fd: i32,
    len: usize,
    cut: bool,
    call: impl FnOnce(usize) -> sys::Res,
) -> sys::Res {
    if len == 0 {
        return call(0);
    }
    let p = prio(sh, fd);
    let granted = sh.net_grant(p, len as u64);
    let r = call(if cut { granted as usize } else { len });
    let moved = *r.as_ref().unwrap_or(&0) as u64;
    sh.net_done(granted, moved);
    consumed(sh, fd, moved);
    r
}

fn disk(sh: &Shaper, fd: i32, len: usize, call: impl FnOnce(usize) -> sys::Res) -> sys::Res {
    let p = prio(sh, fd);
    let began = sh.disk_begin_leased(&LEASE, p);
    let r = call(len);
    let moved = *r.as_ref().unwrap_or(&0) as u64;
    let cost = sh.disk_done_leased(&LEASE, began, moved);
    consumed(sh, fd, cost);
    r
}

/// An `accept` returned `newfd`: its account starts at zero (the seed's latency policy
/// counts tokens since the accept).
pub fn accepted(newfd: i32) {
    forget(newfd);
}

/// Is `fd` a network fd whose calls may be cut (stream socket) under a limited budget?
/// Callers with vectors (`readv`, `recvmsg`) cut them only then.
pub fn cuts(fd: i32) -> bool {
    shaper().is_some_and(|sh| sh.limited(Resource::Net)) && class(fd) == NET
}

/// `v` cut to its first `n` bytes (the one rule the seccomp supervisor uses too).
pub use shape::cut_iov;

/// `sendfile(out, in)`: the socket side is shaped as a network write, the file side as a
/// disk read; the call is cut to the network grant.
pub fn sendfile(
    out: i32,
    fin: i32,
    count: usize,
    call: impl FnOnce(usize) -> sys::Res,
) -> sys::Res {
    let Some(sh) = shaper() else {
        return call(count);
    };
    if class(fin) == DISK && sh.limited(Resource::Disk) {
        io(out, count, |n| disk(&sh, fin, n, call))
    } else {
        io(out, count, call)
    }
}
