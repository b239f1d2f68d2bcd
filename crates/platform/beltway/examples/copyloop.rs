//! Two threads copying blocks through one ring, for profiling the hot path
//! (`perf record -e cpu-clock -g target/release/examples/copyloop [BLOCK] [RING] [MiB]`).

use beltway::{RingConfig, Start, Writer};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    let block = *args.first().unwrap_or(&1024);
    let ring = *args.get(1).unwrap_or(&(1 << 20));
    let total = args.get(2).unwrap_or(&4096) << 20;
    let mut w = Writer::create("copyloop", RingConfig::bytes(ring)).unwrap();
    let mut r = w.ring().reader(Start::Oldest).unwrap();
    let t = std::thread::spawn(move || {
        beltway::sys::pin_to_cpu(1).ok();
        let mut buf = vec![0u8; block];
        let mut n = 0usize;
        loop {
            let k = r.read(&mut buf).unwrap();
            if k == 0 {
                break n;
            }
            n += k;
        }
    });
    beltway::sys::pin_to_cpu(0).ok();
    let data = vec![7u8; block];
    let start = Instant::now();
    for _ in 0..total / block {
        w.write(&data).unwrap();
    }
    w.close();
    let n = t.join().unwrap();
    let secs = start.elapsed().as_secs_f64();
    let st = w.stats();
    println!(
        "{} MB/s  ({n} bytes, wakeups {}, writer waits {})",
        (n as f64 / secs / 1e6) as u64,
        st.wakeups,
        st.writer_waits
    );
}
