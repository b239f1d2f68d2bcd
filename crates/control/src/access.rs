//! The modes of streams (thesis 6.5.2): a stream may be read by no one who could not read
//! every stream it was computed from, so a filter's output mode is the AND of its inputs'
//! modes, and a source's mode is that of what it reads (a file's permission bits, a raw
//! capture's mode from the policy grant). An exported stream's rings are created with its
//! mode, further narrowed by a `mode=` the user wrote (default 0644, the mode exports had
//! before modes were computed).
//!
//! Owns: the propagation and its application to exported nodes. Does not own: what a
//! source's mode is (its caller knows: the CLI stats the files, the daemon's policy names
//! the capture's mode) or who may open a ring (the kernel, by the ring's mode and owner;
//! the daemon's `open_stream`).

use lang::{Graph, Node, NodeKind};

/// Exported streams' mode when the pipeline says nothing.
pub const DEFAULT_EXPORT_MODE: u32 = 0o644;

/// Every node's output mode: `source(n)` for nodes without inputs, the AND of the inputs'
/// modes otherwise (loops converge: AND only removes bits).
pub fn stream_modes(g: &Graph, source: &dyn Fn(&Node) -> u32) -> Vec<u32> {
    let mut m: Vec<u32> = g
        .nodes
        .iter()
        .map(|n| {
            if g.in_edges(n.id).next().is_none() {
                source(n) & 0o777
            } else {
                0o777
            }
        })
        .collect();
    loop {
        let mut changed = false;
        for e in &g.edges {
            let v = m[e.to] & m[e.from];
            if v != m[e.to] {
                m[e.to] = v;
                changed = true;
            }
        }
        if !changed {
            return m;
        }
    }
}

/// The graph with each exported node's `mode=` set to its stream's mode AND the mode the
/// user wrote (or [`DEFAULT_EXPORT_MODE`]). A node whose own `mode` option is not octal
/// (join and split's `mode=all`) is left alone.
pub fn apply_export_modes(g: &Graph, modes: &[u32]) -> Graph {
    let mut g = g.clone();
    for n in &mut g.nodes {
        let NodeKind::Filter { options, .. } = &mut n.kind else {
            continue;
        };
        if !options
            .iter()
            .any(|(k, v)| (k == "export" || k == "exportdata") && v == "yes")
        {
            continue;
        }
        let written = options
            .iter()
            .find(|(k, _)| k == "mode")
            .map(|(_, v)| v.clone());
        let ceiling = match &written {
            None => DEFAULT_EXPORT_MODE,
            Some(v) => match dataplane::runtime::mode_option(options) {
                Some(m) => m,
                None => {
                    let _ = v;
                    continue;
                }
            },
        };
        let mode = format!("{:04o}", modes[n.id] & ceiling);
        options.retain(|(k, _)| k != "mode");
        options.push(("mode".into(), mode));
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Graph {
        lang::parse(t, &filters::Natives).unwrap_or_else(|d| panic!("{d}"))
    }

    fn mode_of(g: &Graph, name: &str) -> Option<String> {
        g.nodes
            .iter()
            .find(|n| n.name.as_deref() == Some(name))
            .and_then(|n| match &n.kind {
                NodeKind::Filter { options, .. } => options
                    .iter()
                    .find(|(k, _)| k == "mode")
                    .map(|(_, v)| v.clone()),
                _ => None,
            })
    }

    #[test]
    fn a_stream_is_no_more_readable_than_its_inputs() {
        // Two sources, 0640 and 0604, joined: 0600; each alone keeps its own.
        let g = parse("(gen name=a | count name=ca export=yes) + (gen name=b | count name=cb export=yes mode=0666) | count name=cj export=yes");
        let src = |n: &Node| {
            if n.name.as_deref() == Some("a") {
                0o640
            } else {
                0o604
            }
        };
        let m = stream_modes(&g, &src);
        let out = apply_export_modes(&g, &m);
        assert_eq!(
            mode_of(&out, "cj").as_deref(),
            Some("0600"),
            "the join of 0640 and 0604"
        );
        assert_eq!(
            mode_of(&out, "ca").as_deref(),
            Some("0640"),
            "default ceiling 0644 AND 0640"
        );
        assert_eq!(
            mode_of(&out, "cb").as_deref(),
            Some("0604"),
            "the user's 0666 cannot widen 0604"
        );
    }

    #[test]
    fn the_users_mode_narrows() {
        let g = parse("gen | count name=c export=yes mode=0600");
        let out = apply_export_modes(&g, &stream_modes(&g, &|_| 0o666));
        assert_eq!(mode_of(&out, "c").as_deref(), Some("0600"));
    }
}
