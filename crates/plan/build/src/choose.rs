//! The run's decisions, each made once: the placement the planner chooses, prefix sharing
//! with other runs, and their descriptions as `streamline run` prints them and `ps` shows.

use crate::{Planning, FILTERS};
use dataplane::spaces::Layout;

/// What the planner chose for a run, and why.
pub struct Chosen {
    /// The placement: the planner's choice for every filter the user did not pin.
    pub assignment: control::Assignment,
    /// How it was chosen: `ilp (HiGHS) in 3.1 ms` (and the rate planned for, when the
    /// offered one does not fit), or `as written`.
    pub why: String,
    /// The planner as it planned (its system model; its load, the offered one or the
    /// highest that fits) and its plan; None when nothing was planned (`--plan none`).
    pub planned: Option<(control::Planner, control::Planned)>,
}

/// The machine a placement is planned on: `planning`'s model, else this machine as
/// discovered. A non-root client's worker probes no capability of its own: what the
/// kernel offers its run is what the daemon lent it (a capture socket, never eBPF).
pub fn system_model(planning: &Planning) -> Result<control::SystemModel, String> {
    let mut sys = match &planning.system {
        Some(s) => s.clone(),
        None => control::SystemModel::discover().map_err(|e| e.to_string())?,
    };
    if kernel::lend::lending() {
        use control::SpaceKind as K;
        sys.caps.af_packet = kernel::lend::lent_any(kernel::lend::Kind::Rx);
        sys.caps.bpf = false;
        sys.make_spaces(&[K::Kernel, K::Thread, K::Process]);
    }
    Ok(sys)
}

/// The placement a run uses: the planner's choice for every filter the user did not pin
/// (see `control::realize`), on the machine and costs of `planning`. At a load the
/// machine cannot sustain even with data-parallel copies, it plans for the highest rate
/// it can (halving), which spreads the work as far as it goes. An error: the planner
/// cannot model the request (a run then runs as written, with a note).
pub(crate) fn choose_placement(
    g: &lang::Graph,
    how: &str,
    load: control::Load,
    planning: &Planning,
) -> Result<Chosen, String> {
    use control::planner::Method;
    let method = match how {
        "none" => {
            return Ok(Chosen {
                assignment: control::Assignment::default(),
                why: "as written".into(),
                planned: None,
            })
        }
        "heuristic" => Method::Heuristic,
        _ => Method::Optimal,
    };
    let mut planner = control::Planner::new(system_model(planning)?, FILTERS);
    for c in &planning.costs {
        planner.catalog.parse_override(c)?;
    }
    planner.load = load;
    let mut scaled = 1.0;
    let planned = loop {
        // Below the offered rate the heuristic finds the bracket (see below).
        let how = if scaled < 1.0 {
            Method::Heuristic
        } else {
            method
        };
        match planner.plan_graph(g, how) {
            Ok(p) => break p,
            Err(control::error::Error::Plan(control::PlanError::Infeasible(_)))
                if scaled > 1e-4 =>
            {
                scaled /= 2.0;
                planner.load.blocks_per_sec = load.blocks_per_sec * scaled;
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    // The offered rate does not fit: the best plan is the one that carries the most, so
    // look for the highest rate that fits, between the one found and twice it (to 2%).
    // Near it, only plans that balance the CPUs fit (the data-parallel template
    // included). The search runs on the heuristic (microseconds a plan); the optimizer
    // then plans once at the rate found (the heuristic's plan, its warm start, carries
    // it; asking above it would make the solver prove that nothing fits, a full search).
    let mut planned = planned;
    if scaled < 1.0 {
        let fits = |p: &mut control::Planner, rate: f64, how| {
            p.load.blocks_per_sec = load.blocks_per_sec * rate;
            p.plan_graph(g, how).ok()
        };
        let (mut lo, mut hi) = (scaled, (scaled * 2.0).min(1.0));
        let mut best = None;
        while hi - lo > 0.02 * lo {
            let mid = (lo + hi) / 2.0;
            match fits(&mut planner, mid, Method::Heuristic) {
                Some(p) => {
                    best = Some(p);
                    lo = mid;
                }
                None => hi = mid,
            }
        }
        if method == Method::Heuristic {
            if let Some(p) = best {
                planned = p;
                scaled = lo;
            }
        } else if lo > scaled {
            if let Some(p) = fits(&mut planner, lo, Method::Optimal) {
                planned = p;
                scaled = lo;
            }
        }
        planner.load.blocks_per_sec = load.blocks_per_sec * scaled;
    }
    let a =
        control::Assignment::from_plan(g, &planned.plan, &planner.sys, &FILTERS, planned.template);
    let mut why = format!(
        "{} in {:.1} ms",
        planned.plan.stats.method,
        planned.plan.stats.solve_time.as_secs_f64() * 1e3
    );
    if scaled < 1.0 {
        why += &format!(
            ", planned for {} blocks/s (the offered rate does not fit)",
            control::plan::human(planner.load.blocks_per_sec)
        );
    }
    Ok(Chosen {
        assignment: a,
        why,
        planned: Some((planner, planned)),
    })
}

/// Prefix sharing between runs (control::prefix): take the longest prefix of this
/// pipeline a live run publishes, or else publish ours. None when nothing is shareable.
pub(crate) fn choose_share(g: &lang::Graph, quiet: bool) -> Option<control::prefix::Share> {
    use control::prefix::{shareable, Share};
    let prefixes = shareable(&FILTERS, g);
    let shortest = prefixes
        .first()
        .map_or(1, |p| control::prefix::min_shared_len(&FILTERS, g, p));
    for p in prefixes.iter().filter(|p| p.nodes.len() >= shortest) {
        if let Some(pid) = dataplane::channel::published(&p.key) {
            if !quiet {
                eprintln!("sharing `{}` with the run of process {pid} (prefix sharing; --no-share runs its own)", p.text);
            }
            return Some(Share::Subscribe {
                key: p.key.clone(),
                len: p.nodes.len(),
            });
        }
    }
    // Publish only what a subscriber may take: never the bare `rx` when the filter after
    // it runs on the socket (a kernel `sample` would hand subscribers its sample).
    prefixes
        .first()
        .filter(|p| p.nodes.len() >= shortest)
        .map(|p| Share::Publish { key: p.key.clone() })
}

/// Where each filter of a built graph runs, by space, in the runtime's names:
/// `kernel:bpf local:rx,count t1:deflate t2:deflate p3:gzip` (kernel first, then by
/// space id; a filter on the capture socket is `kernel`; the `split` and `join` a
/// replicated filter makes, and the run's internal nodes (`__publish`), are left out).
/// Read off the run's one placement ([`Layout`]).
pub(crate) fn layout_text(l: &Layout) -> String {
    use dataplane::spaces::SpaceKind;
    let (g, p) = (&l.graph, &l.placement);
    let mut groups: std::collections::BTreeMap<(u8, usize), Vec<String>> = Default::default();
    for n in &g.nodes {
        let (name, kernel) = match &n.kind {
            lang::NodeKind::Filter { filter, place, .. } => (
                filter.clone(),
                matches!(place.side, Some(lang::Side::Kernel { .. })),
            ),
            lang::NodeKind::Unix { argv, .. } => (argv.first().cloned().unwrap_or_default(), false),
            _ => continue,
        };
        if name.starts_with("__") {
            continue;
        }
        let key = if kernel { (0, 0) } else { (1, p.space[n.id]) };
        groups.entry(key).or_default().push(name);
    }
    groups
        .into_iter()
        .map(|((k, id), names)| {
            let space = match (k, p.kind(id)) {
                (0, _) => "kernel".to_string(),
                (_, SpaceKind::Local) => "local".to_string(),
                (_, SpaceKind::Thread) => format!("t{id}"),
                (_, SpaceKind::Process) => format!("p{id}"),
            };
            format!("{space}:{}", names.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `deflate space=2,3; bpf placed=user`: the plan's choices, by filter.
pub(crate) fn describe(g: &lang::Graph, a: &control::Assignment) -> String {
    a.set
        .iter()
        .map(|(&id, np)| {
            let name = match &g.nodes[id].kind {
                lang::NodeKind::Filter { filter, .. } => filter.clone(),
                _ => format!("n{id}"),
            };
            let mut o = Vec::new();
            match &np.space {
                Some(control::SpaceChange::Set(v)) => {
                    o.push(format!("space={}", lang::SpaceSpec::Runtime(v.clone())))
                }
                Some(control::SpaceChange::Clear) => o.push("-space".to_string()),
                None => {}
            }
            if let Some(side) = &np.side {
                o.push(format!("placed={side}"));
            }
            format!("{name} {}", o.join(" "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}
