//! The operator's watch caches of its own objects, so a pass over a settled cluster reads nothing
//! from the API server.
//!
//! A cluster controller watches the StatefulSets, Services, PodDisruptionBudgets, Secrets,
//! ConfigMaps and Pods labelled as managed by its operator (no other object of the cluster is
//! held in memory), and keeps each kind in a reflector store registered here. A pass asks the
//! cache first and the API server only when the cache cannot answer:
//!
//! - before a store's first complete listing, or for a kind or namespace no store covers;
//! - for a name the store does not hold: an object without the operator's label (someone else's,
//!   in the way) is never in it, so absence in the cache proves nothing;
//! - for a list whose selector does not include the store's own, so the store may miss some;
//! - when the copy is not the version this process last wrote or read ([`crate::freshness`]),
//!   and the watch does not deliver that version within a moment ([`freshness::after_own_write`]).
//!
//! What the API server answers is recorded as the newest version known, so the next pass can
//! use the cache again once the watch has delivered it.
//!
//! An object a spec names but the operator does not label (a Secret with a user's password or
//! certificates) is in no store: it is read, then used for [`REFERENCED_FOR`] before it is read
//! again, so a settled cluster does not read it on every pass. A change to it reaches the
//! cluster within that time.

use std::{
    any::{Any, TypeId},
    collections::{BTreeMap, HashMap, HashSet},
    fmt::Debug,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt};
use k8s_openapi::{NamespaceResourceScope, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::ListParams,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde::de::DeserializeOwned;

use crate::{
    freshness::{self, Currency},
    naming::label_selector,
};

/// How long a copy of an object no watch holds (a Secret a user names in a spec) is used before
/// it is read again.
pub const REFERENCED_FOR: Duration = Duration::from_secs(600);

/// Kind, namespace and name.
type ReferencedKey = (TypeId, String, String);

/// The bounds of a kind the cache can hold.
pub trait Cacheable:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Cacheable for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// One watched scope of one kind.
struct Watched<K: Cacheable> {
    /// The namespace watched, or every namespace.
    namespace: Option<String>,
    /// The labels every object of the store carries (its watch's selector).
    selector: BTreeMap<String, String>,
    store: Store<K>,
    listed: Arc<AtomicBool>,
}

impl<K: Cacheable> Watched<K> {
    fn covers(&self, namespace: &str) -> bool {
        self.listed.load(Ordering::Acquire) && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }
}

/// The caches of one operator process, by kind. Cloning shares them.
#[derive(Clone, Default)]
pub struct Cache {
    stores: Arc<RwLock<HashMap<TypeId, Box<dyn Any + Send + Sync>>>>,
    /// The uids of clusters found free of a deleted predecessor's leftovers
    /// ([`crate::predecessor::held_back`]): what never changes once learned.
    free_of_leftovers: Arc<Mutex<HashSet<String>>>,
    /// Objects no store holds, as last read, and when.
    referenced: Arc<Mutex<HashMap<ReferencedKey, ReferencedCopy>>>,
}

/// Drops from a cached object's managed fields every entry [`crate::apply`] never reads (all of
/// them unless the operator `applies` objects of its kind): the operator's comparison looks only
/// at an Apply of the object itself.
fn keep_applied_fields(meta: &mut ObjectMeta, applies: bool) {
    match &mut meta.managed_fields {
        Some(entries) if applies => entries.retain(crate::apply::is_apply_of_the_object),
        fields => *fields = None,
    }
}

/// When an object no store holds was read, and what was read.
type ReferencedCopy = (Instant, Arc<dyn Any + Send + Sync>);

impl Cache {
    /// Watches the objects of `api` (one namespace or all) that carry every label of `selector`,
    /// keeping them in a store of this cache. The returned stream must be polled for the store to
    /// fill; it yields every object added, changed or deleted, for a controller's triggers.
    pub fn watch<K: Cacheable>(
        &self,
        api: Api<K>,
        namespace: Option<String>,
        selector: BTreeMap<String, String>,
    ) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let (store, writer) = reflector::store();
        let config = watcher::Config::default().labels(&label_selector(&selector));
        let listed = self.keep(store, namespace, selector);
        // Which field manager set what matters only for the objects this operator applies, and
        // only its own entry of them ([`crate::apply`] compares that, and no other): a pod's
        // record of the kubelet's status writes is most of its size, a StatefulSet's of the
        // controllers' status writes a good part.
        let applied = TypeId::of::<K>() != TypeId::of::<k8s_openapi::api::core::v1::Pod>();
        watcher(api, config)
            .default_backoff()
            .modify(move |object: &mut K| keep_applied_fields(object.meta_mut(), applied))
            .reflect(writer)
            .inspect(move |event| {
                mark_listed(&listed, event);
                freshness::observe(event);
            })
            .touched_objects()
    }

    /// Keeps `store` (filled by a watch of `namespace`, or of every namespace, selecting
    /// `selector`) for lookups; the watch marks the returned flag with [`mark_listed`].
    pub(crate) fn keep<K: Cacheable>(
        &self,
        store: Store<K>,
        namespace: Option<String>,
        selector: BTreeMap<String, String>,
    ) -> Arc<AtomicBool> {
        let listed = Arc::new(AtomicBool::new(false));
        self.register(Watched {
            namespace,
            selector,
            store,
            listed: listed.clone(),
        });
        listed
    }

    fn register<K: Cacheable>(&self, watched: Watched<K>) {
        if let Ok(mut stores) = self.stores.write() {
            stores
                .entry(TypeId::of::<K>())
                .or_insert_with(|| Box::new(Vec::<Watched<K>>::new()))
                .downcast_mut::<Vec<Watched<K>>>()
                .expect("stores are keyed by their kind")
                .push(watched);
        }
    }

    fn with_stores<K: Cacheable, T>(&self, read: impl FnOnce(&[Watched<K>]) -> Option<T>) -> Option<T> {
        let stores = self.stores.read().ok()?;
        let watched = stores
            .get(&TypeId::of::<K>())?
            .downcast_ref::<Vec<Watched<K>>>()?;
        read(watched)
    }

    /// Whether the cluster with uid `uid` was found free of a deleted predecessor's leftovers.
    pub fn is_free_of_leftovers(&self, uid: &str) -> bool {
        !uid.is_empty() && self.free_of_leftovers.lock().is_ok_and(|free| free.contains(uid))
    }

    /// Remembers that the cluster with uid `uid` is free of a deleted predecessor's leftovers.
    pub fn set_free_of_leftovers(&self, uid: String) {
        if let Ok(mut free) = self.free_of_leftovers.lock() {
            free.insert(uid);
        }
    }

    /// The cached copy of `namespace/name`, when the cache holds it at the version this process
    /// last knew; `None` when only the API server can tell.
    pub fn get<K: Cacheable>(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.with_stores::<K, _>(|watched| {
            let reference = ObjectRef::new(name).within(namespace);
            let copy = watched
                .iter()
                .filter(|watched| watched.covers(namespace))
                .find_map(|watched| watched.store.get(&reference))?;
            (freshness::currency(copy.as_ref()) != Currency::Stale).then_some(copy)
        })
    }

    /// The cached objects of `namespace` carrying every label of `labels`, when a store holds all
    /// of them, each at the version this process last knew; `None` when only the API server can
    /// tell.
    pub fn list<K: Cacheable>(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<Vec<Arc<K>>> {
        self.with_stores::<K, _>(|watched| {
            let store = watched.iter().find(|watched| {
                watched.covers(namespace)
                    && watched
                        .selector
                        .iter()
                        .all(|(key, value)| labels.get(key) == Some(value))
            })?;
            let found = store.store.state_filter(|object| {
                object.namespace().as_deref() == Some(namespace)
                    && labels
                        .iter()
                        .all(|(key, value)| object.labels().get(key) == Some(value))
            });
            found
                .iter()
                .all(|object| freshness::currency(object.as_ref()) != Currency::Stale)
                .then_some(found)
        })
    }

    /// As [`Cache::get`], waiting a moment for the watch when the copy lacks this process's own
    /// write not delivered yet (the pass after the one that made it): a read would only ask for
    /// what is known ([`freshness::after_own_write`]).
    pub async fn get_after_own_write<K: Cacheable>(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        match self.get::<K>(namespace, name) {
            Some(copy) => Some(copy),
            None => {
                freshness::after_own_write::<K, _>(namespace, name, || self.get::<K>(namespace, name)).await
            }
        }
    }

    /// As [`Cache::get`], reading from the API server when the cache cannot answer.
    ///
    /// # Errors
    /// When the API server cannot be read.
    pub async fn get_or_read<K: Cacheable>(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<K>>, kube::Error> {
        if let Some(copy) = self.get_after_own_write::<K>(namespace, name).await {
            return Ok(Some(copy));
        }
        let key = (TypeId::of::<K>(), namespace.to_string(), name.to_string());
        if let Some(copy) = self.referenced::<K>(&key) {
            return Ok(Some(copy));
        }
        let read = Api::<K>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?;
        let Some(object) = read else {
            // Absent now: nothing of this process's is awaited (a copy the watch delivers later
            // is as trusted as one never read).
            freshness::forget::<K>(namespace, name);
            return Ok(None);
        };
        freshness::record(&object);
        let object = Arc::new(object);
        // Only beside a store of its kind, which would hold it if it could: a context without
        // stores (a test driving passes by hand) reads everything every time.
        if self.could_hold(object.as_ref()) == Some(false)
            && let Ok(mut referenced) = self.referenced.lock()
        {
            referenced.insert(key, (Instant::now(), object.clone()));
        }
        Ok(Some(object))
    }

    /// The copy of an object no store can hold, read less than [`REFERENCED_FOR`] ago.
    fn referenced<K: Cacheable>(&self, key: &ReferencedKey) -> Option<Arc<K>> {
        let referenced = self.referenced.lock().ok()?;
        let (read_at, copy) = referenced.get(key)?;
        if read_at.elapsed() >= REFERENCED_FOR {
            return None;
        }
        copy.clone().downcast::<K>().ok()
    }

    /// Whether a store of `object`'s kind would hold it once its watch delivers it (it carries
    /// the labels that store selects by); `None` when there is no store of its kind.
    fn could_hold<K: Cacheable>(&self, object: &K) -> Option<bool> {
        let namespace = object.namespace().unwrap_or_default();
        self.with_stores::<K, _>(|watched| {
            Some(watched.iter().any(|watched| {
                watched.namespace.as_deref().is_none_or(|ns| ns == namespace)
                    && watched
                        .selector
                        .iter()
                        .all(|(key, value)| object.labels().get(key) == Some(value))
            }))
        })
    }

    /// As [`Cache::list`], listing from the API server when the cache cannot answer.
    ///
    /// # Errors
    /// When the API server cannot be read.
    pub async fn list_or_read<K: Cacheable>(
        &self,
        client: &Client,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<K>>, kube::Error> {
        if let Some(found) = self.list::<K>(namespace, labels) {
            return Ok(found);
        }
        let listed = Api::<K>::namespaced(client.clone(), namespace)
            .list(&ListParams::default().labels(&label_selector(labels)))
            .await?;
        Ok(listed
            .items
            .into_iter()
            .map(|object| {
                freshness::record(&object);
                Arc::new(object)
            })
            .collect())
    }
}

/// Marks a store listed once its watch delivered a complete listing: the store swaps one in at
/// once, so from then on it always holds one.
pub(crate) fn mark_listed<K>(listed: &AtomicBool, event: &Result<watcher::Event<K>, watcher::Error>) {
    if let Ok(watcher::Event::InitDone) = event {
        listed.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    const NAMESPACE: &str = "cache-test";

    fn map(name: &str, version: &str) -> ConfigMap {
        freshness::config_map(NAMESPACE, name, &format!("{name}-uid"), Some(version))
    }

    /// A cache with one listed store of config maps, and the writer that fills it as a watch
    /// would.
    fn cache() -> (Cache, reflector::store::Writer<ConfigMap>) {
        let cache = Cache::default();
        let (store, writer) = reflector::store();
        let listed = cache.keep(
            store,
            Some(NAMESPACE.into()),
            BTreeMap::from([("app".into(), "quorum".into())]),
        );
        listed.store(true, Ordering::Release);
        (cache, writer)
    }

    fn deliver(writer: &mut reflector::store::Writer<ConfigMap>, object: ConfigMap) {
        let event = watcher::Event::Apply(object);
        writer.apply_watcher_event(&event);
        freshness::observe(&Ok(event));
    }

    #[tokio::test]
    async fn a_pass_behind_its_own_write_waits_for_the_watch_and_reads_nothing() {
        let (cache, mut writer) = cache();
        let client = freshness::unreachable_client();
        let name = "behind-a-write";
        deliver(&mut writer, map(name, "1"));
        freshness::record_write::<ConfigMap, _>(NAMESPACE, name, &Ok(map(name, "2")));
        assert_eq!(
            cache.get::<ConfigMap>(NAMESPACE, name),
            None,
            "the store's copy lacks the write"
        );
        tokio::spawn(async move { deliver(&mut writer, map(name, "2")) });
        let found = cache
            .get_or_read::<ConfigMap>(&client, NAMESPACE, name)
            .await
            .expect("no read: the watch delivers the write in a moment")
            .expect("the object");
        assert_eq!(found.metadata.resource_version.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn an_object_whose_write_the_watch_does_not_deliver_is_read() {
        let (cache, mut writer) = cache();
        let client = freshness::unreachable_client();
        let name = "not-delivered";
        deliver(&mut writer, map(name, "1"));
        freshness::record_write::<ConfigMap, _>(NAMESPACE, name, &Ok(map(name, "2")));
        assert!(
            cache
                .get_or_read::<ConfigMap>(&client, NAMESPACE, name)
                .await
                .is_err()
        );
    }

    #[test]
    fn a_cached_object_keeps_only_the_managed_fields_an_apply_compares() {
        let entry = |manager: &str, operation: &str, subresource: Option<&str>| {
            serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>(
                serde_json::json!({
                    "manager": manager, "operation": operation, "subresource": subresource,
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}
                }),
            )
            .unwrap()
        };
        let ours = entry("quorum-etcd-operator", "Apply", None);
        let users = entry("kubectl", "Apply", None);
        let recorded = vec![
            ours.clone(),
            entry("kube-controller-manager", "Update", Some("status")),
            entry("quorum-etcd-operator", "Apply", Some("status")),
            users.clone(),
            entry("kubectl-edit", "Update", None),
        ];
        let mut applied = ObjectMeta {
            managed_fields: Some(recorded.clone()),
            ..ObjectMeta::default()
        };
        keep_applied_fields(&mut applied, true);
        assert_eq!(applied.managed_fields, Some(vec![ours, users]));

        let mut watched_only = ObjectMeta {
            managed_fields: Some(recorded),
            ..ObjectMeta::default()
        };
        keep_applied_fields(&mut watched_only, false);
        assert_eq!(watched_only.managed_fields, None);
    }
}
