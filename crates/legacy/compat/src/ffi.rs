//! libpcap's C interface (every symbol libpcap 1.10 exports but `eproto_db`), served
//! by Streamline where it can and by the system's libpcap (`real`) where it cannot.
//!
//! Owns: the `pcap_t` handles this library makes (a [`Handle`], told from a real libpcap
//! handle by its first word, [`MAGIC`], which no real handle can have: a real `pcap_t`
//! starts with a function pointer, and MAGIC is not a canonical address), libpcap's
//! option and state rules on them (set before activate, PCAP_ERROR_ACTIVATED after,
//! PCAP_ERROR_NOT_ACTIVATED before), packet headers in micro- or nanoseconds, breakloop,
//! non-blocking mode, and forwarding everything else. Does not own: the capture itself
//! (`capture`, safe Rust). FFI: this module and `real` hold the `unsafe`, each block with
//! why it holds; the C caller's pointers are trusted as libpcap trusts them.
//!
//! Which handles are ours: `pcap_create`/`pcap_open_live` on `streamline:RUN/NODE` or on an
//! Ethernet-framed interface (unless `STREAMLINE_PCAP=off`). Capture files, dead handles,
//! `any` and other devices are the real libpcap's from the start; a device the daemon
//! declines at activation (ENOTSUP), or every device when no daemon answers and
//! `STREAMLINE_PCAP_FALLBACK=1`, becomes a real handle inside ours, with the options the
//! program set replayed on it.

#![allow(non_camel_case_types, clippy::missing_safety_doc)]

use crate::capture::{self, Capture, Next, OpenError, Params};
use beltway::sys::EventFd;
use protocol::proto::BpfInsn;
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr, CString};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

pub type pcap_t = c_void;
pub type pcap_dumper_t = c_void;
pub type FILE = c_void;

#[repr(C)]
pub struct pcap_pkthdr {
    pub ts: libc::timeval,
    pub caplen: u32,
    pub len: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct bpf_insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

#[repr(C)]
pub struct bpf_program {
    pub bf_len: c_uint,
    pub bf_insns: *mut bpf_insn,
}

#[repr(C)]
pub struct pcap_stat {
    pub ps_recv: c_uint,
    pub ps_drop: c_uint,
    pub ps_ifdrop: c_uint,
}

#[repr(C)]
pub struct pcap_if {
    pub next: *mut pcap_if,
    pub name: *mut c_char,
    pub description: *mut c_char,
    pub addresses: *mut c_void,
    pub flags: u32,
}

pub type pcap_handler = Option<unsafe extern "C" fn(*mut u8, *const pcap_pkthdr, *const u8)>;

const ERRBUF: usize = 256;
const MAXIMUM_SNAPLEN: i32 = 262144;
const PCAP_ERROR: c_int = -1;
const PCAP_ERROR_BREAK: c_int = -2;
const PCAP_ERROR_NOT_ACTIVATED: c_int = -3;
const PCAP_ERROR_ACTIVATED: c_int = -4;
const PCAP_ERROR_TSTAMP_PRECISION_NOTSUP: c_int = -12;
const PCAP_WARNING_TSTAMP_TYPE_NOTSUP: c_int = 3;
const PCAP_TSTAMP_PRECISION_MICRO: c_int = 0;
const PCAP_TSTAMP_PRECISION_NANO: c_int = 1;
const PCAP_D_INOUT: c_int = 0;
/// Our handles' first word: "STRMLNPC", not a canonical x86-64/AArch64 user address.
pub const MAGIC: u64 = 0x5354_524d_4c4e_5043;
// Canonical user addresses (48-bit) are below 2^47: no function pointer equals MAGIC.
const _: () = assert!(MAGIC > (1u64 << 47));

/// The real libpcap's function `$name` with the given C signature (looked up once).
macro_rules! real {
    ($name:ident: fn($($t:ty),*) -> $r:ty) => {{
        static F: OnceLock<usize> = OnceLock::new();
        let p = *F.get_or_init(|| crate::real::sym(stringify!($name)) as usize);
        // SAFETY: `p` is the real libpcap's `$name`, whose C signature is the one named
        // here (pcap/pcap.h of libpcap 1.10).
        #[allow(unused_unsafe)]
        let f = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(p) };
        f
    }};
}

/// Functions served entirely by the real libpcap.
macro_rules! forward {
    ($( fn $name:ident($($a:ident: $t:ty),*) -> $r:ty; )*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            // SAFETY: the caller's arguments go as they came to the function libpcap
            // documents for them.
            unsafe { real!($name: fn($($t),*) -> $r)($($a),*) }
        }
    )*};
}

forward! {
    fn bpf_dump(p: *const bpf_program, option: c_int) -> ();
    fn bpf_filter(pc: *const bpf_insn, p: *const u8, wirelen: c_uint, buflen: c_uint) -> c_uint;
    fn bpf_image(p: *const bpf_insn, n: c_int) -> *mut c_char;
    fn bpf_validate(f: *const bpf_insn, len: c_int) -> c_int;
    fn pcap_compile_nopcap(snaplen: c_int, linktype: c_int, program: *mut bpf_program, buf: *const c_char, optimize: c_int, mask: u32) -> c_int;
    fn pcap_datalink_name_to_val(name: *const c_char) -> c_int;
    fn pcap_datalink_val_to_description(dlt: c_int) -> *const c_char;
    fn pcap_datalink_val_to_description_or_dlt(dlt: c_int) -> *const c_char;
    fn pcap_datalink_val_to_name(dlt: c_int) -> *const c_char;
    fn pcap_dump(user: *mut u8, h: *const pcap_pkthdr, sp: *const u8) -> ();
    fn pcap_dump_close(p: *mut pcap_dumper_t) -> ();
    fn pcap_dump_file(p: *mut pcap_dumper_t) -> *mut FILE;
    fn pcap_dump_flush(p: *mut pcap_dumper_t) -> c_int;
    fn pcap_dump_ftell(p: *mut pcap_dumper_t) -> c_long;
    fn pcap_dump_ftell64(p: *mut pcap_dumper_t) -> i64;
    fn pcap_ether_aton(s: *const c_char) -> *mut u8;
    fn pcap_ether_hostton(s: *const c_char) -> *mut u8;
    fn pcap_fopen_offline(fp: *mut FILE, errbuf: *mut c_char) -> *mut pcap_t;
    fn pcap_fopen_offline_with_tstamp_precision(fp: *mut FILE, precision: c_uint, errbuf: *mut c_char) -> *mut pcap_t;
    fn pcap_free_datalinks(dlt_list: *mut c_int) -> ();
    fn pcap_free_tstamp_types(list: *mut c_int) -> ();
    fn pcap_freealldevs(alldevs: *mut pcap_if) -> ();
    fn pcap_freecode(program: *mut bpf_program) -> ();
    fn pcap_init(opts: c_uint, errbuf: *mut c_char) -> c_int;
    fn pcap_lookupdev(errbuf: *mut c_char) -> *mut c_char;
    fn pcap_lookupnet(device: *const c_char, netp: *mut u32, maskp: *mut u32, errbuf: *mut c_char) -> c_int;
    fn pcap_nametoaddr(name: *const c_char) -> *mut *mut u32;
    fn pcap_nametoaddrinfo(name: *const c_char) -> *mut c_void;
    fn pcap_nametoeproto(name: *const c_char) -> c_int;
    fn pcap_nametollc(name: *const c_char) -> c_int;
    fn pcap_nametonetaddr(name: *const c_char) -> u32;
    fn pcap_nametoport(name: *const c_char, port: *mut c_int, proto: *mut c_int) -> c_int;
    fn pcap_nametoportrange(name: *const c_char, port1: *mut c_int, port2: *mut c_int, proto: *mut c_int) -> c_int;
    fn pcap_nametoproto(name: *const c_char) -> c_int;
    fn pcap_next_etherent(fp: *mut FILE) -> *mut c_void;
    fn pcap_offline_filter(fp: *const bpf_program, h: *const pcap_pkthdr, pkt: *const u8) -> c_int;
    fn pcap_open_dead(linktype: c_int, snaplen: c_int) -> *mut pcap_t;
    fn pcap_open_dead_with_tstamp_precision(linktype: c_int, snaplen: c_int, precision: c_uint) -> *mut pcap_t;
    fn pcap_open_offline(fname: *const c_char, errbuf: *mut c_char) -> *mut pcap_t;
    fn pcap_open_offline_with_tstamp_precision(fname: *const c_char, precision: c_uint, errbuf: *mut c_char) -> *mut pcap_t;
    fn pcap_statustostr(error: c_int) -> *const c_char;
    fn pcap_strerror(error: c_int) -> *const c_char;
    fn pcap_tstamp_type_name_to_val(name: *const c_char) -> c_int;
    fn pcap_tstamp_type_val_to_description(t: c_int) -> *const c_char;
    fn pcap_tstamp_type_val_to_name(t: c_int) -> *const c_char;
}

/// Options a program sets between `pcap_create` and `pcap_activate`.
#[derive(Debug, Clone)]
struct Opts {
    snaplen: c_int,
    promisc: c_int,
    timeout_ms: c_int,
    buffer_size: c_int,
    immediate: c_int,
    precision: c_int,
    tstamp_type: c_int,
    rfmon: c_int,
    protocol: c_int,
    nonblock: bool,
}

enum State {
    Created,
    Live(Box<Capture>),
    /// Handed to the real libpcap at activation.
    Real(*mut pcap_t),
}

/// One of our `pcap_t`s. Only `brk` is touched from another thread (`pcap_breakloop`,
/// often from a signal handler); the rest is the owning thread's, as libpcap's is.
#[repr(C)]
pub struct Handle {
    magic: u64,
    brk: AtomicBool,
    /// Signalled with `brk`: ends a reader's sleep (an eventfd, as libpcap's on Linux).
    brk_fd: EventFd,
    inner: UnsafeCell<Inner>,
}

struct Inner {
    device: CString,
    opts: Opts,
    errbuf: [c_char; ERRBUF],
    state: State,
    /// `pcap_next`/`pcap_next_ex`'s header, valid until the next call.
    hdr: pcap_pkthdr,
    /// A raw packet socket for `pcap_inject`, made on first use.
    inject: Option<std::os::fd::OwnedFd>,
}

impl Inner {
    fn set_err(&mut self, msg: &str) {
        let b = msg.as_bytes();
        let n = b.len().min(ERRBUF - 1);
        for (d, s) in self.errbuf.iter_mut().zip(&b[..n]) {
            *d = *s as c_char;
        }
        self.errbuf[n] = 0;
    }

    fn live(&mut self) -> Option<&mut Capture> {
        match &mut self.state {
            State::Live(c) => Some(c),
            _ => None,
        }
    }

    fn dlt(&self) -> c_int {
        match &self.state {
            State::Live(c) => linktype_to_dlt(c.link_type) as c_int,
            _ => 1,
        }
    }
}

/// DLT_* for a pcap LINKTYPE_* (they differ for raw IP).
fn linktype_to_dlt(lt: u32) -> u32 {
    match lt {
        101 => 12,
        l => l,
    }
}

enum H<'a> {
    Real(*mut pcap_t),
    Ours(&'a Handle, &'a mut Inner),
}

/// Whose handle `p` is.
///
/// # Safety
/// `p` is a `pcap_t` from this library or the real libpcap, used by one thread at a time.
unsafe fn h<'a>(p: *mut pcap_t) -> H<'a> {
    // SAFETY: every pcap_t, real or ours, is at least 8 readable bytes; ours are Handles
    // made by `Box::into_raw`, live until `pcap_close`; the calling thread owns `inner`.
    unsafe {
        if !p.is_null() && *(p as *const u64) == MAGIC {
            let hd = &*(p as *const Handle);
            let inner = &mut *hd.inner.get();
            if let State::Real(r) = inner.state {
                return H::Real(r);
            }
            return H::Ours(hd, inner);
        }
    }
    H::Real(p)
}

/// A pcap_t function: the real libpcap's for its handles, `$body` for ours.
macro_rules! on_handle {
    ($name:ident($p:ident $(, $a:ident: $t:ty)*) -> $r:ty, |$hd:pat_param, $i:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($p: *mut pcap_t $(, $a: $t)*) -> $r {
            // SAFETY: see `h`; the other arguments are the caller's, as libpcap takes them.
            match unsafe { h($p) } {
                H::Real(r) => unsafe { real!($name: fn(*mut pcap_t $(, $t)*) -> $r)(r $(, $a)*) },
                H::Ours($hd, $i) => $body,
            }
        }
    };
}

/// Copy `msg` into a caller's PCAP_ERRBUF_SIZE buffer.
unsafe fn errbuf_set(errbuf: *mut c_char, msg: &str) {
    if errbuf.is_null() {
        return;
    }
    let b = msg.as_bytes();
    let n = b.len().min(ERRBUF - 1);
    // SAFETY: libpcap's contract: errbuf has PCAP_ERRBUF_SIZE (256) bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr() as *const c_char, errbuf, n);
        *errbuf.add(n) = 0;
    }
}

unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a str> {
    // SAFETY: a NUL-terminated string from the caller, or null.
    (!p.is_null())
        .then(|| unsafe { CStr::from_ptr(p) }.to_str().ok())
        .flatten()
}

/// Whether `pcap_create` makes one of our handles for `device`.
fn serve(device: &str) -> bool {
    if std::env::var("STREAMLINE_PCAP").is_ok_and(|v| v == "off") {
        return false;
    }
    if device.starts_with("streamline:") {
        return true;
    }
    if device.is_empty() || device == "any" || device.contains('/') || device.len() > 15 {
        return false;
    }
    matches!(
        std::fs::read_to_string(format!("/sys/class/net/{device}/type"))
            .as_deref()
            .map(str::trim),
        Ok("1" | "772")
    )
}

#[no_mangle]
pub unsafe extern "C" fn pcap_create(source: *const c_char, errbuf: *mut c_char) -> *mut pcap_t {
    // SAFETY: the caller's string.
    let dev = unsafe { cstr(source) };
    match dev {
        Some(d) if serve(d) => {
            let brk_fd = match EventFd::new() {
                Ok(f) => f,
                Err(e) => {
                    // SAFETY: the caller's error buffer of PCAP_ERRBUF_SIZE bytes.
                    unsafe {
                        errbuf_set(
                            errbuf,
                            &format!("streamline: an eventfd for pcap_breakloop: {e}"),
                        )
                    };
                    return std::ptr::null_mut();
                }
            };
            let opts = Opts {
                snaplen: MAXIMUM_SNAPLEN,
                promisc: 0,
                timeout_ms: 0,
                buffer_size: 0,
                immediate: 0,
                precision: PCAP_TSTAMP_PRECISION_MICRO,
                tstamp_type: 0,
                rfmon: 0,
                protocol: 0,
                nonblock: false,
            };
            let inner = Inner {
                device: CString::new(d).expect("came as a C string"),
                opts,
                errbuf: [0; ERRBUF],
                state: State::Created,
                hdr: pcap_pkthdr {
                    ts: libc::timeval {
                        tv_sec: 0,
                        tv_usec: 0,
                    },
                    caplen: 0,
                    len: 0,
                },
                inject: None,
            };
            Box::into_raw(Box::new(Handle {
                magic: MAGIC,
                brk: AtomicBool::new(false),
                brk_fd,
                inner: UnsafeCell::new(inner),
            })) as *mut pcap_t
        }
        // SAFETY: as the caller gave them.
        _ => unsafe {
            real!(pcap_create: fn(*const c_char, *mut c_char) -> *mut pcap_t)(source, errbuf)
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pcap_open_live(
    device: *const c_char,
    snaplen: c_int,
    promisc: c_int,
    to_ms: c_int,
    errbuf: *mut c_char,
) -> *mut pcap_t {
    // SAFETY: our own exported calls, with the caller's arguments.
    unsafe {
        let p = pcap_create(device, errbuf);
        if p.is_null() {
            return p;
        }
        pcap_set_snaplen(p, snaplen);
        pcap_set_promisc(p, promisc);
        pcap_set_timeout(p, to_ms);
        let status = pcap_activate(p);
        if status < 0 {
            let dev = cstr(device).unwrap_or("?");
            let why = cstr(pcap_geterr(p)).unwrap_or("").to_string();
            errbuf_set(errbuf, &format!("{dev}: {why}"));
            pcap_close(p);
            return std::ptr::null_mut();
        }
        p
    }
}

/// Set an option before activation.
macro_rules! option {
    ($name:ident, $field:ident) => {
        on_handle!($name(p, v: c_int) -> c_int, |_, i| {
            if !matches!(i.state, State::Created) {
                return PCAP_ERROR_ACTIVATED;
            }
            i.opts.$field = v;
            0
        });
    };
}

option!(pcap_set_snaplen, snaplen);
option!(pcap_set_promisc, promisc);
option!(pcap_set_timeout, timeout_ms);
on_handle!(pcap_set_buffer_size(p, size: c_int) -> c_int, |_, i| {
    if !matches!(i.state, State::Created) {
        return PCAP_ERROR_ACTIVATED;
    }
    // As libpcap: a size that is not positive is ignored.
    if size > 0 {
        i.opts.buffer_size = size;
    }
    0
});
option!(pcap_set_immediate_mode, immediate);
option!(pcap_set_rfmon, rfmon);
option!(pcap_set_protocol_linux, protocol);

on_handle!(pcap_set_tstamp_type(p, t: c_int) -> c_int, |_, i| {
    if !matches!(i.state, State::Created) {
        return PCAP_ERROR_ACTIVATED;
    }
    i.opts.tstamp_type = t;
    // Host time stamps (the capture's clock) are all there is.
    if t == 0 { 0 } else { PCAP_WARNING_TSTAMP_TYPE_NOTSUP }
});

on_handle!(pcap_set_tstamp_precision(p, prec: c_int) -> c_int, |_, i| {
    if !matches!(i.state, State::Created) {
        return PCAP_ERROR_ACTIVATED;
    }
    if prec != PCAP_TSTAMP_PRECISION_MICRO && prec != PCAP_TSTAMP_PRECISION_NANO {
        return PCAP_ERROR_TSTAMP_PRECISION_NOTSUP;
    }
    i.opts.precision = prec;
    0
});

on_handle!(pcap_get_tstamp_precision(p) -> c_int, |_, i| i.opts.precision);
on_handle!(pcap_can_set_rfmon(p) -> c_int, |_, _i| 0);

/// Give handle `i` to the real libpcap: create it there and replay the options.
unsafe fn hand_to_real(i: &mut Inner) -> c_int {
    let mut eb = [0 as c_char; ERRBUF];
    // SAFETY: the real libpcap's calls on the handle it made, with our stored options.
    unsafe {
        let r = real!(pcap_create: fn(*const c_char, *mut c_char) -> *mut pcap_t)(
            i.device.as_ptr(),
            eb.as_mut_ptr(),
        );
        if r.is_null() {
            i.errbuf = eb;
            return PCAP_ERROR;
        }
        let o = i.opts.clone();
        real!(pcap_set_snaplen: fn(*mut pcap_t, c_int) -> c_int)(r, o.snaplen);
        real!(pcap_set_promisc: fn(*mut pcap_t, c_int) -> c_int)(r, o.promisc);
        real!(pcap_set_timeout: fn(*mut pcap_t, c_int) -> c_int)(r, o.timeout_ms);
        if o.buffer_size > 0 {
            real!(pcap_set_buffer_size: fn(*mut pcap_t, c_int) -> c_int)(r, o.buffer_size);
        }
        real!(pcap_set_immediate_mode: fn(*mut pcap_t, c_int) -> c_int)(r, o.immediate);
        real!(pcap_set_tstamp_precision: fn(*mut pcap_t, c_int) -> c_int)(r, o.precision);
        let status = real!(pcap_activate: fn(*mut pcap_t) -> c_int)(r);
        if o.nonblock {
            real!(pcap_setnonblock: fn(*mut pcap_t, c_int, *mut c_char) -> c_int)(
                r,
                1,
                eb.as_mut_ptr(),
            );
        }
        i.state = State::Real(r);
        status
    }
}

on_handle!(pcap_activate(p) -> c_int, |_, i| {
    if !matches!(i.state, State::Created) {
        return PCAP_ERROR_ACTIVATED;
    }
    let snaplen = if i.opts.snaplen <= 0 || i.opts.snaplen > MAXIMUM_SNAPLEN { MAXIMUM_SNAPLEN } else { i.opts.snaplen };
    i.opts.snaplen = snaplen;
    let immediate = i.opts.immediate != 0;
    let wake = capture::wake_for(i.opts.timeout_ms, immediate);
    let params = Params {
        device: i.device.to_string_lossy().into_owned(),
        snaplen: snaplen as u32,
        program: Vec::new(),
        wake,
        immediate,
        buffer: i.opts.buffer_size.max(0) as u32,
        promisc: i.opts.promisc != 0,
        direction: String::new(),
    };
    let fallback = std::env::var("STREAMLINE_PCAP_FALLBACK").is_ok_and(|v| v == "1");
    match Capture::open(capture::socket(), params) {
        Ok(c) => {
            i.state = State::Live(Box::new(c));
            0
        }
        // SAFETY: the handle is ours and not yet activated.
        Err(OpenError::NotOurs(_)) => unsafe { hand_to_real(i) },
        Err(OpenError::Unreachable(_)) if fallback && !i.device.to_bytes().starts_with(b"streamline:") => unsafe { hand_to_real(i) },
        Err(OpenError::Unreachable(e)) | Err(OpenError::Failed(e)) => {
            i.set_err(&e.message);
            e.status
        }
    }
});

on_handle!(pcap_geterr(p) -> *mut c_char, |_, i| i.errbuf.as_mut_ptr());

on_handle!(pcap_perror(p, prefix: *const c_char) -> (), |_, i| {
    // SAFETY: the caller's prefix string, or null.
    let pre = unsafe { cstr(prefix) }.unwrap_or("");
    let err: Vec<u8> = i.errbuf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    eprintln!("{pre}: {}", String::from_utf8_lossy(&err));
});

on_handle!(pcap_datalink(p) -> c_int, |_, i| match i.state {
    State::Live(_) => i.dlt(),
    _ => PCAP_ERROR_NOT_ACTIVATED,
});
on_handle!(pcap_datalink_ext(p) -> c_int, |_, i| match i.state {
    State::Live(_) => i.dlt(),
    _ => PCAP_ERROR_NOT_ACTIVATED,
});

on_handle!(pcap_list_datalinks(p, list: *mut *mut c_int) -> c_int, |_, i| {
    if !matches!(i.state, State::Live(_)) {
        return PCAP_ERROR_NOT_ACTIVATED;
    }
    // SAFETY: malloc'd as libpcap's list is (pcap_free_datalinks frees it with free()).
    unsafe {
        let a = libc::malloc(std::mem::size_of::<c_int>()) as *mut c_int;
        if a.is_null() {
            return PCAP_ERROR;
        }
        *a = i.dlt();
        *list = a;
    }
    1
});

on_handle!(pcap_set_datalink(p, dlt: c_int) -> c_int, |_, i| {
    if dlt == i.dlt() {
        return 0;
    }
    i.set_err(&format!("streamline: {} delivers DLT {} only, not {dlt}", i.device.to_string_lossy(), i.dlt()));
    PCAP_ERROR
});

on_handle!(pcap_list_tstamp_types(p, list: *mut *mut c_int) -> c_int, |_, _i| {
    // SAFETY: malloc'd as libpcap's list is (pcap_free_tstamp_types frees it).
    unsafe {
        let a = libc::malloc(std::mem::size_of::<c_int>()) as *mut c_int;
        if a.is_null() {
            return PCAP_ERROR;
        }
        *a = 0; // PCAP_TSTAMP_HOST
        *list = a;
    }
    1
});

on_handle!(pcap_snapshot(p) -> c_int, |_, i| match i.state {
    State::Live(_) => i.opts.snaplen,
    _ => PCAP_ERROR_NOT_ACTIVATED,
});
on_handle!(pcap_is_swapped(p) -> c_int, |_, i| match i.state {
    State::Live(_) => 0,
    _ => PCAP_ERROR_NOT_ACTIVATED,
});
on_handle!(pcap_major_version(p) -> c_int, |_, _i| 2);
on_handle!(pcap_minor_version(p) -> c_int, |_, _i| 4);
on_handle!(pcap_file(p) -> *mut FILE, |_, _i| std::ptr::null_mut());
on_handle!(pcap_bufsize(p) -> c_int, |_, i| match i.state {
    State::Live(_) => protocol::tap::DATA_BYTES as c_int,
    _ => PCAP_ERROR_NOT_ACTIVATED,
});
on_handle!(pcap_get_required_select_timeout(p) -> *const libc::timeval, |_, _i| std::ptr::null());

on_handle!(pcap_setnonblock(p, nb: c_int, errbuf: *mut c_char) -> c_int, |_, i| {
    let _ = errbuf;
    i.opts.nonblock = nb != 0;
    0
});
on_handle!(pcap_getnonblock(p, errbuf: *mut c_char) -> c_int, |_, i| {
    let _ = errbuf;
    i.opts.nonblock as c_int
});

/// libpcap's directions (pcap_direction_t): both, received, sent.
const PCAP_D_IN: c_int = 1;
const PCAP_D_OUT: c_int = 2;

on_handle!(pcap_setdirection(p, d: c_int) -> c_int, |_, i| {
    let direction = match d {
        PCAP_D_INOUT => "",
        PCAP_D_IN => "in",
        PCAP_D_OUT => "out",
        _ => {
            i.set_err(&format!("Invalid direction {d}"));
            return PCAP_ERROR;
        }
    };
    let Some(c) = i.live() else {
        i.set_err("This handle hasn't been activated yet");
        return PCAP_ERROR_NOT_ACTIVATED;
    };
    match c.set_direction(direction) {
        Ok(()) => 0,
        Err(e) => {
            i.set_err(&e.message);
            PCAP_ERROR
        }
    }
});

on_handle!(pcap_get_selectable_fd(p) -> c_int, |_, i| match i.live() {
    Some(c) => c.selectable_fd().unwrap_or(-1),
    None => -1,
});
on_handle!(pcap_fileno(p) -> c_int, |_, i| match i.live() {
    Some(c) => c.selectable_fd().unwrap_or(-1),
    None => -1,
});

// The flag first: a sleeper the signal wakes finds it set. (A write(2): signal-safe.)
on_handle!(pcap_breakloop(p) -> (), |hd, _i| {
    hd.brk.store(true, Ordering::SeqCst);
    hd.brk_fd.signal();
});

on_handle!(pcap_compile(p, program: *mut bpf_program, buf: *const c_char, optimize: c_int, mask: u32) -> c_int, |_, i| {
    // The real compiler, on a dead handle with this capture's link type and snap length.
    let dlt = i.dlt();
    // SAFETY: the real libpcap's calls on a handle it made and closes here.
    unsafe {
        let dead = real!(pcap_open_dead_with_tstamp_precision: fn(c_int, c_int, c_uint) -> *mut pcap_t)(dlt, i.opts.snaplen.clamp(1, MAXIMUM_SNAPLEN), i.opts.precision as c_uint);
        if dead.is_null() {
            i.set_err("streamline: the real libpcap could not make a handle to compile with");
            return PCAP_ERROR;
        }
        let r = real!(pcap_compile: fn(*mut pcap_t, *mut bpf_program, *const c_char, c_int, u32) -> c_int)(dead, program, buf, optimize, mask);
        if r < 0 {
            let e = cstr(real!(pcap_geterr: fn(*mut pcap_t) -> *mut c_char)(dead)).unwrap_or("").to_string();
            i.set_err(&e);
        }
        real!(pcap_close: fn(*mut pcap_t) -> ())(dead);
        r
    }
});

on_handle!(pcap_setfilter(p, fp: *mut bpf_program) -> c_int, |_, i| {
    if fp.is_null() {
        i.set_err("streamline: pcap_setfilter: no program");
        return PCAP_ERROR;
    }
    // SAFETY: a bpf_program as pcap_compile fills it: bf_len instructions at bf_insns.
    let insns: Vec<BpfInsn> = unsafe {
        let prog = &*fp;
        if prog.bf_insns.is_null() || prog.bf_len == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize).iter().map(|x| (x.code, x.jt, x.jf, x.k)).collect()
        }
    };
    if insns.is_empty() {
        i.set_err("streamline: pcap_setfilter: an empty program");
        return PCAP_ERROR;
    }
    let Some(c) = i.live() else {
        i.set_err("streamline: pcap_setfilter on a handle that is not activated");
        return PCAP_ERROR_NOT_ACTIVATED;
    };
    match c.set_filter(insns) {
        Ok(()) => 0,
        Err(e) => {
            i.set_err(&e.message);
            PCAP_ERROR
        }
    }
});

/// How long a read waits for its first packet, as libpcap on Linux: not at all when
/// non-blocking; in immediate mode (libpcap's TPACKET_V2) up to the timeout (none: 0);
/// else (TPACKET_V3) until packets come, however long: the timeout bounds only how long
/// the first of them may wait for its batch (see `capture::wake_for`), so an idle reader
/// is never woken.
fn first_wait(nonblock: bool, immediate: bool, timeout_ms: c_int) -> Option<Duration> {
    if nonblock {
        Some(Duration::ZERO)
    } else if immediate && timeout_ms > 0 {
        Some(Duration::from_millis(timeout_ms as u64))
    } else {
        None
    }
}

/// Deliver up to `cnt` packets (all waiting, at least one unless the wait times out; `cnt
/// <= 0`: all waiting) to `cb`. Returns the count, PCAP_ERROR_BREAK, PCAP_ERROR, or `None`
/// at the end of a `streamline:` stream.
fn dispatch(
    hd: &Handle,
    i: &mut Inner,
    cnt: c_int,
    cb: pcap_handler,
    user: *mut u8,
) -> Option<c_int> {
    let (nonblock, immediate, timeout_ms, snaplen, nano) = (
        i.opts.nonblock,
        i.opts.immediate != 0,
        i.opts.timeout_ms,
        i.opts.snaplen as u32,
        i.opts.precision == PCAP_TSTAMP_PRECISION_NANO,
    );
    let Some(cb) = cb else {
        i.set_err("streamline: no callback");
        return Some(PCAP_ERROR);
    };
    let mut n = 0;
    let brk = || hd.brk.load(Ordering::SeqCst);
    let mut err = None;
    let mut ended = false;
    {
        let State::Live(c) = &mut i.state else {
            i.set_err("streamline: reading from a handle that is not activated");
            return Some(PCAP_ERROR_NOT_ACTIVATED);
        };
        loop {
            if hd.brk.swap(false, Ordering::SeqCst) {
                c.rearm();
                return Some(PCAP_ERROR_BREAK);
            }
            if cnt > 0 && n >= cnt {
                break;
            }
            // The first packet may be waited for; the rest are what is there already.
            let wait = if n > 0 {
                Some(Duration::ZERO)
            } else {
                first_wait(nonblock, immediate, timeout_ms)
            };
            match c.next(wait, hd.brk_fd.as_fd(), &brk) {
                Ok(Next::Packet(pkt)) => {
                    let hdr = header(
                        pkt.ts_ns,
                        pkt.orig_len,
                        pkt.data.len().min(snaplen as usize) as u32,
                        nano,
                    );
                    // SAFETY: the caller's callback with its own user pointer, a header on
                    // our stack and the packet in place in the mapped ring.
                    unsafe { cb(user, &hdr, pkt.data.as_ptr()) };
                    n += 1;
                }
                Ok(Next::TimedOut) => break,
                Ok(Next::End) => {
                    ended = true;
                    break;
                }
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        c.complete();
        c.rearm();
    }
    if let Some(e) = err {
        i.set_err(&e.message);
        return Some(PCAP_ERROR);
    }
    if ended && n == 0 {
        return None;
    }
    Some(n)
}

fn header(ts_ns: u64, len: u32, caplen: u32, nano: bool) -> pcap_pkthdr {
    let sec = (ts_ns / 1_000_000_000) as libc::time_t;
    let frac = ts_ns % 1_000_000_000;
    let sub = if nano { frac } else { frac / 1000 };
    pcap_pkthdr {
        ts: libc::timeval {
            tv_sec: sec,
            tv_usec: sub as libc::suseconds_t,
        },
        caplen,
        len,
    }
}

on_handle!(pcap_dispatch(p, cnt: c_int, cb: pcap_handler, user: *mut u8) -> c_int, |hd, i| dispatch(hd, i, cnt, cb, user).unwrap_or(0));

on_handle!(pcap_loop(p, cnt: c_int, cb: pcap_handler, user: *mut u8) -> c_int, |hd, i| {
    let mut n = 0;
    loop {
        let want = if cnt > 0 { cnt - n } else { -1 };
        match dispatch(hd, i, want, cb, user) {
            None => return 0,
            Some(r) if r < 0 => return r,
            Some(r) => n += r,
        }
        if cnt > 0 && n >= cnt {
            return 0;
        }
    }
});

on_handle!(pcap_next_ex(p, hdr: *mut *mut pcap_pkthdr, data: *mut *const u8) -> c_int, |hd, i| {
    let (nonblock, immediate, timeout_ms, snaplen, nano) = (i.opts.nonblock, i.opts.immediate != 0, i.opts.timeout_ms, i.opts.snaplen as usize, i.opts.precision == PCAP_TSTAMP_PRECISION_NANO);
    if hd.brk.swap(false, Ordering::SeqCst) {
        return PCAP_ERROR_BREAK;
    }
    let wait = first_wait(nonblock, immediate, timeout_ms);
    let brk = || hd.brk.load(Ordering::SeqCst);
    let State::Live(c) = &mut i.state else {
        return PCAP_ERROR_NOT_ACTIVATED;
    };
    let got = match c.next(wait, hd.brk_fd.as_fd(), &brk) {
        Ok(Next::Packet(pkt)) => Ok(Some((header(pkt.ts_ns, pkt.orig_len, pkt.data.len().min(snaplen) as u32, nano), pkt.data.as_ptr()))),
        Ok(Next::TimedOut) => Ok(None),
        Ok(Next::End) => Err(PCAP_ERROR_BREAK),
        Err(e) => {
            let m = e.message;
            i.set_err(&m);
            Err(PCAP_ERROR)
        }
    };
    match got {
        Ok(Some((hv, d))) => {
            i.hdr = hv;
            // SAFETY: the caller's out-pointers; the header lives in the handle and the
            // packet in the ring until the next call.
            unsafe {
                *hdr = &mut i.hdr;
                *data = d;
            }
            1
        }
        Ok(None) => 0,
        Err(code) => code,
    }
});

#[no_mangle]
pub unsafe extern "C" fn pcap_next(p: *mut pcap_t, hdr: *mut pcap_pkthdr) -> *const u8 {
    let mut hp: *mut pcap_pkthdr = std::ptr::null_mut();
    let mut data: *const u8 = std::ptr::null();
    // SAFETY: as pcap_next_ex, then the header copied to the caller's.
    unsafe {
        if let H::Real(r) = h(p) {
            return real!(pcap_next: fn(*mut pcap_t, *mut pcap_pkthdr) -> *const u8)(r, hdr);
        }
        if pcap_next_ex(p, &mut hp, &mut data) != 1 {
            return std::ptr::null();
        }
        std::ptr::copy_nonoverlapping(hp, hdr, 1);
    }
    data
}

on_handle!(pcap_stats(p, ps: *mut pcap_stat) -> c_int, |_, i| {
    let Some(c) = i.live() else {
        return PCAP_ERROR_NOT_ACTIVATED;
    };
    // As libpcap on Linux: ps_recv counts what the filter passed, dropped or not; ps_drop
    // what was lost for want of room (the reader's own share overwritten, and the shared
    // capture's socket full); ps_ifdrop the interface's own drops.
    let kernel = c.kernel_lost();
    let (recv, drop) = (c.delivered + c.dropped + kernel, c.dropped + kernel);
    let ifdrop = c.interface_dropped();
    // SAFETY: the caller's pcap_stat.
    unsafe {
        (*ps).ps_recv = recv as c_uint;
        (*ps).ps_drop = drop as c_uint;
        (*ps).ps_ifdrop = ifdrop as c_uint;
    }
    0
});

on_handle!(pcap_inject(p, buf: *const c_void, size: usize) -> c_int, |_, i| {
    // SAFETY: the caller's buffer of `size` bytes.
    let frame = unsafe { std::slice::from_raw_parts(buf as *const u8, size) };
    match inject(i, frame) {
        Ok(n) => n as c_int,
        Err(e) => {
            i.set_err(&format!("streamline: send: {e}"));
            PCAP_ERROR
        }
    }
});

on_handle!(pcap_sendpacket(p, buf: *const u8, size: c_int) -> c_int, |_, i| {
    // SAFETY: the caller's buffer of `size` bytes.
    let frame = unsafe { std::slice::from_raw_parts(buf, size.max(0) as usize) };
    match inject(i, frame) {
        Ok(n) if n == frame.len() => 0,
        Ok(n) => {
            i.set_err(&format!("streamline: send: {n} of {} bytes sent", frame.len()));
            PCAP_ERROR
        }
        Err(e) => {
            i.set_err(&format!("streamline: send: {e}"));
            PCAP_ERROR
        }
    }
});

/// Send a frame out of the handle's interface through a raw packet socket (the shared
/// capture only receives).
fn inject(i: &mut Inner, frame: &[u8]) -> std::io::Result<usize> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let dev = i.device.clone();
    if dev.to_bytes().starts_with(b"streamline:") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a run's stream cannot be sent to",
        ));
    }
    // SAFETY: if_nametoindex with a C string; socket/bind/send with locals of the right
    // types and sizes.
    unsafe {
        if i.inject.is_none() {
            let ifindex = libc::if_nametoindex(dev.as_ptr());
            if ifindex == 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let owned = OwnedFd::from_raw_fd(fd);
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_ifindex = ifindex as c_int;
            if libc::bind(
                fd,
                &sll as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            ) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            i.inject = Some(owned);
        }
        let fd = i.inject.as_ref().expect("made above").as_raw_fd();
        let n = libc::send(fd, frame.as_ptr() as *const c_void, frame.len(), 0);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// A dumper for one of our handles: the real libpcap's, opened on a dead handle with this
/// capture's link type, snap length and precision.
unsafe fn dumper(
    i: &mut Inner,
    open: impl FnOnce(*mut pcap_t) -> *mut pcap_dumper_t,
) -> *mut pcap_dumper_t {
    // SAFETY: the real libpcap's calls on a handle it made and closes here (a dumper keeps
    // nothing of it).
    unsafe {
        let dead = real!(pcap_open_dead_with_tstamp_precision: fn(c_int, c_int, c_uint) -> *mut pcap_t)(
            i.dlt(),
            i.opts.snaplen.clamp(1, MAXIMUM_SNAPLEN),
            i.opts.precision as c_uint,
        );
        if dead.is_null() {
            i.set_err("streamline: the real libpcap could not make a handle to dump with");
            return std::ptr::null_mut();
        }
        let d = open(dead);
        if d.is_null() {
            let e = cstr(real!(pcap_geterr: fn(*mut pcap_t) -> *mut c_char)(dead))
                .unwrap_or("")
                .to_string();
            i.set_err(&e);
        }
        real!(pcap_close: fn(*mut pcap_t) -> ())(dead);
        d
    }
}

on_handle!(pcap_dump_open(p, fname: *const c_char) -> *mut pcap_dumper_t, |_, i| unsafe {
    // SAFETY: the caller's file name.
    dumper(i, |dead| real!(pcap_dump_open: fn(*mut pcap_t, *const c_char) -> *mut pcap_dumper_t)(dead, fname))
});
on_handle!(pcap_dump_open_append(p, fname: *const c_char) -> *mut pcap_dumper_t, |_, i| unsafe {
    // SAFETY: the caller's file name.
    dumper(i, |dead| real!(pcap_dump_open_append: fn(*mut pcap_t, *const c_char) -> *mut pcap_dumper_t)(dead, fname))
});
on_handle!(pcap_dump_fopen(p, f: *mut FILE) -> *mut pcap_dumper_t, |_, i| unsafe {
    // SAFETY: the caller's FILE.
    dumper(i, |dead| real!(pcap_dump_fopen: fn(*mut pcap_t, *mut FILE) -> *mut pcap_dumper_t)(dead, f))
});

#[no_mangle]
pub unsafe extern "C" fn pcap_close(p: *mut pcap_t) {
    // SAFETY: `p` is a handle the caller is done with: ours was made by Box::into_raw.
    unsafe {
        if !p.is_null() && *(p as *const u64) == MAGIC {
            let hd = Box::from_raw(p as *mut Handle);
            if let State::Real(r) = (*hd.inner.get()).state {
                real!(pcap_close: fn(*mut pcap_t) -> ())(r);
            }
            drop(hd);
        } else {
            real!(pcap_close: fn(*mut pcap_t) -> ())(p);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn pcap_findalldevs(
    alldevs: *mut *mut pcap_if,
    errbuf: *mut c_char,
) -> c_int {
    // SAFETY: the real list, then our entries appended, malloc'd field by field as
    // libpcap's are (pcap_freealldevs frees them with free()).
    unsafe {
        let r =
            real!(pcap_findalldevs: fn(*mut *mut pcap_if, *mut c_char) -> c_int)(alldevs, errbuf);
        if r != 0 || std::env::var("STREAMLINE_PCAP").is_ok_and(|v| v == "off") {
            return r;
        }
        let mut tail: *mut *mut pcap_if = alldevs;
        while !(*tail).is_null() {
            tail = &mut (**tail).next;
        }
        for (name, desc) in capture::devices(&capture::socket()) {
            let (Ok(n), Ok(d)) = (CString::new(name), CString::new(desc)) else {
                continue;
            };
            let e = libc::calloc(1, std::mem::size_of::<pcap_if>()) as *mut pcap_if;
            if e.is_null() {
                break;
            }
            (*e).name = libc::strdup(n.as_ptr());
            (*e).description = libc::strdup(d.as_ptr());
            // PCAP_IF_UP | PCAP_IF_RUNNING | PCAP_IF_CONNECTION_STATUS_NOT_APPLICABLE
            (*e).flags = 0x2 | 0x4 | 0x30;
            *tail = e;
            tail = &mut (*e).next;
        }
        0
    }
}

/// The libpcap release whose interface this library follows (every function symbol it
/// exports, and its behaviour on Linux).
const FOLLOWS: &str = "1.10";

/// libpcap's `pcap_version` data symbol: the version this library follows.
#[no_mangle]
pub static pcap_version: [c_char; 5] = [
    b'1' as c_char,
    b'.' as c_char,
    b'1' as c_char,
    b'0' as c_char,
    0,
];
const _: () = assert!(FOLLOWS.len() + 1 == 5);

#[no_mangle]
pub extern "C" fn pcap_lib_version() -> *const c_char {
    static V: OnceLock<CString> = OnceLock::new();
    V.get_or_init(|| {
        // SAFETY: the real libpcap's static version string.
        let real = unsafe { cstr(real!(pcap_lib_version: fn() -> *const c_char)()) }
            .unwrap_or("libpcap")
            .to_string();
        CString::new(format!(
            "libpcap version {FOLLOWS} (Streamline {} libslpcap, the shared capture; filters compiled and files read by the system's {real})",
            env!("CARGO_PKG_VERSION")
        ))
        .expect("no NUL")
    })
    .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_carry_micro_or_nanoseconds() {
        let h = header(1_700_000_000_123_456_789, 1514, 96, false);
        assert_eq!(
            (h.ts.tv_sec, h.ts.tv_usec, h.caplen, h.len),
            (1_700_000_000, 123_456, 96, 1514)
        );
        let h = header(1_700_000_000_123_456_789, 60, 60, true);
        assert_eq!(h.ts.tv_usec, 123_456_789);
    }
}
