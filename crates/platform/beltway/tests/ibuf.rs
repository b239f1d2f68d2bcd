//! Indirection: tags, splicing, write-through, double rings, read-through across processes.

mod common;

use beltway::{
    select, BufTable, DoubleRing, IbufReader, IbufWriter, Layout, MpWriter, RingConfig, Start,
    SyncMode, Tag, Writer,
};
use common::*;
use std::time::Duration;

fn tag_ring(name: &str, slots: usize) -> Writer {
    Writer::create(name, RingConfig::bytes(slots * 16).layout(Layout::Tags)).unwrap()
}

#[test]
fn tag_roundtrip_bytes() {
    let t = Tag {
        pos: 0x0102_0304_0506_0708,
        len: 1514,
        buf: 7,
        class: 22,
    };
    assert_eq!(Tag::from_bytes(&t.to_bytes()), Some(t));
    assert_eq!(Tag::from_bytes(&[0u8; 15]), None);
    assert_eq!(std::mem::size_of::<Tag>(), 16);
}

/// Forwarding a peeked block into an IBuf writes only a tag (splice); the reader of the
/// IBuf reads through to the very bytes in the source DBuf.
#[test]
fn peek_then_write_splices() {
    let _w = watchdog("peek_then_write_splices", 30);
    let mut src = Writer::create(
        "src",
        RingConfig {
            buf_id: 3,
            ..RingConfig::bytes(1 << 16).layout(Layout::Records)
        },
    )
    .unwrap();
    let mut src_r = src.ring().reader(Start::Oldest).unwrap();
    let mut ib = IbufWriter::new(tag_ring("ib", 256)).unwrap();
    ib.register(&src.ring()).unwrap();
    let mut table = BufTable::new();
    table.register(&src.ring()).unwrap();
    let mut out = IbufReader::new(ib.ring().reader(Start::Oldest).unwrap(), table).unwrap();
    for seq in 0..50 {
        src.write(&make_record(seq, 300 + seq as usize)).unwrap();
    }
    for _ in 0..50 {
        let p = src_r.peek_acquire(4096).unwrap().unwrap();
        let (ppos, pdata) = (p.pos, p.data);
        assert_eq!(ib.write(pdata).unwrap(), pdata.len());
        let _ = ppos;
        src_r.peek_complete().unwrap();
    }
    assert_eq!(
        (ib.spliced, ib.copied),
        (50, 0),
        "every block should have been spliced"
    );
    for seq in 0..50 {
        let (tag, p) = out.peek_acquire().unwrap().unwrap();
        assert_eq!(tag.buf, 3);
        assert_eq!(parse_record(p.data).unwrap(), seq);
        out.peek_complete().unwrap();
    }
}

/// Without a default DBuf, data that lies in no known DBuf cannot be written.
#[test]
fn write_without_default_dbuf_is_an_error() {
    let mut ib = IbufWriter::new(tag_ring("ib2", 256)).unwrap();
    let err = ib.write(b"not in any ring").unwrap_err();
    assert!(
        err.to_string()
            .contains("write-through without a default DBuf"),
        "{err}"
    );
}

/// A double ring (headers out of band): records of any size arrive whole and in order, and
/// write-through never overwrites data that an unread header still points to, even when
/// the data ring is much smaller than what is in flight.
#[test]
fn double_ring_is_lossless_with_small_data_ring() {
    let _w = watchdog("double_ring_is_lossless_with_small_data_ring", 60);
    let mut w = DoubleRing::create("dr", 1024, 1 << 14, SyncMode::Srp).unwrap();
    let mut r = DoubleRing::reader(&w, Start::Oldest).unwrap();
    let t = std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        let mut n_read = 0u64;
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            assert_eq!(parse_record(&buf[..n]).unwrap(), n_read);
            n_read += 1;
            // A slow reader (the pause is the behaviour under test, not a wait): the
            // writer catches up with the unread headers in the small data ring.
            if n_read.is_multiple_of(100) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        n_read
    });
    for seq in 0..20_000u64 {
        w.write(&make_record(seq, record_len(seq, 3000))).unwrap();
    }
    w.close();
    assert_eq!(t.join().unwrap(), 20_000);
    assert!(w.copied == 20_000 && w.spliced == 0);
}

/// Lossy double ring: a reader that falls behind resynchronises through the header ring
/// and still gets valid records (the advantage of headers out of band, thesis 4.5.3).
#[test]
fn lossy_double_ring_reader_gets_only_valid_records() {
    let _w = watchdog("lossy_double_ring_reader_gets_only_valid_records", 60);
    let mut w = DoubleRing::create("drl", 256, 1 << 14, SyncMode::Frp).unwrap();
    let mut r = DoubleRing::reader(&w, Start::Oldest).unwrap();
    for seq in 0..1000u64 {
        w.write(&make_record(seq, 500)).unwrap();
    }
    w.close();
    let (mut ok, mut overruns, mut last) = (0, 0, None);
    let mut buf = vec![0u8; 4096];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let s = parse_record(&buf[..n]).unwrap();
                assert!(last.is_none_or(|l| s > l));
                last = Some(s);
                ok += 1;
            }
            Err(e) => {
                assert!(e.is_overrun(), "{e}");
                overruns += 1;
            }
        }
    }
    assert!(overruns > 0 && ok > 0, "ok={ok} overruns={overruns}");
    assert_eq!(
        last,
        Some(999),
        "the newest records survive in the header ring"
    );
}

/// Several producer threads on one multi-producer ring: whole records, each producer's in
/// order, none lost.
#[test]
fn multi_producer_threads() {
    let _w = watchdog("multi_producer_threads", 60);
    let cfg = RingConfig {
        multi_producer: true,
        ..RingConfig::bytes(1 << 15).slots(256)
    };
    let w = Writer::create("mp", cfg).unwrap();
    let mut r = w.ring().reader(Start::Oldest).unwrap();
    let handles: Vec<_> = (0..4u64)
        .map(|id| {
            let mut p = MpWriter::new(&w.ring()).unwrap();
            std::thread::spawn(move || {
                for seq in 0..5000u64 {
                    let mut rec = make_record(id << 32 | seq, 100 + (seq % 100) as usize);
                    rec.truncate(rec.len());
                    p.write(&rec).unwrap();
                }
                p.flush();
            })
        })
        .collect();
    let mut next = [0u64; 4];
    let mut buf = vec![0u8; 512];
    for _ in 0..20_000 {
        let n = r.read(&mut buf).unwrap();
        let s = parse_record(&buf[..n]).unwrap();
        let (id, seq) = ((s >> 32) as usize, s & 0xffff_ffff);
        assert_eq!(seq, next[id], "producer {id} out of order");
        next[id] += 1;
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(next, [5000; 4]);
    // A single-producer write on a multi-producer ring is refused.
    let mut w = w;
    assert!(w.write(b"x").is_err());
}

/// select: wakes on whichever ring gets data; times out when none does.
#[test]
fn select_over_several_rings() {
    let _w = watchdog("select_over_several_rings", 30);
    let mut a = Writer::create("a", RingConfig::bytes(4096)).unwrap();
    let b = Writer::create("b", RingConfig::bytes(4096)).unwrap();
    let mut ra = a.ring().reader(Start::Oldest).unwrap();
    let mut rb = b.ring().reader(Start::Oldest).unwrap();
    assert_eq!(
        select(&mut [&mut ra, &mut rb], Some(Duration::from_millis(20))).unwrap(),
        None
    );
    let (me, pid) = (beltway::testing::this_thread(), std::process::id());
    let t = std::thread::spawn(move || {
        // Written once select sleeps on the rings' futex words.
        beltway::testing::wait_asleep(pid, me, "futex");
        let mut b = b;
        b.write(b"hello").unwrap();
        b
    });
    assert_eq!(
        select(&mut [&mut ra, &mut rb], Some(Duration::from_secs(10))).unwrap(),
        Some(1)
    );
    let _b = t.join().unwrap();
    a.write(b"x").unwrap();
    assert_eq!(select(&mut [&mut ra, &mut rb], None).unwrap(), Some(0));
}

/// Event moderation: with a threshold of 32, a single record still reaches a sleeping
/// reader without further writes or a flush (the latency bound), and a burst produces far
/// fewer wake-ups than records.
#[test]
fn moderation_batches_but_bounds_latency() {
    let _w = watchdog("moderation_batches_but_bounds_latency", 30);
    // A reader's deep sleep lasts the liveness period unless a writer wakes it: an hour
    // here, so a record that reaches it within the test's wait was delivered by the bound
    // (the writer waking a sleeping reader at once), not by the reader's own next look.
    let mut cfg = RingConfig::bytes(1 << 20).slots(64).threshold(32);
    cfg.liveness = Duration::from_secs(3600);
    let mut w = Writer::create("mod", cfg).unwrap();
    let mut r = w.ring().reader(Start::Oldest).unwrap();
    let got = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = got.clone();
    let t = std::thread::Builder::new()
        .name("mod-reader".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            while r.read(&mut buf).unwrap() > 0 {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
        .unwrap();
    // The reader is asleep (blocked in the kernel, not spinning) before the record comes.
    // Past its first, short sleep (1 ms, then it looks again) into the deep one: asleep,
    // and not switched back in over the last 5 polls (5 ms).
    let (mut last, mut stable) = (None, 0);
    wait_until("the reader's deep sleep", || {
        let now = thread_status("mod-reader");
        stable = if now.is_some() && now == last {
            stable + 1
        } else {
            0
        };
        last = now;
        stable >= 5 && last.as_ref().is_some_and(|(st, _)| st.starts_with('S'))
    });
    w.write(b"one").unwrap();
    // Without the latency bound this record would wait for 31 more: nothing else is
    // written until the reader has it.
    wait_until("the single record to reach the sleeping reader", || {
        got.load(std::sync::atomic::Ordering::SeqCst) == 1
    });
    for _ in 0..10_000 {
        w.write(b"burst").unwrap();
    }
    let wakeups = w.stats().wakeups;
    w.close();
    t.join().unwrap();
    assert_eq!(got.load(std::sync::atomic::Ordering::SeqCst), 10_001);
    assert!(
        wakeups < 10_000 / 4,
        "{wakeups} wake-ups for 10001 records: batching did not happen"
    );
}

/// Waits (polling every millisecond) until `cond` holds; fails naming `what` after 10 s, a
/// bound for a hang, not a measurement.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// This process's thread named `name`: its state and its count of voluntary context
/// switches (/proc/self/task/TID/status).
fn thread_status(name: &str) -> Option<(String, u64)> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .find_map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            let field = |k: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(|v| v.trim().to_string())
            };
            (field("Name:")? == name).then_some(())?;
            Some((
                field("State:")?,
                field("voluntary_ctxt_switches:")?.parse().ok()?,
            ))
        })
}

/// Self-scaling: a calm ring shrinks to its minimum; data stays intact across resizes.
#[test]
fn deck_cut_shrinks_when_calm() {
    let _w = watchdog("deck_cut_shrinks_when_calm", 30);
    let mut cfg = RingConfig::bytes(1 << 20).self_scaling(1 << 12, 1 << 20);
    cfg.calm_laps = 1;
    cfg.scaling_window = 0;
    let mut w = Writer::create("dc", cfg).unwrap();
    let mut r = w.ring().reader(Start::Oldest).unwrap();
    let mut buf = vec![0u8; 4096];
    let mut pos = 0u64;
    for _ in 0..4000 {
        let mut data = vec![0u8; 1000];
        fill_stream(pos, &mut data);
        w.write(&data).unwrap();
        let n = r.read(&mut buf).unwrap();
        assert!(check_stream(pos, &buf[..n]));
        let mut got = n;
        while got < 1000 {
            let n = r.read(&mut buf).unwrap();
            assert!(check_stream(pos + got as u64, &buf[..n]));
            got += n;
        }
        pos += 1000;
    }
    assert_eq!(
        w.active_size(),
        1 << 12,
        "a calm ring should have shrunk to its minimum"
    );
    assert!(w.stats().resizes >= 8);
}

/// A detachable SRP ring (published streams): no reader is no broken pipe, readers that
/// attach get everything written while they are attached, in order, and may leave again.
/// A plain SRP ring breaks the pipe when its last reader leaves.
#[test]
fn detachable_ring_outlives_its_readers() {
    let _w = watchdog("detachable_ring_outlives_its_readers", 60);
    let cfg = RingConfig {
        detachable: true,
        ..RingConfig::bytes(1 << 16)
    };
    let mut w = Writer::create("detach", cfg).unwrap();
    let ring = w.ring();
    let chunk = vec![7u8; 4096];
    // Nobody attached: many laps without waiting.
    for _ in 0..64 {
        w.write(&chunk).unwrap();
    }
    assert_eq!(ring.readers(), 0);
    for round in 0..3u8 {
        let mut r = ring.reader(Start::Latest).unwrap();
        assert_eq!(ring.readers(), 1);
        // A reader in another thread takes 4 laps; the writer waits for it (lossless).
        let t = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 4096];
            while got.len() < 4 * (1 << 16) {
                let n = r.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        let mut sent = Vec::new();
        for i in 0..(4 * (1 << 16) / 4096) {
            let block: Vec<u8> = (0..4096).map(|k| (k as u8) ^ (i as u8) ^ round).collect();
            w.write(&block).unwrap();
            sent.extend_from_slice(&block);
        }
        assert_eq!(
            t.join().unwrap(),
            sent,
            "round {round}: every byte, in order"
        );
        // The reader is gone: writing goes on.
        for _ in 0..64 {
            w.write(&chunk).unwrap();
        }
        assert_eq!(ring.readers(), 0);
    }
    // The same with a plain SRP ring: the pipe breaks.
    let mut w = Writer::create("plain", RingConfig::bytes(1 << 16)).unwrap();
    drop(w.ring().reader(Start::Latest).unwrap());
    let err = (0..64)
        .find_map(|_| w.write(&chunk).err())
        .expect("a broken pipe");
    assert!(matches!(err, beltway::Error::BrokenPipe { .. }), "{err}");
}

/// Write-side poke on an IBuf: a block filled in place is published by its tag only at
/// `poke_complete` (readers never see a window half filled), the unused end of the window
/// goes back (the next block follows right after the published bytes), and the call order
/// is enforced.
#[test]
fn ibuf_poke_fills_in_place_and_publishes_on_complete() {
    let _w = watchdog("ibuf_poke_fills_in_place_and_publishes_on_complete", 30);
    let mut w = DoubleRing::create("poke", 256, 1 << 16, SyncMode::Srp).unwrap();
    let mut r = DoubleRing::reader(&w, Start::Oldest).unwrap();
    let win = w.poke_acquire(100).unwrap();
    assert_eq!(win.len(), 100);
    win[..5].copy_from_slice(b"hello");
    assert!(
        r.tags_mut().block(Some(Duration::ZERO)).unwrap() == beltway::Ready::TimedOut,
        "nothing is published before poke_complete"
    );
    let err = w.poke_acquire(10).unwrap_err();
    assert!(err.to_string().contains("second poke_acquire"), "{err}");
    let err = w.write(b"x").unwrap_err();
    assert!(
        err.to_string().contains("while a poke_acquire is open"),
        "{err}"
    );
    // Filled over two calls, as slfile_append does.
    w.poked_mut().unwrap()[5..11].copy_from_slice(b" world");
    let t1 = w.poke_complete(11, 7).unwrap();
    assert_eq!((t1.len, t1.class), (11, 7));
    let err = w.poke_complete(1, 1).unwrap_err();
    assert!(err.to_string().contains("without poke_acquire"), "{err}");
    // The unused 89 bytes went back: the next block starts where the first ended.
    let t2 = w.poke_acquire(3).unwrap();
    t2.copy_from_slice(b"abc");
    let t2 = w.poke_complete(3, 1).unwrap();
    assert_eq!(t2.pos, t1.pos + 11);
    // A cancelled window publishes nothing; a plain write follows.
    w.poke_acquire(50).unwrap().fill(b'z');
    w.poke_cancel();
    w.write(b"tail").unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let (_, p) = r.peek_acquire().unwrap().unwrap();
        got.push(p.data.to_vec());
        r.peek_complete().unwrap();
    }
    assert_eq!(
        got,
        vec![b"hello world".to_vec(), b"abc".to_vec(), b"tail".to_vec()]
    );
    // Too large a completion is refused and leaves the window open.
    w.poke_acquire(4).unwrap();
    assert!(w.poke_complete(5, 1).is_err());
    assert!(w.poked_mut().is_some());
}

/// Poked blocks are lossless like written ones: a writer that pokes far more than the data
/// ring holds waits for the reader, and every block arrives intact and in order.
#[test]
fn ibuf_poke_waits_for_a_slow_reader() {
    let _w = watchdog("ibuf_poke_waits_for_a_slow_reader", 60);
    let mut w = DoubleRing::create("poke2", 256, 1 << 14, SyncMode::Srp).unwrap();
    let mut r = DoubleRing::reader(&w, Start::Oldest).unwrap();
    let t = std::thread::spawn(move || {
        for seq in 0..2000u32 {
            let len = 100 + (seq as usize % 900);
            let win = w.poke_acquire(len).unwrap();
            for (i, b) in win.iter_mut().enumerate() {
                *b = (seq as usize + i) as u8;
            }
            w.poke_complete(len, 1).unwrap();
        }
        w.close();
    });
    let mut seq = 0u32;
    while let Some((_, p)) = r.peek_acquire().unwrap() {
        let len = 100 + (seq as usize % 900);
        assert_eq!(p.data.len(), len, "block {seq}");
        assert!(
            p.data
                .iter()
                .enumerate()
                .all(|(i, b)| *b == (seq as usize + i) as u8),
            "block {seq} corrupt"
        );
        r.peek_complete().unwrap();
        seq += 1;
    }
    t.join().unwrap();
    assert_eq!(seq, 2000);
}
