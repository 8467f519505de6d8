//! Reconciling a `MySQLCluster`: observe, decide one step, act, report.
//!
//! 1. Observe: the StatefulSet, the member pods' role labels, every member through the admin
//!    layer, and for a cluster created from a backup and not yet restored, that backup.
//! 2. Decide: [`crate::decide::decide`], a pure function of those facts.
//! 3. Act: apply the Kubernetes objects; fence a failing primary out of the primary Service;
//!    take the one step, recording it in status first when it changes the primary, removes a
//!    member or restores a backup; set the pods' role labels from what is now true.
//! 4. Report: status and conditions from what was observed, and an event for the step taken
//!    or refused.

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
    backup::{backup_target, credentials},
    events::Severity,
    runner::Context,
    status::{latest, patch_status},
};
use secrecy::SecretString;
use sha2::{Digest, Sha256};

use crate::{
    address::Addresses,
    admin::{Credentials, gtid::GtidPosition},
    crd::{
        Access, BackupRecord, FailoverRecord, MySQLBackup, MySQLCluster, RestoreRecord,
        SWITCHOVER_ANNOTATION, forbidden_config_keys,
    },
    decide::{Decision, Facts, InFlight, Restore, Step, Wait, decide},
    execute::{StepContext, StepError, StepOutcome, execute},
    observe::{ClusterView, MySqlClients},
    resources::{
        PASSWORD_KEY, ROLE_LABEL, binlog_expire_seconds, build_config_map, build_headless_service,
        build_password_secret, build_pod_disruption_budget, build_primary_service, build_replicas_service,
        build_scheduled_backup, build_statefulset, generated_root_secret_name, member_name,
        member_selector_string, ordinal_of, replication_secret_name, root_secret_name, semi_sync,
        statefulset_name,
    },
    restore::StoredSnapshot,
    status::{build_status, describe, failover_record, in_flight_from_status, role_labels, step_reason},
};

pub use quorum_core::config::MemberAddresses;

/// Operator-wide settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub cluster_domain: String,
    pub member_addresses: MemberAddresses,
    /// How old an observation may be for the decision to act on it.
    pub freshness: Duration,
    /// Whether backups may go to an `http://` S3 endpoint.
    pub allow_http_backups: bool,
}

/// The operator's own state in the shared context.
pub struct State {
    pub clients: MySqlClients,
    pub settings: Settings,
}

impl quorum_core::runner::ForgetsClusters for State {
    fn forget_cluster<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(self.clients.forget_cluster(key))
    }
}

impl State {
    pub fn addresses(&self, cluster: &MySQLCluster) -> Addresses {
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
    #[error("{step}: {source}")]
    Step {
        step: String,
        #[source]
        source: StepError,
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

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// Reconciles one `MySQLCluster`.
pub async fn reconcile(cluster: Arc<MySQLCluster>, context: Arc<Context<State>>) -> Result<Action, Error> {
    let state = &context.state;
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    let now = Timestamp::now();
    // Status is this operator's memory (the primary, the step in flight, the restore taken):
    // decided on as stored, never on the watch cache's copy (`quorum_core::status::latest`).
    let Some(cluster) = latest(&context.client, cluster.as_ref()).await? else {
        return Ok(Action::await_change());
    };
    // A deleted cluster of the same name may have left its StatefulSet (for a few seconds) or its
    // volumes (until a human removes them): nothing starts or is observed on them.
    if quorum_core::predecessor::held_back(
        &context.client,
        &context.events,
        cluster.as_ref(),
        &[crate::resources::statefulset_name(&name)],
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
        context
            .events
            .publish(
                cluster.as_ref(),
                Severity::Warning,
                "InvalidSpec",
                "Validate",
                error.to_string(),
            )
            .await;
        return Err(error);
    }

    // Credentials first: nothing can be observed or started without them.
    ensure_generated_secret(
        &context,
        &cluster,
        generated_root_secret_name(&name),
        cluster.spec.root_password_secret.is_none(),
    )
    .await?;
    ensure_generated_secret(&context, &cluster, replication_secret_name(&name), true).await?;
    let root_password = read_password(&context, &namespace, &root_secret_name(&cluster)).await?;
    let replication_password = read_password(&context, &namespace, &replication_secret_name(&name)).await?;
    let server_ca = match &cluster.spec.tls {
        Some(tls) => Some(read_server_ca(&context, &namespace, &tls.secret_name).await?),
        None => None,
    };
    state
        .clients
        .set_credentials(
            &key,
            cluster.spec.flavor,
            Credentials {
                user: "root".into(),
                password: root_password,
                server_ca,
            },
        )
        .await;
    let addresses = state.addresses(&cluster);

    // Observe.
    let statefulsets: Api<StatefulSet> = Api::namespaced(context.client.clone(), &namespace);
    let statefulset_replicas = statefulsets
        .get_opt(&statefulset_name(&name))
        .await
        .map_err(api("reading the StatefulSet"))?
        .and_then(|s| s.spec?.replicas)
        .map(|r| r.max(0) as usize);
    let view = state
        .clients
        .observe(&key, &addresses, statefulset_replicas.unwrap_or(0))
        .await;
    let mut primary = cluster
        .status
        .as_ref()
        .and_then(|s| s.primary.as_deref())
        .and_then(|p| ordinal_of(&name, p));
    let mut in_flight = in_flight_from_status(&cluster);
    let switchover_to = cluster
        .annotations()
        .get(SWITCHOVER_ANNOTATION)
        .and_then(|target| ordinal_of(&name, target));
    let desired = usize::try_from(cluster.spec.replicas).unwrap_or(0);
    let pending_restore = pending_restore(&context, &cluster).await?;
    let stored_snapshot = match &pending_restore {
        Some(PendingRestore::Ready(snapshot)) => Some(snapshot),
        _ => None,
    };

    // Decide.
    let decision = decide(&Facts {
        desired_members: desired,
        statefulset_replicas,
        members: view.members.clone(),
        primary,
        in_flight: in_flight.clone(),
        switchover_to,
        restore: pending_restore.as_ref().map(|pending| match pending {
            PendingRestore::NotReady(why) => Restore::SourceNotReady(why.clone()),
            PendingRestore::Ready(snapshot) => Restore::Ready {
                backup: snapshot.backup.clone(),
                position: snapshot.position.clone(),
            },
        }),
        semi_sync: semi_sync(&cluster),
        binlog_expire_seconds: binlog_expire_seconds(&cluster),
        freshness: state.settings.freshness,
        now: std::time::Instant::now(),
    });
    tracing::info!(cluster = %key, ?decision, "decided");

    // Act: the objects first, so a deleted Service comes back whatever the step.
    let applier = &context.applier;
    applier.apply(&build_config_map(&cluster)?).await?;
    applier.apply(&build_headless_service(&cluster)?).await?;
    applier.apply(&build_primary_service(&cluster)?).await?;
    applier.apply(&build_replicas_service(&cluster)?).await?;
    applier.apply(&build_pod_disruption_budget(&cluster)?).await?;
    ensure_scheduled_backup(&context, &cluster).await?;
    let step = match &decision {
        Decision::Act(step) => Some(step.clone()),
        _ => None,
    };
    let pod_count = match step {
        Some(Step::ScalePods { replicas }) => replicas,
        _ => statefulset_replicas.unwrap_or(desired),
    };
    applier
        .apply(&build_statefulset(&cluster, pod_count as i32)?)
        .await?;

    let mut last_failover: Option<FailoverRecord> = None;
    let mut restored: Option<RestoreRecord> = None;
    let mut decision = decision;
    if let Some(step) = &step {
        if let Some(recorded) = step.in_flight() {
            // Written before the step is taken: a crash from here on resumes, not repeats.
            in_flight = Some(recorded);
            report(
                &context,
                &cluster,
                &view,
                &decision,
                primary,
                in_flight.as_ref(),
                None,
                None,
                now,
            )
            .await?;
        }
        // A failing primary leaves the primary Service before anything else happens.
        set_role_labels(
            &context,
            &cluster,
            &role_labels(&view.members, primary, in_flight.as_ref()),
        )
        .await?;
        let step_context = StepContext {
            clients: &state.clients,
            cluster: &key,
            addresses: &addresses,
            primary,
            replication_password: &replication_password,
            tls: cluster.spec.tls.is_some(),
            semi_sync_wait_for: semi_sync(&cluster).then(|| {
                cluster
                    .spec
                    .replication
                    .as_ref()
                    .map_or(1, |r| r.wait_for_replica_count.max(1) as u32)
            }),
            restore: stored_snapshot,
        };
        match execute(&step_context, step).await {
            Ok(StepOutcome::Done) => {
                if let (Step::Restore { ordinal, .. }, Some(snapshot)) = (step, stored_snapshot) {
                    // Written with this pass's status: from then on the restore is never taken
                    // again, whatever restarts (the record in flight goes in the next pass).
                    let record = RestoreRecord {
                        backup_name: snapshot.backup.clone(),
                        location: snapshot.location.clone(),
                        sha256: snapshot.sha256.clone(),
                        gtid_position: snapshot.position.to_string(),
                        member: member_name(&name, *ordinal),
                        completed_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
                    };
                    context
                        .events
                        .publish(
                            cluster.as_ref(),
                            Severity::Normal,
                            "Restored",
                            "Restore",
                            format!(
                                "restored MySQLBackup {} ({}, sha256 {} verified) into {} at GTID position {}",
                                record.backup_name, record.location, record.sha256, record.member, record.gtid_position
                            ),
                        )
                        .await;
                    restored = Some(record);
                    in_flight = None;
                } else {
                    context
                        .events
                        .publish(
                            cluster.as_ref(),
                            Severity::Normal,
                            step_reason(step),
                            "Reconcile",
                            describe(&name, step),
                        )
                        .await;
                }
                match *step {
                    Step::OpenPrimary { ordinal } => primary = Some(ordinal),
                    Step::Failover { to, .. } | Step::Switchover { to, .. } => primary = Some(to),
                    Step::RemoveMember { ordinal } => {
                        applier
                            .apply(&build_statefulset(&cluster, ordinal as i32)?)
                            .await?;
                    }
                    Step::ClearInFlight => {
                        let recorded = cluster.status.as_ref().and_then(|s| s.in_flight.as_ref());
                        if let (
                            Some(InFlight::Failover { .. } | InFlight::Switchover { .. }),
                            Some(recorded),
                        ) = (&in_flight, recorded)
                        {
                            let record = failover_record(recorded, now);
                            state.clients.record_failover(&record);
                            last_failover = Some(record);
                            remove_switchover_annotation(&context, &cluster).await?;
                        }
                        in_flight = None;
                    }
                    _ => {}
                }
            }
            Ok(StepOutcome::NotYet(why)) => {
                tracing::info!(cluster = %key, ?step, %why, "not yet");
            }
            Err(error) => {
                // The servers are as they were (or as a retry of the step expects them). A
                // switchover given up is not resumed: its record and the request go, or every
                // retry would make the primary read-only again.
                let reason = if matches!(error, StepError::SwitchoverAbandoned(_)) {
                    in_flight = None;
                    remove_switchover_annotation(&context, &cluster).await?;
                    "SwitchoverRefused"
                } else {
                    "StepFailed"
                };
                context
                    .events
                    .publish(
                        cluster.as_ref(),
                        Severity::Warning,
                        reason,
                        "Reconcile",
                        format!("{}: {error}", describe(&name, step)),
                    )
                    .await;
                decision = Decision::Wait(Wait {
                    reason,
                    message: format!(
                        "{} failed; nothing else was changed: {error}",
                        describe(&name, step)
                    ),
                });
                report(
                    &context,
                    &cluster,
                    &view,
                    &decision,
                    primary,
                    in_flight.as_ref(),
                    None,
                    None,
                    now,
                )
                .await?;
                return Err(Error::Step {
                    step: describe(&name, step),
                    source: error,
                });
            }
        }
    }
    set_role_labels(
        &context,
        &cluster,
        &role_labels(&view.members, primary, in_flight.as_ref()),
    )
    .await?;

    match &decision {
        Decision::Wait(wait) => {
            if wait.reason == "SwitchoverRefused" {
                remove_switchover_annotation(&context, &cluster).await?;
            }
            let severity = match wait.reason {
                "MembersStarting" => Severity::Normal,
                _ => Severity::Warning,
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
        Decision::Settled => {
            if let Some(primary) = primary {
                ensure_users(&context, &cluster, &key, &addresses, primary).await?;
            }
        }
        Decision::Act(_) => {}
    }

    // Report.
    report(
        &context,
        &cluster,
        &view,
        &decision,
        primary,
        in_flight.as_ref(),
        last_failover,
        restored,
        now,
    )
    .await?;
    Ok(match decision {
        Decision::Settled => Action::requeue(Duration::from_secs(30)),
        _ => Action::requeue(Duration::from_secs(2)),
    })
}

#[allow(clippy::too_many_arguments)]
async fn report(
    context: &Context<State>,
    cluster: &MySQLCluster,
    view: &ClusterView,
    decision: &Decision,
    primary: Option<usize>,
    in_flight: Option<&InFlight>,
    last_failover: Option<FailoverRecord>,
    restored: Option<RestoreRecord>,
    now: Timestamp,
) -> Result<(), Error> {
    let status = build_status(
        cluster,
        &view.members,
        decision,
        primary,
        in_flight,
        last_failover,
        restored,
        now,
    );
    patch_status(&context.client, cluster, cluster.status.as_ref(), &status).await?;
    Ok(())
}

/// Creates a generated password Secret once; an existing one is never rewritten.
async fn ensure_generated_secret(
    context: &Context<State>,
    cluster: &MySQLCluster,
    name: String,
    wanted: bool,
) -> Result<(), Error> {
    if wanted {
        let secret = build_password_secret(cluster, name, quorum_core::pod::generate_password())?;
        context.applier.create_once(&secret).await?;
    }
    Ok(())
}

/// The CA certificate (`ca.crt`) of the TLS Secret `name`, which the operator verifies the
/// members' certificates against; a missing Secret or key is an error naming it.
async fn read_server_ca(context: &Context<State>, namespace: &str, name: &str) -> Result<Vec<u8>, Error> {
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), namespace);
    secrets
        .get_opt(name)
        .await
        .map_err(api(format!("reading Secret {name}")))?
        .ok_or_else(|| Error::Secret {
            secret: format!("{namespace}/{name}"),
            problem: "does not exist",
        })?
        .data
        .unwrap_or_default()
        .remove("ca.crt")
        .map(|bytes| bytes.0)
        .filter(|bytes| !bytes.is_empty())
        .ok_or_else(|| Error::Secret {
            secret: format!("{namespace}/{name}"),
            problem: "has no (or an empty) `ca.crt`",
        })
}

async fn read_password(context: &Context<State>, namespace: &str, name: &str) -> Result<SecretString, Error> {
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(api(format!("reading Secret {name}")))?
        .ok_or_else(|| Error::Secret {
            secret: format!("{namespace}/{name}"),
            problem: "does not exist",
        })?;
    let value = secret
        .data
        .unwrap_or_default()
        .remove(PASSWORD_KEY)
        .and_then(|bytes| String::from_utf8(bytes.0).ok())
        .map(|text| text.trim_end_matches(['\n', '\r']).to_string())
        .filter(|text| !text.is_empty())
        .ok_or_else(|| Error::Secret {
            secret: format!("{namespace}/{name}"),
            problem: "has no (or an empty, or a non-UTF-8) `password`",
        })?;
    Ok(SecretString::from(value))
}

/// Sets each member pod's role label where it differs from what is true now.
async fn set_role_labels(
    context: &Context<State>,
    cluster: &MySQLCluster,
    roles: &BTreeMap<usize, Option<crate::resources::RoleLabel>>,
) -> Result<(), Error> {
    let name = cluster.name_any();
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &cluster.namespace().unwrap_or_default());
    let listed = pods
        .list(&ListParams::default().labels(&member_selector_string(cluster)))
        .await
        .map_err(api("listing member pods"))?;
    for pod in listed.items {
        let pod_name = pod.name_any();
        let Some(Some(role)) = ordinal_of(&name, &pod_name).and_then(|o| roles.get(&o)) else {
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

async fn remove_switchover_annotation(context: &Context<State>, cluster: &MySQLCluster) -> Result<(), Error> {
    if !cluster.annotations().contains_key(SWITCHOVER_ANNOTATION) {
        return Ok(());
    }
    let clusters: Api<MySQLCluster> =
        Api::namespaced(context.client.clone(), &cluster.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: null}}});
    clusters
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(api("removing the switchover annotation"))?;
    Ok(())
}

/// The application accounts of `spec.users`, created or updated on the primary when they or
/// their passwords changed since this operator process last applied them (the statements are
/// idempotent, so a restarted operator applying them once more is harmless).
async fn ensure_users(
    context: &Context<State>,
    cluster: &MySQLCluster,
    key: &str,
    addresses: &Addresses,
    primary: usize,
) -> Result<(), Error> {
    if cluster.spec.users.is_empty() {
        return Ok(());
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let mut accounts = Vec::new();
    let mut fingerprint = Sha256::new();
    for user in &cluster.spec.users {
        let password = read_password(context, &namespace, &user.password_secret).await?;
        use secrecy::ExposeSecret;
        fingerprint.update(user.name.as_bytes());
        fingerprint.update(user.database.as_bytes());
        fingerprint.update(format!("{:?}", user.access).as_bytes());
        fingerprint.update(password.expose_secret().as_bytes());
        let privileges = match user.access {
            Access::ReadWrite => "ALL PRIVILEGES",
            Access::ReadOnly => "SELECT",
        };
        accounts.push((
            user.name.clone(),
            user.database.clone(),
            password,
            vec![format!(
                "{privileges} ON {}.*",
                crate::admin::dialect::quote_identifier(&user.database)
            )],
        ));
    }
    let fingerprint = hex::encode(fingerprint.finalize());
    if !context.state.clients.users_changed(key, &fingerprint) {
        return Ok(());
    }
    for (user, database, password, grants) in accounts {
        context
            .state
            .clients
            .call(
                key,
                addresses,
                primary,
                "ensure_user",
                quorum_core::availability::retry::Idempotency::Mutation,
                |admin| {
                    let (user, database, password, grants) =
                        (user.clone(), database.clone(), password.clone(), grants.clone());
                    async move {
                        admin.ensure_database(&database).await?;
                        admin.ensure_user(&user, "%", &password, &grants).await
                    }
                },
            )
            .await
            .map_err(|source| Error::Step {
                step: format!("creating account {user}"),
                source: StepError::Admin {
                    ordinal: primary,
                    source,
                },
            })?;
    }
    context.state.clients.users_applied(key, fingerprint);
    Ok(())
}

/// The restore a cluster created from a backup still has to take.
enum PendingRestore {
    /// The backup does not exist, has no stored snapshot, or its destination cannot be read.
    NotReady(String),
    Ready(StoredSnapshot),
}

/// What a cluster created with `restoreFrom` restores, while it has not: `None` for another
/// cluster, and for one with a restore or a primary recorded (a restore never happens into a
/// cluster that already served).
async fn pending_restore(
    context: &Context<State>,
    cluster: &MySQLCluster,
) -> Result<Option<PendingRestore>, Error> {
    let Some(source) = &cluster.spec.restore_from else {
        return Ok(None);
    };
    if cluster
        .status
        .as_ref()
        .is_some_and(|s| s.restored_from.is_some() || s.primary.is_some())
    {
        return Ok(None);
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let name = &source.backup_name;
    let backups: Api<MySQLBackup> = Api::namespaced(context.client.clone(), &namespace);
    let Some(backup) = backups
        .get_opt(name)
        .await
        .map_err(api(format!("reading MySQLBackup {name}")))?
    else {
        return Ok(Some(PendingRestore::NotReady(format!(
            "MySQLBackup {name} does not exist"
        ))));
    };
    let recorded = backup.status.clone().unwrap_or_default();
    let (Some(snapshot), Some(position)) = (recorded.last_snapshot, recorded.gtid_position) else {
        return Ok(Some(PendingRestore::NotReady(format!(
            "MySQLBackup {name} has no stored snapshot yet"
        ))));
    };
    Ok(Some(
        match stored_snapshot(context, cluster, &backup, &snapshot, &position).await {
            Ok(stored) => PendingRestore::Ready(stored),
            Err(why) => PendingRestore::NotReady(format!("MySQLBackup {name}: {why}")),
        },
    ))
}

/// Where `backup`'s snapshot is and what it recorded about it, or why it cannot be read.
async fn stored_snapshot(
    context: &Context<State>,
    cluster: &MySQLCluster,
    backup: &MySQLBackup,
    snapshot: &BackupRecord,
    position: &str,
) -> Result<StoredSnapshot, String> {
    let namespace = cluster.namespace().unwrap_or_default();
    let position = GtidPosition::parse(cluster.spec.flavor, position).map_err(|e| e.to_string())?;
    let credentials = credentials(&context.client, &namespace, &backup.spec.destination)
        .await
        .map_err(|e| e.to_string())?;
    let target = backup_target(
        &backup.spec.destination,
        credentials,
        context.state.settings.allow_http_backups,
    )
    .map_err(|e| e.to_string())?;
    StoredSnapshot::locate(
        &backup.name_any(),
        target,
        &namespace,
        &backup.spec.cluster_name,
        &snapshot.location,
        &snapshot.sha256,
        position,
    )
}

/// A cluster's backup policy is carried out by a `MySQLBackup` it owns, `<cluster>-scheduled`;
/// removing the policy removes it.
async fn ensure_scheduled_backup(context: &Context<State>, cluster: &MySQLCluster) -> Result<(), Error> {
    let name = quorum_core::naming::child_name(&cluster.name_any(), "scheduled");
    match build_scheduled_backup(cluster, &name)? {
        Some(backup) => {
            context.applier.apply(&backup).await?;
        }
        None => {
            let backups: Api<MySQLBackup> =
                Api::namespaced(context.client.clone(), &cluster.namespace().unwrap_or_default());
            ignore_not_found(backups.delete(&name, &DeleteParams::default()).await)
                .map_err(api(format!("deleting MySQLBackup {name}")))?;
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
