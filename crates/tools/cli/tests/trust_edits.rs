//! Issue 33, "every change to a run is a typed, checked transaction": live edits tried as
//! uid 65534 against a real daemon, through the CLI, the raw protocol and PipesFS. An
//! edit that would make the run capture or send raw frames, or widen what a granted
//! template lets through, is refused with a named reason (the node, the templates) and an
//! errno; an edit after the template's end is applied, and then `ps`, `.pipeline` and the
//! stream mode follow the graph as it now is.

mod common;

use common::daemon::{Daemon, PYTHON, RAW};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn sh_as_nobody(cmd: &str) -> Output {
    common::daemon::as_nobody("bash")
        .args(["-c", cmd])
        .output()
        .unwrap()
}

/// A detached run of uid 65534's (one space, no sharing: labels as written).
fn detach_as_nobody(d: &Daemon, pipeline: &str) -> u64 {
    let out = d
        .cli_as_nobody()
        .args(["run", "--detach", "-q", "--no-share", "--plan", "none"])
        .arg(pipeline)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{pipeline}: {}", text(&out)))
}

fn edit_as_nobody(d: &Daemon, id: u64, e: &str) -> Output {
    d.cli_as_nobody()
        .args(["edit", &id.to_string(), e])
        .output()
        .unwrap()
}

/// The raw protocol client as uid 65534: hello, then one `edit` request with this body.
fn raw_edit_as_nobody(d: &Daemon, id: u64, edit: &str) -> serde_json::Value {
    let body = format!(r#"{{"id":2,"op":"edit","run":{id},"edit":{edit}}}"#);
    let out = common::daemon::as_nobody(PYTHON)
        .args([RAW])
        .arg(&d.socket)
        .args(["hello", &format!("send:{body}")])
        .output()
        .unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", text(&out));
    lines[1].clone()
}

/// The run's row in `ps` (as its owner sees it).
fn ps_row(d: &Daemon, id: u64) -> String {
    let out = d.cli_as_nobody().arg("ps").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
        .unwrap_or_else(|| panic!("no run {id} in ps: {}", text(&out)))
        .to_string()
}

fn stop(d: &Daemon, id: u64) {
    let _ = d.cli().args(["stop", &id.to_string()]).output();
    common::wait_for("the run's end", Duration::from_secs(30), || {
        !d.ps()
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().next() == Some(&id.to_string()))
    });
}

fn wait_exists(p: &Path) {
    common::wait_for(
        &format!("{} to appear", p.display()),
        Duration::from_secs(20),
        || p.exists(),
    );
}

/// Refused: not applied, and the message says so and names `names`.
fn assert_refused(o: &Output, what: &str, names: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("refused"),
        "{what} was not refused: {}",
        text(o)
    );
    for n in names {
        assert!(
            err.contains(n),
            "{what}: the refusal does not name {n}: {err}"
        );
    }
}

#[test]
fn without_a_policy_no_edit_adds_raw_capture_or_transmit() {
    let d = Daemon::start("te-none", None);
    let id = detach_as_nobody(&d, "gen count=100G size=64 | count name=c");
    let run = d.mount().join(id.to_string());
    wait_exists(&run.join("gen/count:c"));
    // The CLI.
    for (e, filter) in [
        ("insert after gen tx dev=lo", "tx"),
        ("replace gen rx dev=lo", "rx"),
        ("branch gen tx dev=lo", "tx"),
        ("replace count:c tx dev=lo", "tx"),
    ] {
        let o = edit_as_nobody(&d, id, e);
        assert_refused(&o, e, &[filter, "CAP_NET_RAW", "no policy file"]);
    }
    // The raw protocol: the text form and the typed form.
    for body in [
        r#""insert after gen tx dev=lo""#,
        r#"{"kind":"replace","node":"gen","filter":"rx dev=lo"}"#,
        r#"{"kind":"insert","at":"before","node":"count:c","filter":"tx dev=lo"}"#,
    ] {
        let r = raw_edit_as_nobody(&d, id, body);
        assert_eq!(r["reply"], "error", "{body}: {r}");
        assert_eq!(r["errno"], libc::EPERM, "{body}: {r}");
        let m = r["message"].as_str().unwrap();
        assert!(
            m.contains("refused") && m.contains("CAP_NET_RAW") && m.contains("only when it starts"),
            "{body}: {m}"
        );
    }
    // PipesFS: mkdir of a raw transmitter or capture under a filter.
    for dir in ["gen/tx dev=lo", "gen/count:c/rx,dev=lo"] {
        let o = sh_as_nobody(&format!("mkdir '{}'", run.join(dir).display()));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("Operation not permitted"),
            "mkdir {dir}: {}",
            text(&o)
        );
    }
    let log = d.log();
    assert!(
        log.contains("uid 65534 mkdir") && log.contains("(EPERM)") && log.contains("CAP_NET_RAW"),
        "{log}"
    );
    // Nothing changed: the run goes on with its graph as it was.
    let row = ps_row(&d, id);
    assert!(
        row.contains("gen count=100G size=64 | count name=c") && !row.contains("dev=lo"),
        "{row}"
    );
    assert!(!run.join("gen/tx").exists() && !run.join("gen/rx").exists());
    stop(&d, id);
}

const TEMPLATE: &str = r#"rx dev=lo | bpf "udp port 53""#;

fn granted() -> String {
    format!("[[grant]]\nusers = [\"65534\"]\ntemplate = '{TEMPLATE}'\n")
}

#[test]
fn with_a_granted_template_every_widening_edit_is_refused() {
    let d = Daemon::start("te-grant", Some(&granted()));
    let id = detach_as_nobody(&d, &format!("{TEMPLATE} | count | count name=tail"));
    let run = d.mount().join(id.to_string());
    let tail = run.join("rx/bpf/count/count:tail");
    wait_exists(&tail);
    // Through the CLI: each names the template; the node and errno as the case has it.
    for (e, names) in [
        // A new capture socket: EPERM, whatever the template would cover.
        ("replace rx rx dev=lo", &["rx", "only when it starts"][..]),
        ("set rx dev=lo", &["rx", "only when it starts"]),
        ("branch bpf rx dev=lo", &["rx", "only when it starts"]),
        // The template's filter changed, gone or bypassed: EACCES, naming rx.
        (r#"replace bpf bpf "udp""#, &["node rx", "follows none"]),
        ("set bpf expr=udp", &["node rx", "follows none"]),
        ("remove bpf", &["node rx", "follows none"]),
        ("insert after rx count name=x", &["node rx", "follows none"]),
        (
            "insert before bpf count name=x",
            &["node rx", "follows none"],
        ),
        ("branch rx count name=x", &["node rx", "follows none"]),
        ("connect rx count:tail", &["node rx", "follows none"]),
        ("move count:tail count rx", &["node rx", "follows none"]),
        ("move count bpf rx", &["node rx", "follows none"]),
    ] {
        let o = edit_as_nobody(&d, id, e);
        let mut want = names.to_vec();
        want.push("udp port 53");
        assert_refused(&o, e, &want);
    }
    // The raw protocol, typed.
    let r = raw_edit_as_nobody(
        &d,
        id,
        r#"{"kind":"replace","node":"rx","filter":"rx dev=lo"}"#,
    );
    assert_eq!(
        (r["reply"].as_str(), r["errno"].as_i64()),
        (Some("error"), Some(libc::EPERM as i64)),
        "{r}"
    );
    let r = raw_edit_as_nobody(&d, id, r#"{"kind":"remove","node":"bpf"}"#);
    assert_eq!(
        (r["reply"].as_str(), r["errno"].as_i64()),
        (Some("error"), Some(libc::EACCES as i64)),
        "{r}"
    );
    assert!(
        r["message"].as_str().unwrap().contains("udp port 53"),
        "{r}"
    );
    // PipesFS: a filter under rx, a link from rx, a move under rx, rmdir of the bpf.
    for (cmd, errno) in [
        (
            format!("mkdir '{}'", run.join("rx/count").display()),
            "Permission denied",
        ),
        (
            format!("ln -s x '{}'", run.join("rx/count:tail").display()),
            "Permission denied",
        ),
        (
            format!(
                "mv '{}' '{}'",
                tail.display(),
                run.join("rx/count:tail").display()
            ),
            "Permission denied",
        ),
        (
            format!("rmdir '{}'", run.join("rx/bpf").display()),
            "Permission denied",
        ),
        (
            format!(
                "echo expr=udp > '{}'",
                run.join("rx/bpf/.options").display()
            ),
            "Permission denied",
        ),
    ] {
        let o = sh_as_nobody(&cmd);
        assert!(
            !o.status.success() && String::from_utf8_lossy(&o.stderr).contains(errno),
            "{cmd}: {}",
            text(&o)
        );
    }
    // The graph is as it was: every refusal left it alone.
    assert!(ps_row(&d, id).contains(&format!("{TEMPLATE} | count | count name=tail")));
    // After the template's end, edits are the user's own business: applied.
    let o = edit_as_nobody(&d, id, "insert after count sample every=1");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .starts_with("applied `insert after count sample every=1`: sample"),
        "{}",
        text(&o)
    );
    let tail = run.join("rx/bpf/count/sample/count:tail");
    wait_exists(&tail);
    let o = sh_as_nobody(&format!("mkdir '{}'", tail.join("count name=z").display()));
    assert!(o.status.success(), "{}", text(&o));
    // ps and .pipeline show the graph as it now is.
    let now = format!("{TEMPLATE} | count | sample every=1 | count name=tail | count name=z");
    let row = ps_row(&d, id);
    assert!(row.contains(&now), "{row}");
    let pipeline = std::fs::read_to_string(run.join(".pipeline")).unwrap();
    assert_eq!(pipeline.trim(), now);
    // And still no widening after them.
    let o = edit_as_nobody(&d, id, "remove bpf");
    assert_refused(&o, "remove bpf", &["node rx", "udp port 53"]);
    stop(&d, id);
}

/// A copy of the sample capture that only uid 65534 may read.
fn private_pcap(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("sl-te-{tag}-{}.pcap", std::process::id()));
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap"),
        &p,
    )
    .unwrap();
    std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    p
}

fn perm(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o777
}

#[test]
fn after_an_edit_the_mode_follows_the_new_inputs() {
    let d = Daemon::start("te-mode", None);
    let secret = private_pcap("mode");
    // Paced, so the capture file lasts a while once it is the source.
    let id = detach_as_nobody(
        &d,
        "gen count=100G size=64 | shape rate=1MB/s | count name=m",
    );
    let run = d.mount().join(id.to_string());
    let all = run.join("gen/shape/count:m/all");
    wait_exists(&all);
    assert_eq!(perm(&all) & 0o044, 0o044, "gen's stream is for everyone");
    // The source becomes a file only uid 65534 may read: so do the run's streams.
    let e = format!("replace gen pcapin file={}", secret.display());
    let o = edit_as_nobody(&d, id, &e);
    assert!(o.status.success(), "{}", text(&o));
    let all = run.join("pcapin/shape/count:m/all");
    common::wait_for(
        "the stream's mode to follow the new source",
        Duration::from_secs(20),
        || all.exists() && perm(&all) & 0o077 == 0,
    );
    let row = ps_row(&d, id);
    assert!(
        row.contains(&format!(
            "pcapin file={} | shape rate=1MB/s | count name=m",
            secret.display()
        )),
        "{row}"
    );
    let pipeline = std::fs::read_to_string(run.join(".pipeline")).unwrap();
    assert!(pipeline.starts_with("pcapin file="), "{pipeline}");
    stop(&d, id);
    std::fs::remove_file(&secret).unwrap();
}
