//! Restoring a new cluster from a `MySQLBackup`: reading the stored snapshot back from the
//! backup's destination into a member, verified against what the backup recorded. No
//! Kubernetes here: the reconciler reads the backup and its credentials, and passes a
//! [`StoredSnapshot`].
//!
//! The snapshot is streamed from the store into the server as it is read, and its SHA-256 is
//! known only at the end. So the end of the stream is held back until the digest matches:
//! [`snapshot_in`] refuses a stream without its trailer, or with anything after it, and a
//! stream whose digest differs gets a line after its trailer. A restore that did not verify
//! is an error, whatever the server already executed; the member then holds part of a
//! snapshot, which the next attempt (each database and account is dropped before it is
//! recreated) replaces.

use jiff::Timestamp;
use quorum_core::backup::{
    BackupError, BackupSink, BackupTarget, recovery, recovery::Unplanned, scoped_target,
};
use tokio::io::AsyncWriteExt;

use crate::admin::{
    AdminError, MySqlAdmin,
    binlog::{BinlogError, ReplayStop, replay_binlog},
    gtid::GtidPosition,
    snapshot::{SnapshotError, snapshot_in},
};
use crate::crd::{Flavor, PointInTime, RecoveryRun};

/// A snapshot a `MySQLBackup` stored, and what it recorded about it.
#[derive(Clone, Debug)]
pub struct StoredSnapshot {
    /// The `MySQLBackup`.
    pub backup: String,
    pub sink: BackupSink,
    /// The object's name in `sink`.
    pub key: String,
    /// Where it is, as the backup recorded it.
    pub location: String,
    /// As the backup recorded it, lowercase hex.
    pub sha256: String,
    /// The GTID position the backup recorded.
    pub position: GtidPosition,
    /// For a point-in-time restore: the archived binary log to replay after the snapshot, in
    /// order, and where to stop. Empty for the snapshot alone.
    pub binlogs: Vec<StoredBinlog>,
    pub stop: Option<ReplayStop>,
    /// How it was read: a physical copy is restored by the members' init containers, and the
    /// restore step only gives the server its history.
    pub method: crate::crd::BackupMethod,
}

/// A piece of archived binary log, and what its run recorded about it.
#[derive(Clone, Debug)]
pub struct StoredBinlog {
    pub key: String,
    pub location: String,
    pub sha256: String,
    pub through: GtidPosition,
}

/// The object's name in `sink` for a location a backup recorded.
fn key_in(sink: &BackupSink, location: &str) -> Result<String, String> {
    location
        .strip_prefix(&sink.location(""))
        .filter(|key| !key.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "the location {location} is not in the backup's destination ({})",
                sink.location("")
            )
        })
}

impl StoredSnapshot {
    /// The snapshot a backup of `cluster` in `namespace` stored at `location`, in the store
    /// the backup's destination maps to (`target`, unscoped). The backup controller stores
    /// each cluster's snapshots below `<namespace>/<cluster>` of the destination; the object's
    /// name is what follows that in `location`.
    ///
    /// # Errors
    /// A message when the store cannot be built or `location` is not in it.
    pub fn locate(
        backup: &str,
        target: BackupTarget,
        namespace: &str,
        cluster: &str,
        location: &str,
        sha256: &str,
        position: GtidPosition,
    ) -> Result<Self, String> {
        let sink =
            BackupSink::new(scoped_target(target, namespace, cluster)).map_err(|error| error.to_string())?;
        let key = key_in(&sink, location)?;
        Ok(Self {
            backup: backup.to_string(),
            sink,
            key,
            location: location.to_string(),
            sha256: sha256.to_ascii_lowercase(),
            position,
            binlogs: Vec::new(),
            stop: None,
            method: crate::crd::BackupMethod::Logical,
        })
    }

    /// The same store's run `plan` chose: its snapshot, then its pieces of binary log.
    ///
    /// # Errors
    /// A message when a recorded location or position cannot be used.
    pub fn at_point(
        mut self,
        runs: &[RecoveryRun],
        plan: &RecoveryPlan,
        flavor: Flavor,
    ) -> Result<Self, String> {
        let run = &runs[plan.snapshot];
        self.key = key_in(&self.sink, &run.snapshot.location)?;
        self.location = run.snapshot.location.clone();
        self.sha256 = run.snapshot.sha256.to_ascii_lowercase();
        self.position = parse(flavor, &run.snapshot_position)?;
        self.binlogs = runs[plan.pieces.clone()]
            .iter()
            .map(|run| {
                Ok(StoredBinlog {
                    key: key_in(&self.sink, &run.binlog.location)?,
                    location: run.binlog.location.clone(),
                    sha256: run.binlog.sha256.to_ascii_lowercase(),
                    through: parse(flavor, &run.binlog_through)?,
                })
            })
            .collect::<Result<_, String>>()?;
        self.stop = Some(plan.stop.clone());
        Ok(self)
    }

    /// The furthest the restore takes the member's history: a member found beyond the
    /// snapshot's position but within this one is one this restore was interrupted on.
    pub fn furthest_position(&self) -> &GtidPosition {
        self.binlogs.last().map_or(&self.position, |piece| &piece.through)
    }
}

fn parse(flavor: Flavor, text: &str) -> Result<GtidPosition, String> {
    GtidPosition::parse(flavor, text).map_err(|error| error.to_string())
}

/// Which kept run's snapshot a point-in-time restore starts from, which runs' binary logs it
/// replays after it, and where it stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryPlan {
    pub snapshot: usize,
    pub pieces: std::ops::Range<usize>,
    pub stop: ReplayStop,
}

/// Whether `cluster`'s restore is behind it: recorded, or the cluster has a primary (it was
/// never restored into, or took writes since).
pub fn restore_done(cluster: &crate::crd::MySQLCluster) -> bool {
    cluster
        .status
        .as_ref()
        .is_some_and(|status| status.restored_from.is_some() || status.primary.is_some())
}

/// Plans a restore of `runs` (oldest first) to `point` ([`recovery::plan`]): to a time, or to
/// a GTID position, which a snapshot is before when the position includes the snapshot's and a
/// run's log reaches when its end includes the position.
///
/// # Errors
/// A message naming `restoreFrom.pointInTime` when the point is before the oldest kept
/// snapshot, after what was archived, or across a gap in the archive.
pub fn plan_recovery(
    runs: &[RecoveryRun],
    point: &PointInTime,
    flavor: Flavor,
) -> Result<RecoveryPlan, Unplanned> {
    let field = "restoreFrom.pointInTime";
    let log = "binary log";
    let planned = match (&point.time, &point.gtid) {
        (Some(time), None) => {
            let time =
                Timestamp::from_second(time.0.as_second()).map_err(|e| Unplanned::never(e.to_string()))?;
            recovery::plan_to_time(runs, time, field, log).map(|plan| (plan, ReplayStop::Time(time)))
        }
        (None, Some(gtid)) => {
            let position =
                parse(flavor, gtid).map_err(|why| Unplanned::never(format!("{field}.gtid: {why}")))?;
            let test = recovery::PointTest {
                snapshot_before: &|run: &RecoveryRun| {
                    Ok(position.includes(&parse(flavor, &run.snapshot_position)?))
                },
                log_reaches: &|run: &RecoveryRun| Ok(parse(flavor, &run.binlog_through)?.includes(&position)),
            };
            recovery::plan(runs, test, field, log).map(|plan| (plan, ReplayStop::Position(position.clone())))
        }
        _ => {
            return Err(Unplanned::never(format!(
                "{field} takes exactly one of time and gtid"
            )));
        }
    };
    planned.map(|(plan, stop)| RecoveryPlan {
        snapshot: plan.snapshot,
        pieces: plan.pieces,
        stop,
    })
}

/// Why a restore failed. The member may hold part of the snapshot.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Reading the object failed, or its bytes do not have the recorded SHA-256.
    #[error("reading {key}: {source}")]
    Fetch {
        key: String,
        #[source]
        source: BackupError,
    },
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The stream's header names another position than the backup recorded.
    #[error("the snapshot was taken at GTID position {stream}, the backup recorded {recorded}")]
    PositionMismatch { stream: String, recorded: String },
    #[error("setting the GTID history to the backup's position: {0}")]
    History(#[source] AdminError),
    /// Replaying an archived piece of binary log failed.
    #[error("replaying {key}: {source}")]
    Replay {
        key: String,
        #[source]
        source: BinlogError,
    },
    /// Every piece was replayed and the member does not hold the position asked for: it is not
    /// in the archive (another history's position).
    #[error("the archived binary log does not hold GTID position {asked}; the member reached {reached}")]
    PointNotReached { asked: String, reached: String },
}

/// Streams `snapshot` into the member behind `admin`, verifies it, and makes its position the
/// member's GTID history ([`MySqlAdmin::adopt_position`]). Returns the position. The member's
/// read-only state is left as it was.
///
/// # Errors
/// [`RestoreError::Fetch`] for a missing or unreadable object or a digest that differs;
/// `Snapshot` for a stream the server or the format check refused; `PositionMismatch`;
/// `History`. After any of them the member holds what the server executed so far.
pub async fn restore_snapshot(
    admin: &MySqlAdmin,
    snapshot: &StoredSnapshot,
) -> Result<GtidPosition, RestoreError> {
    let (writer, reader) = tokio::io::duplex(1 << 20);
    let fetch = async move {
        let mut writer = writer;
        let fetched = snapshot
            .sink
            .download(&snapshot.key, &mut writer, Some(&snapshot.sha256))
            .await;
        if fetched.is_err() {
            // Bytes that failed the check never end a stream that reads as complete.
            let _ = writer.write_all(b"-- not verified\n").await;
        }
        fetched
    };
    let restore = snapshot_in(admin, tokio::io::BufReader::new(reader));
    let (fetched, restored) = tokio::join!(fetch, restore);
    // The store's error says why a stream was cut short; the server's would only say it was.
    fetched.map_err(|source| RestoreError::Fetch {
        key: snapshot.key.clone(),
        source,
    })?;
    let position = restored?;
    if position != snapshot.position {
        return Err(RestoreError::PositionMismatch {
            stream: position.to_string(),
            recorded: snapshot.position.to_string(),
        });
    }
    admin
        .adopt_position(&position)
        .await
        .map_err(RestoreError::History)?;
    match &snapshot.stop {
        Some(stop) => replay_binlogs(admin, snapshot, position, stop).await,
        None => Ok(position),
    }
}

/// Replays `snapshot`'s pieces of binary log in order onto the member, which holds `held`,
/// up to `stop`; each piece's bytes are checked against its recorded SHA-256 as they stream.
async fn replay_binlogs(
    admin: &MySqlAdmin,
    snapshot: &StoredSnapshot,
    mut held: GtidPosition,
    stop: &ReplayStop,
) -> Result<GtidPosition, RestoreError> {
    for piece in &snapshot.binlogs {
        let (writer, reader) = tokio::io::duplex(1 << 20);
        let fetch = async move {
            let mut writer = writer;
            snapshot
                .sink
                .download(&piece.key, &mut writer, Some(&piece.sha256))
                .await
        };
        let (fetched, replayed) = tokio::join!(fetch, replay_binlog(admin, reader, &held, stop));
        fetched.map_err(|source| RestoreError::Fetch {
            key: piece.key.clone(),
            source,
        })?;
        let replayed = replayed.map_err(|source| RestoreError::Replay {
            key: piece.key.clone(),
            source,
        })?;
        held = replayed.through;
        if replayed.reached_stop {
            break;
        }
    }
    if let ReplayStop::Position(asked) = stop
        && !held.includes(asked)
    {
        return Err(RestoreError::PointNotReached {
            asked: asked.to_string(),
            reached: held.to_string(),
        });
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Flavor;

    #[test]
    fn only_a_restore_container_that_reported_this_copy_restored_counts() {
        use crate::decide::CopyState;
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
        };
        let pod = |name: &str, terminated: Option<&str>| Pod {
            status: Some(PodStatus {
                init_container_statuses: Some(vec![ContainerStatus {
                    name: name.into(),
                    state: Some(ContainerState {
                        terminated: terminated.map(|message| ContainerStateTerminated {
                            message: Some(message.into()),
                            ..ContainerStateTerminated::default()
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        let report = |report: PhysicalRestoreReport| serde_json::to_string(&report).unwrap();
        let restored = report(PhysicalRestoreReport::Restored {
            sha256: "ab12".into(),
        });
        assert_eq!(
            copy_state(Some(&pod("restore", Some(&restored))), "AB12"),
            CopyState::Restored
        );
        let not = |state: CopyState| match state {
            CopyState::NotRestored(why) => why,
            CopyState::Restored => panic!("reported restored"),
        };
        assert!(not(copy_state(Some(&pod("restore", Some(&restored))), "cd34")).contains("another copy"));
        let skipped = report(PhysicalRestoreReport::Skipped {
            why: "the data directory already holds data".into(),
        });
        assert!(
            not(copy_state(Some(&pod("restore", Some(&skipped))), "ab12")).contains("already holds data")
        );
        assert!(not(copy_state(Some(&pod("restore", None)), "ab12")).contains("not finished"));
        assert!(
            not(copy_state(
                Some(&pod("restore", Some("the store: not found"))),
                "ab12"
            ))
            .contains("failed")
        );
        assert!(
            not(copy_state(Some(&pod("install-operator", None)), "ab12"))
                .contains("no restore init container")
        );
        assert!(not(copy_state(None, "ab12")).contains("does not exist"));
    }

    fn position() -> GtidPosition {
        GtidPosition::parse(Flavor::MariaDB, "0-1-42").unwrap()
    }

    fn run(
        snapshot_second: i64,
        snapshot: &str,
        after: &str,
        through: &str,
        archived_second: i64,
    ) -> RecoveryRun {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use quorum_core::backup::recovery::StoredPiece;
        let at = |second| Time(Timestamp::from_second(second).unwrap());
        RecoveryRun {
            snapshot: StoredPiece {
                location: format!("s3://b/run-{snapshot_second}.sql"),
                sha256: "0".repeat(64),
                size_bytes: None,
            },
            snapshot_position: snapshot.to_string(),
            snapshot_completed_at: at(snapshot_second),
            binlog: StoredPiece {
                location: format!("s3://b/run-{snapshot_second}.binlog"),
                sha256: "0".repeat(64),
                size_bytes: None,
            },
            binlog_after: after.to_string(),
            binlog_through: through.to_string(),
            archived_at: at(archived_second),
        }
    }

    fn at_time(second: i64) -> PointInTime {
        PointInTime {
            time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::from_second(second).unwrap(),
            )),
            gtid: None,
        }
    }

    fn at_gtid(gtid: &str) -> PointInTime {
        PointInTime {
            time: None,
            gtid: Some(gtid.to_string()),
        }
    }

    #[test]
    fn a_point_in_time_restores_the_newest_snapshot_before_it_then_the_logs_up_to_it() {
        // Runs at 100, 200 and 300 s: each snapshot, then the log since the previous run.
        let runs = [
            run(100, "0-1-10", "0-1-10", "0-1-12", 101),
            run(200, "0-1-20", "0-1-12", "0-1-21", 201),
            run(300, "0-1-30", "0-1-21", "0-1-33", 301),
        ];
        let plan = |point: PointInTime| plan_recovery(&runs, &point, Flavor::MariaDB);
        let time = |second| ReplayStop::Time(Timestamp::from_second(second).unwrap());
        let cases = [
            // At a snapshot's second, or after it within its run's archive: that snapshot and
            // its own run's log.
            (at_time(100), 0, 0..1),
            (at_time(150), 0, 0..2),
            // The log of run 2 was read at 201: a point in the second 200 is complete in it.
            (at_time(200), 1, 1..2),
            (at_time(250), 1, 1..3),
            (at_time(300), 2, 2..3),
        ];
        for (point, snapshot, pieces) in cases {
            let second = point.time.as_ref().unwrap().0.as_second();
            assert_eq!(
                plan(point).unwrap(),
                RecoveryPlan {
                    snapshot,
                    pieces,
                    stop: time(second)
                },
                "time {second}"
            );
        }
        let position = plan(at_gtid("0-1-25")).unwrap();
        assert_eq!((position.snapshot, position.pieces), (1, 1..3));
        let exact = plan(at_gtid("0-1-20")).unwrap();
        assert_eq!((exact.snapshot, exact.pieces), (1, 1..2));

        for (point, says) in [
            (at_time(99), "before the oldest kept snapshot"),
            (at_time(301), "after the newest archived point"),
            (at_gtid("0-1-9"), "before the oldest kept snapshot"),
            (at_gtid("0-1-34"), "after the newest archived point"),
        ] {
            let error = plan(point).unwrap_err().message;
            assert!(error.starts_with("restoreFrom.pointInTime is"), "{error}");
            assert!(error.contains(says), "{error}");
            assert!(
                error.contains("from 1970-01-01T00:01:40Z to 1970-01-01T00:05:00Z"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_gap_in_the_archive_bounds_what_can_be_restored() {
        // Run 2's log could not continue from run 1's (purged): it begins at its own snapshot.
        let runs = [
            run(100, "0-1-10", "0-1-10", "0-1-12", 101),
            run(200, "0-1-20", "0-1-20", "0-1-21", 201),
            run(300, "0-1-30", "0-1-21", "0-1-33", 301),
        ];
        let across = plan_recovery(&runs, &at_time(150), Flavor::MariaDB)
            .unwrap_err()
            .message;
        assert!(across.contains("past a gap"), "{across}");
        assert!(plan_recovery(&runs, &at_time(100), Flavor::MariaDB).is_ok());
        assert!(plan_recovery(&runs, &at_time(250), Flavor::MariaDB).is_ok());
        let (from, until) = recovery::recoverable_window(&runs).unwrap();
        assert_eq!((from.as_second(), until.as_second()), (200, 300));
    }

    #[test]
    fn a_snapshot_is_found_below_its_cluster_in_the_destination() {
        let directory = std::env::temp_dir().join(format!("quorum-restore-locate-{}", std::process::id()));
        let target = BackupTarget::Filesystem {
            directory: directory.clone(),
        };
        let sink = BackupSink::new(scoped_target(target.clone(), "prod", "shop")).unwrap();
        let location = sink.location("shop/shop-20260101T000000Z.sql");
        let snapshot = StoredSnapshot::locate(
            "nightly",
            target.clone(),
            "prod",
            "shop",
            &location,
            "AB".repeat(32).as_str(),
            position(),
        )
        .unwrap();
        assert_eq!(snapshot.key, "shop/shop-20260101T000000Z.sql");
        assert_eq!(snapshot.sha256, "ab".repeat(32));

        let elsewhere = StoredSnapshot::locate("nightly", target, "prod", "other", &location, "", position())
            .unwrap_err();
        assert!(
            elsewhere.contains("is not in the backup's destination"),
            "{elsewhere}"
        );
        let _ = std::fs::remove_dir_all(directory);
    }

    #[test]
    fn an_s3_snapshot_is_found_below_the_prefix() {
        let target = BackupTarget::S3(quorum_core::backup::S3Target {
            bucket: "backups".into(),
            prefix: Some("mysql".into()),
            endpoint: None,
            region: None,
            access_key_id: "id".into(),
            secret_access_key: "secret".into(),
            allow_http: false,
        });
        let snapshot = StoredSnapshot::locate(
            "nightly",
            target,
            "prod",
            "shop",
            "s3://backups/mysql/prod/shop/shop/shop-20260101T000000Z.sql",
            &"0".repeat(64),
            position(),
        )
        .unwrap();
        assert_eq!(snapshot.key, "shop/shop-20260101T000000Z.sql");
    }
}

/// The init container of the members of a cluster restored from a physical copy
/// (`mysql-operator restore-physical`): the first member's data directory, while empty, gets the
/// copy ([`crate::admin::physical::restore_in`]); S3 credentials come from `AWS_ACCESS_KEY_ID`
/// and `AWS_SECRET_ACCESS_KEY`.
#[derive(clap::Args, Debug, Clone)]
pub struct RestorePhysicalArgs {
    /// Where the copy is: `s3://bucket/key` or an absolute path.
    #[arg(long)]
    pub location: String,
    /// Its SHA-256 (hex), as the backup recorded it.
    #[arg(long)]
    pub sha256: String,
    /// The GTID position the backup recorded for it.
    #[arg(long)]
    pub position: String,
    /// This member's pod: only the first member restores; the others copy it.
    #[arg(long)]
    pub pod: String,
    #[arg(long)]
    pub data_dir: std::path::PathBuf,
    #[command(flatten)]
    pub store: quorum_core::backup::StoreSettings,
}

/// What the init container of a physical restore did, as its termination message says
/// (JSON): the operator opens the first member only on a copy it reports restored.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PhysicalRestoreReport {
    /// The data directory holds the copy of this SHA-256 (restored now, or by an earlier start
    /// of the member).
    Restored { sha256: String },
    /// Nothing was restored, and why.
    Skipped { why: String },
}

/// The file a physical restore leaves in the data directory, naming the copy's SHA-256: a
/// later start of the member knows its data is that copy.
pub const RESTORED_MARKER: &str = ".quorum-restored";

/// Why a physical restore failed. Nothing of the copy is left in the data directory.
#[derive(Debug, thiserror::Error)]
pub enum RestorePhysicalError {
    #[error("{0} (credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")]
    Locate(#[from] quorum_core::backup::LocateError),
    #[error("the recorded position {0}: {1}")]
    Position(String, String),
    #[error("the store: {0}")]
    Store(#[from] BackupError),
    #[error(transparent)]
    Restore(#[from] crate::admin::physical::PhysicalError),
    #[error("{path}: {source}")]
    Marker {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Restores the copy into this member's data directory if it is the first member's and empty;
/// says what it did.
///
/// # Errors
/// [`RestorePhysicalError`]: the member's server must not start (its init container fails, and
/// the kubelet tries again).
pub async fn restore_physical(
    args: &RestorePhysicalArgs,
    credentials: Option<quorum_core::backup::S3Credentials>,
) -> Result<PhysicalRestoreReport, RestorePhysicalError> {
    let skipped = |why: &str| Ok(PhysicalRestoreReport::Skipped { why: why.to_string() });
    if args.pod.rsplit('-').next() != Some("0") {
        return skipped("only the first member restores the copy; the others copy the first");
    }
    let marker = args.data_dir.join(RESTORED_MARKER);
    if let Ok(recorded) = std::fs::read_to_string(&marker) {
        return match recorded.trim() == args.sha256.to_ascii_lowercase() {
            true => Ok(PhysicalRestoreReport::Restored {
                sha256: recorded.trim().to_string(),
            }),
            false => skipped("the data directory holds another copy"),
        };
    }
    let position = GtidPosition::parse(Flavor::MariaDB, &args.position)
        .map_err(|error| RestorePhysicalError::Position(args.position.clone(), error.to_string()))?;
    let (target, key) = quorum_core::backup::locate(&args.location, &args.store, credentials)?;
    let sink = BackupSink::new(target)?;
    let sha256 = args.sha256.to_ascii_lowercase();
    let restored = crate::admin::physical::restore_in(&args.data_dir, &position, |input| {
        let (sink, key, sha256) = (&sink, &key, &sha256);
        async move { sink.download(key, input, Some(sha256)).await.map(drop) }
    })
    .await;
    match restored {
        Ok(_) => {}
        // Data there already, with no record of a restore: a volume kept from another
        // cluster, which is never written over. The operator sees no restored copy and waits.
        Err(crate::admin::physical::PhysicalError::NotEmpty { .. }) => {
            return skipped("the data directory already holds data, and a restore never writes over data");
        }
        Err(error) => return Err(error.into()),
    }
    std::fs::write(&marker, &sha256).map_err(|source| RestorePhysicalError::Marker {
        path: marker.clone(),
        source,
    })?;
    Ok(PhysicalRestoreReport::Restored { sha256 })
}

/// What the first member's restore init container reported of the copy of `sha256`
/// ([`PhysicalRestoreReport`] in its termination message), on `pod`.
pub fn copy_state(pod: Option<&k8s_openapi::api::core::v1::Pod>, sha256: &str) -> crate::decide::CopyState {
    use crate::decide::CopyState;
    let Some(pod) = pod else {
        return CopyState::NotRestored("its pod does not exist yet".into());
    };
    let Some(status) = pod
        .status
        .iter()
        .flat_map(|status| status.init_container_statuses.iter().flatten())
        .find(|status| status.name == crate::resources::RESTORE_CONTAINER)
    else {
        return CopyState::NotRestored(
            "its pod has no restore init container: it was made before the backup held a copy, and its server \
             initialised its data directory; delete the cluster and its volumes and create it again"
                .into(),
        );
    };
    let terminated = status
        .state
        .as_ref()
        .and_then(|state| state.terminated.as_ref())
        .or_else(|| {
            status
                .last_state
                .as_ref()
                .and_then(|state| state.terminated.as_ref())
        });
    let Some(terminated) = terminated else {
        return CopyState::NotRestored("its restore init container has not finished".into());
    };
    let message = terminated.message.as_deref().unwrap_or_default();
    match serde_json::from_str::<PhysicalRestoreReport>(message) {
        Ok(PhysicalRestoreReport::Restored { sha256: restored }) if restored.eq_ignore_ascii_case(sha256) => {
            CopyState::Restored
        }
        Ok(PhysicalRestoreReport::Restored { sha256: other }) => {
            CopyState::NotRestored(format!("its data directory holds another copy (sha256 {other})"))
        }
        Ok(PhysicalRestoreReport::Skipped { why }) => CopyState::NotRestored(why),
        Err(_) => CopyState::NotRestored(format!("its restore init container failed: {message}")),
    }
}
