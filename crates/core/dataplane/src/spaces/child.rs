//! The process-space side of a run: started by the parent (through a [`super::Launcher`]),
//! it receives its [`Share`] of the run (its part of the placed graph and its channels, as
//! a typed value: nothing is parsed, rewritten or placed here), exchanges channel rings
//! with the parent, runs when told and sends its report; its build errors go back as
//! protocol text that keeps the failing node's span.

use super::place::{schedule_in, SpaceId};
use super::protocol::{
    counters_text, error_text, one_line, recv_msg, recv_ring, recv_share, report_text, send_msg,
    send_ring,
};
use super::run::apply_schedule;
use super::split::{Share, WithChannels};
use crate::channel::{egress_to, ingress};
use crate::filter::Filter;
use crate::runtime::{BuildError, BuildErrorKind, Factory, Space};
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The process-space side (started by [`super::Launcher`] as space `id`): receive this
/// space's share of the run over `sock`, exchange channel rings with the parent, build,
/// run when told, send the report. Returns the exit status.
pub fn run_process_space(factory: &dyn Factory, id: SpaceId, sock: UnixStream) -> i32 {
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
    let Share {
        space,
        part,
        channels,
        scratch,
    } = match recv_share(&sock) {
        Ok(s) => s,
        Err(e) => return fail(format!("process space p{id}: its share of the run: {e}")),
    };
    if space != id {
        return fail(format!(
            "process space p{id} was sent the share of space {space}"
        ));
    }
    let mut endpoints = HashMap::new();
    let mut mine = Vec::new();
    for (k, c) in channels.iter().filter(|(_, c)| c.from == id) {
        match egress_to(&format!("sl-ch{k}"), c.config, false, true) {
            Ok((tx, t, d)) => {
                endpoints.insert((true, *k), Box::new(tx) as Box<dyn Filter>);
                mine.push((t, d));
            }
            Err(x) => {
                let (label, span) = c.producer.clone();
                return fail_build(BuildError::new(
                    label,
                    span,
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
    for (k, c) in channels.iter().filter(|(_, c)| c.to == id) {
        let (label, span) = c.consumer.clone();
        let err = |kind: BuildErrorKind| BuildError::new(label.clone(), span, kind);
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
                rx.set_busy(c.busy);
                endpoints.insert((false, *k), Box::new(rx) as Box<dyn Filter>);
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
    let mut space = match Space::build_labelled(&part.graph, &f, scratch, &part.labels) {
        Ok(s) => s,
        Err(e) => return fail_build(e),
    };
    if !mine.is_empty() {
        // Its consumers may still be working when this process ends.
        space.store().set_feeds(crate::store::Feeds::OtherSpaces);
    }
    if let Err(e) = apply_schedule(&schedule_in(&part.graph.nodes.iter().collect::<Vec<_>>())) {
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
