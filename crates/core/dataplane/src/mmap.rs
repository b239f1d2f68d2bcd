//! Read-only file mappings (with `readiness::sys`, the only unsafe code of this crate).
#![allow(unsafe_code)]

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

/// A file mapped read-only into this process. Cheap to clone, and `Send + Sync`: a source
/// may hand a clone to a helper thread (pcapin's indexer walks the record headers on one
/// CPU while the space reads the packets on another); the mapping lives until the last
/// clone is dropped.
#[derive(Debug, Clone, Default)]
pub struct FileMap {
    map: Option<Arc<memmap2::Mmap>>,
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
        Ok(FileMap {
            map: Some(Arc::new(map)),
        })
    }
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().map_or(&[], |m| &m[..])
    }
    /// Populate the page-table entries of bytes `from..to` (`MADV_POPULATE_READ`, Linux
    /// 5.14; where the kernel lacks it, pages fault in on first touch as before). A CPU
    /// prefetch of a page not yet mapped is dropped, so a reader that prefetches populates
    /// first, a few MiB at a time.
    pub fn populate(&self, from: usize, to: usize) {
        if let Some(m) = &self.map {
            let to = to.min(m.len());
            if from < to {
                let _ = m.advise_range(memmap2::Advice::PopulateRead, from, to - from);
            }
        }
    }
    /// Ask the CPU to start loading bytes `from..to` into its caches (a hint; out-of-range
    /// parts are ignored). Sources that walk a mapped file record by record run this some
    /// distance ahead: each record's header is then in cache when they read it, instead of
    /// costing one memory round trip per record.
    #[inline]
    pub fn prefetch(&self, from: usize, to: usize) {
        let b = self.bytes();
        let to = to.min(b.len());
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
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
