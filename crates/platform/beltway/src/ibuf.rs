//! Indirection (thesis 4.3): tags, IBufs and the double ring.
//!
//! A [`Tag`] is a 16-byte rich pointer: absolute position and length of a region in a DBuf,
//! the DBuf's id, and a class. Tags are valid in every process that can map the DBuf: they
//! hold no addresses. An IBuf is a ring of tags ([`Layout::Tags`]).
//!
//! - Read-through: [`IbufReader`] resolves each tag through its [`BufTable`] and hands out
//!   the bytes in the DBuf. DBufs it does not know yet are mapped on first use ("buffer
//!   faults"), by the name the IBuf's writer recorded in the IBuf header.
//! - Write-through: [`IbufWriter::write`] copies data into the writer's default DBuf and
//!   stores a tag; the default DBuf never overwrites data that unread tags still point to.
//! - Splicing: when the bytes passed to `write` already lie in a DBuf mapped in this
//!   process (e.g. a slice returned by peek), only a tag is written (4.3.1).
//!
//! The double ring (dr-DBuf, 4.5.3) is exactly an IBuf whose tags point into its own default
//! byte DBuf: record headers out of band, data contiguous, resynchronisation through the
//! header ring after a loss.

use crate::error::{Error, Result};
use crate::layout::BufNames;
use crate::layout::DATA_OFFSET;
use crate::pos::{self, Epoch};
use crate::ring::{Layout, Peeked, Reader, RingConfig, RingRef, Shared, Start, SyncMode, Writer};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

/// A rich pointer into a DBuf (thesis Figure 4.2). 16 bytes, no addresses.
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Tag {
    /// Absolute byte position of the region in its DBuf (monotonic, never wraps).
    pub pos: u64,
    /// Length of the region.
    pub len: u32,
    /// DBuf id (0 = no buffer: an empty or abandoned tag).
    pub buf: u16,
    /// Classifier (0 = drop; otherwise a group, session or verdict).
    pub class: u16,
}

impl Tag {
    pub const SIZE: usize = 16;

    #[inline]
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.pos.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..14].copy_from_slice(&self.buf.to_le_bytes());
        b[14..16].copy_from_slice(&self.class.to_le_bytes());
        b
    }

    /// Parse a tag; `None` if `b` is shorter than 16 bytes.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Option<Tag> {
        let b: &[u8; 16] = b.get(..16)?.try_into().ok()?;
        Some(Tag {
            pos: u64::from_le_bytes(b[..8].try_into().unwrap()),
            len: u32::from_le_bytes(b[8..12].try_into().unwrap()),
            buf: u16::from_le_bytes(b[12..14].try_into().unwrap()),
            class: u16::from_le_bytes(b[14..16].try_into().unwrap()),
        })
    }
}

const NAMES_OFFSET: usize = 2048;
const NAME_ENTRY: usize = 128;
const MAX_NAMES: usize = (DATA_OFFSET - NAMES_OFFSET - 8) / NAME_ENTRY;

fn record_name(ibuf: &Shared, id: u16, name: &str) -> Result<()> {
    if !ibuf.data.writable() {
        return Ok(());
    }
    let names = ibuf.data.get::<BufNames>(NAMES_OFFSET);
    // SYNC POINT: Acquire, pairs with the Release store of `count` below (by another
    // producer of this IBuf): the entries below it are complete.
    let n = names.count.load(Acquire) as usize;
    for i in 0..n.min(MAX_NAMES) {
        let e = ibuf.data.bytes(NAMES_OFFSET + 8 + i * NAME_ENTRY, 2);
        if u16::from_le_bytes([e[0], e[1]]) == id {
            return Ok(());
        }
    }
    if n >= MAX_NAMES || name.len() > NAME_ENTRY - 3 {
        return Err(Error::Unsupported {
            name: ibuf.name.clone(),
            what: "more DBuf names than the IBuf header holds",
        });
    }
    let mut e = vec![0u8; NAME_ENTRY];
    e[..2].copy_from_slice(&id.to_le_bytes());
    e[2] = name.len() as u8;
    e[3..3 + name.len()].copy_from_slice(name.as_bytes());
    ibuf.data.write_at(NAMES_OFFSET + 8 + n * NAME_ENTRY, &e);
    // SYNC POINT: Release publishes the entry bytes to readers that load count with Acquire
    // (`lookup_name`, and the check above in other producers).
    names.count.store(n as u32 + 1, Release);
    Ok(())
}

fn lookup_name(ibuf: &Shared, id: u16) -> Option<String> {
    let names = ibuf.data.get::<BufNames>(NAMES_OFFSET);
    // SYNC POINT: Acquire, pairs with the Release store of `count` in `record_name`: the
    // entries below it are complete.
    let n = (names.count.load(Acquire) as usize).min(MAX_NAMES);
    (0..n).find_map(|i| {
        let e = ibuf
            .data
            .bytes(NAMES_OFFSET + 8 + i * NAME_ENTRY, NAME_ENTRY);
        if u16::from_le_bytes([e[0], e[1]]) != id {
            return None;
        }
        let len = (e[2] as usize).min(NAME_ENTRY - 3);
        String::from_utf8(e[3..3 + len].to_vec()).ok()
    })
}

#[derive(Debug)]
struct Entry {
    id: u16,
    sh: Arc<Shared>,
    prev: Option<Epoch>,
    cur: Epoch,
    gen: u64,
    addr: std::ops::Range<usize>,
}

impl Entry {
    fn new(sh: Arc<Shared>) -> Entry {
        let (prev, cur, gen) = sh.load_epochs();
        let r = sh.data.addr_range();
        Entry {
            id: sh.buf_id,
            addr: r.start + DATA_OFFSET..r.start + DATA_OFFSET + sh.max_cap as usize,
            sh,
            prev,
            cur,
            gen,
        }
    }
    fn refresh(&mut self) {
        // SYNC POINT: Acquire, pairs with the Release store of epoch_gen in
        // `Writer::maybe_resize`, which precedes the commit of any data in the new epoch;
        // a tag for such data was read after that commit, so we see the new generation and
        // re-read the table (through its seqlock).
        let g = self.sh.hdr().p.0.epoch_gen.load(Acquire);
        if g != self.gen {
            let (prev, cur, gen) = self.sh.load_epochs();
            self.prev = prev;
            self.cur = cur;
            self.gen = gen;
        }
    }
}

/// The DBufs this process has mapped, by id: resolves tags to bytes (read-through) and
/// addresses to tags (splice detection).
#[derive(Debug, Default)]
pub struct BufTable {
    entries: Vec<Entry>,
}

impl BufTable {
    pub fn new() -> BufTable {
        BufTable::default()
    }

    /// Make a DBuf resolvable. Two different DBufs with one id are an error.
    pub fn register(&mut self, ring: &RingRef) -> Result<()> {
        let sh = ring.0.clone();
        if let Some(e) = self.entries.iter().find(|e| e.id == sh.buf_id) {
            if Arc::ptr_eq(&e.sh, &sh) {
                return Ok(());
            }
            return Err(Error::Config {
                name: sh.name.clone(),
                why: format!(
                    "buffer id {} is already used by ring '{}'",
                    sh.buf_id, e.sh.name
                ),
            });
        }
        self.entries.push(Entry::new(sh));
        Ok(())
    }

    fn entry(&mut self, id: u16) -> Result<&mut Entry> {
        self.entries
            .iter_mut()
            .find(|e| e.id == id)
            .ok_or(Error::UnknownBuffer { id })
    }

    /// Bytes a tag points to, if they are committed and not yet overwritten. On lossy DBufs,
    /// call [`BufTable::check`] after using them.
    pub fn resolve(&mut self, tag: &Tag) -> Result<&[u8]> {
        let at = self.locate(tag)?;
        Ok(self.bytes_at(at, tag.len as usize))
    }

    /// The bytes at a place [`BufTable::locate`] found (cannot fail: the checks were made).
    fn bytes_at(&self, (k, off): (usize, usize), len: usize) -> &[u8] {
        self.entries[k].sh.data.bytes(off, len)
    }

    /// Where the bytes of a tag are (entry, offset in its data segment), if they are
    /// committed and not yet overwritten (see [`BufTable::resolve`]).
    fn locate(&mut self, tag: &Tag) -> Result<(usize, usize)> {
        let k = self
            .entries
            .iter()
            .position(|e| e.id == tag.buf)
            .ok_or(Error::UnknownBuffer { id: tag.buf })?;
        let e = &mut self.entries[k];
        e.refresh();
        let h = e.sh.hdr();
        // SYNC POINT: write_pos Acquire pairs with the DBuf writer's `fences::publish`: the
        // bytes below it are visible. The tail's Acquire pairs with no Release store (the
        // tail is stored Relaxed, then a Release fence): a value for the early overrun
        // test; `check` after use is what detects overwrite.
        let wpos = h.p.0.write_pos.load(Acquire);
        let tail = h.t.0.tail.load(Acquire);
        let off = region(&e.sh.name, tag, wpos, tail, e.prev, e.cur)?;
        Ok((k, off))
    }

    /// Whether the region a tag points to is still intact (call after using resolved bytes).
    pub fn check(&mut self, tag: &Tag) -> Result<()> {
        let e = self.entry(tag.buf)?;
        // SYNC POINT: as in `DbufView::check`: the Acquire fence orders the caller's loads of
        // the region before the tail load; pairs with the Release fence after the writer's
        // tail store (`Writer::prepare`, `MpWriter::acquire`).
        std::sync::atomic::fence(Acquire);
        let tail = e.sh.hdr().t.0.tail.load(Relaxed);
        if tag.pos < tail {
            return Err(Error::Overrun {
                name: e.sh.name.clone(),
                from: tag.pos,
                to: tail,
            });
        }
        Ok(())
    }

    /// If `data` lies inside a mapped DBuf's committed, valid contents, the tag for it.
    pub fn splice_tag(&mut self, data: &[u8]) -> Option<Tag> {
        let a = data.as_ptr() as usize;
        let e = self.entries.iter_mut().find(|e| e.addr.contains(&a))?;
        e.refresh();
        let off = (a - e.addr.start) as u64;
        let h = e.sh.hdr();
        // SYNC POINT: as in `resolve`: write_pos pairs with the writer's publish; the tail's
        // Acquire pairs with no Release store (a value).
        let wpos = h.p.0.write_pos.load(Acquire);
        let tail = h.t.0.tail.load(Acquire);
        // The newest position at this offset that is committed: try the current epoch, then
        // the previous one.
        for ep in [Some(e.cur), e.prev].into_iter().flatten() {
            if off + data.len() as u64 > ep.size || wpos < ep.start {
                continue;
            }
            let lap = (wpos - ep.start) / ep.size;
            for l in [lap, lap.wrapping_sub(1)] {
                let Some(p) = l.checked_mul(ep.size).map(|x| ep.start + x + off) else {
                    continue;
                };
                if p >= ep.start && p >= tail && p + data.len() as u64 <= wpos {
                    return Some(Tag {
                        pos: p,
                        len: data.len() as u32,
                        buf: e.id,
                        class: 1,
                    });
                }
            }
        }
        None
    }

    /// Map, by name, DBufs named in an IBuf header that this table does not know yet.
    fn fault_in(&mut self, ibuf: &Shared, id: u16) -> Result<()> {
        let Some(name) = lookup_name(ibuf, id) else {
            return Err(Error::UnknownBuffer { id });
        };
        let ring = RingRef::open(&name)?;
        if ring.0.buf_id != id {
            return Err(Error::BadRing {
                name,
                why: format!("expected buffer id {id}, found {}", ring.0.buf_id),
            });
        }
        self.register(&ring)
    }
}

/// A DBuf mapped for resolving tags through a shared reference: what a consumer's data
/// store keeps for a DBuf another space writes (read-through without a `BufTable`).
#[derive(Debug)]
pub struct DbufView {
    sh: Arc<Shared>,
    epochs: std::cell::Cell<(Option<Epoch>, Epoch, u64)>,
}

impl DbufView {
    pub fn new(ring: &RingRef) -> DbufView {
        let sh = ring.0.clone();
        let e = sh.load_epochs();
        DbufView {
            sh,
            epochs: std::cell::Cell::new(e),
        }
    }
    /// The DBuf's id (what its tags carry).
    pub fn id(&self) -> u16 {
        self.sh.buf_id
    }
    pub fn name(&self) -> &str {
        &self.sh.name
    }
    /// Everything below this position may have been overwritten.
    pub fn tail(&self) -> u64 {
        // SYNC POINT: Acquire for the value only; the tail is stored Relaxed (then a
        // Release fence), so this pairs with no Release store.
        self.sh.hdr().t.0.tail.load(Acquire)
    }
    /// Whether the region a tag points to is still intact: on a ring whose writer does not
    /// wait for this view's reader (a lossy stream), call it after copying the bytes
    /// [`DbufView::resolve`] handed out, and use the copy only if it says yes (thesis 4.5.4,
    /// FRP: copy, then verify).
    pub fn check(&self, tag: &Tag) -> Result<()> {
        // SYNC POINT: the Acquire fence orders the caller's loads of the region before the
        // tail load (seqlock read side, against the writer's tail store + Release fence
        // before it overwrites the region: `Writer::prepare`, `MpWriter::acquire`).
        std::sync::atomic::fence(Acquire);
        let tail = self.sh.hdr().t.0.tail.load(Relaxed);
        if tag.pos < tail {
            return Err(Error::Overrun {
                name: self.sh.name.clone(),
                from: tag.pos,
                to: tail,
            });
        }
        Ok(())
    }

    /// Bytes a tag points to, if committed and not yet overwritten.
    pub fn resolve(&self, tag: &Tag) -> Result<&[u8]> {
        let h = self.sh.hdr();
        let (mut prev, mut cur, mut gen) = self.epochs.get();
        // SYNC POINT: Acquire, pairs with the Release store of epoch_gen in
        // `Writer::maybe_resize` (see `Entry::refresh`).
        if h.p.0.epoch_gen.load(Acquire) != gen {
            (prev, cur, gen) = self.sh.load_epochs();
            self.epochs.set((prev, cur, gen));
        }
        // SYNC POINT: as in `BufTable::resolve`: write_pos pairs with the writer's publish
        // (the bytes below it are visible); the tail's Acquire pairs with no Release store.
        let wpos = h.p.0.write_pos.load(Acquire);
        let tail = h.t.0.tail.load(Acquire);
        let off = region(&self.sh.name, tag, wpos, tail, prev, cur)?;
        Ok(self.sh.data.bytes(off, tag.len as usize))
    }
}

/// Where the bytes of `tag` start in its data segment, checked against the data ring's
/// write position `wpos`, `tail` and epochs as the caller just read them: committed (below
/// the write position), not yet overwritten (at or past the tail, in an epoch still
/// mapped), and not wrapping around the ring's end. The one check of a tag against its
/// ring, for [`BufTable::resolve`] and [`DbufView::resolve`].
fn region(
    name: &str,
    tag: &Tag,
    wpos: u64,
    tail: u64,
    prev: Option<pos::Epoch>,
    cur: pos::Epoch,
) -> Result<usize> {
    let overrun = || Error::Overrun {
        name: name.to_string(),
        from: tag.pos,
        to: tail,
    };
    let corrupt = |why: String| Error::Corrupt {
        name: name.to_string(),
        pos: tag.pos,
        why,
    };
    if tag.pos < tail {
        return Err(overrun());
    }
    let Some(end) = tag
        .pos
        .checked_add(tag.len as u64)
        .filter(|&end| end <= wpos)
    else {
        return Err(corrupt(format!(
            "tag of {} bytes points past the write position {wpos}",
            tag.len
        )));
    };
    let ep = pos::epoch_for(prev, cur, tag.pos).ok_or_else(overrun)?;
    let off = ep.offset(tag.pos);
    if off + (end - tag.pos) > ep.size {
        return Err(corrupt("tag region wraps around the ring end".into()));
    }
    Ok(DATA_OFFSET + off as usize)
}

/// Reads an IBuf: tags, or the data they point to (read-through).
#[derive(Debug)]
pub struct IbufReader {
    tags: Reader,
    table: BufTable,
    held: Option<Tag>,
    /// Where the held block was located (table entry, offset).
    held_at: (usize, usize),
}

impl IbufReader {
    pub fn new(tags: Reader, table: BufTable) -> Result<IbufReader> {
        if tags.shared().layout() != Layout::Tags {
            return Err(Error::Unsupported {
                name: tags.shared().name().to_string(),
                what: "IbufReader over a ring that does not hold tags",
            });
        }
        Ok(IbufReader {
            tags,
            table,
            held: None,
            held_at: (0, 0),
        })
    }
    pub fn table(&mut self) -> &mut BufTable {
        &mut self.table
    }
    pub fn tags(&self) -> &Reader {
        &self.tags
    }
    /// The tag ring's reader (e.g. to switch it to manual release).
    pub fn tags_mut(&mut self) -> &mut Reader {
        &mut self.tags
    }

    /// Next tag, blocking; `None` at EOF. Skips empty/abandoned tags. The tag is consumed:
    /// use [`IbufReader::read`] or `peek_acquire` to access its data safely, since a
    /// consumed tag no longer keeps write-through data from being reused.
    pub fn read_tag(&mut self) -> Result<Option<Tag>> {
        let t = self.hold_tag(false)?;
        if t.is_some() {
            self.tags.peek_complete()?;
        }
        Ok(t)
    }

    /// Acquire the next non-empty tag without releasing it (it keeps the data it points to
    /// from being overwritten by write-through until released). Waits while the ring is
    /// empty unless `now_only`.
    fn hold_tag(&mut self, now_only: bool) -> Result<Option<Tag>> {
        loop {
            let p = if now_only {
                self.tags.try_peek_acquire(Tag::SIZE)?
            } else {
                self.tags.peek_acquire(Tag::SIZE)?
            };
            let t = match p {
                None => return Ok(None),
                Some(p) => Tag::from_bytes(p.data).expect("tag slots are 16 bytes"),
            };
            if t.buf != 0 {
                return Ok(Some(t));
            }
            self.tags.peek_complete()?;
        }
    }

    fn resolve(&mut self, tag: &Tag) -> Result<&[u8]> {
        let at = self.locate(tag)?;
        Ok(self.table.bytes_at(at, tag.len as usize))
    }

    fn locate(&mut self, tag: &Tag) -> Result<(usize, usize)> {
        if self.table.entries.iter().all(|e| e.id != tag.buf) {
            let sh = self.tags.shared().clone();
            self.table.fault_in(&sh, tag.buf)?;
        }
        self.table.locate(tag)
    }

    /// Read-through: copy the next block into `buf`; 0 at EOF.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let Some(tag) = self.hold_tag(false)? else {
            return Ok(0);
        };
        let name = self.tags.shared().name().to_string();
        let res = self.resolve(&tag).and_then(|data| {
            if data.len() > buf.len() {
                return Err(Error::BufferTooSmall {
                    name,
                    need: data.len(),
                    got: buf.len(),
                });
            }
            buf[..data.len()].copy_from_slice(data);
            Ok(data.len())
        });
        let res = res.and_then(|n| self.table.check(&tag).map(|_| n));
        match res {
            // Too small a buffer consumes nothing, like a record ring's read.
            Err(e @ Error::BufferTooSmall { .. }) => Err(e),
            other => {
                self.tags.peek_complete()?;
                other
            }
        }
    }

    /// Read-through peek: the next block in place (in the tag's DBuf), and its tag. The tag
    /// stays held until [`IbufReader::peek_complete`].
    pub fn peek_acquire(&mut self) -> Result<Option<(Tag, Peeked<'_>)>> {
        self.acquire(false)
    }

    /// Non-blocking [`IbufReader::peek_acquire`]: `None` when no block is there now (at the
    /// end of the stream too: [`Reader::block`] on `tags_mut()` tells the two apart).
    pub fn try_peek_acquire(&mut self) -> Result<Option<(Tag, Peeked<'_>)>> {
        self.acquire(true)
    }

    fn acquire(&mut self, now_only: bool) -> Result<Option<(Tag, Peeked<'_>)>> {
        let Some(tag) = self.hold_tag(now_only)? else {
            return Ok(None);
        };
        // Located once: a lossy DBuf's writer may overwrite the block at any time, and a
        // second look that failed would leave the tag held (the caller validates with
        // `peek_complete` after use).
        let at = match self.locate(&tag) {
            Ok(at) => at,
            Err(e) => {
                self.tags.peek_complete()?;
                return Err(e);
            }
        };
        self.held = Some(tag);
        self.held_at = at;
        Ok(Some((
            tag,
            Peeked {
                pos: tag.pos,
                data: self.table.bytes_at(at, tag.len as usize),
            },
        )))
    }

    /// The block the last `peek_acquire` holds, again (where it was located then), until
    /// `peek_complete`.
    pub fn held(&self) -> Option<(Tag, Peeked<'_>)> {
        self.held.map(|t| {
            (
                t,
                Peeked {
                    pos: t.pos,
                    data: self.table.bytes_at(self.held_at, t.len as usize),
                },
            )
        })
    }

    /// Validate the block from the last `peek_acquire` after use, and release its tag.
    pub fn peek_complete(&mut self) -> Result<()> {
        match self.held.take() {
            Some(t) => {
                let r = self.table.check(&t);
                self.tags.peek_complete()?;
                r
            }
            None => Ok(()),
        }
    }
}

/// Writes an IBuf: tags directly, spliced, or written through into a default DBuf.
#[derive(Debug)]
pub struct IbufWriter {
    tags: Writer,
    table: BufTable,
    /// Write-through target and a private reader slot on it that tracks how far the IBuf's
    /// readers have consumed the tags pointing into it.
    default: Option<(Writer, Reader)>,
    /// Write-through records not yet known to be released: (tag position, record end).
    outstanding: VecDeque<(u64, u64)>,
    /// Blocks spliced (tag only) vs. written through (copied), for statistics.
    pub spliced: u64,
    pub copied: u64,
    /// How far the IBuf's readers had released tags when last looked at.
    released: crate::ring::ReleaseCache,
    /// The open `poke_acquire` window in the default DBuf: (position, length).
    poked: Option<(u64, usize)>,
}

impl IbufWriter {
    /// An IBuf writer over a tag ring, without a default DBuf (tags and splices only).
    pub fn new(tags: Writer) -> Result<IbufWriter> {
        if tags.shared().layout() != Layout::Tags {
            return Err(Error::Unsupported {
                name: tags.shared().name().to_string(),
                what: "IbufWriter over a ring that does not hold tags",
            });
        }
        Ok(IbufWriter {
            tags,
            table: BufTable::new(),
            default: None,
            outstanding: VecDeque::new(),
            spliced: 0,
            copied: 0,
            released: Default::default(),
            poked: None,
        })
    }

    /// Give the IBuf a default DBuf for write-through. `data` must be a byte ring with
    /// lossless sync; nobody else may attach lossless readers to it.
    pub fn with_default(mut self, data: Writer) -> Result<IbufWriter> {
        let sh = data.shared().clone();
        if sh.layout() != Layout::Bytes || sh.sync() != SyncMode::Srp {
            return Err(Error::Unsupported {
                name: sh.name.clone(),
                what: "a default DBuf that is not a lossless byte ring",
            });
        }
        let shadow = Reader::attach(sh.clone(), Start::Latest)?;
        self.register(&data.ring())?;
        self.default = Some((data, shadow));
        Ok(self)
    }

    /// Make a DBuf's tags resolvable by readers (records its name in the IBuf header when
    /// it is a named ring) and its contents spliceable.
    pub fn register(&mut self, ring: &RingRef) -> Result<()> {
        self.table.register(ring)?;
        if let crate::shm::Backing::Path(_) = ring.0.data.backing() {
            record_name(self.tags.shared(), ring.0.buf_id, &ring.0.name)?;
        }
        Ok(())
    }

    pub fn tags(&self) -> &Writer {
        &self.tags
    }
    pub fn ring(&self) -> RingRef {
        self.tags.ring()
    }
    /// The default DBuf (for readers of a double ring to register).
    pub fn default_ring(&self) -> Option<RingRef> {
        self.default.as_ref().map(|(w, _)| w.ring())
    }

    /// Store a tag.
    pub fn write_tag(&mut self, tag: Tag) -> Result<u64> {
        self.tags.append_record(&tag.to_bytes())
    }

    /// Store a run of tags (their bytes, [`Tag::to_bytes`] one after another) with one
    /// copy (see [`Writer::append_tags`]); returns the position of the first.
    pub fn write_tag_run(&mut self, tags: &[u8]) -> Result<u64> {
        self.tags.append_tags(tags)
    }

    /// Write a block: splice when `data` already lies in a mapped DBuf, else write through.
    pub fn write(&mut self, data: &[u8]) -> Result<usize> {
        self.write_class(data, 1)
    }

    /// Like [`IbufWriter::write`], with a class for the tag.
    pub fn write_class(&mut self, data: &[u8], class: u16) -> Result<usize> {
        if let Some(mut t) = self.table.splice_tag(data) {
            t.class = class;
            self.write_tag(t)?;
            self.spliced += 1;
            return Ok(data.len());
        }
        let tag = self.write_through(&[data], class)?;
        let at = self.write_tag(tag)?;
        self.outstanding.push_back((at, tag.pos + tag.len as u64));
        self.copied += 1;
        Ok(data.len())
    }

    /// Write a block made of `parts` through into the default DBuf (one contiguous region,
    /// one tag covering all of it), never splicing: e.g. an out-of-band header followed by
    /// the block's bytes, which the reader separates again.
    pub fn write_through_parts(&mut self, parts: &[&[u8]], class: u16) -> Result<Tag> {
        let tag = self.write_through(parts, class)?;
        let at = self.write_tag(tag)?;
        self.outstanding.push_back((at, tag.pos + tag.len as u64));
        self.copied += 1;
        Ok(tag)
    }

    /// Write-side `poke_acquire` (thesis Table 4.1, write-through without a copy): `len`
    /// contiguous bytes of the default DBuf to fill in place. No tag points at them until
    /// [`IbufWriter::poke_complete`], so readers cannot see them half filled. Waits, as a
    /// write-through does, until no unread tag points into the window.
    pub fn poke_acquire(&mut self, len: usize) -> Result<&mut [u8]> {
        let name = || self.tags.shared().name().to_string();
        if self.poked.is_some() {
            return Err(Error::Unsupported {
                name: name(),
                what: "a second poke_acquire before poke_complete",
            });
        }
        let Some((dbuf, _)) = self.default.as_mut() else {
            return Err(Error::Unsupported {
                name: name(),
                what: "poke without a default DBuf",
            });
        };
        let need = dbuf.contiguous_need(len)?;
        self.release_until(need)?;
        let (dbuf, _) = self.default.as_mut().expect("checked");
        // Committed on the DBuf at once: its readers learn of blocks only from tags.
        let (at, _) = dbuf.alloc_contiguous(len)?;
        self.poked = Some((at, len));
        Ok(self
            .poked_mut()
            .expect("the window was just allocated and is not overwritten"))
    }

    /// The window of the open `poke_acquire` again (a caller that fills it over several
    /// calls, like `slfile_append`); `None` when no poke is open.
    pub fn poked_mut(&mut self) -> Option<&mut [u8]> {
        let (at, len) = self.poked?;
        self.default.as_mut()?.0.rewrite(at, len)
    }

    /// Publish the first `len` bytes of the open `poke_acquire` window as one block (a tag
    /// of class `class`) and give the rest of the window back.
    pub fn poke_complete(&mut self, len: usize, class: u16) -> Result<Tag> {
        let Some((at, cap)) = self.poked else {
            return Err(Error::Unsupported {
                name: self.tags.shared().name().to_string(),
                what: "poke_complete without poke_acquire",
            });
        };
        if len > cap {
            return Err(Error::TooLarge {
                name: self.tags.shared().name().to_string(),
                len,
                max: cap,
            });
        }
        self.poked = None;
        let (dbuf, _) = self
            .default
            .as_mut()
            .expect("an open poke has a default DBuf");
        dbuf.give_back(at, cap, len);
        let tag = Tag {
            pos: at,
            len: len as u32,
            buf: dbuf.shared().buf_id(),
            class,
        };
        let tpos = self.write_tag(tag)?;
        self.outstanding.push_back((tpos, at + len as u64));
        self.copied += 1;
        Ok(tag)
    }

    /// Abandon the open `poke_acquire` window: nothing is published, the space goes back.
    pub fn poke_cancel(&mut self) {
        if let (Some((at, cap)), Some((dbuf, _))) = (self.poked.take(), self.default.as_mut()) {
            dbuf.give_back(at, cap, 0);
        }
    }

    /// Copy into the default DBuf, first making sure no unread tag points at what the copy
    /// overwrites.
    fn write_through(&mut self, parts: &[&[u8]], class: u16) -> Result<Tag> {
        if self.poked.is_some() {
            return Err(Error::Unsupported {
                name: self.tags.shared().name().to_string(),
                what: "write-through while a poke_acquire is open",
            });
        }
        let Some((dbuf, _)) = self.default.as_mut() else {
            return Err(Error::Unsupported {
                name: self.tags.shared().name().to_string(),
                what: "write-through without a default DBuf",
            });
        };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let need = dbuf.contiguous_need(len)?;
        self.release_until(need)?;
        let (dbuf, _) = self.default.as_mut().expect("checked");
        let pos = dbuf.write_contiguous_parts(parts)?;
        Ok(Tag {
            pos,
            len: len as u32,
            buf: dbuf.shared().buf_id(),
            class,
        })
    }

    /// Advance the shadow reader on the default DBuf up to `need`, waiting for the IBuf's
    /// readers to consume the tags that point below it.
    fn release_until(&mut self, need: u64) -> Result<()> {
        let tags_sh = self.tags.shared().clone();
        let (dbuf, shadow) = self.default.as_mut().expect("checked");
        if shadow.position() >= need {
            return Ok(());
        }
        // One look at how far the readers got frees every record below it at once; wait
        // (and wake the readers first) only when that is not enough.
        let mut seen = tags_sh.released_now(&mut self.released);
        // Everything the readers are done with goes back at once (not just what this write
        // needs), so the next writes find room without looking again.
        while let Some(&(tag_pos, rec_end)) = self.outstanding.front() {
            if tag_pos + Tag::SIZE as u64 > seen {
                break;
            }
            self.outstanding.pop_front();
            shadow.release_to(rec_end);
        }
        while shadow.position() < need {
            match self.outstanding.front().copied() {
                Some((tag_pos, rec_end)) => {
                    let target = tag_pos + Tag::SIZE as u64;
                    if seen < target {
                        self.tags.flush();
                        tags_sh.wait_released(target, 0, &mut self.released)?;
                        seen = tags_sh.released_now(&mut self.released);
                    }
                    self.outstanding.pop_front();
                    shadow.release_to(rec_end);
                }
                None => {
                    shadow.release_to(dbuf.position());
                    break;
                }
            }
        }
        Ok(())
    }

    /// Batched commits on the tag ring (see [`Writer::set_deferred`]): tags become visible
    /// at [`IbufWriter::commit`], one release store per batch instead of one per tag. The
    /// default DBuf commits every write at once, as before: a tag, whenever the tag ring
    /// commits it (it may commit early, to wake a sleeping reader), never points at bytes
    /// a reader could not yet see.
    pub fn set_deferred(&mut self, on: bool) {
        self.tags.set_deferred(on);
    }

    /// Make the tags written so far visible. Sleeping readers are woken per the tag ring's
    /// moderation (after `threshold` tags, or by their own latency bound), not
    /// unconditionally.
    pub fn commit(&mut self) {
        self.tags.commit();
    }

    /// [`IbufWriter::commit`], then wake sleeping readers whatever the moderation says.
    pub fn flush(&mut self) {
        self.tags.flush();
    }
    pub fn close(&mut self) {
        self.tags.close();
    }
}

/// A double ring (dr-DBuf): record headers (tags) in a small ring, data contiguous in a
/// byte ring. Returns the writer; readers are [`DoubleRing::reader`]s.
#[derive(Debug)]
pub struct DoubleRing;

impl DoubleRing {
    /// Create an anonymous double ring with `headers` tag slots and `data` bytes.
    pub fn create(name: &str, headers: usize, data: usize, sync: SyncMode) -> Result<IbufWriter> {
        let tags = Writer::create(
            &format!("{name}.hdr"),
            RingConfig::bytes(headers * Tag::SIZE)
                .layout(Layout::Tags)
                .sync(sync),
        )?;
        let dcfg = RingConfig {
            buf_id: 2,
            ..RingConfig::bytes(data)
        };
        let dbuf = Writer::create(&format!("{name}.data"), dcfg)?;
        IbufWriter::new(tags)?.with_default(dbuf)
    }

    /// A reader of a double ring created in this process.
    pub fn reader(w: &IbufWriter, start: Start) -> Result<IbufReader> {
        let tags = w.ring().reader(start)?;
        let mut table = BufTable::new();
        if let Some(d) = w.default_ring() {
            table.register(&d)?;
        }
        IbufReader::new(tags, table)
    }
}
