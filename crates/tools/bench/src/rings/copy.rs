//! Experiment 1 (thesis Figure 7.1): copy throughput, a write followed by a read, between
//! a writer and a reader process, for several block sizes. Our SRP byte ring against a
//! Unix pipe, and against the SPSC thread ring (no process boundary, no system calls) as
//! the upper bound. Same blocks, same volume, and the same sweep of buffer sizes for every
//! side: the ring, the pipe (resized with F_SETPIPE_SZ) and the SPSC ring at each size,
//! the same runs at each, and the best for each side. The pipe gets every size up to
//! /proc/sys/fs/pipe-max-size (what an unprivileged user may ask for); the figure against
//! it compares the ring over those same sizes only. Until 2026-11-27 ours was the best of
//! four sizes against a pipe of the default size and an SPSC ring of 1 MiB.

use super::transfer::{via_pipe, via_ring, via_threads, StreamSpec};
use crate::proc::pipe_max_size;
use crate::util::{fmt_size, Plan, Result, Summary, Target, Verify, GIB, KIB, MIB};
use beltway::RingConfig;
use std::io::Write;

/// Block sizes and their (full-mode) volumes: the slowest peer (the pipe) runs ~0.3-2 s.
const BLOCKS: [(usize, u64); 4] = [
    (64, 128 * MIB as u64),
    (KIB, 512 * MIB as u64),
    (16 * KIB, GIB as u64),
    (64 * KIB, GIB as u64),
];
/// The sizes every side is measured at (the pipe: those up to pipe-max-size).
const SIZES: [usize; 4] = [64 * KIB, MIB, 16 * MIB, 64 * MIB];
/// Default wake-up threshold of a ring (RingConfig::default().threshold).
const THRESHOLD: usize = 32;
/// Quick mode divides volumes by this.
const QUICK_DIV: u64 = 64;

/// One block size's results, in MB/s, per size of [`SIZES`] (NaN: not measured).
struct Row {
    block: usize,
    ring: Vec<f64>,
    pipe: Vec<f64>,
    spsc: Vec<f64>,
}

/// The best of `v` over the sizes `keep` admits: (size, MB/s).
fn best(v: &[f64], keep: impl Fn(usize) -> bool) -> (usize, f64) {
    SIZES
        .iter()
        .zip(v)
        .filter(|(&s, x)| keep(s) && x.is_finite())
        .fold((0, f64::NAN), |b, (&s, &x)| {
            if b.1.is_nan() || x > b.1 {
                (s, x)
            } else {
                b
            }
        })
}

pub fn run(plan: &Plan, summary: &mut Summary) -> Result<()> {
    let pipe_max = pipe_max_size()?;
    let piped = |s: usize| s <= pipe_max;
    println!("\n== 1. Copy throughput: write then read, separate processes (thesis Fig 7.1) ==");
    println!(
        "beltway: SRP byte ring, threshold 32, Writer::write / Reader::read of one block each"
    );
    println!("unix pipe: write(2) / read(2) of one block each, the pipe resized with F_SETPIPE_SZ to each size up to pipe-max-size ({})", fmt_size(pipe_max as u64));
    println!("spsc: two threads over a shared-memory ring of each size (upper bound)");
    println!("MB/s (10^6 B/s), best run at each size; every side gets the same sizes and runs");
    println!(
        "{:>7} {:>7} {:>11} {:>10} {:>10}",
        "block", "size", "ring", "unix pipe", "spsc"
    );
    let mut rows = Vec::new();
    for (block, base) in BLOCKS {
        let base = if plan.quick { base / QUICK_DIV } else { base };
        let bytes = plan.volume(base, block, Verify::Stamps);
        let spec = |v| StreamSpec::new(block, plan.volume(base, block, v), v);
        let mut row = Row {
            block,
            ring: Vec::new(),
            pipe: Vec::new(),
            spsc: Vec::new(),
        };
        for size in SIZES {
            print!("{:>7} {:>7}", fmt_size(block as u64), fmt_size(size as u64));
            flush();
            let ring = plan
                .measure(|v| Ok(via_ring(RingConfig::bytes(size), &spec(v))?.secs))?
                .mbps(bytes);
            let mark = if size / block < THRESHOLD { "*" } else { " " };
            print!(" {ring:>10.0}{mark}");
            flush();
            let pipe = if piped(size) {
                plan.measure(|v| Ok(via_pipe(&spec(v), Some(size))?.0))?
                    .mbps(bytes)
            } else {
                f64::NAN
            };
            if pipe.is_finite() {
                print!(" {pipe:>10.0}");
            } else {
                print!(" {:>10}", "-");
            }
            flush();
            let spsc = plan.measure(|v| via_threads(size, &spec(v)))?.mbps(bytes);
            println!(" {spsc:>10.0}");
            row.ring.push(ring);
            row.pipe.push(pipe);
            row.spsc.push(spsc);
        }
        let (rs, r) = best(&row.ring, |_| true);
        let (rps, rp) = best(&row.ring, piped);
        let (ps, p) = best(&row.pipe, piped);
        let (ss, sp) = best(&row.spsc, |_| true);
        println!(
            "{:>7} best: ring {r:.0} ({}), ring up to pipe-max-size {rp:.0} ({}), pipe {p:.0} ({}), spsc {sp:.0} ({}); ring/pipe {:.2}x, ring/spsc {:.2}",
            fmt_size(block as u64),
            fmt_size(rs as u64),
            fmt_size(rps as u64),
            fmt_size(ps as u64),
            fmt_size(ss as u64),
            rp / p,
            r / sp
        );
        rows.push(row);
    }
    println!("* ring holds fewer blocks than the wake-up threshold ({THRESHOLD}): every batch is cut short by a full ring");
    println!("-: above pipe-max-size, not measured for the pipe");
    headlines(&rows, pipe_max, summary);
    Ok(())
}

fn headlines(rows: &[Row], pipe_max: usize, summary: &mut Summary) {
    let find = |b: usize| rows.iter().find(|r| r.block == b);
    let piped = |s: usize| s <= pipe_max;
    for (block, name, target) in [
        (64, "64B", 10.0),
        (KIB, "1KiB", 4.0),
        (64 * KIB, "64KiB", 2.0),
    ] {
        if let Some(r) = find(block) {
            let (rs, ring) = best(&r.ring, piped);
            let (ps, pipe) = best(&r.pipe, piped);
            let note = format!(
                "best of the same sizes (up to pipe-max-size {}): ring {} ({ring:.0} MB/s) vs pipe {} ({pipe:.0} MB/s)",
                fmt_size(pipe_max as u64),
                fmt_size(rs as u64),
                fmt_size(ps as u64)
            );
            summary.add(
                &format!("pipe_copy_{name}_vs_unix_pipe"),
                ring / pipe,
                Some(Target::AtLeast(target)),
                note,
            );
        }
    }
    if let Some(r) = find(KIB) {
        let (rs, ring) = best(&r.ring, |_| true);
        let (ss, spsc) = best(&r.spsc, |_| true);
        let note = format!(
            "best of the same sizes: ring {} ({ring:.0} MB/s) vs SPSC thread ring {} ({spsc:.0} MB/s); target: within 20%",
            fmt_size(rs as u64),
            fmt_size(ss as u64)
        );
        summary.add(
            "pipe_copy_1KiB_vs_spsc_upper_bound",
            ring / spsc,
            Some(Target::AtLeast(0.8)),
            note,
        );
    }
}

fn flush() {
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_takes_the_fastest_admitted_size_and_skips_unmeasured_ones() {
        let v = [100.0, f64::NAN, 300.0, 200.0];
        assert_eq!(best(&v, |_| true), (16 * MIB, 300.0));
        assert_eq!(best(&v, |s| s <= MIB), (64 * KIB, 100.0));
        assert!(best(&[f64::NAN; 4], |_| true).1.is_nan());
    }
}
