//! The `MongoDBReplicaSet` and `MongoDBBackup` custom resources (`mongodb.quorum.dev/v1alpha1`).
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
use quorum_core::backup::recovery::StoredPiece;
use quorum_core::crd::validation::{self, DNS_SUBDOMAIN, IMAGE, MAX_IMAGE, MAX_OBJECT_NAME};
pub use quorum_core::crd::{
    BackupDestination, BackupPhase, BackupPolicy, BackupRecord, BackupRunStatus, BackupSpec, PodOverrides,
    RestoreSource, Storage,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// MongoDB allows at most seven voting members in a replica set.
pub const MAX_VOTING_MEMBERS: i32 = 7;
/// MongoDB allows at most fifty members in a replica set.
pub const MAX_MEMBERS: i32 = 50;

/// The longest `metadata.name` a `MongoDBReplicaSet` may have: its arbiter's StatefulSet is `<name>-arbiter`.
pub const MAX_NAME: usize = quorum_core::naming::max_cluster_name(crate::resources::ARBITER_SUFFIX);

/// A MongoDB replica set: voting members that elect a primary, optional non-voting (and hidden)
/// members, an optional arbiter, kept in shape through the servers' own `replSetReconfig`, one
/// safe membership change at a time.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mongodb.quorum.dev",
    version = "v1alpha1",
    kind = "MongoDBReplicaSet",
    plural = "mongodbreplicasets",
    namespaced,
    status = "MongoDBReplicaSetStatus",
    shortname = "mongors",
    category = "quorum",
    scale(
        spec_replicas_path = ".spec.members",
        status_replicas_path = ".status.readyMembers"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Primary", type_ = "string", json_path = ".status.primary"),
    printcolumn(name = "Members", type_ = "integer", json_path = ".status.readyMembers"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A MongoDB replica set managed by Quorum",
    validation = quorum_core::naming::cluster_name_rule(MAX_NAME),
    validation = Rule::new(
        "self.spec.version.substring(0, 3) == oldSelf.spec.version.substring(0, 3) || \
         (has(oldSelf.status) && has(oldSelf.status.featureCompatibilityVersion) && \
         oldSelf.status.featureCompatibilityVersion == oldSelf.spec.version.substring(0, 3) && \
         int(self.spec.version.split('.')[0]) == int(oldSelf.spec.version.split('.')[0]) + 1)"
    )
    .message(
        "spec.version: upgrade one release at a time (6.0 to 7.0 to 8.0), and only once \
         status.featureCompatibilityVersion has reached the release running now: a server \
         refuses data more than one release older, and a downgrade is not possible"
    )
    .field_path(".spec.version")
)]
#[x_kube(validation = Rule::new("self.members + self.nonVotingMembers + (self.arbiter ? 1 : 0) <= 50")
    .message("members + nonVotingMembers + arbiter: a replica set has at most 50 members").field_path(".nonVotingMembers"))]
#[x_kube(validation = Rule::new("self.members + (self.arbiter ? 1 : 0) <= 7")
    .message("members: at most 7 voting members (the arbiter votes too); add non-voting members with nonVotingMembers").field_path(".members"))]
#[x_kube(validation = Rule::new("self.hiddenMembers <= self.nonVotingMembers")
    .message("hiddenMembers: hidden members are chosen among the non-voting members, so it cannot exceed nonVotingMembers").field_path(".hiddenMembers"))]
// The field's own rule sees only changes of a value that was there before and is still there;
// this one refuses adding or removing it after creation.
#[x_kube(validation = Rule::new("has(self.restoreFrom) == has(oldSelf.restoreFrom)")
    .message("restoreFrom is immutable: it can be set only when the replica set is created")
    .field_path(".restoreFrom"))]
#[serde(rename_all = "camelCase")]
pub struct MongoDBReplicaSetSpec {
    /// Voting, electable data-bearing members (1 to 7). An odd count, or an even count with an
    /// arbiter, keeps a majority possible after one loss; an even count alone is warned about.
    #[schemars(range(min = 1, max = 7))]
    pub members: i32,

    /// Data-bearing members that neither vote nor stand for election (`votes: 0`,
    /// `priority: 0`): read capacity that does not change the majority.
    #[serde(default)]
    #[schemars(range(min = 0, max = 49))]
    pub non_voting_members: i32,

    /// How many of the non-voting members are hidden from clients (for backups or analytics).
    #[serde(default)]
    #[schemars(range(min = 0, max = 49))]
    pub hidden_members: i32,

    /// Run one arbiter: it votes in elections but holds no data.
    #[serde(default)]
    pub arbiter: bool,

    /// MongoDB version: `6.0`, `7.0` or `8.0`, optionally with a patch (`7.0.14`). Raising it
    /// rolls the members one at a time, secondaries first, the primary after stepping down,
    /// then raises the featureCompatibilityVersion; one release at a time, never down.
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^(6\.0|7\.0|8\.0)(\.[0-9]+)?$"))]
    #[x_kube(validation = Rule::new("self.substring(0, 3) >= oldSelf.substring(0, 3)")
        .message("version: downgrades are not supported"))]
    pub version: String,

    /// The container image; default `mongo:<version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_IMAGE), regex(pattern = IMAGE))]
    pub image: Option<String>,

    /// Persistent storage for each data-bearing member. Immutable: a StatefulSet's volume
    /// claim templates cannot change.
    #[x_kube(validation = Rule::new("self == oldSelf").message("storage is immutable"))]
    pub storage: Storage,

    /// CPU and memory for each member's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = validation::resource_requirements)]
    pub resources: Option<ResourceRequirements>,

    /// Scheduling and metadata overrides for the member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodOverrides>,

    /// Secret with the administrator's `username` and `password`. When absent the operator
    /// generates one in `<name>-admin`. Members read it from a file; it never appears on a
    /// command line or in a log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub admin_secret: Option<String>,

    /// Secret with the members' shared `keyfile` (internal authentication). When absent the
    /// operator generates one in `<name>-keyfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub keyfile_secret: Option<String>,

    /// How often to take snapshots and how long to keep them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<MongoBackupPolicy>,

    /// Start a new replica set from a stored snapshot: the `MongoDBBackup` whose latest
    /// snapshot (or, with `pointInTime`, the newest snapshot before that point and the oplog
    /// archived after it) is loaded into the first member before any other joins. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("restoreFrom is immutable"))]
    pub restore_from: Option<MongoRestoreSource>,
}

/// A cluster's backup policy: the shared one, and the engine's own log archived with each run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MongoBackupPolicy {
    #[serde(flatten)]
    pub policy: BackupPolicy,
    /// Point-in-time recovery: each run also archives the oplog written since the previous run
    /// next to its snapshot, as `MongoDBBackup.spec.archiveOplog` does; a new replica set can
    /// then be restored to any second of what the kept runs hold (`restoreFrom.pointInTime`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archive_oplog: bool,
}

/// The backup a new replica set starts from, and optionally the time to restore to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MongoRestoreSource {
    #[serde(flatten)]
    pub backup: RestoreSource,
    /// Restore to this point rather than to the newest snapshot: the newest snapshot complete
    /// before it, then the oplog archived after that snapshot, up to it. Needs a
    /// `MongoDBBackup` with `archiveOplog`, and a point inside what it archived
    /// (`status.recoverableFrom` to `status.recoverableUntil`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<OplogPoint>,
}

impl MongoRestoreSource {
    /// The newest snapshot of `backup_name`.
    pub fn newest(backup_name: impl Into<String>) -> Self {
        Self {
            backup: RestoreSource {
                backup_name: backup_name.into(),
            },
            point_in_time: None,
        }
    }
}

/// The oplog a point-in-time restore replayed after its snapshot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoredPoint {
    /// The point asked for.
    pub time: Time,
    /// Archived pieces of oplog read, and the entries of user databases applied from them.
    pub oplog_pieces: i32,
    pub entries_applied: i64,
    /// The newest entry at or before the point (`seconds.increment`): the set holds every
    /// write up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached: Option<String>,
}

/// A time to restore to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OplogPoint {
    /// Every write whose oplog entry is at or before this time, and none after (RFC 3339; the
    /// oplog's timestamps count whole seconds, so a fraction is ignored).
    pub time: Time,
}

impl MongoDBReplicaSetSpec {
    /// Data-bearing members the spec asks for (voting and non-voting): the StatefulSet's size.
    pub fn data_members(&self) -> usize {
        (self.members.max(0) + self.non_voting_members.max(0)) as usize
    }

    /// The release (`7.0`) of the version (`7.0` or `7.0.14`).
    pub fn release(&self) -> String {
        release_of(&self.version)
    }
}

/// The release (`major.minor`) of a version string.
pub fn release_of(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// What the operator last observed of the replica set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MongoDBReplicaSetStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the operator initiated the set. Once set, the operator never initiates again,
    /// even if every member later reports no configuration (wiped volumes are a human's call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiated_at: Option<Time>,
    /// The member that accepts writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// While no member is primary: the member that last was, so the election that follows is
    /// recorded as a failover from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_primary: Option<String>,
    /// The newest change of primary the set made by itself (an election), as the operator saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<quorum_core::crd::ObservedFailover>,
    /// Members that are Healthy and PRIMARY, SECONDARY or ARBITER.
    #[serde(default)]
    pub ready_members: i32,
    /// The replica set configuration's version, as the primary reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_version: Option<i64>,
    /// The featureCompatibilityVersion the primary reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_compatibility_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
    /// The membership change in progress, recorded before it is made, so a restarted operator
    /// resumes it rather than repeat or forget it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership_change: Option<MembershipChange>,
    /// The newest successful backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<BackupRecord>,
    /// The last restore drill that ended, of any of its backups with `verify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drill: Option<quorum_core::crd::DrillRecord>,
    /// A set created with `restoreFrom`: the snapshot it was restored from, recorded once
    /// loaded so that it is never loaded again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<BackupRecord>,
    /// A set restored to a point in time (`restoreFrom.pointInTime`): what was replayed after
    /// the snapshot in `restoredFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_to: Option<RestoredPoint>,
    /// While the restore of `restoreFrom` keeps failing: how many attempts failed in a row,
    /// why the last did, and when the next may start (each waits twice as long, up to ten
    /// minutes). Cleared once the restore succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_failures: Option<quorum_core::backup::restore_retry::FailedRestores>,
    /// The recovery asked for with the `quorum.dev/recover-from` annotation, while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<quorum_core::crd::RecoveryRecord>,
    /// The repair asked for with the `quorum.dev/repair` annotation, while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<quorum_core::crd::RepairRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One member as the operator and the primary see it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The pod's name.
    pub name: String,
    /// `host:port` in the replica set configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The member's replica set state as the primary reports it (`PRIMARY`, `SECONDARY`,
    /// `STARTUP2`, `ARBITER`, ...), or `NotAMember` before it is added.
    pub state: String,
    /// `Healthy`, `Unhealthy` or `Unknown` (not reachable from the operator).
    pub health: String,
    pub votes: i32,
    pub priority: f64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub arbiter: bool,
    /// How far the member's last applied operation trails the primary's, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<i64>,
    /// The server version the member runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why the member is not healthy, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when the operator has seen the member not healthy (Unhealthy or Unknown) without a
    /// break: for the primary, where a failover's time from loss starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<Time>,
}

quorum_core::recorded_kinds! {
    /// The kind of a membership change in progress, as stored in `status.membershipChange.kind`.
    pub enum ChangeKind in "status.membershipChange.kind" {
        /// `replSetInitiate` with the first member.
        Initiate,
        /// A new member added without a vote.
        Add,
        /// A caught-up member made voting.
        Promote,
        /// A voter made non-voting.
        Demote,
        /// A non-voting member taken out.
        Remove,
        /// Priority or hidden of a non-voting member changed.
        Reconfigure,
        /// The primary asked to step down.
        StepDown,
        /// A member's pod deleted for the new template.
        Restart,
        /// A member too stale to catch up wiped to copy the data again.
        Resync,
        /// The featureCompatibilityVersion raised (`member` is the release).
        SetFeatureCompatibilityVersion,
        /// A backup loaded into the first member of a set created with `restoreFrom`.
        Restore,
        /// The members left of a set that lost its majority given a configuration of their
        /// own (`replSetReconfig` with `force`), on request.
        ForceReconfigure,
    }
}

/// A membership change in progress.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembershipChange {
    /// `Add`, `Promote`, `Demote`, `Remove`, `Reconfigure`, `StepDown` or `Restart`.
    #[schemars(with = "String")]
    pub kind: ChangeKind,
    /// The member it concerns.
    pub member: String,
    /// The configuration version it was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_config_version: Option<i64>,
    pub started_at: Time,
}

/// A logical snapshot of a `MongoDBReplicaSet`: every database and collection read from a
/// secondary at one recorded cluster time, streamed as a BSON archive to an object store with
/// its size and checksum, once on demand or on a cron schedule.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mongodb.quorum.dev",
    version = "v1alpha1",
    kind = "MongoDBBackup",
    plural = "mongodbbackups",
    namespaced,
    status = "MongoDBBackupStatus",
    shortname = "mongobackup",
    category = "quorum",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".status.lastSnapshot.sizeBytes"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A logical snapshot (one-shot or scheduled) of a MongoDB replica set managed by Quorum"
)]
#[x_kube(validation = Rule::new("!has(self.retain) || has(self.schedule)")
    .message("retain applies only to scheduled backups: set schedule or remove retain"))]
#[x_kube(validation = Rule::new("!has(self.archiveOplog) || !self.archiveOplog || (has(self.schedule) && has(self.retain))")
    .message("archiveOplog needs schedule and retain: each run archives the oplog written since the previous run, and retention keeps the newest retain runs' snapshots with it"))]
#[serde(rename_all = "camelCase")]
pub struct MongoDBBackupSpec {
    #[serde(flatten)]
    pub backup: BackupSpec,
    /// Point-in-time recovery: each run also archives the oplog the member holds since the
    /// previous run (majority-committed entries only) next to its snapshot; a new replica set
    /// can then be restored to any second from the oldest kept snapshot to the newest run
    /// (`restoreFrom.pointInTime`). The schedule sets how recent that can be, and the member's
    /// oplog must hold a schedule's interval of writes (an entry purged before a run reads it
    /// breaks the chain: the window then starts again at that run's snapshot).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archive_oplog: bool,
}

/// What the operator last did for a `MongoDBBackup`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MongoDBBackupStatus {
    #[serde(flatten)]
    pub run: BackupRunStatus,
    /// The member the newest snapshot was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_from: Option<String>,
    /// The cluster time (`seconds.increment`) the newest snapshot was read at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_time: Option<String>,
    /// Databases and documents in the newest snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub databases: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<i64>,
    /// The documents of the newest snapshot, counted and digested: a member restored from it
    /// holds the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<quorum_core::backup::digest::ContentFingerprint>,
    /// With `archiveOplog`: the kept runs, oldest first, each a snapshot and the oplog archived
    /// with it. What a point-in-time restore reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovery_runs: Vec<OplogRun>,
    /// The earliest and latest points a replica set can be restored to from the kept runs
    /// (`restoreFrom.pointInTime.time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_from: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_until: Option<Time>,
}

/// One run of a backup with `archiveOplog`: its snapshot, and the oplog archived in the same
/// run, which holds every majority-committed entry after `oplogAfter` up to `oplogThrough`
/// (timestamps as `seconds.increment`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OplogRun {
    pub snapshot: StoredPiece,
    /// The cluster time the snapshot holds every acknowledged write up to.
    pub snapshot_cluster_time: String,
    /// The second of the member's commit point once the snapshot was read: it holds no write
    /// logged later.
    pub snapshot_completed_at: Time,
    pub oplog: StoredPiece,
    pub oplog_after: String,
    pub oplog_through: String,
    /// The second of `oplogThrough`: every write logged in an earlier second is in this run's
    /// archive or an earlier one.
    pub archived_at: Time,
}

impl quorum_core::backup::recovery::ArchivedRun for OplogRun {
    fn snapshot_completed_at(&self) -> &Time {
        &self.snapshot_completed_at
    }
    fn archived_at(&self) -> &Time {
        &self.archived_at
    }
    fn log_after(&self) -> &str {
        &self.oplog_after
    }
    fn log_through(&self) -> &str {
        &self.oplog_through
    }
    fn stored(&self) -> [&quorum_core::backup::recovery::StoredPiece; 2] {
        [&self.snapshot, &self.oplog]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_kind_of_a_membership_change_stays_a_string_in_the_schema() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(MongoDBReplicaSet::crd()).unwrap();
        let kind = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
            ["membershipChange"]["properties"]["kind"];
        assert_eq!(
            kind,
            &serde_json::json!({
                "description": "`Add`, `Promote`, `Demote`, `Remove`, `Reconfigure`, `StepDown` or `Restart`.",
                "type": "string",
            })
        );
    }

    #[test]
    fn the_release_drops_the_patch() {
        assert_eq!(release_of("7.0.14"), "7.0");
        assert_eq!(release_of("8.0"), "8.0");
    }
}
