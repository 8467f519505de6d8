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

/// The status descriptors every backup kind shares: its phase and its conditions.
pub fn backup_status_descriptors() -> serde_json::Value {
    json!([
        {"path": "phase", "displayName": "Phase", "description": "Pending, Running, Succeeded or Failed",
         "x-descriptors": ["urn:alm:descriptor:io.kubernetes.phase"]},
        {"path": "conditions", "displayName": "Conditions", "description": "Ready when the snapshot is stored",
         "x-descriptors": ["urn:alm:descriptor:io.kubernetes.conditions"]}
    ])
}
