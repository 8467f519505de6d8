//! Observing a replica set: every member asked about itself, the primary about the set, and the
//! member pods as Kubernetes has them.

use std::{collections::BTreeMap, sync::Arc};

use futures::future::join_all;
use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Pod};
use kube::ResourceExt;
use quorum_core::{availability::retry::Idempotency, runner::Context};

use crate::{
    admin::{AdminError, FeatureCompatibility, ReplConfig, ReplStatus, StatusMember},
    clients::MongoClients,
    crd::MongoDBReplicaSet,
    decide::{Desired, Observed, Reach, SeenMember},
    resources::{
        ARBITER_COMPONENT, MEMBER_COMPONENT, VERSION_LABEL, arbiter_name, arbiter_statefulset_name,
        member_name, selector, statefulset_name,
    },
};

use crate::pass::{Error, State};

/// Asks every member about itself, and the primary about the set.
pub(crate) async fn observe(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    key: &str,
    desired: &Desired,
) -> Result<Observed, Error> {
    let clients = &context.state.clients;
    let pods = member_pods(context, replica_set).await?;
    let mut members = join_all(desired.members.iter().map(|member| {
        see(
            clients,
            key,
            &member.name,
            &member.host,
            pods.get(&member.name).map(|(pod, outdated)| (pod, *outdated)),
        )
    }))
    .await;

    let mut primary = the_primary(&members);
    let (mut config, mut status, mut feature_compatibility) = (None, None, None);
    if let Some(primary) = &primary {
        (config, status, feature_compatibility) = read_primary(clients, key, primary).await;
    } else {
        // Without a primary, the newest configuration any member holds says who belongs.
        let answered: Vec<String> = members
            .iter()
            .filter(|member| member.hello().is_some_and(|hello| hello.set_name.is_some()))
            .map(|member| member.host.clone())
            .collect();
        for host in answered {
            let held = read(clients, key, &host, "replSetGetConfig", |admin| async move {
                admin.config().await
            })
            .await
            .flatten();
            if let Some(held) = held
                && config
                    .as_ref()
                    .is_none_or(|current: &ReplConfig| held.version > current.version)
            {
                config = Some(held);
            }
        }
    }

    // Members still configured but no longer asked for: seen too, so they leave safely.
    if let Some(config) = &config {
        let extra: Vec<(String, String)> = config
            .members
            .iter()
            .filter(|member| !desired.members.iter().any(|d| d.host == member.host))
            .map(|member| {
                (
                    member_name_of(replica_set, context, &member.host),
                    member.host.clone(),
                )
            })
            .collect();
        for (name, host) in extra {
            members.push(
                see(
                    clients,
                    key,
                    &name,
                    &host,
                    pods.get(&name).map(|(pod, outdated)| (pod, *outdated)),
                )
                .await,
            );
        }
    }
    // The primary may be a member no longer asked for (a scale-in whose leaving member leads):
    // it steps down before it leaves, so it must be seen as the primary.
    if primary.is_none()
        && config.is_some()
        && let Some(leaving) = the_primary(&members)
    {
        let (held, held_status, held_compatibility) = read_primary(clients, key, &leaving).await;
        // What a secondary held stays the configuration if the primary's cannot be read.
        config = held.or(config);
        (status, feature_compatibility) = (held_status, held_compatibility);
        primary = Some(leaving);
    }

    let repair = quorum_core::repair::request(
        replica_set,
        replica_set
            .status
            .as_ref()
            .and_then(|status| status.repair.as_ref()),
    );
    let repair_claim = match &repair {
        Some(request) => quorum_core::repair::standing_claim(
            &context.client,
            &replica_set.namespace().unwrap_or_default(),
            &request.member,
        )
        .await
        .map_err(Error::api("reading the data claim of the member to repair"))?,
        None => None,
    };
    Ok(Observed {
        initiated_before: replica_set
            .status
            .as_ref()
            .is_some_and(|status| status.initiated_at.is_some()),
        members,
        config,
        status,
        primary,
        feature_compatibility,
        restore_pending: replica_set.spec.restore_from.is_some()
            && replica_set
                .status
                .as_ref()
                .is_none_or(|status| status.restored_from.is_none()),
        repair,
        repair_claim,
        recovery: quorum_core::recovery::request(
            replica_set,
            replica_set
                .status
                .as_ref()
                .and_then(|status| status.recovery.as_ref()),
            |_| None,
        ),
    })
}

/// The pod name of the member known as `host`: data members by ordinal, the arbiter, or the
/// host itself when it matches no pod the set could have.
pub(crate) fn member_name_of(
    replica_set: &MongoDBReplicaSet,
    context: &Context<State>,
    host: &str,
) -> String {
    let name = replica_set.name_any();
    let state = &context.state;
    if state.host(replica_set, &arbiter_statefulset_name(&name), 0) == host {
        return arbiter_name(&name);
    }
    (0..crate::crd::MAX_MEMBERS as usize)
        .find(|ordinal| state.host(replica_set, &statefulset_name(&name), *ordinal) == host)
        .map_or_else(|| host.to_string(), |ordinal| member_name(&name, ordinal))
}

pub(crate) async fn see(
    clients: &MongoClients,
    key: &str,
    name: &str,
    host: &str,
    pod: Option<(&Pod, bool)>,
) -> SeenMember {
    let hello = clients
        .member(key, host, "hello", Idempotency::Read, |admin| async move {
            admin.hello().await
        })
        .await;
    let reach = match hello {
        Ok(hello) => Reach::Answered(hello),
        Err(failure) => Reach::Unknown(failure.to_string()),
    };
    let server_version = match &reach {
        Reach::Answered(_) => {
            read(clients, key, host, "buildInfo", |admin| async move {
                admin.server_version().await
            })
            .await
        }
        Reach::Unknown(_) => None,
    };
    // A member of a set that neither serves nor votes as an arbiter is asked what it is doing:
    // only its own word says whether it is too stale to catch up.
    let idle = match &reach {
        Reach::Answered(hello) => {
            hello.set_name.is_some() && !hello.is_writable_primary && !hello.secondary && !hello.arbiter_only
        }
        Reach::Unknown(_) => false,
    };
    let too_stale = idle
        && read(clients, key, host, "replSetGetStatus", |admin| async move {
            admin.status().await
        })
        .await
        .flatten()
        .is_some_and(|status| status.own().is_some_and(StatusMember::too_stale));
    SeenMember {
        name: name.to_string(),
        host: host.to_string(),
        pod_uid: pod.and_then(|(pod, _)| pod.uid()),
        pod_version: pod.and_then(|(pod, _)| pod.labels().get(VERSION_LABEL).cloned()),
        pod_outdated: pod.is_some_and(|(_, outdated)| outdated),
        pod_pending: pod.is_some_and(|(pod, _)| quorum_core::rollout::runs_nothing(pod)),
        pod_ready: pod.is_some_and(|(pod, _)| quorum_core::pod::is_ready(pod)),
        reach,
        server_version,
        too_stale,
    }
}

/// A read whose failure leaves the answer unknown.
pub(crate) async fn read<T, F, Fut>(
    clients: &MongoClients,
    key: &str,
    host: &str,
    verb: &'static str,
    call: F,
) -> Option<T>
where
    F: Fn(crate::admin::MongoAdmin) -> Fut,
    Fut: Future<Output = Result<T, AdminError>>,
{
    match clients.member(key, host, verb, Idempotency::Read, call).await {
        Ok(value) => Some(value),
        Err(failure) => {
            tracing::debug!(%host, verb, %failure, "read failed");
            None
        }
    }
}

/// The set's member pods (data and arbiter) by name, each with whether it runs an older
/// template than its StatefulSet's current one (never, while that is not known).
pub(crate) async fn member_pods(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
) -> Result<BTreeMap<String, (Pod, bool)>, Error> {
    let namespace = replica_set.namespace().unwrap_or_default();
    let name = replica_set.name_any();
    let mut by_name = BTreeMap::new();
    for (component, statefulset) in [
        (MEMBER_COMPONENT, statefulset_name(&name)),
        (ARBITER_COMPONENT, arbiter_statefulset_name(&name)),
    ] {
        let listed = context
            .pods(&namespace, &selector(replica_set, component))
            .await
            .map_err(Error::api("listing member pods"))?;
        if listed.is_empty() {
            continue;
        }
        let statefulset = context
            .read::<StatefulSet>(&namespace, &statefulset)
            .await
            .map_err(Error::api(format!("reading StatefulSet {statefulset}")))?;
        let revision = statefulset
            .as_deref()
            .and_then(quorum_core::rollout::current_revision);
        for pod in listed.into_iter().map(Arc::unwrap_or_clone) {
            if pod.metadata.deletion_timestamp.is_none() {
                let outdated = revision
                    .is_some_and(|revision| quorum_core::rollout::runs_older_template(&pod, revision));
                by_name.insert(pod.name_any(), (pod, outdated));
            }
        }
    }
    Ok(by_name)
}

/// The one member that answers as the writable primary; `None` with none or several.
fn the_primary(members: &[SeenMember]) -> Option<String> {
    let primaries: Vec<&SeenMember> = members
        .iter()
        .filter(|member| member.hello().is_some_and(|hello| hello.is_writable_primary))
        .collect();
    match primaries.as_slice() {
        [primary] => Some(primary.host.clone()),
        _ => None,
    }
}

/// The configuration, status and feature compatibility version, as the primary holds them.
async fn read_primary(
    clients: &MongoClients,
    key: &str,
    primary: &str,
) -> (
    Option<ReplConfig>,
    Option<ReplStatus>,
    Option<FeatureCompatibility>,
) {
    let config = read(clients, key, primary, "replSetGetConfig", |admin| async move {
        admin.config().await
    })
    .await
    .flatten();
    let status = read(clients, key, primary, "replSetGetStatus", |admin| async move {
        admin.status().await
    })
    .await
    .flatten();
    let feature_compatibility = read(clients, key, primary, "getParameter", |admin| async move {
        admin.feature_compatibility_version().await
    })
    .await;
    (config, status, feature_compatibility)
}
