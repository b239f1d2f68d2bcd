//! Adaptive system-call batching (seed 002, Algorithms 1 and 2): when to take frames from
//! a receive ring, when to hand its slots back and when to sleep; when to kick a transmit
//! ring; which of n rings a frame goes to (f(n)). Pure logic over two small traits
//! ([`RxSlots`], [`TxSlots`]) that the kernel rings implement ([`crate::afpacket::RxRing`],
//! [`crate::tx::TxRing`]) and the tests implement with models, so the bookkeeping is
//! checked against any arrival pattern without a kernel.
//!
//! ## The seed's local struct, on Linux
//!
//! The seed keeps, per hardware ring, a local `struct ring { avb, curr, limit }` and
//! synchronizes with the hardware ring (netmap's ioctl) only when the local view runs out.
//!
//! **Receive (Algorithm 2, [`RxView`]).** The hardware ring is a TPACKET_V3 ring; its
//! slots are the ring's *blocks* (the kernel retires a block to user space when it is
//! full or its retire timer fires). `curr` is the sequence number of the next block to
//! take (block `curr % blocks`, lap `curr / blocks`); `avb` the blocks ahead of `curr`
//! that the kernel has retired (status `TP_STATUS_USER`), as counted at the last
//! refresh; `limit` that count at the refresh. Taking a block is a memory read, no system
//! call. Handing slots back (`hw_ring.avb -= limit - avb; hw_ring.curr = curr`) is the
//! store of `TP_STATUS_KERNEL` into each finished block's status word, in order; the
//! refresh (`ring.avb = hw_ring.avb`) re-reads the status words ahead. Both happen when
//! `avb` falls below `threshold` blocks, and whenever the view is empty. A block is
//! *finished* when its frames have walked the graph (the lent-memory rule: a block goes
//! back only after its batch, see [`crate::LentMemory`]), so the hand-back gives back the
//! finished prefix. "Issue ioctl and poll" is `poll(2)` on the socket, issued only when
//! the view is empty after a refresh.
//!
//! **Rate adaptation ([`Gather`]).** The seed sets the receive threshold "based on the
//! rate at which [the application] is able to process data". TPACKET_V3 hands frames over
//! block-wise, so the cost that matters is wake-ups: a `poll` that sleeps is woken at the
//! next block retire, which at a low rate (or behind a kernel filter that passes few
//! frames) is the retire timer, every few milliseconds, with a nearly empty block. So when
//! the view is empty, [`Gather::wait`] first sleeps (not in `poll`, which the retire
//! would end) for as long as the measured rate needs to bring `threshold frames` (the
//! batch a wake-up aims at), never past the latency bound nor half the time the ring
//! holds at that rate; only a view still empty after that polls. At a high rate the
//! wait is short and each wake-up takes every retired block at once (big batches); at a
//! low rate one wake-up takes many small blocks. The retire timer itself stays short, so
//! a frame becomes visible within it and the bound holds.
//!
//! **Transmit (Algorithm 1, [`TxView`]).** The hardware ring is a PACKET_TX_RING
//! (TPACKET_V2, one frame per slot). `avb` is the allotment of free slots (status
//! `TP_STATUS_AVAILABLE` or `_WRONG_FORMAT`) ahead of `curr`, counted at the last refresh;
//! `limit` that count. Filling a slot is a copy and a status store. When the allotment is
//! used up the ring is kicked (`hw_ring.avb -= limit; hw_ring.curr = curr`: one `send(2)`
//! hands every marked frame to the device); the next frame finds the view empty and
//! refreshes it from the status words ("issue ioctl and poll": `poll(2)` for POLLOUT only
//! when no slot is free). Sparse traffic is kicked by the caller's latency bound
//! ([`TxView::flush`]), as the seed allows.
//!
//! **Queue choice ([`QueueChoice`], the seed's f(n)).** With n rings, each frame goes to
//! ring `f(n)`: uniformly random as in the seed (a frame that finds its ring's view empty
//! is offered to another draw), round-robin, or a flow hash (Ethernet/IPv4/IPv6 addresses
//! and TCP/UDP ports), which keeps each flow on one ring and so in order.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Which scheme a ring runs: today's fixed timeouts, or the seed's adaptive batching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batching {
    /// Receive: `poll` until the kernel's block retire timeout (`latency=`) hands over a
    /// block. Transmit: a kick per `batch=` frames or `latency=`, and when input pauses.
    Fixed,
    /// Receive: Algorithm 2 with [`Gather`]. Transmit: Algorithm 1 ([`TxView`]).
    Adaptive,
}

impl Batching {
    /// `fixed` or `adaptive`.
    pub fn parse(s: &str) -> Option<Batching> {
        match s {
            "fixed" => Some(Batching::Fixed),
            "adaptive" => Some(Batching::Adaptive),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Batching::Fixed => "fixed",
            Batching::Adaptive => "adaptive",
        }
    }
}

/// The seed's f(n): which of n rings the next frame goes to (or is read from).
#[derive(Debug, Clone)]
pub enum QueueChoice {
    /// Uniformly random (the seed's choice, `f(n) = X ~ U([0, n))`), from a xorshift state.
    Random(u64),
    /// By a hash of the frame's flow (addresses and ports): a flow stays on one ring.
    Flow,
    /// Each ring in turn.
    RoundRobin(usize),
}

impl QueueChoice {
    /// `random`, `flow` or `rr`; `seed` starts the random draws.
    pub fn parse(s: &str, seed: u64) -> Option<QueueChoice> {
        match s {
            "random" => Some(QueueChoice::Random(seed | 1)),
            "flow" => Some(QueueChoice::Flow),
            "rr" => Some(QueueChoice::RoundRobin(0)),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            QueueChoice::Random(_) => "random",
            QueueChoice::Flow => "flow",
            QueueChoice::RoundRobin(_) => "rr",
        }
    }

    /// Whether a frame refused by its ring (view empty) may go to another draw; a flow's
    /// frames must wait for their own ring to stay in order.
    pub fn may_redraw(&self) -> bool {
        !matches!(self, QueueChoice::Flow)
    }

    /// The ring, in `0..n` (n >= 1), for `frame`.
    pub fn pick(&mut self, n: usize, frame: &[u8]) -> usize {
        if n <= 1 {
            return 0;
        }
        match self {
            QueueChoice::Random(s) => {
                // xorshift64: cheap, and uniform enough for spreading frames.
                *s ^= *s << 13;
                *s ^= *s >> 7;
                *s ^= *s << 17;
                ((*s >> 11) % n as u64) as usize
            }
            QueueChoice::Flow => (flow_hash(frame) % n as u64) as usize,
            QueueChoice::RoundRobin(next) => {
                let r = *next % n;
                *next = r + 1;
                r
            }
        }
    }
}

/// A hash of an Ethernet frame's flow: IPv4 or IPv6 source and destination and, for TCP and
/// UDP, the ports; other frames hash their MAC addresses and EtherType. Never panics on
/// short frames.
pub fn flow_hash(frame: &[u8]) -> u64 {
    // FNV-1a over the fields that name the flow.
    fn fnv(h: u64, bytes: &[u8]) -> u64 {
        bytes
            .iter()
            .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
    }
    let h0 = 0xcbf2_9ce4_8422_2325;
    let ethertype = frame.get(12..14).map(|t| u16::from_be_bytes([t[0], t[1]]));
    let ports = |proto: u8, l4: usize| match (proto, frame.get(l4..l4 + 4)) {
        (6 | 17, Some(p)) => p,
        _ => &[][..],
    };
    match ethertype {
        Some(0x0800) if frame.len() >= 34 => {
            let ihl = (frame[14] & 0x0f) as usize * 4;
            let h = fnv(h0, &frame[26..34]);
            fnv(h, ports(frame[23], 14 + ihl))
        }
        Some(0x86dd) if frame.len() >= 54 => {
            let h = fnv(h0, &frame[22..54]);
            fnv(h, ports(frame[20], 54))
        }
        _ => fnv(h0, frame.get(..14).unwrap_or(frame)),
    }
}

/// The receive ring as Algorithm 2 sees it: slots (TPACKET_V3 blocks) taken in sequence.
pub trait RxSlots {
    /// How many slots from sequence number `seq` on (consecutively) the kernel has handed
    /// to user space, counted up to `max`.
    fn ready_from(&self, seq: u64, max: usize) -> usize;
    /// Give slot `seq` (a sequence number, `seq % slots` the slot) back to the kernel.
    fn hand_back(&mut self, seq: u64);
    /// Slots in the ring.
    fn slots(&self) -> usize;
}

/// Algorithm 2's local struct for one receive ring (see the module doc for the mapping).
#[derive(Debug, Clone)]
pub struct RxView {
    /// Slots ahead of `curr` known to be ready (counted at the last refresh).
    pub avb: usize,
    /// Sequence number of the next slot to take.
    pub curr: u64,
    /// `avb` at the last refresh.
    pub limit: usize,
    /// Oldest slot taken and not yet handed back.
    back: u64,
    /// Per slot in `back..curr`: finished (may go back).
    finished: VecDeque<bool>,
    /// Refresh (hand back, re-read the ring) when `avb` falls below this.
    threshold: usize,
    /// Refreshes and hand-backs done (for summaries and tests).
    pub refreshes: u64,
}

impl RxView {
    pub fn new(threshold: usize) -> RxView {
        RxView {
            avb: 0,
            curr: 0,
            limit: 0,
            back: 0,
            finished: VecDeque::new(),
            threshold: threshold.max(1),
            refreshes: 0,
        }
    }

    /// Algorithm 2's `receive_data` for one ring: the next ready slot, taken (user space's
    /// until [`RxView::finish`] and the next hand-back), or None when the ring has nothing
    /// ready even after a refresh (then the caller sleeps or polls, and asks again).
    pub fn receive<R: RxSlots>(&mut self, hw: &mut R) -> Option<u64> {
        if self.avb == 0 {
            self.sync(hw);
            if self.avb == 0 {
                return None;
            }
        }
        let s = self.curr;
        self.curr += 1;
        self.avb -= 1;
        self.finished.push_back(false);
        if self.avb < self.threshold {
            self.sync(hw);
        }
        Some(s)
    }

    /// Slot `seq` (taken earlier) is finished with: it goes back at the next hand-back.
    pub fn finish(&mut self, seq: u64) {
        if let Some(i) = seq.checked_sub(self.back) {
            if let Some(f) = self.finished.get_mut(i as usize) {
                *f = true;
            }
        }
    }

    /// Slots taken and not yet handed back.
    pub fn outstanding(&self) -> usize {
        (self.curr - self.back) as usize
    }

    /// Hand back the finished prefix of the taken slots, in order, and refresh the view
    /// from the ring (`ring.avb = hw_ring.avb; ring.limit = hw_ring.avb`). A slot not yet
    /// handed back cannot come round again, so the count stops before it.
    pub fn sync<R: RxSlots>(&mut self, hw: &mut R) {
        while self.finished.front() == Some(&true) {
            self.finished.pop_front();
            hw.hand_back(self.back);
            self.back += 1;
        }
        let room = hw.slots().saturating_sub(self.outstanding());
        self.avb = hw.ready_from(self.curr, room);
        self.limit = self.avb;
        self.refreshes += 1;
    }
}

/// When the receive view is empty: how long to gather before looking again (the rate
/// adaptation of Algorithm 2's threshold; see the module doc).
#[derive(Debug, Clone)]
pub struct Gather {
    /// Frames a wake-up aims to carry.
    pub threshold: u32,
    /// A frame waits at most this long for user space (the kernel's retire timer included).
    pub bound: Duration,
    /// The kernel's retire timer: a frame becomes visible at most this long after it came.
    pub retire: Duration,
    /// Slots in the ring (the wait stays under half the time they hold at the rate).
    pub slots: usize,
    /// Frames per second, smoothed over wake-ups; 0 until measured.
    rate: f64,
    /// Frames per slot, smoothed; 0 until measured.
    per_slot: f64,
    /// When the view last ran empty, and the frames and slots taken since.
    last_empty: Option<Instant>,
    frames: u64,
    taken: u64,
}

/// Weight of a new measurement in the smoothed rate.
const ALPHA: f64 = 0.25;
/// Waits shorter than this are not worth a sleep: poll at once.
const MIN_SLEEP: Duration = Duration::from_micros(200);

impl Gather {
    pub fn new(threshold: u32, bound: Duration, retire: Duration, slots: usize) -> Gather {
        Gather {
            threshold: threshold.max(1),
            bound,
            retire,
            slots: slots.max(2),
            rate: 0.0,
            per_slot: 0.0,
            last_empty: None,
            frames: 0,
            taken: 0,
        }
    }

    /// A slot with `frames` frames was taken.
    pub fn took(&mut self, frames: usize) {
        self.frames += frames as u64;
        self.taken += 1;
    }

    /// The smoothed rate, frames per second (0 before the first measurement).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The view ran empty at `now`: update the rate from what came since the last time,
    /// and return how long to sleep before looking again (zero: poll now).
    pub fn wait(&mut self, now: Instant) -> Duration {
        if let Some(t) = self.last_empty {
            let dt = now.saturating_duration_since(t).as_secs_f64();
            if dt > 0.0 {
                let r = self.frames as f64 / dt;
                self.rate = if self.rate == 0.0 {
                    r
                } else {
                    self.rate + ALPHA * (r - self.rate)
                };
            }
            if self.taken > 0 {
                let p = self.frames as f64 / self.taken as f64;
                self.per_slot = if self.per_slot == 0.0 {
                    p
                } else {
                    self.per_slot + ALPHA * (p - self.per_slot)
                };
            }
        }
        self.last_empty = Some(now);
        self.frames = 0;
        self.taken = 0;
        if self.rate <= 0.0 {
            return Duration::ZERO;
        }
        // Time for `threshold` frames to come, within the bound (less the retire timer,
        // which a frame may spend before it is visible) and half the ring's time: a slot
        // lasts the retire timer or the time to fill it, whichever is shorter. After a
        // burst and a long quiet spell the smoothed rate decays towards zero, so these
        // quotients grow without bound (to infinity once the rate is subnormal): each is
        // capped in floating point before it becomes a Duration.
        let cap = self.bound.saturating_sub(self.retire);
        let want = secs_at_most(self.threshold as f64 / self.rate, cap);
        let per_slot = if self.per_slot > 0.0 {
            secs_at_most(self.per_slot / self.rate, self.retire)
        } else {
            self.retire
        };
        let half = u32::try_from(self.slots / 2).unwrap_or(u32::MAX);
        let ring = per_slot.saturating_mul(half);
        let w = want.min(cap).min(ring);
        if w < MIN_SLEEP {
            Duration::ZERO
        } else {
            w
        }
    }
}

/// `secs` seconds as a Duration, at most `cap`: a quotient that is NaN, infinite, or
/// larger than `cap` is `cap`; one that is not positive is zero. Never panics (the
/// conversion `Duration::from_secs_f64` panics on a negative, NaN or huge value).
fn secs_at_most(secs: f64, cap: Duration) -> Duration {
    if secs.is_nan() || secs >= cap.as_secs_f64() {
        cap
    } else if secs > 0.0 {
        // Finite, positive and below `cap` (itself a Duration): it converts.
        Duration::try_from_secs_f64(secs).unwrap_or(cap).min(cap)
    } else {
        Duration::ZERO
    }
}

/// The transmit ring as Algorithm 1 sees it: slots filled in sequence.
pub trait TxSlots {
    /// How many slots from the next one on (consecutively) are free, up to `max`.
    fn free_ahead(&self, max: usize) -> usize;
    /// Copy `frame` into the next slot and mark it for sending; false if the slot is not
    /// free after all (the view was stale).
    fn fill(&mut self, frame: &[u8]) -> std::io::Result<bool>;
    /// Hand every marked frame to the device (one system call).
    fn kick(&mut self) -> std::io::Result<()>;
    /// Slots in the ring.
    fn slots(&self) -> usize;
}

/// What [`TxView::send`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Queued in the ring (goes at the next kick).
    Queued,
    /// Queued, and it used up the allotment: the ring was kicked.
    Kicked,
    /// Not sent: the view was empty and has been refreshed from the ring; offer it again
    /// (to this ring or, with a random f(n), to another).
    Refreshed,
    /// Not sent: no slot is free; wait for the ring (poll for POLLOUT), then offer again.
    Full,
}

/// Algorithm 1's local struct for one transmit ring (see the module doc for the mapping).
#[derive(Debug, Clone, Default)]
pub struct TxView {
    /// Free slots left in the allotment.
    pub avb: usize,
    /// Frames filled so far (the next slot is `curr % slots`).
    pub curr: u64,
    /// The allotment at the last refresh.
    pub limit: usize,
    /// Frames filled since the last kick.
    pub pending: usize,
    /// Kicks done.
    pub kicks: u64,
}

impl TxView {
    /// Algorithm 1's `send_data` for one ring.
    pub fn send<T: TxSlots>(&mut self, hw: &mut T, frame: &[u8]) -> std::io::Result<Sent> {
        if self.avb > 0 {
            if !hw.fill(frame)? {
                // The ring disagrees with the view (cannot happen with one writer): refresh.
                self.avb = 0;
                return Ok(Sent::Refreshed);
            }
            self.avb -= 1;
            self.curr += 1;
            self.pending += 1;
            if self.avb == 0 {
                self.kick(hw)?;
                return Ok(Sent::Kicked);
            }
            return Ok(Sent::Queued);
        }
        // The view is empty: frames still marked go now, then count what is free.
        self.kick(hw)?;
        self.avb = hw.free_ahead(hw.slots());
        self.limit = self.avb;
        Ok(if self.avb == 0 {
            Sent::Full
        } else {
            Sent::Refreshed
        })
    }

    /// Kick if anything is marked (the latency bound of sparse traffic, or the end).
    pub fn flush<T: TxSlots>(&mut self, hw: &mut T) -> std::io::Result<()> {
        if self.pending > 0 {
            self.kick(hw)?;
        }
        Ok(())
    }

    fn kick<T: TxSlots>(&mut self, hw: &mut T) -> std::io::Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        self.pending = 0;
        self.kicks += 1;
        hw.kick()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A receive ring's model: the kernel fills slots in order when they are its own, and
    /// user space takes and hands back through an [`RxView`].
    #[derive(Debug)]
    struct ModelRx {
        /// Per slot: Some(seq) while user space may read it (retired by the kernel).
        ready: Vec<Option<u64>>,
        /// Per slot: the sequence user space holds it in (taken, not handed back).
        held: Vec<Option<u64>>,
        /// Next sequence the kernel fills.
        fill: u64,
        handed_back: Vec<u64>,
        taken: u64,
    }

    impl ModelRx {
        fn new(n: usize) -> ModelRx {
            ModelRx {
                ready: vec![None; n],
                held: vec![None; n],
                fill: 0,
                handed_back: Vec::new(),
                taken: 0,
            }
        }
        /// The kernel retires up to `k` slots (only into slots it owns).
        fn arrive(&mut self, k: usize) -> usize {
            let n = self.ready.len();
            let mut done = 0;
            while done < k {
                let s = (self.fill % n as u64) as usize;
                if self.ready[s].is_some() || self.held[s].is_some() {
                    break; // ring full: the kernel would drop
                }
                self.ready[s] = Some(self.fill);
                self.fill += 1;
                done += 1;
            }
            done
        }
        fn take(&mut self, seq: u64) {
            let s = (seq % self.ready.len() as u64) as usize;
            assert_eq!(self.ready[s], Some(seq), "took a slot that was not ready");
            assert_eq!(self.held[s], None, "took a slot twice");
            self.ready[s] = None;
            self.held[s] = Some(seq);
            self.taken += 1;
        }
    }

    impl RxSlots for ModelRx {
        fn ready_from(&self, seq: u64, max: usize) -> usize {
            let n = self.ready.len() as u64;
            (0..max as u64)
                .take_while(|&k| self.ready[((seq + k) % n) as usize] == Some(seq + k))
                .count()
        }
        fn hand_back(&mut self, seq: u64) {
            let s = (seq % self.ready.len() as u64) as usize;
            assert_eq!(self.held[s], Some(seq), "handed back a slot not held");
            self.held[s] = None;
            self.handed_back.push(seq);
        }
        fn slots(&self) -> usize {
            self.ready.len()
        }
    }

    proptest! {
        /// Whatever the arrival pattern and whenever user space finishes with a slot: every
        /// slot the kernel retires is taken exactly once, in order, only when ready, and
        /// handed back exactly once, in order, only after it was finished.
        #[test]
        fn rx_view_takes_and_hands_back_every_slot_once_in_order(
            slots in 2usize..12,
            threshold in 1usize..6,
            steps in proptest::collection::vec((0usize..5, 0usize..4, any::<bool>()), 1..200),
        ) {
            let mut hw = ModelRx::new(slots);
            let mut v = RxView::new(threshold);
            let mut holding: VecDeque<u64> = VecDeque::new();
            let mut taken = Vec::new();
            let mut finished = Vec::new();
            for (arrive, take, finish_first) in steps {
                hw.arrive(arrive);
                if finish_first {
                    if let Some(s) = holding.pop_front() { v.finish(s); finished.push(s); }
                }
                for _ in 0..take {
                    match v.receive(&mut hw) {
                        Some(s) => { hw.take(s); taken.push(s); holding.push_back(s); }
                        None => break,
                    }
                }
            }
            // Drain: finish everything, take what is left, hand all back.
            loop {
                while let Some(s) = holding.pop_front() { v.finish(s); finished.push(s); }
                match v.receive(&mut hw) {
                    Some(s) => { hw.take(s); taken.push(s); holding.push_back(s); }
                    None => break,
                }
            }
            v.sync(&mut hw);
            prop_assert_eq!(taken.clone(), (0..hw.fill).collect::<Vec<_>>(), "every retired slot taken once, in order");
            prop_assert_eq!(hw.handed_back.clone(), taken, "every slot handed back once, in order");
            prop_assert_eq!(v.outstanding(), 0);
            // Nothing went back before it was finished: hand-backs follow finishes in order.
            prop_assert_eq!(finished, hw.handed_back.clone());
        }
    }

    /// A transmit ring's model: slots the kernel owns after marking until it sends them
    /// (at a kick, some time later); it records what went out.
    #[derive(Debug)]
    struct ModelTx {
        /// Per slot: the frame marked in it, while the kernel owns it.
        owned: Vec<Option<Vec<u8>>>,
        next: usize,
        /// Marked slots in order, waiting for a kick.
        marked: VecDeque<usize>,
        /// Kicked slots the kernel has not finished yet.
        in_flight: VecDeque<usize>,
        sent: Vec<Vec<u8>>,
        kicks: u64,
    }

    impl ModelTx {
        fn new(n: usize) -> ModelTx {
            ModelTx {
                owned: vec![None; n],
                next: 0,
                marked: VecDeque::new(),
                in_flight: VecDeque::new(),
                sent: Vec::new(),
                kicks: 0,
            }
        }
        /// The device finishes up to `k` kicked frames, in order.
        fn progress(&mut self, k: usize) {
            for _ in 0..k {
                let Some(s) = self.in_flight.pop_front() else {
                    break;
                };
                self.sent.push(self.owned[s].take().expect("in flight"));
            }
        }
    }

    impl TxSlots for ModelTx {
        fn free_ahead(&self, max: usize) -> usize {
            let n = self.owned.len();
            (0..max.min(n))
                .take_while(|&k| self.owned[(self.next + k) % n].is_none())
                .count()
        }
        fn fill(&mut self, frame: &[u8]) -> std::io::Result<bool> {
            let s = self.next;
            if self.owned[s].is_some() {
                return Ok(false);
            }
            self.owned[s] = Some(frame.to_vec());
            self.marked.push_back(s);
            self.next = (s + 1) % self.owned.len();
            Ok(true)
        }
        fn kick(&mut self) -> std::io::Result<()> {
            self.kicks += 1;
            self.in_flight.extend(self.marked.drain(..));
            Ok(())
        }
        fn slots(&self) -> usize {
            self.owned.len()
        }
    }

    proptest! {
        /// Algorithm 1 over n rings with any f(n) and any device progress: every frame is
        /// sent exactly once, never written into a slot the kernel owns (the model
        /// refuses), each ring's frames leave in the order they were given to it, a flow
        /// hash keeps all of one flow's frames on one ring, and a kick carries frames.
        #[test]
        fn tx_view_sends_every_frame_once_in_order_per_ring(
            rings in 1usize..4,
            slots in 1usize..10,
            choice in 0u8..3,
            frames in proptest::collection::vec((0u8..6, 0usize..4), 1..150),
        ) {
            let mut hw: Vec<ModelTx> = (0..rings).map(|_| ModelTx::new(slots)).collect();
            let mut views = vec![TxView::default(); rings];
            let mut f = match choice { 0 => QueueChoice::Random(7), 1 => QueueChoice::Flow, _ => QueueChoice::RoundRobin(0) };
            let mut given: Vec<Vec<Vec<u8>>> = vec![Vec::new(); rings];
            let mut flow_ring = std::collections::HashMap::new();
            for (seq, (flow, progress)) in frames.iter().enumerate() {
                // A frame: an IPv4 header naming its flow (source address), and its number.
                let mut fr = vec![0u8; 40];
                fr[12] = 0x08; fr[14] = 0x45; fr[23] = 17; fr[29] = *flow;
                fr[36..40].copy_from_slice(&(seq as u32).to_be_bytes());
                let mut i = f.pick(rings, &fr);
                let mut rounds = 0;
                loop {
                    rounds += 1;
                    prop_assert!(rounds < 10_000, "a frame never got a slot");
                    match views[i].send(&mut hw[i], &fr).unwrap() {
                        Sent::Queued | Sent::Kicked => break,
                        Sent::Refreshed => {}
                        Sent::Full => hw[i].progress(1),
                    }
                    if f.may_redraw() { i = f.pick(rings, &fr); }
                }
                if matches!(f, QueueChoice::Flow) {
                    prop_assert_eq!(*flow_ring.entry(*flow).or_insert(i), i, "a flow stays on its ring");
                }
                given[i].push(fr);
                for h in hw.iter_mut() { h.progress(*progress); }
            }
            for (v, h) in views.iter_mut().zip(hw.iter_mut()) {
                v.flush(h).unwrap();
                h.progress(usize::MAX);
                prop_assert!(h.marked.is_empty());
            }
            let mut all_sent = 0;
            for r in 0..rings {
                prop_assert_eq!(&hw[r].sent, &given[r], "ring {}: every frame once, in order", r);
                all_sent += hw[r].sent.len();
                prop_assert!(hw[r].kicks <= views[r].kicks, "no kick without a frame");
            }
            prop_assert_eq!(all_sent, frames.len());
        }
    }

    /// With an allotment of the whole ring, a burst of ring-size frames takes one kick
    /// (Algorithm 1's point: a system call per allotment, not per frame).
    #[test]
    fn tx_view_kicks_once_per_allotment() {
        let mut hw = ModelTx::new(64);
        let mut v = TxView::default();
        for i in 0..64u8 {
            let mut r = v.send(&mut hw, &[i]).unwrap();
            while !matches!(r, Sent::Queued | Sent::Kicked) {
                r = v.send(&mut hw, &[i]).unwrap();
            }
        }
        assert_eq!(v.kicks, 1);
        assert_eq!(hw.in_flight.len(), 64);
    }

    /// The gather wait follows the rate: long (up to the bound) when frames are few, short
    /// when they are many, zero before anything was measured, within half the ring's time.
    #[test]
    fn gather_wait_follows_the_rate_within_its_bounds() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut g = Gather::new(1000, ms(100), ms(5), 64);
        assert_eq!(g.wait(t0), Duration::ZERO, "no rate yet: poll");
        // 100 frames in 100 ms: 1000/s; 1000 frames would take 1 s: the bound (less the
        // retire timer) holds.
        g.took(100);
        assert_eq!(g.wait(t0 + ms(100)), ms(95));
        // A high rate: 100k frames/s (many slots of 500 frames): 1000 frames take 10 ms.
        let mut g = Gather::new(1000, ms(100), ms(5), 64);
        g.wait(t0);
        for _ in 0..20 {
            g.took(500);
        }
        let w = g.wait(t0 + ms(100));
        assert!(w > ms(9) && w < ms(11), "{w:?}");
        // A small ring: half of 4 slots of 5 ms is 10 ms.
        let mut g = Gather::new(1000, ms(100), ms(5), 4);
        g.wait(t0);
        g.took(10);
        assert_eq!(g.wait(t0 + ms(100)), ms(10));
    }

    /// Issue 34: `rx` panicked (`cannot convert float seconds to Duration`) after a burst
    /// and ~20 s of quiet, as each empty wake-up decays the smoothed rate towards zero
    /// until `threshold / rate` no longer fits a Duration. Driven on a simulated clock
    /// (the instants handed to `wait`), as the capture loop calls it: a second-long burst,
    /// then a minute of wake-ups that find nothing (each sleeps the wait, then polls up to
    /// 50 ms), then traffic again. Every wait stays within the bound, the quiet ones wait
    /// the whole bound (less the retire timer), and the rate follows the new traffic.
    #[test]
    fn gather_wait_survives_a_burst_then_a_long_quiet_spell() {
        let ms = Duration::from_millis;
        let (bound, retire) = (ms(100), ms(4));
        let mut g = Gather::new(64, bound, retire, 64);
        let t0 = Instant::now();
        let mut t = t0;
        g.wait(t);
        // The burst: 500 frames a millisecond (500k frames/s) for a second.
        for _ in 0..1000 {
            g.took(500);
            t += ms(1);
            let w = g.wait(t);
            assert!(w <= bound, "{w:?} during the burst");
        }
        assert!(g.rate() > 100_000.0, "{}", g.rate());
        // The quiet: nothing comes for a minute.
        let quiet_from = t;
        let mut wakes = 0;
        while t - quiet_from < Duration::from_secs(60) {
            let w = g.wait(t);
            assert!(
                w <= bound - retire,
                "{w:?} after {:?} of quiet",
                t - quiet_from
            );
            t += w + ms(50);
            wakes += 1;
        }
        assert!(wakes > 300, "only {wakes} wake-ups simulated");
        assert_eq!(
            g.wait(t),
            bound - retire,
            "a quiet ring waits the whole bound"
        );
        // Traffic again: the rate follows it, the wait shortens below the bound.
        for _ in 0..200 {
            g.took(500);
            t += ms(1);
            g.wait(t);
        }
        assert!(g.rate() > 100_000.0, "{}", g.rate());
        assert!(g.wait(t + ms(1)) < bound - retire);
    }

    #[test]
    fn flow_hash_names_the_flow_and_survives_short_frames() {
        let mut a = vec![0u8; 42];
        a[12] = 0x08;
        a[14] = 0x45;
        a[23] = 17;
        a[26..30].copy_from_slice(&[10, 0, 0, 1]);
        a[34..36].copy_from_slice(&1234u16.to_be_bytes());
        let mut b = a.clone();
        b[41] = 99; // payload differs: same flow
        assert_eq!(flow_hash(&a), flow_hash(&b));
        b[34] = 7; // source port differs
        assert_ne!(flow_hash(&a), flow_hash(&b));
        for n in 0..60 {
            let _ = flow_hash(&a[..n.min(a.len())]);
        }
        let mut q = QueueChoice::Random(1);
        let mut seen = [0usize; 3];
        for _ in 0..3000 {
            seen[q.pick(3, &a)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
    }
}
