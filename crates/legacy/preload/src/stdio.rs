//! stdio on ring pipes. glibc's FILE streams read and write through glibc-internal entry
//! points that no preload library can interpose, so a FILE over a ring pipe end is made a
//! `fopencookie` stream whose read and write are this library's: `stdin`, `stdout` and
//! `stderr` at load (when they are ring pipe ends), and what `fdopen`/`fopen` return for
//! one. The stream's `fileno` is the descriptor, as the program expects.
//!
//! Owns: those streams. FFI: `unsafe` for glibc's FILE, each block saying why it holds.

#![allow(clippy::missing_safety_doc)]

use crate::{ffi, pipe, sys};
use std::ffi::{c_char, c_int, c_void, CStr};

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// Offset of `_fileno` in glibc's `struct _IO_FILE` on 64-bit targets (an int after the
/// flags word and thirteen pointers); fopencookie leaves it -1.
const FILENO_OFFSET: usize = 112;

unsafe extern "C" fn c_read(cookie: *mut c_void, buf: *mut c_char, len: usize) -> isize {
    // SAFETY: glibc hands its buffer of len bytes.
    unsafe { ffi::read(cookie as usize as c_int, buf.cast(), len) }
}

unsafe extern "C" fn c_write(cookie: *mut c_void, buf: *const c_char, len: usize) -> isize {
    let fd = cookie as usize as c_int;
    let mut off = 0;
    while off < len {
        // SAFETY: glibc hands its buffer of len bytes.
        let n = unsafe { ffi::write(fd, buf.add(off).cast(), len - off) };
        if n < 0 {
            if sys::errno() == libc::EINTR {
                continue;
            }
            return if off > 0 { off as isize } else { -1 };
        }
        off += n as usize;
    }
    off as isize
}

unsafe extern "C" fn c_close(cookie: *mut c_void) -> c_int {
    // SAFETY: closing the stream's descriptor.
    unsafe { ffi::close(cookie as usize as c_int) }
}

/// A stream over ring pipe end `fd` with C mode string `mode`.
unsafe fn cookie_stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let io = CookieIo {
        read: Some(c_read),
        write: Some(c_write),
        seek: None,
        close: Some(c_close),
    };
    // SAFETY: mode is a C string; the cookie is the fd number.
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if !f.is_null() {
        // SAFETY: f is a live glibc FILE; _fileno is an int at FILENO_OFFSET.
        unsafe { *(f.cast::<u8>().add(FILENO_OFFSET).cast::<c_int>()) = fd };
    }
    f
}

/// Streams this library made for fds 0, 1, 2 (so each is made once).
static REBOUND: [std::sync::atomic::AtomicBool; 3] =
    [const { std::sync::atomic::AtomicBool::new(false) }; 3];

/// At load: stdin/stdout/stderr that are ring pipe ends become cookie streams.
pub fn rebind() {
    for fd in 0..=2 {
        if pipe::get(fd).is_some() {
            rebind_one(fd);
        }
    }
}

/// Make the standard stream of `fd` (0, 1 or 2) a cookie stream over that fd number. It
/// reads and writes whatever the fd is at the time, through this library, so it stays
/// right when the program later puts something else there.
pub fn rebind_one(fd: c_int) {
    if REBOUND[fd as usize].swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    // SAFETY: glibc's stream globals; the old stream is flushed first (its buffered bytes
    // belong to whatever the fd was before) and left alone (it may be glibc's static one).
    unsafe {
        let (slot, mode): (*mut *mut libc::FILE, &CStr) = match fd {
            0 => (&raw mut stdin, c"r"),
            1 => (&raw mut stdout, c"w"),
            _ => (&raw mut stderr, c"w"),
        };
        if fd != 0 && !(*slot).is_null() {
            libc::fflush(*slot);
        }
        let f = cookie_stream(fd, mode.as_ptr());
        if f.is_null() {
            REBOUND[fd as usize].store(false, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        if fd == 2 {
            libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
        }
        *slot = f;
    }
}

type FdopenFn = unsafe extern "C" fn(c_int, *const c_char) -> *mut libc::FILE;
type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE;

fn real(name: &CStr) -> usize {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    if !pipe::is_internal() && pipe::get(fd).is_some() {
        return unsafe { cookie_stream(fd, mode) };
    }
    static P: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let p = *P.get_or_init(|| real(c"fdopen"));
    // SAFETY: libc's fdopen.
    unsafe { std::mem::transmute::<usize, FdopenFn>(p)(fd, mode) }
}

unsafe fn fopen_with(
    name: &'static CStr,
    cell: &std::sync::OnceLock<usize>,
    path: *const c_char,
    mode: *const c_char,
) -> *mut libc::FILE {
    let p = *cell.get_or_init(|| real(name));
    // SAFETY: libc's fopen.
    let f = unsafe { std::mem::transmute::<usize, FopenFn>(p)(path, mode) };
    if f.is_null() || pipe::is_internal() || pipe::foreign() {
        return f;
    }
    // SAFETY: f is a live FILE.
    let fd = unsafe { libc::fileno(f) };
    let Ok(st) = sys::fstat(fd) else { return f };
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO || pipe::by_inode(st.st_ino).is_none() {
        return f;
    }
    // A ring pipe end opened by path (/dev/fd/N, /dev/stdin): serve it through a cookie
    // stream on a descriptor of our own, and let glibc's FILE go.
    let Ok(nfd) = sys::dup(fd) else { return f };
    // SAFETY: f is a live FILE; nothing else has it yet.
    unsafe { libc::fclose(f) };
    pipe::adopt_opened(nfd as c_int);
    unsafe { cookie_stream(nfd as c_int, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    static P: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    unsafe { fopen_with(c"fopen", &P, path, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    static P: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    unsafe { fopen_with(c"fopen64", &P, path, mode) }
}
