//! Sinks: outfile, stdout, pcapout, null.

use dataplane::{Args, Batch, Ctx, Filter, FilterError};
use pcap_file::pcap::{PcapHeader, PcapWriter, RawPcapPacket};
use pcap_file::{DataLink, Endianness, TsResolution};
use std::fs::File;
use std::io::{BufWriter, Write};

/// Writes block contents, back to back (optionally one per line).
pub struct Out {
    w: Box<dyn Write + Send>,
    newline: bool,
    what: String,
    /// Hand each batch on when it is written (standard output: a reader downstream sees
    /// blocks as they come, one write per batch, not when 8 KiB have gathered).
    flush_each_batch: bool,
}
impl Filter for Out {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        for t in &batch.tags {
            let Ok(d) = cx.data(t) else { continue };
            let ok =
                self.w.write_all(d).is_ok() && (!self.newline || self.w.write_all(b"\n").is_ok());
            if !ok {
                cx.warn(format!("cannot write to {}", self.what));
                cx.stop();
                return;
            }
        }
        if self.flush_each_batch && self.w.flush().is_err() {
            cx.warn(format!("cannot write to {}", self.what));
            cx.stop();
        }
    }
    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        if self.w.flush().is_err() {
            cx.warn(format!("cannot write to {}", self.what));
        }
    }
}

/// What went wrong writing a capture, with the system's own words for I/O errors (a full
/// disk says "No space left on device", not pcap-file's "Error reading bytes").
fn pcap_error(e: &pcap_file::PcapError) -> String {
    match e {
        pcap_file::PcapError::IoError(io) => io.to_string(),
        e => e.to_string(),
    }
}

/// Writes packets as a pcap file that tcpdump and Wireshark read. The file header is the
/// one the first packet came with (its capture's byte order, time precision, snap length
/// and link type, [`dataplane::CaptureHeader`]), so `pcapin | pcapout` gives the capture
/// back byte for byte; blocks that came from no capture file get a big-endian,
/// microsecond header with snap length 65535.
pub struct PcapOut {
    w: Option<PcapWriter<BufWriter<Box<dyn Write + Send>>>>,
    /// The file, or `-` for standard output (as `tcpdump -w -`).
    path: String,
    link: Option<u32>,
    /// The header's time precision and snap length.
    nanos: bool,
    snaplen: u32,
    /// Writing failed: nothing more is written (the run stops).
    failed: bool,
}

impl PcapOut {
    /// Create the file with the header block `t` came with.
    fn create(&mut self, cx: &mut Ctx<'_>, t: &dataplane::Tag) -> Result<(), String> {
        let link = cx.store.link(t).unwrap_or(1);
        self.link = Some(link);
        let mut header = PcapHeader {
            datalink: DataLink::from(link),
            ..Default::default()
        };
        // Only a block that is (part of) a capture's record has that capture's header: a
        // block made by a filter (inflate, gen) may lie in a ring that also holds records.
        if let Some(h) = cx.store.record(t).and(cx.store.capture(t)) {
            header.endianness = if h.big_endian {
                Endianness::Big
            } else {
                Endianness::Little
            };
            header.ts_resolution = if h.nanos {
                TsResolution::NanoSecond
            } else {
                TsResolution::MicroSecond
            };
            header.snaplen = h.snaplen;
        }
        self.nanos = header.ts_resolution == TsResolution::NanoSecond;
        self.snaplen = header.snaplen;
        let f: Box<dyn Write + Send> = if self.path == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(File::create(&self.path).map_err(|e| e.to_string())?)
        };
        self.w =
            Some(PcapWriter::with_header(BufWriter::new(f), header).map_err(|e| pcap_error(&e))?);
        Ok(())
    }
}

impl Filter for PcapOut {
    fn process(&mut self, cx: &mut Ctx<'_>, batch: &mut Batch) {
        if self.failed {
            return;
        }
        for t in &batch.tags {
            if cx.data(t).is_err() {
                continue;
            }
            if self.w.is_none() {
                if let Err(e) = self.create(cx, t) {
                    cx.warn(format!("cannot create {}: {e}", self.path));
                    cx.stop();
                    return;
                }
            }
            let len = t.len;
            // A whole record keeps its time and wire length; a cropped block its record's
            // time and its own length; a block made here (gen, an editor) has no capture
            // time and gets 0, so the file depends only on the blocks, never on when or
            // where they were written.
            let (ts, orig) = match cx.store.record(t) {
                Some((m, true)) => (m.ts_ns, m.orig_len.max(len)),
                Some((m, false)) => (m.ts_ns, len),
                None => (0, len),
            };
            if cx.store.link(t).unwrap_or(1) != self.link.unwrap_or(1) {
                cx.warn("packets of another link type than the first one were skipped");
                continue;
            }
            if self.snaplen > 0 && len > self.snaplen {
                cx.warn(format!(
                    "a block longer than the snap length {} was written whole (readers cut it to the snap length)",
                    self.snaplen
                ));
            }
            let Ok(ts_sec) = u32::try_from(ts / 1_000_000_000) else {
                cx.warn(
                    "a packet's time is past 2106 (a pcap record holds 32-bit seconds); skipped",
                );
                continue;
            };
            let ns = (ts % 1_000_000_000) as u32;
            let Ok(d) = cx.data(t) else { continue };
            let pkt = RawPcapPacket {
                ts_sec,
                ts_frac: if self.nanos { ns } else { ns / 1000 },
                incl_len: len,
                orig_len: orig,
                data: std::borrow::Cow::Borrowed(d),
            };
            if let Err(e) = self
                .w
                .as_mut()
                .expect("created above")
                .write_raw_packet(&pkt)
            {
                cx.warn(format!("cannot write {}: {}", self.path, pcap_error(&e)));
                // Nothing more can be written: drop the writer without a last flush.
                self.w = None;
                self.failed = true;
                cx.stop();
                return;
            }
        }
    }
    fn finish(&mut self, cx: &mut Ctx<'_>, _out: &mut Batch) {
        if let Some(w) = self.w.take() {
            if let Err(e) = w.into_writer().flush() {
                cx.warn(format!("cannot write {}: {e}", self.path));
                cx.stop();
            }
        }
    }
}

pub struct Null;
impl Filter for Null {
    fn process(&mut self, _cx: &mut Ctx<'_>, _b: &mut Batch) {}
}

pub(crate) fn make_outfile(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let path = a.require("file", Some(0))?;
    let mode_append = a.flag("append")?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(mode_append)
        .truncate(!mode_append)
        .open(path)
        .map_err(|e| FilterError::io(format!("cannot open {path}"), e))?;
    Ok(Box::new(Out {
        w: Box::new(BufWriter::new(f)),
        newline: a.flag("lines")?,
        what: path.to_string(),
        flush_each_batch: false,
    }))
}
pub(crate) fn make_stdout(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    Ok(Box::new(Out {
        w: Box::new(BufWriter::new(std::io::stdout())),
        newline: a.flag("lines")?,
        what: "standard output".into(),
        flush_each_batch: true,
    }))
}
pub(crate) fn make_pcapout(a: &Args) -> Result<Box<dyn Filter>, FilterError> {
    let path = a.require("file", Some(0))?.to_string();
    // Fail early if the file cannot be created; the header is written on the first packet
    // (its link type comes from the packets). `-` is standard output.
    if path != "-" {
        File::create(&path).map_err(|e| FilterError::io(format!("cannot create {path}"), e))?;
    }
    Ok(Box::new(PcapOut {
        w: None,
        path,
        link: None,
        nanos: false,
        snaplen: 0,
        failed: false,
    }))
}
pub(crate) fn make_null(_: &Args) -> Result<Box<dyn Filter>, FilterError> {
    Ok(Box::new(Null))
}

// The declarations of this file's filters are data in the catalog
// (`catalog::sinks::{OUTFILE, STDOUT, PCAPOUT, NULL}`); their constructors are below,
// paired with them in `filters::CONSTRUCTORS`.
