//! `pcapin`: a capture file mapped once as the DBuf, walked by an indexer thread with
//! libpcap's rules ([`crate::savefile`]); pcap files in lanes ([`lanes`]).

mod lanes;

use crate::savefile::{swap_pseudo_header, Record, Savefile};
use dataplane::{Args, Batch, BufId, Ctx, Filter, FilterError, RecordMeta, Tag};
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

impl Rec {
    fn of(r: &Record) -> Rec {
        Rec {
            meta: RecordMeta::whole(r.pos as u64, r.caplen, r.ts_ns(), r.orig_len),
            len: r.caplen,
            rewrite: r.rewrite,
        }
    }
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
        if self
            .edge
            .compare_exchange(p, p + POPULATE_STEP, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
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
    /// The pcap file header (None for pcapng).
    header: Option<dataplane::CaptureHeader>,
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
    let map = dataplane::FileMap::open(path)
        .map_err(|e| FilterError::io(format!("cannot open {}", path.display()), e))?;
    let sf = Savefile::open(map.bytes())
        .map_err(|e| FilterError::invalid(path.display().to_string(), e))?;
    Ok((map, sf))
}

/// Size of the ring for rewritten packets (a batch of them must fit).
const FIXED_RING: usize = 16 << 20;

impl PcapIn {
    pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
        let path = PathBuf::from(a.require("file", Some(0))?);
        // A file libpcap refuses is a build error (the check maps the file and reads its
        // header; the run maps it again).
        open_capture(&path)?;
        Ok(Box::new(PcapIn {
            path,
            buf: 0,
            link: 0,
            dlt: 0,
            header: None,
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
        let (buf, size) = cx
            .store
            .add_file(&self.path)
            .map_err(|e| FilterError::io(format!("cannot map {}", self.path.display()), e))?;
        self.buf = buf;
        self.size = size;
        let map = cx.store.file_map(buf).unwrap_or_default();
        let sf = Savefile::open(map.bytes())
            .map_err(|e| FilterError::invalid(self.path.display().to_string(), e))?;
        let start = sf.offset();
        cx.store.set_link(buf, sf.link());
        // The file header travels with the frames as the link type does (pcapout writes
        // the file back with it).
        self.header = sf.pcap_header(map.bytes());
        if let Some(h) = self.header {
            cx.store.set_capture(buf, h);
        }
        (self.link, self.dlt) = (sf.link(), sf.dlt());
        let (tx, rx) = std::sync::mpsc::sync_channel(CHUNKS_AHEAD);
        let (recycle, back) = std::sync::mpsc::channel();
        // Release: pair with the Acquire loads of `edge` (populate_step, `index`) and `walk`
        // (`next_chunk`); the indexer thread is spawned after them, which orders them too.
        self.shared
            .edge
            .store(start - start % 4096, Ordering::Release);
        self.shared.walk.store(start, Ordering::Release);
        let shared = self.shared.clone();
        self.map = map.clone();
        let indexer = std::thread::Builder::new()
            .name("pcapin-index".into())
            .spawn(move || {
                // pcap records are walked in lanes; pcapng's blocks one after another.
                if sf.is_pcapng() {
                    index(&map, sf, &shared, &tx, &back)
                } else {
                    lanes::index(&map, sf, &shared, &tx, &back)
                }
            })
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
                    rx.recv()
                        .map_err(|_| std::sync::mpsc::TryRecvError::Disconnected)
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
                    cx.warn(format!(
                        "{}: {p}; read {} packets before it",
                        self.path.display(),
                        self.packets
                    ));
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
fn index(
    map: &dataplane::FileMap,
    mut sf: Savefile,
    shared: &Shared,
    tx: &std::sync::mpsc::SyncSender<Msg>,
    back: &std::sync::mpsc::Receiver<Vec<Rec>>,
) {
    let file = map.bytes();
    let mut ahead = sf.offset();
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut problem = None;
    loop {
        let off = sf.offset();
        if ahead < off + PREFETCH {
            // Acquire pairs with the claiming CAS in `populate_step` (either thread's).
            while shared.edge.load(Ordering::Acquire) < off + 2 * PREFETCH
                && shared.populate_step(map, off + 2 * PREFETCH)
            {}
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
        chunk.push(Rec::of(&r));
        if chunk.len() == CHUNK {
            let next = back.try_recv().map(|mut v| {
                v.clear();
                v
            });
            let next = next.unwrap_or_else(|_| Vec::with_capacity(CHUNK));
            // Release pairs with the reader's Acquire load of `walk` in `next_chunk`.
            shared.walk.store(sf.offset(), Ordering::Release);
            if tx
                .send(Msg::Recs(std::mem::replace(&mut chunk, next)))
                .is_err()
            {
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
                if let Some(h) = self.header {
                    cx.store.set_capture(id, h);
                }
                self.fixed = Some(id);
                id
            }
        };
        let (mut t, s) = cx.store.alloc_in(ring, len);
        s.copy_from_slice(&bytes);
        swap_pseudo_header(self.dlt, s, r.meta.orig_len);
        cx.store.add_record(
            ring,
            RecordMeta::whole(t.pos, r.len, r.meta.ts_ns, r.meta.orig_len),
        );
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
            out.push(Tag {
                pos: r.meta.pos,
                len: r.len,
                buf: self.buf,
                class: 1,
            });
        }
        cx.store.append_records(self.buf, &self.metas);
        more
    }
    fn progress(&self) -> Option<(u64, u64)> {
        Some((self.off, self.size.max(1)))
    }
}

// The declarations of this file's filters are data in the catalog
// (`catalog::sources::PCAPIN`); their constructors are below, paired with them in
// `filters::CONSTRUCTORS`.
