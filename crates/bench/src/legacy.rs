//! The `legacy` subcommand (issue 17; thesis 7.5: "10 tcpdump readers cost 13% CPU where
//! Linux needs more than 100%"): 1, 2, 5 and 10 unmodified tcpdump readers, each with a
//! different filter and `-w /dev/null`, at one offered rate, on the system's libpcap (one
//! AF_PACKET socket per reader) and on ours (`streamline compat`: one shared capture in
//! the daemon, every reader a slot on its rings).
//!
//! The offered rate comes from the machine: the sender (64-byte UDP datagrams through a
//! veth pair, `capture::send`) is measured alone first, and the benchmark offers a third
//! of what it keeps, so that the readers' cost never throttles it. CPU is measured
//! system-wide (/proc/stat, all CPUs, all kinds of time: the kernel's per-socket copies
//! run in the sender's context and in softirqs, not in the readers), minus what the same
//! sending costs with no reader: what the readers and their capture path cost. Needs root.

use crate::capture::{send, veth};
use crate::proc::kill_with_us;
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds of traffic per configuration.
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Share of the sender's measured rate to offer.
    #[arg(long, default_value_t = 0.33)]
    load: f64,
    /// Reader counts to measure (default 1, 2, 5, 10; quick: 1, 10).
    #[arg(long, value_delimiter = ',')]
    readers: Vec<usize>,
    /// Measure only one side: `linux` or `streamline` (for profiling one of them).
    #[arg(long)]
    only: Option<String>,
}

/// Busy and total CPU time of the machine so far, in seconds (/proc/stat's first line).
fn machine_cpu() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<f64> = s.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let hz = 100.0; // USER_HZ
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    ((total - idle) / hz, total / hz)
}

/// Nanoseconds on CPU of every thread of `pid`.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    dir.filter_map(|e| e.ok()).filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok()).filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok()).sum()
}

/// As fast as one sender can: 64-byte datagrams in sendmmsg batches for `secs`.
fn max_rate(src: &str, dst: &str, secs: f64) -> Result<f64> {
    let sock = std::net::UdpSocket::bind(format!("{src}:0")).map_err(|e| err(format!("udp socket: {e}")))?;
    let ip: std::net::Ipv4Addr = dst.parse().map_err(|e| err(format!("{dst}: {e}")))?;
    let to = vec![std::net::SocketAddrV4::new(ip, 9); 64];
    let payload = [0x5au8; 64];
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        match crate::proc::send_many(&sock, &payload, &to) {
            Ok(n) => sent += n as u64,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) => std::thread::yield_now(),
            Err(e) => return Err(err(format!("sendmmsg: {e}"))),
        }
    }
    Ok(sent as f64 / t0.elapsed().as_secs_f64())
}

/// A started tcpdump, listening.
struct Reader {
    child: Child,
    rest: std::thread::JoinHandle<String>,
}

fn start_reader(mut cmd: Command) -> Result<Reader> {
    kill_with_us(&mut cmd);
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().map_err(|e| err(format!("starting tcpdump: {e}")))?;
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
    let _ = Command::new("kill").args(["-INT", &r.child.id().to_string()]).status();
    let _ = r.child.wait_with_output();
    let text = r.rest.join().unwrap_or_default();
    let n = |what: &str| text.lines().find(|l| l.contains(what)).and_then(|l| l.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    (n("packets captured"), n("dropped by kernel"))
}

/// One measured window of sending at `pps`: (packets sent, seconds, machine busy CPU
/// seconds, CPU seconds of `pids`).
fn window(here: &str, peer: &str, pps: u64, secs: f64, pids: &[u32]) -> Result<(u64, f64, f64, f64)> {
    let p0: u64 = pids.iter().map(|&p| cpu_ns(p)).sum();
    let (b0, _) = machine_cpu();
    let (sent, took) = send(here, peer, pps, secs, 1)?;
    // What was sent is still being read: let the readers finish it inside the window.
    std::thread::sleep(Duration::from_millis(300));
    let (b1, _) = machine_cpu();
    let p1: u64 = pids.iter().map(|&p| cpu_ns(p)).sum();
    Ok((sent, took, b1 - b0, (p1 - p0) as f64 / 1e9))
}

/// Row of the table: mode, readers, CPU and counts.
struct Row {
    extra: f64,
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(900));
    if crate::daemon::euid()? != 0 {
        return Err(err("this benchmark must run as root: it makes a veth pair and captures on it"));
    }
    let (streamlined, streamline) = crate::daemon::binaries()?;
    let out = Command::new(&streamline).args(["compat", "--print-dir"]).output().map_err(|e| err(format!("streamline compat: {e}")))?;
    if !out.status.success() {
        return Err(err(format!("streamline compat --print-dir: {} (build it: cargo build --release -p compat)", String::from_utf8_lossy(&out.stderr).trim())));
    }
    let compat = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let secs = if quick { 1.0 } else { a.secs };
    let v = veth()?;
    let (here, peer, dev) = (v.here_ip.clone(), v.peer_ip.clone(), v.here.clone());
    let dir = TempDir::new("legacy")?;
    cleanup_on_abnormal_exit(&[&dir.path().join("control"), &dir.path().join("streamlined.log"), dir.path()]);
    let daemon = crate::daemon::Daemon::start(&streamlined, dir.path(), None)?;

    let max = max_rate(&here, &peer, if quick { 0.5 } else { 1.0 })?;
    let pps = ((max * a.load) as u64).max(1000);
    println!("streamline-bench legacy ({} mode): tcpdump readers on veth {dev}, {secs} s per configuration", if quick { "quick" } else { "full" });
    println!("sender alone keeps {max:.0} packets/s (64-byte UDP); offering {pps} packets/s ({:.0}% of it)", a.load * 100.0);
    println!("our libpcap: {compat}/libpcap.so.0.8; our daemon: {} (pid {})", streamlined.display(), daemon.child.as_ref().map_or(0, |c| c.id()));

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
    let (_, _, base_busy, _) = window(&here, &peer, pps, secs, &[])?;
    let base = base_busy / secs;
    println!("sending alone: {:.1}% CPU (of one CPU; the machine has {})", base * 100.0, std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!("\n{:<11} {:>7} {:>10} {:>14} {:>14} {:>12} {:>10} {:>9}", "libpcap", "readers", "sent", "readers+path", "readers only", "captured", "dropped", "ns/pkt");
    let counts: &[usize] = if !a.readers.is_empty() {
        &a.readers
    } else if quick {
        &[1, 10]
    } else {
        &[1, 2, 5, 10]
    };
    let mut linux = Vec::new();
    let mut ours = Vec::new();
    let daemon_pid = daemon.child.as_ref().map_or(0, |c| c.id());
    for &n in counts {
        for on_streamline in [false, true] {
            if a.only.as_deref().is_some_and(|o| o != if on_streamline { "streamline" } else { "linux" }) {
                continue;
            }
            let mut readers = Vec::new();
            for f in filters.iter().cycle().take(n) {
                let mut c = Command::new("tcpdump");
                c.args(["-Z", "root", "-n", "-i", &dev, "-w", "/dev/null", f]);
                if on_streamline {
                    c.env("LD_LIBRARY_PATH", &compat).env("STREAMLINE_SOCKET", &daemon.socket);
                }
                readers.push(start_reader(c)?);
            }
            std::thread::sleep(Duration::from_millis(300));
            let pids: Vec<u32> = readers.iter().map(|r| r.child.id()).collect();
            let measured = window(&here, &peer, pps, secs, &pids);
            let totals: Vec<(u64, u64)> = readers.into_iter().map(stop_reader).collect();
            let (sent, took, busy, own) = measured?;
            if took > secs * 1.15 {
                println!("(the sender kept only {:.0} of {pps} packets/s here)", sent as f64 / took);
            }
            let extra = (busy / took - base).max(0.0);
            let captured: u64 = totals.iter().map(|t| t.0).sum();
            let dropped: u64 = totals.iter().map(|t| t.1).sum();
            println!(
                "{:<11} {:>7} {:>10} {:>13.1}% {:>13.1}% {:>12} {:>10} {:>9.0}",
                if on_streamline { "streamline" } else { "linux" },
                n,
                sent,
                extra * 100.0,
                own / took * 100.0,
                captured,
                dropped,
                extra * took * 1e9 / sent.max(1) as f64
            );
            if on_streamline { &mut ours } else { &mut linux }.push((n, Row { extra }));
            // Let a shared capture whose readers all left stop before the next round.
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let _ = daemon_pid;
    let at = |rows: &[(usize, Row)], n: usize| rows.iter().find(|r| r.0 == n).map_or(f64::NAN, |r| r.1.extra.max(1e-4));
    let mut s = Summary::default();
    s.add("tcpdump_10_readers_linux_cpu_over_streamline", at(&linux, 10) / at(&ours, 10), Some(Target::AtLeast(4.0)), format!("CPU of 10 tcpdump readers plus their capture path (system-wide, the sender's own cost taken out) at {pps} packets/s: system libpcap over ours"));
    s.add("tcpdump_10_vs_1_readers_cpu_streamline", at(&ours, 10) / at(&ours, 1), Some(Target::AtMost(2.0)), "ours: 10 readers' CPU over 1 reader's");
    s.add("tcpdump_1_reader_linux_cpu_over_streamline", at(&linux, 1) / at(&ours, 1), Some(Target::AtLeast(1.5)), "one reader: system libpcap over ours");
    s.add("tcpdump_offered_pps", pps as f64, None, format!("the offered rate: {:.0}% of the {max:.0} packets/s the sender keeps alone", a.load * 100.0));
    s.print();
    Ok(())
}
