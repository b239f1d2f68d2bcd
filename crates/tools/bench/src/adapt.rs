//! The `adapt` subcommand (seed 003; issue 19): what closing the loop buys after the
//! costs shift under a running pipeline, and that moving filters loses nothing.
//!
//! A chain split over two pinned thread spaces,
//! `gen size=64 | work:a | work:b | work:c space=1 | work:d | seqcheck | null`, where
//! `work ns=N` spends N ns of CPU per block and `seqcheck` checks gen's sequence numbers
//! (every block, once, in order). It starts balanced (every `work` 300 ns: two per space).
//! After a warm-up the costs shift, by live edits, as when the traffic mix changes: `a`
//! and `b` drop to 30 ns, `c` and `d` rise to 600 ns, so space 1 now carries nearly all of
//! it. Blocks/s at the sink from half a second after the shift to the end of the run,
//! with the monitor of `control::adapt` beside the run (what `streamline run --adapt`
//! runs; it measures the filters' time and moves filters across the channel), against:
//!
//! - re-planning from scratch (`adaptive_vs_replanned_after_shift`): after the shift, one
//!   measurement window as long as the monitor's, the costs measured there (ns per block
//!   of every filter but the source, as the monitor measures them; `gen` keeps the
//!   catalog's estimate, its measured time being mostly waiting) given to the optimizer
//!   (`control::Planner`, as `streamline run` plans a load that does not fit: the
//!   highest rate that fits, the ILP there), the run stopped and a new one started with
//!   that plan; the window counts the blocks of both runs, the gap between them included;
//! - the best static plan for the shifted costs (`adaptive_vs_best_static_after_shift`):
//!   every cut of the chain between the two spaces, and one space, and the optimizer's
//!   plan, each run with the shifted costs from its start over the
//!   same schedule; the fastest counts.
//!
//! `adaptive_vs_static_plan_after_shift`, against the plan kept unchanged, is the old
//! figure (a strawman), kept as such. A further run moves filters at random batch
//! boundaries all along (`--chaos`), thousands of moves. Every run's blocks are counted
//! and `seqcheck`ed: any run that lost, duplicated or reordered a block fails the
//! benchmark before a figure is printed.
//!
//! The source runs flat out: the load is what this machine's two spaces can carry.

use crate::util::{err, watchdog, Result, Summary, Target};
use control::adapt::{monitor, Policy};
use dataplane::channel::ChannelConfig;
use dataplane::spaces::Spaces;
use dataplane::{
    Access, Args as FilterArgs, Batch, Ctx, Edit, EditHandle, Factory, Filter, FilterSpec,
};
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

/// The source, the four `work` filters (their names and costs before the shift) and the
/// checks after them: the chain every run of this benchmark runs, in this order.
const SOURCE: &str = "gen count=1000000000000 size=64";
const WORK: [&str; 4] = ["a", "b", "c", "d"];
const COSTS: [u64; 4] = [300, 300, 300, 300];
/// The costs after the shift (what `SHIFT` sets).
const SHIFTED: [u64; 4] = [30, 30, 600, 600];
const TAIL: [&str; 2] = ["seqcheck", "null"];
/// Where the plan of the run as started cuts the chain: `space=1` on `work:c`.
const CUT: Option<usize> = Some(2);
const SHIFT: [&str; 4] = [
    "set work:a ns=30",
    "set work:b ns=30",
    "set work:c ns=600",
    "set work:d ns=600",
];

/// The chain with `costs`, cut before its `cut`-th filter after the source (0: `work:a`,
/// ..., 5: `null`; `space=1` there, so it and everything after it run in space 1) or not
/// cut at all.
fn chain(costs: [u64; 4], cut: Option<usize>) -> String {
    let mut parts = vec![SOURCE.to_string()];
    for (w, ns) in WORK.iter().zip(costs) {
        parts.push(format!("work name={w} ns={ns}"));
    }
    parts.extend(TAIL.iter().map(|t| t.to_string()));
    if let Some(k) = cut {
        parts[k + 1] += " space=1";
    }
    parts.join(" | ")
}

/// A plan in one line: each filter (by its name) with the space it was placed in, as
/// written (`-`: where its upstream runs).
fn placement(g: &lang::Graph) -> String {
    g.nodes
        .iter()
        .map(|n| {
            let (what, place) = match &n.kind {
                lang::NodeKind::Filter { filter, place, .. } => (filter.clone(), Some(place)),
                lang::NodeKind::Unix { argv, place } => (argv.join(" "), Some(place)),
                lang::NodeKind::Split { ways, .. } => (format!("split({ways})"), None),
                lang::NodeKind::Join { .. } => ("join".to_string(), None),
            };
            let what = match (&n.name, what.as_str()) {
                (Some(name), "work") => format!("work:{name}"),
                _ => what,
            };
            let space = place
                .and_then(|p| p.space.as_ref())
                .map_or("-".to_string(), |s| s.to_string());
            format!("{what}@{space}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

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

impl Outcome {
    /// Blocks out of sequence, as `seqcheck` said (all of them if it said nothing).
    fn wrong(&self) -> u64 {
        self.checked
            .split(", ")
            .nth(1)
            .and_then(|w| w.split(' ').next())
            .and_then(|w| w.parse().ok())
            .unwrap_or(u64::MAX)
    }
    /// Blocks lost, duplicated or out of sequence.
    fn lost(&self) -> u64 {
        self.sent
            .abs_diff(self.received)
            .saturating_add(self.wrong())
    }
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

/// A rate as the run lines print it: a reading taken while `--chaos` moved the sink
/// (NaN, see [`rate`]) says so instead of printing NaN.
fn shown_rate(r: f64) -> String {
    if r.is_nan() {
        "unmeasured (the sink was moving while sampled)".to_string()
    } else {
        format!("{r:.0} blocks/s")
    }
}

/// Blocks/s into the sink over `secs`, from the published counters. With `--chaos` the
/// sink itself moves between spaces, and for a moment the published reports may miss it
/// (it left one space, the other has not published it yet): a reading waits until the
/// sink is in the report; a count that still went back (read mid-move) gives NaN, which
/// the runs whose rates are figures refuse (`Summary::print`) and the chaos run's line says
/// so ([`shown_rate`]).
fn rate(h: &EditHandle, secs: f64) -> f64 {
    let read = || {
        let t = Instant::now();
        loop {
            let present = h
                .report()
                .iter()
                .any(|n| n.label.split('@').next() == Some("seqcheck"));
            if present || t.elapsed() > Duration::from_secs(1) {
                return (Instant::now(), counter(h, "seqcheck", false));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let (t0, n0) = read();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (t1, n1) = read();
    match n1.checked_sub(n0) {
        Some(d) => d as f64 / (t1 - t0).as_secs_f64(),
        None => f64::NAN,
    }
}

fn build(g: &lang::Graph, what: &str) -> Result<Spaces> {
    Spaces::build(g, &AdaptFactory, 64 << 20, ChannelConfig::default())
        .map_err(|e| err(format!("building `{what}`: {e}")))
}

fn parse(text: &str) -> Result<lang::Graph> {
    lang::parse(text, &AdaptResolver).map_err(|d| err(format!("{d}")))
}

/// Apply the cost shift to a running chain.
fn shift(h: &EditHandle) -> Result<()> {
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
    Ok(())
}

/// What a finished run's report says: (sent by gen, received by the sink, seqcheck's
/// summary), or the reason it died.
fn tally(rep: &dataplane::spaces::SpacesReport) -> Result<(u64, u64, String)> {
    if let Some(d) = &rep.died {
        return Err(err(d.clone()));
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
    Ok((sent, received, checked))
}

/// One run of `g`: warm up, shift the costs (if `shifted`; a run already built with the
/// shifted costs goes through the same schedule without edits), then measure blocks/s at
/// the sink from 0.5 s after the shift to `after`.
fn run_once(
    g: &lang::Graph,
    adapt: bool,
    chaos: Option<u64>,
    shifted: bool,
    warm: f64,
    after: f64,
) -> Result<Outcome> {
    let text = placement(g);
    let mut spaces = build(g, &text)?;
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
        if shifted {
            shift(&h)?;
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
    let (sent, received, checked) = tally(&rep)?;
    Ok(Outcome {
        before,
        after: after_rate,
        sent,
        checked,
        received,
        moves,
    })
}

// Re-planning from scratch: the optimizer (`control::Planner`, the ILP `streamline run`
// plans with) given the costs measured after the shift. The planner knows filters by
// name and keeps one cost per name, so it plans a copy of the chain whose four `work`
// filters have names of their own; the plan is then applied, node by node, to the chain
// the runtime runs (the same nodes in the same order).

static PLAN_WORK: [FilterSpec; 4] = [
    FilterSpec::new("worka", Access::Metadata),
    FilterSpec::new("workb", Access::Metadata),
    FilterSpec::new("workc", Access::Metadata),
    FilterSpec::new("workd", Access::Metadata),
];
static PLAN_SEQCHECK: FilterSpec = FilterSpec::new("seqcheck", Access::Statistics);

/// The planner's names: the library's, the four `work` copies and `seqcheck`.
struct PlanNames;
impl lang::Resolver for PlanNames {
    fn resolve(&self, name: &str) -> Option<lang::FilterKind> {
        if PLAN_WORK.iter().any(|s| s.name == name) || name == "seqcheck" {
            return Some(lang::FilterKind::Native);
        }
        filters::Natives.resolve(name)
    }
    fn native_names(&self) -> Vec<String> {
        let mut v = filters::Natives.native_names();
        v.extend(PLAN_WORK.iter().map(|s| s.name.to_string()));
        v.push("seqcheck".into());
        v
    }
    fn params(&self, name: &str) -> Option<Vec<String>> {
        if PLAN_WORK.iter().any(|s| s.name == name) || name == "seqcheck" {
            return Some(vec![]);
        }
        filters::Natives.params(name)
    }
}

fn plan_filters() -> control::Filters {
    let mut registry: Vec<&'static FilterSpec> = filters::REGISTRY.to_vec();
    registry.extend(PLAN_WORK.iter());
    registry.push(&PLAN_SEQCHECK);
    control::Filters {
        registry: Box::leak(registry.into_boxed_slice()),
        resolver: &PlanNames,
        multiqueue: filters::live::multiqueue,
        kernel_placement: filters::live::kernel_placement,
    }
}

/// The chain as the planner sees it: no placement, one name per `work`.
fn planning_text() -> String {
    let mut parts = vec![SOURCE.to_string()];
    parts.extend(WORK.iter().map(|w| format!("work{w}")));
    parts.extend(TAIL.iter().map(|t| t.to_string()));
    parts.join(" | ")
}

/// Per filter (the runtime's base label: `work:a`, `seqcheck`, `null`), the ns it spent
/// per block between two reports: what the monitor of `--adapt` measures too. The source
/// is left out, as the monitor leaves it out (its time is mostly waiting for room).
fn per_block_ns(
    a: &[dataplane::NodeReport],
    b: &[dataplane::NodeReport],
) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for n in b {
        let base = n.label.split('@').next().unwrap_or("");
        let wanted = base == "seqcheck"
            || base == "null"
            || WORK.iter().any(|w| base == format!("work:{w}"));
        let Some(p) = a.iter().find(|p| p.label == n.label) else {
            continue;
        };
        let blocks = n.counters.blocks_in.saturating_sub(p.counters.blocks_in);
        if wanted && blocks > 0 {
            let ns = n.counters.nanos.saturating_sub(p.counters.nanos) as f64 / blocks as f64;
            *out.entry(base.to_string()).or_insert(0.0) += ns;
        }
    }
    out
}

/// The optimizer's plan of the chain with `costs` (ns per block, by runtime label), at
/// the highest rate this machine's thread spaces carry (as `streamline run` plans a load
/// that does not fit: halving, then bisecting to 2% with the heuristic, then the ILP once
/// there), applied to the chain with the shifted costs. Returns the graph to run and a
/// description of how it was planned.
fn replan(costs: &std::collections::BTreeMap<String, f64>) -> Result<(lang::Graph, String)> {
    use control::planner::Method;
    let t0 = Instant::now();
    let mut sys = control::SystemModel::discover().map_err(|e| err(e.to_string()))?;
    // This benchmark's spaces are threads of one process, as the runs it compares with.
    sys.make_spaces(&[control::SpaceKind::Thread]);
    let lib = plan_filters();
    let mut planner = control::Planner::new(sys, lib);
    let cycles_per_ns = planner.sys.cycles_per_sec / 1e9;
    let cycles = |ns: f64| ns * cycles_per_ns;
    for (label, ns) in costs {
        let name = match label.strip_prefix("work:") {
            Some(w) => format!("work{w}"),
            None => label.clone(),
        };
        let c = cycles(*ns);
        planner.catalog.set_measured(&name, c, 0.0, None);
    }
    for w in WORK {
        if !costs.contains_key(&format!("work:{w}")) {
            return Err(err(format!("no cost measured for work:{w}: {costs:?}")));
        }
    }
    let text = planning_text();
    let g = lang::parse(&text, &control::model::PlanResolver(&lib))
        .map_err(|d| err(format!("planning `{text}`: {d}")))?;
    let fits = |p: &mut control::Planner, rate: f64, how| {
        p.load.blocks_per_sec = rate;
        p.plan_graph(&g, how).ok()
    };
    // Far above what two CPUs carry; halve until a plan fits.
    let mut rate = 1e9;
    let mut planned = loop {
        if let Some(p) = fits(&mut planner, rate, Method::Heuristic) {
            break p;
        }
        rate /= 2.0;
        if rate < 1.0 {
            return Err(err(format!("no plan of `{text}` fits at any rate")));
        }
    };
    let (mut lo, mut hi) = (rate, rate * 2.0);
    while hi - lo > 0.02 * lo {
        let mid = (lo + hi) / 2.0;
        match fits(&mut planner, mid, Method::Heuristic) {
            Some(p) => {
                planned = p;
                lo = mid;
            }
            None => hi = mid,
        }
    }
    let mut method = "heuristic";
    if let Some(p) = fits(&mut planner, lo, Method::Optimal) {
        planned = p;
        method = "ILP";
    }
    let a = control::Assignment::from_plan(&g, &planned.plan, &planner.sys, &lib, planned.template);
    let run = parse(&chain(SHIFTED, None))?;
    let run = a
        .apply(&run)
        .map_err(|e| err(format!("applying the plan: {e}")))?;
    let how = format!(
        "{method} plan for {:.0} blocks/s in {:.1} ms{}: {}",
        lo,
        t0.elapsed().as_secs_f64() * 1e3,
        match planned.template {
            Some((node, ways)) => format!(" (node {node} data-parallel x{ways})"),
            None => String::new(),
        },
        placement(&run)
    );
    Ok((run, how))
}

/// The re-planned run's figures.
struct Replanned {
    /// Blocks/s at the sink over the same window as the other runs' `after` (from 0.5 s
    /// after the shift to its end), the stop, the planning and the restart included.
    after: f64,
    /// Blocks/s of the new run from 0.5 s after its start to the end.
    steady: f64,
    graph: lang::Graph,
    /// Seconds from the shift to the new run's start.
    gap: f64,
    lost: u64,
    counts: String,
}

/// Re-planning from scratch: the run as started, the shift, one measurement window of
/// the monitor's length, the optimizer's plan for the costs measured there, the run
/// stopped and a new one started with that plan (and the shifted costs).
fn run_replanned(warm: f64, after: f64) -> Result<Replanned> {
    let g = parse(&chain(COSTS, CUT))?;
    let spaces = build(&g, &placement(&g))?;
    let h = spaces.edit_handle();
    let stop = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let window = Policy::default().window;
    let (rep, t_shift, first, plan) = std::thread::scope(|s| -> Result<_> {
        let run = s.spawn(|| {
            let r = spaces.run_with(&stop, &h, &AdaptFactory, |_| {});
            done.store(true, Ordering::Relaxed);
            r
        });
        let _stop = Stop(&stop);
        std::thread::sleep(Duration::from_secs_f64(warm));
        shift(&h)?;
        let t_shift = Instant::now();
        // The sink's count when the window opens, if this run still runs then.
        let opens = t_shift + Duration::from_millis(500);
        let (h, done) = (&h, &done);
        let sampler = s.spawn(move || {
            std::thread::sleep(opens.saturating_duration_since(Instant::now()));
            (!done.load(Ordering::Relaxed)).then(|| counter(h, "seqcheck", false))
        });
        let r0 = h.report();
        std::thread::sleep(window);
        let r1 = h.report();
        let costs = per_block_ns(&r0, &r1);
        let plan = replan(&costs);
        drop(_stop);
        let rep = run.join().map_err(|_| err("the run panicked"))?;
        let first = sampler.join().map_err(|_| err("the sampler panicked"))?;
        println!(
            "    measured after the shift (ns per block): {}",
            costs
                .iter()
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok((rep, t_shift, first, plan?))
    })?;
    let (sent1, received1, checked1) = tally(&rep)?;
    // Blocks the first run delivered inside the window (none if it had stopped).
    let from_first = first.map_or(0, |at_open| received1.saturating_sub(at_open));
    let (g2, how) = plan;
    println!("    {how}");
    let spaces = build(&g2, &placement(&g2))?;
    let h = spaces.edit_handle();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let gap = (started - t_shift).as_secs_f64();
    let opens = t_shift + Duration::from_millis(500);
    let closes = t_shift + Duration::from_secs_f64(after);
    let (rep2, in_window, steady) = std::thread::scope(|s| -> Result<_> {
        let run = s.spawn(|| spaces.run_with(&stop, &h, &AdaptFactory, |_| {}));
        let _stop = Stop(&stop);
        std::thread::sleep(opens.saturating_duration_since(Instant::now()));
        let at_open = counter(&h, "seqcheck", false);
        let settled = started + Duration::from_millis(500);
        std::thread::sleep(settled.saturating_duration_since(Instant::now()));
        let (t_settled, at_settled) = (Instant::now(), counter(&h, "seqcheck", false));
        std::thread::sleep(closes.saturating_duration_since(Instant::now()));
        let (t_close, at_close) = (Instant::now(), counter(&h, "seqcheck", false));
        drop(_stop);
        let rep = run.join().map_err(|_| err("the re-planned run panicked"))?;
        let steady = if t_close > t_settled {
            at_close.saturating_sub(at_settled) as f64 / (t_close - t_settled).as_secs_f64()
        } else {
            f64::NAN
        };
        Ok((rep, at_close.saturating_sub(at_open), steady))
    })?;
    let (sent2, received2, checked2) = tally(&rep2)?;
    let o = |sent, received, checked: String| Outcome {
        before: 0.0,
        after: 0.0,
        sent,
        checked,
        received,
        moves: vec![],
    };
    let (a, b) = (o(sent1, received1, checked1), o(sent2, received2, checked2));
    Ok(Replanned {
        after: (from_first + in_window) as f64 / (after - 0.5),
        steady,
        graph: g2,
        gap,
        lost: a.lost().saturating_add(b.lost()),
        counts: format!(
            "run as started: gen sent {}, the sink received {}, {}; re-planned run: gen sent {}, the sink received {}, {}",
            a.sent, a.received, a.checked, b.sent, b.received, b.checked
        ),
    })
}

/// Fails the run if `o` lost, duplicated or reordered blocks: its rate is no figure then.
fn check(name: &str, o: &Outcome) -> Result<()> {
    if o.lost() != 0 {
        return Err(err(format!(
            "{name}: blocks lost, duplicated or out of sequence (gen sent {}, the sink received {}, {}); no figure printed",
            o.sent, o.received, o.checked
        )));
    }
    Ok(())
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(Duration::from_secs(600));
    let (warm, after) = if quick {
        (1.0, a.after.unwrap_or(1.5))
    } else {
        (2.0, a.after.unwrap_or(4.0))
    };
    if after <= 0.5 {
        return Err(err("--after must be more than 0.5 s"));
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let text = chain(COSTS, CUT);
    println!("streamline-bench adapt: {cpus} CPUs");
    println!("  {text}");
    println!("  shift after {warm} s: {}", SHIFT.join("; "));
    let g = parse(&text)?;
    let mut summary = Summary::default();
    let mut outs = Vec::new();
    for (adapt, chaos) in [(false, None), (true, None), (false, Some(7))] {
        let name = match (adapt, chaos) {
            (true, _) => "adaptive",
            (_, Some(_)) => "chaos (a filter moved at random batch boundaries, about one in three)",
            _ => "static (the plan kept)",
        };
        println!("  {name}:");
        let o = run_once(&g, adapt, chaos, true, warm, after)?;
        println!(
            "    before the shift {}, after it {}; gen sent {}, the sink received {}; {}; {} moves",
            shown_rate(o.before),
            shown_rate(o.after),
            o.sent,
            o.received,
            o.checked,
            o.moves.len()
        );
        outs.push(o);
    }
    println!("  re-planned from scratch (the optimizer, given the costs measured after the shift; the run stopped and started anew):");
    let rp = run_replanned(warm, after)?;
    println!(
        "    after the shift {:.0} blocks/s (the new run started {:.2} s after the shift; {:.0} blocks/s once settled); {}",
        rp.after, rp.gap, rp.steady, rp.counts
    );
    // The best static plan for the shifted costs: every cut of the chain between the two
    // spaces (and none), each run with the shifted costs from its start, and the
    // optimizer's plan if it is none of those.
    println!("  static plans for the shifted costs (every cut; the same schedule, no edits):");
    let mut candidates: Vec<(String, lang::Graph)> = (0..=TAIL.len() + WORK.len())
        .map(|k| {
            let cut = (k < TAIL.len() + WORK.len()).then_some(k);
            let label = match cut {
                Some(k) if k < WORK.len() => format!("cut before work:{}", WORK[k]),
                Some(k) => format!("cut before {}", TAIL[k - WORK.len()]),
                None => "one space".to_string(),
            };
            parse(&chain(SHIFTED, cut)).map(|g| (label, g))
        })
        .collect::<Result<_>>()?;
    // (Always: the same cut written in the runtime's names is the same plan, but its
    // steady rate is worth a line of its own.)
    candidates.push(("the optimizer's plan".into(), rp.graph.clone()));
    let mut best: Option<(String, f64)> = None;
    for (label, g) in &candidates {
        let o = run_once(g, false, None, false, warm, after)?;
        println!(
            "    {label} ({}): {:.0} blocks/s; gen sent {}, the sink received {}; {}",
            placement(g),
            o.after,
            o.sent,
            o.received,
            o.checked
        );
        check(&format!("static plan {}", placement(g)), &o)?;
        if best.as_ref().is_none_or(|(_, b)| o.after > *b) {
            best = Some((label.clone(), o.after));
        }
    }
    let (best_label, best_after) = best.expect("at least one candidate");
    let (st, ad, ch) = (&outs[0], &outs[1], &outs[2]);
    // Counts before figures.
    check("the static run", st)?;
    check("the adaptive run", ad)?;
    check("the chaos run", ch)?;
    if rp.lost != 0 {
        return Err(err(format!(
            "the re-planned runs lost, duplicated or reordered blocks: {}; no figure printed",
            rp.counts
        )));
    }
    if ad.moves.is_empty() {
        println!("  note: the monitor made no move");
    }
    summary.add(
        "adaptive_vs_replanned_after_shift",
        ad.after / rp.after,
        Some(Target::AtLeast(1.0)),
        format!(
            "blocks/s after the shift, --adapt's monitor vs stopping and re-planning with the optimizer given the measured costs ({:.0} vs {:.0}; the new run started {:.2} s after the shift)",
            ad.after, rp.after, rp.gap
        ),
    );
    summary.add(
        "adaptive_vs_best_static_after_shift",
        ad.after / best_after,
        Some(Target::AtLeast(0.9)),
        format!(
            "blocks/s after the shift, --adapt's monitor vs the best static plan for the shifted costs ({best_label}: {best_after:.0} blocks/s, of {} plans run)",
            candidates.len()
        ),
    );
    summary.add(
        "adaptive_vs_static_plan_after_shift",
        ad.after / st.after,
        Some(Target::AtLeast(1.5)),
        "the old figure, against the plan kept unchanged (a strawman, not a headline)",
    );
    summary.add(
        "migration_lost_blocks",
        (ad.lost() + ch.lost()) as f64,
        Some(Target::AtMost(0.0)),
        format!(
            "blocks lost, duplicated or out of sequence in the adaptive and chaos runs ({} moves; a run with any fails before this line)",
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
