//! Live edits of a worker's run (the daemon's `edit`): the text the client sent, parsed
//! and handed to the run loop, which applies it at its next quiescent point
//! (`dataplane::edit`).
//!
//! Owns: the worker's side of an edit (parse, hand over, answer in words). Does not own:
//! applying it to a running space (`dataplane::edit`).

use dataplane::spaces::{Spaces, SpacesReport};
use dataplane::{Edit, EditHandle, Space};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long an edit may wait for the run to reach a batch boundary.
const EDIT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Edits {
    handle: OnceLock<EditHandle>,
}

impl Edits {
    pub fn new() -> Arc<Edits> {
        Arc::new(Edits { handle: OnceLock::new() })
    }

    /// Apply one edit: (applied, what was done or why not, in words).
    pub fn apply(&self, text: &str) -> (bool, String) {
        let Some(h) = self.handle.get() else {
            return (false, "the run is not running yet".into());
        };
        let edit = match Edit::parse(text, &crate::resolver()) {
            Ok(e) => e,
            Err(e) => return (false, e.to_string()),
        };
        match h.apply(edit, EDIT_TIMEOUT) {
            Ok(a) => {
                let mut said = format!("applied `{text}`: {}", a.label);
                if let Some(r) = &a.retired {
                    said += &format!(" (the instance it replaced passed {} blocks", r.counters.blocks_out.max(r.counters.blocks_in));
                    if a.flushed > 0 {
                        said += &format!(", flushed {} it held", a.flushed);
                    }
                    said += ")";
                }
                (true, said)
            }
            // A filter that failed to build: the caret under the edit's text.
            Err(dataplane::EditError::Build(b)) => (false, b.render("error: ", text)),
            Err(e) => (false, e.to_string()),
        }
    }

    /// Run `spaces` taking edits as they come.
    pub fn run(&self, spaces: Spaces, interrupt: &AtomicBool, tick: impl FnMut(&Space)) -> SpacesReport {
        let h = self.handle.get_or_init(|| spaces.edit_handle());
        spaces.run_with(interrupt, h, &filters::Library, tick)
    }
}
