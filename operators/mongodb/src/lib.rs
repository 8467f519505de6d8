//! Quorum's MongoDB operator.
//!
//! - [`crd`]: the `MongoDBReplicaSet` and `MongoDBBackup` resources; the CRDs are generated
//!   from these types.
//! - [`admin`]: MongoDB's own admin commands (`replSetInitiate`, `replSetReconfig`,
//!   `replSetStepDown`, `replSetGetStatus`, `setFeatureCompatibilityVersion`) through the
//!   official driver, the only place that speaks to a server.
//! - [`clients`]: cached admin clients with breakers, timeouts and retries.
//! - [`decide`]: the pure decision: from what was observed, the one next step.
//! - [`reasons`]: the catalogue of reasons a pass reports, each wait with its severity.
//! - [`resources`]: pure builders of the Kubernetes objects.
//! - [`reconcile`]: the pass: admit, apply the objects, observe, decide, act, report.
//! - [`observe`]: every member asked about itself, the primary about the set.
//! - [`execute`]: the one step taken (recorded first), and a new set's restore.
//! - [`status`]: status and conditions as pure functions; the recorded change read back typed.
//! - [`archive`]: logical snapshots as BSON archives, dumped from and restored into a set.
//! - [`backup_controller`]: `MongoDBBackup`s, snapshots streamed to their destination.

pub mod admin;
pub mod admission;
pub mod archive;
pub mod backup_controller;
pub mod clients;
pub mod crd;
pub mod decide;
pub mod execute;
pub mod observe;
pub mod packaging;
pub mod pass;
pub mod reasons;
pub mod reconcile;
pub mod resources;
pub mod status;

use std::sync::Arc;

use kube::runtime::controller::Action;
use quorum_core::{
    ReconcileError,
    metrics::Metrics,
    runner::{AdminCalls, Context, Operator},
};

/// The operator's name: its field manager, event reporter and `app.kubernetes.io/managed-by`.
pub const OPERATOR_NAME: &str = "quorum-mongodb-operator";

/// The MongoDB operator, as its process (`main.rs`) and its tests start it.
pub struct MongoDbOperator;

impl Operator for MongoDbOperator {
    const NAME: &'static str = OPERATOR_NAME;
    const APP: &'static str = resources::APP;
    type Settings = reconcile::Settings;
    type State = reconcile::State;
    type Cluster = crd::MongoDBReplicaSet;
    type Backup = crd::MongoDBBackup;

    fn state(settings: reconcile::Settings, calls: AdminCalls, metrics: &Metrics) -> reconcile::State {
        reconcile::State {
            clients: clients::MongoClients::new(calls, metrics.admin.clone()),
            follow_ups: Default::default(),
            settings,
        }
    }

    fn reconcile(
        cluster: Arc<crd::MongoDBReplicaSet>,
        context: Arc<Context<reconcile::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static {
        reconcile::reconcile(cluster, context)
    }

    fn reconcile_backup(
        backup: Arc<crd::MongoDBBackup>,
        context: Arc<Context<reconcile::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static {
        backup_controller::reconcile_backup(backup, context)
    }

    fn run_backup(
        backup: Arc<crd::MongoDBBackup>,
        context: Arc<Context<reconcile::State>>,
        run: quorum_core::backup::job::JobRun,
    ) -> impl Future<Output = quorum_core::backup::job::JobOutcome> + Send + 'static {
        backup_controller::run_backup(backup, context, run)
    }
}
