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

use crate::daemon::{binaries, euid, parse_report, Daemon};
use crate::proc::kill_with_us;
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir};
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
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
    seen: Mutex<HashMap<u32, (u64, String)>>,
    /// The daemon's VmRSS (kB) at each burst line, with when it was taken.
    rss_samples: Mutex<Vec<(Instant, u64)>>,
    /// The daemon's own helpers below it (the mount's fusermount3 watcher: processes
    /// other than `streamline` there after the warm-up): they may stay while it runs.
    base_procs: Mutex<HashMap<u32, (u64, String)>>,
    done: AtomicBool,
}

/// A command's end.
struct Out {
    ok: bool,
    status: String,
    stdout: String,
    stderr: String,
}

/// Run `cmd` to its end, killing it after `limit` (a hung command is an error, never a
/// hung soak).
fn run_within(mut cmd: Command, limit: Duration, what: &str) -> Result<Out> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    kill_with_us(&mut cmd);
    let child = cmd
        .spawn()
        .map_err(|e| err(format!("starting {what}: {e}")))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(o)) => Ok(Out {
            ok: o.status.success(),
            status: o.status.to_string(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }),
        Ok(Err(e)) => Err(err(format!("{what}: {e}"))),
        Err(_) => {
            // SAFETY: kill(2) on our own child, not yet reaped (its waiter is blocked).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let _ = rx.recv();
            Err(err(format!(
                "{what} did not return within {} s (killed)",
                limit.as_secs()
            )))
        }
    }
}

/// `(state, ppid, start time, comm)` of a process, from /proc/PID/stat.
fn stat_of(pid: u32) -> Option<(String, u32, u64, String)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let f: Vec<&str> = s[close + 1..].split_whitespace().collect();
    Some((
        f.first()?.to_string(),
        f.get(1)?.parse().ok()?,
        f.get(19)?.parse().ok()?,
        comm,
    ))
}

/// Live processes below `root` (children, grandchildren, ...): pid -> (start, comm).
fn descendants(root: u32) -> HashMap<u32, (u64, String)> {
    let mut parent: HashMap<u32, Vec<(u32, u64, String)>> = HashMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((state, ppid, start, comm)) = stat_of(pid) {
                if state != "Z" && state != "X" {
                    parent.entry(ppid).or_default().push((pid, start, comm));
                }
            }
        }
    }
    let mut out = HashMap::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for (c, start, comm) in parent.get(&p).cloned().unwrap_or_default() {
            if out.insert(c, (start, comm)).is_none() {
                todo.push(c);
            }
        }
    }
    out
}

/// A field of /proc/PID/status in kB or as a count.
fn status_field(pid: u32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `streamline.*` objects under /dev/shm.
fn shm_streamline() -> HashSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("streamline."))
                .collect()
        })
        .unwrap_or_default()
}

/// The value of `key` in a PipesFS `.stats` text.
fn stat_value(stats: &str, key: &str) -> Option<u64> {
    stats.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
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

/// One row of `streamline ps`: id, user, state.
#[derive(Debug, Clone)]
struct PsRow {
    id: u64,
    user: String,
    state: String,
}

/// Parse `streamline ps` (a header, then `ID USER STATE UPTIME RATE PIPELINE` rows, each
/// maybe followed by an indented placement line). The state may hold spaces
/// (`running (detached)`): it is the text between the user and the uptime (`12.3s`).
fn parse_ps(text: &str) -> Result<Vec<PsRow>> {
    let mut rows = Vec::new();
    for l in text.lines().skip(1) {
        if !l.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let up = f
            .iter()
            .position(|w| w.ends_with('s') && w[..w.len() - 1].parse::<f64>().is_ok())
            .ok_or_else(|| err(format!("`streamline ps`: no uptime in `{l}`")))?;
        if up < 3 {
            return Err(err(format!("`streamline ps`: a short row `{l}`")));
        }
        rows.push(PsRow {
            id: f[0]
                .parse()
                .map_err(|_| err(format!("`streamline ps`: id `{}` in `{l}`", f[0])))?,
            user: f[1].to_string(),
            state: f[2..up].join(" "),
        });
    }
    Ok(rows)
}

impl Soak {
    fn fail(&self, name: impl Into<String>, cause: impl Into<String>) {
        let (name, cause) = (name.into(), cause.into());
        println!("FAILURE {name}: {cause}");
        self.failures.lock().expect("not poisoned").push((name, cause));
    }

    fn book(&self, f: impl FnOnce(&mut Ledger)) {
        f(&mut self.ledger.lock().expect("not poisoned"))
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock().expect("not poisoned")
    }

    fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    fn cli(&self, user: User) -> Command {
        let mut c = match user {
            User::Root => Command::new(&self.streamline),
            User::Nobody => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(&self.streamline);
                c
            }
        };
        c.env("STREAMLINE_SOCKET", &self.socket);
        c
    }

    /// `streamline ARGS` as `user`, at most 30 s.
    fn call(&self, user: User, args: &[&str]) -> Result<Out> {
        let mut c = self.cli(user);
        c.args(args);
        run_within(
            c,
            Duration::from_secs(30),
            &format!("`streamline {}` as {}", args.join(" "), user.name()),
        )
    }

    /// `streamline run --detach --log LOG [flags] PIPELINE` as `user`; the run, or a failure.
    fn start(&self, user: User, pipeline: &str, flags: &[&str]) -> Option<RunRec> {
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        let log = self.logs.join(format!("run-{k}.log"));
        let log_s = log.to_string_lossy().into_owned();
        let mut args = vec!["run", "--detach", "--log", &log_s];
        args.extend_from_slice(flags);
        args.push(pipeline);
        let name = format!("start #{k} ({}: {pipeline})", user.name());
        match self.call(user, &args) {
            Ok(o) if o.ok => match o.stdout.trim().parse::<u64>() {
                Ok(id) => {
                    self.book(|l| {
                        l.started += 1;
                        l.started_by[user as usize] += 1;
                    });
                    Some(RunRec {
                        id,
                        user,
                        pipeline: pipeline.to_string(),
                        log,
                    })
                }
                Err(_) => {
                    self.fail(name, format!("printed no run id: `{}`", o.stdout.trim()));
                    None
                }
            },
            Ok(o) => {
                self.fail(name, format!("refused ({}): {}", o.status, o.stderr.trim()));
                None
            }
            Err(e) => {
                self.fail(name, e.to_string());
                None
            }
        }
    }

    fn ps(&self) -> Result<Vec<PsRow>> {
        let o = self.call(User::Root, &["ps"])?;
        if !o.ok {
            return Err(err(format!(
                "`streamline ps` failed ({}): {}",
                o.status,
                o.stderr.trim()
            )));
        }
        parse_ps(&o.stdout)
    }

    /// Check that `ps` shows the run running, owned by its user; false (and a failure)
    /// if not.
    fn check_running(&self, r: &RunRec, when: &str) -> bool {
        let rows = match self.ps() {
            Ok(rows) => rows,
            Err(e) => {
                self.fail(format!("{} ps {when}", r.name()), e.to_string());
                return false;
            }
        };
        match rows.iter().find(|p| p.id == r.id) {
            Some(p) if p.state.starts_with("running") => {
                let want = match r.user {
                    User::Root => ["root", "0"],
                    User::Nobody => ["nobody", "65534"],
                };
                if !want.contains(&p.user.as_str()) {
                    self.fail(
                        format!("{} owner in ps", r.name()),
                        format!("ps says user `{}`", p.user),
                    );
                }
                true
            }
            Some(p) => {
                self.fail(
                    format!("{} {when}", r.name()),
                    format!("ps says state `{}`, not running", p.state),
                );
                false
            }
            None => {
                let end = self.audit.lock().expect("not poisoned").ends.get(&r.id).cloned();
                self.fail(
                    format!("{} {when}", r.name()),
                    format!(
                        "gone from ps while it should run; the daemon's log: {}; its log: {}",
                        end.map_or("no end recorded".to_string(), |e| e.line),
                        tail_of(&r.log, 6)
                    ),
                );
                false
            }
        }
    }

    /// `streamline edit ID TEXT` as the run's user; whether it was applied. A refusal
    /// is a failure unless the run has ended (`ended_ok`: a finite run may outrun its
    /// edits).
    fn edit(&self, r: &RunRec, text: &str, ended_ok: bool) -> bool {
        let id = r.id.to_string();
        match self.call(r.user, &["edit", &id, text]) {
            Ok(o) if o.ok => {
                self.book(|l| l.edits += 1);
                true
            }
            Ok(o) => {
                // Refused because the run had ended (its end is in the daemon's log).
                let ended = ended_ok && self.end_of(r.id, Duration::from_secs(3)).is_some();
                if !ended {
                    self.fail(
                        format!("{} edit `{text}`", r.name()),
                        format!("refused ({}): {}", o.status, o.stderr.trim()),
                    );
                }
                false
            }
            Err(e) => {
                self.fail(format!("{} edit `{text}`", r.name()), e.to_string());
                false
            }
        }
    }

    fn stop(&self, r: &RunRec) -> bool {
        let id = r.id.to_string();
        match self.call(r.user, &["stop", &id]) {
            Ok(o) if o.ok => true,
            Ok(o) => {
                self.fail(
                    format!("{} stop", r.name()),
                    format!("refused ({}): {}", o.status, o.stderr.trim()),
                );
                false
            }
            Err(e) => {
                self.fail(format!("{} stop", r.name()), e.to_string());
                false
            }
        }
    }

    /// The run's end in the daemon's log, waiting up to `limit`.
    fn end_of(&self, id: u64, limit: Duration) -> Option<End> {
        let t0 = Instant::now();
        loop {
            if let Some(e) = self.audit.lock().expect("not poisoned").ends.get(&id) {
                return Some(e.clone());
            }
            if t0.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Follow a run to its end (`stopped`: we asked it to stop) and check its counts.
    fn finish(&self, r: &RunRec, stopped: bool, limit: Duration, expect: Expect) {
        let Some(end) = self.end_of(r.id, limit) else {
            self.fail(
                format!("{} end", r.name()),
                format!(
                    "no end within {} s{}; its log: {}",
                    limit.as_secs(),
                    if stopped { " of its stop" } else { "" },
                    tail_of(&r.log, 6)
                ),
            );
            self.book(|l| l.unresolved.push(r.id));
            // Try once more, so it does not outlive the soak.
            let _ = self.call(User::Root, &["stop", &r.id.to_string()]);
            return;
        };
        if end.event != "finished" || end.status != Some(0) {
            self.fail(
                format!("{} end", r.name()),
                format!(
                    "{}; its log: {}",
                    end.line.trim_start_matches("streamlined: audit: "),
                    tail_of(&r.log, 8)
                ),
            );
            self.book(|l| l.died += 1);
            return;
        }
        self.book(|l| {
            if stopped {
                l.stopped += 1
            } else {
                l.ended += 1
            }
        });
        // The report is written before `finished` is sent; the log is ours to read.
        let text = std::fs::read_to_string(&r.log).unwrap_or_default();
        let check = || -> Result<u64> {
            let rep = parse_report(&text)?;
            // A node in another space is labelled with it (`count:tail@p2`).
            let label = |want: &str| -> String {
                rep.rows
                    .iter()
                    .map(|r| r.label.as_str())
                    .find(|l| *l == want || l.split('@').next() == Some(want))
                    .unwrap_or(want)
                    .to_string()
            };
            match expect {
                Expect::Finite(n) => {
                    let (src, tail) = (rep.source_blocks()?, rep.count_of(&label("count:tail"))?);
                    if src != n || tail != n {
                        return Err(err(format!(
                            "the source emitted {src} and the tail counted {tail}, of {n}"
                        )));
                    }
                    Ok(n)
                }
                Expect::Lossless => {
                    let (src, tail) = (rep.source_blocks()?, rep.count_of(&label("count:tail"))?);
                    if src != tail {
                        return Err(err(format!(
                            "the source emitted {src} but the tail counted {tail}"
                        )));
                    }
                    Ok(src)
                }
                Expect::Captured(n) => {
                    let got = rep.count_of(&label("count:cap"))?;
                    let lost = lost_to_full_rings(&text);
                    if got + lost != n {
                        return Err(err(format!(
                            "counted {got} of the {n} datagrams sent while it ran{}",
                            if lost > 0 { format!(" and said it lost {lost}: they do not add up") } else { String::new() }
                        )));
                    }
                    self.book(|l| l.capture_lost += lost);
                    Ok(n)
                }
                Expect::Ended => Ok(0),
            }
        };
        match check() {
            Ok(n) => self.book(|l| {
                if matches!(expect, Expect::Captured(_)) {
                    l.checked_datagrams += n
                } else {
                    l.checked_blocks += n
                }
            }),
            Err(e) => self.fail(
                format!("{} counts", r.name()),
                format!("{e}; its log: {}", text.trim().replace('\n', " | ")),
            ),
        }
    }

    /// A `cat` of `file` (as `user`) whose output nobody reads, held `hold`, then
    /// killed; the node's `.stats` must count it as a reader meanwhile and not after.
    fn stalled_reader(&self, user: User, file: &Path, hold: Duration, what: &str) {
        let stats = file.with_file_name(".stats");
        let name = format!("stalled reader of {what} ({})", user.name());
        if !wait_until(Duration::from_secs(10), || file.exists()) {
            self.fail(name, format!("{} did not appear within 10 s", file.display()));
            return;
        }
        let mut cmd = match user {
            User::Root => Command::new("cat"),
            User::Nobody => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "cat"]);
                c
            }
        };
        cmd.arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        kill_with_us(&mut cmd);
        let mut child: Child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                self.fail(name, format!("starting cat: {e}"));
                return;
            }
        };
        self.book(|l| l.readers += 1);
        let readers = || {
            std::fs::read_to_string(&stats)
                .ok()
                .and_then(|s| stat_value(&s, "readers"))
        };
        if !wait_until(Duration::from_secs(10), || readers().is_some_and(|n| n >= 1)) {
            let exited = child.try_wait().ok().flatten();
            let mut e = String::new();
            if exited.is_some() {
                if let Some(mut s) = child.stderr.take() {
                    let _ = s.read_to_string(&mut e);
                }
            }
            self.fail(
                name.clone(),
                format!(
                    "{} never showed it as a reader (readers {:?}); cat {}{}",
                    stats.display(),
                    readers(),
                    exited.map_or("still running".to_string(), |s| format!("exited ({s})")),
                    if e.is_empty() { String::new() } else { format!(": {}", e.trim()) }
                ),
            );
        }
        let t0 = Instant::now();
        while t0.elapsed() < hold && !self.done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Ok(Some(st)) = child.try_wait() {
            let mut e = String::new();
            if let Some(mut s) = child.stderr.take() {
                let _ = s.read_to_string(&mut e);
            }
            self.fail(
                name.clone(),
                format!("cat ended by itself while stalled ({st}): {}", e.trim()),
            );
        }
        let _ = child.kill();
        let _ = child.wait();
        if !wait_until(Duration::from_secs(10), || readers() == Some(0)) {
            self.fail(
                name,
                format!(
                    "{} still counts {:?} readers 10 s after the reader was killed",
                    stats.display(),
                    readers()
                ),
            );
        }
    }

    /// The monitor: reads the daemon's log as it grows and notes every process below
    /// the daemon, every 100 ms / 500 ms, until `done`.
    fn monitor(&self) {
        let mut k = 0u64;
        loop {
            let last = self.done.load(Ordering::Relaxed);
            self.read_audit();
            if k % 5 == 0 || last {
                let now = descendants(self.daemon_pid);
                let mut seen = self.seen.lock().expect("not poisoned");
                for (pid, v) in now {
                    seen.entry(pid).or_insert(v);
                }
            }
            if last {
                return;
            }
            k += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn read_audit(&self) {
        let text = std::fs::read(&self.daemon_log).unwrap_or_default();
        let mut a = self.audit.lock().expect("not poisoned");
        // Whole lines only.
        let Some(end) = text[a.read.min(text.len())..]
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|p| a.read + p + 1)
        else {
            return;
        };
        let new = String::from_utf8_lossy(&text[a.read..end]).into_owned();
        a.read = end;
        for line in new.lines() {
            if line.contains("panicked") {
                a.panics.push(line.to_string());
            }
            let Some(rest) = line.strip_prefix("streamlined: audit: ") else {
                continue;
            };
            let event = rest.split_whitespace().next().unwrap_or("");
            let field = |k: &str| {
                rest.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .and_then(|v| v.parse::<i64>().ok())
            };
            let Some(run) = field("run=").map(|r| r as u64) else {
                continue;
            };
            match event {
                "started" => {
                    a.started.insert(run);
                }
                "finished" | "crashed" | "rolled_back" => {
                    let e = End {
                        event: event.to_string(),
                        status: field("status=").map(|s| s as i32),
                        line: line.to_string(),
                    };
                    if a.ends.insert(run, e).is_some() {
                        a.doubled.push(run);
                    }
                }
                _ => {}
            }
        }
    }

    /// One user's stream of runs until the deadline; `k0` numbers this thread.
    fn user_loop(&self, user: User, k0: usize, quick: bool) {
        let mut k = k0;
        while !self.past_deadline() {
            match k % 4 {
                0 => self.edited_finite(user, quick),
                1 => self.endless_with_reader(user),
                2 => self.across_spaces(user),
                _ => self.short_ones(user),
            }
            k += 1;
        }
    }

    /// A finite run edited seven times while it runs, left to end.
    fn edited_finite(&self, user: User, quick: bool) {
        let secs = if quick { 1.5 } else { 2.5 };
        let n = (GEN_RATE as f64 * secs) as u64;
        let p = format!("gen count={n} size=64 rate={GEN_RATE} | count name=a | count name=tail");
        let Some(r) = self.start(user, &p, &[]) else { return };
        self.check_running(&r, "after start");
        let t0 = Instant::now();
        for (j, e) in GEN_EDITS.iter().enumerate() {
            let at = secs * 0.8 * j as f64 / GEN_EDITS.len() as f64;
            let wait = at - t0.elapsed().as_secs_f64();
            if wait > 0.0 {
                std::thread::sleep(Duration::from_secs_f64(wait));
            }
            if !self.edit(&r, e, true) {
                break;
            }
        }
        self.finish(&r, false, Duration::from_secs_f64(secs + 30.0), Expect::Finite(n));
    }

    /// An endless run with an exported node, a stalled PipesFS reader, edits, then stop.
    fn endless_with_reader(&self, user: User) {
        let ex = format!(
            "{}{}x{}",
            self.tag,
            if user == User::Root { "r" } else { "n" },
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let p = format!(
            "gen count=100G size=256 rate={GEN_RATE} | count name=a | count name={ex} export=yes | count name=tail"
        );
        let Some(r) = self.start(user, &p, &[]) else { return };
        self.check_running(&r, "after start");
        if !wait_until(Duration::from_secs(10), || {
            Path::new(&format!("/dev/shm/streamline.{ex}")).exists()
        }) {
            self.fail(
                format!("{} export", r.name()),
                format!("/dev/shm/streamline.{ex} did not appear within 10 s"),
            );
        }
        let all = self.mount.join(r.id.to_string()).join("gen/count:a/all");
        self.stalled_reader(user, &all, Duration::from_millis(1500), &format!("run {} count:a", r.id));
        for e in &GEN_EDITS[..3] {
            self.edit(&r, e, false);
        }
        self.check_running(&r, "before stop");
        if self.stop(&r) {
            self.finish(&r, true, Duration::from_secs(30), Expect::Lossless);
        } else {
            self.book(|l| l.unresolved.push(r.id));
        }
        if !wait_until(Duration::from_secs(10), || {
            !Path::new(&format!("/dev/shm/streamline.{ex}")).exists()
        }) {
            self.fail(
                format!("{} export", r.name()),
                format!("/dev/shm/streamline.{ex} still there 10 s after the run ended"),
            );
        }
    }

    /// A finite run across a thread space and a process space, left to end.
    fn across_spaces(&self, user: User) {
        let n = GEN_RATE;
        let p = format!(
            "gen count={n} size=64 rate={GEN_RATE} | count name=a space=1 | count name=tail space=p2"
        );
        let Some(r) = self.start(user, &p, &[]) else { return };
        self.finish(&r, false, Duration::from_secs(40), Expect::Finite(n));
    }

    /// Three short runs, one stopped at once; of root's, uid 65534 may neither stop nor
    /// edit one.
    fn short_ones(&self, user: User) {
        // Three seconds each, so the stops and the other user's tries find them running.
        let n = 6000;
        let p = format!("gen count={n} size=64 rate={} | count name=a | count name=tail", n / 3);
        let runs: Vec<RunRec> = (0..3).filter_map(|_| self.start(user, &p, &[])).collect();
        // Root may stop and edit anyone's run; uid 65534 may not touch root's.
        if let Some(r) = runs.first().filter(|_| user == User::Root) {
            let id = r.id.to_string();
            let other = user.other();
            for args in [vec!["stop", id.as_str()], vec!["edit", id.as_str(), "remove count:a"]] {
                match self.call(other, &args) {
                    Ok(o) if o.ok => self.fail(
                        format!("{} {} by {}", r.name(), args[0], other.name()),
                        format!("allowed: `{}`", o.stdout.trim()),
                    ),
                    Ok(_) => self.book(|l| l.refusals_checked += 1),
                    Err(e) => self.fail(format!("{} {} by {}", r.name(), args[0], other.name()), e.to_string()),
                }
            }
        }
        let mut stopped = None;
        if let Some(r) = runs.get(1) {
            if self.stop(r) {
                stopped = Some(r.id);
            }
        }
        for r in &runs {
            if Some(r.id) == stopped {
                self.finish(r, true, Duration::from_secs(30), Expect::Lossless);
            } else {
                self.finish(r, false, Duration::from_secs(30), Expect::Finite(n));
            }
        }
    }
}

/// A capture run and the datagram count when it started.
struct Cap {
    run: RunRec,
    sent_at_start: u64,
    /// The quiet spell in which it is to be stopped (None: at the end).
    stop_after: Option<usize>,
}

/// The capture conductor: bursts, quiet spells, capture runs started, edited, read and
/// stopped in the quiet.
fn captures(s: &Soak, v: &kernel::netns::Veth, quiet: f64, burst: f64) -> Result<()> {
    let max = crate::capture::max_rate(&v.here_ip, &v.peer_ip, 0.5, 64)?;
    let pps = ((max * 0.2) as u64).clamp(1000, 50_000);
    println!(
        "captures on {}: the sender keeps {max:.0} datagrams/s alone; bursts of {burst} s at {pps}/s, quiet spells of {quiet} s",
        v.here
    );
    let mut sent = 0u64;
    let pipe = format!("rx dev={} | bpf \"udp\" | count name=cap", v.here);
    let mut caps: Vec<Cap> = Vec::new();
    let start_cap = |user: User, flags: &[&str], stop_after: Option<usize>, sent: u64| {
        s.start(user, &pipe, flags).map(|run| Cap {
            run,
            sent_at_start: sent,
            stop_after,
        })
    };
    caps.extend(start_cap(User::Root, &[], None, sent));
    caps.extend(start_cap(User::Nobody, &[], None, sent));
    let cycle = burst + quiet + 2.0;
    let mut c = 0usize;
    while s.deadline().saturating_duration_since(Instant::now()).as_secs_f64() > cycle {
        // New captures for the next burst and the quiet after it.
        let flags: &[&str] = if c % 2 == 0 { &[] } else { &["--no-share"] };
        caps.extend(start_cap(User::Root, flags, Some(c + 1), sent));
        caps.extend(start_cap(User::Nobody, &[], Some(c + 1), sent));
        // Still in the quiet: a capture whose `run --detach` returned captures already.
        std::thread::sleep(Duration::from_secs(1));
        let (n, _) = crate::capture::send_sized(&v.here_ip, &v.peer_ip, pps, burst, 1, 64)?;
        sent += n;
        let quiet_from = Instant::now();
        let rss = status_field(s.daemon_pid, "VmRSS:").unwrap_or(0);
        s.rss_samples.lock().expect("not poisoned").push((quiet_from, rss));
        println!(
            "[{:>4.0} s left] burst {c}: {n} datagrams ({sent} in all); {} captures running; daemon {rss} kB resident, {} descriptors; quiet for {quiet} s",
            s.deadline().saturating_duration_since(quiet_from).as_secs_f64(),
            caps.len(),
            fd_count(s.daemon_pid)
        );
        // In the quiet: the long captures edited; a reader blocked in its read, killed.
        std::thread::sleep(Duration::from_secs(1));
        for cap in caps.iter().filter(|c| c.stop_after.is_none()) {
            s.edit(&cap.run, &format!("insert after bpf count name=e{c}"), false);
        }
        if let Some(cap) = caps.iter().find(|cap| cap.stop_after == Some(c + 1)) {
            // The source's directory: `rx`, or the shared prefix's last node (`bpf`) for a
            // run sharing a capture (its subscription, folded as the table folds it).
            let top = s.mount.join(cap.run.id.to_string());
            let mut src = None;
            wait_until(Duration::from_secs(10), || {
                src = std::fs::read_dir(&top).ok().and_then(|d| {
                    d.flatten()
                        .map(|e| e.path())
                        .find(|p| p.is_dir() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
                });
                src.is_some()
            });
            let file = src.unwrap_or_else(|| top.join("rx")).join("all.pcap");
            s.stalled_reader(
                cap.run.user,
                &file,
                Duration::from_secs_f64(quiet / 3.0),
                &format!("capture run {} rx", cap.run.id),
            );
        }
        for cap in caps.iter().filter(|c| c.stop_after.is_none()) {
            s.edit(&cap.run, &format!("remove count:e{c}"), false);
        }
        let left = quiet - quiet_from.elapsed().as_secs_f64();
        if left > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(left));
        }
        // The end of the quiet spell: every capture must still run; those due stop, the
        // latest first (a run sharing another's capture ends when that one does, and it
        // started later).
        let mut keep = Vec::new();
        let mut due = Vec::new();
        for cap in caps.drain(..) {
            let alive = s.check_running(&cap.run, &format!("after quiet spell {c} ({quiet} s)"));
            if cap.stop_after == Some(c) || !alive {
                due.push((cap, alive));
            } else {
                keep.push(cap);
            }
        }
        for (cap, alive) in due.iter().rev() {
            stop_cap(s, cap, sent, *alive);
        }
        caps = keep;
        c += 1;
    }
    std::thread::sleep(Duration::from_secs(1));
    let alive: Vec<bool> = caps
        .iter()
        .map(|cap| s.check_running(&cap.run, "at the end"))
        .collect();
    for (cap, alive) in caps.iter().zip(alive).rev() {
        stop_cap(s, cap, sent, alive);
    }
    Ok(())
}

fn stop_cap(s: &Soak, cap: &Cap, sent: u64, alive: bool) {
    if !alive {
        // Died (already a failure): account for its end.
        s.finish(&cap.run, false, Duration::from_secs(5), Expect::Ended);
        return;
    }
    if s.stop(&cap.run) {
        s.finish(
            &cap.run,
            true,
            Duration::from_secs(30),
            Expect::Captured(sent - cap.sent_at_start),
        );
    } else {
        s.book(|l| l.unresolved.push(cap.run.id));
    }
}

/// Mount points under `dir` in our mount table.
fn mounted(p: &Path) -> bool {
    let want = p.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(&*want))
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    let secs = a.secs.unwrap_or(if quick { 90.0 } else { 600.0 });
    let quiet = a.quiet_secs.unwrap_or(if quick { 25.0 } else { 30.0 });
    let burst = a.burst_secs.unwrap_or(if quick { 2.0 } else { 3.0 });
    // The warm-up before the baselines of descriptors, threads and memory are taken.
    let warm = if quick { 10.0 } else { 30.0 };
    watchdog(Duration::from_secs_f64(warm + secs + 150.0));
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
        return Err(err("setpriv (util-linux) is missing: the soak runs uid 65534's clients through it"));
    }
    let (streamlined, streamline) = binaries()?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (root_threads, nobody_threads) = (cpus.clamp(2, 8), (cpus / 2).clamp(1, 4));
    println!(
        "streamline-bench soak ({} mode): {secs} s of runs by {root_threads} root and {nobody_threads} uid-65534 clients, captures with {burst} s bursts and {quiet} s quiet spells",
        if quick { "quick" } else { "full" }
    );
    let dir = TempDir::new("soak")?;
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
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
    let v = crate::capture::veth()?;
    // Our ends send nothing of their own: the captured UDP is exactly what we send.
    for (here, dev) in [(true, &v.here), (false, &v.there)] {
        let arg = format!("net.ipv6.conf.{dev}.disable_ipv6=1");
        let r = if here {
            kernel::netns::run(&["sysctl", "-qw", &arg])
        } else {
            v.exec(&["sysctl", "-qw", &arg])
        };
        r.map_err(|e| err(format!("turning IPv6 off on {dev}: {e}")))?;
    }
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[[grant]]\nusers = [\"65534\"]\ntemplate = 'rx dev={} | bpf \"udp\"'\n",
            v.here
        ),
    )
    .map_err(|e| err(format!("{}: {e}", policy.display())))?;
    let shm_before = shm_streamline();
    let mut daemon = Daemon::start_with_policy(&streamlined, dir.path(), Some(&mount), Some(&policy))?;
    let daemon_pid = daemon.child.as_ref().map_or(0, |c| c.id());
    println!(
        "our daemon: {} --mount {} --policy {} (pid {daemon_pid})",
        streamlined.display(),
        mount.display(),
        policy.display()
    );
    let s = Soak {
        streamline,
        socket: daemon.socket.clone(),
        daemon_log: daemon.log.clone(),
        daemon_pid,
        mount: mount.clone(),
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
    };
    let workers = |s: &Soak| -> HashMap<u32, (u64, String)> {
        let base = s.base_procs.lock().expect("not poisoned").clone();
        descendants(daemon_pid)
            .into_iter()
            .filter(|(p, v)| base.get(p) != Some(v))
            .collect()
    };
    let settle = |what: &str| {
        // Let the last runs' processes go.
        wait_until(Duration::from_secs(5), || workers(&s).is_empty());
        std::thread::sleep(Duration::from_millis(500));
        let (fds, rss, threads) = (
            fd_count(daemon_pid),
            status_field(daemon_pid, "VmRSS:").unwrap_or(0),
            status_field(daemon_pid, "Threads:").unwrap_or(0),
        );
        println!("daemon {what}: {fds} descriptors, {rss} kB resident, {threads} threads");
        (fds, rss, threads)
    };
    let mut base = (0, 0, 0);
    let t_start = Instant::now();
    let mut soak_from = None;
    let res = std::thread::scope(|scope| -> Result<()> {
        let mon = scope.spawn(|| s.monitor());
        // Warm-up: the clients' work for a while, so the baselines include what the
        // first clients make (connection threads, their allocator arenas, caches).
        *s.deadline.lock().expect("not poisoned") = Instant::now() + Duration::from_secs_f64(warm);
        std::thread::scope(|warmup| {
            for k in 0..root_threads {
                let s = &s;
                warmup.spawn(move || s.user_loop(User::Root, k, quick));
            }
            for k in 0..nobody_threads {
                let s = &s;
                warmup.spawn(move || s.user_loop(User::Nobody, k + 1, quick));
            }
        });
        let helpers: HashMap<u32, (u64, String)> = descendants(daemon_pid)
            .into_iter()
            .filter(|(_, (_, comm))| comm != "streamline")
            .collect();
        println!(
            "the daemon's own helpers: {:?}",
            helpers.values().map(|(_, c)| c).collect::<Vec<_>>()
        );
        *s.base_procs.lock().expect("not poisoned") = helpers;
        base = settle(&format!("after a warm-up of {warm} s"));
        soak_from = Some(Instant::now());
        *s.deadline.lock().expect("not poisoned") = Instant::now() + Duration::from_secs_f64(secs);
        let mut users = Vec::new();
        for k in 0..root_threads {
            let s = &s;
            users.push(scope.spawn(move || s.user_loop(User::Root, k, quick)));
        }
        for k in 0..nobody_threads {
            let s = &s;
            users.push(scope.spawn(move || s.user_loop(User::Nobody, k + 1, quick)));
        }
        let caps = captures(&s, &v, quiet, burst);
        for u in users {
            if u.join().is_err() {
                s.fail("a client thread", "panicked");
            }
        }
        if let Err(e) = &caps {
            s.fail("the capture conductor", e.to_string());
        }
        // Every run ended: none in ps, and nothing below the daemon.
        let mut left = Vec::new();
        let gone = wait_until(Duration::from_secs(15), || {
            left = s.ps().unwrap_or_default();
            left.is_empty()
        });
        if !gone {
            s.fail(
                "runs left",
                format!(
                    "`ps` still lists {:?} 15 s after the soak's last stop",
                    left.iter().map(|r| (r.id, &r.user, &r.state)).collect::<Vec<_>>()
                ),
            );
            for r in &left {
                let _ = s.call(User::Root, &["stop", &r.id.to_string()]);
            }
        }
        s.done.store(true, Ordering::Relaxed);
        let _ = mon.join();
        Ok(())
    });
    res?;
    let t_soak = soak_from.map(|a| (a, Instant::now()));
    let (fd0, rss0, th0) = base;
    println!(
        "soak: {:.0} s of runs ended; checking what the daemon gave back",
        t_start.elapsed().as_secs_f64()
    );
    // Processes.
    let mut children = HashMap::new();
    if !wait_until(Duration::from_secs(10), || {
        children = workers(&s);
        children.is_empty()
    }) {
        s.fail(
            "processes left below the daemon",
            format!("with every run ended: {children:?}"),
        );
    }
    let seen = s.seen.lock().expect("not poisoned").clone();
    let leaked = |seen: &HashMap<u32, (u64, String)>| -> Vec<String> {
        seen.iter()
            .filter(|(pid, (start, _))| {
                stat_of(**pid).is_some_and(|(st, _, t, _)| t == *start && st != "Z")
            })
            .map(|(pid, (_, comm))| format!("{pid} ({comm})"))
            .collect()
    };
    let helpers = s.base_procs.lock().expect("not poisoned").clone();
    let runs_procs: HashMap<u32, (u64, String)> = seen
        .iter()
        .filter(|(p, v)| helpers.get(p) != Some(v))
        .map(|(p, v)| (*p, v.clone()))
        .collect();
    let procs = leaked(&runs_procs);
    if !procs.is_empty() {
        s.fail(
            "processes leaked",
            format!("started below the daemon during the soak and still alive: {}", procs.join(", ")),
        );
    }
    // Rings.
    let ours = |name: &str| -> bool {
        if name.starts_with(&format!("streamline.{}", s.tag)) {
            return true;
        }
        let base = name.trim_end_matches(".ctl");
        beltway::RingRef::open(base)
            .map(|r| {
                let pid = r.writer().0;
                pid == daemon_pid || seen.contains_key(&pid)
            })
            .unwrap_or(false)
    };
    let ring_leaks = || -> Vec<String> {
        let mut v: Vec<String> = shm_streamline()
            .difference(&shm_before)
            .filter(|n| ours(n))
            .cloned()
            .collect();
        v.sort();
        v
    };
    let mut rings = Vec::new();
    if !wait_until(Duration::from_secs(10), || {
        rings = ring_leaks();
        rings.is_empty()
    }) {
        s.fail("rings left with every run ended", rings.join(", "));
    }
    // PipesFS: no run directory left.
    let dirs: Vec<String> = std::fs::read_dir(&mount)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.parse::<u64>().is_ok())
                .collect()
        })
        .unwrap_or_default();
    if !dirs.is_empty() {
        s.fail(
            "PipesFS run directories left",
            format!("{}: {}", mount.display(), dirs.join(", ")),
        );
    }
    // Descriptors, threads, memory.
    let (mut fd1, mut rss1, mut th1) = (0, 0, 0);
    wait_until(Duration::from_secs(10), || {
        (fd1, rss1, th1) = settle("after the soak");
        fd1 <= fd0 + FD_SLACK && th1 <= th0 + THREAD_SLACK as u64
    });
    if fd1 > fd0 + FD_SLACK {
        let list: Vec<String> = std::fs::read_dir(format!("/proc/{daemon_pid}/fd"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .map(|p| p.display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        s.fail(
            "daemon descriptors",
            format!("{fd1} open after the soak, {fd0} after the warm-up (bound +{FD_SLACK}): {}", list.join(", ")),
        );
    }
    if th1 > th0 + THREAD_SLACK as u64 {
        s.fail(
            "daemon threads",
            format!("{th1} after the soak, {th0} after the warm-up (bound +{THREAD_SLACK})"),
        );
    }
    let growth = if rss0 > 0 {
        (rss1 as f64 - rss0 as f64) / rss0 as f64 * 100.0
    } else {
        f64::NAN
    };
    // The bound is on the second half's growth: see RSS_LATE_GROWTH_PCT.
    let mid = {
        let v = s.rss_samples.lock().expect("not poisoned");
        let half = t_soak.map(|(a, b)| a + (b - a) / 2);
        half.and_then(|h| v.iter().min_by_key(|(t, _)| if *t > h { *t - h } else { h - *t }).map(|(_, r)| *r))
    };
    let late = match mid {
        Some(m) if rss0 > 0 => (rss1 as f64 - m as f64) / rss0 as f64 * 100.0,
        _ => f64::NAN,
    };
    println!(
        "daemon resident: {rss0} kB after the warm-up, {} kB half-way, {rss1} kB after the soak: {growth:+.1} % in all, {late:+.1} % in the second half",
        mid.map_or("?".to_string(), |m| m.to_string())
    );
    let rss_bound = if quick { RSS_LATE_GROWTH_PCT_QUICK } else { RSS_LATE_GROWTH_PCT };
    if !(late <= rss_bound) {
        s.fail(
            "daemon memory",
            format!("resident {rss0} kB after the warm-up, {} kB half-way, {rss1} kB after the soak: {late:+.1} % of the warm-up's in the second half (bound {rss_bound} %; {growth:+.1} % in all)", mid.map_or("?".to_string(), |m| m.to_string())),
        );
    }
    // The books.
    s.read_audit();
    {
        let l = s.ledger.lock().expect("not poisoned");
        let a = s.audit.lock().expect("not poisoned");
        println!(
            "runs: {} started ({} by root, {} by uid 65534), {} stopped, {} ended by themselves, {} died, {} unresolved; {} edits applied, {} refusals of the other user checked, {} stalled readers; {} blocks and {} datagrams checked against their sources ({} of those datagrams said lost to a full ring by the captures that fell behind)",
            l.started, l.started_by[0], l.started_by[1], l.stopped, l.ended, l.died, l.unresolved.len(), l.edits, l.refusals_checked, l.readers, l.checked_blocks, l.checked_datagrams, l.capture_lost
        );
        let accounted = l.stopped + l.ended + l.died + l.unresolved.len() as u64;
        let mut books = Vec::new();
        if accounted != l.started || !l.unresolved.is_empty() {
            books.push(format!(
                "runs started {} != stopped {} + ended {} + died {} (unresolved: {:?})",
                l.started, l.stopped, l.ended, l.died, l.unresolved
            ));
        }
        if a.started.len() as u64 != l.started {
            books.push(format!(
                "the daemon's log has {} `started` runs, we started {}",
                a.started.len(),
                l.started
            ));
        }
        let ended_unstarted: Vec<u64> = a.ends.keys().filter(|r| !a.started.contains(r)).copied().collect();
        let unended: Vec<u64> = a.started.iter().filter(|r| !a.ends.contains_key(r)).copied().collect();
        if !unended.is_empty() || !ended_unstarted.is_empty() || !a.doubled.is_empty() {
            books.push(format!(
                "the daemon's log: runs started and never ended {unended:?}, ended and never started {ended_unstarted:?}, ended twice {:?}",
                a.doubled
            ));
        }
        drop((l, a));
        for b in books {
            s.fail("the books", b);
        }
    }
    let panics = s.audit.lock().expect("not poisoned").panics.clone();
    for p in panics {
        s.fail("the daemon's log", p);
    }
    // The daemon's exit: SIGTERM, then nothing of it may be left.
    if let Some(mut child) = daemon.child.take() {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) if t0.elapsed() < Duration::from_secs(15) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => break None,
            }
        };
        match status {
            Some(st) if st.success() => {}
            Some(st) => s.fail("the daemon's exit", format!("SIGTERM: it exited {st}; its log ends: {}", tail_of(&s.daemon_log, 5))),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                s.fail("the daemon's exit", "still running 15 s after SIGTERM (killed)");
            }
        }
    }
    if !wait_until(Duration::from_secs(10), || !mounted(&mount)) {
        s.fail("PipesFS mount", format!("{} still mounted 10 s after the daemon's exit", mount.display()));
        let _ = Command::new("fusermount3").args(["-u", "-z"]).arg(&mount).status();
    }
    let all: HashMap<u32, (u64, String)> =
        seen.clone().into_iter().chain(helpers).collect();
    // The mount's watcher (fusermount3) leaves once the mount is gone.
    let mut procs = Vec::new();
    wait_until(Duration::from_secs(10), || {
        procs = leaked(&all);
        procs.is_empty()
    });
    if !procs.is_empty() {
        s.fail("processes leaked after the daemon's exit", procs.join(", "));
    }
    let rings = ring_leaks();
    if !rings.is_empty() {
        s.fail("rings left after the daemon's exit", rings.join(", "));
    }
    drop(v);
    // The verdict.
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
    let mut summary = Summary::default();
    summary.add("soak_runs", started as f64, None, format!("runs started by root and uid 65534 in {secs} s"));
    summary.add("soak_failures", failures.len() as f64, Some(Target::AtMost(0.0)), "listed above");
    summary.add(
        "soak_rss_growth_pct",
        growth,
        Some(Target::AtMost(10.0)),
        format!("daemon VmRSS {rss0} -> {rss1} kB"),
    );
    summary.add(
        "soak_rss_late_growth_pct",
        late,
        Some(Target::AtMost(rss_bound)),
        format!("daemon VmRSS {} -> {rss1} kB in the second half, of {rss0} kB", mid.map_or("?".to_string(), |m| m.to_string())),
    );
    // A capture's stated losses are no failure (a loaded machine makes a subscriber fall
    // behind), but on a quiet machine there should be none: a figure with a target, so a
    // regression shows as MISSED (the readiness core's 50 ms subscriber looks lost 3 %).
    summary.add(
        "soak_capture_lost_pct",
        if checked > 0 { lost as f64 / checked as f64 * 100.0 } else { 0.0 },
        Some(Target::AtMost(0.1)),
        format!("{lost} of {checked} datagrams said lost to a full ring by captures that fell behind"),
    );
    summary.print()?;
    if failures.is_empty() {
        Ok(())
    } else {
        Err(err(format!("{} soak failures (listed above)", failures.len())))
    }
}

/// Blocks a run's log says it lost to a full ring (`NODE: N blocks received, lost M blocks
/// to a full ring (subscriber fell behind)`, one line per subscription).
fn lost_to_full_rings(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("to a full ring"))
        .filter_map(|l| {
            let after = l.split_once(", lost ")?.1;
            after.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_rows_keep_states_with_spaces() {
        let text = "ID    USER       STATE                   UPTIME   BLOCKS/S  PIPELINE\n\
1     root       running (detached)          3.2s      20.0k  gen | count\n\
      plan (none): one space\n\
12    nobody     finished (0)                0.1s          0  gen | count\n";
        let rows = parse_ps(text).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].id, rows[0].user.as_str()), (1, "root"));
        assert_eq!(rows[0].state, "running (detached)");
        assert_eq!((rows[1].id, rows[1].state.as_str()), (12, "finished (0)"));
        assert!(parse_ps("ID USER\n7 root\n").is_err());
    }

    #[test]
    fn stats_values_by_key() {
        let s = "label count:a\nreaders 2\nreaders_delivered 10\n";
        assert_eq!(stat_value(s, "readers"), Some(2));
        assert_eq!(stat_value(s, "readers_delivered"), Some(10));
        assert_eq!(stat_value(s, "readers_lost"), None);
    }

    #[test]
    fn losses_a_capture_reports_are_read_from_its_log() {
        let log = "bpf: 99722 blocks received, lost 7438 blocks to a full ring (subscriber fell behind)\ncount: 99722 blocks, 10570532 bytes\n";
        assert_eq!(lost_to_full_rings(log), 7438);
        assert_eq!(lost_to_full_rings("count: 5 blocks, 5 bytes\n"), 0);
    }
}
