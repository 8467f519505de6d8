//! What a user runs, on the real node: the operator installed by its chart runs as a container
//! of its image, and the data nodes and Sentinels are Redis containers from the StatefulSets the
//! operator builds (their `start.sh`, probes, security context and volumes), reached through the
//! primary, replicas and client Services or, in cluster mode, the pod addresses the nodes
//! announce. Nothing here starts a server itself.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::{collections::BTreeMap, net::SocketAddr, sync::Arc, time::Duration};

use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use quorum_core::{
    recovery::{RecoveryPhase, RecoveryRecord},
    repair::{RepairPhase, RepairRecord},
};
use quorum_e2e::{
    history::{History, Writer},
    real_node::{self, STORAGE_CLASS},
    real_pods::{self, OnRealNode},
    wait,
};
use redis::AsyncCommands;
use redis_operator::{
    crd::{RedisCluster, RedisClusterSpec, RedisClusterStatus},
    resources::{
        DataNodes, SHARD_LABEL, node_name, primary_service_name, replicas_service_name, sentinel_name,
    },
};
use support::{ClusterClient, data_connection, generated_password};

const CHART: &str = "quorum-redis-operator";
const CLUSTER: &str = "cache";
const NODES: &str =
    "app.kubernetes.io/name=redis,app.kubernetes.io/instance=cache,app.kubernetes.io/component=node";
const SENTINELS: &str =
    "app.kubernetes.io/name=redis,app.kubernetes.io/instance=cache,app.kubernetes.io/component=sentinel";
const SERVER: &str = "redis";

/// `spec` placed on the real node, on local-path volumes.
fn on_real_node(mut spec: RedisClusterSpec) -> RedisCluster {
    spec.storage.storage_class_name = Some(STORAGE_CLASS.into());
    spec.pod_template = Some(real_node::pod_overrides());
    RedisCluster::new(CLUSTER, spec)
}

/// Cluster-mode `spec` on the real node with every shard's pods on it: there is one real node,
/// so the deployment says, as a user with a one-node cluster would, that a shard's primary and
/// replica may share a node (`spec.podTemplate.affinity` given, here empty).
fn sharing_the_real_node(spec: RedisClusterSpec) -> RedisCluster {
    let mut cluster = on_real_node(spec);
    if let Some(template) = cluster.spec.pod_template.as_mut() {
        template.affinity = Some(Default::default());
    }
    cluster
}

/// Node `ordinal`'s pod in the tests' cluster-mode deployments (shards of two nodes).
fn shard_node_name(ordinal: usize) -> String {
    DataNodes::per_shard(CLUSTER, 2).name(ordinal)
}

fn clusters(setup: &OnRealNode) -> Api<RedisCluster> {
    Api::namespaced(setup.admin.clone(), &setup.ns)
}

/// Creates the deployment and waits until the operator reports it Ready with `nodes` nodes and
/// every data node (and Sentinel) pod is Ready by its own probes on the real node.
async fn create_ready(
    setup: &OnRealNode,
    cluster: RedisCluster,
    nodes: i32,
    sentinels: usize,
) -> RedisClusterStatus {
    clusters(setup)
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let status = support::ready(&clusters(setup), CLUSTER, nodes).await;
    setup
        .members_ready(NODES, nodes as usize, Duration::from_secs(120))
        .await;
    if sentinels > 0 {
        setup
            .members_ready(SENTINELS, sentinels, Duration::from_secs(60))
            .await;
    }
    status
}

/// A connection through a Service's cluster IP, as an application in the cluster opens one
/// (retried while kube-proxy catches up with the endpoints).
async fn service_connection(
    setup: &OnRealNode,
    service: &str,
    password: &str,
) -> redis::aio::MultiplexedConnection {
    let ip: std::net::IpAddr = real_node::cluster_ip(&setup.admin, &setup.ns, service)
        .await
        .parse()
        .unwrap();
    wait::until(
        &format!("a connection through {service}"),
        Duration::from_secs(30),
        || async {
            let mut connection = data_connection(SocketAddr::new(ip, 6379), password)
                .await
                .map_err(|error| error.to_string())?;
            let _: String = redis::cmd("PING")
                .query_async(&mut connection)
                .await
                .map_err(|error| error.to_string())?;
            Ok(connection)
        },
    )
    .await
}

/// A writer of one key per interval, acknowledged when `SET` returned OK.
fn start_writer<S, F>(set: S) -> Writer
where
    S: Fn(String, String) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = bool> + Send,
{
    Writer::start("history", Duration::from_millis(100), 3_000, move |key, value| {
        let write = set(key, value);
        async move {
            tokio::time::timeout(Duration::from_secs(5), write)
                .await
                .unwrap_or(false)
        }
    })
}

/// The primary Service's cluster address.
async fn primary_service_address(setup: &OnRealNode) -> SocketAddr {
    let ip: std::net::IpAddr = real_node::cluster_ip(&setup.admin, &setup.ns, &primary_service_name(CLUSTER))
        .await
        .parse()
        .unwrap();
    SocketAddr::new(ip, 6379)
}

/// A writer that opens a connection per write, as a client that reconnects after a restart would.
fn start_reconnecting_writer(address: SocketAddr, password: &str) -> Writer {
    let password = password.to_string();
    start_writer(move |key, value| {
        let password = password.clone();
        async move {
            match data_connection(address, &password).await {
                Ok(mut connection) => connection.set::<_, _, ()>(key, value).await.is_ok(),
                Err(_) => false,
            }
        }
    })
}

/// Checks that `read` returns every acknowledged write and nothing invented; returns how many
/// were checked.
async fn check_history<R, F>(history: &History, read: R) -> usize
where
    R: Fn(String) -> F,
    F: std::future::Future<Output = Option<String>>,
{
    let mut held = BTreeMap::new();
    for operation in &history.operations {
        held.insert(operation.key.clone(), read(operation.key.clone()).await);
    }
    let checked = history
        .check(&held)
        .unwrap_or_else(|violations| panic!("lost or invented writes: {violations:#?}"));
    assert!(checked > 0, "the writer had no write acknowledged");
    checked
}

/// Checks every acknowledged write on the primary, then, once the replicas hold the last one,
/// on a replica (through the replicas Service).
async fn check_history_on_primary_and_replicas(
    setup: &OnRealNode,
    primary: &redis::aio::MultiplexedConnection,
    password: &str,
    history: &History,
) {
    let checked = check_history(history, |key| {
        let mut primary = primary.clone();
        async move { primary.get(key).await.unwrap() }
    })
    .await;
    let replicas = service_connection(setup, &replicas_service_name(CLUSTER), password).await;
    let last_acknowledged = history.acknowledged().last().expect("a write").key.clone();
    wait::until("the replicas caught up", Duration::from_secs(30), || async {
        let value: Option<String> = replicas
            .clone()
            .get(&last_acknowledged)
            .await
            .map_err(|error| error.to_string())?;
        value.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    let on_replicas = check_history(history, |key| {
        let mut replicas = replicas.clone();
        async move { replicas.get(key).await.unwrap() }
    })
    .await;
    eprintln!(
        "{checked} acknowledged writes checked on the primary and {on_replicas} on a replica, none lost"
    );
}

#[tokio::test]
async fn the_chart_installed_operator_runs_a_primary_replicas_and_sentinels_of_real_pods() {
    let mut setup = OnRealNode::install("real-redis", CHART, &[]).await;
    let status = create_ready(&setup, on_real_node(support::replication_spec(2)), 3, 3).await;
    let primary_pod = status.primary.clone().expect("a primary");
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;

    // An application's write through the primary Service, read back through the replicas one.
    let mut primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    let _: () = primary.set("greeting", "hello from a real pod").await.unwrap();
    let replicas = service_connection(&setup, &replicas_service_name(CLUSTER), &password).await;
    wait::until(
        "the write read through the replicas Service",
        Duration::from_secs(30),
        || async {
            let mut replicas = replicas.clone();
            let value: Option<String> = replicas
                .get("greeting")
                .await
                .map_err(|error| error.to_string())?;
            value
                .filter(|value| value == "hello from a real pod")
                .ok_or_else(|| "not there yet".to_string())
        },
    )
    .await;

    // The nodes run as the server's account, not root; exec and logs work as a user expects.
    let uid = real_node::exec(&setup.ns, &primary_pod, SERVER, &["id", "-u"]);
    assert_eq!(uid.trim(), "999");
    let read = real_node::exec(
        &setup.ns,
        &primary_pod,
        SERVER,
        &[
            "sh",
            "-c",
            "REDISCLI_AUTH=\"$(cat /etc/redis/credentials/password)\" redis-cli -h \"$POD_IP\" GET greeting",
        ],
    );
    assert_eq!(read.trim(), "hello from a real pod");
    let log = real_node::logs(&setup.ns, &primary_pod, SERVER);
    assert!(log.contains("Ready to accept connections"), "{log}");

    // A Sentinel whose pod is replaced comes back as the same Sentinel, from its own volume.
    let sentinel = sentinel_name(CLUSTER, 1);
    let sentinel_id = || {
        real_node::exec(
            &setup.ns,
            &sentinel,
            "sentinel",
            &[
                "sh",
                "-c",
                "REDISCLI_AUTH=\"$(cat /etc/redis/credentials/password)\" redis-cli -h \"$POD_IP\" -p 26379 SENTINEL MYID",
            ],
        )
        .trim()
        .to_string()
    };
    let id = sentinel_id();
    assert_eq!(id.len(), 40, "a Sentinel id: {id}");
    let volume = setup
        .claim_uid(&quorum_core::pod::data_claim_name(&sentinel))
        .await;
    setup
        .delete_and_await_recreated(&sentinel, Duration::from_secs(60))
        .await;
    assert_eq!(sentinel_id(), id, "{sentinel} came back as a new Sentinel");
    assert_eq!(
        setup
            .claim_uid(&quorum_core::pod::data_claim_name(&sentinel))
            .await,
        volume
    );

    // Removing the operator leaves the databases serving.
    setup.uninstall_operator().await;
    setup.members_ready(NODES, 3, Duration::from_secs(30)).await;
    let value: Option<String> = primary.get("greeting").await.unwrap();
    assert_eq!(value.as_deref(), Some("hello from a real pod"));

    setup.remove().await;
}

/// A new pod template (here an annotation; a version bump or an operator release that builds
/// pods differently is the same) under a steady writer through the primary Service: the operator
/// restarts the data pods one at a time, the replicas first, then hands the primary's role to an
/// upgraded replica with its writes held and restarts the old primary last. The Sentinels never
/// fail over on their own, and no acknowledged write is lost.
#[tokio::test]
async fn a_new_pod_template_restarts_one_node_at_a_time_the_primary_last_after_a_handover() {
    roll_under_a_writer("real-redis-roll", false).await;
}

/// The same with the operator's pod stopped and started again after each step it reports (each
/// node's restart, the handover): a new process finds where the roll stands from the pods and
/// the Sentinels and goes on. Each data pod is still replaced exactly once, one at a time, the
/// primary last after a handover, and no acknowledged write is lost.
#[tokio::test]
async fn a_roll_goes_on_after_an_operator_restart_at_every_step() {
    roll_under_a_writer("real-redis-roll-restarts", true).await;
}

async fn roll_under_a_writer(prefix: &str, restart_operator_at_each_step: bool) {
    let setup = OnRealNode::install(prefix, CHART, &[]).await;
    let status = create_ready(&setup, on_real_node(support::replication_spec(2)), 3, 3).await;
    let old_primary = status.primary.clone().expect("a primary");
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let writer = start_reconnecting_writer(primary_service_address(&setup).await, &password);
    let reasons = ["RestartingNode", "SwitchoverRequested", "PrimaryChanged"];
    let before = setup.occurrences(&reasons).await;
    let watch = setup.watch_roll(NODES).await;

    real_pods::give_new_template(&clusters(&setup), CLUSTER).await;
    const STEPS: [&str; 2] = ["RestartingNode", "SwitchoverRequested"];
    let seen = std::sync::Mutex::new(setup.occurrences(&STEPS).await.values().sum());
    let restarts = std::sync::atomic::AtomicUsize::new(0);
    wait::until(
        "every data pod on the new template",
        Duration::from_secs(if restart_operator_at_each_step { 720 } else { 420 }),
        || async {
            if restart_operator_at_each_step && setup.restart_operator_after_new_steps(&STEPS, &seen).await {
                restarts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let rolled = setup.ready_on_rolled_template(NODES).await;
            match rolled {
                3 => Ok(()),
                count => {
                    let cluster = clusters(&setup).get(CLUSTER).await.map_err(|e| e.to_string())?;
                    let progressing = cluster
                        .status
                        .unwrap_or_default()
                        .conditions
                        .into_iter()
                        .find(|c| c.type_ == "Progressing")
                        .map(|c| format!("{}: {}", c.reason, c.message));
                    Err(format!("{count} rolled; progressing: {progressing:?}"))
                }
            }
        },
    )
    .await;
    let status = support::ready(&clusters(&setup), CLUSTER, 3).await;
    let record = watch.stop().await;
    if restart_operator_at_each_step {
        let restarts = restarts.into_inner();
        assert!(restarts >= 3, "the operator restarted after {restarts} steps");
        eprintln!("the operator restarted after {restarts} steps");
    }

    assert_eq!(record.most_down_at_once(), 1, "one node at a time: {record:?}");
    assert_eq!(record.replaced.len(), 3, "{record:?}");
    assert_eq!(
        record.replaced.last(),
        Some(&old_primary),
        "the primary last: {record:?}"
    );
    let new_primary = status.primary.clone().expect("a primary");
    assert_ne!(new_primary, old_primary, "the primary's role was handed over");
    let after = setup.occurrences(&reasons).await;
    let taken = |reason: &str| after.get(reason).unwrap_or(&0) - before.get(reason).unwrap_or(&0);
    // A step retried after a refusal is reported again: at least one restart per node and one
    // handover (one at a time is what the watch above checks).
    assert!(taken("RestartingNode") >= 3, "{after:?}");
    assert!(taken("SwitchoverRequested") >= 1, "{after:?}");
    assert_eq!(
        taken("PrimaryChanged"),
        0,
        "no failover of the Sentinels' own: {after:?}"
    );

    let history = writer.stop().await;
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    check_history_on_primary_and_replicas(&setup, &primary, &password, &history).await;
    setup.remove().await;
}

/// A replica's server killed inside its container, then the other replica's pod deleted: the
/// kubelet restarts the one and the StatefulSet recreates the other on its volume; the primary
/// stays, the operator removes or reconfigures nothing, and no acknowledged write is lost.
#[tokio::test]
async fn a_killed_node_or_a_deleted_pod_rejoins_with_its_data() {
    let setup = OnRealNode::install("real-redis-restart", CHART, &[]).await;
    let status = create_ready(&setup, on_real_node(support::replication_spec(2)), 3, 3).await;
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    let writer = start_writer({
        let primary = primary.clone();
        move |key, value| {
            let mut primary = primary.clone();
            async move { primary.set::<_, _, ()>(key, value).await.is_ok() }
        }
    });
    const DISRUPTIVE: [&str; 3] = ["SwitchoverRequested", "RemovingNode", "PrimaryChanged"];
    let steps_before = setup.occurrences(&DISRUPTIVE).await;

    let replicas: Vec<String> = (0..3)
        .map(|ordinal| node_name(CLUSTER, ordinal))
        .filter(|name| Some(name) != status.primary.as_ref())
        .collect();
    let volume = setup.claim_uid(&format!("data-{}", replicas[0])).await;
    setup
        .kill_and_await_restart(&replicas[0], SERVER, Duration::from_secs(120))
        .await;
    support::ready(&clusters(&setup), CLUSTER, 3).await;
    assert_eq!(setup.claim_uid(&format!("data-{}", replicas[0])).await, volume);

    let volume = setup.claim_uid(&format!("data-{}", replicas[1])).await;
    setup
        .delete_and_await_recreated(&replicas[1], Duration::from_secs(120))
        .await;
    support::ready(&clusters(&setup), CLUSTER, 3).await;
    assert_eq!(setup.claim_uid(&format!("data-{}", replicas[1])).await, volume);

    let now = clusters(&setup).get(CLUSTER).await.unwrap().status.unwrap();
    assert_eq!(now.primary, status.primary, "the primary changed");
    assert_eq!(
        setup.occurrences(&DISRUPTIVE).await,
        steps_before,
        "steps were taken"
    );

    let history = writer.stop().await;
    let checked = check_history(&history, |key| {
        let mut primary = primary.clone();
        async move { primary.get(key).await.unwrap() }
    })
    .await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// A primary, two replicas and three Sentinels that deem a primary down only after two minutes
/// (so no Sentinel failover comes within a test's waits), ready, with a writer through the
/// primary Service: the setup, the status, the password and the writer.
async fn slow_sentinels_under_a_writer(prefix: &str) -> (OnRealNode, RedisClusterStatus, String, Writer) {
    let setup = OnRealNode::install(prefix, CHART, &[]).await;
    let mut spec = support::replication_spec(2);
    if let Some(sentinel) = spec.sentinel.as_mut() {
        sentinel.down_after_millis = 120_000;
    }
    let status = create_ready(&setup, on_real_node(spec), 3, 3).await;
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let writer = start_reconnecting_writer(primary_service_address(&setup).await, &password);
    (setup, status, password, writer)
}

/// The primary's server killed inside its container and restarted by the kubelet long before
/// the Sentinels would deem it down: it comes back as the primary with every write it
/// acknowledged, and its replicas, which resynchronise from it, keep them too.
#[tokio::test]
async fn a_primary_restarted_before_the_sentinels_notice_keeps_every_acknowledged_write() {
    let (setup, status, password, writer) = slow_sentinels_under_a_writer("real-redis-primary-restart").await;
    let primary_pod = status.primary.clone().expect("a primary");
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    wait::until(
        "writes acknowledged before the kill",
        Duration::from_secs(60),
        || async {
            let keys: usize = redis::cmd("DBSIZE")
                .query_async(&mut primary.clone())
                .await
                .map_err(|error| error.to_string())?;
            (keys >= 30).then_some(()).ok_or(format!("{keys} keys"))
        },
    )
    .await;

    setup
        .kill_and_await_restart(&primary_pod, SERVER, Duration::from_secs(120))
        .await;
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    wait::until(
        "writes acknowledged after the restart",
        Duration::from_secs(60),
        || async {
            let mut primary = primary.clone();
            let keys: usize = redis::cmd("DBSIZE")
                .query_async(&mut primary)
                .await
                .map_err(|error| error.to_string())?;
            let role: Vec<redis::Value> = redis::cmd("ROLE")
                .query_async(&mut primary)
                .await
                .map_err(|error| error.to_string())?;
            let connected = match role.get(2) {
                Some(redis::Value::Array(replicas)) => replicas.len(),
                _ => 0,
            };
            (connected == 2 && keys >= 40)
                .then_some(())
                .ok_or(format!("{keys} keys, {connected} replicas connected"))
        },
    )
    .await;
    let history = writer.stop().await;
    let now = clusters(&setup).get(CLUSTER).await.unwrap().status.unwrap();
    assert_eq!(now.primary, status.primary, "the Sentinels failed over");

    check_history_on_primary_and_replicas(&setup, &primary, &password, &history).await;
    setup.remove().await;
}

/// A primary that crashes again soon after a restart is held back by the kubelet (ten seconds,
/// doubling with each crash): the operator, knowing so from the exit, has a Sentinel fail over at
/// once. `down-after` is two minutes here, so only that step moves the primary within the test's
/// wait; no acknowledged write is lost.
#[tokio::test]
async fn a_primary_the_kubelet_holds_back_is_failed_over_at_once_with_every_acknowledged_write() {
    let (setup, status, password, writer) = slow_sentinels_under_a_writer("real-redis-held-back").await;
    let primary_pod = status.primary.clone().expect("a primary");
    wait::until(
        "writes acknowledged before the kills",
        Duration::from_secs(60),
        || async {
            let acknowledged = writer.acknowledged();
            (acknowledged >= 30)
                .then_some(())
                .ok_or(format!("{acknowledged} acknowledged"))
        },
    )
    .await;

    // The first crash is restarted at once; the second, within minutes, is held back.
    setup
        .kill_and_await_restart(&primary_pod, SERVER, Duration::from_secs(120))
        .await;
    let after_restart = support::ready(&clusters(&setup), CLUSTER, 3).await;
    assert_eq!(
        after_restart.primary, status.primary,
        "the first crash was restarted in place"
    );
    let pod = setup.pods().get(&primary_pod).await.unwrap();
    real_node::kill_container(&pod, SERVER);
    let moved = wait::until(
        "another node made the primary, well before down-after",
        Duration::from_secs(60),
        || async {
            let now = clusters(&setup)
                .get(CLUSTER)
                .await
                .map_err(|error| error.to_string())?;
            let primary = now.status.and_then(|status| status.primary);
            primary
                .clone()
                .filter(|primary| *primary != primary_pod)
                .ok_or(format!("primary {primary:?}"))
        },
    )
    .await;
    let asked = setup.messages("FailingOverHeldBack").await;
    assert_eq!(
        asked.len(),
        1,
        "the operator asked a Sentinel to fail over once: {asked:?}"
    );
    // The kubelet writes `CrashLoopBackOff` seconds after the exit; the operator knows the
    // back-off from the exit itself, a second crash soon after a restart.
    assert!(
        asked[0].contains("backs off its next start"),
        "the failover was asked on the exit, not on the kubelet's later CrashLoopBackOff: {}",
        asked[0]
    );
    let acknowledged = writer.acknowledged();
    wait::until(
        "writes acknowledged on the new primary",
        Duration::from_secs(60),
        || async {
            let now = writer.acknowledged();
            (now >= acknowledged + 20)
                .then_some(())
                .ok_or(format!("{now} acknowledged"))
        },
    )
    .await;
    let history = writer.stop().await;
    eprintln!("{primary_pod} held back by the kubelet; {moved} is the primary");
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    check_history_on_primary_and_replicas(&setup, &primary, &password, &history).await;
    setup.remove().await;
}

/// Every data pod deleted at once: the StatefulSet re-creates them on their volumes but on new
/// pod addresses, so the Sentinels name an address no node has any more. The operator maps it
/// back to the primary it recorded there, re-points the Sentinels one at a time, and the others
/// follow that node again: the same primary, no failover, no acknowledged write lost.
#[tokio::test]
async fn every_data_pod_back_on_a_new_address_keeps_its_primary_and_every_acknowledged_write() {
    let setup = OnRealNode::install("real-redis-new-addresses", CHART, &[]).await;
    let status = create_ready(&setup, on_real_node(support::replication_spec(2)), 3, 3).await;
    let primary_pod = status.primary.clone().expect("a primary");
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let primary_service = primary_service_address(&setup).await;
    let writer = start_reconnecting_writer(primary_service, &password);
    let keys_on_primary = || async {
        let mut connection = data_connection(primary_service, &password)
            .await
            .map_err(|error| error.to_string())?;
        redis::cmd("DBSIZE")
            .query_async::<usize>(&mut connection)
            .await
            .map_err(|error| error.to_string())
    };
    wait::until(
        "writes acknowledged before the pods go",
        Duration::from_secs(60),
        || async {
            let keys = keys_on_primary().await?;
            (keys >= 30).then_some(()).ok_or(format!("{keys} keys"))
        },
    )
    .await;
    let repointed_before = setup.occurrences(&["SentinelRepointed"]).await;
    let failovers_before = setup.occurrences(&["PrimaryChanged"]).await;

    // Delete them all together; again if the pod network happened to hand an old address back.
    let addresses = |pods: &[k8s_openapi::api::core::v1::Pod]| -> BTreeMap<String, String> {
        pods.iter()
            .map(|pod| {
                let ip = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.pod_ip.clone())
                    .unwrap_or_default();
                (pod.metadata.name.clone().unwrap(), ip)
            })
            .collect()
    };
    let mut old: Vec<String> = addresses(&setup.pods_of(NODES).await).into_values().collect();
    let mut new_addresses = BTreeMap::new();
    for attempt in 1..=3 {
        let uids: Vec<_> = setup
            .pods_of(NODES)
            .await
            .into_iter()
            .map(|pod| pod.metadata.uid)
            .collect();
        setup
            .pods()
            .delete_collection(
                &kube::api::DeleteParams::default(),
                &kube::api::ListParams::default().labels(NODES),
            )
            .await
            .unwrap();
        let pods = wait::until(
            "every data pod re-created with an address",
            Duration::from_secs(120),
            || async {
                let pods = setup.pods_of(NODES).await;
                let renewed = pods
                    .iter()
                    .filter(|pod| !uids.contains(&pod.metadata.uid))
                    .count();
                let addressed = addresses(&pods).values().filter(|ip| !ip.is_empty()).count();
                (pods.len() == 3 && renewed == 3 && addressed == 3)
                    .then_some(pods.clone())
                    .ok_or_else(|| quorum_e2e::real_pods::describe_pods(&pods))
            },
        )
        .await;
        new_addresses = addresses(&pods);
        if new_addresses.values().all(|ip| !old.contains(ip)) {
            break;
        }
        assert!(
            attempt < 3,
            "the pod network keeps handing old addresses back: {new_addresses:?}"
        );
        old.extend(new_addresses.values().cloned());
    }
    let primary_now = format!("{}:6379", new_addresses[&primary_pod]);

    let recovered = wait::until(
        "the same primary Ready at its new address",
        Duration::from_secs(240),
        || async {
            let status = clusters(&setup)
                .get(CLUSTER)
                .await
                .map_err(|error| error.to_string())?
                .status
                .unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (ready && status.ready_nodes == 3 && status.primary_address.as_deref() == Some(&primary_now))
                .then_some(status.clone())
                .ok_or_else(|| format!("{status:?}"))
        },
    )
    .await;
    assert_eq!(
        recovered.primary, status.primary,
        "another node became the primary"
    );
    for sentinel in &recovered.sentinels {
        assert_eq!(sentinel.primary.as_ref(), Some(&primary_pod), "{sentinel:?}");
    }
    let repointed = setup.occurrences(&["SentinelRepointed"]).await;
    assert!(
        repointed.get("SentinelRepointed").copied().unwrap_or(0)
            >= repointed_before.get("SentinelRepointed").copied().unwrap_or(0) + 3,
        "not every Sentinel was re-pointed: {repointed:?}"
    );
    assert_eq!(
        setup.occurrences(&["PrimaryChanged"]).await,
        failovers_before,
        "the Sentinels failed over"
    );

    let keys_before = keys_on_primary().await.unwrap_or(0);
    wait::until(
        "writes acknowledged after the return",
        Duration::from_secs(60),
        || async {
            let keys = keys_on_primary().await?;
            (keys >= keys_before + 10)
                .then_some(())
                .ok_or(format!("{keys} keys, {keys_before} before"))
        },
    )
    .await;
    let history = writer.stop().await;
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    check_history_on_primary_and_replicas(&setup, &primary, &password, &history).await;
    setup.remove().await;
}

/// Every pod of the deployment, data nodes and Sentinels.
const EVERY_POD: &str = "app.kubernetes.io/name=redis,app.kubernetes.io/instance=cache,app.kubernetes.io/component in (node,sentinel)";

/// Replication mode, every data node and Sentinel down at once, twice (every process killed,
/// then every pod deleted, so they come back at new addresses and the Sentinels with empty
/// state): the deployment comes back by itself with one primary serving its Service, and no
/// acknowledged write is lost.
#[tokio::test]
async fn replication_after_a_total_outage_serves_every_acknowledged_write() {
    let setup = OnRealNode::install("real-redis-outage", CHART, &[]).await;
    create_ready(&setup, on_real_node(support::replication_spec(2)), 3, 3).await;
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let primary_service = primary_service_address(&setup).await;
    let writer = start_reconnecting_writer(primary_service, &password);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    const REBUILDS: [&str; 3] = ["RebuildingNode", "RemovingNode", "RestartingNode"];
    let steps_before = setup.occurrences(&REBUILDS).await;

    setup.total_outage(EVERY_POD, Duration::from_secs(240)).await;
    support::ready(&clusters(&setup), CLUSTER, 3).await;
    writer
        .acknowledged_at_least(writer.acknowledged() + 20, Duration::from_secs(120))
        .await;
    assert_eq!(
        setup.occurrences(&REBUILDS).await,
        steps_before,
        "nodes were rebuilt, removed or restarted"
    );

    let history = writer.stop().await;
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    check_history_on_primary_and_replicas(&setup, &primary, &password, &history).await;
    setup.remove().await;
}

/// Cluster mode, every node of every shard down at once, twice (every process killed, then every
/// pod deleted, so the nodes come back at new addresses): the cluster forms again by itself,
/// every slot is served, and no acknowledged write is lost. It failed in one run before the
/// operator told a replica still replicating from its primary's old address to replicate it
/// again: Redis had learned the new address from another node's gossip, and its link stayed down.
#[tokio::test]
async fn a_sharded_cluster_after_a_total_outage_serves_every_acknowledged_write() {
    let setup = OnRealNode::install("real-redis-shards-outage", CHART, &[]).await;
    create_ready(&setup, sharing_the_real_node(support::cluster_spec(3, 1)), 6, 0).await;
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let client = Arc::new(ClusterClient::new(node_addresses(&setup, 6).await, &password));
    let writer = start_writer({
        let client = client.clone();
        move |key, value| {
            let client = client.clone();
            async move { client.set(&key, &value).await.is_ok() }
        }
    });
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;

    setup.total_outage(NODES, Duration::from_secs(240)).await;
    support::ready(&clusters(&setup), CLUSTER, 6).await;

    // The writer's client knows only the old addresses; a new one learns the new ones.
    let history = writer.stop().await;
    let reader = ClusterClient::new(node_addresses(&setup, 6).await, &password);
    let checked = check_history(&history, |key| {
        let reader = &reader;
        async move { reader.get(&key).await.unwrap() }
    })
    .await;
    for n in 0..20 {
        let (key, value) = (format!("after/{n}"), format!("v{n}"));
        reader.set(&key, &value).await.unwrap();
        assert_eq!(reader.get(&key).await.unwrap(), Some(value));
    }
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// Cluster mode, a new pod template under a cluster-aware writer: one shard at a time, lowest
/// first, the operator restarts the shard's replica, then hands the shard's slots to it
/// (`CLUSTER FAILOVER`, the primary's clients held until the replica has every write) and
/// restarts the old primary last. Never two nodes down at once, and no acknowledged write lost.
/// Before, the StatefulSet controller restarted a shard's pods itself, the primary as a crash
/// that Redis Cluster failed over, with no handover and no `SwitchoverRequested` step.
#[tokio::test]
async fn a_sharded_roll_restarts_one_node_at_a_time_each_shards_primary_last_after_a_handover() {
    let setup = OnRealNode::install("real-redis-shards-roll", CHART, &[]).await;
    let status = create_ready(&setup, sharing_the_real_node(support::cluster_spec(3, 1)), 6, 0).await;
    let primaries_before = shard_primaries(&status);
    assert_eq!(primaries_before.len(), 3, "{status:?}");
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let writer = start_cluster_writer(&setup, &password).await;
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    let steps = ["RestartingNode", "SwitchoverRequested"];
    let before = setup.occurrences(&steps).await;

    let primaries_now = || async {
        let cluster = clusters(&setup).get(CLUSTER).await.ok()?;
        let primaries = shard_primaries(&cluster.status?);
        Some(format!("{primaries:?}"))
    };
    let rolled = setup
        .roll_to_a_new_template(
            (&clusters(&setup), CLUSTER),
            (NODES, 6),
            (&steps, false),
            format!("{primaries_before:?}"),
            primaries_now,
        )
        .await;
    let status = support::ready(&clusters(&setup), CLUSTER, 6).await;
    let record = &rolled.record;
    eprintln!("primaries during the roll: {:?}", rolled.leaders);

    assert_eq!(record.most_down_at_once(), 1, "one node at a time: {record:?}");
    assert_eq!(record.replaced.len(), 6, "{record:?}");
    let position = |pod: &str| record.replaced.iter().position(|replaced| replaced == pod);
    let primaries_after = shard_primaries(&status);
    for (shard, old_primary) in &primaries_before {
        let pods: Vec<String> = (0..2).map(|n| shard_node_name(2 * shard + n)).collect();
        let replica = pods.iter().find(|pod| *pod != old_primary).expect("a replica");
        assert!(
            position(replica) < position(old_primary),
            "shard {shard}: the primary {old_primary} last: {record:?}"
        );
        assert_eq!(
            primaries_after.get(shard),
            Some(replica),
            "shard {shard}'s slots were handed to its replica"
        );
    }
    let shards_in_order: Vec<usize> = record
        .replaced
        .iter()
        .map(|pod| {
            (0..6)
                .position(|o| shard_node_name(o) == *pod)
                .expect("a data pod")
                / 2
        })
        .collect();
    assert!(
        shards_in_order.is_sorted(),
        "one shard at a time, the lowest first: {shards_in_order:?}"
    );
    let after = setup.occurrences(&steps).await;
    let taken = |reason: &str| after.get(reason).unwrap_or(&0) - before.get(reason).unwrap_or(&0);
    // A step retried after a refusal is reported again.
    assert!(taken("RestartingNode") >= 6, "{after:?}");
    assert!(taken("SwitchoverRequested") >= 3, "{after:?}");

    let history = writer.stop().await;
    let reader = ClusterClient::new(node_addresses(&setup, 6).await, &password);
    let checked = check_history(&history, |key| {
        let reader = &reader;
        async move { reader.get(&key).await.unwrap() }
    })
    .await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// Each shard's primary as status reports it, by shard.
fn shard_primaries(status: &RedisClusterStatus) -> BTreeMap<usize, String> {
    status
        .nodes
        .iter()
        .filter(|node| node.role == "Primary")
        .filter_map(|node| Some((usize::try_from(node.shard?).ok()?, node.name.clone())))
        .collect()
}

/// A cluster-aware writer that, when a write fails, learns the nodes' addresses again from
/// their pods (restarted nodes come back at new addresses) and tries once more, as a client
/// refreshing its seed list would.
async fn start_cluster_writer(setup: &OnRealNode, password: &str) -> Writer {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let seeds = node_addresses(setup, 6).await;
    let client = Arc::new(tokio::sync::RwLock::new(Arc::new(ClusterClient::new(
        seeds, password,
    ))));
    let password = password.to_string();
    start_writer(move |key, value| {
        let (client, pods, password) = (client.clone(), pods.clone(), password.clone());
        async move {
            let current = client.read().await.clone();
            if current.set(&key, &value).await.is_ok() {
                return true;
            }
            let listed = pods
                .list(&kube::api::ListParams::default().labels(NODES))
                .await
                .map(|list| list.items)
                .unwrap_or_default();
            let seeds: Vec<SocketAddr> = listed
                .iter()
                .filter_map(|pod| pod.status.as_ref()?.pod_ip.as_ref()?.parse().ok())
                .map(|ip| SocketAddr::new(ip, 6379))
                .collect();
            if seeds.is_empty() {
                return false;
            }
            let fresh = Arc::new(ClusterClient::new(seeds, &password));
            *client.write().await = fresh.clone();
            fresh.set(&key, &value).await.is_ok()
        }
    })
}

/// Replication mode, the primary lost for good (its server hung, its pod in place) while no
/// Sentinel can fail over (each replaced by a new one that monitors nothing): the operator
/// waits and says why; `quorum.dev/recover-from` naming the lost primary is refused and changes
/// nothing; naming a replica that holds everything makes it the primary, the Sentinels monitor
/// it, the other replica follows it, writes through the primary Service are taken again, and
/// every write acknowledged before the loss is there. Before, a person could only restore a
/// new deployment from the newest backup.
#[tokio::test]
async fn a_recovery_request_promotes_the_named_replica_when_the_primary_is_lost_and_no_sentinel_can_fail_over()
 {
    let setup = OnRealNode::install("real-redis-recover", CHART, &[]).await;
    let status = create_ready(&setup, on_real_node(support::replication_spec(2)), 3, 3).await;
    let lost = status.primary.clone().expect("a primary");
    let survivor = (0..3)
        .map(|ordinal| node_name(CLUSTER, ordinal))
        .find(|name| *name != lost)
        .unwrap();
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let primary_service = primary_service_address(&setup).await;
    let writer = start_reconnecting_writer(primary_service, &password);
    writer.acknowledged_at_least(30, Duration::from_secs(60)).await;
    let before_loss = writer.stop().await;
    let replicas = service_connection(&setup, &replicas_service_name(CLUSTER), &password).await;
    let last = before_loss.acknowledged().last().expect("a write").key.clone();
    wait::until(
        "the replicas hold the last acknowledged write",
        Duration::from_secs(30),
        || async {
            let value: Option<String> = replicas.clone().get(&last).await.map_err(|e| e.to_string())?;
            value.map(|_| ()).ok_or_else(|| "not yet".to_string())
        },
    )
    .await;

    // No Sentinel can fail over: with the operator stopped, each loses its volume and is replaced
    // by a new one that monitors nothing. Then the primary's server hangs for good.
    setup.scale_operator(0).await;
    for ordinal in 0..3 {
        let sentinel = sentinel_name(CLUSTER, ordinal);
        setup
            .claims()
            .delete(&quorum_core::pod::data_claim_name(&sentinel), &Default::default())
            .await
            .unwrap();
        setup
            .delete_and_await_recreated(&sentinel, Duration::from_secs(60))
            .await;
    }
    let lost_pod = setup.pods().get(&lost).await.unwrap();
    real_node::freeze_container(&lost_pod, SERVER);
    setup.scale_operator(1).await;
    progressing_reason(&setup, "PrimaryUnknown").await;
    assert_eq!(
        clusters(&setup)
            .get(CLUSTER)
            .await
            .unwrap()
            .status
            .unwrap()
            .primary
            .as_deref(),
        Some(lost.as_str()),
        "no node promoted without a request"
    );

    request_recovery(&setup, Some(&lost)).await;
    let refused = recovery_record(&setup, "the request naming the lost primary refused", |record| {
        record.is_some_and(|r| r.message.contains("names the primary"))
    })
    .await;
    assert_eq!(refused.phase, RecoveryPhase::Waiting, "{refused:?}");

    request_recovery(&setup, Some(&survivor)).await;
    let done = recovery_record(&setup, &format!("{survivor} serving"), |record| {
        record.is_some_and(|r| r.phase == RecoveryPhase::Done)
    })
    .await;
    assert_eq!(done.replaced.as_deref(), Some(lost.as_str()), "{done:?}");
    let now = clusters(&setup).get(CLUSTER).await.unwrap().status.unwrap();
    assert_eq!(now.primary.as_deref(), Some(survivor.as_str()));
    let recoveries = setup.occurrences(&["RecoveringFromNode"]).await;
    assert!(
        recoveries.get("RecoveringFromNode").is_some_and(|n| *n >= 1),
        "{recoveries:?}"
    );

    // The new primary takes writes through the primary Service once the other replica follows
    // it (its write fence), and holds every write acknowledged before the loss.
    let after = start_reconnecting_writer(primary_service, &password);
    after.acknowledged_at_least(10, Duration::from_secs(120)).await;
    let after = after.stop().await;
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    for history in [&before_loss, &after] {
        check_history(history, |key| {
            let mut primary = primary.clone();
            async move { primary.get(key).await.unwrap() }
        })
        .await;
    }
    request_recovery(&setup, None).await;
    real_node::thaw_container(&lost_pod, SERVER);
    setup.remove().await;
}

/// Sets (or, with `None`, removes) the recovery request.
async fn request_recovery(setup: &OnRealNode, member: Option<&str>) {
    let patch =
        serde_json::json!({"metadata": {"annotations": {quorum_core::recovery::RECOVER_ANNOTATION: member}}});
    clusters(setup)
        .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The recovery record in status once it satisfies `until`.
async fn recovery_record(
    setup: &OnRealNode,
    what: &str,
    until: impl Fn(Option<&RecoveryRecord>) -> bool,
) -> RecoveryRecord {
    wait::until(what, Duration::from_secs(120), || async {
        let cluster = clusters(setup).get(CLUSTER).await.map_err(|e| e.to_string())?;
        let record = cluster.status.and_then(|status| status.recovery);
        match record {
            Some(record) if until(Some(&record)) => Ok(record),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// Waits until the `Progressing` condition's reason is `reason`.
async fn progressing_reason(setup: &OnRealNode, reason: &str) {
    wait::until(
        &format!("Progressing {reason}"),
        Duration::from_secs(120),
        || async {
            let cluster = clusters(setup).get(CLUSTER).await.map_err(|e| e.to_string())?;
            let progressing = cluster
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Progressing")
                .map(|c| format!("{}: {}", c.reason, c.message));
            match progressing {
                Some(text) if text.starts_with(&format!("{reason}:")) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// Sets (or, with `None`, removes) the repair request.
async fn request_repair(setup: &OnRealNode, member: Option<&str>) {
    real_pods::request_repair(&clusters(setup), CLUSTER, member).await;
}

/// The repair record in status once it satisfies `until`.
async fn repair_record(
    setup: &OnRealNode,
    what: &str,
    until: impl Fn(Option<&RepairRecord>) -> bool,
) -> Option<RepairRecord> {
    real_pods::repair_record(
        &clusters(setup),
        CLUSTER,
        what,
        |c: &RedisCluster| c.status.as_ref()?.repair.clone(),
        until,
    )
    .await
}

/// Replication mode: `quorum.dev/repair` naming no node is refused with a record that says why;
/// naming a replica wipes it once, so it comes back on a new, empty volume and copies everything
/// from the primary, under a steady writer, and no acknowledged write is lost; removing the
/// annotation ends the request. A wipe recorded but not yet taken when the operator stopped,
/// whose pod was then replaced on the same claim, is taken on the pod that replaced it.
#[tokio::test]
async fn a_repair_request_rebuilds_the_named_replica_on_an_empty_volume() {
    let setup = OnRealNode::install("real-redis-repair", CHART, &[]).await;
    let status = create_ready(&setup, on_real_node(support::replication_spec(2)), 3, 3).await;
    let primary_pod = status.primary.clone().expect("a primary");
    let target = (0..3)
        .map(|ordinal| node_name(CLUSTER, ordinal))
        .find(|name| *name != primary_pod)
        .unwrap();
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let primary_service = primary_service_address(&setup).await;
    let writer = start_reconnecting_writer(primary_service, &password);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;

    request_repair(&setup, Some(&node_name(CLUSTER, 7))).await;
    let refused = repair_record(&setup, "the request for no node refused", |record| {
        record.is_some_and(|r| r.message.contains("is not one of this cluster's 3 members"))
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
    let rebuilds = setup.occurrences(&["RebuildingNode"]).await;
    assert_eq!(rebuilds.get("RebuildingNode"), Some(&1), "{rebuilds:?}");

    request_repair(&setup, None).await;
    repair_record(&setup, "the record gone with the request", |record| {
        record.is_none()
    })
    .await;
    support::ready(&clusters(&setup), CLUSTER, 3).await;
    assert_eq!(setup.occurrences(&["RebuildingNode"]).await, rebuilds);
    let now = clusters(&setup).get(CLUSTER).await.unwrap().status.unwrap();
    assert_eq!(now.primary, status.primary, "the primary changed");

    // The operator stopped after recording a wipe and before taking it, and the pod was
    // replaced meanwhile (deleted by someone else) on the same claim: the same data, so the
    // request is done only once that claim is gone. Before, another pod under the name counted
    // as wiped, and the request was reported done on the volume it was asked to replace.
    setup.scale_operator(0).await;
    let recorded_pod = setup.pods().get(&target).await.unwrap().metadata.uid;
    let recorded_volume = setup.claim_uid(&claim).await;
    request_repair(&setup, Some(&target)).await;
    real_pods::record_repair(
        &clusters(&setup),
        CLUSTER,
        &RepairRecord {
            member: target.clone(),
            phase: RepairPhase::Rebuilding,
            replaced: recorded_pod,
            replaced_claim: Some(recorded_volume.clone()),
            message: "recorded before the wipe".into(),
        },
    )
    .await;
    setup
        .delete_and_await_new_pod(&target, Duration::from_secs(180))
        .await;
    assert_eq!(
        setup.claim_uid(&claim).await,
        recorded_volume,
        "the pod came back on its claim"
    );
    setup.scale_operator(1).await;
    let done = repair_record(&setup, &format!("{target} rebuilt again"), |record| {
        record.is_some_and(|r| r.member == target && r.phase == RepairPhase::Done)
    })
    .await
    .unwrap();
    assert_ne!(
        setup.claim_uid(&claim).await,
        recorded_volume,
        "{target} was reported rebuilt on the volume it was asked to replace: {done:?}"
    );
    assert_eq!(
        setup.occurrences(&["RebuildingNode"]).await.get("RebuildingNode"),
        Some(&2),
        "one more wipe, of the pod that replaced the one recorded"
    );
    request_repair(&setup, None).await;
    repair_record(&setup, "the second record gone with the request", |record| {
        record.is_none()
    })
    .await;
    support::ready(&clusters(&setup), CLUSTER, 3).await;

    writer
        .acknowledged_at_least(writer.acknowledged() + 20, Duration::from_secs(60))
        .await;
    let history = writer.stop().await;
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    check_history_on_primary_and_replicas(&setup, &primary, &password, &history).await;
    setup.remove().await;
}

/// Cluster mode: `quorum.dev/repair` naming no node is refused with a record that says why;
/// naming a shard's primary hands its slots to its replica first (`CLUSTER FAILOVER`), then
/// wipes it once, so it comes back on a new, empty volume under a new node id and copies
/// everything from the new primary, under a cluster-aware writer, and no acknowledged write is
/// lost. Before, cluster mode took no repair request.
#[tokio::test]
async fn a_sharded_repair_request_rebuilds_a_shards_primary_after_a_handover() {
    let setup = OnRealNode::install("real-redis-shards-repair", CHART, &[]).await;
    let status = create_ready(&setup, sharing_the_real_node(support::cluster_spec(3, 1)), 6, 0).await;
    let target = shard_primaries(&status).remove(&1).expect("shard 1's primary");
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let writer = start_cluster_writer(&setup, &password).await;
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;

    request_repair(&setup, Some(&shard_node_name(6))).await;
    let refused = repair_record(&setup, "the request for no node refused", |record| {
        record.is_some_and(|r| r.message.contains("is not one of this cluster's 6 members"))
    })
    .await
    .unwrap();
    assert_eq!(refused.phase, RepairPhase::Waiting, "{refused:?}");

    let claim = format!("data-{target}");
    let volume = setup.claim_uid(&claim).await;
    let pod_before = setup.pods().get(&target).await.unwrap().metadata.uid;
    let id_before = node_id(&status, &target);
    request_repair(&setup, Some(&target)).await;
    let done = repair_record(&setup, &format!("{target} rebuilt"), |record| {
        record.is_some_and(|r| r.member == target && r.phase == RepairPhase::Done)
    })
    .await
    .unwrap();
    assert_eq!(done.replaced, pod_before, "{done:?}");
    assert_ne!(setup.claim_uid(&claim).await, volume, "{target} kept its volume");
    let taken = setup
        .occurrences(&["RebuildingNode", "SwitchoverRequested"])
        .await;
    assert_eq!(taken.get("RebuildingNode"), Some(&1), "{taken:?}");
    assert!(
        taken.get("SwitchoverRequested").is_some_and(|n| *n >= 1),
        "{taken:?}"
    );

    request_repair(&setup, None).await;
    repair_record(&setup, "the record gone with the request", |record| {
        record.is_none()
    })
    .await;
    let status = support::ready(&clusters(&setup), CLUSTER, 6).await;
    assert_eq!(
        setup.occurrences(&["RebuildingNode"]).await.get("RebuildingNode"),
        Some(&1)
    );
    let new_primary = shard_primaries(&status).remove(&1).expect("shard 1's primary");
    assert_ne!(
        new_primary, target,
        "shard 1's slots were handed over before the wipe"
    );
    assert_ne!(
        node_id(&status, &target),
        id_before,
        "{target} came back under a new node id"
    );

    writer
        .acknowledged_at_least(writer.acknowledged() + 20, Duration::from_secs(60))
        .await;
    let history = writer.stop().await;
    let addresses = node_addresses(&setup, 6).await;
    let reader = ClusterClient::new(addresses, &password);
    let checked = check_history(&history, |key| {
        let reader = &reader;
        async move { reader.get(&key).await.unwrap() }
    })
    .await;
    // The rebuilt node holds what its shard's primary holds.
    let pod_address = |pod: &str| {
        let pod = pod.to_string();
        let pods = setup.pods();
        async move {
            let ip = pods.get(&pod).await.unwrap().status.unwrap().pod_ip.unwrap();
            SocketAddr::new(ip.parse().unwrap(), 6379)
        }
    };
    let rebuilt = data_connection(pod_address(&target).await, &password)
        .await
        .unwrap();
    let primary = data_connection(pod_address(&new_primary).await, &password)
        .await
        .unwrap();
    wait::until(
        "the rebuilt node holds its primary's keys",
        Duration::from_secs(60),
        || async {
            let held: u64 = redis::cmd("DBSIZE")
                .query_async(&mut rebuilt.clone())
                .await
                .map_err(|e| e.to_string())?;
            let wanted: u64 = redis::cmd("DBSIZE")
                .query_async(&mut primary.clone())
                .await
                .map_err(|e| e.to_string())?;
            (held == wanted && wanted > 0)
                .then_some(())
                .ok_or_else(|| format!("{held} of {wanted} keys"))
        },
    )
    .await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// The node id status records for pod `name`.
fn node_id(status: &RedisClusterStatus, name: &str) -> Option<String> {
    status
        .nodes
        .iter()
        .find(|node| node.name == name)
        .and_then(|node| node.node_id.clone())
}

/// The data nodes' pod addresses, as cluster-aware clients learn them.
async fn node_addresses(setup: &OnRealNode, nodes: usize) -> Vec<SocketAddr> {
    setup
        .members_ready(NODES, nodes, Duration::from_secs(60))
        .await
        .into_iter()
        .map(|pod| SocketAddr::new(pod.status.unwrap().pod_ip.unwrap().parse().unwrap(), 6379))
        .collect()
}

/// Cluster mode, shards 3 -> 4 -> 3 -> 4 under a cluster-aware writer: the nodes of the shard
/// removed lose their volumes with their pods, so the shard added again starts from empty nodes
/// (an old volume would bring back a node id the cluster forgot), every slot is served, and no
/// acknowledged write is lost.
#[tokio::test]
async fn shards_removed_and_added_again_start_from_empty_volumes() {
    let setup = OnRealNode::install("real-redis-shards", CHART, &[]).await;
    create_ready(&setup, sharing_the_real_node(support::cluster_spec(3, 1)), 6, 0).await;
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let client = Arc::new(ClusterClient::new(node_addresses(&setup, 6).await, &password));
    let writer = start_writer({
        let client = client.clone();
        move |key, value| {
            let client = client.clone();
            async move { client.set(&key, &value).await.is_ok() }
        }
    });
    let removed_claims = [
        format!("data-{}", shard_node_name(6)),
        format!("data-{}", shard_node_name(7)),
    ];
    let mut first_volumes = Vec::new();

    for shards in [4, 3, 4] {
        clusters(&setup)
            .patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"shards": shards}})),
            )
            .await
            .unwrap();
        let nodes = shards * 2;
        support::ready(&clusters(&setup), CLUSTER, nodes).await;
        setup
            .members_ready(NODES, nodes as usize, Duration::from_secs(120))
            .await;
        match first_volumes.is_empty() {
            true => {
                for claim in &removed_claims {
                    first_volumes.push(setup.claim_uid(claim).await);
                }
            }
            false if shards == 3 => {
                for claim in &removed_claims {
                    setup.claim_deleted(claim, Duration::from_secs(60)).await;
                }
            }
            false => {
                for (claim, first) in removed_claims.iter().zip(&first_volumes) {
                    assert_ne!(
                        &setup.claim_uid(claim).await,
                        first,
                        "{claim}: the old volume came back"
                    );
                }
            }
        }
    }

    let history = writer.stop().await;
    let reader = ClusterClient::new(node_addresses(&setup, 8).await, &password);
    let checked = check_history(&history, |key| {
        let reader = &reader;
        async move { reader.get(&key).await.unwrap() }
    })
    .await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// Cluster mode with the default placement, on the one real node: a shard's primary and replica
/// never share a node, so one pod of each shard is placed and the other waits unscheduled, and
/// the deployment's `PodsFailing` condition says why. Once the user allows sharing
/// (`spec.podTemplate.affinity`), the shards roll to the new template and the cluster forms.
#[tokio::test]
async fn a_shards_primary_and_replica_never_share_a_node_unless_the_user_allows_it() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    let setup = OnRealNode::install("real-redis-apart", CHART, &[]).await;
    clusters(&setup)
        .create(&PostParams::default(), &on_real_node(support::cluster_spec(3, 1)))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let unschedulable = |pod: &Pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.message
                            .as_deref()
                            .is_some_and(|m| m.contains("topology spread constraints"))
                })
            })
    };
    wait::until(
        "each shard with one pod placed and one kept off the node its shard-mate is on",
        Duration::from_secs(120),
        || async {
            let listed = pods
                .list(&ListParams::default().labels(NODES))
                .await
                .map_err(|e| e.to_string())?
                .items;
            let mut by_shard: BTreeMap<String, (Vec<String>, usize)> = BTreeMap::new();
            for pod in &listed {
                let shard = pod
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SHARD_LABEL))
                    .cloned();
                let entry = by_shard
                    .entry(shard.unwrap_or_else(|| "none".into()))
                    .or_default();
                match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    Some(node) => entry.0.push(node),
                    None if unschedulable(pod) => entry.1 += 1,
                    None => {}
                }
            }
            for (shard, (placed, _)) in &by_shard {
                let mut nodes = placed.clone();
                nodes.dedup();
                assert_eq!(
                    nodes.len(),
                    placed.len(),
                    "shard {shard}: two of its pods share a node: {placed:?}"
                );
            }
            let expected: BTreeMap<String, (Vec<String>, usize)> = (0..3)
                .map(|shard| (shard.to_string(), (vec![real_node::NODE_NAME.to_string()], 1)))
                .collect();
            (by_shard == expected)
                .then_some(())
                .ok_or(format!("{by_shard:?}"))
        },
    )
    .await;
    wait::until("PodsFailing naming the rule", Duration::from_secs(60), || async {
        let status = clusters(&setup)
            .get(CLUSTER)
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        status
            .conditions
            .iter()
            .find(|c| {
                c.type_ == "PodsFailing"
                    && c.status == "True"
                    && c.message.contains("topology spread constraints")
            })
            .map(|_| ())
            .ok_or(format!("{:?}", status.conditions))
    })
    .await;

    clusters(&setup)
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"podTemplate": {"affinity": {}}}})),
        )
        .await
        .unwrap();
    support::ready(&clusters(&setup), CLUSTER, 6).await;
    setup.members_ready(NODES, 6, Duration::from_secs(180)).await;
    setup.remove().await;
}

/// Replication mode, replicas 2 -> 1 -> 2 under a writer through the primary Service: the replica
/// removed loses its volume with its pod, so the one added again starts empty and syncs from the
/// primary; the primary is kept and no acknowledged write is lost.
#[tokio::test]
async fn a_replica_removed_and_added_again_starts_from_an_empty_volume() {
    let setup = OnRealNode::install("real-redis-replicas", CHART, &[]).await;
    let status = create_ready(&setup, on_real_node(support::replication_spec(2)), 3, 3).await;
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    let writer = start_writer({
        let primary = primary.clone();
        move |key, value| {
            let mut primary = primary.clone();
            async move { primary.set::<_, _, ()>(key, value).await.is_ok() }
        }
    });
    let removed = node_name(CLUSTER, 2);
    let claim = format!("data-{removed}");
    let first_volume = setup.claim_uid(&claim).await;

    for (replicas, nodes) in [(1, 2), (2, 3)] {
        clusters(&setup)
            .patch(
                CLUSTER,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
        support::ready(&clusters(&setup), CLUSTER, nodes).await;
        setup
            .members_ready(NODES, nodes as usize, Duration::from_secs(120))
            .await;
        if nodes == 2 {
            setup.claim_deleted(&claim, Duration::from_secs(60)).await;
        }
    }
    assert_ne!(
        setup.claim_uid(&claim).await,
        first_volume,
        "{claim}: the old volume came back"
    );
    let now = clusters(&setup).get(CLUSTER).await.unwrap().status.unwrap();
    assert_eq!(now.primary, status.primary, "the primary changed");

    let history = writer.stop().await;
    let checked = check_history(&history, |key| {
        let mut primary = primary.clone();
        async move { primary.get(key).await.unwrap() }
    })
    .await;
    // The re-added replica holds exactly the primary's keys once it has synced.
    let mut primary_conn = primary.clone();
    let keys: usize = redis::cmd("DBSIZE").query_async(&mut primary_conn).await.unwrap();
    let pods = setup.members_ready(NODES, 3, Duration::from_secs(60)).await;
    let readded = pods
        .iter()
        .find(|pod| pod.metadata.name.as_deref() == Some(removed.as_str()))
        .and_then(|pod| pod.status.as_ref()?.pod_ip.clone())
        .expect("the re-added replica's address");
    let address = SocketAddr::new(readded.parse().unwrap(), 6379);
    wait::until("the re-added replica synced", Duration::from_secs(60), || async {
        let mut connection = data_connection(address, &password)
            .await
            .map_err(|error| error.to_string())?;
        let held: usize = redis::cmd("DBSIZE")
            .query_async(&mut connection)
            .await
            .map_err(|error| error.to_string())?;
        if held == keys {
            Ok(())
        } else {
            Err(format!("{held} of {keys} keys"))
        }
    })
    .await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// Backups to an S3 store in the cluster: the operator's pod stores a one-shot backup there over
/// the pod network, and a new deployment restored from it (each data pod's init step fetching
/// its snapshot from the store) holds every write acknowledged before it and nothing written
/// after; a schedule every minute keeps one run of its own and never deletes the one-shot's
/// object.
#[tokio::test]
async fn backups_land_in_an_s3_store_and_a_new_deployment_restores_from_one() {
    use redis_operator::crd::{RedisBackup, RestoreSource};

    let setup = OnRealNode::install("real-redis-s3", CHART, &["backups.allowHttp=true"]).await;
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, on_real_node(support::replication_spec(2)), 3, 3).await;
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let writer = start_reconnecting_writer(primary_service_address(&setup).await, &password);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    let history = writer.stop().await;

    let one_shot = store.back_up_once::<RedisBackup>(&setup, CLUSTER, "redis").await;
    store
        .schedule_every_minute::<RedisBackup>(&setup, CLUSTER, "redis")
        .await;
    let mut primary = service_connection(&setup, &primary_service_name(CLUSTER), &password).await;
    let _: () = primary.set("after-the-backup", "not-restored").await.unwrap();

    let mut copy = on_real_node(support::replication_spec(1));
    copy.metadata.name = Some("copy".into());
    copy.spec.restore_from = Some(RestoreSource {
        backup_name: real_pods::ONE_SHOT_BACKUP.into(),
    });
    clusters(&setup)
        .create(&PostParams::default(), &copy)
        .await
        .unwrap();
    support::ready(&clusters(&setup), "copy", 2).await;
    let nodes = setup
        .members_ready(
            "app.kubernetes.io/name=redis,app.kubernetes.io/instance=copy,app.kubernetes.io/component=node",
            2,
            Duration::from_secs(120),
        )
        .await;
    real_pods::assert_init_container_succeeded(&nodes, redis_operator::resources::RESTORE_CONTAINER);
    let copy_password = generated_password(&setup.admin, &setup.ns, "copy").await;
    let mut restored = service_connection(&setup, &primary_service_name("copy"), &copy_password).await;
    let after: Option<String> = restored.get("after-the-backup").await.unwrap();
    assert_eq!(after, None, "a key written after the backup was restored");
    let checked = check_history(&history, |key| {
        let mut restored = restored.clone();
        async move { restored.get(key).await.unwrap() }
    })
    .await;
    assert!(checked >= 20, "{checked} acknowledged writes checked");
    let _: () = restored.set("after-the-restore", "written").await.unwrap();

    store
        .scheduled_runs_pruned::<RedisBackup>(&setup, "redis", &[one_shot])
        .await;
    setup.remove().await;
}

/// A backup with `verify` restores its snapshot into a throw-away deployment of one node, whose
/// own snapshot holds what the backup's recorded (every key without an expiry, its type and a
/// string's value); recorded content that no longer matches fails the next drill
/// ([`real_pods::InClusterS3::drill_verifies_then_catches_altered_content`]).
#[tokio::test]
async fn a_restore_drill_verifies_a_backup_and_catches_one_whose_content_differs() {
    use redis_operator::crd::RedisBackup;

    let setup = OnRealNode::install("real-redis-drill", CHART, &["backups.allowHttp=true"]).await;
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, on_real_node(support::replication_spec(1)), 2, 3).await;
    let password = generated_password(&setup.admin, &setup.ns, CLUSTER).await;
    let writer = start_reconnecting_writer(primary_service_address(&setup).await, &password);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    writer.stop().await;
    store
        .drill_verifies_then_catches_altered_content::<RedisBackup, RedisCluster>(
            &setup, CLUSTER, "redis", 20,
        )
        .await;
    setup.remove().await;
}
