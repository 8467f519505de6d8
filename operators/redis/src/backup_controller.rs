//! Reconciling a `RedisBackup`: core's backup controller
//! ([`quorum_core::backup::controller`]) around Redis's part, RDB snapshots of the deployment.
//!
//! A snapshot is taken over the replication protocol ([`RedisAdmin::snapshot`]) from a
//! replica whose link to its primary is up, so the primary is spared the fork; from the
//! primary when no replica is linked. A cluster-mode deployment gets one snapshot per shard,
//! each its own object, recorded with the slots the shard served. Which node serves each
//! snapshot is decided by pure functions of what the nodes answered
//! ([`choose_replication_source`], [`plan_shard_snapshots`]); a node the operator cannot reach
//! is never chosen. An object is stored only when the server sent a whole RDB (the pipe
//! fails the upload otherwise) and its checksum is the one the server's bytes had.
//!
//! [`RedisAdmin::snapshot`]: crate::admin::RedisAdmin::snapshot

use std::{collections::BTreeMap, net::SocketAddr, sync::Arc, time::Duration};

use kube::{ResourceExt, runtime::controller::Action};
use quorum_core::{
    ReconcileError,
    availability::retry::Idempotency,
    backup::{
        BackupError, BackupSink, PipeError,
        controller::{self, BackupControllerError, BackupEngine, Snapshot, Sources},
        digest::ContentFingerprint,
        job::{JobOutcome, JobSettings},
        pipe, producer,
    },
    runner::{Context, object_key},
};

use crate::{
    address::Kind,
    admin::{
        AdminError, ReplicationInfo, Role,
        cluster::{ClusterNode, SLOT_COUNT, SlotRange},
    },
    crd::{Mode, RedisBackup, RedisBackupSpec, RedisBackupStatus, RedisCluster, ShardSnapshot},
    reconcile::{State, read_password},
    resources::{auth_secret_name, shard_of},
};

/// How long the server may send nothing at all (not even its keep-alive newlines) before a
/// snapshot is abandoned.
pub const SNAPSHOT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the snapshot may add nothing to the stream while the store waits for data. The
/// server sends only keep-alives while it forks and writes the RDB, so this allows for that.
pub const SNAPSHOT_STALL_TIMEOUT: Duration = Duration::from_secs(120);

quorum_core::backup_resource!(RedisBackup, RedisBackupSpec, RedisBackupStatus);

/// Why Redis's part of a backup failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the deployment's password: {0}")]
    Credentials(#[source] crate::reconcile::Error),
    #[error("{0}")]
    Snapshot(String),
}

impl ReconcileError for SnapshotError {
    fn metric_label(&self) -> &'static str {
        match self {
            SnapshotError::Credentials(_) => "credentials",
            SnapshotError::Snapshot(_) => "snapshot",
        }
    }
}

/// One snapshot to take: from which node, and for which shard (cluster mode).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Source {
    node: String,
    ordinal: usize,
    shard: Option<usize>,
    slots: Vec<SlotRange>,
}

/// Redis's part of a backup: one node's RDB, or one per shard.
struct RedisSnapshots<'a> {
    context: &'a Context<State>,
}

impl BackupEngine for RedisSnapshots<'_> {
    type Backup = RedisBackup;
    type Cluster = RedisCluster;
    type Source = Source;
    /// What the snapshot holds, when it could be read ([`crate::admin::rdb`]).
    type Info = Option<ContentFingerprint>;
    type Error = SnapshotError;

    const ENGINE: &'static str = crate::clients::ENGINE;
    const MAX_CLUSTER_NAME: usize = crate::crd::MAX_NAME;

    fn allow_http(&self) -> bool {
        self.context.state.settings.members.allow_http_backups
    }

    fn pod_overrides<'c>(&self, cluster: &'c RedisCluster) -> Option<&'c quorum_core::crd::PodOverrides> {
        cluster.spec.pod_template.as_ref()
    }

    fn secrets(&self, cluster: &RedisCluster) -> Vec<String> {
        vec![auth_secret_name(cluster)]
    }

    fn jobs(&self) -> Option<JobSettings> {
        let settings = &self.context.state.settings;
        JobSettings::when_configured(&settings.members, &settings.operator_image)
    }

    async fn sources(
        &self,
        _: &RedisBackup,
        cluster: &RedisCluster,
    ) -> Result<Sources<Source>, SnapshotError> {
        Ok(match find_sources(self.context, cluster).await? {
            Ok(sources) => Sources::From(sources),
            Err(message) => Sources::Wait {
                reason: "NoSnapshotSource",
                message,
            },
        })
    }

    fn member(&self, source: &Source) -> String {
        source.node.clone()
    }

    fn extension(&self, source: &Source) -> String {
        match source.shard {
            Some(shard) => format!("shard-{shard}.rdb"),
            None => "rdb".to_string(),
        }
    }

    async fn produce(
        &self,
        _: &Self::Backup,
        cluster: &RedisCluster,
        source: &Source,
        sink: &BackupSink,
        name: &str,
    ) -> Result<Snapshot<Option<ContentFingerprint>>, SnapshotError> {
        // Only a Replication mode snapshot's content is recorded (what a drill compares).
        let read_content = source.shard.is_none();
        take_snapshot(self.context, cluster, source.ordinal, sink, name, read_content)
            .await
            .map(|(stored, content)| Snapshot {
                stored,
                info: content,
            })
            .map_err(|why| {
                SnapshotError::Snapshot(match source.shard {
                    Some(shard) => format!("shard {shard}: {why}"),
                    None => why,
                })
            })
    }

    fn record(
        &self,
        status: &mut RedisBackupStatus,
        snapshots: &[(&Source, Snapshot<Option<ContentFingerprint>>)],
    ) {
        // Replication mode: the one snapshot's content, which a drill compares.
        status.content = match snapshots {
            [(source, snapshot)] if source.shard.is_none() => snapshot.info.clone(),
            _ => None,
        };
        status.shards = snapshots
            .iter()
            .filter_map(|(source, snapshot)| {
                Some(ShardSnapshot {
                    shard: source.shard? as i32,
                    node: source.node.clone(),
                    slots: source.slots.iter().map(ToString::to_string).collect(),
                    location: snapshot.stored.location.clone(),
                    size_bytes: snapshot.stored.size as i64,
                    sha256: snapshot.stored.sha256.clone(),
                })
            })
            .collect();
    }

    /// Cluster mode: the shards are taken in turn, so a slot moved between two of them while
    /// they were taken (a rebalance started meanwhile) would leave its keys in neither
    /// snapshot, or in two. After the last shard the slots are read again, with the
    /// deployment as it stands now; the run fails unless every shard still serves what it
    /// served when it was planned and no rebalance is under way.
    async fn confirm(&self, cluster: &RedisCluster, sources: &[Source]) -> Result<(), SnapshotError> {
        if cluster.spec.mode != Mode::Cluster {
            return Ok(());
        }
        let unconfirmed = |why: String| {
            SnapshotError::Snapshot(format!(
                "after the last shard the slots could not be confirmed unchanged ({why}); the next run takes every \
                 shard again"
            ))
        };
        // Read from the API server, not a cache: a rebalance recorded a moment ago must be seen.
        let current = kube::Api::<RedisCluster>::namespaced(
            self.context.client.clone(),
            &cluster.namespace().unwrap_or_default(),
        )
        .get_opt(&cluster.name_any())
        .await
        .map_err(|error| unconfirmed(error.to_string()))?
        .ok_or_else(|| unconfirmed("the deployment is gone".to_string()))?;
        let now = find_sources(self.context, &current).await?.map_err(unconfirmed)?;
        match slots_moved(sources, &now) {
            None => Ok(()),
            Some(moved) => Err(SnapshotError::Snapshot(format!(
                "slots moved between shards while they were taken in turn ({moved}), so keys of a moved slot could \
                 be in neither snapshot or in two; the next run takes every shard again"
            ))),
        }
    }

    fn describe(&self, source: &Source, snapshot: &Snapshot<Option<ContentFingerprint>>) -> String {
        format!(
            "{} bytes from {} to {} (sha256 {})",
            snapshot.stored.size, source.node, snapshot.stored.location, snapshot.stored.sha256
        )
    }

    /// Replication mode only: a drill restores one node, and a Cluster mode backup is a
    /// snapshot per shard.
    fn drill_cluster(
        &self,
        backup: &RedisBackup,
        cluster: &RedisCluster,
        name: &str,
    ) -> Result<RedisCluster, String> {
        match cluster.spec.mode {
            Mode::Replication => Ok(drill_cluster(backup, cluster, name)),
            Mode::Cluster => Err(
                "restore drills are available for Replication mode; a Cluster mode backup's shards cannot be verified yet"
                    .to_string(),
            ),
        }
    }

    fn drill_claims(&self, name: &str) -> Vec<String> {
        vec![quorum_core::pod::data_claim_name(&crate::resources::node_name(
            name, 0,
        ))]
    }

    fn drill_ready(&self, scratch: &RedisCluster) -> bool {
        scratch.status.as_ref().is_some_and(|status| {
            quorum_core::backup::drill::restored_and_ready(
                scratch.spec.restore_from.is_some(),
                &status.conditions,
            )
        })
    }

    /// A snapshot of the drill's node, read as the backup's was: what the node loaded.
    async fn drill_content(
        &self,
        scratch: &RedisCluster,
        _recorded: &RedisBackupStatus,
    ) -> Result<ContentFingerprint, String> {
        hand_credentials(self.context, scratch)
            .await
            .map_err(|error| error.to_string())?;
        let admin = self
            .context
            .state
            .clients
            .node(
                &object_key(scratch),
                &self.context.state.addresses(scratch),
                0,
                "connect",
                Idempotency::Read,
                |admin| async move { Ok(admin) },
            )
            .await
            .map_err(|error| format!("unreachable: {error}"))?;
        let (_, content) = admin
            .snapshot_with_content(&mut tokio::io::sink(), SNAPSHOT_IDLE_TIMEOUT)
            .await
            .map_err(|error| error.to_string())?;
        content
            .map(|content| content.fingerprint())
            .map_err(|error| error.to_string())
    }

    fn recorded_content(&self, status: &RedisBackupStatus) -> Option<ContentFingerprint> {
        status.content.clone()
    }

    /// Every shard's object of the newest run, besides the first one's `lastSnapshot`.
    fn referenced(&self, status: &RedisBackupStatus) -> Vec<String> {
        let shards = status.shards.iter().map(|shard| shard.location.clone());
        status
            .run
            .last_snapshot
            .iter()
            .map(|record| record.location.clone())
            .chain(shards)
            .collect()
    }

    fn restored_from(&self, cluster: &RedisCluster) -> Vec<String> {
        restore_locations(cluster)
    }
}

/// Every snapshot a cluster created with `restoreFrom` recorded it starts from: a node starting
/// later (a shard's first node rescheduled before it held data) still fetches its own.
fn restore_locations(cluster: &RedisCluster) -> Vec<String> {
    cluster
        .status
        .iter()
        .filter_map(|status| status.restore.as_ref())
        .flat_map(|restore| restore.snapshots.iter().map(|snapshot| snapshot.location.clone()))
        .collect()
}

/// The throw-away deployment `name` a drill restores `backup`'s newest snapshot into: a primary
/// alone (with the Sentinels Replication mode always has) of `cluster`'s version, storage,
/// persistence, settings, password and pod template, with no backups.
pub fn drill_cluster(backup: &RedisBackup, cluster: &RedisCluster, name: &str) -> RedisCluster {
    let mut spec = cluster.spec.clone();
    spec.replicas = Some(0);
    spec.backup = None;
    spec.restore_from = Some(quorum_core::crd::RestoreSource {
        backup_name: backup.name_any(),
    });
    let mut scratch = RedisCluster::new(name, spec);
    scratch.metadata.namespace = backup.namespace();
    scratch
}

/// Reconciles one `RedisBackup`.
pub async fn reconcile_backup(
    backup: Arc<RedisBackup>,
    context: Arc<Context<State>>,
) -> Result<Action, BackupControllerError<SnapshotError>> {
    controller::reconcile(&RedisSnapshots { context: &context }, backup.as_ref(), &context).await
}

/// Takes one run of a `RedisBackup` in a backup Job's process.
pub async fn run_backup(
    backup: Arc<RedisBackup>,
    context: Arc<Context<State>>,
    run: quorum_core::backup::job::JobRun,
) -> JobOutcome {
    controller::run_in_job(
        &RedisSnapshots { context: &context },
        backup.as_ref(),
        &context,
        run,
    )
    .await
}

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

/// Gives the admin layer the deployment's password. The cluster reconciler does too; after an
/// operator restart (or in a backup Job) this controller may run first.
async fn hand_credentials(context: &Context<State>, cluster: &RedisCluster) -> Result<(), SnapshotError> {
    let namespace = cluster.namespace().unwrap_or_default();
    let password = read_password(context, &namespace, &auth_secret_name(cluster))
        .await
        .map_err(SnapshotError::Credentials)?;
    context
        .state
        .clients
        .set_credentials(
            &object_key(cluster),
            crate::admin::Credentials::password(password),
        )
        .await;
    Ok(())
}

/// Observes the deployment's nodes and plans its snapshots; the inner `Err` says why no
/// complete backup can be taken now.
async fn find_sources(
    context: &Context<State>,
    cluster: &RedisCluster,
) -> Result<std::result::Result<Vec<Source>, String>, SnapshotError> {
    let state = &context.state;
    let key = object_key(cluster);
    hand_credentials(context, cluster).await?;
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
            let primary = status
                .primary
                .as_deref()
                .and_then(|p| addresses.nodes.ordinal_of(p));
            match choose_replication_source(&nodes, primary) {
                Some(ordinal) => Ok(vec![Source {
                    node: addresses.nodes.name(ordinal),
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
                        node: addresses.nodes.name(source.ordinal),
                        ordinal: source.ordinal,
                        shard: Some(source.shard),
                        slots: source.slots,
                    })
                    .collect()
            })
        }
    })
}

/// What changed, if anything, between the slots each shard served when the snapshots were
/// planned (`planned`) and now (`now`).
fn slots_moved(planned: &[Source], now: &[Source]) -> Option<String> {
    let by_shard = |sources: &[Source]| -> BTreeMap<Option<usize>, Vec<SlotRange>> {
        sources
            .iter()
            .map(|source| (source.shard, source.slots.clone()))
            .collect()
    };
    let (before, after) = (by_shard(planned), by_shard(now));
    if before == after {
        return None;
    }
    let shards: std::collections::BTreeSet<&Option<usize>> = before.keys().chain(after.keys()).collect();
    shards.into_iter().find_map(|shard| {
        let (was, is) = (before.get(shard), after.get(shard));
        (was != is).then(|| {
            let show = |slots: Option<&Vec<SlotRange>>| match slots {
                None => "nothing".to_string(),
                Some(slots) => slots
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            };
            format!(
                "shard {} served {} and serves {}",
                shard.map_or_else(|| "?".to_string(), |s| s.to_string()),
                show(was),
                show(is)
            )
        })
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

/// Streams one node's RDB snapshot into the object `name` and, with `read_content`, reads what
/// it holds on the way (`None` when that cannot be read, or was not asked for: the snapshot is
/// stored all the same, and cannot be drilled).
async fn take_snapshot(
    context: &Context<State>,
    cluster: &RedisCluster,
    ordinal: usize,
    sink: &BackupSink,
    name: &str,
    read_content: bool,
) -> Result<(quorum_core::backup::StoredBackup, Option<ContentFingerprint>), String> {
    let key = object_key(cluster);
    let addresses = context.state.addresses(cluster);
    let admin = context
        .state
        .clients
        .node(
            &key,
            &addresses,
            ordinal,
            "connect",
            Idempotency::Read,
            |admin| async move { Ok(admin) },
        )
        .await
        .map_err(|error| format!("unreachable: {error}"))?;
    let produce = producer(move |writer| {
        Box::pin(async move {
            if read_content {
                let (info, content) = admin.snapshot_with_content(writer, SNAPSHOT_IDLE_TIMEOUT).await?;
                Ok((info, Some(content)))
            } else {
                Ok((admin.snapshot(writer, SNAPSHOT_IDLE_TIMEOUT).await?, None))
            }
        })
    });
    let upload = |reader| async move { sink.upload(name, reader).await };
    let (stored, (info, content)) = pipe(produce, upload, SNAPSHOT_STALL_TIMEOUT)
        .await
        .map_err(|error: PipeError<AdminError, BackupError>| error.to_string())?;
    stored.verify("the server", info.size, &info.sha256)?;
    let content = content
        .and_then(|read| {
            read.inspect_err(|error| {
                tracing::warn!(cluster = %key, %name, %error, "the snapshot is stored, but what it holds could not be read: it cannot be drilled");
            })
            .ok()
        })
        .map(|content| content.fingerprint());
    Ok((stored, content))
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

    /// Retention keeps every shard's snapshot a restored cluster recorded, not only the
    /// backup's newest.
    #[test]
    fn a_restored_cluster_holds_every_snapshot_it_starts_from() {
        let mut cluster = crate::resources::tests::cluster(Mode::Cluster);
        assert!(restore_locations(&cluster).is_empty());
        let snapshot = |ordinal: i32| crate::crd::RestoreSnapshot {
            ordinal,
            location: format!("s3://backups/cache-20261201T010000.000Z.shard-{ordinal}.rdb"),
            sha256: "0".repeat(64),
            slots: Vec::new(),
        };
        cluster.status = Some(crate::crd::RedisClusterStatus {
            restore: Some(crate::crd::RestoreStatus {
                backup_name: "nightly".into(),
                snapshots: vec![snapshot(0), snapshot(3)],
                image: "operator".into(),
                s3_endpoint: None,
                s3_region: None,
                credentials_secret_name: None,
                allow_http: false,
            }),
            ..Default::default()
        });
        assert_eq!(
            restore_locations(&cluster),
            [
                "s3://backups/cache-20261201T010000.000Z.shard-0.rdb",
                "s3://backups/cache-20261201T010000.000Z.shard-3.rdb"
            ]
        );
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

    /// A backup of a cluster-mode deployment is one backup only if no slot moved between the
    /// shards while they were taken in turn.
    #[test]
    fn a_slot_moved_while_the_shards_were_taken_is_named() {
        let shard = |shard: usize, slots: &[(u16, u16)]| Source {
            node: format!("cache-{}", shard * 2),
            ordinal: shard * 2,
            shard: Some(shard),
            slots: slots.iter().map(|(a, b)| SlotRange::new(*a, *b)).collect(),
        };
        let planned = [shard(0, &[(0, 8191)]), shard(1, &[(8192, 16383)])];
        // Read again from other nodes of the same shards (a replica answered this time).
        let mut same = planned.clone();
        same[0].ordinal = 1;
        assert_eq!(slots_moved(&planned, &same), None);
        let moved = [shard(0, &[(0, 8190)]), shard(1, &[(8191, 16383)])];
        assert_eq!(
            slots_moved(&planned, &moved).as_deref(),
            Some("shard 0 served 0-8191 and serves 0-8190")
        );
        let added = [planned[0].clone(), planned[1].clone(), shard(2, &[(100, 100)])];
        assert!(
            slots_moved(&planned, &added)
                .is_some_and(|moved| moved.contains("shard 2 served nothing and serves 100"))
        );
    }

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
