//! The client side of the control protocol: connect to a daemon, shake hands, make calls.
//! Used by the `streamline` command (run through the daemon, ps, stop, attach, edit) and by
//! the tests and the benchmark.
//!
//! Owns: finding the socket (`--socket`, `$STREAMLINE_SOCKET`, the default path), the
//! handshake, request ids. Does not own: the messages (`proto`).

use crate::proto::{self, Msg, ProtoError, Reply, Request};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// Which socket to talk to: the flag, else `$STREAMLINE_SOCKET`, else the default. The
/// value `none` (flag or environment) means: no daemon, run stand-alone.
pub fn socket_path(flag: Option<&str>) -> Option<PathBuf> {
    let v = flag
        .map(str::to_string)
        .or_else(|| std::env::var("STREAMLINE_SOCKET").ok())
        .unwrap_or_else(|| proto::DEFAULT_SOCKET.to_string());
    (v != "none" && !v.is_empty()).then(|| PathBuf::from(v))
}

/// A connection to the daemon, past the handshake.
pub struct Client {
    sock: UnixStream,
    next: u64,
    /// What the daemon said in `welcome`.
    pub welcome: Reply,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Proto(#[from] ProtoError),
    /// The daemon refused the request.
    #[error("{message}")]
    Refused {
        code: String,
        errno: i32,
        message: String,
    },
    #[error("unexpected reply: {0:?}")]
    Unexpected(Box<Reply>),
}

impl Client {
    /// Connect and shake hands. Fails when nothing listens there.
    pub fn connect(path: &std::path::Path) -> Result<Client, ClientError> {
        let sock = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.display().to_string(),
            source,
        })?;
        let mut c = Client {
            sock,
            next: 1,
            welcome: Reply::Done {},
        };
        let version = proto::VERSION;
        c.welcome = c.call(Request::Hello {
            version,
            client: format!("streamline {}", env!("CARGO_PKG_VERSION")),
        })?;
        Ok(c)
    }

    /// Send a request with descriptors and return its id (for events that follow).
    pub fn send(&mut self, req: Request, fds: &[RawFd]) -> Result<u64, ClientError> {
        let id = self.next;
        self.next += 1;
        proto::send(&self.sock, &Msg { id, body: req }, fds)?;
        Ok(id)
    }

    /// The next message from the daemon (a reply or an event), refusals as errors.
    pub fn recv(&mut self) -> Result<(Msg<Reply>, Vec<OwnedFd>), ClientError> {
        let (m, fds) = proto::recv::<Reply>(&self.sock)?;
        if let Reply::Error {
            code,
            errno,
            message,
        } = m.body
        {
            return Err(ClientError::Refused {
                code,
                errno,
                message,
            });
        }
        Ok((m, fds))
    }

    /// One call: send, wait for its reply.
    pub fn call(&mut self, req: Request) -> Result<Reply, ClientError> {
        self.call_fds(req, &[]).map(|r| r.0)
    }

    pub fn call_fds(
        &mut self,
        req: Request,
        fds: &[RawFd],
    ) -> Result<(Reply, Vec<OwnedFd>), ClientError> {
        let id = self.send(req, fds)?;
        loop {
            let (m, fds) = self.recv()?;
            if m.id == id {
                return Ok((m.body, fds));
            }
        }
    }

    /// The socket (to close it, or to wait on it).
    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }
}
