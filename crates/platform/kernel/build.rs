//! Compiles the eBPF programs in `bpf/*.bpf.c` (the NIC-FIX socket filters) with clang into
//! `$OUT_DIR/NAME.bpf.o`; `src/ebpf.rs` embeds the objects. Needs clang (BPF target) and
//! the libbpf headers (`bpf/bpf_helpers.h`, Debian package libbpf-dev): `scripts/setup`
//! installs both. `CLANG=/path/to/clang` picks another compiler.

use std::path::PathBuf;
use std::process::Command;

const PROGRAMS: [&str; 3] = ["flowcount", "sample", "bytecount"];

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-changed=bpf/nicfix.h");
    // The target's multiarch include dir holds asm/types.h, which linux/bpf.h needs.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    for p in PROGRAMS {
        let src = format!("bpf/{p}.bpf.c");
        println!("cargo:rerun-if-changed={src}");
        let obj = out.join(format!("{p}.bpf.o"));
        let res = Command::new(&clang)
            .args([
                "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror",
            ])
            .arg(format!("-I{multiarch}"))
            .args(["-c", &src, "-o"])
            .arg(&obj)
            .output();
        match res {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "\n\nbuilding the eBPF programs needs clang, which was not found ('{clang}': {e}).\n\
                 Install it with `apt-get install clang llvm libbpf-dev` (or run scripts/setup),\n\
                 or point CLANG= at a clang that has the BPF target.\n"
            ),
            Err(e) => panic!("running clang ('{clang}') to compile {src}: {e}"),
            Ok(o) if !o.status.success() => panic!(
                "\n\nclang failed to compile the eBPF program {src} (needs clang's BPF target and the libbpf\n\
                 headers, Debian package libbpf-dev; scripts/setup installs them):\n{}\n",
                String::from_utf8_lossy(&o.stderr)
            ),
            Ok(_) => {}
        }
    }
}
