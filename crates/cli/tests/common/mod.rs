//! Helpers shared by the end-to-end tests of the `streamline` command.

/// The block total of `count`'s summary line (`count: N blocks, M bytes`) in a run's
/// stderr; panics with the whole output when there is none.
#[allow(dead_code)]
pub fn count_of(err: &str) -> u64 {
    err.lines()
        .find_map(|l| l.strip_prefix("count: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count:\n{err}"))
}

/// Fail, naming what is missing, unless tcpreplay is installed and we are root (`needs`
/// says what root is for). Tests that need these never pass silently without them.
#[allow(dead_code)]
pub fn require_replay_and_root(needs: &str) {
    use std::process::{Command, Stdio};
    let ok = Command::new("tcpreplay").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    assert!(ok, "tcpreplay is required to replay the test's capture (apt-get install tcpreplay; scripts/setup installs it)");
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1)).unwrap_or("?").to_string();
    assert_eq!(euid, "0", "these tests need root ({needs})");
}

/// A veth pair into a namespace of its own whose ends send nothing of their own (IPv6
/// off: no router or neighbour solicitations, no MLD reports), so the captured traffic is
/// exactly what the test sends.
#[allow(dead_code)]
pub fn quiet_veth(tag: &str, needs: &str) -> kernel::netns::Veth {
    require_replay_and_root(needs);
    let v = kernel::netns::Veth::new(tag).unwrap_or_else(|e| panic!("{e}"));
    kernel::netns::run(&["sysctl", "-qw", &format!("net.ipv6.conf.{}.disable_ipv6=1", v.here)]).unwrap();
    v.exec(&["sysctl", "-qw", &format!("net.ipv6.conf.{}.disable_ipv6=1", v.there)]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    v
}

/// SIGINT a run (as Ctrl-C), wait for it, check it exited 130, and return its stderr.
#[allow(dead_code)]
pub fn interrupt(c: std::process::Child) -> String {
    assert!(std::process::Command::new("kill").args(["-INT", &c.id().to_string()]).status().unwrap().success());
    let out = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(130), "{err}");
    err
}
