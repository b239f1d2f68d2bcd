//! Running built spaces: space 0 on the calling thread, thread spaces on pinned workers
//! with the scheduling their hints ask for, process spaces in their processes; an
//! interrupt or a dead space stops them all; the reports are collected into one
//! [`SpacesReport`] that names a space that died and its filters.

use super::build::{ChildSpace, Spaces};
use super::place::{space_name, SpaceId};
use super::protocol::{parse_report, recv_msg, report_text, send_msg, COUNTERS};
use super::report::SpacesReport;
use super::split::{EGRESS, INGRESS};
use crate::edit::EditHandle;
use crate::runtime::{Factory, Hooks, Quiet, Space};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Give the calling thread the scheduling its space's hints ask for; an error names the
/// filter and the hint (the system may refuse real-time policies without CAP_SYS_NICE).
pub(super) fn apply_schedule(
    sched: &Option<(beltway::sys::Policy, &'static str, String)>,
) -> Result<(), String> {
    let Some((policy, hint, label)) = sched else {
        return Ok(());
    };
    beltway::sys::set_scheduler(*policy).map_err(|e| {
        format!("{label}: {hint}: cannot set the scheduling policy {policy:?}: {e}")
    })?;
    if matches!(policy, beltway::sys::Policy::Fifo(_)) {
        beltway::sys::lock_memory()
            .map_err(|e| format!("{label}: {hint}: cannot lock memory: {e}"))?;
    }
    Ok(())
}

impl Spaces {
    /// `--chaos SEED`: every thread space of this process pulls source batches of random
    /// sizes and, at random batch boundaries, moves the filter next to one of its
    /// channels across it (down or up; see `crate::migrate`). The output must not change
    /// (placement invariance through migrations); only runs with an edit handle
    /// ([`Spaces::run_with`]) move filters.
    pub fn set_chaos(&mut self, seed: u64) {
        for (id, space) in &mut self.spaces {
            space.chaos = Some(crate::chaos::Chaos::new(seed, *id));
        }
    }

    /// Run every space to its end: space 0 on this thread (with `tick` for progress),
    /// thread spaces on pinned worker threads, process spaces in their processes.
    /// `interrupt` stops them all; so does a space that dies (a panicking filter, a killed
    /// process), which the report then names.
    pub fn run(self, interrupt: &AtomicBool, tick: impl FnMut(&Space)) -> SpacesReport {
        self.run_inner(interrupt, None, tick)
    }

    /// A handle through which other threads edit this run while it runs and read its
    /// counters ([`EditHandle`]); pass it to [`Spaces::run_with`]. Nodes in process
    /// spaces are known by name only, so that edits to them are refused saying why.
    pub fn edit_handle(&self) -> EditHandle {
        let local = self
            .spaces
            .iter()
            .map(|(id, s)| (*id, s.report()))
            .collect();
        let remote = self
            .children
            .iter()
            .map(|c| {
                (
                    c.id,
                    self.labels
                        .iter()
                        .filter(|l| l.0 == c.id)
                        .map(|l| l.1.clone())
                        .collect(),
                )
            })
            .collect();
        EditHandle::for_spaces(
            local,
            remote,
            self.spaces.len() + self.children.len() > 1,
            self.order.clone(),
        )
    }

    /// [`Spaces::run`], with live edits: each space of this process takes the edits
    /// `edits` routes to it at its own batch boundaries (its run loop checks its mailbox,
    /// one relaxed load per round), making new filters with `factory`, and publishes its
    /// counters to `edits` about every 100 ms.
    pub fn run_with(
        self,
        interrupt: &AtomicBool,
        edits: &EditHandle,
        factory: &(dyn Factory + Sync),
        tick: impl FnMut(&Space),
    ) -> SpacesReport {
        self.run_inner(interrupt, Some((edits, factory)), tick)
    }

    fn run_inner(
        self,
        interrupt: &AtomicBool,
        edits: Option<(&EditHandle, &(dyn Factory + Sync))>,
        mut tick: impl FnMut(&Space),
    ) -> SpacesReport {
        let hook = |id: SpaceId| edits.and_then(|(h, f)| h.hook(id, f as &dyn Factory));
        let multi = self.spaces.len() + self.children.len() > 1;
        let labels = self.labels;
        let placement = self.placement;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut rep = SpacesReport::default();
        let died = Mutex::new(Vec::<String>::new());
        let who = |id: SpaceId| {
            let filters: Vec<&str> = labels
                .iter()
                .filter(|l| l.0 == id)
                .map(|l| l.1.as_str())
                .collect();
            format!(
                "space {} ({})",
                space_name(&placement, id),
                filters.join(", ")
            )
        };
        for c in &self.children {
            if let Err(e) = send_msg(&c.sock, "go") {
                died.lock()
                    .expect("not poisoned")
                    .push(format!("{} died before it started: {e}", who(c.id)));
                stop_run(interrupt);
            }
        }
        let mut results: Vec<(SpaceId, Result<Space, String>)> = Vec::new();
        let child_reports = Mutex::new(Vec::<(SpaceId, String)>::new());
        let mut children = self.children;
        let stop_socks = children_socks(&children);
        let watching = std::sync::atomic::AtomicUsize::new(children.len());
        // What the stop forwarder below sleeps on (rung by a stop and by each watcher that
        // ends); without it, it looks every 20 ms.
        let stop_waiter = crate::readiness::StopWaiter::new().ok();
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            let mut local = None;
            for (id, space) in self.spaces {
                if id == 0 {
                    local = Some(space);
                    continue;
                }
                let sched = self.sched.get(&id).cloned().flatten();
                let died = &died;
                let hook = &hook;
                let h = std::thread::Builder::new()
                    .name(format!("sl-space{id}"))
                    .spawn_scoped(scope, move || {
                        let _ = beltway::sys::pin_to_cpu(id % cpus);
                        if let Err(e) = apply_schedule(&sched) {
                            died.lock().expect("not poisoned").push(e);
                            stop_run(interrupt);
                        }
                        run_caught(space, interrupt, hook(id), |_| {})
                    })
                    .expect("spawn a space thread");
                handles.push((id, h));
            }
            // Tell the process spaces to stop when the run is cut short (otherwise they
            // end by themselves when their inputs end).
            let watching = &watching;
            let stop_waiter = stop_waiter.as_ref();
            if !stop_socks.is_empty() {
                let stop_socks = &stop_socks;
                scope.spawn(move || forward_stop(interrupt, watching, stop_socks, stop_waiter));
            }
            // One watcher per process space: its counters while it runs (to the edit
            // handle, whose report the daemon's `ps` shows), then its report, or how it
            // died.
            let handle = edits.map(|(h, _)| h);
            for c in children.iter_mut() {
                let (died, child_reports, who) = (&died, &child_reports, &who);
                scope.spawn(move || {
                    let _done = Decrement(watching, stop_waiter);
                    watch_child(c, handle, interrupt, died, child_reports, who);
                });
            }
            if let Some(space) = local {
                // Space 0 runs on this thread: on CPU 0 while it does, as space N runs on
                // CPU N mod CPUs, so two spaces never share a CPU the scheduler happened
                // to give both (each would then wait for the other's time slice).
                let _pinned = (!handles.is_empty())
                    .then(|| beltway::sys::pin_scoped(0).ok())
                    .flatten();
                if let Err(e) = apply_schedule(&self.sched.get(&0).cloned().flatten()) {
                    died.lock().expect("not poisoned").push(e);
                    stop_run(interrupt);
                }
                // A panicking filter here ends the run as one in a thread space does
                // (named in the report) instead of unwinding through the caller: a
                // daemon's worker then reports why its run died.
                let r = run_caught(space, interrupt, hook(0), &mut tick);
                results.push((0, r.map_err(|p| panic_text(&p))));
            }
            for (id, h) in handles {
                let r = match h.join() {
                    Ok(Ok(space)) => Ok(space),
                    Ok(Err(p)) | Err(p) => Err(panic_text(&p)),
                };
                results.push((id, r));
            }
        });
        results.sort_by_key(|r| r.0);
        for (id, r) in results {
            match r {
                Ok(space) => add_space(&mut rep, id, &space, multi),
                Err(why) => died
                    .lock()
                    .expect("not poisoned")
                    .push(format!("{} died: {why}", who(id))),
            }
        }
        let mut reports = child_reports.into_inner().expect("not poisoned");
        reports.sort_by_key(|r| r.0);
        for (id, text) in reports {
            let mut part = SpacesReport::default();
            parse_report(&text, &mut part, &format!("@p{id}"));
            rep.nodes.extend(part.nodes);
            rep.arcs.extend(part.arcs);
            rep.heads.extend(part.heads);
            rep.warnings.extend(part.warnings);
            rep.failed |= part.failed;
            rep.status = rep.status.or(part.status);
        }
        rep.finish(multi, &self.order);
        let died = died.into_inner().expect("not poisoned");
        if !died.is_empty() {
            rep.died = Some(died.join("; "));
            rep.failed = true;
        }
        rep
    }
}

/// Stop every space of the run (a space died, or could not start as asked).
fn stop_run(interrupt: &AtomicBool) {
    interrupt.store(true, Ordering::Relaxed);
    crate::readiness::wake_all_spaces();
}

/// Run `space` until it ends, a panic caught: a panicking filter ends the run as one in a
/// thread space does, named in the report (a dead space stops the others; its channels
/// end when the unwinding drops them, so none stays blocked).
fn run_caught<'a>(
    mut space: Space,
    interrupt: &AtomicBool,
    hook: Option<Box<dyn Quiet + 'a>>,
    tick: impl FnMut(&Space),
) -> std::thread::Result<Space> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        space.run_loop(interrupt, hook, tick);
        space
    }));
    if r.is_err() {
        stop_run(interrupt);
    }
    r
}

/// Tell the process spaces to stop when the run is cut short (otherwise they end by
/// themselves when their inputs end), while any of their watchers runs.
fn forward_stop(
    interrupt: &AtomicBool,
    watching: &std::sync::atomic::AtomicUsize,
    stop_socks: &[UnixStream],
    stop_waiter: Option<&crate::readiness::StopWaiter>,
) {
    while watching.load(Ordering::Relaxed) > 0 {
        if interrupt.load(Ordering::Relaxed) {
            for c in stop_socks {
                let _ = send_msg(c, "stop");
            }
            return;
        }
        match stop_waiter {
            // Bounded: an interrupt set where nobody rings still counts.
            Some(w) => w.wait(std::time::Duration::from_millis(100)),
            None => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// One process space's watcher: its counters while it runs (to the edit handle, whose
/// report the daemon's `ps` shows), then its report, or how it died (which stops the run).
fn watch_child(
    c: &mut ChildSpace,
    handle: Option<&EditHandle>,
    interrupt: &AtomicBool,
    died: &Mutex<Vec<String>>,
    child_reports: &Mutex<Vec<(SpaceId, String)>>,
    who: &dyn Fn(SpaceId) -> String,
) {
    let msg = loop {
        match recv_msg(&c.sock) {
            Ok(text) if text.starts_with(COUNTERS) => {
                if let Some(h) = handle {
                    let mut part = SpacesReport::default();
                    parse_report(&text[COUNTERS.len()..], &mut part, &format!("@p{}", c.id));
                    h.publish_remote(c.id, part);
                }
            }
            other => break other,
        }
    };
    match msg {
        Ok(text) => {
            // Its final counters, for the live views until the run ends.
            if let Some(h) = handle {
                let mut part = SpacesReport::default();
                parse_report(&text, &mut part, &format!("@p{}", c.id));
                h.publish_remote(c.id, part);
            }
            let _ = c.proc.wait();
            child_reports
                .lock()
                .expect("not poisoned")
                .push((c.id, text));
        }
        Err(_) => {
            let st = c.proc.wait();
            let why = match st {
                Ok(st) => match st.signal() {
                    Some(sig) => format!(
                        "killed by signal {sig}{}",
                        if sig == 9 { " (SIGKILL)" } else { "" }
                    ),
                    None => format!("exited with {st} without a report"),
                },
                Err(e) => format!("lost: {e}"),
            };
            died.lock()
                .expect("not poisoned")
                .push(format!("{} died: {why}", who(c.id)));
            stop_run(interrupt);
        }
    }
}

/// Space `id`'s report (a thread space of this process, or space 0) into `rep`.
fn add_space(rep: &mut SpacesReport, id: SpaceId, space: &Space, multi: bool) {
    let suffix = if multi {
        format!("@{id}")
    } else {
        String::new()
    };
    let mut part = SpacesReport::default();
    parse_report(&report_text(space), &mut part, &suffix);
    // Keep the summaries' exact text (parse_report flattens lines).
    let summaries: Vec<Option<String>> = space
        .report()
        .into_iter()
        .filter(|n| !n.label.starts_with(EGRESS) && !n.label.starts_with(INGRESS))
        .map(|n| n.summary)
        .collect();
    for (n, s) in part.nodes.iter_mut().zip(summaries) {
        n.summary = s;
    }
    rep.nodes.extend(part.nodes);
    rep.arcs.extend(part.arcs);
    rep.heads.extend(part.heads);
    rep.warnings.extend(space.warnings().iter().cloned());
    rep.failed |= space.failed();
    rep.status = rep.status.or(space.exit_status());
    if let Some(c) = &space.chaos {
        rep.chaos_moves.0 += c.moves.0;
        rep.chaos_moves.1 += c.moves.1;
        rep.chaos_moves.2 += c.moves.2;
    }
}

/// Counts a watcher out when it ends, however it ends.
struct Decrement<'a>(
    &'a std::sync::atomic::AtomicUsize,
    Option<&'a crate::readiness::StopWaiter>,
);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        if let Some(w) = self.1 {
            w.ring();
        }
    }
}

fn children_socks(children: &[ChildSpace]) -> Vec<UnixStream> {
    children
        .iter()
        .filter_map(|c| c.sock.try_clone().ok())
        .collect()
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}
