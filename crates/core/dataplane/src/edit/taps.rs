//! Taps and subscriptions put on a running space's nodes.

use super::*;
use crate::runtime::Space;
use crate::tap::TAP;
use lang::Selector;

impl Space {
    /// Put `tap` on the live node labelled `label` (a batch boundary: the next batch the
    /// node emits is the tap's first): a tap node on a new out-arc of it, in a slot an
    /// earlier tap left if there is one.
    pub(super) fn tap_on(&mut self, label: &str, tap: crate::tap::Tap) -> Result<(), EditError> {
        let i = self.live(split_space(label).0)?;
        if endpoint(&self.nodes[i].label) || self.nodes[i].filter.observes() {
            return Err(EditError::Refused {
                label: label.to_string(),
                why: if endpoint(&self.nodes[i].label) {
                    Refusal::Endpoint
                } else {
                    Refusal::Observer
                },
            });
        }
        let node = tap_node(tap);
        let free = (0..self.nodes.len()).find(|&j| {
            self.nodes[j].removed
                && self.nodes[j].label.starts_with(TAP)
                && self.in_arcs(j).is_empty()
        });
        let t = match free {
            Some(j) => {
                self.nodes[j] = node;
                j
            }
            None => self.add_node(node),
        };
        self.add_arc(i, t, Selector::All, 0);
        self.nodes[i].watch.tapped += 1;
        Ok(())
    }

    /// The tap nodes' indices and their taps; `working`: only taps that have not
    /// stopped (a stopped tap takes no subscriber: the next one makes a new tap).
    fn taps(&mut self, working: bool) -> impl Iterator<Item = (usize, &mut crate::tap::Tap)> {
        self.nodes
            .iter_mut()
            .enumerate()
            .filter(move |(_, n)| !n.removed && (!working || n.filter.accepts()))
            .filter_map(|(j, n)| crate::tap::as_tap(n.filter.as_mut()).map(|t| (j, t)))
    }

    /// Add a subscriber to shared tap `tap` (wherever it is); `Err` if the tap is gone.
    /// The node it taps learns what its readers want now ([`Space::tell_readers`]).
    pub(super) fn subscribe(
        &mut self,
        tap: u64,
        program: crate::tap::Program,
        sub: crate::tap::Subscriber,
    ) -> Result<(), EditError> {
        let found = self.taps(true).find(|(_, t)| t.id == tap).map(|(j, t)| {
            t.subscribe(program, sub);
            j
        });
        match found {
            Some(j) => {
                for (from, _) in self.in_arcs(j) {
                    self.tell_readers(from);
                }
                Ok(())
            }
            None => Err(EditError::Tap(format!(
                "tap {tap} is gone (its node was removed, or it stopped)"
            ))),
        }
    }

    pub(super) fn unsubscribe(&mut self, sub: u64) {
        let mut from = Vec::new();
        let taps: Vec<usize> = self
            .taps(false)
            .filter_map(|(j, t)| t.unsubscribe(sub).then_some(j))
            .collect();
        for j in taps {
            from.extend(self.in_arcs(j).into_iter().map(|(f, _)| f));
        }
        for f in from {
            self.tell_readers(f);
        }
    }

    /// Tell node `i` what the readers of the taps on its output want now (the union of
    /// their programs, `None` for everything; [`crate::Filter::readers_want`]): a capture
    /// that serves only them leaves the rest in the kernel. A stopped tap's readers get
    /// nothing more and want nothing.
    pub(super) fn tell_readers(&mut self, i: usize) {
        let outs: Vec<usize> = self.nodes[i].out.iter().map(|a| a.to).collect();
        let mut programs: Option<Vec<crate::tap::Program>> = Some(Vec::new());
        for j in outs {
            let n = &mut self.nodes[j];
            if n.removed || !n.filter.accepts() {
                continue;
            }
            if let Some(t) = crate::tap::as_tap(n.filter.as_mut()) {
                match (t.wants(), &mut programs) {
                    (Some(w), Some(p)) => p.extend(w.into_iter().map(|x| x.to_vec())),
                    _ => programs = None,
                }
            }
        }
        let refs: Option<Vec<&[protocol::proto::BpfInsn]>> = programs
            .as_ref()
            .map(|p| p.iter().map(|x| x.as_slice()).collect());
        self.nodes[i].filter.readers_want(refs.as_deref());
    }

    /// Take tap `id` off the node it reads (its readers see the end of the stream): its
    /// arc goes, and its node is left a removed slot the next tap may take.
    pub(super) fn tap_off(&mut self, id: u64) {
        let Some(j) = self.taps(false).find(|(_, t)| t.id == id).map(|(j, _)| j) else {
            return;
        };
        let arcs = self.in_arcs(j);
        for &(from, _) in &arcs {
            self.nodes[from].watch.tapped = self.nodes[from].watch.tapped.saturating_sub(1);
        }
        self.take_arcs(arcs.clone(), j);
        let n = &mut self.nodes[j];
        n.filter = Box::new(crate::runtime::PassThrough);
        n.removed = true;
        for (from, _) in arcs {
            self.tell_readers(from);
        }
    }
}

/// A node for `tap` (see [`crate::tap::TapNode`]).
fn tap_node(tap: crate::tap::Tap) -> crate::runtime::RtNode {
    let (label, options) = (
        format!("{TAP}{}", tap.id),
        vec![("id".into(), tap.id.to_string())],
    );
    crate::runtime::RtNode::own(
        label,
        "tap",
        options,
        Box::new(crate::tap::TapNode::new(tap)),
    )
}
