//! The NIC-FIX filters (flowcount, sample, bytecount) in the kernel: eBPF socket filters on
//! `rx`'s socket, with their state in pinned BPF maps. The shipped capture is replayed with
//! tcpreplay from a network namespace onto a veth pair this test creates, and what the
//! kernel programs count must equal, exactly, what the user-space implementations count
//! on the same capture file and on a second capture of the same traffic. Needs root and
//! tcpreplay (CI has both); without them the tests fail saying what is missing.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kernel::netns::Veth;

mod common;
use common::{count_of, wait_capturing};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");
/// Frames in examples/sample.pcap (none truncated, none above 1514 bytes).
const FRAMES: u64 = 5247;

fn quiet_veth(tag: &str) -> Veth {
    common::quiet_veth(
        tag,
        "network namespaces, AF_PACKET, loading eBPF programs, bpffs",
    )
}

/// A run, with the file its `--stats` counters are in while it runs.
struct Run {
    child: Child,
    stats: std::path::PathBuf,
}

fn start(pipeline: &str) -> Run {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let stats = std::env::temp_dir().join(format!(
        "sl-ebpf-{}-{}.json",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let child = Command::new(BIN)
        .args(["run", "-q", "--no-share", "--stats"])
        .arg(&stats)
        .arg(pipeline)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn streamline");
    Run { child, stats }
}

/// SIGINT (Ctrl-C), then standard error.
fn stop(r: Run) -> String {
    let Run { child, stats } = r;
    let err = common::interrupt(child);
    let _ = std::fs::remove_file(&stats);
    err
}

/// Waits until `count` at the end of each run has had its blocks (`runs`: the run and
/// what its count gets): everything replayed went through before the run is stopped.
fn wait_counted(runs: &[(&Run, u64)]) {
    for (r, want) in runs {
        common::wait_until(
            &format!("run {}'s count to get {want} frames", r.child.id()),
            Duration::from_secs(60),
            || match common::stats_counter(&r.stats, "count", "blocks_in") {
                Some(n) if n == *want => Ok(()),
                n => Err(format!("count has {n:?}")),
            },
        );
    }
}

/// Replays the sample from the namespace's end of the pair at a modest rate (so no ring
/// overflows), waits for it to finish.
fn replay(v: &Veth) {
    let o = v
        .command("tcpreplay")
        .args(["-q", "-i", &v.there, "--pps", "2000", SAMPLE])
        .output()
        .expect("run tcpreplay");
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tcpreplay failed:\n{out}");
    assert!(
        out.contains(&format!("Actual: {FRAMES} packets")),
        "tcpreplay sent every frame:\n{out}"
    );
}

/// The lines a filter prints as its totals: the one starting with `name:` and the
/// indented ones after it.
fn totals(err: &str, name: &str) -> String {
    let mut lines = err
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{name}: ")));
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no `{name}:` totals in:\n{err}"));
    std::iter::once(first)
        .chain(lines.take_while(|l| l.starts_with("  ")))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rx_line(err: &str) -> String {
    err.lines()
        .find(|l| l.starts_with("rx "))
        .unwrap_or_else(|| panic!("no rx summary:\n{err}"))
        .to_string()
}

/// The file through the user-space implementation.
fn from_file(filter: &str) -> String {
    let o = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!("pcapin file={SAMPLE} | {filter} | count"),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    err
}

fn pin_dir(pid: u32) -> std::path::PathBuf {
    std::path::Path::new("/sys/fs/bpf/streamline").join(pid.to_string())
}

#[test]
fn kernel_flowcount_equals_user_space_and_its_maps_are_readable_while_it_runs() {
    let v = quiet_veth("fc");
    let kernel = start(&format!("rx dev={} | flowcount top=1000 | count", v.here));
    let user = start(&format!(
        "rx dev={} | flowcount top=1000 placed=user | count",
        v.here
    ));
    let kpid = kernel.child.id();
    for c in [&kernel, &user] {
        wait_capturing(c.child.id(), &v.here);
    }
    replay(&v);
    // The kernel's flowcount passes every frame on.
    wait_counted(&[(&kernel, FRAMES), (&user, FRAMES)]);
    // While it runs: `streamline maps` shows the run's flows with their counters.
    let o = Command::new(BIN)
        .args(["maps", "--top", "3"])
        .output()
        .unwrap();
    let maps = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{maps}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ours = maps
        .split("\nrun ")
        .find(|b| {
            b.trim_start_matches("run ")
                .starts_with(&format!("{kpid} "))
        })
        .unwrap_or_else(|| panic!("run {kpid} not listed:\n{maps}"));
    assert!(
        ours.contains("flowcount") && ours.contains("flows, totals"),
        "{maps}"
    );
    assert!(
        ours.contains(&format!("flowcount: {FRAMES} packets")),
        "non-zero counters while running:\n{maps}"
    );
    assert!(
        ours.contains("tcp 10.99.0.1:56182 > 10.99.0.2:9000: 1534 packets"),
        "{maps}"
    );
    assert!(pin_dir(kpid).is_dir());
    let k = stop(kernel);
    let u = stop(user);
    // The kernel program ran (on the socket), the user-space one did not.
    assert!(
        rx_line(&k).contains("after its eBPF program (flowcount)"),
        "{k}"
    );
    assert!(!rx_line(&u).contains("eBPF"), "{u}");
    let file = totals(&from_file("flowcount top=1000"), "flowcount");
    assert!(
        file.starts_with(&format!("flowcount: {FRAMES} packets")),
        "{file}"
    );
    assert_eq!(
        totals(&k, "flowcount"),
        file,
        "kernel flowcount vs user space on the file"
    );
    assert_eq!(
        totals(&u, "flowcount"),
        file,
        "user-space flowcount on the capture vs the file"
    );
    // Pins go with the run.
    assert!(
        !pin_dir(kpid).exists(),
        "{} left behind",
        pin_dir(kpid).display()
    );
}

#[test]
fn kernel_bytecount_equals_user_space() {
    let v = quiet_veth("bc");
    let kernel = start(&format!("rx dev={} | bytecount top=256 | count", v.here));
    let user = start(&format!(
        "rx dev={} | bytecount top=256 placed=user | count",
        v.here
    ));
    let short = start(&format!("rx dev={} | bytecount 35 top=256 | count", v.here));
    for c in [&kernel, &user, &short] {
        wait_capturing(c.child.id(), &v.here);
    }
    replay(&v);
    wait_counted(&[(&kernel, FRAMES), (&user, FRAMES), (&short, FRAMES)]);
    let (k, u, s) = (stop(kernel), stop(user), stop(short));
    assert!(
        rx_line(&k).contains("after its eBPF program (bytecount)"),
        "{k}"
    );
    assert!(
        rx_line(&s).contains("after its eBPF program (bytecount)"),
        "{s}"
    );
    let file = totals(&from_file("bytecount top=256"), "bytecount");
    assert!(
        file.starts_with(&format!("bytecount: {FRAMES} packets")),
        "{file}"
    );
    assert_eq!(
        totals(&k, "bytecount"),
        file,
        "kernel bytecount vs user space on the file"
    );
    assert_eq!(
        totals(&u, "bytecount"),
        file,
        "user-space bytecount on the capture vs the file"
    );
    // Thesis C1: only the first 35 bytes of each frame.
    assert_eq!(
        totals(&s, "bytecount"),
        totals(&from_file("bytecount 35 top=256"), "bytecount")
    );
    assert!(totals(&s, "bytecount").starts_with(&format!(
        "bytecount: {FRAMES} packets, {} bytes counted (first 35 of each)",
        FRAMES * 35
    )));
}

#[test]
fn kernel_sample_passes_the_same_count_and_keeps_the_rest_out_of_user_space() {
    let v = quiet_veth("sa");
    let kernel = start(&format!("rx dev={} | sample 10 | count", v.here));
    let user = start(&format!(
        "rx dev={} | sample 10 placed=user | count",
        v.here
    ));
    for c in [&kernel, &user] {
        wait_capturing(c.child.id(), &v.here);
    }
    replay(&v);
    let expect = FRAMES / 10;
    wait_counted(&[(&kernel, expect), (&user, expect)]);
    let (k, u) = (stop(kernel), stop(user));
    let line = format!("sample: 1 in 10: {FRAMES} seen, {expect} passed");
    assert_eq!(totals(&k, "sample"), line, "{k}");
    assert_eq!(totals(&u, "sample"), line, "{u}");
    assert_eq!(totals(&from_file("sample 10"), "sample"), line);
    assert_eq!(count_of(&k), expect);
    assert_eq!(count_of(&u), expect);
    // In the kernel the other frames never reached user space; in user space all did.
    assert!(
        rx_line(&k).contains(&format!("{expect} packets delivered")),
        "{k}"
    );
    assert!(
        rx_line(&k).contains("after its eBPF program (sample)"),
        "{k}"
    );
    assert!(
        rx_line(&u).contains(&format!("{FRAMES} packets delivered")),
        "{u}"
    );
}

#[test]
fn nicfix_options_errors_are_clear() {
    let run = |p: &str| {
        let o = Command::new(BIN).args(["run", p]).output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for (pipeline, says) in [
        (
            "rx dev=lo | sample 0 | count",
            "parameter every=0: expected at least 1",
        ),
        (
            "rx dev=lo | sample prob=2 | count",
            "parameter prob=2: expected a probability in 0..1",
        ),
        (
            "rx dev=lo | flowcount flows=0 | count",
            "parameter flows=0: expected 1..=16M",
        ),
        (
            "rx dev=lo | flowcount flows=lots | count",
            "flows=lots: expected a size",
        ),
        (
            "rx dev=lo | bytecount len=5000 | count",
            "parameter len=5000: expected 1..=4096",
        ),
        (
            &format!("pcapin file={SAMPLE} | flowcount placed=kernel | count"),
            "placed=kernel is set by the kernel placement",
        ),
        (
            "rx dev=lo | bytecount top=x | count",
            "top=x: expected a non-negative whole number",
        ),
    ] {
        let (code, err) = run(pipeline);
        assert_eq!(code, 2, "{pipeline}: {err}");
        assert!(
            err.contains(says),
            "{pipeline}: expected '{says}' in:\n{err}"
        );
    }
    // Unknown keys are parse errors with a caret.
    let (code, err) = run("rx dev=lo | flowcount flow=10 | count");
    assert_eq!(code, 2);
    assert!(err.contains("flow") && err.contains('^'), "{err}");
}

#[test]
fn maps_watch_must_be_positive() {
    let o = Command::new(BIN)
        .args(["maps", "--watch", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--watch 0"));
}

/// `ips`'s `N packets` (judged) and its frames passed unjudged, from its summary line.
fn ips_counts(err: &str) -> (u64, u64) {
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("ips: "))
        .unwrap_or_else(|| panic!("no `ips:` line in:\n{err}"));
    let judged = line.split_whitespace().next().unwrap().parse().unwrap();
    let unjudged = line
        .split("; ")
        .find_map(|p| p.strip_suffix(" frames no rule looks at passed unjudged (the header stage)"))
        .map_or(0, |n| n.parse().unwrap());
    (judged, unjudged)
}

/// The rule ids of a fast.log, sorted (the times are the capture's: live, not the file's).
fn sids(fast: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(fast).unwrap_or_else(|e| panic!("{}: {e}", fast.display()));
    let mut v: Vec<String> = text
        .lines()
        .map(|l| l.split("[**]").nth(1).unwrap_or(l).trim().to_string())
        .collect();
    v.sort();
    v
}

/// Kernel Snort's push-down (issue 36): `rx | ips` puts the rules' header stage on the
/// capture socket, so the frames no rule looks at never reach user space, and alerts as
/// `placed=user` does (which refuses those frames in user space with the same program)
/// and as the capture file itself gives.
#[test]
fn ips_header_stage_on_the_socket_alerts_as_in_user_space_and_hands_over_fewer_frames() {
    let v = quiet_veth("ips");
    let d = std::env::temp_dir().join(format!("sl-ebpf-ips-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/ips.rules");
    let fast = |k: &str| d.join(format!("fast-{k}.log"));
    let kernel = start(&format!(
        "rx dev={} | ips rules={rules} mode=ids fast={}",
        v.here,
        fast("kernel").display()
    ));
    let user = start(&format!(
        "rx dev={} | ips rules={rules} mode=ids placed=user fast={}",
        v.here,
        fast("user").display()
    ));
    for c in [&kernel, &user] {
        wait_capturing(c.child.id(), &v.here);
    }
    replay(&v);
    // Everything replayed judged: the user run's ips has had every frame, the kernel
    // run's as many as it had a second ago.
    let mut last = None;
    common::wait_until(
        "both runs' ips to have every frame",
        Duration::from_secs(60),
        || {
            let u = common::stats_counter(&user.stats, "ips", "blocks_in");
            let k = common::stats_counter(&kernel.stats, "ips", "blocks_in");
            let settled = u >= Some(FRAMES) && k.is_some() && last == Some(k);
            last = Some(k);
            std::thread::sleep(Duration::from_millis(500));
            if settled {
                Ok(())
            } else {
                Err(format!("user {u:?}, kernel {k:?}"))
            }
        },
    );
    let (ke, ue) = (stop(kernel), stop(user));
    let file = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!(
                "pcapin file={SAMPLE} | ips rules={rules} mode=ids fast={}",
                fast("file").display()
            ),
        ])
        .output()
        .unwrap();
    assert!(
        file.status.success(),
        "{}",
        String::from_utf8_lossy(&file.stderr)
    );
    let (k_sids, u_sids, f_sids) = (
        sids(&fast("kernel")),
        sids(&fast("user")),
        sids(&fast("file")),
    );
    assert!(!f_sids.is_empty(), "the sample gives alerts");
    assert_eq!(
        k_sids, u_sids,
        "kernel vs user placement of the header stage"
    );
    // Live, the replay's pace sets the times thresholds count in: the same rules alert.
    let distinct = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    assert_eq!(
        distinct(&k_sids),
        distinct(&f_sids),
        "live vs the capture file"
    );
    // The same frames judged; the kernel handed over only those.
    let ((kj, ku), (uj, uu)) = (ips_counts(&ke), ips_counts(&ue));
    assert_eq!(ku, 0, "kernel: nothing left for user space to refuse\n{ke}");
    assert_eq!(kj, uj, "judged the same packets:\n{ke}\n{ue}");
    let delivered = |err: &str| -> u64 {
        rx_line(err)
            .split(": ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{err}"))
    };
    let (kd, ud) = (delivered(&ke), delivered(&ue));
    assert!(
        uu > 0,
        "the sample has frames no rule of examples/ips.rules looks at (UDP off port 53):\n{ue}"
    );
    assert_eq!(
        kd + uu,
        ud,
        "the socket kept back exactly what user space refused:\n{ke}\n{ue}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
