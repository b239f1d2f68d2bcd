//! The `rings` subcommand: beltway rings against their peers, after the thesis figures.
//!
//! | module       | experiment                                             | thesis   |
//! |--------------|--------------------------------------------------------|----------|
//! | [`copy`]     | copy throughput vs. Unix pipe and an SPSC thread ring | Fig 7.1  |
//! | [`forward`]  | zero-copy forwarding: splice vs. copy                  | Fig 4.4  |
//! | [`batching`] | event moderation thresholds                            | Fig 5.2  |
//! | [`deckcut`]  | self-scaling (deck-cut) vs. static and fixed sizes     | Fig 4.8  |
//!
//! [`transfer`] owns the mechanics shared by the cross-process experiments.

mod batching;
mod copy;
mod deckcut;
mod forward;
mod transfer;

use crate::util::{remove_stale_rings, watchdog, Plan, Result, Summary};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Timed repetitions per configuration (the fastest counts); ignored with --quick.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Run only these experiments.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Experiment>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Experiment {
    Copy,
    Forward,
    Batching,
    Deckcut,
}

pub fn run(a: &Args, quick: bool) -> Result<()> {
    remove_stale_rings();
    // A wedged experiment must fail the run, not hang CI. Children die with us.
    watchdog(if quick {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(20 * 60)
    });
    let plan = Plan::new(quick, a.reps);
    let selected = |e| a.only.is_empty() || a.only.contains(&e);
    let mut summary = Summary::default();
    println!(
        "streamline-bench rings ({} mode): {} CPUs; writer pinned to CPU {}, reader to CPU {}",
        if quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        transfer::WRITER_CPU,
        transfer::READER_CPU
    );
    if quick {
        println!(
            "quick mode: tiny volumes, one fully verified run each; numbers are not measurements"
        );
    } else {
        println!("each configuration: one fully verified run at 1/4 volume (not counted), then the best of {} timed runs", plan.reps);
    }
    if selected(Experiment::Copy) {
        copy::run(&plan, &mut summary)?;
    }
    if selected(Experiment::Forward) {
        forward::run(&plan, &mut summary)?;
    }
    if selected(Experiment::Batching) {
        batching::run(&plan, &mut summary)?;
    }
    if selected(Experiment::Deckcut) {
        deckcut::run(&plan, &mut summary)?;
    }
    summary.print()?;
    Ok(())
}
