//! Experiment 4 (thesis Figure 4.8): self-scaling by deck-cut. Copy throughput between a
//! writer and a reader process through a self-scaling ring (64 MiB mapped, starting at
//! 64 MiB like the thesis' "start big", allowed down to 64 KiB), against static rings of
//! 64 KiB .. 64 MiB (powers of 4; the 64 MiB one is the "static 64 MiB" baseline).
//!
//! 1 KiB blocks, 8 GiB per run (full mode), so the convergence from 64 MiB is a small
//! part of the stream. The self-scaling figure is over the whole stream, convergence
//! included. The size the
//! ring spent its bytes at and its final size show what the policy did; when the size was
//! stable for the last quarter of the stream, the throughput over that stretch is shown too.
//!
//! Both figures are ours vs ours (Beltway rings of different sizes): `deckcut_vs_best_fixed`
//! against the best static size of the sweep (what a user who measured would pick),
//! `deckcut_vs_static_median` against the median of the sweep (a size picked without
//! measuring). The static 64 MiB ring the self-scaling one starts at (the old
//! `deckcut_vs_static_64MiB`, among the slowest sizes of the sweep in the recorded runs)
//! is printed, not a headline.

use super::transfer::{via_ring, RingRun, StreamSpec};
use crate::util::{fmt_size, Plan, Result, Summary, Target, Verify, GIB, KIB, MIB};
use beltway::RingConfig;
use std::collections::BTreeMap;

const BLOCK: usize = KIB;
const MAX: usize = 64 * MIB;
const MIN: usize = 64 * KIB;
const FIXED: [usize; 6] = [64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB];
const VOLUME: u64 = 8 * GIB as u64;
const QUICK_DIV: u64 = 256;

pub fn run(plan: &Plan, summary: &mut Summary) -> Result<()> {
    println!("\n== 4. Self-scaling ring (deck-cut) vs. static sizes (thesis Fig 4.8) ==");
    println!(
        "copy throughput, {} blocks, SRP byte rings, writer and reader processes; MB/s, best run",
        fmt_size(BLOCK as u64)
    );
    let base = if plan.quick {
        VOLUME / QUICK_DIV
    } else {
        VOLUME
    };
    let bytes = plan.volume(base, BLOCK, Verify::Stamps);
    let spec = |v| StreamSpec::new(BLOCK, plan.volume(base, BLOCK, v), v);
    let mut fixed = Vec::new();
    for size in FIXED {
        let t = plan.measure(|v| Ok(via_ring(RingConfig::bytes(size), &spec(v))?.secs))?;
        println!(
            "  static {:>6}: {:>8.0}",
            fmt_size(size as u64),
            t.mbps(bytes)
        );
        fixed.push((size, t.mbps(bytes)));
    }
    let cfg = RingConfig::bytes(MAX).self_scaling(MIN, MAX);
    let (t, run) = plan.measure_with(|v| {
        let r = via_ring(cfg.clone(), &spec(v))?;
        Ok((r.secs, r))
    })?;
    let scaling = t.mbps(bytes);
    println!(
        "  self-scaling {}..{} from {}: {scaling:>8.0}",
        fmt_size(MIN as u64),
        fmt_size(MAX as u64),
        fmt_size(MAX as u64)
    );
    describe_scaling(&run, bytes);

    let (best_size, best) = fixed
        .iter()
        .copied()
        .fold((0, 0.0), |b, (s, v)| if v > b.1 { (s, v) } else { b });
    let static_max = fixed.last().map_or(0.0, |f| f.1);
    let median = crate::util::median(&fixed.iter().map(|f| f.1).collect::<Vec<_>>());
    println!(
        "  self-scaling over: the best static size {:.2}x, the median {:.2}x, static 64MiB (its start size) {:.2}x",
        scaling / best,
        scaling / median,
        scaling / static_max
    );
    summary.add(
        "deckcut_vs_best_fixed",
        scaling / best,
        Some(Target::AtLeast(0.95)),
        format!(
            "ours vs ours: self-scaling {scaling:.0} MB/s vs the best static size {} ({best:.0} MB/s); ring ended at {}",
            fmt_size(best_size as u64),
            fmt_size(run.final_size)
        ),
    );
    summary.add(
        "deckcut_vs_static_median",
        scaling / median,
        None,
        format!(
            "ours vs ours: vs the median of the static sweep 64KiB..64MiB ({median:.0} MB/s); replaces deckcut_vs_static_64MiB, its start size"
        ),
    );
    Ok(())
}

/// How the self-scaling ring behaved in its fastest run.
fn describe_scaling(run: &RingRun, bytes: u64) {
    println!(
        "    {} resizes (RingStats::resizes), final active size {} (Writer::active_size)",
        run.stats.resizes,
        fmt_size(run.final_size)
    );
    // Bytes written at each active size.
    let mut at_size: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut size, mut from) = (run.initial_size, 0);
    for r in &run.resizes {
        *at_size.entry(size).or_default() += r.pos - from;
        (size, from) = (r.size, r.pos);
    }
    *at_size.entry(size).or_default() += bytes - from;
    let shares: Vec<String> = at_size
        .iter()
        .rev()
        .map(|(s, b)| format!("{} {:.0}%", fmt_size(*s), 100.0 * *b as f64 / bytes as f64))
        .collect();
    println!(
        "    share of the stream written at each size: {}",
        shares.join(", ")
    );
    let trace: Vec<String> = run
        .resizes
        .iter()
        .take(24)
        .map(|r| {
            format!(
                "{}@{}",
                fmt_size(r.size),
                fmt_size(r.pos / MIB as u64 * MIB as u64)
            )
        })
        .collect();
    if !trace.is_empty() {
        let more = if run.resizes.len() > 24 { " ..." } else { "" };
        println!(
            "    resizes (new size @ bytes written): {}{more}",
            trace.join(" ")
        );
    }
    if let Some(last) = run.resizes.last() {
        if bytes - last.pos >= bytes / 4 {
            let secs = run.end_ns.saturating_sub(last.at_ns) as f64 / 1e9;
            println!(
                "    settled at {} after {}: {:.0} MB/s over the rest of the stream",
                fmt_size(last.size),
                fmt_size(last.pos),
                (bytes - last.pos) as f64 / secs / 1e6
            );
        } else {
            println!("    not settled: last resize in the final quarter of the stream");
        }
    }
}
