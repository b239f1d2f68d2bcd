//! Streams between hosts: `netout` (a sink) and `netin` (a source), the two ends of a
//! network channel (the wire format and the credits live in `dataplane::netchan`).

use dataplane::netchan::udp::{DEFAULT_DGRAM, DEFAULT_IDLE};
use dataplane::netchan::{NetIn, NetOut, QueueChoice, UdpIn, UdpOut, DEFAULT_WINDOW};
use dataplane::{Access, Args, Filter, FilterError, FilterSpec, Kind, Param};
use std::time::Duration;

/// Whether the channel is UDP (`proto=udp`) or TCP (the default); parameters of the other
/// transport are refused, named.
fn udp(a: &Args, tcp_only: &[&str], udp_only: &[&str]) -> Result<bool, FilterError> {
    let udp = match a.get("proto", None).unwrap_or("tcp") {
        "tcp" => false,
        "udp" => true,
        p => return Err(FilterError::Rule(format!("proto={p}: expected tcp or udp"))),
    };
    let (wrong, proto) = if udp { (tcp_only, "udp") } else { (udp_only, "tcp") };
    if let Some(k) = wrong.iter().find(|k| a.get(k, None).is_some()) {
        return Err(FilterError::Rule(format!("{k}= does not apply to proto={proto}")));
    }
    Ok(udp)
}

fn make_netout(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let to = a.require("to", Some(0))?;
    let wait: f64 = a.parse("wait", None, 2.0)?;
    let wait = Duration::from_secs_f64(wait.max(0.0));
    if udp(a, &[], &["queues", "queue", "dgram"])? {
        let queues: usize = a.parse("queues", None, 1)?;
        let choice: QueueChoice = a
            .get("queue", None)
            .unwrap_or("random")
            .parse()
            .map_err(FilterError::Rule)?;
        let dgram = a.size("dgram", None, DEFAULT_DGRAM as u64)? as usize;
        return UdpOut::connect(to, queues, choice, dgram, wait)
            .map(|o| Box::new(o) as Box<dyn Filter>)
            .map_err(FilterError::Rule);
    }
    NetOut::connect(to, wait)
        .map(|o| Box::new(o) as Box<dyn Filter>)
        .map_err(FilterError::Rule)
}

fn make_netin(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let port: u16 = a.parse("port", Some(0), 0)?;
    let bind = a.get("bind", None).unwrap_or("0.0.0.0");
    if udp(a, &["window"], &["queues", "idle", "rcvbuf"])? {
        let queues: usize = a.parse("queues", None, 1)?;
        let idle: f64 = a.parse("idle", None, DEFAULT_IDLE)?;
        let rcvbuf = a.size("rcvbuf", None, 8 << 20)? as usize;
        return UdpIn::listen(bind, port, queues, rcvbuf, Duration::from_secs_f64(idle.max(0.05)))
            .map(|i| Box::new(i) as Box<dyn Filter>)
            .map_err(FilterError::Rule);
    }
    let window = a.size("window", None, DEFAULT_WINDOW)?;
    NetIn::listen(bind, port, window)
        .map(|i| Box::new(i) as Box<dyn Filter>)
        .map_err(FilterError::Rule)
}

pub static NETOUT: FilterSpec = FilterSpec::new("netout", Access::Sink, make_netout)
    .synopsis("netout to=HOST:PORT [wait=SECS] [proto=tcp|udp [queues=N] [queue=random|rr|class] [dgram=BYTES]]")
    .description(
        "Sends the stream to a `netin` on another host (or this one): every block with its\n\
         class and record metadata, in batches. Over TCP (the default) lossless: the\n\
         receiver's window bounds what is in flight (credits), a slow receiver slows the\n\
         sender. Over UDP (proto=udp) lossy, from `queues` sockets (source ports), each\n\
         block on the queue `queue` picks (random, the seed's choice; rr; class, which\n\
         keeps a class in order), packed into datagrams of `dgram` bytes; every datagram\n\
         is numbered and the receiver counts the ones lost. A receiver that refuses (or,\n\
         over UDP, does not answer) is tried again for `wait` seconds (default 2), then\n\
         the run stops with an error naming it; one that goes away mid-stream stops the\n\
         run, named.",
    )
    .params(&[
        Param::new("to", "HOST:PORT of the netin (also positional)").at(0),
        Param::new("wait", "seconds to keep trying while the receiver refuses (default 2)")
            .kind(Kind::Number),
        Param::new("proto", "tcp (lossless, the default) or udp (lossy, loss counted)"),
        Param::new("queues", "udp: sockets to send from (default 1)").kind(Kind::Count),
        Param::new("queue", "udp: queue choice per block, random (default), rr or class"),
        Param::new("dgram", "udp: datagram size in bytes (default 1472: one Ethernet frame)")
            .kind(Kind::Size),
    ])
    .classes("sink (no output)")
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | netout to=10.0.0.2:7000'");

pub static NETIN: FilterSpec = FilterSpec::new("netin", Access::Source, make_netin)
    .synopsis("netin port=PORT [bind=ADDR] [window=BYTES] | netin port=PORT proto=udp [queues=N] [idle=SECS] [rcvbuf=BYTES]")
    .description(
        "Receives the stream one `netout` sends (see netout): listens on PORT, takes one\n\
         sender, and hands its blocks on with the classes and record metadata they had\n\
         there. Ends when the sender ends its stream; a sender that goes away without\n\
         ending it (killed, its host gone) stops the run with an error naming it. With\n\
         proto=udp: `queues` sockets share the port (SO_REUSEPORT, the kernel spreads\n\
         the sender's flows over them by hash), read in turn; the datagrams lost are\n\
         counted and reported; a sender silent for `idle` seconds (default 5) mid-stream\n\
         stops the run, named.",
    )
    .params(&[
        Param::new("port", "TCP port to listen on (also positional)")
            .at(0)
            .kind(Kind::Count),
        Param::new("bind", "address to listen on (default 0.0.0.0)"),
        Param::new("window", "tcp: bytes the sender may have in flight (default 4M)")
            .kind(Kind::Size)
            .memory(1),
        Param::new("proto", "tcp (the default) or udp"),
        Param::new("queues", "udp: sockets on the port (default 1)").kind(Kind::Count),
        Param::new("idle", "udp: seconds of silence mid-stream that end the run with an error (default 5)")
            .kind(Kind::Number),
        Param::new("rcvbuf", "udp: receive buffer per socket (default 8M)").kind(Kind::Size).memory(1),
    ])
    .classes("the class each block had at the sender")
    .example("streamline run 'netin port=7000 | http | inspect'");
