//! What a daemon (or a run) killed with SIGKILL leaves behind, and taking it back: named
//! rings under /dev/shm whose writer is dead, and BPF maps pinned by runs that are gone.
//!
//! Owns: the sweep a starting daemon makes. Does not own: the rings' liveness test
//! (`beltway`: a ring records its writer's pid and start time) or the pins' layout
//! (`kernel::ebpf`, which removes stale pins when listing them).

/// Remove named Streamline rings whose writer died and pins of dead runs; returns what
/// was removed (paths), for the log.
pub fn sweep() -> Vec<String> {
    let mut gone = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/dev/shm") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("streamline.") {
                continue;
            }
            // A data ring goes with its tag ring (`NAME.data` beside `NAME`); a ring that
            // cannot be opened as one (torn, foreign) is left alone.
            let stale = match beltway::RingRef::open(&name) {
                Ok(r) => !r.writer().1,
                Err(_) => false,
            };
            if stale && std::fs::remove_file(e.path()).is_ok() {
                gone.push(e.path().display().to_string());
            }
        }
    }
    // Listing the pins removes those of dead runs.
    let before: Vec<_> = pin_dirs();
    let _ = filters::nicfix::pinned();
    for d in before {
        if !std::path::Path::new(&d).exists() {
            gone.push(d);
        }
    }
    gone
}

fn pin_dirs() -> Vec<String> {
    std::fs::read_dir(filters::nicfix::PIN_ROOT).map(|rd| rd.flatten().map(|e| e.path().display().to_string()).collect()).unwrap_or_default()
}
