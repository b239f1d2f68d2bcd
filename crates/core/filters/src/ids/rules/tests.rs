use super::*;

fn one(text: &str) -> Rule {
    let mut r = parse(text, "t.rules", &Vars::default(), &Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.rules.len(), 1);
    r.rules.remove(0)
}

fn fails(text: &str) -> RuleError {
    parse(text, "t.rules", &Vars::default(), &Options::default()).expect_err("should fail")
}

#[test]
fn a_rule_with_contents_and_modifiers() {
    let r = one(
        r#"alert tcp $HOME_NET any -> $EXTERNAL_NET $HTTP_PORTS (msg:"evil \"GET\"; here"; flow:to_server,established; http.method; content:"GET"; http.uri; content:"/adm|69 6E|"; nocase; content:"x"; pkt_data; content:!"ok"; distance:2; within:10; sid:1000001; rev:3;)"#,
    );
    assert_eq!(r.action, Action::Alert);
    assert_eq!(r.msg, "evil \"GET\"; here");
    assert_eq!((r.sid, r.rev, r.gid), (1000001, 3, 1));
    assert_eq!(r.flow.to_server, Some(true));
    assert_eq!(r.flow.established, Some(true));
    let c: Vec<&Content> = r
        .checks
        .iter()
        .map(|c| match c {
            Check::Content(c) => c,
            _ => panic!(),
        })
        .collect();
    assert_eq!(c[0].bytes, b"GET");
    assert_eq!(c[0].buffer, Buffer::HttpMethod);
    assert_eq!(c[1].bytes, b"/admin");
    assert!(c[1].nocase);
    assert_eq!(c[1].buffer, Buffer::HttpUri);
    // A sticky buffer applies to what follows it: "x" is in http.uri; pkt_data resets.
    assert_eq!(c[2].buffer, Buffer::HttpUri);
    assert_eq!(c[3].buffer, Buffer::Payload);
    assert!(c[3].negated);
    assert_eq!((c[3].distance, c[3].within), (Some(2), Some(10)));
    assert!(r.dport.matches(8080) && !r.dport.matches(81));
}

#[test]
fn snort2_modifiers_apply_to_the_content_before() {
    let r = one(
        r#"alert tcp any any -> any 80 (content:"/cgi-bin"; http_uri; content:"Mozilla"; http_header; sid:2;)"#,
    );
    assert_eq!(r.checks[0].buffer(), Buffer::HttpUri);
    assert_eq!(r.checks[1].buffer(), Buffer::HttpHeader);
}

#[test]
fn addresses_lists_negation_and_variables() {
    let mut v = Vars::default();
    v.addr("HOME_NET", "[10.0.0.0/8,!10.1.0.0/16]");
    v.addr("EXTERNAL_NET", "!$HOME_NET");
    let r = parse(
        "ipvar DMZ [192.168.1.0/24, 2001:db8::/32]\nportvar HI 1024:\nalert tcp $EXTERNAL_NET any <> $HOME_NET $HI (sid:1;)\nalert udp $DMZ ![53,123] -> any :1023 (sid:2;)",
        "t",
        &v,
        &Options::default(),
    )
    .unwrap();
    let a = &r.rules[0];
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(a.dst.matches(ip("10.2.3.4")));
    assert!(!a.dst.matches(ip("10.1.3.4")));
    assert!(a.src.matches(ip("10.1.3.4")), "outside HOME_NET");
    assert!(!a.src.matches(ip("10.2.3.4")));
    assert!(a.header_matches(ip("8.8.8.8"), 5, ip("10.2.0.1"), 2000));
    assert!(!a.header_matches(ip("8.8.8.8"), 5, ip("10.2.0.1"), 80));
    assert!(
        a.header_matches(ip("10.2.0.1"), 2000, ip("8.8.8.8"), 5),
        "<> takes the other way"
    );
    let b = &r.rules[1];
    assert!(
        b.src.matches(ip("2001:db8::1"))
            && b.src.matches(ip("192.168.1.9"))
            && !b.src.matches(ip("192.168.2.9"))
    );
    assert!(b.sport.matches(54) && !b.sport.matches(53) && !b.sport.matches(123));
    assert!(b.dport.matches(0) && b.dport.matches(1023) && !b.dport.matches(1024));
}

#[test]
fn pcre_flags_and_what_a_dfa_cannot_take() {
    let r = one(
        r#"alert tcp any any -> any any (content:"a"; pcre:"/b[0-9]+c/Ri"; pcre:!"/^POST/M"; sid:3;)"#,
    );
    let Check::Pcre(p) = &r.checks[1] else {
        panic!()
    };
    assert!(p.relative && !p.negated && p.regex.is_match(b"B12C"));
    let Check::Pcre(p) = &r.checks[2] else {
        panic!()
    };
    assert!(p.negated && p.buffer == Buffer::HttpMethod);
    let e = fails(r#"alert tcp any any -> any any (pcre:"/(a)\1/"; sid:4;)"#);
    assert_eq!(e.keyword.as_deref(), Some("pcre"));
    assert!(e.why.contains("backreference"), "{e}");
    let e = fails(r#"alert tcp any any -> any any (pcre:"/a(?=b)/"; sid:4;)"#);
    assert!(e.why.contains("look-around"), "{e}");
    let e = fails(r#"alert tcp any any -> any any (pcre:"/a/G"; sid:4;)"#);
    assert!(e.why.contains("flag `G`"), "{e}");
}

#[test]
fn errors_name_the_line_and_keyword() {
    let e = fails(
        "# a comment\n\nalert tcp any any -> any any (msg:\"x\"; \\\n  byte_test:4,>,1,0; sid:9;)",
    );
    assert_eq!((e.line, e.keyword.as_deref()), (3, Some("byte_test")));
    assert_eq!(
        e.to_string(),
        "t.rules:3: `byte_test`: keyword not supported"
    );
    let e = fails("alert tcp any any -> any any (content:\"ab\"; depth:1; sid:1;)");
    assert_eq!(e.keyword.as_deref(), Some("depth"));
    let e = fails("alert tcp any any -> any (sid:1;)");
    assert!(e.why.contains("6 fields"), "{e}");
    let e = fails("alert tcp $NOPE any -> any any (sid:1;)");
    assert!(e.why.contains("$NOPE is not defined"), "{e}");
    let e = fails("alert tcp any any -> any any (content:\"|4|\"; sid:1;)");
    assert!(e.why.contains("odd number"), "{e}");
    let e = fails("alert tcp any any -> any any (content:\"a\"; sid:1)");
    assert!(e.why.contains("no `;`"), "{e}");
    let e = fails("alert tcp any any -> any any (msg:\"a\";)");
    assert_eq!(e.keyword.as_deref(), Some("sid"));
    let e = fails("alert tcp any any -> any any (sid:1;)\nalert tcp any any -> any any (sid:1;)");
    assert_eq!(e.line, 2);
    let e = fails("alert tcp any any -> any any (nocase; sid:1;)");
    assert!(e.why.contains("without a content"), "{e}");
    let e = fails("alert tcp any 70000 -> any any (sid:1;)");
    assert_eq!(e.keyword.as_deref(), Some("port"));
}

#[test]
fn unsupported_rules_are_skipped_and_counted_when_asked() {
    let text = "alert tcp any any -> any any (byte_jump:4,0; sid:1;)\nalert tcp any any -> any any (content:\"x\"; sid:2;)\nalert tcp any any -> any any (content:\"|zz|\"; sid:3;)";
    let o = Options {
        skip_unsupported: true,
    };
    // A malformed rule is still an error: only unknown keywords are skippable.
    let e = parse(text, "t", &Vars::default(), &o).unwrap_err();
    assert_eq!(e.line, 3);
    let r = parse(
        &text.lines().take(2).collect::<Vec<_>>().join("\n"),
        "t",
        &Vars::default(),
        &o,
    )
    .unwrap();
    assert_eq!(r.rules.len(), 1);
    assert_eq!(r.skipped.len(), 1);
    assert!(r.skipped[0].1.contains("byte_jump"), "{:?}", r.skipped);
}

#[test]
fn flowbits_and_threshold() {
    let r = one("alert tcp any any -> any any (flowbits:set,login; flowbits:noalert; threshold:type limit, track by_src, count 1, seconds 60; sid:5;)");
    assert_eq!(
        r.flowbits,
        vec![Flowbit::Set("login".into()), Flowbit::NoAlert]
    );
    assert!(!r.alerts());
    let t = r.threshold.unwrap();
    assert_eq!(
        (t.kind, t.by_src, t.count, t.seconds),
        (ThresholdKind::Limit, true, 1, 60)
    );
    let e = fails("alert tcp any any -> any any (flowbits:isset,a|b; sid:5;)");
    assert_eq!(e.keyword.as_deref(), Some("flowbits"));
}

proptest::proptest! {
    /// Hostile rule text (rules cut anywhere, keywords and punctuation shuffled) never
    /// panics: it loads, or the error names a line of the text.
    #[test]
    fn any_text_loads_or_names_its_line(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "alert ", "drop ", "tcp ", "udp ", "http ", "any ", "$HOME_NET ", "[1.2.3.0/24,!1.2.3.4] ", "80:90 ", "!:1023 ", "-> ", "<> ",
            "(", ")", ";", ":", "\"", "\\", "|", "|41 4", "content:\"a|42|c\"; ", "nocase; ", "depth:3; ", "within:2; ", "distance:-1; ",
            "pcre:\"/a(b)\\1/\"; ", "pcre:\"/x+/Ri\"; ", "http.uri; ", "flowbits:set,x; ", "threshold:type both, track by_dst, count 2, seconds 1; ",
            "sid:1; ", "sid:2; ", "msg:\"m\"; ", "\n", "\\\n", "# c\n", "ipvar A [1.1.1.1] \n", "portvar P [1,2]\n",
        ]), 0..40),
    ) {
        let text: String = pieces.concat();
        let lines = text.lines().count().max(1);
        match parse(&text, "f", &Vars::default(), &Options::default()) {
            Ok(_) => {}
            Err(e) => proptest::prop_assert!(e.line <= lines, "{e} (text has {lines} lines)"),
        }
    }
}
