//! What specializes a ring, as chosen by its creator: the data [`Layout`], the
//! multi-consumer [`SyncMode`], where a new reader [`Start`]s, and the [`RingConfig`] with
//! its validation.
//!
//! Owns: the configuration types and their codes in the shared header. Does not own: the
//! byte formats of each layout (`format`) or the behaviour they select (writer, reader).

use crate::error::{Error, Result};
use std::time::Duration;

/// Data layout of a ring (thesis 4.5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// b-DBuf: an unstructured byte stream; writes may wrap.
    Bytes = 1,
    /// fr-DBuf: one record per fixed-size slot (4-byte length, then payload).
    Slots = 2,
    /// vr-DBuf: variable records with an inline 8-byte header, never wrapping.
    Records = 3,
    /// Fixed 16-byte slots holding tags (the IBuf layout).
    Tags = 4,
}

impl Layout {
    pub(super) fn from_code(c: u32) -> Option<Layout> {
        Some(match c {
            1 => Layout::Bytes,
            2 => Layout::Slots,
            3 => Layout::Records,
            4 => Layout::Tags,
            _ => return None,
        })
    }
    pub fn is_record(self) -> bool {
        self != Layout::Bytes
    }
}

/// Multi-consumer synchronization (thesis 4.5.4; SRP here is the lossless, blocking form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Slow reader preference: lossless; the writer blocks on the slowest reader.
    Srp = 1,
    /// Fast reader preference: the writer never waits; late readers detect overwrite.
    Frp = 2,
    /// Medium reader preference: the writer waits on a shared pointer R that each reader
    /// raises to its previous position; tardy readers may lose data and detect it.
    Mrp = 3,
}

impl SyncMode {
    pub(super) fn from_code(c: u32) -> Option<SyncMode> {
        Some(match c {
            1 => SyncMode::Srp,
            2 => SyncMode::Frp,
            3 => SyncMode::Mrp,
            _ => return None,
        })
    }
}

/// Where a newly attached reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The oldest data still in the ring that the reader may have (for SRP: the oldest data
    /// some existing reader has not released; for lossy rings: the tail).
    Oldest,
    /// Only data written from now on.
    Latest,
}

/// Everything that specializes a ring.
#[derive(Debug, Clone)]
pub struct RingConfig {
    /// Size of the data area in bytes (power of two, at least 4 KiB). With self-scaling this
    /// is the maximum size.
    pub size: usize,
    /// Enables deck-cut self-scaling down to this size (power of two).
    pub min_size: Option<usize>,
    /// Active size at creation for a self-scaling ring (default: `size`).
    pub initial_size: Option<usize>,
    /// Unsaturated windows (the writer never waited) before a self-scaling ring halves.
    pub calm_laps: u32,
    /// Minimum bytes between two scaling decisions (at least one lap).
    pub scaling_window: usize,
    pub layout: Layout,
    /// Slot size for [`Layout::Slots`] (power of two, >= 16).
    pub slot_size: u32,
    pub sync: SyncMode,
    /// Reader slots in the control segment.
    pub max_readers: u32,
    /// Event batching threshold (commits per wake-up); 1 disables batching.
    pub threshold: u32,
    /// Latency bound for batched wake-ups.
    pub latency: Duration,
    /// Permission bits of the data segment (named rings).
    pub mode: u32,
    /// Permission bits of the control segment; readers that cannot write it are
    /// unregistered observers. Default: same as `mode`.
    pub ctl_mode: Option<u32>,
    /// Allow several producers (acquire/complete with the open/closed bitmap); slot and
    /// tag layouts only.
    pub multi_producer: bool,
    /// Identifier of this DBuf inside tags.
    pub buf_id: u16,
    /// How often a blocked party checks that its peer is still alive.
    pub liveness: Duration,
    /// SRP only: readers may come and go. The writer stays lossless towards the readers
    /// attached, and writes on without waiting while none is (no broken pipe when the
    /// last one leaves). For a lossless stream offered to whoever attaches (a stream that
    /// must not wait for its readers, like a published capture, is FRP instead).
    pub detachable: bool,
    /// Give the ring a wake-up eventfd (anonymous rings only; it travels with the segments):
    /// signalled with every wake of sleeping readers, for a consumer that sleeps on a
    /// readiness handle ([`crate::Reader::arm`]) instead of the futex. Off: a wake costs
    /// the futex wake alone.
    pub wake_fd: bool,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            size: 1 << 20,
            min_size: None,
            initial_size: None,
            calm_laps: 1,
            scaling_window: 4 << 20,
            layout: Layout::Bytes,
            slot_size: 2048,
            sync: SyncMode::Srp,
            max_readers: 64,
            threshold: 32,
            latency: Duration::from_millis(1),
            mode: 0o600,
            ctl_mode: None,
            multi_producer: false,
            buf_id: 1,
            liveness: Duration::from_millis(100),
            detachable: false,
            wake_fd: false,
        }
    }
}

impl RingConfig {
    pub fn bytes(size: usize) -> Self {
        RingConfig {
            size,
            ..Default::default()
        }
    }
    pub fn layout(mut self, l: Layout) -> Self {
        self.layout = l;
        if l == Layout::Tags {
            self.slot_size = 16;
        }
        self
    }
    pub fn sync(mut self, s: SyncMode) -> Self {
        self.sync = s;
        self
    }
    pub fn slots(mut self, slot: u32) -> Self {
        self.layout = Layout::Slots;
        self.slot_size = slot;
        self
    }
    pub fn threshold(mut self, t: u32) -> Self {
        self.threshold = t;
        self
    }
    /// See [`RingConfig::wake_fd`].
    pub fn wake_fd(mut self, on: bool) -> Self {
        self.wake_fd = on;
        self
    }
    pub fn self_scaling(mut self, min: usize, initial: usize) -> Self {
        self.min_size = Some(min);
        self.initial_size = Some(initial);
        self
    }

    pub(super) fn validate(&self, name: &str) -> Result<()> {
        let bad = |why: String| {
            Err(Error::Config {
                name: name.to_string(),
                why,
            })
        };
        if !self.size.is_power_of_two() || self.size < 4096 {
            return bad(format!("size {} is not a power of two >= 4096", self.size));
        }
        if let Some(min) = self.min_size {
            if !min.is_power_of_two() || min > self.size || min < 4096 {
                return bad(format!(
                    "min_size {min} must be a power of two in 4096..={}",
                    self.size
                ));
            }
            let init = self.initial_size.unwrap_or(self.size);
            if !init.is_power_of_two() || init < min || init > self.size {
                return bad(format!(
                    "initial_size {init} must be a power of two in {min}..={}",
                    self.size
                ));
            }
            if self.multi_producer {
                return bad("self-scaling rings take a single producer".into());
            }
        }
        if matches!(self.layout, Layout::Slots | Layout::Tags)
            && (!self.slot_size.is_power_of_two()
                || self.slot_size < 16
                || self.slot_size as usize > self.min_cap())
        {
            return bad(format!(
                "slot size {} must be a power of two in 16..=ring size",
                self.slot_size
            ));
        }
        if self.layout == Layout::Tags && self.slot_size != 16 {
            return bad("tag rings have 16-byte slots".into());
        }
        if self.multi_producer && !matches!(self.layout, Layout::Slots | Layout::Tags) {
            return bad("multiple producers need a slot or tag layout (containers)".into());
        }
        if self.max_readers == 0 || self.max_readers > 4096 {
            return bad(format!(
                "max_readers {} must be in 1..=4096",
                self.max_readers
            ));
        }
        if self.threshold == 0 {
            return bad("threshold must be at least 1".into());
        }
        Ok(())
    }

    pub(super) fn min_cap(&self) -> usize {
        self.min_size.unwrap_or(self.size)
    }
}
