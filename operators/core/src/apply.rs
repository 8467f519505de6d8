//! Server-side apply of child objects, owned by the custom resource that wants them.
//!
//! Each operator applies under one field manager, so `kubectl get -o yaml --show-managed-fields`
//! tells which fields are the operator's. Fields are forced: the operator alone owns what it
//! applies. Anything the operator does not want to own (a StatefulSet's `replicas` when an HPA
//! scales it) must simply be left out of the applied object.
//!
//! Only the owner's own children are written. The first write of a child in the process reads it:
//! an object under that name controlled by anything else is refused ([`Error::NotOwned`]). Once a
//! child is known to be the owner's, its uid goes with every later write, so the API server itself
//! refuses the write if the child was deleted or replaced by another object meanwhile, and the
//! child is read again.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Debug,
    sync::{Arc, Mutex},
};

use k8s_openapi::{
    NamespaceResourceScope, apimachinery::pkg::apis::meta::v1::ObjectMeta,
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::{Error, ownership};

/// A child by kind, namespace and name, and the uid of its owner.
type ChildKey = (String, String, String, String);

/// Applies objects with server-side apply under one field manager.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    field_manager: String,
    /// The uids of children known to be controlled by their owner. Keyed by the owner's uid
    /// too: an owner deleted and created again under its name starts unknown, so what the
    /// deleted one left is found and refused until garbage collection removes it.
    known: Arc<Mutex<HashMap<ChildKey, String>>>,
}

impl Applier {
    /// An applier whose field manager is `field_manager` (by convention the operator's name).
    pub fn new(client: Client, field_manager: impl Into<String>) -> Self {
        Self {
            client,
            field_manager: field_manager.into(),
            known: Arc::default(),
        }
    }

    /// The field manager name this applier writes under.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// Server-side applies a namespaced object and returns what the API server stored. An object
    /// with a controller owner reference is only written over an object that owner controls.
    ///
    /// # Errors
    /// [`Error::MissingField`] when the object has no name or namespace; [`Error::NotOwned`] when
    /// an object under its name is not controlled by its owner (nothing is written);
    /// [`Error::Read`] when that cannot be checked; [`Error::Apply`] when the API server refuses
    /// the object (validation, conflict on an immutable field, RBAC).
    pub async fn apply<K>(&self, object: &K) -> Result<K, Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let (api, key) = self.target(object)?;
        let name = key.2.clone();
        let params = PatchParams::apply(&self.field_manager).force();
        let refused = |source| Error::Apply {
            kind: key.0.clone(),
            name: name.clone(),
            source,
        };
        if key.3.is_empty() {
            return api
                .patch(&name, &params, &Patch::Apply(object))
                .await
                .map_err(refused);
        }
        if let Some(uid) = self.known_uid(&key) {
            match api
                .patch(&name, &params, &Patch::Apply(with_uid(object, uid)))
                .await
            {
                Ok(stored) => return Ok(stored),
                // 404: deleted; 409: the uid matched nothing; 422: another object (another uid)
                // is under the name, or the object is invalid. Either way, look again.
                Err(kube::Error::Api(status)) if [404, 409, 422].contains(&status.code) => {
                    self.forget(&key);
                }
                Err(source) => return Err(refused(source)),
            }
        }
        let uid = self.check_ownership(&api, &key).await?;
        let applied = match uid {
            Some(uid) => with_uid(object, uid),
            None => object.clone(),
        };
        let stored = api
            .patch(&name, &params, &Patch::Apply(&applied))
            .await
            .map_err(refused)?;
        self.remember(key, &stored);
        Ok(stored)
    }

    /// Creates `object` unless an object of its owner is already under its name; what exists is
    /// never rewritten (a generated password, made once).
    ///
    /// # Errors
    /// [`Error::NotOwned`] when an object under its name is not controlled by its owner;
    /// [`Error::Read`] or [`Error::Apply`] when the API server cannot be read or refuses the object.
    pub async fn create_once<K>(&self, object: &K) -> Result<(), Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        // Read every time: a create-once object is never written again, so no write of it
        // would notice that it was deleted.
        let (api, key) = self.target(object)?;
        if self.check_ownership(&api, &key).await?.is_some() {
            return Ok(());
        }
        match api.create(&PostParams::default(), object).await {
            Ok(_) => Ok(()),
            // Created by someone else since it was read: whose it is decides.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.check_ownership(&api, &key).await.map(drop)
            }
            Err(source) => Err(Error::Apply {
                kind: key.0,
                name: key.2,
                source,
            }),
        }
    }

    fn target<K>(&self, object: &K) -> Result<(Api<K>, ChildKey), Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
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
        let api = Api::namespaced(self.client.clone(), &namespace);
        let owner = controller_uid(object.meta()).unwrap_or_default();
        Ok((api, (kind, namespace, name, owner)))
    }

    /// The uid of the object under `key`'s name when `key`'s owner controls it, `None` when
    /// there is none.
    async fn check_ownership<K>(&self, api: &Api<K>, key: &ChildKey) -> Result<Option<String>, Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Debug + DeserializeOwned,
    {
        let (kind, _, name, owner) = key;
        let existing = api.get_metadata_opt(name).await.map_err(|source| Error::Read {
            kind: kind.clone(),
            name: name.clone(),
            source,
        })?;
        let Some(existing) = existing else {
            return Ok(None);
        };
        if let Some(conflict) = ownership::conflict(&K::api_version(&()), kind, &existing.metadata, owner) {
            return Err(Error::NotOwned(Box::new(conflict)));
        }
        Ok(existing.metadata.uid)
    }

    fn known_uid(&self, key: &ChildKey) -> Option<String> {
        self.known.lock().ok()?.get(key).cloned()
    }

    fn remember<K: Resource>(&self, key: ChildKey, stored: &K) {
        if let (Ok(mut known), Some(uid)) = (self.known.lock(), stored.meta().uid.clone()) {
            known.insert(key, uid);
        }
    }

    fn forget(&self, key: &ChildKey) {
        if let Ok(mut known) = self.known.lock() {
            known.remove(key);
        }
    }
}

fn controller_uid(meta: &ObjectMeta) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|reference| reference.controller == Some(true))
        .map(|reference| reference.uid.clone())
}

/// `object` with `uid`, which the API server takes as a precondition: a write to another object
/// under the same name is refused.
fn with_uid<K: Resource + Clone>(object: &K, uid: String) -> K {
    let mut guarded = object.clone();
    guarded.meta_mut().uid = Some(uid);
    guarded
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
