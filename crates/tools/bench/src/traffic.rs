//! Traffic for the benchmarks that capture or receive it: a veth pair into a fresh
//! namespace, and UDP senders at a paced rate or as fast as one sender can (what the
//! machine offers, from which a benchmark chooses its load).

use crate::util::{err, Result};
use kernel::netns::Veth;
use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// A veth pair into a fresh namespace (the kernel crate's helper); the far end answers
/// nothing (no ICMP comes back to disturb the counts: a capture of everything on the pair
/// sees what was sent and little else).
pub(crate) fn veth() -> Result<Veth> {
    let v = Veth::new("cb").map_err(|e| {
        err(format!(
            "{e} (the capture benchmark needs root and iproute2)"
        ))
    })?;
    // Destructors do not run when a signal or the watchdog ends the run: remove the
    // namespace then too.
    crate::util::remove_netns_on_abnormal_exit(&v.ns);
    // No ICMP port unreachable from the far end: `icmp_ratelimit` 0 (what this did until
    // 2026-11-27) lifts the per-destination limit but leaves the namespace's global one,
    // and about 1000 unreachables a second came back into every capture of the pair.
    // With no global credit the far end sends none.
    v.exec(&[
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.icmp_msgs_per_sec=0",
        "net.ipv4.icmp_msgs_burst=0",
    ])
    .map_err(|e| err(format!("silencing ICMP in {}: {e}", v.ns)))?;
    Ok(v)
}

/// IPv6 turned off on both ends of the pair, so neither sends anything of its own (no
/// neighbour discovery): what a capture of the pair sees is what was sent.
pub(crate) fn ipv6_off(v: &Veth) -> Result<()> {
    for (here, dev) in [(true, &v.here), (false, &v.there)] {
        let arg = format!("net.ipv6.conf.{dev}.disable_ipv6=1");
        let r = if here {
            kernel::netns::run(&["sysctl", "-qw", &arg])
        } else {
            v.exec(&["sysctl", "-qw", &arg])
        };
        r.map_err(|e| err(format!("turning IPv6 off on {dev}: {e}")))?;
    }
    Ok(())
}

/// Send `pps` UDP datagrams (64 bytes) per second for `secs` from `flows` source ports,
/// in `sendmmsg` batches of up to 64 (a socket per flow, batches taking turns); every 100th
/// goes to port 7 (packet i when i % 100 == 0). Returns the number sent and the seconds it
/// took (above `secs` when the sender could not keep the rate). Gives up at twice `secs`
/// plus a second, with fewer sent: a socket buffer the kernel never drains (seen once
/// with XDP on the veth's peer) must show as a sender that did not keep the rate, not
/// loop for ever.
pub(crate) fn send(src: &str, dst: &str, pps: u64, secs: f64, flows: u16) -> Result<(u64, f64)> {
    send_sized(src, dst, pps, secs, flows, 64)
}

/// [`send`] with datagrams of `size` bytes of payload.
pub(crate) fn send_sized(
    src: &str,
    dst: &str,
    pps: u64,
    secs: f64,
    flows: u16,
    size: usize,
) -> Result<(u64, f64)> {
    send_paced(src, dst, pps, secs, flows, size, Duration::from_micros(200))
}

/// [`send_sized`] waking every `tick` (what is due goes in `sendmmsg` batches of up to 64):
/// a longer tick costs the sender fewer wake-ups per packet.
pub(crate) fn send_paced(
    src: &str,
    dst: &str,
    pps: u64,
    secs: f64,
    flows: u16,
    size: usize,
    tick: Duration,
) -> Result<(u64, f64)> {
    let socks: Vec<UdpSocket> = (0..flows)
        .map(|_| UdpSocket::bind(format!("{src}:0")))
        .collect::<std::io::Result<_>>()
        .map_err(|e| err(format!("udp socket: {e}")))?;
    let ip: std::net::Ipv4Addr = dst
        .parse()
        .map_err(|e| err(format!("destination {dst}: {e}")))?;
    let (port7, port9) = (SocketAddrV4::new(ip, 7), SocketAddrV4::new(ip, 9));
    let payload = vec![0x5au8; size];
    let t0 = Instant::now();
    let total = (pps as f64 * secs) as u64;
    let mut sent = 0u64;
    let mut turn = 0usize;
    let mut to = Vec::with_capacity(64);
    let give_up = secs * 2.0 + 1.0;
    while sent < total && t0.elapsed().as_secs_f64() < give_up {
        let due = ((t0.elapsed().as_secs_f64() * pps as f64) as u64).min(total);
        while sent < due {
            to.clear();
            to.extend((sent..due.min(sent + 64)).map(|i| if i % 100 == 0 { port7 } else { port9 }));
            turn = (turn + 1) % socks.len();
            match crate::proc::send_many(&socks[turn], &payload, &to) {
                Ok(n) if n > 0 => sent += n as u64,
                // The socket's buffer is full: go on after the pause.
                Ok(_) => break,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) => break,
                Err(e) => return Err(err(format!("sendmmsg to {dst}: {e}"))),
            }
        }
        std::thread::sleep(tick);
    }
    Ok((sent, t0.elapsed().as_secs_f64()))
}

/// As fast as one sender can: datagrams of `size` bytes in sendmmsg batches for `secs`,
/// with nothing else running (what the machine offers; benchmarks choose their load from
/// it). Packets per second.
pub(crate) fn max_rate(src: &str, dst: &str, secs: f64, size: usize) -> Result<f64> {
    let sock = std::net::UdpSocket::bind(format!("{src}:0"))
        .map_err(|e| err(format!("udp socket: {e}")))?;
    let ip: std::net::Ipv4Addr = dst.parse().map_err(|e| err(format!("{dst}: {e}")))?;
    let to = vec![std::net::SocketAddrV4::new(ip, 9); 64];
    let payload = vec![0x5au8; size];
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        match crate::proc::send_many(&sock, &payload, &to) {
            Ok(n) => sent += n as u64,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) => {
                std::thread::yield_now()
            }
            Err(e) => return Err(err(format!("sendmmsg: {e}"))),
        }
    }
    Ok(sent as f64 / t0.elapsed().as_secs_f64())
}
