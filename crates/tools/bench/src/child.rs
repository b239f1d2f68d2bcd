//! The hidden `__child` subcommand: the receiving side of cross-process experiments, run in
//! a separate process started by [`crate::proc::ChildProc`].
//!
//! Every role reads a stream of stamped blocks (see [`crate::pattern`]), checks each one,
//! notes the CLOCK_MONOTONIC time at which the last expected byte arrived (the parent's
//! clock is the same, so the parent can time first write to last read), checks that the
//! stream then ends, and reports `done bytes=N blocks=N end_ns=T`.

use crate::pattern::Blocks;
use crate::proc::die_with_parent;
use crate::util::{err, pin, Result, Verify};
use beltway::{Layout, Reader, Start};
use clap::Subcommand;
use std::io::Read;
use std::os::fd::AsFd;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Pid of the benchmark process that started us.
    #[arg(long)]
    parent: u32,
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand, Debug)]
enum Role {
    /// Read from a named beltway ring (byte or record layout).
    RingRead {
        #[arg(long)]
        name: String,
        #[command(flatten)]
        stream: StreamArgs,
    },
    /// Read from stdin, a Unix pipe, with plain read(2) calls.
    PipeRead {
        #[command(flatten)]
        stream: StreamArgs,
    },
}

#[derive(clap::Args, Debug)]
struct StreamArgs {
    /// Block (or record) size in bytes.
    #[arg(long)]
    block: usize,
    /// Bytes expected before end of stream.
    #[arg(long)]
    bytes: u64,
    #[arg(long, value_enum)]
    verify: Verify,
    /// CPU to pin to.
    #[arg(long)]
    cpu: usize,
}

pub fn run(a: &Args) -> Result<()> {
    die_with_parent(a.parent)?;
    match &a.role {
        Role::RingRead { name, stream } => {
            pin(stream.cpu)?;
            let mut r = Reader::open(name, Start::Oldest)?;
            ready();
            let records = r.shared().layout() != Layout::Bytes;
            receive(stream, |buf| {
                let n = r.read(buf)?;
                if records && n != 0 && n != buf.len() {
                    return Err(err(format!(
                        "record of {n} bytes where {} were expected",
                        buf.len()
                    )));
                }
                Ok(n)
            })
        }
        Role::PipeRead { stream } => {
            pin(stream.cpu)?;
            // An unbuffered handle on fd 0: one read(2) per call, like the ring reader.
            let mut stdin = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
            ready();
            receive(stream, |buf| Ok(stdin.read(buf)?))
        }
    }
}

/// Tell the parent we are set up (see [`crate::proc`]).
fn ready() {
    println!("ready");
}

/// Read and check `s.bytes` bytes of blocks with `read` (which returns 0 at end of stream),
/// then expect the end of the stream, then report.
fn receive(s: &StreamArgs, mut read: impl FnMut(&mut [u8]) -> Result<usize>) -> Result<()> {
    let mut reference = Blocks::new(s.block);
    let mut buf = vec![0u8; s.block];
    let blocks = s.bytes / s.block as u64;
    for seq in 0..blocks {
        let mut filled = 0;
        while filled < s.block {
            let n = read(&mut buf[filled..])?;
            if n == 0 {
                return Err(err(format!(
                    "stream ended after {} of {} bytes",
                    seq * s.block as u64 + filled as u64,
                    s.bytes
                )));
            }
            filled += n;
        }
        reference.check(&buf, seq, s.verify)?;
    }
    let end_ns = beltway::sys::now_ns();
    let extra = read(&mut buf)?;
    if extra != 0 {
        return Err(err(format!(
            "{extra} bytes past the expected {} bytes",
            s.bytes
        )));
    }
    println!(
        "done bytes={} blocks={blocks} end_ns={end_ns}",
        blocks * s.block as u64
    );
    Ok(())
}
