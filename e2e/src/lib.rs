//! Test support for Quorum's integration tests.
//!
//! - [`control_plane`]: a client for the local control plane started by `e2e/cluster.sh`, and
//!   throwaway namespaces. Tests that need it fail loudly when it is not running: there is no
//!   silent skip.
//! - [`etcd`]: real etcd processes on distinct loopback addresses.
//! - [`redis`]: real `redis-server` and `redis-sentinel` processes on distinct loopback addresses.
//! - [`mariadb`]: real MariaDB processes on distinct loopback addresses.
//! - [`local_members`]: real database processes standing in for member pods on KWOK nodes.
//! - [`fault_proxy`]: a TCP proxy that blackholes, delays, resets or cuts one direction.
//! - [`s3`]: a real S3-compatible server process (`gofakes3`, in memory) with one bucket.
//! - [`tools`]: where the pinned, Go-built binaries are.
//! - [`wait`]: polling with a deadline, for conditions that become true eventually.

pub mod control_plane;
pub mod etcd;
pub mod fault_proxy;
pub mod local_members;
pub mod mariadb;
pub mod redis;
pub mod s3;
pub mod tools;
pub mod wait;
