//! `streamlined`, the Streamline daemon (thesis 6.4, 6.5): an operating-system service that
//! many users and programs share. It owns the runs started through it (each a worker
//! process that builds and runs the pipeline with its client's identity), their counters,
//! live edits and access control, and speaks the control protocol (`proto`) on a Unix
//! socket.
//!
//! Modules: `proto` and `client` (the control protocol and its client side, from the
//! `protocol` crate, re-exported), `policy` (who may run what), `server` (the daemon itself),
//! `reclaim` (what a killed daemon left behind), `pipesfs` (the live graph as a FUSE
//! filesystem), `audit` (the daemon's record: a log line for everything done to a run),
//! `view` (the daemon's own view of a run's graph, against which edits are checked),
//! `context` (the client's context, gathered by the command, taken by the worker), `web`
//! (the web view, `/metrics` and their sessions: `streamlined --http`).

pub mod audit;
pub mod context;
pub use protocol::client;
pub mod pipesfs;
pub mod policy;
pub use protocol::proto;
/// What the daemon tells a run's worker: the protocol's `ToWorker` with the run's graph
/// and its edits as the pipeline language types them (what the daemon parsed and
/// checked, which the worker derives the run from and applies).
pub type ToWorker = protocol::proto::ToWorker<lang::Graph, lang::edit::Edit>;
pub mod reclaim;
pub mod server;
pub mod spawn;
pub mod view;
pub mod web;
