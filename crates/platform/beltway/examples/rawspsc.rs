//! Reference point: the simplest possible SPSC byte ring (two indices, spin waiting, no
//! blocking, no moderation, no checks) over the same memfd shared memory a beltway ring
//! uses, two threads, 1 KiB blocks through 1 MiB. Compare with `copyloop 1024 1048576`:
//! the difference is what beltway's protocol costs.

use beltway::shm::Segment;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let block = 1024usize;
    let size = 1usize << 20;
    let total = 4usize << 30;
    let seg = Arc::new(Segment::create_memfd("raw", 4096 + size).unwrap());
    #[repr(align(128))]
    struct Pad(AtomicU64);
    let head = Arc::new(Pad(AtomicU64::new(0)));
    let tail = Arc::new(Pad(AtomicU64::new(0)));
    let (s2, h2, t2) = (seg.clone(), head.clone(), tail.clone());
    let t = std::thread::spawn(move || {
        beltway::sys::pin_to_cpu(1).ok();
        let mut buf = vec![0u8; block];
        let (mut pos, mut h) = (0u64, 0u64);
        while pos < total as u64 {
            while h == pos {
                h = h2.0.load(Acquire);
                std::hint::spin_loop();
            }
            let off = (pos as usize) & (size - 1);
            buf.copy_from_slice(s2.bytes(4096 + off, block));
            pos += block as u64;
            t2.0.store(pos, Release);
        }
    });
    beltway::sys::pin_to_cpu(0).ok();
    let data = vec![7u8; block];
    let start = Instant::now();
    let (mut pos, mut tl) = (0u64, 0u64);
    while pos < total as u64 {
        while pos + block as u64 - tl > size as u64 {
            tl = tail.0.load(Acquire);
            std::hint::spin_loop();
        }
        let off = (pos as usize) & (size - 1);
        seg.write_at(4096 + off, &data);
        pos += block as u64;
        head.0.store(pos, Release);
    }
    t.join().unwrap();
    println!(
        "{} MB/s",
        (total as f64 / start.elapsed().as_secs_f64() / 1e6) as u64
    );
}
