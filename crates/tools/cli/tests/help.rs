//! What the help says is true: every example of `streamline help pipelines` (a line
//! starting with `  $ `) runs as written, from the repository root, with status 0, and
//! prints each line shown under it (indented 4 spaces); `streamline filters` gives one
//! line per filter from its declaration; `filters NAME` puts the control options every
//! filter takes behind one line; `help policy`'s example starts a daemon.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::daemon::BIN;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .unwrap()
}

fn stdout_of(args: &[&str]) -> String {
    let o = Command::new(BIN)
        .args(args)
        .env("STREAMLINE_SOCKET", "none")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "streamline {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The examples of a help text: each `  $ ` command with the lines shown under it.
fn examples(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_example = false;
    for line in text.lines() {
        if let Some(cmd) = line.strip_prefix("  $ ") {
            out.push((cmd.to_string(), Vec::new()));
            in_example = true;
        } else if in_example && line.starts_with("    ") {
            out.last_mut()
                .unwrap()
                .1
                .push(line.trim_start().to_string());
        } else {
            in_example = false;
        }
    }
    out
}

#[test]
fn every_example_of_help_pipelines_runs_and_prints_what_it_says() {
    let text = stdout_of(&["help", "pipelines"]);
    let ex = examples(&text);
    // The topics the help must teach, each shown by an example that runs.
    for needed in [
        "|53 ",
        "|!1:1023 ",
        "|http ",
        "|dns ",
        " + ",
        " ++ ",
        " +* ",
        "| !tcp",
        "@private",
        "@lockstep",
        "@latency",
        "space=1 ",
        "space=p1",
        "space=1,2",
        "for name=L",
        "name=c",
        "rate=",
        "count=20M",
        "count=2K",
        "@space=1 ",
        "echo name=x",
        "nosuchcmd",
    ] {
        assert!(
            ex.iter().any(|(c, _)| c.contains(needed)),
            "no example of `{needed}` in help pipelines"
        );
    }
    assert!(
        text.contains("20,971,520"),
        "the binary suffixes are stated: {text}"
    );
    assert!(ex.len() >= 20, "{} examples", ex.len());
    // `streamline` in the examples is this build's (first on PATH).
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (cmd, shown) in &ex {
        assert!(cmd.starts_with("streamline "), "{cmd}");
        let o = Command::new("bash")
            .args(["-c", cmd])
            .current_dir(repo_root())
            .env("PATH", &path)
            .env("STREAMLINE_SOCKET", "none")
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.status.code(), Some(0), "`{cmd}` failed:\n{said}");
        for l in shown {
            assert!(
                // The extractor took the help's indent off, and with it the line's own
                // (hist's rows are indented): compare without either.
                said.lines().any(|x| x.trim() == l),
                "`{cmd}` did not print the line the help shows, `{l}`:\n{said}"
            );
        }
    }
}

#[test]
fn the_example_extractor_finds_commands_and_their_lines() {
    // The extractor is what the test above trusts: a help text whose example would fail,
    // or whose shown line is not printed, must be found by it.
    let ex =
        examples("x\n  $ streamline a\n    one\n    two\nprose\n    not shown\n  $ streamline b\n");
    assert_eq!(
        ex,
        vec![
            (
                "streamline a".to_string(),
                vec!["one".to_string(), "two".to_string()]
            ),
            ("streamline b".to_string(), vec![]),
        ]
    );
}

#[test]
fn help_names_its_topics_and_still_documents_commands() {
    let top = stdout_of(&["help"]);
    for t in ["pipelines", "options", "policy", "run", "filters"] {
        assert!(top.contains(t), "{top}");
    }
    let run = stdout_of(&["help", "run"]);
    assert!(run.contains("--detach"), "{run}");
    let bad = Command::new(BIN)
        .args(["help", "nosuchtopic"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).starts_with("streamline: error: "));
}

#[test]
fn filters_gives_one_line_per_filter_from_its_declaration() {
    let list = stdout_of(&["filters"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), filters::REGISTRY.len(), "{list}");
    for (l, spec) in lines.iter().zip(filters::REGISTRY) {
        let summary = spec.summary();
        assert!(
            !summary.is_empty() && !summary.contains('\n'),
            "{}",
            spec.name
        );
        assert_eq!(l.split_whitespace().next(), Some(spec.name), "{list}");
        assert!(
            l.trim_end().ends_with(summary.trim_end()),
            "{l} / {summary}"
        );
        // From the declaration's description (its one home), not a table of its own.
        let desc = spec
            .description
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            desc.starts_with(summary.trim_end_matches('.')),
            "{}: `{summary}` is not the start of its description",
            spec.name
        );
    }
}

#[test]
fn filters_name_puts_the_shared_control_options_behind_one_line() {
    let options = stdout_of(&["help", "options"]);
    for key in [
        "name=X",
        "space=S",
        "export=yes",
        "size=BYTES",
        "share=",
        "@",
        "lockstep",
    ] {
        assert!(
            options.contains(key),
            "help options lacks {key}:\n{options}"
        );
    }
    for spec in filters::REGISTRY {
        let doc = stdout_of(&["filters", spec.name]);
        assert!(
            doc.contains("streamline help options"),
            "{}:\n{doc}",
            spec.name
        );
        // None of the shared lines is repeated in a filter's page.
        for shared in [
            "names the node; every occurrence",
            "its output also goes to a named IBuf",
            "channels into it wake it for large batches",
        ] {
            assert!(
                !doc.contains(shared),
                "{} repeats `{shared}`:\n{doc}",
                spec.name
            );
        }
    }
    // What is the filter's own stays: gen's space=A,B refusal, count's summary.
    let gen = stdout_of(&["filters", "gen"]);
    assert!(
        gen.contains("space=A,B") && gen.contains("refused"),
        "{gen}"
    );
    // gen lists rate= in its synopsis, and where a count is read its suffixes are said.
    assert!(gen.contains("[rate=N]"), "{gen}");
    let count_line = gen
        .lines()
        .find(|l| l.trim_start().starts_with("count "))
        .unwrap_or_else(|| panic!("{gen}"));
    assert!(count_line.contains("20M = 20,971,520"), "{gen}");
}

#[test]
fn help_policy_example_is_a_policy_the_daemon_starts_with() {
    let text = stdout_of(&["help", "policy"]);
    let example = &text[text.find("\n[[grant]]\nusers").expect("an example") + 1..];
    assert_eq!(example, daemon::policy::format_example());
    let d = common::daemon::Daemon::start("helppolicy", Some(example));
    // The daemon took it (a policy it could not read would have stopped it).
    assert!(d.ps().starts_with("ID"), "{}", d.log());
    assert!(d.log().contains("policy.toml)"), "{}", d.log());
}
