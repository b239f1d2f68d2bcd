//! The rule language: the common subset of Snort 3 and Suricata rules, parsed into
//! [`Rule`]s.
//!
//! ```text
//! alert tcp $HOME_NET any -> $EXTERNAL_NET $HTTP_PORTS (msg:"..."; flow:to_server,established;
//!     http.method; content:"GET"; http.uri; content:"/admin"; nocase; sid:1000001; rev:1;)
//! ```
//!
//! - Header: action (`alert`, `drop`, `pass`), protocol (`ip`, `tcp`, `udp`, `icmp`, and
//!   Suricata's application protocol `http`: TCP whose stream the HTTP parser reads),
//!   addresses and ports with variables (`$HOME_NET`), lists (`[a,b]`), negation (`!a`),
//!   CIDR blocks and port ranges (`1024:`, `:1023`, `80:90`), direction `->` or `<>`.
//! - Options: `msg`, `sid`, `rev`, `gid`, `classtype`, `priority`, `reference`, `metadata`
//!   (kept or ignored as information); `content` (quoted, with `|hex|` bytes and `!`
//!   negation) and its modifiers `nocase`, `offset`, `depth`, `distance`, `within`,
//!   `fast_pattern`, `rawbytes`; `pcre` (`"/re/flags"`, flags `i s m x R U H M`; what the
//!   DFA-based engine cannot take, backreferences and look-around, is refused naming the
//!   construct); `flow`; `flowbits`; `threshold`; the buffers `http.uri`, `http.header`,
//!   `http.method` (Suricata's sticky buffers: the checks after one read that buffer; also
//!   Snort 2's modifiers `http_uri;` etc. after a content) and `pkt_data` (back to the
//!   payload).
//! - Variables: `var`, `ipvar` and `portvar` lines in the file (Snort's form), or given by
//!   the caller ([`Vars`]); `$HOME_NET` and `$EXTERNAL_NET` default to `any`, the port
//!   groups (`$HTTP_PORTS`, ...) to their usual ports.
//! - Lines: `#` starts a comment line, a trailing `\` continues the rule on the next line.
//!
//! Anything else is an error naming the file, line and keyword ([`RuleError`]); with
//! [`Options::skip_unsupported`] a rule that uses an unknown keyword is skipped and
//! counted with its reason ([`Rules::skipped`]), never silently.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Alert,
    /// Alert, and drop the packet and the rest of its flow (inline).
    Drop,
    /// Matching traffic is let through and no other rule alerts on it.
    Pass,
}

/// The protocol a rule's header names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Ip,
    Tcp,
    Udp,
    Icmp,
    /// TCP carrying HTTP (Suricata's application-layer protocol in the header).
    Http,
}

/// An address expression: `any`, a network, a list (any of its positive members and none
/// of its negated ones), or a negation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Any,
    Net(IpAddr, u8),
    List(Vec<Addr>),
    Not(Box<Addr>),
}

impl Addr {
    pub fn matches(&self, ip: IpAddr) -> bool {
        match self {
            Addr::Any => true,
            Addr::Net(net, bits) => in_net(ip, *net, *bits),
            Addr::Not(a) => !a.matches(ip),
            Addr::List(items) => {
                list_matches(items, |a| a.matches(ip), |a| matches!(a, Addr::Not(_)))
            }
        }
    }
}

/// A port expression, as [`Addr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    Any,
    Range(u16, u16),
    List(Vec<Ports>),
    Not(Box<Ports>),
}

impl Ports {
    pub fn matches(&self, port: u16) -> bool {
        match self {
            Ports::Any => true,
            Ports::Range(lo, hi) => (*lo..=*hi).contains(&port),
            Ports::Not(p) => !p.matches(port),
            Ports::List(items) => {
                list_matches(items, |p| p.matches(port), |p| matches!(p, Ports::Not(_)))
            }
        }
    }
}

/// A list matches when some positive member does (or it has none) and every negated
/// member does too (`[10.0.0.0/8,!10.1.0.0/16]`: in 10/8 but not in 10.1/16).
fn list_matches<T>(items: &[T], m: impl Fn(&T) -> bool, negated: impl Fn(&T) -> bool) -> bool {
    let mut any_positive = false;
    let mut hit = false;
    for i in items {
        if negated(i) {
            if !m(i) {
                return false;
            }
        } else {
            any_positive = true;
            hit |= m(i);
        }
    }
    hit || !any_positive
}

fn in_net(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits.min(32) as u32)
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits.min(128) as u32)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Which buffer a check reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buffer {
    /// The packet's payload, or the reassembled stream's bytes.
    Payload,
    HttpUri,
    HttpHeader,
    HttpMethod,
}

impl Buffer {
    pub fn name(self) -> &'static str {
        match self {
            Buffer::Payload => "pkt_data",
            Buffer::HttpUri => "http.uri",
            Buffer::HttpHeader => "http.header",
            Buffer::HttpMethod => "http.method",
        }
    }
}

/// A `content` and its modifiers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    pub bytes: Vec<u8>,
    pub negated: bool,
    pub nocase: bool,
    pub offset: Option<u32>,
    pub depth: Option<u32>,
    pub distance: Option<i32>,
    pub within: Option<u32>,
    /// The rule named this content its fast pattern (the prefilter's choice).
    pub fast_pattern: bool,
    pub buffer: Buffer,
}

impl Content {
    /// Whether it is placed relative to the previous match in its buffer.
    pub fn relative(&self) -> bool {
        self.distance.is_some() || self.within.is_some()
    }
}

/// A `pcre`.
#[derive(Debug, Clone)]
pub struct Pcre {
    /// As written between the slashes.
    pub pattern: String,
    pub regex: regex::bytes::Regex,
    pub negated: bool,
    /// `R`: searched from the end of the previous match in its buffer.
    pub relative: bool,
    pub buffer: Buffer,
}

impl PartialEq for Pcre {
    fn eq(&self, o: &Pcre) -> bool {
        self.pattern == o.pattern
            && self.regex.as_str() == o.regex.as_str()
            && (self.negated, self.relative, self.buffer) == (o.negated, o.relative, o.buffer)
    }
}

/// One payload check, in the rule's order (relative checks follow the one before).
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Content(Content),
    Pcre(Pcre),
}

impl Check {
    pub fn buffer(&self) -> Buffer {
        match self {
            Check::Content(c) => c.buffer,
            Check::Pcre(p) => p.buffer,
        }
    }
}

/// `flow:`: the direction and state a rule applies to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flow {
    /// `to_server`/`from_client` (Some(true)) or `to_client`/`from_server` (Some(false)).
    pub to_server: Option<bool>,
    /// `established` (Some(true)), `not_established` (Some(false)).
    pub established: Option<bool>,
    /// `stateless`: whatever the flow's state.
    pub stateless: bool,
    /// `only_stream` (Some(true): reassembled bytes only), `no_stream` (Some(false)).
    pub stream: Option<bool>,
}

/// A `flowbits` operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flowbit {
    Set(String),
    Unset(String),
    Toggle(String),
    IsSet(String),
    IsNotSet(String),
    /// The rule never alerts (it only sets bits).
    NoAlert,
}

/// `threshold:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threshold {
    pub kind: ThresholdKind,
    /// Track by source (true) or destination address.
    pub by_src: bool,
    pub count: u32,
    pub seconds: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThresholdKind {
    /// Alert on the first `count` matches per interval.
    Limit,
    /// Alert on every `count`-th match in an interval.
    Threshold,
    /// Alert once per interval, after `count` matches.
    Both,
}

/// One rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Line of the file it starts on (1-based).
    pub line: usize,
    pub action: Action,
    pub proto: Proto,
    pub src: Addr,
    pub sport: Ports,
    pub dst: Addr,
    pub dport: Ports,
    /// `<>`: either direction.
    pub both_ways: bool,
    pub msg: String,
    pub sid: u32,
    pub rev: u32,
    pub gid: u32,
    pub classtype: Option<String>,
    pub priority: Option<u32>,
    pub checks: Vec<Check>,
    pub flow: Flow,
    pub flowbits: Vec<Flowbit>,
    pub threshold: Option<Threshold>,
}

impl Rule {
    /// Whether the header's addresses and ports take a packet from `src:sport` to
    /// `dst:dport` (either way for `<>`).
    pub fn header_matches(&self, src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> bool {
        let fwd = self.src.matches(src)
            && self.sport.matches(sport)
            && self.dst.matches(dst)
            && self.dport.matches(dport);
        fwd || (self.both_ways
            && self.src.matches(dst)
            && self.sport.matches(dport)
            && self.dst.matches(src)
            && self.dport.matches(sport))
    }

    /// Whether it alerts when it matches (`flowbits:noalert` does not).
    pub fn alerts(&self) -> bool {
        !self.flowbits.contains(&Flowbit::NoAlert)
    }
}

/// How to load.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// A rule with a keyword the loader does not know is skipped and counted
    /// ([`Rules::skipped`]) instead of failing the load.
    pub skip_unsupported: bool,
}

/// Address and port variables: the defaults, then the caller's, then the file's `var`
/// lines, each replacing what came before.
#[derive(Debug, Clone)]
pub struct Vars {
    addrs: HashMap<String, String>,
    ports: HashMap<String, String>,
}

impl Default for Vars {
    fn default() -> Vars {
        let mut v = Vars {
            addrs: HashMap::new(),
            ports: HashMap::new(),
        };
        for k in [
            "HOME_NET",
            "EXTERNAL_NET",
            "HTTP_SERVERS",
            "SMTP_SERVERS",
            "SQL_SERVERS",
            "DNS_SERVERS",
            "TELNET_SERVERS",
            "SSH_SERVERS",
        ] {
            v.addrs.insert(k.into(), "any".into());
        }
        for (k, p) in [
            ("HTTP_PORTS", "[80,8000,8080,8888]"),
            ("SHELLCODE_PORTS", "!80"),
            ("ORACLE_PORTS", "1521"),
            ("SSH_PORTS", "22"),
            ("FTP_PORTS", "21"),
            ("DNS_PORTS", "53"),
            ("FILE_DATA_PORTS", "[$HTTP_PORTS,110,143]"),
        ] {
            v.ports.insert(k.into(), p.into());
        }
        v
    }
}

impl Vars {
    /// Set an address variable (`HOME_NET`, `10.0.0.0/8`).
    pub fn addr(&mut self, name: &str, value: &str) {
        self.addrs
            .insert(name.trim_start_matches('$').to_string(), value.to_string());
    }

    /// Set a port variable.
    pub fn port(&mut self, name: &str, value: &str) {
        self.ports
            .insert(name.trim_start_matches('$').to_string(), value.to_string());
    }
}

/// A rule set: what loaded, and what was skipped (with [`Options::skip_unsupported`]).
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub rules: Vec<Rule>,
    /// (line, reason) of each rule skipped.
    pub skipped: Vec<(usize, String)>,
}

/// A rule file that cannot be loaded: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {}{why}", keyword.as_ref().map(|k| format!("`{k}`: ")).unwrap_or_default())]
pub struct RuleError {
    pub file: String,
    pub line: usize,
    /// The keyword (option or header field) at fault, if one is.
    pub keyword: Option<String>,
    pub why: String,
}

/// An error inside one rule, before the file and line are known.
#[derive(Debug)]
struct Bad {
    keyword: Option<String>,
    why: String,
    /// The keyword is one the loader does not know (skippable), not a malformed one.
    unsupported: bool,
}

fn bad(keyword: &str, why: impl fmt::Display) -> Bad {
    Bad {
        keyword: Some(keyword.to_string()),
        why: why.to_string(),
        unsupported: false,
    }
}

fn unsupported(keyword: &str, why: impl fmt::Display) -> Bad {
    Bad {
        unsupported: true,
        ..bad(keyword, why)
    }
}

/// Parse rule text (`file` names it in errors).
pub fn parse(text: &str, file: &str, vars: &Vars, opts: &Options) -> Result<Rules, RuleError> {
    let mut vars = vars.clone();
    let mut out = Rules::default();
    let mut sids = HashMap::<(u32, u32), usize>::new();
    for (line, stmt) in statements(text) {
        let err = |b: Bad| RuleError {
            file: file.to_string(),
            line,
            keyword: b.keyword,
            why: b.why,
        };
        let first = stmt.split_whitespace().next().unwrap_or("");
        if matches!(first, "var" | "ipvar" | "portvar") {
            define(&mut vars, first, &stmt).map_err(err)?;
            continue;
        }
        match rule(&stmt, line, &vars) {
            Ok(r) => {
                if let Some(prev) = sids.insert((r.gid, r.sid), line) {
                    return Err(err(bad(
                        "sid",
                        format!("sid {} is also the rule's on line {prev}", r.sid),
                    )));
                }
                out.rules.push(r)
            }
            Err(b) if b.unsupported && opts.skip_unsupported => {
                out.skipped.push((line, err(b).to_string()));
            }
            Err(b) => return Err(err(b)),
        }
    }
    Ok(out)
}

/// Read and parse a rule file.
pub fn load(path: &std::path::Path, vars: &Vars, opts: &Options) -> Result<Rules, RuleError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| RuleError {
        file: file.clone(),
        line: 0,
        keyword: None,
        why: format!("cannot read it: {e}"),
    })?;
    parse(&text, &file, vars, opts)
}

/// The file's statements (comments and blank lines gone, `\` continuations joined), each
/// with the line it starts on.
fn statements(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if cur.is_none() && (l.is_empty() || l.starts_with('#')) {
            continue;
        }
        let (start, mut s) = cur.take().unwrap_or((i + 1, String::new()));
        match l.strip_suffix('\\') {
            Some(part) => {
                s.push_str(part);
                s.push(' ');
                cur = Some((start, s));
            }
            None => {
                s.push_str(l);
                out.push((start, s));
            }
        }
    }
    if let Some(c) = cur {
        out.push(c);
    }
    out
}

fn define(vars: &mut Vars, kind: &str, stmt: &str) -> Result<(), Bad> {
    let mut it = stmt.splitn(3, char::is_whitespace).map(str::trim);
    it.next();
    let (Some(name), Some(value)) = (it.next(), it.next().filter(|v| !v.is_empty())) else {
        return Err(bad(kind, format!("expected `{kind} NAME VALUE`")));
    };
    if kind == "portvar" || (kind == "var" && name.ends_with("_PORTS")) {
        vars.port(name, value);
    } else {
        vars.addr(name, value);
    }
    Ok(())
}

/// One rule statement.
fn rule(stmt: &str, line: usize, vars: &Vars) -> Result<Rule, Bad> {
    let open = stmt
        .find('(')
        .ok_or_else(|| bad("rule", "no option list `( ... )` after the header"))?;
    let body = stmt[open + 1..].trim_end();
    let body = body
        .strip_suffix(')')
        .ok_or_else(|| bad("rule", "the option list does not end with `)`"))?;
    let head = header_fields(&stmt[..open])?;
    let [action, proto, src, sport, dir, dst, dport] = head;
    let action = match action.as_str() {
        "alert" => Action::Alert,
        "drop" => Action::Drop,
        "pass" => Action::Pass,
        a @ ("reject" | "rejectsrc" | "rejectdst" | "rejectboth" | "sdrop" | "log" | "activate"
        | "dynamic") => return Err(unsupported(a, "action not supported (alert, drop, pass)")),
        a => {
            return Err(bad(
                "action",
                format!("{a:?} is not an action (alert, drop, pass)"),
            ))
        }
    };
    let proto = match proto.as_str() {
        "ip" => Proto::Ip,
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "icmp" => Proto::Icmp,
        "http" => Proto::Http,
        p => {
            return Err(unsupported(
                "protocol",
                format!("{p:?} (ip, tcp, udp, icmp, http)"),
            ))
        }
    };
    let both_ways = match dir.as_str() {
        "->" => false,
        "<>" => true,
        d => return Err(bad("direction", format!("{d:?} (-> or <>)"))),
    };
    let mut r = Rule {
        line,
        action,
        proto,
        src: addr(&src, vars, 0)?,
        sport: ports(&sport, vars, 0)?,
        dst: addr(&dst, vars, 0)?,
        dport: ports(&dport, vars, 0)?,
        both_ways,
        msg: String::new(),
        sid: 0,
        rev: 1,
        gid: 1,
        classtype: None,
        priority: None,
        checks: Vec::new(),
        flow: Flow::default(),
        flowbits: Vec::new(),
        threshold: None,
    };
    let mut sticky = Buffer::Payload;
    let mut has_sid = false;
    for opt in options(body)? {
        let (key, value) = match opt.split_once(':') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (opt.trim(), None),
        };
        option(&mut r, &mut sticky, &mut has_sid, key, value)?;
    }
    if !has_sid {
        return Err(bad("sid", "every rule needs a sid"));
    }
    if r.checks.iter().any(|c| c.buffer() != Buffer::Payload)
        && !matches!(r.proto, Proto::Tcp | Proto::Http | Proto::Ip)
    {
        return Err(bad(
            "http",
            "HTTP buffers in a rule whose protocol is not tcp or http",
        ));
    }
    Ok(r)
}

/// The header's seven fields (brackets may hold spaces).
fn header_fields(head: &str) -> Result<[String; 7], Bad> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut depth = 0i32;
    for ch in head.chars() {
        match ch {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if ch.is_whitespace() && depth == 0 {
            if !cur.is_empty() {
                fields.push(std::mem::take(&mut cur));
            }
        } else if !(ch.is_whitespace() && depth > 0) {
            cur.push(ch);
        }
    }
    if !cur.is_empty() {
        fields.push(cur);
    }
    fields.try_into().map_err(|f: Vec<String>| {
        bad(
            "header",
            format!(
                "{} fields; expected 7: action protocol source port direction destination port",
                f.len()
            ),
        )
    })
}

/// Variables nest at most this deep (`$A` naming `$B` naming ...).
const VAR_DEPTH: usize = 16;

fn addr(s: &str, vars: &Vars, depth: usize) -> Result<Addr, Bad> {
    if depth > VAR_DEPTH {
        return Err(bad(
            "address",
            format!("variables nest deeper than {VAR_DEPTH} (a loop?)"),
        ));
    }
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('!') {
        return Ok(Addr::Not(Box::new(addr(rest, vars, depth)?)));
    }
    if s == "any" {
        return Ok(Addr::Any);
    }
    if let Some(name) = s.strip_prefix('$') {
        let v = vars
            .addrs
            .get(name)
            .ok_or_else(|| bad("address", format!("variable ${name} is not defined")))?;
        return addr(v, vars, depth + 1);
    }
    if let Some(inner) = s.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| bad("address", format!("{s:?}: a list without its `]`")))?;
        let items = split_list(inner)
            .iter()
            .map(|i| addr(i, vars, depth))
            .collect::<Result<Vec<_>, _>>()?;
        if items.is_empty() {
            return Err(bad("address", "an empty list"));
        }
        return Ok(Addr::List(items));
    }
    let (ip, bits) = match s.split_once('/') {
        Some((ip, bits)) => (ip, Some(bits)),
        None => (s, None),
    };
    let ip: IpAddr = ip.parse().map_err(|_| {
        bad(
            "address",
            format!("{s:?} is not an address, network, list or variable"),
        )
    })?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        None => max,
        Some(b) => b.parse::<u8>().ok().filter(|&b| b <= max).ok_or_else(|| {
            bad(
                "address",
                format!("{s:?}: prefix length {b:?} (0 to {max})"),
            )
        })?,
    };
    Ok(Addr::Net(ip, bits))
}

fn ports(s: &str, vars: &Vars, depth: usize) -> Result<Ports, Bad> {
    if depth > VAR_DEPTH {
        return Err(bad(
            "port",
            format!("variables nest deeper than {VAR_DEPTH} (a loop?)"),
        ));
    }
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('!') {
        return Ok(Ports::Not(Box::new(ports(rest, vars, depth)?)));
    }
    if s == "any" {
        return Ok(Ports::Any);
    }
    if let Some(name) = s.strip_prefix('$') {
        let v = vars
            .ports
            .get(name)
            .ok_or_else(|| bad("port", format!("variable ${name} is not defined")))?;
        return ports(v, vars, depth + 1);
    }
    if let Some(inner) = s.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| bad("port", format!("{s:?}: a list without its `]`")))?;
        let items = split_list(inner)
            .iter()
            .map(|i| ports(i, vars, depth))
            .collect::<Result<Vec<_>, _>>()?;
        if items.is_empty() {
            return Err(bad("port", "an empty list"));
        }
        return Ok(Ports::List(items));
    }
    let num = |t: &str| {
        t.parse::<u16>()
            .map_err(|_| bad("port", format!("{s:?}: {t:?} is not a port (0-65535)")))
    };
    let (lo, hi) = match s.split_once(':') {
        Some(("", hi)) => (0, num(hi)?),
        Some((lo, "")) => (num(lo)?, u16::MAX),
        Some((lo, hi)) => (num(lo)?, num(hi)?),
        None => (num(s)?, num(s)?),
    };
    if lo > hi {
        return Err(bad("port", format!("{s:?}: an empty range")));
    }
    Ok(Ports::Range(lo, hi))
}

/// A list's members, split at top-level commas.
fn split_list(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0i32;
    for ch in s.chars() {
        match ch {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The options of `( ... )`, split at the `;` outside quotes (`\;` and `\"` escaped).
fn options(body: &str) -> Result<Vec<String>, Bad> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = body.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => {
                cur.push(ch);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '"' => {
                quoted = !quoted;
                cur.push(ch);
            }
            ';' if !quoted => {
                if !cur.trim().is_empty() {
                    out.push(cur.trim().to_string());
                }
                cur.clear();
            }
            _ => cur.push(ch),
        }
    }
    if quoted {
        return Err(bad("rule", "a quoted value is not closed"));
    }
    if !cur.trim().is_empty() {
        return Err(bad(
            cur.trim().split(':').next().unwrap_or("rule").trim(),
            "the last option has no `;`",
        ));
    }
    Ok(out)
}

/// The text of a quoted value, unescaped (`\"`, `\\`, `\;`, `\:`).
fn unquote(key: &str, v: &str) -> Result<String, Bad> {
    let inner = v
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .ok_or_else(|| bad(key, format!("expected a quoted value, got {v}")))?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(ch) = chars.next() {
        if ch == '\\' {
            match chars.next() {
                Some(n @ ('"' | '\\' | ';' | ':')) => out.push(n),
                Some(n) => {
                    return Err(bad(
                        key,
                        format!("`\\{n}`: only \\\" \\\\ \\; \\: are escapes here"),
                    ))
                }
                None => return Err(bad(key, "a value ending in `\\`")),
            }
        } else {
            out.push(ch);
        }
    }
    Ok(out)
}

/// A content string's bytes: text, with `|41 42|` hex between bars.
fn content_bytes(s: &str) -> Result<Vec<u8>, Bad> {
    let mut out = Vec::new();
    for (i, part) in s.split('|').enumerate() {
        if i % 2 == 0 {
            out.extend_from_slice(part.as_bytes());
            continue;
        }
        let hex: String = part.chars().filter(|c| !c.is_whitespace()).collect();
        if hex.len() % 2 != 0 {
            return Err(bad(
                "content",
                format!("|{part}|: an odd number of hex digits"),
            ));
        }
        for k in (0..hex.len()).step_by(2) {
            out.push(u8::from_str_radix(&hex[k..k + 2], 16).map_err(|_| {
                bad(
                    "content",
                    format!("|{part}|: {:?} is not a hex byte", &hex[k..k + 2]),
                )
            })?);
        }
    }
    if s.split('|').count() % 2 == 0 {
        return Err(bad("content", "a `|` hex block is not closed"));
    }
    if out.is_empty() {
        return Err(bad("content", "an empty pattern"));
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(key: &str, v: Option<&str>) -> Result<T, Bad> {
    let v = v.ok_or_else(|| bad(key, "needs a value"))?;
    v.parse()
        .map_err(|_| bad(key, format!("{v:?} is not a number it takes")))
}

/// The last content, for a modifier that follows it.
fn last_content<'a>(r: &'a mut Rule, key: &str) -> Result<&'a mut Content, Bad> {
    match r.checks.last_mut() {
        Some(Check::Content(c)) => Ok(c),
        _ => Err(bad(key, "a content modifier without a content before it")),
    }
}

/// One option of a rule.
fn option(
    r: &mut Rule,
    sticky: &mut Buffer,
    has_sid: &mut bool,
    key: &str,
    v: Option<&str>,
) -> Result<(), Bad> {
    let flag = |v: Option<&str>| match v {
        None => Ok(()),
        Some(v) => Err(bad(key, format!("takes no value, got {v:?}"))),
    };
    match key {
        "msg" => r.msg = unquote(key, v.ok_or_else(|| bad(key, "needs a value"))?)?,
        "sid" => {
            r.sid = number(key, v)?;
            *has_sid = true;
        }
        "rev" => r.rev = number(key, v)?,
        "gid" => r.gid = number(key, v)?,
        "priority" => r.priority = Some(number(key, v)?),
        "classtype" => r.classtype = Some(v.ok_or_else(|| bad(key, "needs a value"))?.to_string()),
        "reference" | "metadata" | "target" => {}
        "content" => {
            let v = v.ok_or_else(|| bad(key, "needs a value"))?;
            let (negated, v) = match v.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, v),
            };
            let bytes = content_bytes(&unquote(key, v)?)?;
            r.checks.push(Check::Content(Content {
                bytes,
                negated,
                nocase: false,
                offset: None,
                depth: None,
                distance: None,
                within: None,
                fast_pattern: false,
                buffer: *sticky,
            }));
        }
        "nocase" => {
            flag(v)?;
            last_content(r, key)?.nocase = true;
        }
        "rawbytes" => {
            flag(v)?;
            last_content(r, key)?;
        }
        "fast_pattern" => {
            if v.is_some() {
                return Err(unsupported(
                    key,
                    "fast_pattern with arguments (only, offset,length): write `fast_pattern;`",
                ));
            }
            last_content(r, key)?.fast_pattern = true;
        }
        "offset" | "depth" | "distance" | "within" => modifier(r, key, v)?,
        "http.uri" | "http.header" | "http.method" | "pkt_data" => {
            flag(v)?;
            *sticky = match key {
                "http.uri" => Buffer::HttpUri,
                "http.header" => Buffer::HttpHeader,
                "http.method" => Buffer::HttpMethod,
                _ => Buffer::Payload,
            };
        }
        "http_uri" | "http_header" | "http_method" => {
            flag(v)?;
            let b = match key {
                "http_uri" => Buffer::HttpUri,
                "http_header" => Buffer::HttpHeader,
                _ => Buffer::HttpMethod,
            };
            last_content(r, key)?.buffer = b;
        }
        "pcre" => pcre(r, *sticky, v)?,
        "flow" => flow(r, v)?,
        "flowbits" => flowbits(r, v)?,
        "threshold" => threshold(r, v)?,
        k => return Err(unsupported(k, "keyword not supported")),
    }
    Ok(())
}

fn modifier(r: &mut Rule, key: &str, v: Option<&str>) -> Result<(), Bad> {
    let c = last_content(r, key)?;
    match key {
        "offset" => c.offset = Some(number(key, v)?),
        "depth" => {
            let d: u32 = number(key, v)?;
            if (d as usize) < c.bytes.len() {
                return Err(bad(
                    key,
                    format!(
                        "depth {d} is shorter than the pattern ({} bytes)",
                        c.bytes.len()
                    ),
                ));
            }
            c.depth = Some(d);
        }
        "distance" => c.distance = Some(number(key, v)?),
        _ => {
            let w: u32 = number(key, v)?;
            if (w as usize) < c.bytes.len() {
                return Err(bad(
                    key,
                    format!(
                        "within {w} is shorter than the pattern ({} bytes)",
                        c.bytes.len()
                    ),
                ));
            }
            c.within = Some(w);
        }
    }
    if c.relative() && (c.offset.is_some() || c.depth.is_some()) {
        return Err(bad(key, "offset/depth (from the buffer's start) with distance/within (from the previous match) on one content"));
    }
    Ok(())
}

fn pcre(r: &mut Rule, sticky: Buffer, v: Option<&str>) -> Result<(), Bad> {
    let key = "pcre";
    let v = v.ok_or_else(|| bad(key, "needs a value"))?;
    let (negated, v) = match v.strip_prefix('!') {
        Some(rest) => (true, rest.trim()),
        None => (false, v),
    };
    let text = v
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .ok_or_else(|| bad(key, format!("expected \"/regex/flags\", got {v}")))?;
    let body = text
        .strip_prefix('/')
        .ok_or_else(|| bad(key, format!("{text:?} does not start with `/`")))?;
    let end = body
        .rfind('/')
        .ok_or_else(|| bad(key, format!("{text:?} has no closing `/`")))?;
    let (pattern, flags) = (&body[..end], &body[end + 1..]);
    let mut b = regex::bytes::RegexBuilder::new(pattern);
    b.unicode(false).size_limit(1 << 22);
    let mut relative = false;
    let mut buffer = sticky;
    for f in flags.chars() {
        match f {
            'i' => {
                b.case_insensitive(true);
            }
            's' => {
                b.dot_matches_new_line(true);
            }
            'm' => {
                b.multi_line(true);
            }
            'x' => {
                b.ignore_whitespace(true);
            }
            'R' => relative = true,
            'U' => buffer = Buffer::HttpUri,
            'H' => buffer = Buffer::HttpHeader,
            'M' => buffer = Buffer::HttpMethod,
            f => {
                return Err(unsupported(
                    key,
                    format!("flag `{f}` of {text:?} (supported: i s m x R U H M)"),
                ))
            }
        }
    }
    let regex = b.build().map_err(|e| {
        let why = match &e {
            regex::Error::Syntax(s) => s.lines().last().unwrap_or(s).trim().trim_start_matches("error: ").to_string(),
            e => e.to_string(),
        };
        unsupported(key, format!("{text:?}: {why} (the engine takes what a DFA can: no backreferences, no look-around)"))
    })?;
    r.checks.push(Check::Pcre(Pcre {
        pattern: pattern.to_string(),
        regex,
        negated,
        relative,
        buffer,
    }));
    Ok(())
}

fn flow(r: &mut Rule, v: Option<&str>) -> Result<(), Bad> {
    let key = "flow";
    for w in v.ok_or_else(|| bad(key, "needs a value"))?.split(',') {
        let f = &mut r.flow;
        match w.trim() {
            "to_server" | "from_client" => f.to_server = Some(true),
            "to_client" | "from_server" => f.to_server = Some(false),
            "established" => f.established = Some(true),
            "not_established" => f.established = Some(false),
            "stateless" => f.stateless = true,
            "only_stream" => f.stream = Some(true),
            "no_stream" => f.stream = Some(false),
            o => return Err(unsupported(key, format!("{o:?} (to_server, to_client, from_server, from_client, established, not_established, stateless, only_stream, no_stream)"))),
        }
    }
    Ok(())
}

fn flowbits(r: &mut Rule, v: Option<&str>) -> Result<(), Bad> {
    let key = "flowbits";
    let v = v.ok_or_else(|| bad(key, "needs a value"))?;
    let (cmd, name) = match v.split_once(',') {
        Some((c, n)) => (c.trim(), Some(n.trim())),
        None => (v.trim(), None),
    };
    if let Some(n) = name {
        if n.is_empty() || n.contains(['|', '&', ' ']) {
            return Err(unsupported(
                key,
                format!("{n:?}: one bit name per flowbits (no | or & groups)"),
            ));
        }
    }
    let name = || {
        name.map(str::to_string)
            .ok_or_else(|| bad(key, format!("{cmd} needs a bit name")))
    };
    r.flowbits.push(match cmd {
        "set" => Flowbit::Set(name()?),
        "unset" => Flowbit::Unset(name()?),
        "toggle" => Flowbit::Toggle(name()?),
        "isset" => Flowbit::IsSet(name()?),
        "isnotset" => Flowbit::IsNotSet(name()?),
        "noalert" => Flowbit::NoAlert,
        c => {
            return Err(unsupported(
                key,
                format!("{c:?} (set, unset, toggle, isset, isnotset, noalert)"),
            ))
        }
    });
    Ok(())
}

fn threshold(r: &mut Rule, v: Option<&str>) -> Result<(), Bad> {
    let key = "threshold";
    let (mut kind, mut by_src, mut count, mut seconds) = (None, None, None, None);
    for part in v.ok_or_else(|| bad(key, "needs a value"))?.split(',') {
        let mut it = part.split_whitespace();
        let (Some(k), Some(val), None) = (it.next(), it.next(), it.next()) else {
            return Err(bad(
                key,
                format!("{:?}: expected `NAME VALUE`", part.trim()),
            ));
        };
        match k {
            "type" => {
                kind = Some(match val {
                    "limit" => ThresholdKind::Limit,
                    "threshold" => ThresholdKind::Threshold,
                    "both" => ThresholdKind::Both,
                    t => return Err(bad(key, format!("type {t:?} (limit, threshold, both)"))),
                })
            }
            "track" => {
                by_src = Some(match val {
                    "by_src" => true,
                    "by_dst" => false,
                    t => return Err(bad(key, format!("track {t:?} (by_src, by_dst)"))),
                })
            }
            "count" => count = Some(number::<u32>(key, Some(val))?),
            "seconds" => seconds = Some(number::<u32>(key, Some(val))?),
            o => return Err(bad(key, format!("{o:?} (type, track, count, seconds)"))),
        }
    }
    match (kind, by_src, count, seconds) {
        (Some(kind), Some(by_src), Some(count), Some(seconds)) if count > 0 => {
            r.threshold = Some(Threshold {
                kind,
                by_src,
                count,
                seconds,
            });
            Ok(())
        }
        _ => Err(bad(key, "needs type, track, count (> 0) and seconds")),
    }
}

#[cfg(test)]
mod tests;
