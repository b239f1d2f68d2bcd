//! What the worker tells the daemon while its run runs: the counters and the graph.

use crate::Out;
use daemon::proto::{self, FromWorker, NodeCounters};
use runplan::live::Edits;
use std::sync::atomic::{AtomicU32, Ordering};

pub fn counters(nodes: &[dataplane::runtime::NodeReport]) -> Vec<NodeCounters> {
    nodes
        .iter()
        .map(|r| NodeCounters {
            label: r.label.clone(),
            blocks_in: r.counters.blocks_in,
            bytes_in: r.counters.bytes_in,
            blocks_out: r.counters.blocks_out,
            bytes_out: r.counters.bytes_out,
            drops: r.counters.drops,
            lost: r.counters.lost,
            made: r.counters.made,
            ended: r.counters.ended,
            classes: r.classes.clone(),
            space: r.space.clone(),
        })
        .collect()
}

/// The arcs of a run's table between the nodes the user wrote, each with what it carried
/// and, where it crosses spaces, its channel's rings (see `proto::ArcCounters`); arcs
/// into the run's own sinks and into channels nobody reported the other side of left out.
pub fn arcs(t: &dataplane::spaces::SpacesReport) -> Vec<proto::ArcCounters> {
    t.arcs
        .iter()
        .filter_map(|a| match &a.to {
            dataplane::ArcTarget::Node(to) => Some(proto::ArcCounters {
                from: a.from.clone(),
                to: to.clone(),
                blocks: a.carried.blocks,
                bytes: a.carried.bytes,
                ring: t.gauge_of(a),
            }),
            _ => None,
        })
        .collect()
}

/// Send the graph if it changed since `shown` (always, with `shown` None and no memory:
/// after an edit).
pub fn send_graph(
    out: &Out,
    edits: &Edits,
    mode: &AtomicU32,
    shown: &mut Option<Vec<proto::GraphNode>>,
) {
    let nodes = edits.graph();
    let mode = mode.load(Ordering::Relaxed);
    if shown.as_ref() == Some(&nodes) || nodes.is_empty() {
        return;
    }
    if out
        .tell(FromWorker::Graph {
            nodes: nodes.clone(),
            mode,
        })
        .is_ok()
    {
        *shown = Some(nodes);
    }
}
