//! Reading a named stream (an IBuf of tags and the DBuf they point into): record by record,
//! by copy (`read`) or in place (`peek`, `peek_acquire`/`peek_complete`), with `check`'s
//! timestamps over the data ring's overwrite horizon.
//!
//! Owns: the per-descriptor read state (an outstanding `peek_acquire`, a `peek` completed
//! at the next call, the timestamps). Does not own: finding and mapping the rings (`open`).

use crate::error::{Result, SlError};
use beltway::{IbufReader, Ready, Tag};
use std::time::Duration;

/// One record handed out in place: its first byte and the bytes handed out (at most the
/// caller's count).
#[derive(Debug, Clone, Copy)]
pub struct Block {
    pub ptr: *const u8,
    pub len: usize,
}

pub struct RingReader {
    name: String,
    ibuf: IbufReader,
    /// The DBuf the stream's tags point into (what `check` looks at).
    data_id: u16,
    nonblock: bool,
    /// Bytes handed out by a `peek_acquire` not yet completed.
    held: Option<usize>,
    /// A `peek` handed a record out; its tag is released at the next call.
    deferred: bool,
    /// Data-ring position just past the last record handed out (the read pointer `check`
    /// reports).
    last_end: u64,
    /// The last timestamp `check` gave out, and the first record handed out since.
    mark: Option<u64>,
    first: Option<Tag>,
}

impl RingReader {
    pub fn new(name: String, ibuf: IbufReader, data_id: u16, nonblock: bool) -> RingReader {
        RingReader {
            name,
            ibuf,
            data_id,
            nonblock,
            held: None,
            deferred: false,
            last_end: 0,
            mark: None,
            first: None,
        }
    }

    /// Release what a `peek` handed out at the previous call. Whether it was overwritten
    /// meanwhile is `check`'s to say, so the verdict is not reported here.
    fn settle(&mut self) {
        if std::mem::take(&mut self.deferred) {
            let _ = self.ibuf.peek_complete();
        }
    }

    /// The next record in place, its tag held, and what `f` made of its first `max` bytes
    /// while they were borrowed; `None` at end of stream.
    fn acquire<R>(&mut self, max: usize, f: impl FnOnce(&[u8]) -> R) -> Result<Option<(Block, R)>> {
        self.settle();
        if self.held.is_some() {
            return Err(SlError::inval(format!(
                "stream {}: a peek_acquire is outstanding (slfile_peek_complete first)",
                self.name
            )));
        }
        let mut f = Some(f);
        loop {
            if self.nonblock
                && self
                    .ibuf
                    .tags_mut()
                    .block(Some(Duration::ZERO))
                    .map_err(SlError::ring)?
                    == Ready::TimedOut
            {
                return Err(SlError::new(
                    libc::EAGAIN,
                    format!("stream {}: no record yet (O_NONBLOCK)", self.name),
                ));
            }
            let (tag, block, made) = match self.ibuf.peek_acquire().map_err(SlError::ring)? {
                None => return Ok(None),
                // An empty record would read as the end of the stream: none is handed out.
                Some((_, p)) if p.data.is_empty() => (None, None, None),
                Some((tag, p)) => {
                    let n = p.data.len().min(max);
                    let made = f.take().map(|f| f(&p.data[..n]));
                    (
                        Some((tag, p.data.len())),
                        Some(Block {
                            ptr: p.data.as_ptr(),
                            len: n,
                        }),
                        made,
                    )
                }
            };
            let (Some((tag, len)), Some(block), Some(made)) = (tag, block, made) else {
                let _ = self.ibuf.peek_complete();
                continue;
            };
            if self.first.is_none() {
                self.first = Some(Tag { len: 0, ..tag });
            }
            self.last_end = tag.pos + len as u64;
            self.held = Some(block.len);
            return Ok(Some((block, made)));
        }
    }

    /// `slfile_read`: copy the next record (cut to `buf`'s length); 0 at end of stream.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let Some((b, ())) = self.acquire(buf.len(), |d| buf[..d.len()].copy_from_slice(d))? else {
            return Ok(0);
        };
        self.held = None;
        // Still held during the copy: a registered reader's bytes could not change under
        // it; an observer's copy counts only if the record was not overwritten meanwhile.
        match self.ibuf.peek_complete() {
            Ok(()) => Ok(b.len),
            Err(e) => Err(SlError::ring(e)),
        }
    }

    /// `slfile_peek`: the next record in place, released at the next call on this stream.
    pub fn peek(&mut self, max: usize) -> Result<Option<Block>> {
        let b = self.acquire(max, |_| ())?.map(|(b, ())| b);
        if b.is_some() {
            self.held = None;
            self.deferred = true;
        }
        Ok(b)
    }

    /// `slfile_peek_acquire`: the next record in place, held until `peek_complete`.
    pub fn peek_acquire(&mut self, max: usize) -> Result<Option<Block>> {
        Ok(self.acquire(max, |_| ())?.map(|(b, ())| b))
    }

    /// `slfile_peek_complete`: release the held record; its length as handed out. ESTALE
    /// when an observer's record was overwritten while it was held (released anyway).
    pub fn peek_complete(&mut self, count: usize) -> Result<usize> {
        self.settle();
        let Some(n) = self.held else {
            return Err(SlError::inval(format!(
                "stream {}: peek_complete without peek_acquire",
                self.name
            )));
        };
        if count > n {
            return Err(SlError::inval(format!(
                "stream {}: peek_complete of {count} bytes, but {n} were acquired",
                self.name
            )));
        }
        self.held = None;
        self.ibuf
            .peek_complete()
            .map_err(|e| SlError::new(libc::ESTALE, format!("{e} (while the record was held)")))?;
        Ok(n)
    }

    /// `slfile_check` (thesis 4.4.1): -1 starts; a timestamp this stream gave out verifies
    /// that no record handed out since was overwritten, and returns the next timestamp.
    /// Timestamps are data-ring positions (the read pointer); any position at or below the
    /// read pointer may be passed, meaning "data at or after this position".
    pub fn check(&mut self, ts: i64) -> Result<i64> {
        let since = match ts {
            -1 => None,
            t if t < 0 => {
                return Err(SlError::inval(format!(
                    "stream {}: timestamp {t} (expected -1 or a value slfile_check returned)",
                    self.name
                )))
            }
            t if Some(t as u64) == self.mark => self.first,
            t if t as u64 <= self.last_end => Some(Tag {
                pos: t as u64,
                len: 0,
                buf: self.data_id,
                class: 0,
            }),
            t => {
                return Err(SlError::inval(format!(
                    "stream {}: timestamp {t} lies ahead of the read pointer {}",
                    self.name, self.last_end
                )))
            }
        };
        if let Some(tag) = since {
            if let Err(e) = self.ibuf.table().check(&tag) {
                self.mark = None;
                return Err(SlError::new(
                    libc::ESTALE,
                    format!(
                        "stream {}: data handed out since timestamp {ts} was overwritten ({e})",
                        self.name
                    ),
                ));
            }
        }
        self.mark = Some(self.last_end);
        self.first = None;
        Ok(self.last_end as i64)
    }

    /// `slfile_block`: true when a record (or the end of the stream) is there.
    pub fn block(&mut self, timeout: Option<Duration>) -> Result<bool> {
        self.settle();
        Ok(self.ibuf.tags_mut().block(timeout).map_err(SlError::ring)? != Ready::TimedOut)
    }

    /// For `slfile_select`: the tag ring's reader, with what `peek` handed out released.
    pub fn select_handle(&mut self) -> &mut beltway::Reader {
        self.settle();
        self.ibuf.tags_mut()
    }
}
