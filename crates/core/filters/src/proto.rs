//! Protocol and classification filters over whole frames: eth, ip, tcp, udp, icmp,
//! dport, sport, proto, flow. Each parses the frame once (etherparse, zero-copy) and sets
//! the block's class; nothing is copied.

use crate::packet::{flow_hash, parse_tag, Pkt};
use dataplane::{Args, Batch, Ctx, Filter, FilterError};

/// A filter that classifies each block from its parsed frame (None if not a whole,
/// parseable frame).
pub struct ByPacket<F>(pub F);

impl<F: FnMut(Option<&Pkt>) -> u16 + Send> Filter for ByPacket<F> {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in batch.tags.iter_mut() {
            let p = parse_tag(cx, t);
            t.class = (self.0)(p.as_ref());
        }
    }
}

fn boxed<F: FnMut(Option<&Pkt>) -> u16 + Send + 'static>(
    f: F,
) -> Result<Box<dyn Filter>, FilterError> {
    Ok(Box::new(ByPacket(f)))
}

/// Numbers given positionally and/or as `key=`, each possibly comma-separated.
fn parse_u16_list(a: &Args, key: &str) -> Result<Vec<u16>, FilterError> {
    a.positional
        .iter()
        .chain(a.options.get(key))
        .flat_map(|s| s.split(','))
        .map(|part| {
            part.parse::<u16>()
                .map_err(|_| FilterError::bad(key, part, "numbers in 0..=65535"))
        })
        .collect()
}

pub(crate) fn eth(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let want = match a.get("type", Some(0)) {
        None => None,
        Some(t) => Some(
            u16::from_str_radix(t.trim_start_matches("0x"), 16)
                .map_err(|_| FilterError::bad("type", t, "a hex ethertype"))?,
        ),
    };
    boxed(move |p| match (p.and_then(|p| p.ether_type), want) {
        (Some(e), Some(w)) => (e == w) as u16,
        (Some(_), None) => 1,
        _ => 0,
    })
}

pub(crate) fn ip(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let version: u8 = a.parse("version", Some(0), 0)?;
    if ![0, 4, 6].contains(&version) {
        return Err(FilterError::bad("version", &version.to_string(), "4 or 6"));
    }
    boxed(move |p| match p.and_then(|p| p.ip) {
        Some((v, ..)) if version == 0 || v == version => v as u16,
        _ => 0,
    })
}

// tcp, udp and icmp test the IP header's protocol field, as libpcap does: every fragment
// of a TCP segment is "tcp", even those without a TCP header. tcp and udp classify by the
// protocol number (6, 17), as `proto` does, so their classes stay apart where branches
// meet: a `+` join keeps each block's class, and `tcp + udp | hist` shows two rows.
pub(crate) fn tcp(_: &Args) -> Result<Box<dyn Filter>, FilterError> {
    boxed(|p| {
        if p.and_then(|p| p.ip_proto_field) == Some(6) {
            6
        } else {
            0
        }
    })
}
pub(crate) fn udp(_: &Args) -> Result<Box<dyn Filter>, FilterError> {
    boxed(|p| {
        if p.and_then(|p| p.ip_proto_field) == Some(17) {
            17
        } else {
            0
        }
    })
}
pub(crate) fn icmp(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let version: u8 = a.parse("version", Some(0), 0)?;
    boxed(
        move |p| match p.and_then(|p| p.ip.map(|i| (i.0, p.ip_proto_field))) {
            Some((4, Some(1))) if version != 6 => 1,
            Some((6, Some(58))) if version != 4 => 2,
            _ => 0,
        },
    )
}
fn port(a: &Args, dst: bool) -> Result<Box<dyn Filter>, FilterError> {
    let only = parse_u16_list(a, "port")?;
    boxed(move |p| match p.and_then(|p| p.ports()) {
        Some((s, d)) => {
            let port = if dst { d } else { s };
            if only.is_empty() || only.contains(&port) {
                port
            } else {
                0
            }
        }
        None => 0,
    })
}
pub(crate) fn dport(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    port(a, true)
}
pub(crate) fn sport(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    port(a, false)
}
pub(crate) fn proto(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let only = parse_u16_list(a, "proto")?;
    boxed(move |p| match p.and_then(|p| p.ip_proto_field) {
        Some(n) if only.is_empty() || only.contains(&(n as u16)) => n as u16,
        _ => 0,
    })
}
pub(crate) fn flow(_: &Args) -> Result<Box<dyn Filter>, FilterError> {
    boxed(|p| p.map_or(0, flow_hash))
}

// The declarations of this file's filters are data in the catalog (`catalog::proto::{ETH,
// IP, TCP, UDP, ICMP, DPORT, SPORT, PROTO, FLOW}`); their constructors are below, paired
// with them in `filters::CONSTRUCTORS`.
