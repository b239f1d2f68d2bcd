//! The `httplog` figure (issue 37): the weblog generator against tshark, both turning the
//! same large capture into one record per HTTP request.
//!
//! - The capture: made here ([`write_capture`]): many keep-alive connections from many
//!   clients to one web server, each with a handshake, one to four requests (methods,
//!   hosts, URIs, user agents and referers varying) answered by responses of 0 to 12 KB
//!   (`Content-Length`, a few chunked) in MTU-sized segments with the client's ACKs, and
//!   the closing FINs. Its size is picked from the machine: as many requests as make
//!   tshark spend about [`PEER_CPU_GOAL`] s of CPU (2,000 requests with --quick).
//! - Ours: `streamline run -q 'pcapin file=BIG | httplog | outfile file=LOG'` (Combined
//!   Log Format lines). Peer: `tshark -n -r BIG -Y http -T fields -e http.request.method
//!   -e http.host -e http.request.uri -e http.user_agent -e http.response.code`, the
//!   fields the tests compare with. Counts checked before a ratio prints: our lines, the
//!   requests tshark printed and the requests written all agree, and so do our answered
//!   requests and tshark's responses.
//! - CPU: user + system of each whole command and its children (`RUSAGE_CHILDREN`,
//!   [`crate::pcap::timed`]), each run once untimed first, then alternately, best of
//!   `reps`. The figure: requests per CPU second, ours over tshark's.

use crate::pcap::{timed, Cost};
use crate::util::{cleanup_on_abnormal_exit, err, watchdog, Result, Summary, Target, TempDir};
use pcap_file::pcap::{PcapPacket, PcapWriter};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// CPU seconds tshark should spend on the full-size capture.
const PEER_CPU_GOAL: f64 = 8.0;
/// Requests of the probe (and the --quick) capture.
const PROBE_REQUESTS: u64 = 2_000;
const MAX_REQUESTS: u64 = 2_000_000;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Timed runs of each command (the fastest counts); ignored with --quick (1).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Requests in the capture; default: from the machine.
    #[arg(long)]
    requests: Option<u64>,
}

use crate::util::Rng;

/// Frames of one capture being written, with a clock.
struct Writer {
    w: PcapWriter<std::io::BufWriter<std::fs::File>>,
    ns: u64,
    frames: u64,
}

const SERVER: ([u8; 4], u16) = ([10, 80, 0, 1], 80);
const MSS: usize = 1448;

impl Writer {
    /// One TCP segment; `to_server` says its direction.
    #[allow(clippy::too_many_arguments)]
    fn tcp(
        &mut self,
        client: ([u8; 4], u16),
        to_server: bool,
        seq: u32,
        ack: u32,
        flags: &str,
        payload: &[u8],
    ) -> Result<()> {
        let ((src, sp), (dst, dp)) = if to_server {
            (client, SERVER)
        } else {
            (SERVER, client)
        };
        let mut b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(src, dst, 64)
            .tcp(sp, dp, seq, 64240);
        if flags.contains('S') {
            b = b.syn();
        }
        if flags.contains('F') {
            b = b.fin();
        }
        if flags.contains('P') {
            b = b.psh();
        }
        if flags.contains('A') {
            b = b.ack(ack);
        }
        let mut frame = Vec::with_capacity(64 + payload.len());
        b.write(&mut frame, payload)
            .map_err(|e| err(format!("building a frame: {e}")))?;
        self.ns += 20_000;
        let ts = Duration::from_nanos(self.ns);
        self.w
            .write_packet(&PcapPacket::new(ts, frame.len() as u32, &frame))
            .map_err(|e| err(format!("writing the capture: {e}")))?;
        self.frames += 1;
        Ok(())
    }

    /// `data` from one side in MSS-sized segments; returns the next sequence number.
    fn send(
        &mut self,
        client: ([u8; 4], u16),
        to_server: bool,
        mut seq: u32,
        ack: u32,
        data: &[u8],
    ) -> Result<u32> {
        for chunk in data.chunks(MSS) {
            self.tcp(client, to_server, seq, ack, "PA", chunk)?;
            seq = seq.wrapping_add(chunk.len() as u32);
        }
        Ok(seq)
    }
}

const METHODS: [&str; 4] = ["GET", "GET", "POST", "HEAD"];
const AGENTS: [&str; 4] = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0 Safari/537.36",
    "curl/7.88.1",
    "Wget/1.21.3",
];

/// One request of a connection and the response to it.
fn exchange(r: &mut Rng, n: u64) -> (Vec<u8>, Vec<u8>) {
    let method = METHODS[r.below(4) as usize];
    let body = if method == "POST" {
        format!("field={n}&other=value")
    } else {
        String::new()
    };
    let mut req = format!(
        "{method} /wiki/Page_{}?oldid={n} HTTP/1.1\r\nHost: {}.wikipedia.example\r\nUser-Agent: {}\r\nAccept: text/html,application/xhtml+xml\r\nAccept-Language: en-US,en;q=0.5\r\nReferer: http://www.example/search?q={}\r\n",
        r.below(100_000),
        ["en", "nl", "de"][r.below(3) as usize],
        AGENTS[r.below(4) as usize],
        r.below(1000)
    );
    if !body.is_empty() {
        req += &format!("Content-Length: {}\r\n", body.len());
    }
    req += "\r\n";
    req += &body;
    let size = [0u64, 300, 2000, 6000, 12000][r.below(5) as usize] as usize;
    let status = if r.below(10) == 0 {
        "404 Not Found"
    } else {
        "200 OK"
    };
    let page = vec![b'a' + (n % 26) as u8; size];
    let mut resp =
        format!("HTTP/1.1 {status}\r\nServer: nginx\r\nContent-Type: text/html\r\n").into_bytes();
    if r.below(8) == 0 && method != "HEAD" {
        resp.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        for c in page.chunks(4096) {
            resp.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            resp.extend_from_slice(c);
            resp.extend_from_slice(b"\r\n");
        }
        resp.extend_from_slice(b"0\r\n\r\n");
    } else {
        resp.extend_from_slice(format!("Content-Length: {size}\r\n\r\n").as_bytes());
        if method != "HEAD" {
            resp.extend_from_slice(&page);
        }
    }
    (req.into_bytes(), resp)
}

/// The capture: at least `requests` requests. Returns (requests, frames).
fn write_capture(path: &Path, requests: u64) -> Result<(u64, u64)> {
    let f = std::fs::File::create(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
    let w = PcapWriter::new(std::io::BufWriter::with_capacity(1 << 20, f))
        .map_err(|e| err(format!("{}: {e}", path.display())))?;
    let mut w = Writer {
        w,
        ns: 1_700_000_000_000_000_000,
        frames: 0,
    };
    let mut r = Rng(0x4854_5450_4c4f_4721);
    let mut n = 0u64;
    let mut conn = 0u64;
    while n < requests {
        conn += 1;
        let client = (
            [
                10,
                1 + (conn >> 16) as u8 % 200,
                (conn >> 8) as u8,
                conn as u8,
            ],
            1024 + (conn % 60000) as u16,
        );
        let (mut cs, mut ss) = (r.next() as u32, r.next() as u32);
        w.tcp(client, true, cs, 0, "S", &[])?;
        w.tcp(client, false, ss, cs.wrapping_add(1), "SA", &[])?;
        cs = cs.wrapping_add(1);
        ss = ss.wrapping_add(1);
        w.tcp(client, true, cs, ss, "A", &[])?;
        for _ in 0..(1 + r.below(4)) {
            n += 1;
            let (req, resp) = exchange(&mut r, n);
            cs = w.send(client, true, cs, ss, &req)?;
            ss = w.send(client, false, ss, cs, &resp)?;
            w.tcp(client, true, cs, ss, "A", &[])?;
        }
        w.tcp(client, true, cs, ss, "FA", &[])?;
        w.tcp(client, false, ss, cs.wrapping_add(1), "FA", &[])?;
        w.tcp(
            client,
            true,
            cs.wrapping_add(1),
            ss.wrapping_add(1),
            "A",
            &[],
        )?;
    }
    use std::io::Write;
    w.w.into_writer()
        .flush()
        .map_err(|e| err(format!("{}: {e}", path.display())))?;
    Ok((n, w.frames))
}

/// The two commands on one capture.
struct Setup {
    streamline: PathBuf,
    big: PathBuf,
    log: PathBuf,
    requests: u64,
}

impl Setup {
    /// Ours: cost, lines written, answered requests (its summary).
    fn ours(&self) -> Result<(Cost, u64, u64)> {
        let pipeline = format!(
            "pcapin file={} | httplog | outfile file={}",
            self.big.display(),
            self.log.display()
        );
        let (cost, out) = timed(
            Command::new(&self.streamline).args(["run", "-q", &pipeline]),
            &format!("streamline run '{pipeline}'"),
        )?;
        let se = String::from_utf8_lossy(&out.stderr);
        let line = se
            .lines()
            .find(|l| l.starts_with("httplog: "))
            .ok_or_else(|| err(format!("no `httplog:` line from our run: {se}")))?;
        let num = |after: &str| crate::util::before(line, after);
        let (requests, answered) = (num(" requests").unwrap_or(0), num(" answered").unwrap_or(0));
        let lines = std::fs::read(&self.log)?
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64;
        if lines != requests {
            return Err(err(format!(
                "ours wrote {lines} lines but counted {requests} requests: {line}"
            )));
        }
        Ok((cost, lines, answered))
    }

    /// tshark: cost, requests, responses.
    fn tshark(&self) -> Result<(Cost, u64, u64)> {
        let mut c = Command::new("tshark");
        c.arg("-n").arg("-r").arg(&self.big).args([
            "-Y",
            "http",
            "-T",
            "fields",
            "-E",
            "occurrence=a",
        ]);
        for f in [
            "http.request.method",
            "http.host",
            "http.request.uri",
            "http.user_agent",
            "http.response.code",
        ] {
            c.args(["-e", f]);
        }
        let (cost, out) = timed(&mut c, "tshark")?;
        let (mut req, mut resp) = (0, 0);
        for row in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = row.split('\t').collect();
            req += f
                .first()
                .map_or(0, |m| m.split(',').filter(|s| !s.is_empty()).count())
                as u64;
            resp += f
                .get(4)
                .map_or(0, |m| m.split(',').filter(|s| !s.is_empty()).count())
                as u64;
        }
        Ok((cost, req, resp))
    }

    /// Both once, untimed, with their counts checked against each other and the capture.
    fn check(&self) -> Result<u64> {
        let (_, ours, answered) = self.ours()?;
        let (_, theirs, responses) = self.tshark()?;
        if ours != self.requests || theirs != self.requests || answered != responses {
            return Err(err(format!(
                "counts differ: the capture holds {} requests; ours wrote {ours} lines ({answered} answered), tshark printed {theirs} requests and {responses} responses",
                self.requests
            )));
        }
        Ok(responses)
    }
}

/// Measure and add `httplog_requests_per_cpu_second_vs_tshark` to `sum` (what the `flows`
/// subcommand calls; `requests` None: sized from the machine).
pub fn add_figures(
    sum: &mut Summary,
    quick: bool,
    reps: usize,
    requests: Option<u64>,
) -> Result<()> {
    if Command::new("tshark").arg("-v").output().is_err() {
        return Err(err(
            "tshark is not installed (the peer); install it: apt-get install tshark",
        ));
    }
    let streamline = crate::capture::streamline()?;
    let dir = TempDir::new("httplog")?;
    let big = dir.path().join("big.pcap");
    cleanup_on_abnormal_exit(&[&big, dir.path()]);
    let (n, frames) = write_capture(&big, requests.unwrap_or(PROBE_REQUESTS))?;
    let mut s = Setup {
        streamline,
        big,
        log: dir.path().join("access.log"),
        requests: n,
    };
    s.check()?;
    if !quick && requests.is_none() {
        let (c, _, _) = s.tshark()?;
        let want = (n as f64 * PEER_CPU_GOAL / c.cpu.max(0.01)) as u64;
        println!("size: tshark took {:.2} s of CPU for {n} requests: {want} requests for about {PEER_CPU_GOAL} s", c.cpu);
        let (n, _) = write_capture(&s.big, want.clamp(PROBE_REQUESTS, MAX_REQUESTS))?;
        s.requests = n;
    }
    let responses = s.check()?;
    let size = std::fs::metadata(&s.big)?.len();
    println!(
        "capture: {} requests ({responses} answered) in {:.1} MB{}",
        s.requests,
        size as f64 / 1e6,
        if s.requests == n {
            format!(", {frames} frames")
        } else {
            String::new()
        }
    );
    println!("ours: streamline run -q 'pcapin file=BIG | httplog | outfile file=LOG'; peer: tshark -n -r BIG -Y http -T fields -e http.request.method -e http.host -e http.request.uri -e http.user_agent -e http.response.code");
    println!(
        "counts: {} requests and {responses} responses, the same from both",
        s.requests
    );
    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        ours.push(s.ours()?.0);
        peer.push(s.tshark()?.0);
    }
    let (o, p) = (Cost::best(&ours), Cost::best(&peer));
    let r = s.requests as f64;
    println!(
        "\n{:<10} {:>10} {:>10} {:>16}",
        "run", "CPU s", "wall s", "requests/CPU s"
    );
    for (what, c) in [("ours", o), ("tshark", p)] {
        println!(
            "{what:<10} {:>10.3} {:>10.3} {:>16.0}",
            c.cpu,
            c.wall,
            r / c.cpu
        );
    }
    sum.add(
        "httplog_requests_per_cpu_second_vs_tshark",
        (r / o.cpu) / (r / p.cpu),
        Some(Target::AtLeast(10.0)),
        format!(
            "requests per CPU second, `pcapin | httplog` over tshark's fields ({} requests)",
            s.requests
        ),
    );
    Ok(())
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    watchdog(if quick {
        Duration::from_secs(180)
    } else {
        Duration::from_secs(20 * 60)
    });
    println!(
        "streamline-bench httplog ({} mode)",
        if quick { "quick" } else { "full" }
    );
    let mut sum = Summary::default();
    add_figures(&mut sum, quick, if quick { 1 } else { a.reps }, a.requests)?;
    sum.print()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capture_holds_the_requests_it_says_in_frames_libpcap_reads() {
        let d = TempDir::new("httplog-test").unwrap();
        let p = d.path().join("c.pcap");
        let (n, frames) = write_capture(&p, 50).unwrap();
        assert!(n >= 50 && n < 54, "{n}");
        let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&p).unwrap()).unwrap();
        let mut seen = 0;
        let mut requests = 0;
        while let Some(pkt) = r.next_packet() {
            let pkt = pkt.unwrap();
            seen += 1;
            let s = etherparse::SlicedPacket::from_ethernet(&pkt.data).unwrap();
            let payload = match s.transport {
                Some(etherparse::TransportSlice::Tcp(t)) => t.payload().to_vec(),
                _ => panic!("not TCP"),
            };
            requests += METHODS
                .iter()
                .filter(|m| payload.starts_with(format!("{m} /wiki/").as_bytes()))
                .count()
                .min(1) as u64;
        }
        assert_eq!((seen, requests), (frames, n));
    }
}
