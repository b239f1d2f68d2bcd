//! Annotations of a DBuf: the link type of its frames and per-record metadata
//! ([`RecordMeta`]: capture time, wire length, and for a cropped block the bytes of its
//! record it no longer holds), kept compact and sorted, and the [`Store`] methods that
//! set and look them up.

use super::{index, BufId, Store};
use beltway::Tag;

/// Out-of-band metadata of one record in a DBuf (like a dr-DBuf's header ring): where its
/// bytes lie, when it was captured, its length on the wire.
///
/// A record may be held in part: a block cropped by a filter in one space (`tcpstream`,
/// `strip`) reaches another space without the bytes before its start, and `skip` says how
/// many there were, so the block is still known there as a cropped piece of a record (with
/// the record's time and wire length), exactly as it is in the space that cropped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMeta {
    /// Where the record's bytes held in this buffer start.
    pub pos: u64,
    /// How many of its bytes this buffer holds from `pos` (a tag starting at or past
    /// `pos + len` belongs to another block).
    pub len: u32,
    /// Bytes of the record before `pos` that this buffer does not hold (0: from its start).
    pub skip: u32,
    pub ts_ns: u64,
    pub orig_len: u32,
}

impl RecordMeta {
    /// A whole record of `len` captured bytes at `pos`.
    pub fn whole(pos: u64, len: u32, ts_ns: u64, orig_len: u32) -> RecordMeta {
        RecordMeta {
            pos,
            len,
            skip: 0,
            ts_ns,
            orig_len,
        }
    }
    /// Where a tag at `pos` starts inside the record (counting bytes this buffer lacks).
    pub fn offset_of(&self, pos: u64) -> u64 {
        pos - self.pos + self.skip as u64
    }
}

/// The file header of the pcap capture a buffer's frames were read from, what a capture
/// writer needs to give the file back as it was: byte order, time precision and snap
/// length (the link type is [`Store::link`]). Version 2.4, time zone 0 and accuracy 0 go
/// without saying (what libpcap, tcpdump and Wireshark write). It travels with the frames
/// as the link type does: copies of a block and channels to other spaces carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureHeader {
    /// The file's integers are big-endian (magic `a1 b2 c3 d4` / `a1 b2 3c 4d`).
    pub big_endian: bool,
    /// Record times are in nanoseconds (magic `a1b23c4d`), not microseconds.
    pub nanos: bool,
    /// The snap length as the file states it (0 included).
    pub snaplen: u32,
}

/// Per-buffer annotations: link type of its frames (pcap LINKTYPE_*), the capture header
/// they came with, record metadata.
#[derive(Debug, Default)]
pub(super) struct Annotations {
    pub(super) link: Option<u32>,
    pub(super) capture: Option<CaptureHeader>,
    pub(super) records: Records,
    /// Index of the last record found (lookups are mostly sequential).
    pub(super) hint: std::cell::Cell<usize>,
}

/// A buffer's records, sorted by position, 24 bytes each (a capture's index is one entry
/// per packet: a file of 600k packets keeps 14 MB of them, not 19). The bytes a crop left
/// behind (`RecordMeta::skip`, rare: cropped blocks that crossed a channel or were
/// copied) live in a side table, flagged by the top bit of `len`.
#[derive(Debug, Default)]
pub(super) struct Records {
    v: Vec<Stored>,
    /// (position, skip) of the records that have one, sorted by position.
    skips: Vec<(u64, u32)>,
}

#[derive(Debug, Clone, Copy)]
struct Stored {
    pos: u64,
    ts_ns: u64,
    orig_len: u32,
    /// Bytes held from `pos`; [`HAS_SKIP`] set when `skips` has an entry for `pos`.
    len: u32,
}

const HAS_SKIP: u32 = 1 << 31;

impl Stored {
    fn of(r: &RecordMeta) -> Stored {
        Stored {
            pos: r.pos,
            ts_ns: r.ts_ns,
            orig_len: r.orig_len,
            len: r.len.min(HAS_SKIP - 1) | if r.skip > 0 { HAS_SKIP } else { 0 },
        }
    }
    #[inline]
    fn held(&self) -> u32 {
        self.len & !HAS_SKIP
    }
    #[inline]
    fn covers(&self, pos: u64) -> bool {
        pos >= self.pos && (pos - self.pos < self.held() as u64 || pos == self.pos)
    }
}

impl Records {
    fn get(&self, i: usize) -> Option<&Stored> {
        self.v.get(i)
    }
    fn meta(&self, s: &Stored) -> RecordMeta {
        let skip = if s.len & HAS_SKIP != 0 {
            self.skips
                .binary_search_by_key(&s.pos, |x| x.0)
                .map_or(0, |i| self.skips[i].1)
        } else {
            0
        };
        RecordMeta {
            pos: s.pos,
            len: s.held(),
            skip,
            ts_ns: s.ts_ns,
            orig_len: s.orig_len,
        }
    }
    fn set(&mut self, records: &[RecordMeta]) {
        self.v.clear();
        self.skips.clear();
        self.extend(records);
    }
    /// Append records past the last one (positions increasing).
    fn extend(&mut self, records: &[RecordMeta]) {
        self.v.extend(records.iter().map(Stored::of));
        self.skips.extend(
            records
                .iter()
                .filter(|r| r.skip > 0)
                .map(|r| (r.pos, r.skip)),
        );
    }
    /// Insert `r` in position order (nearly always an append); a record at the same
    /// position is replaced.
    pub(super) fn insert(&mut self, r: RecordMeta) {
        let s = Stored::of(&r);
        match self.v.last() {
            Some(l) if l.pos >= r.pos => match self.v.binary_search_by_key(&r.pos, |x| x.pos) {
                Err(i) => self.v.insert(i, s),
                Ok(i) => self.v[i] = s,
            },
            _ => self.v.push(s),
        }
        match self.skips.binary_search_by_key(&r.pos, |x| x.0) {
            Ok(i) if r.skip > 0 => self.skips[i].1 = r.skip,
            Ok(i) => {
                self.skips.remove(i);
            }
            Err(i) if r.skip > 0 => self.skips.insert(i, (r.pos, r.skip)),
            Err(_) => {}
        }
    }
    /// Drop the records of blocks a ring has overwritten (every 1024 records added, so a
    /// ring's annotations stay as large as the ring, not as the stream).
    pub(super) fn prune(&mut self, low: Option<u64>) {
        if let Some(low) = low.filter(|_| self.v.len().is_multiple_of(1024)) {
            let gone = self.v.partition_point(|r| r.pos + (r.held() as u64) <= low);
            self.v.drain(..gone);
            let first = self.v.first().map_or(u64::MAX, |r| r.pos);
            let gone = self.skips.partition_point(|s| s.0 < first);
            self.skips.drain(..gone);
        }
    }
}

/// The annotations of buffer `id`, created on first use (a free function so that callers
/// may hold a borrow of the regions meanwhile).
pub(super) fn note_of(notes: &mut Vec<Annotations>, id: BufId) -> &mut Annotations {
    let i = id as usize - 1;
    if notes.len() <= i {
        notes.resize_with(i + 1, Annotations::default);
    }
    &mut notes[i]
}

impl Store {
    fn note_mut(&mut self, id: BufId) -> &mut Annotations {
        note_of(&mut self.notes, id)
    }

    /// Declare the link type (pcap LINKTYPE_*) of the frames in buffer `id`.
    pub fn set_link(&mut self, id: BufId, link: u32) {
        self.note_mut(id).link = Some(link);
    }

    /// Declare the capture file header the frames in buffer `id` were read with.
    pub fn set_capture(&mut self, id: BufId, h: CaptureHeader) {
        self.note_mut(id).capture = Some(h);
    }

    /// The capture file header of the buffer a tag points into, if declared.
    #[inline]
    pub fn capture(&self, t: &Tag) -> Option<CaptureHeader> {
        self.notes.get(index(t.buf)?)?.capture
    }

    /// Attach record metadata (sorted by position) to buffer `id`.
    pub fn set_records(&mut self, id: BufId, records: Vec<RecordMeta>) {
        self.note_mut(id).records.set(&records);
    }

    /// Append record metadata to buffer `id` (sources that index their input as they go);
    /// positions must continue in increasing order.
    pub fn append_records(&mut self, id: BufId, records: &[RecordMeta]) {
        let recs = &mut self.note_mut(id).records;
        debug_assert!(records.windows(2).all(|w| w[0].pos < w[1].pos));
        debug_assert!(recs
            .v
            .last()
            .zip(records.first())
            .is_none_or(|(a, b)| a.pos < b.pos));
        recs.extend(records);
    }

    /// Whether buffer `id` has record metadata at all (a producer that sends many blocks
    /// of one buffer asks once instead of looking each block up).
    #[inline]
    pub fn has_records(&self, id: BufId) -> bool {
        index(id)
            .and_then(|i| self.notes.get(i))
            .is_some_and(|n| !n.records.v.is_empty())
    }

    /// Link type of the buffer a tag points into, if declared.
    #[inline]
    pub fn link(&self, t: &Tag) -> Option<u32> {
        self.notes.get(index(t.buf)?)?.link
    }

    /// Metadata of the record a tag points into; `whole` says whether the tag still covers
    /// the record from its first byte (not cropped). None for a block that lies in no
    /// record (made by gen, an editor, ...). Blocks usually arrive in stream order, so the
    /// last hit and its successor are tried before a binary search.
    #[inline]
    pub fn record(&self, t: &Tag) -> Option<(RecordMeta, bool)> {
        let note = self.notes.get(index(t.buf)?)?;
        let recs = &note.records;
        let h = note.hint.get();
        let found = |r: &Stored| {
            r.covers(t.pos)
                .then(|| (recs.meta(r), r.pos == t.pos && r.len & HAS_SKIP == 0))
        };
        for i in [h, h + 1] {
            if let Some(r) = recs.get(i) {
                if r.pos <= t.pos && recs.get(i + 1).is_none_or(|n| n.pos > t.pos) {
                    note.hint.set(i);
                    return found(r);
                }
            }
        }
        let i = match recs.v.binary_search_by_key(&t.pos, |r| r.pos) {
            Ok(i) => i,
            Err(0) => return None,
            Err(i) => i - 1,
        };
        note.hint.set(i);
        found(&recs.v[i])
    }

    /// The record metadata of block `t` as a record of its own: where `t` starts, the
    /// bytes of the original record before it, its time and wire length. What a channel
    /// sends along and what a copy of the block carries (see [`Store::copy_block`]).
    pub fn record_of(&self, t: &Tag) -> Option<RecordMeta> {
        let (r, _) = self.record(t)?;
        let skip = u32::try_from(r.offset_of(t.pos)).ok()?;
        Some(RecordMeta {
            pos: t.pos,
            len: t.len,
            skip,
            ts_ns: r.ts_ns,
            orig_len: r.orig_len,
        })
    }

    /// Record metadata for one record of buffer `id`, kept sorted (records may arrive out
    /// of order, e.g. after reordering filters in another space).
    pub fn add_record(&mut self, id: BufId, r: RecordMeta) {
        let low = self.low_water(id);
        let recs = &mut self.note_mut(id).records;
        recs.insert(r);
        recs.prune(low);
    }
}
