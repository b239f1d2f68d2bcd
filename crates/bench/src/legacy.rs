//! The `legacy` subcommand (issue 17; thesis 7.5: "10 tcpdump readers cost 13% CPU where
//! Linux needs more than 100%"): 1, 2, 5 and 10 unmodified tcpdump readers, each with a
//! different filter and `-w /dev/null`, at one offered rate, on the system's libpcap (one
//! AF_PACKET socket per reader) and on ours (`streamline compat`: one shared capture in
//! the daemon, every reader a slot on its rings).
//!
//! The traffic is the thesis' "moderate datastream of full-sized packets" (UDP datagrams of
//! 1472 bytes: 1514-byte frames; `--size` changes it). The offered rate comes from the
//! machine: the sender (through a veth pair, `capture::send_sized`) is measured alone
//! first, and the benchmark offers a share of what it keeps (`--load`, 5%), so that the
//! readers' cost never throttles it and no reader drops. Each configuration runs `--reps` times (3), all
//! configurations taking turns, and the median counts. CPU is measured
//! system-wide (/proc/stat, all CPUs, all kinds of time: the kernel's per-socket copies
//! run in the sender's context and in softirqs, not in the readers), minus what the same
//! sending costs with no reader: what the readers and their capture path cost. Needs root.

use crate::capture::{cpu_ns, max_rate, send_sized, veth};
use crate::proc::{kill_with_us, machine_busy_secs};
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds of traffic per configuration.
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Share of the sender's measured rate to offer (the thesis' "moderate datastream":
    /// 5% of what one sender pushes through a veth pair, several hundred Mbit/s here).
    #[arg(long, default_value_t = 0.05)]
    load: f64,
    /// UDP payload bytes per datagram (1472: full-sized Ethernet frames).
    #[arg(long, default_value_t = 1472)]
    size: usize,
    /// Rounds (each configuration once per round; the median counts).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Reader counts to measure (default 1, 2, 5, 10; quick: 1, 10).
    #[arg(long, value_delimiter = ',')]
    readers: Vec<usize>,
    /// Measure only one side: `linux` or `streamline` (for profiling one of them).
    #[arg(long)]
    only: Option<String>,
}

/// A started tcpdump, listening.
struct Reader {
    child: Child,
    rest: std::thread::JoinHandle<String>,
}

fn start_reader(mut cmd: Command) -> Result<Reader> {
    kill_with_us(&mut cmd);
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("starting tcpdump: {e}")))?;
    let mut errs = std::io::BufReader::new(child.stderr.take().expect("piped"));
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if errs.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.wait();
            return Err(err(format!("tcpdump ended before listening: {said}")));
        }
        said += &line;
        if line.contains("listening on") {
            break;
        }
    }
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut errs, &mut s);
        s
    });
    Ok(Reader { child, rest })
}

/// SIGINT it; (captured, dropped) from its totals.
fn stop_reader(r: Reader) -> (u64, u64) {
    let _ = Command::new("kill")
        .args(["-INT", &r.child.id().to_string()])
        .status();
    let _ = r.child.wait_with_output();
    let text = r.rest.join().unwrap_or_default();
    let n = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    // What the kernel passed to the reader's socket: "received by filter" (the kernel's
    // tp_packets, dropped ones included); a reader stopped with frames still in a ring
    // block it had not read counts them there but not as captured.
    let received: u64 = n("packets received by filter");
    let (captured, dropped) = (n("packets captured"), n("dropped by kernel"));
    (captured, dropped.max(received.saturating_sub(captured)))
}

/// One measured window of sending at `pps`: (packets sent, seconds, machine busy CPU
/// seconds, CPU seconds of `pids`).
pub(crate) fn window(
    here: &str,
    peer: &str,
    pps: u64,
    secs: f64,
    size: usize,
    pids: &[u32],
) -> Result<(u64, f64, f64, f64)> {
    window_flows(here, peer, pps, secs, size, 1, pids)
}

/// [`window`] with the traffic from `flows` source ports.
pub(crate) fn window_flows(
    here: &str,
    peer: &str,
    pps: u64,
    secs: f64,
    size: usize,
    flows: u16,
    pids: &[u32],
) -> Result<(u64, f64, f64, f64)> {
    let p0: u64 = pids.iter().map(|&p| cpu_ns(p)).sum();
    let b0 = machine_busy_secs()?;
    let (sent, took) = send_sized(here, peer, pps, secs, flows, size)?;
    // What was sent is still being read: let the readers finish it inside the window.
    std::thread::sleep(Duration::from_millis(300));
    let b1 = machine_busy_secs()?;
    let p1: u64 = pids.iter().map(|&p| cpu_ns(p)).sum();
    Ok((sent, took, b1 - b0, (p1 - p0) as f64 / 1e9))
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(900));
    if crate::daemon::euid()? != 0 {
        return Err(err(
            "this benchmark must run as root: it makes a veth pair and captures on it",
        ));
    }
    let (streamlined, streamline) = crate::daemon::binaries()?;
    let out = Command::new(&streamline)
        .args(["compat", "--print-dir"])
        .output()
        .map_err(|e| err(format!("streamline compat: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "streamline compat --print-dir: {} (build it: cargo build --release -p compat)",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let compat = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let secs = if quick { 1.0 } else { a.secs };
    let v = veth()?;
    let (here, peer, dev) = (v.here_ip.clone(), v.peer_ip.clone(), v.here.clone());
    let dir = TempDir::new("legacy")?;
    cleanup_on_abnormal_exit(&[
        &dir.path().join("control"),
        &dir.path().join("streamlined.log"),
        dir.path(),
    ]);
    let daemon = crate::daemon::Daemon::start(&streamlined, dir.path(), None)?;

    let size = a.size.clamp(18, 1472);
    let max = max_rate(&here, &peer, if quick { 0.5 } else { 1.0 }, size)?;
    let pps = ((max * a.load) as u64).max(1000);
    let reps = if quick { 1 } else { a.reps.max(1) };
    println!("streamline-bench legacy ({} mode): tcpdump readers on veth {dev}, {secs} s per configuration, {reps} round(s)", if quick { "quick" } else { "full" });
    println!("sender alone keeps {max:.0} packets/s ({size}-byte UDP payloads); offering {pps} packets/s ({:.0}% of it, {:.0} Mbit/s)", a.load * 100.0, pps as f64 * (size + 42) as f64 * 8.0 / 1e6);
    println!(
        "our libpcap: {compat}/libpcap.so.0.8; our daemon: {} (pid {})",
        streamlined.display(),
        daemon.child.as_ref().map_or(0, |c| c.id())
    );

    let filters = [
        "udp".to_string(),
        "udp dst port 9".to_string(),
        "ip".to_string(),
        format!("dst host {peer}"),
        format!("src host {here}"),
        "udp and not port 53".to_string(),
        "ip proto 17".to_string(),
        "len > 60".to_string(),
        "udp dst port 7".to_string(),
        "not tcp".to_string(),
    ];
    println!(
        "filters (reader k has the k-th): {}",
        filters
            .iter()
            .map(|f| format!("'{f}'"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let counts: &[usize] = if !a.readers.is_empty() {
        &a.readers
    } else if quick {
        &[1, 10]
    } else {
        &[1, 2, 5, 10]
    };
    // Per (readers, streamline?): the extra CPU of each round.
    let mut extra: std::collections::BTreeMap<(usize, bool), Vec<f64>> = Default::default();
    let mut bases = Vec::new();
    println!(
        "\n{:<5} {:<11} {:>7} {:>10} {:>14} {:>14} {:>12} {:>10} {:>9}",
        "round",
        "libpcap",
        "readers",
        "sent",
        "readers+path",
        "readers only",
        "captured",
        "dropped",
        "ns/pkt"
    );
    for round in 0..reps {
        // The sender alone, each round: what the configurations' CPU is measured above.
        let (_, took, busy, _) = window(&here, &peer, pps, secs, size, &[])?;
        bases.push(busy / took);
        let base = median(&bases);
        println!(
            "{round:<5} {:<11} {:>7} {:>10} {:>13.1}%   (the sender alone; median so far {:.1}%)",
            "-",
            0,
            "",
            busy / took * 100.0,
            base * 100.0
        );
        for &n in counts {
            for on_streamline in [false, true] {
                if a.only
                    .as_deref()
                    .is_some_and(|o| o != if on_streamline { "streamline" } else { "linux" })
                {
                    continue;
                }
                let mut readers = Vec::new();
                for f in filters.iter().cycle().take(n) {
                    let mut c = Command::new("tcpdump");
                    c.args(["-Z", "root", "-n", "-i", &dev, "-w", "/dev/null", f]);
                    if on_streamline {
                        c.env("LD_LIBRARY_PATH", &compat)
                            .env("STREAMLINE_SOCKET", &daemon.socket);
                    }
                    readers.push(start_reader(c)?);
                }
                std::thread::sleep(Duration::from_millis(300));
                let pids: Vec<u32> = readers.iter().map(|r| r.child.id()).collect();
                let measured = window(&here, &peer, pps, secs, size, &pids);
                let totals: Vec<(u64, u64)> = readers.into_iter().map(stop_reader).collect();
                let (sent, took, busy, own) = measured?;
                // Every reader saw (captured or had dropped) what its filter matches of
                // what was sent, on either libpcap; a reader that missed packets would
                // make its side look cheaper than it is.
                for (k, (f, t)) in filters.iter().cycle().zip(&totals).enumerate() {
                    let want = matching(f, sent, size);
                    // Captured, plus what the kernel took for it but it did not read (dropped,
                    // or still in its ring when stopped).
                    let got = t.0 + t.1;
                    // Stray frames (ARP, IPv6 neighbour discovery) match the broad filters.
                    if got < want || got > want + want / 100 + 20 {
                        return Err(err(format!(
                            "{} libpcap, {n} readers: reader {k} ('{f}') saw {got} packets ({} captured, {} dropped or unread) where its filter matches {want} of the {sent} sent",
                            if on_streamline { "our" } else { "the system's" },
                            t.0,
                            t.1
                        )));
                    }
                }
                if took > secs * 1.15 {
                    println!(
                        "(the sender kept only {:.0} of {pps} packets/s here)",
                        sent as f64 / took
                    );
                }
                // May come out at or below zero in a round: the configuration cost less
                // than the sender's own noise. Judged over the rounds, below.
                let x = busy / took - base;
                let captured: u64 = totals.iter().map(|t| t.0).sum();
                let dropped: u64 = totals.iter().map(|t| t.1).sum();
                println!(
                    "{round:<5} {:<11} {:>7} {:>10} {:>13.1}% {:>13.1}% {:>12} {:>10} {:>9.0}",
                    if on_streamline { "streamline" } else { "linux" },
                    n,
                    sent,
                    x * 100.0,
                    own / took * 100.0,
                    captured,
                    dropped,
                    x * took * 1e9 / sent.max(1) as f64
                );
                extra.entry((n, on_streamline)).or_default().push(x);
                // Let a shared capture whose readers all left stop before the next one.
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
    println!("\nmedian CPU of readers and capture path (% of one CPU):");
    for &n in counts {
        let m = |sl: bool| extra.get(&(n, sl)).map_or(f64::NAN, |v| median(v) * 100.0);
        println!(
            "  {n:>2} readers: linux {:>6.1}%   streamline {:>6.1}%",
            m(false),
            m(true)
        );
    }
    // A configuration whose median extra CPU is not above zero cost less than the sender's
    // own run-to-run noise: no ratio can be taken from it. A full run fails naming it; a
    // quick run (a smoke test) says so and leaves out the figures that need it.
    let mut unmeasured = Vec::new();
    for (&(n, sl), v) in &extra {
        if median(v) <= 0.0 {
            unmeasured.push((n, sl));
            let what = format!(
                "{n} readers on {} libpcap: the machine was no busier with them than with the sender alone (extra CPU per round: {}): too noisy to measure",
                if sl { "our" } else { "the system's" },
                v.iter().map(|x| format!("{:.1}%", x * 100.0)).collect::<Vec<_>>().join(", ")
            );
            if !quick {
                return Err(err(what));
            }
            println!("{what}; quick mode leaves out the figures that need it");
        }
    }
    let at = |n: usize, sl: bool| extra.get(&(n, sl)).map_or(f64::NAN, |v| median(v));
    let measured =
        |a: (usize, bool), b: (usize, bool)| !unmeasured.contains(&a) && !unmeasured.contains(&b);
    let mut s = Summary::default();
    if measured((10, false), (10, true)) {
        s.add("tcpdump_10_readers_linux_cpu_over_streamline", at(10, false) / at(10, true), Some(Target::AtLeast(4.0)), format!("CPU of 10 tcpdump readers plus their capture path (system-wide, the sender's own cost taken out) at {pps} packets/s of {size}-byte datagrams: system libpcap over ours"));
    }
    if measured((10, true), (1, true)) {
        s.add(
            "tcpdump_10_vs_1_readers_cpu_streamline",
            at(10, true) / at(1, true),
            Some(Target::AtMost(2.0)),
            "ours: 10 readers' CPU over 1 reader's",
        );
    }
    if measured((1, false), (1, true)) {
        s.add(
            "tcpdump_1_reader_linux_cpu_over_streamline",
            at(1, false) / at(1, true),
            Some(Target::AtLeast(1.5)),
            "one reader: system libpcap over ours",
        );
    }
    s.add(
        "tcpdump_offered_pps",
        pps as f64,
        None,
        format!(
            "the offered rate: {:.0}% of the {max:.0} packets/s the sender keeps alone",
            a.load * 100.0
        ),
    );
    s.print()?;
    Ok(())
}

/// How many of `sent` datagrams (`size` bytes of UDP payload, every 100th to port 7 and the
/// rest to port 9, as [`send_sized`] sends them) the reader filter `f` matches.
fn matching(f: &str, sent: u64, size: usize) -> u64 {
    let to_port7 = sent.div_ceil(100);
    match f {
        "udp dst port 7" => to_port7,
        "udp dst port 9" => sent - to_port7,
        // Ethernet + IPv4 + UDP headers: 42 bytes.
        "len > 60" if size + 42 <= 60 => 0,
        _ => sent,
    }
}

/// The median (the mean of the middle two for an even count).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
