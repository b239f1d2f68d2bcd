//! The `adapt` subcommand (seed 003; issue 19): what closing the loop buys after the
//! costs shift under a running pipeline, and that moving filters loses nothing.
//!
//! A chain split over two pinned thread spaces,
//! `gen size=64 | work:a | work:b | work:c space=1 | work:d | seqcheck | null`, where
//! `work ns=N` spends N ns of CPU per block and `seqcheck` checks gen's sequence numbers
//! (every block, once, in order). It starts balanced (every `work` 300 ns: two per space).
//! After a warm-up the costs shift, by live edits, as when the traffic mix changes: `a`
//! and `b` drop to 30 ns, `c` and `d` rise to 600 ns, so space 1 now carries nearly all of
//! it. The same run twice: with the plan kept (static), and with the monitor of
//! `control::adapt` beside it (what `streamline run --adapt` runs), which measures the
//! filters' time and moves filters across the channel. Reported: blocks/s at the sink
//! from half a second after the shift to the end, and what `seqcheck` and the counters
//! say about blocks lost, duplicated or reordered across the moves. A third run moves
//! filters at random batch boundaries all along (`--chaos`), thousands of moves, under
//! the same checks.
//!
//! The source runs flat out: the load is what this machine's two spaces can carry.

use crate::util::{err, watchdog, Result, Summary, Target};
use control::adapt::{monitor, Policy};
use dataplane::channel::ChannelConfig;
use dataplane::spaces::Spaces;
use dataplane::{Args as FilterArgs, Batch, Ctx, Edit, EditHandle, Factory, Filter};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds after the shift.
    #[arg(long)]
    after: Option<f64>,
}

/// `work ns=N`: N ns of CPU per block (spun per batch).
struct Work(u64);
impl Filter for Work {
    fn process(&mut self, _: &mut Ctx<'_>, b: &mut Batch) {
        let until = Duration::from_nanos(self.0 * b.tags.len() as u64);
        let t0 = Instant::now();
        while t0.elapsed() < until {
            std::hint::spin_loop();
        }
    }
}

/// `seqcheck`: gen's blocks start with their 8-byte sequence number; counts the blocks
/// and those not the one after the last.
#[derive(Default)]
struct SeqCheck {
    next: u64,
    seen: u64,
    wrong: u64,
}
impl Filter for SeqCheck {
    fn process(&mut self, cx: &mut Ctx<'_>, b: &mut Batch) {
        for t in &b.tags {
            let seq = cx
                .data(t)
                .ok()
                .and_then(|d| d.get(..8))
                .map(|d| u64::from_le_bytes(d.try_into().expect("8 bytes")));
            if seq != Some(self.next) {
                self.wrong += 1;
            }
            self.next = seq.map_or(self.next, |s| s + 1);
            self.seen += 1;
        }
    }
    fn summary(&self) -> Option<String> {
        Some(format!(
            "seqcheck: {} blocks, {} out of sequence",
            self.seen, self.wrong
        ))
    }
}

struct AdaptFactory;
impl Factory for AdaptFactory {
    fn make(
        &self,
        name: &str,
        args: &FilterArgs,
    ) -> std::result::Result<Box<dyn Filter>, dataplane::FilterError> {
        match name {
            "work" => Ok(Box::new(Work(args.parse("ns", Some(0), 100)?))),
            "seqcheck" => Ok(Box::<SeqCheck>::default()),
            _ => filters::Library.make(name, args),
        }
    }
    fn is_source(&self, name: &str) -> bool {
        filters::Library.is_source(name)
    }
    fn keeps_blocks(&self, name: &str) -> bool {
        filters::Library.keeps_blocks(name)
    }
}

struct AdaptResolver;
impl lang::Resolver for AdaptResolver {
    fn resolve(&self, name: &str) -> Option<lang::FilterKind> {
        match name {
            "work" | "seqcheck" => Some(lang::FilterKind::Native),
            _ => filters::Natives.resolve(name),
        }
    }
    fn native_names(&self) -> Vec<String> {
        let mut v = filters::Natives.native_names();
        v.extend(["work".to_string(), "seqcheck".to_string()]);
        v
    }
    fn params(&self, name: &str) -> Option<Vec<String>> {
        match name {
            "work" => Some(vec!["ns".into()]),
            "seqcheck" => Some(vec![]),
            _ => filters::Natives.params(name),
        }
    }
}

const TEXT: &str = "gen count=1000000000000 size=64 | work name=a ns=300 | work name=b ns=300 \
                    | work name=c ns=300 space=1 | work name=d ns=300 | seqcheck | null";
const SHIFT: [&str; 4] = [
    "set work:a ns=30",
    "set work:b ns=30",
    "set work:c ns=600",
    "set work:d ns=600",
];

/// Stops the run when the measuring thread leaves its scope, however it leaves.
struct Stop<'a>(&'a AtomicBool);
impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One run's figures.
struct Outcome {
    before: f64,
    after: f64,
    sent: u64,
    checked: String,
    received: u64,
    moves: Vec<String>,
}

fn counter(h: &EditHandle, base: &str, out: bool) -> u64 {
    h.report()
        .into_iter()
        .filter(|n| n.label.split('@').next() == Some(base))
        .map(|n| {
            if out {
                n.counters.blocks_out
            } else {
                n.counters.blocks_in
            }
        })
        .sum()
}

/// Blocks/s into the sink over `secs`, from the published counters.
fn rate(h: &EditHandle, secs: f64) -> f64 {
    let (t0, n0) = (Instant::now(), counter(h, "seqcheck", false));
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (t1, n1) = (Instant::now(), counter(h, "seqcheck", false));
    (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
}

fn run_once(adapt: bool, chaos: Option<u64>, warm: f64, after: f64) -> Result<Outcome> {
    let g = lang::parse(TEXT, &AdaptResolver).map_err(|d| err(format!("{d}")))?;
    let mut spaces = Spaces::build(&g, &AdaptFactory, 64 << 20, ChannelConfig::default())
        .map_err(|e| err(format!("building `{TEXT}`: {e}")))?;
    if let Some(seed) = chaos {
        spaces.set_chaos(seed);
    }
    let h = spaces.edit_handle();
    let stop = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let moves = std::sync::Mutex::new(Vec::new());
    let (rep, before, after_rate) = std::thread::scope(|s| -> Result<_> {
        let run = s.spawn(|| {
            let r = spaces.run_with(&stop, &h, &AdaptFactory, |_| {});
            done.store(true, Ordering::Relaxed);
            r
        });
        if adapt {
            s.spawn(|| {
                monitor(&h, &done, &Policy::default(), |l| {
                    println!("    {l}");
                    moves.lock().expect("not poisoned").push(l.to_string());
                })
            });
        }
        let _stop = Stop(&stop);
        // Warm up; the rate before the shift over the second half of it.
        std::thread::sleep(Duration::from_secs_f64(warm / 2.0));
        let before = rate(&h, warm / 2.0);
        for e in SHIFT {
            let edit = Edit::parse(e, &AdaptResolver).map_err(|x| err(format!("{e}: {x}")))?;
            // With chaos the filter may be between spaces for a moment: ask again.
            let mut tries = 0;
            while let Err(x) = h.apply(edit.clone(), Duration::from_secs(5)) {
                tries += 1;
                if tries == 100 {
                    return Err(err(format!("{e}: {x}")));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        std::thread::sleep(Duration::from_millis(500));
        let after_rate = rate(&h, after - 0.5);
        drop(_stop);
        let rep = run.join().map_err(|_| err("the run panicked"))?;
        Ok((rep, before, after_rate))
    })?;
    let mut moves = moves.into_inner().expect("not poisoned");
    if chaos.is_some() {
        let (d, u, _) = rep.chaos_moves;
        moves.extend((0..d + u).map(|_| String::new()));
    }
    if let Some(d) = rep.died {
        return Err(err(d));
    }
    let find = |base: &str| {
        rep.nodes
            .iter()
            .filter(|n| n.label.split('@').next() == Some(base))
            .collect::<Vec<_>>()
    };
    let sent = find("gen").iter().map(|n| n.counters.blocks_out).sum();
    let received = find("null").iter().map(|n| n.counters.blocks_in).sum();
    let checked = find("seqcheck")
        .first()
        .and_then(|n| n.summary.clone())
        .unwrap_or_default();
    Ok(Outcome {
        before,
        after: after_rate,
        sent,
        checked,
        received,
        moves,
    })
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(300));
    let (warm, after) = if quick {
        (1.0, a.after.unwrap_or(1.5))
    } else {
        (2.0, a.after.unwrap_or(4.0))
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("streamline-bench adapt: {cpus} CPUs");
    println!("  {TEXT}");
    println!("  shift after {warm} s: {}", SHIFT.join("; "));
    let mut summary = Summary::default();
    let mut outs = Vec::new();
    for (adapt, chaos) in [(false, None), (true, None), (false, Some(7))] {
        let name = match (adapt, chaos) {
            (true, _) => "adaptive",
            (_, Some(_)) => "chaos (a filter moved at random batch boundaries, about one in three)",
            _ => "static",
        };
        println!("  {name}:");
        let o = run_once(adapt, chaos, warm, after)?;
        println!(
            "    before the shift {:.0} blocks/s, after it {:.0} blocks/s; gen sent {}, the sink received {}; {}; {} moves",
            o.before,
            o.after,
            o.sent,
            o.received,
            o.checked,
            o.moves.len()
        );
        outs.push(o);
    }
    let (st, ad, ch) = (&outs[0], &outs[1], &outs[2]);
    let wrong = |o: &Outcome| -> u64 {
        o.checked
            .split(", ")
            .nth(1)
            .and_then(|w| w.split(' ').next())
            .and_then(|w| w.parse().ok())
            .unwrap_or(u64::MAX)
    };
    let lost = |o: &Outcome| {
        o.sent.saturating_sub(o.received) + o.received.saturating_sub(o.sent) + wrong(o)
    };
    if st.sent != st.received || wrong(st) != 0 {
        println!(
            "  note: the static run lost or reordered blocks too ({} sent, {} received, {})",
            st.sent, st.received, st.checked
        );
    }
    if ad.moves.is_empty() {
        println!("  note: the monitor made no move");
    }
    summary.add(
        "adaptive_vs_static_plan_after_shift",
        ad.after / st.after,
        Some(Target::AtLeast(1.5)),
        "blocks/s at the sink after the cost shift, with --adapt's monitor vs the plan kept",
    );
    summary.add(
        "migration_lost_blocks",
        (lost(ad) + lost(ch)) as f64,
        Some(Target::AtMost(0.0)),
        format!(
            "blocks lost, duplicated or out of sequence in the adaptive and chaos runs ({} moves)",
            ad.moves.len() + ch.moves.len()
        ),
    );
    summary.add(
        "adapt_moves",
        ad.moves.len() as f64,
        None,
        "filters the monitor moved",
    );
    summary.print()?;
    Ok(())
}
