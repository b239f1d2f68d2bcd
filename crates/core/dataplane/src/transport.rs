//! How a block leaves or enters a space, written once for every transport: channels between
//! spaces and to other runs (`channel`), taps (`tap`), network channels (`netchan`), Kafka
//! (`filters::kafka`).
//!
//! Every one of them carries a block's metadata in the one block header
//! ([`protocol::block::Header`], re-exported here): [`header_of`] fills it from the store
//! for a block going out, [`Inlet`] gives a block coming in its record metadata, link type
//! and capture header from it (and counts what came). A transport's writing end implements
//! [`BlockOut`]; [`Outlet::send`] does the part they share (each block's bytes and header
//! looked up once, blocks that cannot be resolved skipped, what went out counted) and hands
//! the transport the batch.
//!
//! Owns: the store-side meaning of the header's fields, and the shared egress/ingress code.
//! Does not own: the header's bytes (`protocol::block`), or any transport's own framing
//! beyond it (rings, sockets, Kafka messages).

use crate::filter::{Batch, Ctx};
use crate::store::{CaptureHeader, RecordMeta, Store};
use beltway::Tag;
pub use protocol::block::{
    Fields, Header, HeaderError, ANNOUNCE, CAPTURE, CAPTURE_BIG_ENDIAN, CAPTURE_NANOS,
    END_OF_STREAM, HEADER_LEN, LAST, LINK, MARK, METAS, RECORD, SHARED,
};

/// The header of block `t` as `store` has it: its record metadata ([`RECORD`]), its buffer's
/// link type if it fits the header's u16 ([`LINK`]), and with both, the capture file
/// header it came with ([`CAPTURE`]); `len` and `class` from the tag.
pub fn header_of(store: &Store, t: &Tag) -> Fields {
    let mut f = Fields {
        len: t.len,
        class: t.class,
        ..Fields::default()
    };
    let record = store.record_of(t);
    if let Some(r) = &record {
        f.ts_ns = r.ts_ns;
        f.orig_len = r.orig_len;
        f.skip = r.skip;
        f.flags |= RECORD;
    }
    if let Some(l) = store.link(t).and_then(|l| u16::try_from(l).ok()) {
        f.link = l;
        f.flags |= LINK;
        if let Some(h) = store.capture(t).filter(|_| record.is_some()) {
            f.snaplen = h.snaplen;
            f.flags |= CAPTURE
                | if h.big_endian { CAPTURE_BIG_ENDIAN } else { 0 }
                | if h.nanos { CAPTURE_NANOS } else { 0 };
        }
    }
    f
}

/// The capture file header a header carries, if it carries one.
pub fn capture_of(f: &Fields) -> Option<CaptureHeader> {
    f.has(CAPTURE).then(|| CaptureHeader {
        big_endian: f.has(CAPTURE_BIG_ENDIAN),
        nanos: f.has(CAPTURE_NANOS),
        snaplen: f.snaplen,
    })
}

/// Give block `t` (in `store`) the record metadata `f` carries, and its buffer the link
/// type and capture header unless `link_known` says the buffer has them already. Returns
/// whether a link type was set.
pub fn restore(store: &mut Store, t: &Tag, f: &Fields, link_known: bool) -> bool {
    if f.has(RECORD) {
        store.add_record(
            t.buf,
            RecordMeta {
                pos: t.pos,
                len: t.len,
                skip: f.skip,
                ts_ns: f.ts_ns,
                orig_len: f.orig_len,
            },
        );
    }
    if f.has(LINK) && !link_known {
        store.set_link(t.buf, f.link as u32);
        if let Some(c) = capture_of(f) {
            store.set_capture(t.buf, c);
        }
        return true;
    }
    false
}

/// The receiving side a transport's source shares: blocks put into the space's store with
/// the class and metadata their header carries, counted.
#[derive(Debug, Default)]
pub struct Inlet {
    /// The store's buffer for new blocks has its link type (set once, from the first
    /// header that carries one).
    link_set: bool,
    /// Blocks and bytes taken in.
    pub blocks: u64,
    pub bytes: u64,
}

impl Inlet {
    /// Block `data` copied into the store, with `f`'s class (`class`: another one) and
    /// metadata.
    pub fn admit(&mut self, cx: &mut Ctx<'_>, f: &Fields, data: &[u8], class: u16) -> Tag {
        let t = Tag {
            class,
            ..cx.store.push(data)
        };
        self.place(cx.store, &t, f);
        t
    }

    /// Room for a block of `len` bytes in the store, with `f`'s class and metadata; its
    /// bytes are written into it afterwards.
    pub fn reserve(&mut self, cx: &mut Ctx<'_>, f: &Fields, len: usize) -> Tag {
        let (t, _) = cx.store.alloc(len);
        let t = Tag {
            class: f.class,
            ..t
        };
        self.place(cx.store, &t, f);
        t
    }

    /// A block already in the store (read in place, or copied by the transport): its
    /// metadata from `f`, and counted.
    pub fn place(&mut self, store: &mut Store, t: &Tag, f: &Fields) {
        self.link_set |= restore(store, t, f, self.link_set);
        self.blocks += 1;
        self.bytes += t.len as u64;
    }
}

/// A transport's receiving end: a source that takes in blocks from outside its space (a
/// channel from another space or run, a network channel, a Kafka topic). What they all do
/// alike is written here once, and their sources' `Filter::pull` and `Filter::arm` are
/// [`BlockIn::pull_in`] and [`BlockIn::arm_in`]:
///
/// - **Waiting**: a source never waits in `pull`; it declares on the space's readiness
///   handle what it waits for ([`BlockIn::wait`]), and a stream that has ended is ready
///   (its next pull says so).
/// - **End of stream**: [`BlockIn::receive`] answers `Ok(false)` once nothing more will
///   come (after handing on what came before the end); the source is then done.
/// - **Failure**: `Err(why)`: the run is told `why` in the transport's words and stops (a
///   transport whose failure ends only its own stream, a channel whose producer reports
///   its own end, warns itself and answers `Ok(false)`).
///
/// Taking a block in (its header's class and metadata restored into the store, counted) is
/// [`Inlet`]'s, or the channel's own for blocks read in place.
pub trait BlockIn {
    /// Whether the stream has ended (nothing more will come).
    fn ended(&self) -> bool;
    /// What the open stream waits for, on the space's readiness handle.
    fn wait(&mut self, w: &mut crate::readiness::Arm<'_>);
    /// Take what has come, without waiting, into `out` (at most `max` blocks): whether
    /// more may come, or why the stream failed.
    fn receive(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> Result<bool, String>;

    /// The source's `Filter::arm`.
    fn arm_in(&mut self, w: &mut crate::readiness::Arm<'_>) {
        if self.ended() {
            w.ready();
        } else {
            self.wait(w);
        }
    }

    /// The source's `Filter::pull`: [`BlockIn::receive`]; a failure warns and stops the run.
    fn pull_in(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        match self.receive(cx, out, max) {
            Ok(more) => more,
            Err(why) => {
                cx.warn(why);
                cx.stop();
                false
            }
        }
    }
}

/// The `Filter` methods every [`BlockIn`] source has alike, in its `impl Filter`: `process`
/// (a source takes no input), `arm` ([`BlockIn::arm_in`]) and `pull` ([`BlockIn::pull_in`]).
#[macro_export]
macro_rules! block_in_source {
    () => {
        fn process(&mut self, _cx: &mut $crate::filter::Ctx<'_>, _b: &mut $crate::filter::Batch) {}

        fn arm(&mut self, w: &mut $crate::readiness::Arm<'_>, _source: bool) {
            $crate::transport::BlockIn::arm_in(self, w);
        }

        fn pull(
            &mut self,
            cx: &mut $crate::filter::Ctx<'_>,
            out: &mut $crate::filter::Batch,
            max: usize,
        ) -> bool {
            $crate::transport::BlockIn::pull_in(self, cx, out, max)
        }
    };
}

/// One block on its way out: its header (from [`header_of`]), its bytes, its tag.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub head: Fields,
    pub data: &'a [u8],
    pub tag: Tag,
}

impl Outgoing<'_> {
    /// The header's bytes.
    pub fn head_bytes(&self) -> [u8; HEADER_LEN] {
        self.head.encode()
    }
}

/// A transport's writing end: what it does with a batch's blocks once each has its header.
/// Its sink's `process` is [`BlockOut::send_batch`].
pub trait BlockOut {
    /// The transport's counts and failure (see [`Outlet`]).
    fn outlet(&mut self) -> &mut Outlet;
    /// Whether block `t` (`len` bytes) goes at all (a datagram transport: whether it fits
    /// one; a tap: whether it leaves the node); a block refused is not sent, not counted,
    /// and the transport says why itself.
    fn takes(&mut self, _t: &Tag, _len: usize) -> bool {
        true
    }
    /// The header block `t` (its bytes `data`) carries: [`header_of`], unless the
    /// transport's readers want other values in its fields (a tap's pcap readers).
    fn head(&self, store: &Store, t: &Tag, data: &[u8]) -> Fields {
        Fields {
            len: data.len() as u32,
            ..header_of(store, t)
        }
    }
    /// Send one batch's blocks. An error ends the transport: its words for the run's
    /// warning.
    fn write(&mut self, store: &Store, blocks: &mut [Outgoing<'_>]) -> Result<(), String>;

    /// Send the blocks of `tags` ([`Outlet::send`]).
    fn send_tags(&mut self, store: &Store, tags: &[Tag]) -> Result<(), String> {
        let mut outlet = std::mem::take(self.outlet());
        let r = outlet.send(self, store, tags);
        *self.outlet() = outlet;
        r
    }

    /// A sink's `process`: send `batch`; a transport that fails warns, stops the run and
    /// sends nothing more. Returns whether the transport still works.
    fn send_batch(&mut self, cx: &mut Ctx<'_>, batch: &Batch) -> bool {
        if !self.outlet().failed {
            if let Err(why) = self.send_tags(cx.store, &batch.tags) {
                self.outlet().fail(cx, why);
            }
        }
        !self.outlet().failed
    }
}

/// The sending side a transport's sink shares: a batch's blocks resolved and given their
/// headers once, what went out counted, and whether the transport failed.
#[derive(Debug, Default)]
pub struct Outlet {
    /// Blocks and bytes sent.
    pub blocks: u64,
    pub bytes: u64,
    /// The transport failed (its receiver went away, its broker refused): it sends nothing
    /// more.
    pub failed: bool,
}

impl Outlet {
    /// Send the blocks of `tags` through `out`: every block whose bytes the store has and
    /// the transport takes, behind its header.
    pub fn send<O: BlockOut + ?Sized>(
        &mut self,
        out: &mut O,
        store: &Store,
        tags: &[Tag],
    ) -> Result<(), String> {
        let mut blocks = Vec::with_capacity(tags.len());
        for t in tags {
            let Ok(data) = store.data(t) else { continue };
            if !out.takes(t, data.len()) {
                continue;
            }
            blocks.push(Outgoing {
                head: out.head(store, t, data),
                data,
                tag: *t,
            });
            self.blocks += 1;
            self.bytes += data.len() as u64;
        }
        if blocks.is_empty() {
            return Ok(());
        }
        out.write(store, &mut blocks)
    }

    /// The transport failed: the run is told `why` and stops.
    pub fn fail(&mut self, cx: &mut Ctx<'_>, why: String) {
        cx.warn(why);
        self.failed = true;
        cx.stop();
    }
}

/// Test help: `f` run with a context over `store`; no warnings allowed.
#[cfg(test)]
pub(crate) fn cx_run<R>(store: &mut Store, f: impl FnOnce(&mut Ctx<'_>) -> R) -> R {
    let (mut sessions, mut warnings, mut stop) = (None, Vec::new(), crate::filter::Stop::No);
    let mut cx = Ctx {
        store,
        name: "test",
        sessions: &mut sessions,
        warnings: &mut warnings,
        stop: &mut stop,
    };
    let r = f(&mut cx);
    assert!(warnings.is_empty(), "{warnings:?}");
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block's record, link type and capture header go into its header and come back
    /// out of it in another store, as they were.
    #[test]
    fn metadata_crosses_a_header_as_it_was() {
        let mut a = Store::new(1 << 16);
        let t = Tag {
            class: 7,
            ..a.push(b"a captured frame")
        };
        let mut r = RecordMeta::whole(t.pos, t.len, 123_456, 1514);
        r.skip = 14;
        a.add_record(t.buf, r);
        a.set_link(t.buf, 105);
        let cap = CaptureHeader {
            big_endian: true,
            nanos: true,
            snaplen: 96,
        };
        a.set_capture(t.buf, cap);
        let f = header_of(&a, &t);
        let bytes = f.encode();
        let back = Header::new_checked(&bytes[..]).unwrap().fields();
        assert_eq!(back, f);
        let mut b = Store::new(1 << 16);
        let mut inlet = Inlet::default();
        let u = cx_run(&mut b, |cx| {
            inlet.admit(cx, &back, b"a captured frame", back.class)
        });
        assert_eq!(u.class, 7);
        let got = b.record_of(&u).expect("its record");
        assert_eq!((got.ts_ns, got.orig_len, got.skip), (123_456, 1514, 14));
        assert_eq!(b.link(&u), Some(105));
        assert_eq!(b.capture(&u), Some(cap));
        assert_eq!((inlet.blocks, inlet.bytes), (1, 16));
    }

    /// A block made in the run (no record, no link) has an empty header.
    #[test]
    fn a_block_without_metadata_has_no_flags() {
        let mut a = Store::new(1 << 16);
        let t = a.push(b"made here");
        let f = header_of(&a, &t);
        assert_eq!((f.flags, f.len), (0, 9));
    }
}
