//! Experiment 1 (thesis Figure 7.1): copy throughput, a write followed by a read, between
//! a writer and a reader process, for several block sizes. Our SRP byte ring at four sizes
//! against a Unix pipe of the default size, and against the SPSC thread ring (no process
//! boundary, no system calls) as the upper bound. Same blocks, same volume for all.

use super::transfer::{via_pipe, via_ring, via_threads, StreamSpec};
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
const RING_SIZES: [usize; 4] = [64 * KIB, MIB, 16 * MIB, 64 * MIB];
/// Default wake-up threshold of a ring (RingConfig::default().threshold).
const THRESHOLD: usize = 32;
/// The thread ring's size (the thesis shows its best case, 1 MiB).
const SPSC_SIZE: usize = MIB;
/// Quick mode divides volumes by this.
const QUICK_DIV: u64 = 64;

/// One block size's results, in MB/s.
struct Row {
    block: usize,
    ring: Vec<f64>,
    pipe: f64,
    spsc: f64,
}

impl Row {
    fn best_ring(&self) -> (usize, f64) {
        let (i, v) = self
            .ring
            .iter()
            .enumerate()
            .fold((0, 0.0), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
        (RING_SIZES[i], v)
    }
}

pub fn run(plan: &Plan, summary: &mut Summary) -> Result<()> {
    println!("\n== 1. Copy throughput: write then read, separate processes (thesis Fig 7.1) ==");
    println!(
        "beltway: SRP byte ring, threshold 32, Writer::write / Reader::read of one block each"
    );
    println!("MB/s (10^6 B/s), best run; `spsc` = two threads over a {} shared-memory ring (upper bound)", fmt_size(SPSC_SIZE as u64));
    let mut header = format!("{:>7}", "block");
    for s in RING_SIZES {
        header += &format!(" {:>11}", format!("ring {}", fmt_size(s as u64)));
    }
    header += &format!(
        " {:>10} {:>10} {:>11} {:>9} {:>9}",
        "unix pipe", "spsc", "best ring", "vs pipe", "vs spsc"
    );
    println!("{header}");
    let mut rows = Vec::new();
    let mut pipe_capacity = 0;
    for (block, base) in BLOCKS {
        let base = if plan.quick { base / QUICK_DIV } else { base };
        let bytes = plan.volume(base, block, Verify::Stamps);
        let spec = |v| StreamSpec::new(block, plan.volume(base, block, v), v);
        print!("{:>7}", fmt_size(block as u64));
        let mut ring = Vec::new();
        for size in RING_SIZES {
            let t = plan.measure(|v| Ok(via_ring(RingConfig::bytes(size), &spec(v))?.secs))?;
            ring.push(t.mbps(bytes));
            let mark = if size / block < THRESHOLD { "*" } else { " " };
            print!(" {:>10.0}{mark}", t.mbps(bytes));
            flush();
        }
        let t = plan.measure(|v| {
            let (secs, cap) = via_pipe(&spec(v))?;
            pipe_capacity = cap;
            Ok(secs)
        })?;
        let pipe = t.mbps(bytes);
        print!(" {pipe:>10.0}");
        flush();
        let spsc = plan
            .measure(|v| via_threads(SPSC_SIZE, &spec(v)))?
            .mbps(bytes);
        let row = Row {
            block,
            ring,
            pipe,
            spsc,
        };
        let (best_size, best) = row.best_ring();
        println!(
            " {spsc:>10.0} {:>11} {:>8.2}x {:>9.2}",
            fmt_size(best_size as u64),
            best / pipe,
            best / spsc
        );
        rows.push(row);
    }
    println!(
        "default Unix pipe capacity: {pipe_capacity} bytes ({})",
        fmt_size(pipe_capacity as u64)
    );
    println!("* ring holds fewer blocks than the wake-up threshold ({THRESHOLD}): every batch is cut short by a full ring");
    headlines(&rows, summary);
    Ok(())
}

fn headlines(rows: &[Row], summary: &mut Summary) {
    let find = |b: usize| rows.iter().find(|r| r.block == b);
    for (block, name, target) in [
        (64, "64B", 10.0),
        (KIB, "1KiB", 4.0),
        (64 * KIB, "64KiB", 2.0),
    ] {
        if let Some(r) = find(block) {
            let (size, best) = r.best_ring();
            let note = format!(
                "best ring {} ({best:.0} MB/s) vs pipe ({:.0} MB/s)",
                fmt_size(size as u64),
                r.pipe
            );
            summary.add(
                &format!("pipe_copy_{name}_vs_unix_pipe"),
                best / r.pipe,
                Some(Target::AtLeast(target)),
                note,
            );
        }
    }
    if let Some(r) = find(KIB) {
        let (size, best) = r.best_ring();
        let note = format!(
            "best ring {} vs SPSC thread ring ({:.0} MB/s); target: within 20%",
            fmt_size(size as u64),
            r.spsc
        );
        summary.add(
            "pipe_copy_1KiB_vs_spsc_upper_bound",
            best / r.spsc,
            Some(Target::AtLeast(0.8)),
            note,
        );
    }
}

fn flush() {
    let _ = std::io::stdout().flush();
}
