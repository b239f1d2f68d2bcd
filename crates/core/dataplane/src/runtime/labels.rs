//! Labels of a run's nodes, and the report's rows folded into the nodes the user wrote.

use super::*;
use lang::{Graph, NodeKind};

pub(crate) use lang::label::label_of;

/// The labels of a run's nodes, placement-independent (see ARCHITECTURE.md, "Counters"):
/// the nodes the user wrote are labelled as [`label_of`] labels them in one space
/// (`count`, `count#2`, `count:tail`), counted over the whole graph; a node the rewrites
/// made for one of them (a copy of a replicated filter or of a capture engine's filter,
/// the split and join around replicas or engines) says whose it is: `deflate~2` (the
/// second copy), `deflate~split`, `bpf~join`. The report folds them into their user's
/// node ([`fold_internal`]). A derived node shares the span of the node it was made for
/// and comes after it (copies and template nodes are appended).
pub fn run_labels(g: &Graph) -> Vec<String> {
    let mut labels: Vec<String> = Vec::with_capacity(g.nodes.len());
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut copies = std::collections::HashMap::<usize, usize>::new();
    for n in &g.nodes {
        let derived_of = (n.span != lang::Span::default())
            .then(|| {
                g.nodes[..n.id.min(g.nodes.len())].iter().find(|m| {
                    m.span == n.span
                        && matches!(m.kind, NodeKind::Filter { .. } | NodeKind::Unix { .. })
                        && (base_name(m) == base_name(n)
                            || matches!(n.kind, NodeKind::Split { .. } | NodeKind::Join { .. }))
                })
            })
            .flatten();
        let label = match derived_of {
            Some(m) => {
                let role = match n.kind {
                    NodeKind::Split { .. } => "split".to_string(),
                    NodeKind::Join { .. } => "join".to_string(),
                    _ => {
                        let k = copies.entry(m.id).or_insert(1);
                        *k += 1;
                        k.to_string()
                    }
                };
                format!("{}~{role}", labels[m.id])
            }
            None => {
                // A shared prefix's subscription stands for the prefix's last node
                // (`__subscribe key=K as=tcp`, `control::prefix`).
                let base = match &n.kind {
                    NodeKind::Filter {
                        filter, options, ..
                    } if filter == SUBSCRIBE => options
                        .iter()
                        .find(|(k, _)| k == "as")
                        .map_or_else(|| base_name(n), |(_, v)| v.clone()),
                    _ => base_name(n),
                };
                let k = seen.entry(base.clone()).or_insert(0);
                *k += 1;
                // A replicated named node's first copy is `NAME.0`: its user's name.
                let name = n.name.as_deref().map(|x| x.strip_suffix(".0").unwrap_or(x));
                label_of(&base, name, *k)
            }
        };
        labels.push(label);
    }
    labels
}

/// The nodes the user wrote, in the order of `labels` ([`run_labels`] of a run's graph:
/// the order the pipeline reads, the order of a run in one space), each once: the
/// internal nodes (`deflate~2`, `bpf~join`, `__publish`) left out.
pub fn user_order(labels: &[String]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for l in labels {
        if l.contains('~') || l.starts_with("__") || v.contains(l) {
            continue;
        }
        v.push(l.clone());
    }
    v
}

/// `rows` (one per user node, [`fold_internal`]) in `order` ([`user_order`]): a row
/// `order` does not list (a node an edit inserted) follows the row an arc into it comes
/// from (`arcs`, folded), else the row it followed in `rows`. An empty `order` leaves
/// `rows` as they are.
pub fn in_order(rows: Vec<NodeReport>, arcs: &[ArcReport], order: &[String]) -> Vec<NodeReport> {
    if order.is_empty() {
        return rows;
    }
    // Sort keys, compared as sequences: a listed row's place; an unlisted row's input's
    // key and one more step.
    let mut keys: Vec<Option<Vec<usize>>> = rows
        .iter()
        .map(|r| {
            order
                .iter()
                .position(|l| *l == r.label)
                .map(|i| vec![i + 1])
        })
        .collect();
    let input = |r: &NodeReport| -> Option<usize> {
        arcs.iter()
            .filter(|a| a.to == ArcTarget::Node(r.label.clone()))
            .find_map(|a| rows.iter().position(|x| x.label == a.from))
    };
    for _ in 0..rows.len() {
        for k in 0..rows.len() {
            if keys[k].is_none() {
                if let Some(mut key) = input(&rows[k]).and_then(|i| keys[i].clone()) {
                    key.push(1);
                    keys[k] = Some(key);
                }
            }
        }
    }
    let mut prev = vec![0];
    let mut keyed: Vec<(Vec<usize>, NodeReport)> = rows
        .into_iter()
        .zip(keys)
        .map(|(r, k)| {
            let k = k.unwrap_or_else(|| {
                let mut p = prev.clone();
                p.push(1);
                p
            });
            prev = k.clone();
            (k, r)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, r)| r).collect()
}

pub use protocol::graph::user_label;

/// Fold the rows of a run's internal nodes into the node the user wrote ([`run_labels`],
/// [`user_label`]): one row per user node, in the order of the first row, labelled as in
/// one space with the spaces it ran in (`1,2`). Its counters are the sums of its members'
/// minus what went down the arcs among them (a replica's split to the copies, the copies
/// to the join): blocks in = what arcs from other nodes carried into it, blocks out = what
/// left it, and drops, made, ended the members' sums, so every row still adds up. A
/// join's made and ended that cancel (blocks it held and then let go) are netted. Arcs
/// are relabelled and summed per pair of user nodes; arcs among one node's members drop.
pub fn fold_internal(
    nodes: &[NodeReport],
    arcs: &[ArcReport],
) -> (Vec<NodeReport>, Vec<ArcReport>) {
    let user = |l: &str| user_label(l).0.to_string();
    let mut out: Vec<NodeReport> = Vec::new();
    let mut index = std::collections::HashMap::<String, usize>::new();
    for n in nodes {
        let (u, space) = user_label(&n.label);
        let u = u.to_string();
        let mut c = n.counters;
        // A line an internal node wrote (`__subscribe: 10 blocks received, ...`) is said
        // by the user's node it stands for (`bpf: 10 blocks received, ...`).
        let summary = n.summary.as_deref().map(|s| {
            s.lines()
                .map(|l| match l.split_once(": ") {
                    Some((head, rest)) if head.starts_with("__") && !head.contains(' ') => {
                        format!("{u}: {rest}")
                    }
                    _ => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        });
        // The split and join around copies run where the stream is, not the user's filter.
        let around = n.label.contains("~join") || n.label.contains("~split");
        let space = if around { "" } else { space };
        if around {
            let both = c.made.min(c.ended);
            c.made -= both;
            c.ended -= both;
        }
        match index.get(&u) {
            Some(&i) => {
                let r = &mut out[i];
                let a = &mut r.counters;
                a.blocks_in += c.blocks_in;
                a.bytes_in += c.bytes_in;
                a.blocks_out += c.blocks_out;
                a.bytes_out += c.bytes_out;
                a.drops += c.drops;
                a.made += c.made;
                a.ended += c.ended;
                a.nanos += c.nanos;
                a.lost += c.lost;
                if !space.is_empty() && !r.space.split(',').any(|s| s == space) {
                    r.space = if r.space.is_empty() {
                        space.to_string()
                    } else {
                        format!("{},{space}", r.space)
                    };
                }
                // Each copy's own summary (a capture engine's socket statistics) is kept,
                // one line each, even when two copies say the same (two engines that got
                // the same share of the flows).
                match (&mut r.summary, &summary) {
                    (None, s) => r.summary = s.clone(),
                    (Some(a), Some(b)) => *a = format!("{a}\n{b}"),
                    _ => {}
                }
                for k in &n.classes {
                    if !r.classes.contains(k) {
                        r.classes.push(*k);
                    }
                }
                r.classes.sort_unstable();
            }
            None => {
                index.insert(u.clone(), out.len());
                out.push(NodeReport {
                    label: u,
                    counters: c,
                    summary,
                    classes: n.classes.clone(),
                    space: if space.is_empty() && !around {
                        n.space.clone()
                    } else {
                        space.to_string()
                    },
                });
            }
        }
    }
    let mut folded: Vec<ArcReport> = Vec::new();
    for a in arcs {
        let from = user(&a.from);
        let to = match &a.to {
            ArcTarget::Node(l) => ArcTarget::Node(user(l)),
            t => t.clone(),
        };
        if to == ArcTarget::Node(from.clone()) {
            // Among one node's members: neither into nor out of it.
            if let Some(&i) = index.get(&from) {
                let c = &mut out[i].counters;
                c.blocks_in = c.blocks_in.saturating_sub(a.carried.blocks);
                c.bytes_in = c.bytes_in.saturating_sub(a.carried.bytes);
                c.blocks_out = c.blocks_out.saturating_sub(a.carried.blocks);
                c.bytes_out = c.bytes_out.saturating_sub(a.carried.bytes);
            }
            continue;
        }
        match folded.iter_mut().find(|b| b.from == from && b.to == to) {
            Some(b) => {
                b.carried.blocks += a.carried.blocks;
                b.carried.bytes += a.carried.bytes;
                for k in &a.rings {
                    if !b.rings.contains(k) {
                        b.rings.push(*k);
                    }
                }
            }
            None => folded.push(ArcReport {
                from,
                to,
                carried: a.carried,
                rings: a.rings.clone(),
            }),
        }
    }
    (out, folded)
}
