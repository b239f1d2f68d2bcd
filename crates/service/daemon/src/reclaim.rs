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
        let names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("streamline."))
            .collect();
        for name in &names {
            // A ring's control segment (`NAME.ctl`) goes with it; a ring that cannot be
            // opened as one (torn, foreign) is left alone.
            if name.ends_with(".ctl") || young(name) {
                continue;
            }
            let stale = match beltway::RingRef::open(name) {
                Ok(r) => !r.writer().1,
                Err(_) => false,
            };
            if stale {
                for n in [name.clone(), format!("{name}.ctl")] {
                    let p = format!("/dev/shm/{n}");
                    if std::fs::remove_file(&p).is_ok() {
                        gone.push(p);
                    }
                }
            }
        }
        // Control segments whose ring is gone (its remover died between the two unlinks).
        for name in names.iter().filter(|n| n.ends_with(".ctl")) {
            let ring = name.trim_end_matches(".ctl");
            let p = format!("/dev/shm/{name}");
            if !std::path::Path::new(&format!("/dev/shm/{ring}")).exists()
                && std::fs::remove_file(&p).is_ok()
            {
                gone.push(p);
            }
        }
    }
    // Listing the pins removes those of dead runs.
    let before: Vec<_> = pin_dirs();
    let _ = kernel::ebpf::list_pinned();
    for d in before {
        if !std::path::Path::new(&d).exists() {
            gone.push(d);
        }
    }
    gone
}

/// Created in the last two seconds: possibly a ring another process is setting up (its
/// header, writer pid included, is written after the file is made), so not judged.
fn young(name: &str) -> bool {
    std::fs::metadata(format!("/dev/shm/{name}"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < std::time::Duration::from_secs(2))
}

fn pin_dirs() -> Vec<String> {
    std::fs::read_dir(kernel::ebpf::PIN_ROOT)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default()
}
