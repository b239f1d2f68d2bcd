use super::*;
use proptest::prelude::*;

/// A connection fed by whole byte strings, each direction's bytes cut where `cuts` says.
struct Conn {
    dirs: [Direction; 2],
    ex: Exchange,
    stats: Stats,
    out: Vec<Record>,
    seq: [u32; 2],
    ts: u64,
}

impl Conn {
    fn new() -> Conn {
        let mut dirs = [Direction::new(2 * MAX_HEAD), Direction::new(2 * MAX_HEAD)];
        dirs[0].syn(99);
        dirs[1].syn(4999);
        Conn {
            dirs,
            ex: Exchange::default(),
            stats: Stats::default(),
            out: Vec::new(),
            seq: [100, 5000],
            ts: 0,
        }
    }

    fn send(&mut self, d: usize, bytes: &[u8]) {
        self.ts += 1000;
        let step = self.dirs[d].segment(self.seq[d], bytes);
        assert!(matches!(step, Step::Data { .. }), "{step:?}");
        self.seq[d] = self.seq[d].wrapping_add(bytes.len() as u32);
        if d == 0 {
            self.ex.client(&mut self.dirs[0], self.ts, &mut self.stats);
        } else {
            self.ex
                .server(&mut self.dirs[1], self.ts, &mut self.stats, &mut self.out);
        }
    }

    fn close(&mut self) {
        self.ts += 1000;
        self.ex
            .close(&self.dirs[1], self.ts, &mut self.stats, &mut self.out);
    }

    fn seen(&self) -> Vec<(String, String, Option<u16>, Option<u64>)> {
        self.out
            .iter()
            .map(|r| {
                (
                    r.request.method.clone(),
                    r.request.uri.clone(),
                    r.response.map(|p| p.status),
                    r.response.map(|p| p.size),
                )
            })
            .collect()
    }
}

use crate::ids::stream::Step;

fn rec(
    m: &str,
    u: &str,
    status: Option<u16>,
    size: Option<u64>,
) -> (String, String, Option<u16>, Option<u64>) {
    (m.into(), u.into(), status, size)
}

#[test]
fn pipelined_requests_pair_with_their_responses_in_order() {
    let mut c = Conn::new();
    c.send(0, b"GET /a HTTP/1.1\r\nHost: h\r\nUser-Agent: ua\r\n\r\nHEAD /b HTTP/1.1\r\nHost: h\r\n\r\nPOST /c HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(c.stats.requests, 3);
    c.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n");
    c.send(1, b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwxyz\r\n2;ext=1\r\nab\r\n0\r\nX-Trailer: t\r\n\r\n");
    assert_eq!(
        c.seen(),
        vec![
            rec("GET", "/a", Some(200), Some(3)),
            rec("HEAD", "/b", Some(200), Some(0)),
            rec("POST", "/c", Some(404), Some(6))
        ]
    );
    assert_eq!(c.out[0].request.host.as_deref(), Some("h"));
    assert_eq!(c.out[0].request.user_agent.as_deref(), Some("ua"));
    assert!(c.out.iter().all(|r| r.response.unwrap().complete));
}

#[test]
fn a_body_is_skipped_before_it_arrives_and_never_kept() {
    let mut c = Conn::new();
    c.send(0, b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
    c.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 300000\r\n\r\n");
    for _ in 0..300 {
        c.send(1, &[b'x'; 1000]);
        assert!(c.dirs[1].bytes().is_empty(), "body bytes are not kept");
    }
    assert_eq!(c.seen(), vec![rec("GET", "/big", Some(200), Some(300_000))]);
    assert_eq!(c.out[0].response.unwrap().end_ns, c.ts);
}

#[test]
fn interim_responses_are_skipped_and_a_response_to_the_close_ends_with_it() {
    let mut c = Conn::new();
    c.send(
        0,
        b"PUT /u HTTP/1.0\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nok",
    );
    c.send(
        1,
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 201 Created\r\n\r\nsome",
    );
    c.send(1, b" body");
    assert!(c.out.is_empty());
    c.close();
    assert_eq!(c.seen(), vec![rec("PUT", "/u", Some(201), Some(9))]);
    assert_eq!(c.out[0].request.minor, 0);
}

#[test]
fn unanswered_and_cut_off_requests_are_written_at_the_close() {
    let mut c = Conn::new();
    c.send(
        0,
        b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
    );
    c.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    c.close();
    assert_eq!(
        c.seen(),
        vec![
            rec("GET", "/1", Some(200), Some(3)),
            rec("GET", "/2", None, None)
        ]
    );
    assert!(!c.out[0].response.unwrap().complete);
    assert_eq!(
        (c.stats.answered, c.stats.cut, c.stats.unanswered),
        (1, 1, 1)
    );
}

#[test]
fn heads_split_anywhere_are_read_when_whole() {
    let req = b"GET /split HTTP/1.1\r\nHost: example\r\nReferer: http://r/\r\n\r\n";
    for cut in 1..req.len() {
        let mut c = Conn::new();
        c.send(0, &req[..cut]);
        c.send(0, &req[cut..]);
        c.send(1, b"HTTP/1.1 204 No Content\r\n\r\n");
        assert_eq!(
            c.seen(),
            vec![rec("GET", "/split", Some(204), Some(0))],
            "cut at {cut}"
        );
        assert_eq!(c.out[0].request.referer.as_deref(), Some("http://r/"));
    }
}

#[test]
fn bytes_that_are_not_http_stop_their_side_counted() {
    let mut c = Conn::new();
    c.send(
        0,
        b"GET /ok HTTP/1.1\r\n\r\n\x16\x03\x01 not http at all\r\n\r\n",
    );
    assert_eq!((c.stats.requests, c.stats.bad_requests), (1, 1));
    c.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n");
    assert_eq!(c.stats.bad_responses, 1);
    c.close();
    assert_eq!(c.seen(), vec![rec("GET", "/ok", None, None)]);
    // A response nobody asked for is counted, not paired.
    let mut c = Conn::new();
    c.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(c.stats.orphans, 1);
}

#[test]
fn a_head_over_the_limit_stops_the_side() {
    let mut c = Conn::new();
    c.send(0, b"GET / HTTP/1.1\r\nX: ");
    let filler = vec![b'a'; 1000];
    for _ in 0..70 {
        c.send(0, &filler);
    }
    assert_eq!((c.stats.requests, c.stats.bad_requests), (0, 1));
}

#[test]
fn upgrades_end_the_reading_of_both_sides() {
    let mut c = Conn::new();
    c.send(
        0,
        b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    );
    c.send(
        1,
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello",
    );
    c.send(0, b"\x81\x85binary frames");
    assert_eq!(c.seen(), vec![rec("GET", "/ws", Some(101), Some(0))]);
    assert_eq!((c.stats.bad_requests, c.stats.bad_responses), (0, 0));
}

proptest! {
    /// Whatever the bytes and wherever they are cut, reading never panics, and every
    /// request counted is written exactly once when the connection closes.
    #[test]
    fn any_bytes_any_cuts_every_request_written_once(
        client in proptest::collection::vec(any::<u8>(), 0..400),
        server in proptest::collection::vec(any::<u8>(), 0..400),
        cuts in proptest::collection::vec(1usize..64, 1..12),
        prefix in any::<bool>(),
    ) {
        let mut c = Conn::new();
        let mut cl = if prefix { b"GET /p HTTP/1.1\r\nHost: x\r\n\r\n".to_vec() } else { Vec::new() };
        cl.extend_from_slice(&client);
        let mut sv = if prefix { b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n".to_vec() } else { Vec::new() };
        sv.extend_from_slice(&server);
        let (mut i, mut j, mut k) = (0, 0, 0);
        while i < cl.len() || j < sv.len() {
            let n = cuts[k % cuts.len()];
            k += 1;
            if k % 2 == 0 && i < cl.len() {
                let e = (i + n).min(cl.len());
                c.send(0, &cl[i..e]);
                i = e;
            } else if j < sv.len() {
                let e = (j + n).min(sv.len());
                c.send(1, &sv[j..e]);
                j = e;
            }
        }
        c.close();
        prop_assert_eq!(c.out.len() as u64, c.stats.requests);
        prop_assert_eq!(c.stats.answered + c.stats.unanswered, c.stats.requests);
        if prefix {
            prop_assert_eq!(&c.out[0].request.uri, "/p");
        }
    }
}
