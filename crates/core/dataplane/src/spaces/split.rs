//! A placed graph cut into one graph per space: arcs between spaces become channel
//! endpoints (`__egress`/`__ingress` nodes), and [`WithChannels`] is the factory that hands
//! each endpoint its channel (and makes the prefix-sharing `__publish`/`__subscribe`
//! filters). Also the channel configuration an arc asks for by its nodes' hints.

use super::place::{Placement, SpaceId};
use crate::channel::ChannelConfig;
use crate::filter::{Args, Filter, Replication};
use crate::runtime::Factory;
use lang::{Edge, Graph, Hint, Node, NodeKind, Selector, Span};
use std::collections::HashMap;
use std::sync::Mutex;

pub(crate) use crate::runtime::{EGRESS, INGRESS};
pub use crate::runtime::{PUBLISH, SUBSCRIBE};

/// Stands in for `__publish` when another live run publishes the same key already (two
/// runs started at once), or the stream cannot be published (a name taken by another
/// user): this run's stream simply is not offered.
struct Unpublished;

impl Filter for Unpublished {
    fn process(&mut self, _: &mut crate::filter::Ctx<'_>, _: &mut crate::filter::Batch) {}
}

/// One space's share of the graph: its nodes (renumbered), with channel endpoints where
/// arcs leave or enter, and for each of its nodes the original node id.
pub(super) struct Part {
    pub(super) graph: Graph,
    pub(super) origin: Vec<Option<usize>>,
}

impl Part {
    /// Its nodes' labels as the whole run labels them ([`crate::runtime::run_labels`] of
    /// the run's graph, `run`); empty for the channel endpoints (labelled in the space).
    pub(super) fn labels(&self, run: &[String]) -> Vec<String> {
        self.origin
            .iter()
            .map(|o| o.and_then(|i| run.get(i).cloned()).unwrap_or_default())
            .collect()
    }
}

fn endpoint(kind: &str, ch: usize) -> Node {
    Node {
        id: 0,
        kind: NodeKind::Filter {
            filter: kind.into(),
            params: vec![],
            options: vec![("ch".into(), ch.to_string())],
            place: Default::default(),
        },
        span: Span::default(),
        hints: vec![],
        name: None,
    }
}

/// Split `g` by `p`: per space its graph; channel k joins the k-th cross-space arc.
pub(super) fn split<'g>(g: &'g Graph, p: &Placement) -> (HashMap<SpaceId, Part>, Vec<&'g Edge>) {
    let mut parts: HashMap<SpaceId, Part> = HashMap::new();
    let mut local_id = vec![0usize; g.nodes.len()];
    for node in &g.nodes {
        let part = parts.entry(p.space[node.id]).or_insert_with(|| Part {
            graph: Graph {
                nodes: vec![],
                edges: vec![],
            },
            origin: vec![],
        });
        local_id[node.id] = part.graph.nodes.len();
        part.graph.nodes.push(Node {
            id: part.graph.nodes.len(),
            ..node.clone()
        });
        part.origin.push(Some(node.id));
    }
    let mut cross = Vec::new();
    for e in &g.edges {
        let (a, b) = (p.space[e.from], p.space[e.to]);
        if a == b {
            let part = parts.get_mut(&a).expect("placed");
            part.graph.edges.push(Edge {
                from: local_id[e.from],
                to: local_id[e.to],
                ..e.clone()
            });
            continue;
        }
        let ch = cross.len();
        cross.push(e);
        let pa = parts.get_mut(&a).expect("placed");
        let out = pa.graph.nodes.len();
        pa.graph.nodes.push(Node {
            id: out,
            ..endpoint(EGRESS, ch)
        });
        pa.origin.push(None);
        pa.graph.edges.push(Edge {
            from: local_id[e.from],
            to: out,
            ..e.clone()
        });
        let pb = parts.get_mut(&b).expect("placed");
        let inp = pb.graph.nodes.len();
        pb.graph.nodes.push(Node {
            id: inp,
            ..endpoint(INGRESS, ch)
        });
        pb.origin.push(None);
        // Exactly what crossed goes on, classes kept.
        pb.graph.edges.push(Edge {
            from: inp,
            to: local_id[e.to],
            sel: Selector::All,
            span: e.span,
        });
    }
    (parts, cross)
}

/// The library's factory plus the channel endpoints of this run.
pub(super) struct WithChannels<'a> {
    pub(super) inner: &'a dyn Factory,
    pub(super) endpoints: Mutex<HashMap<(bool, usize), Box<dyn Filter>>>,
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
                    // Publishing is an offer to other runs: whatever stands in its way (a
                    // name another user took, /dev/shm full), this run goes on unshared.
                    Err(e) => {
                        eprintln!("streamline: not publishing the shared prefix ({e}); this run goes on without offering it to others");
                        Ok(Box::new(Unpublished))
                    }
                };
            }
            SUBSCRIBE => {
                let key = args.require("key", None)?;
                return crate::channel::subscribe(key)
                    .map(|i| Box::new(i) as Box<dyn Filter>)
                    .map_err(|e| crate::FilterError::Ring {
                        what: format!("cannot subscribe to the shared prefix {key}"),
                        source: e,
                    });
            }
            _ => return self.inner.make(name, args),
        };
        let ch: usize = args.parse("ch", None, usize::MAX)?;
        self.endpoints
            .lock()
            .expect("not poisoned")
            .remove(&(egress, ch))
            .ok_or_else(|| crate::FilterError::Rule(format!("channel {ch} has no {name} endpoint")))
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
    fn keeps_blocks(&self, name: &str) -> bool {
        self.inner.keeps_blocks(name)
    }
}

/// The channel configuration of arc `e`: set by the consuming node's hints.
pub(super) fn channel_config(g: &Graph, e: &Edge, default: ChannelConfig) -> ChannelConfig {
    let to = &g.nodes[e.to];
    let mut cfg = if to.hints.contains(&Hint::Lockstep) {
        ChannelConfig::lockstep()
    } else if to.hints.contains(&Hint::Latency) {
        ChannelConfig::latency()
    } else if to.hints.contains(&Hint::Throughput) || to.hints.contains(&Hint::Quiet) {
        // A quiet part of the graph is woken seldom: large batches, up to the latency bound.
        ChannelConfig::throughput()
    } else {
        default
    };
    // `size=` on the producing filter (thesis Table 3.2): the bytes its stream buffers.
    if let NodeKind::Filter { options, .. } = &g.nodes[e.from].kind {
        if let Some(s) = crate::runtime::size_option(options) {
            cfg.data = (s as usize).next_power_of_two().max(1 << 16);
        }
    }
    cfg
}
