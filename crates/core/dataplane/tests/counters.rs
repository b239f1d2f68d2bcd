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
    s.report()
        .into_iter()
        .map(|r| (r.label, r.counters))
        .collect()
}

fn by_label<'a>(rep: &'a [(String, Counters)], label: &str) -> &'a Counters {
    &rep.iter()
        .find(|(l, _)| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label} in {rep:?}"))
        .1
}

#[test]
fn a_classifier_that_drops_nothing_counts_every_block_and_byte() {
    // 5000 blocks of 100 bytes through two classifiers that pass everything.
    let rep = run("src 5000 | every | every | sink");
    for (label, c) in &rep[1..3] {
        assert_eq!(
            (c.blocks_in, c.blocks_out, c.drops),
            (5000, 5000, 0),
            "{label}"
        );
        assert_eq!((c.bytes_in, c.bytes_out), (500_000, 500_000), "{label}");
    }
    assert_eq!(by_label(&rep, "sink").blocks_in, 5000);
}

#[test]
fn a_classifier_that_drops_counts_what_it_dropped() {
    // `odd` drops the even half; `|all` after it passes class 0 too, `|` does not.
    let rep = run("src 5000 | odd | every | alone");
    let odd = by_label(&rep, "odd");
    assert_eq!(
        (odd.blocks_in, odd.blocks_out, odd.drops),
        (5000, 2500, 2500)
    );
    assert_eq!((odd.bytes_in, odd.bytes_out), (500_000, 250_000));
    let every = by_label(&rep, "every");
    assert_eq!(
        (every.blocks_in, every.blocks_out, every.drops),
        (2500, 2500, 0)
    );
    assert_eq!(every.bytes_out, 250_000);
    let rep = run("src 5000 | odd |all alone");
    let odd = by_label(&rep, "odd");
    assert_eq!(
        (odd.blocks_out, odd.bytes_out, odd.drops),
        (5000, 500_000, 0)
    );
    // A selector for one class keeps only that class (seq % 4 == 3: class 3).
    let rep = run("src 5000 | odd |3 alone");
    let odd = by_label(&rep, "odd");
    assert_eq!((odd.blocks_out, odd.drops), (1250, 3750));
    // The same selectors between two classifiers (one run of classifiers, see
    // `Space::classify_run`): the second gets what the arc admits.
    let rep = run("src 5000 | odd |3 every | alone");
    assert_eq!(
        (
            by_label(&rep, "odd").drops,
            by_label(&rep, "every").blocks_in,
            by_label(&rep, "every").bytes_in
        ),
        (3750, 1250, 125_000)
    );
    let rep = run("src 5000 | odd |all every | alone");
    assert_eq!(
        (
            by_label(&rep, "odd").drops,
            by_label(&rep, "every").blocks_out,
            by_label(&rep, "alone").blocks_in
        ),
        (0, 5000, 5000)
    );
}

#[test]
fn blocks_that_cannot_be_resolved_get_class_0_at_the_first_classifier() {
    // Every other tag of `ghost` points into a buffer that does not exist. Classifiers in a
    // row share one resolution per batch; a batch with such a tag takes the general path,
    // where the first classifier gives it class 0 and the selector drops it. Batches of
    // 256 tags: every batch has such tags, and the counters are those of the general path.
    let rep = run("ghost 1000 | every | every | odd | sink");
    let first = by_label(&rep, "every");
    assert_eq!(
        (first.blocks_in, first.blocks_out, first.drops),
        (1000, 500, 500)
    );
    assert_eq!((first.bytes_in, first.bytes_out), (100_000, 50_000));
    let second = by_label(&rep, "every#2");
    assert_eq!(
        (second.blocks_in, second.blocks_out, second.drops),
        (500, 500, 0)
    );
    // The even sequence numbers were the ones that resolved: `odd` drops all of them.
    let odd = by_label(&rep, "odd");
    assert_eq!((odd.blocks_in, odd.blocks_out, odd.drops), (500, 0, 500));
    assert_eq!(by_label(&rep, "sink").blocks_in, 0);
}

#[test]
fn runs_of_classifiers_end_at_other_filters_and_at_forks() {
    // A filter that is no classifier in the middle, then a classifier whose output goes
    // two ways (`+` multicasts to both branches, duplicates kept).
    let rep = run("src 5000 | odd | pass | every | odd + every | pass");
    let odd = by_label(&rep, "odd");
    assert_eq!(
        (odd.blocks_in, odd.blocks_out, odd.drops),
        (5000, 2500, 2500)
    );
    assert_eq!(by_label(&rep, "pass").blocks_in, 2500);
    let every = by_label(&rep, "every");
    assert_eq!(
        (every.blocks_in, every.blocks_out),
        (2500, 2500),
        "every's output goes down two arcs, each block counted once out of it"
    );
    // The arcs count their own: 2500 down each.
    let mut s = Space::build(
        &graph("src 5000 | odd | pass | every | odd + every | pass"),
        &F,
        1 << 22,
    )
    .unwrap();
    s.run(&AtomicBool::new(false), |_| {});
    let down: Vec<(String, u64)> = s
        .arcs()
        .into_iter()
        .filter(|a| a.from == "every")
        .map(|a| match a.to {
            dataplane::ArcTarget::Node(l) => (l, a.carried.blocks),
            t => panic!("an arc to {t:?}"),
        })
        .collect();
    assert_eq!(
        down,
        vec![("odd#2".to_string(), 2500), ("every#2".to_string(), 2500)]
    );
    // The second `odd` gets only odd sequence numbers: it passes all of them.
    let odd2 = by_label(&rep, "odd#2");
    assert_eq!(
        (odd2.blocks_in, odd2.blocks_out, odd2.drops),
        (2500, 2500, 0)
    );
    let every2 = by_label(&rep, "every#2");
    assert_eq!((every2.blocks_in, every2.blocks_out), (2500, 2500));
    assert_eq!(by_label(&rep, "pass#2").blocks_in, 5000);
}

mod same_as_apart {
    use super::run;
    use proptest::prelude::*;

    fn selector() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("|"),
            Just("|all"),
            Just("|1"),
            Just("|3"),
            Just("|2:3"),
            Just("|!3")
        ]
    }

    fn classifier() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("odd"), Just("every")]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Classifiers in a row run as one run (`Space::classify_run`: one resolution, the
        /// selectors applied between the passes). With a `pass` between each two (no
        /// classifier: every classifier then runs on its own, and the selector is applied
        /// by the general routing) every classifier's counters must come out the same.
        #[test]
        fn a_run_of_classifiers_counts_as_the_same_classifiers_apart(
            n in 1u32..1200,
            first in classifier(),
            rest in proptest::collection::vec((selector(), classifier()), 1..5),
        ) {
            let mut together = format!("src {n} | {first}");
            let mut apart = together.clone();
            for (sel, c) in &rest {
                together += &format!(" {sel} {c}");
                apart += &format!(" {sel} pass |all {c}");
            }
            together += " | alone";
            apart += " | alone";
            let keep = |rep: Vec<(String, dataplane::Counters)>| -> Vec<(String, u64, u64, u64, u64, u64)> {
                rep.into_iter()
                    .filter(|(l, _)| !l.starts_with("pass"))
                    .map(|(l, c)| (l, c.blocks_in, c.bytes_in, c.blocks_out, c.bytes_out, c.drops))
                    .collect()
            };
            let a = keep(run(&together));
            let b = keep(run(&apart));
            prop_assert_eq!(a, b, "`{}` against `{}`", together, apart);
        }
    }
}

#[test]
fn every_row_adds_up_sources_make_and_sinks_end() {
    for text in [
        "src 5000 | odd | pass | every | odd + every | pass",
        "src 3000 | odd |all every | alone",
        "src 2000 | odd |3 alone",
    ] {
        for (label, c) in run(text) {
            assert_eq!(
                c.blocks_out as i128,
                c.blocks_in as i128 - c.drops as i128 + c.made as i128 - c.ended as i128,
                "{text}: {label}: {c:?}"
            );
        }
        let rep = run(text);
        assert_eq!(by_label(&rep, "src").made, rep[0].1.blocks_out, "{text}");
    }
}
