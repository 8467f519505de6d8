//! Reconciling a `MongoDBReplicaSet`: apply the objects, observe the members, decide one step,
//! take it, report.

use std::{collections::BTreeMap, ops::ControlFlow, sync::Arc, time::Duration};

use futures::future::join_all;
use k8s_openapi::{
    api::core::v1::{Pod, Secret},
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Preconditions},
    runtime::controller::Action,
};
use quorum_core::{
    ReconcileError,
    apply::ignore_not_found,
    availability::retry::Idempotency,
    conditions::{ConditionType, ConditionUpdate},
    pass::{Findings, Reason as _, UnreadableRecord, publish},
    pod::generate_password,
    runner::Context,
    status::patch_status,
};
use secrecy::SecretString;

use crate::{
    admin::{AdminError, Credentials, MemberState, ReplConfig, ReplStatus, StatusMember, codes},
    clients::{CallFailure, MongoClients, is_unreachable, refusal_code},
    crd::{
        ChangeKind, MemberStatus, MembershipChange, MongoDBBackup, MongoDBReplicaSet, MongoDBReplicaSetStatus,
    },
    decide::{Change, Desired, DesiredMember, Observed, Reach, Reason, SeenMember, Step, decide},
    resources::{
        ARBITER_COMPONENT, DEFAULT_ADMIN_USERNAME, MEMBER_COMPONENT, PASSWORD_KEY, USERNAME_KEY,
        VERSION_LABEL, admin_secret_name, arbiter_name, arbiter_statefulset_name, build_admin_secret,
        build_arbiter_config_map, build_arbiter_statefulset, build_client_service, build_config_map,
        build_headless_service, build_keyfile_secret, build_pod_disruption_budget, build_scheduled_backup,
        build_statefulset, generate_keyfile, member_host, member_name, selector_string, statefulset_name,
    },
};

pub use quorum_core::config::MemberAddresses;

/// The configuration `_id` of the arbiter; data members use their ordinal (below 50).
pub const ARBITER_ID: i32 = 100;
/// How long a primary that stepped down stays out of elections.
const STEP_DOWN_SECONDS: u32 = 60;
/// How long a stepping-down primary waits for a secondary to catch up.
const STEP_DOWN_CATCH_UP_SECONDS: u32 = 10;

/// Operator-wide settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub cluster_domain: String,
    pub member_addresses: MemberAddresses,
    /// Whether backups may go to an `http://` S3 endpoint.
    pub allow_http_backups: bool,
}

/// The operator's own state in the shared context.
pub struct State {
    pub clients: MongoClients,
    pub settings: Settings,
}

impl quorum_core::runner::ForgetsClusters for State {
    fn forget_cluster<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(self.clients.forget_cluster(key))
    }
}

impl State {
    /// The `host:port` of pod `ordinal` of `statefulset` in the set's configuration.
    pub fn host(&self, replica_set: &MongoDBReplicaSet, statefulset: &str, ordinal: usize) -> String {
        member_host(
            replica_set,
            statefulset,
            ordinal,
            self.settings.member_addresses,
            &self.settings.cluster_domain,
        )
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
    /// An admin step the members refused or did not answer; they are as they were, or as a
    /// retry of the step expects them. Reported (`StepFailed`) before it is returned.
    #[error("{step}: {source}")]
    Step {
        step: String,
        #[source]
        source: CallFailure,
    },
    /// A Secret the set needs is missing or lacks a key. Nothing is started without it.
    #[error("Secret {secret} {problem}")]
    Secret { secret: String, problem: &'static str },
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kubernetes(error) => error.metric_label(),
            Error::Api { .. } => "api",
            Error::Step { .. } => "admin_step",
            Error::Secret { .. } => "secret",
        }
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

/// The members the spec asks for: voting members, then non-voting ones (the last
/// `hiddenMembers` of them hidden), then the arbiter.
pub fn desired(replica_set: &MongoDBReplicaSet, state: &State) -> Desired {
    let spec = &replica_set.spec;
    let name = replica_set.name_any();
    let data_members = spec.data_members();
    let voting = spec.members.max(0) as usize;
    let hidden_from = data_members.saturating_sub(spec.hidden_members.max(0) as usize);
    let mut members: Vec<DesiredMember> = (0..data_members)
        .map(|ordinal| {
            let is_voting = ordinal < voting;
            DesiredMember {
                name: member_name(&name, ordinal),
                host: state.host(replica_set, &statefulset_name(&name), ordinal),
                id: ordinal as i32,
                votes: i32::from(is_voting),
                priority: if is_voting { 1.0 } else { 0.0 },
                hidden: !is_voting && ordinal >= hidden_from,
                arbiter: false,
            }
        })
        .collect();
    if spec.arbiter {
        members.push(DesiredMember {
            name: arbiter_name(&name),
            host: state.host(replica_set, &arbiter_statefulset_name(&name), 0),
            id: ARBITER_ID,
            votes: 1,
            priority: 0.0,
            hidden: false,
            arbiter: true,
        });
    }
    Desired {
        set_name: name,
        members,
        version: spec.version.clone(),
    }
}

/// Reconciles one `MongoDBReplicaSet`.
pub async fn reconcile(
    replica_set: Arc<MongoDBReplicaSet>,
    context: Arc<Context<State>>,
) -> Result<Action, Error> {
    let state = &context.state;
    let name = replica_set.name_any();
    let namespace = replica_set.namespace().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    // Status is this operator's memory (the initiation, the membership change in flight):
    // decided on as stored (`quorum_core::pass::admit`).
    let replica_set = match quorum_core::pass::admit(
        &context.client,
        &context.events,
        replica_set.as_ref(),
        &[
            crate::resources::statefulset_name(&name),
            crate::resources::arbiter_statefulset_name(&name),
        ],
        |replica_set| {
            replica_set
                .status
                .as_ref()
                .map_or(&[], |status| status.conditions.as_slice())
        },
    )
    .await?
    {
        ControlFlow::Continue(replica_set) => replica_set,
        ControlFlow::Break(action) => return Ok(action),
    };

    // Credentials first: nothing can be observed or started without them.
    ensure_generated_secrets(&context, &replica_set).await?;
    let credentials = read_credentials(&context, &namespace, &admin_secret_name(&replica_set)).await?;
    state.clients.set_credentials(&key, credentials).await;

    let applier = &context.applier;
    applier.apply(&build_config_map(&replica_set)?).await?;
    applier.apply(&build_headless_service(&replica_set)?).await?;
    applier.apply(&build_client_service(&replica_set)?).await?;
    applier.apply(&build_pod_disruption_budget(&replica_set)?).await?;
    if let Some(arbiter) = build_arbiter_statefulset(&replica_set)? {
        applier.apply(&build_arbiter_config_map(&replica_set)?).await?;
        applier.apply(&arbiter).await?;
    }
    ensure_scheduled_backup(&context, &replica_set).await?;

    let desired = desired(&replica_set, state);
    let observed = observe(&context, &replica_set, &key, &desired).await?;

    // The StatefulSet shrinks only once the leaving members are out of the configuration.
    let configured_ordinals = observed.config.as_ref().map_or(0, |config| {
        config
            .members
            .iter()
            .filter(|member| !member.arbiter_only && member.id < ARBITER_ID)
            .map(|member| member.id as usize + 1)
            .max()
            .unwrap_or(0)
    });
    let replicas = replica_set.spec.data_members().max(configured_ordinals);
    applier
        .apply(&build_statefulset(&replica_set, replicas as i32)?)
        .await?;

    let now = Timestamp::now();
    let mut status = status_from(&replica_set, &desired, &observed, now);
    // What the API server holds, for the final status patch to be computed against.
    let mut reported = replica_set.status.clone();
    let (progress, failure) = match recorded_change(replica_set.status.as_ref()) {
        // A recorded change this operator cannot read is never taken for none: the record stays
        // as stored (`status_from` keeps it) and nothing is reconfigured or restarted.
        Err(unreadable) => (wait_on_unreadable_record(&name, &unreadable), None),
        Ok(recorded) => match restore_step(
            &context,
            &replica_set,
            &key,
            &observed,
            recorded.as_ref(),
            &mut status,
            &mut reported,
        )
        .await?
        {
            Some(progress) => (progress, None),
            None => {
                let step = decide(&desired, &observed);
                let taken = act(
                    &context,
                    &replica_set,
                    &key,
                    &observed,
                    &step,
                    &mut status,
                    &mut reported,
                )
                .await;
                reported_failure(taken)?
            }
        },
    };
    let settled = progress.is_settled();
    publish(&context.events, replica_set.as_ref(), &progress).await;

    let not_healthy: Vec<String> = status
        .members
        .iter()
        .filter(|member| member.health != "Healthy")
        .map(|member| member.name.clone())
        .collect();
    let degraded = (!not_healthy.is_empty()).then(|| {
        (
            "MembersNotHealthy",
            format!("not healthy: {}", not_healthy.join(", ")),
        )
    });
    let ready = match (&status.primary, settled && not_healthy.is_empty()) {
        (Some(primary), true) => ConditionUpdate::new(
            ConditionType::Ready,
            true,
            "Ready",
            format!("{primary} is primary; every member serves as specified"),
        ),
        (None, _) => ConditionUpdate::new(ConditionType::Ready, false, "NoPrimary", "no member is primary"),
        (Some(_), false) => {
            let (reason, message) = match &progress {
                Progress::Acted { reason, message }
                | Progress::Waiting { reason, message }
                | Progress::Failed { reason, message } => (reason.as_str(), message.clone()),
                Progress::Settled => (
                    "MembersNotHealthy",
                    format!("not healthy: {}", not_healthy.join(", ")),
                ),
            };
            ConditionUpdate::new(ConditionType::Ready, false, reason, message)
        }
    };
    set_conditions(&mut status, &replica_set, ready, &progress, degraded, now);
    patch_status(&context.client, replica_set.as_ref(), reported.as_ref(), &status).await?;
    // A failed step, now reported, is returned: the runner retries it with backoff and counts it.
    if let Some(failure) = failure {
        return Err(failure);
    }
    Ok(if settled && not_healthy.is_empty() {
        Action::requeue(Duration::from_secs(30))
    } else {
        Action::requeue(Duration::from_secs(2))
    })
}

/// A set created with `restoreFrom` loads its backup into the first member once it is primary
/// and alone, before any other member joins (they then copy it by initial sync). `None` when
/// there is nothing to restore now.
async fn restore_step(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    key: &str,
    observed: &Observed,
    recorded: Option<&RecordedChange>,
    status: &mut MongoDBReplicaSetStatus,
    reported: &mut Option<MongoDBReplicaSetStatus>,
) -> Result<Option<Progress>, Error> {
    let Some(source) = replica_set
        .spec
        .restore_from
        .as_ref()
        .filter(|_| observed.restore_pending)
    else {
        return Ok(None);
    };
    let (Some(primary), Some(config)) = (&observed.primary, &observed.config) else {
        return Ok(None);
    };
    if config.members.len() > 1 {
        // Members joined before a restore could happen (restoreFrom was added to an existing
        // set, which the schema refuses, or the record was lost): never load into live data.
        return Ok(Some(Progress::waiting(
            Reason::RestoreSourceInvalid,
            "restoreFrom applies only to a new replica set; this one already has members",
        )));
    }
    let namespace = replica_set.namespace().unwrap_or_default();
    let backups: Api<MongoDBBackup> = Api::namespaced(context.client.clone(), &namespace);
    let backup = backups
        .get_opt(&source.backup_name)
        .await
        .map_err(api(format!("reading MongoDBBackup {}", source.backup_name)))?;
    let not_ready = |message: String| Ok(Some(Progress::waiting(Reason::RestoreSourceNotReady, message)));
    let Some(backup) = backup else {
        return not_ready(format!("MongoDBBackup {} does not exist", source.backup_name));
    };
    if backup.spec.cluster_name == replica_set.name_any() {
        return Ok(Some(Progress::waiting(
            Reason::RestoreSourceInvalid,
            format!(
                "MongoDBBackup {} is a backup of this replica set",
                source.backup_name
            ),
        )));
    }
    let Some(record) = backup
        .status
        .as_ref()
        .and_then(|status| status.last_snapshot.clone())
    else {
        return not_ready(format!(
            "MongoDBBackup {} has no stored snapshot yet",
            source.backup_name
        ));
    };
    let destination = &backup.spec.destination;
    let credentials = quorum_core::backup::credentials(&context.client, &namespace, destination)
        .await
        .map_err(|error| restore_failed(&error.to_string()));
    let located = credentials.and_then(|credentials| {
        let settings = quorum_core::backup::StoreSettings {
            s3_endpoint: destination.s3.as_ref().and_then(|s3| s3.endpoint.clone()),
            s3_region: destination.s3.as_ref().and_then(|s3| s3.region.clone()),
            allow_http: context.state.settings.allow_http_backups,
        };
        let (target, object) = quorum_core::backup::locate(&record.location, &settings, credentials)
            .map_err(|error| restore_failed(&error.to_string()))?;
        let sink = quorum_core::backup::BackupSink::new(target)
            .map_err(|error| restore_failed(&error.to_string()))?;
        Ok((sink, object))
    });
    let (sink, object) = match located {
        Ok(located) => located,
        Err(progress) => return Ok(Some(progress)),
    };
    // Recorded before it starts: a restore cut short (a crash, a lost status write) leaves data
    // the next pass must not take for someone else's, nor load over.
    let interrupted = recorded.is_some_and(|change| change.kind == ChangeKind::Restore);
    let first = observed
        .members
        .iter()
        .find(|member| &member.host == primary)
        .map_or_else(|| primary.clone(), |member| member.name.clone());
    status.membership_change = Some(
        RecordedChange {
            kind: ChangeKind::Restore,
            member: first.clone(),
            from_config_version: Some(config.version),
        }
        .record(Time(Timestamp::now())),
    );
    patch_status(&context.client, replica_set, reported.as_ref(), status).await?;
    *reported = Some(status.clone());

    // A long stream, so not a timed admin call: its own connection, bounded by the store.
    let restored = match context.state.clients.long_running(key, primary) {
        Ok(admin) => crate::archive::restore_stored(admin.client(), &sink, &object, &record.sha256).await,
        Err(error) => {
            status.membership_change = None;
            return Ok(Some(restore_failed(&error.to_string())));
        }
    };
    status.membership_change = None;
    Ok(Some(match restored {
        Ok(summary) => {
            status.restored_from = Some(record.clone());
            Progress::Acted {
                reason: Reason::Restored,
                message: format!(
                    "restored {} documents from MongoDBBackup {} ({})",
                    summary.counts.documents, source.backup_name, record.location
                ),
            }
        }
        Err(crate::archive::ArchiveError::TargetNotEmpty { database }) if interrupted => {
            // Keep the record: the state stays explained until a human decides.
            status.membership_change = replica_set
                .status
                .as_ref()
                .and_then(|s| s.membership_change.clone());
            Progress::Waiting {
                reason: Reason::RestoreInterrupted,
                message: format!(
                    "a restore of MongoDBBackup {} into {first} was interrupted and {first} holds database \
                     {database}, partly or wholly restored; the operator does not load over it. Drop the user \
                     databases on {first} to restore again",
                    source.backup_name
                ),
            }
        }
        Err(crate::archive::ArchiveError::TargetNotEmpty { database }) => Progress::Waiting {
            reason: Reason::RestoreTargetNotEmpty,
            message: format!(
                "{first} already holds database {database}; restoreFrom loads only into an empty set, and nothing \
                 was changed"
            ),
        },
        Err(error) => restore_failed(&error.to_string()),
    }))
}

fn restore_failed(detail: &str) -> Progress {
    Progress::waiting(
        Reason::RestoreFailed,
        format!("restoring the backup failed, nothing was kept: {detail}"),
    )
}

/// Where a pass left the set: the `Progressing` condition, the event and the requeue.
pub type Progress = quorum_core::pass::Progress<Reason>;

/// A membership change recorded in status, as read back: a kind this operator knows, with the
/// fields that kind needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedChange {
    pub kind: ChangeKind,
    /// The member it concerns (the release, for `SetFeatureCompatibilityVersion`).
    pub member: String,
    /// The configuration version it was made from; every change but the initiation has one.
    pub from_config_version: Option<i64>,
}

impl RecordedChange {
    /// The status record of this change, started at `started_at`.
    pub fn record(&self, started_at: Time) -> MembershipChange {
        MembershipChange {
            kind: self.kind.clone(),
            member: self.member.clone(),
            from_config_version: self.from_config_version,
            started_at,
        }
    }
}

/// The membership change recorded in status. A record this operator cannot read (an unknown
/// kind, no member) is an error, never taken for no change.
pub fn recorded_change(
    status: Option<&MongoDBReplicaSetStatus>,
) -> Result<Option<RecordedChange>, UnreadableRecord> {
    let Some(change) = status.and_then(|status| status.membership_change.as_ref()) else {
        return Ok(None);
    };
    let kind = change.kind.known()?.clone();
    if change.member.is_empty() {
        return Err(UnreadableRecord::new(
            "status.membershipChange.member",
            format!("empty for {kind}"),
        ));
    }
    Ok(Some(RecordedChange {
        kind,
        member: change.member.clone(),
        from_config_version: change.from_config_version,
    }))
}

/// The wait of a pass that found a recorded change it cannot read: it says what a person can do.
fn wait_on_unreadable_record(name: &str, unreadable: &UnreadableRecord) -> Progress {
    Progress::waiting(
        Reason::InFlightUnreadable,
        unreadable.wait_message("mongodbreplicaset", name, "/status/membershipChange"),
    )
}

/// The kind recorded for a reconfiguration.
fn change_kind(change: Change) -> ChangeKind {
    match change {
        Change::Add => ChangeKind::Add,
        Change::Promote => ChangeKind::Promote,
        Change::Demote => ChangeKind::Demote,
        Change::Remove => ChangeKind::Remove,
        Change::Adjust => ChangeKind::Reconfigure,
    }
}

/// Asks every member about itself, and the primary about the set.
async fn observe(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    key: &str,
    desired: &Desired,
) -> Result<Observed, Error> {
    let clients = &context.state.clients;
    let pods = member_pods(context, replica_set).await?;
    let mut members = join_all(
        desired
            .members
            .iter()
            .map(|member| see(clients, key, &member.name, &member.host, pods.get(&member.name))),
    )
    .await;

    let primaries: Vec<String> = members
        .iter()
        .filter(|member| member.hello().is_some_and(|hello| hello.is_writable_primary))
        .map(|member| member.host.clone())
        .collect();
    let primary = match primaries.as_slice() {
        [primary] => Some(primary.clone()),
        _ => None,
    };
    let (mut config, mut status, mut feature_compatibility) = (None, None, None);
    if let Some(primary) = &primary {
        config = read(clients, key, primary, "replSetGetConfig", |admin| async move {
            admin.config().await
        })
        .await
        .flatten();
        status = read(clients, key, primary, "replSetGetStatus", |admin| async move {
            admin.status().await
        })
        .await
        .flatten();
        feature_compatibility = read(clients, key, primary, "getParameter", |admin| async move {
            admin.feature_compatibility_version().await
        })
        .await;
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
            members.push(see(clients, key, &name, &host, pods.get(&name)).await);
        }
    }

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
    })
}

/// The pod name of the member known as `host`: data members by ordinal, the arbiter, or the
/// host itself when it matches no pod the set could have.
fn member_name_of(replica_set: &MongoDBReplicaSet, context: &Context<State>, host: &str) -> String {
    let name = replica_set.name_any();
    let state = &context.state;
    if state.host(replica_set, &arbiter_statefulset_name(&name), 0) == host {
        return arbiter_name(&name);
    }
    (0..crate::crd::MAX_MEMBERS as usize)
        .find(|ordinal| state.host(replica_set, &statefulset_name(&name), *ordinal) == host)
        .map_or_else(|| host.to_string(), |ordinal| member_name(&name, ordinal))
}

async fn see(clients: &MongoClients, key: &str, name: &str, host: &str, pod: Option<&Pod>) -> SeenMember {
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
        pod_exists: pod.is_some(),
        pod_version: pod.and_then(|pod| pod.labels().get(VERSION_LABEL).cloned()),
        reach,
        server_version,
        too_stale,
    }
}

/// A read whose failure leaves the answer unknown.
async fn read<T, F, Fut>(
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

/// The pods of the set's namespace.
fn pods_api(context: &Context<State>, replica_set: &MongoDBReplicaSet) -> Api<Pod> {
    Api::namespaced(
        context.client.clone(),
        &replica_set.namespace().unwrap_or_default(),
    )
}

/// The set's member pods (data and arbiter) by name.
async fn member_pods(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
) -> Result<BTreeMap<String, Pod>, Error> {
    let pods = pods_api(context, replica_set);
    let mut by_name = BTreeMap::new();
    for component in [MEMBER_COMPONENT, ARBITER_COMPONENT] {
        let labels = selector_string(replica_set, component);
        let listed = pods
            .list(&ListParams::default().labels(&labels))
            .await
            .map_err(api("listing member pods"))?;
        for pod in listed.items {
            if pod.metadata.deletion_timestamp.is_none() {
                by_name.insert(pod.name_any(), pod);
            }
        }
    }
    Ok(by_name)
}

/// The status of what was observed, before the step.
fn status_from(
    replica_set: &MongoDBReplicaSet,
    desired: &Desired,
    observed: &Observed,
    now: Timestamp,
) -> MongoDBReplicaSetStatus {
    let mut status = replica_set.status.clone().unwrap_or_default();
    if observed.config.is_some() && status.initiated_at.is_none() {
        status.initiated_at = Some(Time(now));
    }
    status.primary = observed
        .primary
        .as_ref()
        .and_then(|host| observed.members.iter().find(|member| &member.host == host))
        .map(|member| member.name.clone());
    status.config_version = observed.config.as_ref().map(|config| config.version);
    status.feature_compatibility_version = observed.feature_compatibility.clone();
    status.members = observed
        .members
        .iter()
        .map(|seen| member_status(seen, desired, observed))
        .collect();
    status.ready_members = status
        .members
        .iter()
        .filter(|member| {
            member.health == "Healthy" && matches!(member.state.as_str(), "PRIMARY" | "SECONDARY" | "ARBITER")
        })
        .count() as i32;
    status
}

fn member_status(seen: &SeenMember, desired: &Desired, observed: &Observed) -> MemberStatus {
    let configured = observed
        .config
        .as_ref()
        .and_then(|config| config.member(&seen.host));
    let reported = observed
        .status
        .as_ref()
        .and_then(|status: &ReplStatus| status.member(&seen.host));
    let wanted = desired.members.iter().find(|member| member.host == seen.host);
    let state = match (configured, reported) {
        (None, _) => "NotAMember".to_string(),
        (Some(_), Some(reported)) => reported.state.as_str().to_string(),
        (Some(_), None) => "UNKNOWN".to_string(),
    };
    let (health, message) = match &seen.reach {
        Reach::Unknown(why) => ("Unknown", Some(format!("not reachable from the operator: {why}"))),
        Reach::Answered(_) => match reported {
            Some(reported) if !reported.healthy || reported.state == MemberState::Down => (
                "Unhealthy",
                Some("the primary does not hear its heartbeats".to_string()),
            ),
            Some(reported)
                if matches!(
                    reported.state,
                    MemberState::Recovering
                        | MemberState::Rollback
                        | MemberState::Removed
                        | MemberState::Unknown
                ) =>
            {
                ("Unhealthy", Some(format!("state {}", reported.state.as_str())))
            }
            _ => ("Healthy", None),
        },
    };
    MemberStatus {
        name: seen.name.clone(),
        host: Some(seen.host.clone()),
        state,
        health: health.to_string(),
        votes: configured.map_or(0, |member| member.votes),
        priority: configured.map_or(0.0, |member| member.priority),
        hidden: configured.is_some_and(|member| member.hidden),
        arbiter: configured.map_or(wanted.is_some_and(|member| member.arbiter), |member| {
            member.arbiter_only
        }),
        lag_seconds: configured.and_then(|_| observed.lag_seconds(&seen.host)),
        version: seen.server_version.clone(),
        message,
    }
}

/// Takes the step, recording it in `status` (and on the API server, `reported`) first.
async fn act(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    key: &str,
    observed: &Observed,
    step: &Step,
    status: &mut MongoDBReplicaSetStatus,
    reported: &mut Option<MongoDBReplicaSetStatus>,
) -> Result<Progress, Error> {
    let clients = &context.state.clients;
    let config_version = observed.config.as_ref().map(|config| config.version);
    let (kind, member) = match step {
        Step::Settled => {
            status.membership_change = None;
            return Ok(Progress::Settled);
        }
        Step::Wait { reason, message } => {
            return Ok(Progress::waiting(*reason, message.clone()));
        }
        Step::Initiate { member, .. } => (ChangeKind::Initiate, member.clone()),
        Step::Reconfigure { change, member, .. } => (change_kind(*change), member.clone()),
        Step::StepDown { member, .. } => (ChangeKind::StepDown, member.clone()),
        Step::Restart { member } => (ChangeKind::Restart, member.clone()),
        Step::Resync { member } => (ChangeKind::Resync, member.clone()),
        Step::SetFeatureCompatibility { release } => {
            (ChangeKind::SetFeatureCompatibilityVersion, release.clone())
        }
    };
    let change = RecordedChange {
        kind,
        member: member.clone(),
        from_config_version: config_version,
    }
    .record(Time(Timestamp::now()));
    if status
        .membership_change
        .as_ref()
        .map(|c| (&c.kind, &c.member, c.from_config_version))
        != Some((&change.kind, &change.member, change.from_config_version))
    {
        status.membership_change = Some(change);
        patch_status(&context.client, replica_set, reported.as_ref(), status).await?;
        *reported = Some(status.clone());
    }

    let result: Result<(Reason, String), CallFailure> = match step {
        Step::Initiate { host, config, .. } => clients
            .member(key, host, "replSetInitiate", Idempotency::Mutation, |admin| {
                let config = config.clone();
                async move { admin.initiate(&config).await }
            })
            .await
            .map(|()| {
                (
                    Reason::Initiated,
                    format!("initiated replica set {} with {member}", config.set_name),
                )
            }),
        Step::Reconfigure { change, config, .. } => {
            let primary = observed.primary.clone().unwrap_or_default();
            clients
                .member(key, &primary, "replSetReconfig", Idempotency::Mutation, |admin| {
                    let config = config.clone();
                    async move { admin.reconfig(&config).await }
                })
                .await
                .map(|()| reconfigured(*change, &member, config))
        }
        Step::StepDown { host, reason, .. } => clients
            .member(
                key,
                host,
                "replSetStepDown",
                Idempotency::Mutation,
                |admin| async move {
                    admin
                        .step_down(STEP_DOWN_SECONDS, STEP_DOWN_CATCH_UP_SECONDS)
                        .await
                },
            )
            .await
            .map(|()| {
                (
                    Reason::SteppedDown,
                    format!("{member} stepped down as primary ({reason:?})"),
                )
            }),
        Step::SetFeatureCompatibility { release } => {
            let primary = observed.primary.clone().unwrap_or_default();
            clients
                .member(
                    key,
                    &primary,
                    "setFeatureCompatibilityVersion",
                    Idempotency::Mutation,
                    |admin| {
                        let release = release.clone();
                        async move { admin.set_feature_compatibility_version(&release).await }
                    },
                )
                .await
                .map(|()| {
                    (
                        Reason::FeatureCompatibilityVersionSet,
                        format!("featureCompatibilityVersion is now {release}"),
                    )
                })
        }
        Step::Restart { member } => {
            restart(context, replica_set, member).await?;
            Ok((
                Reason::MemberRestarted,
                format!("restarted {member} for version {}", replica_set.spec.version),
            ))
        }
        Step::Resync { member } => {
            resync(context, replica_set, member).await?;
            Ok((
                Reason::MemberResynced,
                format!(
                    "{member} was too stale to catch up (error RS102): its volume was deleted with its pod, \
                     and it copies the data again from the set"
                ),
            ))
        }
        Step::Settled | Step::Wait { .. } => unreachable!("handled above"),
    };
    match result {
        Ok((reason, message)) => Ok(Progress::Acted { reason, message }),
        Err(failure) => failed(step, &member, failure, status),
    }
}

fn reconfigured(change: Change, member: &str, config: &ReplConfig) -> (Reason, String) {
    let reason = match change {
        Change::Add => Reason::MemberAdded,
        Change::Promote => Reason::MemberPromoted,
        Change::Demote => Reason::MemberDemoted,
        Change::Remove => Reason::MemberRemoved,
        Change::Adjust => Reason::MemberReconfigured,
    };
    let what = match change {
        Change::Add => "added without a vote",
        Change::Promote => "made voting",
        Change::Demote => "made non-voting",
        Change::Remove => "removed",
        Change::Adjust => "reconfigured",
    };
    (
        reason,
        format!("{member} {what} (configuration version {})", config.version),
    )
}

/// A step that failed: refused (nothing changed, the record is cleared) or unanswered (it may
/// have happened; the record stays and the next observation tells). Either is an
/// [`Error::Step`], reported by [`reported_failure`] and then returned from the pass.
fn failed(
    step: &Step,
    member: &str,
    failure: CallFailure,
    status: &mut MongoDBReplicaSetStatus,
) -> Result<Progress, Error> {
    if matches!(step, Step::Initiate { .. }) && refusal_code(&failure) == Some(codes::ALREADY_INITIALIZED) {
        return Ok(Progress::waiting(
            Reason::AlreadyInitiated,
            format!("{member} already has a configuration; observing it next"),
        ));
    }
    if !is_unreachable(&failure) {
        status.membership_change = None;
    }
    Err(Error::Step {
        step: format!("{} of {member}", step_name(step)),
        source: failure,
    })
}

/// The progress to report for the step taken and the error to return once it is reported: a
/// failed step is `Failed` (`StepFailed`: the `Progressing` condition and a warning event), then
/// the pass's error. Any other error is returned at once.
fn reported_failure(taken: Result<Progress, Error>) -> Result<(Progress, Option<Error>), Error> {
    match taken {
        Ok(progress) => Ok((progress, None)),
        Err(Error::Step { step, source }) => Ok((
            Progress::Failed {
                reason: Reason::StepFailed,
                message: format!("{step} failed: {source}"),
            },
            Some(Error::Step { step, source }),
        )),
        Err(other) => Err(other),
    }
}

fn step_name(step: &Step) -> &'static str {
    match step {
        Step::Initiate { .. } => "replSetInitiate",
        Step::Reconfigure { change, .. } => match change {
            Change::Add => "adding",
            Change::Promote => "promoting",
            Change::Demote => "demoting",
            Change::Remove => "removing",
            Change::Adjust => "reconfiguring",
        },
        Step::StepDown { .. } => "replSetStepDown",
        Step::Restart { .. } => "restarting",
        Step::Resync { .. } => "resyncing",
        Step::SetFeatureCompatibility { .. } => "setFeatureCompatibilityVersion",
        Step::Settled | Step::Wait { .. } => "nothing",
    }
}

/// The member's pod as it is now, `None` when it is gone.
async fn current_pod(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    member: &str,
) -> Result<Option<Pod>, Error> {
    let pods = pods_api(context, replica_set);
    pods.get_opt(member)
        .await
        .map_err(api(format!("reading pod {member}")))
}

/// Deletes a member's pod, exactly the one observed, so the StatefulSet recreates it from the
/// current template (the set uses the OnDelete update strategy).
async fn restart(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    member: &str,
) -> Result<(), Error> {
    let Some(pod) = current_pod(context, replica_set, member).await? else {
        return Ok(());
    };
    let pods = pods_api(context, replica_set);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    ignore_not_found(pods.delete(member, &params).await.map(|_| ()))
        .map_err(api(format!("deleting pod {member}")))?;
    Ok(())
}

/// Wipes a member, exactly the pod observed, so the StatefulSet recreates it on an empty volume
/// and it runs an initial sync.
async fn resync(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    member: &str,
) -> Result<(), Error> {
    let Some(pod) = current_pod(context, replica_set, member).await? else {
        return Ok(());
    };
    let namespace = replica_set.namespace().unwrap_or_default();
    quorum_core::wipe::wipe_member(&context.client, &namespace, member, pod.uid())
        .await
        .map_err(api(format!("wiping {member}")))
}

/// Sets `Ready`, `Progressing` and `Degraded` from a pass's findings.
fn set_conditions(
    status: &mut MongoDBReplicaSetStatus,
    replica_set: &MongoDBReplicaSet,
    ready: ConditionUpdate,
    progress: &Progress,
    degraded: Option<(&'static str, String)>,
    now: Timestamp,
) {
    let generation = replica_set.metadata.generation;
    status.observed_generation = generation;
    let findings = Findings {
        ready,
        progress,
        settled: "the replica set matches its spec",
        degraded,
        healthy: "every member is healthy",
    };
    quorum_core::pass::set_conditions(&mut status.conditions, generation, findings, now);
}

/// Creates the generated administrator and keyfile Secrets once; existing ones are never
/// rewritten (the members were started with them).
async fn ensure_generated_secrets(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
) -> Result<(), Error> {
    if replica_set.spec.admin_secret.is_none() {
        let admin = build_admin_secret(
            replica_set,
            DEFAULT_ADMIN_USERNAME.to_string(),
            generate_password(),
        )?;
        context.applier.create_once(&admin).await?;
    }
    if replica_set.spec.keyfile_secret.is_none() {
        let keyfile = build_keyfile_secret(replica_set, generate_keyfile())?;
        context.applier.create_once(&keyfile).await?;
    }
    Ok(())
}

/// The administrator's login from the Secret `name`.
pub async fn read_credentials(
    context: &Context<State>,
    namespace: &str,
    name: &str,
) -> Result<Credentials, Error> {
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(api(format!("reading Secret {name}")))?
        .ok_or_else(|| Error::Secret {
            secret: format!("{namespace}/{name}"),
            problem: "does not exist",
        })?;
    let mut data = secret.data.unwrap_or_default();
    let mut field = |key: &str, problem: &'static str| {
        data.remove(key)
            .and_then(|bytes| String::from_utf8(bytes.0).ok())
            .map(|text| text.trim_end_matches(['\n', '\r']).to_string())
            .filter(|text| !text.is_empty())
            .ok_or_else(|| Error::Secret {
                secret: format!("{namespace}/{name}"),
                problem,
            })
    };
    let username = field(USERNAME_KEY, "has no (or an empty, or a non-UTF-8) `username`")?;
    let password = field(PASSWORD_KEY, "has no (or an empty, or a non-UTF-8) `password`")?;
    Ok(Credentials {
        username,
        password: SecretString::from(password),
    })
}

/// A set's backup policy is carried out by a `MongoDBBackup` it owns, `<name>-scheduled`;
/// removing the policy removes it.
async fn ensure_scheduled_backup(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
) -> Result<(), Error> {
    let name = quorum_core::naming::child_name(&replica_set.name_any(), "scheduled");
    match build_scheduled_backup(replica_set, &name)? {
        Some(backup) => {
            context.applier.apply(&backup).await?;
        }
        None => {
            let backups: Api<MongoDBBackup> = Api::namespaced(
                context.client.clone(),
                &replica_set.namespace().unwrap_or_default(),
            );
            ignore_not_found(backups.delete(&name, &DeleteParams::default()).await.map(|_| ()))
                .map_err(api(format!("deleting MongoDBBackup {name}")))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use quorum_core::{availability::retry::CallError, events::Severity};

    use super::*;
    use crate::admin::AdminError;

    fn status_with(change: serde_json::Value) -> MongoDBReplicaSetStatus {
        serde_json::from_value(serde_json::json!({ "membershipChange": change })).expect("a status as stored")
    }

    #[test]
    fn changes_recorded_by_earlier_versions_still_read_and_round_trip() {
        let at = "2026-01-01T00:00:00Z";
        let stored = [
            serde_json::json!({"kind": "Initiate", "member": "rs-0", "startedAt": at}),
            serde_json::json!({"kind": "Add", "member": "rs-3", "fromConfigVersion": 5, "startedAt": at}),
            serde_json::json!({"kind": "Promote", "member": "rs-3", "fromConfigVersion": 6, "startedAt": at}),
            serde_json::json!({"kind": "Demote", "member": "rs-2", "fromConfigVersion": 7, "startedAt": at}),
            serde_json::json!({"kind": "Remove", "member": "rs-2", "fromConfigVersion": 8, "startedAt": at}),
            serde_json::json!({"kind": "Reconfigure", "member": "rs-4", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "StepDown", "member": "rs-0", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "Restart", "member": "rs-1", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "Resync", "member": "rs-2", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "SetFeatureCompatibilityVersion", "member": "8.0", "fromConfigVersion": 9, "startedAt": at}),
            serde_json::json!({"kind": "Restore", "member": "rs-0", "fromConfigVersion": 1, "startedAt": at}),
        ];
        for json in stored {
            let status = status_with(json.clone());
            let recorded = recorded_change(Some(&status))
                .unwrap_or_else(|error| panic!("{json}: {error}"))
                .expect("a change");
            assert_eq!(recorded.kind, json["kind"].as_str().unwrap(), "{json}");
            assert!(!matches!(recorded.kind, ChangeKind::Unrecognized(_)), "{json}");
            let started_at = status.membership_change.as_ref().unwrap().started_at.clone();
            let written = serde_json::to_string(&recorded.record(started_at)).unwrap();
            assert_eq!(
                written,
                serde_json::to_string(&json).unwrap(),
                "written as it was stored"
            );
            // The status as a whole is written back as it was read.
            assert_eq!(
                serde_json::to_value(&status).unwrap(),
                serde_json::json!({ "readyMembers": 0, "membershipChange": json })
            );
        }
        assert_eq!(
            recorded_change(Some(&MongoDBReplicaSetStatus::default())),
            Ok(None)
        );
        assert_eq!(recorded_change(None), Ok(None));
    }

    #[test]
    fn an_unknown_or_incomplete_recorded_change_is_unreadable_never_absent() {
        // The configuration version is a note for people (the member the change concerns and its
        // kind are what the pass acts on): a record without one still reads.
        let without_version = status_with(
            serde_json::json!({"kind": "Restart", "member": "rs-1", "startedAt": "2026-01-01T00:00:00Z"}),
        );
        assert!(recorded_change(Some(&without_version)).unwrap().is_some());
        let at = "2026-01-01T00:00:00Z";
        let cases = [
            (
                serde_json::json!({"kind": "Rewind", "member": "rs-1", "fromConfigVersion": 3, "startedAt": at}),
                "status.membershipChange.kind",
            ),
            (
                serde_json::json!({"kind": "Restart", "member": "", "fromConfigVersion": 3, "startedAt": at}),
                "status.membershipChange.member",
            ),
        ];
        for (json, field) in cases {
            let status = status_with(json.clone());
            let error = recorded_change(Some(&status)).unwrap_err();
            assert_eq!(error.field, field, "{json}");
            // Kept as stored, so writing the status back does not erase or change it.
            assert_eq!(
                serde_json::to_value(status.membership_change.as_ref().unwrap()).unwrap(),
                json
            );
        }
    }

    #[test]
    fn an_unreadable_record_is_a_warning_wait_that_says_how_to_clear_it() {
        let status = status_with(
            serde_json::json!({"kind": "Rewind", "member": "rs-1", "startedAt": "2026-01-01T00:00:00Z"}),
        );
        let unreadable = recorded_change(Some(&status)).unwrap_err();
        let progress = wait_on_unreadable_record("orders", &unreadable);
        let (severity, reason, message) = progress.event().expect("an event");
        assert_eq!(
            (severity, reason),
            (Severity::Warning, Reason::InFlightUnreadable)
        );
        assert!(message.contains("`Rewind`"), "{message}");
        assert!(
            message.contains("kubectl patch mongodbreplicaset orders --subresource=status")
                && message.contains("{\"status\":{\"membershipChange\":null}}"),
            "{message}"
        );
        let condition = progress.progressing("the replica set matches its spec");
        assert_eq!(
            (condition.status, condition.reason.as_str()),
            (true, "InFlightUnreadable")
        );
    }

    #[test]
    fn a_reconfiguration_records_the_kind_it_always_did() {
        for change in [
            Change::Add,
            Change::Promote,
            Change::Demote,
            Change::Remove,
            Change::Adjust,
        ] {
            assert_eq!(change_kind(change).as_str(), change.as_str());
        }
    }

    fn recorded(status: &mut MongoDBReplicaSetStatus) {
        status.membership_change = Some(
            RecordedChange {
                kind: ChangeKind::Add,
                member: "rs-3".into(),
                from_config_version: Some(5),
            }
            .record(Time(Timestamp::UNIX_EPOCH)),
        );
    }

    fn add() -> Step {
        Step::Reconfigure {
            change: Change::Add,
            member: "rs-3".into(),
            config: ReplConfig::initial("rs", vec![]),
        }
    }

    #[test]
    fn a_failed_step_is_reported_then_returned_as_an_error() {
        let refused = CallError::Failed(AdminError::Refused {
            endpoint: "rs-0".into(),
            code: 13,
            code_name: "Unauthorized".into(),
            message: "not authorized".into(),
        });
        let mut status = MongoDBReplicaSetStatus::default();
        recorded(&mut status);
        let (progress, error) = reported_failure(failed(&add(), "rs-3", refused, &mut status)).unwrap();
        assert_eq!(
            status.membership_change, None,
            "a refused step changed nothing: its record goes"
        );
        let message = "adding of rs-3 failed: rs-0 refused: not authorized (code 13 Unauthorized)";
        assert_eq!(
            progress,
            Progress::Failed {
                reason: Reason::StepFailed,
                message: message.into(),
            }
        );
        assert_eq!(progress.event().map(|event| event.0), Some(Severity::Warning));
        let condition = progress.progressing("the replica set matches its spec");
        assert_eq!(
            (
                condition.status,
                condition.reason.as_str(),
                condition.message.as_str()
            ),
            (true, "StepFailed", message)
        );
        let error = error.expect("the pass returns the error");
        assert!(matches!(error, Error::Step { .. }), "{error:?}");
        assert_eq!(error.metric_label(), "admin_step");

        // Unanswered: the step may have happened, so its record stays.
        let mut status = MongoDBReplicaSetStatus::default();
        recorded(&mut status);
        let timeout = CallError::Timeout(Duration::from_secs(5));
        let (progress, error) = reported_failure(failed(&add(), "rs-3", timeout, &mut status)).unwrap();
        assert!(status.membership_change.is_some());
        assert_eq!(progress.reason(), Some(Reason::StepFailed));
        assert!(error.is_some());
    }

    #[test]
    fn an_initiation_that_finds_a_configuration_is_a_quiet_wait_not_a_failure() {
        let refused = CallError::Failed(AdminError::Refused {
            endpoint: "rs-0".into(),
            code: codes::ALREADY_INITIALIZED,
            code_name: "AlreadyInitialized".into(),
            message: "already initialized".into(),
        });
        let initiate = Step::Initiate {
            member: "rs-0".into(),
            host: "rs-0:27017".into(),
            config: ReplConfig::initial("rs", vec![]),
        };
        let mut status = MongoDBReplicaSetStatus::default();
        let (progress, error) = reported_failure(failed(&initiate, "rs-0", refused, &mut status)).unwrap();
        assert!(error.is_none());
        assert_eq!(progress.reason(), Some(Reason::AlreadyInitiated));
        assert_eq!(progress.event().map(|event| event.0), Some(Severity::Normal));
    }

    #[test]
    fn other_errors_are_returned_at_once() {
        let error = Error::Secret {
            secret: "ns/rs-admin".into(),
            problem: "does not exist",
        };
        assert!(matches!(reported_failure(Err(error)), Err(Error::Secret { .. })));
    }
}
