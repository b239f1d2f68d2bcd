//! The supervisor's threads leave once no supervised process is left (their own test
//! binary, so other tests' supervisors are not counted).

use shape::config::{Config, Kind, Limit};
use shape::Segment;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn supervisor_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("shape-seccomp"))
        .count()
}

#[test]
fn workers_leave_when_the_tree_is_gone() {
    let config = Config { disk: Limit::parse("disk", "100MB/s", Kind::Token, None).unwrap(), ..Default::default() };
    let seg = Segment::create_private(config).unwrap();
    // a tree: the shell forks a child that outlives it briefly
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "(sleep 0.3; cat /proc/self/status > /dev/null) & echo started"]).stdout(Stdio::null());
    let st = shape::seccomp::run(&seg, 0, &mut cmd, |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert!(st.success());
    let t0 = Instant::now();
    while supervisor_threads() > 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "{} supervisor threads still running", supervisor_threads());
        std::thread::sleep(Duration::from_millis(20));
    }
    // the background child was served after its parent's exit, and then the pool left
    assert!(t0.elapsed() >= Duration::from_millis(100), "the pool left before the tree was gone");
}
