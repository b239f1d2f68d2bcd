//! `streamline-bench net`: streams between hosts (issue 21), on a veth pair between our
//! namespace and one this benchmark creates, and on loopback.
//!
//! - **Lossless channel vs iperf3.** iperf3 TCP (`-c` here, `-s` in the namespace) for a
//!   few seconds gives the link's rate; then `gen size=64K | netout` here into
//!   `netin | null` there moves as many bytes as iperf3 moved in that time, timed from the
//!   sender's start to its end (it ends when the receiver has taken every frame). Both
//!   payload bytes per second; alternated, best of each. Headline:
//!   `net_channel_tcp_vs_iperf3` (veth), with loopback beside it.
//! - **Seed 002's application across hosts.** Compress and encrypt over UDP: here
//!   `file | deflate | encrypt | netout proto=udp`, there `netin proto=udp | decrypt |
//!   inflate | null`, with one engine per side (every filter in one space) and with two
//!   (each side's heavy filter, deflate and inflate, copied onto spaces pinned to both
//!   CPUs; two UDP queues each side, the receiver's spread by the kernel's flow hash over
//!   its `SO_REUSEPORT` sockets).
//!   Both "hosts" share this machine's CPUs, so N engines a side means the application
//!   gets N CPUs: with one, both sides run confined to CPU 0 (taskset); with two, each
//!   side's copies are pinned to CPUs 0 and 1. (Unconfined, one engine a side already
//!   uses two CPUs, one per side, and two a side can only win the receiver's idle share.)
//!   The input is the sample capture repeated (real packet bytes, not a pattern). Rate:
//!   original bytes delivered (inflated at the receiver; datagrams lost do not count) per
//!   second from the sender's start to the receiver's end. Headline:
//!   `compress_encrypt_udp_2_engines_vs_1`.
//! - The figures of `batching` (seed 002's Algorithms 1-2) and `kafka` (kafkaout and
//!   kafkain against kcat on one real broker) are taken in the same run.

use crate::util::{err, watchdog, Result, Summary, Target, TempDir};
use kernel::netns::Veth;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {}

/// A child killed (SIGKILL) and reaped when dropped, however the benchmark ends.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Guard {
    /// Wait for the child up to `limit`; its output (stdout and stderr drained).
    fn wait(&mut self, limit: Duration, what: &str) -> Result<(Output, Instant)> {
        let mut c = self.0.take().ok_or_else(|| err("waited twice"))?;
        let (mut so, mut se) = (c.stdout.take(), c.stderr.take());
        let out = std::thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(s) = so.as_mut() {
                let _ = s.read_to_end(&mut b);
            }
            b
        });
        let errs = std::thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(s) = se.as_mut() {
                let _ = s.read_to_end(&mut b);
            }
            b
        });
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = c.try_wait().map_err(|e| err(format!("{what}: {e}")))? {
                break st;
            }
            if t0.elapsed() > limit {
                let _ = c.kill();
                let _ = c.wait();
                return Err(err(format!("{what} did not finish within {limit:?}")));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let end = Instant::now();
        let o = Output {
            status,
            stdout: out.join().unwrap_or_default(),
            stderr: errs.join().unwrap_or_default(),
        };
        Ok((o, end))
    }
}

fn spawn(mut c: Command, what: &str) -> Result<Guard> {
    crate::proc::kill_with_us(&mut c);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(|c| Guard(Some(c)))
        .map_err(|e| err(format!("{what}: {e}")))
}

/// The veth pair, quiet: no IPv6 chatter on either end.
fn veth() -> Result<Veth> {
    let v = Veth::new("bnet").map_err(|e| err(format!("{e} (the net benchmark needs root)")))?;
    crate::traffic::ipv6_off(&v)?;
    // The far end must really be in the namespace: a route to it through our end.
    let o = Command::new("ip")
        .args(["-o", "link", "show", &v.there])
        .output()
        .map_err(|e| err(format!("ip: {e}")))?;
    if o.status.success() {
        return Err(err(format!(
            "{} is in our namespace, not in {}",
            v.there, v.ns
        )));
    }
    std::thread::sleep(Duration::from_millis(300));
    Ok(v)
}

/// Where a peer runs: in the namespace (veth) or here (loopback).
#[derive(Clone, Copy)]
enum Link<'a> {
    Veth(&'a Veth),
    Loopback,
}

impl Link<'_> {
    fn command(&self, program: &Path) -> Command {
        match self {
            Link::Veth(v) => v.command(program.to_str().unwrap_or("")),
            Link::Loopback => Command::new(program),
        }
    }
    /// `program` on the peer's side, confined to `cpus` (taskset's list) if given.
    fn command_on(&self, program: &Path, cpus: Option<&str>) -> Command {
        match cpus {
            None => self.command(program),
            Some(c) => {
                let mut cmd = self.command(Path::new("taskset"));
                cmd.args(["-c", c]).arg(program);
                cmd
            }
        }
    }
    /// The receiver's address.
    fn peer(&self) -> String {
        match self {
            Link::Veth(v) => v.peer_ip.clone(),
            Link::Loopback => "127.0.0.1".into(),
        }
    }
    fn name(&self) -> &'static str {
        match self {
            Link::Veth(_) => "veth",
            Link::Loopback => "loopback",
        }
    }
}

/// iperf3 TCP for `secs` over `link`: the receiver's payload bytes per second, and bytes.
fn iperf3(link: Link<'_>, port: u16, secs: f64) -> Result<(f64, f64)> {
    let mut srv = link.command(Path::new("iperf3"));
    srv.args([
        "-s",
        "-1",
        "--forceflush",
        "-B",
        &link.peer(),
        "-p",
        &port.to_string(),
    ]);
    let mut srv = spawn(
        srv,
        "iperf3 -s (is iperf3 installed? scripts/setup installs it)",
    )?;
    let out = srv
        .0
        .as_mut()
        .and_then(|c| c.stdout.take())
        .ok_or_else(|| err("iperf3 -s: no stdout"))?;
    let mut r = BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).map_err(|e| err(e.to_string()))? == 0 {
            return Err(err("iperf3 -s ended before it listened"));
        }
        if line.contains("Server listening") {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
    let mut c = Command::new("iperf3");
    c.args([
        "-c",
        &link.peer(),
        "-p",
        &port.to_string(),
        "-t",
        &format!("{secs}"),
        "-J",
    ]);
    let (o, _) =
        spawn(c, "iperf3 -c")?.wait(Duration::from_secs_f64(secs * 3.0 + 20.0), "iperf3 -c")?;
    let j: Value = serde_json::from_slice(&o.stdout).map_err(|e| {
        err(format!(
            "iperf3 -J: {e}: {}",
            String::from_utf8_lossy(&o.stderr)
        ))
    })?;
    if let Some(e) = j.get("error") {
        return Err(err(format!("iperf3: {e}")));
    }
    let r = &j["end"]["sum_received"];
    let (bytes, s) = (
        r["bytes"].as_f64().unwrap_or(0.0),
        r["seconds"].as_f64().unwrap_or(0.0),
    );
    if s <= 0.0 {
        return Err(err("iperf3 reported no received bytes"));
    }
    Ok((bytes / s, bytes))
}

/// A receiver (`rx`, a pipeline starting with netin, over `link`) and a sender (`tx`,
/// here); returns both outputs and the seconds from the sender's start to the sender's
/// end and to the receiver's end.
fn pair(
    bin: &Path,
    link: Link<'_>,
    rx: &str,
    tx: &str,
    cpus: Option<&str>,
    limit: Duration,
) -> Result<(Output, Output, f64, f64)> {
    let mut r = link.command_on(bin, cpus);
    // Not -q: the summary table's rows are what some figures read.
    r.args(["--socket", "none", "run", "--plan", "none", rx]);
    let mut rxg = spawn(r, "the receiving streamline")?;
    // netout waits (wait=10) for the receiver to listen.
    let mut t = Link::Loopback.command_on(bin, cpus);
    t.args(["--socket", "none", "run", "-q", "--plan", "none", tx]);
    let t0 = Instant::now();
    let (to, tend) = spawn(t, "the sending streamline")?.wait(limit, "the sender")?;
    let (ro, rend) = rxg.wait(limit, "the receiver")?;
    for (o, what, p) in [(&to, "sender", tx), (&ro, "receiver", rx)] {
        if !o.status.success() {
            return Err(err(format!(
                "the {what} `{p}` failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            )));
        }
    }
    Ok((
        to,
        ro,
        (tend - t0).as_secs_f64(),
        (rend.max(tend) - t0).as_secs_f64(),
    ))
}

/// The number before `word` in the line of `text` starting with `who`.
fn number(text: &str, who: &str, word: &str) -> Result<u64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(who))
        .ok_or_else(|| err(format!("no `{who}` line in: {text}")))?;
    let w: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    let at = w
        .iter()
        .position(|x| *x == word)
        .filter(|&i| i > 0)
        .ok_or_else(|| err(format!("no `{word}` in `{line}`")))?;
    w[at - 1]
        .parse()
        .map_err(|_| err(format!("no number before `{word}` in `{line}`")))
}

fn free_port() -> Result<u16> {
    let l =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| err(format!("tcp socket: {e}")))?;
    Ok(l.local_addr().map_err(|e| err(e.to_string()))?.port())
}

/// Our lossless channel against iperf3 on `link`: (ours, iperf3) in bytes per second.
fn tcp_vs_iperf3(bin: &Path, link: Link<'_>, secs: f64, reps: usize) -> Result<(f64, f64)> {
    let (mut best_ours, mut best_iperf) = (0f64, 0f64);
    for rep in 0..reps {
        let (rate, bytes) = iperf3(link, free_port()?, secs)?;
        best_iperf = best_iperf.max(rate);
        let block = 64u64 << 10;
        let blocks = (bytes as u64 / block).max(1000);
        let port = free_port()?;
        let (to, ro, t, _) = pair(
            bin,
            link,
            &format!("netin port={port} bind={} | null", link.peer()),
            &format!(
                "gen count={blocks} size=64K | netout to={}:{port} wait=10",
                link.peer()
            ),
            None,
            Duration::from_secs_f64(secs * 10.0 + 30.0),
        )?;
        let got = number(&String::from_utf8_lossy(&ro.stderr), "netin: ", "bytes")?;
        let sent = number(&String::from_utf8_lossy(&to.stderr), "netout: ", "bytes")?;
        if got != sent || sent != blocks * block {
            return Err(err(format!(
                "the channel lost data: sent {sent}, received {got} of {} bytes",
                blocks * block
            )));
        }
        let ours = got as f64 / t;
        best_ours = best_ours.max(ours);
        println!(
            "  {:<8} rep {rep}: iperf3 {:>7.0} MB/s, netout/netin {:>7.0} MB/s ({:.2} GB in {t:.2} s)",
            link.name(),
            rate / 1e6,
            ours / 1e6,
            got as f64 / 1e9
        );
    }
    Ok((best_ours, best_iperf))
}

const KEY: &str = "5eed002c0a9e55ed5eed002c0a9e55ed5eed002c0a9e55ed5eed002c0a9e55ed";

/// The input of the compress/encrypt application: the sample capture repeated to `bytes`.
fn workload(dir: &Path, bytes: u64) -> Result<PathBuf> {
    let sample = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../examples/sample.pcap"
    ))
    .map_err(|e| err(format!("examples/sample.pcap: {e}")))?;
    let path = dir.join("workload.bin");
    let mut all = Vec::with_capacity(bytes as usize + sample.len());
    while (all.len() as u64) < bytes {
        all.extend_from_slice(&sample);
    }
    std::fs::write(&path, &all).map_err(|e| err(format!("{}: {e}", path.display())))?;
    Ok(path)
}

/// One run of the application with `engines` per side: (delivered bytes per second,
/// datagrams lost, datagrams sent).
fn compress_encrypt(
    bin: &Path,
    link: Link<'_>,
    input: &Path,
    engines: usize,
) -> Result<(f64, u64, u64)> {
    let port = free_port()?;
    let input_len = std::fs::metadata(input)
        .map_err(|e| err(e.to_string()))?
        .len();
    let pipe = |a: usize, b: usize| format!(" space={a},{b}");
    let (tx, rx) = if engines == 1 {
        (
            format!(
                "file {} split=fixed size=8K | deflate | encrypt key={KEY} | netout to={}:{port} proto=udp wait=10",
                input.display(),
                link.peer()
            ),
            format!(
                "netin port={port} bind={} proto=udp rcvbuf=32M | decrypt key={KEY} | inflate | null",
                link.peer()
            ),
        )
    } else {
        // Two engines: each side's heavy filter (deflate, inflate) copied onto two spaces
        // pinned to the two CPUs; encrypt and decrypt, a tenth of their cost, run once
        // beside the join / before the split (copying them too adds two more channel
        // hops a block and measured slower: 0.79 s against 0.70 s for 51 MB).
        (
            format!(
                "file {} split=fixed size=8K | deflate{} | encrypt key={KEY} | netout to={}:{port} proto=udp queues=2 wait=10",
                input.display(),
                pipe(1, 2),
                link.peer()
            ),
            format!(
                "netin port={port} bind={} proto=udp queues=2 rcvbuf=32M | decrypt key={KEY} | inflate{} | null",
                link.peer(),
                pipe(1, 2)
            ),
        )
    };
    // The two hosts share this machine's CPUs: one engine a side is the application on
    // one CPU, two a side is it on two.
    let cpus = (engines == 1).then_some("0");
    let (_, ro, _, t) = pair(bin, link, &rx, &tx, cpus, Duration::from_secs(300))?;
    let text = String::from_utf8_lossy(&ro.stderr);
    let lost = number(&text, "netin: ", "of")?;
    let sent = number(&text, "netin: ", "datagrams")?;
    // The sink's row: name, blocks, bytes, ...
    let delivered: u64 = text
        .lines()
        .find(|l| l.starts_with("null"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|b| b.parse().ok())
        .ok_or_else(|| err(format!("no null row in: {text}")))?;
    if delivered > input_len || (lost == 0 && delivered != input_len) {
        return Err(err(format!(
            "delivered {delivered} bytes of {input_len} with {lost} datagrams lost: the application is wrong"
        )));
    }
    Ok((delivered as f64 / t, lost, sent))
}

pub fn run(_a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(if quick { 600 } else { 1500 }));
    let (_, bin) = crate::streamlined::binaries()?;
    let mut summary = Summary::default();
    let v = veth()?;
    let (secs, reps) = if quick { (1.0, 1) } else { (3.0, 3) };

    println!("== Lossless channel (netout/netin, TCP) vs iperf3 TCP ==");
    let (ours, iperf) = tcp_vs_iperf3(&bin, Link::Veth(&v), secs, reps)?;
    let (lo_ours, lo_iperf) = tcp_vs_iperf3(&bin, Link::Loopback, secs, reps)?;
    summary.add(
        "net_channel_tcp_vs_iperf3",
        ours / iperf,
        Some(Target::AtLeast(0.9)),
        format!("veth: {:.0} vs {:.0} MB/s", ours / 1e6, iperf / 1e6),
    );
    summary.add(
        "net_channel_tcp_vs_iperf3_loopback",
        lo_ours / lo_iperf,
        None,
        format!(
            "loopback: {:.0} vs {:.0} MB/s",
            lo_ours / 1e6,
            lo_iperf / 1e6
        ),
    );

    println!("\n== Seed 002: compress + encrypt over UDP, 1 vs 2 engines a side ==");
    let dir = TempDir::new("net")?;
    let input = workload(dir.path(), if quick { 24 << 20 } else { 96 << 20 })?;
    let (mut best1, mut best2) = (0f64, 0f64);
    for rep in 0..reps.max(2) {
        for engines in [1, 2] {
            let (rate, lost, sent) = compress_encrypt(&bin, Link::Veth(&v), &input, engines)?;
            println!(
                "  rep {rep}, {engines} engine(s) a side: {:>6.1} MB/s of original data delivered, {lost} of {sent} datagrams lost",
                rate / 1e6
            );
            if engines == 1 {
                best1 = best1.max(rate);
            } else {
                best2 = best2.max(rate);
            }
        }
    }
    summary.add(
        "compress_encrypt_udp_2_engines_vs_1",
        best2 / best1,
        Some(Target::AtLeast(1.7)),
        format!("{:.1} vs {:.1} MB/s delivered", best2 / 1e6, best1 / 1e6),
    );
    drop(v);

    println!("\n== Seed 002 Algorithms 1-2: adaptive vs fixed batching (see `batching`) ==");
    crate::batching::figures(quick, &mut summary)?;

    println!("\n== Kafka at the edges: kafkaout / kafkain vs kcat (see `kafka`) ==");
    crate::kafka::figures(quick, &mut summary)?;
    summary.print()?;
    Ok(())
}
