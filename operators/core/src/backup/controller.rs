//! The controller of every backup resource (`EtcdBackup`, `MySQLBackup`, `RedisBackup`,
//! `MongoDBBackup`): one pass, the same for every engine, around the engine's own part.
//!
//! A pass, in order:
//! 1. **due**: a one-shot backup runs once; a scheduled one at its next time (written to
//!    `nextScheduledAt` while it waits). A schedule that never fires is recorded, reported, and
//!    waits for the resource to change.
//! 2. **cluster**: the cluster named by `clusterName`; while it does not exist the backup
//!    waits (`ClusterNotFound`).
//! 3. **sources** (engine): the members to read from, or why there is none now.
//! 4. **destination**: the store, narrowed to the cluster. A destination that cannot be used
//!    is recorded and reported; a bad one waits for the resource to change, a credentials
//!    Secret that cannot be read is retried.
//! 5. **run**: `Running` is recorded, then each source's snapshot is produced (engine) into
//!    its own object, in order, stopping at the first failure.
//! 6. **record**: on the backup (the shared run fields, then the engine's own), on the
//!    cluster (`lastBackup`), in one event; then retention, then the next schedule time.
//!
//! A failed run is recorded as `Failed` with its reason, reported as a Warning event, and
//! returned as an error (so the error counter sees it); a schedule tries again at its next
//! time, a one-shot backup does not run again.

use std::{fmt::Debug, future::Future, time::Duration};

use jiff::Timestamp;
use k8s_openapi::{NamespaceResourceScope, apimachinery::pkg::apis::meta::v1::Time};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde::{Serialize, de::DeserializeOwned};

use super::{
    BackupError, BackupSink, ScheduleError, SinkSetupError, StoredBackup, cluster_sink, due_at, next_due,
    object_name, until,
};
use crate::{
    ReconcileError,
    conditions::{ConditionType, ConditionUpdate, set_condition},
    crd::{BackupPhase, BackupRecord, BackupRunStatus, BackupSpec},
    events::Severity,
    runner::Context,
    status::StatusWriter,
};

/// How long a backup waits for its cluster to appear.
const CLUSTER_MISSING_RETRY: Duration = Duration::from_secs(30);
/// How long a backup waits for a member to read from.
const NO_SOURCE_RETRY: Duration = Duration::from_secs(15);
/// The action of every event a backup controller publishes.
const ACTION: &str = "Backup";

/// A backup resource: the shared spec and status fragments it embeds.
pub trait BackupResource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    type Status: Default + Clone + PartialEq + Serialize + Send + Sync;

    fn backup_spec(&self) -> &BackupSpec;
    fn backup_status(&self) -> Option<&Self::Status>;
    fn run(status: &Self::Status) -> &BackupRunStatus;
    fn run_mut(status: &mut Self::Status) -> &mut BackupRunStatus;
}

/// Implements [`BackupResource`] for a backup kind whose spec embeds [`BackupSpec`] as `backup`
/// and whose status embeds [`BackupRunStatus`] as `run`.
#[macro_export]
macro_rules! backup_resource {
    ($kind:ty, $status:ty) => {
        impl $crate::backup::controller::BackupResource for $kind {
            type Status = $status;

            fn backup_spec(&self) -> &$crate::crd::BackupSpec {
                &self.spec.backup
            }

            fn backup_status(&self) -> Option<&$status> {
                self.status.as_ref()
            }

            fn run(status: &$status) -> &$crate::crd::BackupRunStatus {
                &status.run
            }

            fn run_mut(status: &mut $status) -> &mut $crate::crd::BackupRunStatus {
                &mut status.run
            }
        }
    };
}

/// Where to read a backup from, or why nothing can be read now.
#[derive(Debug)]
pub enum Sources<S> {
    /// One source (several in Redis cluster mode: one per shard), each into its own object.
    From(Vec<S>),
    /// Nothing to read from now; the backup stays `Pending` with `message` and a Warning event
    /// with `reason`, and looks again shortly.
    Wait { reason: &'static str, message: String },
}

/// One stored object of a run, with what the engine learned while producing it.
#[derive(Debug)]
pub struct Snapshot<Info> {
    pub stored: StoredBackup,
    pub info: Info,
}

/// The part of a backup controller that differs between engines.
pub trait BackupEngine: Send + Sync {
    type Backup: BackupResource;
    /// The cluster a backup names.
    type Cluster: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static;
    type Source: Send + Sync;
    type Info: Send + Sync;
    type Error: ReconcileError;

    /// The engine label of the backup metrics (`etcd`, `mysql`, `redis`, `mongodb`).
    const ENGINE: &'static str;

    /// Whether a plain-HTTP S3 endpoint is allowed (an operator setting).
    fn allow_http(&self) -> bool;

    /// The members to read from, chosen on what the engine observes now.
    fn sources(
        &self,
        backup: &Self::Backup,
        cluster: &Self::Cluster,
    ) -> impl Future<Output = Result<Sources<Self::Source>, Self::Error>> + Send;

    /// The pod name of a source, recorded as `member` when the run starts.
    fn member(&self, source: &Self::Source) -> String;

    /// The extension of the object a source's snapshot is stored in (`db`, `sql`, `rdb`,
    /// `shard-0.rdb`, `archive`).
    fn extension(&self, source: &Self::Source) -> String;

    /// Streams one source's snapshot into `sink` as the object `name`.
    fn produce(
        &self,
        cluster: &Self::Cluster,
        source: &Self::Source,
        sink: &BackupSink,
        name: &str,
    ) -> impl Future<Output = Result<Snapshot<Self::Info>, Self::Error>> + Send;

    /// Records the engine's own fields of a successful run on the backup's status (written in
    /// the same patch as `lastSnapshot`, so a restore reads them together).
    fn record(
        &self,
        status: &mut <Self::Backup as BackupResource>::Status,
        snapshots: &[(&Self::Source, Snapshot<Self::Info>)],
    );

    /// One line saying what a successful run stored (the Ready condition's and the event's
    /// message).
    fn summary(&self, snapshots: &[(&Self::Source, Snapshot<Self::Info>)]) -> String;
}

/// A backup pass that failed, naming what failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupControllerError<E: ReconcileError> {
    #[error(transparent)]
    Kubernetes(#[from] crate::Error),
    #[error("reading {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("backup schedule: {0}")]
    Schedule(#[source] ScheduleError),
    #[error("backup destination: {0}")]
    Destination(#[source] SinkSetupError),
    #[error("pruning old backups: {0}")]
    Retention(#[source] BackupError),
    #[error("recording the backup on the cluster: {0}")]
    RecordOnCluster(#[source] kube::Error),
    #[error(transparent)]
    Engine(E),
}

impl<E: ReconcileError> ReconcileError for BackupControllerError<E> {
    fn metric_label(&self) -> &'static str {
        match self {
            BackupControllerError::Kubernetes(error) => error.metric_label(),
            BackupControllerError::Read { .. } => "read",
            BackupControllerError::Schedule(_) => "backup_schedule",
            BackupControllerError::Destination(_) => "backup_destination",
            BackupControllerError::Retention(_) => "backup_retention",
            BackupControllerError::RecordOnCluster(_) => "record_on_cluster",
            BackupControllerError::Engine(error) => error.metric_label(),
        }
    }

    fn shared(&self) -> Option<&crate::Error> {
        match self {
            BackupControllerError::Kubernetes(error) => Some(error),
            BackupControllerError::Engine(error) => error.shared(),
            _ => None,
        }
    }

    fn is_permanent(&self) -> bool {
        match self {
            BackupControllerError::Schedule(_) => true,
            // A credentials Secret that is missing, unreadable or incomplete now may be
            // created or fixed (a Secret's change wakes no backup): retried. A destination the
            // spec itself gets wrong waits for the resource to change.
            BackupControllerError::Destination(error) => !matches!(error, SinkSetupError::Credentials(_)),
            BackupControllerError::Engine(error) => error.is_permanent(),
            _ => false,
        }
    }
}

type Outcome<E> = Result<Action, BackupControllerError<<E as BackupEngine>::Error>>;

/// One pass of a backup resource's controller (see the module documentation).
///
/// # Errors
/// [`BackupControllerError`]: the Kubernetes call, schedule, destination, retention or
/// engine step that failed; a failed run is recorded on the backup before it is returned.
pub async fn reconcile<E, S>(engine: &E, backup: &E::Backup, context: &Context<S>) -> Outcome<E>
where
    E: BackupEngine,
{
    let now = Timestamp::now();
    let spec = backup.backup_spec();
    let stored = backup.backup_status().cloned().unwrap_or_default();
    let mut writer = StatusWriter::new(&context.client, backup, backup.backup_status());
    let mut status = stored.clone();
    let report = Report { backup, context };
    let namespace = backup.namespace().unwrap_or_default();
    // After an operator restart the newest success is known only from status.
    if let Some(snapshot) = &E::Backup::run(&stored).last_snapshot {
        context.metrics.observe_backup_success(
            E::ENGINE,
            &namespace,
            &spec.cluster_name,
            unix_seconds(snapshot.completed_at.0),
        );
    }

    let due = {
        let run = E::Backup::run(&stored);
        due_at(
            spec.schedule.as_deref(),
            run.phase,
            run.started_at.as_ref().map(|time| time.0),
            backup.meta().creation_timestamp.as_ref().map(|time| time.0),
        )
    };
    let due = match due {
        Ok(due) => due,
        Err(error) => {
            record_failure::<E::Backup>(&mut status, backup, "InvalidSchedule", &error.to_string(), false);
            writer.write(&status).await?;
            report.warning("InvalidSchedule", error.to_string()).await;
            return Err(BackupControllerError::Schedule(error));
        }
    };
    let Some(due) = due else {
        return Ok(Action::await_change());
    };
    if due > now {
        let run = E::Backup::run_mut(&mut status);
        run.next_scheduled_at = Some(Time(due));
        run.phase.get_or_insert(BackupPhase::Pending);
        writer.write(&status).await?;
        return Ok(Action::requeue(until(now, due)));
    }

    let clusters: Api<E::Cluster> = Api::namespaced(context.client.clone(), &namespace);
    let cluster_kind = E::Cluster::kind(&());
    let cluster_name = &spec.cluster_name;
    let Some(cluster) =
        clusters
            .get_opt(cluster_name)
            .await
            .map_err(|source| BackupControllerError::Read {
                what: format!("{cluster_kind} {cluster_name}"),
                source,
            })?
    else {
        let message = format!("{cluster_kind} {cluster_name} does not exist");
        return report
            .wait(
                &mut writer,
                &mut status,
                "ClusterNotFound",
                message,
                CLUSTER_MISSING_RETRY,
            )
            .await;
    };

    let sources = match engine
        .sources(backup, &cluster)
        .await
        .map_err(BackupControllerError::Engine)?
    {
        Sources::From(sources) if !sources.is_empty() => sources,
        Sources::From(_) => {
            let message = "no member to read the backup from".to_string();
            return report
                .wait(
                    &mut writer,
                    &mut status,
                    "NoSnapshotSource",
                    message,
                    NO_SOURCE_RETRY,
                )
                .await;
        }
        Sources::Wait { reason, message } => {
            return report
                .wait(&mut writer, &mut status, reason, message, NO_SOURCE_RETRY)
                .await;
        }
    };

    let sink = match cluster_sink(
        &context.client,
        &namespace,
        cluster_name,
        &spec.destination,
        engine.allow_http(),
    )
    .await
    {
        Ok(sink) => sink,
        Err(error) => {
            let message = format!("the destination cannot be used: {error}");
            record_failure::<E::Backup>(&mut status, backup, "DestinationInvalid", &message, false);
            writer.write(&status).await?;
            report.warning("DestinationInvalid", message).await;
            return Err(BackupControllerError::Destination(error));
        }
    };

    let run = E::Backup::run_mut(&mut status);
    run.phase = Some(BackupPhase::Running);
    run.started_at = Some(Time(now));
    run.member = Some(engine.member(&sources[0]));
    run.message = None;
    writer.write(&status).await?;

    let mut snapshots = Vec::with_capacity(sources.len());
    for source in &sources {
        let name = object_name(cluster_name, now, &engine.extension(source));
        match engine.produce(&cluster, source, &sink, &name).await {
            Ok(snapshot) => snapshots.push((source, snapshot)),
            Err(error) => {
                let message = format!("the snapshot from {}: {error}", engine.member(source));
                record_failure::<E::Backup>(&mut status, backup, "SnapshotFailed", &message, true);
                let run = E::Backup::run_mut(&mut status);
                run.duration_seconds = Some(whole_seconds(now, Timestamp::now()));
                writer.write(&status).await?;
                report.warning("SnapshotFailed", message).await;
                context
                    .metrics
                    .observe_backup_failure(E::ENGINE, &namespace, cluster_name);
                return Err(BackupControllerError::Engine(error));
            }
        }
    }

    let completed_at = Time(Timestamp::now());
    let records: Vec<BackupRecord> = snapshots
        .iter()
        .map(|(_, snapshot)| BackupRecord {
            name: backup.name_any(),
            location: snapshot.stored.location.clone(),
            completed_at: completed_at.clone(),
            size_bytes: snapshot.stored.size as i64,
            sha256: snapshot.stored.sha256.clone(),
        })
        .collect();
    let summary = engine.summary(&snapshots);
    let run = E::Backup::run_mut(&mut status);
    run.phase = Some(match spec.schedule {
        Some(_) => BackupPhase::Pending,
        None => BackupPhase::Succeeded,
    });
    run.completed_at = Some(completed_at.clone());
    run.duration_seconds = Some(whole_seconds(now, completed_at.0));
    run.last_snapshot = records.first().cloned();
    run.next_scheduled_at = next_run(spec, now);
    set_condition(
        &mut run.conditions,
        ConditionUpdate::new(ConditionType::Ready, true, "SnapshotStored", summary.clone()),
        backup.meta().generation,
        completed_at.0,
    );
    engine.record(&mut status, &snapshots);
    writer.write(&status).await?;
    clusters
        .patch_status(
            cluster_name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": { "lastBackup": records.first() } })),
        )
        .await
        .map_err(BackupControllerError::RecordOnCluster)?;
    report.normal("SnapshotStored", summary).await;
    context
        .metrics
        .observe_backup_success(E::ENGINE, &namespace, cluster_name, unix_seconds(completed_at.0));

    if let Some(keep) = spec.retain {
        // A run stores one object per source: keep `retain` runs.
        let deleted = sink
            .apply_retention(keep as usize * snapshots.len())
            .await
            .map_err(BackupControllerError::Retention)?;
        if !deleted.is_empty() {
            tracing::info!(backup = %backup.name_any(), ?deleted, "pruned old backups");
        }
    }
    Ok(match E::Backup::run(&status).next_scheduled_at.as_ref() {
        Some(next) => Action::requeue(until(Timestamp::now(), next.0)),
        None => Action::await_change(),
    })
}

/// The next time a scheduled backup runs after a run started at `started`.
fn next_run(spec: &BackupSpec, started: Timestamp) -> Option<Time> {
    let schedule = spec.schedule.as_deref()?;
    next_due(schedule, started).ok().map(Time)
}

/// Whole seconds, as status records the time: the metric is the same before and after an
/// operator restart, when only status is left to read it from.
fn unix_seconds(at: Timestamp) -> f64 {
    at.as_second() as f64
}

fn whole_seconds(from: Timestamp, to: Timestamp) -> i64 {
    to.duration_since(from).as_secs().max(0)
}

/// Records on `status` a run (or a pass) that could not complete: `Failed` with the reason
/// for a run that started, its message, `Ready` false, and when a schedule runs next.
fn record_failure<B: BackupResource>(
    status: &mut B::Status,
    backup: &B,
    reason: &str,
    message: &str,
    run_started: bool,
) {
    let now = Timestamp::now();
    let run = B::run_mut(status);
    if run_started {
        run.phase = Some(BackupPhase::Failed);
        run.completed_at = Some(Time(now));
        run.next_scheduled_at = run
            .started_at
            .as_ref()
            .and_then(|started| next_run(backup.backup_spec(), started.0));
    }
    run.message = Some(message.to_string());
    set_condition(
        &mut run.conditions,
        ConditionUpdate::new(ConditionType::Ready, false, reason, message.to_string()),
        backup.meta().generation,
        now,
    );
}

/// Where a backup pass reports: its status and its events.
struct Report<'a, B, S> {
    backup: &'a B,
    context: &'a Context<S>,
}

impl<B: BackupResource, S> Report<'_, B, S> {
    async fn warning(&self, reason: &str, message: String) {
        self.context
            .events
            .publish(self.backup, Severity::Warning, reason, ACTION, message)
            .await;
    }

    async fn normal(&self, reason: &str, message: String) {
        self.context
            .events
            .publish(self.backup, Severity::Normal, reason, ACTION, message)
            .await;
    }

    /// Records that the backup waits (`Pending` with `message`), reports it, and looks again
    /// after `retry`.
    async fn wait<E: ReconcileError>(
        &self,
        writer: &mut StatusWriter<'_, B, B::Status>,
        status: &mut B::Status,
        reason: &str,
        message: String,
        retry: Duration,
    ) -> Result<Action, BackupControllerError<E>> {
        let run = B::run_mut(status);
        run.phase = Some(BackupPhase::Pending);
        run.message = Some(message.clone());
        writer.write(status).await?;
        self.warning(reason, message).await;
        Ok(Action::requeue(retry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::{CredentialsError, DestinationError};

    #[derive(Debug, thiserror::Error)]
    #[error("engine")]
    struct EngineFailure;

    impl ReconcileError for EngineFailure {
        fn metric_label(&self) -> &'static str {
            "snapshot"
        }
    }

    type Failure = BackupControllerError<EngineFailure>;

    #[test]
    fn a_bad_schedule_or_destination_waits_for_the_resource_to_change_and_credentials_are_retried() {
        let schedule = Failure::Schedule(ScheduleError::Invalid {
            schedule: "x".into(),
            reason: "1 field".into(),
        });
        let destination =
            Failure::Destination(SinkSetupError::Destination(DestinationError::BothDestinations));
        let missing_secret = Failure::Destination(SinkSetupError::Credentials(CredentialsError::Invalid(
            DestinationError::MissingCredentials { secret: "s3".into() },
        )));
        let snapshot = Failure::Engine(EngineFailure);
        assert!(schedule.is_permanent());
        assert!(destination.is_permanent());
        assert!(!missing_secret.is_permanent());
        assert!(!snapshot.is_permanent());
        assert_eq!(
            [&schedule, &destination, &missing_secret, &snapshot].map(|error| error.metric_label()),
            [
                "backup_schedule",
                "backup_destination",
                "backup_destination",
                "snapshot"
            ]
        );
    }

    #[test]
    fn a_stored_object_is_verified_against_what_the_producer_wrote() {
        let stored = StoredBackup {
            key: "main/main-1.db".into(),
            location: "/backups/main/main-1.db".into(),
            size: 10,
            sha256: "a".repeat(64),
            duration: Duration::from_secs(1),
        };
        assert_eq!(stored.verify("the server", 10, &"a".repeat(64)), Ok(()));
        let refused = stored.verify("the server", 11, &"a".repeat(64)).unwrap_err();
        assert!(
            refused.contains("(10 bytes") && refused.contains("the server wrote (11 bytes"),
            "{refused}"
        );
        assert!(stored.verify("the dump", 10, &"b".repeat(64)).is_err());
    }
}
