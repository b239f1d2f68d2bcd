//! Construction as transactions (thesis 6.4): a failure injected at every step of a
//! multi-space build undoes all earlier steps. Alone in its binary, so the mappings and
//! descriptors it counts are its own.

use dataplane::channel::ChannelConfig;
use dataplane::spaces::{Layout, Spaces};
use std::sync::atomic::AtomicBool;

mod common;
use common::{graph, F};

/// This process's mappings of shared segments (memfd rings and /dev/shm) and its open
/// descriptors: what a rolled-back build must give back.
fn held() -> (usize, usize) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let shared = maps
        .lines()
        .filter(|l| l.contains("memfd:") || l.contains("/dev/shm/"))
        .count();
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    (shared, fds)
}

#[test]
fn a_failure_at_any_construction_step_rolls_back_everything() {
    // Three thread spaces, two channels (each a tag IBuf and a data ring in shared memory).
    let g = graph("src 1000 | pass space=1 | pass space=2 | sink");
    let cfg = ChannelConfig {
        data: 1 << 16,
        slots: 256,
        ..Default::default()
    };
    let layout = Layout::place(&g, &F, cfg).unwrap();
    let all = match Spaces::build_steps(&layout, &F, 1 << 20, None, Some(usize::MAX)) {
        Err(e) => e.why(),
        Ok(_) => panic!("a failure past the last step still fails"),
    };
    let n: usize = all
        .split("the build has ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{all}"));
    // 2 channels created, 2 attached, 3 spaces built.
    assert_eq!(n, 7, "{all}");
    // The only test of this binary: nothing else maps rings meanwhile.
    for k in 0..n {
        let before = held();
        let e = match Spaces::build_steps(&layout, &F, 1 << 20, None, Some(k)) {
            Err(e) => e,
            Ok(_) => panic!("step {k} was to fail"),
        };
        assert!(
            e.why()
                .contains(&format!("injected failure at construction step {k}")),
            "{}",
            e.why()
        );
        if k > 0 {
            assert!(e.why().contains("rolled back: "), "step {k}: {}", e.why());
        }
        assert_eq!(
            held(),
            before,
            "step {k}: mappings or descriptors left behind ({})",
            e.why()
        );
    }
    // And the same build without a fault runs.
    let rep = Spaces::build_steps(&layout, &F, 1 << 20, None, None)
        .unwrap()
        .run(&AtomicBool::new(false), |_| {});
    assert!(rep
        .nodes
        .iter()
        .any(|n| n.summary.as_deref() == Some("sink: 1000")));
}
