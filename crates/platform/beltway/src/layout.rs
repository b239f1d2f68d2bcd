//! The `#[repr(C)]` structures a ring keeps in shared memory (thesis 4.4.2, Figure 4.6).
//!
//! A ring is two segments with independent Unix permissions:
//! - the **data segment**: one page of producer metadata ([`RingHeader`]) followed by the
//!   power-of-two data area. Written only by producers; readers may map it read-only.
//! - the **control segment**: [`CtlHeader`] followed by one cache-line-separated
//!   [`ReaderSlot`] per registered consumer (private read positions) — the "private
//!   metadata" of the thesis. A reader that may not write it is an unregistered observer: it
//!   cannot hold the writer back and validates what it read with `check`.
//!
//! Every field that changes after creation is atomic; each store/load documents the
//! ordering it needs at the use site (`SYNC POINT`).

#![allow(unsafe_code)] // only `unsafe impl ShmSafe`, each with its contract argued

use crate::shm::ShmSafe;
use std::sync::atomic::{AtomicU32, AtomicU64};

pub const MAGIC_DATA: u64 = u64::from_le_bytes(*b"BELTWAY1");
pub const MAGIC_CTL: u64 = u64::from_le_bytes(*b"BELTCTL1");
pub const VERSION: u32 = 1;
/// The data area starts at this offset of the data segment.
pub const DATA_OFFSET: usize = 4096;
/// Epochs kept in the header (two are ever needed; see [`crate::pos`]).
pub const EPOCHS: usize = 4;

/// Ring state bits (`RingHeader::state`).
pub const STATE_CLOSED: u32 = 1;

/// Reader slot states.
pub const SLOT_FREE: u32 = 0;
pub const SLOT_ACTIVE: u32 = 2;

#[repr(C, align(64))]
#[derive(Debug)]
pub struct CacheLine<T>(pub T);

#[repr(C)]
#[derive(Debug)]
pub struct RingConst {
    /// Written last at creation, so a reader never sees a half-initialised header.
    pub magic: AtomicU64,
    pub version: AtomicU32,
    /// [`crate::Layout`] code.
    pub layout: AtomicU32,
    /// [`crate::SyncMode`] code.
    pub sync: AtomicU32,
    /// Slot size for slot layouts, else 0.
    pub slot_size: AtomicU32,
    /// Size of the data area (the largest active size).
    pub max_cap: AtomicU64,
    /// Smallest active size deck-cut may choose (== max_cap for static rings).
    pub min_cap: AtomicU64,
    /// Process that owns the producer side (for liveness checks and stale-name recovery).
    pub writer_pid: AtomicU32,
    /// Multi-producer ring (1) or single producer (0).
    pub multi_producer: AtomicU32,
    pub writer_start: AtomicU64,
    /// Identifier of this buffer in tags (rich pointer level 1).
    pub buf_id: AtomicU32,
    pub max_readers: AtomicU32,
}

/// The producer's hot cache line.
#[repr(C)]
#[derive(Debug)]
pub struct ProducerLine {
    /// Everything below this position is committed and readable.
    pub write_pos: AtomicU64,
    /// Number of epochs so far; readers reload the epoch table when it changes.
    pub epoch_gen: AtomicU64,
    /// STATE_* bits.
    pub state: AtomicU32,
    pub _pad: AtomicU32,
    /// Slowest-reader position the writer has promised not to overwrite without re-scanning
    /// (readers that attach late start at or after it).
    pub guard: AtomicU64,
}

#[repr(C)]
#[derive(Debug)]
pub struct EpochTable {
    /// Seqlock: odd while the writer updates the table.
    pub seq: AtomicU64,
    pub count: AtomicU64,
    /// (start, size) pairs, entry i at index i % EPOCHS.
    pub entries: [[AtomicU64; 2]; EPOCHS],
}

#[repr(C)]
#[derive(Debug)]
pub struct Moderation {
    /// Wake readers after this many commits (event batching threshold, thesis 5.2.2).
    pub threshold: AtomicU32,
    /// Latency bound in microseconds.
    pub latency_us: AtomicU32,
    /// Statistics.
    pub wakeups: AtomicU64,
    pub writer_waits: AtomicU64,
    pub resizes: AtomicU64,
    pub overwritten: AtomicU64,
}

#[repr(C)]
#[derive(Debug)]
pub struct MultiProducer {
    /// Spin lock word (0 free, else owner pid) protecting bitmap and head together.
    pub lock: AtomicU32,
    pub _pad: AtomicU32,
    /// Open/closed bit pairs, pair i for slot head + i (thesis 4.5.4).
    pub bitmap: AtomicU64,
    /// Futex word producers sleep on when the bitmap is full.
    pub seq: AtomicU32,
    /// Commits since readers were last woken (batching across producers).
    pub pending: AtomicU32,
    /// Owner (pid) of each open pair, for recovering slots of producers that died.
    pub owners: [AtomicU32; MP_PAIRS],
}

/// Concurrent open containers in a multi-producer ring (bit pairs in a u64).
pub const MP_PAIRS: usize = 32;

/// The overwrite horizon, on a line of its own: the writer stores it on every write that
/// overwrites, and only lossy readers (checking their copies) and attaching readers load
/// it, so on lossless rings it never bounces between cores — unlike `write_pos`, which
/// readers poll.
#[repr(C)]
#[derive(Debug)]
pub struct TailLine {
    /// Everything below this position may have been overwritten.
    pub tail: AtomicU64,
}

/// Page 0 of the data segment.
#[repr(C)]
#[derive(Debug)]
pub struct RingHeader {
    pub c: CacheLine<RingConst>,
    pub p: CacheLine<ProducerLine>,
    pub t: CacheLine<TailLine>,
    pub epochs: CacheLine<EpochTable>,
    pub m: CacheLine<Moderation>,
    pub mp: CacheLine<MultiProducer>,
}

// SAFETY: repr(C), only atomics (and atomics in repr(C) wrappers), no pointers; the zero
// pattern is valid (and is what a fresh memfd holds).
unsafe impl ShmSafe for RingHeader {}

/// Control segment header.
#[repr(C)]
#[derive(Debug)]
pub struct CtlHeader {
    pub magic: CacheLine<AtomicU64>,
    pub w: CacheLine<WriterWait>,
    pub r: CacheLine<ReaderWait>,
    pub lock: CacheLine<AtomicU32>,
}

/// Written by readers to wake a writer waiting for space.
#[repr(C)]
#[derive(Debug)]
pub struct WriterWait {
    /// Futex word the writer sleeps on.
    pub space_seq: AtomicU32,
    /// Non-zero while the writer waits.
    pub waiting: AtomicU32,
    /// A reader whose position reaches this wakes the writer.
    pub target: AtomicU64,
    /// MRP's shared read pointer R.
    pub mrp_r: AtomicU64,
}

/// Written by readers going to sleep; read by the writer after every commit.
#[repr(C)]
#[derive(Debug)]
pub struct ReaderWait {
    /// Eventcount readers sleep on: bit 0 = "a reader is (about to be) asleep", set by
    /// readers; the waking producer clears it and advances the count, so one sleep costs
    /// at most one wake-up system call however many commits follow.
    pub data_seq: AtomicU32,
    /// Readers sleeping with a latency-bound timeout (batched wake-ups).
    pub sleepers: AtomicU32,
    /// Readers sleeping without data for longer than the latency bound: wake on first commit.
    pub deep_sleepers: AtomicU32,
    /// Readers that ever attached (for broken-pipe semantics).
    pub attached_ever: AtomicU32,
    /// Readers currently attached.
    pub active: AtomicU32,
}

// SAFETY: repr(C), atomics only, zero is valid.
unsafe impl ShmSafe for CtlHeader {}

/// One consumer's private metadata, on its own two cache lines (no false sharing with the
/// producer or other readers).
#[repr(C, align(128))]
#[derive(Debug)]
pub struct ReaderSlot {
    pub state: AtomicU32,
    pub pid: AtomicU32,
    pub start: AtomicU64,
    /// Next position this reader will read; everything below is released.
    pub pos: AtomicU64,
    /// 1 if this reader does not hold the writer back (FRP/MRP).
    pub lossy: AtomicU32,
    pub _pad: AtomicU32,
    /// Bytes this reader lost to overwrite.
    pub lost: AtomicU64,
}

// SAFETY: repr(C), atomics only, zero is valid.
unsafe impl ShmSafe for ReaderSlot {}

pub const CTL_SLOTS_OFFSET: usize = std::mem::size_of::<CtlHeader>().next_multiple_of(128);

pub fn ctl_len(max_readers: usize) -> usize {
    crate::shm::page_round(CTL_SLOTS_OFFSET + max_readers * std::mem::size_of::<ReaderSlot>())
}

pub fn slot_offset(i: usize) -> usize {
    CTL_SLOTS_OFFSET + i * std::mem::size_of::<ReaderSlot>()
}

const _: () = assert!(std::mem::size_of::<RingHeader>() <= DATA_OFFSET);
const _: () = assert!(std::mem::size_of::<ReaderSlot>() == 128);

/// Names of the DBufs an IBuf's tags refer to, kept in the IBuf's header page (after the
/// [`RingHeader`]) so readers in other processes can map them on demand. The entries are
/// plain bytes following this header; `count` publishes them.
#[repr(C)]
#[derive(Debug)]
pub struct BufNames {
    pub count: AtomicU32,
    pub _pad: AtomicU32,
}
// SAFETY: repr(C), atomics only, zero is valid.
unsafe impl ShmSafe for BufNames {}
