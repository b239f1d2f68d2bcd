//! Live edits on runs of the real filter library (issue 15, part 3): a thread edits a
//! running `gen | count | count` while it runs, and the tail counts exactly what an
//! unedited run counts; a filter that fails to build leaves the run as it was; `set`
//! on `sample` changes what passes from then on; a `branch` (PipesFS's mkdir) forks a
//! running `gen | count | count`, sees exactly what its node emits from then on, and
//! takes nothing from the old successor.
//!
//! The edits are made while the run is under way: the editing thread waits (a watchdog,
//! not a time limit) until the run's published counters show blocks passing before its
//! first edit, and each edit is applied at a later batch boundary than the one before (the
//! run loop takes the next only after answering), so a batch passes between any two; the
//! retired instances' counters show it. `gen` makes N blocks as fast as it can, so N is
//! large enough that the run is still going when the edits come; if it ends first, the
//! edit is answered `EditError::Ended` and the test fails saying so.

use dataplane::{Edit, EditError, EditHandle, NodeReport, Space};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

const N: u64 = 100_000_000;
const SIZE: u64 = 64;
const WAIT: Duration = Duration::from_secs(120);

fn resolver() -> lang::WithPath<filters::Natives> {
    lang::WithPath(filters::Natives)
}

fn build(pipeline: &str) -> Space {
    let g = lang::parse(pipeline, &resolver()).unwrap_or_else(|d| panic!("{d}"));
    Space::build(&g, &filters::Library, 1 << 24).unwrap_or_else(|e| panic!("{e}"))
}

fn edit(text: &str) -> Edit {
    Edit::parse(text, &resolver()).unwrap_or_else(|e| panic!("{e}"))
}

/// `count`'s (blocks, bytes) from its summary line.
fn count_of(r: &[NodeReport], label: &str) -> Option<(u64, u64)> {
    let s = r.iter().find(|n| n.label == label)?.summary.as_deref()?;
    let rest = s.strip_prefix("count: ")?;
    let mut w = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|x| !x.is_empty());
    Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
}

/// Blocks into node `label` as the run last published them.
fn blocks_in(h: &EditHandle, label: &str) -> u64 {
    h.report()
        .iter()
        .find(|n| n.label == label)
        .map_or(0, |n| n.counters.blocks_in)
}

/// Wait until more than `past` blocks went into `label`; the new count.
fn progress(h: &EditHandle, label: &str, past: u64) -> u64 {
    let end = Instant::now() + WAIT;
    loop {
        let now = blocks_in(h, label);
        if now > past {
            return now;
        }
        assert!(
            Instant::now() < end,
            "{label}: no progress past {past} blocks"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Run `pipeline` on this thread while `editor` edits it from another; the final report.
fn run_edited(pipeline: &str, editor: impl FnOnce(&EditHandle) + Send) -> Vec<NodeReport> {
    let mut s = build(pipeline);
    let h = EditHandle::new();
    std::thread::scope(|scope| {
        let h2 = h.clone();
        let t = scope.spawn(move || editor(&h2));
        s.run_with(&AtomicBool::new(false), &h, &filters::Library, |_| {});
        t.join().expect("the editing thread");
    });
    assert!(s.warnings().is_empty(), "warnings: {:?}", s.warnings());
    s.report()
}

fn applied(h: &EditHandle, text: &str) -> dataplane::Applied {
    match h.apply(edit(text), WAIT) {
        Ok(a) => a,
        Err(EditError::Ended) => panic!("{text}: the run ended before the edit; raise N ({N})"),
        Err(e) => panic!("{text}: {e}"),
    }
}

#[test]
fn a_lossless_run_loses_no_block_across_live_edits() {
    let pipeline = format!("gen count={N} size={SIZE} | count | count name=tail");
    let mut plain = build(&pipeline);
    plain.run(&AtomicBool::new(false), |_| {});
    let unedited = count_of(&plain.report(), "count:tail").expect("count:tail");
    assert_eq!(unedited, (N, N * SIZE));

    let mut labels = Vec::new();
    let r = run_edited(&pipeline, |h| {
        progress(h, "count:tail", 0);
        for text in [
            "insert after count sample every=1",
            "set sample every=1",
            "replace sample count name=mid",
            "insert before count:tail hist",
            "remove count:mid",
            "replace hist dedup window=1",
            "remove dedup",
        ] {
            let a = applied(h, text);
            if let Some(old) = &a.retired {
                // The instance an earlier edit made had blocks through it before this one.
                assert!(
                    old.counters.blocks_in > 0 && old.counters.blocks_out == old.counters.blocks_in,
                    "{text}: {old:?}"
                );
            }
            labels.push(a.label);
        }
        progress(h, "count:tail", blocks_in(h, "count:tail"));
    });
    assert_eq!(
        labels,
        [
            "sample",
            "sample",
            "count:mid",
            "hist",
            "count:mid",
            "dedup",
            "dedup"
        ]
    );
    assert_eq!(
        count_of(&r, "count:tail"),
        Some(unedited),
        "the edited run's tail counts what the unedited run's does"
    );
    assert_eq!(count_of(&r, "count"), Some(unedited));
    let now: Vec<&str> = r.iter().map(|n| n.label.as_str()).collect();
    assert_eq!(
        now,
        ["gen", "count", "count:tail"],
        "removed nodes are left out of the report"
    );
}

#[test]
fn an_insert_that_fails_to_build_leaves_the_run_unchanged() {
    let pipeline = format!("gen count={N} size={SIZE} | count | count name=tail");
    let mut before = Vec::new();
    let r = run_edited(&pipeline, |h| {
        progress(h, "count:tail", 0);
        before = h.report().into_iter().map(|n| n.label).collect();
        match h.apply(edit("insert after count sample every=banana"), WAIT) {
            Err(EditError::Build(e)) => {
                assert_eq!(e.label, "sample", "{e}");
                assert!(
                    matches!(&*e.kind, dataplane::BuildErrorKind::Filter(dataplane::FilterError::BadValue { key, value, .. }) if key == "every" && value == "banana"),
                    "{e}"
                );
                let shown = e.render("edit: ", "insert after count sample every=banana");
                assert!(
                    shown.contains("parameter every=banana") && shown.contains("^^^^"),
                    "{shown}"
                );
            }
            other => panic!("expected a build error, got {other:?}"),
        }
        let after: Vec<String> = h.report().into_iter().map(|n| n.label).collect();
        assert_eq!(after, before, "nothing was inserted");
        // The run goes on as before.
        let seen = blocks_in(h, "count:tail");
        progress(h, "count:tail", seen);
    });
    let labels: Vec<String> = r.iter().map(|n| n.label.clone()).collect();
    assert_eq!(labels, before);
    assert_eq!(count_of(&r, "count:tail"), Some((N, N * SIZE)));
}

#[test]
fn set_on_sample_changes_what_passes_afterwards() {
    let pipeline = format!("gen count={N} size={SIZE} | sample every=1 | count name=tail");
    let mut old = None;
    let r = run_edited(&pipeline, |h| {
        progress(h, "sample", 0);
        let a = applied(h, "set sample every=4");
        old = a.retired;
        progress(h, "count:tail", blocks_in(h, "count:tail"));
    });
    let old = old.expect("the old sample's report");
    // Up to the edit every block passed; from then on one in four (the 4th, 8th, ...).
    let a = old.counters.blocks_in;
    assert_eq!(old.counters.blocks_out, a, "every=1 passed all it saw");
    assert!(
        a > 0 && a < N,
        "the set came mid-run ({a} of {N} blocks seen)"
    );
    let want = a + (N - a) / 4;
    assert_eq!(
        count_of(&r, "count:tail"),
        Some((want, want * SIZE)),
        "{a} blocks before the set"
    );
    let s = r
        .iter()
        .find(|n| n.label == "sample")
        .and_then(|n| n.summary.clone())
        .unwrap();
    assert_eq!(
        s,
        format!("sample: 1 in 4: {} seen, {} passed", N - a, (N - a) / 4),
        "the new instance's own totals"
    );
}

/// `sample`'s (seen, passed) from its summary line.
fn sample_of(r: &[NodeReport]) -> (u64, u64) {
    let s = r
        .iter()
        .find(|n| n.label == "sample")
        .and_then(|n| n.summary.clone())
        .expect("sample's summary");
    let rest = s
        .strip_prefix("sample: 1 in 50: ")
        .unwrap_or_else(|| panic!("{s}"));
    let w: Vec<u64> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().unwrap())
        .collect();
    (w[0], w[1])
}

#[test]
fn a_branch_forks_a_running_pipeline_without_taking_from_it() {
    let pipeline = format!("gen count={N} size={SIZE} | count name=head | count name=tail");
    let mut graph = Vec::new();
    let r = run_edited(&pipeline, |h| {
        progress(h, "count:tail", 0);
        assert_eq!(
            applied(h, "branch count:head sample every=50").label,
            "sample"
        );
        // Past the 50th block, so sample has passed one before anything is below it.
        progress(h, "sample", 50);
        // Below the leaf: from now on its output goes on.
        assert_eq!(
            applied(h, "branch sample count name=side").label,
            "count:side"
        );
        progress(h, "count:side", 0);
        graph = h.graph();
    });
    let shown: Vec<(&str, &str, Vec<&str>)> = graph
        .iter()
        .map(|n| {
            (
                n.label.as_str(),
                n.filter.as_str(),
                n.outputs.iter().map(|s| s.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (
                "gen",
                format!("gen count={N} size={SIZE}").as_str(),
                vec!["count:head"]
            ),
            ("count:head", "count", vec!["count:tail", "sample"]),
            ("count:tail", "count", vec![]),
            ("sample", "sample every=50", vec!["count:side"]),
            ("count:side", "count", vec![]),
        ]
    );
    assert_eq!(
        count_of(&r, "count:tail"),
        Some((N, N * SIZE)),
        "the old successor got every block"
    );
    let head = r.iter().find(|n| n.label == "count:head").unwrap();
    // head's output went to the tail (all N) and, from the branch on, to sample as well:
    // a block counts once out of its node however many arcs carry it.
    assert_eq!(
        head.counters.blocks_out, N,
        "head's blocks out, counted once each"
    );
    let to_sample = r
        .iter()
        .find(|n| n.label == "sample")
        .unwrap()
        .counters
        .blocks_in;
    assert!(
        to_sample > 0 && to_sample < N,
        "the branch came mid-run: sample got {to_sample} of {N}"
    );
    let sample = r.iter().find(|n| n.label == "sample").unwrap();
    assert_eq!(
        sample.counters.blocks_in, to_sample,
        "the branch saw exactly what head emitted after the edit"
    );
    let (seen, passed) = sample_of(&r);
    assert_eq!((seen, passed), (to_sample, to_sample / 50));
    // A leaf's output ends there and is not counted; from count:side on it was.
    let (side, _) = count_of(&r, "count:side").expect("count:side");
    assert_eq!(
        sample.counters.blocks_out, side,
        "count:side counted all that sample passed once it was below it"
    );
    assert!(
        side > 0 && side < passed,
        "count:side came after sample had passed some: {side} of {passed}"
    );
}
