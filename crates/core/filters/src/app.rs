//! Application-level filters: tcpstream (zero-copy reassembly), http, dns.

use crate::packet::{app_payload, flow_hash, parse_tag, L4};
use dataplane::{Args, Batch, Ctx, Filter, FilterError, Tag};
use std::collections::{BTreeMap, HashMap};

/// Per-direction reassembly state: the next expected sequence number and the segments
/// that arrived early (tags, kept past their batch with `Ctx::keep`: in place in a file or
/// a ring of this space, a copy of a frame the kernel lent).
#[derive(Default, Clone)]
struct Dir {
    next: Option<u32>,
    held: BTreeMap<u32, Tag>,
    held_bytes: usize,
}

/// One session (a flow class): its directions, by (source, port, destination, port), so
/// that flows whose 16-bit classes collide still keep separate state.
type FlowSession = HashMap<(std::net::IpAddr, u16, std::net::IpAddr, u16), Dir>;

/// Session slots: classes map onto them modulo this many.
const SESSIONS: usize = 4096;

/// Zero-copy TCP reassembly (thesis 5.3.2): crops each segment's tag to its payload (a
/// metadata edit) and reorders tags so every connection's bytes come out in sequence order.
/// Retransmitted bytes are trimmed; early segments wait (as tags) for the gap to fill,
/// kept past their batch through `Ctx::keep` (copied only where the memory is lent, as
/// `rx`'s frames are, so a held segment never reads a refilled frame). Its
/// per-connection state is session state handed out by the runtime, selected by the flow
/// class (thesis 5.3.3).
pub struct TcpStream {
    limit: usize,
}

fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl Filter for TcpStream {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        let input = std::mem::take(&mut batch.tags);
        batch.clear();
        let mut lost = 0;
        for t in input {
            let Some(p) = parse_tag(cx, &t) else { continue };
            let (
                L4::Tcp {
                    sport,
                    dport,
                    seq,
                    syn,
                    ..
                },
                Some((_, src, dst, _)),
            ) = (p.l4, p.ip)
            else {
                continue;
            };
            let class = flow_hash(&p);
            let limit = self.limit;
            let (sessions, store) = cx.sessions_and_store::<FlowSession>(SESSIONS);
            let session = sessions.get(class);
            let d = session.entry((src, sport, dst, dport)).or_default();
            let mut seq = seq;
            if syn {
                seq = seq.wrapping_add(1);
                d.next = Some(seq);
            }
            let (off, len) = p.payload;
            if len == 0 {
                continue;
            }
            let mut seg = Tag {
                pos: t.pos + off as u64,
                len: len as u32,
                buf: t.buf,
                class,
            };
            let next = *d.next.get_or_insert(seq);
            // Trim bytes already delivered (retransmissions, overlaps).
            if seq_lt(seq, next) {
                let dup = next.wrapping_sub(seq) as u64;
                if dup >= seg.len as u64 {
                    continue;
                }
                seg.pos += dup;
                seg.len -= dup as u32;
                seq = next;
            }
            if seq == next {
                batch.push(seg);
                let mut nx = seq.wrapping_add(seg.len);
                // Release held segments that are now in order.
                while let Some((&s, &h)) = d.held.iter().next() {
                    if seq_lt(nx, s) {
                        break;
                    }
                    d.held.remove(&s);
                    d.held_bytes -= h.len as usize;
                    if store.data(&h).is_err() {
                        // Kept in a ring of this space that has lapped since: its bytes
                        // are lost, the stream goes on after them.
                        lost += 1;
                        let end = s.wrapping_add(h.len);
                        if seq_lt(nx, end) {
                            nx = end;
                        }
                        continue;
                    }
                    let skip = nx.wrapping_sub(s) as u64;
                    if skip < h.len as u64 {
                        batch.push(Tag {
                            pos: h.pos + skip,
                            len: h.len - skip as u32,
                            ..h
                        });
                        nx = s.wrapping_add(h.len);
                    }
                }
                d.next = Some(nx);
            } else if d.held_bytes + seg.len as usize <= limit {
                // The segment waits past this batch: its memory may not (a lent frame).
                match store.keep(&seg) {
                    Ok(kept) => {
                        d.held_bytes += seg.len as usize;
                        d.held.insert(seq, kept);
                    }
                    Err(_) => lost += 1,
                }
            } else {
                cx.warn(
                    "reassembly buffer limit reached; out-of-order data dropped (raise limit=)",
                );
            }
        }
        if lost > 0 {
            cx.warn("held segments were overwritten before their gap filled; dropped (a larger data ring holds them longer)");
        }
    }
    fn finish(&mut self, cx: &mut Ctx<'_>, out: &mut Batch) {
        // Gaps never filled: deliver what is held, in order, and say so.
        let mut gaps = 0;
        for (_, session) in cx.sessions::<FlowSession>(SESSIONS).iter_mut() {
            for d in session.values_mut() {
                for (_, t) in std::mem::take(&mut d.held) {
                    gaps += 1;
                    out.push(t);
                }
            }
        }
        if gaps > 0 {
            cx.warn(format!(
                "{gaps} segments after unfilled gaps delivered at the end"
            ));
        }
    }
}

const METHODS: [&str; 9] = [
    "GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE",
];

/// HTTP request detection: class by method.
pub struct Http {
    only: Option<u16>,
}
impl Filter for Http {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in batch.tags.iter_mut() {
            let c = app_payload(cx, t).map_or(0, http_method);
            t.class = match self.only {
                Some(o) if o != c => 0,
                _ => c,
            };
        }
    }
}
/// Class of an HTTP request line at the start of `d` (method index + 1), else 0.
pub fn http_method(d: &[u8]) -> u16 {
    for (i, m) in METHODS.iter().enumerate() {
        let m = m.as_bytes();
        if d.len() > m.len() + 1 && d.starts_with(m) && d[m.len()] == b' ' {
            // A request line ends with " HTTP/1.x" before CRLF.
            let line_end = d.iter().position(|&b| b == b'\n').unwrap_or(d.len());
            if d[..line_end].windows(6).any(|w| w == b" HTTP/") {
                return i as u16 + 1;
            }
        }
    }
    0
}

/// DNS message detection: 1 query, 2 response.
pub struct Dns {
    port: u16,
}
impl Filter for Dns {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in batch.tags.iter_mut() {
            let p = parse_tag(cx, t);
            let on_port = match p.and_then(|p| p.ports()) {
                Some((s, d)) => s == self.port || d == self.port,
                None => p.is_none(), // a cropped payload: judge by content alone
            };
            let tcp = matches!(p.map(|p| p.l4), Some(L4::Tcp { .. }));
            let msg = app_payload(cx, t).map(|d| if tcp && d.len() > 2 { &d[2..] } else { d });
            t.class = match msg {
                Some(d) if on_port => dns_kind(d),
                _ => 0,
            };
        }
    }
}
/// 1 for a well-formed DNS query header, 2 for a response, 0 otherwise.
pub fn dns_kind(d: &[u8]) -> u16 {
    if d.len() < 12 {
        return 0;
    }
    let flags = u16::from_be_bytes([d[2], d[3]]);
    let opcode = (flags >> 11) & 0xf;
    let qd = u16::from_be_bytes([d[4], d[5]]);
    if opcode > 6 || qd == 0 || qd > 64 {
        return 0;
    }
    if flags & 0x8000 != 0 {
        2
    } else {
        1
    }
}

pub(crate) fn make_tcpstream(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    Ok(Box::new(TcpStream {
        limit: a.size("limit", None, 4 << 20)? as usize,
    }))
}
pub(crate) fn make_http(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let only = match a.get("method", Some(0)) {
        None => None,
        Some(m) => Some(
            METHODS
                .iter()
                .position(|x| x.eq_ignore_ascii_case(m))
                .ok_or_else(|| {
                    FilterError::bad(
                        "method",
                        m,
                        &format!("a request method ({})", METHODS.join(", ")),
                    )
                })? as u16
                + 1,
        ),
    };
    Ok(Box::new(Http { only }))
}
pub(crate) fn make_dns(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    Ok(Box::new(Dns {
        port: a.parse("port", None, 53)?,
    }))
}

// The declarations of this file's filters are data in the catalog
// (`catalog::app::{TCPSTREAM, HTTP, DNS}`); their constructors are below, paired with them
// in `filters::CONSTRUCTORS`.
