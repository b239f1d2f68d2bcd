//! The control protocol between `streamlined` and its clients, and its client side.
//!
//! A crate of its own so that everything that talks to the daemon (the `streamline`
//! command, the daemon itself, `libstreamline.so`, the libpcap stand-in) shares one
//! definition of every message, and so that the libraries loaded into other programs pull
//! in nothing heavier than this (above all not libpcap: the stand-in *is* libpcap).
//!
//! Modules: `proto` (wire format, messages), `client` (connect, handshake, calls).

pub mod client;
pub mod proto;
