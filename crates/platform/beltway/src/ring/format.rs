//! The byte formats of the data area, per layout: what precedes a record's payload, how
//! much ring a record takes, the markers for padding and abandoned slots, and how a reader
//! parses (possibly hostile) headers back. Shared by the single producer
//! ([`super::Writer`]), the multi-producer ([`crate::mp`]) and the readers, so that each
//! fact about a layout's bytes is written once, next to its inverse.
//!
//! Owns: record/slot header sizes and marker words, and the per-layout facts as methods on
//! [`Layout`]. Does not own: where records sit (positions and epochs are [`crate::pos`]) or
//! when they are published (writer, reader).
//!
//! Why methods with one `match` arm per layout rather than a trait with one implementation
//! per layout: the layout is a value in shared memory, chosen by the ring's creator and
//! read by every peer, and [`super::Writer`] and [`super::Reader`] are public types that
//! are not generic over it. A trait would therefore be dispatched through a `dyn` pointer
//! (an indirect call on every record written and read, which also stops the per-record
//! code from being inlined into the read and write loops), or would make `Writer` and
//! `Reader` generic (a change of the public API and of every user). A `match` on a
//! `Copy` enum inlines to a jump on a byte the caller already has in a register; keeping
//! all the arms here gives the same "one implementation per layout in one place" without
//! that cost.

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

/// A record header as written: up to 8 bytes, of which the first `len` are used.
pub(crate) struct Header {
    bytes: [u8; 8],
    len: usize,
}

impl Header {
    fn record(len: u32, kind: u32) -> Header {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        bytes[4..].copy_from_slice(&kind.to_le_bytes());
        Header {
            bytes,
            len: REC_HDR as usize,
        }
    }
    /// The bytes to store before the payload (empty for headerless layouts).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Where a reader parses: data-area offset `off` of its position, `room` bytes from there
/// to the lap end, `avail` bytes committed, in an epoch of `epoch_size` bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    pub(crate) off: u64,
    pub(crate) room: u64,
    pub(crate) avail: u64,
    pub(crate) epoch_size: u64,
}

/// What a reader finds at its position (see [`Layout::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A unit: ring bytes it takes, offset of its payload in the data area, payload length.
    Unit {
        total: u64,
        payload_off: u64,
        len: u64,
    },
    /// Padding or an abandoned slot of `total` ring bytes: step over it. When the size came
    /// from the header (`sized_by_header`), a lossy reader must first check the header was
    /// not overwritten, or it would believe a stranger's length.
    Skip { total: u64, sized_by_header: bool },
    /// A header that makes no sense (corrupt, hostile, or overwritten under a lossy reader).
    Bad(Bad),
}

/// Why a header makes no sense. Plain data, so the reader's hot path builds no string;
/// [`Bad::why`] words it on the (cold) error path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bad {
    TagCrossesEnd { off: u64 },
    SlotCrossesEnd { off: u64 },
    SlotTooLong { len: u32, slot_size: u64 },
    RecordDoesNotFit { len: u64, kind: u32, room: u64 },
}

impl Bad {
    #[cold]
    pub(crate) fn why(self) -> String {
        match self {
            Bad::TagCrossesEnd { off } => format!("tag slot at offset {off} crosses the ring end"),
            Bad::SlotCrossesEnd { off } => format!("slot at offset {off} crosses the ring end"),
            Bad::SlotTooLong { len, slot_size } => {
                format!("slot length {len} exceeds the slot size {slot_size}")
            }
            Bad::RecordDoesNotFit { len, kind, room } => {
                format!("record header (len {len}, kind {kind:#x}) does not fit the {room} bytes to the lap end")
            }
        }
    }
}

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

    /// Largest payload one record holds (`usize::MAX` for byte streams). Variable records
    /// take at most half of the smallest lap, so one always fits after padding.
    #[inline]
    pub(crate) fn max_payload(self, slot_size: u64, min_cap: u64) -> usize {
        match self {
            Layout::Bytes => usize::MAX,
            Layout::Records => (min_cap / 2 - REC_HDR) as usize,
            Layout::Slots | Layout::Tags => (slot_size - self.payload_hdr()) as usize,
        }
    }

    /// Ring bytes reserved for a record of `len` payload bytes (at most `max_payload`).
    #[inline]
    pub(crate) fn record_total(self, len: u64, slot_size: u64) -> u64 {
        match self {
            Layout::Records => REC_HDR + align8(len),
            Layout::Slots | Layout::Tags => slot_size,
            Layout::Bytes => len,
        }
    }

    /// Ring bytes a record committed with `len` payload bytes keeps of its reservation of
    /// `total`: a variable record gives the unused end back, a slot is always whole.
    #[inline]
    pub(crate) fn record_used(self, len: u64, total: u64) -> u64 {
        match self {
            Layout::Records => (REC_HDR + align8(len)).min(total),
            _ => total,
        }
    }

    /// The header stored before a committed payload of `len` bytes.
    #[inline]
    pub(crate) fn header(self, len: u32) -> Header {
        match self {
            Layout::Records => Header::record(len, REC_DATA),
            Layout::Slots => {
                let mut bytes = [0u8; 8];
                bytes[..4].copy_from_slice(&len.to_le_bytes());
                Header {
                    bytes,
                    len: SLOT_HDR as usize,
                }
            }
            Layout::Tags | Layout::Bytes => Header {
                bytes: [0; 8],
                len: 0,
            },
        }
    }

    /// The header that fills the `room` bytes left to the lap end when a record does not
    /// fit there (records never wrap); None where readers need no marker (byte streams
    /// wrap, and slot laps are whole slots).
    #[inline]
    pub(crate) fn padding(self, room: u64) -> Option<Header> {
        match self {
            Layout::Records => Some(Header::record((room - REC_HDR) as u32, REC_PAD)),
            _ => None,
        }
    }

    /// What marks a container whose producer died (multi-producer layouts: slots and tags).
    pub(crate) fn abandoned_marker(self) -> &'static [u8] {
        match self {
            Layout::Slots => const { &ABANDONED.to_le_bytes() },
            _ => &[0u8; 16],
        }
    }

    /// Parse the unit at `at`. `word` loads the 4-byte little-endian word at a data-area
    /// offset; `max` bounds a byte-stream chunk. The header may be hostile: every length is
    /// checked before it is believed.
    #[inline]
    pub(crate) fn parse(
        self,
        at: At,
        slot_size: u64,
        max: u64,
        word: impl Fn(u64) -> u32,
    ) -> Parsed {
        let At {
            off,
            room,
            avail,
            epoch_size,
        } = at;
        match self {
            Layout::Bytes => {
                let n = max.min(avail).min(room);
                Parsed::Unit {
                    total: n,
                    payload_off: off,
                    len: n,
                }
            }
            Layout::Tags => {
                if off + slot_size > epoch_size {
                    return Parsed::Bad(Bad::TagCrossesEnd { off });
                }
                Parsed::Unit {
                    total: slot_size,
                    payload_off: off,
                    len: slot_size,
                }
            }
            Layout::Slots => {
                let len = word(off);
                if off + slot_size > epoch_size {
                    return Parsed::Bad(Bad::SlotCrossesEnd { off });
                }
                if len == ABANDONED {
                    return Parsed::Skip {
                        total: slot_size,
                        sized_by_header: false,
                    };
                }
                if len as u64 > slot_size - SLOT_HDR {
                    return Parsed::Bad(Bad::SlotTooLong { len, slot_size });
                }
                Parsed::Unit {
                    total: slot_size,
                    payload_off: off + SLOT_HDR,
                    len: len as u64,
                }
            }
            Layout::Records => {
                let len = word(off) as u64;
                let kind = word(off + 4);
                let total = REC_HDR + align8(len);
                if !((kind == REC_DATA || kind == REC_PAD) && total <= room && total <= avail) {
                    return Parsed::Bad(Bad::RecordDoesNotFit { len, kind, room });
                }
                if kind == REC_PAD {
                    return Parsed::Skip {
                        total,
                        sized_by_header: true,
                    };
                }
                Parsed::Unit {
                    total,
                    payload_off: off + REC_HDR,
                    len,
                }
            }
        }
    }
}

#[inline]
pub(crate) fn align8(n: u64) -> u64 {
    (n + 7) & !7
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LAYOUTS: [Layout; 4] = [Layout::Bytes, Layout::Slots, Layout::Records, Layout::Tags];

    /// A 4 KiB epoch holding `bytes` at offset `off`, read back through `parse`.
    fn parse_at(layout: Layout, bytes: &[u8], off: u64, avail: u64, slot: u64) -> Parsed {
        let mut area = vec![0u8; 4096 + 8];
        area[off as usize..off as usize + bytes.len()].copy_from_slice(bytes);
        let word =
            |at: u64| u32::from_le_bytes(area[at as usize..at as usize + 4].try_into().unwrap());
        layout.parse(
            At {
                off,
                room: 4096 - off,
                avail,
                epoch_size: 4096,
            },
            slot,
            u64::MAX,
            word,
        )
    }

    proptest! {
        /// What a producer writes, a reader parses back: same length, payload right after
        /// the header, and the ring bytes the producer committed.
        #[test]
        fn headers_round_trip(which in 1usize..4, len in 0u64..2048, slot_log in 4u32..12, at in 0u64..64) {
            let layout = LAYOUTS[which];
            // Tag rings have 16-byte slots, and a tag fills its slot.
            let slot = if layout == Layout::Tags { 16 } else { 1u64 << slot_log };
            let len = if layout == Layout::Tags { 16 } else { len.min(layout.max_payload(slot, 4096) as u64) };
            let total = layout.record_total(len, slot);
            // Records sit at 8-byte boundaries, slots at slot boundaries.
            let off = if layout == Layout::Records { (at * 8).min(4096 - total) } else { (at * slot) % 4096 };
            let used = layout.record_used(len, total);
            let hdr = layout.header(len as u32);
            prop_assert_eq!(hdr.bytes().len() as u64, layout.payload_hdr());
            let got = parse_at(layout, hdr.bytes(), off, used, slot);
            prop_assert_eq!(got, Parsed::Unit { total: used, payload_off: off + layout.payload_hdr(), len });
        }

        /// Padding parses as a skip over exactly the room it fills.
        #[test]
        fn padding_is_skipped_whole(room8 in 2u64..512) {
            let room = room8 * 8;
            let off = 4096 - room;
            let pad = Layout::Records.padding(room).expect("records pad");
            prop_assert_eq!(parse_at(Layout::Records, pad.bytes(), off, room, 0), Parsed::Skip { total: room, sized_by_header: true });
            for l in [Layout::Bytes, Layout::Slots, Layout::Tags] {
                prop_assert!(l.padding(room).is_none());
            }
        }

        /// Hostile headers: whatever the words say, a unit or a skip stays inside the bytes
        /// to the lap end and the bytes committed, and a skip always makes progress.
        #[test]
        fn hostile_headers_stay_in_bounds(which in 0usize..4, w0: u32, w1: u32, off8 in 0u64..511, avail in 0u64..8192, slot_log in 4u32..12) {
            let layout = LAYOUTS[which];
            let slot = 1u64 << slot_log;
            let off = off8 * 8;
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&w0.to_le_bytes());
            bytes[4..].copy_from_slice(&w1.to_le_bytes());
            let room = 4096 - off;
            match parse_at(layout, &bytes, off, avail, slot) {
                Parsed::Unit { total, payload_off, len } => {
                    prop_assert!(total <= room);
                    prop_assert!(payload_off >= off && payload_off + len <= off + total);
                    if matches!(layout, Layout::Bytes | Layout::Records) {
                        prop_assert!(total <= avail);
                    }
                }
                Parsed::Skip { total, .. } => prop_assert!(total > 0 && total <= room),
                Parsed::Bad(why) => prop_assert!(!why.why().is_empty()),
            }
        }
    }

    #[test]
    fn abandoned_slot_is_skipped_not_read() {
        let marker = Layout::Slots.abandoned_marker();
        assert_eq!(
            parse_at(Layout::Slots, marker, 64, 4096, 64),
            Parsed::Skip {
                total: 64,
                sized_by_header: false
            }
        );
    }
}
