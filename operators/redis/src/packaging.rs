//! What the Redis operator needs from a cluster and says about itself, for the generator that
//! writes its RBAC, Helm chart and OLM bundle (`cargo xtask generate`). Least privilege: each
//! rule lists only the verbs the operator's code uses, and why.

use k8s_openapi::api::rbac::v1::PolicyRule;
use quorum_core::packaging::{KindDescriptors, backup_kind, cluster_conditions_descriptor};
use quorum_core::rbac::{operator_rules, rule};
use serde_json::json;

/// The Redis release the samples and the OLM bundle's related images name.
pub const DEFAULT_REDIS_IMAGE_TAG: &str = "7.0.15";

/// The rules for the namespaces the operator manages.
pub fn rules() -> Vec<PolicyRule> {
    // The deployments it reconciles; status is its to write. No finalizers: children go
    // with their owner references.
    // Scheduled backups are created (server-side apply) and deleted on behalf of a
    // deployment's backup policy; every backup's status is the backup controller's to
    // write. A deployment created with `restoreFrom` reads the backup it names. A backup with
    // `verify` creates its restore drill's throw-away deployment and deletes it once the drill
    // ends.
    operator_rules(
        "redis.quorum.dev",
        "redisclusters",
        "redisbackups",
        &["create", "delete"],
        [
            // The generated password is created once and never rewritten; a given password and
            // backup credentials are read. Watched as owned objects.
            rule("", &["secrets"], &["get", "list", "watch", "create"]),
            // Data pods (the operator's own, watched into its cache): listed, labelled with their
            // role (primary or replica), which is what the primary and replicas Services select,
            // and deleted one at a time to roll them onto a new template; read before a replica
            // rebuilt on request is wiped, so that a pod created again since keeps its claim.
            rule("", &["pods"], &["get", "list", "watch", "patch", "delete"]),
            // Cluster mode: a removed shard's StatefulSet, once it has no pod left.
            rule("apps", &["statefulsets"], &["delete"]),
            // A replica rebuilt on request: its claim goes with its pod.
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
            kind: "RedisCluster",
            spec: json!([
                {"path": "mode", "displayName": "Mode", "description": "Replication (with Sentinel) or Cluster (sharded); immutable",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:select:Replication", "urn:alm:descriptor:com.tectonic.ui:select:Cluster"]},
                {"path": "replicas", "displayName": "Replicas", "description": "Replication mode: replicas of the primary",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:podCount"]},
                {"path": "shards", "displayName": "Shards", "description": "Cluster mode: primaries sharing the hash slots (3 or more)",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:number"]},
                {"path": "version", "displayName": "Redis version", "description": "7.0.x, 7.2.x or 7.4.x",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"]},
                {"path": "storage.size", "displayName": "Storage size", "description": "Volume size of each node",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"]}
            ]),
            status: json!([
                cluster_conditions_descriptor(),
                {"path": "primary", "displayName": "Primary", "description": "Replication mode: the node the Sentinels agree takes writes",
                 "x-descriptors": ["urn:alm:descriptor:text"]},
                {"path": "readyNodes", "displayName": "Ready nodes", "description": "Nodes that are healthy and linked",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:podCount"]}
            ]),
        },
        backup_kind("RedisBackup", "RedisCluster", "redis.quorum.dev", "Cluster"),
    ]
}
