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

/// The operator's controllers: its clusters' passes and its backups'. The process (`main.rs`)
/// and the tests run exactly these, so what is tested is what is deployed.
pub fn controllers(
    runtime: &quorum_core::runner::Runtime,
    context: std::sync::Arc<quorum_core::runner::Context<reconcile::State>>,
    wakeups: quorum_core::wakeups::Wakeups,
) -> Vec<futures::future::BoxFuture<'static, ()>> {
    let clusters = runtime.cluster_controller_woken::<crd::RedisCluster, _, _, _, _>(
        context.clone(),
        reconcile::reconcile,
        resources::APP,
        wakeups,
    );
    let backups =
        runtime.leaf_controller::<crd::RedisBackup, _, _, _, _>(context, backup_controller::reconcile_backup);
    vec![clusters, backups]
}
