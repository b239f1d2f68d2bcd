//! The CLI's part of stream modes (`control::access` propagates them): what a source's
//! stream mode is, and carrying the exported nodes' modes to process spaces.
//!
//! Owns: source modes (a file's permission bits for the parameters its declaration says
//! are paths, `Kind::Path`; the policy's grant for a privileged source run through the
//! daemon; 0600 for a privileged source run by root itself and for Unix commands, whose
//! input is unknown; 0666 for a synthetic or pipe-fed source) and the `--export-modes`
//! argument of `streamline __space`.

use dataplane::Kind;
use lang::{Node, NodeKind};
use std::os::unix::fs::PermissionsExt;

/// The mode of the stream source node `n` produces.
pub fn source_mode(n: &Node, grants: &[(usize, u32)]) -> u32 {
    if let Some((_, m)) = grants.iter().find(|(id, _)| *id == n.id) {
        return *m;
    }
    match &n.kind {
        NodeKind::Filter {
            filter,
            params,
            options,
            ..
        } => {
            let Some(spec) = filters::find(filter) else {
                return 0o600;
            };
            if spec.privilege.is_some() {
                return 0o600;
            }
            let mut mode = 0o666;
            for p in spec.params.iter().filter(|p| p.kind == Kind::Path) {
                let value = options
                    .iter()
                    .find(|(k, _)| k == p.name)
                    .map(|(_, v)| v.as_str())
                    .or_else(|| p.position.and_then(|i| params.get(i)).map(String::as_str));
                if let Some(path) = value {
                    // Read with the caller's identity (a daemon's worker has taken the
                    // client's); a file it cannot see gives the narrowest mode, and the
                    // filter's own open reports why.
                    mode &=
                        std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o666);
                }
            }
            mode
        }
        NodeKind::Unix { .. } => 0o600,
        _ => 0o666,
    }
}

/// `ID=MODE,...` for every exported node of `g` whose mode was set (for process spaces,
/// which parse the pipeline text again).
pub fn export_modes_arg(g: &lang::Graph) -> String {
    g.nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Filter { options, .. }
                if options
                    .iter()
                    .any(|(k, v)| (k == "export" || k == "exportdata") && v == "yes") =>
            {
                dataplane::runtime::mode_option(options).map(|m| format!("{}={m:o}", n.id))
            }
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Apply an `--export-modes` argument to the graph a process space parsed.
pub fn apply_export_modes_arg(g: &lang::Graph, arg: &str) -> Result<lang::Graph, String> {
    let mut g = g.clone();
    for item in arg.split(',').filter(|s| !s.is_empty()) {
        let (id, mode) = item
            .split_once('=')
            .ok_or_else(|| format!("--export-modes {item}: expected ID=OCTAL"))?;
        let id: usize = id
            .parse()
            .map_err(|_| format!("--export-modes {item}: bad node id"))?;
        let mode =
            u32::from_str_radix(mode, 8).map_err(|_| format!("--export-modes {item}: bad mode"))?;
        let Some(NodeKind::Filter { options, .. }) = g.nodes.get_mut(id).map(|n| &mut n.kind)
        else {
            return Err(format!("--export-modes {item}: no filter node {id}"));
        };
        options.retain(|(k, _)| k != "mode");
        options.push(("mode".into(), format!("{mode:04o}")));
    }
    Ok(g)
}

/// The run's stream mode from the sources of its graph as it runs now (after a live edit
/// changed one): at most 0644, narrowed by each source's mode as [`source_mode`] gives it
/// for its filter text (`granted` for a privileged source: the policy's grant), and by
/// `hidden`, the mode of sources the graph does not show (in process spaces). A source
/// whose text is not a filter of the library (a shared prefix's `__subscribe`) is one of
/// those too.
pub fn graph_mode(nodes: &[dataplane::GraphNode], granted: u32, hidden: u32) -> u32 {
    let mut mode = DEFAULT_RUN_MODE & hidden;
    for n in nodes.iter().filter(|n| n.source) {
        let Ok(g) = lang::parse(&n.filter, &crate::resolver()) else {
            continue;
        };
        let Some(node) = g.nodes.first() else {
            continue;
        };
        let m = match &node.kind {
            NodeKind::Filter { filter, .. } => match filters::find(filter) {
                None => continue,
                Some(spec) if spec.privilege.is_some() => granted,
                Some(_) => source_mode(node, &[]),
            },
            _ => source_mode(node, &[]),
        };
        mode &= m;
    }
    mode
}

/// The widest mode of a run's streams (as exports).
pub const DEFAULT_RUN_MODE: u32 = 0o644;
