//! `exec` and `posix_spawn`: will the new program load this library? If not (a static
//! binary, a setuid program the loader will not preload into, an environment without
//! LD_PRELOAD), every ring pipe end it would inherit goes back to the kernel first
//! (`pipe::before_foreign_exec`), so it reads and writes what every other holder of the
//! pipe sees.
//!
//! Owns: that decision (reading the target's ELF program headers for PT_INTERP, following
//! one `#!` line) and the exec family's shells. The real calls are libc's, found with
//! `dlsym(RTLD_NEXT)`: `execvp`'s PATH search and `posix_spawn`'s file actions stay glibc's.

#![allow(clippy::missing_safety_doc)]

use crate::{own, pipe, sys};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// libc's own `name` (the next definition after ours).
fn real(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static P: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let p = *P.get_or_init(|| {
            real(CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()).expect("literal"))
                as usize
        });
        if p == 0 {
            None
        } else {
            // SAFETY: p is libc's function of that name, whose C type is $ty.
            Some(unsafe { std::mem::transmute::<usize, $ty>(p) })
        }
    }};
}

extern "C" {
    static environ: *const *const c_char;
}

/// Does `envp` preload this library?
unsafe fn env_preloads(envp: *const *const c_char) -> bool {
    if envp.is_null() {
        return false;
    }
    let mut i = 0;
    loop {
        // SAFETY: envp is a NULL-terminated array of C strings, as exec's caller vouches.
        let e = unsafe { *envp.add(i) };
        if e.is_null() {
            return false;
        }
        // SAFETY: as above.
        let s = unsafe { CStr::from_ptr(e) }.to_bytes();
        if let Some(v) = s.strip_prefix(b"LD_PRELOAD=") {
            return v.windows(b"slpreload".len()).any(|w| w == b"slpreload");
        }
        i += 1;
    }
}

/// Is `path` a program the loader will preload into? (The rule lives in
/// [`shape::program`]; here the file is read with raw system calls.)
pub fn dynamic_target(path: &Path, depth: u32) -> bool {
    shape::program::dynamic_target(path, depth, &read_head)
}

/// The first page of `path`, read with raw system calls: this runs in `vfork` children,
/// which share the parent's fd table of this library but not its fds, so the interposed
/// `read` could take a number that is a ring pipe end in the parent for one here.
fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let fd = sys::open(&c, libc::O_RDONLY | libc::O_CLOEXEC)
        .map_err(std::io::Error::from_raw_os_error)? as i32;
    let mut buf = vec![0u8; 4096];
    let r = sys::read(fd, &mut buf);
    let _ = sys::close(fd);
    let n = r.map_err(std::io::Error::from_raw_os_error)?;
    buf.truncate(n);
    Ok(buf)
}

/// `file` as execvp would find it.
fn search_path(file: &CStr) -> Option<PathBuf> {
    let f = file.to_str().ok()?;
    if f.contains('/') {
        return Some(PathBuf::from(f));
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/bin:/usr/bin".into());
    path.split(':')
        .map(|d| Path::new(if d.is_empty() { "." } else { d }).join(f))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Before exec or spawn of `path` with `envp`.
unsafe fn prepare(path: Option<PathBuf>, envp: *const *const c_char) {
    if own::is_internal() {
        return;
    }
    // SAFETY: envp from the caller.
    let ours =
        unsafe { env_preloads(envp) } && path.as_deref().is_none_or(|p| dynamic_target(p, 0));
    if !ours {
        pipe::before_foreign_exec();
    }
}

/// Before exec or spawn of `file` as execvp finds it.
unsafe fn prepare_searched(file: *const c_char, envp: *const *const c_char) {
    // SAFETY: file is null or a C string from the caller.
    let found = if file.is_null() {
        None
    } else {
        search_path(unsafe { CStr::from_ptr(file) })
    };
    unsafe { prepare(found, envp) };
}

fn cpath(p: *const c_char) -> Option<PathBuf> {
    if p.is_null() {
        return None;
    }
    // SAFETY: a C string from exec's caller.
    let c = unsafe { CStr::from_ptr(p) };
    Some(PathBuf::from(c.to_string_lossy().into_owned()))
}

type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type ExecvpeFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const c_void,
    *const c_void,
    *const *const c_char,
    *const *const c_char,
) -> c_int;

#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    unsafe { prepare(cpath(path), envp) };
    match real!("execve", ExecveFn) {
        // SAFETY: libc's execve with the caller's arguments.
        Some(f) => unsafe { f(path, argv, envp) },
        None => sys::c_ret(Err(libc::ENOSYS)) as c_int,
    }
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: environ is libc's live environment.
    unsafe { execve(path, argv, environ) }
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    unsafe { prepare_searched(file, envp) };
    match real!("execvpe", ExecvpeFn) {
        // SAFETY: libc's execvpe with the caller's arguments.
        Some(f) => unsafe { f(file, argv, envp) },
        None => sys::c_ret(Err(libc::ENOSYS)) as c_int,
    }
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: environ is libc's live environment.
    unsafe { execvpe(file, argv, environ) }
}

// --- execl, execlp, execle: C-variadic, which stable Rust cannot define. Each entry
// point (x86-64) stores the six argument registers in an array beside the stack
// arguments and hands both to `exec_list`, which reads the list as the System V ABI lays
// it out (integer arguments in rdi, rsi, rdx, rcx, r8, r9, then on the stack) and goes on
// through execv, execvp or execve above, so the target is checked as for those.

const LIST_L: c_int = 0;
const LIST_LP: c_int = 1;
const LIST_LE: c_int = 2;

/// The list of an execl-style call: `regs` holds the six argument registers (path first),
/// `stack` the arguments after them.
///
/// # Safety
/// `regs` points at six words and `stack` at the caller's stack arguments, which hold the
/// rest of a NULL-terminated list (and, for execle, the environment after the NULL).
unsafe extern "C" fn exec_list(regs: *const usize, stack: *const usize, kind: c_int) -> c_int {
    // SAFETY: as the caller vouches: word i of the argument list.
    let word = |i: usize| unsafe {
        if i < 6 {
            *regs.add(i)
        } else {
            *stack.add(i - 6)
        }
    };
    let path = word(0) as *const c_char;
    let mut argv: Vec<*const c_char> = Vec::new();
    let mut i = 1;
    loop {
        let a = word(i) as *const c_char;
        i += 1;
        argv.push(a);
        if a.is_null() {
            break;
        }
    }
    // SAFETY: execv's family with the list collected (NULL-terminated) and a live
    // environment.
    unsafe {
        match kind {
            LIST_LP => execvp(path, argv.as_ptr()),
            LIST_LE => execve(path, argv.as_ptr(), word(i) as *const *const c_char),
            _ => execv(path, argv.as_ptr()),
        }
    }
}

#[cfg(target_arch = "x86_64")]
macro_rules! list_entry {
    ($name:ident, $kind:expr) => {
        /// A C-variadic exec (`execl(path, arg0, ..., NULL)`): see `exec_list`.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name(_path: *const c_char, _arg0: *const c_char) -> c_int {
            // Entry: rsp is 8 mod 16 (the return address); 56 bytes keep the call aligned.
            // The stack arguments start above the return address: entry rsp + 8.
            std::arch::naked_asm!(
                "sub rsp, 56",
                "mov [rsp], rdi",
                "mov [rsp + 8], rsi",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rcx",
                "mov [rsp + 32], r8",
                "mov [rsp + 40], r9",
                "mov rdi, rsp",
                "lea rsi, [rsp + 64]",
                "mov edx, {kind}",
                "call {f}",
                "add rsp, 56",
                "ret",
                kind = const $kind,
                f = sym exec_list,
            )
        }
    };
}

#[cfg(target_arch = "x86_64")]
list_entry!(execl, LIST_L);
#[cfg(target_arch = "x86_64")]
list_entry!(execlp, LIST_LP);
#[cfg(target_arch = "x86_64")]
list_entry!(execle, LIST_LE);

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    acts: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    unsafe { prepare(cpath(path), envp) };
    match real!("posix_spawn", SpawnFn) {
        // SAFETY: libc's posix_spawn with the caller's arguments.
        Some(f) => unsafe { f(pid, path, acts, attr, argv, envp) },
        None => libc::ENOSYS,
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    acts: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    unsafe { prepare_searched(file, envp) };
    match real!("posix_spawnp", SpawnFn) {
        // SAFETY: libc's posix_spawnp with the caller's arguments.
        Some(f) => unsafe { f(pid, file, acts, attr, argv, envp) },
        None => libc::ENOSYS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_static_from_dynamic_programs() {
        assert!(
            dynamic_target(Path::new("/bin/cat"), 0),
            "/bin/cat is dynamically linked"
        );
        // A script runs its interpreter.
        let dir = std::env::temp_dir().join(format!("slpre-exec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert!(dynamic_target(&script, 0));
        // An ELF without PT_INTERP.
        let mut elf = vec![0u8; 200];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[64..68].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD only
        assert_eq!(shape::program::elf_has_interp(&elf), Some(false));
        elf[64..68].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(shape::program::elf_has_interp(&elf), Some(true));
        // Truncated headers are "don't know", not a panic.
        assert_eq!(shape::program::elf_has_interp(&elf[..66]), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
