//! Network channels (issue 21): a pipeline split across two network namespaces joined by
//! a veth pair, `... | netout to=PEER:PORT` here and `netin port=PORT | ...` there, gives
//! what the pipeline gives on one host (the placement-invariance corpus, split after its
//! source); a refused connection and a peer killed mid-stream end the run with an error
//! naming the peer, in bounded time. Needs root (namespaces), as CI has.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn sample() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/sample.pcap"))
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
    Some((format!("{left}{}", &right[..sel_end]), right[sel_end..].trim().to_string()))
}

#[test]
fn corpus_pipelines_split_across_two_namespaces_give_the_one_host_results() {
    let v = veth("net");
    let dir = std::env::temp_dir().join(format!("sl-net-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let corpus = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/placement/corpus.txt"
    ))
    .unwrap();
    let pcap = sample();
    let mut done = 0;
    for (k, line) in corpus
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .enumerate()
    {
        if line.contains("{text}") {
            continue;
        }
        let Some((head, tail)) = splittable(line) else { continue };
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
        assert!(o.status.success(), "{line}: {}", String::from_utf8_lossy(&o.stderr));
        let mut s1 = lines(&o.stderr);
        s1.sort();
        let one = Outcome {
            stdout: o.stdout,
            out: std::fs::read(&out1).ok(),
            summaries: s1,
        };
        // Split: the tail runs in the namespace, the head here.
        let port = 7800 + k as u16;
        let out2 = dir.join(format!("split-{k}"));
        let rx = v
            .command(BIN)
            .args([
                "run",
                "-q",
                "--plan",
                "none",
                &fill(&format!("netin port={port} | {tail}"), &out2),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Drain the receiver's output while the sender runs (a full pipe would stop it).
        let rx = std::thread::spawn(move || rx.wait_with_output().unwrap());
        let tx = Command::new(BIN)
            .args([
                "run",
                "-q",
                "--plan",
                "none",
                &fill(&format!("{head} netout to={}:{port} wait=10", v.peer_ip), &out2),
            ])
            .output()
            .unwrap();
        let rx = rx.join().unwrap();
        assert!(
            tx.status.success() && rx.status.success(),
            "split `{head} netout` / `netin | {tail}`:\n{}\n{}",
            String::from_utf8_lossy(&tx.stderr),
            String::from_utf8_lossy(&rx.stderr)
        );
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
    assert!(done >= 15, "only {done} corpus pipelines could be split");
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
    assert!(err.contains("cannot connect to 127.0.0.1:1: connection refused"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

/// Kills the runs a test started however the test ends (a failed assertion too).
struct Reap(Vec<u32>);
impl Drop for Reap {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// Kill one end mid-stream: the other ends with an error naming its peer, not a hang.
#[test]
fn a_peer_killed_mid_stream_ends_the_run_naming_it() {
    let v = veth("netk");
    let mut reap = Reap(Vec::new());
    for kill_receiver in [true, false] {
        let port = if kill_receiver { 7790 } else { 7791 };
        let mut rx = v
            .command(BIN)
            .args(["run", "-q", &format!("netin port={port} | null")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut tx = Command::new(BIN)
            .args([
                "run",
                "-q",
                &format!("gen count=100G size=1K | netout to={}:{port} wait=10", v.peer_ip),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        reap.0.extend([rx.id(), tx.id()]);
        std::thread::sleep(Duration::from_millis(1500));
        let (victim, survivor) = if kill_receiver {
            (&mut rx, &mut tx)
        } else {
            (&mut tx, &mut rx)
        };
        // SIGKILL, as a crash or the OOM killer would.
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
        // Named by address; a reset or a close without the stream's end, as the kernel
        // tells it.
        let want = if kill_receiver {
            format!("the receiver {}:{port}", v.peer_ip)
        } else {
            format!("the sender {}:", v.here_ip)
        };
        assert!(
            err.contains(&want)
                && (err.contains("went away mid-stream") || err.contains("without ending the stream")),
            "{err}"
        );
    }
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
            // The greeting, then a frame claiming a 4 GiB - 2 block.
            [b"SLNET\x00\x01\x00".as_slice(), &[0xfe, 0xff, 0xff, 0xff], &[0u8; 28]].concat(),
            "more than netin takes",
        ),
    ] {
        let rx = Command::new(BIN)
            .args(["run", "-q", &format!("netin port={port} bind=127.0.0.1 | null")])
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
