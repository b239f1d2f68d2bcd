//! The layers of the workspace, checked against what cargo itself resolves on this machine
//! (`cargo tree`, offline): every crate lives in the folder of its layer
//! (`crates/<layer>/<crate>`), and a crate's normal dependencies are crates of its own layer
//! or of a layer below it: platform < core < plan < service < legacy < tools. Beside that
//! rule, a few edges that the rule allows are refused on purpose: the control plane builds
//! without the filter library and the kernel plane (what it needs of the library its caller
//! hands in, `control::Filters`), and the protocol and the libraries loaded into other
//! programs link neither the dataplane nor the language. Every crate's own edges are written
//! down in one table (`ALLOWED`, each row saying why), checked edge by edge against cargo,
//! and the table's closure keeps the crates of `NEVER` out of reach: the daemon reads the
//! filter catalog and links neither the dataplane nor the filters (its worker does), the
//! catalog is a leaf on the language, the protocol a leaf on the rings.

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

/// The layers, lowest first: a crate's folder under `crates/` names its layer.
const LAYERS: &[&str] = &["platform", "core", "plan", "service", "legacy", "tools"];

/// The workspace's own crates and the folder each lives in, from `cargo metadata`'s member
/// list as `cargo tree` prints it: (name, path).
fn workspace_crates() -> Vec<(String, String)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(&cargo)
        .args([
            "tree",
            "--offline",
            "--manifest-path",
            manifest,
            "--workspace",
            "-e",
            "normal",
            "--depth",
            "0",
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
    let crates: Vec<_> = text.lines().filter_map(local_crate).collect();
    assert!(
        crates.len() >= 14,
        "cargo tree listed fewer workspace crates than exist:\n{text}"
    );
    crates
}

/// `name vX.Y.Z (/path/to/crate)` of a crate of this workspace: (name, path).
fn local_crate(line: &str) -> Option<(String, String)> {
    let (name, rest) = line.split_once(' ')?;
    let path = rest.split_once(" (")?.1.split(')').next()?;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../..");
    let root = std::fs::canonicalize(root).expect("the workspace root exists");
    let rel = std::path::Path::new(path).strip_prefix(&root).ok()?;
    Some((name.to_string(), rel.to_string_lossy().into_owned()))
}

/// The layer a crate's path names: `crates/<layer>/<crate>`.
fn layer_of(name: &str, path: &str) -> usize {
    let parts: Vec<_> = path.split('/').collect();
    let layer = match parts.as_slice() {
        ["crates", layer, _crate] => *layer,
        _ => panic!("crate {name} lives at {path}, not at crates/<layer>/<crate>"),
    };
    LAYERS.iter().position(|l| *l == layer).unwrap_or_else(|| {
        panic!("crate {name} lives in {path}: `{layer}` is none of the layers {LAYERS:?}")
    })
}

#[test]
fn every_crate_depends_only_on_its_own_layer_or_those_below() {
    let crates = workspace_crates();
    let layer: std::collections::BTreeMap<_, _> = crates
        .iter()
        .map(|(n, p)| (n.clone(), (layer_of(n, p), p.clone())))
        .collect();
    let mut climbs = Vec::new();
    for (name, (own, _)) in &layer {
        let (deps, text) = normal_dependencies_direct(name);
        assert!(
            deps.contains(name),
            "cargo tree did not list {name}:\n{text}"
        );
        for dep in deps.iter().filter(|d| *d != name) {
            if let Some((theirs, path)) = layer.get(dep) {
                if theirs > own {
                    climbs.push(format!(
                        "{name} ({}) depends on {dep} ({}, {path})",
                        LAYERS[*own], LAYERS[*theirs]
                    ));
                }
            }
        }
    }
    assert!(
        climbs.is_empty(),
        "dependencies that climb a layer (order {LAYERS:?}):\n{}",
        climbs.join("\n")
    );
}

/// A crate's direct normal dependencies (itself included).
fn normal_dependencies_direct(package: &str) -> (BTreeSet<String>, String) {
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
            "--depth",
            "1",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} tree: {e}"));
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    let crates = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    (crates, text)
}

/// What each crate of the workspace may depend on among the workspace's crates (its
/// normal dependencies; dev-dependencies are free), with why. A crate missing here, or a
/// row naming no crate, fails the test as much as an edge the row does not allow: the
/// table is the layering as written down, checked against what cargo resolves.
const ALLOWED: &[(&str, &[&str], &str)] = &[
    ("beltway", &[], "the shared rings: a leaf"),
    ("kernel", &[], "what runs in the kernel: a leaf"),
    ("shape", &["beltway"], "process shaping, on beltway's shared memory"),
    ("protocol", &["beltway"], "a leaf above the platform: wire types only, no dataplane, no language"),
    ("lang", &["protocol"], "the language; `protocol` only for the edit language's wire form (its `wire` feature)"),
    ("catalog", &["lang"], "the filters as data: a leaf on the language, read without the filters or the kernel plane"),
    ("dataplane", &["beltway", "lang", "catalog", "protocol"], "the computation plane"),
    ("filters", &["kernel", "dataplane", "catalog", "lang", "shape", "protocol"], "the filters' code and constructors (protocol: the wire form of a reader's classic BPF program, `Filter::readers_want`)"),
    ("control", &["lang", "catalog", "dataplane"], "the control plane: the catalog handed in, never the filters or the kernel plane"),
    ("runplan", &["lang", "dataplane", "filters", "control", "kernel", "beltway", "protocol"], "a run derived once"),
    ("daemon", &["lang", "catalog", "protocol", "kernel", "beltway", "shape"], "streamlined: reads the catalog, never links the dataplane or the filters (the worker does)"),
    ("worker", &["daemon", "runplan", "dataplane", "filters", "kernel", "beltway"], "streamline-worker: runs a plan for the daemon (the filters, lent sockets and pins of a run)"),
    ("preload", &["beltway", "shape"], "loaded into other programs"),
    ("compat", &["protocol", "beltway"], "loaded into other programs: wire types, rings"),
    ("capi", &["protocol", "beltway"], "loaded into other programs: wire types, rings"),
    ("streamline", &["lang", "dataplane", "beltway", "filters", "catalog", "control", "runplan", "daemon", "kernel", "shape"], "the command"),
    ("streamline-bench", &["beltway", "preload", "shape", "dataplane", "filters", "catalog", "kernel", "lang", "control", "daemon"], "the benchmarks"),
];

/// Crates a crate must never reach, however indirectly: checked on the table's closure
/// (so a row that would let them in through another crate fails here, before cargo does).
const NEVER: &[(&str, &[&str])] = &[
    ("daemon", &["dataplane", "filters", "runplan", "control"]),
    ("catalog", &["dataplane", "filters", "kernel", "control"]),
    (
        "protocol",
        &[
            "dataplane",
            "lang",
            "catalog",
            "filters",
            "kernel",
            "control",
        ],
    ),
    ("control", &["filters", "kernel"]),
    ("capi", &["dataplane", "lang", "catalog", "filters"]),
    ("compat", &["dataplane", "lang", "catalog", "filters"]),
];

fn row(name: &str) -> Option<&'static (&'static str, &'static [&'static str], &'static str)> {
    ALLOWED.iter().find(|(n, _, _)| *n == name)
}

/// Every crate's direct normal dependencies among the workspace's crates are in its row of
/// [`ALLOWED`]; the failure names each offending edge.
#[test]
fn every_crate_depends_only_on_what_its_row_allows() {
    let crates = workspace_crates();
    let names: BTreeSet<String> = crates.iter().map(|(n, _)| n.clone()).collect();
    let mut wrong = Vec::new();
    for (name, _, _) in ALLOWED {
        if !names.contains(*name) {
            wrong.push(format!(
                "the table has a row for {name}, which is no crate of the workspace"
            ));
        }
    }
    for name in &names {
        let Some((_, allowed, why)) = row(name) else {
            wrong.push(format!(
                "{name} has no row in ALLOWED: say what it may depend on"
            ));
            continue;
        };
        let (deps, text) = normal_dependencies_direct(name);
        assert!(
            deps.contains(name),
            "cargo tree did not list {name}:\n{text}"
        );
        for dep in deps.iter().filter(|d| *d != name && names.contains(*d)) {
            if !allowed.contains(&dep.as_str()) {
                wrong.push(format!(
                    "{name} -> {dep}: not allowed ({name}: {why}; it may depend on {allowed:?})"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies the layering does not allow:\n{}",
        wrong.join("\n")
    );
}

/// The table's closure keeps the crates of [`NEVER`] out of reach.
#[test]
fn the_table_keeps_each_crate_from_what_it_must_never_reach() {
    let mut wrong = Vec::new();
    for (name, banned) in NEVER {
        // Breadth first over the table, remembering how each crate was reached.
        let mut via: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
        let mut todo = vec![*name];
        while let Some(c) = todo.pop() {
            let (_, deps, _) = row(c).unwrap_or_else(|| panic!("no row for {c} in ALLOWED"));
            for d in deps.iter() {
                if *d != *name && !via.contains_key(d) {
                    via.insert(d, c);
                    todo.push(d);
                }
            }
        }
        for b in banned.iter().filter(|b| via.contains_key(*b)) {
            let mut path = vec![*b];
            while let Some(p) = via.get(path.last().unwrap()) {
                path.push(p);
                if p == name {
                    break;
                }
            }
            path.reverse();
            wrong.push(format!("{name} reaches {b}: {}", path.join(" -> ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "the table lets crates reach what they must not:\n{}",
        wrong.join("\n")
    );
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
        let banned: Vec<_> = [
            "dataplane",
            "lang",
            "filters",
            "kernel",
            "control",
            "daemon",
        ]
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

/// The daemon's worker (`streamline-worker`, a package of its own) runs a plan with the
/// plan library and the dataplane: neither it nor the daemon links the command.
#[test]
fn the_daemon_and_its_worker_link_the_plan_library_not_the_command() {
    let (crates, text) = normal_dependencies("worker");
    assert!(
        ["worker", "daemon", "runplan", "dataplane"]
            .iter()
            .all(|c| crates.contains(*c)),
        "cargo tree did not list the worker's own dependencies:\n{text}"
    );
    for package in ["daemon", "worker"] {
        let (crates, text) = normal_dependencies(package);
        assert!(
            !crates.contains("streamline"),
            "{package} pulls in the `streamline` command:\n{text}"
        );
    }
}
