//! The web view (`streamlined --http ADDR`, off by default): a page per run with its
//! graph and live counters, the same counters for Prometheus at `/metrics`, and live
//! edits from the page, served by the daemon itself with `tiny_http` (a thread accepts,
//! a thread per request, as the control socket has a thread per connection).
//!
//! Owns: the HTTP surface and its guards. Who a request is (`session`: one-time tokens
//! from the control socket, sessions, the scrape token); what it may see (`snapshot`:
//! as `ps` shows that user); the exposition format (`metrics`); the page's assets
//! (`assets/`, built in with `include_str!`, no CDN). Does not own: any decision about
//! a run. An edit from the page is the protocol's typed edit (`proto::EditRequest`) and
//! goes through `Daemon::edit`, the transaction the CLI and PipesFS use: checked against
//! the policy as that user, applied by the worker, written to the audit log.
//!
//! Guards, in order, for every request: the `Host` header must name this server by
//! address (an IP literal with its port, or `localhost:PORT` when bound to loopback;
//! names are refused, which stops DNS rebinding); a request with an `Origin`, or a
//! `Sec-Fetch-Site: cross-site`, from anywhere but this server is refused (403); an edit
//! must carry a same-origin `Origin` and a JSON body (a cross-site form cannot send one
//! without a preflight, which is refused). Sessions travel in a cookie `HttpOnly;
//! SameSite=Strict` named by the port, or as `Authorization: Bearer SESSION`.

pub mod metrics;
pub mod sample;
pub mod session;
pub mod snapshot;

use crate::policy::Cred;
use crate::proto::{EditRequest, Reply};
use crate::server::Daemon;
use session::{Sessions, Who};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiny_http::{Header, Method, Request, Response, StatusCode};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// Requests handled at once (each a thread); more are answered 503.
const HANDLERS_MAX: usize = 128;
/// Event streams open at once, all users together, and per user.
const STREAMS_MAX: usize = 64;
const STREAMS_PER_USER: usize = 16;
/// How often an event stream sends the runs.
pub const EVENT_PERIOD: Duration = Duration::from_millis(1000);
/// The largest request body taken (an edit).
const BODY_MAX: usize = 64 * 1024;

/// Why the web view could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("cannot listen on {addr} for the web view: {why}")]
    Listen { addr: SocketAddr, why: String },
    #[error("cannot write the scrape token {path}: {why}")]
    TokenFile { path: PathBuf, why: std::io::Error },
    #[error("no random token: {0}")]
    Random(std::io::Error),
}

/// The web view of a daemon.
pub struct Web {
    pub sessions: Sessions,
    addr: SocketAddr,
    handlers: AtomicUsize,
    streams: std::sync::Mutex<std::collections::BTreeMap<u32, usize>>,
}

/// An answer: status and body, with its content type.
struct Answer {
    status: u16,
    kind: &'static str,
    body: Vec<u8>,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn new(status: u16, kind: &'static str, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            status,
            kind,
            body: body.into(),
            headers: Vec::new(),
        }
    }

    fn text(status: u16, body: impl Into<Vec<u8>>) -> Answer {
        Answer::new(status, "text/plain; charset=utf-8", body)
    }

    fn json(status: u16, v: &impl serde::Serialize) -> Answer {
        Answer::new(
            status,
            "application/json",
            serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")),
        )
    }

    fn header(mut self, k: &str, v: impl Into<String>) -> Answer {
        self.headers.push((k.to_string(), v.into()));
        self
    }
}

fn header<'a>(req: &'a Request, name: &'static str) -> Option<&'a str> {
    req.headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

/// An HTTP status for a refusal's errno.
pub fn status_of(errno: i32) -> u16 {
    match errno {
        libc::EACCES | libc::EPERM => 403,
        libc::ENOENT | libc::ESRCH => 404,
        libc::EBUSY | libc::EXDEV => 409,
        libc::EINVAL => 400,
        libc::EAGAIN => 429,
        _ => 500,
    }
}

impl crate::server::WebLogin for Web {
    fn login_url(&self, who: &Cred) -> std::io::Result<String> {
        Ok(self.url(&self.sessions.issue(who)?))
    }
}

impl Web {
    /// The cookie that carries a session of this server (cookies are not kept apart by
    /// port, so the port names it).
    fn cookie_name(&self) -> String {
        format!("sl_session_{}", self.addr.port())
    }

    /// The URL that redeems `token`.
    pub fn url(&self, token: &str) -> String {
        format!("http://{}/?token={token}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether `host` (a Host header) names this server: an IP literal with our port (the
    /// bound address, or any address when bound to all of them), or `localhost:PORT` when
    /// bound to loopback. A name, which DNS could point here, is refused.
    pub fn host_ok(&self, host: &str) -> bool {
        let Ok(sa) = host.parse::<SocketAddr>().or_else(|e| {
            host.strip_prefix("localhost:")
                .filter(|_| self.addr.ip().is_loopback())
                .and_then(|p| p.parse::<u16>().ok())
                .map(|p| SocketAddr::new(self.addr.ip(), p))
                .ok_or(e)
        }) else {
            return false;
        };
        sa.port() == self.addr.port()
            && (sa.ip() == self.addr.ip() || self.addr.ip().is_unspecified())
    }

    /// Whether a request from `origin` is same-origin with `host`.
    fn origin_ok(&self, origin: &str, host: &str) -> bool {
        origin == format!("http://{host}")
    }

    /// The user of the session the request carries (cookie or bearer), or the scraper.
    fn who(&self, req: &Request) -> Option<Who> {
        if let Some(b) = header(req, "Authorization").and_then(|a| a.strip_prefix("Bearer ")) {
            return self.sessions.bearer(b.trim());
        }
        let name = self.cookie_name();
        let cookies = header(req, "Cookie")?;
        cookies
            .split(';')
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| self.sessions.session(v))
            .map(Who::User)
    }

    /// Count an event stream of `uid`, or refuse it.
    fn open_stream(&self, uid: u32) -> Option<StreamSlot<'_>> {
        let mut s = self.streams.lock().expect("not poisoned");
        let all: usize = s.values().sum();
        let mine = s.entry(uid).or_default();
        if all >= STREAMS_MAX || *mine >= STREAMS_PER_USER {
            return None;
        }
        *mine += 1;
        Some(StreamSlot { w: self, uid })
    }
}

/// An event stream's place in the count.
struct StreamSlot<'a> {
    w: &'a Web,
    uid: u32,
}

impl Drop for StreamSlot<'_> {
    fn drop(&mut self) {
        let mut s = self.w.streams.lock().expect("not poisoned");
        if let Some(n) = s.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                s.remove(&self.uid);
            }
        }
    }
}

/// Write the scrape token to `path`, readable by root only (mode 0600, replaced if there).
fn write_token_file(path: &Path, token: &str) -> Result<(), WebError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |why| WebError::TokenFile {
        path: path.to_path_buf(),
        why,
    };
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    f.write_all(token.as_bytes()).map_err(err)?;
    Ok(())
}

/// Start the web view on `addr`: its scrape token written to `token_file`, a thread
/// serving until the daemon quits. The daemon answers `Request::Web` from then on.
pub fn start(d: &Arc<Daemon>, addr: SocketAddr, token_file: &Path) -> Result<Arc<Web>, WebError> {
    let server = tiny_http::Server::http(addr).map_err(|e| WebError::Listen {
        addr,
        why: e.to_string(),
    })?;
    let bound = server.server_addr().to_ip().unwrap_or(addr);
    let scrape = session::secret().map_err(WebError::Random)?;
    write_token_file(token_file, &scrape)?;
    let w = Arc::new(Web {
        sessions: Sessions::new(scrape),
        addr: bound,
        handlers: AtomicUsize::new(0),
        streams: Default::default(),
    });
    d.set_web(w.clone());
    let (d, w2) = (d.clone(), w.clone());
    std::thread::Builder::new()
        .name("sl-http".into())
        .spawn(move || accept(d, w2, server))
        .map_err(|e| WebError::Listen {
            addr,
            why: e.to_string(),
        })?;
    Ok(w)
}

/// Take requests until the daemon quits; each gets a thread.
fn accept(d: Arc<Daemon>, w: Arc<Web>, server: tiny_http::Server) {
    while !d.quit.load(Ordering::Relaxed) {
        let req = match server.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(_) => continue,
        };
        if w.handlers.fetch_add(1, Ordering::SeqCst) >= HANDLERS_MAX {
            w.handlers.fetch_sub(1, Ordering::SeqCst);
            respond(
                req,
                Answer::text(503, "too many requests at once; try again\n"),
            );
            continue;
        }
        let (d, w, mine) = (d.clone(), w.clone(), w.clone());
        let spawned = std::thread::Builder::new()
            .name("sl-http-req".into())
            .spawn(move || {
                handle(&d, &w, req);
                w.handlers.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // The request went with the closure: its place in the count is given back.
            mine.handlers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn respond(req: Request, a: Answer) {
    let mut r = Response::from_data(a.body).with_status_code(StatusCode(a.status));
    let mut hs = vec![
        ("Content-Type".to_string(), a.kind.to_string()),
        ("Cache-Control".to_string(), "no-store".to_string()),
        ("X-Content-Type-Options".to_string(), "nosniff".to_string()),
        ("X-Frame-Options".to_string(), "DENY".to_string()),
        (
            "Content-Security-Policy".to_string(),
            "default-src 'self'; frame-ancestors 'none'".to_string(),
        ),
    ];
    hs.extend(a.headers);
    for (k, v) in hs {
        if let Ok(h) = Header::from_bytes(k.as_bytes(), v.as_bytes()) {
            r = r.with_header(h);
        }
    }
    let _ = req.respond(r);
}

/// The guards every request passes (see the module's documentation): the refusal, if any.
fn guard(w: &Web, req: &Request) -> Option<Answer> {
    let host = header(req, "Host").unwrap_or("");
    if !w.host_ok(host) {
        return Some(Answer::text(
            421,
            format!(
                "Host `{host}` is not this server: ask for http://{} (names other than localhost are refused)\n",
                w.addr
            ),
        ));
    }
    if let Some(o) = header(req, "Origin") {
        if !w.origin_ok(o, host) {
            return Some(Answer::text(
                403,
                format!("cross-origin request from {o} refused\n"),
            ));
        }
    }
    if header(req, "Sec-Fetch-Site") == Some("cross-site") {
        return Some(Answer::text(403, "cross-site request refused\n"));
    }
    None
}

/// One request, answered.
fn handle(d: &Arc<Daemon>, w: &Web, mut req: Request) {
    if let Some(no) = guard(w, &req) {
        return respond(req, no);
    }
    let url = req.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let method = req.method().clone();
    let who = w.who(&req);
    let user = match &who {
        Some(Who::User(c)) => Some(c.clone()),
        _ => None,
    };
    if let (Method::Get, Some(ask)) = (&method, sample::parse(path, query)) {
        let a = match (user, ask) {
            (None, _) => unauthorized(),
            (Some(_), Err(why)) => Answer::text(400, format!("{why}\n")),
            (Some(c), Ok(ask)) => sample_of(d, w, &c, &ask),
        };
        return respond(req, a);
    }
    let a = match (&method, path) {
        (Method::Get, "/") => match query.split('&').find_map(|q| q.strip_prefix("token=")) {
            Some(t) => redeem(w, t),
            None if user.is_some() => Answer::new(200, "text/html; charset=utf-8", INDEX_HTML),
            None => Answer::new(401, "text/html; charset=utf-8", no_session_page()),
        },
        (Method::Get, "/app.js") => Answer::new(200, "text/javascript; charset=utf-8", APP_JS),
        (Method::Get, "/app.css") => Answer::new(200, "text/css; charset=utf-8", APP_CSS),
        (Method::Get, "/metrics") => match &who {
            Some(Who::Scraper) => metrics_of(d, &Cred::of(0, 0)),
            Some(Who::User(c)) => metrics_of(d, c),
            None => unauthorized(),
        },
        (Method::Get, "/api/events") => match user {
            Some(c) => return events(d, w, req, &c),
            None => unauthorized(),
        },
        (Method::Get, p) => match (user, p) {
            (Some(c), "/api/runs") => Answer::json(200, &runs_doc(d, &c)),
            (Some(_), "/api/filters") => Answer::json(200, &filters_doc()),
            (None, "/api/runs" | "/api/filters") => unauthorized(),
            _ => Answer::text(404, format!("no page {p}\n")),
        },
        (Method::Post, p) => match (user, edit_target(p)) {
            (Some(c), Some(run)) => edit(d, &mut req, &c, run),
            (None, Some(_)) => unauthorized(),
            _ => Answer::text(404, format!("nothing to post to at {p}\n")),
        },
        _ => Answer::text(405, "method not allowed\n"),
    };
    respond(req, a)
}

fn unauthorized() -> Answer {
    Answer::text(
        401,
        "no session: open the URL `streamline web` prints (or send Authorization: Bearer TOKEN)\n",
    )
}

fn no_session_page() -> String {
    "<!doctype html><title>Streamline</title><p>No session. Run <code>streamline web</code> \
     and open the URL it prints: it carries a one-time token that opens a session as you.</p>"
        .to_string()
}

/// `GET /?token=T`: the token redeemed for a session, the cookie set, on to `/`.
fn redeem(w: &Web, token: &str) -> Answer {
    match w.sessions.redeem(token) {
        Some(id) => Answer::text(303, "session opened\n")
            .header("Location", "/")
            .header(
                "Set-Cookie",
                format!(
                    "{}={id}; HttpOnly; SameSite=Strict; Path=/",
                    w.cookie_name()
                ),
            ),
        None => Answer::new(
            403,
            "text/html; charset=utf-8",
            "<!doctype html><title>Streamline</title><p>This token is not valid (used, \
             expired, or from another daemon). Run <code>streamline web</code> again.</p>",
        ),
    }
}

/// `/api/runs/N/edit` -> N.
fn edit_target(path: &str) -> Option<u64> {
    path.strip_prefix("/api/runs/")?
        .strip_suffix("/edit")?
        .parse()
        .ok()
}

/// What `/api/runs` and each event carry: when, who, and the runs that user sees.
#[derive(serde::Serialize)]
struct RunsDoc {
    /// Seconds since the epoch.
    t: f64,
    uid: u32,
    runs: Vec<snapshot::RunView>,
}

fn runs_doc(d: &Daemon, who: &Cred) -> RunsDoc {
    RunsDoc {
        t: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|t| t.as_secs_f64())
            .unwrap_or(0.0),
        uid: who.uid,
        runs: snapshot::runs(d, who),
    }
}

fn filters_doc() -> Vec<(String, String)> {
    catalog::REGISTRY
        .iter()
        .map(|s| (s.name.to_string(), s.synopsis.to_string()))
        .collect()
}

fn metrics_of(d: &Daemon, who: &Cred) -> Answer {
    Answer::new(
        200,
        "text/plain; version=0.0.4; charset=utf-8",
        metrics::render(&snapshot::runs(d, who)),
    )
}

/// `POST /api/runs/N/edit`: the body is the protocol's edit (typed, or its text form),
/// made as `who` through `Daemon::edit`.
fn edit(d: &Daemon, req: &mut Request, who: &Cred, run: u64) -> Answer {
    // A same-origin fetch always says where it comes from; a request without an Origin
    // is not the page.
    if header(req, "Origin").is_none() {
        return Answer::text(403, "an edit must come from the page (no Origin header)\n");
    }
    let json = header(req, "Content-Type")
        .is_some_and(|c| c.split(';').next() == Some("application/json"));
    if !json {
        return Answer::text(
            415,
            "an edit is a JSON body (Content-Type: application/json)\n",
        );
    }
    let mut body = Vec::new();
    if req
        .as_reader()
        .take(BODY_MAX as u64 + 1)
        .read_to_end(&mut body)
        .is_err()
        || body.len() > BODY_MAX
    {
        return Answer::text(413, format!("an edit is at most {BODY_MAX} bytes\n"));
    }
    let e: EditRequest = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => {
            return Answer::json(
                400,
                &serde_json::json!({"errno": libc::EINVAL, "code": "EINVAL",
                    "message": format!("the edit does not decode: {e}")}),
            )
        }
    };
    match d.edit_request(run, who, e) {
        Ok(applied) => Answer::json(200, &serde_json::json!({"run": run, "applied": applied})),
        Err(Reply::Error {
            code,
            errno,
            message,
        }) => Answer::json(
            status_of(errno),
            &serde_json::json!({"errno": errno, "code": code, "message": message}),
        ),
        Err(other) => Answer::json(500, &other),
    }
}

/// `GET /api/runs/N/nodes/LABEL/sample[.pcap]`: what passes the node, as `who` may see
/// it; one of the user's stream slots while it gathers.
fn sample_of(d: &Daemon, w: &Web, who: &Cred, ask: &sample::Ask) -> Answer {
    let Some(_slot) = w.open_stream(who.uid) else {
        return Answer::text(
            429,
            format!("too many streams open (at most {STREAMS_PER_USER} per user, {STREAMS_MAX} in all)\n"),
        );
    };
    match sample::take(d, who, ask) {
        Err((status, why)) => Answer::text(status, format!("{why}\n")),
        Ok((pcap, n)) if ask.pcap => {
            let name: String = ask
                .node
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            Answer::new(200, "application/vnd.tcpdump.pcap", pcap)
                .header(
                    "Content-Disposition",
                    format!("attachment; filename=\"run{}-{name}.pcap\"", ask.run),
                )
                .header("X-Streamline-Packets", n.to_string())
        }
        Ok((pcap, n)) => Answer::json(
            200,
            &serde_json::json!({"run": ask.run, "node": ask.node, "packets": n, "lines": sample::lines(&pcap)}),
        ),
    }
}

/// `GET /api/events`: server-sent events, the runs `who` sees every [`EVENT_PERIOD`],
/// until the client goes, the session ends or the daemon quits.
fn events(d: &Daemon, w: &Web, req: Request, who: &Cred) {
    let Some(_slot) = w.open_stream(who.uid) else {
        return respond(
            req,
            Answer::text(
                429,
                format!("too many event streams open (at most {STREAMS_PER_USER} per user, {STREAMS_MAX} in all)\n"),
            ),
        );
    };
    let mut out = req.into_writer();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\nretry: 2000\n\n";
    if out
        .write_all(head.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        return;
    }
    let mut next = Instant::now();
    while !d.quit.load(Ordering::Relaxed) {
        let doc = runs_doc(d, who);
        let Ok(json) = serde_json::to_string(&doc) else {
            break;
        };
        let ev = format!("event: runs\ndata: {json}\n\n");
        if out
            .write_all(ev.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            break;
        }
        next += EVENT_PERIOD;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web(addr: &str) -> Web {
        Web {
            sessions: Sessions::new("s".into()),
            addr: addr.parse().unwrap(),
            handlers: AtomicUsize::new(0),
            streams: Default::default(),
        }
    }

    #[test]
    fn only_this_servers_address_is_a_host() {
        let w = web("127.0.0.1:8123");
        assert!(w.host_ok("127.0.0.1:8123"));
        assert!(w.host_ok("localhost:8123"));
        assert!(!w.host_ok("127.0.0.1:8124"));
        assert!(!w.host_ok("evil.example:8123"), "a name DNS could rebind");
        assert!(!w.host_ok("127.0.0.2:8123"));
        assert!(!w.host_ok(""));
        let any = web("0.0.0.0:80");
        assert!(any.host_ok("10.1.2.3:80"));
        assert!(!any.host_ok("localhost:80"), "not bound to loopback only");
        assert!(!any.host_ok("host.example:80"));
        let v6 = web("[::1]:9000");
        assert!(v6.host_ok("[::1]:9000") && v6.host_ok("localhost:9000"));
    }

    #[test]
    fn origins_must_be_this_server() {
        let w = web("127.0.0.1:8123");
        assert!(w.origin_ok("http://127.0.0.1:8123", "127.0.0.1:8123"));
        assert!(!w.origin_ok("http://evil.example", "127.0.0.1:8123"));
        assert!(!w.origin_ok("null", "127.0.0.1:8123"));
        assert!(!w.origin_ok("https://127.0.0.1:8123", "127.0.0.1:8123"));
    }

    #[test]
    fn edits_are_posted_to_a_runs_edit() {
        assert_eq!(edit_target("/api/runs/12/edit"), Some(12));
        assert_eq!(edit_target("/api/runs/x/edit"), None);
        assert_eq!(edit_target("/api/runs/12"), None);
        assert_eq!(status_of(libc::EACCES), 403);
        assert_eq!(status_of(libc::ENOENT), 404);
    }

    #[test]
    fn the_page_is_built_in() {
        assert!(INDEX_HTML.contains("app.js") && INDEX_HTML.contains("app.css"));
        assert!(
            !INDEX_HTML.contains("http://") && !INDEX_HTML.contains("https://"),
            "no CDN"
        );
        assert!(!APP_JS.contains("https://"), "no CDN");
    }
}
