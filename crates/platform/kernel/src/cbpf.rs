//! Classic BPF (thesis 3.4, 6.3.2): a pcap-filter expression compiled by libpcap's own
//! compiler, validated, and run by our interpreter in user space, the same program the
//! kernel runs when it is attached to a capture socket.
//!
//! Owns: [`compile`] (expression -> [`Program`] through libpcap), [`Program::new`]
//! (validation of any instruction list, as the kernel's `sk_chk_filter` and libpcap's
//! `bpf_validate` do) and [`Program::run`] (the interpreter, with libpcap's semantics:
//! a load outside the packet or a division by zero rejects the packet). Safe Rust.

use std::fmt;

/// One instruction, as in `struct sock_filter` / `struct bpf_insn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// A validated program: the instructions as given (what a kernel socket takes) and the
/// same decoded once for the interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    insns: Vec<Insn>,
    ops: Vec<Op>,
}

/// A decoded instruction: the interpreter dispatches on one enum instead of re-reading
/// opcode bits at every step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    LdAbs(u8, u32),
    LdInd(u8, u32),
    LdImm(u32),
    LdLen,
    LdMem(usize),
    LdxImm(u32),
    LdxLen,
    LdxMem(usize),
    LdxMsh(u32),
    St(usize),
    Stx(usize),
    Alu(u8, bool, u32),
    Ja(u32),
    Jmp(u8, bool, u32, u8, u8),
    RetK(u32),
    RetA,
    Tax,
    Txa,
}

fn decode(i: &Insn) -> Op {
    let c = i.code;
    let size = match c & 0x18 {
        W => 4,
        H => 2,
        _ => 1,
    };
    match c & 0x07 {
        LD => match c & 0xe0 {
            IMM => Op::LdImm(i.k),
            LEN => Op::LdLen,
            MEM => Op::LdMem(i.k as usize),
            ABS => Op::LdAbs(size, i.k),
            _ => Op::LdInd(size, i.k),
        },
        LDX => match c & 0xe0 {
            IMM => Op::LdxImm(i.k),
            LEN => Op::LdxLen,
            MEM => Op::LdxMem(i.k as usize),
            _ => Op::LdxMsh(i.k),
        },
        ST => Op::St(i.k as usize),
        STX => Op::Stx(i.k as usize),
        ALU => Op::Alu((c & 0xf0) as u8, c & SRC_X != 0, i.k),
        JMP if c & 0xf0 == 0 => Op::Ja(i.k),
        JMP => Op::Jmp((c & 0xf0) as u8, c & SRC_X != 0, i.k, i.jt, i.jf),
        RET => match c & 0x18 {
            RVAL_A => Op::RetA,
            _ => Op::RetK(i.k),
        },
        _ if c & 0xf8 == 0x80 => Op::Txa,
        _ => Op::Tax,
    }
}

/// Why a program or expression was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BpfError {
    /// libpcap could not compile the expression (its message).
    Compile { expr: String, why: String },
    /// The instruction at `at` is invalid.
    Invalid { at: usize, why: String },
}

impl fmt::Display for BpfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BpfError::Compile { expr, why } => write!(f, "'{expr}' does not compile: {why}"),
            BpfError::Invalid { at, why } => {
                write!(f, "invalid BPF program at instruction {at}: {why}")
            }
        }
    }
}

impl std::error::Error for BpfError {}

// Instruction classes and fields (linux/filter.h, pcap/bpf.h).
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const STX: u16 = 0x03;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;

const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;

const IMM: u16 = 0x00;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const LEN: u16 = 0x80;
const MSH: u16 = 0xa0;

const SRC_X: u16 = 0x08;
const RVAL_A: u16 = 0x10;
const RVAL_X: u16 = 0x08;

const MEMWORDS: u32 = 16;

/// The DLT_* value libpcap uses on Linux for a LINKTYPE_* value found in a capture file
/// (libpcap's `linktype_to_dlt`): LINKTYPE_RAW (101) is DLT_RAW (12), and a few other
/// values that differ between platforms map likewise; everything else is the same number.
/// libpcap's filter compiler and its savefile reader speak DLTs.
pub fn linktype_to_dlt(linktype: u32) -> u32 {
    match linktype {
        100 => 11, // ATM_RFC1483
        101 => 12, // RAW
        102 => 15, // SLIP_BSDOS
        103 => 16, // PPP_BSDOS
        106 => 19, // ATM_CLIP
        l => l,
    }
}

/// Compile `expr` with libpcap for frames of link type `linktype` (pcap LINKTYPE_*, as a
/// capture file names it; mapped to libpcap's DLT with [`linktype_to_dlt`]), optimized,
/// for packets of up to `snaplen` bytes, as for a live capture (what a socket runs).
pub fn compile(expr: &str, linktype: u32, snaplen: u32) -> Result<Program, BpfError> {
    let bad = |why: String| BpfError::Compile {
        expr: expr.into(),
        why,
    };
    let lt = i32::try_from(linktype_to_dlt(linktype))
        .map_err(|_| bad(format!("link type {linktype}")))?;
    let cap = pcap::Capture::dead_with_precision(pcap::Linktype(lt), pcap::Precision::Micro)
        .map_err(|e| bad(e.to_string()))?;
    let _ = snaplen;
    let prog = cap.compile(expr, true).map_err(|e| bad(e.to_string()))?;
    from_libpcap(&prog)
}

/// Compile `expr` as libpcap does for a capture file of link type `linktype` written in
/// this host's byte order (what `tcpdump -r FILE EXPR` runs). It differs from [`compile`]
/// where libpcap's code generation asks whether it reads a file: BSD loopback captures
/// (LINKTYPE_NULL) are matched on every platform's IPv6 address family (24, 28, 30), not
/// just this one's, and `inbound`, `outbound` and `ifindex` are refused on link types whose
/// frames do not say so themselves. libpcap learns that it reads a file only by opening
/// one, so a file with just the header is written, opened and removed.
pub fn compile_for_file(expr: &str, linktype: u32) -> Result<Program, BpfError> {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let bad = |why: String| BpfError::Compile {
        expr: expr.into(),
        why,
    };
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("streamline-cbpf-{}-{seq}.pcap", std::process::id()));
    // Magic, version 2.4, zone, accuracy, snap length, link type.
    let mut header = 0xa1b2_c3d4u32.to_ne_bytes().to_vec();
    header.extend_from_slice(&2u16.to_ne_bytes());
    header.extend_from_slice(&4u16.to_ne_bytes());
    for v in [0, 0, 262_144, linktype] {
        header.extend_from_slice(&v.to_ne_bytes());
    }
    std::fs::write(&path, &header)
        .map_err(|e| bad(format!("cannot write {}: {e}", path.display())))?;
    let cap = pcap::Capture::from_file(&path);
    let _ = std::fs::remove_file(&path);
    let cap = cap.map_err(|e| bad(e.to_string()))?;
    let prog = cap.compile(expr, true).map_err(|e| bad(e.to_string()))?;
    from_libpcap(&prog)
}

/// Our program from libpcap's.
fn from_libpcap(prog: &pcap::BpfProgram) -> Result<Program, BpfError> {
    let mut insns = Vec::new();
    for (i, ins) in prog.get_instructions().iter().enumerate() {
        // The crate exposes instructions only through Display: "code jt jf k".
        let text = ins.to_string();
        let f: Vec<u64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let [code, jt, jf, k] = f[..] else {
            return Err(BpfError::Invalid {
                at: i,
                why: format!("unreadable instruction '{text}' from libpcap"),
            });
        };
        insns.push(Insn {
            code: code as u16,
            jt: jt as u8,
            jf: jf as u8,
            k: k as u32,
        });
    }
    Program::new(insns)
}

impl Program {
    /// Validate `insns`: every opcode known, jumps forward and inside the program,
    /// scratch memory indices in range, no division by a constant zero, and the program
    /// ends in a return.
    pub fn new(insns: Vec<Insn>) -> Result<Program, BpfError> {
        let n = insns.len();
        if n == 0 {
            return Err(BpfError::Invalid {
                at: 0,
                why: "empty program".into(),
            });
        }
        if n > 4096 {
            return Err(BpfError::Invalid {
                at: 4096,
                why: format!("{n} instructions (at most 4096)"),
            });
        }
        for (i, ins) in insns.iter().enumerate() {
            let bad = |why: &str| {
                Err(BpfError::Invalid {
                    at: i,
                    why: why.into(),
                })
            };
            let c = ins.code;
            match c & 0x07 {
                LD | LDX => {
                    let mode = c & 0xe0;
                    let size = c & 0x18;
                    let ok = match (c & 0x07, mode) {
                        (LD, IMM | LEN) => size == W,
                        (LD, ABS | IND) => matches!(size, W | H | B),
                        (LD | LDX, MEM) => size == W && ins.k < MEMWORDS,
                        (LDX, IMM | LEN) => size == W,
                        (LDX, MSH) => size == B,
                        _ => false,
                    };
                    if !ok {
                        return bad(&format!("unknown load {c:#06x}"));
                    }
                    if c & 0xff00 != 0 {
                        return bad("opcode bits beyond 8");
                    }
                }
                ST | STX => {
                    if c & !0x07 != 0 {
                        return bad(&format!("unknown store {c:#06x}"));
                    }
                    if ins.k >= MEMWORDS {
                        return bad("scratch memory index out of range");
                    }
                }
                ALU => {
                    let op = c & 0xf0;
                    if c & !0xf8 & !0x07 != 0 || op > 0xa0 {
                        return bad(&format!("unknown ALU operation {c:#06x}"));
                    }
                    if (op == 0x30 || op == 0x90) && c & SRC_X == 0 && ins.k == 0 {
                        return bad("division by the constant zero");
                    }
                }
                JMP => {
                    let op = c & 0xf0;
                    if c & !0xf8 & !0x07 != 0 || op > 0x40 {
                        return bad(&format!("unknown jump {c:#06x}"));
                    }
                    let reach = |off: u64| i as u64 + 1 + off < n as u64;
                    if op == 0x00 {
                        if !reach(ins.k as u64) {
                            return bad("jump out of the program");
                        }
                    } else if !reach(ins.jt as u64) || !reach(ins.jf as u64) {
                        return bad("conditional jump out of the program");
                    }
                }
                RET => {
                    // Classic BPF returns a constant or A: `ret x` is refused by the
                    // kernel's checker and aborts libpcap's interpreter.
                    if c & 0x18 == RVAL_X && c & !0x1f == 0 {
                        return bad(&format!(
                            "return of X ({c:#06x}): classic BPF returns a constant or A"
                        ));
                    }
                    if !matches!(c & 0x18, 0x00 | RVAL_A) || c & !0x1f != 0 {
                        return bad(&format!("unknown return {c:#06x}"));
                    }
                }
                MISC => {
                    if !matches!(c & 0xf8, 0x00 | 0x80) || c & !0xff != 0 {
                        return bad(&format!("unknown misc operation {c:#06x}"));
                    }
                }
                _ => unreachable!("three bits"),
            }
        }
        if insns[n - 1].code & 0x07 != RET {
            return Err(BpfError::Invalid {
                at: n - 1,
                why: "the program does not end in a return".into(),
            });
        }
        let ops = insns.iter().map(decode).collect();
        Ok(Program { insns, ops })
    }

    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// The decoded instructions (for [`crate::coalesce`]).
    pub(crate) fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Run the program on a packet whose captured bytes are `pkt` and whose length on the
    /// wire is `wirelen`: the number of bytes to accept (0 = reject).
    pub fn run(&self, pkt: &[u8], wirelen: u32) -> u32 {
        let mut r = Regs::default();
        let mut pc = 0usize;
        loop {
            // Validation guarantees pc stays inside and the last instruction returns.
            let op = self.ops[pc];
            pc += 1;
            match op {
                Op::Ja(k) => pc += k as usize,
                Op::Jmp(o, src_x, k, jt, jf) => {
                    pc += if taken(o, src_x, k, &r) { jt } else { jf } as usize;
                }
                Op::RetK(k) => return k,
                Op::RetA => return r.a,
                op => {
                    if !r.exec(op, pkt, wirelen) {
                        return 0;
                    }
                }
            }
        }
    }
}

/// The machine's registers: A, X and the scratch words.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Regs {
    pub(crate) a: u32,
    x: u32,
    mem: [u32; MEMWORDS as usize],
}

#[inline(always)]
fn load(pkt: &[u8], off: u32, size: u8) -> Option<u32> {
    let off = off as usize;
    match size {
        4 => pkt
            .get(off..off.checked_add(4)?)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        2 => pkt
            .get(off..off.checked_add(2)?)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as u32),
        _ => pkt.get(off).map(|&b| b as u32),
    }
}

/// Whether conditional jump `o` (with X or `k`) is taken.
#[inline(always)]
pub(crate) fn taken(o: u8, src_x: bool, k: u32, r: &Regs) -> bool {
    let v = if src_x { r.x } else { k };
    match o {
        0x10 => r.a == v,
        0x20 => r.a > v,
        0x30 => r.a >= v,
        _ => r.a & v != 0,
    }
}

impl Regs {
    /// Do `op`, an instruction that neither jumps nor returns; false: the packet is
    /// rejected (a load outside it, a division by zero).
    #[inline(always)]
    pub(crate) fn exec(&mut self, op: Op, pkt: &[u8], wirelen: u32) -> bool {
        let r = self;
        match op {
            Op::LdAbs(size, k) => match load(pkt, k, size) {
                Some(v) => r.a = v,
                None => return false,
            },
            Op::LdInd(size, k) => match r.x.checked_add(k).and_then(|o| load(pkt, o, size)) {
                Some(v) => r.a = v,
                None => return false,
            },
            Op::LdImm(k) => r.a = k,
            Op::LdLen => r.a = wirelen,
            Op::LdMem(i) => r.a = r.mem[i],
            Op::LdxImm(k) => r.x = k,
            Op::LdxLen => r.x = wirelen,
            Op::LdxMem(i) => r.x = r.mem[i],
            Op::LdxMsh(k) => match load(pkt, k, 1) {
                Some(v) => r.x = (v & 0xf) << 2,
                None => return false,
            },
            Op::St(i) => r.mem[i] = r.a,
            Op::Stx(i) => r.mem[i] = r.x,
            Op::Alu(o, src_x, k) => {
                let v = if src_x { r.x } else { k };
                r.a = match o {
                    0x00 => r.a.wrapping_add(v),
                    0x10 => r.a.wrapping_sub(v),
                    0x20 => r.a.wrapping_mul(v),
                    0x30 => match r.a.checked_div(v) {
                        Some(q) => q,
                        None => return false,
                    },
                    0x40 => r.a | v,
                    0x50 => r.a & v,
                    0x60 => r.a.checked_shl(v).unwrap_or(0),
                    0x70 => r.a.checked_shr(v).unwrap_or(0),
                    0x80 => r.a.wrapping_neg(),
                    0x90 => match r.a.checked_rem(v) {
                        Some(q) => q,
                        None => return false,
                    },
                    _ => r.a ^ v,
                }
            }
            Op::Tax => r.x = r.a,
            Op::Txa => r.a = r.x,
            Op::Ja(_) | Op::Jmp(..) | Op::RetK(_) | Op::RetA => {
                unreachable!("jumps and returns are the caller's")
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Vec<(Vec<u8>, u32)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../examples/sample.pcap");
        let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
        let mut v = Vec::new();
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            v.push((p.data.to_vec(), p.orig_len));
        }
        v
    }

    /// Expressions covering loads of every size and mode, indexed loads through the IP
    /// header length, jumps, arithmetic and the wire length.
    const EXPRS: &[&str] = &[
        "tcp",
        "udp",
        "icmp or icmp6",
        "tcp port 80",
        "tcp dst port 80",
        "udp port 53",
        "ip6 and tcp",
        "portrange 5000-6000",
        "tcp[tcpflags] & tcp-syn != 0",
        "tcp[tcpflags] & (tcp-fin|tcp-rst) != 0",
        "ip[2:2] > 500",
        "greater 1000",
        "less 100",
        "net 10.99.0.0/24",
        "ether host 02:00:0a:63:00:01",
        "ip[6:2] & 0x1fff != 0",
        "ip6[6] == 44",
        "not arp and not ip6",
        "udp[8:2] % 7 == 3",
        "(tcp[((tcp[12] & 0xf0) >> 2):4] = 0x47455420)",
    ];

    #[test]
    fn our_interpreter_agrees_with_libpcap_on_every_packet() {
        let pkts = sample();
        for e in EXPRS {
            let ours = compile(e, 1, 262144).unwrap_or_else(|x| panic!("{x}"));
            let cap = pcap::Capture::dead(pcap::Linktype::ETHERNET).unwrap();
            let theirs = cap.compile(e, true).unwrap();
            let mut matched = 0;
            for (i, (p, _)) in pkts.iter().enumerate() {
                // libpcap's pcap_offline_filter, through the crate, uses the captured length
                // as the wire length.
                let t = theirs.filter(p);
                let o = ours.run(p, p.len() as u32) != 0;
                assert_eq!(o, t, "'{e}' on packet {i}: ours {o}, libpcap {t}");
                matched += t as usize;
            }
            // The expressions are chosen to be neither empty nor everything on the sample.
            assert!(
                matched > 0 && matched < pkts.len() || e.starts_with("not "),
                "'{e}' matched {matched} of {}",
                pkts.len()
            );
        }
    }

    #[test]
    fn bad_expressions_and_programs_are_refused_with_reasons() {
        let e = compile("tcp prt 80", 1, 65535).unwrap_err();
        assert!(
            e.to_string().contains("'tcp prt 80' does not compile"),
            "{e}"
        );
        let ret = Insn {
            code: RET,
            jt: 0,
            jf: 0,
            k: 1,
        };
        assert!(Program::new(vec![]).is_err());
        let e = Program::new(vec![Insn {
            code: LD | ABS | W,
            jt: 0,
            jf: 0,
            k: 0,
        }])
        .unwrap_err();
        assert!(e.to_string().contains("does not end in a return"), "{e}");
        let e = Program::new(vec![
            Insn {
                code: JMP,
                jt: 0,
                jf: 0,
                k: 5,
            },
            ret,
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("instruction 0: jump out of the program"),
            "{e}"
        );
        let e = Program::new(vec![
            Insn {
                code: ALU | 0x30,
                jt: 0,
                jf: 0,
                k: 0,
            },
            ret,
        ])
        .unwrap_err();
        assert!(
            e.to_string().contains("division by the constant zero"),
            "{e}"
        );
        let e = Program::new(vec![
            Insn {
                code: ST,
                jt: 0,
                jf: 0,
                k: 16,
            },
            ret,
        ])
        .unwrap_err();
        assert!(e.to_string().contains("scratch memory"), "{e}");
        // `ret x`: refused by name, wherever it is (libpcap's interpreter aborts on it).
        for at_end in [true, false] {
            let ret_x = Insn {
                code: RET | RVAL_X,
                jt: 0,
                jf: 0,
                k: 0,
            };
            let prog = if at_end {
                vec![ret_x]
            } else {
                vec![ret_x, ret]
            };
            let e = Program::new(prog).unwrap_err();
            assert_eq!(
                e,
                BpfError::Invalid {
                    at: 0,
                    why: "return of X (0x000e): classic BPF returns a constant or A".into()
                },
                "{e}"
            );
        }
        // The returns classic BPF has are accepted.
        for code in [RET, RET | RVAL_A] {
            assert!(
                Program::new(vec![Insn { code, ..ret }]).is_ok(),
                "{code:#x}"
            );
        }
    }

    /// Capture files name link types by LINKTYPE: raw IP (101) compiles as libpcap's
    /// DLT_RAW (12) and matches raw IPv4; loopback captures read from a file match every
    /// platform's IPv6 family, as `tcpdump -r` does.
    #[test]
    fn link_types_of_capture_files_compile_as_libpcap_reads_them() {
        let raw_tcp = [
            0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x9c, 0x40, 0, 80,
        ];
        for lt in [101, 12] {
            let p = compile("tcp dst port 80", lt, 65535).unwrap_or_else(|e| panic!("{lt}: {e}"));
            assert_ne!(p.run(&raw_tcp, 40), 0, "link type {lt}");
            assert_eq!(
                p.run(&raw_tcp[..20], 40),
                0,
                "link type {lt}: the port is not captured"
            );
        }
        assert_eq!(linktype_to_dlt(101), 12);
        assert_eq!(linktype_to_dlt(113), 113);
        let mut null6 = 24u32.to_ne_bytes().to_vec();
        null6.extend_from_slice(&[0x60, 0, 0, 0]);
        assert_ne!(compile_for_file("ip6", 0).unwrap().run(&null6, 8), 0);
        assert_eq!(
            compile("ip6", 0, 65535).unwrap().run(&null6, 8),
            0,
            "a live capture checks only this platform's AF_INET6"
        );
        let e = compile_for_file("inbound", 1).unwrap_err();
        assert!(e.to_string().contains("when reading savefiles"), "{e}");
    }

    #[test]
    fn loads_outside_the_packet_and_division_by_x_zero_reject() {
        let p = Program::new(vec![
            Insn {
                code: LD | ABS | W,
                jt: 0,
                jf: 0,
                k: 10,
            },
            Insn {
                code: RET,
                jt: 0,
                jf: 0,
                k: 99,
            },
        ])
        .unwrap();
        assert_eq!(p.run(&[0; 13], 13), 0);
        assert_eq!(p.run(&[0; 14], 14), 99);
        let d = Program::new(vec![
            Insn {
                code: LD | IMM,
                jt: 0,
                jf: 0,
                k: 7,
            },
            Insn {
                code: ALU | 0x30 | SRC_X,
                jt: 0,
                jf: 0,
                k: 0,
            },
            Insn {
                code: RET | RVAL_A,
                jt: 0,
                jf: 0,
                k: 0,
            },
        ])
        .unwrap();
        assert_eq!(d.run(&[], 0), 0);
    }

    proptest! {
        /// Any instruction list either fails validation or runs to a return on any packet
        /// (no panic, no endless loop: jumps only go forward).
        #[test]
        fn random_programs_validate_or_run(ins in proptest::collection::vec((any::<u16>(), any::<u8>(), any::<u8>(), any::<u32>()), 1..24),
                                           pkt in proptest::collection::vec(any::<u8>(), 0..80)) {
            let insns: Vec<Insn> = ins.iter().map(|&(c, jt, jf, k)| Insn { code: c & 0xff, jt: jt % 8, jf: jf % 8, k: if k % 3 == 0 { k % 64 } else { k } }).collect();
            if let Ok(p) = Program::new(insns) {
                let _ = p.run(&pkt, pkt.len() as u32);
            }
        }

        /// Random programs made only of valid instructions (every load, store, ALU
        /// operation, jump, return and misc opcode, jumps inside the program) are all
        /// accepted, and our interpreter's verdict on random packets is libpcap's
        /// (`bpf_filter`, the reference interpreter), so the run path is what is tested.
        #[test]
        fn valid_random_programs_run_as_libpcap_runs_them(
            ins in proptest::collection::vec((0usize..VALID.len(), any::<u32>(), any::<u8>(), any::<u8>()), 1..24),
            pkt in proptest::collection::vec(any::<u8>(), 0..80),
            extra in 0u32..100,
        ) {
            let n = ins.len();
            let insns: Vec<Insn> = ins.iter().enumerate().map(|(i, &(op, k, jt, jf))| {
                let code = if i == n - 1 { RET | [0, RVAL_A][op % 2] } else { VALID[op] };
                // Room ahead of this instruction (the last one is a return).
                let ahead = (n - i - 1).saturating_sub(1) as u32;
                let k = match code & 0x07 {
                    // Offsets around the packet's length (some loads fall outside).
                    LD | LDX if code & 0xe0 != IMM => if code & 0xe0 == MEM { k % MEMWORDS } else { k % 96 },
                    ST | STX => k % MEMWORDS,
                    // No constant zero divisor; shifts by a constant below 32 (as the kernel).
                    ALU if matches!(code & 0xf0, 0x30 | 0x90) && code & SRC_X == 0 => k.max(1),
                    ALU if matches!(code & 0xf0, 0x60 | 0x70) && code & SRC_X == 0 => k % 32,
                    JMP if code & 0xf0 == 0 => k % (ahead + 1),
                    RET => if k % 2 == 0 { k % 200 } else { k },
                    _ => if k % 3 == 0 { k % 40 } else { k },
                };
                let (jt, jf) = ((jt as u32 % (ahead + 1)) as u8, (jf as u32 % (ahead + 1)) as u8);
                Insn { code, jt, jf, k }
            }).collect();
            // Every scratch word stored first (A is 0): libpcap leaves them uninitialized,
            // and the kernel refuses programs that load one before a store.
            let insns: Vec<Insn> = (0..MEMWORDS).map(|k| Insn { code: ST, jt: 0, jf: 0, k }).chain(insns).collect();
            let p = Program::new(insns.clone()).map_err(|e| TestCaseError::fail(format!("{e}: {insns:?}")))?;
            let wirelen = pkt.len() as u32 + extra;
            prop_assert_eq!(p.run(&pkt, wirelen), libpcap::verdict(&insns, &pkt, wirelen), "{:?} on {:?}", insns, pkt);
        }
    }

    /// Every valid opcode (the generator also ends programs with a return).
    const VALID: &[u16] = &[
        LD | W | ABS,
        LD | H | ABS,
        LD | B | ABS,
        LD | W | IND,
        LD | H | IND,
        LD | B | IND,
        LD | IMM,
        LD | LEN,
        LD | MEM,
        LDX | IMM,
        LDX | LEN,
        LDX | MEM,
        LDX | B | MSH,
        ST,
        STX,
        ALU,
        ALU | 0x10,
        ALU | 0x20,
        ALU | 0x30,
        ALU | 0x40,
        ALU | 0x50,
        ALU | 0x60,
        ALU | 0x70,
        ALU | 0x80,
        ALU | 0x90,
        ALU | 0xa0,
        ALU | SRC_X,
        ALU | 0x10 | SRC_X,
        ALU | 0x20 | SRC_X,
        ALU | 0x30 | SRC_X,
        ALU | 0x40 | SRC_X,
        ALU | 0x50 | SRC_X,
        ALU | 0x60 | SRC_X,
        ALU | 0x70 | SRC_X,
        ALU | 0x90 | SRC_X,
        ALU | 0xa0 | SRC_X,
        JMP,
        JMP | 0x10,
        JMP | 0x20,
        JMP | 0x30,
        JMP | 0x40,
        JMP | 0x10 | SRC_X,
        JMP | 0x20 | SRC_X,
        JMP | 0x30 | SRC_X,
        JMP | 0x40 | SRC_X,
        RET,
        RET | RVAL_A,
        MISC,
        MISC | 0x80,
    ];
    // Not `RET | RVAL_X`: the validator refuses it (libpcap's interpreter aborts on it and
    // the kernel's checker refuses it; see bad_expressions_and_programs_are_refused_with_reasons).

    /// libpcap's reference interpreter, through its C interface.
    #[allow(unsafe_code)]
    mod libpcap {
        #[repr(C)]
        struct BpfInsn {
            code: u16,
            jt: u8,
            jf: u8,
            k: u32,
        }

        #[link(name = "pcap")]
        extern "C" {
            fn bpf_filter(pc: *const BpfInsn, p: *const u8, wirelen: u32, buflen: u32) -> u32;
        }

        /// libpcap's verdict for `insns` (a validated program) on `pkt`.
        pub fn verdict(insns: &[super::Insn], pkt: &[u8], wirelen: u32) -> u32 {
            let prog: Vec<BpfInsn> = insns
                .iter()
                .map(|i| BpfInsn {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                })
                .collect();
            // SAFETY: `prog` is a program that ends in a return with every jump inside it
            // (validated by the caller), as bpf_filter requires; it reads `buflen` bytes
            // of `pkt`, which holds them, and both outlive the call.
            unsafe { bpf_filter(prog.as_ptr(), pkt.as_ptr(), wirelen, pkt.len() as u32) }
        }
    }
}
