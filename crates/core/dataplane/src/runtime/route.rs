//! A batch's walk: a node's filter runs, and its output is routed along its arcs (the
//! classifier fast path; observers, taps and exported streams, handed the whole output
//! first), with the counters and clock kept.

use super::*;
use crate::filter::{Batch, Ctx, Filter};
use lang::Selector;

/// An empty vector of slices with `v`'s allocation, for slices of another lifetime (the
/// classifier path resolves each batch into one without allocating). Collecting a vector's
/// own `into_iter` reuses its allocation when the element layout is the same.
pub(super) fn recycle<'a, 'b>(mut v: Vec<&'a [u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter()
        .map(|_| -> &'b [u8] { unreachable!("the vector is empty") })
        .collect()
}

/// Charge the ticks since the `last` reading to `ticks`, and read anew.
#[inline]
pub(super) fn charge_to(clock: &quanta::Clock, last: &mut u64, ticks: &mut u64) {
    let now = clock.raw();
    *ticks += now.wrapping_sub(*last);
    *last = now;
}

/// Keep the tags whose class `admits` accepts, with their resolved bytes and `shared`
/// flags in step; returns the bytes kept.
pub(super) fn retain_resolved(
    batch: &mut Batch,
    data: &mut Vec<&[u8]>,
    admits: impl Fn(u16) -> bool,
) -> u64 {
    let mut j = 0;
    let mut bytes = 0;
    for i in 0..batch.tags.len() {
        let t = batch.tags[i];
        if admits(t.class) {
            bytes += t.len as u64;
            batch.tags[j] = t;
            batch.shared[j] = batch.shared[i];
            data[j] = data[i];
            j += 1;
        }
    }
    batch.tags.truncate(j);
    batch.shared.truncate(j);
    data.truncate(j);
    bytes
}

impl Space {
    /// Run `f` with node `i`'s filter and a context (disjoint borrows).
    pub(crate) fn with_filter<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut dyn Filter, &mut Ctx<'_>) -> R,
    ) -> R {
        let Space {
            nodes,
            store,
            warnings,
            stop,
            ..
        } = self;
        let node = &mut nodes[i];
        let mut cx = Ctx {
            store,
            name: &node.label,
            sessions: &mut node.sessions,
            warnings,
            stop,
        };
        f(node.filter.as_mut(), &mut cx)
    }

    /// Push a batch into node `i` (run its filter, then route).
    /// `bytes` is the batch's byte count, known to the caller from its routing pass.
    pub(super) fn push(
        &mut self,
        i: usize,
        mut batch: Batch,
        depth: usize,
        bytes: u64,
        from: usize,
    ) {
        batch.from = from;
        if depth > MAX_DEPTH {
            let l = self.nodes[i].label.clone();
            self.warnings.push(format!("{l}: blocks went round a loop more than {MAX_DEPTH} times; dropped (a loop without a bounding `for`?)"));
            let c = &mut self.nodes[i].c;
            c.blocks_in += batch.len() as u64;
            c.bytes_in += bytes;
            c.drops += batch.len() as u64;
            return;
        }
        if self.nodes[i].classifier {
            if let Some((last, batch, depth)) = self.classify_run(i, batch, depth, bytes) {
                self.route(last, batch, depth);
            }
            return;
        }
        self.process_one(i, batch, depth, bytes);
    }

    /// Node `i`'s filter processes the batch (the general path), then the batch is routed.
    pub(super) fn process_one(&mut self, i: usize, mut batch: Batch, depth: usize, bytes: u64) {
        {
            let c = &mut self.nodes[i].c;
            c.blocks_in += batch.len() as u64;
            c.bytes_in += bytes;
        }
        let took = batch.len();
        self.with_filter(i, |f, cx| f.process(cx, &mut batch));
        self.charge(i);
        let c = &mut self.nodes[i].c;
        match batch.len().cmp(&took) {
            std::cmp::Ordering::Greater => c.made += (batch.len() - took) as u64,
            std::cmp::Ordering::Less => c.ended += (took - batch.len()) as u64,
            std::cmp::Ordering::Equal => {}
        }
        self.route(i, batch, depth);
    }

    /// The classifier fast path. A batch entering classifier `i` is resolved once (every
    /// tag to its bytes); then `i` and the classifiers after it, as long as each is joined
    /// to the next by its only arc, each make one tight pass over the resolved batch
    /// ([`ClassifyBatch`]), and between two of them the arc's selector drops what it does
    /// not admit from tags and resolved bytes alike. Function calls between filters in
    /// one space, as in the thesis (5.2.1), with the bounds checks and lookups of turning
    /// a tag into bytes paid once per batch instead of once per filter. Counters and time
    /// are kept per filter as on the general path.
    ///
    /// Returns the last classifier of the run and the batch it emits (to route as usual),
    /// or `None` when nothing is left. A batch with a block that no longer resolves takes
    /// the general path (where such a block gets class 0).
    pub(super) fn classify_run(
        &mut self,
        i: usize,
        mut batch: Batch,
        mut depth: usize,
        mut bytes: u64,
    ) -> Option<(usize, Batch, usize)> {
        let Space {
            nodes,
            store,
            names,
            spare,
            clock,
            last,
            ..
        } = self;
        let mut data = recycle(std::mem::take(spare));
        let mut r = store.resolver();
        for t in &batch.tags {
            match r.data(t) {
                Ok(d) => data.push(d),
                Err(_) => break,
            }
        }
        if data.len() < batch.len() {
            *spare = recycle(data);
            self.process_one(i, batch, depth, bytes);
            return None;
        }
        let lookup = |s: &str| names.iter().find(|(n, _)| n == s).map(|(_, c)| *c);
        let mut cur = i;
        loop {
            let zeros = {
                let node = &mut nodes[cur];
                node.c.blocks_in += batch.len() as u64;
                node.c.bytes_in += bytes;
                let f = node
                    .filter
                    .as_classifier()
                    .expect("a classifier node's filter is a classifier");
                let zeros = f.classify_batch(&data, &mut batch.tags);
                node.watch.observe(&batch.tags);
                zeros
            };
            // The run goes on through this node's only arc into the next classifier.
            let node = &nodes[cur];
            let next = match node.out.as_slice() {
                [a] if !node.routes_by_class && nodes[a.to].classifier && depth < MAX_DEPTH => a,
                _ => break,
            };
            let before = batch.len();
            match &next.sel {
                Selector::All => {}
                Selector::Default if zeros == 0 => {}
                sel => bytes = retain_resolved(&mut batch, &mut data, |c| sel.admits(c, &lookup)),
            }
            let (to, from) = (next.to, next.in_index);
            let kept = batch.len();
            let node = &mut nodes[cur];
            node.c.drops += (before - kept) as u64;
            node.c.blocks_out += kept as u64;
            node.c.bytes_out += bytes;
            node.out[0].carried.blocks += kept as u64;
            node.out[0].carried.bytes += bytes;
            charge_to(clock, last, &mut node.ticks);
            if kept == 0 {
                *spare = recycle(data);
                self.recycle_batch(batch);
                return None;
            }
            cur = to;
            batch.from = from;
            depth += 1;
        }
        charge_to(clock, last, &mut nodes[cur].ticks);
        *spare = recycle(data);
        Some((cur, batch, depth))
    }

    /// Forward a node's output batch along its arcs: first to its observers (taps,
    /// exported streams), then down the others as their selectors say.
    pub(crate) fn route(&mut self, i: usize, batch: Batch, depth: usize) {
        self.nodes[i].watch.observe(&batch.tags);
        let observers = self.observe(i, &batch, depth);
        let n_out = self.nodes[i].out.len() - observers;
        if self.nodes[i].routes_by_class {
            self.route_by_branch(i, batch, depth);
            return;
        }
        if n_out == 0 {
            // A sink: everything ends here.
            self.nodes[i].c.ended += batch.len() as u64;
            self.recycle_batch(batch);
            return;
        }
        // Arcs into filters that take nothing now (a published stream without subscribers)
        // are skipped; with one arc left the batch moves on in place.
        let mut live = n_out;
        let mut only = 0;
        if n_out > 1 || observers > 0 {
            live = 0;
            for (k, a) in self.nodes[i].out.iter().enumerate() {
                let to = &self.nodes[a.to].filter;
                if !to.observes() && (n_out == 1 || to.accepts()) {
                    live += 1;
                    only = k;
                }
            }
            if live == 0 {
                self.nodes[i].c.drops += batch.len() as u64;
                return;
            }
        }
        if live == 1 {
            self.route_one(i, only, batch, depth);
        } else {
            self.multicast(i, batch, depth, live == n_out);
        }
    }

    /// Hand node `i`'s whole output to the observers on its arcs (taps, exported streams:
    /// `Filter::observes`), each a copy of the tags, every block shared; counted on their
    /// arcs only, not as the node's output. Returns how many arcs lead to observers.
    fn observe(&mut self, i: usize, batch: &Batch, depth: usize) -> usize {
        let mut observers = 0;
        for k in 0..self.nodes[i].out.len() {
            let (to, from) = (self.nodes[i].out[k].to, self.nodes[i].out[k].in_index);
            if !self.nodes[to].filter.observes() {
                continue;
            }
            observers += 1;
            if batch.is_empty() || !self.nodes[to].filter.accepts() {
                continue;
            }
            let mut b = self.spare_batch.take().unwrap_or_default();
            b.tags.extend_from_slice(&batch.tags);
            b.shared.resize(batch.len(), true);
            let bytes = batch.tags.iter().map(|t| t.len as u64).sum();
            self.carry(i, k, b.len(), bytes);
            self.push(to, b, depth + 1, bytes, from);
        }
        observers
    }

    /// Split: each block goes down the arc its branch names, and no other.
    fn route_by_branch(&mut self, i: usize, batch: Batch, depth: usize) {
        let n_out = self.nodes[i].out.len();
        let mut per: Vec<Batch> = (0..n_out).map(|_| Batch::default()).collect();
        for ((t, sh), k) in batch.tags.iter().zip(&batch.shared).zip(&batch.branch) {
            if let Some(b) = per.get_mut(*k as usize) {
                b.tags.push(*t);
                b.shared.push(*sh);
            }
        }
        let bytes = per
            .iter()
            .flat_map(|b| b.tags.iter())
            .map(|t| t.len as u64)
            .sum();
        // A block whose branch names an observer's arc (which had the whole output) goes
        // no further.
        for (k, b) in per.iter_mut().enumerate() {
            if self.nodes[self.nodes[i].out[k].to].filter.observes() {
                b.clear();
            }
        }
        let routed: usize = per.iter().map(|b| b.len()).sum();
        // A block whose branch names no arc goes nowhere: a drop.
        self.nodes[i].c.drops += (batch.len() - routed) as u64;
        self.count_out(i, routed, bytes);
        for (k, b) in per.into_iter().enumerate() {
            if !b.is_empty() {
                let (to, from) = (self.nodes[i].out[k].to, self.nodes[i].out[k].in_index);
                let bytes = b.tags.iter().map(|t| t.len as u64).sum();
                self.carry(i, k, b.len(), bytes);
                self.push(to, b, depth + 1, bytes, from);
            }
        }
    }

    /// The common linear case, one arc `only` taking blocks: filter in place and move
    /// the batch, no allocation. One pass: drop what the arc does not admit, and count
    /// the bytes kept.
    fn route_one(&mut self, i: usize, only: usize, mut batch: Batch, depth: usize) {
        let names = &self.names;
        let lookup = |s: &str| names.iter().find(|(n, _)| n == s).map(|(_, c)| *c);
        let before = batch.len();
        let sel = &self.nodes[i].out[only].sel;
        let bytes = match sel {
            Selector::All => batch.tags.iter().map(|t| t.len as u64).sum(),
            // The plain `|`: a tight loop, no selector dispatch per tag.
            Selector::Default => batch.retain_counting(|t| t.class != 0),
            _ => batch.retain_counting(|t| sel.admits(t.class, &lookup)),
        };
        let kept = batch.len();
        self.nodes[i].c.drops += (before - kept) as u64;
        self.count_out(i, kept, bytes);
        if kept > 0 {
            let (to, from) = (self.nodes[i].out[only].to, self.nodes[i].out[only].in_index);
            self.carry(i, only, kept, bytes);
            self.push(to, batch, depth + 1, bytes, from);
        } else {
            self.recycle_batch(batch);
        }
    }

    /// Multicast: each arc gets the tags its selector admits (arcs into filters that take
    /// nothing now get none, unless `all_live`; arcs into observers none: they had the
    /// whole output). A block that goes down more than one arc
    /// is shared until its last arc (write isolation).
    fn multicast(&mut self, i: usize, batch: Batch, depth: usize, all_live: bool) {
        let names = &self.names;
        let lookup = |s: &str| names.iter().find(|(n, _)| n == s).map(|(_, c)| *c);
        let nodes = &self.nodes;
        let admits: Vec<Vec<bool>> = nodes[i]
            .out
            .iter()
            .map(|a| {
                let to = &nodes[a.to].filter;
                let on = !to.observes() && (all_live || to.accepts());
                batch
                    .tags
                    .iter()
                    .map(|t| on && a.sel.admits(t.class, &lookup))
                    .collect()
            })
            .collect();
        let mut remaining: Vec<usize> = (0..batch.len())
            .map(|j| admits.iter().filter(|a| a[j]).count())
            .collect();
        let dropped = remaining.iter().filter(|r| **r == 0).count();
        self.nodes[i].c.drops += dropped as u64;
        // Each block out counts once, however many arcs it goes down (the arcs count
        // their own).
        let bytes = batch
            .tags
            .iter()
            .zip(&remaining)
            .filter(|(_, r)| **r > 0)
            .map(|(t, _)| t.len as u64)
            .sum();
        self.count_out(i, batch.len() - dropped, bytes);
        for (k, adm) in admits.iter().enumerate() {
            let mut sub = Batch::with_capacity(batch.len());
            let mut sub_bytes = 0;
            for j in 0..batch.len() {
                if adm[j] {
                    remaining[j] -= 1;
                    sub.tags.push(batch.tags[j]);
                    sub.shared.push(batch.shared[j] || remaining[j] > 0);
                    sub_bytes += batch.tags[j].len as u64;
                }
            }
            if !sub.is_empty() {
                let (to, from) = (self.nodes[i].out[k].to, self.nodes[i].out[k].in_index);
                self.carry(i, k, sub.len(), sub_bytes);
                self.push(to, sub, depth + 1, sub_bytes, from);
            }
        }
    }

    /// Charge the time since the last reading to node `i`.
    #[inline]
    pub(crate) fn charge(&mut self, i: usize) {
        charge_to(&self.clock, &mut self.last, &mut self.nodes[i].ticks);
    }

    /// Start timing afresh (before a source's pull: what came before is nobody's).
    #[inline]
    pub(crate) fn restart_clock(&mut self) {
        self.last = self.clock.raw();
    }

    /// Keep a batch that reached its end for the next source batch.
    #[inline]
    pub(super) fn recycle_batch(&mut self, mut batch: Batch) {
        if self.spare_batch.is_none() && batch.tags.capacity() >= BATCH {
            batch.clear();
            self.spare_batch = Some(batch);
        }
    }

    /// Count `blocks` (`bytes`) down node `i`'s arc `k`.
    #[inline]
    pub(super) fn carry(&mut self, i: usize, k: usize, blocks: usize, bytes: u64) {
        let c = &mut self.nodes[i].out[k].carried;
        c.blocks += blocks as u64;
        c.bytes += bytes;
    }

    /// Node `i` emits blocks it was not handed (a source's batch, a flush, a Unix
    /// command's output): counted as made, then routed.
    pub(crate) fn emit(&mut self, i: usize, batch: Batch, depth: usize) {
        self.nodes[i].c.made += batch.len() as u64;
        self.route(i, batch, depth);
    }

    pub(super) fn count_out(&mut self, i: usize, blocks: usize, bytes: u64) {
        let c = &mut self.nodes[i].c;
        c.blocks_out += blocks as u64;
        c.bytes_out += bytes;
    }
}
