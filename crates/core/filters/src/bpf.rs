//! `bpf "pcap-filter expression"`: libpcap's filter language, compiled by libpcap itself
//! to classic BPF and run by the `kernel` crate's interpreter on each frame, so it works
//! after any source (capture files, other filters). The kernel implementation (the same
//! program attached to a capture socket) joins it with live capture.

use dataplane::{Args, Batch, Ctx, Filter, FilterError};
use kernel::cbpf::{compile, compile_for_file, Program};

pub struct Bpf {
    /// Its side is the kernel ([`lang::Side::Kernel`]): the program already ran on the
    /// capture socket; pass everything.
    in_kernel: bool,
    prog: PerLink,
}

/// A pcap-filter expression compiled per link type seen (frames of each link type need
/// their own program): Ethernet's compiled as for a live capture, the others as for a
/// capture file. The `bpf` filter runs it, and so does `ips`'s header stage when it is
/// not on the capture socket.
pub(crate) struct PerLink {
    expr: String,
    /// Per link type, its program; None where the expression does not compile for it.
    progs: Vec<(u32, Option<Program>)>,
    /// What a frame of a link type the expression does not compile for gets: refused
    /// with a warning (`bpf`), or accepted in silence (`ips`'s header stage, which may
    /// only ever keep more than the rules need).
    accept_uncompiled: bool,
}

impl PerLink {
    /// Compiled for Ethernet now, so a bad expression is a build error, not a runtime one.
    pub(crate) fn new(expr: &str) -> Result<PerLink, kernel::cbpf::BpfError> {
        let p = compile(expr, crate::packet::LINKTYPE_ETHERNET, 262144)?;
        Ok(PerLink {
            expr: expr.to_string(),
            progs: vec![(crate::packet::LINKTYPE_ETHERNET, Some(p))],
            accept_uncompiled: false,
        })
    }

    /// As [`PerLink::new`], but frames of a link type the expression does not compile
    /// for are accepted, without a warning.
    pub(crate) fn superset(expr: &str) -> Result<PerLink, kernel::cbpf::BpfError> {
        Ok(PerLink {
            accept_uncompiled: true,
            ..PerLink::new(expr)?
        })
    }

    /// Whether the program accepts the block `t`; a block of a link type the expression
    /// cannot be compiled for, or whose data is gone, is refused (the first error of
    /// each link type is warned about).
    pub(crate) fn accepts(&mut self, cx: &mut Ctx<'_>, t: &dataplane::Tag) -> bool {
        let link = cx.store.link(t).unwrap_or(crate::packet::LINKTYPE_ETHERNET);
        let i = match self.progs.iter().position(|p| p.0 == link) {
            Some(i) => i,
            // Frames of other link types come from capture files (live capture is
            // Ethernet): compiled as libpcap compiles for reading a file.
            None => {
                let p = match compile_for_file(&self.expr, link) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        if !self.accept_uncompiled {
                            cx.warn(format!(
                                "for link type {link}: {e}; those frames are dropped"
                            ));
                        }
                        None
                    }
                };
                self.progs.push((link, p));
                self.progs.len() - 1
            }
        };
        let Some(prog) = &self.progs[i].1 else {
            return self.accept_uncompiled;
        };
        let Ok(data) = cx.store.data(t) else {
            return false;
        };
        // The wire length of a whole captured frame; a cropped block is its own length.
        let wire = match cx.store.record(t) {
            Some((r, true)) if r.orig_len >= data.len() as u32 => r.orig_len,
            _ => data.len() as u32,
        };
        prog.run(data, wire) != 0
    }
}

pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let expr = a.require("expr", Some(0))?;
    let prog = PerLink::new(expr).map_err(|e| FilterError::invalid("", e))?;
    let in_kernel = a.place.side.as_ref().is_some_and(lang::Side::is_kernel);
    Ok(Box::new(Bpf { in_kernel, prog }))
}

impl Filter for Bpf {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.in_kernel {
            return;
        }
        for i in 0..batch.tags.len() {
            // The headers of a packet a few ahead start on their way into the cache.
            if let Some(u) = batch.tags.get(i + PREFETCH_AHEAD) {
                cx.store
                    .prefetch(u.buf, u.pos as usize, u.pos as usize + 64);
            }
            let ok = self.prog.accepts(cx, &batch.tags[i]);
            batch.tags[i].class = ok as u16;
        }
    }
}

/// Packets ahead of the one being filtered whose first bytes are prefetched.
const PREFETCH_AHEAD: usize = 4;

// The declarations of this file's filters are data in the catalog (`catalog::bpf::BPF`);
// their constructors are below, paired with them in `filters::CONSTRUCTORS`.
