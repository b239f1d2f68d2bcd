//! Stopping never loses data (issue 14): however a run is told to stop, its sources end,
//! every sink is flushed into a valid file, the totals are printed, the shared-memory
//! objects and pinned maps it made are removed, and it exits with its documented status
//! (128 + the signal's number for SIGINT, SIGTERM and SIGHUP; 0 when its source ends).
//! The reference is tcpdump under `timeout`: libpcap (tcpdump -r) must read every packet
//! the run counted from its pcapout file. Live capture on a veth pair into a network
//! namespace this test creates; needs root (CI is root): without it the test fails
//! saying so.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kernel::netns::Veth;

mod common;
use common::count_of;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn veth(tag: &str) -> Veth {
    Veth::new(tag).unwrap_or_else(|e| panic!("{e}"))
}

/// The packets libpcap reads from a capture file (tcpdump -r), or the error it gives.
fn libpcap_count(file: &Path) -> Result<u64, String> {
    let o = Command::new("tcpdump")
        .arg("-r")
        .arg(file)
        .arg("-nn")
        .output()
        .expect("tcpdump is required (apt-get install tcpdump)");
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&o.stdout).lines().count() as u64)
}

/// Objects in /dev/shm (runs name theirs `streamline.*`, beltway's `bt-*`). The tests
/// judge only those their own run made (held while it ran, or its share names): a daemon
/// or another run beside them has objects of its own.
fn shm_objects() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("streamline.") || n.starts_with("bt-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Send UDP datagrams to the peer until told to stop (a steady stream the capture sees);
/// `sent` counts them as they go.
fn traffic_counted(
    peer: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> std::thread::JoinHandle<u64> {
    let peer = format!("{peer}:9");
    std::thread::spawn(move || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let mut n: u64 = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if s.send_to(&n.to_le_bytes(), &peer).is_ok() {
                n += 1;
                sent.store(n, std::sync::atomic::Ordering::Relaxed);
            }
            // Paces the sender (a steady stream, not a flood the capture drops).
            std::thread::sleep(Duration::from_micros(200));
        }
        n
    })
}

fn traffic(
    peer: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    traffic_counted(peer, stop, Default::default())
}

/// What the run made and left: objects present now that were not before and that the
/// run held while it ran (`held`) or that carry its share name (`share`, if it shares).
fn left_behind(
    before: &[String],
    held: &std::collections::BTreeSet<String>,
    share: Option<&str>,
) -> Vec<String> {
    shm_objects()
        .into_iter()
        .filter(|n| !before.contains(n))
        .filter(|n| held.contains(n) || share.is_some_and(|s| n.starts_with(s)))
        .collect()
}

fn wait_with_timeout(mut c: Child, limit: Duration) -> std::process::Output {
    let until = Instant::now() + limit;
    loop {
        if c.try_wait().unwrap().is_some() {
            return c.wait_with_output().unwrap();
        }
        if Instant::now() > until {
            let _ = c.kill();
            let o = c.wait_with_output().unwrap();
            panic!(
                "the run did not stop within {limit:?}:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sl-stop-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Start `pipeline` (in its own process group, as a shell job), let traffic flow, send
/// `signal` to the whole group (as `timeout` and a terminal's Ctrl-C do), and check what
/// the run leaves behind.
fn stop_by_signal(signal: &str, number: i32, pipeline_of: impl Fn(&str, &Path) -> String) {
    let v = veth(&format!("st{}", &signal[..3].to_lowercase()));
    let d = dir(signal);
    let file = d.join("out.pcap");
    let before = shm_objects();
    let pipeline = pipeline_of(&v.here, &file);
    let child = {
        use std::os::unix::process::CommandExt;
        Command::new(BIN)
            .args(["run", "-q", &pipeline])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    common::wait_capturing(child.id(), &v.here);
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sender = traffic_counted(&v.peer_ip, stop.clone(), sent.clone());
    common::wait_for("1000 datagrams sent", Duration::from_secs(30), || {
        sent.load(std::sync::atomic::Ordering::Relaxed) >= 1000
    });
    let share = dataplane::channel::share_name(&common::share_key(&pipeline));
    let held = common::shm_held_by_tree(child.id());
    // To the whole group: process spaces get it too and must leave stopping to the run.
    assert!(Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{}", child.id())])
        .status()
        .unwrap()
        .success());
    let out = wait_with_timeout(child, Duration::from_secs(20));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = sender.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(128 + number),
        "{pipeline} stopped by SIG{signal}: exit status\n{err}"
    );
    let counted = count_of(&err);
    assert!(
        counted > 50,
        "{pipeline}: counted {counted} of {sent} datagrams sent before SIG{signal}:\n{err}"
    );
    let read = libpcap_count(&file).unwrap_or_else(|e| {
        panic!(
            "{pipeline} stopped by SIG{signal}: libpcap cannot read {}: {e}\n{err}",
            file.display()
        )
    });
    assert_eq!(read, counted, "{pipeline} stopped by SIG{signal}: libpcap reads {read} packets of the {counted} the run counted\n{err}");
    let left = left_behind(&before, &held, Some(&share));
    assert!(
        left.is_empty(),
        "{pipeline} stopped by SIG{signal} left shared memory behind: {left:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

fn one_space(dev: &str, file: &Path) -> String {
    format!(
        "rx dev={dev} | udp | count | pcapout file={}",
        file.display()
    )
}

/// The same with the sink in a process space and the counter on a thread: the signal
/// reaches every process of the group, and the run still drains and flushes.
fn three_spaces(dev: &str, file: &Path) -> String {
    format!(
        "rx dev={dev} | udp | count space=1 | pcapout file={} space=p2",
        file.display()
    )
}

/// One test for all signals, one run after another (the runs publish their capture for
/// sharing, `streamline.share.*` in /dev/shm, which must be gone after each).
#[test]
fn sigterm_sighup_and_sigint_flush_every_sink_and_remove_what_the_run_made() {
    for (signal, number) in [("TERM", 15), ("HUP", 1), ("INT", 2)] {
        stop_by_signal(signal, number, one_space);
        stop_by_signal(signal, number, three_spaces);
    }
}

#[test]
fn timeout_stops_a_capture_as_it_stops_tcpdump() {
    // The issue's example: `timeout 3 streamline run 'rx dev=lo | pcapout file=x.pcap'`
    // left an empty file. tcpdump under the same `timeout` is the reference: both write a
    // file libpcap reads.
    let v = veth("stto");
    let d = dir("timeout");
    let (ours, theirs) = (d.join("ours.pcap"), d.join("tcpdump.pcap"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // 20 s, not the issue's 3: under CI load a debug build was twice still starting when
    // SIGTERM came (exit 143, no totals: the handlers were not installed yet), at 3 s and
    // once at 6 s (2026-11-27, with the other tests of this file running beside it), and
    // once at 10 s (2026-11-28, the whole suite on 2 cores).
    let run = Command::new("timeout")
        .args([
            "--preserve-status",
            "20",
            BIN,
            "run",
            "--no-share",
            &format!(
                "rx dev={} | udp | count | pcapout file={}",
                v.here,
                ours.display()
            ),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let td = Command::new("timeout")
        .args(["--preserve-status", "20", "tcpdump", "-i", &v.here, "-w"])
        .arg(&theirs)
        .arg("udp")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sender = traffic(&v.peer_ip, stop.clone());
    let out = wait_with_timeout(run, Duration::from_secs(40));
    let _ = wait_with_timeout(td, Duration::from_secs(40));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(143), "{err}");
    let counted = count_of(&err);
    assert!(counted > 0, "{err}");
    assert_eq!(
        libpcap_count(&ours).unwrap_or_else(|e| panic!("{e}")),
        counted,
        "{err}"
    );
    assert!(libpcap_count(&theirs).unwrap_or_else(|e| panic!("tcpdump's own file: {e}")) > 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_closed_output_pipe_ends_the_run_with_its_totals() {
    // `streamline run '... | inspect' | head -1`: inspect finds its output closed; the run
    // stops (as tcpdump does), prints its totals and leaves nothing behind.
    let v = veth("stpi");
    let before = shm_objects();
    let mut child = Command::new(BIN)
        .args([
            "run",
            "-q",
            "--no-share",
            &format!("rx dev={} | udp | count | inspect", v.here),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    common::wait_capturing(child.id(), &v.here);
    let held = common::shm_held_by_tree(child.id());
    let sender = traffic(&v.peer_ip, stop.clone());
    {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("UDP"), "{line}");
        // The reader goes away here: the pipe closes.
    }
    let out = wait_with_timeout(child, Duration::from_secs(20));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a sink that cannot write fails the run:\n{err}"
    );
    assert!(
        err.contains("inspect") && err.contains("Broken pipe"),
        "{err}"
    );
    assert!(count_of(&err) >= 1, "{err}");
    let left = left_behind(&before, &held, None);
    assert!(left.is_empty(), "left shared memory behind: {left:?}");
}

#[test]
fn a_source_that_ends_and_a_failing_sink() {
    // A source that ends: status 0 and a complete file.
    let d = dir("ends");
    let f = d.join("all.pcap");
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");
    let o = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!(
                "pcapin file={sample} | count | pcapout file={}",
                f.display()
            ),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(libpcap_count(&f).unwrap(), count_of(&err));
    assert_eq!(
        libpcap_count(&f).unwrap(),
        libpcap_count(Path::new(sample)).unwrap()
    );
    // A sink that fails (a full disk): the run stops, says why, and exits 1.
    let o = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!("pcapin file={sample} | count | pcapout file=/dev/full"),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/dev/full") && err.contains("No space left on device"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
