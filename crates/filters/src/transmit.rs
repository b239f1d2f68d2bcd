//! `tx dev=IF`: transmit every block as a frame on a network interface, through an
//! AF_PACKET transmit ring ([`kernel::tx`]) with adaptive batching of the kick system
//! calls (seed 002, Algorithms 1-2): frames are queued in the ring as they come and the
//! ring is kicked when the local batch is used up (`batch=` frames queued) or when the
//! oldest queued frame has waited `latency=` microseconds (checked after every input
//! batch), and whenever the input goes quiet. Under load one kick carries many frames; a
//! trickle is still sent promptly.
//!
//! Owns: the kick policy and its accounting. The ring is the kernel crate's.

use dataplane::{Access, Args, Batch, Ctx, Filter, FilterError, FilterSpec, Kind, Param};
use kernel::tx::{TxConfig, TxRing};
use std::time::{Duration, Instant};

pub struct Tx {
    dev: String,
    ring: TxRing,
    batch: usize,
    latency: Duration,
    /// Frames queued since the last kick, and when the first of them was.
    pending: usize,
    since: Option<Instant>,
    frames: u64,
    bytes: u64,
    kicks: u64,
    /// Times the ring was full and we waited for the kernel.
    full_waits: u64,
    too_large: u64,
    rejected: u64,
    failed: bool,
}

fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let dev = a.require("dev", Some(0))?.to_string();
    let batch: usize = a.parse("batch", None, 64)?;
    let latency_us: u64 = a.parse("latency", None, 1000)?;
    let frames: u32 = a.parse("frames", None, 1024)?;
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
    let bypass = match a.get("bypass", None) {
        None | Some("no") => false,
        Some("yes") => true,
        Some(v) => return Err(FilterError::bad("bypass", v, "yes or no")),
    };
    // Opened now: a missing interface or capability is an error before the run starts.
    let ring = TxRing::open(
        &dev,
        TxConfig {
            frames,
            qdisc_bypass: bypass,
            ..TxConfig::default()
        },
    )
    .map_err(|e| FilterError::io(format!("dev={dev}"), e))?;
    Ok(Box::new(Tx {
        dev,
        ring,
        batch: batch.min(frames as usize),
        latency: Duration::from_micros(latency_us),
        pending: 0,
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
    /// Kick if anything is queued.
    fn kick(&mut self) -> Result<(), FilterError> {
        if self.pending == 0 {
            return Ok(());
        }
        self.kicks += 1;
        self.pending = 0;
        self.since = None;
        self.ring
            .kick()
            .map_err(|e| FilterError::io(self.dev.clone(), e))
    }

    /// Queue one frame (waiting for a slot if the ring is full); kick if the batch is full.
    fn send(&mut self, d: &[u8]) -> Result<(), FilterError> {
        if d.len() > self.ring.max_frame() {
            self.too_large += 1;
            return Ok(());
        }
        while !self
            .ring
            .put(d, &mut self.rejected)
            .map_err(|e| FilterError::io(self.dev.clone(), e))?
        {
            // The ring is full: send what is queued and wait for a slot.
            self.full_waits += 1;
            self.kick()?;
            self.ring
                .wait_writable(Duration::from_millis(10))
                .map_err(|e| FilterError::io(self.dev.clone(), e))?;
        }
        self.frames += 1;
        self.bytes += d.len() as u64;
        self.pending += 1;
        self.since.get_or_insert_with(Instant::now);
        if self.pending >= self.batch {
            self.kick()?;
        }
        Ok(())
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
        if !self.failed && self.kick().is_err() {
            // Reported by the next batch or at the end.
            self.failed = true;
        }
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        if let Err(e) = self.kick() {
            cx.warn(e);
        }
        // Frames still in the ring when the socket closes are lost: wait for the kernel.
        let t0 = Instant::now();
        while self.ring.in_flight() > 0 && t0.elapsed() < Duration::from_secs(2) {
            let _ = self.ring.kick();
            let _ = self.ring.wait_writable(Duration::from_millis(10));
        }
        self.rejected += self.ring.rejected_pending();
    }

    fn summary(&self) -> Option<String> {
        let per = if self.kicks > 0 {
            self.frames as f64 / self.kicks as f64
        } else {
            0.0
        };
        let mut s = format!(
            "tx {}: {} frames ({} bytes) in {} kicks ({per:.1} frames per kick), ring full {} times",
            self.dev, self.frames, self.bytes, self.kicks, self.full_waits
        );
        if self.too_large > 0 {
            s += &format!(
                ", {} blocks too large for a frame slot ({} bytes) dropped",
                self.too_large,
                self.ring.max_frame()
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

pub static TX: FilterSpec = FilterSpec::new("tx", Access::Sink, make)
    .privileged("CAP_NET_RAW")
    .synopsis("tx dev=IF [batch=N] [latency=US] [frames=N] [bypass=yes|no]")
    .description("Transmits every block as one frame (it should start with an Ethernet header) through\n\
                  an AF_PACKET transmit ring. Frames are queued in the ring and sent by one system call\n\
                  (a kick) when `batch` frames are queued, when the oldest has waited `latency`\n\
                  microseconds (checked after every input batch), and when the input goes quiet; a full\n\
                  ring waits for the kernel, nothing is dropped. The summary gives frames per kick.\n\
                  Needs CAP_NET_RAW.")
    .params(&[
        Param::new("dev", "interface (also positional)").at(0),
        Param::new("batch", "frames per kick at most (default 64)").kind(Kind::Count).default("64"),
        Param::new("latency", "longest a queued frame waits for its kick, microseconds (default 1000)").kind(Kind::Count).default("1000"),
        Param::new("frames", "frame slots in the ring, 2 KiB each (default 1024)").kind(Kind::Count).default("1024"),
        Param::new("bypass", "yes: skip the qdisc layer (PACKET_QDISC_BYPASS)").kind(Kind::Choice(&["yes", "no"])).default("no"),
    ])
    .classes("sink (no output)")
    .example("streamline run 'pcapin file=examples/sample.pcap | tx dev=veth0'");
