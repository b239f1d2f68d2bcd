//! The mount's guard: a small process that detaches PipesFS when the daemon ends without
//! unmounting it (SIGKILL, a crash).
//!
//! Why fusermount3's `auto_unmount` watcher is not enough: once the daemon's end of its
//! socket closes, it unmounts only if opening the mount point fails with ENOTCONN
//! (`should_auto_unmount` in libfuse's fusermount.c, 3.14). A dying process closes its
//! descriptors one after another: when the socket closes before the last `/dev/fuse`
//! descriptor (fuser's worker threads clone it), the watcher's `open` reaches a connection
//! that is still up, its request is then ended by the abort with ECONNABORTED, and the
//! watcher leaves the mount in place, dead (`ls` says "Transport endpoint is not
//! connected"). The guard does not ask the mount anything: it waits for the daemon's end
//! of a pipe to close, looks the mount up in `/proc/self/mountinfo` by its device number
//! (so a mount made at the same place by a daemon started since is left alone), aborts the
//! FUSE connection (so no process stays blocked in it) and detaches the mount.
//!
//! The guard is the daemon's own program started again with [`ENV`] set (`main` checks it
//! first): the device and the mount point are its arguments, the pipe its stdin.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};

/// Set (to the mount's `MAJOR:MINOR`) in the guard's environment; its one argument is the
/// mount point.
pub const ENV: &str = "STREAMLINED_MOUNT_GUARD";

/// A running guard; dropping it closes the pipe, after which the guard looks once more and
/// exits (finding nothing when the daemon unmounted first, as it does at a clean exit).
pub struct Guard {
    child: Child,
}

impl Drop for Guard {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        // The guard looks at mountinfo and exits; reap it so no zombie stays.
        let _ = self.child.wait();
    }
}

/// `\040`-style escapes of mountinfo fields (space, tab, newline, backslash).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = |k: usize| u32::from(b[i + k] - b'0');
            // Octal of a byte (the kernel escapes only bytes; a larger value is kept low).
            out.push((v(1) * 64 + v(2) * 8 + v(3)) as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The device (`MAJOR:MINOR`) of the topmost FUSE mount at `dir` in `mountinfo` text.
pub fn fuse_dev_at(mountinfo: &str, dir: &Path) -> Option<String> {
    let want = dir.to_string_lossy();
    mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let fstype = right.split(' ').next()?;
            (f.len() >= 5 && unescape(f[4]) == want && fstype.starts_with("fuse"))
                .then(|| f[2].to_string())
        })
        .last()
}

/// Start the guard for the FUSE mount at `dir` (as the daemon's mount namespace sees it).
pub fn start(dir: &Path) -> std::io::Result<Guard> {
    let dir = dir.canonicalize()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let dev = fuse_dev_at(&info, &dir).ok_or_else(|| {
        std::io::Error::other(format!("no FUSE mount at {} in mountinfo", dir.display()))
    })?;
    let exe = std::env::current_exe()?;
    let child = Command::new(exe)
        .env(ENV, &dev)
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        // Its own process group: a Ctrl-C meant for the daemon's terminal group or a
        // kill of the daemon's group leaves it to do its work.
        .process_group(0)
        .spawn()?;
    Ok(Guard { child })
}

/// The guard process (`main` calls this when [`ENV`] is set): wait until the daemon's end
/// of stdin closes, then detach the mount if it is still the daemon's.
pub fn run(dev: &str) -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("streamlined (mount guard): no mount point given");
        return ExitCode::from(2);
    };
    // EOF when every holder of the write end is gone: the daemon (it is close-on-exec, so
    // no worker holds it).
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if fuse_dev_at(&info, &dir).as_deref() != Some(dev) {
        // Unmounted by the daemon (a clean exit), or by fusermount3's watcher.
        return ExitCode::SUCCESS;
    }
    // The connection first: whoever is blocked in the dead mount gets ENOTCONN.
    if let Some((maj, min)) = dev.split_once(':') {
        if let (Ok(maj), Ok(min)) = (maj.parse::<u64>(), min.parse::<u64>()) {
            let id = (maj << 20) | min;
            let _ = std::fs::write(format!("/sys/fs/fuse/connections/{id}/abort"), "1");
        }
    }
    let how = match nix::mount::umount2(&dir, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => "detached it".to_string(),
        Err(e) => {
            // Not root: the setuid helper may unmount what this user mounted.
            match Command::new("fusermount3")
                .args(["-u", "-z", "--"])
                .arg(&dir)
                .status()
            {
                Ok(s) if s.success() => "detached it (fusermount3 -u -z)".to_string(),
                r => format!("could not detach it (umount2: {e}; fusermount3: {r:?})"),
            }
        }
    };
    eprintln!(
        "streamlined (mount guard): the daemon ended without unmounting PipesFS on {}: {how}",
        dir.display()
    );
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topmost_fuse_mount_at_a_path_is_found_by_its_device() {
        let info = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
90 22 0:51 / /tmp/a\\040b rw,nosuid - fuse.pipesfs streamline rw,user_id=0
91 22 0:52 / /tmp/a\\040b rw,nosuid - fuse.pipesfs streamline rw,user_id=0
92 22 0:53 / /tmp/other rw - tmpfs tmpfs rw
";
        assert_eq!(
            fuse_dev_at(info, Path::new("/tmp/a b")).as_deref(),
            Some("0:52")
        );
        assert_eq!(fuse_dev_at(info, Path::new("/tmp/other")), None);
        assert_eq!(fuse_dev_at(info, Path::new("/tmp/a")), None);
        assert_eq!(unescape("a\\134b\\011"), "a\\b\t");
    }
}
