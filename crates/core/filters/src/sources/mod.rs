//! Sources: capture files (`pcapin`, over [`crate::savefile`]), byte files and stdin,
//! synthetic blocks.
//!
//! One file per source: [`pcapin`], [`bytes`] (`file`, `stdin`), [`gen`].

pub mod bytes;
pub mod gen;
pub mod pcapin;

pub use bytes::{FileIn, StdinIn};
pub use gen::{Gen, GenRing};
pub use pcapin::PcapIn;
