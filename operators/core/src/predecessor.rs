//! What a deleted cluster of the same name left behind, which a new cluster must never start on.
//!
//! Deleting a cluster keeps its members' volumes (a StatefulSet's claims outlive it, so a mistaken
//! delete loses no data), and Kubernetes removes the StatefulSet itself in the background. A
//! cluster created again under the same name would otherwise get the old claims (its members'
//! pods have the same names, so the same claim names) and start on the deleted cluster's data,
//! or an operator would observe the old members and adopt them. So before anything else a pass
//! checks for leftovers and, while there are any, takes no step and says what a human can do.
//!
//! A claim is a leftover when it was created before the cluster object itself: no claim of this
//! cluster can be older than the cluster. A StatefulSet is a leftover when another object (the
//! deleted cluster, by its uid) controls it.

use k8s_openapi::{
    NamespaceResourceScope,
    api::{apps::v1::StatefulSet, core::v1::PersistentVolumeClaim},
    apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, Resource, ResourceExt, api::ListParams};
use serde::{Serialize, de::DeserializeOwned};

use crate::{
    Error,
    cache::Cache,
    conditions::{ConditionType, ConditionUpdate, set_condition},
    events::{EventPublisher, Severity},
    runner::Context,
};

/// The condition and event reason while leftovers hold a cluster back.
pub const REASON: &str = "DeletedClusterLeftovers";

/// Objects a deleted cluster of the same name left, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftovers {
    pub namespace: String,
    /// StatefulSets controlled by another object than this cluster.
    pub statefulsets: Vec<String>,
    /// Member volume claims older than this cluster.
    pub claims: Vec<String>,
}

impl Leftovers {
    /// What holds the cluster back and what a human can do, for the condition and the event.
    pub fn message(&self) -> String {
        let mut parts = Vec::new();
        if !self.statefulsets.is_empty() {
            parts.push(format!(
                "StatefulSet {} still belongs to a deleted cluster of this name; Kubernetes removes it in the background",
                self.statefulsets.join(", ")
            ));
        }
        if !self.claims.is_empty() {
            parts.push(format!(
                "volume claims {} hold a deleted cluster's data and are kept until a human removes them: \
                 `kubectl delete pvc -n {} {}` to start this cluster empty (or from its restoreFrom), \
                 or delete this cluster and create it under another name to keep them",
                self.claims.join(", "),
                self.namespace,
                self.claims.join(" ")
            ));
        }
        format!(
            "no member is started on what a deleted cluster left: {}",
            parts.join("; ")
        )
    }
}

/// The leftovers among the StatefulSet `statefulset` (if it exists) and the namespace's `claims`,
/// for the cluster `cluster`, whose members' claims are named `data-<statefulset>-<ordinal>`.
pub fn leftovers(
    cluster: &ObjectMeta,
    statefulsets: &[(&str, Option<&StatefulSet>)],
    claims: &[PersistentVolumeClaim],
) -> Option<Leftovers> {
    let uid = cluster.uid.as_deref();
    let foreign: Vec<String> = statefulsets
        .iter()
        .filter_map(|(name, found)| {
            let controller = (*found)?
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|owner| owner.controller == Some(true));
            // Another live object's (a neighbour whose own names happen to match) is no
            // predecessor's: only a controller of the same name, or none, leaves something behind.
            let predecessors = controller.is_none_or(|owner| {
                Some(owner.uid.as_str()) != uid && cluster.name.as_deref() == Some(owner.name.as_str())
            });
            predecessors.then(|| name.to_string())
        })
        .collect();
    let created = cluster.creation_timestamp.as_ref().map(|time| time.0);
    let mut older: Vec<String> = claims
        .iter()
        .filter(|claim| {
            let name = claim.metadata.name.as_deref().unwrap_or_default();
            let Some((_, mounted_by)) = statefulsets
                .iter()
                .find(|(statefulset, _)| is_member_claim(name, statefulset))
            else {
                return false;
            };
            // A StatefulSet labels its claims with its selector: one of another instance is a
            // live neighbour's while a StatefulSet of that name stands (whose apply this cluster
            // is refused anyway). With none, the claim is what a StatefulSet of this name would
            // mount whatever its label: a deleted cluster's whose names collide with this one's
            // (`cache`'s shard `cache-shard-0` and a cluster named `cache-shard-0`).
            let instance = claim
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(INSTANCE_LABEL));
            mounted_by.is_none() || instance.is_none_or(|instance| cluster.name.as_ref() == Some(instance))
        })
        .filter(
            |claim| match (claim.metadata.creation_timestamp.as_ref(), created) {
                (Some(claimed), Some(created)) => claimed.0 < created,
                _ => false,
            },
        )
        .filter_map(|claim| claim.metadata.name.clone())
        .collect();
    older.sort();
    (!foreign.is_empty() || !older.is_empty()).then(|| Leftovers {
        namespace: cluster.namespace.clone().unwrap_or_default(),
        statefulsets: foreign,
        claims: older,
    })
}

/// The label naming the instance a member's claim belongs to (part of every selector).
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";

fn is_member_claim(claim: &str, statefulset: &str) -> bool {
    claim
        .strip_prefix("data-")
        .and_then(|rest| rest.strip_prefix(statefulset))
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|ordinal| !ordinal.is_empty() && ordinal.bytes().all(|b| b.is_ascii_digit()))
}

/// Reads the StatefulSets named `statefulsets` (from `cache` when it holds them) and the
/// namespace's claims, and returns what a deleted cluster of the same name left among them.
///
/// # Errors
/// [`Error::Read`] when the API server cannot be read.
pub async fn find<K>(
    client: &Client,
    cache: &Cache,
    cluster: &K,
    statefulsets: &[String],
) -> Result<Option<Leftovers>, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    let namespace = cluster.namespace().ok_or_else(|| Error::MissingField {
        kind: K::kind(&()).to_string(),
        field: "metadata.namespace",
    })?;
    let read = |kind: &str, name: &str| {
        let (kind, name) = (kind.to_string(), name.to_string());
        move |source| Error::Read { kind, name, source }
    };
    let mut found = Vec::new();
    for name in statefulsets {
        found.push(
            cache
                .get_or_read::<StatefulSet>(client, &namespace, name)
                .await
                .map_err(read("StatefulSet", name))?,
        );
    }
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &namespace)
        .list_metadata(&ListParams::default())
        .await
        .map_err(read("PersistentVolumeClaim", "(list)"))?
        .items
        .into_iter()
        .map(|meta| PersistentVolumeClaim {
            metadata: meta.metadata,
            ..PersistentVolumeClaim::default()
        })
        .collect::<Vec<_>>();
    let named: Vec<(&str, Option<&StatefulSet>)> = statefulsets
        .iter()
        .map(String::as_str)
        .zip(found.iter().map(|found| found.as_deref()))
        .collect();
    Ok(leftovers(cluster.meta(), &named, &claims))
}

/// How soon a held-back cluster looks again: Kubernetes removes a deleted cluster's StatefulSet in
/// seconds, and a human deleting claims is not watched for.
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether leftovers of a deleted cluster of the same name hold `cluster` back; when they do, the
/// cluster's conditions and an event say so ([`report`]) and the pass must take no step.
///
/// A cluster found free of them once stays free (a claim made later is younger than the cluster,
/// a StatefulSet made later is its own), so this process looks only until it finds none.
///
/// # Errors
/// As [`find`] and [`report`].
pub async fn held_back<K, S>(
    context: &Context<S>,
    cluster: &K,
    statefulsets: &[String],
    conditions: &[Condition],
) -> Result<bool, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let uid = cluster.meta().uid.clone().unwrap_or_default();
    if context.cache.is_free_of_leftovers(&uid) {
        return Ok(false);
    }
    let Some(leftovers) = find(&context.client, &context.cache, cluster, statefulsets).await? else {
        context.cache.set_free_of_leftovers(uid);
        return Ok(false);
    };
    tracing::info!(cluster = %cluster.name_any(), leftovers = %leftovers.message(), "held back");
    report(&context.client, &context.events, cluster, conditions, &leftovers).await?;
    Ok(true)
}

#[derive(Debug, Serialize)]
struct ConditionsOnly<'a> {
    status: ConditionsPatch<'a>,
}

#[derive(Debug, Serialize)]
struct ConditionsPatch<'a> {
    conditions: &'a [Condition],
}

/// Records on the cluster that `leftovers` hold it back: `Ready` false and `Degraded` true with
/// the reason [`REASON`], and a warning event. The rest of its status is left as it is.
///
/// # Errors
/// [`Error::PatchStatus`] when the status cannot be written; [`Error::Gone`] when the cluster
/// was deleted or created again meanwhile.
pub async fn report<K>(
    client: &Client,
    events: &EventPublisher,
    cluster: &K,
    current: &[Condition],
    leftovers: &Leftovers,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let message = leftovers.message();
    let generation = cluster.meta().generation;
    let now = Timestamp::now();
    let mut conditions = current.to_vec();
    for (type_, status) in [(ConditionType::Ready, false), (ConditionType::Degraded, true)] {
        set_condition(
            &mut conditions,
            ConditionUpdate::new(type_, status, REASON, message.clone()),
            generation,
            now,
        );
    }
    if conditions != current {
        let api: Api<K> = Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default());
        let patch = ConditionsOnly {
            status: ConditionsPatch {
                conditions: &conditions,
            },
        };
        let patch = serde_json::to_value(&patch).unwrap_or_default();
        crate::status::merge_status_bound(&api, cluster, cluster.resource_version(), &patch).await?;
    }
    events
        .publish(cluster, Severity::Warning, REASON, "Wait", message)
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    use super::*;

    fn at(seconds: i64) -> Option<Time> {
        Some(Time(Timestamp::from_second(seconds).unwrap()))
    }

    fn cluster() -> ObjectMeta {
        ObjectMeta {
            name: Some("shop".into()),
            namespace: Some("prod".into()),
            uid: Some("new".into()),
            creation_timestamp: at(1_000),
            ..ObjectMeta::default()
        }
    }

    fn claim(name: &str, created: i64) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: at(created),
                ..ObjectMeta::default()
            },
            ..PersistentVolumeClaim::default()
        }
    }

    fn controlled_by(uid: &str) -> StatefulSet {
        controlled_by_named("shop", uid)
    }

    fn controlled_by_named(name: &str, uid: &str) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    name: name.into(),
                    uid: uid.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            ..StatefulSet::default()
        }
    }

    type Case<'a> = (
        &'a str,
        Option<&'a StatefulSet>,
        Vec<PersistentVolumeClaim>,
        Option<(Vec<&'a str>, Vec<&'a str>)>,
    );

    #[test]
    fn only_what_a_deleted_cluster_of_the_same_name_left_holds_a_cluster_back() {
        let ours = controlled_by("new");
        let theirs = controlled_by("old");
        let neighbours = controlled_by_named("shop-shard-0", "other");
        let mut neighbours_claim = claim("data-shop-0", 900);
        neighbours_claim.metadata.labels = Some(BTreeMap::from([(
            INSTANCE_LABEL.to_string(),
            "shop-shard-0".to_string(),
        )]));
        let mut own_older_claim = claim("data-shop-1", 900);
        own_older_claim.metadata.labels =
            Some(BTreeMap::from([(INSTANCE_LABEL.to_string(), "shop".to_string())]));
        // (case, the StatefulSet, the claims, the expected leftover StatefulSets and claims)
        let cases: Vec<Case> = vec![
            ("a new cluster, nothing yet", None, vec![], None),
            (
                "its own StatefulSet and claims, made after it",
                Some(&ours),
                vec![claim("data-shop-0", 1_000), claim("data-shop-1", 1_010)],
                None,
            ),
            (
                "claims older than the cluster, StatefulSet gone",
                None,
                vec![claim("data-shop-1", 900), claim("data-shop-0", 990)],
                Some((vec![], vec!["data-shop-0", "data-shop-1"])),
            ),
            (
                "the deleted cluster's StatefulSet not yet removed",
                Some(&theirs),
                vec![claim("data-shop-0", 900)],
                Some((vec!["shop"], vec!["data-shop-0"])),
            ),
            (
                "a live neighbour's StatefulSet and claim under names this cluster would use",
                Some(&neighbours),
                vec![neighbours_claim.clone()],
                None,
            ),
            (
                "a deleted cluster's claim under a name this cluster's StatefulSet mounts (its shard `shop-shard-0` was named as this one's StatefulSet), none standing",
                None,
                vec![neighbours_claim],
                Some((vec![], vec!["data-shop-0"])),
            ),
            (
                "an older claim labelled with this cluster's name",
                None,
                vec![own_older_claim],
                Some((vec![], vec!["data-shop-1"])),
            ),
            (
                "older claims of other StatefulSets and other volumes are not this cluster's",
                None,
                vec![
                    claim("data-shopfront-0", 10),
                    claim("data-shop-x", 10),
                    claim("logs-shop-0", 10),
                    claim("data-shop-", 10),
                ],
                None,
            ),
        ];
        for (case, statefulset, claims, expected) in cases {
            let found = leftovers(&cluster(), &[("shop", statefulset)], &claims);
            let expected = expected.map(|(sets, claims)| Leftovers {
                namespace: "prod".into(),
                statefulsets: sets.into_iter().map(String::from).collect(),
                claims: claims.into_iter().map(String::from).collect(),
            });
            assert_eq!(found, expected, "{case}");
        }
    }

    #[test]
    fn the_message_names_the_claims_and_the_command_that_removes_them() {
        let message = Leftovers {
            namespace: "prod".into(),
            statefulsets: vec![],
            claims: vec!["data-shop-0".into(), "data-shop-1".into()],
        }
        .message();
        assert!(
            message.contains("kubectl delete pvc -n prod data-shop-0 data-shop-1"),
            "{message}"
        );
    }
}
