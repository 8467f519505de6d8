//! What the MySQL/MariaDB operator needs from a cluster and says about itself, for the generator
//! that writes its RBAC, Helm chart and OLM bundle (`cargo xtask generate`). Least privilege:
//! each rule lists only the verbs the operator's code uses, and why.

use k8s_openapi::api::rbac::v1::PolicyRule;
use quorum_core::packaging::{KindDescriptors, backup_kind, cluster_conditions_descriptor};
use quorum_core::rbac::{operator_rules, rule};
use serde_json::json;

/// The MariaDB release the samples and the OLM bundle's related images name.
pub const DEFAULT_MARIADB_IMAGE_TAG: &str = "10.11.19";

/// The MySQL release the MySQL-flavored sample and the OLM bundle's related images name.
pub const DEFAULT_MYSQL_IMAGE_TAG: &str = "8.4.6";

/// The rules for the namespaces the operator manages.
pub fn rules() -> Vec<PolicyRule> {
    // The clusters it reconciles; patched only to remove a handled switchover request.
    // Status is its to write (the backup controller records the newest backup there too).
    // No finalizers: children go with their owner references.
    // Scheduled backups are created (server-side apply) and deleted on behalf of a
    // cluster's backup policy; every backup's status is the backup controller's to write.
    // A cluster created with `restoreFrom` reads the backup it names. A backup with `verify`
    // creates its restore drill's throw-away cluster and deletes it once the drill ends.
    operator_rules(
        "mysql.quorum.dev",
        "mysqlclusters",
        "mysqlbackups",
        &["patch", "create", "delete"],
        [
            // Generated root and replication passwords are created once and never rewritten; user-
            // supplied passwords and backup credentials are read. Watched as owned objects.
            rule("", &["secrets"], &["get", "list", "watch", "create"]),
            // Member pods (the operator's own, watched into its cache): listed, labelled with their
            // role (primary or replica), which is what the primary and replicas Services select,
            // and deleted one at a time to roll them onto a new pod template
            // (`quorum_core::rollout`); read before a replica rebuilt on request is wiped, so
            // that a pod created again since keeps its claim.
            rule("", &["pods"], &["get", "list", "watch", "patch", "delete"]),
            // A replica rebuilt on request: its claim goes with its pod.
            quorum_core::wipe::rbac_rule(),
            // The primary's data claim, read to know whether a restarted primary came back on
            // the volume it was seen accepting writes on.
            rule("", &["persistentvolumeclaims"], &["get"]),
        ],
    )
}

/// The rules for the operator's own namespace: its leader-election Lease.
pub use quorum_core::rbac::leader_election_rules;

/// OperatorHub's descriptors of the kinds the operator owns: the fields its UI shows.
pub fn descriptors() -> Vec<KindDescriptors> {
    vec![
        KindDescriptors {
            kind: "MySQLCluster",
            spec: json!([
                {"path": "replicas", "displayName": "Members", "description": "One primary and replicas - 1 replicas",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:podCount"]},
                {"path": "flavor", "displayName": "Flavor", "description": "MySQL or MariaDB; immutable",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:select:MySQL", "urn:alm:descriptor:com.tectonic.ui:select:MariaDB"]},
                {"path": "version", "displayName": "Server version", "description": "8.0.x or 8.4.x for MySQL, 10.11.x or 11.x.y for MariaDB",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"]},
                {"path": "storage.size", "displayName": "Storage size", "description": "Volume size of each member",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"]}
            ]),
            status: json!([
                cluster_conditions_descriptor(),
                {"path": "primary", "displayName": "Primary", "description": "The member that accepts writes",
                 "x-descriptors": ["urn:alm:descriptor:text"]},
                {"path": "readyReplicas", "displayName": "Ready replicas", "description": "Replicas that are healthy and caught up",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:podCount"]}
            ]),
        },
        backup_kind("MySQLBackup", "MySQLCluster", "mysql.quorum.dev", "Cluster"),
    ]
}
