//! Helpers shared by the end-to-end tests of the `streamline` command.

/// The block total of `count`'s summary line (`count: N blocks, M bytes`) in a run's
/// stderr; panics with the whole output when there is none.
pub fn count_of(err: &str) -> u64 {
    err.lines()
        .find_map(|l| l.strip_prefix("count: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count:\n{err}"))
}
