//! Building spaces as one transaction (thesis 6.4): channels created and attached,
//! process spaces started and handed their rings, every space of this process built; a
//! failing step undoes the earlier ones. What a built run holds ([`Spaces`]) until it runs.

use super::place::{
    check_joins, labels_of, place, replicate, schedule_of, space_name, Placement, SpaceId,
    SpaceKind,
};
use super::protocol::{child_error, recv_msg, recv_ring, send_ring};
use super::split::{channel_config, split, WithChannels};
use crate::channel::{egress, ingress, ChannelConfig};
use crate::filter::Filter;
use crate::runtime::{base_name, span_of, BuildError, BuildErrorKind, Factory, Rollback, Space};
use crate::txn::{StepFailed, Transaction};
use beltway::RingRef;
use lang::{Edge, Graph, Hint};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

/// How to start a process space: this program with arguments (and environment variables,
/// for what must not be on a command line everyone can read) that make it call
/// [`run_process_space`] on the same pipeline; `--space ID --fd FD` are appended.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub exe: std::path::PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// What a build holds while it is under way: each construction step adds to it, and its
/// inverse takes that addition out again.
struct Building<'f> {
    /// The filter factory with the channels' endpoints, which space builds take out.
    chans: WithChannels<'f>,
    rings: HashMap<usize, (RingRef, RingRef)>,
    children: Vec<ChildSpace>,
    spaces: Vec<(SpaceId, Space)>,
}

/// A process space seen from the parent.
pub(super) struct ChildSpace {
    pub(super) id: SpaceId,
    pub(super) proc: std::process::Child,
    pub(super) sock: UnixStream,
}

impl Drop for ChildSpace {
    fn drop(&mut self) {
        // Whatever went wrong, no process space outlives the run.
        if let Ok(None) = self.proc.try_wait() {
            let _ = self.proc.kill();
        }
        let _ = self.proc.wait();
    }
}

/// Spaces built from one graph, ready to run.
pub struct Spaces {
    pub(super) spaces: Vec<(SpaceId, Space)>,
    pub(super) children: Vec<ChildSpace>,
    pub placement: Placement,
    /// Channels created (cross-space arcs).
    pub channels: usize,
    /// Each node's space and name (for messages).
    pub(super) labels: Vec<(SpaceId, String)>,
    /// Per space, the scheduling its hints ask for.
    pub(super) sched: HashMap<SpaceId, Option<(beltway::sys::Policy, &'static str, String)>>,
    /// The nodes the user wrote, as the pipeline reads ([`crate::runtime::user_order`]):
    /// the order of the report's rows whatever the placement.
    pub(super) order: Vec<String>,
}

impl Spaces {
    /// Place `g`, split it, create the channels, start the process spaces (if any, with
    /// `launcher`) and build every space; nothing runs yet. A build error anywhere stops
    /// and reaps the process spaces started so far, and names the filter.
    pub fn build(
        g: &Graph,
        factory: &dyn Factory,
        scratch: usize,
        cfg: ChannelConfig,
    ) -> Result<Spaces, BuildError> {
        Self::build_with(g, factory, scratch, cfg, None)
    }

    pub fn build_with(
        g: &Graph,
        factory: &dyn Factory,
        scratch: usize,
        cfg: ChannelConfig,
        launcher: Option<&Launcher>,
    ) -> Result<Spaces, BuildError> {
        Self::build_steps(g, factory, scratch, cfg, launcher, None)
    }

    /// The build as a transaction (thesis 6.4, [`crate::txn`]): creating each channel,
    /// starting each process space, receiving and handing over each channel's rings,
    /// attaching each consumer, building each space and each process space's `ready` is
    /// one step with its inverse (dropping a ring unmaps it, dropping a process space
    /// kills and reaps it, dropping a space unmaps its store). A failing step undoes the
    /// earlier ones, last first, and the error names the step and what was undone.
    ///
    /// `fail_at = Some(k)` injects a failure into step k (from 0), for tests of the
    /// rollback; past the last step it fails after all of them, saying how many there were.
    pub fn build_steps(
        g: &Graph,
        factory: &dyn Factory,
        scratch: usize,
        cfg: ChannelConfig,
        launcher: Option<&Launcher>,
        fail_at: Option<usize>,
    ) -> Result<Spaces, BuildError> {
        let g = &replicate(g, factory)?;
        let placement = place(g)?;
        check_joins(g, &placement, factory)?;
        let (parts, cross) = split(g, &placement);
        let run_labels = crate::runtime::run_labels(g);
        let here = |s: SpaceId| placement.kind(s) != SpaceKind::Process;
        // Channel errors name the consuming node.
        let at = |e: &Edge| (base_name(&g.nodes[e.to]), span_of(&g.nodes[e.to]));
        let chan_err = |e: &Edge, kind: BuildErrorKind| {
            BuildError::new(base_name(&g.nodes[e.to]), span_of(&g.nodes[e.to]), kind)
        };
        let ring_err =
            |e: &Edge, what: String, source| chan_err(e, BuildErrorKind::Channel { what, source });
        let handover_err =
            |e: &Edge, what: String, source| chan_err(e, BuildErrorKind::Handover { what, source });
        let building = Building {
            chans: WithChannels {
                inner: factory,
                endpoints: Mutex::new(HashMap::new()),
            },
            rings: HashMap::new(),
            children: Vec::new(),
            spaces: Vec::new(),
        };
        let mut t = Transaction::new(building);
        let step_no = std::cell::Cell::new(0usize);
        let inject = |(label, span): (String, Option<lang::Span>)| -> Result<(), BuildError> {
            let k = step_no.get();
            step_no.set(k + 1);
            if fail_at == Some(k) {
                return Err(BuildError::new(
                    label,
                    span,
                    BuildErrorKind::Injected { step: k },
                ));
            }
            Ok(())
        };
        let failed = |f: StepFailed<BuildError>| {
            let mut e = f.error;
            if !f.undone.is_empty() {
                e.rollback = Some(Rollback {
                    step: f.step,
                    undone: f.undone,
                });
            }
            e
        };
        for (k, e) in cross.iter().enumerate() {
            if here(placement.space[e.from]) {
                let same = here(placement.space[e.to]);
                t.step(
                    format!("create channel {k}"),
                    |b| {
                        inject(at(e))?;
                        let (tx, tr, d) =
                            egress(&format!("sl-ch{k}"), channel_config(g, e, cfg), same).map_err(
                                |x| ring_err(e, "cannot create a channel into it".into(), x),
                            )?;
                        b.chans
                            .endpoints
                            .lock()
                            .expect("not poisoned")
                            .insert((true, k), Box::new(tx) as Box<dyn Filter>);
                        b.rings.insert(k, (tr, d));
                        Ok(k)
                    },
                    |b, k| {
                        b.chans
                            .endpoints
                            .lock()
                            .expect("not poisoned")
                            .remove(&(true, k));
                        b.rings.remove(&k);
                    },
                )
                .map_err(failed)?;
            }
        }
        // Start the process spaces; each first sends the rings of the channels it feeds.
        for (&id, _) in placement
            .kinds
            .iter()
            .filter(|(_, &k)| k == SpaceKind::Process)
        {
            let label = labels_of(g, &placement, id);
            let err = |what: String, source| {
                BuildError::new(
                    label.clone(),
                    None,
                    BuildErrorKind::Process { what, source },
                )
            };
            t.step(
                format!("start process space p{id}"),
                |b| {
                    inject((label.clone(), None))?;
                    let Some(l) = launcher else {
                        return Err(BuildError::new(
                            label.clone(),
                            None,
                            BuildErrorKind::NoLauncher(id),
                        ));
                    };
                    let (mine, theirs) =
                        UnixStream::pair().map_err(|x| err("socketpair".into(), x))?;
                    beltway::sys::inherit_across_exec(&theirs)
                        .map_err(|x| err("fcntl".into(), x))?;
                    let proc = std::process::Command::new(&l.exe)
                        .args(&l.args)
                        .envs(l.env.iter().map(|(k, v)| (k, v)))
                        .arg("--space")
                        .arg(id.to_string())
                        .arg("--fd")
                        .arg(theirs.as_raw_fd().to_string())
                        // The run's standard input: a `stdin` filter or a Unix command
                        // the plan puts in this process reads it there.
                        .stdin(std::process::Stdio::inherit())
                        .spawn()
                        .map_err(|x| {
                            err(
                                format!("cannot start process space p{id} ({})", l.exe.display()),
                                x,
                            )
                        })?;
                    drop(theirs);
                    let child = ChildSpace {
                        id,
                        proc,
                        sock: mine,
                    };
                    let first = recv_msg(&child.sock).map_err(|x| {
                        err(format!("process space p{id} ended before it started"), x)
                    })?;
                    if let Some(why) = first.strip_prefix("error ") {
                        return Err(child_error(why, &label));
                    }
                    b.children.push(child);
                    Ok(id)
                },
                // Dropping the child kills and reaps it; its mappings go with it.
                |b, id| b.children.retain(|c| c.id != id),
            )
            .map_err(failed)?;
            for (k, e) in cross
                .iter()
                .enumerate()
                .filter(|(_, e)| placement.space[e.from] == id)
            {
                t.step(
                    format!("receive channel {k} from p{id}"),
                    |b| {
                        inject(at(e))?;
                        let c = b
                            .children
                            .iter()
                            .find(|c| c.id == id)
                            .expect("started above");
                        let tr = recv_ring(&c.sock).map_err(|x| {
                            handover_err(e, format!("channel from process space p{id}"), x)
                        })?;
                        let d = recv_ring(&c.sock).map_err(|x| {
                            handover_err(e, format!("channel from process space p{id}"), x)
                        })?;
                        b.rings.insert(k, (tr, d));
                        Ok(k)
                    },
                    |b, k| {
                        b.rings.remove(&k);
                    },
                )
                .map_err(failed)?;
            }
        }
        // Consumers attach before anyone writes: here, or in the process spaces.
        for (k, e) in cross.iter().enumerate() {
            let to = placement.space[e.to];
            t.step(
                format!("attach channel {k}"),
                |b| {
                    inject(at(e))?;
                    let (tr, d) = &b.rings[&k];
                    if here(to) {
                        // A process space feeding us may not name files for us to map.
                        let trusted = here(placement.space[e.from]);
                        let mut rx = ingress(&format!("sl-ch{k}"), tr, d, trusted)
                            .map_err(|x| ring_err(e, "cannot attach to its channel".into(), x))?;
                        rx.set_busy(
                            g.nodes[e.to]
                                .hints
                                .iter()
                                .any(|h| matches!(h, Hint::Busy | Hint::Lockstep)),
                        );
                        b.chans
                            .endpoints
                            .lock()
                            .expect("not poisoned")
                            .insert((false, k), Box::new(rx) as Box<dyn Filter>);
                    } else {
                        let c = b
                            .children
                            .iter()
                            .find(|c| c.id == to)
                            .expect("process space started");
                        send_ring(&c.sock, tr)
                            .and_then(|_| send_ring(&c.sock, d))
                            .map_err(|x| {
                                handover_err(
                                    e,
                                    format!("cannot hand its channel to process space p{to}"),
                                    x,
                                )
                            })?;
                    }
                    Ok(k)
                },
                // Here: drop the consumer's endpoint. In a process space: the mapping is
                // the child's, undone when the start step's inverse stops it.
                |b, k| {
                    b.chans
                        .endpoints
                        .lock()
                        .expect("not poisoned")
                        .remove(&(false, k));
                },
            )
            .map_err(failed)?;
        }
        let mut ids: Vec<SpaceId> = parts.keys().copied().filter(|&s| here(s)).collect();
        ids.sort_unstable();
        for id in ids {
            t.step(
                format!("build space {}", space_name(&placement, id)),
                |b| {
                    inject((labels_of(g, &placement, id), None))?;
                    let mut space = Space::build_labelled(
                        &parts[&id].graph,
                        &b.chans,
                        scratch,
                        &parts[&id].labels(&run_labels),
                    )?;
                    // A space that feeds another space of this process keeps its rings in
                    // shared memory, so the consumer reads its blocks in place.
                    if cross
                        .iter()
                        .any(|e| placement.space[e.from] == id && here(placement.space[e.to]))
                    {
                        space.store().share_rings();
                    }
                    if cross.iter().any(|e| placement.space[e.from] == id) {
                        // Every space of the run has finished before this process drops
                        // its spaces (`Spaces::run`).
                        space.store().set_feeds(crate::store::Feeds::AwaitedSpaces);
                    }
                    b.spaces.push((id, space));
                    Ok(id)
                },
                |b, id| b.spaces.retain(|(s, _)| *s != id),
            )
            .map_err(failed)?;
        }
        let child_ids: Vec<SpaceId> = t.context().children.iter().map(|c| c.id).collect();
        for id in child_ids {
            let label = labels_of(g, &placement, id);
            t.step(
                format!("process space p{id} ready"),
                |b| {
                    inject((label.clone(), None))?;
                    let c = b
                        .children
                        .iter()
                        .find(|c| c.id == id)
                        .expect("started above");
                    match recv_msg(&c.sock) {
                        Ok(m) if m == "ready" => Ok(id),
                        Ok(m) => Err(child_error(m.strip_prefix("error ").unwrap_or(&m), &label)),
                        Err(e) => Err(BuildError::new(
                            label.clone(),
                            None,
                            BuildErrorKind::Process {
                                what: format!("process space p{id} ended while building"),
                                source: e,
                            },
                        )),
                    }
                },
                // Nothing to take back: the start step's inverse stops the space.
                |_, _| {},
            )
            .map_err(failed)?;
        }
        if let Some(k) = fail_at.filter(|&k| k >= step_no.get()) {
            let n = step_no.get();
            drop(t.rollback());
            return Err(BuildError::new(
                "build",
                None,
                BuildErrorKind::InjectedPast { step: k, steps: n },
            ));
        }
        let b = t.commit();
        let labels = g
            .nodes
            .iter()
            .map(|n| (placement.space[n.id], base_name(n)))
            .collect();
        let sched = placement
            .spaces()
            .into_iter()
            .map(|s| (s, schedule_of(g, &placement, s)))
            .collect();
        Ok(Spaces {
            spaces: b.spaces,
            children: b.children,
            placement,
            channels: cross.len(),
            labels,
            sched,
            order: crate::runtime::user_order(&run_labels),
        })
    }

    /// Process ids of the process spaces (for tests and monitoring).
    pub fn process_ids(&self) -> Vec<(SpaceId, u32)> {
        self.children.iter().map(|c| (c.id, c.proc.id())).collect()
    }
}
