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

