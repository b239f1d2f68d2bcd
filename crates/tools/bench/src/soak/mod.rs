//! `streamline-bench soak`: a daemon serving many users for a long while, then an account
//! of everything it was given back (issue 34, part 4). Not a speed figure: a soak test
//! outside `cargo test`, judged by its failures.
//!
//! It starts its own `streamlined` (socket, PipesFS mount and logs in a scratch directory,
//! a policy granting uid 65534 a capture template on a veth pair it creates in a network
//! namespace of its own) and drives it only as users do, through the `streamline` command
//! (`run --detach --log`, `ps`, `edit`, `stop`) and PipesFS, as root and as uid 65534
//! (`setpriv --reuid 65534 --regid 65534 --clear-groups`), for `--secs` (default 600,
//! with --quick 90):
//!
//! - Runs of each user (root: one thread per CPU, at least 2; uid 65534: half that, at
//!   least 1), in turns: a finite `gen count=N rate=R | count name=a | count name=tail`
//!   edited live seven times while it runs (insert, replace, set, branch, insert before,
//!   remove, remove; every edit keeps the stream lossless) and left to end; an endless one
//!   with an exported node (a named ring under /dev/shm) read by a `cat` of its PipesFS
//!   `all` that stops reading (a pipe nobody drains) and is then killed, edited, then
//!   stopped; one across a thread space and a process space, left to end; three short
//!   ones, one stopped at once, during which the other user tries to stop and to edit
//!   them (both must be refused, and the runs must not notice).
//! - Live captures on the veth: the sender on our end sends UDP bursts (`--burst-secs`
//!   long at a fifth of what the sender keeps alone, at most 50k datagrams/s), each
//!   followed by a quiet spell (`--quiet-secs`, default 30, with --quick 25). Root's
//!   `rx dev=V | bpf "udp" | count name=cap` (shared prefix) and uid 65534's (through its
//!   grant) live for the whole soak and are edited in every quiet spell (a count inserted
//!   after bpf, then removed); in every quiet spell more captures start (root's shared
//!   and with `--no-share`, uid 65534's), each lives through one burst and the following
//!   quiet spell, is checked to be still running at its end (a capture that died in the
//!   quiet is a failure, whatever `ps` or the daemon's log say), and is stopped, the
//!   latest first (a run that shares another's capture, through a subscription, ends when that
//!   one does: ARCHITECTURE.md, "Prefix sharing between runs"); a `cat` of a capture's
//!   `all.pcap` (of its source, `rx` or the shared prefix's `bpf`) blocks in its read through a
//!   third of the quiet spell and is then killed. Captures start and stop only in quiet
//!   spells, so the datagrams each one must count are exactly those sent while it ran.
//!
//! Every run is followed to its end: its `finished` line in the daemon's log (status 0:
//! whether it ended by itself or was stopped) and its report in its `--log` file, whose
//! counts must add up: a finite run's source emitted N and its tail counted N, an endless
//! one's tail counted what its source emitted, a capture counted the datagrams sent while
//! it ran, less those it said it lost to a full ring (a subscriber to a shared capture that
//! fell behind, which a loaded machine makes happen: counted + said lost = sent, the loss
//! printed at the end; a loss not said is a failure). Runs started must equal runs stopped + runs that ended + runs that died, and the
//! daemon's log must have one `started` and one end for each.
//!
//! Afterwards, with every run ended and again after the daemon's exit (SIGTERM): no
//! process the daemon started is left (its workers and their children, followed every
//! 0.5 s while the soak ran); no /dev/shm `streamline.*` object made by this soak (named
//! with our prefix, or written by one of those processes); no run directory in PipesFS
//! and, after exit, no mount; the daemon's descriptors (`/proc/PID/fd`) at most
//! [`FD_SLACK`] above their count after a warm-up (the same clients' work for 30 s,
//! with --quick 10 s, before the soak proper; its runs count as soak runs), and its
//! threads at most [`THREAD_SLACK`] above theirs; its resident memory (VmRSS) in the
//! second half of the soak (from the burst line nearest its middle to the end) at most
//! [`RSS_LATE_GROWTH_PCT`] % of its count after the warm-up (each burst line prints it,
//! so a steady climb shows from a step). Why the second half and not the total: with
//! PipesFS giving back what ended runs left (inodes on `forget`, filter homes and reader
//! counters when a run leaves the daemon's table), the daemon's RSS still grows early
//! and then stops: 13456 kB after the warm-up, 14864 kB after ~200 runs, 15388 kB after
//! ~400, 15232 kB after 597 (`--quick --quiet-secs 5 --secs 240`, 2026-11-27): +13 % in
//! all, none in the last third, which is the allocator's arenas and caches settling, not
//! state kept per run. A leak grows in proportion to the runs, so it shows in the second
//! half as in the first; warm-up growth shows only in the first. The total is still
//! printed (`soak_rss_growth_pct`, its earlier target 10 % kept and reported as met or
//! missed) but does not fail the soak. The daemon's log must hold no
//! panic; the daemon must exit 0 on SIGTERM and its helpers (the mount's fusermount3
//! watcher) go within 10 s.
//!
//! Each failure is printed by name with its cause as it happens and again in a list at
//! the end. SUMMARY: `soak_runs` (runs started), `soak_failures` (target 0),
//! `soak_rss_growth_pct` (target <= 10, not a failure), `soak_capture_lost_pct` (what
//! captures said they lost, target <= 0.1, not a failure), `soak_rss_late_growth_pct`
//! (target <= 3, 10 with --quick, a failure above); the command exits non-zero when a failure was
//! seen (after printing). Root only (it starts a daemon, mounts FUSE, makes a network
//! namespace); needs setpriv (util-linux), iproute2 and /dev/fuse.

mod checks;
mod clients;

use crate::streamlined::{binaries, euid, Daemon};
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir};
use checks::{shm_streamline, Memory, Procs};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long runs are started, in seconds (default 600, with --quick 90).
    #[arg(long)]
    secs: Option<f64>,
    /// Seconds of each quiet spell of the capture traffic (default 30, with --quick 25).
    #[arg(long)]
    quiet_secs: Option<f64>,
    /// Seconds of each burst (default 3, with --quick 2).
    #[arg(long)]
    burst_secs: Option<f64>,
}

/// Descriptors the daemon may hold above its count after the warm-up.
const FD_SLACK: usize = 4;
/// Threads the daemon may have above its count after the warm-up.
const THREAD_SLACK: usize = 2;
/// The stated bound on the daemon's resident memory growth in the second half of the
/// soak (from the burst line nearest its middle to its end), in percent of its resident
/// memory after the warm-up. See the module doc for why it is this and not the total.
const RSS_LATE_GROWTH_PCT: f64 = 3.0;
/// The same bound for `--quick` (90 s, ~230 runs: CI's smoke test), where the allocator's
/// warm-up still shows in the second half (2.97 % seen on a quiet machine, dev build): a
/// leak of 10 kB per run still crosses it (~20 % over ~230 runs).
const RSS_LATE_GROWTH_PCT_QUICK: f64 = 10.0;
/// Blocks per second of the rate-limited `gen` runs.
const GEN_RATE: u64 = 20_000;
/// The lossless live edits of a `gen` run (`{k}` makes names unique within the run).
const GEN_EDITS: [&str; 7] = [
    "insert after count:a count name=m1",
    "replace count:m1 sample every=1 name=s1",
    "set sample:s1 every=1",
    "branch count:a count name=b1",
    "insert before count:tail count name=m2",
    "remove sample:s1",
    "remove count:m2",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum User {
    Root,
    Nobody,
}

impl User {
    fn name(self) -> &'static str {
        match self {
            User::Root => "root",
            User::Nobody => "uid 65534",
        }
    }
    fn other(self) -> User {
        match self {
            User::Root => User::Nobody,
            User::Nobody => User::Root,
        }
    }
}

/// A run this soak started.
#[derive(Clone, Debug)]
struct RunRec {
    id: u64,
    user: User,
    pipeline: String,
    log: PathBuf,
}

impl RunRec {
    fn name(&self) -> String {
        format!("run {} ({}: {})", self.id, self.user.name(), self.pipeline)
    }
}

/// What a run's end must show.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// The source emitted N blocks and the tail counted N.
    Finite(u64),
    /// The tail counted what the source emitted.
    Lossless,
    /// `count:cap` counted this many datagrams, less what the run said it lost to a full
    /// ring (a subscriber that fell behind, on a loaded machine): counted + lost = sent.
    Captured(u64),
    /// Nothing about counts (runs stopped mid-way whose sink is not deterministic).
    Ended,
}

/// A run's end as the daemon's log says it.
#[derive(Clone, Debug)]
struct End {
    event: String,
    status: Option<i32>,
    line: String,
}

/// The books of the soak.
#[derive(Default, Debug)]
struct Ledger {
    started: u64,
    started_by: [u64; 2],
    stopped: u64,
    ended: u64,
    died: u64,
    unresolved: Vec<u64>,
    edits: u64,
    refusals_checked: u64,
    readers: u64,
    checked_blocks: u64,
    checked_datagrams: u64,
    /// Datagrams captures said they lost to a full ring (a subscriber that fell behind).
    capture_lost: u64,
}

/// What the daemon's log said so far (read by the monitor).
#[derive(Default)]
struct AuditView {
    read: usize,
    started: HashSet<u64>,
    ends: HashMap<u64, End>,
    /// Runs with more than one end line.
    doubled: Vec<u64>,
    panics: Vec<String>,
}

struct Soak {
    streamline: PathBuf,
    socket: PathBuf,
    daemon_log: PathBuf,
    daemon_pid: u32,
    mount: PathBuf,
    logs: PathBuf,
    /// Prefix of the names of exported nodes (and so of their rings).
    tag: String,
    deadline: Mutex<Instant>,
    next: AtomicU64,
    failures: Mutex<Vec<(String, String)>>,
    ledger: Mutex<Ledger>,
    audit: Mutex<AuditView>,
    /// Every process seen below the daemon: pid -> (start time, command).
    seen: Mutex<Procs>,
    /// The daemon's VmRSS (kB) at each burst line, with when it was taken.
    rss_samples: Mutex<Vec<(Instant, u64)>>,
    /// The daemon's own helpers below it (the mount's fusermount3 watcher: processes
    /// other than `streamline` there after the warm-up): they may stay while it runs.
    base_procs: Mutex<Procs>,
    done: AtomicBool,
}

/// The last lines of a file (for a failure's cause).
fn tail_of(p: &Path, n: usize) -> String {
    let t = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Poll `cond` every 20 ms until it holds or `limit` passes; whether it held.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The soak's lengths and clients, from the flags or their defaults.
struct Plan {
    quick: bool,
    secs: f64,
    quiet: f64,
    burst: f64,
    /// The warm-up before the baselines of descriptors, threads and memory are taken.
    warm: f64,
    root_threads: usize,
    nobody_threads: usize,
}

impl Plan {
    fn new(a: &Args, quick: bool) -> Plan {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Plan {
            quick,
            secs: a.secs.unwrap_or(if quick { 90.0 } else { 600.0 }),
            quiet: a.quiet_secs.unwrap_or(if quick { 25.0 } else { 30.0 }),
            burst: a.burst_secs.unwrap_or(if quick { 2.0 } else { 3.0 }),
            warm: if quick { 10.0 } else { 30.0 },
            root_threads: cpus.clamp(2, 8),
            nobody_threads: (cpus / 2).clamp(1, 4),
        }
    }
}

/// The daemon's descriptors, resident memory (kB) and threads at one moment.
#[derive(Clone, Copy, Default)]
struct Usage {
    fds: usize,
    rss: u64,
    threads: u64,
}

/// What the driver hands the checks: when it began, the daemon's usage after the
/// warm-up, and when the soak proper ran.
struct Phases {
    t_start: Instant,
    base: Usage,
    soak: Option<(Instant, Instant)>,
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    let plan = Plan::new(a, quick);
    watchdog(Duration::from_secs_f64(plan.warm + plan.secs + 150.0));
    preflight()?;
    let (streamlined, streamline) = binaries()?;
    println!(
        "streamline-bench soak ({} mode): {} s of runs by {} root and {} uid-65534 clients, captures with {} s bursts and {} s quiet spells",
        if quick { "quick" } else { "full" },
        plan.secs,
        plan.root_threads,
        plan.nobody_threads,
        plan.burst,
        plan.quiet
    );
    let dir = TempDir::new("soak")?;
    let (logs, mount) = scratch(&dir)?;
    let v = crate::traffic::veth()?;
    // Our ends send nothing of their own: the captured UDP is exactly what we send.
    crate::traffic::ipv6_off(&v)?;
    let policy = crate::streamlined::udp_grant_policy(dir.path(), &v.here)?;
    let shm_before = shm_streamline();
    let mut daemon =
        Daemon::start_with_policy(&streamlined, dir.path(), Some(&mount), Some(&policy))?;
    let daemon_pid = daemon.child.as_ref().map_or(0, |c| c.id());
    println!(
        "our daemon: {} --mount {} --policy {} (pid {daemon_pid})",
        streamlined.display(),
        mount.display(),
        policy.display()
    );
    let s = Soak::new(streamline, &daemon, daemon_pid, mount.clone(), logs);
    let phases = drive(&s, &plan, &v)?;
    println!(
        "soak: {:.0} s of runs ended; checking what the daemon gave back",
        phases.t_start.elapsed().as_secs_f64()
    );
    let leaks = checks::Leaks::with_runs_ended(&s, shm_before);
    checks::check_run_dirs(&s, &mount);
    let memory = checks::check_usage(&s, &phases, quick);
    checks::check_books(&s);
    checks::check_daemon_exit(&s, &mut daemon, &mount);
    leaks.after_exit();
    drop(v);
    verdict(&s, &plan, &memory)
}

/// Root, /dev/fuse and setpriv: what the soak needs before it starts anything.
fn preflight() -> Result<()> {
    let uid = euid()?;
    if uid != 0 {
        return Err(err(format!("the soak must run as root (effective uid is {uid}): it starts its own streamlined, mounts PipesFS (FUSE), makes a network namespace and runs as uid 65534 through setpriv")));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(err("/dev/fuse is missing: PipesFS needs FUSE"));
    }
    if !Command::new("setpriv")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return Err(err(
            "setpriv (util-linux) is missing: the soak runs uid 65534's clients through it",
        ));
    }
    Ok(())
}

/// The scratch directory opened to uid 65534, its `logs` (which every client writes to)
/// and the mount point; all removed on an abnormal exit. Returns (logs, mount).
fn scratch(dir: &TempDir) -> Result<(PathBuf, PathBuf)> {
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .map_err(|e| err(format!("{}: {e}", dir.path().display())))?;
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).map_err(|e| err(format!("{}: {e}", logs.display())))?;
    // Logs are opened by the clients, uid 65534's too.
    std::fs::set_permissions(&logs, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        .map_err(|e| err(format!("{}: {e}", logs.display())))?;
    let mount = dir.path().join("pipes");
    cleanup_on_abnormal_exit(&[
        &dir.path().join("control"),
        &dir.path().join("streamlined.log"),
        &dir.path().join("policy.toml"),
        &mount,
        dir.path(),
    ]);
    Ok((logs, mount))
}

impl Soak {
    fn new(
        streamline: PathBuf,
        daemon: &Daemon,
        daemon_pid: u32,
        mount: PathBuf,
        logs: PathBuf,
    ) -> Soak {
        Soak {
            streamline,
            socket: daemon.socket.clone(),
            daemon_log: daemon.log.clone(),
            daemon_pid,
            mount,
            logs,
            tag: format!("sk{}", std::process::id()),
            deadline: Mutex::new(Instant::now()),
            next: AtomicU64::new(0),
            failures: Mutex::new(Vec::new()),
            ledger: Mutex::new(Ledger::default()),
            audit: Mutex::new(AuditView::default()),
            seen: Mutex::new(HashMap::new()),
            rss_samples: Mutex::new(Vec::new()),
            base_procs: Mutex::new(HashMap::new()),
            done: AtomicBool::new(false),
        }
    }

    /// Runs are started until `secs` from now.
    fn set_deadline(&self, secs: f64) {
        *self.deadline.lock().expect("not poisoned") =
            Instant::now() + Duration::from_secs_f64(secs);
    }
}

/// One client thread per root and uid-65534 client, each in its own turn of runs.
fn spawn_clients<'scope>(
    scope: &'scope Scope<'scope, '_>,
    s: &'scope Soak,
    plan: &Plan,
) -> Vec<ScopedJoinHandle<'scope, ()>> {
    let quick = plan.quick;
    let mut users = Vec::new();
    for k in 0..plan.root_threads {
        users.push(scope.spawn(move || s.user_loop(User::Root, k, quick)));
    }
    for k in 0..plan.nobody_threads {
        users.push(scope.spawn(move || s.user_loop(User::Nobody, k + 1, quick)));
    }
    users
}

/// The measured phase: the monitor throughout; a warm-up, then the daemon's own helpers
/// and its usage noted; the soak proper (the clients and the capture conductor) until
/// the deadline; then every run must have ended.
fn drive(s: &Soak, plan: &Plan, v: &kernel::netns::Veth) -> Result<Phases> {
    let t_start = Instant::now();
    let mut base = Usage::default();
    let mut soak_from = None;
    std::thread::scope(|scope| -> Result<()> {
        let mon = scope.spawn(|| s.monitor());
        // Warm-up: the clients' work for a while, so the baselines include what the
        // first clients make (connection threads, their allocator arenas, caches).
        s.set_deadline(plan.warm);
        std::thread::scope(|warmup| {
            spawn_clients(warmup, s, plan);
        });
        let helpers: Procs = checks::descendants(s.daemon_pid)
            .into_iter()
            .filter(|(_, (_, comm))| comm != daemon::spawn::worker_comm())
            .collect();
        println!(
            "the daemon's own helpers: {:?}",
            helpers.values().map(|(_, c)| c).collect::<Vec<_>>()
        );
        *s.base_procs.lock().expect("not poisoned") = helpers;
        base = s.settle(&format!("after a warm-up of {} s", plan.warm));
        soak_from = Some(Instant::now());
        s.set_deadline(plan.secs);
        let users = spawn_clients(scope, s, plan);
        let caps = clients::captures(s, v, plan.quiet, plan.burst);
        for u in users {
            if u.join().is_err() {
                s.fail("a client thread", "panicked");
            }
        }
        if let Err(e) = &caps {
            s.fail("the capture conductor", e.to_string());
        }
        s.check_no_runs_left();
        s.done.store(true, Ordering::Relaxed);
        let _ = mon.join();
        Ok(())
    })?;
    Ok(Phases {
        t_start,
        base,
        soak: soak_from.map(|a| (a, Instant::now())),
    })
}

/// The failures listed, the SUMMARY lines, and the soak's result (an error when a
/// failure was seen).
fn verdict(s: &Soak, plan: &Plan, m: &Memory) -> Result<()> {
    let failures = s.failures.lock().expect("not poisoned").clone();
    let (started, lost, checked) = {
        let l = s.ledger.lock().expect("not poisoned");
        (l.started, l.capture_lost, l.checked_datagrams)
    };
    if failures.is_empty() {
        println!("\nno failures");
    } else {
        println!("\n== {} failures ==", failures.len());
        for (name, cause) in &failures {
            println!("- {name}: {cause}");
        }
    }
    let (rss0, rss1) = (m.rss0, m.rss1);
    let mut summary = Summary::default();
    summary.add(
        "soak_runs",
        started as f64,
        None,
        format!("runs started by root and uid 65534 in {} s", plan.secs),
    );
    summary.add(
        "soak_failures",
        failures.len() as f64,
        Some(Target::AtMost(0.0)),
        "listed above",
    );
    summary.add(
        "soak_rss_growth_pct",
        m.growth,
        Some(Target::AtMost(10.0)),
        format!("daemon VmRSS {rss0} -> {rss1} kB"),
    );
    summary.add(
        "soak_rss_late_growth_pct",
        m.late,
        Some(Target::AtMost(m.bound)),
        format!(
            "daemon VmRSS {} -> {rss1} kB in the second half, of {rss0} kB",
            m.mid_text()
        ),
    );
    // A capture's stated losses are no failure (a loaded machine makes a subscriber fall
    // behind), but on a quiet machine there should be none: a figure with a target, so a
    // regression shows as MISSED (the readiness core's 50 ms subscriber looks lost 3 %).
    summary.add(
        "soak_capture_lost_pct",
        if checked > 0 {
            lost as f64 / checked as f64 * 100.0
        } else {
            0.0
        },
        Some(Target::AtMost(0.1)),
        format!(
            "{lost} of {checked} datagrams said lost to a full ring by captures that fell behind"
        ),
    );
    summary.print()?;
    if failures.is_empty() {
        Ok(())
    } else {
        Err(err(format!(
            "{} soak failures (listed above)",
            failures.len()
        )))
    }
}
