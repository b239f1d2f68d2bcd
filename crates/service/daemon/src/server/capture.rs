//! The shared capture: one `rx` per device (and direction) that subscribers of any user
//! share, started on the first subscription and stopped with the last; and the libpcap
//! options a reader asks for that the daemon acts on: the size of its share
//! (`pcap_set_buffer_size`), promiscuous mode and the direction.

use super::*;

/// A reader's libpcap options, as its `capture` request gives them.
pub(super) struct Options {
    pub snaplen: u32,
    /// Bytes of the reader's share (0: the default).
    pub buffer: u32,
    pub promisc: bool,
    /// `in`, `out` or empty (both).
    pub direction: String,
}

/// What the daemon holds for its readers' options: the socket that holds interfaces in
/// promiscuous mode (one PACKET_MR_PROMISC membership per promiscuous reader: the kernel
/// counts them, and the interface leaves promiscuous mode with the last), which
/// subscriptions hold one, and what each subscription's capture had lost when it began.
#[derive(Default)]
pub(super) struct Held {
    socket: Option<OwnedFd>,
    /// (run, subscription) -> interface index.
    promisc: BTreeMap<(u64, u64), u32>,
    /// (run, subscription) -> the run's sources' losses when it subscribed
    /// ([`Daemon::capture_stats`] counts from there).
    lost_at_start: BTreeMap<(u64, u64), u64>,
}

/// Bytes a frame takes in libpcap's capture ring for the reader's share: a full-sized
/// Ethernet frame (or the snap length, if shorter) and the ring's per-frame header
/// (tpacket3_hdr and sockaddr_ll), 16-byte aligned.
fn frame_slot(snaplen: u32) -> u32 {
    let keep = if snaplen == 0 {
        1514
    } else {
        snaplen.min(1514)
    };
    (keep + 68).div_ceil(16) * 16
}

/// The reader's tag ring for a share of `buffer` bytes (0: the default): as many tags as
/// the buffer would hold frames in libpcap's ring, a power of two. More than the shared
/// data ring holds cannot be anyone's share: refused, naming the size.
fn share_tags(device: &str, buffer: u32, snaplen: u32) -> Result<u32, Reply> {
    if buffer == 0 {
        return Ok(0);
    }
    let most = protocol::tap::DATA_BYTES;
    if buffer as usize > most {
        return Err(refuse(
            libc::EINVAL,
            format!("device {device}: a buffer of {buffer} bytes (pcap_set_buffer_size, tcpdump -B {}): a reader's share of the shared capture is at most {most} bytes (tcpdump -B {}), the capture's data ring", buffer / 1024, most / 1024),
        ));
    }
    Ok((buffer / frame_slot(snaplen)).max(1).next_power_of_two())
}

impl Daemon {
    /// `capture`: subscribe a legacy reader to an interface's shared capture (made on
    /// first use) or to a node of a run, with its filter program and options.
    pub(super) fn capture(
        self: &Arc<Self>,
        conn: u64,
        who: &Cred,
        device: &str,
        program: Vec<protocol::proto::BpfInsn>,
        wake: protocol::proto::Wake,
        o: Options,
    ) -> CallResult {
        if program.len() > 4096 {
            return Err(refuse(
                libc::EINVAL,
                format!(
                    "a filter program of {} instructions (at most 4096, BPF_MAXINSNS)",
                    program.len()
                ),
            ));
        }
        if !matches!(o.direction.as_str(), "" | "in" | "out") {
            return Err(refuse(
                libc::EINVAL,
                format!(
                    "device {device}: direction {:?}: expected in, out or nothing (both)",
                    o.direction
                ),
            ));
        }
        let filter = TapFilter {
            program,
            snaplen: o.snaplen,
            wake,
            tags: share_tags(device, o.buffer, o.snaplen)?,
        };
        // A run's stream has no interface to make promiscuous (asked for, it is nothing
        // to do, as libpcap's `any` device takes it) and no direction.
        if device.starts_with("streamline:") && !o.direction.is_empty() {
            return Err(refuse(
                libc::EINVAL,
                format!("device {device}: a run's stream has no direction (in or out)"),
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
                let key = capture_key(device, &o.direction);
                let g = lang::parse(&capture_pipeline(&key), &lang::WithPath(catalog::Natives))
                    .map_err(|d| refuse(libc::ENODEV, format!("device {device}: {d}")))?;
                self.cfg
                    .policy
                    .check(&g, who, &|f| catalog::find(f).and_then(|s| s.privilege))
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
                    self.shared_capture(&key)?,
                    "rx".to_string(),
                    link_type,
                    Some(key),
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
        if o.promisc && shared.is_some() {
            if let Err(why) = self.promisc_on(device, run, sub) {
                self.end_subscription(run, sub, shared.as_deref());
                return Err(refuse(
                    libc::EPERM,
                    format!("device {device}: promiscuous mode: {why}"),
                ));
            }
        }
        let lost = self.lost_by_sources(run);
        self.capture_opts
            .lock()
            .expect("not poisoned")
            .lost_at_start
            .insert((run, sub), lost);
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

    /// Put `device` in promiscuous mode for subscription `sub` of `run` (one more
    /// membership of the daemon's socket).
    fn promisc_on(&self, device: &str, run: u64, sub: u64) -> std::io::Result<()> {
        let ifindex = kernel::afpacket::ifindex(device)?;
        let mut held = self.capture_opts.lock().expect("not poisoned");
        if held.socket.is_none() {
            held.socket = Some(kernel::afpacket::membership_socket()?);
        }
        kernel::afpacket::promisc_membership(
            held.socket.as_ref().expect("made above"),
            ifindex,
            true,
        )?;
        held.promisc.insert((run, sub), ifindex);
        Ok(())
    }

    /// The membership of subscription `sub` of `run`, if it held one, dropped (the last
    /// one on an interface takes it out of promiscuous mode).
    fn promisc_off(&self, run: u64, sub: u64) {
        let mut held = self.capture_opts.lock().expect("not poisoned");
        let Some(ifindex) = held.promisc.remove(&(run, sub)) else {
            return;
        };
        if let Some(fd) = &held.socket {
            // An interface that went away took its memberships with it.
            let _ = kernel::afpacket::promisc_membership(fd, ifindex, false);
        }
        if held.promisc.is_empty() {
            held.socket = None;
        }
    }

    /// The run capturing `key` (a device, and a direction: [`capture_key`]) for legacy
    /// readers, started if there is none, with one more user counted.
    pub(super) fn shared_capture(self: &Arc<Self>, key: &str) -> Result<u64, Reply> {
        let device = key;
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

    /// What the sources of `run` lost before they could take it (the kernel's ring-full
    /// drops on its capture sockets), as of the worker's last counters.
    fn lost_by_sources(&self, run: u64) -> u64 {
        self.run(run).map_or(0, |r| {
            r.counters
                .lock()
                .expect("not poisoned")
                .1
                .iter()
                .map(|n| n.lost)
                .sum()
        })
    }

    /// `capture_stats`: what subscription `sub` of connection `conn` missed since it began
    /// because its capture's socket had no room (libpcap's kernel drops).
    pub(super) fn capture_stats(&self, conn: u64, sub: u64) -> CallResult {
        let run = self
            .subs
            .lock()
            .expect("not poisoned")
            .get(&conn)
            .and_then(|mine| mine.iter().find(|s| s.1 == sub).map(|s| s.0))
            .ok_or_else(|| {
                refuse(
                    libc::ENOENT,
                    format!("no subscription {sub} on this connection"),
                )
            })?;
        let start = self
            .capture_opts
            .lock()
            .expect("not poisoned")
            .lost_at_start
            .get(&(run, sub))
            .copied()
            .unwrap_or(0);
        let lost = self.lost_by_sources(run).saturating_sub(start);
        Ok((Reply::CaptureStats { lost }, vec![]))
    }

    pub(super) fn end_subscription(&self, run: u64, sub: u64, device: Option<&str>) {
        self.capture_opts
            .lock()
            .expect("not poisoned")
            .lost_at_start
            .remove(&(run, sub));
        self.untap(run, sub);
        self.promisc_off(run, sub);
        if let Some(dev) = device {
            self.release_capture(dev);
        }
    }
}

/// The key of a shared capture: the device, with `/in` or `/out` for a direction (no
/// interface name has a `/`).
fn capture_key(device: &str, direction: &str) -> String {
    match direction {
        "" => device.to_string(),
        d => format!("{device}/{d}"),
    }
}

/// The pipeline of the shared capture of `key` ([`capture_key`]): the device's frames,
/// tapped at `rx`. A direction is libpcap's `inbound`/`outbound` program, which the
/// kernel runs on the capture socket (placed there, `filters::live::kernel_placement`):
/// a packet is outgoing when its sll_pkttype is PACKET_OUTGOING, the test libpcap's
/// `pcap_setdirection` makes on Linux. `keep=readers`: the socket keeps only what the
/// readers want (the union of their programs, after the direction's), so that packets
/// nobody wants never leave the kernel (`null` wants nothing).
pub(super) fn capture_pipeline(key: &str) -> String {
    match key.split_once('/') {
        Some((device, "in")) => format!("rx dev={device} keep=readers | bpf \"inbound\" | null"),
        Some((device, _)) => format!("rx dev={device} keep=readers | bpf \"outbound\" | null"),
        None => format!("rx dev={key} keep=readers | null"),
    }
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
