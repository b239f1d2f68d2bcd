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
    /// An option key the filter does not declare (nor is it a control option).
    #[error("unknown parameter '{key}': it takes {}", words(accepted))]
    Undeclared { key: String, accepted: Vec<&'static str> },
    /// More positional parameters than the filter declares.
    #[error("{given} positional parameters given, it takes {}", positional_words(*most, accepted))]
    Positional { given: usize, most: usize, accepted: Vec<&'static str> },
    /// An operating-system resource the filter needs: a file, a socket, a device.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// What a parameter names or holds is not something the filter can use: a capture
    /// file libpcap would refuse, a packet-filter expression that does not compile, a
    /// kernel program the kernel refuses. `what` names it (empty when the source's message
    /// already does).
    #[error("{}{source}", if what.is_empty() { String::new() } else { format!("{what}: ") })]
    Invalid {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
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

fn words(keys: &[&str]) -> String {
    if keys.is_empty() {
        "no parameters of its own".into()
    } else {
        keys.join(", ")
    }
}

fn positional_words(most: usize, names: &[&str]) -> String {
    match most {
        0 => "none".into(),
        _ => format!("at most {most} ({})", names.join(", ")),
    }
}

impl FilterError {
    /// A [`FilterError::Io`]: `what` names the resource (a path, a device).
    pub fn io(what: impl Into<String>, source: std::io::Error) -> FilterError {
        FilterError::Io { what: what.into(), source }
    }
    /// A [`FilterError::Invalid`].
    pub fn invalid(what: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> FilterError {
        FilterError::Invalid { what: what.into(), source: Box::new(source) }
    }
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
