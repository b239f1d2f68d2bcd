//! Observers, taps (`crate::tap`) and exported streams (`crate::export`), under live
//! edits: the graph shows them, the counters leave them out, their readers read what the
//! node passed on.
use super::*;

/// The blocks a tap's reader can read now, by their sequence numbers (mapped as a reader
/// process maps them: data segments only).
fn tap_seqs(rings: &crate::tap::TapRings) -> Vec<u32> {
    let mut r = crate::tap::tests::observer(rings);
    let mut seqs = Vec::new();
    while let Ok(Some((_, p))) = r.try_peek_acquire() {
        let (_, b) = protocol::tap::RecordHeader::decode(p.data).unwrap();
        seqs.push(u32::from_le_bytes(b[..4].try_into().unwrap()));
        r.peek_complete().unwrap();
    }
    seqs
}

/// Until the graph the handle shows satisfies `cond` (published after each edit and tap);
/// a watchdog, not a time limit on the code under test.
fn graph_until(h: &EditHandle, what: &str, cond: impl Fn(&[GraphNode]) -> bool) -> Vec<GraphNode> {
    let end = std::time::Instant::now() + WAIT;
    loop {
        let g = h.graph();
        if cond(&g) {
            return g;
        }
        assert!(
            std::time::Instant::now() < end,
            "{what}: the graph stayed {:?}",
            graph_shape(&g)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A tap is a node of the graph reading the node it taps: the graph shows it while it is
/// on, the counters leave it out, it reads every block the node passes on (a split's
/// whole output, whichever branch each block takes), and untapped it is gone.
#[test]
fn a_tap_is_a_node_the_graph_shows() {
    let (h, go, ack, t) = running("gate | tally | split | pass + hold | tally name=tail");
    batch(&go, &ack, 4);
    let rings = h.tap("split", 1 << 20, WAIT).unwrap();
    let label = format!("{}{}", crate::tap::TAP, rings.id);
    let g = graph_until(&h, "the tap shown", |g| g.iter().any(|n| n.label == label));
    let shape = graph_shape(&g);
    assert!(
        shape.contains(&format!("{label} [tap id={}] <- split -> ", rings.id)),
        "{shape:?}"
    );
    assert!(
        shape
            .iter()
            .any(|l| l.starts_with("split [split] <- tally -> ") && l.ends_with(&label)),
        "{shape:?}"
    );
    // Blocks 4..14 leave the split down two branches; the tap reads all ten.
    batch(&go, &ack, 10);
    assert_eq!(tap_seqs(&rings), (4..14).collect::<Vec<u32>>());
    assert!(
        h.report()
            .iter()
            .all(|n| !n.label.starts_with(crate::tap::TAP)),
        "the counters leave taps out"
    );
    h.untap(rings.id);
    batch(&go, &ack, 1);
    graph_until(&h, "the tap gone", |g| {
        g.iter().all(|n| !n.label.starts_with(crate::tap::TAP))
    });
    // Another tap, on another node; the run's blocks all reach the end.
    let again = h.tap("tally", 1 << 20, WAIT).unwrap();
    batch(&go, &ack, 5);
    assert_eq!(tap_seqs(&again), (15..20).collect::<Vec<u32>>());
    drop(go);
    let rep = t.join().unwrap();
    assert_eq!(summary(&rep, "tally:tail").0, 20);
    assert!(rep.iter().all(|n| !n.label.starts_with(crate::tap::TAP)));
}

/// An exported stream is a node of the graph (`__export.NAME`, an observer on an out-arc
/// of the node it exports): the graph shows it while the run runs, the counters leave it
/// out (the exported node's own counts are what they are without it), and its reader
/// reads every block the node passes on, whole and in order, across live edits next to
/// the node and after it, until the run ends the stream.
#[test]
fn an_export_is_a_node_the_graph_shows_and_its_stream_survives_edits() {
    let name = format!("editexp{}", std::process::id());
    let text: &'static str = Box::leak(
        format!("gate | tally name={name} export=yes | every n=2 name=half | tally name=tail")
            .into_boxed_str(),
    );
    let (h, go, ack, t) = running(text);
    let ring = crate::runtime::export_name(&name);
    let node = format!("__export.{name}");
    graph_until(&h, "the export shown", |g| {
        g.iter().any(|n| n.label == node)
    });
    // The reader attaches before the first block (the stream is lossless, from its start).
    let (attached, on) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let tags = beltway::Reader::open(&ring, beltway::Start::Oldest).expect("open the stream");
        let mut r = beltway::IbufReader::new(tags, beltway::BufTable::new()).unwrap();
        attached.send(()).unwrap();
        let (mut seqs, mut buf) = (Vec::new(), [0u8; 2 * SIZE]);
        loop {
            match r.read(&mut buf).expect("read through") {
                0 => return seqs,
                n => {
                    assert_eq!(n, SIZE, "a whole block");
                    seqs.push(u32::from_le_bytes(buf[..4].try_into().unwrap()));
                }
            }
        }
    });
    on.recv_timeout(WAIT).expect("the reader attached");
    let shape = graph_shape(&h.graph());
    assert!(
        shape.contains(&format!("{node} [export name={name}] <- tally:{name} -> ")),
        "{shape:?}"
    );
    let edits = [
        format!("insert after tally:{name} pass"),
        "set every:half n=3".to_string(),
        "remove pass".to_string(),
        "replace every:half every n=1".to_string(),
    ];
    let mut sent = 0u32;
    for (k, e) in edits.iter().enumerate() {
        batch(&go, &ack, 10 + k as u32);
        sent += 10 + k as u32;
        h.apply(parse(e), WAIT)
            .unwrap_or_else(|x| panic!("{e}: {x}"));
    }
    // Still on the exported node after the edits around it.
    let g = graph_until(&h, "the edits shown", |g| {
        g.iter().all(|n| n.label != "pass")
    });
    let shape = graph_shape(&g);
    assert!(
        shape.contains(&format!("{node} [export name={name}] <- tally:{name} -> ")),
        "{shape:?}"
    );
    batch(&go, &ack, 20);
    sent += 20;
    drop(go);
    let rep = t.join().unwrap();
    assert_eq!(
        reader.join().unwrap(),
        (0..sent).collect::<Vec<u32>>(),
        "every block, in order"
    );
    let n = rep
        .iter()
        .find(|n| n.label == format!("tally:{name}"))
        .unwrap();
    let c = n.counters;
    assert_eq!(
        (c.blocks_in, c.blocks_out, c.drops, c.made, c.ended),
        (sent as u64, sent as u64, 0, 0, 0),
        "the exported node's counts, as without the export"
    );
    assert!(
        rep.iter().all(|n| !n.label.starts_with("__")),
        "the counters leave the export out"
    );
    assert_eq!(
        summary(&rep, &format!("tally:{name}")),
        (sent as u64, sent as u64 * SIZE as u64, 0)
    );
}
