//! Thread spaces: placement, blocks crossing, and a space that dies (a panicking filter)
//! stopping the run with a report that names it.

use dataplane::channel::ChannelConfig;
use dataplane::spaces::{place, SpaceKind, Spaces};
use dataplane::{Args, Batch, Ctx, Factory, Filter, Tag};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// `src N`: N blocks of 100 bytes (u32 sequence number first); `pass`; `boom K`: panics at
/// block K; `sink`: checks the sequence.
struct Src {
    n: u32,
    seq: u32,
}
impl Filter for Src {
    fn process(&mut self, _: &mut Ctx<'_>, _: &mut Batch) {}
    fn pull(&mut self, cx: &mut Ctx<'_>, out: &mut Batch, max: usize) -> bool {
        while out.len() < max && self.seq < self.n {
            let mut b = [7u8; 100];
            b[..4].copy_from_slice(&self.seq.to_le_bytes());
            out.push(Tag { class: 1, ..cx.store.push(&b) });
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
            assert_eq!(u32::from_le_bytes(d[..4].try_into().unwrap()), self.next, "in order, intact");
            assert!(d[4..].iter().all(|&x| x == 7));
            self.next += 1;
        }
    }
    fn summary(&self) -> Option<String> {
        Some(format!("sink: {}", self.next))
    }
}

struct F;
impl Factory for F {
    fn make(&self, name: &str, a: &Args) -> Result<Box<dyn Filter>, String> {
        Ok(match name {
            "src" => Box::new(Src { n: a.parse("n", Some(0), 10)?, seq: 0 }),
            "pass" => Box::new(Pass),
            "boom" => Box::new(Boom(a.parse("at", Some(0), 1)?, 0)),
            "sink" => Box::new(Sink { next: 0 }),
            _ => return Err(format!("no filter {name}")),
        })
    }
    fn is_source(&self, name: &str) -> bool {
        name == "src"
    }
}

fn graph(text: &str) -> lang::Graph {
    let r = lang::StaticResolver::new().native("src", &["n"]).native("pass", &[]).native("boom", &["at"]).native("sink", &[]);
    lang::parse(text, &r).unwrap_or_else(|d| panic!("{d}"))
}

#[test]
fn placement_rule() {
    let g = graph("src 5 | pass space=2 | pass | sink space=p3");
    let p = place(&g).unwrap();
    assert_eq!(p.space, vec![0, 2, 2, 3]);
    assert_eq!(p.kind(2), SpaceKind::Thread);
    assert_eq!(p.kind(3), SpaceKind::Process);
    let g = graph("src 5 | pass @background | sink");
    let p = place(&g).unwrap();
    assert_eq!(p.space, vec![0, 1, 1]);
}

#[test]
fn blocks_cross_thread_spaces_in_order_and_intact() {
    let g = graph("src 100000 | pass space=1 | pass space=2 | sink");
    let spaces = Spaces::build(&g, &F, 1 << 20, ChannelConfig { data: 1 << 16, slots: 256, ..Default::default() }).unwrap();
    assert_eq!(spaces.channels, 2);
    let rep = spaces.run(&AtomicBool::new(false), |_| {});
    assert!(rep.died.is_none() && !rep.failed, "{:?} {:?}", rep.died, rep.warnings);
    let sink = rep.nodes.iter().find(|n| n.label == "sink@2").expect("sink reported");
    assert_eq!(sink.summary.as_deref(), Some("sink: 100000"));
}

#[test]
fn a_panicking_space_stops_the_run_and_is_named() {
    // An endless source feeding a space that dies: the run must still end.
    let g = graph("src 4000000000 | pass | boom at=5000 space=1 | sink");
    let spaces = Spaces::build(&g, &F, 1 << 20, ChannelConfig::default()).unwrap();
    let t0 = Instant::now();
    let rep = spaces.run(&AtomicBool::new(false), |_| {});
    assert!(t0.elapsed() < Duration::from_secs(30));
    let died = rep.died.expect("the death is reported");
    assert!(died.contains("space 1 (boom, sink) died: boom after"), "{died}");
    assert!(rep.failed);
}
