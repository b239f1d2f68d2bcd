//! `streamline compat -- CMD ...`: an unmodified libpcap program on Streamline.
//!
//! Owns: finding the stand-in libpcap the workspace builds (`libslpcap.so`, crate
//! `compat`), the directory where it is `libpcap.so.0.8` (next to this program,
//! `compat/`, made on first use; a private temporary one if that is not writable), and
//! starting the program with that directory first in `LD_LIBRARY_PATH`. Does not own the
//! library (crates/legacy/compat).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The stand-in library: `$STREAMLINE_PCAP_LIB`, else the newest `libslpcap.so` beside
/// this program (see [`find_library`]).
fn library() -> Result<PathBuf, String> {
    find_library("libslpcap.so", "STREAMLINE_PCAP_LIB", "compat")
}

/// A library the workspace builds for legacy programs (`file`): `$env`, else the newest
/// `file` beside this program (cargo build puts both in target/<profile>/; cargo test
/// leaves the library in target/<profile>/deps/), else under `../lib/streamline/`.
pub fn find_library(file: &str, env: &str, krate: &str) -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var(env) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let dir = exe.parent().ok_or("this program has no directory")?;
    let newest = [
        dir.join(file),
        dir.join("deps").join(file),
        dir.join("../lib/streamline").join(file),
    ]
    .into_iter()
    .filter_map(|c| Some((std::fs::metadata(&c).ok()?.modified().ok()?, c)))
    .max_by_key(|(t, _)| *t);
    if let Some((_, c)) = newest {
        return Ok(c.canonicalize().unwrap_or(c));
    }
    Err(format!(
        "{file} is not beside {} (build it: cargo build -p {krate}; or set {env})",
        exe.display()
    ))
}

/// A directory whose `libpcap.so.0.8` is the stand-in.
pub fn directory() -> Result<PathBuf, String> {
    let lib = library()?;
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("compat")));
    let private = std::env::temp_dir().join(format!("streamline-compat-{}", nix::unistd::getuid()));
    for dir in beside.into_iter().chain([private]) {
        if link_in(&dir, &lib).is_ok() {
            return Ok(dir);
        }
    }
    Err(format!(
        "cannot make a directory holding libpcap.so.0.8 -> {}",
        lib.display()
    ))
}

fn link_in(dir: &Path, lib: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let link = dir.join("libpcap.so.0.8");
    if std::fs::read_link(&link).ok().as_deref() == Some(lib) {
        return Ok(());
    }
    // Replace whatever is there in one step (another `compat` may be starting too).
    let tmp = dir.join(format!(".libpcap.so.0.8.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(lib, &tmp)?;
    std::fs::rename(&tmp, &link)
}

pub fn run(print_dir: bool, cmd: &[String], socket: Option<&str>) -> ExitCode {
    let dir = match directory() {
        Ok(d) => d,
        Err(e) => {
            crate::error!("compat: {e}");
            return ExitCode::from(2);
        }
    };
    if print_dir {
        println!("{}", dir.display());
        return ExitCode::SUCCESS;
    }
    let Some((prog, args)) = cmd.split_first() else {
        crate::error!("compat: which program? e.g. streamline compat -- tcpdump -i eth0");
        return ExitCode::from(2);
    };
    // The loader ignores LD_LIBRARY_PATH for setuid/setgid programs (and for programs with
    // file capabilities): those need the directory in ld.so.conf instead.
    if let Some(path) = which(prog) {
        if std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o6000 != 0) {
            eprintln!("streamline compat: warning: {} is setuid/setgid, so the loader ignores LD_LIBRARY_PATH; add {} to /etc/ld.so.conf.d/ (see README)", path.display(), dir.display());
        }
    }
    let ld = match std::env::var("LD_LIBRARY_PATH") {
        Ok(v) if !v.is_empty() => format!("{}:{v}", dir.display()),
        _ => dir.display().to_string(),
    };
    let mut c = std::process::Command::new(prog);
    c.args(args).env("LD_LIBRARY_PATH", ld);
    if let Some(s) = socket {
        c.env("STREAMLINE_SOCKET", s);
    }
    let e = c.exec();
    crate::error!("compat: cannot run {prog}: {e}");
    ExitCode::from(127)
}

pub fn which(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Some(PathBuf::from(prog));
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(prog))
            .find(|c| c.is_file())
    })
}
