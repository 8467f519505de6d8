//! Reconciling a `MongoDBBackup`: when it is due, stream a logical snapshot of the replica set
//! ([`archive::dump`]) into its destination, record it on the backup and on the set, and prune
//! old ones.
//!
//! The snapshot is read from a secondary, so the primary serves its clients undisturbed: a
//! healthy `SECONDARY` as the set's status last recorded it, hidden members first (that is what
//! they are for), then non-voting ones, then the smallest lag ([`choose_source`]). The primary
//! is read only in a set of one data-bearing member. The member must confirm that role itself
//! before it is read (an election may have come after the status). Without such a member the
//! backup stays `Pending` and says why. An object is stored only when the dump wrote its whole archive (the
//! pipe fails the upload otherwise) and the stored bytes are the ones the dump hashed.

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
        BackupError, BackupSink, Due, PipeError, ScheduleError, due, next_due, object_name, pipe, producer,
        until,
    },
    conditions::{ConditionType, ConditionUpdate, set_condition},
    events::Severity,
    runner::Context,
    status::patch_status,
};

use crate::{
    admin::Credentials,
    archive::{self, ArchiveError, DumpSummary},
    crd::{BackupPhase, BackupRecord, MemberStatus, MongoDBBackup, MongoDBBackupStatus, MongoDBReplicaSet},
    reconcile::{State, read_credentials},
    resources::admin_secret_name,
};

/// How long the dump may add nothing to the stream while the store waits for data: a find's
/// next batch on a loaded member.
pub const DUMP_STALL_TIMEOUT: Duration = Duration::from_secs(120);

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
    Schedule(#[from] ScheduleError),
    #[error("applying retention: {0}")]
    Retention(#[source] BackupError),
    #[error("the replica set's credentials: {0}")]
    Credentials(#[source] crate::reconcile::Error),
    #[error("recording the backup on the replica set: {0}")]
    RecordOnCluster(#[source] kube::Error),
}

impl ReconcileError for BackupControllerError {
    fn metric_label(&self) -> &'static str {
        match self {
            BackupControllerError::Kubernetes(error) => error.metric_label(),
            BackupControllerError::Read { .. } => "read",
            BackupControllerError::Schedule(_) => "schedule",
            BackupControllerError::Retention(_) => "retention",
            BackupControllerError::Credentials(_) => "credentials",
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

/// The member to read a snapshot from, among the members the set's status lists: a Healthy
/// `SECONDARY` with a `host`, hidden before visible, non-voting before voting, then the
/// smallest lag (an unknown lag last), then the name. The primary only when the set has
/// `data_members == 1`, and it is Healthy.
///
/// # Errors
/// Why no member can be read now.
pub fn choose_source(
    members: &[MemberStatus],
    data_members: usize,
) -> std::result::Result<&MemberStatus, String> {
    let usable =
        |member: &&MemberStatus| member.health == "Healthy" && member.host.is_some() && !member.arbiter;
    let secondary = members
        .iter()
        .filter(usable)
        .filter(|member| member.state == "SECONDARY")
        .min_by_key(|member| {
            (
                !member.hidden,
                member.votes != 0,
                member.lag_seconds.unwrap_or(i64::MAX),
                member.name.as_str(),
            )
        });
    if let Some(secondary) = secondary {
        return Ok(secondary);
    }
    if data_members == 1
        && let Some(primary) = members
            .iter()
            .filter(usable)
            .find(|member| member.state == "PRIMARY")
    {
        return Ok(primary);
    }
    Err(match members.iter().filter(|member| !member.arbiter).count() {
        0 => "the replica set reports no members yet".to_string(),
        _ => {
            let seen = members
                .iter()
                .filter(|member| !member.arbiter)
                .map(|member| format!("{} {} {}", member.name, member.state, member.health))
                .collect::<Vec<_>>()
                .join(", ");
            format!("no healthy secondary to read from ({seen}); the primary is read only in a set of one")
        }
    })
}

/// Reconciles one `MongoDBBackup`.
pub async fn reconcile_backup(backup: Arc<MongoDBBackup>, context: Arc<Context<State>>) -> Result<Action> {
    let namespace = backup.namespace().unwrap_or_default();
    let previous = backup.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    match due(
        backup.spec.schedule.as_deref(),
        previous.phase,
        previous.started_at.as_ref().map(|t| t.0),
        backup.metadata.creation_timestamp.as_ref().map(|t| t.0),
        now,
    )? {
        Due::Never => return Ok(Action::await_change()),
        Due::Later(wait) => return Ok(Action::requeue(wait)),
        Due::Now => {}
    }
    let cluster_name = &backup.spec.cluster_name;
    let replica_sets: Api<MongoDBReplicaSet> = Api::namespaced(context.client.clone(), &namespace);
    let replica_set =
        replica_sets
            .get_opt(cluster_name)
            .await
            .map_err(|source| BackupControllerError::Read {
                what: format!("MongoDBReplicaSet {cluster_name}"),
                source,
            })?;
    let Some(replica_set) = replica_set else {
        let message = format!("MongoDBReplicaSet {cluster_name} does not exist");
        return wait(&context, &backup, &previous, "ClusterNotFound", message, 30).await;
    };
    let members = replica_set
        .status
        .as_ref()
        .map(|status| status.members.clone())
        .unwrap_or_default();
    let source = match choose_source(&members, replica_set.spec.data_members()) {
        Ok(source) => source.clone(),
        Err(why) => return wait(&context, &backup, &previous, "NoSnapshotSource", why, 15).await,
    };
    let credentials = read_credentials(&context, &namespace, &admin_secret_name(&replica_set))
        .await
        .map_err(BackupControllerError::Credentials)?;
    let sink = match quorum_core::backup::cluster_sink(
        &context.client,
        &namespace,
        cluster_name,
        &backup.spec.destination,
        context.state.settings.allow_http_backups,
    )
    .await
    {
        Ok(sink) => sink,
        Err(error) => {
            let message = format!("the destination cannot be used: {error}");
            return wait(&context, &backup, &previous, "DestinationInvalid", message, 30).await;
        }
    };

    let host = source.host.clone().unwrap_or_default();
    let address = context
        .state
        .clients
        .dial_address(&format!("{namespace}/{cluster_name}"), &host);
    let client = match confirm_source(&address, &credentials, source.state == "PRIMARY").await {
        Ok(client) => client,
        Err(why) => {
            let message = format!("{} ({host}) cannot be read now: {why}", source.name);
            return wait(&context, &backup, &previous, "NoSnapshotSource", message, 15).await;
        }
    };

    let running = MongoDBBackupStatus {
        phase: Some(BackupPhase::Running),
        started_at: Some(Time(now)),
        message: None,
        ..previous.clone()
    };
    patch_status(&context.client, backup.as_ref(), Some(&previous), &running).await?;
    let name = object_name(cluster_name, now, archive::EXTENSION);
    let taken = take_snapshot(client, &sink, &name).await;

    let mut done = running.clone();
    done.completed_at = Some(Time(Timestamp::now()));
    if let Some(schedule) = &backup.spec.schedule {
        done.next_scheduled_at = next_due(schedule, now).ok().map(Time);
    }
    let (stored, summary) = match taken {
        Ok(taken) => taken,
        Err(why) => {
            let why = format!("the snapshot from {} ({host}): {why}", source.name);
            done.phase = Some(BackupPhase::Failed);
            done.message = Some(why.clone());
            set_condition(
                &mut done.conditions,
                ConditionUpdate::new(ConditionType::Ready, false, "SnapshotFailed", why.clone()),
                backup.metadata.generation,
                Timestamp::now(),
            );
            patch_status(&context.client, backup.as_ref(), Some(&running), &done).await?;
            publish(&context, &backup, Severity::Warning, "SnapshotFailed", why).await;
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
    };

    let record = BackupRecord {
        name: backup.name_any(),
        location: stored.location.clone(),
        completed_at: done.completed_at.clone().unwrap_or(Time(now)),
        size_bytes: stored.size as i64,
        sha256: stored.sha256.clone(),
    };
    done.last_snapshot = Some(record.clone());
    done.read_from = Some(source.name.clone());
    done.cluster_time = Some(archive::cluster_time_text(summary.header.cluster_time));
    done.databases = Some(summary.counts.databases as i64);
    done.documents = Some(summary.counts.documents as i64);
    done.phase = Some(match backup.spec.schedule {
        Some(_) => BackupPhase::Pending,
        None => BackupPhase::Succeeded,
    });
    let message = format!(
        "{} databases, {} documents read from {} at cluster time {}: {} bytes to {} (sha256 {})",
        summary.counts.databases,
        summary.counts.documents,
        source.name,
        archive::cluster_time_text(summary.header.cluster_time),
        stored.size,
        stored.location,
        stored.sha256
    );
    set_condition(
        &mut done.conditions,
        ConditionUpdate::new(ConditionType::Ready, true, "SnapshotStored", message.clone()),
        backup.metadata.generation,
        Timestamp::now(),
    );
    patch_status(&context.client, backup.as_ref(), Some(&running), &done).await?;
    // The replica set's reconciler patches only the status fields it changed, which leaves
    // this one alone.
    replica_sets
        .patch_status(
            cluster_name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": { "lastBackup": record } })),
        )
        .await
        .map_err(BackupControllerError::RecordOnCluster)?;
    publish(&context, &backup, Severity::Normal, "SnapshotStored", message).await;
    if let Some(keep) = backup.spec.retain {
        sink.apply_retention(keep as usize)
            .await
            .map_err(BackupControllerError::Retention)?;
    }
    Ok(match &done.next_scheduled_at {
        Some(next) => Action::requeue(until(Timestamp::now(), next.0)),
        None => Action::await_change(),
    })
}

/// What was stored.
struct StoredArchive {
    location: String,
    size: u64,
    sha256: String,
}

/// A client of the member at `address`, once the member confirms the role it was chosen in
/// (the set's status may be older than an election).
async fn confirm_source(
    address: &str,
    credentials: &Credentials,
    read_primary: bool,
) -> std::result::Result<mongodb::Client, String> {
    let client = archive::connect_direct(address, Some(credentials)).map_err(|error| error.to_string())?;
    let hello = client
        .database("admin")
        .run_command(bson::doc! { "hello": 1 })
        .await
        .map_err(|error| format!("hello: {error}"))?;
    let role = match (hello.get_bool("isWritablePrimary"), hello.get_bool("secondary")) {
        (Ok(true), _) => "PRIMARY",
        (_, Ok(true)) => "SECONDARY",
        _ => "neither primary nor secondary",
    };
    if role != if read_primary { "PRIMARY" } else { "SECONDARY" } {
        return Err(format!("it now reports {role}"));
    }
    Ok(client)
}

/// Streams an archive of the member behind `client` into the object `name`.
async fn take_snapshot(
    client: mongodb::Client,
    sink: &BackupSink,
    name: &str,
) -> std::result::Result<(StoredArchive, DumpSummary), String> {
    let produce = producer(move |writer| Box::pin(async move { archive::dump(&client, writer).await }));
    let upload = |reader| async move { sink.upload(name, reader).await };
    let (stored, summary) = pipe(produce, upload, DUMP_STALL_TIMEOUT)
        .await
        .map_err(|error: PipeError<ArchiveError, BackupError>| error.to_string())?;
    if stored.sha256 != summary.sha256 || stored.size != summary.size {
        return Err(format!(
            "the stored object ({} bytes, sha256 {}) is not what the dump wrote ({} bytes, sha256 {})",
            stored.size, stored.sha256, summary.size, summary.sha256
        ));
    }
    Ok((
        StoredArchive {
            location: stored.location,
            size: stored.size,
            sha256: stored.sha256,
        },
        summary,
    ))
}

/// Leaves the backup Pending with why, and tries again in `seconds`.
async fn wait(
    context: &Context<State>,
    backup: &MongoDBBackup,
    previous: &MongoDBBackupStatus,
    reason: &'static str,
    message: String,
    seconds: u64,
) -> Result<Action> {
    let status = MongoDBBackupStatus {
        phase: Some(BackupPhase::Pending),
        message: Some(message.clone()),
        ..previous.clone()
    };
    patch_status(&context.client, backup, Some(previous), &status).await?;
    publish(context, backup, Severity::Warning, reason, message).await;
    Ok(Action::requeue(Duration::from_secs(seconds)))
}

async fn publish(
    context: &Context<State>,
    backup: &MongoDBBackup,
    severity: Severity,
    reason: &'static str,
    message: String,
) {
    context
        .events
        .publish(backup, severity, reason, "Backup", message)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, state: &str, health: &str) -> MemberStatus {
        MemberStatus {
            name: name.to_string(),
            host: Some(format!("{name}.main.prod.svc:27017")),
            state: state.to_string(),
            health: health.to_string(),
            votes: 1,
            priority: 1.0,
            hidden: false,
            arbiter: false,
            lag_seconds: Some(0),
            version: None,
            message: None,
        }
    }

    fn lagging(mut member: MemberStatus, seconds: i64) -> MemberStatus {
        member.lag_seconds = Some(seconds);
        member
    }

    fn hidden(mut member: MemberStatus) -> MemberStatus {
        member.hidden = true;
        member.votes = 0;
        member.priority = 0.0;
        member
    }

    fn non_voting(mut member: MemberStatus) -> MemberStatus {
        member.votes = 0;
        member.priority = 0.0;
        member
    }

    fn arbiter(name: &str) -> MemberStatus {
        let mut member = member(name, "ARBITER", "Healthy");
        member.arbiter = true;
        member
    }

    #[test]
    fn snapshots_come_from_the_best_healthy_secondary() {
        // (case, members, data members, expected source or the start of why not)
        type Case = (
            &'static str,
            Vec<MemberStatus>,
            usize,
            std::result::Result<&'static str, &'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                "the secondary that trails least",
                vec![
                    member("main-0", "PRIMARY", "Healthy"),
                    lagging(member("main-1", "SECONDARY", "Healthy"), 4),
                    lagging(member("main-2", "SECONDARY", "Healthy"), 1),
                ],
                3,
                Ok("main-2"),
            ),
            (
                "a hidden member is for backups, though it trails",
                vec![
                    member("main-0", "PRIMARY", "Healthy"),
                    member("main-1", "SECONDARY", "Healthy"),
                    member("main-2", "SECONDARY", "Healthy"),
                    lagging(hidden(member("main-3", "SECONDARY", "Healthy")), 9),
                ],
                4,
                Ok("main-3"),
            ),
            (
                "a non-voting member before a voting one",
                vec![
                    member("main-0", "PRIMARY", "Healthy"),
                    member("main-1", "SECONDARY", "Healthy"),
                    lagging(non_voting(member("main-2", "SECONDARY", "Healthy")), 3),
                ],
                3,
                Ok("main-2"),
            ),
            (
                "an unknown lag comes after any known one; equal ones go by name",
                vec![
                    member("main-0", "PRIMARY", "Healthy"),
                    MemberStatus {
                        lag_seconds: None,
                        ..member("main-1", "SECONDARY", "Healthy")
                    },
                    member("main-3", "SECONDARY", "Healthy"),
                    member("main-2", "SECONDARY", "Healthy"),
                ],
                4,
                Ok("main-2"),
            ),
            (
                "an unhealthy, unreachable, syncing or unnamed member is not read",
                vec![
                    member("main-0", "PRIMARY", "Healthy"),
                    member("main-1", "SECONDARY", "Unknown"),
                    hidden(member("main-2", "SECONDARY", "Unhealthy")),
                    member("main-3", "STARTUP2", "Healthy"),
                    MemberStatus {
                        host: None,
                        ..member("main-4", "SECONDARY", "Healthy")
                    },
                    arbiter("main-arbiter-0"),
                ],
                5,
                Err("no healthy secondary"),
            ),
            (
                "the primary of a set of one",
                vec![member("main-0", "PRIMARY", "Healthy")],
                1,
                Ok("main-0"),
            ),
            (
                "never the primary of a larger set, even with no secondary up",
                vec![
                    member("main-0", "PRIMARY", "Healthy"),
                    member("main-1", "SECONDARY", "Unknown"),
                    member("main-2", "RECOVERING", "Healthy"),
                ],
                3,
                Err("no healthy secondary"),
            ),
            (
                "nor a primary the operator cannot reach",
                vec![member("main-0", "PRIMARY", "Unknown")],
                1,
                Err("no healthy secondary"),
            ),
            (
                "a set not observed yet",
                vec![],
                3,
                Err("the replica set reports no members"),
            ),
        ];
        for (case, members, data_members, expected) in cases {
            let chosen = choose_source(&members, data_members).map(|member| member.name.as_str());
            match (chosen, expected) {
                (Ok(chosen), Ok(expected)) => assert_eq!(chosen, expected, "{case}"),
                (Err(why), Err(expected)) => assert!(why.starts_with(expected), "{case}: {why}"),
                (chosen, expected) => panic!("{case}: {chosen:?}, expected {expected:?}"),
            }
        }
    }
}
