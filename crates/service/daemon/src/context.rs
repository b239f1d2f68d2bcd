//! The client's context: what a run started from a shell inherits from it (working
//! directory, environment, umask, resource limits), gathered by `streamline run` for the
//! daemon ([`gather`]) and taken by the run's worker ([`take`]) right after it took the
//! client's identity, so that a run through the daemon behaves as the same run
//! stand-alone.
//!
//! Owns: which parts travel and how (`proto::ClientContext`), and applying them. In the
//! daemon's library because both ends link it: the command (`gather`) and the worker
//! (`streamline-worker`, `take`); the daemon itself only forwards the context.
//! The working directory travels as a descriptor (`O_PATH | O_DIRECTORY`, SCM_RIGHTS),
//! not as a path: it names the directory the client is in even if its path changed or
//! means something else in the daemon's mount namespace, and entering it is checked by
//! the kernel against the worker's (the client's) identity with no path to race on.

use crate::proto::{self, ClientContext, Limit};
use nix::sys::resource::Resource;
use std::fs::File;
use std::os::fd::OwnedFd;

/// Why the worker could not take its client's context.
#[derive(Debug)]
pub enum ContextError {
    /// The context sent is not one a shell could have (EINVAL).
    Invalid(String),
    /// The client may not enter its working directory (the kernel's answer to `fchdir`
    /// as the client).
    Cwd {
        path: String,
        uid: u32,
        errno: nix::errno::Errno,
    },
    /// A system call refused (`setrlimit`, ...).
    Os {
        what: String,
        errno: nix::errno::Errno,
    },
}

impl ContextError {
    /// The errno the daemon answers `open` with.
    pub fn errno(&self) -> i32 {
        match self {
            ContextError::Invalid(_) => libc::EINVAL,
            ContextError::Cwd { errno, .. } | ContextError::Os { errno, .. } => *errno as i32,
        }
    }
}

impl std::fmt::Display for ContextError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContextError::Invalid(why) => write!(f, "{why}"),
            ContextError::Cwd { path, uid, errno } => write!(
                f,
                "cannot enter the client's working directory {path} as uid {uid}: {errno}"
            ),
            ContextError::Os { what, errno } => write!(f, "{what}: {errno}"),
        }
    }
}

/// A resource limit's name (as `proto::LIMITS` has it) and the kernel's resource.
fn resource(name: &str) -> Option<Resource> {
    Some(match name {
        "CPU" => Resource::RLIMIT_CPU,
        "FSIZE" => Resource::RLIMIT_FSIZE,
        "DATA" => Resource::RLIMIT_DATA,
        "STACK" => Resource::RLIMIT_STACK,
        "CORE" => Resource::RLIMIT_CORE,
        "AS" => Resource::RLIMIT_AS,
        "NOFILE" => Resource::RLIMIT_NOFILE,
        "NPROC" => Resource::RLIMIT_NPROC,
        "MEMLOCK" => Resource::RLIMIT_MEMLOCK,
        "LOCKS" => Resource::RLIMIT_LOCKS,
        "SIGPENDING" => Resource::RLIMIT_SIGPENDING,
        "MSGQUEUE" => Resource::RLIMIT_MSGQUEUE,
        "NICE" => Resource::RLIMIT_NICE,
        "RTPRIO" => Resource::RLIMIT_RTPRIO,
        "RTTIME" => Resource::RLIMIT_RTTIME,
        _ => return None,
    })
}

/// This process's context, to send with `open`, and its working directory's descriptor.
/// The directory is opened through `/proc/self/cwd` with `O_PATH`, which needs no
/// permission on it: whether the run may enter it is the worker's to find out, as the
/// client.
pub fn gather() -> Result<(ClientContext, File), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let cwd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open("/proc/self/cwd")
        .map_err(|e| format!("cannot open the working directory (/proc/self/cwd): {e}"))?;
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    // umask(2) can only be read by setting it: set it back at once (no thread of ours
    // creates files meanwhile).
    let mask = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    nix::sys::stat::umask(mask);
    let limits = proto::LIMITS
        .iter()
        .filter_map(|name| {
            let (soft, hard) = nix::sys::resource::getrlimit(resource(name)?).ok()?;
            Some(Limit {
                resource: name.to_string(),
                soft,
                hard,
            })
        })
        .collect();
    Ok((
        ClientContext {
            cwd: true,
            env: Some(env),
            umask: Some(mask.bits()),
            limits,
        },
        cwd,
    ))
}

/// The environment a client that sent none gets: who it is and a default PATH.
fn minimal_env(uid: u32) -> Vec<(String, String)> {
    let mut env = vec![(
        "PATH".to_string(),
        "/usr/local/bin:/usr/bin:/bin".to_string(),
    )];
    if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        env.push(("HOME".into(), u.dir.to_string_lossy().into_owned()));
        env.push(("USER".into(), u.name.clone()));
        env.push(("LOGNAME".into(), u.name));
        env.push(("SHELL".into(), u.shell.to_string_lossy().into_owned()));
    }
    env
}

/// Take the client's context (the worker, right after it took the client's identity and
/// before it builds the run; no other thread of the worker reads the environment yet):
/// enter its working directory (as the client: the kernel checks), take its environment
/// (without the loader's variables, `proto::loader_env`) for the run, its Unix commands
/// and process spaces, its umask, and its resource limits, never above the daemon's hard
/// limits. `cwd`: the descriptor that came with `start` (None: `/`).
pub fn take(ctx: &ClientContext, cwd: Option<OwnedFd>, uid: u32) -> Result<(), ContextError> {
    use ContextError::{Invalid, Os};
    // Check everything before changing anything.
    if let Some(m) = ctx.umask.filter(|m| *m > 0o777) {
        return Err(Invalid(format!("umask {m:o} is not within 0..=777")));
    }
    let env = ctx.env.clone().unwrap_or_else(|| minimal_env(uid));
    if let Some((k, _)) = env
        .iter()
        .find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
    {
        return Err(Invalid(format!(
            "environment variable {k:?}: a name is not empty and has no '=' or NUL, a value no NUL"
        )));
    }
    let mut limits = Vec::new();
    for l in &ctx.limits {
        let r = resource(&l.resource).ok_or_else(|| {
            Invalid(format!(
                "unknown resource limit {:?} (known: {})",
                l.resource,
                proto::LIMITS.join(", ")
            ))
        })?;
        limits.push((r, l));
    }
    match (ctx.cwd, cwd) {
        (true, Some(fd)) => nix::unistd::fchdir(&fd).map_err(|errno| ContextError::Cwd {
            path: std::fs::read_link(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&fd)
            ))
            .map_or("?".into(), |p| p.display().to_string()),
            uid,
            errno,
        })?,
        (true, None) => {
            return Err(Invalid(
                "context.cwd, but no directory descriptor came".into(),
            ))
        }
        (false, _) => nix::unistd::chdir("/").map_err(|errno| Os {
            what: "chdir /".into(),
            errno,
        })?,
    }
    for (k, _) in std::env::vars_os() {
        std::env::remove_var(k);
    }
    for (k, v) in env.iter().filter(|(k, _)| !proto::loader_env(k)) {
        std::env::set_var(k, v);
    }
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(
        ctx.umask.unwrap_or(0o022) as libc::mode_t,
    ));
    for (r, l) in limits {
        let (_, hard_now) = nix::sys::resource::getrlimit(r).map_err(|errno| Os {
            what: format!("getrlimit {}", l.resource),
            errno,
        })?;
        // Only lower: never above the daemon's hard limit.
        let hard = l.hard.min(hard_now);
        let soft = l.soft.min(hard);
        nix::sys::resource::setrlimit(r, soft, hard).map_err(|errno| Os {
            what: format!("setrlimit {} {soft} {hard}", l.resource),
            errno,
        })?;
    }
    Ok(())
}
