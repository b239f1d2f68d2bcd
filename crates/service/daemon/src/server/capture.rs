//! The shared capture: one `rx` per device that subscribers of any user share, started on
//! the first subscription and stopped with the last.

use super::*;

impl Daemon {
    /// `capture`: subscribe a legacy reader to an interface's shared capture (made on
    /// first use) or to a node of a run, with its filter program.
    pub(super) fn capture(
        self: &Arc<Self>,
        conn: u64,
        who: &Cred,
        device: &str,
        filter: TapFilter,
    ) -> CallResult {
        if filter.program.len() > 4096 {
            return Err(refuse(
                libc::EINVAL,
                format!(
                    "a filter program of {} instructions (at most 4096, BPF_MAXINSNS)",
                    filter.program.len()
                ),
            ));
        }
        let (run, node, link_type, shared) = match device.strip_prefix("streamline:") {
            Some(rest) => {
                let bad = || {
                    refuse(libc::ENODEV, format!("device {device}: expected streamline:RUN/NODE (a run's number and a node's label, as `streamline ps` and PipesFS show them)"))
                };
                let (r, node) = rest.split_once('/').ok_or_else(bad)?;
                let id: u64 = r.parse().map_err(|_| bad())?;
                let r = self
                    .run(id)
                    .ok_or_else(|| refuse(libc::ENODEV, format!("device {device}: no run {id}")))?;
                let mode = r.graph.lock().expect("not poisoned").1;
                if !may_read_mode(r.owner.uid, r.owner.gid, mode, who) {
                    return Err(refuse(libc::EACCES, format!("device {device}: run {id}'s streams are uid {}'s with mode {mode:04o}: uid {} may not read them", r.owner.uid, who.uid)));
                }
                (id, node.to_string(), 1, None)
            }
            None => {
                let link_type = interface_link_type(device)?;
                let g = lang::parse(&capture_pipeline(device), &lang::WithPath(filters::Natives))
                    .map_err(|d| refuse(libc::ENODEV, format!("device {device}: {d}")))?;
                self.cfg
                    .policy
                    .check(&g, who, &|f| filters::find(f).and_then(|s| s.privilege))
                    .map_err(|d| {
                        refuse(
                            libc::EPERM,
                            format!(
                                "you don't have permission to capture on {device}: {}",
                                d.why
                            ),
                        )
                    })?;
                (
                    self.shared_capture(device)?,
                    "rx".to_string(),
                    link_type,
                    Some(device.to_string()),
                )
            }
        };
        // A capture run just activated may not be running yet: ask again for a moment.
        let until = Instant::now() + Duration::from_secs(10);
        let (sub, fds) = loop {
            match self.tap(run, &node, Some(&filter)) {
                Ok(a) => break a,
                Err((libc::EBUSY, _)) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err((errno, why)) => {
                    if let Some(dev) = &shared {
                        self.release_capture(dev);
                    }
                    return Err(refuse(errno, format!("device {device}: {why}")));
                }
            }
        };
        self.subs
            .lock()
            .expect("not poisoned")
            .entry(conn)
            .or_default()
            .push((run, sub, shared));
        Ok((
            Reply::Captured {
                sub,
                link_type,
                fds: fds.len() as u32,
            },
            fds,
        ))
    }

    /// The run capturing `device` for legacy readers, started if there is none, with one
    /// more user counted.
    pub(super) fn shared_capture(self: &Arc<Self>, device: &str) -> Result<u64, Reply> {
        let mut caps = self.captures.lock().expect("not poisoned");
        if let Some((run, users)) = caps.get_mut(device) {
            if self.run(*run).is_some_and(|r| r.state() == State::Running) {
                *users += 1;
                return Ok(*run);
            }
        }
        // The daemon's own run (root's): a capture readers share, as detached as a service.
        let root = Cred::of(0, 0);
        let opts = RunOptions {
            quiet: true,
            no_share: true,
            ..RunOptions::default()
        };
        let (reply, _) = self.open(
            0,
            &root,
            capture_pipeline(device),
            opts,
            0,
            vec![],
            Default::default(),
        )?;
        let Reply::Opened { run, .. } = reply else {
            return Err(refuse(libc::EIO, "the capture run did not open"));
        };
        let r = self
            .run(run)
            .ok_or_else(|| refuse(libc::EIO, format!("the capture run {run} ended at once")))?;
        activate(&r, 0, true)?;
        caps.insert(device.to_string(), (run, 1));
        Ok(run)
    }

    /// One user of `device`'s shared capture fewer; the last stops it.
    pub(super) fn release_capture(&self, device: &str) {
        let mut caps = self.captures.lock().expect("not poisoned");
        if let Some((run, users)) = caps.get_mut(device) {
            *users = users.saturating_sub(1);
            if *users == 0 {
                let run = *run;
                caps.remove(device);
                if let Some(r) = self.run(run) {
                    audit::stopped(
                        r.owner.uid,
                        run,
                        &r.pipeline,
                        0,
                        "the last reader of the shared capture left",
                    );
                    let _ = r.tell(ToWorker::Stop { signal: 0 });
                }
            }
        }
    }

    pub(super) fn end_subscription(&self, run: u64, sub: u64, device: Option<&str>) {
        self.untap(run, sub);
        if let Some(dev) = device {
            self.release_capture(dev);
        }
    }
}

/// The pipeline of an interface's shared capture: the device's frames, tapped at `rx`.
pub(super) fn capture_pipeline(device: &str) -> String {
    format!("rx dev={device} | null")
}

/// The pcap LINKTYPE of what `rx` captures on `device` (Ethernet framing: Ethernet
/// devices and loopback), or why the device cannot be served (ENODEV: there is none;
/// ENOTSUP: framing `rx` does not give, for the caller to hand to the real libpcap).
pub(super) fn interface_link_type(device: &str) -> Result<u32, Reply> {
    if device.is_empty() || device.len() > 15 || device.contains('/') || device.starts_with('.') {
        return Err(refuse(
            libc::ENODEV,
            format!("no such device {device:?} (an interface name has 1 to 15 characters, no '/')"),
        ));
    }
    let ty = std::fs::read_to_string(format!("/sys/class/net/{device}/type")).map_err(|_| {
        refuse(
            libc::ENODEV,
            format!("no such device {device} (not in /sys/class/net)"),
        )
    })?;
    match ty.trim() {
        // ARPHRD_ETHER, ARPHRD_LOOPBACK: Ethernet headers (DLT_EN10MB).
        "1" | "772" => Ok(1),
        t => Err(refuse(libc::ENOTSUP, format!("device {device} has link type ARPHRD {t}; streamline captures Ethernet-framed devices"))),
    }
}
