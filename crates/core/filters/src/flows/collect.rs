//! The collector side: IPFIX messages (and NetFlow v9 export packets) decoded into flow
//! records, and `ipfixin`, the source that listens for them.
//!
//! Decoding is `netflow_parser`'s (templates kept per exporter); this module owns the
//! record a pipeline sees, [`FlowRecord`], one block each, as a JSON object on one line
//! (newline included, so `ipfixin port=4739 | outfile flows.json` writes JSON lines):
//!
//! ```text
//! {"exporter":"127.0.0.1:40001","domain":0,"src":"10.0.0.1","dst":"10.0.0.2","sport":40000,
//!  "dport":80,"proto":6,"packets":5,"bytes":420,"start_ms":1700000000000,"end_ms":1700000000100,
//!  "tcp_flags":27,"tos":0,"vlan":0,"ingress":0,"end_reason":3}
//! ```
//!
//! ICMP flows carry type and code as `dport` (`type * 256 + code`) and `sport` 0, as
//! nfdump shows them. Fields an exporter did not send are 0 (NetFlow v9 has no end reason;
//! IPFIX times: 0 when sent only relative to the exporter's boot, flowStartSysUpTime). A
//! NetFlow v9 record is read as an IPFIX one, its field types being the IPFIX elements of
//! the same number, but for FIRST_SWITCHED and LAST_SWITCHED, which are made absolute with
//! the packet header's boot time (UNIX seconds * 1000 - sysUptime).

use dataplane::{Args, Batch, Ctx, Filter, FilterError};
use netflow_parser::variable_versions::field_value::{DataNumber, DurationValue, FieldValue};
use netflow_parser::variable_versions::ipfix::lookup::{IANAIPFixField as F, IPFixField};
use netflow_parser::variable_versions::ipfix::FlowSetBody as IpfixSet;
use netflow_parser::variable_versions::v9::FlowSetBody as V9Set;
use netflow_parser::{NetflowPacket, NetflowParser};
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// One flow record as `ipfixin` hands it on (one direction of a flow).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FlowRecord {
    pub exporter: String,
    pub domain: u32,
    pub src: String,
    pub dst: String,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub packets: u64,
    pub bytes: u64,
    pub start_ms: u64,
    pub end_ms: u64,
    pub tcp_flags: u16,
    pub tos: u8,
    pub vlan: u16,
    pub ingress: u32,
    pub end_reason: u8,
}

/// Decodes messages, keeping each exporter's templates.
#[derive(Default)]
pub struct Decoder {
    parsers: HashMap<SocketAddr, NetflowParser>,
    /// Messages neither IPFIX nor NetFlow v9 (v5, v7), and data sets whose template was
    /// never seen.
    pub other_versions: u64,
    pub no_template: u64,
    /// The first decoding error met, to report.
    pub error: Option<String>,
}

fn num(v: &FieldValue) -> Option<u64> {
    Some(match v {
        FieldValue::DataNumber(d) => match d {
            DataNumber::U8(x) => *x as u64,
            DataNumber::U16(x) => *x as u64,
            DataNumber::U24(x) | DataNumber::U32(x) => *x as u64,
            DataNumber::U64(x) => *x,
            _ => return None,
        },
        FieldValue::Duration(DurationValue::Millis { value, .. }) => *value,
        FieldValue::Duration(DurationValue::Seconds { value, .. }) => value * 1000,
        FieldValue::TcpControlBits(b, _) => u16::from(b.clone()) as u64,
        FieldValue::FlowEndReason(r) => u8::from(*r) as u64,
        FieldValue::ProtocolType(p) => u8::from(*p) as u64,
        _ => return None,
    })
}

fn addr(v: &FieldValue) -> Option<IpAddr> {
    match v {
        FieldValue::Ip4Addr(a) => Some(IpAddr::V4(*a)),
        FieldValue::Ip6Addr(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// One data record's fields, as IPFIX elements, as a [`FlowRecord`]. `boot_ms`: a NetFlow
/// v9 exporter's boot, to which FIRST_SWITCHED and LAST_SWITCHED (IPFIX's
/// flowStart/EndSysUpTime, the same numbers) are relative; IPFIX: `None`, and those are not
/// read.
fn record<'a>(
    fields: impl Iterator<Item = (F, &'a FieldValue)>,
    exporter: SocketAddr,
    domain: u32,
    boot_ms: Option<u64>,
) -> FlowRecord {
    let mut r = FlowRecord {
        exporter: exporter.to_string(),
        domain,
        ..FlowRecord::default()
    };
    let (mut src, mut dst) = (
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    );
    let mut icmp = None;
    for (k, v) in fields {
        let n = num(v).unwrap_or(0);
        match k {
            F::SourceIpv4address | F::SourceIpv6address => src = addr(v).unwrap_or(src),
            F::DestinationIpv4address | F::DestinationIpv6address => dst = addr(v).unwrap_or(dst),
            F::SourceTransportPort => r.sport = n as u16,
            F::DestinationTransportPort => r.dport = n as u16,
            F::ProtocolIdentifier => r.proto = n as u8,
            F::PacketDeltaCount => r.packets = n,
            F::OctetDeltaCount => r.bytes = n,
            F::FlowStartMilliseconds | F::FlowStartSeconds => r.start_ms = n,
            F::FlowEndMilliseconds | F::FlowEndSeconds => r.end_ms = n,
            F::FlowStartSysUpTime => r.start_ms = boot_ms.map_or(r.start_ms, |b| b + n),
            F::FlowEndSysUpTime => r.end_ms = boot_ms.map_or(r.end_ms, |b| b + n),
            F::TcpControlBits => r.tcp_flags = n as u16,
            F::IpClassOfService => r.tos = n as u8,
            F::VlanId => r.vlan = n as u16,
            F::IngressInterface => r.ingress = n as u32,
            F::FlowEndReason => r.end_reason = n as u8,
            F::IcmpTypeCodeIpv4 | F::IcmpTypeCodeIpv6 => icmp = Some(n as u16),
            _ => {}
        }
    }
    if let (Some(tc), 1 | 58) = (icmp, r.proto) {
        (r.sport, r.dport) = (0, tc);
    }
    (r.src, r.dst) = (src.to_string(), dst.to_string());
    r
}

impl Decoder {
    /// The flow records of one message (or several back to back) from `exporter`.
    pub fn decode(&mut self, msg: &[u8], exporter: SocketAddr, out: &mut Vec<FlowRecord>) {
        let parser = self.parsers.entry(exporter).or_default();
        let res = parser.parse_bytes(msg);
        if let (Some(e), None) = (&res.error, &self.error) {
            self.error = Some(format!("from {exporter}: {e}"));
        }
        for p in &res.packets {
            match p {
                NetflowPacket::IPFix(m) => {
                    let domain = m.header.observation_domain_id;
                    for set in &m.flowsets {
                        match &set.body {
                            IpfixSet::Data(d) => out.extend(d.fields.iter().map(|f| {
                                let iana = f.iter().filter_map(|(k, v)| match k {
                                    IPFixField::IANA(k) => Some((*k, v)),
                                    _ => None,
                                });
                                record(iana, exporter, domain, None)
                            })),
                            IpfixSet::NoTemplate(_) => self.no_template += 1,
                            _ => {}
                        }
                    }
                }
                NetflowPacket::V9(m) => {
                    let h = &m.header;
                    let boot = (u64::from(h.unix_secs) * 1000).saturating_sub(h.sys_up_time.into());
                    for set in &m.flowsets {
                        match &set.body {
                            V9Set::Data(d) => out.extend(d.fields.iter().map(|f| {
                                let types = f.iter().map(|(k, v)| (F::from(u16::from(*k)), v));
                                record(types, exporter, h.source_id, Some(boot))
                            })),
                            V9Set::NoTemplate(_) => self.no_template += 1,
                            _ => {}
                        }
                    }
                }
                _ => self.other_versions += 1,
            }
        }
    }
}

/// `ipfixin`: listens for IPFIX (or NetFlow v9) over UDP and hands on a block per flow
/// record.
pub struct IpfixIn {
    sock: UdpSocket,
    dec: Decoder,
    buf: Vec<u8>,
    pending: std::collections::VecDeque<FlowRecord>,
    /// Ends after this many records (0: never).
    count: u64,
    /// Ends after this long without a message, once one came (None: never).
    idle: Option<Duration>,
    last: Option<Instant>,
    records: u64,
    messages: u64,
    done: bool,
}

impl Filter for IpfixIn {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}

    fn arm(&mut self, w: &mut dataplane::readiness::Arm<'_>, _source: bool) {
        use std::os::fd::AsFd;
        if self.done || !self.pending.is_empty() {
            w.ready();
            return;
        }
        w.fd(self.sock.as_fd());
        if let (Some(idle), Some(last)) = (self.idle, self.last) {
            w.deadline(last + idle);
        }
    }

    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if self.pending.is_empty() && !self.done {
            self.receive();
        }
        while out.len() < max {
            let Some(r) = self.pending.pop_front() else {
                break;
            };
            let mut line = serde_json::to_vec(&r).expect("a record serializes");
            line.push(b'\n');
            let mut t = cx.store.push(&line);
            t.class = 1;
            out.push(t);
            self.records += 1;
            if self.count > 0 && self.records >= self.count {
                self.done = true;
                self.pending.clear();
            }
        }
        if let Some(e) = self.dec.error.take() {
            cx.warn(format!("a message did not decode ({e})"));
        }
        !(self.done && self.pending.is_empty())
    }

    fn summary(&self) -> Option<String> {
        Some(format!(
            "ipfixin: {} records from {} messages{}{}",
            self.records,
            self.messages,
            if self.dec.no_template > 0 {
                format!("; {} data sets before their template", self.dec.no_template)
            } else {
                String::new()
            },
            if self.dec.other_versions > 0 {
                format!(
                    "; {} messages neither IPFIX nor NetFlow v9",
                    self.dec.other_versions
                )
            } else {
                String::new()
            },
        ))
    }
}

impl IpfixIn {
    /// Takes every datagram waiting now (never blocks).
    fn receive(&mut self) {
        let mut got = Vec::new();
        loop {
            match self.sock.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    self.messages += 1;
                    self.last = Some(Instant::now());
                    self.dec.decode(&self.buf[..n], from, &mut got);
                }
                Err(_) => break,
            }
        }
        self.pending.extend(got);
        if let (Some(idle), Some(last)) = (self.idle, self.last) {
            if self.pending.is_empty() && last.elapsed() >= idle {
                self.done = true;
            }
        }
    }

    pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
        let port: u16 = a.parse("port", Some(0), 4739)?;
        let bind = a.get("bind", None).unwrap_or("0.0.0.0");
        let ip: IpAddr = bind
            .parse()
            .map_err(|_| FilterError::bad("bind", bind, "an IP address"))?;
        let sock = UdpSocket::bind((ip, port))
            .map_err(|e| FilterError::io(format!("cannot listen on udp {bind}:{port}"), e))?;
        sock.set_nonblocking(true)
            .map_err(|e| FilterError::io("a non-blocking socket", e))?;
        let idle: f64 = a.parse("idle", None, 0.0)?;
        if !(idle.is_finite() && idle >= 0.0) {
            return Err(FilterError::bad(
                "idle",
                &idle.to_string(),
                "seconds, 0 or more",
            ));
        }
        Ok(Box::new(IpfixIn {
            sock,
            dec: Decoder::default(),
            buf: vec![0; 65536],
            pending: Default::default(),
            count: a.size("count", None, 0)?,
            idle: (idle > 0.0).then(|| Duration::from_secs_f64(idle)),
            last: None,
            records: 0,
            messages: 0,
            done: false,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::ipfix::{test_record as rec, Encoder, Record, Version};

    /// What the encoder sends, decoded by netflow_parser (an independent decoder), is what
    /// went in, in order, whatever mix of templates and however the messages were cut: as
    /// IPFIX, and as NetFlow v9 but for the end reason, which v9 does not carry.
    #[test]
    fn messages_decode_to_the_records_that_went_in() {
        for v in [Version::Ipfix, Version::V9] {
            decodes_to_what_went_in(v);
        }
    }

    fn decodes_to_what_went_in(v: Version) {
        let recs: Vec<Record> = (0..200).map(|i| rec(i, i % 3 == 0)).collect();
        let mut enc = Encoder::new(v, 7, 300, 600_000);
        enc.stream_starts(1_699_999_999_999);
        let mut msgs = Vec::new();
        for (i, r) in recs.iter().enumerate() {
            enc.push(r, 1_700_000_000_000 + i as u64 * 10, &mut |m| {
                msgs.push(m.to_vec())
            });
        }
        enc.flush(&mut |m| msgs.push(m.to_vec()));
        assert!(msgs.len() > 10 && msgs.iter().all(|m| m.len() <= 300));
        let mut dec = Decoder::default();
        let mut out = Vec::new();
        let from: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut seq = 0u32;
        for (i, m) in msgs.iter().enumerate() {
            let before = out.len();
            dec.decode(m, from, &mut out);
            let n = u16::from_be_bytes([m[2], m[3]]) as usize;
            let at = |o: usize| u32::from_be_bytes([m[o], m[o + 1], m[o + 2], m[o + 3]]);
            if v == Version::Ipfix {
                assert_eq!(n, m.len());
                assert_eq!(
                    at(8),
                    seq,
                    "sequence number: data records before the message"
                );
            } else {
                let templates = if i == 0 { 2 } else { 0 };
                assert_eq!(
                    n,
                    out.len() - before + templates,
                    "count: template and data records"
                );
                assert_eq!(at(12), i as u32, "sequence number: packets before this one");
            }
            seq += (out.len() - before) as u32;
        }
        assert_eq!(dec.error, None, "{v:?}");
        assert_eq!(out.len(), recs.len(), "{v:?}");
        for (r, o) in recs.iter().zip(&out) {
            let ip = |a: &[u8; 16]| {
                if r.v6 {
                    std::net::Ipv6Addr::from(*a).to_string()
                } else {
                    Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string()
                }
            };
            let icmp = matches!(r.proto, 1 | 58);
            assert_eq!((o.src.clone(), o.dst.clone()), (ip(&r.src), ip(&r.dst)));
            assert_eq!(
                (o.sport, o.dport),
                if icmp {
                    (0, r.dport)
                } else {
                    (r.sport, r.dport)
                }
            );
            assert_eq!(
                (o.proto, o.packets, o.bytes, o.start_ms, o.end_ms),
                (r.proto, r.packets, r.octets, r.start_ms, r.end_ms)
            );
            assert_eq!(
                (
                    o.tcp_flags,
                    o.tos,
                    o.vlan,
                    o.ingress,
                    o.end_reason,
                    o.domain
                ),
                (
                    r.flags,
                    r.tos,
                    r.vlan,
                    r.ingress,
                    if v == Version::V9 { 0 } else { r.reason },
                    7
                )
            );
        }
    }

    /// Templates come with the first message and again once `refresh` of stream time has
    /// passed; a decoder that missed the first message learns them from the refresh.
    #[test]
    fn templates_are_sent_again_after_the_refresh() {
        let mut enc = Encoder::new(Version::Ipfix, 0, 1400, 1000);
        let mut msgs = Vec::new();
        for i in 0..30u64 {
            enc.push(&rec(i, false), 1_700_000_000_000 + i * 100, &mut |m| {
                msgs.push(m.to_vec())
            });
            if i % 3 == 2 {
                enc.flush(&mut |m| msgs.push(m.to_vec()));
            }
        }
        assert_eq!(enc.templates, 3, "at 0 s, 1 s and 2 s of stream time");
        let mut dec = Decoder::default();
        let mut out = Vec::new();
        for m in &msgs[1..] {
            dec.decode(m, "127.0.0.1:9".parse().unwrap(), &mut out);
        }
        assert!(
            dec.no_template > 0,
            "the data before the first refresh had no template"
        );
        assert!(
            out.len() >= 20,
            "after the refresh every record decodes: {}",
            out.len()
        );
    }
}
