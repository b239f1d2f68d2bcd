//! The interposed calls that move data between descriptors in the kernel: `splice`,
//! `tee`, `vmsplice`, `sendfile`/`sendfile64`.
//!
//! Owns: what they become when a ring pipe end is one side: a copy through a buffer of
//! ours (`tee` demotes the rings instead, `vmsplice` is a `writev`). Otherwise they go to
//! the kernel (`sendfile` under the shaping budget).

use super::io::writev;
use super::{pipe_of, raw6};
use crate::{shape, sys};
use std::ffi::{c_int, c_uint};

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
