//! Pure placement (no system calls): replication of `space=A,B,...` filters, the
//! placement rule that gives every node a space, the checks that refuse placements whose
//! result would depend on timing (joins across spaces, loops between spaces), and the
//! scheduling each space's hints ask for. Input a graph, output a [`Placement`] or a
//! [`BuildError`] naming the node and its span.

use crate::filter::Replication;
use crate::runtime::{base_name, span_of, BuildError, Factory};
use lang::{Edge, Graph, Hint, Node, NodeKind, SpaceName, SpaceSpec};

/// Space ids: 0 is the calling thread.
pub type SpaceId = usize;

/// What executes a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SpaceKind {
    /// The calling thread (space 0).
    Local,
    /// A worker thread pinned to one CPU.
    Thread,
    /// A separate OS process mapping the same rings (isolates crashes).
    Process,
}

/// Where each node of a graph runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
        self.space
            .iter()
            .all(|&s| s == self.space.first().copied().unwrap_or(0))
    }
    pub fn kind(&self, s: SpaceId) -> SpaceKind {
        self.kinds.get(&s).copied().unwrap_or(if s == 0 {
            SpaceKind::Local
        } else {
            SpaceKind::Thread
        })
    }
}

/// The node's typed `space=` ([`lang::Placement::space`]).
pub(super) fn space_of(n: &Node) -> Option<&SpaceSpec> {
    match &n.kind {
        NodeKind::Filter { place, .. } | NodeKind::Unix { place, .. } => place.space.as_ref(),
        _ => None,
    }
}

/// Data parallelism (thesis 5.4): a filter with `space=A,B,...` is replicated, one copy per
/// listed space, with the template `split | f + f + ... | join`. A filter that keeps
/// sessions gets a hash split on the class (connection scaling: each session on one
/// replica); any other a round-robin split and a join that restores the original order.
pub fn replicate(g: &Graph, factory: &dyn Factory) -> Result<Graph, BuildError> {
    let mut g = g.clone();
    let targets: Vec<usize> = g
        .nodes
        .iter()
        .filter(|n| {
            space_of(n)
                .and_then(SpaceSpec::runtime)
                .is_some_and(|l| l.len() > 1)
        })
        .map(|n| n.id)
        .collect();
    for id in targets {
        let node = g.nodes[id].clone();
        let spec = space_of(&node).expect("a target has a list").clone();
        let list = spec.runtime().expect("a target has a list").to_vec();
        let err = |why: String| BuildError::placement(base_name(&node), span_of(&node), why);
        let NodeKind::Filter { filter, .. } = &node.kind else {
            return Err(err("only native filters can be replicated".into()));
        };
        if node.hints.contains(&Hint::Single) {
            return Err(err(format!(
                "@single asks for one instance, space={spec} for {}",
                list.len()
            )));
        }
        if factory.is_source(filter) || !g.edges.iter().any(|e| e.to == id) {
            return Err(err(
                "a source cannot be replicated; replicate the filters after it".into(),
            ));
        }
        let mode = match factory.replication(filter) {
            Replication::Blocks => lang::SplitMode::RoundRobin,
            Replication::Sessions => {
                if let Some(why) = order_sensitive_after(&g, id, factory) {
                    return Err(err(format!(
                        "space={spec}: {filter}'s copies would each keep their sessions in order but interleave them differently from one {filter}, and {why}; replicate it only when what follows counts (count, hist), or place it on one space"
                    )));
                }
                lang::SplitMode::Hash
            }
            Replication::Never(why) => {
                return Err(err(format!("space={spec}: cannot be replicated: {why}")))
            }
        };
        let before = g.nodes.len();
        g = lang::parallelize(&g, id, list.len(), mode);
        // Copy 0 keeps the id; the split, copies 1.. and the join were appended.
        let copies = std::iter::once(id).chain(before + 1..before + list.len());
        for (copy, space) in copies.zip(&list) {
            if let NodeKind::Filter { place, .. } = &mut g.nodes[copy].kind {
                place.space = Some(SpaceSpec::Runtime(vec![*space]));
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
    let mut todo: Vec<usize> = g
        .edges
        .iter()
        .filter(|e| e.from == id)
        .map(|e| e.to)
        .collect();
    let mut seen = vec![false; g.nodes.len()];
    while let Some(n) = todo.pop() {
        if std::mem::replace(&mut seen[n], true) {
            continue;
        }
        match &g.nodes[n].kind {
            NodeKind::Filter { filter, .. } if !factory.order_matters(filter) => continue,
            NodeKind::Filter { filter, .. }
                if factory.replication(filter) != Replication::Blocks =>
            {
                return Some(format!("{filter} downstream sees the order"));
            }
            NodeKind::Unix { argv, .. } => {
                return Some(format!(
                    "{} downstream reads the stream in order",
                    argv.first().map_or("a Unix command", |s| s.as_str())
                ))
            }
            _ => {}
        }
        if !g.edges.iter().any(|e| e.from == n) {
            return Some(format!(
                "{} at the end writes the stream in order",
                base_name(&g.nodes[n])
            ));
        }
        todo.extend(g.edges.iter().filter(|e| e.from == n).map(|e| e.to));
    }
    None
}

/// The parallel section of a join that is not a replica join (ordered or merge): the
/// nodes upstream of some of its in-arcs but not of all (`branches`), and the common
/// nodes that feed a branch or the join directly (`forks`). Such a section must run in one
/// space with its join unless the result cannot show it ([`check_joins`]); the control
/// plane keeps a plan's sections together by the same definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelSection {
    pub join: usize,
    pub branches: Vec<usize>,
    pub forks: Vec<usize>,
}

/// Every non-replica join's [`ParallelSection`], joins with fewer than two inputs left out.
pub fn parallel_sections(g: &Graph) -> Vec<ParallelSection> {
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
    let mut out = Vec::new();
    for join in g.nodes.iter().filter(|n| matches!(n.kind, NodeKind::Join { mode } if !matches!(mode, lang::JoinMode::Ordered | lang::JoinMode::Merge))) {
        let preds: Vec<usize> = g.edges.iter().filter(|e| e.to == join.id).map(|e| e.from).collect();
        if preds.len() < 2 {
            continue;
        }
        let sets: Vec<Vec<bool>> = preds.iter().map(|&p| ancestors(p)).collect();
        let any = |n: usize| sets.iter().any(|s| s[n]);
        let every = |n: usize| sets.iter().all(|s| s[n]);
        let branches: Vec<usize> = (0..g.nodes.len()).filter(|&n| any(n) && !every(n)).collect();
        let forks = (0..g.nodes.len())
            .filter(|&n| every(n) && g.edges.iter().any(|e| e.from == n && (e.to == join.id || branches.contains(&e.to))))
            .collect();
        out.push(ParallelSection { join: join.id, branches, forks });
    }
    out
}

/// Joins of parallel branches (thesis 3.3.2 templates `+`, `++`, `+*`) whose branches do
/// not run in one space with the join and the fork they start at: copies of a block that
/// travel different channels arrive in an order, and as distinct blocks, that depend on
/// timing. So such a placement is refused unless the result cannot show it: an `All` join
/// (every copy passes) whose output only reaches filters that count. Replicas' joins
/// (ordered, merge) are exempt: they are built for it.
pub fn check_joins(g: &Graph, p: &Placement, factory: &dyn Factory) -> Result<(), BuildError> {
    let space = &p.space;
    for ParallelSection {
        join,
        branches,
        forks,
    } in parallel_sections(g)
    {
        let join = &g.nodes[join];
        let section: Vec<usize> = branches.iter().copied().chain(forks).collect();
        let off: Vec<usize> = section
            .iter()
            .copied()
            .filter(|&n| space[n] != space[join.id])
            .collect();
        if off.is_empty() {
            continue;
        }
        let all = matches!(
            join.kind,
            NodeKind::Join {
                mode: lang::JoinMode::All
            }
        );
        let why_order = order_sensitive_after(g, join.id, factory);
        if all && why_order.is_none() {
            continue;
        }
        // Name a filter the user placed in the section, if any.
        let placed = |n: usize| {
            matches!(g.nodes[n].kind, NodeKind::Filter { .. }) && space_of(&g.nodes[n]).is_some()
        };
        let culprit = section
            .iter()
            .copied()
            .find(|&n| placed(n))
            .unwrap_or(off[0]);
        let mut spans: Vec<SpaceId> = section
            .iter()
            .map(|&n| space[n])
            .chain([space[join.id]])
            .collect();
        spans.sort_unstable();
        spans.dedup();
        let spans: Vec<String> = spans.iter().map(|&s| space_name(p, s)).collect();
        let consequence = match why_order {
            Some(w) if all => format!("their blocks would reach the join in an order that depends on timing, and {w}"),
            _ => "copies of one block would reach the join as different blocks, at times that depend on timing".to_string(),
        };
        let n = &g.nodes[culprit];
        return Err(BuildError::placement(
            base_name(n),
            span_of(n),
            format!("the parallel branches it is part of would span spaces {}; branches must run in one space with their fork and join here ({consequence}); place them together", spans.join(", ")),
        ));
    }
    Ok(())
}

/// How space `id` is scheduled, from the hints of the nodes placed there (thesis Table
/// 3.3): `@hrealtime` SCHED_FIFO priority 50 with the process's memory locked,
/// `@realtime` SCHED_RR priority 10, `@background` SCHED_IDLE; the strongest wins. With
/// the hint and the node that asked for it (for messages).
pub fn schedule_of(
    g: &Graph,
    p: &Placement,
    id: SpaceId,
) -> Option<(beltway::sys::Policy, &'static str, String)> {
    schedule_in(
        &g.nodes
            .iter()
            .filter(|n| p.space[n.id] == id)
            .collect::<Vec<_>>(),
    )
}

/// How a space holding `nodes` is scheduled ([`schedule_of`]; a process space asks it of
/// its part's nodes, whose channel endpoints carry no hints).
pub fn schedule_in(nodes: &[&Node]) -> Option<(beltway::sys::Policy, &'static str, String)> {
    use beltway::sys::Policy;
    let here = || nodes.iter().copied();
    for (hint, policy, name) in [
        (Hint::HRealtime, Policy::Fifo(50), "@hrealtime"),
        (Hint::Realtime, Policy::RoundRobin(10), "@realtime"),
        (Hint::Background, Policy::Idle, "@background"),
    ] {
        if let Some(n) = here().find(|n| n.hints.contains(&hint)) {
            return Some((policy, name, base_name(n)));
        }
    }
    None
}

/// Apply the placement rule to `g` (see the module documentation).
pub fn place(g: &Graph) -> Result<Placement, BuildError> {
    let n = g.nodes.len();
    let mut space: Vec<Option<SpaceId>> = vec![None; n];
    let mut kinds = std::collections::BTreeMap::from([(0, SpaceKind::Local)]);
    // One space in the runtime's names: its id and kind (a list is replicated first).
    let one = |s: &SpaceSpec| -> Option<(SpaceId, SpaceKind)> {
        match s.runtime()? {
            [SpaceName::Local] => Some((0, SpaceKind::Local)),
            [SpaceName::Thread(n)] => Some((*n, SpaceKind::Thread)),
            [SpaceName::Process(n)] => Some((*n, SpaceKind::Process)),
            _ => None,
        }
    };
    let mut next_fresh = 1 + g
        .nodes
        .iter()
        .filter_map(|n| space_of(n).and_then(one))
        .map(|x| x.0)
        .max()
        .unwrap_or(0);
    for node in &g.nodes {
        let err = |why: String| BuildError::placement(base_name(node), span_of(node), why);
        let (id, kind) = if let Some(v) = space_of(node) {
            if matches!(
                v,
                SpaceSpec::Planner {
                    kind: Some(lang::PinKind::Kernel),
                    cpu: None
                }
            ) {
                return Err(err(
                    "space=kernel: this filter has no kernel implementation here".into(),
                ));
            }
            one(v).ok_or_else(|| err(format!("space={v}: expected 'local', a thread space N or tN, or a process space pN (N >= 1)")))?
        } else if node.hints.contains(&Hint::Private) {
            next_fresh += 1;
            (next_fresh - 1, SpaceKind::Process)
        } else if node
            .hints
            .iter()
            .any(|h| matches!(h, Hint::Background | Hint::Realtime | Hint::HRealtime))
        {
            // Scheduling hints apply to a whole space: the node gets a thread of its own.
            next_fresh += 1;
            (next_fresh - 1, SpaceKind::Thread)
        } else {
            continue;
        };
        if let Some(k) = kinds.insert(id, kind).filter(|&k| k != kind) {
            return Err(err(format!(
                "space {id} is used both as a {k:?} space and as a {kind:?} space"
            )));
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
            let ups: Vec<usize> = g
                .edges
                .iter()
                .filter(|e| e.to == node.id)
                .map(|e| e.from)
                .collect();
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
    let cross: Vec<(SpaceId, SpaceId)> = g
        .edges
        .iter()
        .filter(|e| space[e.from] != space[e.to])
        .map(|e| (space[e.from], space[e.to]))
        .collect();
    let closing: Vec<&Edge> = g
        .edges
        .iter()
        .filter(|e| space[e.from] != space[e.to] && reaches(&cross, space[e.to], space[e.from]))
        .collect();
    if let Some(e) = closing.first() {
        // Name a filter the user placed (space= or a hint) at either end of such an arc,
        // rather than a join or loop node that merely followed it.
        let placed = |n: usize| {
            matches!(g.nodes[n].kind, NodeKind::Filter { .. })
                && (space_of(&g.nodes[n]).is_some() || !g.nodes[n].hints.is_empty())
        };
        let culprit = closing
            .iter()
            .flat_map(|e| [e.to, e.from])
            .find(|&n| placed(n))
            .unwrap_or(e.to);
        let n = &g.nodes[culprit];
        return Err(BuildError::placement(
            base_name(n),
            span_of(n),
            format!(
                "space {} and space {} feed each other (channels between spaces are one-way: a loop must stay within one space, and a stream cannot return to a space it left)",
                space[e.from], space[e.to]
            ),
        ));
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

pub(super) fn space_name(p: &Placement, id: SpaceId) -> String {
    match p.kind(id) {
        SpaceKind::Process => format!("p{id}"),
        _ => id.to_string(),
    }
}

pub(super) fn labels_of(g: &Graph, p: &Placement, id: SpaceId) -> String {
    g.nodes
        .iter()
        .filter(|n| p.space[n.id] == id)
        .map(base_name)
        .collect::<Vec<_>>()
        .join(", ")
}
