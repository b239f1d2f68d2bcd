//! `streamline-bench daemon`, its `web_view_open_vs_closed`: what an open web view costs
//! a run (issue 38). A daemon of its own serves `--http 127.0.0.1:0`; the same run
//! (`gen count=N size=1K | count | count`, attached, through the daemon) is timed with no
//! page open and with pages open: each page is what the browser keeps open, an event
//! stream (`/api/events`, the runs once a second) read with the session's cookie,
//! and Prometheus's share, `/metrics` scraped every second with the scrape token (both by
//! threads of the bench over plain sockets, no process started while a run runs), alternating
//! rounds. Each round runs a closed and an open run back to back (in alternating order) and
//! reads the CPU the daemon and everything it started spent on each (its threads' scheduler
//! time, and the workers it reaped: the run's worker, whose one busy thread makes the run's
//! throughput; the page's event streams and scrapes are served by the daemon's threads). The
//! figure is the median over the rounds of the closed run's CPU over the open run's: the
//! inverse of what the open page takes of a CPU-bound run's throughput, robust against a
//! shared machine's scheduling (the runs' wall times, printed beside it, vary by 20-50% from
//! round to round here, the target is 2%). Counts are checked before it prints. The browser's own drawing is not in it: it runs wherever the
//! browser does, not in the daemon or the run.

use crate::streamlined::{Daemon, RunReport, Setup};
use crate::util::{err, Result};
use daemon::proto::{Reply, Request};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The session cookie the token URL gives.
fn session_cookie(url: &str) -> Result<String> {
    let out = Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", url])
        .output()
        .map_err(|e| err(format!("curl (Debian package curl): {e}")))?;
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    head.lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .and_then(|c| c.split(';').next())
        .map(str::to_string)
        .ok_or_else(|| err(format!("no session cookie from {url}: {head}")))
}

/// Pages open on the web view while they live: event streams and a scraper, each a thread
/// of this process speaking HTTP over a plain socket (what a browser tab and Prometheus
/// keep open), so that the open rounds measure what serving them costs the daemon and the
/// run, not a `curl` started every second on the same two CPUs.
struct Pages {
    stop: Arc<AtomicBool>,
    streams: Vec<std::thread::JoinHandle<bool>>,
    scraper: Option<std::thread::JoinHandle<u64>>,
}

/// `host:port` of a base URL `http://host:port`.
fn authority(base: &str) -> String {
    base.trim_start_matches("http://").trim_end_matches('/').to_string()
}

/// One GET on a fresh connection; the stream, the request sent.
fn get(host: &str, path: &str, header: &str) -> std::io::Result<std::net::TcpStream> {
    use std::io::Write;
    let mut c = std::net::TcpStream::connect(host)?;
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{header}\r\nConnection: close\r\n\r\n"
    )?;
    Ok(c)
}

impl Pages {
    fn open(base: &str, cookie: &str, token: &str, n: usize) -> Result<Pages> {
        use std::io::Read;
        let host = authority(base);
        let stop = Arc::new(AtomicBool::new(false));
        let mut streams = Vec::new();
        for _ in 0..n {
            let mut c = get(&host, "/api/events", &format!("Cookie: {cookie}"))
                .map_err(|e| err(format!("opening {base}/api/events: {e}")))?;
            // Reads until closed; whether it was still open (not ended by the server)
            // when told to stop.
            c.set_read_timeout(Some(Duration::from_millis(200)))
                .map_err(|e| err(format!("event stream: {e}")))?;
            let s = stop.clone();
            streams.push(std::thread::spawn(move || {
                let mut buf = [0u8; 16 << 10];
                let mut head = Vec::new();
                loop {
                    match c.read(&mut buf) {
                        Ok(0) => return s.load(Ordering::Relaxed),
                        Ok(k) if head.len() < 12 => head.extend_from_slice(&buf[..k]),
                        Ok(_) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => return false,
                    }
                    if s.load(Ordering::Relaxed) {
                        return head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200");
                    }
                }
            }));
        }
        let (s, auth) = (stop.clone(), format!("Authorization: Bearer {token}"));
        let scraper = std::thread::spawn(move || {
            let mut scrapes = 0;
            while !s.load(Ordering::Relaxed) {
                let ok = get(&host, "/metrics", &auth).is_ok_and(|mut c| {
                    let mut body = Vec::new();
                    c.read_to_end(&mut body).is_ok() && body.starts_with(b"HTTP/1.1 200")
                });
                scrapes += ok as u64;
                std::thread::sleep(Duration::from_secs(1));
            }
            scrapes
        });
        // The streams connect and get their first event.
        std::thread::sleep(Duration::from_millis(300));
        Ok(Pages {
            stop,
            streams,
            scraper: Some(scraper),
        })
    }

    /// Close them: the scrapes that succeeded, and whether every stream was still open.
    fn close(mut self) -> (u64, bool) {
        self.stop.store(true, Ordering::Relaxed);
        let open = self
            .streams
            .drain(..)
            .fold(true, |all, h| h.join().unwrap_or(false) && all);
        let scrapes = self.scraper.take().map_or(0, |h| h.join().unwrap_or(0));
        (scrapes, open)
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// CPU seconds the daemon `pid` has spent so far: its threads and its live descendants'
/// (scheduler nanoseconds), and the children it has waited for (/proc/PID/stat's cutime
/// and cstime, clock ticks). Called with no worker running: waits (up to 5 s) until the
/// daemon has reaped the last run's.
fn daemon_cpu(pid: u32) -> Result<f64> {
    let waited = std::time::Instant::now();
    let (ns, procs) = loop {
        let (ns, procs) = crate::meter::tree_ns(&[pid]);
        if procs <= 1 || waited.elapsed() > Duration::from_secs(5) {
            break (ns, procs);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if procs > 1 {
        return Err(err("the daemon still had a worker 5 s after its run ended"));
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| err(format!("/proc/{pid}/stat: {e}")))?;
    // After the command's closing parenthesis: field 3 (state) first; cutime and cstime
    // are fields 16 and 17.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // /proc counts in USER_HZ clock ticks, 100 a second on Linux.
    let children = (ticks(16) + ticks(17)) / 100.0;
    Ok(ns as f64 / 1e9 + children)
}

/// The figure and its note.
pub fn open_vs_closed(
    streamlined: &Path,
    streamline: &Path,
    dir: &Path,
    rounds: usize,
    secs: f64,
    quick: bool,
) -> Result<(f64, String)> {
    println!("\n== The same run with the web view open and closed ==");
    let ddir = dir.join("web");
    std::fs::create_dir_all(&ddir).map_err(|e| err(format!("{}: {e}", ddir.display())))?;
    let daemon =
        Daemon::start_with_args(streamlined, &ddir, None, None, &["--http", "127.0.0.1:0"])?;
    let url = match daemon.client()?.call(Request::Web {}) {
        Ok(Reply::Web { url }) => url,
        other => return Err(err(format!("asking for a web token: {other:?}"))),
    };
    let base = url.split("/?").next().unwrap_or(&url).to_string();
    let cookie = session_cookie(&url)?;
    let token = std::fs::read_to_string(ddir.join("metrics.token"))
        .map_err(|e| err(format!("the scrape token: {e}")))?;
    let pid = daemon.child.as_ref().map_or(0, |c| c.id());
    let s = Setup {
        streamline: streamline.to_path_buf(),
        daemon,
        dir: ddir.clone(),
    };
    let pipe = |n: u64| format!("gen count={n} size=1K | count | count");
    let rate = s.calibrate(pipe, 1 << 20, if quick { 0.05 } else { 0.2 })?;
    // Long enough that every open round sees events and scrapes.
    let secs = secs.max(if quick { 1.0 } else { 2.0 });
    let n = ((rate * secs) as u64).max(1 << 20);
    let p = pipe(n);
    let pages = if quick { 1 } else { 2 };
    println!("web view: {base} ({pages} pages open: event streams read by threads of this bench, /metrics scraped every second)");
    println!(
        "run:      STREAMLINE_SOCKET={} {} run '{p}'",
        s.daemon.socket.display(),
        s.streamline.display()
    );
    s.through_daemon(&p)?;
    let check = |rep: &RunReport, how: &str| -> Result<()> {
        if rep.counts.len() != 2 || rep.counts.iter().any(|&c| c != n) {
            return Err(err(format!(
                "{how}: counts {:?}, expected 2 x {n}",
                rep.counts
            )));
        }
        Ok(())
    };
    println!(
        "{:<6} {:>12} {:>12} {:>13} {:>13} {:>8}",
        "round", "closed run s", "open run s", "closed CPU s", "open CPU s", "scrapes"
    );
    let (mut closed, mut open, mut closed_cpu, mut open_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds.max(2) {
        // The pages are opened before the CPU is read and closed after: the daemon's
        // serving of them while the run runs is in the open run's CPU.
        let time_open = || -> Result<((f64, f64), u64)> {
            let pg = Pages::open(&base, &cookie, token.trim(), pages)?;
            let c0 = daemon_cpu(pid)?;
            let (_, rep) = s.through_daemon(&p)?;
            let cpu = daemon_cpu(pid)? - c0;
            check(&rep, "with the web view open")?;
            let (scrapes, still) = pg.close();
            if !still {
                return Err(err(
                    "an event stream ended while the run ran (see the daemon's log)",
                ));
            }
            Ok(((rep.elapsed, cpu), scrapes))
        };
        let time_closed = || -> Result<(f64, f64)> {
            let c0 = daemon_cpu(pid)?;
            let (_, rep) = s.through_daemon(&p)?;
            let cpu = daemon_cpu(pid)? - c0;
            check(&rep, "with the web view closed")?;
            Ok((rep.elapsed, cpu))
        };
        let (c, (o, scrapes)) = if r % 2 == 0 {
            let c = time_closed()?;
            (c, time_open()?)
        } else {
            let o = time_open()?;
            (time_closed()?, o)
        };
        if scrapes == 0 {
            return Err(err("no /metrics scrape succeeded while the page was open"));
        }
        let ((c, cc), (o, oc)) = (c, o);
        println!("{r:<6} {c:>12.3} {o:>12.3} {cc:>13.3} {oc:>13.3} {scrapes:>8}");
        closed.push(c);
        open.push(o);
        closed_cpu.push(cc);
        open_cpu.push(oc);
    }
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (bc, bo) = (best(&closed), best(&open));
    println!(
        "best run: closed {bc:.3} s ({:.2} M blocks/s), open {bo:.3} s ({:.2} M blocks/s)",
        n as f64 / bc / 1e6,
        n as f64 / bo / 1e6
    );
    let median_of = |a: &[f64], b: &[f64]| -> (f64, Vec<f64>) {
        let mut v: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y.max(1e-9)).collect();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v)
    };
    let (wall, wall_rounds) = median_of(&closed, &open);
    let (cpu, cpu_rounds) = median_of(&closed_cpu, &open_cpu);
    let show = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "per round, closed over open: run time {} (median {wall:.3})",
        show(&wall_rounds)
    );
    println!(
        "per round, closed over open: CPU {} (median {cpu:.3})",
        show(&cpu_rounds)
    );
    if !cpu.is_finite() || cpu <= 0.0 {
        return Err(err("no CPU was read for the runs (is /proc mounted?)"));
    }
    Ok((
        cpu,
        format!(
            "median of {} paired rounds of the daemon's and its worker's CPU per run; run times' median {wall:.3}, best runs {:.2} (open) vs {:.2} (closed) M blocks/s, {pages} pages open + /metrics each second, {n} x 1KiB",
            cpu_rounds.len(),
            n as f64 / bo / 1e6,
            n as f64 / bc / 1e6
        ),
    ))
}
