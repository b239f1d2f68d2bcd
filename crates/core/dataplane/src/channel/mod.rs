//! Channels: the streams between spaces (thesis 4.3, 5.2.2).
//!
//! A channel is an IBuf (a beltway ring of 16-byte tags, lossless) plus a data ring, both
//! shared memory. The producing space ends the arc in an [`Egress`] sink; the consuming
//! space starts it with an [`Ingress`] source. Only tags move through the IBuf; a block's
//! bytes are written through into the channel's data ring once, where the consumer reads
//! them in place (the consumer maps the data ring as a DBuf of its store and renames the
//! tags to it). Lossless coupling: the producer reuses data-ring space only after the
//! consumer has released the tags that point into it, and the consumer releases a batch's
//! tags only after the whole batch has walked its space (manual release), so no block is
//! overwritten while a filter reads it.
//!
//! Wake-ups are batched per channel by the tag ring's event moderation: a sleeping
//! consumer is woken after `threshold` tags or when `latency` has passed since the first
//! unsignalled one, and the producer flushes at the end of each of its batches.
//!
//! A stream published to other runs ([`publish`], [`subscribe`]) is the exception: lossy
//! (thesis 4.5.4, FRP). The publisher never waits for a subscriber; each subscriber has
//! its own reader slot and position in the tag ring, copies every block out of the data
//! ring and then checks that it was not overwritten meanwhile, so one that falls behind
//! loses whole blocks (counted in its summary), never reads corrupt ones, and holds back
//! neither the publisher nor the other subscribers.
//!
//! Owns: channel creation and the two endpoint filters. Does not own placement, or the
//! block header the channel carries (`crate::transport`).
//!
//! Files: this one (configuration, creation, the header's use, the marker trait),
//! `egress` (the producer's end), `ingress` (the consumer's end), `share` (publish and
//! subscribe across runs), `tests`.

use crate::filter::Ctx;
use crate::transport::{header_of, Fields, Header, HeaderError, RECORD};
use beltway::{DbufView, IbufWriter, Layout, RingConfig, RingRef, Start, Tag, Writer};
use std::time::{Duration, Instant};

mod egress;
mod ingress;
mod share;
#[cfg(test)]
mod tests;

pub use egress::Egress;
pub use ingress::Ingress;
use ingress::IngressWait;
pub use share::{publish, published, share_name, share_name_of, subscribe};

/// How a channel batches its wake-ups and how much it buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChannelConfig {
    /// Tags committed per wake-up of a sleeping consumer (1: wake for every tag).
    pub threshold: u32,
    /// Longest a committed tag waits for its wake-up.
    pub latency: Duration,
    /// Tag slots in the IBuf.
    pub slots: usize,
    /// Bytes in the data ring.
    pub data: usize,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            threshold: 32,
            latency: Duration::from_millis(1),
            slots: 4096,
            data: 16 << 20,
        }
    }
}

impl ChannelConfig {
    /// `@latency`: small batches (wake for every block), short bound.
    pub fn latency() -> Self {
        ChannelConfig {
            threshold: 1,
            latency: Duration::from_micros(50),
            ..Self::default()
        }
    }
    /// `@throughput`: large batches.
    pub fn throughput() -> Self {
        ChannelConfig {
            threshold: 256,
            latency: Duration::from_millis(5),
            ..Self::default()
        }
    }
    /// `@lockstep` (seed 003, Model-T): the two spaces run as an assembly line. The queue
    /// holds [`LOCKSTEP_BATCHES`] of the runtime's batches, so the producer works on batch
    /// i while the consumer works on batch i-1 and is never further ahead: what both touch
    /// stays in the caches (a few batches of headers, not the 4096 blocks a free-running
    /// channel lets the producer run ahead). A wake-up per batch at most; the consumer
    /// polls rather than sleeps (the line's stations stay staffed).
    pub fn lockstep() -> Self {
        let batch = crate::runtime::BATCH;
        ChannelConfig {
            threshold: batch as u32,
            slots: LOCKSTEP_BATCHES * batch,
            ..Self::default()
        }
    }
}

/// Batches a `@lockstep` channel holds (see [`ChannelConfig::lockstep`]).
pub const LOCKSTEP_BATCHES: usize = 4;

/// Create a channel; `name` labels its rings (memfd-backed, nothing in /dev/shm).
pub fn channel(name: &str, cfg: ChannelConfig) -> beltway::Result<(Egress, Ingress)> {
    let (tx, tags, data) = egress(name, cfg, true)?;
    Ok((tx, ingress(name, &tags, &data, true)?))
}

/// The producer's end of a new channel, and the two rings a consumer attaches to (in this
/// process, or in another after [`RingRef::send`]). `same_process`: the consumer is a
/// space of this process, so blocks in the producer's shared rings cross as tags only.
/// Blocks in files cross as tags unless `same_process` is false and the consumer is the
/// parent (`to_parent`), which does not map files a process space names.
pub fn egress(
    name: &str,
    cfg: ChannelConfig,
    same_process: bool,
) -> beltway::Result<(Egress, RingRef, RingRef)> {
    egress_to(name, cfg, same_process, false)
}

/// [`egress`] with the direction known: `to_parent` for a process space's channels.
pub fn egress_to(
    name: &str,
    cfg: ChannelConfig,
    same_process: bool,
    to_parent: bool,
) -> beltway::Result<(Egress, RingRef, RingRef)> {
    let tags = Writer::create(
        &format!("{name}.tags"),
        RingConfig {
            latency: cfg.latency,
            ..RingConfig::bytes(cfg.slots * Tag::SIZE)
                .layout(Layout::Tags)
                .threshold(cfg.threshold)
                // The consumer's space sleeps on it (`Ingress::arm`).
                .wake_fd(true)
        },
    )?;
    let data = Writer::create(
        &format!("{name}.data"),
        RingConfig {
            buf_id: 1,
            ..RingConfig::bytes(cfg.data)
        },
    )?;
    let (tags_ref, data_ref) = (tags.ring(), data.ring());
    let writer = IbufWriter::new(tags)?.with_default(data)?;
    Ok((
        Egress {
            w: writer,
            name: name.to_string(),
            failed: false,
            announced: Vec::new(),
            same_process,
            file_refs: !to_parent,
            tags: tags_ref.clone(),
            published: false,
            reaped: Instant::now(),
            guards: Vec::new(),
            run: Vec::new(),
            metas: Vec::new(),
            metas_any: false,
        },
        tags_ref,
        data_ref,
    ))
}

/// The consumer's end of a channel, attached to its rings (attach every consumer before
/// the producer starts, so nothing is written before a reader holds its place).
/// `trusted`: the producer may name files for this space to map (not so for a process
/// space feeding its parent: a crashed or hostile one could name any file).
pub fn ingress(
    name: &str,
    tags: &RingRef,
    data: &RingRef,
    trusted: bool,
) -> beltway::Result<Ingress> {
    attach(name, tags, data, trusted, Start::Oldest)
}

fn attach(
    name: &str,
    tags: &RingRef,
    data: &RingRef,
    trusted: bool,
    start: Start,
) -> beltway::Result<Ingress> {
    let mut reader = tags.reader(start)?;
    reader.set_manual_release(true);
    // A batch holds at most a quarter of the data ring, so the producer keeps writing
    // while the consumer works on it.
    let max_bytes = (data.shared().max_size() / 4).max(1);
    Ok(Ingress {
        trusted,
        max_bytes,
        r: Some(reader),
        data: Some(DbufView::new(data)),
        local: 0,
        name: name.to_string(),
        held: false,
        link_set: false,
        files: Vec::new(),
        metas: Default::default(),
        sub: None,
        busy: false,
        marker: None,
        wait: IngressWait::default(),
    })
}

/// What travels with each block: its [`crate::transport`] header (capture time, wire
/// length, and for a block a filter cropped, how many bytes of its record lie before it;
/// link type and capture file header), so filters and sinks in the consuming space
/// (protocol parsers, `http` after `tcpstream`, pcapout) see the block exactly as the
/// producer did: placement never changes what a filter observes. A [`HEADER_LEN`]-byte
/// header written through into the data ring: ahead of the block's bytes (the consumer
/// crops it off the tag); or, for the blocks that cross as tags only (into a file or
/// shared ring both spaces map), one per block in a [`METAS`] block that precedes the run
/// of their tags (one write per batch, not one per block; a run without any metadata has
/// none); or ahead of a file's path or a shared ring's key ([`ANNOUNCE`], once per buffer
/// and channel). A block without record metadata carries an empty header (so a run of
/// such blocks by reference carries no METAS block at all).
pub(crate) fn meta_of(cx: &Ctx<'_>, t: &Tag) -> Fields {
    let f = header_of(cx.store, t);
    if f.has(RECORD) {
        f
    } else {
        Fields::default()
    }
}

/// The header at the start of `data`, or why there is none.
fn meta_at(data: &[u8]) -> Result<Fields, HeaderError> {
    Header::new_checked(data).map(|h| h.fields())
}

/// Tags that point into a producer's file carry its buffer id with this bit set.
const FILE_BIT: u16 = 0x8000;

pub use crate::filter::ChannelEnd;
