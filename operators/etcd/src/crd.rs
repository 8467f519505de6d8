//! The `EtcdCluster` custom resource (`etcd.quorum.dev/v1alpha1`).
//!
//! Validation lives in the schema and CEL rules, so `kubectl apply` refuses a bad spec with a
//! message naming the field before the operator ever sees it.

// Several `printcolumn(type_ = "string", ...)` arguments look like duplicates to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::{
    api::core::v1::ResourceRequirements,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use quorum_core::crd::validation::{self, DNS_SUBDOMAIN, IMAGE, MAX_IMAGE, MAX_OBJECT_NAME};
pub use quorum_core::crd::{
    BackupDestination, BackupPhase, BackupPolicy, BackupRecord, BackupRunStatus, BackupSpec,
    FilesystemDestination, PodOverrides, RestoreSource, S3Destination, Storage,
};

/// The former name of [`Storage`], kept so `etcd_operator::crd::EtcdStorage` (used by the
/// integration tests) still names it.
pub type EtcdStorage = Storage;

/// The longest `metadata.name` an `EtcdCluster` may have: its StatefulSet is named after it.
pub const MAX_NAME: usize = quorum_core::naming::max_cluster_name("");

/// An etcd cluster: its members, version and storage, kept in shape through etcd's own
/// membership API, one safe step at a time.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.quorum.dev",
    version = "v1alpha1",
    kind = "EtcdCluster",
    namespaced,
    status = "EtcdClusterStatus",
    shortname = "etcd",
    category = "quorum",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Members", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(name = "Leader", type_ = "string", json_path = ".status.leader"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "An etcd cluster managed by Quorum",
    validation = quorum_core::naming::cluster_name_rule(MAX_NAME)
)]
// A field's own rule sees only changes of a value that was there before and is still there;
// these refuse adding or removing it after creation.
#[x_kube(validation = Rule::new("has(self.restoreFrom) == has(oldSelf.restoreFrom)")
    .message("restoreFrom is immutable: it can be set only when the cluster is created")
    .field_path(".restoreFrom"))]
#[x_kube(validation = Rule::new("has(self.tls) == has(oldSelf.tls)")
    .message("tls is immutable: members cannot move between plain and TLS traffic while running")
    .field_path(".tls"))]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterSpec {
    /// Number of voting members. Odd counts are recommended: four members tolerate one
    /// failure, as three do, with more to lose.
    #[schemars(range(min = 1, max = 9))]
    pub replicas: i32,

    /// etcd version, `3.MINOR.PATCH` (3.5 or newer). Changing it rolls the members one at a
    /// time, the leader last.
    #[schemars(regex(pattern = r"^3\.([5-9]|[1-9][0-9])\.[0-9]+$"))]
    #[x_kube(validation = Rule::new(
        "int(self.split('.')[1]) >= int(oldSelf.split('.')[1]) && int(self.split('.')[1]) <= int(oldSelf.split('.')[1]) + 1"
    ).message("version: downgrades and skipping a minor version are not supported; upgrade one minor version at a time"))]
    pub version: String,

    /// The container image; default `gcr.io/etcd-development/etcd:v<version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_IMAGE), regex(pattern = IMAGE))]
    pub image: Option<String>,

    /// Persistent storage for each member. Immutable: a StatefulSet's volume claim templates
    /// cannot change.
    #[x_kube(validation = Rule::new("self == oldSelf").message("storage is immutable"))]
    pub storage: Storage,

    /// CPU and memory for each member's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = validation::resource_requirements)]
    pub resources: Option<ResourceRequirements>,

    /// Scheduling and metadata overrides for the member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodOverrides>,

    /// TLS for client and peer traffic, from Secrets of type `kubernetes.io/tls` (with `ca.crt`).
    /// Immutable: members cannot move between plain and TLS traffic while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("tls is immutable"))]
    pub tls: Option<EtcdTls>,

    /// How often to take snapshots and how long to keep them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupPolicy>,

    /// Bootstrap the cluster from a backup instead of empty. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("restoreFrom is immutable"))]
    pub restore_from: Option<RestoreSource>,
}

/// TLS material, by Secret name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdTls {
    /// Secret with the client-facing serving certificate (`tls.crt`, `tls.key`, `ca.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub client_secret_name: Option<String>,
    /// Secret with the peer certificate (`tls.crt`, `tls.key`, `ca.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub peer_secret_name: Option<String>,
}

/// What the operator last observed of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Started voting members (the scale subresource's current count).
    #[serde(default)]
    pub replicas: i32,
    /// Label selector of the member pods, for the scale subresource.
    #[serde(default)]
    pub selector: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// While no member leads: the member that last did, so the election that follows is
    /// recorded as a change from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_leader: Option<String>,
    /// The newest change of leader, as the operator saw it: from the first failed observation of
    /// the old leader (when it saw one) to its first sight of the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_leader_change: Option<quorum_core::crd::ObservedFailover>,
    /// The version every member runs, once they agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// etcd's cluster id, in hex, once the cluster has formed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
    /// The membership or disruptive step being taken, recorded before it is taken so that a
    /// restarted operator resumes it instead of repeating it blindly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlightStep>,
    /// Ordinals of replaced members whose old volume must be wiped before their pod returns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wipe_pending: Vec<i32>,
    /// Ordinals of members a recovery gave up, their volumes wiped by it, still to be added back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejoin_pending: Vec<i32>,
    /// The newest successful backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<BackupRecord>,
    /// The last restore drill that ended, of any of its backups with `verify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drill: Option<quorum_core::crd::DrillRecord>,
    /// The repair asked for with the `quorum.dev/repair` annotation, while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<quorum_core::crd::RepairRecord>,
    /// The recovery from a lost quorum asked for with the `quorum.dev/recover-from` annotation,
    /// while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<quorum_core::crd::RecoveryRecord>,
    /// The backup the members restore while the cluster is restored in place (a recovery
    /// request for the newest backup, when no member survived).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restoring_from: Option<BackupRecord>,
    /// The snapshot a cluster created with `spec.restoreFrom` restores its members from: the
    /// backup's newest when the cluster was first reconciled, recorded before any member is
    /// made, so every member restores the same snapshot however often the backup runs
    /// meanwhile, and retention never deletes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<BackupRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

quorum_core::recorded_kinds! {
    /// The kind of a step in flight, as stored in `status.inFlight.action`.
    pub enum InFlightAction in "status.inFlight.action" {
        AddLearner,
        Promote,
        Remove,
        Replace,
        Upgrade,
        Recover,
        ForceNewCluster,
        EndForceNewCluster,
        RestoreInPlace,
        RestoreForming,
    }
}

/// A step in flight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InFlightStep {
    /// `AddLearner`, `Promote`, `Remove`, `Replace`, `Upgrade`, or a phase of a recovery from a
    /// lost quorum: `Recover`, `ForceNewCluster`, `EndForceNewCluster`; or `RestoreInPlace` then `RestoreForming` when no
    /// member survived.
    #[schemars(with = "String")]
    pub action: InFlightAction,
    pub ordinal: i32,
    /// etcd's member id, in hex, where the step names a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_id: Option<String>,
    pub started_at: Time,
}

/// One member as etcd and the operator see it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    pub name: String,
    /// etcd's member id, in hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_url: Option<String>,
    /// `Healthy`, `Unhealthy` or `Unknown` (not reachable from the operator).
    pub health: String,
    #[serde(default)]
    pub leader: bool,
    #[serde(default)]
    pub learner: bool,
    /// Since when the member has been continuously Unhealthy (not Unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_since: Option<Time>,
    /// Since when the operator has seen the member not healthy (Unhealthy or Unknown) without a
    /// break: for the leader, where a leader change's time from loss starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<Time>,
}

/// A snapshot of an `EtcdCluster`, taken once on demand or on a cron schedule, streamed to an
/// object store. The operator asks a healthy member (a follower when it can, to spare the
/// leader) for etcd's own snapshot, verifies etcd's trailing checksum while streaming, and
/// records size and SHA-256 of what was stored.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.quorum.dev",
    version = "v1alpha1",
    kind = "EtcdBackup",
    namespaced,
    status = "EtcdBackupStatus",
    shortname = "etcdbackup",
    category = "quorum",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".status.lastSnapshot.sizeBytes"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A snapshot (one-shot or scheduled) of an etcd cluster managed by Quorum"
)]
#[x_kube(validation = Rule::new("!has(self.retain) || has(self.schedule)")
    .message("retain applies only to scheduled backups: set schedule or remove retain"))]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupSpec {
    #[serde(flatten)]
    pub backup: BackupSpec,
}

/// What the operator last did for an `EtcdBackup`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupStatus {
    #[serde(flatten)]
    pub run: BackupRunStatus,
    /// The keys of the newest snapshot at the revision read just before it was taken, counted
    /// and digested: a member restored from it holds the same at that revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<EtcdContent>,
}

/// What an etcd snapshot holds: its keys and values at `revision`, counted and digested.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdContent {
    /// The revision the keys were read at, just before the snapshot began.
    pub revision: i64,
    #[serde(flatten)]
    pub fingerprint: quorum_core::backup::digest::ContentFingerprint,
}
