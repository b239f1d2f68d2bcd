//! Real captures of the link types users meet, read and filtered by the `streamline`
//! binary exactly as tcpdump (libpcap) reads and filters the same files.
//!
//! The traffic is examples/sample.pcap replayed by tcpreplay out of a veth end inside a
//! network namespace this test creates; tcpdump records it there as users do: `-i any`
//! (Linux cooked v1 with `-y LINUX_SLL`, v2 with `-y LINUX_SLL2`), on the interface with a
//! snap length (`-s 96`, and `-i any -s 80`), and whole. tcprewrite (tcpreplay's editor)
//! tags the Ethernet capture with one and two VLAN tags; a small writer here turns it into
//! raw IP (LINKTYPE_RAW, IPV4, IPV6) and BSD loopback (NULL, LOOP) captures, which Linux
//! does not record. For each file, `pcapin` reads every packet tcpdump reads, each native
//! protocol filter counts what its pcap-filter equivalent counts, and `bpf "EXPR"` counts
//! what `tcpdump -r FILE EXPR` counts. Needs root (CI is root), tcpdump and tcpreplay;
//! without them the test fails saying what is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kernel::netns::Veth;

mod common;
use common::count_of;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn sample() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../examples/sample.pcap"
    ))
}

/// Packets in the sample (each tcpdump stops after this many).
const SAMPLE_PACKETS: usize = 5247;

/// tcpdump recording in `v`'s namespace with `args`, to `out`: started, and returned once
/// it says it is listening.
fn record(v: &Veth, args: &[&str], out: &Path) -> std::process::Child {
    let mut cmd = v.command("tcpdump");
    cmd.args(["-c", &SAMPLE_PACKETS.to_string(), "-w"])
        .arg(out)
        .args(args)
        .stdout(Stdio::null());
    common::tcpdump_listening(cmd).0
}

/// Wait for a recording tcpdump to end (it stops by itself after the sample's count);
/// interrupted after 30 s if frames were lost on the way, so the test cannot hang.
fn finish(mut c: std::process::Child) {
    let until = Instant::now() + Duration::from_secs(30);
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let _ = c.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What `tcpdump -r FILE EXPR` prints, in lines; 0 when libpcap refuses the expression for
/// the file's link type as one that rejects every packet (`ip6` on raw IPv4).
fn tcpdump_count(file: &Path, expr: &str) -> u64 {
    let out = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(file)
        .arg(expr)
        .output()
        .expect("tcpdump");
    if String::from_utf8_lossy(&out.stderr).contains("expression rejects all packets") {
        return 0;
    }
    assert!(
        out.status.success(),
        "tcpdump -r {} '{expr}' failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().count() as u64
}

fn streamline_count(pipeline: &str) -> u64 {
    let out = Command::new(BIN)
        .args(["run", "-q", pipeline])
        .output()
        .expect("run streamline");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "streamline run '{pipeline}' failed:\n{err}"
    );
    // The one warning allowed: libpcap's refusal of a `bpf` expression for the link type.
    assert!(
        err.lines()
            .filter(|l| l.contains("warning"))
            .all(|l| l.contains("expression rejects all packets")),
        "streamline run '{pipeline}' warned:\n{err}"
    );
    count_of(&err)
}

/// The link type a capture file's header names.
fn link_of(file: &Path) -> u32 {
    let b = std::fs::read(file).unwrap();
    u32::from_le_bytes(b[20..24].try_into().unwrap())
}

/// The packets of an Ethernet capture rewritten for another link type: IP packets only,
/// their Ethernet header replaced by `head(ethertype)` (None: leave the packet out).
fn convert(from: &Path, to: &Path, link: u32, head: impl Fn(u16) -> Option<Vec<u8>>) -> usize {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
    let mut r = PcapReader::new(std::fs::File::open(from).unwrap()).unwrap();
    let header = PcapHeader {
        datalink: pcap_file::DataLink::from(link),
        ..r.header()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(to).unwrap(), header).unwrap();
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        if p.data.len() < 14 {
            continue;
        }
        let et = u16::from_be_bytes([p.data[12], p.data[13]]);
        let Some(h) = head(et) else { continue };
        let data = [&h[..], &p.data[14..]].concat();
        let orig_len = p.orig_len - 14 + h.len() as u32;
        w.write_packet(&PcapPacket::new_owned(p.timestamp, orig_len, data))
            .unwrap();
        n += 1;
    }
    n
}

// Over 150 lines: the captures of every link type made first (recorded by tcpdump,
// rewritten by tcprewrite, converted here), then each read and filtered against tcpdump.
#[test]
fn real_captures_of_every_link_type_read_and_filter_as_tcpdump_does() {
    let v = Veth::new("lt").unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("sl-linktypes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = |name: &str| dir.join(name);

    // Recorded by tcpdump while tcpreplay sends the sample out of the namespace's end.
    let recordings = [
        ("sll.pcap", vec!["-i", "any", "-y", "LINUX_SLL"]),
        ("sll2.pcap", vec!["-i", "any", "-y", "LINUX_SLL2"]),
        (
            "sll-s80.pcap",
            vec!["-i", "any", "-y", "LINUX_SLL", "-s", "80"],
        ),
        ("eth-s96.pcap", vec!["-i", &v.there, "-s", "96"]),
        ("eth.pcap", vec!["-i", &v.there]),
    ];
    let running: Vec<_> = recordings
        .iter()
        .map(|(name, args)| record(&v, args, &f(name)))
        .collect();
    let replay = v
        .command("tcpreplay")
        .args(["-q", "-i", &v.there, "--topspeed"])
        .arg(sample())
        .output()
        .unwrap_or_else(|e| panic!("cannot run tcpreplay (apt-get install tcpreplay): {e}"));
    assert!(
        replay.status.success(),
        "tcpreplay failed: {}",
        String::from_utf8_lossy(&replay.stderr)
    );
    running.into_iter().for_each(finish);

    // Tagged by tcprewrite: one VLAN tag, then a second one outside it.
    let tag = |from: &str, to: &str, id: &str| {
        let o = Command::new("tcprewrite")
            .args([
                "--enet-vlan=add",
                &format!("--enet-vlan-tag={id}"),
                "--enet-vlan-pri=0",
                "--enet-vlan-cfi=0",
                "-i",
            ])
            .arg(f(from))
            .arg("-o")
            .arg(f(to))
            .output()
            .unwrap_or_else(|e| panic!("cannot run tcprewrite (apt-get install tcpreplay): {e}"));
        assert!(
            o.status.success(),
            "tcprewrite failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    tag("eth.pcap", "vlan.pcap", "10");
    tag("vlan.pcap", "qinq.pcap", "20");

    // Converted here: the link types Linux does not record.
    let ip = |et: u16| matches!(et, 0x0800 | 0x86dd);
    assert!(
        convert(&f("eth.pcap"), &f("raw.pcap"), 101, |et| ip(et)
            .then(Vec::new))
            > 0
    );
    convert(&f("eth.pcap"), &f("ipv4.pcap"), 228, |et| {
        (et == 0x0800).then(Vec::new)
    });
    convert(&f("eth.pcap"), &f("ipv6.pcap"), 229, |et| {
        (et == 0x86dd).then(Vec::new)
    });
    convert(&f("eth.pcap"), &f("null.pcap"), 0, |et| {
        ip(et).then(|| {
            (if et == 0x0800 { 2u32 } else { 24 })
                .to_le_bytes()
                .to_vec()
        })
    });
    convert(&f("eth.pcap"), &f("loop.pcap"), 108, |et| {
        ip(et).then(|| {
            (if et == 0x0800 { 2u32 } else { 30 })
                .to_be_bytes()
                .to_vec()
        })
    });

    // (file, its link type, the pcap-filter prefix that looks through its VLAN tags)
    let files = [
        ("sll.pcap", 113, ""),
        ("sll2.pcap", 276, ""),
        ("sll-s80.pcap", 113, ""),
        ("eth-s96.pcap", 1, ""),
        ("eth.pcap", 1, ""),
        ("vlan.pcap", 1, "vlan and "),
        ("qinq.pcap", 1, "vlan and vlan and "),
        ("raw.pcap", 101, ""),
        ("ipv4.pcap", 228, ""),
        ("ipv6.pcap", 229, ""),
        ("null.pcap", 0, ""),
        ("loop.pcap", 108, ""),
    ];
    // Native filter (as it stands before `count`) and its pcap-filter equivalent.
    let natives = [
        ("", ""),
        ("ip |4", "ip"),
        ("ip |6", "ip6"),
        ("tcp |", "tcp"),
        ("udp |", "udp"),
        ("icmp |1", "icmp"),
        ("icmp |2", "icmp6"),
        ("tcp | dport |80", "tcp dst port 80"),
        ("udp | sport |53", "udp src port 53"),
        ("dport |1:1023", "(tcp or udp) and dst portrange 1-1023"),
        ("proto |17", "udp"),
        ("eth 0800 |", "ether proto 0x0800"),
    ];
    let bpfs = [
        "tcp dst port 80",
        "udp port 53 or icmp6",
        "tcp[tcpflags] & tcp-syn != 0",
        "greater 1000",
        "ip6 and tcp",
        "ip and not tcp",
    ];
    let mut compared = 0;
    for (name, link, vlan) in files {
        let file = f(name);
        assert_eq!(
            link_of(&file),
            link,
            "{name}: not the link type this test expects"
        );
        let all = tcpdump_count(&file, "");
        assert!(all > 1000, "{name}: tcpdump reads only {all} packets");
        for (middle, expr) in natives {
            let theirs = tcpdump_count(
                &file,
                &if expr.is_empty() {
                    String::new()
                } else {
                    format!("{vlan}({expr})")
                },
            );
            let ours = streamline_count(
                &format!("pcapin file={} | {middle} count", file.display())
                    .replace("|  count", "| count"),
            );
            assert_eq!(
                ours, theirs,
                "{name}: '{middle}' counted {ours}, tcpdump '{vlan}({expr})' {theirs}"
            );
            compared += 1;
        }
        // The capture has every kind of packet the comparisons are about.
        for kind in ["tcp", "udp", "ip6"] {
            let expr = format!("{vlan}({kind})");
            if !(name == "ipv4.pcap" && kind == "ip6" || name == "ipv6.pcap" && kind == "tcp") {
                assert!(
                    tcpdump_count(&file, &expr) > 0,
                    "{name} has no {kind} packets"
                );
            }
        }
        for expr in bpfs {
            let theirs = tcpdump_count(&file, expr);
            let ours = streamline_count(&format!(
                "pcapin file={} | bpf \"{expr}\" | count",
                file.display()
            ));
            assert_eq!(
                ours, theirs,
                "{name}: bpf \"{expr}\" counted {ours}, tcpdump {theirs}"
            );
            compared += 1;
        }
    }
    assert_eq!(compared, files.len() * (natives.len() + bpfs.len()));
    let _ = std::fs::remove_dir_all(&dir);
}
