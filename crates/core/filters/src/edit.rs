//! Editing filters: strip (a metadata edit), deflate/inflate, encrypt/decrypt (AES-256-GCM).
//! Filters that produce new data write it once into the space's data ring.

use crate::packet::parse_tag;
use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use dataplane::{Args, Batch, Ctx, Filter, FilterError, Tag};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

/// Crops blocks: a number of bytes, or up to a protocol's payload. No copy.
pub struct Strip {
    bytes: u32,
    to_payload: bool,
}
impl Filter for Strip {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in batch.tags.iter_mut() {
            let skip = if self.to_payload {
                match parse_tag(cx, t) {
                    Some(p) => p.payload.0 as u32,
                    None => 0,
                }
            } else {
                self.bytes.min(t.len)
            };
            t.pos += skip as u64;
            t.len -= skip;
            t.class = t.class.max(1);
        }
    }
}

/// How a compressed member is framed: gzip (RFC 1952: a 10-byte header, CRC-32 and
/// length after the data), zlib (RFC 1950: a 2-byte header, Adler-32 after), or raw
/// deflate (RFC 1951, no framing).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Framing {
    Gzip,
    Zlib,
    Raw,
}

impl Framing {
    fn parse(v: &str, auto: bool) -> Result<Option<Framing>, FilterError> {
        match v {
            "gzip" => Ok(Some(Framing::Gzip)),
            "zlib" => Ok(Some(Framing::Zlib)),
            "raw" => Ok(Some(Framing::Raw)),
            "auto" if auto => Ok(None),
            _ if auto => Err(FilterError::bad("format", v, "auto, gzip, zlib or raw")),
            _ => Err(FilterError::bad("format", v, "gzip, zlib or raw")),
        }
    }
}

/// gzip header fields (RFC 1952 2.3.1).
mod gz {
    pub const ID: [u8; 2] = [0x1f, 0x8b];
    pub const CM_DEFLATE: u8 = 8;
    pub const FHCRC: u8 = 2;
    pub const FEXTRA: u8 = 4;
    pub const FNAME: u8 = 8;
    pub const FCOMMENT: u8 = 16;
    /// Flag bits RFC 1952 reserves (must be zero).
    pub const RESERVED: u8 = 0xe0;
    pub const HEADER: usize = 10;
    pub const TRAILER: usize = 8;
    /// OS field: unknown (the output does not depend on the machine).
    pub const OS_UNKNOWN: u8 = 255;
    /// The longest header accepted (names and comments included).
    pub const MAX_HEADER: usize = 64 << 10;
}

/// `deflate`: each block becomes one complete member (gzip by default), so the output,
/// blocks written back to back, is a standard stream of concatenated members that
/// `gzip -dc`, `pigz -dc` or `zlib-flate -uncompress` (format=zlib) and `inflate` read,
/// however the blocks were placed or replicated. A member depends on no other block.
pub struct Deflate {
    level: u32,
    framing: Framing,
    /// One compressor, reset per block: its state is large, and allocating it for every
    /// block costs page faults.
    c: Option<Compress>,
}

impl Deflate {
    /// One member of `inp` into `out` (large enough); its length, None if it failed.
    fn member(&mut self, inp: &[u8], out: &mut [u8]) -> Option<usize> {
        let (zlib, head) = match self.framing {
            Framing::Gzip => (false, gz::HEADER),
            Framing::Zlib => (true, 0),
            Framing::Raw => (false, 0),
        };
        let level = self.level;
        let c = self
            .c
            .get_or_insert_with(|| Compress::new(Compression::new(level), zlib));
        c.reset();
        let body_end = out.len() - gz::TRAILER;
        match c.compress(inp, &mut out[head..body_end], FlushCompress::Finish) {
            Ok(flate2::Status::StreamEnd) => {}
            _ => return None,
        }
        let n = head + c.total_out() as usize;
        if self.framing != Framing::Gzip {
            return Some(n);
        }
        // XFL: 2 = the slowest compression, 4 = the fastest (RFC 1952), as gzip writes it.
        let xfl = match level {
            9 => 2,
            0 | 1 => 4,
            _ => 0,
        };
        out[..gz::HEADER].copy_from_slice(&[
            gz::ID[0],
            gz::ID[1],
            gz::CM_DEFLATE,
            0, // no flags: no name, no comment
            0,
            0,
            0,
            0, // no modification time: the output depends only on the input
            xfl,
            gz::OS_UNKNOWN,
        ]);
        let mut crc = flate2::Crc::new();
        crc.update(inp);
        out[n..n + 4].copy_from_slice(&crc.sum().to_le_bytes());
        out[n + 4..n + 8].copy_from_slice(&(inp.len() as u32).to_le_bytes());
        Some(n + gz::TRAILER)
    }
}

impl Filter for Deflate {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for i in 0..batch.len() {
            let t = batch.tags[i];
            // Deflate's worst case is 5 bytes per 16 KiB stored block over the input; a
            // header and a trailer on top.
            let cap = t.len as usize + t.len as usize / 1000 + 64 + gz::HEADER + gz::TRAILER;
            let mut failed = false;
            let res = cx.store.transform(&t, cap, |inp, out| {
                self.member(inp, out).unwrap_or_else(|| {
                    failed = true;
                    0
                })
            });
            match res {
                Ok(nt) if !failed => {
                    batch.tags[i] = nt;
                    batch.tags[i].class = t.class.max(1);
                    batch.shared[i] = false;
                }
                _ => {
                    cx.warn("a block could not be compressed; dropped");
                    batch.tags[i].class = 0;
                }
            }
        }
    }
}

/// Where `inflate` is in the byte stream.
enum At {
    /// Between members: the next byte starts one.
    Start,
    /// Reading a member's header (its bytes so far; a header may be cut between blocks).
    Header(Vec<u8>),
    /// Inflating a member's data.
    Body(Framing),
    /// Reading a gzip member's trailer (its bytes so far).
    Trailer(Vec<u8>),
}

/// What went wrong in a member.
type Bad = &'static str;

/// `inflate`: decodes a byte stream of concatenated members (gzip or zlib, told apart by
/// their headers, or raw deflate with format=raw), wherever the blocks cut it: a member
/// may span blocks (a file read in fixed-size blocks) or a block hold several. Each
/// member's data comes out as one block (cut every `max` bytes), so `deflate | inflate`
/// gives back the blocks deflate was given.
pub struct Inflate {
    /// None: gzip or zlib, whichever each member's header says.
    framing: Option<Framing>,
    max: usize,
    at: At,
    d: Decompress,
    /// The decompressor was made for zlib framing (its header parsed by it).
    d_zlib: bool,
    crc: flate2::Crc,
    /// Decompressed bytes not yet handed out: `ends` are the ends of complete blocks,
    /// what follows the last of them is the member being inflated.
    out: Vec<u8>,
    ends: Vec<usize>,
}

/// The length of the gzip header at the start of `h` (RFC 1952 2.3.1); None if `h` ends
/// before the header does.
fn gzip_header_len(h: &[u8]) -> Result<Option<usize>, Bad> {
    if h.len() < gz::HEADER {
        return Ok(None);
    }
    if h[2] != gz::CM_DEFLATE {
        return Err("a gzip member with another compression method than deflate");
    }
    let flg = h[3];
    if flg & gz::RESERVED != 0 {
        return Err("a gzip header with reserved flags set");
    }
    let mut n = gz::HEADER;
    if flg & gz::FEXTRA != 0 {
        let Some(x) = h.get(n..n + 2) else {
            return Ok(None);
        };
        n += 2 + u16::from_le_bytes([x[0], x[1]]) as usize;
    }
    for f in [gz::FNAME, gz::FCOMMENT] {
        if flg & f != 0 {
            match h.get(n..).and_then(|r| r.iter().position(|&b| b == 0)) {
                Some(z) => n += z + 1,
                None => return Ok(None),
            }
        }
    }
    if flg & gz::FHCRC != 0 {
        n += 2;
    }
    Ok((h.len() >= n).then_some(n))
}

/// Whether two bytes open a zlib stream (RFC 1950 2.2: deflate, a window of at most
/// 32 KiB, the header check, no preset dictionary).
fn is_zlib(b0: u8, b1: u8) -> bool {
    b0 & 0x0f == 8
        && b0 >> 4 <= 7
        && (u16::from(b0) << 8 | u16::from(b1)) % 31 == 0
        && b1 & 0x20 == 0
}

impl Inflate {
    fn new(framing: Option<Framing>, max: usize) -> Inflate {
        Inflate {
            framing,
            max: max.max(1),
            at: At::Start,
            d: Decompress::new(false),
            d_zlib: false,
            crc: flate2::Crc::new(),
            out: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// Start of the member being inflated in `out`.
    fn member_start(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    fn begin_body(&mut self, f: Framing) {
        let zlib = f == Framing::Zlib;
        if zlib != self.d_zlib {
            self.d = Decompress::new(zlib);
            self.d_zlib = zlib;
        } else {
            self.d.reset(zlib);
        }
        self.crc.reset();
        self.at = At::Body(f);
    }

    /// The member ends here: its data (what is left of it after cuts) is a block.
    fn end_member(&mut self) {
        self.ends.push(self.out.len());
        self.at = At::Start;
    }

    /// Forget the member being read (its data too).
    fn abandon(&mut self) {
        let s = self.member_start();
        self.out.truncate(s);
        self.at = At::Start;
    }

    /// Consume `inp` (one block's bytes); Err at the first byte that breaks the format,
    /// with the member left half-read.
    fn feed(&mut self, mut inp: &[u8]) -> Result<(), Bad> {
        while !inp.is_empty() {
            match &mut self.at {
                At::Start => match self.framing {
                    Some(Framing::Raw) => self.begin_body(Framing::Raw),
                    _ => self.at = At::Header(Vec::new()),
                },
                At::Header(h) => {
                    let had = h.len();
                    let take = inp.len().min(gz::MAX_HEADER - had);
                    h.extend_from_slice(&inp[..take]);
                    if h.len() < 2 {
                        inp = &inp[take..];
                        continue;
                    }
                    if h[..2] == gz::ID && self.framing != Some(Framing::Zlib) {
                        match gzip_header_len(h)? {
                            Some(n) => {
                                inp = &inp[n - had..];
                                self.begin_body(Framing::Gzip);
                            }
                            None if h.len() >= gz::MAX_HEADER => {
                                return Err("a gzip header longer than 64 KiB")
                            }
                            None => inp = &inp[take..],
                        }
                    } else if is_zlib(h[0], h[1]) && self.framing != Some(Framing::Gzip) {
                        // The decompressor reads the zlib header itself: give it back the
                        // header bytes an earlier block held.
                        let early = std::mem::take(h);
                        self.begin_body(Framing::Zlib);
                        self.inflate(&early[..had])?;
                    } else {
                        return Err(match self.framing {
                            Some(Framing::Gzip) => "not a gzip member",
                            Some(Framing::Zlib) => "not a zlib stream",
                            _ => "not gzip or zlib data",
                        });
                    }
                }
                At::Body(_) => {
                    let used = self.inflate(inp)?;
                    inp = &inp[used..];
                }
                At::Trailer(t) => {
                    let take = inp.len().min(gz::TRAILER - t.len());
                    t.extend_from_slice(&inp[..take]);
                    inp = &inp[take..];
                    if t.len() == gz::TRAILER {
                        let crc = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
                        let size = u32::from_le_bytes([t[4], t[5], t[6], t[7]]);
                        if crc != self.crc.sum() || size != self.crc.amount() {
                            return Err("a gzip member's CRC or length does not match its data");
                        }
                        self.end_member();
                    }
                }
            }
        }
        Ok(())
    }

    /// Inflate from `inp` until it is used up or the member's data ends; how many bytes
    /// of `inp` that took.
    fn inflate(&mut self, inp: &[u8]) -> Result<usize, Bad> {
        let At::Body(f) = self.at else {
            return Ok(0);
        };
        let mut used = 0;
        loop {
            // Room for the decompressor, and a cut every `max` bytes of a member.
            if self.out.capacity() - self.out.len() < 16 << 10 {
                self.out.reserve(64 << 10);
            }
            let (in0, o0) = (self.d.total_in(), self.out.len());
            let st = self
                .d
                .decompress_vec(&inp[used..], &mut self.out, FlushDecompress::None)
                .map_err(|_| "invalid deflate data")?;
            used += (self.d.total_in() - in0) as usize;
            if f == Framing::Gzip {
                self.crc.update(&self.out[o0..]);
            }
            while self.out.len() - self.member_start() > self.max {
                let cut = self.member_start() + self.max;
                self.ends.push(cut);
            }
            if st == flate2::Status::StreamEnd {
                if f == Framing::Gzip {
                    self.at = At::Trailer(Vec::with_capacity(gz::TRAILER));
                } else {
                    self.end_member();
                }
                return Ok(used);
            }
            let progressed = self.d.total_in() > in0 || self.out.len() > o0;
            if used == inp.len() || !progressed {
                return Ok(used);
            }
        }
    }

    /// Hand out the complete blocks as new blocks of class `class`.
    fn emit(&mut self, cx: &mut Ctx<'_>, class: u16, out: &mut Vec<Tag>) {
        let mut a = 0;
        for &e in &self.ends {
            let mut t = cx.store.push(&self.out[a..e]);
            t.class = class;
            out.push(t);
            a = e;
        }
        self.out.drain(..a);
        self.ends.clear();
    }
}

impl Filter for Inflate {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        let mut made = Vec::with_capacity(batch.len());
        for i in 0..batch.len() {
            let t = batch.tags[i];
            let mut warned: [Option<String>; 2] = [None, None];
            {
                let Ok(data) = cx.store.data(&t) else {
                    continue;
                };
                // A member that began in an earlier block and breaks in this one before
                // ending: the earlier block may have been cut short (a lost or truncated
                // datagram), so this block is read once more as the start of a member.
                let mid = !matches!(self.at, At::Start);
                let ends = self.ends.len();
                let mut r = self.feed(data);
                if r.is_err() && mid && self.ends.len() == ends {
                    self.abandon();
                    warned[0] =
                        Some("a member cut short (its end never came); its data dropped".into());
                    r = self.feed(data);
                }
                if let Err(why) = r {
                    self.abandon();
                    warned[1] = Some(format!(
                        "{why}: the rest of the block dropped (not what deflate or gzip write, or a byte stream split between copies of inflate?)"
                    ));
                }
            }
            for w in warned.into_iter().flatten() {
                cx.warn(w);
            }
            self.emit(cx, t.class.max(1), &mut made);
        }
        batch.tags.clear();
        batch.shared.clear();
        for t in made {
            batch.push(t);
        }
    }
    fn finish(&mut self, cx: &mut Ctx<'_>, out: &mut Batch) {
        if !matches!(self.at, At::Start) {
            // As gzip -dc: what was inflated is delivered, with a warning.
            cx.warn("the input ended inside a member (truncated?): its data so far delivered");
            self.ends.push(self.out.len());
            self.at = At::Start;
        }
        let mut made = Vec::new();
        self.emit(cx, 1, &mut made);
        for t in made {
            out.push(t);
        }
    }
}

/// AES-256-GCM per block: output = 12-byte nonce | ciphertext | 16-byte tag.
pub struct Crypt {
    enc: bool,
    cipher: Aes256Gcm,
    counter: u64,
    salt: u32,
}
impl Filter for Crypt {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for i in 0..batch.len() {
            let t = batch.tags[i];
            let data = match cx.data(&t) {
                Ok(d) => d,
                Err(_) => {
                    batch.tags[i].class = 0;
                    continue;
                }
            };
            let out = if self.enc {
                // Unique nonces: a random per-run salt and a counter.
                self.counter += 1;
                let mut n = [0u8; 12];
                n[..4].copy_from_slice(&self.salt.to_le_bytes());
                n[4..].copy_from_slice(&self.counter.to_le_bytes());
                self.cipher
                    .encrypt(Nonce::from_slice(&n), data)
                    .ok()
                    .map(|c| [n.to_vec(), c].concat())
            } else if data.len() >= 28 {
                self.cipher
                    .decrypt(Nonce::from_slice(&data[..12]), &data[12..])
                    .ok()
            } else {
                None
            };
            match out {
                Some(bytes) => {
                    let nt = cx.store.push(&bytes);
                    batch.tags[i] = nt;
                    batch.tags[i].class = t.class.max(1);
                    batch.shared[i] = false;
                }
                None => {
                    cx.warn(if self.enc {
                        "encryption failed"
                    } else {
                        "a block failed authentication (wrong key or corrupt); dropped"
                    });
                    batch.tags[i].class = 0;
                }
            }
        }
    }
}

fn key_from(a: &Args) -> Result<[u8; 32], FilterError> {
    const KEY: &str = "64 hex digits (256 bits)";
    let (key, hex) = match (a.get("key", None), a.get("keyfile", None)) {
        (Some(k), _) => ("key", k.to_string()),
        (None, Some(f)) => (
            "keyfile",
            std::fs::read_to_string(f)
                .map_err(|e| FilterError::io(format!("cannot read keyfile {f}"), e))?
                .trim()
                .to_string(),
        ),
        (None, None) => {
            return Err(FilterError::Missing {
                key: "key".into(),
                expected: format!("key=HEX ({KEY}) or keyfile=F"),
            })
        }
    };
    let shown = if key == "key" {
        hex.clone()
    } else {
        format!(
            "{} (its contents)",
            a.get("keyfile", None).unwrap_or_default()
        )
    };
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(FilterError::bad(
            key,
            &shown,
            &format!("{KEY}, got {} characters", hex.len()),
        ));
    }
    let mut k = [0u8; 32];
    for i in 0..32 {
        k[i] = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| FilterError::bad(key, &shown, KEY))?;
    }
    Ok(k)
}

/// Edits blocks in place: XOR with a repeating key. The one filter here that writes into
/// existing blocks, through `Ctx::writable` (a private copy only when the block is shared).
pub struct Xor {
    key: Vec<u8>,
}
impl Filter for Xor {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for i in 0..batch.len() {
            let class = batch.tags[i].class.max(1);
            match cx.writable(batch, i) {
                Ok(d) => {
                    for (j, b) in d.iter_mut().enumerate() {
                        *b ^= self.key[j % self.key.len()];
                    }
                    batch.tags[i].class = class;
                }
                Err(_) => batch.tags[i].class = 0,
            }
        }
    }
}
pub(crate) fn make_xor(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let hex = a.require("key", Some(0))?;
    if hex.is_empty() || hex.len() % 2 != 0 {
        return Err(FilterError::bad("key", hex, "an even number of hex digits"));
    }
    let key = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| FilterError::bad("key", hex, "an even number of hex digits"))?;
    Ok(Box::new(Xor { key }))
}

pub(crate) fn make_strip(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    match a.get("bytes", Some(0)) {
        Some("payload") => Ok(Box::new(Strip {
            bytes: 0,
            to_payload: true,
        })),
        Some(n) => Ok(Box::new(Strip {
            bytes: n
                .parse()
                .map_err(|_| FilterError::bad("bytes", n, "a byte count or payload"))?,
            to_payload: false,
        })),
        None => Ok(Box::new(Strip {
            bytes: 0,
            to_payload: true,
        })),
    }
}
pub(crate) fn make_deflate(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let level: u32 = a.parse("level", Some(0), 6)?;
    if level > 9 {
        return Err(FilterError::bad("level", &level.to_string(), "0..=9"));
    }
    let framing =
        Framing::parse(a.get("format", None).unwrap_or("gzip"), false)?.unwrap_or(Framing::Gzip);
    Ok(Box::new(Deflate {
        level,
        framing,
        c: None,
    }))
}
pub(crate) fn make_inflate(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let framing = Framing::parse(a.get("format", None).unwrap_or("auto"), true)?;
    Ok(Box::new(Inflate::new(
        framing,
        a.size("max", None, 1 << 20)? as usize,
    )))
}
fn make_crypt(a: &Args, enc: bool) -> Result<Box<dyn Filter>, FilterError> {
    let k = key_from(a)?;
    Ok(Box::new(Crypt {
        enc,
        cipher: Aes256Gcm::new_from_slice(&k)
            .map_err(|_| FilterError::bad("key", "(given)", "a 256-bit key"))?,
        counter: 0,
        salt: rand::random(),
    }))
}
pub(crate) fn make_encrypt(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    make_crypt(a, true)
}
pub(crate) fn make_decrypt(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    make_crypt(a, false)
}

// The declarations of this file's filters are data in the catalog (`catalog::edit::{STRIP,
// DEFLATE, INFLATE, ENCRYPT, DECRYPT, XOR}`); their constructors are below, paired with
// them in `filters::CONSTRUCTORS`.
