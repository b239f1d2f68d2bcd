//! Generated captures for the oracle tests (`libpcap_oracle.rs`): pcap and pcapng files,
//! valid, truncated and crafted. Files are written in this host's byte order (little
//! endian) or the other one ("swapped").

use super::*;

/// Link types to draw from: the common ones, the ones libpcap treats specially (snap
/// length maxima, pseudo-header rewrites, LINKTYPE to DLT mappings) and a few others.
pub(crate) const LINKS: &[u32] = &[
    0, 1, 1, 1, 12, 14, 100, 101, 101, 106, 108, 113, 113, 117, 147, 189, 220, 228, 229, 231, 239,
    249, 276, 276, 279,
];

pub(crate) fn link() -> impl Strategy<Value = u32> {
    prop_oneof![
        8 => proptest::sample::select(LINKS),
        // The FCS-length bits pcap files may carry above the link type.
        1 => (proptest::sample::select(LINKS), 0u32..64).prop_map(|(l, f)| l | f << 26),
        1 => any::<u16>().prop_map(u32::from),
        1 => any::<u32>(),
    ]
}

pub(crate) fn snaplen() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => Just(262_144u32),
        2 => Just(65_535),
        3 => Just(96),
        2 => 1u32..300,
        1 => Just(0),
        1 => Just(0x8000_0000),
        1 => Just(u32::MAX),
        1 => any::<u32>(),
    ]
}

pub(crate) fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        12 => proptest::collection::vec(any::<u8>(), 0..140),
        3 => proptest::collection::vec(any::<u8>(), 140..400),
        1 => proptest::collection::vec(any::<u8>(), 65_000..70_000),
    ]
}

/// A wire length for a packet of `n` captured bytes.
pub(crate) fn wire_len(n: usize) -> impl Strategy<Value = u32> {
    let n = n as u32;
    prop_oneof![4 => Just(n), 3 => (1u32..3000).prop_map(move |k| n + k), 1 => any::<u32>()]
}

/// Give random bytes the shape that makes libpcap rewrite them (or fix their length) for
/// the link types where it does: CAN in Linux cooked captures, NFLOG TLVs, pf log headers,
/// completed incoming isochronous USB transfers. `big`: the file is big endian.
pub(crate) fn shape(link: u32, data: &mut Vec<u8>, len: &mut u32, big: bool, seed: u8) {
    let put32 = |d: &mut Vec<u8>, at: usize, v: u32| {
        let b = if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        d[at..at + 4].copy_from_slice(&b);
    };
    match linktype_to_dlt(link & 0x03ff_ffff) {
        113 => {
            data.resize(data.len().max(24), 0);
            data[14..16].copy_from_slice(&[0, 0x0c + (seed & 1)]);
        }
        276 => {
            data.resize(data.len().max(28), 0);
            data[0..2].copy_from_slice(&[0, 0x0c + (seed & 1)]);
        }
        117 => {
            data.resize(data.len().max(64), 0);
            data[0] = 48 + seed % 20;
        }
        239 => {
            data.resize(data.len().max(16), 0);
            data[1] = 0;
            let tlv = u16::from(seed % 12);
            let b = if big {
                tlv.to_be_bytes()
            } else {
                tlv.to_le_bytes()
            };
            data[4..6].copy_from_slice(&b);
        }
        220 => {
            let ndesc = u32::from(seed % 4);
            data.resize(data.len().max(64 + 16 * ndesc as usize), 0);
            data[8] = b'C';
            data[9] = 0;
            data[10] = 0x81;
            data[15] = 0;
            put32(data, 60, ndesc);
            let urb = u32::from(seed) * 7;
            put32(data, 32, urb);
            for d in 0..ndesc as usize {
                put32(data, 64 + 16 * d + 4, u32::from(seed) * d as u32);
            }
            *len = 64 + 16 * ndesc + urb;
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
pub(crate) struct PcapRec {
    pub(crate) sec: u32,
    pub(crate) frac: u32,
    pub(crate) data: Vec<u8>,
    pub(crate) len: u32,
    /// A captured length other than the bytes that follow (crafted).
    pub(crate) caplen: Option<u32>,
    /// Shape the bytes for the link type (see [`shape`]).
    pub(crate) shape: Option<u8>,
}

pub(crate) fn pcap_rec() -> impl Strategy<Value = PcapRec> {
    payload().prop_flat_map(|data| {
        let n = data.len();
        (
            prop_oneof![3 => 1_600_000_000u32..1_800_000_000, 1 => any::<u32>()],
            prop_oneof![3 => 0u32..1_000_000, 2 => 0u32..1_000_000_000, 1 => any::<u32>()],
            Just(data),
            wire_len(n),
            proptest::option::weighted(0.03, prop_oneof![0u32..600, any::<u32>()]),
            proptest::option::weighted(0.3, any::<u8>()),
        )
            .prop_map(|(sec, frac, data, len, caplen, shape)| PcapRec {
                sec,
                frac,
                data,
                len,
                caplen,
                shape,
            })
    })
}

#[derive(Debug, Clone)]
pub(crate) struct PcapFile {
    pub(crate) magic: u32,
    pub(crate) big: bool,
    pub(crate) version: (u16, u16),
    pub(crate) snaplen: u32,
    pub(crate) link: u32,
    pub(crate) recs: Vec<PcapRec>,
}

pub(crate) fn pcap_file() -> impl Strategy<Value = PcapFile> {
    (
        prop_oneof![10 => Just(0xa1b2_c3d4u32), 6 => Just(0xa1b2_3c4d), 2 => Just(0xa1b2_cd34), 1 => Just(0xa1b2_34cd), 1 => any::<u32>()],
        any::<bool>(),
        prop_oneof![16 => Just((2u16, 4u16)), 2 => (0u16..4, 0u16..6), 1 => Just((543, 0)), 1 => (any::<u16>(), any::<u16>())],
        snaplen(),
        link(),
        proptest::collection::vec(pcap_rec(), 0..16),
    )
        .prop_map(|(magic, big, version, snaplen, link, recs)| PcapFile { magic, big, version, snaplen, link, recs })
}

/// Mostly files as a capturing program writes them (`tidy`), the rest crafted.
pub(crate) fn pcap_case() -> impl Strategy<Value = PcapFile> {
    (pcap_file(), proptest::bool::weighted(0.7))
        .prop_map(|(f, tidy)| if tidy { f.tidy() } else { f })
}

/// Bytes in the file's byte order.
pub(crate) struct Writer {
    pub(crate) big: bool,
    pub(crate) out: Vec<u8>,
}

impl Writer {
    pub(crate) fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }
    pub(crate) fn pad4(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }
}

impl PcapFile {
    /// The file as a well-behaved writer makes it: a known magic and version, captured
    /// lengths that match the bytes (libpcap still cuts them to the snap length).
    pub(crate) fn tidy(mut self) -> PcapFile {
        if ![0xa1b2_c3d4, 0xa1b2_3c4d, 0xa1b2_cd34].contains(&self.magic) {
            self.magic = 0xa1b2_c3d4;
        }
        if !matches!(self.version, (2, 0..=4) | (543, 0)) {
            self.version = (2, 4);
        }
        for r in &mut self.recs {
            r.caplen = None;
        }
        self
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut w = Writer {
            big: self.big,
            out: Vec::new(),
        };
        w.u32(self.magic);
        w.u16(self.version.0);
        w.u16(self.version.1);
        w.u32(0);
        w.u32(0);
        w.u32(self.snaplen);
        w.u32(self.link);
        for r in &self.recs {
            let (mut data, mut len) = (r.data.clone(), r.len);
            if let Some(seed) = r.shape {
                shape(self.link, &mut data, &mut len, self.big, seed);
            }
            w.u32(r.sec);
            w.u32(r.frac);
            w.u32(r.caplen.unwrap_or(data.len() as u32));
            w.u32(len);
            if self.magic == 0xa1b2_cd34 {
                w.bytes(&[1, 0, 0, 0, 0x08, 0x00, 4, 0]);
            }
            w.bytes(&data);
        }
        w.out
    }
}

/// A pcapng option: code, the length it declares, and its value (padded to 4 on writing).
#[derive(Debug, Clone)]
pub(crate) struct Opt {
    pub(crate) code: u16,
    pub(crate) len: u16,
    pub(crate) value: Vec<u8>,
}

pub(crate) fn opt_of(code: u16, value: Vec<u8>) -> Opt {
    Opt {
        code,
        len: value.len() as u16,
        value,
    }
}

/// Options for interface blocks: the timestamp options libpcap reads (well and badly
/// formed), the end marker, and options it skips.
pub(crate) fn idb_opt() -> impl Strategy<Value = Opt> {
    prop_oneof![
        // if_tsresol: powers of 10 and of 2, the finest ones libpcap takes and beyond.
        6 => prop_oneof![Just(6u8), Just(9), Just(3), Just(0), Just(12), Just(19), 0u8..20].prop_map(|v| opt_of(9, vec![v])),
        4 => (0x80u8..0xc0).prop_map(|v| opt_of(9, vec![v])),
        1 => prop_oneof![20u8..0x80, 0xc0u8..=255].prop_map(|v| opt_of(9, vec![v])),
        // if_tsoffset.
        5 => prop_oneof![0u64..100_000, any::<u64>()].prop_map(|v| opt_of(14, v.to_le_bytes().to_vec())),
        // Either with a wrong length.
        1 => (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..12)).prop_map(|(c, v)| opt_of(if c % 2 == 0 { 9 } else { 14 }, v)),
        2 => Just(opt_of(0, vec![])),
        1 => proptest::collection::vec(any::<u8>(), 1..6).prop_map(|v| opt_of(0, v)),
        // Options libpcap skips: name, description, addresses, speed, filter, OS, custom.
        8 => (prop_oneof![Just(2u16), Just(3), Just(4), Just(5), Just(6), Just(8), Just(11), Just(12), Just(2988), any::<u16>()], proptest::collection::vec(any::<u8>(), 0..24))
            .prop_map(|(c, v)| opt_of(if c == 0 || c == 9 || c == 14 { 2 } else { c }, v)),
        // A declared length that does not match the bytes that follow.
        1 => (any::<u16>(), any::<u16>(), proptest::collection::vec(any::<u8>(), 0..12)).prop_map(|(code, len, value)| Opt { code, len, value }),
    ]
}

pub(crate) fn any_opt() -> impl Strategy<Value = Opt> {
    prop_oneof![
        4 => (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..24)).prop_map(|(c, v)| opt_of(c, v)),
        1 => (any::<u16>(), any::<u16>(), proptest::collection::vec(any::<u8>(), 0..12)).prop_map(|(code, len, value)| Opt { code, len, value }),
    ]
}

#[derive(Debug, Clone)]
pub(crate) enum NgBlock {
    /// An interface: the first interface's link type and snap length, or others.
    Idb {
        other: Option<(u16, u32)>,
        opts: Vec<Opt>,
    },
    /// `iface` is taken modulo the section's interfaces so far unless `raw`; the bytes are
    /// cut to the snap length, as a capturing program does, unless `over` (crafted).
    Epb {
        iface: u32,
        raw: bool,
        over: bool,
        ts: u64,
        data: Vec<u8>,
        len: u32,
        caplen: Option<u32>,
        shape: Option<u8>,
        opts: Vec<Opt>,
    },
    Pb {
        iface: u16,
        ts: u64,
        data: Vec<u8>,
        len: u32,
    },
    Spb {
        data: Vec<u8>,
        len: u32,
    },
    /// Any other block type (statistics, name resolution, custom, unknown) with a body.
    Other {
        kind: u32,
        body: Vec<u8>,
    },
    /// A block whose total length fields are crafted.
    Bad {
        kind: u32,
        len: u32,
        tail: Option<u32>,
        body: Vec<u8>,
    },
}

pub(crate) fn ts() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 1_600_000_000_000_000u64..1_800_000_000_000_000, 1 => any::<u64>(), 1 => 0u64..1_000_000]
}

pub(crate) fn ng_block() -> impl Strategy<Value = NgBlock> {
    let epb = payload().prop_flat_map(|data| {
        let n = data.len();
        (
            prop_oneof![8 => 0u32..4, 1 => any::<u32>()],
            (
                proptest::bool::weighted(0.02),
                proptest::bool::weighted(0.03),
            ),
            ts(),
            Just(data),
            wire_len(n),
            proptest::option::weighted(0.02, prop_oneof![0u32..600, any::<u32>()]),
            proptest::option::weighted(0.3, any::<u8>()),
            proptest::collection::vec(any_opt(), 0..2),
        )
            .prop_map(|(iface, (raw, over), ts, data, len, caplen, shape, opts)| {
                NgBlock::Epb {
                    iface,
                    raw,
                    over,
                    ts,
                    data,
                    len,
                    caplen,
                    shape,
                    opts,
                }
            })
    });
    prop_oneof![
        60 => epb,
        8 => (proptest::option::weighted(0.05, (prop_oneof![proptest::sample::select(LINKS).prop_map(|l| l as u16), any::<u16>()], snaplen())), proptest::collection::vec(idb_opt(), 0..4))
            .prop_map(|(other, opts)| NgBlock::Idb { other, opts }),
        3 => (0u16..3, ts(), payload()).prop_flat_map(|(iface, ts, data)| { let n = data.len(); (Just(iface), Just(ts), Just(data), wire_len(n)) })
            .prop_map(|(iface, ts, data, len)| NgBlock::Pb { iface, ts, data, len }),
        3 => payload().prop_flat_map(|data| { let n = data.len(); (Just(data), prop_oneof![4 => Just(n as u32), 1 => 0u32..500, 1 => any::<u32>()]) })
            .prop_map(|(data, len)| NgBlock::Spb { data, len }),
        9 => (prop_oneof![Just(4u32), Just(5), Just(10), Just(0xbad), Just(0x4000_0bad), Just(9), any::<u32>()], proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(kind, body)| NgBlock::Other { kind: if [1, 2, 3, 6, 0x0a0d_0d0a].contains(&kind) { 5 } else { kind }, body }),
        // (Rare: each ends the file.)
        1 => (prop_oneof![Just(6u32), Just(1), Just(3), any::<u32>()], prop_oneof![0u32..40, any::<u32>()], proptest::option::of(any::<u32>()), proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(kind, len, tail, body)| NgBlock::Bad { kind, len, tail, body }),
    ]
}

#[derive(Debug, Clone)]
pub(crate) struct Section {
    pub(crate) version: (u16, u16),
    /// A byte-order magic other than the file's (crafted).
    pub(crate) magic: Option<u32>,
    pub(crate) opts: Vec<Opt>,
    pub(crate) blocks: Vec<NgBlock>,
}

pub(crate) fn section() -> impl Strategy<Value = Section> {
    (
        prop_oneof![16 => Just((1u16, 0u16)), 2 => Just((1, 2)), 1 => (0u16..3, 0u16..4)],
        proptest::option::weighted(0.02, prop_oneof![Just(0x4d3c_2b1au32), any::<u32>()]),
        proptest::collection::vec(any_opt(), 0..2),
        // Usually an interface first.
        (
            proptest::bool::weighted(0.95),
            proptest::collection::vec(idb_opt(), 0..3),
            proptest::collection::vec(ng_block(), 0..20),
        ),
    )
        .prop_map(
            |(version, magic, opts, (idb_first, idb_opts, mut blocks))| {
                if idb_first {
                    blocks.insert(
                        0,
                        NgBlock::Idb {
                            other: None,
                            opts: idb_opts,
                        },
                    );
                }
                Section {
                    version,
                    magic,
                    opts,
                    blocks,
                }
            },
        )
}

#[derive(Debug, Clone)]
pub(crate) struct NgFile {
    pub(crate) big: bool,
    pub(crate) link: u16,
    pub(crate) snaplen: u32,
    pub(crate) sections: Vec<Section>,
}

pub(crate) fn ng_file() -> impl Strategy<Value = NgFile> {
    (
        any::<bool>(),
        prop_oneof![6 => proptest::sample::select(LINKS).prop_map(|l| l as u16), 1 => any::<u16>()],
        snaplen(),
        proptest::collection::vec(section(), 1..4),
    )
        .prop_map(|(big, link, snaplen, sections)| NgFile {
            big,
            link,
            snaplen,
            sections,
        })
}

/// Mostly files as a capturing program writes them (`tidy`), the rest crafted.
pub(crate) fn ng_case() -> impl Strategy<Value = NgFile> {
    (ng_file(), proptest::bool::weighted(0.6)).prop_map(|(f, tidy)| if tidy { f.tidy() } else { f })
}

/// Interface options as a writer makes them: each timestamp option once, well formed.
pub(crate) fn tidy_opts(opts: &mut Vec<Opt>) {
    let (mut resol, mut offset) = (false, false);
    opts.retain(|o| {
        if usize::from(o.len) != o.value.len() {
            return false;
        }
        match o.code {
            0 => false,
            9 => {
                let ok = !resol
                    && o.len == 1
                    && (o.value[0] <= 19 || (0x80..0xc0).contains(&o.value[0]));
                resol |= ok;
                ok
            }
            14 => {
                let ok = !offset && o.len == 8;
                offset |= ok;
                ok
            }
            _ => true,
        }
    });
}

impl NgFile {
    /// The file as a well-behaved writer makes it: sections of version 1.0 or 1.2 that
    /// start with an interface, all interfaces alike, well-formed options and blocks,
    /// packets on described interfaces and within the snap length.
    pub(crate) fn tidy(mut self) -> NgFile {
        for s in &mut self.sections {
            if s.version != (1, 2) {
                s.version = (1, 0);
            }
            s.magic = None;
            s.blocks.retain(|b| !matches!(b, NgBlock::Bad { .. }));
            if !matches!(s.blocks.first(), Some(NgBlock::Idb { .. })) {
                s.blocks.insert(
                    0,
                    NgBlock::Idb {
                        other: None,
                        opts: Vec::new(),
                    },
                );
            }
            for b in &mut s.blocks {
                match b {
                    NgBlock::Idb { other, opts } => {
                        *other = None;
                        tidy_opts(opts);
                    }
                    NgBlock::Epb {
                        raw, over, caplen, ..
                    } => {
                        (*raw, *over, *caplen) = (false, false, None);
                    }
                    NgBlock::Spb { data, len } => *len = data.len() as u32,
                    _ => {}
                }
            }
        }
        self
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut w = Writer {
            big: self.big,
            out: Vec::new(),
        };
        // Writes a block: type, total length, body (already padded), total length.
        fn block(w: &mut Writer, kind: u32, body: &Writer) {
            let len = 12 + body.out.len() as u32;
            w.u32(kind);
            w.u32(len);
            w.bytes(&body.out);
            w.u32(len);
        }
        fn opts(b: &mut Writer, opts: &[Opt]) {
            for o in opts {
                b.u16(o.code);
                b.u16(o.len);
                // Multi-byte option values of ours are written little endian above; in a
                // big-endian file if_tsoffset must be big endian.
                if o.code == 14 && o.value.len() == 8 && b.big {
                    let mut v = o.value.clone();
                    v.reverse();
                    b.bytes(&v);
                } else {
                    b.bytes(&o.value);
                }
                b.pad4();
            }
        }
        for s in &self.sections {
            let mut b = Writer {
                big: self.big,
                out: Vec::new(),
            };
            match s.magic {
                Some(m) => b.u32(m),
                None => b.u32(0x1a2b_3c4d),
            }
            b.u16(s.version.0);
            b.u16(s.version.1);
            b.u64(u64::MAX);
            opts(&mut b, &s.opts);
            block(&mut w, 0x0a0d_0d0a, &b);
            let mut ifaces = 0u32;
            for blk in &s.blocks {
                let mut b = Writer {
                    big: self.big,
                    out: Vec::new(),
                };
                match blk {
                    NgBlock::Idb { other, opts: o } => {
                        let (l, snap) = other.unwrap_or((self.link, self.snaplen));
                        b.u16(l);
                        b.u16(0);
                        b.u32(snap);
                        opts(&mut b, o);
                        block(&mut w, 1, &b);
                        ifaces += 1;
                    }
                    NgBlock::Epb {
                        iface,
                        raw,
                        over,
                        ts,
                        data,
                        len,
                        caplen,
                        shape: sh,
                        opts: o,
                    } => {
                        let (mut data, mut len) = (data.clone(), *len);
                        if let Some(seed) = sh {
                            shape(u32::from(self.link), &mut data, &mut len, self.big, *seed);
                        }
                        if !over {
                            data.truncate(filters::savefile::adjust_snapshot(
                                linktype_to_dlt(u32::from(self.link)),
                                self.snaplen,
                            ) as usize);
                        }
                        b.u32(if *raw || ifaces == 0 {
                            *iface
                        } else {
                            iface % ifaces
                        });
                        b.u32((ts >> 32) as u32);
                        b.u32(*ts as u32);
                        b.u32(caplen.unwrap_or(data.len() as u32));
                        b.u32(len);
                        b.bytes(&data);
                        b.pad4();
                        opts(&mut b, o);
                        block(&mut w, 6, &b);
                    }
                    NgBlock::Pb {
                        iface,
                        ts,
                        data,
                        len,
                    } => {
                        let mut data = data.clone();
                        data.truncate(filters::savefile::adjust_snapshot(
                            linktype_to_dlt(u32::from(self.link)),
                            self.snaplen,
                        ) as usize);
                        b.u16(if ifaces == 0 {
                            *iface
                        } else {
                            iface % ifaces as u16
                        });
                        b.u16(0);
                        b.u32((ts >> 32) as u32);
                        b.u32(*ts as u32);
                        b.u32(data.len() as u32);
                        b.u32(*len);
                        b.bytes(&data);
                        b.pad4();
                        block(&mut w, 2, &b);
                    }
                    NgBlock::Spb { data, len } => {
                        b.u32(*len);
                        b.bytes(data);
                        b.pad4();
                        block(&mut w, 3, &b);
                    }
                    NgBlock::Other { kind, body } => {
                        b.bytes(body);
                        b.pad4();
                        block(&mut w, *kind, &b);
                    }
                    NgBlock::Bad {
                        kind,
                        len,
                        tail,
                        body,
                    } => {
                        w.u32(*kind);
                        w.u32(*len);
                        w.bytes(body);
                        w.u32(tail.unwrap_or(*len));
                    }
                }
            }
        }
        w.out
    }
}

/// What may happen to a written file: cut short, a byte changed, a word overwritten with
/// a value that matters to a length or type field.
#[derive(Debug, Clone)]
pub(crate) enum Damage {
    None,
    Cut(proptest::sample::Index),
    Byte(proptest::sample::Index, u8),
    Word(proptest::sample::Index, u32),
}

pub(crate) fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        12 => Just(Damage::None),
        2 => any::<proptest::sample::Index>().prop_map(Damage::Cut),
        1 => (any::<proptest::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Damage::Byte(i, b)),
        1 => (any::<proptest::sample::Index>(), prop_oneof![Just(0u32), Just(u32::MAX), Just(0x8000_0000), Just(12), Just(1), Just(6), Just(0x0a0d_0d0a), Just(96), Just(262_145), any::<u32>()])
            .prop_map(|(i, v)| Damage::Word(i, v)),
    ]
}

pub(crate) fn apply(mut file: Vec<u8>, d: &Damage) -> Vec<u8> {
    if file.is_empty() {
        return file;
    }
    match d {
        Damage::None => {}
        Damage::Cut(i) => file.truncate(i.index(file.len())),
        Damage::Byte(i, b) => {
            let at = i.index(file.len());
            file[at] = *b;
        }
        Damage::Word(i, v) => {
            let at = i.index(file.len()) & !3;
            let n = (file.len() - at).min(4);
            file[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
    }
    file
}
