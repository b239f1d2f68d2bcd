//! Reading a tapped stream through PipesFS: one thread per open `all` (or `all.pcap`)
//! that owns an observer of the tap's rings and answers the kernel's reads and polls.
//!
//! Owns: turning tap records into the bytes a reader sees (raw blocks, or a pcap stream
//! with its file header first), blocking reads that end when data comes, the stream ends,
//! or the reading process is interrupted or gone, readiness for `poll`, and counting what
//! a slow reader lost. Does not own: the tap (the worker's, `dataplane::tap`), which node
//! and class a file means (`super`).

use beltway::{BufTable, IbufReader, Ready, RingRef, Start};
use fuser::{Errno, PollEvents, PollNotifier, ReplyData, ReplyPoll};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, TsResolution};
use protocol::tap::RecordHeader;
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a blocked read looks for data, the end, and its reader's signals.
const TICK: Duration = Duration::from_millis(20);

/// What the kernel asks of an open stream.
pub(super) enum Job {
    Read {
        size: usize,
        nonblock: bool,
        pid: u32,
        reply: ReplyData,
    },
    Poll {
        ph: PollNotifier,
        reply: ReplyPoll,
    },
}

/// Counters of a node's readers, shared with its `.stats`.
#[derive(Debug, Default)]
pub(super) struct ReaderStats {
    /// Blocks the node's readers lost (overwritten before they read them).
    pub lost: AtomicU64,
    /// Records the reader that read last was behind the writer when it did.
    pub backlog: AtomicU64,
    /// Blocks delivered to readers.
    pub delivered: AtomicU64,
}

/// The output format of a stream file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Raw,
    Pcap,
}

#[derive(Clone)]
struct Spool(Rc<RefCell<Vec<u8>>>);

impl Write for Spool {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One reader of a tap: its private position in the rings (an observer: the writer never
/// waits for it), the class it keeps (a class directory's `all`), what it owes from the
/// last record that did not fit a read, and its format.
struct Stream {
    r: IbufReader,
    class: Option<u16>,
    format: Format,
    /// Bytes made but not yet read (the rest of a record, or a pcap header).
    out: Rc<RefCell<Vec<u8>>>,
    pcap: Option<PcapWriter<Spool>>,
    /// The link type of a pcap stream (from its first record); other link types skip.
    link: Option<u16>,
    overruns: u64,
    /// Errors in a row (see `fill`).
    errors: u64,
    lost_seen: u64,
    stats: Arc<ReaderStats>,
    eof: bool,
}

/// Start the thread that serves one open stream; it ends when `jobs` is dropped (release).
pub(super) fn spawn(
    tags: &RingRef,
    data: &RingRef,
    first: bool,
    class: Option<u16>,
    format: Format,
    stats: Arc<ReaderStats>,
    jobs: Receiver<Job>,
) -> std::io::Result<()> {
    // The tap's first reader starts at its first record (everything since the tap went
    // on); later ones at the newest (what comes from now on).
    let r = observe(
        tags,
        data,
        if first { Start::Oldest } else { Start::Latest },
    )
    .map_err(std::io::Error::other)?;
    std::thread::Builder::new()
        .name("sl-pipesfs-read".into())
        .spawn(move || {
            let out = Rc::new(RefCell::new(Vec::new()));
            let mut s = Stream {
                r,
                class,
                format,
                out,
                pcap: None,
                link: None,
                overruns: 0,
                errors: 0,
                lost_seen: 0,
                stats,
                eof: false,
            };
            s.serve(jobs);
        })?;
    Ok(())
}

/// A tap read outside FUSE (the web view's sample of a node): the records since the tap
/// went on, as a pcap stream (its file header first; a header alone when none came), until
/// `max` records are in, `wait` has passed, or the stream ends. Returns the bytes and the
/// number of records in them. The same reader as a PipesFS `all.pcap` (an observer: the
/// run never waits for it; what it misses while behind is counted, not held).
pub(crate) fn sample_pcap(
    tags: &RingRef,
    data: &RingRef,
    max: u64,
    wait: Duration,
) -> std::io::Result<(Vec<u8>, u64)> {
    let r = observe(tags, data, Start::Oldest).map_err(std::io::Error::other)?;
    let stats = Arc::new(ReaderStats::default());
    let out = Rc::new(RefCell::new(Vec::new()));
    let mut s = Stream {
        r,
        class: None,
        format: Format::Pcap,
        out: out.clone(),
        pcap: None,
        link: None,
        overruns: 0,
        errors: 0,
        lost_seen: 0,
        stats: stats.clone(),
        eof: false,
    };
    let until = Instant::now() + wait;
    while stats.delivered.load(Ordering::Relaxed) < max && !s.eof {
        // One record at a time (a byte more than there is), so no more than `max` go in.
        let before = out.borrow().len();
        s.fill(before + 1);
        if out.borrow().len() > before || s.eof {
            continue;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if let Ok(Ready::Eof) | Err(_) = s.r.tags_mut().block(Some(left.min(TICK))) {
            s.eof = true;
        }
    }
    let n = stats.delivered.load(Ordering::Relaxed);
    let mut bytes = out.take();
    if bytes.is_empty() {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            snaplen: 262_144,
            endianness: pcap_file::Endianness::native(),
            ..Default::default()
        };
        PcapWriter::with_header(&mut bytes, header).map_err(std::io::Error::other)?;
    }
    Ok((bytes, n))
}

/// What one look at the next record found.
enum Step {
    /// A record: whether it was kept (its class, its link type).
    Record(bool),
    End,
    Overrun,
    Error(String),
}

/// An observer of a tap's rings (no control segment: it cannot hold the writer back).
fn observe(tags: &RingRef, data: &RingRef, start: Start) -> beltway::Result<IbufReader> {
    let mut table = BufTable::new();
    table.register(data)?;
    IbufReader::new(tags.reader(start)?, table)
}

impl Stream {
    fn serve(&mut self, jobs: Receiver<Job>) {
        let mut waiting: Option<PollNotifier> = None;
        loop {
            let job = if waiting.is_some() {
                match jobs.recv_timeout(TICK) {
                    Ok(j) => Some(j),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match jobs.recv() {
                    Ok(j) => Some(j),
                    Err(_) => return,
                }
            };
            match job {
                Some(Job::Read {
                    size,
                    nonblock,
                    pid,
                    reply,
                }) => self.read(size, nonblock, pid, reply),
                Some(Job::Poll { ph, reply }) => {
                    if self.ready() {
                        reply.poll(PollEvents::POLLIN | PollEvents::POLLRDNORM);
                    } else {
                        reply.poll(PollEvents::empty());
                        waiting = Some(ph);
                    }
                }
                None => {}
            }
            if waiting.is_some() && self.ready() {
                if let Some(ph) = waiting.take() {
                    let _ = ph.notify();
                }
            }
        }
    }

    /// Whether a read would return at once (data, or the end).
    fn ready(&mut self) -> bool {
        !self.out.borrow().is_empty()
            || self.eof
            || self.r.tags_mut().readable() > 0
            || self.r.tags().writer_died()
    }

    fn read(&mut self, size: usize, nonblock: bool, pid: u32, reply: ReplyData) {
        let mut last_check = Instant::now();
        loop {
            self.fill(size);
            let n = self.out.borrow().len().min(size);
            if n > 0 || self.eof {
                let mut out = self.out.borrow_mut();
                reply.data(&out[..n]);
                out.drain(..n);
                return;
            }
            if nonblock {
                reply.error(Errno::EAGAIN);
                return;
            }
            match self.r.tags_mut().block(Some(TICK)) {
                Ok(Ready::Eof) => self.eof = true,
                Ok(_) => {}
                Err(_) => self.eof = true,
            }
            // A reader blocked here cannot be interrupted by the kernel (the request is
            // already ours): answer EINTR when it has a signal to take, or is gone.
            if last_check.elapsed() >= TICK {
                last_check = Instant::now();
                if interrupted(pid) {
                    reply.error(Errno::EINTR);
                    return;
                }
            }
        }
    }

    /// Make up to `size` bytes of output from the records that are there, without waiting.
    fn fill(&mut self, size: usize) {
        loop {
            if self.out.borrow().len() >= size || self.eof {
                break;
            }
            if self.r.tags_mut().readable() == 0 {
                if self.r.tags().writer_died() {
                    self.eof = true;
                }
                break;
            }
            let before = self.out.borrow().len();
            let step = match self.r.peek_acquire() {
                Ok(Some((tag, p))) => {
                    if self.class.is_some_and(|c| c != tag.class) {
                        Step::Record(false)
                    } else if let Ok((h, block)) = RecordHeader::decode(p.data) {
                        // Copied out of the ring here; checked intact just below.
                        Step::Record(emit(
                            &self.out,
                            &mut self.pcap,
                            &mut self.link,
                            self.format,
                            &h,
                            block,
                        ))
                    } else {
                        Step::Record(false)
                    }
                }
                Ok(None) => Step::End,
                Err(beltway::Error::Overrun { .. }) => Step::Overrun,
                Err(e) => Step::Error(e.to_string()),
            };
            let kept = match step {
                Step::Record(kept) => kept,
                Step::End => {
                    self.eof = true;
                    break;
                }
                // A record overwritten before we got to it (its tag was consumed): lost.
                // A reader a whole data ring behind meets one per tag until it reaches
                // intact data; each look consumes a tag and is cheaper than the writer's
                // copy, so it catches up, keeping what is still intact (a tag ring lap the
                // reader skips by itself, counted).
                Step::Overrun => {
                    self.overruns += 1;
                    self.count_lost();
                    continue;
                }
                // Anything else consumed a tag too; only a long run of them with no record
                // between is taken as the end.
                Step::Error(why) => {
                    self.overruns += 1;
                    self.count_lost();
                    self.errors += 1;
                    if self.errors > 10_000 {
                        eprintln!("streamlined: pipesfs: a reader's stream ends after repeated errors: {why}");
                        self.eof = true;
                        break;
                    }
                    continue;
                }
            };
            self.errors = 0;
            match self.r.peek_complete() {
                Ok(()) => {
                    if kept {
                        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    // Overwritten while we copied it: take it back, count it lost.
                    self.out.borrow_mut().truncate(before);
                    self.overruns += 1;
                }
            }
            self.count_lost();
        }
        let t = self.r.tags().shared().stats();
        let behind =
            t.write_pos.saturating_sub(self.r.tags().position()) / beltway::Tag::SIZE as u64;
        self.stats.backlog.store(behind, Ordering::Relaxed);
    }

    fn count_lost(&mut self) {
        // The tag ring counts bytes lost; a tag is one block.
        let lost = self.r.tags().lost() / beltway::Tag::SIZE as u64 + self.overruns;
        if lost > self.lost_seen {
            self.stats
                .lost
                .fetch_add(lost - self.lost_seen, Ordering::Relaxed);
            self.lost_seen = lost;
        }
    }
}

/// Append one record to `out` in `format`; false if it was skipped.
fn emit(
    out: &Rc<RefCell<Vec<u8>>>,
    pcap: &mut Option<PcapWriter<Spool>>,
    link: &mut Option<u16>,
    format: Format,
    h: &RecordHeader,
    block: &[u8],
) -> bool {
    match format {
        Format::Raw => {
            out.borrow_mut().extend_from_slice(block);
            true
        }
        Format::Pcap => {
            if pcap.is_none() {
                let header = PcapHeader {
                    datalink: DataLink::from(h.link_type as u32),
                    ts_resolution: TsResolution::NanoSecond,
                    snaplen: 262_144,
                    endianness: pcap_file::Endianness::native(),
                    ..Default::default()
                };
                match PcapWriter::with_header(Spool(out.clone()), header) {
                    Ok(w) => *pcap = Some(w),
                    Err(_) => return false,
                }
                *link = Some(h.link_type);
            }
            if *link != Some(h.link_type) {
                return false;
            }
            let pkt = PcapPacket::new(
                Duration::from_nanos(h.ts_ns),
                h.orig_len.max(block.len() as u32),
                block,
            );
            pcap.as_mut().is_some_and(|w| w.write_packet(&pkt).is_ok())
        }
    }
}

/// Whether process `pid` has a signal pending that it does not block, or is gone.
fn interrupted(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    if status
        .lines()
        .any(|l| l.starts_with("State:") && (l.contains("zombie") || l.contains("dead")))
    {
        return true;
    }
    let pending = field("SigPnd:") | field("ShdPnd:");
    let blocked = field("SigBlk:");
    let ignored = field("SigIgn:");
    pending & !blocked & !ignored != 0 || pending & (1 << (libc::SIGKILL - 1)) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_pending_signals_is_not_interrupted_and_a_gone_one_is() {
        assert!(!interrupted(std::process::id()));
        // Pid numbers above the kernel's pid_max never exist.
        assert!(interrupted(u32::MAX - 1));
    }

    #[test]
    fn records_become_raw_bytes_or_a_pcap_stream_with_its_header_first() {
        let out = Rc::new(RefCell::new(Vec::new()));
        let (mut pcap, mut link) = (None, None);
        let h = RecordHeader {
            ts_ns: 1_500_000_000_000_000_123,
            orig_len: 60,
            link_type: 1,
        };
        assert!(emit(&out, &mut pcap, &mut link, Format::Raw, &h, b"abc"));
        assert_eq!(&out.borrow()[..], b"abc");
        out.borrow_mut().clear();
        assert!(emit(
            &out,
            &mut pcap,
            &mut link,
            Format::Pcap,
            &h,
            &[7u8; 42]
        ));
        let bytes = out.borrow().clone();
        // Nanosecond magic in the machine's byte order (as tcpdump writes), then one record
        // of 42 captured and 60 wire bytes.
        assert_eq!(&bytes[..4], &0xa1b2_3c4du32.to_ne_bytes());
        assert_eq!(bytes.len(), 24 + 16 + 42);
        let rec = &bytes[24..40];
        assert_eq!(
            u32::from_ne_bytes(rec[0..4].try_into().unwrap()),
            1_500_000_000
        );
        assert_eq!(u32::from_ne_bytes(rec[4..8].try_into().unwrap()), 123);
        assert_eq!(u32::from_ne_bytes(rec[8..12].try_into().unwrap()), 42);
        assert_eq!(u32::from_ne_bytes(rec[12..16].try_into().unwrap()), 60);
        // Another link type than the first is skipped.
        let other = RecordHeader {
            link_type: 113,
            ..h
        };
        assert!(!emit(
            &out,
            &mut pcap,
            &mut link,
            Format::Pcap,
            &other,
            b"x"
        ));
        assert_eq!(out.borrow().len(), 24 + 16 + 42);
    }
}
