//! The edit handle's hook on a space's run loop ([`Quiet`]): at the quiet point it applies
//! the edits and taps posted to the space's mailbox, moves filters across the space's
//! channels (markers from other spaces, `--chaos`), and publishes the counters and the graph.

use super::handle::EditHandle;
use super::mailbox::Mailbox;
use crate::runtime::{Factory, Hooks, Quiet, Space};

/// One space's hook: its mailbox, the factory of the filters edits insert, and the
/// channels from other spaces of this process where filters arrive and leave by markers
/// (`crate::migrate`).
struct Live<'a> {
    mailbox: &'a Mailbox,
    factory: &'a dyn Factory,
    ingresses: Vec<usize>,
}

impl Quiet for Live<'_> {
    fn start(&mut self, space: &mut Space) {
        self.mailbox.publish(space);
        self.mailbox.publish_graph(space);
        self.ingresses = space.ingresses();
        if let Some(w) = space.waker() {
            self.mailbox.set_waker(w);
        }
    }

    /// One relaxed load per round when nobody edits (the mailbox's lock orders the rest).
    fn quiet(&mut self, space: &mut Space) {
        let (mailbox, factory) = (self.mailbox, self.factory);
        if mailbox.pending() {
            mailbox.serve(space, factory);
        }
        let mut moved = !self.ingresses.is_empty()
            && space.serve_markers(&self.ingresses, mailbox.board(), factory);
        if let Some(mut chaos) = space.chaos.take() {
            moved |= space.chaos_round(&mut chaos, mailbox.board(), factory);
            space.chaos = Some(chaos);
        }
        if moved {
            mailbox.publish_graph(space);
        }
    }

    fn waiting(&self) -> bool {
        self.mailbox.pending()
    }

    fn publish(&mut self, space: &Space) {
        self.mailbox.publish(space);
    }

    /// Edits that arrive from here on are refused: the run is ending.
    fn close(&mut self, space: &mut Space) {
        self.mailbox.close();
        space.end_moves(&self.ingresses, self.mailbox.board(), self.factory);
    }
}

impl Hooks for EditHandle {
    fn hook<'a>(&'a self, space: usize, factory: &'a dyn Factory) -> Option<Box<dyn Quiet + 'a>> {
        let mailbox = self.mailbox(space)?;
        Some(Box::new(Live {
            mailbox,
            factory,
            ingresses: Vec::new(),
        }))
    }
}
