//! Fixed system models for the tests, loaded from tests/golden/systems/*.json, and the
//! real filter library handed to the control plane as `streamline` hands it over.

#![allow(dead_code)]

use control::{Filters, SystemModel};
use std::path::PathBuf;

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

pub fn system(name: &str) -> SystemModel {
    let p = dir().join("systems").join(format!("{name}.json"));
    SystemModel::load(&p).unwrap_or_else(|e| panic!("{e}"))
}

/// The native filter library (`filters` is a dev-dependency of control only).
pub fn filters() -> Filters {
    Filters {
        registry: filters::REGISTRY,
        resolver: &filters::Natives,
        multiqueue: filters::live::multiqueue,
        kernel_placement: filters::live::kernel_placement,
    }
}
