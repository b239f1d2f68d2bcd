//! The prefilter: every rule's fast pattern in one multi-pattern automaton per buffer, so
//! the cost of finding the candidate rules for some bytes does not grow with the number of
//! rules (thesis 7.3.1: Ruler matched "the whole set of regular expressions in parallel";
//! Snort's fast-pattern matcher is Aho-Corasick). Only candidates are evaluated in full
//! ([`super::eval`]).
//!
//! A rule's fast pattern is the content it marks `fast_pattern`, else its longest positive
//! content. One ASCII-case-insensitive DFA per buffer holds them all (a case-sensitive
//! pattern that matched in another case is a candidate the full evaluation turns down).
//! The DFA runs byte by byte from a state the caller keeps ([`Scan`]), so a stream scanned
//! segment by segment finds a pattern split across two segments as if it were one buffer.
//! A rule without a positive content is a candidate wherever its buffer is inspected.
//!
//! Owns: the choice of fast patterns and the automata. Uses the `aho-corasick` crate's
//! DFA and its `Automaton` stepping interface.

use super::rules::{Buffer, Check, Rule};
use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::dfa::DFA;
use aho_corasick::{Anchored, MatchKind};
use std::collections::HashMap;

const BUFFERS: [Buffer; 4] = [
    Buffer::Payload,
    Buffer::HttpUri,
    Buffer::HttpHeader,
    Buffer::HttpMethod,
];

fn slot(b: Buffer) -> usize {
    BUFFERS.iter().position(|&x| x == b).unwrap_or(0)
}

/// One buffer's automaton: its patterns, and the rules each pattern stands for.
struct Part {
    dfa: Option<DFA>,
    /// By pattern id: the rules whose fast pattern it is.
    rules: Vec<Vec<u32>>,
    /// Rules with no positive content in this buffer but checks in it: always candidates
    /// when the buffer is inspected.
    always: Vec<u32>,
    /// Bytes of the longest pattern.
    longest: usize,
}

/// The prefilter of one rule set.
pub struct Prefilter {
    parts: Vec<Part>,
    rules: usize,
}

impl std::fmt::Debug for Prefilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefilter")
            .field("rules", &self.rules)
            .field(
                "patterns",
                &self.parts.iter().map(|p| p.rules.len()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Where a scan of one buffer stands (per stream direction, for a stream's payload).
#[derive(Debug, Clone, Copy, Default)]
pub struct Scan {
    state: Option<StateID>,
}

/// Which rules are candidates: a bit per rule, and their list.
#[derive(Debug, Clone, Default)]
pub struct Candidates {
    bits: Vec<u64>,
    pub list: Vec<u32>,
}

impl Candidates {
    pub fn new(rules: usize) -> Candidates {
        Candidates {
            bits: vec![0; rules.div_ceil(64)],
            list: Vec::new(),
        }
    }

    fn add(&mut self, r: u32) {
        let (w, b) = (r as usize / 64, r as usize % 64);
        if self.bits[w] & (1 << b) == 0 {
            self.bits[w] |= 1 << b;
            self.list.push(r);
        }
    }

    /// Forget the candidates (keeping the room).
    pub fn clear(&mut self) {
        for &r in &self.list {
            self.bits[r as usize / 64] &= !(1 << (r % 64));
        }
        self.list.clear();
    }
}

/// The content a rule's prefilter looks for: its `fast_pattern`, else its longest
/// positive content. None: it has no positive content.
pub fn fast_pattern(r: &Rule) -> Option<(Buffer, &[u8])> {
    let positive = r.checks.iter().filter_map(|c| match c {
        Check::Content(c) if !c.negated => Some(c),
        _ => None,
    });
    let chosen = positive
        .clone()
        .find(|c| c.fast_pattern)
        .or_else(|| positive.max_by_key(|c| c.bytes.len()))?;
    Some((chosen.buffer, &chosen.bytes))
}

impl Prefilter {
    /// The prefilter of `rules` (rule `i` of the slice is candidate `i`).
    pub fn new(rules: &[Rule]) -> Result<Prefilter, String> {
        let mut parts = Vec::new();
        for b in BUFFERS {
            let mut patterns: Vec<Vec<u8>> = Vec::new();
            let mut index = HashMap::<Vec<u8>, usize>::new();
            let mut by_pattern: Vec<Vec<u32>> = Vec::new();
            let mut always = Vec::new();
            for (i, r) in rules.iter().enumerate() {
                match fast_pattern(r) {
                    Some((fb, bytes)) if fb == b => {
                        let key = bytes.to_ascii_lowercase();
                        let k = *index.entry(key.clone()).or_insert_with(|| {
                            patterns.push(key);
                            by_pattern.push(Vec::new());
                            patterns.len() - 1
                        });
                        by_pattern[k].push(i as u32);
                    }
                    None if r.checks.iter().any(|c| c.buffer() == b)
                        || (b == Buffer::Payload && r.checks.is_empty()) =>
                    {
                        always.push(i as u32)
                    }
                    _ => {}
                }
            }
            let dfa = if patterns.is_empty() {
                None
            } else {
                Some(
                    DFA::builder()
                        .match_kind(MatchKind::Standard)
                        .ascii_case_insensitive(true)
                        .build(&patterns)
                        .map_err(|e| {
                            format!(
                                "the {} automaton ({} patterns): {e}",
                                b.name(),
                                patterns.len()
                            )
                        })?,
                )
            };
            parts.push(Part {
                dfa,
                longest: patterns.iter().map(Vec::len).max().unwrap_or(0),
                rules: by_pattern,
                always,
            });
        }
        Ok(Prefilter {
            parts,
            rules: rules.len(),
        })
    }

    /// Room for the candidates of this rule set.
    pub fn candidates(&self) -> Candidates {
        Candidates::new(self.rules)
    }

    /// Whether any rule reads buffer `b`.
    pub fn reads(&self, b: Buffer) -> bool {
        let p = &self.parts[slot(b)];
        p.dfa.is_some() || !p.always.is_empty()
    }

    /// Scan `data`, the next bytes of buffer `b` after what `scan` has seen, adding the
    /// rules whose fast pattern ends in it (or that are always candidates) to `out`.
    pub fn scan(&self, b: Buffer, data: &[u8], scan: &mut Scan, out: &mut Candidates) {
        let p = &self.parts[slot(b)];
        for &r in &p.always {
            out.add(r);
        }
        let Some(dfa) = &p.dfa else { return };
        let mut sid = match scan.state {
            Some(s) => s,
            None => match dfa.start_state(Anchored::No) {
                Ok(s) => s,
                Err(_) => return,
            },
        };
        let pre = dfa.prefilter();
        // Bytes at the end a pattern that goes on in the next part may start in (the
        // prefilter only finds patterns wholly inside what it is given).
        let tail = data.len().saturating_sub(p.longest.saturating_sub(1));
        let mut at = 0;
        while at < data.len() {
            sid = dfa.next_state(Anchored::No, sid, data[at]);
            at += 1;
            if !dfa.is_special(sid) {
                continue;
            }
            if dfa.is_match(sid) {
                for k in 0..dfa.match_len(sid) {
                    for &r in &p.rules[dfa.match_pattern(sid, k).as_usize()] {
                        out.add(r);
                    }
                }
            } else if let (Some(pre), true) = (pre, dfa.is_start(sid)) {
                // In the start state (no partial match under way): skip to where the
                // prefilter (memchr and friends) says a pattern may start, or, if none
                // does, to the tail.
                match pre
                    .find_in(data, aho_corasick::Span::from(at..data.len()))
                    .into_option()
                {
                    Some(i) => at = i.max(at),
                    None => at = tail.max(at),
                }
            }
        }
        scan.state = Some(sid);
    }
}

#[cfg(test)]
mod tests {
    use super::super::rules::{parse, Options, Vars};
    use super::*;

    fn rules(text: &str) -> Vec<Rule> {
        parse(text, "t", &Vars::default(), &Options::default())
            .unwrap_or_else(|e| panic!("{e}"))
            .rules
    }

    fn found(p: &Prefilter, b: Buffer, parts: &[&[u8]]) -> Vec<u32> {
        let mut scan = Scan::default();
        let mut c = p.candidates();
        for d in parts {
            p.scan(b, d, &mut scan, &mut c);
        }
        let mut l = c.list.clone();
        l.sort();
        l
    }

    #[test]
    fn candidates_are_the_rules_whose_fast_pattern_occurs() {
        let r = rules(
            r#"alert tcp any any -> any any (content:"ab"; content:"longer"; sid:1;)
alert tcp any any -> any any (content:"ab"; fast_pattern; content:"longer"; sid:2;)
alert tcp any any -> any any (content:"EVIL"; nocase; sid:3;)
alert tcp any any -> any any (pcre:"/x+y/"; sid:4;)
alert tcp any any -> any any (http.uri; content:"/admin"; sid:5;)
alert tcp any any -> any any (content:!"absent"; sid:6;)"#,
        );
        let p = Prefilter::new(&r).unwrap();
        assert_eq!(fast_pattern(&r[0]).unwrap().1, b"longer");
        assert_eq!(fast_pattern(&r[1]).unwrap().1, b"ab");
        // Rules 4 and 6 (index 3, 5) have no positive content: always candidates.
        assert_eq!(found(&p, Buffer::Payload, &[b"xx ab xx"]), [1, 3, 5]);
        assert_eq!(
            found(&p, Buffer::Payload, &[b"a longer evil"]),
            [0, 2, 3, 5]
        );
        assert_eq!(found(&p, Buffer::HttpUri, &[b"/admin/x"]), [4]);
        assert!(p.reads(Buffer::HttpUri) && !p.reads(Buffer::HttpHeader));
    }

    #[test]
    fn a_pattern_split_across_segments_is_found() {
        let r = rules(r#"alert tcp any any -> any any (content:"attack"; sid:1;)"#);
        let p = Prefilter::new(&r).unwrap();
        assert_eq!(found(&p, Buffer::Payload, &[b"xxat", b"ta", b"ck"]), [0]);
        assert!(found(&p, Buffer::Payload, &[b"xxat", b"tack"]).len() == 1);
        assert!(found(&p, Buffer::Payload, &[b"xxat", b"xtack"]).is_empty());
    }

    use proptest::prelude::*;

    proptest! {
        /// Scanned in parts cut anywhere (the prefilter's skips included), the candidates
        /// are exactly the rules whose pattern occurs in the whole, ignoring ASCII case.
        #[test]
        fn parts_find_what_the_whole_holds(
            // Patterns sharing a byte that is rare in the traffic (`z`, either case) make
            // the automaton's prefilter look for it (memchr), so a pattern cut before its
            // `z` at the end of a part is what the skips must not lose.
            pats in proptest::collection::vec("[ab]{1,3}z[ab]{0,2}", 1..12),
            hay in proptest::collection::vec(any::<u8>().prop_map(|b| b"abABababxyzZ"[b as usize % 12]), 0..300),
            cuts in proptest::collection::vec(0usize..300, 0..6),
        ) {
            let text: String = pats
                .iter()
                .enumerate()
                .map(|(i, p)| format!("alert tcp any any -> any any (content:\"{p}\"; sid:{};)\n", i + 1))
                .collect();
            let r = rules(&text);
            let p = Prefilter::new(&r).unwrap();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(hay.len())).collect();
            cuts.sort();
            let mut parts: Vec<&[u8]> = Vec::new();
            let mut last = 0;
            for c in cuts.into_iter().chain([hay.len()]) {
                parts.push(&hay[last..c]);
                last = c;
            }
            let got = found(&p, Buffer::Payload, &parts);
            let lower = hay.to_ascii_lowercase();
            let want: Vec<u32> = (0..pats.len() as u32)
                .filter(|&i| lower.windows(pats[i as usize].len()).any(|w| w == pats[i as usize].as_bytes()))
                .collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn the_cost_does_not_depend_on_how_many_rules_share_the_automaton() {
        // Not a timing: the automaton of 1000 rules finds exactly the rules whose
        // patterns occur, as 1000 separate searches would.
        let text: String = (0..1000)
            .map(|i| {
                format!(
                    "alert tcp any any -> any any (content:\"pat{i:04}x\"; sid:{};)\n",
                    i + 1
                )
            })
            .collect();
        let r = rules(&text);
        let p = Prefilter::new(&r).unwrap();
        let data = b"..pat0007x..PAT0999X..pat0500y..";
        let want: Vec<u32> = (0..1000u32)
            .filter(|&i| {
                let pat = format!("pat{i:04}x");
                data.to_ascii_lowercase()
                    .windows(pat.len())
                    .any(|w| w == pat.as_bytes())
            })
            .collect();
        assert_eq!(found(&p, Buffer::Payload, &[data]), want);
        assert_eq!(want, [7, 999]);
    }
}
