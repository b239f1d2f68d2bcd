//! A finished exchange as one log line: Apache's Combined Log Format (with the Host
//! header and the duration after it) or a JSON object.
//!
//! Owns: the two line formats and their escaping. Times are the capture's (UTC).

use super::exchange::Record;
use std::fmt::Write;
use std::net::IpAddr;

/// Which line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-Agent}i" "%{Host}i" %D`.
    Clf,
    /// One JSON object per line.
    Json,
}

/// The connection's endpoints: client and server address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ends {
    pub client: (IpAddr, u16),
    pub server: (IpAddr, u16),
}

fn utc(ts_ns: u64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(ts_ns as i128)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// Apache's escaping of a request line or header value in a log: `"` and `\` with a
/// backslash, control characters and bytes outside ASCII as `\xhh`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out
}

/// Microseconds from `from` to `to` (capture times).
fn micros(from: u64, to: u64) -> u64 {
    to.saturating_sub(from) / 1000
}

/// One record as a line of `format`, ending in a newline.
pub fn line(format: Format, ends: &Ends, r: &Record) -> String {
    match format {
        Format::Clf => clf(ends, r),
        Format::Json => json(ends, r),
    }
}

fn clf(ends: &Ends, r: &Record) -> String {
    let q = &r.request;
    let t = utc(q.ts_ns)
        .format(time::macros::format_description!(
            "[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000"
        ))
        .unwrap_or_default();
    let opt = |v: &Option<String>| v.as_deref().map_or_else(|| "-".to_string(), escape);
    let (status, size, dur) = match &r.response {
        Some(p) => (
            p.status.to_string(),
            if p.size == 0 {
                "-".to_string()
            } else {
                p.size.to_string()
            },
            micros(q.ts_ns, p.end_ns).to_string(),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    format!(
        "{} - - [{t}] \"{} {} HTTP/1.{}\" {status} {size} \"{}\" \"{}\" \"{}\" {dur}\n",
        ends.client.0,
        escape(&q.method),
        escape(&q.uri),
        q.minor,
        opt(&q.referer),
        opt(&q.user_agent),
        opt(&q.host),
    )
}

fn json(ends: &Ends, r: &Record) -> String {
    let q = &r.request;
    let t = utc(q.ts_ns)
        .format(time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
        ))
        .unwrap_or_default();
    let p = r.response.as_ref();
    let v = serde_json::json!({
        "time": t,
        "client": ends.client.0.to_string(),
        "client_port": ends.client.1,
        "server": ends.server.0.to_string(),
        "server_port": ends.server.1,
        "method": q.method,
        "host": q.host,
        "uri": q.uri,
        "version": format!("HTTP/1.{}", q.minor),
        "status": p.map(|p| p.status),
        "size": p.map(|p| p.size),
        "complete": p.map(|p| p.complete),
        "referer": q.referer,
        "user_agent": q.user_agent,
        "wait_us": p.map(|p| micros(q.ts_ns, p.head_ns)),
        "duration_us": p.map(|p| micros(q.ts_ns, p.end_ns)),
    });
    let mut s = v.to_string();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::super::exchange::{Record, Request, Response};
    use super::*;

    fn record(response: bool) -> Record {
        Record {
            request: Request {
                ts_ns: 1_700_000_000_123_456_789,
                method: "GET".into(),
                uri: "/a \"b\"\\c\u{e9}".into(),
                minor: 1,
                host: Some("example.org".into()),
                user_agent: Some("curl/7.88.1".into()),
                referer: None,
            },
            response: response.then_some(Response {
                status: 200,
                size: 1234,
                head_ns: 1_700_000_000_124_456_789,
                end_ns: 1_700_000_000_125_456_789,
                complete: true,
            }),
        }
    }

    fn ends() -> Ends {
        Ends {
            client: ("10.0.0.1".parse().unwrap(), 40000),
            server: ("fd00::2".parse().unwrap(), 80),
        }
    }

    #[test]
    fn combined_log_format_lines_are_apaches_with_host_and_duration() {
        assert_eq!(
            line(Format::Clf, &ends(), &record(true)),
            "10.0.0.1 - - [14/Nov/2023:22:13:20 +0000] \"GET /a \\\"b\\\"\\\\c\\xc3\\xa9 HTTP/1.1\" 200 1234 \"-\" \"curl/7.88.1\" \"example.org\" 2000\n"
        );
        assert!(line(Format::Clf, &ends(), &record(false))
            .ends_with("\" - - \"-\" \"curl/7.88.1\" \"example.org\" -\n"));
    }

    #[test]
    fn json_lines_carry_every_field_and_null_for_what_was_not_seen() {
        let v: serde_json::Value =
            serde_json::from_str(&line(Format::Json, &ends(), &record(true))).unwrap();
        assert_eq!(v["time"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(
            (
                v["client"].as_str(),
                v["server"].as_str(),
                v["server_port"].as_u64()
            ),
            (Some("10.0.0.1"), Some("fd00::2"), Some(80))
        );
        assert_eq!(
            (v["method"].as_str(), v["uri"].as_str()),
            (Some("GET"), Some("/a \"b\"\\c\u{e9}"))
        );
        assert_eq!(
            (
                v["status"].as_u64(),
                v["size"].as_u64(),
                v["wait_us"].as_u64(),
                v["duration_us"].as_u64()
            ),
            (Some(200), Some(1234), Some(1000), Some(2000))
        );
        assert!(v["referer"].is_null());
        let v: serde_json::Value =
            serde_json::from_str(&line(Format::Json, &ends(), &record(false))).unwrap();
        assert!(v["status"].is_null() && v["size"].is_null() && v["duration_us"].is_null());
    }
}
