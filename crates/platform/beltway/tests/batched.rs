//! Batched commits and runs of tags: what a channel between spaces relies on to move tags
//! at ring speed (one release store per batch, one copy per run), and that batching never
//! hides, loses, reorders or deadlocks anything.

mod common;

use beltway::{Layout, Ready, RingConfig, Start, Tag, Writer};
use common::*;
use proptest::prelude::*;
use std::time::Duration;

fn tag(i: u64) -> Tag {
    Tag {
        pos: i * 64,
        len: (i % 1500) as u32 + 1,
        buf: 1 + (i % 7) as u16,
        class: (i % 3) as u16,
    }
}

fn tags_bytes(range: std::ops::Range<u64>) -> Vec<u8> {
    range.flat_map(|i| tag(i).to_bytes()).collect()
}

/// Staged tags are invisible until the commit, then all visible at once; a run read in
/// place is consumed only as far as asked.
#[test]
fn deferred_tags_appear_at_commit_and_runs_consume_partially() {
    let _w = watchdog("deferred_tags_appear_at_commit", 30);
    let mut w = Writer::create(
        "b-defer",
        RingConfig::bytes(256 * 16)
            .layout(Layout::Tags)
            .threshold(1000),
    )
    .unwrap();
    let mut r = w.ring().reader(Start::Oldest).unwrap();
    w.set_deferred(true);
    w.append_tags(&tags_bytes(0..10)).unwrap();
    w.append_record(&tag(10).to_bytes()).unwrap();
    assert!(
        r.try_peek_tags(100).unwrap().is_none(),
        "staged tags must not be visible"
    );
    w.commit();
    let p = r.try_peek_tags(100).unwrap().expect("committed tags");
    assert_eq!(p.data.len(), 11 * 16);
    assert_eq!(Tag::from_bytes(&p.data[16..]), Some(tag(1)));
    r.consume_tags(4 * 16).unwrap();
    let p = r.try_peek_tags(3).unwrap().unwrap();
    assert_eq!(p.data.len(), 3 * 16, "at most `max` tags");
    assert_eq!(Tag::from_bytes(p.data), Some(tag(4)));
    assert!(r.consume_tags(4 * 16).is_err(), "more than the run");
}

/// A deferred writer that runs out of room commits what it staged before it waits, so the
/// reader can release it: no deadlock, however small the ring.
#[test]
fn a_full_ring_commits_before_waiting() {
    let _w = watchdog("a_full_ring_commits_before_waiting", 30);
    let mut w = Writer::create("b-full", RingConfig::bytes(256 * 16).layout(Layout::Tags)).unwrap();
    let mut r = w.ring().reader(Start::Oldest).unwrap();
    let n = 100_000u64;
    let t = std::thread::spawn(move || {
        w.set_deferred(true);
        // Runs far larger than the ring, never committed by the caller until the end.
        for s in (0..n).step_by(1000) {
            w.append_tags(&tags_bytes(s..s + 1000)).unwrap();
        }
        w.close();
    });
    let mut next = 0u64;
    loop {
        match r.try_peek_tags(7).unwrap() {
            Some(p) => {
                let k = p.data.len() as u64 / 16;
                for (j, b) in p.data.chunks_exact(16).enumerate() {
                    assert_eq!(Tag::from_bytes(b), Some(tag(next + j as u64)));
                }
                next += k;
                r.consume_tags(k * 16).unwrap();
            }
            None => {
                if r.block(Some(Duration::from_secs(5))).unwrap() == Ready::Eof
                    && r.try_peek_tags(1).unwrap().is_none()
                {
                    break;
                }
            }
        }
    }
    t.join().unwrap();
    assert_eq!(next, n);
}

/// A sleeping reader is woken after `threshold` staged tags even while the batch goes on
/// (the moderation's promise holds under batching).
#[test]
fn a_sleeping_reader_is_woken_after_threshold_staged_tags() {
    let _w = watchdog("a_sleeping_reader_is_woken", 30);
    let mut w = Writer::create(
        "b-thresh",
        RingConfig {
            latency: Duration::from_secs(20),
            ..RingConfig::bytes(4096 * 16)
                .layout(Layout::Tags)
                .threshold(8)
        },
    )
    .unwrap();
    let mut r = w.ring().reader(Start::Oldest).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tid_tx.send(beltway::testing::this_thread()).unwrap();
        // Sleeps (its latency bound is 20 s): only the writer can wake it in time.
        let got = r.block(Some(Duration::from_secs(10))).unwrap();
        tx.send((got, r.readable())).unwrap();
    });
    // The reader is asleep on the ring's futex before anything is staged.
    beltway::testing::wait_asleep(std::process::id(), tid_rx.recv().unwrap(), "futex");
    w.set_deferred(true);
    for i in 0..8 {
        w.append_record(&tag(i).to_bytes()).unwrap();
    }
    // No commit, no flush: the 8th staged tag must have woken the reader.
    let (got, readable) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the reader was not woken after 8 staged tags");
    assert_eq!(got, Ready::Data);
    assert_eq!(readable, 8 * 16);
    t.join().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any mix of single tags, runs, commits and flushes, through a ring of any size, read
    /// by another thread in runs of any length: every tag arrives once, in order.
    #[test]
    fn batched_tags_arrive_once_in_order(
        slots_log in 8u32..11,
        ops in proptest::collection::vec((0u8..4, 1u64..700), 1..40),
        max in 1usize..50,
    ) {
        let slots = 1usize << slots_log;
        let name = format!("b-prop-{slots}-{max}");
        let mut w = Writer::create(&name, RingConfig::bytes(slots * 16).layout(Layout::Tags).threshold(5)).unwrap();
        let mut r = w.ring().reader(Start::Oldest).unwrap();
        let total: u64 = ops.iter().map(|o| o.1).sum();
        let t = std::thread::spawn(move || {
            w.set_deferred(true);
            let mut i = 0u64;
            for (op, n) in ops {
                match op {
                    0 => { w.append_tags(&tags_bytes(i..i + n)).unwrap(); }
                    1 => for k in i..i + n { w.append_record(&tag(k).to_bytes()).unwrap(); },
                    2 => { w.append_tags(&tags_bytes(i..i + n)).unwrap(); w.commit(); }
                    _ => { w.append_tags(&tags_bytes(i..i + n)).unwrap(); w.flush(); }
                }
                i += n;
            }
            w.close();
        });
        let mut next = 0u64;
        loop {
            let got = r.try_peek_tags(max).unwrap().map(|p| p.data.to_vec());
            match got {
                Some(d) => {
                    for b in d.chunks_exact(16) {
                        prop_assert_eq!(Tag::from_bytes(b), Some(tag(next)));
                        next += 1;
                    }
                    r.consume_tags(d.len() as u64).unwrap();
                }
                None => {
                    if r.block(Some(Duration::from_secs(5))).unwrap() == Ready::Eof && r.try_peek_tags(1).unwrap().is_none() {
                        break;
                    }
                }
            }
        }
        t.join().unwrap();
        prop_assert_eq!(next, total);
    }
}

/// Whether `fd` is readable now.
fn readable_now(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on our stack, no wait.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// Moderation's latency bound when the commits stop: fewer tags than the threshold do
/// not wake an armed reader at their commit; the wake-up is owed (`wake_owed`) and
/// `wake_if_due` gives it once the bound ran out, through the ring's wake-up eventfd.
#[test]
fn an_owed_wake_up_is_given_when_its_latency_bound_runs_out() {
    let _w = watchdog("an_owed_wake_up", 30);
    let mut w = Writer::create(
        "b-owed",
        RingConfig {
            latency: Duration::from_millis(30),
            ..RingConfig::bytes(4096 * 16)
                .layout(Layout::Tags)
                .threshold(8)
                .wake_fd(true)
        },
    )
    .unwrap();
    w.set_deferred(true);
    let mut r = w.ring().reader(Start::Oldest).unwrap();
    assert_eq!(r.arm(false).unwrap(), beltway::Armed::Asleep);
    assert_eq!(w.wake_owed(), None, "nothing committed, nothing owed");
    w.append_record(&tag(0).to_bytes()).unwrap();
    w.commit();
    let fd = r.wake_fd().expect("the ring has a wake-up");
    assert!(!readable_now(fd), "woken for 1 tag of a threshold of 8");
    assert!(
        w.wake_owed().is_some(),
        "a wake-up is owed for the tag committed"
    );
    while let Some(left) = w.wake_if_due() {
        assert!(
            !readable_now(r.wake_fd().unwrap()),
            "woken before the bound ran out"
        );
        std::thread::sleep(left);
    }
    assert!(
        readable_now(r.wake_fd().unwrap()),
        "not woken once the bound ran out"
    );
    assert_eq!(w.wake_owed(), None);
    r.disarm();
    assert_eq!(r.readable(), 16);
}
