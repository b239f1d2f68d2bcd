//! Helpers shared by the end-to-end tests of the `streamline` command.

pub mod browser;
pub mod daemon;
pub mod rng;

/// A daemon's worker as `pgrep -x` and /proc/PID/comm name it.
#[allow(dead_code)]
pub fn worker() -> &'static str {
    ::daemon::spawn::worker_comm()
}

/// The block total of `count`'s summary line (`count: N blocks, M bytes`) in a run's
/// stderr; panics with the whole output when there is none.
#[allow(dead_code)]
pub fn count_of(err: &str) -> u64 {
    err.lines()
        .find_map(|l| l.strip_prefix("count: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count:\n{err}"))
}

/// Fail, naming what is missing, unless tcpreplay is installed and we are root (`needs`
/// says what root is for). Tests that need these never pass silently without them.
#[allow(dead_code)]
pub fn require_replay_and_root(needs: &str) {
    use std::process::{Command, Stdio};
    let ok = Command::new("tcpreplay")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "tcpreplay is required to replay the test's capture (apt-get install tcpreplay; scripts/setup installs it)");
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?")
        .to_string();
    assert_eq!(euid, "0", "these tests need root ({needs})");
}

/// A veth pair into a namespace of its own whose ends send nothing of their own (IPv6
/// off: no router or neighbour solicitations, no MLD reports), so the captured traffic is
/// exactly what the test sends.
#[allow(dead_code)]
pub fn quiet_veth(tag: &str, needs: &str) -> kernel::netns::Veth {
    require_replay_and_root(needs);
    quiet_pair(tag)
}

/// [`quiet_veth`] for tests that need root but not tcpreplay.
#[allow(dead_code)]
pub fn quiet_pair(tag: &str) -> kernel::netns::Veth {
    let v = kernel::netns::Veth::new(tag).unwrap_or_else(|e| panic!("{e}"));
    kernel::netns::run(&[
        "sysctl",
        "-qw",
        &format!("net.ipv6.conf.{}.disable_ipv6=1", v.here),
    ])
    .unwrap();
    v.exec(&[
        "sysctl",
        "-qw",
        &format!("net.ipv6.conf.{}.disable_ipv6=1", v.there),
    ])
    .unwrap();
    // Up with a queue of its own at both ends: the kernel attaches the device's qdisc
    // (`noqueue` for a veth) when its link watch sees the carrier, a moment after `up`;
    // until then the device has `qdisc noop`, which drops every frame sent.
    let link = |c: &mut std::process::Command| {
        let o = c.output().expect("ip link show");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    wait_until(
        "both ends of the veth pair up, with a qdisc",
        std::time::Duration::from_secs(30),
        || {
            let here =
                link(std::process::Command::new("ip").args(["-o", "link", "show", "dev", &v.here]));
            let there = link(
                v.command("ip")
                    .args(["-o", "link", "show", "dev", &v.there]),
            );
            let ready = |l: &str| l.contains("state UP") && !l.contains("qdisc noop");
            if ready(&here) && ready(&there) {
                Ok(())
            } else {
                Err(format!("{here}\n{there}"))
            }
        },
    );
    v
}

/// SIGINT a run (as Ctrl-C), wait for it, check it exited 130, and return its stderr.
#[allow(dead_code)]
pub fn interrupt(c: std::process::Child) -> String {
    assert!(std::process::Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(130), "{err}");
    err
}

/// Start `cmd` (a recording tcpdump) and return once it says it is listening, so no packet
/// sent afterwards can be missed however loaded the machine is. Its stderr is drained from
/// then on; the thread returned gives the rest of it (tcpdump's totals) once it ends.
#[allow(dead_code)]
pub fn tcpdump_listening(
    cmd: std::process::Command,
) -> (std::process::Child, std::thread::JoinHandle<String>) {
    tcpdump_listening_on(cmd, "listening on")
}

/// Like [`tcpdump_listening`], for a capture program that says `marker` on stderr once it
/// captures (dumpcap: "Capturing on").
#[allow(dead_code)]
pub fn tcpdump_listening_on(
    mut cmd: std::process::Command,
    marker: &str,
) -> (std::process::Child, std::thread::JoinHandle<String>) {
    use std::io::BufRead;
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let mut c = cmd
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {prog} (scripts/setup installs tcpdump and tshark): {e}")
        });
    let mut err = std::io::BufReader::new(c.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        let n = err.read_line(&mut line).unwrap();
        said += &line;
        assert!(n > 0, "{prog} ended before listening:\n{said}");
        if line.contains(marker) {
            break;
        }
    }
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    (c, rest)
}

/// Wait until process `pid` holds an AF_PACKET socket bound to interface `dev` (a capture
/// binds last, after its filter is attached and its ring mapped: from then on it sees
/// every frame). Fails after 30 s naming the interface.
#[allow(dead_code)]
pub fn wait_capturing(pid: u32, dev: &str) {
    let ifindex: u32 = std::fs::read_to_string(format!("/sys/class/net/{dev}/ifindex"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .filter_map(|l| {
                        l.to_str()?
                            .strip_prefix("socket:[")?
                            .strip_suffix(']')
                            .map(str::to_string)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let bound = std::fs::read_to_string(format!("/proc/{pid}/net/packet"))
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() >= 9
                    && f[4].parse::<u32>().ok() == Some(ifindex)
                    && inodes.iter().any(|i| i == f[8])
            });
        if bound {
            return;
        }
        // A process that ended (or is a zombie) will never capture: say so at once.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(") ")
                    .map(|(_, r)| r.chars().next().unwrap_or('?'))
            });
        assert!(
            !matches!(state, None | Some('Z') | Some('X')),
            "process {pid} ended before it captured on {dev}"
        );
        assert!(
            std::time::Instant::now() < until,
            "process {pid} did not start capturing on {dev} within 30 s (state {state:?}; its threads: {:?})",
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .map(|d| d
                    .flatten()
                    .filter_map(|t| std::fs::read_to_string(t.path().join("wchan")).ok())
                    .collect::<Vec<_>>())
                .unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Polls `cond` every 50 ms for at most `limit`; panics with `what` if it never held.
#[allow(dead_code)]
pub fn wait_for(what: &str, limit: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} within {limit:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Polls `cond` every 50 ms for at most `limit` until it says `Ok`; panics with `what`
/// and the last thing `cond` reported (`Err(what it saw)`) if it never did.
#[allow(dead_code)]
pub fn wait_until(
    what: &str,
    limit: std::time::Duration,
    mut cond: impl FnMut() -> Result<(), String>,
) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let seen = match cond() {
            Ok(()) => return,
            Err(seen) => seen,
        };
        assert!(
            std::time::Instant::now() < deadline,
            "{what} within {limit:?}; last seen: {seen}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Counter `key` (`blocks_in`, `blocks_out`, ...) of the nodes labelled `label` (or
/// `label@SPACE`; summed over them) in the JSON a run's `--stats FILE` holds: while the
/// run runs, the counters its spaces last published (rewritten about every 100 ms).
/// None while the file or such a node is not there yet.
#[allow(dead_code)]
pub fn stats_counter(file: &std::path::Path, label: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let nodes: Vec<&serde_json::Value> = v["nodes"]
        .as_array()?
        .iter()
        .filter(|n| {
            n["label"]
                .as_str()
                .is_some_and(|l| l.split('@').next() == Some(label))
        })
        .collect();
    if nodes.is_empty() {
        return None;
    }
    nodes.iter().map(|n| n[key].as_u64()).sum()
}

/// The packets in the pcap file a running `tcpdump -U -w FILE` writes (it flushes each
/// packet), that match `filter` (tcpdump's syntax; "" for all); a record half-written at
/// the end is not counted.
#[allow(dead_code)]
pub fn pcap_packets(pcap: &std::path::Path, filter: &str) -> u64 {
    let mut c = std::process::Command::new("tcpdump");
    c.args(["-n", "-r"]).arg(pcap);
    if !filter.is_empty() {
        c.arg(filter);
    }
    let o = c.output().expect("tcpdump -r");
    String::from_utf8_lossy(&o.stdout).lines().count() as u64
}

/// The key a run of `pipeline` publishes its longest shareable prefix under (what
/// `streamline run` computes, with the same filter library handed to the control plane).
#[allow(dead_code)]
pub fn share_key(pipeline: &str) -> String {
    let lib = control::Filters {
        registry: filters::REGISTRY,
        resolver: &filters::Natives,
        multiqueue: filters::live::multiqueue,
        kernel_placement: filters::live::kernel_placement,
    };
    let g = lang::parse(pipeline, &control::model::PlanResolver(&lib))
        .unwrap_or_else(|d| panic!("{d}"));
    let prefixes = control::prefix::shareable(&lib, &g);
    prefixes
        .first()
        .unwrap_or_else(|| panic!("nothing of `{pipeline}` is shareable"))
        .key
        .clone()
}

/// The names under /dev/shm that process `root` and its descendants hold now (mapped or
/// open): what a run made and uses, as opposed to what other runs on the machine made.
/// Tests that check a run leaves nothing behind judge only these (and its own share
/// names), so a daemon or another test's run beside them is not taken for a leak.
#[allow(dead_code)]
pub fn shm_held_by_tree(root: u32) -> std::collections::BTreeSet<String> {
    let procs: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                    let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                    let ppid = stat
                        .rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()?;
                    Some((pid, ppid))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(procs.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    let mut names = std::collections::BTreeSet::new();
    for pid in tree {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| Some(std::fs::read_link(e.path()).ok()?.to_str()?.to_string()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for path in maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5).map(str::to_string))
            .chain(fds)
        {
            if let Some(n) = path.strip_prefix("/dev/shm/") {
                names.insert(n.trim_end_matches(" (deleted)").to_string());
            }
        }
    }
    names
}

/// The names under /dev/shm that any process holds now (mapped or open).
#[allow(dead_code)]
pub fn shm_held_by_anyone() -> std::collections::BTreeSet<String> {
    shm_held_by_tree(1)
}

/// Waits until every object that is in /dev/shm now but not in `before` is held by some
/// process (another run's, live), and fails naming those held by none, what a run that
/// ended left behind, if they remain after 10 s. Objects of other runs on the machine
/// are not taken for leaks: they are held by their runs, or gone when they end.
#[allow(dead_code)]
pub fn assert_no_orphans_since(before: &[String], what: &str) {
    let orphans = || {
        let held = shm_held_by_anyone();
        std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !before.contains(n) && !held.contains(n))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left = orphans();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "{what}: left in /dev/shm, held by no process: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `streamline run --stats STATS PIPELINE` started, stdout to /dev/null, stderr piped: its
/// counters in `stats` while it runs (see [`stats_counter`]).
#[allow(dead_code)]
pub fn spawn_run_stats(pipeline: &str, stats: &std::path::Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_streamline"))
        .arg("run")
        .arg("--stats")
        .arg(stats)
        .arg(pipeline)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn streamline")
}

/// The sockets of process `pid`'s network namespace on local `port` (TCP listening, or
/// UDP bound when `udp`) as /proc/PID/net/{tcp,tcp6,udp,udp6} list them: each one's
/// line. Empty while nothing is there.
#[allow(dead_code)]
pub fn sockets_on_port(pid: u32, port: u16, udp: bool) -> Vec<String> {
    let (files, state) = if udp {
        (["udp", "udp6"], "07")
    } else {
        (["tcp", "tcp6"], "0A")
    };
    let want = format!(":{port:04X}");
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(format!("/proc/{pid}/net/{f}"))
                .unwrap_or_default()
                .lines()
                .skip(1)
                .filter(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.len() > 3 && f[1].ends_with(&want) && f[3] == state
                })
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits until process `pid` listens on TCP `port` (or has bound UDP `port`) in its
/// network namespace; fails after 30 s, at once if the process ended.
#[allow(dead_code)]
pub fn wait_listening(pid: u32, port: u16, udp: bool) {
    wait_until(
        &format!("process {pid} to listen on port {port}"),
        std::time::Duration::from_secs(30),
        || {
            if !sockets_on_port(pid, port, udp).is_empty() {
                return Ok(());
            }
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = state.rsplit_once(") ").map_or("gone", |(_, r)| &r[..1]);
            assert!(
                !matches!(state, "gone" | "Z" | "X"),
                "process {pid} ended before it listened on port {port}"
            );
            Err(format!(
                "process {pid} in state {state}, nothing on port {port}"
            ))
        },
    );
}

/// The placement-invariance corpus (`tests/placement/corpus.txt`): its pipelines, one per
/// line, comments and blank lines dropped and `{root}` (the repository, for its
/// `examples/`) substituted. The other placeholders (`{pcap}`, `{text}`, `{out}`) are the
/// caller's to fill. The placement and the network tests both read it from here.
#[allow(dead_code)]
pub fn placement_corpus() -> Vec<String> {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/placement/corpus.txt"
    ))
    .expect("tests/placement/corpus.txt");
    src.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.replace("{root}", concat!(env!("CARGO_MANIFEST_DIR"), "/../../..")))
        .collect()
}

/// A cdylib of this build (`libslpreload.so`, `libstreamline.so`): the newer of
/// target/<profile>/ (where `cargo build -p KRATE` puts it) and target/<profile>/deps/ (where
/// `cargo test` leaves a dev-dependency's), as `streamline` itself looks
/// (`compat::find_library`). Panics naming both places when it is in neither.
#[allow(dead_code)]
pub fn built_library(file: &str, krate: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe
        .parent()
        .expect("the test binary lies in <target>/<profile>/deps")
        .to_path_buf();
    let profile = deps.parent().expect("<target>/<profile>").to_path_buf();
    [profile.join(file), deps.join(file)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "{file} is in neither {} nor {}: build it (`cargo build -p {krate}`; `cargo test --workspace` builds it)",
                profile.display(),
                deps.display()
            )
        })
}
