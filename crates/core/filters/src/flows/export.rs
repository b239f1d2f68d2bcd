//! Where IPFIX messages go: collectors over UDP or TCP, and a file.
//!
//! Owns the transports. Every destination gets every message. Over UDP a message is one
//! datagram from one socket per collector; a collector that is not listening (ICMP port
//! unreachable) or a full socket buffer loses that message: counted in
//! [`Exporter::lost`], never an error, as with any UDP exporter. Over TCP the messages
//! are a byte stream (RFC 7011 §10.4); a collector that refuses the connection is an
//! error when the filter is made, one that goes away mid-stream is reported and dropped.
//! The file holds the messages back to back, as they crossed the wire (RFC 5655's
//! file format is this stream of messages).

use dataplane::FilterError;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

enum Dest {
    Udp(UdpSocket),
    Tcp(Option<TcpStream>, SocketAddr),
    File(BufWriter<File>, String),
}

pub struct Exporter {
    dests: Vec<Dest>,
    /// Messages a UDP collector did not take (refused, buffer full).
    pub lost: u64,
    /// Problems met (a TCP collector gone, a file write failed), to report once.
    pub failures: Vec<String>,
}

/// `host:port[,host:port...]` as socket addresses; the error names the one that is not.
pub fn collectors(list: &str) -> Result<Vec<SocketAddr>, FilterError> {
    list.split(',')
        .map(|hp| {
            let bad = || FilterError::bad("to", hp, "HOST:PORT[,HOST:PORT...] of IPFIX collectors");
            hp.to_socket_addrs()
                .map_err(|_| bad())?
                .next()
                .ok_or_else(bad)
        })
        .collect()
}

impl Exporter {
    pub fn new(
        to: &[SocketAddr],
        transport: Transport,
        file: Option<&str>,
    ) -> Result<Exporter, FilterError> {
        let mut dests = Vec::new();
        for &addr in to {
            dests.push(match transport {
                Transport::Udp => {
                    let bind: SocketAddr = if addr.is_ipv4() {
                        "0.0.0.0:0"
                    } else {
                        "[::]:0"
                    }
                    .parse()
                    .expect("literal");
                    let s = UdpSocket::bind(bind)
                        .map_err(|e| FilterError::io(format!("a UDP socket for {addr}"), e))?;
                    s.connect(addr)
                        .map_err(|e| FilterError::io(format!("collector {addr}"), e))?;
                    Dest::Udp(s)
                }
                Transport::Tcp => {
                    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                        .map_err(|e| FilterError::io(format!("collector {addr} (tcp)"), e))?;
                    let _ = s.set_nodelay(true);
                    Dest::Tcp(Some(s), addr)
                }
            });
        }
        if let Some(path) = file {
            let f = File::create(path)
                .map_err(|e| FilterError::io(format!("cannot create {path}"), e))?;
            dests.push(Dest::File(BufWriter::new(f), path.to_string()));
        }
        Ok(Exporter {
            dests,
            lost: 0,
            failures: Vec::new(),
        })
    }

    /// Sends one message everywhere.
    pub fn send(&mut self, msg: &[u8]) {
        for d in &mut self.dests {
            match d {
                Dest::Udp(s) => {
                    if s.send(msg).is_err() {
                        self.lost += 1;
                    }
                }
                Dest::Tcp(s, addr) => {
                    if let Some(stream) = s {
                        if let Err(e) = stream.write_all(msg) {
                            self.failures.push(format!(
                                "collector {addr} (tcp) went away: {e}; no more messages go to it"
                            ));
                            *s = None;
                        }
                    }
                }
                Dest::File(w, path) => {
                    if let Err(e) = w.write_all(msg) {
                        self.failures.push(format!("writing {path}: {e}"));
                    }
                }
            }
        }
    }

    /// Flushes the file and closes TCP connections in order.
    pub fn finish(&mut self) {
        for d in &mut self.dests {
            match d {
                Dest::File(w, path) => {
                    if let Err(e) = w.flush() {
                        self.failures.push(format!("writing {path}: {e}"));
                    }
                }
                Dest::Tcp(s, _) => {
                    if let Some(stream) = s.take() {
                        let _ = stream.shutdown(std::net::Shutdown::Write);
                    }
                }
                Dest::Udp(_) => {}
            }
        }
    }
}
