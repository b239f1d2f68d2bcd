//! `httplog` against tshark, request for request, on captures of real HTTP traffic the test
//! makes: Python's http.server (`tests/httplog/server.py`) in a network namespace, curl
//! (keep-alive, every method, hosts, user agents, referers, HTTP/1.0, bodies of each
//! framing, a request never answered) and a pipelining client (`tests/httplog/pipeline.py`)
//! from this one, recorded by tcpdump. Our JSON lines must give, connection by connection
//! and in order, tshark's `http.request.method`, `http.host`, `http.request.uri` and
//! `http.user_agent` of every request and `http.response.code` of every final response;
//! the Combined Log Format lines say the same; `flush=` writes the lines of each stretch of
//! capture time together. Also on `examples/sample.pcap`.
//!
//! Needs root (network namespaces), tcpdump, tshark, curl, python3 and ethtool
//! (scripts/setup installs them); without one the test fails naming it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");
const PORT: u16 = 8080;

fn need(tool: &str) {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "{tool} is required (scripts/setup installs it)");
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sl-httplog-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn script(name: &str) -> String {
    format!("{}/tests/httplog/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// One request as both sides see it: method, host, URI, user agent.
type Req = (String, String, String, String);

/// Per connection (client address and port), its requests in order and the status codes
/// of its final responses in order.
type Conns = BTreeMap<(String, u16), (Vec<Req>, Vec<u16>)>;

/// The web server in a namespace of its own and the clients here, recorded by tcpdump on
/// our end of the link. Returns the capture.
fn record_traffic(d: &Path) -> PathBuf {
    common::daemon::require_root("network namespaces for the web server");
    for t in ["tcpdump", "tshark", "curl", "python3", "ethtool"] {
        need(t);
    }
    let v = common::quiet_pair("hlog");
    // Frames as on a wire: checksums filled in, no segment larger than the MTU.
    kernel::netns::run(&[
        "ethtool", "-K", &v.here, "tx", "off", "tso", "off", "gso", "off",
    ])
    .unwrap();
    v.exec(&[
        "ethtool", "-K", &v.there, "tx", "off", "tso", "off", "gso", "off",
    ])
    .unwrap();
    let mut server = v
        .command("python3")
        .args([&script("server.py"), &v.peer_ip, &PORT.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let cap = d.join("web.pcap");
    let mut dump = Command::new("tcpdump");
    // Each packet to the file as it comes (-U), read from the kernel as it comes
    // (--immediate-mode): the wait before the stop below is for what is written.
    dump.args(["-i", &v.here, "-U", "--immediate-mode", "-n", "-w"])
        .arg(&cap)
        .arg("tcp");
    let (mut tcpdump, rest) = common::tcpdump_listening(dump);
    let url = |p: &str| format!("http://{}:{PORT}{p}", v.peer_ip);
    common::wait_for(
        "the web server to answer",
        std::time::Duration::from_secs(20),
        || {
            Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-m", "2", &url("/warmup")])
                .status()
                .is_ok_and(|s| s.success())
        },
    );
    let curl = |args: &[&str]| {
        let st = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-m", "10"])
            .args(args)
            .status()
            .unwrap();
        // Every exchange but the dropped one must have happened, or the capture lacks it.
        let dropped = args.iter().any(|a| a.ends_with("/drop"));
        assert!(dropped || st.success(), "curl {args:?}: {st}");
        st.code()
    };
    // Keep-alive: several URLs on one connection, with a host, agent and referer of their own.
    curl(&[
        "-A",
        "Mozilla/5.0 (X11; Linux) test/1",
        "-e",
        "http://ref.example/page?a=1",
        "-H",
        "Host: site-a.example",
        &url("/len/10"),
        &url("/chunked/3500"),
        &url("/len/70000"),
        &url("/status/404"),
        &url("/status/204"),
    ]);
    curl(&[
        "-A",
        "agent with \"quotes\"",
        "-X",
        "POST",
        "--data",
        "a=1&b=2",
        "-H",
        "Host: site-b.example:8080",
        &url("/form?x=%20y"),
    ]);
    curl(&[
        "-A",
        "put-client",
        "-X",
        "PUT",
        "--data-binary",
        "@/etc/hostname",
        &url("/put/here"),
    ]);
    curl(&["-A", "del", "-X", "DELETE", &url("/item/7")]);
    curl(&["-A", "opts", "-X", "OPTIONS", &url("/")]);
    curl(&[
        "-A",
        "patcher",
        "-X",
        "PATCH",
        "--data",
        "p",
        &url("/status/500"),
    ]);
    curl(&["-A", "header-only", "-I", &url("/len/5000")]);
    curl(&["-0", "-A", "old/1.0", &url("/close/2500")]);
    curl(&[
        "-A",
        "big",
        "-H",
        "Host: big.example",
        &url("/status/304"),
        &url("/chunked/0"),
        &url("/len/0"),
    ]);
    // A request never answered: the server closes the connection.
    curl(&["-A", "dropped", &url("/drop")]);
    // Pipelining: five requests in one write on one connection. No HEAD among them:
    // tshark, not knowing a HEAD's answer has no body, takes the next response for its
    // body (HEAD is covered by `curl -I` above, alone on its connection).
    let reqs = [
        "GET|/p/1|pipe.example|pipe/1",
        "GET|/len/100|pipe.example|pipe/2",
        "POST|/p/3?q=1|other.example|pipe/3",
        "GET|/chunked/1234|pipe.example|pipe/4",
        "GET|/len/3|pipe.example|pipe/5",
    ];
    let st = Command::new("python3")
        .arg(script("pipeline.py"))
        .args([&v.peer_ip, &PORT.to_string()])
        .args(reqs)
        .status()
        .unwrap();
    assert!(st.success(), "the pipelining client failed");
    // Until the capture file has not grown for half a second (at most 10 s): a loaded
    // machine's tcpdump may still be writing the last exchange.
    let size = || std::fs::metadata(&cap).map_or(0, |m| m.len());
    let (mut last, mut since) = (size(), std::time::Instant::now());
    let t0 = std::time::Instant::now();
    while since.elapsed() < std::time::Duration::from_millis(500)
        && t0.elapsed() < std::time::Duration::from_secs(10)
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = size();
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        }
    }
    let _ = Command::new("kill")
        .args(["-INT", &tcpdump.id().to_string()])
        .status();
    let _ = tcpdump.wait();
    let _ = rest.join();
    let _ = server.kill();
    let _ = server.wait();
    drop(v);
    cap
}

fn run(args: &[&str]) -> (String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "streamline {args:?}: {err}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

/// Our JSON lines of `cap`, by connection.
fn ours(cap: &Path, d: &Path) -> (Conns, Vec<serde_json::Value>, String) {
    let out = d.join("ours.json");
    let (_, err) = run(&[
        "run",
        &format!(
            "pcapin file={} | httplog format=json | outfile file={}",
            cap.display(),
            out.display()
        ),
    ]);
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let mut conns = Conns::new();
    for v in &lines {
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        let e = conns
            .entry((s("client"), v["client_port"].as_u64().unwrap() as u16))
            .or_default();
        e.0.push((s("method"), s("host"), s("uri"), s("user_agent")));
        if let Some(code) = v["status"].as_u64() {
            assert_eq!(
                e.1.len() + 1,
                e.0.len(),
                "an answered request after an unanswered one: {v}"
            );
            e.1.push(code as u16);
        }
    }
    (conns, lines, err)
}

/// tshark's requests and final response codes of `cap`, by connection. `decode` adds
/// `-d` rules (HTTP on a port tshark does not know).
fn tshark(cap: &Path, decode: &[&str]) -> Conns {
    const SEP: &str = "\u{1f}";
    let fields = [
        "ip.src",
        "ipv6.src",
        "tcp.srcport",
        "ip.dst",
        "ipv6.dst",
        "tcp.dstport",
        "http.request.method",
        "http.host",
        "http.request.uri",
        "http.user_agent",
        "http.response.code",
    ];
    let mut c = Command::new("tshark");
    c.arg("-r").arg(cap).args([
        "-n",
        "-Y",
        "http",
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        &format!("aggregator={SEP}"),
        "-E",
        "separator=\t",
    ]);
    for d in decode {
        c.args(["-d", d]);
    }
    for f in fields {
        c.args(["-e", f]);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut conns = Conns::new();
    for row in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = row.split('\t').collect();
        let list = |i: usize| -> Vec<String> {
            f.get(i)
                .filter(|s| !s.is_empty())
                .map_or(Vec::new(), |s| s.split(SEP).map(str::to_string).collect())
        };
        // IPv4 or IPv6: one of the two address columns is empty.
        let (src, dst) = (format!("{}{}", f[0], f[1]), format!("{}{}", f[3], f[4]));
        let (methods, hosts, uris, uas) = (list(6), list(7), list(8), list(9));
        if !methods.is_empty() {
            assert!(
                hosts.len() == methods.len()
                    && uris.len() == methods.len()
                    && uas.len() == methods.len(),
                "every request of the test has a host and an agent: {row}"
            );
            let e = conns.entry((src, f[2].parse().unwrap())).or_default();
            for i in 0..methods.len() {
                e.0.push((
                    methods[i].clone(),
                    hosts[i].clone(),
                    uris[i].clone(),
                    uas[i].clone(),
                ));
            }
        }
        for code in list(10) {
            let code: u16 = code.parse().unwrap();
            if (100..200).contains(&code) && code != 101 {
                continue;
            }
            conns
                .entry((dst.clone(), f[5].parse().unwrap()))
                .or_default()
                .1
                .push(code);
        }
    }
    conns
}

#[test]
fn requests_and_responses_equal_tsharks_on_real_traffic() {
    let d = dir("real");
    let cap = record_traffic(&d);
    let (mine, lines, err) = ours(&cap, &d);
    let want = tshark(&cap, &[&format!("tcp.port=={PORT},http")]);
    assert_eq!(mine, want, "ours (left) and tshark's (right) differ\n{err}");
    // The traffic had what the test is about.
    let total: usize = mine.values().map(|c| c.0.len()).sum();
    assert!(total >= 20, "{total} requests");
    assert!(
        mine.values()
            .any(|c| c.0.len() == 5 && c.0[0].3 == "pipe/1"),
        "the pipelined connection"
    );
    let dropped: Vec<_> = lines.iter().filter(|v| v["uri"] == "/drop").collect();
    assert_eq!(dropped.len(), 1);
    assert!(
        dropped[0]["status"].is_null() && dropped[0]["size"].is_null(),
        "{}",
        dropped[0]
    );
    for (uri, size) in [
        ("/len/70000", 70000),
        ("/chunked/3500", 3500),
        ("/close/2500", 2500),
        ("/chunked/1234", 1234),
        ("/len/100", 100),
        ("/len/5000", 0),
    ] {
        let v = lines
            .iter()
            .find(|v| v["uri"] == uri)
            .unwrap_or_else(|| panic!("no line for {uri}"));
        assert_eq!(v["size"].as_u64(), Some(size), "{v}");
        assert_eq!(v["complete"], true, "{v}");
    }
    assert!(
        err.contains(&format!(
            "httplog: {total} requests ({} answered, 0 cut off, 1 unanswered)",
            total - 1
        )),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A Combined Log Format line's fields: client, request line, status, size, referer,
/// agent, host.
fn clf_fields(l: &str) -> Vec<String> {
    let mut out = vec![l.split(' ').next().unwrap().to_string()];
    // The quoted fields (with \" inside them) and the bare ones between.
    let mut rest = &l[l.find('"').unwrap()..];
    while let Some(start) = rest.find('"') {
        let mut end = start + 1;
        let b = rest.as_bytes();
        while b[end] != b'"' {
            end += if b[end] == b'\\' { 2 } else { 1 };
        }
        out.push(
            rest[start + 1..end]
                .replace("\\\"", "\"")
                .replace("\\\\", "\\"),
        );
        let after = &rest[end + 1..];
        let next = after.find('"').unwrap_or(after.len());
        out.extend(after[..next].split_whitespace().map(str::to_string));
        rest = &after[next..];
    }
    out
}

#[test]
fn combined_log_lines_say_what_the_json_lines_say_and_flush_groups_them_by_capture_time() {
    let d = dir("clf");
    let cap = record_traffic(&d);
    let (_, json, _) = ours(&cap, &d);
    let out = d.join("access.log");
    run(&[
        "run",
        &format!(
            "pcapin file={} | httplog | outfile file={}",
            cap.display(),
            out.display()
        ),
    ]);
    let clf = std::fs::read_to_string(&out).unwrap();
    assert_eq!(clf.lines().count(), json.len());
    for (l, v) in clf.lines().zip(&json) {
        let f = clf_fields(l);
        let opt = |k: &str| v[k].as_str().unwrap_or("-").to_string();
        let num = |k: &str| {
            v[k].as_u64()
                .filter(|&n| n > 0 || k == "status")
                .map_or("-".to_string(), |n| n.to_string())
        };
        let request = format!("{} {} {}", opt("method"), opt("uri"), opt("version"));
        assert_eq!(
            f,
            vec![
                opt("client"),
                request,
                num("status"),
                num("size"),
                opt("referer"),
                opt("user_agent"),
                opt("host"),
                v["duration_us"]
                    .as_u64()
                    .map_or("-".into(), |n| n.to_string())
            ],
            "{l}\n{v}"
        );
    }
    // Stretched so that each connection lies in a 10 s stretch of capture time of its own:
    // flush=10s writes each connection's lines together, one batch each.
    let stretched = d.join("stretched.pcap");
    stretch(&cap, &stretched, 10);
    let conns: std::collections::BTreeSet<_> = json
        .iter()
        .map(|v| (v["client"].to_string(), v["client_port"].to_string()))
        .collect();
    let conns = conns.len();
    let (_, err) = run(&[
        "run",
        &format!(
            "pcapin file={} | httplog flush=10s | outfile file={}",
            stretched.display(),
            d.join("flushed.log").display()
        ),
    ]);
    let (_, err_all) = run(&[
        "run",
        &format!(
            "pcapin file={} | httplog flush=1h | outfile file={}",
            stretched.display(),
            d.join("all.log").display()
        ),
    ]);
    assert!(
        err.contains(&format!("written in {conns} batches")),
        "{conns} connections\n{err}"
    );
    assert!(err_all.contains("written in 1 batches"), "{err_all}");
    let a = std::fs::read(d.join("flushed.log")).unwrap();
    assert_eq!(
        a,
        std::fs::read(d.join("all.log")).unwrap(),
        "the throttle changes when lines leave, not which"
    );
    assert_eq!(String::from_utf8_lossy(&a).lines().count(), json.len());
    let _ = std::fs::remove_dir_all(&d);
}

/// `cap` rewritten with each TCP connection moved to a stretch of `secs` seconds of its
/// own (the k-th to start at k * secs, gaps within it kept).
fn stretch(cap: &Path, out: &Path, secs: u64) {
    use pcap_file::pcap::{PcapReader, PcapWriter};
    let mut r = PcapReader::new(std::fs::File::open(cap).unwrap()).unwrap();
    let header = r.header();
    let mut packets = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        packets.push((p.timestamp, p.orig_len, p.data.to_vec()));
    }
    let mut starts: Vec<((Vec<u8>, Vec<u8>), std::time::Duration)> = Vec::new();
    let conn_of = |data: &[u8]| {
        let ip = &data[14..];
        let hl = ((ip[0] & 15) * 4) as usize;
        let a = [&ip[12..16], &ip[hl..hl + 2]].concat();
        let b = [&ip[16..20], &ip[hl + 2..hl + 4]].concat();
        if a < b {
            (a, b)
        } else {
            (b, a)
        }
    };
    let t0 = packets[0].0;
    let mut moved = Vec::new();
    for (at, orig_len, data) in packets {
        let k = conn_of(&data[..]);
        let i = match starts.iter().position(|s| s.0 == k) {
            Some(i) => i,
            None => {
                starts.push((k, at));
                starts.len() - 1
            }
        };
        let ts = t0 + std::time::Duration::from_secs(secs * i as u64) + (at - starts[i].1);
        moved.push(pcap_file::pcap::PcapPacket::new_owned(ts, orig_len, data));
    }
    moved.sort_by_key(|p| p.timestamp);
    let mut w = PcapWriter::with_header(std::fs::File::create(out).unwrap(), header).unwrap();
    for p in &moved {
        w.write_packet(p).unwrap();
    }
}

#[test]
fn the_sample_capture_equals_tshark() {
    need("tshark");
    let d = dir("sample");
    let cap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../examples/sample.pcap");
    let (mine, _, err) = ours(&cap, &d);
    let want = tshark(&cap, &[]);
    assert_eq!(mine, want, "ours (left) and tshark's (right) differ\n{err}");
    assert!(!mine.is_empty(), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_parameters_are_refused_naming_them() {
    for (p, key) in [
        ("httplog format=xml", "format"),
        ("httplog flush=soon", "flush"),
        ("httplog flush=5y", "flush"),
    ] {
        let out = Command::new(BIN)
            .args([
                "run",
                &format!("pcapin file=examples/sample.pcap | {p} | null"),
            ])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.."))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{p}: {err}");
        assert!(err.contains(key), "{p}: {err}");
    }
}
