//! Requests to reconcile a cluster now that come from the database rather than from Kubernetes:
//! a Sentinel announcing a new primary, a member reporting a leader change.
//!
//! The watches only see Kubernetes objects change. When the database itself changes (a failover
//! its own processes decide), the operator would otherwise learn of it at its next scheduled
//! pass. An engine holds a [`Wakeups`] handle in its state and calls [`Wakeups::wake`] from
//! whatever listens to the database; a cluster controller given those wakeups
//! ([`crate::runner::Runtime::cluster_controller`]) reconciles the named cluster at once.
//! A wake is a hint, never a fact: the pass observes everything afresh, as for any other trigger.

use futures::{Stream, StreamExt};
use kube::{Resource, ResourceExt, runtime::reflector::ObjectRef};
use tokio::sync::broadcast;

/// How many wakes may wait unread before the oldest are dropped. A dropped wake loses nothing:
/// the cluster is reconciled by a later wake or by its scheduled pass.
const BACKLOG: usize = 1024;

/// The namespace and name of a resource to reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of `object` (a namespaced resource; the empty namespace for a cluster-scoped one).
    pub fn of<K: Resource>(object: &K) -> Self {
        Self::new(object.namespace().unwrap_or_default(), object.name_any())
    }

    /// The key of `namespace/name`, as the runner names a cluster that is gone.
    pub fn parse(key: &str) -> Option<Self> {
        let (namespace, name) = key.split_once('/')?;
        Some(Self::new(namespace, name))
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A handle that asks one controller to reconcile a resource now. Cheap to clone; every clone
/// reaches the same controller.
#[derive(Clone, Debug)]
pub struct Wakeups {
    sender: broadcast::Sender<ObjectKey>,
}

impl Default for Wakeups {
    fn default() -> Self {
        Self::new()
    }
}

impl Wakeups {
    pub fn new() -> Self {
        Self {
            sender: broadcast::channel(BACKLOG).0,
        }
    }

    /// Asks for a pass over `key`. Never blocks; a wake sent while no controller runs is dropped.
    pub fn wake(&self, key: ObjectKey) {
        tracing::debug!(object = %key, "woken by the database");
        let _ = self.sender.send(key);
    }

    /// The wakes for resources of kind `K` in `namespace` (every namespace when `None`), from now on.
    pub(crate) fn stream<K>(
        &self,
        namespace: Option<String>,
    ) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: Resource<DynamicType = ()> + 'static,
    {
        futures::stream::unfold(self.sender.subscribe(), |mut receiver| async move {
            loop {
                match receiver.recv().await {
                    Ok(key) => return Some((key, receiver)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .filter(move |key| {
            futures::future::ready(namespace.as_ref().is_none_or(|only| *only == key.namespace))
        })
        .map(|key| ObjectRef::new(&key.name).within(&key.namespace))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[tokio::test]
    async fn a_wake_reaches_the_controller_of_its_namespace_only() {
        let wakeups = Wakeups::new();
        let mut everywhere = Box::pin(wakeups.stream::<ConfigMap>(None));
        let mut team_a = Box::pin(wakeups.stream::<ConfigMap>(Some("team-a".into())));
        wakeups.wake(ObjectKey::new("team-b", "cache"));
        wakeups.wake(ObjectKey::new("team-a", "sessions"));

        let first = everywhere.next().await.unwrap();
        assert_eq!(
            (first.namespace.as_deref(), first.name.as_str()),
            (Some("team-b"), "cache")
        );
        let second = everywhere.next().await.unwrap();
        assert_eq!(second.name, "sessions");
        let only = team_a.next().await.unwrap();
        assert_eq!(
            (only.namespace.as_deref(), only.name.as_str()),
            (Some("team-a"), "sessions")
        );
    }

    #[tokio::test]
    async fn a_wake_sent_while_no_controller_listens_is_dropped_without_error() {
        let wakeups = Wakeups::new();
        wakeups.wake(ObjectKey::new("team-a", "cache"));
        let mut later = Box::pin(wakeups.stream::<ConfigMap>(None));
        wakeups.wake(ObjectKey::new("team-a", "sessions"));
        assert_eq!(later.next().await.unwrap().name, "sessions");
    }
}
