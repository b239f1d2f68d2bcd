//! `streamline __worker --fd N`: one run of the daemon. The daemon starts it with the
//! client's standard streams and a socket pair; over the socket it learns the pipeline and
//! the client's identity, reports the build's verdict, waits for `go`, runs, sends the
//! counters now and then, applies live edits, and reports the exit status.
//!
//! Owns: taking the client's identity (supplementary groups and file-system ids, so every
//! file the run opens is opened as the client, whose permissions the kernel checks; Unix
//! commands run with the client's real ids), and the worker's side of the protocol
//! (`daemon::proto::{ToWorker, FromWorker}`).

use crate::{exit_status, prepare, print_report, Prepared};
use daemon::proto::{self, FromWorker, Msg, NodeCounters, ToWorker};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The client's identity, taken for file access and Unix commands. Root clients keep
/// root's. Must run before any thread is started (file-system ids are per thread, and
/// threads inherit them).
pub fn assume(uid: u32, gid: u32, groups: &[u32]) -> Result<(), String> {
    if uid == 0 {
        return Ok(());
    }
    let gs: Vec<nix::unistd::Gid> = groups
        .iter()
        .map(|g| nix::unistd::Gid::from_raw(*g))
        .collect();
    nix::unistd::setgroups(&gs).map_err(|e| format!("setgroups: {e}"))?;
    nix::unistd::setfsgid(nix::unistd::Gid::from_raw(gid));
    nix::unistd::setfsuid(nix::unistd::Uid::from_raw(uid));
    // setfs*id report no error: check they took.
    if nix::unistd::setfsuid(nix::unistd::Uid::from_raw(u32::MAX)).as_raw() != uid {
        return Err(format!("setfsuid({uid}) did not take"));
    }
    dataplane::builtin::run_unix_commands_as(dataplane::builtin::RunAs {
        uid,
        gid,
        groups: groups.to_vec(),
    })
    .map_err(|was| format!("Unix commands already run as uid {}", was.uid))?;
    Ok(())
}

/// `--as UID:GID:G1,G2` for process spaces (they take the identity too).
pub fn as_arg(uid: u32, gid: u32, groups: &[u32]) -> String {
    format!(
        "{uid}:{gid}:{}",
        groups
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

pub fn parse_as(s: &str) -> Result<(u32, u32, Vec<u32>), String> {
    let mut it = s.splitn(3, ':');
    let num = |v: Option<&str>| {
        v.and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| format!("--as {s}: expected UID:GID:GROUPS"))
    };
    let uid = num(it.next())?;
    let gid = num(it.next())?;
    let groups = it
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|g| !g.is_empty())
        .map(|g| {
            g.parse::<u32>()
                .map_err(|_| format!("--as {s}: bad group {g}"))
        })
        .collect::<Result<_, _>>()?;
    Ok((uid, gid, groups))
}

fn counters(nodes: &[dataplane::runtime::NodeReport]) -> Vec<NodeCounters> {
    nodes
        .iter()
        .map(|r| NodeCounters {
            label: r.label.clone(),
            blocks_in: r.counters.blocks_in,
            bytes_in: r.counters.bytes_in,
            blocks_out: r.counters.blocks_out,
            bytes_out: r.counters.bytes_out,
            drops: r.counters.drops,
            classes: r.classes.clone(),
        })
        .collect()
}

/// Send the graph if it changed since `shown` (always, with `shown` None and no memory:
/// after an edit).
fn send_graph(
    out: &Arc<Mutex<UnixStream>>,
    run: u64,
    edits: &crate::edits::Edits,
    mode: &AtomicU32,
    shown: &mut Option<Vec<proto::GraphNode>>,
) {
    let nodes = edits.graph();
    let mode = mode.load(Ordering::Relaxed);
    if shown.as_ref() == Some(&nodes) || nodes.is_empty() {
        return;
    }
    let s = out.lock().expect("not poisoned");
    if proto::send(
        &s,
        &Msg {
            id: run,
            body: FromWorker::Graph {
                nodes: nodes.clone(),
                mode,
            },
        },
        &[],
    )
    .is_ok()
    {
        *shown = Some(nodes);
    }
}

pub fn worker(fd: i32) -> ExitCode {
    crate::ignore_stop_signals();
    // No PR_SET_PDEATHSIG: it fires when the daemon's *thread* that started us ends (the
    // client's connection), not the daemon. When the daemon dies, our socket closes and
    // the control thread below stops the run as a hang-up would, cleaning up as it goes.
    let sock = match beltway::sys::inherited_unix_stream(fd) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("streamline __worker: descriptor {fd}: {e} (this command is started by streamlined)");
            return ExitCode::from(2);
        }
    };
    let (run, pipeline, options, uid, gid, groups, modes) = match proto::recv::<ToWorker>(&sock) {
        Ok((
            Msg {
                body:
                    ToWorker::Start {
                        run,
                        pipeline,
                        options,
                        uid,
                        gid,
                        groups,
                        modes,
                    },
                ..
            },
            _,
        )) => (run, pipeline, options, uid, gid, groups, modes),
        Ok(_) | Err(_) => return ExitCode::from(2),
    };
    let out = Arc::new(Mutex::new(
        sock.try_clone().expect("clone the daemon's socket"),
    ));
    let tell = move |out: &Arc<Mutex<UnixStream>>, m: FromWorker| {
        let s = out.lock().expect("not poisoned");
        proto::send(&s, &Msg { id: run, body: m }, &[])
    };
    if let Err(e) = assume(uid, gid, &groups) {
        let _ = tell(
            &out,
            FromWorker::Failed {
                message: format!("streamline: cannot take the identity of uid {uid}: {e}"),
                errno: libc::EPERM,
            },
        );
        return ExitCode::from(1);
    }
    let extra = if uid == 0 {
        vec![]
    } else {
        vec!["--as".to_string(), as_arg(uid, gid, &groups)]
    };
    let Prepared {
        spaces,
        placement,
        mode,
    } = match prepare(&pipeline, &options, &modes, &extra) {
        Ok(p) => p,
        Err(e) => {
            let _ = tell(
                &out,
                FromWorker::Failed {
                    message: e.message,
                    errno: libc::EINVAL,
                },
            );
            return ExitCode::from(e.code);
        }
    };
    if tell(
        &out,
        FromWorker::Built {
            placement: placement.clone(),
        },
    )
    .is_err()
    {
        return ExitCode::from(1);
    }
    // The transaction's end: `go` commits; `stop` (or the daemon going away) rolls the
    // built run back (dropping it undoes every construction step).
    match proto::recv::<ToWorker>(&sock) {
        Ok((
            Msg {
                body: ToWorker::Go {},
                ..
            },
            _,
        )) => {}
        _ => {
            drop(spaces);
            filters::nicfix::remove_run_pins();
            return ExitCode::SUCCESS;
        }
    }
    if !options.quiet && !placement.is_empty() {
        eprintln!("{placement}");
    }
    let interrupt = Arc::new(AtomicBool::new(false));
    let signal = Arc::new(AtomicI32::new(0));
    let edits = crate::edits::Edits::new();
    // The streams' mode, recomputed from the sources after each edit: a privileged
    // source's is its grant's; sources the graph does not show keep narrowing it.
    let mode = Arc::new(AtomicU32::new(mode));
    let granted = if modes.is_empty() {
        0o600
    } else {
        modes.iter().fold(0o777, |m, (_, g)| m & g)
    };
    {
        let (interrupt, signal, out, edits, mode) = (
            interrupt.clone(),
            signal.clone(),
            out.clone(),
            edits.clone(),
            mode.clone(),
        );
        let mut hidden = None;
        std::thread::Builder::new()
            .name("sl-worker-ctl".into())
            .spawn(move || loop {
                match proto::recv::<ToWorker>(&sock) {
                    Ok((
                        Msg {
                            body: ToWorker::Stop { signal: sig },
                            ..
                        },
                        _,
                    )) => {
                        // The signal before the flag: whoever sees the flag sees the signal.
                        signal.store(sig, Ordering::SeqCst);
                        interrupt.store(true, Ordering::SeqCst);
                    }
                    Ok((
                        Msg {
                            body:
                                ToWorker::Edit {
                                    edit_id,
                                    edit,
                                    expect,
                                },
                            ..
                        },
                        _,
                    )) => {
                        // What the sources the graph does not show narrow the mode to.
                        let hidden = *hidden.get_or_insert_with(|| {
                            let now = mode.load(Ordering::Relaxed);
                            let seen = crate::access::graph_mode(&edits.graph(), granted, 0o777);
                            if seen == now {
                                0o777
                            } else {
                                now
                            }
                        });
                        let answer = edits.apply(&edit, &expect);
                        if answer.is_ok() {
                            mode.store(
                                crate::access::graph_mode(&edits.graph(), granted, hidden),
                                Ordering::Relaxed,
                            );
                        }
                        // The graph first: whoever sees the answer sees the graph it made.
                        send_graph(&out, run, &edits, &mode, &mut None);
                        let (applied, text, errno) = match answer {
                            Ok(a) => (Some(a), String::new(), 0),
                            Err((errno, text)) => (None, text, errno),
                        };
                        let _ = tell(
                            &out,
                            FromWorker::Edited {
                                edit_id,
                                applied,
                                text,
                                errno,
                            },
                        );
                    }
                    Ok((
                        Msg {
                            body:
                                ToWorker::Tap {
                                    tap_req,
                                    node,
                                    filter,
                                },
                            ..
                        },
                        _,
                    )) => {
                        // The tap's two data segments go with the answer; the reader gets
                        // no control segment, so it can never hold the run back.
                        // The tap first (it waits for the run loop, whose ticks send on
                        // `out`), then the socket.
                        let tapped = match filter {
                            None => edits.tap(&node),
                            Some(f) => edits.subscribe(&node, &f),
                        };
                        let s = out.lock().expect("not poisoned");
                        let _ = match tapped {
                            Ok(rings) => {
                                use std::os::fd::AsRawFd;
                                let fds = [
                                    rings.tags.shared().fds()[0].as_raw_fd(),
                                    rings.data.shared().fds()[0].as_raw_fd(),
                                ];
                                proto::send(
                                    &s,
                                    &Msg {
                                        id: run,
                                        body: FromWorker::Tapped {
                                            tap_req,
                                            tap: rings.id,
                                            ok: true,
                                            text: String::new(),
                                            errno: 0,
                                        },
                                    },
                                    &fds,
                                )
                            }
                            Err((errno, text)) => proto::send(
                                &s,
                                &Msg {
                                    id: run,
                                    body: FromWorker::Tapped {
                                        tap_req,
                                        tap: 0,
                                        ok: false,
                                        text,
                                        errno,
                                    },
                                },
                                &[],
                            ),
                        };
                    }
                    Ok((
                        Msg {
                            body: ToWorker::Untap { tap },
                            ..
                        },
                        _,
                    )) => edits.untap(tap),
                    Ok(_) => {}
                    Err(_) => {
                        // The daemon is gone: stop as a hang-up would.
                        signal.store(libc::SIGHUP, Ordering::SeqCst);
                        interrupt.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            })
            .expect("start the worker's control thread");
    }
    let start = Instant::now();
    let mut last = start;
    let mut shown = None;
    let rep = edits.run_adapting(spaces, &options, &interrupt, |s| {
        if last.elapsed() >= Duration::from_millis(200) {
            last = Instant::now();
            let _ = tell(
                &out,
                FromWorker::Counters {
                    elapsed_s: start.elapsed().as_secs_f64(),
                    nodes: counters(&s.report()),
                },
            );
            send_graph(&out, run, &edits, &mode, &mut shown);
        }
    });
    filters::nicfix::remove_run_pins();
    let elapsed = start.elapsed();
    print_report(&rep, elapsed, options.quiet);
    let code = exit_status(&rep, signal.load(Ordering::SeqCst));
    let _ = tell(
        &out,
        FromWorker::Counters {
            elapsed_s: elapsed.as_secs_f64(),
            nodes: counters(&rep.nodes),
        },
    );
    let _ = tell(&out, FromWorker::Finished { code: code as i32 });
    ExitCode::from(code)
}
