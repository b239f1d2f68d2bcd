//! One execution space: the request graph instantiated as filters and arcs, scheduled
//! depth-first by plain function calls (thesis 5.2.1) over batches of tags.
//!
//! A source's batch enters its out-arcs; each arc forwards only the tags whose class its
//! selector admits (a port multicasts to every arc: no copy, only tags); each filter handles
//! the whole batch before it moves on. Sinks end the walk. Runs of classifiers share one
//! resolution of the batch's tags to bytes (`Space::classify_run`). Per filter the runtime
//! counts blocks and bytes in and out, drops, and time spent.

use crate::builtin::{JoinFilter, SplitFilter, UnixProc};
use crate::filter::{Args, Batch, Ctx, Filter, Replication};
use crate::store::Store;
use lang::{Graph, Node, NodeKind, Selector};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Blocks per batch pulled from a source.
pub const BATCH: usize = 256;
/// Arcs a block may traverse in one walk before the runtime calls it a runaway loop.
const MAX_DEPTH: usize = 4096;
/// How long a space goes on reading its channels from other spaces after an interrupt,
/// waiting for their producers to stop and close (what they captured is still counted).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// How often the loop calls its `tick` (progress, the counters an edit handle shows),
/// also the longest a space sleeps on its readiness handle.
const TICK: Duration = Duration::from_millis(100);

/// Builds filter instances by name (implemented by the filter library).
pub trait Factory {
    fn make(&self, name: &str, args: &Args) -> Result<Box<dyn Filter>, crate::FilterError>;
    fn is_source(&self, name: &str) -> bool;
    /// Whether and how the filter may be replicated (see [`Replication`]). The default,
    /// for factories that do not say, is per block.
    fn replication(&self, _name: &str) -> Replication {
        Replication::Blocks
    }
    /// Whether the filter keeps per-session state (its replicas need a hash split on the
    /// class, so each session stays on one replica).
    fn keeps_sessions(&self, name: &str) -> bool {
        self.replication(name) == Replication::Sessions
    }
    /// Whether the order of the blocks a filter receives can change what it does or
    /// writes. False only for filters that count (their totals are the same in any
    /// order); the default is true.
    fn order_matters(&self, _name: &str) -> bool {
        true
    }
    /// Whether the filter holds blocks across batches (reorders them: `tcpstream`'s
    /// early segments). Such a filter cannot move to another space while the run runs:
    /// the tags it holds name the old space's memory (see `crate::migrate`).
    fn keeps_blocks(&self, _name: &str) -> bool {
        false
    }
}

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
}

pub(crate) struct RtNode {
    pub(crate) label: String,
    /// The request-graph node this was built from (what live edits re-make it from, and
    /// what new labels are counted by).
    pub(crate) spec: Node,
    pub(crate) filter: Box<dyn Filter>,
    /// `export=yes`: the node's output also goes to a named IBuf other processes can read.
    pub(crate) export: Option<beltway::IbufWriter>,
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
    /// Its report, with `nanos` of time spent.
    pub(crate) fn report(&self, nanos: u64) -> NodeReport {
        NodeReport {
            label: self.label.clone(),
            counters: Counters { nanos, ..self.c },
            summary: self.filter.summary(),
            classes: self.watch.classes(),
            space: String::new(),
        }
    }
}

/// What instantiating one node gives: its filter, whether it is a source, whether it
/// routes by branch (a split), and its exported stream.
pub(crate) struct Made {
    pub(crate) filter: Box<dyn Filter>,
    pub(crate) source: bool,
    pub(crate) routes_by_class: bool,
    pub(crate) export: Option<beltway::IbufWriter>,
}

/// A node's label: `base:name` for a named node, else `base` for the first node of its
/// base name and `base#k` for the k-th (the count includes named nodes).
pub(crate) fn label_of(base: &str, name: Option<&str>, k: usize) -> String {
    match name {
        Some(name) => format!("{base}:{name}"),
        None if k > 1 => format!("{base}#{k}"),
        None => base.to_string(),
    }
}

/// The labels of a run's nodes, placement-independent (see ARCHITECTURE.md, "Counters"):
/// the nodes the user wrote are labelled as [`label_of`] labels them in one space
/// (`count`, `count#2`, `count:tail`), counted over the whole graph; a node the rewrites
/// made for one of them (a copy of a replicated filter or of a capture engine's filter,
/// the split and join around replicas or engines) says whose it is: `deflate~2` (the
/// second copy), `deflate~split`, `bpf~join`. The report folds them into their user's
/// node ([`fold_internal`]). A derived node shares the span of the node it was made for
/// and comes after it (copies and template nodes are appended).
pub fn run_labels(g: &Graph) -> Vec<String> {
    let mut labels: Vec<String> = Vec::with_capacity(g.nodes.len());
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut copies = std::collections::HashMap::<usize, usize>::new();
    for n in &g.nodes {
        let derived_of = (n.span != lang::Span::default())
            .then(|| {
                g.nodes[..n.id.min(g.nodes.len())].iter().find(|m| {
                    m.span == n.span
                        && matches!(m.kind, NodeKind::Filter { .. } | NodeKind::Unix { .. })
                        && (base_name(m) == base_name(n)
                            || matches!(n.kind, NodeKind::Split { .. } | NodeKind::Join { .. }))
                })
            })
            .flatten();
        let label = match derived_of {
            Some(m) => {
                let role = match n.kind {
                    NodeKind::Split { .. } => "split".to_string(),
                    NodeKind::Join { .. } => "join".to_string(),
                    _ => {
                        let k = copies.entry(m.id).or_insert(1);
                        *k += 1;
                        k.to_string()
                    }
                };
                format!("{}~{role}", labels[m.id])
            }
            None => {
                // A shared prefix's subscription stands for the prefix's last node
                // (`__subscribe key=K as=tcp`, `control::prefix`).
                let base = match &n.kind {
                    NodeKind::Filter { filter, options, .. } if filter == crate::spaces::SUBSCRIBE => options
                        .iter()
                        .find(|(k, _)| k == "as")
                        .map_or_else(|| base_name(n), |(_, v)| v.clone()),
                    _ => base_name(n),
                };
                let k = seen.entry(base.clone()).or_insert(0);
                *k += 1;
                // A replicated named node's first copy is `NAME.0`: its user's name.
                let name = n.name.as_deref().map(|x| x.strip_suffix(".0").unwrap_or(x));
                label_of(&base, name, *k)
            }
        };
        labels.push(label);
    }
    labels
}

/// The nodes the user wrote, in the order of `labels` ([`run_labels`] of a run's graph:
/// the order the pipeline reads, the order of a run in one space), each once: the
/// internal nodes (`deflate~2`, `bpf~join`, `__publish`) left out.
pub fn user_order(labels: &[String]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for l in labels {
        if l.contains('~') || l.starts_with("__") || v.contains(l) {
            continue;
        }
        v.push(l.clone());
    }
    v
}

/// `rows` (one per user node, [`fold_internal`]) in `order` ([`user_order`]): a row
/// `order` does not list (a node an edit inserted) follows the row an arc into it comes
/// from (`arcs`, folded), else the row it followed in `rows`. An empty `order` leaves
/// `rows` as they are.
pub fn in_order(rows: Vec<NodeReport>, arcs: &[ArcReport], order: &[String]) -> Vec<NodeReport> {
    if order.is_empty() {
        return rows;
    }
    // Sort keys, compared as sequences: a listed row's place; an unlisted row's input's
    // key and one more step.
    let mut keys: Vec<Option<Vec<usize>>> = rows
        .iter()
        .map(|r| order.iter().position(|l| *l == r.label).map(|i| vec![i + 1]))
        .collect();
    let input = |r: &NodeReport| -> Option<usize> {
        arcs.iter()
            .filter(|a| a.to == ArcTarget::Node(r.label.clone()))
            .find_map(|a| rows.iter().position(|x| x.label == a.from))
    };
    for _ in 0..rows.len() {
        for k in 0..rows.len() {
            if keys[k].is_none() {
                if let Some(mut key) = input(&rows[k]).and_then(|i| keys[i].clone()) {
                    key.push(1);
                    keys[k] = Some(key);
                }
            }
        }
    }
    let mut prev = vec![0];
    let mut keyed: Vec<(Vec<usize>, NodeReport)> = rows
        .into_iter()
        .zip(keys)
        .map(|(r, k)| {
            let k = k.unwrap_or_else(|| {
                let mut p = prev.clone();
                p.push(1);
                p
            });
            prev = k.clone();
            (k, r)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, r)| r).collect()
}

/// The user's node a report label stands for: the label without its space (`@1`, `@p2`)
/// and without what says which internal node of it it is (`~2`, `~split`, a move's
/// pass-through `~0`), and the space.
pub fn user_label(label: &str) -> (&str, &str) {
    let (l, space) = match label.rfind('@') {
        Some(at) if at > 0 => (&label[..at], &label[at + 1..]),
        _ => (label, ""),
    };
    (l.split('~').next().unwrap_or(l), space)
}

/// Fold the rows of a run's internal nodes into the node the user wrote ([`run_labels`],
/// [`user_label`]): one row per user node, in the order of the first row, labelled as in
/// one space with the spaces it ran in (`1,2`). Its counters are the sums of its members'
/// minus what went down the arcs among them (a replica's split to the copies, the copies
/// to the join): blocks in = what arcs from other nodes carried into it, blocks out = what
/// left it, and drops, made, ended the members' sums, so every row still adds up. A
/// join's made and ended that cancel (blocks it held and then let go) are netted. Arcs
/// are relabelled and summed per pair of user nodes; arcs among one node's members drop.
pub fn fold_internal(nodes: &[NodeReport], arcs: &[ArcReport]) -> (Vec<NodeReport>, Vec<ArcReport>) {
    let user = |l: &str| user_label(l).0.to_string();
    let mut out: Vec<NodeReport> = Vec::new();
    let mut index = std::collections::HashMap::<String, usize>::new();
    for n in nodes {
        let (u, space) = user_label(&n.label);
        let u = u.to_string();
        let mut c = n.counters;
        // A line an internal node wrote (`__subscribe: 10 blocks received, ...`) is said
        // by the user's node it stands for (`bpf: 10 blocks received, ...`).
        let summary = n.summary.as_deref().map(|s| {
            s.lines()
                .map(|l| match l.split_once(": ") {
                    Some((head, rest)) if head.starts_with("__") && !head.contains(' ') => format!("{u}: {rest}"),
                    _ => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        });
        // The split and join around copies run where the stream is, not the user's filter.
        let around = n.label.contains("~join") || n.label.contains("~split");
        let space = if around { "" } else { space };
        if around {
            let both = c.made.min(c.ended);
            c.made -= both;
            c.ended -= both;
        }
        match index.get(&u) {
            Some(&i) => {
                let r = &mut out[i];
                let a = &mut r.counters;
                a.blocks_in += c.blocks_in;
                a.bytes_in += c.bytes_in;
                a.blocks_out += c.blocks_out;
                a.bytes_out += c.bytes_out;
                a.drops += c.drops;
                a.made += c.made;
                a.ended += c.ended;
                a.nanos += c.nanos;
                if !space.is_empty() && !r.space.split(',').any(|s| s == space) {
                    r.space = if r.space.is_empty() { space.to_string() } else { format!("{},{space}", r.space) };
                }
                // Each copy's own summary (a capture engine's socket statistics) is kept,
                // one line each.
                match (&mut r.summary, &summary) {
                    (None, s) => r.summary = s.clone(),
                    (Some(a), Some(b)) if !a.lines().any(|l| l == b) => *a = format!("{a}\n{b}"),
                    _ => {}
                }
                for k in &n.classes {
                    if !r.classes.contains(k) {
                        r.classes.push(*k);
                    }
                }
                r.classes.sort_unstable();
            }
            None => {
                index.insert(u.clone(), out.len());
                out.push(NodeReport {
                    label: u,
                    counters: c,
                    summary,
                    classes: n.classes.clone(),
                    space: if space.is_empty() && !around { n.space.clone() } else { space.to_string() },
                });
            }
        }
    }
    let mut folded: Vec<ArcReport> = Vec::new();
    for a in arcs {
        let from = user(&a.from);
        let to = match &a.to {
            ArcTarget::Node(l) => ArcTarget::Node(user(l)),
            t => t.clone(),
        };
        if to == ArcTarget::Node(from.clone()) {
            // Among one node's members: neither into nor out of it.
            if let Some(&i) = index.get(&from) {
                let c = &mut out[i].counters;
                c.blocks_in = c.blocks_in.saturating_sub(a.carried.blocks);
                c.bytes_in = c.bytes_in.saturating_sub(a.carried.bytes);
                c.blocks_out = c.blocks_out.saturating_sub(a.carried.blocks);
                c.bytes_out = c.bytes_out.saturating_sub(a.carried.bytes);
            }
            continue;
        }
        match folded.iter_mut().find(|b| b.from == from && b.to == to) {
            Some(b) => {
                b.carried.blocks += a.carried.blocks;
                b.carried.bytes += a.carried.bytes;
            }
            None => folded.push(ArcReport {
                from,
                to,
                carried: a.carried,
            }),
        }
    }
    (out, folded)
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
                    size_option(options),
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

/// An empty vector of slices with `v`'s allocation, for slices of another lifetime (the
/// classifier path resolves each batch into one without allocating). Collecting a vector's
/// own `into_iter` reuses its allocation when the element layout is the same.
fn recycle<'a, 'b>(mut v: Vec<&'a [u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter()
        .map(|_| -> &'b [u8] { unreachable!("the vector is empty") })
        .collect()
}

/// Charge the ticks since the `last` reading to `ticks`, and read anew.
#[inline]
fn charge_to(clock: &quanta::Clock, last: &mut u64, ticks: &mut u64) {
    let now = clock.raw();
    *ticks += now.wrapping_sub(*last);
    *last = now;
}

/// Keep the tags whose class `admits` accepts, with their resolved bytes and `shared`
/// flags in step; returns the bytes kept.
fn retain_resolved(batch: &mut Batch, data: &mut Vec<&[u8]>, admits: impl Fn(u16) -> bool) -> u64 {
    let mut j = 0;
    let mut bytes = 0;
    for i in 0..batch.tags.len() {
        let t = batch.tags[i];
        if admits(t.class) {
            bytes += t.len as u64;
            batch.tags[j] = t;
            batch.shared[j] = batch.shared[i];
            data[j] = data[i];
            j += 1;
        }
    }
    batch.tags.truncate(j);
    batch.shared.truncate(j);
    data.truncate(j);
    bytes
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

/// A node's base name, the filter it runs (`strip`, `join`, a Unix command's program):
/// what its label is made of (`strip#2`, `count:c`) and what messages name it by.
pub fn base_name(n: &Node) -> String {
    match &n.kind {
        NodeKind::Filter { filter, .. } => filter.clone(),
        NodeKind::Unix { argv, .. } => argv.first().cloned().unwrap_or_default(),
        NodeKind::Join { .. } => "join".into(),
        NodeKind::Split { .. } => "split".into(),
    }
}

/// A node's span in the pipeline text, if it has one (nodes the build makes up, such as
/// channel endpoints, carry the default empty span).
pub fn span_of(n: &Node) -> Option<lang::Span> {
    (n.span != lang::Span::default()).then_some(n.span)
}

/// A filter's error without its name in front: filters whose messages are still words
/// (`FilterError::Rule`) may start them with `NAME: `, which the label already says.
fn without_name(e: crate::FilterError, base: &str) -> crate::FilterError {
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

/// Name under /dev/shm of a node's exported stream: `streamline.NAME` (tags, an IBuf) and
/// `streamline.NAME.data` (the data its tags point to).
pub fn export_name(node: &str) -> String {
    format!("streamline.{node}")
}

/// Create the named IBuf (and its DBuf) for an exported stream. A space's own data lives
/// in private memory, so exported blocks are written through into the shared DBuf once;
/// readers in other processes map both by name (`beltway::IbufReader`). Lossless: a reader
/// that stops reading holds the pipeline back, like a Unix pipe.
///
/// `size=` (thesis Table 3.2) sets the data ring's bytes (default 16 MiB) and `mode=` the
/// permission bits of both rings (default 0644).
fn export_stream(
    node: &str,
    size: Option<u64>,
    mode: Option<u32>,
) -> beltway::Result<beltway::IbufWriter> {
    use beltway::{Layout, RingConfig, Writer};
    let name = export_name(node).replace(['/', ' '], "_");
    let mode = mode.unwrap_or(0o644);
    let bytes = size.map_or(16 << 20, |s| (s as usize).next_power_of_two().max(1 << 16));
    let tags = Writer::create_named(
        &name,
        RingConfig {
            mode,
            ..RingConfig::bytes(1 << 20).layout(Layout::Tags)
        },
    )?;
    let data = Writer::create_named(
        &format!("{name}.data"),
        RingConfig {
            mode,
            buf_id: 1,
            ..RingConfig::bytes(bytes)
        },
    )?;
    beltway::IbufWriter::new(tags)?.with_default(data)
}

/// A node's `size=` control option in bytes (K/M/G suffixes), if given.
pub fn size_option(options: &[(String, String)]) -> Option<u64> {
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

/// A graph instantiated in one space.
pub struct Space {
    pub(crate) nodes: Vec<RtNode>,
    store: Store,
    warnings: Vec<String>,
    stop: crate::filter::Stop,
    names: Vec<(String, u16)>,
    /// The allocation of the classifier path's resolved batch, kept between batches.
    spare: Vec<&'static [u8]>,
    /// A batch that reached its end, kept for the next source batch (no allocation per batch).
    spare_batch: Option<Batch>,
    /// Time per filter: the TSC (through `quanta`, ~10 ns a reading here against ~21 ns
    /// for `Instant::now`), read once per filter a batch passes. `last` is the last
    /// reading; the time since then is charged to the filter that just ran (so the moving
    /// of its input batch to it counts as its time).
    clock: quanta::Clock,
    last: u64,
    /// `--chaos`: random source batch sizes and random moves of filters across this
    /// space's channels at batch boundaries (see `crate::migrate`).
    pub(crate) chaos: Option<crate::migrate::Chaos>,
    /// The labels the run's other spaces give their nodes now (set with each edit by
    /// `EditHandle::apply`): a node an edit makes here takes none of them, so each label
    /// names one node of the whole run (the table folds rows by label).
    pub(crate) elsewhere: Vec<String>,
    /// The run loop has ended (its last `tick` call says so: a process space sends its
    /// counters then, whenever it last did).
    pub(crate) ending: bool,
    /// What the space sleeps on when a round of its loop found nothing (made when the
    /// loop starts; see [`crate::readiness`]).
    ready: Option<crate::readiness::Readiness>,
}

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
            let Made {
                mut filter,
                source,
                routes_by_class,
                export,
            } = instantiate(n, &label, factory, in_degree(n.id), sink)?;
            let classifier = !source && filter.as_classifier().is_some();
            nodes.push(RtNode {
                label,
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
        Ok(Space {
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
        })
    }

    /// Named classes for `|name` selectors.
    pub fn set_class_names(&mut self, names: Vec<(String, u16)>) {
        self.names = names;
    }

    pub fn store(&mut self) -> &mut Store {
        &mut self.store
    }

    /// Run `f` with node `i`'s filter and a context (disjoint borrows).
    pub(crate) fn with_filter<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut dyn Filter, &mut Ctx<'_>) -> R,
    ) -> R {
        let Space {
            nodes,
            store,
            warnings,
            stop,
            ..
        } = self;
        let node = &mut nodes[i];
        let mut cx = Ctx {
            store,
            name: &node.label,
            sessions: &mut node.sessions,
            warnings,
            stop,
        };
        f(node.filter.as_mut(), &mut cx)
    }

    /// Push a batch into node `i` (run its filter, then route).
    /// `bytes` is the batch's byte count, known to the caller from its routing pass.
    fn push(&mut self, i: usize, mut batch: Batch, depth: usize, bytes: u64, from: usize) {
        batch.from = from;
        if depth > MAX_DEPTH {
            let l = self.nodes[i].label.clone();
            self.warnings.push(format!("{l}: blocks went round a loop more than {MAX_DEPTH} times; dropped (a loop without a bounding `for`?)"));
            let c = &mut self.nodes[i].c;
            c.blocks_in += batch.len() as u64;
            c.bytes_in += bytes;
            c.drops += batch.len() as u64;
            return;
        }
        if self.nodes[i].classifier {
            if let Some((last, batch, depth)) = self.classify_run(i, batch, depth, bytes) {
                self.route(last, batch, depth);
            }
            return;
        }
        self.process_one(i, batch, depth, bytes);
    }

    /// Node `i`'s filter processes the batch (the general path), then the batch is routed.
    fn process_one(&mut self, i: usize, mut batch: Batch, depth: usize, bytes: u64) {
        {
            let c = &mut self.nodes[i].c;
            c.blocks_in += batch.len() as u64;
            c.bytes_in += bytes;
        }
        let took = batch.len();
        self.with_filter(i, |f, cx| f.process(cx, &mut batch));
        self.charge(i);
        let c = &mut self.nodes[i].c;
        match batch.len().cmp(&took) {
            std::cmp::Ordering::Greater => c.made += (batch.len() - took) as u64,
            std::cmp::Ordering::Less => c.ended += (took - batch.len()) as u64,
            std::cmp::Ordering::Equal => {}
        }
        self.route(i, batch, depth);
    }

    /// The classifier fast path. A batch entering classifier `i` is resolved once (every
    /// tag to its bytes); then `i` and the classifiers after it, as long as each is joined
    /// to the next by its only arc, each make one tight pass over the resolved batch
    /// ([`ClassifyBatch`]), and between two of them the arc's selector drops what it does
    /// not admit from tags and resolved bytes alike. Function calls between filters in
    /// one space, as in the thesis (5.2.1), with the bounds checks and lookups of turning
    /// a tag into bytes paid once per batch instead of once per filter. Counters and time
    /// are kept per filter as on the general path.
    ///
    /// Returns the last classifier of the run and the batch it emits (to route as usual),
    /// or `None` when nothing is left. A batch with a block that no longer resolves takes
    /// the general path (where such a block gets class 0).
    fn classify_run(
        &mut self,
        i: usize,
        mut batch: Batch,
        mut depth: usize,
        mut bytes: u64,
    ) -> Option<(usize, Batch, usize)> {
        let Space {
            nodes,
            store,
            names,
            spare,
            clock,
            last,
            ..
        } = self;
        let mut data = recycle(std::mem::take(spare));
        let mut r = store.resolver();
        for t in &batch.tags {
            match r.data(t) {
                Ok(d) => data.push(d),
                Err(_) => break,
            }
        }
        if data.len() < batch.len() {
            *spare = recycle(data);
            self.process_one(i, batch, depth, bytes);
            return None;
        }
        let lookup = |s: &str| names.iter().find(|(n, _)| n == s).map(|(_, c)| *c);
        let mut cur = i;
        loop {
            let zeros = {
                let node = &mut nodes[cur];
                node.c.blocks_in += batch.len() as u64;
                node.c.bytes_in += bytes;
                let f = node
                    .filter
                    .as_classifier()
                    .expect("a classifier node's filter is a classifier");
                let zeros = f.classify_batch(&data, &mut batch.tags);
                node.watch.observe(&batch.tags);
                zeros
            };
            // The run goes on through this node's only arc into the next classifier.
            let node = &nodes[cur];
            let next = match node.out.as_slice() {
                [a] if node.export.is_none()
                    && node.watch.taps.is_empty()
                    && !node.routes_by_class
                    && nodes[a.to].classifier
                    && depth < MAX_DEPTH =>
                {
                    a
                }
                _ => break,
            };
            let before = batch.len();
            match &next.sel {
                Selector::All => {}
                Selector::Default if zeros == 0 => {}
                sel => bytes = retain_resolved(&mut batch, &mut data, |c| sel.admits(c, &lookup)),
            }
            let (to, from) = (next.to, next.in_index);
            let kept = batch.len();
            let node = &mut nodes[cur];
            node.c.drops += (before - kept) as u64;
            node.c.blocks_out += kept as u64;
            node.c.bytes_out += bytes;
            node.out[0].carried.blocks += kept as u64;
            node.out[0].carried.bytes += bytes;
            charge_to(clock, last, &mut node.ticks);
            if kept == 0 {
                *spare = recycle(data);
                self.recycle_batch(batch);
                return None;
            }
            cur = to;
            batch.from = from;
            depth += 1;
        }
        charge_to(clock, last, &mut nodes[cur].ticks);
        *spare = recycle(data);
        Some((cur, batch, depth))
    }

    /// Forward a node's output batch along its arcs.
    pub(crate) fn route(&mut self, i: usize, mut batch: Batch, depth: usize) {
        let node = &mut self.nodes[i];
        node.watch.observe(&batch.tags);
        if !node.watch.taps.is_empty() {
            let mut k = 0;
            while k < self.nodes[i].watch.taps.len() {
                if let Err(e) = self.nodes[i].watch.taps[k].write(&self.store, &batch.tags) {
                    let l = self.nodes[i].label.clone();
                    self.warnings.push(format!("{l}: tap stopped: {e}"));
                    self.nodes[i].watch.taps.remove(k);
                    continue;
                }
                k += 1;
            }
        }
        if let Some(ex) = self.nodes[i].export.as_mut() {
            for t in batch.tags.iter().filter(|t| t.class != 0) {
                if let Ok(d) = self.store.data(t) {
                    if let Err(e) = ex.write_class(d, t.class) {
                        let l = self.nodes[i].label.clone();
                        self.warnings.push(format!("{l}: export stopped: {e}"));
                        self.nodes[i].export = None;
                        break;
                    }
                }
            }
        }
        let n_out = self.nodes[i].out.len();
        let names = &self.names;
        let lookup = |s: &str| names.iter().find(|(n, _)| n == s).map(|(_, c)| *c);
        if self.nodes[i].routes_by_class {
            // Split: each block goes down the arc its branch names, and no other.
            let mut per: Vec<Batch> = (0..n_out).map(|_| Batch::default()).collect();
            for ((t, sh), k) in batch.tags.iter().zip(&batch.shared).zip(&batch.branch) {
                if let Some(b) = per.get_mut(*k as usize) {
                    b.tags.push(*t);
                    b.shared.push(*sh);
                }
            }
            let bytes = per
                .iter()
                .flat_map(|b| b.tags.iter())
                .map(|t| t.len as u64)
                .sum();
            let routed: usize = per.iter().map(|b| b.len()).sum();
            // A block whose branch names no arc goes nowhere: a drop.
            self.nodes[i].c.drops += (batch.len() - routed) as u64;
            self.count_out(i, routed, bytes);
            for (k, b) in per.into_iter().enumerate() {
                if !b.is_empty() {
                    let (to, from) = (self.nodes[i].out[k].to, self.nodes[i].out[k].in_index);
                    let bytes = b.tags.iter().map(|t| t.len as u64).sum();
                    self.carry(i, k, b.len(), bytes);
                    self.push(to, b, depth + 1, bytes, from);
                }
            }
            return;
        }
        if n_out == 0 {
            // A sink: everything ends here.
            self.nodes[i].c.ended += batch.len() as u64;
            self.recycle_batch(batch);
            return;
        }
        // Arcs into filters that take nothing now (a published stream without subscribers)
        // are skipped; with one arc left the batch moves on in place.
        let mut live = n_out;
        let mut only = 0;
        if n_out > 1 {
            live = 0;
            for (k, a) in self.nodes[i].out.iter().enumerate() {
                if self.nodes[a.to].filter.accepts() {
                    live += 1;
                    only = k;
                }
            }
            if live == 0 {
                self.nodes[i].c.drops += batch.len() as u64;
                return;
            }
        }
        if live == 1 {
            // The common linear case: filter in place and move the batch, no allocation.
            // One pass: drop what the arc does not admit, and count the bytes kept.
            let before = batch.len();
            let sel = &self.nodes[i].out[only].sel;
            let bytes = match sel {
                Selector::All => batch.tags.iter().map(|t| t.len as u64).sum(),
                // The plain `|`: a tight loop, no selector dispatch per tag.
                Selector::Default => batch.retain_counting(|t| t.class != 0),
                _ => batch.retain_counting(|t| sel.admits(t.class, &lookup)),
            };
            let kept = batch.len();
            self.nodes[i].c.drops += (before - kept) as u64;
            self.count_out(i, kept, bytes);
            if kept > 0 {
                let (to, from) = (self.nodes[i].out[only].to, self.nodes[i].out[only].in_index);
                self.carry(i, only, kept, bytes);
                self.push(to, batch, depth + 1, bytes, from);
            } else {
                self.recycle_batch(batch);
            }
            return;
        }
        // Multicast: each arc gets the tags its selector admits. A block that goes down more
        // than one arc is shared until its last arc (write isolation).
        let nodes = &self.nodes;
        let admits: Vec<Vec<bool>> = nodes[i]
            .out
            .iter()
            .map(|a| {
                let on = live == n_out || nodes[a.to].filter.accepts();
                batch
                    .tags
                    .iter()
                    .map(|t| on && a.sel.admits(t.class, &lookup))
                    .collect()
            })
            .collect();
        let mut remaining: Vec<usize> = (0..batch.len())
            .map(|j| admits.iter().filter(|a| a[j]).count())
            .collect();
        let dropped = remaining.iter().filter(|r| **r == 0).count();
        self.nodes[i].c.drops += dropped as u64;
        // Each block out counts once, however many arcs it goes down (the arcs count
        // their own).
        let bytes = batch
            .tags
            .iter()
            .zip(&remaining)
            .filter(|(_, r)| **r > 0)
            .map(|(t, _)| t.len as u64)
            .sum();
        self.count_out(i, batch.len() - dropped, bytes);
        for (k, adm) in admits.iter().enumerate() {
            let mut sub = Batch::with_capacity(batch.len());
            let mut sub_bytes = 0;
            for j in 0..batch.len() {
                if adm[j] {
                    remaining[j] -= 1;
                    sub.tags.push(batch.tags[j]);
                    sub.shared.push(batch.shared[j] || remaining[j] > 0);
                    sub_bytes += batch.tags[j].len as u64;
                }
            }
            if !sub.is_empty() {
                let (to, from) = (self.nodes[i].out[k].to, self.nodes[i].out[k].in_index);
                self.carry(i, k, sub.len(), sub_bytes);
                self.push(to, sub, depth + 1, sub_bytes, from);
            }
        }
    }

    /// Charge the time since the last reading to node `i`.
    #[inline]
    pub(crate) fn charge(&mut self, i: usize) {
        charge_to(&self.clock, &mut self.last, &mut self.nodes[i].ticks);
    }

    /// Start timing afresh (before a source's pull: what came before is nobody's).
    #[inline]
    pub(crate) fn restart_clock(&mut self) {
        self.last = self.clock.raw();
    }

    /// Keep a batch that reached its end for the next source batch.
    #[inline]
    fn recycle_batch(&mut self, mut batch: Batch) {
        if self.spare_batch.is_none() && batch.tags.capacity() >= BATCH {
            batch.clear();
            self.spare_batch = Some(batch);
        }
    }

    /// Count `blocks` (`bytes`) down node `i`'s arc `k`.
    #[inline]
    fn carry(&mut self, i: usize, k: usize, blocks: usize, bytes: u64) {
        let c = &mut self.nodes[i].out[k].carried;
        c.blocks += blocks as u64;
        c.bytes += bytes;
    }

    /// Node `i` emits blocks it was not handed (a source's batch, a flush, a Unix
    /// command's output): counted as made, then routed.
    pub(crate) fn emit(&mut self, i: usize, batch: Batch, depth: usize) {
        self.nodes[i].c.made += batch.len() as u64;
        self.route(i, batch, depth);
    }

    fn count_out(&mut self, i: usize, blocks: usize, bytes: u64) {
        let c = &mut self.nodes[i].c;
        c.blocks_out += blocks as u64;
        c.bytes_out += bytes;
    }

    /// Run until every source is exhausted or `interrupt` is set (then channels from other
    /// spaces drain first, see [`Filter::drains`]). Calls `tick` now and then (progress
    /// display).
    pub fn run(&mut self, interrupt: &AtomicBool, tick: impl FnMut(&Space)) {
        self.run_loop(interrupt, None, tick);
    }

    /// [`Space::run`], taking live edits from `edits` (space 0's mailbox, see
    /// [`crate::edit`]) at the quiescent point between source batches; `factory` makes the
    /// filters they insert. The handle's counters are refreshed with `tick`'s period and
    /// after each edit; once the run ended, edits are refused with
    /// [`crate::edit::EditError::Ended`].
    pub fn run_with(
        &mut self,
        interrupt: &AtomicBool,
        edits: &crate::edit::EditHandle,
        factory: &dyn Factory,
        tick: impl FnMut(&Space),
    ) {
        let mailbox = edits.mailbox(0);
        self.run_loop(interrupt, mailbox.map(|m| (m, factory)), tick);
    }

    pub(crate) fn run_loop(
        &mut self,
        interrupt: &AtomicBool,
        edits: Option<(&crate::edit::Mailbox, &dyn Factory)>,
        mut tick: impl FnMut(&Space),
    ) {
        let sources: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].source)
            .collect();
        let mut last_tick = Instant::now();
        let mut batch = Batch::with_capacity(BATCH);
        // On interrupt: sources stop, but channels from other spaces drain until their
        // producers end (they stop their own sources and close), at most DRAIN_GRACE.
        let mut drain_until: Option<Instant> = None;
        if let Some((mailbox, _)) = edits {
            mailbox.publish(self);
            mailbox.publish_graph(self);
        }
        // Channels from other spaces of this process: where filters arrive and leave by
        // markers (`crate::migrate`).
        let ingresses = if edits.is_some() {
            self.ingresses()
        } else {
            Vec::new()
        };
        if self.ready.is_none() {
            match crate::readiness::Readiness::new() {
                Ok(r) => self.ready = Some(r),
                Err(e) => self.warnings.push(format!(
                    "cannot make the space's readiness handle ({e}): idle rounds sleep 1 ms"
                )),
            }
        }
        if let (Some((mailbox, _)), Some(r)) = (edits, &self.ready) {
            mailbox.set_waker(r.waker());
        }
        loop {
            // The quiescent point: every batch pulled so far has finished its walk. One
            // relaxed load per round when nobody edits (the mailbox's lock orders the rest).
            if let Some((mailbox, factory)) = edits {
                if mailbox.pending() {
                    mailbox.serve(self, factory);
                }
                let mut moved = !ingresses.is_empty()
                    && self.serve_markers(&ingresses, mailbox.board(), factory);
                if let Some(mut chaos) = self.chaos.take() {
                    moved |= self.chaos_round(&mut chaos, mailbox.board(), factory);
                    self.chaos = Some(chaos);
                }
                if moved {
                    mailbox.publish_graph(self);
                }
            }
            let max = match &mut self.chaos {
                Some(c) => c.batch(BATCH),
                None => BATCH,
            };
            let mut active = false;
            let mut produced = false;
            let interrupted = interrupt.load(Ordering::Relaxed);
            if interrupted && drain_until.is_none() {
                drain_until = Some(Instant::now() + DRAIN_GRACE);
            }
            let draining = drain_until.is_some_and(|d| Instant::now() < d);
            for &s in &sources {
                if self.nodes[s].done
                    || self.stop.asked()
                    || (interrupted && !(draining && self.nodes[s].filter.drains()))
                {
                    continue;
                }
                batch.clear();
                self.restart_clock();
                let more = self.with_filter(s, |f, cx| f.pull(cx, &mut batch, max));
                self.charge(s);
                if !batch.is_empty() {
                    active = true;
                    produced = true;
                    let next = self
                        .spare_batch
                        .take()
                        .unwrap_or_else(|| Batch::with_capacity(BATCH));
                    let b = std::mem::replace(&mut batch, next);
                    self.emit(s, b, 0);
                    self.epoch_end();
                }
                if !more {
                    self.nodes[s].done = true;
                } else {
                    active = true;
                }
            }
            if !produced {
                for n in &mut self.nodes {
                    n.filter.idle();
                }
            }
            // Unix processes in the middle of a pipeline produce output asynchronously.
            let made = self.poll_unix(false);
            if last_tick.elapsed() > TICK {
                tick(self);
                if let Some((mailbox, _)) = edits {
                    mailbox.publish(self);
                }
                last_tick = Instant::now();
            }
            if !active || self.stop.asked() || (interrupted && !draining) {
                break;
            }
            let edit_waits = edits.is_some_and(|(m, _)| m.pending());
            if !produced && !made && !edit_waits {
                // Asleep until a source or an edit wakes it, the next tick at the latest
                // (and the end of the drain grace).
                let mut limit = TICK.saturating_sub(last_tick.elapsed());
                if let Some(d) = drain_until {
                    limit = limit.min(d.saturating_duration_since(Instant::now()));
                }
                self.sleep_until_ready(&sources, interrupted, draining, limit);
            }
        }
        // Edits that arrive from here on are refused: the run is ending.
        if let Some((mailbox, factory)) = edits {
            mailbox.close();
            self.end_moves(&ingresses, mailbox.board(), factory);
        }
        // The counters as the loop ended, before the flushes and the wait for Unix
        // commands (which may take long: the live views show these meanwhile).
        self.ending = true;
        tick(self);
        if let Some((mailbox, _)) = edits {
            mailbox.publish(self);
        }
        self.finish_all();
        if let Some((mailbox, _)) = edits {
            mailbox.publish(self);
        }
    }

    /// Let every filter that holds blocks flush them (in graph order), then drain Unix
    /// processes; exported streams end (their readers see end of stream).
    fn finish_all(&mut self) {
        self.finish_filters();
        for n in &mut self.nodes {
            if let Some(ex) = n.export.as_mut() {
                ex.close();
            }
        }
    }

    fn finish_filters(&mut self) {
        for i in self.graph_order() {
            let mut out = Batch::default();
            self.restart_clock();
            self.with_filter(i, |f, cx| f.finish(cx, &mut out));
            self.charge(i);
            if !out.is_empty() {
                self.emit(i, out, 0);
            }
            self.poll_unix_node(i, true);
        }
    }

    /// The nodes in graph order (each after every node with an arc into it; index order
    /// among equals, and for what a loop leaves): what a filter flushes at the end reaches
    /// nodes not yet finished, wherever an edit or a move put them in the node list.
    fn graph_order(&self) -> Vec<usize> {
        let n = self.nodes.len();
        let mut ins = vec![0usize; n];
        for node in &self.nodes {
            for a in &node.out {
                ins[a.to] += 1;
            }
        }
        let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| ins[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        let mut placed = vec![false; n];
        while order.len() < n {
            let i = match ready.pop_first() {
                Some(i) => i,
                // A loop: take the first node not yet placed.
                None => (0..n).find(|&i| !placed[i]).expect("a node left"),
            };
            if std::mem::replace(&mut placed[i], true) {
                continue;
            }
            order.push(i);
            for a in &self.nodes[i].out {
                ins[a.to] = ins[a.to].saturating_sub(1);
                if ins[a.to] == 0 && !placed[a.to] {
                    ready.insert(a.to);
                }
            }
        }
        order
    }

    /// Whether any made blocks.
    fn poll_unix(&mut self, wait: bool) -> bool {
        let mut made = false;
        for i in 0..self.nodes.len() {
            made |= self.poll_unix_node(i, wait);
        }
        made
    }

    pub(crate) fn poll_unix_node(&mut self, i: usize, wait: bool) -> bool {
        let mut out = Batch::default();
        // Sources handle their own output through pull; others (mid-pipeline Unix
        // processes) are drained here.
        if self.nodes[i].source {
            return false;
        }
        self.with_filter(i, |f, cx| {
            f.pull(cx, &mut out, if wait { usize::MAX } else { BATCH * 16 })
        });
        if out.is_empty() {
            return false;
        }
        self.restart_clock();
        self.emit(i, out, 0);
        true
    }

    /// A round found nothing: ask every live source (and every filter that makes blocks
    /// on its own) what it waits for, and sleep once, on the space's readiness handle,
    /// until one of them is ready, a deadline passes or `limit` (see [`crate::readiness`]).
    /// A source that waits in its own `pull` keeps the space from sleeping here.
    fn sleep_until_ready(&mut self, sources: &[usize], interrupted: bool, draining: bool, limit: Duration) {
        let Some(ready) = self.ready.as_mut() else {
            std::thread::sleep(Duration::from_millis(1).min(limit));
            return;
        };
        let stopping = self.stop.asked();
        let mut arm = ready.begin();
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if sources.contains(&i) {
                if n.done || stopping || (interrupted && !(draining && n.filter.drains())) {
                    continue;
                }
                n.filter.arm(&mut arm, true);
            } else if !n.source {
                n.filter.arm(&mut arm, false);
            }
        }
        let (decision, deadline) = crate::readiness::Readiness::decide(&arm);
        drop(arm);
        if decision == crate::readiness::Decision::Sleep {
            if let Err(e) = ready.sleep(deadline, limit) {
                let why = format!("the space's readiness handle failed ({e}): idle rounds sleep 1 ms");
                self.ready = None;
                self.warnings.push(why);
            }
        }
    }

    /// A source batch has finished its whole walk through the graph.
    pub(crate) fn epoch_end(&mut self) {
        for i in 0..self.nodes.len() {
            self.with_filter(i, |f, cx| f.epoch_end(cx));
        }
    }

    /// `ticks` of the space's clock in nanoseconds.
    pub(crate) fn nanos(&self, ticks: u64) -> u64 {
        self.clock.delta_as_nanos(0, ticks)
    }

    /// The arcs out of this space's nodes, the run's own nodes looked through (channel
    /// endpoints, the pass-throughs moves and edits leave, a `__publish`): each arc of a
    /// node the user wrote, what it carried and the node (or channel) it leads to. With
    /// [`Space::channel_heads`], the run's report joins them into the user's graph. Arcs
    /// into a prefix-sharing `__publish` are left out: it offers the stream to other
    /// runs and is no node of this one.
    pub fn arcs(&self) -> Vec<ArcReport> {
        let mut v = Vec::new();
        for n in &self.nodes {
            if n.removed || crate::migrate::endpoint_of(n).is_some() {
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
            let Some((false, ch)) = crate::migrate::endpoint_of(n) else {
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

    /// Where an arc into node `i` leads, looking through the run's own nodes.
    fn targets(&self, i: usize, depth: usize) -> Vec<ArcTarget> {
        let n = &self.nodes[i];
        if let Some((true, ch)) = crate::migrate::endpoint_of(n) {
            return vec![ArcTarget::Channel(ch)];
        }
        if matches!(&n.spec.kind, NodeKind::Filter { filter, .. } if filter == crate::spaces::PUBLISH) {
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

    /// Per-filter counters and summaries. A prefix-sharing `__publish` is the run's own
    /// node, not the user's: left out (its input is counted out of the node before it).
    pub fn report(&self) -> Vec<NodeReport> {
        self.nodes
            .iter()
            .filter(|n| !n.removed)
            .filter(|n| {
                !matches!(&n.spec.kind, NodeKind::Filter { filter, .. } if filter == crate::spaces::PUBLISH)
            })
            .map(|n| n.report(self.clock.delta_as_nanos(0, n.ticks)))
            .collect()
    }

    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Wait until every exported stream has `n` readers attached (a FIFO's open), so a
    /// reader started before the run misses nothing.
    pub fn wait_for_export_readers(&self, n: u32, timeout: Duration) -> Result<(), beltway::Error> {
        for node in &self.nodes {
            if let Some(ex) = &node.export {
                ex.tags().wait_for_readers(n, timeout)?;
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `tcp | deflate space=1,2 |1 count`: the split, the two copies and the join fold
    /// into one `deflate` row whose blocks in are what tcp sent it, whose out is what
    /// reached count, whose drops include what the selector after the join dropped (the
    /// loss an earlier fold made), and which adds up.
    #[test]
    fn rows_follow_the_pipeline_and_an_inserted_node_its_input() {
        let row = |label: &str| NodeReport {
            label: label.into(),
            counters: Counters::default(),
            summary: None,
            classes: vec![],
            space: String::new(),
        };
        let arc = |from: &str, to: &str| ArcReport {
            from: from.into(),
            to: ArcTarget::Node(to.into()),
            carried: Carried::default(),
        };
        // Space 0 (gen, count, an inserted dedup#2 after gen), then space 1 (dedup).
        let rows = vec![row("gen"), row("count"), row("dedup#2"), row("dedup")];
        let arcs = [arc("gen", "dedup#2"), arc("dedup#2", "count"), arc("count", "dedup")];
        let order = user_order(&["gen".into(), "count".into(), "dedup".into(), "dedup~2".into(), "__publish".into()]);
        assert_eq!(order, ["gen", "count", "dedup"]);
        let got: Vec<String> = in_order(rows, &arcs, &order).into_iter().map(|r| r.label).collect();
        assert_eq!(got, ["gen", "dedup#2", "count", "dedup"]);
    }

    #[test]
    fn an_internal_nodes_summary_is_said_by_the_users_node() {
        let n = NodeReport {
            label: "bpf".into(),
            counters: Counters::default(),
            summary: Some("__subscribe: 10 blocks received, lost 0 blocks to a full ring (subscriber fell behind)".into()),
            classes: vec![],
            space: String::new(),
        };
        let (rows, _) = fold_internal(&[n], &[]);
        assert_eq!(
            rows[0].summary.as_deref(),
            Some("bpf: 10 blocks received, lost 0 blocks to a full ring (subscriber fell behind)")
        );
    }

    #[test]
    fn replicas_split_and_join_fold_into_the_users_node() {
        let row = |label: &str, i: u64, o: u64, d: u64, m: u64, e: u64| NodeReport {
            label: label.into(),
            counters: Counters {
                blocks_in: i,
                bytes_in: i * 10,
                blocks_out: o,
                bytes_out: o * 10,
                drops: d,
                made: m,
                ended: e,
                nanos: 1,
            },
            summary: None,
            classes: vec![],
            space: String::new(),
        };
        let arc = |from: &str, to: &str, b: u64| ArcReport {
            from: from.into(),
            to: ArcTarget::Node(to.into()),
            carried: Carried { blocks: b, bytes: b * 10 },
        };
        let nodes = [
            row("tcp@0", 100, 90, 10, 0, 0),
            row("deflate~split@0", 90, 90, 0, 0, 0),
            row("deflate@1", 45, 45, 0, 0, 0),
            row("deflate~2@2", 45, 45, 0, 0, 0),
            row("deflate~join@1", 90, 60, 30, 7, 7),
            row("count@1", 60, 0, 0, 0, 60),
        ];
        let arcs = [
            arc("tcp@0", "deflate~split@0", 90),
            arc("deflate~split@0", "deflate@1", 45),
            arc("deflate~split@0", "deflate~2@2", 45),
            arc("deflate@1", "deflate~join@1", 45),
            arc("deflate~2@2", "deflate~join@1", 45),
            arc("deflate~join@1", "count@1", 60),
        ];
        let (rows, arcs) = fold_internal(&nodes, &arcs);
        let labels: Vec<(&str, &str)> = rows.iter().map(|r| (r.label.as_str(), r.space.as_str())).collect();
        assert_eq!(labels, [("tcp", "0"), ("deflate", "1,2"), ("count", "1")]);
        let d = rows[1].counters;
        assert_eq!(
            (d.blocks_in, d.bytes_in, d.blocks_out, d.bytes_out, d.drops, d.made, d.ended, d.nanos),
            (90, 900, 60, 600, 30, 0, 0, 4)
        );
        assert_eq!(d.blocks_out, d.blocks_in - d.drops + d.made - d.ended);
        let arcs: Vec<(&str, String, u64)> = arcs
            .iter()
            .map(|a| (a.from.as_str(), format!("{:?}", a.to), a.carried.blocks))
            .collect();
        assert_eq!(
            arcs,
            [
                ("tcp", format!("{:?}", ArcTarget::Node("deflate".into())), 90),
                ("deflate", format!("{:?}", ArcTarget::Node("count".into())), 60)
            ]
        );
    }

    #[test]
    fn recycling_keeps_the_allocation() {
        let bytes = [1u8; 64];
        let mut v: Vec<&[u8]> = Vec::with_capacity(BATCH);
        let at = v.as_ptr() as usize;
        v.extend(bytes.chunks(8));
        let w: Vec<&'static [u8]> = recycle(v);
        assert!(w.is_empty());
        assert_eq!((w.as_ptr() as usize, w.capacity()), (at, BATCH));
    }
}
