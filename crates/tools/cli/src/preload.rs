//! `streamline exec -- CMD ...` and `streamline sh 'a | b | c'`: unmodified programs with
//! Streamline's pipes (and batched UDP sockets for the ports named).
//!
//! Owns: finding `libslpreload.so` (crate `preload`) and starting the program with it in
//! `LD_PRELOAD`; the library does the rest in every process of the program's tree (see
//! crates/legacy/preload). Does not own the library.

use crate::compat::{find_library, which};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

/// What `exec` and `sh` start the program with.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Leave pipes to the kernel (the library still batches the UDP ports named).
    #[arg(long)]
    pub no_pipes: bool,
    /// Ring size of new pipes, bytes (4096 to 1073741824, rounded up to a power of two;
    /// default 256 KiB).
    #[arg(long)]
    pub pipe_size: Option<usize>,
    /// Batch the UDP sockets bound to these ports (e.g. 53,5353).
    #[arg(long)]
    pub udp_ports: Option<String>,
}

pub fn exec(opts: &Options, cmd: &[String]) -> ExitCode {
    let Some((prog, args)) = cmd.split_first() else {
        crate::error!(
            "exec: which program? e.g. streamline exec -- sh -c 'tar c . | gzip > x.tgz'"
        );
        return ExitCode::from(2);
    };
    let lib = match find_library("libslpreload.so", "STREAMLINE_PRELOAD_LIB", "preload") {
        Ok(l) => l,
        Err(e) => {
            crate::error!("exec: {e}");
            return ExitCode::from(2);
        }
    };
    // A ring size the library would refuse is refused here, before anything runs.
    let size = opts
        .pipe_size
        .map(|n| n.to_string())
        .or_else(|| std::env::var("STREAMLINE_PIPE_SIZE").ok());
    if let Some(v) = size {
        if let Err(e) = beltway::stream::parse_capacity(&v) {
            crate::error!("exec: STREAMLINE_PIPE_SIZE={v}: {e}");
            return ExitCode::from(2);
        }
    }
    if let Some(path) = which(prog) {
        if std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o6000 != 0) {
            eprintln!("streamline exec: warning: {} is setuid/setgid: the loader will not preload into it, so it gets kernel pipes", path.display());
        }
    }
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(v) if !v.is_empty() => format!("{}:{v}", lib.display()),
        _ => lib.display().to_string(),
    };
    let mut c = std::process::Command::new(prog);
    c.args(args).env("LD_PRELOAD", preload);
    if opts.no_pipes {
        c.env("STREAMLINE_PIPES", "off");
    }
    if let Some(n) = opts.pipe_size {
        c.env("STREAMLINE_PIPE_SIZE", n.to_string());
    }
    if let Some(p) = &opts.udp_ports {
        c.env("STREAMLINE_UDP_PORTS", p);
    }
    let e = c.exec();
    crate::error!("exec: cannot run {prog}: {e}");
    ExitCode::from(127)
}

/// `sh -c SCRIPT` under the library: every pipe the shell makes is a ring.
pub fn sh(opts: &Options, script: &str, args: &[String]) -> ExitCode {
    let mut cmd = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        script.to_string(),
        "sh".to_string(),
    ];
    cmd.extend(args.iter().cloned());
    exec(opts, &cmd)
}
