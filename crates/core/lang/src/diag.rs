//! Errors: what went wrong, where (a span), and a caret rendering in the style of rustc
//! and regex-syntax.

use std::fmt;

use crate::span::Span;

/// What kind of problem a [`Diagnostic`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DiagKind {
    /// Nothing but whitespace.
    EmptyPipeline,
    /// An operator without an operand on one side: `a | | b`, `| a`, `a +`, `()`.
    MissingOperand,
    /// A token where an operator was expected, e.g. the `!` in `a !b`.
    UnexpectedToken,
    /// `(` without `)` or `)` without `(`.
    UnbalancedParen,
    /// A `"` or `'` that is never closed.
    UnterminatedQuote,
    /// Parallel operators of different kinds mixed without parentheses: `a + b ++ c`.
    MixedOperators,
    /// Parentheses nested deeper than [`crate::MAX_DEPTH`].
    TooDeep,
    /// A selector that is not `all`, N, N:M, a class name or `!` + selector.
    BadSelector,
    /// A class outside 0..=65535, or a range N:M with N > M.
    SelectorOutOfRange,
    /// A name that is neither a native filter nor a Unix command.
    UnknownFilter,
    /// Unknown option key, malformed `key=value`, empty value, bad control option value,
    /// an option given twice, or an option where the filter name should be.
    BadOption,
    /// A control option (Table 3.2) given to a Unix command.
    OptionOnUnix,
    /// Shell syntax the pipeline language does not give the shell's meaning (a
    /// redirection, `;`, a glob, `$`, a backquote, `~`, `#`) unquoted in a Unix command's
    /// words: refused rather than passed on as a literal word.
    ShellSyntax,
    /// A `@` annotation that is not a Table 3.3 hint.
    UnknownHint,
    /// Two occurrences of one `name=X` disagree (other filter, other parameters).
    NameConflict,
    /// A cycle (made with named nodes) that contains no loop-bounding `for` filter.
    UnboundedLoop,
    /// A `|name` selector naming a class that no filter upstream of the arc publishes.
    UnknownClass,
}

/// A parse, resolution or validation error. `Display` renders it with the offending line
/// and a caret under `span`:
///
/// ```text
/// error: unknown filter 'ipp' (not a native filter, and not found on PATH either)
///   tcp | ipp | count
///         ^^^
///   help: did you mean 'ip'?
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub kind: DiagKind,
    pub message: String,
    pub span: Span,
    pub help: Option<String>,
    /// The whole input, so the diagnostic can render itself.
    pub input: String,
}

impl Diagnostic {
    pub(crate) fn new(kind: DiagKind, message: impl Into<String>, span: Span, input: &str) -> Self {
        Diagnostic {
            kind,
            message: message.into(),
            span,
            help: None,
            input: input.to_string(),
        }
    }

    pub(crate) fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub(crate) fn maybe_help(mut self, help: Option<String>) -> Self {
        self.help = help;
        self
    }

    /// 1-based line and column (in characters) of the span's start.
    pub fn line_col(&self) -> (usize, usize) {
        let start = clamp(&self.input, self.span.start);
        let before = &self.input[..start];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, self.input[line_start..start].chars().count() + 1)
    }
}

fn clamp(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = format!("error: {}", self.message);
        f.write_str(&render(&head, self.span, &self.input, self.help.as_deref()))
    }
}

/// The caret rendering every error about pipeline text shares (parse errors through
/// [`Diagnostic`], build errors through `dataplane::BuildError`): `head` as the first
/// line, then the line of `input` that `span` starts on (with a `N | ` gutter when the
/// input has several lines), carets under the span (at least one, clipped to that line),
/// and `help: ...` if given. Spans past the input or inside a character are clamped, so
/// any span renders.
pub fn render(head: &str, span: Span, input: &str, help: Option<&str>) -> String {
    let start = clamp(input, span.start);
    let end = clamp(input, span.end.max(start));
    let line_start = input[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = input[start..].find('\n').map_or(input.len(), |i| start + i);
    let line = &input[line_start..line_end];
    let lineno = input[..start].matches('\n').count() + 1;
    let gutter = if input.contains('\n') {
        format!("{lineno} | ")
    } else {
        String::new()
    };
    // Control characters (tabs, ...) print as one space so the caret stays aligned.
    let shown: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut out = format!("{head}\n{}", format!("  {gutter}{shown}").trim_end());
    let col = input[line_start..start].chars().count();
    let width = input[start..end.min(line_end)].chars().count().max(1);
    let pad = " ".repeat(gutter.chars().count());
    out += &format!("\n  {pad}{}{}", " ".repeat(col), "^".repeat(width));
    if let Some(h) = help {
        out += &format!("\n  help: {h}");
    }
    out
}

impl std::error::Error for Diagnostic {}

/// Optimal-string-alignment distance (Levenshtein plus adjacent transpositions).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The closest candidates (all at the smallest distance, at most three, sorted), if that
/// distance is small enough to be a plausible typo: at most max(1, len/3).
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    // Inputs can be long (fuzzing); typo suggestions are for words of human size.
    if word.chars().count() > 64 {
        return Vec::new();
    }
    let limit = (word.chars().count() / 3).max(1);
    let mut best = usize::MAX;
    let mut found: Vec<String> = Vec::new();
    for c in candidates {
        if c.chars().count() > 64 {
            continue;
        }
        let d = edit_distance(word, c);
        if d > limit || d == 0 {
            continue;
        }
        if d < best {
            best = d;
            found.clear();
        }
        if d == best && !found.iter().any(|f| f == c) {
            found.push(c.to_string());
        }
    }
    found.sort();
    found.truncate(3);
    found
}

/// "did you mean 'a'?" / "did you mean 'a' or 'b'?" / "did you mean 'a', 'b' or 'c'?"
pub(crate) fn did_you_mean(found: &[String]) -> Option<String> {
    let q: Vec<String> = found.iter().map(|s| format!("'{s}'")).collect();
    match q.len() {
        0 => None,
        1 => Some(format!("did you mean {}?", q[0])),
        n => Some(format!(
            "did you mean {} or {}?",
            q[..n - 1].join(", "),
            q[n - 1]
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("ipp", "ip"), 1);
        assert_eq!(edit_distance("cuont", "count"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(closest("ipp", ["ip", "tcp", "udp", "count"]), vec!["ip"]);
        assert!(closest("zzzzzz", ["ip", "tcp"]).is_empty());
    }

    #[test]
    fn renders_end_of_input_and_lines() {
        let d = Diagnostic::new(DiagKind::MissingOperand, "m", Span::new(3, 3), "a +");
        assert_eq!(d.to_string(), "error: m\n  a +\n     ^");
        let d = Diagnostic::new(DiagKind::MissingOperand, "m", Span::new(6, 9), "a |\n  bad");
        assert_eq!(d.to_string(), "error: m\n  2 |   bad\n        ^^^");
        assert_eq!(d.line_col(), (2, 3));
    }

    #[test]
    fn render_takes_any_head_and_clamps_any_span() {
        let r = render(
            "streamline: strip: bad",
            Span::new(14, 21),
            "gen count=1 | strip x | count",
            None,
        );
        // The carets sit under `strip x`.
        assert_eq!(
            r,
            "streamline: strip: bad\n  gen count=1 | strip x | count\n                ^^^^^^^"
        );
        // Past the end, backwards, inside a multi-byte character: still one caret in range.
        assert_eq!(
            render("h", Span::new(99, 3), "ab", Some("x")),
            "h\n  ab\n    ^\n  help: x"
        );
        assert_eq!(render("h", Span::new(1, 2), "é", None), "h\n  é\n  ^");
    }
}
