//! Which copy of an object this process may decide on without asking the API server again.
//!
//! A watch cache's copy lags the API server by a moment. Most of that lag is harmless: what
//! someone else changed arrives a moment later and wakes another pass. What is not harmless is
//! this process's own last write missing from the copy: a pass would decide on the state before
//! its own step (record a step again, see a replaced pod as the old one). So every write this
//! process makes to an object, and every fresh read of one, records the `resourceVersion` the API
//! server returned, and the watches report what they deliver ([`observe`]):
//!
//! - until the watch delivers the version recorded, only a copy at exactly that version is
//!   current;
//! - once it has, the watch is past every write of this process, and a copy at the newest
//!   version it delivered since is current (what others changed after, the StatefulSet
//!   controller updating a status, needs no read);
//! - a copy of an object this process deleted is stale until the watch delivers the deletion.
//!
//! The record is process-wide, not per controller: every write to the objects the operators
//! decide on (their status, their children, their pods) goes through the core helpers that
//! record it, whichever controller makes it, so a current copy holds every write of this process.

use std::{
    collections::HashMap,
    sync::{LazyLock, Mutex},
};

use kube::{Resource, runtime::watcher};

/// Kind, namespace and name.
type Key = (String, String, String);

/// What this process knows of one object's versions.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Known {
    /// Written or read at `version`, which the watch has not delivered yet; `delivered` is the
    /// newest version it did deliver meanwhile.
    Awaiting {
        version: String,
        delivered: Option<String>,
    },
    /// Deleted by this process (or written without seeing the version); the watch has not
    /// delivered the deletion yet.
    AwaitingDeletion,
    /// The watch has delivered what this process last knew: the newest version it delivered
    /// since (`None`: the object is gone).
    Delivered(Option<String>),
}

static KNOWN: LazyLock<Mutex<HashMap<Key, Known>>> = LazyLock::new(Mutex::default);

fn key<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) -> Key {
    (K::kind(&()).to_string(), namespace.to_string(), name.to_string())
}

fn update(key: Key, change: impl FnOnce(Option<&Known>) -> Option<Known>) {
    if let Ok(mut table) = KNOWN.lock() {
        match change(table.get(&key)) {
            Some(known) => table.insert(key, known),
            None => table.remove(&key),
        };
    }
}

/// Records that this process wrote or read `namespace/name` (of kind `K`) at `version` (`None`:
/// an answer without one, which tells nothing: no copy is current until the watch delivers a
/// deletion or this process reads it again).
pub fn record_version<K: Resource<DynamicType = ()>>(namespace: &str, name: &str, version: Option<&str>) {
    update(key::<K>(namespace, name), |known| {
        let Some(version) = version else {
            return Some(Known::AwaitingDeletion);
        };
        let delivered = match known {
            Some(Known::Awaiting { delivered, .. }) => delivered.clone(),
            Some(Known::Delivered(delivered)) => delivered.clone(),
            _ => None,
        };
        // Delivered before the answer was recorded: the watch is already past it.
        Some(if delivered.as_deref() == Some(version) {
            Known::Delivered(delivered)
        } else {
            Known::Awaiting {
                version: version.to_string(),
                delivered,
            }
        })
    });
}

/// Records `object` as the API server returned it from a write or a read.
pub fn record<K: Resource<DynamicType = ()>>(object: &K) {
    let meta = object.meta();
    if let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) {
        record_version::<K>(namespace, name, meta.resource_version.as_deref());
    }
}

/// Records that this process is deleting the object (before it asks: a deletion delivered by
/// the watch before this record would otherwise be missed).
pub fn record_deleted<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) {
    update(key::<K>(namespace, name), |_| Some(Known::AwaitingDeletion));
}

/// Forgets the object (it is gone, and so is what was kept for it).
pub fn forget<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) {
    update(key::<K>(namespace, name), |_| None);
}

/// Takes note of what a watch delivered, for the objects this process wrote or read.
pub fn observe<K: Resource<DynamicType = ()>>(event: &Result<watcher::Event<K>, watcher::Error>) {
    let (object, deleted) = match event {
        Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => (object, false),
        Ok(watcher::Event::Delete(object)) => (object, true),
        _ => return,
    };
    let meta = object.meta();
    let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return;
    };
    let Ok(mut table) = KNOWN.lock() else {
        return;
    };
    let Some(known) = table.get_mut(&key::<K>(namespace, name)) else {
        return;
    };
    let delivered = if deleted {
        None
    } else {
        meta.resource_version.clone()
    };
    *known = match known {
        Known::Awaiting { version, .. } if !deleted && delivered.as_ref() != Some(version) => {
            Known::Awaiting {
                version: version.clone(),
                delivered,
            }
        }
        // An update after a deletion of this process is another object under the name, which
        // arrives only after the deletion itself.
        Known::AwaitingDeletion if !deleted => Known::AwaitingDeletion,
        _ => Known::Delivered(delivered),
    };
}

/// What this process knows of a copy of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Currency {
    /// The copy holds every write of this process and is the newest version it knows of.
    Current,
    /// The copy may lack a write of this process, or is older than a version it knows of.
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
    let newest = match table.get(&key::<K>(namespace, name)) {
        None => return Currency::Unrecorded,
        Some(Known::Awaiting { version, .. }) => Some(version),
        Some(Known::Delivered(delivered)) => delivered.as_ref(),
        Some(Known::AwaitingDeletion) => None,
    };
    match (newest, meta.resource_version.as_ref()) {
        (Some(newest), Some(version)) if newest == version => Currency::Current,
        _ => Currency::Stale,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    const NAMESPACE: &str = "freshness-test";

    fn map(name: &str, version: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NAMESPACE.into()),
                resource_version: version.map(Into::into),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn delivered(name: &str, version: &str) {
        observe(&Ok(watcher::Event::Apply(map(name, Some(version)))));
    }

    fn deleted(name: &str, version: &str) {
        observe(&Ok(watcher::Event::Delete(map(name, Some(version)))));
    }

    #[test]
    fn until_the_watch_delivers_a_write_only_a_copy_at_its_version_is_current() {
        let name = "until-delivered";
        assert_eq!(currency(&map(name, Some("1"))), Currency::Unrecorded);
        delivered(name, "1");
        assert_eq!(
            currency(&map(name, Some("1"))),
            Currency::Unrecorded,
            "watches note only objects this process wrote or read"
        );
        record(&map(name, Some("2")));
        assert_eq!(
            currency(&map(name, Some("1"))),
            Currency::Stale,
            "older than the write"
        );
        assert_eq!(currency(&map(name, Some("2"))), Currency::Current);
        assert_eq!(currency(&map(name, Some("3"))), Currency::Stale, "not known yet");
    }

    #[test]
    fn once_the_watch_delivered_the_write_its_newest_delivery_is_current() {
        let name = "after-delivery";
        record(&map(name, Some("2")));
        delivered(name, "2");
        assert_eq!(currency(&map(name, Some("2"))), Currency::Current);
        // Someone else's change, delivered: no read needed.
        delivered(name, "3");
        assert_eq!(currency(&map(name, Some("3"))), Currency::Current);
        assert_eq!(
            currency(&map(name, Some("2"))),
            Currency::Stale,
            "behind the watch"
        );
        // The next write of this process waits for its own delivery again.
        record(&map(name, Some("4")));
        assert_eq!(currency(&map(name, Some("3"))), Currency::Stale);
        assert_eq!(currency(&map(name, Some("4"))), Currency::Current);
    }

    #[test]
    fn a_write_the_watch_delivered_before_it_was_recorded_is_not_awaited() {
        let name = "delivered-first";
        record(&map(name, Some("5")));
        delivered(name, "5");
        delivered(name, "6");
        record(&map(name, Some("6")));
        delivered(name, "7");
        assert_eq!(currency(&map(name, Some("7"))), Currency::Current);
    }

    #[test]
    fn no_copy_of_an_object_being_deleted_is_current_until_the_deletion_is_delivered() {
        let name = "deleted";
        record(&map(name, Some("4")));
        record_deleted::<ConfigMap>(NAMESPACE, name);
        assert_eq!(currency(&map(name, Some("4"))), Currency::Stale);
        delivered(name, "5");
        assert_eq!(
            currency(&map(name, Some("5"))),
            Currency::Stale,
            "not the deletion"
        );
        deleted(name, "6");
        assert_eq!(currency(&map(name, Some("6"))), Currency::Stale, "gone");
        // The object created again under its name, by someone else.
        delivered(name, "7");
        assert_eq!(currency(&map(name, Some("7"))), Currency::Current);
        forget::<ConfigMap>(NAMESPACE, name);
        assert_eq!(currency(&map(name, Some("7"))), Currency::Unrecorded);
    }

    #[test]
    fn an_answer_without_a_version_makes_no_copy_current() {
        let name = "no-version";
        record(&map(name, None));
        assert_eq!(currency(&map(name, None)), Currency::Stale);
        assert_eq!(currency(&map(name, Some("1"))), Currency::Stale);
    }
}
