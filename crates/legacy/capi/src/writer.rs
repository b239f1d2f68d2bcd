//! Writing a stream this process created (`slfile_open(name, O_WRONLY|O_CREAT, mode)`): a
//! named IBuf under /dev/shm with the export naming (`streamline.NAME` for the tags,
//! `streamline.NAME.data` for the bytes), so readers find it as they find a pipeline's
//! exported stream, through the daemon's `open_stream`.
//!
//! Owns: the rings' creation and removal, the record a `poke` or a run of `append`s keeps
//! open, and the write side of `check`. Does not own: the rings themselves (beltway).

use crate::error::{Result, SlError};
use beltway::{IbufWriter, Layout, RingConfig, Writer};
use std::time::Duration;

/// Largest record built by `slfile_append` (the window it fills in place, which never
/// wraps around the ring's end).
pub(crate) const APPEND_MAX: usize = 65536;
/// Tag slots of a created stream (records in flight), as a pipeline's export has.
const TAG_RING: usize = 1 << 20;
/// Data bytes of a created stream, as a pipeline's export has by default.
const DATA_RING: usize = 16 << 20;

/// What the descriptor has open in the data ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    None,
    /// A `poke` window, published whole at the next call.
    Poke {
        cap: usize,
    },
    /// A `poke_acquire` window, published by `poke_complete`.
    Acquired {
        cap: usize,
    },
    /// A record built by `append`s, published by the next `write`.
    Append {
        len: usize,
    },
}

pub struct RingWriter {
    name: String,
    w: IbufWriter,
    pending: Pending,
}

impl RingWriter {
    /// Create the rings of stream `name`, `ring` under /dev/shm (`open::ring_name`), with
    /// permission bits `mode`. `excl`: fail with EEXIST
    /// when the name exists (else a dead writer's leftovers are replaced, and a live
    /// writer's name is EBUSY). Unless `nonblock`, wait, as a FIFO's open does, until the
    /// first registered reader attached.
    pub fn create(
        name: &str,
        ring: String,
        mode: u32,
        excl: bool,
        nonblock: bool,
    ) -> Result<RingWriter> {
        let path = format!("/dev/shm/{ring}");
        if excl && std::path::Path::new(&path).exists() {
            return Err(SlError::new(
                libc::EEXIST,
                format!("stream {name} exists ({path})"),
            ));
        }
        let tags = Writer::create_named(
            &ring,
            RingConfig {
                mode,
                ..RingConfig::bytes(TAG_RING).layout(Layout::Tags)
            },
        )
        .map_err(SlError::ring)?;
        let data = Writer::create_named(
            &format!("{ring}.data"),
            RingConfig {
                mode,
                buf_id: 1,
                ..RingConfig::bytes(DATA_RING)
            },
        )
        .map_err(SlError::ring)?;
        let w = IbufWriter::new(tags)
            .and_then(|w| w.with_default(data))
            .map_err(SlError::ring)?;
        if !nonblock {
            // No deadline, like a FIFO's open; each round re-checks.
            while let Err(e) = w.tags().wait_for_readers(1, Duration::from_secs(1)) {
                if !matches!(e, beltway::Error::TimedOut { .. }) {
                    return Err(SlError::ring(e));
                }
            }
        }
        Ok(RingWriter {
            name: name.to_string(),
            w,
            pending: Pending::None,
        })
    }

    fn busy(&self, what: &str) -> SlError {
        SlError::inval(format!(
            "stream {}: {what} while a poke_acquire is open (slfile_poke_complete first)",
            self.name
        ))
    }

    /// Publish what `poke` or `append` left open.
    fn settle(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::Poke { cap } => self
                .w
                .poke_complete(cap, 1)
                .map(drop)
                .map_err(SlError::ring),
            Pending::Append { len: 0 } => {
                self.w.poke_cancel();
                Ok(())
            }
            Pending::Append { len } => self
                .w
                .poke_complete(len, 1)
                .map(drop)
                .map_err(SlError::ring),
            p @ Pending::Acquired { .. } => {
                self.pending = p;
                Ok(())
            }
            Pending::None => Ok(()),
        }
    }

    /// `slfile_write`: one record of `data`; with an appended record open, `data` ends it
    /// and the whole record is published.
    pub fn write(&mut self, data: &[u8]) -> Result<usize> {
        match self.pending {
            Pending::Acquired { .. } => return Err(self.busy("write")),
            Pending::Append { len } => {
                self.fill(len, data)?;
                self.pending = Pending::Append {
                    len: len + data.len(),
                };
                self.settle()?;
                return Ok(data.len());
            }
            Pending::Poke { .. } => self.settle()?,
            Pending::None => {}
        }
        if data.is_empty() {
            // An empty record would read as the end of the stream: none is written.
            return Ok(0);
        }
        self.w.write(data).map_err(SlError::ring)
    }

    /// Copy `data` into the open append window at `at`.
    fn fill(&mut self, at: usize, data: &[u8]) -> Result<()> {
        let name = &self.name;
        let win = self.w.poked_mut().ok_or_else(|| {
            SlError::new(
                libc::EIO,
                format!("stream {name}: the appended record's window is gone"),
            )
        })?;
        let Some(dst) = win.get_mut(at..at + data.len()) else {
            return Err(SlError::new(libc::EMSGSIZE, format!("stream {name}: an appended record holds at most {APPEND_MAX} bytes ({} would be)", at + data.len())));
        };
        dst.copy_from_slice(data);
        Ok(())
    }

    fn window(&mut self, count: usize) -> Result<*mut u8> {
        if count == 0 {
            return Err(SlError::inval(format!(
                "stream {}: a poke of 0 bytes",
                self.name
            )));
        }
        Ok(self
            .w
            .poke_acquire(count)
            .map_err(SlError::ring)?
            .as_mut_ptr())
    }

    /// `slfile_poke`: `count` bytes to fill in place, published whole at the next call.
    pub fn poke(&mut self, count: usize) -> Result<*mut u8> {
        if let Pending::Acquired { .. } = self.pending {
            return Err(self.busy("poke"));
        }
        self.settle()?;
        let p = self.window(count)?;
        self.pending = Pending::Poke { cap: count };
        Ok(p)
    }

    /// `slfile_poke_acquire`: `count` bytes to fill in place, published by `poke_complete`.
    pub fn poke_acquire(&mut self, count: usize) -> Result<*mut u8> {
        if let Pending::Acquired { .. } = self.pending {
            return Err(self.busy("poke_acquire"));
        }
        self.settle()?;
        let p = self.window(count)?;
        self.pending = Pending::Acquired { cap: count };
        Ok(p)
    }

    /// `slfile_poke_complete`: publish the first `count` acquired bytes as one record (0:
    /// publish nothing, give the window back).
    pub fn poke_complete(&mut self, count: usize) -> Result<usize> {
        let Pending::Acquired { cap } = self.pending else {
            return Err(SlError::inval(format!(
                "stream {}: poke_complete without poke_acquire",
                self.name
            )));
        };
        if count > cap {
            return Err(SlError::inval(format!(
                "stream {}: poke_complete of {count} bytes, but {cap} were acquired",
                self.name
            )));
        }
        self.pending = Pending::None;
        if count == 0 {
            self.w.poke_cancel();
            return Ok(0);
        }
        self.w.poke_complete(count, 1).map_err(SlError::ring)?;
        Ok(count)
    }

    /// `slfile_append`: add `data` to the open record (opening one); never wraps, at most
    /// [`APPEND_MAX`] bytes a record.
    pub fn append(&mut self, data: &[u8]) -> Result<usize> {
        let len = match self.pending {
            Pending::Acquired { .. } => return Err(self.busy("append")),
            Pending::Append { len } => len,
            Pending::Poke { .. } | Pending::None => {
                self.settle()?;
                self.w.poke_acquire(APPEND_MAX).map_err(SlError::ring)?;
                self.pending = Pending::Append { len: 0 };
                0
            }
        };
        self.fill(len, data)?;
        self.pending = Pending::Append {
            len: len + data.len(),
        };
        Ok(data.len())
    }

    /// `slfile_check` on the write side: timestamps are data-ring write positions; a
    /// timestamp verifies that nothing written at or after it was overwritten since.
    pub fn check(&mut self, ts: i64) -> Result<i64> {
        self.settle()?;
        let stats = self
            .w
            .default_ring()
            .expect("a created stream has its data ring")
            .stats();
        match ts {
            -1 => {}
            t if t < 0 || t as u64 > stats.write_pos => {
                return Err(SlError::inval(format!("stream {}: timestamp {t} (expected -1 or a value slfile_check returned, at most {})", self.name, stats.write_pos)))
            }
            t if (t as u64) < stats.tail => {
                return Err(SlError::new(libc::ESTALE, format!("stream {}: data written since timestamp {t} was overwritten (the ring holds {}..{})", self.name, stats.tail, stats.write_pos)))
            }
            _ => {}
        }
        Ok(stats.write_pos as i64)
    }

    /// `slfile_close`: publish what is open (an acquired window is given back), then end
    /// the stream: readers read what is left, then see its end. The names go from /dev/shm
    /// when the rings are dropped; readers that mapped them keep them.
    pub fn close(&mut self) -> Result<()> {
        if let Pending::Acquired { .. } = self.pending {
            self.w.poke_cancel();
            self.pending = Pending::None;
        }
        let r = self.settle();
        self.w.close();
        r
    }
}
