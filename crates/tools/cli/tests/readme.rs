//! Every command example of README.md runs as written and does what the README says.
//!
//! The examples are read from README.md's ```sh blocks at test time (a new example is
//! covered without touching this file): one example per line, `\` continuations and
//! here-documents joined, lines that are only a comment skipped. An example whose comment
//! says `not run: REASON` is not run; the test lists those (and fails if there are more
//! than a few). The others run in order, in one bash session, as the README's reader would
//! type them, from a scratch copy of the repository root (`crates` and `examples` copied,
//! the rest linked, so what the examples write stays there), with the directory of the
//! built `streamline` first on PATH (the README says `streamline`), inside a mount
//! namespace of their own with a tmpfs on /run/streamline (so the daemon the README starts
//! on the default socket is this test's alone, and nobody else's run reaches it). Each
//! example's exit status, stdout and stderr are kept; each must exit 0 (an example under
//! `timeout` exits as the timeout makes it) and pass the check below that states what its
//! README comment says. Needs root (network namespaces, AF_PACKET, eBPF, FUSE), tcpreplay,
//! and the release build of `libstreamline.so` (`scripts/setup` builds it; the C library
//! example runs `cargo build --release -p capi`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");
/// Examples the README may mark `not run:`; more than this fails the test.
const MAX_NOT_RUN: usize = 3;
/// The whole session; an example that hangs fails the test naming it.
const SESSION_LIMIT: Duration = Duration::from_secs(420);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .unwrap()
}

#[derive(Debug, Clone)]
struct Example {
    /// README.md line of its first line.
    line: usize,
    /// The command as written (several lines for continuations and here-documents).
    text: String,
    /// Its trailing comment, without `#`.
    comment: String,
}

impl Example {
    fn not_run(&self) -> Option<&str> {
        self.comment
            .find("not run:")
            .map(|i| self.comment[i + "not run:".len()..].trim())
    }
}

/// The position of a line's trailing comment: a `#` after whitespace, outside quotes.
fn comment_start(line: &str) -> Option<usize> {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return Some(i),
            _ => {}
        }
        prev = c;
    }
    None
}

/// The command examples of README.md's ```sh blocks.
fn examples(readme: &str) -> Vec<Example> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut in_sh = false;
    // The first block is the newcomer's two commands (set up and run the main job; run
    // the tests): `.ci/run` runs those itself (the setup, the test command, the main job).
    let mut blocks = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.trim_start().starts_with("```") {
            in_sh = !in_sh && l.trim() == "```sh";
            blocks += usize::from(in_sh);
            i += 1;
            continue;
        }
        if !in_sh || blocks == 1 || l.trim().is_empty() || l.trim_start().starts_with('#') {
            i += 1;
            continue;
        }
        let first = i;
        let mut text = String::new();
        let mut comment = String::new();
        loop {
            let line = lines[i];
            if let Some(c) = comment_start(line) {
                if !comment.is_empty() {
                    comment.push(' ');
                }
                comment.push_str(line[c + 1..].trim());
            }
            text.push_str(line);
            text.push('\n');
            // A here-document: its lines, through the terminator, belong to the example.
            if let Some(p) = line.find("<<") {
                let word = line[p + 2..]
                    .trim_start_matches('-')
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .trim_matches(|c| c == '\'' || c == '"')
                    .to_string();
                i += 1;
                while i < lines.len() && lines[i].trim() != word {
                    text.push_str(lines[i]);
                    text.push('\n');
                    i += 1;
                }
                if i < lines.len() {
                    text.push_str(lines[i]);
                    text.push('\n');
                }
                i += 1;
                break;
            }
            let code = match comment_start(line) {
                Some(c) => &line[..c],
                None => line,
            };
            i += 1;
            if code.trim_end().ends_with('\\') && i < lines.len() {
                continue;
            }
            break;
        }
        out.push(Example {
            line: first + 1,
            text,
            comment,
        });
    }
    out
}

struct Outcome {
    rc: Option<i32>,
    out: String,
    err: String,
}

/// What one run of the session left: every example's outcome, by index.
struct Session {
    dir: PathBuf,
    results: BTreeMap<usize, Outcome>,
}

impl Session {
    fn file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name))
            .unwrap_or_else(|e| panic!("the examples should have made {name}: {e}"))
    }
}

/// The count of `count`'s summary line, or an error naming the output.
/// The totals of every `count` summary line: `count: N blocks, ...`, or, where two count
/// lines would start alike, labelled by node (`count:tail: `, `count#2: `, the same in every placement).
fn counts(err: &str) -> Vec<u64> {
    err.lines()
        .filter_map(|l| {
            let (label, rest) = l.split_once(": ")?;
            let tail = label.strip_prefix("count")?;
            (tail.is_empty() || tail.starts_with(['@', '#', ':'])).then_some(rest)
        })
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|n| n.parse().ok())
        .collect()
}

fn streamline(args: &[&str], dir: &Path) -> (String, String) {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("STREAMLINE_SOCKET", "none")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "reference run {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn pcap_packets(path: &Path) -> usize {
    let out = Command::new("tcpdump")
        .arg("-r")
        .arg(path)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tcpdump cannot read {}",
        path.display()
    );
    String::from_utf8_lossy(&out.stdout).lines().count()
}

type Check = fn(&Outcome, &Session, &Refs) -> Result<(), String>;

/// Reference outputs the checks compare with, made outside the session.
struct Refs {
    http: String,
    ip_http: String,
    services_tcp: String,
}

fn count_is(o: &Outcome, want: u64) -> Result<(), String> {
    let c = counts(&o.err);
    if !c.is_empty() && c.iter().all(|&n| n == want) {
        Ok(())
    } else {
        Err(format!("want every count: line to be {want}, have {c:?}"))
    }
}

fn count_positive(o: &Outcome) -> Result<(), String> {
    let c = counts(&o.err);
    if !c.is_empty() && c.iter().all(|&n| n > 0) {
        Ok(())
    } else {
        Err(format!("want a count: line with blocks, have {c:?}"))
    }
}

fn has(s: &str, what: &str) -> Result<(), String> {
    if s.contains(what) {
        Ok(())
    } else {
        Err(format!("want {what:?} in the output"))
    }
}

/// What each example's README comment says, checked. The first needle found in an
/// example's text picks its check; every needle must match an example (a check whose
/// example left the README is stale).
// Over 150 lines: one table, an entry per README example and what its comment says.
fn checks() -> Vec<(&'static str, Check)> {
    vec![
        ("make-inputs.sh", |_, s, _| {
            (s.file("big.bin").len() == 8 << 20)
                .then_some(())
                .ok_or("big.bin is not 8 MiB")?;
            let key = s.file("key");
            (key.len() == 64 && key.iter().all(u8::is_ascii_hexdigit))
                .then_some(())
                .ok_or_else(|| "key is not 64 hex digits".to_string())?;
            s.file("shapeprog");
            Ok(())
        }),
        ("lab.sh up", |o, _, _| has(&o.out, "lab: sl-lab")),
        ("ips rules=examples/ips.rules", |o, s, _| {
            // 5247 frames: 519 no rule of examples/ips.rules looks at (the header stage), 12 IPv4
            // fragments made 4 datagrams and 12 IPv6 fragments 4 more (tshark reassembles
            // the same 4 and 4): 5247 - 519 - 24 + 8 packets inspected.
            has(&o.err, "ips: 4712 packets")?;
            has(&o.err, "24 IP fragments made 8 datagrams")?;
            let eve = String::from_utf8_lossy(&s.file("eve.json")).into_owned();
            has(&eve, "\"signature_id\":1000001")?;
            has(
                &String::from_utf8_lossy(&s.file("fast.log")),
                "[1:1000001:1] WEB robots.txt fetched",
            )
        }),
        ("ipfix out=flows.ipfix", |o, s, _| {
            // 5247 frames, 2 of them ARP.
            has(&o.err, "ipfix: 5245 packets")?;
            let f = s.file("flows.ipfix");
            (f.starts_with(&[0, 10]))
                .then_some(())
                .ok_or("flows.ipfix does not start with an IPFIX message header".into())
        }),
        ("ipfixin port=4739", |o, s, _| {
            has(&o.err, "ipfixin: ")?;
            let json = String::from_utf8_lossy(&s.file("flows.json")).into_owned();
            has(&json, "\"src\":\"10.99.0.1\"")
        }),
        ("httplog flush=10s", |o, s, _| {
            let log = String::from_utf8_lossy(&s.file("access.log")).into_owned();
            let n = log.lines().count();
            has(&o.err, &format!("httplog: {n} requests"))?;
            (n > 0).then_some(()).ok_or("access.log is empty".into())
        }),
        // count DNS queries: tcpdump counts 48 frames to port 53 in the sample.
        ("dport |53 count", |o, _, _| count_is(o, 48)),
        ("dport |http count", |o, _, _| count_is(o, 519)),
        ("rx dev=sl-lab0 | pcapout file=x.pcap'", |o, s, _| {
            // SIGTERM from timeout: exit 128+15 and a flushed file libpcap reads.
            (o.rc == Some(143))
                .then_some(())
                .ok_or(format!("exit {:?}, want 143", o.rc))?;
            (pcap_packets(&s.dir.join("x.pcap")) > 0)
                .then_some(())
                .ok_or("x.pcap has no packets".into())
        }),
        // tcp (4,565) + udp (601) joined again.
        ("tcp + udp | hist", |o, _, _| {
            has(&o.err, "hist: 5166 blocks")
        }),
        ("tcpstream | http | stdout", |o, _, _| {
            has(&o.out, "GET /")?;
            has(&o.out, "POST /")
        }),
        ("cat /etc/services | grep tcp | wc -l", |o, _, r| {
            (o.out == r.services_tcp).then_some(()).ok_or(format!(
                "printed {:?}, bash prints {:?}",
                o.out, r.services_tcp
            ))
        }),
        ("gzip -1 @space=p1", |o, _, _| {
            (o.out == "100000\n")
                .then_some(())
                .ok_or(format!("printed {:?}, bash prints 100000", o.out))
        }),
        ("nosuchcmd | wc -l", |o, _, _| {
            (o.out == "0\n")
                .then_some(())
                .ok_or(format!("printed {:?}, bash prints 0", o.out))?;
            has(&o.err, "nosuchcmd: command not found")
        }),
        ("http space=p2 | inspect", |o, _, r| {
            (o.out == r.http)
                .then_some(())
                .ok_or("output differs from one space's".into())
        }),
        ("gen count=20M", |o, _, _| count_is(o, 20 * 1024 * 1024)),
        ("@lockstep", |o, _, _| count_positive(o)),
        ("rate=20000", |o, _, _| count_is(o, 20000)),
        ("--adapt", |o, _, _| {
            has(&o.err, "adapt: moved deflate")?;
            count_is(o, 50000)
        }),
        ("--chaos 7", |o, _, r| {
            (o.out == r.ip_http)
                .then_some(())
                .ok_or("output differs from the run without --chaos".into())
        }),
        ("netout to=10.77.0.2:7000", |o, s, r| {
            has(&o.err, "netout: 4565 blocks")?;
            let got = String::from_utf8_lossy(&s.file("requests.txt")).into_owned();
            (got == r.http)
                .then_some(())
                .ok_or("host B's requests.txt differs from the local `tcp | http | inspect`".into())
        }),
        ("proto=udp queues=2' && wait", |o, _, _| {
            has(&o.err, "in 128 datagrams on 2 queues")
        }),
        ("decrypt keyfile=key", |o, _, _| {
            // The receiver ran in the background: its stderr is this example's.
            has(&o.err, "datagrams lost")?;
            count_positive(o)
        }),
        ("plan --system", |o, _, _| {
            has(&o.out, "link between the hosts")
        }),
        ("outfile big.z", |_, s, _| {
            let out = Command::new("gzip")
                .args(["-dc", "big.z"])
                .current_dir(&s.dir)
                .output()
                .unwrap();
            (out.status.success() && out.stdout == s.file("big.bin"))
                .then_some(())
                .ok_or("`gzip -dc big.z` does not give big.bin back".into())
        }),
        ("outfile big.back' && cmp", |_, s, _| {
            (s.file("big.back") == s.file("big.bin"))
                .then_some(())
                .ok_or("big.back differs".into())
        }),
        ("--rate 400000", |o, _, _| count_is(o, 100000)),
        ("queues=2 | bpf \"udp\" | count", |o, _, _| {
            count_positive(o)
        }),
        ("batching=fixed | count", |o, _, _| count_positive(o)),
        ("tx dev=sl-lab0", |o, _, _| has(&o.err, "tx")),
        ("flowcount top=20", |o, _, _| has(&o.err, "flowcount")),
        ("maps --watch", |o, _, _| has(&o.out, "flowcount")),
        ("sample 100 | inspect", |o, _, _| {
            (!o.out.is_empty())
                .then_some(())
                .ok_or("inspect printed nothing".into())
        }),
        ("bytecount top=4", |o, _, _| {
            has(&format!("{}{}", o.out, o.err), "bytecount")
        }),
        ("streamline check", |o, _, _| {
            has(&o.out, "pcapin")?;
            has(&o.out, "inspect")
        }),
        ("streamline filters ", |o, _, _| {
            has(&o.out, "pcapin")?;
            has(&o.out, "kafkain")
        }),
        ("group=ids eof=yes | ip | tcp | count", |o, _, _| {
            count_is(o, 4565)
        }),
        ("topic=packets eof=yes | pcapout", |_, s, _| {
            let n = pcap_packets(&s.dir.join("k.pcap"));
            (n == 5247)
                .then_some(())
                .ok_or(format!("x.pcap has {n} packets, want 5247"))
        }),
        ("gen count=10M | count'  ", |o, _, _| {
            count_is(o, 10 * 1024 * 1024)
        }),
        ("--detach --log run.log", |o, _, _| {
            (o.out.trim().is_empty())
                .then_some(())
                .ok_or("the id goes to $id".into())
        }),
        ("until streamline ps", |_, _, _| Ok(())),
        ("streamline ps ", |o, _, _| has(&o.out, "running")),
        ("streamline attach", |o, _, _| has(&o.out, "count:dns")),
        ("streamline edit", |o, _, _| has(&o.out, "applied")),
        ("STREAMLINE_SOCKET=none", |o, _, _| {
            count_is(o, 10 * 1024 * 1024)
        }),
        ("ls -R /run/streamline/pipes", |o, _, _| {
            has(&o.out, "count:a")
        }),
        (".stats", |o, _, _| has(&o.out, "blocks_in")),
        ("tcpdump -c 10 -r", |o, _, _| {
            let n = o.out.lines().count();
            (n == 10)
                .then_some(())
                .ok_or(format!("tcpdump printed {n} packets, want 10"))
        }),
        ("streamline sh 'tar", |o, _, _| {
            (o.out.trim().parse::<u64>().is_ok_and(|n| n > 0))
                .then_some(())
                .ok_or("wc -c printed no size".into())
        }),
        ("find crates", |o, _, _| {
            (o.out.trim().parse::<u64>().is_ok_and(|n| n > 10000))
                .then_some(())
                .ok_or("wc -l printed no line count".into())
        }),
        ("examples/job.py", |o, _, _| {
            has(&o.out, "4194304 bytes back, identical")
        }),
        ("until dig", |o, _, _| has(&o.out, "10.0.0.7")),
        ("curl", |_, s, _| {
            (s.file("sample.pcap") == std::fs::read(s.dir.join("examples/sample.pcap")).unwrap())
                .then_some(())
                .ok_or("the download differs from examples/sample.pcap".into())
        }),
        ("tar cf backup.tar", |_, s, _| {
            (s.file("backup.tar").len() > 4 << 20)
                .then_some(())
                .ok_or("backup.tar is short".into())
        }),
        ("iperf3 -c", |o, _, _| has(&o.out, "receiver")),
        ("./shapeprog", |o, _, _| has(&o.err, "20")),
        ("shape rate=100KB/s", |o, _, _| count_is(o, 200)),
        ("cat /run/streamline/pipes/.shape/web", |o, _, _| {
            has(&o.out, "members")?;
            has(&o.out, "net 10")
        }),
        ("tcpdump -i sl-lab0 -c 20", |_, s, _| {
            let n = pcap_packets(&s.dir.join("http.pcap"));
            (n == 20)
                .then_some(())
                .ok_or(format!("http.pcap has {n} packets, want 20"))
        }),
        ("tshark", |o, _, _| {
            let n = o.out.lines().count();
            (n == 20)
                .then_some(())
                .ok_or(format!("tshark printed {n} packets, want 20"))
        }),
        ("tcpdump -D", |o, _, _| has(&o.out, "streamline:")),
        ("streamline:$id/bpf", |_, s, _| {
            let n = pcap_packets(&s.dir.join("dns.pcap"));
            (n == 10)
                .then_some(())
                .ok_or(format!("dns.pcap has {n} packets, want 10"))
        }),
        ("./slcat -v c", |o, _, _| {
            let n = o.out.lines().count();
            (n == 3)
                .then_some(())
                .ok_or(format!("slcat | head -3 printed {n} lines"))
        }),
        ("./slwrite mine", |o, _, _| {
            (!o.out.is_empty())
                .then_some(())
                .ok_or("slcat read nothing of slwrite's stream".into())
        }),
    ]
}

/// The files an example writes, as far as its words say: after `>`, `-w`, `-o`,
/// `file=` of a sink (`pcapout`, `outfile`).
fn written(text: &str) -> Vec<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '\'' || c == '|')
        .filter(|w| !w.is_empty())
        .collect();
    let mut out = Vec::new();
    for (k, w) in words.iter().enumerate() {
        let next = words.get(k + 1).map(|s| s.to_string());
        match *w {
            ">" | "-w" | "-o" => out.extend(next.filter(|n| !n.starts_with('/'))),
            "outfile" => out.extend(next),
            _ if k > 0 && words[k - 1] == "pcapout" => {
                out.extend(w.strip_prefix("file=").map(str::to_string))
            }
            _ => {}
        }
    }
    out
}

/// Processes started by this session (they carry its marker in their environment).
fn marked(marker: &str) -> Vec<i32> {
    let want = format!("SL_README_TEST={marker}");
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
                pids.push(pid);
            }
        }
    }
    pids
}

fn kill_marked(marker: &str) {
    for sig in ["-TERM", "-KILL"] {
        let pids = marked(marker);
        if pids.is_empty() {
            return;
        }
        for p in &pids {
            let _ = Command::new("kill")
                .args([sig, &p.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        common::wait_for(
            "the session's processes to end",
            Duration::from_secs(10),
            || marked(marker).is_empty() || sig == "-KILL",
        );
    }
}

/// A scratch copy of the repository root: `crates` and `examples` copied (examples read
/// and list them), everything else linked.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sl-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(root()).unwrap().flatten() {
        let name = e.file_name();
        let n = name.to_string_lossy();
        if n == ".git" {
            continue;
        }
        if n == "crates" || n == "examples" {
            let st = Command::new("cp")
                .arg("-a")
                .arg(e.path())
                .arg(&dir)
                .status()
                .unwrap();
            assert!(st.success());
        } else {
            std::os::unix::fs::symlink(e.path(), dir.join(&name)).unwrap();
        }
    }
    dir
}

// Over 150 lines: the README's examples in order in one scratch directory and namespace
// (later examples read what earlier ones wrote), each checked as it runs.
#[test]
fn every_readme_example_runs_as_written_and_does_what_it_says() {
    common::daemon::require_root(
        "the examples capture on a veth pair in a network namespace, load eBPF and mount PipesFS",
    );
    assert!(
        Command::new("tcpreplay")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "the README's host B replays the sample with tcpreplay (scripts/setup installs it)"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "the README's daemon mounts PipesFS: /dev/fuse (FUSE) is missing"
    );
    let _ = common::daemon::daemon_bin();

    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let all = examples(&readme);
    let (skipped, run): (Vec<(usize, &Example)>, Vec<(usize, &Example)>) = all
        .iter()
        .enumerate()
        .partition(|(_, e)| e.not_run().is_some());
    eprintln!(
        "README.md: {} examples, {} run, {} not run:",
        all.len(),
        run.len(),
        skipped.len()
    );
    for (_, e) in &skipped {
        eprintln!(
            "  line {}: {} (not run: {})",
            e.line,
            e.text.lines().next().unwrap(),
            e.not_run().unwrap()
        );
    }
    assert!(
        all.len() >= 60,
        "only {} examples found in README.md: is the parser broken?",
        all.len()
    );
    assert!(
        skipped.len() <= MAX_NOT_RUN,
        "{} README examples are marked `not run:` (at most {MAX_NOT_RUN})",
        skipped.len()
    );
    let checks = checks();
    for (needle, _) in &checks {
        assert!(
            run.iter().any(|(_, e)| e.text.contains(needle)),
            "no README example contains {needle:?}: update the check that goes with it"
        );
    }

    // A check reads what its example wrote after the whole session: no later example may
    // write the same file (`> F`, `-w F`, `file=F`, `-o F`).
    for (i, e) in &run {
        for (_, later) in run.iter().filter(|(j, _)| j > i) {
            for w in written(&e.text) {
                assert!(
                    !written(&later.text).contains(&w),
                    "README.md lines {} and {} both write {w}: a check of the first would read the second's",
                    e.line,
                    later.line
                );
            }
        }
    }
    let dir = scratch();
    let state = dir.join(".readme-test");
    std::fs::create_dir_all(&state).unwrap();
    let bindir = Path::new(BIN).parent().unwrap();
    let marker = format!("{}", std::process::id());

    // The references the checks compare with, made before the session changes anything.
    let refs = Refs {
        http: streamline(
            &[
                "run",
                "pcapin file=examples/sample.pcap | tcp | http | inspect",
            ],
            &dir,
        )
        .0,
        ip_http: streamline(
            &[
                "run",
                "pcapin file=examples/sample.pcap | ip | tcp | http | inspect",
            ],
            &dir,
        )
        .0,
        services_tcp: String::from_utf8_lossy(
            &Command::new("bash")
                .args(["-c", "cat /etc/services | grep tcp | wc -l"])
                .output()
                .unwrap()
                .stdout,
        )
        .into_owned(),
    };

    // The session: a private /run/streamline, then every example with its outputs kept.
    let mut script = String::from(
        "mkdir -p /run/streamline && mount -t tmpfs sl-readme-test /run/streamline || { echo 'cannot mount a tmpfs on /run/streamline' >&2; exit 99; }\n",
    );
    for (i, e) in &run {
        let st = state.display();
        script.push_str(&format!(
            "echo {i} > {st}/current\n{{ {}\n}} > {st}/{i}.out 2> {st}/{i}.err < /dev/null\necho $? > {st}/{i}.rc\n",
            e.text.trim_end()
        ));
    }
    std::fs::write(state.join("session.sh"), &script).unwrap();
    let path = format!(
        "{}:{}",
        bindir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "bash"])
        .arg(state.join("session.sh"))
        .current_dir(&dir)
        .env("PATH", &path)
        .env("SL_README_TEST", &marker)
        .env_remove("STREAMLINE_SOCKET")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(state.join("session.out")).unwrap())
        .stderr(std::fs::File::create(state.join("session.err")).unwrap())
        .spawn()
        .expect("unshare (util-linux) starts the session");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > SESSION_LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let current: usize = std::fs::read_to_string(state.join("current"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    // Whatever the examples left running (a failed example's background job), and host B.
    kill_marked(&marker);
    let _ = child.kill();
    let _ = child.wait();
    let _ = Command::new("ip")
        .args(["netns", "del", "sl-lab"])
        .stderr(Stdio::null())
        .status();
    let _ = Command::new("ip")
        .args(["link", "del", "sl-lab0"])
        .stderr(Stdio::null())
        .status();
    if Path::new("/tmp/kafka").exists() && status.is_none() {
        let _ = Command::new("bash")
            .arg(root().join("scripts/kafka-broker"))
            .args(["stop", "/tmp/kafka"])
            .status();
    }
    let session_err = std::fs::read_to_string(state.join("session.err")).unwrap_or_default();
    let Some(status) = status else {
        let e = all[current].clone();
        panic!(
            "the README's examples did not finish in {:?}: line {} hung: {}\nits stderr: {}",
            SESSION_LIMIT,
            e.line,
            e.text,
            std::fs::read_to_string(state.join(format!("{current}.err"))).unwrap_or_default()
        );
    };
    assert!(status.code() != Some(99), "{session_err}");

    let mut session = Session {
        dir: dir.clone(),
        results: BTreeMap::new(),
    };
    for (i, _) in &run {
        let read = |ext: &str| {
            std::fs::read_to_string(state.join(format!("{i}.{ext}"))).unwrap_or_default()
        };
        session.results.insert(
            *i,
            Outcome {
                rc: read("rc").trim().parse().ok(),
                out: read("out"),
                err: read("err"),
            },
        );
    }
    let mut failures = Vec::new();
    for (i, e) in &run {
        let o = &session.results[i];
        let first = e.text.trim_start();
        let timed = first.starts_with("timeout ");
        let status_ok = if timed {
            matches!(o.rc, Some(0) | Some(124) | Some(130) | Some(143))
        } else {
            o.rc == Some(0)
        };
        let verdict = if !status_ok {
            Err(format!("exit status {:?}", o.rc))
        } else if let Some((_, check)) = checks.iter().find(|(n, _)| e.text.contains(n)) {
            check(o, &session, &refs)
        } else {
            Ok(())
        };
        if let Err(why) = verdict {
            let tail = |s: &str| {
                s.lines()
                    .rev()
                    .take(12)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n    ")
            };
            failures.push(format!(
                "README.md line {}: {}  ({})\n  {why}\n  stdout:\n    {}\n  stderr:\n    {}",
                e.line,
                e.text.trim_end(),
                e.comment,
                tail(&o.out),
                tail(&o.err)
            ));
        }
    }
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        session.dir = PathBuf::new();
    }
    assert!(
        failures.is_empty(),
        "{} of {} README examples failed (scratch dir kept: {}):\n\n{}\n\nsession stderr: {session_err}",
        failures.len(),
        run.len(),
        dir.display(),
        failures.join("\n\n")
    );
}

#[test]
fn the_parser_finds_continuations_heredocs_and_markers() {
    // The first block (the newcomer's two commands) is .ci/run's, not this test's.
    let md = "```sh\nbash scripts/setup\n```\ntext\n```sh\na 'x # y' # one\n# only a comment\nb \\\n  c   # two # not run: why\ncat <<'EOF'\nl1\nEOF\nd &\n```\n```rust\nnot shell\n```\n";
    let ex = examples(md);
    assert_eq!(ex.len(), 4, "{ex:?}");
    assert_eq!(ex[0].text, "a 'x # y' # one\n");
    assert_eq!(ex[0].comment, "one");
    assert_eq!(ex[1].text, "b \\\n  c   # two # not run: why\n");
    assert_eq!(ex[1].not_run(), Some("why"));
    assert_eq!(ex[2].text, "cat <<'EOF'\nl1\nEOF\n");
    assert_eq!(ex[3].text, "d &\n");
    assert_eq!(ex[0].not_run(), None);
}
