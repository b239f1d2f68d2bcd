//! A minimal single-producer single-consumer byte ring for two threads of one process: the
//! upper bound for copy throughput (no system calls, no process boundary, no features).
//!
//! A power-of-two buffer with free-running `head` (bytes written) and `tail` (bytes read)
//! counters. The producer copies into `[head, tail + size)` and publishes with a Release
//! store of `head`; the consumer copies out of `[tail, head)` and frees with a Release store
//! of `tail`. Each side caches the other's counter and reloads it (Acquire) only when it
//! seems to be out of room or data. Waiting spins briefly, then yields.
//!
//! Apart from two plain system calls in [`crate::proc`], this is the only `unsafe` code in
//! the crate: the shared buffer.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::Arc;

/// Keeps the two counters on separate cache lines.
#[repr(align(128))]
struct Padded<T>(T);

struct Ring {
    buf: Box<[UnsafeCell<u8>]>,
    mask: usize,
    head: Padded<AtomicUsize>,
    tail: Padded<AtomicUsize>,
}

// SAFETY: the buffer is only accessed through `Producer` and `Consumer`, of which exactly
// one each exists (neither is Clone). They touch disjoint byte ranges, handed over with
// Release/Acquire on `head` and `tail` (see the module docs).
unsafe impl Sync for Ring {}

impl Ring {
    fn base(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.buf.as_ptr())
    }
}

/// Create a ring of `size` bytes (a power of two). The buffer is written once here, so its
/// pages are faulted in before any timing.
pub fn channel(size: usize) -> (Producer, Consumer) {
    assert!(
        size.is_power_of_two(),
        "ring size {size} is not a power of two"
    );
    let buf: Box<[UnsafeCell<u8>]> = (0..size).map(|_| UnsafeCell::new(0xA5)).collect();
    let ring = Arc::new(Ring {
        buf,
        mask: size - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (
        Producer {
            ring: ring.clone(),
            head: 0,
            tail: 0,
        },
        Consumer {
            ring,
            tail: 0,
            head: 0,
        },
    )
}

pub struct Producer {
    ring: Arc<Ring>,
    head: usize,
    /// Last seen consumer counter.
    tail: usize,
}

impl Producer {
    /// Copy all of `data` into the ring, waiting for room as needed.
    pub fn write_all(&mut self, mut data: &[u8]) {
        let size = self.ring.mask + 1;
        while !data.is_empty() {
            let mut free = size - (self.head - self.tail);
            if free == 0 {
                wait(|| {
                    self.tail = self.ring.tail.0.load(Acquire);
                    self.head - self.tail < size
                });
                free = size - (self.head - self.tail);
            }
            let n = free.min(data.len());
            let off = self.head & self.ring.mask;
            let first = n.min(size - off);
            // SAFETY: bytes [head, head + n) lie in [head, tail + size): the consumer has
            // released them (Acquire load of tail above) and will not read them before our
            // Release store of head below. `first` and `n - first` stay inside the buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.ring.base().add(off), first);
                std::ptr::copy_nonoverlapping(
                    data.as_ptr().add(first),
                    self.ring.base(),
                    n - first,
                );
            }
            self.head += n;
            self.ring.head.0.store(self.head, Release);
            data = &data[n..];
        }
    }
}

pub struct Consumer {
    ring: Arc<Ring>,
    tail: usize,
    /// Last seen producer counter.
    head: usize,
}

impl Consumer {
    /// Fill all of `out` from the ring, waiting for data as needed.
    pub fn read_exact(&mut self, mut out: &mut [u8]) {
        let size = self.ring.mask + 1;
        while !out.is_empty() {
            let mut avail = self.head - self.tail;
            if avail == 0 {
                wait(|| {
                    self.head = self.ring.head.0.load(Acquire);
                    self.head != self.tail
                });
                avail = self.head - self.tail;
            }
            let n = avail.min(out.len());
            let off = self.tail & self.ring.mask;
            let first = n.min(size - off);
            // SAFETY: bytes [tail, tail + n) lie below head, published by the producer's
            // Release store (Acquire load above); the producer will not overwrite them before
            // our Release store of tail below. Both copies stay inside their buffers.
            unsafe {
                std::ptr::copy_nonoverlapping(self.ring.base().add(off), out.as_mut_ptr(), first);
                std::ptr::copy_nonoverlapping(
                    self.ring.base(),
                    out.as_mut_ptr().add(first),
                    n - first,
                );
            }
            self.tail += n;
            self.ring.tail.0.store(self.tail, Release);
            out = &mut out[n..];
        }
    }
}

/// Spin a little, then yield, until `ready`.
fn wait(mut ready: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !ready() {
        if spins < 200 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_a_stream_intact_across_wraps() {
        let (mut p, mut c) = channel(4096);
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let expect = data.clone();
        let t = std::thread::spawn(move || {
            for chunk in data.chunks(1000) {
                p.write_all(chunk);
            }
        });
        let mut got = vec![0u8; expect.len()];
        for chunk in got.chunks_mut(777) {
            c.read_exact(chunk);
        }
        t.join().unwrap();
        assert!(got == expect);
    }
}
