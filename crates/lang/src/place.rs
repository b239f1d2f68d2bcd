//! Typed placement decisions carried on a filter node ([`crate::NodeKind::Filter`]'s
//! `place`): which side of the kernel boundary a filter with a kernel and a user
//! implementation runs on ([`Side`], from the user's `placed=user` or the kernel
//! push-down), and what the capture source runs on its socket for the filter after it
//! ([`KernelAttach`], written only by the push-down). This module owns these types, their
//! parse from the one user-writable word (`placed=`) and their print; the rewrites that
//! set them live in `control::rewrite` (and the passes it calls).

use std::fmt;
use std::path::PathBuf;

/// A filter node's placement decisions. Every field is `None` until the user or a
/// rewrite pass decides it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Kernel or user implementation (`placed=`).
    pub side: Option<Side>,
    /// On a capture source: the program its socket runs for the filter after it.
    pub kernel: Option<KernelAttach>,
}

impl Placement {
    pub fn is_empty(&self) -> bool {
        self.side.is_none() && self.kernel.is_none()
    }
}

/// Which implementation of a filter with a kernel and a user one runs.
#[derive(Clone, Debug, PartialEq, Eq)]
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
            KernelAttach::Ebpf { program, pin } => write!(f, "ebpf({program:?} pinned at {})", pin.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_parses_user_and_kernel_and_names_a_bad_value() {
        assert_eq!(Side::parse("user"), Ok(Side::User));
        assert_eq!(Side::parse("kernel"), Ok(Side::Kernel { pin: None }));
        let e = Side::parse("moon").unwrap_err();
        assert!(e.contains("placed=moon") && e.contains("user or kernel"), "{e}");
        assert_eq!(Side::parse("user").unwrap().to_string(), "user");
    }
}
