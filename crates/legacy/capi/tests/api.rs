//! The C interface called through its own ABI (the `extern "C"` functions of
//! libstreamline) on real rings under /dev/shm, without a daemon (`STREAMLINE_SOCKET=none`:
//! readers open the rings directly, the kernel checking permissions): every call's
//! results and errno values as the header documents them. The daemon path and C callers
//! are tested in crates/tools/cli/tests/capi.rs.

use libc::{
    c_int, c_void, EAGAIN, EBADF, EINVAL, EMSGSIZE, ENOENT, ESTALE, O_CREAT, O_EXCL, O_NONBLOCK,
    O_RDONLY, O_WRONLY,
};
use std::ffi::{CStr, CString};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};
use streamline as sl;

/// Every test of this binary reads without a daemon (set once, before any thread reads
/// the variable), and the tests take turns: descriptor numbers are the process's.
fn setup() -> MutexGuard<'static, ()> {
    static ONCE: Once = Once::new();
    static TURN: Mutex<()> = Mutex::new(());
    ONCE.call_once(|| std::env::set_var("STREAMLINE_SOCKET", "none"));
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn last_error() -> String {
    // SAFETY: slfile_error returns a valid NUL-terminated string owned by the library.
    unsafe { CStr::from_ptr(sl::slfile_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A call's -1 with its errno, or its value.
fn res(r: i64) -> Result<i64, (i32, String)> {
    if r < 0 {
        Err((errno(), last_error()))
    } else {
        Ok(r)
    }
}

fn open(name: &str, flags: c_int, mode: u32) -> Result<i64, (i32, String)> {
    let c = CString::new(name).unwrap();
    // SAFETY: a valid NUL-terminated string.
    res(unsafe { sl::slfile_open_mode(c.as_ptr(), flags, mode) } as i64)
}

fn read(fd: c_int, buf: &mut [u8]) -> Result<i64, (i32, String)> {
    // SAFETY: buf is valid for buf.len() writable bytes.
    res(unsafe { sl::slfile_read(fd, buf.as_mut_ptr().cast(), buf.len()) } as i64)
}

fn write(fd: c_int, data: &[u8]) -> Result<i64, (i32, String)> {
    // SAFETY: data is valid for data.len() readable bytes.
    res(unsafe { sl::slfile_write(fd, data.as_ptr().cast(), data.len()) } as i64)
}

fn append(fd: c_int, data: &[u8]) -> Result<i64, (i32, String)> {
    // SAFETY: data is valid for data.len() readable bytes.
    res(unsafe { sl::slfile_append(fd, data.as_ptr().cast(), data.len()) } as i64)
}

/// peek or peek_acquire: the record's bytes, copied for the test's convenience.
fn peek(fd: c_int, count: usize, acquire: bool) -> Result<Vec<u8>, (i32, String)> {
    let mut p: *const c_void = std::ptr::null();
    // SAFETY: p is a writable pointer slot.
    let n = res(unsafe {
        if acquire {
            sl::slfile_peek_acquire(fd, &mut p, count)
        } else {
            sl::slfile_peek(fd, &mut p, count)
        }
    } as i64)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the library handed out n readable bytes at p, valid until the next call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n as usize) }.to_vec())
}

/// poke or poke_acquire, filling the window with `data`.
fn poke(fd: c_int, count: usize, data: &[u8], acquire: bool) -> Result<i64, (i32, String)> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: p is a writable pointer slot.
    let n = res(unsafe {
        if acquire {
            sl::slfile_poke_acquire(fd, &mut p, count)
        } else {
            sl::slfile_poke(fd, &mut p, count)
        }
    } as i64)?;
    assert!(data.len() <= n as usize);
    // SAFETY: the library handed out n writable bytes at p, valid until the next call.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.cast::<u8>(), data.len()) };
    Ok(n)
}

fn check(fd: c_int, ts: i64, flags: c_int) -> Result<i64, (i32, String)> {
    res(sl::slfile_check(fd, ts, flags))
}

fn select(fds: &[c_int], timeout_ms: c_int) -> Result<Vec<c_int>, (i32, String)> {
    let mut ready = vec![-1; fds.len()];
    // SAFETY: fds and ready are valid for fds.len() ints.
    res(unsafe {
        sl::slfile_select(
            fds.len() as c_int,
            fds.as_ptr(),
            ready.as_mut_ptr(),
            timeout_ms,
        )
    } as i64)?;
    Ok(ready)
}

fn unique(tag: &str) -> String {
    format!("capitest-{tag}-{}", std::process::id())
}

/// A writer (not waiting for a reader) and a registered reader of a new stream.
fn pair(tag: &str) -> (c_int, c_int, String) {
    let name = unique(tag);
    let w = open(&name, O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK, 0o600).unwrap() as c_int;
    let r = open(&name, O_RDONLY, 0).unwrap() as c_int;
    (w, r, name)
}

#[test]
fn bad_descriptors_names_and_flags_get_their_errno() {
    let _turn = setup();
    assert_eq!(read(999, &mut [0; 8]).unwrap_err().0, EBADF);
    assert_eq!(read(-1, &mut [0; 8]).unwrap_err().0, EBADF);
    assert_eq!(res(sl::slfile_close(999) as i64).unwrap_err().0, EBADF);
    assert_eq!(res(sl::slfile_block(12345, 0) as i64).unwrap_err().0, EBADF);
    // SAFETY: a NULL name is an argument the call must refuse.
    assert_eq!(
        res(unsafe { sl::slfile_open_mode(std::ptr::null(), O_RDONLY, 0) } as i64)
            .unwrap_err()
            .0,
        EINVAL
    );
    for bad in ["", "a/b", ".hidden", "two words"] {
        let (e, msg) = open(bad, O_RDONLY, 0).unwrap_err();
        assert_eq!(e, EINVAL, "{bad:?}: {msg}");
        assert!(msg.contains("stream name"), "{msg}");
    }
    let (e, msg) = open(&unique("nosuch"), O_RDONLY, 0).unwrap_err();
    assert!(e == ENOENT && msg.contains("no stream"), "{e} {msg}");
    let (e, msg) = open(&unique("rw"), O_WRONLY, 0).unwrap_err();
    assert!(e == EINVAL && msg.contains("O_CREAT"), "{msg}");
    // A path that does not exist: open(2)'s errno.
    assert_eq!(
        open("/nonexistent/streamline/pipes/1/gen/all", O_RDONLY, 0)
            .unwrap_err()
            .0,
        ENOENT
    );
}

#[test]
fn every_write_call_reaches_every_read_call_as_records() {
    let _turn = setup();
    let (w, r, name) = pair("rt");
    // O_EXCL on a name that exists.
    assert_eq!(
        open(&name, O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK, 0o600)
            .unwrap_err()
            .0,
        libc::EEXIST
    );
    assert_eq!(write(w, b"one").unwrap(), 3);
    assert_eq!(poke(w, 3, b"two", false).unwrap(), 3);
    assert_eq!(poke(w, 100, b"three", true).unwrap(), 100);
    assert_eq!(
        write(w, b"x").unwrap_err().0,
        EINVAL,
        "a write while a poke_acquire is open"
    );
    assert_eq!(
        poke(w, 5, b"", true).unwrap_err().0,
        EINVAL,
        "a second poke_acquire"
    );
    assert_eq!(
        res(sl::slfile_poke_complete(w, 101) as i64).unwrap_err().0,
        EINVAL,
        "more than acquired"
    );
    assert_eq!(res(sl::slfile_poke_complete(w, 5) as i64).unwrap(), 5);
    assert_eq!(
        res(sl::slfile_poke_complete(w, 5) as i64).unwrap_err().0,
        EINVAL,
        "no acquire open"
    );
    assert_eq!(append(w, b"fo").unwrap(), 2);
    assert_eq!(append(w, b"u").unwrap(), 1);
    assert_eq!(write(w, b"r").unwrap(), 1);
    assert_eq!(append(w, b"five").unwrap(), 4);
    assert_eq!(
        write(w, b"").unwrap(),
        0,
        "an empty write publishes the appended record"
    );
    assert_eq!(
        write(w, b"").unwrap(),
        0,
        "and with none open writes nothing"
    );
    assert_eq!(
        append(w, &vec![0; sl::SLFILE_APPEND_MAX + 1])
            .unwrap_err()
            .0,
        EMSGSIZE
    );
    assert_eq!(write(w, b"").unwrap(), 0);
    assert_eq!(write(w, b"a longer sixth record").unwrap(), 21);
    assert_eq!(write(w, b"seventh").unwrap(), 7);
    // Calls of the other side.
    assert_eq!(read(w, &mut [0; 8]).unwrap_err().0, EBADF);
    assert_eq!(write(r, b"x").unwrap_err().0, EBADF);
    assert_eq!(poke(r, 4, b"", false).unwrap_err().0, EBADF);
    assert_eq!(res(sl::slfile_block(w, 0) as i64).unwrap_err().0, EBADF);
    assert_eq!(check(r, -1, O_WRONLY).unwrap_err().0, EINVAL);
    assert_eq!(check(w, -1, O_RDONLY).unwrap_err().0, EINVAL);

    let mut buf = [0u8; 64];
    let n = read(r, &mut buf).unwrap() as usize;
    assert_eq!(&buf[..n], b"one");
    assert_eq!(peek(r, usize::MAX, false).unwrap(), b"two");
    assert_eq!(peek(r, usize::MAX, true).unwrap(), b"three");
    assert_eq!(
        peek(r, 8, true).unwrap_err().0,
        EINVAL,
        "a second peek_acquire"
    );
    assert_eq!(
        read(r, &mut buf).unwrap_err().0,
        EINVAL,
        "a read while a record is held"
    );
    assert_eq!(
        res(sl::slfile_peek_complete(r, 6) as i64).unwrap_err().0,
        EINVAL,
        "more than acquired"
    );
    assert_eq!(res(sl::slfile_peek_complete(r, 5) as i64).unwrap(), 5);
    assert_eq!(
        res(sl::slfile_peek_complete(r, 0) as i64).unwrap_err().0,
        EINVAL,
        "nothing held"
    );
    assert_eq!(peek(r, usize::MAX, false).unwrap(), b"four");
    assert_eq!(peek(r, usize::MAX, true).unwrap(), b"five");
    assert_eq!(res(sl::slfile_peek_complete(r, 0) as i64).unwrap(), 4);
    // A record longer than the caller's count is cut, and consumed whole.
    let n = read(r, &mut buf[..8]).unwrap() as usize;
    assert_eq!(&buf[..n], b"a longer");
    assert_eq!(peek(r, usize::MAX, false).unwrap(), b"seventh");
    assert_eq!(res(sl::slfile_close(w) as i64).unwrap(), 0);
    assert_eq!(
        read(r, &mut buf).unwrap(),
        0,
        "the end of the stream after the writer's close"
    );
    assert_eq!(res(sl::slfile_close(r) as i64).unwrap(), 0);
    assert_eq!(
        read(r, &mut buf).unwrap_err().0,
        EBADF,
        "a closed descriptor"
    );
    assert!(
        !std::path::Path::new(&format!("/dev/shm/streamline.{name}")).exists(),
        "close removed the rings"
    );
}

/// Descriptors are the lowest free numbers, as the kernel's are.
#[test]
fn descriptors_are_reused_lowest_first() {
    let _turn = setup();
    let (w, r, _) = pair("fds");
    let (w2, r2, _) = pair("fds2");
    assert!(w != r && w2 != r2 && w != w2);
    sl::slfile_close(r);
    let (w3, r3, _) = pair("fds3");
    assert_eq!(w3, r, "the freed number is taken first");
    for fd in [w, w2, r2, w3, r3] {
        assert_eq!(sl::slfile_close(fd), 0);
    }
}

/// Waits until thread `tid` of this process is blocked in the kernel on a futex (in a
/// select or block call); fails after 30 s saying what it was last seen doing.
fn wait_asleep(tid: libc::pid_t) {
    beltway::testing::wait_asleep(std::process::id(), tid as u32, "futex");
}

#[test]
fn a_nonblocking_reader_gets_eagain_and_block_and_select_wake_for_data() {
    let _turn = setup();
    let (wa, _, name_a) = pair("nb-a");
    let (wb, rb, _) = pair("nb-b");
    let ra = open(&name_a, O_RDONLY | O_NONBLOCK, 0).unwrap() as c_int;
    let mut buf = [0u8; 16];
    assert_eq!(read(ra, &mut buf).unwrap_err().0, EAGAIN);
    assert_eq!(peek(ra, 16, false).unwrap_err().0, EAGAIN);
    assert_eq!(sl::slfile_block(ra, 0), 0, "nothing to read");
    assert_eq!(select(&[ra, rb], 0).unwrap(), vec![0, 0]);
    assert_eq!(
        select(&[ra, ra], 0).unwrap_err().0,
        EINVAL,
        "a descriptor twice"
    );
    assert_eq!(
        select(&[ra, wb], 0).unwrap_err().0,
        EBADF,
        "a writer in the set"
    );
    // Data for b only, written by another thread once select waits (this thread asleep).
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let t = std::thread::spawn(move || {
        wait_asleep(me);
        write(wb, b"for b").unwrap();
    });
    // Woken by the write (a timeout would leave both at 0).
    assert_eq!(select(&[ra, rb], 30_000).unwrap(), vec![0, 1]);
    t.join().unwrap();
    let n = read(rb, &mut buf).unwrap() as usize;
    assert_eq!(&buf[..n], b"for b");
    let t = std::thread::spawn(move || {
        wait_asleep(me);
        write(wa, b"for a").unwrap();
    });
    assert_eq!(sl::slfile_block(ra, -1), 1);
    t.join().unwrap();
    let n = read(ra, &mut buf).unwrap() as usize;
    assert_eq!(&buf[..n], b"for a");
    // The end of a stream is ready too (a read returns 0).
    sl::slfile_close(wa);
    assert_eq!(sl::slfile_block(ra, -1), 1);
    assert_eq!(read(ra, &mut buf).unwrap(), 0);
    for fd in [ra, wb, rb] {
        sl::slfile_close(fd);
    }
}

/// `check` over records a `peek` released: the writer reuses their bytes once the reader
/// moved on, and a timestamp from before them then fails with ESTALE, while a record still
/// held by `peek_acquire` is never overwritten. The write side's timestamps verify too.
#[test]
fn check_reports_released_records_overwritten_as_estale() {
    let _turn = setup();
    let (w, r, _) = pair("stale");
    let rec = vec![7u8; 1000];
    for _ in 0..4 {
        write(w, &rec).unwrap();
    }
    let tw = check(w, -1, O_WRONLY).unwrap();
    assert_eq!(
        check(w, tw, O_WRONLY).unwrap(),
        tw,
        "nothing written since: same pointer"
    );
    assert_eq!(
        check(w, tw + 1, O_WRONLY).unwrap_err().0,
        EINVAL,
        "a timestamp ahead of the write pointer"
    );
    let t = check(r, -1, O_RDONLY).unwrap();
    assert_eq!(peek(r, usize::MAX, false).unwrap().len(), 1000);
    let t = check(r, t, O_RDONLY).unwrap();
    // Record 2 peeked (released at the next call), record 3 held.
    assert_eq!(peek(r, usize::MAX, false).unwrap().len(), 1000);
    let held = peek(r, usize::MAX, true).unwrap();
    assert_eq!(held.len(), 1000);
    assert!(check(r, t, O_RDONLY).is_ok(), "nothing overwritten yet");
    let t = check(r, -1, O_RDONLY).unwrap();
    assert_eq!(
        t, 3000,
        "the read pointer: just past the third record in the data ring"
    );
    let at_2 = 1000;
    // Another thread writes 300-byte records until it has to wait for the held record: by
    // then it has gone once around the 16 MiB data ring, over record 2's bytes (and the
    // tag ring, 65536 records, has room for all of them).
    const N: usize = 70_000;
    let writer = std::thread::spawn(move || {
        let small = vec![9u8; 300];
        for _ in 0..N {
            write(w, &small).unwrap();
        }
        w
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match check(r, at_2, O_RDONLY) {
            Err((e, msg)) => {
                assert_eq!(e, ESTALE, "{msg}");
                assert!(msg.contains("overwritten"), "{msg}");
                break;
            }
            Ok(_) => {
                assert!(Instant::now() < deadline, "record 2 was never overwritten");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    // The held record is intact: it still reads as written, and completes cleanly.
    assert_eq!(res(sl::slfile_peek_complete(r, 1000) as i64).unwrap(), 1000);
    assert_eq!(held, rec);
    let mut buf = vec![0u8; 2000];
    assert_eq!(read(r, &mut buf).unwrap(), 1000);
    for _ in 0..N {
        assert_eq!(read(r, &mut buf).unwrap(), 300);
    }
    let w = writer.join().unwrap();
    assert!(
        check(w, tw, O_WRONLY).unwrap_err().0 == ESTALE,
        "the writer has gone round its ring since tw"
    );
    sl::slfile_close(w);
    assert_eq!(read(r, &mut buf).unwrap(), 0);
    sl::slfile_close(r);
}

/// A path is a file: read(2), peek into a private buffer, check always valid, poll.
#[test]
fn a_path_reads_as_a_file_stacked_under_the_same_calls() {
    let _turn = setup();
    let path = std::env::temp_dir().join(unique("file"));
    std::fs::write(&path, b"0123456789").unwrap();
    let f = open(path.to_str().unwrap(), O_RDONLY, 0).unwrap() as c_int;
    let mut buf = [0u8; 4];
    assert_eq!(read(f, &mut buf).unwrap(), 4);
    assert_eq!(&buf, b"0123");
    let t = check(f, -1, O_RDONLY).unwrap();
    assert_eq!(t, 4);
    assert_eq!(peek(f, 3, true).unwrap(), b"456");
    assert_eq!(res(sl::slfile_peek_complete(f, 3) as i64).unwrap(), 3);
    assert_eq!(peek(f, 100, false).unwrap(), b"789");
    assert_eq!(check(f, t, O_RDONLY).unwrap(), 10);
    assert_eq!(
        sl::slfile_block(f, 0),
        1,
        "a regular file is always readable"
    );
    assert_eq!(
        poke(f, 4, b"", false).unwrap_err().0,
        EINVAL,
        "poke is for streams"
    );
    // Mixed with a ring in one select.
    let (w, r, _) = pair("mixed");
    assert_eq!(select(&[r, f], 1000).unwrap(), vec![0, 1]);
    assert_eq!(read(f, &mut buf).unwrap(), 0);
    for fd in [f, w, r] {
        sl::slfile_close(fd);
    }
    std::fs::remove_file(&path).unwrap();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    /// Any name (bytes without NUL, UTF-8 or not, paths or stream names) opened for
    /// reading gives a descriptor or a typed errno with a reason, never a panic (which the
    /// library would report as EIO, "internal error").
    #[test]
    fn hostile_names_get_a_descriptor_or_an_errno(name in proptest::collection::vec(1u8..=255, 0..300), nonblock in proptest::bool::ANY) {
        let _turn = setup();
        let c = CString::new(name).unwrap();
        let flags = O_RDONLY | if nonblock { O_NONBLOCK } else { 0 };
        // SAFETY: a valid NUL-terminated string.
        let fd = unsafe { sl::slfile_open_mode(c.as_ptr(), flags, 0) };
        if fd >= 0 {
            proptest::prop_assert_eq!(sl::slfile_close(fd), 0);
        } else {
            let (e, msg) = (errno(), last_error());
            proptest::prop_assert!(e != libc::EIO && e > 0 && !msg.is_empty() && !msg.contains("internal error"), "errno {} {}", e, msg);
        }
    }
}
