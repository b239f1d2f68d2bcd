//! Typed placement decisions carried on a filter or Unix node (`place` in
//! [`crate::NodeKind::Filter`] and [`crate::NodeKind::Unix`]): where it runs
//! ([`SpaceSpec`], from `space=` or the plan), which side of the kernel boundary a filter
//! with a kernel and a user implementation runs on ([`Side`], from the user's
//! `placed=user` or the kernel push-down), and what the capture source runs on its socket
//! for the filter after it ([`KernelAttach`], written only by the push-down). This module
//! owns these types, their parse from the user-writable words (`space=`, `placed=`) and
//! their print; the rewrites that set them live in `control::rewrite` (and the passes it
//! calls).

use std::fmt;
use std::path::PathBuf;

/// The control option that places a node: parsed into [`Placement::space`].
pub const SPACE: &str = "space";

/// A filter node's placement decisions. Every field is `None` until the user or a
/// rewrite pass decides it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Placement {
    /// Where it runs (`space=`).
    pub space: Option<SpaceSpec>,
    /// Kernel or user implementation (`placed=`).
    pub side: Option<Side>,
    /// On a capture source: the program its socket runs for the filter after it.
    pub kernel: Option<KernelAttach>,
}

impl Placement {
    pub fn is_empty(&self) -> bool {
        self.space.is_none() && self.side.is_none() && self.kernel.is_none()
    }
}

/// A space in the runtime's own names: `local` (or `0`: the calling thread), `N` or `tN`
/// (a thread space, pinned to CPU N mod the CPU count), `pN` (a process space), N >= 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum SpaceName {
    Local,
    Thread(usize),
    Process(usize),
}

impl SpaceName {
    fn parse(v: &str) -> Option<SpaceName> {
        let num = |n: &str| n.parse::<usize>().ok().filter(|&n| n > 0);
        match v {
            "local" | "0" => Some(SpaceName::Local),
            _ => match v.strip_prefix('p') {
                Some(n) => num(n).map(SpaceName::Process),
                None => num(v.strip_prefix('t').unwrap_or(v)).map(SpaceName::Thread),
            },
        }
    }
}

/// `local`, `N` (a thread space), `pN`.
impl fmt::Display for SpaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpaceName::Local => f.write_str("local"),
            SpaceName::Thread(n) => write!(f, "{n}"),
            SpaceName::Process(n) => write!(f, "p{n}"),
        }
    }
}

/// What a `space=` pin in the planner's terms asks for (`kernel`, `thread`, `process`,
/// `user`: thread or process). The language only names it; `control` maps it onto the
/// system model's kinds of space (`control::system::SpaceKind`, which has no `user`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum PinKind {
    Kernel,
    Thread,
    Process,
    /// Thread or process.
    User,
}

impl PinKind {
    pub fn name(self) -> &'static str {
        match self {
            PinKind::Kernel => "kernel",
            PinKind::Thread => "thread",
            PinKind::Process => "process",
            PinKind::User => "user",
        }
    }
}

/// The value of `space=`: the runtime's names (one, or a list: one data-parallel copy per
/// space) or a pin in the planner's terms (`kernel`, `thread`, `process`, `user`, each
/// optionally `:CPU`, or `cpuN`), which the plan honours and translates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum SpaceSpec {
    Runtime(Vec<SpaceName>),
    Planner {
        kind: Option<PinKind>,
        cpu: Option<usize>,
    },
}

impl SpaceSpec {
    /// Parses a `space=` value; the error says what was expected.
    pub fn parse(v: &str) -> Result<SpaceSpec, String> {
        const EXPECTED: &str = "expected 'local', a thread space N or tN, a process space pN (N >= 1), a list of them (A,B,...), or a planner pin: kernel, thread, process, user (each optionally :CPU) or cpuN";
        let bad = |why: &str| format!("space={v}: {why}");
        if let Some((kind, cpu)) = v.split_once(':') {
            let kind = SpaceSpec::kind(kind).ok_or_else(|| bad(EXPECTED))?;
            let cpu = cpu
                .parse::<usize>()
                .map_err(|_| bad(&format!("'{cpu}' is not a CPU number")))?;
            return Ok(SpaceSpec::Planner {
                kind: Some(kind),
                cpu: Some(cpu),
            });
        }
        if let Some(kind) = SpaceSpec::kind(v) {
            return Ok(SpaceSpec::Planner {
                kind: Some(kind),
                cpu: None,
            });
        }
        if let Some(c) = v.strip_prefix("cpu") {
            let cpu = c.parse::<usize>().map_err(|_| bad("expected cpuN"))?;
            return Ok(SpaceSpec::Planner {
                kind: None,
                cpu: Some(cpu),
            });
        }
        let parts: Vec<&str> = v.split(',').map(str::trim).collect();
        if parts.len() > 1 && parts.iter().any(|p| p.is_empty()) {
            return Err(bad("an empty space in the list"));
        }
        parts
            .iter()
            .map(|p| SpaceName::parse(p))
            .collect::<Option<Vec<_>>>()
            .map(SpaceSpec::Runtime)
            .ok_or_else(|| bad(EXPECTED))
    }

    fn kind(s: &str) -> Option<PinKind> {
        Some(match s {
            "kernel" => PinKind::Kernel,
            "thread" => PinKind::Thread,
            "process" => PinKind::Process,
            "user" => PinKind::User,
            _ => return None,
        })
    }

    /// The runtime's names, if it is in them.
    pub fn runtime(&self) -> Option<&[SpaceName]> {
        match self {
            SpaceSpec::Runtime(list) => Some(list),
            SpaceSpec::Planner { .. } => None,
        }
    }
}

/// As written after `space=`: `local`, `2`, `p3`, `1,2`, `kernel`, `thread:7`, `cpu3`.
impl fmt::Display for SpaceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpaceSpec::Runtime(list) => {
                for (i, s) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{s}")?;
                }
                Ok(())
            }
            SpaceSpec::Planner {
                kind: Some(k),
                cpu: Some(c),
            } => write!(f, "{}:{c}", k.name()),
            SpaceSpec::Planner {
                kind: Some(k),
                cpu: None,
            } => f.write_str(k.name()),
            SpaceSpec::Planner {
                kind: None,
                cpu: Some(c),
            } => write!(f, "cpu{c}"),
            SpaceSpec::Planner {
                kind: None,
                cpu: None,
            } => f.write_str("user"),
        }
    }
}

/// Which implementation of a filter with a kernel and a user one runs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum Side {
    /// On the capture socket before it (set by the kernel push-down, which says where the
    /// program's maps are pinned when it has maps; a user's `placed=kernel` has no pin).
    Kernel { pin: Option<PathBuf> },
    /// In the space the filter is placed in (`placed=user`).
    User,
}

impl Side {
    /// The value of `placed=`: `user` or `kernel`.
    pub fn parse(v: &str) -> Result<Side, String> {
        match v {
            "user" => Ok(Side::User),
            "kernel" => Ok(Side::Kernel { pin: None }),
            _ => Err(format!("placed={v}: expected user or kernel")),
        }
    }

    pub fn is_kernel(&self) -> bool {
        matches!(self, Side::Kernel { .. })
    }

    /// `user` or `kernel` (the pin is internal, not printed).
    pub fn name(&self) -> &'static str {
        match self {
            Side::Kernel { .. } => "kernel",
            Side::User => "user",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A program a capture source attaches to its socket for the filter after it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum KernelAttach {
    /// A pcap-filter expression, compiled to classic BPF (`rx | bpf "E"`).
    Cbpf(String),
    /// An eBPF program of a NIC-FIX filter: its filter name and parameters in the form
    /// the filter library encodes and decodes (`flowcount flows=1024`), and the bpffs
    /// directory its maps are pinned under.
    Ebpf { program: String, pin: PathBuf },
}

impl fmt::Display for KernelAttach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelAttach::Cbpf(e) => write!(f, "cbpf({e:?})"),
            KernelAttach::Ebpf { program, pin } => {
                write!(f, "ebpf({program:?} pinned at {})", pin.display())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn space_values_parse_to_their_kind_and_print_back() {
        use SpaceName::*;
        assert_eq!(
            SpaceSpec::parse("local"),
            Ok(SpaceSpec::Runtime(vec![Local]))
        );
        assert_eq!(SpaceSpec::parse("0"), Ok(SpaceSpec::Runtime(vec![Local])));
        assert_eq!(
            SpaceSpec::parse("t3"),
            Ok(SpaceSpec::Runtime(vec![Thread(3)]))
        );
        assert_eq!(
            SpaceSpec::parse("1,p2"),
            Ok(SpaceSpec::Runtime(vec![Thread(1), Process(2)]))
        );
        assert_eq!(
            SpaceSpec::parse("kernel"),
            Ok(SpaceSpec::Planner {
                kind: Some(PinKind::Kernel),
                cpu: None
            })
        );
        assert_eq!(
            SpaceSpec::parse("thread:7"),
            Ok(SpaceSpec::Planner {
                kind: Some(PinKind::Thread),
                cpu: Some(7)
            })
        );
        assert_eq!(
            SpaceSpec::parse("cpu3"),
            Ok(SpaceSpec::Planner {
                kind: None,
                cpu: Some(3)
            })
        );
        for v in [
            "local", "2", "p3", "1,2", "kernel", "thread:7", "cpu3", "user",
        ] {
            assert_eq!(SpaceSpec::parse(v).unwrap().to_string(), v);
        }
        for (v, why) in [
            ("x9", "expected 'local'"),
            ("t", "expected 'local'"),
            ("p0", "expected 'local'"),
            ("1,,2", "an empty space"),
            ("thread:x", "'x' is not a CPU"),
            ("cpux", "cpuN"),
            ("gpu:1", "expected"),
        ] {
            let e = SpaceSpec::parse(v).unwrap_err();
            assert!(
                e.starts_with(&format!("space={v}: ")) && e.contains(why),
                "{v}: {e}"
            );
        }
    }

    proptest! {
        /// Any text: a value or an error naming it, never a panic; a value prints back to
        /// text that parses to the same value.
        #[test]
        fn space_parse_is_total_and_round_trips(v in "[a-z0-9:,]{0,12}") {
            match SpaceSpec::parse(&v) {
                Ok(s) => prop_assert_eq!(SpaceSpec::parse(&s.to_string()), Ok(s)),
                Err(e) => prop_assert!(e.starts_with(&format!("space={}: ", v)), "{}", e),
            }
        }
    }

    #[test]
    fn placed_parses_user_and_kernel_and_names_a_bad_value() {
        assert_eq!(Side::parse("user"), Ok(Side::User));
        assert_eq!(Side::parse("kernel"), Ok(Side::Kernel { pin: None }));
        let e = Side::parse("moon").unwrap_err();
        assert!(
            e.contains("placed=moon") && e.contains("user or kernel"),
            "{e}"
        );
        assert_eq!(Side::parse("user").unwrap().to_string(), "user");
    }
}
