//! Writing `status`, and only when it changed.
//!
//! Status is computed whole on every pass from what was observed, then written with a merge
//! patch of the status subresource. Skipping unchanged writes keeps the API server quiet and
//! does not wake other watchers for nothing.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::Error;

/// Writes `desired` as the status of `object` unless it equals `current`.
/// Returns whether a write was made.
///
/// # Errors
/// [`Error::MissingField`] for an object without namespace; [`Error::PatchStatus`] when the
/// API server refuses the patch (for example the status fails the CRD's schema).
pub async fn patch_status<K, S>(
    client: &Client,
    object: &K,
    current: Option<&S>,
    desired: &S,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Debug + DeserializeOwned,
    S: Serialize + PartialEq,
{
    if current == Some(desired) {
        return Ok(false);
    }
    let kind = K::kind(&()).to_string();
    let name = object.name_any();
    let namespace = object.namespace().ok_or_else(|| Error::MissingField {
        kind: kind.clone(),
        field: "metadata.namespace",
    })?;
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    let patch = serde_json::json!({ "status": desired });
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::PatchStatus { kind, name, source })?;
    Ok(true)
}
