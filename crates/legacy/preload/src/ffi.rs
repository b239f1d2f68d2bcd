//! The C calls the library interposes for pipes and the generic descriptor calls, under
//! libc's names. Each is a thin shell: a descriptor that is not ours (one relaxed load,
//! `vfd::is_virtual`) goes straight to the kernel; ours go to `pipe` (or the object behind
//! it through `vfd`), waits to `wait`, exec checks to `exec`, stdio to `stdio`.
//!
//! Calls made by the library itself (`pipe::internal`) and by a `vfork` child (which
//! shares our memory, `pipe::foreign`) never change the tables.
//!
//! FFI: the C caller's pointers are trusted as libc trusts them; each `unsafe` block says
//! what it relies on. Variadic C functions (`fcntl`, `ioctl`, `open`) are defined with
//! their one optional argument as a machine word, which is how the x86-64 and aarch64
//! calling conventions pass it.

#![allow(clippy::missing_safety_doc)]

use crate::{pipe, shape, sys, vfd, wait};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::time::Duration;

/// Is `fd` a ring pipe end this process serves? (The library's own I/O never comes through
/// here: it uses `sys` only, also for files it opens, so no fd number it reads can be
/// mistaken for a ring end, not even in a `vfork` child, which sees the parent's table.)
#[inline]
fn pipe_of(fd: c_int) -> Option<pipe::PipeRef> {
    if !vfd::is_virtual(fd) {
        return None;
    }
    pipe::get(fd)
}

#[no_mangle]
pub unsafe extern "C" fn pipe(fds: *mut c_int) -> c_int {
    unsafe { pipe2(fds, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    match pipe::pipe2(flags) {
        Ok(f) => {
            // SAFETY: fds points at two ints, as pipe(2)'s caller vouches.
            unsafe {
                *fds = f[0];
                *fds.add(1) = f[1];
            }
            0
        }
        Err(e) => sys::c_ret(Err(e)) as c_int,
    }
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, len: usize) -> isize {
    match pipe_of(fd) {
        // SAFETY: buf is writable for len bytes, as read(2)'s caller vouches.
        Some(p) => sys::c_ret(p.read(fd, unsafe { slice_mut(buf, len) })),
        // SAFETY: as above (n ≤ len).
        None => sys::c_ret(shape::io(fd, len, |n| unsafe {
            sys::read_raw(fd, buf.cast(), n)
        })),
    }
}

/// glibc's fortified read (`_FORTIFY_SOURCE`), which would otherwise reach the kernel
/// without passing through `read`.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    buflen: usize,
) -> isize {
    if len > buflen {
        eprintln!(
            "*** buffer overflow detected ***: read of {len} bytes into a buffer of {buflen}"
        );
        std::process::abort();
    }
    unsafe { read(fd, buf, len) }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: usize) -> isize {
    match pipe_of(fd) {
        // SAFETY: buf is readable for len bytes, as write(2)'s caller vouches.
        Some(p) => sys::c_ret(p.write(fd, unsafe { slice(buf, len) })),
        // SAFETY: as above (n ≤ len).
        None => sys::c_ret(shape::io(fd, len, |n| unsafe {
            sys::write_raw(fd, buf.cast(), n)
        })),
    }
}

unsafe fn slice<'a>(p: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 || p.is_null() {
        &[]
    } else {
        // SAFETY: the caller vouches for p/len.
        unsafe { std::slice::from_raw_parts(p.cast(), len) }
    }
}

unsafe fn slice_mut<'a>(p: *mut c_void, len: usize) -> &'a mut [u8] {
    if len == 0 || p.is_null() {
        &mut []
    } else {
        // SAFETY: the caller vouches for p/len.
        unsafe { std::slice::from_raw_parts_mut(p.cast(), len) }
    }
}

unsafe fn iovs<'a>(iov: *const libc::iovec, n: c_int) -> &'a [libc::iovec] {
    if n <= 0 || iov.is_null() {
        &[]
    } else {
        // SAFETY: the caller vouches for iov/n.
        unsafe { std::slice::from_raw_parts(iov, n as usize) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    let Some(p) = pipe_of(fd) else {
        // SAFETY: the caller's vector, passed through (or cut, for a shaped socket).
        return sys::c_ret(unsafe { vec_io(libc::SYS_readv, fd, iov, n) });
    };
    // SAFETY: the caller's vector.
    let v = unsafe { iovs(iov, n) };
    let total: usize = v.iter().map(|i| i.iov_len).sum();
    let mut tmp = vec![0u8; total.min(1 << 20)];
    let got = match p.read(fd, &mut tmp) {
        Ok(g) => g,
        Err(e) => return sys::c_ret(Err(e)),
    };
    let mut off = 0;
    for i in v {
        if off == got {
            break;
        }
        let k = i.iov_len.min(got - off);
        // SAFETY: each iovec is writable for its length, as readv's caller vouches.
        unsafe { slice_mut(i.iov_base, k) }.copy_from_slice(&tmp[off..off + k]);
        off += k;
    }
    got as isize
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    let Some(p) = pipe_of(fd) else {
        // SAFETY: the caller's vector, passed through (or cut, for a shaped socket).
        return sys::c_ret(unsafe { vec_io(libc::SYS_writev, fd, iov, n) });
    };
    // SAFETY: the caller's vector.
    let v = unsafe { iovs(iov, n) };
    let mut tmp = Vec::with_capacity(v.iter().map(|i| i.iov_len).sum());
    for i in v {
        // SAFETY: each iovec is readable for its length.
        tmp.extend_from_slice(unsafe { slice(i.iov_base, i.iov_len) });
    }
    sys::c_ret(p.write(fd, &tmp))
}

/// readv/writev (`nr`) on a kernel fd, under the budget: a shaped stream socket gets the
/// vector cut to its grant.
unsafe fn vec_io(nr: i64, fd: c_int, iov: *const libc::iovec, n: c_int) -> sys::Res {
    // SAFETY: the caller's vector.
    let v = unsafe { iovs(iov, n) };
    let total: usize = v.iter().map(|i| i.iov_len).sum();
    let cut = shape::cuts(fd);
    shape::io(fd, total, |k| {
        if cut && k < total {
            let c = shape::cut_iov(v, k);
            // SAFETY: a prefix of the caller's own vector.
            unsafe { raw3(nr, fd as usize, c.as_ptr() as usize, c.len()) }
        } else {
            // SAFETY: the caller's vector as given.
            unsafe { raw3(nr, fd as usize, iov as usize, n as usize) }
        }
    })
}

/// pread/pwrite/preadv/pwritev (`nr`, with the offset as a 4th argument) under the budget.
unsafe fn at_io(
    nr: i64,
    fd: c_int,
    a: usize,
    len: usize,
    count: usize,
    off: i64,
    vec: bool,
) -> isize {
    sys::c_ret(shape::io(fd, len, |k| {
        if vec && k < len {
            // SAFETY: a prefix of the caller's vector (a, count).
            let c = shape::cut_iov(unsafe { iovs(a as *const libc::iovec, count as c_int) }, k);
            // SAFETY: as above.
            unsafe {
                raw6(
                    nr,
                    fd as usize,
                    c.as_ptr() as usize,
                    c.len(),
                    off as usize,
                    0,
                    0,
                )
            }
        } else {
            // SAFETY: the caller's buffer/vector, cut only in length.
            unsafe {
                raw6(
                    nr,
                    fd as usize,
                    a,
                    if vec { count } else { k },
                    off as usize,
                    0,
                    0,
                )
            }
        }
    }))
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, len: usize, off: i64) -> isize {
    // SAFETY: pread(2)'s arguments.
    unsafe { at_io(libc::SYS_pread64, fd, buf as usize, len, 0, off, false) }
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, len: usize, off: i64) -> isize {
    unsafe { pread(fd, buf, len, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    off: i64,
    buflen: usize,
) -> isize {
    if len > buflen {
        std::process::abort();
    }
    unsafe { pread(fd, buf, len, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    off: i64,
    buflen: usize,
) -> isize {
    unsafe { __pread_chk(fd, buf, len, off, buflen) }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, len: usize, off: i64) -> isize {
    // SAFETY: pwrite(2)'s arguments.
    unsafe { at_io(libc::SYS_pwrite64, fd, buf as usize, len, 0, off, false) }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, len: usize, off: i64) -> isize {
    unsafe { pwrite(fd, buf, len, off) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64) -> isize {
    // SAFETY: the caller's vector.
    let total: usize = unsafe { iovs(iov, n) }.iter().map(|i| i.iov_len).sum();
    // SAFETY: preadv(2)'s arguments.
    unsafe {
        at_io(
            libc::SYS_preadv,
            fd,
            iov as usize,
            total,
            n.max(0) as usize,
            off,
            true,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64) -> isize {
    unsafe { preadv(fd, iov, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const libc::iovec, n: c_int, off: i64) -> isize {
    // SAFETY: the caller's vector.
    let total: usize = unsafe { iovs(iov, n) }.iter().map(|i| i.iov_len).sum();
    // SAFETY: pwritev(2)'s arguments.
    unsafe {
        at_io(
            libc::SYS_pwritev,
            fd,
            iov as usize,
            total,
            n.max(0) as usize,
            off,
            true,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: i64,
) -> isize {
    unsafe { pwritev(fd, iov, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn accept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    unsafe { accept4(fd, addr, len, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    vfd::before_block();
    // SAFETY: accept4(2)'s arguments, passed through.
    match unsafe {
        raw6(
            libc::SYS_accept4,
            fd as usize,
            addr as usize,
            len as usize,
            flags as usize,
            0,
            0,
        )
    } {
        Ok(n) => {
            shape::accepted(n as c_int);
            n as c_int
        }
        Err(e) => sys::c_ret(Err(e)) as c_int,
    }
}

unsafe fn raw3(nr: i64, a: usize, b: usize, c: usize) -> sys::Res {
    // SAFETY: the caller passes its own caller's arguments for system call nr.
    let r = unsafe { libc::syscall(nr, a, b, c) };
    if r < 0 {
        Err(sys::errno())
    } else {
        Ok(r as usize)
    }
}

unsafe fn raw6(nr: i64, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> sys::Res {
    // SAFETY: the caller passes its own caller's arguments for system call nr.
    let r = unsafe { libc::syscall(nr, a, b, c, d, e, f) };
    if r < 0 {
        Err(sys::errno())
    } else {
        Ok(r as usize)
    }
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if pipe::is_internal() {
        return sys::c_ret(sys::close(fd)) as c_int;
    }
    if pipe::is_ours(fd) {
        // The library's memfd: the program never made it (a close-everything loop).
        return 0;
    }
    if !pipe::foreign() {
        shape::forget(fd);
        if let Some(o) = vfd::unregister(fd) {
            o.close(fd);
            wait::forget(fd);
        }
    }
    sys::c_ret(sys::close(fd)) as c_int
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if pipe::is_internal() {
        return sys::c_ret(unsafe {
            raw3(
                libc::SYS_close_range,
                first as usize,
                last as usize,
                flags as usize,
            )
        }) as c_int;
    }
    let keep: Vec<u32> = pipe::own_fds()
        .into_iter()
        .map(|f| f as u32)
        .filter(|&f| f >= first && f <= last)
        .collect();
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && !pipe::foreign() {
        shape::forget_range(first, last);
        for (fd, o) in vfd::all() {
            if (fd as u32) >= first && (fd as u32) <= last {
                vfd::unregister(fd);
                o.close(fd);
                wait::forget(fd);
            }
        }
    }
    // The ranges between our memfds.
    let mut lo = first;
    for k in keep.iter().copied().chain([u32::MAX]) {
        let hi = if k == u32::MAX { last } else { k - 1 };
        if k != u32::MAX && k == lo {
            lo = k + 1;
            continue;
        }
        if lo <= hi && (k == u32::MAX || lo < k) {
            // SAFETY: close_range takes numbers only.
            if let Err(e) = unsafe {
                raw3(
                    libc::SYS_close_range,
                    lo as usize,
                    hi as usize,
                    flags as usize,
                )
            } {
                return sys::c_ret(Err(e)) as c_int;
            }
        }
        if k == u32::MAX || k == last {
            break;
        }
        lo = k + 1;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    unsafe { close_range(low.max(0) as c_uint, c_uint::MAX, 0) };
}

fn after_dup(old: c_int, new: c_int) {
    if pipe::is_internal() || pipe::foreign() {
        return;
    }
    if let Some(o) = vfd::get(old) {
        vfd::register(new, o.clone());
        o.dup(old, new);
        if (0..=2).contains(&new) && o.pipe().is_some() {
            // stdio on the new stdin/stdout/stderr must reach the ring too.
            crate::stdio::rebind_one(new);
        }
    }
}

fn before_replace(new: c_int) {
    if pipe::is_internal() {
        return;
    }
    pipe::clear_target(new);
    if pipe::foreign() {
        return;
    }
    shape::forget(new);
    if let Some(o) = vfd::unregister(new) {
        o.close(new);
        wait::forget(new);
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    match sys::dup(fd) {
        Ok(n) => {
            after_dup(fd, n as c_int);
            n as c_int
        }
        Err(e) => sys::c_ret(Err(e)) as c_int,
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        return match sys::fcntl(old, libc::F_GETFD, 0) {
            Ok(_) => new,
            Err(e) => sys::c_ret(Err(e)) as c_int,
        };
    }
    unsafe { dup3(old, new, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new && sys::fcntl(old, libc::F_GETFD, 0).is_ok() {
        before_replace(new);
    }
    match sys::dup3(old, new, flags) {
        Ok(_) => {
            after_dup(old, new);
            new
        }
        Err(e) => sys::c_ret(Err(e)) as c_int,
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    unsafe { fcntl64(fd, cmd, arg) }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    if pipe::is_internal() {
        // SAFETY: the caller's argument word, passed through.
        return sys::c_ret(unsafe { sys::fcntl_raw(fd, cmd, arg) }) as c_int;
    }
    if pipe::is_ours(fd) && cmd == libc::F_SETFD {
        return 0;
    }
    if cmd == libc::F_GETPIPE_SZ || cmd == libc::F_SETPIPE_SZ {
        if let Some(p) = pipe_of(fd) {
            if cmd == libc::F_SETPIPE_SZ {
                return sys::c_ret(p.set_size(fd, arg)) as c_int;
            }
            if let Some(n) = p.size() {
                return n as c_int;
            }
        }
    }
    // SAFETY: as above.
    let r = unsafe { sys::fcntl_raw(fd, cmd, arg) };
    if let Ok(n) = r {
        match cmd {
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => after_dup(fd, n as c_int),
            libc::F_SETFL => pipe::set_nonblock(fd, arg as c_int & libc::O_NONBLOCK != 0),
            _ => {}
        }
    }
    sys::c_ret(r) as c_int
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: libc::c_ulong, arg: usize) -> c_int {
    if let Some(p) = pipe_of(fd) {
        if req == libc::FIONREAD as libc::c_ulong {
            if let Some(n) = p.readable_bytes(fd) {
                // SAFETY: FIONREAD's argument is an int pointer, as the caller vouches.
                unsafe {
                    std::ptr::write_unaligned(
                        arg as *mut c_int,
                        n.min(c_int::MAX as usize) as c_int,
                    )
                };
                return 0;
            }
        }
    }
    // SAFETY: the caller's argument, passed through.
    let r = unsafe { sys::ioctl_raw(fd, req, arg) };
    if r.is_ok() && req == libc::FIONBIO as libc::c_ulong && arg != 0 {
        // SAFETY: FIONBIO's argument is an int pointer.
        pipe::set_nonblock(
            fd,
            unsafe { std::ptr::read_unaligned(arg as *const c_int) } != 0,
        );
    }
    sys::c_ret(r) as c_int
}

// --- fstat: the library's own descriptors (a ring's memfd, its doorbell) are not the
// program's. A program that finds its open descriptors by probing each number (Python's
// subprocess tests, close-everything loops) sees EBADF there, as without the library.

fn hidden(fd: c_int) -> bool {
    pipe::is_ours(fd) && !pipe::is_internal()
}

#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    if hidden(fd) {
        return sys::c_ret(Err(libc::EBADF)) as c_int;
    }
    // SAFETY: st is a writable struct stat, as fstat's caller vouches.
    sys::c_ret(unsafe { raw3(libc::SYS_fstat, fd as usize, st as usize, 0) }) as c_int
}

#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, st: *mut libc::stat) -> c_int {
    // (struct stat64 is struct stat on 64-bit Linux.)
    unsafe { fstat(fd, st) }
}

/// glibc before 2.33 compiled `fstat` into calls of these.
#[no_mangle]
pub unsafe extern "C" fn __fxstat(_ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, st) }
}

#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    unsafe { fstat(fd, st) }
}

// --- open: a program that opens /dev/fd/N or /proc/self/fd/N of a ring pipe end.

fn after_open(fd: c_int) -> c_int {
    if fd >= 0 && !pipe::is_internal() {
        shape::forget(fd);
        pipe::adopt_opened(fd);
    }
    fd
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: usize) -> c_int {
    unsafe { openat(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: usize) -> c_int {
    unsafe { openat(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn openat64(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: usize,
) -> c_int {
    unsafe { openat(dir, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    unsafe { openat(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    unsafe { openat(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn openat(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: usize,
) -> c_int {
    // SAFETY: path is a C string, as open's caller vouches.
    let r = unsafe {
        raw6(
            libc::SYS_openat,
            dir as usize,
            path as usize,
            flags as usize,
            mode,
            0,
            0,
        )
    };
    match r {
        Ok(fd) => after_open(fd as c_int),
        Err(e) => sys::c_ret(Err(e)) as c_int,
    }
}

// --- waiting

fn ms_timeout(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

unsafe fn ts_timeout(ts: *const libc::timespec) -> Option<Duration> {
    if ts.is_null() {
        None
    } else {
        // SAFETY: a valid timespec from the caller.
        let t = unsafe { *ts };
        Some(Duration::new(
            t.tv_sec.max(0) as u64,
            t.tv_nsec.clamp(0, 999_999_999) as u32,
        ))
    }
}

unsafe fn pollfds<'a>(fds: *mut libc::pollfd, n: libc::nfds_t) -> &'a mut [libc::pollfd] {
    if n == 0 || fds.is_null() {
        &mut []
    } else {
        // SAFETY: the caller vouches for fds/n.
        unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: poll's array.
    sys::c_ret(unsafe { wait::poll(pollfds(fds, n), ms_timeout(timeout), std::ptr::null()) })
        as c_int
}

#[no_mangle]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: c_int,
    _len: usize,
) -> c_int {
    unsafe { poll(fds, n, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    ts: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: ppoll's arguments.
    sys::c_ret(unsafe { wait::poll(pollfds(fds, n), ts_timeout(ts), mask) }) as c_int
}

#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    let timeout = if tv.is_null() {
        None
    } else {
        // SAFETY: a valid timeval from the caller.
        let t = unsafe { *tv };
        Some(Duration::new(
            t.tv_sec.max(0) as u64,
            (t.tv_usec.clamp(0, 999_999) * 1000) as u32,
        ))
    };
    let start = std::time::Instant::now();
    // SAFETY: select's sets.
    let res = match unsafe { wait::select(nfds, r, w, e, timeout, std::ptr::null()) } {
        Some(r) => r,
        None => {
            if timeout != Some(Duration::ZERO) {
                vfd::before_block();
            }
            // SAFETY: the caller's arguments, passed through.
            return sys::c_ret(unsafe {
                raw6(
                    libc::SYS_select,
                    nfds as usize,
                    r as usize,
                    w as usize,
                    e as usize,
                    tv as usize,
                    0,
                )
            }) as c_int;
        }
    };
    if let Some(t) = timeout {
        // Linux writes back the time not slept.
        let left = t.saturating_sub(start.elapsed());
        // SAFETY: tv is non-null here.
        unsafe {
            *tv = libc::timeval {
                tv_sec: left.as_secs() as libc::time_t,
                tv_usec: left.subsec_micros() as libc::suseconds_t,
            }
        };
    }
    sys::c_ret(res) as c_int
}

#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    ts: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: pselect's arguments.
    let timeout = unsafe { ts_timeout(ts) };
    match unsafe { wait::select(nfds, r, w, e, timeout, mask) } {
        Some(res) => sys::c_ret(res) as c_int,
        None => {
            if timeout != Some(Duration::ZERO) {
                vfd::before_block();
            }
            // pselect6 takes the mask as {pointer, size}.
            let m = [mask as usize, 8usize];
            let mp = if mask.is_null() {
                0
            } else {
                m.as_ptr() as usize
            };
            // SAFETY: ts is null or the caller's valid timespec.
            let tcopy = if ts.is_null() {
                None
            } else {
                Some(unsafe { *ts })
            };
            let tp = tcopy
                .as_ref()
                .map_or(0, |t| t as *const libc::timespec as usize);
            // SAFETY: the caller's sets; our copies of the timeout and mask descriptor.
            sys::c_ret(unsafe {
                raw6(
                    libc::SYS_pselect6,
                    nfds as usize,
                    r as usize,
                    w as usize,
                    e as usize,
                    tp,
                    mp,
                )
            }) as c_int
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    if pipe::is_internal() || pipe::foreign() {
        // SAFETY: the caller's event, passed through.
        return sys::c_ret(unsafe { sys::epoll_ctl(epfd, op, fd, ev) }) as c_int;
    }
    // SAFETY: as above.
    match unsafe { wait::epoll_ctl(epfd, op, fd, ev) } {
        Some(r) => sys::c_ret(r) as c_int,
        // SAFETY: as above.
        None => sys::c_ret(unsafe { sys::epoll_ctl(epfd, op, fd, ev) }) as c_int,
    }
}

unsafe fn events<'a>(ev: *mut libc::epoll_event, max: c_int) -> &'a mut [libc::epoll_event] {
    if max <= 0 || ev.is_null() {
        &mut []
    } else {
        // SAFETY: the caller vouches for ev/max.
        unsafe { std::slice::from_raw_parts_mut(ev, max as usize) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    unsafe { epoll_pwait(epfd, ev, max, timeout, std::ptr::null()) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    if max <= 0 {
        return sys::c_ret(Err(libc::EINVAL)) as c_int;
    }
    // SAFETY: epoll_wait's array.
    let out = unsafe { events(ev, max) };
    // SAFETY: mask is the caller's.
    match unsafe { wait::epoll_wait(epfd, out, ms_timeout(timeout), mask) } {
        Some(r) => sys::c_ret(r) as c_int,
        None => {
            if timeout != 0 {
                vfd::before_block();
            }
            // SAFETY: mask is the caller's.
            sys::c_ret(unsafe { sys::epoll_pwait(epfd, out, timeout, mask) }) as c_int
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    ev: *mut libc::epoll_event,
    max: c_int,
    ts: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's timeout.
    let t = unsafe { ts_timeout(ts) };
    let ms = t.map_or(-1, |t| {
        t.as_micros().div_ceil(1000).min(i32::MAX as u128) as c_int
    });
    unsafe { epoll_pwait(epfd, ev, max, ms, mask) }
}

// --- moving data between descriptors

/// Copy up to `len` bytes from `fin` (at `*off_in` if given) to `fout` through a buffer;
/// what `splice`/`sendfile` become when a ring pipe is one side.
unsafe fn copy_through(
    fin: c_int,
    off_in: *mut i64,
    fout: c_int,
    off_out: *mut i64,
    len: usize,
    nonblock: bool,
) -> sys::Res {
    let mut buf = vec![0u8; len.min(1 << 16)];
    let n = match pipe_of(fin) {
        Some(p) => {
            let _ = nonblock;
            p.read(fin, &mut buf)?
        }
        None if !off_in.is_null() => {
            // SAFETY: off_in is a valid loff_t pointer from the caller.
            let o = unsafe { *off_in };
            // SAFETY: buf is ours.
            let n = unsafe {
                raw6(
                    libc::SYS_pread64,
                    fin as usize,
                    buf.as_mut_ptr() as usize,
                    buf.len(),
                    o as usize,
                    0,
                    0,
                )
            }?;
            // SAFETY: as above.
            unsafe { *off_in = o + n as i64 };
            n
        }
        None => sys::read(fin, &mut buf)?,
    };
    if n == 0 {
        return Ok(0);
    }
    let mut done = 0;
    while done < n {
        let w = match pipe_of(fout) {
            Some(p) => p.write(fout, &buf[done..n]),
            None if !off_out.is_null() => {
                // SAFETY: off_out is a valid loff_t pointer from the caller.
                let o = unsafe { *off_out };
                // SAFETY: buf is ours.
                let w = unsafe {
                    raw6(
                        libc::SYS_pwrite64,
                        fout as usize,
                        buf[done..].as_ptr() as usize,
                        n - done,
                        o as usize,
                        0,
                        0,
                    )
                };
                if let Ok(k) = w {
                    // SAFETY: as above.
                    unsafe { *off_out = o + k as i64 };
                }
                w
            }
            None => sys::write(fout, &buf[done..n]),
        };
        match w {
            Ok(k) => done += k,
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(done)
}

#[no_mangle]
pub unsafe extern "C" fn splice(
    fin: c_int,
    off_in: *mut i64,
    fout: c_int,
    off_out: *mut i64,
    len: usize,
    flags: c_uint,
) -> isize {
    if pipe_of(fin).is_some() || pipe_of(fout).is_some() {
        // SAFETY: the caller's offsets.
        return sys::c_ret(unsafe {
            copy_through(
                fin,
                off_in,
                fout,
                off_out,
                len,
                flags & libc::SPLICE_F_NONBLOCK != 0,
            )
        });
    }
    // SAFETY: the caller's arguments, passed through.
    sys::c_ret(unsafe {
        raw6(
            libc::SYS_splice,
            fin as usize,
            off_in as usize,
            fout as usize,
            off_out as usize,
            len,
            flags as usize,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn tee(fin: c_int, fout: c_int, len: usize, flags: c_uint) -> isize {
    // tee duplicates a pipe's content in the kernel: served by demoting the rings.
    for fd in [fin, fout] {
        if let Some(p) = pipe_of(fd) {
            p.demote(fd);
        }
    }
    // SAFETY: the caller's arguments.
    sys::c_ret(unsafe {
        raw6(
            libc::SYS_tee,
            fin as usize,
            fout as usize,
            len,
            flags as usize,
            0,
            0,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn vmsplice(
    fd: c_int,
    iov: *const libc::iovec,
    n: usize,
    flags: c_uint,
) -> isize {
    if pipe_of(fd).is_some() {
        return unsafe { writev(fd, iov, n as c_int) };
    }
    // SAFETY: the caller's arguments.
    sys::c_ret(unsafe {
        raw6(
            libc::SYS_vmsplice,
            fd as usize,
            iov as usize,
            n,
            flags as usize,
            0,
            0,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, fin: c_int, off: *mut i64, count: usize) -> isize {
    if pipe_of(out).is_some() || pipe_of(fin).is_some() {
        // SAFETY: the caller's offset.
        return sys::c_ret(unsafe {
            copy_through(fin, off, out, std::ptr::null_mut(), count, false)
        });
    }
    // SAFETY: the caller's arguments (count cut to the grant).
    sys::c_ret(shape::sendfile(out, fin, count, |k| unsafe {
        raw6(
            libc::SYS_sendfile,
            out as usize,
            fin as usize,
            off as usize,
            k,
            0,
            0,
        )
    }))
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(out: c_int, fin: c_int, off: *mut i64, count: usize) -> isize {
    unsafe { sendfile(out, fin, off, count) }
}

/// Before a message carrying descriptors (SCM_RIGHTS) leaves: a ring pipe end among them
/// goes back to the kernel, since the receiver may be any program. Used by `sendmsg`.
///
/// # Safety
/// `msg` is null or a valid msghdr.
pub unsafe fn demote_passed(msg: *const libc::msghdr) {
    if msg.is_null() {
        return;
    }
    // SAFETY: a valid msghdr from sendmsg's caller; CMSG_* walk within msg_control.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const c_int;
                let n = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<c_int>();
                for i in 0..n {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    if let Some(p) = pipe_of(fd) {
                        p.demote(fd);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

// --- signals: the program's handlers behind one trampoline (see `signal`)

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

/// libc's `sigaction` (it sets up the return trampoline the kernel needs).
fn real_sigaction() -> Option<SigactionFn> {
    static P: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    let p =
        *P.get_or_init(|| unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) } as usize);
    // SAFETY: p is libc's sigaction, whose C type is SigactionFn.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, SigactionFn>(p) })
}

/// What the kernel runs for every signal the program handles: defers it while this
/// thread is inside the library's locks, else counts it and runs the program's handler.
extern "C" fn trampoline(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let mut saved: crate::signal::Info = [0; 16];
    if !info.is_null() {
        // SAFETY: the kernel's siginfo_t, 128 bytes.
        saved = unsafe { std::ptr::read_unaligned(info.cast::<crate::signal::Info>()) };
    }
    if crate::signal::defer(sig, &saved) {
        return;
    }
    // SAFETY: the kernel's arguments for this signal.
    unsafe { deliver(sig, info, ctx) }
}

/// Run the program's handler for `sig`.
///
/// # Safety
/// `info` and `ctx` are what the kernel (or a deferred copy) gives a handler.
unsafe fn deliver(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let Some(a) = crate::signal::action(sig) else {
        return;
    };
    crate::signal::note_ran(a.restart);
    type Info3 = extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);
    type Plain = extern "C" fn(c_int);
    // SAFETY: the program installed this address as a handler of the C type its
    // SA_SIGINFO flag says.
    unsafe {
        if a.siginfo {
            std::mem::transmute::<usize, Info3>(a.handler)(sig, info, ctx)
        } else {
            std::mem::transmute::<usize, Plain>(a.handler)(sig)
        }
    }
}

/// Run the signals deferred on this thread (a `signal::Crit` section ended), each with
/// the mask the kernel would have set for its handler.
pub fn run_deferred() {
    let errno = sys::errno();
    while let Some((sig, info)) = crate::signal::take_pending() {
        // SAFETY: a signal number this thread received, with its saved siginfo.
        unsafe { run_one(sig, info) };
    }
    sys::set_errno(errno);
}

unsafe fn run_one(sig: c_int, mut info: crate::signal::Info) {
    let Some(real) = real_sigaction() else { return };
    // SAFETY: zeroed sigaction and sigset_t are valid values; the calls get valid pointers.
    unsafe {
        let mut k: libc::sigaction = std::mem::zeroed();
        real(sig, std::ptr::null(), &mut k);
        if k.sa_sigaction != trampoline as *const () as usize {
            // The program changed the disposition meanwhile: the kernel applies the new one.
            libc::syscall(
                libc::SYS_tgkill,
                sys::getpid(),
                libc::syscall(libc::SYS_gettid),
                sig,
            );
            return;
        }
        let mut set = k.sa_mask;
        if k.sa_flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut set, sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        deliver(sig, info.as_mut_ptr().cast(), std::ptr::null_mut());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// The program's view of an action the kernel holds (its handler, not the trampoline).
fn user_view(sig: c_int, mut k: libc::sigaction) -> libc::sigaction {
    if k.sa_sigaction == trampoline as *const () as usize {
        if let Some(a) = crate::signal::action(sig) {
            k.sa_sigaction = a.handler;
            if !a.siginfo {
                k.sa_flags &= !libc::SA_SIGINFO;
            }
        }
    }
    k
}

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(real) = real_sigaction() else {
        return sys::c_ret(Err(libc::ENOSYS)) as c_int;
    };
    if pipe::foreign()
        || pipe::is_internal()
        || sig == libc::SIGKILL
        || sig == libc::SIGSTOP
        || sig <= 0
        || sig as usize >= crate::signal::NSIG
    {
        // SAFETY: the caller's arguments, passed through.
        return unsafe { real(sig, act, old) };
    }
    // SAFETY: a zeroed sigaction is a valid value; the caller's act is null or valid.
    unsafe {
        let mut prev: libc::sigaction = std::mem::zeroed();
        if real(sig, std::ptr::null(), &mut prev) != 0 {
            return -1;
        }
        let seen = user_view(sig, prev);
        if !act.is_null() {
            let before = crate::signal::action(sig);
            let a = *act;
            let h = a.sa_sigaction;
            let r = if h == libc::SIG_DFL || h == libc::SIG_IGN || !crate::signal::fits(h) {
                crate::signal::clear_action(sig);
                real(sig, act, std::ptr::null_mut())
            } else {
                crate::signal::set_action(
                    sig,
                    crate::signal::Action {
                        handler: h,
                        siginfo: a.sa_flags & libc::SA_SIGINFO != 0,
                        restart: a.sa_flags & libc::SA_RESTART != 0,
                    },
                );
                let mut k = a;
                k.sa_sigaction = trampoline as *const () as usize;
                k.sa_flags |= libc::SA_SIGINFO;
                real(sig, &k, std::ptr::null_mut())
            };
            if r != 0 {
                match before {
                    Some(b) => crate::signal::set_action(sig, b),
                    None => crate::signal::clear_action(sig),
                }
                return r;
            }
        }
        if !old.is_null() {
            *old = seen;
        }
    }
    0
}

/// Signals `siginterrupt` made interrupting (bit `sig`): `signal` leaves SA_RESTART off.
static INTERRUPTING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `signal`'s family: install `h` for `sig` with `flags`, blocking `sig` itself in the
/// handler unless `nodefer`.
unsafe fn install(sig: c_int, h: libc::sighandler_t, flags: c_int) -> libc::sighandler_t {
    // SAFETY: zeroed sigactions are valid; our own sigaction gets valid pointers.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        let mut old: libc::sigaction = std::mem::zeroed();
        a.sa_sigaction = h;
        a.sa_flags = flags;
        if flags & libc::SA_NODEFER == 0 && sig > 0 && sig < 64 {
            libc::sigaddset(&mut a.sa_mask, sig);
        }
        if sigaction(sig, &a, &mut old) != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }
}

/// signal(2) as glibc defines it (BSD semantics: SA_RESTART unless `siginterrupt` said).
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    unsafe { bsd_signal(sig, h) }
}

#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    let intr = (0..64).contains(&sig)
        && INTERRUPTING.load(std::sync::atomic::Ordering::Relaxed) & (1u64 << sig) != 0;
    unsafe { install(sig, h, if intr { 0 } else { libc::SA_RESTART }) }
}

/// System V semantics: the handler runs once, unblocked, and interrupts.
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    unsafe { install(sig, h, libc::SA_RESETHAND | libc::SA_NODEFER) }
}

#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: c_int, flag: c_int) -> c_int {
    if !(1..64).contains(&sig) {
        return sys::c_ret(Err(libc::EINVAL)) as c_int;
    }
    let bit = 1u64 << sig;
    if flag != 0 {
        INTERRUPTING.fetch_or(bit, std::sync::atomic::Ordering::Relaxed);
    } else {
        INTERRUPTING.fetch_and(!bit, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: zeroed sigaction is valid; our own sigaction gets valid pointers.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        if sigaction(sig, std::ptr::null(), &mut a) != 0 {
            return -1;
        }
        if flag != 0 {
            a.sa_flags &= !libc::SA_RESTART;
        } else {
            a.sa_flags |= libc::SA_RESTART;
        }
        sigaction(sig, &a, std::ptr::null_mut())
    }
}
