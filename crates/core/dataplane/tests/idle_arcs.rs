//! Arcs into filters that take nothing now (`Filter::accepts` false, as a published
//! stream without subscribers) are skipped: the blocks go on along the other arcs as if
//! the idle one were not there, unshared, and the idle filter is never called.

use dataplane::Space;
use std::sync::atomic::AtomicBool;

mod common;
use common::{graph, F};

/// Add a node running `filter` and an arc into it from node `from`.
fn add_arc(g: &mut lang::Graph, from: usize, filter: &str) {
    let id = g.nodes.len();
    let span = g.nodes[from].span;
    let kind = lang::NodeKind::Filter {
        filter: filter.into(),
        params: Vec::new(),
        options: Vec::new(),
        place: Default::default(),
    };
    g.nodes.push(lang::Node {
        id,
        kind,
        span,
        hints: Vec::new(),
        name: None,
    });
    g.edges.push(lang::Edge {
        from,
        to: id,
        sel: lang::Selector::Default,
        span,
    });
}

/// `text` plus one more arc from node `from` into a new `idle` node.
fn with_idle_arc(text: &str, from: usize) -> lang::Graph {
    let mut g = graph(text);
    add_arc(&mut g, from, "idle");
    g
}

fn summaries(s: &Space) -> Vec<String> {
    s.report()
        .iter()
        .filter_map(|r| r.summary.clone())
        .collect()
}

#[test]
fn one_live_arc_besides_an_idle_one_moves_the_batch_on() {
    let g = with_idle_arc("src 5000 | alone | sink", 0);
    let mut s = Space::build(&g, &F, 1 << 20).unwrap();
    s.run(&AtomicBool::new(false), |_| {});
    assert_eq!(
        summaries(&s),
        vec!["alone: 5000".to_string(), "sink: 5000".to_string()]
    );
    let src = s
        .report()
        .iter()
        .find(|r| r.label.starts_with("src"))
        .unwrap()
        .counters;
    assert_eq!(
        src.blocks_out, 5000,
        "the idle arc delivered nothing and is not counted"
    );
    assert_eq!(src.drops, 0);
}

#[test]
fn idle_arc_among_several_live_ones_is_skipped() {
    // src multicasts to two live arcs (`pass | sink`, and a second `pass`) and the idle
    // one: the live ones each get every block, the idle one nothing (it would panic).
    let mut g = with_idle_arc("src 3000 | pass | sink", 0);
    // A second live arc from src into a new `pass` node (shares with the first live arc).
    add_arc(&mut g, 0, "pass");
    let mut s = Space::build(&g, &F, 1 << 20).unwrap();
    s.run(&AtomicBool::new(false), |_| {});
    assert_eq!(summaries(&s), vec!["sink: 3000".to_string()]);
    let src = s
        .report()
        .iter()
        .find(|r| r.label.starts_with("src"))
        .unwrap()
        .counters;
    assert_eq!(
        src.blocks_out, 3000,
        "two live arcs, 3000 blocks each, each block counted once out of src"
    );
    let carried: Vec<u64> = s
        .arcs()
        .iter()
        .filter(|a| a.from.starts_with("src"))
        .map(|a| a.carried.blocks)
        .collect();
    assert_eq!(
        carried,
        vec![3000, 0, 3000],
        "what each arc carried (the idle one none)"
    );
}

#[test]
fn only_idle_arcs_drop_the_batch() {
    let mut g = graph("src 1000 | pass");
    // Replace `pass`'s role: hang two idle arcs off src, removing the pass arc.
    g.edges.clear();
    for _ in 0..2 {
        add_arc(&mut g, 0, "idle");
    }
    let mut s = Space::build(&g, &F, 1 << 20).unwrap();
    s.run(&AtomicBool::new(false), |_| {});
    let src = s
        .report()
        .iter()
        .find(|r| r.label.starts_with("src"))
        .unwrap()
        .counters;
    assert_eq!((src.blocks_out, src.drops), (0, 1000));
}
