//! The control protocol between `streamlined` and its clients, and its client side.
//!
//! A crate of its own so that everything that talks to the daemon (the `streamline`
//! command, the daemon itself, `libstreamline.so`, the libpcap stand-in) shares one
//! definition of every message, and so that the libraries loaded into other programs pull
//! in nothing heavier than this (above all not libpcap: the stand-in *is* libpcap).
//!
//! A leaf of the workspace above the platform crates: it links neither the dataplane nor
//! the language (`control/tests/layering.rs` checks), and owns the wire types the others
//! build and read.
//!
//! Modules: `proto` (wire format, messages), `client` (connect, handshake, calls), `graph`
//! (a run's graph as the protocol carries it), `block` (the block header every transport
//! carries), `tap` (the record format of a tap's rings).

pub mod block;
pub mod client;
pub mod graph;
pub mod proto;
pub mod tap;
