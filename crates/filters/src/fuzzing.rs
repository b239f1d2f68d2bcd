//! Harness shared by the cargo-fuzz target (crates/filters/fuzz) and the test replaying
//! its findings. Not part of the API.

use crate::packet::{parse, LINKTYPES};
use dataplane::Space;
use std::sync::atomic::AtomicBool;

/// Parse `data` as a frame of each link type, then as a capture file through a pipeline of
/// every protocol filter. Panics only on a bug.
pub fn run_capture(data: &[u8]) {
    for &link in LINKTYPES {
        if let Some(p) = parse(data, Some(link)) {
            assert!(
                p.payload.0 + p.payload.1 <= data.len(),
                "payload outside the frame"
            );
        }
    }
    let _ = crate::app::http_method(data);
    let _ = crate::app::dns_kind(data);
    // kafkain's record header and kafkaout's/kafkain's parameter parsers (text from a user).
    let _ = crate::kafka::parse_header(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::kafka::parse_brokers(text);
        let _ = crate::kafka::parse_topic("topic", text);
        let _ = crate::kafka::KeyBy::parse(text);
        let _ = crate::kafka::PartitionBy::parse(text);
    }
    // As a capture file: pcap magic + header prepended when the input has none, so the
    // fuzzer explores records rather than the magic check.
    let mut file = Vec::new();
    if data.len() < 4
        || ![[0xd4, 0xc3, 0xb2, 0xa1], [0x0a, 0x0d, 0x0d, 0x0a]]
            .contains(&[data[0], data[1], data[2], data[3]])
    {
        file.extend_from_slice(&[
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0,
            0,
        ]);
    }
    file.extend_from_slice(data);
    // The reader itself: every record lies inside the file, rewrites stay in the copy.
    if let Ok(mut sf) = crate::savefile::Savefile::open(&file) {
        while let Ok(Some(r)) = sf.next(&file) {
            assert!(
                r.pos + r.caplen as usize <= file.len(),
                "record outside the file"
            );
            if r.rewrite {
                let mut copy = r.bytes(&file).to_vec();
                crate::savefile::swap_pseudo_header(sf.dlt(), &mut copy, r.orig_len);
            }
        }
    }
    let path = std::env::temp_dir().join(format!("sl-fuzz-capture-{}.pcap", std::process::id()));
    if std::fs::write(&path, &file).is_err() {
        return;
    }
    let pipeline = format!(
        "pcapin file={} | eth + ip + tcp + udp + icmp + dport + sport + proto + flow + http + dns + tcpstream + strip + (inspect format=json file=/dev/null)",
        path.display()
    );
    let g = lang::parse(&pipeline, &crate::Natives).expect("fixed pipeline parses");
    if let Ok(mut s) = Space::build(&g, &crate::Library, 1 << 20) {
        s.run(&AtomicBool::new(false), |_| {});
    }
    let _ = std::fs::remove_file(&path);
}
