//! Recursive descent from tokens to a syntax tree. Grammar, loosest binding first:
//!
//! ```text
//! pipeline := par ( PIPE par )*                 PIPE = '|' selector?
//! par      := unary ( OP unary )*               OP = '+' | '++' | '*' | '+*' | '&', one kind per chain
//! unary    := '!'* primary
//! primary  := ( atom | '(' pipeline ')' ) ( '@' ( hint(,hint)* | KEY=VALUE ) )*
//! atom     := WORD+
//! KEY      := 'space' | 'name'                  (on an atom only: the node's own options)
//! selector := '!'* ( 'all' | N | N:M | NAME )?
//! ```
//!
//! Only parentheses recurse, and their depth is limited ([`crate::MAX_DEPTH`]), so no
//! input can exhaust the stack.

use crate::diag::{closest, did_you_mean, DiagKind, Diagnostic};
use crate::graph::{Hint, Selector, UNIX_CONTROL_OPTIONS};
use crate::lexer::{lex, ParOp, Tok, Token, Word};
use crate::resolve::{kind_of, FilterKind, Resolver};
use crate::span::Span;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    Atom {
        words: Vec<Word>,
        span: Span,
        hints: Vec<Hint>,
        /// `@space=S`, `@name=X` after the atom: the node's own options, written so that
        /// no command could take them for an argument (a Unix command's words are all
        /// its own, as in the shell).
        opts: Vec<Word>,
    },
    Group {
        inner: Box<Expr>,
        span: Span,
        hints: Vec<Hint>,
    },
    /// `stages[0] |pipes[0] stages[1] ...`
    Pipe {
        stages: Vec<Expr>,
        pipes: Vec<(Selector, Span)>,
    },
    /// `branches[0] ops[0] branches[1] ...`, all ops of one kind.
    Par {
        op: ParOp,
        branches: Vec<Expr>,
        ops: Vec<Span>,
        span: Span,
    },
    Not {
        inner: Box<Expr>,
        bang: Span,
        span: Span,
    },
}

impl Expr {
    pub(crate) fn span(&self) -> Span {
        match self {
            Expr::Atom { span, .. }
            | Expr::Group { span, .. }
            | Expr::Par { span, .. }
            | Expr::Not { span, .. } => *span,
            Expr::Pipe { stages, .. } => stages[0].span().to(stages[stages.len() - 1].span()),
        }
    }
}

pub(crate) fn parse_expr(input: &str, resolver: &dyn Resolver) -> Result<Expr, Diagnostic> {
    let toks = lex(input)?;
    if toks.is_empty() {
        return Err(Diagnostic::new(
            DiagKind::EmptyPipeline,
            "empty pipeline",
            Span::new(0, 0),
            input,
        )
        .help("a pipeline is one or more filters joined by '|', e.g. 'gen | count'"));
    }
    let mut p = Parser {
        input,
        resolver,
        toks,
        pos: 0,
        depth: 0,
    };
    let e = p.pipeline()?;
    if let Some(t) = p.peek() {
        let t = t.clone();
        return Err(match t.tok {
            Tok::RParen => {
                Diagnostic::new(DiagKind::UnbalancedParen, "unmatched ')'", t.span, input)
                    .help("remove it, or add the '(' it closes")
            }
            Tok::Bang => Diagnostic::new(
                DiagKind::UnexpectedToken,
                "unexpected '!': expected an operator",
                t.span,
                input,
            )
            .help(format!(
                "'!' negates a whole operand ('!grep x'); to pass a literal '!', quote the word; for the shell's meaning, give it to the shell: bash -c {}",
                crate::resolve::sh_quote(input.trim())
            )),
            // `<(cmd)`, `>(cmd)`, `$(cmd)`: a word ending in `<`, `>` or `$` glued to a `(`.
            Tok::LParen
                if p.pos > 0
                    && p.toks[p.pos - 1].span.end == t.span.start
                    && matches!(p.toks[p.pos - 1].tok, Tok::Word(_))
                    && input[..t.span.start].ends_with(['<', '>', '$']) =>
            {
                Diagnostic::new(
                    DiagKind::ShellSyntax,
                    "a substitution ('<(...)', '>(...)', '$(...)') is the shell's: the pipeline language has none",
                    t.span,
                    input,
                )
                .help(format!(
                    "for the shell's meaning, give it to the shell: bash -c {}",
                    crate::resolve::sh_quote(input.trim())
                ))
            }
            _ => Diagnostic::new(
                DiagKind::UnexpectedToken,
                format!(
                    "unexpected {}: expected an operator ('|', '+', '++', '+*')",
                    t.tok.describe(input, t.span)
                ),
                t.span,
                input,
            ),
        });
    }
    Ok(e)
}

struct Parser<'a> {
    input: &'a str,
    resolver: &'a dyn Resolver,
    toks: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    fn err(&self, kind: DiagKind, msg: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic::new(kind, msg, span, self.input)
    }

    fn pipeline(&mut self) -> Result<Expr, Diagnostic> {
        let first = self.par()?;
        let mut stages = vec![first];
        let mut pipes = Vec::new();
        while let Some(Token {
            tok: Tok::Pipe { sel, sel_span },
            span,
        }) = self.peek()
        {
            let (sel, sel_span, span) = (sel.clone(), *sel_span, *span);
            if let Some(w) = self.glued_command(&sel, sel_span, &stages[stages.len() - 1]) {
                // `seq 10|wc -l`: a plain pipe into the command, as the shell reads it.
                self.toks.insert(
                    self.pos + 1,
                    Token {
                        tok: Tok::Word(w),
                        span: sel_span,
                    },
                );
                self.pos += 1;
                pipes.push((Selector::Default, Span::new(span.start, span.start + 1)));
                stages.push(self.par()?);
                continue;
            }
            self.pos += 1;
            let selector = self.selector(&sel, sel_span)?;
            pipes.push((selector, span));
            stages.push(self.par()?);
        }
        if stages.len() == 1 {
            Ok(stages.pop().unwrap())
        } else {
            Ok(Expr::Pipe { stages, pipes })
        }
    }

    /// A name glued to `|` after a bare Unix command (`seq 10|wc -l`, `cat f|grep x`) is
    /// the command the shell pipes into, not a class name: a Unix command publishes no
    /// classes. So when the stage before is a bare Unix command (or a native name of a Unix
    /// tool) and the name is a program on PATH or a Unix tool's name, the name is the
    /// first word of the next stage. Numbers, ranges, `all` and `!` stay selectors.
    fn glued_command(&self, sel: &str, span: Span, prev: &Expr) -> Option<Word> {
        let Expr::Atom {
            words, hints, opts, ..
        } = prev
        else {
            return None;
        };
        if !hints.is_empty() || !opts.is_empty() || sel.is_empty() || sel == "all" {
            return None;
        }
        if sel.starts_with(|c: char| c == '!' || c.is_ascii_digit()) {
            return None;
        }
        let r = self.resolver;
        let head = &words[0];
        let unix = |name: &str| r.resolve(name) == Some(FilterKind::Unix) || r.unix_tool(name);
        let up = unix(&head.text) || kind_of(r, head) == Some(FilterKind::Unix);
        (up && unix(sel)).then(|| Word {
            text: sel.to_string(),
            span,
            eq: None,
            quoted: false,
        })
    }

    fn par(&mut self) -> Result<Expr, Diagnostic> {
        let first = self.unary()?;
        let mut kind: Option<(ParOp, Span)> = None;
        let mut branches = vec![first];
        let mut ops = Vec::new();
        while let Some(Token {
            tok: Tok::Par(op),
            span,
        }) = self.peek()
        {
            let (op, span) = (*op, *span);
            if let Some((k, kspan)) = kind {
                if k != op {
                    let first_text = &self.input[kspan.start..kspan.end];
                    let this = &self.input[span.start..span.end];
                    let left = self.input
                        [branches[0].span().start..branches[branches.len() - 1].span().end]
                        .trim();
                    return Err(self
                        .err(
                            DiagKind::MixedOperators,
                            format!("'{this}' cannot follow '{first_text}' without parentheses"),
                            span,
                        )
                        .help(format!(
                            "parallel operators of different kinds need parentheses to say which applies first, \
                             e.g. '({left}) {this} ...'"
                        )));
                }
            } else {
                kind = Some((op, span));
            }
            self.pos += 1;
            ops.push(span);
            branches.push(self.unary()?);
        }
        if branches.len() == 1 {
            return Ok(branches.pop().unwrap());
        }
        let span = branches[0].span().to(branches[branches.len() - 1].span());
        Ok(Expr::Par {
            op: kind.unwrap().0,
            branches,
            ops,
            span,
        })
    }

    fn unary(&mut self) -> Result<Expr, Diagnostic> {
        let mut bangs = Vec::new();
        while let Some(Token {
            tok: Tok::Bang,
            span,
        }) = self.peek()
        {
            bangs.push(*span);
            self.pos += 1;
        }
        let e = self.primary()?;
        if bangs.len() % 2 == 0 {
            return Ok(e);
        }
        // `!(!a)` is `a`: fold negations through hint-less groups too.
        if let Expr::Group { inner, hints, .. } = &e {
            if hints.is_empty() {
                if let Expr::Not { inner, .. } = &**inner {
                    return Ok((**inner).clone());
                }
            }
        }
        let bang = bangs[0];
        let span = bang.to(e.span());
        Ok(Expr::Not {
            inner: Box::new(e),
            bang,
            span,
        })
    }

    fn primary(&mut self) -> Result<Expr, Diagnostic> {
        let mut e = match self.peek().cloned() {
            Some(Token {
                tok: Tok::Word(_), ..
            }) => {
                let mut words = Vec::new();
                while let Some(Token {
                    tok: Tok::Word(w), ..
                }) = self.peek()
                {
                    words.push(w.clone());
                    self.pos += 1;
                }
                let span = words[0].span.to(words[words.len() - 1].span);
                Expr::Atom {
                    words,
                    span,
                    hints: Vec::new(),
                    opts: Vec::new(),
                }
            }
            Some(Token {
                tok: Tok::LParen,
                span: open,
            }) => {
                if self.depth >= crate::MAX_DEPTH {
                    return Err(self.err(
                        DiagKind::TooDeep,
                        format!("parentheses nested deeper than {}", crate::MAX_DEPTH),
                        open,
                    ));
                }
                self.pos += 1;
                self.depth += 1;
                let inner = self.pipeline()?;
                self.depth -= 1;
                match self.peek() {
                    Some(Token {
                        tok: Tok::RParen,
                        span: close,
                    }) => {
                        let close = *close;
                        self.pos += 1;
                        Expr::Group {
                            inner: Box::new(inner),
                            span: open.to(close),
                            hints: Vec::new(),
                        }
                    }
                    _ => {
                        return Err(self
                            .err(DiagKind::UnbalancedParen, "unclosed '('", open)
                            .help("add the ')' that closes it"))
                    }
                }
            }
            other => return Err(self.missing_operand(other)),
        };
        while let Some(Token {
            tok: Tok::At,
            span: at,
        }) = self.peek()
        {
            let at = *at;
            self.pos += 1;
            let Some(Token {
                tok: Tok::Word(w), ..
            }) = self.peek().cloned()
            else {
                return Err(self
                    .err(DiagKind::UnknownHint, "expected a hint after '@'", at)
                    .help(format!(
                        "hints are: {}; to pass '@' to a command, quote it, or give the pipeline to the shell: bash -c {}",
                        hint_list(),
                        crate::resolve::sh_quote(self.input.trim())
                    )));
            };
            self.pos += 1;
            if let Some(eq) = w.eq {
                self.node_option(&mut e, w, eq)?;
                continue;
            }
            let new = parse_hints(&w, self.input)?;
            let hints = match &mut e {
                Expr::Atom { hints, .. } | Expr::Group { hints, .. } => hints,
                _ => unreachable!(),
            };
            for h in new {
                if !hints.contains(&h) {
                    hints.push(h);
                }
            }
        }
        Ok(e)
    }

    /// `@KEY=VALUE` after `e`: one of [`UNIX_CONTROL_OPTIONS`] (`gzip -c @space=1,2`,
    /// `wc -l @name=w`), on an atom.
    fn node_option(&self, e: &mut Expr, w: Word, eq: usize) -> Result<(), Diagnostic> {
        let key = &w.text[..eq];
        let key_span = Span::new(w.span.start, w.span.start + eq);
        if !UNIX_CONTROL_OPTIONS.contains(&key) {
            let (msg, help) = match key.rsplit_once(',') {
                Some((hints, k)) if UNIX_CONTROL_OPTIONS.contains(&k) => (
                    format!("'@{}' mixes hints and the option '{k}='", w.text),
                    format!("give each after its own '@': @{hints} @{}", &w.text[hints.len() + 1..]),
                ),
                _ => (
                    format!("unknown node option '@{key}='"),
                    format!(
                        "after '@' come hints ({}) or the node options {}; to pass '@{}' to a command, quote the word",
                        hint_list(),
                        UNIX_CONTROL_OPTIONS.map(|o| format!("@{o}=")).join(" and "),
                        w.text
                    ),
                ),
            };
            return Err(self.err(DiagKind::UnknownHint, msg, key_span).help(help));
        }
        match e {
            Expr::Atom { opts, .. } => {
                opts.push(w);
                Ok(())
            }
            _ => Err(self
                .err(
                    DiagKind::BadOption,
                    format!("'@{key}=' places or names one filter or command, not a group"),
                    key_span,
                )
                .help(format!(
                    "put it inside the parentheses, after the filter or command it is for: (... CMD ARGS @{})",
                    w.text
                ))),
        }
    }

    fn missing_operand(&self, found: Option<Token>) -> Diagnostic {
        let prev = self.pos.checked_sub(1).map(|i| &self.toks[i]);
        let after = match prev {
            Some(t) => format!(" after {}", t.tok.describe(self.input, t.span)),
            None => String::new(),
        };
        let (what, span) = match &found {
            Some(t) => (t.tok.describe(self.input, t.span), t.span),
            None => (
                "end of input".to_string(),
                Span::new(self.input.len(), self.input.len()),
            ),
        };
        let mut d = self.err(
            DiagKind::MissingOperand,
            format!("expected a filter or '('{after}, found {what}"),
            span,
        );
        if let Some(Token {
            tok: Tok::Pipe { sel, .. },
            ..
        }) = prev
        {
            let name = sel.trim_start_matches('!');
            if name.starts_with(|c: char| c.is_ascii_alphabetic()) {
                d = d.help(format!(
                    "'{sel}' right after '|' is a selector; to pipe into a filter named '{name}', write '| {name}'"
                ));
            }
        }
        if let (
            Some(Token {
                tok: Tok::RParen, ..
            }),
            Some(Token {
                tok: Tok::LParen, ..
            }),
        ) = (&found, prev)
        {
            d.message = "empty parentheses".to_string();
        }
        // The shell's `&&` and `||` read here as two operators; say so, and where to go.
        if let (Some(p), Some(f)) = (prev, &found) {
            let text = |t: &Token| &self.input[t.span.start..t.span.end];
            let pair = match (&p.tok, &f.tok) {
                (Tok::Par(_), Tok::Par(_)) if text(p) == "&" && text(f) == "&" => Some("&&"),
                (Tok::Pipe { sel: a, .. }, Tok::Pipe { .. })
                    if a.is_empty() && text(f).starts_with('|') && f.span.start == p.span.end =>
                {
                    Some("||")
                }
                _ => None,
            };
            if let Some(op) = pair {
                d.message = format!(
                    "'{op}' is the shell's (run the next command if this one succeeds or fails): the pipeline language has no command lists"
                );
                d = d.help(format!(
                    "for the shell's meaning, give it to the shell: bash -c {}",
                    crate::resolve::sh_quote(self.input.trim())
                ));
            }
        }
        d
    }

    fn selector(&self, text: &str, span: Span) -> Result<Selector, Diagnostic> {
        let body = text.trim_start_matches('!');
        let bangs = text.len() - body.len();
        let body_span = Span::new(span.start + bangs, span.end);
        let base = if body.is_empty() {
            Selector::Default
        } else if body == "all" {
            Selector::All
        } else if let Some((a, b)) = body.split_once(':') {
            let (sa, sb) = (
                Span::new(body_span.start, body_span.start + a.len()),
                Span::new(body_span.end - b.len(), body_span.end),
            );
            let lo = self.class(a, sa, text, span)?;
            let hi = self.class(b, sb, text, span)?;
            if lo > hi {
                return Err(self
                    .err(
                        DiagKind::SelectorOutOfRange,
                        format!("empty class range {lo}:{hi}"),
                        body_span,
                    )
                    .help(format!("a range N:M needs N <= M; did you mean {hi}:{lo}?")));
            }
            Selector::Range(lo, hi)
        } else if body.chars().all(|c| c.is_ascii_digit()) {
            Selector::Class(self.class(body, body_span, text, span)?)
        } else if body.starts_with(|c: char| c.is_ascii_alphabetic())
            && body
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            Selector::Named(body.to_string())
        } else {
            return Err(self.bad_selector(text, span));
        };
        Ok(if bangs % 2 == 1 { base.negate() } else { base })
    }

    fn class(
        &self,
        digits: &str,
        span: Span,
        text: &str,
        sel_span: Span,
    ) -> Result<u16, Diagnostic> {
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(self.bad_selector(text, sel_span));
        }
        match digits.parse::<u16>() {
            Ok(v) => Ok(v),
            Err(_) => Err(self
                .err(
                    DiagKind::SelectorOutOfRange,
                    format!("class {} is out of range", digits),
                    span,
                )
                .help("classes are 16-bit: 0 to 65535")),
        }
    }

    fn bad_selector(&self, text: &str, span: Span) -> Diagnostic {
        self.err(
            DiagKind::BadSelector,
            format!("malformed selector '{text}'"),
            span,
        )
        .help(
            "after '|' write nothing (all non-zero classes), 'all', a class N, a range N:M, \
             a class name, or '!' and a selector; put a space after '|' before a filter",
        )
    }
}

fn hint_list() -> String {
    Hint::ALL
        .iter()
        .map(|h| h.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_hints(w: &Word, input: &str) -> Result<Vec<Hint>, Diagnostic> {
    let mut out = Vec::new();
    let mut offset = 0;
    for piece in w.text.split(',') {
        // Offsets map onto the input only for bare words; a quoted word gets its whole span.
        let span = if w.quoted {
            w.span
        } else {
            Span::new(w.span.start + offset, w.span.start + offset + piece.len())
        };
        offset += piece.len() + 1;
        match Hint::from_name(piece) {
            Some(h) => out.push(h),
            None => {
                let names: Vec<&str> = Hint::ALL.iter().map(|h| h.name()).collect();
                let msg = if piece.is_empty() {
                    "empty hint".to_string()
                } else {
                    format!("unknown hint '{piece}'")
                };
                // No hint's near miss: perhaps the shell's word (`date -d @0`, `user@host`);
                // say how to pass it.
                let help = did_you_mean(&closest(piece, names)).unwrap_or_else(|| {
                    format!(
                        "hints are: {}; to pass '@{piece}' to a command, quote the word ('@{piece}'), or give the pipeline to the shell: bash -c {}",
                        hint_list(),
                        crate::resolve::sh_quote(input.trim())
                    )
                });
                return Err(Diagnostic::new(DiagKind::UnknownHint, msg, span, input).help(help));
            }
        }
    }
    Ok(out)
}
