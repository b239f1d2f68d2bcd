//! Tokens. Words are shell-like: bare runs, `"..."` (backslash escapes `\"`, `\\`, `\n`,
//! `\t`; any other backslash is kept) and `'...'` (literal) segments concatenate into one
//! word; a bare backslash makes the next character literal. Operator characters
//! `| + * & ! ( ) @` and whitespace end a bare run; quote a word to include them.
//!
//! A selector is lexed together with its `|`: the characters right after `|` up to
//! whitespace, a quote or another operator (`!` excepted) are the selector text, so
//! `a |!80 b` has selector `!80` and `a|b` has selector `b` (and then misses an operand).

use crate::diag::{DiagKind, Diagnostic};
use crate::span::Span;

/// Characters that end a bare word in the language.
pub(crate) fn is_operator_char(c: char) -> bool {
    matches!(c, '|' | '+' | '*' | '&' | '!' | '(' | ')' | '@')
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParOp {
    /// `+`
    Plus,
    /// `++` or `*`
    Or,
    /// `+*` or `&`
    And,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Word {
    /// Text with quotes and escapes removed.
    pub text: String,
    pub span: Span,
    /// Byte index into `text` of a `=` that lies in the word's leading bare (unquoted,
    /// unescaped) part: the word is written `key=value`.
    pub eq: Option<usize>,
    /// Whether any part of the word was quoted or escaped.
    pub quoted: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Word(Word),
    /// `|` and the selector text right after it (may be empty) with its span.
    Pipe {
        sel: String,
        sel_span: Span,
    },
    Par(ParOp),
    Bang,
    LParen,
    RParen,
    At,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: Span,
}

impl Tok {
    /// How an error message names the token.
    pub(crate) fn describe(&self, input: &str, span: Span) -> String {
        match self {
            Tok::Word(w) => format!("'{}'", truncate(&w.text)),
            _ => format!("'{}'", truncate(&input[span.start..span.end])),
        }
    }
}

fn truncate(s: &str) -> String {
    if s.chars().count() > 40 {
        let t: String = s.chars().take(40).collect();
        format!("{t}...")
    } else {
        s.to_string()
    }
}

pub(crate) fn lex(input: &str) -> Result<Vec<Token>, Diagnostic> {
    let mut toks = Vec::new();
    let mut it = input.char_indices().peekable();
    while let Some(&(i, c)) = it.peek() {
        if c.is_whitespace() {
            it.next();
            continue;
        }
        let single = |tok: Tok, len: usize| Token {
            tok,
            span: Span::new(i, i + len),
        };
        match c {
            '|' => {
                it.next();
                let sel_start = i + 1;
                let mut end = sel_start;
                while let Some(&(j, d)) = it.peek() {
                    if d.is_whitespace()
                        || matches!(d, '"' | '\'')
                        || (is_operator_char(d) && d != '!')
                    {
                        break;
                    }
                    it.next();
                    end = j + d.len_utf8();
                }
                toks.push(Token {
                    tok: Tok::Pipe {
                        sel: input[sel_start..end].to_string(),
                        sel_span: Span::new(sel_start, end),
                    },
                    span: Span::new(i, end),
                });
            }
            // Glued to the word after it, a '+' or '*' starts that word, as in the shell
            // (`date +%s`, `ls *.txt`); operators stand apart from the words they join.
            '+' | '*' if glued_to_word(input, i + 1) => toks.push(word(input, &mut it)?),
            '+' => {
                it.next();
                match it.peek() {
                    Some(&(_, '+')) => {
                        it.next();
                        toks.push(single(Tok::Par(ParOp::Or), 2));
                    }
                    Some(&(_, '*')) => {
                        it.next();
                        toks.push(single(Tok::Par(ParOp::And), 2));
                    }
                    _ => toks.push(single(Tok::Par(ParOp::Plus), 1)),
                }
            }
            '*' | '&' | '!' | '(' | ')' | '@' => {
                it.next();
                let tok = match c {
                    '*' => Tok::Par(ParOp::Or),
                    '&' => Tok::Par(ParOp::And),
                    '!' => Tok::Bang,
                    '(' => Tok::LParen,
                    ')' => Tok::RParen,
                    _ => Tok::At,
                };
                toks.push(single(tok, 1));
            }
            _ => toks.push(word(input, &mut it)?),
        }
    }
    Ok(toks)
}

/// Whether the character at byte `at` continues a word: not the end, a space, or an
/// operator.
fn glued_to_word(input: &str, at: usize) -> bool {
    input[at..]
        .chars()
        .next()
        .is_some_and(|c| !c.is_whitespace() && !is_operator_char(c))
}

fn word(
    input: &str,
    it: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
) -> Result<Token, Diagnostic> {
    let start = it.peek().map(|&(i, _)| i).unwrap_or(input.len());
    let mut text = String::new();
    let mut eq = None;
    let mut quoted = false;
    let mut end = start;
    while let Some(&(i, c)) = it.peek() {
        // Inside a word '+' and '*' are the word's, as the shell reads them (`paste -sd+`,
        // `a*b`); the other operators end it (`tcp@busy` is a filter with a hint).
        if c.is_whitespace() || (is_operator_char(c) && !matches!(c, '+' | '*')) {
            break;
        }
        it.next();
        end = i + c.len_utf8();
        match c {
            '"' | '\'' => {
                quoted = true;
                let mut closed = false;
                while let Some((j, d)) = it.next() {
                    end = j + d.len_utf8();
                    if d == c {
                        closed = true;
                        break;
                    }
                    if d == '\\' && c == '"' {
                        match it.peek() {
                            Some(&(k, e)) if matches!(e, '"' | '\\' | 'n' | 't') => {
                                it.next();
                                end = k + e.len_utf8();
                                text.push(match e {
                                    'n' => '\n',
                                    't' => '\t',
                                    e => e,
                                });
                            }
                            _ => text.push('\\'),
                        }
                    } else {
                        text.push(d);
                    }
                }
                if !closed {
                    let what = if c == '"' { "double" } else { "single" };
                    return Err(Diagnostic::new(
                        DiagKind::UnterminatedQuote,
                        format!("unterminated {what} quote"),
                        Span::new(i, input.len()),
                        input,
                    )
                    .help(format!("close the quote with {c}")));
                }
            }
            '\\' => {
                quoted = true;
                match it.next() {
                    Some((j, d)) => {
                        end = j + d.len_utf8();
                        text.push(d);
                    }
                    None => text.push('\\'),
                }
            }
            '=' if !quoted && eq.is_none() => {
                eq = Some(text.len());
                text.push('=');
            }
            c => text.push(c),
        }
    }
    Ok(Token {
        tok: Tok::Word(Word {
            text,
            span: Span::new(start, end),
            eq,
            quoted,
        }),
        span: Span::new(start, end),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        lex(s)
            .unwrap()
            .into_iter()
            .map(|t| match t.tok {
                Tok::Word(w) => w.text,
                Tok::Pipe { sel, .. } => format!("|{sel}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn words_and_quotes() {
        assert_eq!(
            words(r#"bpf "src port 80" x='a b'c"#),
            ["bpf", "src port 80", "x=a bc"]
        );
        assert_eq!(words(r#""a\"b\\c\qd""#), [r#"a"b\c\qd"#]);
        assert_eq!(words(r"a\|b"), ["a|b"]);
        assert_eq!(words("a |!80 b|c"), ["a", "|!80", "b", "|c"]);
        assert_eq!(
            words("a + b ++ c +* d * e&f"),
            [
                "a",
                "Par(Plus)",
                "b",
                "Par(Or)",
                "c",
                "Par(And)",
                "d",
                "Par(Or)",
                "e",
                "Par(And)",
                "f"
            ]
        );
        // Glued to words, + and * are the words' (as the shell reads them); between
        // parentheses they are operators.
        assert_eq!(words("a+b++c x*y"), ["a+b++c", "x*y"]);
        assert_eq!(
            words("paste -sd+ | date +%s | ls *.txt | tcp@busy"),
            ["paste", "-sd+", "|", "date", "+%s", "|", "ls", "*.txt", "|", "tcp", "At", "busy"]
        );
        assert_eq!(
            words("(a)+(b)"),
            [
                "LParen",
                "a",
                "RParen",
                "Par(Plus)",
                "LParen",
                "b",
                "RParen"
            ]
        );
        let t = lex("k=v \"k=v\" k\\=v").unwrap();
        let eqs: Vec<Option<usize>> = t
            .iter()
            .map(|t| {
                if let Tok::Word(w) = &t.tok {
                    w.eq
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(eqs, [Some(1), None, None]);
    }

    #[test]
    fn unterminated() {
        let e = lex("grep 'abc").unwrap_err();
        assert_eq!(e.kind, DiagKind::UnterminatedQuote);
        assert_eq!(e.span, Span::new(5, 9));
    }
}
