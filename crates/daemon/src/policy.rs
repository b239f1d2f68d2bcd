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
//! ```toml
//! [[grant]]
//! users = ["nobody"]              # names or numeric uids
//! groups = ["netdev"]             # names or numeric gids
//! template = 'rx dev=veth0 | bpf "udp port 53"'
//! mode = "0640"                   # the captured stream's mode (default 0600)
//! ```

use lang::{Graph, NodeKind};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    grant: Vec<RawGrant>,
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

/// The policy: where it came from and its grants.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub path: Option<PathBuf>,
    pub grants: Vec<Grant>,
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
        Ok(Policy { path: None, grants })
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
                        node: dataplane::runtime::base_name(n),
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
    let order = chain_order(t);
    order.iter().enumerate().any(|(k, &ti)| {
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
        lang::parse(t, &filters::Natives).unwrap_or_else(|d| panic!("{d}"))
    }

    fn privileged(f: &str) -> Option<&'static str> {
        filters::find(f).and_then(|s| s.privilege)
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
    fn a_granted_template_is_the_only_way_to_raw_data() {
        let p = Policy::parse(POLICY, "test", &filters::Natives).unwrap();
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
            let e = Policy::parse(text, "p.toml", &filters::Natives)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.contains("p.toml"), "{text}: {e}");
        }
    }

    #[test]
    fn a_sink_template_covers_what_comes_before_it() {
        let p = Policy::parse(
            "[[grant]]\ngroups=['65534']\ntemplate='strip payload | tx dev=veth0'\n",
            "t",
            &filters::Natives,
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
