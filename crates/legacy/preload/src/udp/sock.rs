//! Raw socket system calls for the UDP half (the `sys` style: never libc's `recvmsg`,
//! `sendto`, ... which this library itself exports).
//!
//! Owns: the `unsafe` of the socket calls `udp` makes on the kernel's behalf, each block
//! saying why it holds. Results are the kernel's: a count, or `Err(errno)`.

#![allow(clippy::missing_safety_doc)]

use crate::sys::Res;
use std::ffi::c_long;

#[inline]
fn ret(r: c_long) -> Res {
    if r < 0 {
        Err(crate::sys::errno())
    } else {
        Ok(r as usize)
    }
}

/// bind(2) with the caller's address as given.
pub unsafe fn bind(fd: i32, addr: *const libc::sockaddr, len: libc::socklen_t) -> Res {
    // SAFETY: the caller passes what its own caller gave bind(2); the kernel checks len.
    ret(unsafe { libc::syscall(libc::SYS_bind, fd, addr, len) })
}

/// socket(2).
pub fn socket(domain: i32, ty: i32, proto: i32) -> Res {
    // SAFETY: no memory involved.
    ret(unsafe { libc::syscall(libc::SYS_socket, domain, ty, proto) })
}

/// getsockopt(2) of an integer option.
pub fn getsockopt_int(fd: i32, level: i32, name: i32) -> Result<i32, i32> {
    let mut v: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: v and len are live locals of the sizes the kernel is told.
    ret(unsafe {
        libc::syscall(
            libc::SYS_getsockopt,
            fd,
            level,
            name,
            &mut v as *mut i32,
            &mut len as *mut libc::socklen_t,
        )
    })?;
    Ok(v)
}

/// getsockopt(2) into a plain-data value `T`.
pub fn getsockopt_val<T: Copy>(fd: i32, level: i32, name: i32, v: &mut T) -> Res {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: v is a live, writable T; len is its size.
    ret(unsafe {
        libc::syscall(
            libc::SYS_getsockopt,
            fd,
            level,
            name,
            v as *mut T,
            &mut len as *mut libc::socklen_t,
        )
    })
}

/// setsockopt(2) of a plain-data value `T`.
pub fn setsockopt_val<T>(fd: i32, level: i32, name: i32, v: &T) -> Res {
    // SAFETY: v is a live T of the size the kernel is told.
    ret(unsafe {
        libc::syscall(
            libc::SYS_setsockopt,
            fd,
            level,
            name,
            v as *const T,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
}

/// setsockopt(2) passing the caller's option buffer through.
pub unsafe fn setsockopt_raw(
    fd: i32,
    level: i32,
    name: i32,
    val: *const libc::c_void,
    len: libc::socklen_t,
) -> Res {
    // SAFETY: the caller passes what its own caller gave setsockopt(2).
    ret(unsafe { libc::syscall(libc::SYS_setsockopt, fd, level, name, val, len) })
}

/// getsockname(2) into a sockaddr_storage.
pub fn getsockname(fd: i32) -> Result<(libc::sockaddr_storage, libc::socklen_t), i32> {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: ss and len are live locals of the sizes given.
    ret(unsafe {
        libc::syscall(
            libc::SYS_getsockname,
            fd,
            &mut ss as *mut _ as *mut libc::sockaddr,
            &mut len as *mut libc::socklen_t,
        )
    })?;
    Ok((ss, len))
}

/// recvfrom(2) straight through.
pub unsafe fn recvfrom(
    fd: i32,
    buf: *mut libc::c_void,
    len: usize,
    flags: i32,
    addr: *mut libc::sockaddr,
    alen: *mut libc::socklen_t,
) -> Res {
    // SAFETY: the caller passes what its own caller gave recvfrom(2).
    ret(unsafe { libc::syscall(libc::SYS_recvfrom, fd, buf, len, flags, addr, alen) })
}

/// recvmsg(2) straight through.
pub unsafe fn recvmsg(fd: i32, msg: *mut libc::msghdr, flags: i32) -> Res {
    // SAFETY: the caller passes what its own caller gave recvmsg(2).
    ret(unsafe { libc::syscall(libc::SYS_recvmsg, fd, msg, flags) })
}

/// recvmmsg(2) straight through.
pub unsafe fn recvmmsg(
    fd: i32,
    v: *mut libc::mmsghdr,
    n: u32,
    flags: i32,
    timeout: *mut libc::timespec,
) -> Res {
    // SAFETY: the caller passes a valid mmsghdr array of n entries (or its caller's).
    ret(unsafe { libc::syscall(libc::SYS_recvmmsg, fd, v, n, flags, timeout) })
}

/// sendto(2) straight through.
pub unsafe fn sendto(
    fd: i32,
    buf: *const libc::c_void,
    len: usize,
    flags: i32,
    addr: *const libc::sockaddr,
    alen: libc::socklen_t,
) -> Res {
    // SAFETY: the caller passes what its own caller gave sendto(2).
    ret(unsafe { libc::syscall(libc::SYS_sendto, fd, buf, len, flags, addr, alen) })
}

/// sendmsg(2) straight through.
pub unsafe fn sendmsg(fd: i32, msg: *const libc::msghdr, flags: i32) -> Res {
    // SAFETY: the caller passes what its own caller gave sendmsg(2).
    ret(unsafe { libc::syscall(libc::SYS_sendmsg, fd, msg, flags) })
}

/// sendmmsg(2) straight through.
pub unsafe fn sendmmsg(fd: i32, v: *mut libc::mmsghdr, n: u32, flags: i32) -> Res {
    // SAFETY: the caller passes a valid mmsghdr array of n entries (or its caller's).
    ret(unsafe { libc::syscall(libc::SYS_sendmmsg, fd, v, n, flags) })
}

/// mmap(2) of a packet socket's ring, shared and writable.
pub fn mmap_shared(fd: i32, len: usize) -> Result<*mut u8, i32> {
    // SAFETY: a fresh mapping chosen by the kernel; nothing of ours is overwritten.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0usize,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0usize,
        )
    };
    // libc's syscall() returns -1 with errno set on failure.
    if p == -1 {
        return Err(crate::sys::errno());
    }
    Ok(p as *mut u8)
}

/// munmap(2) of a mapping made by [`mmap_shared`].
pub unsafe fn munmap(p: *mut u8, len: usize) {
    // SAFETY: the caller unmaps a mapping it owns and no longer uses.
    unsafe { libc::syscall(libc::SYS_munmap, p, len) };
}

/// epoll_create1(EPOLL_CLOEXEC).
pub fn epoll_create() -> Res {
    // SAFETY: no memory involved.
    ret(unsafe { libc::syscall(libc::SYS_epoll_create1, libc::EPOLL_CLOEXEC) })
}

/// epoll_ctl(EPOLL_CTL_ADD) of `fd` for `events`.
pub fn epoll_add(efd: i32, fd: i32, events: u32) -> Res {
    let mut ev = libc::epoll_event {
        events,
        u64: fd as u64,
    };
    // SAFETY: ev is a live epoll_event.
    ret(unsafe {
        libc::syscall(
            libc::SYS_epoll_ctl,
            efd,
            libc::EPOLL_CTL_ADD,
            fd,
            &mut ev as *mut libc::epoll_event,
        )
    })
}

/// openat(2) of a NUL-terminated path for appending, created 0644 if missing.
pub fn open_append(path: &std::ffi::CStr) -> Res {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC;
    // SAFETY: path is NUL-terminated and outlives the call.
    ret(unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            0o644,
        )
    })
}

/// eventfd2(0, EFD_NONBLOCK | EFD_CLOEXEC).
pub fn eventfd() -> Res {
    // SAFETY: no memory involved.
    ret(unsafe {
        libc::syscall(
            libc::SYS_eventfd2,
            0,
            libc::EFD_NONBLOCK | libc::EFD_CLOEXEC,
        )
    })
}
