//! The byte formats of the data area, per layout: what precedes a record's payload and how
//! much ring a record takes. Shared by the single producer, the multi-producer
//! ([`crate::mp`]) and the readers, so that each fact about a layout's bytes is written once.
//!
//! Owns: record/slot header sizes and marker words, the abandoned-slot marker, and the
//! per-layout facts on [`Layout`] (payload offset). Does not own: where records sit
//! (positions and epochs are [`crate::pos`]).

use super::Layout;

/// Record header of the variable-record layout: `len` payload bytes follow (padded to 8).
pub(crate) const REC_HDR: u64 = 8;
pub(crate) const REC_DATA: u32 = 0x5245_4301; // "REC\x01"
pub(crate) const REC_PAD: u32 = 0x5041_4401; // "PAD\x01"
/// Slot layout: 4-byte length before the payload.
pub(crate) const SLOT_HDR: u64 = 4;
/// Length word marking a slot whose producer died before completing it (multi-producer
/// rings; readers skip it). Public as [`crate::mp::ABANDONED`].
pub const ABANDONED: u32 = u32::MAX;

impl Layout {
    /// Bytes of record header before the payload: the inline header of variable records,
    /// the length word of slots, nothing for tags and byte streams.
    #[inline]
    pub(crate) fn payload_hdr(self) -> u64 {
        match self {
            Layout::Records => REC_HDR,
            Layout::Slots => SLOT_HDR,
            Layout::Tags | Layout::Bytes => 0,
        }
    }
}

#[inline]
pub(crate) fn align8(n: u64) -> u64 {
    (n + 7) & !7
}
