//! A run as the daemon holds it: its worker (the socket pair to it, its process), its
//! state, what the worker last reported (counters, graph, arcs), and the answers owed to
//! edits and taps in flight. Owns: telling the worker, waiting for its reports, stopping
//! it, and what `ps` shows of a run ([`Run::info`], [`layout_now`]).

use crate::policy::Cred;
use crate::proto::{
    self, ArcCounters, EditApplied, GraphNode, Msg, NodeCounters, ProtoError, RunInfo, SpaceSite,
};
use crate::view::View;
use crate::ToWorker;
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Built, paused, part of its connection's open transaction.
    Built,
    Running,
    Finished(i32),
}

/// A run and its worker.
pub(crate) struct Run {
    pub(crate) id: u64,
    pub(crate) owner: Cred,
    pub(crate) user: String,
    /// The pipeline as it may be shown (`ps`, PipesFS, the log): secret parameters
    /// redacted (`catalog::shown`). Only the worker gets it as written.
    pub(crate) pipeline: String,
    /// The redaction of the pipeline, to scrub what the worker says (its messages may
    /// quote a secret value).
    pub(super) shown: lang::Redacted,
    pub(crate) placement: Mutex<String>,
    /// Where its filters were placed when it started, by space (`ps`'s PLACEMENT).
    pub(super) layout: Mutex<String>,
    /// Live edits applied, and the last one (as shown: secrets redacted).
    pub(super) edited: Mutex<(u64, String)>,
    pub(crate) started: Instant,
    pub(super) state: Mutex<State>,
    pub(super) changed: Condvar,
    /// To the worker (writes are whole frames under this lock).
    pub(super) ctl: Mutex<UnixStream>,
    pub(super) child: Mutex<Child>,
    /// The connection whose transaction it still is (until activated), or that ran it
    /// attached (stopped when that connection ends).
    pub(super) conn: AtomicU64,
    pub(super) detached: AtomicBool,
    /// Latest counters, when they came, and the sinks' block rate since the ones before.
    pub(crate) counters: Mutex<(f64, Vec<NodeCounters>, f64)>,
    /// Each node's blocks per second (in, or out for a source) since the counters before.
    pub(crate) rates: Mutex<Vec<(String, f64)>>,
    /// With the latest counters: the arcs between the nodes with what each carried and
    /// its channel's rings, and where each space runs.
    pub(crate) arcs: Mutex<(Vec<ArcCounters>, Vec<SpaceSite>)>,
    /// Connections attached to it: where to send events, and the attach request's id.
    pub(super) watchers: Mutex<Vec<(Arc<Mutex<UnixStream>>, u64)>>,
    /// Edits sent to the worker, waiting for its answer.
    pub(super) edits: Mutex<BTreeMap<u64, std::sync::mpsc::Sender<EditAnswer>>>,
    pub(super) next_edit: AtomicU64,
    /// The daemon's own view of the run's graph (what edits are checked against), and
    /// the lock that makes each edit one transaction: checked, applied, followed.
    pub(crate) view: Mutex<View>,
    pub(super) editing: Mutex<()>,
    /// The graph as the worker last described it, folded as its table is
    /// (`protocol::graph::fold_graph`), and its streams' mode.
    pub(crate) graph: Mutex<(Vec<GraphNode>, u32)>,
    /// Per node of the folded graph, the worker's node a tap on it taps.
    pub(super) tap_at: Mutex<Vec<(String, String)>>,
    /// Taps asked of the worker, waiting for its answer.
    pub(super) taps: Mutex<BTreeMap<u64, std::sync::mpsc::Sender<TapAnswer>>>,
    /// The worker has reported on the running run (graph or counters).
    pub(super) reported: AtomicBool,
    /// Why the run failed, as its worker said before it ended (a space died, a filter
    /// failed), scrubbed of secrets.
    pub(super) failure: Mutex<Option<String>>,
}

/// `ps`'s PLACEMENT: where each filter runs now, by space, from the run's live rows (one
/// per node the user wrote, with the spaces it runs in: the worker's table, so an edit
/// that inserts, removes or moves a filter shows at the next counters): `kernel:bpf
/// local:gen,count t1:deflate t2:deflate p3:sample` (kernel first, then by space id; space
/// 0 is the worker's own thread, `local`). Which filters run on the capture socket, the
/// kernel, is fixed when the run is built: the names `built` (the layout the worker gave
/// then) lists under `kernel:`. Before any row says where it runs: `built`.
pub(crate) fn layout_now(rows: &[NodeCounters], built: &str) -> String {
    if rows.is_empty() || rows.iter().all(|r| r.space.is_empty()) {
        return built.to_string();
    }
    // A row's filter: its label without `:name` or `#k`.
    let base = |l: &str| {
        let l = l.split(':').next().unwrap_or(l);
        l.split('#').next().unwrap_or(l).to_string()
    };
    let mut kernel: Vec<String> = built
        .split(' ')
        .filter_map(|g| g.strip_prefix("kernel:"))
        .flat_map(|names| names.split(','))
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    let in_kernel = kernel.clone();
    let mut groups: BTreeMap<(usize, String), Vec<String>> = BTreeMap::new();
    for r in rows {
        let name = base(&r.label);
        if let Some(i) = kernel.iter().position(|k| *k == name) {
            kernel.remove(i);
            continue;
        }
        for sp in r.space.split(',').filter(|s| !s.is_empty()) {
            let (id, shown) = match sp.strip_prefix('p') {
                Some(n) => (n.parse().unwrap_or(usize::MAX), sp.to_string()),
                None => match sp.parse::<usize>() {
                    Ok(0) => (0, "local".to_string()),
                    Ok(n) => (n, format!("t{n}")),
                    Err(_) => (usize::MAX, sp.to_string()),
                },
            };
            groups.entry((id, shown)).or_default().push(name.clone());
        }
    }
    // A space's rows come with its first report (a thread space's within ~100 ms, a
    // process space's within 200 ms): until then its filters are as built.
    for g in built.split(' ') {
        if let Some((sp, names)) = g.split_once(':') {
            let id = sp
                .strip_prefix('p')
                .or_else(|| sp.strip_prefix('t'))
                .and_then(|n| n.parse::<usize>().ok());
            if let Some(id) = id {
                if !groups.keys().any(|(_, s)| s == sp) {
                    groups.insert(
                        (id, sp.to_string()),
                        names.split(',').map(str::to_string).collect(),
                    );
                }
            }
        }
    }
    let mut parts = Vec::new();
    if !in_kernel.is_empty() {
        parts.push(format!("kernel:{}", in_kernel.join(",")));
    }
    parts.extend(
        groups
            .into_iter()
            .map(|((_, s), names)| format!("{s}:{}", names.join(","))),
    );
    parts.join(" ")
}

/// A worker's answer to an edit: what it applied, or the refusal's errno and why.
pub(crate) type EditAnswer = Result<EditApplied, (i32, String)>;

/// A worker's answer to `tap`: the tap's id and its two data segments, or errno and why.
pub(crate) type TapAnswer = Result<(u64, Vec<OwnedFd>), (i32, String)>;

impl Run {
    pub(super) fn tell(&self, m: ToWorker) -> Result<(), ProtoError> {
        self.tell_fds(m, &[])
    }

    /// [`Run::tell`] with descriptors (the client's working directory with `start`).
    pub(super) fn tell_fds(
        &self,
        m: ToWorker,
        fds: &[std::os::fd::RawFd],
    ) -> Result<(), ProtoError> {
        let s = self.ctl.lock().expect("not poisoned");
        proto::send(
            &s,
            &Msg {
                id: self.id,
                body: m,
            },
            fds,
        )
    }

    pub(crate) fn state(&self) -> State {
        *self.state.lock().expect("not poisoned")
    }

    /// The pipeline as it runs now: as given, or rendered from the daemon's view of the
    /// graph once an edit changed it.
    pub(crate) fn pipeline_now(&self) -> String {
        let v = self.view.lock().expect("not poisoned");
        if v.edited && !v.lost {
            v.text_now()
        } else if v.edited {
            format!("{} (edited since)", self.pipeline)
        } else {
            self.pipeline.clone()
        }
    }

    pub(crate) fn info(&self) -> RunInfo {
        let (_, mut nodes, rate) = self.counters.lock().expect("not poisoned").clone();
        if nodes.is_empty() {
            // Before its first counters: the nodes as its graph has them, at zero.
            nodes = self
                .graph
                .lock()
                .expect("not poisoned")
                .0
                .iter()
                .map(|g| NodeCounters {
                    label: g.label.clone(),
                    ..Default::default()
                })
                .collect();
        }
        let state = match self.state() {
            State::Built => "built".to_string(),
            State::Running if self.detached.load(Ordering::Relaxed) => {
                "running (detached)".to_string()
            }
            State::Running => "running".to_string(),
            State::Finished(c) => format!("finished ({c})"),
        };
        // One lock at a time: a guard in the struct below would live to its end.
        let (edits, last_edit) = self.edited.lock().expect("not poisoned").clone();
        RunInfo {
            run: self.id,
            uid: self.owner.uid,
            user: self.user.clone(),
            state,
            pipeline: self.pipeline_now(),
            placement: self.placement.lock().expect("not poisoned").clone(),
            layout: layout_now(&nodes, &self.layout.lock().expect("not poisoned")),
            edits,
            last_edit,
            uptime_s: self.started.elapsed().as_secs_f64(),
            rate,
            nodes,
        }
    }

    /// Wait until the worker has reported on the running run (its graph or counters) or
    /// the run ended, at most `limit`.
    pub(super) fn wait_reported(&self, limit: Duration) {
        self.wait_until(Instant::now() + limit, || {
            self.reported.load(Ordering::SeqCst)
        });
    }

    /// Wait until the run finished or `also` holds (checked under the state's lock, where
    /// `changed` is notified), at most until `until`; whether the run finished.
    pub(super) fn wait_until(&self, until: Instant, also: impl Fn() -> bool) -> bool {
        let mut st = self.state.lock().expect("not poisoned");
        while !matches!(*st, State::Finished(_)) && !also() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            st = self
                .changed
                .wait_timeout(st, until - now)
                .expect("not poisoned")
                .0;
        }
        matches!(*st, State::Finished(_))
    }

    /// The worker reported: wake whoever waits in [`Run::wait_reported`].
    pub(super) fn mark_reported(&self) {
        if !self.reported.swap(true, Ordering::SeqCst) {
            // Under the state's lock, so a waiter between its check and its wait is woken.
            let _st = self.state.lock().expect("not poisoned");
            self.changed.notify_all();
        }
    }

    /// Stop the worker: ask, then kill after `grace`.
    pub(super) fn stop(&self, signal: i32, grace: Duration) {
        let _ = self.tell(ToWorker::Stop { signal });
        if !self.wait_until(Instant::now() + grace, || false) {
            let _ = self.child.lock().expect("not poisoned").kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, space: &str) -> NodeCounters {
        NodeCounters {
            label: label.into(),
            space: space.into(),
            ..Default::default()
        }
    }

    #[test]
    fn placement_is_read_from_the_live_rows() {
        let built = "kernel:bpf local:rx,count t1:deflate t2:deflate p3:sample,null";
        // Before any row says where it runs: as built.
        assert_eq!(layout_now(&[], built), built);
        // An inserted dedup#2 on space 0, count removed; bpf stays in the kernel; the
        // process space's filters as built until its first counters.
        let rows = [
            row("rx", "0"),
            row("bpf", "0"),
            row("dedup#2", "0"),
            row("deflate", "1,2"),
        ];
        assert_eq!(
            layout_now(&rows, built),
            "kernel:bpf local:rx,dedup t1:deflate t2:deflate p3:sample,null"
        );
        let rows = [
            row("rx", "0"),
            row("bpf", "0"),
            row("deflate", "1,2"),
            row("sample", "p3"),
            row("null:end", "p3"),
        ];
        assert_eq!(
            layout_now(&rows, built),
            "kernel:bpf local:rx t1:deflate t2:deflate p3:sample,null"
        );
        // A thread space that has not reported yet (ps right after the start): as built.
        let rows = [row("rx", "0"), row("bpf", "0"), row("count", "0")];
        assert_eq!(layout_now(&rows, built), built);
    }
}
