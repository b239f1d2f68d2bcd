//! From a [`Plan`] to what the runtime understands: per filter of the request *as the user
//! wrote it*, the runtime's space name (`local`, `tN` a thread pinned to CPU N mod the CPU
//! count, `pN` a process space, or a list of them for data-parallel copies: typed
//! [`lang::SpaceName`]s) and, for filters with a kernel and a user implementation, which
//! one ([`lang::Side`], `placed=` in the text form).
//!
//! An [`Assignment`] is plain data (it prints as one line and parses back, for tests and
//! messages), applied once per run with [`Assignment::apply`] by the run's plan
//! (`runplan`); process spaces receive the placed graph, not the assignment. A request where the user placed filters in the
//! runtime's own terms (`space=local|N|tN|pN|A,B`, `@private`, `@background`) runs as
//! written ([`user_placed`]); pins in the planner's terms (`space=kernel|thread|cpuN`)
//! are honoured by the plan and translated.
//!
//! Space numbering: the space of the first node in user space (the first source, or what
//! follows a kernel source such as `rx`), if it is a thread space, is `local`, the thread that calls the runtime; a thread space on
//! the system's k-th CPU is `t{n+k}` and a process space there `p{2n+k}` (n CPUs), so ids
//! never collide and each pins to the CPU the plan chose.

use std::collections::BTreeMap;
use std::fmt;

use lang::{Graph, Hint, NodeKind, Side, SpaceName, SpaceSpec};

use crate::library::Filters;
use crate::plan::Plan;
use crate::system::{SpaceKind, SystemModel};

/// Per graph node: what the plan decides for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    pub set: BTreeMap<usize, NodePlace>,
}

/// One node's decisions in an [`Assignment`]: its runtime space(s) and, for a filter with
/// a kernel and a user implementation, its side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePlace {
    pub space: Option<SpaceChange>,
    pub side: Option<Side>,
}

/// What an assignment does to a node's space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpaceChange {
    /// Run in these runtime spaces (one name, or a list for data-parallel copies).
    Set(Vec<SpaceName>),
    /// Drop the user's pin in the planner's terms (`space=kernel`): not a runtime name.
    Clear,
}

impl NodePlace {
    fn is_empty(&self) -> bool {
        self.space.is_none() && self.side.is_none()
    }

    /// `space=V`, `space=` (cleared), `placed=user`, joined by `sep`.
    fn words(&self, sep: &str) -> String {
        let mut w = Vec::new();
        match &self.space {
            Some(SpaceChange::Set(v)) => w.push(format!("space={}", SpaceSpec::Runtime(v.clone()))),
            Some(SpaceChange::Clear) => w.push("space=".to_string()),
            None => {}
        }
        if let Some(side) = &self.side {
            w.push(format!("placed={side}"));
        }
        w.join(sep)
    }
}

/// As the plan's line describes it: `space=t2,t3 placed=user`.
impl fmt::Display for NodePlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.words(" "))
    }
}

/// Did the user place any filter in the runtime's own terms (`space=local|N|tN|pN|A,B`,
/// `@private`, `@background`)? Then the user has taken placement over and the request
/// runs as written: the planner knows such pins by kind only, not which space they name,
/// so mixing its choices with them would guess at identities. Pins in the planner's terms
/// (`space=kernel|thread|process|user|cpuN`) are choices the plan works around instead.
pub fn user_placed(g: &Graph) -> bool {
    g.nodes.iter().any(|n| match &n.kind {
        NodeKind::Filter { place, .. } => {
            n.hints
                .iter()
                .any(|h| matches!(h, Hint::Private | Hint::Background))
                || place.space.as_ref().is_some_and(|s| s.runtime().is_some())
        }
        _ => false,
    })
}

impl Assignment {
    /// The runtime placement of `plan`, made for `planned` (the request graph the planner
    /// solved: `original` itself, or `original` with `template = (node, ways)` applied by
    /// [`lang::parallelize`], whose copies 1.. are appended after the split). `filters`
    /// says which filters have a kernel form right after `rx`.
    pub fn from_plan(
        original: &Graph,
        plan: &Plan,
        sys: &SystemModel,
        filters: &Filters,
        template: Option<(usize, usize)>,
    ) -> Assignment {
        if user_placed(original) {
            return Assignment::default();
        }
        let ncpu = sys.cpus.len().max(1);
        let cpu_index = |cpu: usize| sys.cpus.iter().position(|&c| c == cpu).unwrap_or(0);
        let kind_of = |i: usize| plan.nodes.get(i).map(|n| n.space_kind);
        // Home: the first user-space node from the first source on (a kernel source
        // such as `rx` and the filters placed with it in the kernel are skipped).
        let home = topo(original)
            .into_iter()
            .filter_map(|i| plan.nodes.get(i))
            .find(|n| n.space_kind != SpaceKind::Kernel)
            .filter(|n| n.space_kind == SpaceKind::Thread)
            .map(|n| n.space);
        let home_cpu = home.map_or(0, |h| cpu_index(sys.spaces[h].cpu));
        // The runtime runs `local` on CPU 0 (pinned while worker spaces run beside it),
        // and space N on CPU N mod the CPU count. The plan's CPUs are interchangeable, so
        // its home CPU and CPU 0 swap places: the home's neighbours then get CPUs of
        // their own instead of sharing CPU 0 with it.
        let phys = |c: usize| match c {
            c if c == home_cpu => 0,
            0 => home_cpu,
            c => c,
        };
        let sp = |i: usize| -> Option<Sp> {
            let n = plan.nodes.get(i)?;
            match n.space_kind {
                SpaceKind::Kernel => None,
                _ if Some(n.space) == home => Some(Sp::Local),
                SpaceKind::Thread => Some(Sp::Thread(phys(cpu_index(n.cpu)), 0)),
                SpaceKind::Process => Some(Sp::Process(phys(cpu_index(n.cpu)), 0)),
            }
        };
        // The plan's space per node of the request as written (copies for the template).
        let planned: Vec<Vec<Sp>> = original
            .nodes
            .iter()
            .map(|node| match template {
                Some((t, ways)) if t == node.id => {
                    let base = original.nodes.len();
                    std::iter::once(node.id)
                        .chain(base + 1..base + ways)
                        .map(|c| sp(c).unwrap_or(Sp::Local))
                        .collect()
                }
                _ => sp(node.id).into_iter().collect(),
            })
            .collect();
        let planned = keep_sections_together(original, planned);
        let placed = Repair::new(ncpu, 0).run(original, &planned);
        let mut set: BTreeMap<usize, NodePlace> = BTreeMap::new();
        for node in &original.nodes {
            let NodeKind::Filter { filter, place, .. } = &node.kind else {
                continue;
            };
            let i = node.id;
            let mut np = NodePlace::default();
            match &placed[i] {
                Some(list) => {
                    np.space = Some(SpaceChange::Set(
                        list.iter().map(|s| s.name(ncpu)).collect(),
                    ))
                }
                // Kernel: the runtime realizes it next to the kernel source; a planner
                // pin such as `space=kernel` is not a runtime name, so it goes.
                None if place.space.is_some() => np.space = Some(SpaceChange::Clear),
                None => {}
            }
            if filters.runs_after_rx_in_kernel(filter) && place.side.is_none() {
                // Only a kernel choice right after the capture source is realizable; the
                // filter's own default does exactly that, so only `user` needs saying.
                if kind_of(i).is_some_and(|k| k != SpaceKind::Kernel) {
                    np.side = Some(Side::User);
                }
            }
            if !np.is_empty() {
                set.insert(i, np);
            }
        }
        // Everything at home and nothing else to say: the graph runs as written.
        let planner_pins = original.nodes.iter().any(|n| match &n.kind {
            NodeKind::Filter { place, .. } => place.space.is_some(),
            _ => false,
        });
        if !planner_pins
            && set.values().all(|p| {
                p.side.is_none() && p.space == Some(SpaceChange::Set(vec![SpaceName::Local]))
            })
        {
            set.clear();
        }
        Assignment { set }
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// `graph` with the assignment's decisions set (a space replaces the node's `space=`,
    /// a cleared one removes it; a side replaces the node's side).
    pub fn apply(&self, g: &Graph) -> Result<Graph, String> {
        let mut g = g.clone();
        for (&id, np) in &self.set {
            let node = g.nodes.get_mut(id).ok_or_else(|| {
                format!("plan names node {id}; the pipeline has {}", self.set.len())
            })?;
            let NodeKind::Filter { place, .. } = &mut node.kind else {
                return Err(format!(
                    "plan places node {id}, which is not a native filter"
                ));
            };
            match &np.space {
                Some(SpaceChange::Set(v)) => place.space = Some(SpaceSpec::Runtime(v.clone())),
                Some(SpaceChange::Clear) => place.space = None,
                None => {}
            }
            if let Some(side) = &np.side {
                place.side = Some(side.clone());
            }
        }
        Ok(g)
    }

    /// Parses [`Assignment`]'s `Display` form: `ID:KEY=VALUE[;KEY=VALUE]` entries separated
    /// by spaces, KEY `space` (a runtime space name or list; empty: cleared) or `placed`
    /// (user or kernel); values contain no spaces or semicolons.
    pub fn parse(text: &str) -> Result<Assignment, String> {
        let mut set = BTreeMap::new();
        for entry in text.split_whitespace() {
            let (id, rest) = entry
                .split_once(':')
                .ok_or_else(|| format!("'{entry}': expected ID:KEY=VALUE"))?;
            let id: usize = id
                .parse()
                .map_err(|_| format!("'{entry}': '{id}' is not a node number"))?;
            let mut np = NodePlace::default();
            for kv in rest.split(';') {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("'{entry}': '{kv}' is not KEY=VALUE"))?;
                match k {
                    lang::place::SPACE if v.is_empty() => np.space = Some(SpaceChange::Clear),
                    lang::place::SPACE => {
                        match SpaceSpec::parse(v).map_err(|e| format!("'{entry}': {e}"))? {
                            SpaceSpec::Runtime(list) => np.space = Some(SpaceChange::Set(list)),
                            p => {
                                return Err(format!(
                                "'{entry}': space={p} is the planner's term, not a runtime space"
                            ))
                            }
                        }
                    }
                    lang::resolve::PLACED => {
                        np.side = Some(Side::parse(v).map_err(|e| format!("'{entry}': {e}"))?)
                    }
                    "" => return Err(format!("'{entry}': empty key")),
                    _ => return Err(format!("'{entry}': unknown key '{k}' (space or placed)")),
                }
            }
            set.insert(id, np);
        }
        Ok(Assignment { set })
    }
}

/// A runtime space: the calling thread, or the `inst`-th thread / process space on the
/// system's k-th CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Sp {
    Local,
    Thread(usize, usize),
    Process(usize, usize),
}

impl Sp {
    fn name(self, n: usize) -> SpaceName {
        match self {
            Sp::Local => SpaceName::Local,
            Sp::Thread(k, inst) => SpaceName::Thread(n * (1 + 2 * inst) + k),
            Sp::Process(k, inst) => SpaceName::Process(n * (2 + 2 * inst) + k),
        }
    }
}

/// The runtime runs a join's parallel branches in one space with their fork and join
/// ([`dataplane::spaces::check_joins`]: copies of one block reaching a join from two
/// spaces would arrive at times that depend on timing), and the cost model does not see
/// that rule: a plan that spreads a section's branches is brought back to the space of
/// its fork (the first fork the plan placed, else the first placed node upstream; home
/// when there is none). The sections are the runtime's own definition
/// ([`dataplane::spaces::parallel_sections`]).
fn keep_sections_together(g: &Graph, mut planned: Vec<Vec<Sp>>) -> Vec<Vec<Sp>> {
    for s in dataplane::spaces::parallel_sections(g) {
        let upstream = |n: usize| -> Option<Sp> {
            let mut todo = vec![n];
            let mut seen = vec![false; g.nodes.len()];
            while let Some(x) = todo.pop() {
                if std::mem::replace(&mut seen[x], true) {
                    continue;
                }
                if let Some(&sp) = planned[x].first() {
                    return Some(sp);
                }
                todo.extend(g.in_edges(x).map(|e| e.from));
            }
            None
        };
        let target = s
            .forks
            .iter()
            .find_map(|&f| upstream(f))
            .unwrap_or(Sp::Local);
        for &b in &s.branches {
            if !planned[b].is_empty() {
                planned[b] = vec![target];
            }
        }
    }
    planned
}

/// The runtime refuses spaces that feed each other (a loop between spaces could deadlock
/// on full channels), but a plan may well come back to a space it left (cpu0, cpu1,
/// cpu0). This pass walks the graph in order and gives a node that would return to a
/// space its inputs already left a fresh space on the same CPU, so the plan's CPU choices
/// hold and the space graph stays acyclic. It follows the runtime's rules for what it does
/// not place: splits, joins, Unix commands and kernel-placed filters run where their first
/// upstream runs; a data-parallel node's join runs with its first copy.
struct Repair {
    ncpu: usize,
    home_cpu: usize,
    next_inst: std::collections::HashMap<(bool, usize), usize>,
    current: std::collections::HashMap<Sp, Sp>,
}

impl Repair {
    fn new(ncpu: usize, home_cpu: usize) -> Repair {
        Repair {
            ncpu,
            home_cpu,
            next_inst: Default::default(),
            current: Default::default(),
        }
    }

    fn fresh(&mut self, s: Sp) -> Sp {
        let (process, k) = match s {
            Sp::Local => (false, self.home_cpu),
            Sp::Thread(k, _) => (false, k),
            Sp::Process(k, _) => (true, k),
        };
        let inst = self.next_inst.entry((process, k)).or_insert(1);
        let f = if process {
            Sp::Process(k, *inst)
        } else {
            Sp::Thread(k, *inst)
        };
        *inst += 1;
        f
    }

    /// Per node: its spaces (copies for a data-parallel node), or None where the plan
    /// says nothing (kernel) or the node is not a native filter.
    fn run(mut self, g: &Graph, planned: &[Vec<Sp>]) -> Vec<Option<Vec<Sp>>> {
        let n = g.nodes.len();
        let _ = self.ncpu;
        let mut out: Vec<Option<Vec<Sp>>> = vec![None; n];
        let mut space: Vec<Option<Sp>> = vec![None; n];
        let mut left: Vec<std::collections::HashSet<Sp>> = vec![Default::default(); n];
        for v in topo(g) {
            let preds: Vec<usize> = g.in_edges(v).map(|e| e.from).collect();
            let first = preds.iter().find_map(|&p| space[p]);
            let mut copies: Vec<Sp> = if planned[v].is_empty() {
                vec![first.unwrap_or(Sp::Local)]
            } else {
                planned[v]
                    .iter()
                    .map(|s| *self.current.get(s).unwrap_or(s))
                    .collect()
            };
            // Spaces some input has already left: coming back to one would close a loop.
            let mut exited: std::collections::HashSet<Sp> = Default::default();
            for &p in &preds {
                exited.extend(left[p].iter().copied());
            }
            let ours = !planned[v].is_empty();
            if ours {
                let single = copies.len() == 1;
                for c in copies.iter_mut() {
                    if exited.contains(c) {
                        // A single filter that cannot go back to its planned space runs
                        // with its input (no new channel, no extra thread competing for
                        // the CPU); copies of a template need spaces of their own.
                        if let Some(f) = first.filter(|f| single && !exited.contains(f)) {
                            *c = f;
                            continue;
                        }
                        let f = self.fresh(*c);
                        self.current.insert(*c, f);
                        *c = f;
                    }
                }
                // Copies: the split runs with the first input, the join with the first
                // copy; a first copy off the split's space keeps split -> copy -> join
                // from coming back.
                let split = first.unwrap_or(Sp::Local);
                if let Some(j) = copies.iter().position(|s| *s != split) {
                    copies.swap(0, j);
                }
                out[v] = Some(copies.clone());
            }
            for &p in &preds {
                exited.extend(space[p]);
            }
            if copies.len() > 1 {
                exited.extend(first);
                exited.extend(copies.iter().skip(1).copied());
            }
            exited.remove(&copies[0]);
            space[v] = Some(copies[0]);
            left[v] = exited;
        }
        out
    }
}

/// Node ids in a topological order (ids break ties; nodes on a cycle come last).
fn topo(g: &Graph) -> Vec<usize> {
    let n = g.nodes.len();
    let mut indeg = vec![0usize; n];
    for e in &g.edges {
        indeg[e.to] += 1;
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(&v) = ready.iter().next() {
        ready.remove(&v);
        order.push(v);
        for e in g.edges.iter().filter(|e| e.from == v) {
            indeg[e.to] -= 1;
            if indeg[e.to] == 0 {
                ready.insert(e.to);
            }
        }
    }
    for v in 0..n {
        if !order.contains(&v) {
            order.push(v);
        }
    }
    order
}

impl fmt::Display for Assignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (id, np) in &self.set {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{id}:{}", np.words(";"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::native;
    use crate::model::PlanResolver;
    use crate::planner::{Method, Planner};

    fn sys2() -> SystemModel {
        let caps = crate::system::Capabilities {
            bpf: true,
            af_packet: true,
            ..Default::default()
        };
        SystemModel::homogeneous(
            2,
            &[SpaceKind::Kernel, SpaceKind::Thread, SpaceKind::Process],
            caps,
        )
    }

    fn plan_of(text: &str, planner: &Planner) -> (Graph, crate::Planned) {
        let g = lang::parse(text, &PlanResolver(&native())).unwrap();
        let p = planner.plan_graph(&g, Method::Optimal).unwrap();
        (g, p)
    }

    #[test]
    fn light_pipeline_runs_as_written() {
        let planner = Planner::new(sys2(), native());
        let (g, p) = plan_of("pcapin x.pcap | tcp | count", &planner);
        let a = Assignment::from_plan(
            &g,
            &p.plan,
            &planner.sys,
            planner.catalog.filters(),
            p.template,
        );
        assert!(a.is_empty(), "{a}");
        assert_eq!(a.apply(&g).unwrap(), g);
    }

    #[test]
    fn heavy_filter_is_spread_over_the_cpus() {
        let mut planner = Planner::new(sys2(), native());
        planner.load = crate::Load {
            blocks_per_sec: 100_000.0,
            bytes_per_block: 2500.0,
        };
        let (g, p) = plan_of("gen | deflate | count", &planner);
        let a = Assignment::from_plan(
            &g,
            &p.plan,
            &planner.sys,
            planner.catalog.filters(),
            p.template,
        );
        let Some(SpaceChange::Set(spaces)) = &a.set.get(&1).expect("deflate is placed").space
        else {
            panic!("{a}")
        };
        assert_eq!(spaces.len(), 2, "deflate on both CPUs: {a}");
        let back = Assignment::parse(&a.to_string()).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn user_placement_in_runtime_terms_runs_as_written_and_planner_pins_are_translated() {
        let planner = Planner::new(sys2(), native());
        for text in [
            "gen | tcp space=p3 | count",
            "gen | tcp | count @private",
            "gen | deflate space=1,2 | count",
        ] {
            let (g, p) = plan_of(text, &planner);
            assert!(
                Assignment::from_plan(
                    &g,
                    &p.plan,
                    &planner.sys,
                    planner.catalog.filters(),
                    p.template
                )
                .is_empty(),
                "{text}"
            );
        }
        let (g, p) = plan_of("gen | tcp | udp space=process | count", &planner);
        let a = Assignment::from_plan(
            &g,
            &p.plan,
            &planner.sys,
            planner.catalog.filters(),
            p.template,
        );
        let placed = a.apply(&g).unwrap();
        let NodeKind::Filter { place, .. } = &placed.nodes[2].kind else {
            panic!()
        };
        assert!(
            matches!(
                place.space.as_ref().and_then(SpaceSpec::runtime),
                Some([SpaceName::Process(_)])
            ),
            "'process' became a process space: {a}"
        );
    }

    /// Space-level edges of a repaired placement must form no cycle.
    fn acyclic(g: &Graph, placed: &[Option<Vec<Sp>>]) -> bool {
        let mut sp: Vec<Sp> = vec![Sp::Local; g.nodes.len()];
        for v in topo(g) {
            sp[v] = match &placed[v] {
                Some(c) => c[0],
                None => g.in_edges(v).next().map_or(Sp::Local, |e| sp[e.from]),
            };
        }
        let mut edges: Vec<(Sp, Sp)> = Vec::new();
        for (v, p) in placed.iter().enumerate() {
            if let Some(c) = p {
                for x in &c[1..] {
                    edges.push((*x, c[0]));
                    if let Some(e) = g.in_edges(v).next() {
                        edges.push((sp[e.from], *x));
                    }
                }
            }
        }
        edges.extend(g.edges.iter().map(|e| (sp[e.from], sp[e.to])));
        edges.retain(|(a, b)| a != b);
        // Repeatedly drop spaces with no incoming edge; a cycle survives.
        let mut nodes: std::collections::HashSet<Sp> =
            edges.iter().flat_map(|(a, b)| [*a, *b]).collect();
        loop {
            let free: Vec<Sp> = nodes
                .iter()
                .copied()
                .filter(|n| !edges.iter().any(|(_, b)| b == n))
                .collect();
            if free.is_empty() {
                return nodes.is_empty();
            }
            for f in free {
                nodes.remove(&f);
                edges.retain(|(a, _)| *a != f);
            }
        }
    }

    #[test]
    fn returning_to_a_space_runs_with_its_input() {
        let g = lang::parse("gen | tcp | udp | ip | count", &PlanResolver(&native())).unwrap();
        let t = |k| vec![Sp::Thread(k, 0)];
        let planned = vec![vec![Sp::Local], t(1), vec![Sp::Local], t(1), t(1)];
        let placed = Repair::new(2, 0).run(&g, &planned);
        assert!(acyclic(&g, &placed), "{placed:?}");
        assert_eq!(
            placed[2],
            Some(t(1)),
            "not back home: with tcp, no new channel"
        );
        assert_eq!(placed[3], Some(t(1)));
        assert_eq!(placed[4], Some(t(1)));
    }

    #[test]
    fn a_joins_parallel_branches_stay_with_their_fork() {
        // A plan that put one branch of `(tcp ++ udp)` on another CPU (cheap channels make
        // that look worthwhile to the cost model) is brought back to the fork's space: the
        // runtime refuses a section spread over spaces.
        let g = lang::parse(
            "pcapin x.pcap | (tcp ++ udp) | count",
            &PlanResolver(&native()),
        )
        .unwrap();
        let sections = dataplane::spaces::parallel_sections(&g);
        assert_eq!(sections.len(), 1, "{sections:?}");
        let id = |name: &str| {
            g.nodes
                .iter()
                .position(|n| matches!(&n.kind, NodeKind::Filter { filter, .. } if filter == name))
                .unwrap()
        };
        let mut planned = vec![Vec::new(); g.nodes.len()];
        planned[id("pcapin")] = vec![Sp::Local];
        planned[id("tcp")] = vec![Sp::Thread(1, 0)];
        planned[id("udp")] = vec![Sp::Local];
        planned[id("count")] = vec![Sp::Thread(1, 0)];
        let kept = keep_sections_together(&g, planned);
        assert_eq!(kept[id("tcp")], vec![Sp::Local]);
        assert_eq!(kept[id("udp")], vec![Sp::Local]);
        // After the join the plan still decides.
        assert_eq!(kept[id("count")], vec![Sp::Thread(1, 0)]);
        let placed = Repair::new(2, 0).run(&g, &kept);
        assert!(acyclic(&g, &placed), "{placed:?}");
    }

    #[test]
    fn a_filter_after_a_join_that_left_home_runs_with_the_join() {
        // The runtime runs a template's join with its first copy, which is off home; a
        // filter planned back home after it runs there too (was: a fresh thread on the
        // home CPU, one more channel and a thread competing with home).
        let g = lang::parse("gen | deflate | count", &PlanResolver(&native())).unwrap();
        let planned = vec![
            vec![Sp::Local],
            vec![Sp::Thread(1, 0), Sp::Local],
            vec![Sp::Local],
        ];
        let placed = Repair::new(2, 0).run(&g, &planned);
        assert!(acyclic(&g, &placed), "{placed:?}");
        assert_eq!(placed[2], Some(vec![Sp::Thread(1, 0)]), "{placed:?}");
    }

    #[test]
    fn copies_that_return_home_get_fresh_spaces() {
        let g = lang::parse("gen | tcp | deflate | count", &PlanResolver(&native())).unwrap();
        let planned = vec![
            vec![Sp::Local],
            vec![Sp::Thread(1, 0)],
            vec![Sp::Local, Sp::Thread(1, 0)],
            vec![Sp::Thread(1, 0)],
        ];
        let placed = Repair::new(2, 0).run(&g, &planned);
        assert!(acyclic(&g, &placed), "{placed:?}");
        assert!(
            placed[2].as_ref().unwrap().contains(&Sp::Thread(0, 1)),
            "the copy planned home gets a new thread on cpu0: {placed:?}"
        );
    }

    #[test]
    fn copies_with_home_downstream_stay_acyclic() {
        let g = lang::parse("gen | deflate | count", &PlanResolver(&native())).unwrap();
        let planned = vec![
            vec![Sp::Local],
            vec![Sp::Local, Sp::Thread(1, 0)],
            vec![Sp::Local],
        ];
        let placed = Repair::new(2, 0).run(&g, &planned);
        assert!(acyclic(&g, &placed), "{placed:?}");
        assert_eq!(
            placed[1].as_ref().unwrap()[0],
            Sp::Thread(1, 0),
            "the join's copy is off home"
        );
    }

    #[test]
    fn repaired_placements_are_acyclic_for_any_plan() {
        use proptest::prelude::*;
        let shapes = [
            "gen | tcp | udp | ip | count",
            "gen | tcp | deflate | udp | count",
            "gen | tcp + udp | count",
            "gen | tcp + (udp | deflate) | inflate | count",
        ];
        let sp = prop_oneof![
            Just(Sp::Local),
            (0usize..2).prop_map(|k| Sp::Thread(k, 0)),
            (0usize..2).prop_map(|k| Sp::Process(k, 0))
        ];
        let mut runner = proptest::test_runner::TestRunner::default();
        for text in shapes {
            let g = lang::parse(text, &PlanResolver(&native())).unwrap();
            let n = g.nodes.len();
            let strat = proptest::collection::vec(proptest::collection::vec(sp.clone(), 1..3), n);
            runner
                .run(&strat, |planned| {
                    let placed = Repair::new(2, 0).run(&g, &planned);
                    prop_assert!(acyclic(&g, &placed), "{text}: {planned:?} -> {placed:?}");
                    Ok(())
                })
                .unwrap();
        }
    }

    #[test]
    fn parse_errors_name_the_entry() {
        assert!(Assignment::parse("x:space=t1").unwrap_err().contains("'x'"));
        assert!(Assignment::parse("1:space")
            .unwrap_err()
            .contains("KEY=VALUE"));
        assert_eq!(Assignment::parse("").unwrap(), Assignment::default());
        assert!(Assignment::parse("1:placed=moon")
            .unwrap_err()
            .contains("placed=moon"));
        assert!(Assignment::parse("1:kpin=/x")
            .unwrap_err()
            .contains("unknown key 'kpin'"));
    }

    #[test]
    fn the_text_form_parses_back_to_the_same_typed_decisions() {
        let text = "1:space=2,3 2:space= 4:space=p5;placed=user 6:placed=user";
        let a = Assignment::parse(text).unwrap();
        assert_eq!(
            a.set[&1].space,
            Some(SpaceChange::Set(vec![
                SpaceName::Thread(2),
                SpaceName::Thread(3)
            ]))
        );
        assert_eq!(a.set[&2].space, Some(SpaceChange::Clear));
        assert_eq!(
            a.set[&4],
            NodePlace {
                space: Some(SpaceChange::Set(vec![SpaceName::Process(5)])),
                side: Some(Side::User)
            }
        );
        // tN is N; the planner's terms are not a runtime placement.
        assert_eq!(
            Assignment::parse("1:space=t2,t3").unwrap().set[&1],
            a.set[&1]
        );
        assert!(Assignment::parse("1:space=kernel")
            .unwrap_err()
            .contains("planner"));
        assert!(Assignment::parse("1:space=x9")
            .unwrap_err()
            .contains("space=x9"));
        assert_eq!(a.set[&6].side, Some(Side::User));
        assert_eq!(a.to_string(), text);
        assert_eq!(Assignment::parse(&a.to_string()).unwrap(), a);
    }
}
