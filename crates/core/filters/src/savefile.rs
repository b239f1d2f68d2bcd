//! Capture files (pcap and pcapng) read exactly as libpcap's savefile reader reads them
//! (`sf-pcap.c`, `sf-pcapng.c` and `pcap-util.c` of libpcap 1.10), over the bytes of a
//! mapped file: [`Savefile::open`] checks the header as `pcap_open_offline` does and
//! [`Savefile::next`] walks one record at a time as `pcap_next_ex` does, handing out where
//! each packet's bytes lie in the file (nothing is copied) with its timestamp and lengths.
//!
//! Owns: the file formats' rules and nothing else (the `pcapin` source in [`crate::sources`]
//! maps the file, runs the walk in its indexer thread and turns records into tags).
//! What libpcap accepts is accepted, what it refuses is refused, at the same record:
//!
//! - pcap: microsecond and nanosecond magic, either byte order, versions 2.0-2.4 and 543.0
//!   (caplen and len swapped in versions before 2.3, maybe in 2.3), Kuznetzov's patched
//!   record headers; a zero or huge (> 2^31-1) snap length means the link type's maximum;
//!   a record whose captured length is above the snap length (but not above the link
//!   type's maximum) is delivered cut to the snap length; the link type's upper six bits
//!   (the FCS length) are dropped.
//! - pcapng: section header blocks (a later section with the other byte order or another
//!   major version ends the file), interface blocks with `if_tsresol` (powers of 10 and of
//!   2) and `if_tsoffset`, enhanced, simple and obsolete packet blocks; block types and
//!   options it does not know are skipped. Like libpcap it reads one link type and snap
//!   length per file: an interface block with another ends the file.
//! - timestamps are libpcap's (seconds, nanoseconds) pair, including its arithmetic on odd
//!   values (negative pcap seconds, fractions of a second above one second, pcapng
//!   resolutions finer than a nanosecond).
//! - the pseudo-headers libpcap rewrites for the reading host (byte-swapped files of
//!   Linux cooked captures of CAN, USB, NFLOG, PFLOG) are flagged on the record
//!   ([`Record::rewrite`]) and rewritten by [`swap_pseudo_header`] on a copy; the wire
//!   length of Linux USB isochronous completions is corrected as libpcap corrects it.
//!
//! An error names the byte offset where the header, record or block that broke the rules
//! starts, and what was wrong; nothing in a hostile file makes it panic.

use kernel::cbpf::linktype_to_dlt;

/// libpcap's `MAXIMUM_SNAPLEN`: the largest packet most link types can have.
pub const MAXIMUM_SNAPLEN: u32 = 262_144;

/// DLT values (Linux) with rules of their own.
mod dlt {
    pub const EN10MB: u32 = 1;
    pub const LINUX_SLL: u32 = 113;
    pub const PFLOG: u32 = 117;
    pub const USB_LINUX: u32 = 189;
    pub const USB_LINUX_MMAPPED: u32 = 220;
    pub const DBUS: u32 = 231;
    pub const NFLOG: u32 = 239;
    pub const USBPCAP: u32 = 249;
    pub const LINUX_SLL2: u32 = 276;
    pub const EBHSCR: u32 = 279;
}

/// The largest captured length libpcap accepts for a link type (`max_snaplen_for_dlt`).
pub fn max_snaplen_for_dlt(dlt: u32) -> u32 {
    match dlt {
        dlt::DBUS => 128 << 20,
        dlt::EBHSCR => 8 << 20,
        dlt::USBPCAP => 1 << 20,
        _ => MAXIMUM_SNAPLEN,
    }
}

/// The snap length libpcap uses for a file's (`pcap_adjust_snapshot`): 0 and values
/// above `i32::MAX` mean the link type's maximum.
pub fn adjust_snapshot(dlt: u32, snaplen: u32) -> u32 {
    if snaplen == 0 || snaplen > i32::MAX as u32 {
        max_snaplen_for_dlt(dlt)
    } else {
        snaplen
    }
}

/// Byte ranges of the headers, smoltcp style.
mod field {
    use std::ops::Range;
    pub type Field = Range<usize>;

    /// pcap file header (24 bytes).
    pub mod pcap {
        use super::Field;
        pub const MAGIC: Field = 0..4;
        pub const VERSION_MAJOR: Field = 4..6;
        pub const VERSION_MINOR: Field = 6..8;
        pub const SNAPLEN: Field = 16..20;
        pub const LINKTYPE: Field = 20..24;
        pub const LEN: usize = 24;
        /// Record header: ts_sec, ts_usec (or nsec), caplen, len; 16 bytes, or 24 in
        /// Kuznetzov's patched format (ifindex, protocol, packet type after them).
        pub const TS_SEC: Field = 0..4;
        pub const TS_FRAC: Field = 4..8;
        pub const CAPLEN: Field = 8..12;
        pub const ORIG_LEN: Field = 12..16;
        pub const RECORD: usize = 16;
        pub const RECORD_PATCHED: usize = 24;
    }

    /// pcapng blocks: type, total length, body, total length again.
    pub mod ng {
        use super::Field;
        pub const TYPE: Field = 0..4;
        pub const TOTAL_LEN: Field = 4..8;
        pub const HEADER: usize = 8;
        pub const TRAILER: usize = 4;
        /// Section header block body.
        pub const SHB_MAGIC: Field = 0..4;
        pub const SHB_MAJOR: Field = 4..6;
        pub const SHB_MINOR: Field = 6..8;
        pub const SHB_FIXED: usize = 16;
        /// Interface description block body.
        pub const IDB_LINKTYPE: Field = 0..2;
        pub const IDB_SNAPLEN: Field = 4..8;
        pub const IDB_FIXED: usize = 8;
        /// Enhanced packet block body.
        pub const EPB_IFACE: Field = 0..4;
        pub const EPB_TS_HIGH: Field = 4..8;
        pub const EPB_TS_LOW: Field = 8..12;
        pub const EPB_CAPLEN: Field = 12..16;
        pub const EPB_LEN: Field = 16..20;
        pub const EPB_FIXED: usize = 20;
        /// Obsolete packet block body (16-bit interface and drop count, then as EPB).
        pub const PB_IFACE: Field = 0..2;
        pub const PB_FIXED: usize = 20;
        /// Simple packet block body.
        pub const SPB_LEN: Field = 0..4;
        pub const SPB_FIXED: usize = 4;
        /// Option header: code, length.
        pub const OPT_CODE: Field = 0..2;
        pub const OPT_LEN: Field = 2..4;
        pub const OPT_HEADER: usize = 4;
    }
}

const TCPDUMP_MAGIC: u32 = 0xa1b2_c3d4;
const KUZNETZOV_MAGIC: u32 = 0xa1b2_cd34;
const NSEC_MAGIC: u32 = 0xa1b2_3c4d;
const BT_SHB: u32 = 0x0a0d_0d0a;
const BT_IDB: u32 = 1;
const BT_PB: u32 = 2;
const BT_SPB: u32 = 3;
const BT_EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
/// libpcap refuses a first section header block longer than this (`BT_SHB_INSANE_MAX`).
const SHB_MAX: u32 = 1 << 20;
/// libpcap's `INITIAL_MAX_BLOCKSIZE`.
const INITIAL_MAX_BLOCKSIZE: u32 = 16 << 20;
const OPT_ENDOFOPT: u16 = 0;
const IF_TSRESOL: u16 = 9;
const IF_TSOFFSET: u16 = 14;
/// Timestamps are handed out in nanoseconds (libpcap's `PCAP_TSTAMP_PRECISION_NANO`).
const USER_TSRESOL: u64 = 1_000_000_000;

/// Why a capture file (or the rest of it) cannot be read: the byte offset of the header,
/// record or block at fault, and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem} at byte {at}")]
pub struct SavefileError {
    pub at: u64,
    pub problem: Problem,
}

/// What was wrong (the cases where libpcap gives up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("too short to be a capture file ({len} bytes, the magic number needs 4)")]
    NoMagic { len: usize },
    #[error("not a pcap or pcapng file (magic {magic:#010x})")]
    UnknownFormat { magic: u32 },
    #[error("truncated file header ({got} of {want} bytes)")]
    TruncatedFileHeader { want: usize, got: usize },
    #[error("archaic pcap savefile format (version {major})")]
    Archaic { major: u16 },
    #[error("unsupported pcap savefile version {major}.{minor}")]
    PcapVersion { major: u16, minor: u16 },
    #[error("truncated packet record: its header has {got} of {want} bytes")]
    TruncatedRecordHeader { want: usize, got: usize },
    #[error("truncated packet record: {got} of its {caplen} captured bytes are in the file")]
    TruncatedPacket { caplen: u32, got: usize },
    #[error(
        "malformed packet record: captured length {caplen} is above the snap length {snaplen}"
    )]
    CaplenAboveSnaplen { caplen: u32, snaplen: u32 },
    #[error(
        "malformed packet record: captured length {caplen} is above this link type's maximum {max}"
    )]
    CaplenAboveMax { caplen: u32, max: u32 },
    #[error("malformed pcapng section header block: length {len} is outside 28..=1048576")]
    ShbLength { len: u32 },
    #[error("unsupported pcapng version {major}.{minor}")]
    NgVersion { major: u16, minor: u16 },
    #[error("pcapng file without an interface description block")]
    NoInterface,
    #[error("pcapng packet block before any interface description block")]
    PacketBeforeInterface,
    #[error("truncated pcapng block header ({got} of 8 bytes)")]
    TruncatedBlockHeader { got: usize },
    #[error("malformed pcapng block: length {len} is below 12")]
    BlockTooShort { len: u32 },
    #[error("malformed pcapng block: length {len} is not a multiple of 4")]
    BlockUnaligned { len: u32 },
    #[error("malformed pcapng block: length {len} is above the maximum {max}")]
    BlockTooLong { len: u32, max: u32 },
    #[error("truncated pcapng block: {got} of its {len} bytes are in the file")]
    TruncatedBlock { len: u32, got: usize },
    #[error("malformed pcapng block: length {head} in its header but {tail} in its trailer")]
    TrailerMismatch { head: u32, tail: u32 },
    #[error("malformed pcapng block of type {block_type:#x}: too short for its contents")]
    BlockBodyShort { block_type: u32 },
    #[error("malformed pcapng interface block: opt_endofopt has length {len}, not 0")]
    EndOfOptLength { len: u16 },
    #[error("malformed pcapng interface block: if_tsresol has length {len}, not 1")]
    TsresolLength { len: u16 },
    #[error("malformed pcapng interface block: if_tsresol given twice")]
    TsresolTwice,
    #[error("malformed pcapng interface block: if_tsresol {base}^-{exp} is too fine")]
    TsresolTooFine { base: u8, exp: u8 },
    #[error("malformed pcapng interface block: if_tsoffset has length {len}, not 8")]
    TsoffsetLength { len: u16 },
    #[error("malformed pcapng interface block: if_tsoffset given twice")]
    TsoffsetTwice,
    #[error("pcapng interface block with link type {link}, unlike the first interface's (libpcap reads one link type per file)")]
    InterfaceLinkType { link: u32 },
    #[error("pcapng interface block with snap length {snaplen}, unlike the first interface's {first} (libpcap reads one per file)")]
    InterfaceSnaplen { snaplen: u32, first: u32 },
    #[error("pcapng section with the other byte order")]
    SectionByteOrder,
    #[error("pcapng section header block with a bad byte-order magic {magic:#010x}")]
    SectionMagic { magic: u32 },
    #[error("pcapng section of unknown major version {major}")]
    SectionMajor { major: u16 },
    #[error("pcapng packet on interface {id}, but the section describes {count} interfaces")]
    UnknownInterface { id: u32, count: u32 },
}

/// One packet record: where its captured bytes lie in the file, its lengths and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Byte offset of the first captured byte in the file.
    pub pos: usize,
    /// Captured bytes delivered (libpcap's `caplen`, after its cut to the snap length).
    pub caplen: u32,
    /// Length on the wire (libpcap's `len`, after its fix-ups).
    pub orig_len: u32,
    /// Seconds, as libpcap's `ts.tv_sec`.
    pub ts_sec: i64,
    /// Nanoseconds, as libpcap's `ts.tv_usec` at nanosecond precision (libpcap passes odd
    /// values through: it may be negative or above 10^9).
    pub ts_nsec: i64,
    /// The bytes in the file are not what libpcap delivers: it rewrites a pseudo-header
    /// written in the other byte order; see [`swap_pseudo_header`].
    pub rewrite: bool,
}

impl Record {
    /// The time as nanoseconds since the epoch, computed as libpcap's (seconds,
    /// nanoseconds) pair would be, modulo 2^64 (times before 1970 wrap).
    pub fn ts_ns(&self) -> u64 {
        self.ts_sec
            .wrapping_mul(1_000_000_000)
            .wrapping_add(self.ts_nsec) as u64
    }
    /// The captured bytes as they lie in `file`.
    pub fn bytes<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        file.get(self.pos..self.pos + self.caplen as usize)
            .unwrap_or(&[])
    }
}

/// How caplen and len are ordered in a pcap file's records (they were exchanged in 2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lengths {
    Normal,
    Swapped,
    MaybeSwapped,
}

/// A pcapng interface's timestamp rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Iface {
    tsresol: u64,
    tsoffset: u64,
    binary: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Pcap {
        record: usize,
        lengths: Lengths,
        nanos: bool,
    },
    /// pcapng: the interfaces of the current section, the first interface's link type as
    /// given (libpcap compares later ones against its DLT), the largest block it reads.
    Ng { ifaces: Vec<Iface>, max_block: u32 },
}

/// A capture file being read: the header's facts and where the next record starts.
/// Holds no borrow of the file; each call is given the same bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Savefile {
    kind: Kind,
    swapped: bool,
    /// The link type as the file names it (pcap: its LINKTYPE with the FCS bits dropped).
    link: u32,
    /// libpcap's `p->linktype`: the DLT for `link`.
    dlt: u32,
    /// libpcap's `p->snapshot`.
    snapshot: u32,
    /// Where the next record or block starts.
    off: usize,
    /// The error that ended the walk (every later call returns it again).
    failed: Option<SavefileError>,
}

/// `b[r]` as a native-endian integer, byte-swapped when the file is; 0 if out of range
/// (callers check lengths first).
fn rd16(b: &[u8], r: field::Field, swapped: bool) -> u16 {
    let v = b
        .get(r)
        .and_then(|s| <[u8; 2]>::try_from(s).ok())
        .map_or(0, u16::from_ne_bytes);
    if swapped {
        v.swap_bytes()
    } else {
        v
    }
}

fn rd32(b: &[u8], r: field::Field, swapped: bool) -> u32 {
    let v = b
        .get(r)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(0, u32::from_ne_bytes);
    if swapped {
        v.swap_bytes()
    } else {
        v
    }
}

fn rd64(b: &[u8], r: field::Field, swapped: bool) -> u64 {
    let v = b
        .get(r)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_ne_bytes);
    if swapped {
        v.swap_bytes()
    } else {
        v
    }
}

#[cold]
#[inline(never)]
fn err<T>(at: usize, problem: Problem) -> Result<T, SavefileError> {
    Err(SavefileError {
        at: at as u64,
        problem,
    })
}

/// One pcapng block: its type, where it starts, its body (without header and trailer).
struct Block<'a> {
    kind: u32,
    at: usize,
    body: &'a [u8],
}

impl<'a> Block<'a> {
    /// The first `n` bytes of the body, or libpcap's "too short" error.
    fn fixed(&self, n: usize) -> Result<&'a [u8], SavefileError> {
        match self.body.get(..n) {
            Some(b) => Ok(b),
            None => err(
                self.at,
                Problem::BlockBodyShort {
                    block_type: self.kind,
                },
            ),
        }
    }
}

impl Savefile {
    /// Check a capture file's header as `pcap_open_offline` does. For pcapng this reads
    /// up to the first interface description block (libpcap needs its link type).
    pub fn open(file: &[u8]) -> Result<Savefile, SavefileError> {
        let Some(m) = file.get(field::pcap::MAGIC) else {
            return err(0, Problem::NoMagic { len: file.len() });
        };
        let magic = u32::from_ne_bytes([m[0], m[1], m[2], m[3]]);
        if [TCPDUMP_MAGIC, KUZNETZOV_MAGIC, NSEC_MAGIC].contains(&magic) {
            return Self::open_pcap(file, magic, false);
        }
        if [TCPDUMP_MAGIC, KUZNETZOV_MAGIC, NSEC_MAGIC].contains(&magic.swap_bytes()) {
            return Self::open_pcap(file, magic.swap_bytes(), true);
        }
        if magic == BT_SHB {
            if let Some(sf) = Self::open_pcapng(file)? {
                return Ok(sf);
            }
        }
        err(
            0,
            Problem::UnknownFormat {
                magic: u32::from_le_bytes([m[0], m[1], m[2], m[3]]),
            },
        )
    }

    fn open_pcap(file: &[u8], magic: u32, swapped: bool) -> Result<Savefile, SavefileError> {
        use field::pcap as f;
        let Some(h) = file.get(..f::LEN) else {
            return err(
                0,
                Problem::TruncatedFileHeader {
                    want: f::LEN,
                    got: file.len(),
                },
            );
        };
        let (major, minor) = (
            rd16(h, f::VERSION_MAJOR, swapped),
            rd16(h, f::VERSION_MINOR, swapped),
        );
        if major < 2 {
            return err(0, Problem::Archaic { major });
        }
        if !((major == 2 && minor <= 4) || (major == 543 && minor == 0)) {
            return err(0, Problem::PcapVersion { major, minor });
        }
        let link = rd32(h, f::LINKTYPE, swapped) & 0x03ff_ffff;
        let dlt = linktype_to_dlt(link);
        let mut snapshot = adjust_snapshot(dlt, rd32(h, f::SNAPLEN, swapped));
        let lengths = match (major, minor) {
            (2, m) if m < 3 => Lengths::Swapped,
            (2, 3) => Lengths::MaybeSwapped,
            (543, _) => Lengths::Swapped,
            _ => Lengths::Normal,
        };
        let record = if magic == KUZNETZOV_MAGIC {
            // Possibly a cooked capture with a faked Ethernet header added to each packet.
            if dlt == dlt::EN10MB {
                snapshot = if snapshot <= i32::MAX as u32 - 14 {
                    snapshot + 14
                } else {
                    i32::MAX as u32
                };
            }
            f::RECORD_PATCHED
        } else {
            f::RECORD
        };
        Ok(Savefile {
            kind: Kind::Pcap {
                record,
                lengths,
                nanos: magic == NSEC_MAGIC,
            },
            swapped,
            link,
            dlt,
            snapshot,
            off: f::LEN,
            failed: None,
        })
    }

    /// pcapng's header: the first section header block, then blocks up to the first
    /// interface block. `None`: not pcapng after all (no byte-order magic), as libpcap
    /// then says "unknown file format".
    fn open_pcapng(file: &[u8]) -> Result<Option<Savefile>, SavefileError> {
        use field::ng as f;
        // Block type, total length, byte-order magic.
        if file.len() < 12 {
            return Ok(None);
        }
        let bom = rd32(file, 8..12, false);
        let swapped = match bom {
            BYTE_ORDER_MAGIC => false,
            m if m.swap_bytes() == BYTE_ORDER_MAGIC => true,
            _ => return Ok(None),
        };
        let total = rd32(file, f::TOTAL_LEN, swapped);
        if total < (f::HEADER + f::SHB_FIXED + f::TRAILER) as u32 || total > SHB_MAX {
            return err(0, Problem::ShbLength { len: total });
        }
        // libpcap reads the whole first block without looking at its trailer.
        if file.len() < total as usize {
            return err(
                0,
                Problem::TruncatedBlock {
                    len: total,
                    got: file.len(),
                },
            );
        }
        let body = &file[f::HEADER..];
        let (major, minor) = (
            rd16(body, f::SHB_MAJOR, swapped),
            rd16(body, f::SHB_MINOR, swapped),
        );
        if !(major == 1 && (minor == 0 || minor == 2)) {
            return err(0, Problem::NgVersion { major, minor });
        }
        let mut sf = Savefile {
            kind: Kind::Ng {
                ifaces: Vec::new(),
                max_block: INITIAL_MAX_BLOCKSIZE,
            },
            swapped,
            link: 0,
            dlt: 0,
            snapshot: 0,
            off: total as usize,
            failed: None,
        };
        loop {
            let Some(b) = sf.block(file)? else {
                return err(sf.off, Problem::NoInterface);
            };
            match b.kind {
                BT_IDB => {
                    let fixed = b.fixed(f::IDB_FIXED)?;
                    let link = u32::from(rd16(fixed, f::IDB_LINKTYPE, swapped));
                    let snaplen = rd32(fixed, f::IDB_SNAPLEN, swapped);
                    let iface = idb_options(&b, swapped)?;
                    sf.link = link;
                    sf.dlt = linktype_to_dlt(link);
                    sf.snapshot = adjust_snapshot(sf.dlt, snaplen);
                    // Room for the largest packet of this link type, with options.
                    let most = (f::HEADER + f::EPB_FIXED + f::TRAILER + 131_072) as u32
                        + max_snaplen_for_dlt(sf.dlt);
                    if let Kind::Ng { ifaces, max_block } = &mut sf.kind {
                        ifaces.push(iface);
                        *max_block = (*max_block).max(most);
                    }
                    return Ok(Some(sf));
                }
                BT_EPB | BT_SPB | BT_PB => return err(b.at, Problem::PacketBeforeInterface),
                _ => {}
            }
        }
    }

    /// The next pcapng block (libpcap's `read_block`), or `None` at the end of the file;
    /// `self.off` moves past it.
    fn block<'a>(&mut self, file: &'a [u8]) -> Result<Option<Block<'a>>, SavefileError> {
        use field::ng as f;
        let Kind::Ng { max_block, .. } = &self.kind else {
            return Ok(None);
        };
        let at = self.off;
        let rest = file.get(at..).unwrap_or(&[]);
        if rest.is_empty() {
            return Ok(None);
        }
        if rest.len() < f::HEADER {
            return err(at, Problem::TruncatedBlockHeader { got: rest.len() });
        }
        let kind = rd32(rest, f::TYPE, self.swapped);
        let len = rd32(rest, f::TOTAL_LEN, self.swapped);
        if len < (f::HEADER + f::TRAILER) as u32 {
            return err(at, Problem::BlockTooShort { len });
        }
        if !len.is_multiple_of(4) {
            return err(at, Problem::BlockUnaligned { len });
        }
        if len > *max_block {
            return err(
                at,
                Problem::BlockTooLong {
                    len,
                    max: *max_block,
                },
            );
        }
        let Some(block) = rest.get(..len as usize) else {
            return err(
                at,
                Problem::TruncatedBlock {
                    len,
                    got: rest.len(),
                },
            );
        };
        let end = len as usize - f::TRAILER;
        let tail = rd32(block, end..len as usize, self.swapped);
        if tail != len {
            return err(at, Problem::TrailerMismatch { head: len, tail });
        }
        self.off = at + len as usize;
        Ok(Some(Block {
            kind,
            at,
            body: &block[f::HEADER..end],
        }))
    }

    /// The link type as the file names it (pcap LINKTYPE_*; for pcap files without the
    /// FCS-length bits).
    pub fn link(&self) -> u32 {
        self.link
    }
    /// The snap length libpcap reads the file with.
    pub fn snapshot(&self) -> u32 {
        self.snapshot
    }
    /// Whether the file was written in the other byte order.
    pub fn swapped(&self) -> bool {
        self.swapped
    }
    /// libpcap's DLT for the file's link type (what [`swap_pseudo_header`] takes).
    pub fn dlt(&self) -> u32 {
        self.dlt
    }
    /// The file header as a pcap writer needs it to write the file back as it was: byte
    /// order, time precision and the snap length as stated (before libpcap adjusts it).
    /// None for pcapng and for Kuznetzov's patched records, which a pcap writer does not
    /// write. `file` must be the bytes given to [`Savefile::open`].
    pub fn pcap_header(&self, file: &[u8]) -> Option<dataplane::CaptureHeader> {
        let Kind::Pcap { record, nanos, .. } = self.kind else {
            return None;
        };
        if record != field::pcap::RECORD {
            return None;
        }
        // The magic number's first byte is 0xa1 in a big-endian file.
        let big_endian = *file.first()? == 0xa1;
        Some(dataplane::CaptureHeader {
            big_endian,
            nanos,
            snaplen: rd32(file, field::pcap::SNAPLEN, self.swapped),
        })
    }
    /// Whether this is a pcapng file.
    pub fn is_pcapng(&self) -> bool {
        matches!(self.kind, Kind::Ng { .. })
    }
    /// Where the next record or block starts.
    pub fn offset(&self) -> usize {
        self.off
    }
    /// Continue at byte `off` as if a record started there (pcapin's lanes guess where).
    pub fn seek(&mut self, off: usize) {
        (self.off, self.failed) = (off, None);
    }

    /// The next packet (`pcap_next_ex`): `Ok(None)` at the end of the file, an error for
    /// a record libpcap refuses (the walk cannot go on past it). `file` must be the bytes
    /// given to [`Savefile::open`].
    #[inline(always)]
    pub fn next(&mut self, file: &[u8]) -> Result<Option<Record>, SavefileError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = match &self.kind {
            Kind::Pcap {
                record,
                lengths,
                nanos,
            } => {
                let (record, lengths, nanos) = (*record, *lengths, *nanos);
                self.next_pcap(file, record, lengths, nanos)
            }
            Kind::Ng { .. } => self.next_ng_cold(file),
        };
        let r = r.inspect_err(|e| self.failed = Some(e.clone()))?;
        // The usual file (host order, no USB) needs nothing more per record.
        if !self.swapped && self.dlt != dlt::USB_LINUX_MMAPPED {
            return Ok(r);
        }
        Ok(r.map(|mut r| {
            let data = r.bytes(file);
            r.rewrite = self.swapped && rewrites(self.dlt, data, r.orig_len);
            if self.dlt == dlt::USB_LINUX_MMAPPED {
                r.orig_len = if r.rewrite {
                    let mut copy = data.to_vec();
                    swap_pseudo_header(self.dlt, &mut copy, r.orig_len);
                    fix_usb_mmapped_len(&copy, r.orig_len)
                } else {
                    fix_usb_mmapped_len(data, r.orig_len)
                };
            }
            r
        }))
    }

    /// pcapng's walk, kept out of line so that pcap's stays small and inlined.
    #[inline(never)]
    fn next_ng_cold(&mut self, file: &[u8]) -> Result<Option<Record>, SavefileError> {
        self.next_ng(file)
    }

    #[inline(always)]
    fn next_pcap(
        &mut self,
        file: &[u8],
        hdrsize: usize,
        lengths: Lengths,
        nanos: bool,
    ) -> Result<Option<Record>, SavefileError> {
        use field::pcap as f;
        let at = self.off;
        let rest = file.get(at..).unwrap_or(&[]);
        if rest.is_empty() {
            return Ok(None);
        }
        let Some(h) = rest.get(..hdrsize) else {
            return err(
                at,
                Problem::TruncatedRecordHeader {
                    want: hdrsize,
                    got: rest.len(),
                },
            );
        };
        let sw = self.swapped;
        let (mut caplen, mut len) = (rd32(h, f::CAPLEN, sw), rd32(h, f::ORIG_LEN, sw));
        // Seconds and fraction are signed 32-bit fields, which libpcap's byte swap turns
        // unsigned: a swapped file's are never negative.
        let signed = |v: u32| {
            if sw {
                i64::from(v)
            } else {
                i64::from(v as i32)
            }
        };
        let ts_sec = signed(rd32(h, f::TS_SEC, sw));
        let frac = signed(rd32(h, f::TS_FRAC, sw));
        let ts_nsec = if nanos { frac } else { frac * 1000 };
        if lengths == Lengths::Swapped || (lengths == Lengths::MaybeSwapped && caplen > len) {
            std::mem::swap(&mut caplen, &mut len);
        }
        let max = max_snaplen_for_dlt(self.dlt);
        if caplen > max {
            return err(
                at,
                if caplen > self.snapshot {
                    Problem::CaplenAboveSnaplen {
                        caplen,
                        snaplen: self.snapshot,
                    }
                } else {
                    Problem::CaplenAboveMax { caplen, max }
                },
            );
        }
        let data = &rest[hdrsize..];
        if (data.len() as u64) < u64::from(caplen) {
            return err(
                at,
                Problem::TruncatedPacket {
                    caplen,
                    got: data.len(),
                },
            );
        }
        self.off = at + hdrsize + caplen as usize;
        // A record above the snap length is read whole and delivered cut to it.
        let delivered = caplen.min(self.snapshot);
        Ok(Some(Record {
            pos: at + hdrsize,
            caplen: delivered,
            orig_len: len,
            ts_sec,
            ts_nsec,
            rewrite: false,
        }))
    }

    fn next_ng(&mut self, file: &[u8]) -> Result<Option<Record>, SavefileError> {
        use field::ng as f;
        let sw = self.swapped;
        loop {
            let Some(b) = self.block(file)? else {
                return Ok(None);
            };
            let (iface, caplen, len, t, data) = match b.kind {
                BT_EPB => {
                    let x = b.fixed(f::EPB_FIXED)?;
                    let t = u64::from(rd32(x, f::EPB_TS_HIGH, sw)) << 32
                        | u64::from(rd32(x, f::EPB_TS_LOW, sw));
                    (
                        rd32(x, f::EPB_IFACE, sw),
                        rd32(x, f::EPB_CAPLEN, sw),
                        rd32(x, f::EPB_LEN, sw),
                        t,
                        &b.body[f::EPB_FIXED..],
                    )
                }
                BT_PB => {
                    let x = b.fixed(f::PB_FIXED)?;
                    let t = u64::from(rd32(x, f::EPB_TS_HIGH, sw)) << 32
                        | u64::from(rd32(x, f::EPB_TS_LOW, sw));
                    (
                        u32::from(rd16(x, f::PB_IFACE, sw)),
                        rd32(x, f::EPB_CAPLEN, sw),
                        rd32(x, f::EPB_LEN, sw),
                        t,
                        &b.body[f::PB_FIXED..],
                    )
                }
                BT_SPB => {
                    let x = b.fixed(f::SPB_FIXED)?;
                    let len = rd32(x, f::SPB_LEN, sw);
                    // No captured length: the wire length cut to the snap length; no time.
                    (0, len.min(self.snapshot), len, 0, &b.body[f::SPB_FIXED..])
                }
                BT_IDB => {
                    let x = b.fixed(f::IDB_FIXED)?;
                    let link = u32::from(rd16(x, f::IDB_LINKTYPE, sw));
                    // libpcap compares the new interface's LINKTYPE with the first one's
                    // DLT (so a second LINKTYPE_RAW interface is refused, too).
                    if link != self.dlt {
                        return err(b.at, Problem::InterfaceLinkType { link });
                    }
                    let snaplen = rd32(x, f::IDB_SNAPLEN, sw);
                    if adjust_snapshot(self.dlt, snaplen) != self.snapshot {
                        return err(
                            b.at,
                            Problem::InterfaceSnaplen {
                                snaplen,
                                first: self.snapshot,
                            },
                        );
                    }
                    let iface = idb_options(&b, sw)?;
                    if let Kind::Ng { ifaces, .. } = &mut self.kind {
                        ifaces.push(iface);
                    }
                    continue;
                }
                BT_SHB => {
                    let x = b.fixed(f::SHB_FIXED)?;
                    let magic = rd32(x, f::SHB_MAGIC, sw);
                    if magic == BYTE_ORDER_MAGIC.swap_bytes() {
                        return err(b.at, Problem::SectionByteOrder);
                    }
                    if magic != BYTE_ORDER_MAGIC {
                        return err(b.at, Problem::SectionMagic { magic });
                    }
                    let major = rd16(x, f::SHB_MAJOR, sw);
                    if major != 1 {
                        return err(b.at, Problem::SectionMajor { major });
                    }
                    // A new section describes its own interfaces.
                    if let Kind::Ng { ifaces, .. } = &mut self.kind {
                        ifaces.clear();
                    }
                    continue;
                }
                _ => continue,
            };
            let Kind::Ng { ifaces, .. } = &self.kind else {
                return Ok(None);
            };
            let Some(&i) = ifaces.get(iface as usize) else {
                return err(
                    b.at,
                    Problem::UnknownInterface {
                        id: iface,
                        count: ifaces.len() as u32,
                    },
                );
            };
            if caplen > self.snapshot {
                return err(
                    b.at,
                    Problem::CaplenAboveSnaplen {
                        caplen,
                        snaplen: self.snapshot,
                    },
                );
            }
            let (ts_sec, ts_nsec) = i.time(t);
            if data.len() < caplen as usize {
                return err(b.at, Problem::BlockBodyShort { block_type: b.kind });
            }
            let pos = data.as_ptr() as usize - file.as_ptr() as usize;
            return Ok(Some(Record {
                pos,
                caplen,
                orig_len: len,
                ts_sec,
                ts_nsec,
                rewrite: false,
            }));
        }
    }
}

impl Iface {
    /// libpcap's conversion of a pcapng timestamp (in units of `tsresol`) to seconds and
    /// nanoseconds, overflow included.
    fn time(&self, t: u64) -> (i64, i64) {
        let sec = (t / self.tsresol).wrapping_add(self.tsoffset);
        let mut frac = t % self.tsresol;
        if self.tsresol != USER_TSRESOL {
            if self.binary {
                frac = frac.wrapping_mul(USER_TSRESOL) / self.tsresol;
            } else if self.tsresol > USER_TSRESOL {
                frac /= self.tsresol / USER_TSRESOL;
            } else {
                frac *= USER_TSRESOL / self.tsresol;
            }
        }
        // libpcap stores the fraction through an `int`.
        (sec as i64, i64::from(frac as u32 as i32))
    }
}

/// An interface block's timestamp options (libpcap's `process_idb_options`); options it
/// does not know are skipped.
fn idb_options(b: &Block<'_>, swapped: bool) -> Result<Iface, SavefileError> {
    use field::ng as f;
    let mut iface = Iface {
        tsresol: 1_000_000,
        tsoffset: 0,
        binary: false,
    };
    let (mut saw_resol, mut saw_offset) = (false, false);
    let mut opts = b.body.get(f::IDB_FIXED..).unwrap_or(&[]);
    let short = || err(b.at, Problem::BlockBodyShort { block_type: b.kind });
    while !opts.is_empty() {
        let Some(h) = opts.get(..f::OPT_HEADER) else {
            return short();
        };
        let (code, len) = (rd16(h, f::OPT_CODE, swapped), rd16(h, f::OPT_LEN, swapped));
        let padded = (len as usize).div_ceil(4) * 4;
        let Some(value) = opts.get(f::OPT_HEADER..f::OPT_HEADER + padded) else {
            return short();
        };
        opts = &opts[f::OPT_HEADER + padded..];
        match code {
            OPT_ENDOFOPT => {
                if len != 0 {
                    return err(b.at, Problem::EndOfOptLength { len });
                }
                break;
            }
            IF_TSRESOL => {
                if len != 1 {
                    return err(b.at, Problem::TsresolLength { len });
                }
                if saw_resol {
                    return err(b.at, Problem::TsresolTwice);
                }
                saw_resol = true;
                let v = value[0];
                if v & 0x80 != 0 {
                    let shift = v & 0x7f;
                    if shift > 63 {
                        return err(
                            b.at,
                            Problem::TsresolTooFine {
                                base: 2,
                                exp: shift,
                            },
                        );
                    }
                    iface.binary = true;
                    iface.tsresol = 1 << shift;
                } else {
                    if v > 19 {
                        return err(b.at, Problem::TsresolTooFine { base: 10, exp: v });
                    }
                    iface.binary = false;
                    iface.tsresol = 10u64.pow(u32::from(v));
                }
            }
            IF_TSOFFSET => {
                if len != 8 {
                    return err(b.at, Problem::TsoffsetLength { len });
                }
                if saw_offset {
                    return err(b.at, Problem::TsoffsetTwice);
                }
                saw_offset = true;
                iface.tsoffset = rd64(value, 0..8, swapped);
            }
            _ => {}
        }
    }
    Ok(iface)
}

/// Offsets in the pseudo-headers libpcap rewrites.
mod pseudo {
    /// Linux cooked headers: where the protocol is, how long the header is.
    pub const SLL_PROTOCOL: usize = 14;
    pub const SLL_LEN: usize = 16;
    pub const SLL2_PROTOCOL: usize = 0;
    pub const SLL2_LEN: usize = 20;
    pub const SLL_P_CAN: u16 = 0x000c;
    pub const SLL_P_CANFD: u16 = 0x000d;
    /// OpenBSD pf log header: its own length, then uid, pid, rule uid, rule pid.
    pub const PFLOG_UID: usize = 44;
    /// Linux USB header (64 bytes in memory-mapped captures).
    pub const USB_TRANSFER_TYPE: usize = 9;
    pub const USB_EVENT_TYPE: usize = 8;
    pub const USB_ENDPOINT: usize = 10;
    pub const USB_DATA_FLAG: usize = 15;
    pub const USB_URB_LEN: usize = 32;
    pub const USB_NDESC: usize = 60;
    pub const USB_MMAPPED_LEN: usize = 64;
    pub const USB_ISODESC_LEN: usize = 16;
    pub const URB_ISOCHRONOUS: u8 = 0;
    pub const URB_COMPLETE: u8 = b'C';
    pub const URB_TRANSFER_IN: u8 = 0x80;
}

/// Whether a Linux cooked packet carries CAN (whose id the capturing host wrote in its
/// own byte order) and is long enough for libpcap to rewrite it.
fn sll_can(dlt: u32, data: &[u8], len: u32) -> bool {
    let (proto, hlen) = if dlt == dlt::LINUX_SLL {
        (pseudo::SLL_PROTOCOL, pseudo::SLL_LEN)
    } else {
        (pseudo::SLL2_PROTOCOL, pseudo::SLL2_LEN)
    };
    let p = data
        .get(proto..proto + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]));
    data.len().min(len as usize) >= hlen + 4
        && matches!(p, Some(pseudo::SLL_P_CAN | pseudo::SLL_P_CANFD))
}

/// Whether libpcap would change bytes of this packet of a byte-swapped file.
fn rewrites(dlt: u32, data: &[u8], len: u32) -> bool {
    match dlt {
        dlt::LINUX_SLL | dlt::LINUX_SLL2 => sll_can(dlt, data, len),
        dlt::PFLOG | dlt::USB_LINUX | dlt::USB_LINUX_MMAPPED | dlt::NFLOG => {
            let mut copy = data.to_vec();
            swap_pseudo_header(dlt, &mut copy, len);
            copy != data
        }
        _ => false,
    }
}

/// Rewrite the pseudo-header of a packet from a byte-swapped file the way libpcap does
/// (`swap_pseudo_headers`): the fields the capturing host wrote in its own byte order.
/// `data` is the packet's captured bytes, `len` its wire length; `dlt` libpcap's link type
/// (see [`kernel::cbpf::linktype_to_dlt`]).
pub fn swap_pseudo_header(dlt: u32, data: &mut [u8], len: u32) {
    let swap = |d: &mut [u8], at: usize, n: usize| {
        if let Some(s) = d.get_mut(at..at + n) {
            s.reverse();
        }
    };
    let (caplen, len) = (data.len(), len as usize);
    match dlt {
        dlt::LINUX_SLL | dlt::LINUX_SLL2 if sll_can(dlt, data, len as u32) => {
            let at = if dlt == dlt::LINUX_SLL {
                pseudo::SLL_LEN
            } else {
                pseudo::SLL2_LEN
            };
            swap(data, at, 4);
        }
        dlt::PFLOG => {
            // uid, pid, rule uid, rule pid: each only when the capture and the header's
            // own length reach it.
            let hlen = data.first().copied().unwrap_or(0) as usize;
            for i in 0..4 {
                let end = pseudo::PFLOG_UID + 4 * (i + 1);
                if caplen < end || len < end || hlen < end {
                    break;
                }
                swap(data, end - 4, 4);
            }
        }
        dlt::USB_LINUX | dlt::USB_LINUX_MMAPPED => swap_usb(data, dlt == dlt::USB_LINUX_MMAPPED),
        dlt::NFLOG => {
            if caplen < 4 || len < 4 || data[1] != 0 {
                return;
            }
            let (mut at, mut caplen, mut len) = (4, caplen - 4, len - 4);
            while caplen >= 4 {
                swap(data, at, 2);
                swap(data, at + 2, 2);
                let tlv_len = u16::from_ne_bytes([data[at], data[at + 1]]) as usize;
                let size = tlv_len.div_ceil(4) * 4;
                if size < 4 || caplen < size || len < size {
                    return;
                }
                at += size;
                caplen -= size;
                len -= size;
            }
        }
        _ => {}
    }
}

/// libpcap's `swap_linux_usb_header`: every multi-byte field of the header (and, with the
/// 64-byte header of isochronous transfers, of the descriptors after it) that the capture
/// holds in full.
fn swap_usb(data: &mut [u8], header_64: bool) {
    let caplen = data.len();
    // (field end, width) in order: id, bus id, seconds, microseconds, status, URB length,
    // data length; the walk stops at the first field not captured whole.
    const FIELDS: [(usize, usize); 7] =
        [(8, 8), (14, 2), (24, 8), (28, 4), (32, 4), (36, 4), (40, 4)];
    let iso = data.get(pseudo::USB_TRANSFER_TYPE) == Some(&pseudo::URB_ISOCHRONOUS);
    let mut end = 40;
    for (e, w) in FIELDS {
        if caplen < e {
            return;
        }
        data[e - w..e].reverse();
    }
    if iso {
        for _ in 0..2 {
            end += 4;
            if caplen < end {
                return;
            }
            data[end - 4..end].reverse();
        }
    } else {
        end += 8;
    }
    if !header_64 {
        return;
    }
    for _ in 0..4 {
        end += 4;
        if caplen < end {
            return;
        }
        data[end - 4..end].reverse();
    }
    if iso {
        let ndesc = u32::from_ne_bytes([data[60], data[61], data[62], data[63]]);
        for _ in 0..ndesc {
            for _ in 0..3 {
                end += 4;
                if caplen < end {
                    return;
                }
                data[end - 4..end].reverse();
            }
            end += 4;
        }
    }
}

/// libpcap's `fixup_pcap_pkthdr` for memory-mapped Linux USB captures: the wire length of
/// a completed incoming isochronous transfer, computed from its descriptors. `data` as
/// delivered (pseudo-header in this host's byte order); returns the (maybe) new length.
fn fix_usb_mmapped_len(data: &[u8], len: u32) -> u32 {
    use pseudo::*;
    let caplen = data.len();
    if caplen < USB_MMAPPED_LEN {
        return len;
    }
    let rd = |at: usize| u32::from_ne_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let (ndesc, urb_len) = (rd(USB_NDESC), rd(USB_URB_LEN));
    let computed =
        USB_MMAPPED_LEN as u64 + u64::from(ndesc) * USB_ISODESC_LEN as u64 + u64::from(urb_len);
    let applies = data[USB_DATA_FLAG] == 0
        && data[USB_TRANSFER_TYPE] == URB_ISOCHRONOUS
        && data[USB_EVENT_TYPE] == URB_COMPLETE
        && data[USB_ENDPOINT] & URB_TRANSFER_IN != 0
        && u64::from(len) == computed;
    if !applies {
        return len;
    }
    let mut data_len: u32 = 0;
    let mut left = caplen - USB_MMAPPED_LEN;
    let mut at = USB_MMAPPED_LEN;
    let mut d = 0;
    while d < ndesc && left >= USB_ISODESC_LEN {
        let (off, dlen) = (rd(at + 4), rd(at + 8));
        if dlen != 0 {
            data_len = data_len.max(off.wrapping_add(dlen));
        }
        d += 1;
        left -= USB_ISODESC_LEN;
        at += USB_ISODESC_LEN;
    }
    let pre = (USB_MMAPPED_LEN as u64
        + u64::from(ndesc) * USB_ISODESC_LEN as u64
        + u64::from(data_len)) as u32;
    let mut len = len;
    if pre as usize >= caplen {
        len = pre;
    }
    if caplen > len as usize {
        len = caplen as u32;
    }
    len
}

#[cfg(test)]
mod tests;
