//! Issue 38, `streamline top` in a real terminal (tmux: keys sent with send-keys, the
//! screen read with capture-pane): the runs, then a run's nodes sorted by load, their rates
//! changing as the run's traffic changes; `q` quits and gives the terminal back.

mod common;

use common::daemon::{Daemon, BIN};
use std::process::Command;
use std::time::{Duration, Instant};

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux (Debian package tmux)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Kills its tmux session, however the test ends.
struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}

fn screen(s: &Session) -> String {
    tmux(&["capture-pane", "-p", "-t", &s.0])
}

/// Wait until the screen satisfies `ok`; the screen.
fn wait_screen(s: &Session, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = screen(s);
        if ok(&text) {
            return text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "top never showed {what}; the screen:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The BLOCKS/S column of a node's line on the run screen.
fn node_rate(text: &str, node: &str) -> Option<f64> {
    // Below the table's header (the run's pipeline above it starts with a node's name too).
    let l = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("NODE"))
        .find(|l| l.split_whitespace().next() == Some(node))?;
    let w = l.split_whitespace().nth(1)?;
    let (n, mul) = match w.strip_suffix('k') {
        Some(n) => (n, 1e3),
        None => (w, 1.0),
    };
    n.parse::<f64>().ok().map(|x| x * mul)
}

#[test]
fn top_shows_the_runs_then_a_runs_nodes_by_load_updating_in_place() {
    assert!(
        Command::new("tmux").arg("-V").output().is_ok(),
        "this test needs tmux (Debian package tmux)"
    );
    let d = Daemon::start("top", None);
    let detach = |p: &str| -> u64 {
        let out = d
            .cli()
            .args(["run", "--detach", "-q", "--no-share", "--plan", "none", p])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let quiet = detach("gen count=1G size=64 rate=50 | count name=quiet | null");
    let busy = detach("gen count=1G size=64 rate=400 | sample every=2 | count name=busy | null");
    let s = Session(format!("sl-top-{}", std::process::id()));
    let cmd = format!(
        "STREAMLINE_SOCKET={} {BIN} top --delay 1",
        d.socket.display()
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &s.0,
        "-x",
        "160",
        "-y",
        "40",
        &cmd,
    ]);
    // The runs.
    let text = wait_screen(&s, "both runs", |t| {
        // Each run's line by its ID, with its pipeline (shortened to the column's width).
        let line = |id: u64| {
            t.lines()
                .find(|l| {
                    l.trim_start_matches('>').split_whitespace().next() == Some(&id.to_string())
                })
                .unwrap_or("")
                .to_string()
        };
        t.contains("streamline top: 2 runs")
            && line(quiet).contains("| count name=quiet |")
            && line(busy).contains("rate=400 | sample every=2 |")
    });
    assert!(
        text.lines().any(|l| l.starts_with('>')),
        "a run is chosen:\n{text}"
    );
    // Down to the second run, Enter: its nodes, busiest first.
    tmux(&["send-keys", "-t", &s.0, "Down", "Enter"]);
    let text = wait_screen(&s, "the busy run's nodes with rates", |t| {
        t.contains(&format!("run {busy} of root")) && node_rate(t, "gen").is_some_and(|r| r > 200.0)
    });
    let order: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("NODE"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // gen and sample take 400/s, count:busy and null half of it (sample every=2).
    let mut first: Vec<&str> = order.iter().take(2).copied().collect();
    first.sort();
    assert_eq!(first, ["gen", "sample"], "busiest first:\n{text}");
    let mut last: Vec<&str> = order.iter().skip(2).copied().collect();
    last.sort();
    assert_eq!(last, ["count:busy", "null"], "busiest first:\n{text}");
    // The rates change as the run's traffic does: a live edit, and top follows.
    let out = d
        .cli()
        .args(["edit", &busy.to_string(), "set gen rate=2000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_screen(&s, "gen's rate rising past 1000/s", |t| {
        node_rate(t, "gen").is_some_and(|r| r > 1000.0)
    });
    // Back to the runs, then q: top ends and the pane's program is gone.
    tmux(&["send-keys", "-t", &s.0, "b"]);
    wait_screen(&s, "the runs again", |t| {
        t.contains("streamline top: 2 runs")
    });
    tmux(&["send-keys", "-t", &s.0, "q"]);
    let start = Instant::now();
    while !tmux(&["list-sessions"])
        .lines()
        .all(|l| !l.starts_with(&format!("{}:", s.0)))
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "top did not quit on q"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for id in [quiet, busy] {
        let _ = d.cli().args(["stop", &id.to_string()]).output();
    }
}
