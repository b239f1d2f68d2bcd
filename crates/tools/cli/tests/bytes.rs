//! Files a user keeps (issue 41): what `deflate` writes is a standard stream that `gzip -dc`
//! (and `pigz`, `zlib-flate` when installed) and `inflate` read back, in every placement;
//! `inflate` reads what gzip writes, finding members in the byte stream wherever `file`
//! cuts its blocks; `pcapin | pcapout` gives back the capture byte for byte (header,
//! byte order, time precision, snap length, records), in every placement.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_streamline");

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.."))
}

/// A test's scratch directory, removed however the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("sl-bytes-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run a pipeline; its standard error. Fails the test if the run fails.
fn run(p: &str) -> String {
    let o = Command::new(BIN)
        .args(["run", "-q", p])
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "`{p}` failed:\n{err}");
    err
}

/// A file that compresses somewhat but not trivially (text with numbers), 1.3 MB: not a
/// multiple of 64 KiB, so the last block is short.
fn input(dir: &Scratch) -> PathBuf {
    let p = dir.join("big.bin");
    let mut v = Vec::new();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut i = 0u64;
    while v.len() < 1_300_001 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(format!("line {i} value {} ", x % 100_000).as_bytes());
        if x % 7 == 0 {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.push(b'\n');
        i += 1;
    }
    v.truncate(1_300_001);
    std::fs::write(&p, &v).unwrap();
    p
}

/// Run `cmd` with `file` on standard input; its standard output (the test fails if the
/// tool fails). None if the tool is not installed.
fn tool(cmd: &str, args: &[&str], file: &Path) -> Option<Vec<u8>> {
    let f = std::fs::File::open(file).unwrap();
    let o = match Command::new(cmd).args(args).stdin(f).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("{cmd}: {e}"),
    };
    assert!(
        o.status.success(),
        "{cmd} {args:?} < {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(o.stdout)
}

/// The placements of the README example: one space, a thread space, replicas on two
/// threads (round-robin split, order-restoring join), a process space, replicas across a
/// thread and a process space.
const PLACEMENTS: &[&str] = &["", " space=1", " space=1,2", " space=p1", " space=1,p2"];

#[test]
fn deflate_writes_what_gzip_and_inflate_read_in_every_placement() {
    let dir = Scratch::new("deflate");
    let big = input(&dir);
    let data = std::fs::read(&big).unwrap();
    let mut outputs: Vec<(String, Vec<u8>)> = Vec::new();
    for place in PLACEMENTS {
        let z = dir.join("big.z");
        let p = format!(
            "file {} split=fixed size=64K | deflate{place} | outfile {}",
            big.display(),
            z.display()
        );
        run(&p);
        let gz = tool("gzip", &["-dc"], &z).expect("gzip is installed (scripts/setup)");
        assert!(gz == data, "`{p}`: gzip -dc gives back other bytes");
        if let Some(o) = tool("pigz", &["-dc"], &z) {
            assert!(o == data, "`{p}`: pigz -dc gives back other bytes");
        }
        // Our own inflate, reading the file in blocks that cut members anywhere.
        for split in ["", " split=fixed size=1000", " size=7"] {
            let back = dir.join("back");
            let q = format!(
                "file {}{split} | inflate | outfile {}",
                z.display(),
                back.display()
            );
            let err = run(&q);
            assert!(
                std::fs::read(&back).unwrap() == data,
                "`{p}` then `{q}`: other bytes back\n{err}"
            );
            assert!(!err.contains("dropped"), "`{q}` warned:\n{err}");
        }
        outputs.push((p, std::fs::read(&z).unwrap()));
    }
    // Placement changes nothing: the same bytes each time.
    for (p, o) in &outputs[1..] {
        assert!(
            o == &outputs[0].1,
            "`{p}` wrote other bytes than one deflate in one space"
        );
    }
}

#[test]
fn zlib_and_raw_formats_round_trip() {
    let dir = Scratch::new("formats");
    let big = input(&dir);
    let data = std::fs::read(&big).unwrap();
    for (format, inflate) in [
        ("zlib", "inflate"),
        ("zlib", "inflate format=zlib"),
        ("raw", "inflate format=raw"),
    ] {
        let z = dir.join("big.z");
        run(&format!(
            "file {} split=fixed size=64K | deflate format={format} space=1,2 | outfile {}",
            big.display(),
            z.display()
        ));
        if format == "zlib" {
            if let Some(o) = tool("zlib-flate", &["-uncompress"], &z) {
                assert!(o == data, "zlib-flate -uncompress: other bytes");
            }
        }
        let back = dir.join("back");
        run(&format!(
            "file {} split=fixed size=777 | {inflate} | outfile {}",
            z.display(),
            back.display()
        ));
        assert!(
            std::fs::read(&back).unwrap() == data,
            "deflate format={format} | {inflate}: other bytes back"
        );
    }
    // A gzip member is not what format=zlib reads: refused with a warning, nothing written.
    let z = dir.join("big.gz");
    run(&format!(
        "file {} | deflate | outfile {}",
        big.display(),
        z.display()
    ));
    let back = dir.join("back");
    let err = run(&format!(
        "file {} | inflate format=zlib | outfile {}",
        z.display(),
        back.display()
    ));
    assert!(err.contains("not a zlib stream"), "{err}");
    assert_eq!(std::fs::read(&back).unwrap().len(), 0);
}

#[test]
fn inflate_reads_what_gzip_writes() {
    let dir = Scratch::new("gzip");
    let big = input(&dir);
    let data = std::fs::read(&big).unwrap();
    // gzip itself: one member with a file name in its header; two files concatenated are
    // two members (`gzip -dc` reads them as one stream).
    let gz = dir.join("big.bin.gz");
    let st = Command::new("gzip")
        .args(["-k", "-f", "-9"])
        .arg(&big)
        .status()
        .expect("gzip is installed (scripts/setup)");
    assert!(st.success());
    let two = dir.join("two.gz");
    let g = std::fs::read(&gz).unwrap();
    std::fs::write(&two, [g.clone(), g].concat()).unwrap();
    let back = dir.join("back");
    for (file, want) in [
        (&gz, data.clone()),
        (&two, [data.clone(), data.clone()].concat()),
    ] {
        for split in ["", " split=fixed size=10", " size=1M"] {
            let p = format!(
                "file {}{split} | inflate | outfile {}",
                file.display(),
                back.display()
            );
            let err = run(&p);
            assert!(
                std::fs::read(&back).unwrap() == want,
                "`{p}`: other bytes\n{err}"
            );
        }
    }
    // From standard input too (gzip -c | streamline ...), as a shell pipeline would.
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "gzip -c < {} | {BIN} run -q 'stdin | inflate | stdout' | cmp - {}",
            big.display(),
            big.display()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A corrupted byte: the CRC (or the deflate data) says so; a truncated file: a warning.
    let mut bad = std::fs::read(&gz).unwrap();
    let n = bad.len();
    bad[n / 2] ^= 0x55;
    std::fs::write(&two, &bad).unwrap();
    let err = run(&format!("file {} | inflate | null", two.display()));
    assert!(err.contains("inflate:") && err.contains("dropped"), "{err}");
    std::fs::write(&two, &std::fs::read(&gz).unwrap()[..n - 3]).unwrap();
    let err = run(&format!("file {} | inflate | null", two.display()));
    assert!(err.contains("ended inside a member"), "{err}");
}

#[test]
fn deflate_then_inflate_keeps_the_blocks() {
    // Each member's data is one block: `deflate | inflate` gives back deflate's blocks,
    // counted, replicated or not.
    for (d, i) in [
        ("", ""),
        (" space=1,2", " space=3,4"),
        (" space=p1", " space=2"),
    ] {
        let place = format!("deflate{d} | inflate{i}");
        let err = run(&format!("gen count=1000 size=3000 | {place} | count"));
        let line = err
            .lines()
            .find(|l| l.starts_with("count:"))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            line.contains("1000 blocks") && line.contains("3000000 bytes"),
            "{place}: {line}"
        );
    }
}

fn sample() -> PathBuf {
    root().join("examples/sample.pcap")
}

/// A capture unlike the sample: big-endian, nanosecond times (odd ones, not multiples of
/// a microsecond), snap length 96 (packets cut, wire lengths kept), written by the
/// pcap-file crate from the sample's packets.
fn odd_capture(path: &Path, big_endian: bool, nanos: bool) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
    let mut r = PcapReader::new(std::fs::File::open(sample()).unwrap()).unwrap();
    let header = PcapHeader {
        snaplen: 96,
        endianness: if big_endian {
            pcap_file::Endianness::Big
        } else {
            pcap_file::Endianness::Little
        },
        ts_resolution: if nanos {
            pcap_file::TsResolution::NanoSecond
        } else {
            pcap_file::TsResolution::MicroSecond
        },
        ..r.header()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), header).unwrap();
    let mut i = 0u32;
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let n = p.data.len().min(96);
        let extra = if nanos {
            std::time::Duration::from_nanos(u64::from(i % 997))
        } else {
            Default::default()
        };
        w.write_packet(&PcapPacket::new(
            p.timestamp + extra,
            p.orig_len,
            &p.data[..n],
        ))
        .unwrap();
        i += 1;
    }
}

/// Where the blocks may go between `pcapin` and `pcapout`: one space; pcapout in a thread
/// space and in a process space (the header crosses a channel); pcapin in a process
/// space; a pass-through filter replicated (round-robin, order-restoring join).
const PCAP_PLACEMENTS: &[(&str, &str, &str)] = &[
    ("", "", ""),
    ("", "", " space=1"),
    ("", "", " space=p1"),
    (" space=p1", "", ""),
    ("", " | strip 0 space=1,2", ""),
    ("", " | strip 0 space=1,p2", ""),
];

#[test]
fn pcapin_pcapout_gives_the_capture_back_byte_for_byte() {
    let dir = Scratch::new("pcap");
    let mut captures = vec![sample()];
    for (name, be, ns) in [
        ("be-ns.pcap", true, true),
        ("le-ns.pcap", false, true),
        ("be-us.pcap", true, false),
    ] {
        let p = dir.join(name);
        odd_capture(&p, be, ns);
        captures.push(p);
    }
    // What tools write: editcap's nanosecond pcap, tcpdump's rewrite.
    let ed = dir.join("editcap-ns.pcap");
    let st = Command::new("editcap")
        .args(["-F", "nsecpcap"])
        .arg(sample())
        .arg(&ed)
        .status()
        .expect("editcap (tshark's package, scripts/setup) is installed");
    assert!(st.success());
    captures.push(ed);
    for cap in &captures {
        let want = std::fs::read(cap).unwrap();
        for (src, mid, sink) in PCAP_PLACEMENTS {
            let out = dir.join("out.pcap");
            let p = format!(
                "pcapin file={}{src}{mid} | pcapout file={}{sink}",
                cap.display(),
                out.display()
            );
            let p = p.replace(" | | ", " | ");
            let err = run(&p);
            let got = std::fs::read(&out).unwrap();
            assert!(
                got == want,
                "`{p}`: not the capture byte for byte ({} vs {} bytes; first difference at byte {:?})\n{err}",
                got.len(),
                want.len(),
                got.iter().zip(&want).position(|(a, b)| a != b)
            );
        }
    }
}
