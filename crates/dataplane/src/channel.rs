//! Channels: the streams between spaces (thesis 4.3, 5.2.2).
//!
//! A channel is an IBuf (a beltway ring of 16-byte tags, lossless) plus a data ring, both
//! shared memory. The producing space ends the arc in an [`Egress`] sink; the consuming
//! space starts it with an [`Ingress`] source. Only tags move through the IBuf; a block's
//! bytes are written through into the channel's data ring once, where the consumer reads
//! them in place (the consumer maps the data ring as a DBuf of its store and renames the
//! tags to it). Lossless coupling: the producer reuses data-ring space only after the
//! consumer has released the tags that point into it, and the consumer releases a batch's
//! tags only after the whole batch has walked its space (manual release), so no block is
//! overwritten while a filter reads it.
//!
//! Wake-ups are batched per channel by the tag ring's event moderation: a sleeping
//! consumer is woken after `threshold` tags or when `latency` has passed since the first
//! unsignalled one, and the producer flushes at the end of each of its batches.
//!
//! Owns: channel creation and the two endpoint filters. Does not own placement.

use crate::filter::{Batch, Ctx, Filter};
use crate::store::BufId;
use beltway::{DbufView, IbufWriter, Layout, Reader, RingConfig, RingRef, Start, Tag, Writer};
use std::time::Duration;

/// How a channel batches its wake-ups and how much it buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Tags committed per wake-up of a sleeping consumer (1: wake for every tag).
    pub threshold: u32,
    /// Longest a committed tag waits for its wake-up.
    pub latency: Duration,
    /// Tag slots in the IBuf.
    pub slots: usize,
    /// Bytes in the data ring.
    pub data: usize,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig { threshold: 32, latency: Duration::from_millis(1), slots: 4096, data: 16 << 20 }
    }
}

impl ChannelConfig {
    /// `@latency`: small batches (wake for every block), short bound.
    pub fn latency() -> Self {
        ChannelConfig { threshold: 1, latency: Duration::from_micros(50), ..Self::default() }
    }
    /// `@throughput`: large batches.
    pub fn throughput() -> Self {
        ChannelConfig { threshold: 256, latency: Duration::from_millis(5), ..Self::default() }
    }
}

/// Create a channel; `name` labels its rings (memfd-backed, nothing in /dev/shm).
pub fn channel(name: &str, cfg: ChannelConfig) -> beltway::Result<(Egress, Ingress)> {
    let (tx, tags, data) = egress(name, cfg, true)?;
    Ok((tx, ingress(name, &tags, &data, true)?))
}

/// The producer's end of a new channel, and the two rings a consumer attaches to (in this
/// process, or in another after [`RingRef::send`]). `same_process`: the consumer is a
/// space of this process, so blocks in the producer's shared rings cross as tags only.
/// Blocks in files cross as tags unless `same_process` is false and the consumer is the
/// parent (`to_parent`), which does not map files a process space names.
pub fn egress(name: &str, cfg: ChannelConfig, same_process: bool) -> beltway::Result<(Egress, RingRef, RingRef)> {
    egress_to(name, cfg, same_process, false)
}

/// [`egress`] with the direction known: `to_parent` for a process space's channels.
pub fn egress_to(name: &str, cfg: ChannelConfig, same_process: bool, to_parent: bool) -> beltway::Result<(Egress, RingRef, RingRef)> {
    let tags = Writer::create(
        &format!("{name}.tags"),
        RingConfig { latency: cfg.latency, ..RingConfig::bytes(cfg.slots * Tag::SIZE).layout(Layout::Tags).threshold(cfg.threshold) },
    )?;
    let data = Writer::create(&format!("{name}.data"), RingConfig { buf_id: 1, ..RingConfig::bytes(cfg.data) })?;
    let (tags_ref, data_ref) = (tags.ring(), data.ring());
    let writer = IbufWriter::new(tags)?.with_default(data)?;
    Ok((Egress { w: writer, name: name.to_string(), failed: false, announced: Vec::new(), same_process, file_refs: !to_parent, tags: tags_ref.clone(), published: false }, tags_ref, data_ref))
}

/// Name under /dev/shm of the stream published under `key` (`.tags` and `.data`).
pub fn share_name(key: &str) -> String {
    format!("streamline.share.{key}")
}

/// Prefix sharing across runs (thesis 6.4): offer this arc's stream under `key` to other
/// runs of the same user. Two named rings, mode 0600: a detachable tag ring (subscribers
/// come and go; while one is attached the stream is lossless to it, and with none this
/// costs one check per batch) and a data ring blocks are written through to, files never
/// named (a subscriber does not map what another run names). `InUse`: a live run
/// publishes this key already.
pub fn publish(key: &str, cfg: ChannelConfig) -> beltway::Result<Egress> {
    let name = share_name(key);
    let tags = Writer::create_named(
        &format!("{name}.tags"),
        RingConfig {
            latency: cfg.latency,
            mode: 0o600,
            detachable: true,
            ..RingConfig::bytes(cfg.slots * Tag::SIZE).layout(Layout::Tags).threshold(cfg.threshold)
        },
    )?;
    let data = Writer::create_named(&format!("{name}.data"), RingConfig { buf_id: 1, mode: 0o600, ..RingConfig::bytes(cfg.data) })?;
    let tags_ref = tags.ring();
    let w = IbufWriter::new(tags)?.with_default(data)?;
    Ok(Egress { w, name, failed: false, announced: Vec::new(), same_process: false, file_refs: false, tags: tags_ref, published: true })
}

/// A live run's published stream under `key`: its process id, if there is one.
pub fn published(key: &str) -> Option<u32> {
    let r = RingRef::open(&format!("{}.tags", share_name(key))).ok()?;
    let (pid, alive) = r.writer();
    alive.then_some(pid)
}

/// Subscribe to the stream published under `key`, from now on (what was published before
/// is not replayed). Untrusted: the publisher names no files for us to map. The stream
/// ends when the publishing run ends.
pub fn subscribe(key: &str) -> beltway::Result<Ingress> {
    let name = share_name(key);
    let tags = RingRef::open(&format!("{name}.tags"))?;
    let data = RingRef::open(&format!("{name}.data"))?;
    let mut i = attach(&name, &tags, &data, false, Start::Latest)?;
    i.subscribed = true;
    Ok(i)
}

/// The consumer's end of a channel, attached to its rings (attach every consumer before
/// the producer starts, so nothing is written before a reader holds its place).
/// `trusted`: the producer may name files for this space to map (not so for a process
/// space feeding its parent: a crashed or hostile one could name any file).
pub fn ingress(name: &str, tags: &RingRef, data: &RingRef, trusted: bool) -> beltway::Result<Ingress> {
    attach(name, tags, data, trusted, Start::Oldest)
}

fn attach(name: &str, tags: &RingRef, data: &RingRef, trusted: bool, start: Start) -> beltway::Result<Ingress> {
    let mut reader = tags.reader(start)?;
    reader.set_manual_release(true);
    // A batch holds at most a quarter of the data ring, so the producer keeps writing
    // while the consumer works on it.
    let max_bytes = (data.shared().max_size() / 4).max(1);
    Ok(Ingress { trusted, max_bytes, r: Some(reader), data: Some(DbufView::new(data)), local: 0, name: name.to_string(), held: false, link_set: false, files: Vec::new(), file_ref: None, subscribed: false })
}

/// What travels with each block: its record metadata (capture time, wire length, and for
/// a block a filter cropped, how many bytes of its record lie before it) and link type,
/// so filters and sinks in the consuming space (protocol parsers, `http` after
/// `tcpstream`, pcapout) see the block exactly as the producer did: placement never
/// changes what a filter observes. A [`META_SIZE`]-byte header written through into the
/// data ring: ahead of the block's bytes (the consumer crops it off the tag), or alone,
/// followed by a tag into a file both spaces map (`FILE_REF`: only the tag crosses), or
/// ahead of a file's path (`ANNOUNCE`, once per file and channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    ts_ns: u64,
    orig_len: u32,
    /// Bytes of the record before the block (0: the block starts the record).
    skip: u32,
    link: u16,
    flags: u16,
}

/// Bytes of a [`Meta`] header.
const META_SIZE: usize = 24;

const RECORD: u16 = 1;
const LINK: u16 = 2;
const FILE_REF: u16 = 4;
const ANNOUNCE: u16 = 8;
/// With ANNOUNCE: the payload is the key of a shared ring of the producer's process.
const SHARED: u16 = 16;
/// Tags that point into a producer's file carry its buffer id with this bit set.
const FILE_BIT: u16 = 0x8000;

impl Meta {
    const NONE: Meta = Meta { ts_ns: 0, orig_len: 0, skip: 0, link: 0, flags: 0 };

    fn of(cx: &Ctx<'_>, t: &Tag) -> Meta {
        match cx.store.record_of(t) {
            Some(r) => {
                let (link, lf) = match cx.store.link(t).and_then(|l| u16::try_from(l).ok()) {
                    Some(l) => (l, LINK),
                    None => (0, 0),
                };
                Meta { ts_ns: r.ts_ns, orig_len: r.orig_len, skip: r.skip, link, flags: RECORD | lf }
            }
            None => Meta::NONE,
        }
    }
    fn to_bytes(self) -> [u8; META_SIZE] {
        let mut b = [0u8; META_SIZE];
        b[..8].copy_from_slice(&self.ts_ns.to_le_bytes());
        b[8..12].copy_from_slice(&self.orig_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.skip.to_le_bytes());
        b[16..18].copy_from_slice(&self.link.to_le_bytes());
        b[18..20].copy_from_slice(&self.flags.to_le_bytes());
        b
    }
    fn from_bytes(b: &[u8]) -> Option<Meta> {
        let b: &[u8; META_SIZE] = b.get(..META_SIZE)?.try_into().ok()?;
        Some(Meta {
            ts_ns: u64::from_le_bytes(b[..8].try_into().ok()?),
            orig_len: u32::from_le_bytes(b[8..12].try_into().ok()?),
            skip: u32::from_le_bytes(b[12..16].try_into().ok()?),
            link: u16::from_le_bytes(b[16..18].try_into().ok()?),
            flags: u16::from_le_bytes(b[18..20].try_into().ok()?),
        })
    }
}

/// The producer's end: a sink that writes each block it receives into the channel.
pub struct Egress {
    w: IbufWriter,
    name: String,
    failed: bool,
    /// Files and shared rings of this space the consumer has been told about.
    announced: Vec<BufId>,
    same_process: bool,
    /// The consumer maps files this space names (it trusts this space).
    file_refs: bool,
    /// The channel's tag ring (what guards on shared rings wait for).
    tags: RingRef,
    /// A published stream ([`publish`]): written only while someone subscribes, and a
    /// failure ends the publishing, not the space.
    published: bool,
}

impl Egress {
    /// A block in one of this space's shared rings, to a consumer in this process.
    fn send_ref(&mut self, cx: &mut Ctx<'_>, t: &Tag) -> beltway::Result<()> {
        let meta = Meta::of(cx, t);
        if let Some(key) = cx.store.shared_key(t.buf).filter(|_| t.buf < FILE_BIT) {
            // The consumer reads this ring in place: only the tag crosses, and the ring
            // keeps the block until the consumer releases the tag.
            if !self.announced.contains(&t.buf) {
                let a = Meta { ts_ns: t.buf as u64, flags: ANNOUNCE | SHARED, ..Meta::NONE };
                self.w.write_through_parts(&[&a.to_bytes(), &key.to_le_bytes()], 1)?;
                self.announced.push(t.buf);
            }
            // A block without record metadata (made by gen, an editor, ...) is its tag alone.
            if meta.flags != 0 {
                self.w.write_through_parts(&[&Meta { flags: meta.flags | FILE_REF, ..meta }.to_bytes()], 1)?;
            }
            let at = self.w.write_tag(Tag { buf: t.buf | FILE_BIT, ..*t })?;
            cx.store.guard(t, &self.tags, at + Tag::SIZE as u64);
        }
        Ok(())
    }

    /// Any other block: by reference into a file both spaces map, or written through.
    fn send(&mut self, cx: &Ctx<'_>, t: &Tag, d: &[u8]) -> beltway::Result<()> {
        let meta = Meta::of(cx, t);
        if let Some(path) = cx.store.file_path(t.buf).filter(|_| t.buf < FILE_BIT && self.file_refs) {
            // Both spaces can map this file: only the tag crosses.
            if !self.announced.contains(&t.buf) {
                let a = Meta { ts_ns: t.buf as u64, flags: ANNOUNCE, ..Meta::NONE };
                self.w.write_through_parts(&[&a.to_bytes(), path.as_os_str().as_encoded_bytes()], 1)?;
                self.announced.push(t.buf);
            }
            self.w.write_through_parts(&[&Meta { flags: meta.flags | FILE_REF, ..meta }.to_bytes()], 1)?;
            self.w.write_tag(Tag { buf: t.buf | FILE_BIT, ..*t })?;
            return Ok(());
        }
        self.w.write_through_parts(&[&meta.to_bytes(), d], t.class).map(|_| ())
    }
}

impl Filter for Egress {
    fn accepts(&self) -> bool {
        !(self.failed || (self.published && self.tags.readers() == 0))
    }
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.failed || (self.published && self.tags.readers() == 0) {
            return;
        }
        for t in &batch.tags {
            if self.same_process && cx.store.shared_key(t.buf).is_some() {
                if let Err(e) = self.send_ref(cx, t) {
                    cx.warn(format!("channel {}: {e}", self.name));
                    self.failed = true;
                    cx.stop();
                    return;
                }
                continue;
            }
            let res = match cx.store.data(t) {
                Ok(d) => self.send(cx, t, d),
                Err(e) => {
                    cx.warn(format!("{}: {e}", self.name));
                    continue;
                }
            };
            if let Err(e) = res {
                // The consumer is gone (its space ended or died): nothing more to deliver.
                // A consumer that left (broken pipe) says why itself (it finished, was
                // stopped or interrupted, or its death is reported): no warning here.
                if !matches!(e, beltway::Error::BrokenPipe { .. }) {
                    cx.warn(format!("channel {}: {e}", self.name));
                }
                self.failed = true;
                if !self.published {
                    cx.stop();
                }
                return;
            }
        }
        // Within a batch the tag ring's moderation wakes a sleeping consumer after
        // `threshold` tags; at the end of the batch whatever is pending is signalled, so the
        // consumer never waits for the latency bound while this space goes on to block
        // elsewhere (e.g. on its own ring's guards).
        self.w.flush();
    }
    fn finish(&mut self, _cx: &mut Ctx<'_>, _out: &mut Batch) {
        self.w.close();
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        // However the space ends (finished, stopped, panicked), the consumer sees EOF.
        self.w.close();
    }
}

/// The consumer's end: a source that hands out the tags arriving through the channel.
pub struct Ingress {
    /// The channel's tag ring; None once the space has finished (see `finish`).
    r: Option<Reader>,
    /// The channel's data ring, until mapped into the store on the first pull.
    data: Option<DbufView>,
    /// Its id in this space's store.
    local: BufId,
    name: String,
    /// Tags of the last batch are read but not yet released.
    held: bool,
    /// Bytes of the data ring one batch may hold.
    max_bytes: u64,
    /// Whether the producer may name files to map.
    trusted: bool,
    link_set: bool,
    /// Producer file id -> local file region, from ANNOUNCE headers.
    files: Vec<(BufId, BufId)>,
    /// The header of a FILE_REF pair, until its tag arrives.
    file_ref: Option<Meta>,
    /// A subscription to another run's published prefix (not a channel of this run).
    subscribed: bool,
}

/// How long a pull waits for the first tag before giving the space's loop a turn (so an
/// interrupt is noticed).
const POLL: Duration = Duration::from_millis(50);

impl Ingress {
    fn release(&mut self) {
        if self.held {
            if let Some(r) = &mut self.r {
                r.release();
            }
            self.held = false;
        }
    }

    /// Next block without blocking, renamed into the local store with its record
    /// metadata restored: `Ok(None)` when none is committed yet.
    fn next(&mut self, cx: &mut Ctx<'_>) -> beltway::Result<Option<Tag>> {
        let corrupt = |pos: u64, why: String| beltway::Error::Corrupt { name: self.name.clone(), pos, why };
        let Some(r) = self.r.as_mut() else { return Ok(None) };
        loop {
            let Some(p) = r.try_peek_acquire(Tag::SIZE)? else { return Ok(None) };
            let t = Tag::from_bytes(p.data);
            r.peek_complete()?;
            let Some(t) = t.filter(|t| t.buf != 0) else { continue };
            if t.buf & FILE_BIT != 0 {
                // A tag into a file this space maps too.
                // No header: a block without record metadata.
                let meta = self.file_ref.take().unwrap_or(Meta::NONE);
                let Some(&(_, local)) = self.files.iter().find(|f| f.0 == t.buf & !FILE_BIT) else {
                    return Err(corrupt(t.pos, format!("a tag into file {} that was never announced", t.buf & !FILE_BIT)));
                };
                let tag = Tag { buf: local, ..t };
                self.restore(cx, &tag, meta);
                return Ok(Some(tag));
            }
            let whole = Tag { buf: self.local, ..t };
            let data = cx.store.data(&whole).map_err(|e| corrupt(t.pos, e.to_string()))?;
            let Some(meta) = Meta::from_bytes(data) else { return Err(corrupt(t.pos, format!("a block without its {META_SIZE}-byte header"))) };
            if meta.flags & ANNOUNCE != 0 && meta.flags & SHARED != 0 {
                let key = data.get(META_SIZE..META_SIZE + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).unwrap_or(0);
                let ring = crate::store::shared_ring(key).ok_or_else(|| corrupt(t.pos, format!("shared ring {key} is not in this process")))?;
                let local = cx.store.map_dbuf(DbufView::new(&ring));
                self.files.push((meta.ts_ns as BufId, local));
                continue;
            }
            if meta.flags & ANNOUNCE != 0 && !self.trusted {
                return Err(corrupt(t.pos, "a process space named a file to map; refused".into()));
            }
            if meta.flags & ANNOUNCE != 0 {
                let path = std::path::PathBuf::from(String::from_utf8_lossy(&data[META_SIZE..]).into_owned());
                let (local, _) = cx.store.add_file(&path).map_err(|e| corrupt(t.pos, format!("cannot map {}: {e}", path.display())))?;
                self.files.push((meta.ts_ns as BufId, local));
                continue;
            }
            if meta.flags & FILE_REF != 0 {
                self.file_ref = Some(meta);
                continue;
            }
            let local = Tag { pos: t.pos + META_SIZE as u64, len: t.len - META_SIZE as u32, ..whole };
            self.restore(cx, &local, meta);
            return Ok(Some(local));
        }
    }

    /// Record metadata and link type of a block, as the producer had them.
    fn restore(&mut self, cx: &mut Ctx<'_>, t: &Tag, meta: Meta) {
        if meta.flags & RECORD != 0 {
            cx.store.add_record(t.buf, crate::store::RecordMeta { pos: t.pos, len: t.len, skip: meta.skip, ts_ns: meta.ts_ns, orig_len: meta.orig_len });
            if meta.flags & LINK != 0 && (t.buf != self.local || !self.link_set) {
                cx.store.set_link(t.buf, meta.link as u32);
                self.link_set |= t.buf == self.local;
            }
        }
    }
}

impl Filter for Ingress {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}

    fn drains(&self) -> bool {
        // A subscription to another run's published stream does not end when this run is
        // interrupted: nothing to drain there.
        !self.subscribed
    }

    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if let Some(v) = self.data.take() {
            self.local = cx.store.map_dbuf(v);
        }
        // The previous batch has walked the whole space: its blocks may be reused.
        self.release();
        let name = self.name.clone();
        let fail = |cx: &mut Ctx<'_>, e: beltway::Error| {
            cx.warn(format!("channel {name}: {e}"));
            false
        };
        let mut bytes = 0u64;
        while out.len() < max && bytes < self.max_bytes {
            match self.next(cx) {
                Ok(Some(t)) => {
                    self.held = true;
                    bytes += t.len as u64 + META_SIZE as u64;
                    out.push(t);
                }
                Ok(None) if !out.is_empty() => break,
                Ok(None) => match self.r.as_mut().map_or(Ok(beltway::Ready::Eof), |r| r.block(Some(POLL))) {
                    Ok(beltway::Ready::Data) => {}
                    Ok(beltway::Ready::TimedOut) => return true,
                    Ok(beltway::Ready::Eof) => {
                        // Drain what was committed before the close.
                        match self.next(cx) {
                            Ok(Some(t)) => {
                                self.held = true;
                                out.push(t);
                            }
                            Ok(None) => return false,
                            Err(e) => return fail(cx, e),
                        }
                    }
                    Err(e) => return fail(cx, e),
                },
                Err(e) => return fail(cx, e),
            }
        }
        true
    }

    fn epoch_end(&mut self) {
        self.release();
    }

    /// The space is done (its inputs ended, or it was interrupted or stopped): leave the
    /// channel, so a producer blocked on a full ring is released (it sees a broken pipe and
    /// stops) instead of waiting for a consumer that will read no more.
    fn finish(&mut self, _cx: &mut Ctx<'_>, _out: &mut Batch) {
        self.release();
        self.r = None;
    }
}

impl Drop for Ingress {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn cx_run<R>(store: &mut Store, f: impl FnOnce(&mut Ctx<'_>) -> R) -> R {
        let (mut sessions, mut warnings, mut stop) = (None, Vec::new(), false);
        let mut cx = Ctx { store, name: "test", sessions: &mut sessions, warnings: &mut warnings, stop: &mut stop };
        let r = f(&mut cx);
        assert!(warnings.is_empty(), "{warnings:?}");
        r
    }

    #[test]
    fn blocks_cross_between_threads_with_classes_and_bytes_intact() {
        let (mut tx, mut rx) = channel("t-chan", ChannelConfig { data: 1 << 16, slots: 256, ..Default::default() }).unwrap();
        let n = 5000u32;
        let producer = std::thread::spawn(move || {
            let mut st = Store::new(1 << 20);
            let mut b = Batch::default();
            for i in 0..n {
                let data: Vec<u8> = (0..(i % 700) + 1).map(|k| (k ^ i) as u8).collect();
                let t = st.push(&data);
                b.push(Tag { class: (i % 7 + 1) as u16, ..t });
                if b.len() == 100 {
                    cx_run(&mut st, |cx| tx.process(cx, &mut b));
                    b.clear();
                }
            }
            cx_run(&mut st, |cx| tx.process(cx, &mut b));
            cx_run(&mut st, |cx| tx.finish(cx, &mut Batch::default()));
        });
        let mut st = Store::new(1 << 16);
        let mut i = 0u32;
        loop {
            let mut b = Batch::default();
            let more = cx_run(&mut st, |cx| rx.pull(cx, &mut b, 256));
            for t in &b.tags {
                let want: Vec<u8> = (0..(i % 700) + 1).map(|k| (k ^ i) as u8).collect();
                assert_eq!(st.data(t).unwrap(), &want[..], "block {i}");
                assert_eq!(t.class, (i % 7 + 1) as u16);
                i += 1;
            }
            rx.epoch_end();
            if !more {
                break;
            }
        }
        producer.join().unwrap();
        // The data ring (64 KiB) is far smaller than what crossed (~1.7 MB): space was
        // reused only after release, or a block above would have been wrong.
        assert_eq!(i, n);
    }

    /// Hostile producer: random headers, bare tags, tags into unknown files, announces of
    /// garbage. The consumer reports errors as warnings and never panics, hangs or reads
    /// outside its buffers.
    mod hostile {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Msg {
            Through(Vec<u8>, u16),
            Tag(u64, u32, u16, u16),
        }

        fn msg() -> impl Strategy<Value = Msg> {
            prop_oneof![
                (proptest::collection::vec(any::<u8>(), 0..64), any::<u16>()).prop_map(|(b, c)| Msg::Through(b, c)),
                (0u64..1 << 20, any::<u32>(), any::<u16>(), any::<u16>()).prop_map(|(p, l, b, c)| Msg::Tag(p, l, b, c)),
                // Well-formed headers with random flags, followed by data.
                (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..32)).prop_map(|(f, d)| {
                    let mut b = Meta { ts_ns: 1, orig_len: 2, skip: 0, link: 1, flags: f }.to_bytes().to_vec();
                    b.extend(d);
                    Msg::Through(b, 1)
                }),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
            #[test]
            fn garbage_in_a_channel_is_an_error_not_a_crash(msgs in proptest::collection::vec(msg(), 0..40), trusted in any::<bool>()) {
                let (mut tx, tags, data) = egress("t-hostile", ChannelConfig { data: 1 << 16, slots: 256, ..Default::default() }, false).unwrap();
                let mut rx = ingress("t-hostile", &tags, &data, trusted).unwrap();
                for m in &msgs {
                    match m {
                        Msg::Through(b, c) => { tx.w.write_through_parts(&[b], *c).unwrap(); }
                        Msg::Tag(p, l, b, c) => { tx.w.write_tag(Tag { pos: *p, len: *l, buf: *b, class: *c }).unwrap(); }
                    }
                }
                tx.w.close();
                let mut st = Store::new(1 << 16);
                let (mut sessions, mut warnings, mut stop) = (None, Vec::new(), false);
                for _ in 0..100 {
                    let mut b = Batch::default();
                    let more = {
                        let mut cx = Ctx { store: &mut st, name: "t", sessions: &mut sessions, warnings: &mut warnings, stop: &mut stop };
                        rx.pull(&mut cx, &mut b, 256)
                    };
                    // Whatever came out resolves, or fails cleanly.
                    for t in &b.tags {
                        let _ = st.data(t);
                    }
                    rx.epoch_end();
                    if !more {
                        break;
                    }
                }
            }
        }
    }
}
