//! The run's graph as it is now: one space's snapshot, and the spaces' joined.

use super::*;
use crate::runtime::Space;
use crate::runtime::EGRESS;

/// One node of a running run's graph (the type is the wire's: `protocol::graph`), as
/// [`EditHandle::graph`] and [`Space::graph`] give it.
pub use protocol::graph::GraphNode;

/// A node of one space's graph as its run loop publishes it: arcs as indices into the
/// same snapshot, looked through removed nodes; channel endpoints kept, with their
/// channel (egress?, number), for [`resolve`] to join spaces by.
#[derive(Debug, Clone)]
pub(crate) struct SnapNode {
    pub(super) label: String,
    pub(super) filter: String,
    pub(super) options: Vec<(String, String)>,
    pub(super) source: bool,
    pub(super) channel: Option<(bool, usize)>,
    pub(super) out: Vec<usize>,
}

pub use lang::label::filter_text;

impl Space {
    /// This space's graph now (see [`GraphNode`]): labels without a space, space `0`;
    /// arcs into and out of channels to other spaces are left out (the other side is
    /// not here; [`EditHandle::graph`] joins the spaces of a run).
    pub fn graph(&self) -> Vec<GraphNode> {
        resolve(&[(0, self.graph_snapshot())], false)
    }

    pub(crate) fn graph_snapshot(&self) -> Vec<SnapNode> {
        let mut at = vec![usize::MAX; self.nodes.len()];
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].removed)
            .collect();
        for (k, &i) in live.iter().enumerate() {
            at[i] = k;
        }
        live.iter()
            .map(|&i| {
                let n = &self.nodes[i];
                let (filter, options) = filter_text(&n.spec);
                let channel = endpoint(&n.label).then(|| {
                    let ch = options
                        .iter()
                        .find(|(k, _)| k == "ch")
                        .and_then(|(_, v)| v.parse().ok())
                        .unwrap_or(usize::MAX);
                    (n.label.starts_with(EGRESS), ch)
                });
                SnapNode {
                    label: n.label.clone(),
                    filter,
                    options,
                    source: n.source,
                    channel,
                    out: self.live_next(i, true).into_iter().map(|j| at[j]).collect(),
                }
            })
            .collect()
    }
}

/// The graph of the spaces `parts` (id, snapshot): endpoints left out, an arc into an
/// egress joined to the arcs out of the ingress of the same channel where that space is
/// among `parts` (and dropped where it is not: a process space). `multi`: labels carry
/// their space.
pub(crate) fn resolve(parts: &[(usize, Vec<SnapNode>)], multi: bool) -> Vec<GraphNode> {
    let ingress = |ch: usize| -> Option<(usize, usize)> {
        parts.iter().enumerate().find_map(|(p, (_, snap))| {
            snap.iter()
                .position(|n| n.channel == Some((false, ch)))
                .map(|j| (p, j))
        })
    };
    // The real nodes an arc into (p, j) reaches: itself, or through a channel pair.
    let ends = |p: usize, j: usize| -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        let mut seen = Vec::new();
        let mut stack = vec![(p, j)];
        while let Some((p, j)) = stack.pop() {
            if seen.contains(&(p, j)) {
                continue;
            }
            seen.push((p, j));
            match parts[p].1[j].channel {
                None => found.push((p, j)),
                Some((true, ch)) => {
                    if let Some((q, k)) = ingress(ch) {
                        stack.extend(parts[q].1[k].out.iter().rev().map(|&o| (q, o)));
                    }
                }
                Some((false, _)) => {}
            }
        }
        found
    };
    let label = |p: usize, j: usize| -> String {
        let (id, snap) = &parts[p];
        if multi {
            format!("{}@{id}", snap[j].label)
        } else {
            snap[j].label.clone()
        }
    };
    let mut nodes: Vec<((usize, usize), GraphNode)> = Vec::new();
    for (p, (id, snap)) in parts.iter().enumerate() {
        for (j, n) in snap.iter().enumerate().filter(|(_, n)| n.channel.is_none()) {
            let mut outputs = Vec::new();
            for &o in &n.out {
                for e in ends(p, o) {
                    let l = label(e.0, e.1);
                    if !outputs.contains(&l) {
                        outputs.push(l);
                    }
                }
            }
            let g = GraphNode {
                label: label(p, j),
                filter: n.filter.clone(),
                options: n.options.clone(),
                inputs: Vec::new(),
                outputs,
                source: n.source,
                space: id.to_string(),
            };
            nodes.push(((p, j), g));
        }
    }
    for k in 0..nodes.len() {
        let from = nodes[k].1.label.clone();
        for o in nodes[k].1.outputs.clone() {
            if let Some((_, to)) = nodes.iter_mut().find(|(_, g)| g.label == o) {
                to.inputs.push(from.clone());
            }
        }
    }
    nodes.into_iter().map(|(_, g)| g).collect()
}

pub use protocol::graph::fold_graph;
