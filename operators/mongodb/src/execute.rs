//! Taking one step: the membership change recorded before it is made, the admin call through the
//! availability layer, a restart or resync through Kubernetes, and the restore of a new set's
//! backup; a failed step is reported, then returned.

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{Api, ResourceExt};
use quorum_core::{
    availability::retry::Idempotency,
    backup::{
        recovery::{self, StoredPiece, Unplanned},
        restore_retry::FailedRestores,
    },
    repair::{RepairPhase, WipedPod},
    runner::Context,
    status::StatusWriter,
};

use crate::{
    admin::{ReplConfig, codes},
    archive::{
        ArchiveError,
        oplog::{parse_position, position_text, replay_stored},
    },
    clients::{CallFailure, is_unreachable, refusal_code},
    crd::{
        BackupRecord, ChangeKind, MongoDBBackup, MongoDBReplicaSet, MongoDBReplicaSetStatus,
        MongoRestoreSource, OplogPoint, OplogRun, RestoredPoint,
    },
    decide::{Change, Observed, Reason, ResyncCause, Step},
};

use crate::pass::{Error, State};
use crate::status::{Progress, RecordedChange, change_kind};

/// How long a primary that stepped down stays out of elections.
pub(crate) const STEP_DOWN_SECONDS: u32 = 60;

/// How long a stepping-down primary waits for a secondary to catch up.
pub(crate) const STEP_DOWN_CATCH_UP_SECONDS: u32 = 10;

/// A set created with `restoreFrom` loads its backup into the first member once it is primary
/// and alone, before any other member joins (they then copy it by initial sync). `None` when
/// there is nothing to restore now. After a failed attempt the next waits
/// ([`FailedRestores`]), saying so, rather than fetch the backup again on every pass.
pub(crate) async fn restore_step(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    key: &str,
    observed: &Observed,
    recorded: Option<&RecordedChange>,
    status: &mut MongoDBReplicaSetStatus,
    writer: &mut StatusWriter<'_, MongoDBReplicaSet, MongoDBReplicaSetStatus>,
) -> Result<Option<Progress>, Error> {
    let waiting = FailedRestores::waiting(status.restore_failures.as_ref(), Timestamp::now()).cloned();
    let progress = attempt_restore(
        context,
        replica_set,
        key,
        observed,
        recorded,
        waiting.as_ref(),
        status,
        writer,
    )
    .await?;
    if waiting.is_some() {
        return Ok(progress);
    }
    Ok(progress.map(|progress| match progress {
        Progress::Waiting {
            reason: Reason::RestoreFailed,
            message,
        } => Progress::waiting(
            Reason::RestoreFailed,
            FailedRestores::record_failure(&mut status.restore_failures, Timestamp::now(), &message),
        ),
        restored @ Progress::Acted {
            reason: Reason::Restored,
            ..
        } => {
            status.restore_failures = None;
            restored
        }
        other => other,
    }))
}

/// One attempt at [`restore_step`]'s restore, or the wait that stands before it: `waiting`,
/// the failures before it while the next attempt must wait.
#[allow(clippy::too_many_arguments)]
async fn attempt_restore(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    key: &str,
    observed: &Observed,
    recorded: Option<&RecordedChange>,
    waiting: Option<&FailedRestores>,
    status: &mut MongoDBReplicaSetStatus,
    writer: &mut StatusWriter<'_, MongoDBReplicaSet, MongoDBReplicaSetStatus>,
) -> Result<Option<Progress>, Error> {
    let Some(restore) = replica_set
        .spec
        .restore_from
        .as_ref()
        .filter(|_| observed.restore_pending)
    else {
        return Ok(None);
    };
    let source = &restore.backup;
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
    if let Some(failed) = waiting {
        return Ok(Some(Progress::waiting(
            Reason::RestoreFailed,
            failed.message.clone(),
        )));
    }
    let namespace = replica_set.namespace().unwrap_or_default();
    let backups: Api<MongoDBBackup> = Api::namespaced(context.client.clone(), &namespace);
    let backup = backups
        .get_opt(&source.backup_name)
        .await
        .map_err(Error::api(format!(
            "reading MongoDBBackup {}",
            source.backup_name
        )))?;
    let not_ready = |message: String| Ok(Some(Progress::waiting(Reason::RestoreSourceNotReady, message)));
    let Some(backup) = backup else {
        return not_ready(format!("MongoDBBackup {} does not exist", source.backup_name));
    };
    if is_own_backup(&backup, replica_set) {
        return Ok(Some(Progress::waiting(
            Reason::RestoreSourceInvalid,
            format!(
                "MongoDBBackup {} is a backup of this replica set",
                source.backup_name
            ),
        )));
    }
    let plan = match restore_plan(&backup, restore) {
        Ok(plan) => plan,
        Err(why) => return not_ready(format!("MongoDBBackup {}: {why}", source.backup_name)),
    };
    let record = plan.snapshot.clone();
    let destination = &backup.spec.backup.destination;
    let credentials = match quorum_core::backup::credentials(&context.client, &namespace, destination).await {
        Ok(credentials) => credentials,
        Err(error) => return Ok(Some(restore_failed(&error.to_string()))),
    };
    let settings = quorum_core::backup::StoreSettings {
        s3_endpoint: destination.s3.as_ref().and_then(|s3| s3.endpoint.clone()),
        s3_region: destination.s3.as_ref().and_then(|s3| s3.region.clone()),
        allow_http: context.state.settings.members.allow_http_backups,
    };
    let open = |location: &str| {
        let (target, object) = quorum_core::backup::locate(location, &settings, credentials.clone())
            .map_err(|error| restore_failed(&error.to_string()))?;
        let sink = quorum_core::backup::BackupSink::new(target)
            .map_err(|error| restore_failed(&error.to_string()))?;
        Ok::<_, Progress>((sink, object))
    };
    let located = open(&record.location).and_then(|snapshot| {
        let pieces = plan
            .pieces
            .iter()
            .map(|piece| open(&piece.location).map(|(sink, key)| (sink, key, piece.sha256.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((snapshot, pieces))
    });
    let ((sink, object), pieces) = match located {
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
    writer.write(status).await?;

    // A long stream, so not a timed admin call: its own connection, bounded by the store.
    let admin = match context.state.clients.long_running(key, primary) {
        Ok(admin) => admin,
        Err(error) => {
            status.membership_change = None;
            return Ok(Some(restore_failed(&error.to_string())));
        }
    };
    let restored = crate::archive::restore_stored(admin.client(), &sink, &object, &record.sha256).await;
    let restored = match (restored, &plan.replay) {
        (Ok(summary), Some((start, stop))) => match replay(admin.client(), &pieces, *start, *stop).await {
            Ok(point) => Ok((summary, Some(point))),
            // What was loaded goes, so the next pass starts again from an empty set.
            Err(why) => Err((why, crate::archive::drop_user_databases(admin.client()).await)),
        },
        (Ok(summary), None) => Ok((summary, None)),
        (Err(error), _) => {
            status.membership_change = None;
            return Ok(Some(snapshot_failed(
                error,
                interrupted,
                replica_set,
                status,
                &first,
                &source.backup_name,
            )));
        }
    };
    Ok(Some(match restored {
        Ok((summary, point)) => {
            status.membership_change = None;
            status.restored_from = Some(record.clone());
            let replayed = point.as_ref().map_or(String::new(), |point| {
                format!(
                    ", then {} oplog entries from {} archived pieces up to {}",
                    point.entries_applied, point.oplog_pieces, point.time.0
                )
            });
            status.restored_to = point;
            Progress::Acted {
                reason: Reason::Restored,
                message: format!(
                    "restored {} documents from MongoDBBackup {} ({}){replayed}",
                    summary.counts.documents, source.backup_name, record.location
                ),
            }
        }
        Err((why, Ok(()))) => {
            status.membership_change = None;
            restore_failed(&format!("replaying the archived oplog after the snapshot: {why}"))
        }
        // The recorded change stays: the next pass finds the data and explains it, and the
        // operator never loads over it.
        Err((why, Err(dropping))) => Progress::waiting(
            Reason::RestoreFailed,
            format!(
                "the snapshot was restored into {first} but replaying the archived oplog failed: {why}; and \
                 {dropping}, so {first} holds the snapshot and part of the oplog. Drop the user databases on \
                 {first} to restore again"
            ),
        ),
    }))
}

/// What a restore of `source` loads: a snapshot, and for a point in time the oplog pieces to
/// replay after it and where to stop.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RestorePlan {
    pub snapshot: BackupRecord,
    pub pieces: Vec<StoredPiece>,
    /// The snapshot's cluster time, which replay starts after, and the point it stops at.
    pub replay: Option<(bson::Timestamp, Timestamp)>,
}

/// Plans the restore of `source` from `backup`'s status (pure): the newest snapshot, or for a
/// point in time the plan of [`recovery::plan_to_time`] over the kept runs.
///
/// # Errors
/// Why the backup cannot serve the restore yet or at all, naming the field.
pub(crate) fn restore_plan(
    backup: &MongoDBBackup,
    source: &MongoRestoreSource,
) -> Result<RestorePlan, String> {
    let status = backup.status.clone().unwrap_or_default();
    let Some(point) = &source.point_in_time else {
        let snapshot = status.run.last_snapshot.ok_or("it has no stored snapshot yet")?;
        return Ok(RestorePlan {
            snapshot,
            pieces: Vec::new(),
            replay: None,
        });
    };
    let runs = &status.recovery_runs;
    if runs.is_empty() && !backup.spec.archive_oplog {
        return Err("restoreFrom.pointInTime needs a backup that archives the oplog (archiveOplog)".into());
    }
    let plan = plan_to_point(runs, point)?;
    let time = point_second(point);
    let run = &runs[plan.snapshot];
    let start = parse_position(&run.snapshot_cluster_time).ok_or_else(|| {
        format!(
            "the recorded cluster time {} does not parse",
            run.snapshot_cluster_time
        )
    })?;
    Ok(RestorePlan {
        snapshot: BackupRecord {
            name: backup.name_any(),
            location: run.snapshot.location.clone(),
            completed_at: run.snapshot_completed_at.clone(),
            size_bytes: run.snapshot.size_bytes.unwrap_or_default(),
            sha256: run.snapshot.sha256.clone(),
        },
        pieces: runs[plan.pieces].iter().map(|run| run.oplog.clone()).collect(),
        replay: Some((start, time)),
    })
}

/// Whether `backup` is of `replica_set` itself, which a set never restores from.
pub(crate) fn is_own_backup(backup: &MongoDBBackup, replica_set: &MongoDBReplicaSet) -> bool {
    backup.spec.backup.cluster_name == replica_set.name_any()
}

/// [`recovery::plan_to_time`] of `runs` to `point`.
pub(crate) fn plan_to_point(
    runs: &[OplogRun],
    point: &OplogPoint,
) -> Result<recovery::RecoveryPlan, Unplanned> {
    recovery::plan_to_time(runs, point_second(point), "restoreFrom.pointInTime.time", "oplog")
}

/// The whole second of `point`: the oplog's timestamps count whole seconds.
fn point_second(point: &OplogPoint) -> Timestamp {
    Timestamp::from_second(point.time.0.as_second()).unwrap_or(point.time.0)
}

/// Replays `pieces` in order up to `stop`, stopping after the piece that holds an entry past it.
async fn replay(
    client: &mongodb::Client,
    pieces: &[(quorum_core::backup::BackupSink, String, String)],
    start: bson::Timestamp,
    stop: Timestamp,
) -> Result<RestoredPoint, String> {
    let stop_second =
        u32::try_from(stop.as_second()).map_err(|_| format!("{stop} is outside the oplog's times"))?;
    let mut point = RestoredPoint {
        time: Time(stop),
        oplog_pieces: 0,
        entries_applied: 0,
        reached: None,
    };
    for (sink, key, sha256) in pieces {
        let summary = replay_stored(client, sink, key, sha256, start, stop_second)
            .await
            .map_err(|error| format!("{key}: {error}"))?;
        point.oplog_pieces += 1;
        point.entries_applied += i64::try_from(summary.applied).unwrap_or(i64::MAX);
        if let Some(reached) = summary.reached {
            point.reached = Some(position_text(reached));
        }
        if summary.stopped {
            break;
        }
    }
    Ok(point)
}

/// What a pass reports when loading the snapshot failed.
fn snapshot_failed(
    error: ArchiveError,
    interrupted: bool,
    replica_set: &MongoDBReplicaSet,
    status: &mut MongoDBReplicaSetStatus,
    first: &str,
    backup_name: &str,
) -> Progress {
    match error {
        ArchiveError::TargetNotEmpty { database } if interrupted => {
            // Keep the record: the state stays explained until a human decides.
            status.membership_change = replica_set
                .status
                .as_ref()
                .and_then(|s| s.membership_change.clone());
            Progress::Waiting {
                reason: Reason::RestoreInterrupted,
                message: format!(
                    "a restore of MongoDBBackup {backup_name} into {first} was interrupted and {first} holds database \
                     {database}, partly or wholly restored; the operator does not load over it. Drop the user \
                     databases on {first} to restore again"
                ),
            }
        }
        ArchiveError::TargetNotEmpty { database } => Progress::Waiting {
            reason: Reason::RestoreTargetNotEmpty,
            message: format!(
                "{first} already holds database {database}; restoreFrom loads only into an empty set, and nothing \
                 was changed"
            ),
        },
        error => restore_failed(&error.to_string()),
    }
}

pub(crate) fn restore_failed(detail: &str) -> Progress {
    Progress::waiting(
        Reason::RestoreFailed,
        format!("restoring the backup failed, nothing was kept: {detail}"),
    )
}

/// Takes the step, recording it in `status` (and on the API server, through `writer`) first.
pub(crate) async fn act(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    key: &str,
    observed: &Observed,
    step: &Step,
    status: &mut MongoDBReplicaSetStatus,
    writer: &mut StatusWriter<'_, MongoDBReplicaSet, MongoDBReplicaSetStatus>,
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
        Step::Restart { member, .. } => (ChangeKind::Restart, member.clone()),
        Step::Resync { member, .. } => (ChangeKind::Resync, member.clone()),
        Step::ForceReconfigure { member, .. } => (ChangeKind::ForceReconfigure, member.clone()),
        Step::SetFeatureCompatibility { release } => {
            (ChangeKind::SetFeatureCompatibilityVersion, release.clone())
        }
    };
    // The pod a requested repair wipes is recorded before it is wiped: never twice for one
    // request.
    if let Step::Resync {
        pod_uid,
        cause: ResyncCause::Requested,
        ..
    } = step
        && let Some(request) = &observed.repair
    {
        status.repair = Some(request.record(
            RepairPhase::Rebuilding,
            Some(WipedPod {
                uid: pod_uid.clone(),
                claim: observed.repair_claim.clone(),
            }),
            format!("{member}'s volume is deleted with its pod; it copies the data again from the set"),
        ));
        writer.write(status).await?;
    }
    // A forced configuration is recorded as taken before it is sent: one that is applied but
    // whose answer is lost is never forced again for the same request.
    if let Step::ForceReconfigure { .. } = step
        && let Some(request) = &observed.recovery
    {
        let replaced = replica_set
            .status
            .as_ref()
            .and_then(|s| s.primary.clone().or_else(|| s.lost_primary.clone()))
            .unwrap_or_else(|| "the lost majority".to_string());
        status.recovery = Some(request.done(&replaced));
        writer.write(status).await?;
    }
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
        writer.write(status).await?;
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
        Step::ForceReconfigure { host, config, .. } => clients
            .member(
                key,
                host,
                "replSetReconfig force",
                Idempotency::Mutation,
                |admin| {
                    let config = config.clone();
                    async move { admin.force_reconfig(&config).await }
                },
            )
            .await
            .map(|()| {
                let kept: Vec<&str> = config.members.iter().map(|m| m.host.as_str()).collect();
                (
                    Reason::Recovered,
                    format!(
                        "recovered from {member} on request: the set's configuration is forced to the members that answer ({}, version {}); what only the others held is given up",
                        kept.join(", "),
                        config.version
                    ),
                )
            }),
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
        Step::Restart { member, pod_uid } => {
            restart(context, replica_set, member, pod_uid).await?;
            Ok((
                Reason::MemberRestarted,
                format!(
                    "restarted {member} onto the current pod template (version {})",
                    replica_set.spec.version
                ),
            ))
        }
        Step::Resync {
            member,
            pod_uid,
            cause,
        } => {
            resync(context, replica_set, member, pod_uid).await?;
            let why = match cause {
                ResyncCause::TooStale => "was too stale to catch up (error RS102)",
                ResyncCause::Requested => "is rebuilt on request",
            };
            Ok((
                Reason::MemberResynced,
                format!(
                    "{member} {why}: its volume was deleted with its pod, and it copies the data again from the set"
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

pub(crate) fn reconfigured(change: Change, member: &str, config: &ReplConfig) -> (Reason, String) {
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
pub(crate) fn failed(
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
        // Refused: nothing was forced, so the request is not taken.
        if matches!(step, Step::ForceReconfigure { .. }) {
            status.recovery = None;
        }
    }
    Err(Error::Step {
        step: format!("{} of {member}", step_name(step)),
        source: failure,
    })
}

/// The progress to report for the step taken and the error to return once it is reported: a
/// failed step is `Failed` (`StepFailed`: the `Progressing` condition and a warning event), then
/// the pass's error. Any other error is returned at once.
pub(crate) fn reported_failure(taken: Result<Progress, Error>) -> Result<(Progress, Option<Error>), Error> {
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

pub(crate) fn step_name(step: &Step) -> &'static str {
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
        Step::ForceReconfigure { .. } => "forcing the configuration",
        Step::Restart { .. } => "restarting",
        Step::Resync { .. } => "resyncing",
        Step::SetFeatureCompatibility { .. } => "setFeatureCompatibilityVersion",
        Step::Settled | Step::Wait { .. } => "nothing",
    }
}

/// The member's pod as it is now, `None` when it is gone.
/// Deletes a member's pod, exactly the one observed (`pod_uid`), so the StatefulSet recreates it
/// from the current template (the set uses the OnDelete update strategy). A pod created again
/// under its name since is left alone.
pub(crate) async fn restart(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    member: &str,
    pod_uid: &str,
) -> Result<(), Error> {
    let namespace = replica_set.namespace().unwrap_or_default();
    quorum_core::rollout::restart_pod(&context.client, &namespace, member, pod_uid)
        .await
        .map_err(Error::from)
}

/// Wipes a member, exactly the pod observed, so the StatefulSet recreates it on an empty volume
/// and it runs an initial sync.
pub(crate) async fn resync(
    context: &Context<State>,
    replica_set: &MongoDBReplicaSet,
    member: &str,
    pod_uid: &str,
) -> Result<(), Error> {
    let namespace = replica_set.namespace().unwrap_or_default();
    quorum_core::wipe::wipe_member(&context.client, &namespace, member, Some(pod_uid.to_string()))
        .await
        .map_err(Error::api(format!("wiping {member}")))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use quorum_core::{ReconcileError, availability::retry::CallError, events::Severity};

    use super::*;
    use crate::admin::AdminError;

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
            problem: "does not exist".into(),
        };
        assert!(matches!(reported_failure(Err(error)), Err(Error::Secret { .. })));
    }
}
