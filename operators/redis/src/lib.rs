//! Quorum's Redis operator.
//!
//! - [`admin`]: Redis's own admin commands (`CLUSTER`, `REPLICAOF`, `SENTINEL`, replication-protocol
//!   RDB snapshots), the only place that speaks to a server.

pub mod admin;
