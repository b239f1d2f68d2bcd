//! What a run of several spaces reports: the spaces' rows, arcs and channel heads joined
//! into the table the user reads (at the end of the run, and live through the edit handle).

use crate::runtime::NodeReport;

/// The outcome of a multi-space run.
#[derive(Default)]
pub struct SpacesReport {
    /// Per node, labelled with its space (`tcp@1`, `deflate@p2`) when the run had more
    /// than one.
    pub nodes: Vec<NodeReport>,
    /// The arcs between the nodes of `nodes`, each with what it carried (the run's own
    /// nodes looked through, channels joined: see [`crate::Space::arcs`]). An arc into a
    /// channel whose consumer reported nothing keeps [`crate::ArcTarget::Channel`].
    pub arcs: Vec<crate::ArcReport>,
    /// Per channel, the node its blocks reach in the consuming space (joined into
    /// `arcs` at the end of the run).
    pub heads: Vec<(usize, crate::ArcTarget)>,
    /// Per channel, how full its rings were when its producer last published (live
    /// tables; see [`crate::Space::channel_rings`]). An arc through channel `k` names
    /// `k` in [`crate::ArcReport::rings`].
    pub rings: Vec<(usize, protocol::graph::RingGauge)>,
    /// Where each space's run loop ran when it last published (live tables).
    pub sites: Vec<protocol::graph::SpaceSite>,
    pub warnings: Vec<String>,
    /// A space that died: which one, its filters, and why.
    pub died: Option<String>,
    pub failed: bool,
    /// The non-zero status the run's last command (a Unix command) exited with: the run's
    /// exit status, as a shell pipeline's.
    pub status: Option<u8>,
    /// Filters moved between spaces while the run ran, by `--chaos` (see
    /// [`crate::spaces::Spaces::set_chaos`]): down, up, and moves refused.
    pub chaos_moves: (u64, u64, u64),
}

impl SpacesReport {
    /// The table as the user reads it, from what the spaces reported (their nodes
    /// labelled `count@1` in a run of several, arcs, channel heads): the arcs into
    /// channels joined to the nodes behind them, the internal nodes folded into the node
    /// the user wrote ([`crate::runtime::fold_internal`]), the rows in `order` (the
    /// nodes the user wrote as the pipeline reads, [`crate::runtime::user_order`]; a row
    /// it does not list, a node an edit inserted, follows the row before it as the
    /// spaces listed them), warnings naming the user's node. The one mechanism behind the
    /// report at the end and the live table ([`crate::EditHandle::table`]).
    pub(crate) fn finish(&mut self, multi: bool, order: &[String]) {
        self.join_channels();
        if !multi {
            for n in &mut self.nodes {
                n.space = "0".into();
            }
        }
        let (nodes, arcs) = crate::runtime::fold_internal(&self.nodes, &self.arcs);
        self.nodes = crate::runtime::in_order(nodes, &arcs, order);
        self.arcs = arcs;
        // A warning a copy gave names the user's node (`tcpstream: ...`, not `tcpstream~2`).
        for w in &mut self.warnings {
            if let Some((head, rest)) = w.split_once(": ") {
                if head.contains('~') && !head.contains(' ') {
                    *w = format!("{}: {rest}", crate::runtime::user_label(head).0);
                }
            }
        }
    }

    /// Arcs into a channel lead to the node behind it, in the consuming space, through
    /// any spaces that only pass the blocks on (one arc per such node; a channel whose
    /// consumer reported nothing is left as it is).
    fn join_channels(&mut self) {
        let mut out = Vec::with_capacity(self.arcs.len());
        let mut todo = std::mem::take(&mut self.arcs);
        let mut rounds = 0;
        while !todo.is_empty() && rounds <= self.heads.len() {
            rounds += 1;
            for a in std::mem::take(&mut todo) {
                let crate::ArcTarget::Channel(k) = a.to else {
                    out.push(a);
                    continue;
                };
                let heads: Vec<&crate::ArcTarget> = self
                    .heads
                    .iter()
                    .filter(|h| h.0 == k)
                    .map(|h| &h.1)
                    .collect();
                if heads.is_empty() {
                    out.push(a);
                    continue;
                }
                for h in heads {
                    let mut rings = a.rings.clone();
                    if !rings.contains(&k) {
                        rings.push(k);
                    }
                    todo.push(crate::ArcReport {
                        to: h.clone(),
                        rings,
                        ..a.clone()
                    });
                }
            }
        }
        out.extend(todo);
        self.arcs = out;
    }

    /// How full the rings of an arc's channels are (see [`crate::ArcReport::rings`]):
    /// the fullest, every reader; `None` for an arc within one space (a call).
    pub fn gauge_of(&self, a: &crate::ArcReport) -> Option<protocol::graph::RingGauge> {
        let mut g: Option<protocol::graph::RingGauge> = None;
        for k in &a.rings {
            for (_, r) in self.rings.iter().filter(|(ch, _)| ch == k) {
                match &mut g {
                    Some(g) => g.merge(r),
                    None => g = Some(*r),
                }
            }
        }
        g
    }
}
