//! A run's part of stream modes (`control::access` propagates them): what each node adds
//! to its stream's mode (the exported nodes' modes reach process spaces in their part of
//! the plan, as every option does).
//!
//! Owns: reading a node's [`control::access::Origin`] off its filter's declaration
//! (`FilterSpec::origin`, `dataplane::Origin`): the policy's grant for a privileged
//! source run through the daemon, 0600 for a privileged source run by root itself; a
//! file's permission bits for the parameters its declaration says are paths
//! (`Kind::Path`) and for a `file=` control option; unseen for a source the daemon cannot
//! see into (stdin, the network) and for every Unix command (its output is whatever the
//! program reads); 0666 for a synthetic source; nothing beyond its inputs for the rest.

use control::access::Origin;
use dataplane::Kind;
use lang::{Node, NodeKind};
use std::os::unix::fs::PermissionsExt;

/// The permission bits of a file the caller reads (a daemon's worker has taken the
/// client's identity); a file it cannot see gives the narrowest mode, and the filter's
/// own open reports why.
fn file_mode(path: &str) -> u32 {
    std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o666)
}

/// What node `n` adds to its stream's mode.
pub fn origin(n: &Node, grants: &[(usize, u32)]) -> Origin {
    if let Some((_, m)) = grants.iter().find(|(id, _)| *id == n.id) {
        return Origin::Known(*m);
    }
    match &n.kind {
        NodeKind::Filter {
            filter,
            params,
            options,
            ..
        } => {
            let Some(spec) = filters::find(filter) else {
                return Origin::Unseen;
            };
            if spec.privilege.is_some() {
                return Origin::Known(0o600);
            }
            let value = |key: &str, position: Option<usize>| {
                options
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.as_str())
                    .or_else(|| position.and_then(|i| params.get(i)).map(String::as_str))
            };
            let mut mode = match spec.origin {
                dataplane::Origin::Inputs => 0o777,
                dataplane::Origin::Synthetic => 0o666,
                dataplane::Origin::Unseen => return Origin::Unseen,
                dataplane::Origin::Files => spec
                    .params
                    .iter()
                    .filter(|p| p.kind == Kind::Path)
                    .filter_map(|p| value(p.name, p.position))
                    .fold(0o666, |m, path| m & file_mode(path)),
            };
            // `file=F` (a parameter read from a file, when the filter has no `file` of
            // its own): what F holds may end up in the stream.
            if spec.param("file").is_none() {
                if let Some(path) = value("file", None) {
                    mode &= file_mode(path);
                }
            }
            Origin::Known(mode)
        }
        NodeKind::Unix { .. } => Origin::Unseen,
        NodeKind::Join { .. } | NodeKind::Split { .. } => Origin::Known(0o777),
    }
}

/// The run's stream mode from the sources of its graph as it runs now (after a live edit
/// changed one): at most 0644, narrowed by each source's mode as [`origin`] and the
/// source's own `mode=` give it (`granted` for a privileged source: the policy's grant),
/// and by `hidden`, the mode of sources the graph does not show (in process spaces). A
/// source whose text is not a filter of the library (a shared prefix's `__subscribe`) is
/// one of those too.
pub fn graph_mode(nodes: &[dataplane::GraphNode], granted: u32, hidden: u32) -> u32 {
    let mut mode = DEFAULT_RUN_MODE & hidden;
    for n in nodes.iter().filter(|n| n.source) {
        let Ok(g) = lang::parse(&n.filter, &crate::resolver()) else {
            continue;
        };
        let Some(node) = g.nodes.first() else {
            continue;
        };
        if let NodeKind::Filter { filter, .. } = &node.kind {
            if filters::find(filter).is_none() {
                continue;
            }
        }
        let modes = control::access::stream_modes(&g, &|x| match &x.kind {
            NodeKind::Filter { filter, .. }
                if filters::find(filter).is_some_and(|s| s.privilege.is_some()) =>
            {
                control::access::Origin::Known(granted)
            }
            _ => origin(x, &[]),
        });
        mode &= modes.first().copied().unwrap_or(0o600);
    }
    mode
}

/// The widest mode of a run's streams (as exports).
pub const DEFAULT_RUN_MODE: u32 = 0o644;

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(text: &str) -> Vec<Origin> {
        let g = lang::parse(text, &lang::WithPath(filters::Natives)).unwrap();
        g.nodes.iter().map(|n| origin(n, &[])).collect()
    }

    #[test]
    fn origins_follow_the_declarations() {
        assert_eq!(
            origins("gen | count"),
            [Origin::Known(0o666), Origin::Known(0o777)]
        );
        assert_eq!(origins("stdin | count")[0], Origin::Unseen);
        assert_eq!(origins("netin port=9 | count")[0], Origin::Unseen);
        assert_eq!(origins("gen | cat | count")[1], Origin::Unseen);
        assert_eq!(origins("rx dev=lo | count")[0], Origin::Known(0o600));
        let d = std::env::temp_dir().join(format!("sl-origin-{}", std::process::id()));
        std::fs::write(&d, b"x").unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o640)).unwrap();
        let p = d.display();
        assert_eq!(
            origins(&format!("file {p} | count"))[0],
            Origin::Known(0o640)
        );
        assert_eq!(
            origins(&format!("gen | regex file={p} | count"))[1],
            Origin::Known(0o640)
        );
        let _ = std::fs::remove_file(&d);
    }

    #[test]
    fn stdin_is_0600_unless_the_client_says() {
        let modes = |t: &str| {
            let g = lang::parse(t, &lang::WithPath(filters::Natives)).unwrap();
            control::access::stream_modes(&g, &|n| origin(n, &[]))
        };
        assert_eq!(modes("stdin | count"), [0o600, 0o600]);
        assert_eq!(modes("stdin mode=0644 | count"), [0o644, 0o644]);
        assert_eq!(modes("gen | count"), [0o666, 0o666]);
    }
}
