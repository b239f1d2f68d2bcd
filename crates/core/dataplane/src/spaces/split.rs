//! A placed graph cut into one graph per space ([`Layout`]): arcs between spaces become
//! channel endpoints (`__egress`/`__ingress` nodes), and [`WithChannels`] is the factory that hands
//! each endpoint its channel (and makes the prefix-sharing `__publish`/`__subscribe`
//! filters). Also the channel configuration an arc asks for by its nodes' hints.

use super::place::{check_joins, labels_of, place, replicate, Placement, SpaceId, SpaceKind};
use crate::channel::ChannelConfig;
use crate::filter::{Args, Filter, Replication};
use crate::runtime::{base_name, span_of, BuildError, Factory};
use lang::{Edge, Graph, Hint, Node, NodeKind, Selector, Span};
use std::collections::{BTreeMap, HashMap};
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

/// A run's graph placed on its spaces and cut into one part per space: what a build
/// realizes. Made once per run ([`Layout::place`]: replication, the placement rule, the
/// join checks, the cut), by the run's plan (`runplan`) or, for callers that build a graph
/// without one, by [`super::Spaces::build`]; a process space receives its [`Share`] of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    /// The graph as it runs (rewritten and replicated): node ids final.
    pub graph: Graph,
    /// Each node's space, and each space's kind.
    pub placement: Placement,
    /// The arcs between spaces: channel k (`sl-chK`) carries `channels[k]`.
    pub channels: Vec<Channel>,
    /// Per space its part.
    pub parts: BTreeMap<SpaceId, Part>,
    /// Every node's label in the run ([`crate::runtime::run_labels`]).
    pub labels: Vec<String>,
}

/// One arc between two spaces, as the channel that carries it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Channel {
    pub edge: Edge,
    pub from: SpaceId,
    pub to: SpaceId,
    /// Its batching and buffer, from its nodes' hints and `size=` ([`channel_config`]).
    pub config: ChannelConfig,
    /// The producing and the consuming node's names and spans (errors name them).
    pub producer: (String, Option<Span>),
    pub consumer: (String, Option<Span>),
    /// The consumer polls it busily (`@busy`, `@lockstep`).
    pub busy: bool,
}

/// One space's share of the graph: its nodes (renumbered), with channel endpoints where
/// arcs leave or enter, for each of its nodes the original node id, and their labels as
/// the whole run labels them (empty for the channel endpoints, labelled in the space).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Part {
    pub graph: Graph,
    pub origin: Vec<Option<usize>>,
    pub labels: Vec<String>,
    /// Its filters' names (`gzip, count`: messages about the whole space).
    pub names: String,
}

/// What a process space receives from its parent, as a typed value: its part of the
/// run and the channels into and out of it (by channel number), and its scratch size.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Share {
    pub space: SpaceId,
    pub part: Part,
    pub channels: Vec<(usize, Channel)>,
    pub scratch: usize,
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

impl Layout {
    /// Place `g`: replicate its `space=A,B,...` filters, apply the placement rule, refuse
    /// joins whose result would depend on timing, and cut it by space (channel wake-ups
    /// as the consumers' hints say, `cfg` otherwise).
    pub fn place(
        g: &Graph,
        factory: &dyn Factory,
        cfg: ChannelConfig,
    ) -> Result<Layout, BuildError> {
        let g = replicate(g, factory)?;
        let placement = place(&g)?;
        check_joins(&g, &placement, factory)?;
        Ok(Layout::cut(g, placement, cfg, factory))
    }

    /// Whether space `s` runs in this process (not a process space).
    pub fn here(&self, s: SpaceId) -> bool {
        self.placement.kind(s) != SpaceKind::Process
    }

    /// The share process space `id` receives.
    pub fn share(&self, id: SpaceId, scratch: usize) -> Option<Share> {
        let channels = self.channels.iter().enumerate();
        Some(Share {
            space: id,
            part: self.parts.get(&id)?.clone(),
            channels: channels
                .filter(|(_, c)| c.from == id || c.to == id)
                .map(|(k, c)| (k, c.clone()))
                .collect(),
            scratch,
        })
    }

    /// Split `g` by `p`: per space its graph; channel k joins the k-th cross-space arc.
    fn cut(g: Graph, p: Placement, cfg: ChannelConfig, factory: &dyn Factory) -> Layout {
        let labels = crate::runtime::run_labels(&g);
        let mut parts: BTreeMap<SpaceId, Part> = BTreeMap::new();
        let mut local_id = vec![0usize; g.nodes.len()];
        for node in &g.nodes {
            let part = parts.entry(p.space[node.id]).or_insert_with(|| Part {
                graph: Graph {
                    nodes: vec![],
                    edges: vec![],
                },
                origin: vec![],
                labels: vec![],
                names: labels_of(&g, &p, p.space[node.id]),
            });
            local_id[node.id] = part.graph.nodes.len();
            part.graph.nodes.push(Node {
                id: part.graph.nodes.len(),
                ..node.clone()
            });
            part.origin.push(Some(node.id));
            part.labels.push(labels[node.id].clone());
        }
        let mut channels = Vec::new();
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
            let ch = channels.len();
            let (from, to) = (&g.nodes[e.from], &g.nodes[e.to]);
            channels.push(Channel {
                edge: e.clone(),
                from: a,
                to: b,
                config: channel_config(&g, e, cfg, factory),
                producer: (base_name(from), span_of(from)),
                consumer: (base_name(to), span_of(to)),
                busy: to
                    .hints
                    .iter()
                    .any(|h| matches!(h, Hint::Busy | Hint::Lockstep)),
            });
            let pa = parts.get_mut(&a).expect("placed");
            let out = pa.graph.nodes.len();
            pa.graph.nodes.push(Node {
                id: out,
                ..endpoint(EGRESS, ch)
            });
            pa.origin.push(None);
            pa.labels.push(String::new());
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
            pb.labels.push(String::new());
            // Exactly what crossed goes on, classes kept.
            pb.graph.edges.push(Edge {
                from: inp,
                to: local_id[e.to],
                sel: Selector::All,
                span: e.span,
            });
        }
        Layout {
            graph: g,
            placement: p,
            channels,
            parts,
            labels,
        }
    }
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
fn channel_config(
    g: &Graph,
    e: &Edge,
    default: ChannelConfig,
    factory: &dyn Factory,
) -> ChannelConfig {
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
    // `size=` on the producing filter (thesis Table 3.2): the bytes its stream buffers
    // (unless the filter's own `size=`, as `gen`'s block size, is meant).
    if let Some(s) = crate::runtime::size_option(&g.nodes[e.from], factory) {
        cfg.data = (s as usize).next_power_of_two().max(1 << 16);
    }
    cfg
}
