//! Reconciling a `RedisCluster`: the Kubernetes side shared by both modes, then one pass of
//! the mode's own story (observe, decide one step, act, report) in [`crate::replication`] or
//! [`crate::sharded`].

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::StatefulSet,
        core::v1::{Pod, Secret},
    },
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
    runtime::controller::Action,
};
use quorum_core::{
    ReconcileError,
    apply::ignore_not_found,
    availability::retry::CallError,
    conditions::{ConditionType, ConditionUpdate, set_condition},
    events::Severity,
    pass::Reason as _,
    pod::generate_password,
    runner::Context,
    status::{latest, patch_status},
    wakeups::ObjectKey,
};

use crate::{
    address::Addresses,
    admin::{AdminError, Credentials},
    clients::RedisClients,
    crd::{Mode, RedisBackup, RedisCluster, RedisClusterStatus, forbidden_config_keys},
    reasons::Reason,
    resources::{
        NODE_COMPONENT, PASSWORD_KEY, ROLE_LABEL, RoleLabel, SENTINEL_COMPONENT, auth_secret_name,
        build_auth_secret, build_client_service, build_config_map, build_headless_service,
        build_pod_disruption_budget, build_primary_service, build_replicas_service, build_scheduled_backup,
        build_sentinel_config_map, build_sentinel_service, node_selector_string, ordinal_of,
        statefulset_name,
    },
    restore::{RestoreRefusal, plan_restore, restore_status},
    sentinel_events::SentinelEvents,
};

pub use quorum_core::config::MemberAddresses;

/// Operator-wide settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub cluster_domain: String,
    pub member_addresses: MemberAddresses,
    /// Whether backups may go to an `http://` S3 endpoint.
    pub allow_http_backups: bool,
    /// The operator's own image: a restored cluster's data pods run it as their restore step.
    pub operator_image: String,
    /// How long a settled cluster waits for its next pass when nothing wakes it sooner (a watched
    /// object changing, a Sentinel switching the primary).
    pub settled_recheck: Duration,
}

/// The operator's own state in the shared context.
pub struct State {
    pub clients: RedisClients,
    pub settings: Settings,
    /// Subscriptions to the Sentinels' primary switches of replication-mode clusters.
    pub sentinel_events: SentinelEvents,
}

impl quorum_core::runner::ForgetsClusters for State {
    fn forget_cluster<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(self.clients.forget_cluster(key))
    }
}

impl State {
    pub fn addresses(&self, cluster: &RedisCluster) -> Addresses {
        let namespace = cluster.namespace().unwrap_or_default();
        match self.settings.member_addresses {
            MemberAddresses::Dns => Addresses::ClusterDns {
                cluster: cluster.name_any(),
                namespace,
                cluster_domain: self.settings.cluster_domain.clone(),
            },
            MemberAddresses::Loopback => Addresses::Loopback {
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
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// An admin step the servers refused or did not answer; they are as they were, or as a
    /// retry of the step expects them.
    #[error("{step}: {source}")]
    Step {
        step: String,
        #[source]
        source: CallError<AdminError>,
    },
    /// A Secret the cluster needs is missing or lacks its key. Nothing is started without it.
    #[error("Secret {secret} {problem}")]
    Secret { secret: String, problem: &'static str },
    /// `spec.config` overrides settings the operator owns.
    #[error("spec.config sets {0}, which the operator owns")]
    ForbiddenConfig(String),
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kubernetes(error) => error.metric_label(),
            Error::Api { .. } => "api",
            Error::Step { .. } => "admin_step",
            Error::Secret { .. } => "secret",
            Error::ForbiddenConfig(_) => "invalid_spec",
        }
    }

    /// A spec that overrides what the operator owns stays invalid until it is changed: one
    /// warning, then the pass waits for the change instead of retrying with backoff.
    fn is_permanent(&self) -> bool {
        matches!(self, Error::ForbiddenConfig(_))
    }

    fn shared(&self) -> Option<&quorum_core::Error> {
        match self {
            Error::Kubernetes(error) => Some(error),
            _ => None,
        }
    }
}

pub fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// What a mode's pass needs from the shared part.
pub struct Pass<'a> {
    pub context: &'a Context<State>,
    pub cluster: &'a RedisCluster,
    /// `namespace/name`, the clients' cluster key.
    pub key: String,
    pub addresses: Addresses,
    pub now: Timestamp,
}

/// Where a pass left the cluster, for the `Progressing` condition, its one event and the
/// requeue.
pub type Progress = quorum_core::pass::Progress<Reason>;

/// Reconciles one `RedisCluster`.
pub async fn reconcile(cluster: Arc<RedisCluster>, context: Arc<Context<State>>) -> Result<Action, Error> {
    let state = &context.state;
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    // Status is this operator's memory (the primary, the rebalance in flight, the restore recorded):
    // decided on as stored, never on the watch cache's copy (`quorum_core::status::latest`).
    let Some(cluster) = latest(&context.client, cluster.as_ref()).await? else {
        state
            .sentinel_events
            .forget(&ObjectKey::new(namespace.as_str(), name.as_str()));
        return Ok(Action::await_change());
    };
    // A deleted cluster of the same name may have left its StatefulSet (for a few seconds) or its
    // volumes (until a human removes them): nothing starts or is observed on them.
    if quorum_core::predecessor::held_back(
        &context.client,
        &context.events,
        cluster.as_ref(),
        &[
            crate::resources::statefulset_name(&name),
            crate::resources::sentinel_statefulset_name(&name),
        ],
        cluster
            .status
            .as_ref()
            .map_or(&[][..], |status| status.conditions.as_slice()),
    )
    .await?
    {
        return Ok(Action::requeue(quorum_core::predecessor::RECHECK));
    }

    let forbidden = forbidden_config_keys(&cluster.spec.config);
    if !forbidden.is_empty() {
        let error = Error::ForbiddenConfig(forbidden.join(", "));
        publish(
            &context,
            &cluster,
            Severity::Warning,
            Reason::InvalidSpec,
            error.to_string(),
        )
        .await;
        return Err(error);
    }

    // Credentials first: nothing can be observed or started without them.
    if cluster.spec.auth_secret.is_none() {
        ensure_generated_secret(&context, &cluster).await?;
    }
    let password = read_password(&context, &namespace, &auth_secret_name(&cluster)).await?;
    state
        .clients
        .set_credentials(&key, Credentials::password(password))
        .await;

    // The objects every pass needs, applied first so a deleted one comes back whatever the
    // step.
    let applier = &context.applier;
    applier.apply(&build_config_map(&cluster)?).await?;
    applier.apply(&build_headless_service(&cluster)?).await?;
    applier
        .apply(&build_pod_disruption_budget(&cluster, NODE_COMPONENT)?)
        .await?;
    match cluster.spec.mode {
        Mode::Replication => {
            applier.apply(&build_sentinel_config_map(&cluster)?).await?;
            applier.apply(&build_sentinel_service(&cluster)?).await?;
            applier
                .apply(&build_pod_disruption_budget(&cluster, SENTINEL_COMPONENT)?)
                .await?;
            applier.apply(&build_primary_service(&cluster)?).await?;
            applier.apply(&build_replicas_service(&cluster)?).await?;
        }
        Mode::Cluster => {
            applier.apply(&build_client_service(&cluster)?).await?;
        }
    }
    ensure_scheduled_backup(&context, &cluster).await?;

    // A cluster created from a backup forms only once its snapshots are known: never an
    // empty cluster in place of the one asked for.
    let cluster = match restore_gate(&context, &cluster).await? {
        Some(cluster) => cluster,
        None => return Ok(Action::requeue(Duration::from_secs(10))),
    };

    let pass = Pass {
        context: &context,
        cluster: &cluster,
        addresses: state.addresses(&cluster),
        key,
        now: Timestamp::now(),
    };
    let progress = match cluster.spec.mode {
        Mode::Replication => crate::replication::pass(&pass).await?,
        Mode::Cluster => crate::sharded::pass(&pass).await?,
    };
    Ok(match progress {
        Progress::Settled => Action::requeue(state.settings.settled_recheck),
        _ => Action::requeue(Duration::from_secs(2)),
    })
}

impl Pass<'_> {
    pub fn name(&self) -> String {
        self.cluster.name_any()
    }

    pub fn namespace(&self) -> String {
        self.cluster.namespace().unwrap_or_default()
    }

    /// The replica count of one of the cluster's StatefulSets; `None` when it does not exist.
    pub async fn statefulset_replicas(&self, name: &str) -> Result<Option<usize>, Error> {
        let statefulsets: Api<StatefulSet> = Api::namespaced(self.context.client.clone(), &self.namespace());
        Ok(statefulsets
            .get_opt(name)
            .await
            .map_err(api(format!("reading StatefulSet {name}")))?
            .and_then(|s| s.spec?.replicas)
            .map(|r| r.max(0) as usize))
    }

    pub async fn apply<K>(&self, object: &K) -> Result<(), Error>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + serde::Serialize
            + serde::de::DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        self.context.applier.apply(object).await?;
        Ok(())
    }

    /// Publishes one of the pass's own events; its outcome is published with
    /// [`quorum_core::pass::publish`].
    pub async fn publish(&self, severity: Severity, reason: Reason, message: impl Into<String>) {
        publish(self.context, self.cluster, severity, reason, message.into()).await;
    }

    /// Writes the status when it changed.
    pub async fn report(&self, status: &RedisClusterStatus) -> Result<(), Error> {
        patch_status(
            &self.context.client,
            self.cluster,
            self.cluster.status.as_ref(),
            status,
        )
        .await?;
        Ok(())
    }

    /// Sets each data pod's role label where it differs from `roles`; pods not in `roles` keep
    /// theirs (a node the operator cannot see is not moved in or out of a Service on a guess).
    pub async fn set_role_labels(&self, roles: &BTreeMap<usize, RoleLabel>) -> Result<(), Error> {
        let name = self.name();
        let pods: Api<Pod> = Api::namespaced(self.context.client.clone(), &self.namespace());
        let listed = pods
            .list(&ListParams::default().labels(&node_selector_string(self.cluster)))
            .await
            .map_err(api("listing data pods"))?;
        for pod in listed.items {
            let pod_name = pod.name_any();
            let Some(role) = ordinal_of(&name, &pod_name).and_then(|o| roles.get(&o)) else {
                continue;
            };
            if pod.labels().get(ROLE_LABEL).map(String::as_str) == Some(role.as_str()) {
                continue;
            }
            let patch = serde_json::json!({"metadata": {"labels": {ROLE_LABEL: role.as_str()}}});
            pods.patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(api(format!("labelling pod {pod_name}")))?;
        }
        Ok(())
    }
}

/// Sets `Ready`, `Progressing` and `Degraded` on `status` from a pass's findings.
pub fn set_conditions(
    status: &mut RedisClusterStatus,
    cluster: &RedisCluster,
    ready: ConditionUpdate,
    progress: &Progress,
    degraded: Option<(&'static str, String)>,
    now: Timestamp,
) {
    let generation = cluster.metadata.generation;
    status.observed_generation = generation;
    set_condition(&mut status.conditions, ready, generation, now);
    let progressing = progress.progressing("the deployment matches its spec");
    set_condition(&mut status.conditions, progressing, generation, now);
    let degraded = match degraded {
        Some((reason, message)) => ConditionUpdate::new(ConditionType::Degraded, true, reason, message),
        None => ConditionUpdate::new(
            ConditionType::Degraded,
            false,
            "AllHealthy",
            "every node the operator can see is healthy",
        ),
    };
    set_condition(&mut status.conditions, degraded, generation, now);
}

async fn publish(
    context: &Context<State>,
    cluster: &RedisCluster,
    severity: Severity,
    reason: Reason,
    message: String,
) {
    context
        .events
        .publish(cluster, severity, reason.as_str(), "Reconcile", message)
        .await;
}

/// Creates the generated password Secret once; an existing one is never rewritten.
async fn ensure_generated_secret(context: &Context<State>, cluster: &RedisCluster) -> Result<(), Error> {
    let secret = build_auth_secret(cluster, generate_password())?;
    context.applier.create_once(&secret).await?;
    Ok(())
}

/// The password in the Secret `name`, as the servers are configured with it.
pub async fn read_password(context: &Context<State>, namespace: &str, name: &str) -> Result<String, Error> {
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(api(format!("reading Secret {name}")))?
        .ok_or_else(|| Error::Secret {
            secret: format!("{namespace}/{name}"),
            problem: "does not exist",
        })?;
    secret
        .data
        .unwrap_or_default()
        .remove(PASSWORD_KEY)
        .and_then(|bytes| String::from_utf8(bytes.0).ok())
        .map(|text| text.trim_end_matches(['\n', '\r']).to_string())
        .filter(|text| !text.is_empty())
        .ok_or_else(|| Error::Secret {
            secret: format!("{namespace}/{name}"),
            problem: "has no (or an empty, or a non-UTF-8) `password`",
        })
}

/// For a cluster with `restoreFrom`, the cluster to form with its restore recorded in
/// `status.restore` (which the data StatefulSet's restore step is built from), or `None` while
/// it must wait, with a condition and an event saying why. The snapshots are recorded once,
/// before the data StatefulSet exists; a cluster that already has one keeps what it has.
async fn restore_gate(
    context: &Context<State>,
    cluster: &Arc<RedisCluster>,
) -> Result<Option<Arc<RedisCluster>>, Error> {
    let Some(source) = &cluster.spec.restore_from else {
        return Ok(Some(cluster.clone()));
    };
    let recorded = cluster.status.as_ref().and_then(|s| s.restore.as_ref());
    if recorded.is_some() {
        return Ok(Some(cluster.clone()));
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let statefulset = statefulset_name(&cluster.name_any());
    let statefulsets: Api<StatefulSet> = Api::namespaced(context.client.clone(), &namespace);
    if statefulsets
        .get_opt(&statefulset)
        .await
        .map_err(api(format!("reading StatefulSet {statefulset}")))?
        .is_some()
    {
        // Its nodes have data of their own, which a restore must never replace.
        publish(
            context,
            cluster,
            Severity::Warning,
            Reason::RestoreIgnored,
            "restoreFrom applies only to a new deployment; this one already has data nodes".into(),
        )
        .await;
        return Ok(Some(cluster.clone()));
    }
    let backups: Api<RedisBackup> = Api::namespaced(context.client.clone(), &namespace);
    let backup = backups
        .get_opt(&source.backup_name)
        .await
        .map_err(api(format!("reading RedisBackup {}", source.backup_name)))?;
    let (reason, message) = match plan_restore(&cluster.spec, &source.backup_name, backup.as_ref()) {
        Ok(snapshots) => {
            let backup = backup.expect("a plan comes from an existing backup");
            let settings = &context.state.settings;
            let mut status = cluster.status.clone().unwrap_or_default();
            status.restore = Some(restore_status(
                &backup,
                snapshots,
                &settings.operator_image,
                settings.allow_http_backups,
            ));
            patch_status(
                &context.client,
                cluster.as_ref(),
                cluster.status.as_ref(),
                &status,
            )
            .await?;
            let mut restored = cluster.as_ref().clone();
            restored.status = Some(status);
            return Ok(Some(Arc::new(restored)));
        }
        Err(RestoreRefusal::NotReady(message)) => (Reason::RestoreSourceNotReady, message),
        Err(RestoreRefusal::Invalid(message)) => (Reason::RestoreSourceInvalid, message),
    };
    let mut status = cluster.status.clone().unwrap_or_default();
    let progress = Progress::waiting(reason, message.clone());
    let ready = ConditionUpdate::new(ConditionType::Ready, false, reason, message.clone());
    set_conditions(&mut status, cluster, ready, &progress, None, Timestamp::now());
    patch_status(
        &context.client,
        cluster.as_ref(),
        cluster.status.as_ref(),
        &status,
    )
    .await?;
    publish(context, cluster, Severity::Warning, reason, message).await;
    Ok(None)
}

/// A cluster's backup policy is carried out by a `RedisBackup` it owns, `<cluster>-scheduled`;
/// removing the policy removes it.
async fn ensure_scheduled_backup(context: &Context<State>, cluster: &RedisCluster) -> Result<(), Error> {
    let name = quorum_core::naming::child_name(&cluster.name_any(), "scheduled");
    match build_scheduled_backup(cluster, &name)? {
        Some(backup) => {
            context.applier.apply(&backup).await?;
        }
        None => {
            let backups: Api<RedisBackup> =
                Api::namespaced(context.client.clone(), &cluster.namespace().unwrap_or_default());
            ignore_not_found(backups.delete(&name, &DeleteParams::default()).await)
                .map_err(api(format!("deleting RedisBackup {name}")))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_invalid_spec_waits_for_a_change_instead_of_retrying() {
        assert!(Error::ForbiddenConfig("requirepass".into()).is_permanent());
        // A missing Secret can appear without the cluster changing: that is retried.
        let missing = Error::Secret {
            secret: "auth".into(),
            problem: "is missing",
        };
        assert!(!missing.is_permanent());
    }
}
