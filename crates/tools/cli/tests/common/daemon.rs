//! A `streamlined` of a test's own (socket and PipesFS mount in a directory of its own),
//! and the `streamline` command as its client, as root or as uid 65534.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_streamline");
pub const RAW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/rawclient.py");
/// The system's Python (Debian's python3 package), reachable by every user.
pub const PYTHON: &str = "/usr/bin/python3";

pub fn daemon_bin() -> PathBuf {
    let p = Path::new(BIN).with_file_name("streamlined");
    assert!(p.exists(), "{} is missing: build the daemon (`cargo build -p daemon`; `cargo test --workspace` builds it)", p.display());
    // The program it starts for each run, found beside it (a package of its own).
    let w = p.with_file_name("streamline-worker");
    assert!(w.exists(), "{} is missing: build the daemon's worker (`cargo build -p worker`; `cargo test --workspace` builds it)", w.display());
    p
}

pub fn require_root(why: &str) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?")
        .to_string();
    assert_eq!(euid, "0", "these tests need root ({why})");
}

/// `program` to be run as uid/gid 65534 with no supplementary groups (util-linux setpriv;
/// add its arguments).
#[allow(dead_code)]
pub fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(program);
    c
}

/// A daemon on a socket of its own, stopped (SIGTERM) when dropped.
pub struct Daemon {
    pub child: Option<Child>,
    pub socket: PathBuf,
    pub dir: PathBuf,
}

impl Daemon {
    pub fn start(tag: &str, policy: Option<&str>) -> Daemon {
        Daemon::start_with(tag, policy, &[])
    }

    /// [`Daemon::start`] with more arguments for `streamlined` (`--http 127.0.0.1:0`).
    pub fn start_with(tag: &str, policy: Option<&str>, extra: &[&str]) -> Daemon {
        require_root("the daemon runs captures and takes its clients' identities");
        let dir = std::env::temp_dir().join(format!("sld-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Clients as uid 65534 must reach the socket.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let socket = dir.join("control");
        // PipesFS is mounted by every daemon of the tests.
        assert!(
            Path::new("/dev/fuse").exists(),
            "these tests need /dev/fuse (FUSE): the daemon mounts PipesFS"
        );
        assert!(
            Command::new("fusermount3")
                .arg("-V")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            "these tests need fusermount3 (Debian package fuse3; scripts/setup installs it)"
        );
        let mut cmd = Command::new(daemon_bin());
        cmd.arg("--socket")
            .arg(&socket)
            .arg("--mount")
            .arg(dir.join("pipes"))
            .arg("--foreground")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap());
        if let Some(text) = policy {
            let p = dir.join("policy.toml");
            std::fs::write(&p, text).unwrap();
            cmd.arg("--policy").arg(p);
        }
        let child = cmd.spawn().unwrap();
        let d = Daemon {
            child: Some(child),
            socket,
            dir,
        };
        super::wait_for("the daemon's socket", Duration::from_secs(10), || {
            std::os::unix::net::UnixStream::connect(&d.socket).is_ok()
        });
        d
    }

    /// Where its PipesFS is mounted.
    pub fn mount(&self) -> PathBuf {
        self.dir.join("pipes")
    }

    pub fn cli(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env("STREAMLINE_SOCKET", &self.socket);
        c
    }

    /// The CLI as uid/gid 65534 with no supplementary groups.
    pub fn cli_as_nobody(&self) -> Command {
        let mut c = as_nobody(BIN);
        c.env("STREAMLINE_SOCKET", &self.socket);
        c
    }

    pub fn raw(&self, steps: &[&str]) -> Vec<serde_json::Value> {
        let out = Command::new(PYTHON)
            .arg(RAW)
            .arg(&self.socket)
            .args(steps)
            .output()
            .expect("python3 runs the raw client");
        assert!(
            out.status.success(),
            "rawclient failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or(serde_json::Value::String(l.to_string())))
            .collect()
    }

    pub fn ps(&self) -> String {
        let out = self.cli().arg("ps").output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// The process ids of this daemon's workers now.
    pub fn workers(&self) -> Vec<u32> {
        String::from_utf8_lossy(
            &Command::new("pgrep")
                .args(["-x", super::worker(), "-P", &self.pid().to_string()])
                .output()
                .unwrap()
                .stdout,
        )
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect()
    }

    /// Wait until every worker of this daemon captures on `dev` (see `wait_capturing`).
    pub fn wait_workers_capturing(&self, dev: &str) {
        for w in self.workers() {
            super::wait_capturing(w, dev);
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
