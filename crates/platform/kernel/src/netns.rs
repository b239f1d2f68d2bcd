//! Throw-away network namespaces with a veth pair into them, for tests and benchmarks that
//! need real traffic on a real interface (the only traffic our tests send leaves through
//! these pairs or loopback). Created with iproute2's `ip`; removed on drop. Needs root.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Why a namespace or pair could not be made; names the command and what it printed.
#[derive(Debug)]
pub struct NetnsError(pub String);

impl std::fmt::Display for NetnsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NetnsError {}

/// Runs a command, failing with its stderr.
pub fn run(args: &[&str]) -> Result<(), NetnsError> {
    let o = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| NetnsError(format!("running {args:?}: {e}")))?;
    if !o.status.success() {
        return Err(NetnsError(format!(
            "{args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(())
}

/// A veth pair: `here` stays in this namespace with address `{net}.1/24`, `there` lives in
/// namespace `ns` with `{net}.2/24`. Both ends up. Removed (with the namespace) on drop.
#[derive(Debug)]
pub struct Veth {
    /// The namespace holding the far end.
    pub ns: String,
    /// The interface in our namespace.
    pub here: String,
    /// The interface in `ns`.
    pub there: String,
    /// Our end's address.
    pub here_ip: String,
    /// The far end's address.
    pub peer_ip: String,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Veth {
    /// A fresh pair; `tag` (a few letters) makes names readable in `ip link` while it runs.
    /// Names and the /24 are unique per process and call, so tests may run in parallel.
    pub fn new(tag: &str) -> Result<Veth, NetnsError> {
        let pid = std::process::id();
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let id = (pid % 10000) * 8 + seq % 8;
        let tag: String = tag
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(4)
            .collect();
        let (ns, here, there) = (
            format!("sl{tag}{id}"),
            format!("sl{tag}{id}a"),
            format!("sl{tag}{id}b"),
        );
        run(&["ip", "netns", "add", &ns]).map_err(|e| {
            NetnsError(format!("creating a network namespace failed (needs root / CAP_SYS_ADMIN and iproute2): {e}"))
        })?;
        let n = pid.wrapping_mul(8).wrapping_add(seq);
        let net = format!("10.{}.{}", 100 + n % 150, (n / 150) % 250);
        let v = Veth {
            ns: ns.clone(),
            here: here.clone(),
            there: there.clone(),
            here_ip: format!("{net}.1"),
            peer_ip: format!("{net}.2"),
        };
        run(&[
            "ip", "link", "add", &here, "type", "veth", "peer", "name", &there,
        ])?;
        run(&["ip", "link", "set", &there, "netns", &ns])?;
        run(&["ip", "addr", "add", &format!("{net}.1/24"), "dev", &here])?;
        run(&["ip", "link", "set", &here, "up"])?;
        v.exec(&["ip", "addr", "add", &format!("{net}.2/24"), "dev", &there])?;
        v.exec(&["ip", "link", "set", &there, "up"])?;
        v.exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(v)
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> Result<(), NetnsError> {
        let mut all = vec!["ip", "netns", "exec", &self.ns];
        all.extend_from_slice(args);
        run(&all)
    }

    /// A `Command` that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.here])
            .output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}
