//! End-to-end: the real `streamline` binary on the shipped capture, checked against
//! tcpdump reading the same file with the equivalent filter expression. Needs tcpdump
//! (scripts/setup installs it); a missing tcpdump fails with a message naming it.

use std::path::PathBuf;
use std::process::Command;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn sample() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../examples/sample.pcap"
    ))
}

fn tcpdump_count(file: &std::path::Path, expr: &str) -> u64 {
    let out = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(file)
        .arg(expr)
        .output()
        .unwrap_or_else(|e| {
            panic!("tcpdump is required for this test (install it: apt-get install tcpdump): {e}")
        });
    assert!(
        out.status.success(),
        "tcpdump '{expr}' failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().count() as u64
}

/// Run a pipeline; returns (exit code, stdout, stderr).
fn streamline(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run streamline");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The number in `count`'s summary line.
fn count_of(pipeline: &str) -> u64 {
    let (code, _, err) = streamline(&["run", "-q", pipeline]);
    assert_eq!(code, 0, "streamline run '{pipeline}' failed:\n{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("count: "))
        .unwrap_or_else(|| panic!("no count line for '{pipeline}':\n{err}"));
    line["count: ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn counts_equal_tcpdump_on_shipped_capture() {
    let f = sample();
    // Each middle part ends where `count` attaches: after a filter (then `| count`) or
    // after a selector (then ` count`).
    let cases: &[(&str, &str)] = &[
        ("", ""),
        ("ip |4", "ip"),
        ("ip |6", "ip6"),
        ("ip |", "ip or ip6"),
        ("tcp |", "tcp"),
        ("udp |", "udp"),
        ("icmp |1", "icmp"),
        ("icmp |2", "icmp6"),
        ("tcp | dport |80", "tcp dst port 80"),
        ("tcp | sport |80", "tcp src port 80"),
        ("udp | dport |53", "udp dst port 53"),
        ("udp | sport |53", "udp src port 53"),
        ("dport |1:1023", "(tcp or udp) and dst portrange 1-1023"),
        // Inversion admits class 0 too (everything that is not TCP/UDP to ports 1-1023).
        (
            "dport |!1:1023",
            "not ((tcp or udp) and dst portrange 1-1023)",
        ),
        ("proto |17", "udp"),
        ("tcp + udp |", "tcp or udp"),
        (
            "(tcp | dport 80) ++ (udp | dport 53) |",
            "(tcp dst port 80) or (udp dst port 53)",
        ),
        ("tcp +* dport 80 |", "tcp and dst port 80"),
    ];
    let mut checked = 0;
    for (pipe, expr) in cases {
        let p =
            format!("pcapin file={} | {pipe} count", f.display()).replace("|  count", "| count");
        let p = if pipe.is_empty() {
            format!("pcapin file={} | count", f.display())
        } else {
            p
        };
        let ours = count_of(&p);
        let theirs = tcpdump_count(&f, expr);
        assert!(
            theirs > 0,
            "tcpdump found nothing for '{expr}': the sample should contain it"
        );
        assert_eq!(
            ours, theirs,
            "'{p}' counted {ours}, tcpdump '{expr}' counted {theirs}"
        );
        checked += 1;
    }
    assert_eq!(checked, cases.len());
}

/// `A + B | hist`: a join keeps each block's class, and tcp and udp classify by protocol
/// number, so hist shows the two branches apart, each with tcpdump's count and share.
#[test]
fn hist_after_a_parallel_shows_each_branch_as_tcpdump_counts_it() {
    let f = sample();
    let (tcp, udp) = (tcpdump_count(&f, "tcp"), tcpdump_count(&f, "udp"));
    assert!(tcp > 0 && udp > 0, "the sample has tcp {tcp} and udp {udp}");
    let pipeline = format!("pcapin file={} | tcp + udp | hist", f.display());
    let (code, _, err) = streamline(&["run", "-q", "--socket", "none", &pipeline]);
    assert_eq!(code, 0, "{pipeline}:\n{err}");
    // `  class        6:       4565 (88.4%)`
    let rows: Vec<(u64, u64, String)> = err
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("class")?;
            let (class, rest) = rest.split_once(':')?;
            let (n, pct) = rest.trim().split_once(' ')?;
            Some((class.trim().parse().ok()?, n.parse().ok()?, pct.to_string()))
        })
        .collect();
    let total = tcp + udp;
    let share = |n: u64| format!("({:.1}%)", 100.0 * n as f64 / total as f64);
    assert_eq!(
        rows,
        vec![(6, tcp, share(tcp)), (17, udp, share(udp))],
        "hist rows (class, blocks, share) against tcpdump's tcp {tcp} and udp {udp}:\n{err}"
    );
    assert!(err.contains(&format!("hist: {total} blocks")), "{err}");
    // The names tcp and udp publish select one branch after the join.
    let by_name = |name: &str| {
        count_of(&format!(
            "pcapin file={} | tcp + udp |{name} count",
            f.display()
        ))
    };
    assert_eq!((by_name("tcp"), by_name("udp")), (tcp, udp));
}

#[test]
fn pcapout_is_read_back_by_tcpdump_packet_for_packet() {
    let f = sample();
    let dir = std::env::temp_dir().join(format!("sl-pcapout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("udp.pcap");
    let (code, _, err) = streamline(&[
        "run",
        "-q",
        &format!(
            "pcapin file={} | udp | pcapout file={}",
            f.display(),
            out.display()
        ),
    ]);
    assert_eq!(code, 0, "{err}");
    let theirs = Command::new("tcpdump")
        .args(["-n", "-tt", "-r"])
        .arg(&f)
        .arg("udp")
        .output()
        .expect("tcpdump");
    let ours = Command::new("tcpdump")
        .args(["-n", "-tt", "-r"])
        .arg(&out)
        .output()
        .expect("tcpdump");
    assert!(
        ours.status.success(),
        "tcpdump cannot read our file: {}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let (a, b) = (
        String::from_utf8_lossy(&theirs.stdout),
        String::from_utf8_lossy(&ours.stdout),
    );
    assert!(a.lines().count() > 0);
    assert_eq!(
        a, b,
        "tcpdump's view of our pcapout differs from the original's udp packets"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_inputs_give_clear_errors() {
    // A file that is not a capture.
    let dir = std::env::temp_dir().join(format!("sl-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").unwrap();
    let (code, _, err) = streamline(&["run", &format!("pcapin file={} | count", junk.display())]);
    assert_ne!(code, 0);
    assert!(
        err.contains("not a pcap or pcapng file") && err.contains("byte 0"),
        "{err}"
    );
    // A truncated capture: the packets before the cut are kept, the cut is named.
    let data = std::fs::read(sample()).unwrap();
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &data[..data.len() / 2 + 7]).unwrap();
    let (code, _, err) = streamline(&[
        "run",
        "-q",
        &format!("pcapin file={} | count", cut.display()),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("truncated") && err.contains("at byte"),
        "{err}"
    );
    // A missing file.
    let (code, _, err) = streamline(&["run", "pcapin file=/nonexistent.pcap | count"]);
    assert_ne!(code, 0);
    assert!(err.contains("/nonexistent.pcap"), "{err}");
    // A pipeline error shows a caret.
    let (code, _, err) = streamline(&["check", "pcapin file=x.pcap | tcpp | count"]);
    assert_eq!(code, 2);
    assert!(err.contains('^') && err.contains("tcpp"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unix_commands_and_edits_round_trip() {
    let dir = std::env::temp_dir().join(format!("sl-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.txt");
    let text: String = (0..5000)
        .map(|i| format!("line {i} of the test input\n"))
        .collect();
    std::fs::write(&input, &text).unwrap();
    // deflate | inflate and encrypt | decrypt restore every block; a Unix process in the
    // middle (tr) sees the bytes and its output continues down the pipeline.
    let out = dir.join("out.txt");
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let p = format!(
        "file {} split=fixed size=4K | deflate | inflate | encrypt key={key} | decrypt key={key} | tr a-z A-Z | outfile {}",
        input.display(),
        out.display()
    );
    let (code, _, err) = streamline(&["run", "-q", &p]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text.to_uppercase());
    // A plain Unix pipeline is a valid Streamline program.
    let (code, stdout, err) =
        streamline(&["run", "-q", &format!("cat {} | wc -l", input.display())]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stdout.trim(), "5000");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_stops_the_run_and_still_prints_totals() {
    let dir = std::env::temp_dir().join(format!("sl-ctrlc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stats = dir.join("stats.json");
    let child = Command::new(BIN)
        .args(["run", "-q", "--stats"])
        .arg(&stats)
        .arg("gen count=100G size=64 | count")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Interrupted while blocks flow (its counters, written as it runs, show some).
    common::wait_for(
        "the run to count blocks",
        std::time::Duration::from_secs(20),
        || common::stats_counter(&stats, "count", "blocks_in").is_some_and(|n| n > 0),
    );
    // SIGINT, as Ctrl-C sends.
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("count: "))
        .unwrap_or_else(|| panic!("no totals after Ctrl-C:\n{err}"));
    let n: u64 = line["count: ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n > 0, "{line}");
    assert!(err.contains("interrupted"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn filters_are_listed_and_documented() {
    let (code, out, _) = streamline(&["filters"]);
    assert_eq!(code, 0);
    assert!(out.lines().count() >= 30, "{out}");
    let (code, out, _) = streamline(&["filters", "dport"]);
    assert_eq!(code, 0);
    for s in [
        "SYNOPSIS",
        "PARAMETERS",
        "CLASSES",
        "EXAMPLE",
        "destination port",
    ] {
        assert!(out.contains(s), "{out}");
    }
    let (code, _, err) = streamline(&["filters", "nosuch"]);
    assert_eq!(code, 2);
    assert!(err.contains("nosuch"), "{err}");
}

#[test]
fn check_prints_the_graph() {
    let (code, out, err) = streamline(&["check", "pcapin file=x.pcap | tcp + udp | count"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("pcapin")
            && out.contains("join")
            && out.contains("count")
            && out.contains("->"),
        "{out}"
    );
}

/// The progress bar, seen on a real pseudo-terminal: `script` (util-linux) runs the command
/// with stderr on a pty and stdout redirected to a file, and records what the terminal got.
#[test]
fn progress_bar_shows_on_a_terminal_and_not_in_pipes() {
    let dir = std::env::temp_dir().join(format!("sl-bar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A capture large enough that the run lasts several progress ticks (100 ms each):
    // the shipped sample's packets repeated.
    let sample = std::fs::read(sample()).unwrap();
    let mut big = sample[..24].to_vec();
    for _ in 0..4 {
        big.extend_from_slice(&sample[24..]);
    }
    let cap = dir.join("big.pcap");
    std::fs::write(&cap, &big).unwrap();
    let pipeline = format!("pcapin file={} | deflate | inflate | count", cap.display());
    let typescript = dir.join("typescript");
    let cmd = format!("{BIN} run '{pipeline}' > {}", dir.join("stdout").display());
    let st = Command::new("script")
        .args(["-qec", &cmd])
        .arg(&typescript)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("`script` (util-linux, package bsdutils) is required for this test: {e}")
        });
    let term = String::from_utf8_lossy(&std::fs::read(&typescript).unwrap()).into_owned();
    assert!(st.status.success(), "run under script failed:\n{term}");
    // indicatif draws the total size and a bar of ░/█ characters, then clears it; the
    // table and count line follow.
    let total = format!("{:.2} MiB", big.len() as f64 / (1 << 20) as f64);
    assert!(
        term.contains(&total),
        "no progress bar with total {total} on the terminal:\n{term}"
    );
    assert!(
        term.contains('░') || term.contains('█'),
        "no bar drawn:\n{term}"
    );
    assert!(term.contains("count: "), "{term}");
    // Without a terminal (this test's own pipes) there is no bar.
    let (code, _, err) = streamline(&["run", &pipeline]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !err.contains(&total) && !err.contains('░'),
        "a bar was drawn into a pipe:\n{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bpf "EXPR"` (libpcap's compiler, our interpreter) counts what `tcpdump -r FILE EXPR`
/// prints, for expressions beyond what the protocol filters express.
#[test]
fn bpf_counts_equal_tcpdump() {
    let cap = sample();
    for expr in [
        "tcp dst port 80",
        "udp port 53 or icmp6",
        "tcp[tcpflags] & tcp-syn != 0",
        "ip[2:2] > 500 and not tcp",
        "greater 1000",
        "ether host 02:00:0a:63:00:01 and ip6",
    ] {
        let want = tcpdump_count(&cap, expr);
        let got = count_of(&format!(
            "pcapin file={} | bpf \"{expr}\" | count",
            cap.display()
        ));
        assert_eq!(got, want, "bpf \"{expr}\"");
    }
    let (code, _, err) = streamline(&[
        "run",
        &format!("pcapin file={} | bpf \"tcp prt 80\" | count", cap.display()),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("'tcp prt 80' does not compile") && err.contains("syntax error"),
        "{err}"
    );
}
