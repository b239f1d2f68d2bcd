//! Golden tests: a fixed request and a fixed system model in, the chosen plan out,
//! printed canonically. Each case is one file in tests/golden/*.plan:
//!
//! ```text
//! system: dual
//! rate: 100000        (optional, blocks/s at each source)
//! pipeline: rx | bpf "tcp" | null
//! --- ilp
//! <canonical plan>
//! --- heuristic
//! <canonical plan>
//! ```
//!
//! `UPDATE_GOLDEN=1 cargo test -p control --test golden` rewrites the expected parts;
//! review the diff before committing it.

mod common;

use control::planner::Method;
use control::{Load, Planner};

fn render(system: &str, rate: f64, pipeline: &str) -> String {
    let mut p = Planner::new(common::system(system), common::filters());
    p.load = Load {
        blocks_per_sec: rate,
        ..Load::default()
    };
    let ilp = p
        .plan(pipeline, Method::Optimal)
        .unwrap_or_else(|e| panic!("{pipeline}: {e}"));
    let heu = p
        .plan(pipeline, Method::Heuristic)
        .unwrap_or_else(|e| panic!("{pipeline}: {e}"));
    assert_eq!(ilp.plan.stats.method, "ilp (HiGHS)");
    format!(
        "--- ilp\n{}--- heuristic\n{}",
        ilp.plan.canonical(),
        heu.plan.canonical()
    )
}

#[test]
fn golden_plans() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut files: Vec<_> = std::fs::read_dir(common::dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "plan"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "golden cases missing");
    let mut failures = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let (head, expected) = match text.find("--- ilp\n") {
            Some(i) => text.split_at(i),
            None => (text.as_str(), ""),
        };
        let field = |k: &str| {
            head.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}: ")))
                .map(str::to_string)
        };
        let system = field("system").expect("system: line");
        let pipeline = field("pipeline").expect("pipeline: line");
        let rate = field("rate").map_or(100_000.0, |r| r.parse().unwrap());
        let got = render(&system, rate, &pipeline);
        if update {
            std::fs::write(f, format!("{head}{got}")).unwrap();
        } else if got != expected {
            failures.push(format!(
                "{}:\n--- expected\n{expected}\n--- got\n{got}",
                f.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
