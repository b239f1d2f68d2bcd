//! Live capture on a veth pair into a network namespace this test creates: `rx` counts
//! what tcpdump, capturing the same traffic on the same interface, counts; `bpf` right
//! after `rx` runs in the kernel (the socket's filter) and still counts exactly. Needs
//! root (CI is root): without it the test fails saying so.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kernel::netns::Veth;

mod common;
use common::{
    count_of, pcap_packets, spawn_run_stats, stats_counter, tcpdump_listening, wait_capturing,
    wait_for, wait_until,
};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn sh(args: &[&str]) -> std::process::Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("running {args:?}: {e}"))
}

fn ok(args: &[&str]) {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A veth pair into a namespace this test owns (the shared helper of the kernel crate).
fn veth() -> Veth {
    Veth::new("lv").unwrap_or_else(|e| panic!("{e}"))
}

/// A run with its own capture (no prefix sharing between the runs of one test), its
/// counters in `stats` while it runs (`--stats`: see [`stats_counter`]).
fn start(pipeline: &str, stats: &std::path::Path) -> Child {
    Command::new(BIN)
        .args(["run", "-q", "--no-share", "--stats"])
        .arg(stats)
        .arg(pipeline)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn streamline")
}

/// SIGINT (as Ctrl-C), then the `count:` number and the `rx` summary line.
fn stop(c: Child) -> (u64, String) {
    assert!(Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(130), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("count: "))
        .unwrap_or_else(|| panic!("no count after Ctrl-C:\n{err}"));
    let n = line["count: ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let rx = err
        .lines()
        .find(|l| l.starts_with("rx "))
        .unwrap_or_else(|| panic!("no rx summary:\n{err}"))
        .to_string();
    (n, rx)
}

#[test]
fn live_counts_equal_tcpdump_on_the_same_interface() {
    let v = veth();
    let dir = std::env::temp_dir().join(format!("sl-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("td.pcap");
    let stats = ["all", "kernel", "user"].map(|n| dir.join(format!("{n}.json")));
    let all = start(&format!("rx dev={} | count", v.here), &stats[0]);
    let icmp_kernel = start(
        &format!("rx dev={} | bpf \"icmp\" | count", v.here),
        &stats[1],
    );
    let icmp_user = start(&format!("rx dev={} | icmp 4 | count", v.here), &stats[2]);
    let mut tcpdump = Command::new("tcpdump");
    // -U: each packet is in the file as soon as it is captured (the wait below reads it).
    tcpdump
        .args(["--immediate-mode", "-U", "-i", &v.here, "-w"])
        .arg(&pcap)
        .arg("icmp")
        .stdout(Stdio::null());
    let (mut td, _) = tcpdump_listening(tcpdump);
    for c in [&all, &icmp_kernel, &icmp_user] {
        wait_capturing(c.id(), &v.here);
    }
    // 200 echo requests and their replies, plus UDP datagrams the ICMP filters must drop.
    ok(&["ping", "-c", "200", "-i", "0.002", "-q", &v.peer_ip]);
    for _ in 0..50 {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let _ = s.send_to(b"streamline", format!("{}:9", v.peer_ip));
    }
    // Until every run has counted what tcpdump captured (the property checked below,
    // once it holds it holds: nothing more is sent).
    wait_until(
        "the runs count what tcpdump captured",
        Duration::from_secs(30),
        || {
            let td = pcap_packets(&pcap, "");
            let [a, k, u] = stats
                .each_ref()
                .map(|f| stats_counter(f, "count", "blocks_in"));
            let seen = format!("tcpdump {td}, all {a:?}, bpf {k:?}, icmp {u:?}");
            (td >= 400 && k == Some(td) && u == Some(td) && a >= Some(td + 50))
                .then_some(())
                .ok_or(seen)
        },
    );
    let (n_all, rx_all) = stop(all);
    let (n_kernel, rx_kernel) = stop(icmp_kernel);
    let (n_user, _) = stop(icmp_user);
    let _ = Command::new("kill")
        .args(["-INT", &td.id().to_string()])
        .status();
    let _ = td.wait();
    let tcpdump = sh(&["tcpdump", "-r", pcap.to_str().unwrap()]);
    let n_td = String::from_utf8_lossy(&tcpdump.stdout).lines().count() as u64;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        n_td >= 400,
        "tcpdump saw {n_td} ICMP packets of 400 sent and answered"
    );
    assert_eq!(n_kernel, n_td, "bpf in the kernel vs tcpdump ({rx_kernel})");
    assert_eq!(n_user, n_td, "icmp (IPv4) in user space vs tcpdump");
    assert!(
        n_all >= n_td + 50,
        "all frames ({n_all}) include the ICMP ones ({n_td}) and 50 UDP ({rx_all})"
    );
    // The kernel filter kept the UDP frames out of user space.
    assert!(
        rx_kernel.contains(&format!("{n_kernel} packets delivered")),
        "{rx_kernel}"
    );
    assert!(rx_kernel.contains("0 dropped by the kernel"), "{rx_kernel}");
}

#[test]
fn live_capture_errors_name_the_problem() {
    let run = |args: &[&str]| {
        let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[BIN, "run", "rx dev=nosuch0 | count"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no network interface named 'nosuch0'"),
        "{err}"
    );
    let (code, err) = run(&[BIN, "run", "rx dev=lo | bpf \"tcp prt 80\" | count"]);
    assert_eq!(code, 2);
    assert!(err.contains("does not compile"), "{err}");
    // Without CAP_NET_RAW (as nobody): the run fails naming the capability.
    let (code, err) = run(&[
        "setpriv",
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        BIN,
        "run",
        "rx dev=lo | count",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("CAP_NET_RAW"), "{err}");
}

#[test]
fn multiqueue_engines_share_the_interface_flow_by_flow() {
    let v = veth();
    let dir = std::env::temp_dir().join(format!("sl-mq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("td.pcap");
    let stats = dir.join("stats.json");
    // Two engines (rx + bpf each, in one fanout group), a join, one count for both.
    let sl = Command::new(BIN)
        .arg("run")
        .arg("--stats")
        .arg(&stats)
        .arg(format!("rx dev={} queues=2 | bpf \"udp\" | count", v.here))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tcpdump = Command::new("tcpdump");
    // Immediate mode: at SIGINT nothing waits in a half-filled ring block; short slots
    // (immediate mode sizes them by the snap length) so bursts of 64 datagrams fit; -U:
    // each packet is in the file at once (the wait below reads it).
    tcpdump
        .args([
            "--immediate-mode",
            "-U",
            "-s",
            "256",
            "-B",
            "16384",
            "-i",
            &v.here,
            "-w",
        ])
        .arg(&pcap)
        .arg("udp")
        .stdout(Stdio::null());
    let (mut td, td_rest) = tcpdump_listening(tcpdump);
    wait_capturing(sl.id(), &v.here);
    // 64 flows (source ports) of 20 datagrams, and pings the filter must drop.
    let socks: Vec<_> = (0..64)
        .map(|_| std::net::UdpSocket::bind(format!("{}:0", v.here_ip)).unwrap())
        .collect();
    for i in 0..20 {
        for s in &socks {
            let _ = s.send_to(
                format!("streamline {i}").as_bytes(),
                format!("{}:9", v.peer_ip),
            );
        }
        // Paces the sender: bursts of 64 (the capture buffers are sized for one burst).
        std::thread::sleep(Duration::from_millis(2));
    }
    ok(&["ping", "-c", "20", "-i", "0.005", "-q", &v.peer_ip]);
    // Until the run has counted what tcpdump captured (the property checked below).
    wait_until(
        "the run counts the datagrams tcpdump captured",
        Duration::from_secs(30),
        || {
            let (td, n) = (
                pcap_packets(&pcap, ""),
                stats_counter(&stats, "count", "blocks_in"),
            );
            (td >= 64 * 20 && n == Some(td))
                .then_some(())
                .ok_or(format!("tcpdump {td}, count {n:?}"))
        },
    );
    assert!(Command::new("kill")
        .args(["-INT", &sl.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = sl.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(130), "{err}");
    let _ = Command::new("kill")
        .args(["-INT", &td.id().to_string()])
        .status();
    let _ = td.wait();
    let tcpdump = sh(&["tcpdump", "-r", pcap.to_str().unwrap()]);
    let n_td = String::from_utf8_lossy(&tcpdump.stdout).lines().count() as u64;
    let _ = std::fs::remove_dir_all(&dir);
    let count: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("count: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count:\n{err}"));
    assert!(
        n_td >= 64 * 20,
        "tcpdump saw {n_td} of {} datagrams:\n{}",
        64 * 20,
        td_rest.join().unwrap()
    );
    assert_eq!(
        count, n_td,
        "both engines together count what tcpdump counts:\n{err}"
    );
    // Each engine is its own rx in its own space, folded into the one rx the user wrote:
    // its row names both spaces and adds up (out = made, the frames captured).
    let rx: Vec<&str> = err
        .lines()
        .find(|l| l.split_whitespace().next() == Some("rx"))
        .unwrap_or_else(|| panic!("no rx row:\n{err}"))
        .split_whitespace()
        .collect();
    assert_eq!(rx.len(), 10, "{err}");
    assert_eq!(rx[9].split(',').count(), 2, "rx ran in two spaces:\n{err}");
    assert!(
        rx[3] == rx[6] && rx[3].parse::<u64>().unwrap() > 0,
        "rx's blocks out are the frames both engines made:\n{err}"
    );
    assert!(
        !err.lines()
            .any(|l| l.starts_with("rx@") || l.starts_with("bpf@") || l.starts_with("join")),
        "no engine's own rows:\n{err}"
    );
    // Each engine's socket still says what it delivered: two `rx IF:` lines.
    let delivered = err
        .lines()
        .filter(|l| l.starts_with(&format!("rx {}: ", v.here)) && l.contains("packets delivered"))
        .count();
    assert_eq!(delivered, 2, "{err}");
}

/// Packet sockets bound to interface `ifindex` (column Iface of /proc/net/packet).
fn packet_sockets_on(ifindex: u32) -> usize {
    std::fs::read_to_string("/proc/net/packet")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .nth(4)
                .and_then(|i| i.parse::<u32>().ok())
                == Some(ifindex)
        })
        .count()
}

fn spawn_run(pipeline: &str) -> Child {
    Command::new(BIN)
        .args(["run", pipeline])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn interrupt(c: Child) -> (Option<i32>, String) {
    assert!(Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = c.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// Over 150 lines: one scenario whose steps depend on each other (the first run's capture,
// the second run joining it, the first leaving, the second going on).
#[test]
fn a_second_run_shares_the_running_capture_prefix() {
    let v = veth();
    let ifindex: u32 = std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", v.here))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("sl-share-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("td.pcap");
    let key = common::share_key(&format!("rx dev={} | bpf \"icmp\" | count", v.here));
    let (stats1, stats2) = (dir.join("first.json"), dir.join("second.json"));
    let first = spawn_run_stats(
        &format!("rx dev={} | bpf \"icmp\" | count", v.here),
        &stats1,
    );
    wait_for(
        "the first run publishes its capture",
        Duration::from_secs(30),
        || dataplane::channel::published(&key).is_some(),
    );
    // It publishes its stream, then opens its socket on its first pull.
    wait_for("the first run captures", Duration::from_secs(30), || {
        packet_sockets_on(ifindex) == 1
    });
    // Same capture and filter, then more filters of its own: it takes the first run's stream.
    let second = spawn_run_stats(
        &format!("rx dev={} | bpf \"icmp\" | icmp 4 | count", v.here),
        &stats2,
    );
    let tags =
        beltway::RingRef::open(&format!("{}.tags", dataplane::channel::share_name(&key))).unwrap();
    wait_for("the second run subscribes", Duration::from_secs(30), || {
        tags.readers() == 1
    });
    drop(tags);
    assert_eq!(
        packet_sockets_on(ifindex),
        1,
        "the second run opened no capture of its own"
    );
    let mut tcpdump = Command::new("tcpdump");
    // Immediate mode: at SIGINT nothing waits in a half-filled ring block; -U: each
    // packet is in the file at once (the waits below read it).
    tcpdump
        .args(["--immediate-mode", "-U", "-i", &v.here, "-w"])
        .arg(&pcap)
        .arg("icmp")
        .stdout(Stdio::null());
    let (mut td, _) = tcpdump_listening(tcpdump);
    ok(&["ping", "-c", "100", "-i", "0.005", "-q", &v.peer_ip]);
    // Until both runs have counted what tcpdump captured (checked below, from their ends).
    let counted = |f: &std::path::Path| stats_counter(f, "count", "blocks_in");
    wait_until("both runs count the pings", Duration::from_secs(30), || {
        let (td, n1, n2) = (pcap_packets(&pcap, ""), counted(&stats1), counted(&stats2));
        (td >= 200 && n1 == Some(td) && n2 == Some(td))
            .then_some(())
            .ok_or(format!("tcpdump {td}, first {n1:?}, second {n2:?}"))
    });
    let (code2, err2) = interrupt(second);
    // The first run goes on alone: larger pings only it sees.
    ok(&[
        "ping", "-c", "10", "-i", "0.01", "-s", "500", "-q", &v.peer_ip,
    ]);
    wait_until(
        "the first run counts the larger pings",
        Duration::from_secs(30),
        || {
            let (td, n1) = (pcap_packets(&pcap, ""), counted(&stats1));
            (td >= 220 && n1 == Some(td))
                .then_some(())
                .ok_or(format!("tcpdump {td}, first {n1:?}"))
        },
    );
    let (code1, err1) = interrupt(first);
    let _ = Command::new("kill")
        .args(["-INT", &td.id().to_string()])
        .status();
    let _ = td.wait();
    let lines = |filter: &str| {
        let o = sh(&["tcpdump", "-r", pcap.to_str().unwrap(), filter]);
        String::from_utf8_lossy(&o.stdout).lines().count() as u64
    };
    let (small, all) = (lines("icmp and less 200"), lines("icmp"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code2, Some(130), "{err2}");
    assert_eq!(code1, Some(130), "{err1}");
    assert!(
        err2.contains("sharing `rx dev=") && err2.contains("bpf \"icmp\"`"),
        "{err2}"
    );
    // The subscription's summary is said by the node it stands for, as its row is.
    assert!(
        err2.lines()
            .any(|l| l.starts_with("bpf: ") && l.contains(" blocks received, lost ")),
        "{err2}"
    );
    assert!(!err2.contains("__subscribe"), "{err2}");
    // In the table the subscription is the shared prefix's last node, bpf (the node the
    // user wrote), not a `__subscribe` row; its row adds up (out = made, what it received).
    assert!(
        !err2.lines().any(|l| l.starts_with("__subscribe ")),
        "{err2}"
    );
    let bpf: Vec<&str> = err2
        .lines()
        .find(|l| l.split_whitespace().next() == Some("bpf"))
        .unwrap_or_else(|| panic!("no bpf row:\n{err2}"))
        .split_whitespace()
        .collect();
    assert!(bpf[3] == bpf[6] && bpf[1] == "0", "{err2}");
    assert!(
        small >= 200 && all >= small + 20,
        "tcpdump saw {small} small and {all} ICMP packets"
    );
    assert_eq!(
        count_of(&err2),
        small,
        "the sharing run counts what tcpdump saw while it ran:\n{err2}"
    );
    assert_eq!(
        count_of(&err1),
        all,
        "the first run is not disturbed by its subscriber:\n{err1}"
    );
    // The published names are gone with the run.
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&key))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // --no-share: its own capture.
    let first = spawn_run(&format!("rx dev={} | bpf \"icmp\" | count", v.here));
    wait_for(
        "the first run captures again",
        Duration::from_secs(30),
        || dataplane::channel::published(&key).is_some() && packet_sockets_on(ifindex) == 1,
    );
    let own = Command::new(BIN)
        .args([
            "run",
            "--no-share",
            &format!("rx dev={} | bpf \"icmp\" | count", v.here),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(
        "--no-share captures for itself",
        Duration::from_secs(30),
        || packet_sockets_on(ifindex) == 2,
    );
    let (_, own_err) = interrupt(own);
    assert!(!own_err.contains("sharing"), "{own_err}");
    // A subscriber ends when the run it shares with ends.
    let sub = spawn_run(&format!("rx dev={} | bpf \"icmp\" | count", v.here));
    let tags =
        beltway::RingRef::open(&format!("{}.tags", dataplane::channel::share_name(&key))).unwrap();
    wait_for("the subscriber subscribes", Duration::from_secs(30), || {
        tags.readers() == 1
    });
    drop(tags);
    let _ = interrupt(first);
    let t0 = std::time::Instant::now();
    let out = sub.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the subscriber outlived its publisher"
    );
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("sharing"), "{err}");
}

/// The frames of a pcap file.
fn frames_of(path: &std::path::Path) -> Vec<Vec<u8>> {
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data.into_owned());
    }
    v
}

#[test]
fn tx_sends_every_record_byte_for_byte_with_batched_kicks() {
    let v = veth();
    // Our end sends nothing of its own (no IPv6 neighbour discovery), so the peer sees
    // exactly what tx sends.
    ok(&[
        "sysctl",
        "-q",
        "-w",
        &format!("net.ipv6.conf.{}.disable_ipv6=1", v.here),
    ]);
    let dir = std::env::temp_dir().join(format!("sl-tx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let got = dir.join("peer.pcap");
    let mut tcpdump = v.command("tcpdump");
    // The sample arrives in one burst of 4 MB: a 64 MiB capture buffer of 4 KiB slots
    // (immediate mode sizes slots by the snap length) holds all of it. -U: each frame is
    // in the file as soon as it is captured (the wait below reads it).
    tcpdump
        .args([
            "--immediate-mode",
            "-U",
            "-s",
            "4096",
            "-B",
            "65536",
            "-Q",
            "in",
            "-i",
            &v.there,
            "-w",
        ])
        .arg(&got)
        .stdout(Stdio::null());
    let (mut td, _) = tcpdump_listening(tcpdump);
    let sample = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../examples/sample.pcap"
    ));
    let out = Command::new(BIN)
        .args([
            "run",
            &format!("pcapin file={} | tx dev={}", sample.display(), v.here),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let sent = frames_of(sample);
    // Until tcpdump has written as many frames as were sent (which they are, checked
    // below once it has stopped).
    wait_until(
        "the peer's tcpdump writes every frame",
        Duration::from_secs(30),
        || {
            let n = pcap_packets(&got, "");
            (n >= sent.len() as u64)
                .then_some(())
                .ok_or(format!("{n} of {} frames", sent.len()))
        },
    );
    let _ = Command::new("kill")
        .args(["-INT", &td.id().to_string()])
        .status();
    let _ = td.wait();
    let received = frames_of(&got);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        received.len(),
        sent.len(),
        "the peer received every record once:\n{err}"
    );
    assert!(received == sent, "byte for byte, in order");
    // One kick carried many frames.
    let line = err
        .lines()
        .find(|l| l.starts_with("tx ") && l.contains(" kicks "))
        .unwrap_or_else(|| panic!("{err}"));
    let per: f64 = line
        .split('(')
        .nth(2)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(per > 1.0, "frames per kick: {line}");
    assert!(line.contains(&format!("{} frames", sent.len())), "{line}");
}

#[test]
fn tx_errors_name_the_problem() {
    let run = |args: &[&str]| {
        let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[BIN, "run", "gen count=1 | tx dev=nosuch0"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no network interface named 'nosuch0'"),
        "{err}"
    );
    let (code, err) = run(&[BIN, "run", "gen count=1 | tx dev=lo batch=0"]);
    assert_eq!(code, 2);
    assert!(err.contains("batch=0"), "{err}");
    let (code, err) = run(&[
        "setpriv",
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        BIN,
        "run",
        "gen count=1 | tx dev=lo",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("CAP_NET_RAW"), "{err}");
}

#[test]
fn af_xdp_rx_counts_what_the_peer_sends() {
    let v = veth();
    // AF_XDP takes the queue's frames away from the host's stack (nothing answers ARP or
    // pings), so the peer gets a static neighbour entry and tcpdump counts at the sender.
    let _ = v.exec(&[
        "sysctl",
        "-q",
        "-w",
        &format!("net.ipv6.conf.{}.disable_ipv6=1", v.there),
    ]);
    let mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", v.here)).unwrap();
    v.exec(&[
        "ip",
        "neigh",
        "add",
        &v.here_ip,
        "lladdr",
        mac.trim(),
        "dev",
        &v.there,
    ])
    .unwrap();
    let dir = std::env::temp_dir().join(format!("sl-xdp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("sent.pcap");
    let stats = dir.join("stats.json");
    let sl = spawn_run_stats(
        &format!("rx dev={} impl=xdp | icmp 4 | count", v.here),
        &stats,
    );
    let mut tcpdump = v.command("tcpdump");
    // -U: each packet is in the file at once (the wait below reads it).
    tcpdump
        .args(["--immediate-mode", "-U", "-Q", "out", "-i", &v.there, "-w"])
        .arg(&pcap)
        .stdout(Stdio::null());
    let (mut td, _) = tcpdump_listening(tcpdump);
    // AF_XDP has no packet socket to wait for: the run captures once a probe from the
    // peer reaches its rx (UDP, which `icmp 4` drops and the ICMP count below leaves out).
    wait_receiving(&v, &stats, "rx");
    // Echo requests nobody answers: ping runs to its deadline.
    let _ = v
        .command("ping")
        .args(["-c", "200", "-i", "0.005", "-w", "2", "-q", &v.here_ip])
        .output();
    // Until the run has counted every echo request tcpdump saw leave the peer (checked
    // below from its end).
    wait_until(
        "the run counts the echo requests",
        Duration::from_secs(30),
        || {
            let (sent, n) = (
                pcap_packets(&pcap, "icmp"),
                stats_counter(&stats, "count", "blocks_in"),
            );
            (sent >= 100 && n == Some(sent))
                .then_some(())
                .ok_or(format!("tcpdump {sent}, count {n:?}"))
        },
    );
    let (code, err) = interrupt(sl);
    let _ = Command::new("kill")
        .args(["-INT", &td.id().to_string()])
        .status();
    let _ = td.wait();
    let o = sh(&["tcpdump", "-r", pcap.to_str().unwrap(), "icmp"]);
    let sent = String::from_utf8_lossy(&o.stdout).lines().count() as u64;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(130), "{err}");
    assert!(
        err.contains("(AF_XDP, queue 0, copy mode)"),
        "the AF_XDP socket was used:\n{err}"
    );
    assert!(sent >= 100, "the peer sent {sent} echo requests");
    assert_eq!(
        count_of(&err),
        sent,
        "AF_XDP delivered every ICMP frame the peer sent:\n{err}"
    );
    // The socket's own drop counters (XDP_STATISTICS) are read and shown: none here.
    assert!(
        err.contains("0 dropped by the kernel (RX ring full 0, no fill chunk 0, other 0)"),
        "XDP drop counters:\n{err}"
    );
    // Options that need AF_PACKET are refused with impl=xdp.
    let (code, err) = {
        let o = Command::new(BIN)
            .args([
                "run",
                &format!("rx dev={} impl=xdp fanout=3 | count", v.here),
            ])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(2));
    assert!(err.contains("fanout= needs impl=packet"), "{err}");
    // A gather batch larger than the UMEM allows is refused, naming the limit.
    let o = Command::new(BIN)
        .args([
            "run",
            &format!("rx dev={} impl=xdp frames=256 batch=65 | count", v.here),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("parameter batch=65: expected 1..=64"), "{err}");
}

/// Wait until the run writing `stats` has taken a frame from the peer of `v` into its
/// node `label` (a capture with no packet socket to look for, AF_XDP, is receiving then):
/// a UDP probe from the peer every second (to the discard port; an ARP request first when
/// the peer knows no address for ours), for at most 30 s.
fn wait_receiving(v: &Veth, stats: &std::path::Path, label: &str) {
    let t0 = std::time::Instant::now();
    loop {
        let probe = format!("echo probe > /dev/udp/{}/9", v.here_ip);
        let _ = v.exec(&["bash", "-c", &probe]);
        let until = std::time::Instant::now() + Duration::from_secs(1);
        while std::time::Instant::now() < until {
            if stats_counter(stats, label, "blocks_out").is_some_and(|n| n > 0) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the run's {label} received none of the peer's probes within 30 s ({} says {:?})",
            stats.display(),
            std::fs::read_to_string(stats).ok()
        );
    }
}

/// An interface removed under a running capture ends the run by itself: exit status 1, a
/// warning naming the interface, and the totals of what was captured before, with both
/// implementations. (AF_PACKET's poll used to return at once forever, so the run spun a
/// CPU; AF_XDP waited silently.)
#[test]
fn a_capture_ends_when_its_interface_is_removed() {
    use std::io::Read;
    for imp in ["packet", "xdp"] {
        let v = veth();
        let dir = std::env::temp_dir().join(format!("sl-gone-{imp}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stats = dir.join("stats.json");
        let mut c = start(&format!("rx dev={} impl={imp} | count", v.here), &stats);
        // Capturing (AF_XDP has no packet socket to look for: a probe says it).
        wait_receiving(&v, &stats, "rx");
        let _ = sh(&["ping", "-c", "5", "-i", "0.01", "-w", "1", "-q", &v.peer_ip]);
        ok(&["ip", "link", "del", &v.here]);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = c.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = c.kill();
                panic!("impl={imp}: the run did not end within 10 s of its interface's removal");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert_eq!(status.code(), Some(1), "impl={imp}:\n{err}");
        assert!(
            err.contains(&format!("{}: ", v.here)) && err.contains("went down or was removed"),
            "impl={imp}:\n{err}"
        );
        assert!(
            err.lines().any(|l| l.starts_with("count: ")),
            "impl={imp}: totals are still printed:\n{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Voluntary context switches (sleeps) of `pid`'s main thread, which runs its first space.
fn main_thread_sleeps(pid: u32) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/task/{pid}/status: {e}"));
    st.lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("voluntary_ctxt_switches in /proc")
}

/// A capture on an interface where nothing arrives sleeps on its socket (AF_PACKET in
/// both batching schemes, AF_XDP) through the space's readiness handle: it wakes for the
/// space's tick (10 a second) and nothing else, where a timed wait in the source woke
/// every 50 ms besides (at least 40 sleeps in the 2 s counted). Counts wake-ups, not time.
#[test]
fn an_idle_capture_sleeps_on_its_socket() {
    // Nothing arrives: no IPv6 autoconfiguration chatter on either side.
    let v = common::quiet_pair("idle");
    for how in ["", " batching=fixed", " impl=xdp"] {
        let pipeline = format!("rx dev={}{how} | null", v.here);
        let mut c = Command::new(BIN)
            .args(["run", "-q", "--no-share", &pipeline])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn streamline");
        let pid = c.id();
        // Up once its space has slept a few times (the capture is open by then).
        wait_for("the run to start", Duration::from_secs(30), || {
            main_thread_sleeps(pid) >= 5
        });
        let a = main_thread_sleeps(pid);
        // The window the sleeps are counted over (nothing is awaited here).
        std::thread::sleep(Duration::from_secs(2));
        let b = main_thread_sleeps(pid);
        let running = c.try_wait().unwrap().is_none();
        assert!(Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap()
            .success());
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(running, "`{pipeline}` ended by itself: {err}");
        assert!(
            b - a < 30,
            "`{pipeline}` on an idle interface slept {} times in 2 s (its space's tick: 20; a 50 ms wait in the source: 40 more): {err}",
            b - a
        );
    }
}
