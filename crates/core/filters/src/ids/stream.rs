//! Conservative TCP reassembly for inspection (thesis 7.3.1: SafeCard "takes a
//! conservative view of traffic by dropping overlapping data"): one direction of a
//! connection, its bytes in sequence order as they become contiguous. Out-of-order and
//! tiny segments reassemble; retransmissions of the same bytes are trimmed; a segment
//! that overlaps bytes already seen (or held) with *different* bytes is an evasion
//! attempt ([`Overlap`]): the caller drops the stream and alerts, so an attacker cannot
//! make the inspector and the receiver see two different streams.
//!
//! The inspected bytes are kept (a copy) up to the stream's inspection depth, as
//! Suricata's `stream.reassembly.depth`; past it the direction is followed but not
//! inspected (counted by the caller). Early segments wait (copied) up to a bound.
//!
//! A reader that is done with a prefix of the bytes (the `httplog` filter, which parses
//! requests and skips bodies) gives it back with [`Direction::consume`]: the kept bytes
//! then start at [`Direction::base`], bytes before it are not kept when they arrive, and
//! the depth bounds the bytes kept at once rather than the stream's length.
//!
//! Owns: sequence arithmetic, overlap checks and the held segments of one direction.

use std::collections::BTreeMap;

/// Bytes of early segments one direction may hold before it gives up on the gap (the
/// stream is then no longer inspected: counted by the caller, never silent).
pub const HELD_MAX: usize = 1 << 20;

/// A segment overlapping earlier bytes with different ones, at stream offset `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap {
    pub at: u64,
}

/// What a segment did to its direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// New contiguous bytes `[from, to)` (stream offsets) are in [`Direction::bytes`]
    /// (those within the depth), possibly none.
    Data { from: u64, to: u64 },
    /// The segment changes bytes already seen: drop the stream.
    Overlap(Overlap),
    /// Too many bytes are held behind a gap: the direction stops being inspected.
    Gave,
}

/// One direction of a TCP connection.
#[derive(Debug, Clone)]
pub struct Direction {
    /// Sequence number of stream offset 0 (the SYN's + 1, or the first segment's).
    isn: Option<u32>,
    /// Stream offset of the next byte expected.
    next: u64,
    /// The stream's bytes from offset `base`, up to `depth` of them.
    bytes: Vec<u8>,
    /// Stream offset of `bytes[0]` (0 unless the reader consumed a prefix).
    base: u64,
    depth: usize,
    /// Early segments by stream offset.
    held: BTreeMap<u64, Vec<u8>>,
    held_bytes: usize,
    /// Given up (too much held): no more inspection.
    pub gave_up: bool,
}

impl Direction {
    pub fn new(depth: usize) -> Direction {
        Direction {
            isn: None,
            next: 0,
            bytes: Vec::new(),
            base: 0,
            depth,
            held: BTreeMap::new(),
            held_bytes: 0,
            gave_up: false,
        }
    }

    /// The SYN of this direction (sequence number `seq`): the stream starts after it.
    pub fn syn(&mut self, seq: u32) {
        if self.isn.is_none() {
            self.isn = Some(seq.wrapping_add(1));
        }
    }

    /// The contiguous bytes kept so far (stream offsets `base..base + len`, at most the
    /// depth of them).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Stream offset of the first byte of [`Direction::bytes`].
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The reader is done with the stream before offset `upto`: those bytes are no longer
    /// kept (nor, past what has arrived, kept when they come), and no longer compared
    /// with retransmissions.
    pub fn consume(&mut self, upto: u64) {
        if upto <= self.base {
            return;
        }
        let n = ((upto - self.base) as usize).min(self.bytes.len());
        self.bytes.drain(..n);
        self.base = upto;
    }

    /// Whether bytes were lost between what is kept and what has arrived (the kept bytes
    /// reached the depth): the stream after `base + bytes().len()` is not readable.
    pub fn truncated(&self) -> bool {
        self.base + (self.bytes.len() as u64) < self.next
    }

    /// Stream offset of the next byte expected.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Whether the depth is reached (nothing more is inspected).
    pub fn past_depth(&self) -> bool {
        self.next as usize >= self.depth
    }

    /// Stream offset of sequence number `seq` (the nearest to `next` of its 2^32
    /// aliases; before offset 0 is refused as None).
    fn offset(&self, seq: u32) -> Option<u64> {
        let isn = self.isn?;
        let rel = seq.wrapping_sub(isn) as u64;
        // The alias of rel nearest to next.
        let base = self.next & !0xffff_ffff;
        let cands = [base.wrapping_sub(1 << 32), base, base + (1 << 32)];
        cands
            .iter()
            .map(|b| b.wrapping_add(rel))
            .filter(|&o| o < (1 << 62))
            .min_by_key(|&o| o.abs_diff(self.next))
    }

    /// A segment of `data` at sequence number `seq`.
    pub fn segment(&mut self, seq: u32, data: &[u8]) -> Step {
        if self.isn.is_none() {
            // Picked up mid-stream: this segment is offset 0.
            self.isn = Some(seq);
        }
        let none = Step::Data {
            from: self.next,
            to: self.next,
        };
        if data.is_empty() || self.gave_up {
            return none;
        }
        let Some(mut at) = self.offset(seq) else {
            return none;
        };
        let mut data = data;
        let from = self.next;
        // The part before `next`: bytes already seen; they must be the same.
        if at < self.next {
            let old = (self.next - at).min(data.len() as u64) as usize;
            if let Some(o) = self.differs(at, &data[..old]) {
                return Step::Overlap(o);
            }
            data = &data[old..];
            at += old as u64;
            if data.is_empty() {
                return none;
            }
        }
        if let Some(o) = self.conflicts_with_held(at, data) {
            return Step::Overlap(o);
        }
        if at > self.next {
            if self.held_bytes + data.len() > HELD_MAX {
                self.gave_up = true;
                self.held.clear();
                self.held_bytes = 0;
                return Step::Gave;
            }
            let keep = self.held.get(&at).map_or(0, Vec::len);
            if data.len() > keep {
                self.held_bytes += data.len() - keep;
                self.held.insert(at, data.to_vec());
            }
            return none;
        }
        self.append(data);
        // Held segments that are now contiguous.
        while let Some((&o, _)) = self.held.first_key_value() {
            if o > self.next {
                break;
            }
            let seg = self.held.pop_first().map(|(_, s)| s).unwrap_or_default();
            self.held_bytes -= seg.len();
            let skip = (self.next - o) as usize;
            if skip < seg.len() {
                self.append(&seg[skip..]);
            }
        }
        Step::Data {
            from,
            to: self.next,
        }
    }

    fn append(&mut self, data: &[u8]) {
        // Bytes before `base` were consumed before they came: not kept.
        let skip = (self.base.saturating_sub(self.next) as usize).min(data.len());
        let kept_end = self.base + self.bytes.len() as u64;
        // Only contiguous bytes are kept: none once some were lost to the depth.
        if kept_end == self.next.max(self.base) {
            let data = &data[skip..];
            let room = self.depth.saturating_sub(self.bytes.len());
            self.bytes.extend_from_slice(&data[..data.len().min(room)]);
        }
        self.next += data.len() as u64;
    }

    /// Where `data` at offset `at` (all before `next`) differs from the bytes kept.
    fn differs(&self, at: u64, data: &[u8]) -> Option<Overlap> {
        for (k, &b) in data.iter().enumerate() {
            let o = at + k as u64;
            let Some(i) = o.checked_sub(self.base) else {
                continue;
            };
            match self.bytes.get(i as usize) {
                Some(&old) if old != b => return Some(Overlap { at: o }),
                // Past the depth the bytes are not kept: nothing to compare.
                _ => {}
            }
        }
        None
    }

    /// Where `data` at `at` overlaps a held segment with different bytes.
    fn conflicts_with_held(&self, at: u64, data: &[u8]) -> Option<Overlap> {
        let end = at + data.len() as u64;
        // Held segments that start before `end` and end after `at`.
        for (&o, seg) in self.held.range(..end).rev() {
            let seg_end = o + seg.len() as u64;
            if seg_end <= at {
                // Segments are kept longest-per-start; earlier ones may still reach.
                continue;
            }
            let lo = at.max(o);
            let hi = end.min(seg_end);
            for x in lo..hi {
                if data[(x - at) as usize] != seg[(x - o) as usize] {
                    return Some(Overlap { at: x });
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &Step) -> (u64, u64) {
        match s {
            Step::Data { from, to } => (*from, *to),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn in_order_out_of_order_and_tiny_segments_reassemble() {
        let mut d = Direction::new(1 << 16);
        d.syn(999);
        assert_eq!(data(&d.segment(1000, b"GE")), (0, 2));
        // An early segment waits; the gap's filling brings both.
        assert_eq!(data(&d.segment(1004, b"/x")), (2, 2));
        assert_eq!(data(&d.segment(1003, b" ")), (2, 2));
        assert_eq!(data(&d.segment(1002, b"T")), (2, 6));
        assert_eq!(d.bytes(), b"GET /x");
        // A retransmission of the same bytes changes nothing.
        assert_eq!(data(&d.segment(1000, b"GET")), (6, 6));
        assert_eq!(d.bytes(), b"GET /x");
    }

    #[test]
    fn an_overlap_with_other_bytes_is_refused_wherever_it_is() {
        let mut d = Direction::new(1 << 16);
        d.syn(0);
        d.segment(1, b"GET /index");
        // Over seen bytes.
        assert_eq!(d.segment(5, b"/evil"), Step::Overlap(Overlap { at: 5 }));
        // Over held bytes.
        let mut d = Direction::new(1 << 16);
        d.syn(0);
        d.segment(1, b"ab");
        d.segment(10, b"12345");
        assert_eq!(d.segment(8, b"xx1X"), Step::Overlap(Overlap { at: 10 }));
        assert_eq!(data(&d.segment(8, b"xx12")), (2, 2));
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut d = Direction::new(1 << 16);
        d.syn(u32::MAX - 2);
        assert_eq!(data(&d.segment(u32::MAX - 1, b"ab")), (0, 2));
        assert_eq!(data(&d.segment(0, b"cd")), (2, 4));
        assert_eq!(d.bytes(), b"abcd");
    }

    #[test]
    fn the_depth_caps_what_is_kept_and_holding_is_bounded() {
        let mut d = Direction::new(4);
        d.syn(0);
        assert_eq!(data(&d.segment(1, b"abcdef")), (0, 6));
        assert_eq!(d.bytes(), b"abcd");
        assert!(d.past_depth());
        let mut d = Direction::new(1 << 16);
        d.syn(0);
        let big = vec![0u8; HELD_MAX];
        d.segment(100, &big);
        assert_eq!(d.segment(100 + HELD_MAX as u32, b"x"), Step::Gave);
        assert!(d.gave_up);
    }

    #[test]
    fn a_consumed_prefix_is_not_kept_and_bytes_consumed_ahead_are_skipped() {
        let mut d = Direction::new(8);
        d.syn(0);
        d.segment(1, b"abcdef");
        d.consume(4);
        assert_eq!((d.base(), d.bytes()), (4, &b"ef"[..]));
        // Consumed ahead of what arrived: the next 4 bytes are skipped, the rest kept.
        d.consume(10);
        assert_eq!(data(&d.segment(7, b"ghijklmn")), (6, 14));
        assert_eq!((d.base(), d.bytes()), (10, &b"klmn"[..]));
        // The depth bounds what is kept at once, not the stream's length.
        d.segment(15, b"opqrst");
        assert_eq!(d.bytes(), b"klmnopqr");
        assert!(d.truncated());
    }
}
