//! Property tests: random operation sequences on real rings checked against a model, and a
//! hostile peer that scribbles over shared memory while readers must stay sound.

mod common;

use beltway::{Error, Layout, RingConfig, Start, SyncMode, Writer};
use common::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Write(usize),
    Read(usize),
    PeekComplete(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            3 => (1usize..3000).prop_map(Op::Write),
            2 => (1usize..5000).prop_map(Op::Read),
            1 => (1usize..5000).prop_map(Op::PeekComplete),
        ],
        1..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A lossless byte ring (self-scaling between 4 KiB and 64 KiB) delivers exactly the
    /// written stream for any interleaving of writes, reads and peeks, across wraps and
    /// resizes. Writes are issued only when the model knows they cannot block.
    #[test]
    fn srp_bytes_match_model(ops in ops(), scaling in any::<bool>()) {
        let mut cfg = RingConfig::bytes(1 << 16);
        if scaling {
            cfg = cfg.self_scaling(4096, 1 << 14);
            cfg.calm_laps = 1;
            cfg.scaling_window = 0;
        }
        let min = if scaling { 4096 } else { 1 << 16 };
        let mut w = Writer::create("model", cfg).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        let (mut written, mut read) = (0u64, 0u64);
        let mut buf = vec![0u8; 8192];
        for op in ops {
            match op {
                Op::Write(n) => {
                    let n = n.min(min - (written - read) as usize);
                    if n == 0 { continue; }
                    let mut data = vec![0u8; n];
                    fill_stream(written, &mut data);
                    prop_assert_eq!(w.write(&data).unwrap(), n);
                    written += n as u64;
                }
                Op::Read(max) => {
                    if r.readable() == 0 { prop_assert_eq!(written, read); continue; }
                    let n = r.read(&mut buf[..max.min(8192)]).unwrap();
                    prop_assert!(n > 0);
                    prop_assert!(check_stream(read, &buf[..n]), "stream mismatch at {}", read);
                    read += n as u64;
                }
                Op::PeekComplete(max) => {
                    if let Some(p) = r.try_peek_acquire(max).unwrap() {
                        prop_assert_eq!(p.pos, read);
                        prop_assert!(check_stream(read, p.data));
                        let n = p.data.len() as u64;
                        r.peek_complete().unwrap();
                        read += n;
                    }
                }
            }
            prop_assert!(w.active_size().is_power_of_two() && w.active_size() >= min as u64);
        }
        // Drain: everything written arrives.
        w.close();
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 { break; }
            prop_assert!(check_stream(read, &buf[..n]));
            read += n as u64;
        }
        prop_assert_eq!(read, written);
    }

    /// A lossy record ring: whatever a reader gets is a whole, valid record, in increasing
    /// order; what it misses is reported as overruns, and once it catches up it gets the
    /// rest.
    #[test]
    fn frp_records_never_return_garbage(ops in ops(), layout_slots in any::<bool>()) {
        let cfg = if layout_slots {
            RingConfig::bytes(1 << 14).slots(2048)
        } else {
            RingConfig::bytes(1 << 14).layout(Layout::Records)
        }.sync(SyncMode::Frp);
        let mut w = Writer::create("model-frp", cfg).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        let max = w.max_record().min(3000);
        let mut seq = 0u64;
        let mut last: Option<u64> = None;
        let mut buf = vec![0u8; 8192];
        for op in ops {
            match op {
                Op::Write(n) => {
                    w.write(&make_record(seq, n.clamp(16, max))).unwrap();
                    seq += 1;
                }
                Op::Read(_) | Op::PeekComplete(_) => {
                    if r.readable() == 0 { continue; }
                    match r.read(&mut buf) {
                        Ok(0) => prop_assert!(false, "EOF on an open ring"),
                        Ok(n) => {
                            let s = parse_record(&buf[..n]).map_err(TestCaseError::fail)?;
                            prop_assert!(last.is_none_or(|l| s > l), "seq {} after {:?}", s, last);
                            last = Some(s);
                        }
                        Err(e) => prop_assert!(e.is_overrun(), "unexpected error {}", e),
                    }
                }
            }
        }
        // Drain: still only valid records in increasing order. A slot ring resumes at the
        // tail after a loss, so the newest record always arrives; a variable-record ring
        // must skip to the write position (boundaries inside lost data are unknowable,
        // thesis 4.5.3), so it may lose the newest records too.
        w.close();
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let s = parse_record(&buf[..n]).map_err(TestCaseError::fail)?;
                    prop_assert!(last.is_none_or(|l| s > l), "seq {} after {:?}", s, last);
                    last = Some(s);
                }
                Err(e) => prop_assert!(e.is_overrun()),
            }
        }
        if layout_slots && seq > 0 {
            prop_assert_eq!(last, Some(seq - 1));
        }
    }

    /// A hostile or broken producer writes garbage over the data area and the header's
    /// record fields. Readers never panic or read out of bounds: they return valid records,
    /// `Corrupt` naming the position, or `Overrun`.
    #[test]
    fn hostile_scribbles_never_crash_readers(
        scribbles in proptest::collection::vec((0usize..(1 << 14), any::<u64>()), 1..64),
        layout_slots in any::<bool>(),
        past in any::<bool>(),
    ) {
        let name = format!("bt-hostile-{}", std::process::id());
        let cfg = if layout_slots { RingConfig::bytes(1 << 14).slots(1024) } else { RingConfig::bytes(1 << 14).layout(Layout::Records) };
        let mut w = Writer::create_named(&name, cfg).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        for seq in 0..12 {
            w.write(&make_record(seq, 700)).unwrap();
        }
        // Where the records lie: offsets below this in the data area (no wrap: 12 records
        // fit in the 16 KiB ring).
        let written = w.stats().write_pos as usize;
        prop_assert!(written <= 1 << 14);
        // A second, independent read-write mapping of the same segment: the "hostile peer".
        let evil = beltway::shm::Segment::open_path(&format!("/dev/shm/{name}"), true).unwrap();
        // Half the cases scribble only past the records (over free ring space).
        let mut missed = true;
        for (off, val) in scribbles {
            let off = if past && written + 8 <= 1 << 14 { written + off % ((1 << 14) - written) } else { off };
            let off = (off & !7).min((1 << 14) - 8);
            missed &= off >= written;
            evil.write_at(beltway::layout::DATA_OFFSET + off, &val.to_le_bytes());
        }
        let mut buf = vec![0u8; 1 << 15];
        let mut intact = Vec::new();
        for _ in 0..40 {
            if r.readable() == 0 { break; }
            match r.read(&mut buf) {
                Ok(n) => {
                    // What a reader returns lies in the ring, and a record that checks out
                    // is one that was written, each once, in order.
                    prop_assert!(n <= 1 << 14, "a record of {} bytes from a 16 KiB ring", n);
                    // (Intact: every byte as written; the checksum does not cover the
                    // sequence number.)
                    if let Some(seq) = parse_record(&buf[..n]).ok().filter(|&q| buf[..n] == make_record(q, 700)[..]) {
                        prop_assert!(seq < 12, "record {} was never written", seq);
                        prop_assert!(intact.last().is_none_or(|&l| seq > l), "record {} after {:?}", seq, intact);
                        intact.push(seq);
                    }
                }
                Err(Error::Corrupt { pos, why, .. }) => {
                    prop_assert!(pos < 1 << 15);
                    prop_assert!(!why.is_empty());
                    break;
                }
                Err(Error::BufferTooSmall { .. }) => break,
                Err(e) => prop_assert!(e.is_overrun(), "unexpected error {}", e),
            }
        }
        // Scribbles that all land past the records touch none of them: every record
        // comes back intact.
        if missed {
            prop_assert_eq!(intact, (0..12).collect::<Vec<u64>>(), "scribbles past the records ({}) lost some", written);
        }
    }
}

/// A segment that is not a ring (or a truncated one) is refused with a reason.
#[test]
fn opening_garbage_is_refused_with_reason() {
    let name = format!("bt-garbage-{}", std::process::id());
    let path = format!("/dev/shm/{name}");
    std::fs::write(&path, vec![0xABu8; 8192]).unwrap();
    let err = beltway::RingRef::open(&name).unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(matches!(err, Error::BadRing { .. }), "{err}");
    assert!(err.to_string().contains("bad magic"), "{err}");
    std::fs::write(&path, b"tiny").unwrap();
    let err = beltway::RingRef::open(&name).unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(err.to_string().contains("too small"), "{err}");
    let err = beltway::RingRef::open("no/such").unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err}");
}
