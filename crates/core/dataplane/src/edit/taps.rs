//! Taps and subscriptions put on a running space's nodes.

use crate::runtime::Space;
use super::*;

impl Space {
    /// Put `tap` on the live node labelled `label` (a batch boundary: the next batch the
    /// node emits is the tap's first).
    pub(super) fn tap_on(&mut self, label: &str, tap: crate::tap::Tap) -> Result<(), EditError> {
        let i = self.live(split_space(label).0)?;
        if endpoint(&self.nodes[i].label) {
            return Err(EditError::Refused {
                label: label.to_string(),
                why: Refusal::Endpoint,
            });
        }
        self.nodes[i].watch.taps.push(tap);
        Ok(())
    }

    /// Add a subscriber to shared tap `tap` (wherever it is); `Err` if the tap is gone.
    pub(super) fn subscribe(
        &mut self,
        tap: u64,
        key: Vec<u8>,
        want: crate::tap::Want,
        sub: crate::tap::Subscriber,
    ) -> Result<(), EditError> {
        for n in &mut self.nodes {
            if let Some(t) = n.watch.taps.iter_mut().find(|t| t.id == tap) {
                t.subscribe(key, want, sub);
                return Ok(());
            }
        }
        Err(EditError::Tap(format!(
            "tap {tap} is gone (its node was removed)"
        )))
    }

    pub(super) fn unsubscribe(&mut self, sub: u64) {
        for n in &mut self.nodes {
            for t in &mut n.watch.taps {
                t.unsubscribe(sub);
            }
        }
    }

    /// Take tap `id` off whichever node has it (its readers see the end of the stream).
    pub(super) fn tap_off(&mut self, id: u64) {
        for n in &mut self.nodes {
            n.watch.taps.retain(|t| t.id != id);
        }
    }
}
