//! pcapin's indexer for pcap files (pcapng keeps the sequential walk): the record walk in
//! lanes, so the CPU waits for several record headers at once instead of one after another.
//!
//! Finding a capture's records is a chain of dependent loads (each header gives the next
//! one's place). Walked alone, each step waits for memory, or the whole file is streamed
//! through the cache ahead of the walk. Here each round splits the next [`LANES`] x
//! [`LANE_BYTES`] of the file into lanes: the first starts where the walk is; each other
//! one at a guess, the first byte past its lane's start where a plausible record header
//! begins and [`CHAIN`] records follow. The lanes are walked in turn, one record each,
//! prefetching each lane's next header, so their loads overlap. A guess is only a guess:
//! a lane's records are sent only if it started exactly where the walk before it ended
//! (the true chain, from the file header on); otherwise that stretch is walked again from
//! there, one record after another. So the records sent are always libpcap's, in file
//! order, whatever the guesses were, and a record libpcap refuses ends the input at the
//! same byte as the sequential walk.

use super::{Msg, Rec, Shared};
use crate::savefile::Savefile;
use dataplane::FileMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender};

/// Lanes walked at once (how many header loads overlap).
const LANES: usize = 8;
/// Bytes of the file per lane and round (a record is at most 256 KiB).
const LANE_BYTES: usize = 1 << 20;
/// Records that must follow a guessed start (or the file end) before a lane starts there.
const CHAIN: usize = 4;
/// A guessed header's times lie within this many seconds of each other.
const GUESS_SPAN_SECS: i64 = 86_400;

/// One lane of a round.
struct Lane {
    sf: Savefile,
    /// Where the lane started.
    start: usize,
    /// The lane stops at the first record at or past this byte.
    end: usize,
    recs: Vec<Rec>,
    /// The walk stopped at a record libpcap refuses (a wrong guess, or a real problem the
    /// walk from the true place finds again).
    failed: bool,
    live: bool,
}

/// A vector for records: one the reader gave back, or a new one.
fn fresh(back: &Receiver<Vec<Rec>>) -> Vec<Rec> {
    back.try_recv()
        .map(|mut v| {
            v.clear();
            v
        })
        .unwrap_or_default()
}

/// The first byte in `from..to` where a record plausibly starts: its lengths fit libpcap's
/// limits, its fraction of a second is one, and `sf` reads [`CHAIN`] records from there
/// with times close together (or reaches the end of the file).
fn guess(file: &[u8], sf: &Savefile, from: usize, to: usize) -> Option<usize> {
    let sw = sf.swapped();
    let max = crate::savefile::max_snaplen_for_dlt(sf.dlt()).max(sf.snapshot());
    let word = |x: usize| {
        let v = u32::from_ne_bytes(file.get(x..x + 4)?.try_into().ok()?);
        Some(if sw { v.swap_bytes() } else { v })
    };
    (from..to).find(|&x| {
        let (Some(frac), Some(cap), Some(len)) = (word(x + 4), word(x + 8), word(x + 12)) else {
            return false;
        };
        cap != 0
            && cap <= max
            && len >= cap
            && len <= 1 << 24
            && frac < 1_000_000_000
            && chains(file, sf, x)
    })
}

/// `sf` reads [`CHAIN`] records from `at` (or up to the file's end), times close together.
fn chains(file: &[u8], sf: &Savefile, at: usize) -> bool {
    let mut s = sf.clone();
    s.seek(at);
    let mut first = None;
    for _ in 0..CHAIN {
        match s.next(file) {
            Ok(Some(r)) => {
                let t0 = *first.get_or_insert(r.ts_sec);
                if r.orig_len < r.caplen || (r.ts_sec - t0).abs() > GUESS_SPAN_SECS {
                    return false;
                }
            }
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
    true
}

/// The indexer thread for a pcap file: rounds of lanes, their records sent in file order.
pub(super) fn index(
    map: &FileMap,
    mut sf: Savefile,
    shared: &Shared,
    tx: &SyncSender<Msg>,
    back: &Receiver<Vec<Rec>>,
) {
    let file = map.bytes();
    let mut lanes: Vec<Option<Lane>> = Vec::with_capacity(LANES);
    loop {
        let start = sf.offset();
        if start >= file.len() {
            return;
        }
        // Page tables ahead of the whole round (the reader helps while it waits).
        let round_end = start + LANES * LANE_BYTES;
        while shared.populate_step(map, round_end + LANE_BYTES) {}
        lanes.clear();
        for i in 0..LANES {
            let (from, end) = (start + i * LANE_BYTES, start + (i + 1) * LANE_BYTES);
            if from >= file.len() {
                break;
            }
            let at = if i == 0 {
                Some(start)
            } else {
                guess(file, &sf, from, end.min(file.len()))
            };
            lanes.push(at.map(|at| {
                let mut s = sf.clone();
                s.seek(at);
                Lane {
                    sf: s,
                    start: at,
                    end,
                    recs: fresh(back),
                    failed: false,
                    live: true,
                }
            }));
        }
        walk(file, map, &mut lanes);
        // Keep what continues the true chain; walk the rest again from the true place.
        let mut at = start;
        for (i, slot) in lanes.iter_mut().enumerate() {
            let end = start + (i + 1) * LANE_BYTES;
            let recs = match slot.take() {
                Some(l) if l.start == at && !l.failed => {
                    at = l.sf.offset();
                    l.recs
                }
                other => {
                    let mut v = other.map(|l| l.recs).unwrap_or_else(|| fresh(back));
                    v.clear();
                    let mut s = sf.clone();
                    s.seek(at);
                    let problem = walk_from(file, map, &mut s, end, &mut v);
                    at = s.offset();
                    if let Some(p) = problem {
                        if !v.is_empty() && tx.send(Msg::Recs(v)).is_err() {
                            return;
                        }
                        let _ = tx.send(Msg::Problem(p));
                        return;
                    }
                    v
                }
            };
            // Release pairs with the reader's Acquire load of `walk` in `next_chunk`.
            shared.walk.store(at, Ordering::Release);
            if !recs.is_empty() && tx.send(Msg::Recs(recs)).is_err() {
                return; // the reader is gone
            }
        }
        sf.seek(at);
    }
}

/// Walk the lanes in turn, one record each, prefetching each one's next header.
fn walk(file: &[u8], map: &FileMap, lanes: &mut [Option<Lane>]) {
    let mut live = true;
    while live {
        live = false;
        for l in lanes.iter_mut().flatten().filter(|l| l.live) {
            match l.sf.next(file) {
                Ok(Some(r)) => {
                    l.recs.push(Rec::of(&r));
                    let o = l.sf.offset();
                    if o >= l.end {
                        l.live = false;
                    } else {
                        map.prefetch(o, o + 16);
                        live = true;
                    }
                }
                Ok(None) => l.live = false,
                Err(_) => (l.live, l.failed) = (false, true),
            }
        }
    }
}

/// The sequential walk from `s`'s place to the first record at or past `end` (or the
/// file's end), streaming the bytes ahead into the cache; the problem that stopped it, if
/// libpcap refuses a record.
fn walk_from(
    file: &[u8],
    map: &FileMap,
    s: &mut Savefile,
    end: usize,
    v: &mut Vec<Rec>,
) -> Option<String> {
    let mut ahead = s.offset();
    while s.offset() < end {
        let o = s.offset();
        if ahead < o + super::PREFETCH {
            ahead = ahead.max(o);
            map.prefetch(ahead, o + 2 * super::PREFETCH);
            ahead = o + 2 * super::PREFETCH;
        }
        match s.next(file) {
            Ok(Some(r)) => v.push(Rec::of(&r)),
            Ok(None) => break,
            Err(e) => return Some(e.to_string()),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// `len` bytes of fake record headers: 20-byte records chained 36 bytes apart, the last
    /// one ending where the bytes end. A lane that starts among them finds a plausible
    /// chain, guesses wrong, and its walk joins the true chain at the next real record
    /// (so nothing but the check of its start tells it from a right guess).
    fn fake_headers(len: usize) -> Vec<u8> {
        let mut p = Vec::with_capacity(len);
        let header = |p: &mut Vec<u8>, cap: u32| {
            for w in [1_700_000_000u32, 0, cap, cap] {
                p.extend_from_slice(&w.to_le_bytes());
            }
            p.resize(p.len() + cap as usize, 0);
        };
        while p.len() + 36 + 16 <= len {
            header(&mut p, 20);
        }
        let last = (len - p.len() - 16) as u32;
        header(&mut p, last);
        p
    }

    /// A pcap file (microseconds, Ethernet) of `n` records with lengths from a seeded
    /// generator; half the payloads are [`fake_headers`], half bytes no header starts in.
    fn capture(n: usize) -> Vec<u8> {
        let mut f = Vec::new();
        for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 262_144, 1] {
            f.extend_from_slice(&w.to_le_bytes());
        }
        let mut x = 0x2545_f491u64;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let cap = [60u32, 66, 590, 1242, 1514, 8000][(x % 6) as usize];
            let orig = cap + (x >> 40) as u32 % 2;
            for w in [
                1_700_000_000 + i as u32 / 1000,
                (i as u32 % 1000) * 1000,
                cap,
                orig,
            ] {
                f.extend_from_slice(&w.to_le_bytes());
            }
            if (x >> 30) & 1 == 0 {
                // Bytes no header starts in: a lane starting here guesses the next record.
                f.extend(std::iter::repeat(0xff).take(cap as usize));
            } else {
                f.extend(fake_headers(cap as usize));
            }
        }
        f
    }

    type Walk = fn(&FileMap, Savefile, &Shared, &SyncSender<Msg>, &Receiver<Vec<Rec>>);

    /// What `walk` sends for the file: (position, length, time, wire length) of each
    /// record in order, and the problem that ended the input.
    fn sent(path: &std::path::Path, walk: Walk) -> (Vec<(u64, u32, u64, u32)>, Option<String>) {
        let map = FileMap::open(path).unwrap();
        let sf = Savefile::open(map.bytes()).unwrap();
        let shared = Arc::new(Shared::default());
        shared.edge.store(0, Ordering::Release);
        shared.walk.store(sf.offset(), Ordering::Release);
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        let (_keep, back) = std::sync::mpsc::channel();
        let m = map.clone();
        let t = std::thread::spawn(move || walk(&m, sf, &shared, &tx, &back));
        let (mut recs, mut problem) = (Vec::new(), None);
        for msg in rx {
            match msg {
                Msg::Recs(v) => {
                    assert!(!v.is_empty(), "an empty chunk was sent");
                    recs.extend(
                        v.iter()
                            .map(|r| (r.meta.pos, r.len, r.meta.ts_ns, r.meta.orig_len)),
                    );
                }
                Msg::Problem(p) => problem = Some(p),
            }
        }
        t.join().unwrap();
        (recs, problem)
    }

    fn same_as_sequential(bytes: &[u8], name: &str) {
        let path =
            std::env::temp_dir().join(format!("pcapin-lanes-{}-{name}.pcap", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let seq = sent(&path, super::super::index);
        let lanes = sent(&path, index);
        std::fs::remove_file(&path).unwrap();
        assert!(
            seq.0.len() > 1000,
            "the capture holds {} records",
            seq.0.len()
        );
        assert_eq!(lanes.0.len(), seq.0.len(), "records found");
        assert!(
            lanes.0 == seq.0,
            "the lanes' records differ from the sequential walk's"
        );
        assert_eq!(lanes.1, seq.1, "the problem that ended the input");
    }

    #[test]
    fn lanes_send_the_sequential_walks_records_despite_fake_headers() {
        // About 3 rounds of 8 lanes.
        let f = capture(12_000);
        assert!(f.len() > 2 * LANES * LANE_BYTES, "{} bytes", f.len());
        same_as_sequential(&f, "whole");
    }

    #[test]
    fn lanes_stop_at_the_same_refused_record() {
        let mut f = capture(12_000);
        // Cut the file in the middle of a record of the second round.
        f.truncate(LANES * LANE_BYTES + 3 * LANE_BYTES + 123);
        same_as_sequential(&f, "cut");
    }
}
