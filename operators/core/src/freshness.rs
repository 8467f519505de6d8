//! Which copy of an object this process may decide on without asking the API server again.
//!
//! A watch cache's copy lags the API server by a moment. Most of that lag is harmless: what
//! someone else changed arrives a moment later and wakes another pass. What is not harmless is
//! this process's own last write missing from the copy: a pass would decide on the state before
//! its own step (record a step again, see a replaced pod as the old one). So every write this
//! process makes to an object, and every fresh read of one, records the `resourceVersion` the API
//! server returned; a cached copy at another version is not used, and the object is read.
//!
//! The record is process-wide, not per controller: every write to the objects the operators
//! decide on (their status, their children, their pods) goes through the core helpers that
//! record it, whichever controller makes it, so a copy that matches the record holds every write
//! of this process.

use std::{
    collections::HashMap,
    sync::{LazyLock, Mutex},
};

use kube::Resource;

/// Kind, namespace and name.
type Key = (String, String, String);

/// The version an object was last known at: written or read by this process.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Known {
    At(String),
    /// Deleted by this process: a cached copy of it is stale, whatever its version.
    Deleted,
}

static KNOWN: LazyLock<Mutex<HashMap<Key, Known>>> = LazyLock::new(Mutex::default);

fn key<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) -> Key {
    (K::kind(&()).to_string(), namespace.to_string(), name.to_string())
}

fn set(key: Key, known: Option<Known>) {
    if let Ok(mut table) = KNOWN.lock() {
        match known {
            Some(known) => table.insert(key, known),
            None => table.remove(&key),
        };
    }
}

/// Records `object` as the API server returned it from a write or a read: the newest version
/// this process knows of.
pub fn record<K: Resource<DynamicType = ()>>(object: &K) {
    let meta = object.meta();
    let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return;
    };
    // A version the API server did not return tells nothing: any cached copy may be stale.
    let known = meta
        .resource_version
        .clone()
        .map(Known::At)
        .unwrap_or(Known::Deleted);
    set(key::<K>(namespace, name), Some(known));
}

/// Records the version `version` of `namespace/name` (of kind `K`) returned by a write or read
/// of it in another shape (its metadata only, or as a dynamic object).
pub fn record_version<K: Resource<DynamicType = ()>>(namespace: &str, name: &str, version: Option<&str>) {
    let known = version
        .map(|version| Known::At(version.to_string()))
        .unwrap_or(Known::Deleted);
    set(key::<K>(namespace, name), Some(known));
}

/// Records that this process wrote to the object at a version it did not see (a write whose
/// answer carries no object): no cached copy of it is current until it is read again.
pub fn record_unseen<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) {
    set(key::<K>(namespace, name), Some(Known::Deleted));
}

/// Records that this process deleted the object (or asked to).
pub fn record_deleted<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) {
    set(key::<K>(namespace, name), Some(Known::Deleted));
}

/// Forgets the object (it is gone, and so is what was kept for it).
pub fn forget<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) {
    set(key::<K>(namespace, name), None);
}

/// What this process knows of a copy of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Currency {
    /// The copy is at the version this process last wrote or read.
    Current,
    /// This process wrote or read another version, or deleted the object: the copy may lack a
    /// write of this process.
    Stale,
    /// This process has neither written nor read the object.
    Unrecorded,
}

/// Whether `copy` holds every write this process made to the object.
pub fn currency<K: Resource<DynamicType = ()>>(copy: &K) -> Currency {
    let meta = copy.meta();
    let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return Currency::Stale;
    };
    let Ok(table) = KNOWN.lock() else {
        return Currency::Stale;
    };
    match table.get(&key::<K>(namespace, name)) {
        None => Currency::Unrecorded,
        Some(Known::At(version)) if meta.resource_version.as_ref() == Some(version) => Currency::Current,
        Some(_) => Currency::Stale,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn map(name: &str, version: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("freshness-test".into()),
                resource_version: version.map(Into::into),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_copy_is_current_only_at_the_version_last_written_or_read() {
        let name = "current-only-at-the-last-version";
        assert_eq!(currency(&map(name, Some("1"))), Currency::Unrecorded);
        record(&map(name, Some("2")));
        assert_eq!(
            currency(&map(name, Some("1"))),
            Currency::Stale,
            "older than the write"
        );
        assert_eq!(currency(&map(name, Some("2"))), Currency::Current);
        assert_eq!(
            currency(&map(name, Some("3"))),
            Currency::Stale,
            "written by someone else"
        );
        record(&map(name, Some("3")));
        assert_eq!(currency(&map(name, Some("3"))), Currency::Current, "then read");
    }

    #[test]
    fn no_copy_of_a_deleted_or_unseen_object_is_current() {
        let name = "deleted-or-unseen";
        record(&map(name, Some("4")));
        record_deleted::<ConfigMap>("freshness-test", name);
        assert_eq!(currency(&map(name, Some("4"))), Currency::Stale);
        record(&map(name, Some("5")));
        record_unseen::<ConfigMap>("freshness-test", name);
        assert_eq!(currency(&map(name, Some("5"))), Currency::Stale);
        record(&map(name, None));
        assert_eq!(
            currency(&map(name, None)),
            Currency::Stale,
            "no version, no trust"
        );
        forget::<ConfigMap>("freshness-test", name);
        assert_eq!(currency(&map(name, Some("5"))), Currency::Unrecorded);
    }
}
