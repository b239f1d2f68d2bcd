//! The flow cache: conversations being metered, their timeouts and what ends them.
//!
//! Owns when a flow record is finished. Time is the stream's: the packets' capture
//! timestamps (never the clock of the machine that runs the filter), so the same capture
//! gives the same records wherever and whenever it is read. A flow ends
//! - idle: no packet for `idle` after its last one;
//! - active: a packet arrives `active` or more after the flow's first; that packet starts
//!   the next record of the same conversation;
//! - end of flow: after a TCP FIN has been seen in both directions, or an RST in either,
//!   no packet for `fin` (the last ACK and retransmissions still count in it);
//! - lack of resources: the table holds `cap` flows and a new one arrives; the flow seen
//!   least recently goes (counted in [`Cache::evicted`]);
//! - end of stream: [`Cache::flush`] ends every flow left.
//!
//! Expiry is checked at each packet, so a quiet stream ends nothing until its next packet
//! or its end. Flows leave in a deterministic order (the order their ending is noticed,
//! least recently seen first), so the export is byte-for-byte reproducible.

use super::observe::{Key, Obs, FIN, RST, TCP};
use lru::LruCache;

/// RFC 7012 flowEndReason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EndReason {
    Idle = 1,
    Active = 2,
    EndOfFlow = 3,
    ForcedEnd = 4,
    LackOfResources = 5,
}

/// Timeouts in milliseconds of stream time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub idle: u64,
    pub active: u64,
    pub fin: u64,
}

/// One conversation's counters, per direction (0: `key.addr[0]` to `key.addr[1]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    pub key: Key,
    /// The conversation's first and last packet (ms since the epoch).
    pub first: u64,
    pub last: u64,
    /// Each direction's own first and last packet.
    pub dir_first: [u64; 2],
    pub dir_last: [u64; 2],
    pub packets: [u64; 2],
    pub octets: [u64; 2],
    pub flags: [u16; 2],
    pub tos: [u8; 2],
}

impl Flow {
    fn new(o: &Obs, ts: u64) -> Flow {
        Flow {
            key: o.key,
            first: ts,
            last: ts,
            dir_first: [ts; 2],
            dir_last: [ts; 2],
            packets: [0; 2],
            octets: [0; 2],
            flags: [0; 2],
            tos: [0; 2],
        }
    }

    fn add(&mut self, o: &Obs, ts: u64) {
        let d = o.dir;
        if self.packets[d] == 0 {
            self.dir_first[d] = ts;
            self.tos[d] = o.tos;
        }
        self.packets[d] += 1;
        self.octets[d] += o.octets;
        self.flags[d] |= o.flags;
        self.dir_last[d] = self.dir_last[d].max(ts);
        self.last = self.last.max(ts);
    }

    /// TCP's end seen: FIN both ways or an RST.
    fn finished(&self) -> bool {
        self.key.proto == TCP
            && ((self.flags[0] | self.flags[1]) & RST != 0
                || self.flags[0] & self.flags[1] & FIN != 0)
    }
}

pub struct Cache {
    /// Flows still open, least recently seen first.
    open: LruCache<Key, Flow>,
    /// TCP flows whose end was seen, waiting `fin` for their last packets.
    closing: LruCache<Key, Flow>,
    cap: usize,
    t: Timeouts,
    /// The stream's time: the latest packet timestamp seen.
    now: u64,
    pub evicted: u64,
    pub packets: u64,
}

impl Cache {
    pub fn new(cap: usize, t: Timeouts) -> Cache {
        Cache {
            open: LruCache::unbounded(),
            closing: LruCache::unbounded(),
            cap: cap.max(1),
            t,
            now: 0,
            evicted: 0,
            packets: 0,
        }
    }

    /// The stream's time (ms), the latest packet timestamp seen.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Flows being metered.
    pub fn len(&self) -> usize {
        self.open.len() + self.closing.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Meters one packet seen at `ts` (ms); flows it ends go to `out`.
    pub fn packet(&mut self, o: &Obs, ts: u64, out: &mut Vec<(Flow, EndReason)>) {
        self.packets += 1;
        self.now = self.now.max(ts);
        self.expire(out);
        if let Some(f) = self.closing.get_mut(&o.key) {
            f.add(o, ts);
            return;
        }
        let active = self.t.active;
        if let Some(f) = self.open.get_mut(&o.key) {
            if ts.saturating_sub(f.first) < active {
                f.add(o, ts);
                if f.finished() {
                    let f = self.open.pop(&o.key).expect("just found");
                    self.closing.put(o.key, f);
                }
                return;
            }
            let old = self.open.pop(&o.key).expect("just found");
            out.push((old, EndReason::Active));
        }
        if self.len() >= self.cap {
            self.evict(out);
        }
        let mut f = Flow::new(o, ts);
        f.add(o, ts);
        if f.finished() {
            self.closing.put(o.key, f);
        } else {
            self.open.put(o.key, f);
        }
    }

    /// Ends the flows whose time is up at the stream's time.
    fn expire(&mut self, out: &mut Vec<(Flow, EndReason)>) {
        let now = self.now;
        for (list, wait, why) in [
            (&mut self.open, self.t.idle, EndReason::Idle),
            (&mut self.closing, self.t.fin, EndReason::EndOfFlow),
        ] {
            while list
                .peek_lru()
                .is_some_and(|(_, f)| now > f.last.saturating_add(wait))
            {
                let (_, f) = list.pop_lru().expect("peeked");
                out.push((f, why));
            }
        }
    }

    /// Makes room: the flow seen least recently goes.
    fn evict(&mut self, out: &mut Vec<(Flow, EndReason)>) {
        let last = |l: &LruCache<Key, Flow>| l.peek_lru().map(|(_, f)| f.last);
        let list = match (last(&self.open), last(&self.closing)) {
            (Some(a), Some(b)) if b < a => &mut self.closing,
            (None, Some(_)) => &mut self.closing,
            _ => &mut self.open,
        };
        if let Some((_, f)) = list.pop_lru() {
            self.evicted += 1;
            out.push((f, EndReason::LackOfResources));
        }
    }

    /// End of stream: every flow left, the ones already closing first, each list least
    /// recently seen first.
    pub fn flush(&mut self, out: &mut Vec<(Flow, EndReason)>) {
        self.expire(out);
        while let Some((_, f)) = self.closing.pop_lru() {
            out.push((f, EndReason::EndOfFlow));
        }
        while let Some((_, f)) = self.open.pop_lru() {
            out.push((f, EndReason::ForcedEnd));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::observe::UDP;

    const T: Timeouts = Timeouts {
        idle: 1000,
        active: 10_000,
        fin: 100,
    };

    fn obs(port: u16, dir: usize, flags: u16, proto: u8) -> Obs {
        Obs {
            key: Key {
                addr: [[1; 16], [2; 16]],
                port: [port, 80],
                proto,
                v6: true,
                vlan: 0,
            },
            dir,
            octets: 100,
            flags,
            tos: 0,
        }
    }

    fn run(cache: &mut Cache, pkts: &[(Obs, u64)]) -> Vec<(Flow, EndReason)> {
        let mut out = Vec::new();
        for (o, ts) in pkts {
            cache.packet(o, *ts, &mut out);
        }
        cache.flush(&mut out);
        out
    }

    #[test]
    fn both_directions_count_in_one_flow_until_it_idles() {
        let mut c = Cache::new(16, T);
        let out = run(
            &mut c,
            &[
                (obs(1, 0, 0, UDP), 0),
                (obs(1, 1, 0, UDP), 500),
                (obs(1, 0, 0, UDP), 1500),
                (obs(1, 0, 0, UDP), 2501),
            ],
        );
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[0].0.packets, out[0].0.first, out[0].0.last, out[0].1),
            ([2, 1], 0, 1500, EndReason::Idle)
        );
        assert_eq!((out[1].0.packets, out[1].1), ([1, 0], EndReason::ForcedEnd));
        assert_eq!(out[0].0.dir_first, [0, 500]);
    }

    #[test]
    fn the_packet_past_the_active_timeout_starts_the_next_record() {
        let mut c = Cache::new(16, T);
        let pkts: Vec<_> = (0..25).map(|i| (obs(1, 0, 0, UDP), i * 500)).collect();
        let out = run(&mut c, &pkts);
        let counts: Vec<_> = out.iter().map(|(f, r)| (f.packets[0], *r)).collect();
        assert_eq!(
            counts,
            vec![(20, EndReason::Active), (5, EndReason::ForcedEnd)]
        );
        assert_eq!(out[1].0.first, 10_000);
    }

    #[test]
    fn fin_both_ways_or_rst_ends_a_tcp_flow_after_its_last_packets() {
        let mut c = Cache::new(16, T);
        let out = run(
            &mut c,
            &[
                (obs(1, 0, 0x02, TCP), 0),
                (obs(1, 0, FIN | 0x10, TCP), 10),
                (obs(1, 1, FIN | 0x10, TCP), 20),
                (obs(1, 0, 0x10, TCP), 30), // the last ACK, still this flow
                (obs(2, 0, RST, TCP), 40),
                (obs(1, 0, 0x02, TCP), 200), // a new connection on the same ports
            ],
        );
        let got: Vec<_> = out
            .iter()
            .map(|(f, r)| (f.key.port[0], f.packets, *r))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, [3, 1], EndReason::EndOfFlow),
                (2, [1, 0], EndReason::EndOfFlow),
                (1, [1, 0], EndReason::ForcedEnd)
            ]
        );
    }

    #[test]
    fn a_full_table_evicts_the_least_recently_seen_and_counts_it() {
        let mut c = Cache::new(2, T);
        let out = run(
            &mut c,
            &[
                (obs(1, 0, 0, UDP), 0),
                (obs(2, 0, 0, UDP), 1),
                (obs(1, 0, 0, UDP), 2),
                (obs(3, 0, 0, UDP), 3),
            ],
        );
        assert_eq!(c.evicted, 1);
        assert_eq!(
            (out[0].0.key.port[0], out[0].1),
            (2, EndReason::LackOfResources)
        );
        let total: u64 = out.iter().map(|(f, _)| f.packets[0]).sum();
        assert_eq!(total, 4);
    }
}
