//! Moving a running filter between two spaces of this process (seed 003's migration;
//! thesis 5.2's placement, changed while the run runs), with no block lost, duplicated or
//! reordered.
//!
//! A filter moves across a channel it is next to: the last live node before a channel
//! moves *down* into the consuming space, the first live node after one moves *up* into
//! the producing space. The filter instance moves, not a copy: its state, its session
//! slots, its counters and exported stream go with it, so the run is the run it
//! would have been had the filter been placed there from the start.
//!
//! # How: an in-band marker
//!
//! The channel itself orders the move. At its batch boundary (no block in flight in the
//! space) the producer writes a *marker* into the channel after every block sent so far;
//! the consumer's ingress stops in front of it and delivers nothing more until its space,
//! at its own batch boundary, has done what the marker asks ([`Space::serve_markers`]).
//! What the marker asks waits on the run's [`Board`], under the marker's number:
//!
//! - **down**: the producer takes the filter out (a pass-through stays in its place),
//!   puts it on the board, and writes the marker. Blocks before the marker were the
//!   filter's output, blocks after it its input; the consumer puts the filter right after
//!   its ingress when it reaches the marker. The producer never stops.
//! - **up**: the producer puts a request on the board, writes the marker and waits at its
//!   boundary (it produces nothing meanwhile); the consumer, at the marker (every block
//!   before it has gone through the filter there), takes the filter out and hands it
//!   back; the producer puts it right before its egress and goes on.
//!
//! Selectors stay with the filter whose classes they read: the arcs between the filter
//! and the channel carry what its output's selectors admit, so they move with it; where
//! two of them meet on one arc, a pass-through node carries the second.
//!
//! # What may move
//!
//! A native filter (not a source, a split, a join or a Unix command) with one input and
//! one output (its exported streams' nodes aside: they move with it, `crate::export`; a
//! tap is an output, so a tapped filter stays), next to a channel between two thread spaces of this process, that holds no
//! blocks across batches ([`Factory::keeps_blocks`]: its held tags name the old space's
//! memory). Anything else is refused with [`Refusal::Immovable`], and nothing changes.
//!
//! Owns: the board, the surgery on both spaces, the marker handling in the run loop, and
//! `--chaos` (random moves at random batch boundaries, for the placement-invariance test).
//! Does not own: the marker's encoding (`channel`), deciding what to move (`control::adapt`).

use crate::chaos::Chaos;
use crate::edit::error::{EditError, Refusal};
use crate::runtime::{endpoint_of, Arc_, Carried, Factory, RtNode, Space};
use lang::{NodeKind, Selector};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// A filter taken out of one space, on its way to another: the node, and the selectors
/// of the arcs between it and the channel (in the order blocks meet them).
pub(crate) struct Moved {
    node: RtNode,
    sels: Vec<Selector>,
    /// The selector of its own output arc when it moves up (the arc it leaves behind
    /// passes all): it goes on the arc out of the filter in its new space, so what the
    /// selector drops is counted as the filter's drops wherever the filter runs.
    after: Vec<Selector>,
    /// What its output arc carried so far (its arc in the new space goes on counting).
    carried: Carried,
    /// The channel it crosses.
    ch: usize,
    /// Its exported streams' nodes (`crate::export`): they go with it.
    exports: Vec<RtNode>,
}

type UpReply = mpsc::Sender<Result<Moved, EditError>>;

/// What a marker asks of the consumer.
enum Deposit {
    Down(Moved),
    Up {
        expect: Option<String>,
        reply: UpReply,
    },
}

/// The run's moves in transit, by marker number (one board per run, shared by its
/// spaces' mailboxes).
#[derive(Default)]
pub(crate) struct Board {
    next: AtomicU64,
    slots: Mutex<HashMap<u64, Deposit>>,
}

impl Board {
    fn put(&self, d: Deposit) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, d);
        id
    }
    fn take(&self, id: u64) -> Option<Deposit> {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
    }
    /// Filters sent down channels `chs` whose consumer ended before it reached their
    /// markers (an interrupted run): the consumer takes them in, to finish and report
    /// them.
    pub(crate) fn stranded(&self, chs: &[usize]) -> Vec<(RtNode, Vec<RtNode>)> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<u64> = slots
            .iter()
            .filter(|(_, d)| matches!(d, Deposit::Down(m) if chs.contains(&m.ch)))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| match slots.remove(&id) {
                Some(Deposit::Down(m)) => Some((m.node, m.exports)),
                _ => None,
            })
            .collect()
    }
}

fn refused(label: &str, why: impl Into<String>) -> EditError {
    EditError::Refused {
        label: label.to_string(),
        why: Refusal::Immovable(why.into()),
    }
}

impl Space {
    /// The node of channel `ch`'s producing (`egress`) or consuming end in this space.
    fn endpoint(&self, egress: bool, ch: usize) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| endpoint_of(n) == Some((egress, ch)))
    }

    /// Whether live node `x` may move (see the module documentation).
    fn check_movable(&self, x: usize, factory: &dyn Factory) -> Result<(), EditError> {
        let n = &self.nodes[x];
        let why = match &n.spec.kind {
            _ if n.source => Some("it is a source".to_string()),
            NodeKind::Filter { filter, .. } if factory.keeps_blocks(filter) => Some(format!(
                "{filter} holds blocks across batches, and they name this space's memory"
            )),
            NodeKind::Filter { .. } if n.routes_by_class => Some("it is a split".into()),
            NodeKind::Filter { .. } => None,
            NodeKind::Unix { .. } => Some("it is a Unix command".into()),
            NodeKind::Join { .. } => Some("it is a template's join".into()),
            NodeKind::Split { .. } => Some("it is a template's split".into()),
        }
        .or_else(|| {
            // Its exported streams go with it (`take_out`); a tap does not.
            let outs = n.out.len() - self.exports_of(x).len();
            (outs != 1).then(|| format!("it has {outs} outputs"))
        })
        .or_else(|| {
            let ins = self.in_arcs(x).len();
            (ins != 1).then(|| format!("it has {ins} inputs"))
        });
        match why {
            Some(why) => Err(refused(&n.label, why)),
            None => Ok(()),
        }
    }

    /// A label for a node arriving here: its own if no live node here has it, else the
    /// next free one of its base (`count#3`).
    fn arrival_label(&self, node: &RtNode) -> String {
        let taken = |l: &str| self.nodes.iter().any(|m| !m.removed && m.label == l);
        if !taken(&node.label) {
            return node.label.clone();
        }
        let base = crate::runtime::base_name(&node.spec);
        (2..)
            .map(|k| crate::runtime::label_of(&base, None, k))
            .find(|l| !taken(l))
            .expect("a free label")
    }

    /// Take the filter before channel `ch`'s egress out for the consumer (down), leaving
    /// a pass-through; `expect`: the label it must have.
    fn detach_before_egress(
        &mut self,
        ch: usize,
        expect: Option<&str>,
        factory: &dyn Factory,
    ) -> Result<Moved, EditError> {
        let what = expect.unwrap_or("the filter before the channel");
        let e = self
            .endpoint(true, ch)
            .ok_or_else(|| refused(what, format!("channel {ch} does not leave this space")))?;
        // Up from the egress through pass-throughs to the live node feeding it.
        let mut path = Vec::new();
        let mut v = e;
        let x = loop {
            let ins = self.in_arcs(v);
            let [(f, k)] = ins[..] else {
                return Err(refused(what, "the channel has several inputs here"));
            };
            path.push((f, k));
            if !self.nodes[f].removed {
                break f;
            }
            if self.nodes[f].out.len() != 1 {
                return Err(refused(what, "a removed node before the channel branches"));
            }
            v = f;
        };
        if let Some(l) = expect.filter(|l| *l != self.nodes[x].label) {
            return Err(refused(
                l,
                format!(
                    "it does not feed channel {ch} ({} does)",
                    self.nodes[x].label
                ),
            ));
        }
        self.check_movable(x, factory)?;
        path.reverse();
        Ok(self.take_out(x, &path, ch))
    }

    /// Take live node `x` out for a move across channel `ch`, leaving a pass-through in
    /// its place (bypassed where it can be); the selectors of the arcs `path` (between it
    /// and the channel, in the order blocks take them) go with it, the arcs pass all.
    fn take_out(&mut self, x: usize, path: &[(usize, usize)], ch: usize) -> Moved {
        let exports = self.take_exports(x);
        let sels = path
            .iter()
            .map(|&(f, k)| std::mem::replace(&mut self.nodes[f].out[k].sel, Selector::All))
            .collect();
        let (label, spec, mut out) = (
            self.nodes[x].label.clone(),
            self.nodes[x].spec.clone(),
            std::mem::take(&mut self.nodes[x].out),
        );
        // The filter's output selector and its arc's count go with it; the arc left to
        // the pass-through passes all and counts afresh (a movable filter has one output).
        let mut carried = Carried::default();
        let mut after = Vec::new();
        for a in &mut out {
            carried.blocks += a.carried.blocks;
            carried.bytes += a.carried.bytes;
            a.carried = Carried::default();
            after.push(std::mem::replace(&mut a.sel, Selector::All));
        }
        let node = std::mem::replace(&mut self.nodes[x], RtNode::pass_through(label, spec, out));
        self.bypass(x);
        Moved {
            node,
            sels,
            after,
            carried,
            ch,
            exports,
        }
    }

    /// Put a filter that came down channel `ch` right after its ingress.
    fn attach_after_ingress(&mut self, i: usize, m: Moved) {
        let Moved {
            mut node,
            sels,
            after,
            carried,
            exports,
            ..
        } = m;
        node.label = self.arrival_label(&node);
        node.done = false;
        node.out.clear();
        // The ingress's arc may carry a selector (one a move left there): it reads the
        // moved filter's output, after `sels`. The ingress feeds the filter first.
        let x = self.add_node(node);
        let Arc_ {
            to, in_index, sel, ..
        } = self.replace_arc(i, 0, x, Selector::All, 0);
        let mut sels = sels;
        sels.extend(after);
        sels.push(sel);
        self.link(x, sels, to, in_index);
        self.nodes[x].out[0].carried = carried;
        self.put_exports(x, exports);
    }

    /// Take the filter after ingress `i` out for the producer (up), leaving a
    /// pass-through that keeps its output's selectors; `expect`: the label it must have.
    fn detach_after_ingress(
        &mut self,
        i: usize,
        expect: Option<&str>,
        factory: &dyn Factory,
    ) -> Result<Moved, EditError> {
        let what = expect.unwrap_or("the filter after the channel");
        let mut path = Vec::new();
        let mut v = i;
        let y = loop {
            let [ref a] = self.nodes[v].out[..] else {
                return Err(refused(what, "the channel branches here"));
            };
            path.push((v, 0usize));
            let to = a.to;
            if !self.nodes[to].removed {
                break to;
            }
            if self.in_arcs(to).len() != 1 {
                return Err(refused(
                    what,
                    "a removed node after the channel has other inputs",
                ));
            }
            v = to;
        };
        if let Some(l) = expect.filter(|l| *l != self.nodes[y].label) {
            return Err(refused(
                l,
                format!(
                    "it does not read the channel ({} does)",
                    self.nodes[y].label
                ),
            ));
        }
        self.check_movable(y, factory)?;
        let ch = endpoint_of(&self.nodes[i]).map_or(usize::MAX, |e| e.1);
        Ok(self.take_out(y, &path, ch))
    }

    /// Put `node` right before egress `e`: the arc into the egress, then `before`, then
    /// the node, then `after`, then the egress. Returns its label.
    fn attach_before_egress(
        &mut self,
        e: usize,
        (mut node, exports): (RtNode, Vec<RtNode>),
        before: Vec<Selector>,
        after: Vec<Selector>,
        carried: Carried,
    ) -> String {
        node.label = self.arrival_label(&node);
        node.out.clear();
        let label = node.label.clone();
        let [(z, k)] = self.in_arcs(e)[..] else {
            unreachable!("an egress has one input (checked before the marker was written)")
        };
        // z's arc into the egress now leads to the node, through its old selector and
        // `before` (in its place among z's arcs, its count going on).
        let (sel, in_index) = (
            self.nodes[z].out[k].sel.clone(),
            self.nodes[z].out[k].in_index,
        );
        let y = self.add_node(node);
        let mut all = vec![sel];
        all.extend(before);
        self.relink(z, k, all, y, 0);
        self.link(y, after, e, in_index);
        self.nodes[y].out[0].carried = carried;
        self.put_exports(y, exports);
        label
    }

    /// Write marker `id` into egress `e`'s channel.
    fn mark(&mut self, e: usize, id: u64) -> Result<(), String> {
        match self.nodes[e].filter.as_channel_end() {
            Some(c) => c.mark(id).map_err(|x| x.to_string()),
            None => Err("the endpoint is not a channel of this run".into()),
        }
    }

    /// Move the filter before channel `ch` down into the consuming space (see the module
    /// documentation). Returns its label. Only at a batch boundary.
    pub(crate) fn send_down(
        &mut self,
        ch: usize,
        expect: Option<&str>,
        board: &Board,
        factory: &dyn Factory,
    ) -> Result<String, EditError> {
        let e = self.endpoint(true, ch).ok_or_else(|| {
            refused(
                expect.unwrap_or("?"),
                format!("channel {ch} does not leave this space"),
            )
        })?;
        if self.nodes[e]
            .filter
            .as_channel_end()
            .is_none_or(|c| c.consumer_gone())
        {
            return Err(refused(
                expect.unwrap_or("the filter before the channel"),
                format!("channel {ch}'s consumer has ended"),
            ));
        }
        let m = self.detach_before_egress(ch, expect, factory)?;
        let label = m.node.label.clone();
        let e = self.endpoint(true, ch).expect("found by the detach");
        let id = board.put(Deposit::Down(m));
        if let Err(why) = self.mark(e, id) {
            // The channel is dead: the filter stays here, before it, its output's
            // selectors after it (where they were).
            if let Some(Deposit::Down(Moved {
                node,
                mut sels,
                after,
                carried,
                exports,
                ..
            })) = board.take(id)
            {
                sels.extend(after);
                self.attach_before_egress(e, (node, exports), vec![], sels, carried);
            }
            return Err(refused(&label, format!("channel {ch}: {why}")));
        }
        Ok(label)
    }

    /// Move the filter after channel `ch` (in the consuming space) up into this space:
    /// write a marker, wait here until the consumer hands the filter back, put it before
    /// the egress. Returns its label.
    pub(crate) fn pull_up(
        &mut self,
        ch: usize,
        expect: Option<&str>,
        board: &Board,
    ) -> Result<String, EditError> {
        let what = expect.unwrap_or("the filter after the channel");
        let e = self
            .endpoint(true, ch)
            .ok_or_else(|| refused(what, format!("channel {ch} does not leave this space")))?;
        if self.in_arcs(e).len() != 1 {
            return Err(refused(what, "the channel has several inputs here"));
        }
        let (tx, rx) = mpsc::channel();
        let id = board.put(Deposit::Up {
            expect: expect.map(str::to_string),
            reply: tx,
        });
        if let Err(why) = self.mark(e, id) {
            board.take(id);
            return Err(refused(what, format!("channel {ch}: {why}")));
        }
        let got = loop {
            match rx.recv_timeout(Duration::from_millis(2)) {
                Ok(r) => break r,
                Err(mpsc::RecvTimeoutError::Disconnected) => break Err(EditError::Ended),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let gone = self.nodes[e]
                        .filter
                        .as_channel_end()
                        .is_none_or(|c| c.consumer_gone());
                    // Withdrawn only if the consumer has not taken it (it answers if it has).
                    if gone && board.take(id).is_some() {
                        break Err(EditError::Ended);
                    }
                }
            }
        };
        let Moved {
            node,
            sels,
            after,
            carried,
            exports,
            ..
        } = got?;
        let label = node.label.clone();
        self.attach_before_egress(e, (node, exports), sels, after, carried);
        self.restart_clock();
        Ok(label)
    }

    /// At a batch boundary: do what the markers this space's ingresses stopped at ask,
    /// and let them go on. Returns whether any was served.
    pub(crate) fn serve_markers(
        &mut self,
        ingresses: &[usize],
        board: &Board,
        factory: &dyn Factory,
    ) -> bool {
        let mut served = false;
        for &i in ingresses {
            let Some(id) = self.nodes[i]
                .filter
                .as_channel_end()
                .and_then(|c| c.marker())
            else {
                continue;
            };
            match board.take(id) {
                Some(Deposit::Down(m)) => self.attach_after_ingress(i, m),
                Some(Deposit::Up { expect, reply }) => {
                    let r = self.detach_after_ingress(i, expect.as_deref(), factory);
                    let _ = reply.send(r);
                }
                // Withdrawn (the producer gave up waiting): nothing to do.
                None => {}
            }
            if let Some(c) = self.nodes[i].filter.as_channel_end() {
                c.resume();
            }
            served = true;
        }
        if served {
            self.restart_clock();
        }
        served
    }

    /// The ingress nodes of channels from another space of this process.
    pub(crate) fn ingresses(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| matches!(endpoint_of(&self.nodes[i]), Some((false, _))))
            .collect()
    }

    /// The channels leaving this space (egress node, channel number).
    pub(crate) fn egresses(&self) -> Vec<(usize, usize)> {
        (0..self.nodes.len())
            .filter_map(|i| match endpoint_of(&self.nodes[i]) {
                Some((true, ch)) => Some((i, ch)),
                _ => None,
            })
            .collect()
    }

    /// The run is ending here: serve the markers the ingresses stopped at, and take in
    /// filters stranded on the board for this space's channels (see [`Board::stranded`])
    /// so they are finished and reported.
    pub(crate) fn end_moves(&mut self, ingresses: &[usize], board: &Board, factory: &dyn Factory) {
        self.serve_markers(ingresses, board, factory);
        let chs: Vec<usize> = ingresses
            .iter()
            .filter_map(|&i| endpoint_of(&self.nodes[i]).map(|e| e.1))
            .collect();
        for (mut n, exports) in board.stranded(&chs) {
            n.out.clear();
            n.label = self.arrival_label(&n);
            let x = self.add_node(n);
            self.put_exports(x, exports);
        }
    }
}

impl Space {
    /// One chaos round at a batch boundary: with some chance, move the filter next to one
    /// of this space's outgoing channels down, or the one after it up.
    pub(crate) fn chaos_round(
        &mut self,
        chaos: &mut Chaos,
        board: &Board,
        factory: &dyn Factory,
    ) -> bool {
        if chaos.next() % 3 != 0 {
            return false;
        }
        let outs = self.egresses();
        if outs.is_empty() {
            return false;
        }
        let (_, ch) = outs[(chaos.next() % outs.len() as u64) as usize];
        let r = if chaos.next() % 2 == 0 {
            self.send_down(ch, None, board, factory).map(|_| 0)
        } else {
            self.pull_up(ch, None, board).map(|_| 1)
        };
        match r {
            Ok(0) => chaos.moves.0 += 1,
            Ok(_) => chaos.moves.1 += 1,
            Err(_) => chaos.moves.2 += 1,
        }
        r.is_ok()
    }
}
