//! Server-side apply of child objects, owned by the custom resource that wants them.
//!
//! Each operator applies under one field manager, so `kubectl get -o yaml --show-managed-fields`
//! tells which fields are the operator's. Fields are forced: the operator alone owns what it
//! applies. Anything the operator does not want to own (a StatefulSet's `replicas` when an HPA
//! scales it) must simply be left out of the applied object.

use std::{collections::BTreeMap, fmt::Debug};

use k8s_openapi::{
    NamespaceResourceScope, apimachinery::pkg::apis::meta::v1::ObjectMeta,
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::Error;

/// Applies objects with server-side apply under one field manager.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    field_manager: String,
}

impl Applier {
    /// An applier whose field manager is `field_manager` (by convention the operator's name).
    pub fn new(client: Client, field_manager: impl Into<String>) -> Self {
        Self {
            client,
            field_manager: field_manager.into(),
        }
    }

    /// The field manager name this applier writes under.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// Server-side applies a namespaced object and returns what the API server stored.
    ///
    /// # Errors
    /// [`Error::MissingField`] when the object has no name or namespace; [`Error::Apply`] when the
    /// API server refuses the object (validation, conflict on an immutable field, RBAC).
    pub async fn apply<K>(&self, object: &K) -> Result<K, Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let kind = K::kind(&()).to_string();
        let name = object.meta().name.clone().ok_or_else(|| Error::MissingField {
            kind: kind.clone(),
            field: "metadata.name",
        })?;
        let namespace = object.namespace().ok_or_else(|| Error::MissingField {
            kind: kind.clone(),
            field: "metadata.namespace",
        })?;
        let api: Api<K> = Api::namespaced(self.client.clone(), &namespace);
        let params = PatchParams::apply(&self.field_manager).force();
        api.patch(&name, &params, &Patch::Apply(object))
            .await
            .map_err(|source| Error::Apply { kind, name, source })
    }
}

/// The owner reference that makes `owner` the controller of a child: garbage collection
/// deletes the child with its owner, and `Controller::owns` maps child events back to it.
///
/// # Errors
/// [`Error::MissingField`] when the owner has not been stored yet (no uid).
pub fn controller_reference<K>(owner: &K) -> Result<OwnerReference, Error>
where
    K: Resource<DynamicType = ()>,
{
    owner
        .controller_owner_ref(&())
        .ok_or_else(|| Error::MissingField {
            kind: K::kind(&()).to_string(),
            field: "metadata.uid",
        })
}

/// Metadata for a child of `owner`: its name, the owner's namespace, the given labels and a
/// controller owner reference.
///
/// # Errors
/// As [`controller_reference`].
pub fn child_metadata<K>(
    owner: &K,
    name: impl Into<String>,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta, Error>
where
    K: Resource<DynamicType = ()>,
{
    Ok(ObjectMeta {
        name: Some(name.into()),
        namespace: owner.meta().namespace.clone(),
        labels: Some(labels),
        owner_references: Some(vec![controller_reference(owner)?]),
        ..ObjectMeta::default()
    })
}

/// The outcome of a call whose target may already be gone (deleting a child that was never
/// created, or was deleted by someone else): 404 is success.
///
/// # Errors
/// Any other API error.
pub fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error),
    }
}
