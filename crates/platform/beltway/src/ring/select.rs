//! Waiting on several readers at once (futex_waitv over their eventcounts), the way
//! [`Reader::block`] waits on one.

use super::{fences, Reader};
use crate::error::{Error, Result};
use crate::sys;
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

/// Wait on several readers at once with futex_waitv: the index of one that has data or has
/// ended, or `None` on timeout.
pub fn select(readers: &mut [&mut Reader], timeout: Option<Duration>) -> Result<Option<usize>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut deep = false;
    loop {
        for (i, r) in readers.iter_mut().enumerate() {
            r.flush_deferred();
            if r.available() > 0 || r.ended() {
                return Ok(Some(i));
            }
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(None);
        }
        let mut wait = Duration::MAX;
        let mut words = Vec::with_capacity(readers.len());
        for r in readers.iter() {
            wait = wait.min(if deep { r.sh.liveness } else { r.latency });
            if let Some(ctl) = r.sh.ctl() {
                let c = if deep {
                    &ctl.r.0.deep_sleepers
                } else {
                    &ctl.r.0.sleepers
                };
                // SYNC POINT: as in `Reader::wait`: register as a sleeper (a hint; the SeqCst
                // pairs with nothing, producers read `deep_sleepers` Relaxed)...
                c.fetch_add(1, SeqCst);
                // SYNC POINT: ...and set the sleep bit (SeqCst RMW): the slow side of the
                // sleep handshake against the producer's `fences::publish` of write_pos then
                // Relaxed load of `data_seq`; completed by the heavy fence and re-check below.
                let seq = ctl.r.0.data_seq.fetch_or(1, SeqCst) | 1;
                words.push((&ctl.r.0.data_seq, seq));
            }
        }
        if let Some(d) = deadline {
            wait = wait.min(d - now);
        }
        fences::heavy();
        // SYNC POINT: SeqCst re-check of every write_pos after the heavy fence (see above).
        let ready = readers
            .iter()
            .any(|r| r.sh.hdr().p.0.write_pos.load(SeqCst) > r.pos);
        let res = if ready {
            Ok(Some(0))
        } else if words.is_empty() {
            // Only observers: they cannot be woken, look again after the bound.
            std::thread::sleep(wait);
            Ok(None)
        } else {
            sys::futex_waitv(&words, Some(wait))
        };
        drop(words);
        for r in readers.iter() {
            if let Some(ctl) = r.sh.ctl() {
                let c = if deep {
                    &ctl.r.0.deep_sleepers
                } else {
                    &ctl.r.0.sleepers
                };
                c.fetch_sub(1, Relaxed);
            }
        }
        match res {
            Ok(Some(_)) => {}
            Ok(None) => {
                if deep {
                    for r in readers.iter_mut() {
                        if !r.sh.writer_alive() {
                            r.writer_dead = true;
                        }
                    }
                }
                deep = true;
            }
            Err(e) => return Err(Error::os(&readers[0].sh.name, "futex_waitv", e)),
        }
    }
}
