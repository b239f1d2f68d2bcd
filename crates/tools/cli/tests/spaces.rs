//! End-to-end: the same pipelines placed in one space, on worker threads and in process
//! spaces give byte-identical results; a killed process space ends the run with an error
//! naming its filters, in bounded time, leaving no process behind.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn sample() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../examples/sample.pcap"
    ))
}

/// Run a pipeline; returns (exit code, stdout bytes, stderr).
fn run(pipeline: &str) -> (i32, Vec<u8>, String) {
    let out = Command::new(BIN)
        .args(["run", "-q", pipeline])
        .output()
        .expect("run streamline");
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A scratch directory for one test, removed when it ends (pass or fail).
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("sl-spaces-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `template` with `{A}`, `{B}` replaced by the placement options of one variant.
fn variants(template: &str) -> Vec<(String, String)> {
    [
        ("one space", "", ""),
        ("threads", " space=1", " space=2"),
        ("processes", " space=p1", " space=p2"),
        ("thread and process", " space=1", " space=p2"),
    ]
    .iter()
    .map(|(name, a, b)| {
        (
            name.to_string(),
            template.replace("{A}", a).replace("{B}", b),
        )
    })
    .collect()
}

#[test]
fn placements_give_identical_results() {
    let dir = Scratch::new("identical");
    let tmp = |n: &str| dir.file(n);
    let cap = sample();
    let text = tmp("text.txt");
    let lines: String = (0..20000)
        .map(|i| format!("line {i} of the placement test\n"))
        .collect();
    std::fs::write(&text, &lines).unwrap();
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let cases = [
        // inspect's text (stdout) after protocol filters in other spaces
        format!("pcapin file={} | ip | tcp{{A}} | http{{B}} | inspect", cap.display()),
        // timestamps and wire lengths must survive the crossing: pcapout's file
        format!("pcapin file={} | ip{{A}} | udp{{B}} | pcapout file=OUT", cap.display()),
        // edits across spaces, back to the original bytes
        format!("file {} split=fixed size=4K | deflate{{A}} | encrypt key={key} | decrypt key={key}{{B}} | inflate | outfile OUT", text.display()),
    ];
    for (ci, case) in cases.iter().enumerate() {
        let mut first: Option<(String, Vec<u8>)> = None;
        for (vi, (name, p)) in variants(case).into_iter().enumerate() {
            let out = tmp(&format!("out-{ci}-{vi}"));
            let p = p.replace("OUT", &out.display().to_string());
            let (code, stdout, err) = run(&p);
            assert_eq!(code, 0, "{name}: `{p}` failed:\n{err}");
            let result = if p.contains("outfile") || p.contains("pcapout") {
                std::fs::read(&out).unwrap()
            } else {
                stdout
            };
            assert!(!result.is_empty(), "{name}: `{p}` produced nothing");
            match &first {
                None => first = Some((p.clone(), result)),
                Some((p0, r0)) => assert!(
                    r0 == &result,
                    "{name}: `{p}` differs from `{p0}` ({} vs {} bytes)",
                    result.len(),
                    r0.len()
                ),
            }
        }
        if ci == 2 {
            assert_eq!(
                first.unwrap().1,
                lines.as_bytes(),
                "round trip restores the input"
            );
        }
    }
}

#[test]
fn counts_agree_across_spaces_and_data_parallel_replicas() {
    let count = |p: &str| -> String {
        let (code, _, err) = run(p);
        assert_eq!(code, 0, "`{p}`:\n{err}");
        err.lines()
            .find(|l| l.starts_with("count: "))
            .unwrap_or_else(|| panic!("no count line for `{p}`:\n{err}"))
            .to_string()
    };
    let cap = sample();
    let one = count(&format!(
        "pcapin file={} | tcp | dport |80 count",
        cap.display()
    ));
    assert_eq!(
        one,
        count(&format!(
            "pcapin file={} | tcp space=p1 | dport |80 count space=2",
            cap.display()
        ))
    );
    // Data parallelism: replicas on two spaces, every block once.
    let par = count(
        "gen count=3000 size=4K | split 2 | (deflate space=1 + deflate space=p2) | inflate | count",
    );
    assert!(
        par.starts_with("count: 3000 blocks, 12288000 bytes"),
        "{par}"
    );
    // A filter's own `size=` (gen's block size) is not the stream's buffer size (the
    // control option of that name): 64 KiB blocks cross into a process space as into a
    // thread space, and count as in one space.
    let big = count("gen count=200 size=64K | count");
    for p in [
        "gen count=200 size=64K | count space=1",
        "gen count=200 size=64K | count space=p1",
    ] {
        assert_eq!(count(p), big, "`{p}`");
    }
    // `placed=kernel` where no capture socket can run the program: it runs here, and keeps
    // what it keeps in user space (it once passed every frame, trusting a socket filter
    // that was not there).
    let user = count(&format!(
        "pcapin file={} | bpf \"udp\" | count",
        cap.display()
    ));
    let kernel = count(&format!(
        "pcapin file={} | bpf \"udp\" placed=kernel | count",
        cap.display()
    ));
    assert_eq!(kernel, user);
    // Connection scaling: a hash split on the flow class keeps each flow on one replica.
    let flows = count(&format!("pcapin file={} | tcp | flow | split 2 mode=hash | (tcpstream space=1 + tcpstream space=2) | count", cap.display()));
    let single = count(&format!(
        "pcapin file={} | tcp | flow | tcpstream | count",
        cap.display()
    ));
    assert_eq!(flows, single);
}

#[test]
fn replicas_restore_the_order_and_keep_sessions_together() {
    let dir = Scratch::new("replicas");
    let tmp = |n: &str| dir.file(n);
    // A file of distinct 4 KiB blocks: deflated by replicas on two threads, or on a thread
    // and a process, the output is byte for byte what one deflate makes.
    let input = tmp("par-in.bin");
    let data: Vec<u8> = (0..3000u32)
        .flat_map(|i| (0..4096u32).map(move |k| ((k * 7 + i * 13) % 251) as u8 ^ (i as u8)))
        .collect();
    std::fs::write(&input, &data).unwrap();
    let mut outs = Vec::new();
    for (k, placement) in ["", " space=1,2", " space=1,p2", " space=p1,p2,3"]
        .iter()
        .enumerate()
    {
        let out = tmp(&format!("par-{k}.z"));
        let p = format!(
            "file {} split=fixed size=4K | deflate{placement} | outfile {}",
            input.display(),
            out.display()
        );
        let (code, _, err) = run(&p);
        assert_eq!(code, 0, "`{p}`:\n{err}");
        outs.push((p, std::fs::read(&out).unwrap()));
    }
    for (p, o) in &outs[1..] {
        assert!(
            o == &outs[0].1,
            "`{p}` is not byte-identical to one deflate ({} vs {} bytes)",
            o.len(),
            outs[0].1.len()
        );
    }
    // And back, inflated by replicas too.
    let back = tmp("par-back.bin");
    let p = format!(
        "file {} split=fixed size=4K | deflate space=1,2 | inflate space=p3,4 | outfile {}",
        input.display(),
        back.display()
    );
    let (code, _, err) = run(&p);
    assert_eq!(code, 0, "{err}");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "round trip through replicas"
    );
    // Connection scaling: tcpstream keeps sessions, so its replicas get a hash split on
    // the flow class and reassemble exactly what one instance does.
    let count = |p: &str| {
        let (code, _, err) = run(p);
        assert_eq!(code, 0, "`{p}`:\n{err}");
        err.lines()
            .find(|l| l.starts_with("count: "))
            .unwrap_or_else(|| panic!("{err}"))
            .to_string()
    };
    let cap = sample();
    assert_eq!(
        count(&format!(
            "pcapin file={} | tcp | flow | tcpstream space=1,2 | count",
            cap.display()
        )),
        count(&format!(
            "pcapin file={} | tcp | flow | tcpstream | count",
            cap.display()
        ))
    );
    let (code, _, err) = run("gen count=10 space=1,2 | null");
    assert_eq!(code, 2);
    assert!(err.contains("a source cannot be replicated"), "{err}");
}

#[test]
fn a_killed_process_space_ends_the_run_with_an_error_naming_it() {
    let dir = Scratch::new("killed");
    let stats = dir.file("stats.json");
    let mut child = Command::new(BIN)
        .args(["run", "-q", "--stats"])
        .arg(&stats)
        .arg("gen count=100G size=1K | deflate space=p1 | count")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Find the process space: a child of the run whose command line is `__space`.
    let deadline = Instant::now() + Duration::from_secs(20);
    let space_pid = loop {
        let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
            .unwrap_or_default();
        let found = kids.split_whitespace().find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("__space"))
        });
        if let Some(p) = found {
            break p.to_string();
        }
        assert!(Instant::now() < deadline, "no process space started");
        std::thread::sleep(Duration::from_millis(50));
    };
    // Killed while it works: once its counters (sent to the run as it runs) show blocks.
    common::wait_for(
        "the process space deflates",
        Duration::from_secs(20),
        || common::stats_counter(&stats, "deflate", "blocks_out").is_some_and(|n| n > 0),
    );
    assert!(Command::new("kill")
        .args(["-KILL", &space_pid])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    let out = loop {
        if let Some(_st) = child.try_wait().unwrap() {
            break child.wait_with_output().unwrap();
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the run did not end within 20 s of its process space being killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("space p1 (deflate, count) died: killed by signal 9"),
        "{err}"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{space_pid}")).exists(),
        "the killed space was not reaped"
    );
}

#[test]
fn ctrl_c_stops_process_spaces_and_prints_their_totals() {
    let dir = Scratch::new("ctrl-c");
    let stats = dir.file("stats.json");
    let child = Command::new(BIN)
        .args(["run", "-q", "--stats"])
        .arg(&stats)
        .arg("gen count=100G size=1K space=p1 | count")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Stopped while blocks flow: the process space's generator has sent some (its
    // counters, sent to the run as it runs) and the count has taken some.
    common::wait_for(
        "blocks flow from the process space",
        Duration::from_secs(20),
        || {
            common::stats_counter(&stats, "gen", "blocks_out").is_some_and(|n| n > 0)
                && common::stats_counter(&stats, "count", "blocks_in").is_some_and(|n| n > 0)
        },
    );
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("count: "))
        .unwrap_or_else(|| panic!("no totals from the process space:\n{err}"));
    assert!(!line.starts_with("count: 0 "), "{line}");
}

#[test]
fn an_edit_in_one_space_never_shows_in_another_branch() {
    // The same blocks go to an editor on a thread and, unedited, to a sink on another:
    // the editor gets its own copy (write isolation across spaces).
    let dir = Scratch::new("isolation");
    let (a, b, c) = (dir.file("a.bin"), dir.file("b.bin"), dir.file("c.bin"));
    for src in [
        "gen count=3000 size=1K".to_string(),
        format!("file {} split=fixed size=1K", sample().display()),
    ] {
        let (code, _, err) = run(&format!("{src} | outfile {}", c.display()));
        assert_eq!(code, 0, "{err}");
        let p = format!(
            "{src} | (xor key=ff space=1 | outfile {}) + outfile {} space=2",
            a.display(),
            b.display()
        );
        let (code, _, err) = run(&p);
        assert_eq!(code, 0, "`{p}`:\n{err}");
        let (orig, edited, other) = (
            std::fs::read(&c).unwrap(),
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
        );
        assert!(other == orig, "`{p}`: the unedited branch saw the edit");
        assert_eq!(edited.len(), orig.len());
        assert!(
            edited.iter().zip(&orig).all(|(e, o)| *e == o ^ 0xff),
            "`{p}`: the edit is wrong"
        );
    }
}

#[test]
fn per_flow_compression_across_engines() {
    // The application of seed 002: packets hashed by flow onto two engines that compress
    // them; every packet comes back intact.
    let cap = sample();
    let count = |p: &str| {
        let (code, _, err) = run(p);
        assert_eq!(code, 0, "`{p}`:\n{err}");
        err.lines()
            .find(|l| l.starts_with("count: "))
            .unwrap_or_else(|| panic!("{err}"))
            .to_string()
    };
    let plain = count(&format!("pcapin file={} | tcp | count", cap.display()));
    let engines = count(&format!(
        "pcapin file={} | tcp | flow | split 2 mode=hash | (deflate space=1 + deflate space=p2) | inflate | count",
        cap.display()
    ));
    assert_eq!(plain, engines);
}

#[test]
fn hints_place_filters() {
    // @private: a process space of its own; @background: a thread space of its own.
    let out = Command::new(BIN)
        .args([
            "run",
            "gen count=1000 | count @private | count @background | null",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Each node's row says the space it ran in (the table's last column).
    let space_of = |label: &str| {
        err.lines()
            .find(|l| l.split_whitespace().next() == Some(label))
            .and_then(|l| l.split_whitespace().last())
            .map(str::to_string)
    };
    assert_eq!(space_of("count").as_deref(), Some("p1"), "{err}");
    assert_eq!(space_of("count#2").as_deref(), Some("2"), "{err}");
    assert_eq!(space_of("null").as_deref(), Some("2"), "{err}");
}

/// The caret line of a rendered build error: the pipeline as the line before it, and
/// under it the carets; returns the text above the carets (what they point at).
fn under_caret<'a>(err: &str, pipeline: &'a str) -> &'a str {
    let lines: Vec<&str> = err.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim_end() == format!("  {pipeline}"))
        .unwrap_or_else(|| panic!("no pipeline line in: {err}"));
    let carets = lines
        .get(at + 1)
        .unwrap_or_else(|| panic!("no caret line in: {err}"));
    let start = carets
        .find('^')
        .unwrap_or_else(|| panic!("no caret in: {err}"))
        - 2;
    let end = carets.rfind('^').unwrap() + 1 - 2;
    assert!(
        carets[start + 2..end + 2].chars().all(|c| c == '^'),
        "{err}"
    );
    &pipeline[start..end]
}

#[test]
fn build_errors_point_at_the_failing_filter_in_every_kind_of_space() {
    // The same bad parameter in the calling thread, in a thread space and in a process
    // space (whose error crosses the process boundary as protocol text).
    for (pipeline, node) in [
        ("gen count=1 | strip x | count", "strip x"),
        ("gen count=1 | strip x space=2 | count", "strip x space=2"),
        ("gen count=1 | strip x space=p1 | count", "strip x space=p1"),
        (
            "gen count=1 | count space=p1 | strip x space=p1",
            "strip x space=p1",
        ),
    ] {
        let (code, _, err) = run(pipeline);
        assert_eq!(code, 2, "{pipeline}: {err}");
        assert!(
            err.starts_with("streamline: error: strip: "),
            "{pipeline}: {err}"
        );
        assert_eq!(under_caret(&err, pipeline), node, "{pipeline}: {err}");
    }
    // A placement rule: the caret is under the filter the rule names.
    let pipeline = "gen count=10 | count space=x9";
    let (code, _, err) = run(pipeline);
    assert_eq!(code, 2, "{err}");
    assert_eq!(under_caret(&err, pipeline), "count space=x9", "{err}");
}

#[test]
fn bad_placements_are_errors_naming_the_filter() {
    let (code, _, err) = run("gen count=10 | count space=x9");
    assert_eq!(code, 2);
    assert!(err.contains("count") && err.contains("space=x9"), "{err}");
    let (code, _, err) = run("gen count=10 | count space=1 | null space=p1");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("space 1 is used both"), "{err}");
    let (code, _, err) = run("gen count=10 | deflate space=1,2 @single | null");
    assert_eq!(code, 2);
    assert!(err.contains("@single asks for one instance"), "{err}");
    // Back to the first space: the two would wait on each other's full channels.
    let (code, _, err) = run("gen count=10 | count space=1 | null space=local");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("feed each other"), "{err}");
}

/// Processes (other than us) whose command line mentions `marker`.
fn processes_naming(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
                && e.file_name().to_string_lossy() != me.as_str()
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(marker)
                .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
        })
        .collect()
}

#[test]
fn a_failure_at_any_construction_step_leaves_nothing_running() {
    // Thread and process spaces and channels both ways; the marker (a count nobody else
    // uses) finds any process space left behind.
    let marker = format!("count={}", 1_000_000 + std::process::id());
    let p = format!("gen {marker} size=64 | deflate space=p1 | inflate space=2 | count space=p3");
    let fail = |k: usize| {
        Command::new(BIN)
            .args(["run", "-q", &p])
            .env("STREAMLINE_FAIL_STEP", k.to_string())
            .output()
            .unwrap()
    };
    let out = fail(usize::MAX);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let n: usize = err
        .split("the build has ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        n >= 10,
        "channels, process spaces, rings, spaces and readiness are steps: {err}"
    );
    let shm_before: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for k in 0..n {
        let out = fail(k);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "step {k}: {err}");
        assert!(
            err.contains(&format!("injected failure at construction step {k}")),
            "step {k}: {err}"
        );
        if k > 0 {
            assert!(err.contains("rolled back: "), "step {k}: {err}");
        }
        // Process spaces end with their parent's rollback, not later.
        let left = processes_naming(&marker);
        assert!(left.is_empty(), "step {k} left processes running: {left:?}");
    }
    // Our runs have all ended: what they left is held by no process. Objects of other
    // runs on the machine (a daemon's, another test's) are held by them.
    common::assert_no_orphans_since(&shm_before, "the failed builds");
    // Without a fault the same pipeline runs.
    let out = Command::new(BIN).args(["run", "-q", &p]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--adapt` (issue 19): the monitor sees deflate and inflate loading space 1 while space
/// 0 only counts, moves deflate up into space 0 (saying why), and the run's results are
/// those of the run without it.
#[test]
fn adapt_moves_the_busy_filter_across_the_channel_and_changes_no_result() {
    let p = "gen count=200000 size=4096 | count name=x | deflate space=1 | inflate | count name=y";
    let run_with = |extra: &[&str]| {
        let out = Command::new(BIN)
            .args(["run", "-q", "--plan", "none"])
            .args(extra)
            .arg(p)
            .output()
            .expect("run streamline");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let (log, rest): (Vec<&str>, Vec<&str>) =
            err.lines().partition(|l| l.starts_with("adapt:"));
        let mut rest: Vec<String> = rest.into_iter().map(str::to_string).collect();
        rest.sort();
        (out.stdout, rest, log.join("\n"))
    };
    let (out0, sums0, log0) = run_with(&[]);
    assert!(log0.is_empty());
    let (out1, sums1, log1) = run_with(&["--adapt"]);
    assert_eq!((out0, sums0), (out1, sums1), "{log1}");
    assert!(
        log1.contains("adapt: moved deflate@1 from space 1 to space 0: measured space 0"),
        "{log1}"
    );
    assert!(log1.contains("predicted bottleneck"), "{log1}");
}
