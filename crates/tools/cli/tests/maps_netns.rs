//! `streamline maps` sees runs started in other network namespaces (issue 41).
//! `ip netns exec` gives its command a mount namespace of its own with a fresh sysfs, so
//! a run started under it pins its maps in a bpffs this namespace does not see; `maps`
//! reaches them through the run's /proc/PID/root. The run captures on the namespace's end
//! of a veth pair; the shipped capture is replayed onto it from here, and `maps` must
//! show the run with every frame counted. Needs root, eBPF, bpffs and tcpreplay.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");
/// Frames in examples/sample.pcap.
const FRAMES: u64 = 5247;

/// `streamline maps`' block for run `pid` (from its `run PID ` line to the next run).
fn block_of(maps: &str, pid: u32) -> Option<String> {
    let head = format!("run {pid} ");
    let start = maps.lines().position(|l| l.starts_with(&head))?;
    Some(
        maps.lines()
            .skip(start)
            .enumerate()
            .take_while(|(i, l)| *i == 0 || !l.starts_with("run "))
            .map(|(_, l)| l)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

fn maps() -> String {
    let o = Command::new(BIN)
        .args(["maps", "--top", "3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn maps_lists_a_run_started_under_ip_netns_exec() {
    let v = common::quiet_veth(
        "mns",
        "network namespaces, AF_PACKET, loading eBPF programs, bpffs",
    );
    let run = v
        .command(BIN)
        .args([
            "run",
            "-q",
            "--no-share",
            &format!("rx dev={} | flowcount top=10 | count", v.there),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `ip netns exec` runs the command in its place: the child is the run.
    let pid = run.id();
    let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let mut listed = String::new();
    common::wait_for(
        "maps to list the run started in the other namespace",
        Duration::from_secs(20),
        || {
            listed = maps();
            block_of(&listed, pid).is_some()
        },
    );
    // It really is in another mount namespace, its pins invisible here by path.
    assert_ne!(
        std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap(),
        ours
    );
    assert!(
        !std::path::Path::new(&format!("/sys/fs/bpf/streamline/{pid}")).exists(),
        "the run's pins are in this namespace's bpffs: the test would prove nothing"
    );
    // Its maps are read, not only listed: every replayed frame is counted.
    let o = Command::new("tcpreplay")
        .args(["-q", "-i", &v.here, "--pps", "2000", SAMPLE])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = format!("flowcount: {FRAMES} packets");
    common::wait_for("maps to show every frame", Duration::from_secs(20), || {
        listed = maps();
        block_of(&listed, pid).is_some_and(|b| b.contains(&want))
    });
    let b = block_of(&listed, pid).unwrap();
    assert!(
        b.contains("flowcount") && b.contains("flows, totals"),
        "{b}"
    );
    let err = common::interrupt(run);
    assert!(err.contains(&want), "{err}");
}
