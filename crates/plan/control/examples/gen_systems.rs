//! Writes the fixed system models the golden tests load (tests/golden/systems/).
//! `cargo run -p control --example gen_systems`
use control::system::{Capabilities, SpaceKind, SystemModel};

fn main() {
    let all = [SpaceKind::Kernel, SpaceKind::Thread, SpaceKind::Process];
    let caps = Capabilities {
        bpf: true,
        af_packet: true,
        af_xdp: true,
        fuse: true,
    };
    let mut models = vec![
        ("dual", SystemModel::homogeneous(2, &all, caps.clone())),
        ("quad", SystemModel::homogeneous(4, &all, caps.clone())),
        (
            "dual_threads_only",
            SystemModel::homogeneous(2, &[SpaceKind::Kernel, SpaceKind::Thread], caps.clone()),
        ),
    ];
    // Two NUMA nodes of two CPUs each, no shared LLC across nodes.
    let mut numa = SystemModel::homogeneous(4, &all, caps);
    numa.numa = vec![0, 0, 1, 1];
    numa.caches.retain(|c| c.level == 2);
    numa.caches.push(control::system::Cache {
        level: 3,
        size_kib: 16384,
        cpus: vec![0, 1],
    });
    numa.caches.push(control::system::Cache {
        level: 3,
        size_kib: 16384,
        cpus: vec![2, 3],
    });
    models.push(("numa4", numa));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/systems");
    for (name, m) in models {
        std::fs::write(dir.join(format!("{name}.json")), m.to_json()).unwrap();
    }
}
