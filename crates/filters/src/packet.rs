//! Zero-copy packet views shared by the protocol filters: one parse of a frame with
//! etherparse, giving addresses, ports and the payload as a range of the block (so filters
//! can crop to it with a metadata edit).

use dataplane::{Ctx, Tag};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use std::net::IpAddr;

pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_IPV4: u32 = 228;
pub const LINKTYPE_IPV6: u32 = 229;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Tcp { sport: u16, dport: u16, seq: u32, syn: bool, fin: bool, rst: bool },
    Udp { sport: u16, dport: u16 },
    Icmp4 { kind: u8, code: u8 },
    Icmp6 { kind: u8, code: u8 },
    Other,
    None,
}

/// What a frame contains.
#[derive(Debug, Clone, Copy)]
pub struct Pkt {
    pub ether_type: Option<u16>,
    pub ip: Option<(u8, IpAddr, IpAddr, u8)>, // (version, src, dst, protocol)
    pub l4: L4,
    /// Transport payload (or IP payload for other protocols) as (offset, len) in the block.
    pub payload: (usize, usize),
    pub fragmented: bool,
    /// The protocol field of the IP header itself (IPv6: the fixed header's next header,
    /// or a fragment header's), as libpcap's `ip proto` / `ip6 proto` test it: set for
    /// every fragment, not looking through other IPv6 extension headers.
    pub ip_proto_field: Option<u8>,
}

impl Pkt {
    pub fn ports(&self) -> Option<(u16, u16)> {
        match self.l4 {
            L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport } => Some((sport, dport)),
            _ => None,
        }
    }
    pub fn proto(&self) -> Option<u8> {
        self.ip.map(|i| i.3)
    }
}

fn offset(base: &[u8], part: &[u8]) -> usize {
    (part.as_ptr() as usize).saturating_sub(base.as_ptr() as usize)
}

/// Parse `data` as a frame of link type `link` (Ethernet when unknown).
pub fn parse(data: &[u8], link: Option<u32>) -> Option<Pkt> {
    let sp = match link.unwrap_or(LINKTYPE_ETHERNET) {
        LINKTYPE_ETHERNET => SlicedPacket::from_ethernet(data),
        LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 => SlicedPacket::from_ip(data),
        LINKTYPE_LINUX_SLL => SlicedPacket::from_linux_sll(data),
        _ => return None,
    }
    .ok()?;
    let ether_type = sp.payload_ether_type().map(|e| e.0);
    let (ip, fragmented, ip_payload, field) = match &sp.net {
        Some(NetSlice::Ipv4(v4)) => {
            let h = v4.header();
            let p = v4.payload();
            (Some((4u8, IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()), p.ip_number.0)), p.fragmented, Some(p.payload), Some(h.protocol().0))
        }
        Some(NetSlice::Ipv6(v6)) => {
            let h = v6.header();
            let p = v6.payload();
            // libpcap's `ip6 proto N` also looks through a fragment header (44).
            let mut field = h.next_header().0;
            if field == 44 {
                let at = offset(data, h.slice()) + 40;
                field = data.get(at).copied().unwrap_or(field);
            }
            (Some((6u8, IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()), p.ip_number.0)), p.fragmented, Some(p.payload), Some(field))
        }
        None => (None, false, None, None),
    };
    let (l4, payload) = match &sp.transport {
        Some(TransportSlice::Tcp(t)) => (
            L4::Tcp { sport: t.source_port(), dport: t.destination_port(), seq: t.sequence_number(), syn: t.syn(), fin: t.fin(), rst: t.rst() },
            t.payload(),
        ),
        Some(TransportSlice::Udp(u)) => (L4::Udp { sport: u.source_port(), dport: u.destination_port() }, u.payload()),
        Some(TransportSlice::Icmpv4(i)) => (L4::Icmp4 { kind: i.type_u8(), code: i.code_u8() }, i.payload()),
        Some(TransportSlice::Icmpv6(i)) => (L4::Icmp6 { kind: i.type_u8(), code: i.code_u8() }, i.payload()),
        None => match ip_payload {
            Some(p) => (L4::Other, p),
            None => (L4::None, &data[data.len()..]),
        },
    };
    Some(Pkt { ether_type, ip, l4, payload: (offset(data, payload), payload.len()), fragmented, ip_proto_field: field })
}

/// Parse the block a tag points to, if it is a whole frame (not cropped by an earlier
/// filter). Blocks without record metadata (gen, file) are parsed as Ethernet frames.
/// The result is memoized with the block in the space's store, so a chain of protocol
/// filters (`tcp | dport |80`) parses each frame once, while its bytes are still in cache.
pub fn parse_tag(cx: &Ctx<'_>, t: &Tag) -> Option<Pkt> {
    cx.store.memo(t, || {
        if let Some((_, whole)) = cx.store.record(t) {
            if !whole {
                return None;
            }
        }
        parse(cx.data(t).ok()?, cx.store.link(t))
    })
}

/// The application payload of a block: the transport payload of a whole frame, or the
/// block itself when an earlier filter already cropped it to a payload (tcpstream, strip).
pub fn app_payload<'a>(cx: &'a Ctx<'_>, t: &Tag) -> Option<&'a [u8]> {
    let data = cx.data(t).ok()?;
    match cx.store.record(t) {
        Some((_, false)) => Some(data),
        _ => match parse_tag(cx, t) {
            Some(p) => data.get(p.payload.0..p.payload.0 + p.payload.1),
            None => Some(data),
        },
    }
}

/// A stable hash of the 5-tuple, the same in both directions, never 0.
pub fn flow_hash(p: &Pkt) -> u16 {
    let Some((_, src, dst, proto)) = p.ip else { return 0 };
    let (sp, dp) = p.ports().unwrap_or((0, 0));
    let a = (addr_bits(&src), sp);
    let b = (addr_bits(&dst), dp);
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    // FNV-1a over the canonical tuple: stable across runs and machines.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in [lo.0 as u64, (lo.0 >> 64) as u64, lo.1 as u64, hi.0 as u64, (hi.0 >> 64) as u64, hi.1 as u64, proto as u64] {
        for byte in x.to_le_bytes() {
            h ^= byte as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
    let c = (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) as u16;
    c.max(1)
}

fn addr_bits(a: &IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u32::from(*v) as u128,
        IpAddr::V6(v) => u128::from(*v),
    }
}
