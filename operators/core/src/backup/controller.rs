//! The controller of every backup resource (`EtcdBackup`, `MySQLBackup`, `RedisBackup`,
//! `MongoDBBackup`): one pass, the same for every engine, around the engine's own part.
//!
//! A pass, in order:
//! 0. **in flight**: a pass starts from the stored backup (not the watch cache, which may
//!    trail the last write). A run recorded `Running` in a Job ([`super::job`]) is followed:
//!    while the Job runs the pass looks again later (a change of the Job wakes it sooner); once
//!    it finished, its outcome is recorded as a run in the operator's process would be (6, 7),
//!    and a Job that is gone, or that reported nothing, fails the run. A run taken in the
//!    operator's process is taken within one pass, so a pass that finds one `Running` finds a
//!    run the operator stopped during (a restart, a lost lease). A partial upload is never
//!    stored; it is recorded `Failed` (`Interrupted`) and the backup goes on as after any
//!    failed run: a schedule at its next time.
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
//!    its own object, in order, stopping at the first failure: in a Job created after
//!    `Running` (with the Job's name) is recorded, whose process does this and reports
//!    ([`run_in_job`]), or in the operator's process (`--backup-runner=operator`).
//! 6. **record**: on the backup (the shared run fields, then the engine's own), on the
//!    cluster (`lastBackup`), in one event; then the next schedule time.
//! 7. **retention** (`retain`): of the objects this backup resource made (their names share
//!    its name's prefix), the newest `retain` runs are kept; an older one is deleted unless a
//!    backup's status (any backup of the kind in the namespace) or a cluster's record of its
//!    restore still points at it. What was deleted is recorded (`lastPruned`) and reported.
//!
//! A failed run is recorded as `Failed` with its reason, reported as a Warning event, and
//! returned as an error (so the error counter sees it); a schedule tries again at its next
//! time, a one-shot backup does not run again.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Debug,
    future::Future,
    time::Duration,
};

use jiff::Timestamp;
use k8s_openapi::{
    NamespaceResourceScope,
    api::{
        batch::v1::Job,
        core::v1::{PersistentVolumeClaim, Pod, ServiceAccount},
        rbac::v1::{Role, RoleBinding},
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::controller::Action,
};
use serde::{Serialize, de::DeserializeOwned};

use super::{
    BackupError, BackupSink, Retention, ScheduleError, SinkSetupError, StoredBackup, cluster_sink,
    digest::ContentFingerprint,
    drill::{DRILL_POLL, DrillStep, Scratch, drill_cluster_name, ended, next_drill_step, started},
    due_at,
    job::{
        BACKUP_LABEL, BackupRunArgs, BesideMember, JobOutcome, JobRun, JobSettings, JobState, StatusChanges,
        StoredObject, backup_job, job_account, job_identity, job_name, job_rules, job_state,
        shared_job_account,
    },
    next_due, object_name, object_prefix,
    progress::{self, PROGRESS_INTERVAL},
    until,
};
use crate::{
    ReconcileError,
    conditions::{ConditionType, ConditionUpdate, set_condition},
    crd::{
        BackupPhase, BackupRecord, BackupRunStatus, BackupSpec, DrillPhase, DrillRecord, PodOverrides,
        PruneRecord,
    },
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
/// How often a run's Job is looked at while it runs, besides when it changes (the backup
/// controller watches its Jobs).
const JOB_POLL: Duration = Duration::from_secs(15);

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
    type Status: Default + Clone + PartialEq + Serialize + DeserializeOwned + Send + Sync;

    /// A backup named `name` with `backup` as its spec.
    fn with_spec(name: &str, backup: BackupSpec) -> Self;
    fn backup_spec(&self) -> &BackupSpec;
    fn backup_status(&self) -> Option<&Self::Status>;
    fn run(status: &Self::Status) -> &BackupRunStatus;
    fn run_mut(status: &mut Self::Status) -> &mut BackupRunStatus;
}

/// Implements [`BackupResource`] for a backup kind whose spec (`$spec`) embeds [`BackupSpec`]
/// as `backup` and whose status embeds [`BackupRunStatus`] as `run`. The engine's own spec
/// fields, if any, follow with the values a cluster's scheduled backup takes.
#[macro_export]
macro_rules! backup_resource {
    ($kind:ty, $spec:ident, $status:ty $(, $field:ident: $value:expr)*) => {
        impl $crate::backup::controller::BackupResource for $kind {
            type Status = $status;

            fn with_spec(name: &str, backup: $crate::crd::BackupSpec) -> Self {
                <$kind>::new(name, $spec { backup $(, $field: $value)* })
            }

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
        + Serialize
        + Send
        + Sync
        + 'static;
    type Source: Send + Sync;
    type Info: Send + Sync;
    type Error: ReconcileError;

    /// The engine label of the backup metrics (`etcd`, `mysql`, `redis`, `mongodb`).
    const ENGINE: &'static str;
    /// The longest name the engine's clusters may have (its admission's limit): a drill's
    /// cluster is named within it.
    const MAX_CLUSTER_NAME: usize;

    /// Whether a plain-HTTP S3 endpoint is allowed (an operator setting).
    fn allow_http(&self) -> bool;

    /// The cluster's `spec.podTemplate`: a backup Job may run where its members may.
    fn pod_overrides<'c>(&self, cluster: &'c Self::Cluster) -> Option<&'c PodOverrides>;

    /// The Secrets a run reads for `cluster`: its credentials and the TLS material its clients
    /// use. A backup Job may read these and the destination's, and no other.
    fn secrets(&self, cluster: &Self::Cluster) -> Vec<String>;

    /// How runs are taken in Jobs beside the data; `None` to take them in the operator's
    /// process (an operator setting, `--backup-runner`).
    fn jobs(&self) -> Option<JobSettings> {
        None
    }

    /// For a run in a Job that must read `source`'s own files: where its Job runs
    /// ([`BesideMember`]). `None` (the default) for a run that reads the member over the
    /// network, from anywhere.
    fn beside(
        &self,
        _backup: &Self::Backup,
        _cluster: &Self::Cluster,
        _source: &Self::Source,
    ) -> impl Future<Output = Result<Option<BesideMember>, Self::Error>> + Send {
        std::future::ready(Ok(None))
    }

    /// The source whose pod is `member`, for a run placed beside it: the run reads that member
    /// rather than choosing again. `None` when `member` is no member of `cluster` (the default:
    /// no engine places runs beside members).
    fn source_named(
        &self,
        _backup: &Self::Backup,
        _cluster: &Self::Cluster,
        _member: &str,
    ) -> Option<Self::Source> {
        None
    }

    /// The members to read from, chosen on what the engine observes now.
    fn sources(
        &self,
        backup: &Self::Backup,
        cluster: &Self::Cluster,
    ) -> impl Future<Output = Result<Sources<Self::Source>, Self::Error>> + Send;

    /// Objects a run stores besides one per source (MySQL's archived binary log): retention
    /// keeps as many more per run. None by default.
    fn companion_objects(&self, _backup: &Self::Backup) -> usize {
        0
    }

    /// The pod name of a source, recorded as `member` when the run starts.
    fn member(&self, source: &Self::Source) -> String;

    /// The extension of the object a source's snapshot is stored in (`db`, `sql`, `rdb`,
    /// `shard-0.rdb`, `archive`).
    fn extension(&self, source: &Self::Source) -> String;

    /// Streams one source's snapshot into `sink` as the object `name`, for `backup` (whose
    /// `verify` says whether what a drill compares must be recorded too).
    fn produce(
        &self,
        backup: &Self::Backup,
        cluster: &Self::Cluster,
        source: &Self::Source,
        sink: &BackupSink,
        name: &str,
    ) -> impl Future<Output = Result<Snapshot<Self::Info>, Self::Error>> + Send;

    /// Records the engine's own fields of a successful run on the backup's status (written in
    /// the same patch as `lastSnapshot`, so a restore reads them together). Nothing by default.
    fn record(
        &self,
        _status: &mut <Self::Backup as BackupResource>::Status,
        _snapshots: &[(&Self::Source, Snapshot<Self::Info>)],
    ) {
    }

    /// Once every source's snapshot is stored, before the run is recorded a success: whether
    /// the snapshots, taken in turn, still make one backup of the cluster (Redis cluster mode:
    /// no slot moved between shards meanwhile). An error fails the run with its message, and
    /// the next run takes them all again. Nothing to check by default.
    fn confirm(
        &self,
        _cluster: &Self::Cluster,
        _sources: &[Self::Source],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        std::future::ready(Ok(()))
    }

    /// What one stored object holds and where it went; a run's are joined with `; ` into the
    /// Ready condition's and the event's message.
    fn describe(&self, source: &Self::Source, snapshot: &Snapshot<Self::Info>) -> String;

    /// Every location a backup's status points at, which retention never deletes: its newest
    /// snapshot by default.
    fn referenced(&self, status: &<Self::Backup as BackupResource>::Status) -> Vec<String> {
        Self::Backup::run(status)
            .last_snapshot
            .iter()
            .map(|record| record.location.clone())
            .collect()
    }

    /// The locations a cluster records it was restored from, or is restoring from, which
    /// retention never deletes.
    fn restored_from(&self, _cluster: &Self::Cluster) -> Vec<String> {
        Vec::new()
    }

    /// The oldest of the kept runs in `status` (of the backup `backup`) that `cluster` still
    /// needs, as an index: it restores from this backup to a point in time, its restore is not
    /// done, and its plan starts from that run's snapshot now or will once a later run archives
    /// past its point. Retention keeps every run from it on. None by default (a restore of the
    /// newest snapshot reads what the backup's status points at, which retention never
    /// deletes).
    fn runs_held_from(
        &self,
        _status: &<Self::Backup as BackupResource>::Status,
        _backup: &Self::Backup,
        _cluster: &Self::Cluster,
    ) -> Option<usize> {
        None
    }

    /// Why the run just recorded in `status` does not continue the archived log of the run
    /// before it, and what can no longer be restored; published as a warning. None by default.
    fn archive_break(&self, _status: &<Self::Backup as BackupResource>::Status) -> Option<String> {
        None
    }

    /// Drops the engine's own kept runs beyond `retain` from a backup's status (a
    /// point-in-time backup's snapshots with their logs), keeping every run from `held_from` on
    /// (see [`BackupEngine::runs_held_from`]); whether any was dropped. Retention then deletes their
    /// objects. Nothing by default.
    fn keep_runs(
        &self,
        _status: &mut <Self::Backup as BackupResource>::Status,
        _retain: u32,
        _held_from: Option<usize>,
    ) -> bool {
        false
    }

    /// Restore drills ([`super::drill`]): the throw-away cluster `name` that restores
    /// `backup`'s newest snapshot, one member, otherwise as `cluster` (its version, storage,
    /// pod template); `Err` saying why when `cluster`'s backups cannot be drilled.
    fn drill_cluster(
        &self,
        _backup: &Self::Backup,
        _cluster: &Self::Cluster,
        _name: &str,
    ) -> Result<Self::Cluster, String> {
        Err(format!("{} has no restore drills", Self::ENGINE))
    }

    /// Whether a drill cluster has restored its snapshot and serves.
    fn drill_ready(&self, _scratch: &Self::Cluster) -> bool {
        false
    }

    /// The volume claims of the drill cluster `name`: deleted with it, as nothing of a drill is
    /// kept (the operator keeps a deleted cluster's claims otherwise, and would refuse to start
    /// the next drill's cluster of that name on them).
    fn drill_claims(&self, _name: &str) -> Vec<String> {
        Vec::new()
    }

    /// What a ready drill cluster holds, counted and digested as the snapshot recorded in
    /// `recorded` (the backup's status) records it.
    fn drill_content(
        &self,
        _scratch: &Self::Cluster,
        _recorded: &<Self::Backup as BackupResource>::Status,
    ) -> impl Future<Output = Result<ContentFingerprint, String>> + Send {
        std::future::ready(Err("this engine has no restore drills".to_string()))
    }

    /// What the newest snapshot recorded of its content at backup time.
    fn recorded_content(
        &self,
        _status: &<Self::Backup as BackupResource>::Status,
    ) -> Option<ContentFingerprint> {
        None
    }
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

type Failure<E> = BackupControllerError<<E as BackupEngine>::Error>;

/// One pass of a backup resource's controller (see the module documentation).
///
/// # Errors
/// [`BackupControllerError`]: the Kubernetes call, schedule, destination, retention or
/// engine step that failed; a failed run is recorded on the backup before it is returned.
pub async fn reconcile<E, S>(
    engine: &E,
    backup: &E::Backup,
    context: &Context<S>,
) -> Result<Action, Failure<E>>
where
    E: BackupEngine,
{
    // The watch cache may trail this controller's own last write (a run it just recorded): a
    // pass starts from the stored object, so it never takes a finished run for an interrupted
    // one, nor writes older fields back.
    let backups: Api<E::Backup> =
        Api::namespaced(context.client.clone(), &backup.namespace().unwrap_or_default());
    let stored = backups
        .get_opt(&backup.name_any())
        .await
        .map_err(|source| BackupControllerError::Read {
            what: format!("{} {}", E::Backup::kind(&()), backup.name_any()),
            source,
        })?;
    let Some(backup) = stored else {
        return Ok(Action::await_change());
    };
    let backup = &backup;
    let mut pass = Pass::new(engine, backup, context);
    pass.remember_newest_success();
    if let Some(action) = pass.follow_job().await? {
        return Ok(action);
    }
    pass.fail_interrupted_run().await?;
    if let Some(later) = pass.drill().await? {
        return Ok(later);
    }
    if let Some(later) = pass.wait_until_due().await? {
        return Ok(later);
    }
    let Some(cluster) = pass.cluster().await? else {
        let message = format!(
            "{} {} does not exist",
            E::Cluster::kind(&()),
            pass.spec().cluster_name
        );
        return pass.wait("ClusterNotFound", message, CLUSTER_MISSING_RETRY).await;
    };
    let sources = match engine
        .sources(backup, &cluster)
        .await
        .map_err(Failure::<E>::Engine)?
    {
        Sources::From(sources) if !sources.is_empty() => sources,
        Sources::From(_) => {
            let message = "no member to read the backup from".to_string();
            return pass.wait("NoSnapshotSource", message, NO_SOURCE_RETRY).await;
        }
        Sources::Wait { reason, message } => return pass.wait(reason, message, NO_SOURCE_RETRY).await,
    };
    let sink = pass.sink().await?;
    if let Some(settings) = engine.jobs() {
        let beside = match engine.beside(backup, &cluster, &sources[0]).await {
            Ok(beside) => beside,
            Err(error) => {
                return pass
                    .wait("NoSnapshotSource", error.to_string(), NO_SOURCE_RETRY)
                    .await;
            }
        };
        return pass
            .start_job(&cluster, &sources, &settings, beside.as_ref())
            .await;
    }
    let snapshots = pass.run(&cluster, &sources, &sink).await?;
    pass.record(&snapshots).await?;
    pass.prune(&sink, snapshots.len()).await?;
    Ok(pass.next())
}

/// One run in a backup Job's process (`<operator> backup-run`, see [`super::job`]): the run
/// the operator recorded as started at `started`, from the backup and its cluster as stored
/// now. Its outcome is what the operator records; nothing here writes to the API server.
pub async fn run_in_job<E, S>(engine: &E, backup: &E::Backup, context: &Context<S>, run: JobRun) -> JobOutcome
where
    E: BackupEngine,
{
    let failed = |reason: &str, message: String| JobOutcome::Failed {
        reason: reason.to_string(),
        message,
    };
    let namespace = backup.namespace().unwrap_or_default();
    let spec = backup.backup_spec();
    let clusters: Api<E::Cluster> = Api::namespaced(context.client.clone(), &namespace);
    let cluster = match clusters.get_opt(&spec.cluster_name).await {
        Ok(Some(cluster)) => cluster,
        Ok(None) => {
            let message = format!("{} {} does not exist", E::Cluster::kind(&()), spec.cluster_name);
            return failed("ClusterNotFound", message);
        }
        Err(error) => return failed("ClusterUnreadable", error.to_string()),
    };
    let started = run.started;
    let chosen = match &run.member {
        // Placed beside this member, on its node with its volume: it is the source.
        Some(member) => match engine.source_named(backup, &cluster, member) {
            Some(source) => Ok(Sources::From(vec![source])),
            None => {
                let message = format!("{member} is no member of {}", spec.cluster_name);
                return failed("JobInvalid", message);
            }
        },
        None => engine.sources(backup, &cluster).await,
    };
    let sources = match chosen {
        Ok(Sources::From(sources)) if !sources.is_empty() => sources,
        Ok(Sources::From(_)) => {
            return failed("NoSnapshotSource", "no member to read the backup from".into());
        }
        Ok(Sources::Wait { reason, message }) => return failed(reason, message),
        Err(error) => return failed("SnapshotFailed", error.to_string()),
    };
    let sink = match cluster_sink(
        &context.client,
        &namespace,
        &spec.cluster_name,
        &spec.destination,
        engine.allow_http(),
    )
    .await
    {
        Ok(sink) => sink,
        Err(error) => {
            return failed(
                "DestinationInvalid",
                format!("the destination cannot be used: {error}"),
            );
        }
    };
    let snapshots = match take_snapshots(
        &context.client,
        engine,
        backup,
        &cluster,
        &sources,
        &sink,
        started,
    )
    .await
    {
        Ok(snapshots) => snapshots,
        Err(failure) => return failed(failure.reason, failure.message),
    };
    // From the stored status: what this run does not set (the kept runs of a run that archived no
    // log) stays as it was, as it does for a run in the operator.
    let before = engine_fields::<E>(backup.backup_status());
    let mut engine_status = before.clone();
    engine.record(&mut engine_status, &snapshots);
    let json = |status: &<E::Backup as BackupResource>::Status| {
        serde_json::to_value(status).expect("a status is JSON")
    };
    JobOutcome::Stored {
        member: engine.member(&sources[0]),
        objects: stored_objects(&snapshots),
        summary: summary(engine, &snapshots),
        engine_changes: Box::new(StatusChanges::between(&json(&before), &json(&engine_status))),
        engine_status: None,
    }
}

/// A backup's status without its run record: what a run's Job starts the engine's `record`
/// from, and what the operator makes the Job's changes to. The operator keeps its own record of
/// the run.
fn engine_fields<E: BackupEngine>(
    status: Option<&<E::Backup as BackupResource>::Status>,
) -> <E::Backup as BackupResource>::Status {
    let mut status = status.cloned().unwrap_or_default();
    *E::Backup::run_mut(&mut status) = Default::default();
    status
}

/// Why a run's snapshots were not all taken: the reason and message it is recorded with, and
/// the engine's error.
struct SnapshotsFailed<E> {
    reason: &'static str,
    message: String,
    error: E,
}

/// Stores each source's snapshot in its own object, named by the run's start `started`, in
/// order, stopping at the first failure; then asks the engine whether they make one backup.
/// Meanwhile reports how far the run has got in the backup's `status.progress`. The same in
/// the operator's process and in a backup Job's.
async fn take_snapshots<'s, E: BackupEngine>(
    client: &Client,
    engine: &E,
    backup: &E::Backup,
    cluster: &E::Cluster,
    sources: &'s [E::Source],
    sink: &BackupSink,
    started: Timestamp,
) -> Result<Vec<(&'s E::Source, Snapshot<E::Info>)>, SnapshotsFailed<E::Error>> {
    let in_turn = async {
        let mut snapshots = Vec::with_capacity(sources.len());
        for source in sources {
            let name = object_name(
                &E::Backup::kind(&()),
                &backup.name_any(),
                &backup.backup_spec().cluster_name,
                started,
                &engine.extension(source),
            );
            match engine.produce(backup, cluster, source, sink, &name).await {
                Ok(snapshot) => snapshots.push((source, snapshot)),
                Err(error) => {
                    return Err(SnapshotsFailed {
                        reason: "SnapshotFailed",
                        message: format!("the snapshot from {}: {error}", engine.member(source)),
                        error,
                    });
                }
            }
        }
        if let Err(error) = engine.confirm(cluster, sources).await {
            return Err(SnapshotsFailed {
                reason: "SnapshotsInconsistent",
                message: format!("the snapshots do not make one backup: {error}"),
                error,
            });
        }
        Ok(snapshots)
    };
    progress::reporting(client, backup, sink, PROGRESS_INTERVAL, in_turn).await
}

/// What each snapshot stored.
fn stored_objects<S, I>(snapshots: &[(&S, Snapshot<I>)]) -> Vec<StoredObject> {
    snapshots
        .iter()
        .map(|(_, snapshot)| StoredObject::from(&snapshot.stored))
        .collect()
}

/// A run's description: each stored object's, joined.
fn summary<E: BackupEngine>(engine: &E, snapshots: &[(&E::Source, Snapshot<E::Info>)]) -> String {
    snapshots
        .iter()
        .map(|(source, snapshot)| engine.describe(source, snapshot))
        .collect::<Vec<_>>()
        .join("; ")
}

/// One pass over one backup resource: what it reads, what it has written, where it reports.
struct Pass<'a, E: BackupEngine, S> {
    engine: &'a E,
    backup: &'a E::Backup,
    context: &'a Context<S>,
    namespace: String,
    now: Timestamp,
    writer: StatusWriter<'a, E::Backup, <E::Backup as BackupResource>::Status>,
    status: <E::Backup as BackupResource>::Status,
}

impl<'a, E: BackupEngine, S> Pass<'a, E, S> {
    fn new(engine: &'a E, backup: &'a E::Backup, context: &'a Context<S>) -> Self {
        Self {
            engine,
            backup,
            context,
            namespace: backup.namespace().unwrap_or_default(),
            now: Timestamp::now(),
            writer: StatusWriter::new(&context.client, backup, backup.backup_status()),
            status: backup.backup_status().cloned().unwrap_or_default(),
        }
    }

    fn spec(&self) -> &'a BackupSpec {
        self.backup.backup_spec()
    }

    fn run_status(&mut self) -> &mut BackupRunStatus {
        E::Backup::run_mut(&mut self.status)
    }

    /// After an operator restart the newest success is known only from status.
    fn remember_newest_success(&self) {
        if let Some(snapshot) = &E::Backup::run(&self.status).last_snapshot {
            self.context.metrics.observe_backup_success(
                E::ENGINE,
                &self.namespace,
                &self.spec().cluster_name,
                unix_seconds(snapshot.completed_at.0),
            );
        }
    }

    /// Records a run found `Running` at the start of a pass as interrupted (see the module
    /// documentation).
    async fn fail_interrupted_run(&mut self) -> Result<(), Failure<E>> {
        let run = E::Backup::run(&self.status);
        if run.phase != Some(BackupPhase::Running) {
            return Ok(());
        }
        let started = run
            .started_at
            .as_ref()
            .map_or_else(|| "at an unknown time".to_string(), |at| format!("at {}", at.0));
        let message = format!(
            "the run started {started} did not finish, or its result was not recorded: the operator \
             stopped during it; a partial upload is never stored, and an object it may have \
             completed is not used"
        );
        self.fail("Interrupted", message, true).await?;
        self.context
            .metrics
            .observe_backup_failure(E::ENGINE, &self.namespace, &self.spec().cluster_name);
        Ok(())
    }

    /// Follows the run's Job while the run is recorded `Running` in one: `Some` with when to
    /// look again while it runs, or once its outcome (or its disappearance) is recorded;
    /// `None` when no run is in a Job.
    async fn follow_job(&mut self) -> Result<Option<Action>, Failure<E>> {
        let run = E::Backup::run(&self.status);
        let (Some(BackupPhase::Running), Some(job)) = (run.phase, run.job.clone()) else {
            return Ok(None);
        };
        let jobs: Api<Job> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let read = |what: String| move |source| BackupControllerError::Read { what, source };
        let found = jobs.get_opt(&job).await.map_err(read(format!("Job {job}")))?;
        let pods = match &found {
            Some(_) => {
                let pods: Api<Pod> = Api::namespaced(self.context.client.clone(), &self.namespace);
                pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
                    .await
                    .map_err(read(format!("the pods of Job {job}")))?
                    .items
            }
            None => Vec::new(),
        };
        let failure = match job_state(found.as_ref(), &pods) {
            JobState::Running => return Ok(Some(Action::requeue(JOB_POLL))),
            JobState::Missing => (
                "Interrupted".to_string(),
                format!(
                    "the run's Job {job} is gone before it finished (deleted, or never created): a partial \
                     upload is never stored, and an object it may have completed is not used"
                ),
            ),
            JobState::Finished(Ok(JobOutcome::Stored {
                member,
                objects,
                summary,
                engine_changes,
                engine_status,
            })) => {
                if let Some(started) = E::Backup::run(&self.status).started_at.clone() {
                    self.now = started.0;
                }
                self.run_status().member = Some(member);
                let stored =
                    serde_json::to_value(engine_fields::<E>(Some(&self.status))).expect("a status is JSON");
                let engine_status = match engine_status {
                    Some(whole) => Ok(whole),
                    None => engine_changes.apply(&stored),
                }
                .and_then(|status| {
                    serde_json::from_value::<<E::Backup as BackupResource>::Status>(status)
                        .map_err(|error| error.to_string())
                });
                let engine_status = match engine_status {
                    Ok(status) => status,
                    Err(error) => {
                        let message = format!(
                            "the run's Job {job} reported a status this operator cannot record: {error}"
                        );
                        self.record_failed_run("JobOutcomeUnreadable", message).await?;
                        return Ok(Some(self.next()));
                    }
                };
                self.record_stored(&objects, summary, |_, status| {
                    let run = E::Backup::run(status).clone();
                    *status = engine_status;
                    *E::Backup::run_mut(status) = run;
                })
                .await?;
                let sink = self.sink().await?;
                self.prune(&sink, objects.len()).await?;
                let removed = jobs.delete(&job, &DeleteParams::background()).await;
                crate::apply::ignore_not_found(removed).map_err(read(format!("deleting Job {job}")))?;
                return Ok(Some(self.next()));
            }
            JobState::Finished(Ok(JobOutcome::Failed { reason, message })) => (reason, message),
            JobState::Finished(Err(why)) => (
                "JobFailed".to_string(),
                format!("the run's Job {job} failed: {why}; `kubectl logs job/{job}` says more"),
            ),
        };
        self.record_failed_run(&failure.0, failure.1).await?;
        Ok(Some(self.next()))
    }

    /// Starts a run in a Job: records it `Running` with the Job's name first (so a restarted
    /// operator follows the Job rather than starting another), then makes sure of the Jobs'
    /// service account in the namespace and creates the Job.
    async fn start_job(
        &mut self,
        cluster: &E::Cluster,
        sources: &[E::Source],
        settings: &JobSettings,
        beside: Option<&BesideMember>,
    ) -> Result<Action, Failure<E>> {
        let now = self.now;
        let name = job_name(
            &E::Backup::kind(&()),
            &self.backup.name_any(),
            now.as_millisecond(),
        );
        self.record_running(&sources[0], Some(name.clone())).await?;

        if let Err(error) = self.create_job(cluster, &name, now, settings, beside).await {
            let message = format!("the run's Job {name} could not be created: {error}");
            self.record_failed_run("JobNotCreated", message).await?;
            return Err(BackupControllerError::Kubernetes(error));
        }
        let message = format!("taking the backup in Job {name}");
        self.publish(Severity::Normal, "BackupStarted", message).await;
        Ok(Action::requeue(JOB_POLL))
    }

    /// Applies the backup's own service account, Role (allowing the Secrets this run reads, by
    /// name) and RoleBinding, removes the identity earlier releases shared between every
    /// backup of the namespace, and creates the Job.
    async fn create_job(
        &self,
        cluster: &E::Cluster,
        name: &str,
        started: Timestamp,
        settings: &JobSettings,
        beside: Option<&BesideMember>,
    ) -> Result<(), crate::Error> {
        let client = &self.context.client;
        let namespace = &self.namespace;
        let operator = self.context.applier.field_manager();
        let backup = self.backup.name_any();
        let mut secrets = self.engine.secrets(cluster);
        secrets.extend(
            self.spec()
                .destination
                .s3
                .as_ref()
                .map(|s3| s3.credentials_secret_name.clone()),
        );
        let account_name = job_account(operator, &backup);
        let managed = BTreeMap::from([("app.kubernetes.io/managed-by".to_string(), operator.to_string())]);
        let (account, role, binding) = job_identity(
            crate::apply::child_metadata(self.backup, &account_name, managed)?,
            job_rules(
                &E::Cluster::group(&()),
                &E::Cluster::plural(&()),
                &E::Backup::plural(&()),
                &backup,
                &secrets,
            ),
        );
        let apply = PatchParams::apply(operator).force();
        let failed = |kind: &str, object: &str| {
            let (kind, name) = (kind.to_string(), format!("{namespace}/{object}"));
            move |source| crate::Error::Apply { kind, name, source }
        };
        Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .patch(&account_name, &apply, &Patch::Apply(&account))
            .await
            .map_err(failed("ServiceAccount", &account_name))?;
        Api::<Role>::namespaced(client.clone(), namespace)
            .patch(&account_name, &apply, &Patch::Apply(&role))
            .await
            .map_err(failed("Role", &account_name))?;
        Api::<RoleBinding>::namespaced(client.clone(), namespace)
            .patch(&account_name, &apply, &Patch::Apply(&binding))
            .await
            .map_err(failed("RoleBinding", &account_name))?;
        self.remove_shared_identity().await?;

        let labels = BTreeMap::from([
            (BACKUP_LABEL.to_string(), backup.clone()),
            // What the backup controller's Job watch selects: a Job's changes wake its backup.
            ("app.kubernetes.io/managed-by".to_string(), operator.to_string()),
        ]);
        let metadata = crate::apply::child_metadata(self.backup, name, labels)?;
        let run = BackupRunArgs {
            backup: backup.clone(),
            started_at: started.to_string(),
            backup_uid: self.backup.meta().uid.clone(),
            member: beside.map(|member| member.pod.clone()),
        };
        let job = backup_job(
            metadata,
            &run,
            settings,
            &account_name,
            self.engine.pod_overrides(cluster),
            beside,
        );
        match Api::<Job>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &job)
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            result => result.map(drop).map_err(failed("Job", name)),
        }
    }

    /// Deletes the service account, Role and RoleBinding every backup Job of this operator in
    /// the namespace ran as before each backup had its own: that Role allowed every Secret.
    /// Gone already is the usual answer.
    async fn remove_shared_identity(&self) -> Result<(), crate::Error> {
        let (client, namespace) = (&self.context.client, self.namespace.as_str());
        let shared = shared_job_account(self.context.applier.field_manager());
        delete_if_present::<RoleBinding>(client, namespace, &shared).await?;
        delete_if_present::<Role>(client, namespace, &shared).await?;
        delete_if_present::<ServiceAccount>(client, namespace, &shared).await
    }

    /// `None` when the backup runs now; otherwise when to look again (never, for a finished
    /// one-shot backup), with `nextScheduledAt` written.
    async fn wait_until_due(&mut self) -> Result<Option<Action>, Failure<E>> {
        let run = E::Backup::run(&self.status);
        let due = due_at(
            self.spec().schedule.as_deref(),
            run.phase,
            run.started_at.as_ref().map(|time| time.0),
            self.backup.meta().creation_timestamp.as_ref().map(|time| time.0),
        );
        match due {
            Err(error) => {
                self.fail("InvalidSchedule", error.to_string(), false).await?;
                Err(BackupControllerError::Schedule(error))
            }
            Ok(None) => Ok(Some(Action::await_change())),
            Ok(Some(due)) if due > self.now => {
                let run = self.run_status();
                run.next_scheduled_at = Some(Time(due));
                run.phase.get_or_insert(BackupPhase::Pending);
                self.writer.write(&self.status).await?;
                Ok(Some(Action::requeue(until(self.now, due))))
            }
            Ok(Some(_)) => Ok(None),
        }
    }

    async fn cluster(&self) -> Result<Option<E::Cluster>, Failure<E>> {
        let clusters: Api<E::Cluster> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let name = &self.spec().cluster_name;
        clusters
            .get_opt(name)
            .await
            .map_err(|source| BackupControllerError::Read {
                what: format!("{} {name}", E::Cluster::kind(&())),
                source,
            })
    }

    /// The store, narrowed to the cluster; a destination that cannot be used is recorded and
    /// reported.
    async fn sink(&mut self) -> Result<BackupSink, Failure<E>> {
        let spec = self.spec();
        let sink = cluster_sink(
            &self.context.client,
            &self.namespace,
            &spec.cluster_name,
            &spec.destination,
            self.engine.allow_http(),
        )
        .await;
        match sink {
            Ok(sink) => Ok(sink),
            Err(error) => {
                let message = format!("the destination cannot be used: {error}");
                self.fail("DestinationInvalid", message, false).await?;
                Err(BackupControllerError::Destination(error))
            }
        }
    }

    /// Records `Running`, then stores each source's snapshot in its own object, in order,
    /// stopping at the first failure (recorded as `Failed`).
    async fn run<'s>(
        &mut self,
        cluster: &E::Cluster,
        sources: &'s [E::Source],
        sink: &BackupSink,
    ) -> Result<Vec<(&'s E::Source, Snapshot<E::Info>)>, Failure<E>> {
        self.record_running(&sources[0], None).await?;
        let taken = take_snapshots(
            &self.context.client,
            self.engine,
            self.backup,
            cluster,
            sources,
            sink,
            self.now,
        )
        .await;
        match taken {
            Ok(snapshots) => Ok(snapshots),
            Err(failed) => Err(
                match self.record_failed_run(failed.reason, failed.message).await {
                    Ok(()) => BackupControllerError::Engine(failed.error),
                    Err(failure) => failure,
                },
            ),
        }
    }

    /// Records a run started now, from `source`'s member, in Job `job` if it runs in one.
    async fn record_running(&mut self, source: &E::Source, job: Option<String>) -> Result<(), Failure<E>> {
        let (now, member) = (self.now, self.engine.member(source));
        let run = self.run_status();
        run.phase = Some(BackupPhase::Running);
        run.started_at = Some(Time(now));
        run.member = Some(member);
        run.message = None;
        run.job = job;
        run.progress = None;
        self.writer.write(&self.status).await?;
        Ok(())
    }

    /// Records a run that failed (`reason`, `message`) with its duration since it started, and
    /// counts it.
    async fn record_failed_run(&mut self, reason: &str, message: String) -> Result<(), Failure<E>> {
        let now = Timestamp::now();
        let run = self.run_status();
        let started = run.started_at.as_ref().map(|time| time.0);
        run.duration_seconds = started.map(|started| whole_seconds(started, now));
        self.fail(reason, message, true).await?;
        self.context
            .metrics
            .observe_backup_failure(E::ENGINE, &self.namespace, &self.spec().cluster_name);
        Ok(())
    }

    /// Records a successful run: first on the cluster (`lastBackup`), then on the backup (the
    /// shared fields, then the engine's, in one write), and reports it. The cluster goes first
    /// so that a backup seen `Succeeded` is already the cluster's newest; a cluster write that
    /// fails leaves the run `Running`, which the next pass reports as interrupted rather than as
    /// a success the cluster never learned of.
    async fn record(&mut self, snapshots: &[(&E::Source, Snapshot<E::Info>)]) -> Result<(), Failure<E>> {
        let objects = stored_objects(snapshots);
        let summary = summary(self.engine, snapshots);
        self.record_stored(&objects, summary, |engine, status| {
            engine.record(status, snapshots)
        })
        .await
    }

    /// [`Pass::record`] of a run's stored `objects`, its `summary`, and the engine's own status
    /// fields as `engine_fields` sets them.
    async fn record_stored(
        &mut self,
        objects: &[StoredObject],
        summary: String,
        engine_fields: impl FnOnce(&E, &mut <E::Backup as BackupResource>::Status),
    ) -> Result<(), Failure<E>> {
        let completed_at = Time(Timestamp::now());
        let records: Vec<BackupRecord> = objects
            .iter()
            .map(|object| BackupRecord {
                name: self.backup.name_any(),
                location: object.location.clone(),
                completed_at: completed_at.clone(),
                size_bytes: object.size as i64,
                sha256: object.sha256.clone(),
            })
            .collect();
        let now = self.now;
        let run_started = self.run_status().started_at.as_ref().map_or(now, |time| time.0);
        self.record_on_cluster(
            records
                .first()
                .cloned()
                .expect("a run stores at least one object"),
            run_started,
        )
        .await?;
        let (spec, now, generation) = (self.spec(), self.now, self.backup.meta().generation);
        let run = self.run_status();
        run.phase = Some(match spec.schedule {
            Some(_) => BackupPhase::Pending,
            None => BackupPhase::Succeeded,
        });
        // From when the run started: a run in a Job is recorded by a later pass.
        let started = run.started_at.as_ref().map_or(now, |time| time.0);
        run.completed_at = Some(completed_at.clone());
        run.duration_seconds = Some(whole_seconds(started, completed_at.0));
        let sent = objects.iter().map(|object| object.size).sum();
        let took = completed_at.0.duration_since(started).unsigned_abs();
        run.progress = Some(progress::progress(sent, took, completed_at.0));
        run.last_snapshot = records.first().cloned();
        run.next_scheduled_at = next_run(spec, now);
        set_condition(
            &mut run.conditions,
            ConditionUpdate::new(ConditionType::Ready, true, "SnapshotStored", summary.clone()),
            generation,
            completed_at.0,
        );
        let engine = self.engine;
        engine_fields(engine, &mut self.status);
        self.writer.write(&self.status).await?;
        self.publish(Severity::Normal, "SnapshotStored", summary).await;
        if let Some(message) = engine.archive_break(&self.status) {
            self.publish(Severity::Warning, "ArchiveBroken", message).await;
        }
        self.context.metrics.observe_backup_success(
            E::ENGINE,
            &self.namespace,
            &spec.cluster_name,
            unix_seconds(completed_at.0),
        );
        Ok(())
    }

    /// `lastBackup` on the cluster; its own reconciler writes only the status fields it changed.
    async fn record_on_cluster(
        &self,
        record: BackupRecord,
        run_started: Timestamp,
    ) -> Result<(), Failure<E>> {
        if let Some(why) = self
            .record_on_cluster_status("lastBackup", &record, run_started)
            .await?
        {
            let message = format!(
                "{why}: the run's snapshot is kept under this backup and not recorded as the cluster's lastBackup"
            );
            self.publish(Severity::Warning, "ClusterReplaced", message).await;
        }
        Ok(())
    }

    /// Writes `field` of the cluster's status, only on the cluster a run or drill that started
    /// at `started` was for: a cluster created under its name after that is another, and a
    /// snapshot of the deleted one recorded as its newest backup is what it would recover from
    /// once it lost every member. Says why nothing was written, if it was not.
    async fn record_on_cluster_status(
        &self,
        field: &str,
        value: &impl Serialize,
        started: Timestamp,
    ) -> Result<Option<String>, Failure<E>> {
        let clusters: Api<E::Cluster> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let name = &self.spec().cluster_name;
        let kind = E::Cluster::kind(&());
        let cluster = clusters
            .get_opt(name)
            .await
            .map_err(BackupControllerError::RecordOnCluster)?;
        let Some(cluster) = cluster else {
            return Ok(Some(format!("{kind} {name} is gone")));
        };
        if !backed_up(cluster.meta().creation_timestamp.as_ref(), started) {
            return Ok(Some(format!("{kind} {name} was created again after this began")));
        }
        let patch = serde_json::json!({ "status": { field: value } });
        let written = crate::status::merge_status_of(&clusters, &cluster, cluster.resource_version(), &patch)
            .await
            .map_err(BackupControllerError::RecordOnCluster)?;
        Ok(written
            .is_none()
            .then(|| format!("{kind} {name} was deleted or created again meanwhile")))
    }

    /// Keeps the newest `retain` runs of this backup's own objects (a run stores one object per
    /// source) and every object something points at; records and reports what it deleted.
    async fn prune(&mut self, sink: &BackupSink, objects_per_run: usize) -> Result<(), Failure<E>> {
        let Some(keep) = self.spec().retain else {
            return Ok(());
        };
        let clusters = self.clusters().await?;
        let restoring = self.restores_holding_runs(&clusters);
        let held_from = restoring.iter().map(|(_, from)| *from).min();
        if !restoring.is_empty() {
            let clusters: Vec<&str> = restoring.iter().map(|(name, _)| name.as_str()).collect();
            let message = format!(
                "retention keeps every run {} may restore from until its restore is done",
                clusters.join(", ")
            );
            self.publish(Severity::Normal, "RetentionDeferred", message).await;
        }
        if self.engine.keep_runs(&mut self.status, keep, held_from) {
            self.writer.write(&self.status).await?;
        }
        let retention = Retention {
            prefix: Some(object_prefix(&E::Backup::kind(&()), &self.backup.name_any())),
            keep: keep as usize,
            run_objects: objects_per_run + self.engine.companion_objects(self.backup),
            protected: self.referenced(&clusters).await?,
            made_since: self
                .backup
                .meta()
                .creation_timestamp
                .as_ref()
                .map(|created| created.0),
        };
        let deleted = sink
            .apply_retention(&retention)
            .await
            .map_err(BackupControllerError::Retention)?;
        if deleted.is_empty() {
            return Ok(());
        }
        let locations: Vec<String> = deleted.iter().map(|key| sink.location(key)).collect();
        let message = format!(
            "retention keeps the newest {keep} runs: deleted {}",
            locations.join(", ")
        );
        self.run_status().last_pruned = Some(PruneRecord {
            at: Time(Timestamp::now()),
            locations,
        });
        self.writer.write(&self.status).await?;
        self.publish(Severity::Normal, "BackupsPruned", message).await;
        Ok(())
    }

    /// The clusters of the namespace: retention reads what their restores need.
    async fn clusters(&self) -> Result<Vec<E::Cluster>, Failure<E>> {
        let clusters: Api<E::Cluster> = Api::namespaced(self.context.client.clone(), &self.namespace);
        Ok(clusters
            .list(&ListParams::default())
            .await
            .map_err(|source| BackupControllerError::Read {
                what: format!("{} list", E::Cluster::kind(&())),
                source,
            })?
            .items)
    }

    /// The `clusters` whose restore still needs some of this backup's kept runs, each with the
    /// oldest run it needs (see [`BackupEngine::runs_held_from`]).
    fn restores_holding_runs(&self, clusters: &[E::Cluster]) -> Vec<(String, usize)> {
        clusters
            .iter()
            .filter_map(|cluster| {
                let from = self.engine.runs_held_from(&self.status, self.backup, cluster)?;
                Some((cluster.name_any(), from))
            })
            .collect()
    }

    /// Every location a backup of this kind in the namespace, or a restore of one of
    /// `clusters`, points at.
    async fn referenced(&self, clusters: &[E::Cluster]) -> Result<BTreeSet<String>, Failure<E>> {
        let backups: Api<E::Backup> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let mut referenced = BTreeSet::new();
        for backup in
            backups
                .list(&ListParams::default())
                .await
                .map_err(|source| BackupControllerError::Read {
                    what: format!("{} list", E::Backup::kind(&())),
                    source,
                })?
        {
            if let Some(status) = backup.backup_status() {
                referenced.extend(self.engine.referenced(status));
            }
        }
        referenced.extend(
            clusters
                .iter()
                .flat_map(|cluster| self.engine.restored_from(cluster)),
        );
        Ok(referenced)
    }

    /// When to look again: soon while the newest snapshot's drill is still to be taken, else
    /// at the next schedule time, or on a change for a one-shot backup.
    fn next(&self) -> Action {
        let run = E::Backup::run(&self.status);
        let drill_to_come = self.spec().verify
            && run.last_snapshot.as_ref().is_some_and(|newest| {
                run.drill.as_ref().is_none_or(|drill| {
                    drill.location != newest.location || drill.phase == DrillPhase::Restoring
                })
            });
        if drill_to_come {
            return Action::requeue(DRILL_POLL);
        }
        match &run.next_scheduled_at {
            Some(next) => Action::requeue(until(Timestamp::now(), next.0)),
            None => Action::await_change(),
        }
    }

    /// Records that the backup waits (`Pending` with `message`), reports it, and looks again
    /// after `retry`.
    async fn wait(&mut self, reason: &str, message: String, retry: Duration) -> Result<Action, Failure<E>> {
        let run = self.run_status();
        run.phase = Some(BackupPhase::Pending);
        run.message = Some(message.clone());
        self.writer.write(&self.status).await?;
        self.publish(Severity::Warning, reason, message).await;
        Ok(Action::requeue(retry))
    }

    /// Records a pass (or a run, `run_started`) that could not complete and reports it:
    /// `Failed` with its reason for a run, its message, `Ready` false, and when a schedule
    /// runs next.
    async fn fail(&mut self, reason: &str, message: String, run_started: bool) -> Result<(), Failure<E>> {
        let (spec, generation, now) = (self.spec(), self.backup.meta().generation, Timestamp::now());
        let run = self.run_status();
        if run_started {
            run.phase = Some(BackupPhase::Failed);
            run.completed_at = Some(Time(now));
            run.next_scheduled_at = run
                .started_at
                .as_ref()
                .and_then(|started| next_run(spec, started.0));
        }
        run.message = Some(message.clone());
        set_condition(
            &mut run.conditions,
            ConditionUpdate::new(ConditionType::Ready, false, reason, message.clone()),
            generation,
            now,
        );
        self.writer.write(&self.status).await?;
        self.publish(Severity::Warning, reason, message).await;
        Ok(())
    }

    /// Takes the next step of the backup's restore drills ([`super::drill`]): `Some` with when
    /// to look again while one is under way, `None` when the pass goes on.
    async fn drill(&mut self) -> Result<Option<Action>, Failure<E>> {
        let name = drill_cluster_name(&self.backup.name_any(), E::MAX_CLUSTER_NAME);
        let clusters: Api<E::Cluster> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let run = E::Backup::run(&self.status);
        let newest = run
            .last_snapshot
            .as_ref()
            .map(|snapshot| snapshot.location.clone());
        let recorded = run.drill.clone();
        let read = |source| BackupControllerError::Read {
            what: format!("{} {name}", E::Cluster::kind(&())),
            source,
        };
        // Read only while a drill restores: the comparison uses the object read here.
        let observed = match recorded
            .as_ref()
            .filter(|drill| drill.phase == DrillPhase::Restoring)
        {
            Some(_) => clusters.get_opt(&name).await.map_err(read)?,
            None => None,
        };
        let scratch = match &observed {
            None => Scratch::Absent,
            Some(cluster) if self.engine.drill_ready(cluster) => Scratch::Ready,
            Some(_) => Scratch::Restoring,
        };
        let step = next_drill_step(
            self.spec().verify,
            newest.as_deref(),
            recorded.as_ref(),
            scratch,
            self.now,
        );
        match step {
            DrillStep::Nothing => Ok(None),
            DrillStep::Wait => Ok(Some(Action::requeue(DRILL_POLL))),
            DrillStep::Start => {
                let newest = newest.expect("a drill starts only from a snapshot");
                self.start_drill(&clusters, &name, &newest).await
            }
            DrillStep::Compare => {
                let recorded = recorded.expect("a drill is compared only once started");
                let scratch = observed.expect("a drill is compared only once its cluster is ready");
                let mismatch = match (
                    self.engine.recorded_content(&self.status),
                    self.engine.drill_content(&scratch, &self.status).await,
                ) {
                    (None, _) => Some(
                        "the snapshot recorded no content to compare with (it was taken by an operator without \
                         restore drills, or its content could not be read: the backup's log says why)"
                            .to_string(),
                    ),
                    (Some(expected), Ok(found)) => expected.mismatch(&found),
                    (Some(_), Err(error)) => {
                        // Unreadable now is not wrong: asked again until the drill's time is up.
                        let waited = self.now.duration_since(recorded.started_at.0).unsigned_abs();
                        if waited < super::drill::DRILL_TIMEOUT {
                            self.publish(
                                Severity::Warning,
                                "DrillUnreadable",
                                format!("reading what {name} holds: {error}; trying again"),
                            )
                            .await;
                            return Ok(Some(Action::requeue(DRILL_POLL)));
                        }
                        Some(format!("what {name} holds could not be read: {error}"))
                    }
                };
                self.end_drill(&recorded, mismatch).await
            }
            DrillStep::GiveUp(why) => {
                let recorded = recorded.expect("a drill gives up only once started");
                self.end_drill(&recorded, Some(why)).await
            }
        }
    }

    /// Creates the drill cluster `name` from the newest snapshot at `location` (once an earlier
    /// drill's is gone) and records the drill.
    async fn start_drill(
        &mut self,
        clusters: &Api<E::Cluster>,
        name: &str,
        location: &str,
    ) -> Result<Option<Action>, Failure<E>> {
        let read = |what: String| move |source| BackupControllerError::Read { what, source };
        // An earlier drill's cluster, and its claims, go before this drill's is created; a
        // cluster of that name the backup does not control is someone's own, never deleted.
        let existing = clusters
            .get_opt(name)
            .await
            .map_err(read(format!("{} {name}", E::Cluster::kind(&()))))?;
        if let Some(why) = existing.as_ref().and_then(|found| {
            super::drill::not_a_drill(found.meta(), self.backup.meta().uid.as_deref(), name)
        }) {
            let refused = super::drill::ended(
                &started(&self.backup.name_any(), location, name, self.now),
                Some(why),
                self.now,
            );
            self.run_status().drill = Some(refused);
            self.writer.write(&self.status).await?;
            return Ok(None);
        }
        let earlier = existing.is_some();
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.context.client.clone(), &self.namespace);
        let mut claims_left = false;
        for claim in self.engine.drill_claims(name) {
            let listed = claims
                .list(&ListParams::default().fields(&format!("metadata.name={claim}")))
                .await
                .map_err(read(format!("PersistentVolumeClaim {claim}")))?;
            claims_left |= !listed.items.is_empty();
        }
        if earlier || claims_left {
            self.delete_drill_cluster(name).await?;
            return Ok(Some(Action::requeue(DRILL_POLL)));
        }
        let Some(cluster) = self.cluster().await? else {
            return Ok(None);
        };
        let backup = self.backup.name_any();
        let mut scratch = match self.engine.drill_cluster(self.backup, &cluster, name) {
            Ok(scratch) => scratch,
            Err(why) => {
                let refused =
                    super::drill::ended(&started(&backup, location, name, self.now), Some(why), self.now);
                self.run_status().drill = Some(refused);
                self.writer.write(&self.status).await?;
                return Ok(None);
            }
        };
        scratch.meta_mut().owner_references = self.backup.controller_owner_ref(&()).map(|owner| vec![owner]);
        clusters
            .create(&PostParams::default(), &scratch)
            .await
            .map_err(|source| crate::Error::Apply {
                kind: E::Cluster::kind(&()).to_string(),
                name: format!("{}/{name}", self.namespace),
                source,
            })?;
        let drill = started(&backup, location, name, self.now);
        let message = drill.message.clone();
        self.run_status().drill = Some(drill);
        self.writer.write(&self.status).await?;
        self.publish(Severity::Normal, "DrillStarted", message).await;
        Ok(Some(Action::requeue(DRILL_POLL)))
    }

    /// Records how `drill` ended (on the backup, and on the cluster as `lastDrill`), reports
    /// it, and deletes its cluster.
    async fn end_drill(
        &mut self,
        drill: &DrillRecord,
        mismatch: Option<String>,
    ) -> Result<Option<Action>, Failure<E>> {
        let drill = ended(drill, mismatch, Timestamp::now());
        if let Some(why) = self
            .record_on_cluster_status("lastDrill", &drill, drill.started_at.0)
            .await?
        {
            tracing::info!(backup = %self.backup.name_any(), namespace = %self.namespace, %why, "drill not recorded on the cluster");
        }
        let (severity, reason) = match drill.phase {
            DrillPhase::Verified => (Severity::Normal, "DrillVerified"),
            DrillPhase::Failed | DrillPhase::Restoring => (Severity::Warning, "DrillFailed"),
        };
        let message = drill.message.clone();
        let scratch = drill.cluster.clone();
        self.run_status().drill = Some(drill);
        self.writer.write(&self.status).await?;
        self.publish(severity, reason, message).await;
        self.delete_drill_cluster(&scratch).await?;
        Ok(None)
    }

    /// Deletes the drill cluster `name` and its volume claims; a cluster under that name the
    /// backup does not control (a user's own, made since the drill began) and its claims are
    /// left as they are.
    async fn delete_drill_cluster(&self, name: &str) -> Result<(), Failure<E>> {
        let clusters: Api<E::Cluster> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let existing = clusters
            .get_opt(name)
            .await
            .map_err(|source| BackupControllerError::Read {
                what: format!("{} {name}", E::Cluster::kind(&())),
                source,
            })?;
        if let Some(existing) = existing {
            if super::drill::not_a_drill(existing.meta(), self.backup.meta().uid.as_deref(), name).is_some() {
                return Ok(());
            }
            let only_this_one = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: existing.meta().uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            let deleted = clusters.delete(name, &only_this_one).await.map(drop);
            crate::apply::ignore_not_found(deleted).map_err(|source| crate::Error::Apply {
                kind: format!("deleting {}", E::Cluster::kind(&())),
                name: format!("{}/{name}", self.namespace),
                source,
            })?;
        }
        for claim in self.engine.drill_claims(name) {
            delete_if_present::<PersistentVolumeClaim>(&self.context.client, &self.namespace, &claim).await?;
        }
        Ok(())
    }

    async fn publish(&self, severity: Severity, reason: &str, message: String) {
        self.context
            .events
            .publish(self.backup, severity, reason, ACTION, message)
            .await;
    }
}

/// Whether a run that started at `run_started` backed up the cluster created at `created`:
/// one created after the run started (deleted and created again under its name) is another.
/// Creation times have whole seconds, so a cluster created in the run's second counts as
/// backed up.
fn backed_up(created: Option<&Time>, run_started: Timestamp) -> bool {
    created.is_none_or(|created| created.0 <= run_started)
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

/// The backup that carries out `cluster`'s backup `policy`, named `name` and labelled `labels`,
/// owned by the cluster, with the engine's own fields of the policy set by `engine_fields`;
/// `None` without a policy.
///
/// # Errors
/// As [`crate::apply::child_metadata`].
pub fn scheduled_backup<B, C>(
    cluster: &C,
    policy: Option<&crate::crd::BackupPolicy>,
    name: &str,
    labels: std::collections::BTreeMap<String, String>,
    engine_fields: impl FnOnce(&mut B),
) -> Result<Option<B>, crate::Error>
where
    B: BackupResource,
    C: Resource<DynamicType = ()>,
{
    let Some(policy) = policy else {
        return Ok(None);
    };
    let mut backup = B::with_spec(name, BackupSpec::scheduled(&cluster.name_any(), policy));
    *backup.meta_mut() = crate::apply::child_metadata(cluster, name, labels)?;
    engine_fields(&mut backup);
    Ok(Some(backup))
}

/// A cluster's backup policy is carried out by a backup it owns, `<cluster>-scheduled`;
/// removing the policy removes it.
///
/// # Errors
/// As [`scheduled_backup`] and [`crate::apply::Applier::apply_or_remove`].
pub async fn ensure_scheduled_backup<B, C, S>(
    context: &Context<S>,
    cluster: &C,
    policy: Option<&crate::crd::BackupPolicy>,
    labels: std::collections::BTreeMap<String, String>,
    engine_fields: impl FnOnce(&mut B),
) -> Result<(), crate::Error>
where
    B: BackupResource + crate::cache::Cacheable,
    C: Resource<DynamicType = ()>,
{
    let name = crate::naming::child_name(&cluster.name_any(), "scheduled");
    let backup = scheduled_backup::<B, C>(cluster, policy, &name, labels, engine_fields)?;
    context.applier.apply_or_remove(cluster, &name, backup).await
}

/// Deletes `namespace/name` of kind `K` when it exists.
async fn delete_if_present<K>(client: &kube::Client, namespace: &str, name: &str) -> Result<(), crate::Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Debug + DeserializeOwned,
{
    let deleted = Api::<K>::namespaced(client.clone(), namespace)
        .delete(name, &DeleteParams::background())
        .await;
    crate::apply::ignore_not_found(deleted).map_err(|source| crate::Error::Apply {
        kind: format!("deleting {}", K::kind(&())),
        name: format!("{namespace}/{name}"),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::{CredentialsError, DestinationError};

    #[test]
    fn a_run_is_recorded_only_on_the_cluster_it_backed_up() {
        let at = |second: i64| Timestamp::from_second(second).unwrap();
        // (cluster created, run started, recorded on it)
        let rows = [
            (Some(100), 200, true),
            (Some(200), 200, true),
            // Deleted and created again under its name while the run went on.
            (Some(201), 200, false),
            (None, 200, true),
        ];
        for (created, started, expected) in rows {
            let created = created.map(|second| Time(at(second)));
            assert_eq!(
                backed_up(created.as_ref(), at(started)),
                expected,
                "{created:?} {started}"
            );
        }
    }

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
