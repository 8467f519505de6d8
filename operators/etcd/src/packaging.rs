//! What the etcd operator needs from a cluster and says about itself, for the generator that
//! writes its RBAC, Helm chart and OLM bundle (`cargo xtask generate`). Least privilege: each
//! rule lists only the verbs the operator's code uses, and why.

use k8s_openapi::api::rbac::v1::PolicyRule;
use quorum_core::packaging::{KindDescriptors, backup_kind, cluster_conditions_descriptor};
use quorum_core::rbac::{operator_rules, rule};
use serde_json::json;

/// The etcd release the samples and the OLM bundle's related images name.
pub const DEFAULT_ETCD_IMAGE_TAG: &str = "v3.6.16";

/// The rules for the namespaces the operator manages.
pub fn rules() -> Vec<PolicyRule> {
    // The resources it reconciles; status is its to write. Scheduled backups are created
    // (server-side apply) and deleted on behalf of a cluster's backup policy. A backup with
    // `verify` creates its restore drill's throw-away cluster and deletes it once the drill ends.
    operator_rules(
        "etcd.quorum.dev",
        "etcdclusters",
        "etcdbackups",
        &["patch", "create", "delete"],
        [
            // Watched as owned objects; read for backup credentials. Never written.
            rule("", &["secrets"], &["get", "list", "watch"]),
            // Member pods (the operator's own, watched into its cache): listed to see which version
            // each runs; one deleted at a time for an upgrade, or to replace a member with an empty
            // volume. `get` only to grant it to backup Jobs (`quorum_core::backup::job`).
            rule("", &["pods"], &["get", "list", "watch", "delete"]),
            quorum_core::wipe::rbac_rule(),
        ],
    )
}

/// The rules for the operator's own namespace: its leader-election Lease.
pub use quorum_core::rbac::leader_election_rules;

/// OperatorHub's descriptors of the kinds the operator owns: the fields its UI shows.
pub fn descriptors() -> Vec<KindDescriptors> {
    vec![
        KindDescriptors {
            kind: "EtcdCluster",
            spec: json!([
                {"path": "replicas", "displayName": "Members", "description": "Number of voting members (odd recommended)",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:podCount"]},
                {"path": "version", "displayName": "etcd version", "description": "3.5 or newer; changing it rolls the members",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"]},
                {"path": "storage.size", "displayName": "Storage size", "description": "Volume size of each member",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"]}
            ]),
            status: json!([
                cluster_conditions_descriptor(),
                {"path": "leader", "displayName": "Leader", "description": "The member that leads",
                 "x-descriptors": ["urn:alm:descriptor:text"]},
                {"path": "replicas", "displayName": "Members", "description": "Started voting members",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:podCount"]}
            ]),
        },
        backup_kind("EtcdBackup", "EtcdCluster", "etcd.quorum.dev", "Cluster"),
    ]
}
