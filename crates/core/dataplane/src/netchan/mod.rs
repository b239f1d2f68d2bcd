//! Channels between hosts (thesis 6.x, seed 002; issue 21): a stream leaves one run on a
//! `netout to=HOST:PORT` sink and enters another, on another host, at a `netin port=PORT`
//! source, with each block's class and record metadata (capture time, wire length, crop,
//! link type: the same header a channel between spaces carries), so the filters after it
//! see what they would see on one host.
//!
//! Two transports share one frame format ([`push_frame`], [`Frame::parse`]):
//! - [`tcp`]: lossless, in order, the sender's batches kept, credit flow control (a slow
//!   receiver slows the sender);
//! - [`udp`]: lossy, many queues (several sockets on each side; the receiver's kernel
//!   spreads the sender's flows over its `SO_REUSEPORT` sockets by their 4-tuple hash,
//!   the sender picks a queue per block with a queue-choice function, seed 002's f(n)),
//!   every datagram numbered per queue so the receiver counts what was lost.
//!
//! # A frame
//!
//! `len` (u32, the block's bytes), the 24-byte header of `channel::Meta`, the class (u16),
//! a flags byte ([`LAST`]: the sender's batch ends here), a reserved byte, the bytes.
//!
//! Owns: the wire formats, the credits, the loss accounting, both ends' filters. Does not
//! own: the filters' declarations (`filters::net`).

pub mod tcp;
pub mod udp;

pub use tcp::{NetIn, NetOut, DEFAULT_WINDOW, MAX_BLOCK};
pub use udp::{QueueChoice, UdpIn, UdpOut};

use crate::channel::{Meta, META_SIZE};
use crate::filter::Ctx;
use beltway::Tag;

/// Bytes of a frame before its data.
pub const HEAD: usize = 4 + META_SIZE + 4;
/// In a frame's flags: the last block of the sender's batch.
pub(crate) const LAST: u8 = 1;

/// The head of block `t`'s frame (`len` bytes of data); the flags byte is at [`FLAGS_AT`].
pub(crate) fn frame_head(cx: &Ctx<'_>, t: &Tag, len: usize) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    h[..4].copy_from_slice(&(len as u32).to_le_bytes());
    h[4..4 + META_SIZE].copy_from_slice(&Meta::of(cx, t).to_bytes());
    h[4 + META_SIZE..6 + META_SIZE].copy_from_slice(&t.class.to_le_bytes());
    h
}

/// Where a frame's flags byte is.
pub(crate) const FLAGS_AT: usize = 6 + META_SIZE;

/// Append block `t` (its bytes `d`) as a frame to `out`; returns where its flags byte is.
pub(crate) fn push_frame(out: &mut Vec<u8>, cx: &Ctx<'_>, t: &Tag, d: &[u8]) -> usize {
    let at = out.len();
    out.extend_from_slice(&frame_head(cx, t, d.len()));
    out.extend_from_slice(d);
    at + FLAGS_AT
}

/// A frame's head, read from the bytes that start with it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    /// Bytes of the block (`u32::MAX` in TCP's end-of-stream frame).
    pub len: u32,
    pub meta: Meta,
    pub class: u16,
    pub flags: u8,
}

impl Frame {
    /// The head at the start of `b`, if `b` holds a whole head.
    pub(crate) fn parse(b: &[u8]) -> Option<Frame> {
        if b.len() < HEAD {
            return None;
        }
        Some(Frame {
            len: u32::from_le_bytes(b[..4].try_into().ok()?),
            meta: Meta::from_bytes(&b[4..4 + META_SIZE])?,
            class: u16::from_le_bytes(b[4 + META_SIZE..6 + META_SIZE].try_into().ok()?),
            flags: b[FLAGS_AT],
        })
    }

    /// Make room for the frame's block of `len` bytes in the run's store, with its class
    /// and metadata; its bytes are written into it afterwards. Returns the tag and the
    /// new `link_set` (see [`Frame::restore`]).
    pub(crate) fn reserve(&self, cx: &mut Ctx<'_>, len: usize, link_set: bool) -> (Tag, bool) {
        let (t, _) = cx.store.alloc(len);
        let t = Tag {
            class: self.class,
            ..t
        };
        let set = self.meta.restore(cx.store, &t, link_set);
        (t, link_set | set)
    }

    /// Put the frame's block (`data`) into the run's store with its class and metadata;
    /// `link_set` says whether the store's buffer has its link type already (returns the
    /// new value).
    pub(crate) fn restore(&self, cx: &mut Ctx<'_>, data: &[u8], link_set: bool) -> (Tag, bool) {
        let t = cx.store.push(data);
        let t = Tag {
            class: self.class,
            ..t
        };
        let set = self.meta.restore(cx.store, &t, link_set);
        (t, link_set | set)
    }
}
