//! The user-facing stream interface of thesis Table 4.1, as two small traits every ring
//! implementation stacks behind, plus the IPC constructors.
//!
//! | Table 4.1           | here                                   |
//! |---------------------|----------------------------------------|
//! | read / peek         | [`Source::read`], [`Source::peek`]     |
//! | peek_acquire/complete | [`Source::peek_acquire`], [`Source::peek_complete`] |
//! | write / poke        | [`Sink::write`], [`Sink::poke`]        |
//! | poke_acquire/complete | [`Sink::poke_acquire`], [`Sink::poke_complete`] |
//! | append              | [`crate::Writer::open_record`] + `append` |
//! | check               | [`Source::check`]                      |
//! | block / select      | [`Source::block`], [`select`]          |
//! | pipe / mpipe / mkfifo | [`pipe`], [`mpipe`], [`mkfifo`] + [`open_fifo`] |

use crate::error::{Error, Result};
use crate::ibuf::{IbufReader, IbufWriter};
use crate::ring::{Peeked, Reader, Ready, RingConfig, Start, Writer};
use std::time::Duration;

/// The read side of a stream.
pub trait Source {
    /// Copy the next data into `buf` (one record on record rings); 0 at end of stream.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize>;
    /// Borrow the next block in place without consuming it; `None` at end of stream.
    fn peek_acquire(&mut self, max: usize) -> Result<Option<Peeked<'_>>>;
    /// Consume the block borrowed by `peek_acquire`.
    fn peek_complete(&mut self) -> Result<()>;
    /// Verify that data at or after `pos` has not been overwritten.
    fn check(&mut self, pos: u64) -> Result<()>;
    /// Wait for data, end of stream, or the timeout.
    fn block(&mut self, timeout: Option<Duration>) -> Result<Ready>;

    /// Borrow and consume the next block in one call (thesis `peek`), handing it to `f`.
    fn peek<R>(&mut self, max: usize, f: impl FnOnce(Peeked<'_>) -> R) -> Result<Option<R>>
    where
        Self: Sized,
    {
        let r = match self.peek_acquire(max)? {
            Some(p) => f(p),
            None => return Ok(None),
        };
        self.peek_complete()?;
        Ok(Some(r))
    }
}

/// The write side of a stream.
pub trait Sink {
    /// Write `data` (all of it on byte rings; one record on record rings).
    fn write(&mut self, data: &[u8]) -> Result<usize>;
    /// Borrow writable space at the write position without publishing it.
    fn poke_acquire(&mut self, len: usize) -> Result<&mut [u8]>;
    /// Publish the first `len` bytes of the acquired space; returns their position.
    fn poke_complete(&mut self, len: usize) -> Result<u64>;
    /// End the stream: readers drain, then see EOF.
    fn close(&mut self);

    /// Fill up to `len` bytes in place with `f` (which returns how many it wrote).
    fn poke(&mut self, len: usize, f: impl FnOnce(&mut [u8]) -> usize) -> Result<u64>
    where
        Self: Sized,
    {
        let buf = self.poke_acquire(len)?;
        let n = f(buf);
        self.poke_complete(n)
    }
}

impl Source for Reader {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        Reader::read(self, buf)
    }
    fn peek_acquire(&mut self, max: usize) -> Result<Option<Peeked<'_>>> {
        Reader::peek_acquire(self, max)
    }
    fn peek_complete(&mut self) -> Result<()> {
        Reader::peek_complete(self)
    }
    fn check(&mut self, pos: u64) -> Result<()> {
        Reader::check(self, pos)
    }
    fn block(&mut self, timeout: Option<Duration>) -> Result<Ready> {
        Reader::block(self, timeout)
    }
}

impl Sink for Writer {
    fn write(&mut self, data: &[u8]) -> Result<usize> {
        Writer::write(self, data)
    }
    fn poke_acquire(&mut self, len: usize) -> Result<&mut [u8]> {
        Writer::poke_acquire(self, len)
    }
    fn poke_complete(&mut self, len: usize) -> Result<u64> {
        Writer::poke_complete(self, len)
    }
    fn close(&mut self) {
        Writer::close(self)
    }
}

impl Source for IbufReader {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        IbufReader::read(self, buf)
    }
    fn peek_acquire(&mut self, _max: usize) -> Result<Option<Peeked<'_>>> {
        Ok(IbufReader::peek_acquire(self)?.map(|(_, p)| p))
    }
    fn peek_complete(&mut self) -> Result<()> {
        IbufReader::peek_complete(self)
    }
    fn check(&mut self, pos: u64) -> Result<()> {
        self.tags().check(pos)
    }
    fn block(&mut self, timeout: Option<Duration>) -> Result<Ready> {
        let _ = timeout;
        Err(Error::Unsupported {
            name: self.tags().shared().name().to_string(),
            what: "block on an IBuf reader (block on its tag ring)",
        })
    }
}

impl Sink for IbufWriter {
    fn write(&mut self, data: &[u8]) -> Result<usize> {
        IbufWriter::write(self, data)
    }
    fn poke_acquire(&mut self, len: usize) -> Result<&mut [u8]> {
        IbufWriter::poke_acquire(self, len)
    }
    fn poke_complete(&mut self, len: usize) -> Result<u64> {
        IbufWriter::poke_complete(self, len, 1).map(|t| t.pos)
    }
    fn close(&mut self) {
        IbufWriter::close(self)
    }
}

/// A Unix-pipe-like stream in shared memory: lossless, blocking, EOF when the writer
/// closes, broken pipe when the reader goes.
pub fn pipe(size: usize) -> Result<(Writer, Reader)> {
    let w = Writer::create("pipe", RingConfig::bytes(size))?;
    let r = w.ring().reader(Start::Oldest)?;
    Ok((w, r))
}

/// A multiway pipe: one writer, `readers` readers each with a private position; every reader
/// sees every byte (thesis "mpipe").
pub fn mpipe(size: usize, readers: usize) -> Result<(Writer, Vec<Reader>)> {
    let w = Writer::create("mpipe", RingConfig::bytes(size))?;
    let rs = (0..readers)
        .map(|_| w.ring().reader(Start::Oldest))
        .collect::<Result<Vec<_>>>()?;
    Ok((w, rs))
}

/// Create a named stream (`/dev/shm/NAME`) that other processes open with [`open_fifo`].
/// Replaces a stale one left by a crashed writer.
pub fn mkfifo(name: &str, cfg: RingConfig) -> Result<Writer> {
    Writer::create_named(name, cfg)
}

/// Open a named stream for reading.
pub fn open_fifo(name: &str, start: Start) -> Result<Reader> {
    Reader::open(name, start)
}

/// Block on a group of streams (thesis `slfile_select`): returns the index of one that has
/// data or has ended, or `None` on timeout.
pub fn select(readers: &mut [&mut Reader], timeout: Option<Duration>) -> Result<Option<usize>> {
    crate::ring::select(readers, timeout)
}
