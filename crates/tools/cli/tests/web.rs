//! Issue 38, the web view served by the daemon (`streamlined --http`), seen through a real
//! browser (headless chromium through chromium-driver) and real clients (curl, Prometheus,
//! promtool): the page shows a run's every filter and a rate that rises when traffic
//! rises, edits from the page are the daemon's checked edits (found in `ps` and PipesFS
//! after; refused for uid 65534 with the reason shown beside the node), each user sees
//! only their own runs, cross-origin and foreign-host requests are refused, and
//! Prometheus scrapes `/metrics` and answers PromQL with the run's rate. Each browser test
//! saves a screenshot under target/web-screenshots/.

mod common;

use common::browser::Browser;
use common::daemon::Daemon;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn web_daemon(tag: &str, policy: Option<&str>) -> Daemon {
    Daemon::start_with(tag, policy, &["--http", "127.0.0.1:0"])
}

/// `streamline web` as root or as uid 65534: the URL with its one-time token.
fn url(d: &Daemon, nobody: bool) -> String {
    let mut c = if nobody { d.cli_as_nobody() } else { d.cli() };
    let out = c.arg("web").output().unwrap();
    assert!(
        out.status.success(),
        "streamline web: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let u = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        u.starts_with("http://127.0.0.1:") && u.contains("/?token="),
        "{u}"
    );
    u
}

/// `http://127.0.0.1:PORT` of a URL.
fn base(url: &str) -> String {
    url.split("/?").next().unwrap().to_string()
}

fn detach(d: &Daemon, nobody: bool, pipeline: &str) -> u64 {
    let mut c = if nobody { d.cli_as_nobody() } else { d.cli() };
    let out = c
        .args(["run", "--detach", "-q", "--no-share", "--plan", "none"])
        .arg(pipeline)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{pipeline}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// curl with these arguments: (HTTP status, body).
fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl (Debian package curl; scripts/setup installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The session cookie a token URL gives (curl follows nothing; the 303 sets it).
fn session_cookie(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", url])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    head.lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no session cookie from {url}: {head}"))
        .to_string()
}

/// A directory named `name` anywhere under `dir`.
fn find_dir(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            if e.file_name() == name {
                return Some(p);
            }
            if let Some(f) = find_dir(&p, name) {
                return Some(f);
            }
        }
    }
    None
}

fn stop(d: &Daemon, id: u64) {
    let _ = d.cli().args(["stop", &id.to_string()]).output();
}

#[test]
fn the_page_shows_every_filter_a_rising_rate_and_inserts_through_the_daemon() {
    let d = web_daemon("web-page", None);
    let id = detach(
        &d,
        false,
        "gen count=1G size=64 rate=200 | count name=a | null",
    );
    let u = url(&d, false);
    let mut b = Browser::start();
    b.get(&format!("{u}#run={id}"));
    // Every filter of the graph, as nodes.
    b.wait("g.node[data-node='null']", "null", 15.0);
    let mut nodes = b.attrs("g.node", "data-node");
    nodes.sort();
    assert_eq!(nodes, ["count:a", "gen", "null"]);
    assert_eq!(b.texts("text.space-name"), ["space 0 (local)"]);
    // Its rate, from the live counters: about 200 blocks/s at count:a.
    b.cmd(
        serde_json::json!({"op": "wait", "css": "g.node[data-node='count:a'] .rate",
        "attr": "data-rate", "above": 100, "timeout": 15}),
    );
    b.shot("web-page-rate-200");
    // More traffic, asked from the page: `set gen rate=2000`, and the rate rises.
    b.click("g.node[data-node='gen']");
    b.wait("#panel-title", "gen", 5.0);
    b.select("#edit-kind", "set");
    b.type_in("#edit-arg", "rate=2000");
    b.click("#edit-apply");
    let applied = b.wait("#edit-result.applied", "applied", 15.0);
    assert!(applied.contains("set gen"), "{applied}");
    b.cmd(
        serde_json::json!({"op": "wait", "css": "g.node[data-node='count:a'] .rate",
        "attr": "data-rate", "above": 1000, "timeout": 15}),
    );
    b.shot("web-page-rate-2000");
    // A node's plots and options.
    b.click("g.node[data-node='gen']");
    let opts = b.texts("#panel-options td");
    assert!(
        opts.iter().any(|t| t == "rate") && opts.iter().any(|t| t == "2000"),
        "{opts:?}"
    );
    assert_eq!(b.texts("#plots svg.plot polyline").len(), 3);
    // Insert a filter from the page: the daemon's edit, seen in ps and PipesFS.
    b.click("g.node[data-node='count:a']");
    b.wait("#panel-title", "count:a", 5.0);
    b.select("#edit-kind", "insert-after");
    b.type_in("#edit-arg", "sample every=2");
    b.click("#edit-apply");
    let applied = b.wait("#edit-result.applied", "insert", 15.0);
    assert!(applied.contains("sample every=2"), "{applied}");
    b.wait("g.node[data-node='sample']", "sample", 10.0);
    b.shot("web-page-inserted");
    let ps = d.ps();
    assert!(
        ps.contains("count name=a | sample every=2 | null"),
        "the insert is not in ps: {ps}"
    );
    let run = d.mount().join(id.to_string());
    common::wait_for("sample in PipesFS", Duration::from_secs(10), || {
        find_dir(&run, "sample").is_some()
    });
    assert!(d.log().contains("audit: edited"), "{}", d.log());
    stop(&d, id);
}

/// This host's name, as the page's host box names it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn edges_show_their_rates_and_across_spaces_their_rings_fill_and_readers_grouped_by_cpu_and_host() {
    let d = web_daemon("web-edges", None);
    // gen makes 64 KiB blocks far faster than deflate (in process space 1) packs them:
    // the channel between them fills, and the producer waits for room.
    let id = detach(&d, false, "gen size=64K count=1G | deflate space=p1 | null");
    let u = url(&d, false);
    let mut b = Browser::start();
    b.get(&format!("{u}#run={id}"));
    // Every filter, the process space's included, with its arcs (the worker's graph has
    // no process space's nodes; the counted arcs bring them).
    b.wait("g.node[data-node='null']", "null", 15.0);
    b.wait(
        "path.edge.call[data-from='deflate'][data-to='null']",
        "",
        15.0,
    );
    let mut nodes = b.attrs("g.node", "data-node");
    nodes.sort();
    assert_eq!(nodes, ["deflate", "gen", "null"]);
    let mut spaces = b.texts("text.space-name");
    spaces.sort();
    assert_eq!(spaces, ["process space 1", "space 0 (local)"]);
    assert_eq!(b.texts("#host-name"), [format!("host {}", hostname())]);
    // Grouped by the CPU each space is pinned to; the process space is not pinned, and its
    // band says where it last ran.
    let cpus = b.texts("text.cpu-name");
    assert!(
        cpus.iter()
            .all(|c| c == "not pinned" || (c.starts_with("cpu ") && c.ends_with(" (pinned)"))),
        "{cpus:?}"
    );
    assert!(cpus.iter().any(|c| c == "not pinned"), "{cpus:?}");
    b.wait("text.space-cpu[data-space='p1']", "last ran on cpu ", 10.0);
    // The arc across spaces is a ring: it fills (back-pressure) and has its one reader.
    assert_eq!(b.attrs("path.edge.ring", "data-to"), ["deflate"]);
    b.cmd(serde_json::json!({"op": "wait", "css": "text.edge-ring[data-from='gen'][data-to='deflate']",
        "attr": "data-fill", "above": 0.5, "timeout": 20}));
    let ring = b.wait(
        "text.edge-ring[data-from='gen'][data-to='deflate']",
        "reader",
        5.0,
    );
    assert!(
        ring.starts_with("ring ") && ring.ends_with("% \u{b7} 1 reader"),
        "{ring}"
    );
    let rate = b.wait(
        "text.edge-rate[data-from='gen'][data-to='deflate']",
        "/s",
        5.0,
    );
    assert!(!rate.contains("call"), "{rate}");
    // The arc within a space is a call, with its rate.
    let call = b.wait(
        "text.edge-rate[data-from='deflate'][data-to='null']",
        "call",
        5.0,
    );
    assert!(call.ends_with("/s \u{b7} call"), "{call}");
    // The producer's panel lists its arc with the ring's waits for room.
    b.click("g.node[data-node='gen']");
    b.wait("#panel-title", "gen", 5.0);
    let rows = b.texts("#panel-counters td");
    let arc = rows
        .iter()
        .position(|t| t == "\u{2192} deflate")
        .expect("gen's arc in its panel");
    assert!(rows[arc + 1].contains("waits for room"), "{rows:?}");
    // And plots how full that ring was over the last minutes.
    b.wait("#plots svg.ring-plot", "ring to deflate, % full", 5.0);
    b.shot("web-edges-rings");
    stop(&d, id);
}

#[test]
fn a_run_of_100_filters_is_drawn_whole_and_updates() {
    let d = web_daemon("web-100", None);
    // gen, 98 counts (half of them in thread space 1), null: 100 nodes, 99 arcs.
    let mut p = String::from("gen count=1G size=64 rate=500");
    for k in 0..98 {
        p += if k < 49 {
            " | count"
        } else {
            " | count space=1"
        };
    }
    p += " | null";
    let id = detach(&d, false, &p);
    let u = url(&d, false);
    let mut b = Browser::start();
    b.get(&format!("{u}#run={id}"));
    b.wait("g.node[data-node='null']", "", 20.0);
    assert_eq!(b.attrs("g.node", "data-node").len(), 100);
    b.wait("path.edge.ring", "", 15.0);
    assert_eq!(b.attrs("path.edge", "data-from").len(), 99);
    assert_eq!(b.attrs("path.edge.ring", "data-from").len(), 1);
    // Thread space 1 runs pinned to a CPU of its own (space k on CPU k mod CPUs).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = format!("cpu {} (pinned)", 1 % cpus);
    b.wait("text.cpu-name", &pinned, 10.0);
    // The last node's rate, updated from the live counters.
    b.cmd(
        serde_json::json!({"op": "wait", "css": "g.node[data-node='null'] .rate",
        "attr": "data-rate", "above": 200, "timeout": 20}),
    );
    // What an update of the page cost, printed (a figure, not a check: no timing in tests).
    let ms =
        b.cmd(serde_json::json!({"op": "js", "script": "return document.body.dataset.drawMs"}));
    eprintln!(
        "web view: one update of a 100-node run took {} ms in headless chromium",
        ms["value"]
    );
    b.shot("web-100-nodes");
    stop(&d, id);
}

const TEMPLATE: &str = r#"rx dev=lo | bpf "udp port 53""#;

#[test]
fn as_uid_65534_a_forbidden_edit_is_refused_on_the_page_and_only_its_runs_are_seen() {
    let policy = format!("[[grant]]\nusers = [\"65534\"]\ntemplate = '{TEMPLATE}'\n");
    let d = web_daemon("web-nobody", Some(&policy));
    let roots = detach(
        &d,
        false,
        "gen count=1G size=64 rate=100 | count name=root_only | null",
    );
    let mine = detach(&d, true, &format!("{TEMPLATE} | count name=mine"));
    let u = url(&d, true);
    let mut b = Browser::start();
    b.get(&format!("{u}#run={mine}"));
    b.wait("g.node[data-node='bpf']", "bpf", 15.0);
    // Only its own run, in the list and anywhere on the page.
    let runs = b.attrs("nav .run", "data-run");
    assert_eq!(runs, [mine.to_string()], "uid 65534 sees runs {runs:?}");
    let body = b.cmd(serde_json::json!({"op": "js", "script": "return document.body.innerText"}));
    assert!(
        !body["value"].as_str().unwrap().contains("root_only"),
        "{body}"
    );
    // Removing the template's bpf is refused, with its reason beside the node.
    b.click("g.node[data-node='bpf']");
    b.wait("#panel-title", "bpf", 5.0);
    b.select("#edit-kind", "remove");
    b.click("#edit-apply");
    let why = b.wait("#edit-result.refused", "EACCES", 15.0);
    assert!(
        why.contains("follows none") && why.contains("udp port 53"),
        "{why}"
    );
    let beside = b.wait("g.node.refused[data-node='bpf'] .refusal", "refused", 5.0);
    assert!(beside.contains("EACCES"), "{beside}");
    b.shot("web-nobody-refused");
    // Nothing changed: ps still has the bpf.
    let ps =
        String::from_utf8_lossy(&d.cli_as_nobody().arg("ps").output().unwrap().stdout).into_owned();
    assert!(ps.contains("bpf") && !ps.contains("root_only"), "{ps}");
    // Root's run, asked for by number: not shown.
    b.get(&format!("{}/#run={roots}", base(&u)));
    b.wait("#run .hint", "not one you can see", 10.0);
    b.shot("web-nobody-not-yours");
    // Its /metrics: its own run's series, none of root's.
    let cookie = session_cookie(&url(&d, true));
    let (code, m) = curl(&[
        "-H",
        &format!("Cookie: {cookie}"),
        &format!("{}/metrics", base(&u)),
    ]);
    assert_eq!(code, 200, "{m}");
    assert!(
        m.contains(&format!("run=\"{mine}\"")) && !m.contains(&format!("run=\"{roots}\"")),
        "{m}"
    );
    stop(&d, roots);
    stop(&d, mine);
}

/// Datagrams to 127.0.0.1:`port` every 5 ms until dropped.
struct Traffic(
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    Option<std::thread::JoinHandle<()>>,
);

impl Traffic {
    fn start(port: u16) -> Traffic {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = sock.send_to(b"sample-12345", ("127.0.0.1", port));
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Traffic(stop, Some(t))
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.1.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_nodes_sample_shows_what_passes_it_as_lines_and_as_a_pcap_to_its_user_only() {
    let policy = format!("[[grant]]\nusers = [\"65534\"]\ntemplate = '{TEMPLATE}'\n");
    let d = web_daemon("web-sample", Some(&policy));
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _traffic = Traffic::start(port);
    let id = detach(
        &d,
        false,
        &format!("rx dev=lo | bpf \"udp dst port {port}\" | count name=c | null"),
    );
    // The page: the node's panel, its sample as tcpdump-style lines.
    let u = url(&d, false);
    let mut b = Browser::start();
    b.get(&format!("{u}#run={id}"));
    b.wait("g.node[data-node='count:c']", "count:c", 15.0);
    b.click("g.node[data-node='count:c']");
    b.wait("#panel-title", "count:c", 5.0);
    b.click("#sample-take");
    let want = "IP 127.0.0.1.";
    let lines = b.wait(
        "#sample-lines",
        &format!(" > 127.0.0.1.{port}: UDP, length 12"),
        20.0,
    );
    let shown: Vec<&str> = lines.lines().collect();
    assert!(
        shown.len() >= 2
            && shown
                .iter()
                .all(|l| l.contains(want) && l.ends_with(&format!(".{port}: UDP, length 12"))),
        "{lines}"
    );
    b.shot("web-sample-lines");
    // The download: a pcap of the node's next packets that tcpdump reads.
    let cookie = session_cookie(&url(&d, false));
    let dir = std::env::temp_dir().join(format!("sl-web-sample-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.pcap");
    let path = format!(
        "{}/api/runs/{id}/nodes/count%3Ac/sample.pcap?count=5&secs=10",
        base(&u)
    );
    let got = Command::new("curl")
        .args([
            "-s",
            "-o",
            file.to_str().unwrap(),
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
        ])
        .args(["-H", &format!("Cookie: {cookie}"), &path])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "200",
        "{}",
        std::fs::read_to_string(&file).unwrap_or_default()
    );
    let out = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(&file)
        .output()
        .expect("tcpdump");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tcpdump -r: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(
        text.lines()
            .all(|l| l.contains(&format!("127.0.0.1.{port}: UDP, length 12"))),
        "{text}"
    );
    // Another user learns nothing of the run; a bad parameter is named.
    let theirs = session_cookie(&url(&d, true));
    let (code, msg) = curl(&["-H", &format!("Cookie: {theirs}"), &path]);
    assert_eq!(code, 404, "{msg}");
    assert!(msg.contains("not one you can see"), "{msg}");
    let (code, msg) = curl(&[
        "-H",
        &format!("Cookie: {cookie}"),
        &format!("{}/api/runs/{id}/nodes/null/sample?count=0", base(&u)),
    ]);
    assert_eq!(code, 400, "{msg}");
    assert!(msg.contains("count=0"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
    stop(&d, id);
}

#[test]
fn sessions_need_a_token_and_foreign_origins_and_hosts_are_refused() {
    let d = web_daemon("web-guard", None);
    let id = detach(
        &d,
        false,
        "gen count=1G size=64 rate=100 | count name=a | null",
    );
    let u = url(&d, false);
    let base = base(&u);
    let port = base.rsplit(':').next().unwrap().to_string();
    // No session: the page, the API and the metrics say so.
    for p in ["/api/runs", "/metrics", "/api/events"] {
        assert_eq!(curl(&[&format!("{base}{p}")]).0, 401, "{p}");
    }
    // The token opens one session, once.
    let cookie = session_cookie(&u);
    let (code, _) = curl(&[&u]);
    assert_eq!(code, 403, "a token is good once");
    let with = ["-H", &cookie_header(&cookie)].map(|s| s.to_string());
    let (code, runs) = curl(&[&with[0], &with[1], &format!("{base}/api/runs")]);
    assert_eq!(code, 200);
    assert!(runs.contains(&format!("\"run\":{id}")), "{runs}");
    // A name instead of the address (DNS rebinding), or another origin: refused.
    let (code, _) = curl(&[
        &with[0],
        &with[1],
        "-H",
        &format!("Host: evil.example:{port}"),
        &format!("{base}/api/runs"),
    ]);
    assert_eq!(code, 421);
    let edit = format!("{base}/api/runs/{id}/edit");
    let body = r#"{"kind":"insert","at":"after","node":"count:a","filter":"sample every=2"}"#;
    let json = "Content-Type: application/json";
    let (code, _) = curl(&[
        &with[0],
        &with[1],
        "-H",
        "Origin: http://evil.example",
        "-H",
        json,
        "--data",
        body,
        &edit,
    ]);
    assert_eq!(code, 403, "cross-origin");
    let (code, _) = curl(&[&with[0], &with[1], "-H", json, "--data", body, &edit]);
    assert_eq!(code, 403, "no Origin: not the page");
    let origin = format!("Origin: {base}");
    let (code, _) = curl(&[&with[0], &with[1], "-H", &origin, "--data", body, &edit]);
    assert_eq!(code, 415, "a form's body, not JSON");
    // The same edit, same-origin: applied, as the CLI's would be.
    let (code, answer) = curl(&[
        &with[0], &with[1], "-H", &origin, "-H", json, "--data", body, &edit,
    ]);
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains("\"node\":\"sample\""), "{answer}");
    assert!(d.ps().contains("sample every=2"));
    // The scrape token opens /metrics only.
    let scrape = std::fs::read_to_string(d.dir.join("metrics.token")).unwrap();
    let auth = format!("Authorization: Bearer {scrape}");
    assert_eq!(curl(&["-H", &auth, &format!("{base}/metrics")]).0, 200);
    assert_eq!(curl(&["-H", &auth, &format!("{base}/api/runs")]).0, 401);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(d.dir.join("metrics.token")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
    stop(&d, id);
}

fn cookie_header(cookie: &str) -> String {
    format!("Cookie: {cookie}")
}

/// A free TCP port on loopback (bound and let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Prometheus, stopped when dropped.
struct Prometheus(std::process::Child, PathBuf);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

#[test]
fn prometheus_scrapes_the_metrics_and_promql_gives_the_runs_rate() {
    for p in ["prometheus", "promtool"] {
        assert!(
            Command::new(p).arg("--version").output().is_ok(),
            "this test needs {p} (Debian package prometheus; scripts/setup installs it)"
        );
    }
    let d = web_daemon("web-prom", None);
    // count in a thread space of its own: an arc across spaces, whose channel has series.
    let id = detach(
        &d,
        false,
        "gen count=1G size=64 rate=500 | count name=c space=1 | null",
    );
    let u = url(&d, false);
    let base = base(&u);
    let token = d.dir.join("metrics.token");
    let auth = format!(
        "Authorization: Bearer {}",
        std::fs::read_to_string(&token).unwrap()
    );
    common::wait_for("the run's counters", Duration::from_secs(10), || {
        curl(&["-H", &auth, &format!("{base}/metrics")])
            .1
            .contains("streamline_channel_fill_ratio{")
    });
    // promtool finds nothing to complain about.
    let (_, text) = curl(&["-H", &auth, &format!("{base}/metrics")]);
    assert!(
        text.contains(&format!("streamline_arc_blocks_total{{run=\"{id}\",user=\"root\",from=\"gen\",to=\"count:c\"}}"))
            && text.contains(&format!("streamline_channel_readers{{run=\"{id}\",user=\"root\",from=\"gen\",to=\"count:c\"}} 1\n")),
        "{text}"
    );
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // A real Prometheus scrapes it every second, with the scrape token.
    let dir = std::env::temp_dir().join(format!("sl-prom-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let target = base.trim_start_matches("http://");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: streamline\n    authorization:\n      type: Bearer\n      credentials_file: {}\n    static_configs:\n      - targets: ['{target}']\n",
            token.display()
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("log")).unwrap())
        .spawn()
        .unwrap();
    let prom = Prometheus(child, dir.clone());
    let query = format!(
        "rate(streamline_node_blocks_total{{run=\"{id}\",node=\"count:c\",direction=\"in\"}}[5s])"
    );
    let api = format!("http://127.0.0.1:{port}/api/v1/query");
    let start = Instant::now();
    let rate = loop {
        let (code, body) = curl(&["-G", &api, "--data-urlencode", &format!("query={query}")]);
        if code == 200 {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(x) = v["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|s| s.parse::<f64>().ok())
            {
                // The first windows hold the run's start (and fewer scrapes): wait for one
                // that holds 5 s of steady counting.
                if (350.0..=650.0).contains(&x) {
                    break x;
                }
            }
        }
        let last = body;
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "Prometheus gave no rate near the run's 500/s for {query}: {last}\n{}",
            std::fs::read_to_string(dir.join("log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // The run offers 500 blocks a second; Prometheus's rate over 5 s of 1 s scrapes of
    // counters the worker updates every 200 ms.
    assert!((350.0..=650.0).contains(&rate), "rate {rate} for {query}");
    drop(prom);
    stop(&d, id);
}
