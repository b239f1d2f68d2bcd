//! One-way streams of stamped blocks from this process (pinned to [`WRITER_CPU`]) to a
//! reader on [`READER_CPU`]: over a beltway ring or a Unix pipe to a child process, or over
//! the SPSC thread ring to a second thread. Each returns the seconds from the first write to
//! the moment the reader had the last byte (both sides read CLOCK_MONOTONIC); setup,
//! page faults of the ring, and the final end-of-stream check are outside that window.

use crate::pattern::Blocks;
use crate::proc::{pipe_size, set_pipe_size, ChildProc};
use crate::spsc;
use crate::util::{busy, err, pin, ring_name, Result, Verify};
use beltway::{Layout, RingConfig, RingStats, Writer};
use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::Duration;

pub const WRITER_CPU: usize = 0;
pub const READER_CPU: usize = 1;

/// What to send.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    /// Block (or record) size; every write is one block.
    pub block: usize,
    /// Total bytes (a whole number of blocks).
    pub bytes: u64,
    pub verify: Verify,
    /// Busy work the writer does before each block (a producer that makes the data).
    pub writer_work_ns: u64,
    /// CPU the reader process is pinned to (the writer is on [`WRITER_CPU`]).
    pub reader_cpu: usize,
}

impl StreamSpec {
    pub fn new(block: usize, bytes: u64, verify: Verify) -> StreamSpec {
        StreamSpec {
            block,
            bytes,
            verify,
            writer_work_ns: 0,
            reader_cpu: READER_CPU,
        }
    }
    fn blocks(&self) -> u64 {
        self.bytes / self.block as u64
    }
}

/// A change of a self-scaling ring's active size, seen by the writer.
#[derive(Debug, Clone, Copy)]
pub struct Resize {
    /// Stream position at which the new size took effect (the start of the block whose
    /// write crossed the lap boundary).
    pub pos: u64,
    pub at_ns: u64,
    pub size: u64,
}

/// Result of a stream over a beltway ring.
#[derive(Debug, Clone)]
pub struct RingRun {
    pub secs: f64,
    /// When the reader had the last byte (CLOCK_MONOTONIC).
    pub end_ns: u64,
    pub stats: RingStats,
    /// Active size at the first and after the last write (`Writer::active_size`).
    pub initial_size: u64,
    pub final_size: u64,
    pub resizes: Vec<Resize>,
}

/// Stream `s` through a new named ring with `cfg` to a reader process.
pub fn via_ring(cfg: RingConfig, s: &StreamSpec) -> Result<RingRun> {
    pin(WRITER_CPU)?;
    let name = ring_name();
    // Dropping the writer (also on every error path) unlinks the ring's names.
    let mut w = Writer::create_named(&name, cfg)?;
    prefault(&mut w)?;
    let mut child = ChildProc::spawn(&child_args("ring-read", Some(&name), s), false)?;
    child.wait_ready()?;
    w.wait_for_readers(1, Duration::from_secs(5))?;
    let mut blocks = Blocks::new(s.block);
    let initial_size = w.active_size();
    let mut size = initial_size;
    let mut resizes = Vec::new();
    let start_ns = beltway::sys::now_ns();
    for seq in 0..s.blocks() {
        if s.writer_work_ns > 0 {
            busy(s.writer_work_ns);
        }
        if let Err(e) = w.write(blocks.block(seq)) {
            w.close();
            return Err(with_child_error(
                format!("ring write of block {seq}: {e}"),
                child,
            ));
        }
        if w.active_size() != size {
            size = w.active_size();
            resizes.push(Resize {
                pos: seq * s.block as u64,
                at_ns: beltway::sys::now_ns(),
                size,
            });
        }
    }
    w.close();
    let (stats, final_size) = (w.stats(), w.active_size());
    let end_ns = finish(child, s)?;
    Ok(RingRun {
        secs: secs(start_ns, end_ns),
        end_ns,
        stats,
        initial_size,
        final_size,
        resizes,
    })
}

/// Stream `s` through a Unix pipe (the child's stdin) to a reader process; the pipe resized
/// to `size` bytes with F_SETPIPE_SZ first, or of the default size with `None`. Returns the
/// seconds and the pipe's capacity.
pub fn via_pipe(s: &StreamSpec, size: Option<usize>) -> Result<(f64, usize)> {
    pin(WRITER_CPU)?;
    let mut child = ChildProc::spawn(&child_args("pipe-read", None, s), true)?;
    let mut pipe = child
        .take_stdin()
        .ok_or_else(|| err("child has no stdin pipe"))?;
    if let Some(size) = size {
        set_pipe_size(&pipe, size)?;
    }
    let capacity = pipe_size(&pipe)?;
    if size.is_some_and(|size| capacity != size) {
        return Err(err(format!(
            "asked for a pipe of {} bytes, got {capacity}",
            size.unwrap_or(0)
        )));
    }
    child.wait_ready()?;
    let mut blocks = Blocks::new(s.block);
    let start_ns = beltway::sys::now_ns();
    for seq in 0..s.blocks() {
        if let Err(e) = pipe.write_all(blocks.block(seq)) {
            drop(pipe);
            return Err(with_child_error(
                format!("pipe write of block {seq}: {e}"),
                child,
            ));
        }
    }
    drop(pipe);
    let end_ns = finish(child, s)?;
    Ok((secs(start_ns, end_ns), capacity))
}

/// Stream `s` through the SPSC thread ring of `size` bytes to a reader thread.
pub fn via_threads(size: usize, s: &StreamSpec) -> Result<f64> {
    pin(WRITER_CPU)?;
    let (mut tx, mut rx) = spsc::channel(size);
    let start = Arc::new(Barrier::new(2));
    let s2 = *s;
    let go = start.clone();
    let reader = std::thread::spawn(move || -> Result<u64> {
        let pinned = pin(READER_CPU);
        go.wait();
        let mut reference = Blocks::new(s2.block);
        let mut buf = vec![0u8; s2.block];
        let mut first_err = None;
        for seq in 0..s2.blocks() {
            rx.read_exact(&mut buf);
            // Keep draining after a bad block, so the writer is not left blocked.
            if first_err.is_none() {
                first_err = reference.check(&buf, seq, s2.verify).err();
            }
        }
        let end_ns = beltway::sys::now_ns();
        pinned?;
        first_err.map_or(Ok(end_ns), Err)
    });
    let mut blocks = Blocks::new(s.block);
    start.wait();
    let start_ns = beltway::sys::now_ns();
    for seq in 0..s.blocks() {
        tx.write_all(blocks.block(seq));
    }
    let end_ns = reader
        .join()
        .map_err(|_| err("SPSC reader thread panicked"))??;
    Ok(secs(start_ns, end_ns))
}

/// Touch every page of the ring's active area before any reader attaches, so that the first
/// lap of a timed run does not pay page faults. Byte rings: through a poke window that is
/// never published. Record rings: one lap of empty records, which no reader will see (a
/// reader attaching to a ring without readers starts at the write position).
pub fn prefault(w: &mut Writer) -> Result<()> {
    let n = w.active_size() as usize;
    if w.shared().layout() == Layout::Bytes {
        w.poke_acquire(n)?.fill(0);
        w.poke_complete(0)?;
        return Ok(());
    }
    let max = w.max_record().min(n);
    let before = w.position();
    while w.position() - before < n as u64 {
        w.poke_acquire(max)?.fill(0);
        w.poke_complete(0)?;
    }
    Ok(())
}

fn child_args(role: &str, name: Option<&str>, s: &StreamSpec) -> Vec<String> {
    let mut a = vec![role.to_string()];
    if let Some(n) = name {
        a.extend(["--name".to_string(), n.to_string()]);
    }
    let verify = match s.verify {
        Verify::Full => "full",
        Verify::Stamps => "stamps",
    };
    a.extend(
        [
            ("--block", s.block.to_string()),
            ("--bytes", s.bytes.to_string()),
            ("--verify", verify.to_string()),
            ("--cpu", s.reader_cpu.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v]),
    );
    a
}

/// Collect the child's report: it must have received exactly the stream. Returns the time
/// it had the last byte.
fn finish(child: ChildProc, s: &StreamSpec) -> Result<u64> {
    let report = child.finish()?;
    let got = report.u64("bytes")?;
    if got != s.bytes {
        return Err(err(format!(
            "reader received {got} bytes, expected {}",
            s.bytes
        )));
    }
    report.u64("end_ns")
}

/// A writer-side failure, with the child's own failure (the usual cause) attached. The
/// stream must already be closed, so the child finishes.
fn with_child_error(what: String, child: ChildProc) -> crate::util::Error {
    match child.finish() {
        Ok(_) => err(what),
        Err(e) => err(format!("{what}; {e}")),
    }
}

fn secs(start_ns: u64, end_ns: u64) -> f64 {
    end_ns.saturating_sub(start_ns) as f64 / 1e9
}
