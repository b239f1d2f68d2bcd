//! Streams between hosts: `netout` (a sink) and `netin` (a source), the two ends of a
//! network channel (the wire format and the credits live in `dataplane::netchan`).

use dataplane::netchan::{NetIn, NetOut, DEFAULT_WINDOW};
use dataplane::{Access, Args, Filter, FilterError, FilterSpec, Kind, Param};
use std::time::Duration;

fn make_netout(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let to = a.require("to", Some(0))?;
    let wait: f64 = a.parse("wait", None, 2.0)?;
    NetOut::connect(to, Duration::from_secs_f64(wait.max(0.0)))
        .map(|o| Box::new(o) as Box<dyn Filter>)
        .map_err(FilterError::Rule)
}

fn make_netin(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let port: u16 = a.parse("port", Some(0), 0)?;
    let bind = a.get("bind", None).unwrap_or("0.0.0.0");
    let window = a.size("window", None, DEFAULT_WINDOW)?;
    NetIn::listen(bind, port, window)
        .map(|i| Box::new(i) as Box<dyn Filter>)
        .map_err(FilterError::Rule)
}

pub static NETOUT: FilterSpec = FilterSpec::new("netout", Access::Sink, make_netout)
    .synopsis("netout to=HOST:PORT [wait=SECS]")
    .description(
        "Sends the stream to a `netin` on another host (or this one) over TCP: every block\n\
         with its class and record metadata, lossless, in batches. The receiver's window\n\
         bounds what is in flight (credits): a slow receiver slows the sender. A receiver\n\
         that refuses is tried again for `wait` seconds (default 2), then the run stops\n\
         with an error naming it; one that goes away mid-stream stops the run, named.",
    )
    .params(&[
        Param::new("to", "HOST:PORT of the netin (also positional)").at(0),
        Param::new("wait", "seconds to keep trying while the receiver refuses (default 2)")
            .kind(Kind::Number),
    ])
    .classes("sink (no output)")
    .example("streamline run 'pcapin file=examples/sample.pcap | tcp | netout to=10.0.0.2:7000'");

pub static NETIN: FilterSpec = FilterSpec::new("netin", Access::Source, make_netin)
    .synopsis("netin port=PORT [bind=ADDR] [window=BYTES]")
    .description(
        "Receives the stream one `netout` sends (see netout): listens on PORT, takes one\n\
         sender, and hands its blocks on with the classes and record metadata they had\n\
         there. Ends when the sender ends its stream; a sender that goes away without\n\
         ending it (killed, its host gone) stops the run with an error naming it.",
    )
    .params(&[
        Param::new("port", "TCP port to listen on (also positional)")
            .at(0)
            .kind(Kind::Count),
        Param::new("bind", "address to listen on (default 0.0.0.0)"),
        Param::new("window", "bytes the sender may have in flight (default 4M)")
            .kind(Kind::Size)
            .default("4M"),
    ])
    .classes("the class each block had at the sender")
    .example("streamline run 'netin port=7000 | http | inspect'");
