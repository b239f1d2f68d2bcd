//! Per-filter counters through classifiers (the library's `Classifier` adapter, which
//! resolves a batch's tags through `Store::resolver`) and the selectors after them:
//! blocks and bytes in and out, and drops.

use dataplane::{Counters, Space};
use std::sync::atomic::AtomicBool;

mod common;
use common::{graph, F};

fn run(text: &str) -> Vec<(String, Counters)> {
    let mut s = Space::build(&graph(text), &F, 1 << 22).unwrap();
    s.run(&AtomicBool::new(false), |_| {});
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    s.report().into_iter().map(|r| (r.label, r.counters)).collect()
}

fn by_label<'a>(rep: &'a [(String, Counters)], label: &str) -> &'a Counters {
    &rep.iter().find(|(l, _)| l.starts_with(label)).unwrap_or_else(|| panic!("no {label} in {rep:?}")).1
}

#[test]
fn a_classifier_that_drops_nothing_counts_every_block_and_byte() {
    // 5000 blocks of 100 bytes through two classifiers that pass everything.
    let rep = run("src 5000 | every | every | sink");
    for (label, c) in &rep[1..3] {
        assert_eq!((c.blocks_in, c.blocks_out, c.drops), (5000, 5000, 0), "{label}");
        assert_eq!((c.bytes_in, c.bytes_out), (500_000, 500_000), "{label}");
    }
    assert_eq!(by_label(&rep, "sink").blocks_in, 5000);
}

#[test]
fn a_classifier_that_drops_counts_what_it_dropped() {
    // `odd` drops the even half; `|all` after it passes class 0 too, `|` does not.
    let rep = run("src 5000 | odd | every | alone");
    let odd = by_label(&rep, "odd");
    assert_eq!((odd.blocks_in, odd.blocks_out, odd.drops), (5000, 2500, 2500));
    assert_eq!((odd.bytes_in, odd.bytes_out), (500_000, 250_000));
    let every = by_label(&rep, "every");
    assert_eq!((every.blocks_in, every.blocks_out, every.drops), (2500, 2500, 0));
    assert_eq!(every.bytes_out, 250_000);
    let rep = run("src 5000 | odd |all alone");
    let odd = by_label(&rep, "odd");
    assert_eq!((odd.blocks_out, odd.bytes_out, odd.drops), (5000, 500_000, 0));
    // A selector for one class keeps only that class (seq % 4 == 3: class 3).
    let rep = run("src 5000 | odd |3 alone");
    let odd = by_label(&rep, "odd");
    assert_eq!((odd.blocks_out, odd.drops), (1250, 3750));
}
