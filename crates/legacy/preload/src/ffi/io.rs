//! The interposed data calls: `pipe`/`pipe2`, `read`, `write`, `readv`, `writev`, the
//! positioned and vector forms `pread`/`pwrite`/`preadv`/`pwritev` (and their 64-bit
//! names), the fortified `__read_chk`/`__pread_chk`, and `accept`/`accept4`.
//!
//! Owns: making a pipe (a ring beside the kernel pipe, `pipe::pipe2`), serving a ring pipe
//! end's reads and writes from its ring, and passing every other descriptor's to the
//! kernel under the shaping budget (a shaped socket's vector cut to its grant; a new
//! connection's account started at zero).

use super::{iovs, pipe_of, raw3, raw6, slice, slice_mut};
use crate::{pipe, shape, sys, vfd};
use std::ffi::{c_int, c_void};

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
