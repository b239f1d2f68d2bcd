//! Prefix sharing under load: a shared live capture never lets one slow subscriber stall
//! the others. A publishing run captures on a veth pair into a network namespace this
//! test creates; two runs with the same prefix subscribe to its stream; one of them is
//! stopped (SIGSTOP) while tcpreplay replays the shipped capture from the namespace, more
//! than the shared ring holds; tcpdump on the same interface counts the reference. Needs
//! root and tcpdump and tcpreplay (CI has them); without them the test fails saying what
//! is missing.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kernel::netns::Veth;

mod common;
use common::{count_of, spawn_run_stats, tcpdump_listening, wait_for, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");
/// Tag slots of a published stream (`ChannelConfig::default().slots`): a subscriber more
/// than this many blocks behind has lost some.
const SLOTS: u64 = 4096;

fn require_root_and_tools() {
    for (tool, arg) in [("tcpreplay", "--version"), ("tcpdump", "--version")] {
        let ok = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "{tool} is required (apt-get install {tool}; scripts/setup installs it)"
        );
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?")
        .to_string();
    assert_eq!(euid, "0", "this test needs root (network namespaces, AF_PACKET capture: CAP_SYS_ADMIN and CAP_NET_RAW)");
}

/// A veth pair whose ends send nothing of their own (no IPv6 neighbour discovery), so
/// what crosses it is exactly the replay.
fn quiet_veth() -> Veth {
    require_root_and_tools();
    common::quiet_pair("sh")
}

fn spawn_run(pipeline: &str) -> Child {
    Command::new(BIN)
        .args(["run", pipeline])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn streamline")
}

fn signal(c: &Child, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &c.id().to_string()])
            .status()
            .unwrap()
            .success(),
        "kill {sig} {}",
        c.id()
    );
}

/// Waits at most `limit` for `c` to exit: its exit code and standard error. A run still
/// going after that is killed and the test fails, naming it.
fn wait_bounded(mut c: Child, what: &str, limit: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + limit;
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = c.kill();
            let out = c.wait_with_output().unwrap();
            panic!(
                "{what} did not end within {limit:?} (hung):\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = c.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A subscriber's summary line: (blocks received, blocks lost). Said by the node the
/// user wrote that the subscription stands for, the shared prefix's last (`bpf: 10 blocks
/// received, lost 0 ...`), as the table's row is; never by the internal `__subscribe`.
fn subscription(err: &str) -> (u64, u64) {
    assert!(
        !err.contains("__subscribe"),
        "an internal node's name shown:\n{err}"
    );
    let line = err
        .lines()
        .find(|l| l.starts_with("bpf: ") && l.contains(" blocks received, lost "))
        .unwrap_or_else(|| panic!("no subscription summary (bpf: ... received):\n{err}"));
    let num = |s: Option<&str>| {
        s.and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"))
    };
    (
        num(line.strip_prefix("bpf: ")),
        num(line.split("lost ").nth(1)),
    )
}

// Over 150 lines: one scenario whose steps depend on each other (a publisher, a live and
// a stopped subscriber, traffic, then each side's counts against tcpdump's).
#[test]
fn a_stopped_subscriber_loses_its_own_packets_and_stalls_no_one() {
    let v = quiet_veth();
    let dir = std::env::temp_dir().join(format!("sl-share-slow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("td.pcap");
    let sub_pipeline = format!("rx dev={} | bpf \"tcp\" | count", v.here);
    let key = common::share_key(&sub_pipeline);

    // The publisher's capture ring is small (4 blocks of 1 MiB, about a second of this
    // replay): a publisher held back by a stopped subscriber would overflow it and lose
    // frames in the kernel, and the live subscriber with it.
    let (stats_p, stats_l) = (dir.join("publisher.json"), dir.join("live.json"));
    let publisher = spawn_run_stats(
        &format!("rx dev={} blocks=4 | bpf \"tcp\" | count", v.here),
        &stats_p,
    );
    wait_for(
        "the first run publishes its capture",
        Duration::from_secs(10),
        || dataplane::channel::published(&key).is_some(),
    );
    let live = spawn_run_stats(&sub_pipeline, &stats_l);
    let stopped = spawn_run(&sub_pipeline);
    let tags =
        beltway::RingRef::open(&format!("{}.tags", dataplane::channel::share_name(&key))).unwrap();
    wait_for("both subscribers attach", Duration::from_secs(10), || {
        tags.readers() == 2
    });
    drop(tags);
    signal(&stopped, "-STOP");

    let mut tcpdump = Command::new("tcpdump");
    // -U: each packet is in the file at once (the wait below reads it).
    tcpdump
        .args(["--immediate-mode", "-U", "-B", "65536", "-i", &v.here, "-w"])
        .arg(&pcap)
        .arg("tcp")
        .stdout(Stdio::null());
    let (td, td_rest) = tcpdump_listening(tcpdump);
    // Three times the sample: about 13,700 TCP frames, 12 MB, over three seconds.
    let o = v
        .command("tcpreplay")
        .args(["-q", "-i", &v.there, "--pps", "5000", "--loop", "3", SAMPLE])
        .output()
        .expect("run tcpreplay");
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tcpreplay failed:\n{out}");
    // Until the publisher and the live subscriber have counted what tcpdump captured
    // (checked below from their ends), the stopped one still stopped.
    wait_until(
        "the publisher and the live subscriber count what tcpdump captured",
        Duration::from_secs(30),
        || {
            let td = common::pcap_packets(&pcap, "");
            let (p, l) = (
                common::stats_counter(&stats_p, "count", "blocks_in"),
                common::stats_counter(&stats_l, "count", "blocks_in"),
            );
            (td > 2 * SLOTS && p == Some(td) && l == Some(td))
                .then_some(())
                .ok_or(format!("tcpdump {td}, publisher {p:?}, live {l:?}"))
        },
    );
    signal(&stopped, "-CONT");
    // Until it runs again (it reads the rest as its publisher ends, below).
    wait_for(
        "the stopped subscriber to resume",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(format!("/proc/{}/stat", stopped.id()))
                .ok()
                .and_then(|s| Some(s.rsplit_once(") ")?.1.chars().next()? != 'T'))
                .unwrap_or(true)
        },
    );

    // The publisher ends; its subscribers read what it published, then end too.
    signal(&publisher, "-INT");
    let (code_p, err_p) = wait_bounded(publisher, "the publishing run", Duration::from_secs(20));
    let (code_l, err_l) = wait_bounded(live, "the live subscriber", Duration::from_secs(20));
    let (code_s, err_s) = wait_bounded(stopped, "the stopped subscriber", Duration::from_secs(20));
    signal(&td, "-INT");
    wait_bounded(td, "tcpdump", Duration::from_secs(20));
    let td_err = td_rest.join().unwrap();
    let o = Command::new("tcpdump")
        .arg("-r")
        .arg(&pcap)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let n_td = String::from_utf8_lossy(&o.stdout).lines().count() as u64;
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(code_p, Some(130), "the publisher was interrupted:\n{err_p}");
    assert_eq!(
        code_l,
        Some(0),
        "the live subscriber ended with its publisher:\n{err_l}"
    );
    assert_eq!(
        code_s,
        Some(0),
        "the stopped subscriber ended with its publisher:\n{err_s}"
    );
    for err in [&err_l, &err_s] {
        assert!(
            err.contains("sharing `rx dev=") && err.contains("bpf \"tcp\"`"),
            "a subscriber:\n{err}"
        );
    }
    assert!(
        td_err
            .lines()
            .any(|l| l.trim() == "0 packets dropped by kernel"),
        "tcpdump dropped nothing:\n{td_err}"
    );
    assert!(
        n_td > 2 * SLOTS,
        "tcpdump saw {n_td} TCP frames: enough to lap the shared ring twice"
    );

    // The publisher was not held back: it captured every frame.
    assert_eq!(
        count_of(&err_p),
        n_td,
        "the publisher counts what tcpdump counts:\n{err_p}"
    );
    let rx = err_p
        .lines()
        .find(|l| l.starts_with(&format!("rx {}: ", v.here)))
        .unwrap_or_else(|| panic!("no rx summary:\n{err_p}"));
    assert!(rx.contains(" 0 dropped by the kernel"), "{rx}");
    // The live subscriber lost nothing.
    assert_eq!(
        count_of(&err_l),
        n_td,
        "the live subscriber counts what tcpdump counts:\n{err_l}"
    );
    assert_eq!(
        subscription(&err_l),
        (n_td, 0),
        "the live subscriber:\n{err_l}"
    );
    // The stopped one lost its own packets, counted them, and got the rest.
    let (received, lost) = subscription(&err_s);
    assert_eq!(received, count_of(&err_s), "{err_s}");
    assert!(
        lost > 0,
        "the stopped subscriber reports its losses:\n{err_s}"
    );
    assert!(
        received >= SLOTS,
        "it read at least the ring's worth it found on waking:\n{err_s}"
    );
    assert_eq!(
        received + lost,
        n_td,
        "received and lost account for every frame:\n{err_s}"
    );

    // The published names are gone with the publisher.
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains(&key))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
