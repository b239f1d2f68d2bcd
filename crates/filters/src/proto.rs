//! Protocol and classification filters over whole frames: eth, ip, tcp, udp, icmp,
//! dport, sport, proto, flow. Each parses the frame once (etherparse, zero-copy) and sets
//! the block's class; nothing is copied.

use crate::packet::{flow_hash, parse_tag, Pkt};
use dataplane::{Access, Args, Batch, Ctx, Filter, FilterSpec, Param};

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

fn boxed<F: FnMut(Option<&Pkt>) -> u16 + Send + 'static>(f: F) -> Result<Box<dyn Filter>, String> {
    Ok(Box::new(ByPacket(f)))
}

/// Numbers given positionally and/or as `key=`, each possibly comma-separated.
fn parse_u16_list(a: &Args, key: &str) -> Result<Vec<u16>, String> {
    a.positional
        .iter()
        .chain(a.options.get(key))
        .flat_map(|s| s.split(','))
        .map(|part| part.parse::<u16>().map_err(|_| format!("{}: '{part}' is not a number in 0..=65535", a.filter)))
        .collect()
}

fn eth(a: &Args) -> Result<Box<dyn Filter>, String> {
    let want = match a.get("type", Some(0)) {
        None => None,
        Some(t) => Some(u16::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| format!("eth: type={t} is not a hex ethertype"))?),
    };
    boxed(move |p| match (p.and_then(|p| p.ether_type), want) {
        (Some(e), Some(w)) => (e == w) as u16,
        (Some(_), None) => 1,
        _ => 0,
    })
}

fn ip(a: &Args) -> Result<Box<dyn Filter>, String> {
    let version: u8 = a.parse("version", Some(0), 0)?;
    if ![0, 4, 6].contains(&version) {
        return Err(format!("ip: version={version} must be 4 or 6"));
    }
    boxed(move |p| match p.and_then(|p| p.ip) {
        Some((v, ..)) if version == 0 || v == version => v as u16,
        _ => 0,
    })
}

// tcp, udp and icmp test the IP header's protocol field, as libpcap does: every fragment
// of a TCP segment is "tcp", even those without a TCP header.
fn tcp(_: &Args) -> Result<Box<dyn Filter>, String> {
    boxed(|p| (p.and_then(|p| p.ip_proto_field) == Some(6)) as u16)
}
fn udp(_: &Args) -> Result<Box<dyn Filter>, String> {
    boxed(|p| (p.and_then(|p| p.ip_proto_field) == Some(17)) as u16)
}
fn icmp(a: &Args) -> Result<Box<dyn Filter>, String> {
    let version: u8 = a.parse("version", Some(0), 0)?;
    boxed(move |p| match p.and_then(|p| p.ip.map(|i| (i.0, p.ip_proto_field))) {
        Some((4, Some(1))) if version != 6 => 1,
        Some((6, Some(58))) if version != 4 => 2,
        _ => 0,
    })
}
fn port(a: &Args, dst: bool) -> Result<Box<dyn Filter>, String> {
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
fn dport(a: &Args) -> Result<Box<dyn Filter>, String> {
    port(a, true)
}
fn sport(a: &Args) -> Result<Box<dyn Filter>, String> {
    port(a, false)
}
fn proto(a: &Args) -> Result<Box<dyn Filter>, String> {
    let only = parse_u16_list(a, "proto")?;
    boxed(move |p| match p.and_then(|p| p.ip_proto_field) {
        Some(n) if only.is_empty() || only.contains(&(n as u16)) => n as u16,
        _ => 0,
    })
}
fn flow(_: &Args) -> Result<Box<dyn Filter>, String> {
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

macro_rules! spec {
    (@names) => { &[] };
    (@names $names:expr) => { $names };
    (@replication $access:ident) => { dataplane::Replication::of(Access::$access) };
    (@replication $access:ident $rep:expr) => { $rep };
    ($id:ident, $name:literal, $syn:literal, $desc:literal, [$($pn:literal : $pd:literal),*], $classes:literal, $ex:literal, $access:ident, $make:expr $(, names $names:expr)? $(, replication $rep:expr)?) => {
        pub static $id: FilterSpec = FilterSpec {
            name: $name,
            synopsis: $syn,
            description: $desc,
            params: &[$(Param { name: $pn, doc: $pd }),*],
            classes: $classes,
            class_names: spec!(@names $($names)?),
            example: $ex,
            access: Access::$access,
            replication: spec!(@replication $access $($rep)?),
            source: false,
            make: $make,
        };
    };
}
pub(crate) use spec;

spec!(ETH, "eth", "eth [type=HEX]", "Passes frames by the type of what their link layer carries (optionally only one\nethertype, e.g. type=0800): Ethernet's inside any VLAN tags, Linux cooked captures'\nprotocol, 0800/86dd for raw IP and BSD loopback.",
      ["type": "ethertype in hex (also positional)"], "1 for matching frames, 0 otherwise",
      "streamline run 'pcapin file=examples/sample.pcap | eth 86dd | count'", Classification, eth);
spec!(IP, "ip", "ip [version=4|6]", "Passes IP packets (IPv4 and IPv6, or one version).",
      ["version": "4 or 6 (also positional)"], "4 for IPv4, 6 for IPv6, 0 for anything else",
      "streamline run 'pcapin file=examples/sample.pcap | ip |6 count'", Classification, ip, names &[("ipv4", 4), ("ipv6", 6)]);
spec!(TCP, "tcp", "tcp", "Passes TCP over IPv4 or IPv6: packets whose IP protocol field is 6, fragments\nincluded (libpcap's `tcp`).", [], "1 for TCP, 0 otherwise",
      "streamline run 'pcapin file=examples/sample.pcap | tcp | count'", Classification, tcp);
spec!(UDP, "udp", "udp", "Passes UDP over IPv4 or IPv6: IP protocol field 17, fragments included.", [], "1 for UDP, 0 otherwise",
      "streamline run 'pcapin file=examples/sample.pcap | udp | count'", Classification, udp);
spec!(ICMP, "icmp", "icmp [version=4|6]", "Passes ICMP (IPv4 protocol 1) and ICMPv6 (IPv6 next header 58) packets,\nfragments included, or one of the two.",
      ["version": "4 or 6 (also positional)"], "1 for ICMPv4, 2 for ICMPv6, 0 otherwise",
      "streamline run 'pcapin file=examples/sample.pcap | icmp |1 count'", Classification, icmp, names &[("icmp4", 1), ("icmp6", 2)]);
spec!(DPORT, "dport", "dport [PORT[,PORT...]]", "Classifies TCP and UDP packets by destination port, so a selector picks a\nservice: `dport |22 ssh`, `dport |1:1023 count`. With ports given, passes only those.",
      ["port": "ports to pass (also positional, comma-separated)"], "the destination port; 0 for non-TCP/UDP (and other ports, when given)",
      "streamline run 'pcapin file=examples/sample.pcap | dport |80 count'", Classification, dport, names SERVICES);
spec!(SPORT, "sport", "sport [PORT[,PORT...]]", "Classifies TCP and UDP packets by source port (see dport).",
      ["port": "ports to pass (also positional, comma-separated)"], "the source port; 0 for non-TCP/UDP",
      "streamline run 'pcapin file=examples/sample.pcap | sport |53 count'", Classification, sport, names SERVICES);
spec!(PROTO, "proto", "proto [NUMBER[,NUMBER...]]", "Classifies IP packets by protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6).",
      ["proto": "protocol numbers to pass (also positional)"], "the IP protocol number; 0 for non-IP",
      "streamline run 'pcapin file=examples/sample.pcap | proto |17 count'", Classification, proto, names &[("icmp", 1), ("tcp", 6), ("udp", 17), ("gre", 47), ("esp", 50), ("icmp6", 58), ("sctp", 132)]);
spec!(FLOW, "flow", "flow", "Classifies packets by a stable hash of their 5-tuple, the same in both\ndirections, so per-class (session) state follows connections.",
      [], "a non-zero 16-bit flow hash; 0 for non-IP",
      "streamline run 'pcapin file=examples/sample.pcap | flow | hist'", Classification, flow);
