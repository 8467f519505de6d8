//! Restoring a new cluster from a `MySQLBackup`, through the whole operator: the real local
//! control plane, KWOK pods, and a real MariaDB server behind every member pod.

use crate::support;

use std::time::Duration;

use crate::support::{
    app_connection, binary_logs_after_rotation, converges, insert_items, item_ids, ready, session, setup,
};
use k8s_openapi::{api::core::v1::Event, apimachinery::pkg::apis::meta::v1::Condition};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use mysql_async::prelude::Queryable;
use mysql_operator::{
    admin::gtid::GtidPosition,
    crd::{
        BackupPhase, Flavor, MySQLBackup, MySQLBackupStatus, MySQLCluster, MySQLClusterStatus,
        MySqlRestoreSource,
    },
};
use quorum_core::backup::restore_retry;
use quorum_e2e::wait;

fn condition<'a>(status: &'a MySQLClusterStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// What the primary at `ip` has executed, as its binary log says.
async fn binlog_position(ip: std::net::Ipv4Addr) -> GtidPosition {
    let mut conn = app_connection(ip).await.expect("app connection");
    let text: Option<String> = conn
        .query_first("SELECT @@GLOBAL.gtid_binlog_pos")
        .await
        .expect("gtid_binlog_pos");
    GtidPosition::parse(Flavor::MariaDB, &text.unwrap_or_default()).expect("a MariaDB position")
}

/// How many times a `Restored` event was published: repeats of one event are folded into
/// its series.
async fn restores_published(setup: &support::Setup) -> i32 {
    let events: Api<Event> = Api::namespaced(setup.client.clone(), setup.ns());
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Restored"))
        .map(|e| {
            e.series
                .as_ref()
                .and_then(|series| series.count)
                .unwrap_or(1)
                .max(1)
        })
        .sum()
}

#[tokio::test]
async fn a_cluster_restored_from_a_backup_waits_for_it_then_holds_its_rows_and_continues_its_history() {
    let setup = setup("mysql-restore").await;
    setup.create(2).await;
    ready(&setup.clusters, "main", 1).await;
    insert_items(setup.ip(0), 0..100).await;
    let rows: Vec<u64> = (0..100).collect();

    // A cluster to restore from a backup that does not exist yet: its members start, but no
    // primary is opened, and it says what it waits for.
    let mut spec = support::cluster_spec(3);
    spec.restore_from = Some(MySqlRestoreSource::newest("nightly"));
    setup
        .clusters
        .create(&PostParams::default(), &MySQLCluster::new("copy", spec))
        .await
        .expect("create the cluster to restore");
    let waiting = wait::until(
        "copy waits for its backup with every member up",
        Duration::from_secs(120),
        || async {
            let status = setup
                .clusters
                .get("copy")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let waits =
                condition(&status, "Progressing").is_some_and(|c| c.reason == "RestoreSourceNotReady");
            let members_up =
                status.members.len() == 3 && status.members.iter().all(|m| m.health == "Healthy");
            if waits && members_up {
                Ok(status)
            } else {
                Err(format!("{:?} {:?}", status.members, status.conditions))
            }
        },
    )
    .await;
    for type_ in ["Progressing", "Restored"] {
        let waits = condition(&waiting, type_).unwrap();
        assert_eq!(
            (waits.status.as_str(), waits.reason.as_str()),
            (
                if type_ == "Restored" { "False" } else { "True" },
                "RestoreSourceNotReady"
            ),
            "{type_}"
        );
        assert_eq!(waits.message, "MySQLBackup nightly does not exist", "{type_}");
    }
    assert!(
        setup
            .events("RestoreSourceNotReady")
            .await
            .iter()
            .any(|m| m.contains("MySQLBackup nightly")),
        "an event says what the cluster waits for"
    );
    // It stays so, every member up and empty, none opened.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let still = setup.clusters.get("copy").await.unwrap().status.unwrap();
    assert_eq!(still.primary, None);
    assert_eq!(condition(&still, "Ready").unwrap().status, "False");
    assert!(
        still.members.iter().all(|m| m.gtid.as_deref() == Some("")),
        "{:?}",
        still.members
    );
    assert!(
        app_connection(setup.ip_of("copy", 0)).await.is_err(),
        "no account, no data yet"
    );

    // The backup is taken; the cluster restores it into its first member, opens it, and copies
    // the other members from it.
    let directory = std::env::temp_dir().join(format!("quorum-mysql-backups-{}", setup.ns()));
    let taken = setup.backup_now("nightly", &directory).await;
    let backup_position =
        GtidPosition::parse(Flavor::MariaDB, taken.gtid_position.as_deref().unwrap()).unwrap();
    assert!(!backup_position.is_empty());
    let snapshot = taken.run.last_snapshot.unwrap();

    let status = ready(&setup.clusters, "copy", 2).await;
    assert_eq!(status.primary.as_deref(), Some("copy-0"));
    let record = status.restored_from.clone().expect("the restore is recorded");
    assert_eq!(record.backup_name, "nightly");
    assert_eq!(record.member, "copy-0");
    assert_eq!(record.sha256, snapshot.sha256);
    assert_eq!(record.location, snapshot.location);
    assert_eq!(
        GtidPosition::parse(Flavor::MariaDB, &record.gtid_position).unwrap(),
        backup_position
    );
    let restored = condition(&status, "Restored").unwrap();
    assert_eq!(
        (restored.status.as_str(), restored.reason.as_str()),
        ("True", "Restored")
    );
    assert!(
        restored.message.contains("MySQLBackup nightly"),
        "{}",
        restored.message
    );
    let events = setup.events("Restored").await;
    assert!(
        events
            .iter()
            .any(|m| m.contains("MySQLBackup nightly") && m.contains("copy-0")),
        "{events:?}"
    );
    assert_eq!(restores_published(&setup).await, 1, "restored once");
    assert!(
        setup
            .events("SeedingMember")
            .await
            .iter()
            .any(|m| m.contains("copy-1")),
        "the replicas were copied from the restored primary"
    );

    // Every row of the backup on the primary and on both replicas; the primary's history
    // continues from the backup's position.
    for ordinal in 0..3 {
        converges(setup.ip_of("copy", ordinal), &rows).await;
    }
    let restored_position = binlog_position(setup.ip_of("copy", 0)).await;
    assert!(
        restored_position.includes(&backup_position),
        "{restored_position} includes {backup_position}"
    );

    // It takes writes, which replicate, and which extend that history.
    insert_items(setup.ip_of("copy", 0), 1_000..1_010).await;
    let mut written = rows.clone();
    written.extend(1_000..1_010);
    for ordinal in 0..3 {
        converges(setup.ip_of("copy", ordinal), &written).await;
    }
    let after_writes = binlog_position(setup.ip_of("copy", 0)).await;
    assert!(
        after_writes.includes(&restored_position) && after_writes != restored_position,
        "{after_writes} after {restored_position}"
    );
    // The source cluster is untouched.
    assert_eq!(item_ids(setup.ip(0)).await.unwrap(), rows);

    // A restarted operator, which remembers nothing, does not restore again: the rows written
    // since are still there, and the record is the same.
    let setup = setup.restart_operator().await;
    ready(&setup.clusters, "copy", 2).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = ready(&setup.clusters, "copy", 2).await;
    assert_eq!(status.restored_from.as_ref(), Some(&record));
    assert_eq!(restores_published(&setup).await, 1, "not restored again");
    assert_eq!(item_ids(setup.ip_of("copy", 0)).await.unwrap(), written);
    assert!(
        binlog_position(setup.ip_of("copy", 0))
            .await
            .includes(&after_writes)
    );

    // The backup becomes a schedule keeping one run: its next run's retention must keep the
    // object the copy was restored from, which only the copy's status still points at.
    let backups: Api<MySQLBackup> = Api::namespaced(setup.client.clone(), setup.ns());
    backups
        .patch(
            "nightly",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"schedule": "* * * * *", "retain": 1}})),
        )
        .await
        .expect("schedule the backup");
    let next = wait::until("the scheduled run", Duration::from_secs(100), || async {
        let run = backups
            .get("nightly")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default()
            .run;
        match (run.phase, run.last_snapshot) {
            (Some(BackupPhase::Failed), _) => panic!("the scheduled run failed: {:?}", run.message),
            (Some(BackupPhase::Pending), Some(newest)) if newest.location != record.location => {
                Ok((newest, run.last_pruned))
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (newest, pruned) = next;
    assert_eq!(pruned, None, "nothing of its own is unreferenced yet");
    assert!(
        std::path::Path::new(&record.location).exists(),
        "the restored-from object is kept"
    );
    assert!(std::path::Path::new(&newest.location).exists());
    setup.finish().await;
}

/// The server's clock at `ip`, in whole seconds since the epoch.
async fn server_second(ip: std::net::Ipv4Addr) -> i64 {
    let mut conn = app_connection(ip).await.expect("app connection");
    let second: Option<i64> = conn
        .query_first("SELECT UNIX_TIMESTAMP()")
        .await
        .expect("UNIX_TIMESTAMP()");
    second.expect("a time")
}

/// The status of the backup `nightly`.
async fn nightly_status(backups: &Api<MySQLBackup>) -> Result<MySQLBackupStatus, String> {
    let backup = backups.get("nightly").await.map_err(|e| e.to_string())?;
    Ok(backup.status.unwrap_or_default())
}

/// Creates a cluster `name` of one member restored from `nightly` to `point`.
async fn restore_to(
    setup: &support::Setup,
    name: &str,
    point: serde_json::Value,
) -> Result<MySQLCluster, kube::Error> {
    let mut spec = serde_json::to_value(support::cluster_spec(1)).unwrap();
    spec["restoreFrom"] = serde_json::json!({"backupName": "nightly", "pointInTime": point});
    let cluster: MySQLCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "mysql.quorum.dev/v1alpha1",
        "kind": "MySQLCluster",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    setup.clusters.create(&PostParams::default(), &cluster).await
}

#[tokio::test]
async fn a_cluster_restored_to_a_point_in_time_holds_exactly_the_transactions_up_to_it() {
    let setup = setup("mysql-pitr").await;
    setup.create(2).await;
    ready(&setup.clusters, "main", 1).await;
    insert_items(setup.ip(0), 0..50).await;

    // A schedule every minute that archives the binary log with each snapshot.
    let directory = std::env::temp_dir().join(format!("quorum-mysql-backups-{}", setup.ns()));
    let backups: Api<MySQLBackup> = Api::namespaced(setup.client.clone(), setup.ns());
    let backup: MySQLBackup = serde_json::from_value(serde_json::json!({
        "apiVersion": "mysql.quorum.dev/v1alpha1",
        "kind": "MySQLBackup",
        "metadata": {"name": "nightly"},
        "spec": {"clusterName": "main", "schedule": "* * * * *", "retain": 3, "archiveBinlogs": true,
                 "destination": {"filesystem": {"path": directory}}}
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .expect("create the backup");
    let runs = |count: usize| {
        let backups = backups.clone();
        async move {
            wait::until(
                &format!("{count} archived runs"),
                Duration::from_secs(150),
                || async {
                    let status = nightly_status(&backups).await?;
                    if status.run.phase == Some(BackupPhase::Failed) {
                        panic!("a run failed: {:?}", status.run.message);
                    }
                    if status.recovery_runs.len() >= count {
                        Ok(status)
                    } else {
                        Err(format!("{:?} {:?}", status.run.phase, status.recovery_runs))
                    }
                },
            )
            .await
        }
    };
    runs(1).await;

    // Rows, the noted point, then more rows; the next run archives them all.
    insert_items(setup.ip(0), 50..80).await;
    let point = server_second(setup.ip(0)).await;
    let at_point = binlog_position(setup.ip(0)).await;
    wait::until(
        "the primary's clock past the point",
        Duration::from_secs(5),
        || async {
            let now = server_second(setup.ip(0)).await;
            if now > point { Ok(()) } else { Err(now.to_string()) }
        },
    )
    .await;
    insert_items(setup.ip(0), 80..100).await;
    let status = runs(2).await;
    let until = status.recoverable_until.as_ref().expect("a recoverable window").0;
    let from = status.recoverable_from.as_ref().expect("a recoverable window").0;
    assert!(
        from.as_second() <= point && point <= until.as_second(),
        "{from} <= {point} <= {until}"
    );
    let [first, second] = &status.recovery_runs[..] else {
        panic!("two runs: {:?}", status.recovery_runs)
    };
    assert_eq!(
        second.binlog_after, first.binlog_through,
        "the archive is unbroken"
    );
    for run in &status.recovery_runs {
        assert!(
            std::path::Path::new(&run.binlog.location).exists(),
            "{}",
            run.binlog.location
        );
    }

    // To the noted second: the first run's snapshot, then both runs' binary logs up to it.
    let time = jiff::Timestamp::from_second(point).unwrap().to_string();
    restore_to(&setup, "at-time", serde_json::json!({"time": time}))
        .await
        .expect("create at-time");
    // To the noted GTID position.
    restore_to(
        &setup,
        "at-gtid",
        serde_json::json!({"gtid": at_point.to_string()}),
    )
    .await
    .expect("create at-gtid");
    let noted: Vec<u64> = (0..80).collect();
    for name in ["at-time", "at-gtid"] {
        let status = ready(&setup.clusters, name, 0).await;
        let record = status.restored_from.expect("the restore is recorded");
        assert_eq!(record.location, first.snapshot.location, "{name}");
        assert_eq!(record.binlogs_replayed, Some(2), "{name}");
        assert_eq!(item_ids(setup.ip_of(name, 0)).await.unwrap(), noted, "{name}");
        // Its history continues from the point (the operator's own accounts come after it).
        let position = binlog_position(setup.ip_of(name, 0)).await;
        assert!(
            position.includes(&at_point),
            "{name}: {position} includes {at_point}"
        );
    }

    // A point before the oldest kept snapshot waits, saying what can be restored; no primary
    // is opened and the source cluster is untouched.
    restore_to(
        &setup,
        "too-early",
        serde_json::json!({"time": "2001-01-01T00:00:00Z"}),
    )
    .await
    .expect("create too-early");
    let waiting = wait::until(
        "too-early to say why it waits",
        Duration::from_secs(60),
        || async {
            let status = setup
                .clusters
                .get("too-early")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            match condition(&status, "Restored") {
                Some(c) if c.reason == "RestoreSourceNotReady" => Ok(status),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let message = &condition(&waiting, "Restored").unwrap().message;
    assert!(
        message.contains("restoreFrom.pointInTime is before the oldest kept snapshot")
            && message.contains("the backup can restore to times from"),
        "{message}"
    );
    assert_eq!(waiting.primary, None);
    let all: Vec<u64> = (0..100).collect();
    assert_eq!(item_ids(setup.ip(0)).await.unwrap(), all);

    // Both a time and a position: refused by the schema, naming the field.
    let both = restore_to(
        &setup,
        "both",
        serde_json::json!({"time": time, "gtid": at_point.to_string()}),
    )
    .await
    .unwrap_err();
    assert!(
        both.to_string()
            .contains("restoreFrom.pointInTime takes exactly one of time and gtid"),
        "{both}"
    );

    // A piece of archived binary log altered in the store: the restore fails saying why, and
    // is tried again only after a wait that doubles with each failure in a row, rather than
    // read the whole backup again on every pass.
    let piece = &second.binlog.location;
    let mut bytes = std::fs::read(piece).expect("the stored piece");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(piece, bytes).expect("alter the stored piece");
    restore_to(&setup, "altered", serde_json::json!({"time": time}))
        .await
        .expect("create altered");
    let failures = |after: u32| {
        let clusters = setup.clusters.clone();
        async move {
            wait::until(
                &format!("altered's restore to fail more than {after} times"),
                Duration::from_secs(120),
                || async {
                    let status = clusters
                        .get("altered")
                        .await
                        .map_err(|e| e.to_string())?
                        .status
                        .unwrap_or_default();
                    match (&status.restore_failures, condition(&status, "Progressing")) {
                        (Some(failures), Some(waiting)) if failures.attempts > after => {
                            Ok((failures.clone(), waiting.clone()))
                        }
                        (failures, waiting) => Err(format!("{failures:?} {waiting:?}")),
                    }
                },
            )
            .await
        }
    };
    let (first_failure, waiting) = failures(0).await;
    assert_eq!(waiting.reason, "StepFailed");
    assert!(
        waiting
            .message
            .contains(second.binlog.location.rsplit('/').next().unwrap())
            && waiting.message.contains("the next attempt is not before"),
        "{}",
        waiting.message
    );
    let (next_failure, _) = failures(first_failure.attempts).await;
    assert!(
        next_failure.last_failed_at.0 >= first_failure.next_attempt_at.0,
        "{next_failure:?} after {first_failure:?}"
    );
    assert_eq!(
        next_failure.next_attempt_at.0,
        next_failure.last_failed_at.0 + restore_retry::wait_after(next_failure.attempts)
    );
    let altered = setup.clusters.get("altered").await.unwrap().status.unwrap();
    assert_eq!((altered.primary, altered.restored_from), (None, None));
    // Given up by deleting it: the runs its restore held are the backup's to prune again.
    setup
        .clusters
        .delete("altered", &Default::default())
        .await
        .expect("delete altered");
    wait::until("altered gone", Duration::from_secs(60), || async {
        match setup.clusters.get_opt("altered").await {
            Ok(None) => Ok(()),
            other => Err(format!(
                "{:?}",
                other.map(|found| found.map(|c| c.metadata.deletion_timestamp))
            )),
        }
    })
    .await;

    // Retention keeps one run: its snapshot and its binary log together; of the older runs'
    // objects only the snapshot the restored clusters point at stays.
    backups
        .patch(
            "nightly",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"retain": 1}})),
        )
        .await
        .expect("keep one run");
    let pruned = wait::until("a run pruned to one", Duration::from_secs(150), || async {
        let status = nightly_status(&backups).await?;
        match (&status.run.last_pruned, &status.recovery_runs[..]) {
            (Some(_), [newest]) if newest.snapshot.location != second.snapshot.location => Ok(status),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let newest = &pruned.recovery_runs[0];
    for kept in [
        &newest.snapshot.location,
        &newest.binlog.location,
        &first.snapshot.location,
    ] {
        assert!(std::path::Path::new(kept).exists(), "{kept} is kept");
    }
    for deleted in [
        &first.binlog.location,
        &second.snapshot.location,
        &second.binlog.location,
    ] {
        assert!(!std::path::Path::new(deleted).exists(), "{deleted} is pruned");
    }

    // Every member's binary log purged past what the archive holds (as an expiry shorter than
    // the schedule would): the next run cannot continue the archive, so it restarts it at its
    // own snapshot and a warning names the points no longer restorable.
    insert_items(setup.ip(0), 100..110).await;
    let root_password = setup.root_password().await;
    for ordinal in 0..2 {
        let ip = setup.ip(ordinal);
        wait::until(
            &format!("member {ordinal}'s binary logs purged but the active one"),
            Duration::from_secs(30),
            || async {
                let mut root = session(ip, "root", &root_password).await;
                let logs = binary_logs_after_rotation(&mut root).await;
                let active = logs.last().expect("an active binary log");
                // A log a replica still reads is kept; the next attempt purges it.
                let _ = root.query_drop(format!("PURGE BINARY LOGS TO '{active}'")).await;
                let left: Vec<mysql_async::Row> =
                    root.query("SHOW BINARY LOGS").await.map_err(|e| e.to_string())?;
                if left.len() == 1 {
                    Ok(())
                } else {
                    Err(format!("{} logs left", left.len()))
                }
            },
        )
        .await;
    }
    let broken = wait::until(
        "a run that restarts the archive",
        Duration::from_secs(150),
        || async {
            let status = nightly_status(&backups).await?;
            let warned = setup.events("ArchiveBroken").await;
            match (&status.recovery_runs[..], &warned[..]) {
                ([.., run], [warning]) if run.snapshot.location != newest.snapshot.location => {
                    Ok((run.clone(), warning.clone()))
                }
                (runs, warned) => Err(format!("{} runs, warnings {warned:?}", runs.len())),
            }
        },
    )
    .await;
    let (restarted, warning) = broken;
    assert_ne!(
        restarted.binlog_after, newest.binlog_through,
        "the archive restarted"
    );
    assert_eq!(
        restarted.binlog_after, restarted.snapshot_position,
        "at the run's own snapshot"
    );
    assert!(
        warning.contains("restarts at this run's snapshot")
            && warning.contains(&format!("the previous run's ended at {}", newest.binlog_through)),
        "{warning}"
    );
    setup.finish().await;
}
