//! Errors of ring operations. Every variant names the ring it concerns, and where it
//! applies the position or limit involved, so that a message reads well at a terminal.

use std::io;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("ring '{name}': {op}: {source}")]
    Os {
        name: String,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("ring '{name}': invalid configuration: {why}")]
    Config { name: String, why: String },
    #[error("ring '{name}' is not a usable beltway ring: {why}")]
    BadRing { name: String, why: String },
    #[error("ring '{name}' is in use by a live writer (pid {pid})")]
    InUse { name: String, pid: u32 },
    #[error("ring '{name}': broken pipe: every reader has gone")]
    BrokenPipe { name: String },
    #[error("ring '{name}': writer already closed the stream")]
    Closed { name: String },
    #[error("ring '{name}': reader fell behind; bytes {from}..{to} were overwritten")]
    Overrun { name: String, from: u64, to: u64 },
    #[error("ring '{name}': {len} bytes exceed the limit of {max}")]
    TooLarge {
        name: String,
        len: usize,
        max: usize,
    },
    #[error("ring '{name}': a {need}-byte record does not fit the {got}-byte buffer")]
    BufferTooSmall {
        name: String,
        need: usize,
        got: usize,
    },
    #[error("ring '{name}': corrupt data at position {pos}: {why}")]
    Corrupt { name: String, pos: u64, why: String },
    #[error("ring '{name}': all {max} reader slots are in use")]
    NoSlots { name: String, max: usize },
    #[error("ring '{name}': permission denied: {what}")]
    Permission { name: String, what: String },
    #[error("ring '{name}': {what} is not supported here")]
    Unsupported { name: String, what: &'static str },
    #[error("ring '{name}': timed out {what}")]
    TimedOut { name: String, what: &'static str },
    #[error("tag refers to buffer {id}, which is not known to this process")]
    UnknownBuffer { id: u16 },
}

impl Error {
    pub(crate) fn os(name: &str, op: &'static str, source: io::Error) -> Error {
        Error::Os {
            name: name.to_string(),
            op,
            source,
        }
    }

    /// Whether this error reports data lost to overwrite (a lossy reader fell behind).
    pub fn is_overrun(&self) -> bool {
        matches!(self, Error::Overrun { .. })
    }
}
