//! Where block data lives in one space: a table of DBufs indexed by the tag's buffer id.
//!
//! - [`LocalRing`]: a process-local data ring with absolute positions (the space's default
//!   DBuf for sources that read bytes, and for copies made by write isolation).
//! - file regions: a whole file mapped read-only (thesis 4.5.6, files as DBufs), so that
//!   e.g. `pcapin` hands out tags straight into the capture file, copying nothing.
//!
//! - external regions: memory another component lends block by block (the kernel's capture
//!   rings); a block given back resolves to nothing.
//!
//! Owns resolution (tag -> bytes), validity (a ring position below the overwrite horizon
//! is gone, and so is a lent block once given back), keeping blocks past their batch
//! ([`Store::keep`]: in place where the memory stays, else a copy) and allocation of new
//! data. Does not own scheduling.

use crate::mmap;
use beltway::Tag;
use std::path::Path;

/// Buffer ids: 0 is "no buffer"; ids index [`Store::regions`] minus one.
pub type BufId = u16;

/// A process-local ring of bytes with absolute, monotonically growing positions.
#[derive(Debug)]
pub struct LocalRing {
    data: Vec<u8>,
    mask: u64,
    write: u64,
    /// The producer reuses its blocks' bytes from lap to lap, so in-place edits are
    /// noted in `edited` (see [`Store::add_reusing_ring`]).
    reused: bool,
    edited: bool,
}

impl LocalRing {
    pub fn new(size: usize) -> LocalRing {
        let size = size.next_power_of_two().max(4096);
        LocalRing { data: vec![0; size], mask: size as u64 - 1, write: 0, reused: false, edited: false }
    }

    /// Reserve `len` contiguous bytes (skipping to the next lap if they would wrap).
    /// Returns the absolute position and the writable slice.
    #[inline]
    pub fn alloc(&mut self, len: usize) -> (u64, &mut [u8]) {
        let size = self.mask + 1;
        assert!(len as u64 <= size / 2, "block of {len} bytes does not fit a {size}-byte ring");
        let off = self.write & self.mask;
        if off + len as u64 > size {
            self.write += size - off;
        }
        let pos = self.write;
        self.write += len as u64;
        let off = (pos & self.mask) as usize;
        (pos, &mut self.data[off..off + len])
    }

    /// Give back the unused end of the last allocation (made at `pos` for `reserved`
    /// bytes, of which `used` were written), so the ring laps no faster than data is made.
    pub fn trim_last(&mut self, pos: u64, reserved: usize, used: usize) {
        if self.write == pos + reserved as u64 && used <= reserved {
            self.write = pos + used as u64;
        }
    }

    /// Bytes at `pos`, if still intact.
    #[inline]
    pub fn get(&self, pos: u64, len: usize) -> Option<&[u8]> {
        if pos.checked_add(len as u64)? > self.write || self.write - pos > self.mask + 1 {
            return None;
        }
        let off = (pos & self.mask) as usize;
        self.data.get(off..off + len)
    }

    fn get_mut(&mut self, pos: u64, len: usize) -> Option<&mut [u8]> {
        if pos.checked_add(len as u64)? > self.write || self.write - pos > self.mask + 1 {
            return None;
        }
        let off = (pos & self.mask) as usize;
        self.data.get_mut(off..off + len)
    }
}

#[derive(Debug)]
enum Region {
    Ring(LocalRing),
    /// A mapped file, with the path another process could map it by (None when it has
    /// none, e.g. a memfd).
    File(mmap::FileMap, Option<std::path::PathBuf>),
    /// A DBuf another space writes (a channel's data ring), read through.
    Mapped(beltway::DbufView),
    /// A ring of this space in shared memory, so spaces in this process read its blocks
    /// where they are (only tags cross).
    Shared(Box<SharedRing>),
    /// Memory another component owns and lends block by block (a kernel capture ring).
    External(std::sync::Arc<dyn External>),
}

/// A DBuf whose memory belongs to someone else (e.g. the kernel's TPACKET ring): it
/// resolves positions it handed out while the blocks holding them are lent to us.
///
/// Contract: positions are absolute and never reused (a lap or generation counter in
/// them), and `get` answers `None` for a position whose block has been given back, even
/// when the same memory is lent again and holds other data now: a stale tag is
/// [`ResolveError::Gone`], never another block's bytes. Nothing lent is kept past its
/// batch in place: [`Store::keep`] copies it.
pub trait External: Send + Sync + std::fmt::Debug {
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]>;
}

/// Rings shared with other spaces of this process, by key (what a channel announces).
static SHARED_RINGS: std::sync::Mutex<Vec<(u64, beltway::RingRef)>> = std::sync::Mutex::new(Vec::new());
static NEXT_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The ring registered under `key` by a space of this process, if it still exists.
pub fn shared_ring(key: u64) -> Option<beltway::RingRef> {
    SHARED_RINGS.lock().ok()?.iter().find(|r| r.0 == key).map(|r| r.1.clone())
}

/// A space's data ring in shared memory. Its blocks are read in place by other spaces of
/// the process, so before reusing space the ring waits until the tags that point there
/// have been released by their channels' consumers (guards, oldest position first).
#[derive(Debug)]
pub struct SharedRing {
    w: beltway::Writer,
    view: beltway::DbufView,
    key: u64,
    /// (block start, channel index, tag ring position the consumer must release), sorted
    /// by block start (blocks are sent in about the order they were allocated).
    guards: std::collections::VecDeque<(u64, usize, u64)>,
    /// Channels' tag rings and how far their consumers had released when last asked.
    channels: Vec<(beltway::RingRef, u64)>,
}

impl SharedRing {
    fn new(size: usize) -> SharedRing {
        let size = size.next_power_of_two().max(4096);
        let w = beltway::Writer::create("sl-space-ring", beltway::RingConfig::bytes(size)).expect("create a shared-memory ring (memfd)");
        let r = w.ring();
        let key = NEXT_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut v) = SHARED_RINGS.lock() {
            v.push((key, r.clone()));
        }
        SharedRing { view: beltway::DbufView::new(&r), w, key, guards: Default::default(), channels: Vec::new() }
    }

    fn alloc(&mut self, len: usize) -> (u64, &mut [u8]) {
        let need = self.w.contiguous_need(len).expect("block fits the ring");
        // Every block that starts below `need` is about to be overwritten: its tags must
        // have been released.
        while let Some(&(start, ch, tag_end)) = self.guards.front() {
            if start >= need {
                break;
            }
            let (ring, seen) = &mut self.channels[ch];
            if *seen < tag_end {
                *seen = ring.released();
                if *seen < tag_end {
                    // A consumer that went away releases nothing more: nothing to wait for.
                    let _ = ring.wait_released(tag_end);
                    *seen = ring.released().max(tag_end);
                }
            }
            self.guards.pop_front();
        }
        self.w.alloc_contiguous(len).expect("block fits the ring")
    }

    fn trim_last(&mut self, pos: u64, reserved: usize, used: usize) {
        self.w.give_back(pos, reserved, used);
    }

    /// An in-place view of a block of this ring for an edit (the block is exclusive: no
    /// arc of the space and no channel holds it).
    fn get_mut(&mut self, pos: u64, len: usize) -> Option<&mut [u8]> {
        self.w.rewrite(pos, len)
    }

    /// Whether the ring still holds `len` bytes at `pos`.
    fn holds(&self, pos: u64, len: usize) -> bool {
        self.view.resolve(&beltway::Tag { pos, len: len as u32, buf: self.view.id(), class: 0 }).is_ok()
    }

    /// Whether the block starting at `pos` was sent to a channel whose consumer may still
    /// read it (as far as this ring last looked: a stale answer errs on "sent").
    fn sent(&self, pos: u64) -> bool {
        let from = self.guards.partition_point(|g| g.0 < pos);
        self.guards.range(from..).take_while(|g| g.0 == pos).any(|&(_, ch, tag_end)| self.channels[ch].1 < tag_end)
    }

    fn guard(&mut self, tags: &beltway::RingRef, tag_end: u64, start: u64) {
        let ch = match self.channels.iter().position(|c| std::ptr::eq(c.0.shared(), tags.shared())) {
            Some(i) => i,
            None => {
                self.channels.push((tags.clone(), 0));
                self.channels.len() - 1
            }
        };
        // Keep the queue sorted by block start; nearly always an append.
        let at = self.guards.iter().rposition(|g| g.0 <= start).map_or(0, |i| i + 1);
        self.guards.insert(at, (start, ch, tag_end));
    }
}

impl Drop for SharedRing {
    fn drop(&mut self) {
        if let Ok(mut v) = SHARED_RINGS.lock() {
            v.retain(|r| r.0 != self.key);
        }
    }
}

/// Allocate in a ring region (private or shared).
fn ring_alloc(r: &mut Region, len: usize) -> (u64, &mut [u8]) {
    match r {
        Region::Ring(ring) => ring.alloc(len),
        Region::Shared(ring) => ring.alloc(len),
        _ => unreachable!("allocation in a region that is not a ring"),
    }
}

/// The bytes of `t` in region `r`.
fn region_get<'a>(r: &'a Region, t: &Tag) -> Option<&'a [u8]> {
    match r {
        Region::Ring(ring) => ring.get(t.pos, t.len as usize),
        Region::File(m, _) => usize::try_from(t.pos).ok().and_then(|s| m.bytes().get(s..s.checked_add(t.len as usize)?)),
        Region::Mapped(v) => v.resolve(t).ok(),
        Region::Shared(ring) => ring.view.resolve(t).ok(),
        Region::External(e) => e.get(t.pos, t.len as usize),
    }
}

/// See [`Store::resolver`]. It borrows the store, so nothing is allocated (and nothing
/// overwritten) while it lives: a window taken once stays true.
pub struct Resolver<'a> {
    store: &'a Store,
    w: Window<'a>,
}

/// The flat window of one DBuf: position `p` is at `bytes[p & mask]` for `lo <= p`,
/// `p + len <= hi`. Returned by value (not filled through `&mut self`), so a loop keeps
/// it in registers.
#[derive(Clone, Copy)]
struct Window<'a> {
    /// The DBuf (0: none).
    buf: BufId,
    bytes: &'a [u8],
    lo: u64,
    hi: u64,
    mask: u64,
}

const NO_WINDOW: Window<'static> = Window { buf: 0, bytes: &[], lo: 0, hi: 0, mask: 0 };

impl<'a> Resolver<'a> {
    /// The bytes a tag points to (the same answer as [`Store::data`]).
    #[inline]
    pub fn data(&mut self, t: &Tag) -> Result<&'a [u8], ResolveError> {
        if t.buf != self.w.buf {
            self.w = window(self.store, t.buf);
        }
        let (w, len) = (self.w, t.len as u64);
        if w.buf != 0 && t.pos >= w.lo && len <= w.hi && t.pos <= w.hi - len {
            let off = (t.pos & w.mask) as usize;
            if let Some(d) = w.bytes.get(off..off + t.len as usize) {
                return Ok(d);
            }
        }
        self.store.data(t)
    }
}

/// The window of DBuf `id` if it is a flat one (a private ring or a mapped file);
/// otherwise none (buf 0), and its tags take the general path.
#[cold]
#[inline(never)]
fn window(store: &Store, id: BufId) -> Window<'_> {
    match (id as usize).checked_sub(1).and_then(|i| store.regions.get(i)) {
        Some(Region::Ring(r)) => Window { buf: id, bytes: &r.data, lo: r.write.saturating_sub(r.mask + 1), hi: r.write, mask: r.mask },
        Some(Region::File(m, _)) => Window { buf: id, bytes: m.bytes(), lo: 0, hi: m.bytes().len() as u64, mask: u64::MAX },
        _ => NO_WINDOW,
    }
}

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
        RecordMeta { pos, len, skip: 0, ts_ns, orig_len }
    }
    /// Where a tag at `pos` starts inside the record (counting bytes this buffer lacks).
    pub fn offset_of(&self, pos: u64) -> u64 {
        pos - self.pos + self.skip as u64
    }
}

/// Per-buffer annotations: link type of its frames (pcap LINKTYPE_*), record metadata.
#[derive(Debug, Default)]
struct Annotations {
    link: Option<u32>,
    records: Records,
    /// Index of the last record found (lookups are mostly sequential).
    hint: std::cell::Cell<usize>,
}

/// A buffer's records, sorted by position, 24 bytes each (a capture's index is one entry
/// per packet: a file of 600k packets keeps 14 MB of them, not 19). The bytes a crop left
/// behind (`RecordMeta::skip`, rare: cropped blocks that crossed a channel or were
/// copied) live in a side table, flagged by the top bit of `len`.
#[derive(Debug, Default)]
struct Records {
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
        Stored { pos: r.pos, ts_ns: r.ts_ns, orig_len: r.orig_len, len: r.len.min(HAS_SKIP - 1) | if r.skip > 0 { HAS_SKIP } else { 0 } }
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
        let skip = if s.len & HAS_SKIP != 0 { self.skips.binary_search_by_key(&s.pos, |x| x.0).map_or(0, |i| self.skips[i].1) } else { 0 };
        RecordMeta { pos: s.pos, len: s.held(), skip, ts_ns: s.ts_ns, orig_len: s.orig_len }
    }
    fn set(&mut self, records: &[RecordMeta]) {
        self.v.clear();
        self.skips.clear();
        self.extend(records);
    }
    /// Append records past the last one (positions increasing).
    fn extend(&mut self, records: &[RecordMeta]) {
        self.v.extend(records.iter().map(Stored::of));
        self.skips.extend(records.iter().filter(|r| r.skip > 0).map(|r| (r.pos, r.skip)));
    }
    /// Insert `r` in position order (nearly always an append); a record at the same
    /// position is replaced.
    fn insert(&mut self, r: RecordMeta) {
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
    fn prune(&mut self, low: Option<u64>) {
        if let Some(low) = low.filter(|_| self.v.len() % 1024 == 0) {
            let gone = self.v.partition_point(|r| r.pos + (r.held() as u64) <= low);
            self.v.drain(..gone);
            let first = self.v.first().map_or(u64::MAX, |r| r.pos);
            let gone = self.skips.partition_point(|s| s.0 < first);
            self.skips.drain(..gone);
        }
    }
}

/// The DBufs of one space.
#[derive(Debug, Default)]
pub struct Store {
    regions: Vec<Region>,
    notes: Vec<Annotations>,
    /// The space's default ring (allocations and copies), created on first use.
    scratch: Option<BufId>,
    scratch_size: usize,
    /// Blocks copied by write isolation (statistics; in-place edits do not count).
    pub copies: u64,
    /// Blocks copied to keep them past their batch ([`Store::keep`]; statistics).
    pub kept: u64,
    /// New rings go to shared memory (the space feeds spaces in this process).
    share: bool,
    /// Facts derived from blocks, cached for the filters downstream (see [`Store::memo`]).
    memo: std::cell::RefCell<Option<Box<dyn MemoAny>>>,
}

/// Slots of the block memo (direct-mapped; a batch of 256 blocks fits with room to spare).
const MEMO_SLOTS: usize = 1024;

/// A direct-mapped cache of one derived value per block, keyed by where the block lies.
/// Positions in a DBuf are absolute and never reused (rings never reduce them modulo the
/// size, files do not change), so a key names one content for the life of the space;
/// only an in-place edit changes a block's bytes under the same key, and
/// [`Store::writable`] clears the memo when it hands out one.
struct MemoTable<T> {
    keys: Vec<MemoKey>,
    vals: Vec<Option<T>>,
}

type MemoKey = (u64, u32, u32);

fn memo_key(t: &Tag) -> (MemoKey, usize) {
    let slot = (t.pos ^ (t.pos >> 10) ^ (t.buf as u64).wrapping_mul(0x9e37_79b9)) as usize & (MEMO_SLOTS - 1);
    ((t.pos, t.len, u32::from(t.buf)), slot)
}

/// The memo table with its value type erased.
trait MemoAny: Send {
    fn clear(&mut self, key: MemoKey, slot: usize);
    fn as_any(&mut self) -> &mut dyn std::any::Any;
}

impl<T: Send + 'static> MemoAny for MemoTable<T> {
    fn clear(&mut self, key: MemoKey, slot: usize) {
        if self.keys[slot] == key {
            self.vals[slot] = None;
        }
    }
    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl std::fmt::Debug for dyn MemoAny {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoTable")
    }
}



/// The annotations of buffer `id`, created on first use (a free function so that callers
/// may hold a borrow of the regions meanwhile).
fn note_of(notes: &mut Vec<Annotations>, id: BufId) -> &mut Annotations {
    let i = id as usize - 1;
    if notes.len() <= i {
        notes.resize_with(i + 1, Annotations::default);
    }
    &mut notes[i]
}

/// Error resolving a tag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("tag refers to unknown buffer {0}")]
    UnknownBuffer(BufId),
    #[error("block at position {pos} of buffer {buf} was overwritten, given back to its lender, or lies outside it")]
    Gone { buf: BufId, pos: u64 },
}

impl Store {
    pub fn new(scratch_size: usize) -> Store {
        Store { scratch_size, ..Store::default() }
    }

    fn note_mut(&mut self, id: BufId) -> &mut Annotations {
        note_of(&mut self.notes, id)
    }

    /// Declare the link type (pcap LINKTYPE_*) of the frames in buffer `id`.
    pub fn set_link(&mut self, id: BufId, link: u32) {
        self.note_mut(id).link = Some(link);
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
        debug_assert!(recs.v.last().zip(records.first()).is_none_or(|(a, b)| a.pos < b.pos));
        recs.extend(records);
    }

    /// A value derived from block `t` (e.g. a parsed packet), computed by `f` at most once
    /// while it stays cached, so a chain of filters that all need it derives it once.
    /// One memo type per space is cached at a time (another type replaces it).
    #[inline]
    pub fn memo<T: Copy + Send + 'static>(&self, t: &Tag, f: impl FnOnce() -> T) -> T {
        let (key, slot) = memo_key(t);
        let mut cell = self.memo.borrow_mut();
        if !cell.as_mut().is_some_and(|b| b.as_any().is::<MemoTable<T>>()) {
            *cell = Some(Box::new(MemoTable::<T> { keys: vec![(u64::MAX, 0, 0); MEMO_SLOTS], vals: (0..MEMO_SLOTS).map(|_| None).collect() }));
        }
        let table = cell.as_mut().and_then(|b| b.as_any().downcast_mut::<MemoTable<T>>()).expect("just created");
        if table.keys[slot] == key {
            if let Some(v) = table.vals[slot] {
                return v;
            }
        }
        drop(cell);
        let v = f();
        let mut cell = self.memo.borrow_mut();
        if let Some(table) = cell.as_mut().and_then(|b| b.as_any().downcast_mut::<MemoTable<T>>()) {
            table.keys[slot] = key;
            table.vals[slot] = Some(v);
        }
        v
    }

    /// Forget what was memoized about block `t` (it is about to change in place; being
    /// exclusive, no other tag reads its bytes).
    fn forget_memo(&mut self, t: &Tag) {
        if let Some(m) = self.memo.get_mut().as_mut() {
            let (key, slot) = memo_key(t);
            m.clear(key, slot);
        }
    }

    /// Link type of the buffer a tag points into, if declared.
    #[inline]
    pub fn link(&self, t: &Tag) -> Option<u32> {
        self.notes.get((t.buf as usize).checked_sub(1)?)?.link
    }

    /// Metadata of the record a tag points into; `whole` says whether the tag still covers
    /// the record from its first byte (not cropped). None for a block that lies in no
    /// record (made by gen, an editor, ...). Blocks usually arrive in stream order, so the
    /// last hit and its successor are tried before a binary search.
    #[inline]
    pub fn record(&self, t: &Tag) -> Option<(RecordMeta, bool)> {
        let note = self.notes.get((t.buf as usize).checked_sub(1)?)?;
        let recs = &note.records;
        let h = note.hint.get();
        let found = |r: &Stored| r.covers(t.pos).then(|| (recs.meta(r), r.pos == t.pos && r.len & HAS_SKIP == 0));
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
        Some(RecordMeta { pos: t.pos, len: t.len, skip, ts_ns: r.ts_ns, orig_len: r.orig_len })
    }

    /// A copy of block `t` in the space's default ring, carrying the block's record
    /// metadata and link type with it, so that nothing a filter can observe about the
    /// block changes but where it lies. The one way to keep a block whose memory is not
    /// the space's to keep (another space's data, memory the kernel lends) and the copy
    /// that write isolation makes.
    pub fn copy_block(&mut self, t: &Tag) -> Result<Tag, ResolveError> {
        self.copy_parts(t).map(|(t, _)| t)
    }

    /// Keep block `t` past the batch it came in (a filter that holds tags across batches:
    /// reassembly, reordering). Returns the tag itself when its memory stays this space's:
    /// a mapped file, or a ring of this space (where a later lap that overwrites it shows
    /// as [`ResolveError::Gone`], never as other data). Otherwise (memory lent by the
    /// kernel, which goes back at the end of the batch; another space's data, released
    /// then) a copy in the default ring made by [`Store::copy_block`], carrying the
    /// block's record metadata and link type. Gone if `t` no longer resolves.
    pub fn keep(&mut self, t: &Tag) -> Result<Tag, ResolveError> {
        let r = (t.buf as usize).checked_sub(1).and_then(|i| self.regions.get(i)).ok_or(ResolveError::UnknownBuffer(t.buf))?;
        match r {
            Region::Ring(_) | Region::Shared(_) | Region::File(..) => self.data(t).map(|_| *t),
            Region::Mapped(_) | Region::External(_) => {
                let c = self.copy_block(t)?;
                self.kept += 1;
                Ok(c)
            }
        }
    }

    /// [`Store::copy_block`], also handing out the copy's bytes.
    fn copy_parts(&mut self, t: &Tag) -> Result<(Tag, &mut [u8]), ResolveError> {
        let data = self.data(t)?.to_vec();
        let meta = self.record_of(t);
        let link = self.link(t);
        let id = self.scratch();
        let low = self.low_water(id);
        let Store { regions, notes, .. } = self;
        let (pos, s) = ring_alloc(&mut regions[id as usize - 1], data.len());
        s.copy_from_slice(&data);
        let note = note_of(notes, id);
        if let Some(m) = meta {
            note.records.insert(RecordMeta { pos, ..m });
            note.records.prune(low);
        }
        if note.link.is_none() {
            note.link = link;
        }
        Ok((Tag { pos, len: data.len() as u32, buf: id, class: t.class }, s))
    }

    /// Add a data ring; returns its buffer id.
    pub fn add_ring(&mut self, size: usize) -> BufId {
        self.regions.push(if self.share { Region::Shared(Box::new(SharedRing::new(size))) } else { Region::Ring(LocalRing::new(size)) });
        self.regions.len() as BufId
    }

    /// Add a ring whose producer, its only allocator, may write into a slot only what
    /// differs from what it made there one lap before (`gen`'s repeating pattern): in-place
    /// edits by filters ([`Store::writable`]) are noted, and [`Store::take_edited`] tells
    /// the producer to write whole blocks again. Returns the id and, for such a private
    /// ring, its size in bytes. Once rings are shared ([`Store::share_rings`]) the ring is
    /// an ordinary shared one and the size is `None`: the producer must write every block.
    pub fn add_reusing_ring(&mut self, size: usize) -> (BufId, Option<u64>) {
        let id = self.add_ring(size);
        match self.regions.last_mut() {
            Some(Region::Ring(r)) => {
                r.reused = true;
                (id, Some(r.mask + 1))
            }
            _ => (id, None),
        }
    }

    /// Move ring `id`'s next allocation to the start of its next lap (a producer that lays
    /// out its laps itself, see [`Store::add_reusing_ring`]). Nothing if it is at a lap's
    /// start already or `id` is no private ring.
    pub fn skip_lap(&mut self, id: BufId) {
        if let Some(Region::Ring(r)) = self.regions.get_mut((id as usize).wrapping_sub(1)) {
            let off = r.write & r.mask;
            if off != 0 {
                r.write += r.mask + 1 - off;
            }
        }
    }

    /// Whether a filter edited a block of ring `id` in place since the last call (see
    /// [`Store::add_reusing_ring`]).
    pub fn take_edited(&mut self, id: BufId) -> bool {
        match self.regions.get_mut((id as usize).wrapping_sub(1)) {
            Some(Region::Ring(r)) => std::mem::take(&mut r.edited),
            _ => false,
        }
    }

    /// From now on, put new rings (the default ring, sources' rings) in shared memory, so
    /// spaces of this process that get their tags read the blocks in place.
    pub fn share_rings(&mut self) {
        self.share = true;
    }

    /// The key another space of this process finds ring `id` by ([`shared_ring`]), if it
    /// is a shared ring.
    pub fn shared_key(&self, id: BufId) -> Option<u64> {
        match self.regions.get((id as usize).checked_sub(1)?)? {
            Region::Shared(r) => Some(r.key),
            _ => None,
        }
    }

    /// Keep the block of `t` (in a shared ring) intact until the consumer of the channel
    /// whose tag ring is `tags` has released position `tag_end`.
    pub fn guard(&mut self, t: &Tag, tags: &beltway::RingRef, tag_end: u64) {
        if let Some(Region::Shared(r)) = self.regions.get_mut((t.buf as usize).wrapping_sub(1)) {
            r.guard(tags, tag_end, t.pos);
        }
    }

    /// Map a file read-only as a DBuf; returns its id and length.
    pub fn add_file(&mut self, path: &Path) -> std::io::Result<(BufId, u64)> {
        let m = mmap::FileMap::open(path)?;
        let len = m.len() as u64;
        let shareable = std::fs::canonicalize(path).ok().filter(|p| p.is_absolute() && p.is_file() && !p.starts_with("/proc"));
        self.regions.push(Region::File(m, shareable));
        Ok((self.regions.len() as BufId, len))
    }

    /// Register memory another component lends block by block (see [`External`]).
    pub fn add_external(&mut self, e: std::sync::Arc<dyn External>) -> BufId {
        self.regions.push(Region::External(e));
        self.regions.len() as BufId
    }

    /// Make a DBuf written by another space resolvable here; returns its local id (tags
    /// arriving through a channel are renamed to it).
    pub fn map_dbuf(&mut self, view: beltway::DbufView) -> BufId {
        self.regions.push(Region::Mapped(view));
        self.regions.len() as BufId
    }

    /// Whether buffer `id` is another space's data (released when its batch ends).
    pub fn is_mapped(&self, id: BufId) -> bool {
        matches!((id as usize).checked_sub(1).and_then(|i| self.regions.get(i)), Some(Region::Mapped(_)))
    }

    /// The path another space can map file region `id` by (same contents), if any.
    pub fn file_path(&self, id: BufId) -> Option<&Path> {
        match self.regions.get((id as usize).checked_sub(1)?)? {
            Region::File(_, p) => p.as_deref(),
            _ => None,
        }
    }

    /// Record metadata for one record of buffer `id`, kept sorted (records may arrive out
    /// of order, e.g. after reordering filters in another space).
    pub fn add_record(&mut self, id: BufId, r: RecordMeta) {
        let low = self.low_water(id);
        let recs = &mut self.note_mut(id).records;
        recs.insert(r);
        recs.prune(low);
    }

    /// Everything below this position of buffer `id` may have been overwritten (rings);
    /// None for buffers that keep what they hold (files) or lend it (kernel rings).
    fn low_water(&self, id: BufId) -> Option<u64> {
        match self.regions.get((id as usize).checked_sub(1)?)? {
            Region::Ring(r) => Some(r.write.saturating_sub(r.mask + 1)),
            Region::Shared(r) => Some(r.view.tail()),
            Region::Mapped(v) => Some(v.tail()),
            _ => None,
        }
    }

    /// Whole contents of a file region (for sources that parse their file).
    pub fn file(&self, id: BufId) -> Option<&[u8]> {
        match self.regions.get((id as usize).checked_sub(1)?)? {
            Region::File(m, _) => Some(m.bytes()),
            _ => None,
        }
    }

    /// Hint that bytes `from..to` of file region `id` will be read soon (see
    /// [`FileMap::prefetch`](crate::mmap::FileMap::prefetch)); nothing for rings.
    #[inline]
    pub fn prefetch(&self, id: BufId, from: usize, to: usize) {
        if let Some(Region::File(m, _)) = (id as usize).checked_sub(1).and_then(|i| self.regions.get(i)) {
            m.prefetch(from, to);
        }
    }

    /// A handle on file region `id` that may be sent to another thread (the mapping stays
    /// until the last handle is dropped).
    pub fn file_map(&self, id: BufId) -> Option<crate::mmap::FileMap> {
        match self.regions.get((id as usize).checked_sub(1)?)? {
            Region::File(m, _) => Some(m.clone()),
            _ => None,
        }
    }

    /// A resolver for many tags in a row (a batch): like [`Store::data`], but it keeps the
    /// window of the last ring or file it resolved into, so a run of tags in one DBuf (the
    /// usual batch) costs a bounds check each instead of a table lookup and a dispatch.
    pub fn resolver(&self) -> Resolver<'_> {
        Resolver { store: self, w: NO_WINDOW }
    }

    /// The bytes a tag points to.
    #[inline]
    pub fn data(&self, t: &Tag) -> Result<&[u8], ResolveError> {
        let r = (t.buf as usize).checked_sub(1).and_then(|i| self.regions.get(i)).ok_or(ResolveError::UnknownBuffer(t.buf))?;
        let got = match r {
            Region::Ring(ring) => ring.get(t.pos, t.len as usize),
            r => region_get(r, t),
        };
        got.ok_or(ResolveError::Gone { buf: t.buf, pos: t.pos })
    }

    fn scratch(&mut self) -> BufId {
        match self.scratch {
            Some(id) => id,
            None => {
                let id = self.add_ring(self.scratch_size);
                self.scratch = Some(id);
                id
            }
        }
    }

    /// Allocate `len` new bytes in the space's default ring: (tag without class, slice).
    pub fn alloc(&mut self, len: usize) -> (Tag, &mut [u8]) {
        let id = self.scratch();
        let (pos, s) = ring_alloc(&mut self.regions[id as usize - 1], len);
        (Tag { pos, len: len as u32, buf: id, class: 0 }, s)
    }

    /// Allocate `len` bytes in ring `id` (a ring added with [`Store::add_ring`]).
    #[inline]
    pub fn alloc_in(&mut self, id: BufId, len: usize) -> (Tag, &mut [u8]) {
        let (pos, s) = match self.regions.get_mut((id as usize).wrapping_sub(1)) {
            Some(Region::Ring(ring)) => ring.alloc(len),
            Some(Region::Shared(ring)) => ring.alloc(len),
            _ => panic!("buffer {id} is not a ring of this store"),
        };
        (Tag { pos, len: len as u32, buf: id, class: 0 }, s)
    }

    /// Store `data` as a new block.
    pub fn push(&mut self, data: &[u8]) -> Tag {
        let (t, s) = self.alloc(data.len());
        s.copy_from_slice(data);
        t
    }

    /// Write isolation (thesis 5.3): a writable view of the block `t` points to. In place
    /// when `exclusive` (nobody else will read this block) and the block lives in a ring;
    /// otherwise the block is first copied into the default ring and `t` is updated to the
    /// copy. Returns whether a copy was made.
    pub fn writable(&mut self, t: &mut Tag, exclusive: bool) -> Result<(&mut [u8], bool), ResolveError> {
        // A block of the space's shared ring that no channel was given yet is edited in
        // place as a private ring's is (a channel's consumer holds what it was sent, and
        // such blocks are not exclusive).
        if exclusive && matches!(self.regions.get((t.buf as usize).wrapping_sub(1)), Some(Region::Shared(r)) if !r.sent(t.pos) && r.holds(t.pos, t.len as usize)) {
            self.forget_memo(t);
            let Some(Region::Shared(ring)) = self.regions.get_mut(t.buf as usize - 1) else { unreachable!() };
            let s = ring.get_mut(t.pos, t.len as usize).ok_or(ResolveError::Gone { buf: t.buf, pos: t.pos })?;
            return Ok((s, false));
        }
        let in_ring = matches!(self.regions.get((t.buf as usize).wrapping_sub(1)), Some(Region::Ring(_)));
        if exclusive && in_ring {
            self.forget_memo(t);
            let Region::Ring(ring) = &mut self.regions[t.buf as usize - 1] else { unreachable!() };
            ring.edited |= ring.reused;
            let s = ring.get_mut(t.pos, t.len as usize).ok_or(ResolveError::Gone { buf: t.buf, pos: t.pos })?;
            // Reborrow through a raw split is not needed: return directly.
            return Ok((s, false));
        }
        self.copies += 1;
        let (nt, s) = self.copy_parts(t)?;
        *t = nt;
        Ok((s, true))
    }

    /// Produce a new block from an existing one without an intermediate copy of the input:
    /// `f(input, output)` writes at most `max_out` bytes and returns how many. The output
    /// goes to the default ring.
    pub fn transform(&mut self, input: &Tag, max_out: usize, f: impl FnOnce(&[u8], &mut [u8]) -> usize) -> Result<Tag, ResolveError> {
        let out_id = self.scratch();
        let ii = (input.buf as usize).checked_sub(1).ok_or(ResolveError::UnknownBuffer(input.buf))?;
        let oi = out_id as usize - 1;
        if ii == oi {
            // Same ring: the input must be copied out first (it could be overwritten by
            // the allocation wrapping onto it).
            let inp = self.data(input)?.to_vec();
            let (mut t, out) = self.alloc(max_out);
            let n = f(&inp, out);
            t.len = n as u32;
            match self.regions.get_mut(oi) {
                Some(Region::Ring(ring)) => ring.trim_last(t.pos, max_out, n),
                Some(Region::Shared(ring)) => ring.trim_last(t.pos, max_out, n),
                _ => {}
            }
            return Ok(t);
        }
        let (a, b) = if ii < oi {
            let (l, r) = self.regions.split_at_mut(oi);
            (&l[ii], &mut r[0])
        } else {
            let (l, r) = self.regions.split_at_mut(ii);
            (&r[0], &mut l[oi])
        };
        let inp = region_get(a, input).ok_or(ResolveError::Gone { buf: input.buf, pos: input.pos })?;
        let (pos, n) = match b {
            Region::Ring(ring) => {
                let (pos, out) = ring.alloc(max_out);
                let n = f(inp, out);
                ring.trim_last(pos, max_out, n);
                (pos, n)
            }
            Region::Shared(ring) => {
                let (pos, out) = ring.alloc(max_out);
                let n = f(inp, out);
                ring.trim_last(pos, max_out, n);
                (pos, n)
            }
            b => {
                let (pos, out) = ring_alloc(b, max_out);
                (pos, f(inp, out))
            }
        };
        Ok(Tag { pos, len: n as u32, buf: out_id, class: input.class })
    }
}

/// Memory lent block by block for the unit tests, as the kernel lends its rings: one
/// block of `size` bytes at a time, its positions `generation * size + offset`, refused
/// once [`Lender::give_back`] ends the generation. Each generation's contents differ
/// (byte `i` is `i ^ generation`), as a refilled ring's would.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Lender {
    laps: Vec<Vec<u8>>,
    size: u64,
    generation: std::sync::atomic::AtomicU64,
}

#[cfg(test)]
impl Lender {
    pub(crate) fn new(size: usize) -> std::sync::Arc<Lender> {
        let laps = (0..16u64).map(|g| (0..size).map(|i| i as u8 ^ g as u8).collect()).collect();
        std::sync::Arc::new(Lender { laps, size: size as u64, generation: 1.into() })
    }
    /// Where offset `off` of the block lent now lies.
    pub(crate) fn pos(&self, off: u64) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed) * self.size + off
    }
    /// The bytes offset `off..off + len` of the block lent now holds.
    pub(crate) fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let g = self.generation.load(std::sync::atomic::Ordering::Relaxed) as usize;
        self.laps[g % self.laps.len()][off..off + len].to_vec()
    }
    /// End the current generation and lend the block again (with other contents).
    pub(crate) fn give_back(&self) {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
impl External for Lender {
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]> {
        let (g, off) = (pos / self.size, (pos % self.size) as usize);
        if g != self.generation.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        self.laps[g as usize % self.laps.len()].get(off..off.checked_add(len)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_positions_and_overwrite() {
        let mut r = LocalRing::new(4096);
        let (p0, s) = r.alloc(1000);
        s.fill(1);
        assert_eq!(p0, 0);
        let (p1, _) = r.alloc(1000);
        assert_eq!(p1, 1000);
        let (p2, _) = r.alloc(2000);
        assert_eq!(p2, 2000);
        assert!(r.get(p0, 1000).is_some(), "still intact: one lap not yet written");
        let (p3, _) = r.alloc(2000); // does not fit before the lap end: skips to 4096
        assert_eq!(p3, 4096);
        assert!(r.get(p0, 1000).is_none(), "overwritten by the next lap");
        assert!(r.get(p2, 2000).is_some());
        assert!(r.get(p3, 2000).is_some());
        assert!(r.get(p3, 2001).is_none(), "beyond what was written");
    }

    #[test]
    fn writable_copies_only_when_shared() {
        let mut st = Store::new(1 << 16);
        let mut t = st.push(b"hello");
        let before = t;
        let (s, copied) = st.writable(&mut t, true).unwrap();
        s[0] = b'j';
        assert!(!copied);
        assert_eq!(t, before);
        let (s, copied) = st.writable(&mut t, false).unwrap();
        s[0] = b'm';
        assert!(copied);
        assert_ne!(t.pos, before.pos);
        assert_eq!(st.data(&before).unwrap(), b"jello");
        assert_eq!(st.data(&t).unwrap(), b"mello");
    }

    #[test]
    fn a_reusing_ring_notes_in_place_edits() {
        let mut st = Store::new(1 << 16);
        let (id, size) = st.add_reusing_ring(1 << 12);
        assert_eq!(size, Some(4096));
        let (mut t, s) = st.alloc_in(id, 5);
        s.copy_from_slice(b"hello");
        assert!(!st.take_edited(id));
        // A shared block is copied: the ring's bytes stay, nothing to note.
        let mut c = t;
        st.writable(&mut c, false).unwrap().0[0] = b'm';
        assert!(!st.take_edited(id));
        // An exclusive one is edited in place, and that is noted once.
        let (s, copied) = st.writable(&mut t, true).unwrap();
        s[0] = b'j';
        assert!(!copied);
        assert_eq!(st.data(&t).unwrap(), b"jello");
        assert!(st.take_edited(id));
        assert!(!st.take_edited(id), "taken");
        // An ordinary ring notes nothing.
        let plain = st.add_ring(1 << 12);
        let (mut p, _) = st.alloc_in(plain, 5);
        st.writable(&mut p, true).unwrap();
        assert!(!st.take_edited(plain));
        // Once rings are shared, a reusing ring is an ordinary shared one.
        st.share_rings();
        assert_eq!(st.add_reusing_ring(1 << 12).1, None);
    }

    /// A store with a private ring two laps in (some tags gone) and a mapped file.
    fn store_with_regions() -> (Store, BufId, BufId, std::fs::File) {
        let mut st = Store::new(1 << 12);
        let ring = st.add_ring(1 << 12);
        for i in 0..9u8 {
            let (_, s) = st.alloc_in(ring, 1000);
            s.fill(i);
        }
        // A memfd (gone with the test), opened by its /proc path.
        let fd = beltway::sys::memfd_create("store-test", 0).unwrap();
        let mut f = std::fs::File::from(fd);
        std::io::Write::write_all(&mut f, &(0..5000u32).map(|i| i as u8).collect::<Vec<_>>()).unwrap();
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
        let (file, _) = st.add_file(Path::new(&path)).unwrap();
        (st, ring, file, f)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]
        /// The resolver gives exactly what `data` gives, for any tags in any order: in
        /// a ring (intact, overwritten, beyond the write position, wrapping the ring's
        /// end), in a file (inside, past its end), in unknown buffers, at hostile
        /// positions near u64::MAX.
        #[test]
        fn the_resolver_agrees_with_data(tags in proptest::collection::vec(
            (0u16..5, proptest::prop_oneof![0u64..20_000, (u64::MAX - 5000)..=u64::MAX], 0u32..5000), 1..40)) {
            let (st, ring, file, _f) = store_with_regions();
            proptest::prop_assert_eq!((ring, file), (1, 2));
            let mut r = st.resolver();
            for (buf, pos, len) in tags {
                let t = Tag { pos, len, buf, class: 1 };
                proptest::prop_assert_eq!(r.data(&t), st.data(&t), "tag {:?}", t);
            }
        }

        /// A lent region resolves a tag exactly when it lies in the block lent now (its
        /// generation, inside the block), to that block's bytes, and `keep` copies exactly
        /// those: stale, future and hostile positions are Gone, never other bytes or a
        /// panic.
        #[test]
        fn lent_tags_resolve_only_in_the_block_lent_now(laps in 0u64..5, tags in proptest::collection::vec(
            (proptest::prop_oneof![0u64..30_000, (u64::MAX - 5000)..=u64::MAX], 0u32..5000), 1..40)) {
            let mut st = Store::new(1 << 16);
            let lender = Lender::new(4096);
            for _ in 0..laps {
                lender.give_back();
            }
            let id = st.add_external(lender.clone());
            let now = lender.pos(0) / 4096;
            for (pos, len) in tags {
                let t = Tag { pos, len, buf: id, class: 1 };
                let (g, off) = (pos / 4096, (pos % 4096) as usize);
                let lent_now = g == now && off + len as usize <= 4096;
                let want = if lent_now { Ok(lender.bytes(off, len as usize)) } else { Err(ResolveError::Gone { buf: id, pos }) };
                proptest::prop_assert_eq!(st.data(&t).map(<[u8]>::to_vec), want.clone(), "tag {:?}", t);
                proptest::prop_assert_eq!(st.resolver().data(&t).map(<[u8]>::to_vec), want.clone());
                let kept = st.keep(&t).and_then(|k| st.data(&k).map(<[u8]>::to_vec));
                proptest::prop_assert_eq!(kept, want);
            }
        }
    }

    #[test]
    fn keep_leaves_files_and_own_rings_in_place_and_copies_lent_blocks_with_their_record() {
        let (mut st, ring, file, _f) = store_with_regions();
        // A file stays: the tag itself.
        let t = Tag { pos: 100, len: 50, buf: file, class: 3 };
        assert_eq!(st.keep(&t), Ok(t));
        // A ring of this space: in place while intact; a block a later lap overwrote
        // cannot be kept.
        let intact = Tag { pos: 8192, len: 1000, buf: ring, class: 1 };
        assert_eq!(st.keep(&intact), Ok(intact));
        assert_eq!(st.keep(&Tag { pos: 0, len: 1000, buf: ring, class: 1 }), Err(ResolveError::Gone { buf: ring, pos: 0 }));
        assert_eq!(st.kept, 0, "nothing copied so far");
        // Lent memory: a copy, with the tag's class, the record it is a cropped piece of
        // (its time, wire length and the bytes before it) and the link type.
        let lender = Lender::new(4096);
        let id = st.add_external(lender.clone());
        st.set_link(id, 1);
        st.set_records(id, vec![RecordMeta::whole(lender.pos(0), 200, 777, 1500)]);
        let seg = Tag { pos: lender.pos(40), len: 60, buf: id, class: 9 };
        let want = lender.bytes(40, 60);
        assert_eq!(st.data(&seg).unwrap(), &want[..]);
        let k = st.keep(&seg).unwrap();
        assert_ne!(k.buf, id);
        assert_eq!(k.class, 9);
        assert_eq!(st.kept, 1);
        // The block goes back and is lent again with other bytes: the original tag is
        // refused (never the new bytes), the copy still reads what the tag saw.
        lender.give_back();
        assert_ne!(lender.bytes(40, 60), want);
        assert_eq!(st.data(&seg), Err(ResolveError::Gone { buf: id, pos: seg.pos }));
        assert_eq!(st.resolver().data(&seg), Err(ResolveError::Gone { buf: id, pos: seg.pos }));
        assert_eq!(st.data(&k).unwrap(), &want[..]);
        assert_eq!(st.record(&k), Some((RecordMeta { pos: k.pos, len: 60, skip: 40, ts_ns: 777, orig_len: 1500 }, false)));
        assert_eq!(st.link(&k), Some(1));
        // Too late to keep it now.
        assert_eq!(st.keep(&seg), Err(ResolveError::Gone { buf: id, pos: seg.pos }));
        // A copy is this space's: keeping it again keeps it in place.
        assert_eq!(st.keep(&k), Ok(k));
        assert_eq!(st.kept, 1);
        assert_eq!(st.keep(&Tag { buf: 99, ..k }), Err(ResolveError::UnknownBuffer(99)));
    }

    #[test]
    fn memo_derives_once_and_forgets_in_place_edits() {
        let mut st = Store::new(1 << 16);
        let mut t = st.push(b"abc");
        let first = |st: &Store, t: &Tag| st.memo(t, || st.data(t).unwrap()[0]);
        assert_eq!(first(&st, &t), b'a');
        // Cached: the closure is not run again.
        assert_eq!(st.memo(&t, || -> u8 { panic!("derived twice") }), b'a');
        // A cropped tag is another block.
        let cropped = Tag { pos: t.pos + 1, len: 2, ..t };
        assert_eq!(first(&st, &cropped), b'b');
        let (s, copied) = st.writable(&mut t, true).unwrap();
        assert!(!copied);
        s[0] = b'z';
        assert_eq!(first(&st, &t), b'z', "an in-place edit must not leave a stale memo");
        // Another value type replaces the table.
        assert_eq!(st.memo(&t, || 7u32), 7);
        assert_eq!(first(&st, &t), b'z');
    }
}
