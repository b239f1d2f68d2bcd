//! What the web view and `/metrics` show of the runs: one snapshot per request, filtered
//! as `ps` filters (a user sees their own runs; root sees all), each run's graph as its
//! worker last described it joined with its latest counters.

use crate::policy::Cred;
use crate::proto::{ArcCounters, GraphNode, NodeCounters, RingGauge, RunInfo, SpaceSite};
use crate::server::Daemon;
use serde::Serialize;

/// A run as the page draws it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunView {
    pub run: u64,
    pub uid: u32,
    pub user: String,
    pub state: String,
    pub pipeline: String,
    /// Where its filters run now, by space (`ps`'s PLACEMENT).
    pub layout: String,
    pub uptime_s: f64,
    /// Blocks per second into the sinks over the worker's last interval.
    pub rate: f64,
    pub edits: u64,
    pub last_edit: String,
    pub nodes: Vec<NodeView>,
    /// The arcs between them: what each carried, and its channel's rings where it crosses
    /// spaces.
    pub edges: Vec<EdgeView>,
    /// Where its spaces run (the CPU each last ran on), on `host`.
    pub sites: Vec<SpaceSite>,
    pub host: String,
}

/// An arc of a run's graph.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EdgeView {
    pub from: String,
    pub to: String,
    pub blocks: u64,
    pub bytes: u64,
    /// `None`: within one space, a function call.
    pub ring: Option<RingGauge>,
}

/// A node of a run: its place in the graph and its counters.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct NodeView {
    pub label: String,
    /// The filter's text (`sample every=50`), secrets redacted as the worker reports them.
    pub filter: String,
    /// The filter's base name (`sample`): the `filter` label of the metrics.
    pub name: String,
    pub options: Vec<(String, String)>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub source: bool,
    /// The spaces it runs in (`0`, `1,2`, `p3`).
    pub space: String,
    pub blocks_in: u64,
    pub bytes_in: u64,
    pub blocks_out: u64,
    pub bytes_out: u64,
    pub drops: u64,
    /// A source's losses before it could take them (the kernel's ring-full drops).
    pub lost: u64,
    pub classes: Vec<u16>,
}

/// A label's filter when no graph names it: the label without `:name`, `#k`, `@space`.
fn base_of_label(l: &str) -> String {
    let (l, _) = protocol::graph::user_label(l);
    let l = l.split(':').next().unwrap_or(l);
    l.split('#').next().unwrap_or(l).to_string()
}

/// One run's nodes: the graph's, in its order, with the counters of the same label; rows
/// of the counters that the graph does not (yet) have follow, without arcs.
pub fn join(graph: &[GraphNode], counters: &[NodeCounters]) -> Vec<NodeView> {
    let mut out: Vec<NodeView> = graph
        .iter()
        .map(|g| NodeView {
            label: g.label.clone(),
            filter: g.filter.clone(),
            name: g
                .filter
                .split_whitespace()
                .next()
                .map(str::to_string)
                .unwrap_or_else(|| base_of_label(&g.label)),
            options: g.options.clone(),
            inputs: g.inputs.clone(),
            outputs: g.outputs.clone(),
            source: g.source,
            space: g.space.clone(),
            ..Default::default()
        })
        .collect();
    for c in counters {
        let k = match out.iter().position(|n| n.label == c.label) {
            Some(k) => k,
            None => {
                out.push(NodeView {
                    label: c.label.clone(),
                    name: base_of_label(&c.label),
                    filter: base_of_label(&c.label),
                    ..Default::default()
                });
                out.len() - 1
            }
        };
        let n = &mut out[k];
        n.blocks_in = c.blocks_in;
        n.bytes_in = c.bytes_in;
        n.blocks_out = c.blocks_out;
        n.bytes_out = c.bytes_out;
        n.drops = c.drops;
        n.lost = c.lost;
        n.classes = c.classes.clone();
        if !c.space.is_empty() {
            n.space = c.space.clone();
        }
    }
    out
}

/// The edges of a run: the graph's arcs with the counts and rings of the worker's arcs
/// between the same nodes, and the worker's arcs the graph lacks (to and from process
/// spaces, whose graphs stay in their processes) added to `nodes`' inputs and outputs.
pub fn edges(nodes: &mut [NodeView], arcs: &[ArcCounters]) -> Vec<EdgeView> {
    let mut out: Vec<EdgeView> = Vec::new();
    for n in nodes.iter() {
        for o in &n.outputs {
            out.push(EdgeView {
                from: n.label.clone(),
                to: o.clone(),
                blocks: 0,
                bytes: 0,
                ring: None,
            });
        }
    }
    for a in arcs {
        let k = match out.iter().position(|e| e.from == a.from && e.to == a.to) {
            Some(k) => k,
            None => {
                let (Some(f), Some(t)) = (
                    nodes.iter().position(|n| n.label == a.from),
                    nodes.iter().position(|n| n.label == a.to),
                ) else {
                    continue;
                };
                nodes[f].outputs.push(a.to.clone());
                nodes[t].inputs.push(a.from.clone());
                out.push(EdgeView {
                    from: a.from.clone(),
                    to: a.to.clone(),
                    blocks: 0,
                    bytes: 0,
                    ring: None,
                });
                out.len() - 1
            }
        };
        let e = &mut out[k];
        e.blocks += a.blocks;
        e.bytes += a.bytes;
        e.ring = a.ring;
    }
    out
}

/// This host's name, as the kernel has it.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

fn view_of(
    info: RunInfo,
    graph: &[GraphNode],
    arcs: &[ArcCounters],
    sites: Vec<SpaceSite>,
    host: &str,
) -> RunView {
    let mut nodes = join(graph, &info.nodes);
    let edges = edges(&mut nodes, arcs);
    RunView {
        nodes,
        edges,
        sites,
        host: host.to_string(),
        run: info.run,
        uid: info.uid,
        user: info.user,
        state: info.state,
        pipeline: info.pipeline,
        layout: info.layout,
        uptime_s: info.uptime_s,
        rate: info.rate,
        edits: info.edits,
        last_edit: info.last_edit,
    }
}

/// The runs `who` may see, as `ps` shows them to `who` (failed ones kept a while
/// included, without a graph).
pub fn runs(d: &Daemon, who: &Cred) -> Vec<RunView> {
    let host = host();
    d.ps(who)
        .into_iter()
        .map(|info| {
            let graph = d.run_graph(info.run).unwrap_or_default();
            let (arcs, sites) = d.run_arcs(info.run).unwrap_or_default();
            view_of(info, &graph, &arcs, sites, &host)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_join_the_graph_by_label() {
        let g = vec![
            GraphNode {
                label: "gen".into(),
                filter: "gen rate=100".into(),
                options: vec![("rate".into(), "100".into())],
                inputs: vec![],
                outputs: vec!["count:c".into()],
                source: true,
                space: "0".into(),
            },
            GraphNode {
                label: "count:c".into(),
                filter: "count name=c".into(),
                options: vec![],
                inputs: vec!["gen".into()],
                outputs: vec![],
                source: false,
                space: "0".into(),
            },
        ];
        let c = vec![
            NodeCounters {
                label: "count:c".into(),
                blocks_in: 5,
                space: "1".into(),
                ..Default::default()
            },
            NodeCounters {
                label: "sample#2@p3".into(),
                blocks_in: 7,
                ..Default::default()
            },
        ];
        let v = join(&g, &c);
        assert_eq!(v.len(), 3);
        assert_eq!((v[0].name.as_str(), v[0].blocks_in), ("gen", 0));
        assert_eq!(
            (v[1].name.as_str(), v[1].blocks_in, v[1].space.as_str()),
            ("count", 5, "1")
        );
        assert_eq!((v[2].name.as_str(), v[2].blocks_in), ("sample", 7));
        assert!(v[2].inputs.is_empty());
    }

    #[test]
    fn arcs_count_the_graphs_edges_and_add_those_to_process_spaces() {
        let node = |label: &str, outputs: &[&str]| NodeView {
            label: label.into(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            inputs: vec![],
            ..Default::default()
        };
        // gen -> sample in this process; sample -> count:b crosses into process space p2,
        // whose graph the worker does not have.
        let mut nodes = vec![
            node("gen", &["sample"]),
            node("sample", &[]),
            node("count:b", &[]),
        ];
        nodes[1].inputs = vec!["gen".into()];
        let ring = RingGauge {
            tags_used: 1024,
            tags_size: 4096,
            readers: 1,
            ..Default::default()
        };
        let arcs = vec![
            ArcCounters {
                from: "gen".into(),
                to: "sample".into(),
                blocks: 10,
                bytes: 100,
                ring: None,
            },
            ArcCounters {
                from: "sample".into(),
                to: "count:b".into(),
                blocks: 5,
                bytes: 50,
                ring: Some(ring),
            },
            ArcCounters {
                from: "sample".into(),
                to: "nobody".into(),
                blocks: 1,
                bytes: 1,
                ring: None,
            },
        ];
        let e = edges(&mut nodes, &arcs);
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].blocks, e[0].ring), (10, None));
        assert_eq!(
            (e[1].from.as_str(), e[1].to.as_str(), e[1].blocks),
            ("sample", "count:b", 5)
        );
        assert_eq!(e[1].ring.map(|r| r.fill()), Some(0.25));
        assert_eq!(nodes[1].outputs, ["count:b"]);
        assert_eq!(nodes[2].inputs, ["sample"]);
    }
}
