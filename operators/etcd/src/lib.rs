//! Quorum's etcd operator.
//!
//! - [`crd`]: the `EtcdCluster` and `EtcdBackup` resources; the CRDs are generated from these
//!   types, which embed the shared fragments of [`quorum_core::crd`].

pub mod admin;
pub mod admission;
pub mod backup;
pub mod backup_controller;
pub mod crd;
pub mod decide;
pub mod execute;
pub mod observe;
pub mod packaging;
pub mod reasons;
pub mod reconcile;
pub mod resolver;
pub mod resources;
pub mod restore;
pub mod status;

/// The operator's name: its field manager, event reporter and `app.kubernetes.io/managed-by`.
pub const OPERATOR_NAME: &str = "quorum-etcd-operator";
