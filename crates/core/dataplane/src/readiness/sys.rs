//! The one unsafe step of the readiness handle: a descriptor a source declared by number
//! ([`super::Arm`] collects numbers, since the sources are borrowed one at a time while
//! the space gathers them) added to the epoll set.
#![allow(unsafe_code)]

use nix::sys::epoll::{Epoll, EpollEvent};
use std::os::fd::{BorrowedFd, RawFd};

/// Add descriptor `fd`, declared by a source of this round, to `ep`.
pub(super) fn add_declared(ep: &Epoll, fd: RawFd, ev: EpollEvent) -> nix::Result<()> {
    // SAFETY: `fd` was declared through `Arm::fd` / `Arm::signal` by a source that is still
    // alive (the round's sources are not dropped between arming and sleeping) and keeps
    // it open while it declares it (their contract); the borrow ends with this call, and
    // epoll_ctl only takes a reference to the open file, never closes it.
    let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
    ep.add(bfd, ev)
}
