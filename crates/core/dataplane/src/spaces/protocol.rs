//! The parent <-> process-space protocol: length-prefixed text messages over a Unix
//! socket, the space's [`Share`] of the run first (JSON), rings passed with SCM_RIGHTS (each acknowledged before the next is sent: one
//! message in flight), a space's report as tab-separated text, and a build error as
//! `error SPAN\tLABEL\tWHY` so a failing node keeps its caret across the process boundary.

use super::report::SpacesReport;
use super::split::{Share, EGRESS, INGRESS};
use crate::runtime::{
    ArcReport, ArcTarget, BuildError, BuildErrorKind, Carried, NodeReport, Space,
};
use beltway::RingRef;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

pub(super) fn send_msg(sock: &UnixStream, m: &str) -> std::io::Result<()> {
    let mut w = sock;
    w.write_all(&(m.len() as u32).to_le_bytes())?;
    w.write_all(m.as_bytes())
}

pub(super) fn recv_msg(sock: &UnixStream) -> std::io::Result<String> {
    let mut r = sock;
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let n = u32::from_le_bytes(n) as usize;
    if n > 16 << 20 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("message of {n} bytes"),
        ));
    }
    let mut b = vec![0u8; n];
    r.read_exact(&mut b)?;
    String::from_utf8(b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Hand a process space its share of the run (the first message it reads): the typed
/// value as JSON, so that it builds what the parent placed, node ids included, without
/// deriving anything again.
pub(super) fn send_share(sock: &UnixStream, share: &Share) -> std::io::Result<()> {
    send_msg(
        sock,
        &serde_json::to_string(share).map_err(std::io::Error::other)?,
    )
}

/// The share a process space's parent sent ([`send_share`]).
pub(super) fn recv_share(sock: &UnixStream) -> std::io::Result<Share> {
    let text = recv_msg(sock)?;
    serde_json::from_str(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

pub use crate::error::ProtocolError;

pub(super) fn send_ring(sock: &UnixStream, r: &RingRef) -> Result<(), ProtocolError> {
    r.send(sock)?;
    match recv_msg(sock)? {
        m if m == "ack" => Ok(()),
        m => Err(ProtocolError::Unexpected {
            expected: "an acknowledgement",
            got: m,
        }),
    }
}

pub(super) fn recv_ring(sock: &UnixStream) -> Result<RingRef, ProtocolError> {
    let r = RingRef::recv(sock)?;
    send_msg(sock, "ack")?;
    Ok(r)
}

/// A field of the report protocol (tab-separated, one record a line): backslash, tab,
/// newline and carriage return escaped, so multi-line summaries (hist, flowcount) reach
/// the parent as they were written.
pub(super) fn one_line(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

/// The inverse of [`one_line`].
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}

/// One `node` record: label, counters, summary (`-` for none).
fn node_line(n: &NodeReport, summary: &str) -> String {
    let c = n.counters;
    format!(
        "node\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{summary}\n",
        one_line(&n.label),
        c.blocks_in,
        c.bytes_in,
        c.blocks_out,
        c.bytes_out,
        c.drops,
        c.made,
        c.ended,
        c.nanos,
        c.lost,
    )
}

fn target_field(to: &ArcTarget) -> String {
    match to {
        ArcTarget::Node(l) => format!("n:{}", one_line(l)),
        ArcTarget::Channel(k) => format!("c:{k}"),
        ArcTarget::Internal => "i".into(),
    }
}

fn parse_target(t: &str, suffix: &str) -> ArcTarget {
    match t {
        "i" => ArcTarget::Internal,
        t if t.starts_with("c:") => ArcTarget::Channel(t[2..].parse().unwrap_or(usize::MAX)),
        t => ArcTarget::Node(format!(
            "{}{suffix}",
            unescape(t.strip_prefix("n:").unwrap_or(t))
        )),
    }
}

/// One `arc` record: from, to (`n:LABEL`, `c:CHANNEL` or `i` for an internal sink),
/// blocks, bytes.
fn arc_line(a: &ArcReport) -> String {
    let to = target_field(&a.to);
    format!(
        "arc\t{}\t{to}\t{}\t{}\n",
        one_line(&a.from),
        a.carried.blocks,
        a.carried.bytes
    )
}

/// A space's report as protocol text.
pub(super) fn report_text(space: &Space) -> String {
    let mut t = String::new();
    for n in space.report() {
        let summary = n.summary.as_deref().map_or("-".to_string(), one_line);
        t += &node_line(&n, &summary);
    }
    for a in space.arcs() {
        t += &arc_line(&a);
    }
    for (ch, to) in space.channel_heads() {
        t += &format!("head\t{ch}\t{}\n", target_field(&to));
    }
    t += &sites_text(space);
    for w in space.warnings() {
        t += &format!("warn\t{}\n", one_line(w));
    }
    if space.failed() {
        t += "failed\n";
    }
    if let Some(st) = space.exit_status() {
        t += &format!("status\t{st}\n");
    }
    t
}

/// `ring` records (per channel this space produces into: its rings' fill, as
/// `RingGauge`'s fields in order) and the `cpu` record (where the calling thread, the
/// space's run loop, runs now, and whether it is pinned there).
fn sites_text(space: &Space) -> String {
    let mut t = String::new();
    for (ch, g) in space.channel_rings() {
        t += &format!(
            "ring\t{ch}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            g.tags_used,
            g.tags_size,
            g.data_used,
            g.data_size,
            g.readers,
            g.writer_waits,
            g.wakeups
        );
    }
    if let Some((cpu, pinned)) = beltway::sys::current_cpu() {
        t += &format!("cpu\t{cpu}\t{}\n", u8::from(pinned));
    }
    t
}

/// The first line of a process space's counters sent while it runs (the lines after are
/// [`report_text`]'s `node` records, summaries left out); its last message, the report,
/// never starts so.
pub(super) const COUNTERS: &str = "counters\n";

/// A running space's counters as protocol text (see [`COUNTERS`]).
pub(super) fn counters_text(space: &Space) -> String {
    format!("{COUNTERS}{}", live_text(space))
}

/// What a running space publishes of its counters: [`report_text`]'s `node` records
/// (summaries left out), `arc` and `head` records, so that the live table folds and
/// joins as the report at the end does ([`SpacesReport::finish`]).
pub(crate) fn live_text(space: &Space) -> String {
    let mut t = String::new();
    for n in space.report() {
        t += &node_line(&n, "-");
    }
    for a in space.arcs() {
        t += &arc_line(&a);
    }
    for (ch, to) in space.channel_heads() {
        t += &format!("head\t{ch}\t{}\n", target_field(&to));
    }
    t += &sites_text(space);
    t
}

pub(crate) fn parse_report(text: &str, rep: &mut SpacesReport, suffix: &str) {
    for l in text.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        match f.as_slice() {
            ["node", label, nums @ .., summary] if nums.len() == 9 => {
                if label.starts_with(EGRESS) || label.starts_with(INGRESS) {
                    continue;
                }
                let v: Vec<u64> = nums.iter().map(|x| x.parse().unwrap_or(0)).collect();
                let counters = crate::runtime::Counters {
                    blocks_in: v[0],
                    bytes_in: v[1],
                    blocks_out: v[2],
                    bytes_out: v[3],
                    drops: v[4],
                    made: v[5],
                    ended: v[6],
                    nanos: v[7],
                    lost: v[8],
                };
                let summary = (*summary != "-").then(|| unescape(summary));
                rep.nodes.push(NodeReport {
                    label: format!("{}{suffix}", unescape(label)),
                    counters,
                    summary,
                    classes: Vec::new(),
                    space: String::new(),
                });
            }
            ["arc", from, to, blocks, bytes] => {
                let to = parse_target(to, suffix);
                rep.arcs.push(ArcReport {
                    from: format!("{}{suffix}", unescape(from)),
                    to,
                    carried: Carried {
                        blocks: blocks.parse().unwrap_or(0),
                        bytes: bytes.parse().unwrap_or(0),
                    },
                    rings: Vec::new(),
                });
            }
            ["head", ch, to] => {
                if let Ok(ch) = ch.parse() {
                    rep.heads.push((ch, parse_target(to, suffix)));
                }
            }
            ["ring", ch, nums @ ..] if nums.len() == 7 => {
                let v: Vec<u64> = nums.iter().map(|x| x.parse().unwrap_or(0)).collect();
                if let Ok(ch) = ch.parse() {
                    rep.rings.push((
                        ch,
                        protocol::graph::RingGauge {
                            tags_used: v[0],
                            tags_size: v[1],
                            data_used: v[2],
                            data_size: v[3],
                            readers: u32::try_from(v[4]).unwrap_or(u32::MAX),
                            writer_waits: v[5],
                            wakeups: v[6],
                        },
                    ));
                }
            }
            ["cpu", cpu, pinned] => {
                if let Ok(cpu) = cpu.parse() {
                    let space = suffix.strip_prefix('@').unwrap_or("0").to_string();
                    rep.sites.push(protocol::graph::SpaceSite {
                        space,
                        cpu: Some(cpu),
                        pinned: *pinned == "1",
                    });
                }
            }
            ["warn", w] => rep.warnings.push(unescape(w)),
            ["failed"] => rep.failed = true,
            ["status", st] if st.parse::<u8>().is_ok() => rep.status = st.parse().ok(),
            _ => rep
                .warnings
                .push(format!("unreadable report line from a process space: {l}")),
        }
    }
}

/// A process space's build error as protocol text: `error START:END\tLABEL\tWHY`, the
/// span of the failing node (`-` without one; the child's part keeps the spans of the
/// parent's graph, so the span means the same to both), its label, and the message.
pub(super) fn error_text(e: &BuildError) -> String {
    let span = e
        .span
        .map_or("-".to_string(), |s| format!("{}:{}", s.start, s.end));
    format!(
        "error {span}\t{}\t{}",
        one_line(&e.label),
        one_line(&e.why())
    )
}

/// A build error reported by a process space (what follows `error `): as
/// [`error_text`] writes it, or just a reason, which is then laid on the space's filters.
pub(super) fn child_error(text: &str, space_label: &str) -> BuildError {
    let mut f = text.splitn(3, '\t');
    match (f.next(), f.next(), f.next()) {
        (Some(span), Some(label), Some(why)) => {
            let span = span
                .split_once(':')
                .and_then(|(a, b)| Some(lang::Span::new(a.parse().ok()?, b.parse().ok()?)));
            BuildError::new(unescape(label), span, BuildErrorKind::Remote(unescape(why)))
        }
        _ => BuildError::new(space_label, None, BuildErrorKind::Remote(unescape(text))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_error_crosses_the_process_boundary_with_its_span() {
        let e = BuildError::new(
            "strip#2",
            Some(lang::Span::new(14, 21)),
            BuildErrorKind::Placement("two\tlines\nand a \\ backslash".into()),
        );
        let text = error_text(&e);
        let back = child_error(
            text.strip_prefix("error ").expect("an error message"),
            "strip, count",
        );
        assert_eq!(back.label, "strip#2");
        assert_eq!(back.span, Some(lang::Span::new(14, 21)));
        assert_eq!(back.to_string(), e.to_string());
    }

    #[test]
    fn ring_and_cpu_records_parse_and_a_short_one_is_named_not_taken() {
        let mut rep = SpacesReport::default();
        let text = "ring\t3\t16\t65536\t4096\t16777216\t1\t7\t9\ncpu\t1\t1\nring\t4\t16\n";
        parse_report(text, &mut rep, "@p2");
        assert_eq!(rep.rings.len(), 1);
        let (ch, g) = rep.rings[0];
        assert_eq!(
            (
                ch,
                g.tags_used,
                g.data_size,
                g.readers,
                g.writer_waits,
                g.wakeups
            ),
            (3, 16, 16777216, 1, 7, 9)
        );
        assert_eq!(rep.sites.len(), 1);
        assert_eq!(
            (
                rep.sites[0].space.as_str(),
                rep.sites[0].cpu,
                rep.sites[0].pinned
            ),
            ("p2", Some(1), true)
        );
        assert_eq!(rep.warnings.len(), 1, "{:?}", rep.warnings);
        assert!(
            rep.warnings[0].contains("unreadable report line")
                && rep.warnings[0].contains("ring\t4\t16"),
            "{:?}",
            rep.warnings
        );
    }

    #[test]
    fn a_node_record_carries_every_counter_and_what_its_source_lost() {
        let n = NodeReport {
            label: "rx\tdev".into(),
            counters: crate::runtime::Counters {
                blocks_in: 1,
                bytes_in: 2,
                blocks_out: 3,
                bytes_out: 4,
                drops: 5,
                made: 6,
                ended: 7,
                nanos: 8,
                lost: 9,
            },
            summary: None,
            classes: vec![],
            space: String::new(),
        };
        let mut rep = SpacesReport::default();
        parse_report(&node_line(&n, "-"), &mut rep, "@p1");
        assert_eq!(rep.nodes.len(), 1, "{:?}", rep.warnings);
        let c = rep.nodes[0].counters;
        assert_eq!(rep.nodes[0].label, "rx\tdev@p1");
        assert_eq!(
            [c.blocks_in, c.bytes_in, c.blocks_out, c.bytes_out, c.drops, c.made, c.ended, c.nanos, c.lost],
            [1, 2, 3, 4, 5, 6, 7, 8, 9]
        );
    }

    #[test]
    fn an_error_without_a_node_is_laid_on_the_space() {
        let back = child_error("no filter is placed in space p3", "deflate, count");
        assert_eq!((back.label.as_str(), back.span), ("deflate, count", None));
        assert_eq!(
            back.to_string(),
            "deflate, count: no filter is placed in space p3"
        );
        let e = BuildError::new("count", None, BuildErrorKind::Remote("gone".into()));
        assert_eq!(
            child_error(error_text(&e).strip_prefix("error ").unwrap(), "x").span,
            None
        );
    }
}
