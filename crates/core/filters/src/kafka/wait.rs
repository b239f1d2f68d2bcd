//! How `kafkain` waits on its space's readiness handle ([`dataplane::readiness`]): without
//! a group it reads each partition's own queue, and librdkafka signals when one of them goes
//! from empty to not empty (its non-empty callback); a group's consumer has no such signal
//! here and waits in `pull` (`POLL`).

use super::{Feeds, KafkaIn, COMMIT_EVERY};
use dataplane::readiness::{Arm, Signal};
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::Consumer;
use rdkafka::consumer::DefaultConsumerContext;
use std::os::fd::AsFd;
use std::time::Duration;

/// How often a consumer of partition queues, asleep on their signal, still serves the
/// consumer's main queue (errors, which come with no signal).
const MAIN_QUEUE_EVERY: Duration = Duration::from_secs(1);

/// Have librdkafka signal `arrived` whenever one of `queues` goes from empty to not empty.
pub(super) fn signal_arrivals(
    queues: &mut [PartitionQueue<DefaultConsumerContext>],
    arrived: &Signal,
) {
    for q in queues {
        let signal = arrived.clone();
        q.set_nonempty_callback(move || signal.signal());
    }
}

impl KafkaIn {
    /// Partition queues: their signal, the main queue's turn and the next commit on a
    /// quiet topic. A group's consumer waits in `pull`. (A stream that ended is ready:
    /// [`dataplane::transport::BlockIn::arm_in`].)
    pub(super) fn arm_queues(&mut self, w: &mut Arm<'_>) {
        if self.queues.is_empty() {
            w.poll();
            return;
        }
        w.signal(self.arrived.as_fd());
        w.deadline(self.main_served + MAIN_QUEUE_EVERY);
        if self.feeds == Some(Feeds::Nothing) && !self.done.is_empty() {
            w.deadline(self.last_commit + COMMIT_EVERY);
        }
    }

    /// Whether every partition assigned to us is at its end (`eof=yes`: the wait is over).
    pub(super) fn all_at_end(&self) -> bool {
        let Ok(assigned) = self.consumer.assignment() else {
            return false;
        };
        let parts: Vec<i32> = assigned.elements().iter().map(|e| e.partition()).collect();
        !parts.is_empty() && parts.iter().all(|p| self.at_end.get(p) == Some(&true))
    }
}
