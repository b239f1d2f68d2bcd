//! Taps: a node's output, copied while someone reads it into a lossy IBuf that another
//! process (the daemon's PipesFS, `cat RUN/.../all`) reads as an observer. Thesis 3.2: a
//! filter's stream "is buffered into an IBuf only while someone reads it".
//!
//! Owns: the tap's rings (anonymous memfds, handed out as descriptors), the record format
//! in them, and writing a node's output batch into them. Does not own: attaching a tap to a
//! running node (the run loop does it at a batch boundary, through
//! [`crate::EditHandle::tap`]), reading it (the daemon), or where the descriptors go.
//!
//! # Never slows the run
//!
//! The tag ring is fast-reader-preference (FRP) and the data ring's only registered
//! reader is the writer's own write-through shadow: the writer never waits for anyone. The
//! reader gets only the data segments (no control segment), so it cannot register and
//! cannot hold the writer back; a reader that falls behind finds its tags or data
//! overwritten, skips ahead, and counts what it lost. The run pays one copy per block that
//! leaves a tapped node, and nothing for nodes nobody taps.
//!
//! # Record format
//!
//! Each block is one record in the data ring: a block header (`protocol::block`, the one
//! every transport carries: here capture time, wire length, link type, the block's length
//! and class) followed by the block's bytes; its tag (in the tag ring) carries
//! the block's class. The header is what a pcap stream of the tap (`all.pcap`) needs.
//!
//! # Subscribers: N readers for the price of one (thesis 3.4, 7.5)
//!
//! A shared tap ([`Tap::shared`]) serves readers that each want a part of the stream (a
//! libpcap reader's `pcap_setfilter`). Each [`Subscriber`] has a tag ring of its own over
//! the tap's one data ring. Per block, one classifier pass ([`Classify`], which the
//! subscription's [`Classifier`] builds for the distinct programs, e.g. merged into one
//! decision structure) gives every distinct filter its verdict (subscribers with the same
//! program share one): a block nobody wants is not copied at all; a block somebody wants is copied once into the data ring, and each
//! subscriber that wants it gets a 16-byte tag pointing at that copy (zero copies per
//! reader), its length cut to what the filter's verdict and the subscriber's snap length
//! keep. Subscribers' tag rings are FRP like the tap's own: a reader that stops loses its
//! own tags, and nobody else notices. A subscriber's reader registers on its own tag ring
//! (it gets that ring's control segment and wake-up eventfd, never the shared data ring's)
//! and sleeps until woken by the ring's moderation ([`Moderation`]): its tags are
//! committed once per batch, and a wake-up owed when no more packets come is kept by the
//! run loop ([`Tap::wake_if_due`]).

use crate::store::Store;
use crate::transport::{BlockOut, Fields, Outgoing, Outlet};
use beltway::{IbufWriter, Layout, RingConfig, RingRef, SyncMode, Tag, Writer};

/// The record format (header size, default ring size, [`RecordHeader`]) is the wire format
/// readers in other processes decode: it lives in `protocol` (which the libraries loaded
/// into legacy programs link without this crate).
pub use protocol::tap::{RecordHeader, DATA_BYTES, HEADER};

/// The rings of a tap, for the process that reads it: send each ring's data segment
/// (`ring.shared().fds()[0]`) and nothing else.
#[derive(Debug, Clone)]
pub struct TapRings {
    pub id: u64,
    pub tags: RingRef,
    pub data: RingRef,
}

/// How a subscriber's reader, asleep on its tag ring, is woken (thesis 5.2.2, event
/// moderation, the ring's own: `beltway::Writer`'s threshold and latency bound): once
/// `packets` tags wait for it, or `latency` after the first of them, whichever comes first
/// (the run loop keeps the latency bound when no more packets come: [`Tap::wake_if_due`]).
/// A reader that asks to be woken at once sleeps as a deep sleeper (libpcap's immediate
/// mode): woken at every batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moderation {
    pub packets: u32,
    pub latency: std::time::Duration,
}

impl Moderation {
    /// Tags per wake-up when the reader does not say: a busy reader is woken about as
    /// often as libpcap's TPACKET_V3 block of 256 KiB fills with full-sized frames.
    pub const PACKETS: u32 = 256;
    /// The latency bound when the reader does not say (a libpcap reader asks for its
    /// timeout, at most this).
    pub const LATENCY: std::time::Duration = std::time::Duration::from_millis(20);

    /// From a request's numbers (0: the default), clamped to what the tag ring holds
    /// (`tag_slots`) and to 1 s.
    pub fn of(packets: u32, us: u32, tag_slots: usize) -> Moderation {
        let cap = (tag_slots / 4).clamp(1, u32::MAX as usize) as u32;
        let packets = if packets == 0 { Self::PACKETS } else { packets };
        let latency = if us == 0 {
            Self::LATENCY
        } else {
            std::time::Duration::from_micros(us.min(1_000_000) as u64)
        };
        Moderation {
            packets: packets.min(cap),
            latency,
        }
    }
}

/// A classic BPF program (`struct sock_filter`'s fields), as a libpcap reader gives it;
/// empty: no filter (every block, whole).
pub type Program = Vec<protocol::proto::BpfInsn>;

/// The subscribers' distinct filters, evaluated together (built by a [`Classifier`] for
/// the programs the tap's subscribers have now): each program's verdict on a block, as
/// many bytes of it to keep, 0 for none (a classic BPF program's return).
pub trait Classify: Send {
    /// `out[i]`: the verdict of the `i`th program it was built for on `block`, whose length
    /// on the wire is `wire`.
    fn verdicts(&mut self, block: &[u8], wire: u32, out: &mut [u32]);
}

/// Builds the [`Classify`] of a set of distinct, non-empty programs (the tap rebuilds it
/// when a subscriber with a new program comes or the last with one goes).
pub type Classifier =
    std::sync::Arc<dyn Fn(&[&[protocol::proto::BpfInsn]]) -> Box<dyn Classify> + Send + Sync>;

/// One reader of a shared tap: its own tag ring over the tap's data ring.
#[derive(Debug)]
pub struct Subscriber {
    pub(crate) id: u64,
    tags: Writer,
    snap: u32,
}

impl Subscriber {
    /// Make subscriber `id`'s tag ring (`tag_slots` tags, FRP) over `tap_rings`' data
    /// ring; `snap`: most bytes of a block it keeps. Returns it and the rings its reader
    /// maps (its tag ring, the tap's data ring).
    /// `wake`: how its reader is woken. The ring is FRP (its writer never waits for the
    /// reader, which may therefore register on it and sleep) with a wake-up eventfd, and
    /// its tags are committed once per batch (deferred).
    pub fn create(
        id: u64,
        tap_rings: &TapRings,
        tag_slots: usize,
        snap: u32,
        wake: Moderation,
    ) -> beltway::Result<(Subscriber, TapRings)> {
        let cfg = RingConfig {
            sync: SyncMode::Frp,
            threshold: wake.packets.max(1),
            latency: wake.latency,
            // One registered reader (the subscriber); a spare for one that re-attaches.
            max_readers: 2,
            wake_fd: true,
            ..RingConfig::bytes((tag_slots * Tag::SIZE).max(1 << 12)).layout(Layout::Tags)
        };
        let mut tags = Writer::create(&format!("sub.{id}"), cfg)?;
        tags.set_deferred(true);
        let rings = TapRings {
            id,
            tags: tags.ring(),
            data: tap_rings.data.clone(),
        };
        Ok((
            Subscriber {
                id,
                tags,
                snap: snap.max(1),
            },
            rings,
        ))
    }
}

/// Subscribers that share a filter, and that filter's verdict on the current block.
#[derive(Debug)]
struct Group {
    program: Program,
    subs: Vec<Subscriber>,
    verdict: u32,
}

/// The subscribers' filters in one evaluation: what builds it, and what it built for the
/// groups' programs now (`None` while no group has a filter).
struct Joint {
    make: Classifier,
    now: Option<Box<dyn Classify>>,
    /// Per group with a filter, in group order: its verdict from `now`.
    verdicts: Vec<u32>,
}

impl std::fmt::Debug for Joint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Joint")
            .field("programs", &self.verdicts.len())
            .finish()
    }
}

/// A tap on one node: the writer side.
#[derive(Debug)]
pub struct Tap {
    pub(crate) id: u64,
    writer: IbufWriter,
    /// Whether the tap's own tag ring has readers that want every block (PipesFS); a
    /// shared tap copies only what a subscriber wants.
    plain: bool,
    groups: Vec<Group>,
    /// A shared tap's classifier.
    joint: Option<Joint>,
    /// Blocks the classifier looked at, and those nobody wanted (not copied).
    pub classified: u64,
    pub unwanted: u64,
    /// Blocks and bytes that left the node while tapped.
    outlet: Outlet,
}

impl Tap {
    /// Make the rings of tap `id` on the node labelled `label`.
    pub fn create(id: u64, label: &str, data_bytes: usize) -> beltway::Result<(Tap, TapRings)> {
        let name = format!("tap.{label}.{id}");
        let data_bytes = data_bytes.next_power_of_two().max(1 << 16);
        // The tag ring is FRP; the data ring must be lossless for write-through (its one
        // registered reader is the writer's own shadow, which follows the tag ring's
        // registered readers: none, so it never waits either).
        let tags = Writer::create(
            &name,
            RingConfig {
                sync: SyncMode::Frp,
                ..RingConfig::bytes((data_bytes / 16).max(1 << 12)).layout(Layout::Tags)
            },
        )?;
        let data = Writer::create(
            &format!("{name}.data"),
            RingConfig {
                buf_id: 1,
                ..RingConfig::bytes(data_bytes)
            },
        )?;
        let rings = TapRings {
            id,
            tags: tags.ring(),
            data: data.ring(),
        };
        let writer = IbufWriter::new(tags)?.with_default(data)?;
        Ok((
            Tap {
                id,
                writer,
                plain: true,
                groups: Vec::new(),
                joint: None,
                classified: 0,
                unwanted: 0,
                outlet: Outlet::default(),
            },
            rings,
        ))
    }

    /// A shared tap for [`Subscriber`]s: like [`Tap::create`], but a block is copied only
    /// when a subscriber wants it, as `classifier`'s evaluation of their programs says.
    pub fn shared(
        id: u64,
        label: &str,
        data_bytes: usize,
        classifier: Classifier,
    ) -> beltway::Result<(Tap, TapRings)> {
        let (mut tap, rings) = Tap::create(id, label, data_bytes)?;
        tap.plain = false;
        tap.joint = Some(Joint {
            make: classifier,
            now: None,
            verdicts: Vec::new(),
        });
        Ok((tap, rings))
    }

    /// Add a subscriber whose filter is `program` (empty: none): subscribers with equal
    /// programs share one verdict per block.
    pub fn subscribe(&mut self, program: Program, sub: Subscriber) {
        match self.groups.iter_mut().find(|g| g.program == program) {
            Some(g) => g.subs.push(sub),
            None => {
                self.groups.push(Group {
                    program,
                    subs: vec![sub],
                    verdict: 0,
                });
                self.rebuild();
            }
        }
    }

    /// The classifier for the groups' programs now.
    fn rebuild(&mut self) {
        let Some(j) = &mut self.joint else {
            return;
        };
        let programs: Vec<&[protocol::proto::BpfInsn]> = self
            .groups
            .iter()
            .filter(|g| !g.program.is_empty())
            .map(|g| g.program.as_slice())
            .collect();
        j.verdicts = vec![0; programs.len()];
        j.now = (!programs.is_empty()).then(|| (j.make)(&programs));
    }

    /// What its readers want: `None` for everything (a plain tap's readers, or a
    /// subscriber without a filter), else the distinct programs of its subscribers (none:
    /// nothing). For the tapped node, which may leave the rest in the kernel
    /// ([`crate::Filter::readers_want`]).
    pub fn wants(&self) -> Option<Vec<&[protocol::proto::BpfInsn]>> {
        if self.plain || self.groups.iter().any(|g| g.program.is_empty()) {
            return None;
        }
        Some(self.groups.iter().map(|g| g.program.as_slice()).collect())
    }

    /// Remove subscriber `id` (its reader sees the end of its stream). Whether it was here.
    pub fn unsubscribe(&mut self, id: u64) -> bool {
        let mut found = false;
        for g in &mut self.groups {
            if let Some(k) = g.subs.iter().position(|s| s.id == id) {
                g.subs.remove(k).tags.close();
                found = true;
            }
        }
        let before = self.groups.len();
        self.groups.retain(|g| !g.subs.is_empty());
        if self.groups.len() != before {
            self.rebuild();
        }
        found
    }

    /// How many subscribers it has.
    pub fn subscribers(&self) -> usize {
        self.groups.iter().map(|g| g.subs.len()).sum()
    }

    /// Copy the blocks of `tags` that leave the node (class not 0) into the tap: every
    /// one for a plain tap, those a subscriber wants for a shared one (one classifier pass
    /// per block for all distinct filters). An error stops the tap (its words).
    pub(crate) fn write(&mut self, store: &Store, tags: &[Tag]) -> Result<(), String> {
        self.send_tags(store, tags)
    }

    /// One block: classified (shared taps), copied once if anybody wants it, a tag for each
    /// subscriber that does. Flushed by the caller, once per batch.
    fn put(&mut self, h: &Fields, d: &[u8]) -> beltway::Result<()> {
        let mut wanted = self.plain;
        if let Some(Joint {
            now: Some(c),
            verdicts,
            ..
        }) = &mut self.joint
        {
            c.verdicts(d, h.orig_len, verdicts);
        }
        let mut v = self.joint.iter().flat_map(|j| j.verdicts.iter());
        for g in &mut self.groups {
            g.verdict = if g.program.is_empty() {
                u32::MAX
            } else {
                *v.next().expect("a verdict per group with a filter")
            };
            wanted |= g.verdict != 0;
        }
        self.classified += 1;
        if !wanted {
            self.unwanted += 1;
            return Ok(());
        }
        let tag = self
            .writer
            .write_through_parts(&[&h.encode(), d], h.class)?;
        for g in self.groups.iter_mut().filter(|g| g.verdict != 0) {
            for s in &mut g.subs {
                let keep = g.verdict.min(s.snap).min(d.len() as u32);
                s.tags.append_record(
                    &Tag {
                        len: HEADER as u32 + keep,
                        ..tag
                    }
                    .to_bytes(),
                )?;
            }
        }
        Ok(())
    }

    /// End of a batch: the tap's own ring wakes its readers now; each subscriber's tags
    /// are committed and its reader woken per its moderation (a wake-up still owed is
    /// [`Tap::wake_if_due`]'s).
    fn flush(&mut self) {
        self.writer.flush();
        for g in &mut self.groups {
            for s in &mut g.subs {
                s.tags.commit();
            }
        }
    }

    /// Wake the subscribers whose moderation's latency bound ran out (their packets came,
    /// fewer than the threshold, and no more came since). Returns when the next wake-up
    /// owed falls due, for the run loop to come back by then.
    pub(crate) fn wake_if_due(&mut self) -> Option<std::time::Instant> {
        let mut next: Option<std::time::Duration> = None;
        for g in &mut self.groups {
            for s in &mut g.subs {
                if let Some(left) = s.tags.wake_if_due() {
                    next = Some(next.map_or(left, |n| n.min(left)));
                }
            }
        }
        next.map(|d| std::time::Instant::now() + d)
    }

    /// The tap is taken away: its readers (and its subscribers') see the end of the stream.
    pub(crate) fn close(&mut self) {
        self.writer.close();
        for g in &mut self.groups {
            for s in &mut g.subs {
                s.tags.close();
            }
        }
    }
}

impl BlockOut for Tap {
    fn outlet(&mut self) -> &mut Outlet {
        &mut self.outlet
    }

    /// Only blocks that leave the node.
    fn takes(&mut self, t: &Tag, _len: usize) -> bool {
        t.class != 0
    }

    /// What a pcap stream of the tap needs: the capture time (0 for a block made in the
    /// run), the wire length (at least the block's; the block's own for a cropped one),
    /// the link type (Ethernet when the run does not say).
    fn head(&self, store: &Store, t: &Tag, d: &[u8]) -> Fields {
        let (ts_ns, orig_len) = match store.record(t) {
            Some((m, true)) => (m.ts_ns, m.orig_len.max(d.len() as u32)),
            Some((m, false)) => (m.ts_ns, d.len() as u32),
            None => (0, d.len() as u32),
        };
        RecordHeader {
            ts_ns,
            orig_len,
            link_type: store.link(t).unwrap_or(1) as u16,
        }
        .fields(d.len() as u32, t.class)
    }

    fn write(&mut self, _store: &Store, blocks: &mut [Outgoing<'_>]) -> Result<(), String> {
        for b in blocks.iter() {
            self.put(&b.head, b.data).map_err(|e| e.to_string())?;
        }
        self.flush();
        Ok(())
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.close();
    }
}

/// A tap as a node of the graph (label `__tap` and the tap's id): a sink on an out-arc of
/// the node it taps, which sends every block leaving that node, whichever arc or branch
/// the block takes, to the tap's rings ([`BlockOut`]). Put on and taken off at a quiet
/// point by the edit mailbox (`Space::tap_on`, `tap_off`), like any edit. A tap that
/// fails (its readers went away) warns and takes nothing more; the run goes on.
#[derive(Debug)]
pub(crate) struct TapNode {
    pub(crate) tap: Tap,
    stopped: bool,
    /// When a wake-up its subscribers are owed falls due ([`Tap::wake_if_due`]): declared
    /// to the space's readiness handle, so the loop comes back by then even idle.
    due: Option<std::time::Instant>,
}

/// Node filter `f`'s tap, if it is a tap node.
pub(crate) fn as_tap(f: &mut dyn crate::filter::Filter) -> Option<&mut Tap> {
    f.as_own_node()?
        .downcast_mut::<TapNode>()
        .map(|n| &mut n.tap)
}

/// The label prefix of tap nodes (the run's own, as channel endpoints are).
pub(crate) const TAP: &str = "__tap";

impl TapNode {
    pub(crate) fn new(tap: Tap) -> TapNode {
        TapNode {
            tap,
            stopped: false,
            due: None,
        }
    }

    /// Give the wake-ups owed whose time came; note when the next falls due.
    fn wake_owed(&mut self) {
        if self.due.is_some_and(|at| std::time::Instant::now() >= at) {
            self.due = self.tap.wake_if_due();
        }
    }
}

impl crate::filter::Filter for TapNode {
    fn process(&mut self, cx: &mut crate::filter::Ctx<'_>, batch: &mut crate::filter::Batch) {
        if self.stopped {
            return;
        }
        if let Err(e) = self.tap.write(cx.store, &batch.tags) {
            cx.warn(format!("tap stopped: {e}"));
            self.stopped = true;
            return;
        }
        if let Some(at) = self.tap.wake_if_due() {
            self.due = Some(self.due.map_or(at, |d| d.min(at)));
        }
    }

    fn epoch_end(&mut self, _cx: &mut crate::filter::Ctx<'_>) {
        self.wake_owed();
    }

    fn idle(&mut self) {
        self.wake_owed();
    }

    fn arm(&mut self, w: &mut crate::readiness::Arm<'_>, _source: bool) {
        if let Some(at) = self.due {
            w.deadline(at);
        }
    }

    fn accepts(&self) -> bool {
        !self.stopped
    }

    fn as_own_node(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn observes(&self) -> bool {
        true
    }
}

/// What the run keeps per node for its observers: how many taps read it, and the classes
/// seen leaving it (PipesFS shows one directory per class).
///
/// Classes are sampled, not counted per block: every batch for a node's first 1024
/// batches, every 64th after that, and every batch while a tap is on. A class that only
/// ever appears inside later, unsampled batches shows up late.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// Tap nodes on the node's out-arcs now.
    pub(crate) tapped: usize,
    batches: u64,
    classes: Vec<u16>,
}

/// Most distinct classes remembered per node.
const MAX_CLASSES: usize = 256;

impl Watch {
    /// Note the classes of an output batch (sampled, see above).
    #[inline]
    pub(crate) fn observe(&mut self, tags: &[Tag]) {
        self.batches += 1;
        if self.tapped == 0 && self.batches > 1024 && !self.batches.is_multiple_of(64) {
            return;
        }
        self.note(tags);
    }

    fn note(&mut self, tags: &[Tag]) {
        let mut last = 0;
        for t in tags {
            if t.class == 0 || t.class == last {
                continue;
            }
            last = t.class;
            if let Err(k) = self.classes.binary_search(&t.class) {
                if self.classes.len() < MAX_CLASSES {
                    self.classes.insert(k, t.class);
                }
            }
        }
    }

    /// The classes seen so far, ascending.
    pub(crate) fn classes(&self) -> Vec<u16> {
        self.classes.clone()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use beltway::{BufTable, IbufReader, Start};

    const WAKE: Moderation = Moderation {
        packets: Moderation::PACKETS,
        latency: Moderation::LATENCY,
    };

    /// Map rings as a reader process does: data segments only.
    pub(crate) fn observer(rings: &TapRings) -> IbufReader {
        let fd = |r: &RingRef| r.shared().fds()[0].try_clone_to_owned().unwrap();
        let tags = RingRef::from_fds("t", fd(&rings.tags), None).unwrap();
        let data = RingRef::from_fds("t.data", fd(&rings.data), None).unwrap();
        let mut table = BufTable::new();
        table.register(&data).unwrap();
        IbufReader::new(tags.reader(Start::Oldest).unwrap(), table).unwrap()
    }

    /// Everything a subscriber can read now: (block, wire length), and how many it lost.
    fn drain(r: &mut IbufReader) -> (Vec<(Vec<u8>, u32)>, u64) {
        let (mut got, mut lost) = (Vec::new(), 0);
        loop {
            match r.try_peek_acquire() {
                Ok(Some((_, p))) => {
                    let (h, b) = RecordHeader::decode(p.data).unwrap();
                    got.push((b.to_vec(), h.orig_len));
                    r.peek_complete().unwrap();
                }
                Ok(None) => break,
                Err(e) if e.is_overrun() => lost += 1,
                Err(e) => panic!("{e}"),
            }
        }
        (got, lost + r.tags().lost() / Tag::SIZE as u64)
    }

    /// A classifier for these tests: program `[(0, 0, 0, m), (6, 0, 0, v)]` keeps `v`
    /// bytes of a block whose first byte is a multiple of `m`. Counts its passes and the
    /// programs it was built for.
    fn test_classifier(
        passes: std::sync::Arc<std::sync::atomic::AtomicU64>,
        built: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
    ) -> Classifier {
        struct Modulo(Vec<(u8, u32)>, std::sync::Arc<std::sync::atomic::AtomicU64>);
        impl Classify for Modulo {
            fn verdicts(&mut self, block: &[u8], _wire: u32, out: &mut [u32]) {
                self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                for (o, &(m, v)) in out.iter_mut().zip(&self.0) {
                    *o = if block[0].is_multiple_of(m) { v } else { 0 };
                }
            }
        }
        std::sync::Arc::new(move |programs: &[&[protocol::proto::BpfInsn]]| {
            built.lock().unwrap().push(programs.len());
            Box::new(Modulo(
                programs.iter().map(|p| (p[0].3 as u8, p[1].3)).collect(),
                passes.clone(),
            )) as Box<dyn Classify>
        })
    }

    fn modulo(m: u8, v: u32) -> Program {
        vec![(0, 0, 0, m as u32), (6, 0, 0, v)]
    }

    /// One classifier pass per block for all distinct filters; a block nobody wants is not
    /// copied; each subscriber reads exactly what its filter keeps, cut to its verdict and
    /// snap length, from the one copy.
    #[test]
    fn subscribers_get_what_their_filters_keep_from_one_copy() {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::{Arc, Mutex};
        let passes = Arc::new(AtomicU64::new(0));
        let built = Arc::new(Mutex::new(Vec::new()));
        let (mut tap, rings) = Tap::shared(
            1,
            "t",
            1 << 20,
            test_classifier(passes.clone(), built.clone()),
        )
        .unwrap();
        let (a, ra) = Subscriber::create(10, &rings, 1024, u32::MAX, WAKE).unwrap();
        let (b, rb) = Subscriber::create(11, &rings, 1024, 3, WAKE).unwrap();
        let (c, rc) = Subscriber::create(12, &rings, 1024, u32::MAX, WAKE).unwrap();
        assert_eq!(tap.wants(), Some(vec![]), "no subscriber wants nothing");
        tap.subscribe(modulo(2, u32::MAX), a);
        // The same program: the same group, no new classifier.
        tap.subscribe(modulo(2, u32::MAX), b);
        tap.subscribe(modulo(5, 2), c);
        assert_eq!(
            *built.lock().unwrap(),
            vec![1, 2],
            "rebuilt per new program only"
        );
        assert_eq!(tap.wants().map(|w| w.len()), Some(2));
        let (mut ra, mut rb, mut rc) = (observer(&ra), observer(&rb), observer(&rc));
        for i in 0..100u8 {
            tap.put(
                &RecordHeader {
                    ts_ns: i as u64,
                    orig_len: 60,
                    link_type: 1,
                }
                .fields(6, 1),
                &[i, 1, 2, 3, 4, 5],
            )
            .unwrap();
        }
        tap.flush();
        assert_eq!(
            passes.load(Ordering::Relaxed),
            100,
            "one classifier pass per block for all three subscribers"
        );
        // Neither even nor a multiple of five: 40 of 100 blocks, never copied.
        assert_eq!((tap.classified, tap.unwanted), (100, 40));
        let (ga, la) = drain(&mut ra);
        let (gb, _) = drain(&mut rb);
        let (gc, _) = drain(&mut rc);
        assert_eq!(la, 0);
        assert_eq!(
            ga.iter().map(|g| g.0[0]).collect::<Vec<_>>(),
            (0..100).step_by(2).collect::<Vec<u8>>()
        );
        assert!(ga.iter().all(|g| g.0.len() == 6 && g.1 == 60));
        assert_eq!(
            gb.iter().map(|g| g.0.clone()).collect::<Vec<_>>(),
            (0..100)
                .step_by(2)
                .map(|i| vec![i, 1, 2])
                .collect::<Vec<_>>(),
            "snap length 3"
        );
        assert_eq!(
            gc.iter().map(|g| g.0.clone()).collect::<Vec<_>>(),
            (0..100).step_by(5).map(|i| vec![i, 1]).collect::<Vec<_>>(),
            "verdict 2 keeps 2 bytes"
        );
        // Unsubscribed: its reader sees the end; the others go on. The last of a program
        // gone, the classifier is rebuilt without it.
        assert!(tap.unsubscribe(11));
        assert_eq!(tap.subscribers(), 2);
        assert!(tap.unsubscribe(12));
        assert_eq!(*built.lock().unwrap(), vec![1, 2, 1]);
        // A subscriber without a filter: its readers want everything.
        let (d, _rd) = Subscriber::create(13, &rings, 1024, u32::MAX, WAKE).unwrap();
        tap.subscribe(Vec::new(), d);
        assert_eq!(tap.wants(), None);
    }

    /// A subscriber that does not read loses its own tags and records, counted; one that
    /// reads loses nothing, and the writer never waits.
    #[test]
    fn a_subscriber_that_stops_loses_only_its_own() {
        let none = test_classifier(Default::default(), Default::default());
        let (mut tap, rings) = Tap::shared(2, "t", 1 << 16, none).unwrap();
        let (slow, rs) = Subscriber::create(20, &rings, 4096, u32::MAX, WAKE).unwrap();
        let (fast, rf) = Subscriber::create(21, &rings, 4096, u32::MAX, WAKE).unwrap();
        tap.subscribe(Vec::new(), slow);
        tap.subscribe(modulo(1, u32::MAX), fast);
        let (mut rs, mut rf) = (observer(&rs), observer(&rf));
        let block = [7u8; 500];
        let mut fast_got = 0;
        for i in 0..2000u64 {
            tap.put(
                &RecordHeader {
                    ts_ns: i,
                    orig_len: 500,
                    link_type: 1,
                }
                .fields(block.len() as u32, 1),
                &block,
            )
            .unwrap();
            if i % 16 == 15 {
                tap.flush();
                let (g, l) = drain(&mut rf);
                assert_eq!(l, 0, "the reading subscriber lost records");
                fast_got += g.len();
            }
        }
        tap.flush();
        fast_got += drain(&mut rf).0.len();
        assert_eq!(fast_got, 2000);
        let (g, lost) = drain(&mut rs);
        assert!(
            lost > 0 && g.len() < 2000,
            "the stopped subscriber lost nothing: got {}, lost {lost}",
            g.len()
        );
        assert_eq!(
            g.len() as u64 + lost,
            2000,
            "every record is either read or counted lost"
        );
    }

    /// The writer never waits for an observer that does not read, and the observer, given
    /// only the data segments, sees that it lost records (and reads the newest intact).
    #[test]
    fn an_observer_that_never_reads_never_slows_the_writer() {
        let (mut tap, rings) = Tap::create(7, "t", 1 << 16).unwrap();
        let mut r = observer(&rings);
        let block = [0xabu8; 1000];
        // 20 x the data ring through the tap, nobody reading: must not block.
        for i in 0..1300u32 {
            let mut b = block;
            b[..4].copy_from_slice(&i.to_le_bytes());
            let h = RecordHeader {
                ts_ns: i as u64,
                orig_len: 1000,
                link_type: 1,
            };
            tap.writer
                .write_through_parts(&[&h.encode(b.len() as u32, 1), &b], 1)
                .unwrap();
        }
        tap.writer.flush();
        // Read in place, as PipesFS does: an overwritten block is an error for that block
        // only (its tag is consumed), never a stuck reader.
        let mut got = Vec::new();
        let mut overruns = 0;
        while r.tags_mut().readable() > 0 {
            let seq = match r.peek_acquire() {
                Ok(Some((_, p))) => RecordHeader::decode(p.data).unwrap().0.ts_ns,
                Ok(None) => break,
                Err(beltway::Error::Overrun { .. }) => {
                    overruns += 1;
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            match r.peek_complete() {
                Ok(()) => got.push(seq),
                Err(beltway::Error::Overrun { .. }) => overruns += 1,
                Err(e) => panic!("{e}"),
            }
        }
        let lost = r.tags().lost() / Tag::SIZE as u64 + overruns;
        assert!(lost > 0, "the observer lost nothing of 20 rings' worth");
        assert!(
            !got.is_empty() && got.windows(2).all(|w| w[0] < w[1]),
            "{got:?}"
        );
        assert_eq!(*got.last().unwrap(), 1299);
    }
}
