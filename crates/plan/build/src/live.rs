//! A built run while it runs: live edits (the daemon's `edit`: the typed edit the daemon
//! checked, turned into the dataplane's and handed to the run loop, which applies it at
//! its next quiescent point, `dataplane::edit`), taps, counters, and `--adapt`/`--chaos`.
//!
//! Owns: the worker's side of an edit (make the dataplane's edit, check it names the
//! nodes the daemon checked, hand over, answer in fields). Does not own: checking it
//! against the policy (the daemon's), applying it to a running space (`dataplane::edit`).

use dataplane::spaces::{Spaces, SpacesReport};
use dataplane::{EditHandle, Space};
use protocol::proto::{EditApplied, EditOp};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long an edit may wait for the run to reach a batch boundary.
const EDIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Tags in a legacy reader's own ring (its backlog before it loses packets): with the
/// shared data ring of 16 MiB, room for a second or so of a busy link.
const SUBSCRIBER_TAGS: usize = 1 << 16;

pub struct Edits {
    handle: OnceLock<EditHandle>,
}

impl Edits {
    pub fn new() -> Arc<Edits> {
        Arc::new(Edits {
            handle: OnceLock::new(),
        })
    }

    /// The handle to `spaces`' counters and edits, made once: the one
    /// [`Edits::run_adapting`] then runs them with (so what it reads is that run's).
    pub fn handle_of(&self, spaces: &Spaces) -> EditHandle {
        self.handle.get_or_init(|| spaces.edit_handle()).clone()
    }

    /// Apply one edit as the daemon parsed and checked it (`edit`; `op`, its protocol
    /// form, is what the answer says), parsing nothing: what was applied, or the errno
    /// and why not (EINVAL: the edit is not one a parse makes here
    /// (`lang::edit::Edit::check_made`), or its new filter does not build; ENOENT: no
    /// such node; EBUSY: the run's shape or state refuses it; EACCES: a node it names is
    /// not the filter `expect` says the daemon checked).
    pub fn apply(
        &self,
        op: &EditOp,
        edit: dataplane::Edit,
        expect: &[(String, String)],
    ) -> Result<EditApplied, (i32, String)> {
        let Some(h) = self.handle.get() else {
            return Err((libc::EBUSY, "the run is not running yet".into()));
        };
        edit.check_made(&crate::resolver()).map_err(|why| {
            (
                libc::EINVAL,
                format!("the edit from the daemon is malformed: {why}"),
            )
        })?;
        if !expect.is_empty() {
            let graph = h.graph();
            for (label, text) in expect {
                let bare = dataplane::edit::split_space(label).0;
                let mut found = graph.iter().filter(|n| &n.label == label);
                let n = found.next().or_else(|| {
                    let mut by = graph
                        .iter()
                        .filter(|n| dataplane::edit::split_space(&n.label).0 == bare);
                    match (by.next(), by.next()) {
                        (Some(n), None) => Some(n),
                        _ => None,
                    }
                });
                match n {
                    Some(n) if &n.filter == text => {}
                    Some(n) => {
                        return Err((
                            libc::EACCES,
                            format!(
                                "{label} is `{}` in the running graph, not `{text}` as the daemon checked it; nothing changed",
                                n.filter
                            ),
                        ))
                    }
                    None => {
                        return Err((
                            libc::ENOENT,
                            format!("no node labelled '{label}' in the running graph; nothing changed"),
                        ))
                    }
                }
            }
        }
        match h.apply(edit, EDIT_TIMEOUT) {
            Ok(a) => Ok(EditApplied {
                edit: op.clone(),
                node: a.label,
                retired_blocks: a
                    .retired
                    .as_ref()
                    .map(|r| r.counters.blocks_out.max(r.counters.blocks_in)),
                flushed: a.flushed as u64,
            }),
            // A filter that failed to build: the caret under its text.
            Err(dataplane::EditError::Build(b)) => {
                Err((libc::EINVAL, b.render("error: ", &op.source_text())))
            }
            Err(e) => Err((errno_of(&e), e.to_string())),
        }
    }

    /// Tap NODE's output (see `dataplane::tap`); a subscription's id ends it too.
    pub fn tap(&self, node: &str) -> Result<dataplane::tap::TapRings, (i32, String)> {
        let Some(h) = self.handle.get() else {
            return Err((libc::EBUSY, "the run is not running yet".into()));
        };
        h.tap(node, dataplane::tap::DATA_BYTES, EDIT_TIMEOUT)
            .map_err(|e| (errno_of(&e), e.to_string()))
    }

    /// Subscribe to NODE's shared tap with a legacy reader's classic BPF filter (see
    /// `dataplane::tap`: one classifier pass for all of them, one copy of what any wants).
    pub fn subscribe(
        &self,
        node: &str,
        f: &protocol::proto::TapFilter,
    ) -> Result<dataplane::tap::TapRings, (i32, String)> {
        let Some(h) = self.handle.get() else {
            return Err((libc::EBUSY, "the run is not running yet".into()));
        };
        let snap = if f.snaplen == 0 { u32::MAX } else { f.snaplen };
        if !f.program.is_empty() {
            kernel::cbpf::Program::new(insns(&f.program))
                .map_err(|e| (libc::EINVAL, format!("the filter program: {e}")))?;
        }
        let tags = match f.tags {
            0 => SUBSCRIBER_TAGS,
            n => n as usize,
        };
        let wake = dataplane::tap::Moderation::of(f.wake.packets, f.wake.us, tags);
        h.subscribe(
            node,
            f.program.clone(),
            std::sync::Arc::new(classifier),
            snap,
            tags,
            wake,
            EDIT_TIMEOUT,
        )
        .map_err(|e| (errno_of(&e), e.to_string()))
    }

    pub fn untap(&self, id: u64) {
        if let Some(h) = self.handle.get() {
            h.untap(id);
        }
    }

    /// The graph as it runs now (empty before the run starts).
    /// Whether the run has started (its edit handle exists).
    pub fn started(&self) -> bool {
        self.handle.get().is_some()
    }

    /// Whether any filter of the run runs in this process (else its graph, which shows
    /// only these, stays empty).
    pub fn has_local_nodes(&self) -> bool {
        self.handle.get().is_some_and(|h| h.has_local_nodes())
    }

    /// The run's table as it runs (`dataplane::EditHandle::table`: one row per node the
    /// user wrote, as the table at the end has them; empty before the run starts).
    pub fn table(&self) -> dataplane::spaces::SpacesReport {
        self.handle.get().map(|h| h.table()).unwrap_or_default()
    }

    pub fn graph(&self) -> Vec<dataplane::edit::GraphNode> {
        self.handle.get().map(|h| h.graph()).unwrap_or_default()
    }

    /// Run `spaces` taking edits as they come, with `--adapt` (the monitor of `control::adapt` beside the run, its
    /// decisions on standard error) and `--chaos SEED` (random moves; their count on
    /// standard error at the end).
    pub fn run_adapting(
        &self,
        mut spaces: Spaces,
        o: &protocol::proto::RunOptions,
        interrupt: &AtomicBool,
        tick: impl FnMut(&Space),
    ) -> SpacesReport {
        if let Some(seed) = o.chaos {
            spaces.set_chaos(seed);
        }
        let h = self.handle.get_or_init(|| spaces.edit_handle()).clone();
        let done = AtomicBool::new(false);
        let rep = std::thread::scope(|s| {
            if o.adapt {
                let (h, done) = (&h, &done);
                s.spawn(move || {
                    control::adapt::monitor(h, done, &control::adapt::Policy::default(), |l| {
                        eprintln!("{l}")
                    })
                });
            }
            let rep = spaces.run_with(interrupt, &h, &filters::Library, tick);
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            rep
        });
        if o.chaos.is_some() {
            let (d, u, r) = rep.chaos_moves;
            eprintln!("chaos: {d} filters moved down, {u} up, {r} moves refused");
        }
        rep
    }
}

/// The errno that says why an edit (or a tap) was not applied.
fn errno_of(e: &dataplane::EditError) -> i32 {
    use dataplane::EditError as E;
    match e {
        E::Syntax(_) | E::Build(_) | E::Ambiguous { .. } => libc::EINVAL,
        E::NoNode { .. } => libc::ENOENT,
        E::Refused { .. } | E::Timeout(_) => libc::EBUSY,
        E::Ended => libc::ESRCH,
        E::Tap(_) => libc::EIO,
    }
}

/// The kernel's instructions of a request's program.
fn insns(p: &[protocol::proto::BpfInsn]) -> Vec<kernel::cbpf::Insn> {
    p.iter()
        .map(|&(code, jt, jf, k)| kernel::cbpf::Insn { code, jt, jf, k })
        .collect()
}

/// A shared tap's classifier ([`dataplane::tap::Classifier`]): the subscribers' programs
/// (validated when they subscribed) merged into one pass that evaluates their common
/// prefixes once (`kernel::coalesce::Merged`).
fn classifier(programs: &[&[protocol::proto::BpfInsn]]) -> Box<dyn dataplane::tap::Classify> {
    let progs: Vec<kernel::cbpf::Program> = programs
        .iter()
        .map(|p| kernel::cbpf::Program::new(insns(p)).expect("validated on subscription"))
        .collect();
    Box::new(Merged(kernel::coalesce::Merged::new(&progs)))
}

struct Merged(kernel::coalesce::Merged);

impl dataplane::tap::Classify for Merged {
    fn verdicts(&mut self, block: &[u8], wire: u32, out: &mut [u32]) {
        self.0.run(block, wire, out)
    }
}
