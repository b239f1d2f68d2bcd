//! `streamlined`: the Streamline daemon. See the library's documentation (`daemon`) and
//! ARCHITECTURE.md "The daemon".

use clap::Parser;
use daemon::policy::Policy;
use daemon::server::{Config, Daemon};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

#[derive(Parser)]
#[command(
    name = "streamlined",
    version,
    about = "The Streamline daemon: runs shared by many users, over a control socket"
)]
struct Args {
    /// The control socket.
    #[arg(long, default_value = daemon::proto::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Stay in the foreground (the only mode: a service manager or `&` backgrounds it);
    /// accepted for the usual daemon command line.
    #[arg(long)]
    foreground: bool,
    /// The access-control policy (TOML; see `daemon::policy`). Without one, unprivileged
    /// users may run no filter that needs a privilege (raw capture, transmission).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The worker program that runs each pipeline, `streamline-worker __worker` (default:
    /// next to this program).
    #[arg(long)]
    worker: Option<PathBuf>,
    /// Most connections of unprivileged users at once, all users together (root's are
    /// not counted, nor ever refused); per user, the policy's `connections_per_user`.
    #[arg(long, default_value_t = 256)]
    max_clients: usize,
    /// Where to mount PipesFS, the live graph as a filesystem.
    #[arg(long, default_value = daemon::pipesfs::DEFAULT_MOUNT)]
    mount: PathBuf,
    /// Serve no PipesFS.
    #[arg(long)]
    no_mount: bool,
    /// Serve the web view and Prometheus metrics on this address (off by default; keep it
    /// on loopback, `127.0.0.1:PORT`: sessions come from `streamline web`, a one-time token
    /// per user; `:0` picks a free port, which the log names).
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Where `--http` writes the scrape token for `/metrics` (mode 0600, root's; it sees
    /// every run). Default: `metrics.token` beside the socket.
    #[arg(long, value_name = "PATH")]
    metrics_token: Option<PathBuf>,
}

fn main() -> ExitCode {
    // This program started again as PipesFS's mount guard (daemon::pipesfs::guard).
    if let Ok(dev) = std::env::var(daemon::pipesfs::guard::ENV) {
        return daemon::pipesfs::guard::run(&dev);
    }
    let a = Args::parse();
    let _ = a.foreground;
    let policy = match &a.policy {
        Some(p) => match Policy::load(p, &catalog::Natives) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("streamlined: error: {e}");
                return ExitCode::from(2);
            }
        },
        None => Policy::default(),
    };
    for w in policy.warnings() {
        eprintln!("streamlined: warning: {w}");
    }
    let worker = a
        .worker
        .clone()
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(|d| d.join(daemon::spawn::WORKER)))
        })
        .unwrap_or_else(|| daemon::spawn::WORKER.into());
    if !worker.exists() {
        eprintln!("streamlined: error: the worker program {} does not exist (--worker PATH names the `streamline-worker` program; `cargo build -p worker` builds it)", worker.display());
        return ExitCode::from(2);
    }
    for gone in daemon::reclaim::sweep() {
        eprintln!("streamlined: reclaimed {gone} (left by a run that died)");
    }
    if let Some(dir) = a.socket.parent() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("streamlined: error: cannot create {}: {e}", dir.display());
            return ExitCode::from(1);
        }
    }
    // A socket file left by a daemon that died: replace it, but never steal a live one.
    if a.socket.exists() {
        if std::os::unix::net::UnixStream::connect(&a.socket).is_ok() {
            eprintln!(
                "streamlined: error: another daemon answers on {}",
                a.socket.display()
            );
            return ExitCode::from(1);
        }
        let _ = std::fs::remove_file(&a.socket);
    }
    let listener = match std::os::unix::net::UnixListener::bind(&a.socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "streamlined: error: cannot listen on {}: {e}",
                a.socket.display()
            );
            return ExitCode::from(1);
        }
    };
    // Every local user may connect; what each may do is decided per call.
    let _ = std::fs::set_permissions(&a.socket, std::fs::Permissions::from_mode(0o666));
    let d = Daemon::new(Config {
        socket: a.socket.clone(),
        policy,
        worker,
        max_clients: a.max_clients,
        hello_timeout: std::time::Duration::from_secs(10),
    });
    if let Some(addr) = a.http {
        if !addr.ip().is_loopback() {
            eprintln!("streamlined: warning: the web view listens on {addr}, beyond loopback: anyone who can reach it may try tokens (sessions still need one from `streamline web`)");
        }
        let token = a.metrics_token.clone().unwrap_or_else(|| {
            a.socket
                .parent()
                .unwrap_or(std::path::Path::new("/"))
                .join("metrics.token")
        });
        match daemon::web::start(&d, addr, &token) {
            Ok(w) => eprintln!(
                "streamlined: web view on http://{} (`streamline web` opens a session; /metrics takes the bearer token in {})",
                w.addr(),
                token.display()
            ),
            Err(e) => {
                eprintln!("streamlined: error: {e}");
                return ExitCode::from(1);
            }
        }
    }
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let _ = signal_hook::flag::register(sig, d.quit.clone());
    }
    // PipesFS: unmounted when `fs` is dropped (at exit), or by its guard process if the
    // daemon is killed (daemon::pipesfs::guard).
    let fs = if a.no_mount {
        None
    } else {
        match daemon::pipesfs::mount(d.clone(), &a.mount) {
            Ok(s) => {
                eprintln!("streamlined: PipesFS mounted on {}", a.mount.display());
                let guard = match daemon::pipesfs::guard::start(&a.mount) {
                    Ok(g) => Some(g),
                    Err(e) => {
                        eprintln!("streamlined: no guard for the PipesFS mount ({e}): if this daemon is killed, `fusermount3 -u -z {}` may be needed", a.mount.display());
                        None
                    }
                };
                Some((s, guard))
            }
            Err(e) => {
                eprintln!("streamlined: error: cannot mount PipesFS on {}: {e} (needs /dev/fuse and fusermount3, package fuse3; --no-mount runs without it)", a.mount.display());
                return ExitCode::from(1);
            }
        }
    };
    eprintln!(
        "streamlined: listening on {} (policy: {})",
        a.socket.display(),
        a.policy.as_ref().map_or(
            "none: no raw capture for unprivileged users".to_string(),
            |p| p.display().to_string()
        )
    );
    let r = d.serve(listener);
    if let Some((session, guard)) = fs {
        drop(session);
        daemon::pipesfs::unmount(&a.mount);
        // Told after the unmount: it finds nothing to do and exits.
        drop(guard);
    }
    let _ = std::fs::remove_file(&a.socket);
    let _ = d.quit.load(Ordering::Relaxed);
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("streamlined: error: {e}");
            ExitCode::from(1)
        }
    }
}
