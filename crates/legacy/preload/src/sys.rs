//! Raw system calls and the C caller's `errno`.
//!
//! Owns: every way this library reaches the kernel for the calls it interposes. The
//! library exports `read`, `write`, `close`, `poll`, ... under libc's names, so a call to
//! libc's function from inside it (or from Rust's std, which calls libc) would land back in
//! the library; these wrappers make the system call directly instead. They return the
//! kernel's result: a count, or `Err(errno)`.
//!
//! FFI: the `unsafe` of raw system calls lives here, each block saying why it holds.

#![allow(clippy::missing_safety_doc)]

use std::ffi::c_long;

pub type Res = Result<usize, i32>;

#[inline]
fn ret(r: c_long) -> Res {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

/// The calling thread's errno.
#[inline]
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Set the calling thread's errno (what a C caller reads after a -1).
#[inline]
pub fn set_errno(e: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = e }
}

/// A C-style return: the count, or -1 with errno set.
#[inline]
pub fn c_ret(r: Res) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// A three-argument system call by the `syscall` instruction itself (x86-64): the hot
/// calls (read, write) skip libc's variadic `syscall()` and its errno store, which cost a
/// cached 4 KiB read several percent. Returns the kernel's value (negative errno).
///
/// # Safety
/// `nr` with these arguments must be a call whose memory effects the caller vouches for.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn syscall3(nr: c_long, a: usize, b: usize, c: usize) -> c_long {
    let r: c_long;
    // SAFETY: the x86-64 Linux system call convention: number in rax, arguments in rdi,
    // rsi, rdx; the kernel clobbers rcx and r11 and returns in rax; no stack is used.
    unsafe {
        std::arch::asm!("syscall", inlateout("rax") nr => r, in("rdi") a, in("rsi") b, in("rdx") c, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    r
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn syscall3(nr: c_long, a: usize, b: usize, c: usize) -> c_long {
    // SAFETY: as the caller vouches; libc's wrapper sets errno, turned back into -errno.
    let r = unsafe { libc::syscall(nr, a, b, c) };
    if r < 0 {
        -(errno() as c_long)
    } else {
        r
    }
}

#[inline]
fn ret_raw(r: c_long) -> Res {
    if r < 0 {
        Err(-r as i32)
    } else {
        Ok(r as usize)
    }
}

/// read(2) into `buf`.
pub fn read(fd: i32, buf: &mut [u8]) -> Res {
    // SAFETY: buf is a valid writable slice of buf.len() bytes.
    ret_raw(unsafe {
        syscall3(
            libc::SYS_read,
            fd as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
        )
    })
}

/// read(2) through a raw pointer (the C caller's buffer).
pub unsafe fn read_raw(fd: i32, buf: *mut u8, len: usize) -> Res {
    // SAFETY: the caller vouches for buf/len, as the C caller of read(2) does.
    ret_raw(unsafe { syscall3(libc::SYS_read, fd as usize, buf as usize, len) })
}

/// write(2) of `buf`.
pub fn write(fd: i32, buf: &[u8]) -> Res {
    // SAFETY: buf is a valid readable slice.
    ret_raw(unsafe {
        syscall3(
            libc::SYS_write,
            fd as usize,
            buf.as_ptr() as usize,
            buf.len(),
        )
    })
}

/// write(2) through a raw pointer (the C caller's buffer).
pub unsafe fn write_raw(fd: i32, buf: *const u8, len: usize) -> Res {
    // SAFETY: the caller vouches for buf/len.
    ret_raw(unsafe { syscall3(libc::SYS_write, fd as usize, buf as usize, len) })
}

pub fn close(fd: i32) -> Res {
    // SAFETY: closing a descriptor number touches no memory.
    ret(unsafe { libc::syscall(libc::SYS_close, fd) })
}

pub fn dup(fd: i32) -> Res {
    // SAFETY: no memory involved.
    ret(unsafe { libc::syscall(libc::SYS_dup, fd) })
}

pub fn dup3(old: i32, new: i32, flags: i32) -> Res {
    // SAFETY: no memory involved.
    ret(unsafe { libc::syscall(libc::SYS_dup3, old, new, flags) })
}

/// fcntl(2) with an integer argument (or none).
pub fn fcntl(fd: i32, cmd: i32, arg: usize) -> Res {
    // SAFETY: the commands used with this wrapper take an integer argument, not a pointer.
    ret(unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) })
}

/// fcntl(2) passing the C caller's argument word through unchanged (it may be a pointer).
pub unsafe fn fcntl_raw(fd: i32, cmd: i32, arg: usize) -> Res {
    // SAFETY: the caller passes what its own caller gave fcntl.
    ret(unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) })
}

/// ioctl(2) passing the C caller's argument through unchanged.
pub unsafe fn ioctl_raw(fd: i32, req: u64, arg: usize) -> Res {
    // SAFETY: the caller passes what its own caller gave ioctl.
    ret(unsafe { libc::syscall(libc::SYS_ioctl, fd, req, arg) })
}

/// pipe2(2).
pub fn pipe2(flags: i32) -> Result<[i32; 2], i32> {
    let mut fds = [-1i32; 2];
    // SAFETY: fds is a valid array of two ints.
    ret(unsafe { libc::syscall(libc::SYS_pipe2, fds.as_mut_ptr(), flags) })?;
    Ok(fds)
}

/// poll(2) on `fds` (ppoll with a relative timeout; `None` waits for ever).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: Option<u64>) -> Res {
    let ts = timeout_ms.map(|ms| libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: fds is a valid slice of pollfd; tsp is null or a live timespec; no sigmask.
    ret(unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            fds.as_mut_ptr(),
            fds.len(),
            tsp,
            0usize,
            8usize,
        )
    })
}

/// fstat(2).
pub fn fstat(fd: i32) -> Result<libc::stat, i32> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: st is a writable stat buffer.
    ret(unsafe { libc::syscall(libc::SYS_fstat, fd, st.as_mut_ptr()) })?;
    // SAFETY: the kernel filled it (and it was zeroed before).
    Ok(unsafe { st.assume_init() })
}

/// openat(2) of a NUL-terminated path.
pub fn open(path: &std::ffi::CStr, flags: i32) -> Res {
    // SAFETY: path is NUL-terminated and outlives the call.
    ret(unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags, 0) })
}

/// readlink(2) of a NUL-terminated path into `buf`.
pub fn readlink(path: &std::ffi::CStr, buf: &mut [u8]) -> Res {
    // SAFETY: path is NUL-terminated; buf is writable for its length.
    ret(unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            libc::AT_FDCWD,
            path.as_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    })
}

/// getpid(2).
pub fn getpid() -> i32 {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// Raise SIGPIPE on the calling thread, as the kernel does for a write to a pipe nobody reads.
pub fn raise_sigpipe() {
    // SAFETY: tgkill to ourselves with a valid signal number.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid);
        libc::syscall(libc::SYS_tgkill, getpid(), tid, libc::SIGPIPE);
    }
}

/// Take ownership of a descriptor number this library created.
pub fn owned(fd: i32) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: callers pass a descriptor they just created and that nothing else owns.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// The lowest fd number the library puts its own descriptors at (memfds, auxiliary pipe
/// ends), out of the way of the numbers a program expects `open`/`pipe` to return.
pub const HIGH_FD: usize = 700;

/// Move `fd` to a number >= [`HIGH_FD`] (close-on-exec if asked), closing the original.
/// Keeps the original if no higher number is free.
pub fn move_high(fd: i32, cloexec: bool) -> i32 {
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    match fcntl(fd, cmd, HIGH_FD) {
        Ok(n) => {
            let _ = close(fd);
            n as i32
        }
        Err(_) => fd,
    }
}

/// epoll_ctl(2) with the C caller's event pointer.
pub unsafe fn epoll_ctl(epfd: i32, op: i32, fd: i32, ev: *mut libc::epoll_event) -> Res {
    // SAFETY: ev is null (EPOLL_CTL_DEL) or a valid epoll_event, as the caller vouches.
    ret(unsafe { libc::syscall(libc::SYS_epoll_ctl, epfd, op, fd, ev) })
}

/// epoll_pwait(2) into `evs` (timeout in ms, -1 for ever; optional signal mask).
///
/// # Safety
/// `sigmask` is null or points at a valid signal set.
pub unsafe fn epoll_pwait(
    epfd: i32,
    evs: &mut [libc::epoll_event],
    timeout: i32,
    sigmask: *const libc::sigset_t,
) -> Res {
    // SAFETY: evs is a valid writable array; sigmask is null or the caller's valid set.
    ret(unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait,
            epfd,
            evs.as_mut_ptr(),
            evs.len() as i32,
            timeout,
            sigmask,
            8usize,
        )
    })
}

/// ppoll(2) with the caller's signal mask (null: unchanged) and timeout in ms (None: for ever).
///
/// # Safety
/// `sigmask` is null or points at a valid signal set.
pub unsafe fn ppoll_mask(
    fds: &mut [libc::pollfd],
    timeout_ms: Option<u64>,
    sigmask: *const libc::sigset_t,
) -> Res {
    let ts = timeout_ms.map(|ms| libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: fds is a valid slice; tsp null or live; sigmask null or the caller's valid set.
    ret(unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            fds.as_mut_ptr(),
            fds.len(),
            tsp,
            sigmask,
            8usize,
        )
    })
}

/// An int-valued SOL_SOCKET option (SO_DOMAIN, SO_TYPE).
pub fn sockopt(fd: i32, name: i32) -> Result<i32, i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid out-parameters of the sizes given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getsockopt,
            fd,
            libc::SOL_SOCKET,
            name,
            &mut v as *mut libc::c_int,
            &mut len as *mut libc::socklen_t,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(v)
    }
}
