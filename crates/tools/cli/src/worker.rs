//! `streamline __worker --fd N`: one run of the daemon. The daemon starts it with the
//! client's standard streams and a socket pair; over the socket it learns the pipeline and
//! the client's identity, reports the build's verdict, waits for `go`, runs, sends the
//! counters now and then, applies live edits, and reports the exit status.
//!
//! Owns: checking that it runs with its client's identity and nothing more (the daemon
//! executes it so, `daemon::spawn`: every file the run opens, socket it binds and command
//! it starts is checked by the kernel against the client's rights), taking the sockets the
//! daemon lent it (`kernel::lend`), and the worker's side of the protocol
//! (`daemon::proto::{ToWorker, FromWorker}`).

use crate::{exit_status, prepare, print_report, Prepared};
use daemon::proto::{self, FromWorker, Msg, NodeCounters, ToWorker};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Check that this worker runs as its client holds it (issue 33): the daemon executed it
/// with the client's real, effective and saved ids and groups, no capability in any set
/// and `no_new_privs` (`daemon::spawn`), so every file the run opens, every socket it
/// binds and every command it starts is checked by the kernel against the client's
/// rights. A root client's worker keeps root. Refuses to run when the demotion did not
/// take, rather than run with more than the client has.
pub fn assume(uid: u32, gid: u32, groups: &[u32]) -> Result<(), String> {
    if uid == 0 {
        return Ok(());
    }
    let r = nix::unistd::getresuid().map_err(|e| format!("getresuid: {e}"))?;
    let g = nix::unistd::getresgid().map_err(|e| format!("getresgid: {e}"))?;
    let ids = [r.real.as_raw(), r.effective.as_raw(), r.saved.as_raw()];
    let gids = [g.real.as_raw(), g.effective.as_raw(), g.saved.as_raw()];
    if ids != [uid; 3] || gids != [gid; 3] {
        return Err(format!(
            "the worker runs with uids {ids:?} and gids {gids:?}, not the client's {uid}/{gid}"
        ));
    }
    let mut mine: Vec<u32> = nix::unistd::getgroups()
        .map_err(|e| format!("getgroups: {e}"))?
        .iter()
        .map(|g| g.as_raw())
        .collect();
    let mut want = groups.to_vec();
    mine.sort_unstable();
    want.sort_unstable();
    mine.dedup();
    want.dedup();
    if mine != want {
        return Err(format!(
            "the worker has groups {mine:?}, not the client's {want:?}"
        ));
    }
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    for (key, want) in [
        ("CapInh:", "0000000000000000"),
        ("CapPrm:", "0000000000000000"),
        ("CapEff:", "0000000000000000"),
        ("CapAmb:", "0000000000000000"),
        ("CapBnd:", "0000000000000000"),
        ("NoNewPrivs:", "1"),
    ] {
        let got = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .unwrap_or("?");
        if got != want {
            return Err(format!("the worker's {key} is {got}, not {want}"));
        }
    }
    Ok(())
}

/// The sockets the daemon lent this run (`kernel::lend`): a non-root client's worker
/// takes its privileged sockets from there only, and its graph passes place on them only
/// the filters locked there already.
fn take_lent(uid: u32, lent: Vec<proto::LentSocket>) -> Result<(), String> {
    if uid == 0 {
        return Ok(());
    }
    let lent = lent
        .into_iter()
        .map(|l| {
            let kind = kernel::lend::Kind::parse(&l.kind)
                .ok_or_else(|| format!("a lent socket of kind {:?}", l.kind))?;
            Ok((
                kernel::lend::Described {
                    kind,
                    dev: l.dev,
                    filter: l.filter,
                },
                l.fd,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    kernel::lend::install(lent).map_err(|e| format!("the lent sockets: {e}"))
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
            made: r.counters.made,
            ended: r.counters.ended,
            classes: r.classes.clone(),
            space: r.space.clone(),
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
            crate::error!("worker: descriptor {fd}: {e} (this command is started by streamlined)");
            return ExitCode::from(2);
        }
    };
    let (run, pipeline, options, uid, gid, groups, modes, lent, context, mut fds) =
        match proto::recv::<ToWorker>(&sock) {
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
                            lent,
                            context,
                        },
                    ..
                },
                fds,
            )) => (
                run, pipeline, options, uid, gid, groups, modes, lent, context, fds,
            ),
            Ok(_) | Err(_) => return ExitCode::from(2),
        };
    let out = Arc::new(Mutex::new(
        sock.try_clone().expect("clone the daemon's socket"),
    ));
    let tell = move |out: &Arc<Mutex<UnixStream>>, m: FromWorker| {
        let s = out.lock().expect("not poisoned");
        proto::send(&s, &Msg { id: run, body: m }, &[])
    };
    if let Err(e) = assume(uid, gid, &groups).and_then(|()| take_lent(uid, lent)) {
        let _ = tell(
            &out,
            FromWorker::Failed {
                message: format!("streamline: the worker of uid {uid} refuses to run: {e}"),
                errno: libc::EPERM,
            },
        );
        return ExitCode::from(1);
    }
    if let Err(e) = crate::context::take(&context, fds.pop(), uid) {
        let _ = tell(
            &out,
            FromWorker::Failed {
                message: format!("streamline: the client's context: {e}"),
                errno: e.errno(),
            },
        );
        return ExitCode::from(1);
    }
    let extra: Vec<String> = vec![];
    let Prepared {
        spaces,
        placement,
        mode,
        layout,
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
            layout,
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
    // The reporter: the run's graph as soon as its spaces publish it (the daemon answers
    // `run --detach` once it has it: PipesFS shows the run's filters from it), then every
    // space's counters and any change of the graph every 200 ms until the run ends. A
    // thread of its own, so that it reports whichever spaces the run has (a run placed
    // wholly in process spaces included).
    let (done, ended) = std::sync::mpsc::channel::<()>();
    let reporter = {
        let (out, edits, mode) = (out.clone(), edits.clone(), mode.clone());
        std::thread::Builder::new()
            .name("sl-worker-report".into())
            .spawn(move || {
                let mut shown = None;
                let wait = |d: Duration| {
                    !matches!(
                        ended.recv_timeout(d),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    )
                };
                // The first graph: its spaces publish it as their run loops start
                // (within milliseconds); a run with no filter in this process has none.
                let first = Instant::now() + Duration::from_secs(5);
                while shown.is_none() && Instant::now() < first {
                    if edits.started() && !edits.has_local_nodes() {
                        break;
                    }
                    send_graph(&out, run, &edits, &mode, &mut shown);
                    if shown.is_none() && wait(Duration::from_millis(2)) {
                        return;
                    }
                }
                loop {
                    let _ = tell(
                        &out,
                        FromWorker::Counters {
                            elapsed_s: start.elapsed().as_secs_f64(),
                            nodes: counters(&edits.table().nodes),
                        },
                    );
                    send_graph(&out, run, &edits, &mode, &mut shown);
                    if wait(Duration::from_millis(200)) {
                        return;
                    }
                }
            })
            .expect("start the worker's reporter thread")
    };
    let rep = edits.run_adapting(spaces, &options, &interrupt, |_| {});
    drop(done);
    let _ = reporter.join();
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
    if code == 1 {
        // The run failed (a space died, a filter failed): the daemon shows why in `ps`
        // (`failed: REASON`) and its log, whoever reads this run's standard error.
        let why = rep.died.clone().unwrap_or_else(|| {
            if rep.warnings.is_empty() {
                "a filter failed".to_string()
            } else {
                rep.warnings.join("; ")
            }
        });
        let _ = tell(
            &out,
            FromWorker::Failed {
                message: why,
                errno: libc::EIO,
            },
        );
    }
    let _ = tell(&out, FromWorker::Finished { code: code as i32 });
    ExitCode::from(code)
}
