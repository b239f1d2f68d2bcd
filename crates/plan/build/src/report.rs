//! What a run prints, the same for `streamline run` and the daemon's worker: errors in the
//! one style, the per-filter table and summaries at its end, its exit status; and the stop
//! signals both watch or leave to their parent.

/// Every error `streamline` prints has one style: `streamline: error: WHAT`, then, for an
/// error about pipeline text, the pipeline and a caret under the place (`lang::render`).
/// A message that comes with a prefix of its own (a lang `Diagnostic`'s `error: `, the
/// `streamline: ` of a message made by `prepare`, in a worker or here) gets this one
/// instead; a warning is `streamline: warning: WHAT`.
pub fn error_text(m: &str) -> String {
    let mut rest = m;
    loop {
        let before = rest;
        for p in ["streamline: ", "error: "] {
            if let Some(r) = rest.strip_prefix(p) {
                rest = r;
            }
        }
        if rest == before {
            break;
        }
    }
    format!("streamline: error: {rest}")
}

/// The signals that tell a run to stop: SIGINT (Ctrl-C), SIGTERM (`timeout`, `kill`,
/// systemd, container runtimes) and SIGHUP (the terminal went away). The first one stops
/// the run as its sources ending would (every sink flushed into a valid file, totals
/// printed, shared memory and pinned maps removed) and the run exits with 128 + the
/// signal's number (130, 143, 129); a second one gives up at once with the same status,
/// removing only the pinned maps.
pub const STOP_SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// Process spaces leave stopping to their parent (which tells them `stop`): signals sent
/// to the whole process group (Ctrl-C in a terminal, `timeout`) are ignored here.
pub fn ignore_stop_signals() {
    if let Ok(mut signals) = signal_hook::iterator::Signals::new(STOP_SIGNALS) {
        let _ = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || for _ in signals.forever() {});
    }
}

/// The per-filter table, summaries and warnings a run prints at its end (standard error).
pub fn print_report(
    rep: &dataplane::spaces::SpacesReport,
    elapsed: std::time::Duration,
    quiet: bool,
) {
    let report = &rep.nodes;
    if !quiet {
        // The columns add up per row: blocks out = blocks in - drops + made - ended
        // (`dataplane::Counters`). One row per node the user wrote, labelled as in one
        // space; `space` says where it ran (`1,2`: replicas, summed in the row).
        eprintln!(
            "{:<16} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10} {:>10} {:>10}  space",
            "filter",
            "blocks in",
            "bytes in",
            "blocks out",
            "bytes out",
            "drops",
            "made",
            "ended",
            "time ms"
        );
        for r in report {
            let c = r.counters;
            eprintln!(
                "{:<16} {:>12} {:>14} {:>12} {:>14} {:>10} {:>10} {:>10} {:>10.1}  {}",
                r.label,
                c.blocks_in,
                c.bytes_in,
                c.blocks_out,
                c.bytes_out,
                c.drops,
                c.made,
                c.ended,
                c.nanos as f64 / 1e6,
                if r.space.is_empty() { "-" } else { &r.space }
            );
        }
        eprintln!("({:.3} s)", elapsed.as_secs_f64());
    }
    for line in summary_lines(report) {
        eprintln!("{line}");
    }
    for w in &rep.warnings {
        eprintln!("streamline: warning: {w}");
    }
}

/// The filters' summary lines, each as its filter wrote it (`count: N blocks, ...`), but
/// where two lines would start alike (`count | count name=tail`), each starts with its
/// node's label instead (`count: ...`, `count:tail: ...`, `count#2: ...`), so no two
/// identical prefixes leave the reader guessing which node said what.
fn summary_lines(report: &[dataplane::runtime::NodeReport]) -> Vec<String> {
    let prefix = |s: &str| s.split_once(": ").map(|(p, _)| p.to_string());
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for s in report.iter().filter_map(|r| r.summary.as_deref()) {
        if let Some(p) = prefix(s) {
            *seen.entry(p).or_default() += 1;
        }
    }
    report
        .iter()
        .filter_map(|r| {
            let s = r.summary.as_deref()?;
            Some(match s.split_once(": ") {
                Some((p, rest)) if seen.get(p).is_some_and(|&n| n > 1) && r.label != p => {
                    format!("{}: {rest}", r.label)
                }
                _ => s.to_string(),
            })
        })
        .collect()
}

/// The exit status of a finished run: 1 if a space died or a filter failed, 128 + the
/// signal that stopped it, else its last command's when that is a Unix command that
/// failed (as a shell pipeline's), else 0.
pub fn exit_status(rep: &dataplane::spaces::SpacesReport, sig: i32) -> u8 {
    if let Some(d) = &rep.died {
        eprintln!("{}", error_text(d));
        return 1;
    }
    if sig != 0 {
        eprintln!("interrupted ({})", signal_name(sig));
        return (128 + sig) as u8;
    }
    if rep.failed {
        return 1;
    }
    rep.status.unwrap_or(0)
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGTERM => "SIGTERM",
        signal_hook::consts::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}
