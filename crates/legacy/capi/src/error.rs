//! Errors of the C library: an errno for the caller and a sentence for a person.
//!
//! Owns: the mapping from ring, protocol and system errors to the errno values the header
//! documents. Does not own: where the errno and the message are stored (`ffi`).

use std::fmt;

/// A failed call: what `errno` becomes and what `slfile_error()` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlError {
    pub errno: i32,
    pub message: String,
}

impl SlError {
    pub fn new(errno: i32, message: impl Into<String>) -> SlError {
        SlError {
            errno,
            message: message.into(),
        }
    }

    pub fn badf(fd: i32) -> SlError {
        SlError::new(
            libc::EBADF,
            format!("descriptor {fd} is not an open slfile descriptor"),
        )
    }

    pub fn inval(message: impl Into<String>) -> SlError {
        SlError::new(libc::EINVAL, message)
    }

    /// A ring error, with the errno the header gives it. `Overrun` is EOVERFLOW here (data
    /// lost before it was handed out); `check` reports loss after the fact as ESTALE itself.
    pub fn ring(e: beltway::Error) -> SlError {
        use beltway::Error as E;
        let errno = match &e {
            E::Os { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            E::Config { .. } | E::Unsupported { .. } => libc::EINVAL,
            E::BadRing { .. } | E::UnknownBuffer { .. } => libc::EPROTO,
            E::Corrupt { .. } => libc::EBADMSG,
            E::InUse { .. } | E::NoSlots { .. } => libc::EBUSY,
            E::BrokenPipe { .. } | E::Closed { .. } => libc::EPIPE,
            E::Overrun { .. } => libc::EOVERFLOW,
            E::TooLarge { .. } | E::BufferTooSmall { .. } => libc::EMSGSIZE,
            E::Permission { .. } => libc::EACCES,
            E::TimedOut { .. } => libc::ETIMEDOUT,
        };
        SlError::new(errno, e.to_string())
    }

    /// A system call's error, naming what was done to what.
    pub fn io(what: impl fmt::Display, e: std::io::Error) -> SlError {
        SlError::new(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("{what}: {e}"),
        )
    }

    /// The daemon's answer or the way to it failed.
    pub fn client(socket: &std::path::Path, e: protocol::client::ClientError) -> SlError {
        use protocol::client::ClientError as C;
        match e {
            C::Connect { source, .. } => {
                let errno = source.raw_os_error().unwrap_or(libc::ECONNREFUSED);
                SlError::new(errno, format!("no Streamline daemon answers on {} ({source}); start streamlined, or set STREAMLINE_SOCKET", socket.display()))
            }
            C::Refused { errno, message, .. } => SlError::new(
                if errno > 0 { errno } else { libc::EIO },
                format!("the daemon refused: {message}"),
            ),
            C::Proto(protocol::proto::ProtoError::Io(e)) => {
                SlError::io(format!("talking to the daemon on {}", socket.display()), e)
            }
            C::Proto(protocol::proto::ProtoError::Closed) => SlError::new(
                libc::ECONNRESET,
                format!("the daemon on {} closed the connection", socket.display()),
            ),
            C::Proto(e) => SlError::new(
                libc::EPROTO,
                format!("talking to the daemon on {}: {e}", socket.display()),
            ),
            C::Unexpected(r) => SlError::new(
                libc::EPROTO,
                format!("the daemon on {} answered {r:?}", socket.display()),
            ),
        }
    }
}

impl fmt::Display for SlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

pub type Result<T, E = SlError> = std::result::Result<T, E>;
