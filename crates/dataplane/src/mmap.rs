//! Read-only file mappings (the only unsafe code of this crate).
#![allow(unsafe_code)]

use std::fs::File;
use std::path::Path;

/// A file mapped read-only into this process.
#[derive(Debug)]
pub struct FileMap {
    map: Option<memmap2::Mmap>,
    /// Bytes from the start whose page-table entries [`FileMap::prefetch`] has populated.
    populated: std::cell::Cell<usize>,
}

/// How much [`FileMap::prefetch`] populates at once (one madvise per step).
const POPULATE_STEP: usize = 4 << 20;

impl FileMap {
    pub fn open(path: &Path) -> std::io::Result<FileMap> {
        let f = File::open(path)?;
        if f.metadata()?.len() == 0 {
            return Ok(FileMap { map: None, populated: 0.into() });
        }
        // SAFETY: the mapping is private and read-only. Streamline never writes the file;
        // if another process truncated it while mapped, access could fault (SIGBUS), the
        // documented hazard of every mmap-based reader (libpcap, tcpdump -r included).
        let map = unsafe { memmap2::Mmap::map(&f)? };
        Ok(FileMap { map: Some(map), populated: 0.into() })
    }
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
    /// Ask the CPU to start loading bytes `from..to` into its caches (a hint; out-of-range
    /// parts are ignored). Sources that walk a mapped file record by record, like pcapin,
    /// run this some distance ahead: each record's header is then in cache when they read
    /// it, instead of costing one memory round trip per record.
    ///
    /// A CPU prefetch of a page not yet mapped is dropped, so the page-table entries are
    /// populated first, a few MiB at a time (`MADV_POPULATE_READ`, Linux 5.14; where the
    /// kernel lacks it, pages fault in on first touch as before).
    pub fn prefetch(&self, from: usize, to: usize) {
        let b = self.bytes();
        let to = to.min(b.len());
        let done = self.populated.get();
        if to > done {
            if let Some(m) = &self.map {
                let len = (to - done).max(POPULATE_STEP).min(b.len() - done);
                let _ = m.advise_range(memmap2::Advice::PopulateRead, done, len);
                self.populated.set(done + len);
            }
        }
        let mut at = from - from % 64;
        while at < to {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `at < b.len()`, so the address lies inside the mapping; prefetch is
            // only a hint and never faults or changes memory.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(b.as_ptr().add(at) as *const i8);
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = b[at];
            at += 64;
        }
    }
    pub fn len(&self) -> usize {
        self.bytes().len()
    }
}
