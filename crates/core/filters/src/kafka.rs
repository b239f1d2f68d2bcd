//! Kafka at the edges (issue 21, third part): `kafkaout` (a sink: produce every block as a
//! message of a topic) and `kafkain` (a source: consume a topic's messages as blocks), over
//! librdkafka (the `rdkafka` crate, linked against the system's library).
//!
//! Owns: the two filters, their parameters (parsed by small pure functions, property-tested),
//! the record header that carries a block's class and capture metadata through Kafka, and
//! when offsets are committed. Does not own: the broker (a real Apache Kafka, started for
//! tests and benchmarks by `scripts/kafka-broker`).
//!
//! # Partitions and replicas
//!
//! `kafkain` stamps each block's class with its partition + 1 (`class=partition`, the
//! default), so a session-keeping filter replicated downstream (`space=1,2`: a hash split
//! on the class) keeps every partition on one replica, in the partition's order; `kafkaout
//! partition=class` sends class c to partition (c - 1) mod the topic's partitions, so
//! `kafkain | ... | kafkaout partition=class` keeps each message in its partition number.
//! `kafkaout key=flow` keys each message by its packet's flow (both directions of a
//! connection alike), so Kafka's partitioner (murmur2, as Java clients) puts a flow in one
//! partition; `key=class` and `key=OFF:LEN` (bytes of the block) are the other keys.
//!
//! # Delivery
//!
//! `kafkaout` produces with `acks=all` and idempotence (librdkafka retries in order, without
//! duplicates, for `timeout` seconds: a broker restart mid-stream loses nothing); its
//! `finish` waits for every delivery report and stops the run, naming the brokers, if any
//! message was not delivered.
//!
//! `kafkain` with `group=G` is a member of consumer group G and commits offsets only for
//! messages its pipeline has taken (at-least-once): a batch's offsets are committed once
//! the batch has walked the whole space (`Filter::epoch_end`: every filter of the space,
//! sinks included, has had it), at most every 100 ms, and the last ones when the source is
//! dropped, after every filter of the run has finished. When the space sends the stream on
//! to another space (`Store::feeds`), the end of a walk here is only the channel, so
//! offsets are committed once, at the end, and only if the source ended by itself
//! (`count=`, `eof=yes`) and the run's other spaces have all finished by then
//! (`Feeds::AwaitedSpaces`: kafkain in the run's own process); from a process space
//! (`space=pN`) that sends the stream on, never (with a warning). A run that is killed
//! commits nothing after what its sinks had, so the group re-reads the rest. Without
//! `group=`, `kafkain` reads every partition itself and commits nothing.

use dataplane::transport::{BlockIn, BlockOut, Fields, HeaderError, Inlet, Outgoing, Outlet};
use dataplane::{Args, Batch, Ctx, Feeds, Filter, FilterError, Store};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, DefaultConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The key of the message header a block's class and capture metadata travel in: the
/// block header every transport carries (`dataplane::transport`, `protocol::block`:
/// capture time, wire length, crop, link type, capture file header, class, length).
/// Messages written before this header (a 24- or 28-byte header of Kafka's own) do not
/// read as one: their blocks come without metadata, classed by partition.
pub const HEADER: &str = "streamline";
/// How often a consumer commits offsets while it runs.
const COMMIT_EVERY: Duration = Duration::from_millis(100);
/// How long one pull of a group's consumer waits for the first message (see `wait`).
const POLL: Duration = Duration::from_millis(50);
mod wait;

/// The librdkafka settings of `kafkaout`'s producer besides `bootstrap.servers` and those
/// its parameters set (`linger.ms`, `message.timeout.ms`; see [`DEFAULT_LINGER_MS`],
/// [`DEFAULT_TIMEOUT_SECS`]). Public so that a peer measured beside it (the benchmark's
/// `kcat -P`) is given the same.
pub const PRODUCER_SETTINGS: [(&str, &str); 4] = [
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("partitioner", "murmur2_random"),
    ("queue.buffering.max.kbytes", "262144"),
];
/// `kafkaout linger=`'s default (librdkafka's `linger.ms`).
pub const DEFAULT_LINGER_MS: u32 = 5;
/// `kafkaout timeout=`'s default, seconds (librdkafka's `message.timeout.ms`).
pub const DEFAULT_TIMEOUT_SECS: f64 = 60.0;
/// `kafkain`'s prefetch (librdkafka's default is 100000): with the default, a consumer
/// as fast as this one drains the queue and waits on every refill (measured: 2.4M
/// messages of 100 bytes in 9.5 s against 1.9 s with this; bounded by
/// queued.max.messages.kbytes, 64 MiB, all the same).
pub const CONSUMER_PREFETCH: (&str, &str) = ("queued.min.messages", "1000000");
/// `kafkain eof=yes`'s fetch wait: the end of a partition shows as a fetch that finds
/// nothing new, which the broker holds for fetch.wait.max.ms (librdkafka's default
/// 500 ms) before it answers; a shorter wait notices the end sooner (measured: an empty
/// topic read with eof=yes in 0.52 s with the default).
pub const EOF_FETCH_WAIT: (&str, &str) = ("fetch.wait.max.ms", "100");

/// What went wrong talking to the brokers (the `make` of either filter).
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// No broker answered within the wait.
    #[error("cannot reach the Kafka broker(s) {brokers} within {secs} s: {why}")]
    Unreachable {
        brokers: String,
        secs: f64,
        why: String,
    },
    /// The broker answered but refused or lacks something.
    #[error("Kafka broker(s) {brokers}: {what}: {why}")]
    Refused {
        brokers: String,
        what: String,
        why: String,
    },
}

impl From<BrokerError> for FilterError {
    fn from(e: BrokerError) -> FilterError {
        FilterError::Invalid {
            what: String::new(),
            source: Box::new(e),
        }
    }
}

/// `brokers=HOST:PORT[,HOST:PORT...]`, checked before librdkafka sees it (which would
/// otherwise only log a bad address and wait).
pub fn parse_brokers(v: &str) -> Result<String, FilterError> {
    let bad = || {
        FilterError::bad(
            "brokers",
            v,
            "HOST:PORT[,HOST:PORT...] (e.g. 127.0.0.1:9092)",
        )
    };
    if v.is_empty() {
        return Err(bad());
    }
    for b in v.split(',') {
        let (host, port) = b.rsplit_once(':').ok_or_else(bad)?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
        {
            return Err(bad());
        }
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(bad()),
        }
    }
    Ok(v.to_string())
}

/// A topic name as Kafka allows it: 1..=249 of `[A-Za-z0-9._-]`, not `.` or `..`.
pub fn parse_topic(key: &str, v: &str) -> Result<String, FilterError> {
    let ok = !v.is_empty()
        && v.len() <= 249
        && v != "."
        && v != ".."
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(v.to_string())
    } else {
        Err(FilterError::bad(
            key,
            v,
            "a topic name: 1 to 249 of A-Z a-z 0-9 . _ -",
        ))
    }
}

/// How `kafkaout` keys its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyBy {
    /// No key: the partitioner spreads messages over the partitions.
    None,
    /// The packet's flow (`flow`'s hash, the same both ways), 2 bytes big-endian.
    Flow,
    /// The block's class, 2 bytes big-endian.
    Class,
    /// `len` bytes of the block from `off` (a block too short has no key).
    Field { off: usize, len: usize },
}

impl KeyBy {
    pub fn parse(v: &str) -> Result<KeyBy, FilterError> {
        let bad = || {
            FilterError::bad(
                "key",
                v,
                "none, flow, class or OFFSET:LENGTH (bytes of the block, LENGTH 1..=1024)",
            )
        };
        Ok(match v {
            "none" => KeyBy::None,
            "flow" => KeyBy::Flow,
            "class" => KeyBy::Class,
            f => {
                let (o, l) = f.split_once(':').ok_or_else(bad)?;
                let off = o.parse::<usize>().map_err(|_| bad())?;
                let len = l.parse::<usize>().map_err(|_| bad())?;
                if len == 0 || len > 1024 || off > 1 << 20 {
                    return Err(bad());
                }
                KeyBy::Field { off, len }
            }
        })
    }
}

/// Which partition `kafkaout` sends a message to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionBy {
    /// Kafka's partitioner, by key (murmur2; no key: random).
    Key,
    /// This partition.
    Fixed(i32),
    /// Class c to partition (c - 1) mod the topic's partitions (kafkain's classes back).
    Class,
}

impl PartitionBy {
    pub fn parse(v: &str) -> Result<PartitionBy, FilterError> {
        match v {
            "key" => Ok(PartitionBy::Key),
            "class" => Ok(PartitionBy::Class),
            n => match n.parse::<i32>() {
                Ok(p) if p >= 0 => Ok(PartitionBy::Fixed(p)),
                _ => Err(FilterError::bad(
                    "partition",
                    v,
                    "key, class or a partition number",
                )),
            },
        }
    }
}

/// A positive number of seconds.
fn secs(a: &Args, key: &str, default: f64) -> Result<f64, FilterError> {
    let s: f64 = a.parse(key, None, default)?;
    if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
        return Err(FilterError::bad(
            key,
            a.get(key, None).unwrap_or(""),
            "seconds, more than 0 and at most 3600",
        ));
    }
    Ok(s)
}

/// The block header a message's [`HEADER`] holds, or why it is none.
pub fn parse_header(h: &[u8]) -> Result<Fields, HeaderError> {
    dataplane::transport::Header::new_checked(h).map(|h| h.fields())
}

/// Delivery reports, counted by librdkafka's thread as they come.
#[derive(Default)]
struct Reports {
    delivered: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

#[derive(Clone, Default)]
struct Counting(Arc<Reports>);

impl ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(_) => {
                self.0.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut f) = self.0.first_error.lock() {
                    f.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

/// Ask the brokers for `topic`'s metadata within `wait`: its partition count, or None if
/// the topic does not exist. A broker that does not answer is [`BrokerError::Unreachable`].
fn partitions_of<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    brokers: &str,
    topic: &str,
    wait: f64,
) -> Result<Option<usize>, BrokerError> {
    // Every topic's metadata, not the one topic's: asking for a topic by name makes a
    // broker with auto-creation create it (with the default partitions, before
    // `partitions=` could).
    let md = client
        .fetch_metadata(None, Duration::from_secs_f64(wait))
        .map_err(|e| BrokerError::Unreachable {
            brokers: brokers.into(),
            secs: wait,
            why: e.to_string(),
        })?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    if t.error().is_some() || t.partitions().is_empty() {
        return Ok(None);
    }
    Ok(Some(t.partitions().len()))
}

/// Create `topic` with `n` partitions (replication: the broker's default); a topic that
/// exists already is left as it is.
fn create_topic(brokers: &str, topic: &str, n: usize, wait: f64) -> Result<(), BrokerError> {
    let refused = |why: String| BrokerError::Refused {
        brokers: brokers.into(),
        what: format!("cannot create topic {topic} with {n} partitions"),
        why,
    };
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| refused(e.to_string()))?;
    let t = NewTopic::new(topic, n as i32, TopicReplication::Fixed(-1));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs_f64(wait)));
    let r = futures_executor::block_on(admin.create_topics([&t], &opts))
        .map_err(|e| refused(e.to_string()))?;
    for r in r {
        match r {
            Ok(_) => {}
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(refused(code.to_string())),
        }
    }
    Ok(())
}

/// When `kafkaout` sends the [`HEADER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meta {
    /// For blocks with record metadata or a link type (captured packets), not for plain
    /// data (the header costs librdkafka an allocation per message).
    Auto,
    Always,
    Never,
}

/// The sink.
pub struct KafkaOut {
    producer: BaseProducer<Counting>,
    reports: Arc<Reports>,
    brokers: String,
    topic: String,
    key: KeyBy,
    partition: PartitionBy,
    partitions: usize,
    meta: Meta,
    timeout: f64,
    /// Messages and bytes produced; whether a message could not be.
    outlet: Outlet,
}

pub(crate) fn make_kafkaout(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let topic = parse_topic("topic", a.require("topic", Some(0))?)?;
    let brokers = parse_brokers(a.get("brokers", None).unwrap_or("127.0.0.1:9092"))?;
    let key = KeyBy::parse(a.get("key", None).unwrap_or("none"))?;
    let partition = PartitionBy::parse(a.get("partition", None).unwrap_or("key"))?;
    let create = a.parse::<usize>("partitions", None, 0)?;
    if create > 100_000 {
        return Err(FilterError::bad(
            "partitions",
            &create.to_string(),
            "at most 100000",
        ));
    }
    let wait = secs(a, "wait", 5.0)?;
    let timeout = secs(a, "timeout", DEFAULT_TIMEOUT_SECS)?;
    let linger = a.parse::<u32>("linger", None, DEFAULT_LINGER_MS)?;
    let meta = match a.get("meta", None).unwrap_or("auto") {
        "auto" => Meta::Auto,
        "yes" => Meta::Always,
        "no" => Meta::Never,
        m => return Err(FilterError::bad("meta", m, "auto, yes or no")),
    };
    let reports = Counting::default();
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &brokers)
        .set(
            "message.timeout.ms",
            format!("{}", (timeout * 1000.0) as u64),
        )
        .set("linger.ms", linger.to_string());
    for (k, v) in PRODUCER_SETTINGS {
        cfg.set(k, v);
    }
    let producer: BaseProducer<Counting> =
        cfg.create_with_context(reports.clone())
            .map_err(|e| BrokerError::Refused {
                brokers: brokers.clone(),
                what: "cannot make a producer".into(),
                why: e.to_string(),
            })?;
    let mut partitions = partitions_of(producer.client(), &brokers, &topic, wait)?;
    if create > 0 && partitions.is_none() {
        create_topic(&brokers, &topic, create, wait)?;
        let t0 = Instant::now();
        // The new topic's metadata reaches every broker a moment after it is created.
        while partitions.is_none() && t0.elapsed() < Duration::from_secs_f64(wait) {
            std::thread::sleep(Duration::from_millis(20));
            partitions = partitions_of(producer.client(), &brokers, &topic, wait)?;
        }
    }
    if partitions.is_some() {
        // Into librdkafka's cache, as kafkain does (see there): the first batch goes out
        // without waiting for a refresh.
        let _ = producer
            .client()
            .fetch_metadata(Some(&topic), Duration::from_secs_f64(wait));
    }
    if let PartitionBy::Fixed(p) = partition {
        if let Some(n) = partitions.filter(|&n| p as usize >= n) {
            return Err(FilterError::bad(
                "partition",
                &p.to_string(),
                &format!("a partition of topic {topic}, which has {n} (0..{n})"),
            ));
        }
    }
    Ok(Box::new(KafkaOut {
        producer,
        reports: reports.0,
        brokers,
        topic,
        key,
        partition,
        // A topic auto-created on first use gets the broker's default (1 here).
        partitions: partitions.unwrap_or(1).max(1),
        meta,
        timeout,
        outlet: Outlet::default(),
    }))
}

impl BlockOut for KafkaOut {
    fn outlet(&mut self) -> &mut Outlet {
        &mut self.outlet
    }

    fn write(&mut self, store: &Store, blocks: &mut [Outgoing<'_>]) -> Result<(), String> {
        for b in blocks.iter() {
            let (t, d) = (&b.tag, b.data);
            let key: Option<[u8; 2]>;
            let key_bytes: Option<&[u8]> = match self.key {
                KeyBy::None => None,
                KeyBy::Flow => {
                    key = crate::packet::parse_in(store, t)
                        .map(|p| crate::packet::flow_hash(&p).to_be_bytes());
                    key.as_ref().map(|k| &k[..])
                }
                KeyBy::Class => {
                    key = Some(t.class.to_be_bytes());
                    key.as_ref().map(|k| &k[..])
                }
                KeyBy::Field { off, len } => d.get(off..off + len),
            };
            let mut rec = BaseRecord::<[u8], [u8]>::to(&self.topic).payload(d);
            let h = b.head_bytes();
            let with_header = match self.meta {
                Meta::Always => true,
                Meta::Never => false,
                // The flags: record metadata or a link type to carry.
                Meta::Auto => b.head.flags != 0,
            };
            if with_header {
                rec = rec.headers(OwnedHeaders::new_with_capacity(1).insert(Header {
                    key: HEADER,
                    value: Some(&h[..]),
                }));
            }
            if let Some(k) = key_bytes {
                rec = rec.key(k);
            }
            match self.partition {
                PartitionBy::Key => {}
                PartitionBy::Fixed(p) => rec = rec.partition(p),
                PartitionBy::Class => {
                    rec =
                        rec.partition((t.class.saturating_sub(1) as usize % self.partitions) as i32)
                }
            }
            let mut rec = rec;
            loop {
                match self.producer.send(rec) {
                    Ok(()) => break,
                    Err((
                        KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                        r,
                    )) => {
                        // librdkafka's queue is full: serve delivery reports until there is room.
                        rec = r;
                        self.producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => {
                        return Err(format!(
                            "cannot produce to topic {} at {}: {e}",
                            self.topic, self.brokers
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Filter for KafkaOut {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if !self.send_batch(cx, batch) {
            return;
        }
        self.producer.poll(Duration::ZERO);
        if self.reports.failed.load(Ordering::Relaxed) > 0 {
            let why = self.undelivered();
            self.outlet.fail(cx, why);
        }
    }

    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        if self.outlet.failed {
            return;
        }
        // Every message delivered or failed: librdkafka gives up on one after `timeout`,
        // so this wait is bounded; a little more for the reports to come.
        let r = self
            .producer
            .flush(Duration::from_secs_f64(self.timeout + 5.0));
        if r.is_err() || self.reports.failed.load(Ordering::Relaxed) > 0 {
            let mut why = self.undelivered();
            if let Err(e) = r {
                why.push_str(&format!(" (flush: {e})"));
            }
            self.outlet.fail(cx, why);
        }
    }

    fn summary(&self) -> Option<String> {
        Some(format!(
            "kafkaout: {} messages, {} bytes to topic {} at {}, {} delivered",
            self.outlet.blocks,
            self.outlet.bytes,
            self.topic,
            self.brokers,
            self.reports.delivered.load(Ordering::Relaxed)
        ))
    }
}

impl KafkaOut {
    fn undelivered(&self) -> String {
        let failed = self.reports.failed.load(Ordering::Relaxed);
        let delivered = self.reports.delivered.load(Ordering::Relaxed);
        let first = self
            .reports
            .first_error
            .lock()
            .ok()
            .and_then(|f| f.clone())
            .unwrap_or_else(|| "no delivery report in time".into());
        format!(
            "messages not delivered to topic {} at {}: {} of {} failed or unconfirmed ({first})",
            self.topic,
            self.brokers,
            (self.outlet.blocks - delivered).max(failed),
            self.outlet.blocks
        )
    }
}

/// The classes `kafkain` stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClassBy {
    /// Partition + 1.
    Partition,
    /// The class the block had at the kafkaout that sent it (partition + 1 without one).
    Sent,
}

/// The source.
pub struct KafkaIn {
    consumer: Arc<BaseConsumer>,
    /// Without a group: each partition's own queue, read directly (one librdkafka call a
    /// message instead of two: the consumer's poll also serves its main queue each time),
    /// and the one to read first at the next pull.
    queues: Vec<PartitionQueue<DefaultConsumerContext>>,
    next_queue: usize,
    /// What the space sleeps on, and when the main queue was last served (see `wait`).
    arrived: dataplane::readiness::Signal,
    main_served: Instant,
    brokers: String,
    topic: String,
    group: Option<String>,
    class: ClassBy,
    /// Stop after this many messages.
    count: Option<u64>,
    /// Stop when every partition is at its end.
    eof: bool,
    /// Partitions at their end since their last message (`eof=yes`).
    at_end: BTreeMap<i32, bool>,
    /// Next offset per partition of the messages handed out in the batch now walking.
    batch: BTreeMap<i32, i64>,
    /// ... of batches that have walked the space, not yet committed.
    done: BTreeMap<i32, i64>,
    last_commit: Instant,
    /// The source ended by itself (count, eof), not by an interrupt.
    ended: bool,
    /// Where the space sends the stream (see the module doc); known at the first pull.
    feeds: Option<Feeds>,
    /// Messages and bytes received, with their metadata.
    inlet: Inlet,
}

pub(crate) fn make_kafkain(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let topic = parse_topic("topic", a.require("topic", Some(0))?)?;
    let brokers = parse_brokers(a.get("brokers", None).unwrap_or("127.0.0.1:9092"))?;
    let group = match a.get("group", None) {
        None => None,
        Some(g) if !g.is_empty() && g.len() <= 255 && !g.chars().any(char::is_control) => {
            Some(g.to_string())
        }
        Some(g) => {
            return Err(FilterError::bad(
                "group",
                g,
                "a consumer group name (1 to 255 printable characters)",
            ))
        }
    };
    let from = match a.get("from", None).unwrap_or("earliest") {
        f @ ("earliest" | "latest") => f,
        f => return Err(FilterError::bad("from", f, "earliest or latest")),
    };
    let class = match a.get("class", None).unwrap_or("partition") {
        "partition" => ClassBy::Partition,
        "sent" => ClassBy::Sent,
        c => return Err(FilterError::bad("class", c, "partition or sent")),
    };
    let count = match a.get("count", None) {
        None => None,
        Some(_) => Some(a.size("count", None, 0)?),
    };
    let eof = a.flag("eof")?;
    let wait = secs(a, "wait", 5.0)?;
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &brokers)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", from)
        .set("enable.partition.eof", "true")
        // Prefetch deeper than librdkafka's default (see there).
        .set(CONSUMER_PREFETCH.0, CONSUMER_PREFETCH.1);
    if eof {
        // Notice the end sooner (see there).
        cfg.set(EOF_FETCH_WAIT.0, EOF_FETCH_WAIT.1);
    }
    match &group {
        Some(g) => cfg.set("group.id", g).set("session.timeout.ms", "10000"),
        // librdkafka assigns partitions only to a consumer with a group id; this one never
        // joins the group nor commits to it.
        None => cfg.set(
            "group.id",
            format!("streamline-kafkain-{}", std::process::id()),
        ),
    };
    let consumer: Arc<BaseConsumer> = Arc::new(cfg.create().map_err(|e| BrokerError::Refused {
        brokers: brokers.clone(),
        what: "cannot make a consumer".into(),
        why: e.to_string(),
    })?);
    let mut queues = Vec::new();
    let arrived = dataplane::readiness::Signal::new().map_err(|e| FilterError::io("kafkain", e))?;
    let partitions = partitions_of(consumer.client(), &brokers, &topic, wait)?;
    match (&group, partitions) {
        (Some(_), _) => consumer
            .subscribe(&[&topic])
            .map_err(|e| BrokerError::Refused {
                brokers: brokers.clone(),
                what: format!("cannot subscribe to topic {topic}"),
                why: e.to_string(),
            })?,
        (None, None) => {
            return Err(BrokerError::Refused {
                brokers,
                what: format!("topic {topic}"),
                why: "no such topic (give group= to wait for it as a group member)".into(),
            }
            .into())
        }
        (None, Some(n)) => {
            // The topic by name (it exists, so no broker creates it): librdkafka keeps this
            // answer, not the one for every topic, and a partition whose leader it does not
            // know yet starts fetching only at its next metadata refresh (measured: the first
            // message after 0.5 s in 4 of 10 runs without this, after 0.02 s in 10 of 10).
            let _ = consumer.fetch_metadata(Some(&topic), Duration::from_secs_f64(wait));
            let mut tpl = TopicPartitionList::new();
            for p in 0..n as i32 {
                // Before the assignment, so no message goes to the consumer's queue.
                queues.push(consumer.split_partition_queue(&topic, p).ok_or_else(|| {
                    BrokerError::Refused {
                        brokers: brokers.clone(),
                        what: format!("partition {p} of topic {topic}"),
                        why: "librdkafka gives no queue of its own for it".into(),
                    }
                })?);
                let o = if from == "earliest" {
                    Offset::Beginning
                } else {
                    Offset::End
                };
                tpl.add_partition_offset(&topic, p, o)
                    .map_err(|e| BrokerError::Refused {
                        brokers: brokers.clone(),
                        what: format!("partition {p} of topic {topic}"),
                        why: e.to_string(),
                    })?;
            }
            wait::signal_arrivals(&mut queues, &arrived);
            consumer.assign(&tpl).map_err(|e| BrokerError::Refused {
                brokers: brokers.clone(),
                what: format!("cannot read topic {topic}"),
                why: e.to_string(),
            })?;
        }
    }
    Ok(Box::new(KafkaIn {
        consumer,
        queues,
        next_queue: 0,
        arrived,
        main_served: Instant::now(),
        brokers,
        topic,
        group,
        class,
        count,
        eof,
        at_end: BTreeMap::new(),
        batch: BTreeMap::new(),
        done: BTreeMap::new(),
        last_commit: Instant::now(),
        ended: false,
        feeds: None,
        inlet: Inlet::default(),
    }))
}

impl KafkaIn {
    /// Commit the offsets of the batches that have walked the space.
    fn commit(&mut self, mode: CommitMode) -> Result<(), String> {
        if self.group.is_none() || self.done.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for (&p, &o) in &self.done {
            tpl.add_partition_offset(&self.topic, p, Offset::Offset(o))
                .map_err(|e| e.to_string())?;
        }
        self.consumer.commit(&tpl, mode).map_err(|e| {
            format!(
                "cannot commit offsets of topic {} to {}: {e}",
                self.topic, self.brokers
            )
        })?;
        self.done.clear();
        self.last_commit = Instant::now();
        Ok(())
    }

    fn count_reached(&self) -> bool {
        self.count.is_some_and(|n| self.inlet.blocks >= n)
    }

    /// Hand on one message as a block of `out` (or note a partition's end, or warn).
    fn take(&mut self, cx: &mut Ctx<'_>, r: KafkaResult<BorrowedMessage<'_>>, out: &mut Batch) {
        let m = match r {
            Ok(m) => m,
            Err(KafkaError::PartitionEOF(p)) => {
                self.at_end.insert(p, true);
                return;
            }
            Err(e) => {
                // librdkafka reports transient broker trouble here and retries itself;
                // tell the user once and go on.
                cx.warn(format!("topic {} at {}: {e}", self.topic, self.brokers));
                return;
            }
        };
        let p = m.partition();
        if let Some(e) = self.at_end.get_mut(&p) {
            *e = false;
        }
        let payload = m.payload().unwrap_or(&[]);
        let header = m
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == HEADER))
            .and_then(|h| h.value)
            .and_then(|h| parse_header(h).ok());
        let class = match (self.class, &header) {
            (ClassBy::Sent, Some(h)) => h.class,
            _ => (p as u16).wrapping_add(1),
        };
        let t = self
            .inlet
            .admit(cx, &header.unwrap_or_default(), payload, class);
        self.batch.insert(p, m.offset() + 1);
        out.push(t);
    }
}

/// Its stream ends at `count=` or, with `eof=yes`, at the partitions' ends; it fails
/// nothing by itself (a broker's errors are warnings, and librdkafka retries).
impl BlockIn for KafkaIn {
    fn ended(&self) -> bool {
        self.ended
    }

    fn wait(&mut self, w: &mut dataplane::readiness::Arm<'_>) {
        self.arm_queues(w);
    }

    fn receive(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> Result<bool, String> {
        if self.feeds.is_none() {
            let f = cx.store.feeds();
            if f == Feeds::OtherSpaces && self.group.is_some() {
                cx.warn(format!(
                    "commits no offsets of group {}: it runs in a process space that sends the \
                     stream on, and cannot see when the sinks have it (place kafkain in the \
                     run's own process, e.g. without space=pN)",
                    self.group.as_deref().unwrap_or_default()
                ));
            }
            self.feeds = Some(f);
        }
        // Offsets done since the last commit, on a quiet topic (no batch ends to commit them
        // at) or after a burst: the space's loop comes back here at least every poll.
        if self.feeds == Some(Feeds::Nothing)
            && !self.done.is_empty()
            && self.last_commit.elapsed() >= COMMIT_EVERY
        {
            if let Err(why) = self.commit(CommitMode::Async) {
                cx.warn(why);
            }
        }
        let consumer = Arc::clone(&self.consumer);
        let queues = std::mem::take(&mut self.queues);
        if queues.is_empty() {
            let mut wait = POLL;
            while out.len() < max && !self.count_reached() {
                let Some(r) = consumer.poll(wait) else { break };
                wait = Duration::ZERO;
                self.take(cx, r, out);
            }
        } else {
            // The main queue's events (errors); the messages come by the partitions' queues.
            self.main_served = Instant::now();
            if let Some(r) = consumer.poll(Duration::ZERO) {
                self.take(cx, r, out);
            }
            let n = queues.len();
            let (mut i, mut idle) = (self.next_queue % n, 0);
            while out.len() < max && !self.count_reached() && idle < n {
                match queues[i].poll(Duration::ZERO) {
                    Some(r) => {
                        idle = 0;
                        self.take(cx, r, out);
                    }
                    None => {
                        idle += 1;
                        i = (i + 1) % n;
                    }
                }
            }
            // Nothing anywhere: the space sleeps until librdkafka signals a queue (`arm`).
            // The next pull starts at the next partition: none waits behind a busy one.
            self.next_queue = (i + 1) % n;
        }
        self.queues = queues;
        if self.eof && out.is_empty() && self.all_at_end() {
            self.ended = true;
            return Ok(false);
        }
        if self.count_reached() {
            self.ended = true;
            return Ok(!out.is_empty());
        }
        Ok(true)
    }
}

impl Filter for KafkaIn {
    dataplane::block_in_source!();

    fn epoch_end(&mut self, cx: &mut Ctx<'_>) {
        // The batch pulled last has walked the whole space: its offsets are done here.
        let batch = std::mem::take(&mut self.batch);
        if self.group.is_none() {
            return;
        }
        self.done.extend(batch);
        if self.feeds == Some(Feeds::Nothing) && self.last_commit.elapsed() >= COMMIT_EVERY {
            if let Err(why) = self.commit(CommitMode::Async) {
                cx.warn(why);
            }
        }
    }

    fn summary(&self) -> Option<String> {
        Some(format!(
            "kafkain: {} messages, {} bytes from topic {} at {}{}",
            self.inlet.blocks,
            self.inlet.bytes,
            self.topic,
            self.brokers,
            match &self.group {
                Some(g) => format!(" (group {g})"),
                None => String::new(),
            }
        ))
    }
}

impl Drop for KafkaIn {
    /// Every filter of the run has finished: commit what the run delivered, synchronously.
    /// A space that sent the stream on commits only if the source ended by itself.
    fn drop(&mut self) {
        match self.feeds {
            // Nothing pulled, or every batch reached the sinks.
            None | Some(Feeds::Nothing) => {}
            // The run's other spaces have finished: what the source handed out reached the
            // sinks, if it ended by itself (an interrupt may have cut the channels' drain).
            Some(Feeds::AwaitedSpaces) if self.ended => {}
            Some(Feeds::AwaitedSpaces) | Some(Feeds::OtherSpaces) => return,
        }
        if let Err(why) = self.commit(CommitMode::Sync) {
            eprintln!("warning: kafkain: {why}");
        }
    }
}

// The declarations of this file's filters are data in the catalog
// (`catalog::kafka::{KAFKAOUT, KAFKAIN}`); their constructors are below, paired with them
// in `filters::CONSTRUCTORS`.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_parameters_are_named() {
        for (f, v) in [
            (parse_brokers("").unwrap_err(), ""),
            (parse_brokers("localhost").unwrap_err(), "localhost"),
            (parse_brokers("h:0").unwrap_err(), "h:0"),
            (parse_brokers("h:99999").unwrap_err(), "h:99999"),
            (parse_brokers("a:1,").unwrap_err(), "a:1,"),
        ] {
            match f {
                FilterError::BadValue { key, value, .. } => {
                    assert_eq!(key, "brokers");
                    assert_eq!(value, v);
                }
                e => panic!("{e:?}"),
            }
        }
        assert_eq!(
            parse_brokers("127.0.0.1:9092,[::1]:9093").unwrap(),
            "127.0.0.1:9092,[::1]:9093"
        );
        assert!(
            matches!(parse_topic("topic", "a b"), Err(FilterError::BadValue { key, .. }) if key == "topic")
        );
        assert!(matches!(
            parse_topic("topic", ".."),
            Err(FilterError::BadValue { .. })
        ));
        assert_eq!(
            KeyBy::parse("4:2").unwrap(),
            KeyBy::Field { off: 4, len: 2 }
        );
        assert!(
            matches!(KeyBy::parse("4:0"), Err(FilterError::BadValue { key, .. }) if key == "key")
        );
        assert!(
            matches!(KeyBy::parse("flows"), Err(FilterError::BadValue { key, .. }) if key == "key")
        );
        assert_eq!(PartitionBy::parse("3").unwrap(), PartitionBy::Fixed(3));
        assert!(
            matches!(PartitionBy::parse("-1"), Err(FilterError::BadValue { key, .. }) if key == "partition")
        );
    }

    #[test]
    fn header_round_trips() {
        let f = Fields {
            ts_ns: 7,
            orig_len: 1500,
            link: 1,
            class: 9,
            flags: dataplane::transport::RECORD | dataplane::transport::LINK,
            ..Fields::default()
        };
        assert_eq!(parse_header(&f.encode()), Ok(f));
        // An older version's 24-byte header is not one.
        assert!(matches!(
            parse_header(&f.encode()[..24]),
            Err(HeaderError::Truncated { got: 24, .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic_and_accept_what_they_print(s in "\\PC{0,40}", host in "[a-z][a-z0-9.-]{0,20}", port in 1u16.., off in 0usize..4096, len in 1usize..=1024) {
            let _ = parse_brokers(&s);
            let _ = parse_topic("topic", &s);
            let _ = KeyBy::parse(&s);
            let _ = PartitionBy::parse(&s);
            let _ = parse_header(s.as_bytes());
            let b = format!("{host}:{port}");
            proptest::prop_assert_eq!(parse_brokers(&b).unwrap(), b.clone());
            let two = format!("{b},{b}");
            proptest::prop_assert!(parse_brokers(&two).is_ok());
            proptest::prop_assert_eq!(KeyBy::parse(&format!("{off}:{len}")).unwrap(), KeyBy::Field { off, len });
        }
    }
}
