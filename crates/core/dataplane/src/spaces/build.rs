//! Building spaces as one transaction (thesis 6.4): channels created and attached,
//! process spaces started and handed their rings, every space of this process built; a
//! failing step undoes the earlier ones. What a built run holds ([`Spaces`]) until it runs.

use super::place::{schedule_of, Placement, SpaceId, SpaceKind};
use super::protocol::{child_error, recv_msg, recv_ring, send_ring, send_share, ProtocolError};
use super::split::{Channel, Layout, WithChannels};
use crate::channel::{egress, ingress, ChannelConfig};
use crate::filter::Filter;
use crate::runtime::{base_name, BuildError, BuildErrorKind, Factory, Rollback, Space};
use crate::txn::{StepFailed, Transaction};
use beltway::RingRef;
use lang::Graph;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

/// How to start a process space: this program with arguments (and environment variables)
/// that make it call [`super::run_process_space`]; `--space ID --fd FD` are appended, and
/// the space receives its [`super::Share`] of the run over that descriptor.
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

/// The steps of one build: numbered (for injected failures), each a step of the
/// transaction, a failure turned into a build error that says what was undone.
struct Steps<'f> {
    t: Transaction<Building<'f>>,
    next: usize,
    fail_at: Option<usize>,
}

impl<'f> Steps<'f> {
    /// Step `name` (about the node or space `at`): `act`, with `undo` as its inverse.
    fn step<T: Clone + 'static>(
        &mut self,
        name: String,
        at: (String, Option<lang::Span>),
        act: impl FnOnce(&mut Building<'f>) -> Result<T, BuildError>,
        undo: impl FnOnce(&mut Building<'f>, T) + 'static,
    ) -> Result<T, BuildError> {
        let k = self.next;
        self.next += 1;
        let inject = self.fail_at == Some(k);
        let act = move |b: &mut Building<'f>| match inject {
            true => Err(BuildError::new(
                at.0,
                at.1,
                BuildErrorKind::Injected { step: k },
            )),
            false => act(b),
        };
        self.t
            .step(name, act, undo)
            .map_err(|f: StepFailed<BuildError>| {
                let mut e = f.error;
                if !f.undone.is_empty() {
                    e.rollback = Some(Rollback {
                        step: f.step,
                        undone: f.undone,
                    });
                }
                e
            })
    }
}

impl Spaces {
    /// Place `g` ([`Layout::place`]), split it, create the channels, start the process
    /// spaces (if any, with `launcher`) and build every space; nothing runs yet. For
    /// callers that build a graph without a run's plan (tests, benchmarks); a run builds
    /// from its plan's [`Layout`] ([`Spaces::build_steps`]).
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
        let layout = Layout::place(g, factory, cfg)?;
        Self::build_steps(&layout, factory, scratch, launcher, None)
    }

    /// Realize `layout` as a transaction (thesis 6.4, [`crate::txn`]): creating each
    /// channel, starting each process space (handing it its [`super::Share`]), receiving and
    /// handing over each channel's rings, attaching each consumer, building each space and
    /// each process space's `ready` is one step with its inverse (dropping a ring unmaps
    /// it, dropping a process space kills and reaps it, dropping a space unmaps its
    /// store). A failing step undoes the earlier ones, last first, and the error names the
    /// step and what was undone. Nothing is placed here: the layout says where.
    ///
    /// `fail_at = Some(k)` injects a failure into step k (from 0), for tests of the
    /// rollback; past the last step it fails after all of them, saying how many there were.
    pub fn build_steps(
        layout: &Layout,
        factory: &dyn Factory,
        scratch: usize,
        launcher: Option<&Launcher>,
        fail_at: Option<usize>,
    ) -> Result<Spaces, BuildError> {
        let building = Building {
            chans: WithChannels {
                inner: factory,
                endpoints: Mutex::new(HashMap::new()),
            },
            rings: HashMap::new(),
            children: Vec::new(),
            spaces: Vec::new(),
        };
        let mut s = Steps {
            t: Transaction::new(building),
            next: 0,
            fail_at,
        };
        for (k, c) in layout.channels.iter().enumerate() {
            if layout.here(c.from) {
                create_channel(&mut s, k, c, layout.here(c.to))?;
            }
        }
        // Start the process spaces; each first sends the rings of the channels it feeds.
        for (&id, _) in layout.parts.iter().filter(|(&id, _)| !layout.here(id)) {
            start_process_space(&mut s, layout, id, scratch, launcher)?;
        }
        // Consumers attach before anyone writes: here, or in the process spaces.
        for (k, c) in layout.channels.iter().enumerate() {
            attach_channel(&mut s, layout, k, c)?;
        }
        for (&id, part) in layout.parts.iter().filter(|(&id, _)| layout.here(id)) {
            let name = match layout.placement.kind(id) {
                SpaceKind::Process => format!("p{id}"),
                _ => id.to_string(),
            };
            let feeds = |here: bool| {
                let mut out = layout.channels.iter().filter(|c| c.from == id);
                out.any(|c| !here || layout.here(c.to))
            };
            let (shares, awaited) = (feeds(true), feeds(false));
            s.step(
                format!("build space {name}"),
                (part.names.clone(), None),
                |b| {
                    let mut space =
                        Space::build_labelled(&part.graph, &b.chans, scratch, &part.labels)?;
                    // A space that feeds another space of this process keeps its rings in
                    // shared memory, so the consumer reads its blocks in place.
                    if shares {
                        space.store().share_rings();
                    }
                    if awaited {
                        // Every space of the run has finished before this process drops
                        // its spaces (`Spaces::run`).
                        space.store().set_feeds(crate::store::Feeds::AwaitedSpaces);
                    }
                    b.spaces.push((id, space));
                    Ok(id)
                },
                |b, id| b.spaces.retain(|(s, _)| *s != id),
            )?;
        }
        let child_ids: Vec<SpaceId> = s.t.context().children.iter().map(|c| c.id).collect();
        for id in child_ids {
            await_ready(&mut s, &layout.parts[&id].names, id)?;
        }
        if let Some(k) = fail_at.filter(|&k| k >= s.next) {
            let n = s.next;
            drop(s.t.rollback());
            return Err(BuildError::new(
                "build",
                None,
                BuildErrorKind::InjectedPast { step: k, steps: n },
            ));
        }
        let b = s.t.commit();
        let g = &layout.graph;
        let p = &layout.placement;
        Ok(Spaces {
            spaces: b.spaces,
            children: b.children,
            placement: p.clone(),
            channels: layout.channels.len(),
            labels: g
                .nodes
                .iter()
                .map(|n| (p.space[n.id], base_name(n)))
                .collect(),
            sched: p
                .spaces()
                .into_iter()
                .map(|s| (s, schedule_of(g, p, s)))
                .collect(),
            order: crate::runtime::user_order(&layout.labels),
        })
    }

    /// Process ids of the process spaces (for tests and monitoring).
    pub fn process_ids(&self) -> Vec<(SpaceId, u32)> {
        self.children.iter().map(|c| (c.id, c.proc.id())).collect()
    }
}

/// Channel errors name the consuming node.
fn ring_err(c: &Channel, what: String, source: beltway::Error) -> BuildError {
    let (label, span) = c.consumer.clone();
    BuildError::new(label, span, BuildErrorKind::Channel { what, source })
}

fn handover_err(c: &Channel, what: String, source: ProtocolError) -> BuildError {
    let (label, span) = c.consumer.clone();
    BuildError::new(label, span, BuildErrorKind::Handover { what, source })
}

/// Create channel `k` in this process (its producer runs here); `same`: its consumer too.
fn create_channel(s: &mut Steps<'_>, k: usize, c: &Channel, same: bool) -> Result<(), BuildError> {
    s.step(
        format!("create channel {k}"),
        c.consumer.clone(),
        |b| {
            let (tx, tr, d) = egress(&format!("sl-ch{k}"), c.config, same)
                .map_err(|x| ring_err(c, "cannot create a channel into it".into(), x))?;
            let mut ends = b.chans.endpoints.lock().expect("not poisoned");
            ends.insert((true, k), Box::new(tx) as Box<dyn Filter>);
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
    .map(drop)
}

/// Start process space `id`, hand it its share of `layout`, and receive the rings of the
/// channels it feeds.
fn start_process_space(
    s: &mut Steps<'_>,
    layout: &Layout,
    id: SpaceId,
    scratch: usize,
    launcher: Option<&Launcher>,
) -> Result<(), BuildError> {
    let label = layout.parts[&id].names.clone();
    let err = |what: String, source| {
        BuildError::new(
            label.clone(),
            None,
            BuildErrorKind::Process { what, source },
        )
    };
    let share = layout.share(id, scratch).expect("a placed space");
    s.step(
        format!("start process space p{id}"),
        (label.clone(), None),
        |b| {
            let Some(l) = launcher else {
                return Err(BuildError::new(
                    label.clone(),
                    None,
                    BuildErrorKind::NoLauncher(id),
                ));
            };
            let (mine, theirs) = UnixStream::pair().map_err(|x| err("socketpair".into(), x))?;
            beltway::sys::inherit_across_exec(&theirs).map_err(|x| err("fcntl".into(), x))?;
            let proc = std::process::Command::new(&l.exe)
                .args(&l.args)
                .envs(l.env.iter().map(|(k, v)| (k, v)))
                .arg("--space")
                .arg(id.to_string())
                .arg("--fd")
                .arg(theirs.as_raw_fd().to_string())
                // The run's standard input: a `stdin` filter or a Unix command the plan
                // puts in this process reads it there.
                .stdin(std::process::Stdio::inherit())
                .spawn()
                .map_err(|x| {
                    let what = format!("cannot start process space p{id} ({})", l.exe.display());
                    err(what, x)
                })?;
            drop(theirs);
            let child = ChildSpace {
                id,
                proc,
                sock: mine,
            };
            let first = send_share(&child.sock, &share)
                .and_then(|()| recv_msg(&child.sock))
                .map_err(|x| err(format!("process space p{id} ended before it started"), x))?;
            if let Some(why) = first.strip_prefix("error ") {
                return Err(child_error(why, &label));
            }
            b.children.push(child);
            Ok(id)
        },
        // Dropping the child kills and reaps it; its mappings go with it.
        |b, id| b.children.retain(|c| c.id != id),
    )?;
    for (k, c) in layout
        .channels
        .iter()
        .enumerate()
        .filter(|(_, c)| c.from == id)
    {
        s.step(
            format!("receive channel {k} from p{id}"),
            c.consumer.clone(),
            |b| {
                let child = b
                    .children
                    .iter()
                    .find(|c| c.id == id)
                    .expect("started above");
                let what = || format!("channel from process space p{id}");
                let tr = recv_ring(&child.sock).map_err(|x| handover_err(c, what(), x))?;
                let d = recv_ring(&child.sock).map_err(|x| handover_err(c, what(), x))?;
                b.rings.insert(k, (tr, d));
                Ok(k)
            },
            |b, k| {
                b.rings.remove(&k);
            },
        )?;
    }
    Ok(())
}

/// Attach channel `k`'s consumer: here, or hand its rings to the process space.
fn attach_channel(
    s: &mut Steps<'_>,
    layout: &Layout,
    k: usize,
    c: &Channel,
) -> Result<(), BuildError> {
    let (here, trusted) = (layout.here(c.to), layout.here(c.from));
    s.step(
        format!("attach channel {k}"),
        c.consumer.clone(),
        |b| {
            let (tr, d) = &b.rings[&k];
            if here {
                // A process space feeding us may not name files for us to map.
                let mut rx = ingress(&format!("sl-ch{k}"), tr, d, trusted)
                    .map_err(|x| ring_err(c, "cannot attach to its channel".into(), x))?;
                rx.set_busy(c.busy);
                let mut ends = b.chans.endpoints.lock().expect("not poisoned");
                ends.insert((false, k), Box::new(rx) as Box<dyn Filter>);
            } else {
                let to = c.to;
                let child = b.children.iter().find(|x| x.id == to).expect("started");
                send_ring(&child.sock, tr)
                    .and_then(|_| send_ring(&child.sock, d))
                    .map_err(|x| {
                        let what = format!("cannot hand its channel to process space p{to}");
                        handover_err(c, what, x)
                    })?;
            }
            Ok(k)
        },
        // Here: drop the consumer's endpoint. In a process space: the mapping is the
        // child's, undone when the start step's inverse stops it.
        |b, k| {
            b.chans
                .endpoints
                .lock()
                .expect("not poisoned")
                .remove(&(false, k));
        },
    )
    .map(drop)
}

/// Wait for process space `id` to say it is built (`ready`), or why not.
fn await_ready(s: &mut Steps<'_>, label: &str, id: SpaceId) -> Result<(), BuildError> {
    s.step(
        format!("process space p{id} ready"),
        (label.to_string(), None),
        |b| {
            let c = b
                .children
                .iter()
                .find(|c| c.id == id)
                .expect("started above");
            match recv_msg(&c.sock) {
                Ok(m) if m == "ready" => Ok(id),
                Ok(m) => Err(child_error(m.strip_prefix("error ").unwrap_or(&m), label)),
                Err(e) => Err(BuildError::new(
                    label,
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
    .map(drop)
}
