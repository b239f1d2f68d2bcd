//! libpcap is the oracle for capture files: generated captures (pcap and pcapng; valid,
//! truncated and crafted: random record fields, lengths, link types, timestamps, pcapng
//! sections, blocks and options, bytes overwritten) are read by libpcap (the `pcap`
//! crate's offline reader, at nanosecond precision) and by us, and must give the same
//! packets: the same count, bytes, captured and wire lengths, timestamps and link type,
//! the same refusals (a file libpcap cannot open is a build error of `pcapin`) and the same
//! end (a record libpcap refuses ends our input at the same packet, with a warning).
//!
//! Two readers of ours are checked: [`filters::savefile::Savefile`] directly, and `pcapin`
//! itself, run in a real space with a collecting sink. Each test also checks that its
//! generator reached every outcome (refused, read whole, ended by an error, packets cut to
//! the snap length, pseudo-headers rewritten). `ORACLE_CASES=N` runs N cases per test
//! (default 1000); `ORACLE_WHY=1` prints why libpcap refused or stopped, case by case.

use dataplane::{Args, Batch, Ctx, Factory, Filter, RecordMeta, Space};
use filters::savefile::{swap_pseudo_header, Savefile};
use kernel::cbpf::linktype_to_dlt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

#[path = "libpcap_oracle/gen.rs"]
mod gen;
use gen::*;

// ---------------------------------------------------------------------------------------
// What a reader delivers, libpcap's or ours.

/// One delivered packet.
#[derive(Clone, PartialEq, Eq)]
struct Pkt {
    data: Vec<u8>,
    caplen: u32,
    len: u32,
    sec: i64,
    nsec: i64,
}

/// Packets print their lengths, time and first bytes (some are 70 KB long).
impl std::fmt::Debug for Pkt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = &self.data[..self.data.len().min(24)];
        write!(
            f,
            "Pkt {{ caplen {}, len {}, {} bytes {:02x?}.., ts {}s {}ns }}",
            self.caplen,
            self.len,
            self.data.len(),
            head,
            self.sec,
            self.nsec
        )
    }
}

/// Where two packets differ, for a readable failure.
fn differ(a: &Pkt, b: &Pkt) -> Option<String> {
    if a == b {
        return None;
    }
    let at = a.data.iter().zip(&b.data).position(|(x, y)| x != y);
    Some(format!(
        "ours {a:?}\nlibpcap {b:?}\nfirst differing byte: {at:?}"
    ))
}

/// A whole read: the link type (libpcap's DLT), the packets, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Read {
    dlt: u32,
    pkts: Vec<Pkt>,
    /// None: the end of the file; Some: the error that ended it.
    error: Option<String>,
    /// Packets whose pseudo-header was rewritten (ours only).
    rewritten: u32,
}

/// libpcap's reading of `path`; Err: it refuses to open the file.
fn libpcap(path: &Path) -> Result<Read, String> {
    let mut cap = pcap::Capture::from_file_with_precision(path, pcap::Precision::Nano)
        .map_err(|e| e.to_string())?;
    let dlt = cap.get_datalink().0 as u32;
    let mut pkts = Vec::new();
    loop {
        match cap.next_packet() {
            Ok(p) => pkts.push(Pkt {
                data: p.data.to_vec(),
                caplen: p.header.caplen,
                len: p.header.len,
                sec: p.header.ts.tv_sec,
                nsec: p.header.ts.tv_usec,
            }),
            Err(pcap::Error::NoMorePackets) => {
                return Ok(Read {
                    dlt,
                    pkts,
                    error: None,
                    rewritten: 0,
                })
            }
            Err(e) => {
                return Ok(Read {
                    dlt,
                    pkts,
                    error: Some(e.to_string()),
                    rewritten: 0,
                })
            }
        }
    }
}

/// Our reader's reading of `file`.
fn ours(file: &[u8]) -> Result<Read, String> {
    let mut sf = Savefile::open(file).map_err(|e| e.to_string())?;
    let mut pkts = Vec::new();
    let mut rewritten = 0;
    loop {
        match sf.next(file) {
            Ok(Some(r)) => {
                let mut data = r.bytes(file).to_vec();
                assert_eq!(
                    data.len(),
                    r.caplen as usize,
                    "a record's bytes must be its captured length"
                );
                if r.rewrite {
                    swap_pseudo_header(sf.dlt(), &mut data, r.orig_len);
                    rewritten += 1;
                }
                pkts.push(Pkt {
                    data,
                    caplen: r.caplen,
                    len: r.orig_len,
                    sec: r.ts_sec,
                    nsec: r.ts_nsec,
                });
            }
            Ok(None) => {
                return Ok(Read {
                    dlt: sf.dlt(),
                    pkts,
                    error: None,
                    rewritten,
                })
            }
            Err(e) => {
                return Ok(Read {
                    dlt: sf.dlt(),
                    pkts,
                    error: Some(e.to_string()),
                    rewritten,
                })
            }
        }
    }
}

/// `pcapin`'s reading, in a real space: "pcapin file=PATH | collect" where `collect`
/// keeps each block's bytes, record metadata and link type. Err: the build failed.
fn pcapin(path: &Path) -> Result<(Vec<Block>, Vec<String>), String> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let text = format!("pcapin file={} | collect", path.display());
    let g = lang::parse(&text, &Names).unwrap_or_else(|d| panic!("{d}"));
    let mut s = Space::build(&g, &WithCollect(got.clone()), 1 << 22).map_err(|e| e.to_string())?;
    s.run(&AtomicBool::new(false), |_| {});
    let warnings = s.warnings().to_vec();
    drop(s);
    let got = std::mem::take(&mut *got.lock().unwrap());
    Ok((got, warnings))
}

/// A collected block: its bytes, record metadata and link type.
type Block = (Vec<u8>, RecordMeta, Option<u32>);
type Collected = Arc<Mutex<Vec<Block>>>;

/// The filter library plus `collect`.
struct WithCollect(Collected);
struct Collect(Collected);
struct Names;

impl lang::Resolver for Names {
    fn resolve(&self, name: &str) -> Option<lang::FilterKind> {
        if name == "collect" {
            Some(lang::FilterKind::Native)
        } else {
            filters::Natives.resolve(name)
        }
    }
    fn native_names(&self) -> Vec<String> {
        filters::Natives.native_names()
    }
}

impl Factory for WithCollect {
    fn make(&self, name: &str, args: &Args) -> Result<Box<dyn Filter>, dataplane::FilterError> {
        if name == "collect" {
            return Ok(Box::new(Collect(self.0.clone())));
        }
        filters::Library.make(name, args)
    }
    fn is_source(&self, name: &str) -> bool {
        filters::Library.is_source(name)
    }
}

impl Filter for Collect {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        let mut out = self.0.lock().unwrap();
        for t in &batch.tags {
            let data = cx.store.data(t).expect("a delivered tag resolves").to_vec();
            let meta = cx.store.record(t).map(|(m, whole)| {
                assert!(whole, "pcapin delivers whole records");
                m
            });
            out.push((
                data,
                meta.expect("pcapin's blocks carry record metadata"),
                cx.store.link(t),
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------
// The comparisons.

/// How a case turned out (for the check that the generators reach every kind of case).
#[derive(Debug, Default)]
struct Tally {
    refused: u32,
    whole: u32,
    ended_by_error: u32,
    packets: u64,
    rewritten: u32,
    cut_to_snaplen: u32,
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sl-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The pcapin ts_ns of a libpcap packet: its (seconds, nanoseconds) as nanoseconds, mod 2^64.
fn ts_ns(p: &Pkt) -> u64 {
    p.sec.wrapping_mul(1_000_000_000).wrapping_add(p.nsec) as u64
}

/// Compare libpcap, our reader and pcapin on one file.
fn check(file: &[u8], path: &Path, tally: &RefCell<Tally>) -> Result<(), TestCaseError> {
    std::fs::write(path, file).unwrap();
    let theirs = libpcap(path);
    let mine = ours(file);
    let run = pcapin(path);
    let mut t = tally.borrow_mut();
    let theirs = match theirs {
        Err(e) => {
            if std::env::var("ORACLE_WHY").is_ok() {
                eprintln!("WHY refused {e}");
            }
            t.refused += 1;
            prop_assert!(
                mine.is_err(),
                "libpcap refuses the file ({e}), our reader opens it: {mine:?}"
            );
            prop_assert!(
                run.is_err(),
                "libpcap refuses the file ({e}), pcapin builds"
            );
            return Ok(());
        }
        Ok(r) => r,
    };
    let mine = match mine {
        Ok(m) => m,
        Err(e) => {
            return Err(TestCaseError::fail(format!(
                "libpcap opens the file, our reader refuses it: {e}"
            )))
        }
    };
    prop_assert_eq!(mine.dlt, theirs.dlt, "link type");
    prop_assert_eq!(
        mine.pkts.len(),
        theirs.pkts.len(),
        "packet count; libpcap ended with {:?}, ours with {:?}",
        theirs.error,
        mine.error
    );
    for (i, (a, b)) in mine.pkts.iter().zip(&theirs.pkts).enumerate() {
        if let Some(d) = differ(a, b) {
            return Err(TestCaseError::fail(format!("packet {i} differs:\n{d}")));
        }
    }
    prop_assert_eq!(
        mine.error.is_some(),
        theirs.error.is_some(),
        "end of the file: libpcap {:?}, ours {:?}",
        theirs.error,
        mine.error
    );
    // pcapin: the same packets, times and wire lengths, and a warning iff libpcap stopped
    // at an error.
    let (got, warnings) = match run {
        Ok(r) => r,
        Err(e) => {
            return Err(TestCaseError::fail(format!(
                "libpcap opens the file, pcapin refuses it: {e}"
            )))
        }
    };
    prop_assert_eq!(
        got.len(),
        theirs.pkts.len(),
        "pcapin's packet count; warnings {:?}",
        warnings
    );
    for (i, ((data, meta, link), p)) in got.iter().zip(&theirs.pkts).enumerate() {
        prop_assert!(
            data == &p.data,
            "pcapin's bytes of packet {} differ from libpcap's {:?}",
            i,
            p
        );
        prop_assert_eq!(
            meta.len,
            p.caplen,
            "pcapin's captured length of packet {}",
            i
        );
        prop_assert_eq!(meta.orig_len, p.len, "pcapin's wire length of packet {}", i);
        prop_assert_eq!(meta.ts_ns, ts_ns(p), "pcapin's time of packet {}", i);
        prop_assert_eq!(
            link.map(linktype_to_dlt),
            Some(theirs.dlt),
            "pcapin's link type of packet {}",
            i
        );
    }
    match &theirs.error {
        Some(e) => {
            if std::env::var("ORACLE_WHY").is_ok() {
                eprintln!("WHY ended {e}");
            }
            t.ended_by_error += 1;
            prop_assert!(
                warnings.len() == 1
                    && warnings[0].contains("at byte")
                    && warnings[0].contains(&format!("read {} packets before it", got.len())),
                "libpcap stopped with '{e}'; pcapin warned {warnings:?}"
            );
        }
        None => {
            t.whole += 1;
            prop_assert!(
                warnings.is_empty(),
                "libpcap read the whole file; pcapin warned {warnings:?}"
            );
        }
    }
    t.packets += theirs.pkts.len() as u64;
    t.rewritten += mine.rewritten;
    t.cut_to_snaplen += theirs.pkts.iter().filter(|p| p.caplen < p.len).count() as u32;
    Ok(())
}

fn cases() -> u32 {
    std::env::var("ORACLE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

#[test]
fn pcap_files_read_as_libpcap_reads_them() {
    let path = tmp("case.pcap");
    let tally = RefCell::new(Tally::default());
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(pcap_case(), damage()), |(f, d)| {
            check(&apply(f.bytes(), &d), &path, &tally)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let t = tally.into_inner();
    eprintln!("{t:?}");
    // The generator must reach every outcome, or the comparison proves little.
    assert!(
        t.refused > 0
            && t.whole > 0
            && t.ended_by_error > 0
            && t.packets > 0
            && t.cut_to_snaplen > 0
            && t.rewritten > 0,
        "{t:?}"
    );
}

#[test]
fn pcapng_files_read_as_libpcap_reads_them() {
    let path = tmp("case.pcapng");
    let tally = RefCell::new(Tally::default());
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(ng_case(), damage()), |(f, d)| {
            check(&apply(f.bytes(), &d), &path, &tally)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let t = tally.into_inner();
    eprintln!("{t:?}");
    assert!(
        t.refused > 0 && t.whole > 0 && t.ended_by_error > 0 && t.packets > 0,
        "{t:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Filtering: on captures of every link type the protocol filters understand, `bpf "EXPR"`
// keeps exactly the packets libpcap's own filter keeps on the same file, and each native
// protocol filter keeps exactly what its pcap-filter equivalent keeps.

/// IP packets of several kinds (TCP, UDP, ICMP over IPv4 and IPv6, a first and a later
/// fragment), each different, as (bytes, is IPv6).
fn ip_packets() -> Vec<(Vec<u8>, bool)> {
    use etherparse::PacketBuilder;
    let (a4, b4, c4) = ([10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3]);
    let a6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let b6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    let mut v = Vec::new();
    // Each packet written by etherparse's builder: (IPv6?, builder, payload).
    macro_rules! pkt {
        ($six:expr, $b:expr, $payload:expr) => {{
            let mut out = Vec::new();
            $b.write(&mut out, $payload).unwrap();
            v.push((out, $six));
        }};
    }
    pkt!(
        false,
        PacketBuilder::ipv4(a4, b4, 64)
            .tcp(40000, 80, 1, 1000)
            .syn(),
        b""
    );
    pkt!(
        false,
        PacketBuilder::ipv4(a4, b4, 64).tcp(40000, 80, 2, 1000),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    );
    pkt!(
        false,
        PacketBuilder::ipv4(b4, a4, 64).tcp(80, 40000, 9, 1000),
        &[b'x'; 1200]
    );
    pkt!(
        false,
        PacketBuilder::ipv4(a4, c4, 64).udp(5353, 53),
        &[0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    );
    pkt!(
        false,
        PacketBuilder::ipv4(c4, a4, 64).icmpv4_echo_request(7, 1),
        b"ping"
    );
    pkt!(
        true,
        PacketBuilder::ipv6(a6, b6, 64).tcp(40001, 22, 5, 1000),
        b"SSH-2.0-x\r\n"
    );
    pkt!(
        true,
        PacketBuilder::ipv6(b6, a6, 64).udp(53, 5353),
        &[0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]
    );
    pkt!(
        true,
        PacketBuilder::ipv6(a6, b6, 64).icmpv6_echo_request(3, 4),
        b"ping6"
    );
    // A first fragment of a UDP datagram to port 53 (more fragments), and a later one.
    let mut first = Vec::new();
    PacketBuilder::ipv4(a4, c4, 64)
        .udp(5354, 53)
        .write(&mut first, &[7; 40])
        .unwrap();
    first[6] |= 0x20;
    let mut later = first.clone();
    later[6] = 0x00;
    later[7] = 6;
    later[21] ^= 0xff; // (and other bytes, so the two differ wherever cut)
    v.push((first, false));
    v.push((later, false));
    v
}

/// An ARP request as an Ethernet payload.
fn arp() -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
    a.extend_from_slice(&[2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    a
}

/// A capture variant: how each packet is framed, the file's link type, and which
/// pcap-filter prefix selects what the native filters look through (VLAN tags).
struct Variant {
    name: &'static str,
    link: u32,
    /// (ethertype, payload) -> frame; None: this link type cannot carry it.
    frame: fn(u16, &[u8]) -> Option<Vec<u8>>,
    vlan: &'static str,
}

const MAC: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];

fn variants() -> Vec<Variant> {
    fn only_ip(et: u16) -> bool {
        et == 0x0800 || et == 0x86dd
    }
    vec![
        Variant {
            name: "ethernet",
            link: 1,
            frame: |et, p| Some([&MAC[..], &et.to_be_bytes(), p].concat()),
            vlan: "",
        },
        Variant {
            name: "802.1Q",
            link: 1,
            frame: |et, p| Some([&MAC[..], &[0x81, 0, 0, 10], &et.to_be_bytes(), p].concat()),
            vlan: "vlan and ",
        },
        Variant {
            name: "QinQ",
            link: 1,
            frame: |et, p| {
                Some(
                    [
                        &MAC[..],
                        &[0x88, 0xa8, 0, 100, 0x81, 0, 0, 10],
                        &et.to_be_bytes(),
                        p,
                    ]
                    .concat(),
                )
            },
            vlan: "vlan and vlan and ",
        },
        Variant {
            name: "linux sll",
            link: 113,
            frame: |et, p| {
                Some(
                    [
                        &[0, 4, 0, 1, 0, 6][..],
                        &MAC[..6],
                        &[0, 0],
                        &et.to_be_bytes(),
                        p,
                    ]
                    .concat(),
                )
            },
            vlan: "",
        },
        Variant {
            name: "linux sll2",
            link: 276,
            frame: |et, p| {
                Some(
                    [
                        &et.to_be_bytes()[..],
                        &[0, 0, 0, 0, 0, 2, 0, 1, 0, 6],
                        &MAC[..6],
                        &[0, 0],
                        p,
                    ]
                    .concat(),
                )
            },
            vlan: "",
        },
        Variant {
            name: "raw 101",
            link: 101,
            frame: |et, p| only_ip(et).then(|| p.to_vec()),
            vlan: "",
        },
        Variant {
            name: "raw 12",
            link: 12,
            frame: |et, p| only_ip(et).then(|| p.to_vec()),
            vlan: "",
        },
        Variant {
            name: "ipv4 228",
            link: 228,
            frame: |et, p| (et == 0x0800).then(|| p.to_vec()),
            vlan: "",
        },
        Variant {
            name: "ipv6 229",
            link: 229,
            frame: |et, p| (et == 0x86dd).then(|| p.to_vec()),
            vlan: "",
        },
        Variant {
            name: "bsd null",
            link: 0,
            frame: |et, p| {
                only_ip(et).then(|| {
                    [&(if et == 0x0800 { 2u32 } else { 24 }).to_le_bytes()[..], p].concat()
                })
            },
            vlan: "",
        },
        Variant {
            name: "bsd loop",
            link: 108,
            frame: |et, p| {
                only_ip(et).then(|| {
                    [&(if et == 0x0800 { 2u32 } else { 30 }).to_be_bytes()[..], p].concat()
                })
            },
            vlan: "",
        },
    ]
}

/// A little-endian pcap file of `frames` with snap length `snap` (records cut to it, the
/// wire length kept).
fn capture(link: u32, snap: u32, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Writer {
        big: false,
        out: Vec::new(),
    };
    for x in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, snap, link] {
        w.u32(x);
    }
    for (i, f) in frames.iter().enumerate() {
        let cut = &f[..f.len().min(snap as usize)];
        for x in [
            1_700_000_000 + i as u32,
            0,
            cut.len() as u32,
            f.len() as u32,
        ] {
            w.u32(x);
        }
        w.bytes(cut);
    }
    w.out
}

/// The packets libpcap's filter `expr` keeps, in order (none when libpcap finds that the
/// expression can match nothing of this link type and refuses it, as `ip6` on IPv4 links).
fn libpcap_keeps(path: &Path, expr: &str) -> Vec<Vec<u8>> {
    let mut cap = pcap::Capture::from_file(path).unwrap();
    if let Err(e) = cap.filter(expr, true) {
        assert!(
            e.to_string().contains("expression rejects all packets"),
            "libpcap refuses '{expr}': {e}"
        );
        return Vec::new();
    }
    let mut v = Vec::new();
    while let Ok(p) = cap.next_packet() {
        v.push(p.data.to_vec());
    }
    v
}

/// The packets `pcapin file=PATH | MIDDLE collect` keeps, in order.
fn we_keep(path: &Path, middle: &str) -> Vec<Vec<u8>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let text = format!("pcapin file={} | {middle} collect", path.display());
    let g = lang::parse(&text, &Names).unwrap_or_else(|d| panic!("{d}"));
    let mut s = Space::build(&g, &WithCollect(got.clone()), 1 << 22)
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    s.run(&AtomicBool::new(false), |_| {});
    // The one warning allowed: libpcap's refusal of a `bpf` expression for this link type.
    assert!(
        s.warnings()
            .iter()
            .all(|w| w.contains("expression rejects all packets")),
        "{text}: {:?}",
        s.warnings()
    );
    drop(s);
    let v = got
        .lock()
        .unwrap()
        .iter()
        .map(|(d, ..)| d.clone())
        .collect();
    v
}

#[test]
fn filters_keep_what_libpcap_keeps_for_every_link_type() {
    let ips = ip_packets();
    // Native filter (as it sits before `collect`) and the pcap-filter expression that
    // means the same.
    let natives: &[(&str, &str)] = &[
        ("ip |4", "ip"),
        ("ip |6", "ip6"),
        ("ip |", "ip or ip6"),
        ("tcp |", "tcp"),
        ("udp |", "udp"),
        ("icmp |1", "icmp"),
        ("icmp |2", "icmp6"),
        ("proto |17", "udp"),
        ("tcp | dport |80", "tcp dst port 80"),
        ("udp | dport |53", "udp dst port 53"),
        ("sport |80", "(tcp or udp) and src port 80"),
        ("dport |1:1023", "(tcp or udp) and dst portrange 1-1023"),
        ("eth 0800 |", "ether proto 0x0800"),
        ("eth 86dd |", "ether proto 0x86dd"),
    ];
    let bpfs = [
        "tcp",
        "udp",
        "ip",
        "ip6",
        "tcp dst port 80",
        "udp port 53",
        "icmp or icmp6",
        "host 10.0.0.2",
        "greater 1000",
        "ip[9] == 17",
        "ip6 and udp",
        "not ip and not ip6",
        "len < 80",
    ];
    let (mut checked, mut kept) = (0, 0);
    for v in variants() {
        let mut frames: Vec<Vec<u8>> = ips
            .iter()
            .filter_map(|(p, six)| (v.frame)(if *six { 0x86dd } else { 0x0800 }, p))
            .collect();
        frames.extend((v.frame)(0x0806, &arp()));
        // The whole packets, and packets cut to 64 bytes as `tcpdump -s 64` writes them.
        for snap in [262_144u32, 64] {
            let path = tmp(&format!("link-{}-{snap}.pcap", v.link));
            std::fs::write(&path, capture(v.link, snap, &frames)).unwrap();
            let what = format!("{} capture, snap length {snap}", v.name);
            assert_eq!(
                we_keep(&path, "").len(),
                frames.len(),
                "{what}: pcapin reads every packet"
            );
            for (native, expr) in natives {
                let expr = format!("{}({expr})", v.vlan);
                let (ours, theirs) = (we_keep(&path, native), libpcap_keeps(&path, &expr));
                assert!(
                    ours == theirs,
                    "{what}: '{native}' kept {} packets, libpcap's '{expr}' {}",
                    ours.len(),
                    theirs.len()
                );
                (checked, kept) = (checked + 1, kept + theirs.len());
            }
            for expr in bpfs {
                let (ours, theirs) = (
                    we_keep(&path, &format!("bpf \"{expr}\" |")),
                    libpcap_keeps(&path, expr),
                );
                assert!(
                    ours == theirs,
                    "{what}: bpf \"{expr}\" kept {} packets, libpcap {}",
                    ours.len(),
                    theirs.len()
                );
                (checked, kept) = (checked + 1, kept + theirs.len());
            }
        }
    }
    assert_eq!(checked, variants().len() * 2 * (natives.len() + bpfs.len()));
    assert!(
        kept > 1000,
        "the expressions keep too little to compare: {kept}"
    );
}

/// `streamline filters pcapin` says what it reads.
#[test]
fn pcapin_documents_what_it_reads() {
    let doc = filters::REGISTRY
        .iter()
        .find(|s| s.name == "pcapin")
        .unwrap()
        .doc();
    for s in [
        "libpcap",
        "pcapng",
        "snap length",
        "if_tsresol",
        "byte order",
        "Linux cooked",
        "raw IP",
        "VLAN",
        "byte offset",
    ] {
        assert!(
            doc.contains(s),
            "pcapin's documentation does not mention {s}:\n{doc}"
        );
    }
}
