//! `/metrics`: the runs' counters in the Prometheus text exposition format (version
//! 0.0.4), named as exporters people already scrape name theirs: the `streamline_` prefix,
//! base units, counters ending in `_total`, a HELP and a TYPE line per family, every
//! sample of a family together. Labels are per run and node (`run`, `user`, `node`,
//! `filter`, `space`, `direction`), never per packet: a run of N nodes is a few N series.
//!
//! Who sees what: a session sees its user's runs (root's: all), the scrape token every
//! run (`web::session`).

use super::snapshot::RunView;
use std::fmt::Write;

/// A label value as the format writes it: `\`, `"` and line feeds escaped.
pub fn escape_value(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Labels `{k="v",...}`.
fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_value(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// A run's state in one word (`running (detached)` is running; `failed: why` is failed).
fn state_word(state: &str) -> &str {
    state
        .split(|c: char| c == ' ' || c == ':')
        .next()
        .unwrap_or(state)
}

/// One family: HELP, TYPE and its samples.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, String)>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, pairs: &[(&str, &str)], value: impl std::fmt::Display) {
        self.samples.push((labels(pairs), value.to_string()));
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        for (l, v) in &self.samples {
            let _ = writeln!(out, "{}{l} {v}", self.name);
        }
    }
}

/// The exposition of `runs` (finished and failed runs are left out: their counters no
/// longer move, and a run that is gone is a series that ends).
pub fn render(runs: &[RunView]) -> String {
    let mut runs_by_state = Family::new(
        "streamline_runs",
        "gauge",
        "Runs the daemon holds that this scraper may see, by state.",
    );
    let mut info = Family::new(
        "streamline_run_info",
        "gauge",
        "A run (value 1): its user, state and pipeline as ps shows it.",
    );
    let mut uptime = Family::new(
        "streamline_run_uptime_seconds",
        "gauge",
        "Seconds since the run was opened.",
    );
    let mut edits = Family::new(
        "streamline_run_edits_total",
        "counter",
        "Live edits applied to the run.",
    );
    let mut blocks = Family::new(
        "streamline_node_blocks_total",
        "counter",
        "Blocks through a node: taken in (direction=in) or passed on (direction=out).",
    );
    let mut bytes = Family::new(
        "streamline_node_bytes_total",
        "counter",
        "Bytes of the blocks through a node, by direction.",
    );
    let mut drops = Family::new(
        "streamline_node_drops_total",
        "counter",
        "Blocks a node took and did not pass on (filtered out or lost).",
    );
    let mut lost = Family::new(
        "streamline_node_lost_total",
        "counter",
        "Packets a source lost before it could take them (its capture socket's ring was full: the kernel's drops).",
    );
    let mut arc_blocks = Family::new(
        "streamline_arc_blocks_total",
        "counter",
        "Blocks an arc carried from node `from` to node `to`.",
    );
    let mut arc_bytes = Family::new(
        "streamline_arc_bytes_total",
        "counter",
        "Bytes of the blocks an arc carried.",
    );
    let mut fill = Family::new(
        "streamline_channel_fill_ratio",
        "gauge",
        "How full the channel of an arc between two spaces is (its fuller ring, 0 to 1).",
    );
    let mut readers = Family::new(
        "streamline_channel_readers",
        "gauge",
        "Readers attached to the channel of an arc between two spaces.",
    );
    let mut waits = Family::new(
        "streamline_channel_writer_waits_total",
        "counter",
        "Times the producer of a channel waited for room (back-pressure).",
    );
    let mut states: std::collections::BTreeMap<&str, u64> = Default::default();
    for r in runs {
        let st = state_word(&r.state);
        *states.entry(st).or_default() += 1;
        if st == "finished" || st == "failed" {
            continue;
        }
        let id = r.run.to_string();
        let run = [("run", id.as_str()), ("user", r.user.as_str())];
        info.add(
            &[
                run[0],
                run[1],
                ("state", st),
                ("pipeline", r.pipeline.as_str()),
            ],
            1,
        );
        uptime.add(&run, format!("{:.3}", r.uptime_s));
        edits.add(&run, r.edits);
        for n in &r.nodes {
            let node = [
                run[0],
                run[1],
                ("node", n.label.as_str()),
                ("filter", n.name.as_str()),
                ("space", n.space.as_str()),
            ];
            let with = |d: &'static str| {
                let mut v = node.to_vec();
                v.push(("direction", d));
                v
            };
            blocks.add(&with("in"), n.blocks_in);
            blocks.add(&with("out"), n.blocks_out);
            bytes.add(&with("in"), n.bytes_in);
            bytes.add(&with("out"), n.bytes_out);
            drops.add(&node, n.drops);
            if n.source {
                lost.add(&node, n.lost);
            }
        }
        for e in &r.edges {
            let arc = [
                run[0],
                run[1],
                ("from", e.from.as_str()),
                ("to", e.to.as_str()),
            ];
            arc_blocks.add(&arc, e.blocks);
            arc_bytes.add(&arc, e.bytes);
            if let Some(g) = &e.ring {
                fill.add(&arc, format!("{:.4}", g.fill()));
                readers.add(&arc, g.readers);
                waits.add(&arc, g.writer_waits);
            }
        }
    }
    for (st, n) in states {
        runs_by_state.add(&[("state", st)], n);
    }
    let mut out = String::new();
    for f in [
        &runs_by_state,
        &info,
        &uptime,
        &edits,
        &blocks,
        &bytes,
        &drops,
        &lost,
        &arc_blocks,
        &arc_bytes,
        &fill,
        &readers,
        &waits,
    ] {
        f.write(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::{EdgeView, NodeView};
    use super::*;
    use crate::proto::RingGauge;

    fn run(state: &str) -> RunView {
        RunView {
            run: 3,
            uid: 0,
            user: "root".into(),
            state: state.into(),
            pipeline: "gen | count name=\"a b\"".into(),
            layout: "local:gen,count".into(),
            uptime_s: 1.5,
            rate: 0.0,
            edits: 1,
            last_edit: String::new(),
            nodes: vec![NodeView {
                label: "count:a".into(),
                name: "count".into(),
                space: "0".into(),
                blocks_in: 10,
                blocks_out: 9,
                drops: 1,
                ..Default::default()
            }],
            edges: vec![EdgeView {
                from: "gen".into(),
                to: "count:a".into(),
                blocks: 10,
                bytes: 640,
                ring: Some(RingGauge {
                    tags_used: 16,
                    tags_size: 64,
                    readers: 1,
                    writer_waits: 2,
                    ..Default::default()
                }),
            }],
            sites: vec![],
            host: "h".into(),
        }
    }

    #[test]
    fn families_have_help_type_and_escaped_labels() {
        let text = render(&[run("running (detached)"), run("finished (0)")]);
        assert!(text.contains("# HELP streamline_node_blocks_total "));
        assert!(text.contains("# TYPE streamline_node_blocks_total counter\n"));
        assert!(text.contains(
            "streamline_node_blocks_total{run=\"3\",user=\"root\",node=\"count:a\",filter=\"count\",space=\"0\",direction=\"in\"} 10\n"
        ));
        assert!(
            text.contains("pipeline=\"gen | count name=\\\"a b\\\"\""),
            "{text}"
        );
        assert!(text.contains("streamline_runs{state=\"finished\"} 1\n"));
        assert!(text.contains("streamline_runs{state=\"running\"} 1\n"));
        // The finished run has no node series: one sample per direction of the live one.
        assert_eq!(text.matches("streamline_node_blocks_total{").count(), 2);
        // Each family once, its samples right after its TYPE line.
        assert_eq!(
            text.matches("# TYPE streamline_node_drops_total").count(),
            1
        );
        // Arcs, and the channel of one between spaces.
        assert!(text.contains(
            "streamline_arc_blocks_total{run=\"3\",user=\"root\",from=\"gen\",to=\"count:a\"} 10\n"
        ));
        assert!(text.contains(
            "streamline_channel_fill_ratio{run=\"3\",user=\"root\",from=\"gen\",to=\"count:a\"} 0.2500\n"
        ));
        assert!(text.contains("# TYPE streamline_channel_writer_waits_total counter\n"));
    }

    #[test]
    fn a_sources_kernel_drops_are_a_counter_of_their_own() {
        let mut r = run("running (detached)");
        r.nodes.push(NodeView {
            label: "rx".into(),
            name: "rx".into(),
            space: "0".into(),
            source: true,
            lost: 5,
            ..Default::default()
        });
        let text = render(&[r]);
        assert!(text.contains("# TYPE streamline_node_lost_total counter\n"), "{text}");
        assert!(
            text.contains("streamline_node_lost_total{run=\"3\",user=\"root\",node=\"rx\",filter=\"rx\",space=\"0\"} 5\n"),
            "{text}"
        );
        // Only sources lose before they take: no series for the others.
        assert_eq!(text.matches("streamline_node_lost_total{").count(), 1, "{text}");
    }

    #[test]
    fn label_values_escape_what_the_format_reserves() {
        assert_eq!(escape_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }
}
