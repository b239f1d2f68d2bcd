//! Sources: capture files (`pcapin`, over [`crate::savefile`]), byte files and stdin,
//! synthetic blocks.

use crate::savefile::{swap_pseudo_header, Savefile};
use dataplane::{Kind, FilterError, Access, Args, Batch, BufId, Ctx, Filter, FilterSpec, Param, RecordMeta, Tag};
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One packet record found by the indexer: its metadata and captured length.
#[derive(Debug, Clone, Copy)]
struct Rec {
    meta: RecordMeta,
    len: u32,
    /// libpcap rewrites its pseudo-header (a byte-swapped file): deliver a fixed copy.
    rewrite: bool,
}

/// What the indexer thread sends to the reading space, in file order. The channel closes
/// after the last record (or after a `Problem`).
enum Msg {
    Recs(Vec<Rec>),
    /// A record libpcap refuses ended the input.
    Problem(String),
}

/// Work the indexer and the reader share: populating the page tables of the file ahead of
/// the indexer's walk. Whoever claims the next step does it: the indexer when its walk
/// reaches the edge, the reader when it would otherwise wait for the indexer (so the two
/// CPUs split the kernel's page-table work instead of one doing it all).
#[derive(Debug, Default)]
struct Shared {
    /// Bytes from the start whose page-table population has been claimed.
    edge: AtomicUsize,
    /// Where the indexer's walk is.
    walk: AtomicUsize,
}

impl Shared {
    /// Claim and populate the next step if the edge is below `limit`; false if it is not
    /// (or the file is done).
    fn populate_step(&self, map: &dataplane::FileMap, limit: usize) -> bool {
        // Acquire pairs with the Release of the claiming CAS below (the other thread's) and
        // of the store in `open`; only the number travels (the population itself is the
        // kernel's page tables, published by no store of ours).
        let p = self.edge.load(Ordering::Acquire);
        if p >= limit.min(map.len()) {
            return false;
        }
        // AcqRel/Acquire: pairs with the same CAS on the other thread (indexer vs reader)
        // and the Acquire loads of `edge`; exactly one of them claims [p, p + STEP).
        if self.edge.compare_exchange(p, p + POPULATE_STEP, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            map.populate(p, p + POPULATE_STEP);
        }
        true
    }
}

/// How far past the indexer's walk the reader populates while it waits.
const POPULATE_AHEAD: usize = 64 << 20;

/// Records per message of the indexer.
const CHUNK: usize = 1024;
/// Messages the indexer may run ahead of the reader (a bounded channel: the window).
const CHUNKS_AHEAD: usize = 16;
/// Distance in bytes the indexer prefetches ahead of the record header it parses.
const PREFETCH: usize = 16 << 10;
/// How much of the file the indexer populates at once (one madvise per step).
const POPULATE_STEP: usize = 1 << 20;
/// Records ahead of the one being tagged whose first lines the reader prefetches.
const RECORDS_AHEAD: usize = 8;

/// `pcapin`: the file is mapped once and is the DBuf itself. Finding the records is a
/// chain of dependent loads (each header gives the next one's place) that must stream the
/// whole file through a CPU's caches; an indexer thread does that walk (populating the page
/// tables and prefetching as it goes) and sends record positions ahead in chunks, so the
/// space's own CPU only touches the first lines of each packet that its filters read.
pub struct PcapIn {
    path: PathBuf,
    buf: BufId,
    /// The file's link type, and libpcap's DLT for it (for pseudo-header rewrites).
    link: u32,
    dlt: u32,
    /// A ring of this source's own for the few packets whose bytes libpcap rewrites
    /// (created on the first one; its link type is the file's).
    fixed: Option<BufId>,
    size: u64,
    opened: bool,
    /// Records from the indexer; `None` before the first pull and after the end.
    rx: Option<std::sync::mpsc::Receiver<Msg>>,
    /// Empty chunk vectors going back to the indexer.
    recycle: Option<std::sync::mpsc::Sender<Vec<Rec>>>,
    indexer: Option<std::thread::JoinHandle<()>>,
    shared: Arc<Shared>,
    map: dataplane::FileMap,
    /// The chunk being tagged and the next record in it.
    cur: Vec<Rec>,
    at: usize,
    /// This batch's records (reused).
    metas: Vec<RecordMeta>,
    packets: u64,
    /// End of the last record handed out (for the progress bar).
    off: u64,
}

/// Map `path` and check its header as libpcap's `pcap_open_offline` does.
fn open_capture(path: &std::path::Path) -> Result<(dataplane::FileMap, Savefile), FilterError> {
    let map = dataplane::FileMap::open(path).map_err(|e| FilterError::io(format!("cannot open {}", path.display()), e))?;
    let sf = Savefile::open(map.bytes()).map_err(|e| FilterError::invalid(path.display().to_string(), e))?;
    Ok((map, sf))
}

/// Size of the ring for rewritten packets (a batch of them must fit).
const FIXED_RING: usize = 16 << 20;

impl PcapIn {
    fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
        let path = PathBuf::from(a.require("file", Some(0))?);
        // A file libpcap refuses is a build error (the check maps the file and reads its
        // header; the run maps it again).
        open_capture(&path)?;
        Ok(Box::new(PcapIn {
            path,
            buf: 0,
            link: 0,
            dlt: 0,
            fixed: None,
            size: 0,
            opened: false,
            rx: None,
            recycle: None,
            indexer: None,
            shared: Arc::default(),
            map: Default::default(),
            cur: Vec::new(),
            at: 0,
            metas: Vec::new(),
            packets: 0,
            off: 0,
        }))
    }

    /// Map the file, read its header (errors here end the run before any packet), and
    /// start the indexer on the rest.
    fn open(&mut self, cx: &mut Ctx<'_>) -> Result<(), FilterError> {
        let (buf, size) = cx.store.add_file(&self.path).map_err(|e| FilterError::io(format!("cannot map {}", self.path.display()), e))?;
        self.buf = buf;
        self.size = size;
        let map = cx.store.file_map(buf).unwrap_or_default();
        let sf = Savefile::open(map.bytes()).map_err(|e| FilterError::invalid(self.path.display().to_string(), e))?;
        let start = sf.offset();
        cx.store.set_link(buf, sf.link());
        (self.link, self.dlt) = (sf.link(), sf.dlt());
        let (tx, rx) = std::sync::mpsc::sync_channel(CHUNKS_AHEAD);
        let (recycle, back) = std::sync::mpsc::channel();
        // Release: pair with the Acquire loads of `edge` (populate_step, `index`) and `walk`
        // (`next_chunk`); the indexer thread is spawned after them, which orders them too.
        self.shared.edge.store(start - start % 4096, Ordering::Release);
        self.shared.walk.store(start, Ordering::Release);
        let shared = self.shared.clone();
        self.map = map.clone();
        let indexer = std::thread::Builder::new()
            .name("pcapin-index".into())
            .spawn(move || index(&map, sf, &shared, &tx, &back))
            .map_err(|e| FilterError::io("cannot start the indexer thread", e))?;
        self.rx = Some(rx);
        self.recycle = Some(recycle);
        self.indexer = Some(indexer);
        Ok(())
    }

    /// The next message of the indexer into `cur`; false at the end.
    fn next_chunk(&mut self, cx: &mut Ctx<'_>) -> bool {
        loop {
            let Some(rx) = &self.rx else { return false };
            let got = match rx.try_recv() {
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    // Nothing yet: populate ahead of the indexer instead of waiting, if any is left.
                    // Acquire pairs with the indexer's Release store of `walk` in `index`.
                    let limit = self.shared.walk.load(Ordering::Acquire) + POPULATE_AHEAD;
                    if self.shared.populate_step(&self.map, limit) {
                        continue;
                    }
                    rx.recv().map_err(|_| std::sync::mpsc::TryRecvError::Disconnected)
                }
                got => got,
            };
            match got {
                Ok(Msg::Recs(v)) => {
                    let old = std::mem::replace(&mut self.cur, v);
                    if let Some(r) = &self.recycle {
                        let _ = r.send(old);
                    }
                    self.at = 0;
                    return true;
                }
                Ok(Msg::Problem(p)) => {
                    cx.warn(format!("{}: {p}; read {} packets before it", self.path.display(), self.packets));
                }
                Err(_) => {
                    self.finish();
                    return false;
                }
            }
        }
    }

    /// Close the channels and wait for the indexer (it ends at once when its channel is
    /// gone), so a run leaves no thread behind.
    fn finish(&mut self) {
        self.rx = None;
        self.recycle = None;
        if let Some(t) = self.indexer.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PcapIn {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The indexer thread: walk the records from the header's end, send their places in chunks.
fn index(map: &dataplane::FileMap, mut sf: Savefile, shared: &Shared, tx: &std::sync::mpsc::SyncSender<Msg>, back: &std::sync::mpsc::Receiver<Vec<Rec>>) {
    let file = map.bytes();
    let mut ahead = sf.offset();
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut problem = None;
    loop {
        let off = sf.offset();
        if ahead < off + PREFETCH {
            // Acquire pairs with the claiming CAS in `populate_step` (either thread's).
            while shared.edge.load(Ordering::Acquire) < off + 2 * PREFETCH && shared.populate_step(map, off + 2 * PREFETCH) {}
            ahead = ahead.max(off);
            map.prefetch(ahead, off + 2 * PREFETCH);
            ahead = off + 2 * PREFETCH;
        }
        let r = match sf.next(file) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => {
                problem = Some(e.to_string());
                break;
            }
        };
        chunk.push(Rec { meta: RecordMeta::whole(r.pos as u64, r.caplen, r.ts_ns(), r.orig_len), len: r.caplen, rewrite: r.rewrite });
        if chunk.len() == CHUNK {
            let next = back.try_recv().map(|mut v| {
                v.clear();
                v
            });
            let next = next.unwrap_or_else(|_| Vec::with_capacity(CHUNK));
            // Release pairs with the reader's Acquire load of `walk` in `next_chunk`.
            shared.walk.store(sf.offset(), Ordering::Release);
            if tx.send(Msg::Recs(std::mem::replace(&mut chunk, next))).is_err() {
                return; // the reader is gone
            }
        }
    }
    if !chunk.is_empty() && tx.send(Msg::Recs(chunk)).is_err() {
        return;
    }
    if let Some(p) = problem {
        let _ = tx.send(Msg::Problem(p));
    }
}

impl PcapIn {
    /// A packet whose pseudo-header libpcap rewrites: a copy in this source's own ring,
    /// rewritten, with the record's metadata.
    fn rewritten(&mut self, cx: &mut Ctx<'_>, r: &Rec) -> Option<Tag> {
        let (pos, len) = (r.meta.pos as usize, r.len as usize);
        let bytes = cx.store.file(self.buf)?.get(pos..pos + len)?.to_vec();
        let ring = match self.fixed {
            Some(id) => id,
            None => {
                let id = cx.store.add_ring(FIXED_RING);
                cx.store.set_link(id, self.link);
                self.fixed = Some(id);
                id
            }
        };
        let (mut t, s) = cx.store.alloc_in(ring, len);
        s.copy_from_slice(&bytes);
        swap_pseudo_header(self.dlt, s, r.meta.orig_len);
        cx.store.add_record(ring, RecordMeta::whole(t.pos, r.len, r.meta.ts_ns, r.meta.orig_len));
        t.class = 1;
        Some(t)
    }
}

impl Filter for PcapIn {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if !self.opened {
            self.opened = true;
            if let Err(e) = self.open(cx) {
                cx.warn(e.to_string());
                cx.stop();
                return false;
            }
        }
        self.metas.clear();
        let mut more = true;
        while self.metas.len() < max {
            if self.at == self.cur.len() && !self.next_chunk(cx) {
                more = false;
                break;
            }
            // The first lines of a record a few ahead (its header ends just before its data).
            // The first bytes of a packet a few ahead: where its filters read the headers.
            if let Some(r) = self.cur.get(self.at + RECORDS_AHEAD) {
                let p = r.meta.pos as usize;
                cx.store.prefetch(self.buf, p, p + 64);
            }
            let r = self.cur[self.at];
            self.at += 1;
            self.packets += 1;
            self.off = r.meta.pos + u64::from(r.len);
            if r.rewrite {
                if let Some(t) = self.rewritten(cx, &r) {
                    out.push(t);
                }
                continue;
            }
            self.metas.push(r.meta);
            out.push(Tag { pos: r.meta.pos, len: r.len, buf: self.buf, class: 1 });
        }
        cx.store.append_records(self.buf, &self.metas);
        more
    }
    fn progress(&self) -> Option<(u64, u64)> {
        Some((self.off, self.size.max(1)))
    }
}

pub static PCAPIN: FilterSpec = FilterSpec::new("pcapin", Access::Source, PcapIn::make)
    .synopsis("pcapin file=FILE")
    .description("Reads a capture file as libpcap (tcpdump -r) reads it: the same packets, bytes,\n\
                  lengths, times and link type. The file is mapped into memory and serves as the\n\
                  DBuf itself: each packet becomes a tag pointing into the file, nothing is copied.\n\
                  Timestamps (nanoseconds) and wire lengths travel out of band (for inspect and\n\
                  pcapout); the link type goes with the frames (for the protocol filters and bpf).\n\
                  Reads pcap (microsecond and nanosecond, either byte order, versions 2.0-2.4,\n\
                  Kuznetzov's patched records) and pcapng (sections, interfaces with if_tsresol and\n\
                  if_tsoffset, enhanced, simple and obsolete packet blocks; other blocks and options\n\
                  are skipped). A snap length cuts packets (tcpdump -s 96): their wire length is\n\
                  kept; a record holding more than the snap length is cut to it, as libpcap does.\n\
                  Any link type is read; the protocol filters understand Ethernet (VLAN tags\n\
                  included), Linux cooked v1/v2 (tcpdump -i any), raw IP and BSD loopback.\n\
                  A file libpcap refuses is an error before the run (naming the byte and the\n\
                  problem); a record libpcap refuses ends the input with a warning naming its\n\
                  byte offset, after every packet before it. As libpcap, a pcapng file's\n\
                  interfaces must share one link type and snap length. A helper thread\n\
                  (pcapin-index) walks the records ahead of the space.")
    .params(&[
        Param::new("file", "capture file (also the first positional parameter)").at(0),
    ])
    .classes("1 for every packet")
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | dport |80 count'");

/// How a byte source cuts its input into blocks.
#[derive(Debug, Clone, Copy)]
enum Split {
    Chunk(usize),
    Lines,
    Fixed(usize),
}

fn split_mode(a: &Args) -> Result<Split, FilterError> {
    let size = a.size("size", None, 0)? as usize;
    match a.get("split", None).unwrap_or(if size > 0 { "fixed" } else { "bytes" }) {
        "bytes" => Ok(Split::Chunk(if size > 0 { size } else { 64 * 1024 })),
        "lines" => Ok(Split::Lines),
        "fixed" if size > 0 => Ok(Split::Fixed(size)),
        "fixed" => Err(FilterError::Missing { key: "size".into(), expected: "split=fixed needs size=N".into() }),
        m => Err(FilterError::bad("split", m, "bytes, lines or fixed")),
    }
}

/// Cut the next block from `data` at `off`: returns its length (0 at the end).
fn next_block(data: &[u8], off: usize, s: Split) -> usize {
    let rest = &data[off..];
    match s {
        Split::Chunk(n) | Split::Fixed(n) => rest.len().min(n),
        Split::Lines => match rest.iter().position(|&b| b == b'\n') {
            Some(i) => i + 1,
            None => rest.len(),
        },
    }
}

pub struct FileIn {
    path: PathBuf,
    split: Split,
    buf: BufId,
    off: usize,
    size: usize,
    opened: bool,
}

impl FileIn {
    fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
        let path = PathBuf::from(a.require("file", Some(0))?);
        std::fs::metadata(&path).map_err(|e| FilterError::io(format!("cannot open {}", path.display()), e))?;
        Ok(Box::new(FileIn { path, split: split_mode(a)?, buf: 0, off: 0, size: 0, opened: false }))
    }
}

impl Filter for FileIn {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if !self.opened {
            self.opened = true;
            match cx.store.add_file(&self.path) {
                Ok((b, n)) => {
                    self.buf = b;
                    self.size = n as usize;
                }
                Err(e) => {
                    cx.warn(format!("cannot map {}: {e}", self.path.display()));
                    cx.stop();
                    return false;
                }
            }
        }
        let data = cx.store.file(self.buf).unwrap_or(&[]);
        while out.len() < max && self.off < data.len() {
            let n = next_block(data, self.off, self.split);
            out.push(Tag { pos: self.off as u64, len: n as u32, buf: self.buf, class: 1 });
            self.off += n;
        }
        self.off < data.len()
    }
    fn progress(&self) -> Option<(u64, u64)> {
        Some((self.off as u64, self.size.max(1) as u64))
    }
}

pub static FILE: FilterSpec = FilterSpec::new("file", Access::Source, FileIn::make)
    .synopsis("file FILE [split=bytes|lines|fixed] [size=N]")
    .description("Reads a file, mapped into memory as a DBuf (no copies), as blocks: chunks of\n\
                  64 KiB (split=bytes, size=N to change), one block per line including its newline\n\
                  (split=lines), or fixed-size records (split=fixed size=N; the last may be shorter).")
    .params(&[
        Param::new("file", "the file (also the first positional parameter)").at(0),
        Param::new("split", "bytes (default), lines or fixed").kind(Kind::Choice(&["bytes", "lines", "fixed"])).default("bytes"),
        Param::new("size", "block size for bytes/fixed (suffixes K, M)").kind(Kind::Size).default("64K"),
    ])
    .classes("1 for every block")
    .example("streamline run 'file /var/log/syslog split=lines | grep error | count'");

pub struct StdinIn {
    split: Split,
    pending: Vec<u8>,
    eof: bool,
    rx: Option<std::sync::mpsc::Receiver<Vec<u8>>>,
}

impl StdinIn {
    fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
        Ok(Box::new(StdinIn { split: split_mode(a)?, pending: Vec::new(), eof: false, rx: None }))
    }
}

impl Filter for StdinIn {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        let rx = self.rx.get_or_insert_with(|| {
            let (tx, rx) = std::sync::mpsc::sync_channel(16);
            std::thread::spawn(move || {
                let mut stdin = std::io::stdin().lock();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if tx.send(buf[..n].to_vec()).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
            rx
        });
        if !self.eof {
            match rx.recv_timeout(std::time::Duration::from_millis(50)) {
                Ok(chunk) => self.pending.extend_from_slice(&chunk),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return true,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.eof = true,
            }
        }
        let mut off = 0;
        while out.len() < max && off < self.pending.len() {
            let n = next_block(&self.pending, off, self.split);
            let complete = match self.split {
                Split::Lines => self.pending[off + n - 1] == b'\n',
                Split::Fixed(s) => n == s,
                Split::Chunk(_) => true,
            };
            if !complete && !self.eof {
                break;
            }
            let mut t = cx.store.push(&self.pending[off..off + n]);
            t.class = 1;
            out.push(t);
            off += n;
        }
        self.pending.drain(..off);
        !(self.eof && self.pending.is_empty())
    }
}

pub static STDIN: FilterSpec = FilterSpec::new("stdin", Access::Source, StdinIn::make)
    .synopsis("stdin [split=bytes|lines|fixed] [size=N]")
    .description("Reads standard input into the space's data ring, cut into blocks as `file` does.")
    .params(&[
        Param::new("split", "bytes (default), lines or fixed").kind(Kind::Choice(&["bytes", "lines", "fixed"])).default("bytes"),
        Param::new("size", "block size for bytes/fixed").kind(Kind::Size).default("64K"),
    ])
    .classes("1 for every block")
    .example("cat access.log | streamline run 'stdin split=lines | grep GET | count'");

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
}

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
        let stride = if size.is_multiple_of(512) { size + 64 } else { size };
        let ring = (size * 1024).next_power_of_two().max(1 << 20);
        GenRing { stride, ring, slots: ring / stride / 256 * 256 }
    }
}

impl Gen {
    fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
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
        Ok(Box::new(Gen { pattern: Vec::new(), remaining: count, size, layout: GenRing::new(size), buf: 0, seq: 0, rewrite, lap: None, slot: 0, lap_start: 0, fresh_until: 0 }))
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
            self.lap = reusing.filter(|&r| !self.rewrite && r == layout.ring as u64 && layout.slots > 0).map(|r| (r, layout.slots as u64));
            self.fresh_until = self.lap.map_or(0, |(r, _)| r);
        }
        if let Some((r, _)) = self.lap {
            if cx.store.take_edited(self.buf) {
                self.fresh_until = self.lap_start + self.slot * self.layout.stride as u64 + r;
            }
        }
        let n = (max as u64).min(self.remaining) as usize;
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
            out.tags.extend((0..run).map(|j| Tag { pos: first.pos + (j * stride) as u64, len: size as u32, buf, class: 1 }));
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

pub static GEN: FilterSpec = FilterSpec::new("gen", Access::Source, Gen::make)
    .synopsis("gen [count=N] [size=BYTES] [rewrite=yes|no]")
    .description("Generates N synthetic blocks (default 1000) of the given size (default 1024)\n\
                  for benchmarks and tests: an 8-byte sequence number (little endian), then a\n\
                  pattern (byte i is i*31 XOR the sequence number's low byte). Blocks go to a\n\
                  ring of their own, one cache line apart beyond their size when the size is a\n\
                  multiple of 512 (so a batch's first lines spread over the L1 cache's sets).\n\
                  A lap of the ring is a multiple of 256 blocks, so a slot's pattern repeats\n\
                  from lap to lap and after the first lap only the sequence number is written\n\
                  (rewrite=yes writes every byte of every block; after a filter edited blocks\n\
                  in place, a whole lap is written again).")
    .params(&[
        Param::new("count", "number of blocks (also positional; suffixes K, M)").at(0).kind(Kind::Size).default("1000"),
        Param::new("size", "block size in bytes").kind(Kind::Size).default("1024"),
        Param::new("rewrite", "yes: write every block in full (default no)").kind(Kind::Choice(&["yes", "no"])).default("no"),
    ])
    .classes("1 for every block")
    .example("streamline run 'gen count=1M size=64 | count'");
