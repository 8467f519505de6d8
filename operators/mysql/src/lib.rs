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

use std::sync::Arc;

use kube::runtime::controller::Action;
use quorum_core::{
    ReconcileError,
    metrics::Metrics,
    runner::{AdminCalls, Context, Operator},
};

/// The operator's name: its field manager, event reporter and `app.kubernetes.io/managed-by`.
pub const OPERATOR_NAME: &str = "quorum-mysql-operator";

/// The MySQL/MariaDB operator, as its process (`main.rs`) and its tests start it.
pub struct MySqlOperator;

impl Operator for MySqlOperator {
    const NAME: &'static str = OPERATOR_NAME;
    const APP: &'static str = resources::APP;
    type Settings = reconcile::Settings;
    type State = reconcile::State;
    type Cluster = crd::MySQLCluster;
    type Backup = crd::MySQLBackup;

    fn state(settings: reconcile::Settings, calls: AdminCalls, metrics: &Metrics) -> reconcile::State {
        reconcile::State {
            clients: observe::MySqlClients::new(calls, metrics.admin.clone()),
            settings,
            follow_ups: Default::default(),
        }
    }

    fn reconcile(
        cluster: Arc<crd::MySQLCluster>,
        context: Arc<Context<reconcile::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static {
        reconcile::reconcile(cluster, context)
    }

    fn reconcile_backup(
        backup: Arc<crd::MySQLBackup>,
        context: Arc<Context<reconcile::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static {
        backup_controller::reconcile_backup(backup, context)
    }

    fn run_backup(
        backup: Arc<crd::MySQLBackup>,
        context: Arc<Context<reconcile::State>>,
        run: quorum_core::backup::job::JobRun,
    ) -> impl Future<Output = quorum_core::backup::job::JobOutcome> + Send + 'static {
        backup_controller::run_backup(backup, context, run)
    }
}
