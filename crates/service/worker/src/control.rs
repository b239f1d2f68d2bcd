//! The worker's run once the daemon said `go`: the control thread (stop, live edits,
//! taps), the reporter (graph and counters), the run itself, and its end.

use crate::report::{arcs, counters, send_graph};
use crate::Out;
use daemon::proto::{self, FromWorker, Msg};
use daemon::ToWorker;
use dataplane::spaces::Spaces;
use runplan::live::Edits;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the control thread and the run share.
#[derive(Clone)]
struct Shared {
    out: Out,
    edits: Arc<Edits>,
    interrupt: Arc<AtomicBool>,
    signal: Arc<AtomicI32>,
    /// The streams' mode, recomputed from the sources after each edit.
    mode: Arc<AtomicU32>,
}

/// Run `spaces` until they end or the daemon says stop; the exit status. `mode`: the
/// streams' mode as planned; `modes`: the policy's grants (a privileged source's mode).
pub fn run(
    sock: UnixStream,
    out: Out,
    spaces: Spaces,
    options: &proto::RunOptions,
    mode: u32,
    modes: &[(usize, u32)],
) -> u8 {
    let sh = Shared {
        out,
        edits: Edits::new(),
        interrupt: Arc::new(AtomicBool::new(false)),
        signal: Arc::new(AtomicI32::new(0)),
        mode: Arc::new(AtomicU32::new(mode)),
    };
    // A privileged source's mode is its grant's; sources the graph does not show keep
    // narrowing the mode.
    let granted = if modes.is_empty() {
        0o600
    } else {
        modes.iter().fold(0o777, |m, (_, g)| m & g)
    };
    {
        let sh = sh.clone();
        std::thread::Builder::new()
            .name("sl-worker-ctl".into())
            .spawn(move || listen(&sock, &sh, granted))
            .expect("start the worker's control thread");
    }
    let start = Instant::now();
    let (done, ended) = std::sync::mpsc::channel::<()>();
    let reporter = {
        let sh = sh.clone();
        std::thread::Builder::new()
            .name("sl-worker-report".into())
            .spawn(move || report(&sh, start, ended))
            .expect("start the worker's reporter thread")
    };
    let rep = sh
        .edits
        .run_adapting(spaces, options, &sh.interrupt, |_| {});
    drop(done);
    let _ = reporter.join();
    filters::nicfix::remove_run_pins();
    let elapsed = start.elapsed();
    runplan::report::print_report(&rep, elapsed, options.quiet);
    let code = runplan::report::exit_status(&rep, sh.signal.load(Ordering::SeqCst));
    let _ = sh.out.tell(FromWorker::Counters {
        elapsed_s: elapsed.as_secs_f64(),
        nodes: counters(&rep.nodes),
        arcs: arcs(&rep),
        sites: Vec::new(),
    });
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
        sh.out.failed(why, libc::EIO);
    }
    let _ = sh.out.tell(FromWorker::Finished { code: code as i32 });
    code
}

/// The control thread: the daemon's `stop`, edits and taps, until the socket closes
/// (the daemon is gone: stop as a hang-up would).
fn listen(sock: &UnixStream, sh: &Shared, granted: u32) {
    let mut hidden = None;
    loop {
        let body = match proto::recv::<ToWorker>(sock) {
            Ok((Msg { body, .. }, _)) => body,
            Err(_) => {
                sh.signal.store(libc::SIGHUP, Ordering::SeqCst);
                sh.interrupt.store(true, Ordering::SeqCst);
                return;
            }
        };
        match body {
            ToWorker::Stop { signal } => {
                // The signal before the flag: whoever sees the flag sees the signal.
                sh.signal.store(signal, Ordering::SeqCst);
                sh.interrupt.store(true, Ordering::SeqCst);
            }
            ToWorker::Edit {
                edit_id,
                edit,
                checked,
                expect,
            } => {
                // What the sources the graph does not show narrow the mode to.
                let hidden = *hidden.get_or_insert_with(|| {
                    let now = sh.mode.load(Ordering::Relaxed);
                    let seen = runplan::access::graph_mode(&sh.edits.graph(), granted, 0o777);
                    if seen == now {
                        0o777
                    } else {
                        now
                    }
                });
                let answer = sh.edits.apply(&edit, checked, &expect);
                if answer.is_ok() {
                    let m = runplan::access::graph_mode(&sh.edits.graph(), granted, hidden);
                    sh.mode.store(m, Ordering::Relaxed);
                }
                // The graph first: whoever sees the answer sees the graph it made.
                send_graph(&sh.out, &sh.edits, &sh.mode, &mut None);
                let (applied, text, errno) = match answer {
                    Ok(a) => (Some(a), String::new(), 0),
                    Err((errno, text)) => (None, text, errno),
                };
                let _ = sh.out.tell(FromWorker::Edited {
                    edit_id,
                    applied,
                    text,
                    errno,
                });
            }
            ToWorker::Tap {
                tap_req,
                node,
                filter,
            } => tap(sh, tap_req, &node, filter.as_ref()),
            ToWorker::Untap { tap } => sh.edits.untap(tap),
            _ => {}
        }
    }
}

/// A tap or a subscription: its two data segments go with the answer; the reader gets no
/// control segment of the shared rings, so it can never hold the run back. A subscriber
/// gets its own tag ring's control segment and wake-up eventfd too (that ring is FRP: its
/// writer never waits, so a registered reader only asks to be woken). The tap first (it
/// waits for the run loop, whose ticks send on the socket), then the answer.
fn tap(sh: &Shared, tap_req: u64, node: &str, filter: Option<&proto::TapFilter>) {
    let tapped = match filter {
        None => sh.edits.tap(node),
        Some(f) => sh.edits.subscribe(node, f),
    };
    let _ = match tapped {
        Ok(rings) => {
            use std::os::fd::AsRawFd;
            let tags = rings.tags.shared();
            let mut fds = vec![
                tags.fds()[0].as_raw_fd(),
                rings.data.shared().fds()[0].as_raw_fd(),
            ];
            if let (Some(_), Some(ctl), Some(wake)) = (filter, tags.fds().get(1), tags.wake_fd()) {
                fds.extend([ctl.as_raw_fd(), wake.as_raw_fd()]);
            }
            let ok = FromWorker::Tapped {
                tap_req,
                tap: rings.id,
                ok: true,
                text: String::new(),
                errno: 0,
            };
            sh.out.send(ok, &fds)
        }
        Err((errno, text)) => sh.out.tell(FromWorker::Tapped {
            tap_req,
            tap: 0,
            ok: false,
            text,
            errno,
        }),
    };
}

/// The reporter: the run's graph as soon as its spaces publish it (the daemon answers
/// `run --detach` once it has it: PipesFS shows the run's filters from it), then every
/// space's counters and any change of the graph every 200 ms until the run ends
/// (`ended` disconnects). A thread of its own, so that it reports whichever spaces the
/// run has (a run placed wholly in process spaces included).
fn report(sh: &Shared, start: Instant, ended: std::sync::mpsc::Receiver<()>) {
    let mut shown = None;
    let wait = |d: Duration| {
        !matches!(
            ended.recv_timeout(d),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        )
    };
    // The first graph: its spaces publish it as their run loops start (within
    // milliseconds); a run with no filter in this process has none.
    let first = Instant::now() + Duration::from_secs(5);
    while shown.is_none() && Instant::now() < first {
        if sh.edits.started() && !sh.edits.has_local_nodes() {
            break;
        }
        send_graph(&sh.out, &sh.edits, &sh.mode, &mut shown);
        if shown.is_none() && wait(Duration::from_millis(2)) {
            return;
        }
    }
    loop {
        let table = sh.edits.table();
        let _ = sh.out.tell(FromWorker::Counters {
            elapsed_s: start.elapsed().as_secs_f64(),
            nodes: counters(&table.nodes),
            arcs: arcs(&table),
            sites: table.sites.clone(),
        });
        send_graph(&sh.out, &sh.edits, &sh.mode, &mut shown);
        if wait(Duration::from_millis(200)) {
            return;
        }
    }
}
