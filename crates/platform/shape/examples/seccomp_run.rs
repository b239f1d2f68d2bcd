//! Try the seccomp supervisor by hand:
//! `cargo run -p shape --example seccomp_run -- [--net RATE[:BURST]] [--disk RATE[:BURST]]
//! [--policy token|leaky] [--priority 0-9] [--stats] -- CMD ARGS...`

use shape::config::{Config, Kind, Limit};
use shape::seccomp;
use shape::Segment;
use std::process::{Command, ExitCode};
use std::sync::atomic::Ordering;

fn usage() -> ExitCode {
    eprintln!("usage: seccomp_run [--net RATE[:BURST]] [--disk RATE[:BURST]] [--policy token|leaky] [--priority 0-9] [--stats] -- CMD ARGS...");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(split) = args.iter().position(|a| a == "--") else {
        return usage();
    };
    let (opts, cmd) = (&args[..split], &args[split + 1..]);
    if cmd.is_empty() {
        return usage();
    }
    let (mut net, mut disk, mut kind, mut prio, mut stats) = (
        "unlimited".to_string(),
        "unlimited".to_string(),
        Kind::Token,
        0u8,
        false,
    );
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        let mut val = || it.next().cloned();
        match o.as_str() {
            "--net" => net = val().unwrap_or_default(),
            "--disk" => disk = val().unwrap_or_default(),
            "--policy" => match val().unwrap_or_default().parse() {
                Ok(k) => kind = k,
                Err(e) => {
                    eprintln!("seccomp_run: {e}");
                    return ExitCode::from(2);
                }
            },
            "--priority" => prio = val().and_then(|v| v.parse().ok()).unwrap_or(0),
            "--stats" => stats = true,
            _ => return usage(),
        }
    }
    let config = match (
        Limit::parse("net", &net, kind, None),
        Limit::parse("disk", &disk, kind, None),
    ) {
        (Ok(net), Ok(disk)) => Config {
            net,
            disk,
            ..Default::default()
        },
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("seccomp_run: {e}");
            return ExitCode::from(2);
        }
    };
    let seg = match Segment::create_private(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("seccomp_run: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!("seccomp_run: {}", config.describe());
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    let t0 = std::time::Instant::now();
    match seccomp::run(&seg, prio, &mut c, |pid| {
        eprintln!("seccomp_run: pid {pid}")
    }) {
        Ok(st) => {
            if stats {
                let s = &seg.shared().stats;
                eprintln!(
                    "seccomp_run: {:.3} s; net {} B in {} calls ({} waited); disk {} B in {} calls ({} waited)",
                    t0.elapsed().as_secs_f64(),
                    s[0].bytes.load(Ordering::Relaxed),
                    s[0].calls.load(Ordering::Relaxed),
                    s[0].waits.load(Ordering::Relaxed),
                    s[1].bytes.load(Ordering::Relaxed),
                    s[1].calls.load(Ordering::Relaxed),
                    s[1].waits.load(Ordering::Relaxed)
                );
            }
            use std::os::unix::process::ExitStatusExt;
            match (st.code(), st.signal()) {
                (Some(c), _) => ExitCode::from(c as u8),
                (None, Some(s)) => ExitCode::from(128 + s as u8),
                _ => ExitCode::from(1),
            }
        }
        Err(e) => {
            eprintln!("seccomp_run: {e}");
            ExitCode::from(1)
        }
    }
}
