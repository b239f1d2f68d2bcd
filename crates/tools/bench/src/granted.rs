//! `granted_capture_cpu_vs_root_capture` (issue 33, part of `streamline-bench daemon`):
//! what a capture costs when uid 65534 runs it through a policy template (its worker
//! holds no capability; the daemon opened the packet socket, attached the template's
//! filter with a check of the interface in front of it, locked it and lent it) against
//! root running the same pipeline through the same daemon (its worker opens its own
//! socket and attaches the filter itself).
//!
//! Both run `rx dev=VETH | bpf "udp" | count` detached, while a sender in this process
//! pushes UDP datagrams through a veth pair at a fifth of what the sender keeps alone
//! (measured first: the load follows the machine). The cost of a capture is measured as
//! `capture` and `legacy` measure theirs ([`crate::meter`]): the CPU charged to the sending
//! thread (the kernel's side of a capture on a veth's sending end, the socket filter and
//! the copy into the ring, runs in its context), the daemon and every process it started
//! (the run's worker), and the softirq threads; in interleaved windows with the sender
//! alone (A root A granted A, each round), minus what the sender alone costs for the same
//! packets, per packet captured; the median over rounds until it settles (3 to 15), and a
//! full run fails when a median cannot be told from its noise. Each run's count must equal
//! the datagrams sent (nothing dropped, nothing extra) before a figure is printed.

use crate::capture::DRAIN;
use crate::meter::{interleave, Budget, Meter, Verdict, Window};
use crate::streamlined::Daemon;
use crate::traffic::{max_rate, veth};
use crate::util::{err, Result};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Share of the sender's measured rate offered.
const LOAD: f64 = 0.2;
/// UDP payload bytes (small frames: per-packet costs dominate).
const SIZE: usize = 64;

/// The worker of the one run of daemon `daemon_pid`, once it captures on `ifindex`.
fn capturing_worker(daemon_pid: u32, ifindex: u32) -> Result<u32> {
    let t0 = Instant::now();
    loop {
        let out = Command::new("pgrep")
            .args([
                "-x",
                daemon::spawn::worker_comm(),
                "-P",
                &daemon_pid.to_string(),
            ])
            .output()
            .map_err(|e| err(format!("pgrep: {e}")))?;
        for p in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let Ok(pid) = p.parse::<u32>() else { continue };
            let bound = std::fs::read_to_string(format!("/proc/{pid}/net/packet"))
                .unwrap_or_default()
                .lines()
                .skip(1)
                .any(|l| l.split_whitespace().nth(4).and_then(|x| x.parse().ok()) == Some(ifindex));
            if bound {
                return Ok(pid);
            }
        }
        if t0.elapsed() > Duration::from_secs(20) {
            return Err(err("the capture run did not start capturing within 20 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `count: N blocks` of a run's report.
fn count_of(log: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| {
        l.strip_prefix("count: ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// One measured capture: its window (started, measured with the daemon's tree charged,
/// stopped) and the run's count.
#[allow(clippy::too_many_arguments)]
fn one(
    m: &Meter,
    streamline: &Path,
    daemon: &Daemon,
    daemon_pid: u32,
    as_nobody: bool,
    pipeline: &str,
    v: &kernel::netns::Veth,
    ifindex: u32,
    pps: u64,
    secs: f64,
    log: &Path,
) -> Result<(Window, u64)> {
    let _ = std::fs::remove_file(log);
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(streamline);
        c
    } else {
        Command::new(streamline)
    };
    let out = cmd
        .env("STREAMLINE_SOCKET", &daemon.socket)
        .args(["run", "--detach", "-q", "--log"])
        .arg(log)
        .arg(pipeline)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| err(format!("streamline run: {e}")))?;
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || id.parse::<u64>().is_err() {
        return Err(err(format!(
            "starting `{pipeline}`{}: {}",
            if as_nobody { " as uid 65534" } else { "" },
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    capturing_worker(daemon_pid, ifindex)?;
    // The daemon's tree: the worker and anything it started.
    let measured = crate::meter::window(
        m,
        &v.here_ip,
        &v.peer_ip,
        pps,
        secs,
        SIZE,
        1,
        &[daemon_pid],
        DRAIN,
    );
    let st = Command::new(streamline)
        .env("STREAMLINE_SOCKET", &daemon.socket)
        .args(["stop", &id])
        .status()
        .map_err(|e| err(format!("streamline stop: {e}")))?;
    if !st.success() {
        return Err(err(format!("streamline stop {id}: {st}")));
    }
    let t0 = Instant::now();
    let count = loop {
        if let Some(c) = std::fs::read_to_string(log)
            .ok()
            .as_deref()
            .and_then(count_of)
        {
            break c;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            return Err(err(format!("run {id} wrote no count to {}", log.display())));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok((measured?, count))
}

/// The ratio granted / root of CPU per captured packet, and a note with both figures.
pub(crate) fn granted_vs_root(
    streamlined: &Path,
    streamline: &Path,
    dir: &Path,
    quick: bool,
) -> Result<(f64, String)> {
    let v = veth()?;
    let ifindex: u32 = std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", v.here))
        .map_err(|e| err(format!("{}: {e}", v.here)))?
        .trim()
        .parse()
        .map_err(|e| err(format!("ifindex of {}: {e}", v.here)))?;
    let ddir = dir.join("granted");
    std::fs::create_dir_all(&ddir).map_err(|e| err(format!("{}: {e}", ddir.display())))?;
    // Logs are opened by the client (uid 65534 too).
    std::fs::set_permissions(&ddir, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        .map_err(|e| err(format!("{}: {e}", ddir.display())))?;
    let policy = crate::streamlined::udp_grant_policy(&ddir, &v.here)?;
    let daemon = Daemon::start_with_policy(streamlined, &ddir, None, Some(&policy))?;
    let daemon_pid = daemon.child.as_ref().map_or(0, |c| c.id());
    let secs = if quick { 1.0 } else { 3.0 };
    let max = max_rate(&v.here_ip, &v.peer_ip, if quick { 0.5 } else { 1.0 }, SIZE)?;
    let pps = ((max * LOAD) as u64).max(1000);
    let m = Meter::new();
    // The daemon and the workers it starts on the captures' CPUs, away from the sender.
    crate::meter::move_to_capture_cpus(daemon_pid)?;
    println!(
        "granted capture: sender alone keeps {max:.0} packets/s ({SIZE}-byte UDP); offering {pps}/s for {secs} s per window, A root A granted A per round"
    );
    println!("{}", m.describe());
    let pipeline = format!("rx dev={} | bpf \"udp\" | count", v.here);
    let log = ddir.join("run.log");
    let names = ["root".to_string(), "granted".to_string()];
    let budget = Budget {
        min_rounds: if quick { 1 } else { 3 },
        max_rounds: if quick { 1 } else { 15 },
        time: Duration::from_secs_f64(if quick { 0.0 } else { 90.0 }),
    };
    let all = interleave(
        &names,
        &budget,
        || {
            crate::meter::window(
                &m,
                &v.here_ip,
                &v.peer_ip,
                pps,
                secs,
                SIZE,
                1,
                &[daemon_pid],
                DRAIN,
            )
        },
        |k| {
            one(
                &m,
                streamline,
                &daemon,
                daemon_pid,
                k == 1,
                &pipeline,
                &v,
                ifindex,
                pps,
                secs,
                &log,
            )
        },
        |k, w, &count| {
            if count != w.sent {
                return Err(err(format!(
                    "`{pipeline}`{} counted {count} of the {} datagrams sent: the figure would compare unequal work",
                    if k == 1 { " as uid 65534" } else { "" },
                    w.sent
                )));
            }
            Ok(count)
        },
    )?;
    let verdict = |k: usize| Verdict::of(&all[k].iter().map(|x| x.extra_ns).collect::<Vec<_>>());
    let (r, g) = (verdict(0), verdict(1));
    for (name, v) in [("root", r), ("granted", g)] {
        if !v.resolved() && !quick {
            return Err(err(format!(
                "the {name} capture's extra CPU ({:.0} ns per packet, standard error {:.0}) cannot be told from the sender's own noise: rerun on a quieter machine",
                v.ns, v.se
            )));
        }
    }
    let (r, g) = (r.ns * 1e-9, g.ns * 1e-9);
    if !(r > 0.0 && g.is_finite()) {
        return Err(err(format!(
            "CPU per packet above the sender alone: root {r:e} s, granted {g:e} s; cannot form a ratio"
        )));
    }
    let note = format!(
        "CPU per captured packet (sending thread, the daemon and its worker, softirq threads; above the sender alone): granted (uid 65534, lent socket) {:.0} ns, root {:.0} ns{}",
        g * 1e9,
        r * 1e9,
        if quick { " (quick: one round, no noise estimate)" } else { "" }
    );
    Ok((g / r, note))
}
