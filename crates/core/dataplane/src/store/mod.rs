//! Where block data lives in one space: a table of DBufs indexed by the tag's buffer id.
//!
//! - [`LocalRing`]: a process-local data ring with absolute positions (the space's default
//!   DBuf for sources that read bytes, and for copies made by write isolation).
//! - file regions: a whole file mapped read-only (thesis 4.5.6, files as DBufs), so that
//!   e.g. `pcapin` hands out tags straight into the capture file, copying nothing.
//! - [`SharedRing`]: a space's ring in shared memory, read in place by other spaces of
//!   the process, and mapped DBufs another space writes (a channel's data ring).
//! - external regions: memory another component lends block by block (the kernel's capture
//!   rings), owned here; a block given back resolves to nothing, and a block goes back
//!   only through `&mut Store` ([`Store::external_mut`]), so never while bytes the store
//!   handed out are alive.
//!
//! Owns resolution (tag -> bytes), validity (a ring position below the overwrite horizon
//! is gone, and so is a lent block once given back), keeping blocks past their batch
//! ([`Store::keep`]: in place where the memory stays, else a copy) and allocation of new
//! data. Does not own scheduling.
//!
//! One file per concern: `local` (private rings), `shared` (rings in shared memory and
//! their guards), `external` (lent memory), `resolver` (batch resolution), `records`
//! (annotations and record metadata), `memo` (the block memo); here the region table,
//! resolution, allocation, write isolation and keeping.

mod external;
mod local;
mod memo;
mod records;
mod resolver;
mod shared;
#[cfg(test)]
mod tests;

pub use external::External;
#[cfg(test)]
pub(crate) use external::Lender;
pub use local::LocalRing;
pub use records::{CaptureHeader, RecordMeta};
pub use resolver::Resolver;
pub use shared::{shared_ring, SharedRing};

use crate::mmap;
use beltway::Tag;
use memo::MemoAny;
use records::{note_of, Annotations};
use std::path::Path;

/// Buffer ids: 0 is "no buffer"; ids index [`Store::regions`] minus one.
pub type BufId = u16;

/// Where buffer `id` is in the store's tables (regions, annotations), if anywhere.
#[inline]
fn index(id: BufId) -> Option<usize> {
    (id as usize).checked_sub(1)
}

/// The positions a region holds, `lo <= pos` and `pos + len <= hi` (a ring's last lap, a
/// file's offsets 0..len): the one check of an offset and a length against a region,
/// written so that no input overflows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub lo: u64,
    pub hi: u64,
}

impl Bounds {
    /// Offsets `0..len` (a file, a lent block).
    pub(crate) fn upto(len: u64) -> Bounds {
        Bounds { lo: 0, hi: len }
    }

    /// Whether the `len` bytes at `pos` all lie inside.
    #[inline]
    pub(crate) fn holds(self, pos: u64, len: u64) -> bool {
        pos >= self.lo && len <= self.hi && pos <= self.hi - len
    }

    /// The `len` bytes at offset `pos` of `bytes` (which these bounds describe from
    /// offset 0), if they lie inside.
    #[inline]
    pub(crate) fn slice(self, bytes: &[u8], pos: u64, len: usize) -> Option<&[u8]> {
        if !self.holds(pos, len as u64) {
            return None;
        }
        bytes.get(usize::try_from(pos).ok()?..)?.get(..len)
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
    /// Memory another component lends block by block (a kernel capture ring), its lender
    /// owned here.
    External(Box<dyn external::Owned>),
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
        Region::File(m, _) => {
            Bounds::upto(m.bytes().len() as u64).slice(m.bytes(), t.pos, t.len as usize)
        }
        Region::Mapped(v) => v.resolve(t).ok(),
        Region::Shared(ring) => ring.view.resolve(t).ok(),
        Region::External(e) => e.get(t.pos, t.len as usize),
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
    /// Whether the space sends blocks on to other spaces (see [`Feeds`]).
    feeds: Feeds,
    /// Facts derived from blocks, cached for the filters downstream (see [`Store::memo`]).
    memo: std::cell::RefCell<Option<Box<dyn MemoAny>>>,
}

/// Error resolving a tag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("tag refers to unknown buffer {0}")]
    UnknownBuffer(BufId),
    #[error("block at position {pos} of buffer {buf} was overwritten, given back to its lender, or lies outside it")]
    Gone { buf: BufId, pos: u64 },
}

/// Where a space's stream goes after it: what the end of a source batch's walk through
/// the space means (see [`Store::feeds`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Feeds {
    /// Nowhere: every filter after the space's sources runs in it.
    #[default]
    Nothing,
    /// To other spaces that have all finished before this space is dropped: the spaces of
    /// a run's own process (threads are joined, process spaces have reported, first).
    AwaitedSpaces,
    /// To spaces that may still be working when this one is dropped: a process space's
    /// consumers are in the run's process or in other process spaces.
    OtherSpaces,
}

impl Store {
    pub fn new(scratch_size: usize) -> Store {
        Store {
            scratch_size,
            ..Store::default()
        }
    }

    /// The region of buffer `id`, if it is one of this store's.
    #[inline]
    fn region(&self, id: BufId) -> Option<&Region> {
        self.regions.get(index(id)?)
    }

    #[inline]
    fn region_mut(&mut self, id: BufId) -> Option<&mut Region> {
        self.regions.get_mut(index(id)?)
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
        let r = self
            .region(t.buf)
            .ok_or(ResolveError::UnknownBuffer(t.buf))?;
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
        let capture = self.capture(t);
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
        if note.capture.is_none() {
            note.capture = capture;
        }
        Ok((
            Tag {
                pos,
                len: data.len() as u32,
                buf: id,
                class: t.class,
            },
            s,
        ))
    }

    /// Add a data ring; returns its buffer id.
    pub fn add_ring(&mut self, size: usize) -> BufId {
        self.regions.push(if self.share {
            Region::Shared(Box::new(SharedRing::new(size)))
        } else {
            Region::Ring(LocalRing::new(size))
        });
        self.regions.len() as BufId
    }

    /// Add a ring whose producer, its only allocator, may write into a slot only what
    /// differs from what it made there one lap before (`gen`'s repeating pattern): in-place
    /// edits by filters ([`Store::writable`]) are noted, and [`Store::take_edited`] tells
    /// the producer to write whole blocks again. Returns the id and, for such a private
    /// ring, its size in bytes (a lap). So too once rings are shared
    /// ([`Store::share_rings`]): a block sent to another space is not edited in place, and
    /// the shared ring's memory keeps what was written one lap before as a private one does.
    pub fn add_reusing_ring(&mut self, size: usize) -> (BufId, Option<u64>) {
        let id = self.add_ring(size);
        match self.regions.last_mut() {
            Some(Region::Ring(r)) => {
                r.reused = true;
                (id, Some(r.mask + 1))
            }
            Some(Region::Shared(r)) => {
                r.reused = true;
                (id, Some(r.w.active_size()))
            }
            _ => (id, None),
        }
    }

    /// Move ring `id`'s next allocation to the start of its next lap (a producer that lays
    /// out its laps itself, see [`Store::add_reusing_ring`]). Nothing if it is at a lap's
    /// start already or `id` is no private ring.
    pub fn skip_lap(&mut self, id: BufId) {
        match self.region_mut(id) {
            Some(Region::Ring(r)) => {
                let off = r.write & r.mask;
                if off != 0 {
                    r.write += r.mask + 1 - off;
                }
            }
            Some(Region::Shared(r)) => r.skip_lap(),
            _ => {}
        }
    }

    /// Whether a filter edited a block of ring `id` in place since the last call (see
    /// [`Store::add_reusing_ring`]).
    pub fn take_edited(&mut self, id: BufId) -> bool {
        match self.region_mut(id) {
            Some(Region::Ring(r)) => std::mem::take(&mut r.edited),
            Some(Region::Shared(r)) => std::mem::take(&mut r.edited),
            _ => false,
        }
    }

    /// From now on, put new rings (the default ring, sources' rings) in shared memory, so
    /// spaces of this process that get their tags read the blocks in place.
    pub fn share_rings(&mut self) {
        self.share = true;
    }

    /// Say where the space's stream goes after it (set when the run is built).
    pub fn set_feeds(&mut self, feeds: Feeds) {
        self.feeds = feeds;
    }

    /// Where the space's stream goes after it. With [`Feeds::Nothing`], a source batch
    /// that has walked this space (`Filter::epoch_end`) has reached every sink; otherwise
    /// only a channel, and a source that acknowledges its input to someone (kafkain's
    /// offset commits) must not take the end of the walk for delivery.
    pub fn feeds(&self) -> Feeds {
        self.feeds
    }

    /// The key another space of this process finds ring `id` by ([`shared_ring`]), if it
    /// is a shared ring.
    pub fn shared_key(&self, id: BufId) -> Option<u64> {
        match self.region(id)? {
            Region::Shared(r) => Some(r.key),
            _ => None,
        }
    }

    /// Keep the block of `t` (in a shared ring) intact until the consumer of the channel
    /// whose tag ring is `tags` has released position `tag_end`.
    pub fn guard(&mut self, t: &Tag, tags: &beltway::RingRef, tag_end: u64) {
        self.guard_range(t.buf, t.pos, t.pos + t.len as u64, tags, tag_end);
    }

    /// [`Store::guard`] for every block of shared ring `buf` within `start..end`: one
    /// guard for a batch of blocks sent through the same channel.
    pub fn guard_range(
        &mut self,
        buf: BufId,
        start: u64,
        end: u64,
        tags: &beltway::RingRef,
        tag_end: u64,
    ) {
        if let Some(Region::Shared(r)) = self.region_mut(buf) {
            r.guard(tags, tag_end, start, end);
        }
    }

    /// Map a file read-only as a DBuf; returns its id and length.
    pub fn add_file(&mut self, path: &Path) -> std::io::Result<(BufId, u64)> {
        let m = mmap::FileMap::open(path)?;
        let len = m.len() as u64;
        let shareable = std::fs::canonicalize(path)
            .ok()
            .filter(|p| p.is_absolute() && p.is_file() && !p.starts_with("/proc"));
        self.regions.push(Region::File(m, shareable));
        Ok((self.regions.len() as BufId, len))
    }

    /// Register memory another component lends block by block (see [`External`]); the
    /// store owns the lender from now on, and its source reaches it through
    /// [`Store::external_mut`].
    pub fn add_external<E: External>(&mut self, e: E) -> BufId {
        self.regions.push(Region::External(Box::new(e)));
        self.regions.len() as BufId
    }

    /// The lender of buffer `id`, if it is an [`External`] of type `E` (to read its state,
    /// e.g. a capture socket's counters).
    pub fn external<E: External>(&self, id: BufId) -> Option<&E> {
        match self.region(id)? {
            Region::External(e) => e.any().downcast_ref(),
            _ => None,
        }
    }

    /// The lender of buffer `id`, if it is an [`External`] of type `E`, for its source to
    /// take blocks and give them back. It borrows the whole store exclusively, so nothing
    /// the store handed out (bytes borrow the store shared) can be alive while a block goes
    /// back: the reason reading lent memory is sound (see the example on [`External`]).
    pub fn external_mut<E: External>(&mut self, id: BufId) -> Option<&mut E> {
        match self.region_mut(id)? {
            Region::External(e) => e.any_mut().downcast_mut(),
            _ => None,
        }
    }

    /// Make a DBuf written by another space resolvable here; returns its local id (tags
    /// arriving through a channel are renamed to it).
    pub fn map_dbuf(&mut self, view: beltway::DbufView) -> BufId {
        self.regions.push(Region::Mapped(view));
        self.regions.len() as BufId
    }

    /// Whether buffer `id` is another space's data (released when its batch ends).
    pub fn is_mapped(&self, id: BufId) -> bool {
        matches!(self.region(id), Some(Region::Mapped(_)))
    }

    /// The path another space can map file region `id` by (same contents), if any.
    pub fn file_path(&self, id: BufId) -> Option<&Path> {
        match self.region(id)? {
            Region::File(_, p) => p.as_deref(),
            _ => None,
        }
    }

    /// Everything below this position of buffer `id` may have been overwritten (rings);
    /// None for buffers that keep what they hold (files) or lend it (kernel rings).
    fn low_water(&self, id: BufId) -> Option<u64> {
        match self.region(id)? {
            Region::Ring(r) => Some(r.write.saturating_sub(r.mask + 1)),
            Region::Shared(r) => Some(r.view.tail()),
            Region::Mapped(v) => Some(v.tail()),
            _ => None,
        }
    }

    /// Whole contents of a file region (for sources that parse their file).
    pub fn file(&self, id: BufId) -> Option<&[u8]> {
        match self.region(id)? {
            Region::File(m, _) => Some(m.bytes()),
            _ => None,
        }
    }

    /// Hint that bytes `from..to` of file region `id` will be read soon (see
    /// [`FileMap::prefetch`](crate::mmap::FileMap::prefetch)); nothing for rings.
    #[inline]
    pub fn prefetch(&self, id: BufId, from: usize, to: usize) {
        if let Some(Region::File(m, _)) = self.region(id) {
            m.prefetch(from, to);
        }
    }

    /// A handle on file region `id` that may be sent to another thread (the mapping stays
    /// until the last handle is dropped).
    pub fn file_map(&self, id: BufId) -> Option<crate::mmap::FileMap> {
        match self.region(id)? {
            Region::File(m, _) => Some(m.clone()),
            _ => None,
        }
    }

    /// A resolver for many tags in a row (a batch): like [`Store::data`], but it keeps the
    /// window of the last ring or file it resolved into, so a run of tags in one DBuf (the
    /// usual batch) costs a bounds check each instead of a table lookup and a dispatch.
    pub fn resolver(&self) -> Resolver<'_> {
        Resolver::new(self)
    }

    /// The bytes a tag points to.
    #[inline]
    pub fn data(&self, t: &Tag) -> Result<&[u8], ResolveError> {
        let r = self
            .region(t.buf)
            .ok_or(ResolveError::UnknownBuffer(t.buf))?;
        let got = match r {
            Region::Ring(ring) => ring.get(t.pos, t.len as usize),
            r => region_get(r, t),
        };
        got.ok_or(ResolveError::Gone {
            buf: t.buf,
            pos: t.pos,
        })
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
        (
            Tag {
                pos,
                len: len as u32,
                buf: id,
                class: 0,
            },
            s,
        )
    }

    /// Allocate `len` bytes in ring `id` (a ring added with [`Store::add_ring`]).
    #[inline]
    pub fn alloc_in(&mut self, id: BufId, len: usize) -> (Tag, &mut [u8]) {
        let (pos, s) = match self.region_mut(id) {
            Some(Region::Ring(ring)) => ring.alloc(len),
            Some(Region::Shared(ring)) => ring.alloc(len),
            _ => panic!("buffer {id} is not a ring of this store"),
        };
        (
            Tag {
                pos,
                len: len as u32,
                buf: id,
                class: 0,
            },
            s,
        )
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
    pub fn writable(
        &mut self,
        t: &mut Tag,
        exclusive: bool,
    ) -> Result<(&mut [u8], bool), ResolveError> {
        // A block of the space's shared ring that no channel was given yet is edited in
        // place as a private ring's is (a channel's consumer holds what it was sent, and
        // such blocks are not exclusive).
        if exclusive
            && matches!(self.region(t.buf), Some(Region::Shared(r)) if !r.sent(t.pos) && r.holds(t.pos, t.len as usize))
        {
            self.forget_memo(t);
            let Some(Region::Shared(ring)) = self.region_mut(t.buf) else {
                unreachable!()
            };
            ring.edited |= ring.reused;
            let s = ring
                .get_mut(t.pos, t.len as usize)
                .ok_or(ResolveError::Gone {
                    buf: t.buf,
                    pos: t.pos,
                })?;
            return Ok((s, false));
        }
        let in_ring = matches!(self.region(t.buf), Some(Region::Ring(_)));
        if exclusive && in_ring {
            self.forget_memo(t);
            let Some(Region::Ring(ring)) = self.region_mut(t.buf) else {
                unreachable!()
            };
            ring.edited |= ring.reused;
            let s = ring
                .get_mut(t.pos, t.len as usize)
                .ok_or(ResolveError::Gone {
                    buf: t.buf,
                    pos: t.pos,
                })?;
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
    pub fn transform(
        &mut self,
        input: &Tag,
        max_out: usize,
        f: impl FnOnce(&[u8], &mut [u8]) -> usize,
    ) -> Result<Tag, ResolveError> {
        let out_id = self.scratch();
        let ii = index(input.buf).ok_or(ResolveError::UnknownBuffer(input.buf))?;
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
        let inp = region_get(a, input).ok_or(ResolveError::Gone {
            buf: input.buf,
            pos: input.pos,
        })?;
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
        Ok(Tag {
            pos,
            len: n as u32,
            buf: out_id,
            class: input.class,
        })
    }
}
