//! What kind of program a path is, for choosing a shaping mechanism: will the dynamic
//! loader put an `LD_PRELOAD` library into it (a dynamically linked ELF, or a script whose
//! interpreter is one, not setuid/setgid to someone else), or must the kernel do the work
//! (static and Go binaries, setuid programs)?
//!
//! Owns: that rule, for everyone who needs it: `streamline shape` picks library or kernel
//! with it, and the preload library decides before `exec` whether the next program will
//! still have it. The caller says how to read the file's first page (the preload library
//! reads with raw system calls, since it may run in a `vfork` child).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Reads the first page of a file.
pub type ReadHead<'a> = &'a dyn Fn(&Path) -> std::io::Result<Vec<u8>>;

/// The first page of `path`, through std.
pub fn read_head_std(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// Will the loader preload into `path`? Unknown files count as yes (the caller's plan
/// then fails where the program does, not here). `depth` bounds `#!` chains.
pub fn dynamic_target(path: &Path, depth: u32, read: ReadHead) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return true;
    };
    let mode = meta.permissions().mode();
    // SAFETY: no arguments.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if (mode & 0o4000 != 0 && meta.uid() != euid) || (mode & 0o2000 != 0 && meta.gid() != egid) {
        return false;
    }
    let Ok(head) = read(path) else { return true };
    if let Some(rest) = head.strip_prefix(b"#!") {
        if depth > 2 {
            return true;
        }
        let line = rest.split(|&b| b == b'\n').next().unwrap_or(&[]);
        let interp = String::from_utf8_lossy(line)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        return interp.is_empty() || dynamic_target(Path::new(&interp), depth + 1, read);
    }
    elf_has_interp(&head).unwrap_or(true)
}

/// PT_INTERP among a 64-bit little-endian ELF's program headers (within the first page).
/// None when it is not such an ELF (then we do not know and assume dynamic).
pub fn elf_has_interp(h: &[u8]) -> Option<bool> {
    if h.len() < 64 || &h[..4] != b"\x7fELF" || h[4] != 2 || h[5] != 1 {
        return None;
    }
    let u16at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(h[0x20..0x28].try_into().ok()?) as usize;
    let (phentsize, phnum) = (u16at(0x36), u16at(0x38));
    for i in 0..phnum {
        let o = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if o + 4 > h.len() {
            return None;
        }
        if u32::from_le_bytes(h[o..o + 4].try_into().ok()?) == 3 {
            return Some(true);
        }
    }
    Some(false)
}

/// Make the program `cmd` starts get SIGTERM when the process that started it dies: a
/// shaped program belongs to its launcher (the launcher is the group member, and the
/// kernel mechanism's supervisor lives in it), so a launcher killed with SIGKILL leaves no
/// orphan running on a budget nobody holds.
pub fn dies_with_launcher(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child before exec and only calls prctl, which
    // is async-signal-safe, touching no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
