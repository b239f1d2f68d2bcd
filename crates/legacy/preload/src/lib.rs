//! Legacy IPC on Streamline (thesis 3.4, 7.2, 7.3): an `LD_PRELOAD` library,
//! `libslpreload.so`, that gives unmodified, dynamically linked programs
//!
//! - **pipes as Beltway rings**: `pipe` and `pipe2` create a shared-memory byte ring
//!   ([`beltway::stream`]) beside the kernel pipe; `read`, `write`, `readv`, `writev`,
//!   `splice`, `sendfile`, `poll`, `select`, `epoll_*`, `close`, `dup*`, `fcntl`,
//!   `ioctl(FIONREAD)` and stdio streams serve it with Unix pipe semantics, across `fork`
//!   and `exec`. A pipe end about to reach a program the library cannot serve (a static
//!   binary, an fd sent over a socket) turns the pipe back into the plain kernel pipe it
//!   always also was, bytes in order.
//! - **batched UDP sockets** for the ports a policy names (`STREAMLINE_UDP_PORTS`).
//! - **process shaping** (seed 004): under `streamline shape`, network and disk calls wait
//!   for tokens from a budget shared by the program's processes (`STREAMLINE_SHAPE_FD`).
//!
//! Modules: `sys` (raw system calls; the library never calls libc's versions of the calls
//! it replaces), `vfd` (which fds are ours, and the interface the generic calls use),
//! `own` (the library's own calls and descriptors, which the program's calls step
//! around), `pipe` (ring pipes), `wait` (poll/select/epoll over both kinds of fd), `ffi`
//! (the interposed calls; `ffi::stdio`: FILE streams, dprintf), `exec` (exec and spawn,
//! execl's family), `signal` (handlers behind a trampoline: SA_RESTART, no handler inside
//! the library's locks), `udp` (batched UDP sockets), `shape` (shaped network and disk
//! calls).
//!
//! Switches: `STREAMLINE_PIPES=off` leaves pipes to the kernel; `STREAMLINE_PIPE_SIZE`
//! sets the ring size of new pipes (bytes, 4096 to 2^30, default 256 KiB; anything else is
//! refused with a line on stderr and the program's pipes stay kernel pipes).

pub mod exec;
pub mod ffi;
pub mod own;
pub mod pipe;
pub mod shape;
pub mod signal;
pub mod sys;
pub mod udp;
pub mod vfd;
pub mod wait;

extern "C" fn init() {
    pipe::discover();
    shape::init();
    ffi::stdio::rebind();
    // SAFETY: registering plain functions with no state.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork));
        libc::atexit(at_exit);
    }
}

extern "C" fn after_fork() {
    pipe::set_owner();
    beltway::stream::after_fork();
    shape::after_fork();
}

extern "C" fn at_exit() {
    pipe::at_exit();
    vfd::before_block();
    shape::at_exit();
}

/// Run `init` when the library is loaded, before the program's `main`.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
