//! `beltway-peer`: one side of a cross-process ring exchange, for the cross-process tests
//! and for trying rings by hand. Every command prints one result line `key=value ...` and
//! exits non-zero (with a message) if anything it received was wrong.
//!
//! ```text
//! beltway-peer write NAME BYTES BLOCK [--layout bytes|records|slots] [--sync srp|frp|mrp]
//!              [--size N] [--readers R] [--mode OCTAL] [--ctl-mode OCTAL] [--hold]
//!              [--tell-first]   (prints `first` once the first block is written)
//! beltway-peer read NAME [--slow-us N] [--start oldest|latest] [--limit BYTES]
//! beltway-peer attach-sleep NAME        attach a reader, never read (to be killed)
//! beltway-peer mp-write NAME ID COUNT   write COUNT records as producer ID
//! beltway-peer recv-read SOCKET         receive a ring over a Unix socket, read it all
//! beltway-peer observe NAME --uid U     drop to uid U, open the ring, report access, read
//! beltway-peer ibuf-read NAME           read an IBuf through, mapping its DBufs by name
//! ```
//!
//! Byte streams are checked with a running CRC32 (order and loss both change it); records
//! carry their own sequence number and checksum.

use beltway::{
    BufTable, Error, IbufReader, Layout, MpWriter, Reader, RingConfig, RingRef, Start, SyncMode,
    Writer,
};
use std::os::unix::net::UnixStream;
use std::process::exit;
use std::time::{Duration, Instant};

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("beltway-peer: {msg}");
    exit(2)
}

fn opt<'a>(args: &'a [String], key: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .map(|s| s.as_str())
}

fn num(s: &str) -> u64 {
    let (digits, mul) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .unwrap_or_else(|_| die(format!("not a number: {s}")))
        * mul
}

/// Deterministic block content for block number `seq`.
fn fill(seq: u64, buf: &mut [u8]) {
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// A record: producer (4) | seq (8) | len (4) | crc (4) | payload.
const REC_HDR: usize = 20;
fn make_record(producer: u32, seq: u64, len: usize, out: &mut Vec<u8>) {
    out.resize(len.max(REC_HDR), 0);
    fill(seq ^ ((producer as u64) << 48), &mut out[REC_HDR..]);
    let crc = crc32fast::hash(&out[REC_HDR..]);
    out[..4].copy_from_slice(&producer.to_le_bytes());
    out[4..12].copy_from_slice(&seq.to_le_bytes());
    let n = out.len() as u32;
    out[12..16].copy_from_slice(&n.to_le_bytes());
    out[16..20].copy_from_slice(&crc.to_le_bytes());
}
fn check_record(r: &[u8]) -> Result<(u32, u64), String> {
    if r.len() < REC_HDR {
        return Err(format!(
            "record of {} bytes is shorter than its header",
            r.len()
        ));
    }
    let producer = u32::from_le_bytes(r[..4].try_into().unwrap());
    let seq = u64::from_le_bytes(r[4..12].try_into().unwrap());
    let len = u32::from_le_bytes(r[12..16].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(r[16..20].try_into().unwrap());
    if len != r.len() || crc32fast::hash(&r[REC_HDR..]) != crc {
        return Err(format!("record producer {producer} seq {seq} is corrupt"));
    }
    Ok((producer, seq))
}

fn config(args: &[String]) -> RingConfig {
    let size = opt(args, "--size").map_or(1 << 20, num) as usize;
    let mut cfg = RingConfig::bytes(size);
    match opt(args, "--layout").unwrap_or("bytes") {
        "bytes" => {}
        "records" => cfg = cfg.layout(Layout::Records),
        "slots" => cfg = cfg.slots(opt(args, "--slot").map_or(2048, num) as u32),
        l => die(format!("unknown layout {l}")),
    }
    cfg = cfg.sync(match opt(args, "--sync").unwrap_or("srp") {
        "srp" => SyncMode::Srp,
        "frp" => SyncMode::Frp,
        "mrp" => SyncMode::Mrp,
        s => die(format!("unknown sync {s}")),
    });
    if let Some(m) = opt(args, "--mode") {
        cfg.mode = u32::from_str_radix(m, 8).unwrap_or_else(|_| die("bad --mode"));
    }
    if let Some(m) = opt(args, "--ctl-mode") {
        cfg.ctl_mode = Some(u32::from_str_radix(m, 8).unwrap_or_else(|_| die("bad --ctl-mode")));
    }
    if args.iter().any(|a| a == "--multi-producer") {
        cfg.multi_producer = true;
    }
    cfg
}

fn cmd_write(args: &[String]) {
    let name = &args[0];
    let total = num(&args[1]);
    let block = num(&args[2]) as usize;
    let cfg = config(args);
    let records = cfg.layout != Layout::Bytes;
    let mut w = Writer::create_named(name, cfg).unwrap_or_else(|e| die(e));
    println!("created");
    if let Some(r) = opt(args, "--readers") {
        w.wait_for_readers(num(r) as u32, Duration::from_secs(30))
            .unwrap_or_else(|e| die(e));
    }
    println!("ready");
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; block];
    let (mut written, mut seq) = (0u64, 0u64);
    let start = Instant::now();
    while written < total {
        let n = block.min((total - written) as usize);
        if records {
            make_record(0, seq, n, &mut buf);
        } else {
            buf.resize(n, 0);
            fill(seq, &mut buf);
        }
        match w.write(&buf) {
            Ok(_) => {}
            Err(Error::BrokenPipe { .. }) => {
                println!("broken_pipe written={written}");
                drop(w); // exit() skips destructors: remove the ring's names first
                exit(3);
            }
            Err(e) => die(e),
        }
        crc.update(&buf);
        written += buf.len() as u64;
        seq += 1;
        if seq == 1 && args.iter().any(|a| a == "--tell-first") {
            println!("first");
        }
    }
    let hold = args.iter().any(|a| a == "--hold");
    if !hold {
        w.close();
    }
    let st = w.stats();
    println!(
        "wrote bytes={written} blocks={seq} crc={:08x} secs={:.3} waits={} wakeups={}",
        crc.finalize(),
        start.elapsed().as_secs_f64(),
        st.writer_waits,
        st.wakeups
    );
    if hold {
        // Keep the ring open (not closed: readers wait for more) until killed.
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

fn read_all(mut r: Reader, args: &[String]) {
    let slow = opt(args, "--slow-us").map(|s| Duration::from_micros(num(s)));
    let limit = opt(args, "--limit").map(num);
    let records = r.shared().layout() != Layout::Bytes;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = crc32fast::Hasher::new();
    let (mut bytes, mut recs, mut overruns) = (0u64, 0u64, 0u64);
    let mut last: std::collections::HashMap<u32, u64> = Default::default();
    let lossless = r.is_lossless();
    loop {
        if limit.is_some_and(|l| bytes >= l) {
            break;
        }
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if records {
                    let (p, seq) = check_record(&buf[..n]).unwrap_or_else(|e| die(e));
                    if let Some(&prev) = last.get(&p) {
                        if seq <= prev || (lossless && seq != prev + 1) {
                            die(format!("producer {p}: seq {seq} after {prev}"));
                        }
                    } else if lossless && seq != 0 && opt(args, "--start") != Some("latest") {
                        die(format!("producer {p}: first seq {seq}"));
                    }
                    last.insert(p, seq);
                    recs += 1;
                }
                crc.update(&buf[..n]);
                bytes += n as u64;
                if let Some(d) = slow {
                    if recs % 16 == 0 {
                        std::thread::sleep(d);
                    }
                }
            }
            Err(e) if e.is_overrun() => overruns += 1,
            Err(e) => die(e),
        }
    }
    println!(
        "read bytes={bytes} records={recs} crc={:08x} overruns={overruns} lost={} producers={} writer_died={}",
        crc.finalize(),
        r.lost(),
        last.len(),
        r.writer_died()
    );
}

fn start_of(args: &[String]) -> Start {
    match opt(args, "--start").unwrap_or("oldest") {
        "latest" => Start::Latest,
        _ => Start::Oldest,
    }
}

fn cmd_read(args: &[String]) {
    let r = Reader::open(&args[0], start_of(args)).unwrap_or_else(|e| die(e));
    println!("attached lossless={}", r.is_lossless());
    read_all(r, args);
}

fn cmd_attach_sleep(args: &[String]) {
    let _r = Reader::open(&args[0], Start::Oldest).unwrap_or_else(|e| die(e));
    println!("attached");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn cmd_mp_write(args: &[String]) {
    let id = num(&args[1]) as u32;
    let count = num(&args[2]);
    let mut w = MpWriter::open(&args[0]).unwrap_or_else(|e| die(e));
    let mut rec = Vec::new();
    for seq in 0..count {
        make_record(
            id,
            seq,
            64 + (seq as usize * 37) % (w.max_record() - 64),
            &mut rec,
        );
        w.write(&rec).unwrap_or_else(|e| die(e));
    }
    w.flush();
    println!("mp_wrote producer={id} records={count}");
}

fn cmd_recv_read(args: &[String]) {
    let sock =
        UnixStream::connect(&args[0]).unwrap_or_else(|e| die(format!("connect {}: {e}", args[0])));
    let ring = RingRef::recv(&sock).unwrap_or_else(|e| die(e));
    let r = ring.reader(Start::Oldest).unwrap_or_else(|e| die(e));
    // Tell the sender we are attached.
    use std::io::Write;
    (&sock).write_all(b"A").unwrap_or_else(|e| die(e));
    read_all(r, args);
}

fn cmd_observe(args: &[String]) {
    let uid = opt(args, "--uid")
        .map(num)
        .unwrap_or_else(|| die("observe needs --uid")) as u32;
    drop_privileges(uid);
    let name = &args[0];
    let writer_open = match MpWriter::open(name) {
        Err(Error::Permission { .. }) | Err(Error::Os { .. }) => "denied".to_string(),
        Err(e) => format!("error:{e}"),
        Ok(_) => "allowed".to_string(),
    };
    let ring = RingRef::open(name).unwrap_or_else(|e| die(e));
    let r = ring.reader(Start::Oldest).unwrap_or_else(|e| die(e));
    println!(
        "observe writer_open={writer_open} lossless={}",
        r.is_lossless()
    );
    read_all(r, args);
}

fn cmd_ibuf_read(args: &[String]) {
    let tags = Reader::open(&args[0], Start::Oldest).unwrap_or_else(|e| die(e));
    let mut r = IbufReader::new(tags, BufTable::new()).unwrap_or_else(|e| die(e));
    println!("attached");
    let mut buf = vec![0u8; 1 << 16];
    let (mut recs, mut next) = (0u64, 0u64);
    loop {
        let n = r.read(&mut buf).unwrap_or_else(|e| die(e));
        if n == 0 {
            break;
        }
        let (_, seq) = check_record(&buf[..n]).unwrap_or_else(|e| die(e));
        if seq != next {
            die(format!("seq {seq}, expected {next}"));
        }
        next += 1;
        recs += 1;
    }
    println!("ibuf_read records={recs}");
}

fn drop_privileges(uid: u32) {
    beltway::sys::set_uid(uid)
        .unwrap_or_else(|e| die(format!("cannot drop privileges to uid {uid}: {e}")));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        die("usage: see the module documentation")
    };
    let rest = &args[1..];
    let need = |n: usize| {
        if rest.len() < n {
            die(format!("{cmd} needs {n} arguments"))
        }
    };
    match cmd.as_str() {
        "write" => {
            need(3);
            cmd_write(rest)
        }
        "read" => {
            need(1);
            cmd_read(rest)
        }
        "attach-sleep" => {
            need(1);
            cmd_attach_sleep(rest)
        }
        "mp-write" => {
            need(3);
            cmd_mp_write(rest)
        }
        "recv-read" => {
            need(1);
            cmd_recv_read(rest)
        }
        "ibuf-read" => {
            need(1);
            cmd_ibuf_read(rest)
        }
        "observe" => {
            need(1);
            cmd_observe(rest)
        }
        c => die(format!("unknown command {c}")),
    }
}
