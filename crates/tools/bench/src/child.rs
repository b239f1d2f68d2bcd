//! The hidden `__child` subcommand: the receiving side of cross-process experiments, run in
//! a separate process started by [`crate::proc::ChildProc`].
//!
//! Every role reads a stream of stamped blocks (see [`crate::pattern`]), checks each one,
//! notes the CLOCK_MONOTONIC time at which the last expected byte arrived (the parent's
//! clock is the same, so the parent can time first write to last read), checks that the
//! stream then ends, and reports `done bytes=N blocks=N end_ns=T`.
//!
//! The relay roles are the hand-written peers of the latency figures
//! ([`crate::latency`]): they copy standard input to standard output as a competent
//! programmer would without Streamline (one thread; two threads pinned like a run's two
//! spaces, handing blocks over under a mutex and condition variable; a TCP sender and
//! receiver), and end at the end of their input.

use crate::pattern::Blocks;
use crate::proc::die_with_parent;
use crate::util::{err, pin, Result, Verify};
use beltway::{Layout, Reader, Start};
use clap::Subcommand;
use std::io::{Read, Write};
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
    /// Copy stdin to stdout: in one thread, or (`--threads 2`) a reading thread on CPU 0
    /// handing each read to a writing thread on CPU 1.
    Relay {
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// Copy stdin to a TCP connection to `to` (TCP_NODELAY; connecting until it is
    /// accepted, at most 10 s).
    TcpSend {
        #[arg(long)]
        to: std::net::SocketAddr,
    },
    /// Accept one TCP connection on `listen` and copy it to stdout.
    TcpRecv {
        #[arg(long)]
        listen: std::net::SocketAddr,
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
        Role::Relay { threads: 1 } => copy(&mut raw_stdin()?, &mut raw_stdout()?),
        Role::Relay { threads: 2 } => relay_threads(),
        Role::Relay { threads } => Err(err(format!("relay --threads {threads}: 1 or 2"))),
        Role::TcpSend { to } => {
            let started = std::time::Instant::now();
            let mut sock = loop {
                match std::net::TcpStream::connect(to) {
                    Ok(s) => break s,
                    Err(e) if started.elapsed() > std::time::Duration::from_secs(10) => {
                        return Err(err(format!("connecting to {to}: {e}")))
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            };
            sock.set_nodelay(true)?;
            copy(&mut raw_stdin()?, &mut sock)
        }
        Role::TcpRecv { listen } => {
            let l = std::net::TcpListener::bind(listen)
                .map_err(|e| err(format!("listening on {listen}: {e}")))?;
            let (mut sock, _) = l.accept()?;
            copy(&mut sock, &mut raw_stdout()?)
        }
    }
}

/// Unbuffered handles on fds 0 and 1: one read(2) or write(2) per call.
fn raw_stdin() -> Result<std::fs::File> {
    Ok(std::fs::File::from(
        std::io::stdin().as_fd().try_clone_to_owned()?,
    ))
}

fn raw_stdout() -> Result<std::fs::File> {
    Ok(std::fs::File::from(
        std::io::stdout().as_fd().try_clone_to_owned()?,
    ))
}

/// Copy until the end of `from`, writing each read as it comes.
fn copy(from: &mut impl Read, to: &mut impl std::io::Write) -> Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n])?;
    }
}

/// Two threads pinned as a run's space 0 and space 1 are: the reader on CPU 0 appends what
/// it reads to a shared buffer and signals the writer on CPU 1, which writes it out.
fn relay_threads() -> Result<()> {
    use std::sync::{Arc, Condvar, Mutex};
    let shared = Arc::new((Mutex::new((Vec::<u8>::new(), false)), Condvar::new()));
    let theirs = shared.clone();
    let writer = std::thread::spawn(move || -> Result<()> {
        pin(1)?;
        let mut out = raw_stdout()?;
        let (lock, cv) = &*theirs;
        loop {
            let (data, ended) = {
                let mut g = lock.lock().expect("not poisoned");
                while g.0.is_empty() && !g.1 {
                    g = cv.wait(g).expect("not poisoned");
                }
                (std::mem::take(&mut g.0), g.1)
            };
            out.write_all(&data)?;
            if ended {
                return Ok(());
            }
        }
    });
    pin(0)?;
    let mut input = raw_stdin()?;
    let mut buf = vec![0u8; 64 * 1024];
    let (lock, cv) = &*shared;
    loop {
        let n = input.read(&mut buf)?;
        let mut g = lock.lock().expect("not poisoned");
        g.0.extend_from_slice(&buf[..n]);
        g.1 = n == 0;
        cv.notify_one();
        if n == 0 {
            break;
        }
    }
    writer
        .join()
        .map_err(|_| err("the relay's writing thread panicked"))?
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
