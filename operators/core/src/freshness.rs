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
//! - a copy of an object this process deleted is stale until the watch delivers the deletion;
//! - when what this process made of the object is not known (a write whose answer was lost, two
//!   answers awaited at once whose order the opaque versions do not tell), no copy is current
//!   until it reads the object again.
//!
//! A pass that starts before the watch delivered its predecessor's write waits for it a moment
//! ([`after_own_write`]) instead of reading the object again: the watch delivers within
//! milliseconds. A status write's answer is kept a moment too ([`answer`]), for the pass that
//! holds the copy from before it: once the watch has delivered exactly that version, the answer
//! is what the watch's copy now is. When the watch does not deliver in time, or delivers
//! another version first, the object is read as before.
//!
//! The record is process-wide, not per controller: every write to the objects the operators
//! decide on (their status, their children, their pods) goes through the core helpers that
//! record it, whichever controller makes it, so a current copy holds every write of this process.

use std::{
    any::Any,
    collections::{HashMap, VecDeque},
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use kube::{Resource, runtime::watcher};

/// Kind, namespace and name.
type Key = (String, String, String);

/// What this process knows of one object's versions.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Known {
    /// Written or read at `version` (the object with `uid`), which the watch has not delivered
    /// yet; `delivered` is the newest version it did deliver meanwhile.
    Awaiting {
        version: String,
        uid: Option<String>,
        delivered: Option<String>,
        /// Whether this process wrote that version (a version it only read is not waited for:
        /// an object no watch holds is read, and never delivered).
        written: bool,
    },
    /// What this process last made of the object is not known: a write whose answer was lost
    /// (it may have been made), two answers recorded in an order that may not be theirs, a
    /// deletion of the object with `uid` asked for. No copy is current until this process
    /// reads it again or the watch delivers that deletion.
    Unknown { uid: Option<String> },
    /// The watch has delivered what this process last knew: the newest version it delivered
    /// since (`None`: the object is gone).
    Delivered(Option<String>),
}

static KNOWN: LazyLock<Mutex<HashMap<Key, Known>>> = LazyLock::new(Mutex::default);

/// The versions of each watched object the watches delivered last (its uid, then the versions,
/// the newest last): a write whose answer is recorded after the watch delivered it, and a
/// change someone else made after it, is known to be delivered all the same.
static RECENT: LazyLock<Mutex<HashMap<Key, Delivered>>> = LazyLock::new(Mutex::default);

/// The uids of the objects whose deletion a watch delivered or saw begin (a deletion
/// timestamp), the newest last, [`DELETED_KEPT`] at most.
static DELETED: LazyLock<Mutex<VecDeque<String>>> = LazyLock::new(Mutex::default);

/// How many deleted uids [`DELETED`] keeps: far more than the objects deleted during one pass.
const DELETED_KEPT: usize = 4096;

/// Whether a watch delivered the deletion of the object with `uid`, or saw it begin.
pub fn is_deleted(uid: &str) -> bool {
    DELETED
        .lock()
        .is_ok_and(|deleted| deleted.iter().any(|gone| gone == uid))
}

/// An object's uid and the versions of it a watch delivered last, the newest last.
type Delivered = (Option<String>, VecDeque<String>);

/// How many delivered versions of an object [`RECENT`] keeps.
const RECENT_VERSIONS: usize = 4;

/// The newest version the watch delivered of the object with `uid` at `key`, when it
/// delivered `version` lately.
fn delivered_lately(key: &Key, uid: Option<&str>, version: &str) -> Option<String> {
    let recent = RECENT.lock().ok()?;
    let (delivered_uid, versions) = recent.get(key)?;
    let same_object = uid.is_none() || delivered_uid.is_none() || delivered_uid.as_deref() == uid;
    (same_object && versions.iter().any(|delivered| delivered == version))
        .then(|| versions.back().cloned())
        .flatten()
}

/// Woken whenever a watch delivers a version this process awaited.
static DELIVERIES: LazyLock<tokio::sync::Notify> = LazyLock::new(tokio::sync::Notify::new);

/// A status write's answer: when it came, its version, the object.
type Answer = (Instant, String, Arc<dyn Any + Send + Sync>);

/// The answers of this process's status writes, kept [`ANSWER_FOR`].
static ANSWERS: LazyLock<Mutex<HashMap<Key, Answer>>> = LazyLock::new(Mutex::default);

/// How long a status write's answer is kept for the pass that started before it was delivered.
const ANSWER_FOR: Duration = Duration::from_secs(5);

/// How long a pass waits for the watch to deliver this process's own write before it reads the
/// object from the API server instead.
const DELIVERY_WAIT: Duration = Duration::from_secs(1);

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

/// Records that this process wrote or read `namespace/name` (of kind `K`, the object with
/// `uid`) at `version` (`None`: an answer without one, which tells nothing).
pub fn record_version<K: Resource<DynamicType = ()>>(
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    version: Option<&str>,
) {
    record_known::<K>(namespace, name, uid, version, false);
}

/// As [`record_version`], saying whether this process wrote that version.
fn record_known<K: Resource<DynamicType = ()>>(
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    version: Option<&str>,
    written: bool,
) {
    let key = key::<K>(namespace, name);
    let lately = version.and_then(|version| delivered_lately(&key, uid, version));
    let uid = uid.map(str::to_string);
    update(key, |known| {
        let Some(version) = version else {
            return Some(Known::Unknown { uid });
        };
        Some(match known {
            // Delivered (and maybe changed by someone else since) before the answer was
            // recorded, with no other answer of this process awaited: the watch is past it.
            Some(Known::Delivered(_)) | None if lately.is_some() => Known::Delivered(lately),
            Some(Known::Awaiting {
                version: awaited,
                uid: awaited_uid,
                delivered,
                written: awaited_written,
            }) if awaited == version => Known::Awaiting {
                version: version.to_string(),
                uid: awaited_uid.clone(),
                delivered: delivered.clone(),
                written: written || *awaited_written,
            },
            // Another answer awaited too: two writes (or a write and a read) whose order this
            // process cannot tell from their versions (opaque strings).
            Some(Known::Awaiting { .. }) => Known::Unknown { uid },
            // Delivered before the answer was recorded: the watch is already past it.
            Some(Known::Delivered(delivered)) if delivered.as_deref() == Some(version) => {
                Known::Delivered(delivered.clone())
            }
            Some(Known::Delivered(delivered)) => Known::Awaiting {
                version: version.to_string(),
                uid,
                delivered: delivered.clone(),
                written,
            },
            Some(Known::Unknown { .. }) | None => Known::Awaiting {
                version: version.to_string(),
                uid,
                delivered: None,
                written,
            },
        })
    });
}

/// Records `object` as the API server returned it from a write or a read.
pub fn record<K: Resource<DynamicType = ()>>(object: &K) {
    let meta = object.meta();
    if let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) {
        record_version::<K>(
            namespace,
            name,
            meta.uid.as_deref(),
            meta.resource_version.as_deref(),
        );
    }
}

/// Records the outcome of a write of `namespace/name`: its answer when it was made, nothing
/// when the API server refused it outright (nothing was written), and an unknown state when
/// the answer was lost (a timeout, a broken connection, a server error: it may have been made).
pub fn record_write<K: Resource<DynamicType = ()>, R: Resource>(
    namespace: &str,
    name: &str,
    outcome: &Result<R, kube::Error>,
) {
    match outcome {
        Ok(written) => record_known::<K>(
            namespace,
            name,
            written.meta().uid.as_deref(),
            written.meta().resource_version.as_deref(),
            true,
        ),
        Err(kube::Error::Api(status)) if [400, 401, 403, 404, 409, 410, 422, 429].contains(&status.code) => {}
        Err(_) => update(key::<K>(namespace, name), |_| Some(Known::Unknown { uid: None })),
    }
}

/// Records that this process is deleting the object with `uid` (before it asks: a deletion
/// delivered by the watch before this record would otherwise be missed).
pub fn record_deleted<K: Resource<DynamicType = ()>>(namespace: &str, name: &str, uid: Option<&str>) {
    let uid = uid.map(str::to_string);
    update(key::<K>(namespace, name), |_| Some(Known::Unknown { uid }));
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
    if let Some(uid) = meta.uid.as_ref()
        && (deleted || meta.deletion_timestamp.is_some())
        && let Ok(mut gone) = DELETED.lock()
        && !gone.contains(uid)
    {
        if gone.len() == DELETED_KEPT {
            gone.pop_front();
        }
        gone.push_back(uid.clone());
    }
    let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return;
    };
    let key = key::<K>(namespace, name);
    if let Ok(mut recent) = RECENT.lock() {
        match (deleted, meta.resource_version.clone()) {
            (false, Some(version)) => {
                let (uid, versions) = recent.entry(key.clone()).or_default();
                if *uid != meta.uid {
                    *uid = meta.uid.clone();
                    versions.clear();
                }
                if versions.len() == RECENT_VERSIONS {
                    versions.pop_front();
                }
                versions.push_back(version);
            }
            _ => {
                if recent
                    .get(&key)
                    .is_some_and(|(uid, _)| meta.uid.is_none() || *uid == meta.uid)
                {
                    recent.remove(&key);
                }
            }
        }
    }
    let Ok(mut table) = KNOWN.lock() else {
        return;
    };
    let Some(known) = table.get_mut(&key) else {
        return;
    };
    let delivered = if deleted {
        None
    } else {
        meta.resource_version.clone()
    };
    // While something of this process is awaited, only news of that object counts: the
    // deletion of an older object under the name, delivered late, says nothing of it.
    let other_object =
        |awaited: &Option<String>| awaited.is_some() && meta.uid.is_some() && awaited != &meta.uid;
    *known = match known {
        Known::Awaiting { uid, .. } | Known::Unknown { uid } if other_object(uid) => return,
        Known::Awaiting {
            version,
            uid,
            written,
            ..
        } if !deleted && delivered.as_ref() != Some(version) => Known::Awaiting {
            version: version.clone(),
            uid: uid.clone(),
            delivered,
            written: *written,
        },
        // Until the deletion (or a read): an update of the object is no news of what this
        // process made of it.
        Known::Unknown { .. } if !deleted => return,
        _ => Known::Delivered(delivered),
    };
    if matches!(known, Known::Delivered(_)) {
        DELIVERIES.notify_waiters();
    }
}

/// Keeps `written`, the answer to a status write of this process, for [`answer`].
pub fn keep_answer<K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static>(written: &K) {
    let meta = written.meta();
    let (Some(namespace), Some(name), Some(version)) = (
        meta.namespace.as_deref(),
        meta.name.as_deref(),
        meta.resource_version.clone(),
    ) else {
        return;
    };
    if let Ok(mut answers) = ANSWERS.lock() {
        answers.retain(|_, (at, _, _)| at.elapsed() < ANSWER_FOR);
        answers.insert(
            key::<K>(namespace, name),
            (Instant::now(), version, Arc::new(written.clone())),
        );
    }
}

/// Whether this process awaits the watch's delivery of its own write of `namespace/name`.
pub fn is_awaited<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) -> bool {
    KNOWN.lock().is_ok_and(|table| {
        matches!(
            table.get(&key::<K>(namespace, name)),
            Some(Known::Awaiting { written: true, .. })
        )
    })
}

/// The answer to this process's last status write of `namespace/name`, once the watch has
/// delivered exactly that version and nothing after it: then it is the newest copy there is to
/// decide on, as the watch's own copy would be.
pub fn answer<K: Resource<DynamicType = ()> + Send + Sync + 'static>(
    namespace: &str,
    name: &str,
) -> Option<Arc<K>> {
    let key = key::<K>(namespace, name);
    let delivered = match KNOWN.lock().ok()?.get(&key)? {
        Known::Delivered(Some(version)) => version.clone(),
        _ => return None,
    };
    let answers = ANSWERS.lock().ok()?;
    let (at, version, object) = answers.get(&key)?;
    (at.elapsed() < ANSWER_FOR && *version == delivered)
        .then(|| object.clone().downcast::<K>().ok())
        .flatten()
}

/// What `found` finds once the watch has delivered this process's own write of
/// `namespace/name` (kind `K`), trying it each time a watch delivers a version this process
/// awaited, for at most [`DELIVERY_WAIT`]; `None` at once when no write of it is awaited, and
/// when the watch delivered something else or nothing in time (then only the API server can
/// tell).
pub async fn after_own_write<K: Resource<DynamicType = ()>, T>(
    namespace: &str,
    name: &str,
    mut found: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + DELIVERY_WAIT;
    loop {
        // Listening before looking, so a delivery between the two is not missed.
        let delivery = DELIVERIES.notified();
        tokio::pin!(delivery);
        delivery.as_mut().enable();
        let awaited = is_awaited::<K>(namespace, name);
        if let Some(found) = found() {
            return Some(found);
        }
        if !awaited || tokio::time::timeout_at(deadline, delivery).await.is_err() {
            return None;
        }
    }
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
        Some(Known::Unknown { .. }) => None,
    };
    match (newest, meta.resource_version.as_ref()) {
        (Some(newest), Some(version)) if newest == version => Currency::Current,
        _ => Currency::Stale,
    }
}

/// A client whose every request fails (nothing listens on the discard port), for tests that
/// show a lookup made no request: one would fail.
#[cfg(test)]
pub(crate) fn unreachable_client() -> kube::Client {
    crate::install_crypto_provider();
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
    kube::Client::try_from(config).expect("a client")
}

/// The config map `namespace/name` of uid `uid` at `version`, labelled as the operator's
/// caches select (`app=quorum`): the object the tests of what a pass reads and waits for use.
#[cfg(test)]
pub(crate) fn config_map(
    namespace: &str,
    name: &str,
    uid: &str,
    version: Option<&str>,
) -> k8s_openapi::api::core::v1::ConfigMap {
    k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: Some(uid.into()),
            resource_version: version.map(Into::into),
            labels: Some(std::collections::BTreeMap::from([(
                "app".into(),
                "quorum".into(),
            )])),
            ..kube::api::ObjectMeta::default()
        },
        ..k8s_openapi::api::core::v1::ConfigMap::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    const NAMESPACE: &str = "freshness-test";

    fn map_of(name: &str, uid: &str, version: Option<&str>) -> ConfigMap {
        config_map(NAMESPACE, name, uid, version)
    }

    fn map(name: &str, version: Option<&str>) -> ConfigMap {
        map_of(name, "first", version)
    }

    fn delivered(name: &str, version: &str) {
        observe(&Ok(watcher::Event::Apply(map(name, Some(version)))));
    }

    fn deleted(name: &str, uid: &str, version: &str) {
        observe(&Ok(watcher::Event::Delete(map_of(name, uid, Some(version)))));
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
    fn a_write_delivered_and_changed_again_before_its_answer_was_recorded_is_not_awaited() {
        let name = "overtaken-before-recorded";
        record(&map(name, Some("1")));
        delivered(name, "1");
        // The watch delivers this process's write (2) and someone else's change after it (3)
        // before the answer of the write is recorded.
        delivered(name, "2");
        delivered(name, "3");
        record_write::<ConfigMap, _>(NAMESPACE, name, &Ok(map(name, Some("2"))));
        assert!(!is_awaited::<ConfigMap>(NAMESPACE, name));
        assert_eq!(currency(&map(name, Some("3"))), Currency::Current);
        // An object created by this process, delivered and changed before the answer came.
        let name = "created-and-changed";
        delivered(name, "7");
        delivered(name, "8");
        record_write::<ConfigMap, _>(NAMESPACE, name, &Ok(map(name, Some("7"))));
        assert_eq!(currency(&map(name, Some("8"))), Currency::Current);
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
    fn two_answers_awaited_at_once_make_no_copy_current_until_a_read() {
        // The backup controller's write (10) is recorded after the pass's later one (11), and
        // the watch delivers 10 in between: 10 must not pass for the newest.
        let name = "two-answers";
        record(&map(name, Some("11")));
        delivered(name, "10");
        record(&map(name, Some("10")));
        assert_eq!(currency(&map(name, Some("10"))), Currency::Stale);
        delivered(name, "11");
        assert_eq!(currency(&map(name, Some("11"))), Currency::Stale, "until read");
        record(&map(name, Some("11")));
        assert_eq!(currency(&map(name, Some("11"))), Currency::Current);
    }

    #[test]
    fn a_write_whose_answer_was_lost_makes_no_copy_current_until_a_read() {
        let name = "lost-answer";
        record(&map(name, Some("4")));
        delivered(name, "4");
        let lost: Result<ConfigMap, kube::Error> = Err(kube::Error::Service("timed out".into()));
        record_write::<ConfigMap, _>(NAMESPACE, name, &lost);
        assert_eq!(
            currency(&map(name, Some("4"))),
            Currency::Stale,
            "it may have been made"
        );
        delivered(name, "5");
        assert_eq!(currency(&map(name, Some("5"))), Currency::Stale);
        record(&map(name, Some("5")));
        assert_eq!(currency(&map(name, Some("5"))), Currency::Current);
        // A write refused outright wrote nothing.
        let refused: Result<ConfigMap, kube::Error> = Err(kube::Error::Api(
            kube::core::Status::failure("conflict", "Conflict")
                .with_code(409)
                .boxed(),
        ));
        record_write::<ConfigMap, _>(NAMESPACE, name, &refused);
        assert_eq!(currency(&map(name, Some("5"))), Currency::Current);
    }

    #[test]
    fn no_copy_of_an_object_being_deleted_is_current_until_the_deletion_is_delivered() {
        let name = "deleted";
        record(&map(name, Some("4")));
        record_deleted::<ConfigMap>(NAMESPACE, name, Some("first"));
        assert_eq!(currency(&map(name, Some("4"))), Currency::Stale);
        delivered(name, "5");
        assert_eq!(
            currency(&map(name, Some("5"))),
            Currency::Stale,
            "not the deletion"
        );
        deleted(name, "first", "6");
        assert_eq!(currency(&map(name, Some("6"))), Currency::Stale, "gone");
        // The object created again under its name, by someone else.
        observe(&Ok(watcher::Event::Apply(map_of(name, "second", Some("7")))));
        assert_eq!(currency(&map_of(name, "second", Some("7"))), Currency::Current);
        forget::<ConfigMap>(NAMESPACE, name);
        assert_eq!(currency(&map(name, Some("7"))), Currency::Unrecorded);
    }

    #[test]
    fn the_late_deletion_of_an_older_object_under_the_name_says_nothing_of_the_new_one() {
        let name = "late-deletion";
        record(&map_of(name, "new", Some("201")));
        deleted(name, "old", "199");
        observe(&Ok(watcher::Event::Apply(map_of(name, "new", Some("200")))));
        assert_eq!(
            currency(&map_of(name, "new", Some("200"))),
            Currency::Stale,
            "the write at 201 is still awaited"
        );
        observe(&Ok(watcher::Event::Apply(map_of(name, "new", Some("201")))));
        assert_eq!(currency(&map_of(name, "new", Some("201"))), Currency::Current);
    }

    #[test]
    fn an_answer_without_a_version_makes_no_copy_current() {
        let name = "no-version";
        record(&map(name, None));
        assert_eq!(currency(&map(name, None)), Currency::Stale);
        assert_eq!(currency(&map(name, Some("1"))), Currency::Stale);
    }
}
