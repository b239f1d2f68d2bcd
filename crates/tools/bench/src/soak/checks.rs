//! What the soak checks once its runs have ended: nothing the daemon started left (its
//! processes, /dev/shm rings, PipesFS run directories), its descriptors, threads and
//! resident memory against their counts after the warm-up, the books (runs started =
//! stopped + ended + died, one `started` and one end in the daemon's log for each), and
//! its exit on SIGTERM with nothing of it left after. Each finding is a `Soak::fail`.

use super::{
    tail_of, wait_until, Phases, Soak, Usage, User, FD_SLACK, RSS_LATE_GROWTH_PCT,
    RSS_LATE_GROWTH_PCT_QUICK, THREAD_SLACK,
};
use crate::proc::stat_of;
use crate::streamlined::Daemon;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Processes: pid -> (start time, command).
pub(super) type Procs = HashMap<u32, (u64, String)>;

/// Live processes below `root` (children, grandchildren, ...): pid -> (start, comm).
pub(super) fn descendants(root: u32) -> Procs {
    let mut parent: HashMap<u32, Vec<(u32, u64, String)>> = HashMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(st) = stat_of(pid) {
                if st.state != "Z" && st.state != "X" {
                    parent
                        .entry(st.ppid)
                        .or_default()
                        .push((pid, st.start, st.comm));
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
pub(super) fn status_field(pid: u32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(super) fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `streamline.*` objects under /dev/shm.
pub(super) fn shm_streamline() -> HashSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("streamline."))
                .collect()
        })
        .unwrap_or_default()
}

/// Mount points under `dir` in our mount table.
fn mounted(p: &Path) -> bool {
    let want = p.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(&*want))
}

impl Soak {
    /// Processes below the daemon other than its own helpers: the runs' workers and
    /// their children.
    pub(super) fn workers(&self) -> Procs {
        let base = self.base_procs.lock().expect("not poisoned").clone();
        descendants(self.daemon_pid)
            .into_iter()
            .filter(|(p, v)| base.get(p) != Some(v))
            .collect()
    }

    /// The daemon's descriptors, memory and threads once the last runs' processes went
    /// (printed as `daemon WHAT: ...`).
    pub(super) fn settle(&self, what: &str) -> Usage {
        // Let the last runs' processes go.
        wait_until(Duration::from_secs(5), || self.workers().is_empty());
        std::thread::sleep(Duration::from_millis(500));
        let (fds, rss, threads) = (
            fd_count(self.daemon_pid),
            status_field(self.daemon_pid, "VmRSS:").unwrap_or(0),
            status_field(self.daemon_pid, "Threads:").unwrap_or(0),
        );
        println!("daemon {what}: {fds} descriptors, {rss} kB resident, {threads} threads");
        Usage { fds, rss, threads }
    }

    /// Every run ended: none in `ps` 15 s after the soak's last stop (those left are
    /// stopped, after the failure).
    pub(super) fn check_no_runs_left(&self) {
        let mut left = Vec::new();
        let gone = wait_until(Duration::from_secs(15), || {
            left = self.ps().unwrap_or_default();
            left.is_empty()
        });
        if !gone {
            self.fail(
                "runs left",
                format!(
                    "`ps` still lists {:?} 15 s after the soak's last stop",
                    left.iter()
                        .map(|r| (r.id, &r.user, &r.state))
                        .collect::<Vec<_>>()
                ),
            );
            for r in &left {
                let _ = self.call(User::Root, &["stop", &r.id.to_string()]);
            }
        }
    }
}

/// What the leak checks compare against: every process seen below the daemon while the
/// soak ran, the daemon's own helpers among them, and the /dev/shm objects there before.
pub(super) struct Leaks<'a> {
    s: &'a Soak,
    seen: Procs,
    helpers: Procs,
    shm_before: HashSet<String>,
}

impl<'a> Leaks<'a> {
    /// With every run ended: no process left below the daemon, none of those it started
    /// alive elsewhere, no ring of ours left.
    pub(super) fn with_runs_ended(s: &'a Soak, shm_before: HashSet<String>) -> Leaks<'a> {
        let mut children = HashMap::new();
        if !wait_until(Duration::from_secs(10), || {
            children = s.workers();
            children.is_empty()
        }) {
            s.fail(
                "processes left below the daemon",
                format!("with every run ended: {children:?}"),
            );
        }
        let leaks = Leaks {
            s,
            seen: s.seen.lock().expect("not poisoned").clone(),
            helpers: s.base_procs.lock().expect("not poisoned").clone(),
            shm_before,
        };
        let runs_procs: Procs = leaks
            .seen
            .iter()
            .filter(|(p, v)| leaks.helpers.get(p) != Some(v))
            .map(|(p, v)| (*p, v.clone()))
            .collect();
        let procs = alive(&runs_procs);
        if !procs.is_empty() {
            s.fail(
                "processes leaked",
                format!(
                    "started below the daemon during the soak and still alive: {}",
                    procs.join(", ")
                ),
            );
        }
        let mut rings = Vec::new();
        if !wait_until(Duration::from_secs(10), || {
            rings = leaks.rings();
            rings.is_empty()
        }) {
            s.fail("rings left with every run ended", rings.join(", "));
        }
        leaks
    }

    /// After the daemon's exit: none of the processes seen (its helpers included: the
    /// mount's watcher leaves once the mount is gone) alive, no ring of ours left.
    pub(super) fn after_exit(&self) {
        let all: Procs = self
            .seen
            .clone()
            .into_iter()
            .chain(self.helpers.clone())
            .collect();
        let mut procs = Vec::new();
        wait_until(Duration::from_secs(10), || {
            procs = alive(&all);
            procs.is_empty()
        });
        if !procs.is_empty() {
            self.s
                .fail("processes leaked after the daemon's exit", procs.join(", "));
        }
        let rings = self.rings();
        if !rings.is_empty() {
            self.s
                .fail("rings left after the daemon's exit", rings.join(", "));
        }
    }

    /// A /dev/shm object this soak made: named with our prefix, or written by the
    /// daemon or a process seen below it.
    fn ours(&self, name: &str) -> bool {
        if name.starts_with(&format!("streamline.{}", self.s.tag)) {
            return true;
        }
        let base = name.trim_end_matches(".ctl");
        beltway::RingRef::open(base)
            .map(|r| {
                let pid = r.writer().0;
                pid == self.s.daemon_pid || self.seen.contains_key(&pid)
            })
            .unwrap_or(false)
    }

    /// Our /dev/shm objects that were not there before the soak, sorted.
    fn rings(&self) -> Vec<String> {
        let mut v: Vec<String> = shm_streamline()
            .difference(&self.shm_before)
            .filter(|n| self.ours(n))
            .cloned()
            .collect();
        v.sort();
        v
    }
}

/// Those of `procs` still alive (the same pid with the same start time, not a zombie),
/// as `PID (COMM)`.
fn alive(procs: &Procs) -> Vec<String> {
    procs
        .iter()
        .filter(|(pid, (start, _))| {
            stat_of(**pid).is_some_and(|st| st.start == *start && st.state != "Z")
        })
        .map(|(pid, (_, comm))| format!("{pid} ({comm})"))
        .collect()
}

/// PipesFS: no run directory left under the mount.
pub(super) fn check_run_dirs(s: &Soak, mount: &Path) {
    let dirs: Vec<String> = std::fs::read_dir(mount)
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
}

/// The daemon's resident memory: after the warm-up, half-way through the soak, after it;
/// its growth in all and in the second half, and the bound on the latter.
pub(super) struct Memory {
    pub(super) rss0: u64,
    pub(super) mid: Option<u64>,
    pub(super) rss1: u64,
    pub(super) growth: f64,
    pub(super) late: f64,
    pub(super) bound: f64,
}

impl Memory {
    /// The half-way figure as printed (`?` when there was no burst line).
    pub(super) fn mid_text(&self) -> String {
        self.mid.map_or("?".to_string(), |m| m.to_string())
    }
}

/// Descriptors and threads back within their slack of the warm-up's counts, and resident
/// memory within its bound in the second half (see RSS_LATE_GROWTH_PCT).
pub(super) fn check_usage(s: &Soak, p: &Phases, quick: bool) -> Memory {
    let Usage {
        fds: fd0,
        rss: rss0,
        threads: th0,
    } = p.base;
    let mut now = Usage::default();
    wait_until(Duration::from_secs(10), || {
        now = s.settle("after the soak");
        now.fds <= fd0 + FD_SLACK && now.threads <= th0 + THREAD_SLACK as u64
    });
    let Usage {
        fds: fd1,
        rss: rss1,
        threads: th1,
    } = now;
    if fd1 > fd0 + FD_SLACK {
        let list: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", s.daemon_pid))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .map(|p| p.display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        s.fail(
            "daemon descriptors",
            format!(
                "{fd1} open after the soak, {fd0} after the warm-up (bound +{FD_SLACK}): {}",
                list.join(", ")
            ),
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
        let half = p.soak.map(|(a, b)| a + (b - a) / 2);
        half.and_then(|h| {
            v.iter()
                .min_by_key(|(t, _)| if *t > h { *t - h } else { h - *t })
                .map(|(_, r)| *r)
        })
    };
    let late = match mid {
        Some(m) if rss0 > 0 => (rss1 as f64 - m as f64) / rss0 as f64 * 100.0,
        _ => f64::NAN,
    };
    let bound = if quick {
        RSS_LATE_GROWTH_PCT_QUICK
    } else {
        RSS_LATE_GROWTH_PCT
    };
    let m = Memory {
        rss0,
        mid,
        rss1,
        growth,
        late,
        bound,
    };
    println!(
        "daemon resident: {rss0} kB after the warm-up, {} kB half-way, {rss1} kB after the soak: {growth:+.1} % in all, {late:+.1} % in the second half",
        m.mid_text()
    );
    if !(late <= bound) {
        s.fail(
            "daemon memory",
            format!("resident {rss0} kB after the warm-up, {} kB half-way, {rss1} kB after the soak: {late:+.1} % of the warm-up's in the second half (bound {bound} %; {growth:+.1} % in all)", m.mid_text()),
        );
    }
    m
}

/// The books: runs started = stopped + ended + died, none unresolved; the daemon's log
/// with one `started` and one end for each of our runs; no panic in it.
pub(super) fn check_books(s: &Soak) {
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
        let ended_unstarted: Vec<u64> = a
            .ends
            .keys()
            .filter(|r| !a.started.contains(r))
            .copied()
            .collect();
        let unended: Vec<u64> = a
            .started
            .iter()
            .filter(|r| !a.ends.contains_key(r))
            .copied()
            .collect();
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
}

/// The daemon's exit: SIGTERM, status 0 within 15 s, and its mount gone within 10 s.
pub(super) fn check_daemon_exit(s: &Soak, daemon: &mut Daemon, mount: &Path) {
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
            Some(st) => s.fail(
                "the daemon's exit",
                format!(
                    "SIGTERM: it exited {st}; its log ends: {}",
                    tail_of(&s.daemon_log, 5)
                ),
            ),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                s.fail(
                    "the daemon's exit",
                    "still running 15 s after SIGTERM (killed)",
                );
            }
        }
    }
    if !wait_until(Duration::from_secs(10), || !mounted(mount)) {
        s.fail(
            "PipesFS mount",
            format!(
                "{} still mounted 10 s after the daemon's exit",
                mount.display()
            ),
        );
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(mount)
            .status();
    }
}
