//! The kernel plane (thesis 3.4, 6.3.2, 7.3.1): programs that can run in the kernel.
//! Here so far: classic BPF ([`cbpf`]), compiled from pcap-filter expressions by libpcap
//! and run by our interpreter in user space. Live capture sockets (AF_PACKET, AF_XDP)
//! and eBPF programs come next.

#![forbid(unsafe_code)]

pub mod cbpf;
