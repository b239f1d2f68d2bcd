//! Harnesses shared by the cargo-fuzz targets (crates/platform/beltway/fuzz) and the regression
//! tests that replay their findings. Not part of the API.

use crate::ibuf::{BufTable, Tag};
use crate::layout::{RingHeader, DATA_OFFSET};
use crate::ring::{Layout, RingConfig, Start, SyncMode, Writer};
use crate::shm::Segment;
use std::sync::atomic::Ordering::Relaxed;

/// Build a ring, write some records, let `data` scribble over its shared memory from a
/// second mapping, then read everything a reader will give without blocking. Panics only
/// if the reader misbehaves (returns data it claims valid that is out of bounds, panics).
pub fn run_hostile_ring(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let size = 1 << 14;
    let layout =
        [Layout::Bytes, Layout::Records, Layout::Slots, Layout::Tags][data[0] as usize % 4];
    let sync = [SyncMode::Srp, SyncMode::Frp, SyncMode::Mrp][data[1] as usize % 3];
    let mut cfg = RingConfig::bytes(size).layout(layout).sync(sync);
    if layout == Layout::Slots {
        cfg.slot_size = 512;
    }
    if data[1] & 0x80 != 0 && layout != Layout::Slots && layout != Layout::Tags {
        cfg = cfg.self_scaling(4096, size);
        cfg.scaling_window = 0;
        cfg.calm_laps = 1;
    }
    // Setting up is not under test: every configuration above is valid, so a failure here
    // is the environment's (or a bug), and says so instead of passing the input unread.
    let mut w = Writer::create("fuzz", cfg.clone())
        .unwrap_or_else(|e| panic!("setup: creating a ring {cfg:?}: {e}"));
    let mut r = w
        .ring()
        .reader(Start::Oldest)
        .unwrap_or_else(|e| panic!("setup: a reader of a fresh ring {cfg:?}: {e}"));
    let n = data[2] as usize % 48;
    let rec = [0x5Au8; 700];
    // At most half the ring: a lossless writer must not block on our own idle reader.
    let mut total = 0;
    for i in 0..n {
        let len = (i * 37) % w.max_record().min(700) + 1;
        total += len + 512;
        if total > size / 2 || w.write(&rec[..len]).is_err() {
            break;
        }
    }
    // Closed, so no read can block: after the scribbles a reader ends in data, an error or
    // EOF.
    w.close();
    let fd = w.shared().fds()[0].try_clone_to_owned().expect("dup");
    let evil = Segment::from_fd(fd).expect("second mapping");
    let h = evil.get::<RingHeader>(0);
    for chunk in data[3..].chunks(11) {
        if chunk.len() < 11 {
            break;
        }
        let off = u16::from_le_bytes([chunk[1], chunk[2]]) as usize;
        let val = u64::from_le_bytes(chunk[3..11].try_into().unwrap());
        match chunk[0] % 8 {
            0..=3 => evil.write_at(DATA_OFFSET + (off % size).min(size - 8), &val.to_le_bytes()),
            4 => h.p.0.write_pos.store(val % (4 * size as u64), Relaxed),
            5 => h.t.0.tail.store(val % (4 * size as u64), Relaxed),
            6 => {
                let e = &h.epochs.0.entries[off % crate::layout::EPOCHS];
                e[off / 4 % 2].store(val, Relaxed);
                h.p.0.epoch_gen.fetch_add(1, Relaxed);
            }
            _ => h.epochs.0.count.store(val % 8, Relaxed),
        }
    }
    let mut buf = vec![0u8; 2048];
    for i in 0..256 {
        let res = if i % 2 == 0 {
            match r.try_peek_acquire(2048) {
                Ok(Some(p)) => {
                    let _ = p.data.len();
                    let _ = r.peek_complete();
                    Ok(1)
                }
                Ok(None) => Ok(0),
                Err(e) => Err(e),
            }
        } else {
            r.read(&mut buf)
        };
        if let Err(e) = res {
            // Any typed error is acceptable; it must render.
            let _ = e.to_string();
        }
    }
    // Arbitrary tags against the (scribbled) ring: resolve must refuse what is not valid.
    let mut table = BufTable::new();
    table
        .register(&w.ring())
        .unwrap_or_else(|e| panic!("setup: registering the ring's buffer: {e}"));
    for chunk in data.chunks(16) {
        if let Some(t) = Tag::from_bytes(chunk) {
            let t = Tag {
                buf: w.shared().buf_id(),
                ..t
            };
            if let Ok(bytes) = table.resolve(&t) {
                assert_eq!(bytes.len(), t.len as usize);
            }
        }
    }
}
