//! The inspection engine: packets in, verdicts and alerts out, independent of where the
//! packets come from (the `ips` filter feeds it frames; tests feed it packets).
//!
//! - TCP connections are followed per direction ([`super::stream`]): the client is the
//!   side that sent the first SYN (or, picked up mid-stream, the first packet); a
//!   connection is `established` once both SYNs and then a packet from the client were
//!   seen. Stream rules (TCP and `http` rules without `flow:no_stream`) are evaluated over
//!   the direction's reassembled bytes each time new bytes become contiguous, and alert
//!   once per connection direction (per request, for rules reading HTTP buffers), at the
//!   packet that completed the match; the requests new bytes complete are judged before
//!   the stream rules on those bytes (a request's flowbits count for them). Packet rules (UDP, ICMP, IP, and `no_stream`) are
//!   evaluated on each packet's payload.
//! - Candidates come from the prefilter ([`super::prefilter`]), scanning only the new
//!   bytes of a stream; full evaluation ([`super::eval`]) only for them. Rules are applied
//!   in Suricata's action order: pass, drop, alert. A `pass` that matches ends the
//!   packet's inspection.
//! - Inline (`Mode::Prevent`), a matching `drop` rule drops the packet and every later
//!   packet of its connection; an overlap with different bytes (an evasion attempt) drops
//!   the connection too, with an alert of its own ([`OVERLAP_SID`]).
//!
//! Owns: flow state (direction, establishment, flowbits, dropped), thresholds, the order
//! of rule evaluation and the alerts' contents. IP fragments (IPv4 and IPv6) are made whole before they
//! get here (`ids::defrag`, in the filter). Not yet: UDP/ICMP flow state beyond flowbits.

use super::eval::{evaluate, Buffers, Outcome};
use super::prefilter::{Candidates, Prefilter, Scan};
use super::rules::{Action, Buffer, Flowbit, Proto, Rule, ThresholdKind};
use super::stream::{Direction, Step};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

/// gid and sid of the engine's own alert for overlapping TCP data that differs (gid 129
/// is Snort's stream preprocessor's).
pub const OVERLAP_GID: u32 = 129;
pub const OVERLAP_SID: u32 = 3;
/// gid and sid of the limiter's alert (a service refused new connections; gid 135 is
/// Snort's rate filter's).
pub const FLOOD_GID: u32 = 135;
pub const FLOOD_SID: u32 = 1;
/// The same for IP fragments that overlap with other bytes (gid 123, Snort's frag3).
pub const FRAG_OVERLAP_GID: u32 = 123;
pub const FRAG_OVERLAP_SID: u32 = 8;

/// Whether verdicts drop packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Alert only (an IDS): `drop` rules alert and everything passes.
    Detect,
    /// Inline (an IPS): `drop` rules drop.
    Prevent,
}

/// One packet as the engine needs it.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    pub ts_ns: u64,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IP protocol number.
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    pub tcp: Option<Tcp>,
    pub payload: &'a [u8],
}

#[derive(Debug, Clone, Copy)]
pub struct Tcp {
    pub seq: u32,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
}

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Drop,
}

/// An alert, with what eve.json and fast.log say of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    pub ts_ns: u64,
    pub flow_id: u64,
    pub src: IpAddr,
    pub sport: u16,
    pub dst: IpAddr,
    pub dport: u16,
    pub proto: u8,
    pub gid: u32,
    pub sid: u32,
    pub rev: u32,
    pub msg: String,
    pub classtype: Option<String>,
    pub priority: u32,
    /// The packet (and its connection) was dropped for it.
    pub blocked: bool,
    /// The packet's payload, at most [`EXCERPT`] bytes.
    pub payload: Vec<u8>,
}

/// Bytes of payload an alert carries.
pub const EXCERPT: usize = 256;

/// What the engine counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub packets: u64,
    pub dropped: u64,
    pub alerts: u64,
    /// Candidates the prefilter found, and rules evaluated in full.
    pub candidates: u64,
    /// Rule evaluations whose backtracking budget ran out (undecided, taken as no match).
    pub exhausted: u64,
    /// Connections whose overlapping data differed, and datagrams whose fragments did
    /// (dropped or alerted).
    pub overlaps: u64,
    /// Connection directions no longer inspected: past the depth, or too much held.
    pub past_depth: u64,
    pub gave_up: u64,
    /// Connections forgotten because the table was full (oldest first).
    pub evicted: u64,
    /// New connections the flood limiter refused.
    pub limited: u64,
}

/// Settings.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub mode: Mode,
    /// Bytes of each direction inspected (Suricata's `stream.reassembly.depth`).
    pub depth: usize,
    /// Connections followed at once.
    pub max_flows: usize,
    /// Stage 6 (SafeCard's flow-based limiter against flash crowds): new TCP connections
    /// per second, and the burst, each service (destination address and port) admits; the
    /// SYNs beyond are dropped inline. A token bucket of `shape`'s, on capture time (so a
    /// capture replayed gives the same verdicts).
    pub flood: Option<(u64, u64)>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            mode: Mode::Prevent,
            depth: 1 << 20,
            max_flows: 1 << 16,
            flood: None,
        }
    }
}

/// A connection's key: its endpoints in a canonical order, and the protocol.
type Key = (IpAddr, u16, IpAddr, u16, u8);

fn key(p: &Packet<'_>) -> Key {
    if (p.src, p.sport) <= (p.dst, p.dport) {
        (p.src, p.sport, p.dst, p.dport, p.proto)
    } else {
        (p.dst, p.dport, p.src, p.sport, p.proto)
    }
}

struct Flow {
    id: u64,
    client: (IpAddr, u16),
    syn: [bool; 2],
    established: bool,
    fins: [bool; 2],
    dirs: [Direction; 2],
    scans: [Scan; 2],
    dropped: bool,
    bits: BTreeSet<String>,
    /// (direction, rule, request) of the stream alerts given (request 0: not HTTP).
    fired: HashSet<(u8, u32, u32)>,
    /// Where the next HTTP request of the client's direction starts, and its number.
    http_at: usize,
    http_n: u32,
    past_depth: [bool; 2],
    last_ns: u64,
}

/// The engine.
pub struct Engine {
    rules: Vec<Rule>,
    settings: Settings,
    /// Stream rules and packet rules: each prefilter's candidate i is rule `idx[i]`.
    stream: (Prefilter, Vec<usize>),
    packet: (Prefilter, Vec<usize>),
    stream_http: bool,
    /// Whether any rule needs connection state (stream rules, `flow:`, flowbits): without
    /// one, packets are judged alone and no table is kept.
    needs_flows: bool,
    cand: Candidates,
    flows: HashMap<Key, Flow>,
    next_id: u64,
    /// (rule, tracked address) -> (window start, matches in it).
    thresholds: HashMap<(usize, IpAddr), (u64, u32)>,
    /// The flood limiter's bucket per service (its arrival time, `shape::bucket`), and
    /// whether the service is being limited now (one alert per spell).
    services: HashMap<(IpAddr, u16), (std::sync::atomic::AtomicU64, bool)>,
    pub stats: Stats,
}

fn is_stream_rule(r: &Rule) -> bool {
    matches!(r.proto, Proto::Tcp | Proto::Http) && r.flow.stream != Some(false)
}

fn action_rank(a: Action) -> u8 {
    match a {
        Action::Pass => 0,
        Action::Drop => 1,
        Action::Alert => 2,
    }
}

impl Engine {
    pub fn new(rules: Vec<Rule>, settings: Settings) -> Result<Engine, String> {
        let split = |stream: bool| {
            let idx: Vec<usize> = (0..rules.len())
                .filter(|&i| is_stream_rule(&rules[i]) == stream)
                .collect();
            let set: Vec<Rule> = idx.iter().map(|&i| rules[i].clone()).collect();
            Prefilter::new(&set).map(|p| (p, idx))
        };
        let stream = split(true)?;
        let packet = split(false)?;
        let stream_http = [Buffer::HttpUri, Buffer::HttpHeader, Buffer::HttpMethod]
            .iter()
            .any(|&b| stream.0.reads(b));
        let needs_flows = !stream.1.is_empty()
            || rules.iter().any(|r| {
                let f = &r.flow;
                f.to_server.is_some() || f.established.is_some() || !r.flowbits.is_empty()
            });
        Ok(Engine {
            needs_flows,
            cand: Candidates::new(rules.len()),
            rules,
            settings,
            stream,
            packet,
            stream_http,
            flows: HashMap::new(),
            next_id: 1,
            thresholds: HashMap::new(),
            services: HashMap::new(),
            stats: Stats::default(),
        })
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Inspect one packet; its alerts are added to `alerts`.
    pub fn packet(&mut self, p: &Packet<'_>, alerts: &mut Vec<Alert>) -> Verdict {
        self.stats.packets += 1;
        let v = match p.proto {
            6 | 17 if self.needs_flows => self.with_flow(p, alerts),
            _ => self.packet_rules(p, None, alerts),
        };
        if v == Verdict::Drop {
            self.stats.dropped += 1;
        }
        v
    }

    fn with_flow(&mut self, p: &Packet<'_>, alerts: &mut Vec<Alert>) -> Verdict {
        let k = key(p);
        if !self.flows.contains_key(&k) {
            self.make_room();
            let id = self.next_id;
            self.next_id += 1;
            let depth = self.settings.depth;
            self.flows.insert(
                k,
                Flow {
                    id,
                    client: (p.src, p.sport),
                    syn: [false; 2],
                    established: false,
                    fins: [false; 2],
                    dirs: [Direction::new(depth), Direction::new(depth)],
                    scans: [Scan::default(); 2],
                    dropped: false,
                    bits: BTreeSet::new(),
                    fired: HashSet::new(),
                    http_at: 0,
                    http_n: 0,
                    past_depth: [false; 2],
                    last_ns: p.ts_ns,
                },
            );
        }
        let mut flow = self.flows.remove(&k).expect("inserted above");
        if flow.syn == [false, false]
            && p.tcp.is_some_and(|t| t.syn)
            && !self.admit(p, flow.id, alerts)
        {
            // Refused by the limiter: this SYN is dropped and the attempt forgotten (a
            // retry is a new attempt).
            return Verdict::Drop;
        }
        flow.last_ns = p.ts_ns;
        let d = usize::from((p.src, p.sport) != flow.client);
        let mut verdict = if flow.dropped {
            Verdict::Drop
        } else {
            Verdict::Pass
        };
        if verdict == Verdict::Pass {
            if let Some(t) = p.tcp {
                verdict = self.tcp(p, t, d, &mut flow, alerts);
            }
            if verdict == Verdict::Pass {
                verdict = self.packet_rules(p, Some((d, &mut flow)), alerts);
            }
        }
        let closed = p.tcp.is_some_and(|t| t.rst) || flow.fins == [true, true];
        if !closed || flow.dropped {
            // A dropped connection is remembered (its later packets are dropped too)
            // until the table needs the room.
            self.flows.insert(k, flow);
        }
        verdict
    }

    /// Room for one more connection: the oldest eighth goes when the table is full.
    fn make_room(&mut self) {
        if self.flows.len() < self.settings.max_flows {
            return;
        }
        let mut ages: Vec<(u64, Key)> = self.flows.iter().map(|(k, f)| (f.last_ns, *k)).collect();
        ages.sort_unstable_by_key(|a| a.0);
        for (_, k) in ages.iter().take((self.settings.max_flows / 8).max(1)) {
            self.flows.remove(k);
            self.stats.evicted += 1;
        }
    }

    /// TCP state, reassembly and the stream rules.
    fn tcp(
        &mut self,
        p: &Packet<'_>,
        t: Tcp,
        d: usize,
        f: &mut Flow,
        alerts: &mut Vec<Alert>,
    ) -> Verdict {
        if t.syn {
            f.syn[d] = true;
            f.dirs[d].syn(t.seq);
        } else if d == 0 && f.syn == [true, true] {
            f.established = true;
        }
        if t.fin {
            f.fins[d] = true;
        }
        if self.stream.1.is_empty() {
            // No stream rules: the connection's state is all that is needed.
            return Verdict::Pass;
        }
        let (from, to) = match f.dirs[d].segment(t.seq, p.payload) {
            Step::Data { from, to } => (from, to),
            Step::Overlap(_) => {
                let v = self.evasion(
                    p,
                    f.id,
                    (OVERLAP_GID, OVERLAP_SID),
                    "STREAM overlapping TCP data differs from data already seen (evasion attempt)",
                    alerts,
                );
                f.dropped |= v == Verdict::Drop;
                return v;
            }
            Step::Gave => {
                self.stats.gave_up += 1;
                return Verdict::Pass;
            }
        };
        if f.dirs[d].past_depth() && !f.past_depth[d] {
            f.past_depth[d] = true;
            self.stats.past_depth += 1;
        }
        let kept = f.dirs[d].bytes().len() as u64;
        if to <= from || from >= kept {
            return Verdict::Pass;
        }
        let mut cand = std::mem::take(&mut self.cand);
        // The requests the new bytes complete first (their flowbits count for the stream
        // rules on the same bytes), then the new contiguous bytes through the prefilter,
        // from where the last scan ended.
        let mut verdict = Verdict::Pass;
        if d == 0 && self.stream_http {
            verdict = self.http_requests(p, f, &mut cand, alerts);
        }
        if verdict == Verdict::Pass {
            cand.clear();
            let bytes = &f.dirs[d].bytes()[from as usize..to.min(kept) as usize];
            self.stream
                .0
                .scan(Buffer::Payload, bytes, &mut f.scans[d], &mut cand);
            verdict = self.stream_candidates(p, d, f, &cand, None, alerts);
        }
        self.cand = cand;
        verdict
    }

    /// The client's complete HTTP requests not yet inspected, each with its buffers.
    fn http_requests(
        &mut self,
        p: &Packet<'_>,
        f: &mut Flow,
        cand: &mut Candidates,
        alerts: &mut Vec<Alert>,
    ) -> Verdict {
        loop {
            let all = f.dirs[0].bytes();
            let Some(rest) = all.get(f.http_at..).filter(|r| !r.is_empty()) else {
                return Verdict::Pass;
            };
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            let len = match req.parse(rest) {
                Ok(httparse::Status::Complete(n)) => n,
                // Incomplete, or not HTTP: wait for more bytes / stop looking.
                _ => return Verdict::Pass,
            };
            let method = req.method.unwrap_or("").as_bytes().to_vec();
            let uri = req.path.unwrap_or("").as_bytes().to_vec();
            // The header block: the bytes after the request line, up to the blank line.
            let head = &rest[..len];
            let line_end = head
                .windows(2)
                .position(|w| w == b"\r\n")
                .map_or(0, |e| e + 2);
            let header = head[line_end..].to_vec();
            let body = content_length(req.headers);
            f.http_n += 1;
            f.http_at += len + body;
            cand.clear();
            for (b, data) in [
                (Buffer::HttpUri, &uri),
                (Buffer::HttpHeader, &header),
                (Buffer::HttpMethod, &method),
            ] {
                self.stream.0.scan(b, data, &mut Scan::default(), cand);
            }
            let bufs = (uri.as_slice(), header.as_slice(), method.as_slice());
            let n = f.http_n;
            if self.stream_candidates(p, 0, f, cand, Some((bufs, n)), alerts) == Verdict::Drop {
                return Verdict::Drop;
            }
        }
    }

    /// Evaluate the stream-rule candidates `cand` on direction `d`'s bytes (and, for an
    /// HTTP request, its buffers and number).
    #[allow(clippy::type_complexity)]
    fn stream_candidates(
        &mut self,
        p: &Packet<'_>,
        d: usize,
        f: &mut Flow,
        cand: &Candidates,
        http: Option<((&[u8], &[u8], &[u8]), u32)>,
        alerts: &mut Vec<Alert>,
    ) -> Verdict {
        if cand.list.is_empty() {
            return Verdict::Pass;
        }
        let mut order: Vec<usize> = cand
            .list
            .iter()
            .map(|&c| self.stream.1[c as usize])
            .collect();
        order.sort_by_key(|&r| (action_rank(self.rules[r].action), r));
        // The direction is lent out of the connection while its rules are judged (they
        // change the connection's bits and verdict, never its bytes): no copy of the stream.
        let dir = std::mem::replace(&mut f.dirs[d], Direction::new(0));
        let verdict = self.judge(p, d, f, &order, dir.bytes(), http, alerts);
        f.dirs[d] = dir;
        verdict
    }

    /// [`Engine::stream_candidates`]' rules in `order`, on `payload` (and the request's
    /// buffers).
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn judge(
        &mut self,
        p: &Packet<'_>,
        d: usize,
        f: &mut Flow,
        order: &[usize],
        payload: &[u8],
        http: Option<((&[u8], &[u8], &[u8]), u32)>,
        alerts: &mut Vec<Alert>,
    ) -> Verdict {
        let request = http.map_or(0, |h| h.1);
        let bufs = match http {
            Some(((uri, header, method), _)) => Buffers {
                payload,
                uri: Some(uri),
                header: Some(header),
                method: Some(method),
            },
            None => Buffers::payload(payload),
        };
        for &r in order {
            let reads_http = self.rules[r]
                .checks
                .iter()
                .any(|c| c.buffer() != Buffer::Payload);
            // Payload-only rules are judged on the stream; HTTP rules per request.
            if reads_http != http.is_some() || f.fired.contains(&(d as u8, r as u32, request)) {
                continue;
            }
            if !self.applies(r, p, Some((d, &*f))) {
                continue;
            }
            self.stats.candidates += 1;
            match evaluate(&self.rules[r].checks, &bufs) {
                Outcome::Match => {}
                Outcome::NoMatch => continue,
                Outcome::Exhausted => {
                    self.stats.exhausted += 1;
                    continue;
                }
            }
            f.fired.insert((d as u8, r as u32, request));
            match self.matched(r, p, Some(f), alerts) {
                Some(v) => return v,
                None => continue,
            }
        }
        Verdict::Pass
    }

    /// The packet rules on the packet's payload.
    fn packet_rules(
        &mut self,
        p: &Packet<'_>,
        mut flow: Option<(usize, &mut Flow)>,
        alerts: &mut Vec<Alert>,
    ) -> Verdict {
        let mut cand = std::mem::take(&mut self.cand);
        cand.clear();
        self.packet
            .0
            .scan(Buffer::Payload, p.payload, &mut Scan::default(), &mut cand);
        let mut order: Vec<usize> = cand
            .list
            .iter()
            .map(|&c| self.packet.1[c as usize])
            .collect();
        self.cand = cand;
        order.sort_by_key(|&r| (action_rank(self.rules[r].action), r));
        for r in order {
            if !self.applies(r, p, flow.as_ref().map(|(d, f)| (*d, &**f))) {
                continue;
            }
            self.stats.candidates += 1;
            match evaluate(&self.rules[r].checks, &Buffers::payload(p.payload)) {
                Outcome::Match => {}
                Outcome::NoMatch => continue,
                Outcome::Exhausted => {
                    self.stats.exhausted += 1;
                    continue;
                }
            }
            if let Some(v) = self.matched(r, p, flow.as_mut().map(|(_, f)| &mut **f), alerts) {
                return v;
            }
        }
        Verdict::Pass
    }

    /// Whether rule `r`'s header, flow and flowbit conditions hold for the packet.
    fn applies(&self, r: usize, p: &Packet<'_>, flow: Option<(usize, &Flow)>) -> bool {
        let rule = &self.rules[r];
        let proto_ok = match rule.proto {
            Proto::Ip => true,
            Proto::Tcp | Proto::Http => p.proto == 6,
            Proto::Udp => p.proto == 17,
            Proto::Icmp => p.proto == 1 || p.proto == 58,
        };
        if !proto_ok || !rule.header_matches(p.src, p.sport, p.dst, p.dport) {
            return false;
        }
        let fl = &rule.flow;
        match flow {
            Some((d, f)) => {
                if fl.to_server.is_some_and(|ts| ts != (d == 0)) {
                    return false;
                }
                if !fl.stateless
                    && fl
                        .established
                        .is_some_and(|e| e != (f.established || p.proto == 17))
                {
                    return false;
                }
                rule.flowbits.iter().all(|b| match b {
                    Flowbit::IsSet(n) => f.bits.contains(n),
                    Flowbit::IsNotSet(n) => !f.bits.contains(n),
                    _ => true,
                })
            }
            None => {
                fl.to_server.is_none()
                    && (fl.stateless || fl.established.is_none())
                    && !rule.flowbits.iter().any(|b| matches!(b, Flowbit::IsSet(_)))
            }
        }
    }

    /// Rule `r` matched: its flowbits, threshold, alert and action. Some(verdict) when
    /// the packet's inspection ends here (pass, or a drop inline).
    fn matched(
        &mut self,
        r: usize,
        p: &Packet<'_>,
        flow: Option<&mut Flow>,
        alerts: &mut Vec<Alert>,
    ) -> Option<Verdict> {
        let rule = &self.rules[r];
        let action = rule.action;
        let blocked = action == Action::Drop && self.settings.mode == Mode::Prevent;
        let mut flow_id = 0;
        if let Some(f) = flow {
            flow_id = f.id;
            for b in &rule.flowbits {
                match b {
                    Flowbit::Set(n) => {
                        f.bits.insert(n.clone());
                    }
                    Flowbit::Unset(n) => {
                        f.bits.remove(n);
                    }
                    Flowbit::Toggle(n) => {
                        if !f.bits.remove(n) {
                            f.bits.insert(n.clone());
                        }
                    }
                    _ => {}
                }
            }
            f.dropped |= blocked;
        }
        if action == Action::Pass {
            return Some(Verdict::Pass);
        }
        let alerts_on_match = rule.alerts();
        if alerts_on_match && self.threshold_allows(r, p) {
            let rule = &self.rules[r];
            let (ids, msg) = ((rule.gid, rule.sid, rule.rev), rule.msg.clone());
            self.alert_raw(p, flow_id, ids, &msg, blocked, alerts);
            if let Some(a) = alerts.last_mut() {
                a.classtype = self.rules[r].classtype.clone();
                a.priority = self.rules[r].priority.unwrap_or(3);
            }
        }
        blocked.then_some(Verdict::Drop)
    }

    /// Stage 6: whether the service `p` opens a connection to admits one more now.
    fn admit(&mut self, p: &Packet<'_>, flow_id: u64, alerts: &mut Vec<Alert>) -> bool {
        let Some((rate, burst)) = self.settings.flood else {
            return true;
        };
        let (tat, limiting) = self
            .services
            .entry((p.dst, p.dport))
            .or_insert_with(|| (std::sync::atomic::AtomicU64::new(0), false));
        let bucket = shape::bucket::Bucket {
            p: shape::bucket::Params {
                rate: rate.max(1),
                depth: burst.max(1),
            },
            tat,
        };
        let ok = matches!(bucket.take(p.ts_ns, 1, 1), shape::bucket::Take::Got(_));
        let first = !ok && !*limiting;
        *limiting = !ok;
        if ok {
            return true;
        }
        self.stats.limited += 1;
        if self.settings.mode == Mode::Detect {
            if first {
                self.alert_raw(
                    p,
                    flow_id,
                    (FLOOD_GID, FLOOD_SID, 1),
                    "FLOOD new connections to the service beyond its limit",
                    false,
                    alerts,
                );
            }
            return true;
        }
        if first {
            self.alert_raw(
                p,
                flow_id,
                (FLOOD_GID, FLOOD_SID, 1),
                "FLOOD new connections to the service beyond its limit (refused)",
                true,
                alerts,
            );
        }
        false
    }

    /// An evasion attempt the engine itself found (overlapping TCP data or IP fragments
    /// that differ): counted, alerted (`gid:sid`), and dropped inline.
    pub fn evasion(
        &mut self,
        p: &Packet<'_>,
        flow_id: u64,
        (gid, sid): (u32, u32),
        msg: &str,
        alerts: &mut Vec<Alert>,
    ) -> Verdict {
        self.stats.overlaps += 1;
        let blocked = self.settings.mode == Mode::Prevent;
        self.alert_raw(p, flow_id, (gid, sid, 1), msg, blocked, alerts);
        if blocked {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }

    fn threshold_allows(&mut self, r: usize, p: &Packet<'_>) -> bool {
        let Some(t) = self.rules[r].threshold else {
            return true;
        };
        let who = if t.by_src { p.src } else { p.dst };
        let window = t.seconds as u64 * 1_000_000_000;
        let e = self.thresholds.entry((r, who)).or_insert((p.ts_ns, 0));
        if p.ts_ns.saturating_sub(e.0) >= window {
            *e = (p.ts_ns, 0);
        }
        e.1 += 1;
        match t.kind {
            ThresholdKind::Limit => e.1 <= t.count,
            ThresholdKind::Threshold => e.1 % t.count == 0,
            ThresholdKind::Both => e.1 == t.count,
        }
    }

    fn alert_raw(
        &mut self,
        p: &Packet<'_>,
        flow_id: u64,
        (gid, sid, rev): (u32, u32, u32),
        msg: &str,
        blocked: bool,
        alerts: &mut Vec<Alert>,
    ) {
        self.stats.alerts += 1;
        alerts.push(Alert {
            ts_ns: p.ts_ns,
            flow_id,
            src: p.src,
            sport: p.sport,
            dst: p.dst,
            dport: p.dport,
            proto: p.proto,
            gid,
            sid,
            rev,
            msg: msg.to_string(),
            classtype: None,
            priority: 3,
            blocked,
            payload: p.payload[..p.payload.len().min(EXCERPT)].to_vec(),
        });
    }
}

/// A request's body length (Content-Length; chunked bodies are not skipped: the next
/// request is looked for right after the headers and found when the body is not one).
fn content_length(headers: &[httparse::Header<'_>]) -> usize {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
