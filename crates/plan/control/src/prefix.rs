//! Prefix sharing (thesis 6.4): a second pipeline that starts with the same stateless
//! filters on the same source reuses the running instances instead of starting its own.
//! The registry is a trie of running instances keyed by (parent instance, filter
//! descriptor) with reference counts; a stateful filter is never shared, and nothing
//! after it is either.
//!
//! Between runs of `streamline` (no daemon yet), the names under /dev/shm are the
//! registry: a run whose pipeline starts with a live capture (`rx`) and stateless filters
//! publishes that prefix's stream under a key made from its canonical text
//! ([`SharedPrefix`], [`Share::Publish`]); a later run whose pipeline starts the same way
//! subscribes to it instead of capturing again ([`Share::Subscribe`]), taking the longest
//! published prefix. [`apply`] rewrites a graph for either role; the runtime's
//! `__publish` / `__subscribe` endpoints are `dataplane::channel::{publish, subscribe}`.

use std::collections::HashMap;

use crate::library::Filters;

/// A filter as far as sharing is concerned: name, parameters and options, canonical.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FilterKey {
    pub desc: String,
    /// Stateless filters compute the same output for the same input whoever asks.
    pub stateless: bool,
}

impl FilterKey {
    pub fn new(desc: impl Into<String>, stateless: bool) -> FilterKey {
        FilterKey {
            desc: desc.into(),
            stateless,
        }
    }
}

pub type InstanceId = usize;

#[derive(Clone, Debug)]
struct Instance {
    parent: Option<InstanceId>,
    key: FilterKey,
    refs: usize,
}

/// What attaching a pipeline did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    /// One instance per filter of the pipeline, in order.
    pub instances: Vec<InstanceId>,
    /// How many leading filters reused running instances.
    pub shared: usize,
}

/// The running instances.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    instances: HashMap<InstanceId, Instance>,
    index: HashMap<(Option<InstanceId>, FilterKey), InstanceId>,
    next: InstanceId,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Number of running instances.
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// Attaches a linear pipeline (source first). Leading stateless filters whose whole
    /// prefix is already running are reused; the rest are new instances.
    pub fn attach(&mut self, pipeline: &[FilterKey]) -> Attached {
        let mut parent = None;
        let mut sharing = true;
        let mut shared = 0;
        let mut out = Vec::with_capacity(pipeline.len());
        for key in pipeline {
            let reuse = if sharing && key.stateless {
                self.index.get(&(parent, key.clone())).copied()
            } else {
                None
            };
            let id = match reuse {
                Some(id) => {
                    self.instances
                        .get_mut(&id)
                        .expect("indexed instance exists")
                        .refs += 1;
                    shared += 1;
                    id
                }
                None => {
                    sharing = false;
                    let id = self.next;
                    self.next += 1;
                    self.instances.insert(
                        id,
                        Instance {
                            parent,
                            key: key.clone(),
                            refs: 1,
                        },
                    );
                    if key.stateless {
                        self.index.insert((parent, key.clone()), id);
                    }
                    id
                }
            };
            out.push(id);
            parent = Some(id);
        }
        Attached {
            instances: out,
            shared,
        }
    }

    /// Detaches a pipeline: drops one reference from each of its instances and stops
    /// those no one uses any more. Returns the stopped instances, last first.
    pub fn detach(&mut self, attached: &Attached) -> Vec<InstanceId> {
        let mut stopped = Vec::new();
        for &id in attached.instances.iter().rev() {
            let Some(inst) = self.instances.get_mut(&id) else {
                continue;
            };
            inst.refs -= 1;
            if inst.refs == 0 {
                let inst = self.instances.remove(&id).expect("present");
                self.index.remove(&(inst.parent, inst.key));
                stopped.push(id);
            }
        }
        stopped
    }

    pub fn refs(&self, id: InstanceId) -> usize {
        self.instances.get(&id).map_or(0, |i| i.refs)
    }
}

/// Is a native filter stateless (shareable)? Header and metadata classifiers and
/// stateless inspectors are; counters, dedup, reassembly, editing with keys and sinks
/// are not. `filters` holds the declarations (access class) this reads.
pub fn stateless(filters: &Filters, filter: &str) -> bool {
    use dataplane::Access::*;
    if filter == "rx" || filter == "bpf" {
        return true;
    }
    match filters.find(filter) {
        Some(s) => {
            matches!(s.access, Metadata | Classification | Inspection | Source)
                && !matches!(filter, "dedup" | "tcpstream" | "sample")
        }
        None => false,
    }
}

/// A prefix of a pipeline that runs can share: a live capture and the stateless filters
/// after it, in a chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedPrefix {
    /// The chain's nodes, source first.
    pub nodes: Vec<usize>,
    /// Canonical text (`rx dev=eth0 | bpf "udp"`): what must match.
    pub text: String,
    /// Hex of a hash of `text`: the name the stream is published under.
    pub key: String,
}

/// Options that change how a filter runs, not what it outputs.
/// (A node's typed placement, [`lang::Placement`], is never part of its content.)
const NOT_CONTENT: &[&str] = &["queues", "latency", "blocks", "share", "size"];

/// The `share=` control option of a node (thesis Table 3.2): `yes`, `no`, or `auto` (the
/// default: share stateless filters).
fn share_option(n: &lang::Node) -> &str {
    match &n.kind {
        lang::NodeKind::Filter { options, .. } => options
            .iter()
            .find(|(k, _)| k == "share")
            .map_or("auto", |(_, v)| v.as_str()),
        _ => "auto",
    }
}

fn canonical(n: &lang::Node) -> Option<String> {
    let lang::NodeKind::Filter {
        filter,
        params,
        options,
        ..
    } = &n.kind
    else {
        return None;
    };
    let mut t = filter.clone();
    for p in params {
        t += &format!(" {p:?}");
    }
    let mut opts: Vec<&(String, String)> = options
        .iter()
        .filter(|(k, _)| !NOT_CONTENT.contains(&k.as_str()))
        .collect();
    opts.sort();
    for (k, v) in opts {
        t += &format!(" {k}={v:?}");
    }
    Some(t)
}

/// The shareable prefixes of `g`, longest first: from its first live capture source
/// (`rx`) along single arcs through stateless filters. `share=no` on a node ends the
/// prefix before it (on `rx`: the run shares nothing); `share=yes` lets a filter that
/// keeps state in (a subscriber then sees its output from the moment it subscribes).
pub fn shareable(filters: &Filters, g: &lang::Graph) -> Vec<SharedPrefix> {
    use lang::{NodeKind, Selector};
    let Some(src) = g.nodes.iter().find(|n| {
        matches!(&n.kind, NodeKind::Filter { filter, .. } if filter == "rx")
            && g.in_edges(n.id).next().is_none()
    }) else {
        return Vec::new();
    };
    if share_option(src) == "no" {
        return Vec::new();
    }
    let mut chain = vec![src.id];
    loop {
        let last = *chain.last().expect("source");
        let outs: Vec<_> = g
            .out_edges(last)
            .filter(|e| e.sel == Selector::Default)
            .collect();
        let [e] = outs.as_slice() else { break };
        let next = &g.nodes[e.to];
        let ok = g.in_edges(next.id).count() == 1
            && g.out_edges(next.id).next().is_some()
            && match share_option(next) {
                "no" => false,
                "yes" => matches!(&next.kind, NodeKind::Filter { .. }),
                _ => {
                    matches!(&next.kind, NodeKind::Filter { filter, .. } if stateless(filters, filter))
                }
            };
        if !ok {
            break;
        }
        chain.push(next.id);
    }
    let mut out = Vec::new();
    for len in (1..=chain.len()).rev() {
        let Some(parts) = chain[..len]
            .iter()
            .map(|&i| canonical(&g.nodes[i]))
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let text = parts.join(" | ");
        // A stable name, not a security boundary (the rings are 0600).
        let h = dataplane::hash::fnv1a(text.as_bytes());
        out.push(SharedPrefix {
            nodes: chain[..len].to_vec(),
            text,
            key: format!("{h:016x}"),
        });
    }
    out
}

/// Filters that run in the kernel when they follow `rx` directly (their declaration says,
/// `FilterSpec::runs_after_rx_in_kernel`): a subscription must cover them, or the subscriber
/// would trade its kernel filter for a copy of every frame; and a run must not publish
/// the bare `rx` stream when such a filter changes what its socket delivers.
///
/// The shortest prefix worth subscribing to: `rx` and the kernel filter after it, if any.
pub fn min_shared_len(filters: &Filters, g: &lang::Graph, p: &SharedPrefix) -> usize {
    let second = g.out_edges(p.nodes[0]).next().map(|e| &g.nodes[e.to].kind);
    match second {
        Some(lang::NodeKind::Filter { filter, place, .. })
            if filters.runs_after_rx_in_kernel(filter) && place.side != Some(lang::Side::User) =>
        {
            2
        }
        _ => 1,
    }
}

/// A run's role in sharing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Share {
    /// Offer the prefix's stream under `key`.
    Publish { key: String },
    /// Take the first `len` nodes' stream from the run publishing `key`.
    Subscribe { key: String, len: usize },
}

impl Share {
    /// `publish:KEY` / `subscribe:KEY:LEN` (what a run hands its process spaces).
    pub fn to_arg(&self) -> String {
        match self {
            Share::Publish { key } => format!("publish:{key}"),
            Share::Subscribe { key, len } => format!("subscribe:{key}:{len}"),
        }
    }

    pub fn parse(s: &str) -> Result<Share, String> {
        let bad = || format!("'{s}': expected publish:KEY or subscribe:KEY:LEN");
        match s.split(':').collect::<Vec<_>>().as_slice() {
            ["publish", key] if !key.is_empty() => Ok(Share::Publish {
                key: key.to_string(),
            }),
            ["subscribe", key, len] if !key.is_empty() => Ok(Share::Subscribe {
                key: key.to_string(),
                len: len.parse().map_err(|_| bad())?,
            }),
            _ => Err(bad()),
        }
    }
}

/// `g` rewritten for its role: publishing adds a `__publish key=K` sink on the prefix's
/// last node; subscribing replaces the prefix's nodes by one `__subscribe key=K` source
/// (node ids after them shift down). Deterministic, so a run and its process spaces agree.
pub fn apply(filters: &Filters, g: &lang::Graph, share: &Share) -> Result<lang::Graph, String> {
    use lang::{Edge, Node, NodeKind, Selector};
    let prefixes = shareable(filters, g);
    let filter = |name: &str, key: &str| NodeKind::Filter {
        filter: name.to_string(),
        params: Vec::new(),
        options: vec![("key".into(), key.to_string())],
        place: Default::default(),
    };
    match share {
        Share::Publish { key } => {
            let p = prefixes
                .iter()
                .find(|p| &p.key == key)
                .ok_or_else(|| format!("no prefix of this pipeline has key {key}"))?;
            let last = *p.nodes.last().expect("non-empty");
            let mut g = g.clone();
            let id = g.nodes.len();
            let span = g.nodes[last].span;
            g.nodes.push(Node {
                id,
                kind: filter("__publish", key),
                span,
                hints: Vec::new(),
                name: None,
            });
            g.edges.push(Edge {
                from: last,
                to: id,
                sel: Selector::Default,
                span,
            });
            Ok(g)
        }
        Share::Subscribe { key, len } => {
            let p = prefixes
                .iter()
                .find(|p| &p.key == key && p.nodes.len() == *len)
                .ok_or_else(|| {
                    format!("no prefix of {len} filters of this pipeline has key {key}")
                })?;
            let (first, last) = (p.nodes[0], *p.nodes.last().expect("non-empty"));
            let gone: Vec<usize> = p.nodes[1..].to_vec();
            let map = |i: usize| i - gone.iter().filter(|&&x| x < i).count();
            let mut nodes = Vec::new();
            for n in &g.nodes {
                if gone.contains(&n.id) {
                    continue;
                }
                let mut n = n.clone();
                if n.id == first {
                    n.kind = filter("__subscribe", key);
                    // The run's table shows the subscription as the prefix's last node,
                    // whose stream it receives (`dataplane::runtime::run_labels`).
                    if let (NodeKind::Filter { options, .. }, NodeKind::Filter { filter: f, .. }) =
                        (&mut n.kind, &g.nodes[last].kind)
                    {
                        options.push(("as".into(), f.clone()));
                    }
                    n.name = None;
                }
                n.id = map(n.id);
                nodes.push(n);
            }
            let mut edges = Vec::new();
            for e in &g.edges {
                if gone.contains(&e.to) {
                    continue;
                }
                let from = if e.from == last { first } else { e.from };
                edges.push(Edge {
                    from: map(from),
                    to: map(e.to),
                    ..e.clone()
                });
            }
            Ok(lang::Graph { nodes, edges })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::native;

    fn parse(text: &str) -> lang::Graph {
        lang::parse(text, &crate::model::PlanResolver(&native())).unwrap_or_else(|d| panic!("{d}"))
    }

    #[test]
    fn shareable_prefixes_stop_at_state_and_ignore_how_filters_run() {
        let g = parse("rx dev=eth0 latency=1 | bpf \"udp\" space=1 | ip | count | null");
        let p = shareable(&native(), &g);
        assert_eq!(
            p.iter().map(|p| p.nodes.len()).collect::<Vec<_>>(),
            vec![3, 2, 1]
        );
        assert_eq!(p[1].text, "rx dev=\"eth0\" | bpf \"udp\"");
        // Same content, other placement: the same key.
        let h = parse("rx dev=eth0 | bpf \"udp\" | tcp | count");
        assert_eq!(shareable(&native(), &h)[1].key, p[1].key);
        assert_ne!(
            shareable(&native(), &parse("rx dev=eth1 | bpf \"udp\" | count"))[1].key,
            p[1].key
        );
        // Files are not live captures: not shared.
        assert!(shareable(&native(), &parse("pcapin file=x.pcap | ip | count")).is_empty());
        // A subscription must keep the kernel filter in the kernel.
        assert_eq!(min_shared_len(&native(), &g, &p[0]), 2);
        assert_eq!(
            min_shared_len(&native(), &parse("rx dev=eth0 | ip | count"), &p[0]),
            1
        );
        // The NIC-FIX filters run on the socket too (sample drops frames there).
        let s = parse("rx dev=eth0 | sample 10 | count");
        assert_eq!(
            shareable(&native(), &s)
                .iter()
                .map(|p| p.nodes.len())
                .collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(
            min_shared_len(&native(), &s, &shareable(&native(), &s)[0]),
            2
        );
        assert_eq!(
            min_shared_len(
                &native(),
                &parse("rx dev=eth0 | flowcount placed=user | count"),
                &p[0]
            ),
            1
        );
        // share= (thesis Table 3.2): no ends the prefix, yes admits a stateful filter.
        let lens = |t: &str| {
            shareable(&native(), &parse(t))
                .iter()
                .map(|p| p.nodes.len())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            lens("rx dev=eth0 | bpf \"udp\" | ip share=no | count"),
            vec![2, 1]
        );
        assert_eq!(
            lens("rx dev=eth0 share=no | bpf \"udp\" | count"),
            Vec::<usize>::new()
        );
        assert_eq!(lens("rx dev=eth0 | ip | dedup | count"), vec![2, 1]);
        assert_eq!(
            lens("rx dev=eth0 | ip | dedup share=yes | count"),
            vec![3, 2, 1]
        );
        // How a node is shared does not change what it outputs: the same key.
        assert_eq!(
            shareable(&native(), &parse("rx dev=eth0 share=yes | ip | count"))[0].key,
            shareable(&native(), &parse("rx dev=eth0 | ip | count"))[0].key
        );
    }

    #[test]
    fn publish_and_subscribe_rewrites() {
        let g = parse("rx dev=eth0 | bpf \"udp\" | ip | count");
        let p = &shareable(&native(), &g)[1];
        let pubd = apply(&native(), &g, &Share::Publish { key: p.key.clone() }).unwrap();
        assert_eq!(pubd.nodes.len(), 5);
        assert!(
            pubd.edges.iter().any(|e| e.from == 1 && e.to == 4),
            "publish hangs off bpf"
        );
        let sub = apply(
            &native(),
            &g,
            &Share::Subscribe {
                key: p.key.clone(),
                len: 2,
            },
        )
        .unwrap();
        assert_eq!(sub.nodes.len(), 3);
        assert!(
            matches!(&sub.nodes[0].kind, lang::NodeKind::Filter { filter, .. } if filter == "__subscribe")
        );
        assert_eq!(
            sub.edges.iter().map(|e| (e.from, e.to)).collect::<Vec<_>>(),
            vec![(0, 1), (1, 2)]
        );
        for s in [
            Share::Publish { key: "ab".into() },
            Share::Subscribe {
                key: "cd".into(),
                len: 2,
            },
        ] {
            assert_eq!(Share::parse(&s.to_arg()).unwrap(), s);
        }
        assert!(Share::parse("subscribe:x").is_err());
        assert!(apply(
            &native(),
            &g,
            &Share::Subscribe {
                key: p.key.clone(),
                len: 3
            }
        )
        .is_err());
    }

    fn k(d: &str) -> FilterKey {
        FilterKey::new(d, true)
    }

    #[test]
    fn second_pipeline_reuses_the_common_stateless_prefix() {
        let mut r = Registry::new();
        let a = r.attach(&[
            k("rx eth0"),
            k("ip"),
            k("tcp"),
            FilterKey::new("count", false),
        ]);
        assert_eq!(a.shared, 0);
        assert_eq!(r.len(), 4);
        let b = r.attach(&[k("rx eth0"), k("ip"), k("udp")]);
        assert_eq!(b.shared, 2);
        assert_eq!(&b.instances[..2], &a.instances[..2]);
        assert_ne!(b.instances[2], a.instances[2]);
        assert_eq!(r.len(), 5);
        assert_eq!(r.refs(a.instances[0]), 2);
    }

    #[test]
    fn stateful_filters_and_what_follows_are_never_shared() {
        let mut r = Registry::new();
        let a = r.attach(&[k("rx eth0"), FilterKey::new("dedup", false), k("ip")]);
        let b = r.attach(&[k("rx eth0"), FilterKey::new("dedup", false), k("ip")]);
        assert_eq!(b.shared, 1);
        assert_ne!(a.instances[1], b.instances[1]);
        assert_ne!(a.instances[2], b.instances[2]);
    }

    #[test]
    fn different_sources_or_parameters_share_nothing() {
        let mut r = Registry::new();
        r.attach(&[k("rx eth0"), k("ip")]);
        assert_eq!(r.attach(&[k("rx eth1"), k("ip")]).shared, 0);
        assert_eq!(r.attach(&[k("rx eth0"), k("bpf \"udp\"")]).shared, 1);
    }

    #[test]
    fn detach_stops_only_unused_instances() {
        let mut r = Registry::new();
        let a = r.attach(&[k("rx eth0"), k("ip"), k("tcp")]);
        let b = r.attach(&[k("rx eth0"), k("ip"), k("udp")]);
        let stopped = r.detach(&a);
        assert_eq!(stopped, vec![a.instances[2]]);
        assert_eq!(r.len(), 3);
        let stopped = r.detach(&b);
        assert_eq!(
            stopped,
            vec![b.instances[2], b.instances[1], b.instances[0]]
        );
        assert!(r.is_empty());
        // After everything stopped, a new pipeline starts fresh.
        assert_eq!(r.attach(&[k("rx eth0"), k("ip")]).shared, 0);
    }

    #[test]
    fn statelessness_follows_the_access_class() {
        assert!(stateless(&native(), "ip"));
        assert!(stateless(&native(), "bpf"));
        assert!(!stateless(&native(), "count"));
        assert!(!stateless(&native(), "dedup"));
        assert!(!stateless(&native(), "nosuch"));
    }
}
