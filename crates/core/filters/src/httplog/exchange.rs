//! The HTTP/1.x exchanges of one TCP connection: requests read from the client's
//! reassembled bytes, responses from the server's, paired in order (HTTP/1.1 answers
//! pipelined requests in the order they came), bodies skipped without being kept.
//!
//! The bytes come from [`Direction`] (`ids::stream`, the IDS's conservative reassembly):
//! a side reads from its cursor, parses a message head with `httparse`, then gives the
//! head back with [`Direction::consume`] and moves its cursor past the body (a
//! `Content-Length` body is skipped before it arrives, so it is never copied; a chunked
//! one is read chunk header by chunk header; a response without either lasts until the
//! server closes). What the side cannot read as HTTP stops that side, counted in
//! [`Stats`], and the connection's other requests are still written.
//!
//! Owns: message framing (RFC 9112 §6.3: which messages have bodies and how long they
//! are), pairing, and what a finished exchange records. Not frames, not formats.

use crate::ids::stream::Direction;
use std::collections::VecDeque;

/// Largest request or response head read (bytes up to the blank line); a longer one
/// stops its side (Apache's and nginx's limits are 8-16 KiB a line, 100 fields).
pub const MAX_HEAD: usize = 64 << 10;
/// Header fields read per message.
const MAX_FIELDS: usize = 128;

/// A request as the log needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Capture time of the packet that completed the request's head.
    pub ts_ns: u64,
    pub method: String,
    pub uri: String,
    /// HTTP/1.minor.
    pub minor: u8,
    pub host: Option<String>,
    pub user_agent: Option<String>,
    pub referer: Option<String>,
}

/// What was seen of a request's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Bytes of the body (declared length, the chunks' sizes, or up to the close);
    /// when the response was cut off, what arrived of it.
    pub size: u64,
    /// Capture time of the packet that completed its head, and of the one that ended it.
    pub head_ns: u64,
    pub end_ns: u64,
    /// The whole response was seen (not cut off by the end of the connection).
    pub complete: bool,
}

/// A request and, when it came, its response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub request: Request,
    pub response: Option<Response>,
}

/// What the exchanges of all connections came to (the filter's summary).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub requests: u64,
    pub answered: u64,
    pub unanswered: u64,
    /// Responses with no request waiting for them (the request was not seen).
    pub orphans: u64,
    /// Responses cut off before their end.
    pub cut: u64,
    /// Client and server sides whose bytes were not HTTP (or a head over [`MAX_HEAD`]).
    pub bad_requests: u64,
    pub bad_responses: u64,
}

/// How a message's body is framed; the side is reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// `Content-Length`: ends at this stream offset.
    Length { end: u64 },
    /// Chunked: the next thing at the cursor is a chunk-size line, or the trailers.
    Chunked { trailers: bool },
    /// Until the connection closes (a response with neither length nor chunking).
    UntilClose { from: u64 },
}

/// One side's reading position.
#[derive(Debug, Clone, Default)]
struct Side {
    /// Stream offset of what the side reads next (a head, a chunk line, the body's end).
    cursor: u64,
    body: Option<Body>,
    /// The side stopped: not HTTP, a head too long, lost bytes, or a tunnel (101, CONNECT).
    stopped: bool,
}

/// The exchanges of one connection.
#[derive(Debug, Clone, Default)]
pub struct Exchange {
    sides: [Side; 2],
    /// Requests not yet answered, in order.
    pending: VecDeque<Request>,
    /// The request whose response is being read, and that response so far.
    answering: Option<(Request, Response)>,
}

/// The bytes from stream offset `at` that have arrived, if any have (None: `at` lies
/// beyond them, in a body skipped ahead, or past bytes the reassembly could not keep).
fn at(dir: &Direction, offset: u64) -> Option<&[u8]> {
    let i = offset.checked_sub(dir.base())? as usize;
    dir.bytes().get(i..)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn field<'a>(headers: &'a [httparse::Header<'_>], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

/// The body framing the fields say (chunked wins over a length, RFC 9112 §6.3).
/// Err: a length that is not a number.
fn framing(headers: &[httparse::Header<'_>], end_of_head: u64) -> Result<Option<Body>, ()> {
    let chunked = field(headers, "transfer-encoding").is_some_and(|v| {
        text(v)
            .rsplit(',')
            .next()
            .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
    });
    if chunked {
        return Ok(Some(Body::Chunked { trailers: false }));
    }
    match field(headers, "content-length") {
        None => Ok(None),
        Some(v) => {
            let n: u64 = std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or(())?;
            Ok((n > 0).then_some(Body::Length {
                end: end_of_head + n,
            }))
        }
    }
}

/// What reading a body came to.
enum Skip {
    /// The body ended (its size so far is in the caller's count).
    Done,
    /// More bytes are needed.
    Wait,
    /// Not a chunked body after all.
    Bad,
}

impl Side {
    /// Read on in the current body; `size` grows by the chunks' sizes.
    fn skip_body(&mut self, dir: &mut Direction, size: &mut u64) -> Skip {
        loop {
            let Some(body) = self.body else {
                return Skip::Done;
            };
            match body {
                Body::Length { end } => {
                    dir.consume(end);
                    self.cursor = end;
                    if dir.next() < end {
                        return Skip::Wait;
                    }
                    self.body = None;
                }
                Body::UntilClose { .. } => {
                    self.cursor = dir.next();
                    dir.consume(self.cursor);
                    return Skip::Wait;
                }
                Body::Chunked { trailers: false } => {
                    let Some(b) = at(dir, self.cursor) else {
                        return Skip::Wait;
                    };
                    match httparse::parse_chunk_size(b) {
                        Ok(httparse::Status::Complete((n, 0))) => {
                            self.cursor += n as u64;
                            self.body = Some(Body::Chunked { trailers: true });
                        }
                        Ok(httparse::Status::Complete((n, len))) => {
                            // The chunk's data and its CRLF are skipped, arrived or not.
                            *size += len;
                            self.cursor += n as u64 + len + 2;
                        }
                        Ok(httparse::Status::Partial) if b.len() < 1024 => return Skip::Wait,
                        _ => return Skip::Bad,
                    }
                    dir.consume(self.cursor);
                }
                Body::Chunked { trailers: true } => {
                    let Some(b) = at(dir, self.cursor) else {
                        return Skip::Wait;
                    };
                    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
                    match httparse::parse_headers(b, &mut fields) {
                        Ok(httparse::Status::Complete((n, _))) => {
                            self.cursor += n as u64;
                            dir.consume(self.cursor);
                            self.body = None;
                        }
                        Ok(httparse::Status::Partial) if b.len() < MAX_HEAD => return Skip::Wait,
                        _ => return Skip::Bad,
                    }
                }
            }
            if self.body.is_none() {
                return Skip::Done;
            }
        }
    }
}

/// What reading a head at the cursor came to: parsed (with its length), more bytes
/// needed, or not HTTP.
enum Head<T> {
    Parsed(T, u64),
    Wait,
    Bad,
}

/// Whether an incomplete head can still complete: it is under the limit and the
/// reassembly kept every byte after it.
fn can_wait(dir: &Direction, have: usize) -> bool {
    have < MAX_HEAD && !dir.truncated()
}

impl Exchange {
    /// Whether side `d` (0 the client's, 1 the server's) is still read: once it stopped
    /// (not HTTP, a tunnel, the connection closed), its bytes need not be kept.
    pub fn reads(&self, d: usize) -> bool {
        !self.sides[d].stopped
    }

    /// New bytes of the client's side (`dir`), seen at `ts_ns`.
    pub fn client(&mut self, dir: &mut Direction, ts_ns: u64, stats: &mut Stats) {
        let s = &mut self.sides[0];
        while !s.stopped {
            let mut ignored = 0;
            match s.skip_body(dir, &mut ignored) {
                Skip::Wait => return,
                Skip::Bad => {
                    s.stopped = true;
                    stats.bad_requests += 1;
                    return;
                }
                Skip::Done => {}
            }
            match read_request(dir, s.cursor, ts_ns) {
                Head::Wait => return,
                Head::Bad => {
                    s.stopped = true;
                    stats.bad_requests += 1;
                }
                Head::Parsed((req, body), len) => {
                    s.cursor += len;
                    dir.consume(s.cursor);
                    s.body = body;
                    stats.requests += 1;
                    self.pending.push_back(req);
                }
            }
        }
    }

    /// New bytes of the server's side, seen at `ts_ns`: finished exchanges go to `out`.
    pub fn server(
        &mut self,
        dir: &mut Direction,
        ts_ns: u64,
        stats: &mut Stats,
        out: &mut Vec<Record>,
    ) {
        while !self.sides[1].stopped {
            let mut size = self.answering.as_ref().map_or(0, |a| a.1.size);
            let skip = self.sides[1].skip_body(dir, &mut size);
            if let Some(a) = &mut self.answering {
                a.1.size = size;
            }
            match skip {
                Skip::Wait => return,
                Skip::Bad => {
                    self.sides[1].stopped = true;
                    stats.bad_responses += 1;
                    return;
                }
                Skip::Done => self.answered(ts_ns, true, stats, out),
            }
            let method = self.pending.front().map(|r| r.method.as_str());
            match read_response(dir, self.sides[1].cursor, method) {
                Head::Wait => return,
                Head::Bad => {
                    self.sides[1].stopped = true;
                    stats.bad_responses += 1;
                }
                Head::Parsed((status, body), len) => {
                    self.sides[1].cursor += len;
                    dir.consume(self.sides[1].cursor);
                    self.response(status, body, ts_ns, stats, out);
                }
            }
        }
    }

    /// A response head with `status` and `body` was read.
    fn response(
        &mut self,
        status: u16,
        body: Option<Body>,
        ts_ns: u64,
        stats: &mut Stats,
        out: &mut Vec<Record>,
    ) {
        if (100..200).contains(&status) && status != 101 {
            // Interim (100 Continue, 103 Early Hints): the final response follows.
            return;
        }
        let s = &mut self.sides[1];
        s.body = match body {
            Some(Body::UntilClose { .. }) => Some(Body::UntilClose { from: s.cursor }),
            b => b,
        };
        let Some(req) = self.pending.pop_front() else {
            stats.orphans += 1;
            return;
        };
        let tunnel = status == 101 || (req.method == "CONNECT" && (200..300).contains(&status));
        let size = match s.body {
            Some(Body::Length { end }) => end - s.cursor,
            _ => 0,
        };
        let resp = Response {
            status,
            size,
            head_ns: ts_ns,
            end_ns: ts_ns,
            complete: false,
        };
        self.answering = Some((req, resp));
        if tunnel {
            // What follows is not HTTP: both sides stop reading.
            self.sides[1].body = None;
            self.sides[0].stopped = true;
            self.sides[1].stopped = true;
            self.answered(ts_ns, true, stats, out);
        }
    }

    /// The response being read ended (`complete`: all of it was seen).
    fn answered(&mut self, ts_ns: u64, complete: bool, stats: &mut Stats, out: &mut Vec<Record>) {
        if let Some((request, mut resp)) = self.answering.take() {
            resp.end_ns = ts_ns;
            resp.complete = complete;
            stats.answered += 1;
            stats.cut += u64::from(!complete);
            out.push(Record {
                request,
                response: Some(resp),
            });
        }
    }

    /// The connection ended at `ts_ns` (both FINs, a reset, the end of the stream or
    /// eviction): a response read to the close ends, a response cut off is written with
    /// what arrived, and requests never answered are written without one.
    pub fn close(
        &mut self,
        server: &Direction,
        ts_ns: u64,
        stats: &mut Stats,
        out: &mut Vec<Record>,
    ) {
        if let Some((_, resp)) = &mut self.answering {
            match self.sides[1].body {
                Some(Body::UntilClose { from }) => {
                    resp.size = server.next().saturating_sub(from);
                    self.sides[1].body = None;
                }
                Some(Body::Length { end }) => {
                    resp.size -= end.saturating_sub(server.next());
                }
                _ => {}
            }
        }
        let complete = self.sides[1].body.is_none();
        self.answered(ts_ns, complete, stats, out);
        for request in self.pending.drain(..) {
            stats.unanswered += 1;
            out.push(Record {
                request,
                response: None,
            });
        }
        self.sides[0].stopped = true;
        self.sides[1].stopped = true;
    }
}

/// The request head at stream offset `from`, and its body's framing.
fn read_request(dir: &Direction, from: u64, ts_ns: u64) -> Head<(Request, Option<Body>)> {
    let Some(b) = at(dir, from).filter(|b| !b.is_empty()) else {
        return Head::Wait;
    };
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(b) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if can_wait(dir, b.len()) => return Head::Wait,
        _ => return Head::Bad,
    };
    let get = |name| field(req.headers, name).map(text);
    let Ok(body) = framing(req.headers, from + len as u64) else {
        return Head::Bad;
    };
    let request = Request {
        ts_ns,
        method: req.method.unwrap_or_default().to_string(),
        uri: req.path.unwrap_or_default().to_string(),
        minor: req.version.unwrap_or(1),
        host: get("host"),
        user_agent: get("user-agent"),
        referer: get("referer"),
    };
    Head::Parsed((request, body), len as u64)
}

/// The response head at `from` (answering a request of `method`, when one waits), its
/// status and body framing.
fn read_response(dir: &Direction, from: u64, method: Option<&str>) -> Head<(u16, Option<Body>)> {
    let Some(b) = at(dir, from).filter(|b| !b.is_empty()) else {
        return Head::Wait;
    };
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut resp = httparse::Response::new(&mut fields);
    let len = match resp.parse(b) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if can_wait(dir, b.len()) => return Head::Wait,
        _ => return Head::Bad,
    };
    let status = resp.code.unwrap_or(0);
    // No body: answers to HEAD, 1xx, 204, 304 (RFC 9112 §6.3).
    if method == Some("HEAD") || (100..200).contains(&status) || status == 204 || status == 304 {
        return Head::Parsed((status, None), len as u64);
    }
    let Ok(body) = framing(resp.headers, from + len as u64) else {
        return Head::Bad;
    };
    let body = match body {
        None if field(resp.headers, "content-length").is_none() => {
            Some(Body::UntilClose { from: 0 })
        }
        b => b,
    };
    Head::Parsed((status, body), len as u64)
}

#[cfg(test)]
mod tests;
