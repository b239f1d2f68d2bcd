//! The `shape` subcommand (issue 20; seed 004, "Shaping Process Semantics"): unmodified
//! programs under `streamline shape`, side by side with trickle where trickle can do the
//! same, on loopback only and bounded in time.
//!
//! - **Rates.** An iperf3 TCP transfer, an iperf3 UDP transfer (the sender shaped) and a
//!   `dd` read of a cached file, each at three target rates, through `streamline shape`;
//!   the TCP and UDP transfers also through `trickle -s -u` (trickle shapes TCP only). The
//!   rates come from the machine: an unshaped run of each transfer measures what it moves,
//!   and the highest target is a tenth of that (at most 100 MB/s), the others a fifth and a
//!   twenty-fifth of the highest. The achieved rate is the receiver's (iperf3's own report;
//!   dd's own timing) and the error is its distance from the target, the worst of the three.
//! - **Overhead** (the seed's experiment, where TAP lost 2x): `dd` of a cached file to
//!   /dev/null in 4 KiB and 32 KiB chunks (cat in fixed chunks), bare and under `streamline
//!   shape` with budgets no call reaches (shaping on, never waiting); the fastest of
//!   interleaved rounds on each side, bare time over shaped time.
//! - **Two servers** (the seed's): two unmodified epoll servers (scripts/shapepeer.py) in
//!   one `--group`, so each is held to half of the group's budget when both are busy;
//!   clients open connections for a fixed-size file at rising rates (0.5, 1 and 2 times the
//!   rate the budget can serve); the figure is the combined throughput at twice the peak
//!   connection rate over that at the peak: shaping keeps the link full under overload.
//! - **Priorities** (the seed's): an unmodified threaded HTTP server (`python3 -m
//!   http.server`) under a bandwidth limit serves four clients fetching a large file over
//!   and over while another fetches a small file now and then; the small file's mean
//!   fetch time under `--prio-policy fifo` over that under `--prio-policy latency`.

use crate::capture::streamline;
use crate::proc::kill_with_us;
use crate::util::{err, Result, Summary, Target, TempDir};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds each rate transfer runs (quick: 1).
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Rounds of the overhead experiment (the fastest of each side counts; quick: 3).
    #[arg(long, default_value_t = 11)]
    reps: usize,
}

/// A child killed when dropped (and when we die: PR_SET_PDEATHSIG).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        // SIGTERM first: `streamline shape` passes it to its program and leaves the group
        let pid = self.0.id() as i32;
        // SAFETY: plain kill(2) of a child we started and have not reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        for _ in 0..50 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn need(tool: &str, package: &str) -> Result<()> {
    let ok = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
    if ok {
        Ok(())
    } else {
        Err(err(format!("{tool} is needed (apt-get install {package})")))
    }
}

fn shaped(sl: &Path, policy: &[String], cmd: &[String]) -> Command {
    let mut c = Command::new(sl);
    c.arg("shape").args(policy).arg("--").args(cmd);
    c
}

fn trickled(up_bytes: f64, cmd: &[String]) -> Command {
    // trickle's KB/s are KiB/s
    let mut c = Command::new("trickle");
    c.args([
        "-s",
        "-u",
        &format!("{}", (up_bytes / 1024.0).round().max(1.0) as u64),
    ])
    .args(cmd);
    c
}

fn plain(cmd: &[String]) -> Command {
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    c
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Output of `c`, killed after `limit`.
fn output(mut c: Command, limit: Duration, what: &str) -> Result<std::process::Output> {
    kill_with_us(&mut c);
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("{what}: {e}")))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.map_err(|e| err(format!("{what}: {e}"))),
        Err(_) => {
            // SAFETY: plain kill(2) of a child we started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            Err(err(format!("{what} did not finish within {limit:?}")))
        }
    }
}

fn free_port() -> Result<u16> {
    let l =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| err(format!("tcp socket: {e}")))?;
    Ok(l.local_addr().map_err(|e| err(e.to_string()))?.port())
}

/// `iperf3 -s -1` on a free port, ready.
fn iperf_server() -> Result<(Guard, u16)> {
    for _ in 0..20 {
        let port = free_port()?;
        let mut c = Command::new("iperf3");
        c.args([
            "-s",
            "-1",
            "--forceflush",
            "-B",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ]);
        kill_with_us(&mut c);
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| err(format!("iperf3: {e}")))?;
        let mut line = String::new();
        let mut r = BufReader::new(child.stdout.take().unwrap());
        while r.read_line(&mut line).map_err(|e| err(e.to_string()))? > 0 {
            if line.contains("Server listening") {
                // keep draining its stdout so it never blocks on a full pipe
                std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
                return Ok((Guard(child), port));
            }
            line.clear();
        }
        let _ = child.wait();
    }
    Err(err("iperf3 -s did not start listening"))
}

/// One iperf3 transfer of `secs` (UDP if `udp`) with the client started through `wrap`;
/// the receiver's bytes per second.
fn iperf(wrap: &dyn Fn(&[String]) -> Command, udp: bool, secs: f64) -> Result<f64> {
    let (_srv, port) = iperf_server()?;
    let mut args = strings(&[
        "iperf3",
        "-c",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-t",
        &format!("{secs}"),
        "-J",
    ]);
    if udp {
        args.extend(strings(&["-u", "-b", "0", "-l", "1400"]));
    }
    let o = output(
        wrap(&args),
        Duration::from_secs_f64(secs * 3.0 + 20.0),
        "iperf3 -c",
    )?;
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
        return Err(err(format!(
            "iperf3 reported no received bytes: {}",
            String::from_utf8_lossy(&o.stdout)
        )));
    }
    Ok(bytes / s)
}

/// dd's own timing of a read of `file` (`count` blocks of `bs` bytes) to /dev/null, run
/// through `wrap`: (bytes, seconds).
fn dd(
    wrap: &dyn Fn(&[String]) -> Command,
    file: &Path,
    bs: usize,
    count: Option<u64>,
) -> Result<(f64, f64)> {
    let mut args = vec![
        "dd".to_string(),
        format!("if={}", file.display()),
        "of=/dev/null".into(),
        format!("bs={bs}"),
    ];
    if let Some(n) = count {
        args.push(format!("count={n}"));
    }
    let o = output(wrap(&args), Duration::from_secs(120), "dd")?;
    let text = String::from_utf8_lossy(&o.stderr);
    // "39321600 bytes (39 MB, 38 MiB) copied, 1.94323 s, 20.2 MB/s"
    let line = text
        .lines()
        .find(|l| l.contains(" copied, "))
        .ok_or_else(|| err(format!("dd printed no timing: {text}")))?;
    let bytes: f64 = line
        .split_whitespace()
        .next()
        .and_then(|b| b.parse().ok())
        .ok_or_else(|| err(format!("dd: {line}")))?;
    let secs: f64 = line
        .split(" copied, ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| err(format!("dd: {line}")))?;
    Ok((bytes, secs))
}

/// Three targets below what the machine moved unshaped (`cap` B/s).
fn targets(cap: f64) -> [f64; 3] {
    let hi = (cap / 10.0).clamp(1e6, 100e6);
    [hi / 25.0, hi / 5.0, hi].map(|r| (r / 1000.0).round() * 1000.0)
}

fn mb(r: f64) -> String {
    format!("{:.2} MB/s", r / 1e6)
}

fn pct(got: f64, want: f64) -> f64 {
    100.0 * (got - want).abs() / want
}

fn write_file(path: &Path, bytes: usize) -> Result<()> {
    let mut f = std::fs::File::create(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let k = left.min(buf.len());
        f.write_all(&buf[..k])
            .map_err(|e| err(format!("{}: {e}", path.display())))?;
        left -= k;
    }
    Ok(())
}

/// What the sections share: the `streamline` program, a scratch directory, seconds per
/// transfer, rounds of the overhead comparison, the mode.
struct Ctx {
    sl: PathBuf,
    dir: TempDir,
    secs: f64,
    reps: usize,
    quick: bool,
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    for (t, p) in [
        ("iperf3", "iperf3"),
        ("trickle", "trickle"),
        ("dd", "coreutils"),
        ("python3", "python3"),
    ] {
        need(t, p)?;
    }
    let c = Ctx {
        sl: streamline()?,
        secs: if quick { 1.0 } else { a.secs },
        reps: if quick { 3 } else { a.reps.max(1) },
        dir: TempDir::new("shape")?,
        quick,
    };
    let mut sum = Summary::default();
    crate::util::watchdog(Duration::from_secs(900));
    let tcp_cap = rates(&c, &mut sum)?;
    overhead(&c, &mut sum)?;
    // ---- two servers in one group, rising connection rate ----
    println!("\n== Two epoll servers in one shaping group, connections at rising rates ==");
    let (ratio, table) = two_servers(&c.sl, c.dir.path(), c.secs.max(2.0), tcp_cap)?;
    println!("{table}");
    sum.add(
        "shaped_two_servers_overload_vs_peak",
        ratio,
        Some(Target::AtLeast(0.95)),
        "combined throughput, 2x peak rate / peak",
    );
    // ---- priorities: small files behind large ones ----
    println!(
        "\n== Priorities: a small file fetched beside four large downloads, fifo vs latency =="
    );
    let (fifo, lat) = priorities(&c.sl, c.dir.path(), if quick { 8 } else { 20 })?;
    println!(
        "small file (32 KiB) mean fetch time: fifo {:.1} ms, latency {:.1} ms",
        fifo * 1e3,
        lat * 1e3
    );
    sum.add(
        "latency_policy_small_file_speedup_vs_fifo",
        fifo / lat,
        Some(Target::AtLeast(2.0)),
        "mean of the small fetches",
    );
    sum.print()?;
    Ok(())
}

/// Rates: TCP and UDP (iperf3, ours against trickle), disk (dd), and the kernel mechanism
/// (a static sender); their worst errors added to the summary. Returns the unshaped TCP
/// rate (the later sections take their load from it).
fn rates(c: &Ctx, sum: &mut Summary) -> Result<f64> {
    println!(
        "== Rates: iperf3 TCP and UDP (sender shaped), dd read of a cached file; {} s each ==",
        c.secs
    );
    let (tcp_cap, worst) = net_rates(c)?;
    let worst_disk = disk_rates(c)?;
    // the kernel mechanism: a static sender (no LD_PRELOAD reaches it) at the middle TCP rate
    let r = targets(tcp_cap)[1];
    let got = static_sender(&c.sl, c.dir.path(), r, c.secs)?;
    let static_err = pct(got, r);
    println!(
        "{:<6} {:>12} {:>16} {:>7.2}% {:>16}   (a static C sender: seccomp supervisor)",
        "static",
        mb(r),
        mb(got),
        static_err,
        "(cannot)"
    );
    sum.add(
        "shape_tcp_rate_error_pct",
        worst[0],
        Some(Target::AtMost(2.0)),
        "iperf3 TCP, worst of 3 rates",
    );
    sum.add(
        "shape_static_tcp_rate_error_pct",
        static_err,
        None,
        "static sender, kernel mechanism",
    );
    sum.add(
        "shape_udp_rate_error_pct",
        worst[1],
        Some(Target::AtMost(2.0)),
        "iperf3 UDP, worst of 3 rates",
    );
    sum.add(
        "shape_disk_rate_error_pct",
        worst_disk,
        Some(Target::AtMost(5.0)),
        "dd read, worst of 3 rates",
    );
    sum.add(
        "trickle_tcp_rate_error_pct",
        worst[2],
        None,
        "trickle -s -u, same transfers",
    );
    sum.add(
        "trickle_udp_rate_error_pct",
        worst[3],
        None,
        "trickle shapes no UDP",
    );
    Ok(tcp_cap)
}

/// iperf3 TCP and UDP at three rates below the unshaped ones, shaped by us and by
/// trickle. Returns the unshaped TCP rate and the worst errors: ours TCP, ours UDP,
/// trickle TCP, trickle UDP.
fn net_rates(c: &Ctx) -> Result<(f64, [f64; 4])> {
    let wrap_plain = |c: &[String]| plain(c);
    let tcp_cap = iperf(&wrap_plain, false, 1.0)?;
    let udp_cap = iperf(&wrap_plain, true, 1.0)?;
    println!(
        "unshaped: TCP {}, UDP {} (the targets are taken from these)",
        mb(tcp_cap),
        mb(udp_cap)
    );
    println!(
        "{:<6} {:>12} {:>16} {:>8} {:>16} {:>8}",
        "", "target", "streamline", "error", "trickle", "error"
    );
    let mut worst = [0f64; 4]; // ours tcp, ours udp, trickle tcp, trickle udp
    for (i, (name, udp, cap)) in [("TCP", false, tcp_cap), ("UDP", true, udp_cap)]
        .into_iter()
        .enumerate()
    {
        for r in targets(cap) {
            let pol = strings(&["--net", &format!("{r}")]);
            let ours = iperf(&|cmd: &[String]| shaped(&c.sl, &pol, cmd), udp, c.secs)?;
            let tr = iperf(&|cmd: &[String]| trickled(r, cmd), udp, c.secs)?;
            let (eo, et) = (pct(ours, r), pct(tr, r));
            worst[i] = worst[i].max(eo);
            worst[i + 2] = worst[i + 2].max(et);
            println!(
                "{name:<6} {:>12} {:>16} {:>7.2}% {:>16} {:>7.2}%",
                mb(r),
                mb(ours),
                eo,
                mb(tr),
                et
            );
        }
    }
    Ok((tcp_cap, worst))
}

/// Disk: a cached file read by dd in 64 KiB calls, bytes for `secs` at each of three rates
/// below the unshaped read. Returns the worst error.
fn disk_rates(c: &Ctx) -> Result<f64> {
    let wrap_plain = |c: &[String]| plain(c);
    let dd_cap = {
        let f = c.dir.path().join("probe");
        write_file(&f, 256 << 20)?;
        let _ = dd(&wrap_plain, &f, 1 << 16, None)?;
        let (b, s) = dd(&wrap_plain, &f, 1 << 16, None)?;
        b / s
    };
    let disk_file = c.dir.path().join("disk");
    let biggest = targets(dd_cap)[2];
    write_file(
        &disk_file,
        ((biggest * c.secs) as usize).max(1 << 20) + (1 << 20),
    )?;
    let mut worst_disk = 0f64;
    println!("unshaped dd read: {}", mb(dd_cap));
    for r in targets(dd_cap) {
        let pol = strings(&["--disk", &format!("{r}")]);
        let count = ((r * c.secs) as u64 / 65536).max(4);
        let (b, s) = dd(
            &|cmd: &[String]| shaped(&c.sl, &pol, cmd),
            &disk_file,
            65536,
            Some(count),
        )?;
        let e = pct(b / s, r);
        worst_disk = worst_disk.max(e);
        println!(
            "{:<6} {:>12} {:>16} {:>7.2}% {:>16}",
            "disk",
            mb(r),
            mb(b / s),
            e,
            "(cannot)"
        );
    }
    Ok(worst_disk)
}

/// Overhead: dd of a cached file in 4 KiB and 32 KiB calls, bare and under shaping that
/// never waits; the fastest of each.
fn overhead(c: &Ctx, sum: &mut Summary) -> Result<()> {
    println!("\n== Overhead: dd of a cached file to /dev/null, bare vs `streamline shape` with unreachable budgets ==");
    let wrap_plain = |c: &[String]| plain(c);
    let big = c.dir.path().join("cached");
    let size = if c.quick {
        256usize << 20
    } else {
        1usize << 30
    };
    write_file(&big, size)?;
    let _ = dd(&wrap_plain, &big, 1 << 20, None)?;
    let never = strings(&["--disk", "1000TB/s", "--net", "1000TB/s"]);
    let mut overhead = Vec::new();
    for bs in [4096usize, 32768] {
        let (mut bare, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..c.reps {
            bare.push(dd(&wrap_plain, &big, bs, None)?.1);
            ours.push(dd(&|cmd: &[String]| shaped(&c.sl, &never, cmd), &big, bs, None)?.1);
        }
        // the fastest of each (other load only ever slows a run down), as util::Plan does
        let best = |v: Vec<f64>| v.into_iter().fold(f64::INFINITY, f64::min);
        let (b, o) = (best(bare), best(ours));
        println!(
            "{:>6} B calls: bare {:.3} s, shaped {:.3} s ({} calls): {:.3}",
            bs,
            b,
            o,
            size / bs,
            b / o
        );
        overhead.push(b / o);
    }
    let _ = std::fs::remove_file(&big);
    sum.add(
        "shape_unlimited_cached_read_4KiB_vs_bare",
        overhead[0],
        Some(Target::AtLeast(0.95)),
        "dd bs=4K, fastest of each",
    );
    sum.add(
        "shape_unlimited_cached_read_32KiB_vs_bare",
        overhead[1],
        None,
        "dd bs=32K, fastest of each",
    );
    Ok(())
}

/// A static C program (crates/tools/cli/tests/c/shapeprog.c, built here with `cc -static`)
/// sending `rate * secs` bytes over TCP under `--net rate`: the kernel mechanism's rate,
/// as the receiver sees it from its first byte to its last.
fn static_sender(sl: &Path, dir: &Path, rate: f64, secs: f64) -> Result<f64> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/c/shapeprog.c");
    let prog = dir.join("shapeprog");
    let o = Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&prog)
        .arg(&src)
        .output()
        .map_err(|e| err(format!("cc (apt-get install build-essential): {e}")))?;
    if !o.status.success() {
        return Err(err(format!(
            "cc -static {}: {}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        )));
    }
    let bytes = (rate * secs) as usize;
    let file = dir.join("static.bin");
    write_file(&file, bytes)?;
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| err(e.to_string()))?;
    let port = l.local_addr().map_err(|e| err(e.to_string()))?.port();
    let mut c = shaped(
        sl,
        &strings(&["--net", &format!("{rate}")]),
        &strings(&[
            prog.to_str().unwrap(),
            "send",
            file.to_str().unwrap(),
            "262144",
            &port.to_string(),
        ]),
    );
    kill_with_us(&mut c);
    let _child = Guard(
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| err(format!("streamline shape: {e}")))?,
    );
    let (mut s, _) = l.accept().map_err(|e| err(e.to_string()))?;
    s.set_read_timeout(Some(Duration::from_secs_f64(secs * 3.0 + 10.0)))
        .map_err(|e| err(e.to_string()))?;
    let mut buf = vec![0u8; 1 << 16];
    let (mut got, mut first, mut last) = (0usize, None, Instant::now());
    loop {
        let n = s
            .read(&mut buf)
            .map_err(|e| err(format!("reading from the static sender: {e}")))?;
        if n == 0 {
            break;
        }
        first.get_or_insert_with(Instant::now);
        last = Instant::now();
        got += n;
    }
    if got != bytes {
        return Err(err(format!(
            "the static sender delivered {got} of {bytes} bytes"
        )));
    }
    // the first read holds the burst that left at once; the rest came at the rate
    let span = (last - first.unwrap_or(last)).as_secs_f64();
    Ok((got as f64 - shape::config::default_burst(rate as u64) as f64) / span)
}

/// Start `cmd` (a shapepeer server) and read its port.
fn start_peer(mut c: Command) -> Result<(Guard, u16)> {
    kill_with_us(&mut c);
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| err(format!("server: {e}")))?;
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .map_err(|e| err(e.to_string()))?;
    let v: Value =
        serde_json::from_str(&line).map_err(|e| err(format!("server said {line:?}: {e}")))?;
    let port = v["port"]
        .as_u64()
        .ok_or_else(|| err(format!("server said {line:?}")))? as u16;
    Ok((Guard(child), port))
}

fn peer_script() -> Result<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../scripts/shapepeer.py");
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("../../../scripts/shapepeer.py")));
    [Some(here), beside]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .ok_or_else(|| err("scripts/shapepeer.py not found (run from the source tree)"))
}

/// Fetch everything from 127.0.0.1:port, adding bytes to `got` as they arrive, until EOF
/// or `stop`.
fn fetch_counting(
    port: u16,
    request: Option<&[u8]>,
    got: &AtomicU64,
    stop: &AtomicBool,
) -> std::io::Result<u64> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    if let Some(r) = request {
        s.write_all(r)?;
    }
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                total += n as u64;
                got.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(total);
        }
    }
}

/// The seed's two-server experiment; returns (throughput at 2x peak / at peak, table).
fn two_servers(sl: &Path, dir: &Path, secs: f64, tcp_cap: f64) -> Result<(f64, String)> {
    let script = peer_script()?;
    let budget = (tcp_cap / 50.0).clamp(2e6, 20e6);
    let file_size = 100_000usize;
    let file = dir.join("page");
    write_file(&file, file_size)?;
    let group = format!("bench-{}", std::process::id());
    let pol = strings(&["--group", &group, "--net", &format!("{budget}")]);
    let server = |pol: &[String]| {
        shaped(
            sl,
            pol,
            &strings(&[
                "python3",
                script.to_str().unwrap(),
                "serve",
                "0",
                file.to_str().unwrap(),
                "0",
            ]),
        )
    };
    let (_a, pa) = start_peer(server(&pol))?;
    let (_b, pb) = start_peer(server(&pol))?;
    let peak = budget / file_size as f64; // connections per second the budget serves
    let mut table = format!("group budget {} ({} each when both are busy), {} KB per connection, peak {:.0} connections/s\n", mb(budget), mb(budget / 2.0), file_size / 1000, peak);
    table += &format!(
        "{:>10} {:>14} {:>14} {:>14} {:>12}\n",
        "load", "server A", "server B", "combined", "of budget"
    );
    let mut at = Vec::new();
    for load in [0.5, 1.0, 2.0] {
        let rate = peak * load;
        let stop = Arc::new(AtomicBool::new(false));
        let got = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        let mut threads = Vec::new();
        let t0 = Instant::now();
        let warm = secs * 0.25;
        let mut marks = [0u64; 2];
        let mut marked = false;
        let mut i = 0u64;
        while t0.elapsed().as_secs_f64() < secs {
            let due = i as f64 / rate;
            let now = t0.elapsed().as_secs_f64();
            if !marked && now >= warm {
                marks = [
                    got[0].load(Ordering::Relaxed),
                    got[1].load(Ordering::Relaxed),
                ];
                marked = true;
            }
            if now < due {
                std::thread::sleep(Duration::from_secs_f64((due - now).min(0.01)));
                continue;
            }
            let side = (i % 2) as usize;
            let port = if side == 0 { pa } else { pb };
            let (g, s) = (got[side].clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                fetch_counting(port, None, &g, &s)
            }));
            i += 1;
        }
        let span = secs - warm;
        let bytes = [
            got[0].load(Ordering::Relaxed) - marks[0],
            got[1].load(Ordering::Relaxed) - marks[1],
        ];
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
        // let the servers drop what the stopped clients left
        std::thread::sleep(Duration::from_millis(500));
        let (ra, rb) = (bytes[0] as f64 / span, bytes[1] as f64 / span);
        table += &format!(
            "{:>9.1}x {:>14} {:>14} {:>14} {:>11.1}%\n",
            load,
            mb(ra),
            mb(rb),
            mb(ra + rb),
            100.0 * (ra + rb) / budget
        );
        at.push(ra + rb);
    }
    Ok((at[2] / at[1], table))
}

/// The seed's prioritizing experiment: mean fetch time of a small file beside four large
/// downloads, (fifo, latency).
fn priorities(sl: &Path, dir: &Path, smalls: usize) -> Result<(f64, f64)> {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).map_err(|e| err(e.to_string()))?;
    write_file(&www.join("large"), 4 << 20)?;
    write_file(&www.join("small"), 32 << 10)?;
    let budget = 2e6;
    let mut means = Vec::new();
    for policy in ["fifo", "latency"] {
        let port = free_port()?;
        let pol = strings(&["--net", &format!("{budget}:16KiB"), "--prio-policy", policy]);
        let mut c = shaped(
            sl,
            &pol,
            &strings(&[
                "python3",
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ]),
        );
        c.current_dir(&www)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        kill_with_us(&mut c);
        let _srv = Guard(c.spawn().map_err(|e| err(format!("http.server: {e}")))?);
        let up = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if up.elapsed() > Duration::from_secs(10) {
                return Err(err("python3 -m http.server did not start"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let sink = Arc::new(AtomicU64::new(0));
        let large: Vec<_> = (0..4)
            .map(|_| {
                let (s, g) = (stop.clone(), sink.clone());
                std::thread::spawn(move || {
                    while !s.load(Ordering::Relaxed) {
                        let _ = fetch_counting(port, Some(b"GET /large HTTP/1.0\r\n\r\n"), &g, &s);
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let mut times = Vec::new();
        let never = AtomicBool::new(false);
        for _ in 0..smalls {
            let t = Instant::now();
            let n = fetch_counting(
                port,
                Some(b"GET /small HTTP/1.0\r\n\r\n"),
                &AtomicU64::new(0),
                &never,
            )
            .map_err(|e| err(format!("fetching the small file: {e}")))?;
            if n < 32 << 10 {
                return Err(err(format!("the small file came back with {n} bytes")));
            }
            times.push(t.elapsed().as_secs_f64());
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::Relaxed);
        for t in large {
            let _ = t.join();
        }
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        println!(
            "{policy:>8}: small fetches {:.1} ms mean ({} fetches), large downloads moved {}",
            mean * 1e3,
            times.len(),
            crate::util::fmt_size(sink.load(Ordering::Relaxed))
        );
        means.push(mean);
    }
    Ok((means[0], means[1]))
}
