//! The producer's end of a channel: blocks written through into the data ring behind their
//! header, or sent as tags into rings and files both spaces map, with their metadata in one
//! block per run; guards on shared rings; commits per batch.

use super::{meta_of, ChannelEnd, FILE_BIT};
use crate::filter::{Batch, Ctx, Filter};
use crate::store::BufId;
use crate::transport::{Fields, ANNOUNCE, HEADER_LEN, MARK, METAS, SHARED};
use beltway::{IbufWriter, RingRef, Tag};
use std::time::{Duration, Instant};

/// The producer's end: a sink that writes each block it receives into the channel.
pub struct Egress {
    pub(super) w: IbufWriter,
    pub(super) name: String,
    pub(super) failed: bool,
    /// Files and shared rings of this space the consumer has been told about.
    pub(super) announced: Vec<BufId>,
    pub(super) same_process: bool,
    /// The consumer maps files this space names (it trusts this space).
    pub(super) file_refs: bool,
    /// The channel's tag ring (what guards on shared rings wait for).
    pub(super) tags: RingRef,
    /// A published stream ([`publish`]): written only while someone subscribes, and a
    /// failure ends the publishing, not the space.
    pub(super) published: bool,
    /// When the published stream's dead subscribers were last looked for.
    pub(super) reaped: Instant,
    /// Shared rings this batch sent blocks of, each with the start of its earliest block
    /// and the end of its latest: one guard per ring and batch (see [`Egress::end_batch`]).
    pub(super) guards: Vec<(BufId, u64, u64)>,
    /// Tags (their bytes) of blocks sent by reference not yet written, and their
    /// metadata (see [`Egress::send_ref`]); whether any of those has some.
    pub(super) run: Vec<u8>,
    pub(super) metas: Vec<u8>,
    pub(super) metas_any: bool,
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
            let a = Fields {
                ts_ns: t.buf as u64,
                flags,
                ..Fields::default()
            };
            match r {
                Ref::Shared(key) => self
                    .w
                    .write_through_parts(&[&a.encode(), &key.to_le_bytes()], 1)?,
                Ref::File(path) => self
                    .w
                    .write_through_parts(&[&a.encode(), path.as_os_str().as_encoded_bytes()], 1)?,
                Ref::Copy => unreachable!("blocks that are copied are not sent by reference"),
            };
            self.announced.push(t.buf);
        }
        // A block without record metadata (made by gen, an editor, ...) is its tag alone.
        let meta = if records {
            meta_of(cx, t)
        } else {
            Fields::default()
        };
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
    fn queue(&mut self, t: &Tag, meta: Fields) {
        if meta.flags != 0 && !self.metas_any {
            // The first block of the run with metadata: the ones before it had none (a
            // run without any carries no METAS block at all).
            self.metas_any = true;
            self.metas
                .resize(self.run.len() / Tag::SIZE * HEADER_LEN, 0);
        }
        if self.metas_any {
            self.metas.extend_from_slice(&meta.encode());
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
                self.queue(t, Fields::default());
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
            let h = Fields {
                orig_len: n,
                flags: METAS,
                ..Fields::default()
            };
            self.w.write_through_parts(&[&h.encode(), &self.metas], 1)?;
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
        let meta = meta_of(cx, t);
        self.w
            .write_through_parts(&[&meta.encode(), d], t.class)
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

impl ChannelEnd for Egress {
    fn mark(&mut self, id: u64) -> beltway::Result<()> {
        self.write_run()?;
        let m = Fields {
            ts_ns: id,
            flags: MARK,
            ..Fields::default()
        };
        self.w.write_through_parts(&[&m.encode()], 1)?;
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

/// A ring's bytes written and not yet released by every lossless reader, and its size.
fn held(r: &RingRef) -> (u64, u64, beltway::RingStats) {
    let s = r.stats();
    let released = r.released();
    let used = if released == u64::MAX {
        0
    } else {
        s.write_pos.saturating_sub(released)
    };
    (used.min(s.active_size), s.active_size, s)
}

impl Filter for Egress {
    fn ring(&self) -> Option<protocol::graph::RingGauge> {
        let (tags_used, tags_size, s) = held(&self.tags);
        let (data_used, data_size) = self.w.default_ring().map_or((0, 0), |d| {
            let (u, z, _) = held(&d);
            (u, z)
        });
        Some(protocol::graph::RingGauge {
            tags_used,
            tags_size,
            data_used,
            data_size,
            readers: s.readers,
            writer_waits: s.writer_waits,
            wakeups: s.wakeups,
        })
    }
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
