//! `slfile_open`: what a name means and how its stream is reached.
//!
//! - `/...`: a path, opened as a file with open(2) and the caller's flags (a PipesFS stream
//!   such as `/run/streamline/pipes/RUN/NODE/all`, or its `.ctl` to write `stop` to).
//! - `NAME` for reading: a named stream (a pipeline's `export=yes` node, or a stream another
//!   program created with this library), asked of the daemon (`open_stream`, on
//!   `$STREAMLINE_SOCKET` or /run/streamline/control), which checks the stream's owner and
//!   mode and passes the rings' descriptors; the stream's owner (and root) reads as a
//!   registered, lossless reader, anyone else the mode admits as an observer. With
//!   `STREAMLINE_SOCKET=none` the rings are opened directly under /dev/shm, the kernel
//!   checking the same permissions.
//! - `NAME` with O_WRONLY|O_CREAT (or O_RDWR|O_CREAT): a new stream this process writes
//!   (`writer`).
//!
//! Owns: the name rules and the daemon call. Does not own: the descriptor table (`table`).

use crate::error::{Result, SlError};
use crate::file::FileStream;
use crate::reader::RingReader;
use crate::stream::Stream;
use crate::writer::RingWriter;
use beltway::{BufTable, IbufReader, RingRef, Start};
use protocol::client::{socket_path, Client};
use protocol::proto::{Reply, Request};
use std::os::unix::fs::OpenOptionsExt;

/// The ring name (under /dev/shm) of stream `name`, as a pipeline's export is named
/// ([`protocol::graph::export_name`]); EINVAL for a name that cannot be one.
pub fn ring_name(name: &str) -> Result<String> {
    if name.is_empty()
        || name.len() > 180
        || name.contains(['/', '\0', ' '])
        || name.starts_with('.')
    {
        return Err(SlError::inval(format!("stream name `{name}`: expected 1-180 characters without '/', spaces or a leading '.' (a path starts with '/')")));
    }
    Ok(protocol::graph::export_name(name))
}

/// Open `name` with open(2)-style `flags` (and `mode` with O_CREAT).
pub fn open(name: &str, flags: i32, mode: u32) -> Result<Stream> {
    let nonblock = flags & libc::O_NONBLOCK != 0;
    if name.starts_with('/') {
        return open_path(name, flags, mode);
    }
    match flags & libc::O_ACCMODE {
        libc::O_RDONLY if flags & libc::O_CREAT == 0 => open_reader(name, nonblock).map(Stream::Reader),
        libc::O_WRONLY | libc::O_RDWR if flags & libc::O_CREAT != 0 => {
            RingWriter::create(name, ring_name(name)?, mode & 0o7777, flags & libc::O_EXCL != 0, nonblock).map(Stream::Writer)
        }
        _ => Err(SlError::inval(format!(
            "open {name} with flags {flags:#o}: a stream is read with O_RDONLY, or created and written with O_WRONLY|O_CREAT (a stream has one writer, its creator)"
        ))),
    }
}

fn open_path(path: &str, flags: i32, mode: u32) -> Result<Stream> {
    let mut o = std::fs::OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_RDONLY => o.read(true),
        libc::O_WRONLY => o.write(true),
        libc::O_RDWR => o.read(true).write(true),
        _ => {
            return Err(SlError::inval(format!(
                "open {path}: access mode {:#o}",
                flags & libc::O_ACCMODE
            )))
        }
    };
    // The access mode is the options'; the other flags (O_NONBLOCK, O_CREAT, O_TRUNC, ...)
    // go to open(2) as given.
    o.custom_flags(flags & !libc::O_ACCMODE).mode(mode);
    if flags & libc::O_CREAT != 0 {
        o.create(true);
    }
    let f = o
        .open(path)
        .map_err(|e| SlError::io(format!("open {path}"), e))?;
    Ok(Stream::File(FileStream::new(path.to_string(), f)))
}

/// The rings of a named stream, mapped, as a reader of the records written from now on
/// (older tags may point at data the writer has reused since).
fn open_reader(name: &str, nonblock: bool) -> Result<RingReader> {
    let ring = ring_name(name)?;
    let (tags, data) = match socket_path(None) {
        Some(sock) => rings_from_daemon(name, &ring, &sock)?,
        None => {
            let open = |n: &str| RingRef::open(n).map_err(|e| not_found_or(e, name));
            (open(&ring)?, open(&format!("{ring}.data"))?)
        }
    };
    let data_id = data.shared().buf_id();
    let mut table = BufTable::new();
    table.register(&data).map_err(SlError::ring)?;
    let tags = tags.reader(Start::Latest).map_err(SlError::ring)?;
    let ibuf = IbufReader::new(tags, table).map_err(SlError::ring)?;
    Ok(RingReader::new(name.to_string(), ibuf, data_id, nonblock))
}

/// A missing ring is an unknown stream (ENOENT); other ring errors as they map.
fn not_found_or(e: beltway::Error, name: &str) -> SlError {
    match &e {
        beltway::Error::Os { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            SlError::new(libc::ENOENT, format!("no stream {name} ({e})"))
        }
        _ => SlError::ring(e),
    }
}

/// `open_stream` NAME: for the owner (and root) 4 descriptors, data and control segment of
/// the tag ring then of the data ring; for others 2, the data segments only.
fn rings_from_daemon(name: &str, ring: &str, sock: &std::path::Path) -> Result<(RingRef, RingRef)> {
    let mut c = Client::connect(sock).map_err(|e| SlError::client(sock, e))?;
    let (reply, fds) = c
        .call_fds(
            Request::OpenStream {
                name: name.to_string(),
            },
            &[],
        )
        .map_err(|e| SlError::client(sock, e))?;
    let Reply::Stream { fds: n, .. } = reply else {
        return Err(SlError::new(
            libc::EPROTO,
            format!("open_stream {name}: the daemon answered {reply:?}"),
        ));
    };
    if n as usize != fds.len() || !(n == 2 || n == 4) {
        return Err(SlError::new(
            libc::EPROTO,
            format!(
                "open_stream {name}: {} descriptors came, {n} announced (2 or 4 expected)",
                fds.len()
            ),
        ));
    }
    let registered = n == 4;
    let mut it = fds.into_iter();
    let mut ring_of = |rname: String| -> Result<RingRef> {
        let data = it.next().expect("counted above");
        let ctl = if registered { it.next() } else { None };
        RingRef::from_fds(&rname, data, ctl).map_err(SlError::ring)
    };
    let tags = ring_of(ring.to_string())?;
    let data = ring_of(format!("{ring}.data"))?;
    Ok((tags, data))
}
