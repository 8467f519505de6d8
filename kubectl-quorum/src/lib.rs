//! `kubectl quorum`: one vocabulary for Quorum's four kinds of cluster (`EtcdCluster`,
//! `MySQLCluster`, `RedisCluster`, `MongoDBReplicaSet`).
//!
//! - [`target`]: which cluster a command means (`<kind>/<name>`, kinds by any of their names);
//! - [`view`]: what `status` shows, built from the cluster's own status by a pure function per
//!   engine, printed as text or JSON;
//! - [`actions`]: what `pause`, `resume`, `switchover` and `backup` write: the same annotations
//!   and objects a person could write by hand, built here without I/O, refused with a message
//!   that says what to do instead when the engine has no such action;
//! - [`credentials`]: how to connect (Services, accounts, the Secrets of their passwords),
//!   never a password unless asked for;
//! - [`connect`]: the `kubectl exec` that opens the engine's own client in the right member.

pub mod actions;
pub mod connect;
pub mod credentials;
pub mod target;
pub mod view;
