//! A space built from a graph, and what it reports while and after it runs.

use super::*;
use crate::store::Store;
use lang::Graph;

impl Space {
    /// Instantiate every node of `g`. `scratch` sizes the space's default data ring.
    pub fn build(g: &Graph, factory: &dyn Factory, scratch: usize) -> Result<Space, BuildError> {
        Space::build_labelled(g, factory, scratch, &run_labels(g))
    }

    /// [`Space::build`], node `i` labelled `labels[i]` where given (a space of a run
    /// labels its nodes as the whole run does, [`run_labels`]; an empty label: as
    /// [`label_of`] counts in this graph).
    pub fn build_labelled(
        g: &Graph,
        factory: &dyn Factory,
        scratch: usize,
        labels: &[String],
    ) -> Result<Space, BuildError> {
        let mut nodes = Vec::with_capacity(g.nodes.len());
        let mut exports = Vec::new();
        let mut seen = std::collections::HashMap::<String, usize>::new();
        let in_degree = |id| g.edges.iter().filter(|e| e.to == id).count();
        for n in &g.nodes {
            let base = base_name(n);
            let k = seen.entry(base.clone()).or_insert(0);
            *k += 1;
            let label = match labels.get(n.id) {
                Some(l) if !l.is_empty() => l.clone(),
                _ => label_of(&base, n.name.as_deref(), *k),
            };
            let sink = !g.edges.iter().any(|e| e.from == n.id);
            let mut made = instantiate(n, &label, factory, in_degree(n.id), sink)?;
            exports.extend(made.export.take().map(|e| (nodes.len(), e)));
            nodes.push(RtNode::new(label, n.clone(), made, Vec::new()));
        }
        let mut in_count = vec![0usize; nodes.len()];
        for e in &g.edges {
            nodes[e.from].out.push(Arc_ {
                to: e.to,
                sel: e.sel.clone(),
                in_index: in_count[e.to],
                carried: Carried::default(),
            });
            in_count[e.to] += 1;
        }
        let clock = quanta::Clock::new();
        let last = clock.raw();
        let mut space = Space {
            nodes,
            store: Store::new(scratch),
            warnings: Vec::new(),
            stop: crate::filter::Stop::No,
            names: Vec::new(),
            spare: Vec::with_capacity(BATCH),
            spare_batch: None,
            clock,
            last,
            chaos: None,
            elsewhere: Vec::new(),
            ending: false,
            ready: None,
        };
        // Exported streams are nodes after the graph's (whose indices are their ids), on
        // arcs after their nodes' others (a split's branches keep their arcs' numbers).
        for (i, e) in exports {
            space.hang_export(i, e);
        }
        Ok(space)
    }

    /// Named classes for `|name` selectors.
    pub fn set_class_names(&mut self, names: Vec<(String, u16)>) {
        self.names = names;
    }

    pub fn store(&mut self) -> &mut Store {
        &mut self.store
    }
}

impl Space {
    /// The arcs out of this space's nodes, the run's own nodes looked through (channel
    /// endpoints, the pass-throughs moves and edits leave, a `__publish`): each arc of a
    /// node the user wrote, what it carried and the node (or channel) it leads to. With
    /// [`Space::channel_heads`], the run's report joins them into the user's graph. Arcs
    /// into a prefix-sharing `__publish` are left out: it offers the stream to other
    /// runs and is no node of this one.
    pub fn arcs(&self) -> Vec<ArcReport> {
        let mut v = Vec::new();
        for n in &self.nodes {
            if n.removed || endpoint_of(n).is_some() {
                continue;
            }
            for a in &n.out {
                // A prefix shared with other runs is not an arc of this pipeline.
                for to in self
                    .targets(a.to, 0)
                    .into_iter()
                    .filter(|t| *t != ArcTarget::Internal)
                {
                    v.push(ArcReport {
                        from: n.label.clone(),
                        to,
                        carried: a.carried,
                        rings: Vec::new(),
                    });
                }
            }
        }
        v
    }

    /// Per channel arriving in this space, where its blocks go: a node, or on down
    /// another channel (a space every user node moved out of).
    pub fn channel_heads(&self) -> Vec<(usize, ArcTarget)> {
        let mut v = Vec::new();
        for n in &self.nodes {
            let Some((false, ch)) = endpoint_of(n) else {
                continue;
            };
            for a in &n.out {
                for t in self.targets(a.to, 0) {
                    v.push((ch, t));
                }
            }
        }
        v
    }

    /// Per channel this space produces into, how full its rings are now.
    pub fn channel_rings(&self) -> Vec<(usize, protocol::graph::RingGauge)> {
        self.nodes
            .iter()
            .filter(|n| !n.removed)
            .filter_map(|n| match endpoint_of(n) {
                Some((true, ch)) => n.filter.ring().map(|g| (ch, g)),
                _ => None,
            })
            .collect()
    }

    /// Where an arc into node `i` leads, looking through the run's own nodes.
    pub(super) fn targets(&self, i: usize, depth: usize) -> Vec<ArcTarget> {
        let n = &self.nodes[i];
        if let Some((true, ch)) = endpoint_of(n) {
            return vec![ArcTarget::Channel(ch)];
        }
        if n.internal() {
            return vec![ArcTarget::Internal];
        }
        if !n.removed || depth > self.nodes.len() {
            return vec![ArcTarget::Node(n.label.clone())];
        }
        n.out
            .iter()
            .flat_map(|a| self.targets(a.to, depth + 1))
            .collect()
    }

    /// Per-filter counters and summaries. A prefix-sharing `__publish` and a tap are the
    /// run's own nodes, not the user's: left out (their input is counted out of the node
    /// before them).
    pub fn report(&self) -> Vec<NodeReport> {
        self.nodes
            .iter()
            .filter(|n| !n.removed && !n.internal())
            .map(|n| n.report(self.clock.delta_as_nanos(0, n.ticks)))
            .collect()
    }

    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Blocks copied by write isolation so far.
    pub fn copies(&self) -> u64 {
        self.store.copies
    }

    /// Whether a filter stopped the run because of an error (e.g. a sink could not write).
    pub fn failed(&self) -> bool {
        self.stop == crate::filter::Stop::Failed
    }

    /// The non-zero status its last command, a Unix command, exited with (see
    /// [`crate::Ctx::exit_status`]).
    pub fn exit_status(&self) -> Option<u8> {
        match self.stop {
            crate::filter::Stop::Status(s) => Some(s),
            _ => None,
        }
    }

    /// Progress of file sources: (done, total) bytes summed.
    pub fn progress(&self) -> Option<(u64, u64)> {
        let v: Vec<_> = self
            .nodes
            .iter()
            .filter(|n| n.source)
            .filter_map(|n| n.filter.progress())
            .collect();
        if v.is_empty() {
            None
        } else {
            Some(v.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)))
        }
    }
}
