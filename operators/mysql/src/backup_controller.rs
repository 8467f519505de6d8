//! Reconciling a `MySQLBackup`: when it is due, stream one consistent logical snapshot from a
//! caught-up member into its destination, record it on the backup and on the cluster, and
//! prune old snapshots.
//!
//! The snapshot is one transaction (`START TRANSACTION WITH CONSISTENT SNAPSHOT`) with the
//! GTID position it corresponds to, read from a caught-up replica when there is one so the
//! primary is spared, and stored only when complete: the pipe fails the upload when the
//! server stops sending, and a stream without its trailer is refused on restore.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use quorum_core::{
    ReconcileError,
    availability::{health::Health, retry::Idempotency},
    backup::{
        BackupError, BackupSink, CredentialsError, DestinationError, PipeError, ScheduleError, backup_target,
        credentials, due_at, next_due, object_name, pipe, producer, scoped_target,
    },
    conditions::{ConditionType, ConditionUpdate, set_condition},
    events::Severity,
    runner::Context,
    status::patch_status,
};

use crate::{
    admin::snapshot::{SnapshotError, snapshot_out},
    crd::{BackupPhase, BackupRecord, MySQLBackup, MySQLBackupStatus, MySQLCluster},
    decide::MemberFact,
    reconcile::State,
    resources::{REPLICATION_USER, member_name, ordinal_of},
    status::CAUGHT_UP_LAG_SECONDS,
};

/// How long the server may send nothing while the store waits for data.
pub const SNAPSHOT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum BackupControllerError {
    #[error(transparent)]
    Kubernetes(#[from] quorum_core::Error),
    #[error("reading {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    #[error(transparent)]
    Destination(#[from] DestinationError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Sink(#[from] BackupError),
    #[error("recording the backup on the cluster: {0}")]
    RecordOnCluster(#[source] kube::Error),
}

impl ReconcileError for BackupControllerError {
    fn metric_label(&self) -> &'static str {
        match self {
            BackupControllerError::Kubernetes(error) => error.metric_label(),
            BackupControllerError::Read { .. } => "read",
            BackupControllerError::Credentials(_) | BackupControllerError::Destination(_) => "destination",
            BackupControllerError::Schedule(_) => "schedule",
            BackupControllerError::Sink(_) => "sink",
            BackupControllerError::RecordOnCluster(_) => "record",
        }
    }

    fn shared(&self) -> Option<&quorum_core::Error> {
        match self {
            BackupControllerError::Kubernetes(error) => Some(error),
            _ => None,
        }
    }
}

type Result<T> = std::result::Result<T, BackupControllerError>;

/// The member to read a snapshot from: a Healthy replica that is caught up, the lowest
/// ordinal first; else the primary. `None` when neither answers.
pub fn choose_snapshot_member(members: &[MemberFact], primary: Option<usize>) -> Option<usize> {
    let caught_up_replica = members.iter().find(|member| {
        Some(member.ordinal) != primary
            && member.health == Health::Healthy
            && member.state.as_ref().is_some_and(|state| {
                state.replication.as_ref().is_some_and(|r| {
                    r.source == primary
                        && r.running()
                        && r.lag_seconds.is_some_and(|lag| lag <= CAUGHT_UP_LAG_SECONDS)
                })
            })
    });
    caught_up_replica
        .or_else(|| {
            members
                .iter()
                .find(|m| Some(m.ordinal) == primary && m.health == Health::Healthy)
        })
        .map(|member| member.ordinal)
}

/// Reconciles one `MySQLBackup`.
pub async fn reconcile_backup(backup: Arc<MySQLBackup>, context: Arc<Context<State>>) -> Result<Action> {
    let namespace = backup.namespace().unwrap_or_default();
    let previous = backup.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let due = due_at(
        backup.spec.schedule.as_deref(),
        previous.phase,
        previous.started_at.as_ref().map(|t| t.0),
        backup.metadata.creation_timestamp.as_ref().map(|t| t.0),
    )?;
    let Some(due) = due else {
        return Ok(Action::await_change());
    };
    if due > now {
        return Ok(Action::requeue(
            Duration::try_from(now.duration_until(due)).unwrap_or(Duration::from_secs(60)),
        ));
    }
    let mut status = previous.clone();
    let cluster_name = &backup.spec.cluster_name;
    let clusters: Api<MySQLCluster> = Api::namespaced(context.client.clone(), &namespace);
    let Some(cluster) =
        clusters
            .get_opt(cluster_name)
            .await
            .map_err(|source| BackupControllerError::Read {
                what: format!("MySQLCluster {cluster_name}"),
                source,
            })?
    else {
        status.phase = Some(BackupPhase::Pending);
        status.message = Some(format!("MySQLCluster {cluster_name} does not exist"));
        patch_status(&context.client, backup.as_ref(), Some(&previous), &status).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };

    let state = &context.state;
    let key = format!("{namespace}/{cluster_name}");
    let addresses = state.addresses(&cluster);
    let members = cluster.status.as_ref().map_or(0, |s| s.members.len());
    let view = state.clients.observe(&key, &addresses, members).await;
    let primary = cluster
        .status
        .as_ref()
        .and_then(|s| s.primary.as_deref())
        .and_then(|p| ordinal_of(cluster_name, p));
    let Some(ordinal) = choose_snapshot_member(&view.members, primary) else {
        status.phase = Some(BackupPhase::Pending);
        status.message = Some("no healthy, caught-up member to take a snapshot from; waiting".into());
        patch_status(&context.client, backup.as_ref(), Some(&previous), &status).await?;
        context
            .events
            .publish(
                backup.as_ref(),
                Severity::Warning,
                "NoHealthyMember",
                "Backup",
                "no healthy, caught-up member to take a snapshot from".to_string(),
            )
            .await;
        return Ok(Action::requeue(Duration::from_secs(15)));
    };

    let target = backup_target(
        &backup.spec.destination,
        credentials(&context.client, &namespace, &backup.spec.destination).await?,
        state.settings.allow_http_backups,
    )?;
    let sink = BackupSink::new(scoped_target(target, &namespace, cluster_name))?;
    let member = member_name(cluster_name, ordinal);
    let running = MySQLBackupStatus {
        phase: Some(BackupPhase::Running),
        started_at: Some(Time(now)),
        member: Some(member.clone()),
        message: None,
        ..status.clone()
    };
    patch_status(&context.client, backup.as_ref(), Some(&previous), &running).await?;

    let name = object_name(cluster_name, now, "sql");
    let admin = state
        .clients
        .call(
            &key,
            &addresses,
            ordinal,
            "connect",
            Idempotency::Read,
            |admin| async move { Ok(admin) },
        )
        .await;
    let result = match admin {
        Err(error) => Err(format!("{member} is unreachable: {error}")),
        Ok(admin) => {
            let produce = producer(move |writer| {
                Box::pin(async move { snapshot_out(&admin, &["root", REPLICATION_USER], writer).await })
            });
            let upload = |reader| async { sink.upload(&name, reader).await };
            pipe(produce, upload, SNAPSHOT_STALL_TIMEOUT)
                .await
                .map_err(|error: PipeError<SnapshotError, BackupError>| error.to_string())
        }
    };
    let mut done = running.clone();
    match result {
        Ok((stored, info)) => {
            let record = BackupRecord {
                name: backup.name_any(),
                location: stored.location.clone(),
                completed_at: Time(Timestamp::now()),
                size_bytes: stored.size as i64,
                sha256: stored.sha256.clone(),
            };
            done.phase = Some(BackupPhase::Succeeded);
            done.completed_at = Some(record.completed_at.clone());
            done.last_snapshot = Some(record.clone());
            done.gtid_position = Some(info.position.to_string());
            set_condition(
                &mut done.conditions,
                ConditionUpdate::new(
                    ConditionType::Ready,
                    true,
                    "SnapshotStored",
                    stored.location.clone(),
                ),
                backup.metadata.generation,
                Timestamp::now(),
            );
            if let Some(schedule) = &backup.spec.schedule {
                done.next_scheduled_at = next_due(schedule, now).ok().map(Time);
                done.phase = Some(BackupPhase::Pending);
            }
            patch_status(&context.client, backup.as_ref(), Some(&running), &done).await?;
            clusters
                .patch_status(
                    cluster_name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({ "status": { "lastBackup": record } })),
                )
                .await
                .map_err(BackupControllerError::RecordOnCluster)?;
            context
                .events
                .publish(
                    backup.as_ref(),
                    Severity::Normal,
                    "SnapshotStored",
                    "Backup",
                    format!(
                        "{} bytes from {member} at GTID position {} to {} (sha256 {})",
                        stored.size, info.position, stored.location, stored.sha256
                    ),
                )
                .await;
            if let Some(keep) = backup.spec.retain {
                sink.apply_retention(keep as usize).await?;
            }
            Ok(match done.next_scheduled_at {
                Some(next) => Action::requeue(
                    Duration::try_from(Timestamp::now().duration_until(next.0))
                        .unwrap_or(Duration::from_secs(60)),
                ),
                None => Action::await_change(),
            })
        }
        Err(why) => {
            done.phase = Some(BackupPhase::Failed);
            done.completed_at = Some(Time(Timestamp::now()));
            done.message = Some(why.clone());
            set_condition(
                &mut done.conditions,
                ConditionUpdate::new(ConditionType::Ready, false, "SnapshotFailed", why.clone()),
                backup.metadata.generation,
                Timestamp::now(),
            );
            if let Some(schedule) = &backup.spec.schedule {
                done.next_scheduled_at = next_due(schedule, now).ok().map(Time);
            }
            patch_status(&context.client, backup.as_ref(), Some(&running), &done).await?;
            context
                .events
                .publish(
                    backup.as_ref(),
                    Severity::Warning,
                    "SnapshotFailed",
                    "Backup",
                    why,
                )
                .await;
            Ok(Action::requeue(Duration::from_secs(60)))
        }
    }
}
