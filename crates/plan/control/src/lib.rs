//! Streamline's control plane (thesis Chapter 6): it decides where every filter of a
//! request runs and how every stream is carried, and builds the result safely.
//!
//! A tour, in the order a request travels:
//!
//! * [`library`] owns [`Filters`], what the control plane knows of the filter library
//!   (declarations, the language resolver, the library's two graph passes). Its caller
//!   hands it in; this crate does not depend on the `filters` crate (nor, through it, on
//!   the kernel plane).
//! * [`system`] owns the system model: CPUs, caches and which CPUs share them, NUMA,
//!   memory, capabilities (probed for real by [`probe`]), spaces (kernel, a pinned
//!   thread per CPU, a process per CPU) and channel costs. Discovered from `/sys`, or
//!   built by hand / loaded from JSON for golden tests.
//! * [`model`] owns reification and the request model: filter names to
//!   implementations tied to space kinds with Table 6.2 cost tuples (defaulted from the
//!   Table 5.1 access class, overridable from measurements), pins from `space=` and
//!   `@single`, and rates propagated from the sources with selectivity.
//! * [`optimize`] owns the two algorithms: the integer program of 6.3 solved by HiGHS
//!   and the greedy push-processing-down heuristic of 6.3.2 (baseline and fallback).
//! * [`plan`] owns the result a runtime consumes ([`Plan`]: per filter implementation,
//!   space kind and CPU; per stream a [`Channel`]), the one cost evaluator, and the
//!   canonical, explained and Graphviz prints.
//! * [`planner`] ties them together for a pipeline text, including template
//!   substitution (data-parallel split/join alternatives) when the request as written
//!   does not fit.
//! * [`realize`] owns the translation of a plan into the runtime's terms (space names,
//!   `placed=`).
//! * [`rewrite`] owns the graph rewrites between the parsed request and the graph the
//!   runtime builds: one pass list in one order (templates, space assignment, prefix
//!   sharing, multiqueue engines, kernel push-down, replication), one entry point that a
//!   run's plan (`runplan`) calls once.
//! * [`txn`] (re-exported from `dataplane`, whose `spaces` builds every run through it)
//!   is construction as transactions (6.4): every step has an inverse, a failure rolls
//!   back in reverse order. [`prefix`] owns prefix sharing of running
//!   stateless filters between pipelines.
//!
//! * [`adapt`] closes the loop while a run runs (`--adapt`): measured per-filter time
//!   in, moves of filters across channels out.
//!
//! It does not run anything: the runtimes in `dataplane` (and the kernel crate) consume
//! a [`Plan`].
#![deny(unsafe_code)]

pub mod access;
pub mod adapt;
pub mod error;
pub mod library;
pub mod model;
pub mod optimize;
pub mod plan;
pub mod planner;
pub mod prefix;
pub mod probe;
pub mod realize;
pub mod rewrite;
pub mod system;
/// Construction as transactions lives with the runtime that builds (`dataplane::txn`).
pub use dataplane::txn;

pub use error::{PlanError, RequestError, SystemError};
pub use library::Filters;
pub use model::{Catalog, Load, Request};
pub use plan::{Channel, Choice, Plan};
pub use planner::{Planned, Planner};
pub use realize::{Assignment, NodePlace, SpaceChange};
pub use system::{SpaceKind, SystemModel};
