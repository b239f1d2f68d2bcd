//! Graph surgery on a built space: applying an [`Edit`] as a transaction.

use super::*;
use crate::filter::Batch;
use crate::runtime::{
    base_name, instantiate, label_of, Counters, Factory, Made, NodeReport, Space,
};
use crate::runtime::{EGRESS, INGRESS};
use lang::{Node, NodeKind, Selector, Span};

pub(super) fn endpoint(label: &str) -> bool {
    label.starts_with(EGRESS) || label.starts_with(INGRESS)
}

impl Space {
    /// Apply `edit` (see the module documentation): only between source batches (the run
    /// loop's quiescent point; [`EditHandle`] does that for a running run). Either the
    /// edit applies whole, or the space is left exactly as it was and the error says why.
    pub fn edit(&mut self, edit: &Edit, factory: &dyn Factory) -> Result<Applied, EditError> {
        let labels = edit.labels();
        if let Some(two) = labels.windows(2).find(|w| {
            split_space(w[0]).1.is_some()
                && split_space(w[1]).1.is_some()
                && split_space(w[0]).1 != split_space(w[1]).1
        }) {
            return Err(EditError::Refused {
                label: format!("{} -> {}", two[0], two[1]),
                why: Refusal::Spaces(two[0].to_string(), two[1].to_string()),
            });
        }
        match edit {
            Edit::Connect { from, to } => {
                return self.connect(split_space(from).0, split_space(to).0)
            }
            Edit::Disconnect { from, to } => {
                return self.disconnect(split_space(from).0, split_space(to).0)
            }
            Edit::Move { node, from, to } => {
                return self.move_input(split_space(node).0, split_space(from).0, split_space(to).0)
            }
            _ => {}
        }
        let label = split_space(edit.node()).0;
        let i = self.live(label)?;
        let refuse = |why| {
            Err(EditError::Refused {
                label: label.to_string(),
                why,
            })
        };
        if endpoint(label) {
            return refuse(Refusal::Endpoint);
        }
        if self.nodes[i].filter.observes() {
            return refuse(Refusal::Observer);
        }
        if !matches!(edit, Edit::Set { .. }) {
            if let Some(why) = self.channel_next_to(i) {
                return refuse(Refusal::Channel(why));
            }
        }
        match edit {
            Edit::Set { options, span, .. } => self.set(i, options, *span, factory),
            Edit::Insert { at, filter, .. } => self.insert(i, *at, filter, factory),
            Edit::Remove { .. } => self.remove(i),
            Edit::Replace { filter, .. } => self.replace(i, filter, factory),
            Edit::Branch { filter, .. } => self.branch(i, filter, factory),
            Edit::Connect { .. } | Edit::Disconnect { .. } | Edit::Move { .. } => {
                unreachable!("handled above")
            }
        }
    }

    /// The live node labelled `label`.
    pub(super) fn live(&self, label: &str) -> Result<usize, EditError> {
        self.nodes
            .iter()
            .position(|n| !n.removed && n.label == label)
            .ok_or_else(|| EditError::NoNode {
                label: label.to_string(),
                known: self
                    .nodes
                    .iter()
                    .filter(|n| !n.removed && !endpoint(&n.label))
                    .map(|n| n.label.clone())
                    .collect(),
            })
    }

    /// Whether a channel to another space enters or leaves at node `i`, in words.
    pub(super) fn channel_next_to(&self, i: usize) -> Option<&'static str> {
        if self.nodes[i]
            .out
            .iter()
            .any(|a| self.nodes[a.to].label.starts_with(EGRESS))
        {
            return Some("sends into");
        }
        if self
            .in_arcs(i)
            .iter()
            .any(|&(f, _)| self.nodes[f].label.starts_with(INGRESS))
        {
            return Some("receives from");
        }
        None
    }

    /// A label for a new node `n` by the build's rule (`base`, `base#k`, `base:name`),
    /// counting every node of the same base (removed ones too, so a label never comes
    /// back for another instance); `except` is the node it replaces.
    pub(super) fn new_label(&self, n: &Node, except: Option<usize>) -> Result<String, EditError> {
        let others = || {
            self.nodes
                .iter()
                .enumerate()
                .filter(move |(j, _)| Some(*j) != except)
                .map(|(_, m)| m)
        };
        let taken = |l: &str| {
            others().any(|m| !m.removed && m.label == l) || self.elsewhere.iter().any(|e| e == l)
        };
        let base = base_name(n);
        if let Some(name) = &n.name {
            let l = label_of(&base, Some(name), 0);
            return match taken(&l) {
                true => Err(EditError::Refused {
                    label: l.clone(),
                    why: Refusal::NameTaken(l),
                }),
                false => Ok(l),
            };
        }
        let mut k = others().filter(|m| base_name(&m.spec) == base).count() + 1;
        loop {
            let l = label_of(&base, None, k);
            if !taken(&l) {
                return Ok(l);
            }
            k += 1;
        }
    }

    /// Let node `i`'s instance flush what it holds (routed along its arcs, as at the end
    /// of a run; a Unix process is drained), and report its final counters.
    pub(super) fn retire(&mut self, i: usize) -> (NodeReport, usize) {
        let mut out = Batch::default();
        self.restart_clock();
        self.with_filter(i, |f, cx| f.finish(cx, &mut out));
        self.charge(i);
        let flushed = out.len();
        if flushed > 0 {
            self.emit(i, out, 0);
        }
        self.poll_unix_node(i, true);
        // What was flushed has finished its walk, like a source batch.
        self.epoch_end();
        let report = self.report_of(i);
        (report, flushed)
    }

    pub(super) fn report_of(&self, i: usize) -> NodeReport {
        let n = &self.nodes[i];
        n.report(self.nanos(n.ticks))
    }

    pub(super) fn set(
        &mut self,
        i: usize,
        changes: &[(String, String)],
        span: Span,
        factory: &dyn Factory,
    ) -> Result<Applied, EditError> {
        let label = self.nodes[i].label.clone();
        let refuse = |why| {
            Err(EditError::Refused {
                label: label.clone(),
                why,
            })
        };
        let mut spec = self.nodes[i].spec.clone();
        let NodeKind::Filter { options, .. } = &mut spec.kind else {
            return refuse(Refusal::NotNative);
        };
        if self.nodes[i].routes_by_class {
            return refuse(Refusal::Split);
        }
        for (k, v) in changes {
            match options.iter_mut().find(|(o, _)| o == k) {
                Some(o) => o.1 = v.clone(),
                None => options.push((k.clone(), v.clone())),
            }
        }
        // The node keeps its exported stream: the new instance is made without one.
        let mut make = Node {
            span,
            ..spec.clone()
        };
        if let NodeKind::Filter { options, .. } = &mut make.kind {
            options.retain(|(k, _)| k != "export" && k != "exportdata");
        }
        let (in_degree, sink) = (self.in_arcs(i).len(), self.nodes[i].out.is_empty());
        // The build may fail: nothing is touched before it succeeded.
        let made =
            instantiate(&make, &label, factory, in_degree, sink).map_err(EditError::Build)?;
        let (retired, flushed) = self.retire(i);
        let node = &mut self.nodes[i];
        let Made { mut filter, .. } = made;
        node.classifier = !node.source && filter.as_classifier().is_some();
        node.filter = filter;
        node.spec = spec;
        node.sessions = None;
        node.done = false;
        Ok(Applied {
            label,
            retired: Some(retired),
            flushed,
        })
    }

    pub(super) fn insert(
        &mut self,
        i: usize,
        at: Where,
        n: &Node,
        factory: &dyn Factory,
    ) -> Result<Applied, EditError> {
        let here = self.nodes[i].label.clone();
        let refuse = |why| {
            Err(EditError::Refused {
                label: here.clone(),
                why,
            })
        };
        if let NodeKind::Filter { filter, .. } = &n.kind {
            if factory.is_source(filter) {
                return refuse(Refusal::NewSource(filter.clone()));
            }
        }
        let input = match at {
            Where::After => {
                if self.nodes[i].routes_by_class {
                    return refuse(Refusal::Split);
                }
                None
            }
            Where::Before => {
                let ins = self.in_arcs(i);
                match ins.as_slice() {
                    [] => return refuse(Refusal::BeforeSource),
                    [one] => Some(*one),
                    more => return refuse(Refusal::Inputs(more.len())),
                }
            }
        };
        let label = self.new_label(n, None)?;
        let sink = at == Where::After && self.nodes[i].out.is_empty();
        let made = instantiate(n, &label, factory, 1, sink).map_err(EditError::Build)?;
        // The new node takes X's out-arcs (After: selectors and in-arc indices kept, X
        // then feeds it alone) or X's one in-arc (Before: the new node then feeds X).
        let new = self.add_made(label.clone(), n.clone(), made);
        match (at, input) {
            (Where::After, _) => {
                // X's observers (taps, its exported stream) stay X's.
                let (watch, out): (Vec<_>, Vec<_>) = std::mem::take(&mut self.nodes[i].out)
                    .into_iter()
                    .partition(|a| self.nodes[a.to].filter.observes());
                self.nodes[i].out = watch;
                self.nodes[new].out.splice(0..0, out);
                self.add_arc(i, new, Selector::Default, 0);
            }
            (Where::Before, Some((from, k))) => {
                let in_index = self.redirect(from, k, new, 0);
                self.add_arc(new, i, Selector::Default, in_index);
            }
            (Where::Before, None) => unreachable!("checked above: one input"),
        }
        Ok(Applied {
            label,
            retired: None,
            flushed: 0,
        })
    }

    pub(super) fn remove(&mut self, i: usize) -> Result<Applied, EditError> {
        let label = self.nodes[i].label.clone();
        let refuse = |why| {
            Err(EditError::Refused {
                label: label.clone(),
                why,
            })
        };
        if self.nodes[i].source {
            return refuse(Refusal::Source);
        }
        if self.nodes[i].routes_by_class {
            return refuse(Refusal::Split);
        }
        if matches!(
            self.nodes[i].spec.kind,
            NodeKind::Join { .. } | NodeKind::Split { .. }
        ) {
            return refuse(Refusal::Template);
        }
        let (retired, flushed) = self.retire(i);
        self.drop_exports(i);
        let node = &mut self.nodes[i];
        node.filter = Box::new(crate::runtime::PassThrough);
        node.removed = true;
        node.classifier = false;
        node.sessions = None;
        Ok(Applied {
            label,
            retired: Some(retired),
            flushed,
        })
    }

    pub(super) fn branch(
        &mut self,
        i: usize,
        n: &Node,
        factory: &dyn Factory,
    ) -> Result<Applied, EditError> {
        let here = self.nodes[i].label.clone();
        let refuse = |why| {
            Err(EditError::Refused {
                label: here.clone(),
                why,
            })
        };
        if let NodeKind::Filter { filter, .. } = &n.kind {
            if factory.is_source(filter) {
                return refuse(Refusal::NewSource(filter.clone()));
            }
        }
        if let Some(why) = self.cannot_feed(i) {
            return refuse(why);
        }
        let label = self.new_label(n, None)?;
        // A leaf, until something is added below it: its output ends there (a sink).
        let made = instantiate(n, &label, factory, 1, true).map_err(EditError::Build)?;
        let new = self.add_made(label.clone(), n.clone(), made);
        // One more out-arc: `route` multicasts to every arc, so the existing successors
        // get what they got, and the new node a copy-on-write share of it.
        self.add_arc(i, new, Selector::Default, 0);
        Ok(Applied {
            label,
            retired: None,
            flushed: 0,
        })
    }

    /// Why node `i`'s output cannot get another arc, if it cannot: a split routes each
    /// block down one of its arcs, and a Unix command with no arc out writes to standard
    /// output (it was started so; an approximation for one whose arcs were all taken away).
    pub(super) fn cannot_feed(&self, i: usize) -> Option<Refusal> {
        let n = &self.nodes[i];
        if n.routes_by_class {
            return Some(Refusal::Split);
        }
        if matches!(n.spec.kind, NodeKind::Unix { .. }) && n.out.is_empty() {
            return Some(Refusal::UnixSink);
        }
        None
    }

    /// The live node `label` as one end of an arc to add or take away: not a channel
    /// endpoint, and not next to a channel to another space.
    pub(super) fn arc_end(&self, label: &str) -> Result<usize, EditError> {
        let i = self.live(label)?;
        let refuse = |why| {
            Err(EditError::Refused {
                label: label.to_string(),
                why,
            })
        };
        if endpoint(label) {
            return refuse(Refusal::Endpoint);
        }
        if self.nodes[i].filter.observes() {
            return refuse(Refusal::Observer);
        }
        if let Some(why) = self.channel_next_to(i) {
            return refuse(Refusal::Channel(why));
        }
        Ok(i)
    }

    /// Why an arc `from -> to` cannot be added, if it cannot (labels for the refusal).
    pub(super) fn cannot_connect(&self, from: usize, to: usize) -> Option<EditError> {
        let (fl, tl) = (&self.nodes[from].label, &self.nodes[to].label);
        let refuse = |label: &str, why| {
            Some(EditError::Refused {
                label: label.to_string(),
                why,
            })
        };
        if self.nodes[to].source {
            return refuse(tl, Refusal::IntoSource);
        }
        if matches!(self.nodes[to].spec.kind, NodeKind::Join { .. }) {
            return refuse(tl, Refusal::Template);
        }
        if let Some(why) = self.cannot_feed(from) {
            return refuse(fl, why);
        }
        if self.live_next(from, true).contains(&to) {
            return refuse(&format!("{fl} -> {tl}"), Refusal::ArcExists);
        }
        if self.reaches(to, from) {
            return refuse(
                &format!("{fl} -> {tl}"),
                Refusal::Cycle(tl.clone(), fl.clone()),
            );
        }
        None
    }

    /// The raw arcs (node, index among its out-arcs) to take away so that `from` no longer
    /// feeds `to` and nothing else changes: the direct arcs, and for each way through
    /// removed nodes the first arc on it that carries only `from`'s blocks to only `to`.
    pub(super) fn cut(&self, from: usize, to: usize) -> Result<Vec<(usize, usize)>, EditError> {
        let (fl, tl) = (&self.nodes[from].label, &self.nodes[to].label);
        let refuse = |why| {
            Err(EditError::Refused {
                label: format!("{fl} -> {tl}"),
                why,
            })
        };
        // Every way from `from` to `to` through removed nodes only, as its arcs.
        let mut ways: Vec<Vec<(usize, usize)>> = Vec::new();
        let mut stack: Vec<Vec<(usize, usize)>> = (0..self.nodes[from].out.len())
            .map(|k| vec![(from, k)])
            .collect();
        while let Some(way) = stack.pop() {
            let &(u, k) = way.last().expect("a way has an arc");
            let v = self.nodes[u].out[k].to;
            if v == to {
                ways.push(way);
            } else if self.nodes[v].removed && !way.iter().any(|&(w, _)| w == v) {
                for k2 in 0..self.nodes[v].out.len() {
                    let mut w = way.clone();
                    w.push((v, k2));
                    stack.push(w);
                }
            }
        }
        if ways.is_empty() {
            return refuse(Refusal::NoArc(fl.clone(), tl.clone()));
        }
        let up = |u: usize| {
            if self.nodes[u].removed {
                self.live_next(u, false)
            } else {
                vec![u]
            }
        };
        let down = |v: usize| {
            if self.nodes[v].removed {
                self.live_next(v, true)
            } else {
                vec![v]
            }
        };
        let mut arcs = Vec::new();
        for way in &ways {
            let exact = way
                .iter()
                .find(|&&(u, k)| up(u) == [from] && down(self.nodes[u].out[k].to) == [to]);
            match exact {
                Some(a) if !arcs.contains(a) => arcs.push(*a),
                Some(_) => {}
                None => {
                    let (u, k) = way[0];
                    return refuse(Refusal::ThroughRemoved(
                        self.nodes[self.nodes[u].out[k].to].label.clone(),
                    ));
                }
            }
        }
        Ok(arcs)
    }

    pub(super) fn connect(&mut self, from: &str, to: &str) -> Result<Applied, EditError> {
        let (f, t) = (self.arc_end(from)?, self.arc_end(to)?);
        if let Some(e) = self.cannot_connect(f, t) {
            return Err(e);
        }
        let in_index = self.next_in_index(t);
        self.add_arc(f, t, Selector::Default, in_index);
        Ok(Applied {
            label: to.to_string(),
            retired: None,
            flushed: 0,
        })
    }

    pub(super) fn disconnect(&mut self, from: &str, to: &str) -> Result<Applied, EditError> {
        let (f, t) = (self.arc_end(from)?, self.arc_end(to)?);
        if matches!(self.nodes[t].spec.kind, NodeKind::Join { .. }) {
            return Err(EditError::Refused {
                label: to.to_string(),
                why: Refusal::Template,
            });
        }
        if self.nodes[f].routes_by_class {
            return Err(EditError::Refused {
                label: from.to_string(),
                why: Refusal::Split,
            });
        }
        let arcs = self.cut(f, t)?;
        if self.live_next(t, false) == [f] {
            return Err(EditError::Refused {
                label: format!("{from} -> {to}"),
                why: Refusal::OnlyInput(to.to_string()),
            });
        }
        self.take_arcs(arcs, t);
        Ok(Applied {
            label: to.to_string(),
            retired: None,
            flushed: 0,
        })
    }

    /// `move NODE FROM TO`: connect TO NODE, then disconnect FROM NODE, as one transaction
    /// (so NODE's only input may move). The new arc is a plain `|` (FROM's selector named
    /// FROM's classes) and keeps the old arc's in-arc index.
    pub(super) fn move_input(
        &mut self,
        node: &str,
        from: &str,
        to: &str,
    ) -> Result<Applied, EditError> {
        let (n, f, t) = (self.arc_end(node)?, self.arc_end(from)?, self.arc_end(to)?);
        if let Some(e) = self.cannot_connect(t, n) {
            return Err(e);
        }
        if self.nodes[f].routes_by_class {
            return Err(EditError::Refused {
                label: from.to_string(),
                why: Refusal::Split,
            });
        }
        let arcs = self.cut(f, n)?;
        let in_index = self
            .take_arcs(arcs, n)
            .unwrap_or_else(|| self.next_in_index(n));
        self.add_arc(t, n, Selector::Default, in_index);
        Ok(Applied {
            label: node.to_string(),
            retired: None,
            flushed: 0,
        })
    }

    pub(super) fn replace(
        &mut self,
        i: usize,
        n: &Node,
        factory: &dyn Factory,
    ) -> Result<Applied, EditError> {
        let old = self.nodes[i].label.clone();
        let refuse = |why| {
            Err(EditError::Refused {
                label: old.clone(),
                why,
            })
        };
        if self.nodes[i].routes_by_class {
            return refuse(Refusal::Split);
        }
        if matches!(
            self.nodes[i].spec.kind,
            NodeKind::Join { .. } | NodeKind::Split { .. }
        ) {
            return refuse(Refusal::Template);
        }
        let new_source =
            matches!(&n.kind, NodeKind::Filter { filter, .. } if factory.is_source(filter));
        if new_source != self.nodes[i].source {
            return refuse(Refusal::SourceMismatch);
        }
        let label = self.new_label(n, Some(i))?;
        let (in_degree, sink) = (self.in_arcs(i).len(), self.nodes[i].out.is_empty());
        let Made {
            mut filter,
            source,
            export,
            ..
        } = instantiate(n, &label, factory, in_degree, sink).map_err(EditError::Build)?;
        let (retired, flushed) = self.retire(i);
        self.drop_exports(i);
        if let Some(e) = export {
            self.hang_export(i, e);
        }
        let node = &mut self.nodes[i];
        node.classifier = !source && filter.as_classifier().is_some();
        node.filter = filter;
        node.label = label.clone();
        node.spec = n.clone();
        node.sessions = None;
        node.done = false;
        node.c = Counters::default();
        node.ticks = 0;
        Ok(Applied {
            label,
            retired: Some(retired),
            flushed,
        })
    }
}
