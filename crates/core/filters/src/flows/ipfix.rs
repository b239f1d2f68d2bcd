//! IPFIX messages (RFC 7011) of flow records with the information elements of RFC 7012,
//! and the same records as NetFlow v9 export packets (RFC 3954).
//!
//! Owns the wire form: the two templates (IPv4 and IPv6, [`V4`] and [`V6`]), a message's
//! header (version 10, length, export time, sequence number, observation domain), its
//! template set (in the first message and again every `refresh` of stream time, so a
//! collector that starts late or restarts learns them over UDP), and its data sets, the
//! records of one template each, packed up to `mtu` bytes a message. The export time is
//! the stream's time, like every time in the records, so the same capture makes the same
//! bytes. The sequence number counts the data records sent before the message, modulo
//! 2^32 (RFC 7011 §3.1).
//!
//! NetFlow v9 is the same templates, records and packing under another [`Version`], which
//! decides only what differs on the wire: the header (version 9, the count of template and
//! data records in the packet, sysUptime, UNIX seconds, the sequence number of export
//! packets, the source ID), the template FlowSet's ID (0 instead of 2), FlowSets padded to
//! 4 bytes, and each template field's number and length ([`Version::wire`]). Its times are
//! milliseconds of sysUptime (FIRST_SWITCHED, LAST_SWITCHED): the exporter "boots" at the
//! whole second at or before the stream's first packet ([`Encoder::stream_starts`]), stream
//! time again, so a capture still makes the same bytes wherever it is read. The header's
//! export time is the stream's time when the packet is sent rounded up to a whole second,
//! so a collector's boot time (`unix_secs * 1000 - sysUptime`) is exact, the first and
//! last seen it computes are the packets' own milliseconds, and no record ends after the
//! header's sysUptime. sysUptime wraps after 2^32 ms (49.7 days of stream), as a router's
//! does.

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
/// NetFlow v9's FIRST_SWITCHED and LAST_SWITCHED (RFC 3954 §8; IPFIX's flowStartSysUpTime
/// and flowEndSysUpTime): milliseconds of sysUptime.
pub const FIRST_SWITCHED: u16 = 22;
pub const LAST_SWITCHED: u16 = 21;

/// A template: its ID and fields in order.
#[derive(Debug, PartialEq, Eq)]
pub struct Template {
    pub id: u16,
    pub fields: &'static [Field],
}

impl Template {
    /// The fields as `v` sends them, in order.
    pub fn wire(&self, v: Version) -> impl Iterator<Item = Field> + '_ {
        self.fields.iter().filter_map(move |&f| v.wire(f))
    }

    /// Bytes of one data record in version `v`.
    pub fn record_len(&self, v: Version) -> usize {
        self.wire(v).map(|f| f.len as usize).sum()
    }
}

/// The protocol of the messages: the `ipfix` filter's `version=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// NetFlow v9 (RFC 3954).
    V9,
    /// IPFIX (RFC 7011), version 10.
    Ipfix,
}

impl Version {
    /// The number in the header.
    pub fn number(self) -> u16 {
        match self {
            Version::V9 => 9,
            Version::Ipfix => 10,
        }
    }

    /// Bytes of the message header.
    pub fn header_len(self) -> usize {
        match self {
            Version::V9 => 20,
            Version::Ipfix => 16,
        }
    }

    /// The set ID of a template set (RFC 3954 §5.2: FlowSet ID 0; RFC 7011 §3.3.2: 2).
    pub fn template_set_id(self) -> u16 {
        match self {
            Version::V9 => 0,
            Version::Ipfix => 2,
        }
    }

    /// Sets are padded to a multiple of this many bytes: a v9 FlowSet SHOULD end on a
    /// 4-byte boundary (RFC 3954 §5.3); an IPFIX set needs no padding (RFC 7011 §3.3.1),
    /// and gets none.
    pub fn align(self) -> usize {
        match self {
            Version::V9 => 4,
            Version::Ipfix => 1,
        }
    }

    /// How template field `f` (an IPFIX information element) goes on the wire; `None`: it
    /// is not sent. IPFIX sends every element as the template says. NetFlow v9's field
    /// types 1 to 127 are the IPFIX elements of the same number (RFC 7012 took them over),
    /// with the same meaning and any length RFC 3954 allows, so the rest pass unchanged
    /// (a test checks that every field v9 sends is below 128).
    pub fn wire(self, field: Field) -> Option<Field> {
        if self == Version::Ipfix {
            return Some(field);
        }
        match field.id {
            // v9 has no absolute times: the first and last packet are FIRST_SWITCHED and
            // LAST_SWITCHED, milliseconds of sysUptime in 4 bytes.
            FLOW_START_MILLISECONDS => Some(f(FIRST_SWITCHED, 4)),
            FLOW_END_MILLISECONDS => Some(f(LAST_SWITCHED, 4)),
            // TCP_FLAGS is one byte in v9 (RFC 3954 §8): the ninth flag (NS) is not sent.
            TCP_CONTROL_BITS => Some(f(TCP_CONTROL_BITS, 1)),
            // v9's ICMP_TYPE (32, type * 256 + code) serves either IP version; 139 is
            // IPFIX's own, which v9 readers need not know (nfdump's does not).
            ICMP_TYPE_CODE_IPV6 => Some(f(ICMP_TYPE_CODE_IPV4, 2)),
            // RFC 3954 has no end reason, and Cisco's v9 exporters send none: left out.
            FLOW_END_REASON => None,
            _ => Some(field),
        }
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

const SET_HEADER_LEN: usize = 4;

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
    version: Version,
    domain: u32,
    mtu: usize,
    refresh_ms: u64,
    /// NetFlow v9's boot: the whole second at or before the stream's first packet (ms).
    boot_ms: Option<u64>,
    /// When the templates were last sent (stream time), if ever.
    templates_sent: Option<u64>,
    /// IPFIX: data records sent before the message being built; v9: messages sent before it.
    seq: u32,
    /// Data records in the message being built.
    in_msg: u32,
    /// Template records in the message being built.
    templates_in_msg: u16,
    msg: Vec<u8>,
    /// The ID of the set being filled and where its header is.
    set: Option<(u16, usize)>,
    now_ms: u64,
    pub messages: u64,
    pub templates: u64,
}

impl Encoder {
    /// `mtu`: the most bytes of a message (at least one template set and one IPv6 record
    /// fit in 256).
    pub fn new(version: Version, domain: u32, mtu: usize, refresh_ms: u64) -> Encoder {
        Encoder {
            version,
            domain,
            mtu: mtu.max(256),
            refresh_ms,
            boot_ms: None,
            templates_sent: None,
            seq: 0,
            in_msg: 0,
            templates_in_msg: 0,
            msg: Vec::with_capacity(mtu),
            set: None,
            now_ms: 0,
            messages: 0,
            templates: 0,
        }
    }

    /// The stream's first packet time (ms); only the first call counts. NetFlow v9's
    /// sysUptime counts from the whole second at or before it (without a call, from the
    /// first record's start).
    pub fn stream_starts(&mut self, first_ms: u64) {
        self.boot_ms.get_or_insert(first_ms / 1000 * 1000);
    }

    /// Adds a record at stream time `now_ms`; every message it completes goes to `out`.
    pub fn push(&mut self, r: &Record, now_ms: u64, out: &mut impl FnMut(&[u8])) {
        self.stream_starts(r.start_ms.min(now_ms));
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
        // Room for the record, its set's padding and, for a new set, its header and the
        // padding of the set it closes.
        let pad = self.version.align() - 1;
        let need =
            t.record_len(self.version) + pad + if open_here { 0 } else { SET_HEADER_LEN + pad };
        if self.msg.len() + need > self.mtu {
            self.flush(out);
            self.start(false);
        }
        if !self.set.is_some_and(|(id, _)| id == t.id) {
            self.open_set(t.id);
        }
        let boot = self.boot_ms.unwrap_or(0);
        encode(r, t, self.version, boot, &mut self.msg);
        self.in_msg += 1;
    }

    /// Sends the message being built, if it holds anything.
    pub fn flush(&mut self, out: &mut impl FnMut(&[u8])) {
        if self.msg.is_empty() {
            return;
        }
        self.close_set();
        match self.version {
            Version::Ipfix => {
                let len = self.msg.len() as u16;
                self.msg[2..4].copy_from_slice(&len.to_be_bytes());
            }
            Version::V9 => {
                // The count of records, template and data. The export time: the stream's
                // time now, rounded up to a whole second, so that a collector's boot
                // (UNIX seconds * 1000 - sysUptime) is the exporter's exactly, and no
                // record's LAST_SWITCHED is after the header's sysUptime.
                let count = self.in_msg as u16 + self.templates_in_msg;
                let secs = self.now_ms.div_ceil(1000);
                let up = uptime(secs * 1000, self.boot_ms.unwrap_or(0));
                self.msg[2..4].copy_from_slice(&count.to_be_bytes());
                self.msg[4..8].copy_from_slice(&up.to_be_bytes());
                self.msg[8..12].copy_from_slice(&(secs as u32).to_be_bytes());
            }
        }
        out(&self.msg);
        self.messages += 1;
        self.seq = self.seq.wrapping_add(match self.version {
            Version::Ipfix => self.in_msg,
            Version::V9 => 1,
        });
        self.in_msg = 0;
        self.templates_in_msg = 0;
        self.msg.clear();
    }

    fn start(&mut self, templates: bool) {
        let m = &mut self.msg;
        m.extend_from_slice(&self.version.number().to_be_bytes());
        // The rest that depends on what the message holds is written when it is sent:
        // IPFIX's length; v9's count, sysUptime and UNIX seconds.
        m.extend_from_slice(&[0, 0]);
        match self.version {
            Version::Ipfix => m.extend_from_slice(&((self.now_ms / 1000) as u32).to_be_bytes()),
            Version::V9 => m.extend_from_slice(&[0; 8]),
        }
        m.extend_from_slice(&self.seq.to_be_bytes());
        m.extend_from_slice(&self.domain.to_be_bytes());
        debug_assert_eq!(m.len(), self.version.header_len());
        if templates {
            self.open_set(self.version.template_set_id());
            for t in [&V4, &V6] {
                let m = &mut self.msg;
                m.extend_from_slice(&t.id.to_be_bytes());
                m.extend_from_slice(&(t.wire(self.version).count() as u16).to_be_bytes());
                for f in t.wire(self.version) {
                    m.extend_from_slice(&f.id.to_be_bytes());
                    m.extend_from_slice(&f.len.to_be_bytes());
                }
                self.templates_in_msg += 1;
            }
            self.close_set();
            self.templates_sent = Some(self.now_ms);
            self.templates += 1;
        }
    }

    /// Closes the set being filled and starts one of set ID `id`.
    fn open_set(&mut self, id: u16) {
        self.close_set();
        self.set = Some((id, self.msg.len()));
        self.msg.extend_from_slice(&id.to_be_bytes());
        self.msg.extend_from_slice(&[0, 0]);
    }

    /// Pads the set being filled (v9) and writes its length.
    fn close_set(&mut self) {
        if let Some((_, at)) = self.set.take() {
            let a = self.version.align();
            self.msg.resize(self.msg.len().next_multiple_of(a), 0);
            let len = (self.msg.len() - at) as u16;
            self.msg[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    }
}

/// Milliseconds of sysUptime at stream time `ms` since a boot at `boot_ms` (0 for a time
/// before the boot: a capture whose timestamps go back before its first packet's),
/// wrapping at 2^32.
fn uptime(ms: u64, boot_ms: u64) -> u32 {
    ms.saturating_sub(boot_ms) as u32
}

/// One data record in the order of template `t`'s fields as version `v` sends them: a
/// number in the field's length (its low bytes), times as `v` counts them (v9: sysUptime
/// milliseconds from `boot_ms`).
fn encode(r: &Record, t: &Template, v: Version, boot_ms: u64, m: &mut Vec<u8>) {
    let icmp = matches!(r.proto, ICMP | ICMPV6);
    let time = |ms: u64| match v {
        Version::Ipfix => ms,
        Version::V9 => u64::from(uptime(ms, boot_ms)),
    };
    for &f in t.fields {
        let Some(w) = v.wire(f) else { continue };
        let n: u64 = match f.id {
            SOURCE_IPV4_ADDRESS
            | DESTINATION_IPV4_ADDRESS
            | SOURCE_IPV6_ADDRESS
            | DESTINATION_IPV6_ADDRESS => {
                let a = if matches!(f.id, SOURCE_IPV4_ADDRESS | SOURCE_IPV6_ADDRESS) {
                    &r.src
                } else {
                    &r.dst
                };
                m.extend_from_slice(&a[..w.len as usize]);
                continue;
            }
            SOURCE_TRANSPORT_PORT => u64::from(if icmp { 0 } else { r.sport }),
            DESTINATION_TRANSPORT_PORT => u64::from(if icmp { 0 } else { r.dport }),
            PROTOCOL_IDENTIFIER => u64::from(r.proto),
            IP_VERSION => {
                if r.v6 {
                    6
                } else {
                    4
                }
            }
            IP_CLASS_OF_SERVICE => u64::from(r.tos),
            TCP_CONTROL_BITS => u64::from(r.flags),
            ICMP_TYPE_CODE_IPV4 | ICMP_TYPE_CODE_IPV6 => u64::from(if icmp { r.dport } else { 0 }),
            PACKET_DELTA_COUNT => r.packets,
            OCTET_DELTA_COUNT => r.octets,
            FLOW_START_MILLISECONDS => time(r.start_ms),
            FLOW_END_MILLISECONDS => time(r.end_ms),
            INGRESS_INTERFACE => u64::from(r.ingress),
            VLAN_ID => u64::from(r.vlan),
            FLOW_END_REASON => u64::from(r.reason),
            other => unreachable!("template field {other} has no encoding"),
        };
        m.extend_from_slice(&n.to_be_bytes()[8 - w.len as usize..]);
    }
}

/// Record `i` of the tests' flows: IPv4 or IPv6, every fifth ICMP, times from
/// 1_700_000_000_000 + i.
#[cfg(test)]
pub(crate) fn test_record(i: u64, v6: bool) -> Record {
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    if v6 {
        src[0] = 0xfd;
        dst[0] = 0xfd;
    } else {
        src[..4].copy_from_slice(&[10, 0, 0, 1]);
        dst[..4].copy_from_slice(&[10, 0, 0, 2]);
    }
    src[15] = i as u8;
    dst[3] = i as u8;
    Record {
        v6,
        src,
        dst,
        sport: 1000 + i as u16,
        dport: 80,
        proto: if i % 5 == 0 {
            if v6 {
                58
            } else {
                1
            }
        } else {
            6
        },
        tos: 0x10,
        flags: 0x1b,
        packets: i + 1,
        octets: 1000 * i + 40,
        start_ms: 1_700_000_000_000 + i,
        end_ms: 1_700_000_001_000 + i,
        ingress: 3,
        vlan: 42,
        reason: 3,
    }
}

#[cfg(test)]
mod tests {
    use super::{test_record as rec, *};

    fn u16_at(m: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([m[at], m[at + 1]])
    }

    fn u32_at(m: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]])
    }

    /// A message's sets: (set ID, its bytes after the set header), checking that the sets
    /// fill the message exactly.
    fn sets(m: &[u8], v: Version) -> Vec<(u16, &[u8])> {
        let mut at = v.header_len();
        let mut out = Vec::new();
        while at < m.len() {
            let len = u16_at(m, at + 2) as usize;
            assert!(
                len >= 4 && at + len <= m.len(),
                "a set of {len} bytes at {at}"
            );
            out.push((u16_at(m, at), &m[at + 4..at + len]));
            at += len;
        }
        assert_eq!(at, m.len());
        out
    }

    /// Encodes `n` records (every third IPv6) at stream times 10 ms apart from
    /// 1_700_000_004_789, flushing every `every` records; the stream's first packet at
    /// 1_699_999_999_500.
    fn messages(v: Version, n: u64, every: u64, mtu: usize) -> Vec<Vec<u8>> {
        let mut enc = Encoder::new(v, 7, mtu, 600_000);
        enc.stream_starts(1_699_999_999_500);
        let mut msgs = Vec::new();
        for i in 0..n {
            enc.push(&rec(i, i % 3 == 0), 1_700_000_004_789 + i * 10, &mut |m| {
                msgs.push(m.to_vec())
            });
            if (i + 1) % every == 0 {
                enc.flush(&mut |m| msgs.push(m.to_vec()));
            }
        }
        enc.flush(&mut |m| msgs.push(m.to_vec()));
        msgs
    }

    #[test]
    fn a_v9_header_counts_records_and_packets() {
        let msgs = messages(Version::V9, 40, 7, 1400);
        assert_eq!(msgs.len(), 6);
        let mut records = 0;
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(u16_at(m, 0), 9, "version");
            assert_eq!(
                u32_at(m, 12),
                i as u32,
                "sequence: export packets before this one"
            );
            assert_eq!(u32_at(m, 16), 7, "source ID");
            // Count: every template and data record in the packet.
            let mut count = 0;
            for (id, body) in sets(m, Version::V9) {
                count += match id {
                    0 => 2,
                    256 => body.len() / V4.record_len(Version::V9),
                    257 => body.len() / V6.record_len(Version::V9),
                    other => panic!("set ID {other}"),
                };
            }
            assert_eq!(u16_at(m, 2) as usize, count, "count of message {i}");
            let data = (count - if i == 0 { 2 } else { 0 }) as u64;
            // The export time: that of the message's last record, rounded up to a whole
            // second; the boot: the whole second before the stream's first packet.
            let now = 1_700_000_004_789 + (records + data - 1) * 10;
            assert_eq!(u32_at(m, 8) as u64, now.div_ceil(1000), "UNIX seconds");
            assert_eq!(
                u32_at(m, 4) as u64,
                now.div_ceil(1000) * 1000 - 1_699_999_999_000,
                "sysUptime"
            );
            records += data;
        }
        assert_eq!(records, 40);
    }

    #[test]
    fn v9_flowsets_have_v9_ids_and_end_on_four_bytes() {
        let msgs = messages(Version::V9, 200, 1000, 300);
        assert!(msgs.len() > 10 && msgs.iter().all(|m| m.len() <= 300));
        for m in &msgs {
            assert_eq!(m.len() % 4, 0);
            for (id, body) in sets(m, Version::V9) {
                assert_eq!(
                    (body.len() + 4) % 4,
                    0,
                    "set {id} of {} bytes",
                    body.len() + 4
                );
                let rl = match id {
                    0 => continue,
                    256 => V4.record_len(Version::V9),
                    257 => V6.record_len(Version::V9),
                    other => panic!("set ID {other}"),
                };
                let pad = body.len() % rl;
                assert!(pad < 4 && body[body.len() - pad..].iter().all(|&b| b == 0));
            }
        }
        // The template FlowSet: ID 0, the two templates in v9's field types.
        let t = &sets(&msgs[0], Version::V9)[0];
        assert_eq!(t.0, 0);
        let body = t.1;
        assert_eq!(u16_at(body, 0), 256);
        let n = u16_at(body, 2) as usize;
        let fields: Vec<(u16, u16)> = (0..n)
            .map(|k| (u16_at(body, 4 + 4 * k), u16_at(body, 6 + 4 * k)))
            .collect();
        assert!(fields.contains(&(FIRST_SWITCHED, 4)) && fields.contains(&(LAST_SWITCHED, 4)));
        assert!(fields.contains(&(TCP_CONTROL_BITS, 1)));
        assert!(!fields.iter().any(|&(id, _)| id == FLOW_END_REASON));
        assert_eq!(u16_at(body, 4 + 4 * n), 257);
    }

    /// A set that does not end on 4 bytes is padded with zeros in v9, its length counting
    /// the padding, and not in IPFIX (the templates' v9 records happen to be multiples of 4
    /// bytes, so only a set of another length shows it).
    #[test]
    fn v9_pads_a_set_to_four_bytes_and_ipfix_does_not() {
        for (v, len) in [(Version::V9, 12), (Version::Ipfix, 9)] {
            let mut enc = Encoder::new(v, 0, 1400, 1000);
            enc.open_set(300);
            enc.msg.extend_from_slice(&[1, 2, 3, 4, 5]);
            enc.close_set();
            assert_eq!(enc.msg.len(), len, "{v:?}");
            assert_eq!(u16_at(&enc.msg, 2) as usize, len, "{v:?}");
            assert!(enc.msg[9..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn ipfix_keeps_its_header_and_sequence_of_records() {
        let msgs = messages(Version::Ipfix, 40, 7, 1400);
        let mut records = 0u32;
        for m in &msgs {
            assert_eq!((u16_at(m, 0), u16_at(m, 2) as usize), (10, m.len()));
            assert_eq!(u32_at(m, 8), records);
            let s = sets(m, Version::Ipfix);
            assert!(s.iter().all(|(id, _)| matches!(id, 2 | 256 | 257)));
            records += s
                .iter()
                .map(|(id, b)| match id {
                    256 => b.len() / V4.record_len(Version::Ipfix),
                    257 => b.len() / V6.record_len(Version::Ipfix),
                    _ => 0,
                } as u32)
                .sum::<u32>();
        }
        assert_eq!(records, 40);
    }

    /// A known flow's FIRST_SWITCHED and LAST_SWITCHED: its first and last packet in
    /// milliseconds since the whole second before the stream's first packet.
    #[test]
    fn v9_times_are_uptime_from_the_streams_first_second() {
        let msgs = messages(Version::V9, 2, 1000, 1400);
        let (id, body) = sets(&msgs[0], Version::V9)[2];
        assert_eq!(id, 256, "record 1 is IPv4");
        // Record 1: start 1_700_000_000_001, end 1_700_000_001_001; boot 1_699_999_999_000.
        assert_eq!(switched(body, 0), (1001, 2001));
        // A collector's boot (UNIX seconds * 1000 - sysUptime) is the exporter's exactly.
        let m = &msgs[0];
        assert_eq!(
            u32_at(m, 8) as u64 * 1000 - u32_at(m, 4) as u64,
            1_699_999_999_000
        );
    }

    /// FIRST_SWITCHED and LAST_SWITCHED of IPv4 record `k` of a v9 data set.
    fn switched(body: &[u8], k: usize) -> (u32, u32) {
        let mut at = k * V4.record_len(Version::V9);
        let (mut first, mut last) = (None, None);
        for f in V4.wire(Version::V9) {
            match f.id {
                FIRST_SWITCHED => first = Some(u32_at(body, at)),
                LAST_SWITCHED => last = Some(u32_at(body, at)),
                _ => {}
            }
            at += f.len as usize;
        }
        (first.unwrap(), last.unwrap())
    }

    /// However late in a packet a record comes, it ends no later than the header's
    /// sysUptime: the header's time is written when the packet is sent.
    #[test]
    fn no_v9_record_ends_after_its_packets_uptime() {
        let mut enc = Encoder::new(Version::V9, 0, 1400, 600_000);
        let mut msgs = Vec::new();
        let mut r = rec(1, false);
        enc.stream_starts(r.start_ms);
        for k in 0..5 {
            r.end_ms = r.start_ms + 700 * k;
            enc.push(&r, r.end_ms, &mut |m| msgs.push(m.to_vec()));
        }
        enc.flush(&mut |m| msgs.push(m.to_vec()));
        assert_eq!(msgs.len(), 1);
        let m = &msgs[0];
        let (id, body) = sets(m, Version::V9)[1];
        assert_eq!(id, 256);
        let ends: Vec<u32> = (0..5).map(|k| switched(body, k).1).collect();
        // Boot 1_700_000_000_000 (the record starts at 1_700_000_000_001).
        assert_eq!(ends, [1, 701, 1401, 2101, 2801]);
        assert_eq!((u32_at(m, 4), u32_at(m, 8)), (3000, 1_700_000_003));
    }

    /// Every field v9 sends is one of RFC 3954's field types (below 128).
    #[test]
    fn v9_sends_only_rfc3954_field_types() {
        for t in [&V4, &V6] {
            for f in t.wire(Version::V9) {
                assert!(f.id < 128, "template {} sends field {} in v9", t.id, f.id);
            }
            assert_eq!(t.wire(Version::Ipfix).collect::<Vec<_>>(), t.fields);
        }
    }
}
