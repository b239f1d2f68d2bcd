//! Harness shared by the cargo-fuzz target (crates/core/filters/fuzz) and the test replaying
//! its findings. Not part of the API.

use crate::packet::{parse, LINKTYPES};
use dataplane::Space;
use std::sync::atomic::AtomicBool;

/// Parse `data` as a frame of each link type, then as a capture file through a pipeline of
/// every protocol filter. Panics only on a bug. Returns whether the pipeline ran (the
/// file's header was valid), so a replay can tell that its inputs reach the filters.
pub fn run_capture(data: &[u8]) -> bool {
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
    let header_ok = crate::savefile::Savefile::open(&file).is_ok();
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
    // Setting up is not under test: a file that cannot be written is the environment's
    // failure, said as such, never an input passed unread.
    std::fs::write(&path, &file)
        .unwrap_or_else(|e| panic!("setup: writing {}: {e}", path.display()));
    let _cleanup = RemoveOnDrop(&path);
    let pipeline = format!(
        "pcapin file={} | eth + ip + tcp + udp + icmp + dport + sport + proto + flow + http + dns + tcpstream + strip + (inspect format=json file=/dev/null)",
        path.display()
    );
    let g = lang::parse(&pipeline, &crate::Natives).expect("fixed pipeline parses");
    // pcapin refuses at build exactly the files whose header libpcap refuses (the reader
    // above): any other build failure is a bug, not an input to skip.
    let built = Space::build(&g, &crate::Library, 1 << 20);
    match built {
        Ok(mut s) => {
            assert!(
                header_ok,
                "pcapin accepted a file the savefile reader refuses"
            );
            s.run(&AtomicBool::new(false), |_| {});
        }
        Err(e) => assert!(
            !header_ok,
            "building the fixed pipeline failed on a capture file with a valid header: {e}"
        ),
    }
    header_ok
}

/// Removes the scratch capture file however the harness ends (a panic included).
struct RemoveOnDrop<'a>(&'a std::path::Path);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}
