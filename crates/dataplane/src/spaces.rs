//! Many spaces in one run (thesis 5.2): placement of a request graph's nodes onto spaces,
//! the split of the graph into one sub-graph per space joined by channels, and the driver
//! that runs each space on its own pinned worker thread.
//!
//! Placement rule (until the optimizer decides): a node with `space=N` runs in space N
//! (`local` or `0` is the calling thread; N >= 1 is worker thread N, pinned to CPU
//! N mod the CPU count); `@private` or `@background` on a node without `space=` puts it
//! alone in a fresh space; every other node runs where its first upstream node runs;
//! sources without `space=` run locally. An arc between two spaces becomes a channel
//! (see [`crate::channel`]) whose wake-up batching follows the consumer's hints:
//! `@latency` small batches, `@throughput` large ones, otherwise the default.
//!
//! Owns: placement, the per-space graphs, thread start, pinning, collecting reports, and
//! turning a dead space into an error that names its filters. Does not own scheduling
//! inside a space (runtime) or the channel protocol (channel).

use crate::channel::{channel, ChannelConfig};
use crate::filter::{Args, Filter};
use crate::runtime::{BuildError, Factory, NodeReport, Space};
use lang::{Edge, Graph, Hint, Node, NodeKind, Selector, Span};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Space ids: 0 is the calling thread.
pub type SpaceId = usize;

/// Where each node of a graph runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub space: Vec<SpaceId>,
}

impl Placement {
    pub fn spaces(&self) -> Vec<SpaceId> {
        let mut v = self.space.clone();
        v.sort_unstable();
        v.dedup();
        v
    }
    pub fn is_single(&self) -> bool {
        self.space.iter().all(|&s| s == self.space.first().copied().unwrap_or(0))
    }
}

fn node_label(n: &Node) -> String {
    match &n.kind {
        NodeKind::Filter { filter, .. } => filter.clone(),
        NodeKind::Unix { argv } => argv.first().cloned().unwrap_or_default(),
        NodeKind::Join { .. } => "join".into(),
        NodeKind::Split { .. } => "split".into(),
    }
}

fn space_option(n: &Node) -> Option<&str> {
    match &n.kind {
        NodeKind::Filter { options, .. } => options.iter().find(|(k, _)| k == "space").map(|(_, v)| v.as_str()),
        _ => None,
    }
}

/// Apply the placement rule to `g` (see the module documentation).
pub fn place(g: &Graph) -> Result<Placement, BuildError> {
    let n = g.nodes.len();
    let mut space: Vec<Option<SpaceId>> = vec![None; n];
    let mut next_fresh = 1 + g
        .nodes
        .iter()
        .filter_map(|n| space_option(n).and_then(|v| v.parse::<SpaceId>().ok()))
        .max()
        .unwrap_or(0);
    for node in &g.nodes {
        let err = |why: String| BuildError { label: node_label(node), why };
        if let Some(v) = space_option(node) {
            space[node.id] = Some(match v {
                "local" => 0,
                "kernel" => return Err(err("space=kernel: this filter has no kernel implementation here".into())),
                v => v.parse().map_err(|_| err(format!("space={v}: expected 'local' or a space number")))?,
            });
        } else if node.hints.iter().any(|h| matches!(h, Hint::Private | Hint::Background)) {
            space[node.id] = Some(next_fresh);
            next_fresh += 1;
        }
    }
    // Everything else follows its first upstream node, in topological order (loops stay
    // in one space: a node reached only through a back edge keeps what it inherits first).
    let mut changed = true;
    while changed {
        changed = false;
        for node in &g.nodes {
            if space[node.id].is_some() {
                continue;
            }
            let ups: Vec<usize> = g.edges.iter().filter(|e| e.to == node.id).map(|e| e.from).collect();
            if ups.is_empty() {
                space[node.id] = Some(0);
                changed = true;
            } else if let Some(s) = ups.iter().find_map(|&u| space[u]) {
                space[node.id] = Some(s);
                changed = true;
            }
        }
    }
    let space: Vec<SpaceId> = space.into_iter().map(|s| s.unwrap_or(0)).collect();
    // Channels are one-way: a cycle between spaces would deadlock on full rings.
    let cross: Vec<(SpaceId, SpaceId)> = g.edges.iter().filter(|e| space[e.from] != space[e.to]).map(|e| (space[e.from], space[e.to])).collect();
    if let Some(e) = g.edges.iter().find(|e| space[e.from] != space[e.to] && reaches(&cross, space[e.to], space[e.from])) {
        return Err(BuildError {
            label: node_label(&g.nodes[e.to]),
            why: format!("space {} and space {} feed each other; a loop must stay within one space", space[e.from], space[e.to]),
        });
    }
    Ok(Placement { space })
}

fn reaches(cross: &[(SpaceId, SpaceId)], from: SpaceId, to: SpaceId) -> bool {
    let mut seen = vec![from];
    let mut i = 0;
    while i < seen.len() {
        let s = seen[i];
        if s == to {
            return true;
        }
        for &(a, b) in cross {
            if a == s && !seen.contains(&b) {
                seen.push(b);
            }
        }
        i += 1;
    }
    false
}

/// Name of the synthetic endpoint filters in per-space graphs.
const EGRESS: &str = "__egress";
const INGRESS: &str = "__ingress";

/// One space's share of the graph: its nodes (renumbered), with channel endpoints where
/// arcs leave or enter, and for each of its nodes the original node id.
struct Part {
    graph: Graph,
    origin: Vec<Option<usize>>,
}

fn endpoint(kind: &str, ch: usize) -> Node {
    Node {
        id: 0,
        kind: NodeKind::Filter { filter: kind.into(), params: vec![], options: vec![("ch".into(), ch.to_string())] },
        span: Span::default(),
        hints: vec![],
        name: None,
    }
}

/// Split `g` by `p`: per space its graph; channel k joins the k-th cross-space arc.
fn split<'g>(g: &'g Graph, p: &Placement) -> (HashMap<SpaceId, Part>, Vec<&'g Edge>) {
    let mut parts: HashMap<SpaceId, Part> = HashMap::new();
    let mut local_id = vec![0usize; g.nodes.len()];
    for node in &g.nodes {
        let part = parts.entry(p.space[node.id]).or_insert_with(|| Part { graph: Graph { nodes: vec![], edges: vec![] }, origin: vec![] });
        local_id[node.id] = part.graph.nodes.len();
        part.graph.nodes.push(Node { id: part.graph.nodes.len(), ..node.clone() });
        part.origin.push(Some(node.id));
    }
    let mut cross = Vec::new();
    for e in &g.edges {
        let (a, b) = (p.space[e.from], p.space[e.to]);
        if a == b {
            let part = parts.get_mut(&a).expect("placed");
            part.graph.edges.push(Edge { from: local_id[e.from], to: local_id[e.to], ..e.clone() });
            continue;
        }
        let ch = cross.len();
        cross.push(e);
        let pa = parts.get_mut(&a).expect("placed");
        let out = pa.graph.nodes.len();
        pa.graph.nodes.push(Node { id: out, ..endpoint(EGRESS, ch) });
        pa.origin.push(None);
        pa.graph.edges.push(Edge { from: local_id[e.from], to: out, ..e.clone() });
        let pb = parts.get_mut(&b).expect("placed");
        let inp = pb.graph.nodes.len();
        pb.graph.nodes.push(Node { id: inp, ..endpoint(INGRESS, ch) });
        pb.origin.push(None);
        // Exactly what crossed goes on, classes kept.
        pb.graph.edges.push(Edge { from: inp, to: local_id[e.to], sel: Selector::All, span: e.span });
    }
    (parts, cross)
}

/// The library's factory plus the channel endpoints of this run.
struct WithChannels<'a> {
    inner: &'a dyn Factory,
    endpoints: Mutex<HashMap<(bool, usize), Box<dyn Filter>>>,
}

impl Factory for WithChannels<'_> {
    fn make(&self, name: &str, args: &Args) -> Result<Box<dyn Filter>, String> {
        let egress = match name {
            EGRESS => true,
            INGRESS => false,
            _ => return self.inner.make(name, args),
        };
        let ch: usize = args.parse("ch", None, usize::MAX)?;
        self.endpoints.lock().expect("not poisoned").remove(&(egress, ch)).ok_or_else(|| format!("channel {ch} has no {name} endpoint"))
    }
    fn is_source(&self, name: &str) -> bool {
        name == INGRESS || self.inner.is_source(name)
    }
}

/// Spaces built from one graph, ready to run.
pub struct Spaces {
    spaces: Vec<(SpaceId, Space)>,
    pub placement: Placement,
    /// Channels created (cross-space arcs).
    pub channels: usize,
    /// Each node's space and name (for messages).
    labels: Vec<(SpaceId, String)>,
}

/// The outcome of a multi-space run.
pub struct SpacesReport {
    /// Per node, labelled with its space (`tcp@1`) when the run had more than one.
    pub nodes: Vec<NodeReport>,
    pub warnings: Vec<String>,
    /// A space that died: which one, its filters, and why.
    pub died: Option<String>,
    pub failed: bool,
}

impl Spaces {
    /// Place `g`, split it, create the channels and build every space (nothing runs yet;
    /// a build error leaves nothing behind).
    pub fn build(g: &Graph, factory: &dyn Factory, scratch: usize, cfg: ChannelConfig) -> Result<Spaces, BuildError> {
        let placement = place(g)?;
        let (parts, cross) = split(g, &placement);
        let mut endpoints = HashMap::new();
        for (k, e) in cross.iter().enumerate() {
            let to = &g.nodes[e.to];
            let c = if to.hints.contains(&Hint::Latency) {
                ChannelConfig::latency()
            } else if to.hints.contains(&Hint::Throughput) {
                ChannelConfig::throughput()
            } else {
                cfg
            };
            let (tx, rx) = channel(&format!("sl-ch{k}"), c).map_err(|e| BuildError { label: node_label(to), why: format!("cannot create a channel into it: {e}") })?;
            endpoints.insert((true, k), Box::new(tx) as Box<dyn Filter>);
            endpoints.insert((false, k), Box::new(rx) as Box<dyn Filter>);
        }
        let f = WithChannels { inner: factory, endpoints: Mutex::new(endpoints) };
        let mut ids: Vec<SpaceId> = parts.keys().copied().collect();
        ids.sort_unstable();
        let mut spaces = Vec::new();
        for id in ids {
            spaces.push((id, Space::build(&parts[&id].graph, &f, scratch)?));
        }
        let labels = g.nodes.iter().map(|n| (placement.space[n.id], node_label(n))).collect();
        Ok(Spaces { spaces, placement, channels: cross.len(), labels })
    }

    /// Run every space to its end: space 0 on this thread (with `tick` for progress),
    /// the others on pinned worker threads. `interrupt` stops them all; so does a space
    /// that dies (a panicking filter), which the report then names.
    pub fn run(self, interrupt: &AtomicBool, mut tick: impl FnMut(&Space)) -> SpacesReport {
        let multi = self.spaces.len() > 1;
        let labels = self.labels;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut results: Vec<(SpaceId, Result<Space, String>)> = Vec::new();
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            let mut local = None;
            for (id, mut space) in self.spaces {
                if id == 0 {
                    local = Some(space);
                    continue;
                }
                let h = std::thread::Builder::new()
                    .name(format!("sl-space{id}"))
                    .spawn_scoped(scope, move || {
                        let _ = beltway::sys::pin_to_cpu(id % cpus);
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            space.run(interrupt, |_| {});
                            space
                        }));
                        if r.is_err() {
                            // A dead space stops the others (its channels end when the
                            // unwinding drops them, so none stays blocked).
                            interrupt.store(true, Ordering::Relaxed);
                        }
                        r
                    })
                    .expect("spawn a space thread");
                handles.push((id, h));
            }
            if let Some(mut space) = local {
                space.run(interrupt, &mut tick);
                results.push((0, Ok(space)));
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
        let mut rep = SpacesReport { nodes: vec![], warnings: vec![], died: None, failed: false };
        for (id, r) in results {
            match r {
                Ok(space) => {
                    for mut n in space.report() {
                        if n.label == EGRESS || n.label.starts_with(INGRESS) || n.label.starts_with(EGRESS) {
                            continue;
                        }
                        if multi {
                            n.label = format!("{}@{id}", n.label);
                        }
                        rep.nodes.push(n);
                    }
                    rep.warnings.extend(space.warnings().iter().cloned());
                    rep.failed |= space.failed();
                }
                Err(why) => {
                    let filters: Vec<&str> = labels.iter().filter(|l| l.0 == id).map(|l| l.1.as_str()).collect();
                    rep.died = Some(format!("space {id} ({}) died: {why}", filters.join(", ")));
                    rep.failed = true;
                }
            }
        }
        rep
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_else(|| "panicked".into())
}
