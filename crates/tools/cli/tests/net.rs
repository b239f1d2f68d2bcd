//! Network channels (issue 21): a pipeline split across two network namespaces joined by
//! a veth pair, `... | netout to=PEER:PORT` here and `netin port=PORT | ...` there, gives
//! what the pipeline gives on one host (the placement-invariance corpus, split after its
//! source); a refused connection and a peer killed mid-stream end the run with an error
//! naming the peer, in bounded time. Needs root (namespaces), as CI has.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn sample() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../examples/sample.pcap"
    ))
}

fn veth(tag: &str) -> kernel::netns::Veth {
    common::quiet_veth(tag, "network namespaces for a second host")
}

/// What a run (or the two halves of one) produced, its own netin/netout lines left out.
#[derive(Debug, PartialEq)]
struct Outcome {
    stdout: Vec<u8>,
    out: Option<Vec<u8>>,
    summaries: Vec<String>,
}

fn lines(err: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(err)
        .lines()
        .filter(|l| !l.starts_with("netin: ") && !l.starts_with("netout: "))
        .map(str::to_string)
        .collect()
}

/// The corpus lines a split after the source keeps whole: a plain source word, then a
/// `|` (with or without a selector) at the top level.
fn splittable(line: &str) -> Option<(String, String)> {
    let bar = line.find('|')?;
    let (left, right) = line.split_at(bar);
    if left.contains(['(', '"', '{']) && !left.contains("{pcap}") {
        return None;
    }
    let src = left.split_whitespace().next()?;
    if !["pcapin", "gen", "file"].contains(&src) {
        return None;
    }
    let sel_end = right.find(char::is_whitespace)?;
    Some((
        format!("{left}{}", &right[..sel_end]),
        right[sel_end..].trim().to_string(),
    ))
}

#[test]
fn corpus_pipelines_split_across_two_namespaces_give_the_one_host_results() {
    split_corpus("net", "", "", 7800, |_| true);
}

/// The same over UDP with one queue (one socket each side: in order), receive buffers
/// bigger than the sample so nothing can be lost; every run must say it lost nothing.
#[test]
fn corpus_pipelines_split_over_udp_give_the_one_host_results() {
    split_corpus(
        "netu",
        " proto=udp",
        " proto=udp rcvbuf=64M",
        8800,
        |line| line.starts_with("pcapin"),
    );
}

/// Split every corpus line that allows it after its source (and that `keep` keeps):
/// `netout{out_args}` here, `netin{in_args}` in a second namespace.
fn split_corpus(tag: &str, out_args: &str, in_args: &str, base_port: u16, keep: fn(&str) -> bool) {
    let v = veth(tag);
    let dir = std::env::temp_dir().join(format!("sl-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = sample();
    let mut done = 0;
    for (k, line) in common::placement_corpus().iter().enumerate() {
        let line = line.as_str();
        if line.contains("{text}") || !keep(line) {
            continue;
        }
        let Some((head, tail)) = splittable(line) else {
            continue;
        };
        let fill = |t: &str, out: &PathBuf| {
            t.replace("{pcap}", pcap.to_str().unwrap())
                .replace("{out}", out.to_str().unwrap())
        };
        // On one host.
        let out1 = dir.join(format!("one-{k}"));
        let o = Command::new(BIN)
            .args(["run", "-q", "--plan", "none", &fill(line, &out1)])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{line}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut s1 = lines(&o.stderr);
        s1.sort();
        let one = Outcome {
            stdout: o.stdout,
            out: std::fs::read(&out1).ok(),
            summaries: s1,
        };
        // Split: the tail runs in the namespace, the head here.
        let port = base_port + k as u16;
        let out2 = dir.join(format!("split-{k}"));
        let (tx, rx) = split_run(
            &v,
            &fill(&format!("netin port={port}{in_args} | {tail}"), &out2),
            &fill(
                &format!("{head} netout to={}:{port} wait=10{out_args}", v.peer_ip),
                &out2,
            ),
            &format!("`{line}` split"),
        );
        if in_args.contains("udp") {
            let err = String::from_utf8_lossy(&rx.stderr);
            let netin = err.lines().find(|l| l.starts_with("netin: ")).unwrap_or("");
            assert!(
                netin.contains(", 0 of "),
                "`{line}` over UDP lost datagrams: {err}"
            );
        }
        let mut s2 = lines(&tx.stderr);
        s2.extend(lines(&rx.stderr));
        s2.sort();
        let mut stdout = tx.stdout;
        stdout.extend(rx.stdout);
        let split = Outcome {
            stdout,
            out: std::fs::read(&out2).ok(),
            summaries: s2,
        };
        if one != split {
            let size = |o: &Outcome| (o.stdout.len(), o.out.as_ref().map(Vec::len));
            let first = match (&one.out, &split.out) {
                (Some(a), Some(b)) => a.iter().zip(b).position(|(x, y)| x != y),
                _ => None,
            };
            panic!(
                "`{line}` split as `{head} netout` | `netin | {tail}`: (stdout, out) bytes {:?} vs {:?}, first out difference at {first:?}; summaries {:?} vs {:?}",
                size(&one),
                size(&split),
                one.summaries,
                split.summaries
            );
        }
        done += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(done >= 10, "only {done} corpus pipelines could be split");
}

#[test]
fn a_refused_connection_is_an_error_naming_the_peer() {
    let t0 = Instant::now();
    let o = Command::new(BIN)
        .args(["run", "gen count=10 | netout to=127.0.0.1:1 wait=0.3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot connect to 127.0.0.1:1: connection refused"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
}

/// Kills the runs a test started however the test ends (a failed assertion too).
struct Reap(Vec<u32>);
impl Drop for Reap {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Run `rx` (a pipeline starting with netin) in the namespace and `tx` here, each as
/// `streamline run -q --plan none`, the receiver first, its output drained while the
/// sender runs (a full pipe would stop it). Returns (sender, receiver) outputs, both
/// checked to have succeeded (`what` names the case). A sender that fails takes the
/// receiver down with it (killed), so no test waits for a sender that never comes.
fn split_run(v: &kernel::netns::Veth, rx: &str, tx: &str, what: &str) -> (Output, Output) {
    let child = v
        .command(BIN)
        .args(["run", "-q", "--plan", "none", rx])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reap = Reap(vec![child.id()]);
    let rxo = std::thread::spawn(move || child.wait_with_output().unwrap());
    let txo = Command::new(BIN)
        .args(["run", "-q", "--plan", "none", tx])
        .output()
        .unwrap();
    if !txo.status.success() {
        drop(reap);
        reap = Reap(Vec::new());
    }
    let rxo = rxo.join().unwrap();
    reap.0.clear();
    assert!(
        txo.status.success() && rxo.status.success(),
        "{what}: `{tx}` / `{rx}`:\n{}\n{}",
        String::from_utf8_lossy(&txo.stderr),
        String::from_utf8_lossy(&rxo.stderr)
    );
    (txo, rxo)
}

/// Kill one end mid-stream: the other ends with an error naming its peer, not a hang.
#[test]
fn a_peer_killed_mid_stream_ends_the_run_naming_it() {
    let v = veth("netk");
    for (kill_receiver, port) in [(true, 7790), (false, 7791)] {
        kill_mid_stream(
            &v,
            &format!("netin port={port} | null"),
            &format!(
                "gen count=100G size=1K | netout to={}:{port} wait=10",
                v.peer_ip
            ),
            kill_receiver,
            port,
            // A reset or a close without the stream's end, as the kernel tells it.
            &["went away mid-stream", "without ending the stream"],
        );
    }
}

/// Start `rx` in the namespace and `tx` here, SIGKILL one of them after a moment (as a
/// crash or the OOM killer would) and check that the other ends, within 20 s, with exit
/// status 1 and a warning naming its peer by address and saying one of `why`.
fn kill_mid_stream(
    v: &kernel::netns::Veth,
    rx: &str,
    tx: &str,
    kill_receiver: bool,
    port: u16,
    why: &[&str],
) {
    let mut reap = Reap(Vec::new());
    let dir = std::env::temp_dir().join(format!("sl-net-kill-{port}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (rx_stats, tx_stats) = (dir.join("rx.json"), dir.join("tx.json"));
    let mut rx = v
        .command(BIN)
        .args(["run", "-q", "--stats"])
        .arg(&rx_stats)
        .arg(rx)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tx = Command::new(BIN)
        .args(["run", "-q", "--stats"])
        .arg(&tx_stats)
        .arg(tx)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    reap.0.extend([rx.id(), tx.id()]);
    // Killed mid-stream: once blocks cross (the receiver's netin has passed some on).
    common::wait_for(
        "blocks to cross the connection",
        Duration::from_secs(20),
        || common::stats_counter(&rx_stats, "netin", "blocks_out").is_some_and(|n| n > 0),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let (victim, survivor) = if kill_receiver {
        (&mut rx, &mut tx)
    } else {
        (&mut tx, &mut rx)
    };
    let _ = Command::new("kill")
        .args(["-9", &victim.id().to_string()])
        .status();
    let _ = victim.wait();
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = survivor.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the survivor hangs");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(survivor.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(st.code(), Some(1), "{st:?} {err}");
    let want = if kill_receiver {
        format!("the receiver {}:{port}", v.peer_ip)
    } else {
        format!("the sender {}:", v.here_ip)
    };
    assert!(
        err.contains(&want) && why.iter().any(|w| err.contains(w)),
        "{err}"
    );
}

/// A client that is not a netout, and one that sends a corrupt stream: the run ends with
/// an error naming the peer and what was wrong, and exits 1.
#[test]
fn hostile_senders_get_an_error_naming_them() {
    use std::io::Write;
    for (port, bytes, want) in [
        (7795u16, b"HELLO!!!".to_vec(), "not as a netout does"),
        (
            7796,
            // The greeting, then a frame (a block header) claiming a 4 GiB - 2 block: its
            // `len` at offset 24.
            [
                b"SLNET\x00\x02\x00".as_slice(),
                &[0u8; 24],
                &[0xfe, 0xff, 0xff, 0xff],
                &[0u8; 4],
            ]
            .concat(),
            "more than netin takes",
        ),
    ] {
        let rx = Command::new(BIN)
            .args([
                "run",
                "-q",
                &format!("netin port={port} bind=127.0.0.1 | null"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let mut s = loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(_) if t0.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("netin does not listen: {e}"),
            }
        };
        let _ = s.write_all(&bytes);
        let o = rx.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(want) && err.contains("127.0.0.1:"), "{err}");
    }
}

/// A `netin: ...` or `netout: ...` summary's number before `word` (e.g. "datagrams").
fn count_before(err: &str, who: &str, word: &str) -> u64 {
    let line = err
        .lines()
        .find(|l| l.starts_with(who))
        .unwrap_or_else(|| panic!("no `{who}` line in: {err}"));
    // The number before the phrase `word` (one or more words).
    let at = line
        .find(&format!(" {word}"))
        .unwrap_or_else(|| panic!("no `{word}` in `{line}`"));
    let num = line[..at].rsplit([' ', ',']).next().unwrap_or("");
    num.parse()
        .unwrap_or_else(|_| panic!("no number before `{word}` in `{line}`"))
}

/// Over UDP a receiver that cannot keep up loses datagrams, and counts exactly the ones
/// the sender sent that never came: sent (the sender's count) = received + lost, and the
/// blocks that came are whole blocks of the stream, in order.
#[test]
fn udp_counts_what_it_loses() {
    let v = veth("netl");
    let port = 7780;
    // A receive buffer of a few datagrams and a slow filter: loss is certain.
    let (tx, rx) = split_run(
        &v,
        &format!("netin port={port} proto=udp rcvbuf=4K queues=2 | deflate level=9 | count"),
        &format!(
            "gen count=100K size=1K | netout to={}:{port} proto=udp queues=2 wait=10",
            v.peer_ip
        ),
        "loss",
    );
    let (terr, rerr) = (
        String::from_utf8_lossy(&tx.stderr).into_owned(),
        String::from_utf8_lossy(&rx.stderr).into_owned(),
    );
    let sent = count_before(&terr, "netout: ", "datagrams");
    let sent_blocks = count_before(&terr, "netout: ", "blocks");
    let (lost, of) = (
        count_before(&rerr, "netin: ", "of"),
        count_before(&rerr, "netin: ", "datagrams"),
    );
    let got = count_before(&rerr, "netin: ", "blocks");
    assert_eq!(sent_blocks, 102_400, "{terr}");
    assert_eq!(
        of, sent,
        "the receiver's count of datagrams sent is the sender's: {rerr}"
    );
    assert!(
        lost > 0,
        "nothing lost with a 4K buffer and deflate level=9? {rerr}"
    );
    // 1 KiB blocks: one a datagram (two do not fit 1472 bytes).
    assert_eq!(got + lost, sent, "{terr}\n{rerr}");
    assert!(rerr.contains("were lost"), "{rerr}");
}

/// Over UDP: no receiver is an error at build naming it; a receiver killed mid-stream
/// stops the sender (port unreachable), a sender killed mid-stream stops the receiver
/// after `idle` seconds of silence, each naming the other.
#[test]
fn udp_peers_that_are_missing_or_killed_are_named() {
    let t0 = Instant::now();
    let o = Command::new(BIN)
        .args([
            "run",
            "gen count=10 | netout to=127.0.0.1:9 proto=udp wait=0.5",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no netin answered at 127.0.0.1:9"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10));

    let v = veth("netuk");
    for (kill_receiver, port) in [(true, 7792), (false, 7793)] {
        kill_mid_stream(
            &v,
            &format!("netin port={port} proto=udp idle=1 | null"),
            &format!(
                "gen count=100G size=1K rate=20K | netout to={}:{port} proto=udp wait=10",
                v.peer_ip
            ),
            kill_receiver,
            port,
            &["went away mid-stream", "went silent"],
        );
    }
}

/// Datagrams that are not a netout's (garbage, a truncated frame, a second sender's
/// greeting) are counted and dropped; the real sender's stream comes through whole.
#[test]
fn udp_hostile_datagrams_are_counted_not_fatal() {
    let port = 7797u16;
    let rx = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!("netin port={port} bind=127.0.0.1 proto=udp | pcapout file=-"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reap = Reap(vec![rx.id()]);
    let rx = std::thread::spawn(move || rx.wait_with_output().unwrap());
    // Until its socket is bound (a UDP socket on 127.0.0.1:port in /proc/net/udp).
    let bound = format!("0100007F:{port:04X}");
    common::wait_for("netin to bind its port", Duration::from_secs(20), || {
        std::fs::read_to_string("/proc/net/udp")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(bound.as_str()))
    });
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = ("127.0.0.1", port);
    // Garbage, then a head with a frame claiming more bytes than the datagram holds.
    s.send_to(b"not a netout datagram at all", to).unwrap();
    let mut bad = b"SLU\x02\x00\x00\x01\x00\x07\x00\x00\x00".to_vec();
    bad.extend_from_slice(&[0u8; 8]);
    // The frame's block header, its `len` (offset 24) 65535.
    bad.extend_from_slice(&[0u8; 24]);
    bad.extend_from_slice(&[0xff, 0xff, 0, 0]);
    bad.extend_from_slice(&[0u8; 4]);
    s.send_to(&bad, to).unwrap();
    // Both read by netin (its socket's receive queue empty again) before the real sender
    // greets: they come before any greeting, whatever the scheduling.
    common::wait_until(
        "netin to read the two datagrams",
        Duration::from_secs(30),
        || {
            let socks = common::sockets_on_port(std::process::id(), port, true);
            // tx_queue:rx_queue, in hex.
            match socks.first().and_then(|l| l.split_whitespace().nth(4)) {
                Some(q) if q.ends_with(":00000000") => Ok(()),
                _ => Err(format!("{socks:?}")),
            }
        },
    );
    let tx = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!(
                "pcapin file={} | netout to=127.0.0.1:{port} proto=udp queue=class queues=2 wait=5",
                sample().display()
            ),
        ])
        .output()
        .unwrap();
    let rx = rx.join().unwrap();
    reap.0.clear();
    let rerr = String::from_utf8_lossy(&rx.stderr);
    assert!(
        tx.status.success() && rx.status.success(),
        "{}\n{rerr}",
        String::from_utf8_lossy(&tx.stderr)
    );
    assert!(rerr.contains("is not a netout's"), "{rerr}");
    assert!(rerr.contains("sent before any sender greeted"), "{rerr}");
    let one = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!("pcapin file={} | pcapout file=-", sample().display()),
        ])
        .output()
        .unwrap();
    assert!(one.status.success());
    // `pcapout -` writes to standard output: the sample's own bytes.
    assert_eq!(one.stdout, std::fs::read(sample()).unwrap());
    assert_eq!(
        rx.stdout, one.stdout,
        "the sample came through changed: {rerr}"
    );
}

/// The optimizer places a pipeline on two hosts (`streamline plan --system` with a
/// two-host model whose link is this veth pair), prints each host's command line, and
/// the two, run in two namespaces, give what the pipeline gives on one host.
#[test]
fn a_plan_across_two_hosts_runs_split_and_gives_the_one_host_result() {
    let v = veth("netp");
    let dir = std::env::temp_dir().join(format!("sl-netp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = format!(
        r#"{{"cpus":[0,1],"numa":[0,0],"caches":[],"memory_mib":1024,"cycles_per_sec":2.0e9,
        "caps":{{"bpf":true,"af_packet":true,"af_xdp":true,"fuse":true}},
        "spaces":[{{"id":0,"kind":"thread","cpu":0}},{{"id":1,"kind":"thread","cpu":1}}],
        "hosts":[{{"name":"here","address":"{}","cpus":[0]}},{{"name":"there","address":"{}","cpus":[1]}}],
        "link":{{"a":"here","b":"there","bandwidth":1.0e9}}}}"#,
        v.here_ip, v.peer_ip
    );
    let sys = dir.join("two.json");
    std::fs::write(&sys, model).unwrap();
    let out1 = dir.join("one.pcap");
    let out2 = dir.join("split.pcap");
    let pipe = |out: &PathBuf| {
        format!(
            "pcapin file={} | ip | grep x | deflate level=9 | inflate | pcapout file={}",
            sample().display(),
            out.display()
        )
    };
    let o = Command::new(BIN)
        .args([
            "plan",
            "--rate",
            "700000",
            "--system",
            sys.to_str().unwrap(),
            &pipe(&out2),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Each part on its host, in pipeline order (a part may come back to a host).
    let parts: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| {
            let (host, rest) = l.trim_start().split_once(": streamline run '")?;
            Some((host.to_string(), rest.strip_suffix('\'')?.to_string()))
        })
        .collect();
    assert!(parts.len() >= 2, "no split in:\n{text}");
    assert!(parts.iter().any(|(h, _)| h == "there"), "{text}");
    assert!(parts[0].1.contains(" netout to="), "{text}");
    assert!(
        parts[1..].iter().all(|(_, p)| p.starts_with("netin port=")),
        "{text}"
    );
    // On one host.
    let one = Command::new(BIN)
        .args(["run", "-q", "--plan", "none", &pipe(&out1)])
        .output()
        .unwrap();
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    // Split as planned: the receiving ends first (each netout connects as it starts).
    let mut reap = Reap(Vec::new());
    let mut runs = Vec::new();
    for (host, part) in parts.iter().rev() {
        let part = if part.contains(" netout to=") {
            format!("{part} wait=10")
        } else {
            part.clone()
        };
        let mut c = if host == "there" {
            v.command(BIN)
        } else {
            Command::new(BIN)
        };
        let child = c
            .args(["run", "-q", "--plan", "none", &part])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        reap.0.push(child.id());
        // A receiving end listens before the part that sends to it starts.
        if let Some(port) = part.strip_prefix("netin port=") {
            let port: u16 = port.split(' ').next().unwrap().parse().unwrap();
            common::wait_listening(child.id(), port, false);
        }
        runs.push((
            part,
            std::thread::spawn(move || child.wait_with_output().unwrap()),
        ));
    }
    for (part, r) in runs {
        let o = r.join().unwrap();
        assert!(
            o.status.success(),
            "`{part}`: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    reap.0.clear();
    let (a, b) = (std::fs::read(&out1).unwrap(), std::fs::read(&out2).unwrap());
    assert!(a.len() > 24, "the one-host run wrote no packets");
    assert!(
        a == b,
        "split output differs: {} vs {} bytes",
        a.len(),
        b.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Credits: a receiver slower than its sender slows the sender (it waits for credit), and
/// what is in flight stays within the window, however big the sender's batches.
#[test]
fn a_slow_receiver_slows_the_sender_within_the_window() {
    let v = veth("netw");
    let port = 7798;
    let (tx, _) = split_run(
        &v,
        &format!("netin port={port} window=256K | deflate level=9 | null"),
        &format!(
            "gen count=64K size=1K rewrite=yes | netout to={}:{port} wait=10",
            v.peer_ip
        ),
        "slow receiver",
    );
    let terr = String::from_utf8_lossy(&tx.stderr).into_owned();
    let sent = count_before(&terr, "netout: ", "bytes");
    let peak = count_before(&terr, "netout: ", "bytes in flight");
    let waits = count_before(&terr, "netout: ", "waits");
    assert_eq!(sent, 64 << 20, "{terr}");
    assert!(waits > 0, "the sender never waited for credit: {terr}");
    // Never more than the window (256K): a batch bigger than it goes in chunks.
    assert!(peak <= 256 << 10, "{peak} bytes in flight: {terr}");
}

/// Big blocks (read straight into the receiver's store as their bytes come, a window
/// smaller than a batch, blocks bigger than the staging area's reads) cross whole and in
/// order: the file comes out as it went in.
#[test]
fn big_blocks_cross_whole() {
    let v = veth("netb");
    let dir = std::env::temp_dir().join(format!("sl-netb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.bin");
    // 24 MB of a pattern that never repeats within a block.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let data: Vec<u8> = (0..24_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&input, &data).unwrap();
    for (k, (size, window)) in [("300000", "256K"), ("3M", "4M"), ("20000", "64K")]
        .iter()
        .enumerate()
    {
        let port = 7760 + k as u16;
        let out = dir.join(format!("out{k}.bin"));
        split_run(
            &v,
            &format!(
                "netin port={port} window={window} | outfile {}",
                out.display()
            ),
            &format!(
                "file {} split=fixed size={size} | netout to={}:{port} wait=10",
                input.display(),
                v.peer_ip
            ),
            &format!("blocks of {size}"),
        );
        let got = std::fs::read(&out).unwrap();
        assert!(
            got == data,
            "blocks of {size}: {} bytes came out, differently",
            got.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
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

/// A UDP netin nobody sends to sleeps on its sockets through the space's readiness handle:
/// it wakes for the space's tick (10 a second) and nothing else, where a timed `poll` in
/// the source woke every 50 ms besides (at least 40 sleeps in the 2 s counted). Counts
/// wake-ups, not time.
#[test]
fn an_idle_udp_netin_sleeps_on_its_sockets() {
    for queues in [1, 3] {
        let port = 7811 + queues as u16;
        let pipeline = format!("netin port={port} bind=127.0.0.1 proto=udp queues={queues} | null");
        let mut c = Command::new(BIN)
            .args(["run", "-q", "--socket", "none", &pipeline])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn streamline");
        let pid = c.id();
        // Up once its space has slept a few times (listening by then).
        common::wait_for("the run to start", Duration::from_secs(30), || {
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
            "`{pipeline}` with no sender slept {} times in 2 s (its space's tick: 20; a 50 ms poll in the source: 40 more): {err}",
            b - a
        );
    }
}
