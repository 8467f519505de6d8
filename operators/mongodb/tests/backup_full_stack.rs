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
        MongoDBReplicaSet, MongoDBReplicaSetSpec, MongoDBReplicaSetStatus, RestoreSource,
    },
};
use quorum_core::crd::FilesystemDestination;
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
    let credentials = setup.credentials(name).await;
    let uri = format!(
        "mongodb://{}:{}@{}/?directConnection=true&readPreference=secondaryPreferred&authSource=admin&serverSelectionTimeoutMS=5000",
        credentials.username,
        secrecy::ExposeSecret::expose_secret(&credentials.password),
        setup.host(name, ordinal),
    );
    mongodb::Client::with_uri_str(&uri)
        .await
        .expect("a member's client")
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
        restore_from: Some(RestoreSource {
            backup_name: backup.to_string(),
        }),
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
