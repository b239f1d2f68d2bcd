//! The consumer's end of a channel: runs of tags renamed into the local store with their
//! metadata restored, announcements of files and shared rings mapped, markers held; how it
//! sleeps on its space's readiness handle.

use super::{meta_at, ChannelEnd, FILE_BIT};
use crate::filter::{Batch, Ctx, Filter};
use crate::store::BufId;
use crate::transport::{BlockIn, Fields, ANNOUNCE, HEADER_LEN, MARK, METAS, RECORD, SHARED};
use beltway::{DbufView, Reader, Tag};
use std::time::{Duration, Instant};

/// The consumer's end: a source that hands out the tags arriving through the channel.
pub struct Ingress {
    /// The channel's tag ring; None once the space has finished (see `finish`).
    pub(super) r: Option<Reader>,
    /// The channel's data ring, until mapped into the store on the first pull.
    pub(super) data: Option<DbufView>,
    /// Its id in this space's store.
    pub(super) local: BufId,
    pub(super) name: String,
    /// Tags of the last batch are read but not yet released.
    pub(super) held: bool,
    /// Bytes of the data ring one batch may hold.
    pub(super) max_bytes: u64,
    /// Whether the producer may name files to map.
    pub(super) trusted: bool,
    pub(super) link_set: bool,
    /// Producer file id -> local file region, from ANNOUNCE headers.
    pub(super) files: Vec<(BufId, BufId)>,
    /// Metadata of the blocks of a run sent by reference, from its METAS block, for its
    /// tags in order.
    pub(super) metas: std::collections::VecDeque<Fields>,
    /// A subscription to another run's published prefix (not a channel of this run).
    pub(super) sub: Option<Subscription>,
    /// `@busy` on the consumer: poll the channel instead of sleeping on it.
    pub(super) busy: bool,
    /// The marker it stopped at (see [`ChannelEnd`]): nothing is delivered until resumed.
    pub(super) marker: Option<u64>,
    /// How it sleeps on the space's readiness handle (see [`Ingress::arm`]).
    pub(super) wait: IngressWait,
}

/// An ingress asleep on its space's readiness handle: first within the channel's latency
/// bound (the producer batches its wake-ups), then deeply (woken at the next commit); the
/// producer's process watched through a pidfd when it is another process.
#[derive(Default)]
pub(super) struct IngressWait {
    /// When the shallow sleep ends (set by the first arming after data).
    pub(super) shallow_until: Option<Instant>,
    /// The producer's pidfd; `peer_checked` once looked for (none in this process).
    pub(super) pidfd: Option<std::os::fd::OwnedFd>,
    pub(super) peer_checked: bool,
}

/// How often a subscriber of another run's published stream looks for new tags (it reads
/// a ring opened by name, whose producer cannot wake it).
const POLL: Duration = Duration::from_millis(50);

/// A subscriber's side of a published stream: the publisher's data ring (read by copying,
/// since the publisher may overwrite it at any time), the ring in this space the copies
/// go to, and what was received and lost.
pub(super) struct Subscription {
    pub(super) view: DbufView,
    /// Bytes of the publisher's data ring, and of the ring the copies go to.
    pub(super) size: u64,
    /// The copies' ring in this space's store, made on the first pull.
    pub(super) ring: Option<BufId>,
    pub(super) received: u64,
    /// Blocks lost to overwrite: their tags (the subscriber fell a whole tag ring behind)
    /// or their data (the data ring lapped first, or while a block was being copied).
    pub(super) lost: u64,
    /// Bytes of the lost blocks whose tags were read (the others' lengths are unknown).
    pub(super) lost_bytes: u64,
}

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
                    *budget += t.len as u64 + HEADER_LEN as u64;
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
                        *budget += t.len as u64 + HEADER_LEN as u64;
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
            let meta = self.metas.pop_front().unwrap_or(Fields::default());
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
        let meta = meta_at(data)
            .map_err(|e| corrupt(t.pos, format!("a block without its header: {e}")))?;
        if meta.flags & ANNOUNCE != 0 && meta.flags & SHARED != 0 {
            let key = data
                .get(HEADER_LEN..HEADER_LEN + 8)
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
                std::path::PathBuf::from(String::from_utf8_lossy(&data[HEADER_LEN..]).into_owned());
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
            if !self.metas.is_empty() || data.len() != HEADER_LEN * (n + 1) {
                return Err(corrupt(t.pos, format!("a metadata block of {} bytes for {n} blocks (or before the last one's tags were read)", data.len())));
            }
            for b in data[HEADER_LEN..].chunks_exact(HEADER_LEN) {
                let m = meta_at(b).map_err(|e| corrupt(t.pos, format!("in a metadata block: {e}")));
                match m {
                    Ok(m) => self.metas.push_back(m),
                    Err(e) => {
                        self.metas.clear();
                        return Err(e);
                    }
                }
            }
            return Ok(None);
        }
        let local = Tag {
            pos: t.pos + HEADER_LEN as u64,
            len: t.len - HEADER_LEN as u32,
            ..whole
        };
        self.restore(cx, &local, meta);
        Ok(Some(local))
    }

    /// Record metadata and link type of a block, as the producer had them (a block
    /// without record metadata carries none).
    fn restore(&mut self, cx: &mut Ctx<'_>, t: &Tag, meta: Fields) {
        if !meta.has(RECORD) {
            return;
        }
        let known = t.buf == self.local && self.link_set;
        if crate::transport::restore(cx.store, t, &meta, known) {
            self.link_set |= t.buf == self.local;
        }
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

impl Filter for Ingress {
    crate::block_in_source!();

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

/// A channel's stream ends when its producer closed it and what it committed was read
/// (`r` is then gone); a channel that fails ends its own stream with a warning and does
/// not stop the run (its producer, or the space that died, reports why).
impl BlockIn for Ingress {
    fn ended(&self) -> bool {
        self.r.is_none()
    }

    fn wait(&mut self, w: &mut crate::readiness::Arm<'_>) {
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

    fn receive(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> Result<bool, String> {
        if let Some(v) = self.data.take() {
            self.local = cx.store.map_dbuf(v);
        }
        // The previous batch has walked the whole space: its blocks may be reused.
        self.release();
        if self.marker.is_some() {
            // Held at a marker until the space has served it (it is not over).
            return Ok(true);
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
        Ok(more)
    }
}

impl Ingress {
    /// [`Filter::pull`]'s reading: runs of tags until `max` blocks or the byte budget, or
    /// nothing more is committed now; false at the end of the stream.
    fn pull_runs(
        &mut self,
        cx: &mut Ctx<'_>,
        out: &mut Batch,
        max: usize,
        bytes: &mut u64,
    ) -> bool {
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
                Ok(false) => match self
                    .r
                    .as_mut()
                    .map_or(Ok(beltway::Ready::Eof), |r| Ok(r.ready_now()))
                {
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
