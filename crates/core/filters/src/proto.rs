//! Protocol and classification filters over whole frames: eth, ip, tcp, udp, icmp,
//! dport, sport, proto, flow. Each parses the frame once (etherparse, zero-copy) and sets
//! the block's class; nothing is copied.

use crate::packet::{flow_hash, parse_tag, Pkt};
use dataplane::{Access, Args, Batch, Ctx, Filter, FilterError, FilterSpec, Kind, Param};

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

fn eth(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
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

fn ip(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
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
fn tcp(_: &Args) -> Result<Box<dyn Filter>, FilterError> {
    boxed(|p| {
        if p.and_then(|p| p.ip_proto_field) == Some(6) {
            6
        } else {
            0
        }
    })
}
fn udp(_: &Args) -> Result<Box<dyn Filter>, FilterError> {
    boxed(|p| {
        if p.and_then(|p| p.ip_proto_field) == Some(17) {
            17
        } else {
            0
        }
    })
}
fn icmp(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
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
fn dport(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    port(a, true)
}
fn sport(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    port(a, false)
}
fn proto(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let only = parse_u16_list(a, "proto")?;
    boxed(move |p| match p.and_then(|p| p.ip_proto_field) {
        Some(n) if only.is_empty() || only.contains(&(n as u16)) => n as u16,
        _ => 0,
    })
}
fn flow(_: &Args) -> Result<Box<dyn Filter>, FilterError> {
    boxed(|p| p.map_or(0, flow_hash))
}

/// Well-known services by port (IANA), the names `dport` and `sport` publish for
/// selectors: `dport |http count`.
pub const SERVICES: &[(&str, u16)] = &[
    ("ftp", 21),
    ("ssh", 22),
    ("telnet", 23),
    ("smtp", 25),
    ("dns", 53),
    ("dhcp", 67),
    ("tftp", 69),
    ("http", 80),
    ("pop3", 110),
    ("ntp", 123),
    ("imap", 143),
    ("snmp", 161),
    ("bgp", 179),
    ("ldap", 389),
    ("https", 443),
    ("syslog", 514),
    ("submission", 587),
    ("imaps", 993),
    ("pop3s", 995),
    ("mysql", 3306),
    ("rdp", 3389),
    ("postgres", 5432),
    ("http-alt", 8080),
];

pub static ETH: FilterSpec = FilterSpec::new("eth", Access::Classification, eth)
    .synopsis("eth [type=HEX]")
    .description("Passes frames by the type of what their link layer carries (optionally only one\nethertype, e.g. type=0800): Ethernet's inside any VLAN tags, Linux cooked captures'\nprotocol, 0800/86dd for raw IP and BSD loopback.")
    .params(&[
        Param::new("type", "ethertype in hex (also positional)").at(0).kind(Kind::Hex),
    ])
    .classes("1 for matching frames, 0 otherwise")
    .example("streamline run 'pcapin file=examples/sample.pcap | eth 86dd | count'");
pub static IP: FilterSpec = FilterSpec::new("ip", Access::Classification, ip)
    .unix_tool()
    .synopsis("ip [version=4|6]")
    .description("Passes IP packets (IPv4 and IPv6, or one version).")
    .params(&[Param::new("version", "4 or 6 (also positional)")
        .at(0)
        .kind(Kind::Count)])
    .classes("4 for IPv4, 6 for IPv6, 0 for anything else")
    .class_names(&[("ipv4", 4), ("ipv6", 6)])
    .example("streamline run 'pcapin file=examples/sample.pcap | ip |6 count'");
pub static TCP: FilterSpec = FilterSpec::new("tcp", Access::Classification, tcp)
    .synopsis("tcp")
    .description("Passes TCP over IPv4 or IPv6: packets whose IP protocol field is 6, fragments\nincluded (libpcap's `tcp`).")
    .classes("6 for TCP (its IP protocol number, as proto's), 0 otherwise")
    .class_names(&[("tcp", 6)])
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | count'");
pub static UDP: FilterSpec = FilterSpec::new("udp", Access::Classification, udp)
    .synopsis("udp")
    .description("Passes UDP over IPv4 or IPv6: IP protocol field 17, fragments included.")
    .classes("17 for UDP (its IP protocol number, as proto's), 0 otherwise")
    .class_names(&[("udp", 17)])
    .example("streamline run 'pcapin file=examples/sample.pcap | udp | count'");
pub static ICMP: FilterSpec = FilterSpec::new("icmp", Access::Classification, icmp)
    .synopsis("icmp [version=4|6]")
    .description("Passes ICMP (IPv4 protocol 1) and ICMPv6 (IPv6 next header 58) packets,\nfragments included, or one of the two.")
    .params(&[
        Param::new("version", "4 or 6 (also positional)").at(0).kind(Kind::Count),
    ])
    .classes("1 for ICMPv4, 2 for ICMPv6, 0 otherwise")
    .class_names(&[("icmp4", 1), ("icmp6", 2)])
    .example("streamline run 'pcapin file=examples/sample.pcap | icmp |1 count'");
/// dport's and sport's parameter: the ports to pass.
const PORTS: &[Param] = &[
    Param::new("port", "ports to pass (also positional, comma-separated)")
        .from(0)
        .kind(Kind::Numbers),
];

pub static DPORT: FilterSpec = FilterSpec::new("dport", Access::Classification, dport)
    .synopsis("dport [PORT[,PORT...]]")
    .description("Classifies TCP and UDP packets by destination port, so a selector picks a\nservice: `dport |22 ssh`, `dport |1:1023 count`. With ports given, passes only those.")
    .params(PORTS)
    .classes("the destination port; 0 for non-TCP/UDP (and other ports, when given)")
    .class_names(SERVICES)
    .example("streamline run 'pcapin file=examples/sample.pcap | dport |80 count'");
pub static SPORT: FilterSpec = FilterSpec::new("sport", Access::Classification, sport)
    .synopsis("sport [PORT[,PORT...]]")
    .description("Classifies TCP and UDP packets by source port (see dport).")
    .params(PORTS)
    .classes("the source port; 0 for non-TCP/UDP")
    .class_names(SERVICES)
    .example("streamline run 'pcapin file=examples/sample.pcap | sport |53 count'");
pub static PROTO: FilterSpec = FilterSpec::new("proto", Access::Classification, proto)
    .synopsis("proto [NUMBER[,NUMBER...]]")
    .description("Classifies IP packets by protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6).")
    .params(&[
        Param::new("proto", "protocol numbers to pass (also positional)")
            .from(0)
            .kind(Kind::Numbers),
    ])
    .classes("the IP protocol number; 0 for non-IP")
    .class_names(&[
        ("icmp", 1),
        ("tcp", 6),
        ("udp", 17),
        ("gre", 47),
        ("esp", 50),
        ("icmp6", 58),
        ("sctp", 132),
    ])
    .example("streamline run 'pcapin file=examples/sample.pcap | proto |17 count'");
pub static FLOW: FilterSpec = FilterSpec::new("flow", Access::Classification, flow)
    .synopsis("flow")
    .description("Classifies packets by a stable hash of their 5-tuple, the same in both\ndirections, so per-class (session) state follows connections.")
    .classes("a non-zero 16-bit flow hash; 0 for non-IP")
    .example("streamline run 'pcapin file=examples/sample.pcap | flow | hist'");
