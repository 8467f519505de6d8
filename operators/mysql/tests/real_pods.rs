//! What a user runs, on the real node: the operator installed by its chart runs as a container
//! of its image, and the members are MariaDB containers from the StatefulSet the operator builds
//! (its `start.sh`, probes, security context and volumes), found through cluster DNS and reached
//! by clients through the primary and replicas Services. Nothing here starts a server itself.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::{collections::BTreeMap, time::Duration};

use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use mysql_async::{Pool, prelude::Queryable};
use mysql_operator::crd::{MySQLCluster, MySQLClusterStatus};
use quorum_core::repair::{RepairPhase, RepairRecord};
use quorum_e2e::{
    history::{History, Writer},
    real_node::{self, STORAGE_CLASS},
    real_pods::{self, OnRealNode},
    tools, wait,
};
use support::{APP_DATABASE, APP_PASSWORD, APP_USER};

const CHART: &str = "quorum-mysql-operator";
const CLUSTER: &str = "shop";
const MEMBERS: &str =
    "app.kubernetes.io/name=mysql,app.kubernetes.io/instance=shop,app.kubernetes.io/component=member";
const SERVER: &str = "mysqld";

/// A MariaDB cluster of `replicas` members placed on the real node, on local-path volumes.
fn real_cluster(replicas: i32) -> MySQLCluster {
    let mut spec = support::cluster_spec(replicas);
    spec.storage.storage_class_name = Some(STORAGE_CLASS.into());
    spec.pod_template = Some(real_node::pod_overrides());
    MySQLCluster::new(CLUSTER, spec)
}

/// The application's connections through a Service's cluster IP, as a client in the cluster
/// reaches it.
async fn service_pool(setup: &OnRealNode, service: &str) -> Pool {
    let ip = real_node::cluster_ip(&setup.admin, &setup.ns, service).await;
    let options = mysql_async::OptsBuilder::default()
        .ip_or_hostname(ip)
        .tcp_port(3306)
        .user(Some(APP_USER))
        .pass(Some(APP_PASSWORD))
        .db_name(Some(APP_DATABASE))
        .prefer_socket(false);
    Pool::new(options)
}

/// Runs `statement` on a connection from `pool`, retried while kube-proxy catches up with the
/// Service's endpoints.
async fn until_done(pool: &Pool, statement: &str) {
    wait::until(statement, Duration::from_secs(60), || async {
        let mut conn = pool.get_conn().await.map_err(|error| error.to_string())?;
        conn.query_drop(statement)
            .await
            .map_err(|error| error.to_string())
    })
    .await;
}

/// Creates the cluster (and its application account's Secret) and waits until the operator
/// reports it Ready and every member pod is Ready by its own probes on the real node.
async fn create_ready(setup: &OnRealNode, replicas: i32) -> MySQLClusterStatus {
    create_ready_as(setup, real_cluster(replicas)).await
}

/// As [`create_ready`], for `cluster` as given.
async fn create_ready_as(setup: &OnRealNode, cluster: MySQLCluster) -> MySQLClusterStatus {
    let replicas = cluster.spec.replicas;
    support::create_app_secret(&setup.admin, &setup.ns).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    clusters.create(&PostParams::default(), &cluster).await.unwrap();
    let status = support::ready(&clusters, CLUSTER, replicas - 1).await;
    setup
        .members_ready(MEMBERS, replicas as usize, Duration::from_secs(120))
        .await;
    status
}

/// The `history` table's rows on one server.
async fn rows(pool: &Pool) -> Result<BTreeMap<String, Option<String>>, String> {
    let mut conn = pool.get_conn().await.map_err(|error| error.to_string())?;
    let rows: Vec<(String, String)> = conn
        .query("SELECT k, v FROM history")
        .await
        .map_err(|error| error.to_string())?;
    Ok(rows.into_iter().map(|(key, value)| (key, Some(value))).collect())
}

/// A writer through the primary Service: one insert per interval, acknowledged when the commit
/// returned (semi-synchronously, so a replica holds it too).
async fn start_writer(primary: &Pool) -> Writer {
    until_done(
        primary,
        "CREATE TABLE IF NOT EXISTS history (k VARCHAR(64) PRIMARY KEY, v VARCHAR(64))",
    )
    .await;
    let primary = primary.clone();
    Writer::start("history", Duration::from_millis(200), 3_000, move |key, value| {
        let primary = primary.clone();
        async move {
            let insert = async {
                let mut conn = primary.get_conn().await?;
                conn.exec_drop("INSERT INTO history VALUES (?, ?)", (key, value))
                    .await
            };
            tokio::time::timeout(Duration::from_secs(5), insert)
                .await
                .is_ok_and(|done| done.is_ok())
        }
    })
}

/// Checks that the primary holds every acknowledged write and nothing invented, and that each
/// member converges to exactly the primary's rows; returns how many writes were checked.
async fn check_history(setup: &OnRealNode, primary: &Pool, history: &History, members: usize) -> usize {
    // Through the primary Service, retried while kube-proxy catches up with a primary that moved.
    let primary_rows = || wait::until("the primary's rows", Duration::from_secs(60), || rows(primary));
    let mut held: BTreeMap<String, Option<String>> = primary_rows().await;
    for operation in &history.operations {
        held.entry(operation.key.clone()).or_insert(None);
    }
    let checked = history
        .check(&held)
        .unwrap_or_else(|violations| panic!("lost or invented writes: {violations:#?}"));
    assert!(checked > 0, "the writer had no write acknowledged");
    let expected = primary_rows().await;
    for pod in setup
        .members_ready(MEMBERS, members, Duration::from_secs(60))
        .await
    {
        let ip = pod.status.unwrap().pod_ip.unwrap();
        let member = Pool::new(
            mysql_async::OptsBuilder::default()
                .ip_or_hostname(ip.clone())
                .tcp_port(3306)
                .user(Some(APP_USER))
                .pass(Some(APP_PASSWORD))
                .db_name(Some(APP_DATABASE))
                .prefer_socket(false),
        );
        wait::until(
            &format!("{ip} holds the primary's {} rows", expected.len()),
            Duration::from_secs(60),
            || async {
                let now = rows(&member).await?;
                if now == expected {
                    Ok(())
                } else {
                    Err(format!("{} rows", now.len()))
                }
            },
        )
        .await;
    }
    checked
}

/// Member `ordinal`'s pod name.
fn member(ordinal: usize) -> String {
    mysql_operator::resources::member_name(CLUSTER, ordinal)
}

/// The ordinal of the first member that is not the primary.
fn a_replica(status: &MySQLClusterStatus) -> usize {
    let primary = status.primary.as_deref().expect("a primary");
    (0..3).find(|ordinal| member(*ordinal) != primary).unwrap()
}

#[tokio::test]
async fn the_chart_installed_operator_forms_a_cluster_of_real_members() {
    let mut setup = OnRealNode::install("real-mysql", CHART, &[]).await;
    let status = create_ready(&setup, 3).await;
    let primary_pod = status.primary.clone().expect("a primary");

    // An application's write through the primary Service, read back through the replicas one.
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    until_done(
        &primary,
        "CREATE TABLE greeting (id INT PRIMARY KEY, text VARCHAR(64))",
    )
    .await;
    until_done(
        &primary,
        "INSERT INTO greeting VALUES (1, 'hello from a real pod')",
    )
    .await;
    let replicas = service_pool(&setup, &mysql_operator::resources::replicas_service_name(CLUSTER)).await;
    wait::until(
        "the write read through the replicas Service",
        Duration::from_secs(60),
        || async {
            let mut conn = replicas.get_conn().await.map_err(|error| error.to_string())?;
            let text: Option<String> = conn
                .query_first("SELECT text FROM greeting WHERE id = 1")
                .await
                .map_err(|error| error.to_string())?;
            text.filter(|text| text == "hello from a real pod")
                .ok_or_else(|| "not there yet".to_string())
        },
    )
    .await;

    // The members run as the server's account, not root; exec and logs work as a user expects.
    let uid = real_node::exec(&setup.ns, &primary_pod, SERVER, &["id", "-u"]);
    assert_eq!(uid.trim(), "999");
    let read = real_node::exec(
        &setup.ns,
        &primary_pod,
        SERVER,
        &[
            "sh",
            "-c",
            "mariadb -uroot -p\"$(cat /etc/mysql/credentials/root-password)\" -h\"$POD_IP\" -N -e 'SELECT text FROM shop.greeting'",
        ],
    );
    assert_eq!(read.trim(), "hello from a real pod");
    let log = real_node::logs(&setup.ns, &primary_pod, SERVER);
    assert!(log.contains("ready for connections"), "{log}");

    // Removing the operator leaves the databases serving.
    setup.uninstall_operator().await;
    setup.members_ready(MEMBERS, 3, Duration::from_secs(30)).await;
    let mut conn = primary.get_conn().await.unwrap();
    let count: Option<u64> = conn.query_first("SELECT COUNT(*) FROM greeting").await.unwrap();
    assert_eq!(count, Some(1));
    drop(conn);

    setup.remove().await;
}

/// A replica's server killed inside its container, then another member's pod deleted: the
/// kubelet restarts the one and the StatefulSet recreates the other on its volume; the operator
/// fails over, removes or reseeds nothing, and no acknowledged write is lost.
#[tokio::test]
async fn a_killed_server_or_a_deleted_pod_rejoins_with_its_data() {
    let setup = OnRealNode::install("real-mysql-restart", CHART, &[]).await;
    let status = create_ready(&setup, 3).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    let writer = start_writer(&primary).await;
    const DISRUPTIVE: [&str; 4] = ["FailingOver", "SwitchingOver", "RemovingMember", "SeedingMember"];
    let steps_before = setup.occurrences(&DISRUPTIVE).await;

    let killed = member(a_replica(&status));
    let volume = setup.claim_uid(&format!("data-{killed}")).await;
    setup
        .kill_and_await_restart(&killed, SERVER, Duration::from_secs(120))
        .await;
    support::ready(&clusters, CLUSTER, 2).await;
    assert_eq!(setup.claim_uid(&format!("data-{killed}")).await, volume);

    let deleted = member(
        (0..3)
            .find(|o| member(*o) != killed && Some(member(*o)) != status.primary)
            .unwrap(),
    );
    let volume = setup.claim_uid(&format!("data-{deleted}")).await;
    setup
        .delete_and_await_recreated(&deleted, Duration::from_secs(120))
        .await;
    support::ready(&clusters, CLUSTER, 2).await;
    assert_eq!(setup.claim_uid(&format!("data-{deleted}")).await, volume);

    let now = clusters.get(CLUSTER).await.unwrap().status.unwrap();
    assert_eq!(now.primary, status.primary, "the primary changed");
    assert_eq!(
        setup.occurrences(&DISRUPTIVE).await,
        steps_before,
        "steps were taken"
    );

    let history = writer.stop().await;
    let checked = check_history(&setup, &primary, &history, 3).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// Every member down at once, twice (every server killed, then every pod deleted), each time
/// back on its volume: the cluster comes back by itself with a primary serving the Service, no
/// member removed or seeded again, and no acknowledged write lost. It lost the write in flight at
/// the first kill in one run, before members wrote InnoDB's commit record at commit (their crash
/// recovery discarded it; `a_commit_acknowledged_just_before_every_member_is_killed_survives_on_the_primary`
/// shows the cause against real MariaDB).
#[tokio::test]
async fn a_total_outage_ends_with_every_member_back_and_every_acknowledged_write() {
    let setup = OnRealNode::install("real-mysql-outage", CHART, &[]).await;
    create_ready(&setup, 3).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    let writer = start_writer(&primary).await;
    const REBUILDS: [&str; 2] = ["RemovingMember", "SeedingMember"];
    let steps_before = setup.occurrences(&REBUILDS).await;
    writer.acknowledged_at_least(10, Duration::from_secs(60)).await;

    setup.total_outage(MEMBERS, Duration::from_secs(240)).await;
    support::ready(&clusters, CLUSTER, 2).await;
    writer
        .acknowledged_at_least(writer.acknowledged() + 10, Duration::from_secs(120))
        .await;

    assert_eq!(
        setup.occurrences(&REBUILDS).await,
        steps_before,
        "members were rebuilt"
    );
    let history = writer.stop().await;
    let checked = check_history(&setup, &primary, &history, 3).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// Asynchronous replication, every acknowledged write on every member, then the primary's
/// volume lost (its claim deleted with its pod, while the operator is stopped): the primary
/// comes back empty and read-only. It is not reopened over nothing: the replica holding everything takes over, the empty member is
/// seeded from it, and every acknowledged write is still served. It failed first: the operator
/// reopened the empty member as the primary, and the primary Service served an empty database.
#[tokio::test]
async fn an_async_primary_back_on_an_empty_volume_is_not_reopened_over_the_replicas_data() {
    async_primary_loses_its_volume("real-mysql-lost-primary", false).await;
}

/// The same while the replicas are down (their pods gone, their volumes kept) when the operator
/// comes back: they start after the empty primary. Status recorded the data claim the primary
/// was seen accepting writes on; back on another, it is not reopened before they answer, and the
/// replica holding everything takes over. Before, with no replica answering, the empty primary
/// was reopened at once and reported Ready with its replicas, which then held transactions
/// under GTIDs the primary would reuse (its decision table failed first, and so did this test
/// with only the GTIDs a pass saw recorded: they predated the writes).
#[tokio::test]
async fn an_async_primary_back_on_an_empty_volume_before_its_replicas_waits_for_them() {
    async_primary_loses_its_volume("real-mysql-lost-alone", true).await;
}

async fn async_primary_loses_its_volume(prefix: &str, replicas_down: bool) {
    let setup = OnRealNode::install(prefix, CHART, &[]).await;
    let mut cluster = real_cluster(3);
    cluster.spec.replication = Some(mysql_operator::crd::ReplicationSpec {
        mode: mysql_operator::crd::ReplicationMode::Async,
        ..Default::default()
    });
    let status = create_ready_as(&setup, cluster).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    let writer = start_writer(&primary).await;
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    // Asynchronous replication may lose what no replica received yet: the writer stops and
    // every member catches up before the volume goes, so every acknowledged write must stay.
    let history = writer.stop().await;
    check_history(&setup, &primary, &history, 3).await;

    if replicas_down {
        // What the operator knows of the primary's data: the volume it was seen accepting
        // writes on (recorded by the first pass that saw it open), whatever GTIDs a pass saw.
        let volume = setup.claim_uid(&format!("data-{}", member(0))).await;
        wait::until(
            "the primary's volume recorded",
            Duration::from_secs(120),
            || async {
                let status = clusters
                    .get(CLUSTER)
                    .await
                    .map_err(|error| error.to_string())?
                    .status
                    .unwrap_or_default();
                match status.primary_last_open {
                    Some(seen) if seen.member == member(0) && seen.volume.as_ref() == Some(&volume) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }

    // The operator stopped while the volume goes, so that it first sees the member back,
    // empty, rather than the primary down (which fails over before the member is back).
    setup.scale_operator(0).await;
    let lost = status.primary.clone().expect("a primary");
    assert_eq!(lost, member(0), "the first primary is member 0");
    let claim = format!("data-{lost}");
    let volume = setup.claim_uid(&claim).await;
    setup.claims().delete(&claim, &Default::default()).await.unwrap();
    setup
        .delete_and_await_recreated(&lost, Duration::from_secs(180))
        .await;
    assert_ne!(setup.claim_uid(&claim).await, volume, "{lost} kept its volume");
    let replicas = [member(1), member(2)];
    if replicas_down {
        setup.hold_off_the_node(CLUSTER, &replicas).await;
    }
    // The operator applies its own template again on its first pass; the replicas' pods
    // created while it was stopped stay unplaced until they are deleted again below.
    setup.scale_operator(1).await;
    if replicas_down {
        wait::until(
            "the empty primary held read-only while its replicas do not answer",
            Duration::from_secs(120),
            || async {
                let status = clusters
                    .get(CLUSTER)
                    .await
                    .map_err(|error| error.to_string())?
                    .status
                    .unwrap_or_default();
                let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing");
                match progressing {
                    Some(c)
                        if c.reason == "PrimaryReopenBlocked"
                            && c.message.contains("came back on a new volume") =>
                    {
                        Ok(())
                    }
                    _ => Err(format!("{:?} {progressing:?}", status.primary)),
                }
            },
        )
        .await;
        setup
            .place_template_on(CLUSTER, &real_node::node_selector()["type"])
            .await;
        for replica in &replicas {
            setup
                .delete_and_await_recreated(replica, Duration::from_secs(120))
                .await;
        }
    }

    let now = wait::until("another member primary", Duration::from_secs(240), || async {
        let status = clusters
            .get(CLUSTER)
            .await
            .map_err(|error| error.to_string())?
            .status
            .unwrap_or_default();
        match &status.primary {
            Some(primary) if *primary != lost => Ok(status),
            other => Err(format!("{other:?} {:?}", status.conditions)),
        }
    })
    .await;
    eprintln!("{lost} lost its volume; {:?} took over", now.primary);
    support::ready(&clusters, CLUSTER, 2).await;
    let checked = check_history(&setup, &primary, &history, 3).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    until_done(&primary, "INSERT INTO history VALUES ('after', 'the loss')").await;
    setup.remove().await;
}

/// Sets (or, with `None`, removes) the repair request.
async fn request_repair(clusters: &Api<MySQLCluster>, member: Option<&str>) {
    real_pods::request_repair(clusters, CLUSTER, member).await;
}

/// The repair record in status once it satisfies `until`.
async fn repair_record(
    clusters: &Api<MySQLCluster>,
    what: &str,
    until: impl Fn(Option<&RepairRecord>) -> bool,
) -> Option<RepairRecord> {
    real_pods::repair_record(
        clusters,
        CLUSTER,
        what,
        |c: &MySQLCluster| c.status.as_ref()?.repair.clone(),
        until,
    )
    .await
}

/// `quorum.dev/repair` naming the primary is refused with a record that says to switch over
/// first; naming a replica wipes it once, so it comes back on a new, empty volume and is seeded
/// again from the primary, under a steady writer, and no acknowledged write is lost; removing
/// the annotation ends the request.
#[tokio::test]
async fn a_repair_request_rebuilds_the_named_replica_on_an_empty_volume() {
    let setup = OnRealNode::install("real-mysql-repair", CHART, &[]).await;
    let status = create_ready(&setup, 3).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    let writer = start_writer(&primary).await;
    writer.acknowledged_at_least(10, Duration::from_secs(60)).await;

    request_repair(&clusters, status.primary.as_deref()).await;
    let refused = repair_record(&clusters, "the request for the primary refused", |record| {
        record.is_some_and(|r| r.message.contains("switch over first"))
    })
    .await
    .unwrap();
    assert_eq!(refused.phase, RepairPhase::Waiting, "{refused:?}");

    let target = member(a_replica(&status));
    let claim = format!("data-{target}");
    let volume = setup.claim_uid(&claim).await;
    let pod_before = setup.pods().get(&target).await.unwrap().metadata.uid;
    request_repair(&clusters, Some(&target)).await;
    let done = repair_record(&clusters, &format!("{target} rebuilt"), |record| {
        record.is_some_and(|r| r.member == target && r.phase == RepairPhase::Done)
    })
    .await
    .unwrap();
    assert_eq!(done.replaced, pod_before, "{done:?}");
    assert_ne!(setup.claim_uid(&claim).await, volume, "{target} kept its volume");
    let steps = setup.occurrences(&["RebuildingMember", "SeedingMember"]).await;
    assert_eq!(steps.get("RebuildingMember"), Some(&1), "{steps:?}");
    assert!(steps.contains_key("SeedingMember"), "{steps:?}");

    request_repair(&clusters, None).await;
    repair_record(&clusters, "the record gone with the request", |record| {
        record.is_none()
    })
    .await;
    support::ready(&clusters, CLUSTER, 2).await;
    assert_eq!(
        setup
            .occurrences(&["RebuildingMember"])
            .await
            .get("RebuildingMember"),
        Some(&1)
    );
    let now = clusters.get(CLUSTER).await.unwrap().status.unwrap();
    assert_eq!(now.primary, status.primary, "the primary changed");

    writer
        .acknowledged_at_least(writer.acknowledged() + 10, Duration::from_secs(60))
        .await;
    let history = writer.stop().await;
    let checked = check_history(&setup, &primary, &history, 3).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// A new pod template (here a changed pod annotation; a version bump or a new operator release
/// that builds pods differently rolls the same way) under a steady writer: the operator restarts
/// one member at a time, replicas first, each back and caught up before the next, switches the
/// primary over to a restarted replica, restarts the old primary last, and no acknowledged
/// write is lost.
#[tokio::test]
async fn a_new_pod_template_restarts_one_member_at_a_time_the_primary_last() {
    roll_under_a_writer("real-mysql-roll", NewTemplate::Override).await;
}

/// The operator upgraded through its chart, from the previous release (`PREVIOUS_RELEASE_COMMIT`,
/// its own chart and image) to this one, under a steady writer: the new release builds the
/// members' pods differently (their template carries the digest of `my.cnf`), and no member
/// restarts by surprise: each is replaced once, one at a time, the primary last after a
/// switchover, and no acknowledged write is lost.
#[tokio::test]
async fn an_operator_upgrade_through_the_chart_rolls_one_member_at_a_time_the_primary_last() {
    roll_under_a_writer("real-mysql-upgrade", NewTemplate::OperatorUpgrade).await;
}

/// The same with the operator's pod stopped and started again as soon as each disruptive step
/// is recorded (each restart, the switchover): every step resumes from status rather than being
/// taken again. Each member's pod is still replaced exactly once, one at a time, the primary
/// last, and no acknowledged write is lost.
#[tokio::test]
async fn a_roll_resumes_every_recorded_step_after_an_operator_restart() {
    roll_under_a_writer(
        "real-mysql-roll-restarts",
        NewTemplate::OverrideRestartingTheOperator,
    )
    .await;
}

/// What gives the members a new pod template.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NewTemplate {
    /// A changed `spec.podTemplate`.
    Override,
    /// The same, with the operator restarted after each step it records.
    OverrideRestartingTheOperator,
    /// The operator upgraded through its chart from the previous release.
    OperatorUpgrade,
}

async fn roll_under_a_writer(prefix: &str, new_template: NewTemplate) {
    let restart_operator_at_each_step = new_template == NewTemplate::OverrideRestartingTheOperator;
    // What every pod on the new template carries.
    let rolled_annotation = match new_template {
        NewTemplate::OperatorUpgrade => quorum_core::pod::CONFIG_DIGEST_ANNOTATION,
        _ => real_pods::ROLLED_ANNOTATION,
    };
    let setup = match new_template {
        NewTemplate::OperatorUpgrade => {
            let previous = tools::previous_release().join("charts").join(CHART);
            let image = format!("image.repository={}", tools::PREVIOUS_RELEASE_MYSQL_IMAGE);
            OnRealNode::install_from(prefix, &previous, CHART, &[&image]).await
        }
        _ => OnRealNode::install(prefix, CHART, &[]).await,
    };
    let status = create_ready(&setup, 3).await;
    assert_eq!(
        setup.ready_with_annotation(MEMBERS, rolled_annotation).await,
        0,
        "no member runs the new template before the change"
    );
    let old_primary = status.primary.clone().expect("a primary");
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    let writer = start_writer(&primary).await;
    let before = setup
        .occurrences(&["RestartingMember", "SwitchingOver", "FailingOver"])
        .await;
    let watch = setup.watch_roll(MEMBERS).await;

    match new_template {
        NewTemplate::OperatorUpgrade => setup.upgrade_operator().await,
        _ => real_pods::give_new_template(&clusters, CLUSTER).await,
    }
    let steps_seen = std::sync::Mutex::new(Vec::<String>::new());
    wait::until(
        "every member on the new template, the roll recorded as done",
        Duration::from_secs(if restart_operator_at_each_step { 720 } else { 420 }),
        || async {
            let rolled = setup.ready_with_annotation(MEMBERS, rolled_annotation).await;
            let cluster = clusters.get(CLUSTER).await.map_err(|e| e.to_string())?;
            let in_flight = cluster.status.as_ref().and_then(|s| s.in_flight.clone());
            if restart_operator_at_each_step && let Some(step) = &in_flight {
                let step = format!("{:?} {}", step.action, step.member);
                let new = !steps_seen.lock().unwrap().contains(&step);
                if new {
                    steps_seen.lock().unwrap().push(step);
                    setup.restart_operator().await;
                }
            }
            match (rolled, in_flight) {
                (3, None) => Ok(()),
                (count, in_flight) => Err(format!("{count} rolled, in flight: {in_flight:?}")),
            }
        },
    )
    .await;
    let status = support::ready(&clusters, CLUSTER, 2).await;
    let record = watch.stop().await;
    if restart_operator_at_each_step {
        let steps = steps_seen.into_inner().unwrap();
        assert!(
            steps.len() >= 4,
            "three restarts and a switchover recorded, the operator restarted at each: {steps:?}"
        );
        eprintln!("the operator restarted after each of {steps:?}");
    }

    assert_eq!(record.most_down_at_once(), 1, "one member at a time: {record:?}");
    assert_eq!(record.replaced.len(), 3, "{record:?}");
    assert_eq!(
        record.replaced.last(),
        Some(&old_primary),
        "the primary last: {record:?}"
    );
    let new_primary = status.primary.clone().expect("a primary");
    assert_ne!(new_primary, old_primary, "the primary's role was handed over");
    let after = setup
        .occurrences(&["RestartingMember", "SwitchingOver", "FailingOver"])
        .await;
    let taken = |reason: &str| after.get(reason).unwrap_or(&0) - before.get(reason).unwrap_or(&0);
    assert_eq!(taken("RestartingMember"), 3, "{after:?}");
    assert_eq!(taken("SwitchingOver"), 1, "{after:?}");
    assert_eq!(taken("FailingOver"), 0, "no member was lost: {after:?}");

    let history = writer.stop().await;
    let checked = check_history(&setup, &primary, &history, 3).await;
    eprintln!("{checked} acknowledged writes checked across the roll, none lost");
    setup.remove().await;
}

/// Scale 3 -> 2 -> 3 under a steady writer: the member removed loses its volume with its pod,
/// so the member added again under the same name starts empty and is seeded from the primary,
/// and every member ends with exactly the primary's rows.
#[tokio::test]
async fn a_member_removed_and_added_again_starts_from_an_empty_volume() {
    let setup = OnRealNode::install("real-mysql-scale", CHART, &[]).await;
    create_ready(&setup, 3).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    let writer = start_writer(&primary).await;
    let removed = format!("data-{}", member(2));
    let volume = setup.claim_uid(&removed).await;
    let seeded_before = setup.occurrences(&["SeedingMember"]).await;

    for replicas in [2, 3] {
        clusters
            .patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
        support::ready(&clusters, CLUSTER, replicas - 1).await;
        setup
            .members_ready(MEMBERS, replicas as usize, Duration::from_secs(120))
            .await;
        if replicas == 2 {
            setup.claim_deleted(&removed, Duration::from_secs(60)).await;
        }
    }
    assert_ne!(
        setup.claim_uid(&removed).await,
        volume,
        "the old volume came back"
    );
    let seeded = setup.occurrences(&["SeedingMember"]).await;
    assert!(
        seeded > seeded_before,
        "the re-added member was not seeded: {seeded:?}"
    );

    let history = writer.stop().await;
    let checked = check_history(&setup, &primary, &history, 3).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// A certificate naming every member's DNS name and the Services' names.
fn issue_for_members(namespace: &str) -> quorum_e2e::tls::IssuedCertificate {
    let mut names: Vec<String> = (0..5)
        .map(|ordinal| format!("{}.{CLUSTER}.{namespace}.svc.cluster.local", member(ordinal)))
        .collect();
    for service in [
        mysql_operator::resources::primary_service_name(CLUSTER),
        mysql_operator::resources::replicas_service_name(CLUSTER),
    ] {
        names.push(format!("{service}.{namespace}.svc"));
        names.push(format!("{service}.{namespace}.svc.cluster.local"));
    }
    quorum_e2e::tls::issue_certificate(names, CLUSTER)
}

/// With `spec.tls`, the servers refuse unencrypted connections: the operator observes and
/// configures the members over TLS, verifying their certificates against the Secret's CA, the
/// replicas replicate over TLS, the probes pass, and an application connects over TLS only.
#[tokio::test]
async fn members_with_tls_form_and_refuse_unencrypted_clients() {
    let setup = OnRealNode::install("real-mysql-tls", CHART, &[]).await;
    let issued = issue_for_members(&setup.ns);
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(setup.admin.clone(), &setup.ns)
        .create(
            &PostParams::default(),
            &quorum_e2e::tls::tls_secret("shop-tls", &issued),
        )
        .await
        .unwrap();
    support::create_app_secret(&setup.admin, &setup.ns).await;
    let mut cluster = real_cluster(3);
    cluster.spec.tls = Some(mysql_operator::crd::MySqlTls {
        secret_name: "shop-tls".into(),
    });
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    clusters.create(&PostParams::default(), &cluster).await.unwrap();
    let status = support::ready(&clusters, CLUSTER, 2).await;
    setup.members_ready(MEMBERS, 3, Duration::from_secs(120)).await;

    let ip = real_node::cluster_ip(
        &setup.admin,
        &setup.ns,
        &mysql_operator::resources::primary_service_name(CLUSTER),
    )
    .await;
    let options = |tls: bool| {
        // The certificate names the Service's DNS names, which the host cannot resolve, and
        // mysql_async's option to skip only the name check no longer matches rustls's error: the
        // host proves the server speaks TLS, a client in a member's pod verifies chain and name.
        let ssl = tls.then(|| mysql_async::SslOpts::default().with_danger_accept_invalid_certs(true));
        mysql_async::OptsBuilder::default()
            .ip_or_hostname(ip.clone())
            .tcp_port(3306)
            .user(Some(APP_USER))
            .pass(Some(APP_PASSWORD))
            .db_name(Some(APP_DATABASE))
            .prefer_socket(false)
            .ssl_opts(ssl)
    };
    let secure = Pool::new(options(true));
    until_done(&secure, "CREATE TABLE secured (id INT PRIMARY KEY)").await;
    until_done(&secure, "INSERT INTO secured VALUES (1)").await;
    let refused = mysql_async::Conn::new(options(false)).await;
    assert!(refused.is_err(), "an unencrypted connection was accepted");

    // Inside the cluster the primary Service's name resolves, and its certificate verifies.
    let primary_name = format!(
        "{}.{}.svc.cluster.local",
        mysql_operator::resources::primary_service_name(CLUSTER),
        setup.ns
    );
    let verified = real_node::exec(
        &setup.ns,
        status.primary.as_deref().expect("a primary"),
        SERVER,
        &[
            "sh",
            "-c",
            &format!(
                "mariadb -u{APP_USER} -p{APP_PASSWORD} -h{primary_name} --ssl-ca=/etc/mysql/tls/ca.crt --ssl-verify-server-cert -N -e \"SHOW STATUS LIKE 'Ssl_version'\""
            ),
        ],
    );
    assert!(verified.contains("TLS"), "{verified}");

    // The replicas replicate over TLS and hold the write.
    let replica = member(a_replica(&status));
    let replication = real_node::exec(
        &setup.ns,
        &replica,
        SERVER,
        &[
            "sh",
            "-c",
            "mariadb -uroot -p\"$(cat /etc/mysql/credentials/root-password)\" -h\"$POD_IP\" --ssl-ca=/etc/mysql/tls/ca.crt -e 'SHOW SLAVE STATUS\\G'",
        ],
    );
    assert!(replication.contains("Master_SSL_Allowed: Yes"), "{replication}");
    wait::until("the write on the replica", Duration::from_secs(30), || async {
        let (_, output) = real_node::kubectl(&[
            "exec",
            "-n",
            &setup.ns,
            &replica,
            "-c",
            SERVER,
            "--",
            "sh",
            "-c",
            "mariadb -uroot -p\"$(cat /etc/mysql/credentials/root-password)\" -h\"$POD_IP\" --ssl-ca=/etc/mysql/tls/ca.crt -N -e 'SELECT COUNT(*) FROM shop.secured'",
        ]);
        let rows = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if rows == "1" { Ok(()) } else { Err(format!("{rows:?}")) }
    })
    .await;
    setup.remove().await;
}

/// Members whose server cannot start (here a setting the server does not know) are reported on
/// the cluster: the `PodsFailing` condition and a warning event name each pod, its container
/// and the kubelet's reason, and no primary is chosen among them.
#[tokio::test]
async fn members_that_cannot_start_are_named_in_the_clusters_condition_and_events() {
    let setup = OnRealNode::install("real-mysql-crash", CHART, &[]).await;
    support::create_app_secret(&setup.admin, &setup.ns).await;
    let mut cluster = real_cluster(3);
    cluster
        .spec
        .config
        .insert("no-such-server-setting".into(), "1".into());
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    clusters.create(&PostParams::default(), &cluster).await.unwrap();

    let message = wait::until(
        "the crash loop of shop-0 in the cluster's conditions",
        Duration::from_secs(180),
        || async {
            let cluster = clusters.get(CLUSTER).await.map_err(|e| e.to_string())?;
            let conditions = cluster.status.map(|s| s.conditions).unwrap_or_default();
            match conditions
                .iter()
                .find(|c| c.type_ == quorum_core::pod_failures::CONDITION)
            {
                Some(c) if c.status == "True" && c.message.contains(&format!("pod {}", member(0))) => {
                    Ok(c.message.clone())
                }
                _ => Err(format!("{conditions:?}")),
            }
        },
    )
    .await;
    eprintln!("PodsFailing: {message}");
    assert!(
        message.contains("CrashLoopBackOff") || message.contains("Error"),
        "{message}"
    );
    // One event series per failing pod, published right after the condition is written: each
    // member that cannot start is named in its own event (all three crash here).
    let selector = format!(
        "involvedObject.name={CLUSTER},reason={}",
        quorum_core::pod_failures::EVENT_REASON
    );
    wait::until(
        "a PodFailing event naming each member",
        Duration::from_secs(30),
        || async {
            let (_, output) = real_node::kubectl(&[
                "get",
                "events",
                "-n",
                &setup.ns,
                "--field-selector",
                &selector,
                "-o",
                "jsonpath={.items[*].message}",
            ]);
            let events = String::from_utf8_lossy(&output.stdout).to_string();
            if (0..3).all(|ordinal| events.contains(&format!("pod {} ", member(ordinal)))) {
                Ok(())
            } else {
                Err(events)
            }
        },
    )
    .await;

    let status = clusters.get(CLUSTER).await.unwrap().status.unwrap_or_default();
    assert_eq!(
        status.primary, None,
        "no primary chosen among members that never started"
    );
    setup.remove().await;
}

/// Checks that a restored cluster holds every write of `history` (at least 20 acknowledged)
/// and nothing invented, and not the row `absent` written after what it was restored to.
async fn holds_history_without(restored: &Pool, history: &History, absent: &str) {
    let mut held = wait::until("the copy's rows", Duration::from_secs(60), || rows(restored)).await;
    assert_eq!(held.remove(absent), None, "the row {absent} was restored");
    for operation in &history.operations {
        held.entry(operation.key.clone()).or_insert(None);
    }
    let checked = history
        .check(&held)
        .unwrap_or_else(|violations| panic!("the copy lost or invented writes: {violations:#?}"));
    assert!(checked >= 20, "{checked} acknowledged writes checked");
}

/// Backups to an S3 store in the cluster, from the operator's pod over the pod network: a
/// one-shot backup, then a new cluster restored from it holds every write acknowledged before
/// it and nothing written after; a schedule every minute keeps one run of its own and never
/// deletes the one-shot's object.
#[tokio::test]
async fn backups_land_in_an_s3_store_and_a_new_cluster_restores_from_one() {
    use mysql_operator::crd::{MySQLBackup, MySqlRestoreSource};

    let setup = OnRealNode::install("real-mysql-s3", CHART, &["backups.allowHttp=true"]).await;
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, 3).await;
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    let writer = start_writer(&primary).await;
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    let history = writer.stop().await;

    let one_shot = store.back_up_once::<MySQLBackup>(&setup, CLUSTER, "mysql").await;
    store
        .schedule_every_minute::<MySQLBackup>(&setup, CLUSTER, "mysql")
        .await;
    until_done(
        &primary,
        "INSERT INTO history VALUES ('after-the-backup', 'not-restored')",
    )
    .await;

    let mut copy = real_cluster(2);
    copy.metadata.name = Some("copy".into());
    copy.spec.restore_from = Some(MySqlRestoreSource::newest(real_pods::ONE_SHOT_BACKUP));
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    clusters.create(&PostParams::default(), &copy).await.unwrap();
    support::ready(&clusters, "copy", 1).await;
    setup
        .members_ready(
            "app.kubernetes.io/name=mysql,app.kubernetes.io/instance=copy,app.kubernetes.io/component=member",
            2,
            Duration::from_secs(120),
        )
        .await;
    let restored = service_pool(&setup, &mysql_operator::resources::primary_service_name("copy")).await;
    holds_history_without(&restored, &history, "after-the-backup").await;
    until_done(
        &restored,
        "INSERT INTO history VALUES ('after-the-restore', 'written')",
    )
    .await;

    store
        .scheduled_runs_pruned::<MySQLBackup>(&setup, "mysql", &[one_shot])
        .await;
    setup.remove().await;
}

/// A physical backup (`spec.method: Physical`): its Job runs on the member's node from the
/// member's image with the member's volume mounted read-only, and streams `mariadb-backup`'s
/// copy of the files into the store; the stored copy, prepared and started as a server, holds
/// every write the application had acknowledged before the backup.
#[tokio::test]
async fn a_physical_backup_copies_a_members_files_from_a_job_beside_it_into_s3() {
    use mysql_operator::{
        admin::{gtid::GtidPosition, physical::restore_in},
        crd::{BackupMethod, Flavor, MySQLBackup, MySQLBackupSpec},
    };
    use quorum_core::crd::BackupPhase;
    use quorum_e2e::mariadb::MariaDbProcesses;
    use sha2::Digest;
    use tokio::io::AsyncWriteExt;

    let setup = OnRealNode::install("real-mysql-physical", CHART, &["backups.allowHttp=true"]).await;
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, 2).await;
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    let writer = start_writer(&primary).await;
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    let history = writer.stop().await;

    let backups: Api<MySQLBackup> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let spec = MySQLBackupSpec {
        backup: store.backup_spec(CLUSTER, "mysql", None, None),
        archive_binlogs: false,
        method: BackupMethod::Physical,
    };
    backups
        .create(&PostParams::default(), &MySQLBackup::new("physical", spec))
        .await
        .unwrap();
    let status = wait::until("the physical backup stored", Duration::from_secs(240), || async {
        let status = backups
            .get("physical")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        match status.run.phase {
            Some(BackupPhase::Succeeded) => Ok(status),
            Some(BackupPhase::Failed) => panic!("the physical backup failed: {:?}", status.run.message),
            phase => Err(format!("{phase:?}: {:?}", status.run.message)),
        }
    })
    .await;
    assert_eq!(status.method, Some(BackupMethod::Physical));
    let snapshot = status.run.last_snapshot.clone().expect("the stored copy");
    assert!(snapshot.location.ends_with(".xbstream"), "{}", snapshot.location);
    let position = GtidPosition::parse(
        Flavor::MariaDB,
        status.gtid_position.as_deref().expect("the copy's position"),
    )
    .unwrap();

    // The stored copy is the one recorded, and restores into a server holding every
    // acknowledged write.
    let bytes = store.object(&snapshot.location).await;
    assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), snapshot.sha256);
    let mut local = MariaDbProcesses::new();
    let data_dir = local.data_dir(0);
    let restored = restore_in(&data_dir, &position, |mut input| async move {
        input.write_all(&bytes).await?;
        input.shutdown().await
    })
    .await
    .unwrap();
    assert_eq!(restored, position);
    local.start_member_on_its_data().await;
    let copied = local
        .sql(0, &format!("SELECT k, v FROM {APP_DATABASE}.history ORDER BY k"))
        .await;
    let held: BTreeMap<String, Option<String>> = copied
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(key, value)| (key.to_string(), Some(value.to_string())))
        .collect();
    let mut all = held.clone();
    for operation in &history.operations {
        all.entry(operation.key.clone()).or_insert(None);
    }
    let checked = history
        .check(&all)
        .unwrap_or_else(|violations| panic!("the copy lost or invented writes: {violations:#?}"));
    assert!(checked >= 20, "{checked}");

    // A new cluster restores it: its first member's init container puts the copy in place
    // before its server starts, the server takes the copy's history, the other member copies the
    // first, and once the restore is recorded the members roll off the restore's init containers.
    let mut copy = real_cluster(2);
    copy.metadata.name = Some("copy".into());
    copy.spec.restore_from = Some(mysql_operator::crd::MySqlRestoreSource::newest("physical"));
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    clusters.create(&PostParams::default(), &copy).await.unwrap();
    let restored_status = support::ready(&clusters, "copy", 1).await;
    let record = restored_status.restored_from.expect("the restore is recorded");
    assert_eq!(record.sha256, snapshot.sha256);
    assert_eq!(record.gtid_position, position.to_string());
    let copy_members =
        "app.kubernetes.io/name=mysql,app.kubernetes.io/instance=copy,app.kubernetes.io/component=member";
    setup
        .members_ready(copy_members, 2, Duration::from_secs(180))
        .await;
    let restored = service_pool(&setup, &mysql_operator::resources::primary_service_name("copy")).await;
    let held = wait::until("the restored primary's rows", Duration::from_secs(60), || {
        rows(&restored)
    })
    .await;
    let mut all = held.clone();
    for operation in &history.operations {
        all.entry(operation.key.clone()).or_insert(None);
    }
    history
        .check(&all)
        .unwrap_or_else(|violations| panic!("the restored cluster lost or invented writes: {violations:#?}"));
    until_done(
        &restored,
        "INSERT INTO history VALUES ('after-the-restore', 'written')",
    )
    .await;
    let statefulsets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(setup.admin.clone(), &setup.ns);
    let init_containers = statefulsets
        .get(&mysql_operator::resources::statefulset_name("copy"))
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.template.spec)
        .and_then(|pod| pod.init_containers);
    assert_eq!(
        init_containers, None,
        "a restored cluster's members restore nothing more"
    );
    setup.remove().await;
}

/// Point-in-time recovery through the backup Jobs and an S3 store in the cluster: a schedule
/// every minute archives the binary log with each snapshot, read from a member over the pod
/// network; a new cluster restored to a noted second holds every write acknowledged before it
/// and none written after.
#[tokio::test]
async fn a_new_cluster_restores_to_a_point_in_time_from_the_binary_log_archived_in_s3() {
    use mysql_operator::crd::MySQLBackup;
    use quorum_e2e::real_pods::SCHEDULED_BACKUP;

    let setup = OnRealNode::install("real-mysql-pitr", CHART, &["backups.allowHttp=true"]).await;
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, 2).await;
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    store
        .schedule_every_minute::<MySQLBackup>(&setup, CLUSTER, "mysql")
        .await;
    let backups: Api<MySQLBackup> = Api::namespaced(setup.admin.clone(), &setup.ns);
    backups
        .patch(
            SCHEDULED_BACKUP,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"archiveBinlogs": true, "retain": 3}})),
        )
        .await
        .expect("archive the binary log");
    let archived_runs = |count: usize| {
        let backups = backups.clone();
        async move {
            wait::until(
                &format!("{count} archived runs"),
                Duration::from_secs(200),
                || async {
                    let status = backups
                        .get(SCHEDULED_BACKUP)
                        .await
                        .map_err(|e| e.to_string())?
                        .status
                        .unwrap_or_default();
                    if status.recovery_runs.len() >= count {
                        Ok(status)
                    } else {
                        Err(format!("{:?} {:?}", status.run.phase, status.run.message))
                    }
                },
            )
            .await
        }
    };
    archived_runs(1).await;

    let writer = start_writer(&primary).await;
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    let history = writer.stop().await;
    let second = || async {
        let mut conn = primary.get_conn().await.expect("a connection to the primary");
        let now: Option<i64> = conn
            .query_first("SELECT UNIX_TIMESTAMP()")
            .await
            .expect("the time");
        now.expect("a time")
    };
    let point = second().await;
    wait::until(
        "the primary's clock past the point",
        Duration::from_secs(5),
        || async {
            let now = second().await;
            if now > point { Ok(()) } else { Err(now.to_string()) }
        },
    )
    .await;
    until_done(
        &primary,
        "INSERT INTO history VALUES ('after-the-point', 'not-restored')",
    )
    .await;
    let status = archived_runs(2).await;
    let runs = status.recovery_runs.len();
    assert!(
        status.recovery_runs[runs - 1].archived_at.0.as_second() > point,
        "the newest run archived past the point: {:?}",
        status.recovery_runs
    );

    let mut copy = real_cluster(1);
    copy.metadata.name = Some("copy".into());
    copy.spec.restore_from = Some(mysql_operator::crd::MySqlRestoreSource {
        point_in_time: Some(mysql_operator::crd::PointInTime {
            time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(point).unwrap(),
            )),
            gtid: None,
        }),
        ..mysql_operator::crd::MySqlRestoreSource::newest(SCHEDULED_BACKUP)
    });
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    clusters.create(&PostParams::default(), &copy).await.unwrap();
    let restored_status = support::ready(&clusters, "copy", 0).await;
    let record = restored_status.restored_from.expect("the restore is recorded");
    assert!(
        record.binlogs_replayed.is_some_and(|pieces| pieces >= 1),
        "{record:?}"
    );
    let restored = service_pool(&setup, &mysql_operator::resources::primary_service_name("copy")).await;
    holds_history_without(&restored, &history, "after-the-point").await;
    setup.remove().await;
}

/// A backup with `verify` restores its snapshot into a throw-away one-member cluster, which
/// holds what the snapshot recorded; recorded content that no longer matches fails the next
/// drill ([`real_pods::InClusterS3::drill_verifies_then_catches_altered_content`]).
#[tokio::test]
async fn a_restore_drill_verifies_a_backup_and_catches_one_whose_content_differs() {
    use mysql_operator::crd::MySQLBackup;

    let setup = OnRealNode::install("real-mysql-drill", CHART, &["backups.allowHttp=true"]).await;
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, 1).await;
    let primary = service_pool(&setup, &mysql_operator::resources::primary_service_name(CLUSTER)).await;
    let writer = start_writer(&primary).await;
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    writer.stop().await;
    store
        .drill_verifies_then_catches_altered_content::<MySQLBackup, MySQLCluster>(
            &setup, CLUSTER, "mysql", 20,
        )
        .await;
    setup.remove().await;
}
