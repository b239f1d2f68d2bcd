//! Publish and subscribe (thesis 6.4, prefix sharing across runs): a stream offered under a
//! key to other runs of the same user, lossy towards its subscribers, who copy each block
//! out and check it was not overwritten meanwhile.

use super::ingress::{IngressWait, Subscription};
use super::{meta_at, ChannelConfig, Egress, Ingress, FILE_BIT};
use crate::filter::Ctx;
use crate::transport::{ANNOUNCE, HEADER_LEN, METAS, RECORD};
use beltway::{DbufView, IbufWriter, Layout, RingConfig, RingRef, Start, SyncMode, Tag, Writer};
use std::time::Instant;

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

impl Ingress {
    /// [`Ingress::next`] for a subscription: the next block the publisher has not yet
    /// overwritten, copied into this space's ring. Copy first, then check (thesis 4.5.4):
    /// a tag or a block found overwritten after it was read is counted as lost and skipped.
    pub(super) fn next_copied(&mut self, cx: &mut Ctx<'_>) -> beltway::Result<Option<Tag>> {
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
            let Some(n) = (t.len as usize).checked_sub(HEADER_LEN) else {
                return Err(corrupt(
                    t.pos,
                    format!("a block without its {HEADER_LEN}-byte header"),
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
            let mut head = [0u8; HEADER_LEN];
            let copied = match sub.view.resolve(&src) {
                Ok(d) => {
                    head.copy_from_slice(&d[..HEADER_LEN]);
                    let (local, dst) = cx.store.alloc_in(ring, n);
                    dst.copy_from_slice(&d[HEADER_LEN..]);
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
            let meta = meta_at(&head)
                .map_err(|e| corrupt(t.pos, format!("a block without its header: {e}")))?;
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
            if meta.has(RECORD) {
                crate::transport::restore(cx.store, &local, &meta, false);
            }
            return Ok(Some(local));
        }
    }
}
