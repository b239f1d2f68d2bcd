//! Templates: graph rewrite rules (thesis 3.3.2 and 6.2.1). The parser first builds a
//! [`Request`], the Boolean-augmented graph, in which parallel operators and negation are
//! pseudo-vertices; the passes here rewrite it into the base grammar of filters, joins
//! and selector-annotated arcs. Each pass takes a request and returns it rewritten, or
//! unchanged when nothing matches:
//!
//! - [`negation`]: `!A | B` becomes `A |! B` (condition inversion on A's out-arcs);
//! - [`boolean`]: Or (`++`, `*`) becomes a `join` passing the first copy of each block,
//!   And (`+*`, `&`) one passing the Nth, N = number of arcs into it;
//! - [`split_join`]: plain `+` becomes a join keeping duplicates, or nothing at all at
//!   the end of the pipeline, where the branches are sinks.
//!
//! [`parallelize`] works on a finished [`Graph`]: the data-parallel rewrite of one filter
//! `f` into `split | f + f + ... | join` (not applied by [`crate::parse`]).

use std::collections::{HashMap, HashSet};

use crate::graph::{Edge, Graph, Hint, JoinMode, Node, NodeId, NodeKind, Selector, SplitMode};
use crate::span::Span;

/// The parallel operator a [`RKind::Par`] pseudo-vertex stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParKind {
    /// `+`: split/join, duplicates kept.
    Plus,
    /// `++` or `*`: union.
    Or,
    /// `+*` or `&`: intersection.
    And,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RKind {
    /// A vertex of the base grammar.
    Base(NodeKind),
    /// The meeting point of a parallel expression's branches: one arc in per branch.
    Par(ParKind),
    /// `!A`: one arc in from A's exit; the arcs out of it are the ones to invert.
    Not,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RNode {
    pub kind: RKind,
    pub span: Span,
    pub hints: Vec<Hint>,
    pub name: Option<String>,
}

/// The request graph before templates. Ids are indices into `nodes`; removed vertices
/// are `None` until [`Request::into_graph`] renumbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub nodes: Vec<Option<RNode>>,
    pub edges: Vec<Edge>,
}

impl Request {
    pub(crate) fn new() -> Self {
        Request {
            nodes: Vec::new(),
            edges: Vec::new(),
        }
    }

    pub(crate) fn add(&mut self, kind: RKind, span: Span) -> NodeId {
        self.nodes.push(Some(RNode {
            kind,
            span,
            hints: Vec::new(),
            name: None,
        }));
        self.nodes.len() - 1
    }

    pub(crate) fn edge(&mut self, from: NodeId, to: NodeId, sel: Selector, span: Span) {
        self.edges.push(Edge {
            from,
            to,
            sel,
            span,
        });
    }

    /// The finished graph: removed vertices dropped and the rest renumbered in order,
    /// duplicate arcs (same from, to and selector) merged. Fails, returning the request,
    /// if a pseudo-vertex is left (a pass was skipped).
    pub fn into_graph(self) -> Result<Graph, Request> {
        if self
            .nodes
            .iter()
            .flatten()
            .any(|n| !matches!(n.kind, RKind::Base(_)))
        {
            return Err(self);
        }
        let mut map = vec![usize::MAX; self.nodes.len()];
        let mut nodes = Vec::new();
        for (i, n) in self.nodes.into_iter().enumerate() {
            if let Some(n) = n {
                let RKind::Base(kind) = n.kind else {
                    unreachable!()
                };
                map[i] = nodes.len();
                nodes.push(Node {
                    id: nodes.len(),
                    kind,
                    span: n.span,
                    hints: n.hints,
                    name: n.name,
                });
            }
        }
        let mut edges: Vec<Edge> = Vec::new();
        let mut seen = HashSet::new();
        for mut e in self.edges {
            e.from = map[e.from];
            e.to = map[e.to];
            if seen.insert((e.from, e.to, e.sel.clone())) {
                edges.push(e);
            }
        }
        Ok(Graph { nodes, edges })
    }
}

/// All templates in order: [`negation`], [`boolean`], [`split_join`].
pub fn expand(r: Request) -> Request {
    split_join(boolean(negation(r)))
}

/// `!A | B` → `A |! B`: each negation pseudo-vertex is removed and every arc out of it
/// becomes an arc out of A's exit with the complement selector (a double negation
/// cancels). A negation with no arc out (the end of the pipeline) becomes a pass-through
/// `join(all)` sink reached by an inverted arc, so what it passes stays observable.
pub fn negation(mut r: Request) -> Request {
    let is_not = |r: &Request, n: NodeId| {
        matches!(
            &r.nodes[n],
            Some(RNode {
                kind: RKind::Not,
                ..
            })
        )
    };
    // The parser gives every negation exactly one arc in, from its operand's exit.
    let mut source = vec![usize::MAX; r.nodes.len()];
    let mut has_out = vec![false; r.nodes.len()];
    for e in &r.edges {
        if is_not(&r, e.to) {
            source[e.to] = e.from;
        }
        has_out[e.from] = true;
    }
    let mut sink = vec![false; r.nodes.len()];
    for n in 0..r.nodes.len() {
        if is_not(&r, n) && !has_out[n] {
            r.nodes[n].as_mut().unwrap().kind = RKind::Base(NodeKind::Join {
                mode: JoinMode::All,
            });
            sink[n] = true;
        }
    }
    for e in r.edges.iter_mut().filter(|e| sink[e.to]) {
        e.sel = e.sel.clone().negate();
    }
    let mut edges = Vec::with_capacity(r.edges.len());
    for mut e in std::mem::take(&mut r.edges) {
        if is_not(&r, e.to) {
            continue;
        }
        // Walk back through nested negations (`!(x | !y) | z`): one inversion each.
        while is_not(&r, e.from) {
            e.from = source[e.from];
            e.sel = e.sel.negate();
        }
        edges.push(e);
    }
    r.edges = edges;
    for n in 0..r.nodes.len() {
        if is_not(&r, n) {
            r.nodes[n] = None;
        }
    }
    r
}

/// Or → `join(first)`, And → `join(nth N)` with N the number of distinct arcs into it.
pub fn boolean(mut r: Request) -> Request {
    let mut ins: HashMap<NodeId, HashSet<(NodeId, &Selector)>> = HashMap::new();
    for e in &r.edges {
        if matches!(
            &r.nodes[e.to],
            Some(RNode {
                kind: RKind::Par(ParKind::Or | ParKind::And),
                ..
            })
        ) {
            ins.entry(e.to).or_default().insert((e.from, &e.sel));
        }
    }
    let counts: Vec<(NodeId, usize)> = ins.into_iter().map(|(n, s)| (n, s.len())).collect();
    for (n, k) in counts {
        let node = r.nodes[n].as_mut().unwrap();
        let mode = if node.kind == RKind::Par(ParKind::Or) {
            JoinMode::First
        } else {
            JoinMode::Nth(k)
        };
        node.kind = RKind::Base(NodeKind::Join { mode });
    }
    r
}

/// `+` → `join(all)`; a `+` join with no arc out whose arcs in are all plain (Default) is
/// dropped instead, its branches becoming sinks. Applied outermost first, so nested
/// parallels at the end vanish together.
pub fn split_join(mut r: Request) -> Request {
    let n = r.nodes.len();
    let mut out_degree = vec![0usize; n];
    let mut ins: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, e) in r.edges.iter().enumerate() {
        out_degree[e.from] += 1;
        ins[e.to].push(i);
    }
    let mut removed = vec![false; n];
    for j in (0..n).rev() {
        if !matches!(
            &r.nodes[j],
            Some(RNode {
                kind: RKind::Par(ParKind::Plus),
                ..
            })
        ) {
            continue;
        }
        let plain_in = ins[j].iter().all(|&i| r.edges[i].sel == Selector::Default);
        if out_degree[j] == 0 && plain_in {
            removed[j] = true;
            r.nodes[j] = None;
            for &i in &ins[j] {
                out_degree[r.edges[i].from] -= 1;
            }
        } else {
            r.nodes[j].as_mut().unwrap().kind = RKind::Base(NodeKind::Join {
                mode: JoinMode::All,
            });
        }
    }
    if removed.contains(&true) {
        r.edges.retain(|e| !removed[e.from] && !removed[e.to]);
    }
    r
}

/// The data-parallel template: node `f` becomes `split(mode, ways) | f + f + ... | join(all)`.
///
/// The arcs into `f` go into the split instead; the split has one plain arc to each copy;
/// each copy has an `|all` arc to the join (so blocks keep their class, including 0); the
/// join takes over `f`'s out-arcs with their selectors. Copy 0 keeps `f`'s id; the split,
/// the other copies and the join are appended in that order. Copies of a named node are
/// named `X.0`, `X.1`, ... Returns the graph unchanged if `node` does not exist, is a
/// split or join, has no arcs in (a source), or `ways < 2`.
pub fn parallelize(g: &Graph, node: NodeId, ways: usize, mode: SplitMode) -> Graph {
    let mut out = g.clone();
    let Some(f) = g.nodes.get(node) else {
        return out;
    };
    if ways < 2
        || matches!(f.kind, NodeKind::Split { .. } | NodeKind::Join { .. })
        || g.in_edges(node).next().is_none()
    {
        return out;
    }
    let name = |i: usize| f.name.as_ref().map(|n| format!("{n}.{i}"));
    let push = |out: &mut Graph, kind: NodeKind, name: Option<String>| {
        let id = out.nodes.len();
        out.nodes.push(Node {
            id,
            kind,
            span: f.span,
            hints: f.hints.clone(),
            name,
        });
        id
    };
    let split = push(&mut out, NodeKind::Split { mode, ways }, None);
    let mut copies = vec![node];
    for i in 1..ways {
        copies.push(push(&mut out, f.kind.clone(), name(i)));
    }
    // Round-robin replicas of a stateless filter keep the stream's order; hashed replicas
    // (sessions) need only keep each session's order, which they do by construction.
    let join_mode = match mode {
        SplitMode::RoundRobin => JoinMode::Ordered,
        SplitMode::Hash => JoinMode::Merge,
    };
    let join = push(&mut out, NodeKind::Join { mode: join_mode }, None);
    out.nodes[node].name = name(0);
    let mut edges = Vec::new();
    for e in &g.edges {
        let mut e = e.clone();
        if e.from == node {
            e.from = join;
        }
        if e.to == node {
            e.to = split;
        }
        edges.push(e);
    }
    for &c in &copies {
        edges.push(Edge {
            from: split,
            to: c,
            sel: Selector::Default,
            span: f.span,
        });
    }
    for &c in &copies {
        edges.push(Edge {
            from: c,
            to: join,
            sel: Selector::All,
            span: f.span,
        });
    }
    out.edges = edges;
    out
}
