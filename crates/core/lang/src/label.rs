//! A node in words: its base name (the filter it runs), its label among the run's nodes,
//! its text as a pipeline would write it, a parameter's value. What the runtime labels
//! nodes by and what the daemon's view of a run, PipesFS and edits name them by are the
//! same functions (the rest of a label's grammar, `@space` and `~copy`, is
//! [`crate::edit::split_space`] and `protocol::graph::user_label`).

use crate::edit::quoted;
use crate::{Node, NodeKind};

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

/// A node's label: `base:name` for a named node, else `base` for the first node of its
/// base name and `base#k` for the k-th (the count includes named nodes).
pub fn label_of(base: &str, name: Option<&str>, k: usize) -> String {
    match name {
        Some(name) => format!("{base}:{name}"),
        None if k > 1 => format!("{base}#{k}"),
        None => base.to_string(),
    }
}

/// A node's filter text and options (see `protocol::graph::GraphNode::filter`).
pub fn filter_text(n: &Node) -> (String, Vec<(String, String)>) {
    let (words, options): (Vec<String>, Vec<(String, String)>) = match &n.kind {
        NodeKind::Filter {
            filter,
            params,
            options,
            ..
        } => (
            std::iter::once(filter.clone())
                .chain(params.iter().map(|p| quoted(p)))
                .collect(),
            options.clone(),
        ),
        NodeKind::Unix { argv, .. } => (argv.iter().map(|a| quoted(a)).collect(), Vec::new()),
        NodeKind::Join { mode } => {
            let m = match mode {
                crate::JoinMode::All => "all".to_string(),
                crate::JoinMode::First => "first".to_string(),
                crate::JoinMode::Nth(k) => format!("nth{k}"),
                crate::JoinMode::Ordered => "ordered".to_string(),
                crate::JoinMode::Merge => "merge".to_string(),
            };
            (vec!["join".into()], vec![("mode".into(), m)])
        }
        NodeKind::Split { mode, ways } => {
            let m = match mode {
                crate::SplitMode::RoundRobin => "roundrobin",
                crate::SplitMode::Hash => "hash",
            };
            (
                vec!["split".into()],
                vec![("mode".into(), m.into()), ("ways".into(), ways.to_string())],
            )
        }
    };
    let text = words
        .into_iter()
        .chain(options.iter().map(|(k, v)| format!("{k}={}", quoted(v))))
        .collect::<Vec<_>>()
        .join(" ");
    (text, options)
}

/// The `key=` option of a node, or else its first parameter: the pcap-filter
/// expression of a `bpf` node (`key` "expr"), the device of an `rx` (`key` "dev").
pub fn arg<'a>(
    params: &'a [String],
    options: &'a [(String, String)],
    key: &str,
) -> Option<&'a str> {
    options
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .or_else(|| params.first().map(String::as_str))
}
