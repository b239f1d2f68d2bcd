//! End-to-end tests of `streamlined` and the `streamline` command as its client: a real
//! daemon on a socket of each test's own, real workers, clients as root and as uid 65534
//! (through util-linux's setpriv), and a raw-protocol client written in Python from the
//! protocol's documentation (tests/common/rawclient.py).

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, BIN, PYTHON, RAW};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn run_ids(ps: &str) -> Vec<u64> {
    ps.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The BLOCKS/S figure `ps` shows for run `id` (the number after the uptime, which
/// ends in `s`; `k`, `M`, `G` scale it), or None when the run is not listed.
fn rate_in_ps(ps: &str, id: u64) -> Option<f64> {
    let line = ps
        .lines()
        .skip(1)
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))?;
    let mut words = line.split_whitespace();
    words.find(|w| {
        w.strip_suffix('s')
            .is_some_and(|n| n.parse::<f64>().is_ok())
    })?;
    let rate = words.next()?;
    let (n, scale) = match rate.char_indices().last()? {
        (i, 'k') => (&rate[..i], 1e3),
        (i, 'M') => (&rate[..i], 1e6),
        (i, 'G') => (&rate[..i], 1e9),
        _ => (rate, 1.0),
    };
    Some(n.parse::<f64>().ok()? * scale)
}

/// Counter `key` of the filter labelled `label` in run `id`, from its PipesFS `.stats`
/// (found anywhere under the run's directory), or None while it is not there.
fn node_counter(d: &Daemon, id: u64, label: &str, key: &str) -> Option<u64> {
    fn find(dir: &Path, label: &str, key: &str) -> Option<u64> {
        let stats = std::fs::read_to_string(dir.join(".stats")).ok();
        if let Some(s) = stats {
            if s.lines().any(|l| l.strip_prefix("label ") == Some(label)) {
                return s
                    .lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok());
            }
        }
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let p = e.path();
            // Real directories only: a filter with several inputs is a link under the others.
            if e.file_type().ok()?.is_dir() {
                if let Some(v) = find(&p, label, key) {
                    return Some(v);
                }
            }
        }
        None
    }
    find(&d.mount().join(id.to_string()), label, key)
}

/// Wait until `label`'s counter `key` in run `id` is above `than` (at most `limit`, then
/// fail saying what was awaited and what was last seen); its new value.
fn wait_counter_above(
    d: &Daemon,
    id: u64,
    label: &str,
    key: &str,
    than: u64,
    limit: Duration,
) -> u64 {
    let t0 = Instant::now();
    loop {
        let now = node_counter(d, id, label, key);
        if let Some(n) = now.filter(|&n| n > than) {
            return n;
        }
        assert!(
            t0.elapsed() < limit,
            "{label}'s {key} in run {id} did not pass {than} within {limit:?} (last seen {now:?}); daemon log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_run_through_the_daemon_prints_and_exits_as_a_standalone_run() {
    let d = Daemon::start("same", None);
    let p = "gen count=200000 size=100 | count";
    let via = d.cli().args(["run", "--plan", "none", p]).output().unwrap();
    let alone = Command::new(BIN)
        .args(["--socket", "none", "run", "--plan", "none", p])
        .output()
        .unwrap();
    let ((_, ve), (_, ae)) = (text(&via), text(&alone));
    assert!(via.status.success() && alone.status.success(), "{ve}\n{ae}");
    assert_eq!(common::count_of(&ve), 200000, "{ve}");
    assert_eq!(common::count_of(&ve), common::count_of(&ae));
    assert!(
        ve.lines()
            .any(|l| l == "count: 200000 blocks, 20000000 bytes"),
        "{ve}"
    );
    // Data written to standard output reaches the client's standard output.
    let out = d
        .cli()
        .args(["run", "-q", "gen count=3 size=4 | stdout"])
        .output()
        .unwrap();
    assert_eq!(out.stdout.len(), 12, "{:?}", text(&out));
    // A pipeline that does not parse: the same caret, exit status 2.
    let bad = d
        .cli()
        .args(["run", "gen count=3 | countt"])
        .output()
        .unwrap();
    let (_, be) = text(&bad);
    assert_eq!(bad.status.code(), Some(2), "{be}");
    assert!(be.contains("countt") && be.contains('^'), "{be}");
    assert!(run_ids(&d.ps()).is_empty(), "{}", d.ps());
}

#[test]
fn detached_runs_are_listed_attached_and_stopped() {
    let d = Daemon::start("ps", None);
    let out = d
        .cli()
        .args(["run", "--detach", "-q", "gen count=100G size=64 | count"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("--detach prints the run id");
    let ps = d.ps();
    assert!(
        ps.contains("running (detached)")
            && ps.contains("root")
            && ps.contains("gen count=100G size=64 | count"),
        "{ps}"
    );
    assert_eq!(run_ids(&ps), vec![id]);
    // attach: counters as they change; stop ends the run and attach with it.
    let mut attach = d
        .cli()
        .args(["attach", &id.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // What attach draws, read as it comes; stop once it has shown the count grow.
    let shown = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let shown = shown.clone();
        let mut out = attach.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut out, &mut buf) {
                shown
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let counts_in = |shown: &str| -> Vec<u64> {
        shown
            .lines()
            .filter(|l| l.starts_with("count "))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
            .collect()
    };
    common::wait_for(
        "attach to show the count grow",
        Duration::from_secs(20),
        || {
            let c = counts_in(&shown.lock().unwrap());
            c.len() >= 2 && c.last() > c.first()
        },
    );
    let st = d.cli().args(["stop", &id.to_string()]).output().unwrap();
    assert!(st.status.success(), "{:?}", text(&st));
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = attach.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "attach did not end with the run"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    reader.join().unwrap();
    let shown = shown.lock().unwrap().clone();
    let counts = counts_in(&shown);
    assert!(
        counts.len() >= 2
            && counts.windows(2).all(|w| w[0] <= w[1])
            && counts.last() > counts.first(),
        "{shown}"
    );
    assert_eq!(
        status.code(),
        Some(0),
        "a run stopped by request ends with status 0"
    );
    common::wait_for("the run to leave ps", Duration::from_secs(10), || {
        run_ids(&d.ps()).is_empty()
    });
    // Someone else's ids, and ids that never were.
    let e = d.cli().args(["stop", "999"]).output().unwrap();
    assert!(
        !e.status.success() && text(&e).1.contains("no run 999"),
        "{:?}",
        text(&e)
    );
}

#[test]
fn ctrl_c_stops_a_run_through_the_daemon_like_a_standalone_one() {
    let d = Daemon::start("int", None);
    let c = d
        .cli()
        .args(["run", "gen count=100G size=64 | count"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Blocks flow (ps shows a rate above 0) before Ctrl-C, so the totals count some.
    common::wait_for(
        "the run in ps with blocks flowing",
        Duration::from_secs(10),
        || {
            let ps = d.ps();
            run_ids(&ps)
                .first()
                .is_some_and(|id| rate_in_ps(&ps, *id).is_some_and(|r| r > 0.0))
        },
    );
    let err = common::interrupt(c);
    assert!(
        common::count_of(&err) > 0 && err.contains("interrupted (SIGINT)"),
        "{err}"
    );
    common::wait_for("the run to leave ps", Duration::from_secs(10), || {
        run_ids(&d.ps()).is_empty()
    });
}

#[test]
fn a_client_killed_mid_transaction_is_rolled_back() {
    let d = Daemon::start("txn", None);
    let ring = format!("/dev/shm/streamline.txn{}", std::process::id());
    let pipeline = format!(
        "gen count=100G size=64 | count name=txn{} export=yes",
        std::process::id()
    );
    // Opened (built, with its exported ring) but never activated; then the client dies.
    let mut c = Command::new(PYTHON)
        .arg(RAW)
        .arg(&d.socket)
        .args([
            "hello",
            &format!("open:{pipeline}"),
            "say:opened",
            "sleep:60",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("opened\n") {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
            "the client ended: {seen}"
        );
        seen += &line;
    }
    assert!(seen.contains(r#""reply": "opened""#), "{seen}");
    assert!(
        Path::new(&ring).exists(),
        "the built run's exported ring {ring}"
    );
    assert!(d.ps().contains("built"), "{}", d.ps());
    c.kill().unwrap();
    c.wait().unwrap();
    common::wait_for(
        "the half-built run to be rolled back",
        Duration::from_secs(10),
        || run_ids(&d.ps()).is_empty() && !Path::new(&ring).exists(),
    );
    // The daemon is unharmed.
    let r = d.raw(&["hello", "ping"]);
    assert_eq!(r[1]["reply"], "pong", "{r:?}");
}

#[test]
fn hostile_clients_get_an_error_or_a_closed_connection_and_nothing_else_changes() {
    let d = Daemon::start("host", None);
    let out = d
        .cli()
        .args(["run", "--detach", "-q", "gen count=100G size=64 | count"])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let before = run_ids(&d.ps());
    let error_of = |r: &[serde_json::Value]| {
        r.iter().find(|m| m["reply"] == "error").map(|m| {
            (
                m["code"].as_str().unwrap_or("").to_string(),
                m["message"].as_str().unwrap_or("").to_string(),
            )
        })
    };
    // Garbage before the handshake, a wrong version, a request before hello.
    let r = d.raw(&["send:this is not json"]);
    assert_eq!(error_of(&r).unwrap().0, "EPROTO", "{r:?}");
    let r = d.raw(&["hello:99"]);
    let (code, msg) = error_of(&r).unwrap();
    assert!(code == "EPROTO" && msg.contains("version 99"), "{r:?}");
    let r = d.raw(&["ping"]);
    assert!(error_of(&r).unwrap().1.contains("hello"), "{r:?}");
    // After the handshake: malformed JSON names line and column; unknown ops; an
    // oversized length; a frame cut short; descriptors where none belong; too many.
    let r = d.raw(&["hello", r#"send:{"id":5,"op":"open","pipeline":"#]);
    let (code, msg) = error_of(&r).unwrap();
    assert!(code == "EPROTO" && msg.contains("line 1 column"), "{r:?}");
    let r = d.raw(&["hello", r#"send:{"id":5,"op":"format_disk"}"#]);
    assert!(error_of(&r).unwrap().1.contains("format_disk"), "{r:?}");
    let r = d.raw(&["hello", "raw:ffffff7f", "read"]);
    assert!(error_of(&r).unwrap().1.contains("not within"), "{r:?}");
    let _ = d.raw(&["hello", "raw:10000000", "raw:7b226964", "sleep:0.1"]);
    let r = d.raw(&["hello", "fds:2"]);
    assert!(
        error_of(&r)
            .unwrap()
            .1
            .contains("descriptors came with a request that takes none"),
        "{r:?}"
    );
    let r = d.raw(&["hello", "fds:20"]);
    assert_eq!(error_of(&r).unwrap().0, "EPROTO", "{r:?}");
    // Other users' runs: ids that do not exist, stop/attach/edit of someone else's.
    let e = d
        .cli_as_nobody()
        .args(["stop", &id.to_string()])
        .output()
        .unwrap();
    assert!(text(&e).1.contains("belongs to root"), "{:?}", text(&e));
    // Many connections at once: past the limit, EAGAIN; the daemon keeps serving.
    let held: Vec<_> = (0..300)
        .filter_map(|_| std::os::unix::net::UnixStream::connect(&d.socket).ok())
        .collect();
    assert!(held.len() >= 256, "only {} connections", held.len());
    drop(held);
    // The daemon serves again once it has seen the 300 connections close.
    common::wait_for(
        "a ping answered after the held connections closed",
        Duration::from_secs(20),
        || {
            Command::new(PYTHON)
                .arg(RAW)
                .arg(&d.socket)
                .args(["hello", "ping"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("pong"))
        },
    );
    let r = d.raw(&["hello", "ping"]);
    assert_eq!(r[1]["reply"], "pong", "{r:?}");
    assert_eq!(
        run_ids(&d.ps()),
        before,
        "the hostile clients changed the runs"
    );
    let _ = d.cli().args(["stop", &id.to_string()]).output();
}

// Over 150 lines: one matrix of requests by one unprivileged user against one daemon and
// policy, each row a refusal or a grant checked in turn.
#[test]
fn access_control_matrix_as_uid_65534() {
    let veth = common::quiet_veth("acl", "capturing on a veth pair through the daemon");
    let policy = format!("[[grant]]\nusers = [\"65534\"]\ntemplate = 'rx dev={} | bpf \"udp port 53\"'\nmode = \"0640\"\n", veth.here);
    let d = Daemon::start("acl", Some(&policy));
    let pid = std::process::id();
    // 1. Raw capture outside the granted template: refused, naming the policy.
    let e = d
        .cli_as_nobody()
        .args(["run", &format!("rx dev={} | count", veth.here)])
        .output()
        .unwrap();
    let (_, err) = text(&e);
    assert_eq!(e.status.code(), Some(2), "{err}");
    assert!(
        err.contains("CAP_NET_RAW")
            && err.contains("policy.toml")
            && err.contains("only these templates")
            && err.contains('^'),
        "{err}"
    );
    // 2. Another user's stream: root's 0600 export is refused to nobody, given to root.
    let secret = format!("secret{pid}");
    let out = d
        .cli()
        .args([
            "run",
            "--detach",
            "-q",
            &format!("gen count=100G size=64 | count name={secret} export=yes mode=0600"),
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let root_run: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    common::wait_for("root's exported stream", Duration::from_secs(10), || {
        Path::new(&format!("/dev/shm/streamline.{secret}")).exists()
    });
    let raw_as_nobody = |steps: &[&str]| -> String {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
                PYTHON,
                RAW,
            ])
            .arg(&d.socket)
            .args(steps)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let r = raw_as_nobody(&["hello", &format!("stream:{secret}")]);
    assert!(
        r.contains("EACCES") && r.contains("may not read") && r.contains("\"fds_received\": 0"),
        "{r}"
    );
    // Root (here the owner) reads as a registered reader: data segments read-only, control
    // segments read-write (4 descriptors).
    let r = d.raw(&["hello", &format!("stream:{secret}")]);
    assert_eq!(r[1]["fds_received"], 4, "{r:?}");
    let _ = d.cli().args(["stop", &root_run.to_string()]).output();
    // Another user the mode admits reads as an observer: data segments only, read-only.
    let public = format!("public{pid}");
    let out = d
        .cli()
        .args([
            "run",
            "--detach",
            "-q",
            &format!("gen count=100G size=64 | count name={public} export=yes mode=0644"),
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let public_run: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    common::wait_for("root's public stream", Duration::from_secs(10), || {
        Path::new(&format!("/dev/shm/streamline.{public}")).exists()
    });
    let r = raw_as_nobody(&["hello", &format!("stream:{public}")]);
    assert!(
        r.contains("\"fds_received\": 2") && r.contains("\"reply\": \"stream\""),
        "{r}"
    );
    let _ = d.cli().args(["stop", &public_run.to_string()]).output();
    // 3. A file nobody may read: the worker opens it as the client, and the kernel says no.
    let private = std::env::temp_dir().join(format!("sl-private-{pid}.pcap"));
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap"),
        &private,
    )
    .unwrap();
    std::fs::set_permissions(
        &private,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let e = d
        .cli_as_nobody()
        .args(["run", &format!("pcapin file={} | count", private.display())])
        .output()
        .unwrap();
    let (_, err) = text(&e);
    assert!(
        !e.status.success() && err.to_lowercase().contains("permission denied"),
        "{err}"
    );
    std::fs::remove_file(&private).unwrap();
    // 4. Unix commands run with the client's uid.
    let o = d
        .cli_as_nobody()
        .args(["run", "-q", "gen count=1 size=8 | id -u"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "65534",
        "{:?}",
        text(&o)
    );
    // 5. The granted template works, and its exported stream has the intersected mode
    //    (grant 0640 AND the default ceiling 0644) and the client as owner.
    let dns = format!("dns{pid}");
    let log = std::env::temp_dir().join(format!("sl-acl-{pid}.log"));
    let _ = std::fs::remove_file(&log);
    let out = d
        .cli_as_nobody()
        .args(["run", "--detach", "-q", "--log"])
        .arg(&log)
        .arg(format!(
            "rx dev={} | bpf \"udp port 53\" | count name={dns} export=yes",
            veth.here
        ))
        .output()
        .unwrap();
    let Ok(id) = String::from_utf8_lossy(&out.stdout).trim().parse::<u64>() else {
        panic!("no run id: {:?}", text(&out))
    };
    let ring = format!("/dev/shm/streamline.{dns}");
    common::wait_for(
        "the granted run's exported ring",
        Duration::from_secs(10),
        || Path::new(&ring).exists(),
    );
    let meta = std::fs::metadata(&ring).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (meta.mode() & 0o777, meta.uid()),
        (0o640, 65534),
        "mode {:o} uid {}",
        meta.mode() & 0o777,
        meta.uid()
    );
    let worker = Command::new("pgrep")
        .args(["-x", common::worker(), "-P", &d.pid().to_string()])
        .output()
        .unwrap();
    for p in String::from_utf8_lossy(&worker.stdout).split_whitespace() {
        common::wait_capturing(p.parse().unwrap(), &veth.here);
    }
    for port in ["53", "80"] {
        veth.exec(&[
            "bash",
            "-c",
            &format!(
                "for i in $(seq 20); do echo q > /dev/udp/{}/{port}; done",
                veth.here_ip
            ),
        ])
        .unwrap();
    }
    // Stopped once the run has counted the 20 queries to port 53.
    wait_counter_above(
        &d,
        id,
        &format!("count:{dns}"),
        "blocks_in",
        19,
        Duration::from_secs(20),
    );
    let ps =
        String::from_utf8_lossy(&d.cli_as_nobody().arg("ps").output().unwrap().stdout).into_owned();
    assert!(ps.contains("nobody") || ps.contains("65534"), "{ps}");
    let st = d
        .cli_as_nobody()
        .args(["stop", &id.to_string()])
        .output()
        .unwrap();
    assert!(st.status.success(), "{:?}", text(&st));
    common::wait_for("the run to end", Duration::from_secs(10), || {
        run_ids(&d.ps()).is_empty()
    });
    // The detached run's report went to its log (opened by the client, so its own).
    let err = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        common::count_of(&err),
        20,
        "only port 53 passes the template's bpf: {err}"
    );
    std::fs::remove_file(&log).unwrap();
    assert!(
        !Path::new(&ring).exists(),
        "the run removed its ring at its end"
    );
}

#[test]
fn no_policy_means_no_raw_capture_for_unprivileged_users() {
    let d = Daemon::start("nopol", None);
    let e = d
        .cli_as_nobody()
        .args(["run", "rx dev=lo | bpf \"udp port 53\" | count"])
        .output()
        .unwrap();
    let (_, err) = text(&e);
    assert_eq!(e.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no policy file") && err.contains("uid 65534") && err.contains("CAP_NET_RAW"),
        "{err}"
    );
    // Pipelines over data nobody may read itself still run.
    let o = d
        .cli_as_nobody()
        .args(["run", "gen count=1000 size=10 | count"])
        .output()
        .unwrap();
    assert_eq!(common::count_of(&text(&o).1), 1000);
}

#[test]
fn a_daemon_killed_with_sigkill_leaves_nothing_a_restart_does_not_reclaim() {
    let mut d = Daemon::start("kill", None);
    let name = format!("killed{}", std::process::id());
    let ring = format!("/dev/shm/streamline.{name}");
    let out = d
        .cli()
        .args([
            "run",
            "--detach",
            "-q",
            &format!("gen count=100G size=64 | count name={name} export=yes"),
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    common::wait_for("the exported ring", Duration::from_secs(10), || {
        Path::new(&ring).exists()
    });
    // Worst case: the worker and the daemon both die, so no one cleans up (the worker
    // first: alone, it would see the daemon's socket close and stop cleanly).
    for w in d.workers() {
        let _ = Command::new("kill")
            .args(["-KILL", &w.to_string()])
            .status();
    }
    assert!(Command::new("kill")
        .args(["-KILL", &d.pid().to_string()])
        .status()
        .unwrap()
        .success());
    d.child.take().unwrap().wait().unwrap();
    // Looked at at once: a daemon that another test starts meanwhile sweeps rings of dead
    // owners older than 2 s (seen once, while the wait for the unmount below ran long).
    assert!(
        Path::new(&ring).exists(),
        "SIGKILL leaves the ring (this is what a restart must reclaim)"
    );
    // Its PipesFS mount goes with it: the daemon's mount guard (daemon::pipesfs::guard)
    // sees it die and detaches the mount (fusermount3's auto_unmount watcher alone missed
    // this under load).
    let mount = d.mount().display().to_string();
    let mounted = || {
        std::fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(mount.as_str()))
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while mounted() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    if mounted() {
        // Detached here so that no dead mount stays behind the failure.
        let _ = Command::new("fusermount3")
            .args(["-u", "-z", &mount])
            .status();
        panic!(
            "{mount} was still mounted 10 s after its daemon's SIGKILL; the daemon's log:\n{}",
            d.log()
        );
    }
    // A sweep leaves rings younger than 2 s alone (they may be being set up): until every
    // segment of the run's is older (by its modification time, as the sweep judges).
    common::wait_for(
        "the killed run's segments to be 2 s old",
        Duration::from_secs(10),
        || {
            std::fs::read_dir("/dev/shm").unwrap().flatten().all(|e| {
                !e.file_name().to_string_lossy().contains(&name)
                    || e.metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > Duration::from_millis(2100))
            })
        },
    );
    let d2 = Daemon::start("kill2", None);
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&name))
        .collect();
    assert!(left.is_empty(), "the restarted daemon reclaimed every segment of {ring} (rings, data rings, control segments); left {left:?}; log: {}", d2.log());
    assert!(run_ids(&d2.ps()).is_empty());
}

/// `count:LABEL`'s row of a run's table: its blocks in.
fn blocks_in(report: &str, label: &str) -> u64 {
    report
        .lines()
        .find(|l| l.split_whitespace().next() == Some(label))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or_else(|| panic!("no row {label} in:\n{report}"))
}

fn blocks_out(report: &str, label: &str) -> u64 {
    report
        .lines()
        .find(|l| l.split_whitespace().next() == Some(label))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .unwrap_or_else(|| panic!("no row {label} in:\n{report}"))
}

fn edit(d: &Daemon, id: u64, text: &str) -> Output {
    d.cli()
        .args(["edit", &id.to_string(), text])
        .output()
        .unwrap()
}

#[test]
fn live_edits_through_the_daemon_lose_no_block() {
    let d = Daemon::start("edit", None);
    let log = d.dir.join("run.log");
    let out = d
        .cli()
        .args(["run", "--detach", "--plan", "none", "--log"])
        .arg(&log)
        .arg("gen count=100G size=64 | count | count name=tail")
        .output()
        .unwrap();
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{:?}", text(&out)));
    // Each edit is a transaction of its own, applied between two source batches.
    let mut seen = 0;
    for e in [
        "insert after count count name=mid",
        "replace count:mid sample every=1",
        "set sample every=1",
        "insert before count:tail count name=pre",
        "remove sample",
        "remove count:pre",
    ] {
        // Blocks flow between two edits: gen has made more since the last one.
        seen = wait_counter_above(&d, id, "gen", "blocks_out", seen, Duration::from_secs(20));
        let o = edit(&d, id, e);
        assert!(o.status.success(), "{e}: {:?}", text(&o));
        assert!(
            text(&o).0.starts_with(&format!("applied `{e}`")),
            "{:?}",
            text(&o)
        );
    }
    // An edit that cannot be built changes nothing and says why, with a caret.
    let o = edit(&d, id, "insert after count sample every=banana");
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.contains("every=banana") && err.contains('^'),
        "{err}"
    );
    let o = edit(&d, id, "remove gen");
    assert!(
        !o.status.success() && text(&o).1.contains("source"),
        "{:?}",
        text(&o)
    );
    assert_eq!(
        run_ids(&d.ps()),
        vec![id],
        "a refused edit leaves the run running"
    );
    // Blocks flow after the last edit too.
    wait_counter_above(&d, id, "gen", "blocks_out", seen, Duration::from_secs(20));
    assert!(d
        .cli()
        .args(["stop", &id.to_string()])
        .status()
        .unwrap()
        .success());
    common::wait_for("the run's end", Duration::from_secs(20), || {
        run_ids(&d.ps()).is_empty()
    });
    let report = std::fs::read_to_string(&log).unwrap();
    let made = blocks_out(&report, "gen");
    let tail = blocks_in(&report, "count:tail");
    // Every block gen made reached the tail across six edits (none of the filters put
    // in drops anything: `sample every=1` passes all): a switch lost nothing.
    assert_eq!(blocks_in(&report, "count"), made, "{report}");
    assert!(made > 0, "{report}");
    assert_eq!(
        tail,
        made,
        "lost {} blocks across live edits:\n{report}",
        made - tail
    );
}

#[test]
fn live_edits_on_replayed_traffic_keep_the_totals_of_an_unedited_capture() {
    let veth = common::quiet_veth("edl", "capturing replayed traffic through the daemon");
    let d = Daemon::start("editlive", None);
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");
    // The reference: tcpdump on the same interface (what an unedited capture sees).
    let mut td = Command::new("tcpdump");
    td.args([
        "-i",
        &veth.here,
        "-n",
        "-q",
        "--immediate-mode",
        "-B",
        "16384",
        "-w",
        "/dev/null",
    ]);
    let (tcpdump, tcpdump_rest) = common::tcpdump_listening(td);
    let log = d.dir.join("live.log");
    let out = d
        .cli()
        .args(["run", "--detach", "--no-share", "--plan", "none", "--log"])
        .arg(&log)
        .arg(format!("rx dev={} | count | count name=tail", veth.here))
        .output()
        .unwrap();
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{:?}", text(&out)));
    d.wait_workers_capturing(&veth.here);
    let replay = veth
        .command("tcpreplay")
        .args([
            "-q",
            "-i",
            &veth.there,
            "--pps",
            "3000",
            SAMPLE_LOOPS,
            sample,
        ])
        .spawn()
        .expect("tcpreplay");
    let mut applied = 0;
    let mut seen = 0;
    for e in [
        "insert after count count name=mid",
        "replace count:mid sample every=1",
        "set sample every=1",
        "remove sample",
    ] {
        // Replayed packets come in between two edits: rx has delivered more since the last.
        seen = wait_counter_above(&d, id, "rx", "blocks_out", seen, Duration::from_secs(20));
        let o = edit(&d, id, e);
        assert!(o.status.success(), "{e}: {:?}", text(&o));
        applied += 1;
    }
    let o = replay.wait_with_output().unwrap();
    assert!(o.status.success(), "tcpreplay: {:?}", text(&o));
    // Stopped once the tail has counted every packet replayed: the sample's, twice.
    let listed = Command::new("tcpdump")
        .args(["-n", "-q", "-r", sample])
        .output()
        .expect("tcpdump -r");
    let sent = 2 * String::from_utf8_lossy(&listed.stdout).lines().count() as u64;
    assert!(SAMPLE_LOOPS.ends_with("=2") && sent > 0, "{sent} packets");
    wait_counter_above(
        &d,
        id,
        "count:tail",
        "blocks_in",
        sent - 1,
        Duration::from_secs(20),
    );
    assert!(d
        .cli()
        .args(["stop", &id.to_string()])
        .status()
        .unwrap()
        .success());
    common::wait_for("the run's end", Duration::from_secs(20), || {
        run_ids(&d.ps()).is_empty()
    });
    assert!(Command::new("kill")
        .args(["-INT", &tcpdump.id().to_string()])
        .status()
        .unwrap()
        .success());
    let _ = tcpdump.wait_with_output();
    let said = tcpdump_rest.join().unwrap();
    let reference: u64 = said
        .lines()
        .find_map(|l| l.strip_suffix(" packets captured"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("tcpdump said: {said}"));
    let report = std::fs::read_to_string(&log).unwrap();
    assert_eq!(applied, 4);
    assert!(reference > 1000, "tcpdump saw {reference}");
    assert_eq!(
        blocks_in(&report, "count:tail"),
        reference,
        "tail vs tcpdump on the same interface:\n{report}"
    );
    assert_eq!(blocks_out(&report, "rx"), reference, "{report}");
}

/// Replay the sample twice (about 3 s at 3000 packets/s), long enough for four edits.
const SAMPLE_LOOPS: &str = "--loop=2";

#[test]
fn a_connection_that_ends_at_any_step_leaves_only_what_it_committed() {
    let d = Daemon::start("steps", None);
    let p = "gen count=100G size=64 | count";
    // Before the handshake, after it, after open (rolled back), after an attached
    // activate (the run stops with its client), after a detached one (the run stays).
    let _ = d.raw(&[]);
    let _ = d.raw(&["hello"]);
    let r = d.raw(&["hello", &format!("open:{p}")]);
    assert_eq!(r[1]["reply"], "opened", "{r:?}");
    let r = d.raw(&["hello", &format!("open:{p}"), "activate_attached:last"]);
    assert_eq!(r[2]["reply"], "done", "{r:?}");
    common::wait_for(
        "the uncommitted and the attached runs to go",
        Duration::from_secs(15),
        || run_ids(&d.ps()).is_empty(),
    );
    let r = d.raw(&["hello", &format!("open:{p}"), "activate:last"]);
    let kept = r[1]["run"].as_u64().unwrap();
    // A quiet spell, the thing tested: the detached run is still there after the daemon
    // has had time to act on its connection's end (nothing to wait for: it must not go).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        run_ids(&d.ps()),
        vec![kept],
        "the detached run outlives its connection"
    );
    assert!(d
        .cli()
        .args(["stop", &kept.to_string()])
        .status()
        .unwrap()
        .success());
    common::wait_for("the detached run to stop", Duration::from_secs(15), || {
        run_ids(&d.ps()).is_empty()
    });
}
