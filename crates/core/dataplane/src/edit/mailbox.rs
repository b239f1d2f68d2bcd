//! A space's mailbox: edits and taps posted by other threads, served at the quiescent point.

use super::*;
use crate::runtime::{Factory, NodeReport, Space};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A space's mailbox: edits posted by other threads, taken by the run loop at its
/// quiescent point, and the counters it last published.
pub(crate) struct Mailbox {
    /// Whether `state.queue` may hold edits: the run loop's one relaxed load per round.
    /// SYNC: written only with `state` locked, so it agrees with the queue once the lock
    /// is taken; the run loop reads the queue only under the lock, so a stale `false`
    /// only delays an edit to the next round, and a stale `true` finds the queue empty.
    pub(super) pending: AtomicBool,
    pub(super) state: Mutex<State>,
    pub(super) snapshot: Mutex<Vec<NodeReport>>,
    /// The same counters with the space's arcs and channel heads, as a process space
    /// sends them (`spaces::protocol::live_text`).
    pub(super) live: Mutex<String>,
    /// The graph as the run loop last published it (at the start and after each edit).
    pub(super) graph: Mutex<Vec<SnapNode>>,
    /// The run's filters in transit between spaces (shared by its mailboxes).
    pub(super) board: Arc<crate::migrate::Board>,
    /// Wakes the space while it sleeps on its readiness handle (set by its run loop).
    pub(super) waker: Mutex<Option<crate::readiness::Waker>>,
}

pub(super) type Reply = mpsc::Sender<Result<Applied, EditError>>;

/// A tap to put on a node or take off (see [`EditHandle::tap`]).
pub(super) enum TapJob {
    On {
        label: String,
        tap: Box<crate::tap::Tap>,
        reply: mpsc::Sender<Result<(), EditError>>,
    },
    Off {
        id: u64,
    },
    /// Put a shared tap on `label` if `tap` is given, then add `sub` to shared tap `tap_id`.
    Subscribe(Box<SubscribeJob>),
    Unsubscribe {
        id: u64,
    },
}

pub(super) struct SubscribeJob {
    pub(super) label: String,
    pub(super) tap: Option<Box<crate::tap::Tap>>,
    pub(super) tap_id: u64,
    pub(super) program: crate::tap::Program,
    pub(super) sub: crate::tap::Subscriber,
    pub(super) reply: mpsc::Sender<Result<(), EditError>>,
}

/// A filter to move across channel `ch` (see `crate::migrate`): `down` from the space
/// the mailbox serves into the channel's consumer, else up from the consumer into it.
pub(super) struct MoveJob {
    pub(super) ch: usize,
    pub(super) down: bool,
    pub(super) label: String,
    pub(super) reply: mpsc::Sender<Result<String, EditError>>,
}

pub(super) struct State {
    /// Edits with the labels of the run's other spaces when each was posted.
    pub(super) queue: Vec<(u64, Edit, Reply, Vec<String>)>,
    pub(super) taps: Vec<TapJob>,
    pub(super) moves: Vec<MoveJob>,
    pub(super) ended: bool,
    pub(super) next: u64,
}

/// Lock, whatever a panicking holder left: the state is a queue and a flag, consistent
/// between statements.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Mailbox {
    pub(super) fn new(snapshot: Vec<NodeReport>, board: Arc<crate::migrate::Board>) -> Mailbox {
        Mailbox {
            board,
            pending: AtomicBool::new(false),
            state: Mutex::new(State {
                queue: Vec::new(),
                taps: Vec::new(),
                moves: Vec::new(),
                ended: false,
                next: 0,
            }),
            snapshot: Mutex::new(snapshot),
            live: Mutex::new(String::new()),
            graph: Mutex::new(Vec::new()),
            waker: Mutex::new(None),
        }
    }

    /// The run loop sleeps on its readiness handle: `w` wakes it when a job is posted.
    pub(crate) fn set_waker(&self, w: crate::readiness::Waker) {
        *lock(&self.waker) = Some(w);
    }

    /// A job was posted: wake the space if it sleeps.
    pub(super) fn ring(&self) {
        if let Some(w) = lock(&self.waker).as_ref() {
            w.wake();
        }
    }

    pub(crate) fn board(&self) -> &crate::migrate::Board {
        &self.board
    }

    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// Apply every posted edit to `space` (the run loop calls this between source
    /// batches), publish the counters after each, and answer.
    pub(crate) fn serve(&self, space: &mut Space, factory: &dyn Factory) {
        let (edits, taps, moves) = {
            let mut st = lock(&self.state);
            self.pending.store(false, Ordering::Relaxed);
            (
                std::mem::take(&mut st.queue),
                std::mem::take(&mut st.taps),
                std::mem::take(&mut st.moves),
            )
        };
        for job in moves {
            let r = if job.down {
                space.send_down(job.ch, Some(&job.label), &self.board, factory)
            } else {
                space.pull_up(job.ch, Some(&job.label), &self.board)
            };
            space.restart_clock();
            if r.is_ok() {
                self.publish_graph(space);
            }
            let _ = job.reply.send(r);
        }
        // Taps are nodes of the graph: it changes as they go on and off.
        let tapped = !taps.is_empty();
        for job in taps {
            match job {
                TapJob::On { label, tap, reply } => {
                    let _ = reply.send(space.tap_on(&label, *tap));
                }
                TapJob::Off { id } => space.tap_off(id),
                TapJob::Subscribe(job) => {
                    let SubscribeJob {
                        label,
                        tap,
                        tap_id,
                        program,
                        sub,
                        reply,
                    } = *job;
                    let r = match tap {
                        Some(t) => space.tap_on(&label, *t),
                        None => Ok(()),
                    };
                    let _ = reply.send(r.and_then(|_| space.subscribe(tap_id, program, sub)));
                }
                TapJob::Unsubscribe { id } => space.unsubscribe(id),
            }
        }
        if tapped {
            self.publish_graph(space);
        }
        for (_, edit, reply, elsewhere) in edits {
            space.elsewhere = elsewhere;
            let r = space.edit(&edit, factory);
            // The edit's time is nobody's.
            space.restart_clock();
            self.publish(space);
            if r.is_ok() {
                self.publish_graph(space);
            }
            let _ = reply.send(r);
        }
    }

    /// The run loop's counters, for [`EditHandle::report`], and its nodes, arcs and
    /// channel heads as protocol text, for [`EditHandle::table`].
    pub(crate) fn publish(&self, space: &Space) {
        *lock(&self.snapshot) = space.report();
        *lock(&self.live) = crate::spaces::protocol::live_text(space);
    }

    /// The space's graph, for [`EditHandle::graph`] (the run loop publishes it when the
    /// run starts; `serve` after each applied edit).
    pub(crate) fn publish_graph(&self, space: &Space) {
        *lock(&self.graph) = space.graph_snapshot();
    }

    /// The run is ending: refuse what is posted and what comes.
    pub(crate) fn close(&self) {
        let (edits, taps, moves) = {
            let mut st = lock(&self.state);
            st.ended = true;
            self.pending.store(false, Ordering::Relaxed);
            (
                std::mem::take(&mut st.queue),
                std::mem::take(&mut st.taps),
                std::mem::take(&mut st.moves),
            )
        };
        for job in moves {
            let _ = job.reply.send(Err(EditError::Ended));
        }
        for job in taps {
            match job {
                TapJob::On { reply, .. } => {
                    let _ = reply.send(Err(EditError::Ended));
                }
                TapJob::Subscribe(j) => {
                    let _ = j.reply.send(Err(EditError::Ended));
                }
                _ => {}
            }
        }
        for (_, _, reply, _) in edits {
            let _ = reply.send(Err(EditError::Ended));
        }
    }

    /// Post a tap job; `Err(Ended)` once the run is over.
    pub(super) fn post_tap(&self, job: TapJob) -> Result<(), EditError> {
        let mut st = lock(&self.state);
        if st.ended {
            return Err(EditError::Ended);
        }
        st.taps.push(job);
        self.pending.store(true, Ordering::Relaxed);
        drop(st);
        self.ring();
        Ok(())
    }

    /// Post `edit` and wait for its answer. On timeout an edit the run loop has not taken
    /// yet is withdrawn (nothing changed); one it has taken is waited for, so the caller
    /// never sees a timeout for an edit that applied.
    pub(super) fn post(
        &self,
        edit: Edit,
        elsewhere: Vec<String>,
        timeout: Duration,
    ) -> Result<Applied, EditError> {
        let (tx, rx) = mpsc::channel();
        let id = {
            let mut st = lock(&self.state);
            if st.ended {
                return Err(EditError::Ended);
            }
            let id = st.next;
            st.next += 1;
            st.queue.push((id, edit, tx, elsewhere));
            self.pending.store(true, Ordering::Relaxed);
            id
        };
        self.ring();
        self.answer(&rx, timeout, |st| {
            let k = st.queue.iter().position(|(i, ..)| *i == id)?;
            st.queue.remove(k);
            Some(())
        })
    }

    /// Wait at most `timeout` for the answer to a job posted to this mailbox. On timeout
    /// `withdraw` takes the job back if the run loop has not taken it yet (nothing
    /// changed: `Timeout`); one it has taken is waited for, so the caller never sees a
    /// timeout for a job that was done.
    pub(super) fn answer<T>(
        &self,
        rx: &mpsc::Receiver<Result<T, EditError>>,
        timeout: Duration,
        withdraw: impl FnOnce(&mut State) -> Option<()>,
    ) -> Result<T, EditError> {
        match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(EditError::Ended),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if withdraw(&mut lock(&self.state)).is_some() {
                    return Err(EditError::Timeout(timeout));
                }
                // Taken: it is being done right now.
                rx.recv().unwrap_or(Err(EditError::Ended))
            }
        }
    }

    pub(super) fn snapshot(&self) -> Vec<NodeReport> {
        lock(&self.snapshot).clone()
    }

    pub(super) fn graph(&self) -> Vec<SnapNode> {
        lock(&self.graph).clone()
    }
}
