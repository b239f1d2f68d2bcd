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
//! readers' cost never throttles it and no reader drops. CPU is measured by
//! [`crate::meter`]: the CPU time charged to the sending thread (the kernel's per-socket
//! copies and filters run in its system calls and the softirqs they raise), the readers,
//! the daemon and its workers, and the softirq threads, in windows interleaved with the
//! sender alone (A B1 A B2 ... A, at least `--reps` rounds, more until every median is
//! settled); a configuration's extra CPU is its window's minus the sender alone's per
//! packet sent around it, per packet sent. A median that cannot be told from noise fails a
//! full run. Beside it, the thesis' measure of wake-ups: context switches (voluntary and
//! not, from /proc) of every reader thread, and on ours of the daemon and its workers, over
//! the window, per 1000 packets sent. Needs root.

use crate::meter::{median, Budget, Meter, Sample, Window};
use crate::proc::kill_with_us;
use crate::traffic::{max_rate, veth};
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds of traffic per window.
    #[arg(long, default_value_t = 2.0)]
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

/// What a configuration's window saw: each reader's (captured, dropped), and the context
/// switches over the window of the readers' threads and (on ours; 0 on the system's
/// libpcap, where they idle and are not its cost) of the daemon's and its workers'.
type Seen = (Vec<(u64, u64)>, u64, u64);

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

/// What the steps of the legacy benchmark share: the veth pair and its addresses, our
/// libpcap's directory, our daemon, the meter and the traffic offered.
struct Rig {
    /// Our daemon (declared first: it goes before the pair).
    daemon: crate::streamlined::Daemon,
    /// The pair: `here_ip` our end's address, `peer_ip` the far end's, `here` our device.
    v: kernel::netns::Veth,
    /// The directory of our libpcap (`streamline compat --print-dir`).
    compat: String,
    daemon_pid: u32,
    m: Meter,
    /// Datagrams per second offered, seconds per window, UDP payload bytes.
    pps: u64,
    secs: f64,
    size: usize,
    /// The most the sender keeps alone.
    max: f64,
    /// Reader k's filter is the k-th (cycled).
    filters: [String; 10],
}

/// After the sending, longer than tcpdump's 1000 ms block timeout: what was sent is read
/// inside the window.
const DRAIN: Duration = Duration::from_millis(1100);

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(1500));
    if crate::streamlined::euid()? != 0 {
        return Err(err(
            "this benchmark must run as root: it makes a veth pair and captures on it",
        ));
    }
    crate::meter::favour()?;
    let dir = TempDir::new("legacy")?;
    let rig = setup(a, quick, &dir)?;
    let configs = configs(a, quick);
    let names: Vec<String> = configs
        .iter()
        .map(|&(n, sl)| format!("{n}/{}", side(sl)))
        .collect();
    // The daemon and the workers it starts on the readers' CPUs, as the readers.
    crate::meter::move_to_capture_cpus(rig.daemon_pid)?;
    println!("{}", rig.m.describe());
    println!("(the daemon and its workers are charged in every window, the sender alone's too: idle on the system's libpcap)");
    println!("each round: the sender alone, then each configuration followed by the sender alone again (A B1 A B2 ... A); a configuration's extra CPU is its window's minus the sender alone's per packet sent (the two windows around it) times its packets sent, per packet sent");
    println!("\nextra CPU of readers and capture path per packet sent (ns), per round (readers/libpcap):");
    let reps = if quick { 1 } else { a.reps.max(1) };
    let budget = Budget {
        min_rounds: reps,
        max_rounds: if quick { 1 } else { reps.max(15) },
        time: Duration::from_secs_f64(if quick {
            0.0
        } else {
            configs.len() as f64 * 40.0
        }),
    };
    let r = &rig;
    let all = crate::meter::interleave(
        &names,
        &budget,
        || {
            crate::meter::window(
                &r.m,
                &r.v.here_ip,
                &r.v.peer_ip,
                r.pps,
                r.secs,
                r.size,
                1,
                &[r.daemon_pid],
                DRAIN,
            )
        },
        |k| readers_window(r, configs[k]),
        |k, w, totals| check_readers(r, configs[k], w, totals),
    )?;
    let at = table(&rig, &configs, &all, quick)?;
    figures(&rig, a, &at, all[0].len())
}

/// Our libpcap's directory, the veth pair, our daemon (its files in `dir`) and the offered
/// rate, printed.
fn setup(a: &Args, quick: bool, dir: &TempDir) -> Result<Rig> {
    let (streamlined, streamline) = crate::streamlined::binaries()?;
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
    cleanup_on_abnormal_exit(&[
        &dir.path().join("control"),
        &dir.path().join("streamlined.log"),
        dir.path(),
    ]);
    let daemon = crate::streamlined::Daemon::start(&streamlined, dir.path(), None)?;

    let size = a.size.clamp(18, 1472);
    let max = max_rate(&here, &peer, if quick { 0.5 } else { 1.0 }, size)?;
    let pps = ((max * a.load) as u64).max(1000);
    let reps = if quick { 1 } else { a.reps.max(1) };
    println!("streamline-bench legacy ({} mode): tcpdump readers on veth {dev}, {secs} s per configuration, {reps} round(s)", if quick { "quick" } else { "full" });
    println!("sender alone keeps {max:.0} packets/s ({size}-byte UDP payloads); offering {pps} packets/s ({:.0}% of it, {:.0} Mbit/s)", a.load * 100.0, pps as f64 * (size + 42) as f64 * 8.0 / 1e6);
    let daemon_pid = daemon.child.as_ref().map_or(0, |c| c.id());
    println!(
        "our libpcap: {compat}/libpcap.so.0.8; our daemon: {} (pid {daemon_pid})",
        streamlined.display(),
    );
    let filters = filters(&here, &peer);
    println!(
        "filters (reader k has the k-th): {}",
        filters
            .iter()
            .map(|f| format!("'{f}'"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Rig {
        daemon,
        v,
        compat,
        daemon_pid,
        m: Meter::new(),
        pps,
        secs,
        size,
        max,
        filters,
    })
}

/// The readers' filters: reader k has the k-th.
fn filters(here: &str, peer: &str) -> [String; 10] {
    [
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
    ]
}

/// The configurations: (readers, on ours?), each reader count on both sides (or the one
/// `--only` names).
fn configs(a: &Args, quick: bool) -> Vec<(usize, bool)> {
    let counts: &[usize] = if !a.readers.is_empty() {
        &a.readers
    } else if quick {
        &[1, 10]
    } else {
        &[1, 2, 5, 10]
    };
    counts
        .iter()
        .flat_map(|&n| [(n, false), (n, true)])
        .filter(|&(_, sl)| a.only.as_deref().is_none_or(|o| o == side(sl)))
        .collect()
}

fn side(sl: bool) -> &'static str {
    if sl {
        "streamline"
    } else {
        "linux"
    }
}

/// One configuration's window: `n` tcpdump readers started (on our libpcap and daemon or
/// the system's), the traffic sent and measured, the readers stopped; their totals.
fn readers_window(r: &Rig, (n, on_streamline): (usize, bool)) -> Result<(Window, Seen)> {
    let mut readers = Vec::new();
    for f in r.filters.iter().cycle().take(n) {
        let mut c = Command::new("tcpdump");
        c.args(["-Z", "root", "-n", "-i", &r.v.here, "-w", "/dev/null", f]);
        if on_streamline {
            c.env("LD_LIBRARY_PATH", &r.compat)
                .env("STREAMLINE_SOCKET", &r.daemon.socket);
        }
        readers.push(start_reader(crate::meter::on_capture_cpus(c))?);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut roots: Vec<u32> = readers.iter().map(|r| r.child.id()).collect();
    let switches = |roots: &[u32]| {
        let capture = if on_streamline {
            crate::meter::tree_switches(&[r.daemon_pid])
        } else {
            0
        };
        (crate::meter::tree_switches(roots), capture)
    };
    let s0 = switches(&roots);
    roots.push(r.daemon_pid);
    let measured = crate::meter::window(
        &r.m,
        &r.v.here_ip,
        &r.v.peer_ip,
        r.pps,
        r.secs,
        r.size,
        1,
        &roots,
        DRAIN,
    );
    let s1 = switches(&roots[..n]);
    let totals: Vec<(u64, u64)> = readers.into_iter().map(stop_reader).collect();
    // Let a shared capture whose readers all left stop before the next window.
    std::thread::sleep(Duration::from_millis(500));
    let w = measured?;
    if w.took > r.secs * 1.15 {
        println!(
            "(the sender kept only {:.0} of {} packets/s here)",
            w.sent as f64 / w.took,
            r.pps
        );
    }
    Ok((
        w,
        (totals, s1.0.saturating_sub(s0.0), s1.1.saturating_sub(s0.1)),
    ))
}

/// Every reader saw (captured or had dropped) what its filter matches of what was sent,
/// on either libpcap; a reader that missed packets would make its side look cheaper than
/// it is. Returns the packets the figure is per: those sent, the same traffic for every
/// configuration.
fn check_readers(
    r: &Rig,
    (n, on_streamline): (usize, bool),
    w: &Window,
    seen: &Seen,
) -> Result<u64> {
    let totals = &seen.0;
    for (i, (f, t)) in r.filters.iter().cycle().zip(totals).enumerate() {
        let want = matching(f, w.sent, r.size);
        // Captured, plus what the kernel took for it but it did not read (dropped,
        // or still in its ring when stopped).
        let got = t.0 + t.1;
        // Stray frames (ARP, IPv6 neighbour discovery) match the broad filters.
        if got < want || got > want + want / 100 + 20 {
            return Err(err(format!(
                "{} libpcap, {n} readers: reader {i} ('{f}') saw {got} packets ({} captured, {} dropped or unread) where its filter matches {want} of the {} sent",
                if on_streamline { "our" } else { "the system's" },
                t.0,
                t.1,
                w.sent
            )));
        }
    }
    Ok(w.sent)
}

/// The table of every configuration's extra CPU (median and standard error), and those
/// that can be told from noise: (readers, on ours?) -> ns per packet sent. A configuration
/// whose extra CPU cannot be told from the sender's own noise gives no ratio: a full run
/// fails naming it; a quick run (a smoke test) says so and leaves out the figures that
/// need it.
fn table(
    r: &Rig,
    configs: &[(usize, bool)],
    all: &[Vec<Sample<Seen>>],
    quick: bool,
) -> Result<Figures> {
    println!(
        "\n{:<7} {:<11} {:>14} {:>10} {:>12} {:>12} {:>10} {:>12}",
        "readers", "libpcap", "ns/pkt", "+-", "% of a CPU", "own ns/pkt", "captured", "dropped"
    );
    let mut at = BTreeMap::new();
    let mut unmeasured = Vec::new();
    for (k, &(n, sl)) in configs.iter().enumerate() {
        let s = &all[k];
        let xs: Vec<f64> = s.iter().map(|x| x.extra_ns).collect();
        let v = crate::meter::Verdict::of(&xs);
        let own = median(&s.iter().map(|x| x.own_ns).collect::<Vec<_>>());
        let captured: u64 = s.iter().flat_map(|x| x.data.0.iter()).map(|t| t.0).sum();
        let dropped: u64 = s.iter().flat_map(|x| x.data.0.iter()).map(|t| t.1).sum();
        println!(
            "{n:<7} {:<11} {:>14.0} {:>10.0} {:>11.1}% {:>12.0} {:>10} {:>12}   rounds: {}; machine-wide busy {:.0}",
            side(sl),
            v.ns,
            v.se,
            v.ns * r.pps as f64 / 1e9 * 100.0,
            own,
            captured,
            dropped,
            xs.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" "),
            median(&s.iter().map(|x| x.extra_busy_ns).collect::<Vec<_>>())
        );
        if v.resolved() {
            at.insert((n, sl), v.ns);
        } else {
            unmeasured.push(format!(
                "{n} readers on {} libpcap: extra CPU {:.0} ns per packet sent, standard error {:.0} over {} rounds ({})",
                if sl { "our" } else { "the system's" },
                v.ns,
                v.se,
                xs.len(),
                xs.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    if !unmeasured.is_empty() && quick && all.iter().all(|s| s.len() < 2) {
        println!("quick mode: one round gives no estimate of the noise; the ratios are left out");
    } else if !unmeasured.is_empty() {
        let what = format!(
            "cannot be told from the sender's own noise (too noisy to measure): {}",
            unmeasured.join("; ")
        );
        if !quick {
            return Err(err(what));
        }
        println!("{what}; quick mode leaves out the figures that need it");
    }
    Ok(Figures {
        cpu: at,
        switches: switches(configs, all),
    })
}

/// What the SUMMARY is made of: per (readers, on ours?), the extra CPU per packet sent
/// (those told from noise) and the context switches per 1000 packets sent.
struct Figures {
    cpu: BTreeMap<(usize, bool), f64>,
    switches: BTreeMap<(usize, bool), f64>,
}

/// The thesis' own measure of wake-ups (7.5: 77,000 switches on Linux against 4,400):
/// context switches per 1000 packets sent (every reader captures what its filter
/// matches of them), median over the rounds, printed.
fn switches(configs: &[(usize, bool)], all: &[Vec<Sample<Seen>>]) -> BTreeMap<(usize, bool), f64> {
    println!("\ncontext switches per 1000 packets sent (voluntary and not, every thread of the readers; on ours also the daemon and its workers), median and per round:");
    println!(
        "{:<7} {:<11} {:>10} {:>10} {:>10}",
        "readers", "libpcap", "all", "readers", "capture"
    );
    let mut out = BTreeMap::new();
    for (k, &(n, sl)) in configs.iter().enumerate() {
        let per = |f: &dyn Fn(&Seen) -> u64| {
            let v: Vec<f64> = all[k]
                .iter()
                .map(|x| f(&x.data) as f64 * 1000.0 / x.w.sent.max(1) as f64)
                .collect();
            (median(&v), v)
        };
        let (m, rounds) = per(&|d| d.1 + d.2);
        println!(
            "{n:<7} {:<11} {m:>10.1} {:>10.1} {:>10.1}   rounds: {}",
            side(sl),
            per(&|d| d.1).0,
            per(&|d| d.2).0,
            rounds
                .iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        out.insert((n, sl), m);
    }
    out
}

/// The SUMMARY: the ratios between configurations measured (`rounds`: of the first).
fn figures(r: &Rig, a: &Args, f: &Figures, rounds: usize) -> Result<()> {
    let (pps, size, max) = (r.pps, r.size, r.max);
    let at = &f.cpu;
    let ratio = |x: (usize, bool), y: (usize, bool)| Some(at.get(&x)? / at.get(&y)?);
    let mut s = Summary::default();
    if let Some(r) = ratio((10, false), (10, true)) {
        s.add("tcpdump_10_readers_linux_cpu_over_streamline", r, Some(Target::AtLeast(4.0)), format!("CPU of 10 tcpdump readers plus their capture path (sender, readers, daemon, softirq; the sender alone's cost per packet taken out; median of {rounds} interleaved rounds) at {pps} packets/s of {size}-byte datagrams: system libpcap over ours"));
    }
    if let Some(r) = ratio((10, true), (1, true)) {
        s.add(
            "tcpdump_10_vs_1_readers_cpu_streamline",
            r,
            Some(Target::AtMost(2.0)),
            "ours: 10 readers' CPU over 1 reader's",
        );
    }
    if let Some(r) = ratio((1, false), (1, true)) {
        s.add(
            "tcpdump_1_reader_linux_cpu_over_streamline",
            r,
            Some(Target::AtLeast(1.5)),
            "one reader: system libpcap over ours",
        );
    }
    for (&(n, sl), &v) in &f.switches {
        let readers = if n == 1 {
            "1_reader".to_string()
        } else {
            format!("{n}_readers")
        };
        s.add(
            &format!("tcpdump_{readers}_ctxsw_per_1000_pkts_{}", side(sl)),
            v,
            None,
            format!(
                "context switches per 1000 packets sent, {n} reader(s) on {} libpcap (readers' threads{}; median of {rounds} rounds)",
                if sl { "our" } else { "the system's" },
                if sl { ", the daemon and its workers" } else { "" }
            ),
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
/// rest to port 9, as [`crate::traffic::send_sized`] sends them) the reader filter `f` matches.
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
