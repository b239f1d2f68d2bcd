//! TEMPORARY stand-in for the generic waiting wrappers (module `wait`, being written
//! separately): `poll`, `epoll_ctl`, `epoll_wait`, `epoll_pwait`, using only
//! [`vfd::get`], the [`vfd::Virtual`] methods and [`vfd::before_block`], so the batched UDP
//! sockets can be tested under dnsmasq and an epoll server. Delete when `wait` is merged.
//!
//! Virtual members of an epoll set are level-triggered here (EPOLLET/EPOLLONESHOT are not
//! honoured for them); the kernel watches their `wait_on` descriptor in their place.

use crate::sys::{self, c_ret, set_errno};
use crate::vfd;
use std::collections::HashMap;
use std::sync::Mutex;

fn now_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a live timespec.
    unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts as *mut libc::timespec) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// While virtual descriptors have batched input, the kernel's descriptors of a poll set
/// are asked (a system call) only every [`KERNEL_CHECK_EVERY`]th call: a kernel descriptor
/// that became ready is reported at most that many calls late (each call returns at once).
const KERNEL_CHECK_EVERY: u32 = 8;

fn skip_kernel_check() -> bool {
    thread_local! { static N: std::cell::Cell<u32> = const { std::cell::Cell::new(0) }; }
    N.with(|n| {
        let v = n.get().wrapping_add(1);
        n.set(v);
        v % KERNEL_CHECK_EVERY != 0
    })
}

/// poll(2) with virtual descriptors.
///
/// # Safety
/// As poll(2).
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: i32) -> i32 {
    let fds: &mut [libc::pollfd] = if n == 0 || fds.is_null() {
        &mut []
    } else {
        // SAFETY: the caller's array of n pollfds.
        unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
    };
    let to = if timeout < 0 { None } else { Some(timeout as u64) };
    if !fds.iter().any(|p| vfd::is_virtual(p.fd)) {
        vfd::before_block();
        return c_ret(sys::poll(fds, to)) as i32;
    }
    let deadline = to.map(|t| now_ms() + t);
    let objs: Vec<_> = fds.iter().map(|p| vfd::get(p.fd)).collect();
    let mut k: Vec<libc::pollfd> = fds.to_vec();
    loop {
        // Virtual descriptors first: what is batched in user space is ready now.
        let mut ready = 0;
        for (p, o) in fds.iter_mut().zip(&objs) {
            if let Some(o) = o {
                p.revents = o.revents(p.fd, p.events);
                if p.revents != 0 {
                    ready += 1;
                }
            }
        }
        if ready > 0 && skip_kernel_check() {
            for (p, o) in fds.iter_mut().zip(&objs) {
                if o.is_none() {
                    p.revents = 0;
                }
            }
            return ready;
        }
        if ready > 0 {
            // The kernel's descriptors, without waiting.
            let mut idx = Vec::new();
            k.clear();
            for (i, (p, o)) in fds.iter().zip(&objs).enumerate() {
                if o.is_none() {
                    idx.push(i);
                    k.push(*p);
                }
            }
            if !k.is_empty() {
                if let Err(e) = sys::poll(&mut k, Some(0)) {
                    set_errno(e);
                    return -1;
                }
                for (j, &i) in idx.iter().enumerate() {
                    fds[i].revents = k[j].revents;
                    if k[j].revents != 0 {
                        ready += 1;
                    }
                }
            }
            return ready;
        }
        // Nothing batched: wait in the kernel on every descriptor, virtual ones through
        // what they say to wait on.
        let left = deadline.map(|d| d.saturating_sub(now_ms()));
        k.clear();
        for (p, o) in fds.iter().zip(&objs) {
            match o.as_ref().and_then(|o| o.wait_on(p.fd, p.events)) {
                Some((wfd, ev)) => k.push(libc::pollfd { fd: wfd, events: ev, revents: 0 }),
                None if o.is_some() => k.push(libc::pollfd { fd: -1, events: 0, revents: 0 }),
                None => k.push(*p),
            }
        }
        vfd::before_block();
        for (p, o) in fds.iter().zip(&objs) {
            if let Some(o) = o {
                o.arm(p.fd, p.events);
            }
        }
        let unknown_wait = objs.iter().zip(fds.iter()).any(|(o, p)| o.as_ref().is_some_and(|o| o.wait_on(p.fd, p.events).is_none()));
        let slice = if unknown_wait { Some(left.unwrap_or(10).min(10)) } else { left };
        let r = sys::poll(&mut k, slice);
        for (p, o) in fds.iter().zip(&objs) {
            if let Some(o) = o {
                o.disarm(p.fd, p.events);
            }
        }
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        };
        let mut ready = 0;
        for (i, p) in fds.iter_mut().enumerate() {
            if let Some(o) = &objs[i] {
                p.revents = if k[i].revents != 0 || unknown_wait { o.revents(p.fd, p.events) } else { 0 };
            } else {
                p.revents = k[i].revents;
            }
            if p.revents != 0 {
                ready += 1;
            }
        }
        if ready > 0 || (r == 0 && left == Some(0)) {
            return ready;
        }
        if let Some(d) = deadline {
            if now_ms() >= d {
                return 0;
            }
        }
    }
}

/// Virtual members of one epoll set: fd -> (events, data).
type Members = HashMap<i32, (u32, u64)>;
/// Each epoll set's virtual members, by epoll fd.
static EPOLL: Mutex<Option<HashMap<i32, Members>>> = Mutex::new(None);

/// epoll_ctl(2): virtual members are remembered; the kernel watches what they wait on.
///
/// # Safety
/// As epoll_ctl(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(epfd: i32, op: i32, fd: i32, ev: *mut libc::epoll_event) -> i32 {
    let Some(o) = vfd::get(fd) else {
        // SAFETY: passed through.
        return c_ret(unsafe { sys_epoll_ctl(epfd, op, fd, ev) }) as i32;
    };
    // SAFETY: the caller's event (may be null for DEL).
    let e = if ev.is_null() { None } else { Some(unsafe { std::ptr::read_unaligned(ev) }) };
    let mut g = EPOLL.lock().unwrap_or_else(|p| p.into_inner());
    let set = g.get_or_insert_with(HashMap::new).entry(epfd).or_default();
    let (wfd, wev) = o.wait_on(fd, libc::POLLIN).unwrap_or((fd, libc::POLLIN));
    match op {
        libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD => {
            let Some(e) = e else {
                set_errno(libc::EFAULT);
                return -1;
            };
            let mut kev = libc::epoll_event { events: if wfd == fd { e.events & !(libc::EPOLLET as u32) } else { wev as u32 }, u64: e.u64 };
            // SAFETY: kev is a live event.
            let r = unsafe { sys_epoll_ctl(epfd, op, wfd, &mut kev) };
            if r.is_ok() {
                set.insert(fd, (e.events, e.u64));
            }
            c_ret(r) as i32
        }
        _ => {
            set.remove(&fd);
            // SAFETY: passed through for the descriptor the kernel watches.
            c_ret(unsafe { sys_epoll_ctl(epfd, op, wfd, ev) }) as i32
        }
    }
}

unsafe fn sys_epoll_ctl(epfd: i32, op: i32, fd: i32, ev: *mut libc::epoll_event) -> sys::Res {
    // SAFETY: the caller's arguments.
    let r = unsafe { libc::syscall(libc::SYS_epoll_ctl, epfd, op, fd, ev) };
    if r < 0 {
        Err(sys::errno())
    } else {
        Ok(r as usize)
    }
}

fn to_poll(ev: u32) -> i16 {
    (ev & (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLPRI) as u32) as i16
}

/// epoll_wait(2) with virtual members.
///
/// # Safety
/// As epoll_wait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(epfd: i32, out: *mut libc::epoll_event, max: i32, timeout: i32) -> i32 {
    // SAFETY: as epoll_pwait without a mask.
    unsafe { epoll_pwait(epfd, out, max, timeout, std::ptr::null()) }
}

/// epoll_pwait(2) with virtual members.
///
/// # Safety
/// As epoll_pwait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(epfd: i32, out: *mut libc::epoll_event, max: i32, timeout: i32, mask: *const libc::sigset_t) -> i32 {
    let members: Vec<(i32, u32, u64)> = {
        let g = EPOLL.lock().unwrap_or_else(|p| p.into_inner());
        g.as_ref().and_then(|m| m.get(&epfd)).map(|s| s.iter().map(|(&fd, &(e, d))| (fd, e, d)).collect()).unwrap_or_default()
    };
    let kwait = |out: *mut libc::epoll_event, max: i32, t: i32| -> sys::Res {
        // SAFETY: the caller's output array of max events; mask null or the caller's.
        let r = unsafe { libc::syscall(libc::SYS_epoll_pwait, epfd, out, max, t, mask, 8usize) };
        if r < 0 {
            Err(sys::errno())
        } else {
            Ok(r as usize)
        }
    };
    if members.is_empty() || max <= 0 {
        vfd::before_block();
        return c_ret(kwait(out, max, timeout)) as i32;
    }
    let deadline = if timeout < 0 { None } else { Some(now_ms() + timeout as u64) };
    let ready_of = |fd: i32, e: u32| -> u32 {
        vfd::get(fd).map(|o| o.revents(fd, to_poll(e)) as u16 as u32).unwrap_or(0)
    };
    loop {
        // SAFETY: the caller's array of max events.
        let outs = unsafe { std::slice::from_raw_parts_mut(out, max as usize) };
        let mut n = 0usize;
        for &(fd, e, d) in &members {
            if n < outs.len() {
                let r = ready_of(fd, e);
                if r != 0 {
                    outs[n] = libc::epoll_event { events: r, u64: d };
                    n += 1;
                }
            }
        }
        let t = if n > 0 {
            0
        } else {
            vfd::before_block();
            match deadline {
                None => -1,
                Some(d) => d.saturating_sub(now_ms()) as i32,
            }
        };
        let room = outs.len() - n;
        let mut got = 0;
        if room > 0 {
            // SAFETY: the rest of the caller's array.
            got = match kwait(unsafe { out.add(n) }, room as i32, t) {
                Ok(g) => g,
                Err(e) if n == 0 => {
                    set_errno(e);
                    return -1;
                }
                Err(_) => 0,
            };
        }
        // Kernel reports for virtual members: ask the member (it may have nothing), and
        // drop duplicates of what was reported above.
        let mut w = n;
        for i in n..n + got {
            let ev = outs[i];
            let data = ev.u64;
            if let Some(&(fd, e, _)) = members.iter().find(|m| m.2 == data) {
                if outs[..n].iter().any(|x| x.u64 == data) {
                    continue;
                }
                let r = ready_of(fd, e);
                if r == 0 {
                    continue;
                }
                outs[w] = libc::epoll_event { events: r, u64: data };
            } else {
                outs[w] = ev;
            }
            w += 1;
        }
        if w > 0 || t == 0 {
            return w as i32;
        }
        if deadline.is_some_and(|d| now_ms() >= d) {
            return 0;
        }
    }
}
