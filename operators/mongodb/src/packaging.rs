//! What the MongoDB operator needs from a cluster and says about itself, for the generator
//! that writes its RBAC, Helm chart and OLM bundle (`cargo xtask generate`). Least privilege:
//! each rule lists only the verbs the operator's code uses, and why.

use k8s_openapi::api::rbac::v1::PolicyRule;
use quorum_core::packaging::{KindDescriptors, backup_kind, cluster_conditions_descriptor};
use quorum_core::rbac::{operator_rules, rule};
use serde_json::json;

/// The MongoDB release the samples and the OLM bundle's related images name.
pub const DEFAULT_MONGODB_IMAGE_TAG: &str = "7.0.14";

/// The rules for the namespaces the operator manages.
pub fn rules() -> Vec<PolicyRule> {
    // The replica sets it reconciles; status is its to write. No finalizers: children go
    // with their owner references.
    // Scheduled backups are created (server-side apply) and deleted on behalf of a replica
    // set's backup policy; every backup's status is the backup controller's to write. A
    // replica set created with `restoreFrom` reads the backup it names.
    // A backup with `verify` creates its restore drill's throw-away replica set and deletes it
    // once the drill ends.
    operator_rules(
        "mongodb.quorum.dev",
        "mongodbreplicasets",
        "mongodbbackups",
        &["create", "delete"],
        [
            // The generated administrator and keyfile are created once and never rewritten; given
            // ones and backup credentials are read. Watched as owned objects.
            rule("", &["secrets"], &["get", "list", "watch", "create"]),
            // Member pods (the operator's own, watched into its cache): read to see which version
            // each runs; under `OnDelete` one is deleted at a time for a rolling restart or upgrade
            // (secondaries first, the primary after stepping down), or with its claim to resync a
            // member too stale to catch up.
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
            kind: "MongoDBReplicaSet",
            spec: json!([
                {"path": "members", "displayName": "Voting members", "description": "Voting, electable members (1 to 7; odd, or even with an arbiter)",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:podCount"]},
                {"path": "nonVotingMembers", "displayName": "Non-voting members", "description": "Data-bearing members that neither vote nor stand for election",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:number"]},
                {"path": "arbiter", "displayName": "Arbiter", "description": "Run one arbiter: a vote without data",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"]},
                {"path": "version", "displayName": "MongoDB version", "description": "6.0, 7.0 or 8.0, optionally with a patch; raising it rolls the members",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"]},
                {"path": "storage.size", "displayName": "Storage size", "description": "Volume size of each data-bearing member",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"]}
            ]),
            status: json!([
                cluster_conditions_descriptor(),
                {"path": "primary", "displayName": "Primary", "description": "The member that accepts writes",
                 "x-descriptors": ["urn:alm:descriptor:text"]},
                {"path": "readyMembers", "displayName": "Ready members", "description": "Members that are healthy and PRIMARY, SECONDARY or ARBITER",
                 "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:podCount"]}
            ]),
        },
        backup_kind(
            "MongoDBBackup",
            "MongoDBReplicaSet",
            "mongodb.quorum.dev",
            "Replica set",
        ),
    ]
}
