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
///
/// The header is shared with every process that maps the stream, any of which may write
/// anything into it: every size and position read from it is checked against this
/// mapping's own length (`room`) before it addresses a byte, and what no stream could
/// hold is [`Corrupt`], never an access outside the data area.
#[derive(Debug)]
pub struct Stream {
    seg: Segment,
    /// Bytes of data area this process mapped (the capacity may be less, never more).
    room: u64,
    tail_seen: AtomicU64,
    head_seen: AtomicU64,
}

/// The shared header says what no stream could be (written by a broken or hostile
/// process): which field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream header corrupt: {}", self.0)
    }
}

impl std::error::Error for Corrupt {}

/// Why a stream cannot take a new capacity ([`Stream::resize`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeError {
    /// More than this mapping's data area (bytes).
    TooLarge {
        room: usize,
    },
    /// Fewer bytes than are buffered now.
    Busy {
        buffered: usize,
    },
    /// Not a power of two of at least a page.
    Invalid,
    Corrupt(Corrupt),
}

/// Why a segment is not a stream.
fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Smallest capacity (a page).
pub const MIN_CAPACITY: u64 = 4096;
/// Largest capacity a stream is made with from a size given as text ([`parse_capacity`]).
pub const MAX_CAPACITY: u64 = 1 << 30;

/// A stream size given as text that no stream can have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapacityError {
    /// Not a decimal number of bytes (the text as given).
    NotANumber(String),
    /// Outside MIN_CAPACITY..=MAX_CAPACITY.
    OutOfRange(u128),
}

impl std::fmt::Display for CapacityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CapacityError::NotANumber(v) => write!(
                f,
                "{v:?} is not a number of bytes (a stream holds {MIN_CAPACITY} to {MAX_CAPACITY})"
            ),
            CapacityError::OutOfRange(n) => write!(
                f,
                "{n} is out of range: a stream holds {MIN_CAPACITY} to {MAX_CAPACITY} bytes"
            ),
        }
    }
}

impl std::error::Error for CapacityError {}

/// A stream size given as text (a decimal number of bytes; a size between the limits is
/// rounded up to a power of two when the stream is made). The one check of the preload
/// library's `STREAMLINE_PIPE_SIZE`, also made by `streamline exec` before it starts
/// anything.
pub fn parse_capacity(v: &str) -> Result<usize, CapacityError> {
    let n: u128 = v
        .trim()
        .parse()
        .map_err(|_| CapacityError::NotANumber(v.to_string()))?;
    if n < MIN_CAPACITY as u128 || n > MAX_CAPACITY as u128 {
        return Err(CapacityError::OutOfRange(n));
    }
    Ok(n as usize)
}

impl Stream {
    /// Create a stream of `capacity` bytes (rounded up to a power of two, at least a page)
    /// in a fresh memfd called `name`.
    pub fn create(name: &str, capacity: usize, ident: u64) -> io::Result<Stream> {
        Self::create_with_room(name, capacity, capacity, ident)
    }

    /// [`Stream::create`] with a data area of `room` bytes (at least the capacity, rounded
    /// up to a power of two), so that [`Stream::resize`] can grow it that far. The memfd's
    /// pages are only allocated when touched.
    pub fn create_with_room(
        name: &str,
        capacity: usize,
        room: usize,
        ident: u64,
    ) -> io::Result<Stream> {
        let cap = capacity.max(MIN_CAPACITY as usize).next_power_of_two();
        let room = room.max(cap).next_power_of_two();
        fences::init();
        let seg = Segment::create_memfd(name, DATA_OFFSET + room)?;
        let h: &StreamHeader = seg.get(0);
        h.capacity.store(cap as u64, Ordering::Relaxed);
        h.ident.store(ident, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(Stream {
            seg,
            room: room as u64,
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
        let room = (seg.len() - DATA_OFFSET) as u64;
        let cap = h.capacity.load(Ordering::Relaxed);
        if !cap.is_power_of_two() || cap < MIN_CAPACITY || cap > room {
            return Err(invalid(format!(
                "stream capacity {cap} does not fit its segment of {} bytes",
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
            room,
            tail_seen: AtomicU64::new(t),
            head_seen: AtomicU64::new(hd),
        })
    }

    pub fn header(&self) -> &StreamHeader {
        self.seg.get(0)
    }

    /// The capacity now, checked against this mapping (a resize may change it).
    pub fn cap(&self) -> Result<u64, Corrupt> {
        // SYNC POINT: Acquire pairs with the Release in `resize` (which holds both locks,
        // so a holder of either sees a capacity and the bytes placed for it).
        let c = self.header().capacity.load(Ordering::Acquire);
        if c.is_power_of_two() && c >= MIN_CAPACITY && c <= self.room {
            Ok(c)
        } else {
            Err(Corrupt("capacity"))
        }
    }

    /// The capacity now (0 when the header is corrupt).
    pub fn capacity(&self) -> usize {
        self.cap().unwrap_or(0) as usize
    }

    /// The largest capacity this mapping can hold ([`Stream::resize`]).
    pub fn room(&self) -> usize {
        self.room as usize
    }

    pub fn segment(&self) -> &Segment {
        &self.seg
    }

    /// Bytes a reader could take now (a lock-free estimate; at most the capacity).
    pub fn available(&self) -> usize {
        let h = self.header();
        // SYNC POINT: Acquire on head pairs with the Release in `put_min`.
        let head = h.head.load(Ordering::Acquire);
        let used = head - h.tail.load(Ordering::Acquire).min(head);
        used.min(self.capacity() as u64) as usize
    }

    /// Bytes a writer could put now.
    pub fn space(&self) -> usize {
        self.capacity() - self.available()
    }

    /// Copy `data` into the ring at position `pos` (wrapping), `data.len() <= cap`.
    fn store(&self, pos: u64, cap: u64, data: &[u8]) {
        let off = (pos % cap) as usize;
        let first = data.len().min(cap as usize - off);
        self.seg.write_at(DATA_OFFSET + off, &data[..first]);
        if first < data.len() {
            self.seg.write_at(DATA_OFFSET, &data[first..]);
        }
    }

    /// Copy `buf.len() <= cap` bytes out of the ring from position `pos` (wrapping).
    fn load(&self, pos: u64, cap: u64, buf: &mut [u8]) {
        let off = (pos % cap) as usize;
        let n = buf.len();
        let first = n.min(cap as usize - off);
        buf[..first].copy_from_slice(self.seg.bytes(DATA_OFFSET + off, first));
        if first < n {
            buf[first..].copy_from_slice(self.seg.bytes(DATA_OFFSET, n - first));
        }
    }

    /// Take the writers' lock.
    pub fn lock_write(&self) -> Guard<'_> {
        self.lock_write_as(sys::getpid())
    }

    /// Take the readers' lock.
    pub fn lock_read(&self) -> Guard<'_> {
        self.lock_read_as(sys::getpid())
    }

    /// Does process `pid` map this stream? (Asked of a lock's holder that has held it for
    /// long: a word no party of the stream wrote is garbage, and the lock is free.)
    fn party(&self, pid: i32) -> bool {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let me = format!("/proc/self/fd/{}", self.seg.fd().as_raw_fd());
        let Ok(ino) = std::fs::metadata(me).map(|m| m.ino()) else {
            return true;
        };
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            // Gone, or not ours to read: not a party we can see.
            return false;
        };
        maps.lines().any(|l| {
            l.split_whitespace()
                .nth(4)
                .and_then(|i| i.parse::<u64>().ok())
                == Some(ino)
                && l.contains("/memfd:")
        })
    }

    /// Take the writers' lock as process `me` (a caller that knows its pid saves the
    /// system call; the pid only serves to take the lock over if its holder dies).
    pub fn lock_write_as(&self, me: u32) -> Guard<'_> {
        lock(&self.header().wlock, me, &|pid| self.party(pid));
        Guard {
            word: &self.header().wlock,
        }
    }

    /// Take the readers' lock as process `me`.
    pub fn lock_read_as(&self, me: u32) -> Guard<'_> {
        lock(&self.header().rlock, me, &|pid| self.party(pid));
        Guard {
            word: &self.header().rlock,
        }
    }

    /// Append up to `data.len()` bytes (what fits), publish them, return how many.
    /// The caller holds the writers' lock.
    pub fn put(&self, w: &Guard<'_>, data: &[u8]) -> Result<usize, Corrupt> {
        self.put_min(w, data, 1)
    }

    /// Append up to `data.len()` bytes if at least `min` of them fit (all of them if
    /// fewer), else nothing; publish; return how many. The caller holds the writers' lock.
    pub fn put_min(&self, _w: &Guard<'_>, data: &[u8], min: usize) -> Result<usize, Corrupt> {
        if data.is_empty() {
            return Ok(0);
        }
        let cap = self.cap()?;
        let min = min.clamp(1, data.len()) as u64;
        let h = self.header();
        let head = h.head.load(Ordering::Relaxed);
        let used = |tail: u64| head.checked_sub(tail).filter(|&u| u <= cap);
        let mut tail = self.tail_seen.load(Ordering::Relaxed);
        // (Another process's writers may have moved head past what our stale tail allows.)
        let mut free = used(tail).map_or(0, |u| cap - u);
        if free < data.len() as u64 {
            // SYNC POINT: Acquire on tail pairs with the Release in `consume`: the bytes
            // below it have been copied out and may be overwritten.
            tail = h.tail.load(Ordering::Acquire);
            self.tail_seen.store(tail, Ordering::Relaxed);
            free = cap - used(tail).ok_or(Corrupt("positions"))?;
            if free < min {
                return Ok(0);
            }
        }
        let n = data.len().min(free as usize);
        let end = head.checked_add(n as u64).ok_or(Corrupt("head"))?;
        self.store(head, cap, &data[..n]);
        // SYNC POINT: Release publishes the bytes to readers (Acquire in `peek`/`available`);
        // the fast half of the asymmetric fence orders it before the caller's load of
        // `pollers` (slow half: `sleeper_fence`).
        fences::publish(&h.head, end);
        Ok(n)
    }

    /// Copy out up to `buf.len()` bytes (what is there), consume them, return how many.
    /// The caller holds the readers' lock.
    pub fn take(&self, _r: &Guard<'_>, buf: &mut [u8]) -> Result<usize, Corrupt> {
        let n = self.peek(buf)?;
        if n > 0 {
            self.consume(n)?;
        }
        Ok(n)
    }

    /// Copy out up to `buf.len()` bytes without consuming them.
    pub fn peek(&self, buf: &mut [u8]) -> Result<usize, Corrupt> {
        let cap = self.cap()?;
        let h = self.header();
        let tail = h.tail.load(Ordering::Relaxed);
        let mut head = self.head_seen.load(Ordering::Relaxed);
        let used = |head: u64| head.checked_sub(tail).filter(|&u| u <= cap);
        if used(head).is_none_or(|u| u < buf.len() as u64) {
            // SYNC POINT: Acquire on head pairs with the Release in `put_min`.
            head = h.head.load(Ordering::Acquire);
            self.head_seen.store(head, Ordering::Relaxed);
        }
        let n = buf
            .len()
            .min(used(head).ok_or(Corrupt("positions"))? as usize);
        self.load(tail, cap, &mut buf[..n]);
        Ok(n)
    }

    /// Consume `n` bytes a reader copied out (at most what is available), and wake writers
    /// that wait for space.
    pub fn consume(&self, n: usize) -> Result<(), Corrupt> {
        let h = self.header();
        let tail = h.tail.load(Ordering::Relaxed);
        let end = tail.checked_add(n as u64).ok_or(Corrupt("tail"))?;
        // SYNC POINT: Release orders our copies before the space is handed back (Acquire
        // on tail in `put_min`); the fast half of the asymmetric fence orders it before our
        // load of writers_waiting, against the writer's increment of writers_waiting, slow
        // half, and re-check of space in `wait_space` (a Dekker handshake: either the
        // writer sees the new tail, or we see it waiting).
        fences::publish(&h.tail, end);
        if h.writers_waiting.load(Ordering::SeqCst) > 0
            && self.space() >= h.space_wanted.load(Ordering::Relaxed) as usize
        {
            self.wake_writers();
        }
        Ok(())
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
    pub fn drain_all(&self, r: &Guard<'_>) -> Result<Vec<u8>, Corrupt> {
        let mut v = vec![0u8; self.available()];
        let n = self.take(r, &mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// Give the stream a capacity of `cap` bytes (a power of two of at least a page, at
    /// most [`Stream::room`]) keeping what is buffered, in order. The caller holds both
    /// locks (`_w`, `_r`); every mapping sees the new capacity at its next call.
    pub fn resize(&self, _w: &Guard<'_>, _r: &Guard<'_>, cap: u64) -> Result<(), ResizeError> {
        if !cap.is_power_of_two() || cap < MIN_CAPACITY {
            return Err(ResizeError::Invalid);
        }
        if cap > self.room {
            return Err(ResizeError::TooLarge {
                room: self.room as usize,
            });
        }
        let old = self.cap().map_err(ResizeError::Corrupt)?;
        let h = self.header();
        let tail = h.tail.load(Ordering::Acquire);
        let head = h.head.load(Ordering::Acquire);
        let used = head
            .checked_sub(tail)
            .filter(|&u| u <= old)
            .ok_or(ResizeError::Corrupt(Corrupt("positions")))?;
        if used > cap {
            return Err(ResizeError::Busy {
                buffered: used as usize,
            });
        }
        // The positions stay (every mapping's cached ones stay true); the bytes move to
        // where the new capacity puts them.
        let mut bytes = vec![0u8; used as usize];
        self.load(tail, old, &mut bytes);
        // SYNC POINT: Release pairs with the Acquire in `cap`.
        h.capacity.store(cap, Ordering::Release);
        self.store(tail, cap, &bytes);
        Ok(())
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

/// Is the process that holds a lock word gone, or the word no pid at all? (A lock taken
/// over from a dead holder is consistent: the stream only publishes a position after the
/// bytes are in place.)
fn holder_dead(word: u32) -> bool {
    let pid = (word & !CONTENDED) as i32;
    pid <= 0 || sys::process_gone(pid)
}

/// Rounds of waiting (50 ms each) after which a holder that is not a party of the stream
/// (or is this process, which never holds a lock across a wait) is taken for garbage.
const STALE_ROUNDS: u32 = 40;

fn lock(word: &AtomicU32, me: u32, party: &dyn Fn(i32) -> bool) {
    // SYNC POINT: Acquire on taking the lock pairs with the Release of the previous holder.
    if word
        .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return;
    }
    let mut spins = 0;
    let (mut last, mut rounds) = (0u32, 0u32);
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
        let pid = (v & !CONTENDED) as i32;
        let stale = rounds >= STALE_ROUNDS && (pid == me as i32 || !party(pid));
        if holder_dead(v) || stale {
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
        if v | CONTENDED == last {
            rounds += 1;
        } else {
            (last, rounds) = (v | CONTENDED, 0);
        }
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
        assert_eq!(s.put(&w, b"hello"), Ok(5));
        drop(w);
        let r = t.lock_read();
        let mut buf = [0u8; 16];
        assert_eq!(t.take(&r, &mut buf), Ok(5));
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
                        let n = s.put(&g, &chunk[off..]).unwrap();
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
            let n = s.take(&g, &mut buf).unwrap();
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

    #[test]
    fn resize_keeps_buffered_bytes_in_order_and_refuses_what_cannot_be() {
        let s = Stream::create_with_room("t", 8192, 65536, 1).unwrap();
        let t = Stream::open(s.segment().fd().try_clone_to_owned().unwrap()).unwrap();
        assert_eq!((s.capacity(), s.room()), (8192, 65536));
        // Wrap the positions first, so the bytes sit across the end of the ring.
        let (w, r) = (s.lock_write(), s.lock_read());
        let mut sink = vec![0u8; 7000];
        s.put(&w, &[0u8; 7000]).unwrap();
        s.take(&r, &mut sink).unwrap();
        let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        assert_eq!(s.put(&w, &data), Ok(3000));
        assert_eq!(s.resize(&w, &r, 32768), Ok(()));
        assert_eq!(
            s.resize(&w, &r, 131072),
            Err(ResizeError::TooLarge { room: 65536 })
        );
        assert_eq!(s.resize(&w, &r, 12288), Err(ResizeError::Invalid));
        drop((w, r));
        // The other mapping sees the new capacity and the same bytes.
        assert_eq!(t.capacity(), 32768);
        assert_eq!(t.space(), 32768 - 3000);
        let (w, r) = (t.lock_write(), t.lock_read());
        assert_eq!(t.put(&w, &[9u8; 5000]), Ok(5000));
        assert_eq!(
            t.resize(&w, &r, 4096),
            Err(ResizeError::Busy { buffered: 8000 }),
        );
        let mut got = vec![0u8; 9000];
        assert_eq!(t.take(&r, &mut got), Ok(8000));
        assert_eq!(&got[..3000], &data[..]);
        assert!(got[3000..8000].iter().all(|&b| b == 9));
        assert_eq!(t.resize(&w, &r, 4096), Ok(()));
        assert_eq!(t.put(&w, &[7u8; 5000]), Ok(4096));
    }

    #[test]
    fn sizes_given_as_text_are_refused_outside_the_limits_and_named() {
        assert_eq!(parse_capacity("65536"), Ok(65536));
        assert_eq!(parse_capacity(" 4096\n"), Ok(4096));
        assert_eq!(parse_capacity("1073741824"), Ok(1 << 30));
        assert_eq!(parse_capacity("4095"), Err(CapacityError::OutOfRange(4095)));
        assert_eq!(
            parse_capacity("99999999999999999999"),
            Err(CapacityError::OutOfRange(99999999999999999999))
        );
        let e = parse_capacity("64k").unwrap_err();
        assert_eq!(e, CapacityError::NotANumber("64k".into()));
        assert_eq!(
            e.to_string(),
            "\"64k\" is not a number of bytes (a stream holds 4096 to 1073741824)"
        );
        assert_eq!(
            CapacityError::OutOfRange(1).to_string(),
            "1 is out of range: a stream holds 4096 to 1073741824 bytes"
        );
    }

    #[test]
    fn garbage_lock_words_are_taken_over() {
        let s = Stream::create("t", 4096, 1).unwrap();
        // No pid at all.
        s.header().rlock.store(CONTENDED, Ordering::Relaxed);
        drop(s.lock_read());
        // A live process that does not map the stream (init), and this process, which
        // holds no lock: taken for garbage after STALE_ROUNDS rounds.
        for holder in [1, sys::getpid()] {
            s.header().wlock.store(holder, Ordering::Relaxed);
            let t = std::time::Instant::now();
            drop(s.lock_write());
            assert!(t.elapsed() >= Duration::from_millis(50) * (STALE_ROUNDS - 1));
        }
    }

    proptest! {
        /// A header overwritten with anything: every call returns (bytes, nothing, or
        /// Corrupt), never panics, never reads or writes outside the data area.
        #[test]
        fn a_garbage_header_is_corrupt_never_a_crash(
            words in proptest::collection::vec(any::<u64>(), 40),
            ops in proptest::collection::vec((any::<bool>(), 0usize..20000), 1..20),
        ) {
            let s = Stream::create_with_room("g", 4096, 16384, 1).unwrap();
            {
                let (w, _r) = (s.lock_write(), s.lock_read());
                s.put(&w, b"before").unwrap();
            }
            let h = s.header();
            // Everything but the two lock words (a garbage lock is the test above).
            for (i, v) in words.iter().enumerate() {
                let at = i * 8;
                if at == 128 || at == 256 {
                    continue;
                }
                s.segment().write_at(at, &v.to_ne_bytes());
            }
            h.wlock.store(0, Ordering::Relaxed);
            h.rlock.store(0, Ordering::Relaxed);
            for (is_put, len) in ops {
                if is_put {
                    let w = s.lock_write();
                    if let Ok(n) = s.put(&w, &vec![1u8; len]) {
                        prop_assert!(n <= len);
                    }
                } else {
                    let r = s.lock_read();
                    let mut buf = vec![0u8; len];
                    if let Ok(n) = s.take(&r, &mut buf) {
                        prop_assert!(n <= len && n <= s.room());
                    }
                }
                prop_assert!(s.available() <= s.room());
                let _ = s.space();
            }
        }
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
                    let n = s.put(&g, &data).unwrap();
                    prop_assert_eq!(n, len.min(4096 - model.len()));
                    model.extend(&data[..n]);
                    // What did not fit is not part of the stream.
                    next = next.wrapping_sub((len - n) as u8);
                } else {
                    let mut buf = vec![0u8; len];
                    let g = s.lock_read();
                    let n = s.take(&g, &mut buf).unwrap();
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
