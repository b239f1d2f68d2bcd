//! Channels between hosts (thesis 6.x, seed 002; issue 21): a stream leaves one run on a
//! `netout to=HOST:PORT` sink and enters another, on another host, at a `netin port=PORT`
//! source, with each block's class and record metadata (capture time, wire length, crop,
//! link type: the same header a channel between spaces carries), so the filters after it
//! see what they would see on one host.
//!
//! Two transports share one frame format (the block header, [`frame_at`]):
//! - [`tcp`]: lossless, in order, the sender's batches kept, credit flow control (a slow
//!   receiver slows the sender);
//! - [`udp`]: lossy, many queues (several sockets on each side; the receiver's kernel
//!   spreads the sender's flows over its `SO_REUSEPORT` sockets by their 4-tuple hash,
//!   the sender picks a queue per block with a queue-choice function, seed 002's f(n)),
//!   every datagram numbered per queue so the receiver counts what was lost.
//!
//! # A frame
//!
//! The block header ([`crate::transport`]: `len` the block's bytes, its class, record
//! metadata and link type, and in its frame flags [`crate::transport::LAST`]: the sender's batch ends here),
//! then the block's bytes.
//!
//! Owns: the wire formats, the credits, the loss accounting, both ends' filters. Does not
//! own: the filters' declarations (`filters::net`).

pub mod tcp;
pub mod udp;

pub use tcp::{NetIn, NetOut, DEFAULT_WINDOW, MAX_BLOCK};
pub use udp::{QueueChoice, UdpIn, UdpOut};

use crate::transport::{Fields, Header, HeaderError, HEADER_LEN};

/// Bytes of a frame before its data: the block header.
pub const HEAD: usize = HEADER_LEN;

/// The header of the frame that starts `b`: `Truncated` while fewer than [`HEAD`] bytes
/// have come, `Invalid` for bytes no sender writes.
pub(crate) fn frame_at(b: &[u8]) -> Result<Fields, HeaderError> {
    Header::new_checked(b).map(|h| h.fields())
}
