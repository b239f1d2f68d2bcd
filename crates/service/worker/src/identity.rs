//! The worker holds what its client holds, and nothing more: the identity check and the
//! sockets the daemon lent it (`kernel::lend`).

use daemon::proto;

/// Check that this worker runs as its client holds it (issue 33): the daemon executed it
/// with the client's real, effective and saved ids and groups, no capability in any set
/// and `no_new_privs` (`daemon::spawn`), so every file the run opens, every socket it
/// binds and every command it starts is checked by the kernel against the client's
/// rights. A root client's worker keeps root. Refuses to run when the demotion did not
/// take, rather than run with more than the client has.
pub fn assume(uid: u32, gid: u32, groups: &[u32]) -> Result<(), String> {
    if uid == 0 {
        return Ok(());
    }
    let r = nix::unistd::getresuid().map_err(|e| format!("getresuid: {e}"))?;
    let g = nix::unistd::getresgid().map_err(|e| format!("getresgid: {e}"))?;
    let ids = [r.real.as_raw(), r.effective.as_raw(), r.saved.as_raw()];
    let gids = [g.real.as_raw(), g.effective.as_raw(), g.saved.as_raw()];
    if ids != [uid; 3] || gids != [gid; 3] {
        return Err(format!(
            "the worker runs with uids {ids:?} and gids {gids:?}, not the client's {uid}/{gid}"
        ));
    }
    let mut mine: Vec<u32> = nix::unistd::getgroups()
        .map_err(|e| format!("getgroups: {e}"))?
        .iter()
        .map(|g| g.as_raw())
        .collect();
    let mut want = groups.to_vec();
    mine.sort_unstable();
    want.sort_unstable();
    mine.dedup();
    want.dedup();
    if mine != want {
        return Err(format!(
            "the worker has groups {mine:?}, not the client's {want:?}"
        ));
    }
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    for (key, want) in [
        ("CapInh:", "0000000000000000"),
        ("CapPrm:", "0000000000000000"),
        ("CapEff:", "0000000000000000"),
        ("CapAmb:", "0000000000000000"),
        ("CapBnd:", "0000000000000000"),
        ("NoNewPrivs:", "1"),
    ] {
        let got = status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .unwrap_or("?");
        if got != want {
            return Err(format!("the worker's {key} is {got}, not {want}"));
        }
    }
    Ok(())
}

/// The sockets the daemon lent this run (`kernel::lend`): a non-root client's worker
/// takes its privileged sockets from there only, and its graph passes place on them only
/// the filters locked there already.
pub fn take_lent(uid: u32, lent: Vec<proto::LentSocket>) -> Result<(), String> {
    if uid == 0 {
        return Ok(());
    }
    let lent = lent
        .into_iter()
        .map(|l| {
            let kind = kernel::lend::Kind::parse(&l.kind)
                .ok_or_else(|| format!("a lent socket of kind {:?}", l.kind))?;
            Ok((
                kernel::lend::Described {
                    kind,
                    dev: l.dev,
                    filter: l.filter,
                },
                l.fd,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    kernel::lend::install(lent).map_err(|e| format!("the lent sockets: {e}"))
}
