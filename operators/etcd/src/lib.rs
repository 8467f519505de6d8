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
pub mod leader_events;
pub mod observe;
pub mod packaging;
pub mod reasons;
pub mod reconcile;
pub mod resolver;
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
pub const OPERATOR_NAME: &str = "quorum-etcd-operator";

/// The etcd operator, as its process (`main.rs`) and its tests start it.
pub struct EtcdOperator;

impl Operator for EtcdOperator {
    const NAME: &'static str = OPERATOR_NAME;
    const APP: &'static str = resources::APP;
    type Settings = reconcile::Settings;
    type State = reconcile::State;
    type Cluster = crd::EtcdCluster;
    type Backup = crd::EtcdBackup;

    fn state(settings: reconcile::Settings, calls: AdminCalls, metrics: &Metrics) -> reconcile::State {
        let clients =
            observe::EtcdClients::new(calls, metrics.admin.clone(), settings.leader_events.keepalive);
        reconcile::State {
            leader_events: leader_events::leader_events(
                quorum_core::wakeups::Wakeups::new(),
                settings.leader_events,
                clients.channels(),
            ),
            clients,
            follow_ups: Default::default(),
            settings,
        }
    }

    fn reconcile(
        cluster: Arc<crd::EtcdCluster>,
        context: Arc<Context<reconcile::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static {
        reconcile::reconcile(cluster, context)
    }

    fn reconcile_backup(
        backup: Arc<crd::EtcdBackup>,
        context: Arc<Context<reconcile::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static {
        backup_controller::reconcile_backup(backup, context)
    }

    fn run_backup(
        backup: Arc<crd::EtcdBackup>,
        context: Arc<Context<reconcile::State>>,
        run: quorum_core::backup::job::JobRun,
    ) -> impl Future<Output = quorum_core::backup::job::JobOutcome> + Send + 'static {
        backup_controller::run_backup(backup, context, run)
    }

    fn wakeups(state: &reconcile::State) -> Option<quorum_core::wakeups::Wakeups> {
        Some(state.leader_events.wakeups())
    }
}
