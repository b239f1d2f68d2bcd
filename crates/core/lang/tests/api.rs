//! The public interface the dataplane and CLI rely on.

use lang::fuzzing::test_resolver;
use lang::template::{self, RKind};
use lang::*;

fn p(s: &str) -> Graph {
    parse(s, &test_resolver()).unwrap_or_else(|d| panic!("{d}"))
}

fn err(s: &str) -> Diagnostic {
    parse(s, &test_resolver()).unwrap_err()
}

fn edges(g: &Graph) -> Vec<(NodeId, NodeId, Selector)> {
    let mut v: Vec<_> = g
        .edges
        .iter()
        .map(|e| (e.from, e.to, e.sel.clone()))
        .collect();
    v.sort_by_key(|e| (e.0, e.1));
    v
}

#[test]
fn split_join_semantics() {
    // a | b + c | d: a->b, a->c, b->join, c->join, join->d.
    for (op, mode) in [
        ("+", JoinMode::All),
        ("++", JoinMode::First),
        ("*", JoinMode::First),
        ("+*", JoinMode::Nth(2)),
        ("&", JoinMode::Nth(2)),
    ] {
        let g = p(&format!("gen | tcp {op} udp | count"));
        assert_eq!(g.nodes.len(), 5);
        assert_eq!(g.nodes[3].kind, NodeKind::Join { mode }, "{op}");
        assert_eq!(
            edges(&g),
            vec![
                (0, 1, Selector::Default),
                (0, 2, Selector::Default),
                (1, 3, Selector::Default),
                (2, 3, Selector::Default),
                (3, 4, Selector::Default)
            ]
        );
        assert_eq!(g.sources(), vec![0]);
        assert_eq!(g.sinks(), vec![4]);
    }
    assert_eq!(
        p("ip | tcp +* udp +* icmp").nodes[4].kind,
        NodeKind::Join {
            mode: JoinMode::Nth(3)
        }
    );
}

#[test]
fn selector_after_parallel_applies_to_join_arcs() {
    let g = p("gen | tcp + udp |!7 count");
    assert_eq!(
        edges(&g)[4],
        (3, 4, Selector::Not(Box::new(Selector::Class(7))))
    );
}

#[test]
fn node_fields() {
    let g = p("gen 10 count=5 | for name=L 3 export=yes @busy | gzip -9 | for name=L |! stdout");
    assert_eq!(
        g.nodes[0].kind,
        NodeKind::Filter {
            filter: "gen".into(),
            params: vec!["10".into()],
            options: vec![("count".into(), "5".into())],
            place: Default::default(),
        }
    );
    assert_eq!(g.nodes[1].name.as_deref(), Some("L"));
    assert_eq!(g.nodes[1].hints, vec![Hint::Busy]);
    assert_eq!(
        g.nodes[1].kind,
        NodeKind::Filter {
            filter: "for".into(),
            params: vec!["3".into()],
            options: vec![("export".into(), "yes".into())],
            place: Default::default(),
        }
    );
    assert_eq!(
        g.nodes[2].kind,
        NodeKind::Unix {
            argv: vec!["gzip".into(), "-9".into()],
            place: Default::default()
        }
    );
    let src = "gen 10 count=5 | for name=L 3 export=yes @busy | gzip -9 | for name=L |! stdout";
    assert_eq!(
        &src[g.nodes[1].span.start..g.nodes[1].span.end],
        "for name=L 3 export=yes"
    );
    let back = g.edges.iter().find(|e| e.from == 2 && e.to == 1).unwrap();
    assert_eq!(&src[back.span.start..back.span.end], "|");
    let out = g.edges.iter().find(|e| e.to == 3).unwrap();
    assert_eq!(&src[out.span.start..out.span.end], "|!");
    assert_eq!(g.sources(), vec![0]);
}

#[test]
fn admits() {
    let names = |n: &str| if n == "http" { Some(80) } else { None };
    let cases: &[(Selector, &[u16], &[u16])] = &[
        (Selector::Default, &[1, 65535], &[0]),
        (Selector::All, &[0, 1, 65535], &[]),
        (Selector::Class(22), &[22], &[0, 21, 23]),
        (Selector::Range(22, 23), &[22, 23], &[21, 24]),
        (Selector::Named("http".into()), &[80], &[0, 81]),
        (Selector::Named("nope".into()), &[], &[0, 1, 80]),
        (Selector::Not(Box::new(Selector::Default)), &[0], &[1, 2]),
        (
            Selector::Not(Box::new(Selector::Range(1, 1023))),
            &[0, 1024],
            &[1, 80, 1023],
        ),
        (
            Selector::Not(Box::new(Selector::Named("nope".into()))),
            &[0, 5],
            &[],
        ),
    ];
    for (sel, yes, no) in cases {
        for &c in *yes {
            assert!(sel.admits(c, &names), "{sel:?} should admit {c}");
        }
        for &c in *no {
            assert!(!sel.admits(c, &names), "{sel:?} should not admit {c}");
        }
    }
    assert_eq!(Selector::Class(3).negate().negate(), Selector::Class(3));
}

#[test]
fn passes_one_by_one() {
    let r = test_resolver();
    let req = parse_request("rx ++ tx | !http | tcp + udp", &r).unwrap();
    let kinds = |q: &template::Request| -> Vec<String> {
        q.nodes
            .iter()
            .flatten()
            .map(|n| match &n.kind {
                RKind::Base(NodeKind::Filter { filter, .. }) => filter.clone(),
                RKind::Base(k) => format!("{k:?}"),
                k => format!("{k:?}"),
            })
            .collect()
    };
    assert_eq!(
        kinds(&req),
        [
            "rx",
            "tx",
            "Par(Or)",
            "http",
            "Not",
            "tcp",
            "udp",
            "Par(Plus)"
        ]
    );
    assert!(req.clone().into_graph().is_err(), "pseudo-vertices left");
    let n = template::negation(req.clone());
    assert_eq!(
        kinds(&n),
        ["rx", "tx", "Par(Or)", "http", "tcp", "udp", "Par(Plus)"]
    );
    let b = template::boolean(n.clone());
    assert_eq!(
        kinds(&b),
        [
            "rx",
            "tx",
            "Join { mode: First }",
            "http",
            "tcp",
            "udp",
            "Par(Plus)"
        ]
    );
    let s = template::split_join(b);
    assert_eq!(
        kinds(&s),
        ["rx", "tx", "Join { mode: First }", "http", "tcp", "udp"]
    );
    // Passes with nothing to do return the request unchanged.
    assert_eq!(template::negation(n.clone()), n);
    let g = s.into_graph().unwrap();
    assert_eq!(g, p("rx ++ tx | !http | tcp + udp"));
    assert_eq!(
        edges(&g)[3..],
        [
            (3, 4, Selector::Not(Box::new(Selector::Default))),
            (3, 5, Selector::Not(Box::new(Selector::Default)))
        ]
    );
}

#[test]
fn parallelize_one_filter() {
    let g = p("gen | deflate name=Z |3 count");
    let q = parallelize(&g, 1, 3, SplitMode::Hash);
    assert_eq!(
        q.canonical(),
        "n0 = gen\nn1 = deflate name=Z.0\nn2 = count\nn3 = split(hash, 3)\nn4 = deflate name=Z.1\nn5 = deflate name=Z.2\nn6 = join(merge)\n\
         n0 -> n3\nn1 -> n6 |all\nn3 -> n1\nn3 -> n4\nn3 -> n5\nn4 -> n6 |all\nn5 -> n6 |all\nn6 -> n2 |3\n"
    );
    // Round-robin replicas get the join that restores the order.
    let r = parallelize(&g, 1, 2, SplitMode::RoundRobin);
    assert!(
        r.canonical().contains("n5 = join(ordered)\n"),
        "{}",
        r.canonical()
    );
    // Not applicable: sources, joins, too few ways, no such node.
    assert_eq!(parallelize(&g, 0, 3, SplitMode::RoundRobin), g);
    assert_eq!(parallelize(&g, 1, 1, SplitMode::RoundRobin), g);
    assert_eq!(parallelize(&g, 9, 3, SplitMode::RoundRobin), g);
    let j = p("gen | tcp + udp | count");
    assert_eq!(parallelize(&j, 3, 2, SplitMode::RoundRobin), j);
}

#[test]
fn diagnostic_rendering() {
    let d = err("tcp | ipp | count");
    assert_eq!(d.kind, DiagKind::UnknownFilter);
    assert_eq!(d.span, Span { start: 6, end: 9 });
    assert_eq!(d.help.as_deref(), Some("did you mean 'ip'?"));
    assert_eq!(
        d.to_string(),
        "error: unknown filter 'ipp' (not a native filter, and not found on PATH either)\n  tcp | ipp | count\n        ^^^\n  help: did you mean 'ip'?"
    );
    let e: Box<dyn std::error::Error> = Box::new(d);
    assert!(e.to_string().starts_with("error: "));
}

#[test]
fn error_kinds() {
    let cases: &[(&str, DiagKind)] = &[
        ("tcp | ipp", DiagKind::UnknownFilter),
        ("count evry=1", DiagKind::BadOption),
        ("count =1", DiagKind::BadOption),
        ("count every=", DiagKind::BadOption),
        ("(gen", DiagKind::UnbalancedParen),
        ("gen)", DiagKind::UnbalancedParen),
        ("gen |65536 count", DiagKind::SelectorOutOfRange),
        ("gen |5:3 count", DiagKind::SelectorOutOfRange),
        ("gen |5:x count", DiagKind::BadSelector),
        ("gen |:3 count", DiagKind::BadSelector),
        ("gen | count name=A | count name=A", DiagKind::UnboundedLoop),
        ("gen \"x", DiagKind::UnterminatedQuote),
        ("", DiagKind::EmptyPipeline),
        ("gen | | count", DiagKind::MissingOperand),
        ("| gen", DiagKind::MissingOperand),
        ("gen +", DiagKind::MissingOperand),
        ("gen @nope", DiagKind::UnknownHint),
        ("a + b ++ c", DiagKind::MixedOperators),
        ("gen | for name=L | count name=L", DiagKind::NameConflict),
        ("gen !x", DiagKind::UnexpectedToken),
        (&"(".repeat(200), DiagKind::TooDeep),
    ];
    for (src, kind) in cases {
        assert_eq!(
            parse(src, &test_resolver()).unwrap_err().kind,
            *kind,
            "{src}"
        );
    }
}

/// Shell syntax in a Unix command's words (the shell would redirect, sequence, glob or
/// expand it) is refused with a caret on the character and `bash -c` in the help, never
/// passed on as a literal word; quoted, it is the command's.
#[test]
fn shell_syntax_in_unix_words_is_refused() {
    let r = test_resolver();
    for (src, at) in [
        ("gen | gzip > out.gz", 11),
        ("gen | gzip -c 2>/dev/null", 15),
        ("gen | gzip *.txt", 11),
        ("gen | gzip x; echo", 12),
        ("gen | gzip $HOME", 11),
        ("gen | gzip \"$HOME\"", 12),
        ("gen | gzip ~", 11),
        ("gen | gzip # note", 11),
        ("gen | gzip `x`", 11),
        ("gen | gzip x{a,b}", 12),
        ("gen | gzip {1..3}", 11),
    ] {
        let d = parse(src, &r).unwrap_err();
        assert_eq!(d.kind, DiagKind::ShellSyntax, "{src}: {d}");
        assert_eq!(d.span.start, at, "{src}: {d}");
        assert!(
            d.help.as_deref().unwrap_or("").contains("bash -c"),
            "{src}: {d}"
        );
    }
    for src in [
        "gen | gzip '>' '*.txt' '$HOME' \\; a#b",
        "gen | gzip \"*\" '~' {} '{a,b}'",
    ] {
        parse(src, &r).unwrap_or_else(|e| panic!("{src}: {e}"));
    }
    for src in ["gen | gzip && gzip", "gen | gzip || gzip"] {
        let d = parse(src, &r).unwrap_err();
        assert!(
            d.help.as_deref().unwrap_or("").contains("bash -c"),
            "{src}: {d}"
        );
    }
}

/// `VAR=x cmd` (the shell's environment assignment before a command) is refused as shell
/// syntax, with the caret on the assignment and `bash -c` and `env` in the help; before a
/// native filter, a misplaced option stays an option error.
#[test]
fn environment_assignment_before_a_unix_command_is_refused_as_shell_syntax() {
    let r = test_resolver();
    for (src, at, env) in [
        ("LC_ALL=C sort", 0, "env LC_ALL=C sort"),
        ("gen | LC_ALL=C sort -r", 6, "env LC_ALL=C sort -r"),
        ("gen | A=1 _B=2 gzip -c | count", 6, "env A=1 _B=2 gzip -c"),
    ] {
        let d = parse(src, &r).unwrap_err();
        assert_eq!(d.kind, DiagKind::ShellSyntax, "{src}: {d}");
        assert_eq!(d.span.start, at, "{src}: {d}");
        assert!(d.message.contains("environment assignment"), "{src}: {d}");
        let help = d.help.as_deref().unwrap_or("");
        assert!(help.contains(&format!("bash -c '{}'", src)), "{src}: {d}");
        assert!(help.contains(env), "{src}: {d}");
    }
    // Before a native filter it is an option in the wrong place, as before.
    let d = parse("gen | size=3 count", &r).unwrap_err();
    assert_eq!(d.kind, DiagKind::BadOption, "{d}");
    // Quoted or after the command, the word is the command's.
    p("gen | cat A=1");
}

#[test]
fn loops_need_for() {
    // A cycle through a for is fine, also when the for is not where the cycle was closed.
    p("gen | for name=L 3 | count name=C | inflate | count name=C | for name=L |! stdout");
    // A longer cycle without one is not.
    let d = err("gen | count name=A | inflate | deflate | count name=A");
    assert_eq!(d.kind, DiagKind::UnboundedLoop);
    assert!(
        d.message.contains("'count name=A', 'inflate', 'deflate'"),
        "{}",
        d.message
    );
    // A named node reached twice without a cycle is fine.
    p("(gen | count name=C) + (stdin | count name=C)");
}

#[test]
fn path_resolver() {
    assert_eq!(PathResolver.resolve("sh"), Some(FilterKind::Unix));
    assert_eq!(PathResolver.resolve("surely-no-such-command-here"), None);
    assert!(PathResolver::find("/bin/sh").is_some());
    let r = WithPath(StaticResolver::new().native("grep", &[]));
    assert_eq!(
        r.resolve("grep"),
        Some(FilterKind::Native),
        "native names win"
    );
    assert_eq!(r.resolve("sh"), Some(FilterKind::Unix));
    let g = parse("grep x | sh -c 'cat'", &r).unwrap();
    assert_eq!(
        g.nodes[1].kind,
        NodeKind::Unix {
            argv: vec!["sh".into(), "-c".into(), "cat".into()],
            place: Default::default()
        }
    );
}

#[test]
fn resolver_without_params_accepts_any_option() {
    let r = StaticResolver::new().native_any("f");
    let g = parse("f anything=1 x", &r).unwrap();
    assert_eq!(
        g.nodes[0].kind,
        NodeKind::Filter {
            filter: "f".into(),
            params: vec!["x".into()],
            options: vec![("anything".into(), "1".into())],
            place: Default::default(),
        }
    );
}

#[test]
fn large_inputs_stay_fast() {
    // Linear-time passes: ~100k nodes of each shape parse in well under a few seconds.
    let n = 20_000;
    let shapes = [
        vec!["gen"; n].join(" | "),
        format!("gen | {} | count", vec!["tcp"; n].join(" + ")),
        format!("gen | {}", vec!["tcp"; n].join(" +* ")),
        vec!["!grep x"; n].join(" | "),
        format!("gen | {}", vec!["(tcp | !udp)"; n].join(" + ")),
        format!(
            "gen {}",
            (0..n)
                .map(|i| format!("k{i}=v"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        format!(
            "gen | {} | stdout",
            (0..n)
                .map(|i| format!("for name=L{} 2", i % 100))
                .collect::<Vec<_>>()
                .join(" | ")
        ),
    ];
    let r = StaticResolver::new()
        .native_any("gen")
        .native_any("tcp")
        .native_any("udp")
        .native_any("grep")
        .native_any("count")
        .native_any("for")
        .native_any("stdout");
    for s in shapes {
        let t = std::time::Instant::now();
        let g = parse(&s, &r).unwrap_or_else(|d| panic!("{}", d.message));
        let _ = g.canonical();
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{}...: {:?}",
            &s[..40],
            t.elapsed()
        );
    }
}

#[test]
fn placed_is_typed_at_parse_time_and_a_bad_value_points_at_it() {
    let r = StaticResolver::new()
        .native("bpf", &["expr", "placed"])
        .native("count", &[]);
    let g = parse("bpf tcp placed=user | count", &r).unwrap();
    let NodeKind::Filter { options, place, .. } = &g.nodes[0].kind else {
        panic!("{g:?}")
    };
    assert!(
        options.is_empty(),
        "placed= is not left among the options: {options:?}"
    );
    assert_eq!(place.side, Some(lang::Side::User));
    assert!(
        g.canonical().starts_with("n0 = bpf tcp placed=user\n"),
        "{}",
        g.canonical()
    );
    let text = "bpf tcp placed=moon | count";
    let d = parse(text, &r).unwrap_err();
    assert!(
        d.message.contains("placed=moon") && d.message.contains("user or kernel"),
        "{d}"
    );
    assert_eq!(&text[d.span.start..d.span.end], "moon");
    // A filter that does not declare it still refuses it.
    assert!(parse("count placed=user", &r).is_err());
}

#[test]
fn space_is_typed_at_parse_time_and_a_bad_value_points_at_the_node() {
    use lang::{PinKind, SpaceName, SpaceSpec};
    let r = StaticResolver::new()
        .native("count", &[])
        .native("deflate", &[])
        .unix("wc");
    let g = parse(
        "count space=1,p2 | deflate space=thread:3 | wc -l @space=local",
        &r,
    )
    .unwrap();
    let space = |i: usize| match &g.nodes[i].kind {
        NodeKind::Filter { options, place, .. } => {
            assert!(options.is_empty(), "{options:?}");
            place.space.clone()
        }
        NodeKind::Unix { place, .. } => place.space.clone(),
        k => panic!("{k:?}"),
    };
    assert_eq!(
        space(0),
        Some(SpaceSpec::Runtime(vec![
            SpaceName::Thread(1),
            SpaceName::Process(2)
        ]))
    );
    assert_eq!(
        space(1),
        Some(SpaceSpec::Planner {
            kind: Some(PinKind::Thread),
            cpu: Some(3)
        })
    );
    assert_eq!(space(2), Some(SpaceSpec::Runtime(vec![SpaceName::Local])));
    let text = "count | deflate level=1 space=x9 | count";
    let r = StaticResolver::new()
        .native("count", &[])
        .native("deflate", &["level"]);
    let d = parse(text, &r).unwrap_err();
    assert!(
        d.message.starts_with("deflate: space=x9: expected 'local'"),
        "{d}"
    );
    assert_eq!(&text[d.span.start..d.span.end], "deflate level=1 space=x9");
    let d = parse(
        "count | wc @space=1,,2",
        &StaticResolver::new().native("count", &[]).unix("wc"),
    )
    .unwrap_err();
    assert!(d.message.contains("an empty space in the list"), "{d}");
}

/// The kinds of a linear pipeline's nodes: the filter's name, or `unix:argv0`.
fn kinds(s: &str) -> Vec<String> {
    p(s).nodes
        .iter()
        .map(|n| match &n.kind {
            NodeKind::Filter { filter, .. } => filter.clone(),
            NodeKind::Unix { argv, .. } => format!("unix:{}", argv.join(" ")),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn a_native_name_shared_with_a_unix_tool_means_the_tool_next_to_a_unix_command() {
    // Beside a Unix command, on either side, and through a run of such names.
    assert_eq!(
        kinds("cat /etc/services | grep tcp | wc -l"),
        ["unix:cat /etc/services", "unix:grep tcp", "unix:wc -l"]
    );
    assert_eq!(
        kinds("grep -v x f | sort"),
        ["unix:grep -v x f", "unix:sort"]
    );
    assert_eq!(
        kinds("cat f | grep a | grep b | split -l 10"),
        [
            "unix:cat f",
            "unix:grep a",
            "unix:grep b",
            "unix:split -l 10"
        ]
    );
    // Alone, it is the whole pipeline: the tool.
    assert_eq!(
        kinds("grep tcp /etc/services"),
        ["unix:grep tcp /etc/services"]
    );
    // Among native filters, the native filter.
    assert_eq!(kinds("gen | grep x | count"), ["gen", "grep", "count"]);
    assert_eq!(
        kinds("file big.bin | deflate | outfile x"),
        ["file", "deflate", "outfile"]
    );
    // A native filter between stops it; so does a selector (Streamline's own arc).
    assert_eq!(
        kinds("cat f | count | grep x | null"),
        ["unix:cat f", "count", "grep", "null"]
    );
    assert_eq!(
        kinds("cat f |5 grep x | null"),
        ["unix:cat f", "grep", "null"]
    );
    // A name that is not a Unix tool's stays native next to a Unix command.
    assert_eq!(
        kinds("cat f | count | wc"),
        ["unix:cat f", "count", "unix:wc"]
    );
}

/// A Unix command gets the words `bash` would give it: inside double quotes a backslash
/// escapes only `$`, `` ` ``, `"` and `\` (`"a\nb"` stays four characters), `[` without a
/// `]` is no glob (`[ -f x ]`), and a key=value word that is no control option of a Unix
/// command (`size=3`, `export=yes`) is its argument, as in the shell.
#[test]
fn unix_commands_get_the_shells_words() {
    let argv = |s: &str| match &parse(s, &test_resolver())
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .nodes[1]
        .kind
    {
        NodeKind::Unix { argv, .. } => argv.clone(),
        other => panic!("{s}: {other:?}"),
    };
    assert_eq!(
        argv(r#"gen | gzip "a\nb" "c\td""#),
        ["gzip", r"a\nb", r"c\td"]
    );
    assert_eq!(
        argv(r#"gen | gzip "\$x" "\"" "\\" "\q""#),
        ["gzip", "$x", "\"", "\\", r"\q"]
    );
    assert_eq!(
        argv(r#"gen | gzip a\ b 'c\n' x"y"'z'"#),
        ["gzip", "a b", r"c\n", "xyz"]
    );
    assert_eq!(argv("gen | gzip [ -f x ]"), ["gzip", "[", "-f", "x", "]"]);
    assert_eq!(argv(r"gen | gzip x\"), ["gzip", r"x\"]);
    assert_eq!(
        argv("gen | gzip size=3 export=yes mode=x"),
        ["gzip", "size=3", "export=yes", "mode=x"]
    );
    assert_eq!(
        parse("gen | gzip [ab]", &test_resolver()).unwrap_err().kind,
        DiagKind::ShellSyntax
    );
    // Substitutions are the shell's: refused at their `(`, with the way to bash.
    for (src, at) in [
        ("gen | gzip <(x)", 12),
        ("gen | gzip >(x) | gzip", 12),
        ("gen | gzip $(x)", 12),
    ] {
        let d = parse(src, &test_resolver()).unwrap_err();
        assert_eq!(
            (d.kind, d.span.start),
            (DiagKind::ShellSyntax, at),
            "{src}: {d}"
        );
        assert!(
            d.help.as_deref().unwrap_or("").contains("bash -c"),
            "{src}: {d}"
        );
    }
}

/// A shell builtin with no program on PATH (`type`, `ulimit`, `:`) is a Unix command
/// (the runtime runs it through bash); a name that is neither stays unknown.
#[test]
fn shell_builtins_resolve_as_unix_commands() {
    for b in [
        "type", "ulimit", ":", "umask", "read", "cd", "eval", "export", ".",
    ] {
        assert_eq!(PathResolver.resolve(b), Some(FilterKind::Unix), "{b}");
    }
    assert_eq!(PathResolver.resolve("surely-no-such-builtin"), None);
}

/// A parallel operator next to a bare Unix command is a word (or `&`, background) to the
/// shell: refused at the operator with both spellings; a branch in parentheses is the
/// language's parallel.
#[test]
fn a_parallel_operator_beside_a_unix_command_is_refused() {
    let r = test_resolver();
    for (src, at) in [
        ("gen | gzip 1 + 2", 13),
        ("gen | gzip 3 * 4", 13),
        ("gzip a & gzip b", 7),
        ("gen | tcp + gzip", 10),
    ] {
        let d = parse(src, &r).unwrap_err();
        assert_eq!(
            (d.kind, d.span.start),
            (DiagKind::ShellSyntax, at),
            "{src}: {d}"
        );
        let help = d.help.as_deref().unwrap_or("");
        assert!(
            help.contains("bash -c") && help.contains("parentheses"),
            "{src}: {d}"
        );
    }
    for src in [
        "gen | (gzip) + (gzip -9) | count",
        "gen | gzip '+' 2 | count",
        "gen | tcp + udp | count",
    ] {
        parse(src, &r).unwrap_or_else(|e| panic!("{src}: {e}"));
    }
}

/// Every word after a Unix command's name is its argument, as in the shell (`echo
/// name=x` prints `name=x`); Streamline's options for the command follow `@`: `@space=`
/// places it, `@name=` names it. Beside native filters or operators, the spelling that
/// once placed the command (`gzip space=1`) is refused with both spellings.
#[test]
fn a_unix_commands_words_are_its_own_and_its_options_follow_at() {
    let r = test_resolver();
    let g = p("cat x | sort name=S space=1 -r");
    assert_eq!(
        g.nodes[1].kind,
        NodeKind::Unix {
            argv: ["sort", "name=S", "space=1", "-r"]
                .map(String::from)
                .to_vec(),
            place: Default::default()
        }
    );
    assert_eq!(g.nodes[1].name, None);
    let g = p("cat x | sort -r @space=1 @name=S | gzip -c @space=p2");
    let NodeKind::Unix { argv, place } = &g.nodes[1].kind else {
        panic!("{g:?}")
    };
    assert_eq!(argv, &["sort", "-r"]);
    assert_eq!(
        place.space.as_ref().map(|s| s.to_string()).as_deref(),
        Some("1")
    );
    assert_eq!(g.nodes[1].name.as_deref(), Some("S"));
    // Native filters take them after '@' too; one option, however written.
    let g = p("gen | count @space=1 @name=c | null");
    assert_eq!(g.nodes[1].name.as_deref(), Some("c"));
    for src in [
        "gen | count space=1 @space=2",
        "gen | count name=a @name=b",
        "gen | gzip @name=a @name=b",
    ] {
        assert_eq!(err(src).kind, DiagKind::BadOption, "{src}");
    }
    // The old spelling beside native filters: refused at the word, both spellings given.
    for (src, word) in [
        ("gen | gzip -c space=1,2 | null", "space=1,2"),
        ("gen | wc -l name=w", "name=w"),
        ("(cat x) + (cat y) | sort space=1", "space=1"),
        ("cat x | sort space=1 @busy", "space=1"),
    ] {
        let d = parse(src, &r).unwrap_err();
        assert_eq!(d.kind, DiagKind::BadOption, "{src}: {d}");
        assert_eq!(&src[d.span.start..d.span.end], word, "{src}: {d}");
        let help = d.help.as_deref().unwrap_or("");
        assert!(
            help.contains(&format!("@{word}")) && help.contains(&format!("'{word}'")),
            "{src}: {d}"
        );
    }
    // Quoted, it is the command's word there too.
    let g = p("gen | gzip -c 'space=1,2' | null");
    assert!(matches!(&g.nodes[1].kind, NodeKind::Unix { argv, .. } if argv[2] == "space=1,2"));
    // On a group, or mixed into a hint list: refused, saying where it goes.
    assert_eq!(
        err("gen | (count | null) @space=1").kind,
        DiagKind::BadOption
    );
    let d = err("gen | gzip @busy,space=1 | null");
    assert!(
        d.help.as_deref().unwrap_or("").contains("@busy @space=1"),
        "{d}"
    );
    assert_eq!(err("gen | gzip @size=1 | null").kind, DiagKind::UnknownHint);
    // The canonical print and a named command's later occurrence.
    let g = p("gen | (tcp | wc -l @name=w) + (udp | wc @name=w)");
    let w: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| n.name.as_deref() == Some("w"))
        .collect();
    assert_eq!(w.len(), 1, "{}", g.canonical());
    assert!(
        g.canonical().contains("unix(wc -l) @name=w"),
        "{}",
        g.canonical()
    );
    assert_eq!(
        err("gen | (tcp | wc -l @name=w) + (udp | wc -c @name=w)").kind,
        DiagKind::NameConflict
    );
    assert_eq!(
        err("gen | (tcp | wc -l @name=w) + (udp | count name=w)").kind,
        DiagKind::NameConflict
    );
}

/// A word that is neither a native filter nor a program is a Unix command, as in the
/// shell, which runs it and reports `command not found` (exit status 127); only a near
/// miss of a native filter's name (the filter was meant) and a shell keyword are refused.
#[test]
fn an_unknown_word_is_a_command_unless_it_is_a_near_miss_of_a_native_filter() {
    assert_eq!(kinds("nosuchcmd | wc -l"), ["unix:nosuchcmd", "unix:wc -l"]);
    assert_eq!(
        kinds("gen | frobnicate x=1 | count"),
        ["gen", "unix:frobnicate x=1", "count"]
    );
    // Next to it, a native name of a Unix tool is the tool.
    assert_eq!(
        kinds("nosuchcmd | grep x"),
        ["unix:nosuchcmd", "unix:grep x"]
    );
    for (src, near) in [
        ("gen | cuont", "count"),
        ("tcp | ipp | count", "ip"),
        ("gen | deflte", "deflate"),
    ] {
        let d = err(src);
        assert_eq!(d.kind, DiagKind::UnknownFilter, "{src}");
        assert!(d.help.as_deref().unwrap_or("").contains(near), "{src}: {d}");
    }
    assert_eq!(err("while x").kind, DiagKind::ShellSyntax);
    // Beside a parallel operator it is a bare Unix command like any other.
    assert_eq!(err("nosuchcmd 1 + 2").kind, DiagKind::ShellSyntax);
}

/// A name glued to `|` after a bare Unix command is the command piped into, as the shell
/// reads it (`echo a|wc -c` ran `-c` as a command after a `|wc` selector); after a native
/// filter, or as a number, range or negation, it stays a selector.
#[test]
fn a_command_glued_to_the_pipe_after_a_unix_command_is_piped_into() {
    assert_eq!(kinds("cat x|wc -l"), ["unix:cat x", "unix:wc -l"]);
    assert_eq!(
        kinds("cat x|sort|head -3"),
        ["unix:cat x", "unix:sort", "unix:head -3"]
    );
    assert_eq!(
        kinds("cat x|grep y|wc"),
        ["unix:cat x", "unix:grep y", "unix:wc"]
    );
    let g = p("cat x|wc -l");
    assert_eq!(g.edges[0].sel, Selector::Default);
    // After a native filter, a class name (the test resolver says nothing of gen's).
    let g = p("gen|wc -l");
    assert_eq!(g.edges[0].sel, Selector::Named("wc".into()));
    let g = p("pcapin file=x | dport |80 wc -l");
    assert_eq!(g.edges[1].sel, Selector::Class(80));
}

/// `!` before a bare Unix command is the shell's negation of its exit status (`! true`
/// exited 0 where bash exits 1): refused with the way to bash.
#[test]
fn a_bang_before_a_unix_command_is_refused() {
    for src in ["! cat x", "cat x | ! wc -l", "!gzip"] {
        let d = err(src);
        assert_eq!(d.kind, DiagKind::ShellSyntax, "{src}: {d}");
        assert!(
            d.help.as_deref().unwrap_or("").contains("bash -c"),
            "{src}: {d}"
        );
    }
    p("gen | !grep x | count");
}
