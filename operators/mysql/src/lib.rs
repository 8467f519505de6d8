//! Quorum's MySQL/MariaDB operator.
//!
//! - [`crd`]: the `MySQLCluster` and `MySQLBackup` resources; the CRDs are generated from these
//!   types.
//! - [`admin`]: the server's own SQL admin interface, one [`admin::dialect::Dialect`] per
//!   flavor (MySQL, MariaDB); the only place that speaks to a server.
//! - [`observe`], [`decide`], [`execute`]: the availability-aware loop: tri-state health from
//!   what each member and the replicas say, a pure decision, one safe step.
//! - [`resources`] and [`status`]: pure builders of the Kubernetes objects and the status.
//! - [`restore`]: reading a `MySQLBackup`'s stored snapshot back into a new cluster's member.
//! - [`reasons`]: the catalogue of reasons a pass reports, with the severity of each wait.
//! - [`reconcile`]: the short story that ties them together.

pub mod address;
pub mod admin;
pub mod backup_controller;
pub mod crd;
pub mod decide;
pub mod execute;
pub mod observe;
pub mod packaging;
pub mod reasons;
pub mod reconcile;
pub mod resources;
pub mod restore;
pub mod status;

/// The operator's name: its field manager, event reporter and `app.kubernetes.io/managed-by`.
pub const OPERATOR_NAME: &str = "quorum-mysql-operator";

/// The MySQL/MariaDB operator, as its process (`main.rs`) and its tests start it.
pub struct MySqlOperator;

impl quorum_core::runner::Operator for MySqlOperator {
    const NAME: &'static str = OPERATOR_NAME;
    type Settings = reconcile::Settings;
    type State = reconcile::State;

    fn state(
        settings: reconcile::Settings,
        calls: quorum_core::runner::AdminCalls,
        metrics: &quorum_core::metrics::Metrics,
    ) -> reconcile::State {
        reconcile::State {
            clients: observe::MySqlClients::new(calls, metrics.admin.clone()),
            settings,
        }
    }

    fn controllers(
        runtime: &quorum_core::runner::Runtime,
        context: std::sync::Arc<quorum_core::runner::Context<reconcile::State>>,
    ) -> Vec<futures::future::BoxFuture<'static, ()>> {
        let clusters = runtime.cluster_controller::<crd::MySQLCluster, _, _, _, _>(
            context.clone(),
            reconcile::reconcile,
            resources::APP,
        );
        let backups = runtime
            .leaf_controller::<crd::MySQLBackup, _, _, _, _>(context, backup_controller::reconcile_backup);
        vec![clusters, backups]
    }
}
