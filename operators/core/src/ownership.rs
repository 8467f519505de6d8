//! Objects that carry a cluster's child's name but are not the cluster's.
//!
//! A cluster's children (its StatefulSets, Services, budgets, ConfigMaps, generated Secrets) have
//! fixed names. An object already under such a name that the cluster does not control (made by
//! hand, by another tool, or by another cluster) is never adopted or overwritten: applying over it
//! would take its fields, and deleting it with the cluster would remove something the operator
//! never made. The write is refused ([`crate::Error::NotOwned`]), the pass takes no further step,
//! and the cluster says which object is in the way and what a human can do ([`report`]).

use k8s_openapi::{
    NamespaceResourceScope, api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{Client, Resource};

use crate::{
    Error,
    conditions::{ConditionType, ConditionUpdate},
    events::{EventPublisher, Severity},
    status::update_conditions,
};

/// The condition and event reason while an object not controlled by the cluster holds its name.
pub const REASON: &str = "ObjectNotOwned";

/// An object under a child's name that the cluster does not control.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotOwned {
    /// Its API version and kind (`v1`, `Service`), for the event's related object.
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// What controls it (`kind/name`), or `None` when nothing does.
    pub controller: Option<String>,
}

impl NotOwned {
    /// What is in the way and what a human can do, for the condition, the event and the error.
    pub fn message(&self) -> String {
        let held_by = match &self.controller {
            Some(controller) => format!("is controlled by {controller}"),
            None => "was not created by this cluster".to_string(),
        };
        format!(
            "{kind} {name} {held_by}; the operator neither adopts nor changes it and takes no \
             other step: remove it once nothing needs it (`kubectl delete {lower} -n {namespace} {name}`), \
             or create this cluster under another name",
            kind = self.kind,
            name = self.name,
            lower = self.kind.to_lowercase(),
            namespace = self.namespace,
        )
    }
}

impl std::fmt::Display for NotOwned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

/// Whether `existing`, found under the name of a child of the object with uid `owner`, belongs to
/// another: `None` when `owner` controls it.
pub fn conflict(api_version: &str, kind: &str, existing: &ObjectMeta, owner: &str) -> Option<NotOwned> {
    let controller = existing
        .owner_references
        .iter()
        .flatten()
        .find(|reference| reference.controller == Some(true));
    if controller.is_some_and(|reference| reference.uid == owner) {
        return None;
    }
    Some(NotOwned {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        namespace: existing.namespace.clone().unwrap_or_default(),
        name: existing.name.clone().unwrap_or_default(),
        controller: controller.map(|reference| format!("{}/{}", reference.kind, reference.name)),
    })
}

/// Records on `cluster` that `not_owned` holds one of its children's names: `Ready` false and
/// `Degraded` true with the reason [`REASON`], and a warning event naming the object. The rest of
/// the status is left as it is; the cluster's next successful pass writes its own conditions.
///
/// # Errors
/// [`Error::Read`] when the cluster cannot be read, [`Error::PatchStatus`] when the conditions
/// cannot be written.
pub async fn report<K>(
    client: &Client,
    events: &EventPublisher,
    cluster: &K,
    not_owned: &NotOwned,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + serde::Serialize + Send + Sync + 'static,
{
    let message = not_owned.message();
    let stored = update_conditions(client, cluster, |_| {
        [(ConditionType::Ready, false), (ConditionType::Degraded, true)]
            .into_iter()
            .map(|(type_, status)| ConditionUpdate::new(type_, status, REASON, message.clone()))
            .collect()
    })
    .await?;
    if !stored {
        return Ok(());
    }
    let related = ObjectReference {
        api_version: Some(not_owned.api_version.clone()),
        kind: Some(not_owned.kind.clone()),
        name: Some(not_owned.name.clone()),
        namespace: Some(not_owned.namespace.clone()),
        ..ObjectReference::default()
    };
    events
        .publish_related(
            cluster,
            Some(related),
            Severity::Warning,
            REASON,
            "Apply",
            message,
        )
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn object(owners: Vec<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            name: Some("shop-client".into()),
            namespace: Some("prod".into()),
            owner_references: (!owners.is_empty()).then_some(owners),
            ..ObjectMeta::default()
        }
    }

    fn owner(uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: "etcd.quorum.dev/v1alpha1".into(),
            kind: "EtcdCluster".into(),
            name: "shop".into(),
            uid: uid.into(),
            controller: Some(controller),
            ..OwnerReference::default()
        }
    }

    #[test]
    fn only_an_object_the_cluster_controls_is_its_own() {
        assert_eq!(
            conflict("v1", "Service", &object(vec![owner("ours", true)]), "ours"),
            None
        );

        let unowned = conflict("v1", "Service", &object(vec![]), "ours").expect("not ours");
        assert_eq!(unowned.controller, None);
        assert!(
            unowned
                .message()
                .contains("Service shop-client was not created by this cluster")
        );
        assert!(
            unowned
                .message()
                .contains("kubectl delete service -n prod shop-client")
        );

        let theirs =
            conflict("v1", "Service", &object(vec![owner("theirs", true)]), "ours").expect("not ours");
        assert_eq!(theirs.controller.as_deref(), Some("EtcdCluster/shop"));

        // An owner reference that does not control (garbage collection only) is not control.
        assert!(conflict("v1", "Service", &object(vec![owner("ours", false)]), "ours").is_some());
    }
}
