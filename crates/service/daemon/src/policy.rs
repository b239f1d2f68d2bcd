//! Who may run what (thesis 6.5): the policy file's grants of safe templates, and the
//! check of a client's graph against them.
//!
//! Owns: the policy file format and the template match. Does not own: file access (a run's
//! worker opens files with the client's file-system identity, so the kernel decides), the
//! modes of streams (`control::access`), the filters that need a privilege (their
//! declarations, `FilterSpec::privilege`).
//!
//! A filter that needs a privilege (`rx`, `tx`: CAP_NET_RAW) may be instantiated by a
//! client whose uid is 0, or through a template the policy grants to the client's user or
//! one of its groups. A template is a chain `t0 | t1 | ... | tk` that contains the
//! privileged filter: the client's node must match its template node, and the chain must
//! continue exactly as the template says in both directions, each node before the last
//! with no other way out (so raw data reaches the client only through the template's
//! filters, e.g. after a `bpf` restricting ports or a `strip payload`). Nodes match when
//! filter name, parameters and options are equal, placement options (`space=`,
//! `placed=`) and node names aside. With no policy file, unprivileged users get no
//! privileged filter at all.
//!
//! The file's format is [`FORMAT`] (what `streamline help policy` prints; its example is
//! parsed by this module's tests, so the two cannot drift apart).

use lang::{Graph, NodeKind};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The policy file's format, as `streamline help policy` prints it. Its example is checked
/// by this module's tests: it parses, and it names every key the parser takes.
pub const FORMAT: &str = r#"THE POLICY FILE (streamlined --policy FILE)

A TOML file read when the daemon starts (change it, then restart the daemon). Root
clients need no policy. Without a policy file, unprivileged users get no privileged
filter (rx, tx: CAP_NET_RAW) at all, and the limits below take their defaults.

[[grant]]: one template some users or groups may run (as many tables as you like)
  users      names or numeric uids (optional, but users or groups must be given)
  groups     names or numeric gids (optional)
  template   a chain `t0 | t1 | ... | tk` holding the privileged filter. The client's
             pipeline must contain it exactly: each node's filter, parameters and
             options equal (space=, placed= and node names aside), the chain going on
             as written in both directions with no other way out of a node before the
             last, so raw data reaches the client only through the template's filters.
  mode       the captured stream's permission bits, octal (default "0600")

[limits]: what one unprivileged user may take of the daemon (root is not limited;
every key is optional, the default is given)
  connections_per_user       connections open at once (32; EAGAIN beyond)
  unactivated_runs_per_user  runs opened and not yet activated (8; EAGAIN beyond)
  runs_per_user              runs built or running, detached ones too (64; EAGAIN)
  max_ring                   the largest ring or buffer one value may ask for ("1G";
                             E2BIG): --ring, a node's size=, every memory parameter;
                             bytes, or a string with K, M, G (binary: "1G" =
                             1,073,741,824); at least 64K
  frame_timeout_s            seconds a frame's bytes may take once its first byte came
                             (10; EPROTO, the connection is closed)

The daemon's --max-clients caps unprivileged connections of all users together.

Example (/etc/streamline/policy.toml):

[[grant]]
users = ["nobody"]
groups = ["0"]
template = 'rx dev=veth0 | bpf "udp port 53"'
mode = "0640"

[limits]
connections_per_user = 32
unactivated_runs_per_user = 8
runs_per_user = 64
max_ring = "1G"
frame_timeout_s = 10
"#;

/// The example of [`FORMAT`]: everything after its `Example` line.
pub fn format_example() -> &'static str {
    let at = FORMAT
        .find("\n[[grant]]\nusers")
        .expect("FORMAT has an example");
    &FORMAT[at + 1..]
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    grant: Vec<RawGrant>,
    #[serde(default)]
    limits: Option<RawLimits>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    connections_per_user: Option<toml::Value>,
    unactivated_runs_per_user: Option<toml::Value>,
    runs_per_user: Option<toml::Value>,
    max_ring: Option<toml::Value>,
    frame_timeout_s: Option<toml::Value>,
}

/// What one unprivileged user may take of the daemon (the `[limits]` table; see the module
/// docs). Root is not limited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Connections one user may have open at once.
    pub connections_per_user: usize,
    /// Runs one user may have opened and not yet activated (each is a worker process).
    pub unactivated_runs_per_user: usize,
    /// Runs one user may have built or running (detached ones included).
    pub runs_per_user: usize,
    /// The largest ring or buffer, in bytes, one value of a run may ask for.
    pub max_ring: u64,
    /// How long a frame may take to arrive once its first byte has.
    pub frame_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections_per_user: 32,
            unactivated_runs_per_user: 8,
            runs_per_user: 64,
            max_ring: 1 << 30,
            frame_timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// A byte count as people write it: 1073741824, 1G, 512M, 64K.
pub fn show_bytes(n: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    template: String,
    mode: Option<String>,
}

/// One grant: a template for some users and groups.
#[derive(Debug, Clone)]
pub struct Grant {
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
    pub template: String,
    chain: Graph,
    /// Mode of the stream the template's privileged source produces.
    pub mode: u32,
}

/// The policy: where it came from, its grants and its limits.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub path: Option<PathBuf>,
    pub grants: Vec<Grant>,
    pub limits: Limits,
    /// The name the text was parsed under (the file's path), for refusals.
    origin: Option<String>,
}

/// The client, as access control sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Cred {
    /// The credentials of `uid` with its primary and supplementary groups from the
    /// system's databases (`getpwuid`, `getgrouplist`); `gid` is the peer's, as
    /// SO_PEERCRED reported it.
    pub fn of(uid: u32, gid: u32) -> Cred {
        let mut groups = vec![gid];
        if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            if let Ok(name) = std::ffi::CString::new(u.name.clone()) {
                if let Ok(gs) = nix::unistd::getgrouplist(&name, u.gid) {
                    groups.extend(gs.into_iter().map(|g| g.as_raw()));
                }
            }
        }
        groups.sort_unstable();
        groups.dedup();
        Cred { uid, gid, groups }
    }

    pub fn root(&self) -> bool {
        self.uid == 0
    }
}

/// A refusal, naming the node and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{node}: {why}")]
pub struct Denied {
    pub node: String,
    /// The node's id in the graph checked.
    pub id: usize,
    pub span: lang::Span,
    pub why: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("policy {path}: {why}")]
    Parse { path: String, why: String },
    #[error("policy {path}: grant {index} ({template}): {why}")]
    Grant {
        path: String,
        index: usize,
        template: String,
        why: String,
    },
    #[error("policy {path}: [limits] {key} = {value}: {why}")]
    Limit {
        path: String,
        key: &'static str,
        value: String,
        why: String,
    },
}

impl RawLimits {
    /// Check every key given and fill in the defaults of the others.
    fn check(&self, path: &str) -> Result<Limits, PolicyError> {
        let bad = |key: &'static str, v: &toml::Value, why: &str| PolicyError::Limit {
            path: path.into(),
            key,
            value: v.to_string(),
            why: why.into(),
        };
        let count = |key: &'static str, v: &Option<toml::Value>, default: usize| match v {
            None => Ok(default),
            Some(x) => x
                .as_integer()
                .filter(|n| (1..=1 << 20).contains(n))
                .map(|n| n as usize)
                .ok_or_else(|| bad(key, x, "expected a whole number from 1 to 1048576")),
        };
        let d = Limits::default();
        let max_ring = match &self.max_ring {
            None => d.max_ring,
            Some(x) => {
                let n = match x {
                    toml::Value::Integer(n) => u64::try_from(*n).ok(),
                    toml::Value::String(t) => catalog::parse_size(t),
                    _ => None,
                };
                n.filter(|n| *n >= 1 << 16).ok_or_else(|| {
                    bad(
                        "max_ring",
                        x,
                        "expected a size of at least 64K, as bytes or with a suffix (\"1G\", \"512M\")",
                    )
                })?
            }
        };
        let frame_timeout = match &self.frame_timeout_s {
            None => d.frame_timeout,
            Some(x) => {
                let secs = match x {
                    toml::Value::Integer(n) => Some(*n as f64),
                    toml::Value::Float(f) => Some(*f),
                    _ => None,
                };
                secs.filter(|s| (0.1..=3600.0).contains(s))
                    .map(std::time::Duration::from_secs_f64)
                    .ok_or_else(|| bad("frame_timeout_s", x, "expected seconds from 0.1 to 3600"))?
            }
        };
        Ok(Limits {
            connections_per_user: count(
                "connections_per_user",
                &self.connections_per_user,
                d.connections_per_user,
            )?,
            unactivated_runs_per_user: count(
                "unactivated_runs_per_user",
                &self.unactivated_runs_per_user,
                d.unactivated_runs_per_user,
            )?,
            runs_per_user: count("runs_per_user", &self.runs_per_user, d.runs_per_user)?,
            max_ring,
            frame_timeout,
        })
    }
}

fn resolve_user(s: &str) -> Option<u32> {
    s.parse().ok().or_else(|| {
        nix::unistd::User::from_name(s)
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
    })
}

fn resolve_group(s: &str) -> Option<u32> {
    s.parse().ok().or_else(|| {
        nix::unistd::Group::from_name(s)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
    })
}

impl Policy {
    /// Read and check a policy file: every template must parse as a chain, every user and
    /// group must exist, every mode must be octal.
    pub fn load(path: &Path, resolver: &dyn lang::Resolver) -> Result<Policy, PolicyError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: p.clone(),
            source,
        })?;
        Policy::parse(&text, &p, resolver).map(|mut pol| {
            pol.path = Some(path.to_path_buf());
            pol
        })
    }

    pub fn parse(
        text: &str,
        path: &str,
        resolver: &dyn lang::Resolver,
    ) -> Result<Policy, PolicyError> {
        let f: File = toml::from_str(text).map_err(|e| PolicyError::Parse {
            path: path.into(),
            why: e.to_string(),
        })?;
        let mut grants = Vec::new();
        for (index, g) in f.grant.into_iter().enumerate() {
            let bad = |why: String| PolicyError::Grant {
                path: path.into(),
                index,
                template: g.template.clone(),
                why,
            };
            let chain = lang::parse(&g.template, resolver)
                .map_err(|d| bad(format!("does not parse: {}", d.message)))?;
            if !is_chain(&chain) {
                return Err(bad("a template is one chain of filters (a | b | c)".into()));
            }
            let uids = g
                .users
                .iter()
                .map(|u| resolve_user(u).ok_or_else(|| bad(format!("no user {u}"))))
                .collect::<Result<Vec<_>, _>>()?;
            let gids = g
                .groups
                .iter()
                .map(|x| resolve_group(x).ok_or_else(|| bad(format!("no group {x}"))))
                .collect::<Result<Vec<_>, _>>()?;
            if uids.is_empty() && gids.is_empty() {
                return Err(bad("grants to nobody: give users or groups".into()));
            }
            let mode = match &g.mode {
                None => 0o600,
                Some(m) => u32::from_str_radix(m, 8)
                    .ok()
                    .filter(|m| *m <= 0o777)
                    .ok_or_else(|| {
                        bad(format!(
                            "mode {m}: expected octal permission bits such as 0640"
                        ))
                    })?,
            };
            grants.push(Grant {
                uids,
                gids,
                template: g.template.clone(),
                chain,
                mode,
            });
        }
        let limits = match &f.limits {
            Some(l) => l.check(path)?,
            None => Limits::default(),
        };
        Ok(Policy {
            path: None,
            grants,
            limits,
            origin: Some(path.to_string()),
        })
    }

    /// Where a limit's value comes from, for a refusal: `limit KEY = VALUE in the policy
    /// PATH` (set there, or its default: the administrator changes it there), or `...,
    /// the default: no policy file`.
    pub fn limit_note(&self, key: &str, value: impl std::fmt::Display) -> String {
        match &self.origin {
            Some(p) => format!("limit {key} = {value} in the policy {p}"),
            None => format!("limit {key} = {value}, the default: no policy file"),
        }
    }

    /// Why `bytes` asked for by `what` exceed `max_ring` for `who`.
    fn too_big(&self, what: &str, bytes: u64, who: &Cred) -> String {
        let max = self.limits.max_ring;
        format!(
            "{what} asks for {bytes} bytes ({}); uid {} may ask for at most {} per ring or buffer ({})",
            show_bytes(bytes),
            who.uid,
            show_bytes(max),
            self.limit_note("max_ring", format!("\"{}\"", show_bytes(max)))
        )
    }

    /// Check a run's ring (`RunOptions::ring`, `--ring`) against `max_ring` (root is not
    /// limited).
    pub fn check_ring(&self, ring: u64, who: &Cred) -> Result<(), String> {
        if who.root() || ring <= self.limits.max_ring {
            return Ok(());
        }
        Err(self.too_big("the run's ring (ring, --ring)", ring, who))
    }

    /// Check the sizes a graph asks for against `max_ring`: every node's `size=` option (an
    /// exported stream's ring) and every filter parameter declared as memory
    /// (`Param::memory`; `params` answers a filter's declared parameters). Root is not
    /// limited. Call it on the graph of a new run and on the graph an edit would make.
    pub fn check_sizes(
        &self,
        g: &Graph,
        who: &Cred,
        params: &dyn Fn(&str) -> Option<&'static [catalog::Param]>,
    ) -> Result<(), Denied> {
        if who.root() {
            return Ok(());
        }
        let max = self.limits.max_ring;
        for n in &g.nodes {
            let NodeKind::Filter {
                filter,
                params: pos,
                options: opts,
                ..
            } = &n.kind
            else {
                continue;
            };
            let deny = |what: String, bytes: u64| Denied {
                node: lang::label::base_name(n),
                id: n.id,
                span: n.span,
                why: self.too_big(&what, bytes, who),
            };
            if let Some(v) = opts.iter().find(|(k, _)| k == "size").map(|(_, v)| v) {
                if let Some(b) = catalog::parse_size(v).filter(|b| *b > max) {
                    return Err(deny(format!("size={v} (its stream's ring)"), b));
                }
            }
            let Some(decl) = params(filter) else {
                continue;
            };
            for p in decl.iter().filter(|p| p.memory > 0) {
                let given = opts
                    .iter()
                    .find(|(k, _)| k == p.name)
                    .map(|(_, v)| v.as_str())
                    .or_else(|| p.position.and_then(|i| pos.get(i)).map(|v| v.as_str()));
                if let Some(v) = given {
                    if let Some(b) = p.memory_of(v).filter(|b| *b > max) {
                        return Err(deny(format!("{}={v}", p.name), b));
                    }
                }
            }
        }
        Ok(())
    }

    /// The templates granted to `who` (to its user or one of its groups).
    pub fn templates_for(&self, who: &Cred) -> Vec<&str> {
        self.grants
            .iter()
            .filter(|gr| {
                gr.uids.contains(&who.uid) || gr.gids.iter().any(|x| who.groups.contains(x))
            })
            .map(|gr| gr.template.as_str())
            .collect()
    }

    /// Where the policy came from, for messages (`the policy PATH`, `no policy file`).
    pub fn source(&self) -> String {
        match &self.path {
            Some(p) => format!("the policy {}", p.display()),
            None => "no policy file".into(),
        }
    }

    /// Check a client's graph: every node whose filter needs a privilege (`privileged`
    /// answers with the capability) must be covered by a grant to the client, unless the
    /// client is root. Returns, per privileged source node, the mode its stream gets.
    pub fn check(
        &self,
        g: &Graph,
        who: &Cred,
        privileged: &dyn Fn(&str) -> Option<&'static str>,
    ) -> Result<Vec<(usize, u32)>, Denied> {
        let mut modes = Vec::new();
        for n in &g.nodes {
            let NodeKind::Filter { filter, .. } = &n.kind else {
                continue;
            };
            let Some(cap) = privileged(filter) else {
                continue;
            };
            if who.root() {
                continue;
            }
            let mine: Vec<&Grant> = self
                .grants
                .iter()
                .filter(|gr| {
                    gr.uids.contains(&who.uid) || gr.gids.iter().any(|x| who.groups.contains(x))
                })
                .collect();
            match mine.iter().find(|gr| covers(&gr.chain, g, n.id)) {
                Some(gr) => modes.push((n.id, gr.mode)),
                None => {
                    let why = if mine.is_empty() {
                        format!(
                            "needs {cap}; {} grants uid {} no template, so it runs only as root",
                            self.source(),
                            who.uid
                        )
                    } else {
                        let list: Vec<&str> = mine.iter().map(|gr| gr.template.as_str()).collect();
                        format!("needs {cap}; {} grants uid {} only these templates, and this pipeline follows none of them: {}", self.source(), who.uid, list.join("; "))
                    };
                    return Err(Denied {
                        node: lang::label::base_name(n),
                        id: n.id,
                        span: n.span,
                        why,
                    });
                }
            }
        }
        Ok(modes)
    }
}

/// A privileged resource the daemon opens for a granted node and lends the worker
/// (`kernel::lend`): what for, on which device, with which kernel filter locked on it, how
/// many sockets (an `rx` with `rings=`/`queues=` reads several).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lend {
    pub node: usize,
    pub kind: kernel::lend::Kind,
    pub dev: String,
    pub filter: Option<String>,
    pub count: usize,
}

/// Most sockets lent for one node (64 queues or 16 rings at most, as `rx` and `tx` check).
const MAX_LENT_PER_NODE: usize = 64;

impl Policy {
    /// What the daemon must open and lend for the privileged nodes of `g`, a graph
    /// [`Policy::check`] allowed for `who` (not root): per node, its device and the
    /// template's kernel part, the pcap-filter expressions of the template's `bpf` nodes
    /// right after the granted `rx` (ANDed), which the kernel then enforces whatever the
    /// worker does. Errors name a node the grant does not explain.
    pub fn lends(
        &self,
        g: &Graph,
        who: &Cred,
        privileged: &dyn Fn(&str) -> Option<&'static str>,
    ) -> Result<Vec<Lend>, Denied> {
        let mut out = Vec::new();
        for n in &g.nodes {
            let NodeKind::Filter {
                filter,
                params,
                options,
                ..
            } = &n.kind
            else {
                continue;
            };
            if privileged(filter).is_none() {
                continue;
            }
            let denied = |why: String| Denied {
                node: lang::label::base_name(n),
                id: n.id,
                span: n.span,
                why,
            };
            let kind = kernel::lend::Kind::parse(filter).ok_or_else(|| {
                denied(format!(
                    "needs {}; the daemon lends sockets only for rx and tx",
                    privileged(filter).unwrap_or("a privilege")
                ))
            })?;
            let found = self
                .grants
                .iter()
                .filter(|gr| {
                    gr.uids.contains(&who.uid) || gr.gids.iter().any(|x| who.groups.contains(x))
                })
                .find_map(|gr| covers_at(&gr.chain, g, n.id).map(|k| (gr, k)));
            let Some((gr, k)) = found else {
                return Err(denied("no template grants it".into()));
            };
            let opt = |key: &str| {
                options
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
            };
            let dev = lang::label::arg(params, options, "dev")
                .map(str::to_string)
                .ok_or_else(|| denied("names no device (dev=)".into()))?;
            let num = |key: &str| {
                opt(key)
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(1)
                    .max(1)
            };
            let count = match kind {
                kernel::lend::Kind::Rx => num("rings") * num("queues"),
                kernel::lend::Kind::Tx => num("queues"),
            };
            if count > MAX_LENT_PER_NODE {
                return Err(denied(format!(
                    "asks for {count} sockets (rings x queues); at most {MAX_LENT_PER_NODE} are lent for one node"
                )));
            }
            let filter = match kind {
                kernel::lend::Kind::Rx => {
                    let order = chain_order(&gr.chain);
                    let exprs: Vec<String> = order[k + 1..]
                        .iter()
                        .map_while(|&ti| bpf_expr(&gr.chain.nodes[ti].kind))
                        .collect();
                    match exprs.len() {
                        0 => None,
                        1 => exprs.into_iter().next(),
                        _ => Some(
                            exprs
                                .iter()
                                .map(|e| format!("({e})"))
                                .collect::<Vec<_>>()
                                .join(" and "),
                        ),
                    }
                }
                kernel::lend::Kind::Tx => None,
            };
            out.push(Lend {
                node: n.id,
                kind,
                dev,
                filter,
                count,
            });
        }
        Ok(out)
    }

    /// Templates whose filters after a granted `rx` are not all kernel filters (`bpf`):
    /// what those filters hide, a client who subverts its own worker can see (it runs as
    /// the client). The daemon says so when it loads the policy.
    pub fn warnings(&self) -> Vec<String> {
        self.grants
            .iter()
            .filter_map(|gr| {
                let order = chain_order(&gr.chain);
                let rx = order.iter().position(|&i| {
                    matches!(&gr.chain.nodes[i].kind, NodeKind::Filter { filter, .. } if filter == "rx")
                })?;
                let user: Vec<String> = order[rx + 1..]
                    .iter()
                    .skip_while(|&&i| bpf_expr(&gr.chain.nodes[i].kind).is_some())
                    .map(|&i| lang::label::base_name(&gr.chain.nodes[i]))
                    .collect();
                (!user.is_empty()).then(|| format!("policy: template `{}`: {} run in user space, in the client's own worker, after the kernel's filter; a client can read what reaches them (the kernel enforces the device and the template's bpf filters only)", gr.template, user.join(", ")))
            })
            .collect()
    }
}

/// The pcap-filter expression of a `bpf` node.
fn bpf_expr(k: &NodeKind) -> Option<String> {
    match k {
        NodeKind::Filter {
            filter,
            params,
            options,
            ..
        } if filter == "bpf" => lang::label::arg(params, options, "expr").map(str::to_string),
        _ => None,
    }
}

fn is_chain(g: &Graph) -> bool {
    g.nodes
        .iter()
        .all(|n| g.out_edges(n.id).count() <= 1 && g.in_edges(n.id).count() <= 1)
        && g.edges.len() + 1 == g.nodes.len()
}

/// The template's nodes in chain order.
fn chain_order(t: &Graph) -> Vec<usize> {
    let mut order = Vec::new();
    let mut at = t.sources().first().copied();
    while let Some(i) = at {
        order.push(i);
        at = t.out_edges(i).next().map(|e| e.to);
    }
    order
}

/// Whether the template chain covers node `at` of `g` (see the module docs).
fn covers(t: &Graph, g: &Graph, at: usize) -> bool {
    covers_at(t, g, at).is_some()
}

/// Where in the template chain (its k-th node) node `at` of `g` is covered, if it is.
fn covers_at(t: &Graph, g: &Graph, at: usize) -> Option<usize> {
    let order = chain_order(t);
    order.iter().enumerate().position(|(k, &ti)| {
        if !same(&t.nodes[ti].kind, &g.nodes[at].kind) {
            return false;
        }
        // Forward: each node before the template's last has exactly one way out, into the
        // next template node, with the template's selector.
        let mut cur = at;
        for w in order[k..].windows(2) {
            let outs: Vec<_> = g.out_edges(cur).collect();
            let t_edge = t.out_edges(w[0]).next().expect("chain");
            if outs.len() != 1
                || outs[0].sel != t_edge.sel
                || !same(&t.nodes[w[1]].kind, &g.nodes[outs[0].to].kind)
            {
                return false;
            }
            cur = outs[0].to;
        }
        // Backward: each node after the template's first has exactly one way in.
        let mut cur = at;
        for w in order[..=k].windows(2).rev() {
            let ins: Vec<_> = g.in_edges(cur).collect();
            let t_edge = t.in_edges(w[1]).next().expect("chain");
            if ins.len() != 1
                || ins[0].sel != t_edge.sel
                || !same(&t.nodes[w[0]].kind, &g.nodes[ins[0].from].kind)
            {
                return false;
            }
            cur = ins[0].from;
        }
        true
    })
}

/// Same filter, parameters and options (placement and names aside).
fn same(a: &NodeKind, b: &NodeKind) -> bool {
    match (a, b) {
        (
            NodeKind::Filter {
                filter: fa,
                params: pa,
                options: oa,
                ..
            },
            NodeKind::Filter {
                filter: fb,
                params: pb,
                options: ob,
                ..
            },
        ) => {
            let opts = |o: &[(String, String)]| {
                let mut v: Vec<(String, String)> = o.to_vec();
                v.sort();
                v
            };
            fa == fb && pa == pb && opts(oa) == opts(ob)
        }
        (NodeKind::Unix { argv: a, .. }, NodeKind::Unix { argv: b, .. }) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Graph {
        lang::parse(t, &catalog::Natives).unwrap_or_else(|d| panic!("{d}"))
    }

    fn privileged(f: &str) -> Option<&'static str> {
        catalog::find(f).and_then(|s| s.privilege)
    }

    const POLICY: &str = r#"
[[grant]]
users = ["65534"]
template = 'rx dev=veth0 | bpf "udp port 53"'
mode = "0640"
"#;

    fn nobody() -> Cred {
        Cred {
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
        }
    }

    #[test]
    fn the_documented_format_parses_and_names_every_key() {
        let ex = format_example();
        let p = Policy::parse(ex, "FORMAT", &catalog::Natives).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.grants.len(), 1);
        assert_eq!(p.grants[0].mode, 0o640);
        assert_eq!(
            p.limits,
            Limits::default(),
            "the example gives the defaults"
        );
        // Every key the parser takes is in the example (the file's structs deny unknown
        // keys, so a misspelt one fails the parse above), and described above it.
        let doc = &FORMAT[..FORMAT.len() - ex.len()];
        for key in [
            "users",
            "groups",
            "template",
            "mode",
            "connections_per_user",
            "unactivated_runs_per_user",
            "runs_per_user",
            "max_ring",
            "frame_timeout_s",
        ] {
            assert!(
                ex.contains(&format!("\n{key} = ")),
                "the example lacks {key}"
            );
            assert!(
                doc.contains(&format!("  {key} ")),
                "the format does not describe {key}"
            );
        }
        // A key the parser does not take is refused: the example is checked, not skimmed.
        let bad = ex.replace("runs_per_user = 64", "runs_per_usr = 64");
        assert!(Policy::parse(&bad, "bad", &catalog::Natives).is_err());
    }

    #[test]
    fn a_granted_template_is_the_only_way_to_raw_data() {
        let p = Policy::parse(POLICY, "test", &catalog::Natives).unwrap();
        let ok = |t: &str| p.check(&parse(t), &nobody(), &privileged);
        assert_eq!(
            ok(r#"rx dev=veth0 | bpf "udp port 53" | count"#).unwrap(),
            vec![(0, 0o640)]
        );
        assert_eq!(
            ok(r#"rx dev=veth0 space=1 | bpf "udp port 53" | dns | count"#)
                .unwrap()
                .len(),
            1
        );
        // No privileged filter: nothing to grant.
        assert!(ok("gen count=5 | count").unwrap().is_empty());
        // Another device, another filter, a bypass around the bpf, no bpf at all.
        for t in [
            r#"rx dev=eth0 | bpf "udp port 53" | count"#,
            r#"rx dev=veth0 | bpf "tcp" | count"#,
            r#"rx dev=veth0 | (bpf "udp port 53" + count) | count"#,
            "rx dev=veth0 | count",
        ] {
            let e = ok(t).unwrap_err();
            assert!(
                e.why.contains("CAP_NET_RAW") && e.why.contains("only these templates"),
                "{t}: {e}"
            );
            assert_eq!(e.node, "rx");
        }
        // Root needs no grant.
        assert!(p
            .check(
                &parse("rx dev=eth0 | count"),
                &Cred {
                    uid: 0,
                    gid: 0,
                    groups: vec![0]
                },
                &privileged
            )
            .is_ok());
    }

    #[test]
    fn without_a_policy_unprivileged_users_get_no_raw_capture() {
        let e = Policy::default()
            .check(&parse("rx dev=veth0 | count"), &nobody(), &privileged)
            .unwrap_err();
        assert!(
            e.why.contains("no policy file") && e.why.contains("uid 65534"),
            "{e}"
        );
        let e = Policy::default()
            .check(&parse("gen | tx dev=veth0"), &nobody(), &privileged)
            .unwrap_err();
        assert_eq!(e.node, "tx");
    }

    #[test]
    fn bad_policies_are_refused_naming_the_grant() {
        let cases = [
            (
                "[[grant]]\nusers=['65534']\ntemplate='rx dev=x | '\n",
                "does not parse",
            ),
            (
                "[[grant]]\nusers=['no-such-user-xyz']\ntemplate='rx dev=x'\n",
                "no user",
            ),
            ("[[grant]]\ntemplate='rx dev=x'\n", "grants to nobody"),
            (
                "[[grant]]\nusers=['0']\ntemplate='rx dev=x'\nmode='rw'\n",
                "expected octal",
            ),
            (
                "[[grant]]\nusers=['0']\ntemplate='rx dev=x | count + count'\n",
                "one chain",
            ),
            ("[[grunt]]\n", "unknown field"),
        ];
        for (text, want) in cases {
            let e = Policy::parse(text, "p.toml", &catalog::Natives)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.contains("p.toml"), "{text}: {e}");
        }
    }

    #[test]
    fn limits_have_defaults_and_bad_ones_are_refused_naming_the_key() {
        let p = Policy::parse("", "p.toml", &catalog::Natives).unwrap();
        assert_eq!(p.limits, Limits::default());
        let p = Policy::parse(
            "[limits]\nconnections_per_user = 4\nunactivated_runs_per_user = 2\nruns_per_user = 3\nmax_ring = \"256M\"\nframe_timeout_s = 1.5\n",
            "p.toml",
            &catalog::Natives,
        )
        .unwrap();
        assert_eq!(
            p.limits,
            Limits {
                connections_per_user: 4,
                unactivated_runs_per_user: 2,
                runs_per_user: 3,
                max_ring: 256 << 20,
                frame_timeout: std::time::Duration::from_millis(1500),
            }
        );
        assert_eq!(
            Policy::parse("[limits]\nmax_ring = 1048576\n", "p", &catalog::Natives)
                .unwrap()
                .limits
                .max_ring,
            1 << 20
        );
        for (text, want) in [
            (
                "[limits]\nconnections_per_user = 0\n",
                "connections_per_user = 0: expected a whole number",
            ),
            (
                "[limits]\nruns_per_user = \"many\"\n",
                "runs_per_user = \"many\"",
            ),
            (
                "[limits]\nmax_ring = \"huge\"\n",
                "max_ring = \"huge\": expected a size",
            ),
            ("[limits]\nmax_ring = 100\n", "at least 64K"),
            (
                "[limits]\nframe_timeout_s = 0\n",
                "frame_timeout_s = 0: expected seconds",
            ),
            ("[limits]\nconections_per_user = 3\n", "unknown field"),
        ] {
            let e = Policy::parse(text, "p.toml", &catalog::Natives)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.contains("p.toml"), "{text}: {e}");
        }
    }

    #[test]
    fn sizes_beyond_max_ring_are_refused_naming_the_limit() {
        let p = Policy::parse(
            "[limits]\nmax_ring = \"64M\"\n",
            "p.toml",
            &catalog::Natives,
        )
        .unwrap();
        let params = |f: &str| catalog::find(f).map(|s| s.params);
        let sizes = |t: &str, who: &Cred| p.check_sizes(&parse(t), who, &params);
        // The run's ring.
        let e = p.check_ring(1 << 62, &nobody()).unwrap_err();
        assert!(
            e.contains("4611686018427387904 bytes")
                && e.contains("limit max_ring = \"64M\"")
                && e.contains("uid 65534"),
            "{e}"
        );
        assert!(p.check_ring(64 << 20, &nobody()).is_ok());
        // A stream's ring, a declared memory parameter (by key and by position).
        for (t, node, what) in [
            ("gen | count size=1G", "count", "size=1G"),
            ("rx dev=lo blocks=4096 | count", "rx", "blocks=4096"),
            ("stdin size=2G | count", "stdin", "size=2G"),
            ("netin port=7000 window=1G | count", "netin", "window=1G"),
        ] {
            let e = sizes(t, &nobody()).unwrap_err();
            assert_eq!(e.node, node, "{t}");
            assert!(
                e.why.contains(what) && e.why.contains("max_ring"),
                "{t}: {e}"
            );
        }
        assert!(sizes("gen size=1500 | count size=16M", &nobody()).is_ok());
        assert!(sizes("rx dev=lo blocks=64 | count", &nobody()).is_ok());
        // Root is not limited.
        let root = Cred {
            uid: 0,
            gid: 0,
            groups: vec![0],
        };
        assert!(p.check_ring(1 << 40, &root).is_ok());
        assert!(sizes("gen | count size=1G", &root).is_ok());
    }

    #[test]
    fn a_sink_template_covers_what_comes_before_it() {
        let p = Policy::parse(
            "[[grant]]\ngroups=['65534']\ntemplate='strip payload | tx dev=veth0'\n",
            "t",
            &catalog::Natives,
        )
        .unwrap();
        assert!(p
            .check(
                &parse("gen | strip payload | tx dev=veth0"),
                &nobody(),
                &privileged
            )
            .is_ok());
        assert!(p
            .check(&parse("gen | tx dev=veth0"), &nobody(), &privileged)
            .is_err());
    }
}
