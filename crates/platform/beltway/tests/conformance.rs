//! One conformance suite, written against the `Sink`/`Source` traits and run for every
//! ring specialization (layout x synchronization x size policy).

mod common;

use beltway::{Error, Layout, Reader, RingConfig, Source, Start, SyncMode, Writer};
use common::*;
use std::time::Duration;

#[derive(Debug, Clone)]
struct Spec {
    name: &'static str,
    cfg: RingConfig,
}

fn specs() -> Vec<Spec> {
    let small = 1 << 14;
    vec![
        Spec {
            name: "bytes-srp",
            cfg: RingConfig::bytes(small),
        },
        Spec {
            name: "bytes-srp-scaling",
            cfg: RingConfig {
                scaling_window: 0,
                calm_laps: 1,
                ..RingConfig::bytes(1 << 16).self_scaling(4096, 1 << 15)
            },
        },
        Spec {
            name: "bytes-frp",
            cfg: RingConfig::bytes(small).sync(SyncMode::Frp),
        },
        Spec {
            name: "bytes-mrp",
            cfg: RingConfig::bytes(small).sync(SyncMode::Mrp),
        },
        Spec {
            name: "slots-srp",
            cfg: RingConfig::bytes(small).slots(2048),
        },
        Spec {
            name: "slots-frp",
            cfg: RingConfig::bytes(small).slots(2048).sync(SyncMode::Frp),
        },
        Spec {
            name: "records-srp",
            cfg: RingConfig::bytes(small).layout(Layout::Records),
        },
        Spec {
            name: "records-srp-scaling",
            cfg: RingConfig {
                scaling_window: 0,
                calm_laps: 1,
                ..RingConfig::bytes(1 << 16)
                    .layout(Layout::Records)
                    .self_scaling(8192, 1 << 14)
            },
        },
        Spec {
            name: "records-frp",
            cfg: RingConfig::bytes(small)
                .layout(Layout::Records)
                .sync(SyncMode::Frp),
        },
        Spec {
            name: "records-mrp",
            cfg: RingConfig::bytes(small)
                .layout(Layout::Records)
                .sync(SyncMode::Mrp),
        },
    ]
}

fn lossless(s: &Spec) -> bool {
    s.cfg.sync == SyncMode::Srp
}

fn is_bytes(s: &Spec) -> bool {
    s.cfg.layout == Layout::Bytes
}

fn max_rec(w: &Writer) -> usize {
    w.max_record().min(1500)
}

/// Unit `seq` as the suite writes it: a self-validating record, or for byte rings a slice
/// of the reference stream.
fn unit(spec: &Spec, seq: u64, max: usize, stream_pos: u64) -> Vec<u8> {
    if is_bytes(spec) {
        let mut v = vec![0u8; record_len(seq, max)];
        fill_stream(stream_pos, &mut v);
        v
    } else {
        make_record(seq, record_len(seq, max))
    }
}

fn for_each_spec(f: impl Fn(&Spec)) {
    for s in specs() {
        eprintln!("-- {}", s.name);
        f(&s);
    }
}

#[test]
fn roundtrip_in_order_interleaved() {
    let _w = watchdog("roundtrip_in_order_interleaved", 60);
    for_each_spec(|spec| {
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        let max = max_rec(&w);
        let mut buf = vec![0u8; 1 << 16];
        let (mut wseq, mut rseq, mut wstream, mut rstream) = (0u64, 0u64, 0u64, 0u64);
        // Moves many laps through the ring, never letting the writer lap the reader.
        while wseq < 3000 {
            for _ in 0..3 {
                let u = unit(spec, wseq, max, wstream);
                w.write(&u).unwrap();
                wstream += u.len() as u64;
                wseq += 1;
            }
            w.flush();
            while rstream < wstream {
                let n = Source::read(&mut r, &mut buf).unwrap();
                assert!(n > 0, "{}: unexpected EOF", spec.name);
                if is_bytes(spec) {
                    assert!(
                        check_stream(rstream, &buf[..n]),
                        "{}: stream mismatch at {rstream}",
                        spec.name
                    );
                } else {
                    assert_eq!(
                        parse_record(&buf[..n]).unwrap(),
                        rseq,
                        "{}: out of order",
                        spec.name
                    );
                    rseq += 1;
                }
                rstream += n as u64;
            }
        }
        assert_eq!(rstream, wstream);
    });
}

#[test]
fn eof_after_close_drains_first() {
    let _w = watchdog("eof_after_close_drains_first", 30);
    for_each_spec(|spec| {
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        let u = unit(spec, 0, 100, 0);
        w.write(&u).unwrap();
        w.close();
        let mut buf = vec![0u8; 4096];
        assert_eq!(
            Source::read(&mut r, &mut buf).unwrap(),
            u.len(),
            "{}",
            spec.name
        );
        assert_eq!(
            Source::read(&mut r, &mut buf).unwrap(),
            0,
            "{}: EOF expected",
            spec.name
        );
        assert!(
            matches!(w.write(&u), Err(Error::Closed { .. })),
            "{}: write after close",
            spec.name
        );
    });
}

#[test]
fn broken_pipe_when_all_readers_left() {
    let _w = watchdog("broken_pipe_when_all_readers_left", 30);
    for_each_spec(|spec| {
        if !lossless(spec) {
            return;
        }
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let r = w.ring().reader(Start::Oldest).unwrap();
        drop(r);
        let max = max_rec(&w);
        // Writes succeed while they fit, then the writer learns nobody will ever read.
        let mut res = Ok(0);
        for seq in 0..100_000 {
            res = w.write(&unit(spec, seq, max, 0));
            if res.is_err() {
                break;
            }
        }
        assert!(
            matches!(res, Err(Error::BrokenPipe { .. })),
            "{}: got {res:?}",
            spec.name
        );
    });
}

#[test]
fn peek_acquire_does_not_consume() {
    let _w = watchdog("peek_acquire_does_not_consume", 30);
    for_each_spec(|spec| {
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        let a = unit(spec, 0, 200, 0);
        let b = unit(spec, 1, 200, a.len() as u64);
        w.write(&a).unwrap();
        w.write(&b).unwrap();
        let first = r.peek_acquire(a.len()).unwrap().unwrap().data.to_vec();
        assert_eq!(first, a, "{}", spec.name);
        // Not consumed: a second acquire without complete is refused, the data stays.
        assert!(r.peek_acquire(a.len()).is_err());
        r.peek_complete().unwrap();
        let got = Source::peek(&mut r, b.len(), |p| p.data.to_vec())
            .unwrap()
            .unwrap();
        assert_eq!(got, b, "{}", spec.name);
        assert!(Source::check(&mut r, 0).is_ok());
    });
}

#[test]
fn poke_then_complete_publishes() {
    let _w = watchdog("poke_then_complete_publishes", 30);
    for_each_spec(|spec| {
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        let u = unit(spec, 5, 300, 0);
        let buf = w.poke_acquire(u.len()).unwrap();
        assert!(buf.len() >= u.len());
        buf[..u.len()].copy_from_slice(&u);
        // Not visible before completion.
        assert!(
            r.try_peek_acquire(4096).unwrap().is_none(),
            "{}: visible before complete",
            spec.name
        );
        w.poke_complete(u.len()).unwrap();
        let mut out = vec![0u8; 4096];
        let n = Source::read(&mut r, &mut out).unwrap();
        assert_eq!(&out[..n], &u[..], "{}", spec.name);
    });
}

#[test]
fn append_builds_one_record() {
    let _w = watchdog("append_builds_one_record", 30);
    for_each_spec(|spec| {
        if is_bytes(spec) {
            return;
        }
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        let rec = make_record(9, 600);
        let mut b = w.open_record(1000).unwrap();
        b.append(&rec[..16])
            .unwrap()
            .append(&rec[16..300])
            .unwrap()
            .append(&rec[300..])
            .unwrap();
        assert!(
            b.append(&[0u8; 1000]).is_err(),
            "append past the open record's capacity"
        );
        b.commit().unwrap();
        let mut out = vec![0u8; 4096];
        let n = Source::read(&mut r, &mut out).unwrap();
        assert_eq!(parse_record(&out[..n]).unwrap(), 9);
    });
}

#[test]
fn record_limits_are_errors() {
    for_each_spec(|spec| {
        if is_bytes(spec) {
            return;
        }
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        let too_big = vec![0u8; w.max_record() + 1];
        assert!(
            matches!(w.write(&too_big), Err(Error::TooLarge { .. })),
            "{}",
            spec.name
        );
        let rec = make_record(1, 500);
        w.write(&rec).unwrap();
        let mut small = [0u8; 100];
        assert!(
            matches!(
                Source::read(&mut r, &mut small),
                Err(Error::BufferTooSmall { need: 500, .. })
            ),
            "{}",
            spec.name
        );
        // Nothing was consumed by the failed read.
        let mut out = vec![0u8; 1000];
        assert_eq!(Source::read(&mut r, &mut out).unwrap(), 500);
    });
}

/// A writer thread and reader threads move many laps of data. Lossless rings deliver
/// everything in order to every reader; lossy rings deliver only valid data and report
/// every loss as an overrun range.
#[test]
fn threaded_many_laps_every_reader() {
    let _w = watchdog("threaded_many_laps_every_reader", 120);
    for_each_spec(|spec| {
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let readers: Vec<Reader> = (0..3)
            .map(|_| w.ring().reader(Start::Oldest).unwrap())
            .collect();
        let max = max_rec(&w);
        let total_units = 20_000u64;
        let spec2 = spec.clone();
        let handles: Vec<_> = readers
            .into_iter()
            .enumerate()
            .map(|(i, mut r)| {
                let spec = spec2.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    let (mut got, mut overruns, mut last_seq) = (0u64, 0u64, None::<u64>);
                    loop {
                        let at = r.position();
                        match r.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                if is_bytes(&spec) {
                                    assert!(
                                        check_stream(at, &buf[..n]),
                                        "{}: reader {i} corrupt at {at}",
                                        spec.name
                                    );
                                } else {
                                    let seq = parse_record(&buf[..n]).unwrap_or_else(|e| {
                                        panic!("{}: reader {i}: {e}", spec.name)
                                    });
                                    if let Some(l) = last_seq {
                                        assert!(
                                            seq > l,
                                            "{}: reader {i}: seq {seq} after {l}",
                                            spec.name
                                        );
                                        if lossless(&spec) {
                                            assert_eq!(
                                                seq,
                                                l + 1,
                                                "{}: reader {i} skipped",
                                                spec.name
                                            );
                                        }
                                    }
                                    last_seq = Some(seq);
                                }
                                got += n as u64;
                                // Reader 2 is slow, so lossy rings overrun it (the
                                // pause is the behaviour under test, not a wait).
                                if i == 2 && got % 7 == 0 {
                                    std::thread::sleep(Duration::from_micros(50));
                                }
                            }
                            Err(e) if e.is_overrun() => {
                                assert!(
                                    !lossless(&spec),
                                    "{}: overrun on a lossless ring: {e}",
                                    spec.name
                                );
                                overruns += 1;
                            }
                            Err(e) => panic!("{}: reader {i}: {e}", spec.name),
                        }
                    }
                    (got, overruns, last_seq, r.position(), r.lost())
                })
            })
            .collect();
        let mut stream = 0u64;
        for seq in 0..total_units {
            let u = unit(spec, seq, max, stream);
            w.write(&u).unwrap();
            stream += u.len() as u64;
        }
        w.close();
        let wend = w.stats().write_pos;
        for h in handles {
            let (got, overruns, last, end, lost) = h.join().unwrap();
            // Every reader, lossy or not, reads up to the writer's end.
            assert_eq!(end, wend, "{}: reader stopped short of the end", spec.name);
            if lossless(spec) {
                assert_eq!(got, stream, "{}: lossless reader missed data", spec.name);
                assert_eq!(overruns, 0);
            } else {
                // A lossy reader loses only what it was told it lost (an overrun), and
                // loses something whenever it is told so.
                assert_eq!(
                    got == stream,
                    overruns == 0,
                    "{}: got {got} of {stream} bytes with {overruns} overruns",
                    spec.name
                );
            }
            assert_eq!(
                lost == 0,
                overruns == 0,
                "{}: lost {lost} bytes in {overruns} overruns",
                spec.name
            );
            if is_bytes(spec) {
                // What was read and what was skipped add up to the stream.
                assert_eq!(got + lost, stream, "{}: got {got} + lost {lost}", spec.name);
            } else if lossless(spec) {
                assert_eq!(
                    last,
                    Some(total_units - 1),
                    "{}: the last record",
                    spec.name
                );
            }
        }
    });
}

#[test]
fn block_wakes_on_write_and_times_out() {
    let _w = watchdog("block_wakes_on_write_and_times_out", 30);
    for_each_spec(|spec| {
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        assert_eq!(
            r.block(Some(Duration::from_millis(20))).unwrap(),
            beltway::Ready::TimedOut
        );
        let u = unit(spec, 0, 64, 0);
        let (me, pid) = (beltway::testing::this_thread(), std::process::id());
        let (read_tx, read_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // Written once this thread's reader is blocked, dropped once it blocks again
            // after reading it: both wake-ups are tested, not a reader that never slept.
            beltway::testing::wait_asleep(pid, me, "futex");
            w.write(&u).unwrap();
            read_rx.recv().unwrap();
            beltway::testing::wait_asleep(pid, me, "futex");
            drop(w);
        });
        assert_eq!(r.block(None).unwrap(), beltway::Ready::Data);
        let mut buf = vec![0u8; 4096];
        assert!(Source::read(&mut r, &mut buf).unwrap() > 0);
        read_tx.send(()).unwrap();
        assert_eq!(
            Source::read(&mut r, &mut buf).unwrap(),
            0,
            "{}: EOF after writer dropped",
            spec.name
        );
        t.join().unwrap();
    });
}

#[test]
fn late_reader_starts_latest() {
    for_each_spec(|spec| {
        let mut w = Writer::create(spec.name, spec.cfg.clone()).unwrap();
        let _keep = w.ring().reader(Start::Oldest).unwrap();
        w.write(&unit(spec, 0, 64, 0)).unwrap();
        let mut late = w.ring().reader(Start::Latest).unwrap();
        assert!(
            late.try_peek_acquire(4096).unwrap().is_none(),
            "{}",
            spec.name
        );
        let u = unit(spec, 1, 64, 64);
        w.write(&u).unwrap();
        let mut buf = vec![0u8; 4096];
        let n = Source::read(&mut late, &mut buf).unwrap();
        assert_eq!(&buf[..n], &u[..], "{}", spec.name);
    });
}
