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

/// The operator's controllers: its clusters' passes and its backups'. The process (`main.rs`)
/// and the tests run exactly these, so what is tested is what is deployed.
pub fn controllers(
    runtime: &quorum_core::runner::Runtime,
    context: std::sync::Arc<quorum_core::runner::Context<reconcile::State>>,
) -> Vec<futures::future::BoxFuture<'static, ()>> {
    let clusters = runtime.cluster_controller::<crd::EtcdCluster, _, _, _, _>(
        context.clone(),
        reconcile::reconcile,
        resources::APP,
    );
    let backups =
        runtime.leaf_controller::<crd::EtcdBackup, _, _, _, _>(context, backup_controller::reconcile_backup);
    vec![clusters, backups]
}
