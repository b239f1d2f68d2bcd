//! `bpf "pcap-filter expression"`: libpcap's filter language, compiled by libpcap itself
//! to classic BPF and run by the `kernel` crate's interpreter on each frame, so it works
//! after any source (capture files, other filters). The kernel implementation (the same
//! program attached to a capture socket) joins it with live capture.

use dataplane::{
    Args, Batch, Ctx, Filter, FilterError,
};
use kernel::cbpf::{compile, compile_for_file, Program};

pub struct Bpf {
    expr: String,
    /// Its side is the kernel ([`lang::Side::Kernel`]): the program already ran on the
    /// capture socket; pass everything.
    in_kernel: bool,
    /// The program per link type seen (frames of each link type need their own):
    /// Ethernet's compiled as for a live capture, the others as for a capture file.
    progs: Vec<(u32, Program)>,
}

pub(crate) fn make(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let expr = a.require("expr", Some(0))?.to_string();
    // Compile once now so a bad expression is a build error, not a runtime one.
    let p = compile(&expr, crate::packet::LINKTYPE_ETHERNET, 262144)
        .map_err(|e| FilterError::invalid("", e))?;
    let in_kernel = a.place.side.as_ref().is_some_and(lang::Side::is_kernel);
    Ok(Box::new(Bpf {
        expr,
        in_kernel,
        progs: vec![(crate::packet::LINKTYPE_ETHERNET, p)],
    }))
}

impl Filter for Bpf {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.in_kernel {
            return;
        }
        for i in 0..batch.tags.len() {
            // The headers of a packet a few ahead start on their way into the cache.
            if let Some(u) = batch.tags.get(i + PREFETCH_AHEAD) {
                cx.store.prefetch(u.buf, u.pos as usize, u.pos as usize + 64);
            }
            let t = &mut batch.tags[i];
            let link = cx.store.link(t).unwrap_or(crate::packet::LINKTYPE_ETHERNET);
            let prog = match self.progs.iter().position(|p| p.0 == link) {
                Some(i) => &self.progs[i].1,
                // Frames of other link types come from capture files (live capture is
                // Ethernet): compiled as libpcap compiles for reading a file.
                None => match compile_for_file(&self.expr, link) {
                    Ok(p) => {
                        self.progs.push((link, p));
                        &self.progs.last().expect("just pushed").1
                    }
                    Err(e) => {
                        cx.warn(format!(
                            "for link type {link}: {e}; those frames are dropped"
                        ));
                        t.class = 0;
                        continue;
                    }
                },
            };
            let Ok(data) = cx.store.data(t) else {
                t.class = 0;
                continue;
            };
            // The wire length of a whole captured frame; a cropped block is its own length.
            let wire = match cx.store.record(t) {
                Some((r, true)) if r.orig_len >= data.len() as u32 => r.orig_len,
                _ => data.len() as u32,
            };
            t.class = (prog.run(data, wire) != 0) as u16;
        }
    }
}

/// Packets ahead of the one being filtered whose first bytes are prefetched.
const PREFETCH_AHEAD: usize = 4;

// The declarations of this file's filters are data in the catalog (`catalog::bpf::BPF`);
// their constructors are below, paired with them in `filters::CONSTRUCTORS`.

