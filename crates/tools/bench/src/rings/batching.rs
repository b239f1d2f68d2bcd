//! Experiment 3 (thesis Figure 5.2): event moderation. A "POSIX pipe" of 2 KiB slots
//! (16 MiB, 8192 slots, like the thesis) between a writer and a reader process, with the
//! wake-up threshold (commits per wake-up; latency bound 1 ms) swept from 1 to 2048.
//! Records fill their slots (2044 payload bytes).
//!
//! Wake-ups only cost anything when the reader sleeps, i.e. finds the ring empty. Two
//! scenarios:
//! - producer-bound (the headline): the writer spends [`PRODUCER_WORK_NS`] making each
//!   record, so the reader keeps catching up and sleeping, and every wake-up (a futex wake
//!   by the writer, a scheduling of the reader) is paid for;
//! - balanced: both sides only copy. On two CPUs the reader then rarely sleeps (the thesis
//!   ran on one core, where every hand-off is a context switch), so thresholds matter little.
//!
//! The ring's wake-up counter (`RingStats::wakeups`) shows how often the writer woke the
//! reader.

use super::transfer::{via_ring, StreamSpec};
use crate::util::{fmt_size, Plan, Result, Summary, MIB};
use beltway::{RingConfig, RingStats};

const RING_SIZE: usize = 16 * MIB;
const SLOT: u32 = 2048;
/// Payload per record: a full slot minus its 4-byte length.
const RECORD: usize = SLOT as usize - 4;
const THRESHOLDS: [u32; 5] = [1, 8, 32, 256, 2048];
const RECORDS: u64 = 600_000;
const QUICK_RECORDS: u64 = 20_000;
/// Time the producer spends making each record in the producer-bound scenario.
const PRODUCER_WORK_NS: u64 = 200;

struct Scenario {
    title: String,
    writer_work_ns: u64,
    /// Reader on the writer's CPU: every hand-off is a context switch (the thesis' setup).
    one_cpu: bool,
    headline: bool,
}

pub fn run(plan: &Plan, summary: &mut Summary) -> Result<()> {
    println!("\n== 3. Event batching: wake-up threshold (thesis Fig 5.2) ==");
    println!(
        "{} ring of {SLOT}-byte slots, records of {RECORD} bytes, latency bound 1 ms; writer and reader processes",
        fmt_size(RING_SIZE as u64)
    );
    let scenarios = [
        Scenario { title: "one CPU: writer and reader share CPU 0, so every hand-off is a context switch (the thesis' setup)".into(), writer_work_ns: 0, one_cpu: true, headline: true },
        Scenario { title: format!("two CPUs, producer-bound: the writer spends {PRODUCER_WORK_NS} ns making each record"), writer_work_ns: PRODUCER_WORK_NS, one_cpu: false, headline: false },
        Scenario { title: "two CPUs, balanced: both sides only copy (the reader seldom sleeps)".into(), writer_work_ns: 0, one_cpu: false, headline: false },
    ];
    for sc in scenarios {
        let ratio = sweep(plan, &sc)?;
        if sc.headline {
            summary.add(
                "batching_32_vs_1",
                ratio,
                None,
                "one CPU: throughput at threshold 32 vs 1 (thesis Fig 5.2: 2.36x)",
            );
        } else if sc.writer_work_ns > 0 {
            summary.add(
                "batching_32_vs_1_two_cpus",
                ratio,
                None,
                "two CPUs, producer-bound: threshold 32 vs 1",
            );
        }
    }
    Ok(())
}

/// Run every threshold of one scenario; returns the threshold-32 / threshold-1 ratio.
fn sweep(plan: &Plan, sc: &Scenario) -> Result<f64> {
    println!("{}:", sc.title);
    println!(
        "{:>9} {:>10} {:>10} {:>8} {:>10} {:>13} {:>12}",
        "threshold", "krec/s", "MB/s", "vs t=1", "wake-ups", "records/wake", "writer waits"
    );
    let records = if plan.quick { QUICK_RECORDS } else { RECORDS };
    let bytes = records * RECORD as u64;
    let (mut base, mut at32) = (None, 0.0);
    for t in THRESHOLDS {
        let (timing, stats) = plan.measure_with(|v| {
            let reader_cpu = if sc.one_cpu {
                super::transfer::WRITER_CPU
            } else {
                super::transfer::READER_CPU
            };
            let spec = StreamSpec {
                writer_work_ns: sc.writer_work_ns,
                reader_cpu,
                ..StreamSpec::new(RECORD, bytes, v)
            };
            let r = via_ring(RingConfig::bytes(RING_SIZE).slots(SLOT).threshold(t), &spec)?;
            Ok((r.secs, r.stats))
        })?;
        let rate = records as f64 / timing.best();
        let base = *base.get_or_insert(rate);
        if t == 32 {
            at32 = rate;
        }
        print_row(t, rate, timing.mbps(bytes), rate / base, &stats, records);
        if t == 1 && stats.wakeups == 0 {
            println!("          (the reader never slept at threshold 1: no wake-up cost to save)");
        }
    }
    Ok(at32 / base.unwrap_or(f64::NAN))
}

fn print_row(t: u32, rate: f64, mbps: f64, rel: f64, st: &RingStats, records: u64) {
    let per_wake = if st.wakeups > 0 {
        format!("{:.1}", records as f64 / st.wakeups as f64)
    } else {
        "-".into()
    };
    println!(
        "{t:>9} {:>10.0} {mbps:>10.0} {rel:>7.2}x {:>10} {per_wake:>13} {:>12}",
        rate / 1e3,
        st.wakeups,
        st.writer_waits
    );
}
