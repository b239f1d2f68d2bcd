//! `granted_capture_cpu_vs_root_capture` (issue 33, part of `streamline-bench daemon`):
//! what a capture costs when uid 65534 runs it through a policy template (its worker
//! holds no capability; the daemon opened the packet socket, attached the template's
//! filter with a check of the interface in front of it, locked it and lent it) against
//! root running the same pipeline through the same daemon (its worker opens its own
//! socket and attaches the filter itself).
//!
//! Both run `rx dev=VETH | bpf "udp" | count` detached, taking turns, while a sender in
//! this process pushes UDP datagrams through a veth pair at a fifth of what the sender
//! keeps alone (measured first: the load follows the machine). The kernel's side of a
//! capture on a veth's sending end (the socket filter and the copy into the ring, run by
//! the device's tap for every frame sent) runs in the sending thread's context, so the
//! cost of a capture is measured as the CPU time of the sending thread plus every thread
//! of the run's worker, minus what the sending thread alone costs for the same packets
//! (measured in each round), per packet captured. Unlike /proc/stat's machine-wide busy
//! time, that stays true on a machine where other work runs. Each run's count must equal
//! the datagrams sent (nothing dropped, nothing extra) before a figure is printed.

use crate::capture::{max_rate, veth};
use crate::daemon::{median, Daemon};
use crate::legacy::window;
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
            .args(["-x", "streamline", "-P", &daemon_pid.to_string()])
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

/// Nanoseconds on CPU of the calling thread (its schedstat: the kernel's work done in
/// its context included).
fn thread_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Send through the window from this thread: (sent, CPU seconds of this thread, CPU
/// seconds of `pids`).
fn measured(v: &kernel::netns::Veth, pps: u64, secs: f64, pids: &[u32]) -> Result<(u64, f64, f64)> {
    let t0 = thread_ns();
    let (sent, _, _, pid_cpu) = window(&v.here_ip, &v.peer_ip, pps, secs, SIZE, pids)?;
    Ok((sent, (thread_ns() - t0) as f64 / 1e9, pid_cpu))
}

/// `count: N blocks` of a run's report.
fn count_of(log: &str) -> Option<u64> {
    log.lines()
        .rev()
        .find_map(|l| l.strip_prefix("count: ")?.split_whitespace().next()?.parse().ok())
}

/// One measured capture: CPU seconds per packet above the sender alone, and the count.
#[allow(clippy::too_many_arguments)]
fn one(
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
    alone_per_pkt: f64,
) -> Result<(f64, u64)> {
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
    let worker = capturing_worker(daemon_pid, ifindex)?;
    let (sent, sender, run) = measured(v, pps, secs, &[worker])?;
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
        if let Some(c) = std::fs::read_to_string(log).ok().as_deref().and_then(count_of) {
            break c;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            return Err(err(format!("run {id} wrote no count to {}", log.display())));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if count != sent {
        return Err(err(format!(
            "`{pipeline}`{} counted {count} of the {sent} datagrams sent: the figure would compare unequal work",
            if as_nobody { " as uid 65534" } else { "" }
        )));
    }
    Ok(((sender + run - alone_per_pkt * sent as f64) / sent as f64, count))
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
    let policy = ddir.join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[[grant]]\nusers = [\"65534\"]\ntemplate = 'rx dev={} | bpf \"udp\"'\n",
            v.here
        ),
    )
    .map_err(|e| err(format!("{}: {e}", policy.display())))?;
    let daemon = Daemon::start_with_policy(streamlined, &ddir, None, Some(&policy))?;
    let daemon_pid = daemon.child.as_ref().map_or(0, |c| c.id());
    let secs = if quick { 1.0 } else { 3.0 };
    let reps = if quick { 1 } else { 3 };
    let max = max_rate(&v.here_ip, &v.peer_ip, if quick { 0.5 } else { 1.0 }, SIZE)?;
    let pps = ((max * LOAD) as u64).max(1000);
    println!(
        "granted capture: sender alone keeps {max:.0} packets/s ({SIZE}-byte UDP); offering {pps}/s for {secs} s, {reps} round(s)"
    );
    let pipeline = format!("rx dev={} | bpf \"udp\" | count", v.here);
    let log = ddir.join("run.log");
    let (mut root, mut granted) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let (sent, alone, _) = measured(&v, pps, secs, &[])?;
        let alone_per_pkt = alone / sent.max(1) as f64;
        for nobody in [false, true] {
            let (cpu, _) = one(
                streamline, &daemon, daemon_pid, nobody, &pipeline, &v, ifindex, pps, secs,
                &log, alone_per_pkt,
            )?;
            if nobody {
                granted.push(cpu);
            } else {
                root.push(cpu);
            }
        }
    }
    let (r, g) = (median(&mut root), median(&mut granted));
    if !(r > 0.0 && g.is_finite()) {
        return Err(err(format!(
            "CPU per packet above the sender alone: root {r:e} s, granted {g:e} s; cannot form a ratio"
        )));
    }
    let note = format!(
        "CPU per captured packet (sending thread + the run's worker, above the sender alone): granted (uid 65534, lent socket) {:.0} ns, root {:.0} ns",
        g * 1e9,
        r * 1e9
    );
    Ok((g / r, note))
}
