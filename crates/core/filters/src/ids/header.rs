//! The rule set's header stage (SafeCard's stage 2, Kernel Snort's push-down, thesis 001
//! §7.3.1-7.3.2): one pcap-filter expression that accepts every frame a rule could be
//! decided on, or that the engine needs to follow a connection a rule looks at, so the
//! rest can be left where it is: on the capture socket when `ips` follows `rx` (the
//! kernel push-down, `live::kernel_placement`), or skipped before any parsing in user
//! space. Either way `ips` judges exactly the frames this expression accepts, so its
//! alerts and its counts do not depend on where the stage ran.
//!
//! The expression over-approximates: addresses are not looked at, and a rule's ports are
//! taken in either direction (`tcp port 80` for `-> any 80`: the server's answers carry
//! the port as their source, and reassembly needs both directions). A protocol with an
//! unbounded port expression (`any`, a negation, a list with negated members) is taken
//! whole. What the engine inspects although no port says so is always kept: IPv4
//! fragments (their datagram is judged when whole), IPv6 packets whose next header is
//! not TCP, UDP or ICMPv6 (extension headers: the ports are further in), and
//! VLAN-tagged frames.
//!
//! Owns: the expression. Does not own: compiling or running it (`bpf::PerLink`,
//! `kernel::cbpf`), or deciding where it runs.

use super::rules::{Ports, Proto, Rule};
use std::collections::BTreeSet;

/// More port terms than this for one protocol and the protocol is taken whole (libpcap
/// compiles each term to a few instructions; a socket program holds 4096).
const MAX_TERMS: usize = 64;

/// What one protocol's rules need: every frame of it, or those with one of these terms.
#[derive(Default)]
enum Need {
    #[default]
    Nothing,
    Terms(BTreeSet<String>),
    All,
}

impl Need {
    fn add(&mut self, terms: Option<Vec<String>>) {
        match (terms, &mut *self) {
            (_, Need::All) => {}
            (None, _) => *self = Need::All,
            (Some(t), Need::Nothing) => *self = Need::Terms(t.into_iter().collect()),
            (Some(t), Need::Terms(set)) => set.extend(t),
        }
        if matches!(self, Need::Terms(set) if set.len() > MAX_TERMS) {
            *self = Need::All;
        }
    }

    fn expression(&self, proto: &str) -> Option<String> {
        match self {
            Need::Nothing => None,
            Need::All => Some(proto.to_string()),
            Need::Terms(t) => Some(format!(
                "({proto} and ({}))",
                t.iter().cloned().collect::<Vec<_>>().join(" or ")
            )),
        }
    }
}

/// The pcap-filter terms that accept a port expression's ports as source or destination;
/// `None`: it is unbounded (every port).
fn port_terms(p: &Ports) -> Option<Vec<String>> {
    match p {
        Ports::Any | Ports::Not(_) => None,
        Ports::Range(lo, hi) if lo == hi => Some(vec![format!("port {lo}")]),
        Ports::Range(0, 65535) => None,
        Ports::Range(lo, hi) => Some(vec![format!("portrange {lo}-{hi}")]),
        Ports::List(items) => {
            let mut v = Vec::new();
            for i in items {
                v.extend(port_terms(i)?);
            }
            // An empty list says nothing of the ports.
            (!v.is_empty()).then_some(v)
        }
    }
}

/// The ports of a rule's header that a connection it looks at carries in both
/// directions: the destination's when it says any, else the source's.
fn rule_terms(r: &Rule) -> Option<Vec<String>> {
    port_terms(&r.dport).or_else(|| port_terms(&r.sport))
}

/// The header stage of `rules` (see the module's documentation), or `None` when it would
/// keep every frame (a rule over `ip`, or none that names a protocol's ports).
pub fn expression(rules: &[Rule]) -> Option<String> {
    let (mut tcp, mut udp, mut icmp) = (Need::default(), Need::default(), false);
    for r in rules {
        match r.proto {
            Proto::Ip => return None,
            Proto::Tcp | Proto::Http => tcp.add(rule_terms(r)),
            Proto::Udp => udp.add(rule_terms(r)),
            Proto::Icmp => icmp = true,
        }
    }
    let mut parts: Vec<String> = [tcp.expression("tcp"), udp.expression("udp")]
        .into_iter()
        .flatten()
        .collect();
    if icmp {
        parts.push("icmp or icmp6".into());
    }
    parts.push("(ip and ip[6:2] & 0x3fff != 0)".into());
    parts.push("(ip6 and not ip6 proto 6 and not ip6 proto 17 and not ip6 proto 58)".into());
    // Last: `vlan` changes the offsets of every term after it.
    parts.push("vlan".into());
    Some(parts.join(" or "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::rules::{parse, Options, Vars};

    fn expr(text: &str) -> Option<String> {
        let set = parse(text, "t.rules", &Vars::default(), &Options::default()).unwrap();
        expression(&set.rules)
    }

    #[test]
    fn a_rule_over_ip_keeps_everything() {
        assert_eq!(expr("alert ip any any -> any any (msg:\"x\"; content:\"a\"; sid:1;)\nalert tcp any any -> any 80 (msg:\"y\"; content:\"b\"; sid:2;)"), None);
    }

    #[test]
    fn ports_are_taken_in_either_direction_and_merged_per_protocol() {
        let e = expr(concat!(
            "alert tcp any any -> any 80 (msg:\"a\"; content:\"a\"; sid:1;)\n",
            "alert tcp any 8000:8080 -> any any (msg:\"b\"; content:\"b\"; sid:2;)\n",
            "alert udp any any -> any [53,5353] (msg:\"c\"; content:\"c\"; sid:3;)\n",
        ))
        .unwrap();
        assert!(e.starts_with("(tcp and (port 80 or portrange 8000-8080)) or (udp and (port 53 or port 5353)) or "), "{e}");
        assert!(e.ends_with(" or vlan"), "{e}");
        assert!(!e.contains("icmp"), "{e}");
    }

    #[test]
    fn an_unbounded_port_takes_the_protocol_whole() {
        let e = expr(concat!(
            "alert tcp any any -> any 80 (msg:\"a\"; content:\"a\"; sid:1;)\n",
            "alert tcp any any -> any !22 (msg:\"b\"; content:\"b\"; sid:2;)\n",
            "alert icmp any any -> any any (msg:\"c\"; content:\"c\"; sid:3;)\n",
        ))
        .unwrap();
        assert!(e.starts_with("tcp or icmp or icmp6 or "), "{e}");
    }

    #[test]
    fn every_expression_compiles() {
        for text in [
            "alert tcp any any -> any 80 (msg:\"a\"; content:\"a\"; sid:1;)",
            "alert http any any -> any any (msg:\"a\"; http.uri; content:\"a\"; sid:1;)",
            "alert udp any [1:10,20] -> any any (msg:\"a\"; content:\"a\"; sid:1;)",
        ] {
            let e = expr(text).unwrap();
            crate::bpf::PerLink::new(&e).unwrap_or_else(|err| panic!("{e}: {err}"));
        }
        let many: String = (1..200)
            .map(|p| format!("alert tcp any any -> any {p} (msg:\"a\"; content:\"a\"; sid:{p};)\n"))
            .collect();
        let e = expr(&many).unwrap();
        assert!(
            e.starts_with("tcp or "),
            "over {MAX_TERMS} ports: the protocol whole: {e}"
        );
        crate::bpf::PerLink::new(&e).unwrap();
    }

    /// A port expression in the rule language, drawn from what rule files use.
    fn ports() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            Just("any".to_string()),
            (1u16..1200).prop_map(|p| p.to_string()),
            (1u16..1000, 0u16..300).prop_map(|(a, b)| format!("{a}:{}", a + b)),
            prop::collection::vec(1u16..1200, 1..4).prop_map(|v| format!(
                "[{}]",
                v.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
            )),
            (1u16..1200).prop_map(|p| format!("!{p}")),
        ]
    }

    proptest::proptest! {
        /// Whatever frame a rule's header takes, in either direction (the connection's
        /// other half), the compiled header stage accepts, over Ethernet and IPv4 or IPv6.
        #[test]
        fn the_header_stage_keeps_every_frame_a_rule_could_take(
            rules in proptest::collection::vec((0u8..3, ports(), ports()), 1..6),
            frames in proptest::collection::vec((0u8..2, 1u16..1300, 1u16..1300, proptest::bool::ANY), 1..40),
        ) {
            let text: String = rules
                .iter()
                .enumerate()
                .map(|(i, (p, sp, dp))| {
                    let proto = ["tcp", "udp", "icmp"][*p as usize];
                    format!("alert {proto} any {sp} -> any {dp} (msg:\"r{i}\"; content:\"x\"; sid:{};)\n", i + 1)
                })
                .collect();
            let set = parse(&text, "t.rules", &Vars::default(), &Options::default()).unwrap();
            let Some(e) = expression(&set.rules) else { return Ok(()) };
            let prog = kernel::cbpf::compile(&e, crate::packet::LINKTYPE_ETHERNET, 262144).unwrap();
            for (proto, sport, dport, v6) in frames {
                let b = if v6 {
                    etherparse::PacketBuilder::ethernet2([2; 6], [4; 6]).ipv6([0xfd; 16], [0xfe; 16], 64)
                } else {
                    etherparse::PacketBuilder::ethernet2([2; 6], [4; 6]).ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                };
                let mut f = Vec::new();
                let number = if proto == 0 {
                    b.tcp(sport, dport, 1, 1000).write(&mut f, b"x").unwrap();
                    6
                } else {
                    b.udp(sport, dport).write(&mut f, b"x").unwrap();
                    17
                };
                let (a, z): (std::net::IpAddr, std::net::IpAddr) = if v6 {
                    ([0xfd; 16].into(), [0xfe; 16].into())
                } else {
                    ([10, 0, 0, 1].into(), [10, 0, 0, 2].into())
                };
                let taken = set.rules.iter().any(|r| {
                    let p = match r.proto { Proto::Tcp | Proto::Http => 6, Proto::Udp => 17, _ => 0 };
                    p == number && (r.header_matches(a, sport, z, dport) || r.header_matches(z, dport, a, sport))
                });
                if taken {
                    proptest::prop_assert!(prog.run(&f, f.len() as u32) != 0, "{e} refuses {proto} {sport} -> {dport} (v6 {v6}) which a rule of\n{text} takes");
                }
            }
        }
    }
}
