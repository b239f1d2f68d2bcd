//! Legacy capture programs on Streamline (thesis 3.4, 4.4.1, 7.5): a libpcap-compatible
//! library. An unmodified, dynamically linked tcpdump, tshark/dumpcap or any libpcap
//! program that finds it first as `libpcap.so.0.8` (`LD_LIBRARY_PATH`, what `streamline
//! compat -- CMD` sets up) captures live interfaces through the daemon's shared capture:
//! every reader is a reader slot (its own tag ring) on one data ring, its `pcap_setfilter`
//! program runs in the capture's one classifier pass, and a reader that falls behind loses
//! its own packets (`ps_drop`) without slowing the capture or the others. `streamline:
//! RUN/NODE` devices read a running pipeline's node. Capture files, the filter compiler
//! and devices the daemon does not serve go to the system's libpcap, loaded privately.
//!
//! Modules: `capture` (the subscription and reading it, safe Rust), `ffi` (libpcap's C
//! calls and handles), `real` (the system's libpcap).

pub mod capture;
pub mod ffi;
mod real;
