//! A node's live sample for the web view: what passes a node, taken through the node's
//! tap (the reader a PipesFS `all.pcap` has, `pipesfs::stream::sample_pcap`), as a pcap
//! download (`GET /api/runs/N/nodes/LABEL/sample.pcap`) or as one tcpdump-style line per
//! packet (`GET /api/runs/N/nodes/LABEL/sample`, JSON).
//!
//! Owns: the two paths, their limits (`count`, `secs`), who may sample (whoever sees the
//! run, as `ps` shows it to them: the same check as the page's), and the packet lines.
//! Does not own: the tap (the worker's, asked for through `Daemon::tap`, taken off when
//! the sample is done) nor its reader.

use super::snapshot;
use crate::policy::Cred;
use crate::server::Daemon;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use std::time::Duration;

/// At most this many packets in one sample.
pub const COUNT_MAX: u64 = 10_000;
/// At most this long gathering one sample.
pub const SECS_MAX: f64 = 30.0;

/// What a sample request asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub run: u64,
    pub node: String,
    pub pcap: bool,
    pub count: u64,
    pub wait: Duration,
}

/// `/api/runs/N/nodes/LABEL/sample[.pcap]` with its query, or None when the path is not
/// a sample's; Err names a bad parameter.
pub fn parse(path: &str, query: &str) -> Option<Result<Ask, String>> {
    let rest = path.strip_prefix("/api/runs/")?;
    let (run, rest) = rest.split_once("/nodes/")?;
    let (node, pcap) = if let Some(n) = rest.strip_suffix("/sample.pcap") {
        (n, true)
    } else {
        (rest.strip_suffix("/sample")?, false)
    };
    let run: u64 = run.parse().ok()?;
    let node = match percent_encoding::percent_decode_str(node).decode_utf8() {
        Ok(n) if !n.is_empty() && !n.contains('/') => n.into_owned(),
        _ => return Some(Err(format!("`{node}` is not a node's label"))),
    };
    let (mut count, mut secs) = if pcap { (1000, 10.0) } else { (20, 2.0) };
    for kv in query.split('&').filter(|q| !q.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "count" => match v.parse::<u64>() {
                Ok(n) if (1..=COUNT_MAX).contains(&n) => count = n,
                _ => {
                    return Some(Err(format!(
                        "count={v}: a number of packets, 1 to {COUNT_MAX}"
                    )))
                }
            },
            "secs" => match v.parse::<f64>() {
                Ok(s) if s > 0.0 && s <= SECS_MAX => secs = s,
                _ => {
                    return Some(Err(format!(
                        "secs={v}: seconds, more than 0 and at most {SECS_MAX}"
                    )))
                }
            },
            _ => {
                return Some(Err(format!(
                    "`{k}` is not a parameter of a sample (count, secs)"
                )))
            }
        }
    }
    Some(Ok(Ask {
        run,
        node,
        pcap,
        count,
        wait: Duration::from_secs_f64(secs),
    }))
}

/// A sample: its pcap bytes and how many packets are in them; Err is (HTTP status, why).
pub fn take(d: &Daemon, who: &Cred, a: &Ask) -> Result<(Vec<u8>, u64), (u16, String)> {
    // Whoever sees the run may see what passes it; anyone else learns nothing of it.
    let runs = snapshot::runs(d, who);
    let Some(run) = runs.iter().find(|r| r.run == a.run) else {
        return Err((404, format!("run {} is not one you can see", a.run)));
    };
    if !run.nodes.iter().any(|n| n.label == a.node) {
        return Err((404, format!("run {} has no node `{}`", a.run, a.node)));
    }
    let (id, fds) = d
        .tap(a.run, &a.node, None)
        .map_err(|(errno, why)| (super::status_of(errno), why))?;
    let got = (|| {
        let mut fds = fds.into_iter();
        let (t, dt) = match (fds.next(), fds.next()) {
            (Some(t), Some(dt)) => (t, dt),
            _ => return Err((500, "the tap came without its two rings".to_string())),
        };
        let tags = beltway::RingRef::from_fds(&format!("tap.{}", a.node), t, None)
            .map_err(|e| (500, e.to_string()))?;
        let data = beltway::RingRef::from_fds(&format!("tap.{}.data", a.node), dt, None)
            .map_err(|e| (500, e.to_string()))?;
        crate::pipesfs::stream::sample_pcap(&tags, &data, a.count, a.wait)
            .map_err(|e| (500, e.to_string()))
    })();
    d.untap(a.run, id);
    got
}

/// One line per packet of a pcap stream, as tcpdump prints them (`-n`, times in UTC).
pub fn lines(pcap: &[u8]) -> Vec<String> {
    let Ok(mut r) = PcapReader::new(pcap) else {
        return Vec::new();
    };
    let link = r.header().datalink;
    let mut out = Vec::new();
    while let Some(Ok(p)) = r.next_packet() {
        out.push(line(link, p.timestamp, p.orig_len, &p.data));
    }
    out
}

/// `HH:MM:SS.uuuuuu` of a capture time (UTC).
fn clock(ts: Duration) -> String {
    let s = ts.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ts.subsec_micros()
    )
}

fn line(link: pcap_file::DataLink, ts: Duration, orig_len: u32, data: &[u8]) -> String {
    use pcap_file::DataLink as L;
    let sliced = match link {
        L::ETHERNET => SlicedPacket::from_ethernet(data).ok(),
        L::RAW | L::IPV4 | L::IPV6 => SlicedPacket::from_ip(data).ok(),
        L::LINUX_SLL => SlicedPacket::from_linux_sll(data).ok(),
        _ => None,
    };
    let at = clock(ts);
    let Some(p) = sliced else {
        return format!("{at} {link:?} frame, length {orig_len}");
    };
    let (ip, src, dst) = match &p.net {
        Some(NetSlice::Ipv4(v4)) => (
            "IP",
            v4.header().source_addr().to_string(),
            v4.header().destination_addr().to_string(),
        ),
        Some(NetSlice::Ipv6(v6)) => (
            "IP6",
            v6.header().source_addr().to_string(),
            v6.header().destination_addr().to_string(),
        ),
        _ => {
            let kind = p
                .link
                .as_ref()
                .and_then(|l| match l {
                    etherparse::LinkSlice::Ethernet2(e) => {
                        Some(format!("ethertype 0x{:04x}", e.ether_type().0))
                    }
                    _ => None,
                })
                .unwrap_or_else(|| "not IP".to_string());
            return format!("{at} {kind}, length {orig_len}");
        }
    };
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            let mut flags = String::new();
            for (on, c) in [
                (t.syn(), 'S'),
                (t.fin(), 'F'),
                (t.rst(), 'R'),
                (t.psh(), 'P'),
                (t.ack(), '.'),
            ] {
                if on {
                    flags.push(c);
                }
            }
            format!(
                "{at} {ip} {src}.{} > {dst}.{}: Flags [{flags}], seq {}, length {}",
                t.source_port(),
                t.destination_port(),
                t.sequence_number(),
                t.payload().len()
            )
        }
        Some(TransportSlice::Udp(u)) => format!(
            "{at} {ip} {src}.{} > {dst}.{}: UDP, length {}",
            u.source_port(),
            u.destination_port(),
            u.payload().len()
        ),
        Some(TransportSlice::Icmpv4(i)) => format!(
            "{at} {ip} {src} > {dst}: ICMP type {}, length {orig_len}",
            i.type_u8()
        ),
        Some(TransportSlice::Icmpv6(i)) => format!(
            "{at} {ip} {src} > {dst}: ICMP6 type {}, length {orig_len}",
            i.type_u8()
        ),
        _ => format!("{at} {ip} {src} > {dst}: length {orig_len}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_limits_parse_and_bad_ones_say_why() {
        let a = parse(
            "/api/runs/7/nodes/count%3Abusy/sample.pcap",
            "count=5&secs=1.5",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (a.run, a.node.as_str(), a.pcap, a.count),
            (7, "count:busy", true, 5)
        );
        assert_eq!(a.wait, Duration::from_millis(1500));
        let b = parse("/api/runs/7/nodes/gen/sample", "").unwrap().unwrap();
        assert_eq!((b.pcap, b.count), (false, 20));
        assert!(parse("/api/runs/7/edit", "").is_none());
        assert!(parse("/api/runs/x/nodes/gen/sample", "").is_none());
        let e = parse("/api/runs/7/nodes/gen/sample", "count=0")
            .unwrap()
            .unwrap_err();
        assert!(e.contains("count=0"), "{e}");
        let e = parse("/api/runs/7/nodes/gen/sample", "secs=99")
            .unwrap()
            .unwrap_err();
        assert!(e.contains("at most 30"), "{e}");
        let e = parse("/api/runs/7/nodes/gen/sample", "rate=1")
            .unwrap()
            .unwrap_err();
        assert!(e.contains("`rate`"), "{e}");
        let e = parse("/api/runs/7/nodes/a%2Fb/sample", "")
            .unwrap()
            .unwrap_err();
        assert!(e.contains("label"), "{e}");
    }

    #[test]
    fn lines_read_like_tcpdumps() {
        let mut frame = Vec::new();
        etherparse::PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(5353, 53)
            .write(&mut frame, b"hello")
            .unwrap();
        let mut pcap = Vec::new();
        let mut w = pcap_file::pcap::PcapWriter::new(&mut pcap).unwrap();
        let ts = Duration::new(3600 * 5 + 61, 250_000_000);
        w.write_packet(&pcap_file::pcap::PcapPacket::new(
            ts,
            frame.len() as u32,
            &frame,
        ))
        .unwrap();
        drop(w);
        assert_eq!(
            lines(&pcap),
            ["05:01:01.250000 IP 10.0.0.1.5353 > 10.0.0.2.53: UDP, length 5"]
        );
    }
}
