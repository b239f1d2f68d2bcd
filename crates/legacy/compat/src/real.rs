//! The system's real libpcap, loaded privately: what the stand-in does not serve itself
//! (capture files, devices the daemon does not capture, the filter compiler, name tables)
//! it hands to it.
//!
//! Owns: finding the real library (never this one, which has its soname), loading it with
//! `RTLD_LOCAL | RTLD_DEEPBIND` (its own calls between its functions stay inside it and
//! never land back in the stand-in, whose symbols have the same names), and looking up
//! its symbols. FFI: `unsafe` lives here and in `ffi`.

use std::ffi::{c_void, CStr, CString};
use std::sync::OnceLock;

/// Where Debian, Fedora and others put libpcap's runtime library.
const CANDIDATES: &[&str] = &[
    "/lib/x86_64-linux-gnu/libpcap.so.0.8",
    "/usr/lib/x86_64-linux-gnu/libpcap.so.0.8",
    "/lib/aarch64-linux-gnu/libpcap.so.0.8",
    "/usr/lib/aarch64-linux-gnu/libpcap.so.0.8",
    "/usr/lib64/libpcap.so.1",
    "/usr/lib/libpcap.so.1",
    "/usr/lib/libpcap.so.0.8",
];

struct Lib(*mut c_void);
// SAFETY: a dlopen handle is a process-wide token; dlsym on it is thread-safe.
unsafe impl Send for Lib {}
// SAFETY: as above.
unsafe impl Sync for Lib {}

static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();

/// The path of this library (the stand-in), to never load it as the real one.
fn own_path() -> Option<std::path::PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr reads the address of one of our own functions and fills `info`;
    // `dli_fname` points into the loader's tables, valid while we are loaded.
    unsafe {
        if libc::dladdr(own_path as *const c_void, info.as_mut_ptr()) == 0 {
            return None;
        }
        let info = info.assume_init();
        if info.dli_fname.is_null() {
            return None;
        }
        std::fs::canonicalize(CStr::from_ptr(info.dli_fname).to_string_lossy().as_ref()).ok()
    }
}

fn load() -> Result<Lib, String> {
    let own = own_path();
    let from_env = std::env::var("STREAMLINE_REAL_LIBPCAP").ok();
    let mut tried = Vec::new();
    for path in from_env
        .iter()
        .map(String::as_str)
        .chain(CANDIDATES.iter().copied())
    {
        let Ok(canon) = std::fs::canonicalize(path) else {
            continue;
        };
        if own.as_ref() == Some(&canon) {
            continue;
        }
        let c = CString::new(path).map_err(|e| e.to_string())?;
        // SAFETY: dlopen with a NUL-terminated path; a private namespace for its symbols
        // (RTLD_LOCAL) and its own symbols first (RTLD_DEEPBIND).
        let h = unsafe {
            libc::dlopen(
                c.as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND,
            )
        };
        if !h.is_null() {
            return Ok(Lib(h));
        }
        // SAFETY: dlerror returns a thread-local message or null.
        let why = unsafe { libc::dlerror() };
        let why = if why.is_null() {
            "unknown".to_string()
        } else {
            unsafe { CStr::from_ptr(why) }
                .to_string_lossy()
                .into_owned()
        };
        tried.push(format!("{path}: {why}"));
    }
    Err(format!("streamline's libpcap: the system's libpcap (libpcap.so.0.8) was not found{}; install libpcap0.8 or set STREAMLINE_REAL_LIBPCAP", if tried.is_empty() { String::new() } else { format!(" ({})", tried.join("; ")) }))
}

/// The address of the real libpcap's `name`. The program cannot go on without the
/// system's libpcap for what the stand-in hands it, so a missing library or symbol ends it
/// with a message saying which.
pub fn sym(name: &str) -> *mut c_void {
    let lib = match LIB.get_or_init(load) {
        Ok(l) => l,
        Err(why) => {
            eprintln!("{why}");
            std::process::abort();
        }
    };
    let c = CString::new(name).expect("symbol names have no NUL");
    // SAFETY: dlsym on a live handle with a NUL-terminated name.
    let p = unsafe { libc::dlsym(lib.0, c.as_ptr()) };
    if p.is_null() {
        eprintln!("streamline's libpcap: the system's libpcap has no {name}");
        std::process::abort();
    }
    p
}
