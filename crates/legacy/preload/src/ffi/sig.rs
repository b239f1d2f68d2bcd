//! The interposed signal calls: `sigaction`, `signal`, `bsd_signal`, `sysv_signal`,
//! `siginterrupt`. The program's handlers go behind one trampoline (see `signal`), which
//! defers a signal while its thread is inside the library's locks and counts the handlers
//! that ran, and whether they had SA_RESTART.
//!
//! Owns: the C side of that: libc's own `sigaction`, the trampoline, calling a handler,
//! running the deferred ones (registered with `signal` as its runner), and showing the
//! program its own handlers where the kernel holds the trampoline.

use crate::{own, pipe, sys};
use std::ffi::{c_int, c_void};

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

/// libc's `sigaction` (it sets up the return trampoline the kernel needs).
fn real_sigaction() -> Option<SigactionFn> {
    static P: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    let p =
        *P.get_or_init(|| unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) } as usize);
    // SAFETY: p is libc's sigaction, whose C type is SigactionFn.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, SigactionFn>(p) })
}

/// What the kernel runs for every signal the program handles: defers it while this
/// thread is inside the library's locks, else counts it and runs the program's handler.
extern "C" fn trampoline(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let mut saved: crate::signal::Info = [0; 16];
    if !info.is_null() {
        // SAFETY: the kernel's siginfo_t, 128 bytes.
        saved = unsafe { std::ptr::read_unaligned(info.cast::<crate::signal::Info>()) };
    }
    if crate::signal::defer(sig, &saved) {
        return;
    }
    // SAFETY: the kernel's arguments for this signal.
    unsafe { deliver(sig, info, ctx) }
}

/// Run the program's handler for `sig`.
///
/// # Safety
/// `info` and `ctx` are what the kernel (or a deferred copy) gives a handler.
unsafe fn deliver(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let Some(a) = crate::signal::action(sig) else {
        return;
    };
    crate::signal::note_ran(a.restart);
    type Info3 = extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);
    type Plain = extern "C" fn(c_int);
    // SAFETY: the program installed this address as a handler of the C type its
    // SA_SIGINFO flag says.
    unsafe {
        if a.siginfo {
            std::mem::transmute::<usize, Info3>(a.handler)(sig, info, ctx)
        } else {
            std::mem::transmute::<usize, Plain>(a.handler)(sig)
        }
    }
}

/// Run the signals deferred on this thread (a `signal::Crit` section ended), each with
/// the mask the kernel would have set for its handler.
pub fn run_deferred() {
    let errno = sys::errno();
    while let Some((sig, info)) = crate::signal::take_pending() {
        // SAFETY: a signal number this thread received, with its saved siginfo.
        unsafe { run_one(sig, info) };
    }
    sys::set_errno(errno);
}

unsafe fn run_one(sig: c_int, mut info: crate::signal::Info) {
    let Some(real) = real_sigaction() else { return };
    // SAFETY: zeroed sigaction and sigset_t are valid values; the calls get valid pointers.
    unsafe {
        let mut k: libc::sigaction = std::mem::zeroed();
        real(sig, std::ptr::null(), &mut k);
        if k.sa_sigaction != trampoline as *const () as usize {
            // The program changed the disposition meanwhile: the kernel applies the new one.
            libc::syscall(
                libc::SYS_tgkill,
                sys::getpid(),
                libc::syscall(libc::SYS_gettid),
                sig,
            );
            return;
        }
        let mut set = k.sa_mask;
        if k.sa_flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut set, sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        deliver(sig, info.as_mut_ptr().cast(), std::ptr::null_mut());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// The program's view of an action the kernel holds (its handler, not the trampoline).
fn user_view(sig: c_int, mut k: libc::sigaction) -> libc::sigaction {
    if k.sa_sigaction == trampoline as *const () as usize {
        if let Some(a) = crate::signal::action(sig) {
            k.sa_sigaction = a.handler;
            if !a.siginfo {
                k.sa_flags &= !libc::SA_SIGINFO;
            }
        }
    }
    k
}

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(real) = real_sigaction() else {
        return sys::c_ret(Err(libc::ENOSYS)) as c_int;
    };
    if pipe::foreign()
        || own::is_internal()
        || sig == libc::SIGKILL
        || sig == libc::SIGSTOP
        || sig <= 0
        || sig as usize >= crate::signal::NSIG
    {
        // SAFETY: the caller's arguments, passed through.
        return unsafe { real(sig, act, old) };
    }
    // SAFETY: a zeroed sigaction is a valid value; the caller's act is null or valid.
    unsafe {
        let mut prev: libc::sigaction = std::mem::zeroed();
        if real(sig, std::ptr::null(), &mut prev) != 0 {
            return -1;
        }
        let seen = user_view(sig, prev);
        if !act.is_null() {
            let before = crate::signal::action(sig);
            let a = *act;
            let h = a.sa_sigaction;
            let r = if h == libc::SIG_DFL || h == libc::SIG_IGN || !crate::signal::fits(h) {
                crate::signal::clear_action(sig);
                real(sig, act, std::ptr::null_mut())
            } else {
                crate::signal::set_action(
                    sig,
                    crate::signal::Action {
                        handler: h,
                        siginfo: a.sa_flags & libc::SA_SIGINFO != 0,
                        restart: a.sa_flags & libc::SA_RESTART != 0,
                    },
                );
                // A signal is deferred only by the trampoline: from now on its end of a
                // section runs it here.
                crate::signal::set_runner(run_deferred);
                let mut k = a;
                k.sa_sigaction = trampoline as *const () as usize;
                k.sa_flags |= libc::SA_SIGINFO;
                real(sig, &k, std::ptr::null_mut())
            };
            if r != 0 {
                match before {
                    Some(b) => crate::signal::set_action(sig, b),
                    None => crate::signal::clear_action(sig),
                }
                return r;
            }
        }
        if !old.is_null() {
            *old = seen;
        }
    }
    0
}

/// Signals `siginterrupt` made interrupting (bit `sig`): `signal` leaves SA_RESTART off.
static INTERRUPTING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `signal`'s family: install `h` for `sig` with `flags`, blocking `sig` itself in the
/// handler unless `nodefer`.
unsafe fn install(sig: c_int, h: libc::sighandler_t, flags: c_int) -> libc::sighandler_t {
    // SAFETY: zeroed sigactions are valid; our own sigaction gets valid pointers.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        let mut old: libc::sigaction = std::mem::zeroed();
        a.sa_sigaction = h;
        a.sa_flags = flags;
        if flags & libc::SA_NODEFER == 0 && sig > 0 && sig < 64 {
            libc::sigaddset(&mut a.sa_mask, sig);
        }
        if sigaction(sig, &a, &mut old) != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }
}

/// signal(2) as glibc defines it (BSD semantics: SA_RESTART unless `siginterrupt` said).
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    unsafe { bsd_signal(sig, h) }
}

#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    let intr = (0..64).contains(&sig)
        && INTERRUPTING.load(std::sync::atomic::Ordering::Relaxed) & (1u64 << sig) != 0;
    unsafe { install(sig, h, if intr { 0 } else { libc::SA_RESTART }) }
}

/// System V semantics: the handler runs once, unblocked, and interrupts.
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    unsafe { install(sig, h, libc::SA_RESETHAND | libc::SA_NODEFER) }
}

#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: c_int, flag: c_int) -> c_int {
    if !(1..64).contains(&sig) {
        return sys::c_ret(Err(libc::EINVAL)) as c_int;
    }
    let bit = 1u64 << sig;
    if flag != 0 {
        INTERRUPTING.fetch_or(bit, std::sync::atomic::Ordering::Relaxed);
    } else {
        INTERRUPTING.fetch_and(!bit, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: zeroed sigaction is valid; our own sigaction gets valid pointers.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        if sigaction(sig, std::ptr::null(), &mut a) != 0 {
            return -1;
        }
        if flag != 0 {
            a.sa_flags &= !libc::SA_RESTART;
        } else {
            a.sa_flags |= libc::SA_RESTART;
        }
        sigaction(sig, &a, std::ptr::null_mut())
    }
}
