//! The request graph that [`crate::parse`] returns: filters for vertices, selector-annotated
//! arcs for edges (thesis 3.3.1-3.3.2), and its canonical print.

use std::fmt;

use crate::lexer::is_operator_char;
use crate::place::Placement;
use crate::span::Span;

/// Index into [`Graph::nodes`]; `graph.nodes[id].id == id` always holds.
pub type NodeId = usize;

/// A pipeline as a directed graph. Every edge's `from` and `to` index `nodes`. Edges are
/// unique by `(from, to, sel)`. Cycles exist only through named nodes and only when the
/// cycle contains a loop-bounding filter (`for`, see [`crate::Resolver::bounds_loops`]).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Node {
    pub id: NodeId,
    pub kind: NodeKind,
    /// Where the node was written (its first occurrence, for a named node); for a
    /// template-generated join, the whole parallel (or negated) expression.
    pub span: Span,
    /// Optimization hints (Table 3.3) from `@...` after this filter or after any
    /// parenthesized group containing it, in first-seen order, without duplicates.
    pub hints: Vec<Hint>,
    /// The `name=X` control option: every occurrence of the same name is this one node.
    pub name: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum NodeKind {
    /// A native filter: name, positional params (quotes removed), key=value options in
    /// order (control options of Table 3.2 included, except `name`, which is Node::name).
    Filter {
        filter: String,
        params: Vec<String>,
        options: Vec<(String, String)>,
        /// Typed placement decisions (`space=` and `placed=` as written, or what the
        /// rewrites decided); never among `options`.
        place: Placement,
    },
    /// A Unix process: `argv[0]` is the command, then every word after it, as the shell
    /// gives them. Its node options ([`UNIX_CONTROL_OPTIONS`], written after `@`: `wc -l
    /// @space=1`) are not among them: `@space=` is in `place`, `@name=` is [`Node::name`].
    Unix { argv: Vec<String>, place: Placement },
    /// Template-generated join: passes the Nth copy of each block.
    Join { mode: JoinMode },
    /// Template-generated split (data-parallel rewrite): sends each block down exactly
    /// one of its out-arcs, chosen round-robin or by a hash of the block's class.
    Split { mode: SplitMode, ways: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum JoinMode {
    /// `+`: pass every copy (duplicates kept).
    All,
    /// Or (`++`, `*`): pass the first copy of each block, drop the rest.
    First,
    /// And (`+*`, `&`): pass a block when its Nth copy arrives, N = number of in-arcs.
    Nth(usize),
    /// The data-parallel template after a round-robin split: pass blocks in the order the
    /// split sent them, taking one from each in-arc in turn (each replica must pass on
    /// one block, of any class, for each block it gets).
    Ordered,
    /// Pass every block as it arrives, from inputs whose relative order carries no
    /// meaning: hashed replicas of a session filter (allowed only where what follows
    /// counts) and the capture engines of one interface (`rx queues=N`). Unlike `All`,
    /// its inputs may come from different spaces.
    Merge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum SplitMode {
    RoundRobin,
    Hash,
}

#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Edge {
    pub from: NodeId,
    pub to: NodeId,
    /// Which classes this arc forwards.
    pub sel: Selector,
    /// The operator that made the arc: the `|` with its selector, or the parallel
    /// operator (`+`, `++`, ...) for arcs into a join.
    pub span: Span,
}

/// The node options a Unix command takes, written after `@` (`wc -l @space=1`,
/// `gzip -c @name=z`): where it runs, and its node name. Every word after the command's
/// name is its argument, as in the shell (`echo name=x` prints `name=x`). Native filters
/// take them the same way, besides as their option words (`count space=1`).
pub const UNIX_CONTROL_OPTIONS: [&str; 2] = [crate::place::SPACE, "name"];

/// Which classes an arc forwards (Table 3.1, "Selector").
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum Selector {
    /// `|`: all non-zero classes.
    Default,
    /// `|all`: every class including 0.
    All,
    /// `|N`
    Class(u16),
    /// `|N:M`, inclusive, N <= M.
    Range(u16, u16),
    /// `|name`: a registered class name, resolved at run time.
    Named(String),
    /// `|!S`: the complement of S. The parser never nests `Not` directly in `Not`.
    Not(Box<Selector>),
}

impl Selector {
    /// Does this arc forward a block of `class`? `Named` resolves through `names`; an
    /// unknown name admits nothing (so its negation admits everything).
    #[inline]
    pub fn admits(&self, class: u16, names: &dyn Fn(&str) -> Option<u16>) -> bool {
        match self {
            Selector::Default => class != 0,
            Selector::All => true,
            Selector::Class(c) => class == *c,
            Selector::Range(lo, hi) => *lo <= class && class <= *hi,
            Selector::Named(n) => names(n) == Some(class),
            Selector::Not(s) => !s.admits(class, names),
        }
    }

    /// The complement, cancelling a double negation.
    pub fn negate(self) -> Selector {
        match self {
            Selector::Not(inner) => *inner,
            s => Selector::Not(Box::new(s)),
        }
    }
}

/// Prints the selector as written after `|`: `` (Default), `all`, `3`, `1:1023`, `http`,
/// `!80`.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Default => Ok(()),
            Selector::All => f.write_str("all"),
            Selector::Class(c) => write!(f, "{c}"),
            Selector::Range(a, b) => write!(f, "{a}:{b}"),
            Selector::Named(n) => f.write_str(n),
            Selector::Not(s) => write!(f, "!{s}"),
        }
    }
}

/// Optimization hints (Table 3.3), written `@hint,hint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum Hint {
    Throughput,
    Latency,
    Single,
    Private,
    Realtime,
    HRealtime,
    Background,
    Quiet,
    Busy,
    /// Model-T (seed 003): the stages on both sides of the channel into this node run as
    /// an assembly line, a short queue apart.
    Lockstep,
}

impl Hint {
    pub const ALL: [Hint; 10] = [
        Hint::Throughput,
        Hint::Latency,
        Hint::Single,
        Hint::Private,
        Hint::Realtime,
        Hint::HRealtime,
        Hint::Background,
        Hint::Quiet,
        Hint::Busy,
        Hint::Lockstep,
    ];

    /// The spelling in the language.
    pub fn name(self) -> &'static str {
        match self {
            Hint::Throughput => "throughput",
            Hint::Latency => "latency",
            Hint::Single => "single",
            Hint::Private => "private",
            Hint::Realtime => "realtime",
            Hint::HRealtime => "hrealtime",
            Hint::Background => "background",
            Hint::Quiet => "quiet",
            Hint::Busy => "busy",
            Hint::Lockstep => "lockstep",
        }
    }

    pub fn from_name(s: &str) -> Option<Hint> {
        Hint::ALL.into_iter().find(|h| h.name() == s)
    }
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Graph {
    /// Nodes without incoming edges (a self-loop counts as incoming), in id order.
    pub fn sources(&self) -> Vec<NodeId> {
        let mut has_in = vec![false; self.nodes.len()];
        for e in &self.edges {
            has_in[e.to] = true;
        }
        (0..self.nodes.len()).filter(|&i| !has_in[i]).collect()
    }

    /// Nodes without outgoing edges, in id order.
    pub fn sinks(&self) -> Vec<NodeId> {
        let mut has_out = vec![false; self.nodes.len()];
        for e in &self.edges {
            has_out[e.from] = true;
        }
        (0..self.nodes.len()).filter(|&i| !has_out[i]).collect()
    }

    /// Outgoing edges of `n`, in edge order.
    pub fn out_edges(&self, n: NodeId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.from == n)
    }

    /// Incoming edges of `n`, in edge order.
    pub fn in_edges(&self, n: NodeId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.to == n)
    }

    /// The structural invariants every graph of [`crate::parse`] keeps, checked on one
    /// that came from elsewhere (the daemon's checked graph, as its worker decodes it):
    /// node ids are their indices, every arc joins two of the nodes and no arc is there
    /// twice, every span lies in `input` (the text it was parsed from) on `char`
    /// boundaries, a Unix node names a command, a split goes at least two ways, no node
    /// repeats a hint. The first invariant broken, said in words.
    pub fn check(&self, input: &str) -> Result<(), String> {
        let span = |what: &str, s: Span| {
            let inside = s.start <= s.end && s.end <= input.len();
            if inside && input.is_char_boundary(s.start) && input.is_char_boundary(s.end) {
                Ok(())
            } else {
                Err(format!(
                    "{what}'s span {}..{} is not a range of the {}-byte text",
                    s.start,
                    s.end,
                    input.len()
                ))
            }
        };
        for (i, n) in self.nodes.iter().enumerate() {
            if n.id != i {
                return Err(format!("node {i} says it is node {}", n.id));
            }
            span(&format!("node {i}"), n.span)?;
            match &n.kind {
                NodeKind::Unix { argv, .. } if argv.is_empty() => {
                    return Err(format!("node {i} is a Unix command with no command"))
                }
                NodeKind::Split { ways, .. } if *ways < 2 => {
                    return Err(format!("node {i} splits {ways} ways (at least 2)"))
                }
                _ => {}
            }
            let mut seen = std::collections::HashSet::new();
            if !n.hints.iter().all(|h| seen.insert(*h)) {
                return Err(format!("node {i} repeats a hint"));
            }
        }
        let mut arcs = std::collections::HashSet::new();
        for (i, e) in self.edges.iter().enumerate() {
            if e.from >= self.nodes.len() || e.to >= self.nodes.len() {
                return Err(format!(
                    "arc {i} goes from node {} to node {}, of {} nodes",
                    e.from,
                    e.to,
                    self.nodes.len()
                ));
            }
            span(&format!("arc {i}"), e.span)?;
            if !arcs.insert((e.from, e.to, &e.sel)) {
                return Err(format!("arc {i} ({} -> {}) is there twice", e.from, e.to));
            }
        }
        Ok(())
    }

    /// A native filter node as pipeline syntax: its name, params, then `key=value`
    /// options (no placement, no name, no hints): what runs it elsewhere (a plan split
    /// across hosts prints each host's part with it). A Unix node's command line. None
    /// for template nodes (splits, joins).
    pub fn atom(&self, n: NodeId) -> Option<String> {
        match &self.nodes.get(n)?.kind {
            NodeKind::Filter {
                filter,
                params,
                options,
                ..
            } => {
                let mut out = quote(filter);
                for p in params {
                    out.push(' ');
                    out.push_str(&quote(p));
                }
                for (k, v) in options {
                    out.push_str(&format!(" {k}={}", quote(v)));
                }
                Some(out)
            }
            NodeKind::Unix { argv, .. } => {
                Some(argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "))
            }
            NodeKind::Join { .. } | NodeKind::Split { .. } => None,
        }
    }

    /// A stable, human-readable print: one line per node in id order, then one line per
    /// edge sorted by (from, to, selector). Spans are not printed.
    ///
    /// ```text
    /// n0 = gen 10
    /// n1 = for 10 name=L
    /// n2 = unix(gzip -9) @background
    /// n3 = join(first)        join(all), join(nth 2)
    /// n4 = split(hash, 4)     split(round-robin, 4)
    /// n0 -> n1
    /// n1 -> n3 |!80
    /// ```
    ///
    /// A native filter's line is valid atom syntax: params (quoted when they contain
    /// spaces, operator characters, quotes or `=`, or are empty) then `key=value` options
    /// in input order, then `space=` and `placed=` (typed), then `name=X`, then `@hints`.
    pub fn canonical(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            out.push_str(&format!("n{} = ", n.id));
            match &n.kind {
                NodeKind::Filter { place, .. } => {
                    out.push_str(&self.atom(n.id).expect("a filter has an atom"));
                    push_place(&mut out, place);
                }
                NodeKind::Unix { argv, place } => {
                    out.push_str("unix(");
                    let words: Vec<String> = argv.iter().map(|a| quote(a)).collect();
                    out.push_str(&words.join(" "));
                    out.push(')');
                    // A Unix command's options follow '@': its words are all its own.
                    if let Some(space) = &place.space {
                        out.push_str(&format!(" @space={}", quote(&space.to_string())));
                    }
                    if let Some(name) = &n.name {
                        out.push_str(&format!(" @name={}", quote(name)));
                    }
                }
                NodeKind::Join { mode } => match mode {
                    JoinMode::All => out.push_str("join(all)"),
                    JoinMode::First => out.push_str("join(first)"),
                    JoinMode::Nth(k) => out.push_str(&format!("join(nth {k})")),
                    JoinMode::Ordered => out.push_str("join(ordered)"),
                    JoinMode::Merge => out.push_str("join(merge)"),
                },
                NodeKind::Split { mode, ways } => {
                    let m = match mode {
                        SplitMode::RoundRobin => "round-robin",
                        SplitMode::Hash => "hash",
                    };
                    out.push_str(&format!("split({m}, {ways})"));
                }
            }
            if let (Some(name), false) = (&n.name, matches!(n.kind, NodeKind::Unix { .. })) {
                out.push_str(&format!(" name={}", quote(name)));
            }
            if !n.hints.is_empty() {
                let hs: Vec<&str> = n.hints.iter().map(|h| h.name()).collect();
                out.push_str(&format!(" @{}", hs.join(",")));
            }
            out.push('\n');
        }
        let mut edges: Vec<(NodeId, NodeId, String)> = self
            .edges
            .iter()
            .map(|e| (e.from, e.to, e.sel.to_string()))
            .collect();
        edges.sort();
        for (from, to, sel) in edges {
            if sel.is_empty() {
                out.push_str(&format!("n{from} -> n{to}\n"));
            } else {
                out.push_str(&format!("n{from} -> n{to} |{sel}\n"));
            }
        }
        out
    }
}

/// ` space=S placed=P`, as the user writes them (the kernel attachment is internal).
fn push_place(out: &mut String, place: &Placement) {
    if let Some(space) = &place.space {
        out.push_str(&format!(" space={}", quote(&space.to_string())));
    }
    if let Some(side) = &place.side {
        out.push_str(&format!(" placed={side}"));
    }
}

/// Quotes a word so that the lexer reads it back as one positional word.
pub(crate) fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().all(|c| {
            !(c.is_whitespace()
                || c.is_control()
                || is_operator_char(c)
                || matches!(c, '"' | '\'' | '\\' | '='))
        });
    if plain {
        return s.to_string();
    }
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}
