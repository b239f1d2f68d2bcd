//! Property tests: random well-formed pipelines always parse, into exactly as many nodes
//! and edges as a small model of the templates predicts; whitespace never matters; and
//! random token soup never panics.

use lang::fuzzing::{check_graph, run_parse, test_resolver};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum E {
    Atom(&'static str, Option<&'static str>),
    /// Never directly around a `Not` (the parser folds `!(!x)` into `x`).
    Group(Box<E>, Option<&'static str>),
    Pipe(Vec<E>, Vec<&'static str>),
    Par(&'static str, Vec<E>),
    /// Never directly around a `Not` (`!!x` is `x`).
    Not(Box<E>),
}

const ATOMS: &[&str] = &[
    "gen",
    "count",
    "tcp",
    "udp 1",
    "grep 'x y'",
    "cat -n",
    "deflate level=3",
    "inspect format=\"a | b\"",
    "for 3",
];
const HINTS: &[&str] = &["@busy", "@quiet,single", "@ throughput"];
const SELS: &[&str] = &["", "3", "!", "all", "1:9", "!http", "http", "!0:65535"];
const OPS: &[&str] = &["+", "++", "*", "+*", "&"];

fn op_kind(op: &str) -> &'static str {
    match op {
        "+" => "plus",
        "++" | "*" => "or",
        _ => "and",
    }
}

fn expr() -> impl Strategy<Value = E> {
    let leaf = (
        prop::sample::select(ATOMS),
        prop::option::of(prop::sample::select(HINTS)),
    )
        .prop_map(|(a, h)| E::Atom(a, h));
    leaf.prop_recursive(4, 40, 4, |inner| {
        prop_oneof![
            (inner.clone(), prop::option::of(prop::sample::select(HINTS)))
                .prop_filter("no group around a negation", |(e, _)| !matches!(
                    e,
                    E::Not(_)
                ))
                .prop_map(|(e, h)| E::Group(Box::new(e), h)),
            prop::collection::vec((inner.clone(), prop::sample::select(SELS)), 2..4).prop_map(
                |v| {
                    let (stages, mut sels): (Vec<E>, Vec<&str>) = v.into_iter().unzip();
                    sels.pop();
                    E::Pipe(stages, sels)
                }
            ),
            (
                prop::sample::select(OPS),
                prop::collection::vec(inner.clone(), 2..4)
            )
                .prop_map(|(op, b)| E::Par(op, b)),
            inner
                .prop_filter("no double negation", |e| !matches!(e, E::Not(_)))
                .prop_map(|e| E::Not(Box::new(e))),
        ]
    })
}

/// Renders with `ws` between tokens, adding the parentheses precedence requires.
fn render(e: &E, ws: &str) -> String {
    let paren = |s: String| format!("({ws}{s}{ws})");
    match e {
        E::Atom(a, h) => match h {
            Some(h) => format!("{a}{ws}{h}"),
            None => a.to_string(),
        },
        E::Group(inner, h) => {
            let g = paren(render(inner, ws));
            match h {
                Some(h) => format!("{g}{ws}{h}"),
                None => g,
            }
        }
        E::Pipe(stages, sels) => {
            let mut s = String::new();
            for (i, st) in stages.iter().enumerate() {
                let r = render(st, ws);
                s.push_str(&if matches!(st, E::Pipe(..)) {
                    paren(r)
                } else {
                    r
                });
                if i < sels.len() {
                    s.push_str(&format!("{ws}|{}{ws}", sels[i]));
                    if ws.is_empty() {
                        s.push(' ');
                    }
                }
            }
            s
        }
        E::Par(op, branches) => {
            let parts: Vec<String> = branches
                .iter()
                .map(|b| {
                    let r = render(b, ws);
                    // A bare Unix command beside a parallel operator is refused (the
                    // shell's word); in parentheses it is a branch. (grep is the Unix
                    // tool when a plain `|` joins it to cat.)
                    if matches!(
                        b,
                        E::Pipe(..) | E::Par(..) | E::Atom("cat -n" | "grep 'x y'", _)
                    ) {
                        paren(r)
                    } else {
                        r
                    }
                })
                .collect();
            parts.join(&format!("{ws}{op}{ws}"))
        }
        E::Not(inner) => {
            let r = render(inner, ws);
            // `!` right before a bare Unix command is the shell's (refused); before
            // parentheses it is the language's.
            if matches!(
                **inner,
                E::Pipe(..) | E::Par(..) | E::Atom("cat -n" | "grep 'x y'", _)
            ) {
                format!("!{}", paren(r))
            } else {
                format!("!{r}")
            }
        }
    }
}

fn entries(e: &E) -> usize {
    match e {
        E::Atom(..) => 1,
        E::Group(i, _) | E::Not(i) => entries(i),
        E::Pipe(s, _) => entries(&s[0]),
        E::Par(_, b) => b.iter().map(entries).sum(),
    }
}

/// Whether the arc out of `e`'s exit ends up inverted (an odd number of trailing `!`).
fn ends_negated(e: &E) -> bool {
    match e {
        E::Atom(..) | E::Par(..) => false,
        E::Group(i, _) => ends_negated(i),
        E::Pipe(s, _) => ends_negated(&s[s.len() - 1]),
        E::Not(i) => !ends_negated(i),
    }
}

/// The joins the templates make, as their modes (`Debug` form), sorted: one per parallel
/// composition that is not pruned, passing every copy (`+`), the first (`++`, `*`) or the
/// Nth, N its number of branches (`+*`, `&`). `at_end` as for [`model`].
fn model_joins(e: &E, at_end: bool) -> Vec<String> {
    fn walk(e: &E, at_end: bool, out: &mut Vec<String>) {
        match e {
            E::Atom(..) => {}
            E::Group(i, _) => walk(i, at_end, out),
            E::Pipe(stages, _) => {
                let last = stages.len() - 1;
                for (i, s) in stages.iter().enumerate() {
                    walk(s, at_end && i == last, out);
                }
            }
            E::Par(op, branches) => {
                let pruned = op_kind(op) == "plus" && at_end && !branches.iter().any(ends_negated);
                if !pruned {
                    out.push(match op_kind(op) {
                        "plus" => "All".to_string(),
                        "or" => "First".to_string(),
                        _ => format!("Nth({})", branches.len()),
                    });
                }
                for b in branches {
                    walk(b, pruned, out);
                }
            }
            E::Not(i) => {
                walk(i, false, out);
                // A negation at the end gets a node of its own: a join passing every
                // block of the inverted arc.
                if at_end {
                    out.push("All".to_string());
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(e, at_end, &mut out);
    out.sort();
    out
}

/// (nodes, edges) after templates. `at_end`: nothing follows this expression.
fn model(e: &E, at_end: bool) -> (usize, usize) {
    match e {
        E::Atom(..) => (1, 0),
        E::Group(i, _) => model(i, at_end),
        E::Pipe(stages, _) => {
            let last = stages.len() - 1;
            let mut acc = (0, 0);
            for (i, s) in stages.iter().enumerate() {
                let (n, m) = model(s, at_end && i == last);
                acc.0 += n;
                acc.1 += m;
                if i < last {
                    acc.1 += entries(&stages[i + 1]);
                }
            }
            acc
        }
        E::Par(op, branches) => {
            let pruned = op_kind(op) == "plus" && at_end && !branches.iter().any(ends_negated);
            let mut acc = if pruned { (0, 0) } else { (1, branches.len()) };
            for b in branches {
                let (n, m) = model(b, pruned);
                acc.0 += n;
                acc.1 += m;
            }
            acc
        }
        E::Not(i) => {
            let (n, m) = model(i, false);
            if at_end {
                (n + 1, m + 1)
            } else {
                (n, m)
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn well_formed_pipelines_parse_to_the_model(e in expr()) {
        let src = render(&e, " ");
        let g = lang::parse(&src, &test_resolver()).unwrap_or_else(|d| panic!("{src}\n{d}"));
        check_graph(&g, &src);
        let (nodes, edges) = model(&e, true);
        prop_assert_eq!(g.nodes.len(), nodes, "nodes of {}\n{}", src, g.canonical());
        prop_assert_eq!(g.edges.len(), edges, "edges of {}\n{}", src, g.canonical());
        let mut joins: Vec<String> = g.nodes.iter().filter_map(|n| match &n.kind {
            lang::NodeKind::Join { mode } => Some(format!("{mode:?}")),
            _ => None,
        }).collect();
        joins.sort();
        prop_assert_eq!(joins, model_joins(&e, true), "joins of {}\n{}", src, g.canonical());
    }

    // How much whitespace parts tokens does not matter (a '+' or '*' glued to a word is
    // the word's, as in the shell: `date +%s`, so some whitespace must part them).
    #[test]
    fn whitespace_does_not_matter(e in expr(), ws in prop::sample::select(&["  ", "\n", "\t \n "][..])) {
        let a = render(&e, " ");
        let b = render(&e, ws);
        let r = test_resolver();
        let ga = lang::parse(&a, &r).unwrap_or_else(|d| panic!("{a}\n{d}"));
        let gb = lang::parse(&b, &r).unwrap_or_else(|d| panic!("{b:?}\n{d}"));
        prop_assert_eq!(ga.canonical(), gb.canonical());
    }

    #[test]
    fn token_soup_never_panics(parts in prop::collection::vec(prop::sample::select(&[
        "gen", "count", "for", "name=L", "name=M", " ", "|", "|!", "|3", "|1:2", "|x", "+", "++", "+*", "*", "&",
        "!", "(", ")", "@", "busy", ",", "\"", "'", "\\", "=", "é", "\n", "gzip", "export=yes", "65536",
    ][..]), 0..24)) {
        run_parse(parts.concat().as_bytes());
    }
}
