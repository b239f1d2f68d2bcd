//! The modes of streams (thesis 6.5.2): a stream may be read by no one who could not read
//! every stream it was computed from, so a filter's output mode is the AND of its inputs'
//! modes and of what the filter adds itself ([`Origin`]: a file's permission bits, a raw
//! capture's mode from the policy grant). What comes from where the daemon cannot see
//! (standard input, a Unix command's output, the network) is readable by the client
//! alone (0600) until the client says otherwise: a `mode=` on a node vouches for what is
//! unseen in its stream (it can narrow what is known, never widen it). An exported
//! stream's rings are created with its mode, further narrowed by a `mode=` the user wrote
//! (default 0644, the mode exports had before modes were computed).
//!
//! Owns: the propagation and its application to exported nodes. Does not own: what a
//! node adds (its caller knows: the CLI reads the filter's declaration and stats the
//! files, the daemon's policy names the capture's mode) or who may open a ring (the
//! kernel, by the ring's mode and owner; the daemon's `open_stream`).

use lang::{Graph, Node, NodeKind};

/// Exported streams' mode when the pipeline says nothing.
pub const DEFAULT_EXPORT_MODE: u32 = 0o644;

/// The mode of data whose origin the daemon cannot see, until the client says `mode=`.
pub const UNSEEN_MODE: u32 = 0o600;

/// What a node adds to its stream besides its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Data of a known mode (0o777: nothing beyond its inputs).
    Known(u32),
    /// Data from where the daemon cannot see: [`UNSEEN_MODE`] unless vouched for.
    Unseen,
}

/// Every node's output mode: the AND of what it adds (`origin(n)`) and its inputs'
/// modes, where unseen data counts as [`UNSEEN_MODE`] until a node with an octal `mode=`
/// (the client's word) vouches for it; that `mode=` also narrows. Loops converge: AND
/// only removes bits and unseen data only spreads.
pub fn stream_modes(g: &Graph, origin: &dyn Fn(&Node) -> Origin) -> Vec<u32> {
    let said: Vec<Option<u32>> = g
        .nodes
        .iter()
        .map(|n| match &n.kind {
            NodeKind::Filter { options, .. } => dataplane::runtime::mode_option(options),
            _ => None,
        })
        .collect();
    let (mut known, mut unseen): (Vec<u32>, Vec<bool>) = g
        .nodes
        .iter()
        .map(|n| {
            let (k, u) = match origin(n) {
                Origin::Known(m) => (m & 0o777, false),
                Origin::Unseen => (0o777, true),
            };
            match said[n.id] {
                Some(m) => (k & m, false),
                None => (k, u),
            }
        })
        .unzip();
    loop {
        let mut changed = false;
        for e in &g.edges {
            let k = known[e.to] & known[e.from];
            let u = unseen[e.to] || (unseen[e.from] && said[e.to].is_none());
            if k != known[e.to] || u != unseen[e.to] {
                known[e.to] = k;
                unseen[e.to] = u;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    known
        .iter()
        .zip(&unseen)
        .map(|(&k, &u)| if u { k & UNSEEN_MODE } else { k })
        .collect()
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
        let src = |n: &Node| match n.name.as_deref() {
            Some("a") => Origin::Known(0o640),
            Some("b") => Origin::Known(0o604),
            _ => Origin::Known(0o777),
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
        let out = apply_export_modes(&g, &stream_modes(&g, &|_| Origin::Known(0o666)));
        assert_eq!(mode_of(&out, "c").as_deref(), Some("0600"));
    }

    fn unseen_a(n: &Node) -> Origin {
        match n.name.as_deref() {
            Some("a") => Origin::Unseen,
            Some("f") => Origin::Known(0o640),
            _ => Origin::Known(0o777),
        }
    }

    #[test]
    fn unseen_data_is_the_clients_alone_until_vouched_for() {
        // Unseen, and everything computed from it: 0600; exports too.
        let g = parse("gen name=a | count name=c export=yes | count name=d");
        let m = stream_modes(&g, &unseen_a);
        assert!(m.iter().all(|&x| x == 0o600), "{m:?}");
        assert_eq!(
            mode_of(&apply_export_modes(&g, &m), "c").as_deref(),
            Some("0600")
        );
        // The client's mode= vouches for it from that node on.
        let g = parse("gen name=a | count name=c export=yes mode=0644 | count name=d");
        let m = stream_modes(&g, &unseen_a);
        assert_eq!(m[0], 0o600, "the unseen source itself");
        assert_eq!((m[1], m[2]), (0o644, 0o644));
        assert_eq!(
            mode_of(&apply_export_modes(&g, &m), "c").as_deref(),
            Some("0644")
        );
        // ... but it cannot widen what is known: a 0640 file joined in stays 0640.
        let g = parse("(gen name=a + gen name=f) | count name=c export=yes mode=0666");
        let m = stream_modes(&g, &unseen_a);
        let c = g
            .nodes
            .iter()
            .find(|n| n.name.as_deref() == Some("c"))
            .unwrap()
            .id;
        assert_eq!(m[c], 0o640);
        // Unseen data joined after the vouching node is unseen again.
        let g =
            parse("(gen name=a | count name=c mode=0644 export=yes) + gen name=b | count name=d");
        let m = stream_modes(&g, &|n| match n.name.as_deref() {
            Some("a") | Some("b") => Origin::Unseen,
            _ => Origin::Known(0o777),
        });
        let d = g
            .nodes
            .iter()
            .find(|n| n.name.as_deref() == Some("d"))
            .unwrap()
            .id;
        assert_eq!(m[d], 0o600);
    }
}
