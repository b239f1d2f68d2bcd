//! Many spaces in one run (thesis 5.2): placement of a request graph's nodes onto spaces,
//! the split of the graph into one sub-graph per space joined by channels, and the driver
//! that runs each space on its own pinned worker thread.
//!
//! Replication first ([`replicate`]): `space=A,B,...` makes one copy of the filter per
//! listed space (split, copies, join); `@single` on a filter forbids copies of it.
//!
//! Hints: `@private` (a fresh process space), `@background` (a fresh thread space),
//! `@latency` / `@throughput` (the wake-up batching of the channels into the node),
//! `@single` (never replicated).
//!
//! Placement rule (until the optimizer decides): a node with `space=N` runs in space N
//! (`local` or `0` is the calling thread; N >= 1 is worker thread N, pinned to CPU
//! N mod the CPU count); `@private` or `@background` on a node without `space=` puts it
//! alone in a fresh space; every other node runs where its first upstream node runs;
//! sources without `space=` run locally. An arc between two spaces becomes a channel
//! (see [`crate::channel`]) whose wake-up batching follows the consumer's hints:
//! `@latency` small batches, `@throughput` large ones, otherwise the default.
//!
//! Owns: placement, the per-space graphs, thread start, pinning, collecting reports, and
//! turning a dead space into an error that names its filters. Does not own scheduling
//! inside a space (runtime) or the channel protocol (channel).
//!
//! One file per concern: `place` (pure placement and its rules), `split`
//! (the [`Layout`]: a placed graph cut into per-space parts, made once per run, and the
//! channel-endpoint factory), `build` (realizing a layout as a transaction), `run` (running the spaces and collecting reports), `protocol` (what
//! parent and process spaces say to each other), `child` (the process-space side).

mod build;
mod child;
mod place;
pub(crate) mod protocol;
mod report;
mod run;
mod split;

pub use build::{Launcher, Spaces};
pub use child::run_process_space;
pub use place::{
    check_joins, parallel_sections, place, replicate, schedule_in, schedule_of, ParallelSection,
    Placement, SpaceId, SpaceKind,
};
pub use protocol::ProtocolError;
pub use report::SpacesReport;
pub use split::{Channel, Layout, Part, Share, PUBLISH, SUBSCRIBE};
