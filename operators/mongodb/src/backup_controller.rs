//! Reconciling a `MongoDBBackup`: core's backup controller
//! ([`quorum_core::backup::controller`]) around MongoDB's part, a logical snapshot of the
//! replica set ([`archive::dump`]).
//!
//! The snapshot is read from a secondary, so the primary serves its clients undisturbed: a
//! healthy `SECONDARY` as the set's status last recorded it, hidden members first (that is what
//! they are for), then non-voting ones, then the smallest lag ([`choose_source`]). The primary
//! is read only in a set of one data-bearing member. The member must confirm that role itself
//! before it is read (an election may have come after the status). Without such a member the
//! backup stays `Pending` and says why. An object is stored only when the dump wrote its whole
//! archive (the pipe fails the upload otherwise) and the stored bytes are the ones the dump
//! hashed.

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{ResourceExt, runtime::controller::Action};
use quorum_core::{
    ReconcileError,
    backup::{
        BackupError, BackupSink, PipeError, StoredBackup,
        controller::{self, BackupControllerError, BackupEngine, Snapshot, Sources},
        digest::ContentFingerprint,
        job::{JobOutcome, JobSettings},
        pipe, producer,
        recovery::{self, StoredPiece},
    },
    runner::{Context, object_key},
};

use crate::{
    admin::Credentials,
    archive::{
        self, ArchiveError, DumpSummary,
        oplog::{self, ArchivedOplog},
    },
    crd::{MemberStatus, MongoDBBackup, MongoDBBackupSpec, MongoDBBackupStatus, MongoDBReplicaSet, OplogRun},
    pass::State,
    reconcile::read_credentials,
    resources::admin_secret_name,
};

/// How long the dump may add nothing to the stream while the store waits for data: a find's
/// next batch on a loaded member.
pub const DUMP_STALL_TIMEOUT: Duration = Duration::from_secs(120);

quorum_core::backup_resource!(MongoDBBackup, MongoDBBackupSpec, MongoDBBackupStatus, archive_oplog: false);

/// Why MongoDB's part of a backup failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the replica set's credentials: {0}")]
    Credentials(#[source] crate::reconcile::Error),
    #[error("{0}")]
    Dump(String),
}

impl ReconcileError for SnapshotError {
    fn metric_label(&self) -> &'static str {
        match self {
            SnapshotError::Credentials(_) => "credentials",
            SnapshotError::Dump(_) => "snapshot",
        }
    }
}

/// MongoDB's part of a backup: one member, confirmed in its role, dumped.
struct MongoSnapshots<'a> {
    context: &'a Context<State>,
}

/// The member a snapshot is read from, connected once it confirmed its role.
struct Source {
    member: String,
    client: mongodb::Client,
}

impl BackupEngine for MongoSnapshots<'_> {
    type Backup = MongoDBBackup;
    type Cluster = MongoDBReplicaSet;
    type Source = Source;
    type Info = RunInfo;
    type Error = SnapshotError;

    const ENGINE: &'static str = crate::clients::ENGINE;
    const MAX_CLUSTER_NAME: usize = crate::crd::MAX_NAME;

    fn allow_http(&self) -> bool {
        self.context.state.settings.members.allow_http_backups
    }

    fn pod_overrides<'c>(
        &self,
        cluster: &'c MongoDBReplicaSet,
    ) -> Option<&'c quorum_core::crd::PodOverrides> {
        cluster.spec.pod_template.as_ref()
    }

    fn secrets(&self, replica_set: &MongoDBReplicaSet) -> Vec<String> {
        vec![admin_secret_name(replica_set)]
    }

    fn jobs(&self) -> Option<JobSettings> {
        let settings = &self.context.state.settings;
        JobSettings::when_configured(&settings.members, &settings.operator_image)
    }

    async fn sources(
        &self,
        _: &MongoDBBackup,
        replica_set: &MongoDBReplicaSet,
    ) -> Result<Sources<Source>, SnapshotError> {
        let members = replica_set
            .status
            .as_ref()
            .map(|status| status.members.clone())
            .unwrap_or_default();
        let source = match choose_source(&members, replica_set.spec.data_members()) {
            Ok(source) => source.clone(),
            Err(message) => {
                return Ok(Sources::Wait {
                    reason: "NoSnapshotSource",
                    message,
                });
            }
        };
        let namespace = replica_set.namespace().unwrap_or_default();
        let credentials = read_credentials(self.context, &namespace, &admin_secret_name(replica_set))
            .await
            .map_err(SnapshotError::Credentials)?;
        let host = source.host.clone().unwrap_or_default();
        let address = self
            .context
            .state
            .clients
            .dial_address(&object_key(replica_set), &host);
        Ok(
            match confirm_source(&address, &credentials, source.state == "PRIMARY").await {
                Ok(client) => Sources::From(vec![Source {
                    member: source.name,
                    client,
                }]),
                Err(why) => Sources::Wait {
                    reason: "NoSnapshotSource",
                    message: format!("{} ({host}) cannot be read now: {why}", source.name),
                },
            },
        )
    }

    fn member(&self, source: &Source) -> String {
        source.member.clone()
    }

    fn extension(&self, _: &Source) -> String {
        archive::EXTENSION.to_string()
    }

    fn companion_objects(&self, backup: &MongoDBBackup) -> usize {
        usize::from(backup.spec.archive_oplog)
    }

    async fn produce(
        &self,
        backup: &Self::Backup,
        _: &MongoDBReplicaSet,
        source: &Source,
        sink: &BackupSink,
        name: &str,
    ) -> Result<Snapshot<RunInfo>, SnapshotError> {
        let client = source.client.clone();
        let produce = producer(move |writer| Box::pin(async move { archive::dump(&client, writer).await }));
        let upload = |reader| async move { sink.upload(name, reader).await };
        let (stored, summary) = pipe(produce, upload, DUMP_STALL_TIMEOUT)
            .await
            .map_err(|error: PipeError<ArchiveError, BackupError>| SnapshotError::Dump(error.to_string()))?;
        stored
            .verify("the dump", summary.size, &summary.sha256)
            .map_err(SnapshotError::Dump)?;
        let archive = match backup.spec.archive_oplog {
            true => Some(archive_run(backup, &source.client, sink, name, &stored, &summary).await?),
            false => None,
        };
        Ok(Snapshot {
            stored,
            info: RunInfo {
                dump: summary,
                archive,
            },
        })
    }

    fn record(&self, status: &mut MongoDBBackupStatus, snapshots: &[(&Source, Snapshot<RunInfo>)]) {
        let Some((source, snapshot)) = snapshots.first() else {
            return;
        };
        let summary = &snapshot.info.dump;
        status.read_from = Some(source.member.clone());
        status.cluster_time = Some(archive::cluster_time_text(summary.header.cluster_time));
        status.databases = Some(summary.counts.databases as i64);
        status.documents = Some(summary.counts.documents as i64);
        status.content = Some(summary.content.clone());
        if let Some((_, runs)) = &snapshot.info.archive {
            status.recovery_runs = runs.clone();
            (status.recoverable_from, status.recoverable_until) = recovery::window_in_status(runs);
        }
    }

    fn describe(&self, source: &Source, snapshot: &Snapshot<RunInfo>) -> String {
        let summary = &snapshot.info.dump;
        let archived = snapshot
            .info
            .archive
            .as_ref()
            .map_or(String::new(), |(archived, _)| {
                format!(
                    ", and the oplog after {} to {} ({} entries, {} bytes)",
                    oplog::position_text(archived.after),
                    oplog::position_text(archived.through),
                    archived.entries,
                    archived.size
                )
            });
        format!(
            "{} databases, {} documents read from {} at cluster time {}: {} bytes to {} (sha256 {}){archived}",
            summary.counts.databases,
            summary.counts.documents,
            source.member,
            archive::cluster_time_text(summary.header.cluster_time),
            snapshot.stored.size,
            snapshot.stored.location,
            snapshot.stored.sha256
        )
    }

    /// The newest snapshot, and every kept run's snapshot and oplog: a point-in-time restore
    /// may read any of them.
    fn referenced(&self, status: &MongoDBBackupStatus) -> Vec<String> {
        status
            .run
            .last_snapshot
            .iter()
            .map(|record| record.location.clone())
            .chain(recovery::stored_locations(&status.recovery_runs))
            .collect()
    }

    fn restored_from(&self, cluster: &MongoDBReplicaSet) -> Vec<String> {
        cluster
            .status
            .iter()
            .filter_map(|status| status.restored_from.as_ref())
            .map(|record| record.location.clone())
            .collect()
    }

    fn runs_held_from(
        &self,
        status: &MongoDBBackupStatus,
        backup: &MongoDBBackup,
        replica_set: &MongoDBReplicaSet,
    ) -> Option<usize> {
        // A set is never restored from its own backup: that is refused (RestoreSourceInvalid).
        if crate::execute::is_own_backup(backup, replica_set) {
            return None;
        }
        let runs = status.recovery_runs.as_slice();
        let source = replica_set.spec.restore_from.as_ref();
        let done = replica_set
            .status
            .as_ref()
            .is_some_and(|status| status.restored_from.is_some());
        recovery::restore_holds_from(
            &backup.name_any(),
            source.map(|source| source.backup.backup_name.as_str()),
            done,
            || {
                let point = source?.point_in_time.as_ref()?;
                Some(crate::execute::plan_to_point(runs, point).map(|plan| plan.snapshot))
            },
        )
    }

    fn archive_break(&self, status: &MongoDBBackupStatus) -> Option<String> {
        let last_snapshot = status
            .run
            .last_snapshot
            .as_ref()
            .map(|record| record.location.as_str());
        recovery::archive_break(&status.recovery_runs, last_snapshot, "oplog")
    }

    fn keep_runs(&self, status: &mut MongoDBBackupStatus, retain: u32, held_from: Option<usize>) -> bool {
        recovery::keep_newest_in_status(
            &mut status.recovery_runs,
            (&mut status.recoverable_from, &mut status.recoverable_until),
            retain,
            held_from,
        )
    }

    fn drill_cluster(
        &self,
        backup: &MongoDBBackup,
        replica_set: &MongoDBReplicaSet,
        name: &str,
    ) -> Result<MongoDBReplicaSet, String> {
        Ok(drill_replica_set(backup, replica_set, name))
    }

    fn drill_claims(&self, name: &str) -> Vec<String> {
        vec![quorum_core::pod::data_claim_name(&crate::resources::member_name(
            name, 0,
        ))]
    }

    fn drill_ready(&self, scratch: &MongoDBReplicaSet) -> bool {
        scratch.status.as_ref().is_some_and(|status| {
            quorum_core::backup::drill::restored_and_ready(status.restored_from.is_some(), &status.conditions)
        })
    }

    async fn drill_content(
        &self,
        scratch: &MongoDBReplicaSet,
        _recorded: &MongoDBBackupStatus,
    ) -> Result<ContentFingerprint, String> {
        let namespace = scratch.namespace().unwrap_or_default();
        let credentials = read_credentials(self.context, &namespace, &admin_secret_name(scratch))
            .await
            .map_err(|error| format!("the credentials: {error}"))?;
        let member = scratch
            .status
            .as_ref()
            .and_then(|status| status.members.iter().find_map(|member| member.host.clone()))
            .ok_or("no member of the drill's set has an address yet")?;
        let address = self
            .context
            .state
            .clients
            .dial_address(&object_key(scratch), &member);
        let client = confirm_source(&address, &credentials, true).await?;
        archive::dump(&client, tokio::io::sink())
            .await
            .map(|summary| summary.content)
            .map_err(|error| error.to_string())
    }

    fn recorded_content(&self, status: &MongoDBBackupStatus) -> Option<ContentFingerprint> {
        status.content.clone()
    }
}

/// What one run of a MongoDB backup produced.
pub struct RunInfo {
    dump: DumpSummary,
    /// With `archiveOplog`: the oplog archived in this run, and the kept runs with it.
    archive: Option<(ArchivedOplog, Vec<OplogRun>)>,
}

/// Archives the oplog the member holds since the previous run (since this run's snapshot for
/// the first, or when the member's oplog no longer holds where the previous run ended) next to
/// the snapshot `name`, and returns it with the runs: the kept ones and this (retention trims
/// them when it prunes).
async fn archive_run(
    backup: &MongoDBBackup,
    client: &mongodb::Client,
    sink: &BackupSink,
    name: &str,
    snapshot: &StoredBackup,
    dump: &DumpSummary,
) -> Result<(ArchivedOplog, Vec<OplogRun>), SnapshotError> {
    let cluster_time = dump.header.cluster_time;
    // Times are the server's (the oplog's seconds), never this pod's clock: the snapshot holds
    // nothing past the commit point after the dump, a piece everything up to its end.
    let completed = oplog::committed_position(client)
        .await
        .map_err(|error| SnapshotError::Dump(format!("reading the commit point after the dump: {error}")))?;
    let server_second = |time: bson::Timestamp| {
        Timestamp::from_second(i64::from(time.time))
            .map(Time)
            .map_err(|error| SnapshotError::Dump(format!("the server's time {}: {error}", time.time)))
    };
    let mut runs = backup
        .status
        .as_ref()
        .map(|status| status.recovery_runs.clone())
        .unwrap_or_default();
    // A previous end beyond this snapshot's time is another history's (a restored set).
    let previous_end = runs
        .last()
        .and_then(|run| oplog::parse_position(&run.oplog_through))
        .filter(|end| (end.time, end.increment) <= (cluster_time.time, cluster_time.increment));
    let object = format!(
        "{}.{}",
        name.strip_suffix(&format!(".{}", archive::EXTENSION))
            .unwrap_or(name),
        oplog::EXTENSION
    );
    let object = object.as_str();
    let archive = |after: bson::Timestamp| async move {
        let client = client.clone();
        let produce = producer(move |writer| {
            Box::pin(async move { oplog::archive_oplog(&client, after, writer).await })
        });
        let upload = |reader| async move { sink.upload(object, reader).await };
        pipe(produce, upload, DUMP_STALL_TIMEOUT).await
    };
    let archived = match previous_end {
        Some(end) => match archive(end).await {
            Err(PipeError::Producer(ArchiveError::OplogGap { .. })) => archive(cluster_time).await,
            other => other,
        },
        None => archive(cluster_time).await,
    };
    let (stored, archived) = archived.map_err(|error: PipeError<ArchiveError, BackupError>| {
        SnapshotError::Dump(format!("archiving the oplog: {error}"))
    })?;
    stored
        .verify("the oplog read", archived.size, &archived.sha256)
        .map_err(SnapshotError::Dump)?;
    runs.push(OplogRun {
        snapshot: StoredPiece {
            location: snapshot.location.clone(),
            sha256: snapshot.sha256.clone(),
            size_bytes: i64::try_from(snapshot.size).ok(),
        },
        snapshot_cluster_time: archive::cluster_time_text(cluster_time),
        snapshot_completed_at: server_second(completed)?,
        oplog: StoredPiece {
            location: stored.location.clone(),
            sha256: stored.sha256.clone(),
            size_bytes: i64::try_from(stored.size).ok(),
        },
        oplog_after: oplog::position_text(archived.after),
        oplog_through: oplog::position_text(archived.through),
        // Every entry of an earlier second is in this piece or an earlier one.
        archived_at: server_second(archived.through)?,
    });
    Ok((archived, runs))
}

/// The throw-away replica set `name` a drill restores `backup`'s newest snapshot into: one
/// voting member of `replica_set`'s version, storage, pod template and secrets, no other
/// members and no backups.
pub fn drill_replica_set(
    backup: &MongoDBBackup,
    replica_set: &MongoDBReplicaSet,
    name: &str,
) -> MongoDBReplicaSet {
    let mut spec = replica_set.spec.clone();
    spec.members = 1;
    spec.non_voting_members = 0;
    spec.hidden_members = 0;
    spec.arbiter = false;
    spec.backup = None;
    spec.restore_from = Some(crate::crd::MongoRestoreSource::newest(backup.name_any()));
    let mut scratch = MongoDBReplicaSet::new(name, spec);
    scratch.metadata.namespace = backup.namespace();
    scratch
}

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

/// Reconciles one `MongoDBBackup`.
pub async fn reconcile_backup(
    backup: Arc<MongoDBBackup>,
    context: Arc<Context<State>>,
) -> Result<Action, BackupControllerError<SnapshotError>> {
    controller::reconcile(&MongoSnapshots { context: &context }, backup.as_ref(), &context).await
}

/// Takes one run of a `MongoDBBackup` in a backup Job's process.
pub async fn run_backup(
    backup: Arc<MongoDBBackup>,
    context: Arc<Context<State>>,
    run: quorum_core::backup::job::JobRun,
) -> JobOutcome {
    controller::run_in_job(
        &MongoSnapshots { context: &context },
        backup.as_ref(),
        &context,
        run,
    )
    .await
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
            failing_since: None,
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
