//! Position arithmetic: absolute positions, epochs of the self-scaling (deck-cut) ring, and
//! the validity horizon ("tail") below which data may have been overwritten.
//!
//! Positions are absolute byte counts since the ring was created and only ever grow; they
//! are never reduced modulo the ring size, so any position names one byte of the stream
//! forever and overwrite is always detectable by comparing it with the tail.
//!
//! A ring's active size may change (thesis 4.5.1, deck-cut), but only at a lap boundary of
//! the current size. Each size is in force for an *epoch* that starts at an absolute
//! position; inside an epoch `offset(p) = (p - start) mod size`. Because an epoch lasts at
//! least one full lap, every still-valid position lies in the current epoch or the one
//! before it, so two epochs are all a reader ever needs. Pure code, property-tested.

/// A span of the stream during which the ring had one active size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    /// Absolute position at which this size took effect.
    pub start: u64,
    /// Active size in bytes; a power of two.
    pub size: u64,
}

impl Epoch {
    /// Offset in the data area of absolute position `pos` (which must lie in this epoch).
    #[inline]
    pub fn offset(&self, pos: u64) -> u64 {
        debug_assert!(pos >= self.start);
        (pos - self.start) & (self.size - 1)
    }

    /// Bytes from `pos` to the end of the lap that contains it (1..=size).
    #[inline]
    pub fn room_to_lap_end(&self, pos: u64) -> u64 {
        self.size - self.offset(pos)
    }

    /// Whether `pos` is a lap boundary of this epoch after at least one full lap.
    #[inline]
    pub fn at_lap_boundary(&self, pos: u64) -> bool {
        pos > self.start && self.offset(pos) == 0
    }
}

/// The lowest position still valid once everything below `end` has been written in epoch
/// `cur`, whose predecessor (if any) was `prev`. Positions below it may be overwritten.
///
/// In the first lap of an epoch, writing `w = end - cur.start` bytes overwrites offsets
/// `0..w`, which in the previous epoch's last lap held `cur.start - prev.size + offset`.
#[inline]
pub fn horizon(prev: Option<Epoch>, cur: Epoch, end: u64) -> u64 {
    debug_assert!(end >= cur.start);
    let written = end - cur.start;
    if written > cur.size {
        end - cur.size
    } else {
        match prev {
            None => 0,
            Some(p) => cur.start - p.size + written.min(p.size),
        }
    }
}

/// Pick the epoch containing `pos` from the current epoch and its predecessor.
#[inline]
pub fn epoch_for(prev: Option<Epoch>, cur: Epoch, pos: u64) -> Option<Epoch> {
    if pos >= cur.start {
        Some(cur)
    } else {
        match prev {
            Some(p) if pos >= p.start => Some(p),
            _ => None,
        }
    }
}

/// Deck-cut scaling policy (thesis 4.5.1): sizes are powers of two between `min` and `max`.
///
/// The thesis scales on "buffer pressure", the producer-consumer distance normalised to the
/// ring size, against a high and a low watermark. With a blocking (lossless) ring and a
/// writer faster than its reader, the distance sits at the high mark whatever the size, so
/// growing on that signal alone would drive every such ring to its maximum and out of the
/// cache. We therefore read the two watermarks as the two ways a ring can be wrong:
/// the high mark is hit when the writer finds the ring full, the low mark when a reader finds
/// it (nearly) empty and sleeps. Hitting *both* within one lap means the ring oscillates
/// between full and empty, i.e. it is too small to absorb the rate variation: grow.
/// Hitting at most one for `calm_laps` consecutive laps means one side is simply faster and
/// a smaller ring costs nothing but saves cache: shrink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scaling {
    pub min: u64,
    pub max: u64,
    /// Consecutive calm laps before shrinking.
    pub calm_laps: u32,
}

/// What one lap looked like, as seen by the writer at its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LapReport {
    /// The writer had to wait for space (fill reached the high watermark).
    pub writer_blocked: bool,
    /// A reader went to sleep on an empty ring (fill fell to the low watermark).
    pub reader_starved: bool,
}

impl Scaling {
    /// Decide the next size. `calm` counts consecutive calm laps and is updated in place.
    pub fn next_size(&self, size: u64, lap: LapReport, calm: &mut u32) -> u64 {
        if lap.writer_blocked && lap.reader_starved {
            *calm = 0;
            (size * 2).min(self.max)
        } else {
            *calm += 1;
            if *calm >= self.calm_laps && size > self.min {
                *calm = 0;
                (size / 2).max(self.min)
            } else {
                size
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A reference model: replay a history of epochs byte by byte, recording which absolute
    /// position every offset of the data area currently holds.
    fn model(epochs: &[Epoch], end: u64, max: u64) -> Vec<Option<u64>> {
        let mut cells = vec![None; max as usize];
        for p in 0..end {
            let e = epochs.iter().rev().find(|e| e.start <= p).unwrap();
            cells[e.offset(p) as usize] = Some(p);
        }
        cells
    }

    /// Generate an epoch history: sizes are powers of two, each epoch lasts whole laps.
    fn history() -> impl Strategy<Value = (Vec<Epoch>, u64)> {
        (proptest::collection::vec((0u32..4, 1u64..4), 1..6), 0u64..64).prop_map(|(spec, extra)| {
            let mut epochs = Vec::new();
            let mut start = 0;
            for (lg, laps) in spec {
                let size = 8u64 << lg;
                epochs.push(Epoch { start, size });
                start += size * laps;
            }
            let last = *epochs.last().unwrap();
            let end = last.start + extra % (last.size * 3);
            // Drop epochs that start after `end` (they would not exist yet).
            epochs.retain(|e| e.start <= end);
            (epochs, end)
        })
    }

    proptest! {
        /// Every position at or above the horizon is still intact in the data area, and
        /// the one just below it is not (within the addressable epochs).
        #[test]
        fn horizon_is_exact((epochs, end) in history()) {
            let cur = *epochs.last().unwrap();
            let prev = if epochs.len() > 1 { Some(epochs[epochs.len() - 2]) } else { None };
            let cells = model(&epochs, end, 64);
            let h = horizon(prev, cur, end);
            prop_assert!(h <= end);
            for p in h..end {
                let e = epoch_for(prev, cur, p);
                prop_assert!(e.is_some(), "valid position {} outside the two known epochs", p);
                prop_assert_eq!(cells[e.unwrap().offset(p) as usize], Some(p), "position {} lost above horizon {}", p, h);
            }
            // Exact within the two epochs readers can address: the position just below the
            // horizon is really gone. (Older data may survive a shrink in the cut-off part of
            // the ring, but no reader can address it any more, so it counts as lost.)
            let addressable = prev.map_or(cur.start, |p| p.start);
            if h > 0 && h - 1 >= addressable {
                let still_there = cells.iter().any(|c| *c == Some(h - 1));
                prop_assert!(!still_there, "horizon {} too conservative", h);
            }
        }

        /// The horizon never decreases as writing proceeds.
        #[test]
        fn horizon_monotonic((epochs, end) in history()) {
            let mut last = 0;
            let mut prev = None;
            for (i, e) in epochs.iter().enumerate() {
                let stop = epochs.get(i + 1).map_or(end, |n| n.start);
                for p in e.start..=stop {
                    let h = horizon(prev, *e, p);
                    prop_assert!(h >= last, "horizon fell from {} to {} at {}", last, h, p);
                    last = h;
                }
                prev = Some(*e);
            }
        }

        /// Scaling stays within bounds and powers of two.
        #[test]
        fn scaling_bounds(reports in proptest::collection::vec((any::<bool>(), any::<bool>()), 0..200)) {
            let s = Scaling { min: 4096, max: 1 << 20, calm_laps: 3 };
            let mut size = 1 << 16;
            let mut calm = 0;
            for (b, st) in reports {
                size = s.next_size(size, LapReport { writer_blocked: b, reader_starved: st }, &mut calm);
                prop_assert!(size.is_power_of_two() && size >= s.min && size <= s.max);
            }
        }
    }

    #[test]
    fn offsets_wrap_within_epoch() {
        let e = Epoch { start: 96, size: 32 };
        assert_eq!(e.offset(96), 0);
        assert_eq!(e.offset(127), 31);
        assert_eq!(e.offset(128), 0);
        assert_eq!(e.room_to_lap_end(100), 28);
        assert!(e.at_lap_boundary(128));
        assert!(!e.at_lap_boundary(96));
    }
}
