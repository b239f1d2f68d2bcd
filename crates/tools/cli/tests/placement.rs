//! Placement invariance (thesis 5.3, 6.3; issue 14): a filter may run in any space and
//! the results are byte-identical. Every pipeline of `tests/placement/corpus.txt` runs
//! over the shipped capture and over captures this test generates (TCP with segments
//! out of order and retransmitted, HTTP requests split across segments, DNS, ICMP, IPv6),
//! first as written in one space (the reference), then in many placements: every filter
//! on a thread of its own, every filter in a process space, threads and processes
//! alternating, each filter alone on a thread, each filter replicated (`space=1,2`), the
//! optimizer's and the heuristic's
//! plans at a load that spreads the work, and random placements drawn by a property test.
//! Each must print the same standard output, write the same bytes to `{out}`, print the
//! same summary lines and exit the same way, or be refused with an error naming the filter
//! that cannot keep its meaning there (a filter declared `Replication::Never`, or session
//! replicas whose interleaving something downstream would see).
//!
//! Every run here also writes its counters (`--stats`), and they must add up in every
//! placement and through migrations ([`counters_add_up`]): per node, blocks out = blocks
//! in - drops + made - ended; a node's blocks and bytes in are the sum of what the arcs
//! into it carried; a node with one arc out sent down it exactly its blocks out; and the
//! table lists only the pipeline's own nodes (no channel endpoints or other internals),
//! each once, labelled as in one space: the same rows in every placement (a replicated
//! filter's copies, split and join are its one row, whose space says `1,2`). Summary
//! lines (`count: ...`, `count#2: ...`) are part of what must not change.

use lang::NodeKind;
use proptest::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

/// What a run produced, everything that placement must not change.
#[derive(Debug, Clone)]
struct Outcome {
    code: Option<i32>,
    stdout: Vec<u8>,
    /// The file the pipeline wrote to `{out}` (None: it wrote none).
    out: Option<Vec<u8>>,
    /// Standard error with `-q`: the filters' summaries and warnings, sorted (spaces
    /// report in their own order).
    stderr: Vec<String>,
    /// Where the run's counters (`--stats`) do not add up, in words (None: they do, or
    /// the run was refused before it ran). Not part of what placement must keep: the
    /// labels and times differ by placement.
    counters: Option<String>,
    /// The table's rows (`--stats` labels), in order: the nodes the user wrote, labelled
    /// as in one space, whatever the placement (empty: refused before it ran).
    labels: Vec<String>,
}

impl PartialEq for Outcome {
    fn eq(&self, o: &Outcome) -> bool {
        (self.code, &self.stdout, &self.out, &self.stderr) == (o.code, &o.stdout, &o.out, &o.stderr)
    }
}
impl Eq for Outcome {}

/// Where the counters of `--stats` output `json` fail to add up (see the module
/// documentation), each finding naming the node or arc and its numbers.
fn counters_add_up(json: &str) -> Result<(), Vec<String>> {
    let v: serde_json::Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => return Err(vec![format!("--stats is not JSON: {e}")]),
    };
    let num = |x: &serde_json::Value, k: &str| x[k].as_u64().unwrap_or(u64::MAX) as i128;
    let nodes = v["nodes"].as_array().cloned().unwrap_or_default();
    let arcs = v["arcs"].as_array().cloned().unwrap_or_default();
    let mut bad = Vec::new();
    let labels: Vec<&str> = nodes.iter().filter_map(|n| n["label"].as_str()).collect();
    for n in &nodes {
        let l = n["label"].as_str().unwrap_or("?");
        if l.starts_with("__") || l.contains('~') || l.contains('@') || l.starts_with("split") {
            bad.push(format!(
                "node {l}: a run's own node (or a copy, or a space) is listed as the pipeline's"
            ));
        }
        if n["space"].as_str().is_none_or(str::is_empty) {
            bad.push(format!("node {l}: no space"));
        }
        let (i, o, d, m, e) = (
            num(n, "blocks_in"),
            num(n, "blocks_out"),
            num(n, "drops"),
            num(n, "made"),
            num(n, "ended"),
        );
        if o != i - d + m - e {
            bad.push(format!("node {l}: blocks in {i} - drops {d} + made {m} - ended {e} = {}, but blocks out {o}", i - d + m - e));
        }
        let into: Vec<&serde_json::Value> = arcs
            .iter()
            .filter(|a| a["to"].as_str() == Some(l))
            .collect();
        let (sb, sy): (i128, i128) = into.iter().fold((0, 0), |s, a| {
            (s.0 + num(a, "blocks"), s.1 + num(a, "bytes"))
        });
        if sb != i || sy != num(n, "bytes_in") {
            let from: Vec<String> = into
                .iter()
                .map(|a| format!("{} {}", a["from"].as_str().unwrap_or("?"), num(a, "blocks")))
                .collect();
            bad.push(format!("node {l}: blocks in {i} (bytes {}), but its in-arcs carried {sb} (bytes {sy}): {from:?}", num(n, "bytes_in")));
        }
        let out: Vec<&serde_json::Value> = arcs
            .iter()
            .filter(|a| a["from"].as_str() == Some(l))
            .collect();
        match out[..] {
            [] if o != 0 => bad.push(format!("node {l}: blocks out {o}, but no arc leaves it")),
            [a] if num(a, "blocks") != o || num(a, "bytes") != num(n, "bytes_out") => bad.push(format!(
                "node {l}: blocks out {o} (bytes {}), but its one arc, to {}, carried {} (bytes {})",
                num(n, "bytes_out"), a["to"], num(a, "blocks"), num(a, "bytes")
            )),
            _ => {
                for a in &out {
                    if num(a, "blocks") > o {
                        bad.push(format!("node {l}: blocks out {o}, but its arc to {} carried {}", a["to"], num(a, "blocks")));
                    }
                }
            }
        }
    }
    for a in &arcs {
        let known = |k: &str| a[k].as_str().is_some_and(|x| labels.contains(&x));
        if !known("from") || !known("to") {
            bad.push(format!(
                "arc {} -> {} ({} blocks) joins no two nodes of the table {labels:?}",
                a["from"],
                a["to"],
                num(a, "blocks")
            ));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad)
    }
}

impl Outcome {
    fn differs(&self, other: &Outcome) -> Option<String> {
        if self.code != other.code {
            return Some(format!("exit status {:?} vs {:?}", self.code, other.code));
        }
        if self.stdout != other.stdout {
            return Some(format!(
                "standard output differs: {}",
                first_difference(&self.stdout, &other.stdout)
            ));
        }
        if self.out != other.out {
            return Some(match (&self.out, &other.out) {
                (Some(a), Some(b)) => {
                    format!("the {{out}} file differs: {}", first_difference(a, b))
                }
                (a, b) => format!("{{out}} written: {} vs {}", a.is_some(), b.is_some()),
            });
        }
        if self.labels != other.labels {
            return Some(format!(
                "the table lists other nodes:\n  reference: {:?}\n  placed:    {:?}",
                self.labels, other.labels
            ));
        }
        if self.stderr != other.stderr {
            return Some(format!(
                "summary lines differ:\n  reference: {:?}\n  placed:    {:?}",
                self.stderr, other.stderr
            ));
        }
        None
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> String {
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let show = |s: &[u8]| {
        String::from_utf8_lossy(&s[at.saturating_sub(40).min(s.len())..(at + 80).min(s.len())])
            .into_owned()
    };
    format!(
        "{} vs {} bytes, first difference at byte {at}:\n  reference: {:?}\n  placed:    {:?}",
        a.len(),
        b.len(),
        show(a),
        show(b)
    )
}

/// A scratch directory for the whole test binary.
fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("sl-placement-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fn run(text: &str, args: &[&str]) -> Outcome {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let out = dir().join(format!(
        "out-{}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let text = text.replace("{out}", out.to_str().unwrap());
    let stats = out.with_extension("stats.json");
    let o = Command::new(BIN)
        .arg("run")
        .arg("-q")
        .arg("--stats")
        .arg(&stats)
        .args(args)
        .arg(&text)
        .output()
        .expect("run streamline");
    let json = std::fs::read_to_string(&stats);
    let labels: Vec<String> = json
        .as_ref()
        .ok()
        .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .and_then(|v| {
            v["nodes"].as_array().map(|a| {
                a.iter()
                    .filter_map(|n| n["label"].as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default();
    let counters = match json {
        Ok(json) => counters_add_up(&json).err().map(|v| {
            format!(
                "the counters do not add up in\n  {text} {args:?}\n  {}",
                v.join("\n  ")
            )
        }),
        // Refused before it ran (status 2): nothing was counted.
        Err(_) if o.status.code() == Some(2) => None,
        Err(e) => Some(format!("{text} {args:?}: no --stats file ({e})")),
    };
    let _ = std::fs::remove_file(&stats);
    // `--chaos` counts its moves on a line of its own: tallied here, not compared.
    let mut stderr: Vec<String> = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| !tally_chaos(l))
        .map(str::to_string)
        .collect();
    stderr.sort();
    let written = std::fs::read(&out).ok();
    let _ = std::fs::remove_file(&out);
    Outcome {
        code: o.status.code(),
        stdout: o.stdout,
        out: written,
        stderr,
        counters,
        labels,
    }
}

/// Filters moved by `--chaos` in this test process: down, up.
static MOVED: [std::sync::atomic::AtomicU64; 2] = [
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
];

/// Whether `line` is `--chaos`'s count of moves (`chaos: D filters moved down, U up, R
/// moves refused`); if so, add it to [`MOVED`].
fn tally_chaos(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("chaos: ") else {
        return false;
    };
    let n: Vec<u64> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    for (k, m) in MOVED.iter().enumerate() {
        m.fetch_add(
            n.get(k).copied().unwrap_or(0),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    true
}

/// The corpus, placeholders other than `{out}` substituted: one pipeline per capture for
/// lines with `{pcap}`, one for the others.
fn corpus(captures: &[PathBuf]) -> Vec<String> {
    let text_file = dir().join("words.txt");
    if !text_file.exists() {
        let mut s = String::new();
        let mut r = Rng(0x5eed);
        for i in 0..4000 {
            let w = ["alpha", "beta", "tcp", "udp", "gamma", "delta"];
            s += &format!(
                "{} {} {} {}\n",
                w[r.below(6) as usize],
                i,
                w[r.below(6) as usize],
                r.below(100_000)
            );
        }
        std::fs::write(&text_file, s).unwrap();
    }
    let mut v = Vec::new();
    for line in common::placement_corpus() {
        let line = line.replace("{text}", text_file.to_str().unwrap());
        if line.contains("{pcap}") {
            for c in captures {
                v.push(line.replace("{pcap}", c.to_str().unwrap()));
            }
        } else {
            v.push(line);
        }
    }
    v
}

/// The filters a placement may move: native, not sources, not named (a named node's
/// options are those of its first occurrence), without a `space=` of their own. Each as
/// (byte offset where its text ends, filter name).
fn movable(text: &str) -> Vec<(usize, String)> {
    let g = lang::parse(text, &lang::WithPath(filters::Natives))
        .unwrap_or_else(|d| panic!("corpus pipeline does not parse:\n{d}"));
    let mut v: Vec<(usize, String)> = g
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Filter {
                filter, options, ..
            } if n.name.is_none()
                && !options.iter().any(|(k, _)| k == "space")
                && !filters::find(filter).is_some_and(|s| s.source) =>
            {
                assert!(
                    text[n.span.start..].starts_with(filter.as_str()),
                    "span of {filter} in {text}: {:?}",
                    n.span
                );
                Some((n.span.end, filter.clone()))
            }
            _ => None,
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The pipeline with `space=` added to filter `i` of [`movable`] as `spaces[i]` says.
fn placed(text: &str, spaces: &[Option<String>]) -> String {
    let m = movable(text);
    let mut t = text.to_string();
    for ((end, _), s) in m.iter().zip(spaces).rev() {
        if let Some(s) = s {
            t.insert_str(*end, &format!(" space={s}"));
        }
    }
    t
}

/// Whether the placement `spaces` asks for copies of a filter that must refuse them, and
/// which. Session filters may refuse (when what follows sees the order).
fn must_refuse(text: &str, spaces: &[Option<String>]) -> (Vec<String>, Vec<String>) {
    let (mut never, mut maybe) = (Vec::new(), Vec::new());
    for ((_, f), s) in movable(text).iter().zip(spaces) {
        if s.as_deref().is_some_and(|s| s.contains(',')) {
            match filters::find(f).map(|s| s.replication) {
                Some(dataplane::Replication::Never(_)) => never.push(f.clone()),
                Some(dataplane::Replication::Sessions) => maybe.push(f.clone()),
                _ => {}
            }
        }
    }
    (never, maybe)
}

/// Run `text` placed by `spaces` (plus `args`) and hold it to the reference. Returns
/// whether it ran (false: refused, as it had to be).
fn check(
    reference: &Outcome,
    text: &str,
    spaces: &[Option<String>],
    args: &[&str],
) -> Result<bool, String> {
    let t = placed(text, spaces);
    let got = run(&t, args);
    if let Some(why) = &got.counters {
        return Err(why.clone());
    }
    let (never, maybe) = must_refuse(text, spaces);
    let err = got.stderr.join("\n");
    if got.code == Some(2) && (!never.is_empty() || !maybe.is_empty()) {
        let named = never
            .iter()
            .chain(&maybe)
            .any(|f| err.contains(&format!("{f}: space=")));
        if named && (err.contains("cannot be replicated") || err.contains("interleave")) {
            return Ok(false);
        }
    }
    if !never.is_empty() {
        return Err(format!(
            "{t} {args:?}: {never:?} must refuse to be replicated, but the run {:?}:\n{err}",
            got.code
        ));
    }
    // Structures that must stay in one space: parallel branches up to their join, and
    // loops. Splitting them is refused, naming a filter this placement moved.
    let moved: Vec<String> = movable(text)
        .into_iter()
        .zip(spaces)
        .filter(|(_, s)| s.is_some())
        .map(|((_, f), _)| f)
        .collect();
    let names_moved = moved.iter().any(|f| {
        err.contains(&format!("streamline: error: {f}: "))
            || err.contains(&format!("streamline: error: {f} (its copies): "))
    });
    let joins = [" + ", " ++ ", " +* "].iter().any(|op| text.contains(op));
    if got.code == Some(2) && names_moved {
        if joins && err.contains("branches must run in one space with their fork and join here") {
            return Ok(false);
        }
        if err.contains("feed each other (channels between spaces are one-way") {
            return Ok(false);
        }
    }
    match reference.differs(&got) {
        Some(why) => Err(format!("placement changed the result of\n  {text}\nplaced as\n  {t} {args:?}\n{why}\nstderr:\n{err}")),
        None => Ok(true),
    }
}

/// A small deterministic generator (xorshift64*), so generated captures are the same on
/// every run and a failure can be replayed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A capture of traffic the shipped sample does not have, from `seed`: HTTP connections
/// whose requests are split across segments, with segments swapped and retransmitted;
/// DNS queries and responses; ICMP; TCP over IPv6. Written with etherparse and pcap-file.
fn generated_capture(seed: u64) -> PathBuf {
    use etherparse::PacketBuilder;
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    let path = dir().join(format!("gen-{seed:x}.pcap"));
    let mut r = Rng(seed | 1);
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mac = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let tcp4 =
        |src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, seq: u32, syn: bool, payload: &[u8]| {
            let b = PacketBuilder::ethernet2(mac.0, mac.1).ipv4(src, dst, 64);
            let b = if syn {
                b.tcp(sp, dp, seq, 65535).syn()
            } else {
                b.tcp(sp, dp, seq, 65535).ack(1).psh()
            };
            let mut v = Vec::new();
            b.write(&mut v, payload).unwrap();
            v
        };
    let methods = ["GET", "POST", "HEAD", "PUT"];
    for conn in 0..40u32 {
        let client = [10, 1, (conn / 200) as u8, (conn % 200) as u8 + 1];
        let server = [10, 2, 0, 1 + r.below(3) as u8];
        let sport = 20_000 + conn as u16;
        let dport = [80, 8080, 443][r.below(3) as usize];
        let isn = r.next() as u32;
        frames.push(tcp4(client, server, sport, dport, isn, true, &[]));
        let req = format!(
            "{} /{}/{} HTTP/1.1\r\nHost: h{}\r\nUser-Agent: t\r\n\r\n",
            methods[r.below(4) as usize],
            conn,
            r.below(1000),
            r.below(50)
        );
        let req = req.as_bytes();
        // Two to four segments, the middle ones possibly swapped, one possibly resent.
        let n = 2 + r.below(3) as usize;
        let mut cuts: Vec<usize> = (1..n).map(|i| i * req.len() / n).collect();
        cuts.insert(0, 0);
        cuts.push(req.len());
        let mut segs: Vec<Vec<u8>> = cuts
            .windows(2)
            .map(|w| {
                tcp4(
                    client,
                    server,
                    sport,
                    dport,
                    isn.wrapping_add(1 + w[0] as u32),
                    false,
                    &req[w[0]..w[1]],
                )
            })
            .collect();
        if segs.len() > 2 && r.below(2) == 0 {
            segs.swap(1, 2);
        }
        if r.below(3) == 0 {
            let again = segs[0].clone();
            segs.push(again);
        }
        // Interleave with the previous connection's frames a little.
        for s in segs {
            let at = frames.len() - r.below(3.min(frames.len() as u64)) as usize;
            frames.insert(at, s);
        }
    }
    for q in 0..30u16 {
        let mut dns = vec![(q >> 8) as u8, q as u8, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        dns.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
        let mut v = Vec::new();
        PacketBuilder::ethernet2(mac.0, mac.1)
            .ipv4([10, 1, 9, 9], [10, 2, 0, 53], 64)
            .udp(30_000 + q, 53)
            .write(&mut v, &dns)
            .unwrap();
        frames.push(v);
        dns[2] = 0x81;
        dns[3] = 0x80;
        let mut v = Vec::new();
        PacketBuilder::ethernet2(mac.1, mac.0)
            .ipv4([10, 2, 0, 53], [10, 1, 9, 9], 64)
            .udp(53, 30_000 + q)
            .write(&mut v, &dns)
            .unwrap();
        frames.push(v);
    }
    for i in 0..20u16 {
        let mut v = Vec::new();
        PacketBuilder::ethernet2(mac.0, mac.1)
            .ipv4([10, 1, 0, 7], [10, 2, 0, 1], 64)
            .icmpv4_echo_request(7, i)
            .write(&mut v, b"ping payload")
            .unwrap();
        frames.push(v);
        let mut v = Vec::new();
        let (a, b) = (
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        );
        PacketBuilder::ethernet2(mac.0, mac.1)
            .ipv6(a, b, 64)
            .tcp(40_000 + i, 80, i as u32 * 1000, 1000)
            .ack(1)
            .write(&mut v, format!("GET /v6/{i} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        frames.push(v);
    }
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let ts = std::time::Duration::new(
            1_700_000_000 + i as u64 / 10,
            (i as u32 % 10) * 100_000_000 + r.below(1000) as u32,
        );
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .unwrap();
    }
    path
}

/// The same frames as Linux cooked captures (`tcpdump -i any`, LINKTYPE_LINUX_SLL): each
/// Ethernet header becomes a 16-byte SLL header with the same protocol.
fn as_linux_cooked(eth: &Path) -> PathBuf {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
    let path = eth.with_extension("sll.pcap");
    let mut r = PcapReader::new(std::fs::File::open(eth).unwrap()).unwrap();
    let header = PcapHeader {
        datalink: pcap_file::DataLink::LINUX_SLL,
        ..r.header()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(&path).unwrap(), header).unwrap();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let Some(rest) = p.data.get(14..) else {
            continue;
        };
        let mut f = vec![0, 0, 0, 1, 0, 6];
        f.extend_from_slice(&p.data[6..12]);
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&p.data[12..14]);
        f.extend_from_slice(rest);
        w.write_packet(&PcapPacket::new(p.timestamp, p.orig_len + 2, &f))
            .unwrap();
    }
    path
}

/// The captures every `{pcap}` pipeline runs over (made once: the tests run in parallel):
/// the shipped sample, a generated capture, the generated one as a Linux cooked capture,
/// and any listed in `STREAMLINE_PLACEMENT_CAPTURES` (colon-separated paths), so the
/// corpus can be held to the law on captures of one's own.
fn captures() -> Vec<PathBuf> {
    static C: OnceLock<Vec<PathBuf>> = OnceLock::new();
    C.get_or_init(|| {
        let sample = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../examples/sample.pcap"
        ));
        let generated = generated_capture(0x1234_5678);
        let cooked = as_linux_cooked(&generated);
        let mut v = vec![sample, generated, cooked];
        if let Ok(extra) = std::env::var("STREAMLINE_PLACEMENT_CAPTURES") {
            v.extend(
                extra
                    .split(':')
                    .filter(|s| !s.is_empty())
                    .map(PathBuf::from),
            );
        }
        v
    })
    .clone()
}

/// References, computed once per pipeline (the property test draws from them).
fn reference(text: &str) -> Outcome {
    static R: OnceLock<Mutex<HashMap<String, Outcome>>> = OnceLock::new();
    let m = R.get_or_init(Default::default);
    if let Some(o) = m.lock().unwrap().get(text) {
        return o.clone();
    }
    let o = run(text, &["--plan", "none"]);
    assert!(
        o.code == Some(0),
        "corpus pipeline fails in one space:\n  {text}\n{}",
        o.stderr.join("\n")
    );
    if let Some(why) = &o.counters {
        panic!("{why}");
    }
    assert!(
        !o.stdout.is_empty()
            || o.out.as_ref().is_some_and(|f| !f.is_empty())
            || !o.stderr.is_empty(),
        "corpus pipeline produces nothing to compare: {text}"
    );
    m.lock().unwrap().insert(text.to_string(), o.clone());
    o
}

#[test]
fn the_corpus_has_thirty_pipelines_that_all_produce_something() {
    let n = common::placement_corpus().len();
    assert!(n >= 30, "the corpus has {n} pipelines");
    for t in corpus(&captures()) {
        reference(&t);
    }
}

#[test]
fn every_pipeline_gives_the_same_result_in_every_placement() {
    let mut failures = Vec::new();
    let (mut ran, mut refused) = (0, 0);
    for text in corpus(&captures()) {
        let reference = reference(&text);
        let m = movable(&text);
        let n = m.len();
        let mut placements: Vec<(Vec<Option<String>>, Vec<&str>)> = vec![
            // Every filter on a thread of its own.
            (
                (1..=n).map(|i| Some(i.to_string())).collect(),
                vec!["--plan", "none"],
            ),
            // Every filter in a process space of its own.
            (
                (1..=n).map(|i| Some(format!("p{i}"))).collect(),
                vec!["--plan", "none"],
            ),
            // Threads and processes alternating.
            (
                (1..=n)
                    .map(|i| {
                        Some(if i % 2 == 0 {
                            format!("p{i}")
                        } else {
                            i.to_string()
                        })
                    })
                    .collect(),
                vec!["--plan", "none"],
            ),
            // The optimizer's and the heuristic's plans at a load one CPU cannot carry.
            (
                vec![None; n],
                vec!["--plan", "ilp", "--rate", "20000000", "--bytes", "1500"],
            ),
            (
                vec![None; n],
                vec![
                    "--plan",
                    "heuristic",
                    "--rate",
                    "20000000",
                    "--bytes",
                    "1500",
                ],
            ),
        ];
        // Each filter alone on a thread (the rest stay with the source), and each filter
        // replicated.
        for i in 0..n {
            for spaces in ["1", "1,2"] {
                let mut s = vec![None; n];
                s[i] = Some(spaces.to_string());
                placements.push((s, vec!["--plan", "none"]));
            }
        }
        for (spaces, args) in placements {
            match check(&reference, &text, &spaces, &args) {
                Ok(true) => ran += 1,
                Ok(false) => refused += 1,
                Err(e) => failures.push(e),
            }
        }
    }
    eprintln!("{ran} placed runs matched their reference, {refused} placements were refused as they must be");
    assert!(
        failures.is_empty(),
        "{} placements changed results:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran > 200, "only {ran} placed runs");
}

/// Placement invariance through migrations (issue 19): every pipeline, its filters on
/// threads of their own (and, second, its back half on one thread), runs with `--chaos
/// SEED`: at random batch boundaries, with source batches of random sizes, filters move
/// across the channels between the spaces, down and up, with their state. The results must
/// be those of the pipeline in one space, and filters must really have moved.
#[test]
fn every_pipeline_gives_the_same_result_through_random_migrations() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for (k, text) in corpus(&captures()).into_iter().enumerate() {
        let reference = reference(&text);
        let n = movable(&text).len();
        let own: Vec<Option<String>> = (1..=n).map(|i| Some(i.to_string())).collect();
        let half: Vec<Option<String>> = (0..n)
            .map(|i| (i >= n / 2).then(|| "1".to_string()))
            .collect();
        for (spaces, seed) in [(own, 2 * k + 1), (half, 2 * k + 2)] {
            let seed = seed.to_string();
            match check(
                &reference,
                &text,
                &spaces,
                &["--plan", "none", "--chaos", &seed],
            ) {
                Ok(true) => ran += 1,
                Ok(false) => {}
                Err(e) => failures.push(e),
            }
        }
    }
    let moved = MOVED
        .each_ref()
        .map(|m| m.load(std::sync::atomic::Ordering::Relaxed));
    eprintln!(
        "{ran} runs with random migrations matched their reference; filters moved: {} down, {} up",
        moved[0], moved[1]
    );
    assert!(
        failures.is_empty(),
        "{} runs with random migrations changed results:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran > 100, "only {ran} runs");
    assert!(moved[0] > 100 && moved[1] > 100, "filters moved: {moved:?}");
}

/// Random placements: every movable filter on the calling thread, a thread (1-3), a
/// process (p4, p5), or copies over threads or processes.
fn placement_choice() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("local".to_string())),
        (1usize..4).prop_map(|i| Some(i.to_string())),
        (4usize..6).prop_map(|i| Some(format!("p{i}"))),
        Just(Some("1,2".to_string())),
        Just(Some("p4,p5".to_string())),
        Just(Some("1,p5".to_string())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_placements_give_the_same_result(pick in any::<prop::sample::Index>(), choices in proptest::collection::vec(placement_choice(), 8)) {
        let all = corpus(&captures());
        let text = &all[pick.index(all.len())];
        let n = movable(text).len();
        let reference = reference(text);
        if let Err(e) = check(&reference, text, &choices[..n.min(8)], &["--plan", "none"]) {
            prop_assert!(false, "{}", e);
        }
    }
}

#[test]
fn a_placement_that_cannot_keep_a_filter_meaning_is_refused_by_name() {
    let sample = &captures()[0];
    for (text, filter, why) in [
        (
            "pcapin file={pcap} | tcp | count space=1,2",
            "count",
            "its totals are over the whole stream",
        ),
        (
            "pcapin file={pcap} | sample 10 space=1,2 | count",
            "sample",
            "every Nth block",
        ),
        (
            "pcapin file={pcap} | tcp | tcpstream space=1,2 | http | inspect",
            "tcpstream",
            "inspect downstream sees the order",
        ),
    ] {
        let t = text.replace("{pcap}", sample.to_str().unwrap());
        let o = run(&t, &["--plan", "none"]);
        let err = o.stderr.join("\n");
        assert_eq!(o.code, Some(2), "{t}: {err}");
        assert!(
            err.contains(&format!("{filter}: space=1,2")) && err.contains(why),
            "{t}: {err}"
        );
    }
    // Session replicas feeding only counters keep their meaning and run.
    let t = "pcapin file={pcap} | tcp | tcpstream space=1,2 | http | count"
        .replace("{pcap}", sample.to_str().unwrap());
    let one = run(&t.replace(" space=1,2", ""), &["--plan", "none"]);
    let two = run(&t, &["--plan", "none"]);
    assert_eq!(two.code, Some(0), "{:?}", two.stderr);
    assert_eq!(one, two);
}

#[test]
fn named_classes_resolve_or_are_refused_with_a_caret() {
    let sample = captures()[0].to_str().unwrap().to_string();
    let by_name = run(&format!("pcapin file={sample} | dport |http count"), &[]);
    let by_number = run(&format!("pcapin file={sample} | dport |80 count"), &[]);
    assert_eq!(by_name, by_number);
    assert!(common::count_of(&by_name.stderr.join("\n")) > 0);
    let o = run(
        &format!("pcapin file={sample} | tcp | http |get count"),
        &[],
    );
    assert_eq!(
        o,
        run(&format!("pcapin file={sample} | tcp | http |1 count"), &[])
    );
    // Inverted named selectors resolve too.
    assert_eq!(
        run(&format!("pcapin file={sample} | dport |!dns count"), &[]),
        run(&format!("pcapin file={sample} | dport |!53 count"), &[])
    );
    // A name nobody upstream publishes: an error at the selector with what upstream has.
    let o = Command::new(BIN)
        .args([
            "run",
            &format!("pcapin file={sample} | tcp | dport |htp count"),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no filter upstream of this arc publishes a class named 'htp'"),
        "{err}"
    );
    assert!(err.contains("^^^^") && err.contains("http (80)"), "{err}");
    // The nearest publisher wins: after `http`, `|get` is http's class 1, not a port.
    let o = Command::new(BIN)
        .args(["check", "pcapin file=x.pcap | dport | http |get count"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("|1"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // `http` publishes no port names.
    let o = Command::new(BIN)
        .args(["check", "pcapin file=x.pcap | http |dns count"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// Kernel placements (a filter right after `rx` runs on the capture socket: `bpf` as
/// classic BPF, `bytecount` as an eBPF program; `rx queues=2` as two capture engines whose
/// copies are folded into the user's nodes): live captures on a veth pair into a network
/// namespace, 200 UDP datagrams sent. Each run's counters add up by the same property as
/// the corpus's, its table lists the nodes the pipeline names (no `rx@2001`, `bpf~2`,
/// `bpf~join`), and the filters in the kernel count what the same filter counts in user
/// space. Needs root (network namespaces, AF_PACKET): without it the test fails saying so.
#[test]
fn kernel_placements_add_up_and_count_as_in_user_space() {
    use std::process::Stdio;
    let v = kernel::netns::Veth::new("pk")
        .unwrap_or_else(|e| panic!("kernel placements need a veth pair (root): {e}"));
    let dev = &v.here;
    let cases: [(String, &[&str], Option<u64>); 4] = [
        (
            format!("rx dev={dev} | bpf \"udp\" | count"),
            &["bpf", "count", "rx"],
            Some(200),
        ),
        (
            format!("rx dev={dev} | bpf \"udp\" placed=user | count"),
            &["bpf", "count", "rx"],
            Some(200),
        ),
        (
            format!("rx dev={dev} queues=2 | bpf \"udp\" | count"),
            &["bpf", "count", "rx"],
            Some(200),
        ),
        (
            format!("rx dev={dev} | bytecount | count"),
            &["bytecount", "count", "rx"],
            None,
        ),
    ];
    let runs: Vec<(String, PathBuf, std::process::Child)> = cases
        .iter()
        .enumerate()
        .map(|(i, (t, _, _))| {
            let stats = dir().join(format!("kernel-{i}.stats.json"));
            let c = Command::new(BIN)
                .args(["run", "-q", "--no-share", "--plan", "none", "--stats"])
                .arg(&stats)
                .arg(t)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            common::wait_capturing(c.id(), dev);
            (t.clone(), stats, c)
        })
        .collect();
    // The peer's address resolved first, so no datagram waits on ARP (or is dropped there).
    let ping = Command::new("ping")
        .args(["-c", "1", "-W", "5", &v.peer_ip])
        .output()
        .unwrap();
    assert!(ping.status.success(), "ping {}: {:?}", v.peer_ip, ping);
    for _ in 0..200 {
        let s = std::net::UdpSocket::bind(format!("{}:0", v.here_ip)).unwrap();
        s.send_to(b"streamline", format!("{}:9", v.peer_ip))
            .unwrap();
    }
    // Each run stopped once its count has the 200 datagrams.
    for (text, stats, _) in &runs {
        common::wait_until(
            &format!("`{text}`'s count to get the 200 datagrams"),
            std::time::Duration::from_secs(60),
            || match common::stats_counter(stats, "count", "blocks_in") {
                Some(n) if n >= 200 => Ok(()),
                n => Err(format!("count has {n:?}")),
            },
        );
    }
    let mut bad = Vec::new();
    for ((text, stats, c), (_, names, want)) in runs.into_iter().zip(&cases) {
        let _ = Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status();
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let json = std::fs::read_to_string(&stats)
            .unwrap_or_else(|e| panic!("{text}: no --stats ({e}):\n{err}"));
        let _ = std::fs::remove_file(&stats);
        if let Err(v) = counters_add_up(&json) {
            bad.push(format!(
                "{text}: the counters do not add up:\n  {}",
                v.join("\n  ")
            ));
        }
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let mut labels: Vec<&str> = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n["label"].as_str())
            .collect();
        labels.sort();
        if labels != *names {
            bad.push(format!("{text}: the table lists {labels:?}, not {names:?}"));
        }
        let n = common::count_of(&err);
        match want {
            Some(w) if n != *w => bad.push(format!("{text}: count {n}, not {w}:\n{err}")),
            None if n < 200 => bad.push(format!("{text}: count {n} of at least 200:\n{err}")),
            _ => {}
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

mod common;
