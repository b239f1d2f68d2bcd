//! Intrusion detection and prevention (thesis 001 §7.3.1 SafeCard, §7.3.2 Kernel Snort):
//! rules as users write them for Snort 3 and Suricata, and their evaluation.
//!
//! - [`rules`]: the rule language's common subset, parsed into typed [`rules::Rule`]s
//!   (header, contents with their modifiers, pcre, flow, flowbits, HTTP sticky buffers,
//!   threshold). A rule the loader does not understand is an error naming its line and
//!   keyword, never skipped in silence.
//! - [`prefilter`], [`stream`], [`defrag`], [`engine`], [`filter`]: the fast-pattern
//!   automaton, conservative TCP reassembly, IPv4 defragmentation, the engine that judges
//!   packets, and the `ips` filter (see ARCHITECTURE.md, "Intrusion detection").
//! - [`header`]: the rule set's header stage, one pcap-filter expression of what any rule
//!   could be decided on, run on the capture socket after `rx` or first thing in `ips`.
//! - [`eval`]: one rule's payload checks against the buffers of one packet or stream
//!   (offset/depth/distance/within with Snort's backtracking over earlier matches).
//!
//! Owns: the rule language and what a rule's checks mean. Does not own: reassembly
//! (`app::tcpstream`), HTTP parsing (`app::http`), the multi-pattern prefilter that picks
//! the candidate rules, or where alerts are written.

pub mod defrag;
pub mod engine;
pub mod eval;
pub mod filter;
pub mod header;
pub mod prefilter;
pub mod rules;
pub mod stream;
