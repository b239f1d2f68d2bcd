//! Streams between hosts: `netout` (a sink) and `netin` (a source), the two ends of a
//! network channel (the wire format and the credits live in `dataplane::netchan`).

use dataplane::netchan::udp::{DEFAULT_DGRAM, DEFAULT_IDLE};
use dataplane::netchan::{NetIn, NetOut, QueueChoice, UdpIn, UdpOut, DEFAULT_WINDOW};
use dataplane::{Args, Filter, FilterError};
use std::time::Duration;

/// Whether the channel is UDP (`proto=udp`) or TCP (the default); parameters of the other
/// transport are refused, named.
fn udp(a: &Args, tcp_only: &[&str], udp_only: &[&str]) -> Result<bool, FilterError> {
    let udp = match a.get("proto", None).unwrap_or("tcp") {
        "tcp" => false,
        "udp" => true,
        p => return Err(FilterError::Rule(format!("proto={p}: expected tcp or udp"))),
    };
    let (wrong, proto) = if udp {
        (tcp_only, "udp")
    } else {
        (udp_only, "tcp")
    };
    if let Some(k) = wrong.iter().find(|k| a.get(k, None).is_some()) {
        return Err(FilterError::Rule(format!(
            "{k}= does not apply to proto={proto}"
        )));
    }
    Ok(udp)
}

pub(crate) fn make_netout(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
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

pub(crate) fn make_netin(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let port: u16 = a.parse("port", Some(0), 0)?;
    let bind = a.get("bind", None).unwrap_or("0.0.0.0");
    if udp(a, &["window"], &["queues", "idle", "rcvbuf"])? {
        let queues: usize = a.parse("queues", None, 1)?;
        let idle: f64 = a.parse("idle", None, DEFAULT_IDLE)?;
        let rcvbuf = a.size("rcvbuf", None, 8 << 20)? as usize;
        return UdpIn::listen(
            bind,
            port,
            queues,
            rcvbuf,
            Duration::from_secs_f64(idle.max(0.05)),
        )
        .map(|i| Box::new(i) as Box<dyn Filter>)
        .map_err(FilterError::Rule);
    }
    let window = a.size("window", None, DEFAULT_WINDOW)?;
    NetIn::listen(bind, port, window)
        .map(|i| Box::new(i) as Box<dyn Filter>)
        .map_err(FilterError::Rule)
}

// The declarations of this file's filters are data in the catalog (`catalog::net::{NETOUT,
// NETIN}`); their constructors are below, paired with them in `filters::CONSTRUCTORS`.
