//! `streamline-bench daemon`: what going through `streamlined` costs (issue 15).
//!
//! The benchmark starts its own daemon (`streamlined` next to this binary) on a socket in
//! a scratch directory, so it never talks to a daemon someone else runs, and stops it at
//! the end. It must run as root: the daemon's workers take their client's identity.
//!
//! 1. Control round trip: a no-op call through the daemon (`ping` by
//!    `daemon::client::Client::call`) against a bare Unix-socket echo of a frame of the
//!    same size (a thread of this process echoing length-prefixed frames over a socket
//!    pair). The client side is the same code for both (`daemon::proto` framing and JSON);
//!    the echo side only reads and writes bytes. Median of many round trips per round,
//!    rounds alternating; a figure is the median of the rounds' ratios. Where the threads
//!    run decides the result more than anything (on this VM a cross-CPU wake-up costs
//!    about 20 us, the software on either side a few), so it is fixed: first all on one
//!    CPU (the headline: the software costs show), then the client on one CPU and the
//!    serving threads (the daemon's connection thread, moved with `taskset -p`, and the
//!    echo thread) on the other.
//! 2. Lost blocks across live edits: `gen count=N size=64 | count | count name=tail` run
//!    detached through the CLI (`streamline run --detach --log FILE`), edited while it runs
//!    (insert, replace, set, remove; every edit keeps the stream lossless), then waited for
//!    (`attach` until `finished`); the tail's block count is read from the log. N is chosen
//!    from a calibration run so the run lasts about 3 s; if it ends before every edit is
//!    applied, the benchmark says so and retries with a larger N.
//! 3. Daemon run against stand-alone run: `gen count=N size=1K | count | count` by
//!    `streamline run` through the daemon (attached: the client's standard streams, its
//!    exit status) and with `--socket none`, alternating, N sized for about 1.5 s. The
//!    headline is the ratio of the best wall-clock throughputs (start of the command to
//!    its exit, so the daemon's connection, worker start and build are in it); the ratio
//!    of the runs' own elapsed times (data plane only) is printed next to it.
//! 4. The web view open against closed (`webview.rs`): the same run through a daemon
//!    serving `--http`, with pages open on it (event streams read by curl) and `/metrics`
//!    scraped every second, against no page open; `web_view_open_vs_closed`.

use crate::proc::kill_with_us;
use crate::streamlined::{binaries, euid, parse_report, wait_end, Daemon, RunReport, Setup};
use crate::util::median;
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir};
use daemon::client::{Client, ClientError};
use daemon::proto::{self, Msg, Reply, Request};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Alternating rounds of the round-trip and throughput comparisons; default 7, with
    /// --quick 2.
    #[arg(long)]
    rounds: Option<usize>,
    /// Round trips per side per round; default 20000, with --quick 2000.
    #[arg(long)]
    calls: Option<usize>,
    /// How long the edited run should last, in seconds; default 3, with --quick 1.
    #[arg(long)]
    edit_secs: Option<f64>,
    /// How long each throughput run should last, in seconds; default 1.5, with --quick 0.3.
    #[arg(long)]
    run_secs: Option<f64>,
}

/// The live edits applied to the running pipeline, in order. Each keeps every block:
/// counts pass everything, `sample every=1` keeps every block.
pub const EDITS: [&str; 7] = [
    "insert after count count name=mid",
    "replace count:mid sample every=1",
    "set sample every=1",
    "insert before count:tail count name=mid2",
    "remove sample",
    "replace count:mid2 count name=mid3",
    "remove count:mid3",
];

/// A thread echoing length-prefixed frames on its end of a socket pair until the other
/// end closes. It moves itself to the CPU it is sent on `cpus` whenever one comes (the
/// channel is read between frames) and answers on `moved` with the CPU it then runs on.
fn echo_server(
    cpus: std::sync::mpsc::Receiver<usize>,
    moved: std::sync::mpsc::Sender<String>,
) -> Result<(UnixStream, std::thread::JoinHandle<()>)> {
    let (mine, theirs) = UnixStream::pair().map_err(|e| err(format!("socketpair: {e}")))?;
    let h = std::thread::Builder::new()
        .name("echo".into())
        .spawn(move || {
            let mut s = theirs;
            let mut buf = vec![0u8; 4 + proto::MAX_FRAME];
            loop {
                if s.read_exact(&mut buf[..4]).is_err() {
                    return;
                }
                let n = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
                if n > proto::MAX_FRAME || s.read_exact(&mut buf[4..4 + n]).is_err() {
                    return;
                }
                if let Ok(cpu) = cpus.try_recv() {
                    // Not util::pin: it folds onto the CPUs this thread may use, which after
                    // a first pin is that one CPU.
                    let said = match beltway::sys::pin_to_cpu(cpu) {
                        Ok(_) => last_cpu("/proc/thread-self/stat"),
                        Err(e) => e.to_string(),
                    };
                    let _ = moved.send(said);
                }
                if s.write_all(&buf[..4 + n]).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| err(format!("starting the echo thread: {e}")))?;
    Ok((mine, h))
}

/// Nanoseconds of each of `calls` ping round trips through the daemon.
fn ping_daemon(c: &mut Client, calls: usize, token0: u64) -> Result<Vec<f64>> {
    let mut v = Vec::with_capacity(calls);
    for i in 0..calls as u64 {
        let token = token0 + i;
        let t0 = Instant::now();
        let r = c
            .call(Request::Ping { token })
            .map_err(|e| err(format!("ping through the daemon: {e}")))?;
        v.push(t0.elapsed().as_nanos() as f64);
        if r != (Reply::Pong { token }) {
            return Err(err(format!("ping {token}: the daemon answered {r:?}")));
        }
    }
    Ok(v)
}

/// Nanoseconds of each of `calls` round trips of the same request frame through the echo
/// thread (the client side frames and parses with `daemon::proto`, as `Client` does).
fn ping_echo(s: &UnixStream, calls: usize, token0: u64, id0: u64) -> Result<Vec<f64>> {
    let mut v = Vec::with_capacity(calls);
    for i in 0..calls as u64 {
        let m = Msg {
            id: id0 + i,
            body: Request::Ping { token: token0 + i },
        };
        let t0 = Instant::now();
        proto::send(s, &m, &[]).map_err(|e| err(format!("echo: {e}")))?;
        let (back, _) = proto::recv::<Request>(s).map_err(|e| err(format!("echo: {e}")))?;
        v.push(t0.elapsed().as_nanos() as f64);
        if back != m {
            return Err(err(format!("echo returned {back:?} for {m:?}")));
        }
    }
    Ok(v)
}

/// The daemon's thread serving our one connection (named `sl-client`).
/// Connections just closed (the probes of [`Daemon::start`]) may keep their threads a
/// moment: wait up to 5 s for ours to be the only one.
fn connection_thread(daemon_pid: u32) -> Result<u32> {
    let dir = format!("/proc/{daemon_pid}/task");
    let t0 = Instant::now();
    loop {
        let tids: Vec<u32> = std::fs::read_dir(&dir)
            .map_err(|e| err(format!("{dir}: {e}")))?
            .flatten()
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "sl-client")
            })
            .filter_map(|t| t.file_name().to_str()?.parse().ok())
            .collect();
        match tids[..] {
            [tid] => return Ok(tid),
            _ if t0.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                return Err(err(format!(
                    "expected one connection thread (sl-client) in our daemon, found {}",
                    tids.len()
                )))
            }
        }
    }
}

/// The CPU a thread last ran on (field 39 of its `stat`), in words.
fn last_cpu(stat: &str) -> String {
    let text = std::fs::read_to_string(stat).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let cpu = text
        .rfind(')')
        .and_then(|i| text[i + 1..].split_whitespace().nth(36).map(str::to_string));
    cpu.map_or_else(
        || format!("unknown ({stat} unreadable)"),
        |c| format!("CPU {c}"),
    )
}

/// Move thread `tid` of another process to `cpu` (util-linux's taskset).
fn move_thread(tid: u32, cpu: usize) -> Result<()> {
    let out = Command::new("taskset")
        .args(["-p", "-c", &cpu.to_string(), &tid.to_string()])
        .output()
        .map_err(|e| {
            err(format!(
                "taskset (util-linux) is needed to place the daemon's thread: {e}"
            ))
        })?;
    if !out.status.success() {
        return Err(err(format!(
            "taskset -p -c {cpu} {tid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// One placement of the round-trip experiment: the client on `client_cpu`, the daemon's
/// connection thread and the echo thread both on `server_cpu`. Returns the median of the
/// rounds' ratios and the medians over all rounds (ns).
#[allow(clippy::too_many_arguments)]
fn roundtrip_placed(
    c: &mut Client,
    echo: (
        &UnixStream,
        &std::sync::mpsc::Sender<usize>,
        &std::sync::mpsc::Receiver<String>,
    ),
    daemon: (u32, u32),
    (client_cpu, server_cpu): (usize, usize),
    rounds: usize,
    calls: usize,
    ids: &mut u64,
) -> Result<(f64, f64, f64)> {
    let (echo, to_echo, echo_moved) = echo;
    let (pid, tid) = daemon;
    beltway::sys::pin_to_cpu(client_cpu)
        .map_err(|e| err(format!("pinning the client to CPU {client_cpu}: {e}")))?;
    move_thread(tid, server_cpu)?;
    let _ = to_echo.send(server_cpu);
    // Warm-up (the moves take effect, caches), not counted; the echo side sends the very
    // frames the client sends (same ids, same tokens), so the sizes are equal.
    let warm = calls.min(2000);
    ping_daemon(c, warm, 1_000_000)?;
    ping_echo(echo, warm, 1_000_000, *ids)?;
    *ids += warm as u64;
    let echo_on = echo_moved
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| err("the echo thread did not say where it runs"))?;
    println!(
        "placement after warm-up: client {}, daemon's connection thread {}, echo thread {echo_on}",
        last_cpu("/proc/thread-self/stat"),
        last_cpu(&format!("/proc/{pid}/task/{tid}/stat"))
    );
    println!(
        "{:<6} {:>14} {:>14} {:>8}",
        "round", "daemon us", "echo us", "ratio"
    );
    let mut ratios = Vec::new();
    let (mut all_d, mut all_e) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let token0 = 1_000_000 + (r as u64 + 1) * calls as u64;
        let (d, e) = if r % 2 == 0 {
            let d = ping_daemon(c, calls, token0)?;
            (d, ping_echo(echo, calls, token0, *ids)?)
        } else {
            let e = ping_echo(echo, calls, token0, *ids)?;
            (ping_daemon(c, calls, token0)?, e)
        };
        *ids += calls as u64;
        all_d.extend_from_slice(&d);
        all_e.extend_from_slice(&e);
        let (md, me) = (median(&d), median(&e));
        println!(
            "{r:<6} {:>14.2} {:>14.2} {:>8.3}",
            md / 1e3,
            me / 1e3,
            md / me
        );
        ratios.push(md / me);
    }
    let (md, me) = (median(&all_d), median(&all_e));
    println!(
        "all rounds: daemon median {:.2} us, echo median {:.2} us",
        md / 1e3,
        me / 1e3
    );
    Ok((median(&ratios), md, me))
}

/// Experiment 1, on one CPU (client, daemon thread and echo thread together: the software
/// cost of each side shows, wake-ups are cheap) and, where there are two, on two (client
/// on one, the serving thread on the other: each round trip pays two cross-CPU
/// wake-ups). Runs in a thread of its own, so pinning it leaves the rest of the benchmark
/// (and the processes it starts) unpinned.
fn roundtrip(s: &Setup, rounds: usize, calls: usize) -> Result<Vec<(String, f64, String)>> {
    println!("\n== Control round trip: `ping` through streamlined vs a bare Unix-socket echo ==");
    let mut c = s.daemon.client()?;
    let pid = s.daemon.child.as_ref().map_or(0, |c| c.id());
    let tid = connection_thread(pid)?;
    // The client numbers its requests from 1 (`hello`).
    let mut ids = 2u64;
    let sample = proto::encode(&Msg {
        id: ids,
        body: Request::Ping { token: 1_000_000 },
    });
    println!("frame: {} bytes ({}); {calls} round trips per side per round, {rounds} rounds alternating, medians", sample.len(), String::from_utf8_lossy(&sample[4..]));
    let (to_echo, cpus) = std::sync::mpsc::channel();
    let (moved, echo_moved) = std::sync::mpsc::channel();
    let (echo, h) = echo_server(cpus, moved)?;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (c, echo_ref, to_echo, ids) = (&mut c, &echo, &to_echo, &mut ids);
    let out = std::thread::scope(|scope| {
        scope
            .spawn(move || -> Result<Vec<(String, f64, String)>> {
                let mut out = Vec::new();
                println!("-- one CPU: client, the daemon's connection thread and the echo thread on CPU 0");
                let (r, md, me) = roundtrip_placed(c, (echo_ref, to_echo, &echo_moved), (pid, tid), (0, 0), rounds, calls, ids)?;
                out.push(("control_roundtrip_vs_unix_socket_echo".to_string(), r, format!("one CPU: ping {:.1} us / echo {:.1} us", md / 1e3, me / 1e3)));
                if ncpu > 1 {
                    println!("-- two CPUs: client on CPU 0, the daemon's connection thread and the echo thread on CPU 1");
                    let (r, md, me) = roundtrip_placed(c, (echo_ref, to_echo, &echo_moved), (pid, tid), (0, 1), rounds, calls, ids)?;
                    out.push(("control_roundtrip_vs_unix_socket_echo_two_cpus".to_string(), r, format!("two CPUs: ping {:.1} us / echo {:.1} us", md / 1e3, me / 1e3)));
                }
                Ok(out)
            })
            .join()
            .map_err(|_| err("the round-trip thread panicked"))?
    });
    drop(echo);
    let _ = h.join();
    out
}

/// How an edited run went.
enum EditRun {
    /// Every edit applied while the run ran; the tail counted this many of `n`.
    Done {
        n: u64,
        tail: u64,
        source: u64,
        elapsed: f64,
        applied: Vec<(f64, String)>,
    },
    /// The run ended before edit `k` could be applied.
    TooShort { k: usize, why: String },
}

/// One run of experiment 2 with `n` blocks lasting about `secs`.
fn edited_run(s: &Setup, n: u64, secs: f64, attempt: usize) -> Result<EditRun> {
    let log = s.dir.join(format!("edited-{attempt}.log"));
    let pipeline = format!("gen count={n} size=64 | count | count name=tail");
    let mut cmd = Command::new(&s.streamline);
    cmd.env("STREAMLINE_SOCKET", &s.daemon.socket)
        .args(["run", "--detach", "--log"])
        .arg(&log)
        .arg(&pipeline);
    kill_with_us(&mut cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| err(format!("starting streamline run --detach: {e}")))?;
    let t0 = Instant::now();
    let said = String::from_utf8_lossy(&out.stdout);
    let run: u64 = match (out.status.success(), said.trim().parse()) {
        (true, Ok(id)) => id,
        _ => {
            return Err(err(format!(
                "`streamline run --detach --log {} '{pipeline}'` printed no run id ({}): {}",
                log.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    };
    println!("run {run}: {pipeline} (detached, log {})", log.display());
    let mut c = s.daemon.client()?;
    let mut applied = Vec::new();
    // Spread the edits over the first 2/3 of the run.
    let step = secs * 0.6 / EDITS.len() as f64;
    for (k, e) in EDITS.iter().enumerate() {
        let at = secs * 0.1 + step * k as f64;
        let wait = at - t0.elapsed().as_secs_f64();
        if wait > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
        match c.call(Request::Edit {
            run,
            edit: daemon::proto::EditRequest::Text(e.to_string()),
        }) {
            Ok(Reply::Edited { applied: a, .. }) => {
                applied.push((t0.elapsed().as_secs_f64(), a.to_string()))
            }
            Ok(other) => return Err(err(format!("edit `{e}`: unexpected answer {other:?}"))),
            Err(ClientError::Refused { errno, message, .. })
                if errno == libc::ESRCH
                    || errno == libc::EBUSY
                    || message.contains("not running") =>
            {
                // Ended by itself (status 0): too short. Otherwise the edit broke it.
                let code = wait_end(&mut c, run)?;
                if code != 0 {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    return Err(err(format!("run {run} ended with status {code} when edit `{e}` was sent ({message}); its log:\n{}", text.trim())));
                }
                return Ok(EditRun::TooShort { k, why: message });
            }
            Err(e2) => {
                let _ = c.call(Request::Stop { run, signal: 0 });
                return Err(err(format!("edit `{e}` of run {run} was refused: {e2}")));
            }
        }
    }
    let code = wait_end(&mut c, run)?;
    let text = std::fs::read_to_string(&log).map_err(|e| err(format!("{}: {e}", log.display())))?;
    if code != 0 {
        return Err(err(format!(
            "the edited run ended with status {code}; its log:\n{text}"
        )));
    }
    let rep = parse_report(&text)
        .map_err(|e| err(format!("{}: {e}; the log:\n{text}", log.display())))?;
    let tail = rep
        .count_of("count:tail")
        .map_err(|e| err(format!("{}: {e}; the log:\n{text}", log.display())))?;
    println!(
        "{}",
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("  | {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(EditRun::Done {
        n,
        tail,
        source: rep.source_blocks()?,
        elapsed: rep.elapsed,
        applied,
    })
}

/// Experiment 2; returns N - tail.
fn edits(s: &Setup, secs: f64, quick: bool) -> Result<(f64, String)> {
    println!("\n== Lost blocks across live edits of a running run ==");
    let rate = s.calibrate(
        |n| format!("gen count={n} size=64 | count | count name=tail"),
        1 << 20,
        if quick { 0.05 } else { 0.2 },
    )?;
    let mut n = ((rate * secs) as u64).max(1 << 20);
    println!(
        "calibration: {:.1} M blocks/s stand-alone; N = {n} for about {secs} s",
        rate / 1e6
    );
    println!("edits, spread over the run: {}", EDITS.join("; "));
    for attempt in 0..4 {
        match edited_run(s, n, secs, attempt)? {
            EditRun::Done {
                n,
                tail,
                source,
                elapsed,
                applied,
            } => {
                for (t, a) in &applied {
                    println!("  at {t:.3} s: {a}");
                }
                if source != n {
                    return Err(err(format!("the source emitted {source} blocks, not {n}: the run did not run to its end")));
                }
                let lost = n as f64 - tail as f64;
                println!(
                    "N = {n}, tail counted {tail} in {elapsed:.3} s: {lost} lost{}",
                    if tail > n {
                        " (MORE than sent: duplicated blocks)"
                    } else {
                        ""
                    }
                );
                return Ok((
                    lost,
                    format!(
                        "{} edits while {n} blocks ran ({elapsed:.1} s); tail counted {tail}",
                        applied.len()
                    ),
                ));
            }
            EditRun::TooShort { k, why } => {
                println!(
                    "the run ended before edit {} (`{}`) was applied ({why}); retrying with 4x N",
                    k + 1,
                    EDITS[k]
                );
                n *= 4;
            }
        }
    }
    Err(err(
        "the edited run kept ending before all edits were applied (4 tries, N x 4 each)",
    ))
}

/// Experiment 3; returns the wall-clock throughput ratio (daemon / stand-alone) and the
/// ratio of the runs' own elapsed times.
fn throughput(s: &Setup, rounds: usize, secs: f64, quick: bool) -> Result<(f64, f64, String)> {
    println!("\n== The same run through the daemon (attached) and stand-alone ==");
    let pipe = |n: u64| format!("gen count={n} size=1K | count | count");
    let rate = s.calibrate(pipe, 1 << 20, if quick { 0.05 } else { 0.2 })?;
    let n = ((rate * secs) as u64).max(1 << 20);
    let p = pipe(n);
    println!(
        "calibration: {:.1} M blocks/s; N = {n} for about {secs} s: {p}",
        rate / 1e6
    );
    println!(
        "daemon:      STREAMLINE_SOCKET={} {} run '{p}'",
        s.daemon.socket.display(),
        s.streamline.display()
    );
    println!(
        "stand-alone: {} --socket none run '{p}'",
        s.streamline.display()
    );
    // One untimed run of each first.
    s.through_daemon(&p)?;
    s.standalone(&p)?;
    println!(
        "{:<6} {:>12} {:>12} {:>14} {:>14}",
        "round", "daemon s", "alone s", "daemon run s", "alone run s"
    );
    let check = |rep: &RunReport, how: &str| -> Result<()> {
        if rep.counts.len() != 2 || rep.counts.iter().any(|&c| c != n) {
            return Err(err(format!(
                "{how}: counts {:?}, expected 2 x {n}",
                rep.counts
            )));
        }
        Ok(())
    };
    let (mut dw, mut aw, mut de, mut ae) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let (d, a) = if r % 2 == 0 {
            let d = s.through_daemon(&p)?;
            (d, s.standalone(&p)?)
        } else {
            let a = s.standalone(&p)?;
            (s.through_daemon(&p)?, a)
        };
        check(&d.1, "through the daemon")?;
        check(&a.1, "stand-alone")?;
        println!(
            "{r:<6} {:>12.3} {:>12.3} {:>14.3} {:>14.3}",
            d.0, a.0, d.1.elapsed, a.1.elapsed
        );
        dw.push(d.0);
        aw.push(a.0);
        de.push(d.1.elapsed);
        ae.push(a.1.elapsed);
    }
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (bdw, baw, bde, bae) = (best(&dw), best(&aw), best(&de), best(&ae));
    let (mdw, maw) = (median(&dw), median(&aw));
    println!(
        "best wall: daemon {bdw:.3} s ({:.1} M blocks/s), stand-alone {baw:.3} s ({:.1} M blocks/s); medians {mdw:.3} / {maw:.3} s",
        n as f64 / bdw / 1e6,
        n as f64 / baw / 1e6
    );
    println!("best run's own elapsed: daemon {bde:.3} s, stand-alone {bae:.3} s");
    Ok((
        baw / bdw,
        bae / bde,
        format!(
            "best wall {:.1} vs {:.1} M blocks/s, {n} x 1KiB",
            n as f64 / bdw / 1e6,
            n as f64 / baw / 1e6
        ),
    ))
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(if quick {
        Duration::from_secs(180)
    } else {
        Duration::from_secs(15 * 60)
    });
    let rounds = a.rounds.unwrap_or(if quick { 2 } else { 7 }).max(1);
    let calls = a.calls.unwrap_or(if quick { 2000 } else { 20000 }).max(1);
    let edit_secs = a.edit_secs.unwrap_or(if quick { 1.0 } else { 3.0 });
    let run_secs = a.run_secs.unwrap_or(if quick { 0.3 } else { 1.5 });
    let uid = euid()?;
    if uid != 0 {
        return Err(err(format!(
            "this benchmark must run as root (effective uid is {uid}): it starts its own streamlined, whose workers take their client's identity (setgroups, setfsuid)"
        )));
    }
    let (streamlined, streamline) = binaries()?;
    println!(
        "streamline-bench daemon ({} mode)",
        if quick { "quick" } else { "full" }
    );
    let dir = TempDir::new("daemon")?;
    let socket = dir.path().join("control");
    cleanup_on_abnormal_exit(&[&socket, &dir.path().join("streamlined.log"), dir.path()]);
    let daemon = Daemon::start(&streamlined, dir.path(), None)?;
    println!(
        "our daemon: {} --socket {} (pid {})",
        streamlined.display(),
        daemon.socket.display(),
        daemon.child.as_ref().map_or(0, |c| c.id())
    );
    let s = Setup {
        streamline,
        daemon,
        dir: dir.path().to_path_buf(),
    };
    let res = (|| -> Result<Summary> {
        let rt = roundtrip(&s, rounds, calls)?;
        let (lost, lost_note) = edits(&s, edit_secs, quick)?;
        let (wall, own, tp_note) = throughput(&s, rounds, run_secs, quick)?;
        let (granted, granted_note) =
            crate::granted::granted_vs_root(&streamlined, &s.streamline, &s.dir, quick)?;
        // Its target (2%) is finer than one round's noise on a shared machine (rounds vary
        // by up to 20% here): at least 11 paired rounds for the median.
        let web_rounds = if quick { rounds } else { rounds.max(11) };
        let (web, web_note) = crate::webview::open_vs_closed(
            &streamlined,
            &s.streamline,
            &s.dir,
            web_rounds,
            run_secs,
            quick,
        )?;
        let mut summary = Summary::default();
        for (k, (metric, v, note)) in rt.into_iter().enumerate() {
            summary.add(&metric, v, (k == 0).then_some(Target::AtMost(2.0)), note);
        }
        summary.add(
            "edit_lost_blocks",
            lost,
            Some(Target::AtMost(0.0)),
            lost_note,
        );
        summary.add(
            "daemon_run_vs_standalone_run",
            wall,
            Some(Target::AtLeast(0.95)),
            tp_note,
        );
        summary.add(
            "granted_capture_cpu_vs_root_capture",
            granted,
            Some(Target::AtMost(1.1)),
            granted_note,
        );
        summary.add(
            "web_view_open_vs_closed",
            web,
            Some(Target::AtLeast(0.98)),
            web_note,
        );
        summary.add(
            "daemon_run_vs_standalone_run_elapsed",
            own,
            None,
            "the runs' own elapsed times (data plane only)",
        );
        Ok(summary)
    })();
    match res {
        Ok(summary) => {
            summary.print()?;
            Ok(())
        }
        Err(e) => {
            let log = s.daemon.log_text();
            Err(err(format!(
                "{e}\nour daemon's log ({}):\n{}",
                s.daemon.log.display(),
                log.trim()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_echo_thread_returns_each_frame_whole() {
        let (_keep, cpus) = std::sync::mpsc::channel();
        let (moved, _) = std::sync::mpsc::channel();
        let (s, h) = echo_server(cpus, moved).unwrap();
        let v = ping_echo(&s, 100, 7, 1).unwrap();
        assert_eq!(v.len(), 100);
        drop(s);
        h.join().unwrap();
    }
}
