//! What the control plane knows of the filter library, handed to it by its caller.
//!
//! The control plane reads filter declarations (implementations, spaces, access class,
//! replication, kernel forms) and runs two graph passes that are written in the filter
//! library (`rx queues=N` engines and the kernel push-down; see [`crate::rewrite`]). It
//! does not depend on the library crate for them: that crate brings the kernel plane
//! (libbpf, libpcap, libxdp) with it. Whoever drives the control plane (the `streamline`
//! command, the benchmarks, tomorrow the daemon) builds one [`Filters`] value from the
//! library and passes it in; it is `Copy` and `'static`, so it hands over to threads and
//! daemons as is.
//!
//! This module owns only that value and the questions asked of it; what the answers mean
//! lives where they are used (`model`, `prefix`, `realize`, `planner`, `rewrite`).

use catalog::FilterSpec;
use lang::Graph;

/// The filter library as the control plane sees it: the declarations, the language
/// resolver over the same names, and the library's graph passes. In the `streamline`
/// command: `catalog::REGISTRY`, `catalog::Natives`, `filters::live::multiqueue` and
/// `filters::live::kernel_placement`.
#[derive(Clone, Copy)]
pub struct Filters {
    /// Every native filter's declaration.
    pub registry: &'static [&'static FilterSpec],
    /// The language's view of the same filters (names, parameter keys, classes).
    pub resolver: &'static (dyn lang::Resolver + Sync),
    /// Pass 4 of [`crate::rewrite::PASSES`]: `rx queues=N` becomes N capture engines.
    pub multiqueue: fn(Graph) -> Graph,
    /// Pass 5 of [`crate::rewrite::PASSES`]: the filter right after `rx` goes onto its socket.
    pub kernel_placement: fn(Graph) -> Graph,
}

impl Filters {
    /// The declaration of the native filter `name`.
    pub fn find(&self, name: &str) -> Option<&'static FilterSpec> {
        self.registry.iter().copied().find(|s| s.name == name)
    }

    /// Does `name` run in the kernel when it follows `rx` directly
    /// (`FilterSpec::runs_after_rx_in_kernel`)? False for a name that is not native.
    pub fn runs_after_rx_in_kernel(&self, name: &str) -> bool {
        self.find(name)
            .is_some_and(FilterSpec::runs_after_rx_in_kernel)
    }
}

impl std::fmt::Debug for Filters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filters")
            .field(
                "registry",
                &self.registry.iter().map(|s| s.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The real library, for this crate's tests (`filters` is a dev-dependency only).
#[cfg(test)]
pub(crate) fn native() -> Filters {
    Filters {
        registry: filters::REGISTRY,
        resolver: &filters::Natives,
        multiqueue: filters::live::multiqueue,
        kernel_placement: filters::live::kernel_placement,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_answered_from_the_registry_handed_in() {
        let lib = native();
        assert_eq!(lib.find("grep").map(|s| s.name), Some("grep"));
        assert!(lib.find("nosuch").is_none());
        assert!(lib.runs_after_rx_in_kernel("bpf") && lib.runs_after_rx_in_kernel("flowcount"));
        assert!(!lib.runs_after_rx_in_kernel("grep") && !lib.runs_after_rx_in_kernel("nosuch"));
        // A registry handed in is all the control plane knows: without `grep`, no `grep`.
        static ONLY_BPF: [&FilterSpec; 1] = [&catalog::bpf::BPF];
        let small = Filters {
            registry: &ONLY_BPF,
            ..lib
        };
        assert!(small.find("grep").is_none());
        assert!(small.find("bpf").is_some());
        assert!(format!("{small:?}").contains("\"bpf\""), "{small:?}");
    }
}
