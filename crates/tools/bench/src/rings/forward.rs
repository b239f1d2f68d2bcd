//! Experiment 2 (thesis Figure 4.4, "when cached"): forwarding blocks unmodified from
//! ring A to an output stream, by copy or by splicing.
//!
//! - copy: `Reader::read` from A into a buffer, then `Writer::write` into byte ring B
//!   (two copies; the Unix way);
//! - peek+write: `Reader::peek_acquire` in A, `Writer::write` of the borrowed bytes into B
//!   (one copy);
//! - splice: `Reader::peek_acquire` in A, `IbufWriter::write` of the borrowed bytes into an
//!   IBuf that has A registered, which stores only a 16-byte tag (no copy).
//!
//! One process, one thread (CPU 0), in batches: fill A (untimed), forward the batch (timed,
//! identically for every method), then drain and check the output (untimed) — for splicing
//! by resolving every tag back to its bytes in A, which proves the tags are right. Rings are
//! cache-sized so the comparison is the thesis' "cached" case.
//!
//! The figures `splice_vs_copy_*` are ours vs ours: splicing over peek+write, the competent
//! way to forward through Beltway without splicing (one copy, what a filter that writes its
//! input out does); the two-copy read+write path is shown in the table only.

use super::transfer::{prefault, WRITER_CPU};
use crate::pattern::Blocks;
use crate::util::{err, fmt_size, pin, Plan, Result, Summary, Target, Verify, GIB, KIB, MIB};
use beltway::{BufTable, IbufReader, IbufWriter, Layout, Reader, RingConfig, Start, Tag, Writer};

/// Size of ring A and of the output ring B: one batch.
const RING_SIZE: usize = 2 * MIB;
const BLOCKS: [(usize, u64); 2] = [(KIB, GIB as u64), (64 * KIB, 4 * GIB as u64)];
const QUICK_DIV: u64 = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Copy,
    PeekWrite,
    Splice,
}

impl Method {
    const ALL: [Method; 3] = [Method::Copy, Method::PeekWrite, Method::Splice];
    fn label(self) -> &'static str {
        match self {
            Method::Copy => "copy (read+write)",
            Method::PeekWrite => "peek+write (1 copy)",
            Method::Splice => "splice (peek+tag)",
        }
    }
}

pub fn run(plan: &Plan, summary: &mut Summary) -> Result<()> {
    println!("\n== 2. Zero-copy forwarding, ring A -> output, cached (thesis Fig 4.4) ==");
    println!("A and B: {} SRP byte rings; IBuf: tag ring with A registered; one thread, batches of one ring-full", fmt_size(RING_SIZE as u64));
    println!("MB/s of forwarded payload, forwarding time only (best run)");
    println!(
        "{:>7} {:>20} {:>20} {:>20} {:>18}",
        "block",
        Method::Copy.label(),
        Method::PeekWrite.label(),
        Method::Splice.label(),
        "splice/peek+write"
    );
    for (block, base) in BLOCKS {
        let base = if plan.quick { base / QUICK_DIV } else { base };
        let bytes = plan.volume(base, block, Verify::Stamps);
        print!("{:>7}", fmt_size(block as u64));
        let mut rate = [0.0; 3];
        for (i, m) in Method::ALL.into_iter().enumerate() {
            rate[i] = plan
                .measure(|v| forward(m, block, plan.volume(base, block, v), v))?
                .mbps(bytes);
            print!(" {:>20.0}", rate[i]);
        }
        // Against the one-copy peek+write, not the two-copy read+write.
        let ratio = rate[2] / rate[1];
        println!(" {ratio:>17.2}x");
        let name = format!("splice_vs_copy_{}", fmt_size(block as u64));
        let note = format!(
            "ours vs ours: splice {:.0} MB/s vs peek+write (one copy) {:.0} MB/s (read+write {:.0})",
            rate[2], rate[1], rate[0]
        );
        let target = (block == 64 * KIB).then_some(Target::AtLeast(3.0));
        summary.add(&name, ratio, target, note);
    }
    Ok(())
}

/// Where forwarded blocks go, with the reader that drains and checks them.
#[allow(clippy::large_enum_variant)] // one per run, never moved in the loop
enum Output {
    Ring { w: Writer, r: Reader },
    Ibuf { w: IbufWriter, r: IbufReader },
}

/// Forward `bytes` of `block`-sized blocks from a fresh ring A with `method`; returns the
/// seconds spent forwarding.
fn forward(method: Method, block: usize, bytes: u64, verify: Verify) -> Result<f64> {
    pin(WRITER_CPU)?;
    let per_batch = (RING_SIZE / block) as u64;
    let mut a = Writer::create("fwd-a", RingConfig::bytes(RING_SIZE))?;
    prefault(&mut a)?;
    let mut a_r = a.ring().reader(Start::Oldest)?;
    let mut out = output(method, &a, per_batch)?;
    let (mut gen, mut reference) = (Blocks::new(block), Blocks::new(block));
    let mut buf = vec![0u8; block];
    let total = bytes / block as u64;
    let mut forward_ns = 0;
    let mut seq = 0;
    while seq < total {
        let k = per_batch.min(total - seq);
        for j in 0..k {
            a.write(gen.block(seq + j))?;
        }
        let t0 = beltway::sys::now_ns();
        for _ in 0..k {
            match (&mut out, method) {
                (Output::Ring { w, .. }, Method::Copy) => {
                    let n = a_r.read(&mut buf)?;
                    expect_len(n, block)?;
                    w.write(&buf)?;
                }
                (Output::Ring { w, .. }, _) => {
                    let p = a_r
                        .peek_acquire(block)?
                        .ok_or_else(|| err("ring A ended early"))?;
                    expect_len(p.data.len(), block)?;
                    w.write(p.data)?;
                    a_r.peek_complete()?;
                }
                (Output::Ibuf { w, .. }, _) => {
                    let p = a_r
                        .peek_acquire(block)?
                        .ok_or_else(|| err("ring A ended early"))?;
                    expect_len(p.data.len(), block)?;
                    w.write(p.data)?;
                    a_r.peek_complete()?;
                }
            }
        }
        forward_ns += beltway::sys::now_ns() - t0;
        drain_and_check(&mut out, &mut reference, seq, k, verify)?;
        seq += k;
    }
    if let Output::Ibuf { w, .. } = &out {
        if w.spliced != total || w.copied != 0 {
            return Err(err(format!(
                "splicing: {} of {total} blocks spliced, {} copied",
                w.spliced, w.copied
            )));
        }
    }
    Ok(forward_ns as f64 / 1e9)
}

/// A byte ring B, or an IBuf (tags only, no default DBuf: it can only splice) with A
/// registered, sized for one batch; plus a reader for each.
fn output(method: Method, a: &Writer, per_batch: u64) -> Result<Output> {
    if method != Method::Splice {
        let mut w = Writer::create(
            "fwd-b",
            RingConfig {
                buf_id: 2,
                ..RingConfig::bytes(RING_SIZE)
            },
        )?;
        prefault(&mut w)?;
        let r = w.ring().reader(Start::Oldest)?;
        return Ok(Output::Ring { w, r });
    }
    let tag_bytes = (per_batch as usize * Tag::SIZE)
        .next_power_of_two()
        .max(4096);
    let tags = Writer::create(
        "fwd-ibuf",
        RingConfig {
            buf_id: 3,
            ..RingConfig::bytes(tag_bytes)
        }
        .layout(Layout::Tags),
    )?;
    let mut w = IbufWriter::new(tags)?;
    w.register(&a.ring())?;
    let mut table = BufTable::new();
    table.register(&a.ring())?;
    let r = IbufReader::new(w.ring().reader(Start::Oldest)?, table)?;
    Ok(Output::Ibuf { w, r })
}

/// Read the `k` blocks forwarded in this batch from the output and check them (for the IBuf,
/// through the tags, in ring A).
fn drain_and_check(
    out: &mut Output,
    reference: &mut Blocks,
    seq: u64,
    k: u64,
    verify: Verify,
) -> Result<()> {
    let block = reference.len();
    for j in 0..k {
        match out {
            Output::Ring { r, .. } => {
                let p = r
                    .peek_acquire(block)?
                    .ok_or_else(|| err("output ring ended early"))?;
                reference.check(p.data, seq + j, verify)?;
                r.peek_complete()?;
            }
            Output::Ibuf { r, .. } => {
                let tag = r.read_tag()?.ok_or_else(|| err("IBuf ended early"))?;
                let data = r.table().resolve(&tag)?;
                reference.check(data, seq + j, verify)?;
            }
        }
    }
    Ok(())
}

fn expect_len(n: usize, block: usize) -> Result<()> {
    if n != block {
        return Err(err(format!(
            "ring A returned {n} bytes where a {block}-byte block was expected"
        )));
    }
    Ok(())
}
