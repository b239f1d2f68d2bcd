//! Plans: a placement of every filter (implementation, space kind, CPU) and the channel
//! of every stream, with the cost model's account of why. This module owns the one cost
//! evaluator both the optimizer and the heuristic are judged by, the canonical text
//! print (used by golden tests and `streamline plan`), and the Graphviz form.

use std::fmt::Write as _;
use std::time::Duration;

use crate::model::{Needs, Request};
use crate::system::{Distance, SpaceKind, SystemModel};

/// How a stream is carried; what a runtime sets up between two filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// Both filters in one space: a function call.
    Call,
    /// A shared-memory ring between two user spaces (threads or processes).
    SharedRing,
    /// Between two kernel spaces (different CPUs): a kernel ring.
    KernelRing,
    /// Kernel -> user: the AF_PACKET/BPF ring mapped into the reader.
    KernelToUser,
    /// User -> kernel: a write system call.
    UserToKernel,
    /// To another host: `netout` there, `netin` here (TCP, lossless).
    Network,
}

impl Channel {
    pub fn name(self) -> &'static str {
        match self {
            Channel::Call => "call",
            Channel::SharedRing => "shm-ring",
            Channel::KernelRing => "kernel-ring",
            Channel::KernelToUser => "kernel->user-ring",
            Channel::UserToKernel => "user->kernel-write",
            Channel::Network => "net-tcp",
        }
    }
}

/// One filter's choice: index into its implementations and into the system's spaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub imp: usize,
    pub space: usize,
}

/// Can node `i` run implementation `imp` in `space` (kind, capability, pin)?
pub fn admissible(req: &Request, sys: &SystemModel, i: usize, imp: usize, space: usize) -> bool {
    let n = &req.nodes[i];
    let im = &n.impls[imp];
    let s = &sys.spaces[space];
    let cap_ok = match im.needs {
        Needs::Nothing => true,
        Needs::AfPacket => sys.caps.af_packet,
        Needs::Bpf => sys.caps.bpf,
    };
    cap_ok && im.kinds.contains(&s.kind) && n.pin.admits(s.kind, s.cpu)
}

/// The cost of one stream carried between spaces `a` and `b`, and its channel.
pub fn stream_cost(
    sys: &SystemModel,
    rate: f64,
    bytes: f64,
    a: usize,
    b: usize,
) -> (f64, Channel, Distance) {
    let c = &sys.costs;
    let (sa, sb) = (&sys.spaces[a], &sys.spaces[b]);
    let d = sys.distance(sa.cpu, sb.cpu);
    if a == b {
        return (rate * c.call + bytes * c.load_same_cpu, Channel::Call, d);
    }
    let mut cost = rate * c.ring + bytes * sys.load_cost(d);
    if sa.kind == SpaceKind::Process || sb.kind == SpaceKind::Process {
        cost += rate * c.process;
    }
    let ch = match (sa.kind == SpaceKind::Kernel, sb.kind == SpaceKind::Kernel) {
        (true, true) => Channel::KernelRing,
        (true, false) => {
            cost += rate * c.kernel_to_user + bytes * c.boundary_copy_byte;
            Channel::KernelToUser
        }
        (false, true) => {
            cost += rate * c.user_to_kernel + bytes * c.boundary_copy_byte;
            Channel::UserToKernel
        }
        (false, false) => Channel::SharedRing,
    };
    if d == Distance::Network {
        // Across the hosts' link: a ring's costs as between NUMA nodes (`load_cost`
        // adds the link's per-byte cycles), plus its per-block cycles.
        let l = sys
            .link
            .as_ref()
            .expect("a network distance needs the model's link");
        return (cost + rate * l.per_block, Channel::Network, d);
    }
    (cost, ch, d)
}

/// A placement's full account under the cost model.
#[derive(Clone, Debug)]
pub struct Costing {
    pub node_cycles: Vec<f64>,
    pub stream_cycles: Vec<f64>,
    pub channels: Vec<(Channel, Distance)>,
    /// Filter cycles per CPU (indexed like `sys.cpus`).
    pub cpu_load: Vec<f64>,
    /// Bytes per second across the hosts' link (0 in a one-host model).
    pub link_bytes: f64,
    pub total: f64,
}

impl Costing {
    /// Does the placement fit: no CPU over its budget, the link within its bandwidth?
    pub fn fits(&self, sys: &SystemModel) -> bool {
        self.cpu_load
            .iter()
            .all(|&l| l <= sys.cycles_per_sec * (1.0 + 1e-9))
            && sys
                .link
                .as_ref()
                .is_none_or(|l| self.link_bytes <= l.bandwidth * (1.0 + 1e-9))
    }
}

/// Evaluates a placement: per-filter and per-stream cycles per second, per-CPU load.
pub fn evaluate(req: &Request, sys: &SystemModel, choice: &[Choice]) -> Costing {
    let node_cycles: Vec<f64> = (0..req.nodes.len())
        .map(|i| req.node_cycles(i, choice[i].imp))
        .collect();
    let mut stream_cycles = Vec::new();
    let mut channels = Vec::new();
    let mut link_bytes = 0.0;
    for s in &req.streams {
        let (c, ch, d) = stream_cost(
            sys,
            s.rate,
            s.bytes,
            choice[s.from].space,
            choice[s.to].space,
        );
        stream_cycles.push(c);
        channels.push((ch, d));
        if ch == Channel::Network {
            link_bytes += s.bytes;
        }
    }
    let mut cpu_load = vec![0.0; sys.cpus.len()];
    for (i, c) in choice.iter().enumerate() {
        let cpu = sys.spaces[c.space].cpu;
        let k = sys
            .cpus
            .iter()
            .position(|&x| x == cpu)
            .expect("space on a known cpu");
        cpu_load[k] += node_cycles[i];
    }
    let total = node_cycles.iter().sum::<f64>() + stream_cycles.iter().sum::<f64>();
    Costing {
        node_cycles,
        stream_cycles,
        channels,
        cpu_load,
        link_bytes,
        total,
    }
}

/// Which algorithm made a plan, and what it cost to make.
#[derive(Clone, Debug, PartialEq)]
pub struct SolverStats {
    /// `ilp (HiGHS)` or `push-down heuristic`.
    pub method: &'static str,
    pub variables: usize,
    pub constraints: usize,
    pub solve_time: Duration,
    /// For the ILP: the request alternative that won (`as written`, or a template).
    pub alternative: String,
}

/// A filter's place in a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePlan {
    pub node: usize,
    pub label: String,
    pub implementation: &'static str,
    pub space: usize,
    pub space_kind: SpaceKind,
    pub cpu: usize,
    pub cycles: f64,
    pub rate_in: f64,
}

/// A stream's channel in a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamPlan {
    pub from: usize,
    pub to: usize,
    pub channel: Channel,
    pub distance: Distance,
    pub rate: f64,
    pub bytes: f64,
    pub cycles: f64,
}

/// What a runtime consumes: per node implementation + space + CPU, per stream a channel.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub nodes: Vec<NodePlan>,
    pub streams: Vec<StreamPlan>,
    /// Total cycles per second.
    pub cost: f64,
    /// Filter cycles per second per CPU, and the CPU's budget.
    pub cpu_load: Vec<(usize, f64)>,
    pub capacity: f64,
    /// Two hosts: each CPU's host name (like `cpu_load`), the link's load and bandwidth.
    pub hosts: Vec<(usize, String)>,
    pub link: Option<(f64, f64)>,
    pub stats: SolverStats,
}

impl Plan {
    pub fn build(req: &Request, sys: &SystemModel, choice: &[Choice], stats: SolverStats) -> Plan {
        let c = evaluate(req, sys, choice);
        let nodes = req
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let s = &sys.spaces[choice[i].space];
                NodePlan {
                    node: i,
                    label: n.label.clone(),
                    implementation: n.impls[choice[i].imp].name,
                    space: s.id,
                    space_kind: s.kind,
                    cpu: s.cpu,
                    cycles: c.node_cycles[i],
                    rate_in: n.rate_in,
                }
            })
            .collect();
        let streams = req
            .streams
            .iter()
            .enumerate()
            .map(|(k, s)| StreamPlan {
                from: s.from,
                to: s.to,
                channel: c.channels[k].0,
                distance: c.channels[k].1,
                rate: s.rate,
                bytes: s.bytes,
                cycles: c.stream_cycles[k],
            })
            .collect();
        Plan {
            nodes,
            streams,
            cost: c.total,
            cpu_load: sys.cpus.iter().copied().zip(c.cpu_load).collect(),
            capacity: sys.cycles_per_sec,
            hosts: if sys.hosts.is_empty() {
                Vec::new()
            } else {
                sys.cpus
                    .iter()
                    .map(|&cpu| (cpu, sys.host_name(sys.host_of(cpu)).to_string()))
                    .collect()
            },
            link: sys.link.as_ref().map(|l| (c.link_bytes, l.bandwidth)),
            stats,
        }
    }

    /// The host CPU `cpu` is on, in a two-host plan.
    pub fn host(&self, cpu: usize) -> Option<&str> {
        self.hosts
            .iter()
            .find(|(c, _)| *c == cpu)
            .map(|(_, h)| h.as_str())
    }

    /// A two-host plan of a straight pipeline as the two command lines to run, one per
    /// host: each part's filters (node k as `atom(k)` writes it), with
    /// `netout to=ADDRESS:PORT` where a stream leaves for the other host and
    /// `netin port=PORT` where it arrives (ports from `port` up, one per crossing). None
    /// for a one-host plan or a graph that is not a chain of filters.
    pub fn per_host(
        &self,
        sys: &SystemModel,
        port: u16,
        atom: &dyn Fn(usize) -> Option<String>,
    ) -> Option<Vec<(String, String)>> {
        if self.hosts.is_empty() {
            return None;
        }
        let n = self.nodes.len();
        // A chain: node k feeds k + 1, nothing else.
        let chain = self.streams.len() + 1 == n
            && self.streams.iter().all(|s| s.to == s.from + 1 && s.to < n)
            && (1..n).all(|k| self.streams.iter().filter(|s| s.to == k).count() == 1);
        if !chain {
            return None;
        }
        let host_of = |k: usize| sys.host_of(self.nodes[k].cpu);
        let mut parts: Vec<(usize, Vec<String>)> = Vec::new();
        let mut next_port = port;
        for k in 0..n {
            let h = host_of(k);
            if k > 0 && host_of(k - 1) != h {
                let addr = &sys.hosts[h].address;
                let to = if addr.is_empty() {
                    sys.hosts[h].name.as_str()
                } else {
                    addr
                };
                parts
                    .last_mut()
                    .expect("a part before")
                    .1
                    .push(format!("netout to={to}:{next_port}"));
                parts.push((h, vec![format!("netin port={next_port}")]));
                next_port += 1;
            }
            if parts.is_empty() {
                parts.push((h, Vec::new()));
            }
            parts.last_mut().expect("a part").1.push(atom(k)?);
        }
        Some(
            parts
                .into_iter()
                .map(|(h, f)| (sys.host_name(h).to_string(), f.join(" | ")))
                .collect(),
        )
    }

    /// The placement only, one line per filter and stream, no timings: stable across
    /// runs and machines (golden tests compare this).
    pub fn canonical(&self) -> String {
        let mut s = String::new();
        for n in &self.nodes {
            let _ = writeln!(
                s,
                "{} {} = {} in {}@cpu{}{}",
                n.node,
                n.label,
                n.implementation,
                n.space_kind.name(),
                n.cpu,
                self.host(n.cpu)
                    .map(|h| format!(" on {h}"))
                    .unwrap_or_default()
            );
        }
        for st in &self.streams {
            let _ = writeln!(s, "{} -> {} : {}", st.from, st.to, st.channel.name());
        }
        let _ = writeln!(s, "cost {:.0}", self.cost);
        s
    }

    /// The placement and why: cost per filter and per stream, CPU load, model size and
    /// solve time.
    pub fn explain(&self) -> String {
        let mut s = String::new();
        let st = &self.stats;
        let _ = writeln!(
            s,
            "plan by {} ({}): total {} cycles/s",
            st.method,
            st.alternative,
            human(self.cost)
        );
        let _ = writeln!(
            s,
            "model: {} variables, {} constraints, solved in {:.3} ms",
            st.variables,
            st.constraints,
            st.solve_time.as_secs_f64() * 1e3
        );
        let _ = writeln!(s, "filters:");
        let w = self.nodes.iter().map(|n| n.label.len()).max().unwrap_or(0);
        for n in &self.nodes {
            let _ = writeln!(
                s,
                "  {:>2} {:<w$}  {:<12} {:<8} {}cpu{:<3} {:>10} blocks/s in  {:>10} cycles/s",
                n.node,
                n.label,
                n.implementation,
                n.space_kind.name(),
                self.host(n.cpu)
                    .map(|h| format!("{h}:"))
                    .unwrap_or_default(),
                n.cpu,
                human(n.rate_in),
                human(n.cycles),
            );
        }
        let _ = writeln!(s, "streams:");
        for t in &self.streams {
            let _ = writeln!(
                s,
                "  {:>2} -> {:<2} {:<18} {:<10} {:>10} blocks/s {:>10} B/s  {:>10} cycles/s",
                t.from,
                t.to,
                t.channel.name(),
                t.distance.name(),
                human(t.rate),
                human(t.bytes),
                human(t.cycles)
            );
        }
        let _ = writeln!(
            s,
            "cpu load (filter cycles/s of {} budget):",
            human(self.capacity)
        );
        for (cpu, l) in &self.cpu_load {
            if *l > 0.0 {
                let _ = writeln!(
                    s,
                    "  {}cpu{cpu}: {} ({:.1}%)",
                    self.host(*cpu).map(|h| format!("{h}:")).unwrap_or_default(),
                    human(*l),
                    100.0 * l / self.capacity
                );
            }
        }
        if let Some((load, bw)) = self.link {
            let _ = writeln!(
                s,
                "link between the hosts: {} B/s of {} B/s ({:.1}%)",
                human(load),
                human(bw),
                100.0 * load / bw
            );
        }
        s
    }

    /// Graphviz: one cluster per used space, filters as boxes, streams labelled with
    /// their channel and cost.
    pub fn dot(&self) -> String {
        let mut s = String::from(
            "digraph plan {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n",
        );
        let mut spaces: Vec<(usize, SpaceKind, usize)> = self
            .nodes
            .iter()
            .map(|n| (n.space, n.space_kind, n.cpu))
            .collect();
        spaces.sort();
        spaces.dedup();
        for (id, kind, cpu) in spaces {
            let _ = writeln!(
                s,
                "  subgraph cluster_{id} {{\n    label=\"{}@cpu{}\";",
                kind.name(),
                cpu
            );
            if kind == SpaceKind::Kernel {
                let _ = writeln!(s, "    style=filled; color=lightgrey;");
            }
            for n in self.nodes.iter().filter(|n| n.space == id) {
                let _ = writeln!(
                    s,
                    "    n{} [label=\"{}\\n{} {}\"];",
                    n.node,
                    n.label.replace('\\', "\\\\").replace('"', "\\\""),
                    n.implementation,
                    human(n.cycles)
                );
            }
            s += "  }\n";
        }
        for t in &self.streams {
            let style = if t.channel == Channel::Call {
                "solid"
            } else {
                "bold"
            };
            let _ = writeln!(
                s,
                "  n{} -> n{} [label=\"{} {}\", style={style}];",
                t.from,
                t.to,
                t.channel.name(),
                human(t.cycles)
            );
        }
        s += "}\n";
        s
    }
}

/// 1234567 -> `1.23M`.
pub fn human(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.2}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}
