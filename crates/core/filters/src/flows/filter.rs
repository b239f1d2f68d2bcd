//! The `ipfix` filter: the packets of the stream metered into flows, the flows exported
//! as IPFIX (or NetFlow v9, `version=9`) to collectors and/or a file; every block passes
//! on unchanged.

use super::cache::{Cache, EndReason, Flow, Timeouts};
use super::export::{collectors, Exporter, Transport};
use super::ipfix::{records, Encoder, Times, Version};
use super::observe::observe;
use dataplane::{Args, Batch, Ctx, Filter, FilterError};

pub struct Ipfix {
    cache: Cache,
    enc: Encoder,
    out: Exporter,
    ingress: u32,
    times: Times,
    ended: Vec<(Flow, EndReason)>,
    /// Frames that carried no IP packet (not metered).
    not_ip: u64,
    flows: u64,
    records: u64,
    reported: usize,
}

impl Filter for Ipfix {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in &batch.tags {
            let Ok(data) = cx.data(t) else { continue };
            let (ts_ns, wire) = match cx.store.record_of(t) {
                Some(r) => (r.ts_ns, r.orig_len as u64),
                None => (0, data.len() as u64),
            };
            let link = cx.store.link(t).unwrap_or(crate::packet::LINKTYPE_ETHERNET);
            match observe(data, link, wire) {
                Some(o) => {
                    self.enc.stream_starts(ts_ns / 1_000_000);
                    self.cache.packet(&o, ts_ns / 1_000_000, &mut self.ended)
                }
                None => self.not_ip += 1,
            }
            // The flows this packet ended go out at its time, not at the batch's end: the
            // messages (their export time, which flows share one) must not depend on where
            // batches happen to end, or placement would change the output.
            if !self.ended.is_empty() {
                self.export();
            }
        }
        self.report(cx);
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        self.cache.flush(&mut self.ended);
        self.export();
        let out = &mut self.out;
        self.enc.flush(&mut |m| out.send(m));
        self.out.finish();
        self.report(cx);
    }

    fn summary(&self) -> Option<String> {
        Some(format!(
            "ipfix: {} packets in {} flows, {} records in {} messages ({} template sets); {} flows evicted from a full table{}{}",
            self.cache.packets,
            self.flows,
            self.records,
            self.enc.messages,
            self.enc.templates,
            self.cache.evicted,
            if self.not_ip > 0 { format!("; {} frames not IP", self.not_ip) } else { String::new() },
            if self.out.lost > 0 { format!("; {} messages not taken by a UDP collector", self.out.lost) } else { String::new() },
        ))
    }
}

impl Ipfix {
    /// Encodes the flows that ended and sends the messages they filled.
    fn export(&mut self) {
        let now = self.cache.now();
        let out = &mut self.out;
        for (f, why) in self.ended.drain(..) {
            self.flows += 1;
            for r in records(&f, why, self.ingress, self.times) {
                self.records += 1;
                self.enc.push(&r, now, &mut |m| out.send(m));
            }
        }
    }

    fn report(&mut self, cx: &mut Ctx<'_>) {
        for f in &self.out.failures[self.reported..] {
            cx.warn(f.clone());
        }
        self.reported = self.out.failures.len();
    }
}

/// Seconds (fractions allowed) as milliseconds; the error names the key.
fn millis(a: &Args, key: &str, default: f64) -> Result<u64, FilterError> {
    let s: f64 = a.parse(key, None, default)?;
    if !(s.is_finite() && s >= 0.0) {
        return Err(FilterError::bad(key, &s.to_string(), "seconds, 0 or more"));
    }
    Ok((s * 1000.0).round() as u64)
}

pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let to = match a.get("to", Some(0)) {
        Some(list) => collectors(list)?,
        None => Vec::new(),
    };
    let file = a.get("out", None);
    if to.is_empty() && file.is_none() {
        return Err(FilterError::Missing {
            key: "to".into(),
            expected: "collectors HOST:PORT[,...], or out=FILE, or both".into(),
        });
    }
    let transport = match a.get("transport", None).unwrap_or("udp") {
        "udp" => Transport::Udp,
        "tcp" => Transport::Tcp,
        v => return Err(FilterError::bad("transport", v, "udp or tcp")),
    };
    let version = match a.get("version", None).unwrap_or("10") {
        "10" => Version::Ipfix,
        "9" => Version::V9,
        v => {
            return Err(FilterError::bad(
                "version",
                v,
                "10 (IPFIX) or 9 (NetFlow v9)",
            ))
        }
    };
    // A NetFlow v9 header has no length, so nothing marks where one message ends in a
    // byte stream: v9 goes in datagrams only.
    if version == Version::V9 {
        if transport == Transport::Tcp {
            return Err(FilterError::bad(
                "transport",
                "tcp",
                "udp with version=9 (a NetFlow v9 message has no length to delimit it in a stream)",
            ));
        }
        if let Some(f) = file {
            return Err(FilterError::bad(
                "out",
                f,
                "no file with version=9 (a NetFlow v9 message has no length to delimit it in a file)",
            ));
        }
    }
    let times = match a.get("times", None).unwrap_or("conversation") {
        "conversation" => Times::Conversation,
        "direction" => Times::Direction,
        v => return Err(FilterError::bad("times", v, "conversation or direction")),
    };
    let t = Timeouts {
        idle: millis(a, "idle", 15.0)?,
        active: millis(a, "active", 1800.0)?,
        fin: millis(a, "fin", 1.0)?,
    };
    if t.active == 0 {
        return Err(FilterError::bad("active", "0", "seconds above 0"));
    }
    let mtu = a.size("mtu", None, 1400)?;
    if !(256..=65535).contains(&mtu) {
        return Err(FilterError::bad(
            "mtu",
            &mtu.to_string(),
            "bytes of a message, 256 to 65535",
        ));
    }
    let flows = a.size("flows", None, 64 * 1024)?;
    if flows == 0 {
        return Err(FilterError::bad("flows", "0", "at least 1 flow"));
    }
    let domain: u32 = a.parse("domain", None, 0)?;
    let ingress: u32 = a.parse("ingress", None, 0)?;
    let refresh = millis(a, "refresh", 600.0)?;
    Ok(Box::new(Ipfix {
        cache: Cache::new(flows as usize, t),
        enc: Encoder::new(version, domain, mtu as usize, refresh),
        out: Exporter::new(&to, transport, file)?,
        ingress,
        times,
        ended: Vec::new(),
        not_ip: 0,
        flows: 0,
        records: 0,
        reported: 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(opts: &[(&str, &str)]) -> Args {
        Args::new(
            "ipfix",
            vec![],
            opts.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn bad_key(e: FilterError) -> (String, String) {
        match e {
            FilterError::BadValue { key, value, .. } => (key, value),
            FilterError::Missing { key, .. } => (key, String::new()),
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn each_refused_parameter_is_named() {
        let cases: &[(&[(&str, &str)], (&str, &str))] = &[
            (&[], ("to", "")),
            (&[("to", "nowhere")], ("to", "nowhere")),
            (&[("to", "127.0.0.1:4739,127.0.0.1")], ("to", "127.0.0.1")),
            (
                &[("to", "127.0.0.1:4739"), ("transport", "sctp")],
                ("transport", "sctp"),
            ),
            (
                &[("to", "127.0.0.1:4739"), ("active", "0")],
                ("active", "0"),
            ),
            (&[("to", "127.0.0.1:4739"), ("idle", "-1")], ("idle", "-1")),
            (&[("to", "127.0.0.1:4739"), ("mtu", "100")], ("mtu", "100")),
            (&[("to", "127.0.0.1:4739"), ("flows", "0")], ("flows", "0")),
            (
                &[("to", "127.0.0.1:4739"), ("times", "both")],
                ("times", "both"),
            ),
            (
                &[("to", "127.0.0.1:4739"), ("version", "5")],
                ("version", "5"),
            ),
            (
                &[("to", "127.0.0.1:4739"), ("version", "ipfix")],
                ("version", "ipfix"),
            ),
            (
                &[
                    ("to", "127.0.0.1:4739"),
                    ("version", "9"),
                    ("transport", "tcp"),
                ],
                ("transport", "tcp"),
            ),
            (
                &[
                    ("to", "127.0.0.1:4739"),
                    ("version", "9"),
                    ("out", "/tmp/f.nf9"),
                ],
                ("out", "/tmp/f.nf9"),
            ),
        ];
        for (opts, (k, v)) in cases {
            let e = make(&args(opts))
                .err()
                .unwrap_or_else(|| panic!("{opts:?} was accepted"));
            assert_eq!(bad_key(e), (k.to_string(), v.to_string()), "{opts:?}");
        }
    }

    #[test]
    fn versions_10_and_9_are_accepted() {
        for v in ["10", "9"] {
            assert!(
                make(&args(&[("to", "127.0.0.1:4739"), ("version", v)])).is_ok(),
                "{v}"
            );
        }
        let e = make(&args(&[("to", "127.0.0.1:4739"), ("version", "5")]))
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("10 (IPFIX) or 9 (NetFlow v9)"),
            "{e}"
        );
    }

    #[test]
    fn a_tcp_collector_that_refuses_is_an_error_naming_it() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        match make(&args(&[
            ("to", &format!("127.0.0.1:{port}")),
            ("transport", "tcp"),
        ])) {
            Err(FilterError::Io { what, .. }) => {
                assert!(what.contains(&format!("127.0.0.1:{port}")), "{what}")
            }
            other => panic!("{:?}", other.err()),
        }
    }
}
