//! A run derived once. [`plan`] turns pipeline text into a placed, checked [`Plan`]:
//! parse and resolve (`lang`, with the filter library's natives and Unix commands from
//! PATH), the stream modes (`control::access`, [`access`]), the placement the planner
//! chooses and prefix sharing (`control`, [`choose`]), the rewrites in their one order
//! (`control::rewrite`), then replication, the placement rule and the cut into one part
//! per space with the channels between them (`dataplane::spaces::Layout`). Every decision
//! is made here, once: [`Plan::build`] realizes the layout (`dataplane::spaces::Spaces`),
//! and each process space receives its part of it as a typed value
//! (`dataplane::spaces::Share`, [`process_space`]), never the text to derive again.
//!
//! `streamline plan` explains the placement through the same derivation ([`derive`]:
//! the planner's choice beside the plan), so it cannot disagree with what a run places.
//!
//! Used by the `streamline` command (`run`, `plan`, `__space`) and by the daemon's worker
//! (`streamline-worker`), which runs a plan for a client; it links neither of them.
//! Also here, because both run what they planned: the run's live side ([`live`]: edits,
//! taps, `--adapt`), and what a run prints when it ends ([`report`]).

pub mod access;
mod choose;
pub use choose::{system_model, Chosen};
pub mod live;
pub mod received;
pub mod report;

use dataplane::channel::ChannelConfig;
use dataplane::spaces::{Launcher, Layout, Spaces};
use protocol::proto::RunOptions;

/// The filter library as the control plane takes it (its declarations, its resolver, and
/// the two graph passes written in it; see `control::rewrite`).
pub static FILTERS: control::Filters = control::Filters {
    registry: filters::REGISTRY,
    resolver: &filters::Natives,
    multiqueue: filters::live::multiqueue,
    kernel_placement: filters::live::kernel_placement,
};

/// Native filters (with their parameter keys) from the library, Unix commands from PATH.
pub fn resolver() -> lang::WithPath<filters::Natives> {
    lang::WithPath(filters::Natives)
}

/// A run derived from its text: placed, checked, ready to build.
pub struct Plan {
    /// The graph as it runs (node ids final), each node's space, the channels between
    /// spaces, and per space its part.
    pub layout: Layout,
    /// `plan (...): ...` as printed, or empty when the plan changed nothing.
    pub placement: String,
    /// The permission bits of the run's streams (the narrowest source's, at most 0644).
    pub mode: u32,
    /// Where each filter runs, by space (`ps`'s PLACEMENT column).
    pub layout_text: String,
    /// The scratch ring of each space (bytes).
    pub scratch: usize,
    /// The text as messages may show it (secrets redacted).
    shown: lang::Redacted,
}

/// A run that could not be planned or built: the message (with the caret, secrets
/// redacted) and the exit status.
#[derive(Debug)]
pub struct Refused {
    pub message: String,
    pub code: u8,
}

/// What a placement is planned on, beside the run's options: a model of the machine
/// (None: this one, as discovered), the filters' measured costs
/// (`NAME:CYCLES_PER_CALL,CYCLES_PER_BYTE[,FORWARD_RATIO]`, over the catalog's
/// estimates), and what becomes of a pipeline the planner cannot place: run as written
/// with a note (a run), or refused (`refuse_unplaced`: `streamline plan`, whose answer is
/// the planner's choice).
#[derive(Default)]
pub struct Planning {
    pub system: Option<control::SystemModel>,
    pub costs: Vec<String>,
    pub refuse_unplaced: bool,
}

/// A run derived, with what the planner chose for it (None: nothing was planned,
/// `--plan none`, or the planner could not place it and it runs as written).
pub struct Derived {
    pub plan: Plan,
    pub chosen: Option<Chosen>,
}

/// Derive the run of `pipeline` with options `o`. `grants`: the stream mode of privileged
/// sources by node id, as the daemon's policy granted them (empty when run stand-alone).
pub fn plan(pipeline: &str, o: &RunOptions, grants: &[(usize, u32)]) -> Result<Plan, Refused> {
    derive(pipeline, o, grants, &Planning::default()).map(|d| d.plan)
}

/// The run of a graph parsed and checked elsewhere: the daemon parsed `pipeline` for its
/// policy check and hands its worker that graph (`ToWorker::Start`), which the worker
/// validates ([`received::accept`]: a malformed value, or a command that does not resolve
/// here as the daemon took it, is refused) and derives from without parsing the text;
/// `pipeline` is only what messages quote. `grants` and `lent` (the nodes the daemon's
/// sockets were lent for, with their kind) name nodes of `graph`.
pub fn plan_checked(
    graph: lang::Graph,
    pipeline: &str,
    o: &RunOptions,
    grants: &[(usize, u32)],
    lent: &[(usize, &str)],
) -> Result<Plan, Refused> {
    received::accept(&graph, pipeline, grants, lent)?;
    derive_graph(graph, pipeline, o, grants, &Planning::default()).map(|d| d.plan)
}

/// The first step of a derivation: `pipeline` parsed and resolved where the run runs
/// (native filters from the library, commands from PATH, [`resolver`]). A mistake with
/// its caret, secrets redacted.
pub fn parse(pipeline: &str) -> Result<lang::Graph, Refused> {
    lang::parse(pipeline, &resolver()).map_err(|d| Refused {
        message: filters::shown(pipeline).scrub(&d.redacted(&resolver()).to_string()),
        code: 2,
    })
}

/// [`plan`], planned as `planning` says, with the planner's choice beside the plan: the
/// one path from text to placement (`streamline run` and `streamline plan` both take it).
pub fn derive(
    pipeline: &str,
    o: &RunOptions,
    grants: &[(usize, u32)],
    planning: &Planning,
) -> Result<Derived, Refused> {
    derive_graph(parse(pipeline)?, pipeline, o, grants, planning)
}

/// The derivation after the parse, from the graph `g` of `pipeline` (parsed here, or
/// checked by the daemon): the stream modes, the placement, the rewrites, the layout.
fn derive_graph(
    g: lang::Graph,
    pipeline: &str,
    o: &RunOptions,
    grants: &[(usize, u32)],
    planning: &Planning,
) -> Result<Derived, Refused> {
    // Every message goes out with the secrets the declarations name redacted (they reach
    // the daemon's client and log); the run itself gets them as written.
    let shown = filters::shown(pipeline);
    let fail = |message: String, code: u8| Refused {
        message: shown.scrub(&message),
        code,
    };
    if !(o.rate.is_finite() && o.rate > 0.0 && o.bytes.is_finite() && o.bytes >= 0.0) {
        return Err(fail(
            "streamline: --rate must be positive and --bytes non-negative".into(),
            2,
        ));
    }
    // Exported streams are no more readable than what they were computed from.
    let modes = control::access::stream_modes(&g, &|n| access::origin(n, grants));
    // What PipesFS shows for every stream of the run: no more than its narrowest source
    // allows, and at most 0644 (as exports).
    let mode = modes.iter().fold(0o644, |m, x| m & x);
    let g = control::access::apply_export_modes(&g, &modes);
    let load = control::Load {
        blocks_per_sec: o.rate,
        bytes_per_block: o.bytes,
    };
    let mut placement = String::new();
    let chosen = match choose::choose_placement(&g, &o.plan, load, planning) {
        Ok(c) => {
            if !c.assignment.is_empty() {
                placement = format!("plan ({}): {}", c.why, choose::describe(&g, &c.assignment));
            }
            Some(c)
        }
        Err(e) if planning.refuse_unplaced => return Err(fail(format!("plan: {e}"), 2)),
        Err(e) => {
            placement = format!(
                "note: the planner could not place this pipeline ({e}); running it as written"
            );
            None
        }
    };
    let unplaced = control::Assignment::default();
    let assign = chosen.as_ref().map_or(&unplaced, |c| &c.assignment);
    // Sharing is chosen on the graph as the plan places it (pass 2 of control::rewrite),
    // then every rewrite runs in its one order.
    let share = match (!o.no_share, assign.apply(&g)) {
        (_, Err(e)) => return Err(fail(format!("streamline: applying the plan: {e}"), 2)),
        (true, Ok(placed)) => choose::choose_share(&placed, o.quiet),
        (false, Ok(_)) => None,
    };
    let g = control::rewrite::rewrite(
        &FILTERS,
        &g,
        control::rewrite::Decisions {
            assignment: assign,
            share: share.as_ref(),
        },
    )
    .map_err(|e| fail(format!("streamline: {e}"), 2))?;
    // Replication, the placement rule and the cut: the one placement of this run.
    let layout = Layout::place(&g, &filters::Library, ChannelConfig::default())
        .map_err(|e| build_refused(&shown, e))?;
    let plan = Plan {
        layout_text: shown.scrub(&choose::layout_text(&layout)),
        layout,
        placement: shown.scrub(&placement),
        mode,
        scratch: o.ring,
        shown,
    };
    Ok(Derived { plan, chosen })
}

/// A build error under the pipeline with a caret at the node that failed, like a parse
/// error.
fn build_refused(shown: &lang::Redacted, e: dataplane::BuildError) -> Refused {
    let head = format!("streamline: {e}");
    let message = match e.span {
        Some(span) => shown.render(&head, span, None),
        None => head,
    };
    Refused {
        message: shown.scrub(&message),
        code: 2,
    }
}

impl Plan {
    /// Realize the plan: its channels, its process spaces (this program again, as
    /// `__space`: whoever runs a plan answers that too, [`process_space`]) and every
    /// space of this process, as one transaction (a failure leaves nothing behind).
    pub fn build(&self) -> Result<Spaces, Refused> {
        let launcher = std::env::current_exe().ok().map(|exe| Launcher {
            exe,
            args: vec!["__space".into()],
            env: vec![],
        });
        // Fault injection for the rollback tests (tests/spaces.rs): fail construction step
        // K (from 0). A test hook only: debug builds (what `cargo test` runs) read it, a
        // release binary has no such variable.
        #[cfg(debug_assertions)]
        let fail_at = std::env::var("STREAMLINE_FAIL_STEP")
            .ok()
            .and_then(|v| v.parse().ok());
        #[cfg(not(debug_assertions))]
        let fail_at = None;
        Spaces::build_steps(
            &self.layout,
            &filters::Library,
            self.scratch,
            launcher.as_ref(),
            fail_at,
        )
        .map_err(|e| build_refused(&self.shown, e))
    }
}

/// A process space of a run (`__space --space ID --fd FD`, started by [`Plan::build`]):
/// it takes the sockets its worker was lent, leaves stopping to its parent, and builds
/// and runs the share of the plan it receives over `fd`. The exit status.
pub fn process_space(space: usize, fd: i32) -> u8 {
    // A non-root client's process space: the sockets its worker was lent decide here
    // which kernel programs may run on them.
    if let Err(e) = kernel::lend::install_from_env() {
        eprintln!("{}", report::error_text(&format!("process space: {e}")));
        return 2;
    }
    report::ignore_stop_signals();
    let sock = match beltway::sys::inherited_unix_stream(fd) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}", report::error_text(&format!("process space: descriptor {fd}: {e} (this command is started by `streamline run`)")));
            return 2;
        }
    };
    dataplane::spaces::run_process_space(&filters::Library, space, sock) as u8
}
