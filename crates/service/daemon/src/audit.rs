//! The daemon's record: one line on its standard error for everything that happens to a
//! run (opened, started, edited, stopped, finished, crashed, rolled back, refused) and for
//! every client the limits turn away, so an administrator can see afterwards who did what
//! and why it was allowed or not.
//!
//! Owns: the format, here and nowhere else. Every line is
//!
//! ```text
//! streamlined: audit: EVENT uid=UID user=NAME [KEY=VALUE]...
//! ```
//!
//! with `uid`/`user` the client the event is about (for `stopped`, `by_uid`/`by` is who
//! asked). A value with spaces, quotes, `=` or control characters is written as a quoted
//! string with Rust escapes (`pipeline="gen | count"`), so a line never breaks and
//! `grep 'audit: crashed'` or `grep 'uid=65534 '` finds what it should. Each line is
//! written with one `write` call, so lines of different threads never interleave.
//!
//! Events: `opened` (built, paused: a worker exists), `started` (activated), `refused`
//! (an `open` turned down: `errno`, `why`), `edited` (`outcome=applied|refused`, `edit`,
//! and `applied` or `errno`/`why`), `stopped` (`why`), `finished` (`status`), `failed`
//! (the run ended with `status` and said `why`: a space died, a filter failed), `crashed`
//! (the worker died by `signal`, or exited with `status` without reporting its end),
//! `rolled_back` (opened, never activated, undone), `connection_refused` (`why`) and
//! `protocol_error` (a connection closed for a bad or stalled frame: `why`).

use crate::policy::Cred;
use std::io::Write;

/// One value of a line: text (quoted when it must be) or a number.
pub enum Value<'a> {
    Text(&'a str),
    Num(i64),
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Value<'a> {
        Value::Text(s)
    }
}

impl From<u64> for Value<'_> {
    fn from(n: u64) -> Self {
        Value::Num(n as i64)
    }
}

impl From<i32> for Value<'_> {
    fn from(n: i32) -> Self {
        Value::Num(n.into())
    }
}

impl From<u32> for Value<'_> {
    fn from(n: u32) -> Self {
        Value::Num(n.into())
    }
}

/// A user's name as the system knows it, else the number.
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name)
}

/// The longest value written whole (a pipeline may have 64 KiB): longer ones are cut,
/// saying how long they were.
const MAX_VALUE: usize = 2000;

/// The line for `event` about `uid`'s doing, with `fields` (the one formatter).
pub fn format(event: &str, uid: u32, fields: &[(&str, Value)]) -> String {
    let mut line = format!(
        "streamlined: audit: {event} uid={uid} user={}",
        quoted(&user_name(uid))
    );
    for (k, v) in fields {
        match v {
            Value::Text(t) if t.len() > MAX_VALUE => {
                let mut cut = MAX_VALUE;
                while !t.is_char_boundary(cut) {
                    cut -= 1;
                }
                let shown = format!("{}... ({} bytes)", &t[..cut], t.len());
                line.push_str(&format!(" {k}={}", quoted(&shown)))
            }
            Value::Text(t) => line.push_str(&format!(" {k}={}", quoted(t))),
            Value::Num(n) => line.push_str(&format!(" {k}={n}")),
        }
    }
    line
}

/// Write one line to standard error.
pub fn record(event: &str, uid: u32, fields: &[(&str, Value)]) {
    let mut line = format(event, uid, fields);
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `t` as it is when it is one plain word, else as a quoted string with escapes.
fn quoted(t: &str) -> String {
    let plain = !t.is_empty()
        && t.chars()
            .all(|c| !c.is_whitespace() && !c.is_control() && c != '"' && c != '=' && c != '\\');
    if plain {
        t.to_string()
    } else {
        format!("{t:?}")
    }
}

/// A run built (paused) for `who`.
pub fn opened(who: &Cred, run: u64, pipeline: &str) {
    record(
        "opened",
        who.uid,
        &[("run", run.into()), ("pipeline", pipeline.into())],
    );
}

/// An `open` refused, with its errno and reason.
pub fn refused(who: &Cred, pipeline: &str, errno: i32, why: &str) {
    record(
        "refused",
        who.uid,
        &[
            ("request", "open".into()),
            ("pipeline", pipeline.into()),
            ("errno", crate::proto::errno_name(errno).into()),
            ("why", why.into()),
        ],
    );
}

/// A run activated.
pub fn started(owner: u32, run: u64, pipeline: &str, detach: bool) {
    record(
        "started",
        owner,
        &[
            ("run", run.into()),
            ("pipeline", pipeline.into()),
            ("detach", if detach { "yes" } else { "no" }.into()),
        ],
    );
}

/// An edit of a run by `who`: what was applied, or the refusal (errno, why).
pub fn edited(who: &Cred, run: u64, edit: &str, answer: &Result<String, crate::proto::Reply>) {
    match answer {
        Ok(applied) => record(
            "edited",
            who.uid,
            &[
                ("run", run.into()),
                ("outcome", "applied".into()),
                ("edit", edit.into()),
                ("applied", applied.as_str().into()),
            ],
        ),
        Err(crate::proto::Reply::Error { code, message, .. }) => record(
            "edited",
            who.uid,
            &[
                ("run", run.into()),
                ("outcome", "refused".into()),
                ("edit", edit.into()),
                ("errno", code.as_str().into()),
                ("why", message.as_str().into()),
            ],
        ),
        Err(other) => record(
            "edited",
            who.uid,
            &[
                ("run", run.into()),
                ("outcome", "refused".into()),
                ("edit", edit.into()),
                ("why", format!("{other:?}").as_str().into()),
            ],
        ),
    }
}

/// A run of `owner` told to stop, by `by` (0 with `why` for the daemon's own reasons).
pub fn stopped(owner: u32, run: u64, pipeline: &str, by: u32, why: &str) {
    record(
        "stopped",
        owner,
        &[
            ("run", run.into()),
            ("pipeline", pipeline.into()),
            ("by_uid", by.into()),
            ("by", user_name(by).as_str().into()),
            ("why", why.into()),
        ],
    );
}

/// How a run's worker ended.
pub enum End {
    /// It reported its end with this exit status.
    Finished(i32),
    /// Opened, never activated, undone.
    RolledBack,
    /// Killed by a signal.
    Signal(i32),
    /// Exited without reporting its end.
    Exited(i32),
    /// It reported its end with this exit status, and why it failed (a space died, a
    /// filter failed).
    Failed(i32, String),
}

/// A run's end.
pub fn ended(owner: u32, run: u64, pipeline: &str, end: End) {
    let (event, status, signal, why) = match &end {
        End::Finished(code) => ("finished", Some(*code), None, None),
        End::Failed(code, why) => ("failed", Some(*code), None, Some(why.as_str())),
        End::RolledBack => ("rolled_back", None, None, None),
        End::Signal(sig) => (
            "crashed",
            None,
            Some(*sig),
            Some("the worker was killed by a signal"),
        ),
        End::Exited(code) => (
            "crashed",
            Some(*code),
            None,
            Some("the worker exited without reporting the run's end"),
        ),
    };
    let name = signal.map(signal_name);
    let mut fields = vec![("run", run.into()), ("pipeline", pipeline.into())];
    if let Some(c) = status {
        fields.push(("status", c.into()));
    }
    if let (Some(sig), Some(n)) = (signal, &name) {
        fields.push(("signal", sig.into()));
        fields.push(("signame", n.as_str().into()));
    }
    if let Some(w) = why {
        fields.push(("why", w.into()));
    }
    record(event, owner, &fields);
}

/// A client connection turned away by the limits.
pub fn connection_refused(uid: u32, why: &str) {
    record("connection_refused", uid, &[("why", why.into())]);
}

/// A connection closed for a bad or stalled frame.
pub fn protocol_error(uid: u32, why: &str) {
    record("protocol_error", uid, &[("why", why.into())]);
}

pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_line_and_greppable() {
        let l = format(
            "edited",
            65534,
            &[
                ("run", 3u64.into()),
                ("edit", "insert after gen tx dev=lo".into()),
                ("why", "bad\n\"thing\"".into()),
                ("errno", "EACCES".into()),
            ],
        );
        assert!(!l.contains('\n'), "{l}");
        assert!(
            l.starts_with("streamlined: audit: edited uid=65534 user="),
            "{l}"
        );
        assert!(
            l.contains(" run=3 edit=\"insert after gen tx dev=lo\" why=\"bad\\n\\\"thing\\\"\" errno=EACCES"),
            "{l}"
        );
        assert_eq!(quoted(""), "\"\"");
        assert_eq!(quoted("a=b"), "\"a=b\"");
    }
}
