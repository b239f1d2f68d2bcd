//! Issue 33, "modes that follow the data", tried against a real daemon as an attacker
//! (uid 65534) would: data whose origin the daemon cannot see (standard input, a Unix
//! command's output) is readable by its client alone unless the client says `mode=`,
//! and secret parameters (`encrypt key=`, `xor KEY`) are never shown: not in `ps`,
//! PipesFS, the daemon's log, error messages, nor a process's command line.

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::daemon::{Daemon, PYTHON, RAW};

/// A 64-hex-digit key no other text contains.
fn key(tag: u8) -> String {
    format!("{:02x}{}", tag, "5ec7e7".repeat(10)) + &format!("{:08x}", std::process::id())[..2]
}

/// Run `steps` of the raw protocol client as uid 65534.
fn raw_as_nobody(d: &Daemon, steps: &[&str]) -> String {
    let out = common::daemon::as_nobody(PYTHON)
        .args([RAW])
        .arg(&d.socket)
        .args(steps)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What opening `path` for reading as uid 65534 gives: "opened" or the errno's name.
fn open_as_nobody(path: &Path) -> String {
    let out = common::daemon::as_nobody(PYTHON)
            .args(["-c"])
        .arg(
            "import errno, sys\ntry:\n    open(sys.argv[1], 'rb').close(); print('opened')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])",
        )
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn perm(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// The first run in root's `ps` with an id above `after`.
fn run_after(d: &Daemon, after: u64) -> u64 {
    let mut id = 0;
    common::wait_for("the run in ps", Duration::from_secs(20), || {
        id = d
            .ps()
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .find(|&i| i > after)
            .unwrap_or(0);
        id != 0
    });
    id
}

/// A file only root may read, holding `text`.
fn private_file(tag: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("sl-modes-{tag}-{}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// An attached run of root's fed on standard input from `input` (kept open, so the run
/// stays up until the returned child is killed).
fn run_fed(d: &Daemon, pipeline: &str, input: &Path) -> Child {
    let mut c = d
        .cli()
        .args(["run", "--plan", "none", "-q", pipeline])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    c.stdin
        .as_mut()
        .unwrap()
        .write_all(&std::fs::read(input).unwrap())
        .unwrap();
    c
}

fn stop(d: &Daemon, mut c: Child) {
    for id in d
        .ps()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
    {
        let _ = d.cli().args(["stop", id]).output();
    }
    drop(c.stdin.take());
    let _ = c.wait();
}

/// The exported ring `name` and the stream file under PipesFS `node` exist; the ring's mode.
fn wait_published(name: &str, node: &Path) -> u32 {
    let ring = PathBuf::from(format!("/dev/shm/streamline.{name}"));
    common::wait_for("the exported stream", Duration::from_secs(20), || {
        ring.exists()
    });
    common::wait_for("the node in PipesFS", Duration::from_secs(20), || {
        node.join("all").exists()
    });
    perm(&ring)
}

#[test]
fn a_0600_file_piped_in_by_root_stays_root_s_unless_root_says_mode() {
    let d = Daemon::start("modes-stdin", None);
    let pid = std::process::id();
    let file = private_file("stdin", "root's private line\n");

    // Without mode=: the ring and every PipesFS file of the run are root's alone.
    let name = format!("stdinpriv{pid}");
    let run = run_fed(
        &d,
        &format!("stdin split=lines | count name={name} export=yes"),
        &file,
    );
    let first = run_after(&d, 0);
    let node = d
        .mount()
        .join(first.to_string())
        .join(format!("stdin/count:{name}"));
    let ring = wait_published(&name, &node);
    assert_eq!(ring & 0o777, 0o600, "the exported ring of stdin data");
    let r = raw_as_nobody(&d, &["hello", &format!("stream:{name}")]);
    assert!(
        r.contains("EACCES") && r.contains("\"fds_received\": 0"),
        "uid 65534 opened root's stdin stream: {r}"
    );
    common::wait_for("the run's mode in PipesFS", Duration::from_secs(20), || {
        perm(&node.join("all")) == 0o400
    });
    let run_dir = d.mount().join(first.to_string());
    for f in [
        node.join("all"),
        node.join("all.pcap"),
        run_dir.join(".pipeline"),
        node.join(".filter"),
    ] {
        assert_eq!(perm(&f) & 0o044, 0, "{} is {:o}", f.display(), perm(&f));
        assert_eq!(open_as_nobody(&f), "EACCES", "{}", f.display());
    }
    stop(&d, run);

    // With mode=0644 on the source, root says what it piped in may be read.
    let name = format!("stdinpub{pid}");
    let run = run_fed(
        &d,
        &format!("stdin split=lines mode=0644 | count name={name} export=yes"),
        &file,
    );
    let id = run_after(&d, first);
    let node = d
        .mount()
        .join(id.to_string())
        .join(format!("stdin/count:{name}"));
    let ring = wait_published(&name, &node);
    assert_eq!(ring & 0o777, 0o644);
    let r = raw_as_nobody(&d, &["hello", &format!("stream:{name}")]);
    assert!(r.contains("\"fds_received\": 2"), "{r}");
    common::wait_for("the run's mode in PipesFS", Duration::from_secs(20), || {
        perm(&node.join("all")) == 0o444
    });
    assert_eq!(open_as_nobody(&node.join(".filter")), "opened");
    assert_eq!(
        open_as_nobody(&d.mount().join(id.to_string()).join(".pipeline")),
        "opened"
    );
    stop(&d, run);
    let _ = std::fs::remove_file(&file);
}

/// Start a detached run of root's; its id.
fn detached(d: &Daemon, pipeline: &str) -> u64 {
    let out = d
        .cli()
        .args(["run", "--detach", "-q", "--plan", "none", pipeline])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{pipeline}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn a_unix_command_s_output_is_the_clients_alone_unless_it_says_mode() {
    let d = Daemon::start("modes-unix", None);
    let pid = std::process::id();
    let file = private_file("unix", "root's private line\n");
    let f = file.display();
    // As a source, and in the middle of a pipeline fed by a synthetic source (what a
    // command reads is not what flows into it).
    for (tag, pipeline) in [
        (
            "src",
            format!("sh -c 'cat {f}; exec sleep 60' | count name=NAME export=yes"),
        ),
        (
            "mid",
            format!("gen count=1 | sh -c 'cat {f}; exec sleep 60' | count name=NAME export=yes"),
        ),
    ] {
        let name = format!("unix{tag}{pid}");
        let id = detached(&d, &pipeline.replace("NAME", &name));
        let ring = PathBuf::from(format!("/dev/shm/streamline.{name}"));
        common::wait_for("the exported stream", Duration::from_secs(20), || {
            ring.exists()
        });
        assert_eq!(perm(&ring) & 0o777, 0o600, "{tag}: the exported ring");
        let r = raw_as_nobody(&d, &["hello", &format!("stream:{name}")]);
        assert!(
            r.contains("EACCES") && r.contains("\"fds_received\": 0"),
            "{tag}: uid 65534 opened the command's stream: {r}"
        );
        let pipeline_file = d.mount().join(id.to_string()).join(".pipeline");
        common::wait_for("the run's mode in PipesFS", Duration::from_secs(20), || {
            perm(&pipeline_file) == 0o400
        });
        assert_eq!(open_as_nobody(&pipeline_file), "EACCES", "{tag}");
        let _ = d.cli().args(["stop", &id.to_string()]).output();

        // The client vouches for it at the export.
        let name = format!("unixpub{tag}{pid}");
        let id = detached(
            &d,
            &format!("{} mode=0644", pipeline.replace("NAME", &name)),
        );
        let ring = PathBuf::from(format!("/dev/shm/streamline.{name}"));
        common::wait_for("the exported stream", Duration::from_secs(20), || {
            ring.exists()
        });
        assert_eq!(perm(&ring) & 0o777, 0o644, "{tag}: said mode=0644");
        let r = raw_as_nobody(&d, &["hello", &format!("stream:{name}")]);
        assert!(r.contains("\"fds_received\": 2"), "{tag}: {r}");
        let _ = d.cli().args(["stop", &id.to_string()]).output();
    }
    let _ = std::fs::remove_file(&file);
}

/// Every process's command line (secrets on one are everyone's to read).
fn all_cmdlines() -> String {
    let mut s = String::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            s += &String::from_utf8_lossy(&c).replace('\0', " ");
            s.push('\n');
        }
    }
    s
}

fn assert_hidden(what: &str, text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!text.contains(s), "{what} shows the secret {s}:\n{text}");
    }
}

// Over 150 lines: one daemon and its runs with secrets, then every place a run is shown
// (ps, PipesFS, live edits, command lines, refusals, the log) checked for each secret.
#[test]
fn secret_options_are_never_shown() {
    let d = Daemon::start("modes-secret", None);
    let (k1, k2, k3, k4, k5) = (key(1), key(2), key(3), key(4), key(5));
    let x = format!("{:06x}", 0xa1b2c3 ^ (std::process::id() & 0xffff));
    let all = [k1.as_str(), &k2, &k3, &k4, &k5, &x];

    // Root's runs: keyed and positional; one in a process space of its own.
    let root_run = detached(
        &d,
        &format!("gen count=100G size=64 | encrypt key={k1} name=enc | xor {x} | count"),
    );
    let space_run = detached(
        &d,
        &format!("gen count=100G size=64 | encrypt key={k1} space=p1 | count"),
    );
    // Nobody's run.
    let out = d
        .cli_as_nobody()
        .args([
            "run",
            "--detach",
            "-q",
            "--plan",
            "none",
            &format!("gen count=100G size=64 | decrypt key={k2} | count"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // ps, as root and as the owner.
    let ps = d.ps();
    assert!(
        ps.contains("key=<secret>") && ps.contains("xor <secret>"),
        "{ps}"
    );
    assert_hidden("root's ps", &ps, &all);
    let ps_nobody =
        String::from_utf8_lossy(&d.cli_as_nobody().arg("ps").output().unwrap().stdout).into_owned();
    assert!(ps_nobody.contains("decrypt key=<secret>"), "{ps_nobody}");
    assert_hidden("nobody's ps", &ps_nobody, &all);

    // PipesFS: the run's text, each filter's text and options.
    let run_dir = d.mount().join(root_run.to_string());
    // The directory under `dir` whose name starts with `name` (labels carry the space).
    let child = |dir: &Path, name: &str| {
        std::fs::read_dir(dir).ok().and_then(|es| {
            es.flatten()
                .map(|e| e.path())
                .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(name))
        })
    };
    let mut enc = PathBuf::new();
    common::wait_for("encrypt in PipesFS", Duration::from_secs(20), || {
        let gen = child(&run_dir, "gen");
        match gen.and_then(|g| child(&g, "encrypt")) {
            Some(e) => {
                enc = e;
                enc.join(".options").exists()
            }
            None => false,
        }
    });
    let mut xor = PathBuf::new();
    common::wait_for("xor in PipesFS", Duration::from_secs(20), || {
        let out = Command::new("find")
            .arg(&run_dir)
            .args(["-maxdepth", "4", "-type", "d", "-name", "xor*"])
            .output()
            .unwrap();
        match String::from_utf8_lossy(&out.stdout).lines().next() {
            Some(p) => {
                xor = PathBuf::from(p);
                true
            }
            None => false,
        }
    });
    let mut shown = String::new();
    for f in [
        run_dir.join(".pipeline"),
        run_dir.join(".placement"),
        enc.join(".filter"),
        enc.join(".options"),
        enc.join(".stats"),
        xor.join(".filter"),
        xor.join(".options"),
        xor.join(".stats"),
    ] {
        shown += &std::fs::read_to_string(&f).unwrap();
    }
    assert!(shown.contains("key=<secret>"), "{shown}");
    assert_hidden("PipesFS", &shown, &all);

    // An option changed live, and a change refused (and logged).
    let o = d
        .cli()
        .args(["edit", &root_run.to_string(), &format!("set enc key={k3}")])
        .output()
        .unwrap();
    assert_hidden(
        "the edit's answer",
        &format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        &all,
    );
    let w = common::daemon::as_nobody("sh")
        .args(["-c"])
        .arg(format!(
            "echo key={k4} > '{}'",
            enc.join(".options").display()
        ))
        .output()
        .unwrap();
    assert!(!w.status.success(), "nobody changed root's option");
    assert_hidden(
        "the refused write",
        &String::from_utf8_lossy(&w.stderr),
        &all,
    );
    let shown = std::fs::read_to_string(enc.join(".options")).unwrap()
        + &std::fs::read_to_string(enc.join(".filter")).unwrap();
    assert_hidden("PipesFS after the edit", &shown, &all);

    // No process's command line (the process space's included).
    assert_hidden("a command line", &all_cmdlines(), &all);

    // A run that fails to build (in the worker: the value is not hex), refused by the
    // policy (in the daemon), or does not parse: the caret is there, the key is not.
    for (who, pipeline) in [
        ("root", format!("gen | encrypt key={k5}zz | count")),
        (
            "root",
            format!("gen | encrypt key={k5} | outfile /nonexistent/dir/x"),
        ),
        ("nobody", format!("rx dev=lo | encrypt key={k5} | count")),
        ("root", format!("gen | encrypt key={k5} | cuont")),
        ("root", format!("gen | encryt key={k5} | count")),
        ("root", format!("gen | xor {k5} | count name='")),
    ] {
        let mut c = if who == "root" {
            d.cli()
        } else {
            d.cli_as_nobody()
        };
        let out = c
            .args(["run", "-q", "--plan", "none", &pipeline])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{pipeline}: {err}");
        assert!(
            err.contains('^') || err.contains("error"),
            "{pipeline}: {err}"
        );
        assert_hidden(&format!("the error of `{pipeline}`"), &err, &all);
    }

    // The daemon's log.
    for r in [root_run, space_run] {
        let _ = d.cli().args(["stop", &r.to_string()]).output();
    }
    assert_hidden("the daemon's log", &d.log(), &all);
}
