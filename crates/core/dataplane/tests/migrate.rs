//! Filters moving between thread spaces while the run runs (`migrate`): no block lost,
//! duplicated or reordered, state and counters moving with the filter, selectors kept,
//! and the moves that cannot keep a filter's meaning refused by name.

use dataplane::channel::ChannelConfig;
use dataplane::spaces::{Spaces, SpacesReport};
use dataplane::{EditError, EditHandle, Refusal};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

mod common;
use common::{graph, F};

fn cfg() -> ChannelConfig {
    ChannelConfig {
        data: 1 << 16,
        slots: 1024,
        ..Default::default()
    }
}

/// Run `text` with an edit handle (what moves need), `chaos` moving filters at random.
fn run(text: &str, chaos: Option<u64>) -> SpacesReport {
    let g = graph(text);
    let mut spaces = Spaces::build(&g, &F, 1 << 20, cfg()).unwrap();
    if let Some(seed) = chaos {
        spaces.set_chaos(seed);
    }
    let h = spaces.edit_handle();
    let rep = spaces.run_with(&AtomicBool::new(false), &h, &F, |_| {});
    assert!(
        rep.died.is_none() && !rep.failed && rep.warnings.is_empty(),
        "`{text}`: {:?} {:?}",
        rep.died,
        rep.warnings
    );
    rep
}

fn summaries(rep: &SpacesReport) -> Vec<String> {
    let mut v: Vec<String> = rep.nodes.iter().filter_map(|n| n.summary.clone()).collect();
    v.sort();
    v
}

/// Random moves at random batch boundaries (and source batches of random sizes) change
/// nothing: the same blocks, in the same order, with the same classes, reach every filter.
#[test]
fn random_moves_change_no_result() {
    let cases = [
        // (reference in one space, the same split over spaces)
        (
            "src 60000 | tally | pass | tally | pass | sink",
            "src 60000 | tally | pass space=1 | tally | pass space=2 | sink",
        ),
        // Selectors on the arcs next to the channels travel with the filters.
        (
            "src 60000 | every | odd |3 tally | pass |!0 tally | pass",
            "src 60000 | every | odd |3 tally space=1 | pass |!0 tally space=2 | pass",
        ),
        (
            "src 60000 | odd |1 tally | pass | tally",
            "src 60000 | odd |1 tally | pass space=1 | tally",
        ),
    ];
    let (mut down, mut up) = (0, 0);
    for (one, split) in cases {
        let want = summaries(&run(one, None));
        assert!(!want.is_empty());
        for seed in 1..=8u64 {
            let rep = run(split, Some(seed));
            assert_eq!(summaries(&rep), want, "`{split}` with chaos seed {seed}");
            down += rep.chaos_moves.0;
            up += rep.chaos_moves.1;
        }
    }
    eprintln!("moves made: {down} down, {up} up");
    // The test means something only if filters did move, both ways.
    assert!(down > 0 && up > 0, "moves made: {down} down, {up} up");
}

fn label_space(h: &EditHandle, base: &str) -> Option<String> {
    h.report()
        .into_iter()
        .map(|n| n.label)
        .find(|l| l.split('@').next() == Some(base))
}

/// Wait until `cond` holds on the run's counters (they are published every ~100 ms).
fn wait_for(h: &EditHandle, what: &str, cond: impl Fn(&EditHandle) -> bool) {
    let t0 = Instant::now();
    while !cond(h) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "waited 20 s for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops the run however the test's thread leaves the scope (a failed assertion too).
struct Stop<'a>(&'a AtomicBool);
impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Moves asked for by name: down, then back up; its counters go with it; moves that
/// cannot be made are refused saying why, and change nothing.
#[test]
fn a_filter_moves_down_and_back_with_its_counters() {
    let g = graph("src 4000000000 | tally | pass | tally space=1 | hold | sink");
    let spaces = Spaces::build(&g, &F, 1 << 20, cfg()).unwrap();
    let h = spaces.edit_handle();
    let h2 = h.clone();
    let stop = AtomicBool::new(false);
    let rep = std::thread::scope(|s| {
        let stop = &stop;
        let _stop = Stop(stop);
        let run = s.spawn(move || spaces.run_with(stop, &h2, &F, |_| {}));
        wait_for(&h, "blocks to flow", |h| {
            h.report()
                .iter()
                .any(|n| n.label == "sink@1" && n.counters.blocks_in > 0)
        });
        // Not next to a channel, a source, a filter holding blocks, a space that is not.
        let e = h.migrate("tally@0", 1, Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(
                e,
                EditError::Refused {
                    why: Refusal::NoChannel(_),
                    ..
                }
            ),
            "{e}"
        );
        assert!(h.migrate("src@0", 1, Duration::from_secs(5)).is_err());
        let e = h
            .migrate("nothing@0", 1, Duration::from_secs(5))
            .unwrap_err();
        assert!(matches!(e, EditError::NoNode { .. }), "{e}");
        let e = h.migrate("pass@0", 7, Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(
                e,
                EditError::Refused {
                    why: Refusal::NoSpace(_),
                    ..
                }
            ),
            "{e}"
        );
        // Down: pass leaves space 0 and arrives in space 1 with what it counted.
        let before = h
            .report()
            .into_iter()
            .find(|n| n.label == "pass@0")
            .unwrap();
        assert_eq!(
            h.migrate("pass@0", 1, Duration::from_secs(5)).unwrap(),
            "pass"
        );
        wait_for(&h, "pass to arrive in space 1", |h| {
            label_space(h, "pass").as_deref() == Some("pass@1")
        });
        let after = h
            .report()
            .into_iter()
            .find(|n| n.label == "pass@1")
            .unwrap();
        assert!(after.counters.blocks_in >= before.counters.blocks_in);
        // Up again; then the first tally of space 1 (labelled `tally` there) cannot go up:
        // pass is between it and the channel... once pass is back, it can.
        assert_eq!(
            h.migrate("pass@1", 0, Duration::from_secs(5)).unwrap(),
            "pass"
        );
        wait_for(&h, "pass back in space 0", |h| {
            label_space(h, "pass").as_deref() == Some("pass@0")
        });
        // The tally of space 1 moves up; space 0 has one already, so the two stay apart.
        let t1 = h
            .report()
            .into_iter()
            .find(|n| n.label.starts_with("tally") && n.label.ends_with("@1"))
            .unwrap()
            .label;
        let moved = h.migrate(&t1, 0, Duration::from_secs(5)).unwrap();
        wait_for(&h, "two tallies in space 0", |h| {
            h.report()
                .iter()
                .filter(|n| n.label.starts_with("tally") && n.label.ends_with("@0"))
                .count()
                == 2
        });
        assert!(t1.starts_with(&moved));
        // hold keeps blocks: refused by name, and the run goes on.
        let e = h.migrate("hold@1", 0, Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(e, EditError::Refused { why: Refusal::Immovable(ref w), .. } if w.contains("holds blocks")),
            "{e}"
        );
        drop(_stop);
        run.join().unwrap()
    });
    assert!(rep.died.is_none(), "{:?} {:?}", rep.died, rep.warnings);
    // The sink checked every block's sequence (in order, none missing); both tallies saw
    // the same blocks in the same order, as many as the sink.
    let s = summaries(&rep);
    let sink: Vec<&String> = s.iter().filter(|l| l.starts_with("sink: ")).collect();
    let n = sink[0].trim_start_matches("sink: ");
    // Summaries are the filters' own (`tally: ...`); the command's printer labels lines
    // that start alike (`summary_lines` in crates/tools/cli).
    let tallies: Vec<&String> = s.iter().filter(|l| l.starts_with("tally: ")).collect();
    assert_eq!(tallies.len(), 2, "{s:?}");
    assert_eq!(tallies[0], tallies[1], "{s:?}");
    assert!(
        tallies[0].starts_with(&format!("tally: {n} blocks")),
        "{s:?}"
    );
}

/// A filter moving back and forth is counted once in the run's table as it runs: its
/// count never goes back (a space that gave it away shows it no more before the space that
/// takes it shows it), whatever moment the table is read at.
#[test]
fn a_moving_filter_is_never_counted_twice() {
    let g = graph("src 4000000000 | tally | pass | tally space=1 | sink");
    let spaces = Spaces::build(&g, &F, 1 << 20, cfg()).unwrap();
    let h = spaces.edit_handle();
    let h2 = h.clone();
    let stop = AtomicBool::new(false);
    let moving = AtomicBool::new(true);
    let rep = std::thread::scope(|s| {
        let (stop, moving) = (&stop, &moving);
        let _stop = Stop(stop);
        let run = s.spawn(move || spaces.run_with(stop, &h2, &F, |_| {}));
        wait_for(&h, "blocks to flow", |h| {
            h.report()
                .iter()
                .any(|n| n.label == "sink@1" && n.counters.blocks_in > 0)
        });
        // The table, read as fast as it can be while pass moves: (samples, pass's
        // counts in order where it was shown).
        let reader = s.spawn(|| {
            let mut seen = Vec::new();
            while moving.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(n) = h.table().nodes.iter().find(|n| n.label == "pass") {
                    seen.push(n.counters.blocks_in);
                }
            }
            seen
        });
        let mut moves = 0;
        for k in 0..40 {
            let (from, to) = if k % 2 == 0 {
                ("pass@0", 1)
            } else {
                ("pass@1", 0)
            };
            assert_eq!(h.migrate(from, to, Duration::from_secs(5)).unwrap(), "pass");
            let there = format!("pass@{to}");
            wait_for(&h, "pass to arrive", |h| {
                label_space(h, "pass").as_deref() == Some(there.as_str())
            });
            moves += 1;
        }
        moving.store(false, std::sync::atomic::Ordering::Relaxed);
        let seen = reader.join().unwrap();
        assert!(seen.len() > 100, "the table was read {} times", seen.len());
        for w in seen.windows(2) {
            assert!(
                w[1] >= w[0],
                "after {moves} moves, pass's count in the table went back from {} to {} (counted in two spaces at once?)",
                w[0],
                w[1]
            );
        }
        drop(_stop);
        run.join().unwrap()
    });
    assert!(rep.died.is_none(), "{:?} {:?}", rep.died, rep.warnings);
}

/// An exported filter moves with its exported stream (`crate::export`'s node goes along):
/// down and back up, the graph shows the stream's node on the filter in whichever space it
/// runs, and the stream's reader reads every block the filter passed on, in order, none
/// twice, until the run ends the stream.
#[test]
fn an_exported_filter_moves_with_its_stream() {
    let name = format!("mvexp{}", std::process::id());
    let g = graph(&format!(
        "src 4000000000 | pass name={name} export=yes | tally space=1 | sink"
    ));
    let spaces = Spaces::build(&g, &F, 1 << 20, cfg()).unwrap();
    // Attached before the first block: the stream is lossless from its start.
    let tags = beltway::Reader::open(&dataplane::export_name(&name), beltway::Start::Oldest)
        .expect("the exported stream");
    let h = spaces.edit_handle();
    let h2 = h.clone();
    let stop = AtomicBool::new(false);
    let (label, export) = (format!("pass:{name}"), format!("__export.{name}"));
    let (seqs, rep) = std::thread::scope(|s| {
        let stop = &stop;
        let _stop = Stop(stop);
        let reader = s.spawn(move || {
            let mut r = beltway::IbufReader::new(tags, beltway::BufTable::new()).unwrap();
            let (mut seqs, mut buf) = (Vec::new(), [0u8; 256]);
            while r.read(&mut buf).expect("read through") > 0 {
                seqs.push(u32::from_le_bytes(buf[..4].try_into().unwrap()));
            }
            seqs
        });
        let run = s.spawn(move || spaces.run_with(stop, &h2, &F, |_| {}));
        wait_for(&h, "blocks to flow", |h| {
            h.report()
                .iter()
                .any(|n| n.label == "sink@1" && n.counters.blocks_in > 0)
        });
        for (from, to) in [(0, 1), (1, 0)] {
            let at = format!("{label}@{from}");
            assert_eq!(h.migrate(&at, to, Duration::from_secs(5)).unwrap(), label);
            let there = format!("{label}@{to}");
            wait_for(&h, "the move", |h| {
                label_space(h, &label).as_deref() == Some(there.as_str())
            });
            let (node, from) = (format!("{export}@{to}"), there.clone());
            wait_for(&h, "the export shown on the moved filter", |h| {
                h.graph()
                    .iter()
                    .any(|n| n.label == node && n.inputs == [from.clone()])
            });
        }
        drop(_stop);
        let rep = run.join().unwrap();
        (reader.join().unwrap(), rep)
    });
    assert!(rep.died.is_none(), "{:?} {:?}", rep.died, rep.warnings);
    assert!(seqs.len() > 1000, "{} blocks exported", seqs.len());
    assert!(
        seqs.iter().enumerate().all(|(k, s)| *s == k as u32),
        "blocks missing, twice or out of order in the stream of {} blocks",
        seqs.len()
    );
    let pass = rep
        .nodes
        .iter()
        .find(|n| n.label == label)
        .expect("its row");
    assert_eq!(
        pass.counters.blocks_out,
        seqs.len() as u64,
        "the stream is what it passed on"
    );
    assert!(
        rep.nodes.iter().all(|n| !n.label.starts_with("__")),
        "no row of the run's own"
    );
}
