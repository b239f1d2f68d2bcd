//! Many readers' classic BPF programs, coalesced (thesis 7.5, issue 35): their union, one
//! program for the capture socket, so that packets no reader wants never leave the kernel
//! ([`union`]), a program that runs only on what another accepted ([`and_then`]: a
//! capture's direction before its readers' union), and every reader's verdict in one pass
//! that does what the programs have in common once ([`Merged`]).
//!
//! Owns: laying programs one after another in one program with the same verdicts, and
//! merging programs into one decision structure. Does not own: attaching a program
//! (`afpacket::attach_classic`), nor which readers there are. Safe Rust.
//!
//! # How programs are laid end to end
//!
//! Each program keeps its instructions one for one, so its conditional jumps (8-bit
//! offsets, only ever inside the program) are untouched; only its returns change:
//! `ret #0` (reject) becomes a jump (`ja`, 32-bit offset) to what comes after the program,
//! `ret #k` (k > 0) becomes the block's accept, and `ret A` jumps to a three-instruction
//! trailer that tests A (`jeq #0`) and takes the reject or the accept way. A and X are set
//! to 0 before each program after the first (a program may read them before it sets them,
//! and the kernel starts it with both 0); the scratch words need nothing: the kernel
//! refuses any program that loads one before it stores it on every path, so no program
//! reads what an earlier one left there.
//!
//! The union accepts with [`ACCEPT`] (the whole frame): each reader's own verdict, and so
//! its own cut, is computed afterwards in user space on the frame the kernel kept, and a
//! program's verdict on a frame cut shorter than its own program's return would differ
//! from the kernel's on the whole frame (a load past the cut rejects).

use crate::cbpf::{taken, Insn, Op, Program, Regs};
use std::collections::HashMap;

/// What the union returns for a packet some program accepts: keep the whole frame (the
/// kernel keeps at most the frame).
pub const ACCEPT: u32 = u32::MAX;
/// The kernel's limit on a classic program's length (BPF_MAXINSNS).
pub const MAXINSNS: usize = 4096;

// Opcodes (linux/filter.h).
const RET_K: u16 = 0x06;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const LD_IMM: u16 = 0x00;
const LDX_IMM: u16 = 0x01;

/// Where a program's verdict leads in the laid-out whole.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Then {
    /// On to the next program (the instruction after this program's block).
    Next,
    /// `ret #ACCEPT`.
    Accept,
    /// `ret #0`.
    Reject,
}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// The guard before instruction `ins` of a program that uses scratch word `free` nowhere:
/// instructions that go on (fall through to `ins`) iff `ins` cannot fail on the packet,
/// else take `ja REJECT` (k = [`REJECT`], resolved by [`lay`]). In the kernel a load
/// outside the packet or a division by X = 0 ends the whole program with 0, which, laid
/// end to end, would also end every program after it; guarded, only this one rejects. The
/// filter's packet is the whole frame (`len`), so a load fails iff it reads past `len`.
fn guard(ins: &Insn, free: Option<u32>) -> Result<Vec<Insn>, ()> {
    let c = ins.code;
    let size = match c & 0x18 {
        0x00 => 4,
        0x08 => 2,
        _ => 1,
    };
    let reject = insn(JA, 0, 0, REJECT);
    let ld_len = insn(0x80, 0, 0, 0);
    Ok(match (c & 0x07, c & 0xe0) {
        // The kernel's ancillary data (SKF_AD_OFF + n: the packet type, the protocol...):
        // no packet bytes, never fails.
        (0x00, 0x20) if ins.k >= SKF_AD_OFF => Vec::new(),
        // Other negative offsets (from the network or link header, SKF_NET_OFF,
        // SKF_LL_OFF): not guarded here; such a program is not laid with others.
        (0x00, 0x20 | 0x40) if (ins.k as i32) < 0 => return Err(()),
        // ld [k]: A is overwritten by the load, so free to use.
        (0x00, 0x20) => match ins.k.checked_add(size) {
            Some(need) => vec![ld_len, insn(0x35, 1, 0, need), reject],
            None => vec![reject],
        },
        // ld [x + k]: len >= X, then len - X >= k + size.
        (0x00, 0x40) => match ins.k.checked_add(size) {
            Some(need) => vec![
                ld_len,
                insn(0x3d, 1, 0, 0), // jge x
                reject,
                insn(0x1c, 0, 0, 0), // sub x
                insn(0x35, 1, 0, need),
                reject,
            ],
            None => vec![reject],
        },
        // ldx 4*([k]&0xf): A is live; kept in the free scratch word.
        (0x01, 0xa0) => {
            let t = free.ok_or(())?;
            match ins.k.checked_add(1) {
                Some(need) => vec![
                    insn(0x02, 0, 0, t), // st M[t]
                    ld_len,
                    insn(0x35, 1, 0, need),
                    reject,
                    insn(0x60, 0, 0, t), // ld M[t]
                ],
                None => vec![reject],
            }
        }
        // div x, mod x: X = 0 ends the program.
        (0x04, _) if matches!(c & 0xf0, 0x30 | 0x90) && c & 0x08 != 0 => {
            let t = free.ok_or(())?;
            vec![
                insn(0x02, 0, 0, t), // st M[t]
                insn(0x87, 0, 0, 0), // txa
                insn(JEQ_K, 0, 1, 0),
                reject,
                insn(0x60, 0, 0, t), // ld M[t]
            ]
        }
        _ => Vec::new(),
    })
}

/// Where the kernel's ancillary loads begin (linux/filter.h SKF_AD_OFF, -0x1000).
const SKF_AD_OFF: u32 = 0xffff_f000;

/// In a guard, `ja` to the program's reject ([`guard`]).
const REJECT: u32 = u32::MAX;

/// A scratch word `prog` never uses, if any.
fn free_word(prog: &[Insn]) -> Option<u32> {
    (0..16u32).find(|&w| {
        !prog.iter().any(|i| {
            let mem = matches!(i.code & 0x07, 0x02 | 0x03)
                || matches!(i.code & 0x07, 0x00 | 0x01) && i.code & 0xe0 == 0x60;
            mem && i.k == w
        })
    })
}

/// Lay `prog` (a validated program) at the end of `out`, its accepts leading to `accept`
/// and its rejects (its returns of 0, and what would fail in the kernel: [`guard`]) to
/// `reject`. Its conditional jumps keep their targets, their offsets grown by the guards
/// between; `Err` when one no longer fits in 8 bits, or a guard needs a scratch word and
/// the program uses all sixteen.
fn lay(out: &mut Vec<Insn>, prog: &[Insn], accept: Then, reject: Then) -> Result<(), ()> {
    let s = out.len();
    let free = free_word(prog);
    let guards: Vec<Vec<Insn>> = prog
        .iter()
        .map(|i| guard(i, free))
        .collect::<Result<_, _>>()?;
    // Where each instruction's guard begins (jumps to it land there), and the
    // instruction itself, relative to `s`.
    let mut start = Vec::with_capacity(prog.len() + 1);
    let mut at = 0;
    for g in &guards {
        start.push(at);
        at += g.len() + 1;
    }
    let n = at;
    start.push(n);
    let ret_a = prog
        .iter()
        .any(|i| i.code & 0x07 == RET_K && i.code & 0x18 == 0x10);
    let trailer = s + n;
    let end = trailer + if ret_a { 3 } else { 0 };
    let act = |at: usize, then: Then| match then {
        Then::Next => insn(JA, 0, 0, (end - at - 1) as u32),
        Then::Accept => insn(RET_K, 0, 0, ACCEPT),
        Then::Reject => insn(RET_K, 0, 0, 0),
    };
    // The reject way from a guard: a return, or a jump past the block.
    for (i, (ins, g)) in prog.iter().zip(&guards).enumerate() {
        for gi in g {
            let at = out.len();
            out.push(if gi.code == JA && gi.k == REJECT {
                act(at, reject)
            } else {
                *gi
            });
        }
        let at = out.len();
        let to = |off: u32| s + start[i + 1 + off as usize] - at - 1;
        out.push(if ins.code & 0x07 == 0x05 {
            if ins.code & 0xf0 == 0 {
                insn(JA, 0, 0, to(ins.k) as u32)
            } else {
                let (jt, jf) = (to(ins.jt as u32), to(ins.jf as u32));
                if jt > 255 || jf > 255 {
                    return Err(());
                }
                Insn {
                    jt: jt as u8,
                    jf: jf as u8,
                    ..*ins
                }
            }
        } else if ins.code & 0x07 != RET_K {
            *ins
        } else if ins.code & 0x18 == 0x10 {
            // ret A: to the trailer, which tests A.
            insn(JA, 0, 0, (trailer - at - 1) as u32)
        } else if ins.k == 0 {
            act(at, reject)
        } else {
            act(at, accept)
        });
    }
    if ret_a {
        // A == 0: reject (trailer + 2); else accept (trailer + 1).
        out.push(insn(JEQ_K, 1, 0, 0));
        out.push(act(trailer + 1, accept));
        out.push(act(trailer + 2, reject));
    }
    Ok(())
}

/// A and X to 0, as the kernel starts a program.
fn reset(out: &mut Vec<Insn>) {
    out.push(insn(LD_IMM, 0, 0, 0));
    out.push(insn(LDX_IMM, 0, 0, 0));
}

/// One program that accepts a packet (with [`ACCEPT`]) iff one of `programs` (validated
/// classic programs) accepts it, for the capture socket. `None` when it must accept
/// everything: a reader without a filter (an empty program), or a union longer than the
/// kernel takes ([`MAXINSNS`]) or one whose jumps no longer fit ([`lay`]). No programs: a program that rejects everything. Equal
/// programs are laid once.
pub fn union(programs: &[&[Insn]]) -> Option<Vec<Insn>> {
    if programs.iter().any(|p| p.is_empty()) {
        return None;
    }
    let mut distinct: Vec<&[Insn]> = Vec::new();
    for p in programs {
        if !distinct.contains(p) {
            distinct.push(p);
        }
    }
    let mut out = Vec::new();
    for (i, p) in distinct.iter().enumerate() {
        if i > 0 {
            reset(&mut out);
        }
        lay(&mut out, p, Then::Accept, Then::Next).ok()?;
        if out.len() >= MAXINSNS {
            return None;
        }
    }
    out.push(insn(RET_K, 0, 0, 0));
    Some(out)
}

/// One program that runs `then` on what `first` accepts and rejects what `first` rejects
/// (a capture's own program, e.g. its direction, before its readers' union); its verdict is
/// `then`'s. `None` when it would be longer than the kernel takes.
pub fn and_then(first: &[Insn], then: &[Insn]) -> Option<Vec<Insn>> {
    let mut out = Vec::new();
    lay(&mut out, first, Then::Next, Then::Reject).ok()?;
    reset(&mut out);
    out.extend_from_slice(then);
    (out.len() <= MAXINSNS).then_some(out)
}

/// The verdicts of several programs in one pass (thesis 7.5's shared filter prefix, made
/// general): the programs merged into one decision structure in which what they have in
/// common is done once per packet.
///
/// Two programs in the same state (A, X, scratch) that are at the same operation (the same
/// opcode and constant; their jump offsets may differ) come out of it in the same state and
/// take the same branch; so the programs are run together, as a set of (program, pc) that
/// share one state: the set is split by the operation each member is at, each part does its
/// operation once, and each member moves to its own next instruction (its own jump targets).
/// Parts only ever split, so a packet costs one operation per distinct part and step,
/// instead of one per program and step: for libpcap's programs, which all begin with the
/// same tests of the link and network headers, most of the work. The structure is built
/// once (per set of readers), a part being a node reached from its set of members
/// (memoized: the same set is the same node wherever it is reached, so it is a DAG). Where
/// a packet takes two parts of one split, the second starts from a copy of the state.
/// A structure that would grow past [`Merged::MAX_NODES`] is not built: the programs then
/// run one after another.
#[derive(Debug)]
pub struct Merged {
    /// Verdict slots (the programs, in the order given).
    programs: Vec<Program>,
    nodes: Vec<Node>,
    forks: Vec<Fork>,
    /// Per fork: its one part when it has one and no returns (then the run goes straight
    /// on to that node), else `u32::MAX`.
    direct: Vec<u32>,
    /// The fork the packet starts at (every program at its first instruction); `None`:
    /// the programs run one by one.
    root: Option<u32>,
    /// Parts still to run on this packet, with their state (reused between packets).
    stack: Vec<(u32, Regs)>,
}

/// One operation done once for a part's members.
#[derive(Debug)]
enum Node {
    /// Neither jump nor return; then `next`.
    Step { op: Op, next: u32 },
    /// A conditional jump; `t` if taken, else `f`.
    Test { op: Op, t: u32, f: u32 },
}

/// A set of (program, pc) in one state, resolved: the members that return here (the
/// verdict of each: its constant, or A), and the parts the others split into.
#[derive(Debug, Default)]
struct Fork {
    rets: Vec<(u32, Ret)>,
    parts: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
enum Ret {
    K(u32),
    A,
}

impl Merged {
    /// The most nodes a merged structure may have.
    pub const MAX_NODES: usize = 1 << 14;
    /// The longest program merged (libpcap's usual programs have tens of instructions).
    pub const MAX_MERGED_LEN: usize = 512;

    /// Merge `programs` (validated). Each program's verdict goes to its index in
    /// [`Merged::run`]'s `out`.
    pub fn new(programs: &[Program]) -> Merged {
        let mut m = Merged {
            programs: programs.to_vec(),
            nodes: Vec::new(),
            forks: Vec::new(),
            direct: Vec::new(),
            root: None,
            stack: Vec::new(),
        };
        // Building recurses once per instruction along a path: long programs run alone.
        if programs
            .iter()
            .any(|p| p.ops().len() > Self::MAX_MERGED_LEN)
        {
            return m;
        }
        let mut memo = HashMap::new();
        let start: Vec<(u32, usize)> = (0..programs.len() as u32).map(|p| (p, 0)).collect();
        m.root = m.fork(start, &mut memo);
        if m.root.is_none() {
            m.nodes.clear();
            m.forks.clear();
        }
        m.direct = m
            .forks
            .iter()
            .map(|f| match (&f.rets[..], &f.parts[..]) {
                ([], [one]) => *one,
                _ => u32::MAX,
            })
            .collect();
        m
    }

    /// Whether the programs are merged (else they run one after another: a structure too
    /// big).
    pub fn merged(&self) -> bool {
        self.root.is_some()
    }

    /// Nodes of the merged structure: operations a packet may cost, at most.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The fork for members `set` (sharing one state), built if new; `None` past
    /// [`Merged::MAX_NODES`].
    fn fork(
        &mut self,
        mut set: Vec<(u32, usize)>,
        memo: &mut HashMap<Vec<(u32, usize)>, u32>,
    ) -> Option<u32> {
        // Unconditional jumps are only a change of pc: taken here, once.
        for (p, pc) in set.iter_mut() {
            while let Op::Ja(k) = self.programs[*p as usize].ops()[*pc] {
                *pc += 1 + k as usize;
            }
        }
        set.sort_unstable();
        set.dedup();
        if let Some(&f) = memo.get(&set) {
            return Some(f);
        }
        let mut fork = Fork::default();
        // Members at the same operation, in the order first seen.
        let mut parts: Vec<(Op, Vec<(u32, usize)>)> = Vec::new();
        for &(p, pc) in &set {
            match self.programs[p as usize].ops()[pc] {
                Op::RetK(k) => fork.rets.push((p, Ret::K(k))),
                Op::RetA => fork.rets.push((p, Ret::A)),
                op => {
                    let key = same_operation(op);
                    match parts.iter_mut().find(|(o, _)| same_operation(*o) == key) {
                        Some((_, m)) => m.push((p, pc)),
                        None => parts.push((op, vec![(p, pc)])),
                    }
                }
            }
        }
        for (op, members) in parts {
            if self.nodes.len() >= Self::MAX_NODES {
                return None;
            }
            let node = self.nodes.len() as u32;
            // A placeholder until its successors are built (they come after it).
            self.nodes.push(Node::Step { op, next: 0 });
            self.nodes[node as usize] = match op {
                Op::Jmp(_, _, _, _, _) => {
                    let (mut t, mut f) = (Vec::new(), Vec::new());
                    for &(p, pc) in &members {
                        let Op::Jmp(_, _, _, jt, jf) = self.programs[p as usize].ops()[pc] else {
                            unreachable!("a part shares its operation")
                        };
                        t.push((p, pc + 1 + jt as usize));
                        f.push((p, pc + 1 + jf as usize));
                    }
                    Node::Test {
                        op,
                        t: self.fork(t, memo)?,
                        f: self.fork(f, memo)?,
                    }
                }
                _ => Node::Step {
                    op,
                    next: self.fork(members.iter().map(|&(p, pc)| (p, pc + 1)).collect(), memo)?,
                },
            };
            fork.parts.push(node);
        }
        self.forks.push(fork);
        let f = self.forks.len() as u32 - 1;
        memo.insert(set, f);
        Some(f)
    }

    /// Every program's verdict on `pkt` (whose length on the wire is `wirelen`) into
    /// `out` (as many as there are programs): what each program alone would return.
    pub fn run(&mut self, pkt: &[u8], wirelen: u32, out: &mut [u32]) {
        let Some(root) = self.root else {
            for (o, p) in out.iter_mut().zip(&self.programs) {
                *o = p.run(pkt, wirelen);
            }
            return;
        };
        // A program whose part rejects the packet (a load outside it) keeps 0.
        out.fill(0);
        let mut regs = Regs::default();
        let mut fork = root;
        'forks: loop {
            let f = &self.forks[fork as usize];
            for &(p, r) in &f.rets {
                out[p as usize] = match r {
                    Ret::K(k) => k,
                    Ret::A => regs.a,
                };
            }
            // The next part: this fork's last (the others wait on the stack with a copy
            // of the state), else one left on the stack.
            let mut n = match f.parts.split_last() {
                Some((&last, rest)) => {
                    for &n in rest {
                        self.stack.push((n, regs));
                    }
                    last
                }
                None => match self.stack.pop() {
                    Some((n, r)) => {
                        regs = r;
                        n
                    }
                    None => return,
                },
            };
            // Node after node while each leads to a single part with no returns.
            loop {
                let next = match self.nodes[n as usize] {
                    Node::Step { op, next } => {
                        if regs.exec(op, pkt, wirelen) {
                            next
                        } else {
                            // Rejected: this part's members keep 0; on with the others.
                            match self.next_on_stack(&mut regs, pkt, wirelen) {
                                Some(f) => f,
                                None => return,
                            }
                        }
                    }
                    Node::Test { op, t, f } => {
                        let Op::Jmp(o, src_x, k, _, _) = op else {
                            unreachable!("a test is a conditional jump")
                        };
                        if taken(o, src_x, k, &regs) {
                            t
                        } else {
                            f
                        }
                    }
                };
                match self.direct[next as usize] {
                    u32::MAX => {
                        fork = next;
                        continue 'forks;
                    }
                    d => n = d,
                }
            }
        }
    }

    /// After a part rejected the packet: the fork after the next part left on the stack
    /// that does not reject it too (its state restored), or `None` when none is left.
    fn next_on_stack(&mut self, regs: &mut Regs, pkt: &[u8], wirelen: u32) -> Option<u32> {
        loop {
            let (n, r) = self.stack.pop()?;
            *regs = r;
            match self.nodes[n as usize] {
                Node::Step { op, next } => {
                    if regs.exec(op, pkt, wirelen) {
                        return Some(next);
                    }
                }
                Node::Test { op, t, f } => {
                    let Op::Jmp(o, src_x, k, _, _) = op else {
                        unreachable!("a test is a conditional jump")
                    };
                    return Some(if taken(o, src_x, k, regs) { t } else { f });
                }
            }
        }
    }
}

/// An operation without its jump offsets: members at the same one share it.
fn same_operation(op: Op) -> Op {
    match op {
        Op::Jmp(o, x, k, _, _) => Op::Jmp(o, x, k, 0, 0),
        op => op,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cbpf::compile;
    const RET_A: u16 = 0x16;
    use proptest::prelude::*;

    /// pcap-filter expressions, compiled by libpcap for Ethernet: the benchmark's readers'
    /// and others that use every kind of load, the scratch memory, `ret A`-free and
    /// negated forms.
    const EXPRS: &[&str] = &[
        "udp",
        "udp dst port 9",
        "ip",
        "dst host 10.0.0.2",
        "src host 10.0.0.1",
        "udp and not port 53",
        "ip proto 17",
        "len > 60",
        "udp dst port 7",
        "not tcp",
        "tcp port 80",
        "tcp[tcpflags] & tcp-syn != 0",
        "ip[2:2] > 500",
        "less 100",
        "ip6 and udp",
        "arp",
        "net 10.0.0.0/8 and portrange 5000-6000",
        "udp[8:2] % 7 == 3",
        "(tcp[((tcp[12] & 0xf0) >> 2):4] = 0x47455420)",
        "vlan and udp",
    ];

    fn programs() -> Vec<Vec<Insn>> {
        EXPRS
            .iter()
            .map(|e| {
                compile(e, 1, 262144)
                    .unwrap_or_else(|x| panic!("{x}"))
                    .insns()
                    .to_vec()
            })
            .collect()
    }

    /// A frame to test against: Ethernet (sometimes VLAN-tagged), IPv4/IPv6/ARP, UDP or
    /// TCP, ports and addresses drawn from the values the expressions test, random bytes
    /// after, cut anywhere (loads past the end reject).
    fn frame(r: &[u32], cut: usize) -> Vec<u8> {
        let pick = |i: usize, of: &[u32]| of[r[i] as usize % of.len()];
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        if r[0] % 5 == 0 {
            f.extend_from_slice(&[0x81, 0x00, 0, 1]);
        }
        let ethertype = pick(1, &[0x0800, 0x0800, 0x86dd, 0x0806, 0x8035]) as u16;
        f.extend_from_slice(&ethertype.to_be_bytes());
        let proto = pick(2, &[17, 17, 6, 1, 44]) as u8;
        let addr = |x: u32| [10, 0, 0, (x % 4) as u8];
        if ethertype == 0x86dd {
            f.extend_from_slice(&[0x60, 0, 0, 0, 0, 40, proto, 64]);
            f.extend_from_slice(&[0; 32]);
        } else {
            let ihl = pick(3, &[5, 5, 6, 15]) as u8;
            let frag = pick(4, &[0, 0, 0x2000, 0x0001]) as u16;
            let total = pick(5, &[40, 600, 1500]) as u16;
            f.extend_from_slice(&[0x40 | ihl, 0]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0, 1]);
            f.extend_from_slice(&frag.to_be_bytes());
            f.extend_from_slice(&[64, proto, 0, 0]);
            f.extend_from_slice(&addr(r[6]));
            f.extend_from_slice(&addr(r[7]));
            f.extend(std::iter::repeat_n(
                0u8,
                (ihl as usize).saturating_sub(5) * 4,
            ));
        }
        let port = |x: u32| [7u16, 9, 53, 80, 5500, 1234][x as usize % 6];
        f.extend_from_slice(&port(r[8]).to_be_bytes());
        f.extend_from_slice(&port(r[9]).to_be_bytes());
        f.extend_from_slice(&r[10].to_be_bytes());
        f.extend_from_slice(&r[11].to_be_bytes());
        f.extend_from_slice(&(r[12] as u16 | 0x5000).to_be_bytes());
        for w in &r[13..] {
            f.extend_from_slice(&w.to_be_bytes());
        }
        f.truncate(cut.max(1));
        f
    }

    fn run(p: &[Insn], pkt: &[u8], wire: u32) -> u32 {
        Program::new(p.to_vec())
            .unwrap_or_else(|e| panic!("{e}: {p:?}"))
            .run(pkt, wire)
    }

    proptest! {
        /// The union of any set of libpcap-compiled programs accepts a packet iff one of
        /// them does, and then keeps the whole frame; it is a valid program.
        #[test]
        fn the_union_accepts_iff_some_program_accepts(
            pick in proptest::collection::vec(0usize..EXPRS.len(), 0..12),
            r in proptest::collection::vec(any::<u32>(), 24),
            cut in 1usize..200,
        ) {
            let all = programs();
            let chosen: Vec<&[Insn]> = pick.iter().map(|&i| all[i].as_slice()).collect();
            let u = union(&chosen).expect("short programs, all with filters");
            let pkt = frame(&r, cut);
            // The kernel runs a socket filter on the whole frame: its length is `len`.
            let wire = pkt.len() as u32;
            let any = chosen.iter().any(|p| run(p, &pkt, wire) != 0);
            let got = run(&u, &pkt, wire);
            prop_assert_eq!(got != 0, any, "{:?} on {:?}", pick.iter().map(|&i| EXPRS[i]).collect::<Vec<_>>(), pkt);
            prop_assert!(got == 0 || got == ACCEPT);
        }

        /// `and_then` rejects what the first rejects, else gives the second's verdict.
        #[test]
        fn and_then_is_the_first_then_the_second(
            a in 0usize..EXPRS.len(), b in 0usize..EXPRS.len(),
            r in proptest::collection::vec(any::<u32>(), 24),
            cut in 1usize..200,
        ) {
            let all = programs();
            let both = and_then(&all[a], &all[b]).unwrap();
            let pkt = frame(&r, cut);
            let wire = pkt.len() as u32;
            let want = if run(&all[a], &pkt, wire) == 0 { 0 } else { run(&all[b], &pkt, wire) };
            prop_assert_eq!(run(&both, &pkt, wire), want);
        }
    }

    proptest! {
        /// Merged, every program's verdict is what it returns alone, on any packet, for
        /// any set of libpcap-compiled programs (repeats included).
        #[test]
        fn merged_verdicts_are_each_programs_own(
            pick in proptest::collection::vec(0usize..EXPRS.len(), 1..14),
            r in proptest::collection::vec(any::<u32>(), 24),
            cut in 1usize..200,
            extra in 0u32..64,
        ) {
            let all = programs();
            let chosen: Vec<Program> = pick.iter().map(|&i| Program::new(all[i].clone()).unwrap()).collect();
            let mut m = Merged::new(&chosen);
            prop_assert!(m.merged());
            let pkt = frame(&r, cut);
            let wire = pkt.len() as u32 + extra;
            let mut out = vec![7; chosen.len()];
            m.run(&pkt, wire, &mut out);
            let alone: Vec<u32> = chosen.iter().map(|p| p.run(&pkt, wire)).collect();
            prop_assert_eq!(out, alone, "{:?}", pick.iter().map(|&i| EXPRS[i]).collect::<Vec<_>>());
        }
    }

    /// Programs using A as the verdict, X, the scratch memory and unconditional jumps,
    /// merged with libpcap's: the same verdicts as alone, on the sample's packets cut
    /// anywhere.
    #[test]
    fn merged_handles_ret_a_scratch_and_jumps() {
        let own = vec![
            // A = byte 0; if A > 3 { M[1] = A; X = 2; A = M[1] + X; ret A } else ret 0
            insn(0x30, 0, 0, 0),
            insn(0x25, 0, 6, 3),
            insn(0x02, 0, 0, 1),
            insn(0x01, 0, 0, 2),
            insn(0x60, 0, 0, 1),
            insn(0x0c, 0, 0, 0),
            insn(JA, 0, 0, 1),
            insn(RET_K, 0, 0, 99),
            insn(0x16, 0, 0, 0),
            insn(RET_K, 0, 0, 0),
        ];
        let mut progs: Vec<Program> = programs()
            .into_iter()
            .map(|p| Program::new(p).unwrap())
            .collect();
        progs.push(Program::new(own).unwrap());
        let mut m = Merged::new(&progs);
        assert!(m.merged());
        let mut out = vec![0; progs.len()];
        for (i, b0) in [0u8, 3, 4, 200].into_iter().enumerate() {
            for cut in [1usize, 13, 14, 23, 34, 60, 90] {
                let r: Vec<u32> = (0..24u32)
                    .map(|k| k.wrapping_mul(2_654_435_761) ^ i as u32)
                    .collect();
                let mut pkt = frame(&r, cut);
                pkt[0] = b0;
                m.run(&pkt, pkt.len() as u32, &mut out);
                let alone: Vec<u32> = progs
                    .iter()
                    .map(|p| p.run(&pkt, pkt.len() as u32))
                    .collect();
                assert_eq!(out, alone, "byte 0 {b0}, cut {cut}");
            }
        }
    }

    /// The benchmark's ten readers' programs (`streamline-bench legacy`), merged: fewer
    /// operations than they have instructions (their common tests are done once).
    #[test]
    fn the_benchmarks_readers_share_their_tests() {
        let progs: Vec<Program> = programs()[..10]
            .iter()
            .map(|p| Program::new(p.clone()).unwrap())
            .collect();
        let total: usize = progs.iter().map(|p| p.insns().len()).sum();
        let m = Merged::new(&progs);
        assert!(m.merged());
        assert!(
            m.nodes() < total,
            "{} nodes for {total} instructions",
            m.nodes()
        );
    }

    /// Time per packet of the benchmark's ten programs, merged and one after another, on
    /// the benchmark's kind of packet (an IPv4 UDP datagram to port 9). A measurement to
    /// read, not a check: `cargo test -p kernel --lib coalesce -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn merged_against_alone_timing() {
        let progs: Vec<Program> = programs()[..10]
            .iter()
            .map(|p| Program::new(p.clone()).unwrap())
            .collect();
        let mut m = Merged::new(&progs);
        let mut r = vec![0u32; 24];
        (r[0], r[1], r[2], r[3], r[4], r[8], r[9]) = (1, 0, 0, 0, 0, 5, 1);
        let pkt = frame(&r, 1514);
        let mut out = vec![0; progs.len()];
        let n = 2_000_000u32;
        let t = std::time::Instant::now();
        for _ in 0..n {
            m.run(std::hint::black_box(&pkt), 1514, &mut out);
        }
        let merged = t.elapsed().as_nanos() as f64 / n as f64;
        let t = std::time::Instant::now();
        for _ in 0..n {
            for (o, p) in out.iter_mut().zip(&progs) {
                *o = p.run(std::hint::black_box(&pkt), 1514);
            }
        }
        let alone = t.elapsed().as_nanos() as f64 / n as f64;
        println!("ten programs: merged {merged:.1} ns/packet ({} nodes), one by one {alone:.1} ns/packet, verdicts {out:?}", m.nodes());
    }

    /// The kernel's checker takes the union of all the test programs, and a direction
    /// before it (SO_ATTACH_FILTER on a UDP socket: the same checker as a packet socket's).
    #[test]
    fn the_kernel_takes_the_union() {
        let all = programs();
        let refs: Vec<&[Insn]> = all.iter().map(|p| p.as_slice()).collect();
        let u = union(&refs).unwrap();
        let inbound = compile("inbound", 1, 262144).unwrap();
        let both = and_then(inbound.insns(), &u).unwrap();
        // The direction's ancillary load (the packet type) is not guarded as a packet
        // load: a guard against `len` would reject every packet.
        assert_eq!(both[0], inbound.insns()[0], "{both:?}");
        assert!(inbound.insns()[0].k >= SKF_AD_OFF);
        for p in [&u, &both] {
            let sock: std::os::fd::OwnedFd =
                std::net::UdpSocket::bind("127.0.0.1:0").unwrap().into();
            crate::afpacket::attach_classic(&sock, p)
                .unwrap_or_else(|e| panic!("{e}: {} instructions", p.len()));
        }
    }

    /// Programs that return A (not libpcap's usual output, but valid classic BPF): a
    /// verdict of A = 0 goes on to the next program, any other accepts; A and X start at 0
    /// in each program.
    #[test]
    fn ret_a_and_registers_are_handled() {
        // A = the first byte; ret A.
        let first = vec![insn(0x30, 0, 0, 0), insn(RET_A, 0, 0, 0)];
        // ret A with A never set: 0, so never accepts (were A left over, it would).
        let lazy = vec![insn(RET_A, 0, 0, 0)];
        // X + 1 == 1 iff X started at 0: accept.
        let x = vec![
            insn(0x87, 0, 0, 0), // txa
            insn(0x04, 0, 0, 1), // add #1
            insn(JEQ_K, 0, 1, 1),
            insn(RET_K, 0, 0, 5),
            insn(RET_K, 0, 0, 0),
        ];
        let u = union(&[&first, &lazy]).unwrap();
        assert_eq!(run(&u, &[0], 1), 0);
        assert_eq!(run(&u, &[3], 1), ACCEPT);
        let u = union(&[&first, &x]).unwrap();
        assert_eq!(
            run(&u, &[0], 1),
            ACCEPT,
            "X was not 0 at the second program"
        );
        assert_eq!(union(&[]), Some(vec![insn(RET_K, 0, 0, 0)]));
        assert_eq!(
            union(&[&first, &[]]),
            None,
            "a reader without a filter takes all"
        );
    }

    /// Past the kernel's 4096 instructions the union takes everything (None); a program
    /// repeated is laid once.
    #[test]
    fn too_long_a_union_accepts_everything() {
        let all = programs();
        let long: Vec<Vec<Insn>> = (0..300u32)
            .map(|k| {
                let mut p = all[1].clone();
                p[5].k = k; // udp dst port 9 -> port k
                p[13].k = k;
                p
            })
            .collect();
        let refs: Vec<&[Insn]> = long.iter().map(|p| p.as_slice()).collect();
        assert_eq!(union(&refs), None);
        let same: Vec<&[Insn]> = std::iter::repeat_n(all[1].as_slice(), 300).collect();
        assert_eq!(union(&same), union(&[all[1].as_slice()]));
    }
}
