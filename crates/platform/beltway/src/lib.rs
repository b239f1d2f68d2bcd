//! # Beltway: Streamline's communication plane
//!
//! Shared-memory rings after thesis Chapter 4 ("Beltway buffers"). Data lives once, in large
//! rings mapped into every process that uses it; streams pass 16-byte tags instead of copies.
//!
//! A tour, bottom up:
//! - [`sys`] and [`shm`]: the only `unsafe` code — memfd and /dev/shm objects with Unix
//!   permissions, mmap, futex, fd passing. A client without write permission maps read-only.
//! - [`layout`]: the `#[repr(C)]` metadata in shared memory: producer header, control segment
//!   with one cache-line-separated read position per consumer.
//! - [`pos`]: absolute positions, deck-cut epochs and the overwrite horizon (pure, tested).
//! - [`ring`]: the DBuf: [`Writer`] and [`Reader`] with layouts (bytes, fixed slots, variable
//!   records, tags), synchronization (SRP lossless with pipe semantics, FRP, MRP), event
//!   moderation, self-scaling, and dead-peer recovery.
//! - [`mp`]: multiple producers with acquire/complete and the open/closed bitmap.
//! - [`ibuf`]: tags, IBufs with read-through, write-through and splicing, the double ring.
//! - [`stream`]: the shared byte stream behind a Unix pipe (any writers, any readers,
//!   across fork and exec), what the preload library's pipes are.
//! - [`api`]: the Table 4.1 surface: the [`Source`]/[`Sink`] traits every implementation
//!   stacks behind, `pipe`, `mpipe`, `mkfifo`, `select`.
//!
//! What it does not own: what blocks mean (the dataplane), who may create which ring (the
//! daemon), where rings are placed (the control plane).

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod api;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod ibuf;
pub mod layout;
pub mod mp;
pub mod pos;
pub mod ring;
pub mod shm;
pub mod stream;
pub mod sys;
#[doc(hidden)]
pub mod testing;

pub use api::{mkfifo, mpipe, pipe, select, Sink, Source};
pub use error::{Error, Result};
pub use ibuf::{BufTable, DbufView, DoubleRing, IbufReader, IbufWriter, Tag};
pub use mp::MpWriter;
pub use ring::{
    Armed, Layout, Peeked, Reader, Ready, ReleaseCache, RingConfig, RingRef, RingStats, Start,
    SyncMode, Writer,
};
