//! Member pods that cannot start (an image that cannot be pulled, a container in a crash loop,
//! a pod no node can take), reported on the cluster that owns them.
//!
//! The admin layer sees such a member only as unreachable, which is rightly not "down"; the
//! kubelet knows why. So after every pass the cluster's `PodsFailing` condition and a warning
//! event carry each failing pod's name, container and the kubelet's reason, where `kubectl get`
//! and `kubectl describe` on the cluster show them.

use k8s_openapi::{
    NamespaceResourceScope,
    api::core::v1::{ContainerStatus, ObjectReference, Pod},
    apimachinery::pkg::apis::meta::v1::Condition,
};
use std::{collections::BTreeMap, time::Duration};

use kube::{Client, Resource, ResourceExt};

use crate::{
    Error,
    cache::Cache,
    conditions::ConditionUpdate,
    events::{EventPublisher, Severity},
    status::update_conditions,
};

/// The condition type: `True` while some pod of the cluster cannot start.
pub const CONDITION: &str = "PodsFailing";
/// The event reason of a failing pod.
pub const EVENT_REASON: &str = "PodFailing";

/// Waiting reasons of a container that will not start without a change by a human (or that
/// keeps crashing): not the short, normal ones (`ContainerCreating`, `PodInitializing`).
const FAILING_WAITING_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "StartError",
];

/// One pod that cannot start, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFailure {
    pub pod: String,
    /// The container (init containers included); `None` when the pod itself is not placed.
    pub container: Option<String>,
    /// The kubelet's or scheduler's reason (`ImagePullBackOff`, `CrashLoopBackOff`, `Unschedulable`).
    pub reason: String,
    pub message: String,
}

impl std::fmt::Display for PodFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.container {
            Some(container) => write!(f, "pod {} container {}: {}", self.pod, container, self.reason)?,
            None => write!(f, "pod {}: {}", self.pod, self.reason)?,
        }
        if !self.message.is_empty() {
            write!(f, " ({})", self.message)?;
        }
        Ok(())
    }
}

/// The pods among `pods` that cannot start, in pod-name order.
pub fn failures<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Vec<PodFailure> {
    let mut found = Vec::new();
    for pod in pods {
        let name = pod.name_any();
        let Some(status) = &pod.status else { continue };
        let unschedulable = status.conditions.iter().flatten().find(|condition| {
            condition.type_ == "PodScheduled"
                && condition.status == "False"
                && condition.reason.as_deref() == Some("Unschedulable")
        });
        if let Some(condition) = unschedulable {
            found.push(PodFailure {
                pod: name.clone(),
                container: None,
                reason: "Unschedulable".into(),
                message: condition.message.clone().unwrap_or_default(),
            });
            continue;
        }
        let containers = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        found.extend(containers.filter_map(|container| failing(&name, container)));
    }
    found.sort_by(|a, b| (&a.pod, &a.container).cmp(&(&b.pod, &b.container)));
    found
}

/// How long after its restart a container that exits is surely still held back by the kubelet:
/// it keeps a crash's back-off (10 s at first, doubling to 5 minutes) until twice its longest
/// back-off, ten minutes, has passed since it began the restart; a minute less, for the time
/// the restart takes and the timestamps' whole seconds.
const KUBELET_BACK_OFF_KEPT: Duration = Duration::from_secs(9 * 60);

/// The members whose server container (named `container`) the kubelet is not running and holds
/// back (a crash loop's back-off, an image it cannot pull), with the kubelet's reason. Unlike a
/// call that goes unanswered, which may be the network's doing, this is the kubelet's word that
/// the server is not running and will not be for a while.
///
/// A server that exits after a restart less than nine minutes old is held back from the moment it
/// exits, though the kubelet writes `CrashLoopBackOff` only at its next sync of the pod, seconds
/// later: it restarts at once only a container that never crashed before (or whose last crash
/// is ten minutes old), and otherwise waits out its back-off, at least 10 s, from the exit. (A
/// node that enables the alpha `ReduceDefaultCrashLoopBackOffDecay` gate waits 1 s at first:
/// there a failover taken on this word may be one the restart would have made needless.)
pub fn held_back(
    pods: &[Pod],
    container: &str,
    ordinal_of: impl Fn(&str) -> Option<usize>,
) -> BTreeMap<usize, String> {
    pods.iter()
        .filter_map(|pod| {
            let ordinal = ordinal_of(&pod.name_any())?;
            let status = pod.status.as_ref()?.container_statuses.as_ref()?;
            let server = status.iter().find(|status| status.name == container)?;
            let reason = match failing(&pod.name_any(), server) {
                Some(failure) => failure.reason,
                None => backing_off(server)?,
            };
            Some((ordinal, reason))
        })
        .collect()
}

/// Why the kubelet will back off the restart of `container`, which has exited and was restarted
/// before, less than [`KUBELET_BACK_OFF_KEPT`] before it exited; `None` for a container that
/// runs, waits for another reason, exited for the first time or after a long run.
fn backing_off(container: &ContainerStatus) -> Option<String> {
    let terminated = container.state.as_ref()?.terminated.as_ref()?;
    if container.restart_count < 1 {
        return None;
    }
    let started = terminated.started_at.as_ref()?.0;
    let finished = terminated.finished_at.as_ref()?.0;
    let ran = Duration::try_from(finished.duration_since(started)).ok()?;
    (ran < KUBELET_BACK_OFF_KEPT).then(|| {
        format!(
            "exited ({}, code {}) {} s after its restart: the kubelet backs off its next start",
            terminated.reason.as_deref().unwrap_or("no reason"),
            terminated.exit_code,
            ran.as_secs()
        )
    })
}

fn failing(pod: &str, container: &ContainerStatus) -> Option<PodFailure> {
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    FAILING_WAITING_REASONS.contains(&reason).then(|| PodFailure {
        pod: pod.to_string(),
        container: Some(container.name.clone()),
        reason: reason.to_string(),
        message: waiting.message.clone().unwrap_or_default(),
    })
}

/// The `PodsFailing` condition for `failures`; `None` when nothing fails and the condition was
/// never set (a healthy cluster does not carry it).
pub fn condition(failures: &[PodFailure], current: &[Condition]) -> Option<ConditionUpdate> {
    let Some(first) = failures.first() else {
        return current
            .iter()
            .any(|condition| condition.type_ == CONDITION)
            .then(|| {
                ConditionUpdate::new(CONDITION, false, "NoneFailing", "every pod of the cluster starts")
            });
    };
    let listed: Vec<String> = failures.iter().map(ToString::to_string).collect();
    Some(ConditionUpdate::new(
        CONDITION,
        true,
        first.reason.clone(),
        format!(
            "{}; these members stay unreachable to the operator until they start: fix the image, \
             the configuration or the node (`kubectl describe pod` shows the details)",
            listed.join("; ")
        ),
    ))
}

/// Lists the pods of `cluster` (labelled with its instance and `app.kubernetes.io/name` `app`), records
/// the `PodsFailing` condition on it, and publishes a warning event while some fail.
///
/// # Errors
/// [`Error::Read`] when the pods or the cluster cannot be read, [`Error::PatchStatus`] when the
/// condition cannot be written.
pub async fn report<K>(
    client: &Client,
    cache: &Cache,
    events: &EventPublisher,
    cluster: &K,
    app: &str,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + serde::Serialize + Send + Sync + 'static,
{
    let kind = K::kind(&()).to_string();
    let name = cluster.name_any();
    let namespace = cluster.namespace().ok_or_else(|| Error::MissingField {
        kind: kind.clone(),
        field: "metadata.namespace",
    })?;
    let read = |what: &str| {
        let (kind, name) = (what.to_string(), name.clone());
        move |source| Error::Read { kind, name, source }
    };
    let selector = BTreeMap::from([
        ("app.kubernetes.io/instance".to_string(), name.clone()),
        ("app.kubernetes.io/name".to_string(), app.to_string()),
    ]);
    let pods = cache
        .list_or_read::<Pod>(client, &namespace, &selector)
        .await
        .map_err(read("Pod"))?;
    let failures = failures(pods.iter().map(|pod| pod.as_ref()));

    // The conditions as stored now, after the pass's own status write.
    let stored = update_conditions(client, cluster, |current| {
        condition(&failures, current).into_iter().collect()
    })
    .await?;
    if !stored {
        return Ok(());
    }
    for failure in &failures {
        let pod = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(failure.pod.clone()),
            namespace: Some(namespace.clone()),
            ..ObjectReference::default()
        };
        events
            .publish_related(
                cluster,
                Some(pod),
                Severity::Warning,
                EVENT_REASON,
                "Observe",
                failure.to_string(),
            )
            .await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, PodCondition,
        PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    use super::*;

    fn container(name: &str, waiting: Option<&str>) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(match waiting {
                Some(reason) => ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.into()),
                        message: Some(format!("{reason} details")),
                    }),
                    ..ContainerState::default()
                },
                None => ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..ContainerState::default()
                },
            }),
            ..ContainerStatus::default()
        }
    }

    fn pod(name: &str, status: PodStatus) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            status: Some(status),
            ..Pod::default()
        }
    }

    #[test]
    fn a_server_is_held_back_only_while_the_kubelet_keeps_its_own_container_from_running() {
        let with = |name: &str, containers: Vec<ContainerStatus>| {
            pod(
                name,
                PodStatus {
                    container_statuses: Some(containers),
                    ..PodStatus::default()
                },
            )
        };
        let pods = vec![
            with("shop-0", vec![container("redis", Some("CrashLoopBackOff"))]),
            with("shop-1", vec![container("redis", None)]),
            // Starting, not held back.
            with("shop-2", vec![container("redis", Some("ContainerCreating"))]),
            // Another container's crash loop says nothing of the server.
            with(
                "shop-3",
                vec![
                    container("redis", None),
                    container("exporter", Some("CrashLoopBackOff")),
                ],
            ),
            with("shop-4", vec![container("redis", Some("ImagePullBackOff"))]),
            with("other-0", vec![container("redis", Some("CrashLoopBackOff"))]),
        ];
        let ordinal_of = |name: &str| name.strip_prefix("shop-")?.parse().ok();
        assert_eq!(
            held_back(&pods, "redis", ordinal_of),
            BTreeMap::from([
                (0, "CrashLoopBackOff".to_string()),
                (4, "ImagePullBackOff".to_string())
            ])
        );
    }

    #[test]
    fn a_server_that_exits_soon_after_a_restart_is_held_back_before_the_kubelet_says_so() {
        let exited = |restarts: i32, ran_seconds: i64| {
            let finished = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
            let started = finished - k8s_openapi::jiff::SignedDuration::from_secs(ran_seconds);
            ContainerStatus {
                name: "redis".into(),
                restart_count: restarts,
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 137,
                        reason: Some("Error".into()),
                        started_at: Some(Time(started)),
                        finished_at: Some(Time(finished)),
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }
        };
        let pods: Vec<Pod> = [
            // Restarted before, exits after 4 s: backed off for 10 s or more.
            exited(1, 4),
            // Its first exit: the kubelet restarts it at once.
            exited(0, 4),
            // Ran for more than nine minutes: its back-off may be forgotten.
            exited(3, 9 * 60 + 1),
            // Just inside.
            exited(3, 9 * 60 - 1),
            // Running.
            container("redis", None),
        ]
        .into_iter()
        .enumerate()
        .map(|(ordinal, server)| {
            pod(
                &format!("shop-{ordinal}"),
                PodStatus {
                    container_statuses: Some(vec![server]),
                    ..PodStatus::default()
                },
            )
        })
        .collect();
        let held = held_back(&pods, "redis", |name| name.strip_prefix("shop-")?.parse().ok());
        assert_eq!(held.keys().copied().collect::<Vec<_>>(), vec![0, 3]);
        assert_eq!(
            held[&0],
            "exited (Error, code 137) 4 s after its restart: the kubelet backs off its next start"
        );
    }

    #[test]
    fn pods_that_cannot_start_are_named_with_their_container_and_reason() {
        let pods = vec![
            pod(
                "shop-2",
                PodStatus {
                    container_statuses: Some(vec![container("mysqld", Some("CrashLoopBackOff"))]),
                    ..PodStatus::default()
                },
            ),
            pod(
                "shop-0",
                PodStatus {
                    container_statuses: Some(vec![container("mysqld", None)]),
                    ..PodStatus::default()
                },
            ),
            pod(
                "shop-1",
                PodStatus {
                    init_container_statuses: Some(vec![container("init", Some("ImagePullBackOff"))]),
                    container_statuses: Some(vec![container("mysqld", Some("PodInitializing"))]),
                    ..PodStatus::default()
                },
            ),
            pod(
                "shop-3",
                PodStatus {
                    conditions: Some(vec![PodCondition {
                        type_: "PodScheduled".into(),
                        status: "False".into(),
                        reason: Some("Unschedulable".into()),
                        message: Some("0/4 nodes are available".into()),
                        ..PodCondition::default()
                    }]),
                    ..PodStatus::default()
                },
            ),
            pod(
                "shop-4",
                PodStatus {
                    container_statuses: Some(vec![container("mysqld", Some("ContainerCreating"))]),
                    ..PodStatus::default()
                },
            ),
        ];
        let found: Vec<(String, Option<String>, String)> = failures(&pods)
            .into_iter()
            .map(|f| (f.pod, f.container, f.reason))
            .collect();
        assert_eq!(
            found,
            vec![
                ("shop-1".into(), Some("init".into()), "ImagePullBackOff".into()),
                ("shop-2".into(), Some("mysqld".into()), "CrashLoopBackOff".into()),
                ("shop-3".into(), None, "Unschedulable".into()),
            ]
        );
    }

    #[test]
    fn the_condition_names_every_failing_pod_and_is_cleared_once_set() {
        let failing = vec![PodFailure {
            pod: "shop-1".into(),
            container: Some("mysqld".into()),
            reason: "ImagePullBackOff".into(),
            message: "Back-off pulling image \"mariadb:nope\"".into(),
        }];
        let update = condition(&failing, &[]).unwrap();
        assert!(update.status);
        assert_eq!(update.reason, "ImagePullBackOff");
        assert!(
            update.message.starts_with(
                "pod shop-1 container mysqld: ImagePullBackOff (Back-off pulling image \"mariadb:nope\")"
            ),
            "{}",
            update.message
        );
        assert_eq!(
            condition(&[], &[]),
            None,
            "a healthy cluster does not carry the condition"
        );
        let set = Condition {
            type_: CONDITION.into(),
            status: "True".into(),
            reason: "ImagePullBackOff".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ),
        };
        let cleared = condition(&[], &[set]).unwrap();
        assert!(!cleared.status);
        assert_eq!(cleared.reason, "NoneFailing");
    }
}
