//! Inspection filters: count, hist, inspect, grep/regex, match, dedup (`sample` lives with
//! the other NIC-FIX filters in [`crate::nicfix`]).

use crate::packet::{parse_tag, L4};
use aho_corasick::AhoCorasick;
use dataplane::{Args, Batch, Classifier, Classify, Ctx, Filter, FilterError, Tag};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::io::Write;

/// Counts blocks and bytes, passes everything on unchanged.
#[derive(Default)]
pub struct Count {
    blocks: u64,
    bytes: u64,
}
impl Filter for Count {
    fn process(&mut self, _cx: &mut Ctx<'_>, batch: &mut Batch) {
        self.blocks += batch.len() as u64;
        self.bytes += batch.tags.iter().map(|t| t.len as u64).sum::<u64>();
    }
    fn summary(&self) -> Option<String> {
        Some(format!(
            "count: {} blocks, {} bytes",
            self.blocks, self.bytes
        ))
    }
}

/// Histogram of classes or lengths.
pub struct Hist {
    by_len: bool,
    h: BTreeMap<u64, u64>,
}
impl Filter for Hist {
    fn process(&mut self, _cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in &batch.tags {
            let k = if self.by_len {
                (t.len as u64).next_power_of_two()
            } else {
                t.class as u64
            };
            *self.h.entry(k).or_default() += 1;
        }
    }
    fn summary(&self) -> Option<String> {
        let total: u64 = self.h.values().sum();
        let mut rows: Vec<_> = self.h.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let what = if self.by_len { "length <=" } else { "class" };
        let mut s = format!("hist: {total} blocks");
        for (k, v) in rows.iter().take(20) {
            s += &format!(
                "\n  {what} {k:>8}: {v:>10} ({:.1}%)",
                100.0 * **v as f64 / total.max(1) as f64
            );
        }
        if rows.len() > 20 {
            s += &format!("\n  ... {} more", rows.len() - 20);
        }
        Some(s)
    }
}

/// One line per packet, like tcpdump's, or JSON lines.
pub struct Inspect {
    json: bool,
    out: Box<dyn Write + Send>,
}

fn ts_text(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let us = (ns % 1_000_000_000) / 1000;
    let day = secs % 86400;
    format!(
        "{:02}:{:02}:{:02}.{us:06}",
        day / 3600,
        day / 60 % 60,
        day % 60
    )
}

impl Filter for Inspect {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        let mut lines = String::new();
        for t in &batch.tags {
            let meta = cx.store.record(t).map(|(m, _)| m);
            let p = parse_tag(cx, t);
            if self.json {
                let mut o = serde_json::Map::new();
                if let Some(m) = meta {
                    o.insert("ts".into(), (m.ts_ns as f64 / 1e9).into());
                    o.insert("wire_len".into(), m.orig_len.into());
                }
                o.insert("len".into(), t.len.into());
                o.insert("class".into(), t.class.into());
                if let Some(p) = &p {
                    if let Some((v, src, dst, proto)) = p.ip {
                        o.insert("ip".into(), v.into());
                        o.insert("src".into(), src.to_string().into());
                        o.insert("dst".into(), dst.to_string().into());
                        o.insert("proto".into(), proto.into());
                    }
                    if let Some((s, d)) = p.ports() {
                        o.insert("sport".into(), s.into());
                        o.insert("dport".into(), d.into());
                    }
                    o.insert("payload_len".into(), p.payload.1.into());
                }
                lines += &serde_json::Value::Object(o).to_string();
                lines.push('\n');
                continue;
            }
            let ts = meta.map_or_else(|| "-".to_string(), |m| ts_text(m.ts_ns));
            let line = match &p {
                Some(p) => match p.ip {
                    Some((v, src, dst, _)) => {
                        let fam = if v == 4 { "IP" } else { "IP6" };
                        match p.l4 {
                            L4::Tcp { sport, dport, seq, syn, fin, rst, .. } => {
                                let mut f = String::new();
                                if syn {
                                    f.push('S');
                                }
                                if fin {
                                    f.push('F');
                                }
                                if rst {
                                    f.push('R');
                                }
                                if f.is_empty() {
                                    f.push('.');
                                }
                                format!("{ts} {fam} {src}.{sport} > {dst}.{dport}: Flags [{f}], seq {seq}, length {}", p.payload.1)
                            }
                            L4::Udp { sport, dport } => format!("{ts} {fam} {src}.{sport} > {dst}.{dport}: UDP, length {}", p.payload.1),
                            L4::Icmp4 { kind, code } => format!("{ts} {fam} {src} > {dst}: ICMP type {kind} code {code}, length {}", p.payload.1),
                            L4::Icmp6 { kind, code } => format!("{ts} {fam} {src} > {dst}: ICMP6 type {kind} code {code}, length {}", p.payload.1),
                            _ => format!("{ts} {fam} {src} > {dst}: proto {}, length {}", p.proto().unwrap_or(0), p.payload.1),
                        }
                    }
                    None => format!(
                        "{ts} ethertype {:#06x}, length {}",
                        p.ether_type.unwrap_or(0),
                        t.len
                    ),
                },
                None => format!("{ts} block of {} bytes, class {}", t.len, t.class),
            };
            lines += &line;
            lines.push('\n');
        }
        if let Err(e) = self.out.write_all(lines.as_bytes()) {
            cx.warn(format!("cannot write output: {e}"));
            cx.stop();
        }
    }
    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        if let Err(e) = self.out.flush() {
            cx.warn(format!("cannot write output: {e}"));
            cx.stop();
        }
    }
}

fn output(a: &Args) -> Result<Box<dyn Write + Send>, FilterError> {
    match a.get("file", None) {
        None | Some("-") => Ok(Box::new(std::io::BufWriter::new(std::io::stdout()))),
        Some(f) => Ok(Box::new(std::io::BufWriter::new(
            std::fs::File::create(f)
                .map_err(|e| FilterError::io(format!("cannot create {f}"), e))?,
        ))),
    }
}

/// Regular expression on block contents (bytes).
pub struct Grep {
    re: regex::bytes::Regex,
    invert: bool,
}
impl Classify for Grep {
    fn classify(&mut self, data: &[u8], _t: &Tag) -> u16 {
        (self.re.is_match(data) != self.invert) as u16
    }
}

/// Aho-Corasick multi-pattern match: class = index of the first pattern found + 1.
pub struct Match {
    ac: AhoCorasick,
}
impl Classify for Match {
    fn classify(&mut self, data: &[u8], _t: &Tag) -> u16 {
        self.ac
            .find(data)
            .map_or(0, |m| m.pattern().as_u32() as u16 + 1)
    }
}

/// Drops blocks whose contents were seen among the last N blocks.
pub struct Dedup {
    window: usize,
    seen: HashSet<u64>,
    order: VecDeque<u64>,
}
impl Filter for Dedup {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in batch.tags.iter_mut() {
            let h = cx.data(t).map(dataplane::hash::fnv1a).unwrap_or(0);
            if self.seen.contains(&h) {
                t.class = 0;
                continue;
            }
            t.class = t.class.max(1);
            self.seen.insert(h);
            self.order.push_back(h);
            if self.order.len() > self.window {
                if let Some(old) = self.order.pop_front() {
                    self.seen.remove(&old);
                }
            }
        }
    }
}

pub(crate) fn make_count(_: &Args) -> Result<Box<dyn Filter>, FilterError> {
    Ok(Box::<Count>::default())
}
pub(crate) fn make_hist(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let by_len = match a.get("by", Some(0)).unwrap_or("class") {
        "class" => false,
        "len" | "length" => true,
        o => return Err(FilterError::bad("by", o, "class or len")),
    };
    Ok(Box::new(Hist {
        by_len,
        h: BTreeMap::new(),
    }))
}
pub(crate) fn make_inspect(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let json = match a.get("format", None).unwrap_or("text") {
        "text" => false,
        "json" => true,
        f => return Err(FilterError::bad("format", f, "text or json")),
    };
    Ok(Box::new(Inspect {
        json,
        out: output(a)?,
    }))
}
pub(crate) fn make_grep(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let pat = a.require("pattern", Some(0))?;
    let re = regex::bytes::RegexBuilder::new(pat)
        .case_insensitive(a.flag("icase")?)
        .build()
        .map_err(|e| FilterError::bad("pattern", pat, &format!("a regular expression ({e})")))?;
    Ok(Box::new(Classifier(Grep {
        re,
        invert: a.flag("invert")?,
    })))
}
pub(crate) fn make_match(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let mut pats: Vec<String> = a.positional.clone();
    if let Some(f) = a.get("file", None) {
        let text = std::fs::read_to_string(f)
            .map_err(|e| FilterError::io(format!("cannot read {f}"), e))?;
        pats.extend(text.lines().filter(|l| !l.is_empty()).map(String::from));
    }
    if pats.is_empty() {
        return Err(FilterError::Missing {
            key: "pattern".into(),
            expected: "patterns as parameters or file=PATTERNS".into(),
        });
    }
    let ac = AhoCorasick::builder()
        .ascii_case_insensitive(a.flag("icase")?)
        .build(&pats)
        .map_err(|e| FilterError::invalid("the patterns do not build a matcher", e))?;
    Ok(Box::new(Classifier(Match { ac })))
}
pub(crate) fn make_dedup(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let window = a.size("window", Some(0), 4096)? as usize;
    Ok(Box::new(Dedup {
        window: window.max(1),
        seen: HashSet::new(),
        order: VecDeque::new(),
    }))
}
// The declarations of this file's filters are data in the catalog
// (`catalog::inspect::{COUNT, HIST, INSPECT, GREP, REGEX, MATCH, DEDUP}`); their
// constructors are below, paired with them in `filters::CONSTRUCTORS`.
