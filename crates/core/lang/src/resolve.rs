//! Names to filters: the [`Resolver`] the caller provides, ready-made resolvers, and the
//! checks that turn an atom's words into a [`NodeKind`] (options of Table 3.2).

use std::collections::BTreeMap;

use crate::diag::{closest, did_you_mean, DiagKind, Diagnostic};
use crate::graph::{quote, NodeKind};
use crate::lexer::Word;
use crate::place::{Placement, Side, SpaceSpec, SPACE};
use crate::span::Span;

/// A parameter a filter declares secret ([`Resolver::secrets`]): its option key, and the
/// position it also takes (`xor KEYHEX`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretParam {
    pub key: String,
    pub position: Option<usize>,
}

/// Whether a name is a native filter or a Unix command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterKind {
    Native,
    Unix,
}

/// Tells the parser what a filter name means. The CLI combines its filter registry with
/// PATH (see [`WithPath`]); tests use a [`StaticResolver`].
pub trait Resolver {
    /// Some(kind) if `name` is a native filter or a Unix command; None if unknown.
    fn resolve(&self, name: &str) -> Option<FilterKind>;

    /// All native filter names (for "did you mean").
    fn native_names(&self) -> Vec<String>;

    /// The option keys a native filter accepts besides the control options, or None if
    /// unknown (then any well-formed `key=value` is accepted). With Some, an unknown key
    /// is a [`DiagKind::BadOption`] error.
    fn params(&self, _native: &str) -> Option<Vec<String>> {
        None
    }

    /// Whether a native filter bounds loops: every cycle must contain one. Default: the
    /// filter named `for` (thesis 3.3.2, "Conditional Looping").
    fn bounds_loops(&self, native: &str) -> bool {
        native == "for"
    }

    /// The class names a native filter publishes (`http` publishes `get` = 1, ...), for
    /// `|name` selectors; None if unknown (then a name it might publish is not refused).
    fn class_names(&self, _native: &str) -> Option<Vec<(String, u16)>> {
        None
    }

    /// Whether a native filter shares its name with a standard Unix tool (`grep`, `file`,
    /// `split`, `join`, `strip`, `ip`). Next to a Unix command (or alone) such a name
    /// means the tool, so that a pipeline that is also a shell pipeline gives the shell's
    /// answer; see [`crate::build`]'s rule. Default: no.
    fn unix_tool(&self, _native: &str) -> bool {
        false
    }

    /// The parameters of a native filter that are secret (keys, passwords, tokens): never
    /// shown, see [`crate::redact()`]. Default: none.
    fn secrets(&self, _native: &str) -> Vec<SecretParam> {
        Vec::new()
    }

    /// Every option key some native filter declares secret (words of a filter that is not
    /// known as native are redacted by these). Default: none.
    fn secret_keys(&self) -> Vec<String> {
        Vec::new()
    }
}

impl<R: Resolver + ?Sized> Resolver for &R {
    fn resolve(&self, name: &str) -> Option<FilterKind> {
        (**self).resolve(name)
    }
    fn native_names(&self) -> Vec<String> {
        (**self).native_names()
    }
    fn params(&self, native: &str) -> Option<Vec<String>> {
        (**self).params(native)
    }
    fn bounds_loops(&self, native: &str) -> bool {
        (**self).bounds_loops(native)
    }
    fn class_names(&self, native: &str) -> Option<Vec<(String, u16)>> {
        (**self).class_names(native)
    }
    fn unix_tool(&self, native: &str) -> bool {
        (**self).unix_tool(native)
    }
    fn secrets(&self, native: &str) -> Vec<SecretParam> {
        (**self).secrets(native)
    }
    fn secret_keys(&self) -> Vec<String> {
        (**self).secret_keys()
    }
}

/// The control options of Table 3.2. Any native filter may take them (`name` becomes
/// [`crate::Node::name`]; `space` becomes the typed [`crate::Placement::space`], see
/// [`SPACE`]; the others stay in the filter's options, values checked: export,
/// exportdata, reuse yes|no; share yes|no|auto; size digits with an optional k/m/g;
/// mode 1-4 octal digits); a Unix command may not. When a native filter declares an
/// option key of its own with the same name (pcapin's `file`), the key is the filter's:
/// its value is not checked, and even `name` then stays in the options.
pub const CONTROL_OPTIONS: [&str; 10] = [
    "name",
    "export",
    "exportdata",
    "size",
    "share",
    "reuse",
    SPACE,
    "mode",
    "file",
    "binary",
];

/// The option key a filter with a kernel and a user implementation declares for its
/// side: parsed into [`crate::Placement::side`], never left among the options.
pub const PLACED: &str = "placed";

/// A fixed table of native filters (with their option keys, or None for "any") and Unix
/// commands. Native names win over Unix names.
#[derive(Clone, Debug, Default)]
pub struct StaticResolver {
    natives: BTreeMap<String, Option<Vec<String>>>,
    unix: Vec<String>,
    unix_tools: Vec<String>,
    secrets: BTreeMap<String, Vec<SecretParam>>,
}

impl StaticResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a native filter that accepts exactly the option keys `params` (plus control
    /// options).
    pub fn native(mut self, name: &str, params: &[&str]) -> Self {
        self.natives.insert(
            name.to_string(),
            Some(params.iter().map(|s| s.to_string()).collect()),
        );
        self
    }

    /// Adds a native filter that accepts any option key.
    pub fn native_any(mut self, name: &str) -> Self {
        self.natives.insert(name.to_string(), None);
        self
    }

    pub fn unix(mut self, name: &str) -> Self {
        self.unix.push(name.to_string());
        self
    }

    /// Declares native filter `name` to share its name with a Unix tool (see
    /// [`Resolver::unix_tool`]).
    pub fn unix_tool(mut self, name: &str) -> Self {
        self.unix_tools.push(name.to_string());
        self
    }

    /// Declares parameter `key` of native filter `name` secret (also positional parameter
    /// `position`).
    pub fn secret(mut self, name: &str, key: &str, position: Option<usize>) -> Self {
        self.secrets
            .entry(name.to_string())
            .or_default()
            .push(SecretParam {
                key: key.to_string(),
                position,
            });
        self
    }
}

impl Resolver for StaticResolver {
    fn resolve(&self, name: &str) -> Option<FilterKind> {
        if self.natives.contains_key(name) {
            Some(FilterKind::Native)
        } else if self.unix.iter().any(|u| u == name) {
            Some(FilterKind::Unix)
        } else {
            None
        }
    }
    fn native_names(&self) -> Vec<String> {
        self.natives.keys().cloned().collect()
    }
    fn params(&self, native: &str) -> Option<Vec<String>> {
        self.natives.get(native).cloned().flatten()
    }
    fn unix_tool(&self, native: &str) -> bool {
        self.unix_tools.iter().any(|u| u == native)
    }
    fn secrets(&self, native: &str) -> Vec<SecretParam> {
        self.secrets.get(native).cloned().unwrap_or_default()
    }
    fn secret_keys(&self) -> Vec<String> {
        self.secrets
            .values()
            .flatten()
            .map(|s| s.key.clone())
            .collect()
    }
}

/// Resolves executables on `PATH` (or a name containing `/` that is an executable file)
/// as Unix commands; knows no native filters.
#[derive(Clone, Copy, Debug, Default)]
pub struct PathResolver;

impl PathResolver {
    /// The executable `name` would run, if any.
    pub fn find(name: &str) -> Option<std::path::PathBuf> {
        if name.is_empty() {
            return None;
        }
        if name.contains('/') {
            let p = std::path::PathBuf::from(name);
            return is_executable(&p).then_some(p);
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
    }
}

fn is_executable(p: &std::path::Path) -> bool {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                m.permissions().mode() & 0o111 != 0
            }
            #[cfg(not(unix))]
            {
                true
            }
        }
        _ => false,
    }
}

/// Shell builtins (bash's `compgen -b` less those that are programs too: `echo`, `test`,
/// `kill`, ...): with no program of their name on PATH they resolve as Unix commands, and
/// run as `bash -c '"$0" "$@"' NAME ARGS...` (`type ls`, `ulimit -n`, `: | sort`, `hash`,
/// `read x`, `cd /`), so they print and exit as `bash -c` does (not `command not found`).
pub const SHELL_BUILTINS: &[&str] = &[
    ".",
    ":",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "pushd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "times",
    "trap",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
];

impl Resolver for PathResolver {
    fn resolve(&self, name: &str) -> Option<FilterKind> {
        PathResolver::find(name)
            .map(|_| FilterKind::Unix)
            .or_else(|| SHELL_BUILTINS.contains(&name).then_some(FilterKind::Unix))
    }
    fn native_names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A resolver of native filters, falling back to PATH for Unix commands: the lookup order
/// of thesis 3.3 ("it prefers native filters over Unix processes").
#[derive(Clone, Debug, Default)]
pub struct WithPath<R>(pub R);

impl<R: Resolver> Resolver for WithPath<R> {
    fn resolve(&self, name: &str) -> Option<FilterKind> {
        self.0.resolve(name).or_else(|| PathResolver.resolve(name))
    }
    fn native_names(&self) -> Vec<String> {
        self.0.native_names()
    }
    fn params(&self, native: &str) -> Option<Vec<String>> {
        self.0.params(native)
    }
    fn bounds_loops(&self, native: &str) -> bool {
        self.0.bounds_loops(native)
    }
    fn class_names(&self, native: &str) -> Option<Vec<(String, u16)>> {
        self.0.class_names(native)
    }
    fn unix_tool(&self, native: &str) -> bool {
        self.0.unix_tool(native)
    }
    fn secrets(&self, native: &str) -> Vec<SecretParam> {
        self.0.secrets(native)
    }
    fn secret_keys(&self) -> Vec<String> {
        self.0.secret_keys()
    }
}

/// Native filters, and every other name as a Unix command, not looked up: for a party
/// that checks a pipeline on behalf of another who runs it (the daemon, for its client),
/// where the command will be found is the runner's to say (its PATH and working
/// directory). Native filters resolve first here as in [`WithPath`], so a name means a
/// native filter to both or to neither.
#[derive(Clone, Debug, Default)]
pub struct OrCommand<R>(pub R);

impl<R: Resolver> Resolver for OrCommand<R> {
    fn resolve(&self, name: &str) -> Option<FilterKind> {
        self.0.resolve(name).or(Some(FilterKind::Unix))
    }
    fn native_names(&self) -> Vec<String> {
        self.0.native_names()
    }
    fn params(&self, native: &str) -> Option<Vec<String>> {
        self.0.params(native)
    }
    fn bounds_loops(&self, native: &str) -> bool {
        self.0.bounds_loops(native)
    }
    fn class_names(&self, native: &str) -> Option<Vec<(String, u16)>> {
        self.0.class_names(native)
    }
    fn unix_tool(&self, native: &str) -> bool {
        self.0.unix_tool(native)
    }
    fn secrets(&self, native: &str) -> Vec<SecretParam> {
        self.0.secrets(native)
    }
    fn secret_keys(&self) -> Vec<String> {
        self.0.secret_keys()
    }
}

/// A resolved atom.
pub(crate) struct Resolved {
    pub kind: NodeKind,
    pub name: Option<String>,
}

fn is_key(k: &str) -> bool {
    k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `s` as one word of a POSIX shell: single-quoted, `'` written `'\\''`.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A word as the shell reads it, from its text as written (`raw`): quotes removed, a
/// backslash outside quotes taking the next character literally, and inside double quotes
/// only before `$`, `` ` ``, `"`, `\\` or a newline (`"a\nb"` stays four characters, as
/// `bash` passes it). A Unix command's argv is made with it, so it gets the shell's words
/// even where the pipeline language reads a native filter's differently.
pub(crate) fn shell_word(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut it = raw.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' => match it.next() {
                Some('\n') => {}
                // A backslash that ends the text stays, as bash leaves it.
                None => out.push('\\'),
                Some(d) => out.push(d),
            },
            '\'' => {
                for d in it.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    out.push(d);
                }
            }
            '"' => {
                while let Some(d) = it.next() {
                    match d {
                        '"' => break,
                        '\\' => match it.peek() {
                            Some(&e) if matches!(e, '$' | '`' | '"' | '\\') => {
                                out.push(e);
                                it.next();
                            }
                            Some('\n') => {
                                it.next();
                            }
                            _ => out.push('\\'),
                        },
                        d => out.push(d),
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The first character of a word as written (quotes and escapes included) that the shell
/// would not take literally and the pipeline language does: an unquoted redirection
/// (`<`, `>`), `;`, glob (`*`, `?`, `[`), brace expansion (`{a,b}`, `{1..3}`), or a
/// leading `~` or `#`; a `$` or backquote
/// unquoted or in double quotes. Its byte offset and the character.
pub(crate) fn shell_syntax(raw: &str) -> Option<(usize, char)> {
    let (mut single, mut double, mut escaped) = (false, false, false);
    for (i, c) in raw.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '$' | '`' if !single => return Some((i, c)),
            '<' | '>' | ';' | '*' | '?' if !single && !double => return Some((i, c)),
            // `[` opens a glob only with a `]` after it in the word (`[ -f x ]` is test).
            '[' if !single && !double && raw[i..].contains(']') => return Some((i, c)),
            '~' | '#' if i == 0 => return Some((i, c)),
            // Brace expansion: `{a,b}`, `{1..3}` (not `{}` as find's -exec takes it).
            '{' if !single && !double => {
                if let Some(close) = raw[i..].find('}') {
                    let inner = &raw[i + 1..i + close];
                    if !inner.contains(['\'', '"', '\\'])
                        && (inner.contains(',') || inner.contains(".."))
                    {
                        return Some((i, c));
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// Shell keywords: no command of theirs runs, the pipeline language has no compound
/// commands (refused, pointing to `bash -c`).
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "while", "until", "do", "done", "case", "esac", "function",
    "select", "time", "{", "}", "[[", "]]",
];

/// What the first word of an atom names: the resolver's answer (a native filter, or a
/// program on PATH); else, as in the shell, a Unix command that is not there, which runs
/// as the shell runs it (`command not found` on standard error, exit status 127, the rest
/// of the pipeline runs on). None, an error, only for an unquoted shell keyword and for a
/// near miss of a native filter's name (`cuont`, `ipp`: the filter was meant).
pub(crate) fn kind_of(resolver: &dyn Resolver, head: &Word) -> Option<FilterKind> {
    let name = head.text.as_str();
    if let Some(k) = resolver.resolve(name) {
        return Some(k);
    }
    if KEYWORDS.contains(&name) && !head.quoted {
        return None;
    }
    let natives = resolver.native_names();
    if !closest(name, natives.iter().map(String::as_str)).is_empty() {
        return None;
    }
    Some(FilterKind::Unix)
}

/// Turns an atom's words (and its `@space=` / `@name=` node options, `opts`) into a node
/// kind, checking names and options; its kind is [`kind_of`], or the caller's when
/// `forced` is given (a native name that means the Unix tool of that name, see
/// [`crate::build`]). `shell`: the whole pipeline is also a shell pipeline (Unix commands
/// joined by plain `|`), where a Unix command's `space=` word is its argument without a
/// word said; elsewhere that spelling is refused, since it once placed the command.
pub(crate) fn resolve_atom(
    words: &[Word],
    opts: &[Word],
    forced: Option<FilterKind>,
    shell: bool,
    resolver: &dyn Resolver,
    input: &str,
) -> Result<Resolved, Diagnostic> {
    let head = &words[0];
    if let Some(eq) = head.eq {
        return Err(option_as_head(words, eq, resolver, input));
    }
    match forced.or_else(|| kind_of(resolver, head)) {
        Some(FilterKind::Unix) => resolve_unix(words, opts, shell, input),
        Some(FilterKind::Native) => resolve_native(words, opts, resolver, input),
        None => Err(unresolved(head, resolver, input)),
    }
}

/// An atom whose first word is `key=value`: the shell's environment assignment before a
/// Unix command (`VAR=x cmd`), or an option written before its filter.
fn option_as_head(words: &[Word], eq: usize, resolver: &dyn Resolver, input: &str) -> Diagnostic {
    let head = &words[0];
    // `VAR=x cmd`: the shell's environment assignment before a command (the command
    // not a native filter, whose options these would be).
    let var = &head.text[..eq];
    let shell_var = var.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let command = words[1..]
        .iter()
        .find(|w| w.eq.is_none())
        .filter(|w| resolver.resolve(&w.text) != Some(FilterKind::Native));
    if let (true, Some(cmd)) = (shell_var, command) {
        return Diagnostic::new(
            DiagKind::ShellSyntax,
            format!(
                "an environment assignment '{}' before Unix command '{}': streamline run passes words as they are and does not set variables",
                head.text, cmd.text
            ),
            head.span,
            input,
        )
        .help(format!(
            "for the shell's meaning, give it to the shell: bash -c {} (alone, or as one stage: streamline run \"bash -c '...' | count\"); or let env set it: env {}",
            sh_quote(input.trim()),
            input[head.span.start..words.last().expect("a head").span.end].trim()
        ));
    }
    Diagnostic::new(
        DiagKind::BadOption,
        format!("expected a filter name, found option '{}'", head.text),
        head.span,
        input,
    )
    .help(format!(
        "options follow the filter they configure: write 'FILTER {}'",
        head.text
    ))
}

/// A head word that names neither a native filter nor a command: a shell keyword, or an
/// unknown name (with the native names it is close to).
fn unresolved(head: &Word, resolver: &dyn Resolver, input: &str) -> Diagnostic {
    unresolved_name(&head.text, head.quoted, head.span, resolver, input)
}

/// [`unresolved`] of a name (`quoted`: written with quotes or escapes) at `span`.
fn unresolved_name(
    name: &str,
    quoted: bool,
    span: Span,
    resolver: &dyn Resolver,
    input: &str,
) -> Diagnostic {
    let natives = resolver.native_names();
    let near = closest(name, natives.iter().map(String::as_str));
    let shown = if name.is_empty() {
        "''".to_string()
    } else {
        format!("'{}'", name)
    };
    if KEYWORDS.contains(&name) && !quoted {
        return Diagnostic::new(
            DiagKind::ShellSyntax,
            format!("'{name}' is a shell keyword: the pipeline language has no compound commands"),
            span,
            input,
        )
        .help(format!(
            "for the shell's meaning, give it to the shell: bash -c {} (alone, or as one stage: streamline run \"bash -c '...' | count\")",
            sh_quote(input.trim())
        ));
    }
    Diagnostic::new(
        DiagKind::UnknownFilter,
        format!("unknown filter {shown} (not a native filter, and not found on PATH either)"),
        span,
        input,
    )
    .maybe_help(did_you_mean(&near))
}

/// The Unix commands of a graph another party checked, resolved where it runs. A party
/// that checks a pipeline for another ([`OrCommand`]: the daemon, for its client) takes
/// every name that is not a native filter for a command; the runner, with its own PATH
/// and directory (`resolver`, a [`WithPath`]), refuses what [`crate::parse`] would have
/// refused there, with the same message: a name that is no program there and no command
/// at all (an unquoted shell keyword, or a name close to a native filter's: a typo); and a
/// name that is a native filter here but was taken there for a command (other than a
/// native filter that means the Unix tool of its name, which the neighbours decided).
/// `input`: the text the graph was parsed from (its spans point into it).
pub fn recheck_commands(
    g: &crate::Graph,
    input: &str,
    resolver: &dyn Resolver,
) -> Result<(), Diagnostic> {
    for n in &g.nodes {
        let NodeKind::Unix { argv, .. } = &n.kind else {
            continue;
        };
        let Some(name) = argv.first() else { continue };
        // The command's word as written: from the node's start to the first blank.
        let written = input.get(n.span.start..n.span.end).unwrap_or("");
        let head = written.find(char::is_whitespace).unwrap_or(written.len());
        let span = Span::new(n.span.start, n.span.start + head);
        let quoted = written[..head].contains(['\'', '"', '\\']);
        match resolver.resolve(name) {
            Some(FilterKind::Native) if !resolver.unix_tool(name) => {
                return Err(Diagnostic::new(
                    DiagKind::UnknownFilter,
                    format!(
                        "'{name}' was checked as a Unix command, but here it is a native filter"
                    ),
                    span,
                    input,
                ))
            }
            Some(_) => {}
            None if (KEYWORDS.contains(&name.as_str()) && !quoted)
                || !closest(name, resolver.native_names().iter().map(String::as_str))
                    .is_empty() =>
            {
                return Err(unresolved_name(name, quoted, span, resolver, input))
            }
            None => {}
        }
    }
    Ok(())
}

/// A Unix command's atom: its words are its argv (checked for shell syntax streamline run
/// does not perform); `@space=`/`@name=` place and name it.
fn resolve_unix(
    words: &[Word],
    opts: &[Word],
    shell: bool,
    input: &str,
) -> Result<Resolved, Diagnostic> {
    let head = &words[0];
    let name = &head.text;
    for w in words {
        if let Some((at, c)) = shell_syntax(&input[w.span.start..w.span.end]) {
            let what = match c {
                '<' | '>' => "a redirection",
                ';' => "';' (a command list)",
                '*' | '?' | '[' => "a glob",
                '$' => "'$' (an expansion)",
                '`' => "a backquote (command substitution)",
                '~' => "'~' (a home directory)",
                '{' => "a brace expansion",
                _ => "'#' (a comment)",
            };
            return Err(Diagnostic::new(
                DiagKind::ShellSyntax,
                format!(
                    "{what} in the words of Unix command '{name}': streamline run passes words as they are and does not expand, redirect or sequence them"
                ),
                Span::new(w.span.start + at, w.span.start + at + c.len_utf8()),
                input,
            )
            .help(format!(
                "for the shell's meaning, give it to the shell: bash -c {} (alone, or as one stage: streamline run \"bash -c '...' | count\"); to pass the character to the command, quote it",
                sh_quote(input.trim())
            )));
        }
    }
    let word = |w: &Word| shell_word(&input[w.span.start..w.span.end]);
    let mut argv = vec![word(head)];
    let mut place = Placement::default();
    let mut node_name = None;
    // Every word after the command's name is its own, as in the shell.
    for w in &words[1..] {
        if let Some(eq) = w.eq {
            let key = &w.text[..eq];
            if !shell && crate::graph::UNIX_CONTROL_OPTIONS.contains(&key) {
                return Err(old_node_option(name, w, input));
            }
        }
        argv.push(word(w));
    }
    node_options(name, words, opts, &mut place, &mut node_name, input)?;
    Ok(Resolved {
        kind: NodeKind::Unix { argv, place },
        name: node_name,
    })
}

/// A native filter's atom: positional parameters, its own options (checked against the
/// keys it declares), the control options and the placement word.
fn resolve_native(
    words: &[Word],
    opts: &[Word],
    resolver: &dyn Resolver,
    input: &str,
) -> Result<Resolved, Diagnostic> {
    let name = &words[0].text;
    let known = resolver.params(name);
    let mut params = Vec::new();
    let mut options: Vec<(String, String)> = Vec::new();
    let mut node_name = None;
    let mut place = Placement::default();
    let mut seen: std::collections::HashSet<&str> = Default::default();
    for w in &words[1..] {
        let Some(eq) = w.eq else {
            params.push(w.text.clone());
            continue;
        };
        let (key, value, own, key_span) =
            native_option(name, w, eq, known.as_deref(), &mut seen, input)?;
        if key == "name" && !own {
            node_name = Some(value.to_string());
        } else if key == SPACE && !own {
            place.space = Some(space_spec(name, value, words, input)?);
        } else if key == PLACED {
            // The one user-writable placement word, typed here (crate::place).
            place.side = Some(Side::parse(value).map_err(|m| {
                Diagnostic::new(
                    DiagKind::BadOption,
                    m,
                    Span::new(key_span.end + 1, w.span.end),
                    input,
                )
                .help("'placed' takes user (or kernel, which the kernel placement sets after `rx`)")
            })?);
        } else {
            options.push((key.to_string(), value.to_string()));
        }
    }
    if let Some(w) = opts.iter().find(|o| {
        let key = &o.text[..o.eq.expect("a node option has '='")];
        seen.contains(&key) && !known.as_ref().is_some_and(|k| k.iter().any(|p| p == key))
    }) {
        return Err(Diagnostic::new(
            DiagKind::BadOption,
            format!("option '{}' given twice", &w.text[..w.eq.unwrap_or(0)]),
            w.span,
            input,
        ));
    }
    node_options(name, words, opts, &mut place, &mut node_name, input)?;
    Ok(Resolved {
        kind: NodeKind::Filter {
            filter: name.clone(),
            params,
            options,
            place,
        },
        name: node_name,
    })
}

/// Checks one `key=value` word of native filter `name` (a key, a value, given once, one
/// the filter or the control options know, a valid control value): the key, the value,
/// whether the key is the filter's own, and the key's span.
fn native_option<'w>(
    name: &str,
    w: &'w Word,
    eq: usize,
    known: Option<&[String]>,
    seen: &mut std::collections::HashSet<&'w str>,
    input: &str,
) -> Result<(&'w str, &'w str, bool, Span), Diagnostic> {
    let (key, value) = (&w.text[..eq], &w.text[eq + 1..]);
    let key_span = Span::new(w.span.start, w.span.start + eq);
    if !is_key(key) {
        let msg = if key.is_empty() {
            format!("malformed option '{}': no key before '='", w.text)
        } else {
            format!("malformed option '{}': '{key}' is not a key", w.text)
        };
        return Err(Diagnostic::new(DiagKind::BadOption, msg, w.span, input).help(format!(
                "an option is key=value with a key of letters, digits, '_', '-', '.'; to pass the word as a parameter, quote it: {}",
                quote(&w.text)
            )));
    }
    let control = CONTROL_OPTIONS.contains(&key);
    // `key=` with nothing after it; `key=""` is an explicit empty value.
    let bare_empty = value.is_empty() && !w.quoted;
    if bare_empty || (control && value.is_empty()) {
        return Err(Diagnostic::new(
            DiagKind::BadOption,
            format!("empty value for option '{key}'"),
            w.span,
            input,
        )
        .help(if control {
            format!("'{key}' takes {}", control_values(key))
        } else {
            format!("write {key}=VALUE, or {key}=\"\" for an empty value")
        }));
    }
    if !seen.insert(key) {
        return Err(Diagnostic::new(
            DiagKind::BadOption,
            format!("option '{key}' given twice"),
            key_span,
            input,
        ));
    }
    let own = known.as_ref().is_some_and(|k| k.iter().any(|p| p == key));
    if !control && !own {
        if let Some(k) = &known {
            let mut cands: Vec<&str> = k.iter().map(String::as_str).collect();
            cands.extend(CONTROL_OPTIONS);
            let takes = if k.is_empty() {
                format!("'{name}' takes no options of its own")
            } else {
                format!("'{name}' takes {}", k.join(", "))
            };
            let help = match did_you_mean(&closest(key, cands)) {
                Some(d) => format!("{d} ({takes}, besides the control options)"),
                None => format!(
                    "{takes}, besides the control options {}",
                    CONTROL_OPTIONS.join(", ")
                ),
            };
            return Err(Diagnostic::new(
                DiagKind::BadOption,
                format!("unknown option '{key}' for filter '{name}'"),
                key_span,
                input,
            )
            .help(help));
        }
    }
    if control && !own {
        check_control(key, value).map_err(|m| {
            Diagnostic::new(
                DiagKind::BadOption,
                m,
                Span::new(key_span.end + 1, w.span.end),
                input,
            )
            .help(format!("'{key}' takes {}", control_values(key)))
        })?;
    }
    Ok((key, value, own, key_span))
}

/// `space=` or `name=` after a Unix command, in a pipeline that is no shell pipeline:
/// the command's argument by the rule (every word after a command's name is its own),
/// but the spelling that placed or named the command before `@space=` did, so refused
/// rather than passed on with a meaning the writer may not have meant.
fn old_node_option(name: &str, w: &Word, input: &str) -> Diagnostic {
    let raw = &input[w.span.start..w.span.end];
    Diagnostic::new(
        DiagKind::BadOption,
        format!(
            "'{raw}' after Unix command '{name}' is the command's argument, as in the shell (every word after a command's name is its own), not Streamline's option"
        ),
        w.span,
        input,
    )
    .help(format!(
        "to place or name the command, write the option after '@': {name} ... @{raw}; to pass the word to '{name}', quote it: {}",
        sh_quote(&w.text)
    ))
}

/// Applies the `@space=` / `@name=` node options of an atom (`words`) to its placement
/// and name: empty values and a second one refused.
fn node_options(
    name: &str,
    words: &[Word],
    opts: &[Word],
    place: &mut Placement,
    node_name: &mut Option<String>,
    input: &str,
) -> Result<(), Diagnostic> {
    for w in opts {
        let eq = w.eq.expect("a node option has '='");
        let (key, value) = (&w.text[..eq], &w.text[eq + 1..]);
        if value.is_empty() {
            return Err(Diagnostic::new(
                DiagKind::BadOption,
                format!("option '@{key}=' has an empty value"),
                w.span,
                input,
            )
            .help(format!("'{key}' takes {}", control_values(key))));
        }
        let twice = if key == SPACE {
            let had = place.space.is_some();
            if !had {
                place.space = Some(space_spec(name, value, words, input)?);
            }
            had
        } else {
            node_name.replace(value.to_string()).is_some()
        };
        if twice {
            return Err(Diagnostic::new(
                DiagKind::BadOption,
                format!("option '{key}' given twice"),
                w.span,
                input,
            ));
        }
    }
    Ok(())
}

/// A `space=` value, typed; a bad one is an error under the whole node, naming it.
fn space_spec(
    name: &str,
    value: &str,
    words: &[Word],
    input: &str,
) -> Result<SpaceSpec, Diagnostic> {
    SpaceSpec::parse(value).map_err(|m| {
        let at = Span::new(
            words[0].span.start,
            words.last().map_or(words[0].span.end, |w| w.span.end),
        );
        Diagnostic::new(DiagKind::BadOption, format!("{name}: {m}"), at, input)
            .help(format!("'space' takes {}", control_values(SPACE)))
    })
}

fn control_values(key: &str) -> &'static str {
    match key {
        "export" | "exportdata" | "reuse" => "yes or no",
        "share" => "yes, no or auto",
        "size" => "a length: digits with an optional k, m or g suffix",
        "mode" => "octal permissions, e.g. 0644",
        SPACE => "local, N or tN (a thread space), pN (a process space), a list A,B,... (one copy in each), or the planner's kernel, thread, process, user (optionally :CPU), cpuN",
        "name" => "a name",
        "file" => "a file name",
        _ => "a blob id",
    }
}

fn check_control(key: &str, value: &str) -> Result<(), String> {
    let ok = match key {
        "export" | "exportdata" | "reuse" => matches!(value, "yes" | "no"),
        "share" => matches!(value, "yes" | "no" | "auto"),
        "size" => {
            let digits = value.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G']);
            !digits.is_empty()
                && value.len() - digits.len() <= 1
                && digits.chars().all(|c| c.is_ascii_digit())
        }
        "mode" => (1..=4).contains(&value.len()) && value.chars().all(|c| ('0'..='7').contains(&c)),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("bad value '{value}' for option '{key}'"))
    }
}
