//! The whole operator against the real local control plane: KWOK runs the pods, and
//! `LocalMembers` runs a member process for each pod on the loopback address the operator
//! uses for it — the replica-set simulator (`mongo-sim`, the real wire protocol to the real
//! driver), or a real `mongod` when `QUORUM_MONGOD` names one.

use std::{collections::BTreeMap, time::Duration};

use crate::support::{Setup, check_orders, insert_orders, order_ids, spec, try_insert_orders};
use bson::doc;
use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Pod};
use kube::{Api, ResourceExt, api::ListParams};
use quorum_e2e::fault_proxy::{Fault, FaultProxy};

fn condition(
    status: &mongodb_operator::crd::MongoDBReplicaSetStatus,
    type_: &str,
) -> Option<(String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// A settled set costs the API server nothing: passes over it write nothing (no status, no
/// event, no child) and read nothing but the set object the test touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn passes_over_a_settled_set_write_nothing_and_read_only_what_changed() {
    let (operator_client, sent) = quorum_e2e::control_plane::recording_admin_client().await;
    let setup = Setup::start_with("mongodb-idle", operator_client).await;
    setup.create_ready("shop", spec(3), 3).await;
    quorum_e2e::idle::assert_settled_passes_are_free(
        &setup.sets,
        "shop",
        &format!(
            "/apis/mongodb.quorum.dev/v1alpha1/namespaces/{}/mongodbreplicasets/shop",
            setup.ns()
        ),
        &setup.operator.context.metrics,
        "mongodbreplicasets",
        &sent,
        5,
    )
    .await;
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_set_forms_grows_through_non_voting_members_and_shrinks_keeping_every_write() {
    let setup = Setup::start("mongodb-scale").await;
    let status = setup.create_ready("shop", spec(3), 3).await;
    assert_eq!(
        status.primary.as_deref(),
        Some("shop-0"),
        "the initiator is the first primary"
    );
    assert!(status.initiated_at.is_some());
    let config = setup.config("shop", 3).await;
    assert_eq!(config.voting_members(), 3);
    assert!(config.members.iter().all(|member| member.priority == 1.0));

    let application = setup.application("shop", 3).await;
    let mut written = insert_orders(&application, 0, 200).await;

    // Out to five: each newcomer joins without a vote and is promoted once caught up.
    setup.scale("shop", 5).await;
    setup.ready("shop", 5).await;
    written.extend(insert_orders(&application, 200, 100).await);
    let config = setup.config("shop", 5).await;
    assert_eq!(config.voting_members(), 5);
    let reasons: Vec<String> = setup.event_reasons("shop").await;
    for reason in ["Initiated", "MemberAdded", "MemberPromoted"] {
        assert!(reasons.iter().any(|r| r == reason), "{reason} in {reasons:?}");
    }

    // A leaving member leads when the set goes back to three: it steps down first, then is
    // demoted and removed with the other, then the StatefulSet shrinks.
    let leaving = setup.member_client("shop", 4).await;
    quorum_e2e::wait::until("shop-4 the primary", Duration::from_secs(60), || async {
        let _ = leaving
            .database("admin")
            .run_command(doc! { "replSetStepUp": 1 })
            .await;
        let hello = leaving
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await
            .map_err(|e| e.to_string())?;
        if hello.get_bool("isWritablePrimary") == Ok(true) {
            Ok(())
        } else {
            Err(format!("{hello}"))
        }
    })
    .await;
    written.extend(insert_orders(&application, 300, 50).await);
    setup.scale("shop", 3).await;
    let status = setup.ready("shop", 3).await;
    assert!(
        ["shop-0", "shop-1", "shop-2"].contains(&status.primary.as_deref().unwrap_or_default()),
        "{:?}",
        status.primary
    );
    let config = setup.config("shop", 3).await;
    assert_eq!(config.members.len(), 3);
    assert_eq!(config.voting_members(), 3);
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), setup.ns());
    let replicas = statefulsets.get("shop").await.unwrap().spec.unwrap().replicas;
    assert_eq!(replicas, Some(3));
    for reason in ["MemberDemoted", "MemberRemoved"] {
        let reasons: Vec<String> = setup.event_reasons("shop").await;
        assert!(reasons.iter().any(|r| r == reason), "{reason} in {reasons:?}");
    }
    assert_eq!(
        order_ids(&application).await,
        written,
        "every acknowledged write kept"
    );
    setup.stop().await;
}

/// A writer of at most `max` keys into the `history` collection, one every 20 ms, each
/// acknowledged once `concern` is met.
fn history_writer(
    collection: &mongodb::Collection<bson::Document>,
    concern: mongodb::options::WriteConcern,
    max: usize,
) -> quorum_e2e::history::Writer {
    let collection = collection.clone();
    quorum_e2e::history::Writer::start("history", Duration::from_millis(20), max, move |key, value| {
        let collection = collection.clone();
        let concern = concern.clone();
        async move {
            collection
                .insert_one(doc! { "_id": key, "value": value })
                .write_concern(concern)
                .await
                .is_ok()
        }
    })
}

/// What the `history` collection holds, by key, for [`quorum_e2e::history::History::check`].
async fn held_history(collection: &mongodb::Collection<bson::Document>) -> BTreeMap<String, Option<String>> {
    use futures::TryStreamExt;
    collection
        .find(doc! {})
        .await
        .expect("reading the history")
        .try_collect::<Vec<bson::Document>>()
        .await
        .expect("reading the history")
        .into_iter()
        .map(|document| {
            let key = document.get_str("_id").expect("a key").to_string();
            (key, document.get_str("value").ok().map(str::to_string))
        })
        .collect()
}

/// The primary's server killed (and not started again) under a writer with majority write
/// concern: the set elects another primary by itself, and the operator records the election as a
/// failover from the killed member, timed from its first failed observation of it, with a
/// `PrimaryChanged` event. Every acknowledged write is on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_election_after_the_primary_is_killed_is_recorded_from_loss_keeping_every_acknowledged_write() {
    let setup = Setup::start("mongodb-election").await;
    let status = setup.create_ready("shop", spec(3), 3).await;
    assert_eq!(status.primary.as_deref(), Some("shop-0"));
    let application = setup.application("shop", 3).await;
    let history_collection = application
        .database("shop")
        .collection::<bson::Document>("history");
    let writer = history_writer(
        &history_collection,
        mongodb::options::WriteConcern::majority(),
        20_000,
    );
    writer.acknowledged_at_least(20, Duration::from_secs(120)).await;

    let killed_at = jiff::Timestamp::now();
    setup.pods.kill(setup.ns(), "shop-0").await;
    let failover = setup
        .status_until(
            "shop",
            "the election recorded as a failover from shop-0",
            Duration::from_secs(120),
            |status| match status.last_failover {
                Some(failover) if failover.from == "shop-0" => Ok(failover),
                other => Err(format!("{:?} {other:?}", status.primary)),
            },
        )
        .await;
    assert_ne!(failover.to, "shop-0");
    // Timed from the loss of shop-0: the new primary's last heartbeat from it (one heartbeat
    // interval, 2 s, at most before the kill) or the operator's first failed observation of it,
    // whichever came first, and before the new primary was seen.
    let lost_at = failover.lost_at.clone().expect("shop-0's loss is known").0;
    let from_loss = failover.from_loss_millis.expect("a time from loss");
    eprintln!("{failover:?}, killed at {killed_at}");
    assert!(
        lost_at >= killed_at - jiff::SignedDuration::from_secs(3),
        "{failover:?}, killed at {killed_at}"
    );
    assert!(lost_at <= failover.observed_at.0, "{failover:?}");
    // To the new primary's election, which the set holds within its election timeout (10 s) of
    // losing shop-0: the time clients had no primary, not the operator's settled pass (30 s).
    let writable_at = failover
        .writable_at
        .clone()
        .expect("the new primary's election date")
        .0;
    assert!(
        writable_at > lost_at && writable_at <= failover.observed_at.0 + jiff::SignedDuration::from_secs(1),
        "{failover:?}"
    );
    assert!(
        (1..=10_000 + 5_000).contains(&from_loss),
        "the election timeout plus a margin: {failover:?}, killed at {killed_at}"
    );
    // The event follows the status write that recorded the failover, in the same pass.
    quorum_e2e::wait::until("a PrimaryChanged event", Duration::from_secs(30), || async {
        let reasons: Vec<String> = setup.event_reasons("shop").await;
        match reasons.iter().any(|r| r == "PrimaryChanged") {
            true => Ok(()),
            false => Err(format!("{reasons:?}")),
        }
    })
    .await;

    writer
        .acknowledged_at_least(writer.acknowledged() + 20, Duration::from_secs(120))
        .await;
    let history = writer.stop().await;
    let held = held_history(&history_collection).await;
    let checked = history
        .check(&held)
        .unwrap_or_else(|violations| panic!("{violations:#?}"));
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_blackholed_from_the_operator_only_is_unknown_and_not_removed() {
    let setup = Setup::start("mongodb-blackhole").await;
    setup.create_ready("ledger", spec(3), 3).await;
    let version_before = setup.config("ledger", 3).await.version;

    // The operator reaches member 2 through a proxy; the members still talk directly.
    let proxy = FaultProxy::start(
        "127.0.0.1:0".parse().unwrap(),
        setup.host("ledger", 2).parse().unwrap(),
    )
    .await
    .expect("fault proxy");
    let key = format!("{}/ledger", setup.ns());
    let clients = &setup.operator.context.state.clients;
    clients
        .route(&key, &setup.host("ledger", 2), &proxy.address().to_string())
        .await;
    proxy.set(Fault::Blackhole);

    setup.scale("ledger", 2).await;
    let waiting = setup
        .status_until(
            "ledger",
            "member 2 Unknown and the scale-in waiting",
            Duration::from_secs(60),
            |status| {
                let member = status.members.iter().find(|m| m.name == "ledger-2").cloned();
                match (member, condition(&status, "Progressing")) {
                    (Some(member), Some((value, reason)))
                        if member.health == "Unknown" && value == "True" && reason == "MemberUnknown" =>
                    {
                        Ok(status)
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    assert_eq!(waiting.primary.as_deref(), Some("ledger-0"));
    // Held for a while: still in the configuration with its vote, the StatefulSet unchanged.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let config = setup.config("ledger", 3).await;
    assert_eq!(
        config.version, version_before,
        "no reconfiguration while it is Unknown"
    );
    let member = config.member(&setup.host("ledger", 2)).expect("still a member");
    assert_eq!(member.votes, 1);
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), setup.ns());
    assert_eq!(
        statefulsets.get("ledger").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );

    // The path heals: the scale-in proceeds.
    proxy.set(Fault::None);
    setup.ready("ledger", 2).await;
    let config = setup.config("ledger", 2).await;
    assert!(config.member(&setup.host("ledger", 2)).is_none());
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reconfiguration_the_primary_refuses_leaves_the_set_as_it_was_and_says_why() {
    let setup = Setup::start("mongodb-refused").await;
    setup.create_ready("orders", spec(3), 3).await;
    let before = setup.config("orders", 3).await;

    // The server's own test fail point: replSetReconfig refused as unauthorized.
    let primary = setup.admin("orders", 0).await;
    primary
        .client()
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": "alwaysOn",
            "data": { "failCommands": ["replSetReconfig"], "errorCode": 13 },
        })
        .await
        .expect("setting the fail point");

    setup.scale("orders", 4).await;
    let failed = setup
        .status_until(
            "orders",
            "the refused step on Progressing",
            Duration::from_secs(60),
            // Between passes the retried step is recorded again before it is refused again;
            // what matters is that a refusal does not leave it recorded.
            |status| match condition(&status, "Progressing") {
                Some((value, reason))
                    if value == "True" && reason == "StepFailed" && status.membership_change.is_none() =>
                {
                    Ok(status)
                }
                other => Err(format!("{other:?} {:?}", status.membership_change)),
            },
        )
        .await;
    let message = failed
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("orders-3") && message.contains("13"),
        "{message}"
    );
    let warned = setup.events("orders").await.into_iter().any(|event| {
        event.reason.as_deref() == Some("StepFailed") && event.type_.as_deref() == Some("Warning")
    });
    assert!(warned, "a warning event says why");
    assert_eq!(setup.config("orders", 3).await, before, "the set is as it was");

    primary
        .client()
        .database("admin")
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .expect("clearing the fail point");
    setup.ready("orders", 4).await;
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_version_change_rolls_secondaries_first_then_the_primary_then_raises_compatibility() {
    let setup = Setup::start("mongodb-upgrade").await;
    let status = setup.create_ready("catalog", spec(3), 3).await;
    assert_eq!(status.feature_compatibility_version.as_deref(), Some("7.0"));
    let application = setup.application("catalog", 3).await;
    let mut written = insert_orders(&application, 0, 100).await;

    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), setup.ns());
    let uid = |pod: &Pod| pod.metadata.uid.clone().unwrap_or_default();
    let original: BTreeMap<String, String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|pod| (pod.name_any(), uid(pod)))
        .collect();
    let patch = serde_json::json!({"spec": {"version": "8.0"}});
    setup
        .sets
        .patch(
            "catalog",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();

    // Watch the pods being replaced, in order, until every member runs 8.0 at compatibility 8.0.
    let mut replaced: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    let upgraded = loop {
        let listed = pods.list(&ListParams::default()).await.unwrap().items;
        for pod in &listed {
            let name = pod.name_any();
            if original.get(&name).is_some_and(|before| *before != uid(pod)) && !replaced.contains(&name) {
                replaced.push(name);
            }
        }
        let status = setup
            .sets
            .get("catalog")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let all_new = status.members.len() == 3
            && status
                .members
                .iter()
                .all(|member| member.version.as_deref().is_some_and(|v| v.starts_with("8.0")));
        if all_new && status.feature_compatibility_version.as_deref() == Some("8.0") {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "upgrade not done; replaced {replaced:?}; pods (name, uid, Ready): {:?}; {status:?}",
            listed
                .iter()
                .map(|pod| (pod.name_any(), uid(pod), quorum_core::pod::is_ready(pod)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(replaced.len(), 3, "every member restarted once: {replaced:?}");
    assert_eq!(
        replaced[2], "catalog-0",
        "secondaries first, the old primary last: {replaced:?}"
    );
    assert_ne!(
        upgraded.primary.as_deref(),
        Some("catalog-0"),
        "the old primary stepped down"
    );
    let stepped_down = setup
        .events("catalog")
        .await
        .into_iter()
        .any(|event| event.reason.as_deref() == Some("SteppedDown"));
    assert!(stepped_down, "the primary stepped down before its restart");

    setup.ready("catalog", 3).await;
    written.extend(insert_orders(&application, 100, 50).await);
    assert_eq!(order_ids(&application).await, written);
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_arbiter_and_a_hidden_member_take_their_places() {
    let setup = Setup::start("mongodb-arbiter").await;
    let mut wanted = spec(2);
    wanted.arbiter = true;
    wanted.non_voting_members = 1;
    wanted.hidden_members = 1;
    let status = setup.create_ready("inventory", wanted, 4).await;
    let arbiter = status
        .members
        .iter()
        .find(|member| member.name == "inventory-arbiter-0")
        .expect("the arbiter in status");
    assert_eq!(arbiter.state, "ARBITER");
    assert!(arbiter.arbiter);
    let hidden = status
        .members
        .iter()
        .find(|member| member.name == "inventory-2")
        .unwrap();
    assert!(hidden.hidden);
    assert_eq!(hidden.votes, 0);
    let config = setup.config("inventory", 3).await;
    assert_eq!(
        config.voting_members(),
        3,
        "two data members and the arbiter vote"
    );
    setup.stop().await;
}

/// A secondary that stops replicating while more is written than any oplog keeps cannot catch
/// up: it says so itself (RECOVERING, `error RS102 too stale to catch up`) and would stay so for
/// ever, as on the server. The operator wipes its volume with its pod; it copies the data again
/// and holds every majority-acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_too_stale_to_catch_up_is_wiped_and_copies_every_write_again() {
    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use mongodb::options::{ReadPreference, SelectionCriteria};
    use quorum_e2e::wait;

    let setup = Setup::start("mongodb-stale").await;
    let status = setup.create_ready("ledger", spec(3), 3).await;
    let primary = status.primary.clone().expect("a primary");
    let stale = (0..3)
        .find(|ordinal| format!("ledger-{ordinal}") != primary)
        .unwrap();
    let stale_pod = format!("ledger-{stale}");
    let application = setup.application("ledger", 3).await;
    let mut written = insert_orders(&application, 0, 100).await;

    let member = setup.admin("ledger", stale).await;
    let fail_point = |mode: &str| doc! { "configureFailPoint": "stopReplProducer", "mode": mode };
    member
        .client()
        .database("admin")
        .run_command(fail_point("alwaysOn"))
        .await
        .expect("stopping the member's replication");
    // More than an oplog keeps (50,000 entries), each batch acknowledged by a majority. A batch
    // the primary did not acknowledge (it stepped down mid-batch on a loaded machine) is in the
    // history as unknown, and more batches follow; bounded in count.
    let mut unknown = Vec::new();
    for batch in 0..60 {
        if written.len() >= 100 + 51_000 {
            break;
        }
        let first = 100 + batch * 1000;
        match try_insert_orders(&application, first, 1000).await {
            Ok(ids) => written.extend(ids),
            Err(error) => {
                eprintln!("batch {batch} not acknowledged: {error}");
                unknown.extend(first..first + 1000);
            }
        }
    }
    assert!(
        written.len() >= 100 + 51_000,
        "{} orders acknowledged, {} not",
        written.len(),
        unknown.len()
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(setup.client.clone(), setup.ns());
    let claim = format!("data-{stale_pod}");
    let old_claim = claims.get(&claim).await.unwrap().metadata.uid;
    member
        .client()
        .database("admin")
        .run_command(fail_point("off"))
        .await
        .expect("resuming the member's replication");

    wait::until(
        "the stale member's volume replaced",
        Duration::from_secs(120),
        || async {
            match claims.get_opt(&claim).await.map_err(|e| e.to_string())? {
                Some(current) if current.metadata.uid != old_claim => Ok(()),
                other => {
                    // What the operator waits for, if it does: the set's progress.
                    let progressing = setup
                        .status_until("ledger", "its status", Duration::from_secs(10), |status| {
                            Ok(status.conditions)
                        })
                        .await
                        .into_iter()
                        .find(|condition| condition.type_ == "Progressing");
                    Err(format!(
                        "claim {:?} (deleted at {:?}); {progressing:?}",
                        other.as_ref().map(|c| &c.metadata.uid),
                        other
                            .as_ref()
                            .and_then(|c| c.metadata.deletion_timestamp.as_ref()),
                    ))
                }
            }
        },
    )
    .await;
    setup.ready("ledger", 3).await;
    let reasons: Vec<String> = setup.event_reasons("ledger").await;
    assert!(reasons.iter().any(|r| r == "MemberResynced"), "{reasons:?}");

    // Every acknowledged write, on the set and on the member that copied it again.
    let on_the_set = order_ids(&application).await;
    check_orders(&on_the_set, &written, &unknown).unwrap();
    let resynced = setup.admin("ledger", stale).await;
    let orders = resynced
        .client()
        .database("shop")
        .collection::<bson::Document>("orders");
    let held = wait::until(
        "the resynced member holding every write",
        Duration::from_secs(60),
        || async {
            let mut ids: Vec<i64> = orders
                .find(doc! {})
                .selection_criteria(SelectionCriteria::ReadPreference(
                    ReadPreference::SecondaryPreferred {
                        options: Default::default(),
                    },
                ))
                .await
                .map_err(|e| e.to_string())?
                .try_collect::<Vec<bson::Document>>()
                .await
                .map_err(|e| e.to_string())?
                .iter()
                .filter_map(|document| document.get_i64("_id").ok())
                .collect();
            ids.sort_unstable();
            if ids.len() == on_the_set.len() {
                Ok(ids)
            } else {
                Err(format!("{} of {} writes", ids.len(), on_the_set.len()))
            }
        },
    )
    .await;
    assert_eq!(held, on_the_set);
    setup.stop().await;
}

/// Two of three members killed and not started again: the one left cannot elect itself, and the
/// operator forces nothing by itself; it reports `QuorumLost`, naming the member that applied
/// the most. A person names the member to recover from with `quorum.dev/recover-from`: a member
/// that does not answer is refused with a record that says why, the survivor is given a
/// configuration of its own once (forced), becomes primary, and holds every write acknowledged
/// by all three members. The lost members, back on their volumes, are added again; removing
/// the annotation ends the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recovery_request_forces_the_survivor_of_a_lost_majority_to_serve_keeping_every_acknowledged_write()
{
    use quorum_core::recovery::{RECOVER_ANNOTATION, RecoveryPhase};
    let setup = Setup::start("mongodb-recover").await;
    setup.create_ready("shop", spec(3), 3).await;
    let application = setup.application("shop", 3).await;
    let history_collection = application
        .database("shop")
        .collection::<bson::Document>("history");
    // Acknowledged once every member has it: whichever survives holds it.
    let writer = history_writer(
        &history_collection,
        mongodb::options::WriteConcern::builder()
            .w(mongodb::options::Acknowledgment::Nodes(3))
            .build(),
        2_000,
    );
    writer.acknowledged_at_least(20, Duration::from_secs(120)).await;
    let history = writer.stop().await;

    setup.pods.kill(setup.ns(), "shop-0").await;
    setup.pods.kill(setup.ns(), "shop-2").await;
    let lost = setup
        .status_until(
            "shop",
            "the majority reported lost",
            Duration::from_secs(120),
            |status| match status
                .conditions
                .iter()
                .find(|c| c.type_ == "Progressing" && c.reason == "QuorumLost")
            {
                Some(condition) => Ok(condition.message.clone()),
                None => Err(format!("{:?}", status.conditions)),
            },
        )
        .await;
    assert!(
        lost.contains(
            "recover from shop-1, which applied the most of those that answer, \
             with `kubectl annotate mongodbreplicaset shop quorum.dev/recover-from=shop-1`"
        ),
        "{lost}"
    );

    let request = |member: Option<&str>| {
        let patch = serde_json::json!({"metadata": {"annotations": {RECOVER_ANNOTATION: member}}});
        let sets = setup.sets.clone();
        async move {
            sets.patch(
                "shop",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
        }
    };
    request(Some("shop-2")).await;
    let refused = setup
        .status_until(
            "shop",
            "the request for a lost member refused",
            Duration::from_secs(60),
            |status| match status.recovery {
                Some(record) if record.member == "shop-2" => Ok(record),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    assert_eq!(refused.phase, RecoveryPhase::Waiting, "{refused:?}");
    assert!(refused.message.contains("does not answer"), "{refused:?}");

    request(Some("shop-1")).await;
    let status = setup
        .status_until(
            "shop",
            "shop-1 serving on request",
            Duration::from_secs(120),
            |status| match (&status.primary, &status.recovery) {
                (Some(primary), Some(record))
                    if primary == "shop-1" && record.phase == RecoveryPhase::Done =>
                {
                    Ok(status)
                }
                _ => Err(format!(
                    "{:?} {:?} {:?}",
                    status.primary, status.recovery, status.conditions
                )),
            },
        )
        .await;
    assert_eq!(
        status.recovery.unwrap().replaced.as_deref(),
        Some("shop-0"),
        "the primary it replaced"
    );
    let reasons: Vec<String> = setup.event_reasons("shop").await;
    assert!(reasons.iter().any(|r| r == "Recovered"), "{reasons:?}");
    let held = held_history(&history_collection).await;
    let checked = history
        .check(&held)
        .unwrap_or_else(|violations| panic!("{violations:#?}"));
    eprintln!("{checked} acknowledged writes checked on the survivor, none lost");

    // The lost members come back on their volumes (their pods replaced) and are added again.
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), setup.ns());
    for lost in ["shop-0", "shop-2"] {
        pods.delete(lost, &Default::default()).await.unwrap();
    }
    setup.ready("shop", 3).await;
    assert_eq!(setup.config("shop", 3).await.voting_members(), 3);

    request(None).await;
    setup
        .status_until(
            "shop",
            "the record gone with the request",
            Duration::from_secs(60),
            |status| match status.recovery {
                None => Ok(()),
                Some(record) => Err(format!("{record:?}")),
            },
        )
        .await;
    setup.stop().await;
}
