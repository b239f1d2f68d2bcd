//! `streamline plan` end to end: the real binary on a fixed system model (the control
//! crate's golden JSON) and on this machine.

use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn system(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../../plan/control/tests/golden/systems/{name}.json"
    ))
}

fn plan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("plan")
        .args(args)
        .output()
        .expect("run streamline plan");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn canonical_plan_on_a_fixed_system() {
    let sys = system("dual");
    let (code, out, err) = plan(&[
        "--system",
        sys.to_str().unwrap(),
        "--canonical",
        "rx | bpf \"tcp\" | null",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "0 rx = af-packet in kernel@cpu0\n1 bpf tcp = cbpf-socket in kernel@cpu0\n2 null = native in thread@cpu0\n\
         0 -> 1 : call\n1 -> 2 : kernel->user-ring\ncost 70350000\n"
    );
}

#[test]
fn compare_shows_both_plans_and_the_ratio() {
    let sys = system("dual");
    let (code, out, err) = plan(&[
        "--system",
        sys.to_str().unwrap(),
        "--compare",
        "rx | grep x | count | null",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("plan by ilp (HiGHS)") && out.contains("plan by push-down heuristic"),
        "{out}"
    );
    assert!(
        out.contains("variables") && out.contains("constraints") && out.contains("solved in"),
        "{out}"
    );
    assert!(
        out.contains("heuristic costs 1.50x the optimizer's"),
        "{out}"
    );
}

#[test]
fn dot_output_and_errors() {
    let sys = system("quad");
    let dir = std::env::temp_dir().join(format!("sl-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dot = dir.join("p.dot");
    let (code, _, err) = plan(&[
        "--system",
        sys.to_str().unwrap(),
        "--dot",
        dot.to_str().unwrap(),
        "rx | bpf \"udp\" | dns | null",
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&dot).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        text.starts_with("digraph plan {")
            && text.contains("kernel@cpu0")
            && text.contains("n1 -> n2"),
        "{text}"
    );

    let (code, _, err) = plan(&[
        "--system",
        sys.to_str().unwrap(),
        "rx | dns space=kernel | null",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("'dns'") && err.contains("pinned to space=kernel"),
        "{err}"
    );
    let (code, _, err) = plan(&["--system", "/nonexistent.json", "rx | null"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent.json"), "{err}");
    let (code, _, err) = plan(&["--system", sys.to_str().unwrap(), "rx | ipp"]);
    assert_eq!(code, 2);
    assert!(err.contains("ipp") && err.contains('^'), "{err}");
}

#[test]
fn discovers_this_machine() {
    let (code, out, err) = plan(&["gen | strip | null"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("system: ") && out.contains("thread@cpu0"),
        "{out}"
    );
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("run")
        .args(args)
        .output()
        .expect("run streamline run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn count_line(err: &str) -> String {
    err.lines()
        .find(|l| l.starts_with("count: "))
        .unwrap_or_else(|| panic!("no count line:\n{err}"))
        .to_string()
}

/// Rows of the per-filter table whose label starts with `name@`.
/// The spaces (the table's last column) of the rows of filter `name` that did not run
/// in space 0 alone (a node the user wrote has one row, `1,2` for its replicas).
fn rows<'a>(err: &'a str, name: &str) -> Vec<&'a str> {
    err.lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w == name || w.starts_with(&format!("{name}#")))
        })
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| *s != "0")
        .collect()
}

#[test]
fn run_uses_the_plan_and_spreads_a_heavy_filter_over_the_cpus() {
    let pipeline = "gen count=3000 size=4096 | deflate | count";
    let (code, planned) = run(&["--rate", "400000", "--bytes", "4096", pipeline]);
    assert_eq!(code, 0, "{planned}");
    let (code, written) = run(&["--plan", "none", pipeline]);
    assert_eq!(code, 0, "{written}");
    assert_eq!(
        count_line(&planned),
        count_line(&written),
        "the placement changes where, not what"
    );
    assert!(
        !written.contains("plan ("),
        "--plan none plans nothing:\n{written}"
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let line = planned
        .lines()
        .find(|l| l.starts_with("plan ("))
        .unwrap_or_else(|| panic!("no plan line:\n{planned}"));
    assert!(line.contains("ilp (HiGHS)"), "{line}");
    if cpus >= 2 {
        // One CPU cannot deflate 400k blocks/s: the plan copies deflate onto the CPUs.
        let deflate = line
            .split("; ")
            .find(|p| p.starts_with("deflate space="))
            .unwrap_or_else(|| panic!("{line}"));
        assert!(deflate.contains(','), "deflate replicated: {line}");
        assert!(
            rows(&planned, "deflate").iter().any(|s| s.contains(',')),
            "the table shows deflate's spaces, one per copy:\n{planned}"
        );
    }
    let (code, heur) = run(&[
        "--plan",
        "heuristic",
        "--rate",
        "400000",
        "--bytes",
        "4096",
        pipeline,
    ]);
    assert_eq!(code, 0, "{heur}");
    assert!(heur.contains("plan (push-down heuristic"), "{heur}");
    assert_eq!(count_line(&heur), count_line(&written));
}

#[test]
fn run_keeps_light_pipelines_in_one_space_and_user_placements_as_written() {
    let cap = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");
    let (code, err) = run(&[&format!("pcapin file={cap} | tcp | count")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !err.contains("plan ("),
        "a light pipeline runs where it is:\n{err}"
    );
    assert!(
        rows(&err, "tcp").is_empty(),
        "one space: every row in space 0:\n{err}"
    );
    // The user's own placement wins over any plan, even at a rate one CPU cannot carry.
    let (code, err) = run(&[
        "--rate",
        "400000",
        "--bytes",
        "4096",
        "gen count=500 size=4096 | deflate space=p1 | count",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("plan ("), "{err}");
    assert_eq!(rows(&err, "deflate"), vec!["p1"], "{err}");
}

#[test]
fn run_translates_the_planners_own_pins() {
    // `space=process` is the planner's word; the run puts tcp in a process space.
    let (code, err) = run(&["gen count=200 | tcp space=process | count"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        rows(&err, "tcp").iter().any(|r| r.starts_with('p')),
        "{err}"
    );
    assert_eq!(
        count_line(&err),
        "count: 0 blocks, 0 bytes",
        "gen's blocks are not TCP"
    );
    let (code, err) = run(&["--rate", "0", "gen | count"]);
    assert_eq!(code, 2);
    assert!(err.contains("--rate must be positive"), "{err}");
}

/// The rate in `planned for RATE blocks/s` (what `streamline run` prints, and `streamline
/// plan`'s note, when the offered load does not fit), if it says so.
fn planned_for(text: &str) -> Option<String> {
    let (_, rest) = text.split_once("planned for ")?;
    Some(rest.split_once(" blocks/s")?.0.to_string())
}

/// `streamline plan` derives its plan as `streamline run` does (`runplan::derive`): at a
/// load the machine cannot carry (deflating 400k blocks of 4 KiB a second), both plan for
/// the same highest rate that fits, instead of `plan` refusing what `run` places.
#[test]
fn plan_and_run_agree_on_a_load_that_does_not_fit() {
    let pipeline = "gen count=2000 size=4096 | deflate | count";
    let load = ["--rate", "400000", "--bytes", "4096"];
    let (code, out, err) = plan(&[&load[..], &[pipeline]].concat());
    assert_eq!(code, 0, "plan refused what run places:\n{out}{err}");
    let (code, ran) = run(&[&load[..], &[pipeline]].concat());
    assert_eq!(code, 0, "{ran}");
    let line = ran
        .lines()
        .find(|l| l.starts_with("plan ("))
        .unwrap_or_else(|| panic!("no plan line:\n{ran}"));
    let note = out.lines().find(|l| l.starts_with("note: the offered"));
    assert_eq!(
        note.and_then(planned_for),
        planned_for(line),
        "plan says {note:?}, run placed {line}"
    );
}
