//! IPFIX messages (RFC 7011) of flow records with the information elements of RFC 7012.
//!
//! Owns the wire form: the two templates (IPv4 and IPv6, [`V4`] and [`V6`]), a message's
//! header (version 10, length, export time, sequence number, observation domain), its
//! template set (in the first message and again every `refresh` of stream time, so a
//! collector that starts late or restarts learns them over UDP), and its data sets, the
//! records of one template each, packed up to `mtu` bytes a message. The export time is
//! the stream's time, like every time in the records, so the same capture makes the same
//! bytes. The sequence number counts the data records sent before the message, modulo
//! 2^32 (RFC 7011 §3.1).

use super::cache::{EndReason, Flow};
use super::observe::{ICMP, ICMPV6};

/// An information element of RFC 7012 and the length we send it with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub id: u16,
    pub len: u16,
}

const fn f(id: u16, len: u16) -> Field {
    Field { id, len }
}

pub const OCTET_DELTA_COUNT: u16 = 1;
pub const PACKET_DELTA_COUNT: u16 = 2;
pub const PROTOCOL_IDENTIFIER: u16 = 4;
pub const IP_CLASS_OF_SERVICE: u16 = 5;
pub const TCP_CONTROL_BITS: u16 = 6;
pub const SOURCE_TRANSPORT_PORT: u16 = 7;
pub const SOURCE_IPV4_ADDRESS: u16 = 8;
pub const INGRESS_INTERFACE: u16 = 10;
pub const DESTINATION_TRANSPORT_PORT: u16 = 11;
pub const DESTINATION_IPV4_ADDRESS: u16 = 12;
pub const SOURCE_IPV6_ADDRESS: u16 = 27;
pub const DESTINATION_IPV6_ADDRESS: u16 = 28;
pub const ICMP_TYPE_CODE_IPV4: u16 = 32;
pub const VLAN_ID: u16 = 58;
pub const IP_VERSION: u16 = 60;
pub const FLOW_END_REASON: u16 = 136;
pub const ICMP_TYPE_CODE_IPV6: u16 = 139;
pub const FLOW_START_MILLISECONDS: u16 = 152;
pub const FLOW_END_MILLISECONDS: u16 = 153;

/// A template: its ID and fields in order.
#[derive(Debug, PartialEq, Eq)]
pub struct Template {
    pub id: u16,
    pub fields: &'static [Field],
}

impl Template {
    /// Bytes of one data record.
    pub fn record_len(&self) -> usize {
        self.fields.iter().map(|f| f.len as usize).sum()
    }
}

/// Flows of IPv4 packets.
pub static V4: Template = Template {
    id: 256,
    fields: &[
        f(SOURCE_IPV4_ADDRESS, 4),
        f(DESTINATION_IPV4_ADDRESS, 4),
        f(SOURCE_TRANSPORT_PORT, 2),
        f(DESTINATION_TRANSPORT_PORT, 2),
        f(PROTOCOL_IDENTIFIER, 1),
        f(IP_VERSION, 1),
        f(IP_CLASS_OF_SERVICE, 1),
        f(TCP_CONTROL_BITS, 2),
        f(ICMP_TYPE_CODE_IPV4, 2),
        f(PACKET_DELTA_COUNT, 8),
        f(OCTET_DELTA_COUNT, 8),
        f(FLOW_START_MILLISECONDS, 8),
        f(FLOW_END_MILLISECONDS, 8),
        f(INGRESS_INTERFACE, 4),
        f(VLAN_ID, 2),
        f(FLOW_END_REASON, 1),
    ],
};

/// Flows of IPv6 packets.
pub static V6: Template = Template {
    id: 257,
    fields: &[
        f(SOURCE_IPV6_ADDRESS, 16),
        f(DESTINATION_IPV6_ADDRESS, 16),
        f(SOURCE_TRANSPORT_PORT, 2),
        f(DESTINATION_TRANSPORT_PORT, 2),
        f(PROTOCOL_IDENTIFIER, 1),
        f(IP_VERSION, 1),
        f(IP_CLASS_OF_SERVICE, 1),
        f(TCP_CONTROL_BITS, 2),
        f(ICMP_TYPE_CODE_IPV6, 2),
        f(PACKET_DELTA_COUNT, 8),
        f(OCTET_DELTA_COUNT, 8),
        f(FLOW_START_MILLISECONDS, 8),
        f(FLOW_END_MILLISECONDS, 8),
        f(INGRESS_INTERFACE, 4),
        f(VLAN_ID, 2),
        f(FLOW_END_REASON, 1),
    ],
};

const HEADER_LEN: usize = 16;
const SET_HEADER_LEN: usize = 4;
const TEMPLATE_SET_ID: u16 = 2;

/// One direction of a flow, as exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub v6: bool,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub tos: u8,
    pub flags: u16,
    pub packets: u64,
    pub octets: u64,
    pub start_ms: u64,
    pub end_ms: u64,
    pub ingress: u32,
    pub vlan: u16,
    pub reason: u8,
}

/// Which times a direction's record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Times {
    /// The conversation's first and last packet, for both directions (softflowd's way).
    Conversation,
    /// The direction's own first and last packet.
    Direction,
}

/// The records of a finished flow: one per direction that saw packets, the direction of
/// the lower address first.
pub fn records(
    f: &Flow,
    why: EndReason,
    ingress: u32,
    times: Times,
) -> impl Iterator<Item = Record> + '_ {
    (0..2).filter(move |&d| f.packets[d] > 0).map(move |d| {
        let k = &f.key;
        let (start_ms, end_ms) = match times {
            Times::Conversation => (f.first, f.last),
            Times::Direction => (f.dir_first[d], f.dir_last[d]),
        };
        Record {
            v6: k.v6,
            src: k.addr[d],
            dst: k.addr[d ^ 1],
            sport: k.port[d],
            dport: k.port[d ^ 1],
            proto: k.proto,
            tos: f.tos[d],
            flags: f.flags[d],
            packets: f.packets[d],
            octets: f.octets[d],
            start_ms,
            end_ms,
            ingress,
            vlan: k.vlan,
            reason: why as u8,
        }
    })
}

/// Makes messages of records.
pub struct Encoder {
    domain: u32,
    mtu: usize,
    refresh_ms: u64,
    /// When the templates were last sent (stream time), if ever.
    templates_sent: Option<u64>,
    /// Data records sent before the message being built.
    seq: u32,
    /// Records in the message being built.
    in_msg: u32,
    msg: Vec<u8>,
    /// The template of the data set being filled and where its header is.
    set: Option<(u16, usize)>,
    now_ms: u64,
    pub messages: u64,
    pub templates: u64,
}

impl Encoder {
    /// `mtu`: the most bytes of a message (at least one template set and one IPv6 record
    /// fit in 256).
    pub fn new(domain: u32, mtu: usize, refresh_ms: u64) -> Encoder {
        Encoder {
            domain,
            mtu: mtu.max(256),
            refresh_ms,
            templates_sent: None,
            seq: 0,
            in_msg: 0,
            msg: Vec::with_capacity(mtu),
            set: None,
            now_ms: 0,
            messages: 0,
            templates: 0,
        }
    }

    /// Adds a record at stream time `now_ms`; every message it completes goes to `out`.
    pub fn push(&mut self, r: &Record, now_ms: u64, out: &mut impl FnMut(&[u8])) {
        self.now_ms = self.now_ms.max(now_ms);
        let t = if r.v6 { &V6 } else { &V4 };
        let due = self
            .templates_sent
            .is_none_or(|at| self.now_ms.saturating_sub(at) >= self.refresh_ms);
        if due && !self.msg.is_empty() {
            self.flush(out);
        }
        if self.msg.is_empty() {
            self.start(due);
        }
        let open_here = self.set.is_some_and(|(id, _)| id == t.id);
        let need = t.record_len() + if open_here { 0 } else { SET_HEADER_LEN };
        if self.msg.len() + need > self.mtu {
            self.flush(out);
            self.start(false);
        }
        if !self.set.is_some_and(|(id, _)| id == t.id) {
            self.close_set();
            self.set = Some((t.id, self.msg.len()));
            self.msg.extend_from_slice(&t.id.to_be_bytes());
            self.msg.extend_from_slice(&[0, 0]);
        }
        encode(r, t, &mut self.msg);
        self.in_msg += 1;
    }

    /// Sends the message being built, if it holds anything.
    pub fn flush(&mut self, out: &mut impl FnMut(&[u8])) {
        if self.msg.is_empty() {
            return;
        }
        self.close_set();
        let len = self.msg.len() as u16;
        self.msg[2..4].copy_from_slice(&len.to_be_bytes());
        out(&self.msg);
        self.messages += 1;
        self.seq = self.seq.wrapping_add(self.in_msg);
        self.in_msg = 0;
        self.msg.clear();
    }

    fn start(&mut self, templates: bool) {
        let m = &mut self.msg;
        m.extend_from_slice(&10u16.to_be_bytes());
        m.extend_from_slice(&[0, 0]);
        m.extend_from_slice(&((self.now_ms / 1000) as u32).to_be_bytes());
        m.extend_from_slice(&self.seq.to_be_bytes());
        m.extend_from_slice(&self.domain.to_be_bytes());
        if templates {
            let at = m.len();
            m.extend_from_slice(&TEMPLATE_SET_ID.to_be_bytes());
            m.extend_from_slice(&[0, 0]);
            for t in [&V4, &V6] {
                m.extend_from_slice(&t.id.to_be_bytes());
                m.extend_from_slice(&(t.fields.len() as u16).to_be_bytes());
                for f in t.fields {
                    m.extend_from_slice(&f.id.to_be_bytes());
                    m.extend_from_slice(&f.len.to_be_bytes());
                }
            }
            let len = (m.len() - at) as u16;
            m[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
            self.templates_sent = Some(self.now_ms);
            self.templates += 1;
        }
        debug_assert_eq!(HEADER_LEN, 16);
    }

    fn close_set(&mut self) {
        if let Some((_, at)) = self.set.take() {
            let len = (self.msg.len() - at) as u16;
            self.msg[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    }
}

/// One data record in the order of template `t`'s fields.
fn encode(r: &Record, t: &Template, m: &mut Vec<u8>) {
    let icmp = matches!(r.proto, ICMP | ICMPV6);
    for f in t.fields {
        match f.id {
            SOURCE_IPV4_ADDRESS => m.extend_from_slice(&r.src[..4]),
            DESTINATION_IPV4_ADDRESS => m.extend_from_slice(&r.dst[..4]),
            SOURCE_IPV6_ADDRESS => m.extend_from_slice(&r.src),
            DESTINATION_IPV6_ADDRESS => m.extend_from_slice(&r.dst),
            SOURCE_TRANSPORT_PORT => {
                m.extend_from_slice(&if icmp { 0 } else { r.sport }.to_be_bytes())
            }
            DESTINATION_TRANSPORT_PORT => {
                m.extend_from_slice(&if icmp { 0 } else { r.dport }.to_be_bytes())
            }
            PROTOCOL_IDENTIFIER => m.push(r.proto),
            IP_VERSION => m.push(if r.v6 { 6 } else { 4 }),
            IP_CLASS_OF_SERVICE => m.push(r.tos),
            TCP_CONTROL_BITS => m.extend_from_slice(&r.flags.to_be_bytes()),
            ICMP_TYPE_CODE_IPV4 | ICMP_TYPE_CODE_IPV6 => {
                m.extend_from_slice(&if icmp { r.dport } else { 0 }.to_be_bytes())
            }
            PACKET_DELTA_COUNT => m.extend_from_slice(&r.packets.to_be_bytes()),
            OCTET_DELTA_COUNT => m.extend_from_slice(&r.octets.to_be_bytes()),
            FLOW_START_MILLISECONDS => m.extend_from_slice(&r.start_ms.to_be_bytes()),
            FLOW_END_MILLISECONDS => m.extend_from_slice(&r.end_ms.to_be_bytes()),
            INGRESS_INTERFACE => m.extend_from_slice(&r.ingress.to_be_bytes()),
            VLAN_ID => m.extend_from_slice(&r.vlan.to_be_bytes()),
            FLOW_END_REASON => m.push(r.reason),
            other => unreachable!("template field {other} has no encoding"),
        }
    }
}
