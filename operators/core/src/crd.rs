//! Fragments of custom resources that every Quorum operator shares: member storage, pod
//! overrides, backup policies and destinations, restore sources and backup records.
//!
//! Each operator embeds these in its own resources, so the same spec reads the same way for
//! every engine. The schema of a field comes from these types; a field's own doc comment in the
//! embedding resource replaces the type's description.

pub mod validation;

use k8s_openapi::{
    api::core::v1::{Affinity, Toleration},
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::Time},
};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use validation::{DNS_SUBDOMAIN, MAX_OBJECT_NAME, MAX_SCHEDULE, POSITIVE_QUANTITY};

/// Persistent storage of each member.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// Size of each member's volume, greater than zero, for example `8Gi`.
    #[schemars(extend("pattern" = POSITIVE_QUANTITY))]
    pub size: Quantity,
    /// The StorageClass; the cluster default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub storage_class_name: Option<String>,
}

/// Pod-level overrides merged into the member pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodOverrides {
    /// Labels added to the member pods: keys and values as Kubernetes labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = validation::label_map)]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to the member pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = validation::annotation_map)]
    pub annotations: BTreeMap<String, String>,
    /// Node labels the member pods must run on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = validation::label_map)]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the member pods tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = validation::tolerations)]
    pub tolerations: Vec<Toleration>,
    /// Replaces the operator's default affinity (members preferring distinct nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// The PriorityClass of the member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub priority_class_name: Option<String>,
}

/// Scheduled snapshots.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupPolicy {
    /// Cron schedule (five fields, UTC), for example `0 */6 * * *`.
    #[schemars(length(max = MAX_SCHEDULE))]
    #[x_kube(validation = validation::schedule_rule())]
    pub schedule: String,
    /// Where snapshots go.
    pub destination: BackupDestination,
    /// How many successful snapshots to keep.
    #[serde(default = "default_retention")]
    #[schemars(range(min = 1))]
    pub retain: u32,
    /// `BackupStale` turns true when the newest good snapshot is older than this many minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_age_minutes: Option<u32>,
    /// Restore drills: each new snapshot is restored into a throw-away one-member cluster,
    /// what it holds is compared with what the snapshot recorded, and the cluster is deleted;
    /// `BackupUnverified` says how the last drill went.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify: bool,
}

/// How many successful snapshots a [`BackupPolicy`] keeps when `retain` is absent.
fn default_retention() -> u32 {
    7
}

/// An object store location for snapshots: exactly one of `s3` or `filesystem`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.s3) != has(self.filesystem)")
    .message("set exactly one of s3 or filesystem"))]
#[serde(rename_all = "camelCase")]
pub struct BackupDestination {
    /// S3-compatible bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Destination>,
    /// A directory on a volume mounted into the operator (for tests and single-node setups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<FilesystemDestination>,
}

/// An S3-compatible bucket.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Destination {
    /// The bucket's name: 3 to 63 lowercase letters, digits, `.` and `-`.
    #[schemars(regex(pattern = r"^[a-z0-9][-a-z0-9.]{1,61}[a-z0-9]$"))]
    pub bucket: String,
    /// Objects are stored under this prefix (no leading `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512), regex(pattern = r"^[^/\s][^\s]*$"))]
    pub prefix: Option<String>,
    /// Endpoint URL for non-AWS stores (MinIO, Ceph RGW, ...): `https://host[:port][/path]`
    /// (`http://` only where the operator allows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048), regex(pattern = r"^https?://[^/\s]+(/[^\s]*)?$"))]
    pub endpoint: Option<String>,
    /// The bucket's region, for example `eu-west-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), regex(pattern = r"^[a-z0-9][-a-z0-9]*$"))]
    pub region: Option<String>,
    /// Secret with `accessKeyId` and `secretAccessKey`.
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub credentials_secret_name: String,
}

/// A directory for snapshots.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilesystemDestination {
    /// An absolute path on a volume mounted into the operator.
    #[schemars(length(max = 4096), regex(pattern = r"^/"))]
    pub path: String,
}

/// The backup a new cluster starts from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSource {
    /// Name of a backup resource of the same operator, in the same namespace, whose snapshot succeeded.
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub backup_name: String,
}

/// The annotation by which a person asks the operator to rebuild one member from its healthy
/// peers, on an empty volume: its value names the member (its pod's name). The operator takes it
/// through the same safety gate as every disruption, never on the leader or primary and never
/// below quorum, records where it stands in `status.repair`, and does it once per request:
/// removing the annotation ends the request (and its record), so adding it again asks again.
pub const REPAIR_ANNOTATION: &str = "quorum.dev/repair";

/// Where a repair asked for by [`REPAIR_ANNOTATION`] stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RepairPhase {
    /// Not started: the operator waits (for the gate, or for the request to be corrected).
    Waiting,
    /// The member was removed and is being rebuilt.
    Rebuilding,
    /// The member is back, rebuilt, and healthy.
    Done,
}

/// A repair asked for by [`REPAIR_ANNOTATION`], kept while the annotation stays.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepairRecord {
    /// The member the annotation names.
    pub member: String,
    pub phase: RepairPhase,
    /// The identity of the member that was removed to be rebuilt (etcd: its member id, in hex),
    /// once it was: the request is not taken again while this is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<String>,
    /// The uid of the member's data claim when `replaced` was recorded, for members that keep
    /// their data on a claim: while that claim is still the member's (its pod was replaced
    /// before the wipe reached it), the member is wiped again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_claim: Option<String>,
    /// What the operator waits for, or why it refuses, or what it did.
    pub message: String,
}

/// A person's request to bring a cluster whose primary (or majority) is lost for good back into
/// service from one surviving member, which the annotation names. The operator never does this
/// by itself: it cannot tell a member lost for good from one that is slow to come back, and what
/// only the lost members held is given up. It is taken only while the cluster is blocked on
/// members that do not answer, only from the surviving member that holds everything any member
/// that answers holds, once per request (`status.recovery` records it). Removing the annotation
/// ends the request and its record.
pub const RECOVER_ANNOTATION: &str = "quorum.dev/recover-from";

/// Where a recovery asked for by [`RECOVER_ANNOTATION`] stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RecoveryPhase {
    /// Not taken: the operator waits, or refuses the request as it stands, and says why.
    Waiting,
    /// The named member serves the cluster.
    Done,
    /// Never taken: the request was made while nothing was lost, or the loss it was made for
    /// is over. A request is for one loss: remove the annotation, and set it again during the
    /// next one if it comes.
    Expired,
}

/// A recovery asked for by [`RECOVER_ANNOTATION`], kept while the annotation stays.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryRecord {
    /// The member the annotation names.
    pub member: String,
    pub phase: RecoveryPhase,
    /// The primary it replaced, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<String>,
    /// What the operator waits for, or why it refuses, or what it did.
    pub message: String,
}

/// A change of primary the database made by itself (a Sentinel failover, an election), as the
/// operator saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedFailover {
    pub from: String,
    pub to: String,
    /// When the operator first saw the new primary.
    pub observed_at: Time,
    /// When the old primary was lost, as far as the operator knows: its first failed observation
    /// of it, or the database's own last contact with it where the database says; absent when
    /// the operator saw the loss only together with the new primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_at: Option<Time>,
    /// When the new primary began to accept writes, where the database says (MongoDB's
    /// `electionDate`); else the operator's first sight of it stands for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable_at: Option<Time>,
    /// From `lostAt` to the new primary accepting writes (`writableAt`, else `observedAt`), in
    /// milliseconds: how long clients had no primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_loss_millis: Option<i64>,
}

impl ObservedFailover {
    /// `to` seen as the primary at `now` in place of `from`, lost at `lost_at`, writable since
    /// `writable_at`, where known.
    pub fn new(
        from: String,
        to: String,
        lost_at: Option<Time>,
        writable_at: Option<Time>,
        now: k8s_openapi::jiff::Timestamp,
    ) -> Self {
        let writable = writable_at.as_ref().map_or(now, |at| at.0);
        // A loss first seen in the pass that also sees the new primary says nothing of when it
        // happened: unknown, not an instant failover.
        let lost_at = lost_at.filter(|lost| lost.0 < now);
        Self {
            from,
            to,
            observed_at: Time(now),
            from_loss_millis: lost_at
                .as_ref()
                .map(|lost| writable.duration_since(lost.0).as_millis().max(0) as i64),
            lost_at,
            writable_at,
        }
    }

    /// The time from loss, in seconds, for the metric.
    pub fn from_loss_seconds(&self) -> Option<f64> {
        self.from_loss_millis.map(|millis| millis as f64 / 1000.0)
    }
}

/// A backup that was taken and stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupRecord {
    /// The backup resource that took it.
    pub name: String,
    /// Where it is stored (URL).
    pub location: String,
    pub completed_at: Time,
    pub size_bytes: i64,
    pub sha256: String,
}

/// The spec every backup resource shares: which cluster,
/// where to, when, and how many to keep.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// Name of the cluster, in the same namespace, to back up. Immutable: a backup's history
    /// belongs to one cluster.
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterName is immutable"))]
    #[schemars(length(min = 1, max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub cluster_name: String,

    /// Where the snapshot goes: exactly one of `s3` or `filesystem`.
    pub destination: BackupDestination,

    /// Cron schedule, five fields (minute hour day-of-month month day-of-week), in UTC, for
    /// example `0 */6 * * *`. Absent: one snapshot, taken as soon as the resource is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_SCHEDULE))]
    #[x_kube(validation = validation::schedule_rule())]
    pub schedule: Option<String>,

    /// How many successful snapshots of a schedule to keep; older ones are deleted. Only
    /// meaningful with `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub retain: Option<u32>,

    /// Restore drills: each new snapshot is restored into a throw-away one-member cluster
    /// (`<backup>-drill`), what it holds is compared with what the snapshot recorded, and the
    /// cluster is deleted; `status.drill` and the cluster's `BackupUnverified` say how it went.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify: bool,
}

impl BackupSpec {
    /// The spec of the scheduled backup that carries out `cluster`'s backup `policy`.
    pub fn scheduled(cluster: &str, policy: &BackupPolicy) -> Self {
        Self {
            cluster_name: cluster.to_string(),
            destination: policy.destination.clone(),
            schedule: Some(policy.schedule.clone()),
            retain: Some(policy.retain),
            verify: policy.verify,
        }
    }
}

/// The status every backup resource shares: where its
/// current or last run is, and what it stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupRunStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// The newest snapshot this resource stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_snapshot: Option<BackupRecord>,
    /// When the current (or last) run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the last run ended, successfully or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// How long the last run took, in whole seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<i64>,
    /// The member that served the snapshot (its pod name; in Redis cluster mode, the first
    /// shard's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Why the last run failed, or what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    /// When a scheduled backup runs next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_scheduled_at: Option<Time>,
    /// What retention (`retain`) deleted last, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pruned: Option<PruneRecord>,
    /// The Job of the run in progress, or of the last run (backups run in Jobs beside the
    /// data): `kubectl logs job/<job>` shows what it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// How far the run in progress has got, reported while it streams; after a run, what the
    /// whole run sent and its average rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<BackupProgress>,
    /// The restore drill of the newest snapshot (`verify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<DrillRecord>,
}

/// A restore drill of one snapshot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillRecord {
    /// The backup whose snapshot is drilled.
    pub backup: String,
    /// The snapshot restored (where it is stored).
    pub location: String,
    pub phase: DrillPhase,
    /// The throw-away cluster it is restored into, deleted once the drill ends.
    pub cluster: String,
    pub started_at: Time,
    /// When what the cluster held was found to be what the snapshot recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<Time>,
    /// What the drill found, or why it failed.
    pub message: String,
}

/// Where a restore drill is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DrillPhase {
    /// The throw-away cluster is being created from the snapshot.
    Restoring,
    /// It held what the snapshot recorded.
    Verified,
    /// It did not, or it could not be restored: `message` says which.
    Failed,
}

/// How many bytes a backup run has streamed to its destination, and how fast.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupProgress {
    /// Bytes sent to the destination so far.
    pub bytes: u64,
    /// The average rate since the run started, in bytes per second.
    pub bytes_per_second: u64,
    /// When these figures were taken.
    pub updated_at: Time,
}

/// Objects a backup's retention deleted in one pass.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PruneRecord {
    pub at: Time,
    /// Where each deleted object was (URL), oldest first.
    pub locations: Vec<String>,
}

/// Where a backup run is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BackupPhase {
    /// Accepted; waiting for its turn or for a healthy member.
    Pending,
    /// A snapshot is being streamed to the destination.
    Running,
    /// The last snapshot was stored completely and verified.
    Succeeded,
    /// The last snapshot failed; `message` says why. A schedule tries again at its next time.
    Failed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retain_defaults_to_seven() {
        let policy: BackupPolicy = serde_json::from_value(serde_json::json!({
            "schedule": "0 * * * *",
            "destination": {"filesystem": {"path": "/backups"}},
        }))
        .expect("a policy without retain");
        assert_eq!(policy.retain, 7);
        assert_eq!(policy.max_age_minutes, None);
    }
}
