//! The process-space side of a run: started by the parent (through a [`super::Launcher`]),
//! it builds its share of the same graph, exchanges channel rings with the parent, runs
//! when told and sends its report; its build errors go back as protocol text that keeps
//! the failing node's span.

use super::place::{check_joins, place, replicate, schedule_of, SpaceId};
use super::protocol::{
    counters_text, error_text, one_line, recv_msg, recv_ring, report_text, send_msg, send_ring,
};
use super::run::apply_schedule;
use super::split::{channel_config, split, WithChannels};
use crate::channel::{egress_to, ingress, ChannelConfig};
use crate::filter::Filter;
use crate::runtime::{base_name, span_of, BuildError, BuildErrorKind, Factory, Space};
use lang::{Graph, Hint};
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The process-space side (started by [`Launcher`]): build this space's share of `g`,
/// exchange channel rings with the parent over `sock`, run when told, send the report.
/// Returns the exit status.
pub fn run_process_space(
    g: &Graph,
    factory: &dyn Factory,
    scratch: usize,
    cfg: ChannelConfig,
    id: SpaceId,
    sock: UnixStream,
) -> i32 {
    // Errors of the whole space, in words (the parent lays them on the space's filters).
    let fail = |why: String| {
        let _ = send_msg(&sock, &format!("error {}", one_line(&why)));
        2
    };
    // Errors of one node, with its span.
    let fail_build = |e: BuildError| {
        let _ = send_msg(&sock, &error_text(&e));
        2
    };
    let g = &match replicate(g, factory) {
        Ok(g) => g,
        Err(e) => return fail_build(e),
    };
    let placement = match place(g).and_then(|p| check_joins(g, &p, factory).map(|_| p)) {
        Ok(p) => p,
        Err(e) => return fail_build(e),
    };
    let (mut parts, cross) = split(g, &placement);
    let Some(part) = parts.remove(&id) else {
        return fail(format!("no filter is placed in space p{id}"));
    };
    let mut endpoints = HashMap::new();
    let mut mine = Vec::new();
    for (k, e) in cross
        .iter()
        .enumerate()
        .filter(|(_, e)| placement.space[e.from] == id)
    {
        match egress_to(&format!("sl-ch{k}"), channel_config(g, e, cfg), false, true) {
            Ok((tx, t, d)) => {
                endpoints.insert((true, k), Box::new(tx) as Box<dyn Filter>);
                mine.push((t, d));
            }
            Err(x) => {
                let n = &g.nodes[e.from];
                return fail_build(BuildError::new(
                    base_name(n),
                    span_of(n),
                    BuildErrorKind::Channel {
                        what: "cannot create a channel".into(),
                        source: x,
                    },
                ));
            }
        }
    }
    if send_msg(&sock, "rings").is_err() {
        return 3;
    }
    for (t, d) in &mine {
        if send_ring(&sock, t)
            .and_then(|_| send_ring(&sock, d))
            .is_err()
        {
            return 3;
        }
    }
    for (k, e) in cross
        .iter()
        .enumerate()
        .filter(|(_, e)| placement.space[e.to] == id)
    {
        let n = &g.nodes[e.to];
        let err = |kind: BuildErrorKind| BuildError::new(base_name(n), span_of(n), kind);
        let (t, d) = match recv_ring(&sock).and_then(|t| recv_ring(&sock).map(|d| (t, d))) {
            Ok(rings) => rings,
            Err(x) => {
                return fail_build(err(BuildErrorKind::Handover {
                    what: "channel".into(),
                    source: x,
                }))
            }
        };
        match ingress(&format!("sl-ch{k}"), &t, &d, true) {
            Ok(mut rx) => {
                rx.set_busy(
                    n.hints
                        .iter()
                        .any(|h| matches!(h, Hint::Busy | Hint::Lockstep)),
                );
                endpoints.insert((false, k), Box::new(rx) as Box<dyn Filter>);
            }
            Err(x) => {
                return fail_build(err(BuildErrorKind::Channel {
                    what: "channel".into(),
                    source: x,
                }))
            }
        }
    }
    let f = WithChannels {
        inner: factory,
        endpoints: Mutex::new(endpoints),
    };
    let labels = part.labels(&crate::runtime::run_labels(g));
    let mut space = match Space::build_labelled(&part.graph, &f, scratch, &labels) {
        Ok(s) => s,
        Err(e) => return fail_build(e),
    };
    if !mine.is_empty() {
        // Its consumers may still be working when this process ends.
        space.store().set_feeds(crate::store::Feeds::OtherSpaces);
    }
    if let Err(e) = apply_schedule(&schedule_of(g, &placement, id)) {
        return fail(e);
    }
    if send_msg(&sock, "ready").is_err() {
        return 3;
    }
    match recv_msg(&sock) {
        Ok(m) if m == "go" => {}
        _ => return 0, // the parent gave up (a build error elsewhere): nothing ran
    }
    // Stop when the parent says so or goes away.
    let interrupt = std::sync::Arc::new(AtomicBool::new(false));
    if let Ok(s) = sock.try_clone() {
        let flag = interrupt.clone();
        std::thread::spawn(move || {
            let _ = recv_msg(&s);
            flag.store(true, Ordering::Relaxed);
            crate::readiness::wake_all_spaces();
        });
    }
    // Counters while it runs (the parent shows them with its own: `ps`, `attach`), at
    // most every 200 ms, and as its loop ends (before it waits for its Unix commands); a send that fails is the parent gone, which the stop thread sees.
    let mut last = std::time::Instant::now();
    space.run(&interrupt, |s| {
        if s.ending || last.elapsed() >= std::time::Duration::from_millis(200) {
            last = std::time::Instant::now();
            let _ = send_msg(&sock, &counters_text(s));
        }
    });
    drop(f);
    if send_msg(&sock, &report_text(&space)).is_err() {
        return 3;
    }
    0
}
