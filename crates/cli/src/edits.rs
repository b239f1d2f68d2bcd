//! Live edits of a worker's run (the daemon's `edit`): the text the client sent, handed to
//! the run loop at its next quiescent point.
//!
//! Owns: the worker's side of an edit (parse, hand over, answer). Does not own: applying
//! it to a running space (`dataplane`).

use dataplane::spaces::{Spaces, SpacesReport};
use dataplane::Space;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub struct Edits {}

impl Edits {
    pub fn new() -> Arc<Edits> {
        Arc::new(Edits {})
    }

    /// Apply one edit; (applied, what was done or why not).
    pub fn apply(&self, edit: &str) -> (bool, String) {
        (false, format!("edit `{edit}`: this build cannot edit a running run"))
    }

    pub fn run(&self, spaces: Spaces, interrupt: &AtomicBool, tick: impl FnMut(&Space)) -> SpacesReport {
        spaces.run(interrupt, tick)
    }
}
