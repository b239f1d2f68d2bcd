//! The worker (`streamline-worker __worker`) spoken to as the daemon speaks to it, over a
//! socket pair: it builds the graph it is handed in `start`, the one the daemon checked,
//! and never the text beside it; a malformed graph is refused, saying why.
//!
//! Runs the worker as root for a root client (the worker's identity checks are the trust
//! tests' business): needs root.

use daemon::proto::{self, ClientContext, FromWorker, Msg, RunOptions};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The graph the daemon makes of `text` for its checks (`open.rs`, `parse_request`).
fn checked(text: &str) -> lang::Graph {
    lang::parse(text, &lang::OrCommand(filters::Natives)).expect("the daemon's parse")
}

fn need_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test starts the worker for a root client and needs root (CAP_SETUID, CAP_SETGID: it runs as uid 0)"
    );
}

/// A worker started as the daemon starts one (`spawn::prepare`, its end of the socket
/// pair inherited), its stderr captured.
fn start_worker() -> (Child, UnixStream) {
    need_root();
    let (mine, theirs) = UnixStream::pair().expect("socketpair");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_streamline-worker"));
    cmd.args(["__worker", "--fd", &theirs.as_raw_fd().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    daemon::spawn::prepare(&mut cmd, None, vec![theirs.as_raw_fd()]);
    let child = cmd.spawn().expect("start streamline-worker");
    drop(theirs);
    (child, mine)
}

/// A root client's `start` of `graph` (with its text `pipeline`). `G`, `E`: the graph's
/// and edits' types (`daemon::ToWorker`'s, or JSON values to send what no type allows).
fn start<G, E>(pipeline: &str, graph: G) -> proto::ToWorker<G, E> {
    proto::ToWorker::Start {
        run: 1,
        pipeline: pipeline.into(),
        graph,
        options: RunOptions {
            quiet: true,
            ..RunOptions::default()
        },
        uid: 0,
        gid: 0,
        groups: vec![],
        modes: vec![],
        lent: vec![],
        context: ClientContext::default(),
    }
}

fn next(sock: &UnixStream) -> FromWorker {
    match proto::recv_within::<FromWorker>(sock, Duration::from_secs(60)) {
        Ok((Msg { body, .. }, _)) => body,
        Err(e) => panic!("the worker said nothing within 60 s: {e}"),
    }
}

/// The worker's verdict on a `start`, and its exit status when it refused.
fn refusal(mut child: Child, sock: &UnixStream) -> (String, i32, Option<i32>) {
    let verdict = next(sock);
    if !matches!(verdict, FromWorker::Failed { .. }) {
        // Built (or worse): it would wait for `go` for ever.
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("the worker's end");
    match verdict {
        FromWorker::Failed { message, errno } => (message, errno, out.status.code()),
        other => panic!(
            "the worker took a malformed start: {other:?}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
fn the_worker_builds_the_graph_it_is_given_not_the_text() {
    let (child, sock) = start_worker();
    // The text says 3 blocks; the graph the daemon checked says 7. Same length, so the
    // graph's spans lie in the text (what messages quote).
    let (text, graph) = ("gen count=3 | count", checked("gen count=7 | count"));
    proto::send(
        &sock,
        &Msg {
            id: 1,
            body: start::<_, lang::edit::Edit>(text, graph),
        },
        &[],
    )
    .expect("send start");
    match next(&sock) {
        FromWorker::Built { .. } => {}
        other => panic!("not built: {other:?}"),
    }
    proto::send(
        &sock,
        &Msg {
            id: 1,
            body: daemon::ToWorker::Go {},
        },
        &[],
    )
    .expect("send go");
    let mut last = None;
    let code = loop {
        match next(&sock) {
            FromWorker::Counters { nodes, .. } => last = Some(nodes),
            FromWorker::Finished { code } => break code,
            _ => {}
        }
    };
    let out = child.wait_with_output().expect("the worker's end");
    assert_eq!(code, 0, "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let nodes = last.expect("the final counters");
    let count = nodes
        .iter()
        .find(|n| n.label.starts_with("count"))
        .unwrap_or_else(|| panic!("no count node in {nodes:?}"));
    assert_eq!(
        count.blocks_in, 7,
        "the worker ran what the text says, not the graph the daemon checked: {nodes:?}"
    );
}

#[test]
fn a_graph_with_an_arc_to_no_node_is_refused_saying_so() {
    let (child, sock) = start_worker();
    let text = "gen count=3 | count";
    let mut graph = checked(text);
    graph.edges[0].to = 5;
    proto::send(
        &sock,
        &Msg {
            id: 1,
            body: start::<_, lang::edit::Edit>(text, graph),
        },
        &[],
    )
    .expect("send start");
    let (message, errno, status) = refusal(child, &sock);
    assert!(
        message.contains("the run's graph from the daemon is malformed: arc 0 goes from node 0 to node 5, of 2 nodes"),
        "{message}"
    );
    assert_eq!((errno, status), (libc::EINVAL, Some(2)));
}

#[test]
fn a_start_with_an_unknown_field_in_its_graph_is_refused_saying_so() {
    let (child, sock) = start_worker();
    let text = "gen count=3 | count";
    let mut graph = serde_json::to_value(checked(text)).unwrap();
    graph["nodes"][0]["privileged"] = serde_json::Value::Bool(true);
    let body: proto::ToWorker<serde_json::Value, serde_json::Value> = start(text, graph);
    proto::send(&sock, &Msg { id: 1, body }, &[]).expect("send start");
    let (message, errno, status) = refusal(child, &sock);
    assert!(
        message.contains("does not decode") && message.contains("unknown field `privileged`"),
        "{message}"
    );
    assert_eq!((errno, status), (libc::EPROTO, Some(2)));
}
