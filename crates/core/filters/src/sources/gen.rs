//! `gen`: synthetic blocks for benchmarks and tests, in a ring of their own.

use dataplane::{Args, Batch, BufId, Ctx, Filter, FilterError, Tag};

pub struct Gen {
    pattern: Vec<u8>,
    remaining: u64,
    size: usize,
    /// Where the blocks go in the ring.
    layout: GenRing,
    buf: BufId,
    seq: u64,
    /// `rewrite=yes`: write every block in full, never reuse a slot's bytes.
    rewrite: bool,
    /// When a slot's bytes repeat from lap to lap (see `pull`): the ring's size and the
    /// slots of a lap (a multiple of 256).
    lap: Option<(u64, u64)>,
    /// The next slot's index in its lap, and where that lap starts.
    slot: u64,
    lap_start: u64,
    /// Blocks at positions below this are written in full (a filter edited some block
    /// in place: every slot is rewritten once).
    fresh_until: u64,
    /// `rate=N`: blocks per second, each made when its time comes (from the first pull).
    rate: Option<(f64, Option<std::time::Instant>)>,
}

/// The longest one pull of a paced `gen` sleeps for its next block (the space's loop
/// gets a turn in between, so an interrupt is noticed).
const PACE_NAP: std::time::Duration = std::time::Duration::from_millis(20);

/// Where `gen` puts its blocks: a ring of its own (a power of two of at least 1 MiB, about
/// 1024 blocks' worth), one block every `stride` bytes. The stride is the block size plus
/// one cache line when the size is a multiple of 512: blocks of 1 KiB packed at 1 KiB would
/// all start in 4 of the L1 cache's 64 sets, so of a batch of 256 only the first lines of
/// the last 48 would stay in L1 between one filter's pass and the next; one line more per
/// block spreads the starts over every set (as DPDK's mempools spread their objects). A lap
/// is the first `slots` slots of the ring, a multiple of 256 (0: too few fit), so a slot
/// gets blocks with the same low sequence byte on every lap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenRing {
    pub stride: usize,
    pub ring: usize,
    pub slots: usize,
}

impl GenRing {
    pub fn new(size: usize) -> GenRing {
        let stride = if size.is_multiple_of(512) {
            size + 64
        } else {
            size
        };
        let ring = (size * 1024).next_power_of_two().max(1 << 20);
        GenRing {
            stride,
            ring,
            slots: ring / stride / 256 * 256,
        }
    }
}

impl Gen {
    pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
        let count = a.size("count", Some(0), 1000)?;
        let size = a.size("size", None, 1024)? as usize;
        if size == 0 || size > 1 << 20 {
            return Err(FilterError::bad("size", &size.to_string(), "1..=1M"));
        }
        let rewrite = match a.get("rewrite", None) {
            None | Some("no") => false,
            Some("yes") => true,
            Some(v) => return Err(FilterError::bad("rewrite", v, "yes or no")),
        };
        let rate = match a.size("rate", None, 0)? {
            0 => None,
            r => Some((r as f64, None)),
        };
        Ok(Box::new(Gen {
            rate,
            pattern: Vec::new(),
            remaining: count,
            size,
            layout: GenRing::new(size),
            buf: 0,
            seq: 0,
            rewrite,
            lap: None,
            slot: 0,
            lap_start: 0,
            fresh_until: 0,
        }))
    }
}

impl Filter for Gen {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        // Blocks live in a ring of their own (see [`GenRing`]): a batch (256) stays intact
        // while it walks the space, and the ring stays small enough to stay warm.
        // Byte i of block `seq` is (i * 31) ^ (seq's low byte), then the first 8 bytes are
        // `seq` itself. In a private ring, a lap is a multiple of 256 slots (the rest of
        // the ring is skipped), so a slot gets the same low byte on every lap and after
        // the first lap only the sequence number changes: like a NIC filling a capture
        // ring, the space's CPU then no longer writes each block's bytes. If a filter
        // edited a block in place, the next lap (every slot) is written in full again.
        if self.buf == 0 {
            let layout = self.layout;
            let (id, reusing) = cx.store.add_reusing_ring(layout.ring);
            self.buf = id;
            // (The store rounds a ring's size up to a power of two: `layout.ring` is one.)
            self.lap = reusing
                .filter(|&r| !self.rewrite && r == layout.ring as u64 && layout.slots > 0)
                .map(|r| (r, layout.slots as u64));
            self.fresh_until = self.lap.map_or(0, |(r, _)| r);
        }
        if let Some((r, _)) = self.lap {
            if cx.store.take_edited(self.buf) {
                self.fresh_until = self.lap_start + self.slot * self.layout.stride as u64 + r;
            }
        }
        let mut n = (max as u64).min(self.remaining) as usize;
        if let Some((rate, start)) = &mut self.rate {
            // A fixed offered rate: the blocks due by now (block k is due k/rate seconds
            // after the first pull), waiting for the next one when none is.
            let start = *start.get_or_insert_with(std::time::Instant::now);
            let due_at = |k: u64| start + std::time::Duration::from_secs_f64(k as f64 / *rate);
            let now = std::time::Instant::now();
            if due_at(self.seq) > now {
                std::thread::sleep((due_at(self.seq) - now).min(PACE_NAP));
            }
            let due = (start.elapsed().as_secs_f64() * *rate) as u64 + 1;
            n = n.min(due.saturating_sub(self.seq) as usize);
            if n == 0 {
                return true;
            }
        }
        if self.pattern.len() != self.size {
            self.pattern = (0..self.size).map(|i| (i as u8).wrapping_mul(31)).collect();
        }
        let (size, stride, buf) = (self.size, self.layout.stride, self.buf);
        // Runs of consecutive slots are allocated at once (within a lap; at most a quarter
        // of the ring), then each block is made in its slot.
        let most = (self.layout.ring / 4 / stride).max(1);
        let mut done = 0;
        while done < n {
            let mut run = (n - done).min(most);
            if let Some((_, slots)) = self.lap {
                run = run.min((slots - self.slot) as usize);
            }
            let (first, slots) = cx.store.alloc_in(buf, run * stride);
            for (j, slot) in slots.chunks_exact_mut(stride).enumerate() {
                let block = &mut slot[..size];
                let seq = self.seq.to_le_bytes();
                // The slot one lap back (pos - ring size) holds this block's bytes but for
                // the sequence number, unless this is the first lap or blocks were edited.
                if self.lap.is_none() || first.pos + ((j * stride) as u64) < self.fresh_until {
                    let lo = seq[0];
                    for (d, &p) in block.iter_mut().zip(&self.pattern) {
                        *d = p ^ lo;
                    }
                }
                match block.first_chunk_mut::<8>() {
                    Some(head) => *head = seq,
                    None => block.copy_from_slice(&seq[..size]),
                }
                self.seq += 1;
            }
            out.tags.extend((0..run).map(|j| Tag {
                pos: first.pos + (j * stride) as u64,
                len: size as u32,
                buf,
                class: 1,
            }));
            if let Some((r, slots)) = self.lap {
                self.slot += run as u64;
                if self.slot == slots {
                    cx.store.skip_lap(buf);
                    self.slot = 0;
                    self.lap_start += r;
                }
            }
            done += run;
        }
        out.shared.resize(out.tags.len(), false);
        let n = n as u64;
        self.remaining -= n;
        self.remaining > 0
    }
}

// The declarations of this file's filters are data in the catalog
// (`catalog::sources::GEN`); their constructors are below, paired with them in
// `filters::CONSTRUCTORS`.
