//! A pipeline that is also a shell pipeline gives the shell's answer: every line of
//! `tests/shell/corpus.txt` is run by `streamline run` and by `bash -c`, in a scratch
//! directory with the same inputs, and their standard output, exit status and the files
//! they leave must be identical (native filters that share a Unix tool's name, `grep`,
//! `split`, `file`, `join`, mean the tool next to Unix commands: `lang`'s `build` module).
//! A line `like: PIPELINE =bash= SHELL` runs PIPELINE, a shell pipeline with Streamline's
//! own parts (native filters in the middle, `@space=` on a command), and compares it with
//! `bash -c SHELL`, the pipeline without them.
//! A line `refuse: PIPELINE` is shell syntax `streamline run` does not give the shell's
//! meaning (redirections, `;`, `&&`, globs, `$`): it must be refused before anything
//! runs, with a caret under the place and `bash -c` suggested, never run with another
//! meaning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// A scratch directory with the corpus' inputs.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sl-shell-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(root().join("ARCHITECTURE.md"), dir.join("text.txt")).unwrap();
    let nums: String = (1..=5000).map(|i| format!("{i}\n")).collect();
    std::fs::write(dir.join("nums.txt"), nums).unwrap();
    let words: String = (0..3000u64)
        .map(|i| format!("w{}\n", (i * 7919) % 1013))
        .collect();
    std::fs::write(dir.join("words.txt"), words).unwrap();
    let table: String = (0..200u64)
        .map(|i| format!("k{:03} {}\n", (i * 37) % 200, i % 17))
        .collect();
    std::fs::write(dir.join("table.txt"), table).unwrap();
    dir
}

/// The files in `dir` besides the inputs, with their bytes; removed afterwards.
fn made(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let inputs = ["text.txt", "nums.txt", "words.txt", "table.txt"];
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if inputs.contains(&name.as_str()) {
            continue;
        }
        out.insert(name, std::fs::read(e.path()).unwrap());
        std::fs::remove_file(e.path()).unwrap();
    }
    out
}

fn run(dir: &Path, program: &str, args: &[&str]) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    // A pipeline that never ends fails the test instead of hanging it.
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let guard = std::thread::spawn(move || {
        if rx.recv_timeout(std::time::Duration::from_secs(20)).is_err() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let _ = &mut child;
    let out = child.wait_with_output().unwrap();
    let _ = tx.send(());
    guard.join().unwrap();
    out
}

#[test]
fn shell_pipelines_give_the_shells_answer_byte_for_byte() {
    let corpus =
        std::fs::read_to_string(root().join("crates/tools/cli/tests/shell/corpus.txt")).unwrap();
    let dir = scratch();
    let mut failures = Vec::new();
    let mut compared = 0;
    let mut refused = 0;
    let mut liked = 0;
    for line in corpus.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // A refusal: shell syntax the language does not give the shell's meaning must stop
        // the run before it starts (exit 2), with a caret under it and the way to bash.
        if let Some(pipeline) = line.strip_prefix("refuse: ") {
            let ours = run(&dir, BIN, &["run", "-q", "--socket", "none", pipeline]);
            let ours_made = made(&dir);
            let err = String::from_utf8_lossy(&ours.stderr);
            refused += 1;
            let caret = err.lines().any(|l| {
                l.trim() == "^"
                    || (l.trim_start().starts_with('^') && l.trim().chars().all(|c| c == '^'))
            });
            if ours.status.code() != Some(2)
                || !ours.stdout.is_empty()
                || !ours_made.is_empty()
                || !caret
                || !err.contains("bash -c")
            {
                failures.push(format!(
                    "{pipeline}\n  should be refused (exit 2, nothing run, a caret, `bash -c` suggested); exited {:?}, printed {} bytes, made {:?}:\n{err}",
                    ours.status.code(),
                    ours.stdout.len(),
                    ours_made.keys().collect::<Vec<_>>()
                ));
            }
            continue;
        }
        // `like: PIPELINE =bash= SHELL`: Streamline's own parts in a shell pipeline (native
        // filters in the middle, `@space=`) must not change what it prints.
        let (line, shell) = match line.strip_prefix("like: ") {
            Some(both) => {
                let (ours, shell) = both
                    .split_once(" =bash= ")
                    .unwrap_or_else(|| panic!("{line}: no ' =bash= '"));
                liked += 1;
                (ours, shell)
            }
            None => (line, line),
        };
        let bash = run(&dir, "bash", &["-c", shell]);
        let bash_made = made(&dir);
        let ours = run(&dir, BIN, &["run", "-q", "--socket", "none", line]);
        let ours_made = made(&dir);
        compared += 1;
        if ours.stdout != bash.stdout {
            failures.push(format!(
                "{line}\n  bash printed {} bytes, streamline {}:\n  bash:       {:?}\n  streamline: {:?}\n  stderr: {}",
                bash.stdout.len(),
                ours.stdout.len(),
                String::from_utf8_lossy(&bash.stdout[..bash.stdout.len().min(200)]),
                String::from_utf8_lossy(&ours.stdout[..ours.stdout.len().min(200)]),
                String::from_utf8_lossy(&ours.stderr)
            ));
        } else if ours.status.code() != bash.status.code() {
            failures.push(format!(
                "{line}\n  bash exited {:?}, streamline {:?}: {}",
                bash.status.code(),
                ours.status.code(),
                String::from_utf8_lossy(&ours.stderr)
            ));
        } else if ours_made != bash_made {
            failures.push(format!(
                "{line}\n  files made differ: bash {:?}, streamline {:?}",
                bash_made.keys().collect::<Vec<_>>(),
                ours_made.keys().collect::<Vec<_>>()
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(compared >= 40, "the corpus has only {compared} pipelines");
    assert!(refused >= 10, "the corpus has only {refused} refusals");
    assert!(
        liked >= 10,
        "the corpus has only {liked} pipelines with native filters"
    );
    assert!(
        failures.is_empty(),
        "{} of {compared} shell pipelines differ from bash:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The first command of a pipeline reads the run's standard input, as in the shell:
/// `seq 10 | streamline run 'tr 1 x | wc -c'` is `seq 10 | bash -c 'tr 1 x | wc -c'`,
/// wherever the plan puts the reader (a `stdin` filter beside a Unix command was planned
/// into a process of its own, which read nothing).
#[test]
fn the_first_command_reads_the_runs_standard_input() {
    use std::io::Write;
    let feed = |program: &str, args: &[&str]| -> Vec<u8> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let input: String = (1..=2000).map(|i| format!("{i}\n")).collect();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    for pipeline in [
        "wc -l",
        "tr 1 x | md5sum",
        "sort -rn | head -3",
        "cat | grep 7 | wc -c",
        "grep 7 | wc -l",
        "gzip -1 | gzip -dc | tail -1",
        "awk '{s+=$1} END {print s}'",
        "head -5 | tac",
        "nosuchcmd | wc -l",
        "sed -n 1000p",
    ] {
        let bash = feed("bash", &["-c", pipeline]);
        let ours = feed(BIN, &["run", "-q", "--socket", "none", pipeline]);
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&bash),
            "{pipeline} fed 1..2000 on its standard input"
        );
    }
    let ours = feed(BIN, &["run", "-q", "--socket", "none", "stdin | wc -l"]);
    assert_eq!(
        String::from_utf8_lossy(&ours).trim(),
        "2000",
        "stdin | wc -l"
    );
}
