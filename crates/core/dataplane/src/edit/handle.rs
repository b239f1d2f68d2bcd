//! The handle through which other threads edit a running run and read its counters.

use super::*;
use crate::runtime::NodeReport;
use lang::edit::base_of;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Edits a running run from another thread, and reads its counters while it runs.
/// Clone it freely; it is `Send` and `Sync`. Made by [`EditHandle::new`] for one
/// [`Space`] ([`Space::run_with`]) or by `Spaces::edit_handle` for a run of several
/// ([`crate::spaces::Spaces::run_with`]).
#[derive(Clone)]
pub struct EditHandle {
    dir: Arc<Directory>,
}

/// A node's shared tap, as the handle keeps track of it.
pub(super) struct SharedTap {
    pub(super) label: String,
    pub(super) rings: crate::tap::TapRings,
    pub(super) subs: Vec<u64>,
}

pub(super) struct Directory {
    /// Shared taps (see [`EditHandle::subscribe`]): per node label, the tap's id, its
    /// rings and its subscribers.
    pub(super) shared: Mutex<Vec<SharedTap>>,
    /// The spaces of this process, by id, each with its mailbox.
    pub(super) local: Vec<(usize, Mailbox)>,
    /// Process spaces: their nodes' base names (edits there are refused, by name).
    pub(super) remote: Vec<(usize, Vec<String>)>,
    /// Labels carry their space (`count@1`), as in a multi-space report.
    pub(super) multi: bool,
    /// Process spaces' counters as they last sent them while running (every ~200 ms),
    /// labelled as in the run's report (`count@p1`), with their arcs and channel heads,
    /// by space id.
    pub(super) remote_counters: Mutex<Vec<(usize, crate::spaces::SpacesReport)>>,
    /// The nodes the user wrote, in the order the pipeline reads (see
    /// [`crate::spaces::SpacesReport::finish`]).
    pub(super) order: Vec<String>,
}

impl Default for EditHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl EditHandle {
    /// A handle for one space (space 0), to pass to [`Space::run_with`].
    pub fn new() -> EditHandle {
        Self::for_spaces(vec![(0, Vec::new())], Vec::new(), false, Vec::new())
    }

    pub(crate) fn for_spaces(
        local: Vec<(usize, Vec<NodeReport>)>,
        remote: Vec<(usize, Vec<String>)>,
        multi: bool,
        order: Vec<String>,
    ) -> EditHandle {
        let board = Arc::new(crate::migrate::Board::default());
        let local = local
            .into_iter()
            .map(|(id, r)| (id, Mailbox::new(r, board.clone())))
            .collect();
        EditHandle {
            dir: Arc::new(Directory {
                shared: Mutex::new(Vec::new()),
                local,
                remote,
                multi,
                remote_counters: Mutex::new(Vec::new()),
                order,
            }),
        }
    }

    /// Whether any space of this process has a filter (endpoints of channels aside).
    pub fn has_local_nodes(&self) -> bool {
        self.dir
            .local
            .iter()
            .any(|(_, m)| m.snapshot().iter().any(|r| !endpoint(&r.label)))
    }

    /// Process space `space`'s counters as it sent them (labels already suffixed
    /// `@pN`), replacing the ones before (see [`EditHandle::report`]).
    pub(crate) fn publish_remote(&self, space: usize, part: crate::spaces::SpacesReport) {
        let mut all = self.dir.remote_counters.lock().expect("not poisoned");
        match all.iter_mut().find(|(id, _)| *id == space) {
            Some(e) => e.1 = part,
            None => {
                all.push((space, part));
                all.sort_by_key(|e| e.0);
            }
        }
    }

    pub(crate) fn mailbox(&self, space: usize) -> Option<&Mailbox> {
        self.dir
            .local
            .iter()
            .find(|(id, _)| *id == space)
            .map(|(_, m)| m)
    }

    /// Apply `edit` to the running run at its next batch boundary, waiting at most
    /// `timeout` for the run to get there (see [`EditError::Timeout`]). The node is found
    /// by its label: `NODE@ID` names space ID; without it, the one space of this process
    /// that has the label. An edit naming several nodes (connect, disconnect, move) is
    /// refused with [`Refusal::Spaces`] if they are in different spaces.
    pub fn apply(&self, edit: Edit, timeout: Duration) -> Result<Applied, EditError> {
        let labels = edit.labels();
        let mut target = self.space_of(labels[0])?;
        for l in &labels[1..] {
            let other = self.space_of(l)?;
            if other != target {
                let (a, b) = (self.dir.local[target].0, self.dir.local[other].0);
                return Err(EditError::Refused {
                    label: format!("{} -> {l}", labels[0]),
                    why: Refusal::Spaces(
                        format!("{}@{a}", split_space(labels[0]).0),
                        format!("{}@{b}", split_space(l).0),
                    ),
                });
            }
            target = other;
        }
        let (id, mailbox) = (self.dir.local[target].0, &self.dir.local[target].1);
        // The labels of the run's other spaces, that a new node here must not take.
        let mut elsewhere: Vec<String> = self
            .dir
            .local
            .iter()
            .filter(|(i, _)| *i != id)
            .flat_map(|(_, m)| m.snapshot().into_iter().map(|r| r.label))
            .filter(|l| !endpoint(l))
            .collect();
        for (_, part) in self
            .dir
            .remote_counters
            .lock()
            .expect("not poisoned")
            .iter()
        {
            elsewhere.extend(
                part.nodes
                    .iter()
                    .map(|r| split_space(&r.label).0.to_string()),
            );
        }
        let mut applied = mailbox.post(edit, elsewhere, timeout)?;
        if self.dir.multi {
            applied.label = format!("{}@{id}", applied.label);
        }
        Ok(applied)
    }

    /// Move the running filter labelled `label` (as [`EditHandle::apply`] finds it) into
    /// space `to` of this process, across the one channel between them it is next to
    /// (see `crate::migrate`: down from the end of its space into the channel's consumer,
    /// or up from the start of its space into the channel's producer). Its state, session
    /// slots and counters move with it; no block is lost or reordered. Waits at most
    /// `timeout` for the space that acts to reach a batch boundary. Returns the filter's
    /// label where it was. A move down completes when the consumer reaches the marker (a
    /// report taken at once may still show the filter where it was).
    pub fn migrate(&self, label: &str, to: usize, timeout: Duration) -> Result<String, EditError> {
        let s = self.space_of(label)?;
        let (base, _) = split_space(label);
        let refuse = |why| {
            Err(EditError::Refused {
                label: label.to_string(),
                why,
            })
        };
        let Some(t) = self.dir.local.iter().position(|(id, _)| *id == to) else {
            return match self.dir.remote.iter().any(|(id, _)| *id == to) {
                true => refuse(Refusal::ProcessSpace(to)),
                false => refuse(Refusal::NoSpace(to.to_string())),
            };
        };
        let (from_snap, to_snap) = (self.dir.local[s].1.graph(), self.dir.local[t].1.graph());
        let Some(x) = from_snap.iter().position(|n| n.label == base) else {
            return Err(EditError::NoNode {
                label: base.to_string(),
                known: from_snap
                    .iter()
                    .filter(|n| n.channel.is_none())
                    .map(|n| n.label.clone())
                    .collect(),
            });
        };
        let has =
            |snap: &[SnapNode], end: (bool, usize)| snap.iter().any(|n| n.channel == Some(end));
        // Down: x feeds an egress whose ingress is in `to`.
        let down = from_snap[x]
            .out
            .iter()
            .find_map(|&o| match from_snap[o].channel {
                Some((true, ch)) if has(&to_snap, (false, ch)) => Some(ch),
                _ => None,
            });
        // Up: an ingress of a channel from `to` feeds x.
        let up = from_snap.iter().find_map(|n| match n.channel {
            Some((false, ch)) if n.out.contains(&x) && has(&to_snap, (true, ch)) => Some(ch),
            _ => None,
        });
        let (ch, is_down, acting) = match (down, up) {
            (Some(ch), _) => (ch, true, s),
            (None, Some(ch)) => (ch, false, t),
            (None, None) => return refuse(Refusal::NoChannel(to.to_string())),
        };
        let mailbox = &self.dir.local[acting].1;
        let (tx, rx) = mpsc::channel();
        {
            let mut st = lock(&mailbox.state);
            if st.ended {
                return Err(EditError::Ended);
            }
            st.moves.push(MoveJob {
                ch,
                down: is_down,
                label: base.to_string(),
                reply: tx,
            });
            mailbox.pending.store(true, Ordering::Relaxed);
        }
        mailbox.ring();
        mailbox.answer(&rx, timeout, |st| {
            let k = st
                .moves
                .iter()
                .position(|m| m.ch == ch && m.label == base)?;
            st.moves.remove(k);
            Some(())
        })
    }

    /// Tap the output of the node labelled `label` (as [`EditHandle::apply`] finds it):
    /// from the next batch it emits, every block it passes on is also copied into the
    /// tap's rings, which the returned [`crate::tap::TapRings`] give to a reader (see
    /// `crate::tap`). Take it off with [`EditHandle::untap`]. `data_bytes`: the size of
    /// the tap's data ring.
    pub fn tap(
        &self,
        label: &str,
        data_bytes: usize,
        timeout: Duration,
    ) -> Result<crate::tap::TapRings, EditError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mailbox = &self.dir.local[self.space_of(label)?].1;
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let (tap, rings) = crate::tap::Tap::create(id, split_space(label).0, data_bytes)
            .map_err(|e| EditError::Tap(e.to_string()))?;
        let (tx, rx) = mpsc::channel();
        mailbox.post_tap(TapJob::On {
            label: label.to_string(),
            tap: Box::new(tap),
            reply: tx,
        })?;
        match rx.recv_timeout(timeout) {
            Ok(r) => r.map(|_| rings),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(EditError::Ended),
            // The job stays queued: when the run gets to it, the tap is made and nobody
            // reads it; take it off now so that it is removed right after.
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = mailbox.post_tap(TapJob::Off { id });
                Err(EditError::Timeout(timeout))
            }
        }
    }

    /// Take tap `id` off (its readers see the end of the stream), or end subscription
    /// `id` (the shared tap goes when its last subscriber does). Nothing to do after the
    /// run ended.
    pub fn untap(&self, id: u64) {
        let mut shared = lock(&self.dir.shared);
        if let Some(k) = shared.iter().position(|t| t.subs.contains(&id)) {
            let t = &mut shared[k];
            t.subs.retain(|s| *s != id);
            let last = t.subs.is_empty();
            let tap = t.rings.id;
            if last {
                shared.remove(k);
            }
            drop(shared);
            for (_, m) in &self.dir.local {
                let _ = m.post_tap(if last {
                    TapJob::Off { id: tap }
                } else {
                    TapJob::Unsubscribe { id }
                });
            }
            return;
        }
        drop(shared);
        for (_, m) in &self.dir.local {
            let _ = m.post_tap(TapJob::Off { id });
        }
    }

    /// Subscribe to the output of node `label` through its shared tap (made on first use):
    /// from the next batch, every block its `program` keeps gets a tag in
    /// the subscriber's own tag ring, pointing at the one copy in the shared data ring.
    /// `program` is its classic BPF filter (empty: none; subscribers with equal programs
    /// share one verdict), and `classifier` evaluates the tap's programs together (used
    /// when this subscription makes the tap); `snap`: most bytes kept per block; `tag_slots`: the size of the
    /// subscriber's tag ring; `wake`: how its reader is woken. The returned rings' `id`
    /// ends it ([`EditHandle::untap`]).
    #[allow(clippy::too_many_arguments)]
    pub fn subscribe(
        &self,
        label: &str,
        program: crate::tap::Program,
        classifier: crate::tap::Classifier,
        snap: u32,
        tag_slots: usize,
        wake: crate::tap::Moderation,
        timeout: Duration,
    ) -> Result<crate::tap::TapRings, EditError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 32);
        let mailbox = &self.dir.local[self.space_of(label)?].1;
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let tap_err = |e: beltway::Error| EditError::Tap(e.to_string());
        // One subscription at a time per handle: the shared tap is made once.
        let mut shared = lock(&self.dir.shared);
        let (tap, rings) = match shared.iter().find(|t| t.label == label) {
            Some(t) => (None, t.rings.clone()),
            None => {
                let tap_id = NEXT.fetch_add(1, Ordering::Relaxed);
                let (tap, rings) = crate::tap::Tap::shared(
                    tap_id,
                    split_space(label).0,
                    crate::tap::DATA_BYTES,
                    classifier,
                )
                .map_err(tap_err)?;
                (Some(Box::new(tap)), rings)
            }
        };
        let (sub, sub_rings) =
            crate::tap::Subscriber::create(id, &rings, tag_slots, snap, wake).map_err(tap_err)?;
        let (tx, rx) = mpsc::channel();
        let fresh = tap.is_some();
        mailbox.post_tap(TapJob::Subscribe(Box::new(SubscribeJob {
            label: label.to_string(),
            tap,
            tap_id: rings.id,
            program,
            sub,
            reply: tx,
        })))?;
        let answer = match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(EditError::Ended),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = mailbox.post_tap(if fresh {
                    TapJob::Off { id: rings.id }
                } else {
                    TapJob::Unsubscribe { id }
                });
                Err(EditError::Timeout(timeout))
            }
        };
        if let Err(e) = answer {
            // A shared tap the run no longer has (its node went, or the tap stopped): forget
            // it, so that the next subscriber makes a new one.
            if !fresh && matches!(e, EditError::Tap(_)) {
                shared.retain(|t| t.label != label);
            }
            return Err(e);
        }
        match shared.iter_mut().find(|t| t.label == label) {
            Some(t) => t.subs.push(id),
            None => shared.push(SharedTap {
                label: label.to_string(),
                rings,
                subs: vec![id],
            }),
        }
        Ok(sub_rings)
    }

    /// The index in `dir.local` of the space of the node `label` names.
    pub(super) fn space_of(&self, label: &str) -> Result<usize, EditError> {
        let d = &self.dir;
        let (label, space) = split_space(label);
        let refused = |why| {
            Err(EditError::Refused {
                label: label.to_string(),
                why,
            })
        };
        match space {
            Some(s) => {
                if let Some(p) = s.strip_prefix('p').and_then(|p| p.parse::<usize>().ok()) {
                    return refused(Refusal::ProcessSpace(p));
                }
                match s
                    .parse::<usize>()
                    .ok()
                    .and_then(|id| d.local.iter().position(|(l, _)| *l == id))
                {
                    Some(t) => Ok(t),
                    None => refused(Refusal::NoSpace(s.to_string())),
                }
            }
            None if d.local.len() == 1 => Ok(0),
            None => {
                let has = |m: &Mailbox| m.snapshot().iter().any(|r| r.label == label);
                let found: Vec<usize> =
                    (0..d.local.len()).filter(|&k| has(&d.local[k].1)).collect();
                match found.as_slice() {
                    [one] => Ok(*one),
                    [] => {
                        if let Some((p, _)) = d
                            .remote
                            .iter()
                            .find(|(_, names)| names.iter().any(|n| n == base_of(label)))
                        {
                            return refused(Refusal::ProcessSpace(*p));
                        }
                        let known = self.report().into_iter().map(|r| r.label).collect();
                        Err(EditError::NoNode {
                            label: label.to_string(),
                            known,
                        })
                    }
                    more => Err(EditError::Ambiguous {
                        label: label.to_string(),
                        candidates: more
                            .iter()
                            .map(|&k| format!("{label}@{}", d.local[k].0))
                            .collect(),
                    }),
                }
            }
        }
    }

    /// The counters of every space of this process as their run loops last published
    /// them (every ~100 ms while running, after each edit, and at the end); labelled as
    /// in the run's report (`count@1` in a run of several spaces). Process spaces'
    /// counters follow, as each last sent them while running (about every 200 ms;
    /// labelled `count@p1` as in the report; absent until the first).
    pub fn report(&self) -> Vec<NodeReport> {
        let mut v = Vec::new();
        for (id, m) in &self.dir.local {
            for mut r in m.snapshot() {
                if endpoint(&r.label) {
                    continue;
                }
                if self.dir.multi {
                    r.label = format!("{}@{id}", r.label);
                }
                v.push(r);
            }
        }
        for (_, part) in self
            .dir
            .remote_counters
            .lock()
            .expect("not poisoned")
            .iter()
        {
            v.extend(part.nodes.iter().cloned());
        }
        v
    }

    /// The run's table as it runs: what its spaces last published ([`EditHandle::report`],
    /// with their arcs), joined across channels and folded as the report at the end
    /// folds it ([`crate::spaces::SpacesReport::finish`]): one row per node the user wrote,
    /// labelled as in one space, in the pipeline's order, with the spaces it runs in; the
    /// arcs between them. No summaries, warnings or status (those come at the end).
    pub fn table(&self) -> crate::spaces::SpacesReport {
        use crate::spaces::protocol::parse_report;
        let mut rep = crate::spaces::SpacesReport::default();
        for (id, m) in &self.dir.local {
            let suffix = if self.dir.multi {
                format!("@{id}")
            } else {
                String::new()
            };
            let from = rep.nodes.len();
            parse_report(&lock(&m.live), &mut rep, &suffix);
            // The classes seen leaving each node (the text does not carry them).
            let snap = m.snapshot();
            for n in &mut rep.nodes[from..] {
                if let Some(r) = snap
                    .iter()
                    .find(|r| format!("{}{suffix}", r.label) == n.label)
                {
                    n.classes = r.classes.clone();
                }
            }
        }
        for (_, part) in self
            .dir
            .remote_counters
            .lock()
            .expect("not poisoned")
            .iter()
        {
            rep.nodes.extend(part.nodes.iter().cloned());
            rep.arcs.extend(part.arcs.iter().cloned());
            rep.heads.extend(part.heads.iter().cloned());
            rep.rings.extend(part.rings.iter().cloned());
            rep.sites.extend(part.sites.iter().cloned());
        }
        rep.warnings.clear();
        rep.failed = false;
        rep.status = None;
        rep.finish(self.dir.multi, &self.dir.order);
        rep
    }

    /// The graph of the spaces of this process as their run loops last published it
    /// (when the run started, and after each applied edit; empty before the run starts),
    /// labelled as [`EditHandle::report`] labels nodes. Arcs through a channel between
    /// two of these spaces show as one arc between the real nodes; nodes in process
    /// spaces are absent, and so are the arcs to and from them.
    pub fn graph(&self) -> Vec<GraphNode> {
        let parts: Vec<(usize, Vec<SnapNode>)> = self
            .dir
            .local
            .iter()
            .map(|(id, m)| (*id, m.graph()))
            .collect();
        resolve(&parts, self.dir.multi)
    }
}
