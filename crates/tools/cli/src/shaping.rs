//! `streamline shape [POLICY] -- CMD ARGS...`: run an unmodified program with its network
//! and disk calls shaped by token/leaky buckets (seed 004, crate `shape`).
//!
//! Owns: the command line of a shaping policy, the budget's segment for this run (private,
//! or a `--group` shared with other `streamline shape` runs), and the choice of mechanism
//! per program: the interposition library (`libslpreload.so`, crate `preload`) where the
//! loader will take it, the seccomp supervisor (`shape::seccomp`) where it will not
//! (static and Go binaries, setuid programs), or the one the user forces.

use crate::compat::{find_library, which};
use shape::config::{ConfigError, Kind, Limit};
use shape::{Config, Segment};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::Instant;

/// The policy options.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Network budget: RATE[:BURST], e.g. 10MB/s, 80Mbit:64KiB, unlimited.
    #[arg(long, value_name = "RATE[:BURST]")]
    pub net: Option<String>,
    /// Disk budget: RATE[:BURST].
    #[arg(long, value_name = "RATE[:BURST]")]
    pub disk: Option<String>,
    /// Bucket policy: token (bursts up to BURST), leaky (a steady stream), token+leaky
    /// (bursts drained at --peak).
    #[arg(long, default_value = "token")]
    pub policy: String,
    /// Peak rate of token+leaky (default twice the rate).
    #[arg(long)]
    pub peak: Option<String>,
    /// Priority of this program's calls: 0 (first) to 9 (last).
    #[arg(long, default_value_t = 0)]
    pub priority: u32,
    /// fifo (the priority as given), latency (a connection's priority falls as it moves
    /// more: short transfers overtake long ones), throughput (the opposite).
    #[arg(long, default_value = "fifo")]
    pub prio_policy: String,
    /// Share one budget with every other `streamline shape --group NAME` running now.
    #[arg(long)]
    pub group: Option<String>,
    /// What a disk call costs: bytes (every byte counts), device (the seed's weights from
    /// the measured time per byte: page-cache hits are free, seeks cost 5x).
    #[arg(long, default_value = "bytes")]
    pub disk_cost: String,
    /// auto (library for dynamically linked programs, kernel for the rest), library, kernel.
    #[arg(long, default_value = "auto")]
    pub mechanism: String,
    /// Print what was shaped when the program ends.
    #[arg(long)]
    pub stats: bool,
}

fn config(o: &Options) -> Result<Option<Config>, ConfigError> {
    let kind: Kind = o.policy.parse()?;
    if o.priority > 9 {
        return Err(ConfigError::Priority(o.priority));
    }
    let prio_policy: shape::PrioPolicy = o.prio_policy.parse()?;
    let disk_cost: shape::DiskCost = o.disk_cost.parse()?;
    if o.net.is_none() && o.disk.is_none() {
        return Ok(None);
    }
    let lim = |what, t: &Option<String>| {
        t.as_deref().map_or(Ok(Limit::UNLIMITED), |t| {
            Limit::parse(what, t, kind, o.peak.as_deref())
        })
    };
    Ok(Some(Config {
        net: lim("net", &o.net)?,
        disk: lim("disk", &o.disk)?,
        prio_policy: prio_policy as u32,
        disk_cost: disk_cost as u32,
    }))
}

#[derive(Debug, PartialEq, Eq)]
enum Mechanism {
    Library,
    Kernel,
}

pub fn run(o: &Options, cmd: &[String]) -> ExitCode {
    let fail = |m: String| {
        crate::error!("shape: {m}");
        ExitCode::from(2)
    };
    let Some(prog) = cmd.first() else {
        return fail(
            "which program? e.g. streamline shape --net 1MB/s -- curl -O http://host/file".into(),
        );
    };
    let cfg = match config(o) {
        Ok(c) => c,
        Err(e) => return fail(e.to_string()),
    };
    let me = std::process::id();
    let seg =
        match (&o.group, cfg) {
            (Some(g), c) => Segment::join_group(g, c, me),
            (None, Some(c)) => Segment::create_private(c),
            (None, None) => return fail(
                "no budget: give --net RATE and/or --disk RATE (or --group NAME to join a group's)"
                    .into(),
            ),
        };
    let seg = match seg {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    let path = which(prog);
    let dynamic = path
        .as_deref()
        .is_none_or(|p| shape::program::dynamic_target(p, 0, &shape::program::read_head_std));
    let mech = match o.mechanism.as_str() {
        "auto" if dynamic => Mechanism::Library,
        "auto" => Mechanism::Kernel,
        "library" => Mechanism::Library,
        "kernel" => Mechanism::Kernel,
        m => {
            seg.leave(me);
            return fail(format!(
                "unknown mechanism '{m}': expected auto, library or kernel"
            ));
        }
    };
    if mech == Mechanism::Library && !dynamic {
        eprintln!("streamline shape: warning: {prog} is static or setuid: the library cannot reach it (use --mechanism kernel or auto)");
    }
    let prio = o.priority as u8;
    let start = Instant::now();
    let status = match mech {
        Mechanism::Library => library(&seg, prio, cmd),
        Mechanism::Kernel => kernel(&seg, prio, cmd),
    };
    if o.stats {
        report(&seg, start.elapsed().as_secs_f64(), &mech);
    }
    seg.leave(me);
    match status {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

fn exit_code(st: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(s)) => ExitCode::from(128 + s as u8),
        _ => ExitCode::FAILURE,
    }
}

/// Forward stop signals to the program while we wait for it (Ctrl-C reaches both through
/// the terminal; `kill` and `timeout` reach only us).
fn forward_signals(pid: u32) {
    const SIGS: [i32; 3] = [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
    ];
    if let Ok(mut s) = signal_hook::iterator::Signals::new(SIGS) {
        std::thread::spawn(move || {
            for sig in s.forever() {
                if sig == signal_hook::consts::SIGINT {
                    continue; // the program got it from the terminal too; wait for its exit
                }
                if let Ok(sig) = nix::sys::signal::Signal::try_from(sig) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
                }
            }
        });
    }
}

fn library(seg: &Segment, prio: u8, cmd: &[String]) -> Result<ExitCode, String> {
    let lib = find_library("libslpreload.so", "STREAMLINE_PRELOAD_LIB", "preload")?;
    let fd = seg
        .inheritable_fd(700)
        .map_err(|e| format!("cannot pass the budget to the program: {e}"))?;
    let current = std::env::var("LD_PRELOAD").unwrap_or_default();
    let already = current.contains("slpreload");
    let mut c = std::process::Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    shape::program::dies_with_launcher(&mut c);
    if !already {
        c.env(
            "LD_PRELOAD",
            if current.is_empty() {
                lib.display().to_string()
            } else {
                format!("{}:{current}", lib.display())
            },
        );
        // shaping alone: pipes stay the kernel's (`streamline exec -- streamline shape ...` keeps both)
        c.env("STREAMLINE_PIPES", "off");
    }
    c.env(shape::ENV_FD, fd.as_raw_fd().to_string())
        .env(shape::ENV_PRIO, prio.to_string());
    let mut child = c
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cmd[0]))?;
    drop(fd);
    forward_signals(child.id());
    let st = child
        .wait()
        .map_err(|e| format!("waiting for {}: {e}", cmd[0]))?;
    Ok(exit_code(st))
}

fn kernel(seg: &Segment, prio: u8, cmd: &[String]) -> Result<ExitCode, String> {
    let mut c = std::process::Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    shape::program::dies_with_launcher(&mut c);
    let st = shape::seccomp::run(seg, prio, &mut c, forward_signals).map_err(|e| e.to_string())?;
    Ok(exit_code(st))
}

fn report(seg: &Segment, secs: f64, mech: &Mechanism) {
    use std::sync::atomic::Ordering::Relaxed;
    let sh = seg.shared();
    let c = sh.config();
    for (i, (name, lim)) in [("net", &c.net), ("disk", &c.disk)].into_iter().enumerate() {
        if !lim.is_limited() {
            continue;
        }
        let s = &sh.stats[i];
        let bytes = s.bytes.load(Relaxed);
        eprintln!(
            "streamline shape: {name} {} ({mech:?}): {bytes} bytes in {secs:.2} s ({}), {} tokens, {} grants, {} waited ({:.3} s)",
            lim.describe(),
            shape::units::show_rate(Some((bytes as f64 / secs.max(1e-9)) as u64).filter(|&r| r > 0)),
            if i == 1 && c.disk_cost() == shape::DiskCost::Device { s.tokens.load(Relaxed) } else { bytes },
            s.calls.load(Relaxed),
            s.waits.load(Relaxed),
            s.wait_ns.load(Relaxed) as f64 / 1e9
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(net: Option<&str>) -> Options {
        Options {
            net: net.map(Into::into),
            disk: None,
            policy: "token".into(),
            peak: None,
            priority: 0,
            prio_policy: "fifo".into(),
            group: None,
            disk_cost: "bytes".into(),
            mechanism: "auto".into(),
            stats: false,
        }
    }

    #[test]
    fn policies_parse_or_say_why() {
        assert_eq!(
            config(&opts(Some("1MB/s"))).unwrap().unwrap().net.rate,
            1_000_000
        );
        assert!(config(&opts(None)).unwrap().is_none());
        let mut o = opts(Some("1 parsec"));
        assert!(config(&o)
            .unwrap_err()
            .to_string()
            .contains("unknown unit 'parsec'"));
        o.net = Some("1M".into());
        o.priority = 12;
        assert!(config(&o).unwrap_err().to_string().contains("priority 12"));
        o.priority = 0;
        o.policy = "wobbly".into();
        assert!(config(&o)
            .unwrap_err()
            .to_string()
            .contains("token, leaky or token+leaky"));
    }
}
