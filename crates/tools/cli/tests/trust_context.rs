//! Issue 33, "the client's context": a run through the daemon behaves as the same run
//! stand-alone. Its working directory is the client's (relative paths resolve there, and
//! a directory the client may not enter fails the run, naming it), its Unix commands see
//! the client's environment (HOME, PATH, the client's own variables), the files it
//! creates get the client's umask, and the client's lowered resource limits hold. Each
//! test runs the client as uid 65534 against a real daemon whose working directory,
//! environment and umask differ from the client's.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::daemon::{Daemon, BIN};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A directory of the test's own under /tmp, open to uid 65534, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("slctx-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `streamline ARGS` as uid 65534 in `dir`, with `env` only (as a login shell would set
/// it), through `d`'s socket; `prefix` runs before it (e.g. `prlimit --fsize=N`).
fn nobody_in(d: &Daemon, dir: &Path, env: &[(&str, &str)], prefix: &[&str]) -> Command {
    let mut c = Command::new(prefix.first().copied().unwrap_or("setpriv"));
    if !prefix.is_empty() {
        c.args(&prefix[1..]).arg("setpriv");
    }
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(BIN)
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().copied())
        .env("STREAMLINE_SOCKET", &d.socket);
    c
}

#[test]
fn relative_paths_resolve_in_the_clients_directory_as_stand_alone() {
    let d = Daemon::start("ctxcwd", None);
    let s = Scratch::new("cwd");
    let sub = s.0.join("captures");
    std::fs::create_dir(&sub).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(SAMPLE, sub.join("sample.pcap")).unwrap();
    std::fs::set_permissions(
        sub.join("sample.pcap"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let p = "pcapin file=captures/sample.pcap | count";
    // The daemon works in the tests' directory (crates/tools/cli), where no `captures` is.
    assert!(!Path::new("captures").exists());
    let env = [("PATH", "/usr/bin:/bin")];
    let alone = nobody_in(&d, &s.0, &env, &[])
        .args(["--socket", "none", "run", "--plan", "none", p])
        .output()
        .unwrap();
    let via = nobody_in(&d, &s.0, &env, &[])
        .args(["run", "--plan", "none", p])
        .output()
        .unwrap();
    let ((_, ae), (_, ve)) = (text(&alone), text(&via));
    assert!(alone.status.success(), "stand-alone: {ae}");
    assert!(via.status.success(), "through the daemon: {ve}");
    assert!(common::count_of(&ae) > 0, "{ae}");
    assert_eq!(common::count_of(&ve), common::count_of(&ae), "{ve}\n{ae}");
}

#[test]
fn a_directory_the_client_may_not_enter_fails_the_run_naming_it() {
    let d = Daemon::start("ctxdeny", None);
    let s = Scratch::new("deny");
    let closed = s.0.join("closed");
    std::fs::create_dir(&closed).unwrap();
    // root's, and no one else may enter it (setpriv is started in it as root).
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = nobody_in(&d, &closed, &[("PATH", "/usr/bin:/bin")], &[])
        .args(["run", "gen count=3 | count"])
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("cannot enter the client's working directory")
            && err.contains(closed.to_str().unwrap())
            && err.contains("uid 65534")
            && err.contains("EACCES"),
        "{err}"
    );
}

#[test]
fn unix_commands_see_the_clients_directory_and_environment() {
    let d = Daemon::start("ctxenv", None);
    let s = Scratch::new("env");
    let home = s.0.join("home");
    std::fs::create_dir(&home).unwrap();
    // A command only the client's PATH has.
    let bin = s.0.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = bin.join("ctxprobe");
    std::fs::write(
        &probe,
        "#!/bin/sh\npwd\necho \"$HOME\"\necho \"$PATH\"\necho \"$CTX_MARKER\"\necho \"ld=$LD_PRELOAD\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("/usr/bin:/bin:{}", bin.display());
    let env = [
        ("PATH", path.as_str()),
        ("HOME", home.to_str().unwrap()),
        ("CTX_MARKER", "from-the-client"),
        // Never taken: the loader's variables do not travel.
        ("LD_PRELOAD", "/nonexistent/evil.so"),
    ];
    let out = nobody_in(&d, &s.0, &env, &[])
        .args(["run", "-q", "ctxprobe | stdout"])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}\n{e}");
    let lines: Vec<&str> = o.lines().collect();
    assert_eq!(
        lines,
        [
            s.0.to_str().unwrap(),
            home.to_str().unwrap(),
            path.as_str(),
            "from-the-client",
            "ld="
        ],
        "{e}"
    );
}

#[test]
fn files_the_run_creates_get_the_clients_umask() {
    let d = Daemon::start("ctxumask", None);
    let s = Scratch::new("umask");
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 077; exec \"$@\"")
        .arg("sh")
        .args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
        .arg(BIN)
        .args(["run", "-q", "gen count=10 size=100 | outfile file=made"])
        .current_dir(&s.0)
        .env("STREAMLINE_SOCKET", &d.socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let m = std::fs::metadata(s.0.join("made")).unwrap();
    assert_eq!(m.uid(), 65534);
    assert_eq!(m.mode() & 0o777, 0o600, "made with the daemon's umask");
}

#[test]
fn a_lowered_file_size_limit_holds_for_the_run() {
    let d = Daemon::start("ctxfsize", None);
    let s = Scratch::new("fsize");
    let limit = 64 * 1024;
    let out = nobody_in(
        &d,
        &s.0,
        &[("PATH", "/usr/bin:/bin")],
        &["prlimit", &format!("--fsize={limit}"), "--"],
    )
    .args(["run", "-q", "gen count=1000 size=1000 | outfile file=big"])
    .output()
    .unwrap();
    let size = std::fs::metadata(s.0.join("big")).map_or(0, |m| m.len());
    assert!(
        size <= limit,
        "{size} bytes written under a {limit}-byte RLIMIT_FSIZE: {:?}",
        text(&out)
    );
    assert!(
        !out.status.success(),
        "{size} bytes written, {:?}\ndaemon log:\n{}",
        text(&out),
        d.log()
    );
    // The same run without the limit writes it all (the limit, not the run, stopped it).
    let out = nobody_in(&d, &s.0, &[("PATH", "/usr/bin:/bin")], &[])
        .args(["run", "-q", "gen count=1000 size=1000 | outfile file=big"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(std::fs::metadata(s.0.join("big")).unwrap().len(), 1_000_000);
}

#[test]
fn a_lowered_descriptor_limit_holds_for_the_run() {
    let d = Daemon::start("ctxnofile", None);
    let s = Scratch::new("nofile");
    // The Unix command reports the limit it runs under.
    let out = nobody_in(
        &d,
        &s.0,
        &[("PATH", "/usr/bin:/bin")],
        &["prlimit", "--nofile=200:300", "--"],
    )
    .args(["run", "-q", "sh -c 'ulimit -Sn; ulimit -Hn' | stdout"])
    .output()
    .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{e}");
    assert_eq!(o.lines().collect::<Vec<_>>(), ["200", "300"], "{e}");
}

/// The daemon takes every name that is not a native filter for a command
/// (`lang::OrCommand`) and hands its worker that graph; the worker resolves the commands
/// on the client's PATH (`lang::recheck_commands`), so a name one letter from a native
/// filter's (`cout`, `count`) is a typo refused as stand-alone when the client has no such
/// program, and the client's program when it has one.
#[test]
fn a_command_the_daemon_checked_is_resolved_on_the_clients_path() {
    let d = Daemon::start("ctxcmd", None);
    let s = Scratch::new("cmd");
    let p = "cout | count";
    let plain = [("PATH", "/usr/bin:/bin")];
    let out = nobody_in(&d, &s.0, &plain, &[])
        .args(["run", "-q", p])
        .output()
        .unwrap();
    let (_, err) = text(&out);
    let alone = Command::new(BIN)
        .args(["run", "--socket", "none", "-q", p])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let (_, alone_err) = text(&alone);
    assert!(
        !out.status.success(),
        "a typo ran through the daemon: {err}"
    );
    assert!(
        err.contains("unknown filter 'cout'") && err.contains("count"),
        "through the daemon: {err}\nstand-alone: {alone_err}"
    );
    assert!(
        alone_err.contains("unknown filter 'cout'"),
        "stand-alone: {alone_err}"
    );
    // With a `cout` of the client's own on its PATH, the same text runs it.
    let bin = s.0.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("cout"), "#!/bin/sh\nprintf 'a\\nb\\nc\\n'\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(bin.join("cout"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = nobody_in(&d, &s.0, &[("PATH", &path)], &[])
        .args(["run", p])
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert!(out.status.success(), "{err}\ndaemon log:\n{}", d.log());
    assert!(
        common::count_of(&err) >= 1,
        "the client's cout wrote nothing: {err}"
    );
}
