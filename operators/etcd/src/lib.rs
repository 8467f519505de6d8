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

/// The etcd operator, as its process (`main.rs`) and its tests start it.
pub struct EtcdOperator;

impl quorum_core::runner::Operator for EtcdOperator {
    const NAME: &'static str = OPERATOR_NAME;
    type Settings = reconcile::Settings;
    type State = reconcile::State;

    fn state(
        settings: reconcile::Settings,
        calls: quorum_core::runner::AdminCalls,
        metrics: &quorum_core::metrics::Metrics,
    ) -> reconcile::State {
        reconcile::State {
            clients: observe::EtcdClients::new(calls, metrics.admin.clone()),
            settings,
        }
    }

    fn controllers(
        runtime: &quorum_core::runner::Runtime,
        context: std::sync::Arc<quorum_core::runner::Context<reconcile::State>>,
    ) -> Vec<futures::future::BoxFuture<'static, ()>> {
        let clusters = runtime.cluster_controller::<crd::EtcdCluster, _, _, _, _>(
            context.clone(),
            reconcile::reconcile,
            resources::APP,
        );
        let backups = runtime
            .leaf_controller::<crd::EtcdBackup, _, _, _, _>(context, backup_controller::reconcile_backup);
        vec![clusters, backups]
    }
}
