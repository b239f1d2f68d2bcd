//! The system model (thesis 6.3.3, "system graph"): CPUs, the caches they share, NUMA
//! nodes, memory, capabilities, the spaces filters can run in, and the per-block and
//! per-byte costs of moving data between them.
//!
//! This module owns the model's data types, its JSON form (for golden tests and fixed
//! models), hand-built synthetic models, and discovery of the running machine from
//! `/sys` and `/proc` plus real capability probes (see [`crate::probe`]).

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::SystemError;

/// The kind of a space: where a filter implementation executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpaceKind {
    /// In the kernel, on the CPU that receives the data (classic BPF on a socket, eBPF).
    Kernel,
    /// A user thread of the streamline process, pinned to one CPU.
    Thread,
    /// A separate user process pinned to one CPU (isolation at the cost of a ring between
    /// address spaces).
    Process,
}

impl SpaceKind {
    pub fn name(self) -> &'static str {
        match self {
            SpaceKind::Kernel => "kernel",
            SpaceKind::Thread => "thread",
            SpaceKind::Process => "process",
        }
    }
    pub fn is_user(self) -> bool {
        self != SpaceKind::Kernel
    }
}

/// One space: a kind on one CPU. Spaces are numbered densely from 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Space {
    pub id: usize,
    pub kind: SpaceKind,
    pub cpu: usize,
}

impl Space {
    /// `kernel@cpu0`, `thread@cpu1`.
    pub fn label(&self) -> String {
        format!("{}@cpu{}", self.kind.name(), self.cpu)
    }
}

/// One cache and the CPUs that share it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    pub level: u8,
    pub size_kib: u64,
    pub cpus: Vec<usize>,
}

/// What the running kernel lets us do: owned by [`crate::probe`], which probes it.
pub use crate::probe::Capabilities;

/// Per-block and per-byte costs (cycles) of streams, by how far apart the two filters are.
/// The optimizer needs `load_*` to grow with distance (checked by [`SystemModel::check`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelCosts {
    /// Per block: a function call between filters in the same space.
    pub call: f64,
    /// Per block: enqueue plus dequeue on a shared-memory ring between two spaces.
    pub ring: f64,
    /// Per block, extra when the ring crosses a process boundary (wakeups, TLB).
    pub process: f64,
    /// Per block, extra for kernel -> user (the AF_PACKET/BPF ring, poll wakeups).
    pub kernel_to_user: f64,
    /// Per block, extra for user -> kernel (a write system call).
    pub user_to_kernel: f64,
    /// Per byte: the copy across the kernel/user boundary (either direction).
    pub boundary_copy_byte: f64,
    /// Per byte the consumer pays to load data the producer wrote, by distance: same
    /// CPU, a shared L2, a shared last-level cache, the same NUMA node, another node.
    pub load_same_cpu: f64,
    pub load_shared_l2: f64,
    pub load_shared_llc: f64,
    pub load_same_numa: f64,
    pub load_remote: f64,
}

impl Default for ChannelCosts {
    fn default() -> Self {
        // Fitted from `streamline-bench spaces` (2026-11-27, 2-CPU EPYC VM, 2.6 GHz):
        // `gen | count | count | null` in one space costs 2.8 ns a block for the source,
        // three calls and the filters (a call is a cycle or two); with the second half on
        // a worker thread the slower side takes 5.5 ns a block, about 10 cycles of channel
        // work on each side (batched commits, runs of tags: issue 19), 60 before.
        ChannelCosts {
            call: 2.0,
            ring: 20.0,
            process: 40.0,
            kernel_to_user: 300.0,
            user_to_kernel: 1500.0,
            boundary_copy_byte: 0.5,
            load_same_cpu: 0.05,
            load_shared_l2: 0.1,
            load_shared_llc: 0.25,
            load_same_numa: 0.6,
            load_remote: 1.2,
        }
    }
}

/// One host of a two-host model (`--system` files with `hosts` and a `link`): its name, the
/// address its `netin`s listen on, and its CPUs (numbered across the whole model: one
/// host's CPUs are not another's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    #[serde(default)]
    pub address: String,
    pub cpus: Vec<usize>,
}

/// The network link between the two hosts: what crossing it costs and how much it carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetLink {
    /// The two hosts' names.
    pub a: String,
    pub b: String,
    /// Payload bytes per second the link carries (the optimizer's constraint).
    pub bandwidth: f64,
    /// Cycles per block on the two sides together (frame head, the batch's system call
    /// shared among its blocks).
    #[serde(default = "NetLink::default_per_block")]
    pub per_block: f64,
    /// Cycles per byte on the two sides together (the kernel's copies and TCP).
    #[serde(default = "NetLink::default_per_byte")]
    pub per_byte: f64,
}

impl NetLink {
    fn default_per_block() -> f64 {
        // `streamline-bench net`: 64 KiB blocks move at about 2 GB/s over veth with each
        // side's CPU busy; small blocks pay the head and their share of a system call.
        150.0
    }
    fn default_per_byte() -> f64 {
        // About 1.3 cycles a byte each side at 2.6 GHz (a CPU per side at 2 GB/s).
        2.6
    }
}

/// The whole system graph the optimizer maps requests onto.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SystemModel {
    /// Online CPU numbers.
    pub cpus: Vec<usize>,
    /// NUMA node of each CPU, indexed like `cpus`.
    pub numa: Vec<usize>,
    pub caches: Vec<Cache>,
    pub memory_mib: u64,
    /// Cycle budget of one CPU per second.
    pub cycles_per_sec: f64,
    pub caps: Capabilities,
    pub spaces: Vec<Space>,
    #[serde(default)]
    pub costs: ChannelCosts,
    /// Two hosts and the link between them, or none (one host: every CPU is here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<Host>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<NetLink>,
}

/// How far apart two spaces are, for the per-byte load cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Distance {
    SameCpu,
    SharedL2,
    SharedLlc,
    SameNuma,
    Remote,
    /// On another host, across the model's link.
    Network,
}

impl Distance {
    pub fn name(self) -> &'static str {
        match self {
            Distance::SameCpu => "same-cpu",
            Distance::SharedL2 => "shared-L2",
            Distance::SharedLlc => "shared-LLC",
            Distance::SameNuma => "same-numa",
            Distance::Remote => "remote",
            Distance::Network => "network",
        }
    }
}

impl SystemModel {
    /// A hand-built homogeneous machine: `cpus` CPUs, pairs sharing an L2, all sharing one
    /// LLC, one NUMA node, with the given space kinds on every CPU.
    pub fn homogeneous(cpus: usize, kinds: &[SpaceKind], caps: Capabilities) -> SystemModel {
        let ids: Vec<usize> = (0..cpus).collect();
        let mut caches = Vec::new();
        for pair in ids.chunks(2) {
            caches.push(Cache {
                level: 2,
                size_kib: 1024,
                cpus: pair.to_vec(),
            });
        }
        caches.push(Cache {
            level: 3,
            size_kib: 32 * 1024,
            cpus: ids.clone(),
        });
        let mut m = SystemModel {
            numa: vec![0; cpus],
            cpus: ids,
            caches,
            memory_mib: 16 * 1024,
            cycles_per_sec: 2.0e9,
            caps,
            spaces: Vec::new(),
            costs: ChannelCosts::default(),
            hosts: Vec::new(),
            link: None,
        };
        m.make_spaces(kinds);
        m
    }

    /// A machine with exactly `n` user-thread spaces, one per CPU (the solver benchmark's
    /// "N spaces", thesis Figures 7.18-7.20).
    pub fn n_spaces(n: usize) -> SystemModel {
        SystemModel::homogeneous(n, &[SpaceKind::Thread], Capabilities::default())
    }

    /// Replaces the spaces by one of each kind in `kinds` per CPU (kernel spaces only if
    /// the kernel can run filters: BPF or AF_PACKET).
    pub fn make_spaces(&mut self, kinds: &[SpaceKind]) {
        self.spaces.clear();
        for &cpu in &self.cpus {
            for &k in kinds {
                if k == SpaceKind::Kernel && !(self.caps.bpf || self.caps.af_packet) {
                    continue;
                }
                let id = self.spaces.len();
                self.spaces.push(Space { id, kind: k, cpu });
            }
        }
    }

    /// Reads a model from JSON (the form [`SystemModel::to_json`] writes).
    pub fn from_json(text: &str) -> Result<SystemModel, SystemError> {
        let m: SystemModel =
            serde_json::from_str(text).map_err(|e| SystemError::Parse(e.to_string()))?;
        m.check()?;
        Ok(m)
    }

    pub fn load(path: &Path) -> Result<SystemModel, SystemError> {
        let text = fs::read_to_string(path).map_err(|e| SystemError::Io {
            path: path.display().to_string(),
            err: e.to_string(),
        })?;
        SystemModel::from_json(&text).map_err(|e| SystemError::InFile {
            path: path.display().to_string(),
            err: Box::new(e),
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the model serializes")
    }

    /// Consistency: spaces numbered densely on known CPUs, NUMA per CPU, load costs that
    /// grow with distance, positive capacity.
    pub fn check(&self) -> Result<(), SystemError> {
        if self.cpus.is_empty() {
            return Err(SystemError::Invalid("no CPUs".into()));
        }
        if self.numa.len() != self.cpus.len() {
            return Err(SystemError::Invalid(format!(
                "{} NUMA entries for {} CPUs",
                self.numa.len(),
                self.cpus.len()
            )));
        }
        if self.spaces.is_empty() {
            return Err(SystemError::Invalid("no spaces".into()));
        }
        for (i, s) in self.spaces.iter().enumerate() {
            if s.id != i {
                return Err(SystemError::Invalid(format!("space {} has id {}", i, s.id)));
            }
            if !self.cpus.contains(&s.cpu) {
                return Err(SystemError::Invalid(format!(
                    "space {} on unknown cpu {}",
                    i, s.cpu
                )));
            }
        }
        if self.cycles_per_sec.is_nan() || self.cycles_per_sec <= 0.0 {
            return Err(SystemError::Invalid(
                "cycles_per_sec must be positive".into(),
            ));
        }
        let c = &self.costs;
        let ladder = [
            c.load_same_cpu,
            c.load_shared_l2,
            c.load_shared_llc,
            c.load_same_numa,
            c.load_remote,
        ];
        if ladder.windows(2).any(|w| w[0] > w[1]) || ladder[0] < 0.0 {
            return Err(SystemError::Invalid(
                "load costs must be non-negative and grow with distance".into(),
            ));
        }
        let per_block = [
            c.call,
            c.ring,
            c.process,
            c.kernel_to_user,
            c.user_to_kernel,
            c.boundary_copy_byte,
        ];
        if per_block.iter().any(|&v| v < 0.0) || c.ring < c.call {
            return Err(SystemError::Invalid(
                "channel costs must be non-negative and a ring must cost at least a call".into(),
            ));
        }
        self.check_hosts()
    }

    /// A multi-host model: exactly two hosts, every CPU on one of them, a link between
    /// them that carries something.
    fn check_hosts(&self) -> Result<(), SystemError> {
        let bad = |m: String| Err(SystemError::Invalid(m));
        match (self.hosts.len(), &self.link) {
            (0, None) => return Ok(()),
            (0, Some(_)) => return bad("a link but no hosts".into()),
            (2, Some(_)) => {}
            (2, None) => return bad("two hosts but no link between them".into()),
            (n, _) => return bad(format!("{n} hosts: a model has one (no `hosts`) or two")),
        }
        let link = self.link.as_ref().expect("checked above");
        for &cpu in &self.cpus {
            let on = self.hosts.iter().filter(|h| h.cpus.contains(&cpu)).count();
            if on != 1 {
                return bad(format!(
                    "cpu {cpu} is on {on} hosts (each CPU is on exactly one)"
                ));
            }
        }
        for h in &self.hosts {
            if let Some(c) = h.cpus.iter().find(|c| !self.cpus.contains(c)) {
                return bad(format!(
                    "host {} lists cpu {c}, which is not in `cpus`",
                    h.name
                ));
            }
        }
        if self.hosts[0].name == self.hosts[1].name {
            return bad(format!("two hosts named {}", self.hosts[0].name));
        }
        let names = [&self.hosts[0].name, &self.hosts[1].name];
        if !(names.contains(&&link.a) && names.contains(&&link.b) && link.a != link.b) {
            return bad(format!(
                "the link joins {} and {}, not the two hosts {} and {}",
                link.a, link.b, names[0], names[1]
            ));
        }
        if !(link.bandwidth > 0.0) || link.per_block < 0.0 || link.per_byte < 0.0 {
            return bad(
                "the link needs a positive bandwidth (bytes/s) and non-negative costs".into(),
            );
        }
        Ok(())
    }

    fn numa_of(&self, cpu: usize) -> usize {
        self.cpus
            .iter()
            .position(|&c| c == cpu)
            .map(|i| self.numa[i])
            .unwrap_or(0)
    }

    /// Do CPUs `a` and `b` share a cache of exactly `level` (or a lower one when `level`
    /// is the last level)?
    fn share(&self, a: usize, b: usize, pred: impl Fn(u8) -> bool) -> bool {
        self.caches
            .iter()
            .any(|c| pred(c.level) && c.cpus.contains(&a) && c.cpus.contains(&b))
    }

    fn llc_level(&self) -> u8 {
        self.caches.iter().map(|c| c.level).max().unwrap_or(0)
    }

    /// The host (index into `hosts`) a CPU belongs to; 0 in a one-host model.
    pub fn host_of(&self, cpu: usize) -> usize {
        self.hosts
            .iter()
            .position(|h| h.cpus.contains(&cpu))
            .unwrap_or(0)
    }

    /// The name of host `h` ("" in a one-host model).
    pub fn host_name(&self, h: usize) -> &str {
        self.hosts.get(h).map_or("", |h| h.name.as_str())
    }

    /// Cache distance between two CPUs.
    pub fn distance(&self, a: usize, b: usize) -> Distance {
        if self.host_of(a) != self.host_of(b) {
            Distance::Network
        } else if a == b {
            Distance::SameCpu
        } else if self.share(a, b, |l| l <= 2) {
            Distance::SharedL2
        } else if self.llc_level() > 2 && self.share(a, b, |l| l > 2) {
            Distance::SharedLlc
        } else if self.numa_of(a) == self.numa_of(b) {
            Distance::SameNuma
        } else {
            Distance::Remote
        }
    }

    pub fn load_cost(&self, d: Distance) -> f64 {
        let c = &self.costs;
        match d {
            Distance::SameCpu => c.load_same_cpu,
            Distance::SharedL2 => c.load_shared_l2,
            Distance::SharedLlc => c.load_shared_llc,
            Distance::SameNuma => c.load_same_numa,
            Distance::Remote => c.load_remote,
            Distance::Network => c.load_remote + self.link.as_ref().map_or(0.0, |l| l.per_byte),
        }
    }

    /// Partitions of CPUs used by the optimizer: groups of CPUs sharing an L2, sharing
    /// the LLC, and on one NUMA node. Each is a list of CPU groups covering all CPUs.
    pub fn cpu_partitions(&self) -> [(Distance, Vec<Vec<usize>>); 3] {
        let group = |key: &dyn Fn(usize) -> usize| {
            let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
            for &c in &self.cpus {
                let k = key(c);
                match groups.iter_mut().find(|g| g.0 == k) {
                    Some(g) => g.1.push(c),
                    None => groups.push((k, vec![c])),
                }
            }
            groups.into_iter().map(|g| g.1).collect::<Vec<_>>()
        };
        // Union-find-free grouping: a CPU's representative is the smallest CPU at
        // distance <= d from it (distance classes are equivalence classes on real
        // hardware: caches are shared by disjoint CPU sets at each level).
        let rep = |d: Distance| {
            move |c: usize| {
                self.cpus
                    .iter()
                    .copied()
                    .filter(|&o| self.distance(c, o) <= d)
                    .min()
                    .unwrap_or(c)
            }
        };
        [
            (Distance::SharedL2, group(&rep(Distance::SharedL2))),
            (Distance::SharedLlc, group(&rep(Distance::SharedLlc))),
            (Distance::SameNuma, group(&rep(Distance::SameNuma))),
        ]
    }

    /// Discovers the running machine: CPUs, caches, NUMA, memory from /sys and /proc, and
    /// capabilities by probing. Spaces: a kernel space (if the kernel can run filters), a
    /// pinned thread and a process per CPU.
    /// Bytes of the smallest level-2 cache (what a channel sized to stay in cache aims at).
    pub fn l2_bytes(&self) -> Option<u64> {
        self.caches
            .iter()
            .filter(|c| c.level == 2)
            .map(|c| c.size_kib << 10)
            .min()
    }

    pub fn discover() -> Result<SystemModel, SystemError> {
        let sys = Path::new("/sys/devices/system");
        let online = read_trim(&sys.join("cpu/online"))?;
        let cpus = parse_cpu_list(&online)
            .map_err(|e| SystemError::Invalid(format!("cpu/online: {e}")))?;
        let mut caches: Vec<Cache> = Vec::new();
        for &cpu in &cpus {
            let dir = sys.join(format!("cpu/cpu{cpu}/cache"));
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for ent in entries.flatten() {
                let p = ent.path();
                if !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("index"))
                {
                    continue;
                }
                let ty = read_trim(&p.join("type")).unwrap_or_default();
                if ty == "Instruction" {
                    continue;
                }
                let level: u8 = read_trim(&p.join("level"))
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let size_kib = read_trim(&p.join("size"))
                    .ok()
                    .and_then(|s| parse_size_kib(&s))
                    .unwrap_or(0);
                let shared = read_trim(&p.join("shared_cpu_list"))
                    .ok()
                    .and_then(|s| parse_cpu_list(&s).ok())
                    .unwrap_or_else(|| vec![cpu]);
                if level == 0 || caches.iter().any(|c| c.level == level && c.cpus == shared) {
                    continue;
                }
                caches.push(Cache {
                    level,
                    size_kib,
                    cpus: shared,
                });
            }
        }
        caches.sort_by(|a, b| (a.level, &a.cpus).cmp(&(b.level, &b.cpus)));
        let mut numa = vec![0; cpus.len()];
        if let Ok(nodes) = fs::read_dir(sys.join("node")) {
            for ent in nodes.flatten() {
                let name = ent.file_name().to_string_lossy().to_string();
                let Some(n) = name
                    .strip_prefix("node")
                    .and_then(|n| n.parse::<usize>().ok())
                else {
                    continue;
                };
                if let Ok(list) = read_trim(&ent.path().join("cpulist"))
                    .and_then(|s| parse_cpu_list(&s).map_err(SystemError::Invalid))
                {
                    for c in list {
                        if let Some(i) = cpus.iter().position(|&x| x == c) {
                            numa[i] = n;
                        }
                    }
                }
            }
        }
        let memory_mib = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .map(|kib| kib / 1024)
            .unwrap_or(0);
        let mhz = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("cpu MHz"))
                    .and_then(|l| l.split(':').nth(1))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            })
            .unwrap_or(2000.0);
        let mut m = SystemModel {
            cpus,
            numa,
            caches,
            memory_mib,
            cycles_per_sec: mhz * 1e6,
            caps: crate::probe::capabilities(),
            spaces: Vec::new(),
            costs: ChannelCosts::default(),
            hosts: Vec::new(),
            link: None,
        };
        m.make_spaces(&[SpaceKind::Kernel, SpaceKind::Thread, SpaceKind::Process]);
        m.check()?;
        Ok(m)
    }

    /// A short human summary: CPUs, caches, capabilities, spaces.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} CPUs ({:.0} MHz), {} MiB memory, NUMA nodes {:?}\n",
            self.cpus.len(),
            self.cycles_per_sec / 1e6,
            self.memory_mib,
            {
                let mut n = self.numa.clone();
                n.sort();
                n.dedup();
                n
            }
        );
        for c in &self.caches {
            s += &format!(
                "  L{} {} KiB shared by cpus {:?}\n",
                c.level, c.size_kib, c.cpus
            );
        }
        let cap = &self.caps;
        s += &format!(
            "  capabilities: bpf={} af_packet={} af_xdp={} fuse={}\n",
            cap.bpf, cap.af_packet, cap.af_xdp, cap.fuse
        );
        s += &format!(
            "  spaces: {}\n",
            self.spaces
                .iter()
                .map(|s| s.label())
                .collect::<Vec<_>>()
                .join(" ")
        );
        s
    }
}

fn read_trim(p: &Path) -> Result<String, SystemError> {
    fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .map_err(|e| SystemError::Io {
            path: p.display().to_string(),
            err: e.to_string(),
        })
}

/// Parses `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad cpu number '{t}' in '{s}'"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("bad range '{part}' in '{s}'"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

fn parse_size_kib(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(k) = s.strip_suffix('K') {
        k.parse().ok()
    } else if let Some(m) = s.strip_suffix('M') {
        m.parse::<u64>().ok().map(|m| m * 1024)
    } else {
        s.parse::<u64>().ok().map(|b| b / 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert_eq!(parse_size_kib("32K"), Some(32));
        assert_eq!(parse_size_kib("2M"), Some(2048));
    }

    #[test]
    fn distances_follow_caches() {
        let m = SystemModel::homogeneous(4, &[SpaceKind::Thread], Capabilities::default());
        assert_eq!(m.distance(0, 0), Distance::SameCpu);
        assert_eq!(m.distance(0, 1), Distance::SharedL2);
        assert_eq!(m.distance(0, 2), Distance::SharedLlc);
        let parts = m.cpu_partitions();
        assert_eq!(parts[0].1, vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(parts[1].1, vec![vec![0, 1, 2, 3]]);
    }

    #[test]
    fn json_round_trip_and_checks() {
        let caps = Capabilities {
            bpf: true,
            af_packet: true,
            ..Default::default()
        };
        let m = SystemModel::homogeneous(2, &[SpaceKind::Kernel, SpaceKind::Thread], caps);
        assert_eq!(m.spaces.len(), 4);
        let back = SystemModel::from_json(&m.to_json()).unwrap();
        assert_eq!(back, m);
        let mut bad = m.clone();
        bad.costs.load_remote = 0.0;
        let err = SystemModel::from_json(&bad.to_json()).unwrap_err();
        assert!(err.to_string().contains("grow with distance"), "{err}");
    }

    #[test]
    fn kernel_spaces_need_a_capability() {
        let m = SystemModel::homogeneous(
            2,
            &[SpaceKind::Kernel, SpaceKind::Thread],
            Capabilities::default(),
        );
        assert!(m.spaces.iter().all(|s| s.kind == SpaceKind::Thread));
    }

    #[test]
    fn discovery_reads_this_machine() {
        let m = SystemModel::discover().expect("discovery works on Linux");
        assert!(!m.cpus.is_empty());
        assert!(m.spaces.iter().any(|s| s.kind == SpaceKind::Thread));
        assert!(m.memory_mib > 0);
    }
}
