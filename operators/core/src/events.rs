//! Kubernetes events: one shared recorder per process, so repeated events are folded into a
//! series instead of flooding the API server.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client, Resource,
    runtime::events::{Event, EventType, Recorder, Reporter},
};

/// Publishes events about custom resources. Cheap to clone; clones share one de-duplicating cache.
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
}

/// Whether an event reports normal progress or something a person should look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

impl EventPublisher {
    /// A publisher reporting as `controller` (the operator's name) from `instance` (its pod).
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: controller.to_string(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
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
    /// pod). Events are folded into a series by object, reason and action, and also by the
    /// related object: one series per pod, so each pod's event keeps its own note.
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
        let reference: ObjectReference = object.object_ref(&());
        let event = Event {
            type_: match severity {
                Severity::Normal => EventType::Normal,
                Severity::Warning => EventType::Warning,
            },
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: related,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, reason, "could not publish event");
        }
    }
}
