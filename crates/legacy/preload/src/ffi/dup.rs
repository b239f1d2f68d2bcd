//! The interposed calls that give an open file another descriptor number, and `fcntl`:
//! `dup`, `dup2`, `dup3`, `fcntl`/`fcntl64`.
//!
//! Owns: a new number serving what the old one did (F_DUPFD included; a standard stream on
//! it is rebound, `stdio`), forgetting what was on a target number first (moving a
//! descriptor of the library's own out of the way), F_GETPIPE_SZ/F_SETPIPE_SZ on a ring,
//! and the O_NONBLOCK that F_SETFL sets.

use super::pipe_of;
use crate::{own, pipe, shape, sys, vfd, wait};
use std::ffi::c_int;

fn after_dup(old: c_int, new: c_int) {
    if own::is_internal() || pipe::foreign() {
        return;
    }
    if let Some(o) = vfd::get(old) {
        vfd::register(new, o.clone());
        o.dup(old, new);
        if (0..=2).contains(&new) && pipe::as_pipe(&*o).is_some() {
            // stdio on the new stdin/stdout/stderr must reach the ring too.
            super::stdio::rebind_one(new);
        }
    }
}

fn before_replace(new: c_int) {
    if own::is_internal() {
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
    if own::is_internal() {
        // SAFETY: the caller's argument word, passed through.
        return sys::c_ret(unsafe { sys::fcntl_raw(fd, cmd, arg) }) as c_int;
    }
    if own::is_ours(fd) && cmd == libc::F_SETFD {
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
