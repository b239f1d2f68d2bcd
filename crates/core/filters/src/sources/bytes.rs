//! Byte sources: `file` (a file mapped as the DBuf) and `stdin`, cut into blocks by size
//! or by a delimiter.

use dataplane::{Args, Batch, BufId, Ctx, Filter, FilterError, Tag};
use std::io::Read;
use std::path::PathBuf;

/// How a byte source cuts its input into blocks.
#[derive(Debug, Clone, Copy)]
enum Split {
    Chunk(usize),
    Lines,
    Fixed(usize),
}

fn split_mode(a: &Args) -> Result<Split, FilterError> {
    let size = a.size("size", None, 0)? as usize;
    match a
        .get("split", None)
        .unwrap_or(if size > 0 { "fixed" } else { "bytes" })
    {
        "bytes" => Ok(Split::Chunk(if size > 0 { size } else { 64 * 1024 })),
        "lines" => Ok(Split::Lines),
        "fixed" if size > 0 => Ok(Split::Fixed(size)),
        "fixed" => Err(FilterError::Missing {
            key: "size".into(),
            expected: "split=fixed needs size=N".into(),
        }),
        m => Err(FilterError::bad("split", m, "bytes, lines or fixed")),
    }
}

/// Cut the next block from `data` at `off`: returns its length (0 at the end).
fn next_block(data: &[u8], off: usize, s: Split) -> usize {
    let rest = &data[off..];
    match s {
        Split::Chunk(n) | Split::Fixed(n) => rest.len().min(n),
        Split::Lines => match rest.iter().position(|&b| b == b'\n') {
            Some(i) => i + 1,
            None => rest.len(),
        },
    }
}

pub struct FileIn {
    path: PathBuf,
    split: Split,
    buf: BufId,
    off: usize,
    size: usize,
    opened: bool,
}

impl FileIn {
    pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
        let path = PathBuf::from(a.require("file", Some(0))?);
        std::fs::metadata(&path)
            .map_err(|e| FilterError::io(format!("cannot open {}", path.display()), e))?;
        Ok(Box::new(FileIn {
            path,
            split: split_mode(a)?,
            buf: 0,
            off: 0,
            size: 0,
            opened: false,
        }))
    }
}

impl Filter for FileIn {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if !self.opened {
            self.opened = true;
            match cx.store.add_file(&self.path) {
                Ok((b, n)) => {
                    self.buf = b;
                    self.size = n as usize;
                }
                Err(e) => {
                    cx.warn(format!("cannot map {}: {e}", self.path.display()));
                    cx.stop();
                    return false;
                }
            }
        }
        let data = cx.store.file(self.buf).unwrap_or(&[]);
        while out.len() < max && self.off < data.len() {
            let n = next_block(data, self.off, self.split);
            out.push(Tag {
                pos: self.off as u64,
                len: n as u32,
                buf: self.buf,
                class: 1,
            });
            self.off += n;
        }
        self.off < data.len()
    }
    fn progress(&self) -> Option<(u64, u64)> {
        Some((self.off as u64, self.size.max(1) as u64))
    }
}

// The declarations of this file's filters are data in the catalog
// (`catalog::sources::{FILE, STDIN}`); their constructors are below, paired with them in
// `filters::CONSTRUCTORS`.

pub struct StdinIn {
    split: Split,
    pending: Vec<u8>,
    eof: bool,
    buf: Vec<u8>,
}

impl StdinIn {
    pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
        Ok(Box::new(StdinIn {
            split: split_mode(a)?,
            pending: Vec::new(),
            eof: false,
            buf: Vec::new(),
        }))
    }

    /// Whether `pending` holds a whole block (or the last, at the end of input).
    fn block_ready(&self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        if self.eof {
            return true;
        }
        match self.split {
            Split::Lines => self.pending.contains(&b'\n'),
            Split::Fixed(s) => self.pending.len() >= s,
            Split::Chunk(_) => true,
        }
    }
}

impl Filter for StdinIn {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}

    /// Standard input is read in the space's own thread, only when it can be read without
    /// waiting (it stays blocking: the shell that started the run shares it), and the
    /// space sleeps on it with its other inputs.
    fn arm(&mut self, w: &mut dataplane::readiness::Arm<'_>, _source: bool) {
        use std::os::fd::AsFd;
        if self.eof || self.block_ready() {
            w.ready();
        } else {
            w.fd(std::io::stdin().as_fd());
        }
    }

    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        use std::os::fd::AsFd;
        // With whole blocks still pending (more than a batch came at once), they go out
        // first; otherwise one read of what is there now.
        if !self.eof && !self.block_ready() {
            let stdin = std::io::stdin();
            if dataplane::readiness::readable_now(stdin.as_fd()) {
                if self.buf.is_empty() {
                    self.buf = vec![0u8; 64 * 1024];
                }
                match stdin.lock().read(&mut self.buf) {
                    Ok(0) => self.eof = true,
                    Ok(n) => self.pending.extend_from_slice(&self.buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => self.eof = true,
                }
            }
        }
        let mut off = 0;
        while out.len() < max && off < self.pending.len() {
            let n = next_block(&self.pending, off, self.split);
            let complete = match self.split {
                Split::Lines => self.pending[off + n - 1] == b'\n',
                Split::Fixed(s) => n == s,
                Split::Chunk(_) => true,
            };
            if !complete && !self.eof {
                break;
            }
            let mut t = cx.store.push(&self.pending[off..off + n]);
            t.class = 1;
            out.push(t);
            off += n;
        }
        self.pending.drain(..off);
        !(self.eof && self.pending.is_empty())
    }
}
