//! Server-side apply of child objects, owned by the custom resource that wants them.
//!
//! Each operator applies under one field manager, so `kubectl get -o yaml --show-managed-fields`
//! tells which fields are the operator's. Fields are forced: the operator alone owns what it
//! applies. Anything the operator does not want to own (a StatefulSet's `replicas` when an HPA
//! scales it) must simply be left out of the applied object.
//!
//! A settled cluster costs no write: a child is not applied again (it is read instead) when its
//! desired object is the one this process last applied, the fields the API server records as
//! this field manager's are exactly those it recorded right after that apply, and the stored
//! object still holds every desired field with the same value. Anything else is applied as
//! before: a first apply after a start, a changed desired object, a child deleted, replaced or
//! edited by someone else. An edit by another manager of a field the operator owns (a value, a
//! key removed, an atomic map such as a Service's selector replaced) moves that field's
//! ownership away from the operator's manager, which the first check sees even where the
//! stored values alone would not tell.
//!
//! Only the owner's own children are written. The first write of a child in the process reads it:
//! an object under that name controlled by anything else is refused ([`Error::NotOwned`]). Once a
//! child is known to be the owner's, its uid goes with every later write, so the API server itself
//! refuses the write if the child was deleted or replaced by another object meanwhile, and the
//! child is read again.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt::Debug,
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex},
};

use k8s_openapi::{
    NamespaceResourceScope,
    apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde::Serialize;
use serde_json::Value;

use crate::{
    Error,
    cache::{Cache, Cacheable},
    freshness, ownership,
};

/// A child by kind, namespace and name, and the uid of its owner.
type ChildKey = (String, String, String, String);

/// Applies objects with server-side apply under one field manager.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    field_manager: String,
    /// Children known to be controlled by their owner: their uid and a digest of the object
    /// last applied. Keyed by the owner's uid too: an owner deleted and created again under its
    /// name starts unknown, so what the deleted one left is found and refused until garbage
    /// collection removes it.
    known: Arc<Mutex<HashMap<ChildKey, Known>>>,
    /// Children this process removed, or found absent, since it last applied them: their owner
    /// no longer wants them, and nothing else creates them.
    absent: Arc<Mutex<HashSet<ChildKey>>>,
    /// The watch caches a settled child is compared against instead of reading it.
    cache: Cache,
}

#[derive(Clone, Debug)]
struct Known {
    uid: String,
    /// A digest of the object last applied.
    applied: u64,
    /// A digest of the fields the API server recorded as this manager's right after that apply
    /// (a digest, not the fields: a settled cluster's children would hold their trees in memory
    /// for nothing but a comparison).
    owned: Option<u64>,
}

impl Applier {
    /// An applier whose field manager is `field_manager` (by convention the operator's name).
    pub fn new(client: Client, field_manager: impl Into<String>) -> Self {
        Self::with_cache(client, field_manager, Cache::default())
    }

    /// An applier that compares children against `cache` before reading them.
    pub fn with_cache(client: Client, field_manager: impl Into<String>, cache: Cache) -> Self {
        Self {
            client,
            field_manager: field_manager.into(),
            known: Arc::default(),
            absent: Arc::default(),
            cache,
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
        K: Cacheable + Serialize,
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
            let stored = api.patch(&name, &params, &Patch::Apply(object)).await;
            freshness::record_write::<K, _>(&key.1, &name, &stored);
            return stored.map_err(refused);
        }
        let digest = digest(object);
        if let Some(known) = self.known(&key) {
            if known.applied == digest
                && let Some(stored) = self.unchanged(&api, &key, &known, object).await?
            {
                return Ok(stored);
            }
            let applied = api
                .patch(&name, &params, &Patch::Apply(with_uid(object, known.uid)))
                .await;
            freshness::record_write::<K, _>(&key.1, &name, &applied);
            match applied {
                Ok(stored) => {
                    self.remember(key, &stored, digest);
                    return Ok(stored);
                }
                // 404: deleted; 409: the uid matched nothing; 422: another object (another uid)
                // is under the name, or the object is invalid. Either way, look again.
                Err(kube::Error::Api(status)) if [404, 409, 422].contains(&status.code) => {
                    self.forget(&key);
                }
                Err(source) => return Err(refused(source)),
            }
        }
        self.owner_stands(&key)?;
        let uid = self.check_ownership(&api, &key).await?;
        let applied = match uid {
            Some(uid) => with_uid(object, uid),
            None => object.clone(),
        };
        let stored = api.patch(&name, &params, &Patch::Apply(&applied)).await;
        freshness::record_write::<K, _>(&key.1, &name, &stored);
        let stored = stored.map_err(refused)?;
        self.remember(key, &stored, digest);
        Ok(stored)
    }

    /// The stored child, when it is the one last applied and still holds every field of
    /// `object` with the same value: nothing to write.
    async fn unchanged<K>(
        &self,
        api: &Api<K>,
        key: &ChildKey,
        known: &Known,
        object: &K,
    ) -> Result<Option<K>, Error>
    where
        K: Cacheable + Serialize,
    {
        let stored = match self.cache.get_after_own_write::<K>(&key.1, &key.2).await {
            Some(copy) => Some(K::clone(&copy)),
            None => {
                let stored = api.get_opt(&key.2).await.map_err(read(&key.0, &key.2))?;
                if let Some(stored) = &stored {
                    freshness::record(stored);
                }
                stored
            }
        };
        let Some(stored) = stored else {
            return Ok(None);
        };
        let same_object = stored.meta().uid.as_deref() == Some(known.uid.as_str());
        let same_fields = known.owned.is_some() && owned_digest(&stored, &self.field_manager) == known.owned;
        let holds = match (serde_json::to_value(&stored), serde_json::to_value(object)) {
            (Ok(stored), Ok(desired)) => holds(&stored, &desired),
            _ => false,
        };
        Ok((same_object && same_fields && holds).then_some(stored))
    }

    /// Applies `desired` under `name`, or, when the owner no longer wants it (`None`), deletes
    /// the object under `name` if `owner` controls it; nothing is written when there is none.
    ///
    /// # Errors
    /// As [`Applier::apply`]; [`Error::Read`] or [`Error::Delete`] when the object cannot be read
    /// or deleted.
    pub async fn apply_or_remove<K, O>(&self, owner: &O, name: &str, desired: Option<K>) -> Result<(), Error>
    where
        K: Cacheable + Serialize,
        O: Resource<DynamicType = ()>,
    {
        if let Some(desired) = desired {
            return self.apply(&desired).await.map(drop);
        }
        let kind = K::kind(&()).to_string();
        let namespace = owner.namespace().unwrap_or_default();
        let key = (
            kind.clone(),
            namespace.clone(),
            name.to_string(),
            owner.meta().uid.clone().unwrap_or_default(),
        );
        let cached = self.cache.get::<K>(&namespace, name);
        if cached.is_none() && self.is_absent(&key) {
            return Ok(());
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), &namespace);
        let existing = match cached {
            Some(copy) => Some(copy.meta().clone()),
            None => api
                .get_metadata_opt(name)
                .await
                .map_err(read(&kind, name))?
                .map(|existing| existing.metadata),
        };
        let owned = existing
            .as_ref()
            .is_some_and(|existing| controller_uid(existing) == owner.meta().uid);
        if owned {
            let uid = existing.and_then(|existing| existing.uid);
            freshness::record_deleted::<K>(&namespace, name, uid.as_deref());
            ignore_not_found(api.delete(name, &DeleteParams::default()).await.map(drop)).map_err(
                |source| Error::Delete {
                    kind,
                    name: name.to_string(),
                    source,
                },
            )?;
        }
        // Removed, absent or someone else's: this owner has nothing under the name until it
        // wants it again.
        self.set_absent(key, true);
        Ok(())
    }

    /// Creates `object` unless an object of its owner is already under its name; what exists is
    /// never rewritten (a generated password, made once).
    ///
    /// # Errors
    /// [`Error::NotOwned`] when an object under its name is not controlled by its owner;
    /// [`Error::Read`] or [`Error::Apply`] when the API server cannot be read or refuses the object.
    pub async fn create_once<K>(&self, object: &K) -> Result<(), Error>
    where
        K: Cacheable + Serialize,
    {
        // Looked up every time (in the watch cache once it holds it): a create-once object is
        // never written again, so no write of it would notice that it was deleted.
        let (api, key) = self.target(object)?;
        self.owner_stands(&key)?;
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

    /// Refuses to make a child whose owner the watch saw deleted: a pass still running for a
    /// cluster deleted meanwhile would otherwise make its StatefulSet again, whose pods would
    /// leave claims younger than a cluster created again under its name, which that cluster
    /// would then start on.
    fn owner_stands(&self, key: &ChildKey) -> Result<(), Error> {
        let (kind, _, name, owner) = key;
        if !owner.is_empty() && freshness::is_deleted(owner) {
            return Err(Error::Gone {
                kind: format!("owner of {kind}"),
                name: name.clone(),
            });
        }
        Ok(())
    }

    /// The uid of the object under `key`'s name when `key`'s owner controls it, `None` when
    /// there is none.
    async fn check_ownership<K>(&self, api: &Api<K>, key: &ChildKey) -> Result<Option<String>, Error>
    where
        K: Cacheable,
    {
        let (kind, namespace, name, owner) = key;
        let existing = match self.cache.get::<K>(namespace, name) {
            Some(copy) => copy.meta().clone(),
            None => match api.get_metadata_opt(name).await.map_err(read(kind, name))? {
                Some(existing) => existing.metadata,
                None => return Ok(None),
            },
        };
        if let Some(conflict) = ownership::conflict(&K::api_version(&()), kind, &existing, owner) {
            return Err(Error::NotOwned(Box::new(conflict)));
        }
        Ok(existing.uid)
    }

    fn known(&self, key: &ChildKey) -> Option<Known> {
        self.known.lock().ok()?.get(key).cloned()
    }

    fn is_absent(&self, key: &ChildKey) -> bool {
        self.absent.lock().is_ok_and(|absent| absent.contains(key))
    }

    fn set_absent(&self, key: ChildKey, absent: bool) {
        if let Ok(mut set) = self.absent.lock() {
            if absent {
                set.insert(key);
            } else {
                set.remove(&key);
            }
        }
    }

    fn remember<K: Resource<DynamicType = ()>>(&self, key: ChildKey, stored: &K, applied: u64) {
        self.set_absent(key.clone(), false);
        let owned = owned_digest(stored, &self.field_manager);
        if let (Ok(mut known), Some(uid)) = (self.known.lock(), stored.meta().uid.clone()) {
            known.insert(key, Known { uid, applied, owned });
        }
    }

    fn forget(&self, key: &ChildKey) {
        if let Ok(mut known) = self.known.lock() {
            known.remove(key);
        }
    }
}

fn read(kind: &str, name: &str) -> impl FnOnce(kube::Error) -> Error {
    let (kind, name) = (kind.to_string(), name.to_string());
    move |source| Error::Read { kind, name, source }
}

/// The fields the API server records as applied by `manager` on `object` (its managed-fields
/// entry of the Apply operation on the object itself, not a subresource).
fn owned_fields<'a, K: Resource>(object: &'a K, manager: &str) -> Option<&'a FieldsV1> {
    object
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .find(|entry| entry.manager.as_deref() == Some(manager) && is_apply_of_the_object(entry))
        .and_then(|entry| entry.fields_v1.as_ref())
}

/// Whether `entry` records an Apply on the object itself, not on a subresource.
pub(crate) fn is_apply_of_the_object(entry: &ManagedFieldsEntry) -> bool {
    entry.operation.as_deref() == Some("Apply") && entry.subresource.as_deref().unwrap_or_default().is_empty()
}

/// A digest of the fields `manager` applied on `object` ([`owned_fields`]).
fn owned_digest<K: Resource>(object: &K, manager: &str) -> Option<u64> {
    owned_fields(object, manager).map(digest)
}

/// A digest of the object as it would be applied.
fn digest<K: Serialize>(object: &K) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(object)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// Whether `stored` holds every field of `desired` with the same value: maps field by field
/// (a field `desired` leaves null or empty may be absent), lists element by element and of the
/// same length, scalars equal. Fields only `stored` has (defaults, status, other managers')
/// do not matter.
fn holds(stored: &Value, desired: &Value) -> bool {
    match (stored, desired) {
        (_, Value::Null) => true,
        (Value::Object(stored), Value::Object(desired)) => {
            desired.iter().all(|(field, wanted)| match stored.get(field) {
                Some(value) => holds(value, wanted),
                None => is_empty(wanted),
            })
        }
        (Value::Array(stored), Value::Array(desired)) => {
            stored.len() == desired.len()
                && stored
                    .iter()
                    .zip(desired)
                    .all(|(value, wanted)| holds(value, wanted))
        }
        (Value::Null, wanted) => is_empty(wanted),
        (stored, desired) => stored == desired,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.values().all(is_empty),
        Value::Array(list) => list.is_empty(),
        _ => false,
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher;
    use serde_json::json;

    use super::*;

    fn config_map_of(owner: &ConfigMap, name: &str) -> ConfigMap {
        ConfigMap {
            metadata: child_metadata(owner, name, BTreeMap::new()).unwrap(),
            ..ConfigMap::default()
        }
    }

    /// A pass still running once the watch delivered its cluster's deletion (or saw it begin)
    /// makes no child: nothing is asked of the API server (the client here answers nothing),
    /// and the pass ends with `Gone`.
    #[tokio::test]
    async fn no_child_is_made_for_an_owner_the_watch_saw_deleted() {
        let applier = Applier::new(freshness::unreachable_client(), "test-operator");
        for (owner_uid, deleted) in [("deleted-owner-uid", true), ("deleting-owner-uid", false)] {
            let mut owner = freshness::config_map("apply-test", "demo", owner_uid, Some("1"));
            if deleted {
                freshness::observe(&Ok(watcher::Event::Delete(owner.clone())));
            } else {
                owner.metadata.deletion_timestamp = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
                );
                freshness::observe(&Ok(watcher::Event::Apply(owner.clone())));
            }
            let child = config_map_of(&owner, "demo-config");
            let applied = applier.apply(&child).await;
            assert!(matches!(applied, Err(Error::Gone { .. })), "{applied:?}");
            let created = applier.create_once(&child).await;
            assert!(matches!(created, Err(Error::Gone { .. })), "{created:?}");
        }
        // An owner the watch holds, not deleted, is asked about as before.
        let owner = freshness::config_map("apply-test", "standing", "standing-owner-uid", Some("1"));
        freshness::observe(&Ok(watcher::Event::Apply(owner.clone())));
        let child = config_map_of(&owner, "standing-config");
        let applied = applier.apply(&child).await;
        assert!(matches!(applied, Err(Error::Read { .. })), "{applied:?}");
    }

    #[test]
    fn a_stored_object_holds_what_was_applied_whatever_else_it_has() {
        let desired = json!({
            "metadata": {"name": "main", "labels": {"app": "etcd"}, "annotations": {}, "uid": null},
            "spec": {"ports": [{"port": 2379}], "selector": {"app": "etcd"}}
        });
        let stored = json!({
            "metadata": {"name": "main", "labels": {"app": "etcd"}, "uid": "u-1", "resourceVersion": "7"},
            "spec": {"ports": [{"port": 2379, "protocol": "TCP"}], "selector": {"app": "etcd"}, "type": "ClusterIP"},
            "status": {}
        });
        assert!(holds(&stored, &desired));
    }

    #[test]
    fn a_changed_missing_or_reshaped_field_is_not_held() {
        let desired = json!({"spec": {"replicas": 3, "ports": [{"port": 2379}], "hidden": false}});
        for stored in [
            json!({"spec": {"replicas": 5, "ports": [{"port": 2379}], "hidden": false}}),
            json!({"spec": {"replicas": 3, "ports": [{"port": 2380}], "hidden": false}}),
            json!({"spec": {"replicas": 3, "ports": [{"port": 2379}, {"port": 2380}], "hidden": false}}),
            json!({"spec": {"replicas": 3, "ports": [{"port": 2379}]}}),
            json!({"spec": {"replicas": "3", "ports": [{"port": 2379}], "hidden": false}}),
        ] {
            assert!(!holds(&stored, &desired), "{stored}");
        }
    }

    #[test]
    fn owned_fields_are_this_manager_s_apply_entry_only() {
        let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
            "metadata": {"name": "main", "managedFields": [
                {"manager": "quorum-etcd-operator", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:selector": {}}}},
                {"manager": "quorum-etcd-operator", "operation": "Update", "subresource": "status",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}},
                {"manager": "kubectl-patch", "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:type": {}}}}
            ]}
        }))
        .unwrap();
        assert_eq!(
            owned_fields(&service, "quorum-etcd-operator").map(|fields| &fields.0),
            Some(&json!({"f:spec": {"f:selector": {}}}))
        );
        assert_eq!(owned_fields(&service, "someone-else"), None);
    }

    #[test]
    fn digests_follow_the_object() {
        let a = json!({"spec": {"replicas": 3}});
        let b = json!({"spec": {"replicas": 4}});
        assert_eq!(digest(&a), digest(&a.clone()));
        assert_ne!(digest(&a), digest(&b));
    }
}
