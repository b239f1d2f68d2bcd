//! One rule's payload checks against the buffers of a packet or a stream, in Snort's
//! sense: each content in its window (`offset`/`depth` from the buffer's start,
//! `distance`/`within` from the end of the previous match in the same buffer), a negated
//! content or pcre absent from its window, and, when a later relative check fails, the
//! earlier checks tried at their next matches (Snort's backtracking), within a budget.
//!
//! Owns: what `offset`, `depth`, `distance`, `within`, `nocase`, `!` and pcre's `R` mean.
//! Does not own: which rules are candidates (the prefilter), headers, flow state.

use super::rules::{Buffer, Check, Content, Pcre};

/// The buffers a rule's checks read: the payload always; the HTTP buffers when the
/// stream is HTTP and the parser found the request's parts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Buffers<'a> {
    pub payload: &'a [u8],
    pub uri: Option<&'a [u8]>,
    pub header: Option<&'a [u8]>,
    pub method: Option<&'a [u8]>,
}

impl<'a> Buffers<'a> {
    pub fn payload(payload: &'a [u8]) -> Buffers<'a> {
        Buffers {
            payload,
            ..Buffers::default()
        }
    }

    pub fn get(&self, b: Buffer) -> Option<&'a [u8]> {
        match b {
            Buffer::Payload => Some(self.payload),
            Buffer::HttpUri => self.uri,
            Buffer::HttpHeader => self.header,
            Buffer::HttpMethod => self.method,
        }
    }
}

/// Matches a rule may try before it gives up (Snort's backtracking is bounded too): a
/// hostile payload of many partial matches costs at most this many steps per rule.
pub const BUDGET: u32 = 4096;

/// What evaluating a rule's checks found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Match,
    NoMatch,
    /// The budget ran out before a match was found (counted by the caller: a rule that
    /// could not be decided is reported, never taken for clean in silence).
    Exhausted,
}

/// Whether `checks` all hold on `bufs`.
pub fn evaluate(checks: &[Check], bufs: &Buffers<'_>) -> Outcome {
    let mut budget = BUDGET;
    let cursors = [0usize; 4];
    match step(checks, 0, bufs, cursors, &mut budget) {
        true => Outcome::Match,
        false if budget == 0 => Outcome::Exhausted,
        false => Outcome::NoMatch,
    }
}

fn slot(b: Buffer) -> usize {
    match b {
        Buffer::Payload => 0,
        Buffer::HttpUri => 1,
        Buffer::HttpHeader => 2,
        Buffer::HttpMethod => 3,
    }
}

/// Whether a check after `i` in buffer `b` is placed relative to the previous match (so
/// the position of check `i`'s match matters, and later matches must be tried).
fn later_relative(checks: &[Check], i: usize, b: Buffer) -> bool {
    checks[i + 1..].iter().any(|c| {
        c.buffer() == b
            && match c {
                Check::Content(c) => c.relative(),
                Check::Pcre(p) => p.relative,
            }
    })
}

fn step(
    checks: &[Check],
    i: usize,
    bufs: &Buffers<'_>,
    cursors: [usize; 4],
    budget: &mut u32,
) -> bool {
    let Some(check) = checks.get(i) else {
        return true;
    };
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    let b = check.buffer();
    let Some(data) = bufs.get(b) else {
        return false;
    };
    let cursor = cursors[slot(b)];
    let all = later_relative(checks, i, b);
    let mut next = |end: usize, budget: &mut u32| {
        let mut c = cursors;
        c[slot(b)] = end;
        step(checks, i + 1, bufs, c, budget)
    };
    match check {
        Check::Content(c) => {
            let (start, end) = window(c, cursor, data.len());
            if c.negated {
                return find(c, data, start, end).is_none() && next(cursor, budget);
            }
            let mut from = start;
            while let Some(p) = find(c, data, from, end) {
                if next(p + c.bytes.len(), budget) {
                    return true;
                }
                if !all || *budget == 0 {
                    return false;
                }
                *budget -= 1;
                from = p + 1;
            }
            false
        }
        Check::Pcre(p) => pcre_step(p, data, cursor, all, budget, &mut next),
    }
}

fn pcre_step(
    p: &Pcre,
    data: &[u8],
    cursor: usize,
    all: bool,
    budget: &mut u32,
    next: &mut impl FnMut(usize, &mut u32) -> bool,
) -> bool {
    let start = if p.relative {
        cursor.min(data.len())
    } else {
        0
    };
    if p.negated {
        return p.regex.find_at(data, start).is_none() && next(cursor, budget);
    }
    let mut from = start;
    while let Some(m) = p.regex.find_at(data, from) {
        if next(m.end(), budget) {
            return true;
        }
        if !all || *budget == 0 || from >= data.len() {
            return false;
        }
        *budget -= 1;
        from = m.start() + 1;
    }
    false
}

/// The window `[start, end)` content `c` is searched in, in a buffer of `len` bytes with
/// the previous match ending at `cursor`.
fn window(c: &Content, cursor: usize, len: usize) -> (usize, usize) {
    let (start, end) = if c.relative() {
        let s = cursor as i64 + c.distance.unwrap_or(0) as i64;
        let e = c.within.map_or(len as i64, |w| s + w as i64);
        (s, e)
    } else {
        let s = c.offset.unwrap_or(0) as i64;
        let e = c.depth.map_or(len as i64, |d| s + d as i64);
        (s, e)
    };
    (
        start.clamp(0, len as i64) as usize,
        end.clamp(0, len as i64) as usize,
    )
}

/// The first position at or after `from` where `c`'s bytes lie wholly before `end`.
fn find(c: &Content, data: &[u8], from: usize, end: usize) -> Option<usize> {
    let n = c.bytes.len();
    if from >= end || end - from < n {
        return None;
    }
    let hay = &data[from..end];
    let at = if c.nocase {
        hay.windows(n)
            .position(|w| w.eq_ignore_ascii_case(&c.bytes))
    } else {
        memchr::memmem::find(hay, &c.bytes)
    };
    at.map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::super::rules::{parse, Options, Vars};
    use super::*;

    fn checks(opts: &str) -> Vec<Check> {
        let text = format!("alert tcp any any -> any any ({opts} sid:1;)");
        let mut r = parse(&text, "t", &Vars::default(), &Options::default())
            .unwrap_or_else(|e| panic!("{e}"));
        r.rules.remove(0).checks
    }

    fn hit(opts: &str, payload: &[u8]) -> bool {
        match evaluate(&checks(opts), &Buffers::payload(payload)) {
            Outcome::Match => true,
            Outcome::NoMatch => false,
            Outcome::Exhausted => panic!("budget ran out"),
        }
    }

    #[test]
    fn offset_and_depth_bound_the_window_from_the_start() {
        assert!(hit(r#"content:"abc"; offset:2; depth:3;"#, b"xxabcxx"));
        assert!(!hit(r#"content:"abc"; offset:3;"#, b"xxabcxx"));
        assert!(!hit(r#"content:"abc"; depth:4;"#, b"xxabcxx"));
        assert!(hit(r#"content:"ABC"; nocase;"#, b"xxabcxx"));
        assert!(!hit(r#"content:"ABC";"#, b"xxabcxx"));
    }

    /// The Snort list's own example: `hello` then `world` with distance 4, within 5.
    #[test]
    fn distance_and_within_follow_the_previous_match() {
        let o = r#"content:"hello"; content:"world"; distance:4; within:5;"#;
        assert!(hit(o, b"GET /hello1234world"));
        assert!(!hit(o, b"GET /hello123world"));
        assert!(!hit(o, b"GET /hello12345world"));
        assert!(hit(
            r#"content:"foo"; content:"bar"; within:10;"#,
            b"foo......bar"
        ));
        assert!(!hit(
            r#"content:"foo"; content:"bar"; within:10;"#,
            b"foo........bar"
        ));
        // A negative distance looks back over the previous match.
        assert!(hit(
            r#"content:"bar"; content:"ob"; distance:-4; within:2;"#,
            b"foobar"
        ));
    }

    #[test]
    fn a_later_failure_tries_the_earlier_content_further_on() {
        // The first `a` is not followed by `b` within 1; the second is.
        assert!(hit(r#"content:"a"; content:"b"; within:1;"#, b"a.xab"));
        assert!(!hit(r#"content:"a"; content:"b"; within:1;"#, b"a.xa.b"));
    }

    #[test]
    fn negation_and_pcre() {
        assert!(hit(
            r#"content:"user"; content:!"admin"; distance:0;"#,
            b"user bob"
        ));
        assert!(!hit(
            r#"content:"user"; content:!"admin"; distance:0;"#,
            b"user admin"
        ));
        // Negation is only within its window: admin before user does not count.
        assert!(hit(
            r#"content:"user"; content:!"admin"; distance:0;"#,
            b"admin user bob"
        ));
        assert!(hit(
            r#"content:"id="; pcre:"/[0-9]{4}/R";"#,
            b"x=12345 id=9876"
        ));
        assert!(!hit(
            r#"content:"id="; pcre:"/^[0-9]{4}/R";"#,
            b"x=12345 id=98"
        ));
        assert!(hit(r#"pcre:!"/passw(or)?d/i";"#, b"nothing"));
        assert!(!hit(r#"pcre:!"/passw(or)?d/i";"#, b"PASSWD"));
    }

    #[test]
    fn http_buffers_are_their_own_and_absent_ones_never_match() {
        let c = checks(
            r#"http.method; content:"GET"; http.uri; content:"/admin"; pkt_data; content:"admin";"#,
        );
        let bufs = Buffers {
            payload: b"GET /admin HTTP/1.1\r\n\r\n",
            uri: Some(b"/admin"),
            header: Some(b""),
            method: Some(b"GET"),
        };
        assert_eq!(evaluate(&c, &bufs), Outcome::Match);
        assert_eq!(
            evaluate(&c, &Buffers::payload(bufs.payload)),
            Outcome::NoMatch
        );
    }

    #[test]
    fn a_hostile_payload_exhausts_the_budget_and_says_so() {
        // Every `a` is a candidate; none has `b` right after: each is tried, and the
        // budget ends the search with Exhausted, not a silent NoMatch.
        let c = checks(r#"content:"a"; content:"a"; distance:0; content:"b"; within:1;"#);
        let payload = vec![b'a'; 20_000];
        assert_eq!(
            evaluate(&c, &Buffers::payload(&payload)),
            Outcome::Exhausted
        );
    }
}

#[cfg(test)]
mod fuzz {
    use super::super::rules::{parse, Options, Vars};
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any checks the parser accepts, on any payload: an outcome, never a panic, and a
        /// match only if every positive content occurs somewhere in the payload.
        #[test]
        fn evaluation_is_total_and_sound(
            opts in proptest::collection::vec(proptest::sample::select(vec![
                "content:\"ab\";", "content:\"b\"; distance:0; within:3;", "content:!\"zz\";", "content:\"a\"; offset:2; depth:4;",
                "content:\"B\"; nocase; distance:-2;", "pcre:\"/a.b/R\";", "pcre:!\"/^b/\";", "content:\"aa\"; within:2;",
            ]), 1..6),
            payload in proptest::collection::vec(proptest::sample::select(vec![b'a', b'b', b'z', b'A', b'B']), 0..200),
        ) {
            let text = format!("alert tcp any any -> any any ({} sid:1;)", opts.join(" "));
            let Ok(r) = parse(&text, "t", &Vars::default(), &Options::default()) else { return Ok(()) };
            let checks = &r.rules[0].checks;
            let out = evaluate(checks, &Buffers::payload(&payload));
            if out == Outcome::Match {
                for c in checks {
                    if let Check::Content(c) = c {
                        if !c.negated {
                            let found = payload.windows(c.bytes.len()).any(|w| {
                                if c.nocase { w.eq_ignore_ascii_case(&c.bytes) } else { w == c.bytes.as_slice() }
                            });
                            prop_assert!(found, "{text} matched {:?}", String::from_utf8_lossy(&payload));
                        }
                    }
                }
            }
        }
    }
}
