//! Starting a new cluster from a `RedisBackup` (`spec.restoreFrom`).
//!
//! Which node starts from which snapshot is decided by [`plan_restore`] (pure): in replication
//! mode the first primary (ordinal 0) loads the backup's RDB and the replicas sync from it; in
//! cluster mode each shard's first node loads its shard's RDB, which needs the same shard
//! count as the backup. The reconciler records the plan in `status.restore` before any data
//! pod exists, and the data pods' init step (`redis-operator restore-node`, the operator's own
//! image) runs [`restore_node`]: it fetches the pod's snapshot and places it as `dump.rdb`
//! with [`place_snapshot`], only when the data directory holds no data yet, so a restarted or
//! rescheduled pod never has its data replaced.

use std::path::{Path, PathBuf};

use quorum_core::backup::{BackupError, BackupSink, LocateError, S3Credentials, StoreSettings, locate};

use crate::{
    admin::snapshot::{DUMP_FILE, RestoreError, place_snapshot},
    crd::{Mode, RedisBackup, RedisClusterSpec, RestoreSnapshot, RestoreStatus},
    resources::{APPEND_ONLY_DIR, ordinal_of_pod},
};

/// Why a cluster cannot start from its `restoreFrom` now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreRefusal {
    /// The backup does not exist or has no snapshot yet: wait for it.
    NotReady(String),
    /// The backup can never restore this cluster as specified (another mode, another shard
    /// count): the spec must change.
    Invalid(String),
}

/// The snapshots a new cluster of `spec` starts from, out of `backup` (the resource
/// `spec.restoreFrom` names, `None` when it does not exist).
///
/// # Errors
/// [`RestoreRefusal::NotReady`] while the backup is missing or has stored nothing;
/// [`RestoreRefusal::Invalid`], naming `restoreFrom`, when its snapshots do not fit the spec.
pub fn plan_restore(
    spec: &RedisClusterSpec,
    backup_name: &str,
    backup: Option<&RedisBackup>,
) -> Result<Vec<RestoreSnapshot>, RestoreRefusal> {
    let Some(backup) = backup else {
        return Err(RestoreRefusal::NotReady(format!(
            "restoreFrom: RedisBackup {backup_name} does not exist"
        )));
    };
    let status = backup.status.clone().unwrap_or_default();
    let Some(last) = status.run.last_snapshot else {
        return Err(RestoreRefusal::NotReady(format!(
            "restoreFrom: RedisBackup {backup_name} has no stored snapshot yet"
        )));
    };
    match spec.mode {
        Mode::Replication => {
            if !status.shards.is_empty() {
                return Err(RestoreRefusal::Invalid(format!(
                    "restoreFrom: RedisBackup {backup_name} holds {} shards of a Cluster-mode deployment; \
                     a Replication-mode deployment can start from one snapshot only",
                    status.shards.len()
                )));
            }
            Ok(vec![RestoreSnapshot {
                ordinal: 0,
                location: last.location,
                sha256: last.sha256,
                slots: vec![],
            }])
        }
        Mode::Cluster => {
            let shards = spec.shard_count();
            if status.shards.is_empty() {
                return Err(RestoreRefusal::Invalid(format!(
                    "restoreFrom: RedisBackup {backup_name} is of a Replication-mode deployment; \
                     a Cluster-mode deployment starts from one snapshot per shard"
                )));
            }
            if status.shards.len() != shards {
                return Err(RestoreRefusal::Invalid(format!(
                    "restoreFrom: RedisBackup {backup_name} holds {} shards and this deployment asks for {shards}; \
                     each shard starts from its own snapshot, so the shard counts must be equal",
                    status.shards.len()
                )));
            }
            let mut snapshots = status.shards.clone();
            snapshots.sort_by_key(|snapshot| snapshot.shard);
            let per_shard = spec.nodes_per_shard();
            for (index, snapshot) in snapshots.iter().enumerate() {
                if snapshot.shard != index as i32 {
                    return Err(RestoreRefusal::Invalid(format!(
                        "restoreFrom: RedisBackup {backup_name} lacks shard {index}'s snapshot"
                    )));
                }
            }
            Ok(snapshots
                .into_iter()
                .map(|snapshot| RestoreSnapshot {
                    ordinal: (snapshot.shard as usize * per_shard) as i32,
                    location: snapshot.location,
                    sha256: snapshot.sha256,
                    slots: snapshot.slots,
                })
                .collect())
        }
    }
}

/// What the reconciler records: the planned snapshots and how the init step reaches them.
pub fn restore_status(
    backup: &RedisBackup,
    snapshots: Vec<RestoreSnapshot>,
    image: &str,
    allow_http: bool,
) -> RestoreStatus {
    let s3 = backup.spec.backup.destination.s3.as_ref();
    RestoreStatus {
        backup_name: backup.metadata.name.clone().unwrap_or_default(),
        snapshots,
        image: image.to_string(),
        s3_endpoint: s3.and_then(|s3| s3.endpoint.clone()),
        s3_region: s3.and_then(|s3| s3.region.clone()),
        credentials_secret_name: s3.map(|s3| s3.credentials_secret_name.clone()),
        allow_http,
    }
}

/// One `--snapshot` of the init step: `ORDINAL=SHA256=LOCATION`.
pub fn snapshot_argument(snapshot: &RestoreSnapshot) -> String {
    format!("{}={}={}", snapshot.ordinal, snapshot.sha256, snapshot.location)
}

/// A parsed `--snapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSnapshot {
    pub ordinal: usize,
    pub sha256: String,
    pub location: String,
}

impl std::str::FromStr for NodeSnapshot {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut parts = text.splitn(3, '=');
        let (Some(ordinal), Some(sha256), Some(location)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("{text:?} is not ORDINAL=SHA256=LOCATION"));
        };
        let ordinal = ordinal
            .parse()
            .map_err(|_| format!("{text:?}: ordinal {ordinal:?} is not a number"))?;
        if sha256.len() != 64 || !sha256.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Err(format!("{text:?}: {sha256:?} is not a SHA-256 in hex"));
        }
        if location.is_empty() {
            return Err(format!("{text:?}: the location is empty"));
        }
        Ok(NodeSnapshot {
            ordinal,
            sha256: sha256.to_string(),
            location: location.to_string(),
        })
    }
}

/// What the init step is told (flags of `redis-operator restore-node`).
#[derive(clap::Args, Clone, Debug)]
pub struct RestoreNodeArgs {
    /// This pod's name; its ordinal picks the snapshot.
    #[arg(long)]
    pub pod_name: String,
    /// The server's data directory.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// `ORDINAL=SHA256=LOCATION` of each node that starts from a snapshot; other nodes start
    /// empty.
    #[arg(long = "snapshot")]
    pub snapshots: Vec<NodeSnapshot>,
    #[command(flatten)]
    pub store: StoreSettings,
}

/// What the init step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreOutcome {
    /// The snapshot was placed as `dump.rdb`, of this many bytes.
    Restored {
        size: u64,
    },
    Skipped(String),
}

/// Why the init step failed. Nothing was placed in the data directory.
#[derive(Debug, thiserror::Error)]
pub enum RestoreNodeError {
    #[error("pod name {0} does not end in an ordinal")]
    PodName(String),
    #[error(transparent)]
    Locate(#[from] LocateError),
    #[error("reading the data directory {path}: {source}")]
    DataDirectory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("fetching the snapshot: {0}")]
    Fetch(#[from] BackupError),
    #[error("placing the snapshot: {0}")]
    Place(#[from] RestoreError),
}

/// Files that mean a data directory already holds a server's data (its RDB, its append-only
/// files, a cluster node's identity): the first found, if any.
pub fn existing_data<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    names.into_iter().find(|name| {
        matches!(
            *name,
            DUMP_FILE | "nodes.conf" | APPEND_ONLY_DIR | "appendonly.aof"
        )
    })
}

/// Places this pod's snapshot in its data directory, when it has one and the directory holds
/// no data yet. The object is streamed from the store straight into [`place_snapshot`], which
/// writes it under a temporary name and renames it only once its SHA-256 matches.
///
/// # Errors
/// [`RestoreNodeError`]; the data directory is then as it was.
pub async fn restore_node(
    args: &RestoreNodeArgs,
    credentials: Option<S3Credentials>,
) -> Result<RestoreOutcome, RestoreNodeError> {
    let ordinal =
        ordinal_of_pod(&args.pod_name).ok_or_else(|| RestoreNodeError::PodName(args.pod_name.clone()))?;
    let Some(snapshot) = args.snapshots.iter().find(|s| s.ordinal == ordinal) else {
        return Ok(RestoreOutcome::Skipped(format!(
            "pod {} starts empty and syncs from its primary",
            args.pod_name
        )));
    };
    let directory_error = |source| RestoreNodeError::DataDirectory {
        path: args.data_dir.clone(),
        source,
    };
    tokio::fs::create_dir_all(&args.data_dir)
        .await
        .map_err(directory_error)?;
    let names = directory_names(&args.data_dir).map_err(directory_error)?;
    if let Some(found) = existing_data(names.iter().map(String::as_str)) {
        return Ok(RestoreOutcome::Skipped(format!(
            "the data directory already holds {found}; it is never replaced"
        )));
    }
    let (target, key) = locate(&snapshot.location, &args.store, credentials)?;
    let sink = BackupSink::new(target)?;
    let (writer, reader) = tokio::io::duplex(256 * 1024);
    // Each side owns its end, so that one stopping ends the other's stream instead of leaving
    // it waiting.
    let fetch = async move {
        let mut writer = writer;
        sink.download(&key, &mut writer, Some(&snapshot.sha256)).await
    };
    let place = async move {
        let mut reader = reader;
        place_snapshot(&mut reader, &args.data_dir, &snapshot.sha256).await
    };
    match tokio::join!(fetch, place) {
        (Ok(_), Ok(info)) => Ok(RestoreOutcome::Restored { size: info.size }),
        (Ok(_), Err(error)) => Err(error.into()),
        // The fetch could not write because placing had stopped: placing says why.
        (Err(BackupError::WriteDestination { .. }), Err(error)) => Err(error.into()),
        // A fetch cut short cannot have matched the digest, so nothing was placed.
        (Err(error), _) => Err(error.into()),
    }
}

fn directory_names(directory: &Path) -> std::io::Result<Vec<String>> {
    std::fs::read_dir(directory)?
        .map(|entry| entry.map(|entry| entry.file_name().to_string_lossy().into_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use quorum_core::crd::{BackupDestination, BackupRecord, FilesystemDestination};
    use sha2::{Digest, Sha256};

    use super::*;
    use crate::crd::{RedisBackupSpec, RedisBackupStatus, ShardSnapshot};

    fn spec(mode: Mode, shards: Option<i32>) -> RedisClusterSpec {
        let mut cluster = crate::resources::tests::cluster(mode);
        cluster.spec.shards = shards;
        cluster.spec
    }

    fn record(location: &str) -> BackupRecord {
        BackupRecord {
            name: "nightly".into(),
            location: location.into(),
            completed_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ),
            size_bytes: 10,
            sha256: "a".repeat(64),
        }
    }

    fn backup(status: Option<RedisBackupStatus>) -> RedisBackup {
        let mut backup = RedisBackup::new(
            "nightly",
            RedisBackupSpec {
                backup: quorum_core::crd::BackupSpec {
                    cluster_name: "old".into(),
                    destination: BackupDestination {
                        s3: None,
                        filesystem: Some(FilesystemDestination {
                            path: "/backups".into(),
                        }),
                    },
                    schedule: None,
                    retain: None,
                    verify: false,
                },
            },
        );
        backup.status = status;
        backup
    }

    fn shard(index: i32) -> ShardSnapshot {
        ShardSnapshot {
            shard: index,
            node: format!("old-{}", index * 2 + 1),
            slots: vec![format!("{}-{}", index * 100, index * 100 + 99)],
            location: format!("/backups/old-shard-{index}.rdb"),
            size_bytes: 10,
            sha256: format!("{index}").repeat(64),
        }
    }

    #[test]
    fn a_replication_deployment_starts_its_first_primary_from_the_snapshot() {
        let stored = backup(Some(RedisBackupStatus {
            run: quorum_core::crd::BackupRunStatus {
                last_snapshot: Some(record("/backups/old.rdb")),
                ..Default::default()
            },
            ..RedisBackupStatus::default()
        }));
        let plan = plan_restore(&spec(Mode::Replication, None), "nightly", Some(&stored)).unwrap();
        assert_eq!(
            plan,
            vec![RestoreSnapshot {
                ordinal: 0,
                location: "/backups/old.rdb".into(),
                sha256: "a".repeat(64),
                slots: vec![],
            }]
        );
    }

    #[test]
    fn a_missing_or_empty_backup_is_waited_for() {
        let spec = spec(Mode::Replication, None);
        assert!(matches!(
            plan_restore(&spec, "nightly", None),
            Err(RestoreRefusal::NotReady(message)) if message.contains("restoreFrom") && message.contains("does not exist")
        ));
        assert!(matches!(
            plan_restore(&spec, "nightly", Some(&backup(None))),
            Err(RestoreRefusal::NotReady(message)) if message.contains("no stored snapshot")
        ));
    }

    #[test]
    fn each_shard_s_first_node_starts_from_its_shard_s_snapshot() {
        let stored = backup(Some(RedisBackupStatus {
            run: quorum_core::crd::BackupRunStatus {
                last_snapshot: Some(record("/backups/old-shard-0.rdb")),
                ..Default::default()
            },
            shards: vec![shard(2), shard(0), shard(1)],
            content: None,
        }));
        // Three shards of a primary and one replica: pods 0-1, 2-3, 4-5.
        let plan = plan_restore(&spec(Mode::Cluster, Some(3)), "nightly", Some(&stored)).unwrap();
        let placed: Vec<(i32, &str)> = plan.iter().map(|s| (s.ordinal, s.location.as_str())).collect();
        assert_eq!(
            placed,
            vec![
                (0, "/backups/old-shard-0.rdb"),
                (2, "/backups/old-shard-1.rdb"),
                (4, "/backups/old-shard-2.rdb")
            ]
        );
        assert_eq!(plan[1].slots, vec!["100-199".to_string()]);
    }

    #[test]
    fn a_backup_that_cannot_fit_is_refused_naming_restore_from() {
        let sharded = backup(Some(RedisBackupStatus {
            run: quorum_core::crd::BackupRunStatus {
                last_snapshot: Some(record("/backups/old-shard-0.rdb")),
                ..Default::default()
            },
            shards: vec![shard(0), shard(1), shard(2)],
            content: None,
        }));
        let single = backup(Some(RedisBackupStatus {
            run: quorum_core::crd::BackupRunStatus {
                last_snapshot: Some(record("/backups/old.rdb")),
                ..Default::default()
            },
            ..RedisBackupStatus::default()
        }));
        let gap = backup(Some(RedisBackupStatus {
            run: quorum_core::crd::BackupRunStatus {
                last_snapshot: Some(record("/backups/old-shard-0.rdb")),
                ..Default::default()
            },
            shards: vec![shard(0), shard(1), shard(3)],
            content: None,
        }));
        for (spec, backup, says) in [
            (
                spec(Mode::Cluster, Some(4)),
                &sharded,
                "holds 3 shards and this deployment asks for 4",
            ),
            (spec(Mode::Replication, None), &sharded, "Cluster-mode"),
            (spec(Mode::Cluster, Some(3)), &single, "Replication-mode"),
            (spec(Mode::Cluster, Some(3)), &gap, "lacks shard 2"),
        ] {
            match plan_restore(&spec, "nightly", Some(backup)) {
                Err(RestoreRefusal::Invalid(message)) => {
                    assert!(message.starts_with("restoreFrom: "), "{message}");
                    assert!(message.contains(says), "{message}");
                }
                other => panic!("{says}: {other:?}"),
            }
        }
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RestoreNodeArgs,
    }

    #[test]
    fn snapshot_arguments_round_trip_and_bad_ones_are_refused() {
        let snapshot = RestoreSnapshot {
            ordinal: 4,
            location: "s3://bucket/ns/c/c-1.shard-2.rdb".into(),
            sha256: "ab".repeat(32),
            slots: vec![],
        };
        let parsed: NodeSnapshot = snapshot_argument(&snapshot).parse().unwrap();
        assert_eq!(
            parsed,
            NodeSnapshot {
                ordinal: 4,
                sha256: "ab".repeat(32),
                location: snapshot.location.clone(),
            }
        );
        for bad in ["4", "x=ab=/l", &format!("1={}=", "a".repeat(64)), "1=abc=/l"] {
            assert!(bad.parse::<NodeSnapshot>().is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from([
            "x",
            "--pod-name=cache-0",
            "--data-dir=/data",
            &format!("--snapshot={}", snapshot_argument(&snapshot)),
        ])
        .unwrap();
        assert_eq!(cli.args.snapshots, vec![parsed]);
    }

    #[test]
    fn data_of_any_kind_is_never_replaced() {
        assert_eq!(existing_data(["dump.rdb.partial", "x"]), None);
        assert_eq!(existing_data(["temp-1.rdb", "dump.rdb"]), Some("dump.rdb"));
        assert_eq!(existing_data(["nodes.conf"]), Some("nodes.conf"));
        assert_eq!(existing_data(["appendonlydir"]), Some("appendonlydir"));
    }

    fn scratch(name: &str) -> PathBuf {
        let directory =
            std::env::temp_dir().join(format!("quorum-redis-restore-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        directory
    }

    fn args(data_dir: &Path, pod: &str, snapshot: &NodeSnapshot) -> RestoreNodeArgs {
        RestoreNodeArgs {
            pod_name: pod.into(),
            data_dir: data_dir.to_path_buf(),
            snapshots: vec![snapshot.clone()],
            store: StoreSettings::default(),
        }
    }

    #[tokio::test]
    async fn the_init_step_places_a_verified_snapshot_only_into_an_empty_directory() {
        let root = scratch("place");
        let store = root.join("store");
        std::fs::create_dir_all(&store).unwrap();
        let rdb = b"REDIS0010\xfa\x09redis-ver\x067.0.15\xff\x01\x02\x03\x04\x05\x06\x07\x08".to_vec();
        std::fs::write(store.join("c-1.rdb"), &rdb).unwrap();
        let good = NodeSnapshot {
            ordinal: 0,
            sha256: hex::encode(Sha256::digest(&rdb)),
            location: store.join("c-1.rdb").display().to_string(),
        };

        let replica = root.join("replica");
        let outcome = restore_node(&args(&replica, "c-1", &good), None).await.unwrap();
        assert!(matches!(outcome, RestoreOutcome::Skipped(_)), "{outcome:?}");
        assert!(!replica.join(DUMP_FILE).exists());

        let wrong = NodeSnapshot {
            sha256: "0".repeat(64),
            ..good.clone()
        };
        let damaged = root.join("damaged");
        assert!(restore_node(&args(&damaged, "c-0", &wrong), None).await.is_err());
        assert_eq!(directory_names(&damaged).unwrap(), Vec::<String>::new());

        let primary = root.join("primary");
        let outcome = restore_node(&args(&primary, "c-0", &good), None).await.unwrap();
        assert_eq!(
            outcome,
            RestoreOutcome::Restored {
                size: rdb.len() as u64
            }
        );
        assert_eq!(std::fs::read(primary.join(DUMP_FILE)).unwrap(), rdb);

        // Data written since (here: anything else in dump.rdb) is never replaced.
        std::fs::write(primary.join(DUMP_FILE), b"REDIS-newer").unwrap();
        let outcome = restore_node(&args(&primary, "c-0", &good), None).await.unwrap();
        assert!(matches!(outcome, RestoreOutcome::Skipped(_)), "{outcome:?}");
        assert_eq!(std::fs::read(primary.join(DUMP_FILE)).unwrap(), b"REDIS-newer");
        std::fs::remove_dir_all(root).unwrap();
    }
}
