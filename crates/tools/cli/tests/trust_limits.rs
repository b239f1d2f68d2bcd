//! Issue 33, item 5: limits and a record. A hostile unprivileged user (uid 65534) against
//! a real daemon, through the raw protocol: idle connections, unactivated opens, huge
//! rings and stalled frames must not hurt root or other users, each refusal names its
//! limit, and the daemon's log has a line for everything that happened to a run.
//!
//! The connections "as uid 65534" are made by a thread of this test that takes that
//! identity with the raw system calls (they change the calling thread only), so the
//! daemon's SO_PEERCRED sees uid 65534 exactly as for any other process of that user.

mod common;

use common::daemon::Daemon;
use daemon::proto::{self, Msg, ProtoError, Reply, Request, RunOptions};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const NOBODY: u32 = 65534;
/// How long a test waits for an answer that must come (a watchdog, not a measurement).
const WATCHDOG: Duration = Duration::from_secs(60);

/// `n` connections to `socket` made as uid and gid `uid`.
fn connect_as(uid: u32, n: usize, socket: &Path) -> Vec<UnixStream> {
    let socket = socket.to_path_buf();
    std::thread::spawn(move || {
        // SAFETY: setresgid(2) and setresuid(2) take plain integers and touch no memory of
        // ours. Made as raw system calls (not through libc's wrappers, which change every
        // thread), they change this thread's credentials only; it ends right after.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_setresgid, uid, uid, uid), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, uid, uid, uid), 0);
        }
        (0..n)
            .map(|_| {
                let s = UnixStream::connect(&socket).expect("connect to the daemon");
                s.set_read_timeout(Some(WATCHDOG)).unwrap();
                s
            })
            .collect::<Vec<_>>()
    })
    .join()
    .expect("the connecting thread")
}

fn send(s: &UnixStream, id: u64, req: Request) {
    // A daemon that refused the connection may have closed it already: its answer is
    // still there to read.
    let _ = proto::send(s, &Msg { id, body: req }, &[]);
}

fn answer(s: &UnixStream) -> Result<Reply, ProtoError> {
    proto::recv::<Reply>(s).map(|(m, _)| m.body)
}

fn call(s: &UnixStream, id: u64, req: Request) -> Reply {
    send(s, id, req);
    answer(s).unwrap_or_else(|e| panic!("no answer: {e}"))
}

fn hello(s: &UnixStream) -> Reply {
    call(
        s,
        1,
        Request::Hello {
            version: proto::VERSION,
            client: "trust_limits".into(),
        },
    )
}

fn open(s: &UnixStream, id: u64, pipeline: &str, options: RunOptions) -> Reply {
    call(
        s,
        id,
        Request::Open {
            pipeline: pipeline.into(),
            options,
            fds: 0,
            context: Default::default(),
        },
    )
}

/// The error's errno name and message, or a panic saying what came instead.
fn error(r: &Reply) -> (&str, &str) {
    match r {
        Reply::Error { code, message, .. } => (code.as_str(), message.as_str()),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The daemon's worker processes (its children running `streamline`).
fn workers(d: &Daemon) -> Vec<u32> {
    let out = Command::new("pgrep")
        .args(["-x", common::worker(), "-P", &d.pid().to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Lines of the daemon's log for `event` that contain every one of `with`.
fn audit_lines(d: &Daemon, event: &str, with: &[&str]) -> Vec<String> {
    let tag = format!("streamlined: audit: {event} ");
    d.log()
        .lines()
        .filter(|l| l.starts_with(&tag) && with.iter().all(|w| l.contains(w)))
        .map(str::to_string)
        .collect()
}

#[test]
fn idle_connections_of_one_user_leave_room_for_root_and_others() {
    let d = Daemon::start("lim-conns", None);
    // More idle connections than the daemon's global cap (--max-clients, 256).
    let conns = connect_as(NOBODY, 300, &d.socket);
    let mut welcomed = Vec::new();
    let mut refusals = Vec::new();
    for s in conns {
        match hello(&s) {
            Reply::Welcome { uid, .. } => {
                assert_eq!(uid, NOBODY);
                welcomed.push(s)
            }
            r => refusals.push(r),
        }
    }
    assert_eq!(
        welcomed.len(),
        32,
        "uid 65534 holds at most connections_per_user (32) connections; {} refused",
        refusals.len()
    );
    let (code, why) = error(&refusals[0]);
    assert_eq!(code, "EAGAIN");
    assert!(
        why.contains("uid 65534 has 32 connections open")
            && why.contains("limit connections_per_user = 32"),
        "{why}"
    );
    // Root is served while nobody holds all it may.
    let ps = d.cli().arg("ps").output().unwrap();
    assert!(
        ps.status.success(),
        "root's ps: {}",
        String::from_utf8_lossy(&ps.stderr)
    );
    // So is another unprivileged user.
    let other = connect_as(NOBODY - 1, 1, &d.socket);
    assert!(
        matches!(hello(&other[0]), Reply::Welcome { uid, .. } if uid == NOBODY - 1),
        "uid 65533 is kept out by uid 65534's connections"
    );
    // A connection closed gives its place back.
    drop(welcomed.pop());
    common::wait_for(
        "a place for uid 65534 after one of its connections closed",
        WATCHDOG,
        || {
            matches!(
                hello(&connect_as(NOBODY, 1, &d.socket)[0]),
                Reply::Welcome { .. }
            )
        },
    );
    assert!(
        !audit_lines(
            &d,
            "connection_refused",
            &["uid=65534 ", "connections_per_user"]
        )
        .is_empty(),
        "no log line for the refused connections:\n{}",
        d.log()
    );
}

#[test]
fn unactivated_opens_beyond_the_limit_are_refused_and_start_no_worker() {
    // The default limit: 8 (the policy file's `[limits]` is tried in
    // `limits_come_from_the_policy_file`).
    let d = Daemon::start("lim-opens", None);
    // Over two connections: the limit is the user's, not the connection's.
    let c = connect_as(NOBODY, 2, &d.socket);
    for s in &c {
        assert!(matches!(hello(s), Reply::Welcome { .. }));
    }
    let mut opened = Vec::new();
    let mut refused = Vec::new();
    for k in 0..12u64 {
        match open(
            &c[(k % 2) as usize],
            10 + k,
            "gen | count",
            RunOptions::default(),
        ) {
            Reply::Opened { run, .. } => opened.push(run),
            r => refused.push(r),
        }
    }
    assert_eq!(opened.len(), 8, "refused: {refused:?}");
    let (code, why) = error(&refused[0]);
    assert_eq!(code, "EAGAIN");
    assert!(
        why.contains("uid 65534 has 8 runs opened and not activated")
            && why.contains("limit unactivated_runs_per_user = 8"),
        "{why}"
    );
    let w = workers(&d);
    assert!(
        w.len() <= 8,
        "{} worker processes for 8 runs allowed: {w:?}",
        w.len()
    );
    // Activating one makes room for one more.
    // (The first open was on the first connection.)
    assert!(matches!(
        call(
            &c[0],
            30,
            Request::Activate {
                run: opened[0],
                detach: false
            }
        ),
        Reply::Done {}
    ));
    assert!(matches!(
        open(&c[0], 31, "gen | count", RunOptions::default()),
        Reply::Opened { .. }
    ));
    assert!(matches!(
        error(&open(&c[1], 32, "gen | count", RunOptions::default())).0,
        "EAGAIN"
    ));
    assert!(
        !audit_lines(&d, "refused", &["uid=65534 ", "unactivated_runs_per_user"]).is_empty(),
        "no log line for the refused open:\n{}",
        d.log()
    );
    drop(c);
    common::wait_for("the runs rolled back", WATCHDOG, || workers(&d).is_empty());
}

#[test]
fn a_huge_ring_or_buffer_is_refused_naming_the_limit() {
    let d = Daemon::start("lim-ring", None);
    let c = connect_as(NOBODY, 1, &d.socket);
    assert!(matches!(hello(&c[0]), Reply::Welcome { .. }));
    let huge = RunOptions {
        ring: 1 << 62,
        ..RunOptions::default()
    };
    let r = open(&c[0], 2, "gen count=5 | count", huge);
    let (code, why) = error(&r);
    assert_eq!(code, "E2BIG");
    assert!(
        why.contains("4611686018427387904 bytes") && why.contains("limit max_ring = \"1G\""),
        "{why}"
    );
    // The same for the other sizes a pipeline asks for: an exported stream's ring, a
    // filter's declared buffer (by key and by position).
    for (pipeline, what) in [
        ("gen count=5 | count size=64G", "size=64G"),
        ("stdin size=4G | count", "size=4G"),
        ("netin port=7000 window=2G | count", "window=2G"),
    ] {
        let r = open(&c[0], 3, pipeline, RunOptions::default());
        let (code, why) = error(&r);
        assert_eq!(code, "E2BIG", "{pipeline}");
        assert!(
            why.contains(what) && why.contains("limit max_ring"),
            "{pipeline}: {why}"
        );
    }
    assert!(workers(&d).is_empty(), "a refused open started a worker");
    // Within the limit, it opens.
    let fine = RunOptions {
        ring: 1 << 20,
        ..RunOptions::default()
    };
    assert!(matches!(
        open(&c[0], 4, "gen count=5 | count", fine),
        Reply::Opened { .. }
    ));
}

#[test]
fn a_frame_started_and_never_finished_is_closed_after_the_timeout() {
    // The default frame timeout (10 s).
    let d = Daemon::start("lim-frame", None);
    let c = connect_as(NOBODY, 2, &d.socket);
    let (idle, stalled) = (&c[0], &c[1]);
    assert!(matches!(hello(idle), Reply::Welcome { .. }));
    assert!(matches!(hello(stalled), Reply::Welcome { .. }));
    // Two bytes of a length word, and nothing more.
    std::io::Write::write_all(&mut &*stalled, &[0x20, 0]).unwrap();
    // Others are served meanwhile.
    assert!(d.cli().arg("ps").output().unwrap().status.success());
    let r = answer(stalled).unwrap_or_else(|e| {
        panic!("the stalled connection was not answered within {WATCHDOG:?}: {e}")
    });
    let (code, why) = error(&r);
    assert_eq!(code, "EPROTO");
    assert!(
        why.contains("frame timeout") && why.contains("limit frame_timeout_s = 10"),
        "{why}"
    );
    assert!(
        matches!(answer(stalled), Err(ProtoError::Closed)),
        "the connection is closed after the refusal"
    );
    // An idle connection between frames is no fault, however long it was idle.
    assert!(matches!(
        call(idle, 2, Request::Ping { token: 7 }),
        Reply::Pong { token: 7 }
    ));
    assert!(
        !audit_lines(&d, "protocol_error", &["uid=65534 ", "frame timeout"]).is_empty(),
        "{}",
        d.log()
    );
}

#[test]
fn limits_come_from_the_policy_file() {
    let d = Daemon::start(
        "lim-policy",
        Some("[limits]\nconnections_per_user = 2\nunactivated_runs_per_user = 1\nmax_ring = \"16M\"\n"),
    );
    let policy = d.dir.join("policy.toml").display().to_string();
    let c = connect_as(NOBODY, 3, &d.socket);
    assert!(matches!(hello(&c[0]), Reply::Welcome { .. }));
    assert!(matches!(hello(&c[1]), Reply::Welcome { .. }));
    let r = hello(&c[2]);
    let (code, why) = error(&r);
    assert_eq!(code, "EAGAIN");
    assert!(
        why.contains(&format!(
            "uid 65534 has 2 connections open (limit connections_per_user = 2 in the policy {policy})"
        )),
        "{why}"
    );
    // (The default ring, 64M, is beyond this policy's max_ring.)
    let small = RunOptions {
        ring: 1 << 20,
        ..RunOptions::default()
    };
    assert!(matches!(
        open(&c[0], 2, "gen | count", small.clone()),
        Reply::Opened { .. }
    ));
    let r = open(&c[1], 2, "gen | count", small);
    let (code, why) = error(&r);
    assert_eq!(code, "EAGAIN");
    assert!(
        why.contains(&format!(
            "limit unactivated_runs_per_user = 1 in the policy {policy}"
        )),
        "{why}"
    );
    let big = RunOptions {
        ring: 32 << 20,
        ..RunOptions::default()
    };
    let r = open(&c[1], 3, "gen | count", big);
    let (code, why) = error(&r);
    assert_eq!(code, "E2BIG");
    assert!(
        why.contains(&format!("limit max_ring = \"16M\" in the policy {policy}")),
        "{why}"
    );
}

#[test]
fn the_log_records_every_run_started_edited_refused_stopped_finished_and_crashed() {
    let d = Daemon::start("lim-log", None);
    let nobody = |args: &[&str]| {
        let o = d.cli_as_nobody().args(args).output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).trim().to_string(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // Started and finished.
    let (ok, _, err) = nobody(&["run", "-q", "gen count=5 | count"]);
    assert!(ok, "{err}");
    // Refused at open.
    let (ok, _, _) = nobody(&["run", "-q", "rx dev=lo | count"]);
    assert!(!ok);
    // Edited (applied and refused) and stopped.
    let (ok, id, err) = nobody(&[
        "run",
        "--detach",
        "-q",
        "--plan",
        "none",
        "gen count=100G size=64 | count",
    ]);
    assert!(ok, "{err}");
    let (ok, _, err) = nobody(&["edit", &id, "insert after count count name=more"]);
    assert!(ok, "{err}");
    let (ok, _, _) = nobody(&["edit", &id, "remove gen"]);
    assert!(!ok);
    let (ok, _, err) = nobody(&["stop", &id]);
    assert!(ok, "{err}");
    common::wait_for("the stopped run's end", WATCHDOG, || workers(&d).is_empty());
    // Crashed: its worker killed.
    let (ok, crash, err) = nobody(&["run", "--detach", "-q", "gen count=100G size=64 | count"]);
    assert!(ok, "{err}");
    common::wait_for("its worker", WATCHDOG, || workers(&d).len() == 1);
    let w = workers(&d)[0];
    assert!(Command::new("kill")
        .args(["-KILL", &w.to_string()])
        .status()
        .unwrap()
        .success());
    common::wait_for("the crash in the log", WATCHDOG, || {
        !audit_lines(&d, "crashed", &[&format!("run={crash} ")]).is_empty()
    });
    let run = format!("run={id} ");
    let who = "uid=65534 user=nobody ";
    for (event, with) in [
        ("started", vec![who, "pipeline=\"gen count=5 | count\""]),
        (
            "finished",
            vec![who, "pipeline=\"gen count=5 | count\"", "status=0"],
        ),
        (
            "refused",
            vec![
                who,
                "pipeline=\"rx dev=lo | count\"",
                "errno=",
                "CAP_NET_RAW",
            ],
        ),
        ("started", vec![who, &run, "detach=yes"]),
        (
            "edited",
            vec![who, &run, "outcome=applied", "insert after count"],
        ),
        (
            "edited",
            vec![who, &run, "outcome=refused", "remove gen", "errno="],
        ),
        ("stopped", vec![who, &run, "by_uid=65534", "why="]),
        ("finished", vec![who, &run]),
        (
            "crashed",
            vec![who, &format!("run={crash} "), "signal=9", "SIGKILL"],
        ),
    ] {
        assert!(
            !audit_lines(&d, event, &with).is_empty(),
            "no `{event}` line with {with:?} in the log:\n{}",
            d.log()
        );
    }
}
