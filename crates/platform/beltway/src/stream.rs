//! The shared byte stream behind a Unix pipe: a ring of bytes in one shared memory segment
//! that any number of processes map (inherited across `fork`, and across `exec` as a
//! descriptor), with any number of writers and readers, as a pipe has.
//!
//! Owns: the segment layout ([`StreamHeader`] + a power-of-two data area), the two
//! cross-process locks (one for writers, one for readers; a lock whose holder died is
//! taken over), copying in and out with wrap-around, the positions (`head`: bytes
//! published, `tail`: bytes consumed; `head - tail` is what a reader may take, `capacity -
//! (head - tail)` what a writer may put), and the futex words and counters the parties
//! sleep and wake on. Does not own what the stream is attached to (a kernel pipe, its
//! doorbell and its end-of-file and broken-pipe rules: crates/legacy/preload).
//!
//! Why locks and not a lock-free ring: a pipe's writers share it (a shell's subshells, a
//! make jobserver), and a write of up to PIPE_BUF bytes must land whole; a pipe's readers
//! each take distinct bytes. The locks are uncontended in the common one-writer, one-reader
//! case (a compare-and-swap each way). Positions are published with Release and read with
//! Acquire, so a reader never copies bytes before they are written, and a writer never
//! overwrites bytes before they are copied out.

use crate::ring::fences;
use crate::shm::{Segment, ShmSafe};
use crate::sys;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// "SLSTRM01"
pub const MAGIC: u64 = 0x534c_5354_524d_3031;
/// Where the data area starts.
pub const DATA_OFFSET: usize = 4096;
/// Contended bit of a lock word (the rest is the holder's pid).
const CONTENDED: u32 = 0x8000_0000;

/// The metadata at the start of the segment. Writer and reader fields sit on separate
/// cache lines.
#[repr(C, align(64))]
pub struct StreamHeader {
    pub magic: AtomicU64,
    pub capacity: AtomicU64,
    /// Identity of what the stream belongs to (the kernel pipe's inode number).
    pub ident: AtomicU64,
    /// A second identity for its owner (the preload library: its doorbell pipe's inode).
    pub ident2: AtomicU64,
    /// Free for the owner of the stream (the preload library keeps its mode here).
    pub mode: AtomicU32,
    _pad0: [u8; 28],
    // -- writer side (written by the writer on every publish; the readers' sleep flags
    //    live here because the writer reads them on every publish)
    pub head: AtomicU64,
    /// Threads waiting for data that asked to be woken through the doorbell.
    pub pollers: AtomicU32,
    /// 1 while a doorbell is pending (rung and not yet drained).
    pub bell: AtomicU32,
    _pad1: [u8; 48],
    // -- the writers' lock, on a line of its own (a reader reading `head` does not steal it)
    pub wlock: AtomicU32,
    _pad2: [u8; 60],
    // -- reader side (written by readers on every consume; the writers' sleep flags live
    //    here because readers read them on every consume)
    pub tail: AtomicU64,
    /// Bumped by readers after they free space while writers wait (a futex word).
    pub rseq: AtomicU32,
    /// Bumped when the last reader of some process leaves (writers re-check broken pipe).
    pub readers_left: AtomicU32,
    /// Writers sleeping on `rseq` for space.
    pub writers_waiting: AtomicU32,
    /// How much free space the sleeping writers wait for (readers wake them only then).
    pub space_wanted: AtomicU32,
    _pad3: [u8; 40],
    // -- the readers' lock, on a line of its own
    pub rlock: AtomicU32,
    _pad4: [u8; 60],
}

// SAFETY: repr(C), only atomics and padding bytes, valid when all-zero.
#[allow(unsafe_code)]
unsafe impl ShmSafe for StreamHeader {}

/// One mapping of a stream.
///
/// It keeps, for this process, the last tail its writers saw and the last head its
/// readers saw: a writer re-reads the readers' cache line only when the space it knows of
/// is not enough, a reader re-reads the writers' only when the bytes it knows of are used
/// up, so in a stream the two sides do not trade cache lines on every call. (Both are
/// lower bounds of the real positions, so what they allow is always allowed.)
#[derive(Debug)]
pub struct Stream {
    seg: Segment,
    cap: u64,
    tail_seen: AtomicU64,
    head_seen: AtomicU64,
}

/// Why a segment is not a stream.
fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Stream {
    /// Create a stream of `capacity` bytes (rounded up to a power of two, at least a page)
    /// in a fresh memfd called `name`.
    pub fn create(name: &str, capacity: usize, ident: u64) -> io::Result<Stream> {
        let cap = capacity.max(4096).next_power_of_two();
        fences::init();
        let seg = Segment::create_memfd(name, DATA_OFFSET + cap)?;
        let h: &StreamHeader = seg.get(0);
        h.capacity.store(cap as u64, Ordering::Relaxed);
        h.ident.store(ident, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(Stream {
            seg,
            cap: cap as u64,
            tail_seen: AtomicU64::new(0),
            head_seen: AtomicU64::new(0),
        })
    }

    /// Map a stream from its descriptor, checking that it is one.
    pub fn open(fd: OwnedFd) -> io::Result<Stream> {
        fences::init();
        let seg = Segment::from_fd(fd)?;
        if seg.len() < DATA_OFFSET + 4096 || !seg.writable() {
            return Err(invalid(format!(
                "stream segment of {} bytes (writable: {}) is too small or read-only",
                seg.len(),
                seg.writable()
            )));
        }
        let h: &StreamHeader = seg.get(0);
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(invalid("not a stream segment (bad magic)".into()));
        }
        let cap = h.capacity.load(Ordering::Relaxed);
        if !cap.is_power_of_two() || DATA_OFFSET as u64 + cap != seg.len() as u64 {
            return Err(invalid(format!(
                "stream capacity {cap} does not match its segment of {} bytes",
                seg.len()
            )));
        }
        let h: &StreamHeader = seg.get(0);
        let (t, hd) = (
            h.tail.load(Ordering::Acquire),
            h.head.load(Ordering::Acquire),
        );
        Ok(Stream {
            seg,
            cap,
            tail_seen: AtomicU64::new(t),
            head_seen: AtomicU64::new(hd),
        })
    }

    pub fn header(&self) -> &StreamHeader {
        self.seg.get(0)
    }
    pub fn capacity(&self) -> usize {
        self.cap as usize
    }
    pub fn segment(&self) -> &Segment {
        &self.seg
    }

    /// Bytes a reader could take now.
    pub fn available(&self) -> usize {
        let h = self.header();
        // SYNC POINT: Acquire on head pairs with the Release in `put_min`.
        let head = h.head.load(Ordering::Acquire);
        (head - h.tail.load(Ordering::Acquire).min(head)) as usize
    }

    /// Bytes a writer could put now.
    pub fn space(&self) -> usize {
        self.capacity() - self.available()
    }

    /// Take the writers' lock.
    pub fn lock_write(&self) -> Guard<'_> {
        self.lock_write_as(sys::getpid())
    }

    /// Take the readers' lock.
    pub fn lock_read(&self) -> Guard<'_> {
        self.lock_read_as(sys::getpid())
    }

    /// Take the writers' lock as process `me` (a caller that knows its pid saves the
    /// system call; the pid only serves to take the lock over if its holder dies).
    pub fn lock_write_as(&self, me: u32) -> Guard<'_> {
        lock(&self.header().wlock, me);
        Guard {
            word: &self.header().wlock,
        }
    }

    /// Take the readers' lock as process `me`.
    pub fn lock_read_as(&self, me: u32) -> Guard<'_> {
        lock(&self.header().rlock, me);
        Guard {
            word: &self.header().rlock,
        }
    }

    /// Append up to `data.len()` bytes (what fits), publish them, return how many.
    /// The caller holds the writers' lock.
    pub fn put(&self, w: &Guard<'_>, data: &[u8]) -> usize {
        self.put_min(w, data, 1)
    }

    /// Append up to `data.len()` bytes if at least `min` of them fit (all of them if
    /// fewer), else nothing; publish; return how many. The caller holds the writers' lock.
    pub fn put_min(&self, _w: &Guard<'_>, data: &[u8], min: usize) -> usize {
        if data.is_empty() {
            return 0;
        }
        let min = min.clamp(1, data.len()) as u64;
        let h = self.header();
        let head = h.head.load(Ordering::Relaxed);
        let mut tail = self.tail_seen.load(Ordering::Relaxed);
        // (Another process's writers may have moved head past what our stale tail allows.)
        if head.saturating_sub(tail) > self.cap || self.cap - (head - tail) < data.len() as u64 {
            // SYNC POINT: Acquire on tail pairs with the Release in `consume`: the bytes
            // below it have been copied out and may be overwritten.
            tail = h.tail.load(Ordering::Acquire);
            self.tail_seen.store(tail, Ordering::Relaxed);
            if self.cap - (head - tail) < min {
                return 0;
            }
        }
        let n = data.len().min((self.cap - (head - tail)) as usize);
        let off = (head % self.cap) as usize;
        let first = n.min(self.cap as usize - off);
        self.seg.write_at(DATA_OFFSET + off, &data[..first]);
        if first < n {
            self.seg.write_at(DATA_OFFSET, &data[first..n]);
        }
        // SYNC POINT: Release publishes the bytes to readers (Acquire in `peek`/`available`);
        // the fast half of the asymmetric fence orders it before the caller's load of
        // `pollers` (slow half: `sleeper_fence`).
        fences::publish(&h.head, head + n as u64);
        n
    }

    /// Copy out up to `buf.len()` bytes (what is there), consume them, return how many.
    /// The caller holds the readers' lock.
    pub fn take(&self, _r: &Guard<'_>, buf: &mut [u8]) -> usize {
        let n = self.peek(buf);
        if n > 0 {
            self.consume(n);
        }
        n
    }

    /// Copy out up to `buf.len()` bytes without consuming them.
    pub fn peek(&self, buf: &mut [u8]) -> usize {
        let h = self.header();
        let tail = h.tail.load(Ordering::Relaxed);
        let mut head = self.head_seen.load(Ordering::Relaxed);
        if head < tail + buf.len() as u64 {
            // SYNC POINT: Acquire on head pairs with the Release in `put_min`.
            head = h.head.load(Ordering::Acquire);
            self.head_seen.store(head, Ordering::Relaxed);
        }
        let n = buf.len().min((head - tail) as usize);
        let off = (tail % self.cap) as usize;
        let first = n.min(self.cap as usize - off);
        buf[..first].copy_from_slice(self.seg.bytes(DATA_OFFSET + off, first));
        if first < n {
            buf[first..n].copy_from_slice(self.seg.bytes(DATA_OFFSET, n - first));
        }
        n
    }

    /// Consume `n` bytes a reader copied out (at most what is available), and wake writers
    /// that wait for space.
    pub fn consume(&self, n: usize) {
        let h = self.header();
        let tail = h.tail.load(Ordering::Relaxed);
        // SYNC POINT: Release orders our copies before the space is handed back (Acquire
        // on tail in `put_min`); the fast half of the asymmetric fence orders it before our
        // load of writers_waiting, against the writer's increment of writers_waiting, slow
        // half, and re-check of space in `wait_space` (a Dekker handshake: either the
        // writer sees the new tail, or we see it waiting).
        fences::publish(&h.tail, tail + n as u64);
        if h.writers_waiting.load(Ordering::SeqCst) > 0
            && self.space() >= h.space_wanted.load(Ordering::Relaxed) as usize
        {
            self.wake_writers();
        }
    }

    /// The slow half of the sleep handshake: a party that announced it will sleep (raised
    /// `pollers`) calls this before it re-checks the stream, so that a publisher that did
    /// not see it will be seen by it.
    pub fn sleeper_fence(&self) {
        fences::heavy();
    }

    /// Wake every writer sleeping for space (or for a change of mode).
    pub fn wake_writers(&self) {
        let h = self.header();
        h.rseq.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&h.rseq, i32::MAX);
    }

    /// Sleep until readers free `want` bytes or `timeout` passes. Returns at once if
    /// they are already free. Spurious returns are allowed. (Readers wake a sleeping
    /// writer only once the space it wants is free: a writer waiting on a full ring is
    /// not woken, and does not run, for every small read.)
    pub fn wait_space(&self, want: usize, timeout: Duration) {
        let h = self.header();
        let seq = h.rseq.load(Ordering::SeqCst);
        h.space_wanted
            .store(want.min(self.capacity()) as u32, Ordering::Relaxed);
        h.writers_waiting.fetch_add(1, Ordering::SeqCst);
        fences::heavy();
        if self.space() < want {
            sys::futex_wait(&h.rseq, seq, Some(timeout));
        }
        h.writers_waiting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Move everything unread out (for handing the stream's content to someone else):
    /// returns the bytes and empties the stream. The caller holds both locks.
    pub fn drain_all(&self, r: &Guard<'_>) -> Vec<u8> {
        let mut v = vec![0u8; self.available()];
        let n = self.take(r, &mut v);
        v.truncate(n);
        v
    }
}

/// Call in a child process right after `fork` (a `pthread_atfork` child handler) if the
/// parent mapped streams: the sleep handshake's fast side relies on a per-address-space
/// registration that the child must make again.
pub fn after_fork() {
    fences::after_fork();
}

/// A held lock; released on drop.
pub struct Guard<'a> {
    word: &'a AtomicU32,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.word.swap(0, Ordering::Release) & CONTENDED != 0 {
            sys::futex_wake(self.word, 1);
        }
    }
}

/// Is the process that holds a lock word gone? (A lock taken over from a dead holder is
/// consistent: the stream only publishes a position after the bytes are in place.)
fn holder_dead(word: u32) -> bool {
    let pid = (word & !CONTENDED) as i32;
    pid > 0 && sys::process_gone(pid)
}

fn lock(word: &AtomicU32, me: u32) {
    // SYNC POINT: Acquire on taking the lock pairs with the Release of the previous holder.
    if word
        .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return;
    }
    let mut spins = 0;
    loop {
        let v = word.load(Ordering::Relaxed);
        if v == 0 {
            if word
                .compare_exchange(0, me | CONTENDED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            continue;
        }
        if spins < 64 {
            spins += 1;
            std::hint::spin_loop();
            continue;
        }
        if holder_dead(v) {
            if word
                .compare_exchange(v, me | CONTENDED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            continue;
        }
        if v & CONTENDED == 0
            && word
                .compare_exchange(v, v | CONTENDED, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        // Bounded: a holder killed while holding it is noticed on the next round.
        sys::futex_wait(word, v | CONTENDED, Some(Duration::from_millis(50)));
    }
}

const _: () = assert!(std::mem::size_of::<StreamHeader>() == 320);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn create_open_roundtrip() {
        let s = Stream::create("t", 5000, 42).unwrap();
        assert_eq!(s.capacity(), 8192);
        let fd = s.segment().fd().try_clone_to_owned().unwrap();
        let t = Stream::open(fd).unwrap();
        assert_eq!(t.header().ident.load(Ordering::Relaxed), 42);
        let w = s.lock_write();
        assert_eq!(s.put(&w, b"hello"), 5);
        drop(w);
        let r = t.lock_read();
        let mut buf = [0u8; 16];
        assert_eq!(t.take(&r, &mut buf), 5);
        assert_eq!(&buf[..5], b"hello");
        assert_eq!(t.available(), 0);
    }

    #[test]
    fn refuses_a_segment_that_is_not_a_stream() {
        let seg = Segment::create_memfd("x", DATA_OFFSET + 4096).unwrap();
        let err = Stream::open(seg.fd().try_clone_to_owned().unwrap()).unwrap_err();
        assert!(err.to_string().contains("bad magic"), "{err}");
    }

    #[test]
    fn dead_holder_lock_is_taken_over() {
        let s = Stream::create("t", 4096, 1).unwrap();
        // A pid that does not exist holds the lock.
        s.header().wlock.store(0x7fff_fff0, Ordering::Relaxed);
        let g = s.lock_write();
        assert_eq!(
            s.header().wlock.load(Ordering::Relaxed) & !CONTENDED,
            sys::getpid()
        );
        drop(g);
        assert_eq!(s.header().wlock.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn writer_and_reader_threads_move_every_byte_in_order() {
        let s = std::sync::Arc::new(Stream::create("t", 4096, 1).unwrap());
        let total = 1_000_000usize;
        let w = {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut i = 0usize;
                while i < total {
                    let chunk: Vec<u8> = (i..(i + 777).min(total)).map(|x| x as u8).collect();
                    let mut off = 0;
                    while off < chunk.len() {
                        let g = s.lock_write();
                        let n = s.put(&g, &chunk[off..]);
                        drop(g);
                        off += n;
                        if n == 0 {
                            s.wait_space(1, Duration::from_millis(10));
                        }
                    }
                    i += chunk.len();
                }
            })
        };
        let mut got = 0usize;
        let mut buf = vec![0u8; 1000];
        while got < total {
            let g = s.lock_read();
            let n = s.take(&g, &mut buf);
            drop(g);
            for (k, b) in buf[..n].iter().enumerate() {
                assert_eq!(*b, (got + k) as u8, "byte {}", got + k);
            }
            got += n;
            if n == 0 {
                std::thread::yield_now();
            }
        }
        w.join().unwrap();
    }

    proptest! {
        /// Any interleaving of puts and takes of any sizes, through two mappings of the
        /// stream (two processes, each with its own cached positions), behaves like one
        /// bounded FIFO queue.
        #[test]
        fn behaves_like_a_bounded_fifo(ops in proptest::collection::vec((any::<bool>(), 0usize..10000, any::<bool>()), 1..200)) {
            let a = Stream::create("p", 4096, 1).unwrap();
            let b = Stream::open(a.segment().fd().try_clone_to_owned().unwrap()).unwrap();
            let mut model = std::collections::VecDeque::new();
            let mut next = 0u8;
            for (is_put, len, second) in ops {
                let s = if second { &b } else { &a };
                if is_put {
                    let data: Vec<u8> = (0..len).map(|_| { next = next.wrapping_add(1); next }).collect();
                    let g = s.lock_write();
                    let n = s.put(&g, &data);
                    prop_assert_eq!(n, len.min(4096 - model.len()));
                    model.extend(&data[..n]);
                    // What did not fit is not part of the stream.
                    next = next.wrapping_sub((len - n) as u8);
                } else {
                    let mut buf = vec![0u8; len];
                    let g = s.lock_read();
                    let n = s.take(&g, &mut buf);
                    prop_assert_eq!(n, len.min(model.len()));
                    let want: Vec<u8> = model.drain(..n).collect();
                    prop_assert_eq!(&buf[..n], &want[..]);
                }
                prop_assert_eq!(a.available(), model.len());
                prop_assert_eq!(b.space(), 4096 - model.len());
            }
        }
    }
}
