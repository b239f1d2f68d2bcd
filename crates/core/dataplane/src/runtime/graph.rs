//! A space's graph as surgery sees it: the arcs into a node, a node or an arc added, a
//! link through selectors, a pass-through bypassed, arcs taken away, what reaches what.
//! Live edits (`crate::edit`'s surgery) and moves of filters between spaces
//! (`crate::migrate`) are both written with these operations, and neither edits a node's
//! `out` list by itself.
//!
//! Owns: the node list's structure. Indices are stable: a node is never taken out of the
//! list, only marked `removed` (a pass-through) or left without arcs, so an index held
//! across an operation still names the same node. Does not own: whether an operation is
//! allowed (each edit's and each move's checks), or what a node's filter is.

use super::{Arc_, Carried, RtNode, Space};
use lang::Selector;

impl Space {
    /// Append `node` to the graph (no arcs into it yet); its index.
    pub(crate) fn add_node(&mut self, node: RtNode) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// A new arc `from -> to` after `from`'s others, arriving as in-arc `in_index`,
    /// counting afresh; its index among `from`'s out-arcs.
    pub(crate) fn add_arc(
        &mut self,
        from: usize,
        to: usize,
        sel: Selector,
        in_index: usize,
    ) -> usize {
        self.nodes[from].out.push(Arc_ {
            to,
            sel,
            in_index,
            carried: Carried::default(),
        });
        self.nodes[from].out.len() - 1
    }

    /// Out-arc `k` of `from` now leads to `to` as in-arc `in_index`: the arc stays the
    /// sender's (its selector and its count go on), only where it leads changes. The
    /// in-arc index it had.
    pub(crate) fn redirect(&mut self, from: usize, k: usize, to: usize, in_index: usize) -> usize {
        let a = &mut self.nodes[from].out[k];
        a.to = to;
        std::mem::replace(&mut a.in_index, in_index)
    }

    /// Out-arc `k` of `from` now leads to `to` as in-arc `in_index` with selector `sel`,
    /// counting afresh, in the same place among `from`'s arcs; the arc it was.
    pub(crate) fn replace_arc(
        &mut self,
        from: usize,
        k: usize,
        to: usize,
        sel: Selector,
        in_index: usize,
    ) -> Arc_ {
        let fresh = Arc_ {
            to,
            sel,
            in_index,
            carried: Carried::default(),
        };
        std::mem::replace(&mut self.nodes[from].out[k], fresh)
    }

    /// The arcs into node `i`: (from, index among `from`'s out-arcs).
    pub(crate) fn in_arcs(&self, i: usize) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        for (f, n) in self.nodes.iter().enumerate() {
            for (k, a) in n.out.iter().enumerate() {
                if a.to == i {
                    v.push((f, k));
                }
            }
        }
        v
    }

    /// The next free in-arc index of node `to` (a taken-away arc's index is not reused,
    /// so every other arc keeps what `Batch::from` says).
    pub(crate) fn next_in_index(&self, to: usize) -> usize {
        self.in_arcs(to)
            .iter()
            .map(|&(f, k)| self.nodes[f].out[k].in_index + 1)
            .max()
            .unwrap_or(0)
    }

    /// The live nodes that node `i`'s output reaches (`forward`) or that reach its input
    /// (`!forward`), looking through removed nodes, which pass blocks on: the arcs as the
    /// graph snapshot shows them. In arc order, each once.
    pub(crate) fn live_next(&self, i: usize, forward: bool) -> Vec<usize> {
        fn walk(s: &Space, j: usize, forward: bool, seen: &mut [bool], found: &mut Vec<usize>) {
            let next: Vec<usize> = if forward {
                s.nodes[j].out.iter().map(|a| a.to).collect()
            } else {
                s.in_arcs(j).into_iter().map(|(f, _)| f).collect()
            };
            for k in next {
                if std::mem::replace(&mut seen[k], true) {
                    continue;
                }
                if s.nodes[k].removed {
                    walk(s, k, forward, seen, found);
                } else {
                    found.push(k);
                }
            }
        }
        let mut found = Vec::new();
        let mut seen = vec![false; self.nodes.len()];
        seen[i] = true;
        walk(self, i, forward, &mut seen, &mut found);
        found
    }

    /// Whether blocks from node `a` can reach node `b` (or `a` is `b`).
    pub(crate) fn reaches(&self, a: usize, b: usize) -> bool {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack = vec![a];
        while let Some(j) = stack.pop() {
            if j == b {
                return true;
            }
            if !std::mem::replace(&mut seen[j], true) {
                stack.extend(self.nodes[j].out.iter().map(|a| a.to));
            }
        }
        false
    }

    /// Take the arcs `cut` chose away; the in-arc index the one into `to` had, if one
    /// went straight into it.
    pub(crate) fn take_arcs(&mut self, mut arcs: Vec<(usize, usize)>, to: usize) -> Option<usize> {
        // Highest index first, so the others' indices stay valid.
        arcs.sort_by_key(|a| std::cmp::Reverse(a.1));
        let mut index = None;
        for (u, k) in arcs {
            let a = self.nodes[u].out.remove(k);
            if a.to == to {
                index = Some(a.in_index);
            }
        }
        index
    }

    /// Link `from` to `to` (arriving there as in-arc `in_index`) through one arc per
    /// selector in `sels` (pass-through nodes between them); a plain arc if there is none.
    /// The first arc comes after `from`'s others.
    pub(crate) fn link(&mut self, from: usize, sels: Vec<Selector>, to: usize, in_index: usize) {
        let k = self.add_arc(from, to, Selector::All, in_index);
        self.relink(from, k, sels, to, in_index);
    }

    /// Out-arc `k` of `from` now leads to `to` (as in-arc `in_index`) through one arc per
    /// selector in `sels`, as [`Space::link`] makes them; the arc keeps its place among
    /// `from`'s arcs and its count.
    pub(crate) fn relink(
        &mut self,
        from: usize,
        k: usize,
        sels: Vec<Selector>,
        to: usize,
        in_index: usize,
    ) {
        let mut sels: Vec<Selector> = sels.into_iter().filter(|s| *s != Selector::All).collect();
        if sels.is_empty() {
            sels.push(Selector::All);
        }
        let last = sels.len() - 1;
        let mut at = from;
        for (j, sel) in sels.into_iter().enumerate() {
            let (next, idx) = if j == last {
                (to, in_index)
            } else {
                let spec = self.nodes[from].spec.clone();
                let label = format!("{}~{j}", self.nodes[from].label);
                (
                    self.add_node(RtNode::pass_through(label, spec, Vec::new())),
                    0,
                )
            };
            if j == 0 {
                self.redirect(from, k, next, idx);
                self.nodes[from].out[k].sel = sel;
            } else {
                self.add_arc(at, next, sel, idx);
            }
            at = next;
        }
    }

    /// Take the pass-through a move left at `t` out of the way when one arc can say what
    /// its two did (one of their selectors is `All`): its input's arc goes straight on,
    /// with the in-arc index of its output, and `t` is left with no arcs. Moving back and
    /// forth then never lengthens the way blocks take.
    pub(crate) fn bypass(&mut self, t: usize) {
        let ins = self.in_arcs(t);
        let ([(p, k)], [ref b]) = (&ins[..], &self.nodes[t].out[..]) else {
            return;
        };
        let (p, k) = (*p, *k);
        let a = &self.nodes[p].out[k];
        let sel = match (&a.sel, &b.sel) {
            (Selector::All, s) | (s, Selector::All) => s.clone(),
            _ => return,
        };
        let (to, in_index) = (b.to, b.in_index);
        self.redirect(p, k, to, in_index);
        self.nodes[p].out[k].sel = sel;
        self.nodes[t].out.clear();
    }
}
