//! The replica-set simulator against the real `mongodb` driver: it must enforce the rules a real
//! replica set enforces (so the MongoDB admin layer cannot pass against a stub), and the driver's
//! own server discovery must find and follow its primary.

use std::time::Duration;

use bson::{Document, doc};
use mongodb::{
    Client, Collection,
    error::{Error, ErrorKind},
    options::{ClientOptions, Credential, ReadPreference, SelectionCriteria, ServerAddress, WriteConcern},
};
use quorum_e2e::{
    mongo::{Credentials, MongoProcesses, PORT},
    wait,
};

/// Short timings, so elections and failovers take about a second.
fn settings() -> Document {
    doc! { "electionTimeoutMillis": 1000, "heartbeatIntervalMillis": 100 }
}

fn credentials() -> Credentials {
    Credentials {
        username: "root".into(),
        password: format!("pw-{:x}", rand::random::<u64>()),
    }
}

fn code(error: &Error) -> Option<i32> {
    match error.kind.as_ref() {
        ErrorKind::Command(command) => Some(command.code),
        _ => None,
    }
}

fn message(error: &Error) -> String {
    match error.kind.as_ref() {
        ErrorKind::Command(command) => command.message.clone(),
        other => other.to_string(),
    }
}

async fn admin(client: &Client, command: Document) -> Result<Document, Error> {
    client.database("admin").run_command(command).await
}

/// Runs `command` and expects it refused with `expected`; returns the message.
async fn refused(client: &Client, command: Document, expected: i32) -> String {
    match admin(client, command.clone()).await {
        Ok(reply) => panic!("{command} should be refused with {expected}, got {reply}"),
        Err(error) => {
            assert_eq!(code(&error), Some(expected), "{command}: {error}");
            message(&error)
        }
    }
}

fn member(id: i32, host: &str, votes: i32, priority: f64) -> Document {
    doc! { "_id": id, "host": host, "votes": votes, "priority": priority }
}

async fn reconfig(client: &Client, version: i32, members: Vec<Document>) -> Result<Document, Error> {
    admin(
        client,
        doc! { "replSetReconfig": { "_id": "rs0", "version": version, "members": members, "settings": settings() } },
    )
    .await
}

/// `host`'s entry in the `replSetGetStatus` of `client`'s member, if it has one.
async fn member_as_seen(client: &Client, host: &str) -> Result<Option<Document>, String> {
    let status = admin(client, doc! { "replSetGetStatus": 1 })
        .await
        .map_err(|e| e.to_string())?;
    let members = status.get_array("members").map_err(|e| e.to_string())?;
    Ok(members
        .iter()
        .filter_map(|m| m.as_document())
        .find(|m| m.get_str("name").ok() == Some(host))
        .cloned())
}

/// Waits until member `observer` reports `host` in state `state_str`.
async fn wait_member_state(
    processes: &MongoProcesses,
    client: &Client,
    observer: usize,
    host: &str,
    state_str: &str,
) {
    wait::until(
        &format!("{host} to be {state_str} as seen by m-{observer}"),
        Duration::from_secs(20),
        || async {
            let member = member_as_seen(client, host).await?;
            let seen = member
                .as_ref()
                .and_then(|m| m.get_str("stateStr").ok())
                .unwrap_or("absent")
                .to_string();
            if seen == state_str {
                Ok(())
            } else {
                Err(format!("{seen}\n{}", processes.log_tails(10)))
            }
        },
    )
    .await;
}

/// Waits until `client`'s member has heard from `host` that it holds configuration `version`,
/// which is what lets the next reconfiguration start.
async fn wait_config_held(processes: &MongoProcesses, client: &Client, host: &str, version: i32) {
    wait::until(
        &format!("{host} to hold configuration version {version}"),
        Duration::from_secs(20),
        || async {
            let member = member_as_seen(client, host).await?;
            let held = member.as_ref().and_then(|m| m.get_i32("configVersion").ok());
            if held == Some(version) {
                Ok(())
            } else {
                Err(format!("{held:?}\n{}", processes.log_tails(10)))
            }
        },
    )
    .await;
}

/// Waits until one of `among` says it is the writable primary; returns its index.
async fn wait_primary(processes: &MongoProcesses, among: &[usize]) -> usize {
    let clients: Vec<(usize, Client)> = among.iter().map(|i| (*i, processes.direct_client(*i))).collect();
    wait::until("a primary", Duration::from_secs(20), || async {
        for (index, client) in &clients {
            if let Ok(hello) = admin(client, doc! { "hello": 1 }).await
                && hello.get_bool("isWritablePrimary").unwrap_or(false)
            {
                return Ok(*index);
            }
        }
        Err(format!("no primary among {among:?}\n{}", processes.log_tails(15)))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_follow_the_replica_set_rules() {
    let processes = MongoProcesses::start("rs0", 4, credentials()).await;
    let hosts = processes.hosts();

    // Authentication: a wrong password is refused; without any, only the handshake commands run.
    let wrong = Client::with_options(
        ClientOptions::builder()
            .hosts(vec![ServerAddress::Tcp {
                host: processes.ip(0).to_string(),
                port: Some(PORT),
            }])
            .direct_connection(true)
            .credential(
                Credential::builder()
                    .username("root".to_string())
                    .password("not-the-password".to_string())
                    .build(),
            )
            .server_selection_timeout(Duration::from_secs(5))
            .build(),
    )
    .unwrap();
    let error = admin(&wrong, doc! { "ping": 1 }).await.unwrap_err();
    assert!(
        matches!(error.kind.as_ref(), ErrorKind::Authentication { .. }),
        "wrong password: {error}"
    );
    let anonymous = Client::with_options(
        ClientOptions::builder()
            .hosts(vec![ServerAddress::Tcp {
                host: processes.ip(0).to_string(),
                port: Some(PORT),
            }])
            .direct_connection(true)
            .build(),
    )
    .unwrap();
    admin(&anonymous, doc! { "ping": 1 }).await.unwrap();
    refused(&anonymous, doc! { "replSetGetStatus": 1 }, 13).await;

    let m0 = processes.direct_client(0);
    let m1 = processes.direct_client(1);
    refused(&m0, doc! { "replSetGetStatus": 1 }, 94).await;
    let hello = admin(&m0, doc! { "hello": 1 }).await.unwrap();
    assert_eq!(hello.get_bool("isreplicaset"), Ok(true), "{hello}");

    // A configuration that does not name this member, then the real one, then again.
    let elsewhere = doc! { "_id": "rs0", "members": [member(0, &hosts[1], 1, 1.0)] };
    refused(&m0, doc! { "replSetInitiate": elsewhere }, 93).await;
    let first = doc! { "_id": "rs0", "version": 1, "members": [member(0, &hosts[0], 1, 1.0)], "settings": settings() };
    admin(&m0, doc! { "replSetInitiate": first.clone() })
        .await
        .unwrap();
    refused(&m0, doc! { "replSetInitiate": first }, 23).await;
    wait_member_state(&processes, &m0, 0, &hosts[0], "PRIMARY").await;

    // A non-voting member joins, copies the data and becomes a secondary.
    reconfig(
        &m0,
        2,
        vec![member(0, &hosts[0], 1, 1.0), member(1, &hosts[1], 0, 0.0)],
    )
    .await
    .unwrap();
    wait_member_state(&processes, &m0, 0, &hosts[1], "SECONDARY").await;
    let config = admin(&m0, doc! { "replSetGetConfig": 1 }).await.unwrap();
    assert_eq!(config.get_document("config").unwrap().get_i32("version"), Ok(2));

    // It is promoted to a voter: one voting change.
    reconfig(
        &m0,
        3,
        vec![member(0, &hosts[0], 1, 1.0), member(1, &hosts[1], 1, 1.0)],
    )
    .await
    .unwrap();

    // A stale version, two voters at once, and a secondary asked to reconfigure are refused.
    let three = vec![
        member(0, &hosts[0], 1, 1.0),
        member(1, &hosts[1], 1, 1.0),
        member(2, &hosts[2], 0, 0.0),
    ];
    let stale = refused(
        &m0,
        doc! { "replSetReconfig": { "_id": "rs0", "version": 3, "members": three.clone() } },
        103,
    )
    .await;
    assert!(
        stale.contains("version field value of 3 is out of date"),
        "{stale}"
    );
    let four_voting = vec![
        member(0, &hosts[0], 1, 1.0),
        member(1, &hosts[1], 1, 1.0),
        member(2, &hosts[2], 1, 1.0),
        member(3, &hosts[3], 1, 1.0),
    ];
    let two_voters = refused(
        &m0,
        doc! { "replSetReconfig": { "_id": "rs0", "version": 4, "members": four_voting } },
        103,
    )
    .await;
    assert!(two_voters.contains("at most 1 voting member"), "{two_voters}");
    wait_member_state(&processes, &m1, 1, &hosts[1], "SECONDARY").await;
    // Version 3 is committed only once the other voter holds it; until then the primary
    // refuses the next reconfiguration with ConfigurationInProgress.
    wait_config_held(&processes, &m0, &hosts[1], 3).await;
    refused(
        &m1,
        doc! { "replSetReconfig": { "_id": "rs0", "version": 4, "members": three.clone() } },
        10107,
    )
    .await;

    // The failCommand fail point fails the next reconfig with the configured code, once.
    admin(
        &m0,
        doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": 1 },
            "data": { "failCommands": ["replSetReconfig"], "errorCode": 91 },
        },
    )
    .await
    .unwrap();
    let three_voting = vec![
        member(0, &hosts[0], 1, 1.0),
        member(1, &hosts[1], 1, 1.0),
        member(2, &hosts[2], 1, 1.0),
    ];
    let failed = reconfig(&m0, 4, three_voting.clone()).await.unwrap_err();
    assert_eq!(code(&failed), Some(91), "{failed}");
    reconfig(&m0, 4, three_voting).await.unwrap();
    wait_member_state(&processes, &m0, 0, &hosts[2], "SECONDARY").await;
    let status = admin(&m0, doc! { "replSetGetStatus": 1 }).await.unwrap();
    assert_eq!(status.get_i32("votingMembersCount"), Ok(3), "{status}");

    // The feature compatibility version follows the binaries (7.0 here) and needs a confirm.
    let fcv = |reply: Document| {
        reply
            .get_document("featureCompatibilityVersion")
            .unwrap()
            .get_str("version")
            .unwrap()
            .to_string()
    };
    let shown = admin(&m0, doc! { "getParameter": 1, "featureCompatibilityVersion": 1 })
        .await
        .unwrap();
    assert_eq!(fcv(shown), "7.0");
    refused(&m0, doc! { "setFeatureCompatibilityVersion": "6.0" }, 7369100).await;
    refused(
        &m0,
        doc! { "setFeatureCompatibilityVersion": "8.0", "confirm": true },
        2,
    )
    .await;
    admin(
        &m0,
        doc! { "setFeatureCompatibilityVersion": "6.0", "confirm": true },
    )
    .await
    .unwrap();
    let shown = admin(&m0, doc! { "getParameter": 1, "featureCompatibilityVersion": 1 })
        .await
        .unwrap();
    assert_eq!(fcv(shown), "6.0");

    // An arbiter joins and votes without data; once removed, it says it has no valid config.
    let mut with_arbiter = three_voting_members(&hosts);
    with_arbiter.push(doc! { "_id": 3, "host": &hosts[3], "arbiterOnly": true });
    reconfig(&m0, 5, with_arbiter).await.unwrap();
    wait_member_state(&processes, &m0, 0, &hosts[3], "ARBITER").await;
    reconfig(&m0, 6, three_voting_members(&hosts)).await.unwrap();
    let m3 = processes.direct_client(3);
    wait::until(
        "the removed arbiter to notice",
        Duration::from_secs(10),
        || async {
            let hello = admin(&m3, doc! { "hello": 1 }).await.map_err(|e| e.to_string())?;
            hello.get_str("info").map(|_| ()).map_err(|_| hello.to_string())
        },
    )
    .await;
    // A new client: one connected while it was an arbiter did not authenticate.
    let m3 = processes.direct_client(3);
    refused(&m3, doc! { "replSetGetStatus": 1 }, 93).await;
}

fn three_voting_members(hosts: &[String]) -> Vec<Document> {
    (0..3).map(|i| member(i as i32, &hosts[i], 1, 1.0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_follows_the_primary_through_failover_and_restarts() {
    let mut processes = MongoProcesses::start("rs0", 3, credentials()).await;
    let hosts = processes.hosts();
    let members: Vec<Document> = (0..3).map(|i| member(i as i32, &hosts[i], 1, 1.0)).collect();
    admin(
        &processes.direct_client(0),
        doc! { "replSetInitiate": { "_id": "rs0", "members": members, "settings": settings() } },
    )
    .await
    .unwrap();
    let first_primary = wait_primary(&processes, &[0, 1, 2]).await;

    // Server discovery from a seed list; majority writes; a secondary read sees them.
    let client = processes.client();
    let things = client.database("app").collection::<Document>("things");
    let batch: Vec<Document> = (0..20).map(|i| doc! { "_id": i, "n": i * 10 }).collect();
    things
        .insert_many(batch)
        .write_concern(WriteConcern::majority())
        .await
        .unwrap();
    let duplicate = things.insert_one(doc! { "_id": 3 }).await.unwrap_err();
    assert!(duplicate.to_string().contains("E11000"), "{duplicate}");
    let on_secondary = things.clone();
    let secondary = SelectionCriteria::ReadPreference(ReadPreference::Secondary { options: None });
    // Each secondary by itself: the driver picks either for a read, and a majority write is
    // on one of them at least when it is acknowledged, not yet on both.
    let secondaries: Vec<(usize, Collection<Document>)> = (0..3)
        .filter(|index| *index != first_primary)
        .map(|index| {
            (
                index,
                processes
                    .direct_client(index)
                    .database("app")
                    .collection("things"),
            )
        })
        .collect();
    wait::until(
        "both secondaries to serve the 20 documents",
        Duration::from_secs(10),
        || async {
            for (index, things) in &secondaries {
                let n = things
                    .count_documents(doc! {})
                    .selection_criteria(secondary.clone())
                    .await
                    .map_err(|e| format!("member {index}: {e}"))?;
                if n != 20 {
                    return Err(format!("member {index}: {n} documents"));
                }
            }
            Ok(())
        },
    )
    .await;
    let seventh = on_secondary
        .find_one(doc! { "_id": 7 })
        .selection_criteria(secondary.clone())
        .await
        .unwrap();
    assert_eq!(seventh, Some(doc! { "_id": 7, "n": 70 }));

    // With replication stopped on both secondaries, none is caught up: no step-down.
    let others: Vec<usize> = (0..3).filter(|i| *i != first_primary).collect();
    for index in &others {
        admin(
            &processes.direct_client(*index),
            doc! { "configureFailPoint": "stopReplProducer", "mode": "alwaysOn" },
        )
        .await
        .unwrap();
    }
    things
        .insert_one(doc! { "_id": 100 })
        .write_concern(WriteConcern::nodes(1))
        .await
        .unwrap();
    let primary_client = processes.direct_client(first_primary);
    let behind = refused(
        &primary_client,
        doc! { "replSetStepDown": 10, "secondaryCatchUpPeriodSecs": 1 },
        262,
    )
    .await;
    assert!(behind.contains("No electable secondaries caught up"), "{behind}");
    for index in &others {
        admin(
            &processes.direct_client(*index),
            doc! { "configureFailPoint": "stopReplProducer", "mode": "off" },
        )
        .await
        .unwrap();
    }
    things
        .insert_one(doc! { "_id": 101 })
        .write_concern(WriteConcern::majority())
        .await
        .unwrap();

    // The primary dies: another member is elected and the same client goes on writing.
    processes.kill(first_primary).await;
    things
        .insert_one(doc! { "_id": 102 })
        .write_concern(WriteConcern::majority())
        .await
        .unwrap_or_else(|e| panic!("write after failover: {e}\n{}", processes.log_tails(30)));
    let second_primary = wait_primary(&processes, &others).await;
    assert_ne!(second_primary, first_primary);
    let count = things.count_documents(doc! {}).await.unwrap();
    assert_eq!(count, 23, "documents after failover\n{}", processes.log_tails(60));

    // The dead member comes back with its data and configuration, and catches up.
    processes.restart(first_primary).await;
    let returned = processes.direct_client(first_primary);
    wait_member_state(
        &processes,
        &returned,
        first_primary,
        &hosts[first_primary],
        "SECONDARY",
    )
    .await;
    wait::until(
        "the restarted member to catch up",
        Duration::from_secs(10),
        || async {
            let n = returned
                .database("app")
                .collection::<Document>("things")
                .count_documents(doc! {})
                .await
                .map_err(|e| e.to_string())?;
            (n == 23).then_some(()).ok_or(format!("{n} documents"))
        },
    )
    .await;

    // Every member restarts: data, configuration and users survive on disk.
    let version = admin(&returned, doc! { "replSetGetConfig": 1 })
        .await
        .unwrap()
        .get_document("config")
        .unwrap()
        .get_i32("version")
        .unwrap();
    for index in 0..3 {
        processes.kill(index).await;
    }
    for index in 0..3 {
        processes.restart(index).await;
    }
    wait_primary(&processes, &[0, 1, 2]).await;
    let client = processes.client();
    let things = client.database("app").collection::<Document>("things");
    assert_eq!(things.count_documents(doc! {}).await.unwrap(), 23);
    for index in 0..3 {
        let config = admin(&processes.direct_client(index), doc! { "replSetGetConfig": 1 })
            .await
            .unwrap();
        assert_eq!(
            config.get_document("config").unwrap().get_i32("version"),
            Ok(version)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_primary_steps_down_and_the_majority_elects() {
    let processes = MongoProcesses::start("rs0", 3, credentials()).await;
    let hosts = processes.hosts();
    let members: Vec<Document> = (0..3).map(|i| member(i as i32, &hosts[i], 1, 1.0)).collect();
    admin(
        &processes.direct_client(0),
        doc! { "replSetInitiate": { "_id": "rs0", "members": members, "settings": settings() } },
    )
    .await
    .unwrap();
    let first = wait_primary(&processes, &[0, 1, 2]).await;

    // A step-down with caught-up secondaries hands the primary role over; the old primary
    // does not stand again while frozen.
    let client = processes.client();
    client
        .database("app")
        .collection::<Document>("things")
        .insert_one(doc! { "_id": 1 })
        .await
        .unwrap();
    admin(
        &processes.direct_client(first),
        doc! { "replSetStepDown": 30, "secondaryCatchUpPeriodSecs": 5 },
    )
    .await
    .unwrap();
    let candidates: Vec<usize> = (0..3).filter(|i| *i != first).collect();
    let old = wait_primary(&processes, &candidates).await;
    let hello = admin(&processes.direct_client(first), doc! { "hello": 1 })
        .await
        .unwrap();
    assert_eq!(hello.get_bool("secondary"), Ok(true), "{hello}");

    // The new primary is cut off from both others.
    let others: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    let cut_off: Vec<String> = others.iter().map(|i| hosts[*i].clone()).collect();
    admin(&processes.direct_client(old), doc! { "simPartition": cut_off })
        .await
        .unwrap();
    for index in &others {
        admin(
            &processes.direct_client(*index),
            doc! { "simPartition": [&hosts[old]] },
        )
        .await
        .unwrap();
    }
    let new = wait_primary(&processes, &others).await;
    let isolated = processes.direct_client(old);
    wait_member_state(&processes, &isolated, old, &hosts[old], "SECONDARY").await;
    wait_member_state(
        &processes,
        &processes.direct_client(new),
        new,
        &hosts[old],
        "(not reachable/healthy)",
    )
    .await;

    for index in 0..3 {
        admin(&processes.direct_client(index), doc! { "simPartition": [] })
            .await
            .unwrap();
    }
    wait_member_state(
        &processes,
        &processes.direct_client(new),
        new,
        &hosts[old],
        "SECONDARY",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_helpers_read_and_write_through_the_simulator() {
    let processes = MongoProcesses::start("rs0", 1, credentials()).await;
    let client = processes.direct_client(0);
    admin(
        &client,
        doc! { "replSetInitiate": { "_id": "rs0", "members": [member(0, &processes.host(0), 1, 1.0)], "settings": settings() } },
    )
    .await
    .unwrap();
    wait_primary(&processes, &[0]).await;
    let database = client.database("shop");
    let orders = database.collection::<Document>("orders");
    orders
        .insert_many((0..25).map(|i| doc! { "_id": i, "kind": if i % 2 == 0 { "even" } else { "odd" } }))
        .await
        .unwrap();
    let generated = orders.insert_one(doc! { "kind": "none" }).await.unwrap();
    assert!(generated.inserted_id.as_object_id().is_some());

    // Cursors in small batches, sorted, filtered, skipped and limited.
    let mut cursor = orders
        .find(doc! { "kind": "odd" })
        .sort(doc! { "_id": -1 })
        .batch_size(2)
        .await
        .unwrap();
    let mut ids = Vec::new();
    while cursor.advance().await.unwrap() {
        ids.push(cursor.deserialize_current().unwrap().get_i32("_id").unwrap());
    }
    assert_eq!(ids, (0..25).rev().filter(|i| i % 2 == 1).collect::<Vec<_>>());
    let page: Vec<Document> = {
        use futures::TryStreamExt;
        orders
            .find(doc! { "_id": { "$gte": 10 } })
            .sort(doc! { "_id": 1 })
            .skip(2)
            .limit(3)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()
    };
    assert_eq!(
        page.iter().map(|d| d.get_i32("_id").unwrap()).collect::<Vec<_>>(),
        vec![12, 13, 14]
    );
    assert_eq!(orders.count_documents(doc! { "kind": "even" }).await.unwrap(), 13);
    assert_eq!(orders.estimated_document_count().await.unwrap(), 26);

    // Updates and deletes.
    let updated = orders
        .update_one(
            doc! { "_id": 3 },
            doc! { "$set": { "kind": "three" }, "$inc": { "seen": 1 } },
        )
        .await
        .unwrap();
    assert_eq!((updated.matched_count, updated.modified_count), (1, 1));
    assert_eq!(
        orders.find_one(doc! { "_id": 3 }).await.unwrap(),
        Some(doc! { "_id": 3, "kind": "three", "seen": 1 })
    );
    let deleted = orders.delete_many(doc! { "kind": "even" }).await.unwrap();
    assert_eq!(deleted.deleted_count, 13);

    // Catalog commands.
    orders
        .create_index(mongodb::IndexModel::builder().keys(doc! { "kind": 1 }).build())
        .await
        .unwrap();
    let mut indexes = orders.list_index_names().await.unwrap();
    indexes.sort();
    assert_eq!(indexes, vec!["_id_", "kind_1"]);
    database.create_collection("empty").await.unwrap();
    let mut collections = database.list_collection_names().await.unwrap();
    collections.sort();
    assert_eq!(collections, vec!["empty", "orders"]);
    let names = client.list_database_names().await.unwrap();
    assert!(
        names.contains(&"shop".to_string()) && names.contains(&"admin".to_string()),
        "{names:?}"
    );
    database.drop().await.unwrap();
    assert!(
        !client
            .list_database_names()
            .await
            .unwrap()
            .contains(&"shop".to_string())
    );
    refused(&client, doc! { "noSuchCommand": 1 }, 59).await;
}

/// A member that was down while more was written than any member's oplog keeps (2,000 entries
/// here, `--sim-oplog-entries`) cannot catch up, as on the server: it says RECOVERING with
/// `error RS102 too stale to catch up`, the primary shows the same in its heartbeat message,
/// and it does not copy the data again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_behind_every_oplog_is_recovering_too_stale_and_stays_so() {
    const OPLOG_ENTRIES: i32 = 2_000;
    let mut processes =
        MongoProcesses::start_keeping("rs0", 3, credentials(), Some(OPLOG_ENTRIES as usize)).await;
    let hosts = processes.hosts();
    // No election is wanted here: a primary busy with batches of inserts on a loaded machine
    // may miss a one-second election timeout and step down in the middle of a batch.
    let mut unhurried = settings();
    unhurried.insert("electionTimeoutMillis", 10_000);
    admin(
        &processes.direct_client(0),
        doc! { "replSetInitiate": { "_id": "rs0", "members": three_voting_members(&hosts), "settings": unhurried } },
    )
    .await
    .unwrap();
    let primary = wait_primary(&processes, &[0, 1, 2]).await;
    let stale = (0..3).find(|index| *index != primary).unwrap();
    let things = processes
        .patient_client()
        .database("app")
        .collection::<Document>("things");
    things
        .insert_one(doc! { "_id": -1 })
        .write_concern(WriteConcern::majority())
        .await
        .unwrap();
    wait_member_state(
        &processes,
        &processes.direct_client(primary),
        primary,
        &hosts[stale],
        "SECONDARY",
    )
    .await;

    processes.kill(stale).await;
    // More entries than an oplog keeps, in batches the other secondary acknowledges.
    let batches = OPLOG_ENTRIES / 1000 + 1;
    for batch in 0..batches {
        let documents: Vec<Document> = (0..1000).map(|n| doc! { "_id": batch * 1000 + n }).collect();
        things
            .insert_many(documents)
            .write_concern(WriteConcern::majority())
            .await
            .unwrap();
    }
    processes.restart(stale).await;

    let own_view = processes.direct_client(stale);
    wait_member_state(&processes, &own_view, stale, &hosts[stale], "RECOVERING").await;
    let status = admin(&own_view, doc! { "replSetGetStatus": 1 }).await.unwrap();
    assert_eq!(status.get_i32("myState"), Ok(3), "{status}");
    let itself = status
        .get_array("members")
        .unwrap()
        .iter()
        .filter_map(|m| m.as_document())
        .find(|m| m.get_bool("self").unwrap_or(false))
        .unwrap()
        .clone();
    assert!(
        itself
            .get_str("infoMessage")
            .unwrap_or_default()
            .contains("RS102 too stale"),
        "{itself}"
    );
    let primary_view = processes.direct_client(primary);
    wait_member_state(&processes, &primary_view, primary, &hosts[stale], "RECOVERING").await;
    let status = admin(&primary_view, doc! { "replSetGetStatus": 1 })
        .await
        .unwrap();
    let seen = status
        .get_array("members")
        .unwrap()
        .iter()
        .filter_map(|m| m.as_document())
        .find(|m| m.get_str("name").ok() == Some(hosts[stale].as_str()))
        .unwrap()
        .clone();
    assert!(
        seen.get_str("lastHeartbeatMessage")
            .unwrap_or_default()
            .contains("RS102 too stale"),
        "{seen}"
    );
    // Still RECOVERING on its own word once the primary has seen it so: no silent resync.
    let status = admin(&own_view, doc! { "replSetGetStatus": 1 }).await.unwrap();
    assert_eq!(status.get_i32("myState"), Ok(3), "{status}");
    let count = things.count_documents(doc! {}).await.unwrap();
    assert_eq!(count, u64::try_from(batches * 1000 + 1).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_primary_writes_periodic_noops_so_its_committed_optime_follows_the_clock() {
    let processes = MongoProcesses::start("rs0", 1, credentials()).await;
    let hosts = processes.hosts();
    admin(
        &processes.direct_client(0),
        doc! { "replSetInitiate": { "_id": "rs0", "members": [member(0, &hosts[0], 1, 1.0)], "settings": settings() } },
    )
    .await
    .unwrap();
    wait_primary(&processes, &[0]).await;
    let client = processes.direct_client(0);
    let committed = || async {
        let status = admin(&client, doc! { "replSetGetStatus": 1 })
            .await
            .map_err(|e| e.to_string())?;
        let optimes = status.get_document("optimes").map_err(|e| e.to_string())?;
        let at = optimes
            .get_document("lastCommittedOpTime")
            .and_then(|optime| optime.get_timestamp("ts"))
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(at.time)
    };
    let initiated = wait::until("a committed optime", Duration::from_secs(30), || async {
        committed().await.and_then(|time| {
            if time > 0 {
                Ok(time)
            } else {
                Err("none yet".into())
            }
        })
    })
    .await;
    // Nothing is written from here on: only the primary's own no-ops can move the commit point.
    wait::until(
        "the commit point past the initiation by a periodic no-op",
        Duration::from_secs(60),
        || async {
            let time = committed().await?;
            if time >= initiated + 10 {
                Ok(())
            } else {
                Err(format!("committed at {time}, initiated at {initiated}"))
            }
        },
    )
    .await;
    let noop = client
        .database("local")
        .collection::<Document>("oplog.rs")
        .find_one(doc! { "op": "n", "o.msg": "periodic noop" })
        .await
        .unwrap()
        .expect("a periodic no-op in the oplog");
    assert!(noop.get_timestamp("ts").unwrap().time >= initiated + 10, "{noop}");
}
