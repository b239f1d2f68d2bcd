//! One execution space: the request graph instantiated as filters and arcs, scheduled
//! depth-first by plain function calls (thesis 5.2.1) over batches of tags.
//!
//! A source's batch enters its out-arcs; each arc forwards only the tags whose class its
//! selector admits (a port multicasts to every arc: no copy, only tags); each filter handles
//! the whole batch before it moves on. Sinks end the walk. Runs of classifiers share one
//! resolution of the batch's tags to bytes (`Space::classify_run`). Per filter the runtime
//! counts blocks and bytes in and out, drops, and time spent.

use crate::filter::{Args, Batch, Filter, Replication};
use crate::store::Store;
use std::time::Duration;

mod graph;
mod labels;
mod node;
mod route;
mod run;
mod space;
#[cfg(test)]
mod tests;

pub use labels::*;
pub use node::*;
pub use run::{Hooks, Quiet};

/// Blocks per batch pulled from a source.
pub const BATCH: usize = 256;
/// Arcs a block may traverse in one walk before the runtime calls it a runaway loop.
const MAX_DEPTH: usize = 4096;
/// How long a space goes on reading its channels from other spaces after an interrupt,
/// waiting for their producers to stop and close (what they captured is still counted).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// How often the loop calls its `tick` (progress, the counters an edit handle shows),
/// also the longest a space sleeps on its readiness handle.
const TICK: Duration = Duration::from_millis(100);

/// Builds filter instances by name (implemented by the filter library).
pub trait Factory {
    fn make(&self, name: &str, args: &Args) -> Result<Box<dyn Filter>, crate::FilterError>;
    fn is_source(&self, name: &str) -> bool;
    /// Whether and how the filter may be replicated (see [`Replication`]). The default,
    /// for factories that do not say, is per block.
    fn replication(&self, _name: &str) -> Replication {
        Replication::Blocks
    }
    /// Whether the filter keeps per-session state (its replicas need a hash split on the
    /// class, so each session stays on one replica).
    fn keeps_sessions(&self, name: &str) -> bool {
        self.replication(name) == Replication::Sessions
    }
    /// Whether the order of the blocks a filter receives can change what it does or
    /// writes. False only for filters that count (their totals are the same in any
    /// order); the default is true.
    fn order_matters(&self, _name: &str) -> bool {
        true
    }
    /// Whether the filter holds blocks across batches (reorders them: `tcpstream`'s
    /// early segments). Such a filter cannot move to another space while the run runs:
    /// the tags it holds name the old space's memory (see `crate::migrate`).
    fn keeps_blocks(&self, _name: &str) -> bool {
        false
    }
    /// Whether the filter declares an option `key` of its own (`gen`'s `size=`, its block
    /// size): then a control option of that name (thesis Table 3.2's `size=`, the bytes its
    /// stream buffers) is not the runtime's but the filter's.
    fn declares(&self, _name: &str, _key: &str) -> bool {
        false
    }
}

/// A graph instantiated in one space.
pub struct Space {
    pub(crate) nodes: Vec<RtNode>,
    store: Store,
    warnings: Vec<String>,
    stop: crate::filter::Stop,
    names: Vec<(String, u16)>,
    /// The allocation of the classifier path's resolved batch, kept between batches.
    spare: Vec<&'static [u8]>,
    /// A batch that reached its end, kept for the next source batch (no allocation per batch).
    spare_batch: Option<Batch>,
    /// Time per filter: the TSC (through `quanta`, ~10 ns a reading here against ~21 ns
    /// for `Instant::now`), read once per filter a batch passes. `last` is the last
    /// reading; the time since then is charged to the filter that just ran (so the moving
    /// of its input batch to it counts as its time).
    clock: quanta::Clock,
    last: u64,
    /// `--chaos`: random source batch sizes and random moves of filters across this
    /// space's channels at batch boundaries (see `crate::migrate`).
    pub(crate) chaos: Option<crate::chaos::Chaos>,
    /// The labels the run's other spaces give their nodes now (set with each edit by
    /// `EditHandle::apply`): a node an edit makes here takes none of them, so each label
    /// names one node of the whole run (the table folds rows by label).
    pub(crate) elsewhere: Vec<String>,
    /// The run loop has ended (its last `tick` call says so: a process space sends its
    /// counters then, whenever it last did).
    pub(crate) ending: bool,
    /// What the space sleeps on when a round of its loop found nothing (made when the
    /// loop starts; see [`crate::readiness`]).
    ready: Option<crate::readiness::Readiness>,
}
