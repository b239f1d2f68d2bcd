//! Typed errors of a filter's construction ([`FilterError`]). A filter's `make` and
//! [`crate::Args`] return them; [`crate::BuildError`] says which node of the pipeline
//! failed. Messages name the key, the value and what was expected, without the filter's
//! name (the node label in front of them says it once).

/// What constructing a filter found wrong.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// A parameter's value is not one the filter accepts.
    #[error("parameter {key}={value}: expected {expected}")]
    BadValue { key: String, value: String, expected: String },
    /// A parameter the filter cannot do without.
    #[error("missing parameter '{key}' ({expected})")]
    Missing { key: String, expected: String },
    /// An operating-system resource the filter needs: a file, a socket, a device.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A ring the filter opens or creates (a shared prefix, an exported stream).
    #[error("{what}: {source}")]
    Ring {
        what: String,
        #[source]
        source: beltway::Error,
    },
    /// A rule of the filter its parameters break together, or a resource it refuses, in
    /// words (filters whose checks are not yet typed say it this way).
    #[error("{0}")]
    Rule(String),
}

impl FilterError {
    /// A [`FilterError::BadValue`].
    pub fn bad(key: &str, value: &str, expected: &str) -> FilterError {
        FilterError::BadValue { key: key.to_string(), value: value.to_string(), expected: expected.to_string() }
    }
}

impl From<String> for FilterError {
    fn from(s: String) -> FilterError {
        FilterError::Rule(s)
    }
}

impl From<&str> for FilterError {
    fn from(s: &str) -> FilterError {
        FilterError::Rule(s.to_string())
    }
}

/// For code that still speaks in messages (the conversion `?` uses).
impl From<FilterError> for String {
    fn from(e: FilterError) -> String {
        e.to_string()
    }
}
