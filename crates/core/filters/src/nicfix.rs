//! The NIC-FIX filters (thesis 7.3.1, Figure 7.8): `flowcount` (B, activity per flow),
//! `sample` (a prefilter that lets one packet in N up) and `bytecount` (C, occurrences of
//! byte values). Each has two implementations with one result:
//!
//! - in this space, after any source (pcapin, another filter, a channel), here;
//! - in the kernel, when the filter follows `rx` directly: [`crate::live::kernel_placement`]
//!   hands `rx` the program (typed: [`lang::KernelAttach::Ebpf`], with the maps' pin
//!   directory), `rx` loads it ([`kernel::ebpf`], C in `crates/platform/kernel/bpf/`) and attaches
//!   it to its socket, and this node ([`lang::Side::Kernel`] with the same pin) passes
//!   what arrives and at the end reads the program's maps, pinned on bpffs.
//!
//! Both print their totals with the same functions ([`flows_text`], [`sample_text`],
//! [`bytes_text`]), so a run's output does not say which one ran except in `rx`'s
//! summary; `streamline maps` prints running programs' maps with them too.

use dataplane::{Args, Batch, Ctx, Filter, FilterError, Tag};
use kernel::ebpf::{self, Config, FlowKey, Snapshot, Tally};
use lang::Side;
use std::collections::HashMap;
use std::path::PathBuf;

/// The flow of a frame (from its Ethernet header), by the rules of the kernel's
/// `parse_flow` (crates/platform/kernel/bpf/nicfix.h): IPv4 or IPv6 addresses and protocol (the
/// fixed header's; extension headers are not followed), TCP/UDP ports of unfragmented
/// packets and first fragments; for anything else family 0 and the ethertype.
pub fn flow_key(f: &[u8]) -> FlowKey {
    let mut k = FlowKey::default();
    if f.len() < 14 {
        return k;
    }
    let be16 = |i: usize| u16::from_be_bytes([f[i], f[i + 1]]);
    k.ethertype = be16(12);
    let l4 = match k.ethertype {
        0x0800 if f.len() >= 14 + 20 => {
            let h = &f[14..];
            let ihl = (h[0] & 0x0f) as usize * 4;
            if h[0] >> 4 != 4 || ihl < 20 {
                return k;
            }
            k.family = 4;
            k.proto = h[9];
            k.src[..4].copy_from_slice(&h[12..16]);
            k.dst[..4].copy_from_slice(&h[16..20]);
            let frag = u16::from_be_bytes([h[6] & 0x1f, h[7]]);
            (frag == 0).then_some(14 + ihl)
        }
        0x86dd if f.len() >= 14 + 40 => {
            let h = &f[14..];
            if h[0] >> 4 != 6 {
                return k;
            }
            k.family = 6;
            k.proto = h[6];
            k.src.copy_from_slice(&h[8..24]);
            k.dst.copy_from_slice(&h[24..40]);
            Some(14 + 40)
        }
        _ => return k,
    };
    if let Some(l4) = l4 {
        if (k.proto == 6 || k.proto == 17) && f.len() >= l4 + 4 {
            k.sport = be16(l4);
            k.dport = be16(l4 + 2);
        }
    }
    k
}

/// `tcp 10.0.0.1:80 > 10.0.0.2:4000`, `udp [fd00::1]:53 > [fd00::2]:5353`,
/// `icmp 10.0.0.1 > 10.0.0.2`, `ether 0x0806`.
pub fn flow_text(k: &FlowKey) -> String {
    let proto = match (k.family, k.proto) {
        (_, 6) => "tcp".to_string(),
        (_, 17) => "udp".to_string(),
        (4, 1) => "icmp".to_string(),
        (6, 58) => "icmp6".to_string(),
        (_, p) => format!("proto {p}"),
    };
    let addr = |a: &[u8; 16]| -> String {
        if k.family == 4 {
            std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string()
        } else {
            std::net::Ipv6Addr::from(*a).to_string()
        }
    };
    let end = |a: &[u8; 16], port: u16| -> String {
        match (k.family, k.proto) {
            (4, 6 | 17) => format!("{}:{port}", addr(a)),
            (6, 6 | 17) => format!("[{}]:{port}", addr(a)),
            _ => addr(a),
        }
    };
    match k.family {
        4 | 6 => format!(
            "{proto} {} > {}",
            end(&k.src, k.sport),
            end(&k.dst, k.dport)
        ),
        _ => format!("ether {:#06x}", k.ethertype),
    }
}

/// flowcount's totals: the line `flowcount: P packets, B bytes, F flows` and the `top`
/// flows by packets (then bytes, then flow), one per line.
pub fn flows_text(totals: Tally, flows: &[(FlowKey, Tally)], top: usize, untracked: u64) -> String {
    let mut rows: Vec<&(FlowKey, Tally)> = flows.iter().collect();
    rows.sort_by(|a, b| {
        b.1.packets
            .cmp(&a.1.packets)
            .then(b.1.bytes.cmp(&a.1.bytes))
            .then(a.0.cmp(&b.0))
    });
    let mut s = format!(
        "flowcount: {} packets, {} bytes, {} flows",
        totals.packets,
        totals.bytes,
        flows.len()
    );
    if untracked > 0 {
        s += &format!(" ({untracked} packets of flows beyond flows= not tracked per flow)");
    }
    for (k, t) in rows.iter().take(top) {
        s += &format!(
            "\n  {}: {} packets, {} bytes",
            flow_text(k),
            t.packets,
            t.bytes
        );
    }
    if rows.len() > top {
        s += &format!("\n  ... {} more flows", rows.len() - top);
    }
    s
}

/// sample's totals: `sample: 1 in N: S seen, P passed`.
pub fn sample_text(rule: &str, seen: u64, passed: u64) -> String {
    format!("sample: {rule}: {seen} seen, {passed} passed")
}

/// bytecount's totals: `bytecount: P packets, B bytes counted (first LEN of each)` and the
/// `top` byte values by count (then value), one per line.
pub fn bytes_text(len: u64, frames: u64, bytes: u64, hist: &[u64; 256], top: usize) -> String {
    let mut s = format!("bytecount: {frames} packets, {bytes} bytes counted (first {len} of each)");
    let mut rows: Vec<(usize, u64)> = hist
        .iter()
        .copied()
        .enumerate()
        .filter(|r| r.1 > 0)
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (v, n) in rows.iter().take(top) {
        let c = if (0x20..0x7f).contains(v) {
            format!(" '{}'", *v as u8 as char)
        } else {
            String::new()
        };
        s += &format!(
            "\n  {v:#04x}{c}: {n} ({:.2}%)",
            100.0 * *n as f64 / bytes.max(1) as f64
        );
    }
    if rows.len() > top {
        s += &format!("\n  ... {} more values", rows.len() - top);
    }
    s
}

/// A snapshot of a program's maps as its filter prints its totals (`top` rows).
pub fn snapshot_text(s: &Snapshot, top: usize) -> String {
    match s {
        Snapshot::Flows { totals, flows } => flows_text(*totals, flows, top, 0),
        Snapshot::Sample {
            every,
            seen,
            passed,
        } => sample_text(&format!("1 in {every}"), *seen, *passed),
        Snapshot::Bytes {
            len,
            frames,
            bytes,
            hist,
        } => bytes_text(*len, *frames, *bytes, hist, top),
    }
}

pub use kernel::ebpf::PIN_ROOT;

/// A kernel filter of a running run, as `streamline maps` lists it.
pub struct Pinned {
    pub pid: u32,
    /// `n<node>-<filter>`.
    pub label: String,
    pub dir: PathBuf,
    /// The pinned maps' file names.
    pub maps: Vec<String>,
    pub snapshot: Result<Snapshot, String>,
}

/// The kernel filters of running runs with their maps read now (stale pins of runs that
/// died are removed first).
pub fn pinned() -> Vec<Pinned> {
    ebpf::list_pinned()
        .into_iter()
        .map(|(pid, label, dir)| {
            let filter = label
                .split_once('-')
                .map_or(label.as_str(), |(_, f)| f)
                .to_string();
            let mut maps: Vec<String> = std::fs::read_dir(&dir)
                .map(|r| {
                    r.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            maps.sort();
            let snapshot = ebpf::read_pinned(&filter, &dir).map_err(|e| e.to_string());
            Pinned {
                pid,
                label,
                dir,
                maps,
                snapshot,
            }
        })
        .collect()
}

/// Removes this process's pinned maps (the end of a run; Ctrl-C).
pub fn remove_run_pins() {
    ebpf::remove_run_pins();
}

/// The wire length of a whole captured frame (what the kernel program counts as the
/// frame's bytes); a cropped block is its own length.
fn wire_len(cx: &Ctx<'_>, t: &Tag, data: &[u8]) -> u64 {
    match cx.store.record(t) {
        Some((r, true)) if r.orig_len >= data.len() as u32 => r.orig_len as u64,
        _ => data.len() as u64,
    }
}

/// Where the filter runs, from the node's typed side ([`lang::Side`]: `placed=user` as
/// written, or kernel with the maps' pin directory as the kernel placement sets it).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    User,
    /// The program runs on the capture socket; its maps are pinned here.
    Kernel(PathBuf),
}

fn place(a: &Args) -> Result<Place, FilterError> {
    match &a.place.side {
        None | Some(Side::User) => Ok(Place::User),
        Some(Side::Kernel { pin: Some(p) }) => Ok(Place::Kernel(p.clone())),
        Some(Side::Kernel { pin: None }) => Err(FilterError::Missing {
            key: lang::resolve::PLACED.into(),
            expected: "placed=kernel is set by the kernel placement (right after `rx`), which also says where the maps are pinned; write placed=user or leave it out".into(),
        }),
    }
}

fn top(a: &Args, default: usize) -> Result<usize, FilterError> {
    a.parse("top", None, default)
}

/// The kernel program a NIC-FIX filter with these arguments would run, or why it has
/// none (`sample prob=` draws random numbers the kernel would not draw alike).
pub fn kernel_config(a: &Args) -> Result<Config, FilterError> {
    match a.filter.as_str() {
        "flowcount" => Ok(Config::FlowCount {
            flows: flows_cap(a)?,
        }),
        "sample" => {
            if a.get("prob", None).is_some() {
                return Err(FilterError::Rule(
                    "prob= has no kernel implementation".into(),
                ));
            }
            Ok(Config::Sample {
                every: sample_every(a)?,
            })
        }
        "bytecount" => Ok(Config::ByteCount { len: byte_len(a)? }),
        f => Err(FilterError::Rule(format!(
            "{f} has no kernel (eBPF) implementation"
        ))),
    }
}

/// The program text of [`lang::KernelAttach::Ebpf`]: `flowcount flows=N`, `sample every=N`, `bytecount len=N`.
pub fn encode(c: Config) -> String {
    match c {
        Config::FlowCount { flows } => format!("flowcount flows={flows}"),
        Config::Sample { every } => format!("sample every={every}"),
        Config::ByteCount { len } => format!("bytecount len={len}"),
    }
}

/// The inverse of [`encode`].
pub fn decode(s: &str) -> Result<Config, FilterError> {
    let mut words = s.split_whitespace();
    let name = words
        .next()
        .ok_or_else(|| FilterError::bad("program", s, "a filter and its parameters"))?;
    let opts: Vec<(String, String)> = words
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    kernel_config(&Args::new(name, Vec::new(), opts))
        .map_err(|e| FilterError::invalid(format!("eBPF program {s:?}"), e))
}

fn flows_cap(a: &Args) -> Result<u32, FilterError> {
    let n = a.size("flows", None, 65536)?;
    if !(1..=1 << 24).contains(&n) {
        return Err(FilterError::bad("flows", &n.to_string(), "1..=16M"));
    }
    Ok(n as u32)
}

fn sample_every(a: &Args) -> Result<u64, FilterError> {
    let every = a.size("every", Some(0), 10)?;
    if every == 0 {
        return Err(FilterError::bad("every", "0", "at least 1"));
    }
    Ok(every)
}

fn byte_len(a: &Args) -> Result<u32, FilterError> {
    let len = a.size("len", Some(0), ebpf::BYTECOUNT_MAX_LEN as u64)?;
    if !(1..=ebpf::BYTECOUNT_MAX_LEN as u64).contains(&len) {
        return Err(FilterError::bad(
            "len",
            &len.to_string(),
            &format!(
                "1..={} (the kernel program's loop bound)",
                ebpf::BYTECOUNT_MAX_LEN
            ),
        ));
    }
    Ok(len as u32)
}

/// Reads the kernel program's maps at the end of the run, as its totals.
fn kernel_totals(name: &str, dir: &std::path::Path, top: usize) -> String {
    if !dir.is_dir() {
        return format!("{name}: no totals: the kernel program was not loaded (see rx's message)");
    }
    match ebpf::read_pinned(name, dir) {
        Ok(s) => snapshot_text(&s, top),
        Err(e) => format!("{name}: the kernel program's maps could not be read: {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// flowcount

/// Packets and bytes per flow.
pub struct FlowCount {
    place: Place,
    cap: usize,
    top: usize,
    table: HashMap<FlowKey, Tally>,
    totals: Tally,
    untracked: u64,
    /// The kernel program's totals, read at the end.
    kernel: Option<String>,
}

impl Filter for FlowCount {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.place != Place::User {
            return;
        }
        for t in &batch.tags {
            let Ok(data) = cx.data(t) else { continue };
            let len = wire_len(cx, t, data);
            let k = flow_key(data);
            self.totals.packets += 1;
            self.totals.bytes += len;
            let n = self.table.len();
            match self.table.get_mut(&k) {
                Some(v) => {
                    v.packets += 1;
                    v.bytes += len;
                }
                None if n < self.cap => {
                    self.table.insert(
                        k,
                        Tally {
                            packets: 1,
                            bytes: len,
                        },
                    );
                }
                None => self.untracked += 1,
            }
        }
    }
    fn finish(&mut self, _cx: &mut Ctx<'_>, _out: &mut Batch) {
        if let Place::Kernel(dir) = &self.place {
            self.kernel = Some(kernel_totals("flowcount", dir, self.top));
        }
    }
    fn summary(&self) -> Option<String> {
        if let Some(k) = &self.kernel {
            return Some(k.clone());
        }
        let flows: Vec<(FlowKey, Tally)> = self.table.iter().map(|(k, v)| (*k, *v)).collect();
        Some(flows_text(self.totals, &flows, self.top, self.untracked))
    }
}

pub(crate) fn make_flowcount(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let cap = flows_cap(a)? as usize;
    Ok(Box::new(FlowCount {
        place: place(a)?,
        cap,
        top: top(a, 10)?,
        table: HashMap::new(),
        totals: Tally::default(),
        untracked: 0,
        kernel: None,
    }))
}

// ---------------------------------------------------------------------------------------
// sample

/// Passes one block in N (deterministic: the Nth, 2Nth, ...), or each with probability P
/// (seeded).
pub struct Sample {
    place: Place,
    every: u64,
    prob: Option<f64>,
    n: u64,
    /// Frames until the next one passes.
    left: u64,
    passed: u64,
    rng: u64,
    kernel: Option<String>,
}

impl Filter for Sample {
    fn process(&mut self, _cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.place != Place::User {
            // The kernel dropped the others: whatever arrives was passed.
            for t in batch.tags.iter_mut() {
                t.class = t.class.max(1);
            }
            return;
        }
        for t in batch.tags.iter_mut() {
            self.n += 1;
            let keep = match self.prob {
                Some(p) => {
                    self.rng ^= self.rng << 13;
                    self.rng ^= self.rng >> 7;
                    self.rng ^= self.rng << 17;
                    (self.rng >> 11) as f64 / (1u64 << 53) as f64 <= p
                }
                None => {
                    // Frame N, 2N, ...: a countdown (the kernel program takes n mod N).
                    self.left -= 1;
                    let keep = self.left == 0;
                    if keep {
                        self.left = self.every;
                    }
                    keep
                }
            };
            self.passed += keep as u64;
            t.class = if keep { t.class.max(1) } else { 0 };
        }
    }
    fn finish(&mut self, _cx: &mut Ctx<'_>, _out: &mut Batch) {
        if let Place::Kernel(dir) = &self.place {
            self.kernel = Some(kernel_totals("sample", dir, 0));
        }
    }
    fn summary(&self) -> Option<String> {
        if let Some(k) = &self.kernel {
            return Some(k.clone());
        }
        let rule = match self.prob {
            Some(p) => format!("p={p}"),
            None => format!("1 in {}", self.every),
        };
        Some(sample_text(&rule, self.n, self.passed))
    }
}

pub(crate) fn make_sample(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let every = sample_every(a)?;
    let prob = match a.get("prob", None) {
        Some(p) => Some(
            p.parse::<f64>()
                .ok()
                .filter(|p| (0.0..=1.0).contains(p))
                .ok_or_else(|| FilterError::bad("prob", p, "a probability in 0..1"))?,
        ),
        None => None,
    };
    let place = place(a)?;
    if prob.is_some() && place != Place::User {
        return Err(FilterError::Rule(
            "prob= runs in user space only (placed=user)".into(),
        ));
    }
    Ok(Box::new(Sample {
        place,
        every,
        prob,
        n: 0,
        left: every,
        passed: 0,
        rng: a.parse("seed", None, 0x9E37_79B9_7F4A_7C15u64)? | 1,
        kernel: None,
    }))
}

// ---------------------------------------------------------------------------------------
// bytecount

/// A histogram of byte values over the first `len` bytes of every block.
pub struct ByteCount {
    place: Place,
    len: usize,
    top: usize,
    hist: Box<[u64; 256]>,
    frames: u64,
    bytes: u64,
    kernel: Option<String>,
}

impl Filter for ByteCount {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.place != Place::User {
            return;
        }
        for t in &batch.tags {
            let Ok(data) = cx.data(t) else { continue };
            let d = &data[..data.len().min(self.len)];
            self.frames += 1;
            self.bytes += d.len() as u64;
            for &b in d {
                self.hist[b as usize] += 1;
            }
        }
    }
    fn finish(&mut self, _cx: &mut Ctx<'_>, _out: &mut Batch) {
        if let Place::Kernel(dir) = &self.place {
            self.kernel = Some(kernel_totals("bytecount", dir, self.top));
        }
    }
    fn summary(&self) -> Option<String> {
        if let Some(k) = &self.kernel {
            return Some(k.clone());
        }
        Some(bytes_text(
            self.len as u64,
            self.frames,
            self.bytes,
            &self.hist,
            self.top,
        ))
    }
}

pub(crate) fn make_bytecount(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let len = byte_len(a)? as usize;
    Ok(Box::new(ByteCount {
        place: place(a)?,
        len,
        top: top(a, 8)?,
        hist: Box::new([0; 256]),
        frames: 0,
        bytes: 0,
        kernel: None,
    }))
}

// The declarations of this file's filters are data in the catalog
// (`catalog::nicfix::{FLOWCOUNT, SAMPLE, BYTECOUNT}`); their constructors are below, paired
// with them in `filters::CONSTRUCTORS`.

#[cfg(test)]
mod tests {
    use super::*;

    fn eth(ethertype: u16, rest: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(rest);
        f
    }

    fn ipv4(proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
        let mut h = vec![
            0x45,
            0,
            0,
            0,
            0,
            0,
            (frag >> 8) as u8,
            frag as u8,
            64,
            proto,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
        ];
        h.extend_from_slice(l4);
        eth(0x0800, &h)
    }

    #[test]
    fn flow_keys_follow_the_kernel_rules() {
        let k = flow_key(&ipv4(6, 0, &[0x1f, 0x90, 0x00, 0x50]));
        assert_eq!((k.family, k.proto, k.sport, k.dport), (4, 6, 8080, 80));
        assert_eq!(&k.src[..4], &[10, 0, 0, 1]);
        assert_eq!(flow_text(&k), "tcp 10.0.0.1:8080 > 10.0.0.2:80");
        // A later fragment: no ports.
        let k = flow_key(&ipv4(17, 0x0010, &[0, 53, 0, 53]));
        assert_eq!((k.sport, k.dport), (0, 0));
        // Transport header cut short: no ports.
        assert_eq!(flow_key(&ipv4(17, 0, &[0, 53])).sport, 0);
        // ICMP: no ports even with bytes there.
        let k = flow_key(&ipv4(1, 0, &[8, 0, 0, 0]));
        assert_eq!(flow_text(&k), "icmp 10.0.0.1 > 10.0.0.2");
        // IPv6 UDP.
        let mut h = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
        h.extend_from_slice(&[0xfd; 16]);
        h.extend_from_slice(&[0xfe; 16]);
        h.extend_from_slice(&[0x00, 0x35, 0x13, 0x88]);
        let k = flow_key(&eth(0x86dd, &h));
        assert_eq!((k.family, k.proto, k.sport, k.dport), (6, 17, 53, 5000));
        assert!(flow_text(&k).starts_with("udp [fdfd:"), "{}", flow_text(&k));
        // IPv6 with a hop-by-hop header first: protocol 0, no ports.
        h[6] = 0;
        let k = flow_key(&eth(0x86dd, &h));
        assert_eq!((k.proto, k.sport), (0, 0));
        // ARP, a truncated IPv4 header, a runt.
        let k = flow_key(&eth(0x0806, &[0; 28]));
        assert_eq!((k.family, k.ethertype), (0, 0x0806));
        assert_eq!(flow_text(&k), "ether 0x0806");
        assert_eq!(
            flow_key(&eth(0x0800, &[0x45; 10])),
            FlowKey {
                ethertype: 0x0800,
                ..FlowKey::default()
            }
        );
        assert_eq!(flow_key(&[1, 2, 3]), FlowKey::default());
    }

    #[test]
    fn texts_sort_and_cut() {
        let a = FlowKey {
            family: 4,
            proto: 17,
            sport: 1,
            dport: 2,
            ..FlowKey::default()
        };
        let b = FlowKey {
            family: 0,
            ethertype: 0x0806,
            ..FlowKey::default()
        };
        let t = flows_text(
            Tally {
                packets: 5,
                bytes: 500,
            },
            &[
                (
                    b,
                    Tally {
                        packets: 1,
                        bytes: 60,
                    },
                ),
                (
                    a,
                    Tally {
                        packets: 4,
                        bytes: 440,
                    },
                ),
            ],
            1,
            0,
        );
        assert_eq!(t, "flowcount: 5 packets, 500 bytes, 2 flows\n  udp 0.0.0.0:1 > 0.0.0.0:2: 4 packets, 440 bytes\n  ... 1 more flows");
        let mut h = [0u64; 256];
        h[b'A' as usize] = 3;
        h[0] = 1;
        assert_eq!(bytes_text(4, 1, 4, &h, 8), "bytecount: 1 packets, 4 bytes counted (first 4 of each)\n  0x41 'A': 3 (75.00%)\n  0x00: 1 (25.00%)");
        assert_eq!(
            sample_text("1 in 3", 10, 3),
            "sample: 1 in 3: 10 seen, 3 passed"
        );
    }

    /// (rx's placement, next filter's placement) after the kernel placement.
    fn placed(text: &str) -> (lang::Placement, lang::Placement) {
        let g = crate::live::kernel_placement(
            lang::parse(text, &crate::Natives).unwrap_or_else(|d| panic!("{d}")),
        );
        let place = |i: usize| match &g.nodes[i].kind {
            lang::NodeKind::Filter { place, .. } => place.clone(),
            _ => lang::Placement::default(),
        };
        (place(0), place(1))
    }

    #[test]
    fn only_the_filter_right_after_rx_goes_on_the_socket() {
        use lang::KernelAttach;
        let program = |p: &lang::Placement| match &p.kernel {
            Some(KernelAttach::Ebpf { program, .. }) => Some(program.clone()),
            _ => None,
        };
        let (rx, f) = placed("rx dev=lo | flowcount flows=1K | count");
        assert_eq!(program(&rx).as_deref(), Some("flowcount flows=1024"));
        let Some(KernelAttach::Ebpf { pin: rx_pin, .. }) = &rx.kernel else {
            panic!("{rx:?}")
        };
        let Some(Side::Kernel { pin: Some(pin) }) = &f.side else {
            panic!("flowcount is not placed in the kernel: {f:?}")
        };
        assert_eq!(pin, rx_pin, "the filter reads the maps where rx pins them");
        assert!(
            pin.to_string_lossy()
                .starts_with(&format!("{PIN_ROOT}/{}/n1-flowcount", std::process::id())),
            "{pin:?}"
        );
        assert!(f.kernel.is_none() && rx.side.is_none());
        assert_eq!(
            program(&placed("rx dev=lo | sample 7 | count").0).as_deref(),
            Some("sample every=7")
        );
        assert_eq!(
            program(&placed("rx dev=lo | bytecount 35 | count").0).as_deref(),
            Some("bytecount len=35")
        );
        // bpf: its expression on the socket (classic BPF), no maps.
        let (rx, f) = placed("rx dev=lo | bpf \"udp port 53\" | count");
        assert_eq!(rx.kernel, Some(KernelAttach::Cbpf("udp port 53".into())));
        assert_eq!(f.side, Some(Side::Kernel { pin: None }));
        // A user's placed=kernel right after rx: honoured, the program goes on the socket.
        let (rx, f) = placed("rx dev=lo | bpf \"udp\" placed=kernel | count");
        assert_eq!(rx.kernel, Some(KernelAttach::Cbpf("udp".into())));
        assert_eq!(f.side, Some(Side::Kernel { pin: None }));
        // Where no socket can take it, it runs in user space (else it would pass every
        // frame): after a file, after another filter, after rx impl=xdp.
        for text in [
            "pcapin file=x.pcap | bpf \"udp\" placed=kernel | count",
            "rx dev=lo | count | bpf \"udp\" placed=kernel | count",
            "rx dev=lo impl=xdp | bpf \"udp\" placed=kernel | count",
        ] {
            let (_, f) = placed(text);
            let g = crate::live::kernel_placement(lang::parse(text, &crate::Natives).unwrap());
            let bpf = g.nodes.iter().find_map(|n| match &n.kind {
                lang::NodeKind::Filter { filter, place, .. } if filter == "bpf" => {
                    Some(place.side.clone())
                }
                _ => None,
            });
            assert_eq!(bpf, Some(Some(Side::User)), "{text}: {f:?}");
        }
        // Not placed: AF_XDP, user placement, prob=, another space, a second filter.
        for text in [
            "rx dev=lo impl=xdp | flowcount | count",
            "rx dev=lo | flowcount placed=user | count",
            "rx dev=lo | sample prob=0.5 | count",
            "rx dev=lo | bytecount space=1 | count",
            "rx dev=lo | flowcount flows=0 | count",
        ] {
            let (rx, f) = placed(text);
            assert!(
                rx.kernel.is_none() && !f.side.as_ref().is_some_and(Side::is_kernel),
                "{text}: {rx:?} {f:?}"
            );
        }
        let g = crate::live::kernel_placement(
            lang::parse(
                "rx dev=lo | bpf \"udp\" | sample 3 | count",
                &crate::Natives,
            )
            .unwrap(),
        );
        let lang::NodeKind::Filter { options, place, .. } = &g.nodes[2].kind else {
            panic!()
        };
        assert!(
            options.is_empty() && place.is_empty(),
            "sample after bpf stays in user space: {options:?} {place:?}"
        );
    }

    #[test]
    fn kernel_decisions_are_not_options_a_user_can_write() {
        for (text, key) in [
            ("rx dev=lo kfilter=udp | count", "kfilter"),
            ("rx dev=lo kebpf=\"sample every=2\" | count", "kebpf"),
            ("rx dev=lo kpin=/sys/fs/bpf/x | count", "kpin"),
            ("rx dev=lo | flowcount pin=/sys/fs/bpf/x | count", "pin"),
        ] {
            let d = lang::parse(text, &crate::Natives).unwrap_err();
            assert!(
                d.message.contains(&format!("unknown option '{key}'")),
                "{text}: {d}"
            );
        }
        // placed=user stays the user's word, typed by the parser.
        let g = lang::parse("rx dev=lo | flowcount placed=user | count", &crate::Natives).unwrap();
        let lang::NodeKind::Filter { options, place, .. } = &g.nodes[1].kind else {
            panic!()
        };
        assert!(
            options.is_empty() && place.side == Some(Side::User),
            "{options:?} {place:?}"
        );
    }

    #[test]
    fn kernel_configs_round_trip_and_errors_are_clear() {
        let args = |f: &str, o: &[(&str, &str)]| {
            Args::new(
                f,
                Vec::new(),
                o.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        for c in [
            Config::FlowCount { flows: 1024 },
            Config::Sample { every: 7 },
            Config::ByteCount { len: 35 },
        ] {
            assert_eq!(decode(&encode(c)).ok(), Some(c));
        }
        assert_eq!(
            kernel_config(&args("sample", &[("every", "4K")])).ok(),
            Some(Config::Sample { every: 4096 })
        );
        fn err<T>(r: Result<T, FilterError>) -> FilterError {
            r.map(|_| ()).unwrap_err()
        }
        assert!(err(kernel_config(&args("sample", &[("prob", "0.5")])))
            .to_string()
            .contains("prob"));
        assert!(
            matches!(err(kernel_config(&args("bytecount", &[("len", "5000")]))), FilterError::BadValue { key, value, expected } if key == "len" && value == "5000" && expected.contains("1..=4096"))
        );
        assert!(
            matches!(err(kernel_config(&args("flowcount", &[("flows", "0")]))), FilterError::BadValue { key, value, .. } if key == "flows" && value == "0")
        );
        assert!(kernel_config(&args("count", &[])).is_err());
        let kernel = |pin: Option<&str>| {
            args("flowcount", &[]).with_place(lang::Placement {
                side: Some(Side::Kernel {
                    pin: pin.map(PathBuf::from),
                }),
                ..Default::default()
            })
        };
        assert!(
            matches!(err(place(&kernel(None))), FilterError::Missing { key, expected } if key == "placed" && expected.contains("maps are pinned"))
        );
        assert_eq!(
            place(&kernel(Some("/sys/fs/bpf/x"))).ok(),
            Some(Place::Kernel(PathBuf::from("/sys/fs/bpf/x")))
        );
        assert_eq!(place(&args("flowcount", &[])).ok(), Some(Place::User));
        assert!(make_sample(&args("sample", &[("every", "0")])).is_err());
    }
}
