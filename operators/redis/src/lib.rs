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

/// The operator's name: its field manager, event reporter and `app.kubernetes.io/managed-by`.
pub const OPERATOR_NAME: &str = "quorum-redis-operator";

/// The Redis operator, as its process (`main.rs`) and its tests start it.
pub struct RedisOperator;

impl quorum_core::runner::Operator for RedisOperator {
    const NAME: &'static str = OPERATOR_NAME;
    type Settings = reconcile::Settings;
    type State = reconcile::State;

    fn state(
        settings: reconcile::Settings,
        calls: quorum_core::runner::AdminCalls,
        metrics: &quorum_core::metrics::Metrics,
    ) -> reconcile::State {
        reconcile::State {
            clients: clients::RedisClients::new(calls, metrics.admin.clone()),
            sentinel_events: sentinel_events::SentinelEvents::new(
                quorum_core::wakeups::Wakeups::new(),
                settings.sentinel_events,
            ),
            settings,
        }
    }

    fn controllers(
        runtime: &quorum_core::runner::Runtime,
        context: std::sync::Arc<quorum_core::runner::Context<reconcile::State>>,
    ) -> Vec<futures::future::BoxFuture<'static, ()>> {
        let wakeups = context.state.sentinel_events.wakeups();
        let clusters = runtime.cluster_controller_woken::<crd::RedisCluster, _, _, _, _>(
            context.clone(),
            reconcile::reconcile,
            resources::APP,
            wakeups,
        );
        let backups = runtime
            .leaf_controller::<crd::RedisBackup, _, _, _, _>(context, backup_controller::reconcile_backup);
        vec![clusters, backups]
    }
}
