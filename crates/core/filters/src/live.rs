//! Live capture: `rx dev=IF` reads an interface through AF_PACKET with a TPACKET_V3 ring
//! (the kernel's ring is the DBuf, owned by the store through [`crate::lent`]: tags point
//! into it, nothing is copied), handing each block back to the kernel once its frames have
//! walked the space. A `bpf` filter right
//! after `rx` runs in the kernel, and so do the NIC-FIX filters (flowcount, sample,
//! bytecount) as eBPF programs: [`kernel_placement`] moves the program onto the socket.

use crate::lent;
use dataplane::{Args, Batch, BufId, Ctx, Filter, FilterError, FilterSpec, RecordMeta, Store, Tag};
use kernel::afpacket::{Block, RxConfig, RxRing, SocketFilter};
use kernel::batching::{Batching, Gather, QueueChoice, RxView};
use kernel::cbpf::compile;
use kernel::ebpf;
use lang::KernelAttach;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Algorithm 2's state for the adaptive scheme (seed 002; [`kernel::batching`]).
struct Adaptive {
    /// One view per ring (`rings=N`).
    views: Vec<RxView>,
    /// f(n): which ring to read first when the last block is done.
    choose: QueueChoice,
    gather: Gather,
    /// The last pull found the view empty and returned at once, so that the space's idle
    /// handlers (a transmitter's kick) ran before this one sleeps.
    yielded: bool,
    /// Gathering: the space sleeps until then before it looks at the rings again (the
    /// rate-adapted gather, a deadline on the space's readiness handle).
    until: Option<Instant>,
    /// The gather is over and nothing was ready: the space sleeps on the rings' sockets.
    armed: bool,
    /// Gather sleeps and polls (the wake-ups this scheme spends).
    sleeps: u64,
    polls: u64,
}

pub struct Rx {
    dev: String,
    cfg: RxConfig,
    kfilter: Option<String>,
    /// An eBPF program for the socket (a NIC-FIX filter placed here) and where to pin its
    /// maps.
    kebpf: Option<(ebpf::Config, Option<PathBuf>)>,
    /// The loaded program; dropping it removes its pins.
    kprog: Option<ebpf::Loaded>,
    /// The rings (one, or `rings=N` fanout members), once opened: the store's DBufs
    /// (empty before), which own them ([`crate::lent`]).
    bufs: Vec<BufId>,
    /// The rings' sockets (duplicates: the rings themselves are the store's), what the
    /// space's readiness handle waits on.
    fds: Vec<std::os::fd::OwnedFd>,
    /// Rings to open.
    rings: usize,
    failed: bool,
    /// The block being emitted: its ring, the block and its next frame.
    held: Option<(usize, Block, usize)>,
    blocks_seen: u64,
    packets: u64,
    kernel_seen: u64,
    kernel_drops: u64,
    /// When the kernel's counters were last read (`count_kernel`).
    counted: Instant,
    /// None: the fixed scheme (poll, the kernel's block timeout ends it).
    adaptive: Option<Adaptive>,
    /// Fixed scheme: the polls the ring has made (its wake-ups).
    polls: u64,
    /// `keep=readers`: the socket keeps only what the readers of the shared taps on this
    /// node want (the union of their programs, after `kfilter`'s), told by
    /// [`Filter::readers_want`]; the program on the socket now (`None`: all).
    readers: Option<Option<Vec<kernel::cbpf::Insn>>>,
    /// Times the readers' union was attached, and why the last attach failed.
    unions: u64,
    union_error: Option<String>,
}

pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let dev = a.require("dev", Some(0))?.to_string();
    // Which socket: AF_PACKET (TPACKET_V3) or AF_XDP. `auto` takes AF_PACKET: on the
    // copy-mode AF_XDP we can test (veth, generic XDP) it was not faster (BENCHMARKS.md,
    // `streamline-bench capture`).
    match a.get("impl", None).unwrap_or("auto") {
        "xdp" => {
            kernel::afpacket::ifindex(&dev)
                .map_err(|e| FilterError::io(format!("dev={dev}"), e))?;
            return crate::xdp::make(a, dev);
        }
        "packet" | "auto" => {}
        v => return Err(FilterError::bad("impl", v, "packet, xdp or auto")),
    }
    let mode = a.get("batching", None).unwrap_or("adaptive");
    let batching = Batching::parse(mode)
        .ok_or_else(|| FilterError::bad("batching", mode, "adaptive or fixed"))?;
    let adaptive = batching == Batching::Adaptive;
    let latency_ms: u64 = a.parse("latency", None, if adaptive { 100 } else { 10 })?;
    let threshold: u32 = a.parse("threshold", None, 4096)?;
    if threshold == 0 {
        return Err(FilterError::bad("threshold", "0", "at least 1 frame"));
    }
    let blocks: u32 = a.parse("blocks", None, 16)?;
    if !(2..=4096).contains(&blocks) {
        return Err(FilterError::bad("blocks", &blocks.to_string(), "2..=4096"));
    }
    let fanout = match a.get("fanout", None) {
        None => None,
        Some(g) => Some(
            g.parse::<u16>()
                .map_err(|_| FilterError::bad("fanout", g, "a group id 0..=65535"))?,
        ),
    };
    // queues=N >= 2 was expanded into N engines before build (multiqueue); what is left
    // here is 1 or a mistake.
    let queues: usize = a.parse("queues", None, 1)?;
    if !(1..=64).contains(&queues) {
        return Err(FilterError::bad("queues", &queues.to_string(), "1..=64"));
    }
    let rings: usize = a.parse("rings", None, 1)?;
    if !(1..=16).contains(&rings) {
        return Err(FilterError::bad("rings", &rings.to_string(), "1..=16"));
    }
    if rings > 1 && !adaptive {
        return Err(FilterError::bad(
            "rings",
            &rings.to_string(),
            "1 with batching=fixed (several rings are read by the adaptive scheme's f(n))",
        ));
    }
    let how = a.get("choose", None).unwrap_or("random");
    let choose = match QueueChoice::parse(how, std::process::id() as u64 ^ 0x2545_f491_4f6c_dd1d) {
        Some(QueueChoice::Flow) | None => {
            return Err(FilterError::bad("choose", how, "random or rr"))
        }
        Some(c) => c,
    };
    // Several rings share the interface flow by flow: one fanout group (given, or one per
    // run and interface).
    static GROUPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let fanout = fanout.or_else(|| {
        (rings > 1).then(|| {
            // Relaxed: only uniqueness matters, nothing is published with it.
            let k = GROUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ((std::process::id() as usize * 31 + 7 + k * 7919) % 65536) as u16
        })
    });
    let bound = Duration::from_millis(latency_ms.max(1));
    let cfg = if adaptive {
        // Blocks of 256 KiB (four per MiB asked for): a block the retire timer hands over
        // nearly empty costs less of the ring. The timer is short (a tenth of the bound,
        // 1..=8 ms), so frames are visible soon; when to look is user space's choice.
        RxConfig {
            block_size: 1 << 18,
            blocks: blocks * 4,
            latency: (bound / 10).clamp(Duration::from_millis(1), Duration::from_millis(8)),
            fanout,
        }
    } else {
        RxConfig {
            latency: bound,
            blocks,
            fanout,
            ..RxConfig::default()
        }
    };
    let adaptive = adaptive.then(|| Adaptive {
        views: (0..rings).map(|_| RxView::new(1)).collect(),
        choose,
        gather: Gather::new(threshold, bound, cfg.latency, cfg.blocks as usize),
        yielded: false,
        until: None,
        armed: false,
        sleeps: 0,
        polls: 0,
    });
    let (kfilter, kebpf, readers) = socket_programs(a)?;
    // The interface must exist now (a clear error before the run).
    kernel::afpacket::ifindex(&dev).map_err(|e| FilterError::io(format!("dev={dev}"), e))?;
    Ok(Box::new(Rx {
        dev,
        cfg,
        kfilter,
        kebpf,
        kprog: None,
        bufs: Vec::new(),
        fds: Vec::new(),
        rings,
        failed: false,
        held: None,
        blocks_seen: 0,
        packets: 0,
        kernel_seen: 0,
        kernel_drops: 0,
        counted: Instant::now(),
        adaptive,
        polls: 0,
        readers,
        unions: 0,
        union_error: None,
    }))
}

/// What `rx` puts on its socket: the program the kernel placement attached for the filter
/// after it (classic or eBPF), and with `keep=readers` the readers' union to come (until
/// a reader subscribes, a program that keeps nothing).
#[allow(clippy::type_complexity)]
fn socket_programs(
    a: &Args,
) -> Result<
    (
        Option<String>,
        Option<(ebpf::Config, Option<PathBuf>)>,
        Option<Option<Vec<kernel::cbpf::Insn>>>,
    ),
    FilterError,
> {
    // The program the kernel placement attached for the filter after this rx (typed on
    // the node: one program, so classic and eBPF exclude each other by construction).
    let (kfilter, kebpf) = match &a.place.kernel {
        None => (None, None),
        Some(KernelAttach::Cbpf(e)) => {
            compile(e, crate::packet::LINKTYPE_ETHERNET, 262144)
                .map_err(|x| FilterError::invalid("", x))?;
            (Some(e.clone()), None)
        }
        Some(KernelAttach::Ebpf { program, pin }) => (
            None,
            Some((crate::nicfix::decode(program)?, Some(pin.clone()))),
        ),
    };
    let readers = match a.get("keep", None).unwrap_or("all") {
        "all" => None,
        // Until a reader subscribes, nobody wants anything.
        "readers" => Some(Some(vec![kernel::cbpf::Insn {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0,
        }])),
        v => return Err(FilterError::bad("keep", v, "all or readers")),
    };
    if readers.is_some() && kebpf.is_some() {
        return Err(FilterError::bad(
            "keep",
            "readers",
            "all when an eBPF program goes onto the socket (one program per socket)",
        ));
    }
    Ok((kfilter, kebpf, readers))
}

impl Rx {
    fn open(&mut self, cx: &mut Ctx<'_>) -> Result<(), FilterError> {
        let prog = match &self.kfilter {
            Some(e) => Some(
                compile(e, crate::packet::LINKTYPE_ETHERNET, 262144)
                    .map_err(|x| FilterError::invalid("", x))?,
            ),
            None => None,
        };
        if let Some((c, pin)) = &self.kebpf {
            self.kprog = Some(
                ebpf::Loaded::load(*c, pin.as_deref())
                    .map_err(|e| FilterError::invalid(self.dev.clone(), e))?,
            );
        }
        // keep=readers: what the readers want, after the capture's own program.
        let coalesced = match (&self.readers, &prog) {
            (Some(Some(u)), p) => Some(
                kernel::cbpf::Program::new(self.with_own(p.as_ref(), u))
                    .map_err(|x| FilterError::invalid("", x))?,
            ),
            _ => None,
        };
        let filter = match (&coalesced, &prog, &self.kprog) {
            (Some(c), _, _) => Some(SocketFilter::Classic(c)),
            (None, Some(p), _) => Some(SocketFilter::Classic(p)),
            (None, None, Some(k)) => Some(SocketFilter::Ebpf(k.prog_fd())),
            (None, None, None) => None,
        };
        for _ in 0..self.rings {
            // A non-root client's worker takes the socket the daemon lent it, with the
            // template's filter locked on it (the graph passes placed on it only that one
            // program, `kernel_filter_allowed`); anyone else opens its own.
            let lent = kernel::lend::take(kernel::lend::Kind::Rx, &self.dev)
                .map_err(|e| FilterError::io(self.dev.clone(), e))?;
            let ring = match lent {
                Some((d, fd)) => {
                    if self.kprog.is_some() || self.kfilter.is_some() && self.kfilter != d.filter {
                        return Err(FilterError::io(self.dev.clone(), std::io::Error::new(std::io::ErrorKind::PermissionDenied, format!("the capture socket the daemon lent carries the filter {:?}; another program cannot be attached to it", d.filter))));
                    }
                    RxRing::open_lent(fd, &self.dev, self.cfg)
                }
                None => RxRing::open(&self.dev, self.cfg, filter),
            }
            .map_err(|e| FilterError::io(self.dev.clone(), e))?;
            use std::os::fd::AsFd;
            let fd = ring
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| FilterError::io(self.dev.clone(), e))?;
            self.fds.push(fd);
            let buf = lent::lend(cx.store, ring);
            cx.store.set_link(buf, crate::packet::LINKTYPE_ETHERNET);
            self.bufs.push(buf);
        }
        Ok(())
    }

    /// Algorithm 2's `receive_data_mqueue` with the rate-adapted gather (see
    /// [`kernel::batching`]): the next ready block without a system call while a ring's
    /// view has one (ring f(n) first, then the others in turn); when every view is empty,
    /// first one empty round (the space's idle handlers run), then a sleep as long as the
    /// measured rate needs to bring `threshold` frames (within the bound; a deadline on
    /// the space's readiness handle, [`Rx::arm`]), then a sleep on the rings' sockets only
    /// if still nothing is ready. Never waits itself. Returns the ring and the block.
    fn adaptive_next(
        ad: &mut Adaptive,
        store: &mut Store,
        bufs: &[BufId],
    ) -> std::io::Result<Option<(usize, Block)>> {
        let n = bufs.len();
        let first = ad.choose.pick(n, &[]);
        for k in 0..n {
            let i = (first + k) % n;
            let ring = lent::lender_mut::<RxRing>(store, bufs[i])
                .expect("the store owns the rings it was given");
            if let Some(seq) = ad.views[i].receive(ring) {
                ad.yielded = false;
                ad.until = None;
                ad.armed = false;
                let b = ring.take(seq)?;
                ad.gather.took(b.frames.len());
                return Ok(Some((i, b)));
            }
        }
        if !ad.yielded {
            ad.yielded = true;
            return Ok(None);
        }
        if ad.armed {
            // Woken on the sockets with nothing ready: an error on one (the interface went
            // down or away) surfaces here (a `poll` that returns at once), not as a spin.
            let rings: Vec<(&RxRing, u64)> = bufs
                .iter()
                .zip(&ad.views)
                .map(|(b, v)| {
                    let r = lent::lender::<RxRing>(store, *b)
                        .expect("the store owns the rings it was given");
                    (r, v.curr)
                })
                .collect();
            RxRing::wait_any(&rings, Duration::ZERO)?;
            return Ok(None);
        }
        if ad.until.is_some() {
            // Gathering: `arm` turns to the sockets once the deadline has passed.
            return Ok(None);
        }
        let now = Instant::now();
        let wait = ad.gather.wait(now);
        if wait.is_zero() {
            ad.polls += 1;
            ad.armed = true;
        } else {
            ad.sleeps += 1;
            ad.until = Some(now + wait);
        }
        Ok(None)
    }

    fn count_kernel(&mut self, store: &Store) {
        self.counted = Instant::now();
        for b in &self.bufs {
            if let Some(Ok((p, d))) = lent::lender::<RxRing>(store, *b).map(RxRing::stats) {
                self.kernel_seen += p;
                self.kernel_drops += d;
            }
        }
    }

    /// The program for the socket under `keep=readers`: the capture's own (`own`, e.g. its
    /// direction) and then the readers' union; the union alone if it has none, and its own
    /// alone if both do not fit in one program (more passes, never less).
    fn with_own(
        &self,
        own: Option<&kernel::cbpf::Program>,
        union: &[kernel::cbpf::Insn],
    ) -> Vec<kernel::cbpf::Insn> {
        match own {
            None => union.to_vec(),
            Some(p) => {
                kernel::coalesce::and_then(p.insns(), union).unwrap_or_else(|| p.insns().to_vec())
            }
        }
    }

    /// The sequence number of `b` in its ring.
    fn seq(&self, b: &Block) -> u64 {
        b.lap * self.cfg.blocks as u64 + b.index as u64
    }
}

impl Filter for Rx {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}

    /// `keep=readers`: the union of the readers' programs goes onto the socket (after the
    /// capture's own), so that packets none of them wants stay in the kernel. The kernel
    /// swaps the program at once; frames already in the ring passed the old one (the tap
    /// asks each reader's program again). An attach that fails leaves the socket taking
    /// everything (its own program only), never less than a reader wants.
    fn readers_want(&mut self, programs: Option<&[&[protocol::proto::BpfInsn]]>) {
        if self.readers.is_none() {
            return;
        }
        let insns = |p: &[protocol::proto::BpfInsn]| -> Vec<kernel::cbpf::Insn> {
            p.iter()
                .map(|&(code, jt, jf, k)| kernel::cbpf::Insn { code, jt, jf, k })
                .collect()
        };
        let progs: Option<Vec<Vec<kernel::cbpf::Insn>>> =
            programs.map(|ps| ps.iter().map(|p| insns(p)).collect());
        let union = progs.and_then(|ps| {
            let refs: Vec<&[kernel::cbpf::Insn]> = ps.iter().map(|p| p.as_slice()).collect();
            kernel::coalesce::union(&refs)
        });
        let own = match &self.kfilter {
            Some(e) => match compile(e, crate::packet::LINKTYPE_ETHERNET, 262144) {
                Ok(p) => Some(p),
                Err(e) => {
                    self.union_error = Some(e.to_string());
                    return;
                }
            },
            None => None,
        };
        let all = [kernel::cbpf::Insn {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: kernel::coalesce::ACCEPT,
        }];
        let program = match &union {
            Some(u) => self.with_own(own.as_ref(), u),
            None => own.as_ref().map_or(all.to_vec(), |p| p.insns().to_vec()),
        };
        self.readers = Some(union);
        for fd in &self.fds {
            if let Err(e) = kernel::afpacket::attach_classic(fd, &program) {
                self.union_error = Some(e.to_string());
                let fallback = own.as_ref().map_or(&all[..], |p| p.insns());
                let _ = kernel::afpacket::attach_classic(fd, fallback);
                continue;
            }
            self.unions += 1;
        }
    }

    /// The rings' sockets (readable once the kernel hands a block over, its retire timer
    /// ending a block at a low rate), or the gather's deadline (adaptive scheme).
    fn arm(&mut self, w: &mut dataplane::readiness::Arm<'_>, _source: bool) {
        if self.failed || self.bufs.is_empty() || self.held.is_some() {
            // Not open yet, a block half emitted, or done: the next pull acts.
            w.ready();
            return;
        }
        if let Some(ad) = &mut self.adaptive {
            if !ad.yielded {
                w.ready();
                return;
            }
            match ad.until {
                Some(t) if Instant::now() < t => {
                    w.deadline(t);
                    return;
                }
                Some(_) => {
                    // The gather is over: the next pull looks at the rings, and if they
                    // are still empty sleeps on their sockets.
                    ad.until = None;
                    ad.armed = true;
                    ad.polls += 1;
                    w.ready();
                    return;
                }
                None if !ad.armed => {
                    w.ready();
                    return;
                }
                None => {}
            }
        }
        for fd in &self.fds {
            use std::os::fd::AsFd;
            w.fd(fd.as_fd());
        }
    }

    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if self.failed {
            return false;
        }
        if self.bufs.is_empty() {
            if let Err(e) = self.open(cx) {
                cx.warn(e.to_string());
                cx.stop();
                self.failed = true;
                return false;
            }
        }
        if self.held.is_none() {
            let got = match &mut self.adaptive {
                None => {
                    let ring = lent::lender_mut::<RxRing>(cx.store, self.bufs[0])
                        .expect("the store owns the ring it was given");
                    // Never waits (a `poll` with no timeout when nothing is ready, which
                    // reports a socket error): the space sleeps on the socket (`arm`).
                    let got = ring.next_block(Duration::ZERO);
                    self.polls = ring.polls();
                    got.map(|b| b.map(|b| (0, b)))
                }
                Some(ad) => Self::adaptive_next(ad, cx.store, &self.bufs),
            };
            match got {
                Ok(Some((i, b))) => {
                    self.blocks_seen += 1;
                    // A block retired by the timer with nothing in it goes straight back.
                    let empty = b.frames.is_empty();
                    if empty {
                        let seq = self.seq(&b);
                        match &mut self.adaptive {
                            None => {
                                if let Some(ring) =
                                    lent::lender_mut::<RxRing>(cx.store, self.bufs[i])
                                {
                                    ring.release(b.index)
                                }
                            }
                            Some(ad) => ad.views[i].finish(seq),
                        }
                    } else {
                        self.held = Some((i, b, 0));
                    }
                    // The kernel's counters (a system call): every 64 blocks or 100 ms, and
                    // at the end, so that drops reach the readers' `pcap_stats` soon.
                    if self.blocks_seen.is_multiple_of(64)
                        || self.counted.elapsed() >= Duration::from_millis(100)
                    {
                        self.count_kernel(cx.store);
                    }
                    if empty {
                        return true;
                    }
                }
                Ok(None) => return true,
                Err(e) => {
                    cx.warn(format!("{}: {e}", self.dev));
                    cx.stop();
                    self.failed = true;
                    return false;
                }
            }
        }
        let Some((ring, block, next)) = self.held.as_mut() else {
            return true;
        };
        let buf = self.bufs[*ring];
        let end = (*next + max).min(block.frames.len());
        let mut metas = Vec::with_capacity(end - *next);
        for f in &block.frames[*next..end] {
            out.push(Tag {
                pos: f.pos,
                len: f.snaplen,
                buf,
                class: 1,
            });
            metas.push(RecordMeta::whole(f.pos, f.snaplen, f.ts_ns, f.wirelen));
        }
        // Only this batch's frames need metadata: a filter that keeps one of its blocks
        // past the batch gets a copy that carries its record (`Ctx::keep`).
        metas.sort_by_key(|m| m.pos);
        cx.store.set_records(buf, metas);
        self.packets += (end - *next) as u64;
        *next = end;
        true
    }

    fn epoch_end(&mut self, cx: &mut Ctx<'_>) {
        // The batch has walked the whole space: give the block back once all its frames
        // went out. Nothing read from it is in use: `cx.store`, which every slice of it
        // borrows, is ours exclusively here.
        if let Some((i, block, _)) = self
            .held
            .take_if(|(_, block, next)| *next >= block.frames.len())
        {
            let seq = self.seq(&block);
            match &mut self.adaptive {
                None => {
                    if let Some(ring) = lent::lender_mut::<RxRing>(cx.store, self.bufs[i]) {
                        ring.release(block.index);
                    }
                }
                // Finished: it goes back with the view's next hand-back (at the
                // threshold, or when the view runs empty).
                Some(ad) => ad.views[i].finish(seq),
            }
        }
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        self.count_kernel(cx.store);
        let held = self.held.take();
        let held_seq = held.as_ref().map(|(i, b, _)| (*i, self.seq(b)));
        match &mut self.adaptive {
            None => {
                if let Some((i, block, _)) = held {
                    if let Some(ring) = lent::lender_mut::<RxRing>(cx.store, self.bufs[i]) {
                        ring.release(block.index);
                    }
                }
            }
            Some(ad) => {
                if let Some((i, seq)) = held_seq {
                    ad.views[i].finish(seq);
                }
                for (v, b) in ad.views.iter_mut().zip(&self.bufs) {
                    if let Some(ring) = lent::lender_mut::<RxRing>(cx.store, *b) {
                        v.sync(ring);
                    }
                }
            }
        }
    }

    /// The kernel's ring-full drops on the capture sockets, as last read.
    fn lost(&self) -> u64 {
        self.kernel_drops
    }

    fn summary(&self) -> Option<String> {
        if self.bufs.is_empty() {
            return None;
        }
        Some(format!(
            "rx {}: {} packets delivered, {} seen by the kernel socket{}, {} dropped by the kernel (ring full); {} blocks taken, the ring went round {} times",
            self.dev,
            self.packets,
            self.kernel_seen,
            match (&self.kfilter, &self.kebpf) {
                (Some(_), _) => " after its BPF program".to_string(),
                (None, Some((c, _))) => format!(" after its eBPF program ({})", c.name()),
                (None, None) => String::new(),
            },
            self.kernel_drops,
            self.blocks_seen,
            self.blocks_seen / (self.cfg.blocks as u64 * self.rings as u64)
        ) + &match (&self.readers, &self.union_error) {
            (None, _) => String::new(),
            (Some(_), None) => format!("; the readers' union attached {} times", self.unions),
            (Some(_), Some(e)) => format!("; the readers' union attached {} times, the last failure: {e}", self.unions),
        } + &match &self.adaptive {
            None => format!("; batching fixed: {} polls", self.polls),
            Some(ad) => format!(
                "; batching adaptive{}: {} gather sleeps, {} polls, {} frames per wake-up",
                if self.rings > 1 {
                    format!(" ({} rings, f(n) {})", self.rings, ad.choose.name())
                } else {
                    String::new()
                },
                ad.sleeps,
                ad.polls,
                per_wakeup(self.packets, ad.sleeps + ad.polls),
            ),
        })
    }
}

/// Frames per wake-up, as a figure that never reads 0 beside frames delivered: two
/// significant digits below 10 (`0.33`, `2.5`), whole numbers above.
fn per_wakeup(frames: u64, wakeups: u64) -> String {
    let x = frames as f64 / wakeups.max(1) as f64;
    match x {
        x if x == 0.0 => "0".into(),
        x if x >= 10.0 => format!("{x:.0}"),
        x if x >= 1.0 => format!("{x:.1}"),
        x => format!("{:.*}", (1 - x.log10().floor() as i32) as usize, x),
    }
}

pub use lang::label::arg;

/// Kernel placement (thesis 6.3.2, push processing down): `rx | bpf "E"` runs E on the
/// capture socket, so frames it rejects are never handed to user space; so does the
/// header stage of an `ips` that ends its pipeline (`crate::ids::header`: Kernel Snort's
/// push-down, what no rule can match stays in the kernel); `rx | flowcount`,
/// `rx | sample N` and `rx | bytecount` run their eBPF program there, with the program's
/// maps pinned in this process's run directory on bpffs (typed on the `rx` node:
/// [`lang::Placement::kernel`]). The node stays (its side [`lang::Side::Kernel`], with the
/// pin for the NIC-FIX filters to read the maps at the end), so the graph keeps its shape
/// and its counters show what the kernel let through. Not for `rx impl=xdp`, a filter the
/// user or the planner placed (its side already said, `placed=user`), one pinned to
/// another space than the `rx`, or `sample prob=`. In a non-root client's worker, whose
/// capture socket the daemon lent with the template's filter locked on it, only that
/// same expression is placed (nothing is attached then), never an eBPF program
/// ([`kernel::lend::kernel_filter_allowed`]); the rest runs in user space, same output.
///
/// A `placed=kernel` the user wrote (or a pipeline's text carried back in) is a request the
/// push-down honours where it can; where it cannot (no `rx` right before, or one that may
/// not take the program), a `bpf` or `ips` so marked runs in user space instead
/// ([`lang::Side::User`]): it would otherwise pass every frame, trusting a socket filter
/// that is not there (placement never changes results).
pub fn kernel_placement(mut g: lang::Graph) -> lang::Graph {
    use lang::{NodeKind, Selector, Side};
    let edges = g.edges.clone();
    for e in &edges {
        let outs = edges.iter().filter(|x| x.from == e.from).count();
        let ins = edges.iter().filter(|x| x.to == e.to).count();
        if outs != 1 || ins != 1 || e.sel != Selector::Default {
            continue;
        }
        let (
            NodeKind::Filter {
                filter: a,
                options: ao,
                place: ap,
                params: rp,
            },
            NodeKind::Filter {
                filter: b,
                params,
                options: bo,
                place: bp,
            },
        ) = (&g.nodes[e.from].kind, &g.nodes[e.to].kind)
        else {
            continue;
        };
        if a != "rx"
            || !crate::find(b).is_some_and(FilterSpec::runs_after_rx_in_kernel)
            || ap.kernel.is_some()
            || ao.iter().any(|(k, v)| k == "impl" && v == "xdp")
            || matches!(bp.side, Some(Side::User))
        {
            continue;
        }
        let args = dataplane::Args::new(b, params.clone(), bo.clone());
        // The classic BPF program a filter puts on the socket, if that is its kernel form.
        let cbpf = match b.as_str() {
            "bpf" => match arg(params, bo, "expr") {
                Some(x) => Some(x.to_string()),
                None => continue,
            },
            // `ips`'s header stage, when nothing reads its output: the frames it refuses
            // would be missing downstream, where `ips` passes them on unjudged.
            "ips" if !edges.iter().any(|x| x.from == e.to) => {
                match crate::ids::filter::kernel_header(&args) {
                    Some(x) => Some(x),
                    None => continue,
                }
            }
            "ips" => continue,
            _ => None,
        };
        if !kernel::lend::kernel_filter_allowed(arg(rp, ao, "dev").unwrap_or(""), cbpf.as_deref()) {
            continue;
        }
        let (attach, pin) = match cbpf {
            Some(x) => (KernelAttach::Cbpf(x), None),
            None => {
                if ap.space != bp.space {
                    continue;
                }
                let Ok(config) = crate::nicfix::kernel_config(&args) else {
                    continue;
                };
                let pin = ebpf::run_dir().join(format!("n{}-{b}", e.to));
                (
                    KernelAttach::Ebpf {
                        program: crate::nicfix::encode(config),
                        pin: pin.clone(),
                    },
                    Some(pin),
                )
            }
        };
        if let NodeKind::Filter { place, .. } = &mut g.nodes[e.from].kind {
            place.kernel = Some(attach);
        }
        if let NodeKind::Filter { place, .. } = &mut g.nodes[e.to].kind {
            place.side = Some(Side::Kernel { pin });
        }
    }
    // A classic-BPF filter said to run on a socket it is not on runs here.
    for i in 0..g.nodes.len() {
        let on_socket = edges.iter().any(|e| {
            e.to == i
                && matches!(&g.nodes[e.from].kind, NodeKind::Filter { filter, place, .. }
                    if filter == "rx" && matches!(place.kernel, Some(KernelAttach::Cbpf(_))))
        });
        if let NodeKind::Filter { filter, place, .. } = &mut g.nodes[i].kind {
            if (filter == "bpf" || filter == "ips")
                && matches!(place.side, Some(Side::Kernel { pin: None }))
                && !on_socket
            {
                place.side = Some(Side::User);
            }
        }
    }
    g
}

/// `rx dev=IF queues=N` (seed 002, Algorithms 1-2: one execution engine per queue): the
/// capture and the filters after it become N engines, each an `rx` in one PACKET_FANOUT
/// hash group (so each flow lands on one engine) with its own copy of the filters. Engine
/// 0 runs in the calling thread, engine q >= 1 on a thread space pinned to CPU q (mod the
/// CPU count); a join in engine 0's space gathers their output for the rest. The engine takes the linear chain after
/// `rx` (one arc in, one arc out, native filters) up to the first node that ends the
/// stream (a sink such as `count`, which then totals all queues) or merges streams.
pub fn multiqueue(mut g: lang::Graph) -> lang::Graph {
    use lang::{Edge, JoinMode, Node, NodeKind, Selector};
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let targets: Vec<(usize, usize)> = g
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Filter {
                filter, options, ..
            } if filter == "rx" => options
                .iter()
                .find(|(k, _)| k == "queues")
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .filter(|&q| q >= 2)
                .map(|q| (n.id, q)),
            _ => None,
        })
        .collect();
    for (rx, queues) in targets {
        // The engine: rx and the one-in one-out native filters after it.
        let mut chain = vec![rx];
        loop {
            let last = *chain.last().expect("rx");
            let outs: Vec<&Edge> = g.edges.iter().filter(|e| e.from == last).collect();
            let [e] = outs.as_slice() else { break };
            let next = e.to;
            let ins = g.edges.iter().filter(|x| x.to == next).count();
            let next_outs = g.edges.iter().filter(|x| x.from == next).count();
            if e.sel != Selector::Default
                || ins != 1
                || next_outs == 0
                || !matches!(g.nodes[next].kind, NodeKind::Filter { .. })
            {
                break;
            }
            chain.push(next);
        }
        let last = *chain.last().expect("rx");
        let after: Vec<Edge> = g.edges.iter().filter(|e| e.from == last).cloned().collect();
        // A fanout group per run and interface: the process id and the node.
        let group = ((std::process::id() as usize * 31 + rx) % 65536).to_string();
        let engine_space =
            |q: usize| lang::SpaceSpec::Runtime(vec![lang::SpaceName::Thread(cpus * 1000 + q)]);
        let mut lasts = Vec::new();
        for q in 0..queues {
            // Copy 0 is the original nodes; copies 1.. are appended.
            let mut map = std::collections::HashMap::new();
            for &id in &chain {
                let copy = if q == 0 {
                    id
                } else {
                    let n = g.nodes[id].clone();
                    let new = g.nodes.len();
                    g.nodes.push(Node {
                        id: new,
                        name: n.name.as_ref().map(|x| format!("{x}.{q}")),
                        ..n
                    });
                    new
                };
                map.insert(id, copy);
                if let NodeKind::Filter { options, place, .. } = &mut g.nodes[copy].kind {
                    options.retain(|(k, _)| k != "queues" && (id != rx || k != "fanout"));
                    // Engine 0 runs where the pipeline starts; engine q on its own thread.
                    place.space = (q > 0).then(|| engine_space(q));
                    if id == rx {
                        options.push(("fanout".into(), group.clone()));
                    }
                }
            }
            if q > 0 {
                for w in chain.windows(2) {
                    let e = g
                        .edges
                        .iter()
                        .find(|e| e.from == w[0] && e.to == w[1])
                        .expect("chain arc")
                        .clone();
                    g.edges.push(Edge {
                        from: map[&w[0]],
                        to: map[&w[1]],
                        ..e
                    });
                }
            }
            lasts.push(map[&last]);
        }
        if after.is_empty() {
            continue;
        }
        let span = g.nodes[last].span;
        let join = g.nodes.len();
        g.nodes.push(Node {
            id: join,
            kind: NodeKind::Join {
                mode: JoinMode::Merge,
            },
            span,
            hints: Vec::new(),
            name: None,
        });
        g.edges.retain(|e| e.from != last);
        for &l in &lasts {
            g.edges.push(Edge {
                from: l,
                to: join,
                sel: Selector::Default,
                span: after[0].span,
            });
        }
        for e in after {
            g.edges.push(Edge { from: join, ..e });
        }
    }
    g
}

// The declarations of this file's filters are data in the catalog (`catalog::live::RX`);
// their constructors are below, paired with them in `filters::CONSTRUCTORS`.

#[cfg(test)]
mod per_wakeup_tests {
    use super::per_wakeup;

    #[test]
    fn frames_per_wake_up_never_reads_zero_beside_frames_delivered() {
        assert_eq!(per_wakeup(10, 30), "0.33");
        assert_eq!(per_wakeup(1, 200), "0.0050");
        assert_eq!(per_wakeup(25, 10), "2.5");
        assert_eq!(per_wakeup(5000, 10), "500");
        assert_eq!(per_wakeup(0, 10), "0");
        assert_eq!(per_wakeup(7, 0), "7.0");
    }
}
