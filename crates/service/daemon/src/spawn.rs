//! Starting a run's worker as its client (issue 33: a run never holds more rights than the
//! user who asked for it).
//!
//! Owns: what a worker holds when it is executed. For a non-root client: the client's
//! real, effective and saved uid and gid and its groups, no capability in any set
//! (permitted, effective, inheritable, ambient; the bounding set emptied while we still
//! may), and `no_new_privs`, so neither a setuid program nor file capabilities can give
//! anything back. Everything it starts (process spaces, Unix commands) inherits that. A
//! root client's worker keeps root. And the descriptors it inherits (its control socket,
//! the sockets lent to it), made inheritable in the child only, between fork and exec: the
//! daemon starts workers from many threads at once, and a descriptor made inheritable in
//! the daemon itself could leak into another client's worker forked at that moment.
//!
//! The daemon's only `unsafe` code: the `pre_exec` hook, which runs in the forked child
//! and makes only async-signal-safe system calls on memory prepared before the fork.

/// The worker program's file name, beside `streamlined` (what the daemon starts for a run).
pub const WORKER: &str = "streamline-worker";

/// The worker's process name as /proc/PID/comm and `pgrep -x` give it: [`WORKER`] cut to
/// the kernel's 15 characters (a run's process spaces under the daemon have it too).
pub fn worker_comm() -> &'static str {
    &WORKER[..WORKER.len().min(15)]
}

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Who the worker runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// `_LINUX_CAPABILITY_VERSION_3` and its two 32-bit halves.
const CAP_V3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The highest capability this kernel knows (`/proc/sys/kernel/cap_last_cap`; 63 when it
/// cannot be read: dropping an unknown one fails with EINVAL, which is ignored).
fn cap_last() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Arrange for `cmd`'s child to inherit `inherit` (left close-on-exec in the daemon) and,
/// with `who` not root, to run as `who` with no privilege at all.
pub fn prepare(cmd: &mut Command, who: Option<Identity>, inherit: Vec<RawFd>) {
    let last = cap_last();
    let demote = who.filter(|w| w.uid != 0);
    // Everything the child touches is made here, before the fork.
    let groups: Vec<libc::gid_t> = demote
        .as_ref()
        .map(|w| w.groups.clone())
        .unwrap_or_default();
    let hook = move || -> io::Result<()> {
        for &fd in &inherit {
            // SAFETY: fcntl on a descriptor number; a bad one is an error, not UB.
            check(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) })?;
        }
        let Some(w) = &demote else {
            return Ok(());
        };
        // SAFETY: each call below is a plain system call on values prepared before the
        // fork (`groups` is not resized here); all are async-signal-safe, and each result
        // is checked. Order matters: the groups and gid while we are root, then the
        // bounding set (dropping needs CAP_SETPCAP), then the uid (which clears the
        // permitted, effective and ambient sets), then the inheritable set, then
        // no_new_privs.
        unsafe {
            check(libc::setgroups(groups.len(), groups.as_ptr()))?;
            check(libc::setresgid(w.gid, w.gid, w.gid))?;
            for cap in 0..=last {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0
                    && *libc::__errno_location() != libc::EINVAL
                {
                    return Err(io::Error::last_os_error());
                }
            }
            check(libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            check(libc::setresuid(w.uid, w.uid, w.uid))?;
            let hdr = CapHeader {
                version: CAP_V3,
                pid: 0,
            };
            let data = [CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            }; 2];
            check(libc::syscall(libc::SYS_capset, &hdr, data.as_ptr()) as libc::c_int)?;
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec and only makes system
    // calls on memory it owns (see above): nothing that allocates or takes a lock.
    unsafe {
        cmd.pre_exec(hook);
    }
}
