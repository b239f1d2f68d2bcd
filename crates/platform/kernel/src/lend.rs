//! Privileged sockets lent by the daemon (issue 33: the kernel enforces what the policy
//! grants). A worker that runs a non-root client's pipeline holds no capability, so it
//! cannot open a packet socket; for each `rx` or `tx` node a policy template grants, the
//! daemon opens the socket, attaches and locks its filter, and hands it over. What the
//! worker can then see is what the locked filter lets through, whatever the worker does
//! with the descriptor.
//!
//! Owns: the filters a lent socket carries ([`rx_guard`]: the template's kernel filter
//! behind a check of the interface's index, so rebinding the socket elsewhere shows
//! nothing new; [`tx_guard`]: accept nothing, so a transmit socket never captures), opening
//! them ([`lend_rx`], [`lend_tx`], the daemon's side), and the worker's side: the
//! registry of sockets it was lent ([`install`], [`take`]) and what it tells the graph
//! passes ([`kernel_filter_allowed`]: a program can be placed on a lent socket only if it
//! is the one locked there already).
//!
//! The registry's description (kind, device, locked filter; no descriptors) is also
//! carried in the environment ([`ENV`]), so process spaces the worker starts place filters
//! the same way the worker does (their graph passes must arrive at the same graph).
//! Safe Rust: the system calls are [`crate::afpacket`]'s.

use crate::afpacket::{ifindex, inherited_packet_socket, locked_socket};
use crate::cbpf::{compile, Insn};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// The environment variable that carries the lent sockets' description to process spaces.
pub const ENV: &str = "STREAMLINE_LENT";

/// What a lent socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Rx,
    Tx,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Rx => "rx",
            Kind::Tx => "tx",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "rx" => Some(Kind::Rx),
            "tx" => Some(Kind::Tx),
            _ => None,
        }
    }
}

/// One lent socket as the worker knows it: what for, on which device, with which
/// pcap-filter expression locked on it (None: every frame of the device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub kind: Kind,
    pub dev: String,
    pub filter: Option<String>,
}

struct Registry {
    described: Vec<Described>,
    /// The descriptors, in this process only (the worker), with their description.
    sockets: Vec<(Described, OwnedFd)>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if s.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The description as [`ENV`] carries it: one socket a line, `KIND DEV HEXFILTER` (`-`
/// for no filter).
fn encode(d: &[Described]) -> String {
    d.iter()
        .map(|d| {
            format!(
                "{} {} {}",
                d.kind.name(),
                d.dev,
                d.filter.as_deref().map_or("-".to_string(), hex)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn decode(s: &str) -> Result<Vec<Described>, String> {
    s.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let [kind, dev, filter] = f.as_slice() else {
                return Err(format!("{ENV}: `{l}`: expected KIND DEV FILTER"));
            };
            Ok(Described {
                kind: Kind::parse(kind).ok_or_else(|| format!("{ENV}: `{l}`: kind rx or tx"))?,
                dev: dev.to_string(),
                filter: match *filter {
                    "-" => None,
                    h => Some(unhex(h).ok_or_else(|| format!("{ENV}: `{l}`: bad filter"))?),
                },
            })
        })
        .collect()
}

/// The worker's side: these sockets (inherited descriptors, checked to be packet
/// sockets) are this run's privileged resources. From now on this process is in lending
/// mode: filters needing a socket take it from here ([`take`]) and never try to open one.
/// Sets [`ENV`] for the processes it starts; call before any thread exists.
pub fn install(lent: Vec<(Described, i32)>) -> io::Result<()> {
    let mut sockets = Vec::new();
    for (d, fd) in lent {
        sockets.push((d, inherited_packet_socket(fd)?));
    }
    let described: Vec<Described> = sockets.iter().map(|(d, _)| d.clone()).collect();
    std::env::set_var(ENV, encode(&described));
    *REGISTRY.lock().expect("not poisoned") = Some(Registry { described, sockets });
    Ok(())
}

/// A process space's side: the description its worker left in [`ENV`], if any (no
/// descriptors: a lent socket is used only in the worker).
pub fn install_from_env() -> Result<(), String> {
    let Ok(s) = std::env::var(ENV) else {
        return Ok(());
    };
    let described = decode(&s)?;
    *REGISTRY.lock().expect("not poisoned") = Some(Registry {
        described,
        sockets: Vec::new(),
    });
    Ok(())
}

/// Whether this process runs with lent sockets only (a non-root client's worker or one of
/// its process spaces).
pub fn lending() -> bool {
    REGISTRY.lock().expect("not poisoned").is_some()
}

/// Whether this process (or its worker) was lent a socket for `kind`.
pub fn lent_any(kind: Kind) -> bool {
    REGISTRY
        .lock()
        .expect("not poisoned")
        .as_ref()
        .is_some_and(|r| r.described.iter().any(|d| d.kind == kind))
}

/// A lent socket for `kind` on `dev`: `Ok(None)` when this process is not in lending mode
/// (open one yourself); an error naming what is missing when it is and none is left.
pub fn take(kind: Kind, dev: &str) -> io::Result<Option<(Described, OwnedFd)>> {
    let mut reg = REGISTRY.lock().expect("not poisoned");
    let Some(r) = reg.as_mut() else {
        return Ok(None);
    };
    match r
        .sockets
        .iter()
        .position(|(d, _)| d.kind == kind && d.dev == dev)
    {
        Some(i) => Ok(Some(r.sockets.remove(i))),
        None => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            if r.described.iter().any(|d| d.kind == kind && d.dev == dev) {
                format!("{} dev={dev}: the packet sockets the daemon lent this run are in use or in its worker process (a lent socket serves the node it was granted for, in the worker's own spaces)", kind.name())
            } else {
                format!("{} dev={dev}: this run holds no packet socket for it (the daemon lends one for each node a policy template grants, when the run starts; a live edit cannot add one)", kind.name())
            },
        )),
    }
}

/// Whether the graph passes may place `expr` (a pcap-filter expression; None: an eBPF
/// program) on the socket of `rx dev=DEV`: always outside lending mode; in it, only the
/// expression locked on the lent socket already (then nothing is attached: the kernel
/// runs it anyway), never an eBPF program (loading one needs CAP_BPF).
pub fn kernel_filter_allowed(dev: &str, expr: Option<&str>) -> bool {
    let reg = REGISTRY.lock().expect("not poisoned");
    let Some(r) = reg.as_ref() else {
        return true;
    };
    expr.is_some()
        && r.described
            .iter()
            .any(|d| d.kind == Kind::Rx && d.dev == dev && d.filter.as_deref() == expr)
}

/// `BPF_LD|BPF_W|BPF_ABS` of an ancillary field, `BPF_JMP|BPF_JEQ|BPF_K`, `BPF_RET|BPF_K`.
const LD_ABS_W: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;

/// The filter a lent capture socket carries: frames of interface `ifindex` only, then
/// `program` (the template's kernel filter; None: all of such frames, whole).
pub fn rx_guard(ifindex: u32, program: Option<&[Insn]>) -> Vec<Insn> {
    let mut p = vec![
        // A = the index of the interface the frame came in on (SKF_AD_IFINDEX).
        Insn {
            code: LD_ABS_W,
            jt: 0,
            jf: 0,
            k: (libc::SKF_AD_OFF + libc::SKF_AD_IFINDEX) as u32,
        },
        // Ours: skip the drop.
        Insn {
            code: JEQ_K,
            jt: 1,
            jf: 0,
            k: ifindex,
        },
        Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    match program {
        // The template's program starts with a load of its own (libpcap's always do), so
        // the A left by the guard is never read.
        Some(insns) => p.extend_from_slice(insns),
        None => p.push(Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: u32::MAX,
        }),
    }
    p
}

/// The filter a lent transmit socket carries: nothing is ever delivered to it.
pub fn tx_guard() -> Vec<Insn> {
    vec![Insn {
        code: RET_K,
        jt: 0,
        jf: 0,
        k: 0,
    }]
}

/// The daemon's side: a capture socket for `rx dev=DEV` whose locked filter passes only
/// `DEV`'s frames that `expr` (a pcap-filter expression, compiled by libpcap for Ethernet)
/// accepts.
pub fn lend_rx(dev: &str, expr: Option<&str>) -> io::Result<OwnedFd> {
    let idx = ifindex(dev)?;
    let prog = match expr {
        Some(e) => Some(
            compile(e, 1, 262144)
                .map_err(|x| io::Error::new(io::ErrorKind::InvalidInput, format!("{e}: {x}")))?,
        ),
        None => None,
    };
    locked_socket(&rx_guard(idx, prog.as_ref().map(|p| p.insns())))
}

/// The daemon's side: a transmit socket for `tx dev=DEV` that can never receive.
pub fn lend_tx(dev: &str) -> io::Result<OwnedFd> {
    ifindex(dev)?;
    locked_socket(&tx_guard())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_survives_the_environment() {
        let d = vec![
            Described {
                kind: Kind::Rx,
                dev: "lo".into(),
                filter: Some("udp port 53 and host 1.2.3.4".into()),
            },
            Described {
                kind: Kind::Tx,
                dev: "veth0".into(),
                filter: None,
            },
        ];
        assert_eq!(decode(&encode(&d)).unwrap(), d);
        assert!(decode("rx lo zz").unwrap_err().contains("bad filter"));
        assert!(decode("xx lo -").unwrap_err().contains("kind"));
        assert!(decode("rx lo").unwrap_err().contains("expected"));
    }

    #[test]
    fn the_guard_drops_other_interfaces_before_the_template_runs() {
        let g = rx_guard(7, None);
        assert_eq!(g.len(), 4);
        assert_eq!((g[1].code, g[1].jt, g[1].jf, g[1].k), (JEQ_K, 1, 0, 7));
        assert_eq!((g[2].code, g[2].k), (RET_K, 0));
        let t = [Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: 96,
        }];
        assert_eq!(&rx_guard(7, Some(&t))[3..], &t);
    }
}
