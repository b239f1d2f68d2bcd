//! The run's graph as it is now: one space's snapshot, and the spaces' joined.

use crate::runtime::{
    Space,
};
use crate::runtime::EGRESS;
use lang::{Node, NodeKind};
use super::*;
use lang::edit::quoted;

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


/// A node's filter text and options (see [`GraphNode::filter`]).
pub fn filter_text(n: &Node) -> (String, Vec<(String, String)>) {
    let (words, options): (Vec<String>, Vec<(String, String)>) = match &n.kind {
        NodeKind::Filter {
            filter,
            params,
            options,
            ..
        } => (
            std::iter::once(filter.clone())
                .chain(params.iter().map(|p| quoted(p)))
                .collect(),
            options.clone(),
        ),
        NodeKind::Unix { argv, .. } => (argv.iter().map(|a| quoted(a)).collect(), Vec::new()),
        NodeKind::Join { mode } => {
            let m = match mode {
                lang::JoinMode::All => "all".to_string(),
                lang::JoinMode::First => "first".to_string(),
                lang::JoinMode::Nth(k) => format!("nth{k}"),
                lang::JoinMode::Ordered => "ordered".to_string(),
                lang::JoinMode::Merge => "merge".to_string(),
            };
            (vec!["join".into()], vec![("mode".into(), m)])
        }
        NodeKind::Split { mode, ways } => {
            let m = match mode {
                lang::SplitMode::RoundRobin => "roundrobin",
                lang::SplitMode::Hash => "hash",
            };
            (
                vec!["split".into()],
                vec![("mode".into(), m.into()), ("ways".into(), ways.to_string())],
            )
        }
    };
    let text = words
        .into_iter()
        .chain(options.iter().map(|(k, v)| format!("{k}={}", quoted(v))))
        .collect::<Vec<_>>()
        .join(" ");
    (text, options)
}

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

/// A run's graph ([`EditHandle::graph`]) as its table shows it ([`crate::runtime::fold_internal`]):
/// one node per node the user wrote, labelled as in one space (`deflate`, not `deflate@1`,
/// `deflate~2@2`, `deflate~split@0`), its inputs and outputs the user's nodes on the
/// other side of its members' arcs, its filter the user's node's (the member whose label
/// has no `~`), `space` the spaces it runs in (`1,2`; the split and join around copies
/// aside, as in the table). With each, the label of the member whose output is the user
/// node's output (a replica's or capture engine's join; else the node itself): what a tap
/// on the user's node taps. In the order of the nodes' first members.
pub fn fold_graph(nodes: &[GraphNode]) -> (Vec<GraphNode>, Vec<(String, String)>) {
    use crate::runtime::user_label;
    let user = |l: &str| user_label(l).0.to_string();
    let mut out: Vec<GraphNode> = Vec::new();
    let mut taps: Vec<(String, String)> = Vec::new();
    for n in nodes {
        let u = user(&n.label);
        let around = n.label.contains("~split") || n.label.contains("~join");
        let primary = !n.label.contains('~');
        // Arcs among one node's members are neither into nor out of it.
        let mapped = |v: &[String]| -> Vec<String> { v.iter().map(|l| user(l)).filter(|l| *l != u).collect() };
        let (inputs, outputs) = (mapped(&n.inputs), mapped(&n.outputs));
        let exit = !outputs.is_empty() || n.outputs.is_empty();
        let i = match out.iter().position(|g| g.label == u) {
            Some(i) => i,
            None => {
                out.push(GraphNode {
                    label: u.clone(),
                    filter: n.filter.clone(),
                    options: n.options.clone(),
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    source: false,
                    space: String::new(),
                });
                taps.push((u.clone(), n.label.clone()));
                out.len() - 1
            }
        };
        let g = &mut out[i];
        if primary {
            g.filter = n.filter.clone();
            g.options = n.options.clone();
        }
        for l in inputs {
            if !g.inputs.contains(&l) {
                g.inputs.push(l);
            }
        }
        for l in outputs {
            if !g.outputs.contains(&l) {
                g.outputs.push(l);
            }
        }
        g.source |= n.source;
        if !around && !g.space.split(',').any(|s| s == n.space) {
            g.space = if g.space.is_empty() { n.space.clone() } else { format!("{},{}", g.space, n.space) };
        }
        // The tap: the member the user node's blocks leave from, a join before a copy.
        let t = &mut taps[i].1;
        if exit && (n.label.contains("~join") || (primary && !t.contains("~join"))) {
            *t = n.label.clone();
        }
    }
    (out, taps)
}
