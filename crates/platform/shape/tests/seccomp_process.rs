//! Process-wide matters, in a test binary of their own: the supervisor's threads leave
//! once no supervised process is left (other tests' supervisors would be counted), and a
//! kernel that refuses seccomp gives an error naming what is missing (the refusal is
//! made by a filter installed in a re-executed copy of this test binary).

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
    let config = Config {
        disk: Limit::parse("disk", "100MB/s", Kind::Token, None).unwrap(),
        ..Default::default()
    };
    let seg = Segment::create_private(config).unwrap();
    // a tree: the shell forks a child that outlives it briefly
    let mut cmd = Command::new("/bin/sh");
    cmd.args([
        "-c",
        "(sleep 0.3; cat /proc/self/status > /dev/null) & echo started",
    ])
    .stdout(Stdio::null());
    let st = shape::seccomp::run(&seg, 0, &mut cmd, |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert!(st.success());
    let t0 = Instant::now();
    while supervisor_threads() > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{} supervisor threads still running",
            supervisor_threads()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // the background child was served after its parent's exit, and then the pool left
    assert!(
        t0.elapsed() >= Duration::from_millis(100),
        "the pool left before the tree was gone"
    );
}

const REFUSE: &str = "SHAPE_TEST_REFUSE_SECCOMP";

#[test]
fn a_refused_seccomp_is_an_error_that_names_it() {
    if std::env::var_os(REFUSE).is_some() {
        // the re-executed copy: make seccomp(2) fail with ENOSYS here and in children
        let ld = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
        let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
        let ret = (libc::BPF_RET | libc::BPF_K) as u16;
        let f = [
            libc::sock_filter {
                code: ld,
                jt: 0,
                jf: 0,
                k: 0,
            },
            libc::sock_filter {
                code: jeq,
                jt: 0,
                jf: 1,
                k: libc::SYS_seccomp as u32,
            },
            libc::sock_filter {
                code: ret,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
            },
            libc::sock_filter {
                code: ret,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_ALLOW,
            },
        ];
        let prog = libc::sock_fprog {
            len: f.len() as u16,
            filter: f.as_ptr() as *mut _,
        };
        // SAFETY: prctl with a valid filter program that outlives the call.
        unsafe {
            assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
            assert_eq!(
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog
                ),
                0
            );
        }
        let seg = Segment::create_private(Config {
            net: Limit::parse("net", "1MB/s", Kind::Token, None).unwrap(),
            ..Default::default()
        })
        .unwrap();
        let r = shape::seccomp::run(&seg, 0, &mut Command::new("/bin/true"), |_| {});
        match r {
            Err(e @ shape::seccomp::SupervisorError::Unavailable { .. }) => {
                println!("REFUSED: {e}")
            }
            other => println!("UNEXPECTED: {other:?}"),
        }
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_refused_seccomp_is_an_error_that_names_it",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(REFUSE, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // (libtest prints the test's name on the same line first)
    let line = text
        .lines()
        .find_map(|l| {
            l.find("REFUSED")
                .or_else(|| l.find("UNEXPECTED"))
                .map(|i| &l[i..])
        })
        .unwrap_or_else(|| {
            panic!(
                "no verdict from the copy: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(
        line.starts_with(
            "REFUSED: seccomp user notification unavailable: seccomp(SECCOMP_SET_MODE_FILTER"
        ),
        "{line}"
    );
    assert!(
        line.contains("NEW_LISTENER") && line.contains("os error 38"),
        "{line}"
    );
}
