//! Legacy IPC on Streamline (thesis 3.4, 7.2, 7.3): an `LD_PRELOAD` library,
//! `libslpreload.so`, that gives unmodified, dynamically linked programs
//!
//! - **pipes as Beltway rings**: `pipe`, `pipe2` (and FIFOs) create a shared-memory byte
//!   ring beside the kernel pipe; `read`, `write`, `readv`, `writev`, `splice`, `poll`,
//!   `select`, `epoll_*`, `close`, `dup*`, `fcntl`, `ioctl(FIONREAD)` serve it with Unix
//!   pipe semantics, across `fork` and `exec`. A pipe end about to reach a program the
//!   library cannot serve (a static binary, an fd sent over a socket) turns the pipe back
//!   into the plain kernel pipe it always also was, data in order.
//! - **batched UDP sockets** for the ports a policy names (`STREAMLINE_UDP_PORTS`).
//!
//! Modules: `sys` (raw system calls; the library never calls libc's versions of the calls
//! it replaces), `vfd` (which fds are ours, and the interface the generic calls use),
//! `udp` (batched UDP sockets).

pub mod sys;
pub mod udp;
pub mod vfd;
