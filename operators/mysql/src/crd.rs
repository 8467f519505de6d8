//! The `MySQLCluster` and `MySQLBackup` custom resources (`mysql.quorum.dev/v1alpha1`).
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

/// `my.cnf` settings the operator owns: replication, identity and fencing depend on them, so a
/// `config` entry may not override them, in either spelling (dashes or underscores).
pub const OPERATOR_OWNED_SETTINGS: &[&str] = &[
    "bind_address",
    "binlog_expire_logs_seconds",
    "binlog_format",
    "datadir",
    "enforce_gtid_consistency",
    "expire_logs_days",
    "gtid_domain_id",
    "gtid_mode",
    "gtid_strict_mode",
    "init_file",
    // Members recover from a crash as replicas (docs/mysql.md); a different role, or a heuristic
    // commit or rollback of in-doubt transactions, would bring back what no client was told.
    "init_rpl_role",
    "log_bin",
    "log_replica_updates",
    "log_slave_updates",
    "pid_file",
    "port",
    "read_only",
    "relay_log",
    "report_host",
    "server_id",
    "skip_networking",
    "skip_slave_start",
    "skip_replica_start",
    "socket",
    "super_read_only",
    "tc_heuristic_recover",
    "user",
];

/// Settings the operator owns by prefix (semi-synchronous replication).
pub const OPERATOR_OWNED_PREFIXES: &[&str] = &["rpl_semi_sync_"];

/// The longest `metadata.name` a `MySQLCluster` may have: its StatefulSet is named after it.
pub const MAX_NAME: usize = quorum_core::naming::max_cluster_name("");

/// A MySQL or MariaDB cluster: one primary and its replicas, replicating by GTID, kept in
/// shape through the server's own SQL admin statements, one safe step at a time.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.quorum.dev",
    version = "v1alpha1",
    kind = "MySQLCluster",
    plural = "mysqlclusters",
    namespaced,
    status = "MySQLClusterStatus",
    shortname = "mysql",
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
    printcolumn(name = "Primary", type_ = "string", json_path = ".status.primary"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A MySQL or MariaDB cluster managed by Quorum",
    validation = quorum_core::naming::cluster_name_rule(MAX_NAME)
)]
#[x_kube(validation = Rule::new(
    "self.flavor == 'MySQL' ? self.version.matches('^8[.](0|4)[.][0-9]+$') : self.version.matches('^(10[.]11|11[.][0-9]+)[.][0-9]+$')"
).message("version: MySQL supports 8.0.x and 8.4.x, MariaDB 10.11.x and 11.x.y").field_path(".version"))]
#[x_kube(validation = Rule::new(
    "!has(self.replication) || self.replication.mode != 'SemiSync' || self.replicas == 1 || self.replication.waitForReplicaCount < self.replicas"
).message("replication.waitForReplicaCount must be less than replicas: a primary cannot wait for more replicas than exist")
    .field_path(".replication.waitForReplicaCount"))]
// The field's own rule sees only changes of a value that was there before and is still there;
// this one refuses adding or removing it after creation.
// MariaDB members that recover from a crash as replicas (SemiSync) keep an acknowledged commit
// only when its commit record is written at commit (resources.rs): the operator sets it there.
#[x_kube(validation = Rule::new(format!(
    "self.flavor != 'MariaDB' || (has(self.replication) && self.replication.mode == 'Async') || !has(self.config) || !{}.exists(k, k in self.config)",
    cel_list(&owned_spellings(&[SEMI_SYNC_MARIADB_SETTING])),
)).message(Message::Message(format!(
    "config: {SEMI_SYNC_MARIADB_SETTING} is set by the operator for MariaDB with SemiSync replication (3, so that a commit acknowledged just before a crash is not discarded by the member's crash recovery)"
))).field_path(".config"))]
#[x_kube(validation = Rule::new("has(self.restoreFrom) == has(oldSelf.restoreFrom)")
    .message("restoreFrom is immutable: it can be set only when the cluster is created")
    .field_path(".restoreFrom"))]
#[x_kube(validation = Rule::new("has(self.tls) == has(oldSelf.tls)")
    .message("tls is immutable: members cannot move between plain and TLS connections while running")
    .field_path(".tls"))]
#[x_kube(validation = version_transition_rule())]
#[serde(rename_all = "camelCase")]
pub struct MySQLClusterSpec {
    /// Number of members: one primary and `replicas - 1` replicas.
    #[schemars(range(min = 1, max = 9))]
    pub replicas: i32,

    /// `MySQL` or `MariaDB`. Immutable: the data directory of one cannot be served by the other.
    #[x_kube(validation = Rule::new("self == oldSelf").message("flavor is immutable"))]
    pub flavor: Flavor,

    /// Server version: `8.0.x` or `8.4.x` for MySQL, `10.11.x` or `11.x.y` for MariaDB.
    #[schemars(length(min = 1, max = 32))]
    pub version: String,

    /// The container image; default `mysql:<version>` or `mariadb:<version>`.
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

    /// `my.cnf` overrides for the `[mysqld]` section, for example `max_connections: "500"`.
    /// Settings the operator owns (server identity, binary log and GTID settings, read-only
    /// fencing, semi-synchronous replication, addresses and paths) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    #[x_kube(validation = Rule::new(format!(
        "self.all(k, !(k in {owned}) && !{prefixes}.exists(p, k.startsWith(p)))",
        owned = cel_list(&owned_spellings(OPERATOR_OWNED_SETTINGS)),
        prefixes = cel_list(&owned_spellings(OPERATOR_OWNED_PREFIXES)),
    )).message(Message::Message(format!(
        "config: these settings are set by the operator and cannot be overridden: {}, {}*",
        OPERATOR_OWNED_SETTINGS.join(", "),
        OPERATOR_OWNED_PREFIXES.join("*, "),
    ))))]
    pub config: BTreeMap<String, String>,

    /// Secret holding the `root` password under the key `password`. When absent the operator
    /// generates one in `<cluster>-root`. The password is read from files inside the pods; it
    /// never appears on a command line or in a log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub root_password_secret: Option<String>,

    /// Application accounts the operator creates on the primary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub users: Vec<UserSpec>,

    /// How replicas acknowledge the primary's commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<ReplicationSpec>,

    /// TLS for client and replication traffic. Immutable: members cannot move between plain and
    /// TLS connections while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("tls is immutable"))]
    pub tls: Option<MySqlTls>,

    /// How often to take snapshots and how long to keep them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<MySqlBackupPolicy>,

    /// Start the cluster from a `MySQLBackup` (same namespace) instead of empty: its stored
    /// snapshot is restored into the first member, whose GTID history continues from the
    /// backup's position, before that member is opened as the primary; the other members are
    /// copied from it. Until the backup has a stored snapshot no primary is opened. The restore
    /// happens once, only into an empty member. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("restoreFrom is immutable"))]
    pub restore_from: Option<MySqlRestoreSource>,
}

/// A physical backup neither archives the binary log nor is drilled yet: both read a logical
/// snapshot.
const PHYSICAL_ALONE_RULE: &str = "!has(self.method) || self.method == 'Logical' || ((!has(self.archiveBinlogs) || !self.archiveBinlogs) && (!has(self.verify) || !self.verify))";
const PHYSICAL_ALONE_MESSAGE: &str = "method: Physical cannot be combined with archiveBinlogs or verify yet: point-in-time recovery and restore drills read a Logical backup";

/// A cluster's backup policy: the shared one, and the engine's own log archived with each run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new(PHYSICAL_ALONE_RULE).message(PHYSICAL_ALONE_MESSAGE))]
#[serde(rename_all = "camelCase")]
pub struct MySqlBackupPolicy {
    #[serde(flatten)]
    pub policy: BackupPolicy,
    /// Point-in-time recovery (MariaDB): each run also archives the binary log written since the
    /// previous run next to its snapshot, as `MySQLBackup.spec.archiveBinlogs` does; a new
    /// cluster can then be restored to any time or GTID position of what the kept runs hold
    /// (`restoreFrom.pointInTime`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archive_binlogs: bool,
    /// How each run reads the member (see `MySQLBackup.spec.method`).
    #[serde(default, skip_serializing_if = "BackupMethod::is_logical")]
    pub method: BackupMethod,
}

/// The backup a new cluster starts from, and optionally the point in time to restore to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MySqlRestoreSource {
    #[serde(flatten)]
    pub backup: RestoreSource,
    /// Restore to this point rather than to the newest snapshot: the newest snapshot taken
    /// before it, then the binary log archived after that snapshot, up to the point. Needs a
    /// `MySQLBackup` with `archiveBinlogs`, and a point inside what it archived
    /// (`status.recoverableFrom` to `status.recoverableUntil`). MariaDB only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTime>,
}

impl MySqlRestoreSource {
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

/// A point to restore to: exactly one of `time` and `gtid`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.time) != has(self.gtid)")
    .message("restoreFrom.pointInTime takes exactly one of time and gtid"))]
pub struct PointInTime {
    /// Every transaction written at or before this time, and none after (RFC 3339; the servers
    /// log whole seconds, so a fraction is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// Every transaction in this GTID position, and none after (MariaDB's notation, as
    /// `@@gtid_binlog_pos` gives it: `0-1-42`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 1024),
        regex(pattern = r"^[0-9]+-[0-9]+-[0-9]+(,[0-9]+-[0-9]+-[0-9]+)*$")
    )]
    pub gtid: Option<String>,
}

/// MariaDB's long-term releases, as `major * 1000 + minor`: an upgrade moves at most to the
/// next one after the release running (10.11 to 11.4 to 11.8), as MariaDB supports.
const MARIADB_LTS_RELEASES: [i64; 2] = [11_004, 11_008];

/// The admission rule of `spec.version` changes: never down (neither server reads data
/// written by a newer release); MySQL 8.0 to 8.4 LTS; MariaDB at most to the next LTS release
/// after the one running. A rule on the spec, which a status write leaves unchanged.
fn version_transition_rule() -> kube::core::Rule {
    let pattern = "^[0-9]+[.][0-9]+[.][0-9]+$";
    let old_release = cel_release_number("oldSelf.version");
    let next_lts = MARIADB_LTS_RELEASES
        .iter()
        .rev()
        .fold("99999".to_string(), |later, lts| {
            format!("({old_release} < {lts} ? {lts} : {later})")
        });
    kube::core::Rule::new(format!(
        "self.flavor != oldSelf.flavor || !self.version.matches('{pattern}') || !oldSelf.version.matches('{pattern}') \
         || ({new} >= {old} && (self.flavor == 'MySQL' || {new_release} <= {next_lts}))",
        new = cel_version_number("self.version"),
        old = cel_version_number("oldSelf.version"),
        new_release = cel_release_number("self.version"),
    ))
    .message(
        "version: downgrades are not supported; MySQL upgrades from 8.0 to 8.4, MariaDB one LTS release at a time \
         (10.11 to 11.4 to 11.8)",
    )
    .field_path(".version")
}

/// Each name as the server accepts it in `my.cnf`: with underscores and with dashes.
fn owned_spellings(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .flat_map(|name| [name.to_string(), name.replace('_', "-")])
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Renders a CEL list literal of strings.
fn cel_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| format!("'{item}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Which server the cluster runs. The SQL the operator speaks differs between them.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// MySQL 8.0 or 8.4 LTS.
    #[default]
    MySQL,
    /// MariaDB 10.11 or 11.x.
    MariaDB,
}

/// How a backup reads the member.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum BackupMethod {
    /// A consistent SQL snapshot (every database, view, routine, trigger, event and account),
    /// read over the network from a caught-up member: any flavor, point-in-time recovery and
    /// restore drills.
    #[default]
    Logical,
    /// A copy of the member's files with `mariadb-backup` (MariaDB only), taken by a Job on the
    /// member's node with its volume mounted read-only, and restored into the first member's
    /// empty volume before its server starts: far faster than a logical snapshot for large data.
    Physical,
}

impl BackupMethod {
    pub fn is_logical(&self) -> bool {
        *self == BackupMethod::Logical
    }
}

/// An application account.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserSpec {
    /// Account name (the host part is `%`). `root` and names starting with `quorum_` are the
    /// operator's.
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"))]
    #[x_kube(validation = Rule::new("self != 'root' && !self.startsWith('quorum_')")
        .message("users[].name: root and names starting with quorum_ are reserved for the operator"))]
    pub name: String,
    /// Secret (same namespace) holding the password under `password`.
    #[schemars(length(min = 1, max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub password_secret: String,
    /// The database the account may use; created when missing.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_]+$"))]
    pub database: String,
    /// `ReadWrite` (all privileges on the database) or `ReadOnly` (SELECT).
    #[serde(default)]
    pub access: Access,
}

/// What an application account may do in its database.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum Access {
    #[default]
    ReadWrite,
    ReadOnly,
}

/// How replicas acknowledge commits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationSpec {
    /// `SemiSync` (default): a commit is acknowledged to the client only after
    /// `waitForReplicaCount` replicas have received it, so a failover loses no acknowledged
    /// write. `Async`: commits do not wait; a failover may lose the newest ones.
    #[serde(default)]
    pub mode: ReplicationMode,
    /// How many replicas must receive a commit before it is acknowledged (MySQL only; MariaDB
    /// waits for one).
    #[serde(default = "default_wait_for_replica_count")]
    #[schemars(range(min = 1, max = 8))]
    pub wait_for_replica_count: i32,
    /// How long members keep their binary logs, in seconds: 7 days by default, at most 99 days
    /// (MariaDB's limit); 0 keeps them for ever. Logs expire only while every member is
    /// replicating: while a member is down, unreachable or being copied, every member keeps all
    /// of its logs, so none that a member still needs is purged.
    #[serde(default = "default_binlog_expire_seconds")]
    #[schemars(range(min = 0, max = 8553600))]
    pub binlog_expire_seconds: u32,
}

impl Default for ReplicationSpec {
    fn default() -> Self {
        Self {
            mode: ReplicationMode::default(),
            wait_for_replica_count: default_wait_for_replica_count(),
            binlog_expire_seconds: default_binlog_expire_seconds(),
        }
    }
}

fn default_wait_for_replica_count() -> i32 {
    1
}

fn default_binlog_expire_seconds() -> u32 {
    7 * 24 * 3600
}

/// Replication acknowledgement mode.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ReplicationMode {
    #[default]
    SemiSync,
    Async,
}

/// TLS material, by Secret name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MySqlTls {
    /// Secret with the server certificate (`tls.crt`, `tls.key`, `ca.crt`). Clients and
    /// replication connect over TLS; unencrypted connections are refused.
    #[schemars(length(min = 1, max = MAX_OBJECT_NAME), regex(pattern = DNS_SUBDOMAIN))]
    pub secret_name: String,
}

/// The annotation that asks for a switchover to the named member (a pod name of the cluster).
/// The operator removes it when the switchover is done or refused.
pub const SWITCHOVER_ANNOTATION: &str = "mysql.quorum.dev/switchover-to";

/// What the operator last observed of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MySQLClusterStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Members the StatefulSet runs (the scale subresource's current count).
    #[serde(default)]
    pub replicas: i32,
    /// Replicas that are Healthy, replicating and caught up.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Label selector of the member pods, for the scale subresource.
    #[serde(default)]
    pub selector: String,
    /// The member that accepts writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
    /// The disruptive step being taken (failover, switchover, member removal), recorded before
    /// it is taken so that a restarted operator resumes it instead of repeating it blindly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlightStep>,
    /// The last change of primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<FailoverRecord>,
    /// The newest successful backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<BackupRecord>,
    /// The last restore drill that ended, of any of its backups with `verify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drill: Option<quorum_core::crd::DrillRecord>,
    /// The backup a cluster created with `restoreFrom` was restored from. Once recorded, the
    /// restore is never taken again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<RestoreRecord>,
    /// While the restore of `restoreFrom` keeps failing: how many attempts failed in a row,
    /// why the last did, and when the next may start (each waits twice as long, up to ten
    /// minutes). Cleared once the restore succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_failures: Option<quorum_core::backup::restore_retry::FailedRestores>,
    /// The repair asked for with the `quorum.dev/repair` annotation, while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<quorum_core::crd::RepairRecord>,
    /// The recovery asked for with the `quorum.dev/recover-from` annotation, while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<quorum_core::crd::RecoveryRecord>,
    /// The primary's executed GTIDs as last seen while it accepted writes. A primary that comes
    /// back without them lost data (a new or emptied volume); with asynchronous replication it
    /// is then not reopened while a member that may hold them does not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_last_open: Option<PrimaryPosition>,
    /// The names of the `spec.users` accounts created on the primary. The cluster is
    /// not `Ready` while one of `spec.users` is missing here: an application told the cluster is
    /// ready can log in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accounts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What a primary held, as seen at one pass.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrimaryPosition {
    /// The member that was the primary.
    pub member: String,
    /// Its executed GTIDs.
    pub gtid: String,
    /// The uid of its data volume's claim then: a primary back on another claim came back on a
    /// new, empty volume, whatever the GTIDs recorded say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
}

/// A completed restore of a `MySQLBackup` into a new cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreRecord {
    /// The `MySQLBackup` whose snapshot was restored.
    pub backup_name: String,
    /// Where the snapshot was read from.
    pub location: String,
    /// The snapshot's SHA-256, as recorded by the backup and verified while it was read.
    pub sha256: String,
    /// The GTID position the snapshot was taken at: the cluster's history continues from it.
    pub gtid_position: String,
    /// With `restoreFrom.pointInTime`: how many archived pieces of the binary log were replayed
    /// after the snapshot, up to the point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlogs_replayed: Option<u32>,
    /// The member it was restored into, which then became the first primary.
    pub member: String,
    /// When the member held the snapshot and its GTID history.
    pub completed_at: Time,
}

/// One member as the server and the operator see it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    pub name: String,
    /// `Primary`, `Replica`, `Fenced` (a former primary kept read-only), or `Unknown`.
    pub role: String,
    /// `Healthy`, `Unhealthy` or `Unknown` (not reachable from the operator).
    pub health: String,
    /// Executed GTIDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
    /// Replication lag reported by the replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<i64>,
    /// Transactions this member has that the primary does not: never discarded by the
    /// operator, which keeps the member out of service until someone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errant: Option<String>,
    /// Why the member is not healthy, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when the operator has seen the member not healthy (Unhealthy or Unknown) without a
    /// break: for the primary, where a failover's time from loss starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<Time>,
}

quorum_core::recorded_kinds! {
    /// The kind of a step in flight, as stored in `status.inFlight.action`.
    pub enum InFlightAction in "status.inFlight.action" {
        Failover,
        Switchover,
        RemoveMember,
        Restore,
        Restart,
    }
}

/// A step in flight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InFlightStep {
    /// `Failover`, `Switchover`, `RemoveMember`, `Restore` or `Restart`.
    #[schemars(with = "String")]
    pub action: InFlightAction,
    /// The member the step acts on (the new primary for a failover or switchover).
    pub member: String,
    /// The primary being replaced, for a failover or switchover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub started_at: Time,
    /// For a failover: when the operator first saw the old primary fail (its `failingSince`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_lost_at: Option<Time>,
}

/// A change of primary.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverRecord {
    /// `Failover` (the primary was down) or `Switchover` (asked for).
    pub kind: String,
    pub from: String,
    pub to: String,
    pub started_at: Time,
    pub completed_at: Time,
    /// From the decision to the new primary accepting writes, in milliseconds.
    pub duration_millis: i64,
    /// For a failover: when the operator first saw the old primary fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_at: Option<Time>,
    /// For a failover: from the first failed observation of the old primary to the new primary
    /// accepting writes, in milliseconds; what clients waited, as the operator saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_loss_millis: Option<i64>,
}

/// A consistent logical snapshot of a `MySQLCluster` (one transaction, with the GTID position
/// it corresponds to), taken once on demand or on a cron schedule and streamed to an object
/// store. The operator reads it from a caught-up replica when it can, to spare the primary.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.quorum.dev",
    version = "v1alpha1",
    kind = "MySQLBackup",
    plural = "mysqlbackups",
    namespaced,
    status = "MySQLBackupStatus",
    shortname = "mysqlbackup",
    category = "quorum",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".status.lastSnapshot.sizeBytes"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A snapshot (one-shot or scheduled) of a MySQL or MariaDB cluster managed by Quorum"
)]
#[x_kube(validation = Rule::new("!has(self.retain) || has(self.schedule)")
    .message("retain applies only to scheduled backups: set schedule or remove retain"))]
#[x_kube(validation = Rule::new("!has(self.archiveBinlogs) || !self.archiveBinlogs || (has(self.schedule) && has(self.retain))")
    .message("archiveBinlogs needs schedule and retain: each run archives the binary log written since the previous run, and retention keeps the newest retain runs' snapshots with it"))]
#[x_kube(validation = Rule::new(PHYSICAL_ALONE_RULE).message(PHYSICAL_ALONE_MESSAGE))]
#[serde(rename_all = "camelCase")]
pub struct MySQLBackupSpec {
    #[serde(flatten)]
    pub backup: BackupSpec,
    /// Point-in-time recovery (MariaDB): each run also archives the binary log the member wrote
    /// since the previous run, checked event by event, next to its snapshot; a new cluster can
    /// then be restored to any time or GTID position from the oldest kept snapshot to the
    /// newest run (`restoreFrom.pointInTime`). The schedule sets how recent that can be.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archive_binlogs: bool,
    /// How each run reads the member: `Logical` (the default) or `Physical` (MariaDB's
    /// `mariadb-backup`, in a Job beside the member; not with `archiveBinlogs` or `verify` yet).
    #[serde(default, skip_serializing_if = "BackupMethod::is_logical")]
    pub method: BackupMethod,
}

/// What the operator last did for a `MySQLBackup`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MySQLBackupStatus {
    #[serde(flatten)]
    pub run: BackupRunStatus,
    /// The GTID position the newest snapshot corresponds to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid_position: Option<String>,
    /// How the newest snapshot was read (absent: `Logical`): a restore reads it the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<BackupMethod>,
    /// The rows of the newest snapshot, counted and digested: a member restored from it holds
    /// the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<quorum_core::backup::digest::ContentFingerprint>,
    /// With `archiveBinlogs`: the kept runs, oldest first, each a snapshot and the binary log
    /// archived with it. What a point-in-time restore reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovery_runs: Vec<RecoveryRun>,
    /// The earliest and latest points a cluster can be restored to from the kept runs
    /// (`restoreFrom.pointInTime.time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_from: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_until: Option<Time>,
}

/// One run of a backup with `archiveBinlogs`: its snapshot, and the binary log archived in the
/// same run, which holds every transaction after `binlogAfter` up to `binlogThrough`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryRun {
    pub snapshot: quorum_core::backup::recovery::StoredPiece,
    /// The GTID position the snapshot holds.
    pub snapshot_position: String,
    /// When the snapshot was complete: it holds no transaction written later.
    pub snapshot_completed_at: Time,
    pub binlog: quorum_core::backup::recovery::StoredPiece,
    pub binlog_after: String,
    pub binlog_through: String,
    /// When the binary log was read to its end: every transaction written before then is in
    /// this run's archive or an earlier one.
    pub archived_at: Time,
}

impl quorum_core::backup::recovery::ArchivedRun for RecoveryRun {
    fn snapshot_completed_at(&self) -> &Time {
        &self.snapshot_completed_at
    }
    fn archived_at(&self) -> &Time {
        &self.archived_at
    }
    fn log_after(&self) -> &str {
        &self.binlog_after
    }
    fn log_through(&self) -> &str {
        &self.binlog_through
    }
    fn stored(&self) -> [&quorum_core::backup::recovery::StoredPiece; 2] {
        [&self.snapshot, &self.binlog]
    }
}

/// The `my.cnf` setting the operator owns for MariaDB with SemiSync replication only.
pub const SEMI_SYNC_MARIADB_SETTING: &str = "innodb_flush_log_at_trx_commit";

/// The `config` keys the operator refuses: the same rule as the CRD's, for the operator's own
/// check (a resource stored before the rule existed is not trusted).
pub fn forbidden_config_keys(config: &BTreeMap<String, String>) -> Vec<String> {
    config
        .keys()
        .filter(|key| {
            let normalized = key.replace('-', "_");
            OPERATOR_OWNED_SETTINGS.contains(&normalized.as_str())
                || OPERATOR_OWNED_PREFIXES
                    .iter()
                    .any(|prefix| normalized.starts_with(prefix))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_settings_are_recognised_in_either_spelling() {
        let config = BTreeMap::from([
            ("max_connections".to_string(), "500".to_string()),
            ("server-id".to_string(), "7".to_string()),
            ("rpl-semi-sync-master-timeout".to_string(), "1".to_string()),
            ("innodb_buffer_pool_size".to_string(), "1G".to_string()),
            ("init-rpl-role".to_string(), "MASTER".to_string()),
            ("tc_heuristic_recover".to_string(), "COMMIT".to_string()),
        ]);
        assert_eq!(
            forbidden_config_keys(&config),
            vec![
                "init-rpl-role".to_string(),
                "rpl-semi-sync-master-timeout".to_string(),
                "server-id".to_string(),
                "tc_heuristic_recover".to_string(),
            ]
        );
    }
}
