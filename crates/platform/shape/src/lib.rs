//! Process shaping (seed 004, "Shaping Process Semantics"): token- and leaky-bucket budgets
//! for the network and disk calls of processes, with ten priority levels and latency- or
//! throughput-oriented priority policies, shared by every process of a shaped program and
//! of a `--group` through one shared-memory segment.
//!
//! Modules: `units` (rates and sizes as people write them), `config` (the policy and its
//! defaults), `bucket` (the lock-free bucket arithmetic), `segment` (the shared memory and
//! its members), `shaper` (how one call waits for its tokens), `program` (library or kernel, per
//! program), `seccomp` (the kernel mechanism: a seccomp user-notification supervisor).
//!
//! Used by: the interposition library (`preload`, for dynamically linked programs), the
//! seccomp supervisor of `streamline shape` (static programs, raw system calls), and the
//! `shape` pipeline filter, so a bucket means the same thing everywhere.

pub mod bucket;
pub mod config;
pub mod program;
pub mod seccomp;
pub mod segment;
pub mod shaper;
pub mod units;

pub use config::{Config, DiskCost, Kind, Limit, PrioPolicy, Resource};
pub use segment::{Segment, SegmentError};
pub use shaper::Shaper;

/// Environment variable naming the inherited segment fd of a shaped program.
pub const ENV_FD: &str = "STREAMLINE_SHAPE_FD";
/// Environment variable with the program's base priority (0-9).
pub const ENV_PRIO: &str = "STREAMLINE_SHAPE_PRIO";

/// `v` cut to its first `n` bytes: how a call is cut to its grant, by the library and by
/// the seccomp supervisor alike.
pub fn cut_iov(v: &[libc::iovec], n: usize) -> Vec<libc::iovec> {
    let mut left = n;
    let mut out = Vec::with_capacity(v.len());
    for i in v {
        if left == 0 {
            break;
        }
        let k = i.iov_len.min(left);
        out.push(libc::iovec {
            iov_base: i.iov_base,
            iov_len: k,
        });
        left -= k;
    }
    out
}
