//! Legacy IPC conformance (issue 40): Python's own tests of pipes, subprocesses, signals
//! and waiting (Debian's libpython3.11-testsuite, run by the system's python3.11 with
//! `-m test`) on kernel pipes and under `streamline exec` (ring pipes): every test that
//! passes on kernel pipes passes on rings.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");
const PYTHON: &str = "/usr/bin/python3.11";
const TESTS: &[&str] = &[
    "test_fcntl",
    "test_select",
    "test_poll",
    "test_epoll",
    "test_pipes",
    "test_signal",
    "test_subprocess",
];

/// Test id -> "ok", "skipped" or "failed", from regrtest's JUnit XML (read by python).
fn results(ours: bool, dir: &Path) -> BTreeMap<String, String> {
    let xml = dir.join(if ours { "rings.xml" } else { "kernel.xml" });
    let mut c = if ours {
        let mut c = Command::new(BIN);
        c.args(["exec", "--", PYTHON]);
        c
    } else {
        Command::new(PYTHON)
    };
    let out = c
        .args(["-m", "test", "--timeout", "600", "--junit-xml"])
        .arg(&xml)
        .args(TESTS)
        .current_dir(dir)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(
        xml.exists(),
        "python -m test wrote no results ({}): {}",
        if ours { "rings" } else { "kernel pipes" },
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = Command::new(PYTHON)
        .arg("-c")
        .arg(
            "import sys, xml.etree.ElementTree as E\n\
             for t in E.parse(sys.argv[1]).iter('testcase'):\n\
             \x20   k = [c.tag for c in t]\n\
             \x20   s = 'failed' if ('failure' in k or 'error' in k) else 'skipped' if 'skipped' in k else 'ok'\n\
             \x20   print(t.get('name'), s)\n",
        )
        .arg(&xml)
        .output()
        .unwrap();
    String::from_utf8_lossy(&summary.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect()
}

#[test]
fn pythons_own_pipe_subprocess_and_signal_tests_pass_on_rings() {
    assert!(
        Path::new("/usr/lib/python3.11/test/test_subprocess.py").exists(),
        "Python's test suite is needed (apt-get install libpython3.11-testsuite; scripts/setup installs it)"
    );
    let dir = std::env::temp_dir().join(format!("sl-legacy-conf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Both at once: each takes minutes, mostly waiting.
    let d2 = dir.clone();
    let kernel = std::thread::spawn(move || results(false, &d2));
    let rings = results(true, &dir);
    let kernel = kernel.join().unwrap();
    let passed: Vec<&String> = kernel
        .iter()
        .filter(|(_, s)| *s == "ok")
        .map(|(n, _)| n)
        .collect();
    assert!(
        passed.len() > 300,
        "only {} tests passed on kernel pipes: the run checked little",
        passed.len()
    );
    let broken: Vec<String> = passed
        .iter()
        .filter(|n| rings.get(**n).map(String::as_str) != Some("ok"))
        .map(|n| format!("{n}: {}", rings.get(*n).map_or("missing", |s| s.as_str())))
        .collect();
    assert!(
        broken.is_empty(),
        "{} of {} tests that pass on kernel pipes do not on rings:\n{}",
        broken.len(),
        passed.len(),
        broken.join("\n")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
