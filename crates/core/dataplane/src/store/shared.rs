//! [`SharedRing`]: a space's data ring in shared memory, read in place by other spaces
//! of this process, with the guards that keep a block until the channels it was sent to
//! have released it; and the process-wide table other spaces find such rings by
//! ([`shared_ring`]).

/// Rings shared with other spaces of this process, by key (what a channel announces).
static SHARED_RINGS: std::sync::Mutex<Vec<(u64, beltway::RingRef)>> =
    std::sync::Mutex::new(Vec::new());
static NEXT_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The ring registered under `key` by a space of this process, if it still exists.
pub fn shared_ring(key: u64) -> Option<beltway::RingRef> {
    SHARED_RINGS
        .lock()
        .ok()?
        .iter()
        .find(|r| r.0 == key)
        .map(|r| r.1.clone())
}

/// A space's data ring in shared memory. Its blocks are read in place by other spaces of
/// the process, so before reusing space the ring waits until the tags that point there
/// have been released by their channels' consumers (guards, oldest position first).
#[derive(Debug)]
pub struct SharedRing {
    pub(super) w: beltway::Writer,
    pub(super) view: beltway::DbufView,
    pub(super) key: u64,
    /// (start of the first block, channel index, tag ring position the consumer must
    /// release, end of the last block), one per batch sent through a channel, sorted by
    /// start (blocks are sent in about the order they were allocated).
    pub(super) guards: std::collections::VecDeque<(u64, usize, u64, u64)>,
    /// Channels' tag rings and how far their consumers had released when last asked.
    pub(super) channels: Vec<(beltway::RingRef, u64, beltway::ReleaseCache)>,
    /// Its producer writes only what differs from one lap before (see
    /// [`super::Store::add_reusing_ring`]); `edited`: a filter edited a block in place.
    pub(super) reused: bool,
    pub(super) edited: bool,
}

impl SharedRing {
    pub(super) fn new(size: usize) -> SharedRing {
        let size = size.next_power_of_two().max(4096);
        let w = beltway::Writer::create("sl-space-ring", beltway::RingConfig::bytes(size))
            .expect("create a shared-memory ring (memfd)");
        let r = w.ring();
        let key = NEXT_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut v) = SHARED_RINGS.lock() {
            v.push((key, r.clone()));
        }
        SharedRing {
            view: beltway::DbufView::new(&r),
            w,
            key,
            guards: Default::default(),
            channels: Vec::new(),
            reused: false,
            edited: false,
        }
    }

    pub(super) fn alloc(&mut self, len: usize) -> (u64, &mut [u8]) {
        let need = self.w.contiguous_need(len).expect("block fits the ring");
        // Every block that starts below `need` is about to be overwritten: its tags must
        // have been released.
        while let Some(&(start, ch, tag_end, _)) = self.guards.front() {
            if start >= need {
                break;
            }
            let (ring, seen, state) = &mut self.channels[ch];
            if *seen < tag_end {
                *seen = ring.released();
                if *seen < tag_end {
                    // A consumer that went away releases nothing more: nothing to wait for.
                    let _ = ring.wait_released_with(tag_end, state);
                    *seen = ring.released().max(tag_end);
                }
            }
            self.guards.pop_front();
        }
        self.w.alloc_contiguous(len).expect("block fits the ring")
    }

    pub(super) fn trim_last(&mut self, pos: u64, reserved: usize, used: usize) {
        self.w.give_back(pos, reserved, used);
    }

    /// An in-place view of a block of this ring for an edit (the block is exclusive: no
    /// arc of the space and no channel holds it).
    pub(super) fn get_mut(&mut self, pos: u64, len: usize) -> Option<&mut [u8]> {
        self.w.rewrite(pos, len)
    }

    /// Whether the ring still holds `len` bytes at `pos`.
    pub(super) fn holds(&self, pos: u64, len: usize) -> bool {
        self.view
            .resolve(&beltway::Tag {
                pos,
                len: len as u32,
                buf: self.view.id(),
                class: 0,
            })
            .is_ok()
    }

    /// Whether the block starting at `pos` was sent to a channel whose consumer may still
    /// read it (as far as this ring last looked: a stale answer errs on "sent").
    pub(super) fn sent(&self, pos: u64) -> bool {
        // Guards cover whole batches: any unreleased one whose range holds `pos`.
        let upto = self.guards.partition_point(|g| g.0 <= pos);
        self.guards
            .range(..upto)
            .rev()
            .any(|&(start, ch, tag_end, end)| {
                start <= pos && pos < end && self.channels[ch].1 < tag_end
            })
    }

    /// Move the next allocation to the start of the next lap (see [`super::Store::skip_lap`]).
    pub(super) fn skip_lap(&mut self) {
        self.w.skip_lap();
    }

    pub(super) fn guard(&mut self, tags: &beltway::RingRef, tag_end: u64, start: u64, end: u64) {
        let ch = match self
            .channels
            .iter()
            .position(|c| std::ptr::eq(c.0.shared(), tags.shared()))
        {
            Some(i) => i,
            None => {
                self.channels
                    .push((tags.clone(), 0, beltway::ReleaseCache::default()));
                self.channels.len() - 1
            }
        };
        // Keep the queue sorted by block start; nearly always an append, which takes the
        // deque's plain push (no search, no shifting).
        if self.guards.back().is_none_or(|g| g.0 <= start) {
            self.guards.push_back((start, ch, tag_end, end));
            return;
        }
        let at = self
            .guards
            .iter()
            .rposition(|g| g.0 <= start)
            .map_or(0, |i| i + 1);
        self.guards.insert(at, (start, ch, tag_end, end));
    }
}

impl Drop for SharedRing {
    fn drop(&mut self) {
        if let Ok(mut v) = SHARED_RINGS.lock() {
            v.retain(|r| r.0 != self.key);
        }
    }
}
