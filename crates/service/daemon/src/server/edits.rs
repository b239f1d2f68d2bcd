//! Live changes to a run: edits (checked as a new run would be: the policy, the grants,
//! the owner), taps and their removal.

use super::*;

impl Daemon {
    /// One live edit of run `run` by `who` (the protocol's `edit`, and PipesFS's mkdir,
    /// rmdir, mv, ln -s and option writes), as one transaction: the graph as it would be
    /// after the edit is checked against the policy as `open` checks a new run (for a
    /// client other than root), then the worker applies it, then the daemon's view
    /// follows. What was applied, or the refusal with its errno.
    pub(crate) fn edit(&self, run: u64, who: &Cred, op: EditOp) -> Result<EditApplied, Reply> {
        let r = self.run_for(run, who)?;
        if r.state() == State::Built {
            return Err(refuse(libc::EBUSY, format!("run {run} is not active yet")));
        }
        // What is said about the edit says it with its secrets redacted.
        let shown = catalog::shown(&op.to_string());
        // Parsed once, here, as `open` parses (a name that is not a native filter is a
        // command, which no edit may add): the worker applies this value.
        let e = lang::edit::Edit::from_op(&op, &lang::OrCommand(catalog::Natives))
            .map_err(|e| refuse(libc::EINVAL, e.to_string()))?;
        let _one_at_a_time = r.editing.lock().expect("not poisoned");
        let (after, expect) = {
            let view = r.view.lock().expect("not poisoned");
            self.check_edit(&view, who, &op, &e)?
        };
        let eid = r.next_edit.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        r.edits.lock().expect("not poisoned").insert(eid, tx);
        r.tell(ToWorker::Edit {
            edit_id: eid,
            edit: op.clone(),
            checked: e,
            expect,
        })
        .map_err(|e| refuse(libc::EIO, format!("run {run}: {e}")))?;
        let answer = rx.recv_timeout(Duration::from_secs(30));
        let mut view = r.view.lock().expect("not poisoned");
        let result = match answer {
            Ok(Ok(applied)) => {
                match after {
                    Some(v) => *view = v,
                    None => {
                        view.edited = true;
                        view.lost = true;
                    }
                }
                let mut edited = r.edited.lock().expect("not poisoned");
                edited.0 += 1;
                edited.1 = shown.scrub(&applied.edit.to_string());
                Ok(applied)
            }
            Ok(Err((errno, text))) => Err(refuse(
                if errno == 0 { libc::EINVAL } else { errno },
                shown.scrub(&text),
            )),
            Err(_) => {
                r.edits.lock().expect("not poisoned").remove(&eid);
                // It may yet apply: the view no longer knows the graph.
                view.edited = true;
                view.lost = true;
                Err(refuse(
                    libc::EBUSY,
                    format!(
                        "run {run} did not apply the edit `{}` (it ended, or is stalled)",
                        shown.text()
                    ),
                ))
            }
        };
        audit::edited(
            who,
            run,
            shown.text(),
            &result
                .as_ref()
                .map(|a| shown.scrub(&a.to_string()))
                .map_err(Clone::clone),
        );
        result
    }

    /// Check edit `op` (parsed: `e`) of the run whose view is `view` for `who`: the view
    /// after it (None where the view cannot follow it), and the filter text of each node
    /// it names, for the worker to check it edits the nodes the daemon checked.
    ///
    /// For a client other than root: a new instance of a filter that needs a privilege
    /// (insert, replace, branch, or `set` on one) is refused with EPERM (the daemon lends
    /// privileged sockets only when a run starts); the graph after the edit must pass
    /// `Policy::check` (EACCES otherwise, naming the node and the templates). In a run
    /// that holds a privileged filter the edit must name nodes the view knows, each with
    /// no other node of the same filter text (a label the runtime numbers otherwise
    /// could name it).
    pub(super) fn check_edit(
        &self,
        view: &View,
        who: &Cred,
        op: &EditOp,
        e: &lang::edit::Edit,
    ) -> Result<(Option<View>, Vec<(String, String)>), Reply> {
        let privileged = |f: &str| catalog::find(f).and_then(|s| s.privilege);
        let policy = &self.cfg.policy;
        let guarded = !who.root() && view.privileged(&privileged);
        let templates = || {
            let t = policy.templates_for(who);
            if t.is_empty() {
                format!("{} grants uid {} no template", policy.source(), who.uid)
            } else {
                format!(
                    "{} grants uid {} these templates: {}",
                    policy.source(),
                    who.uid,
                    t.join("; ")
                )
            }
        };
        let denied = |errno: i32, why: String| refuse(errno, format!("edit `{op}` refused: {why}"));
        // The new filter an edit makes, whatever the view knows.
        let new_filter = match e {
            lang::edit::Edit::Insert { filter, .. }
            | lang::edit::Edit::Replace { filter, .. }
            | lang::edit::Edit::Branch { filter, .. } => Some(filter),
            _ => None,
        };
        if !who.root() {
            if let Some(NodeKind::Filter { filter, .. }) = new_filter.map(|f| &f.kind) {
                if let Some(cap) = privileged(filter) {
                    return Err(denied(libc::EPERM, format!("the new {filter} needs {cap}, which no live edit can add: the daemon lends privileged sockets to a run only when it starts, so start a run with it instead ({})", templates())));
                }
            }
        }
        if guarded && view.lost {
            return Err(denied(libc::EACCES, format!("the daemon lost track of the run's graph (an earlier edit did not answer), so it cannot check edits of a run with a privileged filter ({})", templates())));
        }
        let mut expect = Vec::new();
        for l in op.labels() {
            match view.resolve(l) {
                Some(i) => {
                    if guarded {
                        if let Some(j) = view.twin(i) {
                            return Err(denied(libc::EACCES, format!("{l} has the same filter as {} ({}), and in a run with a privileged filter an edit must name one node for certain; give the node a name= when the run starts", view.label(j), view.text(i))));
                        }
                    }
                    expect.push((l.to_string(), view.text(i)));
                }
                None if guarded => {
                    return Err(denied(libc::EACCES, format!("no node {l} in the graph the daemon checked for this run (there: {}), so the edit cannot be checked against {}", view.text_now(), templates())));
                }
                None => {}
            }
        }
        let after = match view.after(e) {
            Ok((after, made)) => {
                if !who.root() {
                    for m in made {
                        if let NodeKind::Filter { filter, .. } = &after.graph().nodes[m].kind {
                            if let Some(cap) = privileged(filter) {
                                return Err(denied(libc::EPERM, format!("it makes {} ({}) afresh, which needs {cap}, which no live edit can add: the daemon lends privileged sockets to a run only when it starts ({})", after.label(m), after.text(m), templates())));
                            }
                        }
                    }
                    policy.check(after.graph(), who, &privileged).map_err(|d| {
                        denied(
                            libc::EACCES,
                            format!(
                                "after it, node {} ({}) {}",
                                after.label(d.id),
                                after.text(d.id),
                                d.why
                            ),
                        )
                    })?;
                }
                Some(after)
            }
            Err(u) if guarded => return Err(denied(libc::EACCES, u.0)),
            Err(_) => None,
        };
        // Only a run with a privileged filter needs its worker to edit exactly the nodes
        // checked; elsewhere labels of several spaces may number otherwise, harmlessly.
        if !guarded {
            expect.clear();
        }
        Ok((after, expect))
    }

    /// Tap a node of run `run` (PipesFS opened its `all`). The access check is the
    /// caller's (the stream's mode).
    pub(crate) fn tap(&self, run: u64, node: &str, filter: Option<&TapFilter>) -> TapAnswer {
        let r = self
            .runs
            .lock()
            .expect("not poisoned")
            .get(&run)
            .cloned()
            .ok_or((libc::ENOENT, format!("no run {run}")))?;
        let req = r.next_edit.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        r.taps.lock().expect("not poisoned").insert(req, tx);
        // A node the user wrote: the member its blocks leave from (a replica's join).
        let at = r
            .tap_at
            .lock()
            .expect("not poisoned")
            .iter()
            .find(|(u, _)| u == node)
            .map_or_else(|| node.to_string(), |(_, t)| t.clone());
        r.tell(ToWorker::Tap {
            tap_req: req,
            node: at,
            filter: filter.cloned(),
        })
        .map_err(|e| (libc::EIO, format!("run {run}: {e}")))?;
        match rx.recv_timeout(Duration::from_secs(15)) {
            Ok(a) => a,
            Err(_) => {
                r.taps.lock().expect("not poisoned").remove(&req);
                Err((
                    libc::EBUSY,
                    format!("run {run} did not tap {node} (it ended, or is stalled)"),
                ))
            }
        }
    }

    /// Take a tap off (no answer is waited for).
    pub(crate) fn untap(&self, run: u64, tap: u64) {
        if let Some(r) = self.runs.lock().expect("not poisoned").get(&run).cloned() {
            let _ = r.tell(ToWorker::Untap { tap });
        }
    }
}
