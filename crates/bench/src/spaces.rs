//! The `spaces` subcommand (thesis 5.2.2, 5.4): what it costs to cross between spaces,
//! what batching the wake-ups saves, and what data parallelism gains.
//!
//! - **Cross-space cost**: `gen count=K size=1K | count | count | null` with every stage in
//!   one space, with the second half on a worker thread (`count space=1`), and in a
//!   process space (`count space=p1`, the `streamline` binary next to this one); blocks/s.
//! - **Event moderation across spaces**: the two-space chain with the channel's wake-up
//!   threshold at 1, 8, 32 and 256 blocks (latency bound 1 ms), with the spaces on two
//!   CPUs and on one CPU (where every wake-up is a context switch); blocks/s, and the
//!   ratio at 32 over 1 (headline: one CPU).
//! - **Data parallelism**: a CPU-heavy stateless filter (`deflate`, level 6, on 64 KiB
//!   blocks) once, in the source's space, then replicated on R worker threads with
//!   `deflate space=1,...,R` (round-robin split, order-restoring join); the pipeline text
//!   is generated for any R (`--replicas`), so a 16-core machine runs 16 unchanged.
//!
//! Every run is checked: the sink must see all K blocks.

use crate::threading::{BenchFactory, BenchResolver};
use crate::util::{err, watchdog, Plan, Result, Summary, Target};
use dataplane::channel::ChannelConfig;
use dataplane::spaces::{Launcher, Spaces};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Timed repetitions per configuration (the fastest counts); ignored with --quick.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Replica counts for the data-parallel experiment (1 is always measured).
    #[arg(long, value_delimiter = ',', default_values_t = vec![2])]
    replicas: Vec<usize>,
}

const SCRATCH: usize = 64 << 20;

/// Run `text` on its spaces; seconds, after checking that the sink got `k` blocks.
fn run(text: &str, cfg: ChannelConfig, k: u64, sink: &str) -> Result<f64> {
    let g =
        lang::parse(text, &BenchResolver).map_err(|d| err(format!("parsing `{text}`:\n{d}")))?;
    let exe = std::env::current_exe()
        .map_err(|e| err(format!("locating own executable: {e}")))?
        .with_file_name("streamline");
    if text.contains("space=p") && !exe.is_file() {
        return Err(err(format!("{} not found next to this benchmark; build it with `cargo build --release -p streamline`", exe.display())));
    }
    let launcher = Launcher {
        exe,
        args: vec![
            "__space".into(),
            "--pipeline".into(),
            text.into(),
            "--ring".into(),
            SCRATCH.to_string(),
        ],
    };
    let spaces = Spaces::build_with(&g, &BenchFactory, SCRATCH, cfg, Some(&launcher))
        .map_err(|e| err(format!("building `{text}`: {e}")))?;
    let interrupt = AtomicBool::new(false);
    let t0 = Instant::now();
    let rep = spaces.run(&interrupt, |_| {});
    let secs = t0.elapsed().as_secs_f64();
    if let Some(d) = rep.died {
        return Err(err(format!("`{text}`: {d}")));
    }
    if rep.failed || !rep.warnings.is_empty() {
        return Err(err(format!("`{text}` failed: {}", rep.warnings.join("; "))));
    }
    let got: u64 = rep
        .nodes
        .iter()
        .filter(|n| n.label == sink || n.label.starts_with(&format!("{sink}@")))
        .map(|n| n.counters.blocks_in)
        .sum();
    if got != k {
        return Err(err(format!(
            "`{text}`: the sink received {got} of {k} blocks"
        )));
    }
    Ok(secs)
}

pub fn run_main(a: &Args, quick: bool) -> Result<()> {
    watchdog(if quick {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(15 * 60)
    });
    let plan = Plan::new(quick, a.reps);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "streamline-bench spaces ({} mode): {cpus} CPUs",
        if quick { "quick" } else { "full" }
    );
    let mut summary = Summary::default();

    // Cross-space cost and event moderation.
    let k: u64 = if quick { 50_000 } else { 1_000_000 };
    println!("\n== Crossing spaces: `gen count={k} size=1K | count | count | null` ==");
    let one = format!("gen count={k} size=1K | count | count | null");
    let two = format!("gen count={k} size=1K | count | count space=1 | null");
    let proc = format!("gen count={k} size=1K | count | count space=p1 | null");
    let t_one = plan
        .measure(|_| run(&one, ChannelConfig::default(), k, "null"))?
        .best();
    println!(
        "{:<44} {:>10.2} Mblk/s",
        "one space",
        k as f64 / t_one / 1e6
    );
    let mut at = Vec::new();
    for th in [1u32, 8, 32, 256] {
        let cfg = ChannelConfig {
            threshold: th,
            ..ChannelConfig::default()
        };
        let t = plan.measure(|_| run(&two, cfg, k, "null"))?.best();
        println!(
            "{:<44} {:>10.2} Mblk/s",
            format!("two threads, wake-up threshold {th}"),
            k as f64 / t / 1e6
        );
        at.push((th, t));
    }
    // The same on one CPU: the local space's thread pinned where space 1 runs, so every
    // wake-up is a context switch (what event moderation saves, thesis 5.2.2).
    let mut one_cpu = Vec::new();
    for th in [1u32, 8, 32, 256] {
        let cfg = ChannelConfig {
            threshold: th,
            ..ChannelConfig::default()
        };
        let t = plan
            .measure(|_| {
                std::thread::scope(|sc| {
                    sc.spawn(|| {
                        let _ = beltway::sys::pin_to_cpu(1 % cpus);
                        run(&two, cfg, k, "null")
                    })
                    .join()
                    .unwrap_or_else(|_| Err(err("the pipeline thread panicked")))
                })
            })?
            .best();
        println!(
            "{:<44} {:>10.2} Mblk/s",
            format!("one CPU, wake-up threshold {th}"),
            k as f64 / t / 1e6
        );
        one_cpu.push((th, t));
    }
    let t_proc = plan
        .measure(|_| run(&proc, ChannelConfig::default(), k, "null"))?
        .best();
    println!(
        "{:<44} {:>10.2} Mblk/s",
        "thread + process space, threshold 32",
        k as f64 / t_proc / 1e6
    );
    let t1 = at[0].1;
    let t32 = at.iter().find(|x| x.0 == 32).expect("measured").1;
    let (o1, o32) = (
        one_cpu[0].1,
        one_cpu.iter().find(|x| x.0 == 32).expect("measured").1,
    );
    summary.add(
        "cross_space_batching_32_vs_1",
        o1 / o32,
        Some(Target::AtLeast(2.5)),
        format!(
            "both spaces on one CPU: threshold 32 {:.2} vs 1 {:.2} Mblk/s",
            k as f64 / o32 / 1e6,
            k as f64 / o1 / 1e6
        ),
    );
    summary.add(
        "cross_space_batching_32_vs_1_two_cpus",
        t1 / t32,
        None,
        format!(
            "spaces on two CPUs: threshold 32 {:.2} vs 1 {:.2} Mblk/s",
            k as f64 / t32 / 1e6,
            k as f64 / t1 / 1e6
        ),
    );
    summary.add(
        "cross_space_two_threads_vs_one_space",
        t_one / t32,
        None,
        "the same chain, second half on a worker thread (threshold 32)",
    );
    summary.add(
        "thread_vs_process_channel",
        t_proc / t32,
        None,
        format!(
            "thread {:.2} vs process {:.2} Mblk/s (>1: the thread channel is faster)",
            k as f64 / t32 / 1e6,
            k as f64 / t_proc / 1e6
        ),
    );

    // Data parallelism.
    let kb: u64 = if quick { 100 } else { 1000 };
    println!("\n== Data parallelism: deflate on 64 KiB blocks, {kb} blocks ==");
    // The input is a file the spaces map (its blocks cross as tags only), so the source
    // costs next to nothing and the figure is the filter's own scaling.
    let dir = crate::util::TempDir::new("spaces")?;
    let input = dir.path().join("input.bin");
    let mut data = vec![0u8; kb as usize * 65536];
    for (seq, b) in data.chunks_exact_mut(65536).enumerate() {
        for (i, x) in b.iter_mut().enumerate() {
            *x = ((i * 31) ^ (i >> 7) ^ seq) as u8;
        }
    }
    std::fs::write(&input, &data).map_err(|e| err(format!("writing {}: {e}", input.display())))?;
    drop(data);
    let src = format!("file {} split=fixed size=64K", input.display());
    println!("source: `{src}`");
    let single = format!("{src} | deflate | null");
    let t_single = plan
        .measure(|_| run(&single, ChannelConfig::default(), kb, "null"))?
        .best();
    println!(
        "{:<44} {:>10.1} MB/s",
        "1 replica",
        kb as f64 * 65536.0 / t_single / 1e6
    );
    // What this machine allows: two independent copies of the one-replica pipeline at
    // once, each pinned to its own CPU (shared caches, memory and, on VMs, host cores limit
    // it below 2).
    let t_pair = plan
        .measure(|_| {
            let t0 = Instant::now();
            let r: Vec<Result<f64>> = std::thread::scope(|sc| {
                let h: Vec<_> = (0..2)
                    .map(|cpu| {
                        let single = &single;
                        sc.spawn(move || {
                            let _ = beltway::sys::pin_to_cpu(cpu % cpus);
                            run(single, ChannelConfig::default(), kb, "null")
                        })
                    })
                    .collect();
                h.into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(err("a pipeline thread panicked")))
                    })
                    .collect()
            });
            for x in r {
                x?;
            }
            Ok(t0.elapsed().as_secs_f64())
        })?
        .best();
    let ceiling = 2.0 * t_single / t_pair;
    println!(
        "{:<44} {:>10.1} MB/s",
        "ceiling: 2 independent copies at once",
        2.0 * kb as f64 * 65536.0 / t_pair / 1e6
    );
    summary.add(
        "parallel_ceiling_2_independent_copies",
        ceiling,
        None,
        "what 2 CPUs of this machine give two unrelated copies of the pipeline",
    );
    for &r in a.replicas.iter().filter(|&&r| r >= 2) {
        let spaces: Vec<String> = (1..=r).map(|i| i.to_string()).collect();
        let text = format!("{src} | deflate space={} | null", spaces.join(","));
        let t = plan
            .measure(|_| run(&text, ChannelConfig::default(), kb, "null"))?
            .best();
        println!(
            "{:<44} {:>10.1} MB/s",
            format!("{r} replicas"),
            kb as f64 * 65536.0 / t / 1e6
        );
        summary.add(
            &format!("parallel_speedup_{r}_replicas"),
            t_single / t,
            if r == 2 {
                Some(Target::AtLeast(1.8))
            } else {
                None
            },
            format!(
                "{cpus} CPUs; {:.0}% of the machine's ceiling; `{text}`",
                100.0 * t_single / t / ceiling
            ),
        );
    }
    summary.print();
    Ok(())
}
