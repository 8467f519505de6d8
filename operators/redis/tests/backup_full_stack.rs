//! Backups and restore through the whole operator: `RedisBackup` resources on the real local
//! control plane, real `redis-server` processes behind the pods, and a real directory as the
//! destination. A new deployment restored from a backup runs the operator binary as its
//! data pods' restore step, as the pods would run the operator image.

use crate::support;

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, time::Duration};

use crate::support::{Setup, data_connection, ready, replication_spec};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use quorum_core::{crd::FilesystemDestination, naming::loopback_ip};
use quorum_e2e::wait;
use redis::AsyncCommands;
use redis_operator::crd::{
    BackupDestination, BackupPhase, RedisBackup, RedisBackupSpec, RedisCluster, RedisClusterSpec,
    RestoreSource,
};
use sha2::{Digest, Sha256};

fn node_address(namespace: &str, cluster: &str, ordinal: usize) -> SocketAddr {
    SocketAddr::new(loopback_ip(namespace, cluster, ordinal).into(), 6379)
}

/// Every key and its value (strings and hashes), as `address` holds them.
async fn contents(address: SocketAddr, password: &str) -> BTreeMap<String, String> {
    let mut connection = data_connection(address, password).await.unwrap();
    let keys: Vec<String> = connection.keys("*").await.unwrap();
    let mut contents = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .unwrap();
        let value = match kind.as_str() {
            "string" => connection.get(&key).await.unwrap(),
            "hash" => {
                let fields: BTreeMap<String, String> = connection.hgetall(&key).await.unwrap();
                format!("{fields:?}")
            }
            other => panic!("unexpected type {other} of {key}"),
        };
        contents.insert(key, value);
    }
    contents
}

fn filesystem(path: &std::path::Path) -> BackupDestination {
    BackupDestination {
        s3: None,
        filesystem: Some(FilesystemDestination {
            path: path.display().to_string(),
        }),
    }
}

fn restored_from(backup: &str, replicas: i32) -> RedisClusterSpec {
    RedisClusterSpec {
        restore_from: Some(RestoreSource {
            backup_name: backup.to_string(),
        }),
        ..replication_spec(replicas)
    }
}

async fn succeeded(backups: &Api<RedisBackup>, name: &str) -> RedisBackup {
    wait::until(
        &format!("backup {name} to succeed"),
        Duration::from_secs(120),
        || async {
            let backup = backups.get(name).await.map_err(|e| e.to_string())?;
            let status = backup.status.clone().unwrap_or_default();
            match status.run.phase {
                Some(BackupPhase::Succeeded) => Ok(backup),
                Some(BackupPhase::Failed) => panic!("backup {name} failed: {:?}", status.run.message),
                _ => Err(format!("{status:?}")),
            }
        },
    )
    .await
}

#[tokio::test]
async fn an_on_demand_backup_is_stored_verified_and_restores_a_new_deployment() {
    let setup = Setup::start("redis-backup").await;
    let ns = setup.ns().to_string();
    let destination = std::env::temp_dir().join(format!("quorum-redis-backups-{ns}"));
    let _ = std::fs::remove_dir_all(&destination);

    // (a) A deployment with data, and an on-demand backup of it.
    setup.create_ready("source", replication_spec(2), 3).await;
    let source_password = setup.password("source").await;
    let mut primary = data_connection(node_address(&ns, "source", 0), &source_password)
        .await
        .unwrap();
    for number in 0..500 {
        let _: () = primary
            .set(format!("key-{number}"), format!("value-{number}"))
            .await
            .unwrap();
    }
    for number in 0..20 {
        let _: () = primary
            .hset_multiple(format!("hash-{number}"), &[("a", number), ("b", number * 2)])
            .await
            .unwrap();
    }
    let acknowledged: usize = redis::cmd("WAIT")
        .arg(2)
        .arg(10_000)
        .query_async(&mut primary)
        .await
        .unwrap();
    assert_eq!(acknowledged, 2, "the replicas hold every write before the backup");
    let expected = contents(node_address(&ns, "source", 0), &source_password).await;
    assert_eq!(expected.len(), 520);

    let backups: Api<RedisBackup> = Api::namespaced(setup.client.clone(), &ns);
    backups
        .create(
            &PostParams::default(),
            &RedisBackup::new(
                "once",
                RedisBackupSpec {
                    backup: quorum_core::crd::BackupSpec {
                        cluster_name: "source".into(),
                        destination: filesystem(&destination),
                        schedule: None,
                        retain: None,
                        verify: false,
                    },
                },
            ),
        )
        .await
        .unwrap();
    let backup = succeeded(&backups, "once").await;
    let status = backup.status.unwrap();
    let snapshot = status.run.last_snapshot.expect("the snapshot is recorded");
    assert!(status.shards.is_empty(), "a replication deployment has no shards");
    let stored = std::fs::read(PathBuf::from(&snapshot.location)).expect("the stored object");
    assert!(
        snapshot.location.starts_with(&destination.display().to_string()),
        "{}",
        snapshot.location
    );
    assert!(stored.starts_with(b"REDIS"), "an RDB file");
    assert_eq!(snapshot.size_bytes, stored.len() as i64);
    assert_eq!(snapshot.sha256, hex::encode(Sha256::digest(&stored)));
    let stored_condition = status
        .run
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    assert_eq!(stored_condition.reason, "SnapshotStored");
    assert!(
        !stored_condition.message.contains("from source-0 "),
        "the primary is spared while replicas are linked: {}",
        stored_condition.message
    );
    let last_backup = wait::until("lastBackup on the cluster", Duration::from_secs(10), || async {
        let cluster = setup.clusters.get("source").await.map_err(|e| e.to_string())?;
        cluster
            .status
            .and_then(|s| s.last_backup)
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
    assert_eq!(last_backup.sha256, snapshot.sha256);

    // (b) A new deployment from that backup: its first primary loads the snapshot before it
    // starts, and its replica syncs from it.
    let restored_status = setup.create_ready("restored", restored_from("once", 1), 2).await;
    assert_eq!(restored_status.primary.as_deref(), Some("restored-0"));
    let recorded = restored_status.restore.expect("the restore is recorded");
    assert_eq!(recorded.backup_name, "once");
    assert_eq!(recorded.snapshots.len(), 1);
    assert_eq!(recorded.snapshots[0].sha256, snapshot.sha256);
    let restored_password = setup.password("restored").await;
    assert_eq!(
        contents(node_address(&ns, "restored", 0), &restored_password).await,
        expected,
        "the restored primary holds exactly the backed-up keys"
    );
    wait::until(
        "the replica to hold the restored keys",
        Duration::from_secs(30),
        || async {
            let held = contents(node_address(&ns, "restored", 1), &restored_password).await;
            if held == expected {
                Ok(())
            } else {
                Err(format!("{} of {} keys", held.len(), expected.len()))
            }
        },
    )
    .await;

    setup.stop().await;
    let _ = std::fs::remove_dir_all(&destination);
}

#[tokio::test]
async fn a_deployment_restored_from_a_missing_backup_waits_and_does_not_form() {
    let setup = Setup::start("redis-restore-wait").await;
    let ns = setup.ns().to_string();
    setup
        .clusters
        .create(
            &PostParams::default(),
            &RedisCluster::new("orphan", restored_from("missing", 1)),
        )
        .await
        .unwrap();
    let condition = wait::until(
        "the RestoreSourceNotReady condition",
        Duration::from_secs(30),
        || async {
            let cluster = setup.clusters.get("orphan").await.map_err(|e| e.to_string())?;
            cluster
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "RestoreSourceNotReady")
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    assert!(
        condition.message.contains("restoreFrom") && condition.message.contains("missing"),
        "{}",
        condition.message
    );
    // Several passes later, still no data node exists.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), &ns);
    assert!(
        statefulsets.get_opt("orphan").await.unwrap().is_none(),
        "a deployment waiting for its restore source formed anyway"
    );
    let cluster = setup.clusters.get("orphan").await.unwrap();
    assert!(cluster.status.unwrap_or_default().restore.is_none());
    setup.stop().await;
}

/// The primary serving `slot`, from the deployment's status.
fn owner(status: &redis_operator::crd::RedisClusterStatus, slot: u16) -> String {
    status
        .nodes
        .iter()
        .filter(|node| node.role == "Primary")
        .find(|node| {
            node.slots.iter().any(|range| {
                let (start, end) = range.split_once('-').unwrap_or((range, range));
                (start.parse::<u16>().unwrap()..=end.parse::<u16>().unwrap()).contains(&slot)
            })
        })
        .map(|node| node.name.clone())
        .unwrap_or_else(|| panic!("no primary serves slot {slot}: {status:?}"))
}

#[tokio::test]
async fn a_cluster_mode_backup_stores_one_snapshot_per_shard_and_restores_each_shard() {
    use redis_operator::admin::{cluster::key_slot, rebalance::initial_ranges};
    let setup = Setup::start("redis-shard-backup").await;
    let ns = setup.ns().to_string();
    let destination = std::env::temp_dir().join(format!("quorum-redis-backups-{ns}"));
    let _ = std::fs::remove_dir_all(&destination);
    // Formed with three shards and grown to four: the rebalance leaves a slot layout other than
    // the even split a new four-shard cluster forms with.
    setup
        .create_ready("sharded", support::cluster_spec(3, 1), 6)
        .await;
    setup
        .clusters
        .patch(
            "sharded",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"shards": 4}})),
        )
        .await
        .unwrap();
    setup
        .status_until(
            "sharded",
            "four shards, rebalanced",
            // A quarter of the slots move one at a time: about three minutes on a loaded
            // two-core machine (CI saw 180 s run out with the last of them moving).
            Duration::from_secs(300),
            |status| {
                (status.shards == 4 && status.rebalance.is_none())
                    .then_some(())
                    .ok_or_else(|| format!("{} shards, {:?}", status.shards, status.rebalance))
            },
        )
        .await;
    let status = ready(&setup.clusters, "sharded", 8).await;
    let password = setup.password("sharded").await;
    let nodes = |cluster: &str| redis_operator::resources::DataNodes::per_shard(cluster, 2);
    let pod_address = |cluster: &str, pod: &str| {
        let (statefulset, ordinal) = nodes(cluster).place(nodes(cluster).ordinal_of(pod).unwrap());
        SocketAddr::new(loopback_ip(&ns, &statefulset, ordinal).into(), 6379)
    };
    let mut written = BTreeMap::new();
    for number in 0..300 {
        let key = format!("key-{number}");
        let node = owner(&status, key_slot(key.as_bytes()));
        let mut connection = data_connection(pod_address("sharded", &node), &password)
            .await
            .unwrap();
        let _: () = connection.set(&key, number).await.unwrap();
        let _: usize = redis::cmd("WAIT")
            .arg(1)
            .arg(10_000)
            .query_async(&mut connection)
            .await
            .unwrap();
        written.insert(key, number.to_string());
    }

    let backups: Api<RedisBackup> = Api::namespaced(setup.client.clone(), &ns);
    backups
        .create(
            &PostParams::default(),
            &RedisBackup::new(
                "shards",
                RedisBackupSpec {
                    backup: quorum_core::crd::BackupSpec {
                        cluster_name: "sharded".into(),
                        destination: filesystem(&destination),
                        schedule: None,
                        retain: None,
                        verify: false,
                    },
                },
            ),
        )
        .await
        .unwrap();
    let backup = succeeded(&backups, "shards").await.status.unwrap();
    assert_eq!(backup.shards.len(), 4);
    let mut covered = 0;
    for (index, shard) in backup.shards.iter().enumerate() {
        assert_eq!(shard.shard, index as i32);
        let stored = std::fs::read(&shard.location).expect("the shard's object");
        assert_eq!(shard.sha256, hex::encode(Sha256::digest(&stored)));
        assert_eq!(shard.size_bytes, stored.len() as i64);
        assert!(
            nodes("sharded").ordinal_of(&shard.node).unwrap() / 2 == index,
            "{} is in shard {index}",
            shard.node
        );
        for range in &shard.slots {
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            covered += end.parse::<usize>().unwrap() - start.parse::<usize>().unwrap() + 1;
        }
    }
    assert_eq!(covered, 16384, "the shards' slots cover the key space");
    let even: Vec<Vec<String>> = initial_ranges(4).iter().map(|r| vec![r.to_string()]).collect();
    let recorded: Vec<Vec<String>> = backup.shards.iter().map(|s| s.slots.clone()).collect();
    assert_ne!(recorded, even, "the backup's layout is not the even split");
    assert_eq!(
        backup.run.last_snapshot.unwrap().sha256,
        backup.shards[0].sha256,
        "lastSnapshot is the first shard's"
    );

    // Each shard of a new deployment starts from its shard's snapshot.
    setup
        .clusters
        .create(
            &PostParams::default(),
            &RedisCluster::new(
                "copy",
                RedisClusterSpec {
                    restore_from: Some(RestoreSource {
                        backup_name: "shards".into(),
                    }),
                    ..support::cluster_spec(4, 1)
                },
            ),
        )
        .await
        .unwrap();
    let copy = ready(&setup.clusters, "copy", 8).await;
    let copy_password = setup.password("copy").await;
    for (key, value) in &written {
        let node = owner(&copy, key_slot(key.as_bytes()));
        let mut connection = data_connection(pod_address("copy", &node), &copy_password)
            .await
            .unwrap();
        let held: Option<String> = connection.get(key).await.unwrap();
        assert_eq!(held.as_ref(), Some(value), "{key} on {node}");
    }
    setup.stop().await;
    let _ = std::fs::remove_dir_all(&destination);
}

#[tokio::test]
async fn backup_stale_turns_true_without_a_recent_backup_and_false_with_one_and_the_metric_follows() {
    let setup = Setup::start("redis-stale").await;
    let ns = setup.ns().to_string();
    let destination = std::env::temp_dir().join(format!("quorum-redis-backups-{ns}"));
    let _ = std::fs::remove_dir_all(&destination);
    let spec = RedisClusterSpec {
        backup: Some(
            serde_json::from_value(quorum_e2e::backups::stale_after_a_minute(&destination)).unwrap(),
        ),
        ..replication_spec(1)
    };
    setup.create_ready("cache", spec, 2).await;
    quorum_e2e::backups::backup_stale_until::<RedisCluster>(
        &setup.client,
        &ns,
        "cache",
        "True",
        Duration::from_secs(180),
    )
    .await;

    let backups: Api<RedisBackup> = Api::namespaced(setup.client.clone(), &ns);
    backups
        .create(
            &PostParams::default(),
            &RedisBackup::new(
                "now",
                RedisBackupSpec {
                    backup: quorum_core::crd::BackupSpec {
                        cluster_name: "cache".into(),
                        destination: filesystem(&destination),
                        schedule: None,
                        retain: None,
                        verify: false,
                    },
                },
            ),
        )
        .await
        .unwrap();
    let stored = succeeded(&backups, "now").await;
    let completed_at = stored.status.unwrap().run.completed_at.unwrap().0;
    quorum_e2e::backups::backup_stale_until::<RedisCluster>(
        &setup.client,
        &ns,
        "cache",
        "False",
        Duration::from_secs(60),
    )
    .await;
    quorum_e2e::backups::assert_last_success(
        &setup.operator.context.metrics.render(),
        "redis",
        &ns,
        "cache",
        completed_at,
    );
    setup.stop().await;
}
