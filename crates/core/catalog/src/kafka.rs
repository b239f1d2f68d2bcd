//! The declarations of `filters::kafka`'s filters (their constructors are there).

use crate::{Access, FilterSpec, Kind, Param};

pub static KAFKAOUT: FilterSpec = FilterSpec::new("kafkaout", Access::Sink)
    .synopsis("kafkaout topic=TOPIC [brokers=HOST:PORT,..] [key=none|flow|class|OFF:LEN] [partition=key|class|N] [partitions=N] [timeout=SECS] [wait=SECS] [linger=MS] [meta=auto|yes|no]")
    .description(
        "Produces every block as a message of a Kafka topic, with a header carrying its class,\n\
         capture time, wire length and link type (so kafkain restores what pcapout and the\n\
         parsers need). Safe delivery: acks=all, idempotence, librdkafka's retries for\n\
         `timeout` seconds (a broker restart loses nothing); at the end it waits for every\n\
         delivery report and stops the run with an error naming the brokers if any message\n\
         was not delivered. Keys: `flow` puts a packet's flow (both directions) in one\n\
         partition (a block that is no packet has no key), `class` the block's class,\n\
         `OFF:LEN` bytes of the block (none if the block is shorter). `partition=class`\n\
         sends class c to partition (c - 1) mod the topic's partitions, the inverse of kafkain.\n\
         A broker that does not answer within `wait` seconds fails the build, named.",
    )
    .params(&[
        Param::new("topic", "the topic (also positional)").at(0),
        Param::new("brokers", "bootstrap brokers, HOST:PORT[,HOST:PORT...] (default 127.0.0.1:9092)"),
        Param::new("key", "message key: none, flow, class or OFF:LEN bytes of the block")
            .kind(Kind::Text)
            .default("none"),
        Param::new("partition", "key (Kafka's partitioner), class, or a partition number")
            .default("key"),
        Param::new("partitions", "create the topic with this many partitions if it does not exist (0: the broker's default on first use)")
            .kind(Kind::Count)
            .default("0"),
        Param::new("timeout", "seconds librdkafka keeps retrying a message before it fails")
            .kind(Kind::Number)
            .default("60"),
        Param::new("wait", "seconds to wait for a broker to answer at the start")
            .kind(Kind::Number)
            .default("5"),
        Param::new("linger", "milliseconds librdkafka gathers messages into a request")
            .kind(Kind::Count)
            .default("5"),
        Param::new("meta", "send the streamline header (class, capture time, wire length, link type): auto (blocks with capture metadata), yes, no")
            .kind(Kind::Choice(&["auto", "yes", "no"]))
            .default("auto"),
    ])
    .classes("sink (no output)")
    .example("streamline run 'pcapin file=examples/sample.pcap | kafkaout topic=packets key=flow brokers=127.0.0.1:9092'");
pub static KAFKAIN: FilterSpec = FilterSpec::new("kafkain", Access::Source)
    .synopsis("kafkain topic=TOPIC [brokers=HOST:PORT,..] [group=NAME] [from=earliest|latest] [count=N] [eof=yes] [class=partition|sent] [wait=SECS]")
    .description(
        "Consumes a Kafka topic's messages as blocks (with the class, capture time, wire length\n\
         and link type a kafkaout sent along). With `group=NAME` it is a member of that\n\
         consumer group and commits offsets only for messages the pipeline has taken\n\
         (at-least-once: after the batch walked the source's space, or at the end of the run\n\
         when the stream goes on to other spaces); without it, it reads every partition and\n\
         commits nothing. Ends after `count` messages, at the end of every partition with\n\
         `eof=yes`, or when interrupted. Each block's class is its partition + 1, so a\n\
         replicated filter after it (hash split on the class) keeps a partition on one replica.",
    )
    .params(&[
        Param::new("topic", "the topic (also positional)").at(0),
        Param::new("brokers", "bootstrap brokers, HOST:PORT[,HOST:PORT...] (default 127.0.0.1:9092)"),
        Param::new("group", "consumer group: share partitions with its members, commit offsets"),
        Param::new("from", "where a partition without a committed offset starts")
            .kind(Kind::Choice(&["earliest", "latest"]))
            .default("earliest"),
        Param::new("count", "stop after this many messages").kind(Kind::Size),
        Param::new("eof", "stop when every partition is at its end").kind(Kind::Flag).default("no"),
        Param::new("class", "partition (partition + 1) or sent (the class at the kafkaout)")
            .kind(Kind::Choice(&["partition", "sent"]))
            .default("partition"),
        Param::new("wait", "seconds to wait for a broker to answer at the start")
            .kind(Kind::Number)
            .default("5"),
    ])
    .classes("partition + 1 (class=sent: the class the block had at the kafkaout)")
    .example("streamline run 'kafkain topic=packets group=ids eof=yes brokers=127.0.0.1:9092 | ip | count'");
