//! The interposed waits: `poll`, `ppoll`, `select`, `pselect`, `epoll_ctl`,
//! `epoll_wait`, `epoll_pwait`, `epoll_pwait2`.
//!
//! Owns: the C side of waiting (the caller's arrays, sets and timeouts, the time `select`
//! writes back). A wait that involves a virtual descriptor is `wait`'s; the others go to
//! the kernel, after what is batched has left (`vfd::before_block`).

use super::raw6;
use crate::{own, pipe, sys, vfd, wait};
use std::ffi::c_int;
use std::time::Duration;

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
    if own::is_internal() || pipe::foreign() {
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
