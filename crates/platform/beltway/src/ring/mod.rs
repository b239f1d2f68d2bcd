//! The shared ring: creation and opening, the single producer ([`Writer`]) and the
//! consumers ([`Reader`]), with every specialization of thesis 4.5 selected by
//! [`RingConfig`]:
//!
//! - layout: byte stream, fixed-slot records, variable records with inline length, tags;
//! - synchronization: SRP (lossless, writer blocks on the slowest reader, Unix pipe
//!   semantics), FRP (writer never waits, readers validate), MRP (writer waits on a shared
//!   pointer R that readers advance);
//! - size: static, or self-scaling by deck-cut between a minimum and the mapped maximum;
//! - event moderation: wake-ups batched by a threshold with a latency bound (thesis 5.2.2).
//!
//! Blocking uses futex words in shared memory. Blocked parties wake at least every
//! `liveness` interval to check that the peer they wait for is alive, so a peer killed with
//! SIGKILL never wedges the others (its reader slot is reclaimed; a dead writer reads as EOF).
//!
//! One file per concern; the dependency runs one way, from the producers and consumers
//! down to what they share:
//!
//! - `config`: [`Layout`], [`SyncMode`], [`Start`], [`RingConfig`] and its validation;
//! - `format`: the byte formats of each layout (record and slot headers, markers);
//! - `shared`: [`Shared`] (creating, opening and validating the mapped segments, the
//!   epoch table, passing a ring to another process), [`RingRef`], [`RingStats`];
//! - `release`: the control segment's lock and how far the lossless readers released
//!   (what a producer waits on), with the reader-slot bookkeeping;
//! - `fences` and `notify`: the sleep/wake handshake (asymmetric fences, publishing
//!   a position, waking the readers);
//! - `writer`: the single producer [`Writer`] and [`RecordBuilder`];
//! - `reader`: the consumer [`Reader`] ([`Ready`], [`Peeked`]);
//! - `select`: waiting on several readers at once.
//!
//! The multi-producer ([`crate::mp`]) builds on `shared`, `release`, `notify` and `format`;
//! nothing here depends on it.
//!
//! ## Orderings
//!
//! Every atomic access that is not `Relaxed` says at its site (`SYNC POINT`) what it pairs
//! with. The protocols, in short:
//! - data: a producer stores bytes, then publishes write_pos with Release
//!   (`fences::publish`); readers load write_pos with Acquire before reading below it.
//! - space: a reader publishes its slot position (or raises MRP's R) with Release after its
//!   last load of the data; a producer loads them with Acquire before overwriting.
//! - overwrite detection (lossy readers): the producer stores the tail, then a Release
//!   fence, then overwrites; a reader copies, then an Acquire fence, then loads the tail.
//! - sleep/wake (both directions): an asymmetric Dekker handshake, see `fences`.
//! - epochs: a seqlock (odd increment, Release fence, entries, Release even increment).
//!
//! Orderings that are stronger than their pairing needs, or that formally lean on the
//! hardware, are marked at their site rather than changed: the tail's Acquire loads (the
//! tail is stored Relaxed, so they pair with no Release store), `attached_ever`'s AcqRel
//! (only ever loaded Relaxed), the sleeper counters' SeqCst (a hint), and, without
//! membarrier, the fast side's SeqCst swap followed by a Relaxed flag load (a full barrier
//! on x86; the C++ model would want a `fence(SeqCst)` between them).

mod config;
pub(crate) mod fences;
pub(crate) mod format;
pub(crate) mod notify;
mod reader;
pub(crate) mod release;
mod select;
mod shared;
mod writer;

pub use config::{Layout, RingConfig, Start, SyncMode};
pub use reader::{Armed, Peeked, Reader, Ready};
pub use release::ReleaseCache;
pub use select::select;
pub use shared::{RingRef, RingStats, Shared};
pub use writer::{RecordBuilder, Writer};
