//! Fixed system models for the tests, loaded from tests/golden/systems/*.json.

#![allow(dead_code)]

use control::SystemModel;
use std::path::PathBuf;

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

pub fn system(name: &str) -> SystemModel {
    let p = dir().join("systems").join(format!("{name}.json"));
    SystemModel::load(&p).unwrap_or_else(|e| panic!("{e}"))
}
