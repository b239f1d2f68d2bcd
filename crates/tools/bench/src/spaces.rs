//! The `spaces` subcommand (thesis 5.2.2, 5.4; seed 003): what it costs to cross between
//! spaces, what batching the wake-ups saves, what cache-sized queues and lockstep give, and
//! what data parallelism gains.
//!
//! - **Cross-space cost**: `gen count=K size=1K | count | count | null` with every stage in
//!   one space, with the second half on a worker thread (`count space=1`), and in a
//!   process space (`count space=p1`, the `streamline` binary next to this one); blocks/s.
//! - **A channel alone**: `gen | null` against `gen | null space=1`: tags through one thread
//!   channel, no filters.
//! - **Cache-sized channels**: blocks copied into a process space and read there, through a
//!   data ring the size of the L2 against one of 64 MiB.
//! - **Lockstep** (Model-T): a header chain over the sample capture on two threads,
//!   free-running against `@lockstep`, in Gbit/s of wire bytes.
//! - **Event moderation** (thesis 5.2.2, as CPU per block): `gen rate=R` offers a fixed rate
//!   below saturation (chosen from what a wake-up per block keeps up with); the channel's
//!   CPU per block (the process's, above the same pipeline in one space) for thresholds 1,
//!   8, 32, 256 and the latency bound alone.
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
    /// Offered rate (blocks/s) for the event-moderation experiment (default: chosen from
    /// what this machine keeps up with).
    #[arg(long)]
    rate: Option<u64>,
    /// Run only one experiment: `moderation`, `cache`, `lockstep`, `idle` or `latency`.
    #[arg(long)]
    only: Option<String>,
}

const SCRATCH: usize = 64 << 20;

/// Run `text` on its spaces; seconds, after checking that the sink got `k` blocks.
fn run(text: &str, cfg: ChannelConfig, k: u64, sink: &str) -> Result<f64> {
    let (secs, got) = run_counting(text, cfg, sink)?;
    if got != k {
        return Err(err(format!(
            "`{text}`: the sink received {got} of {k} blocks"
        )));
    }
    Ok(secs)
}

/// Run `text` on its spaces; seconds and the blocks its sink received.
fn run_counting(text: &str, cfg: ChannelConfig, sink: &str) -> Result<(f64, u64)> {
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
        // The space receives its part of the run over its socket (`dataplane::spaces::Share`).
        args: vec!["__space".into()],
        env: vec![],
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
    Ok((secs, got))
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
    if let Some(only) = a.only.as_deref() {
        one_experiment(only, a, &plan, quick, &mut summary)?;
        summary.print()?;
        return Ok(());
    }
    let k: u64 = if quick { 2_000_000 } else { 20_000_000 };
    crossing_spaces(&plan, k, &mut summary)?;
    channel_alone(&plan, k, &mut summary)?;
    cache_sized(&plan, quick, &mut summary)?;
    lockstep(&plan, quick, &mut summary)?;
    // Event moderation (thesis 5.2.2) as CPU per block at a fixed offered rate below
    // saturation: a reader that spins at saturation hides what wake-ups cost, so the
    // source offers a steady rate and both spaces sleep when idle.
    moderation(&plan, quick, a.rate, &mut summary)?;
    data_parallelism(&plan, quick, cpus, &a.replicas, &mut summary)?;
    // What a run costs idle, and one block's latency at a low rate (the readiness figures).
    crate::latency::idle(quick, &mut summary)?;
    crate::latency::latency(quick, &mut summary)?;
    summary.print()?;
    Ok(())
}

/// `--only NAME`: the one experiment named.
fn one_experiment(
    only: &str,
    a: &Args,
    plan: &Plan,
    quick: bool,
    summary: &mut Summary,
) -> Result<()> {
    match only {
        "moderation" => moderation(plan, quick, a.rate, summary),
        "cache" => cache_sized(plan, quick, summary),
        "lockstep" => lockstep(plan, quick, summary),
        "idle" => crate::latency::idle(quick, summary),
        "latency" => crate::latency::latency(quick, summary),
        x => Err(err(format!(
            "--only {x}: expected moderation, cache, lockstep, idle or latency"
        ))),
    }
}

/// Millions of blocks per second: `k` blocks in `t` seconds.
fn mblks(k: u64, t: f64) -> f64 {
    k as f64 / t / 1e6
}

/// Cross-space cost: what a channel between two threads costs against calls in one
/// space, and a process space against a thread (`k` blocks of 1 KiB; a tenth of them
/// through the process space, its time scaled up).
fn crossing_spaces(plan: &Plan, k: u64, summary: &mut Summary) -> Result<()> {
    println!("\n== Crossing spaces: `gen count={k} size=1K | count | count | null` ==");
    let one = format!("gen count={k} size=1K | count | count | null");
    let two = format!("gen count={k} size=1K | count | count space=1 | null");
    let proc = format!("gen count={k} size=1K | count | count space=p1 | null");
    let t_one = plan
        .measure(|_| run(&one, ChannelConfig::default(), k, "null"))?
        .best();
    println!("{:<44} {:>10.2} Mblk/s", "one space", mblks(k, t_one));
    let t_two = plan
        .measure(|_| run(&two, ChannelConfig::default(), k, "null"))?
        .best();
    println!(
        "{:<44} {:>10.2} Mblk/s",
        "second half on a worker thread",
        mblks(k, t_two)
    );
    let kp = k / 10;
    let t_proc = plan
        .measure(|_| {
            run(
                &proc.replace(&k.to_string(), &kp.to_string()),
                ChannelConfig::default(),
                kp,
                "null",
            )
        })?
        .best()
        * 10.0;
    println!(
        "{:<44} {:>10.2} Mblk/s",
        "second half in a process space",
        mblks(k, t_proc)
    );
    summary.add(
        "cross_space_two_threads_vs_one_space",
        t_one / t_two,
        Some(Target::AtLeast(0.5)),
        format!(
            "two threads {:.1} vs one space {:.1} Mblk/s",
            mblks(k, t_two),
            mblks(k, t_one)
        ),
    );
    summary.add(
        "thread_vs_process_channel",
        t_proc / t_two,
        None,
        format!(
            "thread {:.2} vs process {:.2} Mblk/s (>1: the thread channel is faster)",
            mblks(k, t_two),
            mblks(k, t_proc)
        ),
    );
    Ok(())
}

/// A channel alone: `k` tags from the same source through one thread channel, no
/// filters, against source and sink in one space.
fn channel_alone(plan: &Plan, k: u64, summary: &mut Summary) -> Result<()> {
    println!("\n== A channel alone: `gen count={k} size=1K | null [space=1]` ==");
    let src_one = format!("gen count={k} size=1K | null");
    let src_two = format!("gen count={k} size=1K | null space=1");
    let t_src = plan
        .measure(|_| run(&src_one, ChannelConfig::default(), k, "null"))?
        .best();
    let t_chan = plan
        .measure(|_| run(&src_two, ChannelConfig::default(), k, "null"))?
        .best();
    println!(
        "{:<44} {:>10.2} Mblk/s",
        "source and sink in one space",
        mblks(k, t_src)
    );
    println!(
        "{:<44} {:>10.2} Mblk/s",
        "through one thread channel",
        mblks(k, t_chan)
    );
    summary.add(
        "channel_tags_mblk_per_s_vs_one_space",
        t_src / t_chan,
        Some(Target::AtLeast(0.5)),
        format!(
            "{:.1} Mblk/s through the channel vs {:.1} in one space",
            mblks(k, t_chan),
            mblks(k, t_src)
        ),
    );
    Ok(())
}

/// Data parallelism: `deflate` on 64 KiB blocks once, then replicated on R worker threads
/// for each R of `replicas` (2 and more), each speedup set against what the machine gives
/// two independent copies ([`parallel_ceiling`]).
fn data_parallelism(
    plan: &Plan,
    quick: bool,
    cpus: usize,
    replicas: &[usize],
    summary: &mut Summary,
) -> Result<()> {
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
    let ceiling = parallel_ceiling(plan, &single, kb, t_single, cpus, summary)?;
    for &r in replicas.iter().filter(|&&r| r >= 2) {
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
    Ok(())
}

/// What this machine allows: two independent copies of the one-replica pipeline
/// `single` (`kb` blocks, `t_single` seconds alone) at once, each pinned to its own CPU
/// (shared caches, memory and, on VMs, host cores limit it below 2). The speedup they
/// reach.
fn parallel_ceiling(
    plan: &Plan,
    single: &str,
    kb: u64,
    t_single: f64,
    cpus: usize,
    summary: &mut Summary,
) -> Result<f64> {
    let t_pair = plan
        .measure(|_| {
            let t0 = Instant::now();
            let r: Vec<Result<f64>> = std::thread::scope(|sc| {
                let h: Vec<_> = (0..2)
                    .map(|cpu| {
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
    Ok(ceiling)
}

/// Model-T's experiment (seed 003): a header-processing chain over real packets (the
/// shipped sample capture repeated; headers only, payloads never touched) split over two
/// threads, free-running against `@lockstep`, in Gbit/s of the traffic's wire bytes. Both
/// must count the same packets as the chain in one space.
fn lockstep(plan: &Plan, quick: bool, summary: &mut Summary) -> Result<()> {
    let sample = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../examples/sample.pcap"
    ));
    let dir = crate::util::TempDir::new("lockstep")?;
    let path = dir.path().join("headers.pcap");
    let big =
        crate::pcap::build_capture(sample, &path, if quick { 50_000_000 } else { 400_000_000 })?;
    let f = path.display();
    let chain =
        |split: &str| format!("pcapin file={f} | eth | ip | tcp{split} | dport 80,443 | count");
    let (one, free, step) = (chain(""), chain(" space=1"), chain(" space=1 @lockstep"));
    println!(
        "\n== Lockstep (Model-T): `{}` over {} packets, {:.0} MB ==",
        chain(" space=1 [@lockstep]"),
        big.packets,
        big.bytes as f64 / 1e6
    );
    let gbit = |t: f64| big.bytes as f64 * 8.0 / t / 1e9;
    let (_, want) = run_counting(&one, ChannelConfig::default(), "count")?;
    if want == 0 {
        return Err(err(format!(
            "`{one}` counted no packet: nothing to measure"
        )));
    }
    let mut at = Vec::new();
    let deep = ChannelConfig {
        slots: 1 << 18,
        ..ChannelConfig::default()
    };
    for (label, text, cfg) in [
        ("one space", &one, ChannelConfig::default()),
        (
            "two threads, free-running (4096-tag queue)",
            &free,
            ChannelConfig::default(),
        ),
        ("two threads, @lockstep", &step, ChannelConfig::default()),
        ("two threads, free-running (262144-tag queue)", &free, deep),
    ] {
        let t = plan.measure(|_| run(text, cfg, want, "count"))?.best();
        println!(
            "{:<44} {:>10.2} Gbit/s {:>8.2} Mpkt/s",
            label,
            gbit(t),
            big.packets as f64 / t / 1e6
        );
        at.push(t);
    }
    summary.add(
        "lockstep_vs_free_running",
        at[1] / at[2],
        Some(Target::AtLeast(1.2)),
        format!("header chain on two threads: @lockstep {:.2} vs free-running {:.2} Gbit/s (one space {:.2})", gbit(at[2]), gbit(at[1]), gbit(at[0])),
    );
    summary.add(
        "lockstep_vs_free_running_deep_queue",
        at[3] / at[2],
        None,
        format!(
            "@lockstep {:.2} vs free-running with a 262144-tag queue {:.2} Gbit/s",
            gbit(at[2]),
            gbit(at[3])
        ),
    );
    Ok(())
}

/// Channels sized to the cache (thesis 5.2.2: the batch limit's soft floor is the cache;
/// seed 003: queues sized so the working set stays in L2): blocks that cross by copy (into
/// a process space) and are read there, through a data ring the size of this machine's L2
/// against one of 64 MiB. In the small ring the bytes are still in the caches when the
/// consumer reads them; in the large one they have gone to memory and come back.
fn cache_sized(plan: &Plan, quick: bool, summary: &mut Summary) -> Result<()> {
    let l2 = control::system::SystemModel::discover()
        .ok()
        .and_then(|m| m.l2_bytes())
        .ok_or_else(|| err("this machine's L2 size is not in /sys/devices/system/cpu/*/cache"))?;
    let k: u64 = if quick { 200_000 } else { 2_000_000 };
    // `grep` with a pattern the blocks never hold reads every byte and passes every block.
    let text =
        format!("gen count={k} size=1K rewrite=yes | grep zzzzzzzz invert=yes space=p1 | null");
    println!("\n== Cache-sized channels: `{text}` ==");
    let mut at = Vec::new();
    for (label, data) in [
        (format!("data ring {} KiB (L2)", l2 >> 10), l2 as usize),
        ("data ring 64 MiB".to_string(), 64 << 20),
    ] {
        let t = plan
            .measure(|_| {
                run(
                    &text,
                    ChannelConfig {
                        data,
                        ..ChannelConfig::default()
                    },
                    k,
                    "null",
                )
            })?
            .best();
        println!(
            "{:<44} {:>10.2} Mblk/s {:>8.0} MB/s",
            label,
            k as f64 / t / 1e6,
            k as f64 * 1024.0 / t / 1e6
        );
        at.push(t);
    }
    summary.add(
        "l2_sized_channel_vs_64MiB_channel",
        at[1] / at[0],
        Some(Target::AtLeast(2.0)),
        format!(
            "{} KiB data ring {:.0} MB/s vs 64 MiB {:.0} MB/s",
            l2 >> 10,
            k as f64 * 1024.0 / at[0] / 1e6,
            k as f64 * 1024.0 / at[1] / 1e6
        ),
    );
    Ok(())
}

/// CPU per block of both spaces (the whole process: every space is a thread of it) while
/// `gen rate=R` offers a steady rate through one thread channel, for wake-up thresholds
/// 1, 8, 32, 256 and the latency bound alone. The rate is this machine's: the highest of
/// a few that threshold 1 (a wake-up per block) still keeps up with, halved.
fn moderation(plan: &Plan, quick: bool, fixed: Option<u64>, summary: &mut Summary) -> Result<()> {
    let secs = if quick { 0.4 } else { 2.0 };
    let run_at = |rate: u64, cfg: ChannelConfig| -> Result<(f64, f64)> {
        let k = (rate as f64 * secs) as u64;
        let text = format!("gen count={k} size=1K rate={rate} | count | count space=1 | null");
        let text = if cfg.threshold == 0 {
            text.replace(" space=1", "")
        } else {
            text
        };
        let c0 = beltway::sys::process_cpu_ns();
        let t = run(&text, cfg, k, "null")?;
        let cpu = (beltway::sys::process_cpu_ns() - c0) as f64;
        Ok((cpu / k as f64, t))
    };
    let every = |th: u32| ChannelConfig {
        threshold: th,
        latency: Duration::from_millis(1),
        ..ChannelConfig::default()
    };
    // The offered rate: the highest of these that a wake-up per block keeps up with (the
    // run takes no more than 10% longer than the rate says), quartered to stay well below.
    let mut rate = fixed.unwrap_or(0);
    for r in [400_000u64, 200_000, 100_000, 50_000, 25_000]
        .into_iter()
        .filter(|_| fixed.is_none())
    {
        let (_, t) = run_at(r, every(1))?;
        if t <= secs * 1.1 {
            rate = r / 4;
            break;
        }
    }
    if rate == 0 {
        return Err(err("even 25000 blocks/s with a wake-up per block fell behind: this machine cannot run the moderation experiment"));
    }
    println!("
== Event moderation: CPU per block at {rate} blocks/s (`gen rate={rate} | count | count space=1 | null`, latency bound 1 ms) ==");
    // The source's own pacing (a sleep until each block is due) costs the same with or
    // without a channel: the pipeline in one space at the same rate is the baseline, and
    // what a configuration costs above it is the channel's (both of its sides).
    let base = plan
        .measure(|_| {
            run_at(
                rate,
                ChannelConfig {
                    threshold: 0,
                    ..every(1)
                },
            )
            .map(|(c, _)| c)
        })?
        .best();
    println!(
        "{:<44} {:>10.2} us CPU/block",
        "baseline: one space, no channel",
        base / 1e3
    );
    let mut rows = Vec::new();
    for (label, th) in [
        ("threshold 1", 1u32),
        ("threshold 8", 8),
        ("threshold 32", 32),
        ("threshold 256", 256),
        ("latency bound only", u32::MAX),
    ] {
        let c = plan
            .measure(|_| run_at(rate, every(th)).map(|(c, _)| c))?
            .best();
        println!(
            "{:<44} {:>10.2} us CPU/block, the channel {:>6.2} us",
            label,
            c / 1e3,
            (c - base) / 1e3
        );
        rows.push((th, (c - base).max(1.0)));
    }
    let at = |th: u32| rows.iter().find(|r| r.0 == th).expect("measured").1;
    summary.add(
        "cross_space_batching_32_vs_1",
        at(1) / at(32),
        Some(Target::AtLeast(2.36)),
        format!("the channel's CPU per block at {rate} blocks/s: threshold 1 {:.2} us vs 32 {:.2} us (thesis Fig 5.2: 2.36x)", at(1) / 1e3, at(32) / 1e3),
    );
    summary.add(
        "cross_space_batching_latency_bound_vs_1",
        at(1) / at(u32::MAX),
        None,
        format!(
            "the channel's CPU per block, wake-ups only by the 1 ms latency bound: {:.2} us",
            at(u32::MAX) / 1e3
        ),
    );
    Ok(())
}
