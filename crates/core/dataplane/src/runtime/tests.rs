use super::route::recycle;
use super::*;

/// `tcp | deflate space=1,2 |1 count`: the split, the two copies and the join fold
/// into one `deflate` row whose blocks in are what tcp sent it, whose out is what
/// reached count, whose drops include what the selector after the join dropped (the
/// loss an earlier fold made), and which adds up.
#[test]
fn rows_follow_the_pipeline_and_an_inserted_node_its_input() {
    let row = |label: &str| NodeReport {
        label: label.into(),
        counters: Counters::default(),
        summary: None,
        classes: vec![],
        space: String::new(),
    };
    let arc = |from: &str, to: &str| ArcReport {
        from: from.into(),
        to: ArcTarget::Node(to.into()),
        carried: Carried::default(),
        rings: vec![],
    };
    // Space 0 (gen, count, an inserted dedup#2 after gen), then space 1 (dedup).
    let rows = vec![row("gen"), row("count"), row("dedup#2"), row("dedup")];
    let arcs = [
        arc("gen", "dedup#2"),
        arc("dedup#2", "count"),
        arc("count", "dedup"),
    ];
    let order = user_order(&[
        "gen".into(),
        "count".into(),
        "dedup".into(),
        "dedup~2".into(),
        "__publish".into(),
    ]);
    assert_eq!(order, ["gen", "count", "dedup"]);
    let got: Vec<String> = in_order(rows, &arcs, &order)
        .into_iter()
        .map(|r| r.label)
        .collect();
    assert_eq!(got, ["gen", "dedup#2", "count", "dedup"]);
}

#[test]
fn an_internal_nodes_summary_is_said_by_the_users_node() {
    let n = NodeReport {
        label: "bpf".into(),
        counters: Counters::default(),
        summary: Some("__subscribe: 10 blocks received, lost 0 blocks to a full ring (subscriber fell behind)".into()),
        classes: vec![],
        space: String::new(),
    };
    let (rows, _) = fold_internal(&[n], &[]);
    assert_eq!(
        rows[0].summary.as_deref(),
        Some("bpf: 10 blocks received, lost 0 blocks to a full ring (subscriber fell behind)")
    );
}

/// Two capture engines that got the same share of the flows say the same words: the
/// user's row keeps both lines (one per engine), not one (the `live` test
/// `multiqueue_engines_share_the_interface_flow_by_flow` counts them).
#[test]
fn copies_that_say_the_same_keep_a_line_each() {
    let engine = |label: &str| NodeReport {
        label: label.into(),
        counters: Counters::default(),
        summary: Some("rx veth0: 640 packets delivered, 640 seen by the kernel socket".into()),
        classes: vec![],
        space: String::new(),
    };
    let (rows, _) = fold_internal(&[engine("rx@1"), engine("rx~2@2")], &[]);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].summary.as_deref().map(|s| s.lines().count()),
        Some(2)
    );
}

#[test]
fn replicas_split_and_join_fold_into_the_users_node() {
    let row = |label: &str, i: u64, o: u64, d: u64, m: u64, e: u64| NodeReport {
        label: label.into(),
        counters: Counters {
            blocks_in: i,
            bytes_in: i * 10,
            blocks_out: o,
            bytes_out: o * 10,
            drops: d,
            made: m,
            ended: e,
            nanos: 1,
            lost: 0,
        },
        summary: None,
        classes: vec![],
        space: String::new(),
    };
    let arc = |from: &str, to: &str, b: u64| ArcReport {
        from: from.into(),
        to: ArcTarget::Node(to.into()),
        carried: Carried {
            blocks: b,
            bytes: b * 10,
        },
        rings: vec![],
    };
    let nodes = [
        row("tcp@0", 100, 90, 10, 0, 0),
        row("deflate~split@0", 90, 90, 0, 0, 0),
        row("deflate@1", 45, 45, 0, 0, 0),
        row("deflate~2@2", 45, 45, 0, 0, 0),
        row("deflate~join@1", 90, 60, 30, 7, 7),
        row("count@1", 60, 0, 0, 0, 60),
    ];
    let arcs = [
        arc("tcp@0", "deflate~split@0", 90),
        arc("deflate~split@0", "deflate@1", 45),
        arc("deflate~split@0", "deflate~2@2", 45),
        arc("deflate@1", "deflate~join@1", 45),
        arc("deflate~2@2", "deflate~join@1", 45),
        arc("deflate~join@1", "count@1", 60),
    ];
    let (rows, arcs) = fold_internal(&nodes, &arcs);
    let labels: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.label.as_str(), r.space.as_str()))
        .collect();
    assert_eq!(labels, [("tcp", "0"), ("deflate", "1,2"), ("count", "1")]);
    let d = rows[1].counters;
    assert_eq!(
        (
            d.blocks_in,
            d.bytes_in,
            d.blocks_out,
            d.bytes_out,
            d.drops,
            d.made,
            d.ended,
            d.nanos
        ),
        (90, 900, 60, 600, 30, 0, 0, 4)
    );
    assert_eq!(d.blocks_out, d.blocks_in - d.drops + d.made - d.ended);
    let arcs: Vec<(&str, String, u64)> = arcs
        .iter()
        .map(|a| (a.from.as_str(), format!("{:?}", a.to), a.carried.blocks))
        .collect();
    assert_eq!(
        arcs,
        [
            (
                "tcp",
                format!("{:?}", ArcTarget::Node("deflate".into())),
                90
            ),
            (
                "deflate",
                format!("{:?}", ArcTarget::Node("count".into())),
                60
            )
        ]
    );
}

#[test]
fn recycling_keeps_the_allocation() {
    let bytes = [1u8; 64];
    let mut v: Vec<&[u8]> = Vec::with_capacity(BATCH);
    let at = v.as_ptr() as usize;
    v.extend(bytes.chunks(8));
    let w: Vec<&'static [u8]> = recycle(v);
    assert!(w.is_empty());
    assert_eq!((w.as_ptr() as usize, w.capacity()), (at, BATCH));
}
