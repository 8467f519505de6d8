//! Reading `status` as stored, and writing it only when it changed.
//!
//! Status is each operator's memory: the primary, the step in flight, the volumes still to
//! wipe, the restore already taken. A controller is woken with its watch cache's copy, which
//! can lag the last status write by a moment; a pass deciding on that copy could take a step a
//! second time (wipe a replacement that already joined, open a second primary). So every
//! reconcile starts from [`current`]: the copy when it holds every write this process made to the
//! object ([`crate::freshness`]), else the object as the API server has it ([`latest`]).
//!
//! Status is computed whole on every pass from what was observed, then written with a merge
//! patch of the status subresource. Skipping unchanged writes keeps the API server quiet and
//! does not wake other watchers for nothing. Every write is bound to the object the pass began
//! with ([`merge_status_of`]): a pass still running when its object is deleted and created
//! again under its name writes nothing into the new one.

use std::{fmt::Debug, sync::Arc};

use k8s_openapi::{
    NamespaceResourceScope,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::{
    Error,
    conditions::{ConditionUpdate, set_condition},
    freshness::{self, Currency},
};

/// Since when something observed of a member (not healthy, say) has held without a break: the
/// time the previous status carried while it still holds, `now` when it starts, `None` once it
/// stops. Status carries it, so it survives an operator restart.
pub fn held_since(previous: Option<&Time>, holds: bool, now: Timestamp) -> Option<Time> {
    holds.then(|| previous.cloned().unwrap_or(Time(now)))
}

/// Since when the operator has seen a member not healthy (Unhealthy or Unknown) without a
/// break, given what the previous status said: where a failover's time from loss starts.
pub fn failing_since(
    previous: Option<&Time>,
    health: &crate::availability::health::Health,
    now: Timestamp,
) -> Option<Time> {
    failing_since_heard(previous, health, None, now)
}

/// As [`failing_since`], for a member whose own connection was heard breaking at `heard_at`
/// ([`crate::database_events::DatabaseEvents::broken_since`]): a failure this pass is the first
/// to see started there, however late the pass ran.
pub fn failing_since_heard(
    previous: Option<&Time>,
    health: &crate::availability::health::Health,
    heard_at: Option<Timestamp>,
    now: Timestamp,
) -> Option<Time> {
    held_since(
        previous,
        !health.is_healthy(),
        heard_at.map_or(now, |heard| heard.min(now)),
    )
}

/// Sets on `object` the conditions `updates` asks for, given its conditions as stored now (read
/// afresh, not from the watch cache), and writes them only when they changed. The write is
/// conditional on the version read: a status written meanwhile wins, and the caller reports
/// again on its next pass. `Ok(false)` when the object is gone.
///
/// # Errors
/// [`Error::Read`] when the object cannot be read, [`Error::PatchStatus`] when the conditions
/// cannot be written.
pub async fn update_conditions<K>(
    client: &Client,
    object: &K,
    updates: impl FnOnce(&[Condition]) -> Vec<ConditionUpdate>,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Serialize + Send + Sync + 'static,
{
    let kind = K::kind(&()).to_string();
    let name = object.name_any();
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &ApiResource::erase::<K>(&()));
    // The copy at hand when it holds every write of this process (a settled pass wrote nothing
    // since), or the answer to this process's status write once the watch delivers it (the
    // report after a pass that wrote status), the object as stored otherwise.
    let stored = if freshness::currency(object) == Currency::Current {
        serde_json::to_value(object).unwrap_or_default()
    } else if let Some(answer) = delivered_answer(object).await {
        serde_json::to_value(answer.as_ref()).unwrap_or_default()
    } else {
        let Some(stored) = api.get_opt(&name).await.map_err(|source| Error::Read {
            kind: kind.clone(),
            name: name.clone(),
            source,
        })?
        else {
            return Ok(false);
        };
        freshness::record_version::<K>(
            &namespace,
            &name,
            stored.meta().uid.as_deref(),
            stored.meta().resource_version.as_deref(),
        );
        // Another object under its name: this one is gone, and its conditions with it.
        if stored.meta().uid != object.meta().uid {
            return Ok(false);
        }
        serde_json::to_value(&stored).unwrap_or_default()
    };
    let current: Vec<Condition> =
        serde_json::from_value(stored["status"]["conditions"].clone()).unwrap_or_default();
    let generation = stored["metadata"]["generation"].as_i64();
    let mut conditions = current.clone();
    let now = Timestamp::now();
    for update in updates(&current) {
        set_condition(&mut conditions, update, generation, now);
    }
    if conditions == current {
        return Ok(true);
    }
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": stored["metadata"]["resourceVersion"]},
        "status": {"conditions": conditions},
    });
    let written = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    freshness::record_write::<K, _>(&namespace, &name, &written);
    written.map_err(|source| Error::PatchStatus {
        kind,
        name: name.clone(),
        source,
    })?;
    Ok(true)
}

/// `object` as the API server has it now (its status included), or `None` once it is gone.
///
/// # Errors
/// [`Error::MissingField`] for an object without namespace; [`Error::Read`] when the API
/// server cannot be read.
pub async fn latest<K>(client: &Client, object: &K) -> Result<Option<Arc<K>>, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Debug + DeserializeOwned,
{
    let (api, kind, name) = api_of(client, object)?;
    let found = api.get_opt(&name).await.map_err(|source| Error::Read {
        kind,
        name: name.clone(),
        source,
    })?;
    if let Some(found) = &found {
        freshness::record(found);
    }
    // Another object under its name is a new one: this one is gone all the same.
    let found = found.filter(|found| found.meta().uid == object.meta().uid);
    if found.is_none() {
        freshness::forget::<K>(&object.namespace().unwrap_or_default(), &name);
    }
    Ok(found.map(Arc::new))
}

/// `object` itself when it holds every write this process made to it ([`crate::freshness`]: a
/// pass after one that wrote nothing); the answer to this process's last status write once the
/// watch delivers it, waited for a moment ([`freshness::answer`]); otherwise as the API server
/// has it now ([`latest`]). `None` once it is gone.
///
/// # Errors
/// As [`latest`].
pub async fn current<K>(client: &Client, object: &K) -> Result<Option<Arc<K>>, Error>
where
    K: crate::cache::Cacheable,
{
    if freshness::currency(object) == Currency::Current {
        return Ok(Some(Arc::new(object.clone())));
    }
    if let Some(written) = delivered_answer(object).await {
        return Ok(Some(written));
    }
    latest(client, object).await
}

/// The answer to this process's last status write of `object` (the same object, by uid), once
/// the watch delivered it, waited for a moment ([`freshness::after_own_write`]).
async fn delivered_answer<K>(object: &K) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let (namespace, name) = (
        object.meta().namespace.as_deref()?,
        object.meta().name.as_deref()?,
    );
    freshness::after_own_write::<K, _>(namespace, name, || freshness::answer::<K>(namespace, name))
        .await
        .filter(|answer| answer.meta().uid == object.meta().uid)
}

/// Writes `desired` as the status of `object` unless it equals `current`.
/// Returns whether a write was made.
///
/// # Errors
/// As [`write_status`].
pub async fn patch_status<K, S>(
    client: &Client,
    object: &K,
    current: Option<&S>,
    desired: &S,
) -> Result<bool, Error>
where
    K: crate::cache::Cacheable,
    S: Serialize + PartialEq,
{
    Ok(write_status(client, object, current, desired).await?.is_some())
}

/// Writes `desired` as the status of `object` unless it equals `current`, and returns the
/// object as the API server stored it (`None`: nothing to write), so that a later write of the
/// same pass starts from its version.
///
/// # Errors
/// [`Error::MissingField`] for an object without namespace; [`Error::Gone`] when the object
/// was deleted or replaced under its name; [`Error::PatchStatus`] when the API server refuses
/// the patch (for example the status fails the CRD's schema).
pub async fn write_status<K, S>(
    client: &Client,
    object: &K,
    current: Option<&S>,
    desired: &S,
) -> Result<Option<K>, Error>
where
    K: crate::cache::Cacheable,
    S: Serialize + PartialEq,
{
    let version = object.meta().resource_version.clone();
    write_status_at(client, object, version, current, desired).await
}

/// As [`write_status`], naming `version` of `object` first.
async fn write_status_at<K, S>(
    client: &Client,
    object: &K,
    version: Option<String>,
    current: Option<&S>,
    desired: &S,
) -> Result<Option<K>, Error>
where
    K: crate::cache::Cacheable,
    S: Serialize + PartialEq,
{
    if current == Some(desired) {
        return Ok(None);
    }
    let (api, _, _) = api_of(client, object)?;
    let desired_json = serde_json::to_value(desired).unwrap_or(serde_json::Value::Null);
    let current_json = current
        .and_then(|c| serde_json::to_value(c).ok())
        .unwrap_or(serde_json::Value::Null);
    let patch = serde_json::json!({ "status": merge_patch(&current_json, &desired_json) });
    merge_status_bound(&api, object, version, &patch).await.map(Some)
}

/// [`merge_status_of`], with the object gone as [`Error::Gone`] and a refusal as
/// [`Error::PatchStatus`].
///
/// # Errors
/// Those two.
pub async fn merge_status_bound<K>(
    api: &Api<K>,
    object: &K,
    version: Option<String>,
    patch: &serde_json::Value,
) -> Result<K, Error>
where
    K: crate::cache::Cacheable,
{
    let (kind, name) = (K::kind(&()).to_string(), object.name_any());
    match merge_status_of(api, object, version, patch).await {
        Ok(Some(written)) => Ok(written),
        Ok(None) => Err(Error::Gone { kind, name }),
        Err(source) => Err(Error::PatchStatus { kind, name, source }),
    }
}

/// How many times [`merge_status_of`] repeats a write another writer's overtook: bounded, so
/// that writers that keep overtaking each other end in an error rather than a livelock.
pub const CONFLICTS_RETRIED: u32 = 10;

/// Sends `patch` (a JSON merge patch with a `status` field) to the status of `object` itself,
/// never to another object created under its name after `object` was deleted: a pass that
/// began before the deletion would otherwise give the new object the deleted one's memory (a
/// cluster id, members, a step in flight). The write names a version of `object`, `version`
/// first; when the API server holds another, the object is read again and, while it is still
/// `object` (by uid), the write is repeated at the version read, up to [`CONFLICTS_RETRIED`]
/// times: each conflict is another writer's write landing between the read and this one (the
/// backups of one cluster recording on it as they finish, beside its own reconciler), and the
/// patch carries only this writer's fields. A status subresource ignores a uid sent with the
/// patch, so the version is what binds the write to the object. `Ok(None)` when `object` is
/// gone.
///
/// # Errors
/// The API server's answer when the patch is refused or lost, or the object cannot be read.
pub async fn merge_status_of<K>(
    api: &Api<K>,
    object: &K,
    version: Option<String>,
    patch: &serde_json::Value,
) -> Result<Option<K>, kube::Error>
where
    K: crate::cache::Cacheable,
{
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let mut version = version;
    let mut conflicts = 0;
    loop {
        let at = match version.take() {
            Some(version) => version,
            None => match api.get_opt(&name).await? {
                Some(stored) if stored.meta().uid == object.meta().uid => {
                    freshness::record(&stored);
                    stored.resource_version().unwrap_or_default()
                }
                _ => return Ok(None),
            },
        };
        let mut patch = patch.clone();
        patch["metadata"] = serde_json::json!({ "resourceVersion": at });
        match merge_status(api, &namespace, &name, &patch).await {
            Ok(written) => return Ok(Some(written)),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(kube::Error::Api(status)) if status.code == 409 && conflicts < CONFLICTS_RETRIED => {
                conflicts += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Sends `patch` (a JSON merge patch with a `status` field) to the status of
/// `namespace/name` through `api`, and records the write for the freshness guard, as every
/// status write of this process must be.
///
/// # Errors
/// The API server's answer when the patch is refused or lost.
pub async fn merge_status<K>(
    api: &Api<K>,
    namespace: &str,
    name: &str,
    patch: &(impl Serialize + Debug),
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let written = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await;
    freshness::record_write::<K, _>(namespace, name, &written);
    if let Ok(written) = &written {
        freshness::keep_answer(written);
    }
    written
}

/// Writes one object's status during one pass. Each write is diffed against what this pass
/// last wrote (the status as stored, before the first), so a field written mid-pass (a step
/// recorded before it is taken) and cleared later in the same pass is removed from the stored
/// status, not left behind by a diff against the stale baseline.
pub struct StatusWriter<'a, K, S> {
    client: &'a Client,
    object: &'a K,
    written: Option<S>,
    /// The object's version after this pass's last write (its own version before the first).
    version: Option<String>,
}

impl<'a, K, S> StatusWriter<'a, K, S>
where
    K: crate::cache::Cacheable,
    S: Serialize + PartialEq + Clone,
{
    /// A writer for `object`, whose status as stored is `stored`.
    pub fn new(client: &'a Client, object: &'a K, stored: Option<&S>) -> Self {
        Self {
            client,
            object,
            written: stored.cloned(),
            version: object.meta().resource_version.clone(),
        }
    }

    /// Writes `desired` unless it equals what is stored; returns whether a write was made.
    ///
    /// # Errors
    /// As [`write_status`]; after an error the baseline is unchanged.
    pub async fn write(&mut self, desired: &S) -> Result<bool, Error> {
        let written = write_status_at(
            self.client,
            self.object,
            self.version.clone(),
            self.written.as_ref(),
            desired,
        )
        .await?;
        let Some(written) = written else {
            return Ok(false);
        };
        self.version = written.resource_version();
        self.written = Some(desired.clone());
        Ok(true)
    }
}

/// The API of `object`'s kind in its namespace, with its kind and name for error messages.
fn api_of<K>(client: &Client, object: &K) -> Result<(Api<K>, String, String), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    let kind = K::kind(&()).to_string();
    let namespace = object.namespace().ok_or_else(|| Error::MissingField {
        kind: kind.clone(),
        field: "metadata.namespace",
    })?;
    Ok((
        Api::namespaced(client.clone(), &namespace),
        kind,
        object.name_any(),
    ))
}

/// The JSON merge patch (RFC 7386) that turns `current` into `desired`: fields that `desired`
/// leaves out are sent as `null`, so a field cleared in code (a step no longer in flight) is
/// removed from the stored status rather than silently kept.
pub fn merge_patch(current: &serde_json::Value, desired: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (current, desired) {
        (Value::Object(current), Value::Object(desired)) => {
            let mut patch = serde_json::Map::new();
            for (key, value) in desired {
                let entry = match current.get(key) {
                    Some(old) => merge_patch(old, value),
                    None => value.clone(),
                };
                patch.insert(key.clone(), entry);
            }
            for key in current.keys().filter(|k| !desired.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => desired.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};

    use super::{failing_since_heard, merge_patch};
    use crate::availability::health::Health;

    #[test]
    fn a_failure_first_seen_late_is_dated_from_when_it_was_heard() {
        let at = |seconds: i64| Timestamp::from_second(seconds).unwrap();
        let unknown = Health::Unknown("connection refused".into());
        // (previous, health, heard, expected)
        let rows = [
            (None, &unknown, Some(at(100)), Some(at(100))),
            (None, &unknown, None, Some(at(105))),
            // A failure seen before goes on from when it was first seen.
            (Some(at(90)), &unknown, Some(at(100)), Some(at(90))),
            // Never after this pass's own sight of it.
            (None, &unknown, Some(at(110)), Some(at(105))),
            (None, &Health::Healthy, Some(at(100)), None),
        ];
        for (previous, health, heard, expected) in rows {
            assert_eq!(
                failing_since_heard(previous.map(Time).as_ref(), health, heard, at(105)).map(|t| t.0),
                expected,
                "{previous:?} {health:?} {heard:?}"
            );
        }
    }

    #[test]
    fn fields_left_out_are_removed_and_nested_objects_are_patched() {
        let current = json!({"inFlight": {"action": "Remove"}, "replicas": 3, "last": {"a": 1, "b": 2}, "list": [1, 2]});
        let desired = json!({"replicas": 4, "last": {"a": 1}, "list": [1]});
        assert_eq!(
            merge_patch(&current, &desired),
            json!({"inFlight": null, "replicas": 4, "last": {"a": 1, "b": null}, "list": [1]})
        );
    }
}

#[cfg(test)]
mod answered {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher;

    use super::*;

    const NAMESPACE: &str = "status-test";

    fn map(name: &str, version: &str) -> ConfigMap {
        freshness::config_map(NAMESPACE, name, &format!("{name}-uid"), Some(version))
    }

    /// The watch delivering `object`, as soon as the test's task waits.
    fn delivered_later(object: ConfigMap) {
        tokio::spawn(async move { freshness::observe(&Ok(watcher::Event::Apply(object))) });
    }

    fn status_written(object: &ConfigMap) {
        freshness::record_write::<ConfigMap, _>(NAMESPACE, &object.name_any(), &Ok(object.clone()));
        freshness::keep_answer(object);
    }

    #[tokio::test]
    async fn a_pass_behind_its_own_status_write_waits_for_the_watch_and_reads_nothing() {
        let client = freshness::unreachable_client();
        let name = "behind-its-write";
        freshness::observe(&Ok(watcher::Event::Apply(map(name, "1"))));
        status_written(&map(name, "2"));
        delivered_later(map(name, "2"));
        let current = current(&client, &map(name, "1"))
            .await
            .expect("no read: the write's answer is the watch's copy once delivered")
            .expect("the object");
        assert_eq!(current.metadata.resource_version.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn a_pass_reads_the_object_when_the_watch_delivers_another_version_or_nothing() {
        let client = freshness::unreachable_client();
        // Someone else's write delivered after this process's: the answer is not the newest.
        let name = "overtaken";
        status_written(&map(name, "2"));
        freshness::observe(&Ok(watcher::Event::Apply(map(name, "2"))));
        delivered_later(map(name, "3"));
        freshness::observe(&Ok(watcher::Event::Apply(map(name, "3"))));
        assert!(current(&client, &map(name, "1")).await.is_err(), "read");
        // Never delivered in time.
        let name = "never-delivered";
        status_written(&map(name, "2"));
        assert!(current(&client, &map(name, "1")).await.is_err(), "read");
        // A version only read is not waited for.
        let name = "only-read";
        freshness::record(&map(name, "2"));
        assert!(current(&client, &map(name, "1")).await.is_err(), "read");
    }
}
