//! Shared by the fuzz target (`fuzz/`), the replay of its regressions and the tests: the
//! fixed test resolver and the invariants every parse must keep.

use crate::graph::Graph;
use crate::resolve::StaticResolver;
use crate::{parallelize, parse, SplitMode};

/// The fixed resolver of the golden tests: native filters with their own option keys, and
/// the Unix commands gzip, cat, wc, sort, head, tr.
pub fn test_resolver() -> StaticResolver {
    let natives: &[(&str, &[&str])] = &[
        ("gen", &["count", "size", "rate"]),
        ("file", &["path"]),
        ("stdin", &[]),
        ("pcapin", &["file", "loop"]),
        ("eth", &["type"]),
        ("ip", &["version", "src", "dst"]),
        ("tcp", &[]),
        ("udp", &[]),
        ("icmp", &[]),
        ("dport", &[]),
        ("sport", &[]),
        ("proto", &[]),
        ("flow", &["timeout"]),
        ("tcpstream", &["timeout"]),
        ("http", &[]),
        ("dns", &[]),
        ("grep", &["pattern", "invert"]),
        ("regex", &["pattern"]),
        ("match", &["pattern"]),
        ("count", &["every"]),
        ("hist", &["buckets"]),
        ("inspect", &["format"]),
        ("dedup", &["window"]),
        ("sample", &["rate"]),
        ("strip", &["bytes"]),
        ("deflate", &["level"]),
        ("inflate", &[]),
        ("encrypt", &["key"]),
        ("decrypt", &["key"]),
        ("for", &[]),
        ("join", &["nth"]),
        ("split", &["ways"]),
        ("hash", &[]),
        ("outfile", &["path", "append"]),
        ("stdout", &[]),
        ("pcapout", &["file"]),
        ("null", &[]),
        ("bpf", &[]),
        ("rx", &["dev"]),
        ("tx", &["dev"]),
    ];
    let mut r = StaticResolver::new();
    for (name, params) in natives {
        r = r.native(name, params);
    }
    for u in ["gzip", "cat", "wc", "sort", "head", "tr"] {
        r = r.unix(u);
    }
    for t in ["grep", "file", "split", "join", "strip", "ip"] {
        r = r.unix_tool(t);
    }
    r
}

/// Parses arbitrary bytes (as UTF-8, lossily) with [`test_resolver`] and checks the
/// invariants of the result; panics if one is broken.
pub fn run_parse(data: &[u8]) {
    let input = String::from_utf8_lossy(data);
    let r = test_resolver();
    match parse(&input, &r) {
        Ok(g) => {
            check_graph(&g, &input);
            let _ = g.canonical();
            assert!(!g.nodes.is_empty());
            for n in 0..g.nodes.len().min(4) {
                for mode in [SplitMode::RoundRobin, SplitMode::Hash] {
                    let p = parallelize(&g, n, 3, mode);
                    check_graph(&p, &input);
                    let _ = p.canonical();
                }
            }
        }
        Err(d) => {
            assert!(
                d.span.start <= d.span.end && d.span.end <= input.len(),
                "span out of input: {d:?}"
            );
            assert!(input.is_char_boundary(d.span.start) && input.is_char_boundary(d.span.end));
            let shown = d.to_string();
            assert!(shown.starts_with("error: "));
            let _ = d.line_col();
        }
    }
}

/// Structural invariants of a graph from [`parse`] or [`parallelize`] ([`Graph::check`]).
pub fn check_graph(g: &Graph, input: &str) {
    if let Err(why) = g.check(input) {
        panic!("{why}");
    }
}
