//! Wiping a member: its volume claim and its pod are deleted, so the StatefulSet creates both
//! again and the member starts on a new, empty volume (and copies the data from its peers). The
//! claim goes first: while the pod runs, the claim's protection keeps the volume in use until the
//! pod is gone, so the pod is never recreated on the old volume.
//!
//! Deciding that a member may be wiped (never the primary or leader, never below quorum, only on
//! the member's own word that its data cannot be used) is each engine's; this is only the act.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Preconditions},
};

use crate::{apply::ignore_not_found, pod::data_claim_name};

/// The permissions [`wipe_member`] needs beside deleting pods (which every engine that restarts
/// members has) and, when it is given a pod's uid, reading pods: deleting claims; and reading a
/// member's claim, which a repair request does to tell a wiped member from one whose pod was
/// replaced on the same claim ([`crate::repair::standing_claim`]).
pub fn rbac_rule() -> k8s_openapi::api::rbac::v1::PolicyRule {
    crate::rbac::rule("", &["persistentvolumeclaims"], &["get", "delete"])
}

/// Deletes the data claim of pod `pod` in `namespace`, then the pod itself. Idempotent: what is
/// already gone is not an error. With `pod_uid`, only that incarnation of the pod is deleted (a
/// pod recreated meanwhile, already on a new volume, is left alone).
///
/// # Errors
/// The API server's error for a delete it refused.
pub async fn wipe_member(
    client: &Client,
    namespace: &str,
    pod: &str,
    pod_uid: Option<String>,
) -> Result<(), kube::Error> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    if let Some(uid) = &pod_uid {
        // A pod already replaced has its new claim: deleting that one would wipe it twice.
        match pods.get_opt(pod).await? {
            Some(current) if current.uid().as_deref() == Some(uid.as_str()) => {}
            _ => return Ok(()),
        }
    }
    ignore_not_found(
        claims
            .delete(&data_claim_name(pod), &DeleteParams::default())
            .await,
    )?;
    crate::freshness::record_deleted::<Pod>(namespace, pod, pod_uid.as_deref());
    let params = DeleteParams {
        preconditions: pod_uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods.delete(pod, &params).await {
        // Replaced since it was read (the uid precondition failed): that pod is not ours to delete.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        result => ignore_not_found(result),
    }
}
