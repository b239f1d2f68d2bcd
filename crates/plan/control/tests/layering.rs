//! The control plane builds without the filter library and the kernel plane: what it
//! needs of the library its caller hands in (`control::Filters`). This asks cargo itself
//! for the crates control's normal dependencies pull in on this machine
//! (`cargo tree -p control -e normal`, offline).

use std::collections::BTreeSet;
use std::process::Command;

/// Crates that bring the kernel plane (libbpf, libpcap, libxdp) or the filter library.
const BANNED: &[&str] = &[
    "filters",
    "kernel",
    "pcap",
    "libbpf-rs",
    "libbpf-sys",
    "libxdp-sys",
    "xsk-rs",
];

/// The crates `package`'s normal dependencies pull in (itself included), from cargo
/// itself, with the text cargo printed.
fn normal_dependencies(package: &str) -> (BTreeSet<String>, String) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(&cargo)
        .args([
            "tree",
            "--offline",
            "--manifest-path",
            manifest,
            "-p",
            package,
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} tree: {e}"));
    assert!(
        out.status.success(),
        "cargo tree failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    // One package a line: `name vX.Y.Z [(path)] [(*)]`.
    let crates = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    (crates, text)
}

#[test]
fn control_s_normal_dependencies_reach_neither_filters_nor_the_kernel_plane() {
    let (crates, text) = normal_dependencies("control");
    assert!(
        ["control", "dataplane", "lang"]
            .iter()
            .all(|c| crates.contains(*c)),
        "cargo tree did not list control's own dependencies:\n{text}"
    );
    let banned: Vec<_> = BANNED.iter().filter(|b| crates.contains(**b)).collect();
    assert!(banned.is_empty(), "control's normal dependencies pull in {banned:?} (hand the library in with control::Filters instead):\n{text}");
}

/// The protocol is a leaf above the platform crates, and the libraries loaded into other
/// programs (libstreamline.so, the libpcap stand-in) link it without the dataplane or the
/// language: what they share with the daemon is wire types only.
#[test]
fn the_protocol_and_the_libraries_in_other_programs_link_neither_dataplane_nor_lang() {
    for package in ["protocol", "capi", "compat"] {
        let (crates, text) = normal_dependencies(package);
        assert!(
            crates.contains(package) && (package == "protocol" || crates.contains("protocol")),
            "cargo tree did not list {package}'s own dependencies:\n{text}"
        );
        let banned: Vec<_> = ["dataplane", "lang", "filters", "kernel", "control", "daemon"]
            .into_iter()
            .filter(|b| crates.contains(*b))
            .collect();
        assert!(
            banned.is_empty(),
            "{package}'s normal dependencies pull in {banned:?} (wire types belong in protocol):\n{text}"
        );
    }
}

/// A run is derived in one library (`runplan`, the plan layer): the command and the
/// daemon's worker call it, it calls neither of them.
#[test]
fn the_run_plan_links_neither_the_command_nor_the_daemon() {
    let (crates, text) = normal_dependencies("runplan");
    assert!(
        ["runplan", "control", "dataplane", "lang", "filters"]
            .iter()
            .all(|c| crates.contains(*c)),
        "cargo tree did not list runplan's own dependencies:\n{text}"
    );
    let banned: Vec<_> = ["streamline", "daemon"]
        .into_iter()
        .filter(|b| crates.contains(*b))
        .collect();
    assert!(
        banned.is_empty(),
        "runplan's normal dependencies pull in {banned:?} (the plan layer sits below the command and the daemon):\n{text}"
    );
}

/// The daemon's worker (`streamline-worker`, a binary of the daemon package) runs a plan
/// with the plan library and the dataplane: neither it nor the daemon links the command.
#[test]
fn the_daemon_and_its_worker_link_the_plan_library_not_the_command() {
    let (crates, text) = normal_dependencies("daemon");
    assert!(
        ["daemon", "runplan", "dataplane"]
            .iter()
            .all(|c| crates.contains(*c)),
        "cargo tree did not list the daemon package's own dependencies:\n{text}"
    );
    assert!(
        !crates.contains("streamline"),
        "the daemon package (and so its worker) pulls in the `streamline` command:\n{text}"
    );
}
