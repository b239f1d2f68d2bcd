//! Channels, publish and subscribe: blocks and metadata across, wake-ups, loss, hostile
//! producers.

use super::*;
use crate::filter::{Batch, Filter};
use crate::store::Store;
use crate::transport::{cx_run, Fields};

/// Block `i` of a test stream: `(i % modulo) + 1` bytes derived from `i`, and its class.
fn test_block(i: u32, modulo: u32) -> (Vec<u8>, u16) {
    (
        (0..(i % modulo) + 1).map(|k| (k ^ i) as u8).collect(),
        (i % 7 + 1) as u16,
    )
}

/// Queue block `t` in `b`, sending the batch through `tx` every 100 blocks.
fn feed(tx: &mut Egress, st: &mut Store, b: &mut Batch, t: Tag) {
    b.push(t);
    if b.len() == 100 {
        cx_run(st, |cx| tx.process(cx, b));
        b.clear();
    }
}

/// Send what `b` still holds, then close the channel.
fn close(tx: &mut Egress, st: &mut Store, b: &mut Batch) {
    cx_run(st, |cx| tx.process(cx, b));
    cx_run(st, |cx| tx.finish(cx, &mut Batch::default()));
}

/// Pull batches of up to `max` blocks until the channel ends, releasing each after
/// `check` saw its blocks (with their number in the stream); returns how many came.
fn drain(rx: &mut Ingress, max: usize, mut check: impl FnMut(&Store, &Tag, u32)) -> u32 {
    let mut st = Store::new(1 << 16);
    let mut i = 0u32;
    loop {
        let mut b = Batch::default();
        let more = cx_run(&mut st, |cx| rx.pull(cx, &mut b, max));
        for t in &b.tags {
            check(&st, t, i);
            i += 1;
        }
        cx_run(&mut st, |cx| rx.epoch_end(cx));
        if !more {
            return i;
        }
    }
}

/// An ingress armed on a readiness handle, and the space's decision.
fn arm_ingress(
    rx: &mut Ingress,
    ready: &mut crate::readiness::Readiness,
) -> (crate::readiness::Decision, Option<Instant>) {
    let mut arm = ready.begin();
    rx.arm(&mut arm, true);
    crate::readiness::Readiness::decide(&arm)
}

/// One block sent through `tx` as a batch of its own (committed at its end).
fn send_one(tx: &mut Egress, st: &mut Store) {
    let mut b = Batch::default();
    b.push(st.push(b"one block"));
    cx_run(st, |cx| tx.process(cx, &mut b));
}

#[test]
fn a_deeply_asleep_ingress_is_woken_through_its_eventfd_by_one_commit() {
    use std::os::fd::AsRawFd;
    let (mut tx, mut rx) = channel("t-ready-deep", ChannelConfig::default()).unwrap();
    let mut ready = crate::readiness::Readiness::new().unwrap();
    // Long past its shallow sleep: it arms deep (the producer wakes it at once).
    rx.wait.shallow_until = Some(Instant::now());
    let (d, deadline) = arm_ingress(&mut rx, &mut ready);
    assert_eq!(d, crate::readiness::Decision::Sleep);
    assert_eq!(deadline, None, "a deep sleep has no deadline of its own");
    let wake = rx.r.as_ref().unwrap().wake_fd().unwrap().as_raw_fd();
    let producer = std::thread::spawn(move || {
        let mut st = Store::new(1 << 16);
        send_one(&mut tx, &mut st);
        tx
    });
    // The limit is a watchdog, not a figure: the wake-up must come from the eventfd.
    ready.sleep(None, Duration::from_secs(60)).unwrap();
    assert_eq!(ready.fired(), &[wake], "woken by the channel's eventfd");
    let _tx = producer.join().unwrap();
    let mut st = Store::new(1 << 16);
    let mut b = Batch::default();
    assert!(cx_run(&mut st, |cx| rx.pull(cx, &mut b, 16)));
    assert_eq!(b.len(), 1);
}

#[test]
fn a_shallow_sleeper_is_not_woken_per_block_but_by_its_latency_bound() {
    let (mut tx, mut rx) = channel("t-ready-shallow", ChannelConfig::default()).unwrap();
    let mut ready = crate::readiness::Readiness::new().unwrap();
    let (d, deadline) = arm_ingress(&mut rx, &mut ready);
    assert_eq!(d, crate::readiness::Decision::Sleep);
    let deadline = deadline.expect("a shallow sleep ends at the channel's latency bound");
    // One block is below the threshold (32): the producer commits without a wake-up.
    let mut st = Store::new(1 << 16);
    send_one(&mut tx, &mut st);
    ready
        .sleep(Some(deadline), Duration::from_secs(60))
        .unwrap();
    assert!(
        ready.fired().is_empty(),
        "no wake-up for one block: {:?}",
        ready.fired()
    );
    // The block is there for the pull the deadline brings.
    let mut st2 = Store::new(1 << 16);
    let mut b = Batch::default();
    assert!(cx_run(&mut st2, |cx| rx.pull(cx, &mut b, 16)));
    assert_eq!(b.len(), 1);
}

#[test]
fn blocks_cross_between_threads_with_classes_and_bytes_intact() {
    let (mut tx, mut rx) = channel(
        "t-chan",
        ChannelConfig {
            data: 1 << 16,
            slots: 256,
            ..Default::default()
        },
    )
    .unwrap();
    let n = 5000u32;
    let producer = std::thread::spawn(move || {
        let mut st = Store::new(1 << 20);
        let mut b = Batch::default();
        for i in 0..n {
            let (data, class) = test_block(i, 700);
            let t = st.push(&data);
            feed(&mut tx, &mut st, &mut b, Tag { class, ..t });
        }
        close(&mut tx, &mut st, &mut b);
    });
    let i = drain(&mut rx, 256, |st, t, i| {
        let (want, class) = test_block(i, 700);
        assert_eq!(st.data(t).unwrap(), &want[..], "block {i}");
        assert_eq!(t.class, class);
    });
    producer.join().unwrap();
    // The data ring (64 KiB) is far smaller than what crossed (~1.7 MB): space was
    // reused only after release, or a block above would have been wrong.
    assert_eq!(i, n);
}

/// Blocks that cross by reference (a shared ring of the producing space): tags only,
/// in runs, with the record metadata of those that have some in one METAS block per
/// run, even when a run starts with blocks that have none. Every block arrives with
/// its bytes, class and metadata as the producer had them, across many runs.
#[test]
fn blocks_by_reference_keep_their_metadata_in_mixed_runs() {
    use crate::store::RecordMeta;
    let (mut tx, mut rx) = channel(
        "t-chan-ref",
        ChannelConfig {
            slots: 256,
            ..Default::default()
        },
    )
    .unwrap();
    let n = 3000u32;
    // Block i has record metadata unless i % 5 < 2 (so a run may begin without).
    let with_meta = |i: u32| i % 5 >= 2;
    let producer = std::thread::spawn(move || {
        let mut st = Store::new(1 << 20);
        st.share_rings();
        // Far smaller than what crosses: reusing it must wait for the guards.
        let ring = st.add_ring(1 << 16);
        let mut b = Batch::default();
        for i in 0..n {
            let (data, class) = test_block(i, 300);
            let (t, d) = st.alloc_in(ring, data.len());
            d.copy_from_slice(&data);
            if with_meta(i) {
                st.add_record(
                    ring,
                    RecordMeta {
                        pos: t.pos,
                        len: t.len,
                        skip: i % 3,
                        ts_ns: 1_000 + i as u64,
                        orig_len: 2_000 + i,
                    },
                );
            }
            feed(&mut tx, &mut st, &mut b, Tag { class, ..t });
        }
        close(&mut tx, &mut st, &mut b);
        // The store (the shared ring) lives until the consumer is done with it.
        st
    });
    let i = drain(&mut rx, 64, |st, t, i| {
        let (want, class) = test_block(i, 300);
        assert_eq!(st.data(t).unwrap(), &want[..], "block {i}");
        assert_eq!(t.class, class);
        let r = st.record_of(t);
        if with_meta(i) {
            let r = r.unwrap_or_else(|| panic!("block {i} lost its metadata"));
            assert_eq!(
                (r.skip, r.ts_ns, r.orig_len),
                (i % 3, 1_000 + i as u64, 2_000 + i),
                "block {i}"
            );
        } else {
            assert!(r.is_none(), "block {i} got metadata it never had: {r:?}");
        }
    });
    drop(producer.join().unwrap());
    assert_eq!(i, n);
}

/// Prefix sharing's published streams are lossy (FRP): a subscriber that falls behind
/// loses whole blocks, counted exactly, and never gets a corrupt one; the publisher and
/// the other subscribers do not wait for it. Real named rings in /dev/shm.
mod lossy {
    use super::*;
    use crate::store::RecordMeta;

    use beltway::testing::watchdog;

    /// Block `i` of a test stream: its number, then bytes derived from it (100 to 1299).
    fn block(i: u32) -> Vec<u8> {
        let len = 100 + (i as usize * 37) % 1200;
        let mut b: Vec<u8> = (0..len)
            .map(|k| (k as u32 ^ i.wrapping_mul(0x9e37_79b9)) as u8)
            .collect();
        b[..4].copy_from_slice(&i.to_le_bytes());
        b
    }

    /// The number of a block whose bytes are exactly `block(n)`'s.
    fn intact(d: &[u8]) -> Option<u32> {
        let i = u32::from_le_bytes(d.get(..4)?.try_into().ok()?);
        (block(i) == d).then_some(i)
    }

    /// The numbers in a subscriber's summary line: blocks received, lost, bytes known lost.
    fn summary_numbers(s: &str) -> (u64, u64, u64) {
        let num = |after: &str| {
            s.split(after)
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        };
        let received = s
            .strip_prefix("__subscribe: ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok());
        (
            received.unwrap_or_else(|| panic!("{s}")),
            num("lost ").unwrap_or_else(|| panic!("{s}")),
            num("), ").unwrap_or(0),
        )
    }

    /// A subscriber in its own space, checking every block it gets.
    struct Sub {
        rx: Ingress,
        st: Store,
        got: Vec<u32>,
    }

    impl Sub {
        fn new(key: &str) -> Sub {
            Sub {
                rx: subscribe(key).unwrap(),
                st: Store::new(1 << 16),
                got: Vec::new(),
            }
        }
        /// One pull; false at the end of the stream.
        fn pull(&mut self) -> bool {
            let mut b = Batch::default();
            let more = cx_run(&mut self.st, |cx| self.rx.pull(cx, &mut b, 256));
            for t in &b.tags {
                let d = self.st.data(t).unwrap();
                let i = intact(d).unwrap_or_else(|| {
                    panic!(
                        "a delivered block is not one the publisher sent ({} bytes)",
                        d.len()
                    )
                });
                assert_eq!(t.class, (i % 7 + 1) as u16, "block {i}: its class");
                let r = self
                    .st
                    .record_of(t)
                    .unwrap_or_else(|| panic!("block {i}: no record metadata"));
                assert_eq!(
                    (r.ts_ns, r.orig_len, r.skip),
                    (i as u64 * 1000, d.len() as u32 + 4, 0),
                    "block {i}: its record"
                );
                assert_eq!(self.st.link(t), Some(1), "block {i}: its link type");
                self.got.push(i);
            }
            cx_run(&mut self.st, |cx| self.rx.epoch_end(cx));
            more
        }
        fn read_to_end(&mut self) {
            while self.pull() {}
        }
        fn summary(&self) -> (u64, u64, u64) {
            let s = self
                .rx
                .summary()
                .expect("a subscriber reports what it received and lost");
            let n = summary_numbers(&s);
            assert_eq!(n.0, self.got.len() as u64, "{s}");
            n
        }
    }

    /// A publisher's space: pushes blocks `from..to` as one batch, each with its record
    /// metadata (time, wire length) and link type.
    fn send(tx: &mut Egress, st: &mut Store, blocks: std::ops::Range<u32>) {
        let mut b = Batch::default();
        for i in blocks {
            let d = block(i);
            let t = st.push(&d);
            st.add_record(
                t.buf,
                RecordMeta::whole(t.pos, t.len, i as u64 * 1000, d.len() as u32 + 4),
            );
            st.set_link(t.buf, 1);
            b.push(Tag {
                class: (i % 7 + 1) as u16,
                ..t
            });
        }
        cx_run(st, |cx| tx.process(cx, &mut b));
    }

    fn shm_names(key: &str) -> Vec<String> {
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(key))
            .collect()
    }

    /// One subscriber keeps up, one never reads until the stream has ended. The
    /// publisher never waits (in one thread it would hang); the live subscriber gets
    /// everything; the stalled one gets the newest blocks the rings still held, intact
    /// and in order, and counts every other block as lost: by its tags when the tag
    /// ring lapped first (lengths unknown), by its data when the data ring did (lengths
    /// known, so the lost bytes are exact).
    #[test]
    fn a_subscriber_that_falls_behind_loses_whole_blocks_and_holds_back_no_one() {
        let _w = watchdog(
            "a_subscriber_that_falls_behind_loses_whole_blocks_and_holds_back_no_one",
            60,
        );
        let n = 3000u32;
        // 256 tags (about 180 KB of blocks) in 1 MiB of data: the tag ring laps first.
        // 4096 tags in 64 KiB of data (about 90 blocks): the data ring laps first.
        for (slots, data, tags_lap) in [(256, 1 << 20, true), (4096, 1 << 16, false)] {
            let key = format!("t-lossy-{}-{slots}", std::process::id());
            let mut tx = publish(
                &key,
                ChannelConfig {
                    slots,
                    data,
                    ..Default::default()
                },
            )
            .unwrap();
            let (mut live, mut slow) = (Sub::new(&key), Sub::new(&key));
            let mut st = Store::new(1 << 20);
            for from in (0..n).step_by(16) {
                send(&mut tx, &mut st, from..(from + 16).min(n));
                live.pull();
            }
            cx_run(&mut st, |cx| tx.finish(cx, &mut Batch::default()));
            live.read_to_end();
            slow.read_to_end();
            assert_eq!(
                live.got,
                (0..n).collect::<Vec<_>>(),
                "the live subscriber got every block in order"
            );
            assert_eq!(live.summary(), (n as u64, 0, 0));
            let (received, lost, lost_bytes) = slow.summary();
            let first = n - received as u32;
            assert_eq!(
                slow.got,
                (first..n).collect::<Vec<_>>(),
                "the newest blocks, intact and in order"
            );
            assert_eq!(
                received + lost,
                n as u64,
                "every block received or counted lost"
            );
            if tags_lap {
                assert_eq!(
                    received, slots as u64,
                    "a whole tag ring of the newest blocks"
                );
                assert_eq!(
                    lost_bytes, 0,
                    "blocks whose tags were lost have unknown lengths"
                );
            } else {
                assert!(
                    received > 0 && received < 200,
                    "what 64 KiB of data holds: {received}"
                );
                assert_eq!(
                    lost_bytes,
                    (0..first).map(|i| block(i).len() as u64).sum::<u64>(),
                    "the lost blocks' bytes"
                );
            }
            drop((tx, live, slow));
            assert_eq!(
                shm_names(&key),
                Vec::<String>::new(),
                "the published rings are gone with the publisher"
            );
        }
    }

    /// A publisher thread that never pauses and a subscriber that reads slowly, so
    /// blocks are overwritten before, and at times while, the subscriber copies them:
    /// whatever it delivers is intact and in order, and delivered plus lost is exactly
    /// what was sent.
    #[test]
    fn racing_a_slow_subscriber_delivers_only_intact_blocks_and_counts_the_rest() {
        let _w = watchdog(
            "racing_a_slow_subscriber_delivers_only_intact_blocks_and_counts_the_rest",
            120,
        );
        let key = format!("t-lossy-race-{}", std::process::id());
        let n = 20_000u32;
        let mut tx = publish(
            &key,
            ChannelConfig {
                slots: 1024,
                data: 1 << 16,
                ..Default::default()
            },
        )
        .unwrap();
        let mut sub = Sub::new(&key);
        let publisher = std::thread::spawn(move || {
            let mut st = Store::new(1 << 20);
            for from in (0..n).step_by(32) {
                send(&mut tx, &mut st, from..(from + 32).min(n));
            }
            cx_run(&mut st, |cx| tx.finish(cx, &mut Batch::default()));
        });
        while sub.pull() {
            std::thread::sleep(Duration::from_micros(200));
        }
        publisher.join().unwrap();
        let (received, lost, _) = sub.summary();
        assert!(
            sub.got.windows(2).all(|w| w[0] < w[1]),
            "in order, none twice"
        );
        assert_eq!(
            received + lost,
            n as u64,
            "every block received or counted lost"
        );
        assert_eq!(
            sub.got.last(),
            Some(&(n - 1)),
            "the stream's last block, which nothing overwrote"
        );
    }
}

/// Hostile producer: random headers, bare tags, tags into unknown files, announces of
/// garbage. The consumer reports errors as warnings and never panics, hangs or reads
/// outside its buffers.
mod hostile {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Msg {
        Through(Vec<u8>, u16),
        Tag(u64, u32, u16, u16),
    }

    fn msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            (proptest::collection::vec(any::<u8>(), 0..64), any::<u16>())
                .prop_map(|(b, c)| Msg::Through(b, c)),
            (0u64..1 << 20, any::<u32>(), any::<u16>(), any::<u16>())
                .prop_map(|(p, l, b, c)| Msg::Tag(p, l, b, c)),
            // Well-formed headers with random flags, followed by data.
            (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..32)).prop_map(|(f, d)| {
                let mut b = Fields {
                    ts_ns: 1,
                    orig_len: 2,
                    link: 1,
                    flags: f,
                    ..Fields::default()
                }
                .encode()
                .to_vec();
                b.extend(d);
                Msg::Through(b, 1)
            }),
        ]
    }

    /// Write `msgs` into the channel, close it, and pull until it ends, showing every
    /// block delivered to `check` while its batch is held. Returns whether the channel
    /// ended (a closed channel must, whatever it held) within 100 pulls.
    fn feed_and_drain(
        tx: &mut Egress,
        rx: &mut Ingress,
        msgs: &[Msg],
        mut check: impl FnMut(&Store, &Tag),
    ) -> bool {
        for m in msgs {
            match m {
                Msg::Through(b, c) => {
                    tx.w.write_through_parts(&[b], *c).unwrap();
                }
                Msg::Tag(p, l, b, c) => {
                    tx.w.write_tag(Tag {
                        pos: *p,
                        len: *l,
                        buf: *b,
                        class: *c,
                    })
                    .unwrap();
                }
            }
        }
        tx.w.close();
        let mut st = Store::new(1 << 16);
        let (mut sessions, mut warnings, mut stop) = (None, Vec::new(), crate::filter::Stop::No);
        for _ in 0..100 {
            let mut b = Batch::default();
            let more = {
                let mut cx = Ctx {
                    store: &mut st,
                    name: "t",
                    sessions: &mut sessions,
                    warnings: &mut warnings,
                    stop: &mut stop,
                };
                rx.pull(&mut cx, &mut b, 256)
            };
            for t in &b.tags {
                check(&st, t);
            }
            rx.epoch_end(&mut Ctx {
                store: &mut st,
                name: "t",
                sessions: &mut sessions,
                warnings: &mut warnings,
                stop: &mut stop,
            });
            if !more {
                return true;
            }
            // A migration marker (trusted channels) holds the channel until the
            // space has served it: serve it, as the space does.
            if rx.marker().is_some() {
                rx.resume();
            }
        }
        false
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
        #[test]
        fn garbage_in_a_channel_is_an_error_not_a_crash(msgs in proptest::collection::vec(msg(), 0..40), trusted in any::<bool>()) {
            let (mut tx, tags, data) = egress("t-hostile", ChannelConfig { data: 1 << 16, slots: 256, ..Default::default() }, false).unwrap();
            let mut rx = ingress("t-hostile", &tags, &data, trusted).unwrap();
            // Whatever came out resolves to exactly its length, or fails cleanly (an
            // error, never a slice of another length); and the closed channel ends.
            let mut wrong = Vec::new();
            let ended = feed_and_drain(&mut tx, &mut rx, &msgs, |st, t| {
                if let Ok(d) = st.data(t) {
                    if d.len() != t.len as usize {
                        wrong.push((*t, d.len()));
                    }
                }
            });
            prop_assert!(ended, "the closed channel did not end after 100 pulls");
            prop_assert!(wrong.is_empty(), "blocks resolving to another length than theirs: {:?}", wrong);
        }

        /// The same garbage in a stream another run publishes: the subscriber, which
        /// copies blocks out, reports errors as warnings and never panics either, and
        /// whatever it hands out lies in its own ring.
        #[test]
        fn garbage_in_a_published_stream_is_an_error_not_a_crash(msgs in proptest::collection::vec(msg(), 0..40)) {
            static CASE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let key = format!("t-hostile-{}-{}", std::process::id(), CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            let mut tx = publish(&key, ChannelConfig { data: 1 << 16, slots: 256, ..Default::default() }).unwrap();
            let mut rx = subscribe(&key).unwrap();
            let mut short = Vec::new();
            let ended = feed_and_drain(&mut tx, &mut rx, &msgs, |st, t| {
                if st.data(t).map(|d| d.len()) != Ok(t.len as usize) {
                    short.push(*t);
                }
            });
            prop_assert!(ended, "the closed stream did not end after 100 pulls");
            prop_assert!(short.is_empty(), "blocks that do not resolve to their length: {:?}", short);
        }
    }
}
