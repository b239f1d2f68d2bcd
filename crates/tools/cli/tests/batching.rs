//! Seed 002's adaptive batching end to end, on real traffic: `rx batching=adaptive` and
//! `rx batching=fixed` capture exactly what tcpdump captures of the shipped capture
//! replayed by tcpreplay onto a veth pair from a namespace this test creates, and `tx`
//! with several rings and each queue choice f(n), under both schemes, sends every frame
//! once, byte for byte (in order per flow for `choose=flow`). Needs root and tcpreplay;
//! without them the tests fail saying what is missing. No timing is asserted.

use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{quiet_veth, tcpdump_listening, wait_capturing};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");
/// Frames in examples/sample.pcap.
const FRAMES: usize = 5247;

/// The frames of a pcap file.
fn frames_of(path: &std::path::Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data.into_owned());
    }
    v
}

/// A scratch directory removed on drop, however the test ends.
struct Scratch(std::path::PathBuf);
impl Scratch {
    fn new(what: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("sl-batching-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills a child however the test ends (a capture must not outlive a failed test).
struct Running(Option<std::process::Child>);
impl Running {
    fn interrupt(mut self) -> String {
        common::interrupt(self.0.take().expect("running"))
    }
}
impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn rx_adaptive_and_fixed_capture_what_tcpdump_captures() {
    let v = quiet_veth(
        "bat",
        "network namespaces, veth pairs, AF_PACKET capture (CAP_NET_RAW, CAP_SYS_ADMIN)",
    );
    let dir = Scratch::new("rx");
    let td_file = dir.0.join("tcpdump.pcap");
    let mut tcpdump = Command::new("tcpdump");
    tcpdump
        .args([
            "--immediate-mode",
            "-s",
            "65535",
            "-B",
            "65536",
            "-i",
            &v.here,
            "-w",
        ])
        .arg(&td_file)
        .stdout(Stdio::null());
    let (td, td_rest) = tcpdump_listening(tcpdump);
    let td = Running(Some(td));
    // Two schemes on one ring each, and the adaptive one reading two fanout members with
    // f(n) = round-robin.
    let runs: Vec<(&str, std::path::PathBuf, Running)> =
        ["adaptive", "fixed", "adaptive rings=2 choose=rr"]
            .into_iter()
            .map(|mode| {
                let out = dir
                    .0
                    .join(format!("{}.pcap", mode.replace([' ', '='], "-")));
                let c = Command::new(BIN)
                    .args([
                        "run",
                        "-q",
                        "--no-share",
                        "--stats",
                        out.with_extension("json").to_str().unwrap(),
                        &format!(
                            "rx dev={} batching={mode} | pcapout file={}",
                            v.here,
                            out.display()
                        ),
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn streamline");
                (mode, out, Running(Some(c)))
            })
            .collect();
    for (_, _, r) in &runs {
        wait_capturing(r.0.as_ref().unwrap().id(), &v.here);
    }
    let o = v
        .command("tcpreplay")
        .args(["-q", "-i", &v.there, "--pps", "5000", SAMPLE])
        .output()
        .expect("run tcpreplay");
    let said =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tcpreplay failed:\n{said}");
    assert!(
        said.contains(&format!("Actual: {FRAMES} packets")),
        "tcpreplay sent every frame:\n{said}"
    );
    // Each run stopped once its pcapout has had every frame (the adaptive scheme holds a
    // batch up to its latency bound, 100 ms, before passing it on).
    for (mode, out, _) in &runs {
        common::wait_until(
            &format!("batching={mode}: pcapout to get the {FRAMES} frames"),
            Duration::from_secs(60),
            || match common::stats_counter(&out.with_extension("json"), "pcapout", "blocks_in") {
                Some(n) if n >= FRAMES as u64 => Ok(()),
                n => Err(format!("pcapout has {n:?}")),
            },
        );
    }
    let mut got = Vec::new();
    for (mode, out, r) in runs {
        let err = r.interrupt();
        got.push((mode, frames_of(&out), err));
    }
    let _ = td.interrupt_tcpdump();
    let _ = td_rest.join();
    let want = frames_of(&td_file);
    assert!(
        want.len() >= FRAMES,
        "tcpdump captured {} frames of {FRAMES} replayed",
        want.len()
    );
    for (mode, frames, err) in &got {
        assert_eq!(
            frames.len(),
            want.len(),
            "batching={mode}: as many frames as tcpdump:\n{err}"
        );
        let rx = err
            .lines()
            .find(|l| l.starts_with("rx "))
            .unwrap_or_else(|| panic!("{err}"));
        if mode.contains("rings") {
            // Two rings share the traffic flow by flow: the same frames, interleaved
            // differently across flows.
            assert!(
                sorted(frames.clone()) == sorted(want.clone()),
                "batching={mode}: the same frames as tcpdump, byte for byte"
            );
            assert!(rx.contains("(2 rings, f(n) rr)"), "{rx}");
        } else {
            assert!(
                frames == &want,
                "batching={mode}: the same frames as tcpdump, byte for byte, in order"
            );
        }
        let scheme = mode.split(' ').next().unwrap();
        assert!(rx.contains(&format!("batching {scheme}")), "{rx}");
        assert!(rx.contains("0 dropped by the kernel"), "{rx}");
    }
}

impl Running {
    /// SIGINT for tcpdump (which exits 0 on it, not 130).
    fn interrupt_tcpdump(mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.0.take()?;
        let _ = Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status();
        c.wait().ok()
    }
}

/// The frames the peer should see of examples/sample.pcap, for comparing as multisets.
fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

#[test]
fn tx_with_every_queue_choice_sends_every_frame_once() {
    let v = quiet_veth(
        "btx",
        "network namespaces, veth pairs, AF_PACKET transmit rings (CAP_NET_RAW, CAP_SYS_ADMIN)",
    );
    let sent = frames_of(std::path::Path::new(SAMPLE));
    assert_eq!(sent.len(), FRAMES);
    let dir = Scratch::new("tx");
    for (batching, choose) in [
        ("adaptive", "flow"),
        ("adaptive", "random"),
        ("adaptive", "rr"),
        ("fixed", "random"),
    ] {
        let got = dir.0.join(format!("{batching}-{choose}.pcap"));
        let mut tcpdump = v.command("tcpdump");
        // -U: each frame is in the file as soon as it is captured (the wait below reads it).
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
        let (td, td_rest) = tcpdump_listening(tcpdump);
        let td = Running(Some(td));
        let out = Command::new(BIN)
            .args([
                "run",
                &format!(
                    "pcapin file={SAMPLE} | tx dev={} batching={batching} queues=3 choose={choose}",
                    v.here
                ),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{batching}/{choose}: {err}");
        // Until the peer's tcpdump has written as many frames as were sent (checked
        // exactly below, once it has stopped).
        common::wait_until(
            &format!("batching={batching} choose={choose}: the peer's tcpdump writes every frame"),
            Duration::from_secs(30),
            || {
                let n = common::pcap_packets(&got, "");
                (n >= sent.len() as u64)
                    .then_some(())
                    .ok_or(format!("{n} of {} frames", sent.len()))
            },
        );
        let _ = td.interrupt_tcpdump();
        let _ = td_rest.join();
        let received = frames_of(&got);
        assert_eq!(
            received.len(),
            sent.len(),
            "batching={batching} choose={choose}: the peer received every frame once:\n{err}"
        );
        assert!(
            sorted(received.clone()) == sorted(sent.clone()),
            "batching={batching} choose={choose}: the same frames, byte for byte"
        );
        if choose == "flow" {
            // Each flow stays on one ring, so its frames arrive in the order sent.
            fn flow_order(frames: &[Vec<u8>]) -> std::collections::BTreeMap<u64, Vec<&Vec<u8>>> {
                let mut m: std::collections::BTreeMap<u64, Vec<&Vec<u8>>> = Default::default();
                for f in frames {
                    m.entry(kernel::batching::flow_hash(f)).or_default().push(f);
                }
                m
            }
            assert!(
                flow_order(&received) == flow_order(&sent),
                "choose=flow: every flow in order"
            );
        }
        let line = err
            .lines()
            .find(|l| l.starts_with("tx ") && l.contains(" kicks "))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            line.contains(&format!("batching {batching}, 3 rings chosen by {choose}")),
            "{line}"
        );
        assert!(line.contains(&format!("{FRAMES} frames")), "{line}");
    }
}

#[test]
fn batching_parameters_are_checked() {
    for (pipeline, says) in [
        (
            "gen count=1 | tx dev=lo batching=sometimes",
            "batching=sometimes",
        ),
        ("gen count=1 | tx dev=lo choose=first", "choose=first"),
        ("gen count=1 | tx dev=lo queues=0", "queues=0"),
        ("rx dev=lo batching=eager | count", "batching=eager"),
        ("rx dev=lo threshold=0 | count", "threshold=0"),
        ("rx dev=lo batching=fixed rings=2 | count", "rings=2"),
        ("rx dev=lo rings=2 choose=flow | count", "choose=flow"),
    ] {
        let o = Command::new(BIN).args(["run", pipeline]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{pipeline}: {err}");
        assert!(err.contains(says), "{pipeline}: {err}");
    }
}
