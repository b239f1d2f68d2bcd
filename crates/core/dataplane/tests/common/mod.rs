//! The toy filters the spaces tests build graphs from.

use dataplane::{Args, Batch, Ctx, Factory, Filter, Tag};

/// `src N`: N blocks of 100 bytes (u32 sequence number first); `pass`; `boom K`: panics at
/// block K; `sink`: checks the sequence. `ghost N`: like `src`, but every other tag points
/// into a buffer that does not exist (id 9999), so it cannot be resolved.
struct Src {
    n: u32,
    seq: u32,
    ghost: bool,
}
impl Filter for Src {
    fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        while out.len() < max && self.seq < self.n {
            let mut b = [7u8; 100];
            b[..4].copy_from_slice(&self.seq.to_le_bytes());
            let t = cx.store.push(&b);
            let buf = if self.ghost && self.seq % 2 == 1 {
                9999
            } else {
                t.buf
            };
            out.push(Tag { class: 1, buf, ..t });
            self.seq += 1;
        }
        self.seq < self.n
    }
}
struct Pass;
impl Filter for Pass {
    fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
}
struct Boom(u32, u32);
impl Filter for Boom {
    fn process(&mut self, _: &mut Ctx<'_>, b: &mut Batch) {
        self.1 += b.len() as u32;
        if self.1 >= self.0 {
            panic!("boom after {} blocks", self.1);
        }
    }
}
struct Sink {
    next: u32,
}
impl Filter for Sink {
    fn process(&mut self, cx: &mut Ctx<'_>, b: &mut Batch) {
        for t in &b.tags {
            let d = cx.data(t).expect("resolvable");
            assert_eq!(d.len(), 100);
            assert_eq!(
                u32::from_le_bytes(d[..4].try_into().unwrap()),
                self.next,
                "in order, intact"
            );
            assert!(d[4..].iter().all(|&x| x == 7));
            self.next += 1;
        }
    }
    fn summary(&self) -> Option<String> {
        Some(format!("sink: {}", self.next))
    }
}

/// `idle`: a sink that takes nothing (like a published stream nobody subscribes to); the
/// runtime must not hand it blocks.
struct Idle;
impl Filter for Idle {
    fn accepts(&self) -> bool {
        false
    }
    fn process(&mut self, _: &mut Ctx<'_>, b: &mut Batch) {
        panic!("idle was handed {} blocks", b.len());
    }
}
/// `alone`: checks no block it gets is marked shared with another arc (write isolation
/// would copy shared ones), then passes them on.
struct Alone(u64);
impl Filter for Alone {
    fn process(&mut self, _: &mut Ctx<'_>, b: &mut Batch) {
        assert!(
            b.shared.iter().all(|s| !s),
            "a block was marked shared with an arc that takes nothing"
        );
        self.0 += b.len() as u64;
    }
    fn summary(&self) -> Option<String> {
        Some(format!("alone: {}", self.0))
    }
}

/// `slow`: sleeps a millisecond per batch (a consumer that falls behind).
struct Slow;
impl Filter for Slow {
    fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// `xsrc N`: like `src`, but its blocks live in memory lent by "another component" (an
/// External region, as rx's kernel ring), so a channel writes them through (copies).
#[derive(Debug)]
struct Lent(Vec<u8>);
impl dataplane::External for Lent {
    fn get(&self, pos: u64, len: usize) -> Option<&[u8]> {
        self.0.get(pos as usize..pos as usize + len)
    }
}
struct XSrc {
    n: u32,
    seq: u32,
    buf: dataplane::BufId,
}
impl Filter for XSrc {
    fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        if self.buf == 0 {
            self.buf = cx.store.add_external(Lent(vec![7u8; 100 * 256]));
        }
        while out.len() < max && self.seq < self.n {
            out.push(Tag {
                pos: (self.seq % 256) as u64 * 100,
                len: 100,
                buf: self.buf,
                class: 1,
            });
            self.seq += 1;
        }
        self.seq < self.n
    }
}

/// `odd`: a classifier (the library's `Classifier` adapter) that drops blocks with an even
/// sequence number (class 0) and gives the others class 1 + (seq & 2).
struct Odd;
impl dataplane::Classify for Odd {
    fn classify(&mut self, d: &[u8], _: &Tag) -> dataplane::Class {
        let seq = u32::from_le_bytes(d[..4].try_into().unwrap());
        if seq % 2 == 0 {
            0
        } else {
            1 + (seq & 2) as dataplane::Class
        }
    }
}
/// `every`: a classifier that passes every block with class 1.
struct Every;
impl dataplane::Classify for Every {
    fn classify(&mut self, _: &[u8], _: &Tag) -> dataplane::Class {
        1
    }
}

/// `tally`: counts the blocks it sees and hashes their sequence numbers in order (an
/// order-sensitive summary); `hold`: a pass-through declared to keep blocks across
/// batches (the factory says so), which may not move between spaces.
struct Tally(u64, u64);
impl Filter for Tally {
    fn process(&mut self, cx: &mut Ctx<'_>, b: &mut Batch) {
        for t in &b.tags {
            let d = cx.data(t).expect("resolvable");
            let seq = u32::from_le_bytes(d[..4].try_into().unwrap()) as u64;
            self.0 += 1;
            self.1 = self
                .1
                .wrapping_mul(1_000_003)
                .wrapping_add(seq ^ (t.class as u64) << 40);
        }
    }
    fn summary(&self) -> Option<String> {
        Some(format!("tally: {} blocks, hash {:016x}", self.0, self.1))
    }
}

pub struct F;
impl Factory for F {
    fn make(&self, name: &str, a: &Args) -> Result<Box<dyn Filter>, dataplane::FilterError> {
        Ok(match name {
            "src" | "ghost" => Box::new(Src {
                n: a.parse("n", Some(0), 10)?,
                seq: 0,
                ghost: name == "ghost",
            }),
            "pass" => Box::new(Pass),
            "boom" => Box::new(Boom(a.parse("at", Some(0), 1)?, 0)),
            "sink" => Box::new(Sink { next: 0 }),
            "idle" => Box::new(Idle),
            "slow" => Box::new(Slow),
            "xsrc" => Box::new(XSrc {
                n: a.parse("n", Some(0), 10)?,
                seq: 0,
                buf: 0,
            }),
            "alone" => Box::new(Alone(0)),
            "odd" => Box::new(dataplane::Classifier(Odd)),
            "every" => Box::new(dataplane::Classifier(Every)),
            "tally" => Box::new(Tally(0, 0)),
            "hold" => Box::new(Pass),
            _ => return Err(format!("no filter {name}").into()),
        })
    }
    fn is_source(&self, name: &str) -> bool {
        name == "src" || name == "xsrc" || name == "ghost"
    }
    fn keeps_blocks(&self, name: &str) -> bool {
        name == "hold"
    }
}

pub fn graph(text: &str) -> lang::Graph {
    let r = lang::StaticResolver::new()
        .native("src", &["n"])
        .native("pass", &[])
        .native("boom", &["at"])
        .native("sink", &[])
        .native("idle", &[])
        .native("alone", &[])
        .native("slow", &[])
        .native("xsrc", &["n"])
        .native("ghost", &["n"])
        .native("odd", &[])
        .native("every", &[])
        .native("tally", &[])
        .native("hold", &[]);
    lang::parse(text, &r).unwrap_or_else(|d| panic!("{d}"))
}
