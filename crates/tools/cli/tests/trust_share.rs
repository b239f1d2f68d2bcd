//! Issue 33, "sharing by identity": prefix sharing between runs never crosses users. A
//! run attaches to another's published capture only if the publisher is the same user
//! (or root) — by the owner of the ring files, not their name — and the kernel lets it
//! read them; subscribers map the published rings read-only (but for their reader slot);
//! and whichever of root and uid 65534 starts first, neither run fails nor reads the
//! other's data, even when uid 65534 squats the names root's run would use.
//!
//! Against a real daemon whose policy grants uid 65534 `rx dev=lo | bpf "udp port 53 or
//! udp port N"` (N this process's own),
//! with UDP datagrams the test sends to 127.0.0.1:53 (a bounded number; nothing needs
//! to listen there). Needs root (the daemon, captures) and /dev/fuse (PipesFS).

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::daemon::Daemon;
use common::wait_for;

/// One test at a time: they all capture on `lo` with the same template, so a run of one
/// would share the prefix another test's run publishes (the same user, the same key).
static LO: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The capture of this test process's runs: port 53 (where the test sends), or a port of
/// its own that nothing sends to, so that the prefix's share key is this process's own: a
/// daemon or another test on the machine capturing port 53 on lo publishes under another
/// key, and no run here subscribes to it or is taken for one of ours.
fn prefix() -> String {
    format!(
        "rx dev=lo | bpf \"udp port 53 or udp port {}\"",
        1024 + std::process::id() % 60000
    )
}

fn pipeline() -> String {
    format!("{} | count", prefix())
}

fn policy() -> String {
    format!(
        "[[grant]]\nusers = [\"65534\"]\ntemplate = '{}'\nmode = \"0640\"\n",
        prefix()
    )
}
/// Datagrams sent while every run captures: each run counts at least this many.
const SENT: u64 = 100;

/// The /dev/shm files of the stream published under `key` (any user's), with their owners.
fn share_files(key: &str) -> Vec<(String, u32)> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let m = e.metadata().ok()?;
            (n.starts_with("streamline.share.") && n.contains(&format!("{key}.")))
                .then_some((n, m.uid()))
        })
        .collect()
}

/// Wait until uid `uid` publishes `key` (its tag ring exists, owned by it).
fn wait_published(key: &str, uid: u32) {
    wait_for(
        &format!("uid {uid} publishes {key}"),
        Duration::from_secs(20),
        || {
            share_files(key)
                .iter()
                .any(|(n, u)| *u == uid && n.ends_with(".tags"))
        },
    );
}

fn spawn(mut c: Command) -> Child {
    c.args(["run", "--plan", "none", &pipeline()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait until `n` runs are running and every worker of the daemon captures on lo.
fn wait_running(d: &Daemon, n: usize) {
    wait_for(
        &format!("{n} runs running"),
        Duration::from_secs(20),
        || d.ps().lines().filter(|l| l.contains("running")).count() == n,
    );
    d.wait_workers_capturing("lo");
}

/// Wait until the `count` of each of the daemon's `n` runs has counted what was sent (the
/// counters the workers report; a run interrupted earlier would drop what its capture
/// ring still holds).
fn wait_counted(d: &Daemon, n: usize) {
    wait_for(
        "every run counts the datagrams",
        Duration::from_secs(20),
        || {
            let r = d.raw(&["hello", "ps"]);
            let runs = r
                .iter()
                .find_map(|m| m.get("runs").and_then(|v| v.as_array()).cloned())
                .unwrap_or_default();
            runs.len() == n
                && runs.iter().all(|run| {
                    run["nodes"].as_array().is_some_and(|nodes| {
                        nodes
                            .iter()
                            .any(|c| c["label"] == "count" && c["blocks_in"].as_u64() >= Some(SENT))
                    })
                })
        },
    );
}

fn send_dns_datagrams() {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..SENT {
        s.send_to(format!("query {i}").as_bytes(), "127.0.0.1:53")
            .unwrap();
    }
}

/// Names uid 65534 linked to in /dev/shm, removed (by root) when dropped.
struct Squatted(Vec<String>);

impl Drop for Squatted {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn as_nobody(args: &[&str]) {
    let ok = common::daemon::as_nobody(args[0])
        .args(&args[1..])
        .status()
        .unwrap()
        .success();
    assert!(ok, "as uid 65534: {args:?}");
}

fn assert_counted(err: &str, who: &str) {
    assert!(
        common::count_of(err) >= SENT,
        "{who} counts the {SENT} datagrams sent:\n{err}"
    );
}

#[test]
fn root_never_subscribes_to_a_stream_of_uid_65534_even_under_roots_names() {
    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    let d = Daemon::start("shrsq", Some(&policy()));
    let key = common::share_key(&pipeline());
    let nobody = spawn(d.cli_as_nobody());
    wait_published(&key, 65534);
    // uid 65534 also puts its live stream under the names root's run would publish and
    // look for: its own files, hard-linked (a name under /dev/shm is anyone's to take).
    let mut squatted = Squatted(vec![]);
    for (name, _) in share_files(&key) {
        let suffix = &name[name.find(&key).unwrap() + key.len()..];
        let to = format!("/dev/shm/streamline.share.0.{key}{suffix}");
        as_nobody(&["ln", &format!("/dev/shm/{name}"), &to]);
        squatted.0.push(to);
    }
    let root = spawn(d.cli());
    // Root's run captures for itself (a subscriber would hold no socket).
    wait_running(&d, 2);
    send_dns_datagrams();
    wait_counted(&d, 2);
    let root_err = common::interrupt(root);
    let nobody_err = common::interrupt(nobody);
    assert!(
        !root_err.contains("sharing `"),
        "root's run subscribed to a stream of uid 65534:\n{root_err}"
    );
    assert_counted(&root_err, "root's run");
    assert_counted(&nobody_err, "the run of uid 65534");
    // Root's own names were taken: it says it does not publish, and why.
    assert!(
        root_err.contains("not publishing the shared prefix") && root_err.contains("uid 65534"),
        "{root_err}"
    );
    drop(squatted);
}

#[test]
fn a_run_of_uid_65534_started_after_roots_captures_on_its_own() {
    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    let d = Daemon::start("shrrf", Some(&policy()));
    let key = common::share_key(&pipeline());
    let root = spawn(d.cli());
    wait_published(&key, 0);
    let nobody = spawn(d.cli_as_nobody());
    // Both run, each with its own capture.
    wait_running(&d, 2);
    send_dns_datagrams();
    wait_counted(&d, 2);
    let nobody_err = common::interrupt(nobody);
    let root_err = common::interrupt(root);
    assert!(!nobody_err.contains("sharing `"), "{nobody_err}");
    assert_counted(&nobody_err, "the run of uid 65534");
    assert_counted(&root_err, "root's run");
    // It published its own stream, under its own name and as its own files.
    assert!(
        !nobody_err.contains("not publishing"),
        "nothing stood in its way:\n{nobody_err}"
    );
}

#[test]
fn runs_of_one_user_share_and_the_subscriber_maps_the_stream_read_only() {
    let _lo = LO.lock().unwrap_or_else(|e| e.into_inner());
    let d = Daemon::start("shrsame", Some(&policy()));
    let key = common::share_key(&pipeline());
    let first = spawn(d.cli_as_nobody());
    wait_published(&key, 65534);
    let second = spawn(d.cli_as_nobody());
    let (tags, _) = share_files(&key)
        .into_iter()
        .find(|(n, u)| *u == 65534 && n.ends_with(".tags"))
        .unwrap();
    let ring = beltway::RingRef::open(&tags).unwrap();
    wait_for("the second run subscribes", Duration::from_secs(20), || {
        ring.readers() == 1
    });
    drop(ring);
    // The subscriber is the daemon's newest worker; what it maps of the stream.
    let out = Command::new("pgrep")
        .args(["-n", "-x", common::worker(), "-P", &d.pid().to_string()])
        .output()
        .unwrap();
    let sub = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let maps = std::fs::read_to_string(format!("/proc/{sub}/maps")).unwrap();
    let mapped: Vec<&str> = maps.lines().filter(|l| l.contains(&key)).collect();
    assert!(
        mapped.iter().any(|l| l.ends_with(".data")),
        "the subscriber maps the data ring:\n{maps}"
    );
    for l in &mapped {
        let perms = l.split_whitespace().nth(1).unwrap();
        // Its reader slot is in the tag ring's control segment; nothing else is writable.
        assert!(
            l.ends_with(".tags.ctl") || !perms.contains('w'),
            "the subscriber maps a published ring writable: {l}"
        );
    }
    send_dns_datagrams();
    wait_counted(&d, 2);
    // The publisher's end ends its subscriber.
    let first_err = common::interrupt(first);
    let out = second.wait_with_output().unwrap();
    let second_err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(second_err.contains("sharing `rx dev="), "{second_err}");
    assert_counted(&first_err, "the publishing run");
    assert_counted(&second_err, "the subscribing run");
}
