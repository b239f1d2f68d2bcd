//! The two placement algorithms of thesis 6.3.2-6.3.4: one integer program over request
//! graph x system graph solved by HiGHS (through `good_lp`), and the greedy "push
//! processing down" heuristic that is its baseline and fallback. Both return a
//! [`Choice`] per filter; [`crate::plan::evaluate`] is the single judge of cost.
//!
//! The integer program. For each filter i and each admissible (implementation, space)
//! option o a binary `x[i,o]`, with `sum_o x[i,o] = 1`. Write `X_i(S)` for the sum of
//! i's options in a set of spaces S. Each stream e = (i, j) pays a call per block plus
//! a same-CPU load per byte, and then, through continuous indicators in [0, 1] that the
//! minimization drives to exactly 0 or 1:
//!
//! * `D_e >= X_i(s) - X_j(s)` for every space s (the two ends differ): ring instead of
//!   call, per block;
//! * one `W_e^g >= X_i(G) - X_j(G)` per group G of a partition of spaces by CPU, by
//!   shared L2, by shared LLC, by NUMA node: the per-byte load cost grows one rung per
//!   partition the ends are separated by (cache distance between neighbours, 6.3.3);
//! * `K_e >= X_i(kernel) - X_j(kernel)` and `U_e >= X_j(kernel) - X_i(kernel)`: the
//!   kernel->user ring or user->kernel write, per block and per byte copied;
//! * `P_e >= X_i(p) - X_j(p)` (and the reverse) per process space p: the extra cost of
//!   crossing into or out of a process.
//!
//! Per CPU, filter cycles must fit its budget. The model has O(filters x spaces)
//! variables and constraints, not O(streams x spaces^2), which keeps 20 filters on 64
//! spaces small. Its optimum equals [`crate::plan::evaluate`]'s cost of the placement.

use std::time::Instant;

use std::collections::HashMap;

use good_lp::{
    constraint, variable, variables, Expression, ResolutionError, Solution, SolverModel, Variable,
    WithInitialSolution,
};

use crate::error::PlanError;
use crate::model::Request;
use crate::plan::{admissible, evaluate, Choice, SolverStats};
use crate::system::{SpaceKind, SystemModel};

/// Every admissible option per filter, or an error naming the first filter with none
/// and why.
pub fn options(req: &Request, sys: &SystemModel) -> Result<Vec<Vec<Choice>>, PlanError> {
    let mut all = Vec::with_capacity(req.nodes.len());
    for (i, n) in req.nodes.iter().enumerate() {
        let mut opts = Vec::new();
        for imp in 0..n.impls.len() {
            for s in 0..sys.spaces.len() {
                if admissible(req, sys, i, imp, s) {
                    opts.push(Choice { imp, space: s });
                }
            }
        }
        if opts.is_empty() {
            return Err(PlanError::Impossible {
                filter: n.label.clone(),
                node: i,
                why: why_impossible(req, sys, i),
            });
        }
        all.push(opts);
    }
    Ok(all)
}

fn why_impossible(req: &Request, sys: &SystemModel, i: usize) -> String {
    let n = &req.nodes[i];
    let mut kinds: Vec<SpaceKind> = n
        .impls
        .iter()
        .flat_map(|im| im.kinds.iter().copied())
        .collect();
    kinds.sort();
    kinds.dedup();
    let names = |k: &[SpaceKind]| k.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ");
    if let Some(pin) = n.pin.kinds {
        if !pin.iter().any(|k| kinds.contains(k)) {
            return format!(
                "it is pinned to space={} but its implementations run only in {}",
                names(pin),
                names(&kinds)
            );
        }
    }
    if let Some(cpu) = n.pin.cpu {
        if !sys.spaces.iter().any(|s| s.cpu == cpu) {
            return format!("it is pinned to cpu{cpu}, which this system does not have");
        }
    }
    let mut missing = Vec::new();
    for im in &n.impls {
        let have = im.kinds.iter().any(|k| {
            sys.spaces
                .iter()
                .any(|s| s.kind == *k && n.pin.admits(s.kind, s.cpu))
        });
        if !have {
            missing.push(format!("{} needs a {} space", im.name, names(&im.kinds)));
        } else {
            missing.push(format!(
                "{} needs {:?}, which this system lacks",
                im.name, im.needs
            ));
        }
    }
    missing.join("; ")
}

/// Explains an infeasible capacity model: the first filter too heavy for any CPU, or
/// the total.
fn why_infeasible(req: &Request, sys: &SystemModel) -> String {
    for (i, n) in req.nodes.iter().enumerate() {
        let least = (0..n.impls.len())
            .map(|m| req.node_cycles(i, m))
            .fold(f64::INFINITY, f64::min);
        if least > sys.cycles_per_sec {
            return format!(
                "filter '{}' (node {i}) needs {:.3e} cycles/s at {:.3e} blocks/s, more than one CPU's {:.3e}",
                n.label, least, n.rate_in, sys.cycles_per_sec
            );
        }
    }
    match &sys.link {
        Some(l) => format!(
            "the filters' cycles do not fit the CPUs they may run on (pins and capacities) without more than the link between {} and {} carries ({:.3e} B/s)",
            l.a, l.b, l.bandwidth
        ),
        None => "the filters' cycles do not fit the CPUs they may run on (pins and capacities)".to_string(),
    }
}

/// The greedy "push processing down" heuristic (thesis 6.3.2): each filter, in
/// topological order, goes to the lowest space kind it has an implementation for
/// (kernel, then thread, then process), on its first upstream neighbour's CPU if that
/// has room, else the first CPU that does. `@single` filters follow the first one.
pub fn push_down(
    req: &Request,
    sys: &SystemModel,
) -> Result<(Vec<Choice>, SolverStats), PlanError> {
    let start = Instant::now();
    let opts = options(req, sys)?;
    let mut choice: Vec<Option<Choice>> = vec![None; req.nodes.len()];
    let mut load = vec![0.0; sys.cpus.len()];
    let cpu_index = |cpu: usize| sys.cpus.iter().position(|&c| c == cpu).expect("known cpu");
    let mut single_space: Option<usize> = None;
    for &i in &req.order {
        let up_cpu = req
            .streams
            .iter()
            .filter(|s| s.to == i)
            .filter_map(|s| choice[s.from])
            .map(|c| sys.spaces[c.space].cpu)
            .next()
            .unwrap_or(sys.cpus[0]);
        let mut cands = opts[i].clone();
        if req.nodes[i].single {
            if let Some(sp) = single_space {
                cands.retain(|c| c.space == sp);
            }
        }
        cands.sort_by(|a, b| {
            let (sa, sb) = (&sys.spaces[a.space], &sys.spaces[b.space]);
            let ka = (sa.kind, sa.cpu != up_cpu, cpu_index(sa.cpu));
            let kb = (sb.kind, sb.cpu != up_cpu, cpu_index(sb.cpu));
            ka.cmp(&kb).then(
                req.node_cycles(i, a.imp)
                    .total_cmp(&req.node_cycles(i, b.imp)),
            )
        });
        let fit = cands.into_iter().find(|c| {
            let k = cpu_index(sys.spaces[c.space].cpu);
            load[k] + req.node_cycles(i, c.imp) <= sys.cycles_per_sec
        });
        let Some(c) = fit else {
            return Err(PlanError::Infeasible(why_infeasible(req, sys)));
        };
        load[cpu_index(sys.spaces[c.space].cpu)] += req.node_cycles(i, c.imp);
        if req.nodes[i].single && single_space.is_none() {
            single_space = Some(c.space);
        }
        choice[i] = Some(c);
    }
    let choice: Vec<Choice> = choice
        .into_iter()
        .map(|c| c.expect("every node visited"))
        .collect();
    // The heuristic does not search cuts of the hosts' link: a placement that overloads
    // it is infeasible for it (the ILP may still find one).
    if let Some(l) = &sys.link {
        let carried = evaluate(req, sys, &choice).link_bytes;
        if carried > l.bandwidth * (1.0 + 1e-9) {
            return Err(PlanError::Infeasible(format!(
                "the link between {} and {} would carry {:.3e} B/s, more than its {:.3e}",
                l.a, l.b, carried, l.bandwidth
            )));
        }
    }
    let stats = SolverStats {
        method: "push-down heuristic",
        variables: 0,
        constraints: 0,
        solve_time: start.elapsed(),
        alternative: "as written".into(),
    };
    Ok((choice, stats))
}

/// A thousandth of a cycle per second per rank: among plans of equal cost, prefer lower
/// CPUs and threads over processes, so that symmetric machines give one stable answer
/// (the heuristic orders its candidates the same way). At most a few cycles per second
/// in total, far below any real difference.
fn tie_break(sys: &SystemModel, space: usize) -> f64 {
    let s = &sys.spaces[space];
    let cpu = sys.cpus.iter().position(|&c| c == s.cpu).unwrap_or(0);
    let kind = match s.kind {
        SpaceKind::Kernel => 0,
        SpaceKind::Thread => 1,
        SpaceKind::Process => 2,
    };
    1e-3 * (cpu * 3 + kind) as f64
}

/// Solves the integer program with HiGHS. `time_limit` in seconds bounds the search.
pub fn ilp(
    req: &Request,
    sys: &SystemModel,
    time_limit: f64,
) -> Result<(Vec<Choice>, SolverStats), PlanError> {
    let start = Instant::now();
    // What no placement can fit, said without a solve: a filter heavier than one CPU,
    // or more cycles than all the CPUs have (a planner searching for the rate that fits
    // asks this often).
    let least = |i: usize| {
        (0..req.nodes[i].impls.len())
            .map(|m| req.node_cycles(i, m))
            .fold(f64::INFINITY, f64::min)
    };
    let total: f64 = (0..req.nodes.len()).map(least).sum();
    if (0..req.nodes.len()).any(|i| least(i) > sys.cycles_per_sec)
        || total > sys.cycles_per_sec * sys.cpus.len() as f64
    {
        return Err(PlanError::Infeasible(why_infeasible(req, sys)));
    }
    let opts = options(req, sys)?;
    let n = req.nodes.len();
    let ns = sys.spaces.len();
    let mut vars = variables!();
    let mut nvars = 0usize;
    let mut cons: Vec<good_lp::Constraint> = Vec::new();
    // Each indicator with the right-hand sides it bounds, to compute a warm start.
    let mut inds: Vec<(Variable, Vec<Expression>)> = Vec::new();
    // x[i][k] for opts[i][k].
    let x: Vec<Vec<Variable>> = opts
        .iter()
        .map(|o| {
            o.iter()
                .map(|_| {
                    nvars += 1;
                    vars.add(variable().binary())
                })
                .collect()
        })
        .collect();
    // X[i][s]: expression of i's options in space s (None if no option there).
    let mut xs: Vec<Vec<Option<Expression>>> = vec![vec![None; ns]; n];
    for i in 0..n {
        for (k, c) in opts[i].iter().enumerate() {
            let e = xs[i][c.space].get_or_insert_with(Expression::default);
            *e += x[i][k];
        }
    }
    let group_expr = |i: usize, group: &[usize]| -> Option<Expression> {
        let mut e: Option<Expression> = None;
        for &s in group {
            if let Some(v) = &xs[i][s] {
                *e.get_or_insert_with(Expression::default) += v.clone();
            }
        }
        e
    };
    let mut objective = Expression::default();
    for i in 0..n {
        let mut one = Expression::default();
        for (k, c) in opts[i].iter().enumerate() {
            one += x[i][k];
            objective += (req.node_cycles(i, c.imp) + tie_break(sys, c.space)) * x[i][k];
        }
        cons.push(constraint!(one == 1));
    }
    // Space partitions for the distance ladder: by space (D), by CPU, L2, LLC, NUMA.
    let c = &sys.costs;
    let parts = sys.cpu_partitions();
    let spaces_of = |cpus: &[usize]| -> Vec<usize> {
        sys.spaces
            .iter()
            .filter(|s| cpus.contains(&s.cpu))
            .map(|s| s.id)
            .collect()
    };
    let by_cpu: Vec<Vec<usize>> = sys.cpus.iter().map(|&cpu| spaces_of(&[cpu])).collect();
    let ladder: Vec<(f64, Vec<Vec<usize>>)> = vec![
        (c.load_shared_l2 - c.load_same_cpu, by_cpu),
        (
            c.load_shared_llc - c.load_shared_l2,
            parts[0].1.iter().map(|g| spaces_of(g)).collect(),
        ),
        (
            c.load_same_numa - c.load_shared_llc,
            parts[1].1.iter().map(|g| spaces_of(g)).collect(),
        ),
        (
            c.load_remote - c.load_same_numa,
            parts[2].1.iter().map(|g| spaces_of(g)).collect(),
        ),
    ];
    let kernel: Vec<usize> = sys
        .spaces
        .iter()
        .filter(|s| s.kind == SpaceKind::Kernel)
        .map(|s| s.id)
        .collect();
    let process: Vec<usize> = sys
        .spaces
        .iter()
        .filter(|s| s.kind == SpaceKind::Process)
        .map(|s| s.id)
        .collect();
    // `ind >= A - B` for each (A, B) pair; an absent side is 0.
    let mut indicator = |coef: f64,
                         pairs: Vec<(Option<Expression>, Option<Expression>)>,
                         objective: &mut Expression| {
        let pairs: Vec<_> = pairs.into_iter().filter(|(a, _)| a.is_some()).collect();
        if coef <= 0.0 || pairs.is_empty() {
            return;
        }
        nvars += 1;
        let v = vars.add(variable().min(0.0).max(1.0));
        *objective += coef * v;
        let mut rhss = Vec::with_capacity(pairs.len());
        for (a, b) in pairs {
            let rhs = a.unwrap_or_default() - b.unwrap_or_default();
            rhss.push(rhs.clone());
            cons.push(constraint!(v >= rhs));
        }
        inds.push((v, rhss));
    };
    for st in &req.streams {
        let (i, j) = (st.from, st.to);
        objective += st.rate * c.call + st.bytes * c.load_same_cpu;
        let differ: Vec<_> = (0..ns)
            .map(|s| (xs[i][s].clone(), xs[j][s].clone()))
            .collect();
        indicator(st.rate * (c.ring - c.call), differ, &mut objective);
        for (delta, groups) in &ladder {
            if groups.len() < 2 {
                continue;
            }
            let pairs = groups
                .iter()
                .map(|g| (group_expr(i, g), group_expr(j, g)))
                .collect();
            indicator(st.bytes * delta, pairs, &mut objective);
        }
        let (ki, kj) = (group_expr(i, &kernel), group_expr(j, &kernel));
        let ui = group_expr(
            i,
            &(0..ns).filter(|s| !kernel.contains(s)).collect::<Vec<_>>(),
        );
        let uj = group_expr(
            j,
            &(0..ns).filter(|s| !kernel.contains(s)).collect::<Vec<_>>(),
        );
        let cross = |rate_cost: f64| st.rate * rate_cost + st.bytes * c.boundary_copy_byte;
        if ki.is_some() && uj.is_some() {
            indicator(
                cross(c.kernel_to_user),
                vec![(ki.clone(), kj.clone())],
                &mut objective,
            );
        }
        if kj.is_some() && ui.is_some() {
            indicator(cross(c.user_to_kernel), vec![(kj, ki)], &mut objective);
        }
        if !process.is_empty() {
            let mut pairs = Vec::new();
            for &p in &process {
                pairs.push((xs[i][p].clone(), xs[j][p].clone()));
                pairs.push((xs[j][p].clone(), xs[i][p].clone()));
            }
            indicator(st.rate * c.process, pairs, &mut objective);
        }
    }
    // Two hosts: a stream whose ends are on different hosts pays the link's per-block
    // and per-byte cycles, and the bytes of all such streams fit the link's bandwidth.
    if let (Some(l), true) = (&sys.link, sys.hosts.len() == 2) {
        let on_a: Vec<usize> = sys
            .spaces
            .iter()
            .filter(|s| sys.host_of(s.cpu) == 0)
            .map(|s| s.id)
            .collect();
        let mut carried = Expression::default();
        let mut any = false;
        for st in &req.streams {
            let (ai, aj) = (group_expr(st.from, &on_a), group_expr(st.to, &on_a));
            if ai.is_none() && aj.is_none() {
                continue;
            }
            nvars += 1;
            let v = vars.add(variable().min(0.0).max(1.0));
            let (ai, aj) = (ai.unwrap_or_default(), aj.unwrap_or_default());
            let rhss = vec![ai.clone() - aj.clone(), aj - ai];
            for r in &rhss {
                cons.push(constraint!(v >= r.clone()));
            }
            inds.push((v, rhss));
            objective += (st.rate * l.per_block + st.bytes * l.per_byte) * v;
            carried += st.bytes * v;
            any = true;
        }
        if any {
            cons.push(constraint!(carried <= l.bandwidth));
        }
    }
    // Per-CPU capacity, only where the options could exceed it.
    for &cpu in &sys.cpus {
        let mut e = Expression::default();
        let mut worst = 0.0;
        for i in 0..n {
            let mut most: f64 = 0.0;
            for (k, ch) in opts[i].iter().enumerate() {
                if sys.spaces[ch.space].cpu == cpu {
                    let cy = req.node_cycles(i, ch.imp);
                    e += cy * x[i][k];
                    most = most.max(cy);
                }
            }
            worst += most;
        }
        if worst > sys.cycles_per_sec {
            cons.push(constraint!(e <= sys.cycles_per_sec));
        }
    }
    // @single: all such filters in one space.
    let singles: Vec<usize> = (0..n).filter(|&i| req.nodes[i].single).collect();
    for w in singles.windows(2) {
        for (a, b) in xs[w[0]].iter().zip(&xs[w[1]]) {
            let (a, b) = (a.clone(), b.clone());
            if a.is_none() && b.is_none() {
                continue;
            }
            let e = a.unwrap_or_default() - b.unwrap_or_default();
            cons.push(constraint!(e == 0));
        }
    }
    let nconstraints = cons.len();
    let mut problem = vars.minimise(objective).using(good_lp::highs);
    problem.set_verbose(false);
    let problem = problem
        .set_time_limit(time_limit)
        .set_mip_rel_gap(0.0)
        .map_err(|e| PlanError::Solver(e.to_string()))?;
    // Feasibility jump, HiGHS' first primal heuristic, costs ~8 ms per solve on these
    // models whatever their size (measured with `streamline-bench solver`); the search
    // finds feasible placements quickly without it.
    let mut problem = problem
        .set_option("mip_heuristic_run_feasibility_jump", false)
        .with_all(cons);
    // Warm start from the heuristic's placement (thesis 7.4: a solver handed a feasible
    // solution skips the search for one). Measured: 20 filters on 64 spaces 68-81 ms
    // with it, 97-101 ms without.
    if let Ok((warm, _)) = push_down(req, sys) {
        let mut start: HashMap<Variable, f64> = HashMap::new();
        for i in 0..n {
            for (k, o) in opts[i].iter().enumerate() {
                start.insert(x[i][k], if *o == warm[i] { 1.0 } else { 0.0 });
            }
        }
        let mut all: Vec<(Variable, f64)> = start.iter().map(|(v, val)| (*v, *val)).collect();
        for (v, rhss) in &inds {
            let val = rhss
                .iter()
                .map(|e| e.eval_with(&start))
                .fold(0.0, f64::max)
                .min(1.0);
            all.push((*v, val));
        }
        problem = problem.with_initial_solution(all);
    }
    let solution = match problem.solve() {
        Ok(s) => s,
        Err(ResolutionError::Infeasible) => {
            return Err(PlanError::Infeasible(why_infeasible(req, sys)))
        }
        Err(e) => return Err(PlanError::Solver(e.to_string())),
    };
    let mut choice = Vec::with_capacity(n);
    for i in 0..n {
        let k = (0..opts[i].len())
            .max_by(|&a, &b| solution.value(x[i][a]).total_cmp(&solution.value(x[i][b])))
            .expect("every filter has an option");
        choice.push(opts[i][k]);
    }
    let stats = SolverStats {
        method: "ilp (HiGHS)",
        variables: nvars,
        constraints: nconstraints,
        solve_time: start.elapsed(),
        alternative: "as written".into(),
    };
    Ok((choice, stats))
}

/// The optimizer with its fallback: the ILP, or the heuristic if the solver fails for a
/// reason other than infeasibility (which no algorithm can fix).
pub fn best(req: &Request, sys: &SystemModel) -> Result<(Vec<Choice>, SolverStats), PlanError> {
    let result = ilp(req, sys, 10.0).and_then(|(c, st)| {
        // A search stopped by the time limit may hand back an incomplete solution.
        if !evaluate(req, sys, &c).fits(sys) {
            Err(PlanError::Solver(
                "time limit reached before a feasible solution".into(),
            ))
        } else {
            Ok((c, st))
        }
    });
    match result {
        Err(PlanError::Solver(why)) => {
            let (c, mut st) = push_down(req, sys)?;
            st.alternative = format!("fallback, solver failed: {why}");
            Ok((c, st))
        }
        other => other,
    }
}

/// Total cost of a choice (a convenience for tests and the comparison).
pub fn cost(req: &Request, sys: &SystemModel, choice: &[Choice]) -> f64 {
    evaluate(req, sys, choice).total
}
