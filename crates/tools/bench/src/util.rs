//! Shared benchmark plumbing: the error type, repetition and timing policy ([`Plan`]),
//! headline figures ([`Summary`]), number formatting, CPU pinning, and names for named
//! rings (with removal of rings a crashed run left in /dev/shm).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, Error>;

/// Build an error from a message.
pub fn err(msg: impl Into<String>) -> Error {
    msg.into().into()
}

pub const KIB: usize = 1 << 10;
pub const MIB: usize = 1 << 20;
pub const GIB: usize = 1 << 30;

/// How data is checked on the receiving side (see [`crate::pattern`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Verify {
    /// Every byte of every block against the reference content.
    Full,
    /// Sequence stamps at both ends of every block (catches loss, duplication, reordering
    /// and misalignment at O(1) cost per block).
    Stamps,
}

/// Repetition policy. Quick mode: one fully verified run per configuration. Full mode: one
/// fully verified run at reduced volume (correctness and warm-up, not counted), then `reps`
/// timed runs with stamp verification, of which the fastest counts (interference from
/// other load only ever slows a run down).
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub quick: bool,
    pub reps: usize,
}

/// The outcome of one configuration: every timed run, in seconds.
#[derive(Debug, Clone)]
pub struct Timing {
    pub runs: Vec<f64>,
}

impl Timing {
    pub fn best(&self) -> f64 {
        self.runs.iter().copied().fold(f64::INFINITY, f64::min)
    }
    /// Throughput of the best run in MB/s (10^6 bytes per second).
    pub fn mbps(&self, bytes: u64) -> f64 {
        bytes as f64 / self.best() / 1e6
    }
}

impl Plan {
    pub fn new(quick: bool, reps: usize) -> Plan {
        Plan {
            quick,
            reps: if quick { 1 } else { reps.max(1) },
        }
    }

    /// Data volume for a pass: the full `base` for timed runs, a quarter for the (untimed)
    /// verification pass of full mode; always a whole number of `block`s, at least one.
    pub fn volume(&self, base: u64, block: usize, verify: Verify) -> u64 {
        let v = if !self.quick && verify == Verify::Full {
            base / 4
        } else {
            base
        };
        (v / block as u64).max(1) * block as u64
    }

    /// Run `f` (which returns the seconds its timed region took) per the policy above.
    pub fn measure(&self, mut f: impl FnMut(Verify) -> Result<f64>) -> Result<Timing> {
        Ok(self.measure_with(|v| Ok((f(v)?, ())))?.0)
    }

    /// Like [`Plan::measure`] for runs that also return details; returns those of the
    /// fastest timed run.
    pub fn measure_with<T>(
        &self,
        mut f: impl FnMut(Verify) -> Result<(f64, T)>,
    ) -> Result<(Timing, T)> {
        let timed = if self.quick {
            Verify::Full
        } else {
            f(Verify::Full)?;
            Verify::Stamps
        };
        let mut runs = Vec::new();
        let mut best: Option<(f64, T)> = None;
        for _ in 0..self.reps {
            let (secs, details) = f(timed)?;
            runs.push(secs);
            let faster = match &best {
                None => true,
                Some((b, _)) => secs < *b,
            };
            if faster {
                best = Some((secs, details));
            }
        }
        let (_, details) = best.expect("at least one run");
        Ok((Timing { runs }, details))
    }
}

/// A headline figure with its target, if the issue states one.
#[derive(Debug, Clone)]
struct Headline {
    metric: String,
    value: f64,
    target: Option<Target>,
    note: String,
}

/// What a headline figure should reach.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtLeast(f64),
    AtMost(f64),
}

/// Headline figures of a subcommand, printed at the end as a human-readable verdict table
/// followed by the machine-readable `SUMMARY <metric> <value>` lines.
#[derive(Debug, Default)]
pub struct Summary {
    lines: Vec<Headline>,
}

impl Summary {
    pub fn add(
        &mut self,
        metric: &str,
        value: f64,
        target: Option<Target>,
        note: impl Into<String>,
    ) {
        self.lines.push(Headline {
            metric: metric.to_string(),
            value,
            target,
            note: note.into(),
        });
    }

    /// Prints the verdict table and the SUMMARY lines, then fails if any figure is not a
    /// finite number (a NaN or infinity means the run measured nothing, or divided by
    /// nothing: it is printed as it is, never as a plausible 0).
    pub fn print(&self) -> Result<()> {
        println!("\n== Headline figures ==");
        for h in &self.lines {
            let verdict = match h.target {
                Some(Target::AtLeast(t)) if h.value >= t => format!("target >= {t}: met"),
                Some(Target::AtLeast(t)) => format!("target >= {t}: MISSED"),
                Some(Target::AtMost(t)) if h.value <= t => format!("target <= {t}: met"),
                Some(Target::AtMost(t)) => format!("target <= {t}: MISSED"),
                None => "no target".to_string(),
            };
            println!(
                "{:<36} {:>9.3}   {:<22} {}",
                h.metric, h.value, verdict, h.note
            );
        }
        println!();
        for h in &self.lines {
            println!("SUMMARY {} {}", h.metric, fmt_value(h.value));
        }
        let broken: Vec<&str> = self
            .lines
            .iter()
            .filter(|h| !h.value.is_finite())
            .map(|h| h.metric.as_str())
            .collect();
        if broken.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "figures that are not numbers (nothing measured, or a division by zero): {}",
                broken.join(", ")
            )
            .into())
        }
    }
}

/// A plain float for SUMMARY lines: no exponent, a sensible number of digits.
fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// The number written before `word` in `line` (a summary line's counts: `5245 packets
/// in`, `(173 records)`).
pub fn before(line: &str, word: &str) -> Option<u64> {
    let i = line.find(word)?;
    line[..i]
        .split_whitespace()
        .last()?
        .trim_start_matches('(')
        .parse()
        .ok()
}

/// `64B`, `1KiB`, `16MiB`.
pub fn fmt_size(n: u64) -> String {
    let mut s = String::new();
    let _ = match n {
        n if n >= GIB as u64 && n % GIB as u64 == 0 => write!(s, "{}GiB", n / GIB as u64),
        n if n >= MIB as u64 && n % MIB as u64 == 0 => write!(s, "{}MiB", n / MIB as u64),
        n if n >= KIB as u64 && n % KIB as u64 == 0 => write!(s, "{}KiB", n / KIB as u64),
        n => write!(s, "{n}B"),
    };
    s
}

/// Pin the calling thread to `cpu`, folded onto the CPUs that exist. Returns the CPU used.
pub fn pin(cpu: usize) -> Result<usize> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = cpu % n;
    beltway::sys::pin_to_cpu(cpu).map_err(|e| err(format!("pinning to CPU {cpu}: {e}")))?;
    Ok(cpu)
}

/// Exit the process if the run takes longer than `limit` (a wedged experiment must fail
/// the run, not hang CI; children die with us; see [`cleanup_on_abnormal_exit`]).
pub fn watchdog(limit: std::time::Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("streamline-bench: watchdog: run exceeded {limit:?}; aborting (deadlock?)");
        abnormal_cleanup();
        std::process::exit(3);
    });
}

/// Paths to remove when the run ends abnormally, in order (files, then their directory).
static ABNORMAL_CLEANUP: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
/// Network namespaces to remove when the run ends abnormally: their /run/netns paths.
static ABNORMAL_NETNS: [std::sync::OnceLock<std::ffi::CString>; 4] =
    [const { std::sync::OnceLock::new() }; 4];

/// Remove the network namespace `ns` (made with `ip netns add`) if the run is ended by
/// SIGINT, SIGTERM or SIGHUP, or by the [`watchdog`], where destructors (`Veth`'s drop) do
/// not run: its bind mount under /run/netns is detached and removed (what `ip netns del`
/// does, in async-signal-safe system calls). The namespace, and the veth pair with an end
/// in it, go once no process is left in it (our children die with us). Up to four
/// namespaces per process (the rest are left to their destructors).
pub fn remove_netns_on_abnormal_exit(ns: &str) {
    let Ok(path) = std::ffi::CString::new(format!("/run/netns/{ns}")) else {
        return;
    };
    if ABNORMAL_NETNS
        .iter()
        .any(|slot| slot.set(path.clone()).is_ok())
    {
        install_fatal_signal_handlers();
    }
}

/// Install [`on_fatal_signal`] for SIGINT, SIGTERM and SIGHUP (once per process).
fn install_fatal_signal_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: installs a handler that only calls async-signal-safe functions
            // (umount2, unlink, rmdir, _exit) on data initialized before it was installed.
            unsafe {
                libc::signal(
                    sig,
                    on_fatal_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
                )
            };
        }
    });
}

/// Remove `paths` (files, then empty directories, in this order) if the run is ended by
/// SIGINT, SIGTERM or SIGHUP, or by the [`watchdog`]: destructors do not run then, and
/// scratch files can be large. Only the first call per process takes effect.
pub fn cleanup_on_abnormal_exit(paths: &[&std::path::Path]) {
    use std::os::unix::ffi::OsStrExt;
    let v = paths
        .iter()
        .filter_map(|p| std::ffi::CString::new(p.as_os_str().as_bytes()).ok())
        .collect();
    if ABNORMAL_CLEANUP.set(v).is_err() {
        return;
    }
    install_fatal_signal_handlers();
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    abnormal_cleanup();
    // SAFETY: _exit is async-signal-safe; children get SIGKILL via PR_SET_PDEATHSIG.
    unsafe { libc::_exit(128 + sig) };
}

fn abnormal_cleanup() {
    for p in ABNORMAL_NETNS.iter().filter_map(|slot| slot.get()) {
        // SAFETY: `p` is a NUL-terminated path that lives as long as the program; umount2
        // and unlink are async-signal-safe and touch no memory of ours.
        unsafe {
            libc::umount2(p.as_ptr(), libc::MNT_DETACH);
            libc::unlink(p.as_ptr());
        }
    }
    for p in ABNORMAL_CLEANUP.get().map_or(&[][..], |v| v.as_slice()) {
        // SAFETY: `p` is a NUL-terminated path that lives as long as the program.
        unsafe {
            if libc::unlink(p.as_ptr()) != 0 {
                libc::rmdir(p.as_ptr());
            }
        }
    }
}

/// Wait for `child` to end: its exit status and the CPU time (user + system, ns) it used,
/// all its threads and the children it waited for (wait4's resource usage). The child is
/// reaped: do not wait for it again.
pub fn wait_with_cpu(child: &mut std::process::Child) -> Result<(std::process::ExitStatus, u64)> {
    use std::os::unix::process::ExitStatusExt;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for our own child `pid`; both out-pointers are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(err(format!("waiting for process {pid}: {e}")));
        }
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    Ok((
        std::process::ExitStatus::from_raw(status),
        ns(ru.ru_utime) + ns(ru.ru_stime),
    ))
}

/// Spin for `ns` nanoseconds (stand-in work of a producer or consumer).
pub fn busy(ns: u64) {
    let until = beltway::sys::now_ns() + ns;
    while beltway::sys::now_ns() < until {
        std::hint::spin_loop();
    }
}

/// Prefix of every named ring this program creates: `slbench-<pid>-<n>`.
const NAME_PREFIX: &str = "slbench-";

/// A fresh ring name unique to this process.
pub fn ring_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{NAME_PREFIX}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Remove /dev/shm rings left by benchmark processes that no longer exist (a run killed by
/// a signal cannot unlink its rings). Rings of live processes are left alone.
pub fn remove_stale_rings() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NAME_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !process_running(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether `pid` names a process that has not exited (zombies have).
fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain spaces.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, None | Some("Z") | Some("X"))
}

/// A scratch directory `/tmp/slbench-<what>-<pid>` (or under another base), removed with
/// its contents on drop. Creating one first removes such directories left by runs that no
/// longer exist (a run killed by a signal cannot clean up).
#[derive(Debug)]
pub struct TempDir {
    path: std::path::PathBuf,
}

impl TempDir {
    pub fn new(what: &str) -> Result<TempDir> {
        TempDir::new_in(&std::env::temp_dir(), what)
    }

    pub fn new_in(tmp: &std::path::Path, what: &str) -> Result<TempDir> {
        let prefix = format!("{NAME_PREFIX}{what}-");
        if let Ok(dir) = std::fs::read_dir(tmp) {
            for entry in dir.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(pid) = name
                    .strip_prefix(&prefix)
                    .and_then(|p| p.parse::<u32>().ok())
                else {
                    continue;
                };
                if !process_running(pid) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let path = tmp.join(format!("{prefix}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).map_err(|e| err(format!("creating {}: {e}", path.display())))?;
        Ok(TempDir { path })
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_that_is_not_a_number_prints_as_such_and_fails_the_run() {
        assert_eq!(fmt_value(f64::NAN), "NaN");
        assert_eq!(fmt_value(f64::INFINITY), "inf");
        assert_eq!(fmt_value(0.0), "0.000");
        let mut s = Summary::default();
        s.add("ok_figure", 1.5, None, "");
        assert!(s.print().is_ok());
        s.add("lost_figure", f64::NAN, Some(Target::AtMost(0.0)), "");
        let err = s.print().unwrap_err().to_string();
        assert!(err.contains("lost_figure"), "{err}");
    }
}

/// The median of `v` (the mean of the middle two for an even count; NaN when empty, which
/// fails the run's summary). The one median every benchmark uses.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The seeded generator the benchmarks make their inputs with (xorshift64): the same rule
/// set and the same capture on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `len` lowercase letters.
    pub fn word(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| (b'a' + self.below(26) as u8) as char)
            .collect()
    }
}
