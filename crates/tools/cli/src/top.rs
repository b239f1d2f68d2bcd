//! `streamline top`: the daemon's runs in the terminal, updating in place, for hosts
//! without a browser (the web view's data, `streamlined --http`, read here through the
//! control socket's `ps`): first the runs, then one run's nodes sorted by load (blocks
//! per second), each rate measured between two looks.
//!
//! Keys: up/down (or k/j) choose a run, Enter opens it, Esc, Backspace or `b` go back, `q`
//! quits (so does Ctrl-C). Off a terminal it prints the view `--iterations` times, one
//! after the other, without control sequences.
//!
//! Owns: the screens and the rates between two snapshots. Does not own: the counters (the
//! daemon's, as `ps` shows them to this user).

use daemon::client::Client;
use daemon::proto::{Reply, Request, RunInfo};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `top` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Screen {
    Runs,
    Run(u64),
}

/// A node's blocks and bytes per second between two looks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Rate {
    blocks: f64,
    bytes: f64,
}

/// Counters at the last look, per (run, node): the load measured between looks.
#[derive(Default)]
struct Rates {
    last: BTreeMap<(u64, String), (Instant, u64, u64)>,
    now: BTreeMap<(u64, String), Rate>,
}

impl Rates {
    /// Take a new look at `runs` at time `at`: a node's rate is what it took (or, for a
    /// source, passed on) since the last look.
    fn look(&mut self, runs: &[RunInfo], at: Instant) {
        let mut last = BTreeMap::new();
        self.now.clear();
        for r in runs {
            for n in &r.nodes {
                let source = n.blocks_in == 0 && n.blocks_out > 0;
                let (blocks, bytes) = if source {
                    (n.blocks_out, n.bytes_out)
                } else {
                    (n.blocks_in, n.bytes_in)
                };
                let k = (r.run, n.label.clone());
                if let Some(&(t0, b0, y0)) = self.last.get(&k) {
                    let dt = at.duration_since(t0).as_secs_f64();
                    if dt > 0.0 {
                        self.now.insert(
                            k.clone(),
                            Rate {
                                blocks: blocks.saturating_sub(b0) as f64 / dt,
                                bytes: bytes.saturating_sub(y0) as f64 / dt,
                            },
                        );
                    }
                }
                last.insert(k, (at, blocks, bytes));
            }
        }
        self.last = last;
    }

    fn of(&self, run: u64, label: &str) -> Rate {
        self.now
            .get(&(run, label.to_string()))
            .copied()
            .unwrap_or_default()
    }

    /// A run's load: its busiest node's blocks per second.
    fn run_load(&self, r: &RunInfo) -> f64 {
        r.nodes
            .iter()
            .map(|n| self.of(r.run, &n.label).blocks)
            .fold(0.0, f64::max)
    }
}

fn human(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.1}G", x / 1e9),
        x if x >= 1e6 => format!("{:.1}M", x / 1e6),
        x if x >= 1e3 => format!("{:.1}k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

fn cut(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_string()
    } else {
        s.chars().take(w.saturating_sub(3)).collect::<String>() + "..."
    }
}

/// The runs screen: one line per run, the chosen one marked.
fn runs_screen(runs: &[RunInfo], rates: &Rates, chosen: usize) -> Vec<String> {
    let mut lines = vec![
        format!(
            "streamline top: {} runs    (up/down choose, Enter open, q quit)",
            runs.len()
        ),
        format!(
            "  {:<5} {:<10} {:<20} {:>9} {:>10} {:>10} {:>5}  PIPELINE",
            "ID", "USER", "STATE", "UPTIME", "SINKS/S", "BUSIEST/S", "NODES"
        ),
    ];
    for (k, r) in runs.iter().enumerate() {
        lines.push(format!(
            "{} {:<5} {:<10} {:<20} {:>8.1}s {:>10} {:>10} {:>5}  {}",
            if k == chosen { ">" } else { " " },
            r.run,
            cut(&r.user, 10),
            cut(&r.state, 20),
            r.uptime_s,
            human(r.rate),
            human(rates.run_load(r)),
            r.nodes.len(),
            cut(&r.pipeline, 60)
        ));
    }
    if runs.is_empty() {
        lines.push("  (no runs of yours)".into());
    }
    lines
}

/// A run's screen: its nodes, busiest first.
fn run_screen(r: Option<&RunInfo>, id: u64, rates: &Rates) -> Vec<String> {
    let Some(r) = r else {
        return vec![format!(
            "streamline top: run {id} is gone (or not yours)    (b back, q quit)"
        )];
    };
    let mut lines = vec![
        format!(
            "streamline top: run {} of {}, {}, up {:.1}s    (b back, q quit)",
            r.run, r.user, r.state, r.uptime_s
        ),
        format!("  {}", cut(&r.pipeline, 100)),
        format!(
            "  {:<20} {:>10} {:>10} {:>12} {:>12} {:>10}  {:<8}",
            "NODE", "BLOCKS/S", "BYTES/S", "BLOCKS IN", "BLOCKS OUT", "DROPS", "SPACE"
        ),
    ];
    let mut nodes: Vec<_> = r
        .nodes
        .iter()
        .map(|n| (rates.of(r.run, &n.label), n))
        .collect();
    nodes.sort_by(|a, b| {
        b.0.blocks
            .total_cmp(&a.0.blocks)
            .then_with(|| a.1.label.cmp(&b.1.label))
    });
    for (rt, n) in nodes {
        lines.push(format!(
            "  {:<20} {:>10} {:>10} {:>12} {:>12} {:>10}  {:<8}",
            cut(&n.label, 20),
            human(rt.blocks),
            human(rt.bytes),
            n.blocks_in,
            n.blocks_out,
            n.drops,
            if n.space.is_empty() { "-" } else { &n.space }
        ));
    }
    lines
}

/// The terminal in non-canonical mode without echo (signals still work), the alternate
/// screen, the cursor hidden; all undone when dropped.
struct Raw {
    saved: nix::sys::termios::Termios,
}

impl Raw {
    fn enter() -> Option<Raw> {
        use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
        let stdin = std::io::stdin();
        let saved = tcgetattr(stdin.as_fd()).ok()?;
        let mut t = saved.clone();
        t.local_flags.remove(LocalFlags::ICANON | LocalFlags::ECHO);
        tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &t).ok()?;
        print!("\x1b[?1049h\x1b[?25l");
        let _ = std::io::stdout().flush();
        Some(Raw { saved })
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        use nix::sys::termios::{tcsetattr, SetArg};
        print!("\x1b[?25h\x1b[?1049l");
        let _ = std::io::stdout().flush();
        let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// A key, as `top` understands them.
#[derive(Debug, PartialEq, Eq)]
enum Key {
    Up,
    Down,
    Enter,
    Back,
    Quit,
}

/// The keys in what the terminal sent.
fn keys(bytes: &[u8]) -> Vec<Key> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            0x1b if bytes.get(i + 1) == Some(&b'[') => {
                match bytes.get(i + 2) {
                    Some(b'A') => out.push(Key::Up),
                    Some(b'B') => out.push(Key::Down),
                    _ => {}
                }
                i += 3;
                continue;
            }
            0x1b => out.push(Key::Back),
            b'k' => out.push(Key::Up),
            b'j' => out.push(Key::Down),
            b'\r' | b'\n' => out.push(Key::Enter),
            0x7f | 0x08 | b'b' | b'h' => out.push(Key::Back),
            b'q' | b'Q' => out.push(Key::Quit),
            _ => {}
        }
        i += 1;
    }
    out
}

/// Wait up to `limit` for keys on stdin.
fn read_keys(limit: Duration) -> Vec<Key> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    let ms = limit.as_millis().min(u16::MAX as u128) as u16;
    if !matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0) {
        return Vec::new();
    }
    let mut buf = [0u8; 64];
    match nix::unistd::read(stdin.as_fd(), &mut buf) {
        Ok(0) => vec![Key::Quit],
        Ok(n) => keys(&buf[..n]),
        Err(_) => Vec::new(),
    }
}

fn ps(c: &mut Client) -> Result<Vec<RunInfo>, String> {
    match c.call(Request::Ps {}) {
        Ok(Reply::Runs { runs }) => Ok(runs),
        Ok(other) => Err(format!("unexpected answer {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `streamline top [RUN]`.
pub fn top(mut c: Client, run: Option<u64>, delay: Duration, iterations: Option<u64>) -> ExitCode {
    let mut screen = run.map_or(Screen::Runs, Screen::Run);
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::io::IsTerminal::is_terminal(&std::io::stdin());
    let stop = Arc::new(AtomicBool::new(false));
    for sig in crate::STOP_SIGNALS {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    let raw = if terminal { Raw::enter() } else { None };
    let mut rates = Rates::default();
    let mut chosen = 0usize;
    let mut shown = 0u64;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) && iterations.is_none_or(|n| shown < n) {
        let runs = match ps(&mut c) {
            Ok(r) => r,
            Err(e) => {
                drop(raw);
                crate::error!("{e}");
                return ExitCode::from(1);
            }
        };
        rates.look(&runs, Instant::now());
        let mut order: Vec<&RunInfo> = runs.iter().collect();
        order.sort_by_key(|r| r.run);
        chosen = chosen.min(order.len().saturating_sub(1));
        let lines = match screen {
            Screen::Runs => runs_screen(
                &order.iter().map(|r| (*r).clone()).collect::<Vec<_>>(),
                &rates,
                chosen,
            ),
            Screen::Run(id) => run_screen(runs.iter().find(|r| r.run == id), id, &rates),
        };
        let mut text = String::new();
        if raw.is_some() {
            text += "\x1b[H";
            for l in &lines {
                text += l;
                text += "\x1b[K\r\n";
            }
            text += "\x1b[J";
        } else {
            for l in &lines {
                text += l;
                text += "\n";
            }
            text += "\n";
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        drop(out);
        shown += 1;
        next += delay;
        // Keys until the next refresh (a key redraws at once).
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() || stop.load(Ordering::Relaxed) {
                break;
            }
            if raw.is_none() {
                std::thread::sleep(left);
                break;
            }
            let ks = read_keys(left);
            if ks.is_empty() {
                continue;
            }
            for k in ks {
                match (k, screen) {
                    (Key::Quit, _) => stop.store(true, Ordering::Relaxed),
                    (Key::Up, Screen::Runs) => chosen = chosen.saturating_sub(1),
                    (Key::Down, Screen::Runs) => chosen += 1,
                    (Key::Enter, Screen::Runs) => {
                        if let Some(r) = order.get(chosen) {
                            screen = Screen::Run(r.run)
                        }
                    }
                    (Key::Back, Screen::Run(_)) => screen = Screen::Runs,
                    _ => {}
                }
            }
            next = Instant::now();
            break;
        }
    }
    drop(raw);
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use daemon::proto::NodeCounters;

    fn run(id: u64, nodes: &[(&str, u64, u64)]) -> RunInfo {
        RunInfo {
            run: id,
            uid: 0,
            user: "root".into(),
            state: "running".into(),
            pipeline: "gen | count".into(),
            placement: String::new(),
            layout: String::new(),
            edits: 0,
            last_edit: String::new(),
            uptime_s: 1.0,
            rate: 0.0,
            nodes: nodes
                .iter()
                .map(|(l, i, o)| NodeCounters {
                    label: l.to_string(),
                    blocks_in: *i,
                    blocks_out: *o,
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn rates_are_measured_between_looks_and_nodes_sorted_by_load() {
        let mut r = Rates::default();
        let t0 = Instant::now();
        r.look(
            &[run(
                1,
                &[("gen", 0, 100), ("count", 100, 100), ("null", 10, 0)],
            )],
            t0,
        );
        let t1 = t0 + Duration::from_secs(2);
        let later = run(1, &[("gen", 0, 500), ("count", 500, 500), ("null", 30, 0)]);
        r.look(std::slice::from_ref(&later), t1);
        assert_eq!(r.of(1, "gen").blocks, 200.0, "a source: what it passed on");
        assert_eq!(r.of(1, "null").blocks, 10.0);
        let lines = run_screen(Some(&later), 1, &r);
        let order: Vec<&str> = lines[3..]
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(
            order,
            ["count", "gen", "null"],
            "busiest first, ties by name"
        );
        assert_eq!(r.run_load(&later), 200.0);
    }

    #[test]
    fn keys_are_read_from_what_the_terminal_sends() {
        assert_eq!(
            keys(b"\x1b[A\x1b[Bjk\rqb\x7f"),
            [
                Key::Up,
                Key::Down,
                Key::Down,
                Key::Up,
                Key::Enter,
                Key::Quit,
                Key::Back,
                Key::Back
            ]
        );
        assert_eq!(keys(b"\x1b"), [Key::Back]);
    }
}
