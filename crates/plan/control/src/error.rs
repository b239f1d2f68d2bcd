//! Typed errors, one enum per operation: reading a system model, building the request
//! model from a pipeline, optimizing.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum SystemError {
    #[error("cannot read {path}: {err}")]
    Io { path: String, err: String },
    #[error("system model is not valid JSON: {0}")]
    Parse(String),
    #[error("invalid system model: {0}")]
    Invalid(String),
    #[error("{path}: {err}")]
    InFile { path: String, err: Box<SystemError> },
}

/// Turning a parsed pipeline into the optimizer's request model.
#[derive(Debug, Error)]
pub enum RequestError {
    #[error("{0}")]
    Parse(String),
    #[error("filter '{0}' has no implementation the control plane knows")]
    UnknownFilter(String),
    #[error("filter '{filter}' (node {node}): bad option {key}={value}: {why}")]
    BadOption {
        filter: String,
        node: usize,
        key: String,
        value: String,
        why: String,
    },
    #[error("the pipeline has a cycle through '{0}'; the planner handles acyclic pipelines only")]
    Cycle(String),
    #[error("the pipeline has no source")]
    NoSource,
}

/// Optimizing a request on a system.
#[derive(Debug, Error)]
pub enum PlanError {
    #[error("filter '{filter}' (node {node}) cannot be placed: {why}")]
    Impossible {
        filter: String,
        node: usize,
        why: String,
    },
    #[error("no placement fits: {0}")]
    Infeasible(String),
    #[error("solver failed: {0}")]
    Solver(String),
}

/// Planning a pipeline text: either step can fail.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Plan(#[from] PlanError),
}
