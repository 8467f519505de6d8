//! What every operator says about itself to OperatorHub, beside its `packaging::rules()`: the
//! descriptors of the kinds it owns, which the generator (`cargo xtask generate`) writes into
//! its ClusterServiceVersion.

use serde_json::json;

/// OperatorHub's descriptors of one owned kind: which spec and status fields its UI shows.
#[derive(Clone, Debug, PartialEq)]
pub struct KindDescriptors {
    pub kind: &'static str,
    pub spec: serde_json::Value,
    pub status: serde_json::Value,
}

/// The descriptors of an engine's backup kind `kind`, whose `clusterName` names a
/// `cluster_kind` of API group `group` (shown as `cluster_label`).
pub fn backup_kind(
    kind: &'static str,
    cluster_kind: &str,
    group: &str,
    cluster_label: &str,
) -> KindDescriptors {
    KindDescriptors {
        kind,
        spec: json!([
            {"path": "clusterName", "displayName": cluster_label, "description": format!("The {cluster_kind} to back up"),
             "x-descriptors": [format!("urn:alm:descriptor:io.kubernetes:{group}:v1alpha1:{cluster_kind}")]},
            {"path": "schedule", "displayName": "Schedule", "description": "Cron schedule (UTC); empty for once",
             "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"]}
        ]),
        status: backup_status_descriptors(),
    }
}

/// The status descriptor of the conditions every cluster kind has.
pub fn cluster_conditions_descriptor() -> serde_json::Value {
    json!({"path": "conditions", "displayName": "Conditions", "description": "Ready, Progressing, Degraded, BackupStale",
           "x-descriptors": ["urn:alm:descriptor:io.kubernetes.conditions"]})
}

/// The status descriptors every backup kind shares: its phase and its conditions.
pub fn backup_status_descriptors() -> serde_json::Value {
    json!([
        {"path": "phase", "displayName": "Phase", "description": "Pending, Running, Succeeded or Failed",
         "x-descriptors": ["urn:alm:descriptor:io.kubernetes.phase"]},
        {"path": "conditions", "displayName": "Conditions", "description": "Ready when the snapshot is stored",
         "x-descriptors": ["urn:alm:descriptor:io.kubernetes.conditions"]}
    ])
}
