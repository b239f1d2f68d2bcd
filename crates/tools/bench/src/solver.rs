//! `streamline-bench solver`: how long the control plane's integer program takes to
//! build and solve (HiGHS), for the request shapes of thesis 7.4: linear pipelines of
//! 1..10 filters on 1..16 spaces (Figures 7.18-7.19) and split-join requests
//! `gen | f + f + ... + f | null` (Figure 7.20), plus the headline 20 filters on 64
//! spaces. All filters are the same and exist in every space, as in the thesis; each
//! costs 4% of a CPU at the modelled rate, so capacity constraints are live for the
//! larger requests. Reports the median of R runs (11, or 3 with --quick) with min and
//! max, and the model size (variables, constraints).
//!
//! Plan quality (thesis 7.4, the other figure): real pipelines run by `streamline run`
//! with the optimizer's plan (`--plan ilp`), the push-down heuristic's (`--plan
//! heuristic`) and every filter in one thread (`--plan none`), at an offered rate one
//! CPU cannot sustain, so the plans have something to decide. Wall time of the whole run
//! (best of R), the same input for all three; the outputs' `count:` lines must agree.

use std::time::Instant;

use control::model::{request_from_text, Catalog, Load};
use control::optimize::ilp;
use control::{Filters, SystemModel};

use crate::util::{err, Result, Summary, Target};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Runs per configuration (median counts); default 11, with --quick 3.
    #[arg(long)]
    reps: Option<usize>,
    /// Skip the plan-quality runs (solve times only).
    #[arg(long)]
    no_runs: bool,
}

/// One pipeline run to completion by `streamline run`; returns (seconds, count line).
fn run_once(
    exe: &std::path::Path,
    how: &str,
    rate: f64,
    bytes: f64,
    pipeline: &str,
) -> Result<(f64, String, String)> {
    let t0 = Instant::now();
    let out = std::process::Command::new(exe)
        .args([
            "--socket",
            "none",
            "run",
            "--plan",
            how,
            "--rate",
            &rate.to_string(),
            "--bytes",
            &bytes.to_string(),
            pipeline,
        ])
        .stdout(std::process::Stdio::null())
        .output()
        .map_err(|e| err(format!("running {}: {e}", exe.display())))?;
    let secs = t0.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(err(format!(
            "streamline run --plan {how} '{pipeline}' failed:\n{stderr}"
        )));
    }
    let count = stderr
        .lines()
        .find(|l| l.starts_with("count:"))
        .unwrap_or("")
        .to_string();
    let plan = stderr
        .lines()
        .find(|l| l.starts_with("plan ("))
        .map_or("one space (as written)".to_string(), |l| {
            l.split_once("): ").map_or(l, |x| x.1).to_string()
        });
    Ok((secs, count, plan))
}

/// Plan quality: throughput of the three placements of each pipeline; returns the
/// geometric means of (ilp over heuristic, ilp over one thread).
fn plan_quality(reps: usize, quick: bool) -> Result<(f64, f64)> {
    let exe = crate::capture::streamline()?;
    let dir = crate::util::TempDir::new("plan-quality")?;
    let sample = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../examples/sample.pcap"
    ));
    let big = crate::pcap::build_capture(
        sample,
        &dir.path().join("big.pcap"),
        if quick { 64 << 20 } else { 256 << 20 },
    )?;
    let n = if quick { 20_000 } else { 80_000 };
    let pcap = big.path.display();
    let mean = big.bytes as f64 / big.packets.max(1) as f64;
    // (name, pipeline, offered blocks/s, bytes per block)
    let cases = [
        (
            "packet filter",
            format!("pcapin file={pcap} | bpf \"tcp dst port 80\" | count"),
            2e6,
            mean,
        ),
        (
            "compress",
            format!("gen count={n} size=4096 | deflate | count"),
            4e5,
            4096.0,
        ),
        (
            "compress + check",
            format!("gen count={n} size=4096 | deflate | inflate | count"),
            4e5,
            4096.0,
        ),
        (
            "classify + compress",
            format!("pcapin file={pcap} | tcp | deflate | count"),
            2e6,
            mean,
        ),
    ];
    println!();
    println!("plan quality: `streamline run --plan ilp|heuristic|none`, best of {reps} wall times");
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>9} {:>9}  plans",
        "pipeline", "ilp s", "heur s", "1 thr s", "ilp/heur", "ilp/1thr"
    );
    let (mut lh, mut lo) = (0.0f64, 0.0f64);
    for (name, text, rate, bytes) in &cases {
        let mut best = [f64::INFINITY; 3];
        let mut counts = [String::new(), String::new(), String::new()];
        let mut plans = [String::new(), String::new(), String::new()];
        for _ in 0..reps {
            for (i, how) in ["ilp", "heuristic", "none"].iter().enumerate() {
                let (t, c, p) = run_once(&exe, how, *rate, *bytes, text)?;
                best[i] = best[i].min(t);
                counts[i] = c;
                plans[i] = p;
            }
        }
        if counts.iter().any(|c| c != &counts[0] || c.is_empty()) {
            return Err(err(format!(
                "{name}: the placements disagree on the output: {counts:?}"
            )));
        }
        let (rh, ro) = (best[1] / best[0], best[2] / best[0]);
        lh += rh.ln();
        lo += ro.ln();
        println!(
            "{:<22} {:>10.3} {:>10.3} {:>10.3} {:>9.2} {:>9.2}  ilp: {} | heuristic: {}",
            name, best[0], best[1], best[2], rh, ro, plans[0], plans[1]
        );
    }
    let k = cases.len() as f64;
    Ok(((lh / k).exp(), (lo / k).exp()))
}

struct Point {
    ms_median: f64,
    ms_min: f64,
    ms_max: f64,
    vars: usize,
    cons: usize,
}

/// The native filter library, handed to the control plane as `streamline` hands it.
static FILTERS: Filters = Filters {
    registry: filters::REGISTRY,
    resolver: &filters::Natives,
    multiqueue: filters::live::multiqueue,
    kernel_placement: filters::live::kernel_placement,
};

fn measure(text: &str, spaces: usize, reps: usize) -> Result<Point> {
    let mut catalog = Catalog::new(FILTERS);
    catalog.set_measured("strip", 800.0, 0.0, None);
    let load = Load {
        blocks_per_sec: 100_000.0,
        bytes_per_block: 500.0,
    };
    let (_, req) = request_from_text(text, &catalog, load).map_err(|e| err(e.to_string()))?;
    let sys = SystemModel::n_spaces(spaces);
    let mut times = Vec::with_capacity(reps);
    let mut size = (0, 0);
    for _ in 0..reps {
        let t = Instant::now();
        let (_, stats) =
            ilp(&req, &sys, 60.0).map_err(|e| err(format!("{text} on {spaces} spaces: {e}")))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        size = (stats.variables, stats.constraints);
    }
    times.sort_by(f64::total_cmp);
    Ok(Point {
        ms_median: times[times.len() / 2],
        ms_min: times[0],
        ms_max: times[times.len() - 1],
        vars: size.0,
        cons: size.1,
    })
}

/// `gen | strip | ... | null` with `n` filters in all (n >= 2), or `gen` alone.
fn linear(n: usize) -> String {
    if n == 1 {
        return "gen".into();
    }
    let mut v = vec!["gen".to_string()];
    v.extend(std::iter::repeat_n("strip".to_string(), n - 2));
    v.push("null".into());
    v.join(" | ")
}

/// `gen | strip + ... + strip | null` with `k` parallel filters.
fn split_join(k: usize) -> String {
    format!("gen | {} | null", vec!["strip"; k].join(" + "))
}

fn row(label: &str, spaces: usize, p: &Point) {
    println!(
        "{label:<22} {spaces:>6} {:>9} {:>11} {:>10.2} {:>10.2} {:>10.2}",
        p.vars, p.cons, p.ms_median, p.ms_min, p.ms_max
    );
}

fn header(title: &str) {
    println!("\n== {title} ==");
    println!(
        "{:<22} {:>6} {:>9} {:>11} {:>10} {:>10} {:>10}",
        "request", "spaces", "variables", "constraints", "median ms", "min ms", "max ms"
    );
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    let reps = a.reps.unwrap_or(if quick { 3 } else { 11 }).max(1);
    let (lens, spaces, ways): (Vec<usize>, Vec<usize>, Vec<usize>) = if quick {
        (vec![1, 5, 10], vec![1, 4, 10, 16], vec![2, 8])
    } else {
        (
            (1..=10).collect(),
            vec![1, 2, 4, 6, 8, 10, 12, 16],
            vec![1, 2, 3, 4, 5, 6, 7, 8],
        )
    };
    println!("solver benchmark: HiGHS through good_lp, {reps} runs per point, median counts");
    header("linear pipelines (Fig 7.18/7.19)");
    let mut at_10_10 = None;
    for &n in &lens {
        for &s in &spaces {
            let p = measure(&linear(n), s, reps)?;
            row(&format!("linear {n} filters"), s, &p);
            if n == 10 && s == 10 {
                at_10_10 = Some(p.ms_median);
            }
        }
    }
    header("split-join: gen | f + ... + f | null (Fig 7.20)");
    for &k in &ways {
        for &s in &spaces {
            let p = measure(&split_join(k), s, reps)?;
            row(&format!("split-join {k} wide"), s, &p);
        }
    }
    header("headline");
    let p20 = measure(&linear(20), 64, reps)?;
    row("linear 20 filters", 64, &p20);
    let p10 = match at_10_10 {
        Some(v) => v,
        None => {
            let p = measure(&linear(10), 10, reps)?;
            row("linear 10 filters", 10, &p);
            p.ms_median
        }
    };
    let quality = if a.no_runs {
        None
    } else {
        Some(plan_quality(if quick { 1 } else { 3 }, quick)?)
    };
    let mut s = Summary::default();
    s.add(
        "solve_ms_10_filters_10_spaces",
        p10,
        Some(Target::AtMost(10.0)),
        "median, model build + HiGHS solve",
    );
    s.add(
        "solve_ms_20_filters_64_spaces",
        p20.ms_median,
        Some(Target::AtMost(250.0)),
        "median, model build + HiGHS solve",
    );
    if let Some((vs_heur, vs_one)) = quality {
        s.add(
            "plan_throughput_vs_heuristic",
            vs_heur,
            None,
            "geometric mean over 4 pipelines of heuristic-plan time / optimizer-plan time",
        );
        s.add(
            "plan_throughput_vs_one_thread",
            vs_one,
            None,
            "geometric mean over 4 pipelines of one-thread time / optimizer-plan time",
        );
    }
    s.print()?;
    Ok(())
}
