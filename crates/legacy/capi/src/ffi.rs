//! The C entry points: each checks the C caller's pointers, runs the safe call under
//! `catch_unwind` (a panic never crosses into C: it is EIO), and returns errno-style (-1 and
//! `errno`; the message for `slfile_error`). The only `unsafe` code of the crate is here,
//! where C pointers are dereferenced.
//!
//! cbindgen writes `include/streamline.h` from these declarations and their comments.

use crate::error::{Result, SlError};
use crate::stream::{self, Stream};
use crate::table;
use libc::{c_char, c_int, c_uint, c_void, size_t, ssize_t};
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Largest record `slfile_append` builds (bytes); a larger one is EMSGSIZE.
pub const SLFILE_APPEND_MAX: usize = 65536;
const _: () = assert!(SLFILE_APPEND_MAX == crate::writer::APPEND_MAX);

/// Run `f`; on failure set errno (last, after every lock and mapping `f` used is dropped)
/// and the thread's message, and return `fail`.
fn guard<T>(fail: T, f: impl FnOnce() -> Result<T>) -> T {
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(SlError::new(
            libc::EIO,
            format!("internal error in libstreamline: {why}"),
        ))
    });
    match r {
        Ok(v) => v,
        Err(e) => {
            let msg = CString::new(e.message.replace('\0', " ")).unwrap_or_default();
            LAST_ERROR.with(|l| *l.borrow_mut() = msg);
            nix::errno::Errno::set_raw(e.errno);
            fail
        }
    }
}

/// One call on the stream behind `fd`.
fn with_stream<T>(fd: c_int, f: impl FnOnce(&mut Stream) -> Result<T>) -> Result<T> {
    let e = table::get(fd)?;
    let mut s = table::lock(&e);
    f(&mut s)
}

fn ssize(n: usize) -> ssize_t {
    n as ssize_t
}

/// A most-bytes count (read, peek): what a `ssize_t` result can say at most.
fn at_most(n: size_t) -> usize {
    n.min(isize::MAX as usize)
}

/// A count of bytes C has (write, append, poke), checked to fit a `ssize_t` result.
fn count(n: size_t) -> Result<usize> {
    if n > isize::MAX as usize {
        return Err(SlError::inval(format!("count {n} does not fit a ssize_t")));
    }
    Ok(n)
}

/// Open a stream (thesis `slfile_open`; C programs call `slfile_open(name, flags, ...)`,
/// the header's inline wrapper, which passes `mode` only with O_CREAT).
///
/// `name` is one of:
/// - a path (it starts with '/'): opened as a file with open(2) and `flags` (a PipesFS
///   stream such as /run/streamline/pipes/RUN/NODE/all, which reads as a byte stream);
/// - a stream name, with O_RDONLY: a pipeline's exported stream (`NAME export=yes`) or a
///   stream another program created, asked of the daemon ($STREAMLINE_SOCKET, else
///   /run/streamline/control; `none`: opened directly under /dev/shm). Its owner and root
///   read as a registered, lossless reader (the writer waits for them); other users the
///   stream's mode admits read as observers, who lose what they do not read in time.
///   A reader reads the records written after its open;
/// - a stream name, with O_WRONLY|O_CREAT (or O_RDWR|O_CREAT): a new stream this process
///   writes, its rings (/dev/shm/streamline.NAME and .NAME.data: 65536 records in flight,
///   16 MiB of data) with permission bits `mode` (no umask). O_EXCL: EEXIST if it exists.
///   Like a FIFO's open, the call returns once the first registered reader is there,
///   unless O_NONBLOCK.
///
/// O_NONBLOCK on a reader: calls that would wait fail with EAGAIN.
///
/// Returns a descriptor of this library (a small number, not a kernel descriptor), or -1:
/// ENOENT no such stream (or no daemon socket), ECONNREFUSED no daemon, EACCES refused by
/// the daemon or the kernel, EEXIST, EBUSY the name has a live writer, EINVAL bad name or
/// flags, EMFILE too many open.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn slfile_open_mode(
    name: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    guard(-1, || {
        if name.is_null() {
            return Err(SlError::inval("slfile_open: name is NULL"));
        }
        // SAFETY: non-null, and the caller promises a NUL-terminated string that lives
        // for the call (the header's contract).
        let name = unsafe { CStr::from_ptr(name) };
        let name = name
            .to_str()
            .map_err(|_| SlError::inval("slfile_open: the name is not UTF-8"))?;
        let s = crate::open::open(name, flags, mode)?;
        table::insert(s)
    })
}

/// Close a descriptor. A stream this process writes ends: its readers read what is left,
/// then see the end (read returns 0); what a `poke` or `append`s left open is published
/// first (an unfinished `poke_acquire` is dropped). Pointers from peek/poke on `fd` are
/// invalid afterwards. The number is free at once; a call another thread is making on the
/// stream (a blocked read) is waited for. Returns 0, or -1: EBADF.
#[no_mangle]
pub extern "C" fn slfile_close(fd: c_int) -> c_int {
    guard(-1, || {
        let e = table::remove(fd)?;
        let mut s = table::lock(&e);
        s.close()?;
        Ok(0)
    })
}

/// Copy the next record into `buf` (thesis `slfile_read`). One call returns at most one
/// record, like a packet socket; a record longer than `count` is cut to `count` (the
/// rest is dropped). Blocks while the stream is empty (EAGAIN with O_NONBLOCK). Returns
/// the bytes copied, 0 at the end of the stream, or -1: EOVERFLOW the reader fell behind
/// and records were overwritten before it read them (observers; the next read goes on
/// with the oldest intact one), EBADF, EINVAL. `count` 0 returns 0 and consumes
/// nothing. A path reads as read(2) does.
///
/// # Safety
/// `buf` points to `count` writable bytes (or is NULL with `count` 0).
#[no_mangle]
pub unsafe extern "C" fn slfile_read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    guard(-1, || {
        let n = at_most(count);
        if n == 0 {
            // As read(2): nothing asked, nothing consumed.
            return Ok(0);
        }
        let buf: &mut [u8] = if buf.is_null() {
            return Err(SlError::inval("slfile_read: buf is NULL"));
        } else {
            // SAFETY: non-null, and the caller promises `count` writable bytes there,
            // not otherwise used during the call.
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) }
        };
        with_stream(fd, |s| s.read(buf)).map(ssize)
    })
}

/// Hand out the next record in place (thesis `slfile_peek`): `*buf` points at it inside
/// the stream's ring, read-only. Up to `count` bytes of it count; the record is consumed.
/// For a registered reader the bytes stay intact until the next call on `fd`; an
/// observer's may be overwritten at any time: verify with `slfile_check` after use.
/// Returns the length handed out, 0 at the end of the stream, or -1 (as `slfile_read`;
/// EINVAL for `count` 0).
///
/// # Safety
/// `buf` points to a writable `const void *`.
#[no_mangle]
pub unsafe extern "C" fn slfile_peek(fd: c_int, buf: *mut *const c_void, count: size_t) -> ssize_t {
    // SAFETY: passed on under the same contract.
    unsafe { peek_with(fd, buf, count, "slfile_peek", Stream::peek) }
}

/// Like `slfile_peek`, but the record stays held (thesis `slfile_peek_acquire`): a
/// registered reader's writer cannot overwrite it until `slfile_peek_complete`. At most
/// one record is held per descriptor (EINVAL for a second acquire).
///
/// # Safety
/// `buf` points to a writable `const void *`.
#[no_mangle]
pub unsafe extern "C" fn slfile_peek_acquire(
    fd: c_int,
    buf: *mut *const c_void,
    count: size_t,
) -> ssize_t {
    // SAFETY: passed on under the same contract.
    unsafe { peek_with(fd, buf, count, "slfile_peek_acquire", Stream::peek_acquire) }
}

/// # Safety
/// `buf` points to a writable `const void *`.
unsafe fn peek_with(
    fd: c_int,
    buf: *mut *const c_void,
    count: size_t,
    call: &str,
    f: fn(&mut Stream, usize) -> Result<Option<crate::reader::Block>>,
) -> ssize_t {
    guard(-1, || {
        if buf.is_null() {
            return Err(SlError::inval(format!("{call}: buf is NULL")));
        }
        let n = at_most(count);
        if n == 0 {
            return Err(SlError::inval(format!(
                "{call}: count 0 (a record cut to nothing would read as the end)"
            )));
        }
        let b = with_stream(fd, |s| f(s, n))?;
        let (ptr, len) = b.map_or((std::ptr::null(), 0), |b| (b.ptr.cast::<c_void>(), b.len));
        // SAFETY: non-null, and the caller promises a writable pointer-sized slot there.
        unsafe { buf.write(ptr) };
        Ok(ssize(len))
    })
}

/// Release the record `slfile_peek_acquire` handed out (thesis `slfile_peek_complete`):
/// the read pointer moves past it. `count` is at most what the acquire returned; a record
/// is released whole. Returns the length that was acquired, or -1: ESTALE the record was
/// overwritten while held (observers; it is released anyway), EINVAL no acquire
/// outstanding or `count` too large, EBADF.
#[no_mangle]
pub extern "C" fn slfile_peek_complete(fd: c_int, count: size_t) -> ssize_t {
    guard(-1, || {
        with_stream(fd, |s| s.peek_complete(count)).map(ssize)
    })
}

/// Write `count` bytes as one record (thesis `slfile_write`). With a record open from
/// `slfile_append`, the bytes end that record and the whole record is published (a write
/// of 0 bytes just publishes it); otherwise a write of 0 bytes writes nothing. Waits while
/// registered readers have not made room (lossless). Returns `count`, or -1: EPIPE every
/// reader has gone, EMSGSIZE too large a record, EINVAL a `poke_acquire` is open, EBADF. A
/// path writes as write(2) does.
///
/// # Safety
/// `data` points to `count` readable bytes (or is NULL with `count` 0).
#[no_mangle]
pub unsafe extern "C" fn slfile_write(fd: c_int, data: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: passed on under the same contract.
    unsafe { write_with(fd, data, count, "slfile_write", Stream::write) }
}

/// Add `count` bytes to the open record, opening one if none is (thesis `slfile_append`):
/// the bytes go in place into the ring, the write pointer does not move and nothing is
/// visible to readers until the record is published by the next `slfile_write` (or
/// `slfile_poke`, `slfile_poke_acquire`, `slfile_close`). A record never wraps: at most
/// SLFILE_APPEND_MAX bytes (EMSGSIZE, the record unchanged). Returns `count`, or -1.
///
/// # Safety
/// `data` points to `count` readable bytes (or is NULL with `count` 0).
#[no_mangle]
pub unsafe extern "C" fn slfile_append(fd: c_int, data: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: passed on under the same contract.
    unsafe { write_with(fd, data, count, "slfile_append", Stream::append) }
}

/// # Safety
/// `data` points to `count` readable bytes (or is NULL with `count` 0).
unsafe fn write_with(
    fd: c_int,
    data: *const c_void,
    count: size_t,
    call: &str,
    f: fn(&mut Stream, &[u8]) -> Result<usize>,
) -> ssize_t {
    guard(-1, || {
        let n = self::count(count)?;
        let data: &[u8] = if n == 0 {
            &[]
        } else if data.is_null() {
            return Err(SlError::inval(format!("{call}: data is NULL")));
        } else {
            // SAFETY: non-null, and the caller promises `count` readable bytes there for
            // the call.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), n) }
        };
        with_stream(fd, |s| f(s, data)).map(ssize)
    })
}

/// Reserve `count` bytes at the write pointer to fill in place (thesis `slfile_poke`):
/// `*buf` points at them; they are published as one record at the next call on `fd` (or
/// `slfile_close`). Returns `count`, or -1: EMSGSIZE larger than the ring takes in one
/// piece, EINVAL `count` 0 or a `poke_acquire` open, EBADF (a reader), EINVAL (a path).
///
/// # Safety
/// `buf` points to a writable `void *`.
#[no_mangle]
pub unsafe extern "C" fn slfile_poke(fd: c_int, buf: *mut *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: passed on under the same contract.
    unsafe { poke_with(fd, buf, count, "slfile_poke", Stream::poke) }
}

/// Like `slfile_poke`, but nothing is published until `slfile_poke_complete` says how
/// many of the bytes to publish (thesis `slfile_poke_acquire`).
///
/// # Safety
/// `buf` points to a writable `void *`.
#[no_mangle]
pub unsafe extern "C" fn slfile_poke_acquire(
    fd: c_int,
    buf: *mut *mut c_void,
    count: size_t,
) -> ssize_t {
    // SAFETY: passed on under the same contract.
    unsafe { poke_with(fd, buf, count, "slfile_poke_acquire", Stream::poke_acquire) }
}

/// # Safety
/// `buf` points to a writable `void *`.
unsafe fn poke_with(
    fd: c_int,
    buf: *mut *mut c_void,
    count: size_t,
    call: &str,
    f: fn(&mut Stream, usize) -> Result<*mut u8>,
) -> ssize_t {
    guard(-1, || {
        if buf.is_null() {
            return Err(SlError::inval(format!("{call}: buf is NULL")));
        }
        let n = self::count(count)?;
        let p = with_stream(fd, |s| f(s, n))?;
        // SAFETY: non-null, and the caller promises a writable pointer-sized slot there.
        unsafe { buf.write(p.cast::<c_void>()) };
        Ok(ssize(n))
    })
}

/// Publish the first `count` bytes `slfile_poke_acquire` reserved as one record (thesis
/// `slfile_poke_complete`; 0 publishes nothing and gives the space back). Returns
/// `count`, or -1: EINVAL no acquire open or `count` larger than it, EBADF.
#[no_mangle]
pub extern "C" fn slfile_poke_complete(fd: c_int, count: size_t) -> ssize_t {
    guard(-1, || {
        with_stream(fd, |s| s.poke_complete(count)).map(ssize)
    })
}

/// Generate and verify timestamps (thesis `slfile_check`). With `timestamp` -1, returns a
/// timestamp for the stream's read pointer (`flags` O_RDONLY, a reader) or write pointer
/// (O_WRONLY, a writer). Passed a timestamp it returned, it verifies that no record
/// handed out since (read side: by peek, peek_acquire or read) or written since (write
/// side) was overwritten, and returns a new timestamp; one load of the ring's shared
/// overwrite horizon. The optimistic loop of the thesis:
///
/// ```c
/// int64_t t = slfile_check(fd, -1, O_RDONLY);
/// while ((n = slfile_peek(fd, &p, SIZE_MAX)) > 0) {
///     use(p, n);
///     if ((t = slfile_check(fd, t, O_RDONLY)) < 0) break;   /* ESTALE: p was overwritten */
/// }
/// ```
///
/// Timestamps are ring positions (never negative); any timestamp at or below the current
/// one may be passed, meaning "data at or after it". Returns -1: ESTALE overwritten,
/// EINVAL a timestamp ahead of the pointer or flags that do not match the stream, EBADF.
#[no_mangle]
pub extern "C" fn slfile_check(fd: c_int, timestamp: i64, flags: c_int) -> i64 {
    guard(-1, || with_stream(fd, |s| s.check(timestamp, flags)))
}

/// Wait until the stream has a record to read or has ended (thesis `slfile_block`), at
/// most `timeout_ms` milliseconds (negative: no limit; 0: just look). Returns 1 ready, 0
/// timed out, or -1: EBADF (also for a stream opened for writing).
#[no_mangle]
pub extern "C" fn slfile_block(fd: c_int, timeout_ms: c_int) -> c_int {
    guard(-1, || {
        with_stream(fd, |s| s.block(timeout_ms)).map(c_int::from)
    })
}

/// Wait until at least one of `nfds` streams in `fds` has a record to read or has ended
/// (thesis `slfile_select`), at most `timeout_ms` (negative: no limit). Sets `ready[i]` to
/// 1 or 0 for each, and returns how many are ready (0: timed out), or -1: EBADF, EINVAL.
/// Rings wake the caller at once; paths are polled, every 5 ms when mixed with rings. A
/// descriptor may appear once. Other threads' calls on these descriptors wait until it
/// returns.
///
/// # Safety
/// `fds` points to `nfds` readable ints and `ready` to `nfds` writable ints.
#[no_mangle]
pub unsafe extern "C" fn slfile_select(
    nfds: c_int,
    fds: *const c_int,
    ready: *mut c_int,
    timeout_ms: c_int,
) -> c_int {
    guard(-1, || {
        let n = usize::try_from(nfds)
            .ok()
            .filter(|n| *n <= table::MAX_OPEN)
            .ok_or_else(|| SlError::inval(format!("slfile_select: nfds {nfds}")))?;
        if n == 0 || fds.is_null() || ready.is_null() {
            return Err(SlError::inval(
                "slfile_select: no descriptors (nfds 0, or fds or ready NULL)",
            ));
        }
        // SAFETY: non-null, and the caller promises `nfds` ints there for the call.
        let fds = unsafe { std::slice::from_raw_parts(fds, n) }.to_vec();
        // SAFETY: non-null, and the caller promises `nfds` writable ints there, not
        // otherwise used during the call.
        let ready = unsafe { std::slice::from_raw_parts_mut(ready, n) };
        let got = select_fds(&fds, timeout_ms)?;
        for (r, g) in ready.iter_mut().zip(&got) {
            *r = c_int::from(*g);
        }
        Ok(got.iter().filter(|g| **g).count() as c_int)
    })
}

fn select_fds(fds: &[c_int], timeout_ms: c_int) -> Result<Vec<bool>> {
    let mut sorted = fds.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(SlError::inval("slfile_select: a descriptor appears twice"));
    }
    let entries = fds
        .iter()
        .map(|&fd| table::get(fd))
        .collect::<Result<Vec<_>>>()?;
    // Locked in descriptor order, so two selects over overlapping sets cannot deadlock.
    let mut order: Vec<usize> = (0..fds.len()).collect();
    order.sort_by_key(|&i| fds[i]);
    let mut guards: Vec<Option<std::sync::MutexGuard<'_, Stream>>> =
        (0..fds.len()).map(|_| None).collect();
    for i in order {
        guards[i] = Some(table::lock(&entries[i]));
    }
    let mut streams: Vec<&mut Stream> = guards.iter_mut().flatten().map(|g| &mut **g).collect();
    stream::select(&mut streams, timeout_ms)
}

/// The reason for this thread's last failed call, as a sentence (e.g. the daemon's words
/// when it refused); valid until the next failed call in this thread. Never NULL.
#[no_mangle]
pub extern "C" fn slfile_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
