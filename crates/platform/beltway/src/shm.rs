//! Shared memory segments: a file (memfd, or a named object under /dev/shm with Unix
//! permission bits) mapped into this process, read-only or read-write depending on what the
//! caller may open.
//!
//! Owns: creation, opening with permission fallback (a client without write permission maps
//! read-only), typed access to `#[repr(C)]` metadata placed in the segment, and bounds-checked
//! byte access to the data area. Does not own: what the bytes mean (see [`crate::ring`]).
//!
//! Shared memory carries offsets and absolute positions, never pointers; the only types
//! placed in it are marked [`ShmSafe`].

#![allow(unsafe_code)]

use crate::sys::{self, Mmap};
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Marker for types that may be placed in shared memory and viewed through `&T`.
///
/// # Safety
/// An implementor must be `#[repr(C)]`, contain no pointers or references, be valid for
/// every bit pattern (all-zero in particular, which is what a fresh segment holds), and use
/// only atomics for fields that any party mutates after creation.
pub unsafe trait ShmSafe: Sync {}

/// Where a segment lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// An anonymous memfd, shared by passing its descriptor.
    Memfd,
    /// A file at this path (normally under /dev/shm), shared by name.
    Path(String),
}

/// A mapped shared memory segment.
#[derive(Debug)]
pub struct Segment {
    map: Mmap,
    fd: OwnedFd,
    backing: Backing,
}

impl Segment {
    /// Create an anonymous segment of `len` bytes (zero-filled).
    pub fn create_memfd(name: &str, len: usize) -> io::Result<Segment> {
        let fd = sys::memfd_create(name, len as u64)?;
        let map = Mmap::map(&fd, len, true)?;
        Ok(Segment {
            map,
            fd,
            backing: Backing::Memfd,
        })
    }

    /// Create a named segment at `path` with permission bits `mode`. Fails if it exists.
    pub fn create_path(path: &str, len: usize, mode: u32) -> io::Result<Segment> {
        let fd = sys::open_path(path, true, Some(mode), true)?;
        let res = sys::ftruncate(&fd, len as u64).and_then(|_| Mmap::map(&fd, len, true));
        match res {
            Ok(map) => Ok(Segment {
                map,
                fd,
                backing: Backing::Path(path.to_string()),
            }),
            Err(e) => {
                let _ = sys::unlink(path);
                Err(e)
            }
        }
    }

    /// Open an existing named segment, read-write if permitted, else read-only
    /// (`want_write = false` asks for read-only directly).
    pub fn open_path(path: &str, want_write: bool) -> io::Result<Segment> {
        let fd = if want_write {
            match sys::open_path(path, true, None, false) {
                Ok(fd) => fd,
                Err(e)
                    if e.raw_os_error() == Some(libc::EACCES)
                        || e.raw_os_error() == Some(libc::EROFS) =>
                {
                    sys::open_path(path, false, None, false)?
                }
                Err(e) => return Err(e),
            }
        } else {
            sys::open_path(path, false, None, false)?
        };
        Self::map_fd(fd, Backing::Path(path.to_string()))
    }

    /// Map a segment at `path` opened by the caller (e.g. with its owner checked), read-only
    /// unless `fd` was opened for writing.
    pub fn from_path_fd(fd: OwnedFd, path: &str) -> io::Result<Segment> {
        Self::map_fd(fd, Backing::Path(path.to_string()))
    }

    /// Map a segment received as a descriptor (e.g. over a Unix socket).
    pub fn from_fd(fd: OwnedFd) -> io::Result<Segment> {
        Self::map_fd(fd, Backing::Memfd)
    }

    fn map_fd(fd: OwnedFd, backing: Backing) -> io::Result<Segment> {
        let len = sys::fd_size(&fd)?;
        if len == 0 || len > isize::MAX as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("segment has unusable size {len}"),
            ));
        }
        let writable = sys::fd_writable(&fd)?;
        let map = Mmap::map(&fd, len as usize, writable)?;
        Ok(Segment { map, fd, backing })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn writable(&self) -> bool {
        self.map.writable()
    }
    pub fn backing(&self) -> &Backing {
        &self.backing
    }
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
    /// Address range of the mapping in this process (used for splice detection only).
    pub fn addr_range(&self) -> std::ops::Range<usize> {
        let base = self.map.ptr() as usize;
        base..base + self.map.len()
    }

    /// View a `T` placed at `offset`.
    ///
    /// Panics if the range is out of bounds or misaligned: segment layouts are computed and
    /// validated when the ring is opened, so this is an internal invariant, not input checking.
    pub fn get<T: ShmSafe>(&self, offset: usize) -> &T {
        let size = std::mem::size_of::<T>();
        assert!(
            offset.checked_add(size).is_some_and(|e| e <= self.len()),
            "shm object out of bounds"
        );
        let addr = self.map.ptr() as usize + offset;
        assert_eq!(addr % std::mem::align_of::<T>(), 0, "misaligned shm object");
        // SAFETY: the range lies inside the live mapping (checked above) and is aligned; T is
        // ShmSafe, so every bit pattern is a valid T and shared mutation only happens through
        // its atomics; the reference cannot outlive &self and so not the mapping. Atomic
        // loads of <= 8 bytes on x86-64/aarch64 are plain loads and are fine on a read-only
        // mapping; stores are only issued by callers that hold a writable mapping.
        unsafe { &*(addr as *const T) }
    }

    /// Borrow `len` bytes at `offset` of the segment.
    ///
    /// The bytes may be changed concurrently by a writer in another process when the ring's
    /// protocol allows it (lossy rings); callers validate such reads afterwards with the
    /// ring's position check, as the thesis prescribes for peek.
    pub fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len()),
            "shm read out of bounds"
        );
        // SAFETY: in bounds of the live mapping; u8 has no invalid bit patterns; lifetime is
        // tied to &self.
        unsafe { std::slice::from_raw_parts(self.map.ptr().add(offset), len) }
    }

    /// Copy `src` into the segment at `offset`. Panics on a read-only mapping.
    pub fn write_at(&self, offset: usize, src: &[u8]) {
        assert!(self.writable(), "write to a read-only shm mapping");
        assert!(
            offset
                .checked_add(src.len())
                .is_some_and(|e| e <= self.len()),
            "shm write out of bounds"
        );
        // SAFETY: in bounds of a writable live mapping; src is a Rust slice and cannot
        // overlap the shared mapping's reserved range (the ring protocol hands each range to
        // one writer at a time, and no &[u8] of it is live for readers until published).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.map.ptr().add(offset), src.len())
        }
    }

    /// Borrow a writable range that the ring protocol has reserved for the holder of
    /// `token` alone. The token is owned by exactly one producer handle and is borrowed
    /// mutably for as long as the slice lives, so one producer cannot hold two overlapping
    /// ranges; distinct producers receive disjoint reservations from the ring.
    pub fn reserved_mut<'a>(
        &'a self,
        _token: &'a mut WriteToken,
        offset: usize,
        len: usize,
    ) -> &'a mut [u8] {
        assert!(self.writable(), "write to a read-only shm mapping");
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len()),
            "shm write out of bounds"
        );
        // SAFETY: in bounds of a writable live mapping; exclusivity within this process is
        // enforced by the &mut WriteToken borrow, across producers by the ring's reservation
        // protocol (a range is reserved by one producer until it is committed).
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr().add(offset), len) }
    }
}

/// Proof of being a ring's producer; see [`Segment::reserved_mut`]. Not Clone.
#[derive(Debug, Default)]
pub struct WriteToken {
    _p: PhantomData<*mut ()>,
}
// SAFETY: the token carries no data; it is only a borrow-checker device.
unsafe impl Send for WriteToken {}

/// Round up to a multiple of the page size.
pub fn page_round(n: usize) -> usize {
    n.div_ceil(4096) * 4096
}
