//! One open stream, whatever is behind it, and the calls of Table 4.1 dispatched to it;
//! `select` over several.
//!
//! Owns: which call each kind of stream takes (a read on a stream opened for writing is
//! EBADF, as read(2) on a write-only descriptor is; a call a kind cannot serve is EINVAL).
//! Does not own: the calls' semantics (`reader`, `writer`, `file`).

use crate::error::{Result, SlError};
use crate::file::FileStream;
use crate::reader::{Block, RingReader};
use crate::writer::RingWriter;
use std::time::{Duration, Instant};

// Each stream lives once, on the heap behind the table's Arc: variant sizes cost nothing.
#[allow(clippy::large_enum_variant)]
pub enum Stream {
    /// A named stream read through its rings.
    Reader(RingReader),
    /// A stream this process created and writes.
    Writer(RingWriter),
    /// A path opened as a file (PipesFS).
    File(FileStream),
    /// Closed by `slfile_close` while another thread still had it: calls fail with EBADF.
    Closed,
}

fn badf(what: &str) -> SlError {
    SlError::new(libc::EBADF, what.to_string())
}

fn inval(what: &str) -> SlError {
    SlError::inval(what.to_string())
}

impl Stream {
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        match self {
            Stream::Reader(r) => r.read(buf),
            Stream::File(f) => f.read(buf),
            Stream::Writer(_) => Err(badf("read on a stream opened for writing")),
            Stream::Closed => Err(badf("the stream was closed")),
        }
    }

    pub fn peek(&mut self, max: usize) -> Result<Option<Block>> {
        match self {
            Stream::Reader(r) => r.peek(max),
            Stream::File(f) => f.peek(max),
            Stream::Writer(_) => Err(badf("peek on a stream opened for writing")),
            Stream::Closed => Err(badf("the stream was closed")),
        }
    }

    pub fn peek_acquire(&mut self, max: usize) -> Result<Option<Block>> {
        match self {
            Stream::Reader(r) => r.peek_acquire(max),
            Stream::File(f) => f.peek_acquire(max),
            Stream::Writer(_) => Err(badf("peek_acquire on a stream opened for writing")),
            Stream::Closed => Err(badf("the stream was closed")),
        }
    }

    pub fn peek_complete(&mut self, count: usize) -> Result<usize> {
        match self {
            Stream::Reader(r) => r.peek_complete(count),
            Stream::File(f) => f.peek_complete(count),
            Stream::Writer(_) => Err(badf("peek_complete on a stream opened for writing")),
            Stream::Closed => Err(badf("the stream was closed")),
        }
    }

    pub fn write(&mut self, data: &[u8]) -> Result<usize> {
        match self {
            Stream::Writer(w) => w.write(data),
            Stream::File(f) => f.write(data),
            Stream::Reader(_) => Err(badf("write on a stream opened for reading")),
            Stream::Closed => Err(badf("the stream was closed")),
        }
    }

    fn writer(&mut self, call: &str) -> Result<&mut RingWriter> {
        match self {
            Stream::Writer(w) => Ok(w),
            Stream::File(_) => Err(inval(&format!("{call} on a file (write instead)"))),
            Stream::Reader(_) => Err(badf(&format!("{call} on a stream opened for reading"))),
            Stream::Closed => Err(badf("the stream was closed")),
        }
    }

    pub fn poke(&mut self, count: usize) -> Result<*mut u8> {
        self.writer("poke")?.poke(count)
    }

    pub fn poke_acquire(&mut self, count: usize) -> Result<*mut u8> {
        self.writer("poke_acquire")?.poke_acquire(count)
    }

    pub fn poke_complete(&mut self, count: usize) -> Result<usize> {
        self.writer("poke_complete")?.poke_complete(count)
    }

    pub fn append(&mut self, data: &[u8]) -> Result<usize> {
        self.writer("append")?.append(data)
    }

    /// `slfile_check`: `flags` says which pointer (O_RDONLY: the read pointer, O_WRONLY:
    /// the write pointer) and must match how the stream was opened.
    pub fn check(&mut self, ts: i64, flags: i32) -> Result<i64> {
        let acc = flags & libc::O_ACCMODE;
        match self {
            Stream::Reader(r) if acc == libc::O_RDONLY => r.check(ts),
            Stream::File(f) if acc == libc::O_RDONLY => f.check(ts),
            Stream::Writer(w) if acc == libc::O_WRONLY => w.check(ts),
            Stream::Closed => Err(badf("the stream was closed")),
            _ => Err(inval(&format!("check with flags {flags:#o}: O_RDONLY checks a stream opened for reading, O_WRONLY one opened for writing"))),
        }
    }

    /// `slfile_block`: whether data (or the end) is there before the timeout.
    pub fn block(&mut self, timeout_ms: i32) -> Result<bool> {
        match self {
            Stream::Reader(r) => r.block(timeout(timeout_ms)),
            Stream::File(f) => f.block(timeout_ms),
            Stream::Writer(_) => Err(badf(
                "block waits for data to read; the stream is opened for writing",
            )),
            Stream::Closed => Err(badf("the stream was closed")),
        }
    }

    pub fn close(&mut self) -> Result<()> {
        let r = match self {
            Stream::Writer(w) => w.close(),
            _ => Ok(()),
        };
        *self = Stream::Closed;
        r
    }
}

/// A timeout in milliseconds, negative meaning none.
pub fn timeout(ms: i32) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// How long one wait on the rings of a mixed `select` lasts before the files are polled.
const MIXED_SLICE: Duration = Duration::from_millis(5);

/// `slfile_select`: wait until at least one of `streams` has data (or its end); which do.
/// Rings are waited on with futex_waitv (woken at once); files with poll(2). A set with
/// both waits on the rings in slices of 5 ms and polls the files between them.
pub fn select(streams: &mut [&mut Stream], timeout_ms: i32) -> Result<Vec<bool>> {
    let deadline = timeout(timeout_ms).map(|t| Instant::now() + t);
    loop {
        let ready = ready_now(streams)?;
        if ready.iter().any(|r| *r) || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(ready);
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let files = streams.iter().any(|s| matches!(s, Stream::File(_)));
        let mut rings: Vec<&mut beltway::Reader> = streams
            .iter_mut()
            .filter_map(|s| match &mut **s {
                Stream::Reader(r) => Some(r.select_handle()),
                _ => None,
            })
            .collect();
        if rings.is_empty() {
            let fs: Vec<&FileStream> = streams
                .iter()
                .filter_map(|s| {
                    if let Stream::File(f) = &**s {
                        Some(f)
                    } else {
                        None
                    }
                })
                .collect();
            let ms = left.map_or(-1, |l| l.as_millis().min(i32::MAX as u128) as i32);
            crate::file::poll_files(&fs, ms)?;
        } else {
            let wait = if files {
                Some(left.map_or(MIXED_SLICE, |l| l.min(MIXED_SLICE)))
            } else {
                left
            };
            beltway::select(&mut rings, wait).map_err(SlError::ring)?;
        }
    }
}

/// Which streams would not block a read now.
fn ready_now(streams: &mut [&mut Stream]) -> Result<Vec<bool>> {
    let mut ready = vec![false; streams.len()];
    let files: Vec<(usize, &FileStream)> = streams
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            if let Stream::File(f) = &**s {
                Some((i, f))
            } else {
                None
            }
        })
        .collect();
    if !files.is_empty() {
        let fs: Vec<&FileStream> = files.iter().map(|(_, f)| *f).collect();
        for ((i, _), r) in files.iter().zip(crate::file::poll_files(&fs, 0)?) {
            ready[*i] = r;
        }
    }
    for (i, s) in streams.iter_mut().enumerate() {
        match &mut **s {
            Stream::Reader(r) => ready[i] = r.block(Some(Duration::ZERO))?,
            Stream::File(_) => {}
            Stream::Writer(_) => {
                return Err(badf(
                    "select waits for data to read; a stream in the set is opened for writing",
                ))
            }
            Stream::Closed => return Err(badf("a stream in the set was closed")),
        }
    }
    Ok(ready)
}
