//! stdio on ring pipes. glibc's FILE streams read and write through glibc-internal entry
//! points that no preload library can interpose, so a FILE over a ring pipe end is made a
//! `fopencookie` stream whose read and write are this library's: `stdin`, `stdout` and
//! `stderr` at load (when they are ring pipe ends), and what `fdopen`/`fopen` return for
//! one. The stream's `fileno` is the descriptor, as the program expects.
//!
//! Owns: those streams. FFI: `unsafe` for glibc's FILE, each block saying why it holds.

#![allow(clippy::missing_safety_doc)]

use super::{fd, io};
use crate::{own, pipe, sys};
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
    unsafe { io::read(cookie as usize as c_int, buf.cast(), len) }
}

unsafe extern "C" fn c_write(cookie: *mut c_void, buf: *const c_char, len: usize) -> isize {
    let fd = cookie as usize as c_int;
    let mut off = 0;
    while off < len {
        // SAFETY: glibc hands its buffer of len bytes.
        let n = unsafe { io::write(fd, buf.add(off).cast(), len - off) };
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
    unsafe { fd::close(cookie as usize as c_int) }
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
    if !own::is_internal() && pipe::get(fd).is_some() {
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
    if f.is_null() || own::is_internal() || pipe::foreign() {
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

// --- dprintf and vdprintf: glibc formats into a FILE of its own over the fd and writes
// it with an internal call, past the interposed `write`; on a ring pipe end those bytes
// would land in the kernel pipe, behind ring bytes written later. Here the text is
// formatted by glibc (`vasprintf`) and written through the ring.

extern "C" {
    fn vasprintf(out: *mut *mut c_char, fmt: *const c_char, ap: *mut c_void) -> c_int;
}

type VdprintfFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int;

/// vdprintf(3). `ap` is the caller's `va_list` (on x86-64 and aarch64 a pointer to it).
#[no_mangle]
pub unsafe extern "C" fn vdprintf(fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int {
    if own::is_internal() || pipe::get(fd).is_none() {
        static P: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let p = *P.get_or_init(|| real(c"vdprintf"));
        // SAFETY: libc's vdprintf with the caller's arguments.
        return unsafe { std::mem::transmute::<usize, VdprintfFn>(p)(fd, fmt, ap) };
    }
    let mut text: *mut c_char = std::ptr::null_mut();
    // SAFETY: fmt and ap are the caller's format and arguments; vasprintf allocates.
    let n = unsafe { vasprintf(&mut text, fmt, ap) };
    if n < 0 {
        return n;
    }
    // SAFETY: vasprintf made n bytes at text.
    let r = unsafe { c_write(fd as usize as *mut c_void, text, n as usize) };
    // SAFETY: vasprintf's allocation.
    unsafe { libc::free(text.cast()) };
    if r < 0 {
        -1
    } else {
        r as c_int
    }
}

/// glibc's fortified vdprintf (`_FORTIFY_SOURCE`).
#[no_mangle]
pub unsafe extern "C" fn __vdprintf_chk(
    fd: c_int,
    _flag: c_int,
    fmt: *const c_char,
    ap: *mut c_void,
) -> c_int {
    unsafe { vdprintf(fd, fmt, ap) }
}

/// dprintf(3), C-variadic: the entry point makes the `va_list` a C compiler would (x86-64
/// System V: the six integer and eight vector argument registers saved in a register
/// area, `gp_offset` past the named arguments, `fp_offset` 48, the stack arguments
/// above the return address) and calls `vdprintf`.
#[cfg(target_arch = "x86_64")]
macro_rules! printf_entry {
    ($name:ident, $named:expr, $fmt_from:literal) => {
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name(_fd: c_int, _fmt: *const c_char) -> c_int {
            // Frame (rsp 16-aligned after the sub): [0, 48) integer registers, [48, 176)
            // xmm0-7, [176, 200) the va_list {gp_offset, fp_offset, overflow_arg_area,
            // reg_save_area}. Entry rsp = rsp + 216; stack arguments at entry rsp + 8.
            std::arch::naked_asm!(
                "sub rsp, 216",
                "mov [rsp], rdi",
                "mov [rsp + 8], rsi",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rcx",
                "mov [rsp + 32], r8",
                "mov [rsp + 40], r9",
                "movaps [rsp + 48], xmm0",
                "movaps [rsp + 64], xmm1",
                "movaps [rsp + 80], xmm2",
                "movaps [rsp + 96], xmm3",
                "movaps [rsp + 112], xmm4",
                "movaps [rsp + 128], xmm5",
                "movaps [rsp + 144], xmm6",
                "movaps [rsp + 160], xmm7",
                "mov dword ptr [rsp + 176], {gp}",
                "mov dword ptr [rsp + 180], 48",
                "lea rax, [rsp + 224]",
                "mov [rsp + 184], rax",
                "mov [rsp + 192], rsp",
                $fmt_from,
                "lea rdx, [rsp + 176]",
                "call {f}",
                "add rsp, 216",
                "ret",
                gp = const 8 * $named,
                f = sym vdprintf,
            )
        }
    };
}

#[cfg(target_arch = "x86_64")]
printf_entry!(dprintf, 2, "nop");
// __dprintf_chk(fd, flag, fmt, ...): the format is the third argument.
#[cfg(target_arch = "x86_64")]
printf_entry!(__dprintf_chk, 3, "mov rsi, rdx");
