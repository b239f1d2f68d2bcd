//! Reification (thesis 6.1-6.2) and the request model: every filter name maps to one or
//! more implementations, each tied to the space kinds it can run in and carrying a cost
//! model (Table 6.2's per-invocation and per-byte four-tuples, defaulted from the
//! filter's Table 5.1 data-access class and overridable from measurements). A parsed
//! pipeline becomes a [`Request`]: nodes with their candidate implementations and pins,
//! streams, and the block and byte rates propagated from the sources.

use std::collections::HashMap;

use dataplane::{Access, Cost, ImplSpace};
use lang::{Graph, Hint, NodeKind, SpaceName, SpaceSpec};

use crate::error::RequestError;
use crate::library::Filters;
use crate::system::SpaceKind;

/// A filter implementation's cost model (Table 6.2). Per input block the filter spends
/// `per_call` cycles on a fraction `processed` of blocks, forwards a fraction `forward`
/// and creates `created` new blocks; per byte it spends `per_byte` cycles on a fraction
/// `bytes_read` of each block, and an output block carries `bytes_forward` of the input
/// bytes plus `bytes_created`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilterCost {
    pub per_call: f64,
    pub processed: f64,
    pub forward: f64,
    pub created: f64,
    pub per_byte: f64,
    pub bytes_read: f64,
    pub bytes_forward: f64,
    pub bytes_created: f64,
}

impl FilterCost {
    /// Table 6.2 defaults by data-access class (Table 5.1). The letters of the thesis'
    /// table are filled with the estimates an administrator would use: cycles per call
    /// and per byte of a 2026 x86 core, the share of blocks each class passes on.
    pub fn for_access(a: Access) -> FilterCost {
        let c = |per_call, forward, per_byte, bytes_read, bytes_forward| FilterCost {
            per_call,
            processed: 1.0,
            forward,
            created: 0.0,
            per_byte,
            bytes_read,
            bytes_forward,
            bytes_created: 0.0,
        };
        match a {
            Access::Metadata => c(30.0, 1.0, 0.0, 0.0, 1.0),
            Access::Statistics => c(25.0, 1.0, 0.0, 0.0, 1.0),
            Access::Inspection => c(120.0, 0.5, 1.5, 1.0, 1.0),
            Access::Classification => c(60.0, 1.0, 1.0, 0.1, 1.0),
            Access::Reordering => c(200.0, 1.0, 1.0, 1.0, 1.0),
            Access::Editing => c(300.0, 1.0, 8.0, 1.0, 1.0),
            Access::Source => c(100.0, 1.0, 1.0, 1.0, 1.0),
            Access::Sink => c(200.0, 0.0, 1.0, 1.0, 0.0),
        }
    }

    /// These costs with a declaration's hints applied (`dataplane::Cost`).
    pub fn hinted(self, h: &Cost) -> FilterCost {
        FilterCost {
            per_call: h.per_call.unwrap_or(self.per_call) * h.per_call_scale,
            forward: h.forward.unwrap_or(self.forward),
            per_byte: h.per_byte.unwrap_or(self.per_byte),
            bytes_read: h.bytes_read.unwrap_or(self.bytes_read),
            ..self
        }
    }
}

/// A requirement an implementation has of the machine (declared with the filter).
pub use dataplane::Needs;

/// One way to run a filter.
#[derive(Clone, Debug, PartialEq)]
pub struct Implementation {
    /// `native`, `cbpf-socket`, `cbpf-interp`, `ebpf-map`, `af-packet`, `exec`, ...
    pub name: &'static str,
    pub kinds: Vec<SpaceKind>,
    pub needs: Needs,
    pub cost: FilterCost,
}

const USER: [SpaceKind; 2] = [SpaceKind::Thread, SpaceKind::Process];

/// Reification: names to implementations (from the declarations in [`Filters`]), with
/// measured overrides.
#[derive(Clone, Debug)]
pub struct Catalog {
    filters: Filters,
    overrides: HashMap<String, (f64, f64, Option<f64>)>,
}

impl Catalog {
    pub fn new(filters: Filters) -> Catalog {
        Catalog {
            filters,
            overrides: HashMap::new(),
        }
    }

    /// The filter library this catalog reads.
    pub fn filters(&self) -> &Filters {
        &self.filters
    }

    /// Replaces the per-call and per-byte cycles (and optionally the forward ratio) of
    /// every implementation of `filter`, e.g. from a measurement.
    pub fn set_measured(
        &mut self,
        filter: &str,
        per_call: f64,
        per_byte: f64,
        forward: Option<f64>,
    ) {
        self.overrides
            .insert(filter.to_string(), (per_call, per_byte, forward));
    }

    /// Parses `name:per_call,per_byte[,forward]`.
    pub fn parse_override(&mut self, text: &str) -> Result<(), String> {
        let (name, rest) = text
            .split_once(':')
            .ok_or_else(|| format!("expected NAME:CALL,BYTE[,FWD], got '{text}'"))?;
        let nums: Result<Vec<f64>, _> = rest.split(',').map(|v| v.trim().parse::<f64>()).collect();
        let nums = nums.map_err(|_| format!("bad number in '{text}'"))?;
        if !(2..=3).contains(&nums.len()) || nums.iter().any(|v| *v < 0.0) {
            return Err(format!(
                "expected two or three non-negative numbers in '{text}'"
            ));
        }
        self.set_measured(name, nums[0], nums[1], nums.get(2).copied());
        Ok(())
    }

    /// The implementations of a native filter (None if the name is unknown), as its
    /// declaration gives them: each tied to the space kinds it runs in, its cost the
    /// access class's defaults with the declaration's hints.
    pub fn implementations(&self, filter: &str) -> Option<Vec<Implementation>> {
        let spec = self.filters.find(filter)?;
        let base = FilterCost::for_access(spec.access);
        let mut impls: Vec<Implementation> = spec
            .implementations
            .iter()
            .map(|i| Implementation {
                name: i.name,
                kinds: match i.space {
                    ImplSpace::User => USER.to_vec(),
                    ImplSpace::Kernel(_) => vec![SpaceKind::Kernel],
                },
                needs: i.needs,
                cost: base.hinted(&i.cost),
            })
            .collect();
        if let Some(&(call, byte, fwd)) = self.overrides.get(filter) {
            for i in &mut impls {
                i.cost.per_call = call;
                i.cost.per_byte = byte;
                if let Some(f) = fwd {
                    i.cost.forward = f;
                }
            }
        }
        Some(impls)
    }
}

/// The language resolver the planner parses with: the native library's
/// ([`Filters::resolver`]), whose keys it checks, plus the planner's own `sel=`, `rate=`
/// and `bytes=`.
#[derive(Clone, Copy, Debug)]
pub struct PlanResolver<'a>(pub &'a Filters);

impl lang::Resolver for PlanResolver<'_> {
    fn resolve(&self, name: &str) -> Option<lang::FilterKind> {
        self.0.resolver.resolve(name)
    }
    fn native_names(&self) -> Vec<String> {
        self.0.resolver.native_names()
    }
    fn params(&self, name: &str) -> Option<Vec<String>> {
        let mut p = self.0.resolver.params(name)?;
        p.extend(dataplane::decl::PLANNER_OPTIONS.map(String::from));
        Some(p)
    }
    fn class_names(&self, name: &str) -> Option<Vec<(String, u16)>> {
        self.0.resolver.class_names(name)
    }
    fn unix_tool(&self, name: &str) -> bool {
        self.0.resolver.unix_tool(name)
    }
}

/// Where a `space=` option pins a filter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pin {
    /// `kernel`, `thread`, `process`, or `user` (thread or process).
    pub kinds: Option<&'static [SpaceKind]>,
    pub cpu: Option<usize>,
}

impl Pin {
    pub fn admits(&self, kind: SpaceKind, cpu: usize) -> bool {
        self.kinds.is_none_or(|k| k.contains(&kind)) && self.cpu.is_none_or(|c| c == cpu)
    }

    /// The pin of a typed `space=` ([`lang::SpaceSpec`]): the planner's kinds and CPU as
    /// written; the runtime's names (`local`, `N`, `tN`, `pN`, lists: the first one's
    /// kind) pin the kind only.
    pub fn of(spec: &SpaceSpec) -> Pin {
        match spec {
            SpaceSpec::Runtime(list) => match list.first() {
                Some(SpaceName::Process(_)) => Pin {
                    kinds: Some(&[SpaceKind::Process]),
                    cpu: None,
                },
                _ => Pin {
                    kinds: Some(&[SpaceKind::Thread]),
                    cpu: None,
                },
            },
            SpaceSpec::Planner { kind, cpu } => {
                let kinds: Option<&'static [SpaceKind]> = kind.map(|k| match k {
                    lang::PinKind::Kernel => &[SpaceKind::Kernel][..],
                    lang::PinKind::Thread => &[SpaceKind::Thread][..],
                    lang::PinKind::Process => &[SpaceKind::Process][..],
                    lang::PinKind::User => &USER[..],
                });
                Pin { kinds, cpu: *cpu }
            }
        }
    }

    /// [`Pin::of`] a `space=` value as text (parsed by [`SpaceSpec::parse`]).
    pub fn parse(v: &str) -> Result<Pin, String> {
        SpaceSpec::parse(v).map(|s| Pin::of(&s))
    }
}

/// What a request node is.
#[derive(Clone, Debug, PartialEq)]
pub enum Role {
    Source,
    Filter,
    Split { ways: usize },
    Join,
}

/// One filter of the request, ready for the optimizer.
#[derive(Clone, Debug)]
pub struct RNode {
    pub id: usize,
    /// The filter as a person wrote it: `bpf "tcp"`, `split(2)`.
    pub label: String,
    pub role: Role,
    pub impls: Vec<Implementation>,
    pub pin: Pin,
    /// `@single`: all such nodes share one space.
    pub single: bool,
    /// Blocks and bytes per second arriving (for a source: produced).
    pub rate_in: f64,
    pub bytes_in: f64,
}

/// One stream: an arc of the request with its block and byte rate.
#[derive(Clone, Debug)]
pub struct RStream {
    pub from: usize,
    pub to: usize,
    pub rate: f64,
    pub bytes: f64,
}

/// The request graph with rates: what the optimizer and the heuristic consume.
#[derive(Clone, Debug)]
pub struct Request {
    pub nodes: Vec<RNode>,
    pub streams: Vec<RStream>,
    /// Node ids in topological order.
    pub order: Vec<usize>,
}

/// Expected input at every source, unless the source says `rate=` / `bytes=`.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub blocks_per_sec: f64,
    pub bytes_per_block: f64,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            blocks_per_sec: 100_000.0,
            bytes_per_block: 500.0,
        }
    }
}

fn label_of(kind: &NodeKind) -> String {
    match kind {
        NodeKind::Filter { filter, params, .. } => {
            let mut s = filter.clone();
            for p in params {
                if p.chars().any(|c| c.is_whitespace() || c == '"') || p.is_empty() {
                    s += &format!(" {p:?}");
                } else {
                    s += &format!(" {p}");
                }
            }
            s
        }
        NodeKind::Unix { argv, .. } => argv.join(" "),
        NodeKind::Split { ways, .. } => format!("split({ways})"),
        NodeKind::Join { .. } => "join".to_string(),
    }
}

/// Is node `id` the only consumer of an `rx` (by its default arc) and `rx` its only input?
fn kernel_after_rx(g: &Graph, id: usize) -> bool {
    let ins: Vec<_> = g.edges.iter().filter(|e| e.to == id).collect();
    let [e] = ins.as_slice() else { return false };
    let rx = matches!(&g.nodes[e.from].kind, NodeKind::Filter { filter, .. } if filter == "rx");
    rx && e.sel == lang::Selector::Default
        && g.edges.iter().filter(|x| x.from == e.from).count() == 1
}

impl Request {
    /// Builds the request model from a parsed graph: implementations through `catalog`,
    /// pins from `space=`, selectivity from `sel=`, source rates from `load` or the
    /// source's own `rate=`/`bytes=`; then propagates rates downstream.
    /// A native filter's part of the model: its implementations (through `catalog`, the
    /// kernel forms only where the kernel can run them), its pin (`space=` or a hint), the
    /// planner's estimates it was given (`sel=`, and `rate=`/`bytes=` for a source's load).
    fn filter_model(
        g: &Graph,
        n: &lang::Node,
        label: &str,
        (filter, options, place): (&String, &[(String, String)], &lang::Placement),
        catalog: &Catalog,
        load: Load,
    ) -> Result<FilterModel, RequestError> {
        let has_in = g.edges.iter().any(|e| e.to == n.id);
        let mut pin = Pin::default();
        let mut impls = catalog
            .implementations(filter)
            .ok_or_else(|| RequestError::UnknownFilter(filter.clone()))?;
        let bad = |key: &str, value: &str, why: String| RequestError::BadOption {
            filter: label.to_string(),
            node: n.id,
            key: key.to_string(),
            value: value.to_string(),
            why,
        };
        let num = |key: &str, value: &str| {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(key, value, "expected a non-negative number".into()))
        };
        let mut src = load;
        // A filter that declares a key of the planner's (`shape rate=20KB/s`,
        // `gen rate=`, `strip bytes=`) keeps it (dataplane::decl::PLANNER_OPTIONS):
        // its value is the filter's, in the filter's units. The planner reads it
        // as its estimate only when it is a plain number, and never refuses it.
        let declared = catalog.filters.resolver.params(filter).unwrap_or_default();
        for (key, value) in options {
            let own = declared.iter().any(|p| p == key);
            let num = |key: &str, value: &str| match num(key, value) {
                Err(_) if own => Ok(None),
                r => r.map(Some),
            };
            match key.as_str() {
                "sel" => {
                    if let Some(s) = num(key, value)? {
                        impls.iter_mut().for_each(|i| i.cost.forward = s);
                    }
                }
                "rate" => {
                    if let Some(r) = num(key, value)? {
                        src.blocks_per_sec = r;
                    }
                }
                "bytes" => {
                    if let Some(b) = num(key, value)? {
                        src.bytes_per_block = b;
                    }
                }
                _ => {}
            }
        }
        // `space=` pins; without it, the runtime's hints that choose a space kind.
        if let Some(spec) = &place.space {
            pin = Pin::of(spec);
        } else if n.hints.contains(&Hint::Private) {
            pin = Pin {
                kinds: Some(&[SpaceKind::Process]),
                cpu: None,
            };
        } else if n.hints.contains(&Hint::Background) {
            pin = Pin {
                kinds: Some(&[SpaceKind::Thread]),
                cpu: None,
            };
        }
        let is_source = !has_in;
        // A socket program (classic BPF, eBPF) runs only on `rx`'s socket, and a
        // socket holds one: the kernel form exists only for the filter right after
        // `rx` (its only input, `rx`'s only output; the kernel push-down,
        // `Filters::kernel_placement`), and not for `sample prob=` (random draws
        // the kernel would not repeat).
        if catalog.filters.runs_after_rx_in_kernel(filter) && !kernel_after_rx(g, n.id) {
            impls.retain(|i| !i.kinds.contains(&SpaceKind::Kernel));
        }
        if filter == "sample" && options.iter().any(|(k, _)| k == "prob") {
            impls.retain(|i| !i.kinds.contains(&SpaceKind::Kernel));
        }
        // `ips`'s kernel form is its header stage on the socket, which leaves frames out
        // of its output: only when nothing reads that output.
        if filter == "ips" && g.edges.iter().any(|e| e.from == n.id) {
            impls.retain(|i| !i.kinds.contains(&SpaceKind::Kernel));
        }
        Ok(FilterModel {
            role: if is_source {
                Role::Source
            } else {
                Role::Filter
            },
            impls,
            pin,
            load: is_source.then_some(src),
        })
    }

    pub fn from_graph(g: &Graph, catalog: &Catalog, load: Load) -> Result<Request, RequestError> {
        let mut nodes = Vec::with_capacity(g.nodes.len());
        let mut source_load = vec![None; g.nodes.len()];
        for n in &g.nodes {
            let label = label_of(&n.kind);
            let has_in = g.edges.iter().any(|e| e.to == n.id);
            let mut pin = Pin::default();
            let (role, mut impls) = match &n.kind {
                NodeKind::Filter {
                    filter,
                    options,
                    place,
                    ..
                } => {
                    let m =
                        Self::filter_model(g, n, &label, (filter, options, place), catalog, load)?;
                    pin = m.pin;
                    source_load[n.id] = m.load;
                    (m.role, m.impls)
                }
                NodeKind::Unix { .. } => {
                    let cost = FilterCost::for_access(Access::Reordering);
                    let i = Implementation {
                        name: "exec",
                        kinds: vec![SpaceKind::Process],
                        needs: Needs::Nothing,
                        cost,
                    };
                    if !has_in {
                        source_load[n.id] = Some(load);
                    }
                    (if has_in { Role::Filter } else { Role::Source }, vec![i])
                }
                NodeKind::Split { ways, .. } => {
                    let cost = FilterCost {
                        per_call: 10.0,
                        ..FilterCost::for_access(Access::Metadata)
                    };
                    (
                        Role::Split { ways: *ways },
                        vec![Implementation {
                            name: "native",
                            kinds: USER.to_vec(),
                            needs: Needs::Nothing,
                            cost,
                        }],
                    )
                }
                NodeKind::Join { .. } => {
                    let cost = FilterCost {
                        per_call: 10.0,
                        ..FilterCost::for_access(Access::Metadata)
                    };
                    (
                        Role::Join,
                        vec![Implementation {
                            name: "native",
                            kinds: USER.to_vec(),
                            needs: Needs::Nothing,
                            cost,
                        }],
                    )
                }
            };
            impls.dedup();
            nodes.push(RNode {
                id: n.id,
                label,
                role,
                impls,
                pin,
                single: n.hints.contains(&Hint::Single),
                rate_in: 0.0,
                bytes_in: 0.0,
            });
        }
        if source_load.iter().all(|s| s.is_none()) {
            return Err(RequestError::NoSource);
        }
        let order = topological_order(g, &nodes)?;
        let streams = propagate_rates(g, &mut nodes, &order, &source_load);
        Ok(Request {
            nodes,
            streams,
            order,
        })
    }

    /// Cycles per second node `i` spends with implementation `imp`.
    pub fn node_cycles(&self, i: usize, imp: usize) -> f64 {
        let n = &self.nodes[i];
        let c = n.impls[imp].cost;
        n.rate_in * c.per_call * c.processed + n.bytes_in * c.per_byte * c.bytes_read
    }
}

/// The nodes in topological order (Kahn), smaller ids first where the graph allows; a
/// node left over sits on a cycle.
fn topological_order(g: &Graph, nodes: &[RNode]) -> Result<Vec<usize>, RequestError> {
    let n = nodes.len();
    let mut indeg = vec![0usize; n];
    for e in &g.edges {
        indeg[e.to] += 1;
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    ready.reverse();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        let mut next: Vec<usize> = Vec::new();
        for e in g.edges.iter().filter(|e| e.from == i) {
            indeg[e.to] -= 1;
            if indeg[e.to] == 0 {
                next.push(e.to);
            }
        }
        next.sort_unstable();
        next.reverse();
        // Keep a stable, mostly-id order: smaller ids come out first.
        ready.extend(next);
        ready.sort_unstable_by(|a, b| b.cmp(a));
    }
    if order.len() < n {
        let stuck = (0..n).find(|i| !order.contains(i)).unwrap_or(0);
        return Err(RequestError::Cycle(nodes[stuck].label.clone()));
    }
    Ok(order)
}

/// Rates: a walk from the sources downstream (thesis 6.3.3, "Cycles"): each node's input
/// rate and bytes, and each stream's.
fn propagate_rates(
    g: &Graph,
    nodes: &mut [RNode],
    order: &[usize],
    source_load: &[Option<Load>],
) -> Vec<RStream> {
    let mut streams: Vec<RStream> = g
        .edges
        .iter()
        .map(|e| RStream {
            from: e.from,
            to: e.to,
            rate: 0.0,
            bytes: 0.0,
        })
        .collect();
    for &i in order {
        let (rate_in, bytes_in) = match source_load[i] {
            Some(l) => (l.blocks_per_sec, l.blocks_per_sec * l.bytes_per_block),
            None => streams
                .iter()
                .filter(|s| s.to == i)
                .fold((0.0, 0.0), |a, s| (a.0 + s.rate, a.1 + s.bytes)),
        };
        nodes[i].rate_in = rate_in;
        nodes[i].bytes_in = bytes_in;
        // The forward ratios of the first implementation (all implementations of one
        // filter compute the same function).
        let c = nodes[i].impls[0].cost;
        let per_block = if rate_in > 0.0 {
            bytes_in / rate_in
        } else {
            0.0
        };
        let (out_rate, out_bytes_per_block) = match nodes[i].role {
            Role::Source => (rate_in, per_block),
            Role::Split { .. } | Role::Join => (rate_in, per_block),
            Role::Filter => (
                rate_in * (c.forward + c.created),
                per_block * c.bytes_forward + c.bytes_created,
            ),
        };
        let outs: Vec<usize> = (0..streams.len())
            .filter(|&k| streams[k].from == i)
            .collect();
        let share = match nodes[i].role {
            Role::Split { .. } if !outs.is_empty() => 1.0 / outs.len() as f64,
            _ => 1.0,
        };
        for k in outs {
            streams[k].rate = out_rate * share;
            streams[k].bytes = out_rate * share * out_bytes_per_block;
        }
    }
    streams
}

/// What [`Request::from_graph`] makes of a native filter.
struct FilterModel {
    role: Role,
    impls: Vec<Implementation>,
    pin: Pin,
    /// A source's load (`rate=`/`bytes=`, or the caller's).
    load: Option<Load>,
}

/// Parses a pipeline with [`PlanResolver`] and builds its request model. Parse errors
/// carry the pipeline with a caret.
pub fn request_from_text(
    text: &str,
    catalog: &Catalog,
    load: Load,
) -> Result<(Graph, Request), RequestError> {
    let g = lang::parse(text, &PlanResolver(&catalog.filters))
        .map_err(|d| RequestError::Parse(d.to_string()))?;
    let r = Request::from_graph(&g, catalog, load)?;
    Ok((g, r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::native;

    fn req(text: &str) -> Request {
        request_from_text(text, &Catalog::new(native()), Load::default())
            .unwrap()
            .1
    }

    /// Issue 34: the planner refused `shape rate=20KB/s` (it read shape's own `rate=`, a
    /// byte rate with units, as its estimate of blocks per second). A key the filter
    /// declares is the filter's; a planner key on a filter that does not declare it is
    /// still the planner's, and still checked.
    #[test]
    fn a_filter_keeps_its_own_rate_key() {
        let r = req("gen count=10 | shape rate=20KB/s | count");
        assert_eq!(r.nodes.len(), 3);
        request_from_text(
            "gen count=10 | shape rate=20KB/s burst=4KB | null",
            &Catalog::new(native()),
            Load::default(),
        )
        .unwrap();
        // `count` declares no `rate`: there it is the planner's estimate, checked.
        let e = request_from_text(
            "gen | count rate=fast | null",
            &Catalog::new(native()),
            Load::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("rate"), "{e}");
        // A plain number on a source's own `rate=` is still the planner's estimate.
        let r = req("gen count=10 rate=5000 | count");
        assert_eq!(r.nodes[0].rate_in, 5000.0, "{:?}", r.nodes[0]);
    }

    #[test]
    fn rates_propagate_with_selectivity() {
        let r = req("rx | bpf \"tcp\" | count | null");
        assert_eq!(r.nodes[0].role, Role::Source);
        assert_eq!(r.nodes[1].rate_in, 100_000.0);
        assert!((r.nodes[2].rate_in - 10_000.0).abs() < 1e-6);
        assert!((r.nodes[2].bytes_in - 5_000_000.0).abs() < 1e-3);
        let r = req("rx | bpf sel=0.5 | null");
        assert!((r.nodes[2].rate_in - 50_000.0).abs() < 1e-6);
    }

    #[test]
    fn splits_divide_and_joins_sum() {
        let g = lang::parse("gen | strip | null", &PlanResolver(&native())).unwrap();
        let g = lang::parallelize(&g, 1, 2, lang::SplitMode::RoundRobin);
        let r = Request::from_graph(&g, &Catalog::new(native()), Load::default()).unwrap();
        let strip1 = r
            .nodes
            .iter()
            .filter(|n| n.label == "strip")
            .map(|n| n.rate_in)
            .collect::<Vec<_>>();
        assert_eq!(strip1, vec![50_000.0, 50_000.0]);
        let join = r.nodes.iter().find(|n| n.role == Role::Join).unwrap();
        assert_eq!(join.rate_in, 100_000.0);
    }

    #[test]
    fn socket_programs_only_right_after_rx() {
        let kinds = |text: &str, node: usize| {
            let (_, r) = request_from_text(text, &Catalog::new(native()), Load::default()).unwrap();
            r.nodes[node]
                .impls
                .iter()
                .map(|i| i.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            kinds("rx | flowcount | null", 1),
            vec!["ebpf-map", "native"]
        );
        assert_eq!(
            kinds("rx | bytecount | null", 1),
            vec!["ebpf-map", "native"]
        );
        assert_eq!(
            kinds("rx | sample 10 | null", 1),
            vec!["ebpf-map", "native"]
        );
        assert_eq!(kinds("rx | sample prob=0.1 | null", 1), vec!["native"]);
        // One program per socket: the second filter has only its user-space form.
        assert_eq!(
            kinds("rx | sample 10 | flowcount | null", 2),
            vec!["native"]
        );
        assert_eq!(kinds("gen | bpf \"tcp\" | null", 1), vec!["cbpf-interp"]);
        assert_eq!(kinds("rx | count | null", 1), vec!["ebpf-map", "native"]);
    }

    #[test]
    fn reification_ties_implementations_to_spaces() {
        let c = Catalog::new(native());
        let bpf = c.implementations("bpf").unwrap();
        assert_eq!(bpf.len(), 2);
        assert_eq!(bpf[0].kinds, vec![SpaceKind::Kernel]);
        assert!(bpf[1].kinds.contains(&SpaceKind::Thread));
        assert_eq!(c.implementations("grep").unwrap()[0].kinds, USER.to_vec());
        assert!(c.implementations("nosuch").is_none());
        let mut c = Catalog::new(native());
        c.parse_override("grep:10,0.5,0.25").unwrap();
        let g = &c.implementations("grep").unwrap()[0].cost;
        assert_eq!((g.per_call, g.per_byte, g.forward), (10.0, 0.5, 0.25));
        assert!(c.parse_override("grep:1").is_err());
    }

    #[test]
    fn errors_name_the_filter() {
        let e = request_from_text(
            "rx | bpf space=moon | null",
            &Catalog::new(native()),
            Load::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("bpf") && e.to_string().contains("moon"),
            "{e}"
        );
        let e =
            request_from_text("rx | cuont", &Catalog::new(native()), Load::default()).unwrap_err();
        assert!(e.to_string().contains("cuont"), "{e}");
    }

    #[test]
    fn pins_parse() {
        assert_eq!(
            Pin::parse("kernel").unwrap().kinds,
            Some(&[SpaceKind::Kernel][..])
        );
        assert_eq!(Pin::parse("thread:1").unwrap().cpu, Some(1));
        assert_eq!(
            Pin::parse("cpu3").unwrap(),
            Pin {
                kinds: None,
                cpu: Some(3)
            }
        );
        assert!(Pin::parse("gpu").is_err());
    }
}

#[cfg(test)]
mod runtime_space_names {
    use super::*;

    #[test]
    fn the_runtime_space_names_pin_too() {
        assert_eq!(
            Pin::parse("1").unwrap().kinds,
            Some(&[SpaceKind::Thread][..])
        );
        assert_eq!(
            Pin::parse("t3").unwrap().kinds,
            Some(&[SpaceKind::Thread][..])
        );
        assert_eq!(
            Pin::parse("local").unwrap().kinds,
            Some(&[SpaceKind::Thread][..])
        );
        assert_eq!(
            Pin::parse("p2").unwrap().kinds,
            Some(&[SpaceKind::Process][..])
        );
        assert_eq!(
            Pin::parse("1,p2").unwrap().kinds,
            Some(&[SpaceKind::Thread][..])
        );
        assert_eq!(
            Pin::parse("kernel").unwrap().kinds,
            Some(&[SpaceKind::Kernel][..])
        );
        assert!(Pin::parse("t").is_err() && Pin::parse("x9").is_err());
    }
}
