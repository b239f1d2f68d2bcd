//! Tests of `proto`.

use super::*;
use proptest::prelude::*;

#[test]
fn requests_round_trip_in_their_documented_form() {
    let m = Msg {
        id: 7,
        body: Request::Open {
            pipeline: "gen | count".into(),
            options: RunOptions::default(),
            fds: 3,
            context: ClientContext::default(),
        },
    };
    let f = encode(&m);
    let body = &f[4..];
    assert_eq!(
        u32::from_le_bytes(f[..4].try_into().unwrap()) as usize,
        body.len()
    );
    let text = std::str::from_utf8(body).unwrap();
    assert!(
        text.contains(r#""op":"open""#) && text.contains(r#""id":7"#),
        "{text}"
    );
    assert_eq!(decode::<Request>(body).unwrap(), m);
    // What a C client writes by hand, with defaults left out.
    let hand = br#"{"id":1,"op":"open","pipeline":"gen count=5 | count"}"#;
    match decode::<Request>(hand).unwrap().body {
        Request::Open {
            pipeline,
            options,
            fds,
            context,
        } => assert_eq!(
            (pipeline.as_str(), options, fds, context),
            (
                "gen count=5 | count",
                RunOptions::default(),
                0,
                ClientContext::default()
            )
        ),
        other => panic!("{other:?}"),
    }
}

// Over 150 lines: a table with one value of every message kind (the point is to see them
// all in one place, so a kind added to the protocol without a case here stands out).
#[test]
fn every_message_round_trips_through_its_envelope() {
    // A body field named `id` would clash with the envelope's: each kind once.
    let opts = RunOptions::default();
    let to_worker = [
        ToWorker::Start {
            run: 1,
            pipeline: "gen".into(),
            graph: serde_json::json!({"nodes": [], "edges": []}),
            options: opts.clone(),
            uid: 0,
            gid: 0,
            groups: vec![],
            modes: vec![(0, 0o640)],
            lent: vec![LentSocket {
                node: 0,
                kind: "rx".into(),
                dev: "lo".into(),
                fd: 4,
                filter: Some("udp port 53".into()),
            }],
            context: ClientContext::default(),
        },
        ToWorker::Start {
            run: 1,
            pipeline: "gen".into(),
            graph: serde_json::json!({"nodes": [], "edges": []}),
            options: opts.clone(),
            uid: 65534,
            gid: 65534,
            groups: vec![],
            modes: vec![],
            lent: vec![],
            context: ClientContext {
                cwd: true,
                env: Some(vec![("HOME".into(), "/home/u".into())]),
                umask: Some(0o077),
                limits: vec![Limit {
                    resource: "NOFILE".into(),
                    soft: 64,
                    hard: u64::MAX,
                }],
            },
        },
        ToWorker::Go {},
        ToWorker::Stop { signal: 2 },
        ToWorker::Edit {
            edit_id: 4,
            edit: EditOp::Remove { node: "x".into() },
            checked: serde_json::json!({"Remove": {"node": "x"}}),
            expect: vec![("x".into(), "count".into())],
        },
        ToWorker::Tap {
            tap_req: 5,
            node: "count:a".into(),
            filter: None,
        },
        ToWorker::Tap {
            tap_req: 5,
            node: "rx".into(),
            filter: Some(TapFilter {
                program: vec![(6, 0, 0, 262144)],
                snaplen: 96,
                wake: Wake { packets: 1, us: 0 },
                tags: 4096,
            }),
        },
        ToWorker::Untap { tap: 6 },
    ];
    for m in to_worker {
        let f = encode(&Msg {
            id: 9,
            body: m.clone(),
        });
        assert_eq!(
            decode::<ToWorker<serde_json::Value, serde_json::Value>>(&f[4..]).unwrap(),
            Msg { id: 9, body: m }
        );
    }
    let from_worker = [
        FromWorker::Built {
            placement: "p".into(),
            layout: "local:gen t1:count".into(),
        },
        FromWorker::Failed {
            message: "m".into(),
            errno: 22,
        },
        FromWorker::Counters {
            elapsed_s: 1.0,
            nodes: vec![
                NodeCounters::default(),
                NodeCounters {
                    label: "ip".into(),
                    classes: vec![4, 6],
                    ..Default::default()
                },
            ],
            arcs: vec![ArcCounters {
                from: "ip".into(),
                to: "tcp".into(),
                blocks: 3,
                bytes: 180,
                ring: Some(RingGauge {
                    tags_used: 48,
                    tags_size: 4096,
                    readers: 1,
                    ..Default::default()
                }),
            }],
            sites: vec![SpaceSite {
                space: "1".into(),
                cpu: Some(1),
                pinned: true,
            }],
        },
        FromWorker::Edited {
            edit_id: 4,
            applied: None,
            text: "t".into(),
            errno: 16,
        },
        FromWorker::Edited {
            edit_id: 5,
            applied: Some(EditApplied {
                edit: EditOp::Branch {
                    node: "count".into(),
                    filter: "sample every=5".into(),
                },
                node: "sample#2".into(),
                retired_blocks: None,
                flushed: 0,
            }),
            text: String::new(),
            errno: 0,
        },
        FromWorker::Graph {
            nodes: vec![GraphNode {
                label: "count:a".into(),
                filter: "count".into(),
                options: vec![("name".into(), "a".into())],
                inputs: vec!["gen".into()],
                outputs: vec![],
                source: false,
                space: "0".into(),
            }],
            mode: 0o640,
        },
        FromWorker::Tapped {
            tap_req: 5,
            tap: 6,
            ok: true,
            text: String::new(),
            errno: 0,
        },
        FromWorker::Finished { code: 0 },
    ];
    for m in from_worker {
        let f = encode(&Msg {
            id: 9,
            body: m.clone(),
        });
        assert_eq!(
            decode::<FromWorker>(&f[4..]).unwrap(),
            Msg { id: 9, body: m }
        );
    }
    let requests = [
        Request::Hello {
            version: 1,
            client: "c".into(),
        },
        Request::Ping { token: 3 },
        Request::Filters {},
        Request::Ps {},
        Request::Open {
            pipeline: "gen".into(),
            options: opts,
            fds: 3,
            context: ClientContext::default(),
        },
        Request::Activate {
            run: 1,
            detach: true,
        },
        Request::Edit {
            run: 1,
            edit: EditRequest::Text("remove x".into()),
        },
        Request::Edit {
            run: 1,
            edit: EditOp::Insert {
                node: "gen".into(),
                at: InsertAt::After,
                filter: "sample every=2".into(),
            }
            .into(),
        },
        Request::Stop { run: 1, signal: 2 },
        Request::Attach { run: 1 },
        Request::OpenStream { name: "s".into() },
        Request::Capture {
            device: "eth0".into(),
            program: vec![(0x28, 0, 0, 12), (6, 0, 0, 0)],
            snaplen: 262144,
            wake: Wake {
                packets: 256,
                us: 20_000,
            },
            buffer: 1 << 20,
            promisc: true,
            direction: "in".into(),
        },
        Request::Release { sub: 4 },
        Request::CaptureStats { sub: 4 },
        Request::Web {},
    ];
    for m in requests {
        let f = encode(&Msg {
            id: 9,
            body: m.clone(),
        });
        assert_eq!(decode::<Request>(&f[4..]).unwrap(), Msg { id: 9, body: m });
    }
    let replies = [
        Reply::Welcome {
            version: 1,
            server: "s".into(),
            uid: 0,
            gid: 0,
            pid: 1,
        },
        Reply::Pong { token: 3 },
        Reply::Web {
            url: "http://127.0.0.1:9/?token=ab".into(),
        },
        Reply::Filters {
            filters: vec![("gen".into(), "gen".into())],
        },
        Reply::Runs { runs: vec![] },
        Reply::Opened {
            run: 1,
            placement: "".into(),
        },
        Reply::Done {},
        Reply::Edited {
            run: 1,
            applied: EditApplied {
                edit: EditOp::Set {
                    node: "sample".into(),
                    options: vec![("every".into(), "3".into())],
                },
                node: "sample".into(),
                retired_blocks: Some(10),
                flushed: 2,
            },
        },
        Reply::Stream {
            name: "s".into(),
            fds: 2,
        },
        Reply::Captured {
            sub: 4,
            link_type: 1,
            fds: 2,
        },
        Reply::CaptureStats { lost: 7 },
        Reply::Counters {
            run: 1,
            elapsed_s: 0.5,
            nodes: vec![],
        },
        Reply::Finished { run: 1, code: 0 },
        Reply::error(libc::EACCES, "no"),
    ];
    for m in replies {
        let f = encode(&Msg {
            id: 9,
            body: m.clone(),
        });
        assert_eq!(decode::<Reply>(&f[4..]).unwrap(), Msg { id: 9, body: m });
    }
}

#[test]
fn edits_come_typed_or_as_text() {
    // What a client writes by hand: typed, or text.
    let hand =
        br#"{"id":1,"op":"edit","run":2,"edit":{"kind":"branch","node":"gen","filter":"count"}}"#;
    assert_eq!(
        decode::<Request>(hand).unwrap().body,
        Request::Edit {
            run: 2,
            edit: EditOp::Branch {
                node: "gen".into(),
                filter: "count".into()
            }
            .into()
        }
    );
    let hand = br#"{"id":1,"op":"edit","run":2,"edit":"remove count"}"#;
    assert!(matches!(
        decode::<Request>(hand).unwrap().body,
        Request::Edit {
            edit: EditRequest::Text(_),
            ..
        }
    ));
}

#[test]
fn malformed_messages_name_where() {
    match decode::<Request>(br#"{"id":1,"op":"open","pipelin":"x"}"#) {
        Err(ProtoError::Json {
            line: 1,
            column,
            why,
        }) => assert!(column > 0 && why.contains("pipelin"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        decode::<Request>(b"{\"id\":1,\"op\":\"launch_missiles\"}"),
        Err(ProtoError::Json { .. })
    ));
    assert!(matches!(decode::<Request>(b""), Err(ProtoError::Length(0))));
}

#[test]
fn oversized_and_truncated_frames_are_refused_before_reading() {
    let (a, b) = UnixStream::pair().unwrap();
    (&a).write_all(&((MAX_FRAME as u32) + 1).to_le_bytes())
        .unwrap();
    assert!(matches!(recv_frame(&b), Err(ProtoError::Length(n)) if n == MAX_FRAME as u64 + 1));
    let (a, b) = UnixStream::pair().unwrap();
    (&a).write_all(&10u32.to_le_bytes()).unwrap();
    (&a).write_all(b"{\"id\"").unwrap();
    drop(a);
    assert!(matches!(
        recv_frame(&b),
        Err(ProtoError::Truncated { got: 5, want: 10 })
    ));
}

#[test]
fn a_started_frame_must_finish_within_the_timeout() {
    let t = std::time::Duration::from_millis(100);
    // Stalled inside the length word.
    let (a, b) = UnixStream::pair().unwrap();
    (&a).write_all(&[5, 0]).unwrap();
    match recv_frame_within(&b, t) {
        Err(ProtoError::FrameTimeout {
            got: 2, want: 4, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // Stalled inside the body; the message names the timeout.
    let (a, b) = UnixStream::pair().unwrap();
    (&a).write_all(&10u32.to_le_bytes()).unwrap();
    (&a).write_all(b"{\"id\"").unwrap();
    let e = recv_frame_within(&b, t).unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::FrameTimeout {
                got: 9,
                want: 14,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("0.1 s"), "{e}");
    // A whole frame, and one that comes in pieces within the bound, are read.
    let (a, b) = UnixStream::pair().unwrap();
    let f = encode(&Msg {
        id: 1,
        body: Request::Ping { token: 2 },
    });
    (&a).write_all(&f).unwrap();
    assert_eq!(recv_within::<Request>(&b, t).unwrap().0.id, 1);
    let (a, b) = UnixStream::pair().unwrap();
    let writer = std::thread::spawn(move || {
        (&a).write_all(&f[..3]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        (&a).write_all(&f[3..]).unwrap();
        a
    });
    assert_eq!(
        recv_within::<Request>(&b, std::time::Duration::from_secs(30))
            .unwrap()
            .0
            .id,
        1
    );
    let _ = writer.join();
}

#[test]
fn descriptors_travel_with_their_frame() {
    let (a, b) = UnixStream::pair().unwrap();
    let f = std::fs::File::open("/proc/self/status").unwrap();
    send(
        &a,
        &Msg {
            id: 3,
            body: Reply::Stream {
                name: "x".into(),
                fds: 1,
            },
        },
        &[f.as_raw_fd()],
    )
    .unwrap();
    let (m, fds) = recv::<Reply>(&b).unwrap();
    assert_eq!(m.id, 3);
    assert_eq!(fds.len(), 1);
    let mut s = String::new();
    std::fs::File::from(fds.into_iter().next().unwrap())
        .read_to_string(&mut s)
        .unwrap();
    assert!(s.contains("Pid:"));
}

#[test]
fn peer_credentials_are_the_kernels() {
    let (a, _b) = UnixStream::pair().unwrap();
    let p = peer(&a).unwrap();
    assert_eq!(
        (p.pid as u32, p.uid),
        (std::process::id(), beltway::sys::getuid())
    );
}

proptest! {
    /// The decoder never panics, whatever the bytes.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode::<Request>(&bytes);
        let _ = decode::<Reply>(&bytes);
    }

    /// Valid requests cut or mutated anywhere decode or fail with a located error.
    #[test]
    fn mutated_requests_fail_cleanly(cut in 0usize..200, at in 0usize..200, byte in any::<u8>()) {
        let m = Msg { id: 9, body: Request::Edit { run: 4, edit: EditRequest::Text("set sample every=3".into()) } };
        let f = encode(&m);
        let mut body = f[4..].to_vec();
        let at = at % body.len();
        body[at] = byte;
        body.truncate(cut.max(1).min(body.len()));
        match decode::<Request>(&body) {
            Ok(_) => {}
            Err(ProtoError::Json { line, .. }) => prop_assert!(line >= 1),
            Err(ProtoError::Length(_)) => {}
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
    }
}
