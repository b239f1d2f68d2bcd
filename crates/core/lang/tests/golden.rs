//! Data-driven tests: every tests/golden/*.txt holds a pipeline and the expected result
//! of parsing it with the fixed test resolver (`lang::fuzzing::test_resolver`): the
//! canonical graph print, or the rendered diagnostic.
//!
//! ```text
//! # optional comment lines
//! === input
//! tcp | ipp | count
//! === output
//! error: unknown filter 'ipp' ...
//! ```
//!
//! `UPDATE_GOLDEN=1 cargo test -p lang --test golden` rewrites the outputs.

use std::fs;
use std::path::Path;

fn render(input: &str) -> String {
    match lang::parse(input, &lang::fuzzing::test_resolver()) {
        Ok(g) => g.canonical(),
        Err(d) => format!("{d}\n"),
    }
}

#[test]
fn golden() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "txt"));
    files.sort();
    assert!(
        files.len() >= 40,
        "expected at least 40 golden cases, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        let text = fs::read_to_string(path).unwrap();
        let (head, rest) = text
            .split_once("=== input\n")
            .unwrap_or_else(|| panic!("{}: no '=== input'", path.display()));
        let (input, expected) = match rest.split_once("\n=== output\n") {
            Some((i, o)) => (i, Some(o)),
            None => (
                rest.trim_end_matches('\n').trim_end_matches("=== output"),
                None,
            ),
        };
        let input = input.trim_end_matches('\n');
        let actual = render(input);
        if update {
            fs::write(
                path,
                format!("{head}=== input\n{input}\n=== output\n{actual}"),
            )
            .unwrap();
        } else if expected != Some(actual.as_str()) {
            failures.push(format!(
                "{}:\n--- input\n{input}\n--- expected\n{}--- actual\n{actual}",
                path.display(),
                expected.unwrap_or("(none)\n")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} golden case(s) differ (UPDATE_GOLDEN=1 rewrites):\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}
