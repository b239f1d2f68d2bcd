//! A running run's graph as it crosses the daemon's protocol (the worker's answer, PipesFS,
//! `streamline graph`): one definition, which the dataplane builds and everyone reads.

/// One node of a running run's graph, as `dataplane::EditHandle::graph` and `dataplane::Space::graph` give
/// it: live nodes only (removed ones and channel endpoints are left out), with the arcs as
/// they carry blocks (through a removed node, from its inputs to its outputs; through a
/// channel between two spaces of this process, from the real node to the real node).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GraphNode {
    /// As `dataplane::EditHandle::report` labels it (`count#2`, `count:tail`, `count@1` in a run
    /// of several spaces).
    pub label: String,
    /// The filter's text as built, or as the last `set` or `replace` made it: base name,
    /// parameters and options (`sample every=50`; a Unix command's words; `join mode=all`).
    pub filter: String,
    /// The options of `filter`, in order.
    pub options: Vec<(String, String)>,
    /// Labels of the nodes with an arc into this one.
    pub inputs: Vec<String>,
    /// Labels of the nodes this one has an arc into.
    pub outputs: Vec<String>,
    pub source: bool,
    /// The space it runs in, as labels name it (`1` in `count@1`; `0` in a run of one).
    pub space: String,
}

/// How full a channel's rings are, as its producer sees them (the thesis' per-stream
/// state the page draws on an edge): its tag ring and its data ring, in bytes written and
/// not yet released by every lossless reader, and their sizes; the readers attached; how
/// often the producer waited for room (back-pressure) and woke a sleeping consumer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RingGauge {
    pub tags_used: u64,
    pub tags_size: u64,
    #[serde(default)]
    pub data_used: u64,
    #[serde(default)]
    pub data_size: u64,
    pub readers: u32,
    #[serde(default)]
    pub writer_waits: u64,
    #[serde(default)]
    pub wakeups: u64,
}

impl RingGauge {
    /// The fuller of the two rings, 0.0 to 1.0.
    pub fn fill(&self) -> f64 {
        let f = |used: u64, size: u64| {
            if size == 0 {
                0.0
            } else {
                (used as f64 / size as f64).min(1.0)
            }
        };
        f(self.tags_used, self.tags_size).max(f(self.data_used, self.data_size))
    }

    /// Two channels on one arc (an arc through a space that only passes blocks on): the
    /// fuller one's fill, every reader, every wait.
    pub fn merge(&mut self, o: &RingGauge) {
        if o.fill() > self.fill() {
            (
                self.tags_used,
                self.tags_size,
                self.data_used,
                self.data_size,
            ) = (o.tags_used, o.tags_size, o.data_used, o.data_size);
        }
        self.readers = self.readers.max(o.readers);
        self.writer_waits += o.writer_waits;
        self.wakeups += o.wakeups;
    }
}

/// An arc of a running run between two nodes the user wrote (labelled as the table labels
/// them), with what it carried so far and, where it crosses spaces, its channel's rings.
/// Within one space an arc is a function call and has no ring.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ArcCounters {
    pub from: String,
    pub to: String,
    pub blocks: u64,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingGauge>,
}

/// Where a space of a running run is: the CPU its thread last ran on, whether it is pinned
/// there, and the host (thesis: spaces grouped by CPU and host).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpaceSite {
    /// As `GraphNode::space` names it (`0`, `1`, `p2`).
    pub space: String,
    pub cpu: Option<u32>,
    #[serde(default)]
    pub pinned: bool,
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

/// Name under /dev/shm of a node's exported stream: `streamline.NAME` (tags, an IBuf) and
/// `streamline.NAME.data` (the data its tags point to).
pub fn export_name(node: &str) -> String {
    format!("streamline.{node}")
}

/// A run's graph (`dataplane::EditHandle::graph`) as its table shows it (`dataplane::runtime::fold_internal`):
/// one node per node the user wrote, labelled as in one space (`deflate`, not `deflate@1`,
/// `deflate~2@2`, `deflate~split@0`), its inputs and outputs the user's nodes on the
/// other side of its members' arcs, its filter the user's node's (the member whose label
/// has no `~`), `space` the spaces it runs in (`1,2`; the split and join around copies
/// aside, as in the table). With each, the label of the member whose output is the user
/// node's output (a replica's or capture engine's join; else the node itself): what a tap
/// on the user's node taps. In the order of the nodes' first members.
pub fn fold_graph(nodes: &[GraphNode]) -> (Vec<GraphNode>, Vec<(String, String)>) {
    let user = |l: &str| user_label(l).0.to_string();
    let mut out: Vec<GraphNode> = Vec::new();
    let mut taps: Vec<(String, String)> = Vec::new();
    for n in nodes {
        let u = user(&n.label);
        let around = n.label.contains("~split") || n.label.contains("~join");
        let primary = !n.label.contains('~');
        // Arcs among one node's members are neither into nor out of it.
        let mapped = |v: &[String]| -> Vec<String> {
            v.iter().map(|l| user(l)).filter(|l| *l != u).collect()
        };
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
            g.space = if g.space.is_empty() {
                n.space.clone()
            } else {
                format!("{},{}", g.space, n.space)
            };
        }
        // The tap: the member the user node's blocks leave from, a join before a copy.
        let t = &mut taps[i].1;
        if exit && (n.label.contains("~join") || (primary && !t.contains("~join"))) {
            *t = n.label.clone();
        }
    }
    (out, taps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicated_node_is_one_node_of_the_folded_graph() {
        let g =
            |label: &str, filter: &str, inputs: &[&str], outputs: &[&str], space: &str| GraphNode {
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
            g(
                "deflate~split@0",
                "split",
                &["gen@0"],
                &["deflate@1", "deflate~2@2"],
                "0",
            ),
            g(
                "deflate@1",
                "deflate",
                &["deflate~split@0"],
                &["deflate~join@1"],
                "1",
            ),
            g(
                "deflate~2@2",
                "deflate",
                &["deflate~split@0"],
                &["deflate~join@1"],
                "2",
            ),
            g(
                "deflate~join@1",
                "join",
                &["deflate@1", "deflate~2@2"],
                &["count@1"],
                "1",
            ),
            g("count@1", "count", &["deflate~join@1"], &[], "1"),
        ];
        let (folded, taps) = fold_graph(&nodes);
        let short: Vec<(&str, &str, Vec<String>, Vec<String>, &str)> = folded
            .iter()
            .map(|n| {
                (
                    n.label.as_str(),
                    n.filter.as_str(),
                    n.inputs.clone(),
                    n.outputs.clone(),
                    n.space.as_str(),
                )
            })
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
        assert_eq!(
            taps,
            [
                ("gen", "gen@0"),
                ("deflate", "deflate~join@1"),
                ("count", "count@1")
            ]
        );
    }
}
