//! The whole operator against the real local control plane *and* real MariaDB servers: KWOK
//! runs the pods, and `LocalMembers` runs a real `mariadbd` for each member pod (through the
//! pods' own `start.sh`) on the loopback address the operator resolves for it.

use crate::support;

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use crate::support::{
    app_connection, binary_logs_after_rotation, converges, insert_items, item_ids, ready, session, setup,
};
use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{ConfigMap, Pod, Secret, Service},
    policy::v1::PodDisruptionBudget,
};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use mysql_async::prelude::Queryable;
use mysql_operator::resources::ROLE_LABEL;
use quorum_e2e::{
    control_plane::recording_admin_client,
    fault_proxy::{Fault, FaultProxy},
    idle, wait,
};

/// A settled cluster costs the API server nothing: passes over it write nothing (no status, no
/// event, no child, no label) and read nothing but the cluster object the test touched.
#[tokio::test]
async fn passes_over_a_settled_cluster_write_nothing_and_read_only_what_changed() {
    let (operator_client, sent) = recording_admin_client().await;
    let setup = support::setup_with("mysql-idle", operator_client).await;
    setup.create(2).await;
    ready(&setup.clusters, "main", 1).await;
    idle::assert_settled_passes_are_free(
        &setup.clusters,
        "main",
        &format!(
            "/apis/mysql.quorum.dev/v1alpha1/namespaces/{}/mysqlclusters/main",
            setup.ns()
        ),
        &setup.operator.context.metrics,
        "mysqlclusters",
        &sent,
        5,
    )
    .await;
    setup.finish().await;
}

#[tokio::test]
async fn a_cluster_forms_grows_by_snapshot_and_shrinks_with_roles_services_and_status() {
    let setup = setup("mysql-full").await;
    setup.create(2).await;
    let status = ready(&setup.clusters, "main", 1).await;
    assert_eq!(status.primary.as_deref(), Some("main-0"));

    // Objects: the three Services select by role, and nothing else is missing.
    let ns = setup.ns();
    let services: Api<Service> = Api::namespaced(setup.client.clone(), ns);
    for (name, role) in [
        ("main-primary", Some("primary")),
        ("main-replicas", Some("replica")),
        ("main", None),
    ] {
        let service = services.get(name).await.expect(name);
        let selector = service.spec.unwrap().selector.unwrap();
        assert_eq!(selector.get(ROLE_LABEL).map(String::as_str), role, "{name}");
    }
    let _: PodDisruptionBudget = Api::namespaced(setup.client.clone(), ns)
        .get("main")
        .await
        .expect("PDB");
    let _: ConfigMap = Api::namespaced(setup.client.clone(), ns)
        .get("main-config")
        .await
        .expect("ConfigMap");
    let secrets: Api<Secret> = Api::namespaced(setup.client.clone(), ns);
    secrets.get("main-root").await.expect("generated root password");
    secrets
        .get("main-replication")
        .await
        .expect("generated replication password");
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), ns);
    let role = |pod: &Pod| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ROLE_LABEL).cloned())
    };
    assert_eq!(
        role(&pods.get("main-0").await.unwrap()).as_deref(),
        Some("primary")
    );
    assert_eq!(
        role(&pods.get("main-1").await.unwrap()).as_deref(),
        Some("replica")
    );

    // Writes through the application account reach the replica.
    insert_items(setup.ip(0), 0..100).await;
    let written: Vec<u64> = (0..100).collect();
    converges(setup.ip(1), &written).await;

    // Scale out through the scale subresource: the new member is seeded from a consistent
    // snapshot, then replicates.
    setup
        .clusters
        .patch_scale(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale to 3");
    let status = ready(&setup.clusters, "main", 2).await;
    assert_eq!(status.replicas, 3);
    assert!(
        setup
            .events("SeedingMember")
            .await
            .iter()
            .any(|m| m.contains("main-2")),
        "the new member was seeded from a snapshot"
    );
    converges(setup.ip(2), &written).await;
    insert_items(setup.ip(0), 100..110).await;
    let written: Vec<u64> = (0..110).collect();
    converges(setup.ip(2), &written).await;
    let member_two = status
        .members
        .iter()
        .find(|m| m.name == "main-2")
        .expect("member 2 in status");
    assert_eq!(member_two.role, "Replica");
    assert!(member_two.gtid.is_some());

    // Scale in: the highest replica stops replicating, then its pod goes.
    setup
        .clusters
        .patch_scale(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale to 2");
    let status = ready(&setup.clusters, "main", 1).await;
    assert_eq!(status.replicas, 2);
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), ns);
    let replicas = statefulsets.get("main").await.unwrap().spec.unwrap().replicas;
    assert_eq!(replicas, Some(2));
    assert!(!setup.events("RemovingMember").await.is_empty());
    converges(setup.ip(1), &written).await;
    setup.finish().await;
}

#[tokio::test]
async fn failover_under_write_load_keeps_every_acknowledged_write_and_the_old_primary_stays_read_only() {
    let setup = setup("mysql-failover").await;
    setup.create(3).await;
    ready(&setup.clusters, "main", 2).await;
    insert_items(setup.ip(0), 0..1).await;

    // A writer commits to the primary and remembers what was acknowledged (semi-sync: a
    // replica has each of them).
    let writer = support::Writer::start(setup.ip(0), "under load");
    writer.committed(200).await;
    let killed_at = jiff::Timestamp::now();
    setup.members.kill(setup.ns(), "main-0").await;
    let acknowledged = writer.stop(Duration::from_secs(20)).await;

    let status = setup
        .status_until(
            "a failover to a replica",
            Duration::from_secs(90),
            |status| match (&status.primary, &status.last_failover) {
                (Some(primary), Some(record)) if primary != "main-0" && record.kind == "Failover" => {
                    Ok(status)
                }
                _ => Err(format!("{:?} {:?}", status.primary, status.conditions)),
            },
        )
        .await;
    let record = status.last_failover.clone().unwrap();
    assert_eq!(record.from, "main-0");
    assert!(record.duration_millis >= 0);
    // Timed from the operator's first failed observation of main-0, which came after the kill
    // and before the decision to fail over (status times are whole seconds: one second of
    // slack).
    let lost_at = record
        .lost_at
        .clone()
        .expect("a failover records when the primary was lost")
        .0;
    let from_loss = record
        .from_loss_millis
        .expect("a failover records its time from loss");
    assert!(
        lost_at >= killed_at - jiff::SignedDuration::from_secs(1),
        "{record:?}, killed at {killed_at}"
    );
    assert!(lost_at <= record.started_at.0, "{record:?}");
    assert!(from_loss > 0 && from_loss >= record.duration_millis, "{record:?}");
    let kill_to_writable = record.completed_at.0.duration_since(killed_at).as_millis() as i64;
    assert!(
        from_loss <= kill_to_writable + 1_000,
        "{record:?}, killed at {killed_at}"
    );
    let new_primary: usize = status
        .primary
        .as_deref()
        .unwrap()
        .trim_start_matches("main-")
        .parse()
        .unwrap();

    // Every acknowledged write is on the new primary.
    assert!(acknowledged.len() >= 200);
    let present: BTreeSet<u64> = wait::until("the new primary answers", Duration::from_secs(30), || async {
        item_ids(setup.ip(new_primary)).await
    })
    .await
    .into_iter()
    .collect();
    let lost: Vec<&u64> = acknowledged.difference(&present).collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost in the failover: {lost:?}"
    );
    // The new primary takes writes.
    let mut conn = app_connection(setup.ip(new_primary)).await.expect("new primary");
    conn.exec_drop("INSERT INTO items VALUES (?, 'after failover')", (5_000_000u64,))
        .await
        .expect("the new primary accepts writes");

    // The old primary, restarted (its pod replaced on the same volume), does not accept writes.
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), setup.ns());
    pods.delete("main-0", &DeleteParams::default())
        .await
        .expect("delete the old primary's pod");
    let mut old = wait::until("the old primary is back", Duration::from_secs(90), || async {
        app_connection(setup.ip(0)).await.map_err(|e| e.to_string())
    })
    .await;
    let refused = old
        .exec_drop("INSERT INTO items VALUES (?, 'split brain')", (9_000_000u64,))
        .await
        .expect_err("the old primary must not accept writes");
    assert!(
        refused.to_string().contains("read-only") || refused.to_string().contains("READ-ONLY"),
        "{refused}"
    );
    let status = setup.clusters.get("main").await.unwrap().status.unwrap();
    assert_eq!(
        status.primary.as_deref(),
        Some(format!("main-{new_primary}").as_str())
    );
    setup.finish().await;
}

#[tokio::test]
async fn a_primary_blackholed_from_the_operator_only_is_not_failed_over() {
    let setup = setup("mysql-blackhole").await;
    setup.create(3).await;
    ready(&setup.clusters, "main", 2).await;

    // The operator reaches the primary through a proxy; the replicas still connect directly.
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), (setup.ip(0), 3306).into())
        .await
        .expect("fault proxy");
    let key = format!("{}/main", setup.ns());
    setup
        .operator
        .context
        .state
        .clients
        .route(&key, 0, proxy.address())
        .await;
    ready(&setup.clusters, "main", 2).await;

    proxy.set(Fault::Blackhole);
    let unknown = setup
        .status_until(
            "the primary reported Unknown",
            Duration::from_secs(60),
            |status| {
                let primary = status.members.iter().find(|m| m.name == "main-0").cloned();
                match primary {
                    Some(member) if member.health == "Unknown" => Ok(status),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    assert_eq!(unknown.primary.as_deref(), Some("main-0"));
    // Long enough for many passes and the breaker to open and probe again.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let status = setup.clusters.get("main").await.unwrap().status.unwrap();
    assert_eq!(
        status.primary.as_deref(),
        Some("main-0"),
        "no failover on Unknown"
    );
    assert!(status.last_failover.is_none());
    assert!(status.in_flight.is_none());
    assert!(setup.events("FailingOver").await.is_empty());
    let progressing = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(progressing.reason, "PrimaryUnknown", "{}", progressing.message);
    // The primary still serves: writes succeed and reach the replicas.
    insert_items(setup.ip(0), 0..10).await;
    converges(setup.ip(1), &(0..10).collect::<Vec<_>>()).await;

    proxy.set(Fault::None);
    ready(&setup.clusters, "main", 2).await;
    setup.finish().await;
}

#[tokio::test]
async fn a_backup_is_a_consistent_snapshot_and_a_switchover_under_writes_loses_nothing() {
    let setup = setup("mysql-switch").await;
    setup.create(2).await;
    ready(&setup.clusters, "main", 1).await;
    insert_items(setup.ip(0), 0..50).await;

    // An on-demand backup, read from the caught-up replica, lands in the destination with the
    // GTID position it corresponds to.
    let directory = std::env::temp_dir().join(format!("quorum-mysql-backups-{}", setup.ns()));
    let status = setup.backup_now("now", &directory).await;
    assert_eq!(
        status.run.member.as_deref(),
        Some("main-1"),
        "read from the caught-up replica"
    );
    assert!(status.gtid_position.as_deref().is_some_and(|p| !p.is_empty()));
    let record = status.run.last_snapshot.expect("snapshot record");
    let path = record.location.trim_start_matches("file://");
    let snapshot = std::fs::read_to_string(path).expect("the stored snapshot");
    assert!(
        snapshot.starts_with("-- quorum-mysql-snapshot"),
        "{}",
        &snapshot[..80.min(snapshot.len())]
    );
    assert_eq!(
        snapshot.matches("'item ").count(),
        50,
        "every row is in the snapshot"
    );
    let on_cluster = setup
        .clusters
        .get("main")
        .await
        .unwrap()
        .status
        .unwrap()
        .last_backup;
    assert_eq!(on_cluster.map(|b| b.sha256), Some(record.sha256));

    // A switchover asked for while a writer commits: every acknowledged write is on the new
    // primary, and the old one rejoins as a replica.
    let writer = support::Writer::start(setup.ip(0), "during switchover");
    writer.committed(50).await;
    // The cluster as a watch cache could still hand it to a pass after the switchover: main-0
    // primary, at the version before it.
    let before_switchover = setup.clusters.get("main").await.unwrap();
    assert_eq!(
        before_switchover.status.as_ref().unwrap().primary.as_deref(),
        Some("main-0")
    );
    setup
        .clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"mysql.quorum.dev/switchover-to": "main-1"}}})),
        )
        .await
        .expect("ask for a switchover");
    let acknowledged = writer.stop(Duration::from_secs(60)).await;
    let status = wait::until("the switchover", Duration::from_secs(90), || async {
        let cluster = setup.clusters.get("main").await.map_err(|e| e.to_string())?;
        let status = cluster.status.clone().unwrap_or_default();
        let done = status.primary.as_deref() == Some("main-1")
            && status
                .last_failover
                .as_ref()
                .is_some_and(|f| f.kind == "Switchover")
            && !cluster
                .metadata
                .annotations
                .unwrap_or_default()
                .contains_key("mysql.quorum.dev/switchover-to");
        if done {
            Ok(status)
        } else {
            Err(format!("{:?} {:?}", status.primary, status.conditions))
        }
    })
    .await;
    assert_eq!(status.last_failover.unwrap().from, "main-0");
    let present: BTreeSet<u64> = item_ids(setup.ip(1))
        .await
        .expect("new primary")
        .into_iter()
        .collect();
    let lost: Vec<&u64> = acknowledged.difference(&present).collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost in the switchover: {lost:?}"
    );
    let status = ready(&setup.clusters, "main", 1).await;
    let old = status.members.iter().find(|m| m.name == "main-0").unwrap();
    assert_eq!(old.role, "Replica");
    let expected: Vec<u64> = item_ids(setup.ip(1)).await.unwrap();
    converges(setup.ip(0), &expected).await;

    // A pass woken with a copy from before the switchover (a watch cache behind the status
    // writes still names main-0, now a read-only replica, as primary) decides on the stored
    // status: main-0 is not reopened as a second writable primary.
    mysql_operator::reconcile::reconcile(Arc::new(before_switchover), setup.operator.context.clone())
        .await
        .expect("a pass");
    let refused = app_connection(setup.ip(0))
        .await
        .expect("main-0 answers")
        .exec_drop("INSERT INTO items VALUES (?, 'second primary')", (8_000_000u64,))
        .await
        .expect_err("main-0 must stay read-only");
    assert!(
        refused.to_string().to_lowercase().contains("read-only"),
        "{refused}"
    );
    let status = setup.clusters.get("main").await.unwrap().status.unwrap();
    assert_eq!(status.primary.as_deref(), Some("main-1"));
    setup.finish().await;
}

/// A switchover whose target cannot apply the primary's transactions in time is given up once:
/// the primary is reopened, its record and the request go, a `SwitchoverRefused` warning says
/// why, and nothing is tried again (before, every retry made the primary read-only once more).
#[tokio::test]
async fn a_switchover_the_target_cannot_catch_up_with_is_given_up_once_and_the_primary_keeps_writing() {
    let setup = setup("mysql-abandoned").await;
    setup.create(3).await;
    ready(&setup.clusters, "main", 2).await;
    insert_items(setup.ip(0), 0..20).await;

    // main-2's applier waits behind a global read lock held by the test: replication stays
    // running, but what the primary commits from now on is not applied there.
    let root_password = setup.root_password().await;
    let mut lock = session(setup.ip(2), "root", &root_password).await;
    lock.query_drop("FLUSH TABLES WITH READ LOCK")
        .await
        .expect("a global read lock on main-2");
    insert_items(setup.ip(0), 20..30).await;

    setup
        .clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"mysql.quorum.dev/switchover-to": "main-2"}}})),
        )
        .await
        .expect("ask for a switchover");
    wait::until("the switchover given up", Duration::from_secs(120), || async {
        let cluster = setup.clusters.get("main").await.map_err(|e| e.to_string())?;
        let status = cluster.status.clone().unwrap_or_default();
        let asked = cluster
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("mysql.quorum.dev/switchover-to");
        let refused = setup.events("SwitchoverRefused").await;
        (!asked && status.in_flight.is_none() && !refused.is_empty())
            .then_some(())
            .ok_or(format!(
                "asked: {asked}, in flight: {:?}, refused: {refused:?}, {:?}",
                status.in_flight, status.conditions
            ))
    })
    .await;
    let refused = setup.events("SwitchoverRefused").await;
    assert!(
        refused
            .iter()
            .any(|m| m.contains("main-2") && m.contains("the primary was reopened")),
        "{refused:?}"
    );
    // Once: the record went with the refusal, so no later pass resumed the switchover (each
    // attempt makes the primary read-only while the target fails to catch up).
    assert_eq!(
        setup.event_occurrences("SwitchoverRefused").await,
        1,
        "{refused:?}"
    );
    // The primary takes writes again and keeps them.
    insert_items(setup.ip(0), 30..40).await;

    // Once main-2 applies again it catches up, and nothing moves the primary.
    lock.query_drop("UNLOCK TABLES").await.expect("unlock");
    drop(lock);
    let expected: Vec<u64> = item_ids(setup.ip(0)).await.unwrap();
    assert_eq!(expected.len(), 40);
    converges(setup.ip(2), &expected).await;
    let status = ready(&setup.clusters, "main", 2).await;
    assert_eq!(status.primary.as_deref(), Some("main-0"));
    assert!(status.in_flight.is_none(), "{:?}", status.in_flight);
    setup.finish().await;
}

#[tokio::test]
async fn a_refused_step_is_reported_leaves_replication_as_it_was_and_completes_once_allowed() {
    let setup = setup("mysql-refused").await;
    setup.create(3).await;
    ready(&setup.clusters, "main", 2).await;
    insert_items(setup.ip(0), 0..20).await;

    // On the member that will leave, and only there (nothing of this is binary-logged), the
    // operator's account loses the privilege to stop replication. An account of the test's
    // own keeps every privilege, to give it back later.
    let root_password = setup.root_password().await;
    let leaving = setup.ip(2);
    let mut root = session(leaving, "root", &root_password).await;
    root.query_drop(
        "SET SESSION sql_log_bin = 0; \
         CREATE USER 'dba'@'%' IDENTIFIED BY 'dba-Pa55'; \
         GRANT ALL PRIVILEGES ON *.* TO 'dba'@'%' WITH GRANT OPTION",
    )
    .await
    .expect("a DBA account on main-2");
    drop(root);
    let mut dba = session(leaving, "dba", "dba-Pa55").await;
    dba.query_drop(
        "SET SESSION sql_log_bin = 0; \
         REVOKE SUPER, REPLICATION SLAVE ADMIN ON *.* FROM 'root'@'%'",
    )
    .await
    .expect("revoke");
    // A session keeps the global privileges it logged in with; the operator's sessions are
    // ended so that its next ones have what is now granted, as after a restart.
    let sessions: Vec<u64> = dba
        .query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'root'")
        .await
        .unwrap();
    for id in sessions {
        let _ = dba.query_drop(format!("KILL CONNECTION {id}")).await;
    }

    // Scale in: the operator stops replication on main-2 before removing it, and is refused.
    setup
        .clusters
        .patch_scale(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale to 2");
    let refused = setup
        .status_until(
            "the refused step in the Progressing condition",
            Duration::from_secs(90),
            |status| match status.conditions.iter().find(|c| c.type_ == "Progressing") {
                Some(c) if c.reason == "StepFailed" && c.message.contains("refused") => Ok(status),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    let progressing = refused
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(progressing.status, "True");
    for part in [
        "stopping replication on main-2 and removing it failed; nothing else was changed",
        "STOP SLAVE refused: error 1227",
        "REPLICATION SLAVE ADMIN",
    ] {
        assert!(
            progressing.message.contains(part),
            "{part}: {}",
            progressing.message
        );
    }
    let events = setup.events("StepFailed").await;
    assert!(
        events
            .iter()
            .any(|m| m.contains("main-2") && m.contains("STOP SLAVE refused: error 1227")),
        "{events:?}"
    );

    // Replication is as it was: same primary, main-2 still a replica of it and in the
    // replicas Service, its pod still there, and writes reach every member.
    assert_eq!(refused.primary.as_deref(), Some("main-0"));
    let in_flight = refused
        .in_flight
        .expect("the removal stays recorded until it is done");
    assert_eq!(
        (in_flight.action.as_str(), in_flight.member.as_str()),
        ("RemoveMember", "main-2")
    );
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), setup.ns());
    let replicas = statefulsets.get("main").await.unwrap().spec.unwrap().replicas;
    assert_eq!(
        replicas,
        Some(3),
        "main-2 is not removed while it still replicates"
    );
    let replica_status: Vec<mysql_async::Row> = dba.query("SHOW SLAVE STATUS").await.unwrap();
    let row = replica_status.first().expect("main-2 is still a replica");
    let column = |name: &str| row.get::<String, _>(name).unwrap_or_default();
    assert_eq!(
        (
            column("Slave_IO_Running"),
            column("Slave_SQL_Running"),
            column("Master_Host")
        ),
        ("Yes".to_string(), "Yes".to_string(), setup.ip(0).to_string())
    );
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), setup.ns());
    for (pod, role) in [
        ("main-0", "primary"),
        ("main-1", "replica"),
        ("main-2", "replica"),
    ] {
        let labels = pods.get(pod).await.unwrap().metadata.labels.unwrap_or_default();
        assert_eq!(labels.get(ROLE_LABEL).map(String::as_str), Some(role), "{pod}");
    }
    insert_items(setup.ip(0), 20..40).await;
    let written: Vec<u64> = (0..40).collect();
    converges(setup.ip(1), &written).await;
    converges(leaving, &written).await;

    // The privilege comes back: the removal completes without anyone touching the operator.
    dba.query_drop(
        "SET SESSION sql_log_bin = 0; \
         GRANT SUPER, REPLICATION SLAVE ADMIN ON *.* TO 'root'@'%'",
    )
    .await
    .expect("grant");
    drop(dba);
    let status = ready(&setup.clusters, "main", 1).await;
    assert_eq!(status.replicas, 2);
    assert_eq!(status.in_flight, None);
    assert_eq!(status.primary.as_deref(), Some("main-0"));
    let replicas = statefulsets.get("main").await.unwrap().spec.unwrap().replicas;
    assert_eq!(replicas, Some(2));
    assert!(
        setup
            .events("RemovingMember")
            .await
            .iter()
            .any(|m| m.contains("main-2"))
    );
    insert_items(setup.ip(0), 40..50).await;
    converges(setup.ip(1), &(0..50).collect::<Vec<_>>()).await;
    setup.finish().await;
}

/// The replica that received the most is promoted, not the one that applied the most: semi-sync
/// acknowledges a transaction once a replica has received it, so a replica slow to apply may hold
/// acknowledged writes no other member has. It applies its relay log before it opens.
#[tokio::test]
async fn failover_promotes_the_replica_that_received_the_most_after_it_applies_what_it_received() {
    let setup = setup("mysql-received").await;
    setup.create(3).await;
    ready(&setup.clusters, "main", 2).await;
    insert_items(setup.ip(0), 0..1).await;
    for ordinal in [1, 2] {
        converges(setup.ip(ordinal), &[0]).await;
    }
    let root_password = setup.root_password().await;

    // With the operator stopped, so it repairs nothing meanwhile: main-1 receives everything but
    // applies nothing (a global read lock holds its applier), main-2 applies rows 1 to 10 and
    // then stops receiving, and rows 11 to 20 are acknowledged by main-1 alone.
    let ip: Vec<std::net::Ipv4Addr> = (0..3).map(|ordinal| setup.ip(ordinal)).collect();
    let stopped = setup.stop_operator().await;
    let mut slow_applier = session(ip[1], "root", &root_password).await;
    slow_applier
        .query_drop("FLUSH TABLES WITH READ LOCK")
        .await
        .expect("hold main-1's applier");
    insert_items(ip[0], 1..11).await;
    let mut stopped_receiver = session(ip[2], "root", &root_password).await;
    converges(ip[2], &(0..11).collect::<Vec<_>>()).await;
    stopped_receiver
        .query_drop("STOP SLAVE IO_THREAD")
        .await
        .expect("stop main-2 receiving");
    insert_items(ip[0], 11..21).await;
    let acknowledged: Vec<u64> = (0..21).collect();

    // The primary crashes; main-2's receiver tries again and finds it gone.
    stopped.members.kill(stopped.ns(), "main-0").await;
    stopped_receiver
        .query_drop("START SLAVE IO_THREAD")
        .await
        .expect("restart main-2's receiver");
    drop(stopped_receiver);
    let setup = stopped.start_operator();

    // The failover goes to main-1 and waits there until main-1 applied what it received.
    setup
        .status_until(
            "a failover to main-1 in flight",
            Duration::from_secs(90),
            |status| match &status.in_flight {
                Some(step) if step.action == "Failover" && step.member == "main-1" => Ok(()),
                other => Err(format!("in flight {other:?}, primary {:?}", status.primary)),
            },
        )
        .await;
    slow_applier
        .query_drop("UNLOCK TABLES")
        .await
        .expect("release main-1's applier");
    drop(slow_applier);

    let status = setup
        .status_until(
            "main-1 the new primary, the failover recorded",
            Duration::from_secs(90),
            |status| match (status.primary.as_deref(), &status.last_failover) {
                (Some("main-1"), Some(_)) => Ok(status),
                (other, _) => Err(format!("primary {other:?}, {:?}", status.conditions)),
            },
        )
        .await;
    assert_eq!(
        status.last_failover.map(|record| record.from).as_deref(),
        Some("main-0")
    );
    let present = item_ids(setup.ip(1)).await.expect("the new primary answers");
    let lost: Vec<&u64> = acknowledged.iter().filter(|id| !present.contains(id)).collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost in the failover: {lost:?}"
    );
    eprintln!("{} acknowledged writes checked, none lost", acknowledged.len());
    setup.finish().await;
}

/// A Secret someone else made under the name of the cluster's generated root password is never
/// taken as the cluster's: no member starts on a password the operator did not make, the cluster
/// says which object is in the way, and the Secret is left as it was.
#[tokio::test]
async fn a_same_name_secret_not_created_by_the_cluster_is_never_used_as_its_password() {
    let setup = setup("mysql-foreign").await;
    let secrets: Api<Secret> = Api::namespaced(setup.client.clone(), setup.ns());
    let theirs: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "main-root"},
        "stringData": {"password": "someone-elses-password"},
    }))
    .unwrap();
    let theirs = secrets.create(&PostParams::default(), &theirs).await.unwrap();
    setup.create(1).await;

    let message = setup
        .status_until(
            "the cluster to report the Secret in the way",
            Duration::from_secs(30),
            |status| {
                status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "ObjectNotOwned")
                    .map(|c| c.message.clone())
                    .ok_or_else(|| format!("{:?}", status.conditions))
            },
        )
        .await;
    assert!(
        message.contains("Secret main-root was not created by this cluster"),
        "{message}"
    );
    let events = wait::until("the ObjectNotOwned event", Duration::from_secs(30), || async {
        let events = setup.events("ObjectNotOwned").await;
        if events.is_empty() {
            Err("none yet".to_string())
        } else {
            Ok(events)
        }
    })
    .await;
    assert!(events[0].contains("Secret main-root"), "{events:?}");
    let now = secrets.get("main-root").await.unwrap();
    assert_eq!(
        now.metadata.resource_version, theirs.metadata.resource_version,
        "their Secret is not written"
    );
    assert!(
        Api::<StatefulSet>::namespaced(setup.client.clone(), setup.ns())
            .get_opt("main")
            .await
            .unwrap()
            .is_none(),
        "no member is started on someone else's password"
    );

    // Once it is gone the cluster generates its own and forms.
    secrets
        .delete("main-root", &DeleteParams::default())
        .await
        .unwrap();
    ready(&setup.clusters, "main", 0).await;
    assert_ne!(setup.root_password().await, "someone-elses-password");
    setup.finish().await;
}

/// `@@GLOBAL.binlog_expire_logs_seconds` on `ip`, through the root account.
async fn binlog_expiry(ip: std::net::Ipv4Addr, root_password: &str) -> Result<u32, String> {
    let options = mysql_async::OptsBuilder::default()
        .ip_or_hostname(ip.to_string())
        .tcp_port(3306)
        .user(Some("root"))
        .pass(Some(root_password))
        .prefer_socket(false);
    let mut conn = mysql_async::Conn::new(options).await.map_err(|e| e.to_string())?;
    let seconds: Option<u32> = conn
        .query_first("SELECT @@GLOBAL.binlog_expire_logs_seconds")
        .await
        .map_err(|e| e.to_string())?;
    seconds.ok_or_else(|| "no value".to_string())
}

/// Binary logs expire (`spec.replication.binlogExpireSeconds`) while every member replicates,
/// and none expires while a member is down: it comes back and catches up on everything written
/// meanwhile, from the primary's logs.
#[tokio::test]
async fn binary_logs_expire_while_all_replicate_and_are_kept_for_a_member_that_is_down() {
    let setup = setup("mysql-binlogs").await;
    let mut spec = support::cluster_spec(2);
    spec.replication = Some(mysql_operator::crd::ReplicationSpec {
        mode: mysql_operator::crd::ReplicationMode::Async,
        binlog_expire_seconds: 1,
        ..Default::default()
    });
    setup
        .clusters
        .create(
            &PostParams::default(),
            &mysql_operator::crd::MySQLCluster::new("main", spec),
        )
        .await
        .expect("create MySQLCluster");
    ready(&setup.clusters, "main", 1).await;
    insert_items(setup.ip(0), 0..20).await;
    let root_password = setup.root_password().await;
    let expiry_becomes = |ip, seconds: u32| {
        let root_password = root_password.clone();
        async move {
            wait::until(
                &format!("{ip}'s binary log expiry to be {seconds} s"),
                Duration::from_secs(60),
                || async {
                    match binlog_expiry(ip, &root_password).await? {
                        found if found == seconds => Ok(()),
                        found => Err(format!("{found} s")),
                    }
                },
            )
            .await
        }
    };
    expiry_becomes(setup.ip(0), 1).await;
    expiry_becomes(setup.ip(1), 1).await;
    let mut root = session(setup.ip(0), "root", &root_password).await;
    let first = binary_logs_after_rotation(&mut root).await[0].clone();
    wait::until(
        "the oldest binary log to expire",
        Duration::from_secs(30),
        || async {
            let logs =
                binary_logs_after_rotation(&mut session(setup.ip(0), "root", &root_password).await).await;
            if logs.contains(&first) {
                Err(format!("{logs:?}"))
            } else {
                Ok(())
            }
        },
    )
    .await;

    // The replica goes down: every member keeps its logs from then on.
    setup.members.kill(setup.ns(), "main-1").await;
    expiry_becomes(setup.ip(0), 0).await;
    insert_items(setup.ip(0), 20..60).await;
    let written_while_down = binary_logs_after_rotation(&mut root).await;
    // Older than the expiry by the server's own clock, the logs would now be purged at the
    // next rotation.
    let since: f64 = root
        .query_first("SELECT UNIX_TIMESTAMP(NOW(6))")
        .await
        .unwrap()
        .unwrap();
    wait::until(
        "the logs to age past the expiry",
        Duration::from_secs(10),
        || async {
            let now: f64 = session(setup.ip(0), "root", &root_password)
                .await
                .query_first("SELECT UNIX_TIMESTAMP(NOW(6))")
                .await
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            if now - since > 2.0 {
                Ok(())
            } else {
                Err(format!("{:.1} s", now - since))
            }
        },
    )
    .await;
    let after = binary_logs_after_rotation(&mut root).await;
    for log in &written_while_down {
        assert!(
            after.contains(log),
            "{log} purged while main-1 was down: {after:?}"
        );
    }

    // Back (its pod replaced), it catches up on every acknowledged write from those logs, and
    // logs expire again.
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), setup.ns());
    pods.delete("main-1", &DeleteParams::default()).await.unwrap();
    let written: Vec<u64> = (0..60).collect();
    converges(setup.ip(1), &written).await;
    expiry_becomes(setup.ip(0), 1).await;
    drop(root);
    setup.finish().await;
}

/// A member holding transactions the primary does not (errant) is kept out of service, and
/// every other member is still wired: here a replica whose replication was stopped is pointed
/// at the primary again and receives every write made since.
#[tokio::test]
async fn an_errant_member_does_not_keep_the_others_from_replicating() {
    let setup = setup("mysql-errant").await;
    setup.create(3).await;
    ready(&setup.clusters, "main", 2).await;
    insert_items(setup.ip(0), 0..10).await;
    let written: Vec<u64> = (0..10).collect();
    converges(setup.ip(1), &written).await;
    converges(setup.ip(2), &written).await;
    let root_password = setup.root_password().await;

    // main-1 stops replicating and commits a transaction of its own, in one go, so the operator
    // never sees it stopped and clean.
    let mut errant = session(setup.ip(1), "root", &root_password).await;
    errant
        .query_drop(
            "STOP SLAVE; SET GLOBAL read_only = OFF; \
             CREATE DATABASE only_on_main_1; SET GLOBAL read_only = ON",
        )
        .await
        .expect("an errant transaction on main-1");
    drop(errant);
    setup
        .status_until("main-1 reported errant", Duration::from_secs(60), |status| {
            status
                .members
                .iter()
                .any(|m| m.name == "main-1" && m.errant.is_some())
                .then_some(())
                .ok_or_else(|| format!("{:?}", status.members))
        })
        .await;

    // main-2's replication stops too: it is pointed at the primary again all the same.
    let mut other = session(setup.ip(2), "root", &root_password).await;
    other
        .query_drop("STOP SLAVE")
        .await
        .expect("STOP SLAVE on main-2");
    drop(other);
    // Semi-sync without fallback: commits wait until a replica receives them again.
    tokio::time::timeout(Duration::from_secs(90), insert_items(setup.ip(0), 10..40))
        .await
        .expect("commits acknowledged once main-2 replicates again");
    let written: Vec<u64> = (0..40).collect();
    converges(setup.ip(2), &written).await;
    let status = setup
        .status_until(
            "main-1 still reported errant, the rest replicating",
            Duration::from_secs(60),
            |status| {
                let errant = status
                    .members
                    .iter()
                    .any(|m| m.name == "main-1" && m.errant.is_some());
                let reported = status.conditions.iter().any(|c| {
                    c.type_ == "Degraded" && c.reason == "ErrantTransactions" && c.message.contains("main-1")
                });
                (errant && reported)
                    .then_some(status.clone())
                    .ok_or_else(|| format!("{:?} {:?}", status.members, status.conditions))
            },
        )
        .await;
    assert_eq!(status.primary.as_deref(), Some("main-0"));
    // Nothing of main-1 was discarded.
    let mut errant = session(setup.ip(1), "root", &root_password).await;
    let kept: Option<String> = errant
        .query_first("SHOW DATABASES LIKE 'only_on_main_1'")
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("only_on_main_1"));
    drop(errant);
    setup.finish().await;
}

/// A SemiSync primary crashes while a commit waits for an acknowledgement, and the operator
/// fails over. When the old primary's pod is replaced, its server starts on its volume as every
/// member does (recovering as a replica would): it discards the commit nobody acknowledged and
/// rejoins as a replica of the new primary instead of being errant; every acknowledged write is
/// on every member, and they all hold the same rows.
#[tokio::test]
async fn a_primary_crashed_mid_commit_rejoins_as_a_replica_after_the_failover() {
    let setup = setup("mysql-rejoin").await;
    setup.create(3).await;
    ready(&setup.clusters, "main", 2).await;
    insert_items(setup.ip(0), 0..20).await;
    let acknowledged: Vec<u64> = (0..20).collect();
    for ordinal in [1, 2] {
        converges(setup.ip(ordinal), &acknowledged).await;
    }
    let root_password = setup.root_password().await;
    let ip: Vec<std::net::Ipv4Addr> = (0..3).map(|ordinal| setup.ip(ordinal)).collect();

    // With the operator stopped (it would restart what the test stops), both replicas stop
    // receiving: the next commit is written to the primary's binary log and waits.
    let stopped = setup.stop_operator().await;
    let mut receivers = Vec::new();
    for ordinal in [1, 2] {
        let mut receiver = session(ip[ordinal], "root", &root_password).await;
        receiver
            .query_drop("STOP SLAVE IO_THREAD")
            .await
            .expect("stop receiving");
        receivers.push(receiver);
    }
    let primary_ip = ip[0];
    let in_doubt = tokio::spawn(async move {
        let mut conn = app_connection(primary_ip).await?;
        conn.exec_drop("INSERT INTO items VALUES (?, ?)", (500u64, "in doubt"))
            .await
    });
    wait::until(
        "the commit waiting for an acknowledgement",
        Duration::from_secs(30),
        || async {
            let mut primary_root = session(ip[0], "root", &root_password).await;
            let waiting: Option<String> = primary_root
                .query_first(
                    "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                 WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_WAIT_SESSIONS'",
                )
                .await
                .map_err(|e| e.to_string())?;
            (waiting.as_deref() == Some("1"))
                .then_some(())
                .ok_or_else(|| format!("{waiting:?} waiting"))
        },
    )
    .await;

    // The primary crashes; the replicas try their source again and find it gone.
    stopped.members.kill(stopped.ns(), "main-0").await;
    assert!(
        in_doubt.await.unwrap().is_err(),
        "the in-doubt commit was acknowledged"
    );
    for receiver in &mut receivers {
        receiver
            .query_drop("START SLAVE IO_THREAD")
            .await
            .expect("receive again");
    }
    drop(receivers);
    let setup = stopped.start_operator();
    let status = setup
        .status_until(
            "a failover away from main-0",
            Duration::from_secs(120),
            |status| match (status.primary.as_deref(), &status.last_failover) {
                (Some(primary), Some(record)) if primary != "main-0" && record.from == "main-0" => Ok(status),
                (other, _) => Err(format!("primary {other:?}, {:?}", status.conditions)),
            },
        )
        .await;
    let new_primary = status.primary.clone().unwrap();

    // The old primary's pod is replaced; its server restarts on its volume.
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), setup.ns());
    pods.delete("main-0", &DeleteParams::default()).await.unwrap();
    let status = setup
        .status_until(
            "main-0 back as a replica of the new primary",
            Duration::from_secs(180),
            |status| {
                let old = status.members.iter().find(|member| member.name == "main-0");
                match old {
                    Some(member)
                        if member.role == "Replica"
                            && member.health == "Healthy"
                            && member.errant.is_none() =>
                    {
                        Ok(status)
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    assert_eq!(status.primary.as_deref(), Some(new_primary.as_str()));
    ready(&setup.clusters, "main", 2).await;
    let on_new_primary =
        item_ids(setup.ip_of("main", new_primary.trim_start_matches("main-").parse().unwrap()))
            .await
            .expect("the new primary answers");
    let lost: Vec<&u64> = acknowledged
        .iter()
        .filter(|id| !on_new_primary.contains(id))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    for ordinal in 0..3 {
        converges(setup.ip(ordinal), &on_new_primary).await;
    }
    eprintln!(
        "{} acknowledged writes checked, none lost; every member holds the same {} rows",
        acknowledged.len(),
        on_new_primary.len()
    );
    setup.finish().await;
}

#[tokio::test]
async fn backup_stale_turns_true_without_a_recent_backup_and_false_with_one_and_the_metric_follows() {
    let setup = setup("mysql-stale").await;
    let ns = setup.ns().to_string();
    let directory = std::env::temp_dir().join(format!("quorum-mysql-backups-{ns}"));
    let spec = mysql_operator::crd::MySQLClusterSpec {
        backup: Some(serde_json::from_value(quorum_e2e::backups::stale_after_a_minute(&directory)).unwrap()),
        ..support::cluster_spec(2)
    };
    setup
        .clusters
        .create(
            &PostParams::default(),
            &mysql_operator::crd::MySQLCluster::new("main", spec),
        )
        .await
        .expect("create MySQLCluster");
    ready(&setup.clusters, "main", 1).await;
    quorum_e2e::backups::backup_stale_until::<mysql_operator::crd::MySQLCluster>(
        &setup.client,
        &ns,
        "main",
        "True",
        Duration::from_secs(180),
    )
    .await;

    let completed_at = setup
        .backup_now("now", &directory)
        .await
        .run
        .completed_at
        .unwrap()
        .0;
    quorum_e2e::backups::backup_stale_until::<mysql_operator::crd::MySQLCluster>(
        &setup.client,
        &ns,
        "main",
        "False",
        Duration::from_secs(60),
    )
    .await;
    quorum_e2e::backups::assert_last_success(
        &setup.operator.context.metrics.render(),
        "mysql",
        &ns,
        "main",
        completed_at,
    );
}

/// The primary and a replica lost at once: the one replica left cannot testify alone, so the
/// operator promotes nothing by itself (a member that does not answer may hold the newest
/// acknowledged commits). A person who knows both are gone for good names the survivor with
/// `quorum.dev/recover-from`: a member that does not answer is refused with a record that says
/// why, the survivor is promoted once, recorded as done, and holds every acknowledged write
/// (the writer stopped and both replicas caught up before the loss). The lost members, back on
/// their volumes, rejoin as its replicas; removing the annotation ends the record.
#[tokio::test]
async fn a_recovery_request_promotes_the_named_survivor_of_a_lost_primary_and_replica() {
    use quorum_core::recovery::{RECOVER_ANNOTATION, RecoveryPhase};
    let setup = setup("mysql-recover").await;
    setup.create(3).await;
    ready(&setup.clusters, "main", 2).await;
    insert_items(setup.ip(0), 0..1).await;
    let writer = support::Writer::start(setup.ip(0), "before the loss");
    writer.committed(100).await;
    let acknowledged = writer.stop(Duration::from_secs(20)).await;
    for replica in [1, 2] {
        wait::until(
            &format!("member {replica} holds every acknowledged write"),
            Duration::from_secs(60),
            || async {
                let held: BTreeSet<u64> = item_ids(setup.ip(replica)).await?.into_iter().collect();
                let missing = acknowledged.difference(&held).count();
                if missing == 0 {
                    Ok(())
                } else {
                    Err(format!("{missing} missing"))
                }
            },
        )
        .await;
    }

    // A request made while nothing is lost is for no loss: it expires and is never taken.
    let annotate = |member: Option<&str>| {
        let patch = serde_json::json!({"metadata": {"annotations": {RECOVER_ANNOTATION: member}}});
        let clusters = setup.clusters.clone();
        async move {
            clusters
                .patch("main", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
        }
    };
    annotate(Some("main-1")).await;
    setup
        .status_until(
            "a request made early expired",
            Duration::from_secs(60),
            |status| match status.recovery {
                Some(record) if record.phase == RecoveryPhase::Expired => Ok(()),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    annotate(None).await;
    setup
        .status_until(
            "the expired record gone with its request",
            Duration::from_secs(60),
            |status| match status.recovery {
                None => Ok(()),
                Some(record) => Err(format!("{record:?}")),
            },
        )
        .await;

    setup.members.kill(setup.ns(), "main-0").await;
    setup.members.kill(setup.ns(), "main-2").await;
    setup
        .status_until(
            "the operator waiting on the lost members",
            Duration::from_secs(90),
            |status| {
                let waiting = status.conditions.iter().any(|c| {
                    c.type_ == "Progressing"
                        && ["PrimaryUnknown", "FailoverBlocked"].contains(&c.reason.as_str())
                });
                if waiting && status.primary.as_deref() == Some("main-0") {
                    Ok(())
                } else {
                    Err(format!("{:?} {:?}", status.primary, status.conditions))
                }
            },
        )
        .await;

    annotate(Some("main-2")).await;
    let refused = setup
        .status_until(
            "the request for a lost member refused",
            Duration::from_secs(60),
            |status| match status.recovery {
                Some(record) if record.member == "main-2" => Ok(record),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    assert_eq!(refused.phase, RecoveryPhase::Waiting, "{refused:?}");
    assert!(refused.message.contains("does not answer"), "{refused:?}");

    annotate(Some("main-1")).await;
    let status = setup
        .status_until(
            "main-1 promoted on request",
            Duration::from_secs(90),
            |status| match (&status.primary, &status.recovery) {
                (Some(primary), Some(record))
                    if primary == "main-1" && record.phase == RecoveryPhase::Done =>
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
    let record = status.recovery.clone().unwrap();
    assert_eq!(record.replaced.as_deref(), Some("main-0"), "{record:?}");
    let held: BTreeSet<u64> = item_ids(setup.ip(1)).await.unwrap().into_iter().collect();
    let lost: Vec<&u64> = acknowledged.difference(&held).collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");

    // The lost members come back on their volumes (their pods replaced) and follow main-1.
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), setup.ns());
    for lost in ["main-0", "main-2"] {
        pods.delete(lost, &DeleteParams::default()).await.unwrap();
    }
    let status = ready(&setup.clusters, "main", 2).await;
    assert_eq!(status.primary.as_deref(), Some("main-1"));
    let mut conn = app_connection(setup.ip(1)).await.expect("the new primary");
    conn.exec_drop(
        "INSERT INTO items VALUES (?, 'after the recovery')",
        (7_000_000u64,),
    )
    .await
    .expect("the new primary takes writes");

    annotate(None).await;
    setup
        .status_until(
            "the record gone with the request",
            Duration::from_secs(60),
            |status| match status.recovery {
                None => Ok(()),
                Some(record) => Err(format!("{record:?}")),
            },
        )
        .await;
    setup.finish().await;
}
