//! Sources: capture files, byte files and stdin, synthetic blocks.

use dataplane::{Access, Args, Batch, BufId, Ctx, Filter, FilterSpec, Param, RecordMeta, Tag};
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use std::io::Read;
use std::path::PathBuf;

/// The capture's format, with the parser state carried from batch to batch.
enum Format {
    Pcap(PcapParser),
    /// pcapng, with the link types of the interfaces described so far.
    PcapNg(PcapNgParser, Vec<u32>),
}

pub struct PcapIn {
    path: PathBuf,
    buf: BufId,
    /// Parser and where the next record starts; None before the first pull and after the end.
    format: Option<Format>,
    off: usize,
    size: u64,
    opened: bool,
    link_set: bool,
    /// This batch's records (reused).
    metas: Vec<RecordMeta>,
    packets: u64,
    /// How far ahead of `off` the file has been prefetched.
    ahead: usize,
}

/// Distance in bytes the reader prefetches ahead of the record it parses.
const PREFETCH: usize = 16 << 10;

fn check_capture_magic(path: &PathBuf) -> Result<(), String> {
    let mut f = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut m = [0u8; 4];
    f.read_exact(&mut m).map_err(|_| format!("{}: too short to be a capture file", path.display()))?;
    match u32::from_le_bytes(m) {
        0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 | 0x0a0d_0d0a => Ok(()),
        x => Err(format!("{}: not a pcap or pcapng file (magic {x:#010x} at byte 0)", path.display())),
    }
}

impl PcapIn {
    fn make(a: &Args) -> Result<Box<dyn Filter>, String> {
        let path = PathBuf::from(a.require("file", Some(0))?);
        check_capture_magic(&path)?;
        Ok(Box::new(PcapIn { path, buf: 0, format: None, off: 0, size: 0, opened: false, link_set: false, metas: Vec::new(), packets: 0, ahead: 0 }))
    }

    /// Map the file and read its header. Packets are indexed batch by batch as they are
    /// pulled, so each packet's header is read while its cache lines are about to be used.
    fn open(&mut self, cx: &mut Ctx<'_>) -> Result<(), String> {
        let (buf, size) = cx.store.add_file(&self.path).map_err(|e| format!("cannot map {}: {e}", self.path.display()))?;
        self.buf = buf;
        self.size = size;
        let file = cx.store.file(buf).unwrap_or(&[]);
        let (rest, format) = if file.get(..4) == Some(&[0x0a, 0x0d, 0x0d, 0x0a]) {
            let (rest, p) = PcapNgParser::new(file).map_err(|e| format!("{}: bad pcapng header: {e}", self.path.display()))?;
            (rest, Format::PcapNg(p, Vec::new()))
        } else {
            let (rest, p) = PcapParser::new(file).map_err(|e| format!("{}: bad pcap header: {e}", self.path.display()))?;
            (rest, Format::Pcap(p))
        };
        self.off = file.len() - rest.len();
        if let Format::Pcap(p) = &format {
            cx.store.set_link(buf, u32::from(p.header().datalink));
            self.link_set = true;
        }
        self.format = Some(format);
        Ok(())
    }

    /// Index up to `max` more packets, emitting a tag for each. Returns a problem that
    /// ends the input (malformed record), if any.
    fn index(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> Option<String> {
        let file = cx.store.file(self.buf).unwrap_or(&[]);
        let base = file.as_ptr() as usize;
        let at = |s: &[u8]| (s.as_ptr() as usize - base) as u64;
        let mut rest = &file[self.off..];
        self.metas.clear();
        let mut problem = None;
        let mut link = None;
        match self.format.as_mut()? {
            Format::Pcap(p) => {
                while !rest.is_empty() && self.metas.len() < max {
                    let here = file.len() - rest.len();
                    if self.ahead < here + PREFETCH {
                        self.ahead = self.ahead.max(here);
                        cx.store.prefetch(self.buf, self.ahead, here + 2 * PREFETCH);
                        self.ahead = here + 2 * PREFETCH;
                    }
                    match p.next_packet(rest) {
                        Ok((r, pkt)) => {
                            let d: &[u8] = &pkt.data;
                            self.metas.push(RecordMeta { pos: at(d), ts_ns: pkt.timestamp.as_nanos() as u64, orig_len: pkt.orig_len });
                            out.push(Tag { pos: at(d), len: d.len() as u32, buf: self.buf, class: 1 });
                            rest = r;
                        }
                        Err(e) => {
                            problem = Some(format!("malformed or truncated packet record at byte {}: {e}", at(rest)));
                            break;
                        }
                    }
                }
            }
            Format::PcapNg(p, links) => {
                while !rest.is_empty() && self.metas.len() < max {
                    match p.next_block(rest) {
                        Ok((r, block)) => {
                            match block {
                                Block::InterfaceDescription(i) => links.push(u32::from(i.linktype)),
                                Block::EnhancedPacket(e) => {
                                    let d: &[u8] = &e.data;
                                    if !self.link_set {
                                        link = link.or(links.get(e.interface_id as usize).copied());
                                    }
                                    self.metas.push(RecordMeta { pos: at(d), ts_ns: e.timestamp.as_nanos() as u64, orig_len: e.original_len });
                                    out.push(Tag { pos: at(d), len: d.len() as u32, buf: self.buf, class: 1 });
                                }
                                Block::SimplePacket(sp) => {
                                    let d: &[u8] = &sp.data;
                                    self.metas.push(RecordMeta { pos: at(d), ts_ns: 0, orig_len: sp.original_len });
                                    out.push(Tag { pos: at(d), len: d.len() as u32, buf: self.buf, class: 1 });
                                }
                                _ => {}
                            }
                            rest = r;
                        }
                        Err(e) => {
                            problem = Some(format!("malformed pcapng block at byte {}: {e}", at(rest)));
                            break;
                        }
                    }
                }
            }
        }
        self.off = file.len() - rest.len();
        if rest.is_empty() || problem.is_some() {
            self.format = None;
        }
        if let Some(l) = link {
            cx.store.set_link(self.buf, l);
            self.link_set = true;
        }
        cx.store.append_records(self.buf, &self.metas);
        self.packets += self.metas.len() as u64;
        problem.map(|p| format!("{p}; read {} packets before it", self.packets))
    }
}

impl Filter for PcapIn {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if !self.opened {
            self.opened = true;
            if let Err(e) = self.open(cx) {
                cx.warn(e);
                cx.stop();
                return false;
            }
        }
        if let Some(p) = self.index(cx, out, max) {
            cx.warn(format!("{}: {p}", self.path.display()));
        }
        self.format.is_some()
    }
    fn progress(&self) -> Option<(u64, u64)> {
        Some((self.off as u64, self.size.max(1)))
    }
}

pub static PCAPIN: FilterSpec = FilterSpec {
    name: "pcapin",
    synopsis: "pcapin file=FILE",
    description: "Reads a pcap or pcapng capture. The file is mapped into memory and serves as the\n\
                  DBuf itself: each packet becomes a tag pointing into the file, nothing is copied.\n\
                  Timestamps and wire lengths travel out of band (for inspect and pcapout).\n\
                  A malformed or truncated record ends the input with a warning naming its byte offset.",
    params: &[Param { name: "file", doc: "capture file (also the first positional parameter)" }],
    classes: "1 for every packet",
    example: "streamline run 'pcapin file=examples/sample.pcap | tcp | dport |80 count'",
    access: Access::Source,
    source: true,
    make: PcapIn::make,
};

/// How a byte source cuts its input into blocks.
#[derive(Debug, Clone, Copy)]
enum Split {
    Chunk(usize),
    Lines,
    Fixed(usize),
}

fn split_mode(a: &Args) -> Result<Split, String> {
    let size = a.size("size", None, 0)? as usize;
    match a.get("split", None).unwrap_or(if size > 0 { "fixed" } else { "bytes" }) {
        "bytes" => Ok(Split::Chunk(if size > 0 { size } else { 64 * 1024 })),
        "lines" => Ok(Split::Lines),
        "fixed" if size > 0 => Ok(Split::Fixed(size)),
        "fixed" => Err(format!("{}: split=fixed needs size=N", a.filter)),
        m => Err(format!("{}: unknown split '{m}' (bytes, lines, fixed)", a.filter)),
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
    fn make(a: &Args) -> Result<Box<dyn Filter>, String> {
        let path = PathBuf::from(a.require("file", Some(0))?);
        std::fs::metadata(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
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

pub static FILE: FilterSpec = FilterSpec {
    name: "file",
    synopsis: "file FILE [split=bytes|lines|fixed] [size=N]",
    description: "Reads a file, mapped into memory as a DBuf (no copies), as blocks: chunks of\n\
                  64 KiB (split=bytes, size=N to change), one block per line including its newline\n\
                  (split=lines), or fixed-size records (split=fixed size=N; the last may be shorter).",
    params: &[
        Param { name: "file", doc: "the file (also the first positional parameter)" },
        Param { name: "split", doc: "bytes (default), lines or fixed" },
        Param { name: "size", doc: "block size for bytes/fixed (suffixes K, M)" },
    ],
    classes: "1 for every block",
    example: "streamline run 'file /var/log/syslog split=lines | grep error | count'",
    access: Access::Source,
    source: true,
    make: FileIn::make,
};

pub struct StdinIn {
    split: Split,
    pending: Vec<u8>,
    eof: bool,
    rx: Option<std::sync::mpsc::Receiver<Vec<u8>>>,
}

impl StdinIn {
    fn make(a: &Args) -> Result<Box<dyn Filter>, String> {
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

pub static STDIN: FilterSpec = FilterSpec {
    name: "stdin",
    synopsis: "stdin [split=bytes|lines|fixed] [size=N]",
    description: "Reads standard input into the space's data ring, cut into blocks as `file` does.",
    params: &[Param { name: "split", doc: "bytes (default), lines or fixed" }, Param { name: "size", doc: "block size for bytes/fixed" }],
    classes: "1 for every block",
    example: "cat access.log | streamline run 'stdin split=lines | grep GET | count'",
    access: Access::Source,
    source: true,
    make: StdinIn::make,
};

pub struct Gen {
    pattern: Vec<u8>,
    remaining: u64,
    size: usize,
    buf: BufId,
    seq: u64,
}

impl Gen {
    fn make(a: &Args) -> Result<Box<dyn Filter>, String> {
        let count = a.size("count", Some(0), 1000)?;
        let size = a.size("size", None, 1024)? as usize;
        if size == 0 || size > 1 << 20 {
            return Err(format!("gen: size={size} must be 1..=1M"));
        }
        Ok(Box::new(Gen { pattern: Vec::new(), remaining: count, size, buf: 0, seq: 0 }))
    }
}

impl Filter for Gen {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        // Blocks live in a dedicated ring of four batches (256 blocks each): a batch stays
        // intact while it walks the space, and the ring stays small enough to stay warm.
        if self.buf == 0 {
            self.buf = cx.store.add_ring((self.size * 1024).next_power_of_two().max(1 << 20));
        }
        let n = (max as u64).min(self.remaining);
        if self.pattern.len() != self.size * 256 {
            // One block's pattern per value of the sequence number's low byte.
            self.pattern = (0..256 * self.size).map(|k| ((k % self.size) as u8).wrapping_mul(31) ^ (k / self.size) as u8).collect();
        }
        for _ in 0..n {
            let (t, s) = cx.store.alloc_in(self.buf, self.size);
            // Deterministic content: the sequence number, then a pattern (copied whole).
            let seq = self.seq.to_le_bytes();
            let lo = seq[0] as usize * self.size;
            s.copy_from_slice(&self.pattern[lo..lo + self.size]);
            let k = s.len().min(8);
            s[..k].copy_from_slice(&seq[..k]);
            out.push(Tag { class: 1, ..t });
            self.seq += 1;
        }
        self.remaining -= n;
        self.remaining > 0
    }
}

pub static GEN: FilterSpec = FilterSpec {
    name: "gen",
    synopsis: "gen [count=N] [size=BYTES]",
    description: "Generates N synthetic blocks (default 1000) of the given size (default 1024)\n\
                  for benchmarks and tests: an 8-byte sequence number, then a pattern.",
    params: &[Param { name: "count", doc: "number of blocks (also positional; suffixes K, M)" }, Param { name: "size", doc: "block size in bytes" }],
    classes: "1 for every block",
    example: "streamline run 'gen count=1M size=64 | count'",
    access: Access::Source,
    source: true,
    make: Gen::make,
};
