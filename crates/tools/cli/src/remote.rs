//! The `streamline` command as the daemon's client: `run` through the daemon (attached or
//! `--detach`ed), `ps`, `stop`, `attach`, `edit`, `web`.
//!
//! Owns: turning those commands into protocol calls and printing the answers. Does not
//! own: the protocol (`daemon::proto`, `daemon::client`).

use daemon::client::{Client, ClientError};
use daemon::proto::{NodeCounters, Reply, Request, RunOptions};
use dataplane::EditWire;
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A daemon answering on the socket the flags or environment name, if any.
pub fn connect(socket: Option<&str>) -> Option<Result<Client, ClientError>> {
    let path = daemon::client::socket_path(socket)?;
    if !path.exists() {
        return None;
    }
    Some(Client::connect(&path))
}

/// Connect or say why not (for the commands that need a daemon).
pub(crate) fn need(socket: Option<&str>) -> Result<Client, ExitCode> {
    match connect(socket) {
        Some(Ok(c)) => Ok(c),
        Some(Err(e)) => {
            crate::error!("{e}");
            Err(ExitCode::from(1))
        }
        None => {
            let p = daemon::client::socket_path(socket)
                .map_or("none".to_string(), |p| p.display().to_string());
            crate::error!("no daemon answers on {p} (start one with `streamlined`, or name its socket with --socket or STREAMLINE_SOCKET)");
            Err(ExitCode::from(1))
        }
    }
}

fn refused(e: ClientError) -> ExitCode {
    crate::error!("{e}");
    match e {
        ClientError::Refused { errno, .. } if errno == libc::EINVAL || errno == libc::EACCES => {
            ExitCode::from(2)
        }
        _ => ExitCode::from(1),
    }
}

/// `streamline run` through the daemon. An attached run gets this process's standard
/// streams, Ctrl-C stops it as it would stop a stand-alone run, and the exit status is the
/// run's. A detached run (`detach` is `Some(log)`) gets /dev/null, or the log file for its
/// output, so `id=$(streamline run --detach ...)` returns at once.
pub fn run(
    mut c: Client,
    socket: Option<&str>,
    pipeline: &str,
    options: RunOptions,
    detach: Option<Option<std::path::PathBuf>>,
) -> ExitCode {
    let quiet = options.quiet;
    if detach.is_some() {
        if let Some(why) = reads_terminal_stdin(pipeline) {
            crate::error!("{why}");
            return ExitCode::from(2);
        }
    }
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    let log = match detach.as_ref().and_then(|l| l.as_ref()) {
        Some(p) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
        {
            Ok(f) => Some(f),
            Err(e) => {
                crate::error!("--log {}: {e}", p.display());
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    // The run works where we are, with our environment, umask and limits.
    let (context, cwd) = match daemon::context::gather() {
        Ok(c) => c,
        Err(e) => {
            crate::error!("{e}");
            return ExitCode::from(1);
        }
    };
    let fds = match (&detach, &log) {
        (None, _) => [0, 1, 2, cwd.as_raw_fd()],
        (Some(_), Some(f)) => [
            devnull.as_raw_fd(),
            f.as_raw_fd(),
            f.as_raw_fd(),
            cwd.as_raw_fd(),
        ],
        (Some(_), None) => [
            devnull.as_raw_fd(),
            devnull.as_raw_fd(),
            devnull.as_raw_fd(),
            cwd.as_raw_fd(),
        ],
    };
    let detach = detach.is_some();
    let run = match c.call_fds(
        Request::Open {
            pipeline: pipeline.to_string(),
            options,
            fds: fds.len() as u32,
            context,
        },
        &fds,
    ) {
        Ok((Reply::Opened { run, placement }, _)) => {
            if !quiet {
                eprintln!("{}", through(&c, socket, run));
            }
            if !quiet && !placement.is_empty() && detach {
                eprintln!("{placement}");
            }
            run
        }
        Ok((other, _)) => {
            crate::error!("unexpected answer {other:?}");
            return ExitCode::from(1);
        }
        Err(e) => return refused(e),
    };
    if let Err(e) = c.call(Request::Activate { run, detach }) {
        return refused(e);
    }
    if detach {
        println!("{run}");
        return ExitCode::SUCCESS;
    }
    // Stop signals become a stop request; the run drains and ends as a stand-alone run
    // would, and we exit with its status.
    let (stop, which) = crate::watch_stop_signals(|sig| std::process::exit(128 + sig));
    if let Ok(sock) = c.socket().try_clone() {
        std::thread::spawn(move || {
            // Pairs with the SeqCst stores in `watch_stop_signals`.
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let sig = which.load(Ordering::SeqCst);
            let _ = daemon::proto::send(
                &sock,
                &daemon::proto::Msg {
                    id: u64::MAX,
                    body: Request::Stop { run, signal: sig },
                },
                &[],
            );
        });
    }
    wait_finished(&mut c, run, |_| {})
}

/// The line `run` prints when the daemon took the run: which run, which daemon (its
/// version and process id, from its `welcome`), on which socket.
fn through(c: &Client, socket: Option<&str>, run: u64) -> String {
    let path = daemon::client::socket_path(socket)
        .map_or_else(|| "?".to_string(), |p| p.display().to_string());
    match &c.welcome {
        Reply::Welcome { server, pid, .. } => {
            format!("streamline: run {run} goes through the daemon ({server}, pid {pid}, socket {path})")
        }
        _ => format!("streamline: run {run} goes through the daemon on {path}"),
    }
}

/// Why a pipeline cannot run detached, if it reads this command's standard input (a
/// `stdin` source): a detached run outlives this command and gets /dev/null there, so it
/// would end at once with nothing read. A pipeline that does not parse is left to the
/// daemon to refuse (with its caret).
fn reads_terminal_stdin(pipeline: &str) -> Option<String> {
    let g = lang::parse(pipeline, &crate::resolver()).ok()?;
    g.nodes.iter().find_map(|n| match &n.kind {
        lang::NodeKind::Filter { filter, .. } if filter == "stdin" => Some(
            "streamline: --detach: this pipeline reads standard input (`stdin`), which a detached run does not have (it would read nothing and end at once); run it attached, or read from a file (`file PATH`)".to_string(),
        ),
        _ => None,
    })
}

/// Attach to `run` and wait for its end, passing each counter snapshot to `each`.
fn wait_finished(c: &mut Client, run: u64, each: impl FnMut(&Reply)) -> ExitCode {
    match wait_end(c, run, each) {
        Ok(code) => ExitCode::from(code.unwrap_or(0).clamp(0, 255) as u8),
        Err(e) => refused(e),
    }
}

/// Attach to `run` and wait for its end: its exit status, or None when the daemon no
/// longer knows the run (it ended long ago, or was never the asker's).
fn wait_end(
    c: &mut Client,
    run: u64,
    mut each: impl FnMut(&Reply),
) -> Result<Option<i32>, ClientError> {
    c.send(Request::Attach { run }, &[])?;
    loop {
        match c.recv() {
            Ok((m, _)) => match m.body {
                Reply::Finished { code, .. } => return Ok(Some(code)),
                r @ Reply::Counters { .. } => each(&r),
                _ => {}
            },
            Err(ClientError::Refused { errno, .. }) if errno == libc::ESRCH => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

fn human(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.1}G", x / 1e9),
        x if x >= 1e6 => format!("{:.1}M", x / 1e6),
        x if x >= 1e3 => format!("{:.1}k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

pub fn ps(socket: Option<&str>) -> ExitCode {
    let mut c = match need(socket) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match c.call(Request::Ps {}) {
        Ok(Reply::Runs { runs }) => {
            // PLACEMENT is as wide as its widest value, so PIPELINE starts in one column.
            let width = runs
                .iter()
                .map(|r| r.layout.len().max(1))
                .max()
                .unwrap_or(0)
                .max("PLACEMENT".len());
            println!(
                "{:<5} {:<10} {:<20} {:>9} {:>10} {:>5}  {:<width$}  PIPELINE",
                "ID", "USER", "STATE", "UPTIME", "BLOCKS/S", "EDITS", "PLACEMENT"
            );
            for r in runs {
                let layout = if r.layout.is_empty() { "-" } else { &r.layout };
                println!(
                    "{:<5} {:<10} {:<20} {:>8.1}s {:>10} {:>5}  {:<width$}  {}",
                    r.run,
                    r.user,
                    r.state,
                    r.uptime_s,
                    human(r.rate),
                    r.edits,
                    layout,
                    r.pipeline
                );
                if !r.placement.is_empty() {
                    println!("{:<5} {}", "", r.placement);
                }
                if !r.last_edit.is_empty() {
                    println!("{:<5} last edit: {}", "", r.last_edit);
                }
            }
            ExitCode::SUCCESS
        }
        Ok(other) => {
            crate::error!("unexpected answer {other:?}");
            ExitCode::from(1)
        }
        Err(e) => refused(e),
    }
}

pub fn stop(socket: Option<&str>, run: u64) -> ExitCode {
    let mut c = match need(socket) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // What is stopped, as `ps` shows it (the pipeline as it runs now).
    let shown = match c.call(Request::Ps {}) {
        Ok(Reply::Runs { runs }) => runs.into_iter().find(|r| r.run == run).map(|r| r.pipeline),
        _ => None,
    };
    if let Err(e) = c.call(Request::Stop { run, signal: 0 }) {
        return refused(e);
    }
    // Return once the run has ended: `ps` no longer shows it running.
    let code = match wait_end(&mut c, run, |_| {}) {
        Ok(code) => code,
        Err(e) => return refused(e),
    };
    let what = shown.map_or(String::new(), |p| format!(" `{p}`"));
    match code {
        Some(code) => eprintln!("streamline: stopped run {run}{what}: it ended with status {code}"),
        None => eprintln!("streamline: stopped run {run}{what}"),
    }
    ExitCode::SUCCESS
}

/// The counters table, one string per line: the rows of the table a run prints at its
/// end (one per node the user wrote, labelled as in one space, in the pipeline's order),
/// with its last column, `space`.
fn counters_table(nodes: &[NodeCounters], elapsed: f64) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<16} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10} {:>10}  space   ({elapsed:.1} s)",
        "filter", "blocks in", "bytes in", "blocks out", "bytes out", "drops", "made", "ended"
    )];
    for n in nodes {
        lines.push(format!(
            "{:<16} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10} {:>10}  {}",
            n.label,
            n.blocks_in,
            n.bytes_in,
            n.blocks_out,
            n.bytes_out,
            n.drops,
            n.made,
            n.ended,
            if n.space.is_empty() { "-" } else { &n.space }
        ));
    }
    lines
}

/// How `attach` shows each refresh: on a terminal, the table is redrawn in place as `top`
/// does (cursor home, each line cleared to its end, the rest of the screen cleared), the
/// screen cleared once before the first; anywhere else (a pipe, a file) each refresh is
/// printed as a plain table after the one before, no control sequences: a log of the
/// run's counters that scripts read.
fn render(table: &[String], terminal: bool, first: bool) -> String {
    if !terminal {
        return table.iter().map(|l| format!("{l}\n")).collect();
    }
    let mut s = String::from(if first { "\x1b[H\x1b[2J" } else { "\x1b[H" });
    for l in table {
        s += l;
        s += "\x1b[K\n";
    }
    s + "\x1b[J"
}

/// `streamline attach ID`: the run's counters as they come, until it ends (its exit
/// status is ours) or a stop signal: the first SIGINT (Ctrl-C), SIGTERM or SIGHUP
/// detaches at once with status 0, and the run goes on. See [`render`] for the screen.
pub fn attach(socket: Option<&str>, run: u64) -> ExitCode {
    let mut c = match need(socket) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // The receive below blocks until the next counters: the signal ends the process from
    // a thread of its own, at once (nothing of ours needs undoing; the daemon sees the
    // connection close and keeps the run).
    match signal_hook::iterator::Signals::new(crate::STOP_SIGNALS) {
        Ok(mut signals) => {
            let spawned = std::thread::Builder::new()
                .name("signals".into())
                .spawn(move || {
                    if signals.forever().next().is_some() {
                        use std::io::Write;
                        let _ = std::io::stdout().flush();
                        std::process::exit(0);
                    }
                });
            if let Err(e) = spawned {
                eprintln!("streamline: warning: cannot watch for stop signals: {e}");
            }
        }
        Err(e) => eprintln!("streamline: warning: cannot watch for stop signals: {e}"),
    }
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut first = true;
    wait_finished(&mut c, run, |r| {
        if let Reply::Counters {
            nodes, elapsed_s, ..
        } = r
        {
            use std::io::Write;
            let text = render(&counters_table(nodes, *elapsed_s), terminal, first);
            first = false;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    })
}

pub fn edit(socket: Option<&str>, run: u64, edit: &str) -> ExitCode {
    let mut c = match need(socket) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // Parsed here, once, into the typed edit (a mistake is shown with its caret before
    // anything is sent); the daemon checks it, the worker applies it.
    let op = match dataplane::Edit::parse_op(edit, &crate::resolver()) {
        Ok(op) => op,
        Err(e) => {
            // Said with its secrets redacted, as every message about a pipeline is.
            crate::error!("{}", filters::shown(edit).scrub(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    match c.call(Request::Edit {
        run,
        edit: op.into(),
    }) {
        Ok(Reply::Edited { applied, .. }) => {
            println!("{applied}");
            ExitCode::SUCCESS
        }
        Ok(other) => {
            crate::error!("unexpected answer {other:?}");
            ExitCode::from(1)
        }
        Err(e) => refused(e),
    }
}

/// `streamline web`: a one-time token for the daemon's web view, bound to this user by
/// the daemon (the kernel's credentials of this connection), and the URL that carries it.
pub fn web(socket: Option<&str>) -> ExitCode {
    let mut c = match need(socket) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match c.call(Request::Web {}) {
        Ok(Reply::Web { url }) => {
            eprintln!("streamline: open this URL in a browser on this host (it opens a session as you, once; the token in it is yours alone):");
            println!("{url}");
            ExitCode::SUCCESS
        }
        Ok(other) => {
            crate::error!("unexpected answer {other:?}");
            ExitCode::from(1)
        }
        Err(e) => refused(e),
    }
}
