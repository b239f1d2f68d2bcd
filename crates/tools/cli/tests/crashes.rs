//! The crashes and hangs a user met trying the service (issue 34, part 4), each through
//! the real `streamline` and `streamlined`: a run that dies says so (`ps`, the daemon's
//! log); one-command pipelines end; `attach` ends at the first SIGINT and redraws in
//! place on a terminal; `run --detach` refuses a `stdin` source; the planner takes
//! `shape rate=20KB/s`; process spaces' counters reach `ps`; PipesFS shows a detached run
//! once `run --detach` has answered.
//!
//! Every wait is on a condition with a generous limit; a run or command that does not
//! end within it is killed and the test fails (a regression fails, never hangs).

mod common;

use common::daemon::{Daemon, BIN};
use std::io::{BufRead, Read};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long anything here may take before it counts as a hang.
const LIMIT: Duration = Duration::from_secs(30);

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Wait for `child` to end within `limit`, collecting its output; if it does not, kill it
/// and fail saying `what` hung.
fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    // Drain the pipes while waiting, so a chatty child never blocks on a full pipe.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let o = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut b);
        }
        b
    });
    let e = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut b);
        }
        b
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {limit:?} (killed)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: o.join().unwrap(),
        stderr: e.join().unwrap(),
    }
}

/// `run --detach` a pipeline, returning the run's id.
fn detach(d: &Daemon, pipeline: &str) -> u64 {
    let o = d
        .cli()
        .args(["run", "--detach", "-q", pipeline])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("--detach prints the run id: {}", text(&o)))
}

/// `ps`'s line of run `id`, if it lists it.
fn ps_line(d: &Daemon, id: u64) -> Option<String> {
    d.ps()
        .lines()
        .skip(1)
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
        .map(str::to_string)
}

/// The processes whose parent is `pid` and whose name is `name`.
fn children(pid: u32, name: &str) -> Vec<u32> {
    let o = Command::new("pgrep")
        .args(["-x", name, "-P", &pid.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn kill(sig: &str, pid: u32) {
    assert!(Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success());
}

/// A run whose worker is killed stays in `ps` as `failed: REASON` and the daemon's log
/// says so; so does a run one of whose spaces dies (the path a panicking capture takes:
/// the worker lives on and reports why its run failed).
#[test]
fn a_run_that_dies_says_so_in_ps_and_in_the_log() {
    let d = Daemon::start("crash-dies", None);
    // The worker itself dies.
    let id = detach(&d, "gen count=100G size=64 | count");
    common::wait_for("its worker", LIMIT, || {
        children(d.pid(), common::worker()).len() == 1
    });
    kill("-KILL", children(d.pid(), common::worker())[0]);
    common::wait_for("the dead run in ps as failed", LIMIT, || {
        ps_line(&d, id)
            .is_some_and(|l| l.contains("failed: its worker was killed by signal 9 (SIGKILL)"))
    });
    assert!(
        d.log().lines().any(|l| l.contains("audit: crashed")
            && l.contains(&format!("run={id} "))
            && l.contains("SIGKILL")),
        "{}",
        d.log()
    );
    // A space of the run dies: the worker reports the run failed, and why.
    let id = detach(&d, "gen count=100G size=1K | deflate space=p1 | count");
    let mut space = 0;
    common::wait_for("its process space", LIMIT, || {
        let workers = children(d.pid(), common::worker());
        space = workers
            .iter()
            .flat_map(|w| children(*w, common::worker()))
            .next()
            .unwrap_or(0);
        space != 0
    });
    kill("-KILL", space);
    common::wait_for("the failed run in ps", LIMIT, || {
        ps_line(&d, id).is_some_and(|l| {
            l.contains("failed: space p1 (deflate, count) died: killed by signal 9")
        })
    });
    assert!(
        d.log().lines().any(|l| l.contains("audit: failed")
            && l.contains(&format!("run={id} "))
            && l.contains("status=1")
            && l.contains("why=\"space p1 (deflate, count) died: killed by signal 9")),
        "{}",
        d.log()
    );
    // Not a failure: a run that ends well, or is stopped, leaves ps as before.
    let ok = detach(&d, "gen count=100G size=64 | count");
    let st = d.cli().args(["stop", &ok.to_string()]).output().unwrap();
    assert!(st.status.success(), "{}", text(&st));
    common::wait_for("the stopped run to leave ps", LIMIT, || {
        ps_line(&d, ok).is_none()
    });
}

/// `streamline run 'true'`, `'echo hi'`, `'cat FILE'` end (they ran until killed, a CPU at
/// 100 %), stand-alone and through the daemon, with the command's output.
#[test]
fn one_command_pipelines_end() {
    let dir = std::env::temp_dir().join(format!("sl-onecmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("in.txt");
    std::fs::write(&file, "one\ntwo\n").unwrap();
    let cat = format!("cat {}", file.display());
    let d = Daemon::start("crash-onecmd", None);
    for (how, daemon) in [("stand-alone", false), ("through the daemon", true)] {
        for (pipeline, want) in [
            ("true", ""),
            ("echo hi", "hi\n"),
            (cat.as_str(), "one\ntwo\n"),
        ] {
            let mut c = Command::new(BIN);
            if daemon {
                c.env("STREAMLINE_SOCKET", &d.socket);
            } else {
                c.args(["--socket", "none"]);
            }
            let child = c
                .args(["run", "-q", pipeline])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let o = finish(
                child,
                LIMIT,
                &format!("`streamline run '{pipeline}'` {how}"),
            );
            assert!(o.status.success(), "{pipeline} {how}: {}", text(&o));
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                want,
                "{pipeline} {how}: {}",
                text(&o)
            );
        }
    }
    // A command that fails still ends, with its status as the run's (as the shell's).
    let o = finish(
        Command::new(BIN)
            .args(["--socket", "none", "run", "-q", "false"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        LIMIT,
        "`streamline run 'false'`",
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `attach` ends at the first SIGINT (it took a second one: `timeout -s INT 1 streamline
/// attach ID` ran for ten minutes), and the run goes on. On a pipe each refresh is a plain
/// table; on a terminal the table is redrawn in place (cursor home, clear to the end).
#[test]
fn attach_ends_at_the_first_sigint_and_redraws_in_place_on_a_terminal() {
    let d = Daemon::start("crash-attach", None);
    let id = detach(&d, "gen count=100G size=64 | count");
    let mut attach = d
        .cli()
        .args(["attach", &id.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its first table, then one SIGINT.
    let mut out = std::io::BufReader::new(attach.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("filter "), "{first}");
    kill("-INT", attach.id());
    attach.stdout = None;
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let o = finish(attach, Duration::from_secs(10), "attach after one SIGINT");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let piped = first + &rest.join().unwrap();
    assert!(
        !piped.contains('\x1b'),
        "control sequences on a pipe:\n{piped:?}"
    );
    assert!(
        ps_line(&d, id).is_some_and(|l| l.contains("running")),
        "the run goes on after attach ends:\n{}",
        d.ps()
    );
    // On a terminal (script(1) gives it one), ended by `timeout -s INT` as in the report.
    let script = Command::new("script")
        .args(["-qfec"])
        .arg(format!(
            "timeout --preserve-status -s INT 2 {BIN} attach {id}"
        ))
        .arg("/dev/null")
        .env("STREAMLINE_SOCKET", &d.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) (util-linux) runs attach on a terminal");
    let o = finish(
        script,
        LIMIT,
        "`timeout -s INT 2 streamline attach` on a terminal",
    );
    let screen = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Cleared once, then every table drawn from the top over the one before.
    assert_eq!(screen.matches("\x1b[2J").count(), 1, "{screen:?}");
    let redraws = screen.matches("\x1b[H").count();
    assert!(redraws >= 3, "{redraws} draws in 2 s:\n{screen:?}");
    assert_eq!(screen.matches("\x1b[J").count(), redraws, "{screen:?}");
    let _ = d.cli().args(["stop", &id.to_string()]).output();
}

/// A detached run has no standard input (it gets /dev/null): `run --detach` of a pipeline
/// reading `stdin` is refused, saying why, and starts nothing (it used to end at once with
/// 0 blocks and no word).
#[test]
fn run_detach_refuses_a_stdin_source() {
    let d = Daemon::start("crash-stdin", None);
    let o = d
        .cli()
        .args(["run", "--detach", "stdin | count"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        err.contains("stdin") && err.contains("--detach"),
        "{}",
        text(&o)
    );
    assert!(o.stdout.is_empty(), "{}", text(&o));
    assert_eq!(d.ps().lines().count(), 1, "nothing started:\n{}", d.ps());
    assert!(!d.log().contains("audit: opened"), "{}", d.log());
    // Attached, the same pipeline reads this command's standard input.
    let mut c = d
        .cli()
        .args(["run", "-q", "stdin | count"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut c.stdin.take().unwrap(), &[b'x'; 10_000]).unwrap();
    let o = finish(c, LIMIT, "an attached stdin run");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("10000 bytes"),
        "{}",
        text(&o)
    );
}

/// `shape rate=20KB/s` (shape's own byte rate, with units) is planned, not refused as the
/// planner's estimate of blocks per second.
#[test]
fn the_planner_takes_shape_rate_with_units() {
    let o = Command::new(BIN)
        .args(["plan", "gen count=10 | shape rate=20KB/s | count"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = finish(
        Command::new(BIN)
            .args([
                "--socket",
                "none",
                "run",
                "gen count=20 size=500 | shape rate=20KB/s | count",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        LIMIT,
        "a shaped run",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!err.contains("planner could not place"), "{err}");
    assert_eq!(common::count_of(&err), 20, "{err}");
}

/// The blocks per second `ps` shows for a run whose sink runs in a process space (it
/// showed 0: process spaces sent their counters only at their end).
#[test]
fn process_spaces_counters_reach_ps() {
    let d = Daemon::start("crash-pcount", None);
    let id = detach(&d, "gen count=100G size=64 | count space=p1");
    let rate = |l: &str| -> f64 {
        // ID USER STATE... UPTIME BLOCKS/S PIPELINE: the field after the one ending in `s`
        // (the uptime) is the rate, with its k/M/G suffix.
        let f: Vec<&str> = l.split_whitespace().collect();
        let i = f
            .iter()
            .position(|x| x.ends_with('s') && x[..x.len() - 1].parse::<f64>().is_ok())
            .unwrap_or_else(|| panic!("no uptime in {l}"));
        let r = f[i + 1];
        let (num, mul) = match r.chars().last() {
            Some('k') => (&r[..r.len() - 1], 1e3),
            Some('M') => (&r[..r.len() - 1], 1e6),
            Some('G') => (&r[..r.len() - 1], 1e9),
            _ => (r, 1.0),
        };
        num.parse::<f64>()
            .unwrap_or_else(|_| panic!("rate {r} in {l}"))
            * mul
    };
    let mut seen = String::new();
    common::wait_for("a rate above 0 in ps", LIMIT, || {
        seen = ps_line(&d, id).unwrap_or_default();
        !seen.is_empty() && rate(&seen) > 0.0
    });
    assert!(seen.contains("running"), "{seen}");
    // attach shows the process space's counters as they change.
    let mut attach = d
        .cli()
        .args(["attach", &id.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(attach.stdout.take().unwrap());
    let mut counts = Vec::new();
    let deadline = Instant::now() + LIMIT;
    // Until the count has moved on from the first one seen (attach redraws faster than a
    // process space sends its counters, so two redraws in a row may show the same count).
    while !(counts.len() >= 2 && counts[counts.len() - 1] > counts[0]) && Instant::now() < deadline
    {
        let mut l = String::new();
        if out.read_line(&mut l).unwrap() == 0 {
            break;
        }
        // The row as the table at the end has it: `count`, its space in the last column.
        assert!(!l.contains("@p1"), "a label with its space: {l}");
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.first() == Some(&"count") {
            assert_eq!(cols.last(), Some(&"p1"), "{l}");
            counts.push(cols[1].parse::<u64>().unwrap());
        }
    }
    let _ = attach.kill();
    let _ = attach.wait();
    assert!(
        counts.len() >= 2 && counts[counts.len() - 1] > counts[0] && counts[0] > 0,
        "count's blocks in, as attach showed them: {counts:?}"
    );
    let _ = d.cli().args(["stop", &id.to_string()]).output();
}

/// Once `run --detach` has answered, the run is in PipesFS (its directory and its
/// filters' directories) and in `ps`: no waiting for them to appear.
#[test]
fn pipesfs_shows_the_run_when_run_detach_returns() {
    let d = Daemon::start("crash-visible", None);
    for _ in 0..3 {
        let id = detach(&d, "gen count=100G size=64 | count name=n");
        let run = d.mount().join(id.to_string());
        assert!(
            run.is_dir(),
            "{} missing right after --detach",
            run.display()
        );
        let node = run.join("gen").join("count:n");
        assert!(
            node.is_dir(),
            "{} missing right after --detach",
            node.display()
        );
        assert!(ps_line(&d, id).is_some(), "{}", d.ps());
        let st = d.cli().args(["stop", &id.to_string()]).output().unwrap();
        assert!(st.status.success(), "{}", text(&st));
        common::wait_for("the run's end", LIMIT, || ps_line(&d, id).is_none());
    }
}
