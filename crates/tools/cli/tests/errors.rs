//! Errors have one prefix style (issue 41): every error `streamline` prints starts with
//! `streamline: error: `, stand-alone or through the daemon, from the parser, the build,
//! the daemon, clap; an error about pipeline text has the pipeline and a caret under
//! the place; `streamlined`'s start-up errors start with `streamlined: error: `.

mod common;

use std::process::{Command, Output};

use common::daemon::{daemon_bin, Daemon, BIN};

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The stderr of a failure: status `code`, first line starting with `streamline: error: `
/// and nothing else in an error style of its own (`error:` or `Error:` at a line's start).
fn failure(o: &Output, code: i32, what: &str) -> String {
    let e = err(o);
    assert_eq!(o.status.code(), Some(code), "{what}: {e}");
    let first = e.lines().next().unwrap_or("");
    assert!(first.starts_with("streamline: error: "), "{what}: {e}");
    assert!(
        !e.lines()
            .any(|l| l.starts_with("error:") || l.starts_with("Error:")),
        "{what}: {e}"
    );
    e
}

/// The text under which the caret line points (the span's characters).
fn under_caret(e: &str) -> String {
    let lines: Vec<&str> = e.lines().collect();
    let k = lines
        .iter()
        .position(|l| l.trim_start().starts_with('^') && l.trim().chars().all(|c| c == '^'))
        .unwrap_or_else(|| panic!("no caret line:\n{e}"));
    let at = lines[k].find('^').unwrap();
    let len = lines[k].trim().len();
    lines[k - 1].get(at..at + len).unwrap_or("").to_string()
}

fn alone(args: &[&str]) -> Output {
    Command::new(BIN)
        .env("STREAMLINE_SOCKET", "none")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn streamline_errors_have_one_prefix_and_pipeline_errors_a_caret() {
    // The parser's error (unknown filter: a near miss of `count`, no program of that
    // name; a word that is no near miss is a command, as in the shell), stand-alone.
    let o = alone(&["run", "gen count=3 | countt"]);
    let e = failure(&o, 2, "unknown filter");
    assert!(
        e.starts_with("streamline: error: unknown filter 'countt'"),
        "{e}"
    );
    assert_eq!(under_caret(&e), "countt", "{e}");
    // check says it the same way.
    let o = alone(&["check", "gen count=3 | | count"]);
    failure(&o, 2, "check");
    // A build error (a placement the runtime refuses), with its caret.
    let o = alone(&["run", "gen count=10 | count space=x9"]);
    let e = failure(&o, 2, "bad space");
    assert!(under_caret(&e).starts_with("count"), "{e}");
    // clap's own errors, and ours about arguments.
    failure(&alone(&["run"]), 2, "missing pipeline");
    failure(&alone(&["filters", "nosuchfilterxyz"]), 2, "no such filter");
    failure(&alone(&["help", "nosuchtopic"]), 2, "no such topic");
    failure(&alone(&["maps", "--watch", "-1"]), 2, "bad --watch");
    // Commands that need a daemon, without one.
    let o = Command::new(BIN)
        .env("STREAMLINE_SOCKET", "/nonexistent/socket")
        .args(["ps"])
        .output()
        .unwrap();
    let e = failure(&o, 1, "no daemon");
    assert!(
        e.contains("no daemon answers on /nonexistent/socket"),
        "{e}"
    );
}

#[test]
fn errors_through_the_daemon_look_the_same() {
    let d = Daemon::start("errstyle", None);
    // The same parse error through the daemon: the same first line and caret.
    let o = d
        .cli()
        .args(["run", "gen count=3 | countt"])
        .output()
        .unwrap();
    let e = failure(&o, 2, "unknown filter via the daemon");
    let a = err(&alone(&["run", "gen count=3 | countt"]));
    assert_eq!(e.lines().next(), a.lines().next(), "{e}\n{a}");
    assert_eq!(under_caret(&e), "countt", "{e}");
    // A build error made in the worker.
    let o = d
        .cli()
        .args(["run", "gen count=10 | count space=x9"])
        .output()
        .unwrap();
    let e = failure(&o, 2, "bad space via the daemon");
    assert!(under_caret(&e).starts_with("count"), "{e}");
    // The daemon's refusals.
    let o = d.cli().args(["stop", "999"]).output().unwrap();
    let e = failure(&o, 1, "stop 999");
    assert!(e.contains("no run 999"), "{e}");
    let o = d
        .cli()
        .args(["edit", "999", "remove count"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    failure(&o, o.status.code().unwrap(), "edit 999");
}

#[test]
fn streamlined_errors_have_one_prefix() {
    common::daemon::require_root("the daemon's start-up checks");
    let o = Command::new(daemon_bin())
        .args(["--policy", "/nonexistent/policy.toml", "--no-mount"])
        .args(["--socket", "/nonexistent/dir/control"])
        .output()
        .unwrap();
    let e = err(&o);
    assert!(!o.status.success(), "{e}");
    assert!(e.starts_with("streamlined: error: "), "{e}");
    assert!(e.contains("/nonexistent/policy.toml"), "{e}");
}
