//! The `capture` subcommand (thesis 7.2.2, 6.3.2): live capture on a veth pair into a
//! network namespace the benchmark creates, with UDP traffic it sends itself at a fixed
//! rate (1% of it to port 7, the rest to port 9). The rate is this machine's: the sender
//! is first measured alone, and a third of what it keeps is offered (`--pps` overrides), so
//! it keeps the rate while a capture shares the CPUs.
//!
//! - **Kernel vs user placement of `bpf "udp dst port 7"`**: `rx | bpf` (the program runs
//!   on the socket) against `rx | bpf placed=user` (every frame is handed to user space
//!   and the interpreter runs there): system-wide CPU per packet taken (sent - dropped),
//!   and packets handed to user space; under the default receive scheme
//!   (`batching=adaptive`, seed 002's Algorithm 2: wake-ups follow the rate that reaches
//!   user space) and under the fixed 10 ms and 1000 ms block timeouts.
//! - **Capture cost against tcpdump**: `rx | count` against `tcpdump -w /dev/null`, both
//!   capturing everything: system-wide CPU per packet captured.
//! - **Multi-queue receive**: `rx queues=N | deflate level=9 | count` with 1 and 2 engines
//!   in one run (one fanout group in hash mode: each flow on one engine, engine q on CPU
//!   q), traffic from 16 flows; packets processed.
//!
//! - **AF_XDP vs AF_PACKET**: `rx impl=xdp | count` and `rx impl=packet | count` run in
//!   the namespace on its end of the pair (where the traffic arrives): CPU per packet.
//!
//! CPU of the first two (the figures against a peer) is measured by [`crate::meter`]: the
//! CPU time charged to the sending thread (whose system calls run the transmit path, the
//! capture sockets' taps and the receive softirq), the capturing process and its
//! descendants, and the softirq threads (plus /proc/stat's irq and softirq time on a
//! kernel that accounts it apart), in windows interleaved with the sender alone at the
//! same rate (A B1 A B2 ... A); a configuration's extra CPU is its window's minus the
//! sender alone's per packet sent around it, per packet it took; the median over rounds,
//! rounds added until it is settled. Counts are checked first (captured + dropped = sent,
//! plus a little background traffic, for every run; the bpf placements against the port-7
//! packets sent); drops, if any, are named in the figure's note. A median that cannot be
//! told from noise (not twice its standard error) fails a full run. Until 2026-11-27 these
//! figures used the capturing process' own CPU per packet sent, drops unchecked; until
//! 2026-11-28 /proc/stat's machine-wide busy time, which other load moved by more than the
//! cheap configurations cost. The capturing process' own CPU is printed beside it, and is
//! what the last two measure. Needs root (namespaces, CAP_NET_RAW).
//!
//! Every capture is a child killed if the benchmark dies, stopped with SIGINT and killed
//! (failing the run) if it has not stopped 10 s later; the namespace is removed on every
//! exit (errors by its destructor; signals and the watchdog by
//! [`crate::util::remove_netns_on_abnormal_exit`]).

use crate::meter::{Budget, Meter, Window};
use crate::proc;
use crate::traffic::{max_rate, veth};
use crate::util::{err, watchdog, Result, Summary, Target};
use kernel::netns::Veth;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Offered rate, packets per second (default: a third of what the sender keeps alone,
    /// measured first, so that it keeps the rate while a capture shares the CPUs).
    #[arg(long)]
    pps: Option<u64>,
    /// Seconds of traffic per configuration.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
}

/// Nanoseconds on CPU of every thread of `pid`.
pub(crate) fn cpu_ns(pid: u32) -> u64 {
    crate::meter::tasks_ns(&[pid]).values().sum()
}

/// The `streamline` program beside this benchmark (target/<profile>/).
pub(crate) fn streamline() -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe()
        .map_err(|e| err(format!("locating own executable: {e}")))?
        .with_file_name("streamline");
    if !exe.is_file() {
        return Err(err(format!(
            "{} not found next to this benchmark; build it with `cargo build --release -p streamline`",
            exe.display()
        )));
    }
    Ok(exe)
}

/// What one configuration is measured with: the offered rate and how long.
struct Load {
    pps: u64,
    secs: f64,
}

/// One capture's measured window.
struct Run {
    /// Packets sent, seconds, CPU charged and the capture's own (see [`crate::meter`]).
    w: Window,
    /// What the capture printed on stderr (its counts).
    stderr: String,
}

/// How long a capture may take to stop after SIGINT.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// One capture: start `cmd` (killed if we die), send traffic in a measured window
/// ([`crate::meter::window`]: the CPU charged to the sender, the capture's processes and
/// the softirq threads), stop it with SIGINT. A capture that has not stopped
/// [`STOP_WITHIN`] after SIGINT is killed and fails the run (it used to be waited for
/// without bound).
fn measure(v: &Veth, m: &Meter, mut cmd: Command, a: &Load, flows: u16) -> Result<Run> {
    proc::kill_with_us(&mut cmd);
    let mut child: Child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("starting {cmd:?}: {e}")))?;
    // Its stderr, read as it comes (a full pipe must not stall it).
    let mut errs = child.stderr.take().expect("piped stderr");
    let said = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut errs, &mut s);
        s
    });
    let timed = (|| {
        std::thread::sleep(Duration::from_millis(800));
        let w = crate::meter::window(
            m,
            &v.here_ip,
            &v.peer_ip,
            a.pps,
            a.secs,
            64,
            flows,
            &[child.id()],
            DRAIN,
        )?;
        // Figures are per packet sent or taken in the window, so a sender a little behind
        // (the capture takes CPU from it, or other load does) is measured fairly; one that
        // kept under 80% of the rate changed the load under test.
        if w.took > a.secs * 1.25 {
            return Err(err(format!("the sender kept only {:.0} of the {} packets/s offered (with {:?} capturing); give a lower --pps", w.sent as f64 / w.took, a.pps, cmd.get_program())));
        }
        Ok(w)
    })();
    // Stopped however the measurement went: a failed one must not leave it capturing.
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if t0.elapsed() < STOP_WITHIN => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(err(format!(
                    "{cmd:?} had not stopped {STOP_WITHIN:?} after SIGINT; killed"
                )));
            }
            Err(e) => break Err(err(format!("waiting for {cmd:?}: {e}"))),
        }
    };
    let stderr = said.join().unwrap_or_default();
    let w = timed?;
    let status = status.map_err(|e| err(format!("{e}; its stderr:\n{stderr}")))?;
    // Stopped by our SIGINT: `streamline run` exits 130 then, tcpdump 0.
    if !(status.success() || status.code() == Some(128 + libc::SIGINT)) {
        return Err(err(format!(
            "{cmd:?} failed ({status}); its stderr:\n{stderr}"
        )));
    }
    Ok(Run { w, stderr })
}

/// The sender alone, measured as a capture is (the same rate, length and pause).
fn alone(v: &Veth, m: &Meter, a: &Load) -> Result<Window> {
    crate::meter::window(m, &v.here_ip, &v.peer_ip, a.pps, a.secs, 64, 1, &[], DRAIN)
}

/// The pause after the sending inside every window: longer than the 1000 ms block timeout
/// of tcpdump and of `latency=1000`, so what was sent is read inside the window (a
/// capture stopped with frames in a block it had not been handed yet counted fewer than
/// were sent).
pub(crate) const DRAIN: Duration = Duration::from_millis(1100);

/// Each configuration's rounds: the samples' figures, sorted, for the log; and the
/// verdict. A configuration that cannot be told from noise fails a full run; a quick run
/// (CI's smoke test) says so and the figures that need it are left out (None).
fn judge<T>(
    what: &str,
    s: &[crate::meter::Sample<T>],
    quick: bool,
) -> Result<Option<crate::meter::Verdict>> {
    let xs: Vec<f64> = s.iter().map(|x| x.extra_ns).collect();
    let v = crate::meter::Verdict::of(&xs);
    let mut sorted = xs.clone();
    sorted.sort_by(f64::total_cmp);
    let busy = crate::meter::median(&s.iter().map(|x| x.extra_busy_ns).collect::<Vec<_>>());
    let own = crate::meter::median(&s.iter().map(|x| x.own_ns).collect::<Vec<_>>());
    println!(
        "  {what}: extra {:.0} +- {:.0} ns/packet (median +- its standard error over {} rounds: {}); its processes' own {own:.0}; machine-wide busy {busy:.0}",
        v.ns,
        v.se,
        xs.len(),
        sorted.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" ")
    );
    if v.resolved() {
        return Ok(Some(v));
    }
    let why = if xs.len() < 2 {
        format!("{what}: one round gives no estimate of the noise")
    } else {
        format!("{what}: its extra CPU ({:.0} ns/packet, median of {} rounds, standard error {:.0}) cannot be told from the sender's own noise: too noisy to measure", v.ns, xs.len(), v.se)
    };
    if quick {
        println!("  {why}; quick mode leaves out the figures that need it");
        Ok(None)
    } else {
        Err(err(why))
    }
}

/// Packets that background traffic (ARP, IPv6 neighbour discovery) may add to a capture
/// of everything on the pair besides what we sent.
fn background(sent: u64) -> u64 {
    50 + sent / 10_000
}

/// Our capture's counts: (counted at the end of the pipeline, handed to user space,
/// dropped by the kernel), from `count: N blocks` and the `rx` summary lines.
fn ours_counts(stderr: &str) -> Result<(u64, u64, u64)> {
    if !stderr.lines().any(|l| l.starts_with("count: ")) || delivered_in(stderr).is_none() {
        return Err(err(format!(
            "the capture printed no `count:` or `rx` summary; its stderr:\n{stderr}"
        )));
    }
    Ok((
        count_in(stderr),
        delivered_in(stderr).unwrap_or(0),
        dropped_in(stderr),
    ))
}

/// tcpdump's counts at exit: (packets captured, dropped by the kernel).
fn tcpdump_counts(stderr: &str) -> Result<(u64, u64)> {
    let says = |what: &str| {
        stderr
            .lines()
            .find(|l| l.ends_with(what))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
    };
    match (says("packets captured"), says("packets dropped by kernel")) {
        (Some(c), Some(d)) => Ok((c, d)),
        _ => Err(err(format!(
            "tcpdump printed no `packets captured` / `dropped by kernel` totals; its stderr:\n{stderr}"
        ))),
    }
}

/// A capture of everything must account for every packet sent: captured + dropped is what
/// was sent, plus at most a little background traffic.
fn check_all(what: &str, sent: u64, captured: u64, dropped: u64) -> Result<()> {
    let seen = captured + dropped;
    if seen < sent || seen > sent + background(sent) {
        return Err(err(format!(
            "{what}: {captured} captured + {dropped} dropped = {seen}, but {sent} were sent: the counts do not add up"
        )));
    }
    Ok(())
}

fn count_in(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("count: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Packets delivered to user space, summed over the `rx` summary lines (`rx DEV: N packets
/// delivered, ...`); None without one.
fn delivered_in(stderr: &str) -> Option<u64> {
    let v: Vec<u64> = stderr
        .lines()
        .filter(|l| l.starts_with("rx "))
        .filter_map(|l| {
            l.split(": ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// Packets the kernel dropped for our sockets (ring full), summed over the `rx` summary
/// lines (`..., N dropped by the kernel (ring full); ...`).
fn dropped_in(stderr: &str) -> u64 {
    stderr
        .lines()
        .filter(|l| l.starts_with("rx "))
        .filter_map(|l| {
            let head = l.split(" dropped by the kernel").next()?;
            head.rsplit(", ").next()?.trim().parse::<u64>().ok()
        })
        .sum()
}

/// What every section of the capture benchmark shares: the veth pair, the CPU meter, the
/// `streamline` program, the offered load, the mode.
struct Bench {
    v: Veth,
    m: Meter,
    sl: std::path::PathBuf,
    /// Our end of the pair, where the captures run.
    dev: String,
    a: Load,
    quick: bool,
}

impl Bench {
    /// `streamline --socket none run -q PIPELINE`.
    fn run_sl(&self, pipeline: String) -> Command {
        let mut c = Command::new(&self.sl);
        c.args(["--socket", "none", "run", "-q", &pipeline]);
        c
    }

    /// Rounds: at least 3 (1 quick), more until every configuration's median is settled,
    /// up to 15 or the section's time.
    fn budget(&self, configs: usize) -> Budget {
        let quick = self.quick;
        Budget {
            min_rounds: if quick { 1 } else { 3 },
            max_rounds: if quick { 1 } else { 15 },
            time: Duration::from_secs_f64(if quick { 0.0 } else { configs as f64 * 45.0 }),
        }
    }

    fn alone(&self) -> Result<Window> {
        alone(&self.v, &self.m, &self.a)
    }

    fn measure(&self, cmd: Command, flows: u16) -> Result<Run> {
        measure(&self.v, &self.m, cmd, &self.a, flows)
    }

    /// The commands `make(k)`, one per name, each on the capture CPUs and measured in rounds
    /// interleaved with the sender alone (`meter::interleave`); `per` checks a run's counts
    /// and says how many packets it took.
    fn interleave(
        &self,
        names: &[String],
        make: impl Fn(usize) -> Command,
        per: impl Fn(usize, &Window, &Run) -> Result<u64>,
    ) -> Result<Vec<Vec<crate::meter::Sample<Run>>>> {
        crate::meter::interleave(
            names,
            &self.budget(names.len()),
            || self.alone(),
            |k| {
                let r = self.measure(crate::meter::on_capture_cpus(make(k)), 1)?;
                Ok((r.w, r))
            },
            per,
        )
    }
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(if quick { 600 } else { 1500 }));
    crate::meter::favour()?;
    let Setup {
        bench: b,
        alone_pps,
    } = setup(a, quick)?;
    let mut summary = Summary::default();
    summary.add(
        "capture_offered_pps",
        b.a.pps as f64,
        None,
        format!(
            "the offered rate ({}; the sender alone keeps {alone_pps:.0} packets/s)",
            if a.pps.is_some() {
                "--pps"
            } else {
                "a third of what it keeps"
            }
        ),
    );
    bpf_placement(&b, &mut summary)?;
    against_tcpdump(&b, &mut summary)?;
    multiqueue(&b, &mut summary)?;
    xdp_vs_packet(&b, &mut summary)?;
    summary.print()?;
    drop(b);
    Ok(())
}

/// The bench and the rate the sender kept alone.
struct Setup {
    bench: Bench,
    alone_pps: f64,
}

/// The veth pair, the meter and the offered rate (what this machine's sender keeps with
/// nothing else running, a third of it, unless given), printed.
fn setup(a: &Args, quick: bool) -> Result<Setup> {
    let sl = streamline()?;
    let v = veth()?;
    let m = Meter::new();
    let dev = v.here.clone();
    let secs = if quick { 1.0 } else { a.secs };
    // The offered rate: what this machine's sender keeps with nothing else running, a third
    // of it (the capture under test shares the 2 CPUs with the sender), unless given.
    let alone_pps = max_rate(&v.here_ip, &v.peer_ip, if quick { 0.5 } else { 1.0 }, 64)?;
    let pps = a.pps.unwrap_or((alone_pps / 3.0) as u64).max(1000);
    println!(
        "streamline-bench capture ({} mode): {} packets/s of 64-byte UDP for {} s on veth {dev}",
        if quick { "quick" } else { "full" },
        pps,
        secs
    );
    let load = Load { pps, secs };
    println!(
        "offered rate: {} packets/s ({}; the sender alone keeps {alone_pps:.0})",
        load.pps,
        if a.pps.is_some() {
            "--pps"
        } else {
            "a third of what the sender keeps"
        }
    );
    println!("{}", m.describe());
    println!("each round: the sender alone, then each configuration followed by the sender alone again (A B1 A B2 ... A); a configuration's extra CPU is its window's minus the sender alone's per packet sent (the two windows around it) times its packets sent, per packet it took");
    Ok(Setup {
        bench: Bench {
            v,
            m,
            sl,
            dev,
            a: load,
            quick,
        },
        alone_pps,
    })
}

/// The receive schemes both bpf placements are measured under: the pipeline option, the
/// figure's suffix and its target. The default (batching=adaptive, seed 002's Algorithm
/// 2), today's fixed 10 ms block timeout, and the fixed scheme at tcpdump's 1000 ms.
const BPF_SETTINGS: [(&str, &str, Option<Target>); 3] = [
    ("", "", Some(Target::AtLeast(5.0))),
    (" batching=fixed", "_fixed", None),
    (" batching=fixed latency=1000", "_1000ms", None),
];

/// A bpf run's counts, checked as it comes, before any figure: placed in the kernel,
/// matched + dropped = port-7 packets sent; in user space, handed to user space + dropped
/// = sent (+ background) and matched = port-7 packets sent unless some were dropped.
/// Returns the packets it took (sent - dropped).
fn check_bpf(opt: &str, kernel: bool, r: &Run) -> Result<u64> {
    let (matched, delivered, dropped) = ours_counts(&r.stderr)?;
    let port7 = r.w.sent.div_ceil(100);
    let what = format!(
        "bpf placed {}{opt}",
        if kernel {
            "in the kernel"
        } else {
            "in user space"
        }
    );
    if kernel {
        if matched + dropped != port7 {
            return Err(err(format!("{what}: {matched} matched + {dropped} dropped, but {port7} packets to port 7 were sent: the counts do not add up")));
        }
    } else {
        check_all(&what, r.w.sent, delivered, dropped)?;
        if matched > port7 || (dropped == 0 && matched != port7) {
            return Err(err(format!("{what}: {matched} matched of {port7} packets to port 7 sent ({dropped} dropped): the counts do not add up")));
        }
    }
    Ok(r.w.sent - dropped_in(&r.stderr).min(r.w.sent))
}

/// Kernel vs user placement of `bpf "udp dst port 7"` under each receive scheme.
fn bpf_placement(b: &Bench, summary: &mut Summary) -> Result<()> {
    let dev = &b.dev;
    println!("\n== bpf \"udp dst port 7\" (1% of the traffic): kernel vs user placement ==");
    println!("per packet the capture took (sent - dropped); the counts must add up: matched + dropped = port-7 packets sent (kernel),");
    println!("handed to user space + dropped = sent (+ background) and matched = port-7 packets sent unless some were dropped (user)");
    let mut pipelines = Vec::new();
    let mut names = Vec::new();
    for (opt, suffix, _) in &BPF_SETTINGS {
        pipelines.push(format!(
            "rx dev={dev}{opt} | bpf \"udp dst port 7\" | count"
        ));
        pipelines.push(format!(
            "rx dev={dev}{opt} | bpf \"udp dst port 7\" placed=user | count"
        ));
        names.push(format!("kernel{suffix}"));
        names.push(format!("user{suffix}"));
    }
    let all = b.interleave(
        &names,
        |k| b.run_sl(pipelines[k].clone()),
        |k, _, r| check_bpf(BPF_SETTINGS[k / 2].0, k % 2 == 0, r),
    )?;
    println!("extra CPU per packet taken, per configuration:");
    let mut verdicts = Vec::new();
    for (k, s) in all.iter().enumerate() {
        verdicts.push(judge(&format!("`{}`", pipelines[k]), s, b.quick)?);
    }
    bpf_figures(&all, &verdicts, summary)
}

/// The bpf placements' table (the round with the median figure of each) and figures:
/// user over kernel CPU per packet taken, per receive scheme.
fn bpf_figures(
    all: &[Vec<crate::meter::Sample<Run>>],
    verdicts: &[Option<crate::meter::Verdict>],
    summary: &mut Summary,
) -> Result<()> {
    println!(
        "{:<10} {:>10} {:>9} {:>14} {:>9} {:>12} {:>12}   (the round with the median figure)",
        "placement", "sent", "matched", "to user space", "dropped", "ns/pkt", "own ns/pkt"
    );
    for (i, (opt, suffix, target)) in BPF_SETTINGS.iter().enumerate() {
        let tail = if opt.is_empty() {
            String::new()
        } else {
            format!("   ({})", opt.trim())
        };
        let mut drops = Vec::new();
        for (j, name) in ["kernel", "user"].iter().enumerate() {
            let s = &all[2 * i + j];
            let mut order: Vec<usize> = (0..s.len()).collect();
            order.sort_by(|&x, &y| s[x].extra_ns.total_cmp(&s[y].extra_ns));
            let mid = &s[order[order.len() / 2]];
            let (matched, delivered, dropped) = ours_counts(&mid.data.stderr)?;
            println!(
                "{name:<10} {:>10} {matched:>9} {delivered:>14} {dropped:>9} {:>12.0} {:>12.0}{tail}",
                mid.w.sent, mid.extra_ns, mid.own_ns
            );
            drops.push(s.iter().map(|x| dropped_in(&x.data.stderr)).sum::<u64>());
        }
        let (Some(kv), Some(uv)) = (verdicts[2 * i], verdicts[2 * i + 1]) else {
            continue;
        };
        let (kernel_ns, user_ns) = (kv.ns, uv.ns);
        let drops = if drops[0] + drops[1] > 0 {
            format!(
                "; DROPS over all rounds: kernel {}, user {} (figures per packet taken)",
                drops[0], drops[1]
            )
        } else {
            "; no drops".to_string()
        };
        let note = if opt.is_empty() {
            format!("CPU per packet taken (sender, capture, softirq; the sender alone's cost per packet sent taken out), median of {} interleaved rounds, batching=adaptive (the default): user {user_ns:.0} +- {:.0} ns vs kernel {kernel_ns:.0} +- {:.0} ns{drops}", all[2 * i].len(), uv.se, kv.se)
        } else {
            format!("the same with{opt} for both placements: user {user_ns:.0} +- {:.0} ns vs kernel {kernel_ns:.0} +- {:.0} ns{drops}", uv.se, kv.se)
        };
        summary.add(
            &format!("kernel_vs_user_bpf_user_cycles_per_packet{suffix}"),
            user_ns / kernel_ns,
            *target,
            note,
        );
    }
    Ok(())
}

/// `ips`'s `N packets` (judged) from its summary line.
fn ips_judged(stderr: &str) -> Result<u64> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("ips: "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| err(format!("no `ips:` summary line; its stderr:\n{stderr}")))
}

/// An ips run's counts, before any figure: `ips` judged every port-7 packet that was not
/// dropped (the rules name port 7 only) and nothing else; in the kernel, that is all the
/// socket handed over; in user space, the socket handed over everything sent (+
/// background). Returns the packets it took (sent - dropped).
fn check_ips(kernel: bool, r: &Run) -> Result<u64> {
    let judged = ips_judged(&r.stderr)?;
    let (delivered, dropped) = (delivered_in(&r.stderr).unwrap_or(0), dropped_in(&r.stderr));
    let port7 = r.w.sent.div_ceil(100);
    let what = if kernel {
        "ips, header stage in the kernel"
    } else {
        "ips placed=user"
    };
    if kernel {
        if judged + dropped < port7 || judged != delivered {
            return Err(err(format!("{what}: {judged} judged, {delivered} handed to user space, {dropped} dropped, but {port7} packets to port 7 were sent: the counts do not add up")));
        }
    } else {
        check_all(what, r.w.sent, delivered, dropped)?;
        if judged > port7 || (dropped == 0 && judged != port7) {
            return Err(err(format!("{what}: {judged} judged of {port7} packets to port 7 sent ({dropped} dropped): the counts do not add up")));
        }
    }
    Ok(r.w.sent - dropped.min(r.w.sent))
}

/// Kernel Snort's push-down (issue 36, `streamline-bench ids`): `rx | ips rules=R
/// mode=ids`, whose header stage runs on the capture socket, against the same with
/// `placed=user` (every frame handed to user space and refused there by the same
/// program), on this benchmark's traffic (1% to port 7, which `rules` names; the rest to
/// port 9, which no rule does). Returns user over kernel extra CPU per packet taken and
/// the figure's note; None in a quick run whose figures cannot be told from noise.
pub(crate) fn ips_pushdown(rules: &std::path::Path, quick: bool) -> Result<Option<(f64, String)>> {
    crate::meter::favour()?;
    let a = Args {
        pps: None,
        secs: 2.0,
    };
    let Setup { bench: b, .. } = setup(&a, quick)?;
    let base = format!("rx dev={} | ips rules={} mode=ids", b.dev, rules.display());
    let pipelines = [base.clone(), format!("{base} placed=user")];
    let names = vec!["kernel".to_string(), "user".to_string()];
    let all = b.interleave(
        &names,
        |k| b.run_sl(pipelines[k].clone()),
        |k, _, r| check_ips(k == 0, r),
    )?;
    let mut v = Vec::new();
    for (k, s) in all.iter().enumerate() {
        v.push(judge(&format!("`{}`", pipelines[k]), s, b.quick)?);
    }
    let (Some(kv), Some(uv)) = (v[0], v[1]) else {
        return Ok(None);
    };
    let drops: u64 = all
        .iter()
        .flatten()
        .map(|x| dropped_in(&x.data.stderr))
        .sum();
    Ok(Some((
        uv.ns / kv.ns,
        format!(
            "extra CPU per packet taken (sender, capture, softirq), median of {} interleaved rounds at {} packets/s, 1% of them to the port the rules name: user {:.0} +- {:.0} ns vs kernel {:.0} +- {:.0} ns; {}",
            all[0].len(),
            b.a.pps,
            uv.ns,
            uv.se,
            kv.ns,
            kv.se,
            if drops > 0 { format!("DROPS over all rounds: {drops}") } else { "no drops".into() }
        ),
    )))
}

/// The configurations captured against tcpdump, in order: ours (default), tcpdump, ours
/// at batching=fixed.
const TCPDUMP_NAMES: [&str; 3] = ["streamline", "tcpdump", "streamline batching=fixed"];

/// (captured, dropped) of a run of configuration `k` of [`TCPDUMP_NAMES`], checked against
/// what was sent.
fn tcpdump_run_counts(r: &Run, k: usize) -> Result<(u64, u64)> {
    let (c, d) = if k == 1 {
        tcpdump_counts(&r.stderr)?
    } else {
        let (c, _, d) = ours_counts(&r.stderr)?;
        (c, d)
    };
    check_all(TCPDUMP_NAMES[k], r.w.sent, c, d)?;
    Ok((c, d))
}

/// Capturing everything: `rx | count` against `tcpdump -w /dev/null`.
fn against_tcpdump(b: &Bench, summary: &mut Summary) -> Result<()> {
    let dev = &b.dev;
    println!("\n== Capturing everything: rx | count vs tcpdump -w /dev/null ==");
    println!("per packet captured; captured + dropped must equal sent (+ background) for each");
    let names = TCPDUMP_NAMES.map(String::from);
    let td = || {
        let mut c = Command::new("tcpdump");
        c.args(["-i", dev, "-w", "/dev/null", "-q"]);
        c
    };
    let make = |k: usize| match k {
        0 => b.run_sl(format!("rx dev={dev} | count")),
        1 => td(),
        _ => b.run_sl(format!("rx dev={dev} batching=fixed | count")),
    };
    let all = b.interleave(&names, make, |k, _, r| Ok(tcpdump_run_counts(r, k)?.0))?;
    println!("extra CPU per packet captured, per configuration:");
    let mut per = Vec::new();
    for (k, label) in [
        "streamline (batching=adaptive, default)",
        "tcpdump (1000 ms timeout)",
        "streamline (batching=fixed, 10 ms)",
    ]
    .iter()
    .enumerate()
    {
        let s = &all[k];
        let v = judge(label, s, b.quick)?;
        let (c, d) = s.iter().try_fold((0, 0), |acc, r| {
            tcpdump_run_counts(&r.data, k).map(|(c, d)| (acc.0 + c, acc.1 + d))
        })?;
        let sent: u64 = s.iter().map(|r| r.w.sent).sum();
        println!(
            "  {label}: {c} of {sent} packets captured over the rounds, {d} dropped by the kernel"
        );
        per.push((v, d));
    }
    let drops = |i: usize| {
        if per[1].1 + per[i].1 > 0 {
            format!(
                "; DROPS over all rounds: tcpdump {}, ours {} (figures per packet captured)",
                per[1].1, per[i].1
            )
        } else {
            "; no drops".to_string()
        }
    };
    if let (Some(o), Some(t)) = (per[0].0, per[1].0) {
        summary.add(
            "capture_cpu_tcpdump_over_streamline",
            t.ns / o.ns,
            Some(Target::AtLeast(1.5)),
            format!("CPU per packet captured at the same offered rate (sender, capture, softirq; the sender alone's cost per packet sent taken out), median of {} interleaved rounds: tcpdump {:.0} +- {:.0} ns (1000 ms timeout) vs ours {:.0} +- {:.0} ns (batching=adaptive){}", all[0].len(), t.ns, t.se, o.ns, o.se, drops(0)),
        );
    }
    if let (Some(o), Some(t)) = (per[2].0, per[1].0) {
        summary.add(
            "capture_cpu_tcpdump_over_streamline_fixed",
            t.ns / o.ns,
            None,
            format!(
                "the same with ours at batching=fixed (today's 10 ms block timeout): ours {:.0} +- {:.0} ns{}",
                o.ns,
                o.se,
                drops(2)
            ),
        );
    }
    Ok(())
}

/// Multi-queue receive: packets processed by `rx queues=1` and `rx queues=2`.
fn multiqueue(b: &Bench, summary: &mut Summary) -> Result<()> {
    println!("\n== Multi-queue receive: `rx queues=1` and `rx queues=2` (PACKET_FANOUT hash, one engine per queue), deflate per packet, 16 flows ==");
    let engines = |q: usize| {
        b.run_sl(format!(
            "rx dev={} queues={q} | deflate level=9 | count",
            b.dev
        ))
    };
    let r1 = b.measure(engines(1), 16)?;
    let (so, one) = (r1.w.sent, count_in(&r1.stderr));
    let r2 = b.measure(engines(2), 16)?;
    let (st, two) = (r2.w.sent, count_in(&r2.stderr));
    println!("1 engine:  {one} of {so} packets processed");
    println!("2 engines: {two} of {st} packets processed");
    summary.add("multiqueue_2_vs_1", two as f64 / one.max(1) as f64, None, format!("packets processed with 2 engines vs 1 at {} packets/s offered (2 CPUs, the sender shares them)", b.a.pps));
    Ok(())
}

/// AF_XDP vs AF_PACKET on the receiving end (in the namespace): CPU per packet counted.
fn xdp_vs_packet(b: &Bench, summary: &mut Summary) -> Result<()> {
    let v = &b.v;
    println!("\n== AF_XDP vs AF_PACKET: `rx impl=xdp | count` vs `rx impl=packet | count` on the receiving end (in the namespace) ==");
    let in_ns = |imp: &str| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &v.ns]).arg(&b.sl).args([
            "--socket",
            "none",
            "run",
            "-q",
            &format!("rx dev={} impl={imp} | count", v.there),
        ]);
        c
    };
    let rx = b.measure(in_ns("xdp"), 1)?;
    let rp = b.measure(in_ns("packet"), 1)?;
    let (sx, cx, ex) = (rx.w.sent, rx.w.own, rx.stderr);
    let (sp, cp, ep) = (rp.w.sent, rp.w.own, rp.stderr);
    for (name, e) in [("AF_XDP", &ex), ("AF_PACKET", &ep)] {
        if count_in(e) == 0 {
            return Err(err(format!("{name}: nothing counted; its output:\n{e}")));
        }
    }
    let (nx, np) = (count_in(&ex), count_in(&ep));
    println!(
        "{:<8} {:>10} {:>10} {:>12}",
        "socket", "sent", "counted", "CPU ns/pkt"
    );
    println!(
        "{:<8} {:>10} {:>10} {:>12.0}",
        "AF_XDP",
        sx,
        nx,
        cx * 1e9 / nx as f64
    );
    println!(
        "{:<8} {:>10} {:>10} {:>12.0}",
        "AF_PACKET",
        sp,
        np,
        cp * 1e9 / np as f64
    );
    for e in [&ex, &ep] {
        for l in e.lines().filter(|l| l.starts_with("rx ")) {
            println!("  {l}");
        }
    }
    summary.add(
        "xdp_vs_packet_capture_cpu",
        (cp / np as f64) / (cx / nx as f64),
        None,
        "CPU per packet counted of AF_PACKET over AF_XDP (copy mode, veth); above 1: AF_XDP is cheaper",
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "rx slcb1a: 1201 packets delivered, 1250 seen by the kernel socket, 49 dropped by the kernel (ring full); 3 blocks taken, the ring went round 0 times; batching fixed: 9 polls\ncount: 1201 blocks\n";

    #[test]
    fn our_counts_and_drops_are_read_from_the_summaries() {
        assert_eq!(ours_counts(OURS).unwrap(), (1201, 1201, 49));
        assert!(ours_counts("count: 3 blocks\n").is_err(), "no rx summary");
        let two = format!("{OURS}{}", OURS.lines().next().unwrap());
        assert_eq!(dropped_in(&two), 98);
        assert_eq!(delivered_in(&two), Some(2402));
    }

    #[test]
    fn tcpdump_totals_are_read_and_required() {
        let said = "listening on x\n1000 packets captured\n1003 packets received by filter\n3 packets dropped by kernel\n";
        assert_eq!(tcpdump_counts(said).unwrap(), (1000, 3));
        assert!(tcpdump_counts("listening on x\n").is_err());
    }

    #[test]
    fn counts_that_do_not_add_up_fail() {
        check_all("x", 1000, 1000, 0).unwrap();
        check_all("x", 1000, 990, 10).unwrap();
        check_all("x", 1000, 1003, 0).unwrap(); // ARP and the like
        assert!(
            check_all("x", 1000, 980, 10).is_err(),
            "10 lost unaccounted"
        );
        assert!(
            check_all("x", 1000, 2000, 0).is_err(),
            "far more than was sent"
        );
    }
}
