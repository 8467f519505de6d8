//! Rolling member pods onto their StatefulSet's current template under the operator's control.
//!
//! The StatefulSets update `OnDelete`: a new pod template (a version bump, a changed override,
//! or a new operator release that builds pods differently) changes nothing until the operator
//! deletes a pod, one member at a time, through its engine's safety gate, replicas first and
//! the primary last after handing its role over. This module says which pods are behind; the
//! engines decide the order and what "back and caught up" means.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{
    apps::v1::{StatefulSet, StatefulSetUpdateStrategy},
    core::v1::Pod,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Preconditions},
};

use crate::apply::ignore_not_found;

/// The label the StatefulSet controller puts on each pod: the revision of the template it was
/// created from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The update strategy under which a pod changes only when the operator deletes it.
const ON_DELETE: &str = "OnDelete";

/// The update strategy of every member StatefulSet: a pod changes only when the operator
/// deletes it.
pub fn operator_managed_updates() -> StatefulSetUpdateStrategy {
    StatefulSetUpdateStrategy {
        type_: Some(ON_DELETE.into()),
        ..StatefulSetUpdateStrategy::default()
    }
}

/// Whether `statefulset` still updates `RollingUpdate` (created before its operator managed
/// updates): the API server defaulted `rollingUpdate: {partition: 0}` into it, a field no
/// manager owns, so an apply of `OnDelete` alone would leave it there and be refused ("only
/// allowed for updateStrategy 'RollingUpdate'").
pub fn needs_take_over(statefulset: &StatefulSet) -> bool {
    let strategy = statefulset
        .spec
        .as_ref()
        .and_then(|spec| spec.update_strategy.as_ref());
    strategy.is_some_and(|strategy| {
        strategy.type_.as_deref() != Some(ON_DELETE) || strategy.rolling_update.is_some()
    })
}

/// Moves `statefulset` to [`operator_managed_updates`], dropping the defaulted
/// `rollingUpdate` with it (a merge patch, the one way to remove a field nobody owns). No pod
/// restarts: the template is unchanged.
///
/// # Errors
/// The API server's error for the patch.
pub async fn take_over_updates(client: &Client, statefulset: &StatefulSet) -> Result<(), crate::Error> {
    let (namespace, name) = (
        statefulset.namespace().unwrap_or_default(),
        statefulset.name_any(),
    );
    let (namespace, name) = (namespace.as_str(), name.as_str());
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    // The uid makes the API server refuse the patch if the StatefulSet observed was replaced.
    let patch = serde_json::json!({
        "metadata": {"uid": statefulset.metadata.uid},
        "spec": {"updateStrategy": {"type": ON_DELETE, "rollingUpdate": null}},
    });
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .map(|written| crate::freshness::record(&written))
    .inspect_err(|_| crate::freshness::record_deleted::<StatefulSet>(namespace, name, None))
    .map_err(|source| crate::Error::Apply {
        kind: "StatefulSet".into(),
        name: format!("{namespace}/{name}"),
        source,
    })
}

/// Whether `statefulset` lacks the claim templates `desired` has: a field the API server never
/// lets change, so the StatefulSet must be made again ([`recreate_keeping_pods`]).
pub fn lacks_claims_of(statefulset: &StatefulSet, desired: &StatefulSet) -> bool {
    let claims = |statefulset: &StatefulSet| {
        statefulset
            .spec
            .as_ref()
            .and_then(|spec| spec.volume_claim_templates.as_ref())
            .map_or(0, Vec::len)
    };
    claims(statefulset) < claims(desired)
}

/// Deletes StatefulSet `name` and leaves its pods running (orphaned): the one way to give a
/// StatefulSet claim templates it was made without. The StatefulSet applied next adopts the pods
/// but cannot move them onto claims (a pod's volumes never change, and its controller only
/// reports each update it is refused), so the operator replaces them itself ([`without_claim`]
/// finds them).
///
/// # Errors
/// The API server's error for the delete.
pub async fn recreate_keeping_pods(client: &Client, statefulset: &StatefulSet) -> Result<(), crate::Error> {
    let (namespace, name) = (
        statefulset.namespace().unwrap_or_default(),
        statefulset.name_any(),
    );
    let (namespace, name) = (namespace.as_str(), name.as_str());
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    // Only the StatefulSet observed: orphaning another's pods would leave them to no owner.
    let orphan = kube::api::DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
        preconditions: Some(kube::api::Preconditions {
            uid: statefulset.metadata.uid.clone(),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::default()
    };
    api.delete(name, &orphan)
        .await
        .map(|_| {
            crate::freshness::record_deleted::<StatefulSet>(
                namespace,
                name,
                statefulset.metadata.uid.as_deref(),
            )
        })
        .map_err(|source| crate::Error::Apply {
            kind: "StatefulSet".into(),
            name: format!("{namespace}/{name}"),
            source,
        })
}

/// Which member pods run their StatefulSet's current template.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Templates {
    /// No StatefulSet yet, or its controller has not observed the newest spec: which revision
    /// is current is not known, so no pod counts as outdated and none is restarted.
    #[default]
    Unknown,
    /// Pods that exist and are not terminating, by ordinal, split by template (the outdated
    /// with their pod's UID, so only the pod observed is ever deleted). A member in neither
    /// has no pod now (being deleted or not yet created).
    Known {
        outdated: BTreeMap<usize, String>,
        current: BTreeSet<usize>,
    },
}

impl Templates {
    /// Reads the templates of the member pods of `statefulset`; `ordinal_of` maps a pod name to
    /// its ordinal (pods it does not know are left out).
    pub fn observe(
        statefulset: Option<&StatefulSet>,
        pods: &[Pod],
        ordinal_of: impl Fn(&str) -> Option<usize>,
    ) -> Self {
        let Some(revision) = statefulset.and_then(current_revision) else {
            return Self::Unknown;
        };
        let mut outdated = BTreeMap::new();
        let mut current = BTreeSet::new();
        for pod in pods
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        {
            let Some(ordinal) = ordinal_of(&pod.name_any()) else {
                continue;
            };
            if runs_older_template(pod, revision) {
                outdated.insert(ordinal, pod.uid().unwrap_or_default());
            } else {
                current.insert(ordinal);
            }
        }
        Self::Known { outdated, current }
    }

    /// The members of several StatefulSets (a deployment with one per shard, whose ordinals do
    /// not overlap) as one: known when any part is. The pods of a part whose current revision
    /// is not known are in neither set, as pods being replaced are, so nothing is restarted
    /// on a guess about them.
    pub fn combine(parts: impl IntoIterator<Item = Templates>) -> Self {
        parts
            .into_iter()
            .fold(Self::Unknown, |combined, part| match (combined, part) {
                (Self::Unknown, part) => part,
                (combined, Self::Unknown) => combined,
                (
                    Self::Known {
                        mut outdated,
                        mut current,
                    },
                    Self::Known {
                        outdated: more_outdated,
                        current: more_current,
                    },
                ) => {
                    outdated.extend(more_outdated);
                    current.extend(more_current);
                    Self::Known { outdated, current }
                }
            })
    }

    /// Whether any member's pod runs an older template or is being replaced (`members` are the
    /// ordinals expected to have a pod): a roll is under way. Never while the templates are
    /// not known.
    pub fn rolling(&self, members: impl IntoIterator<Item = usize>) -> bool {
        matches!(self, Self::Known { .. }) && members.into_iter().any(|ordinal| !self.is_current(ordinal))
    }

    /// The first of `pending` (members whose pods run nothing, [`pending_members`]) whose pod
    /// runs an older template: replacing it disturbs nothing, and it may start only once
    /// replaced.
    pub fn stuck(&self, pending: &BTreeSet<usize>) -> Option<usize> {
        pending.iter().copied().find(|ordinal| self.is_outdated(*ordinal))
    }

    /// Whether member `ordinal`'s pod exists and runs an older template.
    pub fn is_outdated(&self, ordinal: usize) -> bool {
        self.outdated_pod(ordinal).is_some()
    }

    /// The UID of member `ordinal`'s pod when it runs an older template.
    pub fn outdated_pod(&self, ordinal: usize) -> Option<&str> {
        match self {
            Self::Known { outdated, .. } => outdated.get(&ordinal).map(String::as_str),
            Self::Unknown => None,
        }
    }

    /// Whether member `ordinal`'s pod exists and runs the current template.
    pub fn is_current(&self, ordinal: usize) -> bool {
        matches!(self, Self::Known { current, .. } if current.contains(&ordinal))
    }

    /// The next member to restart: the lowest outdated ordinal other than the primary, then
    /// the primary.
    pub fn next(&self, primary: Option<usize>) -> Option<RollTarget> {
        let Self::Known { outdated, .. } = self else {
            return None;
        };
        match outdated.keys().find(|ordinal| Some(**ordinal) != primary) {
            Some(replica) => Some(RollTarget::Replica(*replica)),
            None => outdated
                .keys()
                .next()
                .map(|primary| RollTarget::Primary(*primary)),
        }
    }
}

/// The members whose pods the API server reports `Pending` (not placed on a node, or their
/// containers not started): nothing of theirs runs or serves, so replacing one disturbs
/// nothing, and one stuck on an older template (one no node can take, say) may start only once
/// replaced. `ordinal_of` maps a pod name to its ordinal.
pub fn pending_members(pods: &[Pod], ordinal_of: impl Fn(&str) -> Option<usize>) -> BTreeSet<usize> {
    pods.iter()
        .filter(|pod| runs_nothing(pod))
        .filter_map(|pod| ordinal_of(&pod.name_any()))
        .collect()
}

/// The members whose pods exist, are not being deleted and are not Ready by the kubelet's
/// probes. A database may answer its admin API a few seconds before its probe passes, and until
/// then its pod is out of its Services and counts against its disruption budget: a roll takes
/// the next member down only once every pod is Ready again.
pub fn unready_members(pods: &[Pod], ordinal_of: impl Fn(&str) -> Option<usize>) -> BTreeSet<usize> {
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none() && !crate::pod::is_ready(pod))
        .filter_map(|pod| ordinal_of(&pod.name_any()))
        .collect()
}

/// The members whose pods exist, are not being deleted and are Ready by the kubelet's probes.
/// A pod just deleted may still answer for a moment, and one just made may not be up yet:
/// neither counts until its replacement is Ready.
pub fn ready_members(pods: &[Pod], ordinal_of: impl Fn(&str) -> Option<usize>) -> BTreeSet<usize> {
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none() && crate::pod::is_ready(pod))
        .filter_map(|pod| ordinal_of(&pod.name_any()))
        .collect()
}

/// Member pods (not being deleted) whose volume `volume` is not a claim, by ordinal, with each
/// pod's uid: pods made before their StatefulSet had a claim template for it, which only a new
/// pod can move onto one (a pod's volumes never change).
pub fn without_claim(
    pods: &[Pod],
    volume: &str,
    ordinal_of: impl Fn(&str) -> Option<usize>,
) -> BTreeMap<usize, String> {
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            !pod.spec
                .iter()
                .flat_map(|spec| spec.volumes.iter().flatten())
                .any(|v| v.name == volume && v.persistent_volume_claim.is_some())
        })
        .filter_map(|pod| Some((ordinal_of(&pod.name_any())?, pod.metadata.uid.clone()?)))
        .collect()
}

/// Whether the API server reports `pod` `Pending` and it is not being deleted: not placed on a
/// node, or its containers (init containers included) not all started, so its member serves
/// nothing and replacing the pod disturbs nothing.
pub fn runs_nothing(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|status| status.phase.as_deref()) == Some("Pending")
}

/// Restarts member pod `pod` onto its StatefulSet's current template by deleting it, if it is
/// still the incarnation observed (`uid`): a pod already replaced is left alone, so a step
/// taken again after an operator restart never restarts a member twice. The StatefulSet
/// creates the pod again on the same volume.
///
/// # Errors
/// The API server's error for a delete it refused.
pub async fn restart_pod(client: &Client, namespace: &str, pod: &str, uid: &str) -> Result<(), crate::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    crate::freshness::record_deleted::<Pod>(namespace, pod, Some(uid));
    match pods.delete(pod, &params).await {
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        result => ignore_not_found(result),
    }
    .map_err(|source| crate::Error::Delete {
        kind: "Pod".into(),
        name: format!("{namespace}/{pod}"),
        source,
    })
}

/// The revision of `statefulset`'s current pod template; `None` until its controller has
/// observed the newest spec (before that, the revision it reports may be the previous one).
pub fn current_revision(statefulset: &StatefulSet) -> Option<&str> {
    let status = statefulset.status.as_ref()?;
    let observed = status.observed_generation?;
    (Some(observed) == statefulset.metadata.generation)
        .then_some(status.update_revision.as_deref())
        .flatten()
}

/// Whether a StatefulSet its controller updates (`RollingUpdate`) is done: the controller has
/// observed the newest spec, and every pod runs the current template and is ready.
pub fn rolled_out(statefulset: &StatefulSet) -> bool {
    let Some(revision) = current_revision(statefulset) else {
        return false;
    };
    let Some(status) = statefulset.status.as_ref() else {
        return false;
    };
    let wanted = statefulset
        .spec
        .as_ref()
        .and_then(|spec| spec.replicas)
        .unwrap_or(1);
    status.current_revision.as_deref() == Some(revision)
        && status.updated_replicas.unwrap_or(0) == wanted
        && status.ready_replicas.unwrap_or(0) == wanted
}

/// Whether `pod` was created from another template than `revision`.
pub fn runs_older_template(pod: &Pod, revision: &str) -> bool {
    pod.labels().get(REVISION_LABEL).map(String::as_str) != Some(revision)
}

/// The member a roll restarts next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RollTarget {
    /// A member that serves no writes: restarted as it is.
    Replica(usize),
    /// The primary, once every other member is current: its role is handed over first where
    /// the cluster has anyone to hand it to.
    Primary(usize),
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::apps::v1::StatefulSetStatus,
        apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    };

    use super::*;

    #[test]
    fn pods_made_without_a_claim_for_a_volume_are_found_with_their_uid() {
        use k8s_openapi::api::core::v1::{PersistentVolumeClaimVolumeSource, PodSpec, Volume};
        let pod = |name: &str, claim: bool| Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                volumes: Some(vec![Volume {
                    name: "data".into(),
                    persistent_volume_claim: claim.then(|| PersistentVolumeClaimVolumeSource {
                        claim_name: format!("data-{name}"),
                        ..Default::default()
                    }),
                    empty_dir: (!claim).then(Default::default),
                    ..Volume::default()
                }]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        let pods = [pod("s-0", true), pod("s-1", false), pod("s-2", false)];
        let ordinal = |name: &str| name.rsplit_once('-')?.1.parse().ok();
        assert_eq!(
            without_claim(&pods, "data", ordinal),
            BTreeMap::from([(1, "uid-s-1".to_string()), (2, "uid-s-2".to_string())])
        );

        let with_claims = |claims: usize| StatefulSet {
            spec: Some(k8s_openapi::api::apps::v1::StatefulSetSpec {
                volume_claim_templates: (claims > 0).then(|| vec![Default::default(); claims]),
                ..Default::default()
            }),
            ..StatefulSet::default()
        };
        assert!(lacks_claims_of(&with_claims(0), &with_claims(1)));
        assert!(!lacks_claims_of(&with_claims(1), &with_claims(1)));
    }

    #[test]
    fn a_pod_counts_as_ready_only_while_it_is_not_being_deleted() {
        use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
        let pod = |name: &str, ready: bool, deleting: bool| Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                deletion_timestamp: deleting.then(|| Time(Default::default())),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        let pods = [
            pod("s-0", true, false),
            pod("s-1", true, true),
            pod("s-2", false, false),
            pod("s-3", false, true),
        ];
        let ordinal = |name: &str| name.rsplit_once('-')?.1.parse().ok();
        assert_eq!(ready_members(&pods, ordinal), BTreeSet::from([0]));
        assert_eq!(unready_members(&pods, ordinal), BTreeSet::from([2]));
    }

    fn statefulset(generation: i64, observed: i64, revision: &str) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                generation: Some(generation),
                ..ObjectMeta::default()
            },
            status: Some(StatefulSetStatus {
                observed_generation: Some(observed),
                update_revision: Some(revision.into()),
                ..StatefulSetStatus::default()
            }),
            ..StatefulSet::default()
        }
    }

    fn pod(ordinal: usize, revision: &str, terminating: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("db-{ordinal}")),
                labels: Some([(REVISION_LABEL.to_string(), revision.to_string())].into()),
                uid: Some(format!("uid-{ordinal}")),
                deletion_timestamp: terminating.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn ordinal_of(name: &str) -> Option<usize> {
        name.strip_prefix("db-")?.parse().ok()
    }

    #[test]
    fn pods_behind_the_current_revision_are_outdated_and_terminating_pods_are_neither() {
        let pods = [pod(0, "new", false), pod(1, "old", false), pod(2, "old", true)];
        let templates = Templates::observe(Some(&statefulset(2, 2, "new")), &pods, ordinal_of);
        assert_eq!(
            templates,
            Templates::Known {
                outdated: [(1, "uid-1".to_string())].into(),
                current: [0].into()
            }
        );
        assert!(templates.is_outdated(1) && !templates.is_outdated(2) && !templates.is_current(2));
        assert_eq!(templates.outdated_pod(1), Some("uid-1"));
    }

    #[test]
    fn nothing_is_outdated_until_the_controller_has_seen_the_newest_spec() {
        let pods = [pod(0, "old", false)];
        assert_eq!(
            Templates::observe(Some(&statefulset(3, 2, "old-or-new")), &pods, ordinal_of),
            Templates::Unknown
        );
        assert_eq!(Templates::observe(None, &pods, ordinal_of), Templates::Unknown);
        assert_eq!(Templates::Unknown.next(Some(0)), None);
    }

    #[test]
    fn statefulsets_combined_are_known_where_any_is_and_an_unknown_ones_pods_are_neither() {
        let pods = [
            pod(0, "new", false),
            pod(1, "old", false),
            pod(2, "old", false),
            pod(3, "old", false),
        ];
        let first_two = |name: &str| ordinal_of(name).filter(|o| *o < 2);
        let last_two = |name: &str| ordinal_of(name).filter(|o| *o >= 2);
        let combined = Templates::combine([
            Templates::observe(Some(&statefulset(2, 2, "new")), &pods, first_two),
            Templates::observe(Some(&statefulset(5, 4, "old")), &pods, last_two),
        ]);
        assert_eq!(
            combined,
            Templates::Known {
                outdated: [(1, "uid-1".to_string())].into(),
                current: [0].into()
            }
        );
        assert!(combined.rolling(0..4), "members 2 and 3 are neither");
        assert!(combined.rolling(0..2), "member 1 is outdated");
        assert!(!combined.rolling(0..1));
        assert!(!Templates::Unknown.rolling(0..4), "nothing known is no roll");

        let both_known = Templates::combine([
            Templates::observe(Some(&statefulset(2, 2, "new")), &pods, first_two),
            Templates::observe(Some(&statefulset(4, 4, "old")), &pods, last_two),
        ]);
        assert_eq!(
            both_known,
            Templates::Known {
                outdated: [(1, "uid-1".to_string())].into(),
                current: [0, 2, 3].into()
            }
        );
        assert_eq!(Templates::combine([]), Templates::Unknown);
    }

    #[test]
    fn a_pending_member_on_an_older_template_is_stuck_and_one_on_the_current_is_not() {
        let mut waiting = pod(1, "old", false);
        waiting.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        });
        let mut starting = pod(2, "new", false);
        starting.status = waiting.status.clone();
        let pods = [pod(0, "old", false), waiting, starting];
        let pending = pending_members(&pods, ordinal_of);
        assert_eq!(pending, [1, 2].into());
        let templates = Templates::observe(Some(&statefulset(2, 2, "new")), &pods, ordinal_of);
        assert_eq!(templates.stuck(&pending), Some(1));
        assert_eq!(templates.stuck(&[2].into()), None);
        assert_eq!(Templates::Unknown.stuck(&pending), None);
    }

    #[test]
    fn replicas_go_first_in_ordinal_order_and_the_primary_last() {
        let known = |outdated: &[usize]| Templates::Known {
            outdated: outdated.iter().map(|o| (*o, format!("uid-{o}"))).collect(),
            current: BTreeSet::new(),
        };
        assert_eq!(known(&[0, 1, 2]).next(Some(0)), Some(RollTarget::Replica(1)));
        assert_eq!(known(&[0, 2]).next(Some(0)), Some(RollTarget::Replica(2)));
        assert_eq!(known(&[0]).next(Some(0)), Some(RollTarget::Primary(0)));
        assert_eq!(known(&[1, 2]).next(Some(2)), Some(RollTarget::Replica(1)));
        assert_eq!(known(&[]).next(Some(0)), None);
    }

    #[test]
    fn a_rolling_update_is_done_once_every_pod_runs_the_current_template_and_is_ready() {
        let mut rolling = statefulset(2, 2, "new");
        rolling.spec = Some(k8s_openapi::api::apps::v1::StatefulSetSpec {
            replicas: Some(3),
            ..Default::default()
        });
        let status = rolling.status.as_mut().unwrap();
        status.current_revision = Some("old".into());
        status.updated_replicas = Some(1);
        status.ready_replicas = Some(3);
        assert!(!rolled_out(&rolling));
        let status = rolling.status.as_mut().unwrap();
        status.current_revision = Some("new".into());
        status.updated_replicas = Some(3);
        assert!(rolled_out(&rolling));
        rolling.status.as_mut().unwrap().ready_replicas = Some(2);
        assert!(!rolled_out(&rolling), "a pod not ready");
        assert!(
            !rolled_out(&statefulset(3, 2, "new")),
            "the newest spec not observed yet"
        );
    }
}
