//! Legacy IPC: unmodified programs (coreutils, tar, gzip, sort, bash, Python) on
//! Streamline's pipes (`streamline sh` / `streamline exec`, the preload library), compared
//! with the same programs on the kernel's pipes: same output, same exit statuses, under
//! SIGKILL of either end, early exits, static programs and descriptors passed over sockets.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

/// A scratch directory with deterministic files to pipe around.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sl-legacy-pipes-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("tree/sub")).unwrap();
    for i in 0..40u32 {
        let body: String = (0..(i * 997 % 20000))
            .map(|k| char::from(b'a' + ((k * 7 + i) % 26) as u8))
            .collect();
        std::fs::write(d.join(format!("tree/f{i:02}.txt")), body).unwrap();
    }
    std::fs::write(d.join("tree/sub/zeros"), vec![0u8; 3 << 20]).unwrap();
    d
}

/// `sh -c script` in `dir`, plain (kernel pipes) or under the library; killed after 60 s.
fn run(script: &str, dir: &Path, ours: bool) -> Output {
    let mut c = if ours {
        let mut c = Command::new(BIN);
        c.args(["sh", script]);
        c
    } else {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    };
    c.current_dir(dir)
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!(
                "{} `{script}` did not finish in 60 s",
                if ours { "streamline sh" } else { "sh" }
            );
        }
    }
}

/// The script's output and status must not depend on whose pipes it runs on.
fn same(script: &str, dir: &Path) -> String {
    let plain = run(script, dir, false);
    let ours = run(script, dir, true);
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "stdout of `{script}` differs (stderr: {})",
        String::from_utf8_lossy(&ours.stderr)
    );
    assert_eq!(
        ours.status.code(),
        plain.status.code(),
        "exit status of `{script}` differs (stderr: {})",
        String::from_utf8_lossy(&ours.stderr)
    );
    assert!(
        !plain.stdout.is_empty() || script.contains("true"),
        "`{script}` printed nothing: it checks nothing"
    );
    String::from_utf8_lossy(&ours.stdout).into_owned()
}

fn python() -> &'static str {
    for p in ["/usr/bin/python3", "/usr/local/bin/python3"] {
        if Path::new(p).exists() {
            return p;
        }
    }
    panic!("python3 is needed (apt-get install python3)");
}

#[test]
fn rings_are_really_used() {
    let dir = scratch("used");
    // ls lists its own descriptors: its stdout is a pipe end, and under the library the
    // pipe's ring (a memfd named slpipe:INODE) sits beside it.
    let ours = run("ls -l /proc/self/fd | grep -c memfd:slpipe", &dir, true);
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout).trim(),
        "1",
        "no ring beside the pipe: {}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let plain = run("ls -l /proc/self/fd | grep -c memfd:slpipe", &dir, false);
    assert_eq!(String::from_utf8_lossy(&plain.stdout).trim(), "0");
    // --no-pipes leaves them to the kernel.
    let off = Command::new(BIN)
        .args([
            "sh",
            "--no-pipes",
            "ls -l /proc/self/fd | grep -c memfd:slpipe",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&off.stdout).trim(), "0");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn coreutils_tar_gzip_sort_and_the_shell_give_the_same_output() {
    let dir = scratch("same");
    for script in [
        // Archives through three pipes, listed and checksummed.
        "tar cf - tree | gzip -c | gunzip -c | tar tvf - | sort | md5sum",
        "tar cf - tree | gzip -1 | gunzip | tar xOf - | md5sum",
        // stdio programs (sort, uniq, sed, awk read and write through FILE streams).
        "seq 1 300000 | sort -rn | uniq -c | awk '{s+=$1} END {print s}'",
        "cat tree/*.txt | sed s/a/B/g | tr a-z A-Z | grep -c B",
        "seq 1 100000 | sort -R --random-source=tree/f07.txt | sort -n | tail -3",
        // Large and small transfers; a reader that stops early (yes gets SIGPIPE).
        "head -c 50000000 /dev/zero | wc -c",
        "yes | head -c 5000000 | md5sum",
        "yes abc | head -n 3",
        // Command substitution, process substitution (/dev/fd/N), while-read loops.
        "x=$(ls tree | wc -l); echo \"files: $x\"",
        "bash -c 'diff <(seq 1 1000) <(seq 1 1000 | cat) && echo same'",
        "bash -c 'sort -n <(seq 1 3000 | sort -r) | tail -1'",
        "echo 'a b c' | while read x y z; do echo \"$z $y $x\"; done",
        "(echo first; sleep 0.2; echo second) | cat -n",
        // A named FIFO between two processes of the shell.
        "mkfifo ff && (seq 1 5000 > ff &) && wc -l < ff; rm -f ff",
        // Exit statuses of a pipeline's members (bash).
        "bash -c 'yes | head -1; echo ${PIPESTATUS[@]}'",
        "bash -c 'seq 1 200000 | head -1; echo ${PIPESTATUS[@]}'",
        "bash -c 'seq 1 10 | (exit 3) | cat; echo ${PIPESTATUS[@]:1}'",
        // dd-style copies of odd sizes.
        "dd if=tree/sub/zeros bs=7777 status=none | dd bs=65536 status=none | wc -c",
        // xargs starting programs that inherit the pipe.
        "ls tree | xargs -n 5 echo | wc -l",
    ] {
        same(script, &dir);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn python_subprocess_pipelines_and_epoll_on_pipes() {
    let dir = scratch("py");
    std::fs::write(
        dir.join("t.py"),
        r#"
import os, select, subprocess, fcntl, termios, struct, errno
# A subprocess pipeline (close_fds: the library's own descriptors survive it).
p1 = subprocess.Popen(["seq", "1", "200000"], stdout=subprocess.PIPE)
p2 = subprocess.Popen(["tr", "0-9", "a-j"], stdin=p1.stdout, stdout=subprocess.PIPE)
p1.stdout.close()
out = p2.communicate()[0]
print("pipeline", len(out), sum(out) % 1000003, p1.wait(), p2.returncode)
# epoll on a pipe fed by a child that writes in bursts.
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    for i in range(50):
        os.write(w, b"x" * (i * 37 % 5000 + 1))
        if i % 10 == 0:
            import time; time.sleep(0.01)
    os._exit(0)
os.close(w)
os.set_blocking(r, False)
ep = select.epoll()
ep.register(r, select.EPOLLIN)
total = 0; events = 0; eof = False
while not eof:
    for fd, ev in ep.poll(5):
        events += 1
        while True:
            try:
                b = os.read(r, 3000)
            except BlockingIOError:
                break
            if not b:
                eof = True
                break
            total += len(b)
os.waitpid(pid, 0)
print("epoll", total, events > 0)
# Non-blocking read of an empty pipe; FIONREAD; poll timeout; EOF; broken pipe.
r, w = os.pipe()
os.set_blocking(r, False)
try:
    os.read(r, 10); print("no EAGAIN")
except BlockingIOError:
    print("EAGAIN")
p = select.poll(); p.register(r, select.POLLIN)
print("poll empty", p.poll(50))
os.write(w, b"hello world")
n = struct.unpack("i", fcntl.ioctl(r, termios.FIONREAD, b"\0\0\0\0"))[0]
print("FIONREAD", n)
print("poll data", [(0, e & select.POLLIN) for (_, e) in p.poll(1000)])
print(os.read(r, 100))
os.close(w)
print("eof", os.read(r, 100), [(0, e & select.POLLHUP) for (_, e) in p.poll(1000)])
r, w = os.pipe()
os.close(r)
try:
    os.write(w, b"x"); print("no EPIPE")
except BrokenPipeError:
    print("EPIPE")
# select() on a pipe.
r, w = os.pipe()
print("select empty", select.select([r], [], [], 0.05)[0] == [])
os.write(w, b"abc")
print("select data", select.select([r], [w], [], 1)[0] == [r])
"#,
    )
    .unwrap();
    let out = same(&format!("{} t.py", python()), &dir);
    assert!(
        out.contains("EAGAIN") && out.contains("FIONREAD 11") && out.contains("EPIPE"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writes_up_to_pipe_buf_stay_whole_with_many_writers() {
    let dir = scratch("atomic");
    std::fs::write(
        dir.join("w.py"),
        r#"
import os, sys
r, w = os.pipe()
kids = []
for k in range(4):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        rec = bytes([65 + k]) * 4096
        for i in range(300):
            os.write(w, rec)
        os._exit(0)
    kids.append(pid)
os.close(w)
buf = b""
while True:
    b = os.read(r, 65536)
    if not b:
        break
    buf += b
for pid in kids:
    os.waitpid(pid, 0)
torn = sum(1 for i in range(0, len(buf), 4096) if len(set(buf[i:i+4096])) != 1)
print(len(buf), "torn", torn)
"#,
    )
    .unwrap();
    let out = same(&format!("{} w.py", python()), &dir);
    assert_eq!(out.trim(), "4915200 torn 0");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn either_end_killed_with_sigkill_ends_the_pipeline() {
    let dir = scratch("kill");
    // The writer dies mid-stream: the reader sees end of file after what was written.
    let out = same(
        "bash -c '(seq 1 100000; kill -9 $BASHPID) | wc -l; echo ${PIPESTATUS[@]}'",
        &dir,
    );
    assert_eq!(out, "100000\n137 0\n");
    // The reader dies: the writer gets SIGPIPE (once its writes find no reader).
    let out = same(
        "bash -c 'yes | (head -c 1000 > /dev/null; kill -9 $BASHPID); echo ${PIPESTATUS[@]}'",
        &dir,
    );
    assert_eq!(out, "141 137\n");
    // A writer killed while the reader is blocked on an empty pipe.
    let t = Instant::now();
    let out = same(
        "bash -c '(echo one; sleep 0.3; kill -9 $BASHPID) | cat'",
        &dir,
    );
    assert_eq!(out, "one\n");
    assert!(t.elapsed() < Duration::from_secs(20));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A static program cannot load the library: it gets the kernel pipe (the ring's bytes
/// moved into it first), and output does not change.
#[test]
fn static_programs_and_passed_descriptors_fall_back_to_the_kernel_pipe() {
    let dir = scratch("static");
    let src = dir.join("count.c");
    std::fs::write(&src, "#include <stdio.h>\n#include <unistd.h>\nint main(int c, char **v) { char b[4096]; long long t = 0; ssize_t n; if (c > 1) { for (int i = 0; i < 20000; i++) if (write(1, \"0123456789abcdef\", 16) != 16) return 1; return 0; } while ((n = read(0, b, sizeof b)) > 0) t += n; printf(\"%lld\\n\", t); return 0; }\n").unwrap();
    let st = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(dir.join("count"))
        .arg(&src)
        .status()
        .expect("cc is needed (apt-get install build-essential)");
    assert!(
        st.success(),
        "cc -static failed: libc6-dev (libc.a) is needed"
    );
    let head = Command::new("file")
        .arg(dir.join("count"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        head.is_empty() || head.contains("statically linked"),
        "{head}"
    );
    // Ring bytes written before the static reader starts reach it.
    same(
        "seq 1 50000 > data; (cat data; sleep 0.2; cat data) | ./count",
        &dir,
    );
    same("./count w | wc -c", &dir);
    same("./count w | ./count", &dir);
    // A pipe end sent over a Unix socket to another process.
    std::fs::write(
        dir.join("pass.py"),
        r#"
import os, socket
a, b = socket.socketpair()
r, w = os.pipe()
os.write(w, b"before ")
pid = os.fork()
if pid == 0:
    os.close(r); os.close(w); a.close()
    msg, fds, _, _ = socket.recv_fds(b, 10, 1)
    data = b""
    while True:
        x = os.read(fds[0], 100)
        if not x:
            break
        data += x
    print(msg.decode(), data.decode(), flush=True)
    os._exit(0)
b.close()
socket.send_fds(a, [b"fd"], [r])
os.close(r)
os.write(w, b"after")
os.close(w)
os.waitpid(pid, 0)
"#,
    )
    .unwrap();
    let out = same(&format!("{} pass.py", python()), &dir);
    assert_eq!(out.trim(), "fd before after");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn streamline_exec_runs_a_program_and_reports_a_missing_one() {
    let out = Command::new(BIN)
        .args(["exec", "--", "sh", "-c", "seq 1 1000 | wc -l"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1000");
    let out = Command::new(BIN)
        .args(["exec", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot run /nonexistent/program"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = Command::new(BIN)
        .args(["sh", "cat | tr a-z A-Z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(b"shout\n").unwrap();
    assert_eq!(
        String::from_utf8_lossy(&c.wait_with_output().unwrap().stdout),
        "SHOUT\n"
    );
}
