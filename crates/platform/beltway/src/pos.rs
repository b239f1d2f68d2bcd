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

/// Deck-cut scaling policy (thesis 4.5.1): sizes are powers of two between `min` and `max`,
/// decided at lap boundaries.
///
/// The thesis scales on "buffer pressure" (producer-consumer distance over ring size)
/// against two watermarks. On a lossless ring that signal saturates: a writer faster than
/// its reader keeps the ring full at every size, and a balanced pair swings between full and
/// empty at every size, so it cannot tell a ring that is too big for the cache from one that
/// is too small to absorb bursts. We keep the thesis' goal (the smallest ring that does not
/// cost throughput, which is what keeps it in L2/L3) and measure it directly:
///
/// - a window in which the writer never waited for space means the reader keeps up: the ring
///   is larger than needed, so after `calm_laps` such windows it halves;
/// - in windows where the writer did wait (the pipeline is saturated), the writer measures
///   throughput. After a halving, if throughput fell by more than `tolerance`, the previous
///   size was better: go back and hold there for a while (longer after each failed probe),
///   then probe again. If throughput holds, keep halving.
///
/// A window spans at least `window_bytes` (and one lap), so decisions on small rings are
/// not made on microseconds of noise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scaling {
    pub min: u64,
    pub max: u64,
    /// Consecutive unsaturated windows before shrinking.
    pub calm_laps: u32,
    /// Minimum bytes per decision window.
    pub window_bytes: u64,
    /// Relative throughput loss that makes a probe fail (e.g. 0.05).
    pub tolerance: f64,
}

/// What one window looked like, as seen by the writer at a lap boundary.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LapReport {
    /// Bytes written in the window.
    pub bytes: u64,
    /// Nanoseconds the window took.
    pub nanos: u64,
    /// The writer had to wait for space at least once (the pipeline was saturated).
    pub writer_blocked: bool,
}

/// The policy's memory between windows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScaleState {
    calm: u32,
    /// (size, throughput) before the last probe, while that probe is on trial.
    probe: Option<(u64, f64)>,
    /// Windows to stay put after a failed probe, and how long the next hold will be.
    hold: u32,
    next_hold: u32,
    /// Probe upward next (after a downward probe failed), instead of downward.
    up_next: bool,
    /// Best throughput seen at the current size.
    rate: Option<f64>,
}

impl Scaling {
    pub fn new(min: u64, max: u64, calm_laps: u32) -> Scaling {
        Scaling {
            min,
            max,
            calm_laps: calm_laps.max(1),
            window_bytes: 4 << 20,
            tolerance: 0.05,
        }
    }

    /// Decide the size for the next window.
    pub fn next_size(&self, size: u64, w: LapReport, st: &mut ScaleState) -> u64 {
        if !w.writer_blocked {
            // Unsaturated: the reader keeps up; throughput says nothing about the ring.
            st.probe = None;
            st.rate = None;
            st.calm += 1;
            if st.calm >= self.calm_laps && size > self.min {
                st.calm = 0;
                return (size / 2).max(self.min);
            }
            return size;
        }
        st.calm = 0;
        let rate = w.bytes as f64 / w.nanos.max(1) as f64;
        if let Some((before_size, before)) = st.probe.take() {
            // A smaller ring must hold throughput; a bigger one must clearly beat it (it
            // costs cache and memory).
            let ok = if size < before_size {
                rate >= before * (1.0 - self.tolerance)
            } else {
                rate > before * (1.0 + self.tolerance)
            };
            if !ok {
                st.next_hold = (st.next_hold * 2).clamp(4, 256);
                st.hold = st.next_hold;
                st.up_next = size < before_size;
                st.rate = Some(before);
                return before_size;
            }
            st.next_hold = 0;
            st.up_next = size > before_size;
        }
        st.rate = Some(st.rate.map_or(rate, |r| r.max(rate)));
        if st.hold > 0 {
            st.hold -= 1;
            return size;
        }
        let next = if st.up_next {
            (size * 2).min(self.max)
        } else {
            (size / 2).max(self.min)
        };
        if next == size {
            st.up_next = !st.up_next;
            return size;
        }
        st.probe = Some((size, st.rate.take().unwrap_or(rate)));
        next
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
        (
            proptest::collection::vec((0u32..4, 1u64..4), 1..6),
            0u64..64,
        )
            .prop_map(|(spec, extra)| {
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
            if h > addressable {
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

        /// Scaling stays within bounds and powers of two, whatever it observes.
        #[test]
        fn scaling_bounds(reports in proptest::collection::vec((any::<bool>(), 1u64..1_000_000), 0..300)) {
            let s = Scaling::new(4096, 1 << 20, 3);
            let mut size = 1 << 16;
            let mut st = ScaleState::default();
            for (blocked, nanos) in reports {
                size = s.next_size(size, LapReport { bytes: 1 << 20, nanos, writer_blocked: blocked }, &mut st);
                prop_assert!(size.is_power_of_two() && size >= s.min && size <= s.max);
            }
        }

        /// On a saturated pipeline whose throughput peaks at some size (a cache-like curve
        /// with noise), the policy spends most windows within a factor of two of the peak.
        #[test]
        fn scaling_settles_near_best_size(peak_lg in 14u32..22, seed in any::<u64>()) {
            let s = Scaling::new(1 << 12, 1 << 26, 4);
            let mut st = ScaleState::default();
            let mut size: u64 = 1 << 26;
            let mut rng = seed | 1;
            let mut near = 0;
            for i in 0..2000 {
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                let noise = 1.0 + ((rng % 1000) as f64 / 1000.0 - 0.5) * 0.04;
                let dist = (size.trailing_zeros() as f64 - peak_lg as f64).abs();
                // Throughput falls 15% per doubling away from the peak.
                let rate = 10.0 * 0.85f64.powf(dist) * noise;
                let bytes = 4 << 20;
                size = s.next_size(size, LapReport { bytes, nanos: (bytes as f64 / rate) as u64, writer_blocked: true }, &mut st);
                if i >= 1000 && (size.trailing_zeros() as i64 - peak_lg as i64).abs() <= 1 {
                    near += 1;
                }
            }
            prop_assert!(near >= 900, "only {} of 1000 windows near the peak 2^{}", near, peak_lg);
        }

        /// An unsaturated ring (the reader keeps up) shrinks to its minimum.
        #[test]
        fn scaling_unsaturated_shrinks(start_lg in 12u32..26) {
            let s = Scaling::new(1 << 12, 1 << 26, 2);
            let mut st = ScaleState::default();
            let mut size = 1u64 << start_lg;
            for _ in 0..64 {
                size = s.next_size(size, LapReport { bytes: 1 << 20, nanos: 1000, writer_blocked: false }, &mut st);
            }
            prop_assert_eq!(size, s.min);
        }
    }

    #[test]
    fn offsets_wrap_within_epoch() {
        let e = Epoch {
            start: 96,
            size: 32,
        };
        assert_eq!(e.offset(96), 0);
        assert_eq!(e.offset(127), 31);
        assert_eq!(e.offset(128), 0);
        assert_eq!(e.room_to_lap_end(100), 28);
        assert!(e.at_lap_boundary(128));
        assert!(!e.at_lap_boundary(96));
    }
}
