//! A space's nodes: what one is made of ([`RtNode`], made by [`instantiate`] alone), its
//! counters and arcs, and what it reports.

use super::*;
use crate::builtin::{JoinFilter, SplitFilter, UnixProc};
use crate::filter::{Args, Batch, Ctx, Filter};
use lang::{Node, NodeKind, Selector};

/// Per-filter counters. They add up: `blocks_out = blocks_in - drops + made - ended`.
///
/// - `blocks_in`: blocks the filter was handed (the sum of what its in-arcs carried).
/// - `blocks_out`: distinct blocks it passed on, each counted once however many arcs it
///   went down (a stream shared by two consumers is not counted twice; the arcs carry
///   their own counts, [`ArcReport`]).
/// - `drops`: blocks it emitted that no out-arc's selector admits (class 0 on a plain
///   `|`), and blocks lost to a runaway loop.
/// - `made`: blocks it emitted beyond those it was handed: a source's every block, and a
///   filter that emits more than it takes in a batch (`tcpstream`'s reassembled runs, a
///   flush at the end).
/// - `ended`: blocks it took and did not emit: a sink's input, blocks a filter merges or
///   holds. Per batch, the difference between what it emitted and what it took is `made`
///   or `ended`, never both.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub blocks_in: u64,
    pub bytes_in: u64,
    pub blocks_out: u64,
    pub bytes_out: u64,
    pub drops: u64,
    pub made: u64,
    pub ended: u64,
    pub nanos: u64,
    /// Sources only: blocks lost before the node could take them, so far (a capture
    /// socket's ring was full: the kernel's drops; see `Filter::lost`). Not part of the
    /// sum above: they never entered.
    pub lost: u64,
}

/// Blocks and bytes an arc carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Carried {
    pub blocks: u64,
    pub bytes: u64,
}

pub(crate) struct Arc_ {
    pub(crate) to: usize,
    pub(crate) sel: Selector,
    /// This arc's index among the in-arcs of `to` (what `Batch::from` says).
    pub(crate) in_index: usize,
    /// What went down this arc (kept with the sending node's arc when a move rewires it).
    pub(crate) carried: Carried,
}

/// Where an arc of a node leads once the run's own nodes (channel endpoints, the
/// pass-throughs moves and edits leave) are looked through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArcTarget {
    /// A node of this space, by label.
    Node(String),
    /// Channel `k` to another space (resolved by the run's report to the node behind it).
    Channel(usize),
    /// An internal sink (a prefix-sharing `__publish`): not a node of the user's.
    Internal,
}

/// One arc out of a node as the report gives it: where it leads, what it carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArcReport {
    pub from: String,
    pub to: ArcTarget,
    pub carried: Carried,
    /// The channels it passes through, from one space to another (none: a call within
    /// one space), as the spaces' reports are joined ([`crate::spaces::SpacesReport`]).
    pub rings: Vec<usize>,
}

pub(crate) struct RtNode {
    pub(crate) label: String,
    /// The request-graph node this was built from (what live edits re-make it from, and
    /// what new labels are counted by).
    pub(crate) spec: Node,
    pub(crate) filter: Box<dyn Filter>,
    /// The filter's session state (runtime-owned, see `Ctx::sessions`).
    pub(crate) sessions: Option<Box<dyn std::any::Any + Send>>,
    pub(crate) out: Vec<Arc_>,
    pub(crate) source: bool,
    /// Route by class to the k-th arc (split), instead of multicasting.
    pub(crate) routes_by_class: bool,
    /// The filter is a classifier (see `Space::classify_run`).
    pub(crate) classifier: bool,
    /// Removed by a live edit: a pass-through the report leaves out (see `crate::edit`).
    pub(crate) removed: bool,
    pub(crate) done: bool,
    pub(crate) c: Counters,
    /// Time spent, in clock ticks (`c.nanos` is filled from it in reports).
    pub(crate) ticks: u64,
    /// Its taps and the classes seen leaving it (`crate::tap`).
    pub(crate) watch: crate::tap::Watch,
}

impl RtNode {
    /// A node of `spec` labelled `label`, running what [`instantiate`] made, with the arcs
    /// `out`: the one place a node is put together (the build, live edits, moves). Its
    /// exported stream, if `made` has one, is a node of its own, the caller's to hang on
    /// it ([`Space::add_made`], [`Space::hang_export`]).
    pub(crate) fn new(label: String, spec: Node, made: Made, out: Vec<Arc_>) -> RtNode {
        let Made {
            mut filter,
            source,
            routes_by_class,
            export,
        } = made;
        debug_assert!(
            export.is_none(),
            "{label}: its exported stream was not hung"
        );
        let classifier = !source && filter.as_classifier().is_some();
        RtNode {
            label,
            spec,
            filter,
            sessions: None,
            out,
            source,
            routes_by_class,
            classifier,
            removed: false,
            done: false,
            c: Counters::default(),
            ticks: 0,
            watch: Default::default(),
        }
    }

    /// A pass-through in place of a moved filter, or carrying a selector (see
    /// [`PassThrough`]).
    /// One of the run's own nodes that stand for no filter of the user's and are left out
    /// of the counters: a prefix-sharing `__publish`, an observer (a tap,
    /// `crate::tap::TapNode`; an exported stream, `crate::export::ExportNode`).
    /// (Channel endpoints are told apart by [`endpoint_of`].)
    pub(crate) fn internal(&self) -> bool {
        self.filter.observes()
            || matches!(&self.spec.kind, NodeKind::Filter { filter, .. } if filter == PUBLISH)
    }

    /// One of the run's own nodes (a tap, an exported stream), running `filter`: its spec
    /// names the filter `name` with `options` (what the graph shows), and it has no arcs.
    pub(crate) fn own(
        label: String,
        name: &str,
        options: Vec<(String, String)>,
        filter: Box<dyn Filter>,
    ) -> RtNode {
        let spec = Node {
            id: 0,
            kind: NodeKind::Filter {
                filter: name.into(),
                params: vec![],
                options,
                place: Default::default(),
            },
            span: lang::Span::default(),
            hints: vec![],
            name: None,
        };
        let made = Made {
            filter,
            source: false,
            routes_by_class: false,
            export: None,
        };
        RtNode::new(label, spec, made, Vec::new())
    }

    pub(crate) fn pass_through(label: String, spec: Node, out: Vec<Arc_>) -> RtNode {
        let made = Made {
            filter: Box::new(PassThrough),
            source: false,
            routes_by_class: false,
            export: None,
        };
        RtNode {
            removed: true,
            ..RtNode::new(label, spec, made, out)
        }
    }

    /// Its report, with `nanos` of time spent.
    pub(crate) fn report(&self, nanos: u64) -> NodeReport {
        NodeReport {
            label: self.label.clone(),
            counters: Counters {
                nanos,
                lost: self.filter.lost(),
                ..self.c
            },
            summary: self.filter.summary(),
            classes: self.watch.classes(),
            space: String::new(),
        }
    }
}

/// What a removed node, and the node a moved filter leaves behind, become: blocks pass
/// with their classes unchanged; reports leave it out.
pub(crate) struct PassThrough;

impl Filter for PassThrough {
    fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
}

/// Name of the synthetic endpoint filters in per-space graphs.
pub(crate) const EGRESS: &str = "__egress";
pub(crate) const INGRESS: &str = "__ingress";
/// Prefix sharing between runs: `__publish key=K` offers its input stream under K,
/// `__subscribe key=K` is a source reading the stream a live run publishes under K
/// (see `channel::publish`, `control::prefix`).
pub const PUBLISH: &str = "__publish";
pub const SUBSCRIBE: &str = "__subscribe";

/// The channel an endpoint node serves: (egress?, number).
pub(crate) fn endpoint_of(n: &RtNode) -> Option<(bool, usize)> {
    let egress = n.label.starts_with(EGRESS);
    if !egress && !n.label.starts_with(INGRESS) {
        return None;
    }
    match &n.spec.kind {
        NodeKind::Filter { options, .. } => options
            .iter()
            .find(|(k, _)| k == "ch")
            .and_then(|(_, v)| v.parse().ok())
            .map(|ch| (egress, ch)),
        _ => None,
    }
}

/// What instantiating one node gives: its filter, whether it is a source, whether it
/// routes by branch (a split), and its exported stream (a node of its own once hung on
/// it, [`Space::add_made`]).
pub(crate) struct Made {
    pub(crate) filter: Box<dyn Filter>,
    pub(crate) source: bool,
    pub(crate) routes_by_class: bool,
    pub(crate) export: Option<crate::export::ExportNode>,
}

/// Instantiate node `n` labelled `label`, with `in_degree` arcs into it; `sink`: no arc
/// leaves it (a Unix sink writes to our standard output). The build and live edits both
/// make nodes here, so an inserted filter is made exactly as a built one.
pub(crate) fn instantiate(
    n: &Node,
    label: &str,
    factory: &dyn Factory,
    in_degree: usize,
    sink: bool,
) -> Result<Made, BuildError> {
    let base = base_name(n);
    let err = |kind: BuildErrorKind| BuildError::new(label.to_string(), span_of(n), kind);
    let (filter, source, routes): (Box<dyn Filter>, bool, bool) = match &n.kind {
        NodeKind::Filter {
            filter,
            params,
            options,
            place,
        } => {
            let args = Args::new(filter, params.clone(), options.clone()).with_place(place.clone());
            // The library's `split` is the template's split node written by hand:
            // it too sends each block down exactly one arc.
            (
                factory
                    .make(filter, &args)
                    .map_err(|e| err(without_name(e, &base).into()))?,
                factory.is_source(filter),
                filter == "split",
            )
        }
        NodeKind::Unix { argv, .. } => {
            let source = in_degree == 0;
            (
                Box::new(
                    UnixProc::spawn(argv, source, sink)
                        .map_err(|e| err(BuildErrorKind::Unix(e)))?,
                ),
                source,
                false,
            )
        }
        NodeKind::Join { mode } => (Box::new(JoinFilter::new(*mode, in_degree)), false, false),
        NodeKind::Split { mode, ways } => (Box::new(SplitFilter::new(*mode, *ways)), false, true),
    };
    let export = match &n.kind {
        NodeKind::Filter { options, .. }
            if options
                .iter()
                .any(|(k, v)| (k == "export" || k == "exportdata") && v == "yes") =>
        {
            Some(
                export_stream(
                    n.name.as_deref().unwrap_or(label),
                    size_option(n, factory),
                    mode_option(options),
                )
                .map_err(|e| err(BuildErrorKind::Export(e)))?,
            )
        }
        _ => None,
    };
    Ok(Made {
        filter,
        source,
        routes_by_class: routes,
        export,
    })
}

/// A run's outcome per filter.
#[derive(Debug, Clone)]
pub struct NodeReport {
    pub label: String,
    pub counters: Counters,
    pub summary: Option<String>,
    /// Classes seen leaving the node, ascending (sampled; see `tap::Watch`).
    pub classes: Vec<u16>,
    /// The spaces it ran in (`0`, `1,2`, `p3`; empty: not known, a space's own report).
    pub space: String,
}

pub use crate::error::{BuildError, BuildErrorKind, Rollback};

pub use lang::label::base_name;

/// A node's span in the pipeline text, if it has one (nodes the build makes up, such as
/// channel endpoints, carry the default empty span).
pub fn span_of(n: &Node) -> Option<lang::Span> {
    (n.span != lang::Span::default()).then_some(n.span)
}

/// A filter's error without its name in front: filters whose messages are still words
/// (`FilterError::Rule`) may start them with `NAME: `, which the label already says.
pub(super) fn without_name(e: crate::FilterError, base: &str) -> crate::FilterError {
    match e {
        crate::FilterError::Rule(why) => {
            match why.strip_prefix(base).and_then(|r| r.strip_prefix(": ")) {
                Some(rest) => crate::FilterError::Rule(rest.to_string()),
                None => crate::FilterError::Rule(why),
            }
        }
        e => e,
    }
}

pub use crate::export::export_name;
use crate::export::export_stream;

/// A node's `size=` control option in bytes (K/M/G suffixes), if given and the filter
/// does not declare a `size` of its own (see [`Factory::declares`]).
pub fn size_option(n: &Node, factory: &dyn Factory) -> Option<u64> {
    let NodeKind::Filter {
        filter, options, ..
    } = &n.kind
    else {
        return None;
    };
    if factory.declares(filter, "size") {
        return None;
    }
    options
        .iter()
        .find(|(k, _)| k == "size")
        .and_then(|(_, v)| crate::filter::parse_size(v))
}

/// A node's `mode=` control option (octal permission bits), if given as one. A filter's
/// own `mode` (join, split) is not octal and is left to it.
pub fn mode_option(options: &[(String, String)]) -> Option<u32> {
    options
        .iter()
        .find(|(k, _)| k == "mode")
        .and_then(|(_, v)| u32::from_str_radix(v, 8).ok())
        .filter(|m| *m <= 0o7777)
}
