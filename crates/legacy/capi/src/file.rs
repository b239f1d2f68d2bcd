//! A path opened as a file (a PipesFS stream such as `/run/streamline/pipes/1/gen/all`, or
//! any file): the same calls stacked over read(2), write(2) and poll(2), as thesis 4.4
//! stacks every buffer behind one interface. A file is a byte stream: a read returns what
//! read(2) returns, not one record.
//!
//! Owns: the private buffer that `peek` and `peek_acquire` hand out, and its accounting for
//! `check`. Does not own: what the file's bytes mean (PipesFS formats them).

use crate::error::{Result, SlError};
use crate::reader::Block;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;

/// Largest peek of a file (the private buffer's size at most).
const PEEK_MAX: usize = 1 << 20;

pub struct FileStream {
    path: String,
    file: File,
    /// What the last `peek`/`peek_acquire` read (valid until the next call).
    buf: Vec<u8>,
    /// Bytes handed out by a `peek_acquire` not yet completed.
    held: Option<usize>,
    /// Bytes consumed so far (the read pointer `check` reports).
    consumed: u64,
}

impl FileStream {
    pub fn new(path: String, file: File) -> FileStream {
        FileStream {
            path,
            file,
            buf: Vec::new(),
            held: None,
            consumed: 0,
        }
    }

    fn io(&self, what: &str, e: std::io::Error) -> SlError {
        SlError::io(format!("{what} {}", self.path), e)
    }

    fn not_held(&self) -> Result<()> {
        match self.held {
            Some(_) => Err(SlError::inval(format!(
                "{}: a peek_acquire is outstanding (slfile_peek_complete first)",
                self.path
            ))),
            None => Ok(()),
        }
    }

    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        self.not_held()?;
        let n = self.file.read(buf).map_err(|e| self.io("read", e))?;
        self.consumed += n as u64;
        Ok(n)
    }

    /// Read up to `max` bytes into the private buffer.
    fn fill(&mut self, max: usize) -> Result<Option<Block>> {
        self.not_held()?;
        self.buf.resize(max.min(PEEK_MAX), 0);
        let n = self
            .file
            .read(&mut self.buf)
            .map_err(|e| SlError::io(format!("read {}", self.path), e))?;
        self.buf.truncate(n);
        Ok((n > 0).then_some(Block {
            ptr: self.buf.as_ptr(),
            len: n,
        }))
    }

    /// `peek`: the bytes stay in the private buffer until the next call.
    pub fn peek(&mut self, max: usize) -> Result<Option<Block>> {
        let b = self.fill(max)?;
        self.consumed += b.map_or(0, |b| b.len as u64);
        Ok(b)
    }

    pub fn peek_acquire(&mut self, max: usize) -> Result<Option<Block>> {
        let b = self.fill(max)?;
        self.held = b.map(|b| b.len);
        Ok(b)
    }

    pub fn peek_complete(&mut self, count: usize) -> Result<usize> {
        let Some(n) = self.held else {
            return Err(SlError::inval(format!(
                "{}: peek_complete without peek_acquire",
                self.path
            )));
        };
        if count > n {
            return Err(SlError::inval(format!(
                "{}: peek_complete of {count} bytes, but {n} were acquired",
                self.path
            )));
        }
        self.held = None;
        self.consumed += n as u64;
        Ok(n)
    }

    /// What was handed out is a private copy: it is never overwritten.
    pub fn check(&mut self, ts: i64) -> Result<i64> {
        if ts < -1 || ts > self.consumed as i64 {
            return Err(SlError::inval(format!(
                "{}: timestamp {ts} (expected -1 or a value slfile_check returned)",
                self.path
            )));
        }
        Ok(self.consumed as i64)
    }

    pub fn write(&mut self, data: &[u8]) -> Result<usize> {
        self.file.write(data).map_err(|e| self.io("write", e))
    }

    /// Whether reading would not block now (data, end of file, or an error to report).
    pub fn poll_fd(&self) -> PollFd<'_> {
        PollFd::new(self.file.as_fd(), PollFlags::POLLIN)
    }

    pub fn block(&mut self, timeout_ms: i32) -> Result<bool> {
        if self.held.is_some() {
            return Ok(true);
        }
        let mut fds = [self.poll_fd()];
        let n = poll(
            &mut fds,
            PollTimeout::try_from(timeout_ms.max(-1)).unwrap_or(PollTimeout::NONE),
        )
        .map_err(|e| SlError::new(e as i32, format!("poll {}: {e}", self.path)))?;
        Ok(n > 0)
    }
}

/// Poll several files for reading; which are ready.
pub fn poll_files(files: &[&FileStream], timeout_ms: i32) -> Result<Vec<bool>> {
    let mut fds: Vec<PollFd<'_>> = files.iter().map(|f| f.poll_fd()).collect();
    poll(
        &mut fds,
        PollTimeout::try_from(timeout_ms.max(-1)).unwrap_or(PollTimeout::NONE),
    )
    .map_err(|e| SlError::new(e as i32, format!("poll: {e}")))?;
    Ok(fds
        .iter()
        .zip(files)
        .map(|(p, f)| f.held.is_some() || p.revents().is_some_and(|r| !r.is_empty()))
        .collect())
}
