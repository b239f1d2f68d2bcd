//! `ipfix` and `ipfixin` against real flow tools:
//!
//! - a real collector reads our export: `nfcapd` (Debian nfdump) collects what
//!   `pcapin file=X | ipfix to=...` sends, `nfdump` lists it, and the flows (5-tuple,
//!   packets, bytes, first and last seen, TCP flags) equal, flow for flow, those of
//!   `softflowd -r X` with the same timeouts collected by a second nfcapd; on
//!   examples/sample.pcap and on captures the test makes from a seed (TCP connections
//!   closed by FIN or RST, UDP, ICMP and ICMPv6, IPv4 and IPv6, VLAN tags);
//! - Wireshark's IPFIX dissector (`tshark -d udp.port==P,cflow`) finds no malformed packet
//!   in a capture of the export, and as many data records as we sent;
//! - a full table (`flows=N`) exports the flows it evicts and counts them: per
//!   conversation the records add up to softflowd's, and the summary's count is the
//!   number of flows exported with the end reason lackOfResources;
//! - over TCP the collector receives the same bytes as `out=` writes;
//! - `ipfixin` collects softflowd's export: its records equal nfdump's view of the same
//!   export;
//! - NetFlow v9 (`version=9`): nfdump lists the same flows from our v9 export as from our
//!   IPFIX export of the same capture, tshark dissects it without a malformed packet, and
//!   `ipfixin` reads from it the records it reads from the IPFIX export.
//!
//! softflowd reading a file never ends a flow by time (its timeouts run on the clock,
//! and it skips them for files), so the comparisons use timeouts longer than the
//! captures; the timeouts themselves are tested in `filters::flows::cache`.
//!
//! Needs nfdump, softflowd, tshark and tcpdump (scripts/setup installs them); without one
//! the test fails naming it.

mod common;

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapPacket, PcapWriter};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");
/// nfdump's line for a flow: first and last seen (ms), 5-tuple (ICMP: type.code as the
/// port), packets, bytes, TCP flags.
const FMT: &str = "fmt:%ts %te %sa %sp %da %dp %pr %pkt %byt %flg";
/// Timeouts longer than any capture here, for both exporters.
const OURS_LONG: &str = "idle=3600 active=604800 fin=300";
const SOFTFLOWD_LONG: &[&str] = &[
    "-t",
    "tcp=3600",
    "-t",
    "udp=3600",
    "-t",
    "icmp=3600",
    "-t",
    "general=3600",
    "-t",
    "tcp.fin=300",
    "-t",
    "tcp.rst=300",
    "-t",
    "maxlife=604800",
];

fn need(tool: &str, arg: &str) {
    let ok = Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        ok,
        "this test needs {tool} (scripts/setup installs it: apt-get install {})",
        match tool {
            "nfcapd" | "nfdump" => "nfdump",
            t => t,
        }
    );
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sl-flows-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn free_port(udp: bool) -> u16 {
    if udp {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    } else {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}

/// A child that is ended however the test ends.
struct Proc(Option<Child>);

impl Proc {
    fn stop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A real IPFIX collector: nfcapd on a port of 127.0.0.1, writing into a directory of its
/// own.
struct Nfcapd {
    proc: Proc,
    dir: PathBuf,
    port: u16,
}

impl Nfcapd {
    fn start(name: &str) -> Nfcapd {
        need("nfcapd", "-V");
        need("nfdump", "-V");
        let dir = dir(&format!("nfcapd-{name}"));
        let port = free_port(true);
        let c = Command::new("nfcapd")
            .args([
                "-l",
                dir.to_str().unwrap(),
                "-p",
                &port.to_string(),
                "-b",
                "127.0.0.1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nfcapd (apt-get install nfdump)");
        let pid = c.id();
        let n = Nfcapd {
            proc: Proc(Some(c)),
            dir,
            port,
        };
        common::wait_listening(pid, port, true);
        n
    }

    fn to(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Ends the collector (it writes its file) and lists the flows it collected, one line
    /// each, sorted.
    fn flows(mut self) -> Vec<String> {
        // Let the last datagrams in before nfcapd closes its file.
        std::thread::sleep(Duration::from_millis(300));
        self.proc.stop();
        let o = Command::new("nfdump")
            .args(["-R", self.dir.to_str().unwrap(), "-q", "-N", "-o", FMT])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "nfdump: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut lines: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|l| !l.is_empty())
            .collect();
        lines.sort();
        let _ = std::fs::remove_dir_all(&self.dir);
        lines
    }
}

/// `streamline run PIPELINE`; its stderr (the summary lines), failing on a failed run.
fn run(pipeline: &str) -> String {
    let o = Command::new(BIN).args(["run", pipeline]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{pipeline}\n{err}");
    err
}

fn summary<'a>(err: &'a str, filter: &str) -> &'a str {
    err.lines()
        .find_map(|l| l.find(&format!("{filter}: ")).map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("no {filter} summary:\n{err}"))
}

/// The number before `word` in a summary line (`4 flows evicted` -> 4 for "flows evicted").
fn number_before(line: &str, word: &str) -> u64 {
    let at = line
        .find(word)
        .unwrap_or_else(|| panic!("no '{word}' in {line}"));
    line[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.trim_start_matches('(').parse().ok())
        .unwrap_or_else(|| panic!("no number before '{word}' in {line}"))
}

/// softflowd's flows of `pcap` as nfcapd collects them (IPFIX, absolute milliseconds).
fn softflowd(pcap: &Path, name: &str, extra: &[&str]) -> Vec<String> {
    need("softflowd", "-h");
    let col = Nfcapd::start(&format!("sfd-{name}"));
    let o = Command::new("softflowd")
        .args([
            "-r",
            pcap.to_str().unwrap(),
            "-n",
            &col.to(),
            "-v",
            "10",
            "-A",
            "milli",
            "-d",
        ])
        // No `-c`: softflowd 1.1 reading a file has no control socket (`-r` turns it off), and
        // a `-c` after `-r` turns it back on while the poll array it tests is never filled
        // for files, so it may block in accept() on stack garbage. No `-p`: no pid file
        // without forking.
        .args(SOFTFLOWD_LONG)
        .args(extra)
        .output()
        .expect("softflowd (apt-get install softflowd)");
    assert!(
        o.status.success(),
        "softflowd: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    col.flows()
}

/// Our flows of `pcap` as nfcapd collects them, and the run's stderr.
fn ours(pcap: &Path, name: &str, opts: &str) -> (Vec<String>, String) {
    let col = Nfcapd::start(&format!("ours-{name}"));
    let err = run(&format!(
        "pcapin file={} | ipfix to={} {opts} | null",
        pcap.display(),
        col.to()
    ));
    (col.flows(), err)
}

/// softflowd 1.1 stops at an IPv6 fragment header of a later fragment before reading its
/// next header, so it reports those fragments with protocol 0; we report the protocol the
/// fragment header names (as RFC 7012 protocolIdentifier says). The one normalisation:
/// such a line of softflowd's (IPv6, ports 0, protocol 0) matched against ours with the
/// protocol in place of the 0.
fn align_ipv6_later_fragments(softflowd: &mut [String], ours: &[String]) {
    for l in softflowd.iter_mut() {
        let f: Vec<&str> = l.split(' ').collect();
        // date time date time sa sp da dp pr pkt byt flg
        if f.len() == 12 && f[4].contains(':') && f[5] == "0" && f[7] == "0" && f[8] == "0" {
            if let Some(m) = ours.iter().find(|o| {
                let g: Vec<&str> = o.split(' ').collect();
                // nfdump prints an ICMP flow's port as type.code: 0.0 for fragments without
                // the ICMP header.
                let port_same = g[7] == f[7] || (g[8] == "58" || g[8] == "1") && g[7] == "0.0";
                g.len() == 12 && g[..7] == f[..7] && port_same && g[9..] == f[9..]
            }) {
                *l = m.clone();
            }
        }
    }
    softflowd.sort();
}

fn assert_same_flows(name: &str, mut theirs: Vec<String>, ours: Vec<String>) {
    align_ipv6_later_fragments(&mut theirs, &ours);
    if theirs != ours {
        let only_theirs: Vec<_> = theirs.iter().filter(|l| !ours.contains(l)).collect();
        let only_ours: Vec<_> = ours.iter().filter(|l| !theirs.contains(l)).collect();
        panic!(
            "{name}: {} flows from softflowd, {} from ipfix\nonly softflowd's:\n{}\nonly ours:\n{}",
            theirs.len(),
            ours.len(),
            only_theirs
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            only_ours
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert!(!ours.is_empty(), "{name}: no flows at all");
}

// ---------------------------------------------------------------------------------------
// Captures made from a seed.

use common::rng::Rng;

/// One conversation's frames, each with its offset from the conversation's start (µs).
type Frames = Vec<(u64, Vec<u8>)>;

#[derive(Clone, Copy)]
enum Ip {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

fn base(
    ip: Ip,
    forward: bool,
    vlan: Option<u16>,
) -> etherparse::PacketBuilderStep<etherparse::IpHeaders> {
    let (sm, dm) = if forward {
        ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
    } else {
        ([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
    };
    let e = PacketBuilder::ethernet2(sm, dm);
    let vl = |e: etherparse::PacketBuilderStep<etherparse::Ethernet2Header>| match vlan {
        Some(v) => Err(e.single_vlan(etherparse::VlanId::try_new(v).unwrap())),
        None => Ok(e),
    };
    match (ip, vl(e)) {
        (Ip::V4(a, b), Ok(e)) => {
            if forward {
                e.ipv4(a, b, 64)
            } else {
                e.ipv4(b, a, 64)
            }
        }
        (Ip::V4(a, b), Err(v)) => {
            if forward {
                v.ipv4(a, b, 64)
            } else {
                v.ipv4(b, a, 64)
            }
        }
        (Ip::V6(a, b), Ok(e)) => {
            if forward {
                e.ipv6(a, b, 64)
            } else {
                e.ipv6(b, a, 64)
            }
        }
        (Ip::V6(a, b), Err(v)) => {
            if forward {
                v.ipv6(a, b, 64)
            } else {
                v.ipv6(b, a, 64)
            }
        }
    }
}

fn addr(r: &mut Rng, v6: bool) -> (Ip, bool) {
    if v6 {
        let mut a = [0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut b = a;
        a[15] = 1 + r.below(20) as u8;
        b[15] = 100 + r.below(20) as u8;
        (Ip::V6(a, b), true)
    } else {
        (
            Ip::V4(
                [10, 7, 0, 1 + r.below(20) as u8],
                [10, 7, 1, 1 + r.below(20) as u8],
            ),
            false,
        )
    }
}

/// A TCP connection: handshake, data both ways, then FIN both ways, an RST, or nothing.
fn tcp_conn(r: &mut Rng, ip: Ip, vlan: Option<u16>) -> Frames {
    let (cp, sp) = (
        1024 + r.below(60000) as u16,
        [80, 443, 22, 8080][r.below(4) as usize],
    );
    let mut t = 0;
    let mut out = Frames::new();
    let (mut cs, mut ss) = (r.next() as u32, r.next() as u32);
    let seg = |r: &mut Rng,
               fwd: bool,
               flags: &str,
               len: usize,
               cs: &mut u32,
               ss: &mut u32,
               out: &mut Frames,
               t: &mut u64| {
        let (s, a, from, to) = if fwd {
            (*cs, *ss, cp, sp)
        } else {
            (*ss, *cs, sp, cp)
        };
        let mut b = base(ip, fwd, vlan).tcp(from, to, s, 65535);
        for c in flags.chars() {
            b = match c {
                'S' => b.syn(),
                'A' => b.ack(a),
                'F' => b.fin(),
                'R' => b.rst(),
                'P' => b.psh(),
                _ => b,
            };
        }
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut v = Vec::new();
        b.write(&mut v, &payload).unwrap();
        let adv = len as u32 + u32::from(flags.contains('S') || flags.contains('F'));
        if fwd {
            *cs = cs.wrapping_add(adv)
        } else {
            *ss = ss.wrapping_add(adv)
        }
        *t += 1 + r.below(40_000);
        out.push((*t, v));
    };
    seg(r, true, "S", 0, &mut cs, &mut ss, &mut out, &mut t);
    seg(r, false, "SA", 0, &mut cs, &mut ss, &mut out, &mut t);
    seg(r, true, "A", 0, &mut cs, &mut ss, &mut out, &mut t);
    for _ in 0..r.below(8) {
        let fwd = r.below(2) == 0;
        let len = 1 + r.below(1400) as usize;
        seg(r, fwd, "PA", len, &mut cs, &mut ss, &mut out, &mut t);
        seg(r, !fwd, "A", 0, &mut cs, &mut ss, &mut out, &mut t);
    }
    match r.below(3) {
        0 => {
            seg(r, true, "FA", 0, &mut cs, &mut ss, &mut out, &mut t);
            seg(r, false, "FA", 0, &mut cs, &mut ss, &mut out, &mut t);
            seg(r, true, "A", 0, &mut cs, &mut ss, &mut out, &mut t);
        }
        1 => {
            let fwd = r.below(2) == 0;
            seg(r, fwd, "R", 0, &mut cs, &mut ss, &mut out, &mut t)
        }
        _ => {}
    }
    out
}

/// UDP requests, some answered.
fn udp_conv(r: &mut Rng, ip: Ip, vlan: Option<u16>) -> Frames {
    let (cp, sp) = (
        1024 + r.below(60000) as u16,
        [53, 123, 5353, 4789][r.below(4) as usize],
    );
    let mut out = Frames::new();
    let mut t = 0;
    for _ in 0..1 + r.below(4) {
        for fwd in [true, r.below(3) != 0] {
            let (a, b) = if fwd { (cp, sp) } else { (sp, cp) };
            let mut v = Vec::new();
            base(ip, fwd, vlan)
                .udp(a, b)
                .write(&mut v, &vec![7; 10 + r.below(500) as usize])
                .unwrap();
            t += 1 + r.below(30_000);
            out.push((t, v));
        }
    }
    out
}

/// Echo requests and replies (ICMP or ICMPv6).
fn ping(r: &mut Rng, ip: Ip) -> Frames {
    let id = r.next() as u16;
    let mut out = Frames::new();
    let mut t = 0;
    for seq in 0..1 + r.below(4) as u16 {
        for fwd in [true, false] {
            let b = base(ip, fwd, None);
            let mut v = Vec::new();
            let payload = [9u8; 56];
            match (ip, fwd) {
                (Ip::V4(..), true) => b.icmpv4_echo_request(id, seq).write(&mut v, &payload),
                (Ip::V4(..), false) => b.icmpv4_echo_reply(id, seq).write(&mut v, &payload),
                (Ip::V6(..), true) => b.icmpv6_echo_request(id, seq).write(&mut v, &payload),
                (Ip::V6(..), false) => b.icmpv6_echo_reply(id, seq).write(&mut v, &payload),
            }
            .unwrap();
            t += 1 + r.below(20_000);
            out.push((t, v));
        }
    }
    out
}

/// A capture of `n` conversations from `seed`, interleaved in time (each starts within
/// 20 s; the whole lasts under a minute).
fn make_capture(path: &Path, seed: u64, n: usize) {
    let mut r = Rng(seed | 1);
    let mut all: Vec<(u64, Vec<u8>)> = Vec::new();
    for _ in 0..n {
        let start = r.below(20_000_000);
        let v6 = r.below(3) == 0;
        let (ip, v6) = addr(&mut r, v6);
        let vlan = (r.below(5) == 0).then(|| 1 + r.below(4000) as u16);
        let frames = match r.below(10) {
            0..=5 => tcp_conn(&mut r, ip, vlan),
            6..=8 => udp_conv(&mut r, ip, vlan),
            _ => ping(&mut r, ip),
        };
        let _ = v6;
        all.extend(frames.into_iter().map(|(t, f)| (start + t, f)));
    }
    all.sort_by_key(|(t, _)| *t);
    let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    let epoch = 1_790_000_000_000_000u64 + seed % 1_000_000 * 1_000_000;
    for (t, f) in &all {
        let us = epoch + t;
        let ts = Duration::from_micros(us);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .unwrap();
    }
}

fn seeds() -> Vec<u64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    vec![0x5eed_f10e, now ^ 0x9e37_79b9_7f4a_7c15]
}

// ---------------------------------------------------------------------------------------

#[test]
fn our_flows_equal_softflowds_at_a_real_collector_on_the_sample() {
    let p = Path::new(SAMPLE);
    let theirs = softflowd(p, "sample", &[]);
    let (mine, err) = ours(p, "sample", OURS_LONG);
    assert_same_flows("examples/sample.pcap", theirs, mine.clone());
    let s = summary(&err, "ipfix");
    assert_eq!(number_before(s, "flows evicted"), 0, "{s}");
}

#[test]
fn our_flows_equal_softflowds_at_a_real_collector_on_generated_captures() {
    let d = dir("generated");
    for seed in seeds() {
        let pcap = d.join(format!("gen-{seed:x}.pcap"));
        make_capture(&pcap, seed, 150);
        let theirs = softflowd(&pcap, &format!("{seed:x}"), &[]);
        let (mine, _) = ours(&pcap, &format!("{seed:x}"), OURS_LONG);
        assert_same_flows(
            &format!("seed {seed:#x} ({})", pcap.display()),
            theirs,
            mine,
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// NetFlow v9 carries the same flows as IPFIX: nfcapd collects both exports of a capture,
/// and nfdump lists the same flows (5-tuple, packets, bytes, first and last seen to the
/// millisecond, flags); with long timeouts (everything ends at the end) and short ones
/// (flows end all through the capture, the messages' header times vary).
#[test]
fn netflow_v9_flows_equal_ipfix_flows_at_a_real_collector() {
    let d = dir("v9");
    let mut captures = vec![PathBuf::from(SAMPLE)];
    for seed in seeds() {
        let pcap = d.join(format!("gen-{seed:x}.pcap"));
        make_capture(&pcap, seed, 150);
        captures.push(pcap);
    }
    for (i, pcap) in captures.iter().enumerate() {
        for timeouts in [OURS_LONG, "idle=1 active=5 fin=1 refresh=1"] {
            let (ipfix, _) = ours(pcap, &format!("ipfix-{i}"), timeouts);
            let (v9, err) = ours(pcap, &format!("v9-{i}"), &format!("{timeouts} version=9"));
            assert!(!ipfix.is_empty(), "{}: no flows", pcap.display());
            if ipfix != v9 {
                let only = |a: &[String], b: &[String]| -> String {
                    a.iter()
                        .filter(|l| !b.contains(l))
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                panic!(
                    "{} ({timeouts}): {} flows as IPFIX, {} as v9\nonly IPFIX:\n{}\nonly v9:\n{}\n{}",
                    pcap.display(),
                    ipfix.len(),
                    v9.len(),
                    only(&ipfix, &v9),
                    only(&v9, &ipfix),
                    summary(&err, "ipfix")
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn wiresharks_ipfix_dissector_finds_nothing_malformed_and_every_record() {
    let versions = dissected_export("tshark", "");
    assert!(versions.iter().all(|v| v == "10"), "versions {versions:?}");
}

#[test]
fn wiresharks_dissector_reads_netflow_v9_as_well() {
    let versions = dissected_export("tshark-v9", "version=9");
    assert!(versions.iter().all(|v| v == "9"), "versions {versions:?}");
}

/// The export (`ipfix` with `extra` parameters) of a generated capture to nfcapd, as
/// tcpdump captures it on the way: tshark's cflow dissector finds nothing malformed, every
/// data record and several template sets. Returns the version of each message, as tshark
/// reads it.
fn dissected_export(name: &str, extra: &str) -> Vec<String> {
    need("tshark", "--version");
    need("tcpdump", "--version");
    let d = dir(name);
    let pcap = d.join("gen.pcap");
    make_capture(&pcap, 0x7357_ab1e, 120);
    let col = Nfcapd::start(name);
    let cap = d.join("export.pcap");
    let mut tcpdump = Command::new("tcpdump");
    // --immediate-mode: each datagram handed over at once (TPACKET_V3 otherwise holds a
    // block up to its 1 s timeout, and the stop below would end tcpdump before it). In
    // that mode libpcap's ring has a slot of the snapshot length per frame: 8 slots in its
    // 2 MiB at the default 256 KiB, and the run's burst of datagrams overflowed them
    // ("26 packets dropped by kernel"). A snapshot length the messages fit (mtu=600) and a
    // bigger buffer, as a competent user would set them.
    tcpdump.args([
        "-i",
        "lo",
        "-U",
        "--immediate-mode",
        "-s",
        "2048",
        "-B",
        "16384",
        "-w",
        cap.to_str().unwrap(),
        "udp",
        "port",
        &col.port.to_string(),
    ]);
    let (td, said) = common::tcpdump_listening(tcpdump);
    let mut td = Proc(Some(td));
    // Templates every second of stream time: several template sets in the export (short
    // timeouts, so flows are exported all through the capture's 20 s, not all at its end).
    let err = run(&format!(
        "pcapin file={} | ipfix to={} idle=1 active=5 fin=1 refresh=1 mtu=600 {extra} | null",
        pcap.display(),
        col.to()
    ));
    // tcpdump writes each datagram as it reads it (-U): stop it once the file holds every
    // message the run sent (a busy machine can keep it behind for a while).
    let sent = number_before(summary(&err, "ipfix"), "messages");
    let in_file = || -> u64 {
        let Ok(f) = std::fs::File::open(&cap) else {
            return 0;
        };
        let Ok(mut r) = pcap_file::pcap::PcapReader::new(f) else {
            return 0;
        };
        let mut n = 0;
        while let Some(Ok(_)) = r.next_packet() {
            n += 1;
        }
        n
    };
    let waited = std::time::Instant::now();
    while in_file() < sent && waited.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    td.stop();
    let said = said.join().unwrap_or_default();
    assert_eq!(
        in_file(),
        sent,
        "tcpdump captured {} of the {sent} messages sent ({}); tcpdump: {said}",
        in_file(),
        summary(&err, "ipfix")
    );
    let decode = format!("udp.port=={},cflow", col.port);
    let flows = col.flows();
    let s = summary(&err, "ipfix");
    let records = number_before(s, "records in");
    let templates = number_before(s, "template sets");
    assert_eq!(
        flows.len() as u64,
        records,
        "nfcapd has {} flows, we sent {records} records",
        flows.len()
    );
    assert!(templates > 1, "one template set only: {s}");
    let tshark = |filter: &str, field: &str| -> Vec<String> {
        let o = Command::new("tshark")
            .args([
                "-r",
                cap.to_str().unwrap(),
                "-d",
                &decode,
                "-Y",
                filter,
                "-T",
                "fields",
                "-e",
                field,
            ])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect()
    };
    let malformed = tshark(
        "_ws.malformed || _ws.expert.severity >= \"error\"",
        "frame.number",
    );
    assert!(
        malformed.is_empty(),
        "tshark finds malformed or erroneous frames: {malformed:?}"
    );
    // Every data record dissected: one protocol value per record.
    let protos: usize = tshark("cflow", "cflow.protocol")
        .iter()
        .map(|l| l.split(',').count())
        .sum();
    assert_eq!(
        protos as u64, records,
        "tshark dissects {protos} data records, we sent {records}"
    );
    let sets: usize = tshark("cflow", "cflow.template_id")
        .iter()
        .map(|l| l.split(',').count())
        .sum();
    assert!(
        sets as u64 >= 2 * templates,
        "tshark sees {sets} templates for {templates} template sets"
    );
    let versions = tshark("cflow", "cflow.version");
    assert_eq!(
        versions.len() as u64,
        sent,
        "tshark reads {} of {sent} messages",
        versions.len()
    );
    let _ = std::fs::remove_dir_all(&d);
    versions
}

/// Records of a message stream (a file written with `out=`, or what a TCP collector got).
fn decode_stream(bytes: &[u8]) -> Vec<filters::flows::collect::FlowRecord> {
    let mut dec = filters::flows::collect::Decoder::default();
    let mut out = Vec::new();
    let from: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let len = u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
        assert!(
            len >= 16 && at + len <= bytes.len(),
            "a message of {len} bytes at offset {at} of {}",
            bytes.len()
        );
        dec.decode(&bytes[at..at + len], from, &mut out);
        assert!(
            dec.error.is_none(),
            "message at offset {at}: {:?}",
            dec.error
        );
        at += len;
    }
    assert_eq!(at, bytes.len(), "bytes after the last whole message");
    out
}

/// Per conversation (addresses, ports, protocol): packets and bytes, summed over its
/// records.
fn per_conversation(flows: &[String]) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    for l in flows {
        let f: Vec<&str> = l.split(' ').collect();
        let e = m.entry(f[4..9].join(" ")).or_insert((0, 0));
        e.0 += f[9].parse::<u64>().unwrap();
        e.1 += f[10].parse::<u64>().unwrap();
    }
    m
}

#[test]
fn a_full_table_exports_what_it_evicts_and_counts_it() {
    let d = dir("full");
    let p = Path::new(SAMPLE);
    let file = d.join("flows.ipfix");
    let col = Nfcapd::start("full");
    let err = run(&format!(
        "pcapin file={} | ipfix to={} out={} {OURS_LONG} flows=8 | null",
        p.display(),
        col.to(),
        file.display()
    ));
    let mine = col.flows();
    let theirs = softflowd(p, "full", &[]);
    // Each conversation's records add up to softflowd's single flow of it (softflowd's
    // IPv6 later fragments, protocol 0, matched to ours by addresses and totals).
    let (ours_c, mut theirs_c) = (per_conversation(&mine), per_conversation(&theirs));
    for (k, v) in theirs_c.clone() {
        let f: Vec<&str> = k.split(' ').collect();
        if f[0].contains(':')
            && f[1] == "0"
            && f[3] == "0"
            && f[4] == "0"
            && !ours_c.contains_key(&k)
        {
            if let Some((ok, _)) = ours_c.iter().find(|(ok, ov)| {
                **ov == v && ok.starts_with(&f[..4].join(" ")) && !theirs_c.contains_key(*ok)
            }) {
                theirs_c.remove(&k);
                theirs_c.insert(ok.clone(), v);
            }
        }
    }
    assert_eq!(
        ours_c, theirs_c,
        "packets and bytes per conversation differ"
    );
    assert!(
        mine.len() > theirs.len(),
        "{} records with a full table, {} without: nothing was split",
        mine.len(),
        theirs.len()
    );
    // The summary's count is the number of flows exported as lackOfResources (5): the two
    // directions of one flow are consecutive records, mirrored, with the same times.
    let recs = decode_stream(&std::fs::read(&file).unwrap());
    assert_eq!(
        recs.len(),
        mine.len(),
        "the file and the collector disagree"
    );
    let mut evicted = 0;
    for (i, r) in recs.iter().enumerate() {
        let twin = i > 0
            && {
                let q = &recs[i - 1];
                (q.src == r.dst && q.dst == r.src && q.start_ms == r.start_ms && q.end_ms == r.end_ms && q.end_reason == r.end_reason && q.proto == r.proto)
                // ICMP too: a flow's key holds its type and code, so a request and its
                // reply are two flows, and only a conversation of one type both ways (or
                // of later fragments, ports 0) has two directions.
                && q.sport == r.dport && q.dport == r.sport
            };
        if r.end_reason == 5 && !twin {
            evicted += 1;
        }
    }
    let s = summary(&err, "ipfix");
    assert!(evicted > 0, "no record says lackOfResources: {s}");
    assert_eq!(number_before(s, "flows evicted"), evicted, "{s}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_tcp_collector_gets_the_bytes_out_writes() {
    let d = dir("tcp");
    let file = d.join("flows.ipfix");
    let port = free_port(false);
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let got = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut v).unwrap();
        v
    });
    let err = run(&format!("pcapin file={SAMPLE} | ipfix to=127.0.0.1:{port} transport=tcp out={} idle=2 fin=0.5 | null", file.display()));
    let got = got.join().unwrap();
    let written = std::fs::read(&file).unwrap();
    assert!(!written.is_empty());
    assert_eq!(got, written, "the TCP stream and the file differ");
    let recs = decode_stream(&got);
    let s = summary(&err, "ipfix");
    assert_eq!(recs.len() as u64, number_before(s, "records in"), "{s}");
    // Idle timeouts of 2 s end some flows of the 8-second sample before its end.
    assert!(
        recs.iter().any(|r| r.end_reason == 1),
        "no idle-timeout record"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `ipfixin port=PORT idle=2 | outfile JSON`, listening once this returns.
fn ipfixin(port: u16, json: &Path) -> Proc {
    let c = Command::new(BIN)
        .args([
            "run",
            &format!(
                "ipfixin port={port} bind=127.0.0.1 idle=2 | outfile {}",
                json.display()
            ),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = c.id();
    let run = Proc(Some(c));
    common::wait_listening(pid, port, true);
    run
}

/// `ipfixin` reads our NetFlow v9 export as it reads our IPFIX export of the same capture:
/// the same records (v9 has no end reason: 0), times made absolute from the v9 header.
#[test]
fn ipfixin_reads_our_netflow_v9_as_our_ipfix() {
    let d = dir("ipfixin-v9");
    let json = d.join("flows.json");
    let port = free_port(true);
    let mut listen = ipfixin(port, &json);
    // The domain (v9: source ID) tells the two exports apart.
    let mut sent = 0;
    for (domain, version) in [(1, 10), (2, 9)] {
        let err = run(&format!(
            "pcapin file={SAMPLE} | ipfix to=127.0.0.1:{port} domain={domain} version={version} idle=2 fin=0.5 | null"
        ));
        sent += number_before(summary(&err, "ipfix"), "records in");
    }
    let out = listen.0.take().unwrap().wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ipfixin: {err}");
    let mut by_domain: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for l in std::fs::read_to_string(&json).unwrap().lines() {
        let mut v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        let domain = v["domain"].as_u64().unwrap();
        // IPFIX carries the end reason, v9 does not.
        assert_eq!(v["end_reason"] == 0, domain == 2, "{l}");
        for k in ["exporter", "domain", "end_reason"] {
            v.as_object_mut().unwrap().remove(k);
        }
        by_domain.entry(domain).or_default().push(v.to_string());
    }
    assert_eq!(
        by_domain.values().map(Vec::len).sum::<usize>() as u64,
        sent,
        "ipfixin: {}",
        summary(&err, "ipfixin")
    );
    let mut ipfix = by_domain.remove(&1).unwrap_or_default();
    let mut v9 = by_domain.remove(&2).unwrap_or_default();
    ipfix.sort();
    v9.sort();
    assert!(!ipfix.is_empty());
    assert_eq!(
        ipfix, v9,
        "ipfixin's records of the IPFIX and the v9 export differ"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn ipfixin_collects_softflowds_export_as_nfdump_reads_it() {
    need("softflowd", "-h");
    let d = dir("ipfixin");
    let json = d.join("flows.json");
    let port = free_port(true);
    let col = Nfcapd::start("ipfixin");
    let mut run = ipfixin(port, &json);
    // softflowd exports the same file twice, to our source and to nfcapd (given two `-n`,
    // softflowd 1.1 sends to the last only). Reading a file, its records are the same each
    // time: their times are the packets'. No `-c` (see `softflowd`).
    for to in [format!("127.0.0.1:{port}"), col.to()] {
        let o = Command::new("softflowd")
            .args(["-r", SAMPLE, "-n", &to, "-v", "10", "-A", "milli", "-d"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "softflowd: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let out = run.0.take().unwrap().wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ipfixin: {err}");
    let theirs: Vec<(String, String, u64, u64)> = col
        .flows()
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                format!("{} {} {} {} {}", f[4], f[5], f[6], f[7], f[8]),
                format!("{} {}", f[0], f[1]),
                f[9].parse().unwrap(),
                f[10].parse().unwrap(),
            )
        })
        .map(|(k, t, p, b)| (k, t, p, b))
        .collect();
    let mut mine: Vec<(String, u64, u64)> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            let port = |k: &str| v[k].as_u64().unwrap();
            // nfdump -N prints protocols as numbers.
            let proto = v["proto"].as_u64().unwrap().to_string();
            let dport = if matches!(proto.as_str(), "1" | "58") {
                format!("{}.{}", port("dport") >> 8, port("dport") & 255)
            } else {
                port("dport").to_string()
            };
            (
                format!(
                    "{} {} {} {} {proto}",
                    v["src"].as_str().unwrap(),
                    port("sport"),
                    v["dst"].as_str().unwrap(),
                    dport
                ),
                v["packets"].as_u64().unwrap(),
                v["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    mine.sort();
    let mut theirs_k: Vec<(String, u64, u64)> = theirs
        .iter()
        .map(|(k, _, p, b)| (k.clone(), *p, *b))
        .collect();
    theirs_k.sort();
    assert_eq!(mine, theirs_k, "ipfixin's records and nfdump's differ");
    assert_eq!(
        number_before(summary(&err, "ipfixin"), "records from"),
        mine.len() as u64
    );
    let _ = std::fs::remove_dir_all(&d);
}
