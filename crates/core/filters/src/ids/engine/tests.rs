use super::super::rules::{parse, Options, Vars};
use super::*;

fn engine(text: &str, mode: Mode) -> Engine {
    let r =
        parse(text, "t", &Vars::default(), &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    Engine::new(
        r.rules,
        Settings {
            mode,
            ..Settings::default()
        },
    )
    .unwrap()
}

const C: &str = "10.0.0.1";
const S: &str = "10.0.0.2";

/// A TCP connection's packets, as a test writes them.
struct Conn {
    cport: u16,
    cseq: u32,
    sseq: u32,
    ts: u64,
}

impl Conn {
    fn new(cport: u16) -> Conn {
        Conn {
            cport,
            cseq: 1000,
            sseq: 5000,
            ts: 1,
        }
    }
    fn pkt<'a>(&mut self, to_server: bool, seq: u32, syn: bool, payload: &'a [u8]) -> Packet<'a> {
        self.ts += 1000;
        let (src, dst, sport, dport) = if to_server {
            (C, S, self.cport, 80)
        } else {
            (S, C, 80, self.cport)
        };
        Packet {
            ts_ns: self.ts,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            proto: 6,
            sport,
            dport,
            tcp: Some(Tcp {
                seq,
                syn,
                fin: false,
                rst: false,
            }),
            payload,
        }
    }
    /// SYN, SYN-ACK, ACK.
    fn open(&mut self, e: &mut Engine, alerts: &mut Vec<Alert>) {
        let (c, s) = (self.cseq, self.sseq);
        for p in [
            self.pkt(true, c, true, b""),
            self.pkt(false, s, true, b""),
            self.pkt(true, c + 1, false, b""),
        ] {
            assert_eq!(e.packet(&p, alerts), Verdict::Pass);
        }
    }
    /// Client data at stream offset `off`.
    fn data<'a>(&mut self, off: u32, d: &'a [u8]) -> Packet<'a> {
        let seq = self.cseq + 1 + off;
        self.pkt(true, seq, false, d)
    }
}

#[test]
fn a_pattern_split_over_out_of_order_segments_alerts_once_where_it_completes() {
    let mut e = engine(
        r#"alert tcp any any -> any 80 (msg:"attack"; flow:to_server,established; content:"attack"; sid:10;)"#,
        Mode::Prevent,
    );
    let mut a = Vec::new();
    let mut c = Conn::new(40000);
    c.open(&mut e, &mut a);
    // "xxattack!" sent as "xxat" + "tack!" with the second first.
    let second = c.data(4, b"tack!");
    assert_eq!(e.packet(&second, &mut a), Verdict::Pass);
    assert!(a.is_empty(), "nothing contiguous yet");
    let first = c.data(0, b"xxat");
    assert_eq!(e.packet(&first, &mut a), Verdict::Pass);
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].sid, a[0].sport, a[0].dport), (10, 40000, 80));
    assert_eq!(a[0].payload, b"xxat");
    // More of the stream: the rule already fired for this direction.
    let more = c.data(9, b"attack again");
    e.packet(&more, &mut a);
    assert_eq!(a.len(), 1);
}

#[test]
fn a_drop_rule_drops_the_connection_and_only_it() {
    let mut e = engine(
        r#"drop tcp any any -> any any (msg:"bad"; content:"/etc/passwd"; sid:20;)"#,
        Mode::Prevent,
    );
    let mut a = Vec::new();
    let (mut bad, mut good) = (Conn::new(40001), Conn::new(40002));
    bad.open(&mut e, &mut a);
    good.open(&mut e, &mut a);
    let p = bad.data(0, b"GET /etc/passwd HTTP/1.0\r\n\r\n");
    assert_eq!(e.packet(&p, &mut a), Verdict::Drop);
    assert!(a[0].blocked);
    let later = bad.data(28, b"anything");
    assert_eq!(
        e.packet(&later, &mut a),
        Verdict::Drop,
        "the rest of the connection"
    );
    let g = good.data(0, b"GET /index.html HTTP/1.0\r\n\r\n");
    assert_eq!(e.packet(&g, &mut a), Verdict::Pass);
    assert_eq!(a.len(), 1);
    // Detect mode: the same rule alerts and lets it pass.
    let mut e = engine(
        r#"drop tcp any any -> any any (msg:"bad"; content:"/etc/passwd"; sid:20;)"#,
        Mode::Detect,
    );
    let mut a = Vec::new();
    let mut c = Conn::new(40003);
    c.open(&mut e, &mut a);
    let p = c.data(0, b"GET /etc/passwd");
    assert_eq!(e.packet(&p, &mut a), Verdict::Pass);
    assert!(a.len() == 1 && !a[0].blocked);
}

#[test]
fn overlapping_data_that_differs_drops_the_connection_with_an_alert() {
    let mut e = engine(
        r#"alert tcp any any -> any any (content:"evil"; sid:30;)"#,
        Mode::Prevent,
    );
    let mut a = Vec::new();
    let mut c = Conn::new(40004);
    c.open(&mut e, &mut a);
    let p = c.data(0, b"good data");
    e.packet(&p, &mut a);
    let p = c.data(0, b"evil");
    assert_eq!(e.packet(&p, &mut a), Verdict::Drop);
    assert_eq!((a[0].gid, a[0].sid), (OVERLAP_GID, OVERLAP_SID));
    assert_eq!(e.stats.overlaps, 1);
    // The same bytes again (a plain retransmission) are fine on another connection.
    let mut c = Conn::new(40005);
    c.open(&mut e, &mut a);
    let p = c.data(0, b"good data");
    e.packet(&p, &mut a);
    let p = c.data(0, b"good");
    assert_eq!(e.packet(&p, &mut a), Verdict::Pass);
}

#[test]
fn http_buffers_are_judged_per_request() {
    let mut e = engine(
        r#"alert http any any -> any any (msg:"admin"; flow:to_server; http.method; content:"POST"; http.uri; content:"/admin"; nocase; sid:40;)
alert http any any -> any any (msg:"ua"; http.header; content:"User-Agent: sqlmap"; sid:41;)"#,
        Mode::Detect,
    );
    let mut a = Vec::new();
    let mut c = Conn::new(40006);
    c.open(&mut e, &mut a);
    let r1: &[u8] = b"GET /ADMIN HTTP/1.1\r\nHost: x\r\n\r\n";
    let r2: &[u8] = b"POST /Admin/login HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd";
    let r3: &[u8] = b"GET / HTTP/1.1\r\nUser-Agent: sqlmap/1.0\r\n\r\n";
    let p = c.data(0, r1);
    e.packet(&p, &mut a);
    assert!(a.is_empty(), "a GET is not the rule's method");
    let p = c.data(r1.len() as u32, r2);
    e.packet(&p, &mut a);
    assert_eq!(a.iter().map(|a| a.sid).collect::<Vec<_>>(), [40]);
    let p = c.data((r1.len() + r2.len()) as u32, r3);
    e.packet(&p, &mut a);
    assert_eq!(a.iter().map(|a| a.sid).collect::<Vec<_>>(), [40, 41]);
}

#[test]
fn flow_direction_flowbits_and_thresholds() {
    let mut e = engine(
        r#"alert tcp any any -> any any (msg:"login"; flow:to_server; content:"USER"; flowbits:set,user; flowbits:noalert; sid:50;)
alert tcp any any -> any any (msg:"pass after user"; flow:to_client; content:"230"; flowbits:isset,user; sid:51;)
alert udp any any -> any 53 (msg:"dns"; content:"evil"; threshold:type limit, track by_src, count 2, seconds 60; sid:52;)"#,
        Mode::Detect,
    );
    let mut a = Vec::new();
    // "230" from the server before USER: the bit is not set.
    let mut c = Conn::new(40007);
    c.open(&mut e, &mut a);
    let s = c.sseq + 1;
    let p = c.pkt(false, s, false, b"230 hi");
    e.packet(&p, &mut a);
    assert!(a.is_empty());
    let mut c = Conn::new(40008);
    c.open(&mut e, &mut a);
    let p = c.data(0, b"USER bob\r\n");
    e.packet(&p, &mut a);
    assert!(a.is_empty(), "noalert");
    let s = c.sseq + 1;
    let p = c.pkt(false, s, false, b"230 welcome");
    e.packet(&p, &mut a);
    assert_eq!(a.iter().map(|a| a.sid).collect::<Vec<_>>(), [51]);
    // UDP packet rule with a limit of 2 per source per minute.
    for i in 0..5 {
        let p = Packet {
            ts_ns: 1_000 + i,
            src: C.parse().unwrap(),
            dst: S.parse().unwrap(),
            proto: 17,
            sport: 5353,
            dport: 53,
            tcp: None,
            payload: b"..evil..",
        };
        e.packet(&p, &mut a);
    }
    assert_eq!(a.iter().filter(|a| a.sid == 52).count(), 2);
}

#[test]
fn the_flood_limiter_refuses_a_services_excess_connections_only() {
    let r = parse(
        "alert tcp any any -> any any (content:\"x\"; sid:1;)",
        "t",
        &Vars::default(),
        &Options::default(),
    )
    .unwrap();
    let mut e = Engine::new(
        r.rules,
        Settings {
            flood: Some((2, 3)),
            ..Settings::default()
        },
    )
    .unwrap();
    let mut a = Vec::new();
    let syn = |port: u16, dport: u16, ts: u64| Packet {
        ts_ns: ts,
        src: C.parse().unwrap(),
        dst: S.parse().unwrap(),
        proto: 6,
        sport: port,
        dport,
        tcp: Some(Tcp {
            seq: 1,
            syn: true,
            fin: false,
            rst: false,
        }),
        payload: b"",
    };
    // Ten connections to :80 within a millisecond: the burst of 3 gets through.
    let v: Vec<Verdict> = (0..10)
        .map(|i| e.packet(&syn(50_000 + i, 80, 1_000 + i as u64), &mut a))
        .collect();
    assert_eq!(v.iter().filter(|&&v| v == Verdict::Pass).count(), 3);
    assert_eq!(e.stats.limited, 7);
    assert_eq!(
        a.iter().map(|a| (a.gid, a.sid)).collect::<Vec<_>>(),
        [(FLOOD_GID, FLOOD_SID)],
        "one alert per spell"
    );
    // Another service is not limited; :80 admits again once its bucket refilled (2/s).
    assert_eq!(e.packet(&syn(51_000, 443, 2_000), &mut a), Verdict::Pass);
    assert_eq!(
        e.packet(&syn(51_001, 80, 1_000_000_000), &mut a),
        Verdict::Pass
    );
}
