//! Capability probes: each tries the real operation once and closes what it opened.
//!
//! Owns [`Capabilities`] (what the running kernel lets us do) and its probing; the system
//! model ([`crate::system`]) holds the result and re-exports the type. The dependency is
//! one-way: this module uses nothing of `system`.
//!
//! The only module of this crate with `unsafe`: AF_PACKET/AF_XDP sockets and the bpf(2)
//! syscall have no safe std wrapper, so they go through `libc` directly.
#![allow(unsafe_code)]

use serde::{Deserialize, Serialize};

/// What the running kernel lets us do, each probed by trying it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The bpf(2) syscall loads a trivial socket-filter program (eBPF filters possible).
    pub bpf: bool,
    /// An AF_PACKET raw socket opens (packet rx, classic BPF attached to the socket).
    pub af_packet: bool,
    /// An AF_XDP socket opens.
    pub af_xdp: bool,
    /// /dev/fuse opens read-write (PipesFS possible).
    pub fuse: bool,
}

/// Probes every capability.
pub fn capabilities() -> Capabilities {
    Capabilities {
        bpf: bpf_prog_load(),
        af_packet: af_packet_allowed(),
        af_xdp: socket_opens(libc::AF_XDP, libc::SOCK_RAW),
        fuse: std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .is_ok(),
    }
}

/// AF_PACKET raw sockets: the family is built in (`/proc/net/packet` exists) and we hold
/// CAP_NET_RAW in our effective set. Not by opening one: closing an AF_PACKET socket
/// waits for an RCU grace period (about 15 ms here, `synchronize_net`), which every
/// `streamline run` would pay before its first packet.
fn af_packet_allowed() -> bool {
    const CAP_NET_RAW: u32 = 13;
    let eff = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        });
    std::path::Path::new("/proc/net/packet").exists()
        && eff.is_some_and(|e| e & (1 << CAP_NET_RAW) != 0)
}

fn socket_opens(domain: i32, ty: i32) -> bool {
    // SAFETY: socket(2) takes plain integers; a non-negative result is a descriptor we
    // own and close right away.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd was returned by socket(2) above and is closed exactly once.
    unsafe { libc::close(fd) };
    true
}

/// Loads `r0 = 0; exit` as a socket filter program.
fn bpf_prog_load() -> bool {
    // Two eBPF instructions: BPF_ALU64|BPF_MOV|BPF_K r0 = 0, then BPF_JMP|BPF_EXIT.
    let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
    let license = b"GPL\0";
    // union bpf_attr for BPF_PROG_LOAD: prog_type u32, insn_cnt u32, insns u64,
    // license u64, then log fields and the rest, all zero.
    let mut attr = [0u64; 16];
    const BPF_PROG_TYPE_SOCKET_FILTER: u64 = 1;
    attr[0] = BPF_PROG_TYPE_SOCKET_FILTER | ((insns.len() as u64) << 32);
    attr[1] = insns.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    const BPF_PROG_LOAD: libc::c_long = 5;
    // SAFETY: attr is a zero-filled bpf_attr of 128 bytes whose pointers (insns, license)
    // outlive the call; the kernel only reads them. A non-negative result is a program
    // descriptor we own and close right away.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd came from bpf(2) above and is closed exactly once.
    unsafe { libc::close(fd as i32) };
    true
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    /// Set in the environment of the copy of this test binary that probes as nobody.
    const AS_NOBODY: &str = "STREAMLINE_PROBE_TEST_CHILD";

    /// The probes say what the process may do: as root (with every capability, as these
    /// tests run here) each operation is allowed; the same binary run as nobody without
    /// capabilities is refused AF_PACKET and AF_XDP sockets, and bpf(2) and /dev/fuse as
    /// the sysctl and the device's mode say. A probe that always answered the same would fail one of the two.
    #[test]
    fn probes_say_what_the_process_may_do() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "this test needs root (CAP_BPF/CAP_SYS_ADMIN for bpf(2), CAP_NET_RAW for AF_PACKET and AF_XDP)"
        );
        let fuse_mode = std::fs::metadata("/dev/fuse")
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()))
            .expect("/dev/fuse is missing: PipesFS needs the fuse module");
        // Unprivileged users may load socket filters only where the sysctl allows it.
        let unpriv_bpf = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
            .is_ok_and(|v| v.trim() == "0");
        let root = super::capabilities();
        assert_eq!(
            root,
            super::Capabilities {
                bpf: true,
                af_packet: true,
                af_xdp: true,
                fuse: true
            },
            "as root"
        );
        let exe = std::env::current_exe().unwrap();
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
            ])
            .arg(&exe)
            .args([
                "--exact",
                "probe::tests::probe_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(AS_NOBODY, "1")
            .output()
            .expect("running setpriv (util-linux)");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            // libtest prints the test's name on the same line before what the test prints.
            .find_map(|l| l.split_once("CAPS ").map(|(_, caps)| caps))
            .unwrap_or_else(|| {
                panic!(
                    "the probe as nobody printed nothing: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let nobody: super::Capabilities = serde_json::from_str(line).unwrap();
        assert_eq!(
            nobody,
            super::Capabilities {
                bpf: unpriv_bpf,
                af_packet: false,
                af_xdp: false,
                // rw for others: anyone may mount with fusermount3
                fuse: fuse_mode & 0o006 == 0o006,
            },
            "as nobody without capabilities"
        );
    }

    /// The probing half of the test above, run as nobody (does nothing otherwise).
    #[test]
    fn probe_child() {
        if std::env::var_os(AS_NOBODY).is_some() {
            println!(
                "CAPS {}",
                serde_json::to_string(&super::capabilities()).unwrap()
            );
        }
    }

    /// The cheap AF_PACKET check agrees with the real operation.
    #[test]
    fn af_packet_check_agrees_with_opening_a_socket() {
        assert_eq!(
            super::af_packet_allowed(),
            super::socket_opens(libc::AF_PACKET, libc::SOCK_RAW)
        );
    }
}
