//! A run's worker watched: its messages (built, counters, graph, answers, finished) read
//! until it ends, and the run's end recorded.

use super::*;

impl Daemon {
    /// Read a run's worker until it ends: counters, edit answers, the end.
    pub(super) fn monitor(self: Arc<Self>, run: Arc<Run>, reader: UnixStream) {
        let mut code = None;
        let mut last: Option<(f64, u64)> = None;
        while let Ok((Msg { body, .. }, fds)) = proto::recv::<FromWorker>(&reader) {
            match body {
                FromWorker::Counters {
                    elapsed_s,
                    nodes,
                    arcs,
                    sites,
                } => {
                    run.take_counters(&mut last, elapsed_s, &nodes);
                    if !arcs.is_empty() || !sites.is_empty() {
                        *run.arcs.lock().expect("not poisoned") = (arcs, sites);
                    }
                    self.notify(&run, |r| Reply::Counters {
                        run: r,
                        elapsed_s,
                        nodes: nodes.clone(),
                    });
                    run.mark_reported();
                }
                FromWorker::Edited {
                    edit_id: id,
                    applied,
                    text,
                    errno,
                } => {
                    if let Some(tx) = run.edits.lock().expect("not poisoned").remove(&id) {
                        let _ = tx.send(applied.ok_or((errno, run.shown.scrub(&text))));
                    }
                }
                FromWorker::Graph { nodes, mode } => run.take_graph(&nodes, mode),
                FromWorker::Tapped {
                    tap_req,
                    tap,
                    ok,
                    text,
                    errno,
                } => run.answer_tap(tap_req, tap, ok, fds, text, errno),
                FromWorker::Finished { code: c } => code = Some(c),
                FromWorker::Failed { message, .. } => {
                    // After `go`: why the run failed (it ends next).
                    *run.failure.lock().expect("not poisoned") = Some(run.shown.scrub(&message));
                }
                FromWorker::Built { .. } => {}
            }
        }
        let status = run.child.lock().expect("not poisoned").wait();
        let (code, end) = run.ending(code, status);
        self.record_end(&run, code, end);
    }

    /// A run has ended with `code` (`end`, as the log says it): logged; kept listed a
    /// while if it died or failed, saying why; its end remembered; its waiters and
    /// watchers told; and out of the table.
    fn record_end(&self, run: &Arc<Run>, code: i32, end: audit::End) {
        // A run that died or failed stays listed a while, saying why.
        let why = match &end {
            audit::End::Signal(sig) => Some(format!(
                "its worker was killed by signal {sig} ({})",
                audit::signal_name(*sig)
            )),
            audit::End::Exited(c) if run.state() == State::Running => Some(format!(
                "its worker exited with status {c} without reporting the run's end"
            )),
            audit::End::Failed(_, why) => Some(why.clone()),
            _ => None,
        };
        audit::ended(run.owner.uid, run.id, &run.pipeline, end);
        if let Some(why) = why {
            let mut info = run.info();
            info.state = format!("failed: {}", one_line_cut(&why, 400));
            let mut failed = self.failed.lock().expect("not poisoned");
            failed.push_back((Instant::now(), info));
            while failed.len() > FAILED_MAX {
                failed.pop_front();
            }
        }
        {
            let mut ended = self.ended.lock().expect("not poisoned");
            ended.retain(|(at, ..)| at.elapsed() < FAILED_KEPT);
            ended.push_back((Instant::now(), run.id, run.owner.uid, code));
            while ended.len() > ENDED_MAX {
                ended.pop_front();
            }
        }
        *run.state.lock().expect("not poisoned") = State::Finished(code);
        run.changed.notify_all();
        run.edits.lock().expect("not poisoned").clear();
        run.taps.lock().expect("not poisoned").clear();
        self.notify(run, |r| Reply::Finished { run: r, code });
        self.forget_run(run.id);
    }
}

impl Run {
    /// The worker's counters: kept (with when they came), and the rates since the last
    /// ones: the sinks' blocks per second (nodes without output; `last`: the sinks'
    /// count and time before) and each node's.
    fn take_counters(&self, last: &mut Option<(f64, u64)>, elapsed_s: f64, nodes: &[NodeCounters]) {
        // Rate: blocks into the sinks (nodes without output) per second.
        let sunk: u64 = nodes
            .iter()
            .filter(|n| n.blocks_out == 0)
            .map(|n| n.blocks_in)
            .sum();
        let rate = match *last {
            Some((t, b)) if elapsed_s > t => (sunk.saturating_sub(b)) as f64 / (elapsed_s - t),
            _ => 0.0,
        };
        *last = Some((elapsed_s, sunk));
        let mut c = self.counters.lock().expect("not poisoned");
        let dt = elapsed_s - c.0;
        let per = |n: &NodeCounters| n.blocks_in.max(n.blocks_out);
        let rates = nodes
            .iter()
            .map(|n| {
                (
                    n.label.clone(),
                    c.1.iter()
                        .find(|o| o.label == n.label)
                        .filter(|_| dt > 0.0)
                        .map_or(0.0, |o| per(n).saturating_sub(per(o)) as f64 / dt),
                )
            })
            .collect();
        *c = (elapsed_s, nodes.to_vec(), rate);
        *self.rates.lock().expect("not poisoned") = rates;
    }

    /// The worker's description of the run's graph, kept as shown: nothing reads it but
    /// PipesFS and `ps`. Folded as the table is (one node per node the user wrote, named
    /// as the user wrote it); a tap on one taps the member its output leaves from.
    fn take_graph(&self, nodes: &[GraphNode], mode: u32) {
        let nodes: Vec<GraphNode> = nodes.iter().map(shown_node).collect();
        let (nodes, taps) = protocol::graph::fold_graph(&nodes);
        *self.tap_at.lock().expect("not poisoned") = taps;
        *self.graph.lock().expect("not poisoned") = (nodes, mode);
        self.mark_reported();
    }

    /// The worker's answer to tap request `tap_req`: the tap and its two descriptors, or
    /// why not, to whoever waits for it. A tap nobody waits for any more is taken off.
    fn answer_tap(
        &self,
        tap_req: u64,
        tap: u64,
        ok: bool,
        fds: Vec<OwnedFd>,
        text: String,
        errno: i32,
    ) {
        // A plain tap: its two data segments; a subscription: those and its tag ring's
        // control segment and wake-up (see `Request::Capture`).
        let answer = match (ok, fds.len()) {
            (true, 2 | 4) => Ok((tap, fds)),
            (true, n) => Err((
                libc::EIO,
                format!("the worker sent {n} descriptors with a tap (2 or 4 expected)"),
            )),
            (false, _) => Err((if errno == 0 { libc::EIO } else { errno }, text)),
        };
        match self.taps.lock().expect("not poisoned").remove(&tap_req) {
            Some(tx) => {
                if let Err(std::sync::mpsc::SendError(Ok((tap, _)))) = tx.send(answer) {
                    // Nobody waits any more: take the tap off again.
                    let _ = self.tell(ToWorker::Untap { tap });
                }
            }
            None => {
                if let Ok((tap, _)) = answer {
                    let _ = self.tell(ToWorker::Untap { tap });
                }
            }
        }
    }

    /// How the run ended, from the code its worker reported (`reported`, if it did) and
    /// how the worker exited: the exit code and the end as the log says it.
    fn ending(
        &self,
        reported: Option<i32>,
        status: std::io::Result<std::process::ExitStatus>,
    ) -> (i32, audit::End) {
        let code = reported.unwrap_or_else(|| match status {
            Ok(s) => s.code().unwrap_or_else(|| {
                128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0)
            }),
            Err(_) => 1,
        });
        let signal = status
            .as_ref()
            .ok()
            .and_then(std::os::unix::process::ExitStatusExt::signal);
        let failure = self.failure.lock().expect("not poisoned").take();
        let end = match (self.state(), reported, signal) {
            (_, _, Some(sig)) => audit::End::Signal(sig),
            (State::Built, _, None) if code == 0 => audit::End::RolledBack,
            (_, Some(c), None) => match failure {
                Some(why) => audit::End::Failed(c, why),
                None => audit::End::Finished(c),
            },
            (_, None, None) => audit::End::Exited(code),
        };
        (code, end)
    }
}

/// A node of a run's graph as it may be shown (PipesFS `.filter`, `.options`): its text
/// redacted as `catalog::shown` does, and each secret option's value `<secret>`.
fn shown_node(n: &GraphNode) -> GraphNode {
    let name = n.filter.split_whitespace().next().unwrap_or("");
    GraphNode {
        filter: catalog::shown(&n.filter).text().to_string(),
        options: lang::redact_options(name, &n.options, &catalog::Natives),
        ..n.clone()
    }
}
