//! `streamline plan` end to end: the real binary on a fixed system model (the control
//! crate's golden JSON) and on this machine.

use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn system(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../control/tests/golden/systems/{name}.json"))
}

fn plan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).arg("plan").args(args).output().expect("run streamline plan");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn canonical_plan_on_a_fixed_system() {
    let sys = system("dual");
    let (code, out, err) = plan(&["--system", sys.to_str().unwrap(), "--canonical", "rx | bpf \"tcp\" | null"]);
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
    let (code, out, err) = plan(&["--system", sys.to_str().unwrap(), "--compare", "rx | grep x | count | null"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("plan by ilp (HiGHS)") && out.contains("plan by push-down heuristic"), "{out}");
    assert!(out.contains("variables") && out.contains("constraints") && out.contains("solved in"), "{out}");
    assert!(out.contains("heuristic costs 1.50x the optimizer's"), "{out}");
}

#[test]
fn dot_output_and_errors() {
    let sys = system("quad");
    let dir = std::env::temp_dir().join(format!("sl-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dot = dir.join("p.dot");
    let (code, _, err) = plan(&["--system", sys.to_str().unwrap(), "--dot", dot.to_str().unwrap(), "rx | bpf \"udp\" | dns | null"]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&dot).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(text.starts_with("digraph plan {") && text.contains("kernel@cpu0") && text.contains("n1 -> n2"), "{text}");

    let (code, _, err) = plan(&["--system", sys.to_str().unwrap(), "rx | dns space=kernel | null"]);
    assert_eq!(code, 2);
    assert!(err.contains("'dns'") && err.contains("pinned to space=kernel"), "{err}");
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
    assert!(out.starts_with("system: ") && out.contains("thread@cpu0"), "{out}");
}
