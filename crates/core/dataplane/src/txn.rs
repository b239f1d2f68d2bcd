//! Construction as transactions (thesis 6.4): building a pipeline is a sequence of
//! micro-calls (open, connect, export, activate, ...), each logged with its inverse. A
//! failing step rolls back every earlier step in reverse order; a transaction dropped
//! without [`Transaction::commit`] (a crashed or abandoned client) rolls back too.
//!
//! Generic over a context `C` that the steps act on (a runtime, a registry, a test's
//! record of calls).

use std::fmt;

type Undo<C> = Box<dyn FnOnce(&mut C)>;

/// A step failed; everything before it was undone.
#[derive(Debug)]
pub struct StepFailed<E> {
    /// The failing step's name.
    pub step: String,
    pub error: E,
    /// The steps undone, in the order they were undone.
    pub undone: Vec<String>,
}

impl<E: fmt::Display> fmt::Display for StepFailed<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "construction step '{}' failed: {}",
            self.step, self.error
        )?;
        if !self.undone.is_empty() {
            write!(f, " (rolled back: {})", self.undone.join(", "))?;
        }
        Ok(())
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for StepFailed<E> {}

/// The construction log.
pub struct Transaction<C> {
    ctx: Option<C>,
    log: Vec<(String, Undo<C>)>,
}

impl<C> Transaction<C> {
    pub fn new(ctx: C) -> Transaction<C> {
        Transaction {
            ctx: Some(ctx),
            log: Vec::new(),
        }
    }

    /// Runs `act`; on success logs `undo` (given what `act` returned) and returns the
    /// value; on failure undoes all earlier steps, last first, and returns the error.
    pub fn step<T: Clone + 'static, E>(
        &mut self,
        name: impl Into<String>,
        act: impl FnOnce(&mut C) -> Result<T, E>,
        undo: impl FnOnce(&mut C, T) + 'static,
    ) -> Result<T, StepFailed<E>> {
        let name = name.into();
        let ctx = self
            .ctx
            .as_mut()
            .expect("a live transaction has its context");
        match act(ctx) {
            Ok(v) => {
                let kept = v.clone();
                self.log
                    .push((name, Box::new(move |c: &mut C| undo(c, kept))));
                Ok(v)
            }
            Err(error) => {
                let undone = self.unwind();
                Err(StepFailed {
                    step: name,
                    error,
                    undone,
                })
            }
        }
    }

    /// Steps done so far.
    pub fn len(&self) -> usize {
        self.log.len()
    }

    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }

    pub fn context(&self) -> &C {
        self.ctx
            .as_ref()
            .expect("a live transaction has its context")
    }

    fn unwind(&mut self) -> Vec<String> {
        let ctx = self
            .ctx
            .as_mut()
            .expect("a live transaction has its context");
        let mut undone = Vec::with_capacity(self.log.len());
        while let Some((name, undo)) = self.log.pop() {
            undo(ctx);
            undone.push(name);
        }
        undone
    }

    /// Keeps everything built; returns the context.
    pub fn commit(mut self) -> C {
        self.log.clear();
        self.ctx.take().expect("a live transaction has its context")
    }

    /// Undoes everything, last first; returns the context.
    pub fn rollback(mut self) -> C {
        self.unwind();
        self.ctx.take().expect("a live transaction has its context")
    }
}

impl<C> Drop for Transaction<C> {
    fn drop(&mut self) {
        if self.ctx.is_some() {
            self.unwind();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A toy runtime: open filters, connected streams, a call journal.
    #[derive(Default, Debug, Clone, PartialEq)]
    struct Rt {
        open: Vec<String>,
        links: Vec<(usize, usize)>,
        active: bool,
        journal: Vec<String>,
    }

    /// Builds `names` as a chain: open each, connect neighbours, activate. Fails at
    /// step `fail_at` (counting from 0) if given.
    fn build(rt: Rt, names: &[&str], fail_at: Option<usize>) -> Result<Rt, (String, Rt)> {
        let shared: Rc<RefCell<Option<String>>> = Rc::new(RefCell::new(None));
        let mut t = Transaction::new(rt);
        let mut k = 0usize;
        let check = |k: &mut usize| -> Result<(), String> {
            let here = *k;
            *k += 1;
            if Some(here) == fail_at {
                Err(format!("injected failure at step {here}"))
            } else {
                Ok(())
            }
        };
        let mut ids = Vec::new();
        for n in names {
            let n = n.to_string();
            let id = t
                .step(
                    format!("open {n}"),
                    |rt: &mut Rt| {
                        check(&mut k)?;
                        rt.open.push(n.clone());
                        rt.journal.push(format!("open {n}"));
                        Ok(rt.open.len() - 1)
                    },
                    |rt, id| {
                        let gone = rt.open.remove(id);
                        rt.journal.push(format!("close {gone}"));
                    },
                )
                .map_err(|e: StepFailed<String>| e.to_string());
            match id {
                Ok(id) => ids.push(id),
                Err(e) => {
                    *shared.borrow_mut() = Some(e);
                    break;
                }
            }
        }
        if shared.borrow().is_none() {
            for w in ids.windows(2) {
                let (a, b) = (w[0], w[1]);
                if let Err(e) = t.step(
                    format!("connect {a}->{b}"),
                    |rt: &mut Rt| {
                        check(&mut k)?;
                        rt.links.push((a, b));
                        rt.journal.push(format!("connect {a}->{b}"));
                        Ok::<(), String>(())
                    },
                    move |rt, ()| {
                        rt.links.retain(|l| *l != (a, b));
                        rt.journal.push(format!("disconnect {a}->{b}"));
                    },
                ) {
                    *shared.borrow_mut() = Some(e.to_string());
                    break;
                }
            }
        }
        if shared.borrow().is_none() {
            if let Err(e) = t.step(
                "activate",
                |rt: &mut Rt| {
                    check(&mut k)?;
                    rt.active = true;
                    Ok::<(), String>(())
                },
                |rt, ()| rt.active = false,
            ) {
                *shared.borrow_mut() = Some(e.to_string());
            }
        }
        let err = shared.borrow_mut().take();
        match err {
            None => Ok(t.commit()),
            Some(e) => Err((e, t.commit())),
        }
    }

    #[test]
    fn success_keeps_everything() {
        let rt = build(Rt::default(), &["rx", "ip", "count"], None).unwrap();
        assert_eq!(rt.open, vec!["rx", "ip", "count"]);
        assert_eq!(rt.links, vec![(0, 1), (1, 2)]);
        assert!(rt.active);
    }

    #[test]
    fn a_failure_at_every_step_rolls_back_completely() {
        let names = ["rx", "ip", "tcp", "count"];
        // 4 opens + 3 connects + 1 activate.
        let steps = names.len() * 2;
        for fail_at in 0..steps {
            let before = Rt {
                journal: vec![],
                ..Rt::default()
            };
            let (err, after) = build(before.clone(), &names, Some(fail_at)).unwrap_err();
            assert!(
                err.contains(&format!("injected failure at step {fail_at}")),
                "{err}"
            );
            assert!(after.open.is_empty(), "step {fail_at}: {after:?}");
            assert!(after.links.is_empty(), "step {fail_at}: {after:?}");
            assert!(!after.active);
            // The undo journal mirrors the do journal in reverse.
            let n = after.journal.len() / 2;
            let (done, undone) = after.journal.split_at(n);
            let inverse: Vec<String> = done
                .iter()
                .rev()
                .map(|d| {
                    d.replacen("open", "close", 1)
                        .replacen("connect", "disconnect", 1)
                })
                .collect();
            // Close messages name the filter: map ids back.
            assert_eq!(undone.len(), inverse.len(), "step {fail_at}");
            for (u, i) in undone.iter().zip(&inverse) {
                assert_eq!(u, i, "step {fail_at}");
            }
        }
    }

    #[test]
    fn failure_reports_the_step_and_what_was_undone() {
        let mut t = Transaction::new(Vec::<u32>::new());
        t.step(
            "push 1",
            |v: &mut Vec<u32>| {
                v.push(1);
                Ok::<_, String>(())
            },
            |v, ()| {
                v.pop();
            },
        )
        .unwrap();
        t.step(
            "push 2",
            |v: &mut Vec<u32>| {
                v.push(2);
                Ok::<_, String>(())
            },
            |v, ()| {
                v.pop();
            },
        )
        .unwrap();
        let e = t
            .step(
                "push 3",
                |_v: &mut Vec<u32>| Err::<(), _>("no room".to_string()),
                |_, ()| {},
            )
            .unwrap_err();
        assert_eq!(e.step, "push 3");
        assert_eq!(e.undone, vec!["push 2", "push 1"]);
        assert_eq!(
            e.to_string(),
            "construction step 'push 3' failed: no room (rolled back: push 2, push 1)"
        );
        assert!(t.is_empty());
        assert!(t.context().is_empty());
    }

    #[test]
    fn dropping_an_uncommitted_transaction_rolls_back() {
        let log = Rc::new(RefCell::new(Vec::new()));
        {
            let mut t = Transaction::new(());
            for i in 0..3 {
                let l = log.clone();
                t.step(
                    format!("s{i}"),
                    |_| Ok::<_, ()>(i),
                    move |_, i| l.borrow_mut().push(i),
                )
                .unwrap();
            }
            assert_eq!(t.len(), 3);
        }
        assert_eq!(*log.borrow(), vec![2, 1, 0]);
    }

    #[test]
    fn explicit_rollback_and_commit() {
        let mut t = Transaction::new(vec![0]);
        t.step(
            "a",
            |v: &mut Vec<i32>| {
                v.push(1);
                Ok::<_, ()>(())
            },
            |v, ()| {
                v.pop();
            },
        )
        .unwrap();
        assert_eq!(t.rollback(), vec![0]);
        let mut t = Transaction::new(vec![0]);
        t.step(
            "a",
            |v: &mut Vec<i32>| {
                v.push(1);
                Ok::<_, ()>(())
            },
            |v, ()| {
                v.pop();
            },
        )
        .unwrap();
        assert_eq!(t.commit(), vec![0, 1]);
    }
}
