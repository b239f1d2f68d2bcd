//! The one home of the graph rewrites between a parsed request and the graph the runtime
//! builds: the pass list and its order ([`PASSES`]), run from one entry point
//! ([`rewrite`]), once per run, by the run's plan (`runplan::plan`); its process spaces
//! receive their part of the rewritten, placed graph (`dataplane::spaces::Share`) and
//! rewrite nothing.
//!
//! A pass whose code needs a lower crate's types stays there; a pass written in the filter
//! library is handed in by the caller with the library itself ([`Filters`]), since this
//! crate does not depend on it (dependencies: lang <- dataplane <- filters, and
//! lang <- dataplane <- control; the cli wires the two). The order is this module's:
//!
//! 1. **templates** (`lang`): the Boolean grammar (Or, And, Not, `+`) becomes joins and
//!    inverted selectors inside [`lang::parse`] itself, since a [`lang::Graph`] has no
//!    pseudo-vertices; the optimizer's data-parallel template ([`lang::parallelize`]) is
//!    applied to the copy it solves, and reaches the run as a `space=A,B` list (pass 6).
//! 2. **space assignment** (here, [`crate::realize`]): the plan's [`Assignment`] sets each
//!    node's `space=` and typed side ([`lang::Side::User`] where the plan keeps a filter
//!    with a kernel form in user space).
//! 3. **prefix sharing** (here, [`crate::prefix`]): a `__publish` sink after the shared
//!    prefix, or the prefix replaced by one `__subscribe` source.
//! 4. **multiqueue engines** ([`Filters::multiqueue`]; the `streamline` command hands in
//!    `filters::live::multiqueue`, written in the library because it reads the filter
//!    declarations): `rx queues=N` becomes N capture engines in one fanout group, each
//!    with its own copy of the filters after it.
//! 5. **kernel push-down** ([`Filters::kernel_placement`]; `filters::live::kernel_placement`,
//!    written in the library because it encodes the NIC-FIX programs and pins their maps):
//!    the filter right after `rx` gets [`lang::Side::Kernel`] and the `rx` its
//!    [`lang::KernelAttach`].
//! 6. **replication** (`dataplane::spaces::replicate`, in dataplane because the build
//!    must never see a space list and reports it with a build error's span): a filter with
//!    `space=A,B,...` becomes `split | copies | join`, one copy per space. It runs with the
//!    placement rule in `dataplane::spaces::Layout::place`, once per run (`runplan`), or
//!    for callers that build a graph without a plan (tests, benchmarks); on a graph
//!    already replicated it changes nothing.
//!
//! Each pass reads only what the earlier ones wrote (see ARCHITECTURE.md, "Graph
//! rewrites"): the push-down sees the engines' copies and the plan's sides (it leaves a
//! filter whose side is already said), replication sees the final spaces.

use dataplane::Factory;
use lang::Graph;

use crate::library::Filters;
use crate::prefix::Share;
use crate::realize::Assignment;

/// The passes, in the order [`rewrite`] runs them (templates ran in [`lang::parse`]).
pub const PASSES: [&str; 6] = [
    "templates",
    "space assignment",
    "prefix sharing",
    "multiqueue engines",
    "kernel push-down",
    "replication",
];

/// A pass that refused the request: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewriteError {
    pub pass: &'static str,
    pub why: String,
}

impl std::fmt::Display for RewriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.pass, self.why)
    }
}

impl std::error::Error for RewriteError {}

/// What the rewrites need besides the parsed graph: the run's decisions.
#[derive(Clone, Copy, Debug)]
pub struct Decisions<'a> {
    pub assignment: &'a Assignment,
    pub share: Option<&'a Share>,
}

/// Runs passes 2-5 on `g` (a graph from [`lang::parse`], templates done), in order, with
/// the library's passes 4 and 5 from `filters`. Replication (pass 6) is [`replicate`],
/// separate because its errors are build errors with a node's span, and the build runs it
/// anyway.
pub fn rewrite(filters: &Filters, g: &Graph, d: Decisions<'_>) -> Result<Graph, RewriteError> {
    let g = d.assignment.apply(g).map_err(|why| RewriteError {
        pass: PASSES[1],
        why,
    })?;
    let g = match d.share {
        Some(s) => crate::prefix::apply(filters, &g, s).map_err(|why| RewriteError {
            pass: PASSES[2],
            why,
        })?,
        None => g,
    };
    let g = (filters.multiqueue)(g);
    Ok((filters.kernel_placement)(g))
}

/// Pass 6: `space=A,B,...` replicated (see `dataplane::spaces::replicate`).
pub fn replicate(g: &Graph, factory: &dyn Factory) -> Result<Graph, dataplane::BuildError> {
    dataplane::spaces::replicate(g, factory)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::native;
    use lang::{KernelAttach, NodeKind, Side};

    fn parse(text: &str) -> Graph {
        lang::parse(text, &filters::Natives).unwrap_or_else(|d| panic!("{d}"))
    }

    fn place(g: &Graph, i: usize) -> lang::Placement {
        match &g.nodes[i].kind {
            NodeKind::Filter { place, .. } => place.clone(),
            k => panic!("node {i} is {k:?}"),
        }
    }

    #[test]
    fn the_plan_s_user_side_wins_over_the_kernel_push_down() {
        // Pass 2 before pass 5: a filter the plan keeps in user space stays there.
        let g = parse("rx dev=lo | flowcount | count");
        let none = Assignment::default();
        let pushed = rewrite(
            &native(),
            &g,
            Decisions {
                assignment: &none,
                share: None,
            },
        )
        .unwrap();
        assert!(
            matches!(place(&pushed, 0).kernel, Some(KernelAttach::Ebpf { .. })),
            "{pushed:?}"
        );
        assert!(matches!(
            place(&pushed, 1).side,
            Some(Side::Kernel { pin: Some(_) })
        ));
        let user = Assignment::parse("1:placed=user").unwrap();
        let kept = rewrite(
            &native(),
            &g,
            Decisions {
                assignment: &user,
                share: None,
            },
        )
        .unwrap();
        assert_eq!(place(&kept, 0).kernel, None);
        assert_eq!(place(&kept, 1).side, Some(Side::User));
    }

    #[test]
    fn engines_come_before_the_push_down_so_each_engine_gets_its_program() {
        let g = parse("rx dev=lo queues=2 | bpf \"udp\" | count");
        let none = Assignment::default();
        let out = rewrite(
            &native(),
            &g,
            Decisions {
                assignment: &none,
                share: None,
            },
        )
        .unwrap();
        let attached = out.nodes.iter().filter(|n| matches!(&n.kind, NodeKind::Filter { filter, place, .. } if filter == "rx" && place.kernel == Some(KernelAttach::Cbpf("udp".into())))).count();
        assert_eq!(attached, 2, "{}", out.canonical());
    }

    #[test]
    fn the_library_s_passes_are_the_ones_handed_in_and_run_after_the_control_passes() {
        // Passes 4 and 5 come from the caller's `Filters`: record what each one sees.
        use std::cell::RefCell;
        thread_local! {
            static SEEN: RefCell<Vec<(&'static str, String)>> = const { RefCell::new(Vec::new()) };
        }
        fn note(pass: &'static str, g: Graph) -> Graph {
            SEEN.with(|s| s.borrow_mut().push((pass, g.canonical())));
            g
        }
        let lib = Filters {
            multiqueue: |g| note("multiqueue", g),
            kernel_placement: |g| note("kernel", g),
            ..native()
        };
        let g = parse("rx dev=lo | flowcount | count");
        let user = Assignment::parse("1:placed=user").unwrap();
        let share = Share::Publish {
            key: crate::prefix::shareable(&lib, &g)[0].key.clone(),
        };
        let out = rewrite(
            &lib,
            &g,
            Decisions {
                assignment: &user,
                share: Some(&share),
            },
        )
        .unwrap();
        let seen = SEEN.with(|s| s.take());
        assert_eq!(
            seen.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
            ["multiqueue", "kernel"]
        );
        // Both see passes 2 (the plan's side) and 3 (the publish sink); with identity
        // passes nothing goes onto the socket.
        for (pass, text) in &seen {
            assert!(
                text.contains("placed=user") && text.contains("__publish"),
                "{pass} saw {text}"
            );
        }
        assert_eq!(place(&out, 0).kernel, None);
        assert_eq!(out.canonical(), seen[1].1);
    }

    #[test]
    fn a_refusing_pass_is_named() {
        let g = parse("gen count=1 | count");
        let bad = Assignment::parse("7:space=t1").unwrap();
        let e = rewrite(
            &native(),
            &g,
            Decisions {
                assignment: &bad,
                share: None,
            },
        )
        .unwrap_err();
        assert_eq!(e.pass, "space assignment");
        assert!(e.to_string().contains("node 7"), "{e}");
        let share = Share::Publish { key: "0000".into() };
        let e = rewrite(
            &native(),
            &g,
            Decisions {
                assignment: &Assignment::default(),
                share: Some(&share),
            },
        )
        .unwrap_err();
        assert_eq!(e.pass, "prefix sharing", "{e}");
    }

    #[test]
    fn replication_after_the_rewrites_is_idempotent() {
        let g = parse("gen count=4 | deflate space=1,2 | count");
        let once = replicate(&g, &filters::Library).unwrap();
        assert!(once.nodes.len() > g.nodes.len(), "{}", once.canonical());
        assert_eq!(replicate(&once, &filters::Library).unwrap(), once);
    }
}
