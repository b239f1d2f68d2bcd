//! A run's graph as the daemon's worker receives it (`ToWorker::Start`'s `graph`): the
//! graph the daemon parsed and checked, crossed over a socket. The worker derives the run
//! from it ([`crate::plan_checked`]) and parses nothing; before that, [`accept`] refuses,
//! saying why, a value no parse could have made or that does not hold where it runs.

use crate::{resolver, Refused};
use lang::NodeKind;
use protocol::proto::{MAX_GRAPH_ARCS, MAX_GRAPH_NODES, MAX_PIPELINE};

/// Whether `g`, with its text `pipeline` (its spans point there), may be derived here:
/// sizes within the protocol's bounds; the structure a parse leaves (`lang::Graph::check`:
/// node ids are indices, arcs join existing nodes, spans lie in the text); every node
/// `grants` (stream modes by node id) and `lent` (the lent sockets' nodes, with their
/// kind, `rx` or `tx`) name is there and is such a filter; and what the parse decided with
/// the resolver, decided again with this process's (`lang::recheck`: a command the daemon
/// took as one must not be a native filter or a typo here; every loop bounded).
pub fn accept(
    g: &lang::Graph,
    pipeline: &str,
    grants: &[(usize, u32)],
    lent: &[(usize, &str)],
) -> Result<(), Refused> {
    let malformed = |why: String| Refused {
        message: format!("streamline: the run's graph from the daemon is malformed: {why}"),
        code: 2,
    };
    if pipeline.len() > MAX_PIPELINE {
        return Err(malformed(format!(
            "its text is {} bytes (at most {MAX_PIPELINE})",
            pipeline.len()
        )));
    }
    if g.nodes.is_empty() || g.nodes.len() > MAX_GRAPH_NODES || g.edges.len() > MAX_GRAPH_ARCS {
        return Err(malformed(format!(
            "{} nodes and {} arcs (1 to {MAX_GRAPH_NODES} nodes, at most {MAX_GRAPH_ARCS} arcs)",
            g.nodes.len(),
            g.edges.len()
        )));
    }
    g.check(pipeline).map_err(malformed)?;
    let filter = |id: usize| match g.nodes.get(id).map(|n| &n.kind) {
        Some(NodeKind::Filter { filter, .. }) => Some(filter.as_str()),
        _ => None,
    };
    for &(id, _) in grants {
        if filter(id).is_none() {
            return Err(malformed(format!(
                "a stream mode is granted to node {id}, which is no filter of its {} nodes",
                g.nodes.len()
            )));
        }
    }
    for &(id, kind) in lent {
        if filter(id) != Some(kind) {
            return Err(malformed(format!(
                "a {kind} socket is lent for node {id}, which is no {kind} of its {} nodes",
                g.nodes.len()
            )));
        }
    }
    lang::recheck(g, pipeline, &resolver()).map_err(|d| Refused {
        message: filters::shown(pipeline).scrub(&d.redacted(&resolver()).to_string()),
        code: 2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "gen count=3 | count";

    fn graph() -> lang::Graph {
        crate::parse(TEXT).expect("parses")
    }

    fn refused(
        g: &lang::Graph,
        text: &str,
        grants: &[(usize, u32)],
        lent: &[(usize, &str)],
    ) -> String {
        match accept(g, text, grants, lent) {
            Ok(()) => panic!("accepted a malformed graph: {g:?}"),
            Err(r) => {
                assert_eq!(r.code, 2);
                r.message
            }
        }
    }

    #[test]
    fn a_parsed_graph_is_accepted_as_it_is() {
        accept(&graph(), TEXT, &[], &[]).expect("the graph of a parse");
    }

    #[test]
    fn a_malformed_graph_is_refused_saying_what_is_wrong() {
        let mut g = graph();
        g.edges[0].to = 7;
        let m = refused(&g, TEXT, &[], &[]);
        assert!(
            m.contains("malformed") && m.contains("arc 0 goes from node 0 to node 7, of 2 nodes"),
            "{m}"
        );

        let mut g = graph();
        g.nodes[1].id = 0;
        assert!(refused(&g, TEXT, &[], &[]).contains("node 1 says it is node 0"));

        let mut g = graph();
        g.nodes[0].span = lang::Span::new(3, 400);
        assert!(refused(&g, TEXT, &[], &[])
            .contains("node 0's span 3..400 is not a range of the 19-byte text"));

        let mut g = graph();
        g.edges.push(g.edges[0].clone());
        assert!(refused(&g, TEXT, &[], &[]).contains("is there twice"));

        let g = lang::Graph {
            nodes: vec![],
            edges: vec![],
        };
        assert!(refused(&g, TEXT, &[], &[]).contains("0 nodes and 0 arcs"));

        let mut g = graph();
        let n = g.nodes[1].clone();
        g.nodes
            .extend((2..=MAX_GRAPH_NODES).map(|id| lang::Node { id, ..n.clone() }));
        assert!(refused(&g, TEXT, &[], &[]).contains(&format!("{} nodes", MAX_GRAPH_NODES + 1)));

        let long = "x".repeat(MAX_PIPELINE + 1);
        assert!(refused(&graph(), &long, &[], &[]).contains("bytes (at most 65536)"));
    }

    #[test]
    fn grants_and_lent_sockets_must_name_nodes_of_the_graph() {
        let g = graph();
        assert!(refused(&g, TEXT, &[(9, 0o640)], &[]).contains("granted to node 9"));
        let m = refused(&g, TEXT, &[], &[(0, "rx")]);
        assert!(
            m.contains("a rx socket is lent for node 0, which is no rx"),
            "{m}"
        );
    }

    #[test]
    fn a_command_that_means_something_else_here_is_refused_as_the_parse_would() {
        // What the daemon makes of `cout | count` (`lang::OrCommand`: any name not native
        // is a command): here `cout` is on no PATH and one letter from `count`.
        let text = "cout | count";
        let g = lang::parse(text, &lang::OrCommand(filters::Natives)).expect("the daemon's parse");
        let m = refused(&g, text, &[], &[]);
        let standalone = crate::parse(text)
            .err()
            .expect("refused stand-alone")
            .message;
        assert_eq!(m, standalone);
        // A native filter the daemon took for a command (a daemon of another version).
        let mut g = graph();
        let span = g.nodes[1].span;
        g.nodes[1].kind = NodeKind::Unix {
            argv: vec!["count".into()],
            place: Default::default(),
        };
        g.nodes[1].span = span;
        let m = refused(&g, TEXT, &[], &[]);
        assert!(
            m.contains("'count' was checked as a Unix command, but here it is a native filter"),
            "{m}"
        );
    }

    #[test]
    fn an_unbounded_loop_is_refused() {
        let mut g = graph();
        let mut back = g.edges[0].clone();
        back.from = 1;
        back.to = 0;
        g.edges.push(back);
        let m = refused(&g, TEXT, &[], &[]);
        assert!(m.contains("unbounded loop"), "{m}");
    }
}
