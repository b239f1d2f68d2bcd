//! Read-only file mappings (the only unsafe code of this crate).
#![allow(unsafe_code)]

use std::fs::File;
use std::path::Path;

/// A file mapped read-only into this process.
#[derive(Debug)]
pub struct FileMap {
    map: Option<memmap2::Mmap>,
}

impl FileMap {
    pub fn open(path: &Path) -> std::io::Result<FileMap> {
        let f = File::open(path)?;
        if f.metadata()?.len() == 0 {
            return Ok(FileMap { map: None });
        }
        // SAFETY: the mapping is private and read-only. Streamline never writes the file;
        // if another process truncated it while mapped, access could fault (SIGBUS), the
        // documented hazard of every mmap-based reader (libpcap, tcpdump -r included).
        let map = unsafe { memmap2::Mmap::map(&f)? };
        Ok(FileMap { map: Some(map) })
    }
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
    pub fn len(&self) -> usize {
        self.bytes().len()
    }
}
