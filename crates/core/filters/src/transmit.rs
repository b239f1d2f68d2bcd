//! `tx dev=IF`: transmit every block as a frame on a network interface, through one or
//! more AF_PACKET transmit rings ([`kernel::tx`]) with batched kick system calls. Two
//! schemes: `batching=adaptive`, seed 002's Algorithm 1 ([`kernel::batching::TxView`]: a
//! kick when the ring's allotment of free slots is used up), and `batching=fixed`, a kick
//! per `batch=` frames. Both also kick when the oldest queued frame has waited `latency=`
//! microseconds (checked after every input batch) and whenever the input goes quiet, so a
//! trickle is still sent promptly. With `queues=N` the seed's f(n)
//! ([`kernel::batching::QueueChoice`]) picks each frame's ring.
//!
//! Owns: the kick policy, the ring choice and their accounting. The rings are the kernel
//! crate's.

use dataplane::{Args, Batch, Ctx, Filter, FilterError};
use kernel::batching::{Batching, QueueChoice, Sent, TxView};
use kernel::tx::{TxConfig, TxRing};
use std::time::{Duration, Instant};

/// One transmit ring and Algorithm 1's local view of it.
struct Ring {
    ring: TxRing,
    view: TxView,
    /// Fixed scheme: frames queued since this ring's last kick.
    pending: usize,
}

pub struct Tx {
    dev: String,
    rings: Vec<Ring>,
    batching: Batching,
    /// f(n): which ring a frame goes to.
    choose: QueueChoice,
    batch: usize,
    latency: Duration,
    /// When the oldest frame not yet kicked was queued.
    since: Option<Instant>,
    frames: u64,
    bytes: u64,
    /// Kicks of the fixed scheme and latency kicks of both (Algorithm 1's own kicks are
    /// counted in the views).
    kicks: u64,
    /// Times a ring was full and we waited for the kernel.
    full_waits: u64,
    too_large: u64,
    rejected: u64,
    failed: bool,
}

pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let dev = a.require("dev", Some(0))?.to_string();
    let mode = a.get("batching", None).unwrap_or("adaptive");
    let batching = Batching::parse(mode)
        .ok_or_else(|| FilterError::bad("batching", mode, "adaptive or fixed"))?;
    let batch: usize = a.parse("batch", None, 64)?;
    let latency_us: u64 = a.parse("latency", None, 1000)?;
    let frames: u32 = a.parse("frames", None, 1024)?;
    let queues: usize = a.parse("queues", None, 1)?;
    let how = a.get("choose", None).unwrap_or("flow");
    let choose = QueueChoice::parse(how, std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15)
        .ok_or_else(|| FilterError::bad("choose", how, "flow, random or rr"))?;
    if !(1..=65536).contains(&batch) {
        return Err(FilterError::bad("batch", &batch.to_string(), "1..=65536"));
    }
    if !(16..=1 << 20).contains(&frames) {
        return Err(FilterError::bad(
            "frames",
            &frames.to_string(),
            "16..=1048576",
        ));
    }
    if !(1..=64).contains(&queues) {
        return Err(FilterError::bad("queues", &queues.to_string(), "1..=64"));
    }
    let bypass = match a.get("bypass", None) {
        None | Some("no") => false,
        Some("yes") => true,
        Some(v) => return Err(FilterError::bad("bypass", v, "yes or no")),
    };
    // Opened now: a missing interface or capability is an error before the run starts.
    let rings = (0..queues)
        .map(|_| {
            let cfg = TxConfig {
                frames,
                qdisc_bypass: bypass,
                ..TxConfig::default()
            };
            // A non-root client's worker takes the socket the daemon lent it.
            match kernel::lend::take(kernel::lend::Kind::Tx, &dev)? {
                Some((_, fd)) => TxRing::open_lent(fd, &dev, cfg),
                None => TxRing::open(&dev, cfg),
            }
            .map(|ring| Ring {
                ring,
                view: TxView::default(),
                pending: 0,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| FilterError::io(format!("dev={dev}"), e))?;
    Ok(Box::new(Tx {
        dev,
        rings,
        batching,
        choose,
        batch: batch.min(frames as usize),
        latency: Duration::from_micros(latency_us),
        since: None,
        frames: 0,
        bytes: 0,
        kicks: 0,
        full_waits: 0,
        too_large: 0,
        rejected: 0,
        failed: false,
    }))
}

impl Tx {
    fn io(&self, e: std::io::Error) -> FilterError {
        FilterError::io(self.dev.clone(), e)
    }

    /// Kick every ring that holds frames not yet kicked (the latency bound, idle, end).
    fn kick(&mut self) -> Result<(), FilterError> {
        self.since = None;
        for i in 0..self.rings.len() {
            let r = &mut self.rings[i];
            let res = match self.batching {
                Batching::Adaptive => r.view.flush(&mut r.ring),
                Batching::Fixed if r.pending > 0 => {
                    r.pending = 0;
                    self.kicks += 1;
                    r.ring.kick()
                }
                Batching::Fixed => Ok(()),
            };
            res.map_err(|e| self.io(e))?;
        }
        Ok(())
    }

    /// Queue one frame on ring f(n); the fixed scheme kicks every `batch` frames, the
    /// adaptive one (Algorithm 1) when the ring's allotment is used up.
    fn send(&mut self, d: &[u8]) -> Result<(), FilterError> {
        if d.len() > self.rings[0].ring.max_frame() {
            self.too_large += 1;
            return Ok(());
        }
        let n = self.rings.len();
        let mut i = self.choose.pick(n, d);
        match self.batching {
            Batching::Adaptive => loop {
                let r = &mut self.rings[i];
                match r
                    .view
                    .send(&mut r.ring, d)
                    .map_err(|e| FilterError::io(self.dev.clone(), e))?
                {
                    Sent::Queued | Sent::Kicked => break,
                    Sent::Refreshed => {}
                    Sent::Full => {
                        // No slot free on this ring: wait for the kernel (the seed's poll).
                        self.full_waits += 1;
                        r.ring
                            .wait_writable(Duration::from_millis(10))
                            .map_err(|e| FilterError::io(self.dev.clone(), e))?;
                    }
                }
                if self.choose.may_redraw() {
                    i = self.choose.pick(n, d);
                }
            },
            Batching::Fixed => {
                loop {
                    let r = &mut self.rings[i];
                    if r.ring
                        .put(d, &mut self.rejected)
                        .map_err(|e| FilterError::io(self.dev.clone(), e))?
                    {
                        break;
                    }
                    // The ring is full: send what is queued and wait for a slot.
                    self.full_waits += 1;
                    r.pending = 0;
                    self.kicks += 1;
                    r.ring
                        .kick()
                        .map_err(|e| FilterError::io(self.dev.clone(), e))?;
                    r.ring
                        .wait_writable(Duration::from_millis(10))
                        .map_err(|e| FilterError::io(self.dev.clone(), e))?;
                }
                let r = &mut self.rings[i];
                r.pending += 1;
                if r.pending >= self.batch {
                    r.pending = 0;
                    self.kicks += 1;
                    r.ring
                        .kick()
                        .map_err(|e| FilterError::io(self.dev.clone(), e))?;
                }
            }
        }
        self.frames += 1;
        self.bytes += d.len() as u64;
        // The latency clock runs from the oldest frame not yet kicked; a kick of the
        // allotment (or batch) that left nothing behind stops it.
        let left = match self.batching {
            Batching::Adaptive => self.rings.iter().any(|r| r.view.pending > 0),
            Batching::Fixed => self.rings.iter().any(|r| r.pending > 0),
        };
        if left {
            self.since.get_or_insert_with(Instant::now);
        } else {
            self.since = None;
        }
        Ok(())
    }

    fn all_kicks(&self) -> u64 {
        self.kicks + self.rings.iter().map(|r| r.view.kicks).sum::<u64>()
    }
}

impl Filter for Tx {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.failed {
            return;
        }
        let mut res = Ok(());
        for t in &batch.tags {
            let Ok(d) = cx.store.data(t) else { continue };
            res = self.send(d);
            if res.is_err() {
                break;
            }
        }
        // The latency bound, checked once per input batch.
        if res.is_ok() && self.since.is_some_and(|s| s.elapsed() >= self.latency) {
            res = self.kick();
        }
        if let Err(e) = res {
            cx.warn(e);
            self.failed = true;
            cx.stop();
        }
    }

    fn idle(&mut self) {
        // The input paused: what is queued goes now (sparse traffic keeps its latency).
        if !self.failed && self.since.is_some() && self.kick().is_err() {
            // Reported by the next batch or at the end.
            self.failed = true;
        }
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        if let Err(e) = self.kick() {
            cx.warn(e);
        }
        // Frames still in a ring when its socket closes are lost: wait for the kernel.
        let t0 = Instant::now();
        for r in &mut self.rings {
            while r.ring.in_flight() > 0 && t0.elapsed() < Duration::from_secs(2) {
                let _ = r.ring.kick();
                let _ = r.ring.wait_writable(Duration::from_millis(10));
            }
            self.rejected += r.ring.rejected_pending() + r.ring.refused();
        }
    }

    fn summary(&self) -> Option<String> {
        let kicks = self.all_kicks();
        let per = if kicks > 0 {
            self.frames as f64 / kicks as f64
        } else {
            0.0
        };
        let mut s = format!(
            "tx {}: {} frames ({} bytes) in {} kicks ({per:.1} frames per kick), ring full {} times; batching {}",
            self.dev,
            self.frames,
            self.bytes,
            kicks,
            self.full_waits,
            self.batching.name()
        );
        if self.rings.len() > 1 {
            s += &format!(
                ", {} rings chosen by {}",
                self.rings.len(),
                self.choose.name()
            );
        }
        if self.too_large > 0 {
            s += &format!(
                ", {} blocks too large for a frame slot ({} bytes) dropped",
                self.too_large,
                self.rings[0].ring.max_frame()
            );
        }
        if self.rejected > 0 {
            s += &format!(
                ", {} frames refused by the kernel (wrong format)",
                self.rejected
            );
        }
        Some(s)
    }
}

// The declarations of this file's filters are data in the catalog
// (`catalog::transmit::TX`); their constructors are below, paired with them in
// `filters::CONSTRUCTORS`.
