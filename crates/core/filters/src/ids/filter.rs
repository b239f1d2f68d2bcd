//! The `ips` filter: frames in, the clean ones out, alerts written where users read them
//! (Suricata's `eve.json`, Snort's and Suricata's `fast.log`).
//!
//! Owns: turning frames into engine packets, the verdict as the block's class (0: dropped),
//! and the alert formats. The rules, the reassembly and the matching are the engine's.

use super::defrag::{ipv6_fragment, ipv6_upper, Defrag, Step};
use super::engine::{
    Alert, Engine, Mode, Packet, Settings, Tcp, Verdict, FRAG_OVERLAP_GID, FRAG_OVERLAP_SID,
};
use super::header;
use super::rules::{self, Options, Vars};
use crate::bpf::PerLink;
use crate::packet::{parse_tag, L4};
use dataplane::{Args, Batch, Ctx, Filter, FilterError};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::IpAddr;

pub struct Ips {
    engine: Engine,
    eve: Option<BufWriter<File>>,
    fast: Option<BufWriter<File>>,
    /// Neither file given: fast.log lines to standard error (Snort's `-A console`).
    console: bool,
    alerts: Vec<Alert>,
    /// Frames that were not IP (passed uninspected).
    not_ip: u64,
    skipped_rules: usize,
    failed: Option<String>,
    defrag: Defrag,
    /// IP fragments taken (IPv4 and IPv6), datagrams made whole from them, fragments
    /// dropped for overlapping (a whole datagram's drop is the engine's), refused as
    /// impossible, and fragments passed uninspected (VLAN-tagged, or cut short).
    fragments: u64,
    datagrams: u64,
    frags_dropped: u64,
    frags_bad: u64,
    frags_uninspected: u64,
    /// The rule set's header stage ([`super::header`]) when it runs here: frames it
    /// refuses are passed on unjudged and uncounted. None when it ran on the capture
    /// socket (this node's side is the kernel) or keeps everything.
    header: Option<PerLink>,
    /// Frames the header stage refused here.
    unjudged: u64,
}

impl Filter for Ips {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in batch.tags.iter_mut() {
            if let Some(h) = &mut self.header {
                if !h.accepts(cx, t) {
                    self.unjudged += 1;
                    continue;
                }
            }
            let Some(pk) = parse_tag(cx, t) else {
                self.not_ip += 1;
                continue;
            };
            let (Some((_, src, dst, proto)), Ok(data)) = (pk.ip, cx.data(t)) else {
                self.not_ip += 1;
                continue;
            };
            let (sport, dport) = pk.ports().unwrap_or((0, 0));
            let tcp = match pk.l4 {
                L4::Tcp {
                    seq, syn, fin, rst, ..
                } => Some(Tcp { seq, syn, fin, rst }),
                _ => None,
            };
            let ts_ns = cx.store.record_of(t).map_or(0, |r| r.ts_ns);
            if pk.fragmented {
                let link = cx.store.link(t).unwrap_or(1);
                if self.fragment(data, link, ts_ns) == Verdict::Drop {
                    t.class = 0;
                }
                continue;
            }
            let (off, len) = pk.payload;
            let payload = data.get(off..off + len).unwrap_or(&[]);
            let p = Packet {
                ts_ns,
                src,
                dst,
                proto,
                sport,
                dport,
                tcp,
                payload,
            };
            if self.engine.packet(&p, &mut self.alerts) == Verdict::Drop {
                t.class = 0;
            }
        }
        self.write_alerts(cx);
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        self.write_alerts(cx);
        for w in [&mut self.eve, &mut self.fast].into_iter().flatten() {
            if let Err(e) = w.flush() {
                cx.warn(format!("ips: writing alerts: {e}"));
            }
        }
    }

    fn summary(&self) -> Option<String> {
        let s = &self.engine.stats;
        Some(format!(
            "ips: {} packets, {} alerts, {} dropped; {} rules{}; {} connections refused by the flood limiter; {} candidates evaluated, {} undecided (backtracking budget), {} overlaps, {} directions past the depth, {} given up (held too much), {} connections evicted, {} frames not IP{}{}{}",
            s.packets,
            s.alerts,
            s.dropped + self.frags_dropped,
            self.engine.rules().len(),
            if self.skipped_rules > 0 { format!(" ({} skipped as unsupported)", self.skipped_rules) } else { String::new() },
            s.limited,
            s.candidates,
            s.exhausted,
            s.overlaps,
            s.past_depth,
            s.gave_up,
            s.evicted,
            self.not_ip,
            if self.unjudged > 0 {
                format!("; {} frames no rule looks at passed unjudged (the header stage)", self.unjudged)
            } else {
                String::new()
            },
            if self.fragments + self.frags_uninspected > 0 {
                format!(
                    "; {} IP fragments made {} datagrams ({} fragments dropped for overlapping, {} impossible, {} datagrams expired), {} fragments uninspected (VLAN, cut short)",
                    self.fragments, self.datagrams, self.frags_dropped, self.frags_bad, self.defrag.expired, self.frags_uninspected
                )
            } else {
                String::new()
            },
            self.failed.as_ref().map(|f| format!("; alerts not written: {f}")).unwrap_or_default(),
        ))
    }
}

impl Ips {
    /// An IP fragment (IPv4, or IPv6 with a fragment header): kept until its datagram is
    /// whole, which is then inspected as one packet (the fragment that completes it gets
    /// the verdict: dropping it leaves the receiver nothing to reassemble). Fragments under
    /// VLAN tags, and ones cut too short to read, pass uninspected (counted).
    fn fragment(&mut self, data: &[u8], link: u32, ts_ns: u64) -> Verdict {
        use etherparse::{Ipv4HeaderSlice, TcpHeaderSlice, UdpHeaderSlice};
        // (source, destination, protocol, key's protocol, id, offset, more, bytes)
        let frag = match crate::packet::link_layer(data, link) {
            Some((0x0800, off)) => Ipv4HeaderSlice::from_slice(data.get(off..).unwrap_or(&[]))
                .ok()
                .map(|h| {
                    let start = off + h.slice().len();
                    let end = (off + h.total_len() as usize).min(data.len());
                    let proto = h.protocol().0;
                    (
                        IpAddr::from(h.source_addr()),
                        IpAddr::from(h.destination_addr()),
                        proto,
                        proto,
                        h.identification() as u32,
                        h.fragments_offset().value() as usize * 8,
                        h.more_fragments(),
                        data.get(start..end).unwrap_or(&[]),
                    )
                }),
            Some((0x86DD, off)) => ipv6_fragment(data.get(off..).unwrap_or(&[])).map(|f| {
                (
                    IpAddr::from(f.src),
                    IpAddr::from(f.dst),
                    f.next,
                    0,
                    f.id,
                    f.offset,
                    f.more,
                    f.data,
                )
            }),
            _ => None,
        };
        let Some((src, dst, proto, key_proto, id, offset, more, body)) = frag else {
            self.frags_uninspected += 1;
            return Verdict::Pass;
        };
        self.fragments += 1;
        let step = self
            .defrag
            .fragment(src, dst, key_proto, id, offset, more, body, ts_ns);
        let mut p = Packet {
            ts_ns,
            src,
            dst,
            proto,
            sport: 0,
            dport: 0,
            tcp: None,
            payload: body,
        };
        match step {
            Step::Pending => Verdict::Pass,
            Step::Bad => {
                self.frags_bad += 1;
                Verdict::Pass
            }
            Step::Overlap(_) => {
                let v = self.engine.evasion(
                    &p,
                    0,
                    (FRAG_OVERLAP_GID, FRAG_OVERLAP_SID),
                    "FRAG overlapping IP fragments differ from bytes already seen (evasion attempt)",
                    &mut self.alerts,
                );
                if v == Verdict::Drop {
                    self.frags_dropped += 1;
                }
                v
            }
            Step::Whole(whole) => {
                // IPv6: the fragmentable part may start with extension headers.
                let (proto, upper) = if src.is_ipv6() {
                    ipv6_upper(&whole, proto)
                } else {
                    (proto, 0)
                };
                p.proto = proto;
                let whole = &whole[upper..];
                let mut payload: &[u8] = whole;
                match proto {
                    6 => {
                        if let Ok(t) = TcpHeaderSlice::from_slice(whole) {
                            (p.sport, p.dport) = (t.source_port(), t.destination_port());
                            p.tcp = Some(Tcp {
                                seq: t.sequence_number(),
                                syn: t.syn(),
                                fin: t.fin(),
                                rst: t.rst(),
                            });
                            payload = &whole[t.slice().len()..];
                        }
                    }
                    17 => {
                        if let Ok(u) = UdpHeaderSlice::from_slice(whole) {
                            (p.sport, p.dport) = (u.source_port(), u.destination_port());
                            payload = &whole[8..];
                        }
                    }
                    _ => {}
                }
                p.payload = payload;
                self.datagrams += 1;
                // A drop here is the engine's (counted in its packets dropped).
                self.engine.packet(&p, &mut self.alerts)
            }
        }
    }

    fn write_alerts(&mut self, cx: &mut Ctx<'_>) {
        if self.alerts.is_empty() || self.failed.is_some() {
            self.alerts.clear();
            return;
        }
        let mut err = None;
        for a in self.alerts.drain(..) {
            if let Some(w) = &mut self.eve {
                if let Err(e) = writeln!(w, "{}", eve_line(&a)) {
                    err = Some(e);
                }
            }
            if let Some(w) = &mut self.fast {
                if let Err(e) = writeln!(w, "{}", fast_line(&a)) {
                    err = Some(e);
                }
            }
            if self.console {
                eprintln!("{}", fast_line(&a));
            }
        }
        for w in [&mut self.eve, &mut self.fast].into_iter().flatten() {
            if let Err(e) = w.flush() {
                err = Some(e);
            }
        }
        if let Some(e) = err {
            let why = e.to_string();
            cx.warn(format!("ips: writing alerts failed ({why}); no more alerts are written, inspection goes on"));
            self.failed = Some(why);
        }
    }
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "ICMP".into(),
        6 => "TCP".into(),
        17 => "UDP".into(),
        58 => "IPv6-ICMP".into(),
        n => format!("{n:03}"),
    }
}

fn utc(ts_ns: u64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(ts_ns as i128)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// What Suricata prints of a payload: printable ASCII as it is, other bytes as `.`.
fn printable(b: &[u8]) -> String {
    b.iter()
        .map(|&c| {
            if (0x20..0x7f).contains(&c) || c == b'\n' || c == b'\r' {
                c as char
            } else {
                '.'
            }
        })
        .collect()
}

/// One alert as a line of Suricata's eve.json.
pub fn eve_line(a: &Alert) -> String {
    let t = utc(a.ts_ns);
    let ts = t
        .format(time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]+0000"
        ))
        .unwrap_or_default();
    serde_json::json!({
        "timestamp": ts,
        "flow_id": a.flow_id,
        "event_type": "alert",
        "src_ip": a.src.to_string(),
        "src_port": a.sport,
        "dest_ip": a.dst.to_string(),
        "dest_port": a.dport,
        "proto": proto_name(a.proto),
        "alert": {
            "action": if a.blocked { "blocked" } else { "allowed" },
            "gid": a.gid,
            "signature_id": a.sid,
            "rev": a.rev,
            "signature": a.msg,
            "category": a.classtype.clone().unwrap_or_default(),
            "severity": a.priority,
        },
        "payload_printable": printable(&a.payload),
    })
    .to_string()
}

/// `ADDR:PORT`, an IPv6 address in brackets (`[fd99::1]:80`).
fn endpoint(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// One alert as a line of fast.log (Suricata's form; Snort's is the same but for the year).
pub fn fast_line(a: &Alert) -> String {
    let t = utc(a.ts_ns);
    let ts = t
        .format(time::macros::format_description!(
            "[month]/[day]/[year repr:last_two]-[hour]:[minute]:[second].[subsecond digits:6]"
        ))
        .unwrap_or_default();
    format!(
        "{ts}  {}[**] [{}:{}:{}] {} [**] [Classification: {}] [Priority: {}] {{{}}} {} -> {}",
        if a.blocked { "[Drop] " } else { "" },
        a.gid,
        a.sid,
        a.rev,
        a.msg,
        a.classtype.as_deref().unwrap_or("(null)"),
        a.priority,
        proto_name(a.proto),
        endpoint(a.src, a.sport),
        endpoint(a.dst, a.dport),
    )
}

fn create(a: &Args, key: &str) -> Result<Option<BufWriter<File>>, FilterError> {
    match a.get(key, None) {
        None => Ok(None),
        Some(path) => File::create(path)
            .map(|f| Some(BufWriter::new(f)))
            .map_err(|e| FilterError::io(format!("cannot create {path}"), e)),
    }
}

/// The rule file of an `ips` node's arguments, loaded with its variables and options.
fn load_rules(a: &Args) -> Result<rules::Rules, FilterError> {
    let path = a.require("rules", Some(0))?;
    let mut vars = Vars::default();
    if let Some(h) = a.get("home", None) {
        vars.addr("HOME_NET", h);
    }
    if let Some(x) = a.get("external", None) {
        vars.addr("EXTERNAL_NET", x);
    }
    let opts = Options {
        skip_unsupported: a.flag("skip_unsupported")?,
    };
    rules::load(std::path::Path::new(path), &vars, &opts)
        .map_err(|e| FilterError::invalid("the rules do not load", e))
}

/// The header stage of an `ips` node ([`super::header`]; None: it keeps every frame).
/// None with the flood limiter, which counts every new connection to a service.
fn header_of(a: &Args, set: &rules::Rules) -> Option<String> {
    a.get("flood", None)
        .is_none()
        .then(|| header::expression(&set.rules))
        .flatten()
}

/// The expression the kernel push-down puts on `rx`'s socket for an `ips` node with
/// these arguments (`live::kernel_placement`); None when there is no header stage or the
/// rules do not load (the build then says why).
pub fn kernel_header(a: &Args) -> Option<String> {
    header_of(a, &load_rules(a).ok()?)
}

pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let set = load_rules(a)?;
    let in_kernel = a.place.side.as_ref().is_some_and(lang::Side::is_kernel);
    let header = match header_of(a, &set) {
        Some(x) if !in_kernel => Some(
            PerLink::superset(&x)
                .map_err(|e| FilterError::invalid("the rules' header stage", e))?,
        ),
        _ => None,
    };
    let mode = match a.get("mode", None).unwrap_or("ips") {
        "ids" => Mode::Detect,
        _ => Mode::Prevent,
    };
    let flood = match a.get("flood", None) {
        None => None,
        Some(v) => {
            let bad = || {
                FilterError::bad("flood", v, "RATE or RATE/BURST: new connections per second per service, whole numbers above 0")
            };
            let (r, b) = v.split_once('/').unwrap_or((v, v));
            let (r, b): (u64, u64) = (r.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            if r == 0 || b == 0 {
                return Err(bad());
            }
            Some((r, b))
        }
    };
    let settings = Settings {
        flood,
        mode,
        depth: a.size("depth", None, 1 << 20)? as usize,
        max_flows: a.size("flows", None, 1 << 16)?.max(1) as usize,
    };
    let skipped_rules = set.skipped.len();
    let engine = Engine::new(set.rules, settings)
        .map_err(|e| FilterError::invalid("the rules' automaton", std::io::Error::other(e)))?;
    let (eve, fast) = (create(a, "eve")?, create(a, "fast")?);
    Ok(Box::new(Ips {
        engine,
        console: eve.is_none() && fast.is_none(),
        eve,
        fast,
        alerts: Vec::new(),
        not_ip: 0,
        skipped_rules,
        failed: None,
        defrag: Defrag::default(),
        fragments: 0,
        datagrams: 0,
        frags_dropped: 0,
        frags_bad: 0,
        frags_uninspected: 0,
        header,
        unjudged: 0,
    }))
}

// The declaration of `ips` is data in the catalog (`catalog::ids::IPS`); its
// constructor, `make`, is paired with it in `filters::CONSTRUCTORS`.

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(src: &str, blocked: bool) -> Alert {
        Alert {
            ts_ns: 1_700_000_000_123_456_789,
            flow_id: 7,
            src: src.parse().unwrap(),
            sport: 40000,
            dst: "10.0.0.2".parse().unwrap(),
            dport: 80,
            proto: 6,
            gid: 1,
            sid: 1000001,
            rev: 2,
            msg: "a \"quoted\" message".into(),
            classtype: Some("web-application-attack".into()),
            priority: 1,
            blocked,
            payload: b"GET /x\r\n\x00\x01".to_vec(),
        }
    }

    #[test]
    fn fast_log_lines_are_suricatas() {
        assert_eq!(
            fast_line(&alert("10.0.0.1", false)),
            "11/14/23-22:13:20.123456  [**] [1:1000001:2] a \"quoted\" message [**] [Classification: web-application-attack] [Priority: 1] {TCP} 10.0.0.1:40000 -> 10.0.0.2:80"
        );
        assert!(fast_line(&alert("fd99::1", true)).contains("[Drop] [**]"));
        assert!(
            fast_line(&alert("fd99::1", true)).ends_with("{TCP} [fd99::1]:40000 -> 10.0.0.2:80")
        );
    }

    #[test]
    fn eve_lines_are_json_objects_with_suricatas_fields() {
        let v: serde_json::Value =
            serde_json::from_str(&eve_line(&alert("10.0.0.1", true))).unwrap();
        assert_eq!(v["timestamp"], "2023-11-14T22:13:20.123456+0000");
        assert_eq!(v["event_type"], "alert");
        assert_eq!(
            (v["src_ip"].as_str(), v["dest_port"].as_u64()),
            (Some("10.0.0.1"), Some(80))
        );
        assert_eq!(v["alert"]["action"], "blocked");
        assert_eq!(v["alert"]["signature"], "a \"quoted\" message");
        assert_eq!(v["payload_printable"], "GET /x\r\n..");
    }
}
