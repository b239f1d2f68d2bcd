//! The daemon says what it did (issue 41): `run` says whether it went through a daemon
//! (which) or ran stand-alone; `stop` says what it stopped and returns once the run no
//! longer runs; `ps` shows where each run's filters are and its live edits. A real
//! daemon (tests/common/daemon.rs), real workers.

mod common;

use std::process::{Command, Output};

use common::daemon::{Daemon, BIN};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `ps`'s line for run `id`, if listed.
fn ps_line(ps: &str, id: u64) -> Option<String> {
    ps.lines()
        .skip(1)
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
        .map(str::to_string)
}

fn detach(d: &Daemon, pipeline: &str) -> u64 {
    let o = d
        .cli()
        .args(["run", "--detach", "--plan", "none", pipeline])
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("--detach prints the run id: {:?}", text(&o)))
}

#[test]
fn run_says_whether_it_went_through_the_daemon() {
    let d = Daemon::start("says-run", None);
    let via = d
        .cli()
        .args(["run", "gen count=10 | count"])
        .output()
        .unwrap();
    let (_, e) = text(&via);
    assert!(via.status.success(), "{e}");
    let line = e
        .lines()
        .find(|l| l.contains("goes through the daemon"))
        .unwrap_or_else(|| panic!("no line saying the daemon ran it:\n{e}"));
    // Which daemon: its pid and socket.
    assert!(
        line.starts_with("streamline: run 1 goes through the daemon (streamlined ")
            && line.contains(&format!("pid {}", d.pid()))
            && line.contains(&d.socket.display().to_string()),
        "{line}"
    );
    // Stand-alone, said as such (and never claimed to be the daemon's).
    let alone = Command::new(BIN)
        .args(["--socket", "none", "run", "gen count=10 | count"])
        .output()
        .unwrap();
    let (_, e) = text(&alone);
    assert!(alone.status.success(), "{e}");
    assert!(
        e.lines()
            .any(|l| l == "streamline: running stand-alone (--socket none)")
            && !e.contains("daemon ("),
        "{e}"
    );
    let nowhere = d.dir.join("no-such-socket");
    let alone = Command::new(BIN)
        .env("STREAMLINE_SOCKET", &nowhere)
        .args(["run", "gen count=10 | count"])
        .output()
        .unwrap();
    let (_, e) = text(&alone);
    assert!(
        e.contains(&format!(
            "streamline: running stand-alone (no daemon answers on {})",
            nowhere.display()
        )),
        "{e}"
    );
    // -q keeps it quiet.
    let q = d
        .cli()
        .args(["run", "-q", "gen count=10 | count"])
        .output()
        .unwrap();
    assert!(!text(&q).1.contains("goes through"), "{:?}", text(&q));
}

#[test]
fn stop_says_what_it_stopped_and_returns_when_the_run_no_longer_runs() {
    let d = Daemon::start("says-stop", None);
    // A run that takes a second to end once stopped (its Unix command sleeps after its
    // input ends): a stop that returned before the run ended (as it did) leaves it
    // `running` in the `ps` right after. Also with a process space.
    for p in [
        "gen count=100G size=1K | sh -c 'cat >/dev/null; sleep 1'",
        "gen count=100G size=1K | dedup space=p1 | sh -c 'cat >/dev/null; sleep 1'",
    ] {
        let id = detach(&d, p);
        common::wait_for(
            "the run to be running",
            std::time::Duration::from_secs(20),
            || ps_line(&d.ps(), id).is_some_and(|l| l.contains("running")),
        );
        let st = d.cli().args(["stop", &id.to_string()]).output().unwrap();
        let (out, err) = text(&st);
        assert!(st.status.success(), "{out}{err}");
        assert!(
            err.starts_with(&format!(
                "streamline: stopped run {id} `{p}`: it ended with status "
            )),
            "{err}"
        );
        let ps = d.ps();
        assert!(
            ps_line(&ps, id).is_none_or(|l| !l.contains("running")),
            "ps right after stop returned:\n{ps}"
        );
    }
    // A run that is not there: said, status 1, nothing printed as stopped.
    let e = d.cli().args(["stop", "999"]).output().unwrap();
    assert!(
        !e.status.success() && text(&e).0.is_empty(),
        "{:?}",
        text(&e)
    );
}

#[test]
fn ps_shows_placement_and_live_edits() {
    let d = Daemon::start("says-ps", None);
    let id = detach(
        &d,
        "gen count=100G size=64 | count | dedup space=1 | sample 2 space=p2 | null",
    );
    // Running, and the worker's own space has reported its filters too (a run seen 0.1 s
    // after it started showed the other spaces' placement only).
    common::wait_for(
        "the run to be running",
        std::time::Duration::from_secs(20),
        || ps_line(&d.ps(), id).is_some_and(|l| l.contains("running") && l.contains("local:")),
    );
    let ps = d.ps();
    let header = ps.lines().next().unwrap();
    assert!(
        header.contains("PLACEMENT") && header.contains("EDITS"),
        "{ps}"
    );
    let line = ps_line(&ps, id).unwrap();
    // Each filter in the space it runs in: gen and count in the worker's calling
    // thread, dedup on thread space 1, sample and what follows it in process space 2.
    assert!(
        line.contains("local:gen,count t1:dedup p2:sample,null"),
        "{ps}"
    );
    // The edit count and column agree with what was applied.
    let cols: Vec<&str> = line.split_whitespace().collect();
    let edits_col = cols.iter().position(|w| w.starts_with("local:")).unwrap() - 1;
    assert_eq!(cols[edits_col], "0", "{ps}");
    let e = d
        .cli()
        .args(["edit", &id.to_string(), "insert after gen dedup"])
        .output()
        .unwrap();
    assert!(e.status.success(), "{:?}", text(&e));
    // The new node's label is the run's second dedup's, as in one space (it was `dedup`
    // in its space, which space 1's dedup has: the table folded the two into one row).
    assert!(
        text(&e).0.trim_end().ends_with(": dedup#2@0"),
        "{:?}",
        text(&e)
    );
    let ps = d.ps();
    let line = ps_line(&ps, id).unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[edits_col], "1", "{ps}");
    assert!(
        ps.lines()
            .any(|l| l.trim() == "last edit: insert after gen dedup"),
        "{ps}"
    );
    // The pipeline as it runs now: the edit in it, the placements kept.
    assert!(
        ps.contains(
            "gen count=100G size=64 | dedup | count | dedup space=1 | sample 2 space=p2 | null"
        ),
        "{ps}"
    );
    // PLACEMENT as it runs now: the inserted dedup where it runs (with gen, in the
    // worker's thread), in the pipeline's order (it said what the build placed).
    let mut ps = String::new();
    common::wait_until(
        "ps's PLACEMENT to show the edit",
        std::time::Duration::from_secs(20),
        || {
            ps = d.ps();
            ps_line(&ps, id)
                .filter(|l| l.contains("local:gen,dedup,count t1:dedup p2:sample,null"))
                .map(|_| ())
                .ok_or(ps.clone())
        },
    );
    let e = d
        .cli()
        .args(["edit", &id.to_string(), "remove dedup#2"])
        .output()
        .unwrap();
    assert!(e.status.success(), "{:?}", text(&e));
    common::wait_until(
        "ps's PLACEMENT to show the removal",
        std::time::Duration::from_secs(20),
        || {
            ps = d.ps();
            ps_line(&ps, id)
                .filter(|l| l.contains("local:gen,count t1:dedup p2:sample,null"))
                .map(|_| ())
                .ok_or(ps.clone())
        },
    );
    let _ = d.cli().args(["stop", &id.to_string()]).output();
}
