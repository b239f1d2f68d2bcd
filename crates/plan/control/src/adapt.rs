//! Closing the loop (seed 003; `streamline run --adapt`): a monitor reads the time each
//! filter spends, as the runtime counts it, and when the measured costs say that another
//! cut of the pipeline between its thread spaces would run faster, it moves filters
//! across the channels while the run runs (`dataplane::edit::EditHandle::migrate`: at
//! batch boundaries, with their state; no block lost or reordered).
//!
//! # The model
//!
//! Every window (250 ms) the monitor takes each live filter's busy share of the window:
//! the time the runtime charged it, over the window's length. A space's load is the sum of
//! its filters' shares (channel endpoints and sources are left out: their time is
//! mostly waiting, for data or for room). In a
//! pipeline whose spaces all work on the same stream, the most loaded space sets the pace,
//! so the plan's figure of merit is the largest load ([`View::bottleneck`]).
//!
//! A move takes one filter across one channel ([`Candidate`]: the last filter of a space
//! down into the next, or the first one of a space up into the one before); it moves the
//! filter's share with it. The monitor re-solves over every move it can make now and takes
//! the best, if
//!
//! - the most loaded space is busy at all ([`Policy::busy`]: a pipeline held back by its
//!   source gains nothing from moving work around), and
//! - the predicted bottleneck is lower than now by more than the hysteresis
//!   ([`Policy::gain`]), which also prices the move itself: a move up pauses the producer
//!   until the consumer reaches the marker, and the windows after a move measure a
//!   pipeline that is still settling. A move back would have to promise the same gain
//!   again, so two cuts of nearly equal merit do not flip back and forth.
//!
//! After a move the monitor waits [`Policy::settle`] windows before it measures again.
//! Every decision is logged with the measured loads that made it, and so is every
//! refusal (a filter that may not move is not proposed again).
//!
//! This is a local search of one move at a time over the cuts reachable across the
//! existing channels, not the integer program of [`crate::optimize`]: a running
//! pipeline's spaces and channels are fixed, and along a chain of spaces the best cut is
//! reached by such moves.

use dataplane::edit::{EditHandle, GraphNode};
use dataplane::NodeReport;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// When to move.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Measurement window.
    pub window: Duration,
    /// The most loaded space must be at least this busy (share of one CPU).
    pub busy: f64,
    /// A move must lower the predicted bottleneck by at least this fraction.
    pub gain: f64,
    /// Windows to let pass after a move before measuring again.
    pub settle: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            window: Duration::from_millis(250),
            busy: 0.5,
            gain: 0.15,
            settle: 2,
        }
    }
}

/// One live filter's load in a window.
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    pub label: String,
    pub space: usize,
    /// Busy share of one CPU.
    pub busy: f64,
}

/// A move the monitor could make: `label` (as the run labels it, `count@1`) from space
/// `from` to space `to`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Candidate {
    pub label: String,
    pub from: usize,
    pub to: usize,
}

/// The run as measured over one window.
#[derive(Debug, Clone, Default)]
pub struct View {
    pub loads: Vec<Load>,
    /// Arcs between spaces: (from label, from space, to label, to space).
    pub cuts: Vec<(String, usize, String, usize)>,
}

/// A move chosen, with why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub candidate: Candidate,
    pub before: f64,
    pub after: f64,
    pub reason: String,
}

fn space_of(n: &GraphNode) -> Option<usize> {
    n.space.parse().ok()
}

impl View {
    /// The window between two reports `a` (earlier) and `b`, `secs` apart, over the
    /// graph `g` as it runs. Filters not in both reports (moved in between, so labelled
    /// anew) count as idle.
    pub fn measure(g: &[GraphNode], a: &[NodeReport], b: &[NodeReport], secs: f64) -> View {
        let before: HashMap<&str, u64> = a
            .iter()
            .map(|n| (n.label.as_str(), n.counters.nanos))
            .collect();
        let space: HashMap<&str, usize> = g
            .iter()
            .filter_map(|n| Some((n.label.as_str(), space_of(n)?)))
            .collect();
        // A source's time is mostly waiting (for packets, for its ring's room, for its
        // pace), and it cannot move: left out.
        let sources: HashSet<&str> = g
            .iter()
            .filter(|n| n.source)
            .map(|n| n.label.as_str())
            .collect();
        let loads = b
            .iter()
            .filter(|n| !sources.contains(n.label.as_str()))
            .filter_map(|n| {
                let s = *space.get(n.label.as_str())?;
                let t0 = *before.get(n.label.as_str())?;
                Some(Load {
                    label: n.label.clone(),
                    space: s,
                    busy: n.counters.nanos.saturating_sub(t0) as f64 / 1e9 / secs.max(1e-9),
                })
            })
            .collect();
        let mut cuts = Vec::new();
        for n in g {
            let Some(a) = space_of(n) else { continue };
            for o in &n.outputs {
                if let Some(&b) = space.get(o.as_str()) {
                    if b != a {
                        cuts.push((n.label.clone(), a, o.clone(), b));
                    }
                }
            }
        }
        View { loads, cuts }
    }

    /// Load per space.
    pub fn spaces(&self) -> BTreeMap<usize, f64> {
        let mut m = BTreeMap::new();
        for l in &self.loads {
            *m.entry(l.space).or_insert(0.0) += l.busy;
        }
        for c in &self.cuts {
            m.entry(c.1).or_insert(0.0);
            m.entry(c.3).or_insert(0.0);
        }
        m
    }

    /// The largest load of a space.
    pub fn bottleneck(&self) -> f64 {
        self.spaces().values().copied().fold(0.0, f64::max)
    }

    /// The moves across the channels there are now: the filter before each cut down, the
    /// one after it up.
    pub fn candidates(&self) -> Vec<Candidate> {
        let mut v = Vec::new();
        for (from, a, to, b) in &self.cuts {
            for c in [
                Candidate {
                    label: from.clone(),
                    from: *a,
                    to: *b,
                },
                Candidate {
                    label: to.clone(),
                    from: *b,
                    to: *a,
                },
            ] {
                if !v.contains(&c) {
                    v.push(c);
                }
            }
        }
        v
    }

    /// The bottleneck if `c` were made.
    pub fn after(&self, c: &Candidate) -> f64 {
        let share = self
            .loads
            .iter()
            .find(|l| l.label == c.label)
            .map_or(0.0, |l| l.busy);
        let mut m = self.spaces();
        *m.entry(c.from).or_insert(0.0) -= share;
        *m.entry(c.to).or_insert(0.0) += share;
        m.values().copied().fold(0.0, f64::max)
    }
}

/// The best move now, if one pays (see the module documentation); `refused`: moves the
/// run refused before.
pub fn decide(view: &View, policy: &Policy, refused: &HashSet<Candidate>) -> Option<Decision> {
    let before = view.bottleneck();
    if before < policy.busy {
        return None;
    }
    let (c, after) = view
        .candidates()
        .into_iter()
        .filter(|c| !refused.contains(c))
        .map(|c| {
            let a = view.after(&c);
            (c, a)
        })
        .min_by(|x, y| x.1.total_cmp(&y.1))?;
    if after > before * (1.0 - policy.gain) {
        return None;
    }
    let loads: Vec<String> = view
        .spaces()
        .iter()
        .map(|(s, l)| format!("space {s} {:.0}%", l * 100.0))
        .collect();
    let share = view
        .loads
        .iter()
        .find(|l| l.label == c.label)
        .map_or(0.0, |l| l.busy);
    let reason = format!(
        "measured {} ({} {:.0}%); predicted bottleneck {:.0}% -> {:.0}%",
        loads.join(", "),
        c.label,
        share * 100.0,
        before * 100.0,
        after * 100.0
    );
    Some(Decision {
        candidate: c,
        before,
        after,
        reason,
    })
}

/// What the monitor did, for its caller's report.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Moves made, each with its decision.
    pub moves: Vec<Decision>,
    /// Moves the run refused.
    pub refused: usize,
}

/// Watch the run behind `h` until `done`, moving filters as [`decide`] says; `log` gets
/// one line per decision and refusal.
pub fn monitor(
    h: &EditHandle,
    done: &AtomicBool,
    policy: &Policy,
    mut log: impl FnMut(&str),
) -> Outcome {
    let mut out = Outcome::default();
    let mut refused = HashSet::new();
    let mut last = (Instant::now(), h.report());
    let mut quiet = 0u32;
    while !done.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        while t0.elapsed() < policy.window {
            if done.load(Ordering::Relaxed) {
                return out;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let now = (Instant::now(), h.report());
        let view = View::measure(
            &h.graph(),
            &last.1,
            &now.1,
            now.0.duration_since(last.0).as_secs_f64(),
        );
        last = now;
        if quiet > 0 {
            quiet -= 1;
            continue;
        }
        let Some(d) = decide(&view, policy, &refused) else {
            continue;
        };
        let c = &d.candidate;
        match h.migrate(&c.label, c.to, Duration::from_secs(5)) {
            Ok(_) => {
                log(&format!(
                    "adapt: moved {} from space {} to space {}: {}",
                    c.label, c.from, c.to, d.reason
                ));
                out.moves.push(d);
                quiet = policy.settle;
                last = (Instant::now(), h.report());
            }
            Err(dataplane::EditError::Ended) => return out,
            Err(e) => {
                log(&format!(
                    "adapt: not moving {} to space {}: {e}",
                    c.label, c.to
                ));
                out.refused += 1;
                refused.insert(d.candidate);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(loads: &[(&str, usize, f64)], cuts: &[(&str, usize, &str, usize)]) -> View {
        View {
            loads: loads
                .iter()
                .map(|&(l, s, b)| Load {
                    label: l.into(),
                    space: s,
                    busy: b,
                })
                .collect(),
            cuts: cuts
                .iter()
                .map(|&(a, s, b, t)| (a.into(), s, b.into(), t))
                .collect(),
        }
    }

    #[test]
    fn the_busy_side_gives_its_filter_next_to_the_channel_away() {
        // gen a b | c d: after a cost shift, c and d are expensive.
        let v = view(
            &[
                ("gen@0", 0, 0.05),
                ("a@0", 0, 0.05),
                ("b@0", 0, 0.05),
                ("c@1", 1, 0.50),
                ("d@1", 1, 0.45),
            ],
            &[("b@0", 0, "c@1", 1)],
        );
        let d = decide(&v, &Policy::default(), &HashSet::new()).expect("a move pays");
        assert_eq!(
            d.candidate,
            Candidate {
                label: "c@1".into(),
                from: 1,
                to: 0
            }
        );
        assert!((d.before - 0.95).abs() < 1e-9 && (d.after - 0.65).abs() < 1e-9);
        assert!(d.reason.contains("space 1 95%"), "{}", d.reason);
    }

    #[test]
    fn balanced_idle_or_refused_plans_stay() {
        let cut = [("b@0", 0, "c@1", 1)];
        // Balanced: any move makes it worse.
        let v = view(&[("b@0", 0, 0.5), ("c@1", 1, 0.5)], &cut);
        assert!(decide(&v, &Policy::default(), &HashSet::new()).is_none());
        // A gain below the hysteresis: not worth a move.
        let v = view(&[("a@0", 0, 0.5), ("b@0", 0, 0.1), ("c@1", 1, 0.55)], &cut);
        assert!(decide(&v, &Policy::default(), &HashSet::new()).is_none());
        // Held back by its source: nobody is busy.
        let v = view(&[("b@0", 0, 0.05), ("c@1", 1, 0.3), ("d@1", 1, 0.1)], &cut);
        assert!(decide(&v, &Policy::default(), &HashSet::new()).is_none());
        // The only move that pays was refused before.
        let v = view(&[("b@0", 0, 0.1), ("c@1", 1, 0.5), ("d@1", 1, 0.45)], &cut);
        let no: HashSet<Candidate> = [Candidate {
            label: "c@1".into(),
            from: 1,
            to: 0,
        }]
        .into();
        assert!(decide(&v, &Policy::default(), &no).is_none());
    }

    /// A chain of filters with these loads, the first `k` in space 0, the rest in 1.
    fn chain(busy: &[f64], k: usize) -> View {
        let label = |i: usize| format!("f{i}@{}", usize::from(i >= k));
        View {
            loads: busy
                .iter()
                .enumerate()
                .map(|(i, &b)| Load {
                    label: label(i),
                    space: usize::from(i >= k),
                    busy: b,
                })
                .collect(),
            cuts: vec![(label(k - 1), 0, label(k), 1)],
        }
    }

    proptest::proptest! {
        /// If moving a filter across pays, moving it straight back does not (the
        /// hysteresis): no oscillation, whatever the loads.
        #[test]
        fn a_move_and_its_way_back_never_both_pay(
            busy in proptest::collection::vec(0.0f64..1.0, 3..8),
            k in 1usize..7,
        ) {
            let k = k.min(busy.len() - 1);
            let p = Policy::default();
            let v = chain(&busy, k);
            if let Some(d) = decide(&v, &p, &HashSet::new()) {
                let k2 = if d.candidate.to == 1 { k - 1 } else { k + 1 };
                if (1..busy.len()).contains(&k2) {
                    let back = decide(&chain(&busy, k2), &p, &HashSet::new());
                    let undoes = back.as_ref().is_some_and(|b| {
                        b.candidate.label.split('@').next() == d.candidate.label.split('@').next()
                    });
                    proptest::prop_assert!(!undoes, "{:?} then {:?}", d, back);
                }
            }
        }
    }
}
