//! Batched UDP sockets for the ports a policy names (issue 18, part 2). Not written yet.

/// Flush batched sends before the thread blocks.
pub fn before_block() {}
