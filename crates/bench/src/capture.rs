//! The `capture` subcommand (thesis 7.2.2, 6.3.2): live capture on a veth pair into a
//! network namespace the benchmark creates, with UDP traffic it sends itself at a fixed
//! rate (1% of it to port 7, the rest to port 9). The rate is this machine's: the sender
//! is first measured alone, and a third of what it keeps is offered (`--pps` overrides), so
//! it keeps the rate while a capture shares the CPUs.
//!
//! - **Kernel vs user placement of `bpf "udp dst port 7"`**: `rx | bpf` (the program runs
//!   on the socket) against `rx | bpf placed=user` (every frame is handed to user space
//!   and the interpreter runs there): CPU time of the whole capturing process per packet
//!   sent, and packets handed to user space; under the default receive scheme
//!   (`batching=adaptive`, seed 002's Algorithm 2: wake-ups follow the rate that reaches
//!   user space) and under the fixed 10 ms and 1000 ms block timeouts.
//! - **Capture cost against tcpdump**: `rx | count` against `tcpdump -w /dev/null`, both
//!   capturing everything: CPU time per packet of the capturing process.
//! - **Multi-queue receive**: `rx queues=N | deflate level=9 | count` with 1 and 2 engines
//!   in one run (one fanout group in hash mode: each flow on one engine, engine q on CPU
//!   q), traffic from 16 flows; packets processed.
//!
//! - **AF_XDP vs AF_PACKET**: `rx impl=xdp | count` and `rx impl=packet | count` run in
//!   the namespace on its end of the pair (where the traffic arrives): CPU per packet.
//!
//! CPU time is read from /proc/PID/task/*/schedstat (nanoseconds on CPU, all threads)
//! just before the capture is stopped. Needs root (namespaces, CAP_NET_RAW).

use crate::proc;
use crate::util::{err, watchdog, Result, Summary, Target};
use kernel::netns::Veth;
use std::net::{SocketAddrV4, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Offered rate, packets per second (default: a third of what the sender keeps alone,
    /// measured first, so that it keeps the rate while a capture shares the CPUs).
    #[arg(long)]
    pps: Option<u64>,
    /// Seconds of traffic per configuration.
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
}

/// A veth pair into a fresh namespace (the kernel crate's helper); the far end answers
/// nothing, so no ICMP comes back to disturb the counts.
pub(crate) fn veth() -> Result<Veth> {
    let v = Veth::new("cb").map_err(|e| {
        err(format!(
            "{e} (the capture benchmark needs root and iproute2)"
        ))
    })?;
    let _ = v.exec(&["sh", "-c", "echo 0 > /proc/sys/net/ipv4/icmp_ratelimit"]);
    Ok(v)
}

/// Send `pps` UDP datagrams (64 bytes) per second for `secs` from `flows` source ports,
/// in `sendmmsg` batches of up to 64 (a socket per flow, batches taking turns); every 100th
/// goes to port 7. Returns the number sent and the seconds it took (above `secs` when the
/// sender could not keep the rate).
pub(crate) fn send(src: &str, dst: &str, pps: u64, secs: f64, flows: u16) -> Result<(u64, f64)> {
    send_sized(src, dst, pps, secs, flows, 64)
}

/// [`send`] with datagrams of `size` bytes of payload.
pub(crate) fn send_sized(
    src: &str,
    dst: &str,
    pps: u64,
    secs: f64,
    flows: u16,
    size: usize,
) -> Result<(u64, f64)> {
    let socks: Vec<UdpSocket> = (0..flows)
        .map(|_| UdpSocket::bind(format!("{src}:0")))
        .collect::<std::io::Result<_>>()
        .map_err(|e| err(format!("udp socket: {e}")))?;
    let ip: std::net::Ipv4Addr = dst
        .parse()
        .map_err(|e| err(format!("destination {dst}: {e}")))?;
    let (port7, port9) = (SocketAddrV4::new(ip, 7), SocketAddrV4::new(ip, 9));
    let payload = vec![0x5au8; size];
    let t0 = Instant::now();
    let total = (pps as f64 * secs) as u64;
    let mut sent = 0u64;
    let mut turn = 0usize;
    let mut to = Vec::with_capacity(64);
    while sent < total {
        let due = ((t0.elapsed().as_secs_f64() * pps as f64) as u64).min(total);
        while sent < due {
            to.clear();
            to.extend((sent..due.min(sent + 64)).map(|i| if i % 100 == 0 { port7 } else { port9 }));
            turn = (turn + 1) % socks.len();
            match proc::send_many(&socks[turn], &payload, &to) {
                Ok(n) if n > 0 => sent += n as u64,
                // The socket's buffer is full: go on after the pause.
                Ok(_) => break,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) => break,
                Err(e) => return Err(err(format!("sendmmsg to {dst}: {e}"))),
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok((sent, t0.elapsed().as_secs_f64()))
}

/// As fast as one sender can: datagrams of `size` bytes in sendmmsg batches for `secs`,
/// with nothing else running (what the machine offers; benchmarks choose their load from
/// it). Packets per second.
pub(crate) fn max_rate(src: &str, dst: &str, secs: f64, size: usize) -> Result<f64> {
    let sock = std::net::UdpSocket::bind(format!("{src}:0"))
        .map_err(|e| err(format!("udp socket: {e}")))?;
    let ip: std::net::Ipv4Addr = dst.parse().map_err(|e| err(format!("{dst}: {e}")))?;
    let to = vec![std::net::SocketAddrV4::new(ip, 9); 64];
    let payload = vec![0x5au8; size];
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        match crate::proc::send_many(&sock, &payload, &to) {
            Ok(n) => sent += n as u64,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) => {
                std::thread::yield_now()
            }
            Err(e) => return Err(err(format!("sendmmsg: {e}"))),
        }
    }
    Ok(sent as f64 / t0.elapsed().as_secs_f64())
}

/// Nanoseconds on CPU of every thread of `pid`.
pub(crate) fn cpu_ns(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|s| {
            s.split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok())
        })
        .sum()
}

/// The `streamline` program beside this benchmark (target/<profile>/).
pub(crate) fn streamline() -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe()
        .map_err(|e| err(format!("own executable: {e}")))?
        .with_file_name("streamline");
    if !exe.is_file() {
        return Err(err(format!(
            "{} not found; build it with `cargo build --release -p streamline`",
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

/// One capture: start `cmd`, send traffic, read its CPU time, stop it with SIGINT.
/// Returns (packets sent, CPU seconds, stderr).
fn measure(v: &Veth, mut cmd: Command, a: &Load, flows: u16) -> Result<(u64, f64, String)> {
    let child: Child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("starting {cmd:?}: {e}")))?;
    let timed = (|| {
        std::thread::sleep(Duration::from_millis(800));
        let c0 = cpu_ns(child.id());
        let (sent, took) = send(&v.here_ip, &v.peer_ip, a.pps, a.secs, flows)?;
        if took > a.secs * 1.1 {
            return Err(err(format!("the sender kept only {:.0} of the {} packets/s offered (with {:?} capturing); give a lower --pps", sent as f64 / took, a.pps, cmd.get_program())));
        }
        std::thread::sleep(Duration::from_millis(300));
        Ok((sent, cpu_ns(child.id()) - c0))
    })();
    // Stopped however the measurement went: a failed one must not leave it capturing.
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let out = child
        .wait_with_output()
        .map_err(|e| err(format!("waiting: {e}")))?;
    let (sent, ns) = timed?;
    Ok((
        sent,
        ns as f64 / 1e9,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Runs each capture `reps` times, alternating between them, and returns per capture the
/// run with the median CPU per packet and all runs' figures (ns/packet, sorted). A single
/// 3 s run varied by a third on our VMs.
fn median_runs(
    v: &Veth,
    a: &Load,
    reps: usize,
    makers: &[&dyn Fn() -> Command],
) -> Result<Vec<((u64, f64, String), String)>> {
    let mut rounds: Vec<Vec<(u64, f64, String)>> = vec![Vec::new(); makers.len()];
    for _ in 0..reps.max(1) {
        for (k, make) in makers.iter().enumerate() {
            rounds[k].push(measure(v, make(), a, 1)?);
        }
    }
    Ok(rounds
        .into_iter()
        .map(|mut r| {
            r.sort_by(|x, y| (x.1 / x.0 as f64).total_cmp(&(y.1 / y.0 as f64)));
            let runs = r
                .iter()
                .map(|x| format!("{:.0}", x.1 * 1e9 / x.0 as f64))
                .collect::<Vec<_>>()
                .join(" ");
            let mid = r.swap_remove(r.len() / 2);
            (mid, runs)
        })
        .collect())
}

fn count_in(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("count: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn delivered_in(stderr: &str) -> u64 {
    stderr
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
        .sum()
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(600));
    let sl = streamline()?;
    let v = veth()?;
    let dev = v.here.clone();
    let secs = if quick { 1.0 } else { a.secs };
    // The offered rate: what this machine's sender keeps with nothing else running, a third
    // of it (the capture under test shares the 2 CPUs with the sender), unless given.
    let alone = max_rate(&v.here_ip, &v.peer_ip, if quick { 0.5 } else { 1.0 }, 64)?;
    let pps = a.pps.unwrap_or((alone / 3.0) as u64).max(1000);
    println!(
        "streamline-bench capture ({} mode): {} packets/s of 64-byte UDP for {} s on veth {dev}",
        if quick { "quick" } else { "full" },
        pps,
        secs
    );
    let given = a.pps.is_some();
    let a = Load { pps, secs };
    println!(
        "offered rate: {} packets/s ({}; the sender alone keeps {alone:.0})",
        a.pps,
        if given {
            "--pps"
        } else {
            "a third of what the sender keeps"
        }
    );
    let mut summary = Summary::default();
    summary.add(
        "capture_offered_pps",
        a.pps as f64,
        None,
        format!(
            "the offered rate ({}; the sender alone keeps {alone:.0} packets/s)",
            if given {
                "--pps"
            } else {
                "a third of what it keeps"
            }
        ),
    );
    let run_sl = |pipeline: String| {
        let mut c = Command::new(&sl);
        c.args(["--socket", "none", "run", "-q", &pipeline]);
        c
    };

    println!("\n== bpf \"udp dst port 7\" (1% of the traffic): kernel vs user placement ==");
    let reps = if quick { 1 } else { 3 };
    // Both placements under each receive scheme, alternating round by round: the default
    // (batching=adaptive, seed 002's Algorithm 2), today's fixed 10 ms block timeout, and
    // the fixed scheme at tcpdump's 1000 ms.
    let settings = [
        ("", "", Some(Target::AtLeast(5.0))),
        (" batching=fixed", "_fixed", None),
        (" batching=fixed latency=1000", "_1000ms", None),
    ];
    let makers: Vec<Box<dyn Fn() -> Command>> = settings
        .iter()
        .flat_map(|(opt, _, _)| {
            let run_sl = &run_sl;
            let dev = &dev;
            [
                Box::new(move || {
                    run_sl(format!(
                        "rx dev={dev}{opt} | bpf \"udp dst port 7\" | count"
                    ))
                }) as Box<dyn Fn() -> Command>,
                Box::new(move || {
                    run_sl(format!(
                        "rx dev={dev}{opt} | bpf \"udp dst port 7\" placed=user | count"
                    ))
                }),
            ]
        })
        .collect();
    let refs: Vec<&dyn Fn() -> Command> = makers.iter().map(|m| m.as_ref()).collect();
    let mut got = median_runs(&v, &a, reps, &refs)?.into_iter();
    let pairs: Vec<_> = settings
        .iter()
        .map(|_| (got.next().expect("pairs"), got.next().expect("pairs")))
        .collect();
    for ((opt, _, _), (k, u)) in settings.iter().zip(&pairs) {
        println!(
            "CPU ns/packet of each round, sorted{}: kernel {}; user {} (the median run is shown)",
            if opt.is_empty() {
                " (batching=adaptive, the default)".to_string()
            } else {
                format!(" ({})", opt.trim())
            },
            k.1,
            u.1
        );
    }
    println!(
        "{:<10} {:>10} {:>12} {:>14} {:>12}",
        "placement", "sent", "matched", "to user space", "CPU ns/pkt"
    );
    for ((opt, suffix, target), (((sk, ck, ek), _), ((su, cu, eu), _))) in
        settings.iter().zip(&pairs)
    {
        let (nk, nu) = (count_in(ek), count_in(eu));
        let (dk, du) = (delivered_in(ek), delivered_in(eu));
        let tail = if opt.is_empty() {
            String::new()
        } else {
            format!("   ({})", opt.trim())
        };
        println!(
            "{:<10} {:>10} {:>12} {:>14} {:>12.0}{tail}",
            "kernel",
            sk,
            nk,
            dk,
            ck * 1e9 / *sk as f64
        );
        println!(
            "{:<10} {:>10} {:>12} {:>14} {:>12.0}{tail}",
            "user",
            su,
            nu,
            du,
            cu * 1e9 / *su as f64
        );
        if nk == 0 || nu == 0 {
            return Err(err(format!(
                "no matching packets were counted{opt} (kernel {nk}, user {nu}): {ek} {eu}"
            )));
        }
        let (user_ns, kernel_ns) = (cu * 1e9 / *su as f64, ck * 1e9 / *sk as f64);
        let note = if opt.is_empty() {
            format!("CPU per packet sent, batching=adaptive (the default): user {user_ns:.0} ns vs kernel {kernel_ns:.0} ns; frames handed to user space {du} vs {dk}")
        } else {
            format!("the same with{opt} for both placements: user {user_ns:.0} ns vs kernel {kernel_ns:.0} ns (the kernel placement's cost is almost all wake-ups)")
        };
        summary.add(
            &format!("kernel_vs_user_bpf_user_cycles_per_packet{suffix}"),
            user_ns / kernel_ns,
            *target,
            note,
        );
    }

    println!("\n== Capturing everything: rx | count vs tcpdump -w /dev/null ==");
    let td = || {
        let mut c = Command::new("tcpdump");
        c.args(["-i", &dev, "-w", "/dev/null", "-q"]);
        c
    };
    let mut got = median_runs(
        &v,
        &a,
        reps,
        &[&|| run_sl(format!("rx dev={dev} | count")), &td, &|| {
            run_sl(format!("rx dev={dev} batching=fixed | count"))
        }],
    )?
    .into_iter();
    let ((s1, c1, e1), runs1) = got.next().expect("three");
    let ((s2, c2, e2), runs2) = got.next().expect("three");
    let ((s3, c3, e3), runs3) = got.next().expect("three");
    println!("CPU ns/packet of each round, sorted: streamline {runs1}; tcpdump {runs2}; streamline batching=fixed {runs3}");
    println!(
        "streamline (batching=adaptive, default): {} of {s1} packets, {:.0} ns CPU/packet",
        count_in(&e1),
        c1 * 1e9 / s1 as f64
    );
    println!(
        "streamline (batching=fixed, 10 ms):      {} of {s3} packets, {:.0} ns CPU/packet",
        count_in(&e3),
        c3 * 1e9 / s3 as f64
    );
    let tcpdump_says = |what: &str| {
        e2.lines()
            .find(|l| l.ends_with(what))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
    };
    println!(
        "tcpdump (1000 ms timeout):          {} of {s2} packets captured, {} dropped by the kernel, {:.0} ns CPU/packet",
        tcpdump_says("packets captured").map_or("?".into(), |n| n.to_string()),
        tcpdump_says("packets dropped by kernel").map_or("?".into(), |n| n.to_string()),
        c2 * 1e9 / s2 as f64
    );
    summary.add("capture_cpu_tcpdump_over_streamline", (c2 / s2 as f64) / (c1 / s1 as f64), Some(Target::AtLeast(1.5)), "CPU time per packet of the capturing process at the same offered rate (ours with its default batching=adaptive, tcpdump with its 1000 ms timeout)");
    summary.add(
        "capture_cpu_tcpdump_over_streamline_fixed",
        (c2 / s2 as f64) / (c3 / s3 as f64),
        None,
        "the same with ours at batching=fixed (today's 10 ms block timeout)",
    );

    println!("\n== Multi-queue receive: `rx queues=1` and `rx queues=2` (PACKET_FANOUT hash, one engine per queue), deflate per packet, 16 flows ==");
    let engines = |q: usize| run_sl(format!("rx dev={dev} queues={q} | deflate level=9 | count"));
    let (so, _, eo) = measure(&v, engines(1), &a, 16)?;
    let one = count_in(&eo);
    let (st, _, et) = measure(&v, engines(2), &a, 16)?;
    let two = count_in(&et);
    println!("1 engine:  {one} of {so} packets processed");
    println!("2 engines: {two} of {st} packets processed");
    summary.add("multiqueue_2_vs_1", two as f64 / one.max(1) as f64, None, format!("packets processed with 2 engines vs 1 at {} packets/s offered (2 CPUs, the sender shares them)", a.pps));

    println!("\n== AF_XDP vs AF_PACKET: `rx impl=xdp | count` vs `rx impl=packet | count` on the receiving end (in the namespace) ==");
    let in_ns = |imp: &str| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &v.ns]).arg(&sl).args([
            "--socket",
            "none",
            "run",
            "-q",
            &format!("rx dev={} impl={imp} | count", v.there),
        ]);
        c
    };
    let (sx, cx, ex) = measure(&v, in_ns("xdp"), &a, 1)?;
    let (sp, cp, ep) = measure(&v, in_ns("packet"), &a, 1)?;
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
    summary.print()?;
    drop(v);
    Ok(())
}
