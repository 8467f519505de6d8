//! Quorum's Redis operator.
//!
//! - [`crd`]: the `RedisCluster` and `RedisBackup` resources; the CRDs are generated from these
//!   types.
//! - [`admin`]: Redis's own admin commands (`CLUSTER`, `REPLICAOF`, `SENTINEL`,
//!   replication-protocol RDB snapshots), the only place that speaks to a server.
//! - [`clients`]: cached admin clients with breakers, timeouts and retries.
//! - [`sentinel_events`]: the Sentinels' `+switch-master` announcements, which wake a cluster's
//!   pass at once.
//! - [`replication`] and [`sharded`]: each mode's observe, pure decision and step.
//! - [`reasons`]: the reasons both modes' passes report, each with the severity of its wait.
//! - [`resources`]: pure builders of the Kubernetes objects.
//! - [`pass`]: what both modes' passes share (settings, state, errors, the `Pass`, conditions).
//! - [`reconcile`]: the Kubernetes side both modes share, and the dispatch to the mode.
//! - [`backup_controller`]: `RedisBackup`s, RDB snapshots streamed to their destination.
//! - [`restore`]: a new cluster started from a backup's snapshots (`spec.restoreFrom`).

pub mod address;
pub mod admin;
pub mod backup_controller;
pub mod clients;
pub mod crd;
pub mod packaging;
pub mod pass;
pub mod reasons;
pub mod reconcile;
pub mod replication;
pub mod resources;
pub mod restore;
pub mod sentinel_events;
pub mod sharded;

use std::sync::Arc;

use kube::runtime::controller::Action;
use quorum_core::{
    ReconcileError,
    metrics::Metrics,
    runner::{AdminCalls, Context, Operator},
};

/// The operator's name: its field manager, event reporter and `app.kubernetes.io/managed-by`.
pub const OPERATOR_NAME: &str = "quorum-redis-operator";

/// The Redis operator, as its process (`main.rs`) and its tests start it.
pub struct RedisOperator;

impl Operator for RedisOperator {
    const NAME: &'static str = OPERATOR_NAME;
    const APP: &'static str = resources::APP;
    type Settings = reconcile::Settings;
    type State = reconcile::State;
    type Cluster = crd::RedisCluster;
    type Backup = crd::RedisBackup;

    fn state(settings: reconcile::Settings, calls: AdminCalls, metrics: &Metrics) -> reconcile::State {
        reconcile::State {
            clients: clients::RedisClients::new(calls, metrics.admin.clone()),
            sentinel_events: sentinel_events::sentinel_events(
                quorum_core::wakeups::Wakeups::new(),
                settings.sentinel_events,
            ),
            follow_ups: Default::default(),
            settings,
        }
    }

    fn reconcile(
        cluster: Arc<crd::RedisCluster>,
        context: Arc<Context<reconcile::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static {
        reconcile::reconcile(cluster, context)
    }

    fn reconcile_backup(
        backup: Arc<crd::RedisBackup>,
        context: Arc<Context<reconcile::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static {
        backup_controller::reconcile_backup(backup, context)
    }

    fn run_backup(
        backup: Arc<crd::RedisBackup>,
        context: Arc<Context<reconcile::State>>,
        run: quorum_core::backup::job::JobRun,
    ) -> impl Future<Output = quorum_core::backup::job::JobOutcome> + Send + 'static {
        backup_controller::run_backup(backup, context, run)
    }

    fn wakeups(state: &reconcile::State) -> Option<quorum_core::wakeups::Wakeups> {
        Some(state.sentinel_events.wakeups())
    }
}
