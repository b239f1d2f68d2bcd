//! Secrets out of sight: the one redaction of pipeline text, filter options and messages
//! that everything shown to anyone goes through (`ps`, PipesFS, the daemon's log, error
//! messages with their carets).
//!
//! Which parameters are secret is the filters' declarations' word, asked through the
//! [`Resolver`] ([`Resolver::secrets`]): a secret option's value is shown as `<secret>`
//! (`encrypt key=<secret>`), and so is a secret positional parameter (`xor <secret>`).
//! Words of a filter the resolver does not know as native (a Unix command, a misspelt
//! name) are redacted by every key any filter declares secret ([`Resolver::secret_keys`]),
//! so a typo does not publish the key it was given. Text that does not lex (an
//! unterminated quote) is redacted from a secret word, or the unterminated part that
//! holds one, to its end.
//!
//! Messages that quote a value (a build error naming `key=...`) are scrubbed of the
//! values the redaction removed ([`Redacted::scrub`]); spans into the original text map
//! onto the redacted one ([`Redacted::span`]), so a caret stays under its word.

use crate::diag::{render, Diagnostic};
use crate::lexer::{lex, Tok, Word};
use crate::resolve::{FilterKind, Resolver};
use crate::span::Span;

/// What a secret value is shown as.
pub const SECRET: &str = "<secret>";

/// Pipeline text with its secrets replaced (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redacted {
    text: String,
    /// Each replacement: the span of the original it replaced, and where the replacement
    /// starts in `text` (its length is `SECRET.len()`), in order.
    cuts: Vec<(Span, usize)>,
    /// The values taken out, as written and as read (quotes removed), longest first.
    values: Vec<String>,
}

impl Redacted {
    /// The text as it may be shown.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether nothing was secret.
    pub fn is_clean(&self) -> bool {
        self.cuts.is_empty()
    }

    /// Where byte `p` of the original text is in the redacted text (a position inside a
    /// secret maps to the start of its `<secret>`, or to its end if `end`).
    fn pos(&self, p: usize, end: bool) -> usize {
        let mut delta: isize = 0;
        for (cut, at) in &self.cuts {
            if p <= cut.start {
                break;
            }
            if p < cut.end {
                return if end { at + SECRET.len() } else { *at };
            }
            delta += SECRET.len() as isize - cut.len() as isize;
        }
        (p as isize + delta).max(0) as usize
    }

    /// A span of the original text, on the redacted text.
    pub fn span(&self, s: Span) -> Span {
        let start = self.pos(s.start, false);
        Span::new(start, self.pos(s.end, true).max(start))
    }

    /// `message` with every value the redaction took out replaced by `<secret>` (for
    /// messages that quote what they were given).
    pub fn scrub(&self, message: &str) -> String {
        let mut out = message.to_string();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), SECRET);
            }
        }
        out
    }

    /// `head` over the redacted text with a caret under `span` of the original
    /// ([`crate::render`] on what may be shown).
    pub fn render(&self, head: &str, span: Span, help: Option<&str>) -> String {
        let help = help.map(|h| self.scrub(h));
        render(
            &self.scrub(head),
            self.span(span),
            &self.text,
            help.as_deref(),
        )
    }
}

impl Diagnostic {
    /// The diagnostic as it may be shown: its input redacted (the caret moved with it),
    /// secret values scrubbed from its message and help.
    pub fn redacted(&self, resolver: &dyn Resolver) -> Diagnostic {
        let r = redact(&self.input, resolver);
        if r.is_clean() {
            return self.clone();
        }
        Diagnostic {
            kind: self.kind,
            message: r.scrub(&self.message),
            span: r.span(self.span),
            help: self.help.as_deref().map(|h| r.scrub(h)),
            input: r.text,
        }
    }
}

/// Whether `key` (or, with `key` None, positional parameter `pos`) of the filter named
/// `head` is secret. A head that is not a native filter the resolver knows (a Unix
/// command, an unknown name, none) is judged by every key declared secret anywhere.
fn is_secret(resolver: &dyn Resolver, head: Option<&str>, key: Option<&str>, pos: usize) -> bool {
    match head.filter(|h| resolver.resolve(h) == Some(FilterKind::Native)) {
        Some(h) => resolver.secrets(h).iter().any(|s| match key {
            Some(k) => s.key == k,
            None => s.position == Some(pos),
        }),
        None => key.is_some_and(|k| resolver.secret_keys().iter().any(|s| s == k)),
    }
}

/// The spans (of `input`) of the secret values among `tokens`, and the values as read.
fn secret_words(tokens: &[crate::lexer::Token], resolver: &dyn Resolver) -> Vec<(Span, String)> {
    let mut out = Vec::new();
    // The current atom's filter name (None before one, or for a group); whether the next
    // word is one; whether it is a `@hints` word; positional parameters seen.
    let mut head: Option<String> = None;
    let mut want_head = true;
    let mut hint = false;
    let mut pos = 0;
    // Whether the atom's first word is not a native filter.
    let mut foreign = true;
    for t in tokens {
        match &t.tok {
            Tok::Word(_) if hint => hint = false,
            Tok::Word(w) if want_head && w.eq.is_none() => {
                want_head = false;
                head = Some(w.text.clone());
                pos = 0;
                foreign = resolver.resolve(&w.text) != Some(FilterKind::Native);
            }
            // In the words of something that is not a native filter (a Unix command, an
            // edit: `insert after gen xor KEY`), a native filter's name starts its words.
            Tok::Word(w)
                if foreign
                    && w.eq.is_none()
                    && resolver.resolve(&w.text) == Some(FilterKind::Native) =>
            {
                head = Some(w.text.clone());
                pos = 0;
            }
            Tok::Word(w) => {
                if want_head {
                    // An option where the name should be: whose it is, nobody knows.
                    want_head = false;
                    head = None;
                    foreign = true;
                }
                if let Some(s) = secret_in(w, resolver, head.as_deref(), &mut pos) {
                    out.push(s);
                }
            }
            Tok::At => hint = true,
            Tok::Pipe { .. } | Tok::Par(_) | Tok::Bang | Tok::LParen => {
                want_head = true;
                hint = false;
            }
            Tok::RParen => {
                head = None;
                foreign = true;
                hint = false;
            }
        }
    }
    out
}

/// The secret part of word `w` of filter `head` (its value after `=`, or the whole word
/// for a secret positional parameter), if any; counts positional parameters in `pos`.
fn secret_in(
    w: &Word,
    resolver: &dyn Resolver,
    head: Option<&str>,
    pos: &mut usize,
) -> Option<(Span, String)> {
    match w.eq {
        Some(eq) => {
            let key = &w.text[..eq];
            // The text before `=` is bare (the lexer's `eq`), so it is as long in the input.
            is_secret(resolver, head, Some(key), 0).then(|| {
                (
                    Span::new(w.span.start + eq + 1, w.span.end),
                    w.text[eq + 1..].to_string(),
                )
            })
        }
        None => {
            let p = *pos;
            *pos += 1;
            is_secret(resolver, head, None, p).then(|| (w.span, w.text.clone()))
        }
    }
}

/// `input` with the values of secret parameters replaced by `<secret>` (see the module
/// documentation).
pub fn redact(input: &str, resolver: &dyn Resolver) -> Redacted {
    let mut secrets = match lex(input) {
        Ok(tokens) => secret_words(&tokens, resolver),
        Err(d) => {
            // Everything before the unterminated quote lexes; the quote runs to the end.
            // With a stand-in for the rest, the word the quote is part of is judged as if
            // it were closed; the rest goes if that word is secret or the rest holds a
            // key declared secret anywhere.
            let at = d.span.start.min(input.len());
            let mut probe = input[..at].to_string();
            probe.push('x');
            let tokens = lex(&probe).unwrap_or_default();
            let mut s = secret_words(&tokens, resolver);
            let tail = &input[at..];
            let word_secret = s.last().is_some_and(|(sp, _)| sp.end == at + 1);
            if word_secret {
                let (sp, _) = s.pop().expect("checked");
                s.push((
                    Span::new(sp.start, input.len()),
                    input[sp.start..].to_string(),
                ));
            } else if tokens.is_empty()
                || resolver
                    .secret_keys()
                    .iter()
                    .any(|k| tail.contains(&format!("{k}=")))
                || resolver
                    .native_names()
                    .iter()
                    .filter(|n| !resolver.secrets(n).is_empty())
                    .any(|n| tail.split_whitespace().any(|w| w == n))
            {
                s.push((Span::new(at, input.len()), tail.to_string()));
            }
            s
        }
    };
    secrets.sort_by_key(|(s, _)| s.start);
    let mut text = String::with_capacity(input.len());
    let mut cuts = Vec::new();
    let mut values = Vec::new();
    let mut last = 0;
    for (span, value) in secrets {
        if span.start < last || span.end > input.len() {
            continue;
        }
        text.push_str(&input[last..span.start]);
        cuts.push((span, text.len()));
        text.push_str(SECRET);
        last = span.end;
        for v in [value, input[span.start..span.end].to_string()] {
            if !v.is_empty() && !values.contains(&v) {
                values.push(v);
            }
        }
    }
    text.push_str(&input[last..]);
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    Redacted { text, cuts, values }
}

/// `options` of filter `filter` as they may be shown: each secret one's value `<secret>`.
pub fn redact_options(
    filter: &str,
    options: &[(String, String)],
    resolver: &dyn Resolver,
) -> Vec<(String, String)> {
    options
        .iter()
        .map(|(k, v)| {
            if is_secret(resolver, Some(filter), Some(k), 0) {
                (k.clone(), SECRET.to_string())
            } else {
                (k.clone(), v.clone())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::StaticResolver;

    fn r() -> StaticResolver {
        StaticResolver::new()
            .native_any("gen")
            .native_any("count")
            .native_any("kafkaout")
            .native_any("encrypt")
            .native_any("xor")
            .secret("encrypt", "key", None)
            .secret("xor", "key", Some(0))
            .unix("sh")
    }

    #[test]
    fn secret_values_are_replaced_and_others_kept() {
        let t = redact("gen | encrypt key=00ff name=e | count", &r());
        assert_eq!(t.text(), "gen | encrypt key=<secret> name=e | count");
        let t = redact("gen | xor 5a | kafkaout key=flow", &r());
        assert_eq!(t.text(), "gen | xor <secret> | kafkaout key=flow");
        let t = redact("gen | xor key=\"5a 5b\" @busy | count", &r());
        assert_eq!(t.text(), "gen | xor key=<secret> @busy | count");
        assert!(redact("gen | count", &r()).is_clean());
    }

    #[test]
    fn unknown_heads_are_judged_by_every_secret_key() {
        // A Unix command, a misspelt filter, an option where the name should be.
        assert_eq!(redact("sh key=1", &r()).text(), "sh key=<secret>");
        assert_eq!(redact("encryt key=1", &r()).text(), "encryt key=<secret>");
        assert_eq!(redact("key=1 | count", &r()).text(), "key=<secret> | count");
        // The key of a known filter whose `key` is not secret stays.
        assert_eq!(
            redact("kafkaout key=flow", &r()).text(),
            "kafkaout key=flow"
        );
    }

    #[test]
    fn a_native_filter_inside_other_words_is_judged_as_itself() {
        // An edit's text, a Unix command's arguments.
        assert_eq!(
            redact("insert after gen xor 5a", &r()).text(),
            "insert after gen xor <secret>"
        );
        assert_eq!(
            redact("replace count encrypt key=00", &r()).text(),
            "replace count encrypt key=<secret>"
        );
        // Within a native filter's own words, other names are just words.
        assert_eq!(redact("gen xor 5a", &r()).text(), "gen xor 5a");
    }

    #[test]
    fn unterminated_quotes_do_not_leak() {
        assert_eq!(
            redact("gen | encrypt key=\"00ff | count", &r()).text(),
            "gen | encrypt key=<secret>"
        );
        assert_eq!(
            redact("gen | sh -c 'x | encrypt key=00", &r()).text(),
            "gen | sh -c <secret>"
        );
        assert_eq!(
            redact("gen | sh -c 'x | xor 5a", &r()).text(),
            "gen | sh -c <secret>"
        );
        assert_eq!(
            redact("gen | sh -c 'echo hi", &r()).text(),
            "gen | sh -c 'echo hi"
        );
    }

    #[test]
    fn spans_follow_and_messages_are_scrubbed() {
        // `gex`: a near miss of `gen` (an unknown word that is none runs as a command).
        let input = "gen | encrypt key=00ffee | gex";
        let t = redact(input, &r());
        let bogus = Span::new(27, 30);
        assert_eq!(&input[bogus.start..bogus.end], "gex");
        let s = t.span(bogus);
        assert_eq!(&t.text()[s.start..s.end], "gex");
        let k = t.span(Span::new(6, 24));
        assert_eq!(&t.text()[k.start..k.end], "encrypt key=<secret>");
        assert_eq!(
            t.scrub("parameter key=00ffee: expected hex"),
            "parameter key=<secret>: expected hex"
        );
        let d = crate::parse(input, &r()).unwrap_err().redacted(&r());
        let shown = d.to_string();
        assert!(!shown.contains("00ffee"), "{shown}");
        assert!(shown.contains("gex"), "{shown}");
        let caret_line = shown.lines().nth(2).unwrap();
        let col = caret_line.find('^').unwrap();
        assert_eq!(&shown.lines().nth(1).unwrap()[col..col + 3], "gex");
    }

    #[test]
    fn options_are_redacted_by_their_filter() {
        let o = vec![
            ("key".to_string(), "00".to_string()),
            ("name".to_string(), "e".to_string()),
        ];
        assert_eq!(
            redact_options("encrypt", &o, &r()),
            vec![
                ("key".to_string(), SECRET.to_string()),
                ("name".to_string(), "e".to_string())
            ]
        );
        assert_eq!(redact_options("kafkaout", &o, &r()), o);
    }
}
