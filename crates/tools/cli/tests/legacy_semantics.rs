//! Legacy IPC, the kernel's semantics on ring pipes (issue 40): small C programs
//! (tests/c/legacy/, built here with cc) run on kernel pipes and under `streamline exec`
//! (ring pipes) must behave alike: signals interrupting or restarting blocking calls,
//! execl/execlp/execle of programs that cannot load the library, dprintf's place among
//! write(2)s, handlers that write to a ring, F_GETPIPE_SZ/F_SETPIPE_SZ, the ring size
//! switch, and a ring whose shared header is written with garbage.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c/legacy")
        .join(name)
}

/// A scratch directory for one test.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sl-legacy-sem-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Build tests/c/legacy/NAME.c into `dir/NAME` with `flags`.
fn cc(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let o = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(src(&format!("{name}.c")))
        .output()
        .expect("cc is needed (apt-get install build-essential)");
    assert!(
        o.status.success(),
        "cc {name}.c failed (static builds need libc6-dev): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// `sh -c script` in `dir` on kernel pipes (`ours` false) or under `streamline exec`;
/// killed after `limit`, which is a failure naming the script.
fn run(script: &str, dir: &Path, ours: bool, limit: Duration) -> Output {
    run_env(script, dir, ours, limit, &[])
}

fn run_env(script: &str, dir: &Path, ours: bool, limit: Duration, env: &[(&str, &str)]) -> Output {
    let mut c = if ours {
        let mut c = Command::new(BIN);
        c.args(["exec", "--", "/bin/sh", "-c", script]);
        c
    } else {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    };
    c.current_dir(dir)
        .env_remove("LD_PRELOAD")
        .env_remove("STREAMLINE_PIPE_SIZE")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // The whole tree: sh's children may hold the pipe.
            let _ = Command::new("pkill")
                .args(["-9", "-s", &pid.to_string()])
                .status();
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!(
                "{} `{script}` did not finish in {limit:?} (deadlock or hang)",
                if ours { "streamline exec" } else { "sh" }
            );
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Output and status of `script` on rings equal those on kernel pipes; returns the output.
fn same(script: &str, dir: &Path) -> String {
    same_env(script, dir, &[])
}

fn same_env(script: &str, dir: &Path, env: &[(&str, &str)]) -> String {
    let limit = Duration::from_secs(60);
    let plain = run_env(script, dir, false, limit, env);
    let ours = run_env(script, dir, true, limit, env);
    assert!(
        !plain.stdout.is_empty(),
        "`{script}` printed nothing on kernel pipes (stderr: {})",
        text(&plain.stderr)
    );
    assert_eq!(
        text(&ours.stdout),
        text(&plain.stdout),
        "stdout of `{script}` on rings differs from kernel pipes (stderr: {})",
        text(&ours.stderr)
    );
    assert_eq!(
        ours.status.code(),
        plain.status.code(),
        "status of `{script}`"
    );
    text(&ours.stdout)
}

/// man 7 signal: a read or write blocked on a pipe is restarted after a handler with
/// SA_RESTART and fails with EINTR after one without; poll, select and epoll_wait fail
/// with EINTR either way.
#[test]
fn signals_restart_or_interrupt_blocking_calls_as_on_kernel_pipes() {
    let dir = scratch("sig");
    cc(&dir, "sigwait", &["-O1"]);
    let mut all = String::new();
    for mode in ["read", "write", "poll", "select", "epoll"] {
        for how in ["restart", "intr"] {
            all += &same(&format!("./sigwait {mode} {how}"), &dir);
        }
    }
    // What the kernel does, spelled out (so a change of kernel shows here, not as a
    // silent agreement of two wrong answers).
    for want in [
        "read restart: 5 -, handled 1",
        "read intr: -1 EINTR, handled 1",
        "write restart: 1 -, handled 1",
        "write intr: -1 EINTR, handled 1",
        "poll restart: -1 EINTR, handled 1",
        "select restart: -1 EINTR, handled 1",
        "epoll restart: -1 EINTR, handled 1",
    ] {
        assert!(all.contains(want), "missing `{want}` in:\n{all}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// execl, execlp and execle (C-variadic) of a static program, or of a dynamic one with an
/// environment without LD_PRELOAD, demote the ring pipes it inherits like execv does: it
/// reads every byte written before and after.
#[test]
fn execl_execlp_and_execle_hand_static_programs_the_kernel_pipe() {
    let dir = scratch("execl");
    cc(&dir, "args", &["-static", "-O1"]);
    cc(&dir, "viaexec", &["-O1"]);
    let l = same("seq 1 2000 | ./viaexec l", &dir);
    assert_eq!(l, "args 1 2 3 4 5 6 7 | X=- | 8893 bytes\n");
    let lp = same("seq 1 2000 | PATH=.:$PATH ./viaexec lp", &dir);
    assert_eq!(lp, "args p | X=- | 8893 bytes\n");
    let le = same("seq 1 2000 | ./viaexec le", &dir);
    assert_eq!(le, "args e 2 3 4 5 6 7 8 | X=from-execle | 8893 bytes\n");
    // A dynamic program whose environment (execle's) does not preload the library.
    let cat = same("seq 1 2000 | ./viaexec lecat | wc -c", &dir);
    assert_eq!(cat.trim(), "8893");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// dprintf and vdprintf (glibc writes them past the interposed write) land in order with
/// the program's write(2)s, also in their fortified forms.
#[test]
fn dprintf_lands_in_order_with_writes() {
    let dir = scratch("dprintf");
    cc(&dir, "order", &["-O0"]);
    cc(&dir, "order", &["-O2", "-D_FORTIFY_SOURCE=2"]);
    std::fs::rename(dir.join("order"), dir.join("order_fortified")).unwrap();
    cc(&dir, "order", &["-O0", "-U_FORTIFY_SOURCE"]);
    let nm = Command::new("nm")
        .args(["-D"])
        .arg(dir.join("order_fortified"))
        .output()
        .map(|o| text(&o.stdout))
        .unwrap_or_default();
    assert!(
        nm.is_empty() || nm.contains("__dprintf_chk"),
        "-D_FORTIFY_SOURCE=2 did not make dprintf __dprintf_chk: {nm}"
    );
    for prog in ["order", "order_fortified"] {
        // The reader starts late: everything is in the pipe before it reads.
        let out = same(&format!("./{prog} | (sleep 0.3; cat)"), &dir);
        assert!(
            out.starts_with("write 0\ndprintf 0 0.00 s 1 2 3 4 5\nvdprintf 0 0\nwrite 1\n"),
            "{out}"
        );
        assert_eq!(out.lines().count(), 600);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A handler that writes to a ring pipe while its thread is inside the library (making
/// and closing pipes changes the fd table under a lock) neither deadlocks nor loses a byte.
#[test]
fn a_handler_writing_to_a_ring_during_pipe_and_close_does_not_deadlock() {
    let dir = scratch("handler");
    cc(&dir, "handlerwrite", &["-O1"]);
    let out = run("./handlerwrite", &dir, true, Duration::from_secs(30));
    let o = text(&out.stdout);
    let num = |key: &str| -> u64 {
        o.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no `{key}` in {o:?} (stderr: {})", text(&out.stderr)))
    };
    let (sent, read) = (num("sent "), num("read "));
    assert!(
        sent > 100,
        "only {sent} signals were handled: the test tested little\n{o}"
    );
    assert_eq!(sent, read, "the reader lost bytes the handler wrote\n{o}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An out-of-range or unreadable STREAMLINE_PIPE_SIZE is refused with a message naming
/// it, by `streamline exec` before the program starts and by the library itself.
#[test]
fn an_out_of_range_pipe_size_is_refused_with_a_message() {
    let o = Command::new(BIN)
        .args(["exec", "--pipe-size", "100", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("STREAMLINE_PIPE_SIZE=100: 100 is out of range"),
        "{}",
        text(&o.stderr)
    );
    let o = Command::new(BIN)
        .args(["exec", "--", "true"])
        .env("STREAMLINE_PIPE_SIZE", "64k")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("STREAMLINE_PIPE_SIZE=64k: \"64k\" is not a number of bytes"),
        "{}",
        text(&o.stderr)
    );
    // The library alone (LD_PRELOAD set by hand): says so, and leaves pipes to the kernel.
    // Where `streamline exec` finds it (a `cargo test` build leaves it only in deps/).
    let lib = common::built_library("libslpreload.so", "preload");
    let o = Command::new("/bin/sh")
        .args(["-c", "ls -l /proc/self/fd | grep -c memfd:slpipe"])
        .env("LD_PRELOAD", &lib)
        .env("STREAMLINE_PIPE_SIZE", "1")
        .output()
        .unwrap();
    assert_eq!(
        text(&o.stdout).trim(),
        "0",
        "a ring was made: {}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stderr).contains("libslpreload: STREAMLINE_PIPE_SIZE=1: 1 is out of range"),
        "{}",
        text(&o.stderr)
    );
    // A good size still makes rings.
    let o = Command::new("/bin/sh")
        .args(["-c", "ls -l /proc/self/fd | grep -c memfd:slpipe"])
        .env("LD_PRELOAD", &lib)
        .env("STREAMLINE_PIPE_SIZE", "65536")
        .output()
        .unwrap();
    assert_eq!(text(&o.stdout).trim(), "1", "{}", text(&o.stderr));
}

/// F_GETPIPE_SZ reports the ring's size and F_SETPIPE_SZ sizes it: the program gets what
/// it asked for, rounded and limited as the kernel does (EBUSY below what is buffered,
/// EINVAL above 2^31, EPERM above /proc/sys/fs/pipe-max-size for an unprivileged user),
/// as root and as nobody.
#[test]
fn f_setpipe_sz_sizes_the_ring_as_the_kernel_sizes_its_pipe() {
    let dir = scratch("pipesz");
    cc(&dir, "pipesz", &["-O1"]);
    // Rings start at the kernel's default size, so the first line agrees too.
    let env = [("STREAMLINE_PIPE_SIZE", "65536")];
    let max: u64 = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        max,
        1 << 20,
        "the expectations below assume pipe-max-size 1 MiB"
    );
    let root = same_env("./pipesz", &dir, &env);
    for want in [
        "initial 65536\n",
        "set 100000: 131072 -; get 131072\nholds 131072\n",
        "set 4096: -1 EBUSY; get 131072\n",
        "set 0: 4096 -; get 4096\nholds 4096\n",
        "set 1048576: 1048576 -; get 1048576\nholds 1048576\n",
        "set 65536: 65536 -; get 65536\nread 3\n",
        "set 3000000000: -1 EINVAL",
    ] {
        assert!(root.contains(want), "missing {want:?} in:\n{root}");
    }
    // Above pipe-max-size: with CAP_SYS_RESOURCE the pipe grows past the ring's mapping
    // (the kernel pipe takes over); without it, EPERM.
    let want = if has_cap_sys_resource() {
        "set 1048577: 2097152 -; get 2097152\nholds 2097152\n"
    } else {
        "set 1048577: -1 EPERM; get 65536\nholds 65536\n"
    };
    assert!(root.contains(want), "missing {want:?} in:\n{root}");
    assert!(
        Command::new("setpriv").arg("--version").output().is_ok(),
        "setpriv (util-linux) is needed to run the program unprivileged"
    );
    let nobody = same_env(
        "setpriv --reuid=65534 --regid=65534 --clear-groups ./pipesz",
        &dir,
        &env,
    );
    assert!(
        nobody.contains("set 1048577: -1 EPERM; get 65536\nholds 65536\n"),
        "{nobody}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Does this process hold CAP_SYS_RESOURCE (bit 24 of CapEff)?
fn has_cap_sys_resource() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|c| c & (1 << 24) != 0)
}

/// A process that writes garbage into the shared header of a ring its pipeline uses: the
/// reader ends with EOF or an error, never a crash or a hang, and never reads another
/// pipe's bytes; the writer is not killed either.
#[test]
fn garbage_in_a_ring_header_ends_in_eof_or_an_error_never_a_crash_or_a_hang() {
    let dir = scratch("hostile");
    cc(&dir, "hostile", &["-O1"]);
    // On kernel pipes there is nothing to spoil: every byte arrives.
    let plain = run("./hostile random", &dir, false, Duration::from_secs(30));
    assert!(
        text(&plain.stdout).contains("end: eof -; a=2000000 B=0 other=0; writer exited 0"),
        "{}",
        text(&plain.stdout)
    );
    for mode in ["random", "positions", "capacity", "locks", "bell"] {
        let out = run(
            &format!("./hostile {mode}"),
            &dir,
            true,
            Duration::from_secs(30),
        );
        let o = text(&out.stdout);
        assert!(
            !o.contains("no ring to spoil"),
            "{mode}: the pipe had no ring: {o}"
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{mode}: the reader crashed: {o}"
        );
        let line = o
            .lines()
            .find(|l| l.starts_with("end: "))
            .unwrap_or_else(|| panic!("{mode}: no end line in {o:?}"));
        assert!(
            line.starts_with("end: eof -;") || line.starts_with("end: error EIO;"),
            "{mode}: {line}"
        );
        assert!(
            line.contains(" B=0 "),
            "{mode}: another pipe's bytes: {line}"
        );
        assert!(!line.contains("killed by"), "{mode}: {line}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
