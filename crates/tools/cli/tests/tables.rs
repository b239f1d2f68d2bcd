//! The per-filter table is one table wherever it is read (issue 41, "Counters that do not
//! add up"): the one a run prints at its end, `--stats FILE` while the run runs,
//! `streamline attach`, `streamline ps`'s PLACEMENT and PipesFS's node directories and
//! their `.stats` all show one row per node the user wrote, labelled as in one space
//! (`deflate`, never `deflate@1`, `deflate~2@2`, `deflate~split`), in the order the
//! pipeline reads whatever the placement, with the spaces it runs in; every row adds up
//! (blocks out = in - drops + made - ended) and, once the blocks stop moving, a node's
//! blocks in are what the node before it sent. Real runs, a real daemon.

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::{Daemon, BIN};

const LIMIT: Duration = Duration::from_secs(60);

/// A table row: label, blocks in, blocks out, drops, made, ended, space.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    label: String,
    counts: [u64; 5],
    space: String,
}

impl Row {
    fn adds_up(&self) -> bool {
        let [i, o, d, m, e] = self.counts;
        o + d + e == i + m
    }
}

/// The rows of a table as the run's end and `attach` print it: a header starting
/// `filter`, then `LABEL BLOCKS_IN BYTES_IN BLOCKS_OUT BYTES_OUT DROPS MADE ENDED [TIME]
/// SPACE`.
fn rows(table: &[String]) -> Vec<Row> {
    table
        .iter()
        .filter(|l| !l.starts_with("filter ") && !l.starts_with('('))
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            if c.len() < 9 {
                return None;
            }
            let n = |k: usize| c[k].parse::<u64>().ok();
            Some(Row {
                label: c[0].to_string(),
                counts: [n(1)?, n(3)?, n(5)?, n(6)?, n(7)?],
                space: c.last()?.to_string(),
            })
        })
        .collect()
}

/// The problems of `rows` as a settled table of the linear pipeline `labels`: its
/// labels, in order, each row adding up, each node's blocks in what the one before sent.
fn settled_problems(rows: &[Row], labels: &[&str]) -> Vec<String> {
    let mut bad = Vec::new();
    let got: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    if got != labels {
        bad.push(format!("rows {got:?}, not {labels:?}"));
    }
    for r in rows {
        if !r.adds_up() {
            bad.push(format!("{r:?} does not add up"));
        }
    }
    for w in rows.windows(2) {
        if w[1].counts[0] != w[0].counts[1] {
            bad.push(format!(
                "{} took {} blocks, {} sent {}",
                w[1].label, w[1].counts[0], w[0].label, w[0].counts[1]
            ));
        }
    }
    bad
}

/// The final table's rows follow the pipeline, not the spaces (they came space by space:
/// `gen null count` for the first).
#[test]
fn the_final_tables_rows_follow_the_pipeline_in_every_placement() {
    for (p, labels, spaces) in [
        (
            "gen count=1000 | count space=2 | null space=1",
            &["gen", "count", "null"][..],
            &["0", "2", "1"][..],
        ),
        (
            "gen count=1000 | count space=p2 | null space=1",
            &["gen", "count", "null"],
            &["0", "p2", "1"],
        ),
        (
            "gen count=1000 | count space=2 | dedup space=1 | null",
            &["gen", "count", "dedup", "null"],
            &["0", "2", "1", "1"],
        ),
    ] {
        let o = Command::new(BIN)
            .args(["--socket", "none", "run", "--plan", "none", p])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{p}:\n{err}");
        let table: Vec<String> = err.lines().map(str::to_string).collect();
        let rows = rows(&table);
        let bad = settled_problems(&rows, labels);
        assert!(bad.is_empty(), "{p}: {bad:?}\n{err}");
        let got: Vec<&str> = rows.iter().map(|r| r.space.as_str()).collect();
        assert_eq!(got, spaces, "{p}:\n{err}");
    }
}

/// `--stats FILE` while the run runs: the final table's rows (a replicated filter one row,
/// `1,2`), not each space's nodes.
#[test]
fn stats_file_while_running_has_the_final_tables_rows() {
    let dir = std::env::temp_dir().join(format!("sl-tables-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stats = dir.join("stats.json");
    let mut c = common::spawn_run_stats(
        "gen count=100G size=1K rate=2000 | deflate space=1,2 | count space=p3",
        &stats,
    );
    let mut seen = String::new();
    common::wait_until("a running table with counts in --stats", LIMIT, || {
        seen = std::fs::read_to_string(&stats).unwrap_or_default();
        let v: serde_json::Value =
            serde_json::from_str(&seen).map_err(|e| format!("{e}: {seen}"))?;
        let nodes = v["nodes"].as_array().ok_or(seen.clone())?;
        let rows: Vec<(String, String, u64, u64, u64, u64, u64)> = nodes
            .iter()
            .map(|n| {
                let k = |x: &str| n[x].as_u64().unwrap_or(u64::MAX);
                (
                    n["label"].as_str().unwrap_or("?").to_string(),
                    n["space"].as_str().unwrap_or("?").to_string(),
                    k("blocks_in"),
                    k("blocks_out"),
                    k("drops"),
                    k("made"),
                    k("ended"),
                )
            })
            .collect();
        if v["running"] != true || rows.iter().all(|r| r.2 == 0) {
            return Err(seen.clone());
        }
        for r in &rows {
            assert!(
                !r.0.contains(['@', '~']) && !r.0.starts_with("__"),
                "an internal label: {seen}"
            );
        }
        // The process space's row comes with its first counters (within 200 ms).
        let shape: Vec<(&str, &str)> = rows.iter().map(|r| (r.0.as_str(), r.1.as_str())).collect();
        if shape != [("gen", "0"), ("deflate", "1,2"), ("count", "p3")] {
            return Err(seen.clone());
        }
        for r in &rows {
            assert_eq!(r.3 + r.4 + r.6, r.2 + r.5, "{r:?} does not add up: {seen}");
        }
        Ok(())
    });
    let _ = Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status();
    let _ = c.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `attach`, `ps` and PipesFS while a run runs: the final table's rows. The run's blocks
/// settle (gen ends; its last command waits for a file; the process space sends its
/// counters as its loop ends), so that the sums across rows hold exactly too.
#[test]
fn live_views_show_the_final_tables_rows() {
    let d = Daemon::start("tables-live", None);
    let go = d.dir.join("go");
    let p = format!(
        "gen count=2000 size=1K | deflate space=1,2 | count space=p3 | sh -c 'cat >/dev/null; until [ -e {} ]; do sleep 0.1; done'",
        go.display()
    );
    let o = d
        .cli()
        .args(["run", "--detach", "--plan", "none", &p])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let id: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    // attach: tables until one has settled (count took all 2000 blocks).
    let mut attach = d
        .cli()
        .args(["attach", &id.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(attach.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel::<Vec<String>>();
    std::thread::spawn(move || {
        let mut table = Vec::new();
        for l in out.lines() {
            let Ok(l) = l else { break };
            if l.starts_with("filter ") && !table.is_empty() {
                let _ = tx.send(std::mem::take(&mut table));
            }
            table.push(l);
        }
        let _ = tx.send(table);
    });
    let labels = ["gen", "deflate", "count", "sh"];
    let mut last = Vec::new();
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let t = rx
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .unwrap_or_else(|_| {
                panic!(
                    "no settled table from attach within {LIMIT:?}; last:\n{}",
                    last.join("\n")
                )
            });
        assert!(t[0].contains("space"), "{t:?}");
        let r = rows(&t);
        for row in &r {
            assert!(
                !row.label.contains(['@', '~']) && !row.label.starts_with("__"),
                "an internal label: {t:?}"
            );
            assert!(row.adds_up(), "{row:?} does not add up:\n{}", t.join("\n"));
        }
        last = t;
        // Settled up to count (sh, the last command, may still be taking its input).
        if r.iter()
            .find(|x| x.label == "count")
            .is_some_and(|c| c.counts[1] == 2000)
        {
            let got: Vec<&str> = r.iter().map(|x| x.label.as_str()).collect();
            assert_eq!(got, labels, "{}", last.join("\n"));
            let bad = settled_problems(&r[..3], &labels[..3]);
            assert!(bad.is_empty(), "{bad:?}\n{}", last.join("\n"));
            let spaces: Vec<&str> = r.iter().map(|x| x.space.as_str()).collect();
            assert_eq!(spaces, ["0", "1,2", "p3", "p3"], "{}", last.join("\n"));
            break;
        }
    }
    let _ = attach.kill();
    let _ = attach.wait();
    // ps: PLACEMENT says where the rows say (the copies of deflate on threads 1 and 2).
    let ps = d.ps();
    let line = ps
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
        .unwrap_or_else(|| panic!("run {id} not in ps:\n{ps}"));
    assert!(
        line.contains("local:gen t1:deflate t2:deflate p3:count,sh "),
        "{ps}"
    );
    // PipesFS: the replicated filter's directory is `deflate` (under gen), its .stats the
    // folded row; no directory is named for an internal node.
    let run = d.mount().join(id.to_string());
    let stats = std::fs::read_to_string(run.join("gen/deflate/.stats")).unwrap_or_else(|e| {
        panic!(
            "gen/deflate/.stats: {e}; the run's directory: {:?}",
            names(&run)
        )
    });
    let field = |k: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .unwrap_or_else(|| panic!("no {k} in\n{stats}"))
            .to_string()
    };
    assert_eq!(field("label"), "deflate", "{stats}");
    assert_eq!(field("placement"), "1,2", "{stats}");
    assert_eq!(field("blocks_in"), "2000", "{stats}");
    let all = names(&run);
    assert!(
        all.iter()
            .all(|n| !n.contains(['@', '~']) && !n.starts_with("__")),
        "internal nodes' directories: {all:?}"
    );
    std::fs::write(&go, b"").unwrap();
    let st = d.cli().args(["stop", &id.to_string()]).output().unwrap();
    assert!(st.status.success(), "{st:?}");
}

/// Every name under `dir` (directories followed, links not), as paths relative to it.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "all" || name == "all.pcap" {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
            v.push(name);
        }
    }
    v
}
