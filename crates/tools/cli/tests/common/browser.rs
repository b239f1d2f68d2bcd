//! A real browser for the web view's tests: headless chromium through chromium-driver
//! (WebDriver), driven by `browser.py` (Debian's python3-selenium), one JSON command a
//! line. Quit (and its processes gone) when dropped.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/browser.py");

pub struct Browser {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

/// Fail naming what is missing.
pub fn require_browser() {
    for (p, pkg) in [
        ("/usr/bin/chromium", "chromium"),
        ("/usr/bin/chromedriver", "chromium-driver"),
    ] {
        assert!(
            std::path::Path::new(p).exists(),
            "the web view's browser tests need {p} (Debian package {pkg}; scripts/setup installs it)"
        );
    }
    let ok = Command::new(super::daemon::PYTHON)
        .args(["-c", "import selenium"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "the web view's browser tests need Python's selenium (Debian package python3-selenium; scripts/setup installs it)");
}

impl Browser {
    pub fn start() -> Browser {
        require_browser();
        let mut child = Command::new(super::daemon::PYTHON)
            .arg(SCRIPT)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the browser driver");
        let to = child.stdin.take().unwrap();
        let mut from = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        assert!(
            line.contains("ready"),
            "the browser did not start: {line:?}"
        );
        Browser { child, to, from }
    }

    /// One command; its answer (panics on a failed one, with the reason).
    pub fn cmd(&mut self, c: Value) -> Value {
        let a = self.try_cmd(c.clone());
        assert_eq!(a["ok"], json!(true), "browser: {c} failed: {a}");
        a
    }

    pub fn try_cmd(&mut self, c: Value) -> Value {
        writeln!(self.to, "{c}").unwrap();
        self.to.flush().unwrap();
        let mut line = String::new();
        self.from.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("browser said {line:?} to {c}"))
    }

    pub fn get(&mut self, url: &str) -> Value {
        self.cmd(json!({"op": "get", "url": url}))
    }

    pub fn wait(&mut self, css: &str, text: &str, secs: f64) -> String {
        self.cmd(json!({"op": "wait", "css": css, "text": text, "timeout": secs}))["text"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    pub fn texts(&mut self, css: &str) -> Vec<String> {
        self.cmd(json!({"op": "texts", "css": css}))["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect()
    }

    pub fn attrs(&mut self, css: &str, name: &str) -> Vec<String> {
        self.cmd(json!({"op": "attrs", "css": css, "name": name}))["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect()
    }

    pub fn click(&mut self, css: &str) {
        self.cmd(json!({"op": "click", "css": css}));
    }

    pub fn type_in(&mut self, css: &str, text: &str) {
        self.cmd(json!({"op": "type", "css": css, "text": text}));
    }

    pub fn select(&mut self, css: &str, value: &str) {
        self.cmd(json!({"op": "select", "css": css, "value": value}));
    }

    /// A PNG of the page, under target/ (the test's artefact).
    pub fn shot(&mut self, name: &str) -> std::path::PathBuf {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../target/web-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{name}.png"));
        self.cmd(json!({"op": "shot", "path": p.display().to_string()}));
        let bytes = std::fs::read(&p).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{} is no PNG", p.display());
        p
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = writeln!(self.to, "{}", json!({"op": "quit"}));
        let _ = self.to.flush();
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
