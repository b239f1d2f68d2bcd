//! The kernel plane (thesis 3.4, 6.3.2, 7.3.1): programs that can run in the kernel.
//! Here so far: classic BPF ([`cbpf`]), compiled from pcap-filter expressions by libpcap
//! and run by our interpreter in user space or attached to a capture socket; live capture
//! with AF_PACKET and a TPACKET_V3 ring ([`afpacket`]); transmit through a PACKET_TX_RING
//! with batched kicks ([`tx`]); adaptive system-call batching for both, seed 002's
//! Algorithms 1-2, as pure logic over the two rings ([`batching`]); veth pairs in throw-away namespaces for tests ([`netns`]).
//! Live capture with AF_XDP into our own UMEM ([`xdp`]). Packet sockets the daemon opens
//! with a locked filter and lends to an unprivileged run's worker ([`lend`]). eBPF socket filters with their
//! state in BPF maps, the NIC-FIX filters of thesis 7.3.1 ([`ebpf`]: C sources in `bpf/`,
//! compiled by `build.rs` with clang, loaded with libbpf-rs, maps pinned on bpffs).
//! `unsafe` lives in `afpacket`, `ebpf`, `tx` and `xdp` only.
//!
//! Memory the kernel lends user space (a TPACKET ring's blocks, an AF_XDP UMEM's chunks)
//! is read through [`LentMemory`]; why that is sound without anything asked of callers
//! is written there.

#![deny(unsafe_code)]

pub mod afpacket;
pub mod batching;
pub mod cbpf;
pub mod coalesce;
pub mod ebpf;
pub mod lend;
pub mod netns;
pub mod tx;
pub mod xdp;

/// Memory the kernel lends user space piece by piece and takes back: the blocks of a
/// TPACKET_V3 ring ([`afpacket::RxRing`]), the chunks of an AF_XDP UMEM ([`xdp::XdpRx`]).
/// One interface for both, so their user (the store's lent DBufs, through one adapter)
/// is written once.
///
/// Sound by construction, with nothing asked of the caller: [`LentMemory::bytes`] borrows
/// the lender shared (`&self`) and the slice it returns lives no longer than that borrow,
/// while everything that hands memory back to the kernel (`RxRing::release`,
/// `XdpRx::recycle`, and `next_block` / `next_batch`, which may do so) takes the lender
/// exclusively (`&mut self`). So no slice can be alive when its memory goes back: the
/// borrow checker refuses the program (see the `compile_fail` examples on
/// `RxRing::release` and `XdpRx::recycle`). This costs nothing per frame: the checks are
/// the compiler's, and which lap or generation user space holds is plain memory, since
/// only `&mut self` changes it. (Alternatives weighed: making release an `unsafe fn`
/// whose contract one owner discharges keeps a proof obligation in prose; a guard object
/// per block or a count of live slices costs an atomic per frame on the hot path.)
///
/// `bytes` answers `None` for a position whose piece has gone back to the kernel since it
/// was handed out (positions carry a lap or generation and are never reused), and for
/// anything outside the memory; never a panic, whatever `pos` and `len`.
pub trait LentMemory: Send + std::fmt::Debug + 'static {
    /// The `len` bytes at absolute position `pos`, if user space holds them now.
    fn bytes(&self, pos: u64, len: usize) -> Option<&[u8]>;
}
