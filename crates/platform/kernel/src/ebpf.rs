//! eBPF socket filters with their state in BPF maps: the NIC-FIX filters of thesis 7.3.1
//! (Figure 7.8) — `flowcount` (packets and bytes per flow), `sample` (one frame in N) and
//! `bytecount` (a byte-value histogram). The C sources are `bpf/*.bpf.c`, compiled by
//! `build.rs` with clang and embedded here; libbpf (through `libbpf-rs`) loads them.
//!
//! Owns: loading a program with its configuration ([`Loaded::load`]), pinning its maps
//! under a per-run directory on bpffs (mounted at /sys/fs/bpf when it is not) so that
//! other processes can read them while it runs (`streamline maps`), removing the pins
//! when the program goes, and reading pinned maps back as typed [`Snapshot`]s. Attaching
//! to a socket is `afpacket`'s (`SO_ATTACH_BPF`). The structs here mirror
//! `bpf/nicfix.h` byte for byte.
//!
//! `unsafe`: `statfs(2)` and `mount(2)` for bpffs, each with a `// SAFETY:` comment.

#![allow(unsafe_code)]

use libbpf_rs::{MapCore, MapFlags, MapHandle, ObjectBuilder};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Where runs pin their maps: `PIN_ROOT/<pid>/<label>/<map>`.
pub const BPFFS: &str = "/sys/fs/bpf";
pub const PIN_ROOT: &str = "/sys/fs/bpf/streamline";
/// The longest prefix of a frame `bytecount` counts in the kernel (bpf/bytecount.bpf.c
/// MAX_LEN: its loop bound).
pub const BYTECOUNT_MAX_LEN: u32 = 4096;

const FLOWCOUNT_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/flowcount.bpf.o"));
const SAMPLE_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sample.bpf.o"));
const BYTECOUNT_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/bytecount.bpf.o"));

/// Something about an eBPF program or its maps failed; says what and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbpfError(pub String);

impl std::fmt::Display for EbpfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EbpfError {}

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> EbpfError {
    EbpfError(format!("{what}: {e}"))
}

/// Which program, with its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// Per-flow counters in an LRU hash of `flows` entries.
    FlowCount { flows: u32 },
    /// Pass frame N, 2N, ... (`every` = N >= 1).
    Sample { every: u64 },
    /// Histogram of the first `len` bytes of each frame (1..=[`BYTECOUNT_MAX_LEN`]).
    ByteCount { len: u32 },
}

impl Config {
    /// The filter's name (also the program's).
    pub fn name(&self) -> &'static str {
        match self {
            Config::FlowCount { .. } => "flowcount",
            Config::Sample { .. } => "sample",
            Config::ByteCount { .. } => "bytecount",
        }
    }
}

/// A flow as the kernel's `struct flow_key` (bpf/nicfix.h): 40 bytes, ports and
/// ethertype in host byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FlowKey {
    /// 4, 6, or 0 for a frame that is not IP.
    pub family: u8,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    pub ethertype: u16,
    pub src: [u8; 16],
    pub dst: [u8; 16],
}

impl FlowKey {
    pub const SIZE: usize = 40;

    pub fn to_bytes(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[0] = self.family;
        b[1] = self.proto;
        b[2..4].copy_from_slice(&self.sport.to_ne_bytes());
        b[4..6].copy_from_slice(&self.dport.to_ne_bytes());
        b[6..8].copy_from_slice(&self.ethertype.to_ne_bytes());
        b[8..24].copy_from_slice(&self.src);
        b[24..40].copy_from_slice(&self.dst);
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<FlowKey> {
        if b.len() != Self::SIZE {
            return None;
        }
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        let mut k = FlowKey {
            family: b[0],
            proto: b[1],
            sport: u16_at(2),
            dport: u16_at(4),
            ethertype: u16_at(6),
            ..FlowKey::default()
        };
        k.src.copy_from_slice(&b[8..24]);
        k.dst.copy_from_slice(&b[24..40]);
        Some(k)
    }
}

/// Packets and bytes of one flow (or of all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    pub packets: u64,
    pub bytes: u64,
}

/// What a program's maps hold at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    Flows {
        totals: Tally,
        flows: Vec<(FlowKey, Tally)>,
    },
    Sample {
        every: u64,
        seen: u64,
        passed: u64,
    },
    Bytes {
        len: u64,
        frames: u64,
        bytes: u64,
        hist: Box<[u64; 256]>,
    },
}

/// A loaded program: its descriptor (for `SO_ATTACH_BPF`) and its maps, pinned under
/// `dir` while it lives. Dropping it removes the pins; the program itself stays in the
/// kernel as long as a socket holds it.
#[derive(Debug)]
pub struct Loaded {
    prog: OwnedFd,
    config: Config,
    maps: Vec<(String, MapHandle)>,
    dir: Option<PathBuf>,
}

fn u64_at(v: &[u8], i: usize) -> u64 {
    v.get(i * 8..i * 8 + 8)
        .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
}

impl Loaded {
    /// Loads the program for `config` (the kernel's verifier checks it) and, with `pin`,
    /// pins its maps under that directory (created; bpffs mounted first if needed).
    pub fn load(config: Config, pin: Option<&Path>) -> Result<Loaded, EbpfError> {
        let (obj, prog_name) = match config {
            Config::FlowCount { .. } => (FLOWCOUNT_OBJ, "flowcount"),
            Config::Sample { .. } => (SAMPLE_OBJ, "sample"),
            Config::ByteCount { .. } => (BYTECOUNT_OBJ, "bytecount"),
        };
        let what = format!("loading the eBPF program '{prog_name}'");
        let mut open = ObjectBuilder::default()
            .open_memory(obj)
            .map_err(|e| err(&what, e))?;
        if let Config::FlowCount { flows } = config {
            let mut m = open
                .maps_mut()
                .find(|m| m.name() == "flows")
                .ok_or_else(|| EbpfError(format!("{what}: no map 'flows'")))?;
            m.set_max_entries(flows).map_err(|e| err(&what, e))?;
        }
        let obj = open.load().map_err(|e| {
            let hint = if e.to_string().contains("Operation not permitted") {
                " (loading eBPF programs needs CAP_BPF or root)"
            } else {
                ""
            };
            EbpfError(format!("{what}: {e}{hint}"))
        })?;
        let prog = obj
            .progs()
            .find(|p| p.name() == prog_name)
            .ok_or_else(|| EbpfError(format!("{what}: the object has no program '{prog_name}'")))?
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| err(&what, e))?;
        let mut maps = Vec::new();
        for m in obj.maps() {
            let name = m.name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue; // .rodata and friends, if any
            }
            let h = MapHandle::try_from(&m).map_err(|e| err(format!("{what}: map {name}"), e))?;
            maps.push((name, h));
        }
        let mut loaded = Loaded {
            prog,
            config,
            maps,
            dir: None,
        };
        match config {
            Config::Sample { every } => loaded.set("config", 0, every)?,
            Config::ByteCount { len } => {
                loaded.set("config", 0, len.clamp(1, BYTECOUNT_MAX_LEN) as u64)?
            }
            Config::FlowCount { .. } => {}
        }
        if let Some(dir) = pin {
            loaded.pin(dir)?;
        }
        Ok(loaded)
    }

    fn map(&self, name: &str) -> Result<&MapHandle, EbpfError> {
        self.maps
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m)
            .ok_or_else(|| EbpfError(format!("no map '{name}'")))
    }

    fn set(&self, map: &str, key: u32, v: u64) -> Result<(), EbpfError> {
        self.map(map)?
            .update(&key.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| err(format!("writing map {map}"), e))
    }

    fn pin(&mut self, dir: &Path) -> Result<(), EbpfError> {
        ensure_bpffs()?;
        sweep_stale();
        std::fs::create_dir_all(dir)
            .map_err(|e| err(format!("creating the pin directory {}", dir.display()), e))?;
        self.dir = Some(dir.to_path_buf());
        for (name, m) in &mut self.maps {
            let p = dir.join(&*name);
            m.pin(&p)
                .map_err(|e| err(format!("pinning map {name} at {}", p.display()), e))?;
        }
        Ok(())
    }

    /// The program, for `SO_ATTACH_BPF`.
    pub fn prog_fd(&self) -> BorrowedFd<'_> {
        self.prog.as_fd()
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// Where the maps are pinned, if they are.
    pub fn pin_dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The maps' contents now.
    pub fn snapshot(&self) -> Result<Snapshot, EbpfError> {
        read_maps(self.config.name(), &|n| {
            self.map(n).map(|m| m as &dyn MapCore)
        })
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if let Some(d) = self.dir.take() {
            remove_pins(&d);
        }
    }
}

/// Removes a pin directory (its pinned maps, then the directory; the run directory above
/// it too once it is empty).
pub fn remove_pins(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    if let Some(parent) = dir.parent() {
        if parent.starts_with(PIN_ROOT) && parent != Path::new(PIN_ROOT) {
            let _ = std::fs::remove_dir(parent); // only if empty
        }
    }
}

/// The run directory of this process: `PIN_ROOT/<pid>`.
pub fn run_dir() -> PathBuf {
    Path::new(PIN_ROOT).join(std::process::id().to_string())
}

/// Removes this process's pins (the end of a run, Ctrl-C).
pub fn remove_run_pins() {
    let _ = std::fs::remove_dir_all(run_dir());
}

/// Removes the run directories of processes that are gone (killed before cleaning up).
pub fn sweep_stale() {
    let Ok(rd) = std::fs::read_dir(PIN_ROOT) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Ok(pid) = name.parse::<u32>() {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// The pinned programs of running runs: (pid, label, directory), sorted. A label is
/// `n<node>-<filter>`.
///
/// Runs in other mount namespaces are listed too: `ip netns exec` gives the command a
/// mount namespace of its own with a fresh sysfs on /sys, so a run started under it
/// mounts a bpffs of its own at /sys/fs/bpf (`ensure_bpffs`) that this namespace does not
/// see. Such a run's pins are reached through its `/proc/PID/root` (the process's view
/// of the file system), where a run's directory is named by its own pid.
pub fn list_pinned() -> Vec<(u32, String, PathBuf)> {
    sweep_stale();
    let mut out = Vec::new();
    let mut list = |pid: u32, dir: &Path| {
        let Ok(inner) = std::fs::read_dir(dir) else {
            return;
        };
        for p in inner.flatten() {
            let label = p.file_name().to_string_lossy().into_owned();
            if !out.iter().any(|(q, l, _)| *q == pid && *l == label) {
                out.push((pid, label, p.path()));
            }
        }
    };
    if let Ok(rd) = std::fs::read_dir(PIN_ROOT) {
        for run in rd.flatten() {
            if let Ok(pid) = run.file_name().to_string_lossy().parse::<u32>() {
                list(pid, &run.path());
            }
        }
    }
    let ours = std::fs::read_link("/proc/self/ns/mnt").ok();
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            // Only processes in another mount namespace (ours were listed above).
            match std::fs::read_link(p.path().join("ns/mnt")) {
                Ok(ns) if Some(&ns) != ours.as_ref() => {}
                _ => continue,
            }
            let dir = p
                .path()
                .join("root")
                .join(PIN_ROOT.trim_start_matches('/'))
                .join(pid.to_string());
            list(pid, &dir);
        }
    }
    out.sort();
    out
}

/// Reads the maps pinned under `dir` by a program of filter `filter` (flowcount,
/// sample, bytecount) — while its run goes on, or at its end.
pub fn read_pinned(filter: &str, dir: &Path) -> Result<Snapshot, EbpfError> {
    let mut opened: Vec<(String, MapHandle)> = Vec::new();
    for name in ["flows", "totals", "config", "counters", "hist"] {
        let p = dir.join(name);
        if p.exists() {
            let m = MapHandle::from_pinned_path(&p)
                .map_err(|e| err(format!("opening pinned map {}", p.display()), e))?;
            opened.push((name.to_string(), m));
        }
    }
    let get = |n: &str| {
        opened
            .iter()
            .find(|(x, _)| x == n)
            .map(|(_, m)| m as &dyn MapCore)
            .ok_or_else(|| EbpfError(format!("no map '{n}' pinned under {}", dir.display())))
    };
    read_maps(filter, &get)
}

type GetMap<'a> = dyn Fn(&str) -> Result<&'a dyn MapCore, EbpfError> + 'a;

fn read_maps<'a>(filter: &str, get: &GetMap<'a>) -> Result<Snapshot, EbpfError> {
    let lookup = |map: &str, key: u32| -> Result<Vec<u8>, EbpfError> {
        get(map)?
            .lookup(&key.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| err(format!("reading map {map}"), e))
            .map(Option::unwrap_or_default)
    };
    // Per-CPU arrays: one value per possible CPU, summed.
    let percpu = |map: &str, key: u32| -> Result<Vec<Vec<u8>>, EbpfError> {
        get(map)?
            .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| err(format!("reading map {map}"), e))
            .map(Option::unwrap_or_default)
    };
    match filter {
        "flowcount" => {
            let t = lookup("totals", 0)?;
            let totals = Tally {
                packets: u64_at(&t, 0),
                bytes: u64_at(&t, 1),
            };
            let m = get("flows")?;
            let mut flows = Vec::new();
            for k in m.keys() {
                // An entry evicted between keys() and lookup is simply gone.
                if let (Some(key), Ok(Some(v))) =
                    (FlowKey::from_bytes(&k), m.lookup(&k, MapFlags::ANY))
                {
                    flows.push((
                        key,
                        Tally {
                            packets: u64_at(&v, 0),
                            bytes: u64_at(&v, 1),
                        },
                    ));
                }
            }
            flows.sort_by_key(|f| f.0);
            Ok(Snapshot::Flows { totals, flows })
        }
        "sample" => {
            let every = u64_at(&lookup("config", 0)?, 0);
            Ok(Snapshot::Sample {
                every,
                seen: u64_at(&lookup("counters", 0)?, 0),
                passed: u64_at(&lookup("counters", 1)?, 0),
            })
        }
        "bytecount" => {
            let len = u64_at(&lookup("config", 0)?, 0);
            let sum = |vals: Vec<Vec<u8>>, i: usize| vals.iter().map(|v| u64_at(v, i)).sum::<u64>();
            let frames = sum(percpu("counters", 0)?, 0);
            let bytes = sum(percpu("counters", 1)?, 0);
            let per = percpu("hist", 0)?;
            let mut hist = Box::new([0u64; 256]);
            for (i, h) in hist.iter_mut().enumerate() {
                *h = per.iter().map(|v| u64_at(v, i)).sum();
            }
            Ok(Snapshot::Bytes {
                len,
                frames,
                bytes,
                hist,
            })
        }
        other => Err(EbpfError(format!(
            "no eBPF program for filter '{other}' (flowcount, sample, bytecount)"
        ))),
    }
}

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Mounts bpffs at /sys/fs/bpf unless it is mounted there already.
pub fn ensure_bpffs() -> Result<(), EbpfError> {
    let path = std::ffi::CString::new(BPFFS).expect("no NUL");
    // SAFETY: all-zero is a valid `statfs`.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` is a valid out-parameter for the call.
    let r = unsafe { libc::statfs(path.as_ptr(), &mut st) };
    if r == 0 && st.f_type as i64 == BPF_FS_MAGIC {
        return Ok(());
    }
    std::fs::create_dir_all(BPFFS).map_err(|e| err(format!("creating {BPFFS}"), e))?;
    let (src, fstype) = (
        std::ffi::CString::new("bpf").expect("no NUL"),
        std::ffi::CString::new("bpf").expect("no NUL"),
    );
    let opts = std::ffi::CString::new("mode=0700").expect("no NUL");
    // SAFETY: every pointer is a NUL-terminated string alive for the duration of the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            path.as_ptr(),
            fstype.as_ptr(),
            0,
            opts.as_ptr() as *const libc::c_void,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(EbpfError(format!(
            "mounting bpffs at {BPFFS} (to pin the maps; needs CAP_SYS_ADMIN): {e}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_key_bytes_round_trip() {
        let k = FlowKey {
            family: 6,
            proto: 17,
            sport: 53,
            dport: 40000,
            ethertype: 0x86dd,
            src: [1; 16],
            dst: [2; 16],
        };
        assert_eq!(FlowKey::from_bytes(&k.to_bytes()), Some(k));
        assert_eq!(FlowKey::from_bytes(&[0; 39]), None);
    }

    #[test]
    fn objects_are_embedded() {
        for o in [FLOWCOUNT_OBJ, SAMPLE_OBJ, BYTECOUNT_OBJ] {
            assert_eq!(&o[..4], b"\x7fELF");
        }
    }
}
