//! The `httplog` filter, the thesis' weblog generator (`httpwiki`, 001 §7.3.2): frames in,
//! one log line per HTTP request out, each a block of its own (Combined Log Format or
//! JSON), so `outfile`, `kafkaout` or a ring's reader downstream gets the log.
//!
//! - TCP connections are followed in a table (client: the side that sent the SYN, or,
//!   picked up mid-stream, the side whose bytes start a request); each direction is
//!   reassembled by the IDS's conservative reassembly (`ids::stream::Direction`), and
//!   [`exchange`] reads requests and responses from it.
//! - A request's line is written when its response has ended, or, never answered, when
//!   its connection ends (both FINs, a reset, eviction from a full table, or the end of
//!   the stream) with `-` for what was not seen.
//! - Lines leave together: with `flush=DURATION` (the thesis' 10 s throttle) they are held
//!   and written at once each time the capture's clock passes another DURATION, and at
//!   the end; in stream time, so the lines and their grouping do not depend on where or
//!   how fast the filter runs.
//!
//! Owns: the connection table, frames to exchanges, and when lines leave. The framing of
//! HTTP messages is [`exchange`]'s, the formats [`line`]'s.

pub mod exchange;
pub mod line;

use crate::ids::stream::{Direction, Step};
use crate::packet::{parse_tag, L4};
use dataplane::{Args, Batch, Ctx, Filter, FilterError};
use exchange::{Exchange, Record, Stats, MAX_HEAD};
use line::{Ends, Format};
use std::collections::HashMap;
use std::net::IpAddr;

/// Classes of the lines: answered requests and requests without a response.
pub const ANSWERED: u16 = 1;
pub const UNANSWERED: u16 = 2;

/// A connection's key: its endpoints in a canonical order.
type Key = (IpAddr, u16, IpAddr, u16);

fn key(a: (IpAddr, u16), b: (IpAddr, u16)) -> Key {
    if a <= b {
        (a.0, a.1, b.0, b.1)
    } else {
        (b.0, b.1, a.0, a.1)
    }
}

struct Conn {
    /// Order of creation: connections ended together write their lines in this order.
    id: u64,
    /// Client and server, once known.
    ends: Option<Ends>,
    dirs: [Direction; 2],
    exchange: Exchange,
    fins: [bool; 2],
    last_ns: u64,
}

/// One TCP segment as the table needs it.
struct Segment<'a> {
    ts_ns: u64,
    from: (IpAddr, u16),
    to: (IpAddr, u16),
    seq: u32,
    syn: bool,
    ack: bool,
    fin: bool,
    rst: bool,
    payload: &'a [u8],
}

/// What the filter counted beside the exchanges.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    frames_not_tcp: u64,
    connections: u64,
    evicted: u64,
    /// Segments whose bytes differ from bytes already seen (the first bytes are kept).
    overlaps: u64,
    /// Directions that held too much behind a gap and stopped being read.
    gave_up: u64,
    /// Segments of connections whose client was not yet known (mid-stream, not a request).
    skipped: u64,
}

pub struct HttpLog {
    format: Format,
    /// Hold lines and write them together every this many nanoseconds of capture time.
    flush_ns: Option<u64>,
    max_conns: usize,
    conns: HashMap<Key, Conn>,
    next_id: u64,
    stats: Stats,
    counts: Counts,
    /// Lines held for the next flush, with their classes.
    held: Vec<(String, u16)>,
    /// Capture time at which the held lines are written.
    next_flush: Option<u64>,
    /// Batches of lines written (counted with a throttle, where they do not depend on
    /// how the stream was cut into batches).
    batches: u64,
    records: Vec<Record>,
}

impl Filter for HttpLog {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        let input = std::mem::take(&mut batch.tags);
        batch.clear();
        for t in input {
            let ts_ns = cx.store.record_of(&t).map_or(0, |r| r.ts_ns);
            self.clock(ts_ns, cx, batch);
            let Some(seg) = segment_of(cx, &t, ts_ns) else {
                self.counts.frames_not_tcp += 1;
                continue;
            };
            self.segment(&seg);
        }
        if self.flush_ns.is_none() {
            self.emit(cx, batch);
        }
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, out: &mut Batch) {
        let mut conns: Vec<(Key, u64)> = self.conns.iter().map(|(k, c)| (*k, c.id)).collect();
        conns.sort_unstable_by_key(|c| c.1);
        for (k, _) in conns {
            if let Some(c) = self.conns.remove(&k) {
                let ts = c.last_ns;
                self.close(c, ts);
            }
        }
        self.emit(cx, out);
    }

    fn summary(&self) -> Option<String> {
        let (s, c) = (&self.stats, &self.counts);
        let batches = match self.flush_ns {
            Some(_) => format!("; written in {} batches", self.batches),
            None => String::new(),
        };
        Some(format!(
            "httplog: {} requests ({} answered, {} cut off, {} unanswered), {} responses without a request, {} client sides and {} server sides not HTTP, {} connections ({} evicted), {} overlapping segments differing, {} directions given up behind a gap, {} segments before the client was known, {} frames not TCP{batches}",
            s.requests, s.answered, s.cut, s.unanswered, s.orphans, s.bad_requests, s.bad_responses,
            c.connections, c.evicted, c.overlaps, c.gave_up, c.skipped, c.frames_not_tcp,
        ))
    }
}

/// The TCP segment in block `t`, if it holds one.
fn segment_of<'a>(cx: &'a Ctx<'_>, t: &dataplane::Tag, ts_ns: u64) -> Option<Segment<'a>> {
    let p = parse_tag(cx, t)?;
    let (
        L4::Tcp {
            sport,
            dport,
            seq,
            syn,
            fin,
            rst,
            ack,
        },
        Some((_, src, dst, _)),
    ) = (p.l4, p.ip)
    else {
        return None;
    };
    if p.fragmented {
        return None;
    }
    let data = cx.data(t).ok()?;
    let (off, len) = p.payload;
    Some(Segment {
        ts_ns,
        from: (src, sport),
        to: (dst, dport),
        seq,
        syn,
        ack,
        fin,
        rst,
        payload: data.get(off..off + len).unwrap_or(&[]),
    })
}

impl HttpLog {
    /// The capture's clock reads `ts_ns`: with a throttle, the held lines leave when it has
    /// passed the next flush time.
    fn clock(&mut self, ts_ns: u64, cx: &mut Ctx<'_>, out: &mut Batch) {
        let Some(every) = self.flush_ns else { return };
        let next = *self.next_flush.get_or_insert(ts_ns.saturating_add(every));
        if ts_ns >= next {
            self.emit(cx, out);
            // The next flush time on the same grid (a quiet spell skips ticks).
            let ticks = (ts_ns - next) / every + 1;
            self.next_flush = Some(next + ticks * every);
        }
    }

    /// Write the held lines, one block each, into `out`.
    fn emit(&mut self, cx: &mut Ctx<'_>, out: &mut Batch) {
        self.batches += u64::from(!self.held.is_empty());
        for (l, class) in self.held.drain(..) {
            let mut t = cx.store.push(l.as_bytes());
            t.class = class;
            out.push(t);
        }
    }

    fn segment(&mut self, s: &Segment<'_>) {
        let k = key(s.from, s.to);
        if !self.conns.contains_key(&k) {
            self.make_room(s.ts_ns);
            self.counts.connections += 1;
            let id = self.next_id;
            self.next_id += 1;
            let dirs = [Direction::new(2 * MAX_HEAD), Direction::new(2 * MAX_HEAD)];
            let c = Conn {
                id,
                ends: None,
                dirs,
                exchange: Exchange::default(),
                fins: [false; 2],
                last_ns: s.ts_ns,
            };
            self.conns.insert(k, c);
        }
        let Some(mut c) = self.conns.remove(&k) else {
            return;
        };
        c.last_ns = s.ts_ns;
        if c.ends.is_none() {
            c.ends = client_of(s);
        }
        let Some(ends) = c.ends else {
            self.counts.skipped += 1;
            self.conns.insert(k, c);
            return;
        };
        let d = usize::from(s.from != ends.client);
        if s.syn {
            c.dirs[d].syn(s.seq);
        }
        self.data(&mut c, d, s);
        c.fins[d] |= s.fin;
        if s.rst || c.fins == [true, true] {
            self.close(c, s.ts_ns);
        } else {
            self.conns.insert(k, c);
        }
    }

    /// The segment's payload into its direction, and what the new bytes complete.
    fn data(&mut self, c: &mut Conn, d: usize, s: &Segment<'_>) {
        if s.payload.is_empty() || !c.exchange.reads(d) {
            return;
        }
        match c.dirs[d].segment(s.seq, s.payload) {
            Step::Data { from, to } if to > from => {}
            Step::Data { .. } => return,
            Step::Overlap(_) => {
                self.counts.overlaps += 1;
                return;
            }
            Step::Gave => {
                self.counts.gave_up += 1;
                return;
            }
        }
        if d == 0 {
            c.exchange.client(&mut c.dirs[0], s.ts_ns, &mut self.stats);
        } else {
            c.exchange
                .server(&mut c.dirs[1], s.ts_ns, &mut self.stats, &mut self.records);
            self.lines(c.ends);
        }
        for side in 0..2 {
            if !c.exchange.reads(side) && !c.dirs[side].bytes().is_empty() {
                // Read no more (not HTTP, or a tunnel): its bytes are let go, and no more
                // segments come to it.
                c.dirs[side].consume(u64::MAX >> 1);
            }
        }
    }

    /// Connection `c` ended at `ts_ns`: its remaining exchanges are written.
    fn close(&mut self, mut c: Conn, ts_ns: u64) {
        c.exchange
            .close(&c.dirs[1], ts_ns, &mut self.stats, &mut self.records);
        self.lines(c.ends);
    }

    /// The finished records as held lines.
    fn lines(&mut self, ends: Option<Ends>) {
        let Some(ends) = ends else {
            self.records.clear();
            return;
        };
        for r in self.records.drain(..) {
            let class = if r.response.is_some() {
                ANSWERED
            } else {
                UNANSWERED
            };
            self.held.push((line::line(self.format, &ends, &r), class));
        }
    }

    /// Room for one more connection: the eighth least recently active end (their
    /// requests written as if the connection had closed), counted.
    fn make_room(&mut self, ts_ns: u64) {
        if self.conns.len() < self.max_conns {
            return;
        }
        let mut ages: Vec<(u64, u64, Key)> = self
            .conns
            .iter()
            .map(|(k, c)| (c.last_ns, c.id, *k))
            .collect();
        ages.sort_unstable();
        for (_, _, k) in ages.into_iter().take((self.max_conns / 8).max(1)) {
            if let Some(c) = self.conns.remove(&k) {
                self.counts.evicted += 1;
                self.close(c, ts_ns);
            }
        }
    }
}

/// Who is the client, if this segment tells: the sender of a SYN, the receiver of a
/// SYN-ACK, or (picked up mid-stream) the sender of bytes that start a request.
fn client_of(s: &Segment<'_>) -> Option<Ends> {
    let client_sends = match (s.syn, s.ack) {
        (true, false) => true,
        (true, true) => false,
        _ if crate::app::http_method(s.payload) != 0 => true,
        _ if s.payload.starts_with(b"HTTP/1.") => false,
        _ => return None,
    };
    Some(if client_sends {
        Ends {
            client: s.from,
            server: s.to,
        }
    } else {
        Ends {
            client: s.to,
            server: s.from,
        }
    })
}

fn parse_flush(a: &Args) -> Result<Option<u64>, FilterError> {
    let Some(v) = a.get("flush", None) else {
        return Ok(None);
    };
    let bad = || {
        FilterError::bad(
            "flush",
            v,
            "a duration of capture time: 10s, 500ms, 1m, or 0 for none",
        )
    };
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let scale = match unit {
        "" | "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "us" => 1_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(bad()),
    };
    let ns = n.checked_mul(scale).ok_or_else(bad)?;
    Ok((ns > 0).then_some(ns))
}

pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let format = match a.get("format", Some(0)).unwrap_or("clf") {
        "clf" => Format::Clf,
        "json" => Format::Json,
        v => return Err(FilterError::bad("format", v, "clf or json")),
    };
    Ok(Box::new(HttpLog {
        format,
        flush_ns: parse_flush(a)?,
        max_conns: a.size("flows", None, 1 << 16)?.max(1) as usize,
        conns: HashMap::new(),
        next_id: 0,
        stats: Stats::default(),
        counts: Counts::default(),
        held: Vec::new(),
        next_flush: None,
        batches: 0,
        records: Vec::new(),
    }))
}

// The declaration of `httplog` is data in the catalog (`catalog::httplog::HTTPLOG`); its
// constructor, `make`, is paired with it in `filters::CONSTRUCTORS`.

#[cfg(test)]
mod tests {
    use super::*;

    fn flush(v: &str) -> Result<Option<u64>, FilterError> {
        parse_flush(&Args::new(
            "httplog",
            vec![],
            vec![("flush".into(), v.into())],
        ))
    }

    #[test]
    fn flush_takes_durations_of_capture_time_and_refuses_the_rest() {
        assert_eq!(flush("10s").unwrap(), Some(10_000_000_000));
        assert_eq!(flush("10").unwrap(), Some(10_000_000_000));
        assert_eq!(flush("250ms").unwrap(), Some(250_000_000));
        assert_eq!(flush("2m").unwrap(), Some(120_000_000_000));
        assert_eq!(flush("0").unwrap(), None);
        for bad in ["", "s", "10x", "-1s", "99999999999999999h"] {
            match flush(bad) {
                Err(FilterError::BadValue { key, value, .. }) => {
                    assert_eq!((key.as_str(), value.as_str()), ("flush", bad))
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
