//! Test support for Quorum's integration tests.
//!
//! - [`control_plane`]: a client for the local control plane started by `e2e/cluster.sh`, and
//!   throwaway namespaces. Tests that need it fail loudly when it is not running: there is no
//!   silent skip.
//! - [`wait`]: polling with a deadline, for conditions that become true eventually.

pub mod control_plane;
pub mod wait;
