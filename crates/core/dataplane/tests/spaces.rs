//! Thread spaces: placement, blocks crossing, and a space that dies (a panicking filter)
//! stopping the run with a report that names it.

use dataplane::channel::ChannelConfig;
use dataplane::spaces::{place, SpaceKind, Spaces};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

mod common;
use common::{graph, F};

/// One run at a time in this binary: `interrupt_releases_...` finds a space's thread by its
/// name (`sl-space1`), which every run's space 1 has; runs of other tests at the same time
/// would be found too.
static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_run() -> std::sync::MutexGuard<'static, ()> {
    ONE_RUN.lock().unwrap_or_else(|e| e.into_inner())
}

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
    let _one = one_run();
    let g = graph("src 100000 | pass space=1 | pass space=2 | sink");
    let spaces = Spaces::build(
        &g,
        &F,
        1 << 20,
        ChannelConfig {
            data: 1 << 16,
            slots: 4096,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(spaces.channels, 2);
    let rep = spaces.run(&AtomicBool::new(false), |_| {});
    assert!(
        rep.died.is_none() && !rep.failed,
        "{:?} {:?}",
        rep.died,
        rep.warnings
    );
    let sink = rep
        .nodes
        .iter()
        .find(|n| n.label == "sink")
        .expect("sink reported");
    assert_eq!(sink.summary.as_deref(), Some("sink: 100000"));
    // The report's rows are the pipeline's nodes, labelled as in one space, with the
    // space each ran in.
    assert_eq!(sink.space, "2");
    let labels: Vec<&str> = rep.nodes.iter().map(|n| n.label.as_str()).collect();
    assert_eq!(labels, ["src", "pass", "pass#2", "sink"]);
}

#[test]
fn a_panicking_space_stops_the_run_and_is_named() {
    let _one = one_run();
    // An endless source feeding a space that dies: the run must still end.
    let g = graph("src 4000000000 | pass | boom at=5000 space=1 | sink");
    let spaces = Spaces::build(&g, &F, 1 << 20, ChannelConfig::default()).unwrap();
    let t0 = Instant::now();
    let rep = spaces.run(&AtomicBool::new(false), |_| {});
    assert!(t0.elapsed() < Duration::from_secs(30));
    let died = rep.died.expect("the death is reported");
    assert!(
        died.contains("space 1 (boom, sink) died: boom after"),
        "{died}"
    );
    assert!(rep.failed);
}

/// Issue 34: a filter panicking in space 0 (the caller's thread: where a daemon worker
/// runs `rx`) unwound out of `Spaces::run` and killed the process, so a daemon's run
/// vanished without saying why. It is now caught and named as a thread space's is.
#[test]
fn a_panic_in_space_0_is_reported_not_propagated() {
    let _one = one_run();
    let g = graph("src 4000000000 | boom at=5000 | pass space=1 | sink");
    let spaces = Spaces::build(&g, &F, 1 << 20, ChannelConfig::default()).unwrap();
    let t0 = Instant::now();
    let rep = spaces.run(&AtomicBool::new(false), |_| {});
    assert!(t0.elapsed() < Duration::from_secs(30));
    let died = rep.died.expect("the death is reported");
    assert!(
        died.contains("space 0 (src, boom) died: boom after"),
        "{died}"
    );
    assert!(rep.failed);
}

/// When [`run_interrupted`] sets the interrupt.
enum When {
    /// Once the producer in space `N` (0: the thread that runs the spaces) is blocked on
    /// its full channel: asleep in the kernel (a full channel's writer sleeps in
    /// nanosleep between its looks, not on a futex).
    Blocked(u32),
    /// After a while of running (the interrupt may come at any point: none is awaited).
    After(Duration),
}

/// Run `spaces` and set the interrupt `when`; a run that does not end within 30 s of it
/// is a hang, reported by name instead of blocking the test run.
fn run_interrupted(spaces: Spaces, when: When, text: &str) -> dataplane::spaces::SpacesReport {
    let interrupt = AtomicBool::new(false);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let int = &interrupt;
    let runner = beltway::testing::this_thread();
    std::thread::scope(|s| {
        s.spawn(move || {
            // A wait that fails still interrupts the run (else the scope would hang on it).
            let waited = std::panic::catch_unwind(|| match when {
                When::After(d) => std::thread::sleep(d),
                When::Blocked(space) => {
                    let pid = std::process::id();
                    let tid = if space == 0 {
                        runner
                    } else {
                        let name = format!("sl-space{space}");
                        let t0 = std::time::Instant::now();
                        loop {
                            // The space's own thread: the first of its name (threads it
                            // starts, e.g. a Unix process' output reader, inherit its name).
                            let found = std::fs::read_dir("/proc/self/task").ok().and_then(|d| {
                                d.flatten()
                                    .filter_map(|t| {
                                        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
                                        (comm.trim() == name).then(|| t.file_name().to_str()?.parse::<u32>().ok())?
                                    })
                                    .min()
                            });
                            if let Some(t) = found {
                                break t;
                            }
                            assert!(t0.elapsed() < Duration::from_secs(30), "{text}: no thread {name} within 30 s");
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    };
                    beltway::testing::wait_asleep(pid, tid, "");
                }
            });
            if let Err(e) = waited {
                int.store(true, std::sync::atomic::Ordering::Relaxed);
                std::panic::resume_unwind(e);
            }
            int.store(true, std::sync::atomic::Ordering::Relaxed);
            if done_rx.recv_timeout(Duration::from_secs(30)).is_err() {
                eprintln!("{text}: the run did not end within 30 s of the interrupt (a producer blocked on a channel nobody reads)");
                std::process::exit(1);
            }
        });
        let rep = spaces.run(&interrupt, |_| {});
        let _ = done_tx.send(());
        rep
    })
}

/// Ctrl-C while a producer space is blocked on a full channel to a consumer that falls
/// behind: the consumer stops, leaves the channel, and the producer is released (it sees
/// the consumer gone and stops) instead of waiting forever for a reader that reads no
/// more. Both ways round: the consumer in the caller's thread (space 0), and in a thread.
/// The blocks live in lent (External) memory, as rx's do, so the channel copies them.
#[test]
fn interrupt_releases_a_producer_blocked_on_a_full_channel() {
    let _one = one_run();
    for text in [
        "xsrc 4000000000 space=1 | slow",
        "xsrc 4000000000 | pass space=1 | slow space=2",
    ] {
        let spaces = Spaces::build(
            &graph(text),
            &F,
            1 << 20,
            ChannelConfig {
                data: 1 << 16,
                slots: 4096,
                ..Default::default()
            },
        )
        .unwrap();
        // The producer: xsrc, in space 1 in the first, in space 0 (this thread) in the second.
        let producer = if text.starts_with("xsrc 4000000000 space=1") {
            1
        } else {
            0
        };
        let rep = run_interrupted(spaces, When::Blocked(producer), text);
        assert!(rep.died.is_none(), "{text}: {:?}", rep.died);
        assert!(
            rep.warnings.is_empty(),
            "{text}: a consumer leaving on interrupt is no error: {:?}",
            rep.warnings
        );
    }
}

/// Ctrl-C in a run of several spaces: the sources stop at once, but what the producing
/// spaces already sent down their channels still reaches the consumer (channels drain
/// until their producers close), so the last filter sees every block the first let out.
#[test]
fn interrupt_drains_what_producers_already_sent() {
    let _one = one_run();
    for text in [
        "xsrc 4000000000 space=1 | pass space=2 | pass",
        "xsrc 4000000000 | pass space=1 | slow space=2 | pass",
    ] {
        let spaces = Spaces::build(
            &graph(text),
            &F,
            1 << 20,
            ChannelConfig {
                data: 1 << 20,
                slots: 4096,
                ..Default::default()
            },
        )
        .unwrap();
        let rep = run_interrupted(spaces, When::After(Duration::from_millis(300)), text);
        assert!(
            rep.died.is_none() && rep.warnings.is_empty(),
            "{text}: {:?} {:?}",
            rep.died,
            rep.warnings
        );
        let node = |p: &str| {
            rep.nodes
                .iter()
                .filter(|n| n.label.starts_with(p))
                .map(|n| n.counters)
                .collect::<Vec<_>>()
        };
        let sent = node("xsrc")[0].blocks_out;
        let last = node("pass").last().unwrap().blocks_in;
        assert!(sent > 0, "{text}: nothing was sent before the interrupt");
        assert_eq!(
            last, sent,
            "{text}: blocks sent before the interrupt were lost on the way"
        );
    }
}
