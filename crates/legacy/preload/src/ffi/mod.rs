//! The C calls the library interposes for pipes and the generic descriptor calls, under
//! libc's names. Each is a thin shell: a descriptor that is not ours (one relaxed load,
//! `vfd::is_virtual`) goes straight to the kernel; ours go to `pipe` (or the object behind
//! it through `vfd`), waits to `wait`, exec checks to `exec`, stdio to `stdio`.
//!
//! Calls made by the library itself (`own::internal`) and by a `vfork` child (which
//! shares our memory, `pipe::foreign`) never change the tables.
//!
//! FFI: the C caller's pointers are trusted as libc trusts them; each `unsafe` block says
//! what it relies on. Variadic C functions (`fcntl`, `ioctl`, `open`) are defined with
//! their one optional argument as a machine word, which is how the x86-64 and aarch64
//! calling conventions pass it.
//!
//! The calls, by what they do: `io` (pipe, read, write and their vector, positioned and
//! fortified forms, accept), `fd` (close, close_range, ioctl, fstat, open), `dup` (dup,
//! dup2, dup3, fcntl), `poll` (poll, select, epoll), `copy` (splice, tee, vmsplice,
//! sendfile), `sig` (sigaction and signal's family, behind one trampoline), `stdio` (FILE
//! streams over ring pipe ends, `fdopen`/`fopen`, `dprintf`). This module
//! owns what they share: finding a ring pipe end (`pipe_of`), the caller's buffers and
//! vectors as slices, and raw system calls with the caller's arguments (`raw3`, `raw6`).

#![allow(clippy::missing_safety_doc)]

pub mod copy;
pub mod dup;
pub mod fd;
pub mod io;
pub mod poll;
pub mod sig;
pub mod stdio;

use crate::{pipe, sys, vfd};
use std::ffi::{c_int, c_void};

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
