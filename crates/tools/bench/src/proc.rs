//! Child processes: re-executing this binary with the hidden `__child` subcommand, reading
//! the one report line a child prints, and making sure no child outlives its experiment
//! (killed on drop, and by the kernel if the parent dies).
//!
//! Protocol: a child prints `ready` once set up (attached, pinned), then exactly one line
//! `done key=value ...` on success and exits 0; on failure it prints its error on stderr
//! (inherited, so it shows up in the benchmark's output) and exits non-zero.

use crate::util::{err, Result};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// A running child; killed and reaped when dropped before [`ChildProc::finish`].
pub struct ChildProc {
    child: Option<Child>,
    stdout: BufReader<ChildStdout>,
    what: String,
}

impl ChildProc {
    /// Start `streamline-bench __child ARGS...`, with stdin a pipe when `stdin_pipe`.
    pub fn spawn(args: &[String], stdin_pipe: bool) -> Result<ChildProc> {
        let exe =
            std::env::current_exe().map_err(|e| err(format!("locating own executable: {e}")))?;
        let what = format!("child `{}`", args.join(" "));
        let mut child = Command::new(exe)
            .arg("__child")
            .arg("--parent")
            .arg(std::process::id().to_string())
            .args(args)
            .stdin(if stdin_pipe {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| err(format!("starting {what}: {e}")))?;
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(ChildProc {
            child: Some(child),
            stdout,
            what,
        })
    }

    /// The write end of the child's stdin (once).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.as_mut().and_then(|c| c.stdin.take())
    }

    /// Fail if the child has already exited.
    pub fn check_alive(&mut self) -> Result<()> {
        let c = self.child.as_mut().expect("child present until finish");
        match c.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => Err(err(format!("{} exited early ({st})", self.what))),
            Err(e) => Err(err(format!("{}: {e}", self.what))),
        }
    }

    /// Wait for the child's `ready` line.
    pub fn wait_ready(&mut self) -> Result<()> {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .map_err(|e| err(format!("reading from {}: {e}", self.what)))?;
            if n == 0 {
                self.check_alive()?;
                return Err(err(format!(
                    "{} closed its output before it was ready",
                    self.what
                )));
            }
            if line.trim_end() == "ready" {
                return Ok(());
            }
        }
    }

    /// Read lines until the `done` report, then reap the child; fails unless it exited 0.
    pub fn finish(mut self) -> Result<Report> {
        let report = self.read_report();
        let mut child = self.child.take().expect("child present until finish");
        let status = match &report {
            // A child that reported success exits right away.
            Ok(_) => child.wait(),
            // Otherwise it may be stuck: make sure it goes.
            Err(_) => child.kill().and_then(|_| child.wait()),
        }
        .map_err(|e| err(format!("waiting for {}: {e}", self.what)))?;
        match report {
            Ok(r) if status.success() => Ok(r),
            Ok(_) => Err(err(format!(
                "{} reported but then failed ({status})",
                self.what
            ))),
            Err(e) => Err(err(format!("{} failed ({}): {e}", self.what, status))),
        }
    }

    fn read_report(&mut self) -> Result<Report> {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .map_err(|e| err(format!("reading from {}: {e}", self.what)))?;
            if n == 0 {
                return Err(err("no report (stdout closed)"));
            }
            if let Some(rest) = line.trim_end().strip_prefix("done") {
                return Report::parse(rest);
            }
        }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The `key=value` pairs of a child's `done` line.
#[derive(Debug, Clone, Default)]
pub struct Report(HashMap<String, String>);

impl Report {
    fn parse(s: &str) -> Result<Report> {
        let mut m = HashMap::new();
        for kv in s.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| err(format!("malformed report field `{kv}`")))?;
            m.insert(k.to_string(), v.to_string());
        }
        Ok(Report(m))
    }

    pub fn u64(&self, key: &str) -> Result<u64> {
        let v = self
            .0
            .get(key)
            .ok_or_else(|| err(format!("report lacks `{key}`")))?;
        v.parse()
            .map_err(|_| err(format!("report field {key}={v} is not a number")))
    }
}

/// Child side: die with the parent (SIGKILL on parent exit), and make sure the parent we
/// were started by is still the one we have (it may have died before the request).
pub fn die_with_parent(parent: u32) -> Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes integer arguments only and affects only the
    // calling process.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(err(format!(
            "prctl(PR_SET_PDEATHSIG): {}",
            std::io::Error::last_os_error()
        )));
    }
    if std::os::unix::process::parent_id() != parent {
        return Err(err("parent exited before the child started"));
    }
    Ok(())
}

/// Write `f`'s dirty pages to disk and drop its pages from the page cache
/// (`POSIX_FADV_DONTNEED`), so the next read brings it in as a read from disk does.
pub fn drop_from_page_cache(f: &std::fs::File) -> Result<()> {
    use std::os::fd::AsRawFd;
    f.sync_all().map_err(|e| err(format!("fsync: {e}")))?;
    // SAFETY: posix_fadvise takes the borrowed, open descriptor and integers only; it
    // changes no memory of this process.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(err(format!(
            "posix_fadvise(DONTNEED): {}",
            std::io::Error::from_raw_os_error(rc)
        )));
    }
    Ok(())
}

/// Capacity of a pipe (F_GETPIPE_SZ).
pub fn pipe_size(fd: &impl std::os::fd::AsRawFd) -> Result<usize> {
    // SAFETY: F_GETPIPE_SZ takes no pointer argument; the descriptor is borrowed and open.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) };
    if n < 0 {
        return Err(err(format!(
            "fcntl(F_GETPIPE_SZ): {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(n as usize)
}

/// Make a child started from `cmd` (a program other than this one) get SIGKILL when the
/// calling thread exits, so no child outlives a benchmark that fails or is killed.
pub fn kill_with_us(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and calls only prctl, which
    // is async-signal-safe, and reads errno; it touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Send `payload` once to each address of `to` from `sock` with one `sendmmsg(2)` call
/// (at most 1024 addresses), without blocking. Returns how many datagrams went (fewer,
/// or EAGAIN, when the socket's send buffer is full: a veth whose peer runs XDP was seen
/// to hold the buffer for good, and a blocking send then hung the benchmark).
pub fn send_many(
    sock: &std::net::UdpSocket,
    payload: &[u8],
    to: &[std::net::SocketAddrV4],
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let to = &to[..to.len().min(1024)];
    let names: Vec<libc::sockaddr_in> = to
        .iter()
        .map(|a| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*a.ip()).to_be(),
            },
            sin_zero: [0; 8],
        })
        .collect();
    // The kernel only reads the payload for a send; iovec's pointer is *mut by type only.
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut msgs: Vec<libc::mmsghdr> = names
        .iter()
        .map(|n| {
            // SAFETY: mmsghdr is a plain C struct for which all-zero is a valid value.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = n as *const libc::sockaddr_in as *mut libc::c_void;
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            m.msg_hdr.msg_iov = &mut iov;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    // SAFETY: `msgs` holds msgs.len() initialized headers whose name, iovec and payload
    // pointers (into `names`, `iov`, `payload`) stay valid for the call; the kernel writes
    // only each header's msg_len; the socket is borrowed and open.
    let n = unsafe {
        libc::sendmmsg(
            sock.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Set a pipe's capacity (F_SETPIPE_SZ) to at least `size` bytes; returns the capacity the
/// kernel gave it (a power-of-two number of pages).
pub fn set_pipe_size(fd: &impl std::os::fd::AsRawFd, size: usize) -> Result<usize> {
    let arg = libc::c_int::try_from(size)
        .map_err(|_| err(format!("pipe size {size} does not fit F_SETPIPE_SZ")))?;
    // SAFETY: F_SETPIPE_SZ takes an integer argument, no pointer; the descriptor is
    // borrowed and open.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, arg) };
    if n < 0 {
        return Err(err(format!(
            "fcntl(F_SETPIPE_SZ, {size}): {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(n as usize)
}

/// The largest pipe an unprivileged user may ask for (/proc/sys/fs/pipe-max-size).
pub fn pipe_max_size() -> Result<usize> {
    let s = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .map_err(|e| err(format!("reading /proc/sys/fs/pipe-max-size: {e}")))?;
    s.trim()
        .parse()
        .map_err(|_| err(format!("/proc/sys/fs/pipe-max-size holds `{}`", s.trim())))
}

/// CPU time (user + system, seconds) of this process (`RUSAGE_SELF`: all its threads) or
/// of its waited-for children and their waited-for descendants (`RUSAGE_CHILDREN`).
fn rusage_secs(who: libc::c_int) -> f64 {
    // SAFETY: rusage is a plain C struct for which all-zero is valid; getrusage writes
    // only into the struct it is given, which lives for the call.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut ru) != 0 {
            return f64::NAN; // never for these `who`; a NaN figure fails the run
        }
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// User + system CPU seconds of this process so far (all threads).
pub fn self_cpu_secs() -> f64 {
    rusage_secs(libc::RUSAGE_SELF)
}

/// User + system CPU seconds of this process' children that have been waited for (and of
/// their waited-for descendants). The difference across a `wait` is what that child cost.
pub fn children_cpu_secs() -> f64 {
    rusage_secs(libc::RUSAGE_CHILDREN)
}

/// The numbers of /proc/stat's first (`cpu`) line, in USER_HZ ticks: user nice system idle
/// iowait irq softirq steal ... (at least those 8).
pub fn stat_cpu_fields() -> Result<Vec<f64>> {
    let s = std::fs::read_to_string("/proc/stat")
        .map_err(|e| err(format!("reading /proc/stat: {e}")))?;
    let v: Vec<f64> = s
        .lines()
        .next()
        .filter(|l| l.starts_with("cpu "))
        .ok_or_else(|| err("/proc/stat does not start with the `cpu` line"))?
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse::<f64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| err(format!("/proc/stat: {e}")))?;
    if v.len() < 8 {
        return Err(err("/proc/stat: fewer than 8 fields on the `cpu` line"));
    }
    Ok(v)
}

/// What /proc/PID/stat says of a process.
pub(crate) struct ProcStat {
    /// `R`, `S`, `Z`, ...
    pub state: String,
    pub ppid: u32,
    /// Start time, in clock ticks after boot (with the pid, names one process).
    pub start: u64,
    /// The command name (between the parentheses, which it may itself contain).
    pub comm: String,
}

/// /proc/PID/stat of `pid`, if it is there.
pub(crate) fn stat_of(pid: u32) -> Option<ProcStat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let f: Vec<&str> = s[close + 1..].split_whitespace().collect();
    Some(ProcStat {
        state: f.first()?.to_string(),
        ppid: f.get(1)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
        comm,
    })
}

/// Bytes of memory available for new work without swapping (`MemAvailable` of
/// /proc/meminfo: free memory plus the page cache the kernel may reclaim).
pub fn mem_available() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| err(format!("reading /proc/meminfo: {e}")))?;
    s.lines()
        .find_map(|l| {
            let kb = l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?;
            kb.trim().parse::<u64>().ok()
        })
        .map(|kb| kb * 1024)
        .ok_or_else(|| err("/proc/meminfo has no `MemAvailable: N kB` line"))
}

/// Bytes an unprivileged user may still write on the file system holding `dir` (statvfs).
pub fn free_space(dir: &std::path::Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| err(format!("{}: {e}", dir.display())))?;
    // SAFETY: statvfs reads the NUL-terminated path, which lives for the call, and writes
    // only into the struct it is given; all-zero is a valid statvfs.
    let st = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return Err(err(format!(
                "statvfs {}: {}",
                dir.display(),
                std::io::Error::last_os_error()
            )));
        }
        st
    };
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Gives a socket a receive buffer of `bytes` (SO_RCVBUFFORCE as root, else SO_RCVBUF up
/// to the system's limit), so a sink of bursts loses nothing while its reader catches up.
pub fn set_rcvbuf(fd: &impl std::os::fd::AsRawFd, bytes: usize) -> std::io::Result<()> {
    let v: libc::c_int = bytes.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `&v`, which lives for the
        // call; the descriptor is borrowed from an open socket.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
    }
    Err(std::io::Error::last_os_error())
}
