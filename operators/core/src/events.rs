//! Kubernetes events: one shared recorder per process, so repeated events are folded into a
//! series instead of flooding the API server.
//!
//! A series is one object's events of the same type, reason, action, related object and note.
//! `kube`'s own recorder leaves the note out of its series: within six minutes, a second event
//! with the same reason and another note ("member 4 added" after "member 3 added") only counted
//! the first again, and its words were lost.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::{
    api::{
        core::v1::ObjectReference,
        events::v1::{Event, EventSeries},
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use kube::{
    Api, Client, Resource,
    api::{Patch, PatchParams, PostParams},
};

/// How long a series stays open: an event repeated later starts a new one (as `kube`'s
/// recorder and the API server's own event rate limits keep them).
const SERIES_OPEN_FOR: SignedDuration = SignedDuration::from_mins(6);

/// Publishes events about custom resources. Cheap to clone; clones share one de-duplicating cache.
#[derive(Clone)]
pub struct EventPublisher {
    client: Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<HashMap<SeriesKey, Event>>>,
}

/// What makes two events one series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: [Option<String>; 4],
    related: Option<[Option<String>; 4]>,
    type_: &'static str,
    reason: String,
    action: String,
    note: String,
}

fn reference_key(reference: &ObjectReference) -> [Option<String>; 4] {
    [
        reference.kind.clone(),
        reference.namespace.clone(),
        reference.name.clone(),
        reference.uid.clone(),
    ]
}

/// Whether an event reports normal progress or something a person should look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Normal => "Normal",
            Severity::Warning => "Warning",
        }
    }
}

impl EventPublisher {
    /// A publisher reporting as `controller` (the operator's name) from `instance` (its pod).
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            instance: instance.unwrap_or_else(|| controller.to_string()),
            series: Arc::default(),
        }
    }

    /// Publishes an event about `object`. `reason` comes from the operator's fixed catalogue
    /// (CamelCase); `action` says what the operator did or refused to do.
    ///
    /// Failing to publish is logged and otherwise ignored: an event is a report, and losing one
    /// must never fail the step it reports on.
    pub async fn publish<K>(&self, object: &K, severity: Severity, reason: &str, action: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish_related(object, None, severity, reason, action, note)
            .await;
    }

    /// As [`EventPublisher::publish`], naming a second object the event is about (a member's
    /// pod): one series per pod.
    pub async fn publish_related<K>(
        &self,
        object: &K,
        related: Option<ObjectReference>,
        severity: Severity,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let regarding: ObjectReference = object.object_ref(&());
        if let Err(error) = self
            .record(regarding, related, severity, reason, action, note)
            .await
        {
            tracing::warn!(%error, reason, "could not publish event");
        }
    }

    /// Creates the event, or counts it again in its open series.
    async fn record(
        &self,
        regarding: ObjectReference,
        related: Option<ObjectReference>,
        severity: Severity,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = SeriesKey {
            regarding: reference_key(&regarding),
            related: related.as_ref().map(reference_key),
            type_: severity.as_str(),
            reason: reason.to_string(),
            action: action.to_string(),
            note: note.clone(),
        };
        let open = {
            let mut series = self
                .series
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            series.retain(|_, event| last_seen(event).is_some_and(|seen| seen + SERIES_OPEN_FOR > now));
            series.get(&key).cloned()
        };
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let recorded = match open {
            Some(mut event) => {
                event.series = Some(EventSeries {
                    count: event.series.as_ref().map_or(2, |series| series.count + 1),
                    last_observed_time: MicroTime(now),
                });
                let patch = serde_json::json!({ "series": event.series });
                events
                    .patch(
                        &event.metadata.name.clone().unwrap_or_default(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
                event
            }
            None => {
                let event = Event {
                    metadata: ObjectMeta {
                        namespace: Some(namespace),
                        name: Some(format!(
                            "{}.{:x}",
                            regarding.name.as_deref().unwrap_or(&self.controller),
                            now.as_nanosecond()
                        )),
                        ..ObjectMeta::default()
                    },
                    event_time: Some(MicroTime(now)),
                    action: Some(action.to_string()),
                    reason: Some(reason.to_string()),
                    note: Some(note),
                    type_: Some(severity.as_str().to_string()),
                    regarding: Some(regarding),
                    related,
                    reporting_controller: Some(self.controller.clone()),
                    reporting_instance: Some(self.instance.clone()),
                    ..Event::default()
                };
                events.create(&PostParams::default(), &event).await
            }?,
        };
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, recorded);
        Ok(())
    }
}

/// When an event was last seen: its series' last time, else its own.
fn last_seen(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .map(|series| series.last_observed_time.0)
        .or_else(|| event.event_time.as_ref().map(|time| time.0))
}
