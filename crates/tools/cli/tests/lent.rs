//! A tag never reads recycled memory (issue 14): blocks the kernel lends (AF_PACKET ring
//! blocks, AF_XDP UMEM chunks) go back after their batch, while `tcpstream` holds early
//! segments for as long as their gap stays open. The test writes a capture of HTTP
//! connections whose second request arrives before the first, with megabytes of other
//! traffic in between, replays it with tcpreplay from a network namespace onto a veth
//! pair this test creates, and requires `rx | tcpstream | http | pcapout` to give exactly
//! what `pcapin | tcpstream | http | pcapout` gives on the same file: the same requests,
//! byte for byte and in order, each with its own capture time, while the capture ring
//! went round many times (several times while each early segment was held). Needs root
//! and tcpreplay (CI has both); without them the tests fail saying what is missing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etherparse::PacketBuilder;
use kernel::netns::Veth;
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

/// Connections; each one's second request is sent first and held by tcpstream.
const CONNS: usize = 24;
/// A connection's first request follows its second after this many rounds of filler.
const LAG: usize = 8;
/// Filler frames per round (UDP, 1514 bytes on the wire), unless a test needs more.
const FILLER: usize = 800;
const FILLER_LEN: usize = 1514;
/// `rx blocks=`: the AF_PACKET ring is this many blocks of 1 MiB.
const BLOCKS: u64 = 4;
/// `rx impl=xdp frames=`: UMEM chunks of 2 KiB.
const XDP_FRAMES: usize = 2048;
/// Replay rate (packets per second), halved after a run whose ring overflowed.
const PPS: u64 = 20_000;

/// One replay at a time: they share the machine's two cores, and a ring that overflows
/// makes the comparison moot.
static REPLAY: Mutex<()> = Mutex::new(());

fn quiet_veth(tag: &str) -> Veth {
    common::quiet_veth(
        tag,
        "network namespaces, AF_PACKET and AF_XDP sockets: CAP_SYS_ADMIN, CAP_NET_RAW, CAP_BPF",
    )
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sl-lent-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// What the test's capture holds.
struct Capture {
    frames: usize,
    bytes: u64,
    /// The requests in stream order, each with the file time of the frame it came in.
    requests: Vec<(Vec<u8>, Duration)>,
    /// Bytes of other frames between a connection's early segment and the one that fills
    /// its gap (the least over all connections).
    held_over: u64,
}

/// A pcap file being written: frames, bytes and the time of the last frame.
struct Out {
    w: PcapWriter<std::fs::File>,
    frames: usize,
    bytes: u64,
    t: Duration,
}

impl Out {
    /// Appends a frame 50 us after the last one; returns its time.
    fn put(&mut self, f: &[u8]) -> Duration {
        self.t += Duration::from_micros(50);
        self.w
            .write_packet(&PcapPacket::new(self.t, f.len() as u32, f))
            .unwrap();
        self.frames += 1;
        self.bytes += f.len() as u64;
        self.t
    }
}

/// MAC and IPv4 addresses of the capture: nobody on the pair has them, so the host's
/// stack ignores the frames (AF_PACKET sees every frame on the interface anyway).
const CLIENT: ([u8; 6], [u8; 4]) = ([2, 0, 0, 0, 0, 1], [10, 77, 0, 1]);
const SERVER: ([u8; 6], [u8; 4]) = ([2, 0, 0, 0, 0, 2], [10, 77, 0, 2]);

/// A TCP segment of connection `port` (the client's port) to port 80 or back.
fn tcp(
    from_client: bool,
    port: u16,
    seq: u32,
    ack: Option<u32>,
    syn: bool,
    data: &[u8],
) -> Vec<u8> {
    let ((smac, sip), (dmac, dip), sport, dport) = if from_client {
        (CLIENT, SERVER, port, 80)
    } else {
        (SERVER, CLIENT, 80, port)
    };
    let b = PacketBuilder::ethernet2(smac, dmac)
        .ipv4(sip, dip, 64)
        .tcp(sport, dport, seq, 64240);
    let b = if syn { b.syn() } else { b };
    let b = match ack {
        Some(a) => b.ack(a),
        None => b,
    };
    let mut out = Vec::new();
    b.write(&mut out, data).unwrap();
    out
}

/// A filler frame (UDP, FILLER_LEN bytes on the wire) numbered `n`.
fn filler(n: usize) -> Vec<u8> {
    let payload: Vec<u8> = format!("filler {n:08} ")
        .bytes()
        .cycle()
        .take(FILLER_LEN - 42)
        .collect();
    let mut f = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 10])
        .ipv4([10, 77, 0, 9], [10, 77, 0, 10], 64)
        .udp(5000, 9)
        .write(&mut f, &payload)
        .unwrap();
    f
}

/// Request `which` of connection `i` (lengths differ from connection to connection).
fn request(i: usize, which: &str) -> Vec<u8> {
    format!(
        "GET /c{i}/{which}?{} HTTP/1.1\r\nHost: lent.test\r\nX-Conn: {i}\r\n\r\n",
        "p".repeat(i * 7 % 50)
    )
    .into_bytes()
}

/// Writes the capture: per connection a handshake and its second request (early), and
/// `LAG` rounds of `fill` filler frames later its first request, which fills the gap.
fn write_capture(path: &Path, fill: usize) -> Capture {
    let mut out = Out {
        w: PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap(),
        frames: 0,
        bytes: 0,
        t: Duration::from_secs(1_700_000_000),
    };
    // Per connection: the second request's time and the capture's size after it.
    let mut early: Vec<(Duration, u64)> = Vec::new();
    let mut requests = Vec::new();
    let mut held_over = u64::MAX;
    let isn = |i: usize| (1_000_000 * (i as u32 + 1), 7_000_000 * (i as u32 + 1));
    let mut n = 0;
    for round in 0..CONNS + LAG {
        if round < CONNS {
            let i = round;
            let (port, (c, s)) = (40000 + i as u16, isn(i));
            out.put(&tcp(true, port, c, None, true, &[]));
            out.put(&tcp(false, port, s, Some(c + 1), true, &[]));
            out.put(&tcp(true, port, c + 1, Some(s + 1), false, &[]));
            let at = out.put(&tcp(
                true,
                port,
                c + 1 + request(i, "one").len() as u32,
                Some(s + 1),
                false,
                &request(i, "two"),
            ));
            early.push((at, out.bytes));
        }
        for _ in 0..fill {
            n += 1;
            out.put(&filler(n));
        }
        if round >= LAG {
            let i = round - LAG;
            let (c, s) = isn(i);
            let (two_at, after_two) = early[i];
            held_over = held_over.min(out.bytes - after_two);
            let at = out.put(&tcp(
                true,
                40000 + i as u16,
                c + 1,
                Some(s + 1),
                false,
                &request(i, "one"),
            ));
            requests.push((request(i, "one"), at));
            requests.push((request(i, "two"), two_at));
        }
    }
    Capture {
        frames: out.frames,
        bytes: out.bytes,
        requests,
        held_over,
    }
}

/// The packets of a pcap file: (time, bytes).
fn packets(path: &Path) -> Vec<(Duration, Vec<u8>)> {
    let mut r = PcapReader::new(
        std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        v.push((p.timestamp, p.data.into_owned()));
    }
    v
}

fn start(pipeline: &str, stats: &Path) -> Child {
    Command::new(BIN)
        .args(["run", "-q", "--no-share", "--plan", "none", "--stats"])
        .arg(stats)
        .arg(pipeline)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn streamline")
}

/// Waits until run `pid` (`--plan none`: its pipeline in its main thread) captures on
/// `dev` through AF_XDP: an XDP program is attached to `dev`, the run holds an AF_XDP
/// socket (a socket none of /proc/PID/net's tables of other families lists), and its
/// main thread sleeps in poll (the socket's fill ring stocked, waiting for frames).
fn wait_xdp_capturing(pid: u32, dev: &str) {
    common::wait_until(
        &format!("run {pid} to capture on {dev} with AF_XDP"),
        Duration::from_secs(30),
        || {
            let link = Command::new("ip")
                .args(["-o", "link", "show", "dev", dev])
                .output()
                .unwrap();
            let attached = String::from_utf8_lossy(&link.stdout).contains("prog/xdp");
            let known: String = [
                "unix", "netlink", "packet", "tcp", "tcp6", "udp", "udp6", "raw", "raw6",
            ]
            .iter()
            .map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).unwrap_or_default())
            .collect();
            let known: std::collections::HashSet<&str> = known.split_whitespace().collect();
            let xsk = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .map(|d| {
                    d.flatten().any(|e| {
                        std::fs::read_link(e.path()).ok().is_some_and(|l| {
                            l.to_str()
                                .and_then(|l| l.strip_prefix("socket:[")?.strip_suffix(']'))
                                .is_some_and(|ino| !known.contains(ino))
                        })
                    })
                })
                .unwrap_or(false);
            let main = beltway::testing::task_state(pid, pid);
            let polling = matches!(&main, Some(('S', w)) if w.contains("poll"));
            if attached && xsk && polling {
                Ok(())
            } else {
                Err(format!("XDP program attached: {attached}, AF_XDP socket: {xsk}, main thread (state, wchan): {main:?}"))
            }
        },
    );
}

/// SIGINT (Ctrl-C), then standard error.
fn stop(c: Child) -> String {
    common::interrupt(c)
}

fn replay(v: &Veth, cap: &Path, frames: usize, pps: u64) {
    let o = v
        .command("tcpreplay")
        .args(["-q", "-i", &v.there, "--pps", &pps.to_string()])
        .arg(cap)
        .output()
        .expect("run tcpreplay");
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tcpreplay failed:\n{out}");
    assert!(
        out.contains(&format!("Actual: {frames} packets")),
        "tcpreplay sent every frame:\n{out}"
    );
}

fn rx_line(err: &str) -> String {
    err.lines()
        .find(|l| l.starts_with("rx "))
        .unwrap_or_else(|| panic!("no rx summary:\n{err}"))
        .to_string()
}

/// The number before `what` in `line`.
fn number_before(line: &str, what: &str) -> u64 {
    let head = line
        .split(what)
        .next()
        .filter(|h| h.len() < line.len())
        .unwrap_or_else(|| panic!("no '{what}' in: {line}"));
    head.split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before '{what}' in: {line}"))
}

/// Replays the capture onto a fresh pair and runs `rx dev=HERE RX_OPTS | MIDDLE tcpstream
/// | http | pcapout` while it plays; the requests must be the file's (`pcapin` instead of
/// `rx`), byte for byte and in order, each with its own capture time. Returns the rx
/// summary line and the capture's facts. `fill`: filler frames per round.
fn live_equals_file(name: &str, rx_opts: &str, middle: &str, fill: usize) -> (String, Capture) {
    let _one = REPLAY.lock().unwrap_or_else(|e| e.into_inner());
    common::require_replay_and_root(
        "network namespaces, AF_PACKET and AF_XDP sockets: CAP_SYS_ADMIN, CAP_NET_RAW, CAP_BPF",
    );
    let dir = tmp_dir(name);
    let cap = dir.join("ooo.pcap");
    let c = write_capture(&cap, fill);
    assert_eq!(c.requests.len(), 2 * CONNS);

    // The file: the requests in stream order, each with its own frame's time (the early
    // one, held meanwhile, keeps its earlier time).
    let from_file = dir.join("file.pcap");
    let o = Command::new(BIN)
        .args([
            "run",
            "-q",
            "--plan",
            "none",
            &format!(
                "pcapin file={} | {middle}tcpstream | http | pcapout file={}",
                cap.display(),
                from_file.display()
            ),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let file = packets(&from_file);
    let want: Vec<(Duration, Vec<u8>)> = c.requests.iter().map(|(r, t)| (*t, r.clone())).collect();
    assert!(
        file == want,
        "pcapin | tcpstream | http: {} requests, expected {} in stream order:\n{err}",
        file.len(),
        want.len()
    );

    // Live, until the kernel kept up (a busy machine may overflow the ring: then slower,
    // on a fresh pair, as a socket just closed may still hold the old one's queue).
    let mut pps = PPS;
    let (live, rx, t0, t1) = loop {
        let v = quiet_veth(name);
        let from_rx = dir.join("rx.pcap");
        let stats = dir.join("stats.json");
        let _ = std::fs::remove_file(&stats);
        let run = start(
            &format!(
                "rx dev={} {rx_opts} | {middle}tcpstream | http | pcapout file={}",
                v.here,
                from_rx.display()
            ),
            &stats,
        );
        if rx_opts.contains("impl=xdp") {
            // An AF_XDP socket has no bound packet socket to wait for.
            wait_xdp_capturing(run.id(), &v.here);
        } else {
            common::wait_capturing(run.id(), &v.here);
        }
        let t0 = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        replay(&v, &cap, c.frames, pps);
        let t1 = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        // Stopped once every frame came through rx and every request reached pcapout. A
        // frame the kernel dropped never comes: then, after 30 s, the drop check below
        // tells a drop (again, slower) from a loss.
        let through = || {
            (
                common::stats_counter(&stats, "rx", "blocks_out"),
                common::stats_counter(&stats, "pcapout", "blocks_in"),
            )
        };
        let all = (Some(c.frames as u64), Some(want.len() as u64));
        let waited = Instant::now();
        let mut seen = through();
        while seen != all && waited.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
            seen = through();
        }
        let err = stop(run);
        let rx = rx_line(&err);
        let drops = number_before(&rx, "dropped by the kernel");
        if drops > 0 && pps > PPS / 8 {
            eprintln!("{name}: the kernel dropped {drops} frames at {pps} packets/s; again at half the rate ({rx})");
            pps /= 2;
            continue;
        }
        assert_eq!(
            drops, 0,
            "the kernel dropped frames even at {pps} packets/s: {rx}"
        );
        assert!(
            !err.contains("overwritten before their gap filled"),
            "{err}"
        );
        assert_eq!(
            seen, all,
            "(rx's frames, pcapout's requests) while it ran, within 30 s of the replay's end, with no drop: {rx}"
        );
        break (packets(&from_rx), rx, t0, t1);
    };
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{name}: {rx}");
    assert_eq!(
        number_before(&rx, "packets delivered"),
        c.frames as u64,
        "rx delivered every replayed frame: {rx}"
    );
    // The judged property: the same requests, byte for byte, in the same order.
    let bodies = |p: &[(Duration, Vec<u8>)]| {
        p.iter()
            .map(|(_, d)| String::from_utf8_lossy(d).into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        bodies(&live),
        bodies(&file),
        "rx | tcpstream | http differs from pcapin | tcpstream | http on the same capture ({rx})"
    );
    // Each request keeps the time its own frame was captured: within the replay, and a
    // connection's held second request was captured before the first that released it.
    for (k, (ts, _)) in live.iter().enumerate() {
        assert!(
            *ts + Duration::from_secs(1) >= t0 && *ts <= t1 + Duration::from_secs(1),
            "request {k} has time {ts:?}, outside the replay ({t0:?}..{t1:?})"
        );
    }
    for pair in live.chunks(2) {
        assert!(
            pair[1].0 < pair[0].0,
            "the held request keeps its own (earlier) capture time: {:?} vs {:?}",
            pair[1].0,
            pair[0].0
        );
    }
    (rx, c)
}

/// AF_PACKET: each early segment waits while more than twice the ring's bytes arrive, so
/// its block is handed back and refilled (by filler) before its gap closes.
#[test]
fn rx_tcpstream_http_equals_pcapin_while_the_ring_wraps() {
    let (rx, c) = live_equals_file("pk", &format!("blocks={BLOCKS}"), "", FILLER);
    let ring = BLOCKS << 20;
    assert!(
        c.held_over > 2 * ring,
        "each held segment waits for {} bytes, over two rings of {ring}",
        c.held_over
    );
    let laps = number_before(&rx, "times");
    assert!(
        laps >= c.bytes / ring,
        "the ring went round at least as often as the capture's bytes fill it ({}): {rx}",
        c.bytes / ring
    );
}

/// The same with tcpstream in a thread space of its own: rx's frames cross a channel
/// (written through once into its data ring), whose producer reuses the ring once the
/// consumer released the batch, so held segments must be copies there too. Each waits
/// while more than the channel's data ring of bytes goes through it.
#[test]
fn rx_into_another_space_tcpstream_http_equals_pcapin() {
    let fill = 2 * FILLER + FILLER / 4;
    let (rx, c) = live_equals_file("sp", &format!("blocks={BLOCKS}"), "count space=1 | ", fill);
    let channel = dataplane::channel::ChannelConfig::default().data as u64;
    assert!(
        c.held_over > channel,
        "each held segment waits for {} bytes, more than the channel's {channel}",
        c.held_over
    );
    assert!(
        number_before(&rx, "times") >= c.bytes / (BLOCKS << 20),
        "{rx}"
    );
}

/// AF_XDP: a UMEM of XDP_FRAMES chunks, every one of them reused while a segment is held.
#[test]
fn rx_xdp_tcpstream_http_equals_pcapin_while_chunks_are_reused() {
    let (rx, c) = live_equals_file("xd", &format!("impl=xdp frames={XDP_FRAMES}"), "", FILLER);
    assert!(rx.contains("AF_XDP"), "{rx}");
    assert!(
        c.held_over / FILLER_LEN as u64 > XDP_FRAMES as u64,
        "each held segment waits for more frames than the UMEM has chunks"
    );
    assert!(
        c.frames > 10 * XDP_FRAMES,
        "the UMEM's chunks are reused many times"
    );
}
