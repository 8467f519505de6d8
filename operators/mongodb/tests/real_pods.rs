//! What a user runs, on the real node: the operator installed by its chart runs as a container
//! of its image, and the members are containers from the StatefulSet the operator builds (its
//! init container, entry point contract, probes, security context and volumes), found through
//! cluster DNS. The image is the replica-set simulator under the official image's name and entry
//! point contract, not MongoDB: no MongoDB server can be had here (see the README).

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use kube::{Api, api::PostParams};
use mongodb::bson::{Document, doc};
use mongodb_operator::{
    crd::{MongoDBReplicaSet, MongoDBReplicaSetStatus},
    resources::member_name,
};
use quorum_core::repair::{RepairPhase, RepairRecord};
use quorum_e2e::{
    history::{History, Writer},
    real_node::{self, STORAGE_CLASS},
    real_pods::{self, OnRealNode},
    wait,
};

const CHART: &str = "quorum-mongodb-operator";
const SET: &str = "orders";
const MEMBERS: &str =
    "app.kubernetes.io/name=mongodb,app.kubernetes.io/instance=orders,app.kubernetes.io/component=member";
const SERVER: &str = "mongod";

async fn install(prefix: &str) -> OnRealNode {
    OnRealNode::install(prefix, CHART, &["admissionPolicy=false"]).await
}

fn sets(setup: &OnRealNode) -> Api<MongoDBReplicaSet> {
    Api::namespaced(setup.admin.clone(), &setup.ns)
}

/// Creates a set of `members` on the real node, on local-path volumes, and waits until the
/// operator reports it Ready and every member pod is Ready by its own probes.
async fn create_ready(setup: &OnRealNode, members: i32) -> MongoDBReplicaSetStatus {
    create_ready_as(setup, MongoDBReplicaSet::new(SET, real_spec(members))).await
}

/// A spec of `members` on the real node, on local-path volumes.
fn real_spec(members: i32) -> mongodb_operator::crd::MongoDBReplicaSetSpec {
    let mut spec = support::spec(members);
    // The release the operator defaults to, whose image the node holds.
    spec.version = mongodb_operator::packaging::DEFAULT_MONGODB_IMAGE_TAG.into();
    spec.storage.storage_class_name = Some(STORAGE_CLASS.into());
    spec.pod_template = Some(real_node::pod_overrides());
    spec
}

/// As [`create_ready`], for `set` as given.
async fn create_ready_as(setup: &OnRealNode, set: MongoDBReplicaSet) -> MongoDBReplicaSetStatus {
    let name = set.metadata.name.clone().unwrap_or_default();
    let members = set.spec.members;
    sets(setup).create(&PostParams::default(), &set).await.unwrap();
    let status = support::ready(&sets(setup), &name, members).await;
    setup
        .members_ready(
            &format!("app.kubernetes.io/name=mongodb,app.kubernetes.io/instance={name},app.kubernetes.io/component=member"),
            members as usize,
            Duration::from_secs(120),
        )
        .await;
    status
}

/// A client logged in as the generated administrator, connected directly to member `pod` by its
/// pod address (the members' configured names are cluster DNS names, which the host cannot
/// resolve).
async fn direct_client(setup: &OnRealNode, pod: &str) -> mongodb::Client {
    direct_client_of(setup, SET, pod).await
}

/// As [`direct_client`], to a member of the replica set `set`.
async fn direct_client_of(setup: &OnRealNode, set: &str, pod: &str) -> mongodb::Client {
    let credentials = support::generated_credentials(&setup.admin, &setup.ns, set).await;
    let ip = setup
        .pods()
        .get(pod)
        .await
        .unwrap()
        .status
        .unwrap()
        .pod_ip
        .unwrap();
    let uri = format!(
        "mongodb://{}:{}@{ip}:27017/?directConnection=true&authSource=admin&serverSelectionTimeoutMS=20000",
        credentials.username,
        secrecy::ExposeSecret::expose_secret(&credentials.password),
    );
    mongodb::Client::with_uri_str(&uri).await.unwrap()
}

fn history_collection(client: &mongodb::Client) -> mongodb::Collection<Document> {
    client.database("shop").collection("history")
}

/// A writer to the primary: one insert per interval with majority write concern, acknowledged
/// when the server confirmed it.
fn start_writer(primary: &mongodb::Client) -> Writer {
    let collection = history_collection(primary);
    Writer::start("history", Duration::from_millis(200), 3_000, move |key, value| {
        let collection = collection.clone();
        async move {
            let insert = collection
                .insert_one(doc! { "_id": key, "v": value })
                .write_concern(mongodb::options::WriteConcern::majority());
            tokio::time::timeout(Duration::from_secs(5), insert)
                .await
                .is_ok_and(|done| done.is_ok())
        }
    })
}

/// A writer that follows the primary the operator reports, to its pod's address of the moment:
/// one insert per interval with majority write concern, acknowledged when the server confirmed
/// it.
fn start_following_writer(setup: &OnRealNode) -> Writer {
    let setup = Arc::new((setup.admin.clone(), setup.ns.clone()));
    let connected: Arc<tokio::sync::Mutex<Option<(String, mongodb::Client)>>> = Default::default();
    Writer::start("history", Duration::from_millis(200), 3_000, move |key, value| {
        let (setup, connected) = (setup.clone(), connected.clone());
        async move {
            let write = async {
                let sets: Api<MongoDBReplicaSet> = Api::namespaced(setup.0.clone(), &setup.1);
                let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(setup.0.clone(), &setup.1);
                let pod = sets.get(SET).await.ok()?.status?.primary?;
                let ip = pods.get(&pod).await.ok()?.status?.pod_ip?;
                let mut connected = connected.lock().await;
                if connected.as_ref().is_none_or(|(at, _)| *at != ip) {
                    let credentials = support::generated_credentials(&setup.0, &setup.1, SET).await;
                    let uri = format!(
                        "mongodb://{}:{}@{ip}:27017/?directConnection=true&authSource=admin&serverSelectionTimeoutMS=3000",
                        credentials.username,
                        secrecy::ExposeSecret::expose_secret(&credentials.password),
                    );
                    *connected = Some((ip, mongodb::Client::with_uri_str(&uri).await.ok()?));
                }
                let client = connected.as_ref()?.1.clone();
                drop(connected);
                history_collection(&client)
                    .insert_one(doc! { "_id": key, "v": value })
                    .write_concern(mongodb::options::WriteConcern::majority())
                    .await
                    .ok()
            };
            tokio::time::timeout(Duration::from_secs(5), write)
                .await
                .is_ok_and(|done| done.is_some())
        }
    })
}

/// Checks the history on the member the operator reports primary now, and says and returns how
/// many acknowledged writes it checked.
async fn check_history_on_the_primary(setup: &OnRealNode, history: &History) -> usize {
    let status = sets(setup).get(SET).await.unwrap().status.unwrap();
    let primary = direct_client(setup, status.primary.as_deref().expect("a primary")).await;
    let checked = check_history(&primary, history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    checked
}

/// Checks that `member` holds every acknowledged write and nothing invented.
async fn check_history(member: &mongodb::Client, history: &History) -> usize {
    use futures::TryStreamExt;
    let documents: Vec<Document> = history_collection(member)
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut held: BTreeMap<String, Option<String>> = documents
        .iter()
        .map(|document| {
            (
                document.get_str("_id").unwrap().to_string(),
                document.get_str("v").ok().map(str::to_string),
            )
        })
        .collect();
    for operation in &history.operations {
        held.entry(operation.key.clone()).or_insert(None);
    }
    let checked = history
        .check(&held)
        .unwrap_or_else(|violations| panic!("lost or invented writes: {violations:#?}"));
    assert!(checked > 0, "the writer had no write acknowledged");
    checked
}

#[tokio::test]
async fn the_chart_installed_operator_forms_a_replica_set_of_real_pods() {
    let mut setup = install("real-mongo").await;
    let status = create_ready(&setup, 3).await;
    let primary_pod = status.primary.clone().expect("a primary");
    let primary = direct_client(&setup, &primary_pod).await;
    history_collection(&primary)
        .insert_one(doc! { "_id": "greeting", "v": "hello from a real pod" })
        .write_concern(mongodb::options::WriteConcern::majority())
        .await
        .unwrap();

    // The members run as uid 999, not root, from the image's entry point; logs and exec work.
    let uid = real_node::exec(&setup.ns, &primary_pod, SERVER, &["id", "-u"]);
    assert_eq!(uid.trim(), "999");
    let log = real_node::logs(&setup.ns, &primary_pod, SERVER);
    assert!(!log.trim().is_empty(), "no log from {primary_pod}");

    // Removing the operator leaves the members serving.
    setup.uninstall_operator().await;
    setup.members_ready(MEMBERS, 3, Duration::from_secs(30)).await;
    let found = history_collection(&primary)
        .find_one(doc! { "_id": "greeting" })
        .await
        .unwrap();
    assert_eq!(found.unwrap().get_str("v").unwrap(), "hello from a real pod");
    setup.remove().await;
}

/// A secondary's server killed inside its container, then the other secondary's pod deleted:
/// the kubelet restarts the one and the StatefulSet recreates the other on its volume; the
/// operator changes no membership, and no majority-acknowledged write is lost.
#[tokio::test]
async fn a_killed_member_or_a_deleted_pod_rejoins_with_its_data() {
    let setup = install("real-mongo-restart").await;
    let status = create_ready(&setup, 3).await;
    let primary_pod = status.primary.clone().expect("a primary");
    let primary = direct_client(&setup, &primary_pod).await;
    let writer = start_writer(&primary);
    const MEMBERSHIP_STEPS: [&str; 4] = ["MemberAdded", "MemberRemoved", "MemberPromoted", "MemberDemoted"];
    let steps_before = setup.occurrences(&MEMBERSHIP_STEPS).await;

    let secondaries: Vec<String> = (0..3)
        .map(|ordinal| member_name(SET, ordinal))
        .filter(|name| *name != primary_pod)
        .collect();
    let volume = setup.claim_uid(&format!("data-{}", secondaries[0])).await;
    setup
        .kill_and_await_restart(&secondaries[0], SERVER, Duration::from_secs(120))
        .await;
    support::ready(&sets(&setup), SET, 3).await;
    assert_eq!(setup.claim_uid(&format!("data-{}", secondaries[0])).await, volume);

    let volume = setup.claim_uid(&format!("data-{}", secondaries[1])).await;
    setup
        .delete_and_await_recreated(&secondaries[1], Duration::from_secs(120))
        .await;
    support::ready(&sets(&setup), SET, 3).await;
    assert_eq!(setup.claim_uid(&format!("data-{}", secondaries[1])).await, volume);
    assert_eq!(
        setup.occurrences(&MEMBERSHIP_STEPS).await,
        steps_before,
        "membership steps taken"
    );

    let history = writer.stop().await;
    let checked = check_history(&primary, &history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// Every member down at once, twice (every server killed, then every pod deleted), each time
/// back on its volume: the set comes back by itself with a primary, the operator changes no
/// membership, and no majority-acknowledged write is lost.
#[tokio::test]
async fn a_total_outage_ends_with_the_same_members_and_every_acknowledged_write() {
    let setup = install("real-mongo-outage").await;
    create_ready(&setup, 3).await;
    let writer = start_following_writer(&setup);
    const MEMBERSHIP_STEPS: [&str; 5] = [
        "MemberAdded",
        "MemberRemoved",
        "MemberPromoted",
        "MemberDemoted",
        "MemberResynced",
    ];
    let steps_before = setup.occurrences(&MEMBERSHIP_STEPS).await;
    writer.acknowledged_at_least(10, Duration::from_secs(60)).await;

    setup.total_outage(MEMBERS, Duration::from_secs(240)).await;
    support::ready(&sets(&setup), SET, 3).await;
    writer
        .acknowledged_at_least(writer.acknowledged() + 10, Duration::from_secs(120))
        .await;

    assert_eq!(
        setup.occurrences(&MEMBERSHIP_STEPS).await,
        steps_before,
        "membership steps taken"
    );
    let history = writer.stop().await;
    check_history_on_the_primary(&setup, &history).await;
    setup.remove().await;
}

/// A new pod template (a changed override; an operator release that builds pods differently is
/// the same) under a writer that follows the primary: the operator restarts the members one at a
/// time, the secondaries first, then steps the primary down and restarts it last; no acknowledged
/// write is lost.
#[tokio::test]
async fn a_new_pod_template_restarts_one_member_at_a_time_the_primary_last() {
    roll_under_a_writer("real-mongo-roll", false).await;
}

/// The same with the operator's pod stopped and started again after each step it reports (each
/// member's restart, the step-down): each member is still restarted once, one at a time.
#[tokio::test]
async fn a_roll_goes_on_after_an_operator_restart_at_every_step() {
    roll_under_a_writer("real-mongo-roll-restarts", true).await;
}

async fn roll_under_a_writer(prefix: &str, restart_operator_at_each_step: bool) {
    let setup = install(prefix).await;
    let status = create_ready(&setup, 3).await;
    let old_primary = status.primary.clone().expect("a primary");
    let writer = start_following_writer(&setup);
    writer.acknowledged_at_least(10, Duration::from_secs(60)).await;
    let rolled = setup
        .roll_to_a_new_template(
            (&sets(&setup), SET),
            (MEMBERS, 3),
            (&["MemberRestarted", "SteppedDown"], restart_operator_at_each_step),
            old_primary,
            || async { sets(&setup).get(SET).await.ok()?.status?.primary },
        )
        .await;
    support::ready(&sets(&setup), SET, 3).await;
    rolled.assert_one_at_a_time_leader_last(3);
    writer
        .acknowledged_at_least(writer.acknowledged() + 10, Duration::from_secs(120))
        .await;
    let history = writer.stop().await;
    check_history_on_the_primary(&setup, &history).await;
    setup.remove().await;
}

/// Sets (or, with `None`, removes) the repair request.
async fn request_repair(setup: &OnRealNode, member: Option<&str>) {
    real_pods::request_repair(&sets(setup), SET, member).await;
}

/// The repair record in status once it satisfies `until`.
async fn repair_record(
    setup: &OnRealNode,
    what: &str,
    until: impl Fn(Option<&RepairRecord>) -> bool,
) -> Option<RepairRecord> {
    real_pods::repair_record(
        &sets(setup),
        SET,
        what,
        |c: &MongoDBReplicaSet| c.status.as_ref()?.repair.clone(),
        until,
    )
    .await
}

/// `quorum.dev/repair` naming no member is refused with a record that says why, and changes
/// nothing; naming a secondary wipes it once, so it comes back on a new, empty volume and copies
/// the data again from the set, while a writer runs, and no majority-acknowledged write is lost;
/// removing the annotation ends the request.
#[tokio::test]
async fn a_repair_request_rebuilds_the_named_member_on_an_empty_volume() {
    let setup = install("real-mongo-repair").await;
    let status = create_ready(&setup, 3).await;
    let primary = status.primary.clone().expect("a primary");
    let target = (0..3)
        .map(|ordinal| member_name(SET, ordinal))
        .find(|name| *name != primary)
        .unwrap();
    let writer = start_following_writer(&setup);
    writer.acknowledged_at_least(10, Duration::from_secs(60)).await;

    request_repair(&setup, Some(&format!("{SET}-7"))).await;
    let refused = repair_record(&setup, "the request for no member refused", |record| {
        record.is_some_and(|r| r.message.contains("not a data member"))
    })
    .await
    .unwrap();
    assert_eq!(refused.phase, RepairPhase::Waiting, "{refused:?}");

    let claim = format!("data-{target}");
    let volume = setup.claim_uid(&claim).await;
    let pod_before = setup.pods().get(&target).await.unwrap().metadata.uid;
    request_repair(&setup, Some(&target)).await;
    let done = repair_record(&setup, &format!("{target} rebuilt"), |record| {
        record.is_some_and(|r| r.member == target && r.phase == RepairPhase::Done)
    })
    .await
    .unwrap();
    assert_eq!(done.replaced, pod_before, "{done:?}");
    assert_ne!(setup.claim_uid(&claim).await, volume, "{target} kept its volume");
    let resyncs = setup.occurrences(&["MemberResynced"]).await;
    assert_eq!(resyncs.get("MemberResynced"), Some(&1), "{resyncs:?}");

    request_repair(&setup, None).await;
    repair_record(&setup, "the record gone with the request", |record| {
        record.is_none()
    })
    .await;
    support::ready(&sets(&setup), SET, 3).await;
    assert_eq!(setup.occurrences(&["MemberResynced"]).await, resyncs);

    writer
        .acknowledged_at_least(writer.acknowledged() + 10, Duration::from_secs(60))
        .await;
    let history = writer.stop().await;
    let checked = check_history_on_the_primary(&setup, &history).await;
    let rebuilt = direct_client(&setup, &target).await;
    wait::until(
        &format!("{target} holds the writes"),
        Duration::from_secs(60),
        || async {
            let count = history_collection(&rebuilt)
                .count_documents(doc! {})
                .selection_criteria(mongodb::options::SelectionCriteria::ReadPreference(
                    mongodb::options::ReadPreference::SecondaryPreferred { options: None },
                ))
                .await
                .map_err(|error| error.to_string())?;
            (count as usize >= checked)
                .then_some(())
                .ok_or(format!("{count} documents"))
        },
    )
    .await;
    setup.remove().await;
}

/// 3 -> 5 -> 3 -> 5 members under a steady writer: the members removed lose their volumes with
/// their pods, so those added again under the same names start empty and sync from the set, and
/// no majority-acknowledged write is lost.
#[tokio::test]
async fn members_removed_and_added_again_start_from_empty_volumes() {
    let setup = install("real-mongo-scale").await;
    let status = create_ready(&setup, 3).await;
    let primary = direct_client(&setup, status.primary.as_deref().expect("a primary")).await;
    let writer = start_writer(&primary);
    let removed_claims = [
        format!("data-{}", member_name(SET, 3)),
        format!("data-{}", member_name(SET, 4)),
    ];
    let mut first_volumes = Vec::new();
    for members in [5, 3, 5] {
        wait::until("the scale accepted", Duration::from_secs(30), || async {
            sets(&setup)
                .patch(
                    SET,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(serde_json::json!({"spec": {"members": members}})),
                )
                .await
                .map(drop)
                .map_err(|error| error.to_string())
        })
        .await;
        support::ready(&sets(&setup), SET, members).await;
        setup
            .members_ready(MEMBERS, members as usize, Duration::from_secs(120))
            .await;
        if first_volumes.is_empty() {
            for claim in &removed_claims {
                first_volumes.push(setup.claim_uid(claim).await);
            }
        } else if members == 3 {
            for claim in &removed_claims {
                setup.claim_deleted(claim, Duration::from_secs(60)).await;
            }
        } else {
            for (claim, first) in removed_claims.iter().zip(&first_volumes) {
                assert_ne!(
                    &setup.claim_uid(claim).await,
                    first,
                    "{claim}: the old volume came back"
                );
            }
        }
    }
    let history = writer.stop().await;
    let checked = check_history(&primary, &history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    for ordinal in [3, 4] {
        let added = direct_client(&setup, &member_name(SET, ordinal)).await;
        wait::until(
            &format!("{} holds the writes", member_name(SET, ordinal)),
            Duration::from_secs(60),
            || async {
                let count = history_collection(&added)
                    .count_documents(doc! {})
                    .selection_criteria(mongodb::options::SelectionCriteria::ReadPreference(
                        mongodb::options::ReadPreference::SecondaryPreferred { options: None },
                    ))
                    .await
                    .map_err(|error| error.to_string())?;
                if count as usize >= checked {
                    Ok(())
                } else {
                    Err(format!("{count} documents"))
                }
            },
        )
        .await;
    }
    setup.remove().await;
}

/// Backups to an S3 store in the cluster, from the operator's pod over the pod network: a
/// one-shot backup, then a new replica set restored from it holds every write acknowledged
/// before it and nothing written after; a schedule every minute keeps one run of its own and
/// never deletes the one-shot's object.
#[tokio::test]
async fn backups_land_in_an_s3_store_and_a_new_replica_set_restores_from_one() {
    use mongodb_operator::crd::{MongoDBBackup, MongoRestoreSource};

    let setup = OnRealNode::install(
        "real-mongo-s3",
        CHART,
        &["admissionPolicy=false", "backups.allowHttp=true"],
    )
    .await;
    let store = setup.deploy_s3_store().await;
    let status = create_ready(&setup, 3).await;
    let primary = direct_client(&setup, status.primary.as_deref().expect("a primary")).await;
    let writer = start_writer(&primary);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    let history = writer.stop().await;

    let one_shot = store.back_up_once::<MongoDBBackup>(&setup, SET, "mongodb").await;
    store
        .schedule_every_minute::<MongoDBBackup>(&setup, SET, "mongodb")
        .await;
    history_collection(&primary)
        .insert_one(doc! { "_id": "after-the-backup", "v": "not-restored" })
        .write_concern(mongodb::options::WriteConcern::majority())
        .await
        .unwrap();

    let mut copy = MongoDBReplicaSet::new("copy", real_spec(2));
    copy.spec.restore_from = Some(MongoRestoreSource::newest(real_pods::ONE_SHOT_BACKUP));
    let restored = create_ready_as(&setup, copy).await;
    let restored = direct_client_of(&setup, "copy", restored.primary.as_deref().expect("a primary")).await;
    let after = history_collection(&restored)
        .find_one(doc! { "_id": "after-the-backup" })
        .await
        .unwrap();
    assert_eq!(after, None, "a document written after the backup was restored");
    let checked = check_history(&restored, &history).await;
    assert!(checked >= 20, "{checked} acknowledged writes checked");
    history_collection(&restored)
        .insert_one(doc! { "_id": "after-the-restore", "v": "written" })
        .write_concern(mongodb::options::WriteConcern::majority())
        .await
        .unwrap();

    store
        .scheduled_runs_pruned::<MongoDBBackup>(&setup, "mongodb", &[one_shot])
        .await;
    setup.remove().await;
}

/// Point-in-time recovery on the real node: the scheduled backup's Jobs archive the oplog from
/// a member pod into the in-cluster S3 store with each snapshot, and a new replica set restored
/// to a noted second holds every write acknowledged before it and none after.
#[tokio::test]
async fn a_new_replica_set_restores_to_a_point_in_time_from_the_oplog_archived_in_s3() {
    use mongodb_operator::crd::{MongoDBBackup, MongoRestoreSource, OplogPoint};
    use quorum_e2e::real_pods::SCHEDULED_BACKUP;

    let setup = OnRealNode::install(
        "real-mongo-pitr",
        CHART,
        &["admissionPolicy=false", "backups.allowHttp=true"],
    )
    .await;
    let store = setup.deploy_s3_store().await;
    let status = create_ready(&setup, 3).await;
    let primary = direct_client(&setup, status.primary.as_deref().expect("a primary")).await;
    store
        .schedule_every_minute::<MongoDBBackup>(&setup, SET, "mongodb")
        .await;
    let backups: Api<MongoDBBackup> = Api::namespaced(setup.admin.clone(), &setup.ns);
    backups
        .patch(
            SCHEDULED_BACKUP,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"archiveOplog": true, "retain": 3}})),
        )
        .await
        .expect("archive the oplog");
    // At least `count` runs, the newest archived after `second`.
    let archived_runs = |count: usize, second: i64| {
        let backups = backups.clone();
        async move {
            wait::until(
                &format!("{count} archived runs, the newest after {second}"),
                Duration::from_secs(200),
                || async {
                    let status = backups
                        .get(SCHEDULED_BACKUP)
                        .await
                        .map_err(|e| e.to_string())?
                        .status
                        .unwrap_or_default();
                    let newest = status
                        .recovery_runs
                        .last()
                        .map(|run| run.archived_at.0.as_second());
                    if status.recovery_runs.len() >= count && newest > Some(second) {
                        Ok(status)
                    } else {
                        Err(format!("{:?} {:?}", status.run.phase, status.run.message))
                    }
                },
            )
            .await
        }
    };
    archived_runs(1, 0).await;

    let writer = start_writer(&primary);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    let history = writer.stop().await;
    // The members run on this node's clock: a write after the next second began is past it.
    let point = jiff::Timestamp::now().as_second();
    wait::until("the next second", Duration::from_secs(3), || async {
        let now = jiff::Timestamp::now().as_second();
        if now > point { Ok(()) } else { Err(now.to_string()) }
    })
    .await;
    history_collection(&primary)
        .insert_one(doc! { "_id": "after-the-point", "v": "not-restored" })
        .write_concern(mongodb::options::WriteConcern::majority())
        .await
        .unwrap();
    archived_runs(2, point).await;
    // No more runs: retention would prune the runs this test restores from.
    quorum_e2e::backups::hold_schedule(&backups, SCHEDULED_BACKUP).await;

    let mut copy = MongoDBReplicaSet::new("copy", real_spec(1));
    copy.spec.restore_from = Some(MongoRestoreSource {
        point_in_time: Some(OplogPoint {
            time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(point).unwrap(),
            ),
        }),
        ..MongoRestoreSource::newest(SCHEDULED_BACKUP)
    });
    let restored_status = create_ready_as(&setup, copy).await;
    let replayed = restored_status.restored_to.expect("the replay is recorded");
    assert!(
        replayed.oplog_pieces >= 1 && replayed.entries_applied >= 20,
        "the acknowledged writes came from the oplog: {replayed:?}"
    );
    let restored = direct_client_of(
        &setup,
        "copy",
        restored_status.primary.as_deref().expect("a primary"),
    )
    .await;
    let after = history_collection(&restored)
        .find_one(doc! { "_id": "after-the-point" })
        .await
        .unwrap();
    assert_eq!(after, None, "a document written after the point was restored");
    let checked = check_history(&restored, &history).await;
    assert!(checked >= 20, "{checked} acknowledged writes checked");
    setup.remove().await;
}

/// A backup with `verify` restores its snapshot into a throw-away one-member replica set, which
/// holds what the snapshot recorded; recorded content that no longer matches fails the next
/// drill ([`real_pods::InClusterS3::drill_verifies_then_catches_altered_content`]).
#[tokio::test]
async fn a_restore_drill_verifies_a_backup_and_catches_one_whose_content_differs() {
    use mongodb_operator::crd::MongoDBBackup;

    let setup = OnRealNode::install(
        "real-mongo-drill",
        CHART,
        &["admissionPolicy=false", "backups.allowHttp=true"],
    )
    .await;
    let store = setup.deploy_s3_store().await;
    let status = create_ready(&setup, 1).await;
    let primary = direct_client(&setup, status.primary.as_deref().expect("a primary")).await;
    let writer = start_writer(&primary);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    writer.stop().await;
    store
        .drill_verifies_then_catches_altered_content::<MongoDBBackup, MongoDBReplicaSet>(
            &setup, SET, "mongodb", 20,
        )
        .await;
    setup.remove().await;
}
