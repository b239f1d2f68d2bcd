//! The run loop: source batches pulled round by round, the quiet point between them
//! ([`Quiet`]), sleeping on the readiness handle when nothing came, and the end of a run.

use super::*;
use crate::filter::Batch;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a space's run loop calls at its quiet point (between source batches: every batch
/// pulled so far has finished its walk, no block is in flight) and around the run. Whoever
/// needs the quiet point registers one through [`Hooks`]: the edit handle applies live edits
/// and moves filters between spaces there (`crate::edit::quiet`). The run loop knows
/// nothing of either.
pub trait Quiet {
    /// The run starts (the space has its readiness handle, if one could be made).
    fn start(&mut self, space: &mut Space);
    /// The quiet point, once per round of the loop.
    fn quiet(&mut self, space: &mut Space);
    /// Work waits for the next quiet point: the loop does not sleep.
    fn waiting(&self) -> bool;
    /// The counters changed: every tick, when the loop ended, and after the flushes.
    fn publish(&mut self, space: &Space);
    /// The loop ended, before the flushes: nothing more is taken from here on.
    fn close(&mut self, space: &mut Space);
}

/// Who registers a [`Quiet`] hook on a space's run loop (space `space` of the run).
pub trait Hooks {
    fn hook<'a>(&'a self, space: usize, factory: &'a dyn Factory) -> Option<Box<dyn Quiet + 'a>>;
}

impl Space {
    /// Run until every source is exhausted or `interrupt` is set (then channels from other
    /// spaces drain first, see [`Filter::drains`]). Calls `tick` now and then (progress
    /// display).
    pub fn run(&mut self, interrupt: &AtomicBool, tick: impl FnMut(&Space)) {
        self.run_loop(interrupt, None, tick);
    }

    /// [`Space::run`], with the hook `hooks` registers for space 0 (the edit handle's:
    /// live edits from its mailbox at the quiescent point between source batches;
    /// `factory` makes the filters they insert). The handle's counters are refreshed with
    /// `tick`'s period and after each edit; once the run ended, edits are refused with
    /// `EditError::Ended`.
    pub fn run_with(
        &mut self,
        interrupt: &AtomicBool,
        hooks: &dyn Hooks,
        factory: &dyn Factory,
        tick: impl FnMut(&Space),
    ) {
        let hook = hooks.hook(0, factory);
        self.run_loop(interrupt, hook, tick);
    }

    pub(crate) fn run_loop(
        &mut self,
        interrupt: &AtomicBool,
        mut hook: Option<Box<dyn Quiet + '_>>,
        mut tick: impl FnMut(&Space),
    ) {
        let sources: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].source)
            .collect();
        let mut last_tick = Instant::now();
        let mut batch = Batch::with_capacity(BATCH);
        // On interrupt: sources stop, but channels from other spaces drain until their
        // producers end (they stop their own sources and close), at most DRAIN_GRACE.
        let mut drain_until: Option<Instant> = None;
        if self.ready.is_none() {
            match crate::readiness::Readiness::new() {
                Ok(r) => self.ready = Some(r),
                Err(e) => self.warnings.push(format!(
                    "cannot make the space's readiness handle ({e}): idle rounds sleep 1 ms"
                )),
            }
        }
        if let Some(h) = hook.as_deref_mut() {
            h.start(self);
        }
        loop {
            // The quiescent point: every batch pulled so far has finished its walk.
            if let Some(h) = hook.as_deref_mut() {
                h.quiet(self);
            }
            let max = match &mut self.chaos {
                Some(c) => c.batch(BATCH),
                None => BATCH,
            };
            let mut active = false;
            let mut produced = false;
            let interrupted = interrupt.load(Ordering::Relaxed);
            if interrupted && drain_until.is_none() {
                drain_until = Some(Instant::now() + DRAIN_GRACE);
            }
            let draining = drain_until.is_some_and(|d| Instant::now() < d);
            for &s in &sources {
                if self.nodes[s].done
                    || self.stop.asked()
                    || (interrupted && !(draining && self.nodes[s].filter.drains()))
                {
                    continue;
                }
                batch.clear();
                self.restart_clock();
                let more = self.with_filter(s, |f, cx| f.pull(cx, &mut batch, max));
                self.charge(s);
                if !batch.is_empty() {
                    active = true;
                    produced = true;
                    let next = self
                        .spare_batch
                        .take()
                        .unwrap_or_else(|| Batch::with_capacity(BATCH));
                    let b = std::mem::replace(&mut batch, next);
                    self.emit(s, b, 0);
                    self.epoch_end();
                }
                if !more {
                    self.nodes[s].done = true;
                } else {
                    active = true;
                }
            }
            if !produced {
                for n in &mut self.nodes {
                    n.filter.idle();
                }
            }
            // Unix processes in the middle of a pipeline produce output asynchronously.
            let made = self.poll_unix(false);
            if last_tick.elapsed() > TICK {
                tick(self);
                if let Some(h) = hook.as_deref_mut() {
                    h.publish(self);
                }
                last_tick = Instant::now();
            }
            if !active || self.stop.asked() || (interrupted && !draining) {
                break;
            }
            let hook_waits = hook.as_deref().is_some_and(|h| h.waiting());
            if !produced && !made && !hook_waits {
                // Asleep until a source or an edit wakes it, the next tick at the latest
                // (and the end of the drain grace).
                let mut limit = TICK.saturating_sub(last_tick.elapsed());
                if let Some(d) = drain_until {
                    limit = limit.min(d.saturating_duration_since(Instant::now()));
                }
                self.sleep_until_ready(&sources, interrupted, draining, limit);
            }
        }
        // Edits that arrive from here on are refused: the run is ending.
        if let Some(h) = hook.as_deref_mut() {
            h.close(self);
        }
        // The counters as the loop ended, before the flushes and the wait for Unix
        // commands (which may take long: the live views show these meanwhile).
        self.ending = true;
        tick(self);
        if let Some(h) = hook.as_deref_mut() {
            h.publish(self);
        }
        self.finish_all();
        if let Some(h) = hook.as_deref_mut() {
            h.publish(self);
        }
    }

    /// Let every filter that holds blocks flush them (in graph order), then drain Unix
    /// processes; exported streams end (their readers see end of stream).
    pub(super) fn finish_all(&mut self) {
        self.finish_filters();
        self.close_exports();
    }

    pub(super) fn finish_filters(&mut self) {
        for i in self.graph_order() {
            let mut out = Batch::default();
            self.restart_clock();
            self.with_filter(i, |f, cx| f.finish(cx, &mut out));
            self.charge(i);
            if !out.is_empty() {
                self.emit(i, out, 0);
            }
            self.poll_unix_node(i, true);
        }
    }

    /// The nodes in graph order (each after every node with an arc into it; index order
    /// among equals, and for what a loop leaves): what a filter flushes at the end reaches
    /// nodes not yet finished, wherever an edit or a move put them in the node list.
    pub(super) fn graph_order(&self) -> Vec<usize> {
        let n = self.nodes.len();
        let mut ins = vec![0usize; n];
        for node in &self.nodes {
            for a in &node.out {
                ins[a.to] += 1;
            }
        }
        let mut ready: std::collections::BTreeSet<usize> =
            (0..n).filter(|&i| ins[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        let mut placed = vec![false; n];
        while order.len() < n {
            let i = match ready.pop_first() {
                Some(i) => i,
                // A loop: take the first node not yet placed.
                None => (0..n).find(|&i| !placed[i]).expect("a node left"),
            };
            if std::mem::replace(&mut placed[i], true) {
                continue;
            }
            order.push(i);
            for a in &self.nodes[i].out {
                ins[a.to] = ins[a.to].saturating_sub(1);
                if ins[a.to] == 0 && !placed[a.to] {
                    ready.insert(a.to);
                }
            }
        }
        order
    }

    /// Whether any made blocks.
    pub(super) fn poll_unix(&mut self, wait: bool) -> bool {
        let mut made = false;
        for i in 0..self.nodes.len() {
            made |= self.poll_unix_node(i, wait);
        }
        made
    }

    pub(crate) fn poll_unix_node(&mut self, i: usize, wait: bool) -> bool {
        let mut out = Batch::default();
        // Sources handle their own output through pull; others (mid-pipeline Unix
        // processes) are drained here.
        if self.nodes[i].source {
            return false;
        }
        self.with_filter(i, |f, cx| {
            f.pull(cx, &mut out, if wait { usize::MAX } else { BATCH * 16 })
        });
        if out.is_empty() {
            return false;
        }
        self.restart_clock();
        self.emit(i, out, 0);
        true
    }

    /// A round found nothing: ask every live source (and every filter that makes blocks
    /// on its own) what it waits for, and sleep once, on the space's readiness handle,
    /// until one of them is ready, a deadline passes or `limit` (see [`crate::readiness`]).
    /// A source that waits in its own `pull` keeps the space from sleeping here.
    pub(super) fn sleep_until_ready(
        &mut self,
        sources: &[usize],
        interrupted: bool,
        draining: bool,
        limit: Duration,
    ) {
        let Some(ready) = self.ready.as_mut() else {
            std::thread::sleep(Duration::from_millis(1).min(limit));
            return;
        };
        let stopping = self.stop.asked();
        let mut arm = ready.begin();
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if sources.contains(&i) {
                if n.done || stopping || (interrupted && !(draining && n.filter.drains())) {
                    continue;
                }
                n.filter.arm(&mut arm, true);
            } else if !n.source {
                n.filter.arm(&mut arm, false);
            }
        }
        let (decision, deadline) = crate::readiness::Readiness::decide(&arm);
        drop(arm);
        if decision == crate::readiness::Decision::Sleep {
            if let Err(e) = ready.sleep(deadline, limit) {
                let why =
                    format!("the space's readiness handle failed ({e}): idle rounds sleep 1 ms");
                self.ready = None;
                self.warnings.push(why);
            }
        }
    }

    /// What wakes the space while its run loop sleeps on its readiness handle (none before
    /// the run starts, or if the handle could not be made).
    pub(crate) fn waker(&self) -> Option<crate::readiness::Waker> {
        self.ready.as_ref().map(|r| r.waker())
    }

    /// A source batch has finished its whole walk through the graph.
    pub(crate) fn epoch_end(&mut self) {
        for i in 0..self.nodes.len() {
            self.with_filter(i, |f, cx| f.epoch_end(cx));
        }
    }

    /// `ticks` of the space's clock in nanoseconds.
    pub(crate) fn nanos(&self, ticks: u64) -> u64 {
        self.clock.delta_as_nanos(0, ticks)
    }
}
