//! Reconciling an `EtcdCluster`: observe, decide one step, act, report.
//!
//! 1. Observe: the StatefulSet as it stands, and every member through the admin layer.
//! 2. Decide: [`crate::decide::decide`], a pure function of those facts.
//! 3. Act: apply the Kubernetes objects; take the one step, recording it in status first when
//!    it changes membership or disrupts a member.
//! 4. Report: status and conditions from what was observed, and an event for the step taken
//!    or refused.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::StatefulSet,
        core::v1::{Pod, Secret},
    },
    jiff::Timestamp,
};
use kube::{Api, ResourceExt, api::DeleteParams, runtime::controller::Action};
use quorum_core::{
    ReconcileError,
    apply::ignore_not_found,
    events::Severity,
    runner::Context,
    status::{latest, patch_status},
};

use crate::{
    admin::TlsMaterial,
    crd::{EtcdBackup, EtcdCluster, EtcdClusterStatus},
    decide::{Decision, Facts, InFlight, Step, decide},
    execute::{StepError, StepOutcome, execute},
    observe::EtcdClients,
    resolver::{MemberResolver, member_name},
    resources::{
        ClusterState, RestoreInit, bootstrap_members, build_client_service, build_config_map,
        build_peer_service, build_pod_disruption_budget, build_scheduled_backup, build_statefulset,
        client_service_name,
    },
    status::{build_status, describe, in_flight_from_status, step_reason, unhealthy_durations},
};

pub use quorum_core::config::MemberAddresses;

/// Operator-wide settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub cluster_domain: String,
    pub member_addresses: MemberAddresses,
    /// How old an observation may be for the gate to act on it.
    pub freshness: Duration,
    /// How long a member must be Unhealthy (per its peers) before it is replaced.
    pub replace_after: Duration,
    /// Whether backups may go to an `http://` S3 endpoint (credentials in clear text).
    pub allow_http_backups: bool,
    /// The operator's image, run by the restore init container.
    pub operator_image: String,
}

/// The operator's own state in the shared context.
pub struct State {
    pub clients: EtcdClients,
    pub settings: Settings,
}

impl quorum_core::runner::ForgetsClusters for State {
    fn forget_cluster<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(self.clients.forget_cluster(key))
    }
}

impl State {
    /// The resolver for one cluster's members.
    pub fn resolver(&self, cluster: &EtcdCluster) -> MemberResolver {
        let namespace = cluster.namespace().unwrap_or_default();
        match self.settings.member_addresses {
            MemberAddresses::Dns => {
                let tls = cluster.spec.tls.as_ref();
                MemberResolver::ClusterDns {
                    cluster: cluster.name_any(),
                    namespace,
                    cluster_domain: self.settings.cluster_domain.clone(),
                    client_tls: tls.is_some_and(|tls| tls.client_secret_name.is_some()),
                    peer_tls: tls.is_some_and(|tls| tls.peer_secret_name.is_some()),
                }
            }
            MemberAddresses::Loopback => MemberResolver::Loopback {
                namespace,
                cluster: cluster.name_any(),
            },
        }
    }
}

/// A failed reconcile, naming the call that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kubernetes(#[from] quorum_core::Error),
    #[error("reading {what}: {source}")]
    Read {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("deleting {what}: {source}")]
    Delete {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{step}: {source}")]
    Step {
        step: String,
        #[source]
        source: StepError,
    },
    /// The client TLS Secret (`spec.tls.clientSecretName`) does not exist (`missing: None`) or
    /// lacks a key. The operator does not fall back to plain HTTP.
    #[error("client TLS Secret {secret} {}", match missing {
        Some(key) => format!("has no (or an empty) `{key}`"),
        None => "does not exist".to_string(),
    })]
    TlsSecret {
        secret: String,
        missing: Option<&'static str>,
    },
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kubernetes(error) => error.metric_label(),
            Error::Read { .. } => "read",
            Error::Delete { .. } => "delete",
            Error::Step { .. } => "admin_step",
            Error::TlsSecret { .. } => "tls_secret",
        }
    }

    fn shared(&self) -> Option<&quorum_core::Error> {
        match self {
            Error::Kubernetes(error) => Some(error),
            _ => None,
        }
    }
}

/// Reconciles one `EtcdCluster`.
pub async fn reconcile(cluster: Arc<EtcdCluster>, context: Arc<Context<State>>) -> Result<Action, Error> {
    let state = &context.state;
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    // Status is this operator's memory (the step in flight, the volumes to wipe): decided on
    // as stored, never on the watch cache's copy (`quorum_core::status::latest`).
    let Some(cluster) = latest(&context.client, cluster.as_ref()).await? else {
        return Ok(Action::await_change());
    };
    // A deleted cluster of the same name may have left its StatefulSet (for a few seconds) or its
    // volumes (until a human removes them): nothing starts or is observed on them.
    if quorum_core::predecessor::held_back(
        &context.client,
        &context.events,
        cluster.as_ref(),
        &[client_service_name(&name)],
        cluster
            .status
            .as_ref()
            .map_or(&[][..], |status| status.conditions.as_slice()),
    )
    .await?
    {
        return Ok(Action::requeue(quorum_core::predecessor::RECHECK));
    }
    state
        .clients
        .set_tls(&key, client_tls(&context, &cluster).await?)
        .await;
    let resolver = state.resolver(&cluster);
    let status = cluster.status.as_ref();
    let now = Timestamp::now();

    // Observe.
    let statefulsets: Api<StatefulSet> = Api::namespaced(context.client.clone(), &namespace);
    let existing = statefulsets
        .get_opt(&client_service_name(&name))
        .await
        .map_err(|source| Error::Read {
            what: "StatefulSet",
            source,
        })?;
    let statefulset_replicas = existing
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.replicas)
        .map(|r| r.max(0) as usize);
    let desired = usize::try_from(cluster.spec.replicas).unwrap_or(0);
    let recorded_members = status.map_or(0, |s| s.members.len());
    // Only ordinals that may hold a member: probing one past them would fail on every pass and
    // keep that endpoint's circuit open for a healthy cluster. A member added but not yet in the
    // StatefulSet or status still shows in etcd's member list, as not answering.
    let candidates = statefulset_replicas
        .unwrap_or(0)
        .max(desired)
        .max(recorded_members);
    let view = state.clients.observe(&key, &resolver, candidates).await;
    let unhealthy_for = unhealthy_durations(status, now);
    let mut members = view.members.clone();
    for member in &mut members {
        member.unhealthy_for = unhealthy_for.get(&member_name(&name, member.ordinal)).copied();
    }
    let bootstrapped = status.is_some_and(|s| s.cluster_id.is_some()) || view.membership.is_some();
    let mut wipe_pending: Vec<usize> = status
        .map(|s| {
            s.wipe_pending
                .iter()
                .filter_map(|o| usize::try_from(*o).ok())
                .collect()
        })
        .unwrap_or_default();
    let mut in_flight = in_flight_from_status(status);

    // Status is computed from what this pass observed; `report` writes it (only if it changed).
    let report = async |decision: &Decision, in_flight: Option<&InFlight>, wipe_pending: &[usize]| {
        let status: EtcdClusterStatus =
            build_status(&cluster, &view, &members, decision, in_flight, wipe_pending, now);
        patch_status(
            &context.client,
            cluster.as_ref(),
            cluster.status.as_ref(),
            &status,
        )
        .await?;
        Ok::<(), Error>(())
    };

    // Decide.
    let pod_versions = member_pod_versions(&context, &cluster).await?;
    let decision = decide(&Facts {
        desired_members: desired,
        desired_version: cluster.spec.version.clone(),
        bootstrapped,
        statefulset_replicas,
        members: view.membership.as_ref().map(|_| members.clone()),
        wipe_pending: wipe_pending.clone(),
        pod_versions,
        in_flight: in_flight.clone(),
        freshness: state.settings.freshness,
        replace_after: state.settings.replace_after,
        now: std::time::Instant::now(),
    });
    tracing::info!(cluster = %key, ?decision, "decided");

    // Act: the objects first (so a deleted Service comes back whatever the step), then the step.
    let step = match &decision {
        Decision::Act(step) => Some(step.clone()),
        _ => None,
    };
    let applier = &context.applier;
    if !bootstrapped {
        let members = bootstrap_members(&cluster, &resolver, desired);
        applier
            .apply(&build_config_map(&cluster, ClusterState::New, &members)?)
            .await?;
    } else if let Some(membership) = view.membership.as_deref() {
        let mut initial: Vec<(String, String)> = membership
            .iter()
            .filter_map(|m| {
                let url = m.peer_urls.first()?;
                Some((
                    member_name(&name, resolver.ordinal_of_peer_url(url)?),
                    url.clone(),
                ))
            })
            .collect();
        initial.sort();
        applier
            .apply(&build_config_map(&cluster, ClusterState::Existing, &initial)?)
            .await?;
    }
    ensure_scheduled_backup(&context, &cluster).await?;
    applier.apply(&build_peer_service(&cluster)?).await?;
    applier.apply(&build_client_service(&cluster)?).await?;
    applier.apply(&build_pod_disruption_budget(&cluster)?).await?;
    let replicas = match step {
        Some(Step::Bootstrap { members }) => members,
        Some(Step::StartPod { ordinal }) => ordinal + 1,
        Some(Step::StopPod { ordinal }) => ordinal,
        _ => statefulset_replicas.unwrap_or_else(|| recorded_members.max(desired)),
    };
    let restore = match restore_source(&context, &cluster).await? {
        RestoreSource::None => None,
        RestoreSource::Ready(restore) => Some(restore),
        RestoreSource::NotReady(why) => {
            // Never bootstrap an empty cluster in place of the one the user asked to restore.
            if !bootstrapped && statefulset_replicas.is_none() {
                let wait = Decision::Wait(crate::decide::Wait {
                    reason: "RestoreSourceNotReady",
                    message: why.clone(),
                });
                context
                    .events
                    .publish(
                        cluster.as_ref(),
                        Severity::Warning,
                        "RestoreSourceNotReady",
                        "Restore",
                        why,
                    )
                    .await;
                report(&wait, in_flight.as_ref(), &wipe_pending).await?;
                return Ok(Action::requeue(Duration::from_secs(10)));
            }
            None
        }
    };
    applier
        .apply(&build_statefulset(
            &cluster,
            replicas as i32,
            &state.settings.cluster_domain,
            restore.as_ref(),
        )?)
        .await?;

    if let Some(step) = &step {
        if let Some(recorded) = step.in_flight() {
            // Written before the step is taken: a crash from here on resumes, not repeats.
            in_flight = Some(recorded);
            report(&decision, in_flight.as_ref(), &wipe_pending).await?;
        }
        match take(&context, &cluster, &resolver, &key, &view, step).await {
            Ok(StepOutcome::Done) => {
                context
                    .events
                    .publish(
                        cluster.as_ref(),
                        Severity::Normal,
                        step_reason(step),
                        "Reconcile",
                        describe(step),
                    )
                    .await;
                match step {
                    Step::ClearInFlight => in_flight = None,
                    Step::Replace { ordinal, .. } => wipe_pending.push(*ordinal),
                    Step::WipeMember { ordinal } => wipe_pending.retain(|o| o != ordinal),
                    _ => {}
                }
            }
            Ok(StepOutcome::NotYet(why)) => {
                tracing::info!(cluster = %key, ?step, %why, "etcd declined the step for now");
            }
            Err(error) => {
                // The membership is as it was; say why, and retry with backoff.
                context
                    .events
                    .publish(
                        cluster.as_ref(),
                        Severity::Warning,
                        "StepFailed",
                        "Reconcile",
                        format!("{}: {error}", describe(step)),
                    )
                    .await;
                let failed = Decision::Wait(crate::decide::Wait {
                    reason: "StepFailed",
                    message: format!("{} failed; nothing was changed: {error}", describe(step)),
                });
                report(&failed, in_flight.as_ref(), &wipe_pending).await?;
                return Err(error);
            }
        }
    }
    if let Decision::Wait(wait) = &decision {
        let severity = match wait.reason {
            "MemberUnknown" | "MemberUnhealthy" | "QuorumAtRisk" | "StaleObservation"
            | "NoMemberReachable" => Severity::Warning,
            _ => Severity::Normal,
        };
        context
            .events
            .publish(
                cluster.as_ref(),
                severity,
                wait.reason,
                "Waiting",
                wait.message.clone(),
            )
            .await;
    }
    if cluster.spec.replicas % 2 == 0 {
        context
            .events
            .publish(
                cluster.as_ref(),
                Severity::Warning,
                "EvenMemberCount",
                "Validate",
                format!(
                    "{} members tolerate as many failures as {}; an odd count is recommended",
                    cluster.spec.replicas,
                    cluster.spec.replicas - 1
                ),
            )
            .await;
    }

    // Report.
    report(&decision, in_flight.as_ref(), &wipe_pending).await?;
    Ok(match decision {
        Decision::Settled => Action::requeue(Duration::from_secs(60)),
        _ => Action::requeue(Duration::from_secs(5)),
    })
}

/// Takes one step: Kubernetes steps here, etcd's membership steps through [`execute`].
async fn take(
    context: &Context<State>,
    cluster: &EtcdCluster,
    resolver: &MemberResolver,
    key: &str,
    view: &crate::observe::ClusterView,
    step: &Step,
) -> Result<StepOutcome, Error> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let delete = |what: String| move |source| Error::Delete { what, source };
    match step {
        // Applied with the StatefulSet above.
        Step::Bootstrap { .. } | Step::StartPod { .. } | Step::StopPod { .. } | Step::ClearInFlight => {
            Ok(StepOutcome::Done)
        }
        Step::Upgrade { ordinal } => {
            let pod = member_name(&name, *ordinal);
            ignore_not_found(pods.delete(&pod, &DeleteParams::default()).await).map_err(delete(pod))?;
            Ok(StepOutcome::Done)
        }
        Step::WipeMember { ordinal } => {
            let pod = member_name(&name, *ordinal);
            quorum_core::wipe::wipe_member(&context.client, &namespace, &pod, None)
                .await
                .map_err(delete(pod))?;
            Ok(StepOutcome::Done)
        }
        admin_step => execute(&context.state.clients, key, resolver, view, admin_step)
            .await
            .map_err(|source| Error::Step {
                step: describe(admin_step),
                source,
            }),
    }
}

/// The material to reach members serving clients over TLS: `ca.crt`, `tls.crt` and `tls.key`
/// of `spec.tls.clientSecretName` (the certificate is presented as the operator's client
/// identity, so it must allow client authentication). `None` when clients use plain HTTP.
async fn client_tls(context: &Context<State>, cluster: &EtcdCluster) -> Result<Option<TlsMaterial>, Error> {
    let Some(secret_name) = cluster
        .spec
        .tls
        .as_ref()
        .and_then(|t| t.client_secret_name.as_ref())
    else {
        return Ok(None);
    };
    let namespace = cluster.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), &namespace);
    let incomplete = |missing| Error::TlsSecret {
        secret: format!("{namespace}/{secret_name}"),
        missing,
    };
    let secret = secrets
        .get_opt(secret_name)
        .await
        .map_err(|source| Error::Read {
            what: "client TLS Secret",
            source,
        })?
        .ok_or_else(|| incomplete(None))?;
    let data = secret.data.unwrap_or_default();
    let field = |key: &'static str| {
        data.get(key)
            .map(|value| value.0.clone())
            .filter(|value| !value.is_empty())
            .ok_or_else(|| incomplete(Some(key)))
    };
    Ok(Some(TlsMaterial {
        ca_pem: field("ca.crt")?,
        cert_pem: field("tls.crt")?,
        key_pem: field("tls.key")?,
    }))
}

/// The version label of each member pod that exists and is not terminating, by ordinal.
async fn member_pod_versions(
    context: &Context<State>,
    cluster: &EtcdCluster,
) -> Result<std::collections::BTreeMap<usize, String>, Error> {
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &cluster.namespace().unwrap_or_default());
    let selector = crate::resources::member_selector_string(cluster);
    let listed = pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::Read {
            what: "member pods",
            source,
        })?;
    let name = cluster.name_any();
    Ok(listed
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter_map(|pod| {
            let ordinal = crate::resolver::ordinal_of(&name, &pod.name_any())?;
            let version = pod.labels().get(crate::resources::VERSION_LABEL)?.clone();
            Some((ordinal, version))
        })
        .collect())
}

/// Where a cluster restored from a backup gets its data.
enum RestoreSource {
    /// Not a restored cluster.
    None,
    Ready(RestoreInit),
    /// The named backup has no stored snapshot (yet), or does not exist.
    NotReady(String),
}

async fn restore_source(context: &Context<State>, cluster: &EtcdCluster) -> Result<RestoreSource, Error> {
    let Some(source) = &cluster.spec.restore_from else {
        return Ok(RestoreSource::None);
    };
    let backups: Api<EtcdBackup> =
        Api::namespaced(context.client.clone(), &cluster.namespace().unwrap_or_default());
    let backup = backups
        .get_opt(&source.backup_name)
        .await
        .map_err(|source| Error::Read {
            what: "EtcdBackup",
            source,
        })?;
    let Some(backup) = backup else {
        return Ok(RestoreSource::NotReady(format!(
            "EtcdBackup {} does not exist",
            source.backup_name
        )));
    };
    let Some(snapshot) = backup.status.as_ref().and_then(|s| s.last_snapshot.clone()) else {
        return Ok(RestoreSource::NotReady(format!(
            "EtcdBackup {} has no stored snapshot yet",
            source.backup_name
        )));
    };
    let s3 = backup.spec.destination.s3.as_ref();
    Ok(RestoreSource::Ready(RestoreInit {
        image: context.state.settings.operator_image.clone(),
        location: snapshot.location,
        sha256: snapshot.sha256,
        s3_endpoint: s3.and_then(|s3| s3.endpoint.clone()),
        s3_region: s3.and_then(|s3| s3.region.clone()),
        credentials_secret_name: s3.map(|s3| s3.credentials_secret_name.clone()),
        allow_http: context.state.settings.allow_http_backups,
    }))
}

/// A cluster's backup policy is carried out by an `EtcdBackup` it owns, `<cluster>-scheduled`;
/// removing the policy removes it.
async fn ensure_scheduled_backup(context: &Context<State>, cluster: &EtcdCluster) -> Result<(), Error> {
    let name = quorum_core::naming::child_name(&cluster.name_any(), "scheduled");
    match build_scheduled_backup(cluster, &name)? {
        Some(backup) => {
            context.applier.apply(&backup).await?;
        }
        None => {
            let backups: Api<EtcdBackup> =
                Api::namespaced(context.client.clone(), &cluster.namespace().unwrap_or_default());
            ignore_not_found(backups.delete(&name, &DeleteParams::default()).await).map_err(|source| {
                Error::Delete {
                    what: format!("EtcdBackup {name}"),
                    source,
                }
            })?;
        }
    }
    Ok(())
}
