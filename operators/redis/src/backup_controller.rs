//! Reconciling a `RedisBackup`: when it is due, stream RDB snapshots of the deployment into
//! its destination, record them on the backup and on the cluster, and prune old ones.
//!
//! A snapshot is taken over the replication protocol ([`RedisAdmin::snapshot`]) from a
//! replica whose link to its primary is up, so the primary is spared the fork; from the
//! primary when no replica is linked. A cluster-mode deployment gets one snapshot per shard,
//! each its own object, recorded with the slots the shard served. Which node serves each
//! snapshot is decided by pure functions of what the nodes answered
//! ([`choose_replication_source`], [`plan_shard_snapshots`]); a node the operator cannot reach
//! is never chosen. An object is stored only when the server sent a whole RDB (the pipe
//! fails the upload otherwise) and its checksum is the one the server's bytes had.

use std::{collections::BTreeMap, net::SocketAddr, sync::Arc, time::Duration};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use quorum_core::{
    ReconcileError,
    availability::retry::Idempotency,
    backup::{
        BackupError, BackupSink, Due, PipeError, ScheduleError, due, next_due, object_name, pipe, producer,
        until,
    },
    conditions::{ConditionType, ConditionUpdate, set_condition},
    events::Severity,
    runner::Context,
    status::patch_status,
};

use crate::{
    address::Kind,
    admin::{
        AdminError, ReplicationInfo, Role,
        cluster::{ClusterNode, SLOT_COUNT, SlotRange},
    },
    crd::{BackupPhase, BackupRecord, Mode, RedisBackup, RedisBackupStatus, RedisCluster, ShardSnapshot},
    reconcile::{State, read_password},
    resources::{auth_secret_name, node_name, ordinal_of, shard_of},
};

/// How long the server may send nothing at all (not even its keep-alive newlines) before a
/// snapshot is abandoned.
pub const SNAPSHOT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the snapshot may add nothing to the stream while the store waits for data. The
/// server sends only keep-alives while it forks and writes the RDB, so this allows for that.
pub const SNAPSHOT_STALL_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum BackupControllerError {
    #[error(transparent)]
    Kubernetes(#[from] quorum_core::Error),
    #[error("reading {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("applying retention: {0}")]
    Retention(#[source] BackupError),
    #[error("the cluster's credentials: {0}")]
    Credentials(#[source] crate::reconcile::Error),
    #[error("recording the backup on the cluster: {0}")]
    RecordOnCluster(#[source] kube::Error),
}

impl ReconcileError for BackupControllerError {
    fn metric_label(&self) -> &'static str {
        match self {
            BackupControllerError::Kubernetes(error) => error.metric_label(),
            BackupControllerError::Read { .. } => "read",
            BackupControllerError::Schedule(_) => "schedule",
            BackupControllerError::Retention(_) => "retention",
            BackupControllerError::Credentials(_) => "credentials",
            BackupControllerError::RecordOnCluster(_) => "record",
        }
    }

    fn shared(&self) -> Option<&quorum_core::Error> {
        match self {
            BackupControllerError::Kubernetes(error) => Some(error),
            _ => None,
        }
    }
}

type Result<T> = std::result::Result<T, BackupControllerError>;

/// One data node as the backup controller found it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeView {
    pub ordinal: usize,
    /// Where the node is now; `None` while its name does not resolve.
    pub address: Option<SocketAddr>,
    /// Its `INFO replication`; `None` when it did not answer the operator.
    pub replication: Option<ReplicationInfo>,
}

impl NodeView {
    fn answered_as(&self, role: Role) -> bool {
        self.replication.as_ref().is_some_and(|info| info.role == role)
    }

    /// Answered as a replica of `primary` with its link up: its data is the primary's.
    fn linked_to(&self, primary: SocketAddr) -> bool {
        self.replication
            .as_ref()
            .is_some_and(|info| info.follows(primary) && info.link_up)
    }
}

/// Replication mode: the node to read the snapshot from. A replica linked to `primary` (the
/// lowest ordinal), else `primary` itself; only nodes that answered. `None` when there is no
/// primary, or neither it nor a linked replica answered.
pub fn choose_replication_source(nodes: &[NodeView], primary: Option<usize>) -> Option<usize> {
    let primary = nodes
        .iter()
        .find(|node| Some(node.ordinal) == primary && node.answered_as(Role::Primary))?;
    let address = primary.address?;
    nodes
        .iter()
        .filter(|node| node.ordinal != primary.ordinal && node.linked_to(address))
        .map(|node| node.ordinal)
        .min()
        .or(Some(primary.ordinal))
}

/// Cluster mode: one shard's snapshot source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSource {
    /// The shard (its pods are consecutive ordinals, see [`shard_of`]).
    pub shard: usize,
    /// The node to read from.
    pub ordinal: usize,
    /// The slots the shard's primary serves.
    pub slots: Vec<SlotRange>,
}

/// Cluster mode: the node to read each shard's snapshot from, shards in order, from `view`
/// (one node's `CLUSTER NODES`) and what each node answered. For every primary serving slots:
/// a replica of it whose replication link is up and which the cluster does not suspect
/// (lowest ordinal), else the primary; only nodes that answered the operator.
///
/// # Errors
/// Why no complete set of snapshots can be taken now: slots no primary serves, a primary that
/// is no pod of this deployment, or a shard of which no node that could serve answered.
pub fn plan_shard_snapshots(
    view: &[ClusterNode],
    nodes: &[NodeView],
    nodes_per_shard: usize,
) -> std::result::Result<Vec<ShardSource>, String> {
    let by_address: BTreeMap<SocketAddr, &NodeView> = nodes
        .iter()
        .filter_map(|node| Some((node.address?, node)))
        .collect();
    let primaries: Vec<&ClusterNode> = view
        .iter()
        .filter(|node| node.flags.primary && !node.flags.handshake && !node.slots.is_empty())
        .collect();
    let served: usize = primaries.iter().map(|node| node.slot_count()).sum();
    if served != usize::from(SLOT_COUNT) {
        return Err(format!(
            "primaries serve {served} of {SLOT_COUNT} slots; a backup of part of the data is not taken"
        ));
    }
    let mut sources = Vec::new();
    for primary in primaries {
        let node = primary
            .address
            .and_then(|address| by_address.get(&address))
            .ok_or_else(|| {
                format!(
                    "primary {} at {:?} is no pod of this deployment",
                    primary.id, primary.address
                )
            })?;
        let shard = shard_of(node.ordinal, nodes_per_shard);
        let trusted_replica = |candidate: &&ClusterNode| {
            candidate.flags.replica
                && candidate.primary_id.as_deref() == Some(primary.id.as_str())
                && !candidate.flags.failed
                && !candidate.flags.possibly_failed
        };
        let replica = view
            .iter()
            .filter(trusted_replica)
            .filter_map(|candidate| by_address.get(&candidate.address?))
            .filter(|candidate| {
                primary
                    .address
                    .is_some_and(|address| candidate.linked_to(address))
            })
            .map(|candidate| candidate.ordinal)
            .min();
        let ordinal = match replica {
            Some(ordinal) => ordinal,
            None if node.answered_as(Role::Primary) => node.ordinal,
            None => {
                return Err(format!(
                    "shard {shard}: neither its primary nor a linked replica answers the operator"
                ));
            }
        };
        if sources.iter().any(|source: &ShardSource| source.shard == shard) {
            return Err(format!("shard {shard} has more than one primary serving slots"));
        }
        sources.push(ShardSource {
            shard,
            ordinal,
            slots: primary.slots.clone(),
        });
    }
    sources.sort_by_key(|source| source.shard);
    Ok(sources)
}

/// Reconciles one `RedisBackup`.
pub async fn reconcile_backup(backup: Arc<RedisBackup>, context: Arc<Context<State>>) -> Result<Action> {
    let namespace = backup.namespace().unwrap_or_default();
    let previous = backup.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    match due(
        backup.spec.schedule.as_deref(),
        previous.phase,
        previous.started_at.as_ref().map(|t| t.0),
        backup.metadata.creation_timestamp.as_ref().map(|t| t.0),
        now,
    )? {
        Due::Never => return Ok(Action::await_change()),
        Due::Later(wait) => return Ok(Action::requeue(wait)),
        Due::Now => {}
    }
    let cluster_name = &backup.spec.cluster_name;
    let clusters: Api<RedisCluster> = Api::namespaced(context.client.clone(), &namespace);
    let cluster = clusters
        .get_opt(cluster_name)
        .await
        .map_err(|source| BackupControllerError::Read {
            what: format!("RedisCluster {cluster_name}"),
            source,
        })?;
    let Some(cluster) = cluster else {
        let message = format!("RedisCluster {cluster_name} does not exist");
        return wait(&context, &backup, &previous, "ClusterNotFound", message, 30).await;
    };

    let sources = match find_sources(&context, &cluster).await? {
        Ok(sources) => sources,
        Err(why) => return wait(&context, &backup, &previous, "NoSnapshotSource", why, 15).await,
    };
    let sink = match quorum_core::backup::cluster_sink(
        &context.client,
        &namespace,
        cluster_name,
        &backup.spec.destination,
        context.state.settings.allow_http_backups,
    )
    .await
    {
        Ok(sink) => sink,
        Err(error) => {
            let message = format!("the destination cannot be used: {error}");
            return wait(&context, &backup, &previous, "DestinationInvalid", message, 30).await;
        }
    };

    let running = RedisBackupStatus {
        phase: Some(BackupPhase::Running),
        started_at: Some(Time(now)),
        message: None,
        ..previous.clone()
    };
    patch_status(&context.client, backup.as_ref(), Some(&previous), &running).await?;

    let key = format!("{namespace}/{cluster_name}");
    let mut stored = Vec::new();
    let mut failure = None;
    for source in &sources {
        let extension = match source.shard {
            Some(shard) => format!("shard-{shard}.rdb"),
            None => "rdb".to_string(),
        };
        let name = object_name(cluster_name, now, &extension);
        match take_snapshot(&context, &cluster, &key, source.ordinal, &sink, &name).await {
            Ok(snapshot) => stored.push((source, snapshot)),
            Err(why) => {
                let node = node_name(cluster_name, source.ordinal);
                failure = Some(match source.shard {
                    Some(shard) => format!("shard {shard}'s snapshot from {node}: {why}"),
                    None => format!("the snapshot from {node}: {why}"),
                });
                break;
            }
        }
    }

    let mut done = running.clone();
    done.completed_at = Some(Time(Timestamp::now()));
    if let Some(schedule) = &backup.spec.schedule {
        done.next_scheduled_at = next_due(schedule, now).ok().map(Time);
    }
    if let Some(why) = failure {
        done.phase = Some(BackupPhase::Failed);
        done.message = Some(why.clone());
        set_condition(
            &mut done.conditions,
            ConditionUpdate::new(ConditionType::Ready, false, "SnapshotFailed", why.clone()),
            backup.metadata.generation,
            Timestamp::now(),
        );
        patch_status(&context.client, backup.as_ref(), Some(&running), &done).await?;
        publish(&context, &backup, Severity::Warning, "SnapshotFailed", why).await;
        return Ok(Action::requeue(Duration::from_secs(60)));
    }

    let completed_at = done.completed_at.clone().unwrap_or(Time(now));
    let record = |snapshot: &StoredSnapshot| BackupRecord {
        name: backup.name_any(),
        location: snapshot.location.clone(),
        completed_at: completed_at.clone(),
        size_bytes: snapshot.size as i64,
        sha256: snapshot.sha256.clone(),
    };
    let first = stored
        .first()
        .map(|(_, snapshot)| record(snapshot))
        .expect("a plan has at least one source");
    done.shards = stored
        .iter()
        .filter_map(|(source, snapshot)| {
            Some(ShardSnapshot {
                shard: source.shard? as i32,
                node: node_name(cluster_name, source.ordinal),
                slots: source.slots.iter().map(ToString::to_string).collect(),
                location: snapshot.location.clone(),
                size_bytes: snapshot.size as i64,
                sha256: snapshot.sha256.clone(),
            })
        })
        .collect();
    done.last_snapshot = Some(first.clone());
    done.phase = Some(match backup.spec.schedule {
        Some(_) => BackupPhase::Pending,
        None => BackupPhase::Succeeded,
    });
    let summary = stored
        .iter()
        .map(|(source, snapshot)| {
            format!(
                "{} bytes from {} to {} (sha256 {})",
                snapshot.size,
                node_name(cluster_name, source.ordinal),
                snapshot.location,
                snapshot.sha256
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    set_condition(
        &mut done.conditions,
        ConditionUpdate::new(ConditionType::Ready, true, "SnapshotStored", summary.clone()),
        backup.metadata.generation,
        Timestamp::now(),
    );
    patch_status(&context.client, backup.as_ref(), Some(&running), &done).await?;
    // The cluster reconciler writes its status as a merge patch of what it changed, which
    // leaves this field alone.
    clusters
        .patch_status(
            cluster_name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": { "lastBackup": first } })),
        )
        .await
        .map_err(BackupControllerError::RecordOnCluster)?;
    publish(&context, &backup, Severity::Normal, "SnapshotStored", summary).await;
    if let Some(keep) = backup.spec.retain {
        // A run stores one object per shard: keep that many runs' worth.
        let per_run = stored.len().max(1);
        sink.apply_retention(keep as usize * per_run)
            .await
            .map_err(BackupControllerError::Retention)?;
    }
    Ok(match &done.next_scheduled_at {
        Some(next) => Action::requeue(until(Timestamp::now(), next.0)),
        None => Action::await_change(),
    })
}

/// One snapshot to take: from which node, and for which shard (cluster mode).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Source {
    ordinal: usize,
    shard: Option<usize>,
    slots: Vec<SlotRange>,
}

/// What was stored for one source.
struct StoredSnapshot {
    location: String,
    size: u64,
    sha256: String,
}

/// Observes the deployment's nodes and plans its snapshots; the inner `Err` says why no
/// complete backup can be taken now.
async fn find_sources(
    context: &Context<State>,
    cluster: &RedisCluster,
) -> Result<std::result::Result<Vec<Source>, String>> {
    let state = &context.state;
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let key = format!("{namespace}/{name}");
    // The cluster reconciler sets these too; after an operator restart this controller may
    // run first.
    let password = read_password(context, &namespace, &auth_secret_name(cluster))
        .await
        .map_err(BackupControllerError::Credentials)?;
    state
        .clients
        .set_credentials(&key, crate::admin::Credentials::password(password))
        .await;
    let addresses = state.addresses(cluster);
    let count = cluster
        .status
        .as_ref()
        .map_or(0, |status| status.nodes.len())
        .max(cluster.spec.node_count());
    let nodes = futures::future::join_all((0..count).map(|ordinal| {
        let (key, addresses) = (&key, &addresses);
        async move {
            let address = addresses.resolve(Kind::Node, ordinal).await;
            let replication = state
                .clients
                .node(
                    key,
                    addresses,
                    ordinal,
                    "replication_info",
                    Idempotency::Read,
                    |admin| async move { admin.replication_info().await },
                )
                .await
                .ok();
            NodeView {
                ordinal,
                address,
                replication,
            }
        }
    }))
    .await;
    let status = cluster.status.clone().unwrap_or_default();
    Ok(match cluster.spec.mode {
        Mode::Replication => {
            let primary = status.primary.as_deref().and_then(|p| ordinal_of(&name, p));
            match choose_replication_source(&nodes, primary) {
                Some(ordinal) => Ok(vec![Source {
                    ordinal,
                    shard: None,
                    slots: vec![],
                }]),
                None => Err(match status.primary {
                    None => "the deployment has no primary yet".to_string(),
                    Some(primary) => {
                        format!(
                            "neither the primary {primary} nor a replica linked to it answers the operator"
                        )
                    }
                }),
            }
        }
        Mode::Cluster => {
            if status.rebalance.is_some() {
                return Ok(Err(
                    "a rebalance is moving slots; a snapshot now could miss keys in motion".to_string(),
                ));
            }
            let Some(view) = cluster_view(context, &key, &addresses, &nodes).await else {
                return Ok(Err("no node answers CLUSTER NODES".to_string()));
            };
            plan_shard_snapshots(&view, &nodes, cluster.spec.nodes_per_shard()).map(|plan| {
                plan.into_iter()
                    .map(|source| Source {
                        ordinal: source.ordinal,
                        shard: Some(source.shard),
                        slots: source.slots,
                    })
                    .collect()
            })
        }
    })
}

/// `CLUSTER NODES` from the first node that answers it.
async fn cluster_view(
    context: &Context<State>,
    key: &str,
    addresses: &crate::address::Addresses,
    nodes: &[NodeView],
) -> Option<Vec<ClusterNode>> {
    for node in nodes.iter().filter(|node| node.replication.is_some()) {
        let view = context
            .state
            .clients
            .node(
                key,
                addresses,
                node.ordinal,
                "cluster_nodes",
                Idempotency::Read,
                |admin| async move { admin.cluster_nodes().await },
            )
            .await;
        if let Ok(view) = view {
            return Some(view);
        }
    }
    None
}

/// Streams one node's RDB snapshot into the object `name`.
async fn take_snapshot(
    context: &Context<State>,
    cluster: &RedisCluster,
    key: &str,
    ordinal: usize,
    sink: &BackupSink,
    name: &str,
) -> std::result::Result<StoredSnapshot, String> {
    let addresses = context.state.addresses(cluster);
    let admin = context
        .state
        .clients
        .node(
            key,
            &addresses,
            ordinal,
            "connect",
            Idempotency::Read,
            |admin| async move { Ok(admin) },
        )
        .await
        .map_err(|error| format!("unreachable: {error}"))?;
    let produce =
        producer(move |writer| Box::pin(async move { admin.snapshot(writer, SNAPSHOT_IDLE_TIMEOUT).await }));
    let upload = |reader| async move { sink.upload(name, reader).await };
    let (stored, info) = pipe(produce, upload, SNAPSHOT_STALL_TIMEOUT)
        .await
        .map_err(|error: PipeError<AdminError, BackupError>| error.to_string())?;
    if stored.sha256 != info.sha256 || stored.size != info.size {
        return Err(format!(
            "the stored object ({} bytes, sha256 {}) is not what the server sent ({} bytes, sha256 {})",
            stored.size, stored.sha256, info.size, info.sha256
        ));
    }
    Ok(StoredSnapshot {
        location: stored.location,
        size: stored.size,
        sha256: stored.sha256,
    })
}

/// Leaves the backup Pending with why, and tries again in `seconds`.
async fn wait(
    context: &Context<State>,
    backup: &RedisBackup,
    previous: &RedisBackupStatus,
    reason: &'static str,
    message: String,
    seconds: u64,
) -> Result<Action> {
    let status = RedisBackupStatus {
        phase: Some(BackupPhase::Pending),
        message: Some(message.clone()),
        ..previous.clone()
    };
    patch_status(&context.client, backup, Some(previous), &status).await?;
    publish(context, backup, Severity::Warning, reason, message).await;
    Ok(Action::requeue(Duration::from_secs(seconds)))
}

async fn publish(
    context: &Context<State>,
    backup: &RedisBackup,
    severity: Severity,
    reason: &'static str,
    message: String,
) {
    context
        .events
        .publish(backup, severity, reason, "Backup", message)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::cluster::parse_cluster_nodes;

    fn address(ordinal: usize) -> SocketAddr {
        format!("127.0.1.{}:6379", ordinal + 1).parse().unwrap()
    }

    fn info(role: Role, primary: Option<usize>, link_up: bool) -> ReplicationInfo {
        ReplicationInfo {
            role,
            primary_host: primary.map(|p| address(p).ip().to_string()),
            primary_port: primary.map(|_| 6379),
            link_up,
            last_io_seconds_ago: None,
            sync_in_progress: false,
            replica_offset: None,
            replicas: vec![],
            offset: 0,
            replication_id: "r".into(),
        }
    }

    fn primary(ordinal: usize) -> NodeView {
        NodeView {
            ordinal,
            address: Some(address(ordinal)),
            replication: Some(info(Role::Primary, None, false)),
        }
    }

    fn replica(ordinal: usize, of: usize, link_up: bool) -> NodeView {
        NodeView {
            ordinal,
            address: Some(address(ordinal)),
            replication: Some(info(Role::Replica, Some(of), link_up)),
        }
    }

    fn unreachable(ordinal: usize) -> NodeView {
        NodeView {
            ordinal,
            address: Some(address(ordinal)),
            replication: None,
        }
    }

    #[test]
    fn replication_snapshots_come_from_a_linked_replica_else_the_primary() {
        // (case, nodes, recorded primary, expected source)
        type Case = (&'static str, Vec<NodeView>, Option<usize>, Option<usize>);
        let cases: Vec<Case> = vec![
            (
                "a linked replica spares the primary",
                vec![primary(0), replica(1, 0, true), replica(2, 0, true)],
                Some(0),
                Some(1),
            ),
            (
                "a replica whose link is down is behind",
                vec![primary(0), replica(1, 0, false), replica(2, 0, true)],
                Some(0),
                Some(2),
            ),
            (
                "no linked replica: the primary",
                vec![primary(0), replica(1, 0, false), unreachable(2)],
                Some(0),
                Some(0),
            ),
            (
                "a replica of another node is not this primary's",
                vec![primary(0), replica(1, 2, true), primary(2)],
                Some(0),
                Some(0),
            ),
            (
                "after a failover the recorded primary is the source's reference",
                vec![replica(0, 1, true), primary(1), replica(2, 1, true)],
                Some(1),
                Some(0),
            ),
            (
                "an unreachable primary is never read from",
                vec![unreachable(0), replica(1, 0, false)],
                Some(0),
                None,
            ),
            (
                "a primary that answers as a replica is not the primary",
                vec![replica(0, 1, true), replica(1, 0, true)],
                Some(0),
                None,
            ),
            (
                "no primary yet",
                vec![primary(0), replica(1, 0, true)],
                None,
                None,
            ),
        ];
        for (case, nodes, recorded, expected) in cases {
            assert_eq!(choose_replication_source(&nodes, recorded), expected, "{case}");
        }
    }

    /// Three shards of a primary and one replica: pods 0-1, 2-3, 4-5 at 127.0.1.1-6.
    fn cluster_nodes(lines: &[&str]) -> Vec<ClusterNode> {
        parse_cluster_nodes(&lines.join("\n")).unwrap()
    }

    const P0: &str = "a0 127.0.1.1:6379@16379 myself,master - 0 0 1 connected 0-5460";
    const R1: &str = "a1 127.0.1.2:6379@16379 slave a0 0 0 1 connected";
    const P2: &str = "a2 127.0.1.3:6379@16379 master - 0 0 2 connected 5461-10922";
    const R3: &str = "a3 127.0.1.4:6379@16379 slave a2 0 0 2 connected";
    const P4: &str = "a4 127.0.1.5:6379@16379 master - 0 0 3 connected 10923-16383";
    const R5: &str = "a5 127.0.1.6:6379@16379 slave a4 0 0 3 connected";

    #[test]
    fn each_shard_is_read_from_a_linked_replica_else_its_primary() {
        let view = cluster_nodes(&[P0, R1, P2, R3, P4, R5]);
        let nodes = vec![
            primary(0),
            replica(1, 0, true),
            primary(2),
            replica(3, 2, false),
            primary(4),
            unreachable(5),
        ];
        let plan = plan_shard_snapshots(&view, &nodes, 2).unwrap();
        assert_eq!(
            plan,
            vec![
                ShardSource {
                    shard: 0,
                    ordinal: 1,
                    slots: vec![SlotRange::new(0, 5460)]
                },
                ShardSource {
                    shard: 1,
                    ordinal: 2,
                    slots: vec![SlotRange::new(5461, 10922)]
                },
                ShardSource {
                    shard: 2,
                    ordinal: 4,
                    slots: vec![SlotRange::new(10923, 16383)]
                },
            ]
        );
    }

    #[test]
    fn after_a_failover_the_shard_follows_its_pods_and_suspected_replicas_are_skipped() {
        // Pod 3 took over shard 1; pod 2 follows it. Pod 1 is suspected by the cluster.
        let view = cluster_nodes(&[
            P0,
            "a1 127.0.1.2:6379@16379 slave,fail? a0 0 0 1 connected",
            "a2 127.0.1.3:6379@16379 slave a3 0 0 4 connected",
            "a3 127.0.1.4:6379@16379 master - 0 0 4 connected 5461-10922",
            P4,
            R5,
        ]);
        let nodes = vec![
            primary(0),
            replica(1, 0, true),
            replica(2, 3, true),
            primary(3),
            primary(4),
            replica(5, 4, true),
        ];
        let plan = plan_shard_snapshots(&view, &nodes, 2).unwrap();
        let chosen: Vec<(usize, usize)> = plan.iter().map(|s| (s.shard, s.ordinal)).collect();
        assert_eq!(chosen, vec![(0, 0), (1, 2), (2, 5)]);
    }

    #[test]
    fn an_incomplete_cluster_or_an_unreachable_shard_is_not_backed_up() {
        let nodes = vec![
            primary(0),
            replica(1, 0, true),
            primary(2),
            replica(3, 2, true),
            unreachable(4),
            replica(5, 4, false),
        ];
        let uncovered = cluster_nodes(&[
            P0,
            R1,
            P2,
            R3,
            "a4 127.0.1.5:6379@16379 master - 0 0 3 connected 10923-16000",
        ]);
        let error = plan_shard_snapshots(&uncovered, &nodes, 2).unwrap_err();
        assert!(error.contains("16001 of 16384"), "{error}");
        let unreachable_shard = cluster_nodes(&[P0, R1, P2, R3, P4, R5]);
        let error = plan_shard_snapshots(&unreachable_shard, &nodes, 2).unwrap_err();
        assert!(error.starts_with("shard 2:"), "{error}");
        let foreign = cluster_nodes(&[
            P0,
            R1,
            P2,
            R3,
            "a9 10.0.0.9:6379@16379 master - 0 0 3 connected 10923-16383",
        ]);
        let error = plan_shard_snapshots(&foreign, &nodes, 2).unwrap_err();
        assert!(error.contains("no pod of this deployment"), "{error}");
    }
}
