//! Waiting on a mix of our descriptors and the kernel's: `poll`, `ppoll`, `select`,
//! `pselect` and `epoll`.
//!
//! Owns: readiness of a set of fds where some are virtual (`vfd`): their readiness comes
//! from the object ([`vfd::Virtual::revents`]), the others' from the kernel; and sleeping
//! until any of them changes: the objects are armed (a pipe asks its writers for a
//! doorbell), re-checked (so no wake-up is lost between the check and the sleep), and the
//! thread sleeps in the kernel on the fds the objects name, in short slices where an
//! object has nothing to sleep on. For epoll, a virtual fd is registered in the kernel
//! under a tagged data word so its kernel events are recognised and replaced by the
//! object's readiness; the program's own data word is kept here.

use crate::{signal, sys, vfd};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest sleep when an object has nothing in the kernel to sleep on.
const SLICE: Duration = Duration::from_millis(2);

fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

fn ms_ceil(d: Duration) -> u64 {
    d.as_micros().div_ceil(1000) as u64
}

/// poll(2)/ppoll(2): `timeout` None waits for ever.
///
/// # Safety
/// `sigmask` is null or a valid signal set (the C caller's).
pub unsafe fn poll(
    fds: &mut [libc::pollfd],
    timeout: Option<Duration>,
    sigmask: *const libc::sigset_t,
) -> sys::Res {
    if !fds.iter().any(|p| vfd::is_virtual(p.fd)) {
        if timeout != Some(Duration::ZERO) {
            vfd::before_block();
        }
        // SAFETY: sigmask is the C caller's (null or valid).
        return unsafe { sys::ppoll_mask(fds, timeout.map(ms_ceil), sigmask) };
    }
    let objs: Vec<Option<Arc<dyn vfd::Virtual>>> = fds.iter().map(|p| vfd::get(p.fd)).collect();
    let deadline = timeout.map(|t| Instant::now() + t);
    let marks = signal::marks();
    // Nothing ready among ours and the caller will wait: the kernel's fds are asked by the
    // wait itself, not by a zero-timeout poll first.
    let mut n = check(fds, &objs, timeout != Some(Duration::ZERO))?;
    loop {
        let left = remaining(deadline);
        if n > 0 || left == Some(Duration::ZERO) {
            return Ok(n);
        }
        // A handler ran while we waited (between two slices, say): poll is never
        // restarted (man 7 signal), whatever its SA_RESTART says.
        if signal::since(marks) != signal::Since::Nothing {
            return Err(libc::EINTR);
        }
        for (p, o) in fds.iter().zip(&objs) {
            if let Some(o) = o {
                o.arm(p.fd, p.events);
            }
        }
        let ready = fds.iter().zip(&objs).any(|(p, o)| {
            o.as_ref()
                .is_some_and(|o| o.revents_cheap(p.fd, p.events) != 0)
        });
        // Where each fd of the program (a kernel fd, or what an object waits on) sits in
        // the kernel's list.
        let mut kpos: Vec<Option<usize>> = vec![None; fds.len()];
        let mut k: Vec<libc::pollfd> = Vec::with_capacity(fds.len() + 2);
        let mut res = Ok(0);
        if !ready {
            vfd::before_block();
            let mut sliced = false;
            for (i, (p, o)) in fds.iter().zip(&objs).enumerate() {
                match o {
                    Some(o) => {
                        sliced |= o.needs_slices(p.fd, p.events);
                        match o.wait_on(p.fd, p.events) {
                            Some((fd, events)) => {
                                kpos[i] = Some(k.len());
                                k.push(libc::pollfd {
                                    fd,
                                    events,
                                    revents: 0,
                                });
                            }
                            // Nothing to sleep on: re-check in slices.
                            None => sliced = true,
                        }
                        if let Some((fd, events)) = o.extra_wait(p.fd, p.events) {
                            k.push(libc::pollfd {
                                fd,
                                events,
                                revents: 0,
                            });
                        }
                    }
                    None => {
                        kpos[i] = Some(k.len());
                        k.push(libc::pollfd {
                            fd: p.fd,
                            events: p.events,
                            revents: 0,
                        });
                    }
                }
            }
            let mut t = left;
            if sliced {
                t = Some(t.map_or(SLICE, |t| t.min(SLICE)));
            }
            // SAFETY: sigmask is the C caller's (null or valid).
            res = unsafe { sys::ppoll_mask(&mut k, t.map(ms_ceil), sigmask) };
        }
        for (p, o) in fds.iter().zip(&objs) {
            if let Some(o) = o {
                o.disarm(p.fd, p.events);
            }
        }
        res?;
        if ready {
            n = check(fds, &objs, false)?;
            continue;
        }
        // The kernel's answer for its fds, the objects' for theirs: no second system call.
        n = 0;
        for (i, (p, o)) in fds.iter_mut().zip(&objs).enumerate() {
            p.revents = match (o, kpos[i]) {
                // What the object waits on said something (e.g. POLLHUP, bytes in a pipe's
                // kernel side): ask the object in full; else what it holds tells.
                (Some(o), Some(j)) if k[j].revents != 0 => o.revents(p.fd, p.events),
                (Some(o), _) => o.revents_cheap(p.fd, p.events),
                (None, Some(j)) => k[j].revents,
                (None, None) => 0,
            };
            n += (p.revents != 0) as usize;
        }
    }
}

/// While virtual descriptors are ready (input batched in user space, a ring with data),
/// the kernel's descriptors of a poll set are asked (a system call) only every
/// `KERNEL_CHECK_EVERY`th call: one that became ready is reported at most that many calls
/// late, and each of those calls returns at once. (dnsmasq: 1.2x -> 1.35x queries per CPU
/// second, measured by the UDP work.)
const KERNEL_CHECK_EVERY: u32 = 8;

fn skip_kernel_check() -> bool {
    thread_local! { static N: std::cell::Cell<u32> = const { std::cell::Cell::new(0) }; }
    N.with(|n| {
        let v = n.get().wrapping_add(1);
        n.set(v);
        v % KERNEL_CHECK_EVERY != 0
    })
}

/// Readiness now of every entry (virtual from the objects, the rest from one zero-timeout
/// poll); fills `revents`, returns how many are ready. With `lazy`, the kernel is not
/// asked when none of ours is ready (the caller is about to wait on the kernel anyway).
fn check(fds: &mut [libc::pollfd], objs: &[Option<Arc<dyn vfd::Virtual>>], lazy: bool) -> sys::Res {
    let mut k: Vec<libc::pollfd> = Vec::new();
    let mut idx = Vec::new();
    let mut virtual_ready = 0;
    for (i, (p, o)) in fds.iter_mut().zip(objs).enumerate() {
        match o {
            Some(o) => {
                p.revents = if lazy {
                    o.revents_cheap(p.fd, p.events)
                } else {
                    o.revents(p.fd, p.events)
                };
                virtual_ready += (p.revents != 0) as usize;
            }
            None => {
                p.revents = 0;
                k.push(libc::pollfd {
                    fd: p.fd,
                    events: p.events,
                    revents: 0,
                });
                idx.push(i);
            }
        }
    }
    if (virtual_ready > 0 && skip_kernel_check()) || (virtual_ready == 0 && lazy) {
        return Ok(virtual_ready);
    }
    if !k.is_empty() {
        sys::poll(&mut k, Some(0))?;
        for (kp, &i) in k.iter().zip(&idx) {
            fds[i].revents = kp.revents;
        }
    }
    Ok(fds.iter().filter(|p| p.revents != 0).count())
}

/// select(2)/pselect(2) through `poll` when a set holds a virtual fd. Returns None when
/// none does (the caller lets the kernel do it).
///
/// # Safety
/// The sets are null or valid `fd_set`s; `sigmask` is null or a valid signal set.
pub unsafe fn select(
    nfds: i32,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: Option<Duration>,
    sigmask: *const libc::sigset_t,
) -> Option<sys::Res> {
    let nfds = nfds.clamp(0, libc::FD_SETSIZE as i32);
    // SAFETY: the sets are null or valid fd_sets, as select's caller vouches; FD_ISSET
    // reads within FD_SETSIZE bits.
    let isset = |s: *mut libc::fd_set, fd: i32| !s.is_null() && unsafe { libc::FD_ISSET(fd, s) };
    if !(0..nfds).any(|fd| vfd::is_virtual(fd) && (isset(r, fd) || isset(w, fd) || isset(e, fd))) {
        return None;
    }
    let mut p: Vec<libc::pollfd> = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        if isset(r, fd) {
            ev |= libc::POLLIN;
        }
        if isset(w, fd) {
            ev |= libc::POLLOUT;
        }
        if isset(e, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            p.push(libc::pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    // SAFETY: sigmask as our caller vouches.
    let res = unsafe { poll(&mut p, timeout, sigmask) };
    if let Err(e) = res {
        return Some(Err(e));
    }
    if p.iter().any(|q| q.revents & libc::POLLNVAL != 0) {
        return Some(Err(libc::EBADF));
    }
    // SAFETY: as above; FD_ZERO/FD_SET write within the caller's sets.
    unsafe {
        for s in [r, w, e] {
            if !s.is_null() {
                libc::FD_ZERO(s);
            }
        }
        let mut n = 0;
        for q in &p {
            if !r.is_null()
                && q.events & libc::POLLIN != 0
                && q.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
            {
                libc::FD_SET(q.fd, r);
                n += 1;
            }
            if !w.is_null()
                && q.events & libc::POLLOUT != 0
                && q.revents & (libc::POLLOUT | libc::POLLERR) != 0
            {
                libc::FD_SET(q.fd, w);
                n += 1;
            }
            if !e.is_null() && q.events & libc::POLLPRI != 0 && q.revents & libc::POLLPRI != 0 {
                libc::FD_SET(q.fd, e);
                n += 1;
            }
        }
        Some(Ok(n))
    }
}

/// A virtual fd's registration in an epoll set, as the program made it.
#[derive(Clone, Copy)]
struct Reg {
    events: u32,
    data: u64,
    /// EPOLLONESHOT fired: silent until EPOLL_CTL_MOD.
    spent: bool,
    /// The object's extra fd registered in the kernel set for it.
    extra: Option<i32>,
}

/// (epoll fd, extra fd) -> how many registrations share it.
static BELLS: Mutex<Option<HashMap<(i32, i32), usize>>> = Mutex::new(None);

/// (epoll fd, fd) -> registration, for virtual fds only.
static EPOLL: Mutex<Option<HashMap<(i32, i32), Reg>>> = Mutex::new(None);

/// Tag in the kernel's data word of a virtual fd's registration (the fd in the low bits).
const TAG: u64 = 0x534c_5046_0000_0000;
const TAG_MASK: u64 = 0xffff_ffff_0000_0000;

fn with_epoll<R>(f: impl FnOnce(&mut HashMap<(i32, i32), Reg>) -> R) -> R {
    let mut g = crate::signal::lock(&EPOLL);
    f(g.get_or_insert_with(HashMap::new))
}

/// epoll_ctl(2). None: not a virtual fd (the caller lets the kernel do it).
///
/// # Safety
/// `ev` is null (DEL) or points at a valid event.
pub unsafe fn epoll_ctl(
    epfd: i32,
    op: i32,
    fd: i32,
    ev: *mut libc::epoll_event,
) -> Option<sys::Res> {
    let obj = vfd::get(fd)?;
    let (events, data) = if ev.is_null() {
        (0, 0)
    } else {
        // SAFETY: non-null: a valid epoll_event from the caller (packed on x86-64: copied
        // out field by field).
        unsafe { ((*ev).events, (*ev).u64) }
    };
    let kernel_events = obj
        .wait_on(fd, events as i16)
        .map_or(0, |(_, e)| e as u16 as u32);
    let extra = obj.extra_wait(fd, events as i16).map(|(f, _)| f);
    let mut kev = libc::epoll_event {
        events: kernel_events,
        u64: TAG | fd as u32 as u64,
    };
    let kp = if op == libc::EPOLL_CTL_DEL {
        std::ptr::null_mut()
    } else {
        &mut kev as *mut _
    };
    // SAFETY: kp is null for DEL or points at our live event.
    let r = unsafe { sys::epoll_ctl(epfd, op, fd, kp) };
    if r.is_ok() {
        let old = with_epoll(|m| {
            if op == libc::EPOLL_CTL_DEL {
                m.remove(&(epfd, fd))
            } else {
                m.insert(
                    (epfd, fd),
                    Reg {
                        events,
                        data,
                        spent: false,
                        extra,
                    },
                )
            }
        });
        // The extra fd (a doorbell, shared by every end of one pipe) is in the set while
        // any registration names it.
        let mut b = crate::signal::lock(&BELLS);
        let b = b.get_or_insert_with(HashMap::new);
        if let Some(f) = old.and_then(|o| o.extra) {
            let c = b.entry((epfd, f)).or_insert(1);
            *c -= 1;
            if *c == 0 {
                b.remove(&(epfd, f));
                // SAFETY: DEL takes no event.
                let _ =
                    unsafe { sys::epoll_ctl(epfd, libc::EPOLL_CTL_DEL, f, std::ptr::null_mut()) };
            }
        }
        if op != libc::EPOLL_CTL_DEL {
            if let Some(f) = extra {
                let c = b.entry((epfd, f)).or_insert(0);
                *c += 1;
                if *c == 1 {
                    let mut bev = libc::epoll_event {
                        events: libc::EPOLLIN as u32,
                        u64: TAG | f as u32 as u64,
                    };
                    // SAFETY: our live event.
                    let _ = unsafe { sys::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, f, &mut bev) };
                }
            }
        }
    }
    Some(r)
}

/// The program closes `fd`: forget its registrations (and the set's, if it is an epoll fd).
pub fn forget(fd: i32) {
    let mut g = crate::signal::lock(&EPOLL);
    if let Some(m) = g.as_mut() {
        if !m.is_empty() {
            m.retain(|&(e, f), _| e != fd && f != fd);
        }
    }
}

/// epoll_wait(2)/epoll_pwait(2). None: the set holds no virtual fd (the kernel does it).
///
/// # Safety
/// `sigmask` is null or a valid signal set (the C caller's).
pub unsafe fn epoll_wait(
    epfd: i32,
    out: &mut [libc::epoll_event],
    timeout: Option<Duration>,
    sigmask: *const libc::sigset_t,
) -> Option<sys::Res> {
    let regs: Vec<(i32, Reg)> = {
        let g = crate::signal::lock(&EPOLL);
        let m = g.as_ref()?;
        m.iter()
            .filter(|((e, _), _)| *e == epfd)
            .map(|((_, f), r)| (*f, *r))
            .collect()
    };
    if regs.is_empty() || out.is_empty() {
        return None;
    }
    let objs: Vec<(i32, Reg, Arc<dyn vfd::Virtual>)> = regs
        .into_iter()
        .filter_map(|(f, r)| Some((f, r, vfd::get(f)?)))
        .collect();
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut kbuf = vec![libc::epoll_event { events: 0, u64: 0 }; out.len()];
    let marks = signal::marks();
    loop {
        let mut n = ready(epfd, &objs, out);
        let left = remaining(deadline);
        if n > 0 || left == Some(Duration::ZERO) {
            if n < out.len() {
                // SAFETY: no signal mask.
                match unsafe {
                    sys::epoll_pwait(epfd, &mut kbuf[..out.len() - n], 0, std::ptr::null())
                } {
                    Ok(k) => n += copy_kernel(&kbuf[..k], &mut out[n..]),
                    Err(e) if n == 0 => return Some(Err(e)),
                    Err(_) => {}
                }
            }
            return Some(Ok(n));
        }
        if signal::since(marks) != signal::Since::Nothing {
            return Some(Err(libc::EINTR));
        }
        for (f, r, o) in &objs {
            o.arm(*f, r.events as i16);
        }
        let any = objs
            .iter()
            .any(|(f, r, o)| !r.spent && o.revents(*f, r.events as i16) != 0);
        let mut res = Ok(0);
        if !any {
            vfd::before_block();
            let sliced = objs.iter().any(|(f, r, o)| {
                !r.spent
                    && (o.needs_slices(*f, r.events as i16)
                        || o.wait_on(*f, r.events as i16).is_none())
            });
            let mut t = left;
            if sliced {
                t = Some(t.map_or(SLICE, |t| t.min(SLICE)));
            }
            let ms = t.map_or(-1, |t| ms_ceil(t).min(i32::MAX as u64) as i32);
            // SAFETY: sigmask is the C caller's (null or valid).
            res = unsafe { sys::epoll_pwait(epfd, &mut kbuf, ms, sigmask) };
        }
        for (f, r, o) in &objs {
            o.disarm(*f, r.events as i16);
        }
        match res {
            Err(e) => return Some(Err(e)),
            Ok(k) => {
                let kn = copy_kernel(&kbuf[..k], out);
                if kn > 0 {
                    let vn = ready(epfd, &objs, &mut out[kn..]);
                    return Some(Ok(kn + vn));
                }
            }
        }
    }
}

/// Kernel events that are not a virtual fd's tagged registration, copied to `out`.
fn copy_kernel(k: &[libc::epoll_event], out: &mut [libc::epoll_event]) -> usize {
    let mut n = 0;
    for ev in k {
        let data = ev.u64;
        if data & TAG_MASK == TAG {
            continue;
        }
        if n < out.len() {
            out[n] = *ev;
            n += 1;
        }
    }
    n
}

/// The virtual fds of `epfd` that are ready, as the program registered them.
fn ready(
    epfd: i32,
    objs: &[(i32, Reg, Arc<dyn vfd::Virtual>)],
    out: &mut [libc::epoll_event],
) -> usize {
    let mut n = 0;
    for (f, r, o) in objs {
        if n == out.len() {
            break;
        }
        // The registration may have been spent meanwhile (another thread).
        let cur = with_epoll(|m| m.get(&(epfd, *f)).copied());
        let Some(cur) = cur else { continue };
        if cur.spent {
            continue;
        }
        let rev = o.revents(*f, r.events as i16) as u16 as u32;
        if rev != 0 {
            out[n] = libc::epoll_event {
                events: rev,
                u64: cur.data,
            };
            n += 1;
            if cur.events & libc::EPOLLONESHOT as u32 != 0 {
                with_epoll(|m| {
                    if let Some(x) = m.get_mut(&(epfd, *f)) {
                        x.spent = true;
                    }
                });
            }
        }
    }
    n
}
