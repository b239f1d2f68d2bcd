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
    let mut m = Milp::new(req, sys)?;
    m.streams();
    m.link();
    m.cpu_capacity();
    m.singles();
    m.solve(time_limit, start)
}

/// The integer program as it is built: a binary `x[i][k]` per filter `i` and option `k`
/// (exactly one chosen), indicator variables for the costs a stream pays when its ends
/// are apart (a ring instead of a call, each rung of the cache ladder, the kernel
/// boundary, a process boundary, the link between hosts), and the capacity constraints.
/// Variables and constraints are added in a fixed order (the solver's tie-breaks follow
/// it).
struct Milp<'a> {
    req: &'a Request,
    sys: &'a SystemModel,
    opts: Vec<Vec<Choice>>,
    vars: good_lp::ProblemVariables,
    nvars: usize,
    cons: Vec<good_lp::Constraint>,
    /// Each indicator with the right-hand sides it bounds, to compute a warm start.
    inds: Vec<(Variable, Vec<Expression>)>,
    /// x[i][k] for opts[i][k].
    x: Vec<Vec<Variable>>,
    /// X[i][s]: expression of i's options in space s (None if no option there).
    xs: Vec<Vec<Option<Expression>>>,
    objective: Expression,
}

impl<'a> Milp<'a> {
    /// The choice variables, one option per filter, and the filters' own cycles.
    fn new(req: &'a Request, sys: &'a SystemModel) -> Result<Milp<'a>, PlanError> {
        let opts = options(req, sys)?;
        let n = req.nodes.len();
        let ns = sys.spaces.len();
        let mut vars = variables!();
        let mut nvars = 0usize;
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
        let mut xs: Vec<Vec<Option<Expression>>> = vec![vec![None; ns]; n];
        for i in 0..n {
            for (k, c) in opts[i].iter().enumerate() {
                let e = xs[i][c.space].get_or_insert_with(Expression::default);
                *e += x[i][k];
            }
        }
        let mut objective = Expression::default();
        let mut cons = Vec::new();
        for i in 0..n {
            let mut one = Expression::default();
            for (k, c) in opts[i].iter().enumerate() {
                one += x[i][k];
                objective += (req.node_cycles(i, c.imp) + tie_break(sys, c.space)) * x[i][k];
            }
            cons.push(constraint!(one == 1));
        }
        Ok(Milp {
            req,
            sys,
            opts,
            vars,
            nvars,
            cons,
            inds: Vec::new(),
            x,
            xs,
            objective,
        })
    }

    /// The sum of filter `i`'s options in the spaces of `group`, if it has any there.
    fn group_expr(&self, i: usize, group: &[usize]) -> Option<Expression> {
        let mut e: Option<Expression> = None;
        for &s in group {
            if let Some(v) = &self.xs[i][s] {
                *e.get_or_insert_with(Expression::default) += v.clone();
            }
        }
        e
    }

    /// An indicator `ind >= A - B` for each (A, B) pair (an absent side is 0), costing
    /// `coef` when set.
    fn indicator(&mut self, coef: f64, pairs: Vec<(Option<Expression>, Option<Expression>)>) {
        let pairs: Vec<_> = pairs.into_iter().filter(|(a, _)| a.is_some()).collect();
        if coef <= 0.0 || pairs.is_empty() {
            return;
        }
        self.nvars += 1;
        let v = self.vars.add(variable().min(0.0).max(1.0));
        self.objective += coef * v;
        let mut rhss = Vec::with_capacity(pairs.len());
        for (a, b) in pairs {
            let rhs = a.unwrap_or_default() - b.unwrap_or_default();
            rhss.push(rhs.clone());
            self.cons.push(constraint!(v >= rhs));
        }
        self.inds.push((v, rhss));
    }

    /// The spaces of `kind`.
    fn spaces(&self, kind: SpaceKind) -> Vec<usize> {
        self.sys
            .spaces
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.id)
            .collect()
    }

    /// The distance ladder's rungs: each extra cost per byte with the partition of the
    /// spaces it separates (by CPU, L2, LLC, NUMA).
    fn ladder(&self) -> Vec<(f64, Vec<Vec<usize>>)> {
        let (sys, c) = (self.sys, &self.sys.costs);
        let parts = sys.cpu_partitions();
        let spaces_of = |cpus: &[usize]| -> Vec<usize> {
            sys.spaces
                .iter()
                .filter(|s| cpus.contains(&s.cpu))
                .map(|s| s.id)
                .collect()
        };
        let by_cpu: Vec<Vec<usize>> = sys.cpus.iter().map(|&cpu| spaces_of(&[cpu])).collect();
        vec![
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
        ]
    }

    /// What each stream costs: a call, or a ring when its ends are in different spaces,
    /// plus each rung of the ladder its ends are apart, the kernel boundary either way and
    /// a process boundary.
    fn streams(&mut self) {
        let (req, c) = (self.req, &self.sys.costs);
        let ns = self.sys.spaces.len();
        let ladder = self.ladder();
        let kernel = self.spaces(SpaceKind::Kernel);
        let process = self.spaces(SpaceKind::Process);
        let user: Vec<usize> = (0..ns).filter(|s| !kernel.contains(s)).collect();
        for st in &req.streams {
            let (i, j) = (st.from, st.to);
            self.objective += st.rate * c.call + st.bytes * c.load_same_cpu;
            let differ: Vec<_> = (0..ns)
                .map(|s| (self.xs[i][s].clone(), self.xs[j][s].clone()))
                .collect();
            self.indicator(st.rate * (c.ring - c.call), differ);
            for (delta, groups) in &ladder {
                if groups.len() < 2 {
                    continue;
                }
                let pairs = groups
                    .iter()
                    .map(|g| (self.group_expr(i, g), self.group_expr(j, g)))
                    .collect();
                self.indicator(st.bytes * delta, pairs);
            }
            let (ki, kj) = (self.group_expr(i, &kernel), self.group_expr(j, &kernel));
            let (ui, uj) = (self.group_expr(i, &user), self.group_expr(j, &user));
            let cross = |rate_cost: f64| st.rate * rate_cost + st.bytes * c.boundary_copy_byte;
            if ki.is_some() && uj.is_some() {
                self.indicator(cross(c.kernel_to_user), vec![(ki.clone(), kj.clone())]);
            }
            if kj.is_some() && ui.is_some() {
                self.indicator(cross(c.user_to_kernel), vec![(kj, ki)]);
            }
            if !process.is_empty() {
                let mut pairs = Vec::new();
                for &p in &process {
                    pairs.push((self.xs[i][p].clone(), self.xs[j][p].clone()));
                    pairs.push((self.xs[j][p].clone(), self.xs[i][p].clone()));
                }
                self.indicator(st.rate * c.process, pairs);
            }
        }
    }

    /// Two hosts: a stream whose ends are on different hosts pays the link's per-block
    /// and per-byte cycles, and the bytes of all such streams fit the link's bandwidth.
    fn link(&mut self) {
        let sys = self.sys;
        let (Some(l), true) = (&sys.link, sys.hosts.len() == 2) else {
            return;
        };
        let on_a: Vec<usize> = sys
            .spaces
            .iter()
            .filter(|s| sys.host_of(s.cpu) == 0)
            .map(|s| s.id)
            .collect();
        let mut carried = Expression::default();
        let mut any = false;
        for st in &self.req.streams {
            let (ai, aj) = (
                self.group_expr(st.from, &on_a),
                self.group_expr(st.to, &on_a),
            );
            if ai.is_none() && aj.is_none() {
                continue;
            }
            self.nvars += 1;
            let v = self.vars.add(variable().min(0.0).max(1.0));
            let (ai, aj) = (ai.unwrap_or_default(), aj.unwrap_or_default());
            let rhss = vec![ai.clone() - aj.clone(), aj - ai];
            for r in &rhss {
                self.cons.push(constraint!(v >= r.clone()));
            }
            self.inds.push((v, rhss));
            self.objective += (st.rate * l.per_block + st.bytes * l.per_byte) * v;
            carried += st.bytes * v;
            any = true;
        }
        if any {
            self.cons.push(constraint!(carried <= l.bandwidth));
        }
    }

    /// Per-CPU capacity, only where the options could exceed it.
    fn cpu_capacity(&mut self) {
        let (req, sys) = (self.req, self.sys);
        for &cpu in &sys.cpus {
            let mut e = Expression::default();
            let mut worst = 0.0;
            for i in 0..req.nodes.len() {
                let mut most: f64 = 0.0;
                for (k, ch) in self.opts[i].iter().enumerate() {
                    if sys.spaces[ch.space].cpu == cpu {
                        let cy = req.node_cycles(i, ch.imp);
                        e += cy * self.x[i][k];
                        most = most.max(cy);
                    }
                }
                worst += most;
            }
            if worst > sys.cycles_per_sec {
                self.cons.push(constraint!(e <= sys.cycles_per_sec));
            }
        }
    }

    /// `@single`: all such filters in one space.
    fn singles(&mut self) {
        let singles: Vec<usize> = (0..self.req.nodes.len())
            .filter(|&i| self.req.nodes[i].single)
            .collect();
        for w in singles.windows(2) {
            for (a, b) in self.xs[w[0]].iter().zip(&self.xs[w[1]]) {
                let (a, b) = (a.clone(), b.clone());
                if a.is_none() && b.is_none() {
                    continue;
                }
                let e = a.unwrap_or_default() - b.unwrap_or_default();
                self.cons.push(constraint!(e == 0));
            }
        }
    }

    /// The heuristic's placement as the solver's starting point, indicators included
    /// (thesis 7.4: a solver handed a feasible solution skips the search for one).
    /// Measured: 20 filters on 64 spaces 68-81 ms with it, 97-101 ms without.
    fn warm_start(&self) -> Option<Vec<(Variable, f64)>> {
        let (warm, _) = push_down(self.req, self.sys).ok()?;
        let mut start: HashMap<Variable, f64> = HashMap::new();
        for (i, opts) in self.opts.iter().enumerate() {
            for (k, o) in opts.iter().enumerate() {
                start.insert(self.x[i][k], if *o == warm[i] { 1.0 } else { 0.0 });
            }
        }
        let mut all: Vec<(Variable, f64)> = start.iter().map(|(v, val)| (*v, *val)).collect();
        for (v, rhss) in &self.inds {
            let val = rhss
                .iter()
                .map(|e| e.eval_with(&start))
                .fold(0.0, f64::max)
                .min(1.0);
            all.push((*v, val));
        }
        Some(all)
    }

    /// Solve with HiGHS within `time_limit` seconds: each filter's chosen option.
    fn solve(
        self,
        time_limit: f64,
        start: Instant,
    ) -> Result<(Vec<Choice>, SolverStats), PlanError> {
        let warm = self.warm_start();
        let (req, sys) = (self.req, self.sys);
        let nconstraints = self.cons.len();
        let mut problem = self.vars.minimise(self.objective).using(good_lp::highs);
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
            .with_all(self.cons);
        if let Some(all) = warm {
            problem = problem.with_initial_solution(all);
        }
        let solution = match problem.solve() {
            Ok(s) => s,
            Err(ResolutionError::Infeasible) => {
                return Err(PlanError::Infeasible(why_infeasible(req, sys)))
            }
            Err(e) => return Err(PlanError::Solver(e.to_string())),
        };
        let mut choice = Vec::with_capacity(self.opts.len());
        for (i, opts) in self.opts.iter().enumerate() {
            let k = (0..opts.len())
                .max_by(|&a, &b| {
                    solution
                        .value(self.x[i][a])
                        .total_cmp(&solution.value(self.x[i][b]))
                })
                .expect("every filter has an option");
            choice.push(opts[k]);
        }
        let stats = SolverStats {
            method: "ilp (HiGHS)",
            variables: self.nvars,
            constraints: nconstraints,
            solve_time: start.elapsed(),
            alternative: "as written".into(),
        };
        Ok((choice, stats))
    }
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
