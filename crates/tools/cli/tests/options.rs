//! Nothing accepted is ignored (issue 14): every control option (thesis Table 3.2) and hint
//! (Table 3.3) the parser accepts has its documented effect, or is refused with an error
//! that says why. Each effect is checked where it shows: outputs, files in /dev/shm, the
//! scheduling policy of a space's thread in /proc, how often a thread sleeps.

use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{count_of, wait_for};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");

fn run(p: &str) -> (Option<i32>, String, String) {
    let o = Command::new(BIN)
        .args(["run", "-q", "--plan", "none", p])
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn file_passes_a_first_parameter_from_a_file() {
    let d = std::env::temp_dir().join(format!("sl-opt-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let re = d.join("re.txt");
    std::fs::write(&re, "GET /[a-z]+\n").unwrap();
    let bpf = d.join("bpf.txt");
    std::fs::write(&bpf, "tcp port 80\n").unwrap();
    let inline = run(&format!(
        "pcapin file={SAMPLE} | regex \"GET /[a-z]+\" | count"
    ));
    let from_file = run(&format!(
        "pcapin file={SAMPLE} | regex file={} | count",
        re.display()
    ));
    assert_eq!(inline, from_file);
    assert!(count_of(&inline.2) > 0);
    let inline = run(&format!(
        "pcapin file={SAMPLE} | bpf \"tcp port 80\" | count"
    ));
    assert_eq!(
        inline,
        run(&format!(
            "pcapin file={SAMPLE} | bpf file={} | count",
            bpf.display()
        ))
    );
    // Both, or a filter without parameters, or a missing file: refused, saying why.
    let (code, _, err) = run(&format!(
        "pcapin file={SAMPLE} | regex x file={} | count",
        re.display()
    ));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("regex: file=") && err.contains("not both"),
        "{err}"
    );
    let (code, _, err) = run(&format!(
        "pcapin file={SAMPLE} | tcp file={} | count",
        re.display()
    ));
    assert_eq!(code, Some(2));
    assert!(err.contains("tcp takes no parameter"), "{err}");
    let (code, _, err) = run(&format!(
        "pcapin file={SAMPLE} | regex file=/nonexistent/x | count"
    ));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("file=/nonexistent/x") && err.contains("No such file"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn options_without_a_meaning_here_are_refused_saying_why() {
    for (opt, why) in [
        ("reuse=yes", "not reconfigured while it runs"),
        ("binary=7", "no repository of blobs"),
        ("mode=0640", "give export=yes too"),
    ] {
        let (code, _, err) = run(&format!("pcapin file={SAMPLE} | tcp {opt} | count"));
        assert_eq!(code, Some(2), "{opt}: {err}");
        assert!(err.contains("tcp: ") && err.contains(why), "{opt}: {err}");
    }
    // A yes/no option with another value is an error, never a silent no; regex takes the
    // options it advertises.
    let (code, _, err) = run(&format!(
        "pcapin file={SAMPLE} | regex get icase=maybe | count"
    ));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("regex: parameter icase=maybe: expected yes or no"),
        "{err}"
    );
    let upper = run(&format!("pcapin file={SAMPLE} | regex GET | count"));
    let any_case = run(&format!(
        "pcapin file={SAMPLE} | regex get icase=yes | count"
    ));
    assert!(
        count_of(&any_case.2) >= count_of(&upper.2) && count_of(&upper.2) > 0,
        "{upper:?} {any_case:?}"
    );
    let all = run(&format!("pcapin file={SAMPLE} | count"));
    let not = run(&format!(
        "pcapin file={SAMPLE} | regex GET invert=yes | count"
    ));
    assert_eq!(count_of(&not.2) + count_of(&upper.2), count_of(&all.2));
    // A filter's own `mode` is its own (join, split).
    let (code, _, err) = run(&format!(
        "pcapin file={SAMPLE} | (tcp + udp) | join mode=all | count"
    ));
    assert_eq!(code, Some(0), "{err}");
}

/// Every word after a Unix command's name is its argument, as in bash (`echo name=x`
/// printed an empty line when `name=` was taken for Streamline's option); Streamline's
/// options for the command follow `@` (`wc -l @space=1`), and the old spelling beside
/// native filters is refused with both spellings.
#[test]
fn unix_commands_take_space_and_name_after_at() {
    let lines = std::fs::read_to_string("/etc/services")
        .unwrap()
        .lines()
        .count();
    let (code, out, err) = run("cat /etc/services | wc -l @space=1");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim().parse::<usize>().unwrap(), lines);
    let (code, out, err) = run("cat /etc/services @space=p1 @name=src | wc -l");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim().parse::<usize>().unwrap(), lines);
    // key=value words are the command's arguments, as in the shell: echo prints them, wc
    // looks for a file of that name and fails as it does in bash.
    for p in [
        "echo name=x",
        "echo space=1",
        "echo name=x space=p1 export=yes | cat",
        "cat /etc/services | wc -l export=yes",
        "cat /etc/services | wc -l space=1",
    ] {
        let o = Command::new(BIN)
            .args(["run", "-q", "--plan", "none", p])
            .output()
            .unwrap();
        let bash = Command::new("bash").args(["-c", p]).output().unwrap();
        assert_eq!(
            (o.status.code(), String::from_utf8_lossy(&o.stdout)),
            (bash.status.code(), String::from_utf8_lossy(&bash.stdout)),
            "{p}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // Beside a native filter, the spelling that once placed the command is refused
    // before anything runs, with a caret under it and both spellings.
    let (code, out, err) = run("gen count=3 | wc -l space=1");
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("^^^^^^^") && err.contains("@space=1") && err.contains("'space=1'"),
        "{err}"
    );
    let (code, out, err) = run("gen count=3 size=2 | wc -c @space=1 @name=w");
    assert_eq!((code, out.trim()), (Some(0), "6"), "{err}");
}

/// `ls -l`-style checks on the exported stream of a run that is still going.
#[test]
fn export_takes_size_and_mode() {
    let name = format!("optexp{}", std::process::id());
    let mut child = Command::new(BIN)
        .args([
            "run",
            "-q",
            "--plan",
            "none",
            &format!(
                "gen count=100000000 size=64 | null name={name} export=yes mode=0640 size=256K"
            ),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let data = format!("/dev/shm/streamline.{name}.data");
    let tags = format!("/dev/shm/streamline.{name}");
    let mut found = None;
    for _ in 0..200 {
        if let (Ok(d), Ok(t)) = (std::fs::metadata(&data), std::fs::metadata(&tags)) {
            found = Some((d, t));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let (d, t) = found.unwrap_or_else(|| panic!("no exported stream {data}"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(d.permissions().mode() & 0o7777, 0o640);
    assert_eq!(t.permissions().mode() & 0o7777, 0o640);
    // The data ring: one header page and 256 KiB (the default is 16 MiB).
    assert!(
        d.len() >= 256 << 10 && d.len() < 1 << 20,
        "{} bytes",
        d.len()
    );
    assert!(
        std::fs::metadata(&data).is_err(),
        "the export was not removed at the end"
    );
}

/// Scheduling policy (field 41 of /proc/PID/task/TID/stat) of each thread, by name.
fn policies(pid: u32) -> Vec<(String, u32, u32)> {
    let mut v = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // Fields after the command name (which is in parentheses).
        let rest: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |x| x.1)
            .split_whitespace()
            .collect();
        let field = |n: usize| {
            rest.get(n - 3)
                .and_then(|x| x.parse().ok())
                .unwrap_or(u32::MAX)
        };
        v.push((comm, field(41), field(40)));
    }
    v
}

#[test]
fn scheduling_hints_set_the_policy_of_the_filters_thread() {
    let child = Command::new(BIN)
        .args(["run", "-q", "--plan", "none", "gen count=100000000 size=1K | xor 5a @realtime | xor 33 @background | xor 11 @hrealtime | null"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // SCHED_RR (2) at 10, SCHED_IDLE (5), SCHED_FIFO (1) at 50: one space thread each,
    // waited for (a thread takes its policy as it starts); none within 20 s fails.
    let expected = [(2, 10), (5, 0), (1, 50)];
    let mut p = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        p = policies(child.id());
        if expected.iter().all(|(policy, prio)| {
            p.iter()
                .any(|t| t.0.starts_with("sl-space") && t.1 == *policy && t.2 == *prio)
        }) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let spaces: Vec<&(String, u32, u32)> =
        p.iter().filter(|t| t.0.starts_with("sl-space")).collect();
    for (policy, prio) in expected {
        assert!(
            spaces.iter().any(|t| t.1 == policy && t.2 == prio),
            "no space thread with policy {policy} priority {prio}: {p:?}"
        );
    }
    // The calling thread (the source) keeps the normal policy.
    assert!(p.iter().any(|t| t.0 == "streamline" && t.1 == 0), "{p:?}");
}

/// Voluntary context switches (sleeps) of the thread named `name` of `pid`.
fn sleeps(pid: u32, name: &str) -> Option<u64> {
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        if std::fs::read_to_string(t.path().join("comm")).ok()?.trim() == name {
            let st = std::fs::read_to_string(t.path().join("status")).ok()?;
            return st
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok());
        }
    }
    None
}

#[test]
fn busy_polls_its_channels_instead_of_sleeping() {
    // A space fed by a source that has nothing to give (stdin held open, empty): without
    // @busy its thread sleeps on the channel and wakes every poll interval; with @busy it
    // looks again at once and never sleeps.
    let measure = |hint: &str| {
        let mut child = Command::new(BIN)
            .args([
                "run",
                "-q",
                "--plan",
                "none",
                &format!("stdin | count space=1 {hint}"),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for("space 1's thread", Duration::from_secs(20), || {
            sleeps(child.id(), "sl-space1").is_some()
        });
        let a = sleeps(child.id(), "sl-space1").expect("space 1's thread");
        // The window the thread's sleeps are counted over (nothing is awaited here).
        std::thread::sleep(Duration::from_millis(1000));
        let b = sleeps(child.id(), "sl-space1").expect("space 1's thread");
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        b - a
    };
    let (sleepy, busy) = (measure(""), measure("@busy"));
    assert!(sleepy >= 5, "the consumer slept {sleepy} times in a second on an empty channel (it waits 50 ms at a time)");
    assert!(
        busy * 5 < sleepy,
        "@busy slept {busy} times, without it {sleepy}"
    );
}
