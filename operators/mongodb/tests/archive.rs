//! Archives dumped and restored through the real `mongodb` driver, against replica-set members
//! on loopback addresses. These run against the replica-set simulator (`mongo-sim`, see
//! `quorum_e2e::mongo`), since MongoDB's server cannot be installed on the test machines,
//! unless `QUORUM_MONGOD` names a real `mongod`, which then runs with the same arguments.

use std::time::Duration;

use bson::{
    Binary, Bson, DateTime, Decimal128, Document, RawDocumentBuf, Regex, Timestamp, doc, oid::ObjectId,
    spec::BinarySubtype,
};
use futures::TryStreamExt;
use mongodb::{
    Client, IndexModel,
    options::{IndexOptions, ReadConcern, WriteConcern},
};
use mongodb_operator::{
    admin::Credentials,
    archive::{self, ArchiveError, ReadLevel, connect_direct, dump, oplog, restore, restore_stored},
};
use quorum_core::backup::{BackupError, BackupSink, BackupTarget};
use quorum_e2e::{mongo::MongoProcesses, wait};
use secrecy::SecretString;
use sha2::{Digest, Sha256};

fn root() -> quorum_e2e::mongo::Credentials {
    quorum_e2e::mongo::Credentials {
        username: "root".into(),
        password: format!("pw-{:x}", rand_suffix()),
    }
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

fn credentials(processes: &MongoProcesses) -> Credentials {
    Credentials {
        username: processes.credentials().username.clone(),
        password: SecretString::from(processes.credentials().password.clone()),
    }
}

/// A client of member `index` as the operator makes one.
fn member_client(processes: &MongoProcesses, index: usize) -> Client {
    connect_direct(&processes.host(index), Some(&credentials(processes))).expect("client")
}

async fn hello(client: &Client) -> Result<Document, String> {
    client
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await
        .map_err(|error| error.to_string())
}

/// Starts `count` members, initiates them as one set with member 0 preferred as primary, and
/// waits until member 0 is primary and every other member secondary.
async fn replica_set(name: &str, count: usize) -> MongoProcesses {
    let processes = MongoProcesses::start(name, count, root()).await;
    let members: Vec<Document> = (0..count)
        .map(|index| {
            doc! {
                "_id": index as i32,
                "host": processes.host(index),
                "priority": if index == 0 { 2.0 } else { 1.0 },
            }
        })
        .collect();
    member_client(&processes, 0)
        .database("admin")
        .run_command(doc! {
            "replSetInitiate": {
                "_id": name,
                "members": members,
                // Long enough that a loaded machine's late heartbeats do not step the primary
                // down mid-fill: these tests are about archives, not elections.
                "settings": { "electionTimeoutMillis": 5000, "heartbeatIntervalMillis": 200 },
            }
        })
        .await
        .expect("replSetInitiate");
    for index in 0..count {
        let client = member_client(&processes, index);
        let wanted = if index == 0 {
            "isWritablePrimary"
        } else {
            "secondary"
        };
        wait::until(
            &format!("member {index} to report {wanted}"),
            Duration::from_secs(30),
            || async {
                let hello = hello(&client).await?;
                match hello.get_bool(wanted) {
                    Ok(true) => Ok(()),
                    _ => Err(format!("{hello}\n{}", processes.log_tails(10))),
                }
            },
        )
        .await;
    }
    processes
}

/// Waits until member `index` has applied, and knows committed, every write the primary
/// (member 0) made so far.
async fn caught_up(processes: &MongoProcesses, index: usize) {
    let last_write = |hello: &Document, which: &str| {
        hello
            .get_document("lastWrite")
            .and_then(|last| last.get_document(which))
            .and_then(|optime| optime.get_timestamp("ts"))
            .map_err(|error| format!("{error} in {hello}"))
    };
    let primary = hello(&member_client(processes, 0)).await.expect("hello");
    let target = last_write(&primary, "opTime").expect("the primary's last write");
    let client = member_client(processes, index);
    wait::until(
        &format!("member {index} to reach {target:?}"),
        Duration::from_secs(30),
        || async {
            let hello = hello(&client).await?;
            let applied = last_write(&hello, "opTime")?;
            let committed = last_write(&hello, "majorityOpTime")?;
            match (applied, committed) {
                (applied, committed) if applied >= target && committed >= target => Ok(()),
                seen => Err(format!("{seen:?}")),
            }
        },
    )
    .await;
}

fn with_id(id: impl Into<Bson>, fields: Document) -> Document {
    let mut document = doc! { "_id": id.into() };
    document.extend(fields);
    document
}

/// Documents of many BSON types, in insertion order that is not `_id` order.
fn orders() -> Vec<Document> {
    (0..1500)
        .rev()
        .map(|i: i32| {
            with_id(
                i,
                doc! {
                    "customer": format!("customer-{}", i % 17),
                    "total": f64::from(i) * 1.25,
                    "quantity": i64::from(i) * 1_000_000_000,
                    "paid": i % 2 == 0,
                    "note": if i % 3 == 0 { Bson::Null } else { Bson::String(format!("order {i}")) },
                    "lines": [{ "sku": format!("sku-{i}"), "count": i % 5 }, { "sku": "gift", "count": 1 }],
                    "placed": DateTime::from_millis(1_700_000_000_000 + i64::from(i)),
                },
            )
        })
        .collect()
}

fn customers() -> Vec<Document> {
    (0..40)
        .map(|i: u32| {
            with_id(
                ObjectId::from_bytes([i as u8; 12]),
                doc! {
                    "email": format!("c{i}@example.com"),
                    "avatar": Binary { subtype: BinarySubtype::Generic, bytes: vec![i as u8, 0, 255, 7] },
                    "balance": Decimal128::from_bytes([i as u8; 16]),
                    "seen": Timestamp { time: 1_700_000_000 + i, increment: i },
                    "pattern": Regex { pattern: format!("^c{i}"), options: "i".into() },
                    "script": Bson::JavaScriptCode(format!("return {i};")),
                    "address": { "city": "Lyon", "geo": [4.83, 45.76], "empty": {} },
                    "unicode": "ünïcødé ✓",
                },
            )
        })
        .collect()
}

fn items() -> Vec<Document> {
    ["anvil", "bolt", "crate"]
        .into_iter()
        .map(|name| with_id(name, doc! { "stock": name.len() as i32, "tags": ["a", "b"] }))
        .collect()
}

/// Writes two databases and three collections, one with options and two with indexes, through
/// the primary (member 0), with write concern majority.
async fn fill(processes: &MongoProcesses) {
    let client = member_client(processes, 0);
    let shop = client.database("shop");
    let orders_collection = shop.collection::<Document>("orders");
    for chunk in orders().chunks(500) {
        orders_collection
            .insert_many(chunk)
            .write_concern(WriteConcern::majority())
            .await
            .expect("orders");
    }
    orders_collection
        .create_index(
            IndexModel::builder()
                .keys(doc! { "customer": 1, "placed": -1 })
                .build(),
        )
        .await
        .expect("orders index");
    shop.run_command(doc! {
        "create": "customers",
        "validator": { "email": { "$exists": true } },
        "writeConcern": { "w": "majority" },
    })
    .await
    .expect("customers");
    let customers_collection = shop.collection::<Document>("customers");
    customers_collection
        .insert_many(customers())
        .write_concern(WriteConcern::majority())
        .await
        .expect("customers");
    customers_collection
        .create_index(
            IndexModel::builder()
                .keys(doc! { "email": 1 })
                .options(
                    IndexOptions::builder()
                        .unique(true)
                        .name("email_unique".to_string())
                        .build(),
                )
                .build(),
        )
        .await
        .expect("customers index");
    client
        .database("inventory")
        .collection::<Document>("items")
        .insert_many(items())
        .write_concern(WriteConcern::majority())
        .await
        .expect("items");
}

/// Every user collection of the member behind `client`: its options, its indexes, and its
/// documents as the server returns them, in `_id` order.
type Contents = Vec<(String, Document, Vec<Document>, Vec<Vec<u8>>)>;

async fn contents(client: &Client) -> Contents {
    let mut databases: Vec<String> = client
        .list_database_names()
        .await
        .expect("databases")
        .into_iter()
        .filter(|name| !archive::SYSTEM_DATABASES.contains(&name.as_str()))
        .collect();
    databases.sort();
    let mut found = Vec::new();
    for database_name in databases {
        let database = client.database(&database_name);
        let mut listed: Vec<Document> = database
            .run_cursor_command(doc! { "listCollections": 1 })
            .await
            .expect("listCollections")
            .try_collect()
            .await
            .expect("listCollections");
        listed.sort_by_key(|collection| collection.get_str("name").unwrap_or_default().to_string());
        for collection in listed {
            let name = collection.get_str("name").expect("name").to_string();
            let indexes: Vec<Document> = database
                .run_cursor_command(doc! { "listIndexes": &name })
                .await
                .expect("listIndexes")
                .try_collect()
                .await
                .expect("listIndexes");
            let documents: Vec<RawDocumentBuf> = database
                .collection::<RawDocumentBuf>(&name)
                .find(doc! {})
                .sort(doc! { "_id": 1 })
                .read_concern(ReadConcern::local())
                .await
                .expect("find")
                .try_collect()
                .await
                .expect("documents");
            found.push((
                format!("{database_name}.{name}"),
                collection.get_document("options").cloned().unwrap_or_default(),
                indexes,
                documents
                    .into_iter()
                    .map(|document| document.into_bytes())
                    .collect(),
            ));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dump_from_a_secondary_restores_identically_into_a_new_set() {
    let source = replica_set("source", 3).await;
    fill(&source).await;
    caught_up(&source, 2).await;

    let mut bytes = Vec::new();
    let summary = dump(&member_client(&source, 2), &mut bytes).await.expect("dump");
    assert_eq!(
        summary.header.read_from,
        source.host(2),
        "read from the secondary it was pointed at"
    );
    assert_eq!(summary.header.read_level, ReadLevel::Majority);
    assert!(summary.header.cluster_time.time > 0, "{:?}", summary.header);
    assert_eq!(
        (
            summary.counts.databases,
            summary.counts.collections,
            summary.counts.documents
        ),
        (2, 3, 1500 + 40 + 3)
    );
    assert_eq!(summary.size, bytes.len() as u64);
    assert_eq!(summary.sha256, hex::encode(Sha256::digest(&bytes)));

    let target = replica_set("target", 1).await;
    let restored = restore(&member_client(&target, 0), bytes.as_slice())
        .await
        .expect("restore");
    assert_eq!(restored.counts, summary.counts);
    assert_eq!(restored.header, summary.header);
    assert_eq!(restored.indexes, 2, "orders' and customers' secondary indexes");
    // A dump of the restored set finds the documents the archive held, as a restore drill checks.
    assert_eq!(summary.content.records, 1500 + 40 + 3);
    let again = dump(&member_client(&target, 0), tokio::io::sink())
        .await
        .expect("dump");
    assert_eq!(again.content, summary.content);

    let expected = contents(&member_client(&source, 0)).await;
    let actual = contents(&member_client(&target, 0)).await;
    let names = |contents: &Contents| contents.iter().map(|(name, ..)| name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&actual),
        ["inventory.items", "shop.customers", "shop.orders"],
        "the same collections"
    );
    assert_eq!(names(&actual), names(&expected));
    for ((name, options, indexes, documents), (_, expected_options, expected_indexes, expected_documents)) in
        actual.iter().zip(&expected)
    {
        assert_eq!(options, expected_options, "{name}: options");
        assert_eq!(indexes, expected_indexes, "{name}: indexes");
        assert_eq!(documents.len(), expected_documents.len(), "{name}: documents");
        for (index, (document, expected_document)) in documents.iter().zip(expected_documents).enumerate() {
            assert!(
                document == expected_document,
                "{name}: document {index} differs:\n{:?}\n{:?}",
                Document::from_reader(document.as_slice()),
                Document::from_reader(expected_document.as_slice())
            );
        }
    }
    let unique_email = actual[1]
        .2
        .iter()
        .find(|index| index.get_str("name") == Ok("email_unique"))
        .expect("the unique index was restored");
    assert_eq!(unique_email.get_bool("unique"), Ok(true));

    // One document changed in place: the same count, another digest.
    member_client(&target, 0)
        .database("inventory")
        .collection::<Document>("items")
        .update_one(doc! {}, doc! {"$set": {"changed": true}})
        .await
        .expect("update");
    let changed = dump(&member_client(&target, 0), tokio::io::sink())
        .await
        .expect("dump");
    assert!(
        summary
            .content
            .mismatch(&changed.content)
            .is_some_and(|m| m.contains("content differs")),
        "{:?} against {:?}",
        changed.content,
        summary.content
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_into_a_set_that_holds_data_is_refused_and_leaves_it_untouched() {
    let set = replica_set("holder", 1).await;
    let client = member_client(&set, 0);
    client
        .database("existing")
        .collection::<Document>("things")
        .insert_one(doc! { "_id": 1, "kept": true })
        .write_concern(WriteConcern::majority())
        .await
        .expect("insert");
    let mut bytes = Vec::new();
    dump(&client, &mut bytes).await.expect("dump");
    let before = contents(&client).await;

    let error = restore(&client, bytes.as_slice()).await.expect_err("refused");
    assert!(
        matches!(&error, ArchiveError::TargetNotEmpty { database } if database == "existing"),
        "{error}"
    );
    assert_eq!(contents(&client).await, before, "nothing was written or dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_or_unverified_archives_are_refused_and_leave_the_target_empty() {
    let source = replica_set("origin", 1).await;
    let source_client = member_client(&source, 0);
    let shop = source_client.database("shop");
    for (collection, documents) in [("orders", orders()), ("items", items())] {
        shop.collection::<Document>(collection)
            .insert_many(documents)
            .write_concern(WriteConcern::majority())
            .await
            .expect("insert");
    }
    let mut bytes = Vec::new();
    let summary = dump(&source_client, &mut bytes).await.expect("dump");

    let target = replica_set("empty", 1).await;
    let target_client = member_client(&target, 0);
    // Cut inside the second collection: the first is already loaded when the cut is found.
    for cut in [bytes.len() - 1, bytes.len() / 2, 200] {
        let error = restore(&target_client, &bytes[..cut])
            .await
            .expect_err("truncated");
        assert!(
            matches!(error, ArchiveError::Truncated { .. }),
            "cut at {cut}: {error}"
        );
        assert_eq!(
            contents(&target_client).await,
            Contents::new(),
            "cut at {cut}: the partial restore is dropped"
        );
    }

    let directory = std::env::temp_dir().join(format!("quorum-mongo-archive-{}", rand_suffix()));
    let sink = BackupSink::new(BackupTarget::Filesystem {
        directory: directory.clone(),
    })
    .expect("sink");
    let stored = sink
        .upload("origin/origin.archive", bytes.as_slice())
        .await
        .expect("upload");
    assert_eq!(stored.sha256, summary.sha256);
    let error = restore_stored(&target_client, &sink, &stored.key, &"0".repeat(64))
        .await
        .expect_err("the digest differs");
    assert!(
        matches!(error, ArchiveError::Fetch(BackupError::ChecksumMismatch { .. })),
        "{error}"
    );
    assert_eq!(
        contents(&target_client).await,
        Contents::new(),
        "an unverified restore is dropped"
    );

    let restored = restore_stored(&target_client, &sink, &stored.key, &stored.sha256)
        .await
        .expect("a verified archive restores");
    assert_eq!(restored.counts, summary.counts);
    assert_eq!(contents(&target_client).await, contents(&source_client).await);
    std::fs::remove_dir_all(&directory).ok();
}

/// The documents of `database.collection`, by `_id`.
async fn documents_of(client: &Client, database: &str, collection: &str) -> Vec<Document> {
    client
        .database(database)
        .collection::<Document>(collection)
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .await
        .expect("find")
        .try_collect()
        .await
        .expect("documents")
}

/// The current second, once a new one began: a write after this returns has a later second.
async fn a_second_boundary() -> u32 {
    let noted = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    wait::until("the next second", Duration::from_secs(3), || async {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        if now > noted {
            Ok(())
        } else {
            Err(format!("still {noted}"))
        }
    })
    .await;
    noted as u32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archived_oplog_replayed_onto_a_restored_snapshot_stops_exactly_at_the_chosen_second() {
    let source = replica_set("pitr", 3).await;
    fill(&source).await;
    caught_up(&source, 2).await;
    let mut snapshot = Vec::new();
    let dumped = dump(&member_client(&source, 2), &mut snapshot)
        .await
        .expect("dump");

    // After the snapshot: an insert, an update and a delete, all acknowledged by a majority,
    // then a noted second, then writes after it.
    let primary = member_client(&source, 0);
    let majority = WriteConcern::majority();
    let items = primary.database("inventory").collection::<Document>("items");
    let before = documents_of(&primary, "inventory", "items").await;
    items
        .insert_one(doc! { "_id": "after-snapshot", "n": 1 })
        .write_concern(majority.clone())
        .await
        .expect("insert");
    items
        .update_one(
            doc! { "_id": before[0].get("_id").unwrap() },
            doc! { "$set": { "moved": true } },
        )
        .write_concern(majority.clone())
        .await
        .expect("update");
    items
        .delete_one(doc! { "_id": before[1].get("_id").unwrap() })
        .write_concern(majority.clone())
        .await
        .expect("delete");
    primary
        .database("late")
        .collection::<Document>("created")
        .insert_one(doc! { "_id": 1 })
        .write_concern(majority.clone())
        .await
        .expect("insert into a new collection");
    items
        .create_index(
            IndexModel::builder()
                .keys(doc! { "n": 1 })
                .options(IndexOptions::builder().name("n_1".to_string()).build())
                .build(),
        )
        .await
        .expect("an index built after the snapshot");
    let expected_items = documents_of(&primary, "inventory", "items").await;
    let point = a_second_boundary().await;
    items
        .insert_one(doc! { "_id": "after-the-point", "n": 2 })
        .write_concern(majority.clone())
        .await
        .expect("insert after the point");
    items
        .delete_many(doc! {})
        .write_concern(majority.clone())
        .await
        .expect("delete everything after the point");
    caught_up(&source, 2).await;

    let mut piece = Vec::new();
    let archived = oplog::archive_oplog(&member_client(&source, 2), dumped.header.cluster_time, &mut piece)
        .await
        .expect("archive the oplog from the secondary");
    assert_eq!(archived.after, dumped.header.cluster_time);
    assert!(archived.through > archived.after, "{archived:?}");
    assert!(
        archived.entries >= 6,
        "every write after the snapshot: {archived:?}"
    );
    assert_eq!(archived.size, piece.len() as u64);
    assert_eq!(archived.sha256, hex::encode(Sha256::digest(&piece)));

    // The snapshot, then the oplog after its cluster time up to the noted second: everything
    // before it, nothing after.
    let start = dumped.header.cluster_time;
    let target = replica_set("pitr-target", 1).await;
    let target_client = member_client(&target, 0);
    restore(&target_client, snapshot.as_slice())
        .await
        .expect("restore the snapshot");
    let replayed = oplog::replay_oplog(&target_client, piece.as_slice(), start, point)
        .await
        .expect("replay");
    assert!(
        replayed.stopped,
        "the piece held entries past the point: {replayed:?}"
    );
    assert!(
        replayed.reached.is_some_and(|reached| reached.time <= point),
        "{replayed:?}"
    );
    assert_eq!(
        documents_of(&target_client, "inventory", "items").await,
        expected_items
    );
    let indexes = target_client
        .database("inventory")
        .collection::<Document>("items")
        .list_index_names()
        .await
        .expect("the indexes");
    assert!(
        indexes.contains(&"n_1".to_string()),
        "the index built after the snapshot: {indexes:?}"
    );
    assert_eq!(
        documents_of(&target_client, "late", "created").await,
        [doc! { "_id": 1 }],
        "a collection created after the snapshot"
    );
    assert_eq!(
        documents_of(&target_client, "shop", "orders").await,
        documents_of(&primary, "shop", "orders").await,
        "untouched collections as they were"
    );

    // A second replay of the same piece changes nothing: entries are idempotent.
    oplog::replay_oplog(&target_client, piece.as_slice(), start, point)
        .await
        .expect("replay again");
    assert_eq!(
        documents_of(&target_client, "inventory", "items").await,
        expected_items
    );

    // Entries at or before the start (what the snapshot already holds) are not applied.
    let from_the_end = oplog::replay_oplog(&target_client, piece.as_slice(), archived.through, point)
        .await
        .expect("replay from the piece's end");
    assert_eq!(from_the_end.applied, 0, "{from_the_end:?}");

    // A piece cut short is refused, whatever it applied.
    let cut = oplog::replay_oplog(&target_client, &piece[..piece.len() - 3], start, point).await;
    assert!(matches!(cut, Err(ArchiveError::Truncated { .. })), "{cut:?}");
    let not_a_piece = oplog::replay_oplog(&target_client, snapshot.as_slice(), start, point).await;
    assert!(
        matches!(not_a_piece, Err(ArchiveError::Malformed { .. })),
        "{not_a_piece:?}"
    );

    // A position the member's oplog no longer holds is a gap, and nothing is written.
    let mut nothing = Vec::new();
    let gap = oplog::archive_oplog(
        &member_client(&source, 2),
        Timestamp {
            time: 1,
            increment: 0,
        },
        &mut nothing,
    )
    .await;
    assert!(matches!(gap, Err(ArchiveError::OplogGap { .. })), "{gap:?}");
    assert!(nothing.is_empty());
}
