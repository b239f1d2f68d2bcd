//! What a capture costs the machine, measured against the sender alone (`capture` and
//! `legacy`): interleaved windows, CPU charged to the tasks that do the work, per packet.
//!
//! **What is counted** in a window ([`Reading`]): the CPU time (the scheduler's
//! nanosecond `sum_exec_runtime`, /proc/.../schedstat) of
//! - the sending thread: its system calls run the veth's transmit path, the capture
//!   sockets' taps on transmit (AF_PACKET sees outgoing frames in the sender's context)
//!   and, when they are raised there, the receive softirqs (the socket filter, the copy
//!   into a capture ring, the wake-up of the reader);
//! - every task of the capturing processes and of their descendants (a daemon's workers);
//! - the `ksoftirqd` threads (softirq work the kernel deferred);
//! - and, on a kernel that accounts interrupt time apart from tasks
//!   (`CONFIG_IRQ_TIME_ACCOUNTING`, or when the kernel's configuration cannot be read), the
//!   machine's irq and softirq time from /proc/stat. Without it (the default of many
//!   kernels, and this VM's) softirq time is inside the time of the task it interrupted,
//!   which is one of the above for this traffic, and adding /proc/stat would count it
//!   twice.
//!
//! That is the machine's CPU spent on the traffic and its capture, without the CPU of
//! unrelated processes: /proc/stat's busy time (which `legacy` and `capture` used until
//! 2026-11-28) counts 10 ms ticks of whatever runs, so another process' build, or the
//! hypervisor's steal, moved it by more than the cheapest capture costs. The machine-wide
//! busy time is still read and printed beside it (without steal), as a cross-check on a
//! quiet machine.
//!
//! **How it is compared** ([`interleave`]): each round runs the sender alone (A) and each
//! configuration (B) in turn, A B1 A B2 A ... Bn A, the same rate and length for every
//! window. A configuration's extra CPU in a round is its window's charged CPU minus what
//! the sender alone cost per packet sent in the two A windows around it, times the packets
//! sent in its window; divided by the packets the configuration took. Rounds go on until
//! every configuration's median is resolved (its standard error, from the median absolute
//! deviation, at most a tenth of it) or the round or time budget is spent; a configuration
//! whose median is not at least twice its standard error cannot be told from noise, and
//! the caller fails a full run naming it.

use crate::util::{err, Result};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Nanoseconds on CPU of the calling thread so far.
fn thread_ns() -> u64 {
    schedstat_ns("/proc/thread-self/schedstat").unwrap_or(0)
}

fn schedstat_ns(path: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Parent of every process: pid -> ppid.
fn parents() -> HashMap<u32, u32> {
    let mut m = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return m;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(st) = crate::proc::stat_of(pid) {
            m.insert(pid, st.ppid);
        }
    }
    m
}

/// `roots` and all their descendants.
fn tree(roots: &[u32]) -> Vec<u32> {
    if roots.is_empty() {
        return Vec::new();
    }
    let parents = parents();
    let mut out: Vec<u32> = roots.to_vec();
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, &pp)| pp == p).map(|(&c, _)| c));
        i += 1;
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// CPU ns so far of `roots` and all their descendants (every thread, from schedstat), and
/// how many processes those are.
pub(crate) fn tree_ns(roots: &[u32]) -> (u64, usize) {
    let t = tree(roots);
    (tasks_ns(&t).values().sum(), t.len())
}

/// Context switches so far (voluntary and not, /proc's `*_ctxt_switches`) of every thread
/// of `roots` and all their descendants.
pub(crate) fn tree_switches(roots: &[u32]) -> u64 {
    let mut n = 0;
    for pid in tree(roots) {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for e in dir.flatten() {
            let Ok(st) = std::fs::read_to_string(e.path().join("status")) else {
                continue;
            };
            n += st
                .lines()
                .filter(|l| {
                    l.starts_with("voluntary_ctxt_switches:")
                        || l.starts_with("nonvoluntary_ctxt_switches:")
                })
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    n
}

/// CPU ns of every thread of `pids`, by thread id.
pub(crate) fn tasks_ns(pids: &[u32]) -> HashMap<u32, u64> {
    let mut m = HashMap::new();
    for pid in pids {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(ns) = schedstat_ns(&format!("/proc/{pid}/task/{tid}/schedstat")) {
                m.insert(tid, ns);
            }
        }
    }
    m
}

/// The `ksoftirqd/N` threads.
fn ksoftirqd() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("ksoftirqd/"))
        })
        .collect()
}

/// Whether the kernel accounts irq and softirq time apart from the tasks they interrupt:
/// Some(true/false) from its configuration, None when that cannot be read.
fn irq_time_accounted() -> Option<bool> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let text = std::fs::read_to_string(format!("/boot/config-{}", release.trim()))
        .ok()
        .or_else(|| {
            let o = std::process::Command::new("zcat")
                .arg("/proc/config.gz")
                .output()
                .ok()?;
            o.status
                .success()
                .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
        })?;
    Some(
        text.lines()
            .any(|l| l.trim() == "CONFIG_IRQ_TIME_ACCOUNTING=y"),
    )
}

/// /proc/stat's first line: (busy seconds without steal, irq + softirq seconds).
fn proc_stat() -> Result<(f64, f64)> {
    let v = crate::proc::stat_cpu_fields()?;
    // user nice system idle iowait irq softirq steal; USER_HZ is 100.
    Ok((
        (v[0] + v[1] + v[2] + v[5] + v[6]) / 100.0,
        (v[5] + v[6]) / 100.0,
    ))
}

/// What is charged: the capturing processes' trees, ksoftirqd, and whether /proc/stat's
/// irq and softirq time is added.
pub(crate) struct Meter {
    ksoftirqd: Vec<u32>,
    add_irq: bool,
}

impl Meter {
    pub(crate) fn new() -> Meter {
        Meter {
            ksoftirqd: ksoftirqd(),
            add_irq: irq_time_accounted() != Some(false),
        }
    }

    /// One line saying what is charged.
    pub(crate) fn describe(&self) -> String {
        format!(
            "CPU charged: the sending thread, the capturing processes and their descendants, {} ksoftirqd thread(s){}",
            self.ksoftirqd.len(),
            if self.add_irq {
                ", and the machine's irq and softirq time (/proc/stat: this kernel accounts it apart from tasks, or its configuration cannot be read)"
            } else {
                " (this kernel has no CONFIG_IRQ_TIME_ACCOUNTING: softirq time is inside the time of the task it interrupted)"
            }
        )
    }

    /// A reading, taken on the sending thread.
    fn read(&self, roots: &[u32]) -> Result<Reading> {
        let (busy, irq) = proc_stat()?;
        Ok(Reading {
            sender: thread_ns(),
            soft: tasks_ns(&self.ksoftirqd),
            own: tasks_ns(&tree(roots)),
            busy,
            irq,
        })
    }
}

/// CPU counters at one moment.
struct Reading {
    sender: u64,
    soft: HashMap<u32, u64>,
    own: HashMap<u32, u64>,
    busy: f64,
    irq: f64,
}

/// Seconds between two readings of per-thread counters (threads that appeared count from
/// zero; threads that ended in between are lost).
fn delta(a: &HashMap<u32, u64>, b: &HashMap<u32, u64>) -> f64 {
    b.iter()
        .map(|(t, &ns)| ns.saturating_sub(a.get(t).copied().unwrap_or(0)))
        .sum::<u64>() as f64
        / 1e9
}

/// One measured window of sending.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// Packets sent, and the seconds the sending took.
    pub sent: u64,
    pub took: f64,
    /// CPU seconds charged (see the module's text).
    pub charged: f64,
    /// CPU seconds of the capturing processes (and descendants) alone.
    pub own: f64,
    /// Machine-wide busy seconds (/proc/stat, steal left out), for comparison.
    pub busy: f64,
}

/// Send `pps` datagrams of `size` bytes for `secs` from `flows` source ports (from this
/// thread) while `roots` (capturing processes) run; what it cost. A pause of `drain` after
/// the sending lets the captures finish reading what was sent inside the window (longer
/// than their block timeouts: a block is handed over when full or timed out).
#[allow(clippy::too_many_arguments)]
pub(crate) fn window(
    m: &Meter,
    here: &str,
    peer: &str,
    pps: u64,
    secs: f64,
    size: usize,
    flows: u16,
    roots: &[u32],
    drain: Duration,
) -> Result<Window> {
    // The sender on the first CPU, in every window (see [`capture_cpus`]).
    let _pinned = (cpus() >= 2)
        .then(|| beltway::sys::pin_scoped(0))
        .transpose()
        .map_err(|e| err(format!("pinning the sender to CPU 0: {e}")))?;
    let r0 = m.read(roots)?;
    let (sent, took) = crate::traffic::send_paced(here, peer, pps, secs, flows, size, tick(pps))?;
    std::thread::sleep(drain);
    let r1 = m.read(roots)?;
    let own = delta(&r0.own, &r1.own);
    let mut charged = (r1.sender - r0.sender) as f64 / 1e9 + delta(&r0.soft, &r1.soft) + own;
    if m.add_irq {
        charged += r1.irq - r0.irq;
    }
    Ok(Window {
        sent,
        took,
        charged,
        own,
        busy: r1.busy - r0.busy,
    })
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPUs captures run on (taskset's list): all but the first, which the sender has in
/// every window, so that the sender and a capture never take turns on one CPU in some
/// windows and not in others (the scheduler's choice moved the figures); the same for our
/// captures and the peer's. None on a one-CPU machine.
pub(crate) fn capture_cpus() -> Option<String> {
    match cpus() {
        0 | 1 => None,
        2 => Some("1".into()),
        n => Some(format!("1-{}", n - 1)),
    }
}

/// `cmd` started on [`capture_cpus`] (through taskset, which execs it: the pid is the
/// program's).
pub(crate) fn on_capture_cpus(cmd: std::process::Command) -> std::process::Command {
    let Some(list) = capture_cpus() else {
        return cmd;
    };
    let mut c = std::process::Command::new("taskset");
    c.args(["-c", &list])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Move every thread of the running process `pid` to [`capture_cpus`] (its later threads
/// and children inherit it).
pub(crate) fn move_to_capture_cpus(pid: u32) -> Result<()> {
    let Some(list) = capture_cpus() else {
        return Ok(());
    };
    let st = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", &list, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| err(format!("taskset: {e}")))?;
    if !st.success() {
        return Err(err(format!("taskset -a -p -c {list} {pid}: {st}")));
    }
    Ok(())
}

/// Raise the calling process' main thread, and so what it starts afterwards (the
/// captures, readers, a daemon: children inherit it), to the highest priority (nice -20):
/// other processes on the machine (builds) then take little CPU from the sender, so it
/// keeps the offered rate, and from the captures, our and the peer's alike. On a quiet
/// machine it changes nothing. Call it from the main thread, before starting anything.
pub(crate) fn favour() -> Result<()> {
    let st = std::process::Command::new("renice")
        .args(["-n", "-20", "-p", &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| err(format!("renice: {e}")))?;
    if !st.success() {
        return Err(err(format!("renice -n -20 (needs root): {st}")));
    }
    Ok(())
}

/// The sender's pacing tick at `pps`: one wake-up per 64 packets due (a full `sendmmsg`
/// batch), between 0.2 and 5 ms. The sender's own CPU is what every figure is measured
/// above, and most of it, at a paced rate, is waking up: the fewer wake-ups per packet,
/// the smaller its noise. The same pacing for the sender alone and for every
/// configuration.
pub(crate) fn tick(pps: u64) -> Duration {
    Duration::from_secs_f64((64.0 / pps.max(1) as f64).clamp(0.0002, 0.005))
}

/// One configuration's window in one round, against the sender alone around it.
#[derive(Debug)]
pub(crate) struct Sample<T> {
    pub w: Window,
    /// What the measuring closure returned with it (the capture's counts).
    pub data: T,
    /// Extra CPU ns per packet: charged, and machine-wide busy (for comparison), above
    /// the sender alone's cost per packet sent times the packets sent.
    pub extra_ns: f64,
    pub extra_busy_ns: f64,
    /// The capturing processes' own CPU ns per packet.
    pub own_ns: f64,
}

pub(crate) use crate::util::median;

/// Standard error of the median of `v`, from the median absolute deviation (1.4826 MAD
/// estimates the spread of normal data; the median's error is 1.2533 sigma / sqrt(n)).
/// Infinite for fewer than two values.
pub(crate) fn median_se(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return f64::INFINITY;
    }
    let m = median(v);
    let dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    1.2533 * 1.4826 * median(&dev) / (v.len() as f64).sqrt()
}

/// How a configuration's rounds came out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verdict {
    /// Median extra CPU ns per packet, and its standard error.
    pub ns: f64,
    pub se: f64,
}

impl Verdict {
    pub(crate) fn of(v: &[f64]) -> Verdict {
        Verdict {
            ns: median(v),
            se: median_se(v),
        }
    }
    /// Told from noise: the median at least twice its standard error above zero.
    pub(crate) fn resolved(&self) -> bool {
        self.ns > 0.0 && self.ns >= 2.0 * self.se
    }
    /// Precise enough to stop: resolved, standard error at most a tenth of the median.
    fn settled(&self) -> bool {
        self.resolved() && self.se <= 0.1 * self.ns
    }
}

/// How many rounds, and how long they may take.
pub(crate) struct Budget {
    pub min_rounds: usize,
    pub max_rounds: usize,
    /// No new round starts after this much time.
    pub time: Duration,
}

/// Runs the rounds (see the module's text): `alone()` measures the sender alone,
/// `measure(k)` configuration k (and returns its data), `per(k, &w, &data)` checks the
/// counts of configuration k's window and returns the packets its figure is per (an error
/// fails the run before any figure). Prints each round's figures. Returns per
/// configuration its samples.
pub(crate) fn interleave<T>(
    names: &[String],
    budget: &Budget,
    mut alone: impl FnMut() -> Result<Window>,
    mut measure: impl FnMut(usize) -> Result<(Window, T)>,
    per: impl Fn(usize, &Window, &T) -> Result<u64>,
) -> Result<Vec<Vec<Sample<T>>>> {
    let t0 = Instant::now();
    let mut out: Vec<Vec<Sample<T>>> = names.iter().map(|_| Vec::new()).collect();
    let cost = |w: &Window| {
        (
            w.charged / w.sent.max(1) as f64,
            w.busy / w.sent.max(1) as f64,
        )
    };
    for round in 0..budget.max_rounds.max(1) {
        if round >= budget.min_rounds.max(1) {
            let verdicts: Vec<Verdict> = out
                .iter()
                .map(|s| Verdict::of(&s.iter().map(|x| x.extra_ns).collect::<Vec<_>>()))
                .collect();
            if verdicts.iter().all(Verdict::settled) || t0.elapsed() > budget.time {
                break;
            }
        }
        let mut before = alone()?;
        let mut line = format!("round {round}:");
        let mut alones = vec![format!("{:.0}", cost(&before).0 * 1e9)];
        for k in 0..names.len() {
            let (w, data) = measure(k)?;
            let n = per(k, &w, &data)?;
            let after = alone()?;
            let (c0, b0) = cost(&before);
            let (c1, b1) = cost(&after);
            let base = (c0 + c1) / 2.0 * w.sent as f64;
            let base_busy = (b0 + b1) / 2.0 * w.sent as f64;
            let s = Sample {
                w,
                data,
                extra_ns: (w.charged - base) * 1e9 / n.max(1) as f64,
                extra_busy_ns: (w.busy - base_busy) * 1e9 / n.max(1) as f64,
                own_ns: w.own * 1e9 / n.max(1) as f64,
            };
            line += &format!(" {} {:.0}", names[k], s.extra_ns);
            alones.push(format!("{:.0}", cost(&after).0 * 1e9));
            out[k].push(s);
            before = after;
        }
        println!(
            "{line} (extra ns/packet); the sender alone: {} ns/packet sent",
            alones.join(" ")
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_its_error() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert!(median_se(&[1.0]).is_infinite());
        // Deviations 1, 0, 1: MAD 1.
        let se = median_se(&[1.0, 2.0, 3.0]);
        assert!((se - 1.2533 * 1.4826 / 3f64.sqrt()).abs() < 1e-9, "{se}");
    }

    #[test]
    fn a_median_within_its_noise_is_not_resolved() {
        assert!(Verdict::of(&[100.0, 102.0, 98.0, 101.0]).resolved());
        assert!(
            !Verdict::of(&[-50.0, 10.0, 80.0]).resolved(),
            "spread over zero"
        );
        assert!(!Verdict::of(&[-5.0, -3.0, -4.0]).resolved(), "below zero");
        assert!(!Verdict::of(&[5.0]).resolved(), "one round tells nothing");
    }

    #[test]
    fn the_sender_thread_and_a_childs_tree_are_charged() {
        let m = Meter::new();
        // A grandchild that spins: the tree must reach it.
        // In a process group of its own, killed whole at the end (a tree that missed the
        // grandchild must not leave it spinning).
        let mut c = std::process::Command::new("sh");
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        let mut c = c
            .args(["-c", "sh -c 'while :; do :; done' & wait"])
            .spawn()
            .unwrap();
        let pid = c.id();
        let r0 = m.read(&[pid]).unwrap();
        let t0 = Instant::now();
        let mut r1 = m.read(&[pid]).unwrap();
        // Wait for the grandchild to have run and this thread to have spent CPU.
        while (r1.own.len() < 2 || delta(&r0.own, &r1.own) == 0.0 || r1.sender == r0.sender)
            && t0.elapsed() < Duration::from_secs(30)
        {
            crate::util::busy(1_000_000);
            r1 = m.read(&[pid]).unwrap();
        }
        let grandchildren = tree(&[pid]);
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status();
        let _ = c.wait();
        assert_eq!(
            grandchildren.len(),
            2,
            "sh and its child: {grandchildren:?}"
        );
        assert!(r1.sender > r0.sender, "this thread's CPU is read");
        assert!(
            delta(&r0.own, &r1.own) > 0.0,
            "the grandchild's CPU is charged"
        );
    }
}
