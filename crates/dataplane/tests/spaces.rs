//! Thread spaces: placement, blocks crossing, and a space that dies (a panicking filter)
//! stopping the run with a report that names it.

use dataplane::channel::ChannelConfig;
use dataplane::spaces::{place, SpaceKind, Spaces};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

mod common;
use common::{graph, F};

#[test]
fn placement_rule() {
    let g = graph("src 5 | pass space=2 | pass | sink space=p3");
    let p = place(&g).unwrap();
    assert_eq!(p.space, vec![0, 2, 2, 3]);
    assert_eq!(p.kind(2), SpaceKind::Thread);
    assert_eq!(p.kind(3), SpaceKind::Process);
    let g = graph("src 5 | pass @background | sink");
    let p = place(&g).unwrap();
    assert_eq!(p.space, vec![0, 1, 1]);
}

#[test]
fn blocks_cross_thread_spaces_in_order_and_intact() {
    let g = graph("src 100000 | pass space=1 | pass space=2 | sink");
    let spaces = Spaces::build(&g, &F, 1 << 20, ChannelConfig { data: 1 << 16, slots: 256, ..Default::default() }).unwrap();
    assert_eq!(spaces.channels, 2);
    let rep = spaces.run(&AtomicBool::new(false), |_| {});
    assert!(rep.died.is_none() && !rep.failed, "{:?} {:?}", rep.died, rep.warnings);
    let sink = rep.nodes.iter().find(|n| n.label == "sink@2").expect("sink reported");
    assert_eq!(sink.summary.as_deref(), Some("sink: 100000"));
}

#[test]
fn a_panicking_space_stops_the_run_and_is_named() {
    // An endless source feeding a space that dies: the run must still end.
    let g = graph("src 4000000000 | pass | boom at=5000 space=1 | sink");
    let spaces = Spaces::build(&g, &F, 1 << 20, ChannelConfig::default()).unwrap();
    let t0 = Instant::now();
    let rep = spaces.run(&AtomicBool::new(false), |_| {});
    assert!(t0.elapsed() < Duration::from_secs(30));
    let died = rep.died.expect("the death is reported");
    assert!(died.contains("space 1 (boom, sink) died: boom after"), "{died}");
    assert!(rep.failed);
}
