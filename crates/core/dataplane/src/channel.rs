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
//! A stream published to other runs ([`publish`], [`subscribe`]) is the exception: lossy
//! (thesis 4.5.4, FRP). The publisher never waits for a subscriber; each subscriber has
//! its own reader slot and position in the tag ring, copies every block out of the data
//! ring and then checks that it was not overwritten meanwhile, so one that falls behind
//! loses whole blocks (counted in its summary), never reads corrupt ones, and holds back
//! neither the publisher nor the other subscribers.
//!
//! Owns: channel creation and the two endpoint filters. Does not own placement.

use crate::filter::{Batch, Ctx, Filter};
use crate::store::BufId;
use beltway::{
    DbufView, IbufWriter, Layout, Reader, RingConfig, RingRef, Start, SyncMode, Tag, Writer,
};
use std::time::{Duration, Instant};

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
        ChannelConfig {
            threshold: 32,
            latency: Duration::from_millis(1),
            slots: 4096,
            data: 16 << 20,
        }
    }
}

impl ChannelConfig {
    /// `@latency`: small batches (wake for every block), short bound.
    pub fn latency() -> Self {
        ChannelConfig {
            threshold: 1,
            latency: Duration::from_micros(50),
            ..Self::default()
        }
    }
    /// `@throughput`: large batches.
    pub fn throughput() -> Self {
        ChannelConfig {
            threshold: 256,
            latency: Duration::from_millis(5),
            ..Self::default()
        }
    }
    /// `@lockstep` (seed 003, Model-T): the two spaces run as an assembly line. The queue
    /// holds [`LOCKSTEP_BATCHES`] of the runtime's batches, so the producer works on batch
    /// i while the consumer works on batch i-1 and is never further ahead: what both touch
    /// stays in the caches (a few batches of headers, not the 4096 blocks a free-running
    /// channel lets the producer run ahead). A wake-up per batch at most; the consumer
    /// polls rather than sleeps (the line's stations stay staffed).
    pub fn lockstep() -> Self {
        let batch = crate::runtime::BATCH;
        ChannelConfig {
            threshold: batch as u32,
            slots: LOCKSTEP_BATCHES * batch,
            ..Self::default()
        }
    }
}

/// Batches a `@lockstep` channel holds (see [`ChannelConfig::lockstep`]).
pub const LOCKSTEP_BATCHES: usize = 4;

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
pub fn egress(
    name: &str,
    cfg: ChannelConfig,
    same_process: bool,
) -> beltway::Result<(Egress, RingRef, RingRef)> {
    egress_to(name, cfg, same_process, false)
}

/// [`egress`] with the direction known: `to_parent` for a process space's channels.
pub fn egress_to(
    name: &str,
    cfg: ChannelConfig,
    same_process: bool,
    to_parent: bool,
) -> beltway::Result<(Egress, RingRef, RingRef)> {
    let tags = Writer::create(
        &format!("{name}.tags"),
        RingConfig {
            latency: cfg.latency,
            ..RingConfig::bytes(cfg.slots * Tag::SIZE)
                .layout(Layout::Tags)
                .threshold(cfg.threshold)
                // The consumer's space sleeps on it (`Ingress::arm`).
                .wake_fd(true)
        },
    )?;
    let data = Writer::create(
        &format!("{name}.data"),
        RingConfig {
            buf_id: 1,
            ..RingConfig::bytes(cfg.data)
        },
    )?;
    let (tags_ref, data_ref) = (tags.ring(), data.ring());
    let writer = IbufWriter::new(tags)?.with_default(data)?;
    Ok((
        Egress {
            w: writer,
            name: name.to_string(),
            failed: false,
            announced: Vec::new(),
            same_process,
            file_refs: !to_parent,
            tags: tags_ref.clone(),
            published: false,
            reaped: Instant::now(),
            guards: Vec::new(),
            run: Vec::new(),
            metas: Vec::new(),
            metas_any: false,
        },
        tags_ref,
        data_ref,
    ))
}

/// Name under /dev/shm of the stream this process publishes under `key` (`.tags` and
/// `.data`): see [`share_name_of`].
pub fn share_name(key: &str) -> String {
    share_name_of(beltway::sys::fsuid(), key)
}

/// Name under /dev/shm of the stream uid `uid` publishes under `key`. The uid in the name
/// keeps users' streams of the same prefix apart; it proves nothing (anyone may create any
/// name), so a subscriber also checks who owns the files (see [`subscribe`]).
pub fn share_name_of(uid: u32, key: &str) -> String {
    format!("streamline.share.{uid}.{key}")
}

/// Whose published streams this process may subscribe to, in the order they are looked
/// for: its own user's (the identity it opens files with), then root's.
fn publishers() -> Vec<u32> {
    match beltway::sys::fsuid() {
        0 => vec![0],
        me => vec![me, 0],
    }
}

/// Prefix sharing across runs (thesis 6.4): offer this arc's stream under `key` to other
/// runs of the same user (and to root's). Two named rings, mode 0600, owned by this
/// process's user and named by it ([`share_name`]): a tag ring with fast reader preference
/// (thesis 4.5.4, FRP: subscribers come and go, each with its own reader slot; the
/// publisher never waits for one, and with none attached this costs one check per batch)
/// and a data ring every block is written through to, one tag per block, files never named
/// (a subscriber does not map what another run names). Both rings are overwritten at the
/// publisher's pace; a subscriber that falls behind loses blocks (see [`subscribe`]).
/// `InUse`: a live run publishes this key already. `Permission`: a file under one of the
/// names belongs to another user (a name taken by someone else is never used or removed).
pub fn publish(key: &str, cfg: ChannelConfig) -> beltway::Result<Egress> {
    let name = share_name(key);
    let me = beltway::sys::fsuid();
    for seg in [".tags", ".tags.ctl", ".data", ".data.ctl"] {
        let path = format!("/dev/shm/{name}{seg}");
        if let Ok(m) = std::fs::symlink_metadata(&path) {
            use std::os::unix::fs::MetadataExt;
            if m.uid() != me {
                return Err(beltway::Error::Permission {
                    name: name.clone(),
                    what: format!(
                        "{path} exists and belongs to uid {}, not to uid {me}",
                        m.uid()
                    ),
                });
            }
        }
    }
    let tags = Writer::create_named(
        &format!("{name}.tags"),
        RingConfig {
            latency: cfg.latency,
            mode: 0o600,
            ..RingConfig::bytes(cfg.slots * Tag::SIZE)
                .layout(Layout::Tags)
                .sync(SyncMode::Frp)
                .threshold(cfg.threshold)
        },
    )?;
    // Lossless towards its only reader, the writer's own shadow, which the lossy tag ring
    // never holds back: the data ring too is reused without waiting for subscribers.
    let data = Writer::create_named(
        &format!("{name}.data"),
        RingConfig {
            buf_id: 1,
            mode: 0o600,
            ..RingConfig::bytes(cfg.data)
        },
    )?;
    let tags_ref = tags.ring();
    let mut w = IbufWriter::new(tags)?.with_default(data)?;
    w.set_deferred(true);
    Ok(Egress {
        w,
        name,
        failed: false,
        announced: Vec::new(),
        same_process: false,
        file_refs: false,
        tags: tags_ref,
        published: true,
        reaped: Instant::now(),
        guards: Vec::new(),
        run: Vec::new(),
        metas: Vec::new(),
        metas_any: false,
    })
}

/// The rings of the stream a live run publishes under `key` that this process may read:
/// published by its own user or by root ([`publishers`]), every file of them owned by that
/// user (not only named for it), and opened with this process's rights (the kernel checks
/// it may read them). The tag ring's control segment is mapped writable with `register`
/// (a subscriber's reader slot), the rest read-only.
fn find_published(key: &str, register: bool) -> beltway::Result<(String, RingRef, RingRef)> {
    let mut last = None;
    for uid in publishers() {
        let name = share_name_of(uid, key);
        let found = RingRef::open_owned(&format!("{name}.tags"), uid, register).and_then(|t| {
            let d = RingRef::open_owned(&format!("{name}.data"), uid, false)?;
            Ok((t, d))
        });
        match found {
            Ok((t, d)) if t.writer().1 => return Ok((name, t, d)),
            Ok((t, _)) => {
                last = Some(beltway::Error::Closed {
                    name: t.shared().name().to_string(),
                })
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| beltway::Error::BadRing {
        name: share_name(key),
        why: "nobody publishes it".into(),
    }))
}

/// A live run's published stream under `key` this process may subscribe to (see
/// [`subscribe`]): its process id, if there is one.
pub fn published(key: &str) -> Option<u32> {
    find_published(key, false)
        .ok()
        .map(|(_, t, _)| t.writer().0)
}

/// Subscribe to the stream published under `key`, from now on (what was published before
/// is not replayed): this user's, else root's, and only if every file of it belongs to
/// that user (a name under /dev/shm can be taken by anyone). Untrusted all the same: the
/// publisher names no files for us to map, and its rings are mapped read-only but for the
/// tag ring's control segment, where the subscriber's reader slot lives (the publisher
/// counts its readers there to know whether anyone reads, and finds dead ones; it never
/// waits for one). The stream ends when the publishing run ends.
///
/// Lossy: the publisher overwrites its rings at its own pace. Each block is copied into a
/// ring of the subscribing space and used only if the publisher's data ring still held it
/// after the copy; a subscriber that fell behind skips what was overwritten, tags and data
/// alike, and counts those blocks as lost (its summary line says how many).
pub fn subscribe(key: &str) -> beltway::Result<Ingress> {
    let (name, tags, data) = find_published(key, true)?;
    if tags.shared().layout() != Layout::Tags || data.shared().layout() != Layout::Bytes {
        return Err(beltway::Error::BadRing {
            name,
            why: "not a published stream (a tag ring and a byte ring)".into(),
        });
    }
    let reader = tags.reader(Start::Latest)?;
    let view = DbufView::new(&data);
    // The subscriber's ring is as large as the publisher's; a batch holds at most a
    // quarter of it, and a block at most a quarter, so a batch never laps it.
    let size = data.shared().max_size();
    let sub = Subscription {
        view,
        size,
        ring: None,
        received: 0,
        lost: 0,
        lost_bytes: 0,
    };
    Ok(Ingress {
        trusted: false,
        max_bytes: (size / 4).max(1),
        r: Some(reader),
        data: None,
        local: 0,
        name,
        held: false,
        link_set: false,
        files: Vec::new(),
        metas: Default::default(),
        sub: Some(sub),
        busy: false,
        marker: None,
        wait: IngressWait::default(),
    })
}

/// The consumer's end of a channel, attached to its rings (attach every consumer before
/// the producer starts, so nothing is written before a reader holds its place).
/// `trusted`: the producer may name files for this space to map (not so for a process
/// space feeding its parent: a crashed or hostile one could name any file).
pub fn ingress(
    name: &str,
    tags: &RingRef,
    data: &RingRef,
    trusted: bool,
) -> beltway::Result<Ingress> {
    attach(name, tags, data, trusted, Start::Oldest)
}

fn attach(
    name: &str,
    tags: &RingRef,
    data: &RingRef,
    trusted: bool,
    start: Start,
) -> beltway::Result<Ingress> {
    let mut reader = tags.reader(start)?;
    reader.set_manual_release(true);
    // A batch holds at most a quarter of the data ring, so the producer keeps writing
    // while the consumer works on it.
    let max_bytes = (data.shared().max_size() / 4).max(1);
    Ok(Ingress {
        trusted,
        max_bytes,
        r: Some(reader),
        data: Some(DbufView::new(data)),
        local: 0,
        name: name.to_string(),
        held: false,
        link_set: false,
        files: Vec::new(),
        metas: Default::default(),
        sub: None,
        busy: false,
        marker: None,
        wait: IngressWait::default(),
    })
}

/// What travels with each block: its record metadata (capture time, wire length, and for
/// a block a filter cropped, how many bytes of its record lie before it) and link type,
/// so filters and sinks in the consuming space (protocol parsers, `http` after
/// `tcpstream`, pcapout) see the block exactly as the producer did: placement never
/// changes what a filter observes. A [`META_SIZE`]-byte header written through into the
/// data ring: ahead of the block's bytes (the consumer crops it off the tag); or, for the
/// blocks that cross as tags only (into a file or shared ring both spaces map), one per
/// block in a `METAS` block that precedes the run of their tags (one write per batch, not
/// one per block; a run without any metadata has none); or ahead of a file's path or a
/// shared ring's key (`ANNOUNCE`, once per buffer and channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    ts_ns: u64,
    orig_len: u32,
    /// Bytes of the record before the block (0: the block starts the record).
    skip: u32,
    link: u16,
    flags: u16,
    /// With [`CAPTURE`]: the capture header's snap length (its byte order and time
    /// precision are flags).
    snaplen: u32,
}

/// Bytes of a [`Meta`] header.
pub(crate) const META_SIZE: usize = 24;

const RECORD: u16 = 1;
const LINK: u16 = 2;
/// A block of [`Meta`]s, `orig_len` of them, for the run of tags that follows it.
const METAS: u16 = 4;
const ANNOUNCE: u16 = 8;
/// With ANNOUNCE: the payload is the key of a shared ring of the producer's process.
const SHARED: u16 = 16;
/// A marker (`ts_ns` its number): a filter moves across the channel here (see
/// [`ChannelEnd`]); only from a space of this process.
const MARK: u16 = 32;
/// With LINK: the frames came with a capture file header ([`crate::CaptureHeader`]):
/// `snaplen` and these two flags.
const CAPTURE: u16 = 64;
const CAPTURE_BIG_ENDIAN: u16 = 128;
const CAPTURE_NANOS: u16 = 256;
/// Tags that point into a producer's file carry its buffer id with this bit set.
const FILE_BIT: u16 = 0x8000;

impl Meta {
    const NONE: Meta = Meta {
        ts_ns: 0,
        orig_len: 0,
        skip: 0,
        link: 0,
        flags: 0,
        snaplen: 0,
    };

    pub(crate) fn of(cx: &Ctx<'_>, t: &Tag) -> Meta {
        match cx.store.record_of(t) {
            Some(r) => {
                let (link, mut lf) = match cx.store.link(t).and_then(|l| u16::try_from(l).ok()) {
                    Some(l) => (l, LINK),
                    None => (0, 0),
                };
                let mut snaplen = 0;
                if let Some(h) = cx.store.capture(t).filter(|_| lf != 0) {
                    snaplen = h.snaplen;
                    lf |= CAPTURE
                        | if h.big_endian { CAPTURE_BIG_ENDIAN } else { 0 }
                        | if h.nanos { CAPTURE_NANOS } else { 0 };
                }
                Meta {
                    ts_ns: r.ts_ns,
                    orig_len: r.orig_len,
                    skip: r.skip,
                    link,
                    flags: RECORD | lf,
                    snaplen,
                }
            }
            None => Meta::NONE,
        }
    }
    pub(crate) fn to_bytes(self) -> [u8; META_SIZE] {
        let mut b = [0u8; META_SIZE];
        b[..8].copy_from_slice(&self.ts_ns.to_le_bytes());
        b[8..12].copy_from_slice(&self.orig_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.skip.to_le_bytes());
        b[16..18].copy_from_slice(&self.link.to_le_bytes());
        b[18..20].copy_from_slice(&self.flags.to_le_bytes());
        b[20..24].copy_from_slice(&self.snaplen.to_le_bytes());
        b
    }
    pub(crate) fn from_bytes(b: &[u8]) -> Option<Meta> {
        let b: &[u8; META_SIZE] = b.get(..META_SIZE)?.try_into().ok()?;
        Some(Meta {
            ts_ns: u64::from_le_bytes(b[..8].try_into().ok()?),
            orig_len: u32::from_le_bytes(b[8..12].try_into().ok()?),
            skip: u32::from_le_bytes(b[12..16].try_into().ok()?),
            link: u16::from_le_bytes(b[16..18].try_into().ok()?),
            flags: u16::from_le_bytes(b[18..20].try_into().ok()?),
            snaplen: u32::from_le_bytes(b[20..24].try_into().ok()?),
        })
    }

    /// Declare the link type (and capture header) this header carries for buffer `buf`.
    fn set_link(self, store: &mut crate::Store, buf: BufId) {
        store.set_link(buf, self.link as u32);
        if self.flags & CAPTURE != 0 {
            store.set_capture(
                buf,
                crate::CaptureHeader {
                    big_endian: self.flags & CAPTURE_BIG_ENDIAN != 0,
                    nanos: self.flags & CAPTURE_NANOS != 0,
                    snaplen: self.snaplen,
                },
            );
        }
    }
}

impl Meta {
    /// Give block `t` (in `store`) the record metadata this header carries; its link
    /// type too, unless `link` says the buffer has it already. Returns whether a link
    /// type was set.
    pub(crate) fn restore(self, store: &mut crate::Store, t: &Tag, link: bool) -> bool {
        if self.flags & RECORD == 0 {
            return false;
        }
        store.add_record(
            t.buf,
            crate::store::RecordMeta {
                pos: t.pos,
                len: t.len,
                skip: self.skip,
                ts_ns: self.ts_ns,
                orig_len: self.orig_len,
            },
        );
        if self.flags & LINK != 0 && !link {
            self.set_link(store, t.buf);
            return true;
        }
        false
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
    /// When the published stream's dead subscribers were last looked for.
    reaped: Instant,
    /// Shared rings this batch sent blocks of, each with the start of its earliest block
    /// and the end of its latest: one guard per ring and batch (see [`Egress::end_batch`]).
    guards: Vec<(BufId, u64, u64)>,
    /// Tags (their bytes) of blocks sent by reference not yet written, and their
    /// metadata (see [`Egress::send_ref`]); whether any of those has some.
    run: Vec<u8>,
    metas: Vec<u8>,
    metas_any: bool,
}

/// How often a publisher frees the reader slots of subscribers that died (a killed
/// subscriber does not detach, and the publisher never waits for it, so never notices).
const REAP: Duration = Duration::from_secs(1);

impl Egress {
    /// Whether anyone reads this channel: always for a channel of this run; for a
    /// published stream, whether a live subscriber is attached.
    fn wanted(&mut self) -> bool {
        if !self.published {
            return true;
        }
        if self.tags.readers() == 0 {
            return false;
        }
        if self.reaped.elapsed() >= REAP {
            self.reaped = Instant::now();
            return self.tags.reap() > 0;
        }
        true
    }

    /// A block both spaces map (`r`: a shared ring of this process, or a file): only its
    /// tag crosses, queued in `self.run` with its record metadata in `self.metas`, and the
    /// run is written at once ([`Egress::write_run`]). An announcement of the buffer goes
    /// first, once. `first`: the first block of this buffer in a row (only then is the
    /// announcement looked for); `records`: whether the buffer has record metadata at all.
    fn send_ref(
        &mut self,
        cx: &mut Ctx<'_>,
        t: &Tag,
        r: &Ref,
        first: bool,
        records: bool,
    ) -> beltway::Result<()> {
        if first && !self.announced.contains(&t.buf) {
            self.write_run()?;
            let flags = if matches!(r, Ref::Shared(_)) {
                ANNOUNCE | SHARED
            } else {
                ANNOUNCE
            };
            let a = Meta {
                ts_ns: t.buf as u64,
                flags,
                ..Meta::NONE
            };
            match r {
                Ref::Shared(key) => self
                    .w
                    .write_through_parts(&[&a.to_bytes(), &key.to_le_bytes()], 1)?,
                Ref::File(path) => self.w.write_through_parts(
                    &[&a.to_bytes(), path.as_os_str().as_encoded_bytes()],
                    1,
                )?,
                Ref::Copy => unreachable!("blocks that are copied are not sent by reference"),
            };
            self.announced.push(t.buf);
        }
        // A block without record metadata (made by gen, an editor, ...) is its tag alone.
        let meta = if records { Meta::of(cx, t) } else { Meta::NONE };
        self.queue(t, meta);
        if matches!(r, Ref::Shared(_)) {
            // The consumer reads this ring in place, and the ring keeps the block until the
            // consumer releases the tag (one guard per ring and batch, see `end_batch`).
            match self.guards.iter_mut().find(|g| g.0 == t.buf) {
                Some(g) => widen(g, t),
                None => self.guards.push((t.buf, t.pos, t.pos + t.len as u64)),
            }
        }
        Ok(())
    }

    /// Queue a block's tag in the run, and its metadata if the run carries any.
    #[inline(always)]
    fn queue(&mut self, t: &Tag, meta: Meta) {
        if meta.flags != 0 && !self.metas_any {
            // The first block of the run with metadata: the ones before it had none (a
            // run without any carries no METAS block at all).
            self.metas_any = true;
            self.metas.resize(self.run.len() / Tag::SIZE * META_SIZE, 0);
        }
        if self.metas_any {
            self.metas.extend_from_slice(&meta.to_bytes());
        }
        self.run.extend_from_slice(
            &Tag {
                buf: t.buf | FILE_BIT,
                ..*t
            }
            .to_bytes(),
        );
    }

    /// [`Egress::queue`] and [`widen`] for the stretch of blocks at the start of `s` that
    /// lie in one shared ring without metadata (guard entry `g`): their tags written into
    /// the run in one pass. Returns how many there were (at least one).
    fn queue_stretch(&mut self, s: &[Tag], g: usize) -> usize {
        let buf = s[0].buf;
        if self.metas_any {
            let mut n = 0;
            for t in s.iter().take_while(|t| t.buf == buf) {
                self.queue(t, Meta::NONE);
                widen(&mut self.guards[g], t);
                n += 1;
            }
            return n;
        }
        let at = self.run.len();
        self.run.resize(at + s.len() * Tag::SIZE, 0);
        let (mut lo, mut hi) = (self.guards[g].1, self.guards[g].2);
        let mut n = 0;
        for (b, t) in self.run[at..].chunks_exact_mut(Tag::SIZE).zip(s) {
            if t.buf != buf {
                break;
            }
            b.copy_from_slice(
                &Tag {
                    buf: t.buf | FILE_BIT,
                    ..*t
                }
                .to_bytes(),
            );
            lo = lo.min(t.pos);
            hi = hi.max(t.pos + t.len as u64);
            n += 1;
        }
        self.run.truncate(at + n * Tag::SIZE);
        (self.guards[g].1, self.guards[g].2) = (lo, hi);
        n
    }

    /// Write the queued run of [`Egress::send_ref`]: its blocks' metadata as one block
    /// (if any has some), then the tags.
    fn write_run(&mut self) -> beltway::Result<()> {
        if self.run.is_empty() {
            return Ok(());
        }
        if self.metas_any {
            let n = (self.run.len() / Tag::SIZE) as u32;
            let h = Meta {
                orig_len: n,
                flags: METAS,
                ..Meta::NONE
            };
            self.w
                .write_through_parts(&[&h.to_bytes(), &self.metas], 1)?;
        }
        self.w.write_tag_run(&self.run)?;
        self.run.clear();
        self.metas.clear();
        self.metas_any = false;
        Ok(())
    }

    /// How the blocks of buffer `buf` cross: by reference into a shared ring or a file
    /// both spaces map, or copied.
    fn how(&self, cx: &Ctx<'_>, buf: BufId) -> Ref {
        if buf >= FILE_BIT {
            return Ref::Copy;
        }
        if self.same_process {
            if let Some(key) = cx.store.shared_key(buf) {
                return Ref::Shared(key);
            }
        }
        match cx.store.file_path(buf).filter(|_| self.file_refs) {
            Some(p) => Ref::File(p.to_path_buf()),
            None => Ref::Copy,
        }
    }

    /// A block that is copied: written through into the channel's data ring behind its
    /// header.
    fn send(&mut self, cx: &Ctx<'_>, t: &Tag, d: &[u8]) -> beltway::Result<()> {
        let meta = Meta::of(cx, t);
        self.w
            .write_through_parts(&[&meta.to_bytes(), d], t.class)
            .map(|_| ())
    }
}

/// Widen a batch's guard span `(buf, start, end)` to cover block `t`.
#[inline(always)]
fn widen(span: &mut (BufId, u64, u64), t: &Tag) {
    (span.1, span.2) = (span.1.min(t.pos), span.2.max(t.pos + t.len as u64));
}

/// How a buffer's blocks cross a channel (see [`Egress::how`]).
enum Ref {
    /// A shared ring of this process, by its key: the consumer maps it too.
    Shared(u64),
    /// A file both spaces map.
    File(std::path::PathBuf),
    /// Written through into the channel's data ring.
    Copy,
}

impl Egress {
    /// The end of a batch: one guard per shared ring for all of the batch's blocks in it
    /// (from its earliest block, until the consumer has released the batch's last tag:
    /// the ring reuses none of that space before), then one commit that makes the whole
    /// batch visible. The commit wakes a sleeping consumer only as the moderation says
    /// (after `threshold` tags since the last wake-up); otherwise the consumer's own
    /// latency bound brings it back (thesis 5.2.2: signals batched by the sender, handled
    /// lazily by the receiver, within the latency bound).
    fn end_batch(&mut self, cx: &mut Ctx<'_>) {
        if let Err(e) = self.write_run() {
            if !self.failed && !matches!(e, beltway::Error::BrokenPipe { .. }) {
                cx.warn(format!("channel {}: {e}", self.name));
            }
            self.failed = true;
            self.run.clear();
            self.metas.clear();
            if !self.published {
                cx.stop();
            }
        }
        if !self.guards.is_empty() {
            let end = self.w.tags().position();
            for (buf, start, stop) in self.guards.drain(..) {
                cx.store.guard_range(buf, start, stop, &self.tags, end);
            }
        }
        self.w.commit();
    }
}

/// The markers of `crate::migrate`, on a channel between two spaces of this process: the
/// producer writes one after every block sent so far; the consumer delivers the blocks
/// before it and then nothing until its space has done what the marker asks.
pub trait ChannelEnd {
    /// Producer: write marker `id` behind every block sent so far, and wake the consumer.
    fn mark(&mut self, id: u64) -> beltway::Result<()>;
    /// Consumer: the marker it stopped at, if any.
    fn marker(&self) -> Option<u64>;
    /// Consumer: go on past the marker.
    fn resume(&mut self);
    /// Producer: whether the consumer has left the channel (its space ended).
    fn consumer_gone(&self) -> bool;
}

impl ChannelEnd for Egress {
    fn mark(&mut self, id: u64) -> beltway::Result<()> {
        self.write_run()?;
        let m = Meta {
            ts_ns: id,
            flags: MARK,
            ..Meta::NONE
        };
        self.w.write_through_parts(&[&m.to_bytes()], 1)?;
        self.w.flush();
        Ok(())
    }
    fn marker(&self) -> Option<u64> {
        None
    }
    fn resume(&mut self) {}
    fn consumer_gone(&self) -> bool {
        self.failed || self.tags.readers() == 0
    }
}

impl ChannelEnd for Ingress {
    fn mark(&mut self, _id: u64) -> beltway::Result<()> {
        Err(beltway::Error::Corrupt {
            name: self.name.clone(),
            pos: 0,
            why: "a marker is written by the producer".into(),
        })
    }
    fn marker(&self) -> Option<u64> {
        self.marker
    }
    fn resume(&mut self) {
        self.marker = None;
    }
    fn consumer_gone(&self) -> bool {
        false
    }
}

impl Filter for Egress {
    fn as_channel_end(&mut self) -> Option<&mut dyn ChannelEnd> {
        (!self.published).then_some(self as &mut dyn ChannelEnd)
    }
    fn accepts(&self) -> bool {
        !(self.failed || (self.published && self.tags.readers() == 0))
    }
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.failed || !self.wanted() {
            return;
        }
        // How the last buffer seen crosses (a batch's blocks mostly share one).
        let mut last: Option<(BufId, Ref, bool)> = None;
        // The guard entry of the last buffer, if it is a shared ring without metadata: its
        // blocks then only queue their tags and widen the guard (no metadata to look up).
        let mut plain: Option<(BufId, usize)> = None;
        let mut tags = batch.tags.iter().enumerate();
        while let Some((i, t)) = tags.next() {
            if let Some((_, g)) = plain.filter(|p| p.0 == t.buf) {
                // The stretch from here: queued in one pass, then stepped over.
                let n = self.queue_stretch(&batch.tags[i..], g);
                if n > 1 {
                    tags.nth(n - 2);
                }
                continue;
            }
            plain = None;
            let first = !matches!(&last, Some((b, _, _)) if *b == t.buf);
            if first {
                last = Some((t.buf, self.how(cx, t.buf), cx.store.has_records(t.buf)));
            }
            let Some((_, r, records)) = &last else {
                unreachable!("set above")
            };
            let res = match r {
                Ref::Copy => self.write_run(),
                r => self.send_ref(cx, t, r, first, *records),
            };
            if let Err(e) = res {
                cx.warn(format!("channel {}: {e}", self.name));
                self.failed = true;
                self.end_batch(cx);
                cx.stop();
                return;
            }
            if let (Ref::Shared(_), false) = (r, *records) {
                plain = self
                    .guards
                    .iter()
                    .position(|g| g.0 == t.buf)
                    .map(|g| (t.buf, g));
            }
            if !matches!(r, Ref::Copy) {
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
                self.end_batch(cx);
                if !self.published {
                    cx.stop();
                }
                return;
            }
        }
        self.end_batch(cx);
    }
    fn finish(&mut self, _cx: &mut Ctx<'_>, _out: &mut Batch) {
        self.w.close();
    }
    /// The space found nothing more to send: a consumer asleep within its latency bound
    /// (whose wake-up the ring's moderation held back for a batch) is woken now, not at its
    /// deadline. Blocks sent back to back still share a wake-up: this runs only once the
    /// sources ran dry.
    fn idle(&mut self) {
        if !self.failed {
            self.w.flush();
        }
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
    /// Metadata of the blocks of a run sent by reference, from its METAS block, for its
    /// tags in order.
    metas: std::collections::VecDeque<Meta>,
    /// A subscription to another run's published prefix (not a channel of this run).
    sub: Option<Subscription>,
    /// `@busy` on the consumer: poll the channel instead of sleeping on it.
    busy: bool,
    /// The marker it stopped at (see [`ChannelEnd`]): nothing is delivered until resumed.
    marker: Option<u64>,
    /// How it sleeps on the space's readiness handle (see [`Ingress::arm`]).
    wait: IngressWait,
}

/// An ingress asleep on its space's readiness handle: first within the channel's latency
/// bound (the producer batches its wake-ups), then deeply (woken at the next commit); the
/// producer's process watched through a pidfd when it is another process.
#[derive(Default)]
struct IngressWait {
    /// When the shallow sleep ends (set by the first arming after data).
    shallow_until: Option<Instant>,
    /// The producer's pidfd; `peer_checked` once looked for (none in this process).
    pidfd: Option<std::os::fd::OwnedFd>,
    peer_checked: bool,
}

/// A subscriber's side of a published stream: the publisher's data ring (read by copying,
/// since the publisher may overwrite it at any time), the ring in this space the copies
/// go to, and what was received and lost.
struct Subscription {
    view: DbufView,
    /// Bytes of the publisher's data ring, and of the ring the copies go to.
    size: u64,
    /// The copies' ring in this space's store, made on the first pull.
    ring: Option<BufId>,
    received: u64,
    /// Blocks lost to overwrite: their tags (the subscriber fell a whole tag ring behind)
    /// or their data (the data ring lapped first, or while a block was being copied).
    lost: u64,
    /// Bytes of the lost blocks whose tags were read (the others' lengths are unknown).
    lost_bytes: u64,
}

/// How often a subscriber of another run's published stream looks for new tags (it reads
/// a ring opened by name, whose producer cannot wake it).
const POLL: Duration = Duration::from_millis(50);

impl Ingress {
    /// `@busy` (thesis Table 3.3, an operational hotspot): when the channel is empty, look
    /// again at once instead of sleeping until the producer wakes us (a CPU spent for the
    /// wake-up latency).
    pub fn set_busy(&mut self, busy: bool) {
        self.busy = busy;
    }

    fn release(&mut self) {
        if self.held {
            if let Some(r) = &mut self.r {
                r.release();
            }
            self.held = false;
        }
    }

    /// Blocks without blocking: one run of committed tags (one look at the producer's
    /// position for all of them), each renamed into the local store with its record
    /// metadata restored and pushed to `out` until it holds `max` blocks or `budget` bytes
    /// of the channel's data ring (blocks read in place elsewhere hold none of it).
    /// Only the tags used are consumed; the rest are read again next time. `Ok(false)`:
    /// nothing was committed.
    fn next_run(
        &mut self,
        cx: &mut Ctx<'_>,
        out: &mut Batch,
        max: usize,
        budget: &mut u64,
    ) -> beltway::Result<bool> {
        if self.sub.is_some() {
            return match self.next_copied(cx)? {
                Some(t) => {
                    *budget += t.len as u64 + META_SIZE as u64;
                    out.push(t);
                    Ok(true)
                }
                None => Ok(false),
            };
        }
        // The reader is set aside while the run is taken (the run borrows it; `take`
        // borrows the rest of `self`).
        let Some(mut r) = self.r.take() else {
            return Ok(false);
        };
        let res = self.take_run(&mut r, cx, out, max, budget);
        self.r = Some(r);
        res
    }

    fn take_run(
        &mut self,
        r: &mut Reader,
        cx: &mut Ctx<'_>,
        out: &mut Batch,
        max: usize,
        budget: &mut u64,
    ) -> beltway::Result<bool> {
        let Some(p) = r.try_peek_tags(max.saturating_sub(out.len()).max(1))? else {
            return Ok(false);
        };
        let mut used = 0;
        let mut res = Ok(true);
        // The last shared ring or file a tag named, and its local id: the common case (a
        // block in place) is a rename, nothing more.
        let mut last: Option<(BufId, BufId)> = None;
        let tags = p.data;
        let n = tags.len() / Tag::SIZE;
        let tag_at = |i: usize| Tag::from_bytes(&tags[i * Tag::SIZE..]).expect("a whole tag");
        while used < n {
            if out.len() >= max || *budget >= self.max_bytes {
                break;
            }
            let raw = tag_at(used);
            if let Some((from, to)) = last.filter(|l| l.0 == raw.buf) {
                self.held = true;
                if self.metas.is_empty() {
                    // A stretch of blocks of that buffer without metadata: renamed in one
                    // pass into the batch.
                    let end = n.min(used + (max - out.len()));
                    while used < end {
                        let t = tag_at(used);
                        if t.buf != from {
                            break;
                        }
                        out.tags.push(Tag { buf: to, ..t });
                        used += 1;
                    }
                    out.shared.resize(out.tags.len(), false);
                    continue;
                }
                let tag = Tag { buf: to, ..raw };
                if let Some(meta) = self.metas.pop_front() {
                    self.restore(cx, &tag, meta);
                }
                out.push(tag);
                used += 1;
                continue;
            }
            used += 1;
            if raw.buf & FILE_BIT != 0 {
                last = self
                    .files
                    .iter()
                    .find(|f| f.0 == raw.buf & !FILE_BIT)
                    .map(|f| (raw.buf, f.1));
            }
            match self.take(cx, raw) {
                Ok(Some(t)) => {
                    self.held = true;
                    if t.buf == self.local {
                        *budget += t.len as u64 + META_SIZE as u64;
                    }
                    out.push(t);
                }
                // A marker: the blocks after it wait until the space has served it.
                Ok(None) if self.marker.is_some() => {
                    self.held = true;
                    break;
                }
                Ok(None) => {}
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        r.consume_tags((used * Tag::SIZE) as u64)?;
        res
    }

    /// One tag read from the channel: the block it names, renamed into the local store
    /// with its record metadata restored, or `None` for the channel's own announcements
    /// and headers (and the empty tags of abandoned slots).
    fn take(&mut self, cx: &mut Ctx<'_>, t: Tag) -> beltway::Result<Option<Tag>> {
        let corrupt = |pos: u64, why: String| beltway::Error::Corrupt {
            name: self.name.clone(),
            pos,
            why,
        };
        if t.buf == 0 {
            return Ok(None);
        }
        if t.buf & FILE_BIT != 0 {
            // A tag into a file or shared ring this space maps too, with its metadata from
            // the run's METAS block (none: a run without record metadata).
            let meta = self.metas.pop_front().unwrap_or(Meta::NONE);
            let Some(&(_, local)) = self.files.iter().find(|f| f.0 == t.buf & !FILE_BIT) else {
                return Err(corrupt(
                    t.pos,
                    format!(
                        "a tag into file {} that was never announced",
                        t.buf & !FILE_BIT
                    ),
                ));
            };
            let tag = Tag { buf: local, ..t };
            self.restore(cx, &tag, meta);
            return Ok(Some(tag));
        }
        let whole = Tag {
            buf: self.local,
            ..t
        };
        let data = cx
            .store
            .data(&whole)
            .map_err(|e| corrupt(t.pos, e.to_string()))?;
        let Some(meta) = Meta::from_bytes(data) else {
            return Err(corrupt(
                t.pos,
                format!("a block without its {META_SIZE}-byte header"),
            ));
        };
        if meta.flags & ANNOUNCE != 0 && meta.flags & SHARED != 0 {
            let key = data
                .get(META_SIZE..META_SIZE + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .unwrap_or(0);
            let ring = crate::store::shared_ring(key).ok_or_else(|| {
                corrupt(t.pos, format!("shared ring {key} is not in this process"))
            })?;
            let local = cx.store.map_dbuf(DbufView::new(&ring));
            self.files.push((meta.ts_ns as BufId, local));
            return Ok(None);
        }
        if meta.flags & ANNOUNCE != 0 && !self.trusted {
            return Err(corrupt(
                t.pos,
                "a process space named a file to map; refused".into(),
            ));
        }
        if meta.flags & ANNOUNCE != 0 {
            let path =
                std::path::PathBuf::from(String::from_utf8_lossy(&data[META_SIZE..]).into_owned());
            let (local, _) = cx
                .store
                .add_file(&path)
                .map_err(|e| corrupt(t.pos, format!("cannot map {}: {e}", path.display())))?;
            self.files.push((meta.ts_ns as BufId, local));
            return Ok(None);
        }
        if meta.flags & MARK != 0 {
            if !self.trusted {
                return Err(corrupt(
                    t.pos,
                    "a migration marker from a process space; refused".into(),
                ));
            }
            self.marker = Some(meta.ts_ns);
            return Ok(None);
        }
        if meta.flags & METAS != 0 {
            let n = meta.orig_len as usize;
            if !self.metas.is_empty() || data.len() != META_SIZE * (n + 1) {
                return Err(corrupt(t.pos, format!("a metadata block of {} bytes for {n} blocks (or before the last one's tags were read)", data.len())));
            }
            self.metas.extend(
                data[META_SIZE..]
                    .chunks_exact(META_SIZE)
                    .map(|b| Meta::from_bytes(b).expect("a whole header")),
            );
            return Ok(None);
        }
        let local = Tag {
            pos: t.pos + META_SIZE as u64,
            len: t.len - META_SIZE as u32,
            ..whole
        };
        self.restore(cx, &local, meta);
        Ok(Some(local))
    }

    /// [`Ingress::next`] for a subscription: the next block the publisher has not yet
    /// overwritten, copied into this space's ring. Copy first, then check (thesis 4.5.4):
    /// a tag or a block found overwritten after it was read is counted as lost and skipped.
    fn next_copied(&mut self, cx: &mut Ctx<'_>) -> beltway::Result<Option<Tag>> {
        let name = &self.name;
        let corrupt = |pos: u64, why: String| beltway::Error::Corrupt {
            name: name.clone(),
            pos,
            why,
        };
        let (Some(r), Some(sub)) = (self.r.as_mut(), self.sub.as_mut()) else {
            return Ok(None);
        };
        let ring = *sub
            .ring
            .get_or_insert_with(|| cx.store.add_ring(sub.size as usize));
        loop {
            let (at, t) = match r.try_peek_acquire(Tag::SIZE) {
                Ok(Some(p)) => (p.pos, Tag::from_bytes(p.data)),
                Ok(None) => return Ok(None),
                // The publisher lapped the tag ring: every tag in between is a lost block.
                Err(beltway::Error::Overrun { from, to, .. }) => {
                    sub.lost += to.saturating_sub(from) / Tag::SIZE as u64;
                    continue;
                }
                Err(e) => return Err(e),
            };
            r.peek_complete()?;
            if r.check(at).is_err() {
                // Overwritten while we read it.
                sub.lost += 1;
                continue;
            }
            let Some(t) = t.filter(|t| t.buf != 0) else {
                continue;
            };
            if t.buf & FILE_BIT != 0 {
                return Err(corrupt(
                    t.pos,
                    "a published stream named a file or ring to map; refused".into(),
                ));
            }
            let Some(n) = (t.len as usize).checked_sub(META_SIZE) else {
                return Err(corrupt(
                    t.pos,
                    format!("a block without its {META_SIZE}-byte header"),
                ));
            };
            if n as u64 > sub.size / 4 {
                return Err(corrupt(
                    t.pos,
                    format!(
                        "a block of {n} bytes, more than a subscriber takes ({})",
                        sub.size / 4
                    ),
                ));
            }
            let src = Tag {
                buf: sub.view.id(),
                ..t
            };
            let mut head = [0u8; META_SIZE];
            let copied = match sub.view.resolve(&src) {
                Ok(d) => {
                    head.copy_from_slice(&d[..META_SIZE]);
                    let (local, dst) = cx.store.alloc_in(ring, n);
                    dst.copy_from_slice(&d[META_SIZE..]);
                    Some(local)
                }
                Err(e) if e.is_overrun() => None,
                Err(e) => return Err(e),
            };
            // Only now are the copied bytes known to be the publisher's block.
            let Some(local) = copied.filter(|_| sub.view.check(&src).is_ok()) else {
                sub.lost += 1;
                sub.lost_bytes += n as u64;
                continue;
            };
            let meta = Meta::from_bytes(&head).expect("a whole header");
            if meta.flags & (ANNOUNCE | METAS) != 0 {
                return Err(corrupt(
                    t.pos,
                    "a published stream named a file or ring to map; refused".into(),
                ));
            }
            sub.received += 1;
            let local = Tag {
                class: t.class,
                ..local
            };
            if meta.flags & RECORD != 0 {
                cx.store.add_record(
                    ring,
                    crate::store::RecordMeta {
                        pos: local.pos,
                        len: local.len,
                        skip: meta.skip,
                        ts_ns: meta.ts_ns,
                        orig_len: meta.orig_len,
                    },
                );
                if meta.flags & LINK != 0 {
                    meta.set_link(cx.store, ring);
                }
            }
            return Ok(Some(local));
        }
    }

    /// Record metadata and link type of a block, as the producer had them.
    fn restore(&mut self, cx: &mut Ctx<'_>, t: &Tag, meta: Meta) {
        if meta.flags & RECORD != 0 {
            cx.store.add_record(
                t.buf,
                crate::store::RecordMeta {
                    pos: t.pos,
                    len: t.len,
                    skip: meta.skip,
                    ts_ns: meta.ts_ns,
                    orig_len: meta.orig_len,
                },
            );
            if meta.flags & LINK != 0 && (t.buf != self.local || !self.link_set) {
                meta.set_link(cx.store, t.buf);
                self.link_set |= t.buf == self.local;
            }
        }
    }
}

impl Filter for Ingress {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}

    fn as_channel_end(&mut self) -> Option<&mut dyn ChannelEnd> {
        (self.sub.is_none()).then_some(self as &mut dyn ChannelEnd)
    }

    fn drains(&self) -> bool {
        // A subscription to another run's published stream does not end when this run is
        // interrupted: nothing to drain there.
        self.sub.is_none()
    }

    fn summary(&self) -> Option<String> {
        let s = self.sub.as_ref()?;
        let bytes = if s.lost_bytes > 0 {
            format!(", {} bytes of them known", s.lost_bytes)
        } else {
            String::new()
        };
        Some(format!("__subscribe: {} blocks received, lost {} blocks to a full ring (subscriber fell behind){bytes}", s.received, s.lost))
    }

    fn arm(&mut self, w: &mut crate::readiness::Arm<'_>, _source: bool) {
        if self.busy || self.marker.is_some() {
            // `@busy` polls; a marker waits for the space's quiescent point.
            w.ready();
            return;
        }
        let Some(r) = self.r.as_mut() else {
            w.ready();
            return;
        };
        let now = Instant::now();
        let wait = &mut self.wait;
        if !wait.peer_checked {
            wait.peer_checked = true;
            let pid = r.writer_pid();
            if pid != std::process::id() {
                // Watch the producer's process; then make sure the pid is still the one
                // that made the ring (not a new process that reused the number).
                wait.pidfd = beltway::sys::pidfd_open(pid).ok();
                r.check_writer();
            }
        }
        if let Some(p) = &wait.pidfd {
            use std::os::fd::AsFd;
            if w.fired(p.as_fd()) {
                // The producer's process ended: the stream ends after what it committed.
                r.check_writer();
            }
        }
        let deep = wait.shallow_until.is_some_and(|t| now >= t);
        match r.arm(deep) {
            Ok(beltway::Armed::Asleep) => {
                use std::os::fd::AsFd;
                if let Some(fd) = r.wake_fd() {
                    w.signal(fd);
                }
                if let Some(p) = &wait.pidfd {
                    w.fd(p.as_fd());
                }
                if !deep {
                    w.deadline(*wait.shallow_until.get_or_insert(now + r.latency()));
                }
            }
            Ok(beltway::Armed::Unsupported) => {
                // A subscription's ring (opened by name) or an observer: nobody can wake
                // it, so it looks again, as a reader's timed wait did: at the ring's latency
                // bound while data flows (a burst fills a subscriber's ring in well under
                // 50 ms: the soak's subscribers lost 3 % of 150,000-datagram bursts with
                // a 50 ms look), every POLL once a look found nothing.
                w.deadline(if deep {
                    now + POLL
                } else {
                    *wait.shallow_until.get_or_insert(now + r.latency())
                });
                if wait.pidfd.is_none() && r.writer_pid() != std::process::id() {
                    r.check_writer();
                }
            }
            // Data, the end, or an error: the next pull sees it.
            Ok(beltway::Armed::Data) | Ok(beltway::Armed::Eof) | Err(_) => w.ready(),
        }
    }

    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if let Some(v) = self.data.take() {
            self.local = cx.store.map_dbuf(v);
        }
        // The previous batch has walked the whole space: its blocks may be reused.
        self.release();
        if self.marker.is_some() {
            // Held at a marker until the space has served it (it is not over).
            return true;
        }
        let mut bytes = 0u64;
        let before = out.len();
        let more = self.pull_runs(cx, out, max, &mut bytes);
        if out.len() > before || !more {
            // Data came (or the end): the next sleep starts shallow again, and until then
            // this reader is no sleeper (the producer batches its wake-ups again). With
            // nothing, it stays armed: arming again costs no fence.
            self.wait.shallow_until = None;
            if let Some(r) = self.r.as_mut() {
                r.disarm();
            }
        }
        more
    }

    fn epoch_end(&mut self, _cx: &mut Ctx<'_>) {
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

impl Ingress {
    /// [`Filter::pull`]'s reading: runs of tags until `max` blocks or the byte budget, or
    /// nothing more is committed now; false at the end of the stream.
    fn pull_runs(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize, bytes: &mut u64) -> bool {
        let name = self.name.clone();
        let fail = |cx: &mut Ctx<'_>, e: beltway::Error| {
            cx.warn(format!("channel {name}: {e}"));
            false
        };
        while out.len() < max && *bytes < self.max_bytes && self.marker.is_none() {
            match self.next_run(cx, out, max, bytes) {
                Ok(true) => {}
                Ok(false) if !out.is_empty() => break,
                // Never waits here: the space sleeps on its readiness handle (`arm`); a
                // look tells the end of the stream from no data yet.
                Ok(false) => match self.r.as_mut().map_or(Ok(beltway::Ready::Eof), |r| {
                    Ok(r.ready_now())
                }) {
                    Ok(beltway::Ready::Data) => {}
                    Ok(beltway::Ready::TimedOut) => return true,
                    Ok(beltway::Ready::Eof) => {
                        // Drain what was committed before the close.
                        match self.next_run(cx, out, max, bytes) {
                            Ok(true) => {}
                            Ok(false) => return !out.is_empty(),
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

    /// Block `i` of a test stream: `(i % modulo) + 1` bytes derived from `i`, and its class.
    fn test_block(i: u32, modulo: u32) -> (Vec<u8>, u16) {
        (
            (0..(i % modulo) + 1).map(|k| (k ^ i) as u8).collect(),
            (i % 7 + 1) as u16,
        )
    }

    /// Queue block `t` in `b`, sending the batch through `tx` every 100 blocks.
    fn feed(tx: &mut Egress, st: &mut Store, b: &mut Batch, t: Tag) {
        b.push(t);
        if b.len() == 100 {
            cx_run(st, |cx| tx.process(cx, b));
            b.clear();
        }
    }

    /// Send what `b` still holds, then close the channel.
    fn close(tx: &mut Egress, st: &mut Store, b: &mut Batch) {
        cx_run(st, |cx| tx.process(cx, b));
        cx_run(st, |cx| tx.finish(cx, &mut Batch::default()));
    }

    /// Pull batches of up to `max` blocks until the channel ends, releasing each after
    /// `check` saw its blocks (with their number in the stream); returns how many came.
    fn drain(rx: &mut Ingress, max: usize, mut check: impl FnMut(&Store, &Tag, u32)) -> u32 {
        let mut st = Store::new(1 << 16);
        let mut i = 0u32;
        loop {
            let mut b = Batch::default();
            let more = cx_run(&mut st, |cx| rx.pull(cx, &mut b, max));
            for t in &b.tags {
                check(&st, t, i);
                i += 1;
            }
            cx_run(&mut st, |cx| rx.epoch_end(cx));
            if !more {
                return i;
            }
        }
    }

    /// An ingress armed on a readiness handle, and the space's decision.
    fn arm_ingress(rx: &mut Ingress, ready: &mut crate::readiness::Readiness) -> (crate::readiness::Decision, Option<Instant>) {
        let mut arm = ready.begin();
        rx.arm(&mut arm, true);
        crate::readiness::Readiness::decide(&arm)
    }

    /// One block sent through `tx` as a batch of its own (committed at its end).
    fn send_one(tx: &mut Egress, st: &mut Store) {
        let mut b = Batch::default();
        b.push(st.push(b"one block"));
        cx_run(st, |cx| tx.process(cx, &mut b));
    }

    #[test]
    fn a_deeply_asleep_ingress_is_woken_through_its_eventfd_by_one_commit() {
        use std::os::fd::AsRawFd;
        let (mut tx, mut rx) = channel("t-ready-deep", ChannelConfig::default()).unwrap();
        let mut ready = crate::readiness::Readiness::new().unwrap();
        // Long past its shallow sleep: it arms deep (the producer wakes it at once).
        rx.wait.shallow_until = Some(Instant::now());
        let (d, deadline) = arm_ingress(&mut rx, &mut ready);
        assert_eq!(d, crate::readiness::Decision::Sleep);
        assert_eq!(deadline, None, "a deep sleep has no deadline of its own");
        let wake = rx.r.as_ref().unwrap().wake_fd().unwrap().as_raw_fd();
        let producer = std::thread::spawn(move || {
            let mut st = Store::new(1 << 16);
            send_one(&mut tx, &mut st);
            tx
        });
        // The limit is a watchdog, not a figure: the wake-up must come from the eventfd.
        ready.sleep(None, Duration::from_secs(60)).unwrap();
        assert_eq!(ready.fired(), &[wake], "woken by the channel's eventfd");
        let _tx = producer.join().unwrap();
        let mut st = Store::new(1 << 16);
        let mut b = Batch::default();
        assert!(cx_run(&mut st, |cx| rx.pull(cx, &mut b, 16)));
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn a_shallow_sleeper_is_not_woken_per_block_but_by_its_latency_bound() {
        let (mut tx, mut rx) = channel("t-ready-shallow", ChannelConfig::default()).unwrap();
        let mut ready = crate::readiness::Readiness::new().unwrap();
        let (d, deadline) = arm_ingress(&mut rx, &mut ready);
        assert_eq!(d, crate::readiness::Decision::Sleep);
        let deadline = deadline.expect("a shallow sleep ends at the channel's latency bound");
        // One block is below the threshold (32): the producer commits without a wake-up.
        let mut st = Store::new(1 << 16);
        send_one(&mut tx, &mut st);
        ready.sleep(Some(deadline), Duration::from_secs(60)).unwrap();
        assert!(ready.fired().is_empty(), "no wake-up for one block: {:?}", ready.fired());
        // The block is there for the pull the deadline brings.
        let mut st2 = Store::new(1 << 16);
        let mut b = Batch::default();
        assert!(cx_run(&mut st2, |cx| rx.pull(cx, &mut b, 16)));
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn blocks_cross_between_threads_with_classes_and_bytes_intact() {
        let (mut tx, mut rx) = channel(
            "t-chan",
            ChannelConfig {
                data: 1 << 16,
                slots: 256,
                ..Default::default()
            },
        )
        .unwrap();
        let n = 5000u32;
        let producer = std::thread::spawn(move || {
            let mut st = Store::new(1 << 20);
            let mut b = Batch::default();
            for i in 0..n {
                let (data, class) = test_block(i, 700);
                let t = st.push(&data);
                feed(&mut tx, &mut st, &mut b, Tag { class, ..t });
            }
            close(&mut tx, &mut st, &mut b);
        });
        let i = drain(&mut rx, 256, |st, t, i| {
            let (want, class) = test_block(i, 700);
            assert_eq!(st.data(t).unwrap(), &want[..], "block {i}");
            assert_eq!(t.class, class);
        });
        producer.join().unwrap();
        // The data ring (64 KiB) is far smaller than what crossed (~1.7 MB): space was
        // reused only after release, or a block above would have been wrong.
        assert_eq!(i, n);
    }

    /// Blocks that cross by reference (a shared ring of the producing space): tags only,
    /// in runs, with the record metadata of those that have some in one METAS block per
    /// run, even when a run starts with blocks that have none. Every block arrives with
    /// its bytes, class and metadata as the producer had them, across many runs.
    #[test]
    fn blocks_by_reference_keep_their_metadata_in_mixed_runs() {
        use crate::store::RecordMeta;
        let (mut tx, mut rx) = channel(
            "t-chan-ref",
            ChannelConfig {
                slots: 256,
                ..Default::default()
            },
        )
        .unwrap();
        let n = 3000u32;
        // Block i has record metadata unless i % 5 < 2 (so a run may begin without).
        let with_meta = |i: u32| i % 5 >= 2;
        let producer = std::thread::spawn(move || {
            let mut st = Store::new(1 << 20);
            st.share_rings();
            // Far smaller than what crosses: reusing it must wait for the guards.
            let ring = st.add_ring(1 << 16);
            let mut b = Batch::default();
            for i in 0..n {
                let (data, class) = test_block(i, 300);
                let (t, d) = st.alloc_in(ring, data.len());
                d.copy_from_slice(&data);
                if with_meta(i) {
                    st.add_record(
                        ring,
                        RecordMeta {
                            pos: t.pos,
                            len: t.len,
                            skip: i % 3,
                            ts_ns: 1_000 + i as u64,
                            orig_len: 2_000 + i,
                        },
                    );
                }
                feed(&mut tx, &mut st, &mut b, Tag { class, ..t });
            }
            close(&mut tx, &mut st, &mut b);
            // The store (the shared ring) lives until the consumer is done with it.
            st
        });
        let i = drain(&mut rx, 64, |st, t, i| {
            let (want, class) = test_block(i, 300);
            assert_eq!(st.data(t).unwrap(), &want[..], "block {i}");
            assert_eq!(t.class, class);
            let r = st.record_of(t);
            if with_meta(i) {
                let r = r.unwrap_or_else(|| panic!("block {i} lost its metadata"));
                assert_eq!(
                    (r.skip, r.ts_ns, r.orig_len),
                    (i % 3, 1_000 + i as u64, 2_000 + i),
                    "block {i}"
                );
            } else {
                assert!(r.is_none(), "block {i} got metadata it never had: {r:?}");
            }
        });
        drop(producer.join().unwrap());
        assert_eq!(i, n);
    }

    /// Prefix sharing's published streams are lossy (FRP): a subscriber that falls behind
    /// loses whole blocks, counted exactly, and never gets a corrupt one; the publisher and
    /// the other subscribers do not wait for it. Real named rings in /dev/shm.
    mod lossy {
        use super::*;
        use crate::store::RecordMeta;

        use beltway::testing::watchdog;

        /// Block `i` of a test stream: its number, then bytes derived from it (100 to 1299).
        fn block(i: u32) -> Vec<u8> {
            let len = 100 + (i as usize * 37) % 1200;
            let mut b: Vec<u8> = (0..len)
                .map(|k| (k as u32 ^ i.wrapping_mul(0x9e37_79b9)) as u8)
                .collect();
            b[..4].copy_from_slice(&i.to_le_bytes());
            b
        }

        /// The number of a block whose bytes are exactly `block(n)`'s.
        fn intact(d: &[u8]) -> Option<u32> {
            let i = u32::from_le_bytes(d.get(..4)?.try_into().ok()?);
            (block(i) == d).then_some(i)
        }

        /// The numbers in a subscriber's summary line: blocks received, lost, bytes known lost.
        fn summary_numbers(s: &str) -> (u64, u64, u64) {
            let num = |after: &str| {
                s.split(after)
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
            };
            let received = s
                .strip_prefix("__subscribe: ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok());
            (
                received.unwrap_or_else(|| panic!("{s}")),
                num("lost ").unwrap_or_else(|| panic!("{s}")),
                num("), ").unwrap_or(0),
            )
        }

        /// A subscriber in its own space, checking every block it gets.
        struct Sub {
            rx: Ingress,
            st: Store,
            got: Vec<u32>,
        }

        impl Sub {
            fn new(key: &str) -> Sub {
                Sub {
                    rx: subscribe(key).unwrap(),
                    st: Store::new(1 << 16),
                    got: Vec::new(),
                }
            }
            /// One pull; false at the end of the stream.
            fn pull(&mut self) -> bool {
                let mut b = Batch::default();
                let more = cx_run(&mut self.st, |cx| self.rx.pull(cx, &mut b, 256));
                for t in &b.tags {
                    let d = self.st.data(t).unwrap();
                    let i = intact(d).unwrap_or_else(|| {
                        panic!(
                            "a delivered block is not one the publisher sent ({} bytes)",
                            d.len()
                        )
                    });
                    assert_eq!(t.class, (i % 7 + 1) as u16, "block {i}: its class");
                    let r = self
                        .st
                        .record_of(t)
                        .unwrap_or_else(|| panic!("block {i}: no record metadata"));
                    assert_eq!(
                        (r.ts_ns, r.orig_len, r.skip),
                        (i as u64 * 1000, d.len() as u32 + 4, 0),
                        "block {i}: its record"
                    );
                    assert_eq!(self.st.link(t), Some(1), "block {i}: its link type");
                    self.got.push(i);
                }
                cx_run(&mut self.st, |cx| self.rx.epoch_end(cx));
                more
            }
            fn read_to_end(&mut self) {
                while self.pull() {}
            }
            fn summary(&self) -> (u64, u64, u64) {
                let s = self
                    .rx
                    .summary()
                    .expect("a subscriber reports what it received and lost");
                let n = summary_numbers(&s);
                assert_eq!(n.0, self.got.len() as u64, "{s}");
                n
            }
        }

        /// A publisher's space: pushes blocks `from..to` as one batch, each with its record
        /// metadata (time, wire length) and link type.
        fn send(tx: &mut Egress, st: &mut Store, blocks: std::ops::Range<u32>) {
            let mut b = Batch::default();
            for i in blocks {
                let d = block(i);
                let t = st.push(&d);
                st.add_record(
                    t.buf,
                    RecordMeta::whole(t.pos, t.len, i as u64 * 1000, d.len() as u32 + 4),
                );
                st.set_link(t.buf, 1);
                b.push(Tag {
                    class: (i % 7 + 1) as u16,
                    ..t
                });
            }
            cx_run(st, |cx| tx.process(cx, &mut b));
        }

        fn shm_names(key: &str) -> Vec<String> {
            std::fs::read_dir("/dev/shm")
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(key))
                .collect()
        }

        /// One subscriber keeps up, one never reads until the stream has ended. The
        /// publisher never waits (in one thread it would hang); the live subscriber gets
        /// everything; the stalled one gets the newest blocks the rings still held, intact
        /// and in order, and counts every other block as lost: by its tags when the tag
        /// ring lapped first (lengths unknown), by its data when the data ring did (lengths
        /// known, so the lost bytes are exact).
        #[test]
        fn a_subscriber_that_falls_behind_loses_whole_blocks_and_holds_back_no_one() {
            let _w = watchdog(
                "a_subscriber_that_falls_behind_loses_whole_blocks_and_holds_back_no_one",
                60,
            );
            let n = 3000u32;
            // 256 tags (about 180 KB of blocks) in 1 MiB of data: the tag ring laps first.
            // 4096 tags in 64 KiB of data (about 90 blocks): the data ring laps first.
            for (slots, data, tags_lap) in [(256, 1 << 20, true), (4096, 1 << 16, false)] {
                let key = format!("t-lossy-{}-{slots}", std::process::id());
                let mut tx = publish(
                    &key,
                    ChannelConfig {
                        slots,
                        data,
                        ..Default::default()
                    },
                )
                .unwrap();
                let (mut live, mut slow) = (Sub::new(&key), Sub::new(&key));
                let mut st = Store::new(1 << 20);
                for from in (0..n).step_by(16) {
                    send(&mut tx, &mut st, from..(from + 16).min(n));
                    live.pull();
                }
                cx_run(&mut st, |cx| tx.finish(cx, &mut Batch::default()));
                live.read_to_end();
                slow.read_to_end();
                assert_eq!(
                    live.got,
                    (0..n).collect::<Vec<_>>(),
                    "the live subscriber got every block in order"
                );
                assert_eq!(live.summary(), (n as u64, 0, 0));
                let (received, lost, lost_bytes) = slow.summary();
                let first = n - received as u32;
                assert_eq!(
                    slow.got,
                    (first..n).collect::<Vec<_>>(),
                    "the newest blocks, intact and in order"
                );
                assert_eq!(
                    received + lost,
                    n as u64,
                    "every block received or counted lost"
                );
                if tags_lap {
                    assert_eq!(
                        received, slots as u64,
                        "a whole tag ring of the newest blocks"
                    );
                    assert_eq!(
                        lost_bytes, 0,
                        "blocks whose tags were lost have unknown lengths"
                    );
                } else {
                    assert!(
                        received > 0 && received < 200,
                        "what 64 KiB of data holds: {received}"
                    );
                    assert_eq!(
                        lost_bytes,
                        (0..first).map(|i| block(i).len() as u64).sum::<u64>(),
                        "the lost blocks' bytes"
                    );
                }
                drop((tx, live, slow));
                assert_eq!(
                    shm_names(&key),
                    Vec::<String>::new(),
                    "the published rings are gone with the publisher"
                );
            }
        }

        /// A publisher thread that never pauses and a subscriber that reads slowly, so
        /// blocks are overwritten before, and at times while, the subscriber copies them:
        /// whatever it delivers is intact and in order, and delivered plus lost is exactly
        /// what was sent.
        #[test]
        fn racing_a_slow_subscriber_delivers_only_intact_blocks_and_counts_the_rest() {
            let _w = watchdog(
                "racing_a_slow_subscriber_delivers_only_intact_blocks_and_counts_the_rest",
                120,
            );
            let key = format!("t-lossy-race-{}", std::process::id());
            let n = 20_000u32;
            let mut tx = publish(
                &key,
                ChannelConfig {
                    slots: 1024,
                    data: 1 << 16,
                    ..Default::default()
                },
            )
            .unwrap();
            let mut sub = Sub::new(&key);
            let publisher = std::thread::spawn(move || {
                let mut st = Store::new(1 << 20);
                for from in (0..n).step_by(32) {
                    send(&mut tx, &mut st, from..(from + 32).min(n));
                }
                cx_run(&mut st, |cx| tx.finish(cx, &mut Batch::default()));
            });
            while sub.pull() {
                std::thread::sleep(Duration::from_micros(200));
            }
            publisher.join().unwrap();
            let (received, lost, _) = sub.summary();
            assert!(
                sub.got.windows(2).all(|w| w[0] < w[1]),
                "in order, none twice"
            );
            assert_eq!(
                received + lost,
                n as u64,
                "every block received or counted lost"
            );
            assert_eq!(
                sub.got.last(),
                Some(&(n - 1)),
                "the stream's last block, which nothing overwrote"
            );
        }
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
                (proptest::collection::vec(any::<u8>(), 0..64), any::<u16>())
                    .prop_map(|(b, c)| Msg::Through(b, c)),
                (0u64..1 << 20, any::<u32>(), any::<u16>(), any::<u16>())
                    .prop_map(|(p, l, b, c)| Msg::Tag(p, l, b, c)),
                // Well-formed headers with random flags, followed by data.
                (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..32)).prop_map(|(f, d)| {
                    let mut b = Meta {
                        ts_ns: 1,
                        orig_len: 2,
                        skip: 0,
                        link: 1,
                        flags: f,
                        snaplen: 0,
                    }
                    .to_bytes()
                    .to_vec();
                    b.extend(d);
                    Msg::Through(b, 1)
                }),
            ]
        }

        /// Write `msgs` into the channel, close it, and pull until it ends, showing every
        /// block delivered to `check` while its batch is held. Returns whether the channel
        /// ended (a closed channel must, whatever it held) within 100 pulls.
        fn feed_and_drain(
            tx: &mut Egress,
            rx: &mut Ingress,
            msgs: &[Msg],
            mut check: impl FnMut(&Store, &Tag),
        ) -> bool {
            for m in msgs {
                match m {
                    Msg::Through(b, c) => {
                        tx.w.write_through_parts(&[b], *c).unwrap();
                    }
                    Msg::Tag(p, l, b, c) => {
                        tx.w.write_tag(Tag {
                            pos: *p,
                            len: *l,
                            buf: *b,
                            class: *c,
                        })
                        .unwrap();
                    }
                }
            }
            tx.w.close();
            let mut st = Store::new(1 << 16);
            let (mut sessions, mut warnings, mut stop) = (None, Vec::new(), crate::filter::Stop::No);
            for _ in 0..100 {
                let mut b = Batch::default();
                let more = {
                    let mut cx = Ctx {
                        store: &mut st,
                        name: "t",
                        sessions: &mut sessions,
                        warnings: &mut warnings,
                        stop: &mut stop,
                    };
                    rx.pull(&mut cx, &mut b, 256)
                };
                for t in &b.tags {
                    check(&st, t);
                }
                rx.epoch_end(&mut Ctx {
                    store: &mut st,
                    name: "t",
                    sessions: &mut sessions,
                    warnings: &mut warnings,
                    stop: &mut stop,
                });
                if !more {
                    return true;
                }
                // A migration marker (trusted channels) holds the channel until the
                // space has served it: serve it, as the space does.
                if rx.marker().is_some() {
                    rx.resume();
                }
            }
            false
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
            #[test]
            fn garbage_in_a_channel_is_an_error_not_a_crash(msgs in proptest::collection::vec(msg(), 0..40), trusted in any::<bool>()) {
                let (mut tx, tags, data) = egress("t-hostile", ChannelConfig { data: 1 << 16, slots: 256, ..Default::default() }, false).unwrap();
                let mut rx = ingress("t-hostile", &tags, &data, trusted).unwrap();
                // Whatever came out resolves to exactly its length, or fails cleanly (an
                // error, never a slice of another length); and the closed channel ends.
                let mut wrong = Vec::new();
                let ended = feed_and_drain(&mut tx, &mut rx, &msgs, |st, t| {
                    if let Ok(d) = st.data(t) {
                        if d.len() != t.len as usize {
                            wrong.push((*t, d.len()));
                        }
                    }
                });
                prop_assert!(ended, "the closed channel did not end after 100 pulls");
                prop_assert!(wrong.is_empty(), "blocks resolving to another length than theirs: {:?}", wrong);
            }

            /// The same garbage in a stream another run publishes: the subscriber, which
            /// copies blocks out, reports errors as warnings and never panics either, and
            /// whatever it hands out lies in its own ring.
            #[test]
            fn garbage_in_a_published_stream_is_an_error_not_a_crash(msgs in proptest::collection::vec(msg(), 0..40)) {
                static CASE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let key = format!("t-hostile-{}-{}", std::process::id(), CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                let mut tx = publish(&key, ChannelConfig { data: 1 << 16, slots: 256, ..Default::default() }).unwrap();
                let mut rx = subscribe(&key).unwrap();
                let mut short = Vec::new();
                let ended = feed_and_drain(&mut tx, &mut rx, &msgs, |st, t| {
                    if st.data(t).map(|d| d.len()) != Ok(t.len as usize) {
                        short.push(*t);
                    }
                });
                prop_assert!(ended, "the closed stream did not end after 100 pulls");
                prop_assert!(short.is_empty(), "blocks that do not resolve to their length: {:?}", short);
            }
        }
    }
}
