//! `RingRef::open_owned`: a named ring is trusted by the owner of its files, not by its
//! name (anyone may create any name under /dev/shm), its data segment is mapped read-only,
//! and a link under the name is not followed. Needs root (to give files to uid 65534).

use beltway::{Error, RingConfig, RingRef, Writer};
use std::os::fd::AsRawFd;

struct Names(Vec<String>);
impl Drop for Names {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = std::fs::remove_file(format!("/dev/shm/{n}"));
        }
    }
}

fn require_root() {
    assert_eq!(
        beltway::sys::getuid(),
        0,
        "this test needs root (it gives a ring's files to uid 65534)"
    );
}

/// Whether descriptor `fd` of this process was opened for writing.
fn writable(fd: i32) -> bool {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
        .unwrap();
    flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32
}

#[test]
fn a_ring_is_trusted_by_the_owner_of_its_files_and_mapped_read_only() {
    require_root();
    let name = format!("bt-owned-{}", std::process::id());
    let link = format!("{name}-link");
    let _names = Names(vec![name.clone(), format!("{name}.ctl"), link.clone()]);
    let _w = Writer::create_named(&name, RingConfig::bytes(1 << 16)).unwrap();
    // Root's ring: root's to open; not uid 65534's.
    let r = RingRef::open_owned(&name, 0, true).unwrap();
    let fds: Vec<i32> = r.shared().fds().iter().map(|f| f.as_raw_fd()).collect();
    assert_eq!(fds.len(), 2, "data and control segments");
    assert!(!writable(fds[0]), "the data segment is mapped read-only");
    assert!(writable(fds[1]), "the control segment holds reader slots");
    let observer = RingRef::open_owned(&name, 0, false).unwrap();
    assert_eq!(
        observer.shared().fds().len(),
        1,
        "an observer maps no control segment"
    );
    match RingRef::open_owned(&name, 65534, false) {
        Err(Error::Permission { what, .. }) => {
            assert!(
                what.contains("belongs to uid 0, not to uid 65534"),
                "{what}"
            )
        }
        other => panic!("{other:?}"),
    }
    // The same files given to uid 65534 (what it could have created under this name):
    // not root's, whatever the name says.
    for f in [&name, &format!("{name}.ctl")] {
        std::os::unix::fs::chown(format!("/dev/shm/{f}"), Some(65534), Some(65534)).unwrap();
    }
    match RingRef::open_owned(&name, 0, true) {
        Err(Error::Permission { what, .. }) => {
            assert!(
                what.contains("belongs to uid 65534, not to uid 0"),
                "{what}"
            )
        }
        other => panic!("{other:?}"),
    }
    // A link under another name is not followed.
    std::os::unix::fs::symlink(format!("/dev/shm/{name}"), format!("/dev/shm/{link}")).unwrap();
    match RingRef::open_owned(&link, 65534, false) {
        Err(Error::Os { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ELOOP), "{source}")
        }
        other => panic!("{other:?}"),
    }
}
