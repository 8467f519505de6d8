//! The `RedisCluster` and `RedisBackup` custom resources (`redis.quorum.dev/v1alpha1`).
//!
//! Validation lives in the schema and CEL rules, so `kubectl apply` refuses a bad spec with a
//! message naming the field before the operator ever sees it.

// Several `printcolumn(type_ = "string", ...)` arguments look like duplicates to clippy.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::ResourceRequirements,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{CustomResource, KubeSchema};
use quorum_core::crd::validation::{
    self, DNS_SUBDOMAIN, IMAGE, MAX_IMAGE, MAX_OBJECT_NAME, cel_release_number, cel_version_number,
};
pub use quorum_core::crd::{
    BackupDestination, BackupPhase, BackupPolicy, BackupRecord, BackupRunStatus, BackupSpec, PodOverrides,
    RestoreSource, Storage,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `redis.conf` settings the operator owns: addresses, authentication, replication, cluster
/// membership and persistence depend on them, so a `config` entry may not override them.
pub const OPERATOR_OWNED_SETTINGS: &[&str] = &[
    "appenddirname",
    "appendfilename",
    "appendfsync",
    "appendonly",
    "bind",
    "cluster-allow-replica-migration",
    "cluster-announce-ip",
    "cluster-config-file",
    "cluster-enabled",
    "daemonize",
    "dbfilename",
    "dir",
    "include",
    "logfile",
    "masterauth",
    "masteruser",
    "pidfile",
    "port",
    "protected-mode",
    "rename-command",
    "replica-announce-ip",
    "replicaof",
    "requirepass",
    "save",
    "slaveof",
    "unixsocket",
];

/// The longest `metadata.name` a `RedisCluster` may have: its Sentinels' StatefulSet is `<name>-sentinel`.
pub const MAX_NAME: usize = quorum_core::naming::max_cluster_name(crate::resources::SENTINEL_SUFFIX);

/// Cluster mode: the most shards a deployment may have (`spec.shards`' maximum).
pub const MAX_SHARDS: usize = 32;

/// A Redis deployment: one primary with replicas watched by a Sentinel quorum (`Replication`),
/// or a sharded Redis Cluster (`Cluster`), kept in shape through the servers' own admin
/// commands, one safe step at a time.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "redis.quorum.dev",
    version = "v1alpha1",
    kind = "RedisCluster",
    plural = "redisclusters",
    namespaced,
    status = "RedisClusterStatus",
    shortname = "redis",
    category = "quorum",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "Shards", type_ = "integer", json_path = ".status.shards"),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.readyNodes"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A Redis deployment (Sentinel replication or sharded cluster) managed by Quorum",
    validation = quorum_core::naming::cluster_name_rule(MAX_NAME)
)]
#[x_kube(validation = Rule::new("self.mode == 'Cluster' ? has(self.shards) : !has(self.shards)")
    .message("shards: required in Cluster mode, not allowed in Replication mode").field_path(".shards"))]
#[x_kube(validation = Rule::new("self.mode == 'Cluster' || !has(self.replicasPerShard)")
    .message("replicasPerShard: only for Cluster mode; Replication mode uses replicas").field_path(".replicasPerShard"))]
#[x_kube(validation = Rule::new("self.mode == 'Replication' || (!has(self.replicas) && !has(self.sentinel))")
    .message("replicas and sentinel: only for Replication mode; Cluster mode uses shards and replicasPerShard").field_path(".replicas"))]
// The field's own rule sees only changes of a value that was there before and is still there;
// this one refuses adding or removing it after creation.
#[x_kube(validation = Rule::new("has(self.replicasPerShard) == has(oldSelf.replicasPerShard)")
    .message("replicasPerShard is immutable: it can be set only when the deployment is created")
    .field_path(".replicasPerShard"))]
#[x_kube(validation = Rule::new("has(self.restoreFrom) == has(oldSelf.restoreFrom)")
    .message("restoreFrom is immutable: it can be set only when the cluster is created")
    .field_path(".restoreFrom"))]
#[x_kube(validation = Rule::new("self.mode == 'Replication' || !has(self.backup) || !has(self.backup.verify) || !self.backup.verify")
    .message("backup.verify: restore drills are available for Replication mode; a Cluster mode backup's shards cannot be verified yet")
    .field_path(".backup.verify"))]
#[serde(rename_all = "camelCase")]
pub struct RedisClusterSpec {
    /// `Replication` (one primary, its replicas and a Sentinel quorum) or `Cluster` (hash
    /// slots sharded over primaries, each with replicas). Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("mode is immutable"))]
    pub mode: Mode,

    /// Replication mode: how many replicas follow the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 8))]
    pub replicas: Option<i32>,

    /// Replication mode: the Sentinels that watch the primary and fail over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel: Option<SentinelSpec>,

    /// Cluster mode: how many primaries share the 16384 hash slots (at least 3, as Redis
    /// Cluster needs a majority of primaries to agree on a failover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 3, max = 32))]
    pub shards: Option<i32>,

    /// Cluster mode: replicas of each primary. Immutable: the pods of a shard are laid out by
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("replicasPerShard is immutable"))]
    pub replicas_per_shard: Option<i32>,

    /// Redis version: `7.0.x`, `7.2.x` or `7.4.x`. An upgrade goes one release at a time (7.0
    /// to 7.2 to 7.4), never down: a server cannot load the snapshot of a newer one.
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^7\.(0|2|4)\.[0-9]+$"))]
    #[x_kube(validation = version_transition_rule())]
    pub version: String,

    /// The container image; default `redis:<version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_IMAGE), regex(pattern = IMAGE))]
    pub image: Option<String>,

    /// Persistent storage for each node. Immutable: a StatefulSet's volume claim templates
    /// cannot change.
    #[x_kube(validation = Rule::new("self == oldSelf").message("storage is immutable"))]
    pub storage: Storage,

    /// CPU and memory for each node's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = validation::resource_requirements)]
    pub resources: Option<ResourceRequirements>,

    /// Scheduling and metadata overrides for the node pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodOverrides>,

    /// How the nodes keep their data on disk.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self.appendOnly || !oldSelf.appendOnly").message(
        "persistence.appendOnly cannot be turned off: the nodes would restart from their older RDB snapshots"
    ))]
    pub persistence: Persistence,

    /// `redis.conf` overrides, for example `maxmemory: 1gb`. Settings the operator owns
    /// (addresses, authentication, replication, cluster membership, persistence, paths) are
    /// refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    #[x_kube(validation = Rule::new(format!(
        "self.all(k, !(k.lowerAscii() in {owned}))",
        owned = cel_list(OPERATOR_OWNED_SETTINGS),
    )).message(Message::Message(format!(
        "config: these settings are set by the operator and cannot be overridden: {}",
        OPERATOR_OWNED_SETTINGS.join(", "),
    ))))]
    pub config: BTreeMap<String, String>,

    /// Secret holding the password of the default user under the key `password`. When absent
    /// the operator generates one in `<cluster>-auth`. Servers read it from a file; it never
    /// appears on a command line or in a log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub auth_secret: Option<String>,

    /// How often to take snapshots and how long to keep them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupPolicy>,

    /// Start a new cluster from a stored snapshot: the `RedisBackup` whose latest snapshot to
    /// load into each primary before it starts. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("restoreFrom is immutable"))]
    pub restore_from: Option<RestoreSource>,
}

/// The admission rule of `spec.version` changes: never down (a server cannot load the RDB
/// snapshot of a newer release), and one release at a time (7.0 to 7.2 to 7.4). A rule on the
/// field, which a status write leaves unchanged.
fn version_transition_rule() -> kube::core::Rule {
    let pattern = "^[0-9]+[.][0-9]+[.][0-9]+$";
    kube::core::Rule::new(format!(
        "!self.matches('{pattern}') || !oldSelf.matches('{pattern}') \
         || ({new} >= {old} && {new_release} <= {old_release} + 2)",
        new = cel_version_number("self"),
        old = cel_version_number("oldSelf"),
        new_release = cel_release_number("self"),
        old_release = cel_release_number("oldSelf"),
    ))
    .message("version: downgrades are not supported; upgrade one release at a time (7.0 to 7.2 to 7.4)")
}

/// Renders a CEL list literal of strings.
fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| format!("'{item}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// How the deployment is shaped.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One primary, its replicas, and Sentinels that fail over.
    #[default]
    Replication,
    /// Redis Cluster: hash slots sharded over primaries.
    Cluster,
}

/// The Sentinels of a replication-mode deployment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.quorum) || self.quorum <= self.replicas")
    .message("sentinel.quorum cannot exceed sentinel.replicas").field_path(".quorum"))]
#[serde(rename_all = "camelCase")]
pub struct SentinelSpec {
    /// How many Sentinels run; odd, so a majority exists.
    #[serde(default = "default_sentinels")]
    #[schemars(range(min = 3, max = 7))]
    #[x_kube(validation = Rule::new("self % 2 == 1").message("sentinel.replicas must be odd"))]
    pub replicas: i32,
    /// Sentinels that must agree the primary is down before a failover; default a majority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub quorum: Option<i32>,
    /// How long the primary may fail to answer before a Sentinel deems it down.
    #[serde(default = "default_down_after")]
    #[schemars(range(min = 1000, max = 600_000))]
    pub down_after_millis: i64,
    /// How long a failover may take before another Sentinel may try.
    #[serde(default = "default_failover_timeout")]
    #[schemars(range(min = 5000, max = 3_600_000))]
    pub failover_timeout_millis: i64,
}

impl Default for SentinelSpec {
    fn default() -> Self {
        Self {
            replicas: default_sentinels(),
            quorum: None,
            down_after_millis: default_down_after(),
            failover_timeout_millis: default_failover_timeout(),
        }
    }
}

impl SentinelSpec {
    /// The configured quorum, or a majority of the Sentinels.
    pub fn effective_quorum(&self) -> u32 {
        self.quorum.map_or(self.replicas / 2 + 1, |quorum| quorum).max(1) as u32
    }
}

fn default_sentinels() -> i32 {
    3
}

fn default_down_after() -> i64 {
    5000
}

fn default_failover_timeout() -> i64 {
    60_000
}

/// On-disk persistence.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Persistence {
    /// RDB snapshot points, as Redis's `save` setting (`"3600 1 300 100"`); empty turns RDB
    /// snapshots off.
    #[serde(default = "default_rdb_save")]
    #[schemars(regex(pattern = r"^(\s*[0-9]+\s+[0-9]+)*\s*$"))]
    pub rdb_save: String,
    /// Keep an append-only file as well (the default): every write a node acknowledged is in
    /// it before the answer, so a node whose server is killed and restarted comes back with all
    /// of them, where from its last RDB snapshot alone it would come back without the writes
    /// since (and its replicas, syncing from it, would drop them too). Turning it on for a
    /// deployment with data starts each node's file from its RDB snapshot. It cannot be turned
    /// off again: the nodes would restart from that older snapshot.
    #[serde(default = "default_append_only")]
    pub append_only: bool,
    /// When the append-only file is flushed to disk.
    #[serde(default)]
    pub append_fsync: AppendFsync,
}

impl Default for Persistence {
    fn default() -> Self {
        Self {
            rdb_save: default_rdb_save(),
            append_only: default_append_only(),
            append_fsync: AppendFsync::default(),
        }
    }
}

fn default_append_only() -> bool {
    true
}

fn default_rdb_save() -> String {
    "3600 1 300 100 60 10000".to_string()
}

/// `appendfsync`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum AppendFsync {
    Always,
    #[default]
    EverySec,
    No,
}

impl AppendFsync {
    pub fn as_config(self) -> &'static str {
        match self {
            AppendFsync::Always => "always",
            AppendFsync::EverySec => "everysec",
            AppendFsync::No => "no",
        }
    }
}

/// What the operator last observed of the deployment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisClusterStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Replication mode: the node that accepts writes, as the Sentinels agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// Replication mode: the address (`ip:port`) `primary` had when a majority of the Sentinels
    /// last agreed on it. When every data pod comes back on a new address, the Sentinels still
    /// name this one; it is how the operator knows which node they mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_address: Option<String>,
    /// Cluster mode: how the data nodes are laid out over StatefulSets, recorded on the first
    /// pass. A deployment keeps the layout it was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_layout: Option<DataLayout>,
    /// Cluster mode: primaries serving slots.
    #[serde(default)]
    pub shards: i32,
    /// Nodes that are Healthy and, for replicas, linked to their primary.
    #[serde(default)]
    pub ready_nodes: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeStatus>,
    /// Sentinels (replication mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sentinels: Vec<SentinelStatus>,
    /// Cluster mode: the slot moves of a rebalance in progress, recorded before each is made
    /// so that a restarted operator resumes it (the same state shows in `CLUSTER NODES` as
    /// migrating and importing slots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<RebalanceStatus>,
    /// The last change of primary the operator saw Sentinel make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<FailoverRecord>,
    /// The newest successful backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<BackupRecord>,
    /// The last restore drill that ended, of any of its backups with `verify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drill: Option<quorum_core::crd::DrillRecord>,
    /// A cluster created with `restoreFrom`: the snapshots it starts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreStatus>,
    /// The repair asked for with the `quorum.dev/repair` annotation, while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<quorum_core::crd::RepairRecord>,
    /// Replication mode: where a recovery asked for with `quorum.dev/recover-from` stands (a
    /// replica made the primary in place of one lost for good).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<quorum_core::crd::RecoveryRecord>,
    /// Replication mode: the node a recovery made the primary, until every Sentinel has been
    /// seen monitoring it. A Sentinel that names another primary meanwhile was out of reach
    /// when it happened: it is told to monitor this node, never followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_on_request: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// How a cluster-mode deployment's data nodes are laid out over StatefulSets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DataLayout {
    /// One StatefulSet per shard, `<name>-shard-<s>`, so each shard's pods can be kept on
    /// distinct nodes.
    StatefulSetPerShard,
    /// One StatefulSet `<name>` for every shard: deployments created before per-shard
    /// StatefulSets keep it, so an operator upgrade moves no data and restarts no pod.
    OneStatefulSet,
}

/// The snapshots a cluster created with `restoreFrom` starts from, recorded when its backup
/// first had them and before any data pod existed. The data pods' restore step is built from
/// this record, not from the backup, so the pod template stays the same (and no pod restarts)
/// when the backup later takes new snapshots or is deleted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// The `RedisBackup` they came from.
    pub backup_name: String,
    /// One per node that starts from a snapshot: the first primary (replication mode) or each
    /// shard's first node (cluster mode).
    pub snapshots: Vec<RestoreSnapshot>,
    /// The image of the init step that fetches and places them: the operator's own.
    pub image: String,
    /// The backup's S3 endpoint, region and credentials Secret, for `s3://` locations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_name: Option<String>,
    /// Whether a plain-HTTP S3 endpoint may be used (the operator's setting).
    #[serde(default)]
    pub allow_http: bool,
}

/// The snapshot one node starts from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSnapshot {
    /// The data pod's ordinal.
    pub ordinal: i32,
    pub location: String,
    pub sha256: String,
    /// Cluster mode: the slot ranges the shard served when the snapshot was taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
}

/// One node as the server and the operator see it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub name: String,
    /// `Primary`, `Replica` or `Unknown`.
    pub role: String,
    /// `Healthy`, `Unhealthy` or `Unknown` (not reachable from the operator).
    pub health: String,
    /// Cluster mode: the node's id, which it keeps across restarts and address changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Cluster mode: the shard (0-based) the node's pod belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<i32>,
    /// Cluster mode: the slot ranges this primary serves, `start-end`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
    /// For a replica, the node it follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub following: Option<String>,
    /// For a replica, whether its link to the primary is up (`up` or `down`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Why the node is not healthy, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when the operator has seen the node not healthy (Unhealthy or Unknown) without a
    /// break: for the primary, where a failover's time from loss starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<Time>,
}

/// One Sentinel as the operator sees it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SentinelStatus {
    pub name: String,
    /// `Healthy` or `Unknown`.
    pub health: String,
    /// The primary it names, when it monitors one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
}

/// A rebalance in progress.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceStatus {
    /// The shard count being moved to.
    pub target_shards: i32,
    /// The move being made: the slot range, the source and target node ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<SlotMoveStatus>,
    /// Moves still to make after the current one.
    #[serde(default)]
    pub remaining_moves: i32,
    pub started_at: Time,
}

/// One slot move.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlotMoveStatus {
    /// `start-end`.
    pub slots: String,
    pub from: String,
    pub to: String,
}

/// A change of primary Sentinel made, as the operator saw it.
pub type FailoverRecord = quorum_core::crd::ObservedFailover;

/// An RDB snapshot of a `RedisCluster` (of every shard, in cluster mode), taken over the
/// replication protocol as `redis-cli --rdb` does, once on demand or on a cron schedule, and
/// streamed to an object store with its size and checksum.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "redis.quorum.dev",
    version = "v1alpha1",
    kind = "RedisBackup",
    plural = "redisbackups",
    namespaced,
    status = "RedisBackupStatus",
    shortname = "redisbackup",
    category = "quorum",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".status.lastSnapshot.sizeBytes"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "An RDB snapshot (one-shot or scheduled) of a Redis deployment managed by Quorum"
)]
#[x_kube(validation = Rule::new("!has(self.retain) || has(self.schedule)")
    .message("retain applies only to scheduled backups: set schedule or remove retain"))]
#[serde(rename_all = "camelCase")]
pub struct RedisBackupSpec {
    #[serde(flatten)]
    pub backup: BackupSpec,
}

/// What the operator last did for a `RedisBackup`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisBackupStatus {
    #[serde(flatten)]
    pub run: BackupRunStatus,
    /// Cluster mode: one snapshot per shard, with the slots it covers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardSnapshot>,
    /// Replication mode: the keys without an expiry in the newest snapshot, counted and
    /// digested with their types and string values: a node restored from it holds the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<quorum_core::backup::digest::ContentFingerprint>,
}

/// One shard's snapshot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardSnapshot {
    pub shard: i32,
    /// The node it was read from.
    pub node: String,
    /// The slot ranges the shard served, `start-end`.
    pub slots: Vec<String>,
    pub location: String,
    pub size_bytes: i64,
    pub sha256: String,
}

/// The `config` keys the operator refuses: the same rule as the CRD's, for the operator's own
/// check (a resource stored before the rule existed is not trusted).
pub fn forbidden_config_keys(config: &BTreeMap<String, String>) -> Vec<String> {
    config
        .keys()
        .filter(|key| OPERATOR_OWNED_SETTINGS.contains(&key.to_ascii_lowercase().as_str()))
        .cloned()
        .collect()
}

impl RedisClusterSpec {
    /// Data nodes the spec asks for: the primary and its replicas, or every shard's nodes.
    pub fn node_count(&self) -> usize {
        match self.mode {
            Mode::Replication => 1 + self.replicas.unwrap_or(0).max(0) as usize,
            Mode::Cluster => self.shard_count() * self.nodes_per_shard(),
        }
    }

    /// Cluster mode: the desired number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.unwrap_or(0).max(0) as usize
    }

    /// Cluster mode: a primary and its replicas.
    pub fn nodes_per_shard(&self) -> usize {
        1 + self.replicas_per_shard.unwrap_or(0).max(0) as usize
    }

    /// Replication mode: the Sentinel settings (defaults when absent).
    pub fn sentinel_settings(&self) -> SentinelSpec {
        self.sentinel.clone().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_settings_are_recognised_in_any_case() {
        let config = BTreeMap::from([
            ("maxmemory".to_string(), "1gb".to_string()),
            ("RequirePass".to_string(), "x".to_string()),
            ("cluster-allow-replica-migration".to_string(), "yes".to_string()),
        ]);
        assert_eq!(
            forbidden_config_keys(&config),
            vec![
                "RequirePass".to_string(),
                "cluster-allow-replica-migration".to_string()
            ]
        );
    }

    #[test]
    fn the_default_quorum_is_a_majority() {
        let spec = |replicas, quorum| SentinelSpec {
            replicas,
            quorum,
            ..SentinelSpec::default()
        };
        assert_eq!(spec(3, None).effective_quorum(), 2);
        assert_eq!(spec(5, None).effective_quorum(), 3);
        assert_eq!(spec(5, Some(2)).effective_quorum(), 2);
    }
}
