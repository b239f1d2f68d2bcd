//! Tests of `savefile`.

use super::*;

fn pcap_header(magic: u32, snaplen: u32, link: u32) -> Vec<u8> {
    let mut v = magic.to_le_bytes().to_vec();
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&4u16.to_le_bytes());
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&snaplen.to_le_bytes());
    v.extend_from_slice(&link.to_le_bytes());
    v
}

fn record(v: &mut Vec<u8>, sec: u32, frac: u32, caplen: u32, len: u32, data: &[u8]) {
    for x in [sec, frac, caplen, len] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.extend_from_slice(data);
}

fn all(file: &[u8]) -> (Vec<Record>, Option<SavefileError>) {
    let mut sf = Savefile::open(file).unwrap();
    let mut v = Vec::new();
    loop {
        match sf.next(file) {
            Ok(Some(r)) => v.push(r),
            Ok(None) => return (v, None),
            Err(e) => return (v, Some(e)),
        }
    }
}

/// What `tcpdump -s 96 -w` writes: records of 96 captured bytes with longer wire
/// lengths (pcap-file refused these: orig_len > snap_len).
#[test]
fn snap_length_captures_read_whole() {
    let mut f = pcap_header(TCPDUMP_MAGIC, 96, 1);
    record(&mut f, 10, 5, 96, 1514, &[7; 96]);
    record(&mut f, 11, 6, 60, 60, &[8; 60]);
    let (recs, e) = all(&f);
    assert!(e.is_none());
    assert_eq!(recs.len(), 2);
    assert_eq!(
        (
            recs[0].pos,
            recs[0].caplen,
            recs[0].orig_len,
            recs[0].ts_ns()
        ),
        (40, 96, 1514, 10_000_005_000)
    );
    assert_eq!(
        (recs[1].pos, recs[1].caplen, recs[1].orig_len),
        (152, 60, 60)
    );
}

/// A record holding more than the snap length is delivered cut to it (libpcap's rule
/// for files whose writer got the header wrong); above the link type's maximum it is
/// refused, naming the record's offset.
#[test]
fn records_above_the_snap_length_are_cut_and_above_the_maximum_refused() {
    let mut f = pcap_header(TCPDUMP_MAGIC, 50, 1);
    record(&mut f, 0, 0, 80, 80, &[1; 80]);
    record(&mut f, 0, 0, 300_000, 300_000, &[2; 16]);
    let (recs, e) = all(&f);
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0].caplen, recs[0].orig_len), (50, 80));
    let e = e.unwrap();
    assert_eq!(e.at, 24 + 16 + 80);
    assert!(
        e.to_string()
            .contains("captured length 300000 is above the snap length 50 at byte 120"),
        "{e}"
    );
}

/// Zero and huge snap lengths mean the link type's maximum; the FCS bits above the link
/// type are dropped; nanosecond files keep their nanoseconds; Kuznetzov's records are
/// 24 bytes.
#[test]
fn header_variants() {
    for snap in [0, 0x8000_0000, u32::MAX] {
        let sf = Savefile::open(&pcap_header(TCPDUMP_MAGIC, snap, 231)).unwrap();
        assert_eq!(
            sf.snapshot(),
            128 << 20,
            "DBUS's maximum for snap length {snap:#x}"
        );
    }
    let sf = Savefile::open(&pcap_header(TCPDUMP_MAGIC, 0, 1 | 4 << 28)).unwrap();
    assert_eq!(sf.link(), 1);
    let mut f = pcap_header(NSEC_MAGIC, 0, 101);
    record(&mut f, 3, 999_999_999, 1, 1, &[0x45]);
    let (recs, _) = all(&f);
    assert_eq!(recs[0].ts_ns(), 3_999_999_999);
    let mut f = pcap_header(KUZNETZOV_MAGIC, 100, 1);
    record(&mut f, 1, 0, 4, 4, &[0; 8]);
    f.extend_from_slice(&[9, 9, 9, 9]);
    let sf = Savefile::open(&f).unwrap();
    assert_eq!(
        sf.snapshot(),
        114,
        "Kuznetzov's Ethernet captures may hold 14 bytes more"
    );
    let (recs, e) = all(&f);
    assert!(e.is_none());
    assert_eq!(recs[0].bytes(&f), &[9, 9, 9, 9]);
}

#[test]
fn byte_swapped_files_and_old_versions() {
    let mut f = Vec::new();
    f.extend_from_slice(&TCPDUMP_MAGIC.to_be_bytes());
    f.extend_from_slice(&2u16.to_be_bytes());
    f.extend_from_slice(&2u16.to_be_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&65535u32.to_be_bytes());
    f.extend_from_slice(&1u32.to_be_bytes());
    // Version 2.2: caplen and len are exchanged in the record header.
    for x in [5u32, 6, 1000, 3] {
        f.extend_from_slice(&x.to_be_bytes());
    }
    f.extend_from_slice(&[1, 2, 3]);
    let sf = Savefile::open(&f).unwrap();
    assert!(sf.swapped());
    let (recs, e) = all(&f);
    assert!(e.is_none());
    assert_eq!(
        (
            recs[0].caplen,
            recs[0].orig_len,
            recs[0].ts_sec,
            recs[0].ts_nsec
        ),
        (3, 1000, 5, 6000)
    );
}

#[test]
fn header_errors_name_the_problem() {
    let e = Savefile::open(b"abc").unwrap_err();
    assert!(
        e.to_string().contains("too short to be a capture file") && e.at == 0,
        "{e}"
    );
    let e = Savefile::open(b"this is not a capture").unwrap_err();
    assert!(
        e.to_string().contains("not a pcap or pcapng file") && e.to_string().contains("at byte 0"),
        "{e}"
    );
    let mut h = pcap_header(TCPDUMP_MAGIC, 0, 1);
    h[4] = 1;
    assert!(Savefile::open(&h)
        .unwrap_err()
        .to_string()
        .contains("archaic"));
    h[4] = 3;
    assert!(Savefile::open(&h)
        .unwrap_err()
        .to_string()
        .contains("unsupported pcap savefile version 3.4"));
    let e = Savefile::open(&pcap_header(TCPDUMP_MAGIC, 0, 1)[..20]).unwrap_err();
    assert!(
        e.to_string()
            .contains("truncated file header (20 of 24 bytes)"),
        "{e}"
    );
}

/// A pcapng writer in this host's byte order.
struct Ng(Vec<u8>);

impl Ng {
    fn block(&mut self, kind: u32, body: &[u8]) -> &mut Ng {
        let mut body = body.to_vec();
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let len = 12 + body.len() as u32;
        self.0.extend_from_slice(&kind.to_le_bytes());
        self.0.extend_from_slice(&len.to_le_bytes());
        self.0.extend_from_slice(&body);
        self.0.extend_from_slice(&len.to_le_bytes());
        self
    }
    fn shb(&mut self) -> &mut Ng {
        let mut b = BYTE_ORDER_MAGIC.to_le_bytes().to_vec();
        b.extend_from_slice(&[1, 0, 0, 0]);
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        self.block(BT_SHB, &b)
    }
    fn idb(&mut self, link: u16, snaplen: u32, opts: &[(u16, &[u8])]) -> &mut Ng {
        let mut b = link.to_le_bytes().to_vec();
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&snaplen.to_le_bytes());
        for (code, v) in opts {
            b.extend_from_slice(&code.to_le_bytes());
            b.extend_from_slice(&(v.len() as u16).to_le_bytes());
            b.extend_from_slice(v);
            while !b.len().is_multiple_of(4) {
                b.push(0);
            }
        }
        self.block(BT_IDB, &b)
    }
    fn epb(&mut self, iface: u32, ts: u64, data: &[u8], len: u32) -> &mut Ng {
        let mut b = Vec::new();
        for x in [iface, (ts >> 32) as u32, ts as u32, data.len() as u32, len] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        b.extend_from_slice(data);
        self.block(BT_EPB, &b)
    }
}

/// Interfaces with their own timestamp resolutions and offsets; unknown blocks and
/// options skipped; a second section with its own interfaces.
#[test]
fn pcapng_interfaces_sections_and_unknown_blocks() {
    let mut f = Ng(Vec::new());
    f.shb()
        .block(0x0bad, &[1, 2, 3])
        .idb(
            1,
            0,
            &[
                (2, b"eth0"),
                (9, &[3]),
                (14, &100u64.to_le_bytes()),
                (2988, &[0; 7]),
            ],
        )
        .idb(1, 0, &[(9, &[0x80 | 10])])
        .block(5, &[0; 12])
        .epb(0, 1_500, &[1; 10], 60)
        .epb(1, 3 * 1024 + 512, &[2; 4], 4)
        .shb()
        .idb(1, 0, &[])
        .epb(0, 2_000_001, &[3; 8], 8);
    let (recs, e) = all(&f.0);
    assert!(e.is_none(), "{e:?}");
    let times: Vec<(i64, i64)> = recs.iter().map(|r| (r.ts_sec, r.ts_nsec)).collect();
    // Milliseconds plus 100 s; 1/1024 s; microseconds (the default) in section two.
    assert_eq!(
        times,
        vec![(101, 500_000_000), (3, 500_000_000), (2, 1_000)]
    );
    assert_eq!(
        recs.iter()
            .map(|r| (r.caplen, r.orig_len))
            .collect::<Vec<_>>(),
        vec![(10, 60), (4, 4), (8, 8)]
    );
    assert_eq!(recs[0].bytes(&f.0), &[1; 10]);
}

/// libpcap reads one link type per file, and a packet needs a described interface.
#[test]
fn pcapng_errors_name_the_block() {
    let mut f = Ng(Vec::new());
    f.shb().idb(1, 0, &[]).epb(0, 0, &[1; 4], 4);
    let second = f.0.len();
    f.idb(113, 0, &[]).epb(0, 0, &[1; 4], 4);
    let (recs, e) = all(&f.0);
    assert_eq!(recs.len(), 1);
    let e = e.unwrap();
    assert_eq!(e.at, second as u64);
    assert!(e.to_string().contains("link type 113"), "{e}");
    let mut f = Ng(Vec::new());
    f.shb().idb(1, 0, &[]).epb(3, 0, &[1; 4], 4);
    let (_, e) = all(&f.0);
    assert!(e
        .unwrap()
        .to_string()
        .contains("interface 3, but the section describes 1"));
    let mut f = Ng(Vec::new());
    f.shb().epb(0, 0, &[1; 4], 4);
    assert!(Savefile::open(&f.0)
        .unwrap_err()
        .to_string()
        .contains("before any interface"));
    let mut f = Ng(Vec::new());
    f.shb().idb(1, 0, &[(9, &[20])]);
    assert!(Savefile::open(&f.0)
        .unwrap_err()
        .to_string()
        .contains("if_tsresol 10^-20 is too fine"));
}

proptest::proptest! {
    /// Any bytes after a pcap (either byte order) or pcapng header, or alone: no
    /// panic, every record inside the file, walks that end.
    #[test]
    fn any_bytes_read_safely(kind in 0usize..4, link in proptest::sample::select(vec![1u32, 113, 117, 189, 220, 239, 276, 231]), body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..700)) {
        let mut file = match kind {
            0 => pcap_header(TCPDUMP_MAGIC, 0, link),
            1 => pcap_header(TCPDUMP_MAGIC, 0, link).chunks(4).flat_map(|w| w.iter().rev().copied().collect::<Vec<_>>()).collect(),
            2 => {
                let mut f = Ng(Vec::new());
                f.shb().idb(link as u16, 0, &[(9, &[0x80 | 20])]);
                f.0
            }
            _ => Vec::new(),
        };
        file.extend_from_slice(&body);
        if let Ok(mut sf) = Savefile::open(&file) {
            let mut n = 0;
            while let Ok(Some(r)) = sf.next(&file) {
                proptest::prop_assert!(r.pos + r.caplen as usize <= file.len());
                let mut copy = r.bytes(&file).to_vec();
                swap_pseudo_header(sf.dlt(), &mut copy, r.orig_len);
                n += 1;
                proptest::prop_assert!(n <= file.len(), "the walk does not end");
            }
        }
    }
}

/// libpcap recomputes the wire length of a completed incoming isochronous USB transfer
/// (memory-mapped Linux USB captures) from its descriptors: the data reaches to the end
/// of the furthest one (offset 50 + 20), not the URB length (100).
#[test]
fn usb_isochronous_wire_lengths_are_fixed_as_libpcap_fixes_them() {
    let mut pkt = vec![0u8; 64];
    pkt[8] = b'C';
    pkt[10] = 0x81;
    pkt[32..36].copy_from_slice(&100u32.to_le_bytes());
    pkt[60..64].copy_from_slice(&2u32.to_le_bytes());
    for (off, len) in [(0u32, 10u32), (50, 20)] {
        pkt.extend_from_slice(&[0; 4]);
        pkt.extend_from_slice(&off.to_le_bytes());
        pkt.extend_from_slice(&len.to_le_bytes());
        pkt.extend_from_slice(&[0; 4]);
    }
    let mut f = pcap_header(TCPDUMP_MAGIC, 0, 220);
    record(&mut f, 0, 0, pkt.len() as u32, 64 + 32 + 100, &pkt);
    let (recs, e) = all(&f);
    assert!(e.is_none());
    assert_eq!((recs[0].caplen, recs[0].orig_len), (96, 64 + 32 + 70));
    // Not an isochronous completion: the length stays.
    pkt[8] = b'S';
    let mut f = pcap_header(TCPDUMP_MAGIC, 0, 220);
    record(&mut f, 0, 0, pkt.len() as u32, 196, &pkt);
    assert_eq!(all(&f).0[0].orig_len, 196);
}

/// A byte-swapped Linux cooked capture of CAN: libpcap gives the CAN id in this host's
/// order; the record says so and the rewrite does it.
#[test]
fn swapped_can_ids_are_rewritten() {
    let mut f = Vec::new();
    f.extend_from_slice(&TCPDUMP_MAGIC.to_be_bytes());
    f.extend_from_slice(&2u16.to_be_bytes());
    f.extend_from_slice(&4u16.to_be_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&0u32.to_be_bytes());
    f.extend_from_slice(&113u32.to_be_bytes());
    let mut pkt = vec![0u8; 14];
    pkt.extend_from_slice(&[0x00, 0x0c, 0x12, 0x34, 0x56, 0x78, 8, 0, 0, 0]);
    for x in [0u32, 0, pkt.len() as u32, pkt.len() as u32] {
        f.extend_from_slice(&x.to_be_bytes());
    }
    f.extend_from_slice(&pkt);
    let mut sf = Savefile::open(&f).unwrap();
    let r = sf.next(&f).unwrap().unwrap();
    assert!(r.rewrite);
    let mut copy = r.bytes(&f).to_vec();
    swap_pseudo_header(sf.dlt(), &mut copy, r.orig_len);
    assert_eq!(&copy[16..20], &[0x78, 0x56, 0x34, 0x12]);
    assert_eq!(&copy[..16], &pkt[..16]);
}
