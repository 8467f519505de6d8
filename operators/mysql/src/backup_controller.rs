//! Reconciling a `MySQLBackup`: core's backup controller
//! ([`quorum_core::backup::controller`]) around MySQL's part, one consistent logical snapshot
//! from a caught-up member.
//!
//! The snapshot is one transaction (`START TRANSACTION WITH CONSISTENT SNAPSHOT`) with the
//! GTID position it corresponds to, read from a caught-up replica when there is one so the
//! primary is spared, and stored only when complete: the pipe fails the upload when the
//! server stops sending, and a stream without its trailer is refused on restore.

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, ResourceExt, runtime::controller::Action};
use quorum_core::{
    ReconcileError,
    availability::{health::Health, retry::Idempotency},
    backup::{
        BackupError, BackupSink, PipeError,
        controller::{self, BackupControllerError, BackupEngine, Snapshot, Sources},
        digest::ContentFingerprint,
        job::{BESIDE_SCRATCH_DIR, BesideMember, JobOutcome, JobSettings},
        pipe, producer,
        recovery::{self, StoredPiece},
    },
    runner::{Context, object_key},
};

use crate::{
    admin::{
        MySqlAdmin,
        binlog::{ArchivedBinlog, BinlogError, archive_binlog},
        gtid::GtidPosition,
        physical::{PhysicalBackupInfo, PhysicalError, PhysicalSource, backup_out},
        snapshot::{SnapshotError, SnapshotInfo, snapshot_out},
    },
    crd::{BackupMethod, Flavor, MySQLBackup, MySQLBackupSpec, MySQLBackupStatus, MySQLCluster, RecoveryRun},
    decide::MemberFact,
    reconcile::State,
    resources::{DATA_DIR, REPLICATION_USER, beside_member, member_name, ordinal_of},
    status::CAUGHT_UP_LAG_SECONDS,
};

/// How long the server may send nothing while the store waits for data.
pub const SNAPSHOT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

quorum_core::backup_resource!(
    MySQLBackup,
    MySQLBackupSpec,
    MySQLBackupStatus,
    archive_binlogs: false,
    method: crate::crd::BackupMethod::Logical
);

/// Why MySQL's part of a backup failed: the member could not be reached, the snapshot or its
/// upload failed, or what was stored is not what the server sent.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SnapshotFailed(String);

impl ReconcileError for SnapshotFailed {
    fn metric_label(&self) -> &'static str {
        "snapshot"
    }
}

/// What one run of a MySQL backup produced.
pub struct RunInfo {
    copy: Copy,
    /// With `archiveBinlogs`: the binary log archived in this run, and the kept runs with it.
    archive: Option<(ArchivedBinlog, Vec<RecoveryRun>)>,
}

/// The run's copy of the member, as its method made it.
enum Copy {
    Logical(SnapshotInfo),
    Physical(PhysicalBackupInfo),
}

impl Copy {
    fn position(&self) -> &GtidPosition {
        match self {
            Copy::Logical(info) => &info.position,
            Copy::Physical(info) => &info.position,
        }
    }
}

/// MySQL's part of a backup: one caught-up member, its consistent snapshot.
struct MySqlSnapshots<'a> {
    context: &'a Context<State>,
}

/// The member a snapshot is read from, and how.
struct Member {
    cluster: String,
    ordinal: usize,
    method: BackupMethod,
}

/// Why a backup of `method` cannot be taken of `cluster` by this operator (`in_jobs`: its runs
/// are taken in Jobs), naming the field.
fn method_refused(method: BackupMethod, cluster: &MySQLCluster, in_jobs: bool) -> Option<String> {
    match method {
        BackupMethod::Logical => None,
        BackupMethod::Physical if cluster.spec.flavor != Flavor::MariaDB => Some(format!(
            "spec.method: Physical copies the files with MariaDB's mariadb-backup, and {} runs {:?}: use Logical",
            cluster.name_any(),
            cluster.spec.flavor
        )),
        BackupMethod::Physical if !in_jobs => Some(
            "spec.method: Physical reads the member's files from a Job on its node, and this operator takes backups \
             in its own process (--backup-runner=operator): use Logical, or run backups in Jobs"
                .to_string(),
        ),
        BackupMethod::Physical => None,
    }
}

impl BackupEngine for MySqlSnapshots<'_> {
    type Backup = MySQLBackup;
    type Cluster = MySQLCluster;
    type Source = Member;
    type Info = RunInfo;
    type Error = SnapshotFailed;

    const ENGINE: &'static str = crate::observe::ENGINE;
    const MAX_CLUSTER_NAME: usize = crate::crd::MAX_NAME;

    fn allow_http(&self) -> bool {
        self.context.state.settings.members.allow_http_backups
    }

    fn pod_overrides<'c>(&self, cluster: &'c MySQLCluster) -> Option<&'c quorum_core::crd::PodOverrides> {
        cluster.spec.pod_template.as_ref()
    }

    /// What [`crate::reconcile::hand_admin_credentials`] reads: the root password and the
    /// servers' CA.
    fn secrets(&self, cluster: &MySQLCluster) -> Vec<String> {
        std::iter::once(crate::resources::root_secret_name(cluster))
            .chain(cluster.spec.tls.iter().map(|tls| tls.secret_name.clone()))
            .collect()
    }

    fn jobs(&self) -> Option<JobSettings> {
        let settings = &self.context.state.settings;
        JobSettings::when_configured(&settings.members, &settings.operator_image)
    }

    async fn sources(
        &self,
        backup: &MySQLBackup,
        cluster: &MySQLCluster,
    ) -> Result<Sources<Member>, SnapshotFailed> {
        let method = backup.spec.method;
        if let Some(message) = method_refused(method, cluster, self.jobs().is_some()) {
            return Ok(Sources::Wait {
                reason: "MethodUnsupported",
                message,
            });
        }
        crate::reconcile::hand_admin_credentials(self.context, cluster)
            .await
            .map_err(|error| SnapshotFailed(format!("the admin credentials: {error}")))?;
        let cluster_name = cluster.name_any();
        let addresses = self.context.state.addresses(cluster);
        let members = cluster.status.as_ref().map_or(0, |s| s.members.len());
        let view = self
            .context
            .state
            .clients
            .observe(&object_key(cluster), &addresses, members)
            .await;
        let primary = cluster
            .status
            .as_ref()
            .and_then(|s| s.primary.as_deref())
            .and_then(|p| ordinal_of(&cluster_name, p));
        Ok(match choose_snapshot_member(&view.members, primary) {
            Some(ordinal) => Sources::From(vec![Member {
                cluster: cluster_name,
                ordinal,
                method,
            }]),
            None => Sources::Wait {
                reason: "NoHealthyMember",
                message: "no healthy, caught-up member to take a snapshot from; waiting".to_string(),
            },
        })
    }

    fn member(&self, source: &Member) -> String {
        member_name(&source.cluster, source.ordinal)
    }

    fn extension(&self, source: &Member) -> String {
        match source.method {
            BackupMethod::Logical => "sql",
            BackupMethod::Physical => "xbstream",
        }
        .to_string()
    }

    async fn beside(
        &self,
        _: &MySQLBackup,
        cluster: &MySQLCluster,
        source: &Member,
    ) -> Result<Option<BesideMember>, SnapshotFailed> {
        if source.method.is_logical() {
            return Ok(None);
        }
        let name = member_name(&source.cluster, source.ordinal);
        let pods: Api<Pod> = Api::namespaced(
            self.context.client.clone(),
            &cluster.namespace().unwrap_or_default(),
        );
        let pod = pods
            .get_opt(&name)
            .await
            .map_err(|error| SnapshotFailed(format!("reading pod {name}: {error}")))?
            .ok_or_else(|| SnapshotFailed(format!("pod {name} does not exist")))?;
        beside_member(&pod).map(Some).map_err(SnapshotFailed)
    }

    fn source_named(&self, backup: &MySQLBackup, cluster: &MySQLCluster, member: &str) -> Option<Member> {
        let cluster = cluster.name_any();
        let ordinal = ordinal_of(&cluster, member)?;
        Some(Member {
            cluster,
            ordinal,
            method: backup.spec.method,
        })
    }

    fn companion_objects(&self, backup: &MySQLBackup) -> usize {
        usize::from(backup.spec.archive_binlogs)
    }

    async fn produce(
        &self,
        backup: &Self::Backup,
        cluster: &MySQLCluster,
        source: &Member,
        sink: &BackupSink,
        name: &str,
    ) -> Result<Snapshot<RunInfo>, SnapshotFailed> {
        let addresses = self.context.state.addresses(cluster);
        if source.method == BackupMethod::Physical {
            return self.copy_files(cluster, source, sink, name).await;
        }
        let admin = self
            .context
            .state
            .clients
            .call(
                &object_key(cluster),
                &addresses,
                source.ordinal,
                "connect",
                Idempotency::Read,
                |admin| async move { Ok(admin) },
            )
            .await
            .map_err(|error| SnapshotFailed(format!("unreachable: {error}")))?;
        let snapshot_admin = admin.clone();
        let produce = producer(move |writer| {
            Box::pin(async move { snapshot_out(&snapshot_admin, &["root", REPLICATION_USER], writer).await })
        });
        let upload = |reader| async move { sink.upload(name, reader).await };
        let (stored, info) = pipe(produce, upload, SNAPSHOT_STALL_TIMEOUT)
            .await
            .map_err(|error: PipeError<SnapshotError, BackupError>| SnapshotFailed(error.to_string()))?;
        stored
            .verify("the server", info.bytes, &info.sha256)
            .map_err(SnapshotFailed)?;
        let archive = match backup.spec.archive_binlogs {
            true => Some(archive_run(backup, &admin, sink, name, &stored, &info).await?),
            false => None,
        };
        Ok(Snapshot {
            stored,
            info: RunInfo {
                copy: Copy::Logical(info),
                archive,
            },
        })
    }

    fn record(&self, status: &mut MySQLBackupStatus, snapshots: &[(&Member, Snapshot<RunInfo>)]) {
        if let Some((_, snapshot)) = snapshots.first() {
            status.gtid_position = Some(snapshot.info.copy.position().to_string());
            (status.method, status.content) = match &snapshot.info.copy {
                Copy::Logical(info) => (None, Some(info.content.clone())),
                Copy::Physical(_) => (Some(BackupMethod::Physical), None),
            };
            if let Some((_, runs)) = &snapshot.info.archive {
                status.recovery_runs = runs.clone();
                (status.recoverable_from, status.recoverable_until) = recovery::window_in_status(runs);
            }
        }
    }

    fn describe(&self, member: &Member, snapshot: &Snapshot<RunInfo>) -> String {
        let copy = &snapshot.info.copy;
        let archived = snapshot
            .info
            .archive
            .as_ref()
            .map_or(String::new(), |(archived, _)| {
                format!(
                    ", and the binary log after {} to {} ({} transactions, {} bytes)",
                    archived.after, archived.through, archived.transactions, archived.bytes
                )
            });
        let what = match copy {
            Copy::Logical(info) => format!("{} rows", info.content.records),
            Copy::Physical(_) => "a copy of the files".to_string(),
        };
        format!(
            "{} bytes ({what}) from {} at GTID position {} to {} (sha256 {}){archived}",
            snapshot.stored.size,
            self.member(member),
            copy.position(),
            snapshot.stored.location,
            snapshot.stored.sha256
        )
    }

    /// The newest snapshot, and every kept run's snapshot and binary log: a point-in-time
    /// restore may read any of them.
    fn referenced(&self, status: &MySQLBackupStatus) -> Vec<String> {
        status
            .run
            .last_snapshot
            .iter()
            .map(|record| record.location.clone())
            .chain(recovery::stored_locations(&status.recovery_runs))
            .collect()
    }

    fn restored_from(&self, cluster: &MySQLCluster) -> Vec<String> {
        cluster
            .status
            .iter()
            .filter_map(|status| status.restored_from.as_ref())
            .map(|record| record.location.clone())
            .collect()
    }

    fn runs_held_from(
        &self,
        status: &MySQLBackupStatus,
        backup: &MySQLBackup,
        cluster: &MySQLCluster,
    ) -> Option<usize> {
        let runs = status.recovery_runs.as_slice();
        let source = cluster.spec.restore_from.as_ref();
        recovery::restore_holds_from(
            &backup.name_any(),
            source.map(|source| source.backup.backup_name.as_str()),
            crate::restore::restore_done(cluster),
            || {
                let point = source?.point_in_time.as_ref()?;
                Some(
                    crate::restore::plan_recovery(runs, point, cluster.spec.flavor).map(|plan| plan.snapshot),
                )
            },
        )
    }

    fn archive_break(&self, status: &MySQLBackupStatus) -> Option<String> {
        let last_snapshot = status
            .run
            .last_snapshot
            .as_ref()
            .map(|record| record.location.as_str());
        recovery::archive_break(&status.recovery_runs, last_snapshot, "binary log")
    }

    fn keep_runs(&self, status: &mut MySQLBackupStatus, retain: u32, held_from: Option<usize>) -> bool {
        recovery::keep_newest_in_status(
            &mut status.recovery_runs,
            (&mut status.recoverable_from, &mut status.recoverable_until),
            retain,
            held_from,
        )
    }

    fn drill_cluster(
        &self,
        backup: &MySQLBackup,
        cluster: &MySQLCluster,
        name: &str,
    ) -> Result<MySQLCluster, String> {
        Ok(drill_cluster(backup, cluster, name))
    }

    fn drill_claims(&self, name: &str) -> Vec<String> {
        vec![quorum_core::pod::data_claim_name(&crate::resources::member_name(
            name, 0,
        ))]
    }

    fn drill_ready(&self, scratch: &MySQLCluster) -> bool {
        scratch.status.as_ref().is_some_and(|status| {
            quorum_core::backup::drill::restored_and_ready(status.restored_from.is_some(), &status.conditions)
        })
    }

    async fn drill_content(
        &self,
        scratch: &MySQLCluster,
        _recorded: &MySQLBackupStatus,
    ) -> Result<ContentFingerprint, String> {
        crate::reconcile::hand_admin_credentials(self.context, scratch)
            .await
            .map_err(|error| format!("the admin credentials: {error}"))?;
        let addresses = self.context.state.addresses(scratch);
        let admin = self
            .context
            .state
            .clients
            .call(
                &object_key(scratch),
                &addresses,
                0,
                "connect",
                Idempotency::Read,
                |admin| async move { Ok(admin) },
            )
            .await
            .map_err(|error| format!("unreachable: {error}"))?;
        snapshot_out(&admin, &["root", REPLICATION_USER], tokio::io::sink())
            .await
            .map(|info| info.content)
            .map_err(|error| error.to_string())
    }

    fn recorded_content(&self, status: &MySQLBackupStatus) -> Option<ContentFingerprint> {
        status.content.clone()
    }
}

impl MySqlSnapshots<'_> {
    /// A physical copy of `source`'s files (`mariadb-backup`, run here: this process is the
    /// run's Job beside the member, with its volume mounted) streamed into `sink` as `name`.
    async fn copy_files(
        &self,
        cluster: &MySQLCluster,
        source: &Member,
        sink: &BackupSink,
        name: &str,
    ) -> Result<Snapshot<RunInfo>, SnapshotFailed> {
        let credentials = crate::reconcile::admin_credentials(self.context, cluster)
            .await
            .map_err(|error| SnapshotFailed(format!("the admin credentials: {error}")))?;
        let addresses = self.context.state.addresses(cluster);
        let physical = PhysicalSource {
            host: addresses.host(source.ordinal),
            port: addresses.port(),
            credentials,
            data_dir: DATA_DIR.into(),
            scratch: BESIDE_SCRATCH_DIR.into(),
        };
        let produce = producer(move |writer| Box::pin(async move { backup_out(&physical, writer).await }));
        let upload = |reader| async move { sink.upload(name, reader).await };
        let (stored, info) = pipe(produce, upload, SNAPSHOT_STALL_TIMEOUT)
            .await
            .map_err(|error: PipeError<PhysicalError, BackupError>| SnapshotFailed(error.to_string()))?;
        stored
            .verify("mariadb-backup", info.bytes, &info.sha256)
            .map_err(SnapshotFailed)?;
        Ok(Snapshot {
            stored,
            info: RunInfo {
                copy: Copy::Physical(info),
                archive: None,
            },
        })
    }
}

/// Archives the binary log the member wrote since the previous run (since this run's snapshot
/// for the first, or when the member no longer holds where the previous run ended) next to the
/// snapshot `name`, and returns it with the runs: the kept ones and this (retention trims
/// them when it prunes).
async fn archive_run(
    backup: &MySQLBackup,
    admin: &MySqlAdmin,
    sink: &BackupSink,
    name: &str,
    snapshot: &quorum_core::backup::StoredBackup,
    info: &SnapshotInfo,
) -> Result<(ArchivedBinlog, Vec<RecoveryRun>), SnapshotFailed> {
    let snapshot_completed_at = Timestamp::now();
    let mut runs = backup
        .status
        .as_ref()
        .map(|status| status.recovery_runs.clone())
        .unwrap_or_default();
    let previous_end = runs
        .last()
        .and_then(|run| GtidPosition::parse(info.position.flavor(), &run.binlog_through).ok())
        .filter(|end| info.position.includes(end));
    let object = format!("{}.binlog", name.strip_suffix(".sql").unwrap_or(name));
    let object = object.as_str();
    let archive = |after: GtidPosition| async move {
        // Every transaction written before the dump starts is in the log when it reaches the end.
        let archived_at = Timestamp::now();
        let dump_admin = admin.clone();
        let produce = producer(move |writer| {
            Box::pin(async move { archive_binlog(&dump_admin, &after, writer).await })
        });
        let upload = |reader| async move { sink.upload(object, reader).await };
        pipe(produce, upload, SNAPSHOT_STALL_TIMEOUT)
            .await
            .map(|(stored, archived)| (stored, archived, archived_at))
    };
    let archived = match previous_end {
        Some(end) => match archive(end).await {
            Err(PipeError::Producer(BinlogError::Gap { .. })) => archive(info.position.clone()).await,
            other => other,
        },
        None => archive(info.position.clone()).await,
    };
    let (stored, archived, archived_at) =
        archived.map_err(|error: PipeError<BinlogError, BackupError>| {
            SnapshotFailed(format!("archiving the binary log: {error}"))
        })?;
    stored
        .verify("the binary log dump", archived.bytes, &archived.sha256)
        .map_err(SnapshotFailed)?;
    runs.push(RecoveryRun {
        snapshot: StoredPiece {
            location: snapshot.location.clone(),
            sha256: snapshot.sha256.clone(),
            size_bytes: i64::try_from(snapshot.size).ok(),
        },
        snapshot_position: info.position.to_string(),
        snapshot_completed_at: Time(snapshot_completed_at),
        binlog: StoredPiece {
            location: stored.location.clone(),
            sha256: stored.sha256.clone(),
            size_bytes: i64::try_from(stored.size).ok(),
        },
        binlog_after: archived.after.to_string(),
        binlog_through: archived.through.to_string(),
        archived_at: Time(archived_at),
    });
    Ok((archived, runs))
}

/// The throw-away cluster `name` a drill restores `backup`'s newest snapshot into: one member of
/// `cluster`'s flavor, version, storage, pod template and TLS, with no accounts of its own and
/// no backups.
pub fn drill_cluster(backup: &MySQLBackup, cluster: &MySQLCluster, name: &str) -> MySQLCluster {
    let mut spec = cluster.spec.clone();
    spec.replicas = 1;
    spec.users = Vec::new();
    spec.backup = None;
    spec.restore_from = Some(crate::crd::MySqlRestoreSource::newest(backup.name_any()));
    let mut scratch = MySQLCluster::new(name, spec);
    scratch.metadata.namespace = backup.namespace();
    scratch
}

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
pub async fn reconcile_backup(
    backup: Arc<MySQLBackup>,
    context: Arc<Context<State>>,
) -> Result<Action, BackupControllerError<SnapshotFailed>> {
    controller::reconcile(&MySqlSnapshots { context: &context }, backup.as_ref(), &context).await
}

/// Takes one run of a `MySQLBackup` in a backup Job's process.
pub async fn run_backup(
    backup: Arc<MySQLBackup>,
    context: Arc<Context<State>>,
    run: quorum_core::backup::job::JobRun,
) -> JobOutcome {
    let engine = MySqlSnapshots { context: &context };
    controller::run_in_job(&engine, backup.as_ref(), &context, run).await
}
