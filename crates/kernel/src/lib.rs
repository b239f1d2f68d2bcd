//! The kernel plane (thesis 3.4, 6.3.2, 7.3.1): programs that can run in the kernel.
//! Here so far: classic BPF ([`cbpf`]), compiled from pcap-filter expressions by libpcap
//! and run by our interpreter in user space or attached to a capture socket; live capture
//! with AF_PACKET and a TPACKET_V3 ring ([`afpacket`]); transmit through a PACKET_TX_RING
//! with batched kicks ([`tx`]); veth pairs in throw-away namespaces for tests ([`netns`]).
//! Live capture with AF_XDP into our own UMEM ([`xdp`]). eBPF socket filters with their
//! state in BPF maps, the NIC-FIX filters of thesis 7.3.1 ([`ebpf`]: C sources in `bpf/`,
//! compiled by `build.rs` with clang, loaded with libbpf-rs, maps pinned on bpffs).
//! `unsafe` lives in `afpacket`, `ebpf`, `tx` and `xdp` only.

#![deny(unsafe_code)]

pub mod afpacket;
pub mod cbpf;
pub mod ebpf;
pub mod netns;
pub mod tx;
pub mod xdp;
