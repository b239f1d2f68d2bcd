//! Edits on spaces of small test filters (the filter library depends on this crate;
//! its own filters are edited live in `crates/core/filters/tests/edit.rs`). Mid-run edits
//! are made deterministic by `gate`, a source that produces a batch only when the test
//! says so and acknowledges after the batch's whole walk.
use super::*;
use crate::filter::Args;
use crate::filter::{Batch, Ctx, Filter};
use crate::runtime::{Factory, NodeReport, Space};
use crate::spaces::Spaces;
use beltway::Tag;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

const SIZE: usize = 64;

/// `gate`: each number received is a batch of that many blocks of SIZE bytes (u32
/// sequence number first); after its walk, an acknowledgement. Ends when the sender
/// is dropped. With `block=yes` it waits in `pull` (a run that reaches no boundary),
/// and acknowledges a batch from there, once it waits for the next.
struct Gate {
    go: Receiver<u32>,
    ack: Sender<()>,
    seq: u32,
    block: bool,
    pulled: bool,
}
impl Filter for Gate {
    fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, _max: usize) -> bool {
        if self.block && std::mem::take(&mut self.pulled) {
            let _ = self.ack.send(());
        }
        let n = if self.block {
            self.go
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
        } else {
            self.go.recv_timeout(Duration::from_millis(1))
        };
        match n {
            Ok(n) => {
                for _ in 0..n {
                    let mut b = [7u8; SIZE];
                    b[..4].copy_from_slice(&self.seq.to_le_bytes());
                    let t = cx.store.push(&b);
                    out.push(Tag { class: 1, ..t });
                    self.seq += 1;
                }
                self.pulled = true;
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => true,
            Err(mpsc::RecvTimeoutError::Disconnected) => false,
        }
    }
    fn epoch_end(&mut self, _cx: &mut Ctx<'_>) {
        if !self.block && std::mem::take(&mut self.pulled) {
            let _ = self.ack.send(());
        }
    }
}

/// `tally`: counts blocks and bytes, and blocks that arrive out of order or twice.
#[derive(Default)]
struct Tally {
    blocks: u64,
    bytes: u64,
    next: u32,
    bad: u64,
}
impl Filter for Tally {
    fn process(&mut self, cx: &mut Ctx<'_>, b: &mut Batch) {
        for t in &b.tags {
            let d = cx.data(t).expect("resolvable");
            let seq = u32::from_le_bytes(d[..4].try_into().unwrap());
            if seq < self.next {
                self.bad += 1;
            }
            self.next = seq + 1;
            self.blocks += 1;
            self.bytes += d.len() as u64;
        }
    }
    fn summary(&self) -> Option<String> {
        Some(format!("{} {} {}", self.blocks, self.bytes, self.bad))
    }
}

/// `hold [n=N]`: keeps every block until `finish` (like tcpstream's held segments).
#[derive(Default)]
struct Hold(Vec<Tag>);
impl Filter for Hold {
    fn process(&mut self, cx: &mut Ctx<'_>, b: &mut Batch) {
        for t in &b.tags {
            self.0.push(cx.keep(t).expect("keep"));
        }
        b.clear();
    }
    fn finish(&mut self, _: &mut Ctx<'_>, out: &mut Batch) {
        for t in self.0.drain(..) {
            out.push(t);
        }
    }
}

/// `every n=K`: passes the Kth, 2Kth, ... block (class 1), drops the others.
struct Every(u64, u64);
impl Filter for Every {
    fn process(&mut self, _: &mut Ctx<'_>, b: &mut Batch) {
        for t in b.tags.iter_mut() {
            self.1 += 1;
            t.class = self.1.is_multiple_of(self.0) as u16;
        }
    }
}

struct Pass;
impl Filter for Pass {
    fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
}

/// The test factory; `gate` takes its channels from here (once).
struct F(Mutex<Option<(Receiver<u32>, Sender<()>)>>);
impl Factory for F {
    fn make(&self, name: &str, a: &Args) -> Result<Box<dyn Filter>, crate::FilterError> {
        Ok(match name {
            "gate" => {
                let (go, ack) = lock(&self.0).take().ok_or("gate: made twice")?;
                Box::new(Gate {
                    go,
                    ack,
                    seq: 0,
                    block: a.flag("block")?,
                    pulled: false,
                })
            }
            "tally" => Box::<Tally>::default(),
            "hold" => {
                // n= only so that a `set` can fail to build.
                a.parse::<u64>("n", None, 0)?;
                Box::<Hold>::default()
            }
            "every" => Box::new(Every(a.parse::<u64>("n", Some(0), 1)?.max(1), 0)),
            "pass" | "join" => Box::new(Pass),
            "split" => Box::new(crate::builtin::SplitFilter::new(
                lang::SplitMode::RoundRobin,
                2,
            )),
            _ => return Err(format!("no filter {name}").into()),
        })
    }
    fn is_source(&self, name: &str) -> bool {
        name == "gate"
    }
}

fn resolver() -> lang::StaticResolver {
    lang::StaticResolver::new()
        .native("gate", &["block"])
        .native("tally", &[])
        .native("hold", &["n"])
        .native("every", &["n"])
        .native("pass", &[])
        .native("split", &[])
        .native("join", &[])
        .unix("cat")
}

/// A factory and the test's ends of the gate: send batch sizes, receive acks.
fn gate() -> (F, Sender<u32>, Receiver<()>) {
    let (go_tx, go_rx) = mpsc::channel();
    let (ack_tx, ack_rx) = mpsc::channel();
    (F(Mutex::new(Some((go_rx, ack_tx)))), go_tx, ack_rx)
}

fn build(text: &str, f: &F) -> Space {
    let g = lang::parse(text, &resolver()).unwrap_or_else(|d| panic!("{d}"));
    Space::build(&g, f, 1 << 22).unwrap_or_else(|e| panic!("{e}"))
}

fn parse(text: &str) -> Edit {
    Edit::parse(text, &resolver()).unwrap_or_else(|e| panic!("{e}"))
}

/// The graph as labels and arcs (live nodes only; removed ones shown as `-label`).
fn shape(s: &Space) -> Vec<String> {
    s.nodes
        .iter()
        .map(|n| {
            let arcs: Vec<String> = n
                .out
                .iter()
                .map(|a| format!("{} {:?}/{}", s.nodes[a.to].label, a.sel, a.in_index))
                .collect();
            format!(
                "{}{} -> [{}]",
                if n.removed { "-" } else { "" },
                n.label,
                arcs.join(", ")
            )
        })
        .collect()
}

fn summary(r: &[NodeReport], label: &str) -> (u64, u64, u64) {
    let s = r.iter().find(|n| n.label == label).unwrap_or_else(|| {
        panic!(
            "no {label} in {:?}",
            r.iter().map(|n| &n.label).collect::<Vec<_>>()
        )
    });
    let v: Vec<u64> = s
        .summary
        .as_deref()
        .expect("tally summary")
        .split(' ')
        .map(|x| x.parse().unwrap())
        .collect();
    (v[0], v[1], v[2])
}

#[test]
fn inserts_rewire_as_the_pipeline_would_be_written_and_label_by_the_build_rule() {
    let (f, _go, _ack) = gate();
    let mut s = build("gate | tally |1 hold + pass | tally name=tail", &f);
    assert_eq!(
        shape(&s),
        [
            "gate -> [tally Default/0]",
            "tally -> [hold Class(1)/0, pass Class(1)/0]",
            "hold -> [join Default/0]",
            "pass -> [join Default/1]",
            "join -> [tally:tail Default/0]",
            "tally:tail -> []"
        ]
    );
    let a = s.edit(&parse("insert after tally tally"), &f).unwrap();
    assert_eq!(
        (a.label.as_str(), a.retired.is_none()),
        ("tally#3", true),
        "tally and tally:tail come first"
    );
    let a = s.edit(&parse("insert before pass every n=3"), &f).unwrap();
    assert_eq!(a.label, "every");
    let a = s
        .edit(&parse("insert before every tally name=t"), &f)
        .unwrap();
    assert_eq!(a.label, "tally:t");
    let a = s.edit(&parse("insert after tally:tail tally"), &f).unwrap();
    assert_eq!(
        a.label, "tally#5",
        "four tallies before it, named ones counted"
    );
    assert_eq!(
        shape(&s),
        [
            "gate -> [tally Default/0]",
            "tally -> [tally#3 Default/0]",
            "hold -> [join Default/0]",
            "pass -> [join Default/1]",
            "join -> [tally:tail Default/0]",
            "tally:tail -> [tally#5 Default/0]",
            // X's out-arcs leave the new node with their selectors and in-arc indices;
            // `insert before every` took every's one in-arc (selector kept).
            "tally#3 -> [hold Class(1)/0, tally:t Class(1)/0]",
            // new -> X keeps X's in-arc index.
            "every -> [pass Default/0]",
            "tally:t -> [every Default/0]",
            "tally#5 -> []",
        ]
    );
    let labels: Vec<String> = s.report().into_iter().map(|r| r.label).collect();
    assert_eq!(
        labels,
        [
            "gate",
            "tally",
            "hold",
            "pass",
            "join",
            "tally:tail",
            "tally#3",
            "every",
            "tally:t",
            "tally#5"
        ]
    );
}

#[test]
fn refused_and_failed_edits_leave_the_space_exactly_as_it_was() {
    let (f, _go, _ack) = gate();
    let mut s = build("gate | tally | split | pass + hold | tally name=tail", &f);
    let before = shape(&s);
    let refused: &[(&str, Refusal)] = &[
        ("remove gate", Refusal::Source),
        ("insert before gate pass", Refusal::BeforeSource),
        ("insert after tally gate", Refusal::NewSource("gate".into())),
        ("insert after split pass", Refusal::Split),
        ("remove split", Refusal::Split),
        ("replace split pass", Refusal::Split),
        ("remove join", Refusal::Template),
        ("insert before join pass", Refusal::Inputs(2)),
        ("replace tally gate", Refusal::SourceMismatch),
        ("replace gate tally", Refusal::SourceMismatch),
        (
            "insert after tally tally name=tail",
            Refusal::NameTaken("tally:tail".into()),
        ),
        (
            "replace pass tally name=tail",
            Refusal::NameTaken("tally:tail".into()),
        ),
    ];
    for (text, why) in refused {
        match s.edit(&parse(text), &f) {
            Err(EditError::Refused { why: w, .. }) => assert_eq!(&w, why, "{text}"),
            other => panic!("{text}: expected {why:?}, got {other:?}"),
        }
        assert_eq!(shape(&s), before, "{text} changed the space");
    }
    // A filter that fails to build: a typed error naming the new node and the value.
    for text in [
        "insert after tally every n=banana",
        "insert before tally every n=banana",
        "replace pass every n=banana",
    ] {
        let r = s.edit(&parse(text), &f);
        let Err(EditError::Build(e)) = r else {
            panic!("{text}: {r:?}")
        };
        assert_eq!(e.label, "every");
        assert!(
            matches!(&*e.kind, crate::BuildErrorKind::Filter(crate::FilterError::BadValue { key, value, .. }) if key == "n" && value == "banana"),
            "{e}"
        );
        assert_eq!(
            e.render("edit: ", text).lines().nth(2).map(|l| l.trim()),
            Some("^^^^^^^^^^^^^^"),
            "caret under the filter in the edit's text:\n{}",
            e.render("edit: ", text)
        );
        assert_eq!(shape(&s), before, "{text} changed the space");
    }
    match s.edit(&parse("remove nosuch"), &f) {
        Err(EditError::NoNode { label, known }) => {
            assert_eq!(label, "nosuch");
            assert_eq!(
                known,
                [
                    "gate",
                    "tally",
                    "split",
                    "pass",
                    "hold",
                    "join",
                    "tally:tail"
                ]
            );
        }
        other => panic!("{other:?}"),
    }
}

/// Runs `text` on a thread with an edit handle; returns the handle, the gate and the
/// run's thread (its report at the end).
fn running(
    text: &'static str,
) -> (
    EditHandle,
    Sender<u32>,
    Receiver<()>,
    std::thread::JoinHandle<Vec<NodeReport>>,
) {
    let (f, go, ack) = gate();
    let h = EditHandle::new();
    let h2 = h.clone();
    let t = std::thread::spawn(move || {
        let mut s = build(text, &f);
        s.run_with(&AtomicBool::new(false), &h2, &f, |_| {});
        s.report()
    });
    (h, go, ack, t)
}

const WAIT: Duration = Duration::from_secs(60);

/// Wait until the handle's counters (refreshed every ~100 ms by the run loop) show
/// `blocks` at tally `label`; a watchdog, not a time limit on the code under test.
fn eventually(h: &EditHandle, label: &str, blocks: u64) {
    let end = std::time::Instant::now() + WAIT;
    loop {
        let r = h.report();
        let now = r
            .iter()
            .find(|n| n.label == label)
            .map(|_| summary(&r, label).0);
        if now == Some(blocks) {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "{label}: the counters show {now:?}, never {blocks}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One batch of `n` blocks, walked to its end.
fn batch(go: &Sender<u32>, ack: &Receiver<()>, n: u32) {
    go.send(n).unwrap();
    ack.recv_timeout(WAIT).expect("the batch's walk ended");
}

#[test]
fn a_lossless_run_loses_no_block_across_edits_and_held_blocks_are_flushed() {
    let (h, go, ack, t) = running("gate | tally name=head | hold | tally name=tail");
    let edits = [
        "insert after tally:head tally name=mid",
        // Fails to build: the old instance stays, with all it holds.
        "set hold n=banana",
        "remove hold",
        "insert before tally:tail hold",
        "replace tally:mid every n=1",
        "set every n=1",
        "remove every",
        // A removed node's label is not given out again: this hold is hold#2.
        "replace hold#2 pass",
    ];
    let mut sent = 0u64;
    for (k, e) in edits.iter().enumerate() {
        batch(&go, &ack, 100 + k as u32);
        sent += 100 + k as u64;
        let r = h.apply(parse(e), WAIT);
        match *e {
            "set hold n=banana" => assert!(matches!(r, Err(EditError::Build(_))), "{e}: {r:?}"),
            "remove hold" => {
                // hold kept all it got; retiring it flushed them on to the tail.
                assert_eq!(r.unwrap().flushed as u64, sent, "{e}");
                eventually(&h, "tally:tail", sent);
            }
            _ => drop(r.unwrap_or_else(|x| panic!("{e}: {x}"))),
        }
    }
    batch(&go, &ack, 1000);
    sent += 1000;
    drop(go);
    let r = t.join().unwrap();
    assert_eq!(
        summary(&r, "tally:tail"),
        (sent, sent * SIZE as u64, 0),
        "every block, in order"
    );
    assert_eq!(summary(&r, "tally:head"), (sent, sent * SIZE as u64, 0));
    let labels: Vec<&str> = r.iter().map(|n| n.label.as_str()).collect();
    assert_eq!(
        labels,
        ["gate", "tally:head", "tally:tail", "pass"],
        "removed nodes are not reported"
    );
    assert!(matches!(
        h.apply(parse("remove pass"), WAIT),
        Err(EditError::Ended)
    ));
}

#[test]
fn set_changes_what_passes_from_the_next_batch_on() {
    let (h, go, ack, t) = running("gate | every n=1 | tally name=tail");
    batch(&go, &ack, 100);
    eventually(&h, "tally:tail", 100);
    let a = h.apply(parse("set every n=4"), WAIT).unwrap();
    let old = a.retired.expect("the old instance's report");
    assert_eq!(
        (
            old.label.as_str(),
            old.counters.blocks_in,
            old.counters.blocks_out
        ),
        ("every", 100, 100)
    );
    batch(&go, &ack, 100);
    eventually(&h, "tally:tail", 125); // one in four of the second hundred
                                       // A failed set keeps the running instance (and its count).
    assert!(matches!(
        h.apply(parse("set every n=banana"), WAIT),
        Err(EditError::Build(_))
    ));
    batch(&go, &ack, 100);
    drop(go);
    let r = t.join().unwrap();
    assert_eq!(
        summary(&r, "tally:tail").0,
        150,
        "25 of the last hundred too: the failed set changed nothing"
    );
    let every = r.iter().find(|n| n.label == "every").unwrap();
    assert_eq!(
        (every.counters.blocks_in, every.counters.blocks_out),
        (300, 150),
        "counters go on across a set"
    );
}

#[test]
fn an_edit_the_run_does_not_reach_is_withdrawn_on_timeout() {
    let (h, go, ack, t) = running("gate block=yes | tally name=tail");
    batch(&go, &ack, 10);
    // The gate now waits in pull: no boundary comes until the next batch.
    assert!(matches!(
        h.apply(
            parse("insert after tally:tail tally"),
            Duration::from_millis(50)
        ),
        Err(EditError::Timeout(_))
    ));
    batch(&go, &ack, 10);
    drop(go);
    let r = t.join().unwrap();
    assert!(
        r.iter().all(|n| n.label != "tally"),
        "the withdrawn edit never applied: {:?}",
        r.iter().map(|n| &n.label).collect::<Vec<_>>()
    );
    assert_eq!(summary(&r, "tally:tail").0, 20);
}

#[test]
fn edits_reach_thread_spaces_by_label_and_are_refused_at_channels() {
    let (f, go, ack) = gate();
    let g = lang::parse(
        "gate | pass space=1 | tally name=mid | hold | tally name=tail",
        &resolver(),
    )
    .unwrap();
    let spaces = Spaces::build(&g, &f, 1 << 22, Default::default()).unwrap();
    let h = spaces.edit_handle();
    let h2 = h.clone();
    let t = std::thread::spawn(move || spaces.run_with(&AtomicBool::new(false), &h2, &f, |_| {}));
    batch(&go, &ack, 100);
    // pass receives from the channel out of space 0: refused, saying why.
    match h.apply(parse("remove pass"), WAIT) {
        Err(EditError::Refused {
            label,
            why: Refusal::Channel(w),
        }) => assert_eq!((label.as_str(), w), ("pass", "receives from")),
        other => panic!("{other:?}"),
    }
    match h.apply(parse("insert after gate@0 pass"), WAIT) {
        Err(EditError::Refused {
            label,
            why: Refusal::Channel(w),
        }) => assert_eq!((label.as_str(), w), ("gate", "sends into")),
        other => panic!("{other:?}"),
    }
    // The graph of both spaces, joined through their channel.
    let end = std::time::Instant::now() + WAIT;
    while h.graph().len() < 5 {
        assert!(
            std::time::Instant::now() < end,
            "both spaces publish their graphs: {:?}",
            h.graph()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        graph_shape(&h.graph()),
        [
            "gate@0 [gate] source <-  -> pass@1",
            "pass@1 [pass] <- gate@0 -> tally:mid@1",
            "tally:mid@1 [tally] <- pass@1 -> hold@1",
            "hold@1 [hold] <- tally:mid@1 -> tally:tail@1",
            "tally:tail@1 [tally] <- hold@1 -> "
        ]
    );
    assert_eq!(
        h.graph()
            .iter()
            .map(|n| n.space.as_str())
            .collect::<Vec<_>>(),
        ["0", "1", "1", "1", "1"]
    );
    // An arc between spaces would be a channel.
    match h.apply(parse("connect gate tally:mid"), WAIT) {
        Err(EditError::Refused {
            why: Refusal::Spaces(a, b),
            ..
        }) => assert_eq!((a.as_str(), b.as_str()), ("gate@0", "tally:mid@1")),
        other => panic!("{other:?}"),
    }
    match h.apply(parse("branch gate@0 tally"), WAIT) {
        Err(EditError::Refused {
            label,
            why: Refusal::Channel(w),
        }) => assert_eq!((label.as_str(), w), ("gate", "sends into")),
        other => panic!("{other:?}"),
    }
    for text in [
        "connect tally:mid pass",
        "move tally:tail hold pass",
        "disconnect pass tally:mid",
    ] {
        match h.apply(parse(text), WAIT) {
            Err(EditError::Refused {
                label,
                why: Refusal::Channel(w),
            }) => assert_eq!((label.as_str(), w), ("pass", "receives from"), "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    assert!(matches!(
        h.apply(parse("remove tally:mid@p3"), WAIT),
        Err(EditError::Refused {
            why: Refusal::ProcessSpace(3),
            ..
        })
    ));
    assert!(matches!(
        h.apply(parse("remove tally:mid@7"), WAIT),
        Err(EditError::Refused {
            why: Refusal::NoSpace(_),
            ..
        })
    ));
    // Space 1 has taken in the first hundred (its counters say so): hold has them all.
    eventually(&h, "tally:mid@1", 100);
    // In space 1, found by its label alone; labels come back with their space.
    let a = h
        .apply(parse("insert after tally:mid every n=2"), WAIT)
        .unwrap();
    assert_eq!(a.label, "every@1");
    let a = h.apply(parse("remove hold@1"), WAIT).unwrap();
    assert_eq!(
        (a.label.as_str(), a.flushed),
        ("hold@1", 100),
        "hold's blocks flushed on to the tail"
    );
    let a = h
        .apply(parse("branch tally:mid tally name=side"), WAIT)
        .unwrap();
    assert_eq!(a.label, "tally:side@1");
    assert_eq!(
        graph_shape(&h.graph())[1..],
        [
            "pass@1 [pass] <- gate@0 -> tally:mid@1",
            "tally:mid@1 [tally] <- pass@1 -> every@1,tally:side@1",
            "tally:tail@1 [tally] <- every@1 -> ",
            "every@1 [every n=2] <- tally:mid@1 -> tally:tail@1",
            "tally:side@1 [tally] <- tally:mid@1 -> "
        ]
    );
    batch(&go, &ack, 100);
    drop(go);
    let rep = t.join().unwrap();
    assert!(rep.died.is_none(), "{:?}", rep.died);
    // The run's final table: one row per node, labelled as in one space.
    assert_eq!(
        summary(&rep.nodes, "tally:mid"),
        (200, 200 * SIZE as u64, 0)
    );
    assert_eq!(
        summary(&rep.nodes, "tally:tail"),
        (150, 150 * SIZE as u64, 0),
        "the held hundred, then one in two"
    );
    assert_eq!(
        summary(&rep.nodes, "tally:side"),
        (100, 100 * SIZE as u64, 0),
        "the branch saw the second hundred"
    );
    assert!(
        h.report().iter().any(|n| n.label == "every@1"),
        "the counters snapshot has the new node"
    );
}

/// The graph snapshot in short: `label [filter] <- inputs -> outputs`.
fn graph_shape(g: &[GraphNode]) -> Vec<String> {
    g.iter()
        .map(|n| {
            format!(
                "{} [{}]{} <- {} -> {}",
                n.label,
                n.filter,
                if n.source { " source" } else { "" },
                n.inputs.join(","),
                n.outputs.join(",")
            )
        })
        .collect()
}

#[test]
fn the_graph_shows_live_nodes_and_arcs_through_removed_ones_and_set_values() {
    let (f, _go, _ack) = gate();
    let mut s = build("gate | every n=3 | tally name=t | pass", &f);
    assert_eq!(
        graph_shape(&s.graph()),
        [
            "gate [gate] source <-  -> every",
            "every [every n=3] <- gate -> tally:t",
            "tally:t [tally] <- every -> pass",
            "pass [pass] <- tally:t -> "
        ]
    );
    let g = s.graph();
    assert_eq!(
        (g[1].options.clone(), g[1].space.as_str()),
        (vec![("n".to_string(), "3".to_string())], "0")
    );
    s.edit(&parse("set every n=5"), &f).unwrap();
    s.edit(&parse("remove tally:t"), &f).unwrap();
    // A removed node's arcs show from its inputs to its outputs.
    assert_eq!(
        graph_shape(&s.graph()),
        [
            "gate [gate] source <-  -> every",
            "every [every n=5] <- gate -> pass",
            "pass [pass] <- every -> "
        ]
    );
    // A template: the join and split as the build made them.
    let (f, _go, _ack) = gate();
    let s = build("gate | tally | split | pass + hold | tally name=tail", &f);
    let g = graph_shape(&s.graph());
    assert_eq!(
        g[2], "split [split] <- tally -> pass,hold",
        "the library's split, written by hand"
    );
    assert_eq!(g[5], "join [join mode=all] <- pass,hold -> tally:tail");
}

#[test]
fn graph_edits_rewire_the_space_and_the_graph() {
    let (f, _go, _ack) = gate();
    let mut s = build("gate | tally name=a | pass | tally name=t", &f);
    assert_eq!(
        s.edit(&parse("branch pass tally name=u"), &f)
            .unwrap()
            .label,
        "tally:u"
    );
    assert_eq!(
        s.edit(&parse("connect gate pass"), &f).unwrap().label,
        "pass"
    );
    assert_eq!(
        shape(&s),
        [
            "gate -> [tally:a Default/0, pass Default/1]",
            "tally:a -> [pass Default/0]",
            "pass -> [tally:t Default/0, tally:u Default/0]",
            "tally:t -> []",
            "tally:u -> []"
        ],
        "the new arc takes the next in-arc index; the branch is a leaf"
    );
    s.edit(&parse("remove pass"), &f).unwrap();
    let g = graph_shape(&s.graph());
    assert_eq!(
        g,
        [
            "gate [gate] source <-  -> tally:a,tally:t,tally:u",
            "tally:a [tally] <- gate -> tally:t,tally:u",
            "tally:t [tally] <- gate,tally:a -> ",
            "tally:u [tally] <- gate,tally:a -> "
        ]
    );
    // gate -> pass -> t: pass (removed) carries gate's and a's blocks to t and u, so
    // no one arc is only gate -> t.
    let before = shape(&s);
    match s.edit(&parse("disconnect gate tally:t"), &f) {
        Err(EditError::Refused {
            label,
            why: Refusal::ThroughRemoved(r),
        }) => assert_eq!((label.as_str(), r.as_str()), ("gate -> tally:t", "pass")),
        other => panic!("{other:?}"),
    }
    assert_eq!(shape(&s), before);
    // Moved: u reads from a alone; the arc pass -> u goes, a -> u comes.
    assert_eq!(s.edit(&parse("move tally:u gate tally:t"), &f).unwrap_err().to_string(), "gate -> tally:u: the arc passes through a removed node that carries other arcs too (pass); taking it away would cut those as well");
    assert!(
        matches!(
            s.edit(&parse("connect tally:a tally:u"), &f),
            Err(EditError::Refused {
                why: Refusal::ArcExists,
                ..
            })
        ),
        "a -> u is there, through pass"
    );
    assert_eq!(shape(&s), before);
    // Through a removed node with one output: the arc into it is only gate -> t now
    // that u reads elsewhere (after a disconnect of pass's arc to u via a fresh space).
    let (f, _go, _ack) = gate();
    let mut s = build("gate | tally name=a | pass | tally name=t", &f);
    s.edit(&parse("connect gate pass"), &f).unwrap();
    s.edit(&parse("remove pass"), &f).unwrap();
    s.edit(&parse("disconnect gate tally:t"), &f).unwrap();
    assert_eq!(
        shape(&s),
        [
            "gate -> [tally:a Default/0]",
            "tally:a -> [pass Default/0]",
            "-pass -> [tally:t Default/0]",
            "tally:t -> []"
        ],
        "the one arc that carried only gate -> t went"
    );
    s.edit(&parse("move tally:t tally:a gate"), &f).unwrap();
    assert_eq!(
        graph_shape(&s.graph()),
        [
            "gate [gate] source <-  -> tally:a,tally:t",
            "tally:a [tally] <- gate -> ",
            "tally:t [tally] <- gate -> "
        ]
    );
    // The arc cut was a -> pass (the first that carried only a -> t), so nothing flows
    // into the dead pass; its arc to t keeps index 0, and the new plain arc takes 1.
    assert_eq!(
        shape(&s),
        [
            "gate -> [tally:a Default/0, tally:t Default/1]",
            "tally:a -> []",
            "-pass -> [tally:t Default/0]",
            "tally:t -> []"
        ]
    );
    // A direct arc moved keeps its in-arc index.
    let (f, _go, _ack) = gate();
    let mut s = build("gate | tally name=a | pass | tally name=t", &f);
    s.edit(&parse("connect tally:a tally:t"), &f).unwrap();
    s.edit(&parse("move tally:t pass gate"), &f).unwrap();
    assert_eq!(
        shape(&s),
        [
            "gate -> [tally:a Default/0, tally:t Default/0]",
            "tally:a -> [pass Default/0, tally:t Default/1]",
            "pass -> []",
            "tally:t -> []"
        ]
    );
}

#[test]
fn refused_graph_edits_leave_the_space_and_its_graph_exactly_as_they_were() {
    let (f, _go, _ack) = gate();
    let mut s = build("gate | tally | split | pass + hold | tally name=tail", &f);
    let (before, graph) = (shape(&s), s.graph());
    let refused: &[(&str, &str, Refusal)] = &[
        ("branch split pass", "split", Refusal::Split),
        (
            "branch tally gate",
            "tally",
            Refusal::NewSource("gate".into()),
        ),
        (
            "branch tally tally name=tail",
            "tally:tail",
            Refusal::NameTaken("tally:tail".into()),
        ),
        ("connect tally gate", "gate", Refusal::IntoSource),
        ("connect tally join", "join", Refusal::Template),
        ("connect split tally:tail", "split", Refusal::Split),
        ("connect gate tally", "gate -> tally", Refusal::ArcExists),
        (
            "connect tally:tail tally",
            "tally:tail -> tally",
            Refusal::Cycle("tally".into(), "tally:tail".into()),
        ),
        (
            "connect tally tally",
            "tally -> tally",
            Refusal::Cycle("tally".into(), "tally".into()),
        ),
        (
            "connect tally:tail@0 pass@1",
            "tally:tail@0 -> pass@1",
            Refusal::Spaces("tally:tail@0".into(), "pass@1".into()),
        ),
        (
            "disconnect gate tally",
            "gate -> tally",
            Refusal::OnlyInput("tally".into()),
        ),
        (
            "disconnect gate tally:tail",
            "gate -> tally:tail",
            Refusal::NoArc("gate".into(), "tally:tail".into()),
        ),
        ("disconnect hold join", "join", Refusal::Template),
        ("disconnect split pass", "split", Refusal::Split),
        (
            "move tally gate tally:tail",
            "tally:tail -> tally",
            Refusal::Cycle("tally".into(), "tally:tail".into()),
        ),
        // The connect part is fine (tally -> tail), the disconnect part is not.
        (
            "move tally:tail gate tally",
            "gate -> tally:tail",
            Refusal::NoArc("gate".into(), "tally:tail".into()),
        ),
        ("move pass split tally", "split", Refusal::Split),
        ("move join hold tally", "join", Refusal::Template),
        (
            "move tally:tail join join",
            "join -> tally:tail",
            Refusal::ArcExists,
        ),
    ];
    for (text, label, why) in refused {
        match s.edit(&parse(text), &f) {
            Err(EditError::Refused { label: l, why: w }) => {
                assert_eq!((l.as_str(), &w), (*label, why), "{text}")
            }
            other => panic!("{text}: expected {why:?}, got {other:?}"),
        }
        assert_eq!(shape(&s), before, "{text} changed the space");
        assert_eq!(s.graph(), graph, "{text} changed the graph");
    }
    for text in [
        "connect nosuch tally",
        "disconnect gate nosuch",
        "move tally nosuch gate",
        "branch nosuch pass",
    ] {
        assert!(
            matches!(s.edit(&parse(text), &f), Err(EditError::NoNode { ref label, .. }) if label == "nosuch"),
            "{text}"
        );
    }
    match s.edit(&parse("branch tally every n=banana"), &f) {
        Err(EditError::Build(e)) => assert_eq!(e.label, "every"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        shape(&s),
        before,
        "a branch that fails to build changes nothing"
    );
    // A Unix command with no arc out writes to standard output: nothing reads it.
    let (f, _go, _ack) = gate();
    let mut s = build("gate | tally | cat", &f);
    let before = shape(&s);
    for text in ["branch cat pass", "connect cat tally"] {
        assert!(
            matches!(
                s.edit(&parse(text), &f),
                Err(EditError::Refused {
                    why: Refusal::UnixSink,
                    ..
                })
            ),
            "{text}"
        );
        assert_eq!(shape(&s), before);
    }
}

#[test]
fn a_branch_sees_exactly_what_its_node_emits_after_the_edit_and_feeds_what_is_added_below_it() {
    let (h, go, ack, t) = running("gate | tally name=head | every n=2 | tally name=tail");
    // The graph is published when the run starts.
    let end = std::time::Instant::now() + WAIT;
    while h.graph().is_empty() {
        assert!(std::time::Instant::now() < end, "no graph published");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        graph_shape(&h.graph()),
        [
            "gate [gate] source <-  -> tally:head",
            "tally:head [tally] <- gate -> every",
            "every [every n=2] <- tally:head -> tally:tail",
            "tally:tail [tally] <- every -> "
        ]
    );
    batch(&go, &ack, 100);
    assert_eq!(
        h.apply(parse("branch every tally name=b"), WAIT)
            .unwrap()
            .label,
        "tally:b"
    );
    // Published with the edit, before the answer.
    assert_eq!(h.graph()[2].outputs, ["tally:tail", "tally:b"]);
    batch(&go, &ack, 100);
    eventually(&h, "tally:b", 50);
    // Below the new leaf: its output now goes on.
    assert_eq!(
        h.apply(parse("branch tally:b every n=5"), WAIT)
            .unwrap()
            .label,
        "every#2"
    );
    assert_eq!(
        h.apply(parse("branch every#2 tally name=c"), WAIT)
            .unwrap()
            .label,
        "tally:c"
    );
    batch(&go, &ack, 100);
    drop(go);
    let r = t.join().unwrap();
    assert_eq!(summary(&r, "tally:head"), (300, 300 * SIZE as u64, 0));
    assert_eq!(
        summary(&r, "tally:tail"),
        (150, 150 * SIZE as u64, 0),
        "the old successor got all it got before"
    );
    assert_eq!(
        summary(&r, "tally:b"),
        (100, 100 * SIZE as u64, 0),
        "one in two of the last two hundred, none of the first"
    );
    assert_eq!(
        summary(&r, "tally:c"),
        (10, 10 * SIZE as u64, 0),
        "one in five of what b passed on after the edit"
    );
    let b = r.iter().find(|n| n.label == "tally:b").unwrap();
    assert_eq!(
        (b.counters.blocks_in, b.counters.blocks_out),
        (100, 50),
        "a leaf until every#2 came below it, then it passed on"
    );
}

#[test]
fn connect_disconnect_and_move_change_who_feeds_a_node() {
    let (h, go, ack, t) = running("gate | tally name=a | every n=2 | tally name=j");
    batch(&go, &ack, 100);
    // j gets the gate's blocks besides every's: each even block twice.
    h.apply(parse("connect gate tally:j"), WAIT).unwrap();
    batch(&go, &ack, 100);
    eventually(&h, "tally:j", 50 + 150);
    // Back to one input.
    h.apply(parse("disconnect every tally:j"), WAIT).unwrap();
    batch(&go, &ack, 100);
    eventually(&h, "tally:j", 50 + 150 + 100);
    assert!(matches!(
        h.apply(parse("disconnect gate tally:j"), WAIT),
        Err(EditError::Refused {
            why: Refusal::OnlyInput(_),
            ..
        })
    ));
    // Its only input moves: j reads every's output again.
    assert_eq!(
        h.apply(parse("move tally:j gate every"), WAIT)
            .unwrap()
            .label,
        "tally:j"
    );
    batch(&go, &ack, 100);
    drop(go);
    let r = t.join().unwrap();
    let (blocks, bytes, back) = summary(&r, "tally:j");
    assert_eq!((blocks, bytes), (50 + 150 + 100 + 50, 350 * SIZE as u64));
    // In the one batch that came both ways, every's half first (arc order), then the
    // gate's whole hundred: the sequence went back once, and only then.
    assert_eq!(back, 1);
    assert_eq!(summary(&r, "tally:a").0, 400);
    let every = r.iter().find(|n| n.label == "every").unwrap();
    // One in two throughout; but while it was a leaf (after the disconnect, until the
    // move), its output ended there, and a sink counts none.
    assert_eq!(
        (every.counters.blocks_in, every.counters.blocks_out),
        (400, 150)
    );
}

#[test]
fn removing_a_leaf_ends_its_input_arcs_there() {
    let (h, go, ack, t) = running("gate | tally name=head | hold");
    batch(&go, &ack, 100);
    let a = h.apply(parse("remove hold"), WAIT).unwrap();
    assert_eq!(
        (a.label.as_str(), a.flushed),
        ("hold", 100),
        "what the leaf held was flushed, to nowhere"
    );
    assert_eq!(
        graph_shape(&h.graph()),
        [
            "gate [gate] source <-  -> tally:head",
            "tally:head [tally] <- gate -> "
        ]
    );
    batch(&go, &ack, 100);
    drop(go);
    let r = t.join().unwrap();
    assert_eq!(
        r.iter().map(|n| n.label.as_str()).collect::<Vec<_>>(),
        ["gate", "tally:head"]
    );
    assert_eq!(
        summary(&r, "tally:head"),
        (200, 200 * SIZE as u64, 0),
        "head goes on counting into the removed leaf"
    );
}

/// Taps and exported streams: observers, nodes of the graph.
mod observers;
