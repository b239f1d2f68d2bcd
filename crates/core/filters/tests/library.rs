//! The filter library in a real space: documentation, write isolation, loops, Boolean
//! joins, TCP reassembly of out-of-order segments.

use dataplane::Space;
use std::sync::atomic::AtomicBool;

fn build(pipeline: &str) -> Space {
    let g =
        lang::parse(pipeline, &lang::WithPath(filters::Natives)).unwrap_or_else(|d| panic!("{d}"));
    Space::build(&g, &filters::Library, 1 << 24).unwrap_or_else(|e| panic!("{e}"))
}

fn run(pipeline: &str) -> Space {
    let mut s = build(pipeline);
    s.run(&AtomicBool::new(false), |_| {});
    assert!(s.warnings().is_empty(), "warnings: {:?}", s.warnings());
    s
}

/// `count`'s block totals in report order.
fn counts(s: &Space) -> Vec<u64> {
    s.report()
        .iter()
        .filter_map(|r| r.summary.as_deref())
        .filter_map(|l| l.strip_prefix("count: "))
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sl-filters-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn every_filter_is_documented_with_an_example_that_parses() {
    assert!(
        filters::REGISTRY.len() >= 30,
        "only {} filters",
        filters::REGISTRY.len()
    );
    let mut names: Vec<_> = filters::REGISTRY.iter().map(|s| s.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names.len(),
        filters::REGISTRY.len(),
        "duplicate filter names"
    );
    for s in filters::REGISTRY {
        assert!(
            !s.synopsis.is_empty() && !s.description.is_empty() && !s.classes.is_empty(),
            "{}: empty doc section",
            s.name
        );
        let doc = s.doc();
        for section in [
            "SYNOPSIS",
            "DESCRIPTION",
            "PARAMETERS",
            "CLASSES",
            "EXAMPLE",
        ] {
            assert!(doc.contains(section), "{}: no {section}", s.name);
        }
        let ex = s.example;
        let start = ex
            .find('\'')
            .unwrap_or_else(|| panic!("{}: example has no quoted pipeline", s.name))
            + 1;
        let end = ex[start..].find('\'').unwrap() + start;
        let pipeline = &ex[start..end];
        assert!(
            pipeline.contains(s.name),
            "{}: example does not use the filter",
            s.name
        );
        if let Err(d) = lang::parse(pipeline, &lang::WithPath(filters::Natives)) {
            panic!("{}: example does not parse:\n{d}", s.name);
        }
    }
}

#[test]
fn write_isolation_copies_only_shared_blocks() {
    // Linear: the editor owns its blocks, edits in place.
    let s = run("gen count=100 size=64 | xor 01 | null");
    assert_eq!(s.copies(), 0, "a linear pipeline must not copy");
    // Multicast: the first branch edits while the second still has to read: it copies;
    // the second branch sees the original bytes.
    let (a, b) = (tmp("edited"), tmp("original"));
    let s = run(&format!(
        "gen count=100 size=64 | (xor ff | outfile {}) + outfile {}",
        a.display(),
        b.display()
    ));
    assert_eq!(s.copies(), 100, "each shared block is copied once");
    let (ea, ob) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(ea.len(), 6400);
    assert!(
        ea.iter().zip(&ob).all(|(x, y)| *x == !*y),
        "edited branch is not the original xor ff"
    );
    // The unedited branch equals a run without any editor.
    let c = tmp("plain");
    run(&format!("gen count=100 size=64 | outfile {}", c.display()));
    assert_eq!(
        ob,
        std::fs::read(&c).unwrap(),
        "the other branch saw the edit"
    );
    // Read-only sources (mapped files) are copied before editing, the file is untouched.
    let before = std::fs::read(&c).unwrap();
    let s = run(&format!("file {} | xor 01 | null", c.display()));
    assert!(s.copies() > 0);
    assert_eq!(std::fs::read(&c).unwrap(), before);
}

#[test]
fn bounded_loop_runs_body_n_times() {
    let s = run("gen count=5 | for name=L 3 | count | for name=L |! count");
    assert_eq!(
        counts(&s),
        vec![15, 5],
        "body 3x per block, then each block leaves once"
    );
}

#[test]
fn boolean_joins_pass_union_and_intersection_once() {
    // sample 2 passes blocks 2,4,..; sample 3 passes 3,6,.. of 1..=600.
    let s = run("gen count=600 | (sample 2) ++ (sample 3) | count");
    assert_eq!(counts(&s), vec![300 + 200 - 100], "Or: each block once");
    let s = run("gen count=600 | (sample 2) +* (sample 3) | count");
    assert_eq!(counts(&s), vec![100], "And: blocks both passed");
    let s = run("gen count=600 | (sample 2) + (sample 3) | count");
    assert_eq!(counts(&s), vec![500], "+ keeps duplicates");
    let s = run("gen count=600 | !sample 2 | count");
    assert_eq!(
        counts(&s),
        vec![300],
        "negation passes what the filter drops"
    );
}

#[test]
fn tcpstream_reorders_and_trims_without_copying() {
    use etherparse::PacketBuilder;
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    let payload: Vec<u8> = (0..6000u32).map(|i| b'a' + (i % 26) as u8).collect();
    // Segments of 1000 bytes, sent out of order with one retransmission overlapping.
    let isn = 1_000_000u32;
    let order: [(usize, usize); 8] = [
        (0, 1000),
        (2000, 3000),
        (1000, 2000),
        (1500, 2500),
        (4000, 5000),
        (5000, 6000),
        (3000, 4000),
        (0, 1000),
    ];
    let path = tmp("ooo.pcap");
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    let frame = |seq: u32, syn: bool, data: &[u8]| {
        let b = PacketBuilder::ethernet2([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, seq, 65535);
        let b = if syn { b.syn() } else { b.ack(1) };
        let mut out = Vec::new();
        b.write(&mut out, data).unwrap();
        out
    };
    let mut t = 0u64;
    let mut put = |f: Vec<u8>| {
        t += 1;
        w.write_packet(&PcapPacket::new(
            std::time::Duration::from_micros(t),
            f.len() as u32,
            &f,
        ))
        .unwrap();
    };
    put(frame(isn, true, &[]));
    for (a, b) in order {
        put(frame(isn + 1 + a as u32, false, &payload[a..b]));
    }
    drop(w);
    let out = tmp("stream.out");
    let s = run(&format!(
        "pcapin file={} | tcpstream | outfile {}",
        path.display(),
        out.display()
    ));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        payload,
        "reassembled stream differs"
    );
    assert_eq!(s.copies(), 0, "reassembly must not copy data");
}

#[test]
fn build_errors_name_the_filter() {
    let g = lang::parse(
        "pcapin file=/no/such/file.pcap | count",
        &lang::WithPath(filters::Natives),
    )
    .unwrap();
    let err = Space::build(&g, &filters::Library, 1 << 20)
        .err()
        .expect("must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("pcapin") && msg.contains("/no/such/file.pcap"),
        "{msg}"
    );
    let g = lang::parse(
        "gen | encrypt key=abc | null",
        &lang::WithPath(filters::Natives),
    )
    .unwrap();
    let msg = Space::build(&g, &filters::Library, 1 << 20)
        .err()
        .expect("must fail")
        .to_string();
    assert!(msg.contains("64 hex digits"), "{msg}");
    // The filter is named once, by the node's label; the typed error names key, value and
    // what was expected.
    let g = lang::parse("gen size=0 | null", &lang::WithPath(filters::Natives)).unwrap();
    let msg = Space::build(&g, &filters::Library, 1 << 20)
        .err()
        .expect("must fail")
        .to_string();
    assert_eq!(msg, "gen: parameter size=0: expected 1..=1M");
}

/// `export=yes` publishes a node's output as a named IBuf; a reader elsewhere (here a
/// thread using only the ring names) reads every block through it.
#[test]
fn exported_stream_is_readable_by_name() {
    let node = format!("exp{}", std::process::id());
    let mut s = build(&format!(
        "gen count=1000 size=32 | count export=yes name={node} | null"
    ));
    let name = dataplane::export_name(&node);
    let reader = std::thread::spawn(move || {
        let tags =
            beltway::Reader::open(&name, beltway::Start::Oldest).expect("open exported stream");
        let mut r = beltway::IbufReader::new(tags, beltway::BufTable::new()).unwrap();
        let mut buf = [0u8; 64];
        let mut seqs = Vec::new();
        loop {
            let n = r.read(&mut buf).expect("read through");
            if n == 0 {
                break;
            }
            assert_eq!(n, 32);
            seqs.push(u64::from_le_bytes(buf[..8].try_into().unwrap()));
        }
        seqs
    });
    s.wait_for_export_readers(1, std::time::Duration::from_secs(20))
        .expect("reader attaches");
    s.run(&AtomicBool::new(false), |_| {});
    let seqs = reader.join().unwrap();
    assert_eq!(
        seqs,
        (0..1000).collect::<Vec<u64>>(),
        "every block, in order"
    );
    drop(s);
    assert!(
        !std::path::Path::new(&format!("/dev/shm/{}", dataplane::export_name(&node))).exists(),
        "names not removed"
    );
}

fn sample() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../examples/sample.pcap"
    ))
}

/// The same packets as pcapng give the same results as pcap.
#[test]
fn pcapng_reads_like_pcap() {
    use pcap_file::pcap::PcapReader;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::PcapNgWriter;
    let mut r = PcapReader::new(std::fs::File::open(sample()).unwrap()).unwrap();
    let ng = tmp("sample.pcapng");
    let mut w = PcapNgWriter::new(std::fs::File::create(&ng).unwrap()).unwrap();
    let idb = InterfaceDescriptionBlock {
        linktype: pcap_file::DataLink::ETHERNET,
        snaplen: 0xffff,
        options: vec![],
    };
    w.write_pcapng_block(idb).unwrap();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: p.timestamp,
            original_len: p.orig_len,
            data: p.data.clone(),
            options: vec![],
        };
        w.write_pcapng_block(epb).unwrap();
    }
    drop(w);
    for mid in ["", "tcp | dport |80 ", "udp | ", "icmp |2 "] {
        let a = counts(&run(&format!(
            "pcapin file={} | {mid}count",
            sample().display()
        )));
        let b = counts(&run(&format!("pcapin file={} | {mid}count", ng.display())));
        assert_eq!(a, b, "'{mid}' differs between pcap and pcapng");
        assert!(a[0] > 0);
    }
}

/// Frames of random bytes, truncated frames and empty frames: every protocol filter
/// classifies them (mostly as 0) without panicking, and the run completes.
#[test]
fn garbage_frames_are_classified_not_fatal() {
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    let path = tmp("garbage.pcap");
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    let mut x = 0x1234_5678_9abc_def0u64;
    let real = std::fs::read(sample()).unwrap();
    for i in 0..3000usize {
        let len = [0usize, 1, 13, 14, 20, 34, 54, 60, 200, 1514][i % 10];
        let mut f: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        // Every third frame: a real header prefix with random bytes after it.
        if i % 3 == 0 && len >= 34 {
            f[..34].copy_from_slice(&real[40..74]);
        }
        w.write_packet(&PcapPacket::new(
            std::time::Duration::from_micros(i as u64),
            len as u32,
            &f,
        ))
        .unwrap();
    }
    drop(w);
    let out = tmp("garbage.json");
    let p = format!(
        "pcapin file={} | count | (eth + ip + tcp + udp + icmp + dport + sport + proto + flow + http + dns + tcpstream + strip + hash 4 | null) + inspect format=json file={}",
        path.display(),
        out.display()
    );
    let s = run(&p);
    assert_eq!(counts(&s), vec![3000]);
    let json = std::fs::read_to_string(&out).unwrap();
    assert_eq!(json.lines().count(), 3000);
    for l in json.lines() {
        serde_json::from_str::<serde_json::Value>(l)
            .unwrap_or_else(|e| panic!("inspect wrote invalid JSON {l}: {e}"));
    }
}

#[test]
fn nicfix_filters_in_user_space_count_and_pass() {
    let s = run("gen count=100 size=64 | flowcount | bytecount len=10 | sample 7 | count");
    let sums: Vec<String> = s
        .report()
        .iter()
        .filter_map(|r| r.summary.clone())
        .collect();
    let line = |p: &str| {
        sums.iter()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no {p} in {sums:?}"))
            .clone()
    };
    assert!(
        line("flowcount: ").starts_with("flowcount: 100 packets, 6400 bytes, "),
        "{sums:?}"
    );
    assert!(
        line("bytecount: ")
            .starts_with("bytecount: 100 packets, 1000 bytes counted (first 10 of each)"),
        "{sums:?}"
    );
    assert_eq!(line("sample: "), "sample: 1 in 7: 100 seen, 14 passed");
    assert_eq!(counts(&s), vec![14]);
    // Per flow, the sample's flows add up to its totals.
    let s = run(&format!(
        "pcapin file={} | flowcount top=1000",
        sample().display()
    ));
    let text = s
        .report()
        .iter()
        .find_map(|r| r.summary.clone().filter(|l| l.starts_with("flowcount")))
        .unwrap();
    let per_flow: u64 = text
        .lines()
        .skip(1)
        .map(|l| {
            l.rsplit(": ")
                .next()
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert!(text.starts_with("flowcount: 5247 packets, "), "{text}");
    assert_eq!(per_flow, 5247, "{text}");
}

/// Byte offsets of the packet records of a pcap file (walked by hand, not by pcapin).
fn record_offsets(data: &[u8]) -> Vec<usize> {
    let mut v = Vec::new();
    let mut off = 24;
    while off + 16 <= data.len() {
        let caplen = u32::from_le_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
        if off + 16 + caplen > data.len() {
            break;
        }
        v.push(off);
        off += 16 + caplen;
    }
    v
}

/// pcapin's indexer runs in its own thread: a capture cut anywhere (inside a record
/// header, inside packet data, exactly at a record boundary) delivers every whole record
/// before the cut, in order, and names the byte where the cut record starts.
#[test]
fn truncated_capture_keeps_every_whole_record_and_names_the_cut() {
    let data = std::fs::read(sample()).unwrap();
    let recs = record_offsets(&data);
    assert_eq!(recs.len(), 5247, "examples/sample.pcap changed");
    // Several sizes so cuts fall in the first chunk of the indexer and after many.
    for k in [0, 1, 1023, 1024, 1025, 3000, 5246] {
        for extra in [0usize, 5, 16, 20] {
            let cut_at = recs[k] + extra;
            let path = tmp(&format!("cut-{k}-{extra}.pcap"));
            std::fs::write(&path, &data[..cut_at]).unwrap();
            let mut s = build(&format!("pcapin file={} | count", path.display()));
            s.run(&AtomicBool::new(false), |_| {});
            assert_eq!(
                counts(&s),
                vec![k as u64],
                "cut at byte {cut_at} (record {k} + {extra})"
            );
            if extra == 0 {
                assert!(
                    s.warnings().is_empty(),
                    "a cut at a record boundary is a whole file: {:?}",
                    s.warnings()
                );
            } else {
                let w = s.warnings().join("\n");
                assert!(
                    w.contains(&format!("at byte {}", recs[k]))
                        && w.contains(&format!("read {k} packets before it")),
                    "cut at {cut_at}: {w}"
                );
            }
            std::fs::remove_file(&path).unwrap();
        }
    }
}

/// Threads of this process named `name` (from /proc/self/task/*/comm).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == name)
        .count()
}

/// A run that stops early (its sink fails) while pcapin's indexer is far ahead: the run
/// ends, and once the space is gone so is the indexer thread (no thread left behind, the
/// file unmapped). Other tests of this binary run pcapin at the same time, so the check runs
/// in a child process of its own.
#[test]
fn early_stop_leaves_no_indexer_thread() {
    if std::env::var_os("SL_EARLY_STOP_CHILD").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "early_stop_leaves_no_indexer_thread",
                "--test-threads=1",
                "--nocapture",
            ])
            .env("SL_EARLY_STOP_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "child failed:\n{text}"
        );
        return;
    }
    let data = std::fs::read(sample()).unwrap();
    let big = tmp("big-early-stop.pcap");
    let mut f = data.clone();
    for _ in 0..7 {
        f.extend_from_slice(&data[24..]);
    }
    std::fs::write(&big, &f).unwrap();
    let mut s = build(&format!(
        "pcapin file={} | outfile /dev/full",
        big.display()
    ));
    s.run(&AtomicBool::new(false), |_| {});
    assert!(
        s.warnings().iter().any(|w| w.contains("cannot write to")),
        "{:?}",
        s.warnings()
    );
    let delivered = s
        .report()
        .iter()
        .find(|r| r.label.starts_with("pcapin"))
        .map(|r| r.counters.blocks_out)
        .unwrap();
    assert!(
        delivered < 8 * 5247,
        "the run did not stop early ({delivered} packets)"
    );
    drop(s);
    assert_eq!(
        threads_named("pcapin-index"),
        0,
        "an indexer thread outlived its space"
    );
    std::fs::remove_file(&big).unwrap();
}

/// `gen`'s blocks as documented: the sequence number (little endian, at most 8 bytes),
/// then byte i = i * 31 XOR the sequence number's low byte.
fn gen_expected(count: usize, size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(count * size);
    for seq in 0..count as u64 {
        let sb = seq.to_le_bytes();
        v.extend((0..size).map(|i| {
            if i < 8 {
                sb[i]
            } else {
                (i as u8).wrapping_mul(31) ^ sb[0]
            }
        }));
    }
    v
}

#[test]
fn gen_spreads_blocks_over_cache_sets_and_laps_in_multiples_of_256() {
    use filters::sources::GenRing;
    // 1 KiB blocks one cache line apart: 768 of them in a 1 MiB ring (a lap).
    assert_eq!(
        GenRing::new(1024),
        GenRing {
            stride: 1088,
            ring: 1 << 20,
            slots: 768
        }
    );
    assert_eq!(
        GenRing::new(4096),
        GenRing {
            stride: 4160,
            ring: 4 << 20,
            slots: 768
        }
    );
    // Sizes that are no multiple of 512 are packed.
    assert_eq!(
        GenRing::new(64),
        GenRing {
            stride: 64,
            ring: 1 << 20,
            slots: 16384
        }
    );
    assert_eq!(
        GenRing::new(1000),
        GenRing {
            stride: 1000,
            ring: 1 << 20,
            slots: 1024
        }
    );
    // Successive block starts fall in different sets of a 64-set L1 cache (64-byte lines):
    // the first lines of a batch of 256 spread over all 64 sets.
    let g = GenRing::new(1024);
    let sets: std::collections::BTreeSet<usize> =
        (0..256).map(|j| j * g.stride / 64 % 64).collect();
    assert_eq!(sets.len(), 64);
}

#[test]
fn gen_reuses_ring_slots_without_changing_a_byte() {
    // 64-byte blocks: a 1 MiB ring of 16384 slots, three laps; slots are reused from the
    // second lap on (only the sequence number is written) and every byte still matches.
    let out = tmp("gen64.bin");
    run(&format!(
        "gen count=40000 size=64 | outfile {}",
        out.display()
    ));
    assert!(
        std::fs::read(&out).unwrap() == gen_expected(40000, 64),
        "gen size=64 over three laps"
    );
    // A filter that edits every block in place: gen is told (the store notes the edits)
    // and writes its slots in full again, so each lap's output is the expected one XOR 0x0f.
    run(&format!(
        "gen count=40000 size=64 | xor 0f | outfile {}",
        out.display()
    ));
    let want: Vec<u8> = gen_expected(40000, 64).iter().map(|b| b ^ 0x0f).collect();
    assert!(std::fs::read(&out).unwrap() == want, "gen size=64 | xor 0f");
    // A bad option names itself.
    let g = lang::parse(
        "gen rewrite=maybe | null",
        &lang::WithPath(filters::Natives),
    )
    .unwrap();
    let e = Space::build(&g, &filters::Library, 1 << 20)
        .err()
        .expect("rewrite=maybe is refused")
        .to_string();
    assert!(
        e.contains("parameter rewrite=maybe: expected yes or no"),
        "{e}"
    );
}

/// Every declaration is consistent: positions run 0, 1, ... without gaps (a variadic one
/// last), parameter and class names are unique, class names name non-zero classes (0 is
/// drop), defaults are values of their parameter's kind and build the filter where it
/// builds without arguments, a filter placed in the kernel after `rx` takes `placed=`
/// (the placement writes it), and the language accepts exactly the declared keys.
#[test]
fn every_declaration_is_consistent() {
    use dataplane::{Access, Factory};
    use lang::Resolver;
    for s in filters::REGISTRY {
        let n = s.name;
        assert!(
            std::ptr::eq(filters::find(n).unwrap(), *s),
            "{n}: find returns another declaration"
        );
        let mut keys: Vec<_> = s.params.iter().map(|p| p.name).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(
            keys.len(),
            s.params.len(),
            "{n}: a parameter declared twice"
        );
        let mut at: Vec<_> = s
            .params
            .iter()
            .filter_map(|p| p.position.map(|i| (i, p.variadic)))
            .collect();
        at.sort();
        for (i, (pos, variadic)) in at.iter().enumerate() {
            assert_eq!(
                *pos, i,
                "{n}: positional parameters must be 0, 1, ... ({at:?})"
            );
            assert!(
                !variadic || i + 1 == at.len(),
                "{n}: only the last positional parameter may take the rest"
            );
            assert_eq!(
                s.positional(i).map(|p| p.position),
                Some(Some(i)),
                "{n}: position {i} unreachable"
            );
        }
        let mut classes: Vec<_> = s.class_names.iter().map(|&(name, _)| name).collect();
        classes.sort();
        classes.dedup();
        assert_eq!(
            classes.len(),
            s.class_names.len(),
            "{n}: a class name given twice"
        );
        for &(name, class) in s.class_names {
            assert!(
                class != 0,
                "{n}: class name {name} names class 0, which drops"
            );
            assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
                "{n}: class name '{name}'"
            );
        }
        assert_eq!(
            s.source,
            s.access == Access::Source,
            "{n}: source and access class disagree"
        );
        assert!(!s.implementations.is_empty(), "{n}: no implementation");
        if s.runs_after_rx_in_kernel() {
            assert!(
                s.param("placed").is_some(),
                "{n}: runs after rx in the kernel but does not take placed="
            );
        }
        assert_eq!(
            filters::Natives.params(n),
            Some(s.params.iter().map(|p| p.name.to_string()).collect()),
            "{n}: the language's keys"
        );
        let builds_bare = filters::Library
            .make(n, &dataplane::Args::new(n, vec![], vec![]))
            .is_ok();
        for p in s.params {
            if let Some(d) = p.default {
                assert!(
                    p.kind.admits(d),
                    "{n}: default {}={d} is not {}",
                    p.name,
                    p.kind.expected()
                );
                if builds_bare {
                    let args =
                        dataplane::Args::new(n, vec![], vec![(p.name.to_string(), d.to_string())]);
                    if let Err(e) = filters::Library.make(n, &args) {
                        panic!(
                            "{n}: builds without arguments but not with its default {}={d}: {e}",
                            p.name
                        );
                    }
                }
            }
        }
    }
}

/// The library checks arguments against the declaration before the filter's constructor
/// runs: an undeclared key, one positional parameter too many and a value of the wrong
/// kind are typed errors naming what was wrong; a key the filter declares is taken
/// (`regex` declares the `icase` and `invert` it advertises).
#[test]
fn the_library_checks_arguments_against_the_declaration() {
    use dataplane::{Factory, FilterError};
    let make = |f: &str, pos: &[&str], opts: &[(&str, &str)]| {
        let a = dataplane::Args::new(
            f,
            pos.iter().map(|s| s.to_string()).collect(),
            opts.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        filters::Library.make(f, &a).map(|_| ())
    };
    match make("dedup", &[], &[("windw", "8")]) {
        Err(FilterError::Undeclared { key, accepted }) => {
            assert_eq!((key.as_str(), accepted), ("windw", vec!["window"]))
        }
        other => panic!("{other:?}"),
    }
    match make("tcp", &["80"], &[]) {
        Err(
            e @ FilterError::Positional {
                given: 1, most: 0, ..
            },
        ) => assert_eq!(e.to_string(), "1 positional parameter given, it takes none"),
        other => panic!("{other:?}"),
    }
    match make("dedup", &["lots"], &[]) {
        Err(FilterError::BadValue {
            key,
            value,
            expected,
        }) => assert_eq!(
            (key.as_str(), value.as_str(), expected.as_str()),
            ("window", "lots", "a size (e.g. 64, 4K, 1M)")
        ),
        other => panic!("{other:?}"),
    }
    match make("hist", &[], &[("by", "color")]) {
        Err(e) => assert_eq!(e.to_string(), "parameter by=color: expected class or len"),
        Ok(()) => panic!("hist by=color built"),
    }
    make("regex", &["x"], &[("icase", "yes"), ("invert", "no")]).unwrap();
    make("match", &["a", "b", "c"], &[]).unwrap();
    make("dport", &["22", "80,443"], &[]).unwrap();
    // A value of the declared kind the filter still refuses: `make` names it the same way.
    match make("dport", &["22,99999"], &[]) {
        Err(FilterError::BadValue {
            key,
            value,
            expected,
        }) => assert_eq!(
            (key.as_str(), value.as_str(), expected.as_str()),
            ("port", "99999", "numbers in 0..=65535")
        ),
        other => panic!("{other:?}"),
    }
    // Control options are not the filter's, and pass.
    make("count", &[], &[("name", "c"), ("share", "no")]).unwrap();
}
