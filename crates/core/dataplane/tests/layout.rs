//! A run is placed once: a process space receives its share of the parent's layout as a
//! typed value (JSON over its socket) and builds exactly that, node ids, spans, labels
//! and channel settings included; nothing in it is derived again.

use dataplane::channel::ChannelConfig;
use dataplane::spaces::{Layout, SpaceKind};

mod common;
use common::{graph, F};

#[test]
fn a_process_space_s_share_crosses_as_json_unchanged() {
    let text = "src 1000 | pass space=p1 @latency | pass space=2,3 | pass space=p4 | sink";
    let layout = Layout::place(&graph(text), &F, ChannelConfig::default()).unwrap();
    let procs: Vec<usize> = layout
        .parts
        .keys()
        .copied()
        .filter(|&s| layout.placement.kind(s) == SpaceKind::Process)
        .collect();
    assert_eq!(procs, [1, 4], "{layout:?}");
    for id in procs {
        let share = layout.share(id, 1 << 20).unwrap();
        let json = serde_json::to_string(&share).unwrap();
        let back: dataplane::spaces::Share = serde_json::from_str(&json).unwrap();
        assert_eq!(back, share, "space p{id}");
        // Its nodes keep the parent's spans (a build error's caret) and run-wide labels.
        for (n, o) in back.part.graph.nodes.iter().zip(&back.part.origin) {
            if let Some(o) = o {
                assert_eq!(n.span, layout.graph.nodes[*o].span);
                assert_eq!(n.hints, layout.graph.nodes[*o].hints);
            }
        }
        assert!(back
            .channels
            .iter()
            .all(|(_, c)| c.from == id || c.to == id));
    }
    // The channel into p1 is configured by its consumer's `@latency`, in the parent.
    let into_p1 = layout.channels.iter().find(|c| c.to == 1).unwrap();
    assert_eq!(into_p1.config.threshold, ChannelConfig::latency().threshold);
    assert_ne!(into_p1.config, ChannelConfig::default());
}
