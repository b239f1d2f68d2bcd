//! The interposed calls on descriptors as such: `close`, `close_range`, `closefrom`,
//! `ioctl`, `fstat` (and glibc's older `__fxstat`), `open`/`openat` (and their 64-bit and
//! fortified names).
//!
//! Owns: forgetting what a closed descriptor was (its object, its waits, its budget
//! class) while stepping around the library's own descriptors; FIONREAD on a ring and
//! FIONBIO; hiding the library's own descriptors from `fstat`; serving a ring pipe end
//! the program opens by path (/dev/fd/N).

use super::{pipe_of, raw3, raw6};
use crate::{own, pipe, shape, sys, vfd, wait};
use std::ffi::{c_char, c_int, c_uint};

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if own::is_internal() {
        return sys::c_ret(sys::close(fd)) as c_int;
    }
    if own::is_ours(fd) {
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
    if own::is_internal() {
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
    own::is_ours(fd) && !own::is_internal()
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
    if fd >= 0 && !own::is_internal() {
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
