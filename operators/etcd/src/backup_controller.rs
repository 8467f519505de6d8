//! Reconciling an `EtcdBackup`: when it is due, take one snapshot from a healthy member into
//! its destination, record it on the backup and on the cluster, and prune old snapshots.
//!
//! Snapshots of one cluster are stored under `<destination prefix>/<namespace>/<cluster>/`, so
//! retention never touches another cluster's backups sharing a bucket or directory.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use quorum_core::{
    ReconcileError,
    backup::{
        self, BackupError, BackupSink, CredentialsError, DestinationError, ScheduleError, backup_target,
        credentials, next_due, scoped_target,
    },
    conditions::{ConditionType, ConditionUpdate, set_condition},
    events::Severity,
    runner::Context,
    status::patch_status,
};

use crate::{
    backup::{BackupStepError, choose_snapshot_member, object_name, snapshot_to_sink},
    crd::{BackupPhase, BackupRecord, EtcdBackup, EtcdBackupStatus, EtcdCluster},
    reconcile::State,
    resolver::member_name,
};

/// A failed backup pass, naming what failed.
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
    #[error("backup destination: {0}")]
    Destination(#[from] DestinationError),
    #[error("backup schedule: {0}")]
    Schedule(#[from] ScheduleError),
    #[error("backup store: {0}")]
    Store(#[from] BackupError),
    #[error("snapshot: {0}")]
    Snapshot(#[from] BackupStepError),
    #[error("recording the backup on the cluster: {0}")]
    RecordOnCluster(#[source] kube::Error),
}

impl ReconcileError for BackupControllerError {
    fn metric_label(&self) -> &'static str {
        match self {
            BackupControllerError::Kubernetes(error) => error.metric_label(),
            BackupControllerError::Read { .. } => "read",
            BackupControllerError::Destination(_) => "backup_destination",
            BackupControllerError::Schedule(_) => "backup_schedule",
            BackupControllerError::Store(_) => "backup_store",
            BackupControllerError::Snapshot(_) => "snapshot",
            BackupControllerError::RecordOnCluster(_) => "patch_status",
        }
    }

    fn shared(&self) -> Option<&quorum_core::Error> {
        match self {
            BackupControllerError::Kubernetes(error) => Some(error),
            _ => None,
        }
    }

    fn is_permanent(&self) -> bool {
        // A bad schedule or destination will not fix itself: wait for the resource to change.
        matches!(
            self,
            BackupControllerError::Schedule(_) | BackupControllerError::Destination(_)
        )
    }
}

type Result<T> = std::result::Result<T, BackupControllerError>;

/// When the backup should run next (see [`quorum_core::backup::due_at`]): now for a one-shot
/// backup that has not run, the next schedule time after the last run (or creation) for a
/// scheduled one, never for a finished one-shot backup.
pub fn due_at(backup: &EtcdBackup) -> std::result::Result<Option<Timestamp>, ScheduleError> {
    let status = backup.status.as_ref();
    backup::due_at(
        backup.spec.schedule.as_deref(),
        status.and_then(|status| status.phase),
        status
            .and_then(|status| status.started_at.as_ref())
            .map(|time| time.0),
        backup.metadata.creation_timestamp.as_ref().map(|time| time.0),
    )
}

impl From<CredentialsError> for BackupControllerError {
    fn from(error: CredentialsError) -> Self {
        match error {
            CredentialsError::Read { secret, source } => BackupControllerError::Read {
                what: format!("Secret {secret}"),
                source,
            },
            CredentialsError::Invalid(error) => BackupControllerError::Destination(error),
        }
    }
}

/// Reconciles one `EtcdBackup`.
pub async fn reconcile_backup(backup: Arc<EtcdBackup>, context: Arc<Context<State>>) -> Result<Action> {
    let namespace = backup.namespace().unwrap_or_default();
    let now = Timestamp::now();
    let previous = backup.status.clone().unwrap_or_default();
    let mut status = previous.clone();

    let due = match due_at(&backup) {
        Ok(due) => due,
        Err(error) => {
            status.message = Some(error.to_string());
            patch_status(&context.client, backup.as_ref(), Some(&previous), &status).await?;
            return Err(error.into());
        }
    };
    let Some(due) = due else {
        return Ok(Action::await_change());
    };
    if due > now {
        status.next_scheduled_at = Some(Time(due));
        status.phase.get_or_insert(BackupPhase::Pending);
        patch_status(&context.client, backup.as_ref(), Some(&previous), &status).await?;
        let wait = now.duration_until(due);
        return Ok(Action::requeue(
            Duration::try_from(wait).unwrap_or(Duration::from_secs(60)),
        ));
    }

    let clusters: Api<EtcdCluster> = Api::namespaced(context.client.clone(), &namespace);
    let cluster_name = &backup.spec.cluster_name;
    let Some(cluster) =
        clusters
            .get_opt(cluster_name)
            .await
            .map_err(|source| BackupControllerError::Read {
                what: format!("EtcdCluster {cluster_name}"),
                source,
            })?
    else {
        status.phase = Some(BackupPhase::Pending);
        status.message = Some(format!("EtcdCluster {cluster_name} does not exist"));
        patch_status(&context.client, backup.as_ref(), Some(&previous), &status).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };

    let state = &context.state;
    let resolver = state.resolver(&cluster);
    let key = format!("{namespace}/{cluster_name}");
    let candidates = cluster
        .status
        .as_ref()
        .map_or(0, |s| s.members.len())
        .max(cluster.spec.replicas as usize);
    let view = state.clients.observe(&key, &resolver, candidates).await;
    let Some(ordinal) = choose_snapshot_member(&view) else {
        status.phase = Some(BackupPhase::Pending);
        status.message = Some("no healthy member to take a snapshot from; waiting".to_string());
        patch_status(&context.client, backup.as_ref(), Some(&previous), &status).await?;
        context
            .events
            .publish(
                backup.as_ref(),
                Severity::Warning,
                "NoHealthyMember",
                "Backup",
                "no healthy member to take a snapshot from".to_string(),
            )
            .await;
        return Ok(Action::requeue(Duration::from_secs(15)));
    };

    let target = backup_target(
        &backup.spec.destination,
        credentials(&context.client, &namespace, &backup.spec.destination).await?,
        state.settings.allow_http_backups,
    )?;
    let target = scoped_target(target, &namespace, cluster_name);
    let sink = BackupSink::new(target)?;
    let member = member_name(cluster_name, ordinal);
    let running = EtcdBackupStatus {
        phase: Some(BackupPhase::Running),
        started_at: Some(Time(now)),
        member: Some(member.clone()),
        message: None,
        ..status.clone()
    };
    patch_status(&context.client, backup.as_ref(), Some(&previous), &running).await?;

    let name = object_name(cluster_name, now);
    let result = snapshot_to_sink(&state.clients, &key, &resolver, ordinal, &sink, &name).await;
    let mut done = running.clone();
    match result {
        Ok(stored) => {
            let record = BackupRecord {
                name: backup.name_any(),
                location: stored.location.clone(),
                completed_at: Time(Timestamp::now()),
                size_bytes: stored.size as i64,
                sha256: stored.sha256.clone(),
            };
            done.phase = Some(BackupPhase::Succeeded);
            done.completed_at = Some(record.completed_at.clone());
            done.duration_seconds = Some(stored.duration.as_secs() as i64);
            done.last_snapshot = Some(record.clone());
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
                        "{} bytes from {member} to {} (sha256 {})",
                        stored.size, stored.location, stored.sha256
                    ),
                )
                .await;
            if let Some(keep) = backup.spec.retain {
                let deleted = sink.apply_retention(keep as usize).await?;
                if !deleted.is_empty() {
                    tracing::info!(backup = %backup.name_any(), ?deleted, "pruned old snapshots");
                }
            }
            Ok(match done.next_scheduled_at {
                Some(next) => Action::requeue(
                    Duration::try_from(Timestamp::now().duration_until(next.0))
                        .unwrap_or(Duration::from_secs(60)),
                ),
                None => Action::await_change(),
            })
        }
        Err(error) => {
            done.phase = Some(if backup.spec.schedule.is_some() {
                BackupPhase::Pending
            } else {
                BackupPhase::Failed
            });
            done.message = Some(error.to_string());
            set_condition(
                &mut done.conditions,
                ConditionUpdate::new(ConditionType::Ready, false, "SnapshotFailed", error.to_string()),
                backup.metadata.generation,
                Timestamp::now(),
            );
            patch_status(&context.client, backup.as_ref(), Some(&running), &done).await?;
            context
                .events
                .publish(
                    backup.as_ref(),
                    Severity::Warning,
                    "SnapshotFailed",
                    "Backup",
                    error.to_string(),
                )
                .await;
            Err(error.into())
        }
    }
}
