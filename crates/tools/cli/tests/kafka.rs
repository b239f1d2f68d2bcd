//! Kafka at the edges (issue 21, third part): `kafkaout` and `kafkain` against a real Apache
//! Kafka 3.9.1 broker (KRaft, one node on loopback) that `scripts/kafka-broker` starts on a
//! free port: the sample capture through a topic and back is byte-identical, flows keyed by
//! `key=flow` stay in one partition in their order, a consumer group commits only what its
//! sink had (a consumer killed with its sink blocked leaves the rest to be read again), a
//! broker restart mid-produce loses nothing, and unreachable brokers and undeliverable
//! messages are errors naming the broker.
//!
//! One broker serves the whole file (started once); the restart test has one of its own.
//! Every broker is stopped when its guard drops and, whatever happens to the test process
//! (a panic, SIGKILL), by the script's watcher of this process (`KAFKA_BROKER_OWNER`).
//! Without java or mvn (or with no network to fetch the jars the first time) the tests
//! fail, saying what is missing: they never pass without a broker.

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

mod common;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.."))
}

fn sample() -> PathBuf {
    root().join("examples/sample.pcap")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sl-kafka-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A test's scratch directory, removed however the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        Scratch(tmp(name))
    }
    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A broker started by `scripts/kafka-broker`, stopped (and its directory removed) on drop.
struct Broker {
    dir: PathBuf,
    addr: String,
}

impl Broker {
    fn start(name: &str) -> Broker {
        let dir = tmp(name);
        let port = free_port();
        let out = script(&["start", dir.to_str().unwrap(), &port.to_string()]);
        assert!(
            out.status.success(),
            "cannot start a Kafka broker for the tests (scripts/kafka-broker start; CI installs \
             java and mvn with scripts/setup): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Broker {
            dir,
            addr: format!("127.0.0.1:{port}"),
        }
    }
    fn restart(&self) {
        let out = script(&["restart", self.dir.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fn stop(&self) {
        let _ = script(&["stop", self.dir.to_str().unwrap()]);
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn script(args: &[&str]) -> Output {
    Command::new("bash")
        .arg(root().join("scripts/kafka-broker"))
        .args(args)
        .env("KAFKA_BROKER_OWNER", std::process::id().to_string())
        .env("KAFKA_BROKER_REMOVE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run bash scripts/kafka-broker")
}

/// The file's shared broker (a static is never dropped: the script's watcher stops it
/// when this process ends).
fn broker() -> &'static Broker {
    static B: OnceLock<Broker> = OnceLock::new();
    B.get_or_init(|| Broker::start("shared"))
}

/// A run of the streamline command, stand-alone (never through a daemon), killed if it
/// outlives `limit` (a watchdog: a hung run fails the test instead of hanging it).
fn run(pipeline: &str, limit: Duration) -> Output {
    let mut c = Command::new(BIN)
        .args(["run", "-q", pipeline])
        .env("STREAMLINE_SOCKET", "none")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        if c.try_wait().unwrap().is_some() {
            return c.wait_with_output().unwrap();
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            let out = c.wait_with_output().unwrap();
            panic!(
                "`{pipeline}` still ran after {limit:?}; killed. stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ok(pipeline: &str) -> String {
    let out = run(pipeline, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "`{pipeline}` failed: {err}");
    err
}

/// `kafkain: N messages, ...` of a run's summaries.
fn received(err: &str) -> u64 {
    let l = err
        .lines()
        .find(|l| l.starts_with("kafkain: "))
        .unwrap_or_else(|| panic!("no kafkain summary in {err}"));
    l["kafkain: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The offset group `group` has committed on partition 0 of `topic` (-1: none yet), asked
/// of the broker with librdkafka directly.
fn committed(addr: &str, group: &str, topic: &str) -> i64 {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    match got.find_partition(topic, 0).map(|p| p.offset()) {
        Some(Offset::Offset(n)) => n,
        _ => -1,
    }
}

/// Every message of `topic`: per partition, (offset, key, payload) in offset order, read
/// with librdkafka directly (not through our filters).
fn read_topic(addr: &str, topic: &str) -> BTreeMap<i32, Vec<(i64, Option<Vec<u8>>, Vec<u8>)>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("group.id", format!("test-reader-{}", std::process::id()))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let n = md.topics()[0].partitions().len() as i32;
    assert!(n > 0, "topic {topic} has no partitions");
    let mut tpl = TopicPartitionList::new();
    for p in 0..n {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out: BTreeMap<i32, Vec<_>> = BTreeMap::new();
    let mut at_end = std::collections::BTreeSet::new();
    let t0 = Instant::now();
    while at_end.len() < n as usize {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "reading {topic} took over 60 s"
        );
        match c.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                out.entry(m.partition()).or_default().push((
                    m.offset(),
                    m.key().map(<[u8]>::to_vec),
                    m.payload().unwrap_or(&[]).to_vec(),
                ));
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
        }
    }
    out
}

/// The sample's packets, in order.
fn sample_packets() -> Vec<Vec<u8>> {
    let f = std::fs::File::open(sample()).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data.to_vec());
    }
    v
}

#[test]
fn the_sample_through_a_topic_and_back_is_byte_identical() {
    let b = broker();
    let d = Scratch::new("roundtrip");
    let topic = format!("roundtrip-{}", std::process::id());
    let (want, got) = (d.join("want.pcap"), d.join("got.pcap"));
    let s = sample();
    ok(&format!(
        "pcapin file={} | pcapout file={}",
        s.display(),
        want.display()
    ));
    let err = ok(&format!(
        "pcapin file={} | kafkaout topic={topic} brokers={} partitions=1",
        s.display(),
        b.addr
    ));
    assert!(
        err.contains("5247 messages") && err.contains("5247 delivered"),
        "{err}"
    );
    let err = ok(&format!(
        "kafkain topic={topic} brokers={} eof=yes | pcapout file={}",
        b.addr,
        got.display()
    ));
    assert_eq!(received(&err), 5247);
    let (w, g) = (std::fs::read(&want).unwrap(), std::fs::read(&got).unwrap());
    assert!(
        w == g,
        "pcapout of the consumed topic differs from pcapout of the capture"
    );
    // And both are the capture itself (`cmp`): its header (byte order, time precision,
    // snap length, link type) travels with the packets through the topic.
    assert!(
        g == std::fs::read(&s).unwrap(),
        "pcapout of the consumed topic is not the capture byte for byte"
    );
    // What another client reads from the topic: the packets, in order, in one partition.
    let t = read_topic(&b.addr, &topic);
    let payloads: Vec<Vec<u8>> = t[&0].iter().map(|m| m.2.clone()).collect();
    assert_eq!(payloads, sample_packets());
}

#[test]
fn keyed_by_flow_a_flow_stays_in_one_partition_in_its_order() {
    let b = broker();
    let topic = format!("flows-{}", std::process::id());
    ok(&format!(
        "pcapin file={} | kafkaout topic={topic} brokers={} partitions=4 key=flow",
        sample().display(),
        b.addr
    ));
    let t = read_topic(&b.addr, &topic);
    assert!(
        t.len() > 1,
        "every flow landed in one partition of 4: {:?}",
        t.keys()
    );
    let packets = sample_packets();
    let mut partition_of_key: BTreeMap<Vec<u8>, i32> = BTreeMap::new();
    let mut total = 0;
    for (&p, msgs) in &t {
        // Each partition holds a subsequence of the capture, in the capture's order.
        let mut at = 0;
        for (_, key, payload) in msgs {
            let want = filters::packet::parse(payload, Some(1))
                .map(|pk| filters::packet::flow_hash(&pk).to_be_bytes().to_vec());
            assert_eq!(&want, key, "the key is the packet's flow");
            if let Some(k) = key {
                if let Some(q) = partition_of_key.insert(k.clone(), p) {
                    assert_eq!(q, p, "flow key {k:?} in partitions {q} and {p}");
                }
            }
            at += packets[at..]
                .iter()
                .position(|x| x == payload)
                .unwrap_or_else(|| panic!("partition {p}: a packet out of the capture's order"));
            at += 1;
            total += 1;
        }
    }
    assert_eq!(total, packets.len());
    assert!(partition_of_key.len() > 1);
    // A session filter replicated after kafkain (a hash split on the class, partition + 1:
    // each partition, and so each flow, on one replica) gives what one copy gives.
    let counts = |p: &str| -> String {
        let err = ok(p);
        err.lines()
            .filter(|l| l.starts_with("count: "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let one = counts(&format!(
        "kafkain topic={topic} brokers={} eof=yes | tcpstream | count",
        b.addr
    ));
    let two = counts(&format!(
        "kafkain topic={topic} brokers={} eof=yes | tcpstream space=1,2 | count",
        b.addr
    ));
    assert!(
        !one.is_empty() && one == two,
        "one copy: {one}; two replicas: {two}"
    );
    // kafkain's classes (partition + 1) and kafkaout partition=class are inverses: a topic
    // copied through a pipeline keeps each message in its partition, in order.
    let copy = format!("flows-copy-{}", std::process::id());
    ok(&format!(
        "kafkain topic={topic} brokers={a} eof=yes | kafkaout topic={copy} brokers={a} partitions=4 partition=class",
        a = b.addr
    ));
    let c = read_topic(&b.addr, &copy);
    let payloads =
        |t: &BTreeMap<i32, Vec<(i64, Option<Vec<u8>>, Vec<u8>)>>| -> BTreeMap<i32, Vec<Vec<u8>>> {
            t.iter()
                .map(|(p, m)| (*p, m.iter().map(|x| x.2.clone()).collect()))
                .collect()
        };
    assert!(
        payloads(&c) == payloads(&t),
        "the copy's partitions differ from the original's"
    );
}

// Over 150 lines: one broker, topic and consumer group: a consumer killed while its sink
// blocks mid-batch, then a second one that must read on from what the first committed.
#[test]
fn a_group_commits_only_what_its_sink_had() {
    let b = broker();
    let d = Scratch::new("group");
    let topic = format!("group-{}", std::process::id());
    let group = format!("g-{}", std::process::id());
    ok(&format!(
        "pcapin file={} | kafkaout topic={topic} brokers={} partitions=1",
        sample().display(),
        b.addr
    ));
    // A sink that blocks: a FIFO that the test opens and never reads. Its pipe takes 64 KiB,
    // outfile's buffer 8 KiB more; the batch after that never ends its walk.
    let fifo = d.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    use std::os::unix::fs::OpenOptionsExt;
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let mut c = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!(
                "kafkain topic={topic} brokers={} group={group} | outfile {}",
                b.addr,
                fifo.display()
            ),
        ])
        .env("STREAMLINE_SOCKET", "none")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Take the first MiB the sink passes on (several batches: their offsets get committed),
    // then read no more: the sink blocks in the middle of a batch, whose offsets must not
    // be committed. Then kill the consumer.
    use std::io::Read;
    let mut piped = Vec::new();
    let mut buf = [0u8; 1 << 16];
    let t0 = Instant::now();
    while piped.len() < 1 << 20 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the consumer passed on only {} bytes in 60 s",
            piped.len()
        );
        match reader.read(&mut buf) {
            Ok(n) => piped.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("reading the FIFO: {e}"),
        }
    }
    // Until the batches that got through are committed (every 100 ms, by the consumer).
    common::wait_until(
        "the consumer to commit the batches its sink passed on",
        Duration::from_secs(60),
        || match committed(&b.addr, &group, &topic) {
            n if n > 0 => Ok(()),
            n => Err(format!("committed offset {n}")),
        },
    );
    assert!(
        c.try_wait().unwrap().is_none(),
        "the consumer ended with its sink blocked"
    );
    c.kill().unwrap();
    let _ = c.wait();
    // The rest of what the sink passed on before it blocked.
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => piped.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("reading the FIFO: {e}"),
        }
    }
    let packets = sample_packets();
    let all: Vec<u8> = packets.concat();
    assert!(
        !piped.is_empty(),
        "the consumer delivered nothing before its sink blocked"
    );
    assert!(
        all.starts_with(&piped),
        "the sink's output is not the start of the topic"
    );
    // The sink had taken at most what the pipe got and outfile's 8 KiB buffer held (lost
    // with the process): the first `had` messages.
    let mut bytes = 0;
    let had = packets
        .iter()
        .take_while(|p| {
            bytes += p.len();
            bytes <= piped.len() + (8 << 10)
        })
        .count();
    let out = d.join("rest.bin");
    let err = ok(&format!(
        "kafkain topic={topic} brokers={} group={group} eof=yes | outfile {}",
        b.addr,
        out.display()
    ));
    let again = received(&err) as usize;
    eprintln!(
        "group test: the sink passed on {} bytes ({had} messages at most, with its buffer); \
         {again} of {} read again",
        piped.len(),
        packets.len()
    );
    assert!(
        again >= packets.len() - had,
        "the killed consumer committed more than its sink had: {again} of {} read again, its sink had at most {had}",
        packets.len()
    );
    assert!(
        again < packets.len(),
        "the consumer committed nothing of the {} bytes its sink passed on",
        piped.len()
    );
    // The rest, in order, to the end of the topic.
    let rest: Vec<u8> = packets[packets.len() - again..].concat();
    assert!(
        std::fs::read(&out).unwrap() == rest,
        "the re-read messages are not the topic's last {again}"
    );
    // That run ended by itself and committed: the group has nothing more to read.
    let err = ok(&format!(
        "kafkain topic={topic} brokers={} group={group} eof=yes | count",
        b.addr
    ));
    assert_eq!(received(&err), 0, "{err}");
    // Also when the stream goes on to another space (commits at the end of the run).
    let topic2 = format!("group2-{}", std::process::id());
    ok(&format!(
        "gen count=3000 size=64 | kafkaout topic={topic2} brokers={}",
        b.addr
    ));
    let err = ok(&format!(
        "kafkain topic={topic2} brokers={} group={group} eof=yes | count space=1",
        b.addr
    ));
    assert_eq!(received(&err), 3000, "{err}");
    let err = ok(&format!(
        "kafkain topic={topic2} brokers={} group={group} eof=yes | count space=1",
        b.addr
    ));
    assert_eq!(received(&err), 0, "{err}");
    // From a process space whose stream goes on to the run's process: nothing committed,
    // and it says so.
    let g2 = format!("{group}-p");
    for _ in 0..2 {
        let err = ok(&format!(
            "kafkain topic={topic2} brokers={} group={g2} eof=yes space=p1 | count space=local",
            b.addr
        ));
        assert_eq!(received(&err), 3000, "{err}");
        assert!(err.contains("commits no offsets of group"), "{err}");
    }
}

#[test]
fn a_broker_restart_mid_produce_loses_nothing() {
    let b = Broker::start("restart");
    let topic = "restart";
    let n = 60_000;
    // About 3 s of messages; the broker goes away after 1 s and is back a few s later.
    let mut c = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!("gen count={n} size=200 rate=20000 | kafkaout topic={topic} brokers={} partitions=2", b.addr),
        ])
        .env("STREAMLINE_SOCKET", "none")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    b.restart();
    let restarted_in = t0.elapsed();
    let t1 = Instant::now();
    let st = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        if t1.elapsed() > Duration::from_secs(90) {
            let _ = c.kill();
            panic!("the producer did not end within 90 s of the restart");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        st.success(),
        "producer across a restart ({restarted_in:?}) failed: {err}"
    );
    assert!(err.contains(&format!("{n} delivered")), "{err}");
    // Every message exactly once (idempotence: no duplicates from retries either).
    let t = read_topic(&b.addr, topic);
    let mut seen = std::collections::BTreeSet::new();
    let mut total = 0;
    for msgs in t.values() {
        for m in msgs {
            total += 1;
            seen.insert(m.2.clone());
        }
    }
    assert_eq!(total, n, "messages in the topic after the restart");
    assert_eq!(seen.len(), n, "distinct messages (gen numbers its blocks)");

    // A broker that goes away for good: the producer's finish fails, naming it.
    let mut c = Command::new(BIN)
        .args([
            "run",
            "-q",
            &format!(
                "gen count=20000 size=200 rate=10000 | kafkaout topic={topic} brokers={} timeout=3",
                b.addr
            ),
        ])
        .env("STREAMLINE_SOCKET", "none")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    b.stop();
    let t1 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t1.elapsed() > Duration::from_secs(60) {
            let _ = c.kill();
            panic!("the producer did not give up within 60 s of losing its broker");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not delivered") && err.contains(&b.addr),
        "{err}"
    );
}

#[test]
fn unreachable_brokers_and_bad_parameters_are_named() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    for p in [
        format!("gen count=10 | kafkaout topic=t brokers={addr} wait=1"),
        format!("kafkain topic=t brokers={addr} wait=1 eof=yes | count"),
    ] {
        let out = run(&p, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(&addr) && err.contains("cannot reach") && err.contains("within 1 s"),
            "{p}: {err}"
        );
    }
    for (p, key) in [
        ("gen | kafkaout topic=t brokers=nohost", "brokers=nohost"),
        ("gen | kafkaout topic=t key=flows", "key=flows"),
        ("gen | kafkaout topic=a/b", "topic=a/b"),
        ("gen | kafkaout topic=t partition=-2", "partition=-2"),
        ("kafkain topic=t from=middle | count", "from=middle"),
        ("kafkain topic=t eof=maybe | count", "eof=maybe"),
        ("kafkain topic=t wait=0 | count", "wait=0"),
    ] {
        let out = run(p, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{p}");
        assert!(err.contains(key), "{p}: {err}");
    }
}

#[test]
fn the_broker_script_says_what_is_missing() {
    // PATH without java: the script names it (CI has java; this checks the message).
    let d = Scratch::new("nojava");
    let out = Command::new("/bin/bash")
        .arg(root().join("scripts/kafka-broker"))
        .args(["start", d.0.to_str().unwrap(), "1"])
        .env("PATH", "/nonexistent")
        .env("STREAMLINE_KAFKA_CACHE", d.join("cache"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("java is not installed"), "{err}");
}
