//! Backups and restore through the whole operator: `MongoDBBackup` resources on the real local
//! control plane, replica-set simulator members behind the pods (the real driver on the wire),
//! and a real directory as the destination. A set created with `restoreFrom` loads the
//! snapshot into its first member before the others join, and they copy it from there.

use std::{collections::BTreeMap, path::Path, time::Duration};

use crate::support::{Setup, insert_orders, spec};
use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use kube::{Api, api::PostParams};
use mongodb::options::WriteConcern;
use mongodb_operator::{
    archive::SYSTEM_DATABASES,
    crd::{
        BackupDestination, BackupPhase, MongoDBBackup, MongoDBBackupSpec, MongoDBBackupStatus,
        MongoDBReplicaSet, MongoDBReplicaSetSpec, MongoDBReplicaSetStatus, MongoRestoreSource,
    },
};
use quorum_core::{backup::restore_retry, crd::FilesystemDestination};
use quorum_e2e::wait;
use sha2::{Digest, Sha256};

/// Every document of every collection of every user database, by `db.collection`, in `_id`
/// order.
type Contents = BTreeMap<String, Vec<Document>>;

async fn contents(client: &mongodb::Client) -> Result<Contents, String> {
    let mut contents = Contents::new();
    let databases = client
        .list_database_names()
        .await
        .map_err(|e| format!("listing databases: {e}"))?;
    for database in databases
        .iter()
        .filter(|name| !SYSTEM_DATABASES.contains(&name.as_str()))
    {
        let db = client.database(database);
        let collections = db
            .list_collection_names()
            .await
            .map_err(|e| format!("listing the collections of {database}: {e}"))?;
        for collection in collections.iter().filter(|name| !name.starts_with("system.")) {
            let documents: Vec<Document> = db
                .collection::<Document>(collection)
                .find(doc! {})
                .sort(doc! { "_id": 1 })
                .await
                .map_err(|e| format!("reading {database}.{collection}: {e}"))?
                .try_collect()
                .await
                .map_err(|e| format!("reading {database}.{collection}: {e}"))?;
            contents.insert(format!("{database}.{collection}"), documents);
        }
    }
    Ok(contents)
}

/// A connection to one member alone, reading what that member holds whatever its role.
async fn member(setup: &Setup, name: &str, ordinal: usize) -> mongodb::Client {
    setup.member_client(name, ordinal).await
}

/// Waits until member `ordinal` of set `name` holds exactly `expected`.
async fn holds(setup: &Setup, name: &str, ordinal: usize, expected: &Contents) {
    let client = member(setup, name, ordinal).await;
    wait::until(
        &format!("{name}-{ordinal} to hold every document"),
        Duration::from_secs(60),
        || async {
            let held = contents(&client).await?;
            if held == *expected {
                Ok(())
            } else {
                let counts: BTreeMap<&String, usize> = held.iter().map(|(k, v)| (k, v.len())).collect();
                Err(format!("holds {counts:?}"))
            }
        },
    )
    .await;
}

/// Documents in two databases, with nested values, several BSON types and a unique index,
/// acknowledged by every member so any secondary's snapshot holds them all.
async fn write_documents(application: &mongodb::Client) -> Contents {
    insert_orders(application, 0, 250).await;
    let customers = application.database("crm").collection::<Document>("customers");
    customers
        .insert_many((0..40).map(|number| {
            doc! {
                "_id": format!("customer-{number:03}"),
                "email": format!("c{number}@example.com"),
                "address": { "city": "Lyon", "zip": 69000 + number },
                "tags": ["new", format!("cohort-{}", number % 4)],
                "balance": f64::from(number) * 1.5,
                "vip": number % 7 == 0,
                "since": bson::DateTime::from_millis(1_700_000_000_000 + i64::from(number)),
                "notes": Bson::Null,
            }
        }))
        .write_concern(WriteConcern::nodes(3))
        .await
        .expect("inserting customers");
    customers
        .create_index(
            mongodb::IndexModel::builder()
                .keys(doc! { "email": 1 })
                .options(
                    mongodb::options::IndexOptions::builder()
                        .unique(true)
                        .name("email_unique".to_string())
                        .build(),
                )
                .build(),
        )
        .await
        .expect("creating an index");
    let expected = contents(application).await.expect("reading what was written");
    assert_eq!(
        expected.keys().collect::<Vec<_>>(),
        ["crm.customers", "shop.orders"]
    );
    expected
}

fn filesystem(path: &Path) -> BackupDestination {
    BackupDestination {
        s3: None,
        filesystem: Some(FilesystemDestination {
            path: path.display().to_string(),
        }),
    }
}

async fn create_backup(setup: &Setup, name: &str, cluster: &str, destination: &Path) {
    let backups: Api<MongoDBBackup> = Api::namespaced(setup.client.clone(), setup.ns());
    backups
        .create(
            &PostParams::default(),
            &MongoDBBackup::new(
                name,
                MongoDBBackupSpec {
                    backup: quorum_core::crd::BackupSpec {
                        cluster_name: cluster.into(),
                        destination: filesystem(destination),
                        schedule: None,
                        retain: None,
                        verify: false,
                    },
                    archive_oplog: false,
                },
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("creating MongoDBBackup {name}: {e}"));
}

async fn succeeded(setup: &Setup, name: &str) -> MongoDBBackupStatus {
    let backups: Api<MongoDBBackup> = Api::namespaced(setup.client.clone(), setup.ns());
    wait::until(
        &format!("backup {name} to succeed"),
        Duration::from_secs(90),
        || async {
            let status = backups
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            match status.run.phase {
                Some(BackupPhase::Succeeded) => Ok(status),
                Some(BackupPhase::Failed) => panic!("backup {name} failed: {:?}", status.run.message),
                _ => Err(format!("{status:?}")),
            }
        },
    )
    .await
}

fn restored_from(backup: &str) -> MongoDBReplicaSetSpec {
    MongoDBReplicaSetSpec {
        restore_from: Some(MongoRestoreSource::newest(backup.to_string())),
        ..spec(3)
    }
}

fn condition(status: &MongoDBReplicaSetStatus, type_: &str) -> Option<(String, String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// What the set's first member holds, and the configuration it reports.
async fn first_member(setup: &Setup, name: &str) -> (Vec<String>, usize) {
    let admin = setup.admin(name, 0).await;
    let config = admin
        .config()
        .await
        .expect("the first member's configuration")
        .expect("the first member is initiated");
    let databases = admin
        .client()
        .list_database_names()
        .await
        .expect("listing databases")
        .into_iter()
        .filter(|name| !SYSTEM_DATABASES.contains(&name.as_str()))
        .collect();
    (databases, config.members.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_on_demand_backup_read_from_a_secondary_restores_a_new_set_exactly() {
    let setup = Setup::start("mongodb-backup").await;
    let destination = std::env::temp_dir().join(format!("quorum-mongodb-backups-{}", setup.ns()));
    let _ = std::fs::remove_dir_all(&destination);

    // (1) A set with data, and an on-demand backup of it.
    let source = setup.create_ready("source", spec(3), 3).await;
    let primary = source.primary.clone().expect("a primary");
    let application = setup.application("source", 3).await;
    let expected = write_documents(&application).await;
    let documents: usize = expected.values().map(Vec::len).sum();

    create_backup(&setup, "once", "source", &destination).await;
    let status = succeeded(&setup, "once").await;
    let snapshot = status
        .run
        .last_snapshot
        .clone()
        .expect("the snapshot is recorded");
    assert_eq!(snapshot.name, "once");
    assert!(
        snapshot
            .location
            .starts_with(&std::fs::canonicalize(&destination).unwrap().display().to_string()),
        "{}",
        snapshot.location
    );
    let stored = std::fs::read(&snapshot.location).expect("the stored object");
    assert!(snapshot.size_bytes > 0);
    assert_eq!(snapshot.size_bytes, stored.len() as i64);
    assert_eq!(snapshot.sha256, hex::encode(Sha256::digest(&stored)));
    let read_from = status.read_from.clone().expect("readFrom");
    assert!(
        read_from != primary && read_from.starts_with("source-"),
        "read from {read_from}, the primary being {primary}"
    );
    let cluster_time = status.cluster_time.clone().expect("clusterTime");
    let (seconds, increment) = cluster_time.split_once('.').expect("seconds.increment");
    assert!(
        seconds.parse::<u32>().unwrap() > 0 && increment.parse::<u32>().is_ok(),
        "{cluster_time}"
    );
    assert_eq!(status.databases, Some(2));
    assert_eq!(status.documents, Some(documents as i64));
    let ready = status
        .run
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "SnapshotStored")
    );
    let last_backup = setup
        .status_until(
            "source",
            "lastBackup on the set",
            Duration::from_secs(10),
            |status| status.last_backup.ok_or_else(|| "not yet".to_string()),
        )
        .await;
    assert_eq!(last_backup, snapshot);

    // (2) A new set from that backup: loaded into its first member, copied by the others.
    let copy = setup.create_ready("copy", restored_from("once"), 3).await;
    assert_eq!(copy.restored_from.as_ref(), Some(&snapshot));
    let (_, _, message) = condition(&copy, "Ready").unwrap();
    assert!(message.contains("every member serves"), "{message}");
    let copied = setup.application("copy", 3).await;
    assert_eq!(
        contents(&copied).await.unwrap(),
        expected,
        "the restored set holds exactly the backed-up documents"
    );
    let indexes = copied
        .database("crm")
        .collection::<Document>("customers")
        .list_index_names()
        .await
        .unwrap();
    assert!(indexes.contains(&"email_unique".to_string()), "{indexes:?}");
    // Every member holds it, the secondaries by their own copy: they joined after the restore
    // (a set with more than one member refuses to be restored into).
    for ordinal in 0..3 {
        holds(&setup, "copy", ordinal, &expected).await;
    }
    let events = setup.events("copy").await;
    let first = |reason: &str| {
        events
            .iter()
            .filter(|event| event.reason.as_deref() == Some(reason))
            .filter_map(|event| event.event_time.as_ref().map(|time| time.0))
            .min()
            .unwrap_or_else(|| panic!("no {reason} event"))
    };
    assert!(
        first("Restored") <= first("MemberAdded"),
        "the restore came before any member joined"
    );

    setup.stop().await;
    let _ = std::fs::remove_dir_all(&destination);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_set_restored_from_a_backup_not_taken_yet_waits_alone_then_restores_it() {
    let setup = Setup::start("mongodb-restore-wait").await;
    let destination = std::env::temp_dir().join(format!("quorum-mongodb-backups-{}", setup.ns()));
    let _ = std::fs::remove_dir_all(&destination);
    setup.create_ready("source", spec(3), 3).await;
    let application = setup.application("source", 3).await;
    let expected = write_documents(&application).await;

    setup
        .sets
        .create(
            &PostParams::default(),
            &MongoDBReplicaSet::new("waiting", restored_from("later")),
        )
        .await
        .unwrap();
    let waiting = setup
        .status_until(
            "waiting",
            "the restore waiting for its source",
            Duration::from_secs(60),
            |status| match (condition(&status, "Progressing"), condition(&status, "Ready")) {
                (Some((progressing, reason, _)), Some((ready, _, _)))
                    if progressing == "True" && reason == "RestoreSourceNotReady" && ready == "False" =>
                {
                    Ok(status)
                }
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    let (_, _, message) = condition(&waiting, "Progressing").unwrap();
    assert!(
        message.contains("later") && message.contains("does not exist"),
        "{message}"
    );
    // Several passes later it still waits, alone and empty.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let still = setup
        .sets
        .get("waiting")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    let (progressing, reason, _) = condition(&still, "Progressing").unwrap();
    assert_eq!(
        (progressing.as_str(), reason.as_str()),
        ("True", "RestoreSourceNotReady")
    );
    assert_eq!(condition(&still, "Ready").unwrap().0, "False");
    assert!(still.restored_from.is_none());
    let (databases, members) = first_member(&setup, "waiting").await;
    assert_eq!(members, 1, "no member joins before the restore");
    assert!(databases.is_empty(), "nothing restored: {databases:?}");
    let reasons: Vec<String> = setup.event_reasons("waiting").await;
    assert!(
        !reasons.iter().any(|r| r == "MemberAdded" || r == "Restored"),
        "{reasons:?}"
    );

    // The backup it names appears and completes; the set then restores it and forms.
    create_backup(&setup, "later", "source", &destination).await;
    let backup = succeeded(&setup, "later").await;
    let restored = setup.ready("waiting", 3).await;
    assert_eq!(restored.restored_from, backup.run.last_snapshot);
    assert_eq!(
        contents(&setup.application("waiting", 3).await).await.unwrap(),
        expected
    );

    setup.stop().await;
    let _ = std::fs::remove_dir_all(&destination);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backup_stale_turns_true_without_a_recent_backup_and_false_with_one_and_the_metric_follows() {
    let setup = Setup::start("mongodb-stale").await;
    let ns = setup.ns().to_string();
    let destination = std::env::temp_dir().join(format!("quorum-mongodb-backups-{ns}"));
    let _ = std::fs::remove_dir_all(&destination);
    let stale_policy = quorum_e2e::backups::stale_after_a_minute(&destination);
    let set = MongoDBReplicaSetSpec {
        backup: Some(serde_json::from_value(stale_policy).unwrap()),
        ..spec(1)
    };
    setup.create_ready("solo", set, 1).await;
    quorum_e2e::backups::backup_stale_until::<MongoDBReplicaSet>(
        &setup.client,
        &ns,
        "solo",
        "True",
        Duration::from_secs(180),
    )
    .await;

    create_backup(&setup, "now", "solo", &destination).await;
    let completed_at = succeeded(&setup, "now").await.run.completed_at.unwrap().0;
    quorum_e2e::backups::backup_stale_until::<MongoDBReplicaSet>(
        &setup.client,
        &ns,
        "solo",
        "False",
        Duration::from_secs(60),
    )
    .await;
    quorum_e2e::backups::assert_last_success(
        &setup.operator.context.metrics.render(),
        "mongodb",
        &ns,
        "solo",
        completed_at,
    );
}

/// The current second, once the next began: a write made after this returns has a later
/// oplog second (the members run on this machine's clock).
async fn a_second_boundary() -> i64 {
    let noted = jiff::Timestamp::now().as_second();
    wait::until("the next second", Duration::from_secs(3), || async {
        let now = jiff::Timestamp::now().as_second();
        if now > noted {
            Ok(())
        } else {
            Err(format!("still {noted}"))
        }
    })
    .await;
    noted
}

/// `nightly`: a backup of `source` every minute into `directory`, archiving the oplog with each
/// snapshot and keeping `retain` runs.
async fn scheduled_with_oplog(setup: &Setup, directory: &Path, retain: u32) -> Api<MongoDBBackup> {
    let backups: Api<MongoDBBackup> = Api::namespaced(setup.client.clone(), setup.ns());
    let backup: MongoDBBackup = serde_json::from_value(serde_json::json!({
        "apiVersion": "mongodb.quorum.dev/v1alpha1",
        "kind": "MongoDBBackup",
        "metadata": {"name": "nightly"},
        "spec": {"clusterName": "source", "schedule": "* * * * *", "retain": retain, "archiveOplog": true,
                 "destination": {"filesystem": {"path": directory}}}
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .expect("create the backup");
    backups
}

/// `nightly`'s status as stored now.
async fn nightly_status(backups: &Api<MongoDBBackup>) -> Result<MongoDBBackupStatus, String> {
    Ok(backups
        .get("nightly")
        .await
        .map_err(|e| e.to_string())?
        .status
        .unwrap_or_default())
}

/// `nightly`'s status once it keeps at least `count` runs, the newest archived after `second`.
async fn archived_runs(backups: &Api<MongoDBBackup>, count: usize, second: i64) -> MongoDBBackupStatus {
    wait::until(
        &format!("{count} archived runs, the newest after {second}"),
        Duration::from_secs(150),
        || async {
            let status = nightly_status(backups).await?;
            if status.run.phase == Some(BackupPhase::Failed) {
                panic!("a run failed: {:?}", status.run.message);
            }
            let newest = status
                .recovery_runs
                .last()
                .map(|run| run.archived_at.0.as_second());
            if status.recovery_runs.len() >= count && newest > Some(second) {
                Ok(status)
            } else {
                Err(format!("{:?} {:?}", status.run.phase, status.recovery_runs))
            }
        },
    )
    .await
}

/// Creates a one-member set `name` restored from `nightly` to `point`.
async fn restore_to(
    setup: &Setup,
    name: &str,
    point: serde_json::Value,
) -> Result<MongoDBReplicaSet, kube::Error> {
    let mut spec = serde_json::to_value(spec(1)).unwrap();
    spec["restoreFrom"] = serde_json::json!({"backupName": "nightly", "pointInTime": point});
    let set: MongoDBReplicaSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "mongodb.quorum.dev/v1alpha1",
        "kind": "MongoDBReplicaSet",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    setup.sets.create(&PostParams::default(), &set).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_set_restored_to_a_point_in_time_holds_exactly_the_writes_up_to_it() {
    let setup = Setup::start("mongodb-pitr").await;
    let directory = std::env::temp_dir().join(format!("quorum-mongodb-backups-{}", setup.ns()));
    let _ = std::fs::remove_dir_all(&directory);
    setup.create_ready("source", spec(3), 3).await;
    let application = setup.application("source", 3).await;
    insert_orders(&application, 0, 50).await;

    // A schedule every minute that archives the oplog with each snapshot.
    let backups = scheduled_with_oplog(&setup, &directory, 3).await;
    let runs = |count: usize, second: i64| archived_runs(&backups, count, second);
    runs(1, 0).await;

    // Orders, an update and a delete, the noted second, then more orders and a delete of
    // everything; the next run archives it all.
    insert_orders(&application, 50, 30).await;
    let orders = application.database("shop").collection::<Document>("orders");
    let majority = WriteConcern::majority();
    orders
        .update_one(doc! { "_id": 3_i64 }, doc! { "$set": { "item": "changed" } })
        .write_concern(majority.clone())
        .await
        .expect("update");
    orders
        .delete_one(doc! { "_id": 4_i64 })
        .write_concern(majority.clone())
        .await
        .expect("delete");
    let at_point = contents(&application)
        .await
        .expect("what the set holds at the point");
    let point = a_second_boundary().await;
    insert_orders(&application, 80, 20).await;
    orders
        .delete_many(doc! { "_id": { "$lt": 40_i64 } })
        .write_concern(majority.clone())
        .await
        .expect("delete after the point");
    let status = runs(2, point).await;
    // No more runs: retention would prune the runs this test restores from.
    quorum_e2e::backups::hold_schedule(&backups, "nightly").await;
    let from = status.recoverable_from.as_ref().expect("a recoverable window").0;
    let until = status.recoverable_until.as_ref().expect("a recoverable window").0;
    assert!(
        from.as_second() <= point && point <= until.as_second(),
        "{from} <= {point} <= {until}"
    );
    let kept = &status.recovery_runs;
    for pair in kept.windows(2) {
        assert_eq!(
            pair[1].oplog_after, pair[0].oplog_through,
            "the archive is unbroken"
        );
    }
    for run in kept {
        assert!(Path::new(&run.oplog.location).exists(), "{}", run.oplog.location);
    }
    // The newest snapshot complete by the point, then every run's oplog up to the first read
    // after it (the first run's snapshot and two pieces, unless a run fell between the writes).
    let snapshot = kept
        .iter()
        .rposition(|run| run.snapshot_completed_at.0.as_second() <= point)
        .expect("a snapshot before the point");
    let last = kept
        .iter()
        .position(|run| run.archived_at.0.as_second() > point)
        .expect("a run archived after the point");

    // To the noted second.
    let time = jiff::Timestamp::from_second(point).unwrap().to_string();
    restore_to(&setup, "at-time", serde_json::json!({"time": time}))
        .await
        .expect("create at-time");
    let restored = setup.ready("at-time", 1).await;
    let record = restored.restored_from.expect("the restore is recorded");
    assert_eq!(record.location, kept[snapshot].snapshot.location);
    let replayed = restored.restored_to.expect("the replay is recorded");
    assert_eq!(
        replayed.oplog_pieces as usize,
        last - snapshot + 1,
        "{replayed:?}"
    );
    assert_eq!(
        contents(&member(&setup, "at-time", 0).await).await.unwrap(),
        at_point
    );

    // A piece of oplog altered in the store: the restore fails saying why, keeps nothing it
    // loaded and is not recorded as done.
    let piece = &kept[last].oplog.location;
    let mut bytes = std::fs::read(piece).expect("the stored piece");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(piece, bytes).expect("alter the stored piece");
    restore_to(&setup, "altered", serde_json::json!({"time": time}))
        .await
        .expect("create altered");
    let failed = setup
        .status_until(
            "altered",
            "the restore to fail on the altered piece",
            Duration::from_secs(90),
            |status| match condition(&status, "Progressing") {
                Some((_, reason, message)) if reason == "RestoreFailed" => Ok((status, message)),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    assert!(
        failed.1.contains("replaying the archived oplog") && failed.1.contains("nothing was kept"),
        "{}",
        failed.1
    );
    assert_eq!(failed.0.restored_from, None);
    assert_eq!(failed.0.restored_to, None);
    // Tried again, but not at once: each failure in a row waits twice as long before the
    // backup is fetched again, and the condition says when.
    assert!(
        failed.1.contains("the next attempt is not before"),
        "{}",
        failed.1
    );
    let first = failed.0.restore_failures.clone().expect("the failure is kept");
    let again = setup
        .status_until(
            "altered",
            "the next attempt to fail",
            Duration::from_secs(120),
            |status| match status.restore_failures {
                Some(failures) if failures.attempts > first.attempts => Ok(failures),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    assert!(
        again.last_failed_at.0 >= first.next_attempt_at.0,
        "{again:?} after {first:?}"
    );
    assert_eq!(
        again.next_attempt_at.0,
        again.last_failed_at.0 + restore_retry::wait_after(again.attempts),
        "{again:?}"
    );
    assert!(
        restore_retry::wait_after(again.attempts) > restore_retry::wait_after(first.attempts),
        "{again:?}"
    );

    // A point before the oldest kept snapshot waits, saying what can be restored; nothing is
    // loaded and the source is untouched.
    restore_to(
        &setup,
        "too-early",
        serde_json::json!({"time": "2001-01-01T00:00:00Z"}),
    )
    .await
    .expect("create too-early");
    let waiting = setup
        .status_until(
            "too-early",
            "the restore to say why it waits",
            Duration::from_secs(60),
            |status| match condition(&status, "Progressing") {
                Some((_, reason, _)) if reason == "RestoreSourceNotReady" => Ok(status),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    let (_, _, message) = condition(&waiting, "Progressing").unwrap();
    assert!(
        message.contains("restoreFrom.pointInTime.time is before the oldest kept snapshot")
            && message.contains("the backup can restore to times from"),
        "{message}"
    );
    let (databases, _) = first_member(&setup, "too-early").await;
    assert!(databases.is_empty(), "nothing restored: {databases:?}");
    let ids: Vec<i64> = (40..100).collect();
    assert_eq!(crate::support::order_ids(&application).await, ids);

    // archiveOplog without a schedule and retention: refused by the schema, naming the field.
    let mut once = backups.get("nightly").await.expect("the backup");
    once.metadata = kube::api::ObjectMeta {
        name: Some("once".into()),
        ..Default::default()
    };
    once.status = None;
    once.spec.backup.schedule = None;
    once.spec.backup.retain = None;
    let refused = backups.create(&PostParams::default(), &once).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("archiveOplog needs schedule and retain"),
        "{refused}"
    );

    setup.stop().await;
    let _ = std::fs::remove_dir_all(&directory);
}

/// A source whose oplog rolled past where the archive ended (writes faster than the schedule
/// reads them, for the oplog's size): the next run cannot continue the archive, so it restarts
/// it at its own snapshot, and one warning names the points no longer restorable. Every
/// acknowledged write is still held by the set.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_oplog_rolled_past_the_archive_restarts_it_at_the_next_runs_snapshot_with_a_warning() {
    let setup = Setup::start("mongodb-oplog-rolled").await;
    let directory = std::env::temp_dir().join(format!("quorum-mongodb-backups-{}", setup.ns()));
    let _ = std::fs::remove_dir_all(&directory);
    let mut small_oplog = spec(3);
    small_oplog.pod_template = Some(quorum_core::crd::PodOverrides {
        annotations: BTreeMap::from([(
            quorum_e2e::local_members::SIM_OPLOG_ENTRIES.to_string(),
            OPLOG_ENTRIES.to_string(),
        )]),
        ..Default::default()
    });
    setup.create_ready("source", small_oplog, 3).await;
    let application = setup.application("source", 3).await;
    let mut acknowledged = insert_orders(&application, 0, 20).await;

    let backups = scheduled_with_oplog(&setup, &directory, 3).await;
    let first = archived_runs(&backups, 1, 0).await;
    let archived = first.recovery_runs.last().expect("an archived run").clone();

    // More writes than the oplog keeps, in batches each acknowledged by a majority so the
    // secondaries keep up: the entries after the archive's end roll off every member.
    let mut next = 20;
    while next < 20 + 2 * OPLOG_ENTRIES as i64 {
        acknowledged.extend(insert_orders(&application, next, 25).await);
        next += 25;
    }

    let (restarted, warning) = wait::until(
        "a run that restarts the archive",
        Duration::from_secs(150),
        || async {
            let status = nightly_status(&backups).await?;
            let warned: Vec<String> = setup
                .events("nightly")
                .await
                .into_iter()
                .filter(|event| event.reason.as_deref() == Some("ArchiveBroken"))
                .filter_map(|event| event.message)
                .collect();
            match (&status.recovery_runs[..], &warned[..]) {
                ([.., run], [warning]) if run.snapshot.location != archived.snapshot.location => {
                    Ok((run.clone(), warning.clone()))
                }
                (runs, warned) => Err(format!(
                    "{:?} {} runs, warnings {warned:?}",
                    status.run.phase,
                    runs.len()
                )),
            }
        },
    )
    .await;
    assert_ne!(
        restarted.oplog_after, archived.oplog_through,
        "the archive restarted"
    );
    assert_eq!(
        restarted.oplog_after, restarted.snapshot_cluster_time,
        "at the run's own snapshot"
    );
    assert!(
        warning.contains("restarts at this run's snapshot")
            && warning.contains(&format!("the previous run's ended at {}", archived.oplog_through)),
        "{warning}"
    );

    setup.ready("source", 3).await;
    let held = crate::support::order_ids(&application).await;
    crate::support::check_orders(&held, &acknowledged, &[]).expect("every acknowledged order held");

    setup.stop().await;
    let _ = std::fs::remove_dir_all(&directory);
}

/// Oplog entries each member of the rolled-over set keeps.
const OPLOG_ENTRIES: usize = 200;

/// A restore to a point the archive has not reached yet waits for the next run. Meanwhile
/// retention keeps every run: with `retain: 1` the next run would otherwise drop the only
/// snapshot before the point, and the restore could never start. Once the restore is recorded,
/// retention prunes again, never the snapshot the set was restored from.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_waits_while_a_set_restores_from_the_backup_then_keeps_what_it_restored() {
    let setup = Setup::start("mongodb-pitr-retain").await;
    let directory = std::env::temp_dir().join(format!("quorum-mongodb-backups-{}", setup.ns()));
    let _ = std::fs::remove_dir_all(&directory);
    setup.create_ready("source", spec(3), 3).await;
    let application = setup.application("source", 3).await;
    insert_orders(&application, 0, 20).await;
    let backups = scheduled_with_oplog(&setup, &directory, 1).await;
    archived_runs(&backups, 1, 0).await;

    insert_orders(&application, 20, 10).await;
    let at_point = contents(&application)
        .await
        .expect("what the set holds at the point");
    let point = a_second_boundary().await;
    insert_orders(&application, 30, 10).await;
    let time = jiff::Timestamp::from_second(point).unwrap().to_string();
    restore_to(&setup, "copy", serde_json::json!({"time": time}))
        .await
        .expect("create copy");

    // The run that reaches the point is kept beside the older ones while the copy restores.
    let kept = archived_runs(&backups, 2, point).await;
    assert!(
        kept.recovery_runs
            .iter()
            .any(|run| run.snapshot_completed_at.0.as_second() <= point),
        "a snapshot before the point is kept: {:?}",
        kept.recovery_runs
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(setup.client.clone(), setup.ns());
    wait::until(
        "a RetentionDeferred event naming the restoring set",
        Duration::from_secs(30),
        || async {
            let deferred = events
                .list(
                    &kube::api::ListParams::default()
                        .fields("involvedObject.name=nightly,reason=RetentionDeferred"),
                )
                .await
                .map_err(|e| e.to_string())?;
            let messages: Vec<String> = deferred
                .items
                .into_iter()
                .filter_map(|event| event.message)
                .collect();
            if messages.iter().any(|message| message.contains("copy")) {
                Ok(())
            } else {
                Err(format!("{messages:?}"))
            }
        },
    )
    .await;
    let restored = setup.ready("copy", 1).await;
    let from = restored.restored_from.expect("the restore is recorded");
    assert!(restored.restored_to.is_some(), "the replay is recorded");
    assert_eq!(
        contents(&member(&setup, "copy", 0).await).await.unwrap(),
        at_point
    );

    // Restored: the next run prunes down to `retain` again, and the restored snapshot stays.
    let pruned = wait::until("retention back to one run", Duration::from_secs(150), || async {
        let status = backups
            .get("nightly")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        if status.recovery_runs.len() == 1 && status.run.last_pruned.is_some() {
            Ok(status)
        } else {
            Err(format!("{:?}", status.recovery_runs))
        }
    })
    .await;
    assert_ne!(pruned.recovery_runs[0].snapshot.location, from.location);
    assert!(
        Path::new(&from.location).exists(),
        "the snapshot the copy was restored from is kept: {}",
        from.location
    );
    for run in &kept.recovery_runs {
        if run.oplog.location != pruned.recovery_runs[0].oplog.location {
            assert!(
                !Path::new(&run.oplog.location).exists(),
                "an older run's oplog is pruned: {}",
                run.oplog.location
            );
        }
    }
    setup.stop().await;
    let _ = std::fs::remove_dir_all(&directory);
}
