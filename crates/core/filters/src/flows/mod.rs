//! Flow monitoring (thesis 001 §7.3.2, the IPFIX generator): the `ipfix` filter meters the
//! packets of any stream into flows and exports them as IPFIX (RFC 7011/7012) to
//! collectors and files, or as NetFlow v9 (RFC 3954) to UDP collectors; `ipfixin` is the
//! collector side, flow records as a stream.
//!
//! One module per idea: [`observe`] (a frame's flow key and contribution), [`cache`] (the
//! flow table, its timeouts in stream time, eviction), [`ipfix`] (templates and messages,
//! of either version), [`export`] (UDP, TCP, file), [`filter`] (the `ipfix` filter),
//! [`collect`] (decoding messages into records, the `ipfixin` source).

pub mod cache;
pub mod collect;
pub mod export;
pub mod filter;
pub mod ipfix;
pub mod observe;
