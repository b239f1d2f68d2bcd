//! The `batching` subcommand (seed 002, Algorithms 1-2; issue 21): CPU time per packet of
//! seed 002's adaptive system-call batching against today's fixed timeouts, at one fixed
//! offered rate, with real traffic between network namespaces.
//!
//! Three namespaces joined by two veth pairs: the benchmark's own UDP sender (root
//! namespace, `capture::send`, 64-byte datagrams at a fixed rate) sends into pair 1; a
//! forwarder in namespace 1, `rx dev=<pair 1> batching=X | tx dev=<pair 2> batching=X`,
//! receives every frame (Algorithm 2) and transmits it (Algorithm 1) into pair 2; a sink
//! in namespace 2, `rx dev=<pair 2> batching=X | count`, receives it again. The frames are
//! addressed to a MAC no interface has (a static neighbour entry), so the namespaces' own
//! stacks drop them at once and nothing answers; only the two captures take them.
//!
//! Measured per scheme: CPU time (user + system, from /proc/PID/task/*/schedstat) of the
//! forwarder and the sink from the first datagram to shortly after the last, divided by
//! the packets sent; the sink's count checks that every packet went through. The offered
//! rate is this machine's: the sender is first measured alone, and `--load` of what it
//! keeps is offered (default 5%, a moderate stream as in `legacy`; `--pps` overrides).
//! Both schemes run in one invocation, alternating round by round; the median round counts.

use crate::capture::{cpu_ns, streamline};
use crate::traffic::{max_rate, send};
use crate::util::{err, watchdog, Result, Summary, Target};
use kernel::netns::Veth;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Offered rate, packets per second (default: `--load` of what the sender keeps alone).
    #[arg(long)]
    pps: Option<u64>,
    /// Fraction of the sender's rate to offer.
    #[arg(long, default_value_t = 0.05)]
    load: f64,
    /// Seconds of traffic per round.
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Rounds per scheme (the median counts).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// The two pairs: sender -> forwarder on `a`, forwarder -> sink on `b` (its first end
/// moved into `a`'s namespace). Removed on drop (deleting a namespace deletes its ends).
struct Topology {
    a: Veth,
    b: Veth,
    /// An address on pair 1's subnet that nobody has, with a static neighbour entry.
    dst: String,
}

fn sh(v: &Veth, args: &[&str]) -> Result<()> {
    v.exec(args).map_err(|e| err(e.to_string()))
}

impl Topology {
    fn new() -> Result<Topology> {
        let a = Veth::new("ba").map_err(|e| {
            err(format!(
                "{e} (the batching benchmark needs root: network namespaces, CAP_NET_RAW)"
            ))
        })?;
        let b = Veth::new("bb").map_err(|e| err(e.to_string()))?;
        // Pair 2's first end goes into namespace 1, where the forwarder runs.
        kernel::netns::run(&["ip", "link", "set", &b.here, "netns", &a.ns])
            .map_err(|e| err(e.to_string()))?;
        sh(&a, &["ip", "link", "set", &b.here, "up"])?;
        // No traffic of their own: IPv6 off on every end.
        for (v, dev) in [
            (None, &a.here),
            (Some(&a), &a.there),
            (Some(&a), &b.here),
            (Some(&b), &b.there),
        ] {
            let arg = format!("net.ipv6.conf.{dev}.disable_ipv6=1");
            match v {
                None => {
                    kernel::netns::run(&["sysctl", "-qw", &arg]).map_err(|e| err(e.to_string()))?
                }
                Some(v) => sh(v, &["sysctl", "-qw", &arg])?,
            }
        }
        let dst = format!(
            "{}.3",
            a.here_ip.rsplit_once('.').map(|x| x.0).unwrap_or("10.0.0")
        );
        kernel::netns::run(&[
            "ip",
            "neigh",
            "replace",
            &dst,
            "lladdr",
            "02:00:00:00:00:03",
            "dev",
            &a.here,
            "nud",
            "permanent",
        ])
        .map_err(|e| err(e.to_string()))?;
        // Where each end lives, as `ip netns exec` sees it (a pair left in the root namespace
        // would measure nothing).
        for (v, dev) in [(&a, &a.there), (&a, &b.here), (&b, &b.there)] {
            sh(v, &["ip", "link", "show", dev])
                .map_err(|e| err(format!("{dev} is not in namespace {}: {e}", v.ns)))?;
        }
        std::thread::sleep(Duration::from_millis(300));
        Ok(Topology { a, b, dst })
    }
}

/// What one round of one scheme measured.
#[derive(Debug, Clone)]
struct Round {
    sent: u64,
    counted: u64,
    fwd_ns: u64,
    sink_ns: u64,
    summaries: Vec<String>,
}

impl Round {
    fn per_packet(&self) -> f64 {
        (self.fwd_ns + self.sink_ns) as f64 / self.sent.max(1) as f64
    }
}

fn in_ns(sl: &std::path::Path, v: &Veth, pipeline: String) -> Result<Child> {
    Command::new("ip")
        .args(["netns", "exec", &v.ns])
        .arg(sl)
        .args(["--socket", "none", "run", "-q", "--no-share", &pipeline])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("starting `{pipeline}`: {e}")))
}

fn stop(c: Child) -> Result<String> {
    let _ = Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status();
    let out = c
        .wait_with_output()
        .map_err(|e| err(format!("waiting for a run: {e}")))?;
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

fn round(sl: &std::path::Path, t: &Topology, scheme: &str, pps: u64, secs: f64) -> Result<Round> {
    let sink = in_ns(
        sl,
        &t.b,
        format!("rx dev={} batching={scheme} | count", t.b.there),
    )?;
    let fwd = match in_ns(
        sl,
        &t.a,
        format!(
            "rx dev={} batching={scheme} | tx dev={} batching={scheme}",
            t.a.there, t.b.here
        ),
    ) {
        Ok(c) => c,
        Err(e) => {
            let _ = stop(sink);
            return Err(e);
        }
    };
    let timed = (|| {
        std::thread::sleep(Duration::from_millis(800));
        let (f0, s0) = (cpu_ns(fwd.id()), cpu_ns(sink.id()));
        let (sent, took) = send(&t.a.here_ip, &t.dst, pps, secs, 1)?;
        if took > secs * 1.1 {
            return Err(err(format!(
                "the sender kept only {:.0} of the {pps} packets/s offered; give a lower --pps",
                sent as f64 / took
            )));
        }
        // Longer than the adaptive receive's latency bound (100 ms): everything sent is
        // through both captures.
        std::thread::sleep(Duration::from_millis(400));
        Ok((sent, cpu_ns(fwd.id()) - f0, cpu_ns(sink.id()) - s0))
    })();
    // Stopped however the round went.
    let ef = stop(fwd)?;
    let es = stop(sink)?;
    let (sent, fwd_ns, sink_ns) = timed?;
    let counted = es
        .lines()
        .find_map(|l| l.strip_prefix("count: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            err(format!(
                "the sink counted nothing ({scheme}):\n{es}\nforwarder:\n{ef}"
            ))
        })?;
    let summaries = ef
        .lines()
        .chain(es.lines())
        .filter(|l| l.starts_with("rx ") || l.starts_with("tx "))
        .map(str::to_string)
        .collect();
    Ok(Round {
        sent,
        counted,
        fwd_ns,
        sink_ns,
        summaries,
    })
}

/// Measures `adaptive_batching_cpu_per_packet_vs_fixed` into `summary` with the defaults
/// (`streamline-bench net` takes it in its run). Needs root.
pub fn figures(quick: bool, summary: &mut Summary) -> Result<()> {
    figures_with(
        &Args {
            pps: None,
            load: 0.05,
            secs: 3.0,
            rounds: 3,
        },
        quick,
        summary,
    )
}

fn figures_with(a: &Args, quick: bool, summary: &mut Summary) -> Result<()> {
    let sl = streamline()?;
    let t = Topology::new()?;
    let secs = if quick { 1.0 } else { a.secs };
    let rounds = if quick { 1 } else { a.rounds.max(1) };
    let alone = max_rate(&t.a.here_ip, &t.dst, if quick { 0.5 } else { 1.0 }, 64)?;
    let pps = a
        .pps
        .unwrap_or((alone * a.load.clamp(0.0001, 1.0)) as u64)
        .max(500);
    println!(
        "streamline-bench batching ({} mode): sender -> `rx | tx` forwarder (namespace {}) -> `rx | count` sink (namespace {})",
        if quick { "quick" } else { "full" },
        t.a.ns,
        t.b.ns
    );
    println!(
        "offered rate: {pps} packets/s of 64-byte UDP for {secs} s per round ({}; the sender alone keeps {alone:.0})",
        if a.pps.is_some() {
            "--pps".to_string()
        } else {
            format!("{:.0}% of what the sender keeps", a.load * 100.0)
        }
    );
    let schemes = ["fixed", "adaptive"];
    let mut got: Vec<Vec<Round>> = vec![Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (k, s) in schemes.iter().enumerate() {
            got[k].push(round(&sl, &t, s, pps, secs)?);
        }
    }
    println!(
        "{:<9} {:>9} {:>9} {:>14} {:>14} {:>14}   (median round; all rounds: ns/packet)",
        "scheme", "sent", "counted", "forwarder ns", "sink ns", "CPU ns/packet"
    );
    let mut medians = Vec::new();
    for (k, s) in schemes.iter().enumerate() {
        let mut r = got[k].clone();
        r.sort_by(|x, y| x.per_packet().total_cmp(&y.per_packet()));
        let all: Vec<String> = r.iter().map(|x| format!("{:.0}", x.per_packet())).collect();
        let m = r.swap_remove(r.len() / 2);
        println!(
            "{:<9} {:>9} {:>9} {:>14.0} {:>14.0} {:>14.0}   ({})",
            s,
            m.sent,
            m.counted,
            m.fwd_ns as f64 / m.sent.max(1) as f64,
            m.sink_ns as f64 / m.sent.max(1) as f64,
            m.per_packet(),
            all.join(" ")
        );
        for l in &m.summaries {
            println!("  {l}");
        }
        if m.counted < m.sent {
            return Err(err(format!(
                "{s}: the sink counted {} of {} packets sent",
                m.counted, m.sent
            )));
        }
        medians.push(m);
    }
    let ratio = medians[0].per_packet() / medians[1].per_packet();
    summary.add(
        "adaptive_batching_cpu_per_packet_vs_fixed",
        ratio,
        Some(Target::AtLeast(1.3)),
        format!(
            "CPU per packet of forwarder + sink, fixed {:.0} ns vs adaptive {:.0} ns, at {pps} packets/s ({:.0}% of the sender's {alone:.0})",
            medians[0].per_packet(),
            medians[1].per_packet(),
            100.0 * pps as f64 / alone
        ),
    );
    summary.add(
        "batching_offered_pps",
        pps as f64,
        None,
        "the offered rate of the batching figure",
    );
    Ok(())
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(600));
    let mut summary = Summary::default();
    figures_with(a, quick, &mut summary)?;
    summary.print()?;
    Ok(())
}
