//! Live edits of a running run (thesis 6.4, Tables 6.4-6.8: PAUSE, UPDATE, SET_INST_DATA,
//! connect/disconnect): what an edit is ([`Edit`], with its text form), applying one to a
//! [`Space`] ([`Space::edit`]) as a transaction that applies whole or leaves the space as it
//! was, the mailbox through which another thread edits a running run ([`EditHandle`]), and
//! the run's graph as it is now ([`GraphNode`], [`EditHandle::graph`]), which PipesFS shows
//! as directories.
//!
//! Owns: the edit language, the graph surgery on a built space, the per-space mailboxes
//! and the counters and graph snapshots they publish. Does not own: making filters (the
//! [`Factory`]), scheduling (the run loop calls [`Mailbox::serve`] at its quiescent
//! point), or forwarding edits between processes (the daemon's).
//!
//! # The text form
//!
//! ```text
//! set NODE KEY=VALUE [KEY=VALUE...]        re-make NODE with these options (SET_INST_DATA)
//! insert after NODE FILTER [ARGS...]       a new filter between NODE and all its successors
//! insert before NODE FILTER [ARGS...]      a new filter between NODE's one input and NODE
//! remove NODE                              NODE's inputs connect to its outputs
//! replace NODE FILTER [ARGS...]            a new filter in NODE's place, same arcs
//! branch NODE FILTER [ARGS...]             a new leaf filter reading NODE's output (a fork)
//! connect FROM TO                          a new arc FROM -> TO (TO gets another input)
//! disconnect FROM TO                       take the arc FROM -> TO away
//! move NODE FROM TO                        NODE reads from TO instead of FROM
//! ```
//!
//! NODE is a label as [`Space::report`] prints it (`count`, `count#2`, `count:name`,
//! and in a run of several spaces `count@1`). FILTER ARGS are one native filter in the
//! pipeline language, parsed by `lang::parse` with the caller's resolver, so the filter's
//! option keys are checked there and errors point into the edit's text with a caret.
//!
//! # When edits apply
//!
//! Only between source batches: a source batch finishes its whole walk before the next is
//! pulled, so at the top of the run loop no block is in flight and nothing is lost by
//! rewiring. Checking for edits costs one relaxed atomic load per round of the loop.
//! Before an instance is dropped (set, replace, remove) its `finish` runs and what it
//! flushes (tcpstream's held segments, an ordered join's queues) is routed along its arcs
//! as at the end of a run; its final counters and summary come back in [`Applied`].
//!
//! # Arcs, and why a removed node stays as a pass-through
//!
//! Node indices stay stable: an inserted node is appended, a replaced or re-set node keeps
//! its slot, and a removed node stays as a pass-through tombstone that reports leave out.
//! Keeping it keeps the meaning of the selectors on both sides of it: `P |S1 X |S2 Y`
//! without X is `P |S1 (identity) |S2 Y`, and the conjunction of S1 and S2 is not always a
//! selector one arc can carry; it also keeps each arc's in-arc index, which joins count
//! by. `insert after X F` moves X's out-arcs, selectors and in-arc indices unchanged, to F
//! and joins X to F by a plain `|`; `insert before X F` moves X's one in-arc to F and
//! joins F to X by a plain `|`; both are what writing `X | F |S Y` would build.
//!
//! `branch X F` adds an out-arc X -> F (a plain `|`): `route` multicasts a batch to every
//! out-arc, each getting the tags its selector admits, shared copy-on-write, so X's other
//! successors get exactly what they got. F is a leaf: like any node without out-arcs it
//! counts its input and the blocks end there (its output is not counted); once something
//! is added below it (`branch F G`, `connect F G`) its output goes on. `connect` adds a
//! plain arc with the next free in-arc index of TO; `disconnect` takes one away (the
//! others keep their indices); `move` is both as one transaction, the new arc plain (the
//! old selector named FROM's classes) with the in-arc index the old arc had. Arcs are
//! seen through removed nodes, as the graph snapshot shows them: `disconnect A B` where
//! the arc runs A -> (removed X) -> B cuts the first arc of that way that carries only
//! A's blocks to only B, or is refused if none does ([`Refusal::ThroughRemoved`]).
//!
//! # The graph snapshot
//!
//! Each space's run loop publishes its graph when the run starts and after every applied
//! edit; [`EditHandle::graph`] joins the spaces of this process: live nodes only (no
//! tombstones, no channel endpoints), arcs through a removed node shown from its inputs to
//! its outputs, arcs through a channel pair as one arc between the real nodes. Nodes in
//! process spaces are absent, with their arcs. [`Space::graph`] is one space's, now.
//!
//! # What is refused (and why)
//!
//! A source cannot be removed or inserted (sources are fixed when the run starts); a
//! split's arcs are its branches, so nothing is inserted after, put in place of or
//! removed from one; a template join is part of its `+`; `insert before` a node with
//! several inputs would change what a join counts; nodes next to a channel to another
//! space and nodes in process spaces are refused with [`Refusal::Channel`] and
//! [`Refusal::ProcessSpace`]: their neighbours were placed, and their channels built, for
//! the graph as it was (`set`, which keeps the graph, is allowed next to a channel).
//! `set` may not change what is fixed when a node is built: its name, placement, or
//! exported stream; it takes KEY=VALUE only (a positional word would lose to an option of
//! the same parameter given at build time). `set` and `replace` make the filter afresh:
//! counters go on across a `set` (they are the node's), session state does not (the old
//! instance flushed what its sessions held); `set` on a source restarts its stream.
//!
//! `branch`, `connect`, `disconnect` and `move` are refused on a split's out-arcs (its
//! arcs are its branches), on arcs into a template join (it counts its inputs), next to a
//! channel, between nodes of different spaces ([`Refusal::Spaces`]: such an arc is a
//! channel, built with the run), and from a Unix command with no out-arc (it writes to
//! standard output). `branch` and `connect` refuse a new source or an arc into a source,
//! an arc that is already there (seen through removed nodes), and one that would close a
//! loop; `disconnect` refuses to take TO's only input ([`Refusal::OnlyInput`]: remove TO
//! instead) and an arc that is not there; `move` is refused whole if either half is (its
//! connect is checked first, so a node's only input may move).

use crate::filter::{Batch, Ctx, Filter};
use crate::runtime::{
    base_name, instantiate, label_of, BuildError, Counters, Factory, Made, NodeReport, Space,
};
use crate::spaces::{EGRESS, INGRESS};
use lang::{DiagKind, Diagnostic, Node, NodeKind, Selector, Span};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Where `insert` puts the new filter relative to its NODE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    After,
    Before,
}

/// One live edit of a running run (see the module documentation for the text form).
#[derive(Debug, Clone, PartialEq)]
pub enum Edit {
    /// Re-make NODE's filter with these options changed (SET_INST_DATA). `span` is where
    /// the options are in the edit's text.
    Set {
        node: String,
        options: Vec<(String, String)>,
        span: Span,
    },
    /// A new filter after or before NODE.
    Insert {
        node: String,
        at: Where,
        filter: Node,
    },
    /// NODE's inputs connect to its outputs.
    Remove { node: String },
    /// A new filter in NODE's place.
    Replace { node: String, filter: Node },
    /// A new leaf filter reading NODE's output, beside NODE's other successors (a fork).
    Branch { node: String, filter: Node },
    /// A new arc FROM -> TO (TO gets another input).
    Connect { from: String, to: String },
    /// Take the arc FROM -> TO away.
    Disconnect { from: String, to: String },
    /// NODE reads from TO instead of FROM.
    Move {
        node: String,
        from: String,
        to: String,
    },
}

/// Options fixed when a node is built: `set` cannot change them.
const FIXED: [&str; 5] = ["export", "exportdata", "size", "mode", "share"];

impl Edit {
    /// The label of the node the edit is about.
    pub fn node(&self) -> &str {
        match self {
            Edit::Set { node, .. }
            | Edit::Insert { node, .. }
            | Edit::Remove { node }
            | Edit::Replace { node, .. }
            | Edit::Branch { node, .. }
            | Edit::Move { node, .. } => node,
            // The node that gets (or loses) an input.
            Edit::Connect { to, .. } | Edit::Disconnect { to, .. } => to,
        }
    }

    /// Every node label the edit names (NODE, or FROM and TO), in the order written.
    pub fn labels(&self) -> Vec<&str> {
        match self {
            Edit::Connect { from, to } | Edit::Disconnect { from, to } => vec![from, to],
            Edit::Move { node, from, to } => vec![node, from, to],
            e => vec![e.node()],
        }
    }

    /// Parse an edit's text. The filter part is parsed by `lang::parse` with `resolver`
    /// (its option keys checked there); errors carry a span into `text`.
    pub fn parse(text: &str, resolver: &dyn lang::Resolver) -> Result<Edit, EditError> {
        let syntax =
            |kind, message: String, span| EditError::Syntax(diag(kind, message, span, text));
        let Some((vspan, verb)) = word(text, 0) else {
            return Err(syntax(
                DiagKind::EmptyPipeline,
                format!("empty edit: expected {VERBS}"),
                Span::new(0, text.len()),
            ));
        };
        let node_after = |from: usize, what: &str| -> Result<(Span, String), EditError> {
            word(text, from)
                .map(|(s, w)| (s, w.to_string()))
                .ok_or_else(|| {
                    syntax(
                        DiagKind::MissingOperand,
                        format!("expected {what}"),
                        Span::new(text.len(), text.len()),
                    )
                })
        };
        match verb {
            "set" => {
                let (nspan, node) = node_after(
                    vspan.end,
                    "the label of the node to set options of (as the report prints it)",
                )?;
                let base = base_of(&node);
                let f = parse_filter(text, nspan.end, Some(base), nspan, resolver)?;
                let span = Span::new(skip_space(text, nspan.end), text.len());
                set_edit(node, nspan, f, span, text)
            }
            "insert" => {
                let (wspan, w) = node_after(vspan.end, "'after' or 'before'")?;
                let at = match w.as_str() {
                    "after" => Where::After,
                    "before" => Where::Before,
                    _ => {
                        return Err(syntax(
                            DiagKind::UnexpectedToken,
                            format!("insert: expected 'after' or 'before', found '{w}'"),
                            wspan,
                        ))
                    }
                };
                let (nspan, node) =
                    node_after(wspan.end, "the label of the node to insert next to")?;
                let filter = new_filter(text, nspan, resolver)?;
                Ok(Edit::Insert { node, at, filter })
            }
            "remove" => {
                let (nspan, node) = node_after(vspan.end, "the label of the node to remove")?;
                if let Some((s, w)) = word(text, nspan.end) {
                    return Err(syntax(
                        DiagKind::UnexpectedToken,
                        format!("remove takes one node; '{w}' is left over"),
                        Span::new(s.start, text.trim_end().len()),
                    ));
                }
                Ok(Edit::Remove { node })
            }
            "replace" => {
                let (nspan, node) = node_after(vspan.end, "the label of the node to replace")?;
                let filter = new_filter(text, nspan, resolver)?;
                Ok(Edit::Replace { node, filter })
            }
            "branch" => {
                let (nspan, node) = node_after(
                    vspan.end,
                    "the label of the node whose output the new filter reads",
                )?;
                let filter = new_filter(text, nspan, resolver)?;
                Ok(Edit::Branch { node, filter })
            }
            "connect" | "disconnect" => {
                let (fspan, from) =
                    node_after(vspan.end, "FROM, the label of the node the arc leaves")?;
                let (tspan, to) =
                    node_after(fspan.end, "TO, the label of the node the arc enters")?;
                nothing_after(text, tspan.end, verb)?;
                Ok(match verb {
                    "connect" => Edit::Connect { from, to },
                    _ => Edit::Disconnect { from, to },
                })
            }
            "move" => {
                let (nspan, node) = node_after(vspan.end, "the label of the node to move")?;
                let (fspan, from) =
                    node_after(nspan.end, "FROM, the label of the node it reads from now")?;
                let (tspan, to) =
                    node_after(fspan.end, "TO, the label of the node it is to read from")?;
                nothing_after(text, tspan.end, verb)?;
                Ok(Edit::Move { node, from, to })
            }
            _ => Err(syntax(
                DiagKind::UnexpectedToken,
                format!("unknown edit '{verb}': expected {VERBS}"),
                vspan,
            )),
        }
    }
}

/// The `set` edit of NODE (its word at `nspan`) with the filter `f` parsed from its
/// name and the options (at `span` in `text`), checked: KEY=VALUE options only, none of
/// those fixed when a node is built.
fn set_edit(node: String, nspan: Span, f: Node, span: Span, text: &str) -> Result<Edit, EditError> {
    let syntax =
        |kind, message: String, span| EditError::Syntax(diag(kind, message, span, text));
    let base = base_of(&node);
    let NodeKind::Filter {
        filter,
        params,
        options,
        place,
    } = &f.kind
    else {
        return Err(syntax(
            DiagKind::UnexpectedToken,
            format!(
                "set: {node} is not a native filter; only native filters take options"
            ),
            nspan,
        ));
    };
    if filter != base {
        return Err(syntax(
            DiagKind::UnexpectedToken,
            format!(
                "set: {node} is not a native filter; only native filters take options"
            ),
            nspan,
        ));
    }
    if !params.is_empty() {
        return Err(syntax(DiagKind::BadOption, format!("set takes KEY=VALUE options; name the parameter of '{}' (e.g. every=5)", params[0]), span));
    }
    if options.is_empty() {
        return Err(syntax(
            DiagKind::MissingOperand,
            "set: expected KEY=VALUE options after the node".into(),
            span,
        ));
    }
    if f.name.is_some() {
        return Err(syntax(
            DiagKind::BadOption,
            "set: name= renames a node; names are fixed when the run is built".into(),
            span,
        ));
    }
    if !place.is_empty() {
        return Err(syntax(
            DiagKind::BadOption,
            "set: space= and placed= are fixed when the run is built".into(),
            span,
        ));
    }
    if let Some((k, _)) = options.iter().find(|(k, _)| FIXED.contains(&k.as_str())) {
        return Err(syntax(
            DiagKind::BadOption,
            format!("set: {k}= is fixed when the node is built (its exported stream)"),
            span,
        ));
    }
    if !f.hints.is_empty() {
        return Err(syntax(
            DiagKind::UnknownHint,
            "set: @hints take effect when a run is built".into(),
            span,
        ));
    }
    Ok(Edit::Set {
        node,
        options: options.clone(),
        span,
    })
}

impl Edit {
    /// `set NODE KEY=VALUE...` from its typed parts (the control protocol's form): the
    /// options are checked as the text form's are, and errors point into them written as
    /// `KEY=VALUE` words.
    pub fn set_options(
        node: &str,
        options: &[(String, String)],
        resolver: &dyn lang::Resolver,
    ) -> Result<Edit, EditError> {
        let text = options
            .iter()
            .map(|(k, v)| format!("{k}={}", quoted(v)))
            .collect::<Vec<_>>()
            .join(" ");
        let base = base_of(node);
        let f = parse_filter(&text, 0, Some(base), Span::new(0, 0), resolver)?;
        set_edit(node.to_string(), Span::new(0, 0), f, Span::new(0, text.len()), &text)
    }

    /// The one new filter of an insert, replace or branch from its text (`sample
    /// every=5`), checked as the text form's is; errors point into `text`.
    pub fn new_filter(text: &str, resolver: &dyn lang::Resolver) -> Result<Node, EditError> {
        new_filter(text, Span::new(0, 0), resolver)
    }

    /// The text of the new filter of an insert, replace or branch, as written in `text`
    /// (the edit's text this edit was parsed from); None for the other kinds.
    pub fn filter_text<'a>(&self, text: &'a str) -> Option<&'a str> {
        match self {
            Edit::Insert { filter, .. }
            | Edit::Replace { filter, .. }
            | Edit::Branch { filter, .. } => text.get(filter.span.start..).map(str::trim),
            _ => None,
        }
    }
}

/// The edits' verbs, for messages.
const VERBS: &str = "set, insert, remove, replace, branch, connect, disconnect or move";

/// Refuse words after the last node of an edit that takes a fixed number of them.
fn nothing_after(text: &str, end: usize, verb: &str) -> Result<(), EditError> {
    match word(text, end) {
        Some((s, w)) => {
            let takes = if verb == "move" {
                "NODE FROM TO"
            } else {
                "FROM TO"
            };
            Err(EditError::Syntax(diag(
                DiagKind::UnexpectedToken,
                format!("{verb} takes {takes}; '{w}' is left over"),
                Span::new(s.start, text.trim_end().len()),
                text,
            )))
        }
        None => Ok(()),
    }
}

fn diag(kind: DiagKind, message: String, span: Span, input: &str) -> Diagnostic {
    Diagnostic {
        kind,
        message,
        span,
        help: None,
        input: input.to_string(),
    }
}

fn skip_space(text: &str, from: usize) -> usize {
    let rest = &text[from.min(text.len())..];
    from + (rest.len() - rest.trim_start().len())
}

/// The next whitespace-separated word at or after byte `from`.
fn word(text: &str, from: usize) -> Option<(Span, &str)> {
    let start = skip_space(text, from);
    let rest = &text[start..];
    let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
    (len > 0).then(|| (Span::new(start, start + len), &rest[..len]))
}

/// A label without its space (`count@1` -> `count`) and the space, if given.
pub fn split_space(label: &str) -> (&str, Option<&str>) {
    match label.rfind('@') {
        Some(at) => (&label[..at], Some(&label[at + 1..])),
        None => (label, None),
    }
}

/// The filter a label names: `count#2` and `count:c` are `count`.
fn base_of(label: &str) -> &str {
    let l = split_space(label).0;
    let end = l.find([':', '#']).unwrap_or(l.len());
    &l[..end]
}

/// Parse the one filter of an edit, from byte `from` of `text` to its end; `prefix` (the
/// filter's name, for `set`) goes in front. Spans are moved into `text`; a span in the
/// prefix becomes `node` (the edit's NODE word).
fn parse_filter(
    text: &str,
    from: usize,
    prefix: Option<&str>,
    node: Span,
    resolver: &dyn lang::Resolver,
) -> Result<Node, EditError> {
    let start = skip_space(text, from);
    if start >= text.len() && prefix.is_none() {
        return Err(EditError::Syntax(diag(
            DiagKind::MissingOperand,
            "expected a filter (FILTER [ARGS...]) after the node".into(),
            Span::new(text.len(), text.len()),
            text,
        )));
    }
    let (src, lead) = match prefix {
        Some(p) => (format!("{p} {}", &text[start..]), p.len() + 1),
        None => (text[start..].to_string(), 0),
    };
    let at = |s: Span| -> Span {
        if s.start < lead {
            node
        } else {
            Span::new(
                (s.start - lead + start).min(text.len()),
                (s.end.max(lead) - lead + start).min(text.len()),
            )
        }
    };
    let g = lang::parse(&src, resolver).map_err(|d| {
        EditError::Syntax(Diagnostic {
            span: at(d.span),
            input: text.to_string(),
            ..d
        })
    })?;
    if g.nodes.len() != 1 {
        let span = at(g
            .nodes
            .get(1)
            .map_or(Span::new(lead, src.len()), |n| n.span));
        return Err(EditError::Syntax(diag(
            DiagKind::UnexpectedToken,
            "an edit takes one filter; apply several edits for several filters".into(),
            span,
            text,
        )));
    }
    let mut n = g.nodes.into_iter().next().expect("one node");
    n.span = at(n.span);
    n.id = 0;
    Ok(n)
}

/// The new filter of an `insert` or `replace`: one native filter, placed by the edit.
fn new_filter(text: &str, node: Span, resolver: &dyn lang::Resolver) -> Result<Node, EditError> {
    let n = parse_filter(text, node.end, None, node, resolver)?;
    let bad = |kind, message: &str| {
        Err(EditError::Syntax(diag(
            kind,
            message.to_string(),
            n.span,
            text,
        )))
    };
    match &n.kind {
        NodeKind::Filter { filter, place, .. } => {
            if filter == "split" {
                return bad(DiagKind::UnexpectedToken, "split sends each block down one of its arcs by branch; it cannot be put into a running graph");
            }
            if place.space.is_some() {
                return bad(DiagKind::BadOption, "space= is decided when the run is built; the new filter runs in the space of the node it goes next to");
            }
        }
        NodeKind::Unix { .. } => {
            return bad(
                DiagKind::UnknownFilter,
                "only native filters can be added to a running run, not Unix commands",
            )
        }
        NodeKind::Join { .. } | NodeKind::Split { .. } => {
            return bad(DiagKind::UnexpectedToken, "an edit takes one filter")
        }
    }
    if !n.hints.is_empty() {
        return bad(
            DiagKind::UnknownHint,
            "@hints take effect when a run is built; an edit cannot give them",
        );
    }
    Ok(n)
}

/// Why an edit was refused although it parsed (EBUSY-like: the run stays as it was).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("a source cannot be removed (its stream is the run's input)")]
    Source,
    #[error("nothing flows into a source; insert after it instead")]
    BeforeSource,
    #[error("'{0}' is a source; an edit can add only filters between nodes")]
    NewSource(String),
    #[error("a source can only be replaced by a source, and a filter by a filter")]
    SourceMismatch,
    #[error("it has {0} inputs; inserting before it would change what it counts by input (a join's copies); insert after each input instead")]
    Inputs(usize),
    #[error("it is a split: its arcs are its branches, chosen per block, so the graph after it cannot be rewired")]
    Split,
    #[error("it is the join of a parallel template (`+`); edit the branches' filters instead")]
    Template,
    #[error("it is a channel endpoint between spaces")]
    Endpoint,
    #[error("busy: it {0} a channel to another space, whose placement and channel were built for the graph as it is; only `set` may change it while it runs")]
    Channel(&'static str),
    #[error(
        "busy: it runs in process space p{0}; edits reach only the spaces of the run's own process"
    )]
    ProcessSpace(usize),
    #[error("the run has no space '{0}' in this process")]
    NoSpace(String),
    #[error("a node is already labelled {0}")]
    NameTaken(String),
    #[error("it is not a native filter; only native filters take options")]
    NotNative,
    #[error("nothing flows into a source; a source reads only its own input")]
    IntoSource,
    #[error("the arc would close a loop: {0} already feeds {1}")]
    Cycle(String, String),
    #[error("the arc is there already")]
    ArcExists,
    #[error("there is no arc from {0} to {1}")]
    NoArc(String, String),
    #[error("it is {0}'s only input, and a node with no input would be dead; remove {0} instead")]
    OnlyInput(String),
    #[error("the nodes are in different spaces ({0} and {1}); an arc between spaces is a channel, which is built when the run is built")]
    Spaces(String, String),
    #[error(
        "it is a Unix command writing to the run's standard output; no filter can read its output"
    )]
    UnixSink,
    #[error("the arc passes through a removed node that carries other arcs too ({0}); taking it away would cut those as well")]
    ThroughRemoved(String),
    /// `migrate`: it cannot move between spaces while the run runs (the reason).
    #[error("it cannot move to another space while the run runs: {0}")]
    Immovable(String),
    /// `migrate`: no channel joins it to the space asked for.
    #[error("no channel between it and space {0} is next to it; a filter moves across one channel at a time, from the end of one space to the start of the next or back")]
    NoChannel(String),
}

/// What went wrong with an edit. Nothing was changed, except after [`EditError::Ended`]
/// (the run was over).
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The edit's text, with a caret under the problem.
    #[error("{0}")]
    Syntax(Diagnostic),
    /// No live node has the label.
    #[error("no node labelled '{label}' (there are: {})", known.join(", "))]
    NoNode { label: String, known: Vec<String> },
    /// The label names nodes in several spaces.
    #[error("'{label}' names nodes in several spaces; say which: {}", candidates.join(", "))]
    Ambiguous {
        label: String,
        candidates: Vec<String>,
    },
    /// The edit cannot be applied to this node.
    #[error("{label}: {why}")]
    Refused { label: String, why: Refusal },
    /// The new filter failed to build (its label, and the span of the filter in the
    /// edit's text for insert and replace); the old instance is kept.
    #[error(transparent)]
    Build(BuildError),
    /// The run ended before the edit was applied.
    #[error("the run ended before the edit was applied")]
    Ended,
    /// A tap's rings could not be made.
    #[error("cannot make the tap's rings: {0}")]
    Tap(String),
    /// The run did not reach a batch boundary in time; the edit was withdrawn unapplied.
    #[error("the run did not reach a batch boundary within {0:?}; the edit was withdrawn, nothing changed")]
    Timeout(Duration),
}

/// An applied edit.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The node made or changed (insert, replace: the new node's label; set: the node's;
    /// remove: the label it had).
    pub label: String,
    /// The instance dropped (set, replace, remove): its final counters and summary.
    pub retired: Option<NodeReport>,
    /// Blocks the dropped instance flushed from its `finish` (routed on along its arcs).
    pub flushed: usize,
}

/// What a removed node becomes: blocks pass with their classes unchanged.
struct Removed;

impl Filter for Removed {
    fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
}

fn endpoint(label: &str) -> bool {
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
    fn live(&self, label: &str) -> Result<usize, EditError> {
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

    /// The arcs into node `i`: (from, index among `from`'s out-arcs).
    pub(crate) fn in_arcs(&self, i: usize) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        for (f, n) in self.nodes.iter().enumerate() {
            for (k, a) in n.out.iter().enumerate() {
                if a.to == i {
                    v.push((f, k));
                }
            }
        }
        v
    }

    /// Whether a channel to another space enters or leaves at node `i`, in words.
    fn channel_next_to(&self, i: usize) -> Option<&'static str> {
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
    fn new_label(&self, n: &Node, except: Option<usize>) -> Result<String, EditError> {
        let others = || {
            self.nodes
                .iter()
                .enumerate()
                .filter(move |(j, _)| Some(*j) != except)
                .map(|(_, m)| m)
        };
        let taken = |l: &str| others().any(|m| !m.removed && m.label == l) || self.elsewhere.iter().any(|e| e == l);
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
    fn retire(&mut self, i: usize) -> (NodeReport, usize) {
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

    fn report_of(&self, i: usize) -> NodeReport {
        let n = &self.nodes[i];
        n.report(self.nanos(n.ticks))
    }

    fn set(
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

    fn insert(
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
        let Made {
            mut filter,
            source,
            routes_by_class,
            export,
        } = instantiate(n, &label, factory, 1, sink).map_err(EditError::Build)?;
        let new = self.nodes.len();
        let classifier = filter.as_classifier().is_some();
        let out = match (at, input) {
            // X's out-arcs now leave the new node, selectors and in-arc indices kept.
            (Where::After, _) => {
                let out = std::mem::take(&mut self.nodes[i].out);
                self.nodes[i].out.push(crate::runtime::Arc_ {
                    to: new,
                    sel: Selector::Default,
                    in_index: 0,
                    carried: Default::default(),
                });
                out
            }
            // X's one in-arc now enters the new node (selector kept); new -> X is plain.
            (Where::Before, Some((from, k))) => {
                let arc = &mut self.nodes[from].out[k];
                let in_index = arc.in_index;
                arc.to = new;
                arc.in_index = 0;
                vec![crate::runtime::Arc_ {
                    to: i,
                    sel: Selector::Default,
                    in_index,
                    carried: Default::default(),
                }]
            }
            (Where::Before, None) => unreachable!("checked above: one input"),
        };
        self.nodes.push(crate::runtime::RtNode {
            label: label.clone(),
            spec: n.clone(),
            filter,
            export,
            sessions: None,
            out,
            source,
            routes_by_class,
            classifier,
            removed: false,
            done: false,
            watch: Default::default(),
            c: Counters::default(),
            ticks: 0,
        });
        Ok(Applied {
            label,
            retired: None,
            flushed: 0,
        })
    }

    fn remove(&mut self, i: usize) -> Result<Applied, EditError> {
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
        let node = &mut self.nodes[i];
        if let Some(mut ex) = node.export.take() {
            ex.close();
        }
        node.filter = Box::new(Removed);
        node.removed = true;
        node.classifier = false;
        node.sessions = None;
        Ok(Applied {
            label,
            retired: Some(retired),
            flushed,
        })
    }

    fn branch(&mut self, i: usize, n: &Node, factory: &dyn Factory) -> Result<Applied, EditError> {
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
        let Made {
            mut filter,
            source,
            routes_by_class,
            export,
        } = instantiate(n, &label, factory, 1, true).map_err(EditError::Build)?;
        let new = self.nodes.len();
        let classifier = filter.as_classifier().is_some();
        self.nodes.push(crate::runtime::RtNode {
            label: label.clone(),
            spec: n.clone(),
            filter,
            export,
            sessions: None,
            out: Vec::new(),
            source,
            routes_by_class,
            classifier,
            removed: false,
            done: false,
            c: Counters::default(),
            ticks: 0,
            watch: Default::default(),
        });
        // One more out-arc: `route` multicasts to every arc, so the existing successors
        // get what they got, and the new node a copy-on-write share of it.
        self.nodes[i].out.push(crate::runtime::Arc_ {
            to: new,
            sel: Selector::Default,
            in_index: 0,
            carried: Default::default(),
        });
        Ok(Applied {
            label,
            retired: None,
            flushed: 0,
        })
    }

    /// Why node `i`'s output cannot get another arc, if it cannot: a split routes each
    /// block down one of its arcs, and a Unix command with no arc out writes to standard
    /// output (it was started so; an approximation for one whose arcs were all taken away).
    fn cannot_feed(&self, i: usize) -> Option<Refusal> {
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
    fn arc_end(&self, label: &str) -> Result<usize, EditError> {
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
        if let Some(why) = self.channel_next_to(i) {
            return refuse(Refusal::Channel(why));
        }
        Ok(i)
    }

    /// The live nodes that node `i`'s output reaches (`forward`) or that reach its input
    /// (`!forward`), looking through removed nodes, which pass blocks on: the arcs as the
    /// graph snapshot shows them. In arc order, each once.
    fn live_next(&self, i: usize, forward: bool) -> Vec<usize> {
        fn walk(s: &Space, j: usize, forward: bool, seen: &mut [bool], found: &mut Vec<usize>) {
            let next: Vec<usize> = if forward {
                s.nodes[j].out.iter().map(|a| a.to).collect()
            } else {
                s.in_arcs(j).into_iter().map(|(f, _)| f).collect()
            };
            for k in next {
                if std::mem::replace(&mut seen[k], true) {
                    continue;
                }
                if s.nodes[k].removed {
                    walk(s, k, forward, seen, found);
                } else {
                    found.push(k);
                }
            }
        }
        let mut found = Vec::new();
        let mut seen = vec![false; self.nodes.len()];
        seen[i] = true;
        walk(self, i, forward, &mut seen, &mut found);
        found
    }

    /// Whether blocks from node `a` can reach node `b` (or `a` is `b`).
    fn reaches(&self, a: usize, b: usize) -> bool {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack = vec![a];
        while let Some(j) = stack.pop() {
            if j == b {
                return true;
            }
            if !std::mem::replace(&mut seen[j], true) {
                stack.extend(self.nodes[j].out.iter().map(|a| a.to));
            }
        }
        false
    }

    /// Why an arc `from -> to` cannot be added, if it cannot (labels for the refusal).
    fn cannot_connect(&self, from: usize, to: usize) -> Option<EditError> {
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

    /// The next free in-arc index of node `to` (a taken-away arc's index is not reused,
    /// so every other arc keeps what `Batch::from` says).
    fn next_in_index(&self, to: usize) -> usize {
        self.in_arcs(to)
            .iter()
            .map(|&(f, k)| self.nodes[f].out[k].in_index + 1)
            .max()
            .unwrap_or(0)
    }

    /// The raw arcs (node, index among its out-arcs) to take away so that `from` no longer
    /// feeds `to` and nothing else changes: the direct arcs, and for each way through
    /// removed nodes the first arc on it that carries only `from`'s blocks to only `to`.
    fn cut(&self, from: usize, to: usize) -> Result<Vec<(usize, usize)>, EditError> {
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

    /// Take the arcs `cut` chose away; the in-arc index the one into `to` had, if one
    /// went straight into it.
    fn take_arcs(&mut self, mut arcs: Vec<(usize, usize)>, to: usize) -> Option<usize> {
        // Highest index first, so the others' indices stay valid.
        arcs.sort_by_key(|a| std::cmp::Reverse(a.1));
        let mut index = None;
        for (u, k) in arcs {
            let a = self.nodes[u].out.remove(k);
            if a.to == to {
                index = Some(a.in_index);
            }
        }
        index
    }

    fn connect(&mut self, from: &str, to: &str) -> Result<Applied, EditError> {
        let (f, t) = (self.arc_end(from)?, self.arc_end(to)?);
        if let Some(e) = self.cannot_connect(f, t) {
            return Err(e);
        }
        let in_index = self.next_in_index(t);
        self.nodes[f].out.push(crate::runtime::Arc_ {
            to: t,
            sel: Selector::Default,
            in_index,
            carried: Default::default(),
        });
        Ok(Applied {
            label: to.to_string(),
            retired: None,
            flushed: 0,
        })
    }

    fn disconnect(&mut self, from: &str, to: &str) -> Result<Applied, EditError> {
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
    fn move_input(&mut self, node: &str, from: &str, to: &str) -> Result<Applied, EditError> {
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
        self.nodes[t].out.push(crate::runtime::Arc_ {
            to: n,
            sel: Selector::Default,
            in_index,
            carried: Default::default(),
        });
        Ok(Applied {
            label: node.to_string(),
            retired: None,
            flushed: 0,
        })
    }

    fn replace(&mut self, i: usize, n: &Node, factory: &dyn Factory) -> Result<Applied, EditError> {
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
        let node = &mut self.nodes[i];
        if let Some(mut ex) = node.export.take() {
            ex.close();
        }
        node.classifier = !source && filter.as_classifier().is_some();
        node.filter = filter;
        node.export = export;
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

impl Space {
    /// Put `tap` on the live node labelled `label` (a batch boundary: the next batch the
    /// node emits is the tap's first).
    fn tap_on(&mut self, label: &str, tap: crate::tap::Tap) -> Result<(), EditError> {
        let i = self.live(split_space(label).0)?;
        if endpoint(&self.nodes[i].label) {
            return Err(EditError::Refused {
                label: label.to_string(),
                why: Refusal::Endpoint,
            });
        }
        self.nodes[i].watch.taps.push(tap);
        Ok(())
    }

    /// Add a subscriber to shared tap `tap` (wherever it is); `Err` if the tap is gone.
    fn subscribe(
        &mut self,
        tap: u64,
        key: Vec<u8>,
        want: crate::tap::Want,
        sub: crate::tap::Subscriber,
    ) -> Result<(), EditError> {
        for n in &mut self.nodes {
            if let Some(t) = n.watch.taps.iter_mut().find(|t| t.id == tap) {
                t.subscribe(key, want, sub);
                return Ok(());
            }
        }
        Err(EditError::Tap(format!(
            "tap {tap} is gone (its node was removed)"
        )))
    }

    fn unsubscribe(&mut self, sub: u64) {
        for n in &mut self.nodes {
            for t in &mut n.watch.taps {
                t.unsubscribe(sub);
            }
        }
    }

    /// Take tap `id` off whichever node has it (its readers see the end of the stream).
    fn tap_off(&mut self, id: u64) {
        for n in &mut self.nodes {
            n.watch.taps.retain(|t| t.id != id);
        }
    }
}

/// One node of a running run's graph (the type is the wire's: `protocol::graph`), as
/// [`EditHandle::graph`] and [`Space::graph`] give it.
pub use protocol::graph::GraphNode;

/// A node of one space's graph as its run loop publishes it: arcs as indices into the
/// same snapshot, looked through removed nodes; channel endpoints kept, with their
/// channel (egress?, number), for [`resolve`] to join spaces by.
#[derive(Debug, Clone)]
pub(crate) struct SnapNode {
    label: String,
    filter: String,
    options: Vec<(String, String)>,
    source: bool,
    channel: Option<(bool, usize)>,
    out: Vec<usize>,
}

/// A word of a filter's text, quoted if the language would not read it back as one word
/// (or, with a `=`, as an option: a Unix command's `name=x` is its argument).
fn quoted(w: &str) -> String {
    if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '"' || c == '|' || c == '=') {
        format!("\"{}\"", w.replace('"', "\\\""))
    } else {
        w.to_string()
    }
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

/// A space's mailbox: edits posted by other threads, taken by the run loop at its
/// quiescent point, and the counters it last published.
pub(crate) struct Mailbox {
    /// Whether `state.queue` may hold edits: the run loop's one relaxed load per round.
    /// SYNC: written only with `state` locked, so it agrees with the queue once the lock
    /// is taken; the run loop reads the queue only under the lock, so a stale `false`
    /// only delays an edit to the next round, and a stale `true` finds the queue empty.
    pending: AtomicBool,
    state: Mutex<State>,
    snapshot: Mutex<Vec<NodeReport>>,
    /// The same counters with the space's arcs and channel heads, as a process space
    /// sends them (`spaces::protocol::live_text`).
    live: Mutex<String>,
    /// The graph as the run loop last published it (at the start and after each edit).
    graph: Mutex<Vec<SnapNode>>,
    /// The run's filters in transit between spaces (shared by its mailboxes).
    board: Arc<crate::migrate::Board>,
    /// Wakes the space while it sleeps on its readiness handle (set by its run loop).
    waker: Mutex<Option<crate::readiness::Waker>>,
}

type Reply = mpsc::Sender<Result<Applied, EditError>>;

/// A tap to put on a node or take off (see [`EditHandle::tap`]).
enum TapJob {
    On {
        label: String,
        tap: Box<crate::tap::Tap>,
        reply: mpsc::Sender<Result<(), EditError>>,
    },
    Off {
        id: u64,
    },
    /// Put a shared tap on `label` if `tap` is given, then add `sub` to shared tap `tap_id`.
    Subscribe(Box<SubscribeJob>),
    Unsubscribe {
        id: u64,
    },
}

struct SubscribeJob {
    label: String,
    tap: Option<Box<crate::tap::Tap>>,
    tap_id: u64,
    key: Vec<u8>,
    want: crate::tap::Want,
    sub: crate::tap::Subscriber,
    reply: mpsc::Sender<Result<(), EditError>>,
}

/// A filter to move across channel `ch` (see `crate::migrate`): `down` from the space
/// the mailbox serves into the channel's consumer, else up from the consumer into it.
struct MoveJob {
    ch: usize,
    down: bool,
    label: String,
    reply: mpsc::Sender<Result<String, EditError>>,
}

struct State {
    /// Edits with the labels of the run's other spaces when each was posted.
    queue: Vec<(u64, Edit, Reply, Vec<String>)>,
    taps: Vec<TapJob>,
    moves: Vec<MoveJob>,
    ended: bool,
    next: u64,
}

/// Lock, whatever a panicking holder left: the state is a queue and a flag, consistent
/// between statements.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Mailbox {
    fn new(snapshot: Vec<NodeReport>, board: Arc<crate::migrate::Board>) -> Mailbox {
        Mailbox {
            board,
            pending: AtomicBool::new(false),
            state: Mutex::new(State {
                queue: Vec::new(),
                taps: Vec::new(),
                moves: Vec::new(),
                ended: false,
                next: 0,
            }),
            snapshot: Mutex::new(snapshot),
            live: Mutex::new(String::new()),
            graph: Mutex::new(Vec::new()),
            waker: Mutex::new(None),
        }
    }

    /// The run loop sleeps on its readiness handle: `w` wakes it when a job is posted.
    pub(crate) fn set_waker(&self, w: crate::readiness::Waker) {
        *lock(&self.waker) = Some(w);
    }

    /// A job was posted: wake the space if it sleeps.
    fn ring(&self) {
        if let Some(w) = lock(&self.waker).as_ref() {
            w.wake();
        }
    }

    pub(crate) fn board(&self) -> &crate::migrate::Board {
        &self.board
    }

    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// Apply every posted edit to `space` (the run loop calls this between source
    /// batches), publish the counters after each, and answer.
    pub(crate) fn serve(&self, space: &mut Space, factory: &dyn Factory) {
        let (edits, taps, moves) = {
            let mut st = lock(&self.state);
            self.pending.store(false, Ordering::Relaxed);
            (
                std::mem::take(&mut st.queue),
                std::mem::take(&mut st.taps),
                std::mem::take(&mut st.moves),
            )
        };
        for job in moves {
            let r = if job.down {
                space.send_down(job.ch, Some(&job.label), &self.board, factory)
            } else {
                space.pull_up(job.ch, Some(&job.label), &self.board)
            };
            space.restart_clock();
            if r.is_ok() {
                self.publish_graph(space);
            }
            let _ = job.reply.send(r);
        }
        for job in taps {
            match job {
                TapJob::On { label, tap, reply } => {
                    let _ = reply.send(space.tap_on(&label, *tap));
                }
                TapJob::Off { id } => space.tap_off(id),
                TapJob::Subscribe(job) => {
                    let SubscribeJob {
                        label,
                        tap,
                        tap_id,
                        key,
                        want,
                        sub,
                        reply,
                    } = *job;
                    let r = match tap {
                        Some(t) => space.tap_on(&label, *t),
                        None => Ok(()),
                    };
                    let _ = reply.send(r.and_then(|_| space.subscribe(tap_id, key, want, sub)));
                }
                TapJob::Unsubscribe { id } => space.unsubscribe(id),
            }
        }
        for (_, edit, reply, elsewhere) in edits {
            space.elsewhere = elsewhere;
            let r = space.edit(&edit, factory);
            // The edit's time is nobody's.
            space.restart_clock();
            self.publish(space);
            if r.is_ok() {
                self.publish_graph(space);
            }
            let _ = reply.send(r);
        }
    }

    /// The run loop's counters, for [`EditHandle::report`], and its nodes, arcs and
    /// channel heads as protocol text, for [`EditHandle::table`].
    pub(crate) fn publish(&self, space: &Space) {
        *lock(&self.snapshot) = space.report();
        *lock(&self.live) = crate::spaces::protocol::live_text(space);
    }

    /// The space's graph, for [`EditHandle::graph`] (the run loop publishes it when the
    /// run starts; `serve` after each applied edit).
    pub(crate) fn publish_graph(&self, space: &Space) {
        *lock(&self.graph) = space.graph_snapshot();
    }

    /// The run is ending: refuse what is posted and what comes.
    pub(crate) fn close(&self) {
        let (edits, taps, moves) = {
            let mut st = lock(&self.state);
            st.ended = true;
            self.pending.store(false, Ordering::Relaxed);
            (
                std::mem::take(&mut st.queue),
                std::mem::take(&mut st.taps),
                std::mem::take(&mut st.moves),
            )
        };
        for job in moves {
            let _ = job.reply.send(Err(EditError::Ended));
        }
        for job in taps {
            match job {
                TapJob::On { reply, .. } => {
                    let _ = reply.send(Err(EditError::Ended));
                }
                TapJob::Subscribe(j) => {
                    let _ = j.reply.send(Err(EditError::Ended));
                }
                _ => {}
            }
        }
        for (_, _, reply, _) in edits {
            let _ = reply.send(Err(EditError::Ended));
        }
    }

    /// Post a tap job; `Err(Ended)` once the run is over.
    fn post_tap(&self, job: TapJob) -> Result<(), EditError> {
        let mut st = lock(&self.state);
        if st.ended {
            return Err(EditError::Ended);
        }
        st.taps.push(job);
        self.pending.store(true, Ordering::Relaxed);
        drop(st);
        self.ring();
        Ok(())
    }

    /// Post `edit` and wait for its answer. On timeout an edit the run loop has not taken
    /// yet is withdrawn (nothing changed); one it has taken is waited for, so the caller
    /// never sees a timeout for an edit that applied.
    fn post(&self, edit: Edit, elsewhere: Vec<String>, timeout: Duration) -> Result<Applied, EditError> {
        let (tx, rx) = mpsc::channel();
        let id = {
            let mut st = lock(&self.state);
            if st.ended {
                return Err(EditError::Ended);
            }
            let id = st.next;
            st.next += 1;
            st.queue.push((id, edit, tx, elsewhere));
            self.pending.store(true, Ordering::Relaxed);
            id
        };
        self.ring();
        self.answer(&rx, timeout, |st| {
            let k = st.queue.iter().position(|(i, ..)| *i == id)?;
            st.queue.remove(k);
            Some(())
        })
    }

    /// Wait at most `timeout` for the answer to a job posted to this mailbox. On timeout
    /// `withdraw` takes the job back if the run loop has not taken it yet (nothing
    /// changed: `Timeout`); one it has taken is waited for, so the caller never sees a
    /// timeout for a job that was done.
    fn answer<T>(
        &self,
        rx: &mpsc::Receiver<Result<T, EditError>>,
        timeout: Duration,
        withdraw: impl FnOnce(&mut State) -> Option<()>,
    ) -> Result<T, EditError> {
        match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(EditError::Ended),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if withdraw(&mut lock(&self.state)).is_some() {
                    return Err(EditError::Timeout(timeout));
                }
                // Taken: it is being done right now.
                rx.recv().unwrap_or(Err(EditError::Ended))
            }
        }
    }

    fn snapshot(&self) -> Vec<NodeReport> {
        lock(&self.snapshot).clone()
    }

    fn graph(&self) -> Vec<SnapNode> {
        lock(&self.graph).clone()
    }
}

/// Edits a running run from another thread, and reads its counters while it runs.
/// Clone it freely; it is `Send` and `Sync`. Made by [`EditHandle::new`] for one
/// [`Space`] ([`Space::run_with`]) or by `Spaces::edit_handle` for a run of several
/// ([`crate::spaces::Spaces::run_with`]).
#[derive(Clone)]
pub struct EditHandle {
    dir: Arc<Directory>,
}

/// A node's shared tap, as the handle keeps track of it.
struct SharedTap {
    label: String,
    rings: crate::tap::TapRings,
    subs: Vec<u64>,
}

struct Directory {
    /// Shared taps (see [`EditHandle::subscribe`]): per node label, the tap's id, its
    /// rings and its subscribers.
    shared: Mutex<Vec<SharedTap>>,
    /// The spaces of this process, by id, each with its mailbox.
    local: Vec<(usize, Mailbox)>,
    /// Process spaces: their nodes' base names (edits there are refused, by name).
    remote: Vec<(usize, Vec<String>)>,
    /// Labels carry their space (`count@1`), as in a multi-space report.
    multi: bool,
    /// Process spaces' counters as they last sent them while running (every ~200 ms),
    /// labelled as in the run's report (`count@p1`), with their arcs and channel heads,
    /// by space id.
    remote_counters: Mutex<Vec<(usize, crate::spaces::SpacesReport)>>,
    /// The nodes the user wrote, in the order the pipeline reads (see
    /// [`crate::spaces::SpacesReport::finish`]).
    order: Vec<String>,
}

impl Default for EditHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl EditHandle {
    /// A handle for one space (space 0), to pass to [`Space::run_with`].
    pub fn new() -> EditHandle {
        Self::for_spaces(vec![(0, Vec::new())], Vec::new(), false, Vec::new())
    }

    pub(crate) fn for_spaces(
        local: Vec<(usize, Vec<NodeReport>)>,
        remote: Vec<(usize, Vec<String>)>,
        multi: bool,
        order: Vec<String>,
    ) -> EditHandle {
        let board = Arc::new(crate::migrate::Board::default());
        let local = local
            .into_iter()
            .map(|(id, r)| (id, Mailbox::new(r, board.clone())))
            .collect();
        EditHandle {
            dir: Arc::new(Directory {
                shared: Mutex::new(Vec::new()),
                local,
                remote,
                multi,
                remote_counters: Mutex::new(Vec::new()),
                order,
            }),
        }
    }

    /// Whether any space of this process has a filter (endpoints of channels aside).
    pub fn has_local_nodes(&self) -> bool {
        self.dir
            .local
            .iter()
            .any(|(_, m)| m.snapshot().iter().any(|r| !endpoint(&r.label)))
    }

    /// Process space `space`'s counters as it sent them (labels already suffixed
    /// `@pN`), replacing the ones before (see [`EditHandle::report`]).
    pub(crate) fn publish_remote(&self, space: usize, part: crate::spaces::SpacesReport) {
        let mut all = self.dir.remote_counters.lock().expect("not poisoned");
        match all.iter_mut().find(|(id, _)| *id == space) {
            Some(e) => e.1 = part,
            None => {
                all.push((space, part));
                all.sort_by_key(|e| e.0);
            }
        }
    }

    pub(crate) fn mailbox(&self, space: usize) -> Option<&Mailbox> {
        self.dir
            .local
            .iter()
            .find(|(id, _)| *id == space)
            .map(|(_, m)| m)
    }

    /// Apply `edit` to the running run at its next batch boundary, waiting at most
    /// `timeout` for the run to get there (see [`EditError::Timeout`]). The node is found
    /// by its label: `NODE@ID` names space ID; without it, the one space of this process
    /// that has the label. An edit naming several nodes (connect, disconnect, move) is
    /// refused with [`Refusal::Spaces`] if they are in different spaces.
    pub fn apply(&self, edit: Edit, timeout: Duration) -> Result<Applied, EditError> {
        let labels = edit.labels();
        let mut target = self.space_of(labels[0])?;
        for l in &labels[1..] {
            let other = self.space_of(l)?;
            if other != target {
                let (a, b) = (self.dir.local[target].0, self.dir.local[other].0);
                return Err(EditError::Refused {
                    label: format!("{} -> {l}", labels[0]),
                    why: Refusal::Spaces(
                        format!("{}@{a}", split_space(labels[0]).0),
                        format!("{}@{b}", split_space(l).0),
                    ),
                });
            }
            target = other;
        }
        let (id, mailbox) = (self.dir.local[target].0, &self.dir.local[target].1);
        // The labels of the run's other spaces, that a new node here must not take.
        let mut elsewhere: Vec<String> = self
            .dir
            .local
            .iter()
            .filter(|(i, _)| *i != id)
            .flat_map(|(_, m)| m.snapshot().into_iter().map(|r| r.label))
            .filter(|l| !endpoint(l))
            .collect();
        for (_, part) in self.dir.remote_counters.lock().expect("not poisoned").iter() {
            elsewhere.extend(part.nodes.iter().map(|r| split_space(&r.label).0.to_string()));
        }
        let mut applied = mailbox.post(edit, elsewhere, timeout)?;
        if self.dir.multi {
            applied.label = format!("{}@{id}", applied.label);
        }
        Ok(applied)
    }

    /// Move the running filter labelled `label` (as [`EditHandle::apply`] finds it) into
    /// space `to` of this process, across the one channel between them it is next to
    /// (see `crate::migrate`: down from the end of its space into the channel's consumer,
    /// or up from the start of its space into the channel's producer). Its state, session
    /// slots and counters move with it; no block is lost or reordered. Waits at most
    /// `timeout` for the space that acts to reach a batch boundary. Returns the filter's
    /// label where it was. A move down completes when the consumer reaches the marker (a
    /// report taken at once may still show the filter where it was).
    pub fn migrate(&self, label: &str, to: usize, timeout: Duration) -> Result<String, EditError> {
        let s = self.space_of(label)?;
        let (base, _) = split_space(label);
        let refuse = |why| {
            Err(EditError::Refused {
                label: label.to_string(),
                why,
            })
        };
        let Some(t) = self.dir.local.iter().position(|(id, _)| *id == to) else {
            return match self.dir.remote.iter().any(|(id, _)| *id == to) {
                true => refuse(Refusal::ProcessSpace(to)),
                false => refuse(Refusal::NoSpace(to.to_string())),
            };
        };
        let (from_snap, to_snap) = (self.dir.local[s].1.graph(), self.dir.local[t].1.graph());
        let Some(x) = from_snap.iter().position(|n| n.label == base) else {
            return Err(EditError::NoNode {
                label: base.to_string(),
                known: from_snap
                    .iter()
                    .filter(|n| n.channel.is_none())
                    .map(|n| n.label.clone())
                    .collect(),
            });
        };
        let has = |snap: &[SnapNode], end: (bool, usize)| snap.iter().any(|n| n.channel == Some(end));
        // Down: x feeds an egress whose ingress is in `to`.
        let down = from_snap[x].out.iter().find_map(|&o| match from_snap[o].channel {
            Some((true, ch)) if has(&to_snap, (false, ch)) => Some(ch),
            _ => None,
        });
        // Up: an ingress of a channel from `to` feeds x.
        let up = from_snap.iter().find_map(|n| match n.channel {
            Some((false, ch)) if n.out.contains(&x) && has(&to_snap, (true, ch)) => Some(ch),
            _ => None,
        });
        let (ch, is_down, acting) = match (down, up) {
            (Some(ch), _) => (ch, true, s),
            (None, Some(ch)) => (ch, false, t),
            (None, None) => return refuse(Refusal::NoChannel(to.to_string())),
        };
        let mailbox = &self.dir.local[acting].1;
        let (tx, rx) = mpsc::channel();
        {
            let mut st = lock(&mailbox.state);
            if st.ended {
                return Err(EditError::Ended);
            }
            st.moves.push(MoveJob {
                ch,
                down: is_down,
                label: base.to_string(),
                reply: tx,
            });
            mailbox.pending.store(true, Ordering::Relaxed);
        }
        mailbox.ring();
        mailbox.answer(&rx, timeout, |st| {
            let k = st.moves.iter().position(|m| m.ch == ch && m.label == base)?;
            st.moves.remove(k);
            Some(())
        })
    }

    /// Tap the output of the node labelled `label` (as [`EditHandle::apply`] finds it):
    /// from the next batch it emits, every block it passes on is also copied into the
    /// tap's rings, which the returned [`crate::tap::TapRings`] give to a reader (see
    /// `crate::tap`). Take it off with [`EditHandle::untap`]. `data_bytes`: the size of
    /// the tap's data ring.
    pub fn tap(
        &self,
        label: &str,
        data_bytes: usize,
        timeout: Duration,
    ) -> Result<crate::tap::TapRings, EditError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mailbox = &self.dir.local[self.space_of(label)?].1;
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let (tap, rings) = crate::tap::Tap::create(id, split_space(label).0, data_bytes)
            .map_err(|e| EditError::Tap(e.to_string()))?;
        let (tx, rx) = mpsc::channel();
        mailbox.post_tap(TapJob::On {
            label: label.to_string(),
            tap: Box::new(tap),
            reply: tx,
        })?;
        match rx.recv_timeout(timeout) {
            Ok(r) => r.map(|_| rings),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(EditError::Ended),
            // The job stays queued: when the run gets to it, the tap is made and nobody
            // reads it; take it off now so that it is removed right after.
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = mailbox.post_tap(TapJob::Off { id });
                Err(EditError::Timeout(timeout))
            }
        }
    }

    /// Take tap `id` off (its readers see the end of the stream), or end subscription
    /// `id` (the shared tap goes when its last subscriber does). Nothing to do after the
    /// run ended.
    pub fn untap(&self, id: u64) {
        let mut shared = lock(&self.dir.shared);
        if let Some(k) = shared.iter().position(|t| t.subs.contains(&id)) {
            let t = &mut shared[k];
            t.subs.retain(|s| *s != id);
            let last = t.subs.is_empty();
            let tap = t.rings.id;
            if last {
                shared.remove(k);
            }
            drop(shared);
            for (_, m) in &self.dir.local {
                let _ = m.post_tap(if last {
                    TapJob::Off { id: tap }
                } else {
                    TapJob::Unsubscribe { id }
                });
            }
            return;
        }
        drop(shared);
        for (_, m) in &self.dir.local {
            let _ = m.post_tap(TapJob::Off { id });
        }
    }

    /// Subscribe to the output of node `label` through its shared tap (made on first use):
    /// from the next batch, every block `want` keeps (see `crate::tap::Want`) gets a tag in
    /// the subscriber's own tag ring, pointing at the one copy in the shared data ring.
    /// `key` identifies the filter (subscribers with equal keys share one evaluation per
    /// block); `snap`: most bytes kept per block; `tag_slots`: the size of the
    /// subscriber's tag ring. The returned rings' `id` ends it ([`EditHandle::untap`]).
    pub fn subscribe(
        &self,
        label: &str,
        key: Vec<u8>,
        want: crate::tap::Want,
        snap: u32,
        tag_slots: usize,
        timeout: Duration,
    ) -> Result<crate::tap::TapRings, EditError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 32);
        let mailbox = &self.dir.local[self.space_of(label)?].1;
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let tap_err = |e: beltway::Error| EditError::Tap(e.to_string());
        // One subscription at a time per handle: the shared tap is made once.
        let mut shared = lock(&self.dir.shared);
        let (tap, rings) = match shared.iter().find(|t| t.label == label) {
            Some(t) => (None, t.rings.clone()),
            None => {
                let tap_id = NEXT.fetch_add(1, Ordering::Relaxed);
                let (tap, rings) =
                    crate::tap::Tap::shared(tap_id, split_space(label).0, crate::tap::DATA_BYTES)
                        .map_err(tap_err)?;
                (Some(Box::new(tap)), rings)
            }
        };
        let (sub, sub_rings) =
            crate::tap::Subscriber::create(id, &rings, tag_slots, snap).map_err(tap_err)?;
        let (tx, rx) = mpsc::channel();
        let fresh = tap.is_some();
        mailbox.post_tap(TapJob::Subscribe(Box::new(SubscribeJob {
            label: label.to_string(),
            tap,
            tap_id: rings.id,
            key,
            want,
            sub,
            reply: tx,
        })))?;
        let answer = match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(EditError::Ended),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = mailbox.post_tap(if fresh {
                    TapJob::Off { id: rings.id }
                } else {
                    TapJob::Unsubscribe { id }
                });
                Err(EditError::Timeout(timeout))
            }
        };
        if let Err(e) = answer {
            // A shared tap the run no longer has (its node went, or the tap stopped): forget
            // it, so that the next subscriber makes a new one.
            if !fresh && matches!(e, EditError::Tap(_)) {
                shared.retain(|t| t.label != label);
            }
            return Err(e);
        }
        match shared.iter_mut().find(|t| t.label == label) {
            Some(t) => t.subs.push(id),
            None => shared.push(SharedTap {
                label: label.to_string(),
                rings,
                subs: vec![id],
            }),
        }
        Ok(sub_rings)
    }

    /// The index in `dir.local` of the space of the node `label` names.
    fn space_of(&self, label: &str) -> Result<usize, EditError> {
        let d = &self.dir;
        let (label, space) = split_space(label);
        let refused = |why| {
            Err(EditError::Refused {
                label: label.to_string(),
                why,
            })
        };
        match space {
            Some(s) => {
                if let Some(p) = s.strip_prefix('p').and_then(|p| p.parse::<usize>().ok()) {
                    return refused(Refusal::ProcessSpace(p));
                }
                match s
                    .parse::<usize>()
                    .ok()
                    .and_then(|id| d.local.iter().position(|(l, _)| *l == id))
                {
                    Some(t) => Ok(t),
                    None => refused(Refusal::NoSpace(s.to_string())),
                }
            }
            None if d.local.len() == 1 => Ok(0),
            None => {
                let has = |m: &Mailbox| m.snapshot().iter().any(|r| r.label == label);
                let found: Vec<usize> =
                    (0..d.local.len()).filter(|&k| has(&d.local[k].1)).collect();
                match found.as_slice() {
                    [one] => Ok(*one),
                    [] => {
                        if let Some((p, _)) = d
                            .remote
                            .iter()
                            .find(|(_, names)| names.iter().any(|n| n == base_of(label)))
                        {
                            return refused(Refusal::ProcessSpace(*p));
                        }
                        let known = self.report().into_iter().map(|r| r.label).collect();
                        Err(EditError::NoNode {
                            label: label.to_string(),
                            known,
                        })
                    }
                    more => Err(EditError::Ambiguous {
                        label: label.to_string(),
                        candidates: more
                            .iter()
                            .map(|&k| format!("{label}@{}", d.local[k].0))
                            .collect(),
                    }),
                }
            }
        }
    }

    /// The counters of every space of this process as their run loops last published
    /// them (every ~100 ms while running, after each edit, and at the end); labelled as
    /// in the run's report (`count@1` in a run of several spaces). Process spaces'
    /// counters follow, as each last sent them while running (about every 200 ms;
    /// labelled `count@p1` as in the report; absent until the first).
    pub fn report(&self) -> Vec<NodeReport> {
        let mut v = Vec::new();
        for (id, m) in &self.dir.local {
            for mut r in m.snapshot() {
                if endpoint(&r.label) {
                    continue;
                }
                if self.dir.multi {
                    r.label = format!("{}@{id}", r.label);
                }
                v.push(r);
            }
        }
        for (_, part) in self.dir.remote_counters.lock().expect("not poisoned").iter() {
            v.extend(part.nodes.iter().cloned());
        }
        v
    }

    /// The run's table as it runs: what its spaces last published ([`EditHandle::report`],
    /// with their arcs), joined across channels and folded as the report at the end
    /// folds it ([`crate::spaces::SpacesReport::finish`]): one row per node the user wrote,
    /// labelled as in one space, in the pipeline's order, with the spaces it runs in; the
    /// arcs between them. No summaries, warnings or status (those come at the end).
    pub fn table(&self) -> crate::spaces::SpacesReport {
        use crate::spaces::protocol::parse_report;
        let mut rep = crate::spaces::SpacesReport::default();
        for (id, m) in &self.dir.local {
            let suffix = if self.dir.multi { format!("@{id}") } else { String::new() };
            let from = rep.nodes.len();
            parse_report(&lock(&m.live), &mut rep, &suffix);
            // The classes seen leaving each node (the text does not carry them).
            let snap = m.snapshot();
            for n in &mut rep.nodes[from..] {
                if let Some(r) = snap.iter().find(|r| format!("{}{suffix}", r.label) == n.label) {
                    n.classes = r.classes.clone();
                }
            }
        }
        for (_, part) in self.dir.remote_counters.lock().expect("not poisoned").iter() {
            rep.nodes.extend(part.nodes.iter().cloned());
            rep.arcs.extend(part.arcs.iter().cloned());
            rep.heads.extend(part.heads.iter().cloned());
        }
        rep.warnings.clear();
        rep.failed = false;
        rep.status = None;
        rep.finish(self.dir.multi, &self.dir.order);
        rep
    }

    /// The graph of the spaces of this process as their run loops last published it
    /// (when the run started, and after each applied edit; empty before the run starts),
    /// labelled as [`EditHandle::report`] labels nodes. Arcs through a channel between
    /// two of these spaces show as one arc between the real nodes; nodes in process
    /// spaces are absent, and so are the arcs to and from them.
    pub fn graph(&self) -> Vec<GraphNode> {
        let parts: Vec<(usize, Vec<SnapNode>)> = self
            .dir
            .local
            .iter()
            .map(|(id, m)| (*id, m.graph()))
            .collect();
        resolve(&parts, self.dir.multi)
    }
}

#[cfg(test)]
mod tests {
    //! Edits on spaces of small test filters (the filter library depends on this crate;
    //! its own filters are edited live in `crates/core/filters/tests/edit.rs`). Mid-run edits
    //! are made deterministic by `gate`, a source that produces a batch only when the test
    //! says so and acknowledges after the batch's whole walk.
    use super::*;
    use crate::filter::Args;
    use crate::spaces::Spaces;
    use beltway::Tag;
    use std::sync::mpsc::{Receiver, Sender};

    const SIZE: usize = 64;

    /// `gate`: each number received is a batch of that many blocks of SIZE bytes (u32
    /// sequence number first); after its walk, an acknowledgement. Ends when the sender
    /// is dropped. With `block=yes` it waits in `pull` (a run that reaches no boundary),
    /// and acknowledges a batch from there, once it waits for the next.
    struct Gate {
        go: Receiver<u32>,
        ack: Sender<()>,
        seq: u32,
        block: bool,
        pulled: bool,
    }
    impl Filter for Gate {
        fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
        fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, _max: usize) -> bool {
            if self.block && std::mem::take(&mut self.pulled) {
                let _ = self.ack.send(());
            }
            let n = if self.block {
                self.go
                    .recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
            } else {
                self.go.recv_timeout(Duration::from_millis(1))
            };
            match n {
                Ok(n) => {
                    for _ in 0..n {
                        let mut b = [7u8; SIZE];
                        b[..4].copy_from_slice(&self.seq.to_le_bytes());
                        let t = cx.store.push(&b);
                        out.push(Tag { class: 1, ..t });
                        self.seq += 1;
                    }
                    self.pulled = true;
                    true
                }
                Err(mpsc::RecvTimeoutError::Timeout) => true,
                Err(mpsc::RecvTimeoutError::Disconnected) => false,
            }
        }
        fn epoch_end(&mut self, _cx: &mut Ctx<'_>) {
            if !self.block && std::mem::take(&mut self.pulled) {
                let _ = self.ack.send(());
            }
        }
    }

    /// `tally`: counts blocks and bytes, and blocks that arrive out of order or twice.
    #[derive(Default)]
    struct Tally {
        blocks: u64,
        bytes: u64,
        next: u32,
        bad: u64,
    }
    impl Filter for Tally {
        fn process(&mut self, cx: &mut Ctx<'_>, b: &mut Batch) {
            for t in &b.tags {
                let d = cx.data(t).expect("resolvable");
                let seq = u32::from_le_bytes(d[..4].try_into().unwrap());
                if seq < self.next {
                    self.bad += 1;
                }
                self.next = seq + 1;
                self.blocks += 1;
                self.bytes += d.len() as u64;
            }
        }
        fn summary(&self) -> Option<String> {
            Some(format!("{} {} {}", self.blocks, self.bytes, self.bad))
        }
    }

    /// `hold [n=N]`: keeps every block until `finish` (like tcpstream's held segments).
    #[derive(Default)]
    struct Hold(Vec<Tag>);
    impl Filter for Hold {
        fn process(&mut self, cx: &mut Ctx<'_>, b: &mut Batch) {
            for t in &b.tags {
                self.0.push(cx.keep(t).expect("keep"));
            }
            b.clear();
        }
        fn finish(&mut self, _: &mut Ctx<'_>, out: &mut Batch) {
            for t in self.0.drain(..) {
                out.push(t);
            }
        }
    }

    /// `every n=K`: passes the Kth, 2Kth, ... block (class 1), drops the others.
    struct Every(u64, u64);
    impl Filter for Every {
        fn process(&mut self, _: &mut Ctx<'_>, b: &mut Batch) {
            for t in b.tags.iter_mut() {
                self.1 += 1;
                t.class = self.1.is_multiple_of(self.0) as u16;
            }
        }
    }

    struct Pass;
    impl Filter for Pass {
        fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
    }

    /// The test factory; `gate` takes its channels from here (once).
    struct F(Mutex<Option<(Receiver<u32>, Sender<()>)>>);
    impl Factory for F {
        fn make(&self, name: &str, a: &Args) -> Result<Box<dyn Filter>, crate::FilterError> {
            Ok(match name {
                "gate" => {
                    let (go, ack) = lock(&self.0).take().ok_or("gate: made twice")?;
                    Box::new(Gate {
                        go,
                        ack,
                        seq: 0,
                        block: a.flag("block")?,
                        pulled: false,
                    })
                }
                "tally" => Box::<Tally>::default(),
                "hold" => {
                    // n= only so that a `set` can fail to build.
                    a.parse::<u64>("n", None, 0)?;
                    Box::<Hold>::default()
                }
                "every" => Box::new(Every(a.parse::<u64>("n", Some(0), 1)?.max(1), 0)),
                "pass" | "join" => Box::new(Pass),
                "split" => Box::new(crate::builtin::SplitFilter::new(
                    lang::SplitMode::RoundRobin,
                    2,
                )),
                _ => return Err(format!("no filter {name}").into()),
            })
        }
        fn is_source(&self, name: &str) -> bool {
            name == "gate"
        }
    }

    fn resolver() -> lang::StaticResolver {
        lang::StaticResolver::new()
            .native("gate", &["block"])
            .native("tally", &[])
            .native("hold", &["n"])
            .native("every", &["n"])
            .native("pass", &[])
            .native("split", &[])
            .native("join", &[])
            .unix("cat")
    }

    /// A factory and the test's ends of the gate: send batch sizes, receive acks.
    fn gate() -> (F, Sender<u32>, Receiver<()>) {
        let (go_tx, go_rx) = mpsc::channel();
        let (ack_tx, ack_rx) = mpsc::channel();
        (F(Mutex::new(Some((go_rx, ack_tx)))), go_tx, ack_rx)
    }

    fn build(text: &str, f: &F) -> Space {
        let g = lang::parse(text, &resolver()).unwrap_or_else(|d| panic!("{d}"));
        Space::build(&g, f, 1 << 22).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse(text: &str) -> Edit {
        Edit::parse(text, &resolver()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse_err(text: &str) -> Diagnostic {
        match Edit::parse(text, &resolver()) {
            Err(EditError::Syntax(d)) => d,
            other => panic!("`{text}`: expected a syntax error, got {other:?}"),
        }
    }

    /// The graph as labels and arcs (live nodes only; removed ones shown as `-label`).
    fn shape(s: &Space) -> Vec<String> {
        s.nodes
            .iter()
            .map(|n| {
                let arcs: Vec<String> = n
                    .out
                    .iter()
                    .map(|a| format!("{} {:?}/{}", s.nodes[a.to].label, a.sel, a.in_index))
                    .collect();
                format!(
                    "{}{} -> [{}]",
                    if n.removed { "-" } else { "" },
                    n.label,
                    arcs.join(", ")
                )
            })
            .collect()
    }

    fn summary(r: &[NodeReport], label: &str) -> (u64, u64, u64) {
        let s = r.iter().find(|n| n.label == label).unwrap_or_else(|| {
            panic!(
                "no {label} in {:?}",
                r.iter().map(|n| &n.label).collect::<Vec<_>>()
            )
        });
        let v: Vec<u64> = s
            .summary
            .as_deref()
            .expect("tally summary")
            .split(' ')
            .map(|x| x.parse().unwrap())
            .collect();
        (v[0], v[1], v[2])
    }

    #[test]
    fn a_replicated_node_is_one_node_of_the_folded_graph() {
        let g = |label: &str, filter: &str, inputs: &[&str], outputs: &[&str], space: &str| GraphNode {
            label: label.into(),
            filter: filter.into(),
            options: vec![],
            inputs: inputs.iter().map(|x| x.to_string()).collect(),
            outputs: outputs.iter().map(|x| x.to_string()).collect(),
            source: inputs.is_empty(),
            space: space.into(),
        };
        let nodes = [
            g("gen@0", "gen", &[], &["deflate~split@0"], "0"),
            g("deflate~split@0", "split", &["gen@0"], &["deflate@1", "deflate~2@2"], "0"),
            g("deflate@1", "deflate", &["deflate~split@0"], &["deflate~join@1"], "1"),
            g("deflate~2@2", "deflate", &["deflate~split@0"], &["deflate~join@1"], "2"),
            g("deflate~join@1", "join", &["deflate@1", "deflate~2@2"], &["count@1"], "1"),
            g("count@1", "count", &["deflate~join@1"], &[], "1"),
        ];
        let (folded, taps) = fold_graph(&nodes);
        let short: Vec<(&str, &str, Vec<String>, Vec<String>, &str)> = folded
            .iter()
            .map(|n| (n.label.as_str(), n.filter.as_str(), n.inputs.clone(), n.outputs.clone(), n.space.as_str()))
            .collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            short,
            [
                ("gen", "gen", s(&[]), s(&["deflate"]), "0"),
                ("deflate", "deflate", s(&["gen"]), s(&["count"]), "1,2"),
                ("count", "count", s(&["deflate"]), s(&[]), "1"),
            ]
        );
        let taps: Vec<(&str, &str)> = taps.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(taps, [("gen", "gen@0"), ("deflate", "deflate~join@1"), ("count", "count@1")]);
    }

    #[test]
    fn every_form_parses() {
        assert_eq!(
            parse("set every n=5"),
            Edit::Set {
                node: "every".into(),
                options: vec![("n".into(), "5".into())],
                span: Span::new(10, 13)
            }
        );
        let Edit::Insert { node, at, filter } = parse("insert after tally:mid every n=2") else {
            panic!()
        };
        assert_eq!((node.as_str(), at), ("tally:mid", Where::After));
        assert!(
            matches!(&filter.kind, NodeKind::Filter { filter, options, .. } if filter == "every" && options == &[("n".to_string(), "2".to_string())])
        );
        assert_eq!(
            filter.span,
            Span::new(23, 32),
            "the filter's span is in the edit's text"
        );
        assert!(
            matches!(parse("  insert   before pass#2 hold  "), Edit::Insert { at: Where::Before, ref node, .. } if node == "pass#2")
        );
        assert_eq!(
            parse("remove every@1"),
            Edit::Remove {
                node: "every@1".into()
            }
        );
        assert!(
            matches!(parse("replace hold pass name=p"), Edit::Replace { ref filter, .. } if filter.name.as_deref() == Some("p"))
        );
        assert!(
            matches!(parse("set every#2 n=7"), Edit::Set { ref node, .. } if node == "every#2")
        );
        let Edit::Branch { node, filter } = parse("branch tally:mid every n=2") else {
            panic!()
        };
        assert_eq!(node, "tally:mid");
        assert!(matches!(&filter.kind, NodeKind::Filter { filter, .. } if filter == "every"));
        assert_eq!(
            filter.span,
            Span::new(17, 26),
            "the filter's span is in the edit's text"
        );
        assert_eq!(
            parse(" connect  gate tally@1 "),
            Edit::Connect {
                from: "gate".into(),
                to: "tally@1".into()
            }
        );
        assert_eq!(
            parse("disconnect gate tally"),
            Edit::Disconnect {
                from: "gate".into(),
                to: "tally".into()
            }
        );
        assert_eq!(
            parse("move tally:t every pass#2"),
            Edit::Move {
                node: "tally:t".into(),
                from: "every".into(),
                to: "pass#2".into()
            }
        );
        assert_eq!(
            parse("move tally:t every pass#2").labels(),
            ["tally:t", "every", "pass#2"]
        );
        assert_eq!(
            parse("connect gate tally").node(),
            "tally",
            "the node that gets an input"
        );
    }

    #[test]
    fn bad_edits_are_syntax_errors_pointing_at_the_problem() {
        let cases: &[(&str, DiagKind, &str, &str)] = &[
            ("", DiagKind::EmptyPipeline, "", "empty edit"),
            (
                "frob tally",
                DiagKind::UnexpectedToken,
                "frob",
                "unknown edit 'frob'",
            ),
            (
                "insert beside tally pass",
                DiagKind::UnexpectedToken,
                "beside",
                "'after' or 'before'",
            ),
            (
                "insert after",
                DiagKind::MissingOperand,
                "",
                "expected the label",
            ),
            (
                "insert after tally",
                DiagKind::MissingOperand,
                "",
                "expected a filter",
            ),
            (
                "insert after tally pas",
                DiagKind::UnknownFilter,
                "pas",
                "pas",
            ),
            (
                "insert after tally pass | hold",
                DiagKind::UnexpectedToken,
                "hold",
                "one filter",
            ),
            (
                "insert after tally cat",
                DiagKind::UnknownFilter,
                "cat",
                "Unix",
            ),
            (
                "insert after tally split",
                DiagKind::UnexpectedToken,
                "split",
                "split",
            ),
            (
                "insert after tally pass space=1",
                DiagKind::BadOption,
                "pass space=1",
                "space=",
            ),
            (
                "insert after tally pass @private",
                DiagKind::UnknownHint,
                "pass",
                "@hints",
            ),
            (
                "remove tally hold",
                DiagKind::UnexpectedToken,
                "hold",
                "left over",
            ),
            ("set every 5", DiagKind::BadOption, "5", "KEY=VALUE"),
            ("set every", DiagKind::MissingOperand, "", "KEY=VALUE"),
            ("set every m=5", DiagKind::BadOption, "m", "m"),
            (
                "set every n=5 export=yes",
                DiagKind::BadOption,
                "n=5 export=yes",
                "export=",
            ),
            (
                "set every n=5 name=x",
                DiagKind::BadOption,
                "n=5 name=x",
                "name=",
            ),
            (
                "set cat n=1",
                DiagKind::UnexpectedToken,
                "cat",
                "not a native filter",
            ),
            (
                "insert after tally every n=\"2",
                DiagKind::UnterminatedQuote,
                "\"2",
                "quote",
            ),
            ("branch", DiagKind::MissingOperand, "", "expected the label"),
            (
                "branch tally",
                DiagKind::MissingOperand,
                "",
                "expected a filter",
            ),
            ("branch tally cat", DiagKind::UnknownFilter, "cat", "Unix"),
            (
                "branch tally split",
                DiagKind::UnexpectedToken,
                "split",
                "split",
            ),
            (
                "branch tally every n=2 | tally",
                DiagKind::UnexpectedToken,
                "tally",
                "one filter",
            ),
            ("branch tally every m=2", DiagKind::BadOption, "m", "m"),
            ("connect", DiagKind::MissingOperand, "", "FROM"),
            ("connect gate", DiagKind::MissingOperand, "", "TO"),
            (
                "connect gate tally hold",
                DiagKind::UnexpectedToken,
                "hold",
                "left over",
            ),
            ("disconnect gate", DiagKind::MissingOperand, "", "TO"),
            (
                "disconnect gate tally hold pass",
                DiagKind::UnexpectedToken,
                "hold pass",
                "FROM TO",
            ),
            ("move tally", DiagKind::MissingOperand, "", "FROM"),
            ("move tally gate", DiagKind::MissingOperand, "", "TO"),
            (
                "move tally gate pass hold",
                DiagKind::UnexpectedToken,
                "hold",
                "NODE FROM TO",
            ),
            (
                "mkdir tally",
                DiagKind::UnexpectedToken,
                "mkdir",
                "branch, connect, disconnect or move",
            ),
        ];
        for &(text, kind, under, words) in cases {
            let d = parse_err(text);
            assert_eq!(d.kind, kind, "`{text}`: {d}");
            assert_eq!(
                d.input, text,
                "`{text}`: the diagnostic renders the edit's text"
            );
            let got = &text[d.span.start.min(text.len())..d.span.end.min(text.len())];
            assert!(
                got.starts_with(under) && (under.is_empty() || !got.is_empty()),
                "`{text}`: caret under '{got}', expected '{under}': {d}"
            );
            assert!(
                d.message.contains(words),
                "`{text}`: '{}' does not say '{words}'",
                d.message
            );
        }
    }

    proptest::proptest! {
        /// Hostile text: an error or an edit, never a panic, and spans inside the text.
        #[test]
        fn parsing_never_panics(text in "\\PC{0,40}") {
            if let Err(EditError::Syntax(d)) = Edit::parse(&text, &resolver()) {
                proptest::prop_assert!(d.span.start <= text.len() && d.span.end <= text.len(), "{:?} in {:?}", d.span, text);
            }
        }

        /// Text made of the language's own words, which gets further into the parser.
        #[test]
        fn word_salad_never_panics(words in proptest::collection::vec(proptest::sample::select(vec![
            "set", "insert", "after", "before", "remove", "replace", "branch", "connect", "disconnect", "move", "tally", "every", "n=2", "n=", "=", "|", "+", "(", ")", "\"", "!", "@private", "space=1", "cat", "hold:h", "tally#2", "every@1",
        ]), 0..8)) {
            let text = words.join(" ");
            if let Err(EditError::Syntax(d)) = Edit::parse(&text, &resolver()) {
                proptest::prop_assert!(d.span.start <= text.len() && d.span.end <= text.len(), "{:?} in {:?}", d.span, text);
            }
        }
    }

    #[test]
    fn inserts_rewire_as_the_pipeline_would_be_written_and_label_by_the_build_rule() {
        let (f, _go, _ack) = gate();
        let mut s = build("gate | tally |1 hold + pass | tally name=tail", &f);
        assert_eq!(
            shape(&s),
            [
                "gate -> [tally Default/0]",
                "tally -> [hold Class(1)/0, pass Class(1)/0]",
                "hold -> [join Default/0]",
                "pass -> [join Default/1]",
                "join -> [tally:tail Default/0]",
                "tally:tail -> []"
            ]
        );
        let a = s.edit(&parse("insert after tally tally"), &f).unwrap();
        assert_eq!(
            (a.label.as_str(), a.retired.is_none()),
            ("tally#3", true),
            "tally and tally:tail come first"
        );
        let a = s.edit(&parse("insert before pass every n=3"), &f).unwrap();
        assert_eq!(a.label, "every");
        let a = s
            .edit(&parse("insert before every tally name=t"), &f)
            .unwrap();
        assert_eq!(a.label, "tally:t");
        let a = s.edit(&parse("insert after tally:tail tally"), &f).unwrap();
        assert_eq!(
            a.label, "tally#5",
            "four tallies before it, named ones counted"
        );
        assert_eq!(
            shape(&s),
            [
                "gate -> [tally Default/0]",
                "tally -> [tally#3 Default/0]",
                "hold -> [join Default/0]",
                "pass -> [join Default/1]",
                "join -> [tally:tail Default/0]",
                "tally:tail -> [tally#5 Default/0]",
                // X's out-arcs leave the new node with their selectors and in-arc indices;
                // `insert before every` took every's one in-arc (selector kept).
                "tally#3 -> [hold Class(1)/0, tally:t Class(1)/0]",
                // new -> X keeps X's in-arc index.
                "every -> [pass Default/0]",
                "tally:t -> [every Default/0]",
                "tally#5 -> []",
            ]
        );
        let labels: Vec<String> = s.report().into_iter().map(|r| r.label).collect();
        assert_eq!(
            labels,
            [
                "gate",
                "tally",
                "hold",
                "pass",
                "join",
                "tally:tail",
                "tally#3",
                "every",
                "tally:t",
                "tally#5"
            ]
        );
    }

    #[test]
    fn refused_and_failed_edits_leave_the_space_exactly_as_it_was() {
        let (f, _go, _ack) = gate();
        let mut s = build("gate | tally | split | pass + hold | tally name=tail", &f);
        let before = shape(&s);
        let refused: &[(&str, Refusal)] = &[
            ("remove gate", Refusal::Source),
            ("insert before gate pass", Refusal::BeforeSource),
            ("insert after tally gate", Refusal::NewSource("gate".into())),
            ("insert after split pass", Refusal::Split),
            ("remove split", Refusal::Split),
            ("replace split pass", Refusal::Split),
            ("remove join", Refusal::Template),
            ("insert before join pass", Refusal::Inputs(2)),
            ("replace tally gate", Refusal::SourceMismatch),
            ("replace gate tally", Refusal::SourceMismatch),
            (
                "insert after tally tally name=tail",
                Refusal::NameTaken("tally:tail".into()),
            ),
            (
                "replace pass tally name=tail",
                Refusal::NameTaken("tally:tail".into()),
            ),
        ];
        for (text, why) in refused {
            match s.edit(&parse(text), &f) {
                Err(EditError::Refused { why: w, .. }) => assert_eq!(&w, why, "{text}"),
                other => panic!("{text}: expected {why:?}, got {other:?}"),
            }
            assert_eq!(shape(&s), before, "{text} changed the space");
        }
        // A filter that fails to build: a typed error naming the new node and the value.
        for text in [
            "insert after tally every n=banana",
            "insert before tally every n=banana",
            "replace pass every n=banana",
        ] {
            let r = s.edit(&parse(text), &f);
            let Err(EditError::Build(e)) = r else {
                panic!("{text}: {r:?}")
            };
            assert_eq!(e.label, "every");
            assert!(
                matches!(&*e.kind, crate::BuildErrorKind::Filter(crate::FilterError::BadValue { key, value, .. }) if key == "n" && value == "banana"),
                "{e}"
            );
            assert_eq!(
                e.render("edit: ", text).lines().nth(2).map(|l| l.trim()),
                Some("^^^^^^^^^^^^^^"),
                "caret under the filter in the edit's text:\n{}",
                e.render("edit: ", text)
            );
            assert_eq!(shape(&s), before, "{text} changed the space");
        }
        match s.edit(&parse("remove nosuch"), &f) {
            Err(EditError::NoNode { label, known }) => {
                assert_eq!(label, "nosuch");
                assert_eq!(
                    known,
                    [
                        "gate",
                        "tally",
                        "split",
                        "pass",
                        "hold",
                        "join",
                        "tally:tail"
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// Runs `text` on a thread with an edit handle; returns the handle, the gate and the
    /// run's thread (its report at the end).
    fn running(
        text: &'static str,
    ) -> (
        EditHandle,
        Sender<u32>,
        Receiver<()>,
        std::thread::JoinHandle<Vec<NodeReport>>,
    ) {
        let (f, go, ack) = gate();
        let h = EditHandle::new();
        let h2 = h.clone();
        let t = std::thread::spawn(move || {
            let mut s = build(text, &f);
            s.run_with(&AtomicBool::new(false), &h2, &f, |_| {});
            s.report()
        });
        (h, go, ack, t)
    }

    const WAIT: Duration = Duration::from_secs(60);

    /// Wait until the handle's counters (refreshed every ~100 ms by the run loop) show
    /// `blocks` at tally `label`; a watchdog, not a time limit on the code under test.
    fn eventually(h: &EditHandle, label: &str, blocks: u64) {
        let end = std::time::Instant::now() + WAIT;
        loop {
            let r = h.report();
            let now = r
                .iter()
                .find(|n| n.label == label)
                .map(|_| summary(&r, label).0);
            if now == Some(blocks) {
                return;
            }
            assert!(
                std::time::Instant::now() < end,
                "{label}: the counters show {now:?}, never {blocks}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One batch of `n` blocks, walked to its end.
    fn batch(go: &Sender<u32>, ack: &Receiver<()>, n: u32) {
        go.send(n).unwrap();
        ack.recv_timeout(WAIT).expect("the batch's walk ended");
    }

    #[test]
    fn a_lossless_run_loses_no_block_across_edits_and_held_blocks_are_flushed() {
        let (h, go, ack, t) = running("gate | tally name=head | hold | tally name=tail");
        let edits = [
            "insert after tally:head tally name=mid",
            // Fails to build: the old instance stays, with all it holds.
            "set hold n=banana",
            "remove hold",
            "insert before tally:tail hold",
            "replace tally:mid every n=1",
            "set every n=1",
            "remove every",
            // A removed node's label is not given out again: this hold is hold#2.
            "replace hold#2 pass",
        ];
        let mut sent = 0u64;
        for (k, e) in edits.iter().enumerate() {
            batch(&go, &ack, 100 + k as u32);
            sent += 100 + k as u64;
            let r = h.apply(parse(e), WAIT);
            match *e {
                "set hold n=banana" => assert!(matches!(r, Err(EditError::Build(_))), "{e}: {r:?}"),
                "remove hold" => {
                    // hold kept all it got; retiring it flushed them on to the tail.
                    assert_eq!(r.unwrap().flushed as u64, sent, "{e}");
                    eventually(&h, "tally:tail", sent);
                }
                _ => drop(r.unwrap_or_else(|x| panic!("{e}: {x}"))),
            }
        }
        batch(&go, &ack, 1000);
        sent += 1000;
        drop(go);
        let r = t.join().unwrap();
        assert_eq!(
            summary(&r, "tally:tail"),
            (sent, sent * SIZE as u64, 0),
            "every block, in order"
        );
        assert_eq!(summary(&r, "tally:head"), (sent, sent * SIZE as u64, 0));
        let labels: Vec<&str> = r.iter().map(|n| n.label.as_str()).collect();
        assert_eq!(
            labels,
            ["gate", "tally:head", "tally:tail", "pass"],
            "removed nodes are not reported"
        );
        assert!(matches!(
            h.apply(parse("remove pass"), WAIT),
            Err(EditError::Ended)
        ));
    }

    #[test]
    fn set_changes_what_passes_from_the_next_batch_on() {
        let (h, go, ack, t) = running("gate | every n=1 | tally name=tail");
        batch(&go, &ack, 100);
        eventually(&h, "tally:tail", 100);
        let a = h.apply(parse("set every n=4"), WAIT).unwrap();
        let old = a.retired.expect("the old instance's report");
        assert_eq!(
            (
                old.label.as_str(),
                old.counters.blocks_in,
                old.counters.blocks_out
            ),
            ("every", 100, 100)
        );
        batch(&go, &ack, 100);
        eventually(&h, "tally:tail", 125); // one in four of the second hundred
                                           // A failed set keeps the running instance (and its count).
        assert!(matches!(
            h.apply(parse("set every n=banana"), WAIT),
            Err(EditError::Build(_))
        ));
        batch(&go, &ack, 100);
        drop(go);
        let r = t.join().unwrap();
        assert_eq!(
            summary(&r, "tally:tail").0,
            150,
            "25 of the last hundred too: the failed set changed nothing"
        );
        let every = r.iter().find(|n| n.label == "every").unwrap();
        assert_eq!(
            (every.counters.blocks_in, every.counters.blocks_out),
            (300, 150),
            "counters go on across a set"
        );
    }

    #[test]
    fn an_edit_the_run_does_not_reach_is_withdrawn_on_timeout() {
        let (h, go, ack, t) = running("gate block=yes | tally name=tail");
        batch(&go, &ack, 10);
        // The gate now waits in pull: no boundary comes until the next batch.
        assert!(matches!(
            h.apply(
                parse("insert after tally:tail tally"),
                Duration::from_millis(50)
            ),
            Err(EditError::Timeout(_))
        ));
        batch(&go, &ack, 10);
        drop(go);
        let r = t.join().unwrap();
        assert!(
            r.iter().all(|n| n.label != "tally"),
            "the withdrawn edit never applied: {:?}",
            r.iter().map(|n| &n.label).collect::<Vec<_>>()
        );
        assert_eq!(summary(&r, "tally:tail").0, 20);
    }

    #[test]
    fn edits_reach_thread_spaces_by_label_and_are_refused_at_channels() {
        let (f, go, ack) = gate();
        let g = lang::parse(
            "gate | pass space=1 | tally name=mid | hold | tally name=tail",
            &resolver(),
        )
        .unwrap();
        let spaces = Spaces::build(&g, &f, 1 << 22, Default::default()).unwrap();
        let h = spaces.edit_handle();
        let h2 = h.clone();
        let t =
            std::thread::spawn(move || spaces.run_with(&AtomicBool::new(false), &h2, &f, |_| {}));
        batch(&go, &ack, 100);
        // pass receives from the channel out of space 0: refused, saying why.
        match h.apply(parse("remove pass"), WAIT) {
            Err(EditError::Refused {
                label,
                why: Refusal::Channel(w),
            }) => assert_eq!((label.as_str(), w), ("pass", "receives from")),
            other => panic!("{other:?}"),
        }
        match h.apply(parse("insert after gate@0 pass"), WAIT) {
            Err(EditError::Refused {
                label,
                why: Refusal::Channel(w),
            }) => assert_eq!((label.as_str(), w), ("gate", "sends into")),
            other => panic!("{other:?}"),
        }
        // The graph of both spaces, joined through their channel.
        let end = std::time::Instant::now() + WAIT;
        while h.graph().len() < 5 {
            assert!(
                std::time::Instant::now() < end,
                "both spaces publish their graphs: {:?}",
                h.graph()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            graph_shape(&h.graph()),
            [
                "gate@0 [gate] source <-  -> pass@1",
                "pass@1 [pass] <- gate@0 -> tally:mid@1",
                "tally:mid@1 [tally] <- pass@1 -> hold@1",
                "hold@1 [hold] <- tally:mid@1 -> tally:tail@1",
                "tally:tail@1 [tally] <- hold@1 -> "
            ]
        );
        assert_eq!(
            h.graph()
                .iter()
                .map(|n| n.space.as_str())
                .collect::<Vec<_>>(),
            ["0", "1", "1", "1", "1"]
        );
        // An arc between spaces would be a channel.
        match h.apply(parse("connect gate tally:mid"), WAIT) {
            Err(EditError::Refused {
                why: Refusal::Spaces(a, b),
                ..
            }) => assert_eq!((a.as_str(), b.as_str()), ("gate@0", "tally:mid@1")),
            other => panic!("{other:?}"),
        }
        match h.apply(parse("branch gate@0 tally"), WAIT) {
            Err(EditError::Refused {
                label,
                why: Refusal::Channel(w),
            }) => assert_eq!((label.as_str(), w), ("gate", "sends into")),
            other => panic!("{other:?}"),
        }
        for text in [
            "connect tally:mid pass",
            "move tally:tail hold pass",
            "disconnect pass tally:mid",
        ] {
            match h.apply(parse(text), WAIT) {
                Err(EditError::Refused {
                    label,
                    why: Refusal::Channel(w),
                }) => assert_eq!((label.as_str(), w), ("pass", "receives from"), "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(matches!(
            h.apply(parse("remove tally:mid@p3"), WAIT),
            Err(EditError::Refused {
                why: Refusal::ProcessSpace(3),
                ..
            })
        ));
        assert!(matches!(
            h.apply(parse("remove tally:mid@7"), WAIT),
            Err(EditError::Refused {
                why: Refusal::NoSpace(_),
                ..
            })
        ));
        // Space 1 has taken in the first hundred (its counters say so): hold has them all.
        eventually(&h, "tally:mid@1", 100);
        // In space 1, found by its label alone; labels come back with their space.
        let a = h
            .apply(parse("insert after tally:mid every n=2"), WAIT)
            .unwrap();
        assert_eq!(a.label, "every@1");
        let a = h.apply(parse("remove hold@1"), WAIT).unwrap();
        assert_eq!(
            (a.label.as_str(), a.flushed),
            ("hold@1", 100),
            "hold's blocks flushed on to the tail"
        );
        let a = h
            .apply(parse("branch tally:mid tally name=side"), WAIT)
            .unwrap();
        assert_eq!(a.label, "tally:side@1");
        assert_eq!(
            graph_shape(&h.graph())[1..],
            [
                "pass@1 [pass] <- gate@0 -> tally:mid@1",
                "tally:mid@1 [tally] <- pass@1 -> every@1,tally:side@1",
                "tally:tail@1 [tally] <- every@1 -> ",
                "every@1 [every n=2] <- tally:mid@1 -> tally:tail@1",
                "tally:side@1 [tally] <- tally:mid@1 -> "
            ]
        );
        batch(&go, &ack, 100);
        drop(go);
        let rep = t.join().unwrap();
        assert!(rep.died.is_none(), "{:?}", rep.died);
        // The run's final table: one row per node, labelled as in one space.
        assert_eq!(
            summary(&rep.nodes, "tally:mid"),
            (200, 200 * SIZE as u64, 0)
        );
        assert_eq!(
            summary(&rep.nodes, "tally:tail"),
            (150, 150 * SIZE as u64, 0),
            "the held hundred, then one in two"
        );
        assert_eq!(
            summary(&rep.nodes, "tally:side"),
            (100, 100 * SIZE as u64, 0),
            "the branch saw the second hundred"
        );
        assert!(
            h.report().iter().any(|n| n.label == "every@1"),
            "the counters snapshot has the new node"
        );
    }

    /// The graph snapshot in short: `label [filter] <- inputs -> outputs`.
    fn graph_shape(g: &[GraphNode]) -> Vec<String> {
        g.iter()
            .map(|n| {
                format!(
                    "{} [{}]{} <- {} -> {}",
                    n.label,
                    n.filter,
                    if n.source { " source" } else { "" },
                    n.inputs.join(","),
                    n.outputs.join(",")
                )
            })
            .collect()
    }

    #[test]
    fn the_graph_shows_live_nodes_and_arcs_through_removed_ones_and_set_values() {
        let (f, _go, _ack) = gate();
        let mut s = build("gate | every n=3 | tally name=t | pass", &f);
        assert_eq!(
            graph_shape(&s.graph()),
            [
                "gate [gate] source <-  -> every",
                "every [every n=3] <- gate -> tally:t",
                "tally:t [tally] <- every -> pass",
                "pass [pass] <- tally:t -> "
            ]
        );
        let g = s.graph();
        assert_eq!(
            (g[1].options.clone(), g[1].space.as_str()),
            (vec![("n".to_string(), "3".to_string())], "0")
        );
        s.edit(&parse("set every n=5"), &f).unwrap();
        s.edit(&parse("remove tally:t"), &f).unwrap();
        // A removed node's arcs show from its inputs to its outputs.
        assert_eq!(
            graph_shape(&s.graph()),
            [
                "gate [gate] source <-  -> every",
                "every [every n=5] <- gate -> pass",
                "pass [pass] <- every -> "
            ]
        );
        // A template: the join and split as the build made them.
        let (f, _go, _ack) = gate();
        let s = build("gate | tally | split | pass + hold | tally name=tail", &f);
        let g = graph_shape(&s.graph());
        assert_eq!(
            g[2], "split [split] <- tally -> pass,hold",
            "the library's split, written by hand"
        );
        assert_eq!(g[5], "join [join mode=all] <- pass,hold -> tally:tail");
    }

    #[test]
    fn graph_edits_rewire_the_space_and_the_graph() {
        let (f, _go, _ack) = gate();
        let mut s = build("gate | tally name=a | pass | tally name=t", &f);
        assert_eq!(
            s.edit(&parse("branch pass tally name=u"), &f)
                .unwrap()
                .label,
            "tally:u"
        );
        assert_eq!(
            s.edit(&parse("connect gate pass"), &f).unwrap().label,
            "pass"
        );
        assert_eq!(
            shape(&s),
            [
                "gate -> [tally:a Default/0, pass Default/1]",
                "tally:a -> [pass Default/0]",
                "pass -> [tally:t Default/0, tally:u Default/0]",
                "tally:t -> []",
                "tally:u -> []"
            ],
            "the new arc takes the next in-arc index; the branch is a leaf"
        );
        s.edit(&parse("remove pass"), &f).unwrap();
        let g = graph_shape(&s.graph());
        assert_eq!(
            g,
            [
                "gate [gate] source <-  -> tally:a,tally:t,tally:u",
                "tally:a [tally] <- gate -> tally:t,tally:u",
                "tally:t [tally] <- gate,tally:a -> ",
                "tally:u [tally] <- gate,tally:a -> "
            ]
        );
        // gate -> pass -> t: pass (removed) carries gate's and a's blocks to t and u, so
        // no one arc is only gate -> t.
        let before = shape(&s);
        match s.edit(&parse("disconnect gate tally:t"), &f) {
            Err(EditError::Refused {
                label,
                why: Refusal::ThroughRemoved(r),
            }) => assert_eq!((label.as_str(), r.as_str()), ("gate -> tally:t", "pass")),
            other => panic!("{other:?}"),
        }
        assert_eq!(shape(&s), before);
        // Moved: u reads from a alone; the arc pass -> u goes, a -> u comes.
        assert_eq!(s.edit(&parse("move tally:u gate tally:t"), &f).unwrap_err().to_string(), "gate -> tally:u: the arc passes through a removed node that carries other arcs too (pass); taking it away would cut those as well");
        assert!(
            matches!(
                s.edit(&parse("connect tally:a tally:u"), &f),
                Err(EditError::Refused {
                    why: Refusal::ArcExists,
                    ..
                })
            ),
            "a -> u is there, through pass"
        );
        assert_eq!(shape(&s), before);
        // Through a removed node with one output: the arc into it is only gate -> t now
        // that u reads elsewhere (after a disconnect of pass's arc to u via a fresh space).
        let (f, _go, _ack) = gate();
        let mut s = build("gate | tally name=a | pass | tally name=t", &f);
        s.edit(&parse("connect gate pass"), &f).unwrap();
        s.edit(&parse("remove pass"), &f).unwrap();
        s.edit(&parse("disconnect gate tally:t"), &f).unwrap();
        assert_eq!(
            shape(&s),
            [
                "gate -> [tally:a Default/0]",
                "tally:a -> [pass Default/0]",
                "-pass -> [tally:t Default/0]",
                "tally:t -> []"
            ],
            "the one arc that carried only gate -> t went"
        );
        s.edit(&parse("move tally:t tally:a gate"), &f).unwrap();
        assert_eq!(
            graph_shape(&s.graph()),
            [
                "gate [gate] source <-  -> tally:a,tally:t",
                "tally:a [tally] <- gate -> ",
                "tally:t [tally] <- gate -> "
            ]
        );
        // The arc cut was a -> pass (the first that carried only a -> t), so nothing flows
        // into the dead pass; its arc to t keeps index 0, and the new plain arc takes 1.
        assert_eq!(
            shape(&s),
            [
                "gate -> [tally:a Default/0, tally:t Default/1]",
                "tally:a -> []",
                "-pass -> [tally:t Default/0]",
                "tally:t -> []"
            ]
        );
        // A direct arc moved keeps its in-arc index.
        let (f, _go, _ack) = gate();
        let mut s = build("gate | tally name=a | pass | tally name=t", &f);
        s.edit(&parse("connect tally:a tally:t"), &f).unwrap();
        s.edit(&parse("move tally:t pass gate"), &f).unwrap();
        assert_eq!(
            shape(&s),
            [
                "gate -> [tally:a Default/0, tally:t Default/0]",
                "tally:a -> [pass Default/0, tally:t Default/1]",
                "pass -> []",
                "tally:t -> []"
            ]
        );
    }

    #[test]
    fn refused_graph_edits_leave_the_space_and_its_graph_exactly_as_they_were() {
        let (f, _go, _ack) = gate();
        let mut s = build("gate | tally | split | pass + hold | tally name=tail", &f);
        let (before, graph) = (shape(&s), s.graph());
        let refused: &[(&str, &str, Refusal)] = &[
            ("branch split pass", "split", Refusal::Split),
            (
                "branch tally gate",
                "tally",
                Refusal::NewSource("gate".into()),
            ),
            (
                "branch tally tally name=tail",
                "tally:tail",
                Refusal::NameTaken("tally:tail".into()),
            ),
            ("connect tally gate", "gate", Refusal::IntoSource),
            ("connect tally join", "join", Refusal::Template),
            ("connect split tally:tail", "split", Refusal::Split),
            ("connect gate tally", "gate -> tally", Refusal::ArcExists),
            (
                "connect tally:tail tally",
                "tally:tail -> tally",
                Refusal::Cycle("tally".into(), "tally:tail".into()),
            ),
            (
                "connect tally tally",
                "tally -> tally",
                Refusal::Cycle("tally".into(), "tally".into()),
            ),
            (
                "connect tally:tail@0 pass@1",
                "tally:tail@0 -> pass@1",
                Refusal::Spaces("tally:tail@0".into(), "pass@1".into()),
            ),
            (
                "disconnect gate tally",
                "gate -> tally",
                Refusal::OnlyInput("tally".into()),
            ),
            (
                "disconnect gate tally:tail",
                "gate -> tally:tail",
                Refusal::NoArc("gate".into(), "tally:tail".into()),
            ),
            ("disconnect hold join", "join", Refusal::Template),
            ("disconnect split pass", "split", Refusal::Split),
            (
                "move tally gate tally:tail",
                "tally:tail -> tally",
                Refusal::Cycle("tally".into(), "tally:tail".into()),
            ),
            // The connect part is fine (tally -> tail), the disconnect part is not.
            (
                "move tally:tail gate tally",
                "gate -> tally:tail",
                Refusal::NoArc("gate".into(), "tally:tail".into()),
            ),
            ("move pass split tally", "split", Refusal::Split),
            ("move join hold tally", "join", Refusal::Template),
            (
                "move tally:tail join join",
                "join -> tally:tail",
                Refusal::ArcExists,
            ),
        ];
        for (text, label, why) in refused {
            match s.edit(&parse(text), &f) {
                Err(EditError::Refused { label: l, why: w }) => {
                    assert_eq!((l.as_str(), &w), (*label, why), "{text}")
                }
                other => panic!("{text}: expected {why:?}, got {other:?}"),
            }
            assert_eq!(shape(&s), before, "{text} changed the space");
            assert_eq!(s.graph(), graph, "{text} changed the graph");
        }
        for text in [
            "connect nosuch tally",
            "disconnect gate nosuch",
            "move tally nosuch gate",
            "branch nosuch pass",
        ] {
            assert!(
                matches!(s.edit(&parse(text), &f), Err(EditError::NoNode { ref label, .. }) if label == "nosuch"),
                "{text}"
            );
        }
        match s.edit(&parse("branch tally every n=banana"), &f) {
            Err(EditError::Build(e)) => assert_eq!(e.label, "every"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            shape(&s),
            before,
            "a branch that fails to build changes nothing"
        );
        // A Unix command with no arc out writes to standard output: nothing reads it.
        let (f, _go, _ack) = gate();
        let mut s = build("gate | tally | cat", &f);
        let before = shape(&s);
        for text in ["branch cat pass", "connect cat tally"] {
            assert!(
                matches!(
                    s.edit(&parse(text), &f),
                    Err(EditError::Refused {
                        why: Refusal::UnixSink,
                        ..
                    })
                ),
                "{text}"
            );
            assert_eq!(shape(&s), before);
        }
    }

    #[test]
    fn a_branch_sees_exactly_what_its_node_emits_after_the_edit_and_feeds_what_is_added_below_it() {
        let (h, go, ack, t) = running("gate | tally name=head | every n=2 | tally name=tail");
        // The graph is published when the run starts.
        let end = std::time::Instant::now() + WAIT;
        while h.graph().is_empty() {
            assert!(std::time::Instant::now() < end, "no graph published");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            graph_shape(&h.graph()),
            [
                "gate [gate] source <-  -> tally:head",
                "tally:head [tally] <- gate -> every",
                "every [every n=2] <- tally:head -> tally:tail",
                "tally:tail [tally] <- every -> "
            ]
        );
        batch(&go, &ack, 100);
        assert_eq!(
            h.apply(parse("branch every tally name=b"), WAIT)
                .unwrap()
                .label,
            "tally:b"
        );
        // Published with the edit, before the answer.
        assert_eq!(h.graph()[2].outputs, ["tally:tail", "tally:b"]);
        batch(&go, &ack, 100);
        eventually(&h, "tally:b", 50);
        // Below the new leaf: its output now goes on.
        assert_eq!(
            h.apply(parse("branch tally:b every n=5"), WAIT)
                .unwrap()
                .label,
            "every#2"
        );
        assert_eq!(
            h.apply(parse("branch every#2 tally name=c"), WAIT)
                .unwrap()
                .label,
            "tally:c"
        );
        batch(&go, &ack, 100);
        drop(go);
        let r = t.join().unwrap();
        assert_eq!(summary(&r, "tally:head"), (300, 300 * SIZE as u64, 0));
        assert_eq!(
            summary(&r, "tally:tail"),
            (150, 150 * SIZE as u64, 0),
            "the old successor got all it got before"
        );
        assert_eq!(
            summary(&r, "tally:b"),
            (100, 100 * SIZE as u64, 0),
            "one in two of the last two hundred, none of the first"
        );
        assert_eq!(
            summary(&r, "tally:c"),
            (10, 10 * SIZE as u64, 0),
            "one in five of what b passed on after the edit"
        );
        let b = r.iter().find(|n| n.label == "tally:b").unwrap();
        assert_eq!(
            (b.counters.blocks_in, b.counters.blocks_out),
            (100, 50),
            "a leaf until every#2 came below it, then it passed on"
        );
    }

    #[test]
    fn connect_disconnect_and_move_change_who_feeds_a_node() {
        let (h, go, ack, t) = running("gate | tally name=a | every n=2 | tally name=j");
        batch(&go, &ack, 100);
        // j gets the gate's blocks besides every's: each even block twice.
        h.apply(parse("connect gate tally:j"), WAIT).unwrap();
        batch(&go, &ack, 100);
        eventually(&h, "tally:j", 50 + 150);
        // Back to one input.
        h.apply(parse("disconnect every tally:j"), WAIT).unwrap();
        batch(&go, &ack, 100);
        eventually(&h, "tally:j", 50 + 150 + 100);
        assert!(matches!(
            h.apply(parse("disconnect gate tally:j"), WAIT),
            Err(EditError::Refused {
                why: Refusal::OnlyInput(_),
                ..
            })
        ));
        // Its only input moves: j reads every's output again.
        assert_eq!(
            h.apply(parse("move tally:j gate every"), WAIT)
                .unwrap()
                .label,
            "tally:j"
        );
        batch(&go, &ack, 100);
        drop(go);
        let r = t.join().unwrap();
        let (blocks, bytes, back) = summary(&r, "tally:j");
        assert_eq!((blocks, bytes), (50 + 150 + 100 + 50, 350 * SIZE as u64));
        // In the one batch that came both ways, every's half first (arc order), then the
        // gate's whole hundred: the sequence went back once, and only then.
        assert_eq!(back, 1);
        assert_eq!(summary(&r, "tally:a").0, 400);
        let every = r.iter().find(|n| n.label == "every").unwrap();
        // One in two throughout; but while it was a leaf (after the disconnect, until the
        // move), its output ended there, and a sink counts none.
        assert_eq!(
            (every.counters.blocks_in, every.counters.blocks_out),
            (400, 150)
        );
    }

    #[test]
    fn removing_a_leaf_ends_its_input_arcs_there() {
        let (h, go, ack, t) = running("gate | tally name=head | hold");
        batch(&go, &ack, 100);
        let a = h.apply(parse("remove hold"), WAIT).unwrap();
        assert_eq!(
            (a.label.as_str(), a.flushed),
            ("hold", 100),
            "what the leaf held was flushed, to nowhere"
        );
        assert_eq!(
            graph_shape(&h.graph()),
            [
                "gate [gate] source <-  -> tally:head",
                "tally:head [tally] <- gate -> "
            ]
        );
        batch(&go, &ack, 100);
        drop(go);
        let r = t.join().unwrap();
        assert_eq!(
            r.iter().map(|n| n.label.as_str()).collect::<Vec<_>>(),
            ["gate", "tally:head"]
        );
        assert_eq!(
            summary(&r, "tally:head"),
            (200, 200 * SIZE as u64, 0),
            "head goes on counting into the removed leaf"
        );
    }
}
