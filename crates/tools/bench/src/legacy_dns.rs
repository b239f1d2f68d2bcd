//! The `legacy-dns` subcommand (issue 18, part 2; thesis 7.3, where BIND served DNS through
//! Streamline at 1.4 times the queries per CPU second): unmodified dnsmasq answering a
//! bounded query load on loopback, plain and under `libslpreload.so`
//! (`STREAMLINE_UDP_PORTS=<port>`), each reception mode (`mmsg`, `ring`) measured.
//!
//! The load (`--load ours`, default): our own generator in this process, a connected UDP socket on 127.0.0.1 that
//! keeps `--window` queries outstanding (one new query per answer) for `--queries` queries
//! or `--secs` seconds, whichever ends first, over 64 names dnsmasq answers from its own
//! configuration (`--host-record`, no upstream, `--no-resolv`). Every answer is checked
//! byte for byte (after the ID) against the first answer to the same name in the plain run;
//! a query unanswered 2 s after the last answer is lost. Lost or differing answers fail the
//! run. `--load dnsperf` runs dnsperf instead (same names, count, window; it checks
//! response codes and counts lost queries, not answer bytes).
//!
//! What counts as dnsmasq's CPU: its threads' run time from /proc/PID/task/*/schedstat
//! (user and system time, ns), plus the machine's softirq time (/proc/stat) over the run:
//! on loopback the receive processing of a datagram runs in softirq context, and a ring
//! capture adds its copy there; the generator's sends cause the same softirq work in both
//! runs, so it is counted in both. The generator's own time is not counted. The headline,
//! `dns_queries_per_cpu_second_streamline_over_linux`, is queries per (dnsmasq + softirq)
//! CPU second under the library's default reception (`mmsg`) over plain;
//! `dns_ring_over_linux` the same for `ring`. Medians of `--reps` rounds taking turns.
//! Needs root (the ring is an AF_PACKET capture).

use crate::capture::cpu_ns;
use crate::proc::kill_with_us;
use crate::util::{err, median, watchdog, Result, Summary, Target};
use std::collections::HashMap;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Queries per run (quick: 5000).
    #[arg(long, default_value_t = 300_000)]
    queries: u64,
    /// Upper bound on a run's length in seconds.
    #[arg(long, default_value_t = 20.0)]
    secs: f64,
    /// Queries kept outstanding.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// Rounds (each configuration once per round; the median counts). Quick: 1.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// libslpreload.so to use (default: beside this executable).
    #[arg(long)]
    lib: Option<PathBuf>,
    /// Load generator: `ours` (checks every answer byte for byte) or `dnsperf` (the
    /// DNS-OARC tool: one client, one thread, the same window; counts lost answers).
    #[arg(long, default_value = "ours")]
    load: String,
}

/// The same load from dnsperf: `queries` queries over the 64 names, `window` outstanding.
fn load_dnsperf(
    port: u16,
    pid: u32,
    queries: u64,
    secs: f64,
    window: usize,
    dir: &std::path::Path,
) -> Result<RunResult> {
    let file = dir.join("queries.txt");
    let text: String = (0..NAMES).map(|i| format!("{} A\n", name(i))).collect();
    std::fs::write(&file, text).map_err(|e| err(format!("{}: {e}", file.display())))?;
    let runs = queries.div_ceil(NAMES as u64);
    let c0 = cpu_ns(pid);
    let q0 = softirq_s();
    let t0 = Instant::now();
    let mut cmd = Command::new("dnsperf");
    cmd.args(["-s", "127.0.0.1", "-c", "1", "-T", "1"])
        .args([
            "-p",
            &port.to_string(),
            "-q",
            &window.to_string(),
            "-n",
            &runs.to_string(),
            "-l",
            &format!("{secs}"),
        ])
        .arg("-d")
        .arg(&file);
    kill_with_us(&mut cmd);
    let out = cmd
        .output()
        .map_err(|e| err(format!("running dnsperf (apt-get install dnsperf): {e}")))?;
    let wall = t0.elapsed().as_secs_f64();
    let c1 = cpu_ns(pid);
    let q1 = softirq_s();
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix(k)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .ok_or_else(|| err(format!("dnsperf printed no `{k}`:\n{text}")))
    };
    let (sent, done, lost) = (
        field("Queries sent:")?,
        field("Queries completed:")?,
        field("Queries lost:")?,
    );
    Ok(RunResult {
        answered: done,
        lost: lost + sent.saturating_sub(done + lost),
        wrong: 0,
        wall,
        dnsmasq_cpu: (c1 - c0) as f64 / 1e9,
        softirq: q1 - q0,
    })
}

const NAMES: usize = 64;

fn name(i: usize) -> String {
    format!("h{i}.bench.test")
}

/// A DNS query (RD set) for `name`, type A, with `id`.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(40);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in name.split('.') {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

fn free_port() -> Result<u16> {
    // A port both UDP and TCP are free on (dnsmasq listens on both).
    for _ in 0..50 {
        let u = UdpSocket::bind("127.0.0.1:0").map_err(|e| err(format!("udp socket: {e}")))?;
        let p = u.local_addr().map_err(|e| err(format!("{e}")))?.port();
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return Ok(p);
        }
    }
    Err(err("no free port on 127.0.0.1"))
}

struct Dnsmasq {
    child: Child,
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        // SIGTERM: dnsmasq exits cleanly (the library then writes its counters).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Mean datagrams per `recvmmsg` and per `sendmmsg` from the library's counters file.
fn batches(stats: &std::path::Path) -> Option<(f64, f64)> {
    let s = std::fs::read_to_string(stats).ok()?;
    let line = s.lines().last()?;
    let v = |k: &str| -> Option<f64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
    };
    Some((
        v("rx_datagrams")? / v("rx_batches")?.max(1.0),
        v("tx_datagrams")? / v("tx_batches")?.max(1.0),
    ))
}

fn start_dnsmasq(
    port: u16,
    preload: Option<(&PathBuf, &str, &std::path::Path)>,
) -> Result<Dnsmasq> {
    let mut cmd = Command::new("dnsmasq");
    cmd.args([
        "-k",
        "--no-resolv",
        "--no-hosts",
        "--bind-interfaces",
        "--listen-address=127.0.0.1",
        "--user=root",
        "--pid-file=",
        "--log-facility=-",
    ]);
    cmd.arg(format!("--port={port}"));
    for i in 0..NAMES {
        cmd.arg(format!(
            "--host-record={},10.77.{}.{}",
            name(i),
            i / 256,
            i % 256 + 1
        ));
    }
    cmd.env_remove("LD_PRELOAD")
        .env_remove("STREAMLINE_UDP_PORTS")
        .env_remove("STREAMLINE_UDP_RX");
    if let Some((lib, mode, stats)) = preload {
        cmd.env("LD_PRELOAD", lib)
            .env("STREAMLINE_UDP_PORTS", port.to_string())
            .env("STREAMLINE_UDP_RX", mode)
            .env("STREAMLINE_UDP_STATS", stats);
    }
    kill_with_us(&mut cmd);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            err(format!(
                "starting dnsmasq (apt-get install dnsmasq-base): {e}"
            ))
        })?;
    let d = Dnsmasq { child };
    // Ready when it answers.
    let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| err(format!("{e}")))?;
    s.connect(("127.0.0.1", port))
        .map_err(|e| err(format!("{e}")))?;
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| err(format!("{e}")))?;
    let mut buf = [0u8; 512];
    for _ in 0..50 {
        let _ = s.send(&query(1, &name(0)));
        match s.recv(&mut buf) {
            Ok(_) => return Ok(d),
            // Not listening yet (ICMP port unreachable): a refused recv returns at once.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(_) => {}
        }
    }
    Err(err(format!(
        "dnsmasq on port {port} did not answer within 5 s"
    )))
}

/// Softirq time of the machine so far, seconds (/proc/stat).
fn softirq_s() -> f64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    s.lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(7))
        .and_then(|x| x.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 100.0
}

struct RunResult {
    answered: u64,
    lost: u64,
    wrong: u64,
    wall: f64,
    dnsmasq_cpu: f64,
    softirq: f64,
}

impl RunResult {
    fn qpcs(&self) -> f64 {
        self.answered as f64 / (self.dnsmasq_cpu + self.softirq)
    }
}

/// One load run against dnsmasq on `port`; `reference` holds the expected answer (after
/// the ID) per name, filled by the first run.
fn load(
    port: u16,
    pid: u32,
    queries: u64,
    secs: f64,
    window: usize,
    reference: &mut HashMap<usize, Vec<u8>>,
) -> Result<RunResult> {
    let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| err(format!("{e}")))?;
    s.connect(("127.0.0.1", port))
        .map_err(|e| err(format!("{e}")))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| err(format!("{e}")))?;
    let names: Vec<String> = (0..NAMES).map(name).collect();
    let mut outstanding: HashMap<u16, usize> = HashMap::new();
    let (mut sent, mut answered, mut wrong) = (0u64, 0u64, 0u64);
    let mut buf = [0u8; 1500];
    let c0 = cpu_ns(pid);
    let q0 = softirq_s();
    let t0 = Instant::now();
    let send_one = |sent: &mut u64, outstanding: &mut HashMap<u16, usize>| -> Result<()> {
        let id = (*sent % 65536) as u16;
        let n = (*sent as usize * 7) % NAMES;
        s.send(&query(id, &names[n]))
            .map_err(|e| err(format!("send: {e}")))?;
        outstanding.insert(id, n);
        *sent += 1;
        Ok(())
    };
    while sent < queries && (sent as usize) < window {
        send_one(&mut sent, &mut outstanding)?;
    }
    while !outstanding.is_empty() {
        let n = match s.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) => return Err(err(format!("recv: {e}"))),
        };
        if n < 12 {
            wrong += 1;
            continue;
        }
        let id = u16::from_be_bytes([buf[0], buf[1]]);
        let Some(which) = outstanding.remove(&id) else {
            wrong += 1;
            continue;
        };
        answered += 1;
        let body = &buf[2..n];
        match reference.get(&which) {
            Some(r) if r.as_slice() != body => wrong += 1,
            Some(_) => {}
            None => {
                reference.insert(which, body.to_vec());
            }
        }
        if sent < queries && t0.elapsed().as_secs_f64() < secs {
            send_one(&mut sent, &mut outstanding)?;
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let c1 = cpu_ns(pid);
    let q1 = softirq_s();
    Ok(RunResult {
        answered,
        lost: outstanding.len() as u64,
        wrong,
        wall,
        dnsmasq_cpu: (c1 - c0) as f64 / 1e9,
        softirq: q1 - q0,
    })
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(900));
    let lib = match &a.lib {
        Some(l) => l.clone(),
        None => std::env::current_exe()
            .map_err(|e| err(format!("own executable: {e}")))?
            .with_file_name("libslpreload.so"),
    };
    if !lib.is_file() {
        return Err(err(format!(
            "{} not found; build it with `cargo build --release -p preload`",
            lib.display()
        )));
    }
    let queries = if quick { 5000 } else { a.queries };
    let reps = if quick { 1 } else { a.reps.max(1) };
    let secs = if quick { 5.0 } else { a.secs };
    // ring needs CAP_NET_RAW; without root only mmsg is measured.
    let root = crate::streamlined::euid()? == 0;
    if !root {
        return Err(err("this benchmark must run as root: it measures the ring reception too, an AF_PACKET capture (CAP_NET_RAW)"));
    }
    let configs: Vec<(&str, Option<&str>)> = vec![
        ("linux", None),
        ("mmsg", Some("mmsg")),
        ("ring", Some("ring")),
    ];
    println!("dnsmasq on 127.0.0.1, {queries} queries per run (at most {secs} s), {} outstanding, {reps} rounds, load from {}", a.window, a.load);
    println!(
        "{:<8} {:>5} {:>9} {:>6} {:>6} {:>8} {:>10} {:>10} {:>12} {:>12} {:>7} {:>7}",
        "config",
        "round",
        "answered",
        "lost",
        "wrong",
        "wall s",
        "dnsmasq s",
        "softirq s",
        "q/cpu-s",
        "q/dnsmasq-s",
        "rx/call",
        "tx/call"
    );
    let tmp = crate::util::TempDir::new("legacy-dns")?;
    let mut reference = HashMap::new();
    let mut per: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut per_own: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut bad = Vec::new();
    for round in 0..reps {
        for &(label, mode) in &configs {
            let port = free_port()?;
            let stats = tmp.path().join(format!("{label}-{round}.stats"));
            let d = start_dnsmasq(port, mode.map(|m| (&lib, m, stats.as_path())))?;
            let r = match a.load.as_str() {
                "ours" => load(port, d.child.id(), queries, secs, a.window, &mut reference)?,
                "dnsperf" => load_dnsperf(port, d.child.id(), queries, secs, a.window, tmp.path())?,
                o => return Err(err(format!("--load {o}: expected `ours` or `dnsperf`"))),
            };
            drop(d);
            let (mut rxb, txb) = batches(&stats)
                .map(|(a, b)| (format!("{a:.1}"), format!("{b:.1}")))
                .unwrap_or(("-".into(), "-".into()));
            if label == "ring" {
                // Read from the ring without calls (recvmmsg only for datagrams too large for it).
                rxb = "ring".into();
            }
            println!(
                "{label:<8} {round:>5} {:>9} {:>6} {:>6} {:>8.2} {:>10.3} {:>10.2} {:>12.0} {:>12.0} {rxb:>7} {txb:>7}",
                r.answered,
                r.lost,
                r.wrong,
                r.wall,
                r.dnsmasq_cpu,
                r.softirq,
                r.qpcs(),
                r.answered as f64 / r.dnsmasq_cpu
            );
            per_own
                .entry(label)
                .or_default()
                .push(r.answered as f64 / r.dnsmasq_cpu);
            if r.lost != 0 || r.wrong != 0 {
                bad.push(format!(
                    "{label} round {round}: {} lost, {} wrong answers",
                    r.lost, r.wrong
                ));
            }
            per.entry(label).or_default().push(r.qpcs());
        }
    }
    // Counts before figures: a run that lost or garbled answers prints no ratio.
    if !bad.is_empty() {
        return Err(err(format!(
            "answers lost or wrong (no figure printed): {}",
            bad.join("; ")
        )));
    }
    let lin = median(&per.remove("linux").unwrap_or_default());
    let mm = median(&per.remove("mmsg").unwrap_or_default());
    let ring = median(&per.remove("ring").unwrap_or_default());
    println!("\nmedian queries per CPU second: linux {lin:.0}, mmsg {mm:.0}, ring {ring:.0}");
    let mut s = Summary::default();
    s.add(
        "dns_queries_per_cpu_second_streamline_over_linux",
        mm / lin,
        Some(Target::AtLeast(1.4)),
        "default reception (mmsg), dnsmasq + softirq CPU",
    );
    s.add(
        "dns_ring_over_linux",
        ring / lin,
        None,
        "STREAMLINE_UDP_RX=ring",
    );
    let own = |k: &str| median(&per_own.get(k).cloned().unwrap_or_default());
    s.add(
        "dns_dnsmasq_only_mmsg_over_linux",
        own("mmsg") / own("linux"),
        None,
        "dnsmasq's own CPU, no softirq",
    );
    s.add(
        "dns_dnsmasq_only_ring_over_linux",
        own("ring") / own("linux"),
        None,
        "dnsmasq's own CPU, no softirq",
    );
    s.print()?;
    Ok(())
}
