//! Prefix sharing (thesis 6.4): a second pipeline that starts with the same stateless
//! filters on the same source reuses the running instances instead of starting its own.
//! The registry is a trie of running instances keyed by (parent instance, filter
//! descriptor) with reference counts; a stateful filter is never shared, and nothing
//! after it is either.

use std::collections::HashMap;

/// A filter as far as sharing is concerned: name, parameters and options, canonical.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FilterKey {
    pub desc: String,
    /// Stateless filters compute the same output for the same input whoever asks.
    pub stateless: bool,
}

impl FilterKey {
    pub fn new(desc: impl Into<String>, stateless: bool) -> FilterKey {
        FilterKey { desc: desc.into(), stateless }
    }
}

pub type InstanceId = usize;

#[derive(Clone, Debug)]
struct Instance {
    parent: Option<InstanceId>,
    key: FilterKey,
    refs: usize,
}

/// What attaching a pipeline did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    /// One instance per filter of the pipeline, in order.
    pub instances: Vec<InstanceId>,
    /// How many leading filters reused running instances.
    pub shared: usize,
}

/// The running instances.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    instances: HashMap<InstanceId, Instance>,
    index: HashMap<(Option<InstanceId>, FilterKey), InstanceId>,
    next: InstanceId,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Number of running instances.
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// Attaches a linear pipeline (source first). Leading stateless filters whose whole
    /// prefix is already running are reused; the rest are new instances.
    pub fn attach(&mut self, pipeline: &[FilterKey]) -> Attached {
        let mut parent = None;
        let mut sharing = true;
        let mut shared = 0;
        let mut out = Vec::with_capacity(pipeline.len());
        for key in pipeline {
            let reuse = if sharing && key.stateless {
                self.index.get(&(parent, key.clone())).copied()
            } else {
                None
            };
            let id = match reuse {
                Some(id) => {
                    self.instances.get_mut(&id).expect("indexed instance exists").refs += 1;
                    shared += 1;
                    id
                }
                None => {
                    sharing = false;
                    let id = self.next;
                    self.next += 1;
                    self.instances.insert(id, Instance { parent, key: key.clone(), refs: 1 });
                    if key.stateless {
                        self.index.insert((parent, key.clone()), id);
                    }
                    id
                }
            };
            out.push(id);
            parent = Some(id);
        }
        Attached { instances: out, shared }
    }

    /// Detaches a pipeline: drops one reference from each of its instances and stops
    /// those no one uses any more. Returns the stopped instances, last first.
    pub fn detach(&mut self, attached: &Attached) -> Vec<InstanceId> {
        let mut stopped = Vec::new();
        for &id in attached.instances.iter().rev() {
            let Some(inst) = self.instances.get_mut(&id) else { continue };
            inst.refs -= 1;
            if inst.refs == 0 {
                let inst = self.instances.remove(&id).expect("present");
                self.index.remove(&(inst.parent, inst.key));
                stopped.push(id);
            }
        }
        stopped
    }

    pub fn refs(&self, id: InstanceId) -> usize {
        self.instances.get(&id).map_or(0, |i| i.refs)
    }
}

/// Is a native filter stateless (shareable)? Header and metadata classifiers and
/// stateless inspectors are; counters, dedup, reassembly, editing with keys and sinks
/// are not.
pub fn stateless(filter: &str) -> bool {
    use dataplane::Access::*;
    if filter == "rx" || filter == "bpf" {
        return true;
    }
    match filters::find(filter) {
        Some(s) => matches!(s.access, Metadata | Classification | Inspection | Source) && !matches!(filter, "dedup" | "tcpstream" | "sample"),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(d: &str) -> FilterKey {
        FilterKey::new(d, true)
    }

    #[test]
    fn second_pipeline_reuses_the_common_stateless_prefix() {
        let mut r = Registry::new();
        let a = r.attach(&[k("rx eth0"), k("ip"), k("tcp"), FilterKey::new("count", false)]);
        assert_eq!(a.shared, 0);
        assert_eq!(r.len(), 4);
        let b = r.attach(&[k("rx eth0"), k("ip"), k("udp")]);
        assert_eq!(b.shared, 2);
        assert_eq!(&b.instances[..2], &a.instances[..2]);
        assert_ne!(b.instances[2], a.instances[2]);
        assert_eq!(r.len(), 5);
        assert_eq!(r.refs(a.instances[0]), 2);
    }

    #[test]
    fn stateful_filters_and_what_follows_are_never_shared() {
        let mut r = Registry::new();
        let a = r.attach(&[k("rx eth0"), FilterKey::new("dedup", false), k("ip")]);
        let b = r.attach(&[k("rx eth0"), FilterKey::new("dedup", false), k("ip")]);
        assert_eq!(b.shared, 1);
        assert_ne!(a.instances[1], b.instances[1]);
        assert_ne!(a.instances[2], b.instances[2]);
    }

    #[test]
    fn different_sources_or_parameters_share_nothing() {
        let mut r = Registry::new();
        r.attach(&[k("rx eth0"), k("ip")]);
        assert_eq!(r.attach(&[k("rx eth1"), k("ip")]).shared, 0);
        assert_eq!(r.attach(&[k("rx eth0"), k("bpf \"udp\"")]).shared, 1);
    }

    #[test]
    fn detach_stops_only_unused_instances() {
        let mut r = Registry::new();
        let a = r.attach(&[k("rx eth0"), k("ip"), k("tcp")]);
        let b = r.attach(&[k("rx eth0"), k("ip"), k("udp")]);
        let stopped = r.detach(&a);
        assert_eq!(stopped, vec![a.instances[2]]);
        assert_eq!(r.len(), 3);
        let stopped = r.detach(&b);
        assert_eq!(stopped, vec![b.instances[2], b.instances[1], b.instances[0]]);
        assert!(r.is_empty());
        // After everything stopped, a new pipeline starts fresh.
        assert_eq!(r.attach(&[k("rx eth0"), k("ip")]).shared, 0);
    }

    #[test]
    fn statelessness_follows_the_access_class() {
        assert!(stateless("ip"));
        assert!(stateless("bpf"));
        assert!(!stateless("count"));
        assert!(!stateless("dedup"));
        assert!(!stateless("nosuch"));
    }
}
