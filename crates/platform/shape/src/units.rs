//! Rates and sizes as people write them: `10MB/s`, `80Mbit`, `1.5GiB/s`, `500k`, `64KiB`.
//!
//! Owns: the one parser every `--net`/`--disk` option, `shape` filter argument and group
//! segment uses, and its errors (which name the text and the byte position at fault).
//!
//! Rates are bytes per second. A bare number or a `B` suffix counts bytes, `bit`/`b`
//! counts bits (divided by 8); `k`/`K`, `M`, `G`, `T` are powers of 1000 and `Ki`, `Mi`,
//! `Gi`, `Ti` powers of 1024; a rate may end in `/s`. `unlimited` (or `inf`) is a rate no
//! call ever waits for.

use thiserror::Error;

/// A rate or size that could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum UnitError {
    #[error("empty {what}: expected a number with an optional unit, like 10MB/s")]
    Empty { what: &'static str },
    #[error("{what} '{text}': expected a number at byte {pos}")]
    NoNumber {
        what: &'static str,
        text: String,
        pos: usize,
    },
    #[error("{what} '{text}': unknown unit '{unit}' at byte {pos} (use B, KB, KiB, MB, MiB, GB, GiB, bit, kbit, Mbit, Gbit, optionally /s)")]
    BadUnit {
        what: &'static str,
        text: String,
        unit: String,
        pos: usize,
    },
    #[error("{what} '{text}' is zero: a budget must let something through")]
    Zero { what: &'static str, text: String },
    #[error("{what} '{text}' is too large (at most 2^53 bytes)")]
    TooLarge { what: &'static str, text: String },
}

/// Largest value accepted (bytes or bytes/s); far beyond any device, and exact in f64.
pub const MAX: u64 = 1 << 53;

/// A rate in bytes per second; `None` for `unlimited`.
pub fn parse_rate(text: &str) -> Result<Option<u64>, UnitError> {
    let t = text.trim();
    if matches!(
        t.to_ascii_lowercase().as_str(),
        "unlimited" | "inf" | "none"
    ) {
        return Ok(None);
    }
    parse(text, "rate", true).map(Some)
}

/// A size in bytes (a burst).
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    parse(text, "size", false)
}

fn parse(text: &str, what: &'static str, rate: bool) -> Result<u64, UnitError> {
    let lead = text.len() - text.trim_start().len();
    let t = text.trim();
    if t.is_empty() {
        return Err(UnitError::Empty { what });
    }
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let num = &t[..num_end];
    let value: f64 = match num.parse() {
        Ok(v) if !num.is_empty() => v,
        _ => {
            return Err(UnitError::NoNumber {
                what,
                text: text.to_string(),
                pos: lead,
            })
        }
    };
    let mut unit = t[num_end..].trim_start();
    let unit_pos = lead + t.len() - unit.len();
    if rate {
        if let Some(u) = unit.strip_suffix("/s").or_else(|| unit.strip_suffix("ps")) {
            unit = u;
        }
    }
    let bad = || UnitError::BadUnit {
        what,
        text: text.to_string(),
        unit: unit.to_string(),
        pos: unit_pos,
    };
    let (mult, rest): (f64, &str) = match unit.as_bytes().first() {
        Some(b'k' | b'K') => (1e3, &unit[1..]),
        Some(b'M') => (1e6, &unit[1..]),
        Some(b'G') => (1e9, &unit[1..]),
        Some(b'T') => (1e12, &unit[1..]),
        _ => (1.0, unit),
    };
    let (mult, rest) = match rest.strip_prefix('i') {
        Some(r) if mult > 1.0 => (1024f64.powi((mult.log10() / 3.0).round() as i32), r),
        _ => (mult, rest),
    };
    let per_unit = match rest {
        "" | "B" | "byte" | "bytes" => 1.0,
        "bit" | "bits" | "b" => 0.125,
        _ => return Err(bad()),
    };
    let bytes = value * mult * per_unit;
    if !bytes.is_finite() || bytes > MAX as f64 {
        return Err(UnitError::TooLarge {
            what,
            text: text.to_string(),
        });
    }
    let b = bytes.round() as u64;
    if b == 0 {
        return Err(UnitError::Zero {
            what,
            text: text.to_string(),
        });
    }
    Ok(b)
}

/// Human form of a rate (for logs and errors).
pub fn show_rate(r: Option<u64>) -> String {
    match r {
        None => "unlimited".into(),
        Some(r) if r >= 10_000_000 => format!("{:.1}MB/s", r as f64 / 1e6),
        Some(r) if r >= 10_000 => format!("{:.1}KB/s", r as f64 / 1e3),
        Some(r) => format!("{r}B/s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_rate("10MB/s").unwrap(), Some(10_000_000));
        assert_eq!(parse_rate("10M").unwrap(), Some(10_000_000));
        assert_eq!(parse_rate("80Mbit").unwrap(), Some(10_000_000));
        assert_eq!(parse_rate("80Mbps").unwrap(), Some(10_000_000));
        assert_eq!(parse_rate("1.5GiB/s").unwrap(), Some(1_610_612_736));
        assert_eq!(parse_rate("500k").unwrap(), Some(500_000));
        assert_eq!(parse_rate(" 2 KiB/s ").unwrap(), Some(2048));
        assert_eq!(parse_rate("unlimited").unwrap(), None);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("4096").unwrap(), 4096);
    }

    #[test]
    fn nonsense_is_refused_with_position() {
        let e = parse_rate("10 furlongs").unwrap_err();
        assert_eq!(
            e,
            UnitError::BadUnit {
                what: "rate",
                text: "10 furlongs".into(),
                unit: "furlongs".into(),
                pos: 3
            }
        );
        assert!(e.to_string().contains("byte 3"), "{e}");
        assert!(matches!(
            parse_rate("fast"),
            Err(UnitError::NoNumber { pos: 0, .. })
        ));
        assert!(matches!(parse_rate("0MB/s"), Err(UnitError::Zero { .. })));
        assert!(matches!(parse_rate("-5M"), Err(UnitError::NoNumber { .. })));
        assert!(matches!(parse_rate(""), Err(UnitError::Empty { .. })));
        assert!(matches!(
            parse_rate("1e300"),
            Err(UnitError::BadUnit { .. })
        ));
        assert!(matches!(
            parse_rate("99999999999T"),
            Err(UnitError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_size("64K/s"),
            Err(UnitError::BadUnit { .. })
        ));
        assert!(matches!(
            parse_rate("1.2.3M"),
            Err(UnitError::NoNumber { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in ".{0,24}") {
            let _ = parse_rate(&s);
            let _ = parse_size(&s);
        }

        #[test]
        fn round_numbers_round_trip(n in 1u64..1_000_000, i in 0usize..4) {
            let (suf, m) = [("", 1), ("K", 1000), ("MiB", 1 << 20), ("kbit", 125)][i];
            proptest::prop_assert_eq!(parse_rate(&format!("{n}{suf}/s")).unwrap(), Some(n * m));
        }
    }
}
