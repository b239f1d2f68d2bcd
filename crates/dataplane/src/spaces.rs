//! Many spaces in one run (thesis 5.2): placement of a request graph's nodes onto spaces,
//! the split of the graph into one sub-graph per space joined by channels, and the driver
//! that runs each space on its own pinned worker thread.
//!
//! Replication first ([`replicate`]): `space=A,B,...` makes one copy of the filter per
//! listed space (split, copies, join); `@single` on a filter forbids copies of it.
//!
//! Hints: `@private` (a fresh process space), `@background` (a fresh thread space),
//! `@latency` / `@throughput` (the wake-up batching of the channels into the node),
//! `@single` (never replicated).
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

use crate::channel::{egress, egress_to, ingress, ChannelConfig};
use beltway::RingRef;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use crate::filter::{Args, Filter, Replication};
use crate::runtime::{BuildError, Factory, NodeReport, Space};
use crate::txn::{StepFailed, Transaction};
use lang::{Edge, Graph, Hint, Node, NodeKind, Selector, Span};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Space ids: 0 is the calling thread.
pub type SpaceId = usize;

/// What executes a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceKind {
    /// The calling thread (space 0).
    Local,
    /// A worker thread pinned to one CPU.
    Thread,
    /// A separate OS process mapping the same rings (isolates crashes).
    Process,
}

/// Where each node of a graph runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub space: Vec<SpaceId>,
    pub kinds: std::collections::BTreeMap<SpaceId, SpaceKind>,
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
    pub fn kind(&self, s: SpaceId) -> SpaceKind {
        self.kinds.get(&s).copied().unwrap_or(if s == 0 { SpaceKind::Local } else { SpaceKind::Thread })
    }
}

fn node_label(n: &Node) -> String {
    match &n.kind {
        NodeKind::Filter { filter, .. } => filter.clone(),
        NodeKind::Unix { argv, .. } => argv.first().cloned().unwrap_or_default(),
        NodeKind::Join { .. } => "join".into(),
        NodeKind::Split { .. } => "split".into(),
    }
}

fn space_option(n: &Node) -> Option<&str> {
    match &n.kind {
        NodeKind::Filter { options, .. } | NodeKind::Unix { options, .. } => options.iter().find(|(k, _)| k == "space").map(|(_, v)| v.as_str()),
        _ => None,
    }
}

/// Data parallelism (thesis 5.4): a filter with `space=A,B,...` is replicated, one copy per
/// listed space, with the template `split | f + f + ... | join`. A filter that keeps
/// sessions gets a hash split on the class (connection scaling: each session on one
/// replica); any other a round-robin split and a join that restores the original order.
pub fn replicate(g: &Graph, factory: &dyn Factory) -> Result<Graph, BuildError> {
    let mut g = g.clone();
    let targets: Vec<usize> = g.nodes.iter().filter(|n| space_option(n).is_some_and(|v| v.contains(','))).map(|n| n.id).collect();
    for id in targets {
        let node = g.nodes[id].clone();
        let list: Vec<String> = space_option(&node).unwrap_or_default().split(',').map(|s| s.trim().to_string()).collect();
        let err = |why: String| BuildError { label: node_label(&node), why };
        if list.iter().any(|s| s.is_empty()) {
            return Err(err(format!("space={}: an empty space in the list", list.join(","))));
        }
        let NodeKind::Filter { filter, .. } = &node.kind else { return Err(err("only native filters can be replicated".into())) };
        if node.hints.contains(&Hint::Single) {
            return Err(err(format!("@single asks for one instance, space={} for {}", list.join(","), list.len())));
        }
        if factory.is_source(filter) || !g.edges.iter().any(|e| e.to == id) {
            return Err(err("a source cannot be replicated; replicate the filters after it".into()));
        }
        let mode = match factory.replication(filter) {
            Replication::Blocks => lang::SplitMode::RoundRobin,
            Replication::Sessions => {
                if let Some(why) = order_sensitive_after(&g, id, factory) {
                    return Err(err(format!(
                        "space={}: {filter}'s copies would each keep their sessions in order but interleave them differently from one {filter}, and {why}; replicate it only when what follows counts (count, hist), or place it on one space",
                        list.join(",")
                    )));
                }
                lang::SplitMode::Hash
            }
            Replication::Never(why) => return Err(err(format!("space={}: cannot be replicated: {why}", list.join(",")))),
        };
        let before = g.nodes.len();
        g = lang::parallelize(&g, id, list.len(), mode);
        // Copy 0 keeps the id; the split, copies 1.. and the join were appended.
        let copies = std::iter::once(id).chain(before + 1..before + list.len());
        for (copy, space) in copies.zip(&list) {
            if let NodeKind::Filter { options, .. } = &mut g.nodes[copy].kind {
                for (k, v) in options.iter_mut() {
                    if k == "space" {
                        *v = space.clone();
                    }
                }
            }
        }
    }
    Ok(g)
}

/// Whether the order of the blocks node `id` sends matters to anything downstream: the
/// first node found that observes it (a sink that writes, a filter that is not per
/// block), described; None when every path ends in filters that only count
/// ([`Factory::order_matters`] false) after per-block filters.
fn order_sensitive_after(g: &Graph, id: usize, factory: &dyn Factory) -> Option<String> {
    let mut todo: Vec<usize> = g.edges.iter().filter(|e| e.from == id).map(|e| e.to).collect();
    let mut seen = vec![false; g.nodes.len()];
    while let Some(n) = todo.pop() {
        if std::mem::replace(&mut seen[n], true) {
            continue;
        }
        match &g.nodes[n].kind {
            NodeKind::Filter { filter, .. } if !factory.order_matters(filter) => continue,
            NodeKind::Filter { filter, .. } if factory.replication(filter) != Replication::Blocks => {
                return Some(format!("{filter} downstream sees the order"));
            }
            NodeKind::Unix { argv, .. } => return Some(format!("{} downstream reads the stream in order", argv.first().map_or("a Unix command", |s| s.as_str()))),
            _ => {}
        }
        if !g.edges.iter().any(|e| e.from == n) {
            return Some(format!("{} at the end writes the stream in order", node_label(&g.nodes[n])));
        }
        todo.extend(g.edges.iter().filter(|e| e.from == n).map(|e| e.to));
    }
    None
}

/// Joins of parallel branches (thesis 3.3.2 templates `+`, `++`, `+*`) whose branches do
/// not run in one space with the join and the fork they start at: copies of a block that
/// travel different channels arrive in an order, and as distinct blocks, that depend on
/// timing. So such a placement is refused unless the result cannot show it: an `All` join
/// (every copy passes) whose output only reaches filters that count. Replicas' joins
/// (ordered, merge) are exempt: they are built for it.
pub fn check_joins(g: &Graph, p: &Placement, factory: &dyn Factory) -> Result<(), BuildError> {
    let space = &p.space;
    let ancestors = |n: usize| {
        let mut seen = vec![false; g.nodes.len()];
        let mut todo = vec![n];
        while let Some(x) = todo.pop() {
            if !std::mem::replace(&mut seen[x], true) {
                todo.extend(g.edges.iter().filter(|e| e.to == x).map(|e| e.from));
            }
        }
        seen
    };
    for join in g.nodes.iter().filter(|n| matches!(n.kind, NodeKind::Join { mode } if !matches!(mode, lang::JoinMode::Ordered | lang::JoinMode::Merge))) {
        let preds: Vec<usize> = g.edges.iter().filter(|e| e.to == join.id).map(|e| e.from).collect();
        if preds.len() < 2 {
            continue;
        }
        // The parallel section: nodes upstream of some branch but not of all (the
        // branches), the common nodes that feed a branch or the join directly (the
        // forks), and the join.
        let sets: Vec<Vec<bool>> = preds.iter().map(|&p| ancestors(p)).collect();
        let any = |n: usize| sets.iter().any(|s| s[n]);
        let every = |n: usize| sets.iter().all(|s| s[n]);
        let branch: Vec<usize> = (0..g.nodes.len()).filter(|&n| any(n) && !every(n)).collect();
        let forks = (0..g.nodes.len()).filter(|&n| every(n) && g.edges.iter().any(|e| e.from == n && (e.to == join.id || branch.contains(&e.to))));
        let section: Vec<usize> = branch.iter().copied().chain(forks).collect();
        let off: Vec<usize> = section.iter().copied().filter(|&n| space[n] != space[join.id]).collect();
        if off.is_empty() {
            continue;
        }
        let all = matches!(join.kind, NodeKind::Join { mode: lang::JoinMode::All });
        let why_order = order_sensitive_after(g, join.id, factory);
        if all && why_order.is_none() {
            continue;
        }
        // Name a filter the user placed in the section, if any.
        let placed = |n: usize| matches!(g.nodes[n].kind, NodeKind::Filter { .. }) && space_option(&g.nodes[n]).is_some();
        let culprit = section.iter().copied().find(|&n| placed(n)).unwrap_or(off[0]);
        let mut spans: Vec<SpaceId> = section.iter().map(|&n| space[n]).chain([space[join.id]]).collect();
        spans.sort_unstable();
        spans.dedup();
        let spans: Vec<String> = spans.iter().map(|&s| space_name(p, s)).collect();
        let consequence = match why_order {
            Some(w) if all => format!("their blocks would reach the join in an order that depends on timing, and {w}"),
            _ => "copies of one block would reach the join as different blocks, at times that depend on timing".to_string(),
        };
        return Err(BuildError {
            label: node_label(&g.nodes[culprit]),
            why: format!(
                "the parallel branches it is part of would span spaces {}; branches must run in one space with their fork and join here ({consequence}); place them together",
                spans.join(", ")
            ),
        });
    }
    Ok(())
}

/// How space `id` is scheduled, from the hints of the nodes placed there (thesis Table
/// 3.3): `@hrealtime` SCHED_FIFO priority 50 with the process's memory locked,
/// `@realtime` SCHED_RR priority 10, `@background` SCHED_IDLE; the strongest wins. With
/// the hint and the node that asked for it (for messages).
pub fn schedule_of(g: &Graph, p: &Placement, id: SpaceId) -> Option<(beltway::sys::Policy, &'static str, String)> {
    use beltway::sys::Policy;
    let here = || g.nodes.iter().filter(move |n| p.space[n.id] == id);
    for (hint, policy, name) in [(Hint::HRealtime, Policy::Fifo(50), "@hrealtime"), (Hint::Realtime, Policy::RoundRobin(10), "@realtime"), (Hint::Background, Policy::Idle, "@background")] {
        if let Some(n) = here().find(|n| n.hints.contains(&hint)) {
            return Some((policy, name, node_label(n)));
        }
    }
    None
}

/// Give the calling thread the scheduling its space's hints ask for; an error names the
/// filter and the hint (the system may refuse real-time policies without CAP_SYS_NICE).
fn apply_schedule(sched: &Option<(beltway::sys::Policy, &'static str, String)>) -> Result<(), String> {
    let Some((policy, hint, label)) = sched else { return Ok(()) };
    beltway::sys::set_scheduler(*policy).map_err(|e| format!("{label}: {hint}: cannot set the scheduling policy {policy:?}: {e}"))?;
    if matches!(policy, beltway::sys::Policy::Fifo(_)) {
        beltway::sys::lock_memory().map_err(|e| format!("{label}: {hint}: cannot lock memory: {e}"))?;
    }
    Ok(())
}

/// Apply the placement rule to `g` (see the module documentation).
pub fn place(g: &Graph) -> Result<Placement, BuildError> {
    let n = g.nodes.len();
    let mut space: Vec<Option<SpaceId>> = vec![None; n];
    let mut kinds = std::collections::BTreeMap::from([(0, SpaceKind::Local)]);
    let parse_id = |v: &str| -> Option<(SpaceId, SpaceKind)> {
        match v {
            "local" | "0" => Some((0, SpaceKind::Local)),
            _ => match v.strip_prefix('p') {
                Some(n) => n.parse().ok().filter(|&n| n > 0).map(|n| (n, SpaceKind::Process)),
                None => v.strip_prefix('t').unwrap_or(v).parse().ok().filter(|&n| n > 0).map(|n| (n, SpaceKind::Thread)),
            },
        }
    };
    let mut next_fresh = 1 + g.nodes.iter().filter_map(|n| space_option(n).and_then(parse_id)).map(|x| x.0).max().unwrap_or(0);
    for node in &g.nodes {
        let err = |why: String| BuildError { label: node_label(node), why };
        let (id, kind) = if let Some(v) = space_option(node) {
            if v == "kernel" {
                return Err(err("space=kernel: this filter has no kernel implementation here".into()));
            }
            parse_id(v).ok_or_else(|| err(format!("space={v}: expected 'local', a thread space N or tN, or a process space pN (N >= 1)")))?
        } else if node.hints.contains(&Hint::Private) {
            next_fresh += 1;
            (next_fresh - 1, SpaceKind::Process)
        } else if node.hints.iter().any(|h| matches!(h, Hint::Background | Hint::Realtime | Hint::HRealtime)) {
            // Scheduling hints apply to a whole space: the node gets a thread of its own.
            next_fresh += 1;
            (next_fresh - 1, SpaceKind::Thread)
        } else {
            continue;
        };
        if let Some(k) = kinds.insert(id, kind).filter(|&k| k != kind) {
            return Err(err(format!("space {id} is used both as a {k:?} space and as a {kind:?} space")));
        }
        space[node.id] = Some(id);
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
    let closing: Vec<&Edge> = g.edges.iter().filter(|e| space[e.from] != space[e.to] && reaches(&cross, space[e.to], space[e.from])).collect();
    if let Some(e) = closing.first() {
        // Name a filter the user placed (space= or a hint) at either end of such an arc,
        // rather than a join or loop node that merely followed it.
        let placed = |n: usize| matches!(g.nodes[n].kind, NodeKind::Filter { .. }) && (space_option(&g.nodes[n]).is_some() || !g.nodes[n].hints.is_empty());
        let culprit = closing.iter().flat_map(|e| [e.to, e.from]).find(|&n| placed(n)).unwrap_or(e.to);
        return Err(BuildError {
            label: node_label(&g.nodes[culprit]),
            why: format!(
                "space {} and space {} feed each other (channels between spaces are one-way: a loop must stay within one space, and a stream cannot return to a space it left)",
                space[e.from], space[e.to]
            ),
        });
    }
    Ok(Placement { space, kinds })
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
/// Prefix sharing between runs: `__publish key=K` offers its input stream under K,
/// `__subscribe key=K` is a source reading the stream a live run publishes under K
/// (see `channel::publish`, `control::prefix`).
pub const PUBLISH: &str = "__publish";
pub const SUBSCRIBE: &str = "__subscribe";

/// Stands in for `__publish` when another live run publishes the same key already (two
/// runs started at once): this run's stream simply is not offered.
struct Unpublished;

impl Filter for Unpublished {
    fn process(&mut self, _: &mut crate::filter::Ctx<'_>, _: &mut crate::filter::Batch) {}
}

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
    fn make(&self, name: &str, args: &Args) -> Result<Box<dyn Filter>, crate::FilterError> {
        let egress = match name {
            EGRESS => true,
            INGRESS => false,
            PUBLISH => {
                let key = args.require("key", None)?;
                return match crate::channel::publish(key, ChannelConfig::default()) {
                    Ok(e) => Ok(Box::new(e)),
                    Err(beltway::Error::InUse { .. }) => Ok(Box::new(Unpublished)),
                    Err(e) => Err(crate::FilterError::Ring { what: "cannot publish the shared prefix".into(), source: e }),
                };
            }
            SUBSCRIBE => {
                let key = args.require("key", None)?;
                return crate::channel::subscribe(key)
                    .map(|i| Box::new(i) as Box<dyn Filter>)
                    .map_err(|e| crate::FilterError::Ring { what: format!("cannot subscribe to the shared prefix {key}"), source: e });
            }
            _ => return self.inner.make(name, args),
        };
        let ch: usize = args.parse("ch", None, usize::MAX)?;
        self.endpoints.lock().expect("not poisoned").remove(&(egress, ch)).ok_or_else(|| crate::FilterError::Rule(format!("channel {ch} has no {name} endpoint")))
    }
    fn is_source(&self, name: &str) -> bool {
        name == INGRESS || name == SUBSCRIBE || self.inner.is_source(name)
    }
    fn order_matters(&self, name: &str) -> bool {
        self.inner.order_matters(name)
    }
    fn replication(&self, name: &str) -> Replication {
        self.inner.replication(name)
    }
    fn rewrite(&self, g: Graph) -> Graph {
        self.inner.rewrite(g)
    }
}

/// The channel configuration of arc `e`: set by the consuming node's hints.
fn channel_config(g: &Graph, e: &Edge, default: ChannelConfig) -> ChannelConfig {
    let to = &g.nodes[e.to];
    let mut cfg = if to.hints.contains(&Hint::Latency) {
        ChannelConfig::latency()
    } else if to.hints.contains(&Hint::Throughput) || to.hints.contains(&Hint::Quiet) {
        // A quiet part of the graph is woken seldom: large batches, up to the latency bound.
        ChannelConfig::throughput()
    } else {
        default
    };
    // `size=` on the producing filter (thesis Table 3.2): the bytes its stream buffers.
    if let NodeKind::Filter { options, .. } | NodeKind::Unix { options, .. } = &g.nodes[e.from].kind {
        if let Some(s) = crate::runtime::size_option(options) {
            cfg.data = (s as usize).next_power_of_two().max(1 << 16);
        }
    }
    cfg
}

/// How to start a process space: this program with arguments that make it call
/// [`run_process_space`] on the same pipeline; `--space ID --fd FD` are appended.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub exe: std::path::PathBuf,
    pub args: Vec<String>,
}

/// What a build holds while it is under way: each construction step adds to it, and its
/// inverse takes that addition out again.
struct Building<'f> {
    /// The filter factory with the channels' endpoints, which space builds take out.
    chans: WithChannels<'f>,
    rings: HashMap<usize, (RingRef, RingRef)>,
    children: Vec<ChildSpace>,
    spaces: Vec<(SpaceId, Space)>,
}

/// A process space seen from the parent.
struct ChildSpace {
    id: SpaceId,
    proc: std::process::Child,
    sock: UnixStream,
}

impl Drop for ChildSpace {
    fn drop(&mut self) {
        // Whatever went wrong, no process space outlives the run.
        if let Ok(None) = self.proc.try_wait() {
            let _ = self.proc.kill();
        }
        let _ = self.proc.wait();
    }
}

/// Spaces built from one graph, ready to run.
pub struct Spaces {
    spaces: Vec<(SpaceId, Space)>,
    children: Vec<ChildSpace>,
    pub placement: Placement,
    /// Channels created (cross-space arcs).
    pub channels: usize,
    /// Each node's space and name (for messages).
    labels: Vec<(SpaceId, String)>,
    /// Per space, the scheduling its hints ask for.
    sched: HashMap<SpaceId, Option<(beltway::sys::Policy, &'static str, String)>>,
}

/// The outcome of a multi-space run.
pub struct SpacesReport {
    /// Per node, labelled with its space (`tcp@1`, `deflate@p2`) when the run had more
    /// than one.
    pub nodes: Vec<NodeReport>,
    pub warnings: Vec<String>,
    /// A space that died: which one, its filters, and why.
    pub died: Option<String>,
    pub failed: bool,
}

fn space_name(p: &Placement, id: SpaceId) -> String {
    match p.kind(id) {
        SpaceKind::Process => format!("p{id}"),
        _ => id.to_string(),
    }
}

// The parent <-> process-space protocol: length-prefixed text messages, and rings passed
// with SCM_RIGHTS, each acknowledged before the next is sent (one message in flight).

fn send_msg(sock: &UnixStream, m: &str) -> std::io::Result<()> {
    let mut w = sock;
    w.write_all(&(m.len() as u32).to_le_bytes())?;
    w.write_all(m.as_bytes())
}

fn recv_msg(sock: &UnixStream) -> std::io::Result<String> {
    let mut r = sock;
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let n = u32::from_le_bytes(n) as usize;
    if n > 16 << 20 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("message of {n} bytes")));
    }
    let mut b = vec![0u8; n];
    r.read_exact(&mut b)?;
    String::from_utf8(b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn send_ring(sock: &UnixStream, r: &RingRef) -> Result<(), String> {
    r.send(sock).map_err(|e| e.to_string())?;
    match recv_msg(sock) {
        Ok(m) if m == "ack" => Ok(()),
        Ok(m) => Err(format!("expected an acknowledgement, got '{m}'")),
        Err(e) => Err(e.to_string()),
    }
}

fn recv_ring(sock: &UnixStream) -> Result<RingRef, String> {
    let r = RingRef::recv(sock).map_err(|e| e.to_string())?;
    send_msg(sock, "ack").map_err(|e| e.to_string())?;
    Ok(r)
}

/// A field of the report protocol (tab-separated, one record a line): backslash, tab,
/// newline and carriage return escaped, so multi-line summaries (hist, flowcount) reach
/// the parent as they were written.
fn one_line(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n").replace('\r', "\\r")
}

/// The inverse of [`one_line`].
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}

/// A space's report as protocol text.
fn report_text(space: &Space) -> String {
    let mut t = String::new();
    for n in space.report() {
        let c = n.counters;
        t += &format!(
            "node\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            one_line(&n.label),
            c.blocks_in,
            c.bytes_in,
            c.blocks_out,
            c.bytes_out,
            c.drops,
            c.nanos,
            n.summary.as_deref().map_or("-".to_string(), one_line)
        );
    }
    for w in space.warnings() {
        t += &format!("warn\t{}\n", one_line(w));
    }
    if space.failed() {
        t += "failed\n";
    }
    t
}

fn parse_report(text: &str, rep: &mut SpacesReport, suffix: &str) {
    for l in text.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        match f.as_slice() {
            ["node", label, nums @ .., summary] if nums.len() == 6 => {
                if label.starts_with(EGRESS) || label.starts_with(INGRESS) {
                    continue;
                }
                let v: Vec<u64> = nums.iter().map(|x| x.parse().unwrap_or(0)).collect();
                let counters = crate::runtime::Counters { blocks_in: v[0], bytes_in: v[1], blocks_out: v[2], bytes_out: v[3], drops: v[4], nanos: v[5] };
                let summary = (*summary != "-").then(|| unescape(summary));
                rep.nodes.push(NodeReport { label: format!("{}{suffix}", unescape(label)), counters, summary });
            }
            ["warn", w] => rep.warnings.push(unescape(w)),
            ["failed"] => rep.failed = true,
            _ => rep.warnings.push(format!("unreadable report line from a process space: {l}")),
        }
    }
}

impl Spaces {
    /// Place `g`, split it, create the channels, start the process spaces (if any, with
    /// `launcher`) and build every space; nothing runs yet. A build error anywhere stops
    /// and reaps the process spaces started so far, and names the filter.
    pub fn build(g: &Graph, factory: &dyn Factory, scratch: usize, cfg: ChannelConfig) -> Result<Spaces, BuildError> {
        Self::build_with(g, factory, scratch, cfg, None)
    }

    pub fn build_with(g: &Graph, factory: &dyn Factory, scratch: usize, cfg: ChannelConfig, launcher: Option<&Launcher>) -> Result<Spaces, BuildError> {
        Self::build_steps(g, factory, scratch, cfg, launcher, None)
    }

    /// The build as a transaction (thesis 6.4, [`crate::txn`]): creating each channel,
    /// starting each process space, receiving and handing over each channel's rings,
    /// attaching each consumer, building each space and each process space's `ready` is
    /// one step with its inverse (dropping a ring unmaps it, dropping a process space
    /// kills and reaps it, dropping a space unmaps its store). A failing step undoes the
    /// earlier ones, last first, and the error names the step and what was undone.
    ///
    /// `fail_at = Some(k)` injects a failure into step k (from 0), for tests of the
    /// rollback; past the last step it fails after all of them, saying how many there were.
    pub fn build_steps(
        g: &Graph,
        factory: &dyn Factory,
        scratch: usize,
        cfg: ChannelConfig,
        launcher: Option<&Launcher>,
        fail_at: Option<usize>,
    ) -> Result<Spaces, BuildError> {
        let g = &replicate(&factory.rewrite(g.clone()), factory)?;
        let placement = place(g)?;
        check_joins(g, &placement, factory)?;
        let (parts, cross) = split(g, &placement);
        let here = |s: SpaceId| placement.kind(s) != SpaceKind::Process;
        let chan_err = |e: &Edge, why: String| BuildError { label: node_label(&g.nodes[e.to]), why };
        let building = Building {
            chans: WithChannels { inner: factory, endpoints: Mutex::new(HashMap::new()) },
            rings: HashMap::new(),
            children: Vec::new(),
            spaces: Vec::new(),
        };
        let mut t = Transaction::new(building);
        let step_no = std::cell::Cell::new(0usize);
        let inject = |what: &str| -> Result<(), BuildError> {
            let k = step_no.get();
            step_no.set(k + 1);
            if fail_at == Some(k) {
                return Err(BuildError { label: what.to_string(), why: format!("injected failure at construction step {k}") });
            }
            Ok(())
        };
        let failed = |f: StepFailed<BuildError>| {
            let mut e = f.error;
            if !f.undone.is_empty() {
                e.why += &format!(" (construction step '{}' failed; rolled back: {})", f.step, f.undone.join(", "));
            }
            e
        };
        for (k, e) in cross.iter().enumerate() {
            if here(placement.space[e.from]) {
                let same = here(placement.space[e.to]);
                t.step(
                    format!("create channel {k}"),
                    |b| {
                        inject(&node_label(&g.nodes[e.to]))?;
                        let (tx, tr, d) = egress(&format!("sl-ch{k}"), channel_config(g, e, cfg), same).map_err(|x| chan_err(e, format!("cannot create a channel into it: {x}")))?;
                        b.chans.endpoints.lock().expect("not poisoned").insert((true, k), Box::new(tx) as Box<dyn Filter>);
                        b.rings.insert(k, (tr, d));
                        Ok(k)
                    },
                    |b, k| {
                        b.chans.endpoints.lock().expect("not poisoned").remove(&(true, k));
                        b.rings.remove(&k);
                    },
                )
                .map_err(failed)?;
            }
        }
        // Start the process spaces; each first sends the rings of the channels it feeds.
        for (&id, _) in placement.kinds.iter().filter(|(_, &k)| k == SpaceKind::Process) {
            let label = labels_of(g, &placement, id);
            let err = |why: String| BuildError { label: label.clone(), why };
            t.step(
                format!("start process space p{id}"),
                |b| {
                    inject(&label)?;
                    let Some(l) = launcher else { return Err(err(format!("space p{id}: process spaces need a launcher (run through the streamline command)"))) };
                    let (mine, theirs) = UnixStream::pair().map_err(|e| err(format!("socketpair: {e}")))?;
                    beltway::sys::inherit_across_exec(&theirs).map_err(|e| err(format!("fcntl: {e}")))?;
                    let proc = std::process::Command::new(&l.exe)
                        .args(&l.args)
                        .arg("--space")
                        .arg(id.to_string())
                        .arg("--fd")
                        .arg(theirs.as_raw_fd().to_string())
                        .stdin(std::process::Stdio::null())
                        .spawn()
                        .map_err(|e| err(format!("cannot start process space p{id} ({}): {e}", l.exe.display())))?;
                    drop(theirs);
                    let child = ChildSpace { id, proc, sock: mine };
                    let first = recv_msg(&child.sock).map_err(|e| err(format!("process space p{id} ended before it started: {e}")))?;
                    if let Some(why) = first.strip_prefix("error ") {
                        return Err(child_error(why, &label));
                    }
                    b.children.push(child);
                    Ok(id)
                },
                // Dropping the child kills and reaps it; its mappings go with it.
                |b, id| b.children.retain(|c| c.id != id),
            )
            .map_err(failed)?;
            for (k, e) in cross.iter().enumerate().filter(|(_, e)| placement.space[e.from] == id) {
                t.step(
                    format!("receive channel {k} from p{id}"),
                    |b| {
                        inject(&node_label(&g.nodes[e.to]))?;
                        let c = b.children.iter().find(|c| c.id == id).expect("started above");
                        let tr = recv_ring(&c.sock).map_err(|x| chan_err(e, format!("channel from process space p{id}: {x}")))?;
                        let d = recv_ring(&c.sock).map_err(|x| chan_err(e, format!("channel from process space p{id}: {x}")))?;
                        b.rings.insert(k, (tr, d));
                        Ok(k)
                    },
                    |b, k| {
                        b.rings.remove(&k);
                    },
                )
                .map_err(failed)?;
            }
        }
        // Consumers attach before anyone writes: here, or in the process spaces.
        for (k, e) in cross.iter().enumerate() {
            let to = placement.space[e.to];
            t.step(
                format!("attach channel {k}"),
                |b| {
                    inject(&node_label(&g.nodes[e.to]))?;
                    let (tr, d) = &b.rings[&k];
                    if here(to) {
                        // A process space feeding us may not name files for us to map.
                        let trusted = here(placement.space[e.from]);
                        let mut rx = ingress(&format!("sl-ch{k}"), tr, d, trusted).map_err(|x| chan_err(e, format!("cannot attach to its channel: {x}")))?;
                        rx.set_busy(g.nodes[e.to].hints.contains(&Hint::Busy));
                        b.chans.endpoints.lock().expect("not poisoned").insert((false, k), Box::new(rx) as Box<dyn Filter>);
                    } else {
                        let c = b.children.iter().find(|c| c.id == to).expect("process space started");
                        send_ring(&c.sock, tr)
                            .and_then(|_| send_ring(&c.sock, d))
                            .map_err(|x| chan_err(e, format!("cannot hand its channel to process space p{to}: {x}")))?;
                    }
                    Ok(k)
                },
                // Here: drop the consumer's endpoint. In a process space: the mapping is
                // the child's, undone when the start step's inverse stops it.
                |b, k| {
                    b.chans.endpoints.lock().expect("not poisoned").remove(&(false, k));
                },
            )
            .map_err(failed)?;
        }
        let mut ids: Vec<SpaceId> = parts.keys().copied().filter(|&s| here(s)).collect();
        ids.sort_unstable();
        for id in ids {
            t.step(
                format!("build space {}", space_name(&placement, id)),
                |b| {
                    inject(&labels_of(g, &placement, id))?;
                    let mut space = Space::build(&parts[&id].graph, &b.chans, scratch)?;
                    // A space that feeds another space of this process keeps its rings in
                    // shared memory, so the consumer reads its blocks in place.
                    if cross.iter().any(|e| placement.space[e.from] == id && here(placement.space[e.to])) {
                        space.store().share_rings();
                    }
                    b.spaces.push((id, space));
                    Ok(id)
                },
                |b, id| b.spaces.retain(|(s, _)| *s != id),
            )
            .map_err(failed)?;
        }
        let child_ids: Vec<SpaceId> = t.context().children.iter().map(|c| c.id).collect();
        for id in child_ids {
            let label = labels_of(g, &placement, id);
            t.step(
                format!("process space p{id} ready"),
                |b| {
                    inject(&label)?;
                    let c = b.children.iter().find(|c| c.id == id).expect("started above");
                    match recv_msg(&c.sock) {
                        Ok(m) if m == "ready" => Ok(id),
                        Ok(m) => Err(child_error(m.strip_prefix("error ").unwrap_or(&m), &label)),
                        Err(e) => Err(BuildError { label: label.clone(), why: format!("process space p{id} ended while building: {e}") }),
                    }
                },
                // Nothing to take back: the start step's inverse stops the space.
                |_, _| {},
            )
            .map_err(failed)?;
        }
        if let Some(k) = fail_at.filter(|&k| k >= step_no.get()) {
            let n = step_no.get();
            drop(t.rollback());
            return Err(BuildError {
                label: "build".into(),
                why: format!("injected failure at construction step {k}: the build has {n} steps (0..{n}), all rolled back"),
            });
        }
        let b = t.commit();
        let labels = g.nodes.iter().map(|n| (placement.space[n.id], node_label(n))).collect();
        let sched = placement.spaces().into_iter().map(|s| (s, schedule_of(g, &placement, s))).collect();
        Ok(Spaces { spaces: b.spaces, children: b.children, placement, channels: cross.len(), labels, sched })
    }

    /// Process ids of the process spaces (for tests and monitoring).
    pub fn process_ids(&self) -> Vec<(SpaceId, u32)> {
        self.children.iter().map(|c| (c.id, c.proc.id())).collect()
    }

    /// Run every space to its end: space 0 on this thread (with `tick` for progress),
    /// thread spaces on pinned worker threads, process spaces in their processes.
    /// `interrupt` stops them all; so does a space that dies (a panicking filter, a killed
    /// process), which the report then names.
    pub fn run(self, interrupt: &AtomicBool, mut tick: impl FnMut(&Space)) -> SpacesReport {
        let multi = self.spaces.len() + self.children.len() > 1;
        let labels = self.labels;
        let placement = self.placement;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut rep = SpacesReport { nodes: vec![], warnings: vec![], died: None, failed: false };
        let died = Mutex::new(Vec::<String>::new());
        let who = |id: SpaceId| {
            let filters: Vec<&str> = labels.iter().filter(|l| l.0 == id).map(|l| l.1.as_str()).collect();
            format!("space {} ({})", space_name(&placement, id), filters.join(", "))
        };
        for c in &self.children {
            if let Err(e) = send_msg(&c.sock, "go") {
                died.lock().expect("not poisoned").push(format!("{} died before it started: {e}", who(c.id)));
                interrupt.store(true, Ordering::Relaxed);
            }
        }
        let mut results: Vec<(SpaceId, Result<Space, String>)> = Vec::new();
        let child_reports = Mutex::new(Vec::<(SpaceId, String)>::new());
        let mut children = self.children;
        let stop_socks = children_socks(&children);
        let watching = std::sync::atomic::AtomicUsize::new(children.len());
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            let mut local = None;
            for (id, mut space) in self.spaces {
                if id == 0 {
                    local = Some(space);
                    continue;
                }
                let sched = self.sched.get(&id).cloned().flatten();
                let died = &died;
                let h = std::thread::Builder::new()
                    .name(format!("sl-space{id}"))
                    .spawn_scoped(scope, move || {
                        let _ = beltway::sys::pin_to_cpu(id % cpus);
                        if let Err(e) = apply_schedule(&sched) {
                            died.lock().expect("not poisoned").push(e);
                            interrupt.store(true, Ordering::Relaxed);
                        }
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
            // Tell the process spaces to stop when the run is cut short (otherwise they
            // end by themselves when their inputs end).
            let watching = &watching;
            if !stop_socks.is_empty() {
                let stop_socks = &stop_socks;
                scope.spawn(move || {
                    while watching.load(Ordering::Relaxed) > 0 {
                        if interrupt.load(Ordering::Relaxed) {
                            for c in stop_socks {
                                let _ = send_msg(c, "stop");
                            }
                            return;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                });
            }
            // One watcher per process space: its report, or how it died.
            for c in children.iter_mut() {
                let (died, child_reports, who) = (&died, &child_reports, &who);
                scope.spawn(move || {
                    let _done = Decrement(watching);
                    let msg = recv_msg(&c.sock);
                    match msg {
                        Ok(text) => {
                            let _ = c.proc.wait();
                            child_reports.lock().expect("not poisoned").push((c.id, text));
                        }
                        Err(_) => {
                            let st = c.proc.wait();
                            let why = match st {
                                Ok(st) => match st.signal() {
                                    Some(sig) => format!("killed by signal {sig}{}", if sig == 9 { " (SIGKILL)" } else { "" }),
                                    None => format!("exited with {st} without a report"),
                                },
                                Err(e) => format!("lost: {e}"),
                            };
                            died.lock().expect("not poisoned").push(format!("{} died: {why}", who(c.id)));
                            interrupt.store(true, Ordering::Relaxed);
                        }
                    }
                });
            }
            if let Some(mut space) = local {
                if let Err(e) = apply_schedule(&self.sched.get(&0).cloned().flatten()) {
                    died.lock().expect("not poisoned").push(e);
                    interrupt.store(true, Ordering::Relaxed);
                }
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
        for (id, r) in results {
            match r {
                Ok(space) => {
                    let suffix = if multi { format!("@{id}") } else { String::new() };
                    let mut part = SpacesReport { nodes: vec![], warnings: vec![], died: None, failed: false };
                    parse_report(&report_text(&space), &mut part, &suffix);
                    // Keep the summaries' exact text (parse_report flattens lines).
                    let summaries: Vec<Option<String>> = space.report().into_iter().filter(|n| !n.label.starts_with(EGRESS) && !n.label.starts_with(INGRESS)).map(|n| n.summary).collect();
                    for (n, s) in part.nodes.iter_mut().zip(summaries) {
                        n.summary = s;
                    }
                    rep.nodes.extend(part.nodes);
                    rep.warnings.extend(space.warnings().iter().cloned());
                    rep.failed |= space.failed();
                }
                Err(why) => died.lock().expect("not poisoned").push(format!("{} died: {why}", who(id))),
            }
        }
        let mut reports = child_reports.into_inner().expect("not poisoned");
        reports.sort_by_key(|r| r.0);
        for (id, text) in reports {
            let mut part = SpacesReport { nodes: vec![], warnings: vec![], died: None, failed: false };
            parse_report(&text, &mut part, &format!("@p{id}"));
            rep.nodes.extend(part.nodes);
            rep.warnings.extend(part.warnings);
            rep.failed |= part.failed;
        }
        let died = died.into_inner().expect("not poisoned");
        if !died.is_empty() {
            rep.died = Some(died.join("; "));
            rep.failed = true;
        }
        rep
    }
}

/// Counts a watcher out when it ends, however it ends.
struct Decrement<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn children_socks(children: &[ChildSpace]) -> Vec<UnixStream> {
    children.iter().filter_map(|c| c.sock.try_clone().ok()).collect()
}

/// A build error reported by a process space: `LABEL\tWHY`, or just a reason.
fn child_error(text: &str, space_label: &str) -> BuildError {
    match text.split_once('\t') {
        Some((label, why)) => BuildError { label: label.to_string(), why: why.to_string() },
        None => BuildError { label: space_label.to_string(), why: text.to_string() },
    }
}

fn labels_of(g: &Graph, p: &Placement, id: SpaceId) -> String {
    g.nodes.iter().filter(|n| p.space[n.id] == id).map(node_label).collect::<Vec<_>>().join(", ")
}

/// The process-space side (started by [`Launcher`]): build this space's share of `g`,
/// exchange channel rings with the parent over `sock`, run when told, send the report.
/// Returns the exit status.
pub fn run_process_space(g: &Graph, factory: &dyn Factory, scratch: usize, cfg: ChannelConfig, id: SpaceId, sock: UnixStream) -> i32 {
    let fail = |why: String| {
        let _ = send_msg(&sock, &format!("error {why}"));
        2
    };
    let fail_build = |e: BuildError| {
        let _ = send_msg(&sock, &format!("error {}\t{}", e.label, e.why));
        2
    };
    let g = &match replicate(&factory.rewrite(g.clone()), factory) {
        Ok(g) => g,
        Err(e) => return fail_build(e),
    };
    let placement = match place(g).and_then(|p| check_joins(g, &p, factory).map(|_| p)) {
        Ok(p) => p,
        Err(e) => return fail_build(e),
    };
    let (mut parts, cross) = split(g, &placement);
    let Some(part) = parts.remove(&id) else { return fail(format!("no filter is placed in space p{id}")) };
    let mut endpoints = HashMap::new();
    let mut mine = Vec::new();
    for (k, e) in cross.iter().enumerate().filter(|(_, e)| placement.space[e.from] == id) {
        match egress_to(&format!("sl-ch{k}"), channel_config(g, e, cfg), false, true) {
            Ok((tx, t, d)) => {
                endpoints.insert((true, k), Box::new(tx) as Box<dyn Filter>);
                mine.push((t, d));
            }
            Err(x) => return fail(format!("{}: cannot create a channel: {x}", node_label(&g.nodes[e.from]))),
        }
    }
    if send_msg(&sock, "rings").is_err() {
        return 3;
    }
    for (t, d) in &mine {
        if send_ring(&sock, t).and_then(|_| send_ring(&sock, d)).is_err() {
            return 3;
        }
    }
    for (k, e) in cross.iter().enumerate().filter(|(_, e)| placement.space[e.to] == id) {
        let rings = recv_ring(&sock).and_then(|t| recv_ring(&sock).map(|d| (t, d)));
        let busy = g.nodes[e.to].hints.contains(&Hint::Busy);
        let rx = rings.and_then(|(t, d)| ingress(&format!("sl-ch{k}"), &t, &d, true).map_err(|x| x.to_string())).map(|mut rx| {
            rx.set_busy(busy);
            rx
        });
        match rx {
            Ok(rx) => {
                endpoints.insert((false, k), Box::new(rx) as Box<dyn Filter>);
            }
            Err(x) => return fail(format!("{}: channel: {x}", node_label(&g.nodes[e.to]))),
        }
    }
    let f = WithChannels { inner: factory, endpoints: Mutex::new(endpoints) };
    let mut space = match Space::build(&part.graph, &f, scratch) {
        Ok(s) => s,
        Err(e) => return fail_build(e),
    };
    if let Err(e) = apply_schedule(&schedule_of(g, &placement, id)) {
        return fail(e);
    }
    if send_msg(&sock, "ready").is_err() {
        return 3;
    }
    match recv_msg(&sock) {
        Ok(m) if m == "go" => {}
        _ => return 0, // the parent gave up (a build error elsewhere): nothing ran
    }
    // Stop when the parent says so or goes away.
    let interrupt = std::sync::Arc::new(AtomicBool::new(false));
    if let Ok(s) = sock.try_clone() {
        let flag = interrupt.clone();
        std::thread::spawn(move || {
            let _ = recv_msg(&s);
            flag.store(true, Ordering::Relaxed);
        });
    }
    space.run(&interrupt, |_| {});
    drop(f);
    if send_msg(&sock, &report_text(&space)).is_err() {
        return 3;
    }
    0
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_else(|| "panicked".into())
}
