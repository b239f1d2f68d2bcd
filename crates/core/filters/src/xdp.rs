//! `rx dev=IF impl=xdp`: live capture through an AF_XDP socket ([`kernel::xdp`]). The
//! UMEM is the DBuf (the socket owned by the store through [`crate::lent`]): tags point at
//! the chunks the kernel filled, nothing is copied on our side, and a batch's chunks go
//! back to the kernel once the batch has walked the space (`epoch_end`). Positions carry a generation per batch, since chunks are reused. AF_XDP
//! frames carry no capture time: blocks are stamped when they are read.

use crate::lent;
use dataplane::{Args, Batch, BufId, Ctx, Filter, FilterError, RecordMeta, Tag};
use kernel::xdp::{XdpConfig, XdpDrops, XdpRx};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub struct XdpSource {
    dev: String,
    cfg: XdpConfig,
    /// Longest a batch waits for more frames once it has one.
    latency: Duration,
    /// Frames gathered per wake-up (emitted `max` per pull).
    gather: usize,
    /// The gathered frames (position, length) and how many went out.
    pending: Vec<(u64, usize)>,
    sent: usize,
    /// The socket, once opened: the store's DBuf `buf` (0 before), which owns it
    /// ([`crate::lent`]).
    buf: BufId,
    packets: u64,
    /// The socket's drop counters, read at the end.
    drops: Option<XdpDrops>,
    failed: bool,
    /// A duplicate of the socket's descriptor, what the space's readiness handle waits on.
    fd: Option<std::os::fd::OwnedFd>,
}

pub fn make(a: &Args, dev: String) -> Result<Box<dyn Filter>, FilterError> {
    if a.place.kernel.is_some() {
        return Err(FilterError::Rule("a kernel program on the socket needs impl=packet (an AF_XDP socket has no socket filter)".into()));
    }
    if a.get("fanout", None).is_some() {
        return Err(FilterError::Rule(
            "fanout= needs impl=packet (an AF_XDP socket has no socket filter or fanout group)"
                .into(),
        ));
    }
    let queue: u32 = a.parse("queue", None, 0)?;
    let latency_ms: u64 = a.parse("latency", None, 10)?;
    let frames: u32 = a.parse("frames", None, 16384)?;
    let gather: usize = a.parse("batch", None, frames as usize / 4)?;
    if !frames.is_power_of_two() || !(64..=1 << 20).contains(&frames) {
        return Err(FilterError::bad(
            "frames",
            &frames.to_string(),
            "a power of two in 64..=1048576",
        ));
    }
    if gather == 0 || gather > frames as usize / 4 {
        return Err(FilterError::bad(
            "batch",
            &gather.to_string(),
            &format!("1..={} (a quarter of frames={frames})", frames / 4),
        ));
    }
    let skb_mode = match a.get("xdpmode", None) {
        None | Some("auto") => false,
        Some("skb") => true,
        Some(v) => return Err(FilterError::bad("xdpmode", v, "auto or skb")),
    };
    Ok(Box::new(XdpSource {
        dev,
        cfg: XdpConfig {
            queue,
            frames,
            skb_mode,
        },
        latency: Duration::from_millis(latency_ms),
        gather,
        pending: Vec::new(),
        sent: 0,
        buf: 0,
        packets: 0,
        drops: None,
        failed: false,
        fd: None,
    }))
}

impl XdpSource {
    fn fail(&mut self, cx: &mut Ctx<'_>, e: String) -> bool {
        cx.warn(e);
        cx.stop();
        self.failed = true;
        false
    }
}

impl Filter for XdpSource {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}

    /// The socket: readable while its RX ring holds frames.
    fn arm(&mut self, w: &mut dataplane::readiness::Arm<'_>, _source: bool) {
        match &self.fd {
            Some(fd) if !self.failed && self.sent >= self.pending.len() => {
                use std::os::fd::AsFd;
                w.fd(fd.as_fd());
            }
            // Not open yet, gathered frames still to emit, or done: the next pull acts.
            _ => w.ready(),
        }
    }

    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if self.failed {
            return false;
        }
        if self.buf == 0 {
            match XdpRx::open(&self.dev, self.cfg) {
                Ok(s) => {
                    match s.dup_fd() {
                        Ok(fd) => self.fd = Some(fd),
                        Err(e) => return self.fail(cx, format!("{}: AF_XDP: {e}", self.dev)),
                    }
                    self.buf = lent::lend(cx.store, s);
                    cx.store
                        .set_link(self.buf, crate::packet::LINKTYPE_ETHERNET);
                }
                Err(e) => return self.fail(cx, format!("{}: {e}", self.dev)),
            }
        }
        if self.sent >= self.pending.len() {
            // Everything gathered went out and (epoch_end) came back: gather anew.
            let sock = lent::lender_mut::<XdpRx>(cx.store, self.buf)
                .expect("the store owns the socket it was given");
            self.pending =
                // Never waits for the first frame (the space sleeps on the socket, `arm`);
                // once one came, up to `latency` for the batch to fill.
                match sock.next_batch(self.gather, Duration::ZERO, self.latency) {
                    Ok(f) => f,
                    Err(e) => {
                        let msg = format!("{}: AF_XDP: {e}", self.dev);
                        return self.fail(cx, msg);
                    }
                };
            self.sent = 0;
            if self.pending.is_empty() {
                return true;
            }
        }
        let ts_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let end = (self.sent + max).min(self.pending.len());
        let mut metas = Vec::with_capacity(end - self.sent);
        for &(pos, len) in &self.pending[self.sent..end] {
            out.push(Tag {
                pos,
                len: len as u32,
                buf: self.buf,
                class: 1,
            });
            metas.push(RecordMeta::whole(pos, len as u32, ts_ns, len as u32));
        }
        self.sent = end;
        metas.sort_by_key(|m| m.pos);
        self.packets += metas.len() as u64;
        cx.store.set_records(self.buf, metas);
        true
    }

    fn epoch_end(&mut self, cx: &mut Ctx<'_>) {
        // The batch has walked the whole space: once every gathered frame has, their
        // chunks go back to the kernel. Nothing read from them is in use: `cx.store`,
        // which every slice of them borrows, is ours exclusively here.
        if self.sent >= self.pending.len() {
            if let Some(s) = lent::lender_mut::<XdpRx>(cx.store, self.buf) {
                s.recycle();
            }
        }
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        if let Some(s) = lent::lender_mut::<XdpRx>(cx.store, self.buf) {
            s.recycle();
            self.drops = s.stats().ok();
        }
    }

    fn summary(&self) -> Option<String> {
        if self.buf == 0 {
            return None;
        }
        let drops = match self.drops {
            Some(d) => format!(
                ", {} dropped by the kernel (RX ring full {}, no fill chunk {}, other {})",
                d.total(),
                d.ring_full,
                d.fill_empty,
                d.other
            ),
            None => ", kernel drops unknown (XDP_STATISTICS failed)".to_string(),
        };
        Some(format!(
            "rx {} (AF_XDP, queue {}, copy mode): {} packets delivered{drops}",
            self.dev, self.cfg.queue, self.packets
        ))
    }
}
