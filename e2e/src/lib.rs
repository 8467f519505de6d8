//! Test support for Quorum's integration tests.
//!
//! - [`admission`]: table-driven admission tests (rows of a change and the expected acceptance
//!   or refusal naming the field), with the rows every engine's resources share.
//! - [`control_plane`]: a client for the local control plane started by `e2e/cluster.sh`, and
//!   throwaway namespaces. Tests that need it fail loudly when it is not running: there is no
//!   silent skip.
//! - [`etcd`]: real etcd processes on distinct loopback addresses.
//! - [`redis`]: real `redis-server` and `redis-sentinel` processes on distinct loopback addresses.
//! - [`mariadb`]: real MariaDB processes on distinct loopback addresses.
//! - [`mongo`]: MongoDB replica-set members on distinct loopback addresses: the simulator below,
//!   or a real `mongod` when `QUORUM_MONGOD` names one.
//! - [`mongo_sim`]: a MongoDB replica-set **simulator** (the `mongo-sim` binary), not MongoDB.
//!   MongoDB's server cannot be installed on these machines, so the MongoDB admin layer is tested
//!   against this stand-in: it speaks the real wire protocol to the real `mongodb` driver and
//!   enforces the replica set's rules (elections, majority commit, reconfiguration checks,
//!   SCRAM authentication), with members as separate processes talking over TCP. What it does
//!   not do is listed in its module documentation.
//! - [`local_members`]: real database processes standing in for member pods on KWOK nodes.
//! - [`fault_proxy`]: a TCP proxy that blackholes, delays, resets or cuts one direction.
//! - [`helm`]: an operator installed from its Helm chart, its ServiceAccount's token at hand.
//! - [`history`]: a client history of writes, checked for lost acknowledged writes.
//! - [`idle`]: what passes over a settled cluster cost the API server (nothing, but a read of
//!   what changed).
//! - [`operator`]: an operator run in the test process, with the tests' short timeouts.
//! - [`olm`]: real OLM v0 out of cluster, and catalogs of inline bundles served by `opm serve`.
//! - [`real_node`]: the real node, where pods are real containers: placing pods there, reaching
//!   them through Services, `kubectl exec` and `logs`.
//! - [`s3`]: a real S3-compatible server process (`gofakes3`, in memory) with one bucket.
//! - [`tools`]: where the pinned, Go-built binaries are.
//! - [`wait`]: polling with a deadline, for conditions that become true eventually.

pub mod admission;
pub mod backups;
pub mod control_plane;
pub mod diagnostics;
pub mod etcd;
pub mod fault_proxy;
pub mod helm;
pub mod history;
pub mod idle;
pub mod local_members;
pub mod mariadb;
pub mod mongo;
pub mod mongo_sim;
pub mod olm;
pub mod operator;
pub mod real_node;
pub mod real_pods;
pub mod redis;
pub mod s3;
pub mod tls;
pub mod tools;
pub mod wait;
