//! Cluster mode, the whole operator against the real local control plane *and* real
//! `redis-server` processes: KWOK runs the pods, and `LocalMembers` runs a real cluster-enabled
//! data node for each pod (through the pods' own `start.sh`) on the loopback address the
//! operator resolves for it. Applications are played by a cluster-aware client that follows
//! `MOVED` and `ASK`, as real ones do during a resharding.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use crate::support::{ClusterClient, Setup, cluster_spec, ready, start_operator};
use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{Event, Pod, Service},
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use quorum_core::naming::loopback_ip;
use quorum_e2e::{
    fault_proxy::{Fault, FaultProxy},
    wait,
};
use redis_operator::{
    address::Kind,
    admin::{
        Credentials, RedisAdmin,
        cluster::{ClusterNode, SLOT_COUNT, myself, slot_ownership},
    },
    crd::{RedisCluster, RedisClusterStatus},
    resources::{DataNodes, ROLE_LABEL},
};

/// The tests' deployments: shards of a primary and a replica, each shard its own StatefulSet.
fn data_nodes() -> DataNodes {
    DataNodes::per_shard("cache", 2)
}

/// The pod of node `ordinal` (`cache-shard-<ordinal / 2>-<ordinal % 2>`).
fn pod(ordinal: usize) -> String {
    data_nodes().name(ordinal)
}

fn node_address(namespace: &str, ordinal: usize) -> SocketAddr {
    let (statefulset, ordinal) = data_nodes().place(ordinal);
    SocketAddr::new(loopback_ip(namespace, &statefulset, ordinal).into(), 6379)
}

/// The data pods the deployment's StatefulSets want in all; there is no StatefulSet `cache`.
async fn data_pods_wanted(client: &kube::Client, namespace: &str) -> i32 {
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    assert!(statefulsets.get_opt("cache").await.unwrap().is_none());
    statefulsets
        .list(
            &ListParams::default()
                .labels("app.kubernetes.io/instance=cache,app.kubernetes.io/component=node"),
        )
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|statefulset| statefulset.spec?.replicas)
        .sum()
}

async fn admin(address: SocketAddr, password: &str) -> RedisAdmin {
    RedisAdmin::connect(
        address,
        Some(Credentials::password(password)),
        Duration::from_secs(5),
    )
    .await
    .unwrap_or_else(|e| panic!("connect to {address}: {e}"))
}

/// Node `ordinal`'s own `CLUSTER NODES`, asked directly (never through the operator's routes).
async fn view_of(namespace: &str, password: &str, ordinal: usize) -> Vec<ClusterNode> {
    admin(node_address(namespace, ordinal), password)
        .await
        .cluster_nodes()
        .await
        .unwrap()
}

async fn status(clusters: &Api<RedisCluster>) -> RedisClusterStatus {
    clusters.get("cache").await.unwrap().status.unwrap_or_default()
}

async fn set_shards(clusters: &Api<RedisCluster>, shards: i32) {
    clusters
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"shards": shards}})),
        )
        .await
        .unwrap();
}

fn condition<'a>(
    status: &'a RedisClusterStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The node ids status records, by pod name.
fn recorded_ids(status: &RedisClusterStatus) -> BTreeMap<String, String> {
    status
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.node_id.clone().expect("a node id")))
        .collect()
}

async fn role_labels(client: &kube::Client, namespace: &str) -> BTreeMap<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.list(&ListParams::default().labels("app.kubernetes.io/component=node"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|pod| {
            let role = pod
                .metadata
                .labels
                .unwrap_or_default()
                .get(ROLE_LABEL)
                .cloned()
                .unwrap_or_default();
            (pod.metadata.name.unwrap_or_default(), role)
        })
        .collect()
}

async fn events(client: &kube::Client, namespace: &str, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

/// Asserts what a settled cluster of `shards` shards with one replica each looks like, in
/// status and in every node's own view.
async fn assert_serving(setup: &Setup, password: &str, shards: usize, status: &RedisClusterStatus) {
    let ns = setup.ns();
    assert_eq!(status.shards, shards as i32);
    assert_eq!(status.nodes.len(), 2 * shards);
    assert!(status.rebalance.is_none(), "{:?}", status.rebalance);
    let mut slots = 0;
    for node in &status.nodes {
        assert_eq!(node.health, "Healthy", "{node:?}");
        assert!(node.node_id.is_some(), "{node:?}");
        if node.role == "Primary" {
            slots += node
                .slots
                .iter()
                .map(|r| {
                    let (start, end) = r.split_once('-').unwrap();
                    end.parse::<usize>().unwrap() - start.parse::<usize>().unwrap() + 1
                })
                .sum::<usize>();
        } else {
            assert_eq!(node.role, "Replica", "{node:?}");
            assert_eq!(node.link.as_deref(), Some("up"), "{node:?}");
        }
    }
    assert_eq!(slots, usize::from(SLOT_COUNT));
    let ids: BTreeSet<String> = recorded_ids(status).into_values().collect();
    for ordinal in 0..2 * shards {
        let view = view_of(ns, password, ordinal).await;
        let seen: BTreeSet<String> = view.iter().map(|n| n.id.clone()).collect();
        assert_eq!(seen, ids, "node {ordinal} knows exactly the cluster's nodes");
        let owned: usize = slot_ownership(&view).values().flatten().map(|r| r.len()).sum();
        assert_eq!(
            owned,
            usize::from(SLOT_COUNT),
            "node {ordinal} sees every slot served"
        );
        let info = admin(node_address(ns, ordinal), password)
            .await
            .cluster_info()
            .await
            .unwrap();
        assert!(info.state_ok, "node {ordinal}: {info:?}");
    }
}

fn value_of(key: &str) -> String {
    format!("value-of-{key}")
}

/// Writes `writer-N` keys until stopped; returns the keys acknowledged and the errors seen.
fn start_writer(
    client: Arc<ClusterClient>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<String>, Vec<String>)> {
    tokio::spawn(async move {
        let mut written = Vec::new();
        let mut errors = Vec::new();
        let mut number = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let key = format!("writer-{number}");
            match client.set(&key, &value_of(&key)).await {
                Ok(()) => written.push(key),
                Err(error) => errors.push(format!("{key}: {error}")),
            }
            number += 1;
            // Paced, so the servers' two cores are left for the migration itself.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (written, errors)
    })
}

async fn assert_all_readable(client: &ClusterClient, keys: &[String]) {
    for key in keys {
        let value = client.get(key).await.unwrap_or_else(|e| panic!("GET {key}: {e}"));
        assert_eq!(value.as_deref(), Some(value_of(key).as_str()), "key {key}");
    }
}

fn seeds(namespace: &str, count: usize) -> Vec<SocketAddr> {
    (0..count).map(|o| node_address(namespace, o)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_form_serve_every_slot_and_take_cluster_aware_writes() {
    let started = Instant::now();
    let setup = Setup::start("redis-cluster-form").await;
    let ns = setup.ns().to_string();
    let status = setup.create_ready("cache", cluster_spec(3, 1), 6).await;
    let password = setup.password("cache").await;
    assert_serving(&setup, &password, 3, &status).await;
    eprintln!("formed and Ready after {:?}", started.elapsed());

    // Each shard is its two consecutive pods: the first the primary, the second its replica.
    for node in &status.nodes {
        let ordinal = data_nodes().ordinal_of(&node.name).unwrap();
        assert_eq!(node.shard, Some((ordinal / 2) as i32), "{node:?}");
        if ordinal.is_multiple_of(2) {
            assert_eq!(node.role, "Primary", "{node:?}");
        } else {
            assert_eq!(node.following.as_deref(), Some(pod(ordinal - 1).as_str()));
        }
    }
    let labels = role_labels(&setup.client, &ns).await;
    for ordinal in 0..6usize {
        let expected = if ordinal.is_multiple_of(2) {
            "primary"
        } else {
            "replica"
        };
        assert_eq!(labels[&pod(ordinal)], expected, "{labels:?}");
    }
    assert_eq!(data_pods_wanted(&setup.client, &ns).await, 6);
    let services: Api<Service> = Api::namespaced(setup.client.clone(), &ns);
    assert!(services.get_opt("cache-client").await.unwrap().is_some());

    // An application writes through any node and reads back, wherever the key lives.
    let client = ClusterClient::new(vec![node_address(&ns, 1)], &password);
    let keys: Vec<String> = (0..300).map(|n| format!("key-{n}")).collect();
    for key in &keys {
        client.set(key, &value_of(key)).await.unwrap();
    }
    assert_all_readable(&client, &keys).await;
    for ordinal in [0, 2, 4] {
        let count = admin(node_address(&ns, ordinal), &password)
            .await
            .key_count()
            .await
            .unwrap();
        assert!(count > 50, "primary {ordinal} holds {count} of the keys");
    }
    assert_eq!(events(&setup.client, &ns, "FormingCluster").await.len(), 1);
    setup.stop().await;
}

/// A deployment an operator from before per-shard StatefulSets formed (its pods in one
/// StatefulSet `cache`, no layout in its status) is taken over by this one without a pod
/// restarted or a node moved: it keeps the one StatefulSet, records that layout, and serves
/// every key it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_formed_on_one_statefulset_keeps_it_and_its_keys_under_a_new_operator() {
    use k8s_openapi::api::core::v1::Pod;
    use quorum_core::runner::PAUSE_ANNOTATION;
    let setup = Setup::start("redis-cluster-layout").await;
    let ns = setup.ns().to_string();
    let pause = |paused: bool| {
        let clusters = setup.clusters.clone();
        async move {
            let value = if paused {
                serde_json::json!("true")
            } else {
                serde_json::Value::Null
            };
            clusters
                .patch(
                    "cache",
                    &PatchParams::default(),
                    &Patch::Merge(
                        serde_json::json!({"metadata": {"annotations": {PAUSE_ANNOTATION: value}}}),
                    ),
                )
                .await
                .unwrap();
        }
    };
    let set_layout = |layout: serde_json::Value| {
        let clusters = setup.clusters.clone();
        async move {
            clusters
                .patch_status(
                    "cache",
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"status": {"dataLayout": layout}})),
                )
                .await
                .unwrap();
        }
    };
    // Formed on the one StatefulSet, as every deployment of an older operator was: created
    // paused, its layout recorded before the operator's first pass.
    let mut older = RedisCluster::new("cache", cluster_spec(3, 1));
    older
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(PAUSE_ANNOTATION.into(), "true".into());
    setup
        .clusters
        .create(&PostParams::default(), &older)
        .await
        .unwrap();
    set_layout(serde_json::json!("OneStatefulSet")).await;
    pause(false).await;
    let formed = ready(&setup.clusters, "cache", 6).await;
    let one = DataNodes::one_statefulset("cache");
    let address = |ordinal: usize| SocketAddr::new(loopback_ip(&ns, "cache", ordinal).into(), 6379);
    assert!(
        formed
            .nodes
            .iter()
            .all(|node| one.ordinal_of(&node.name).is_some()),
        "{:?}",
        formed.nodes
    );
    let password = setup.password("cache").await;
    let client = ClusterClient::new((0..6).map(address).collect(), &password);
    let keys: Vec<String> = (0..200).map(|n| format!("key-{n}")).collect();
    for key in &keys {
        client.set(key, &value_of(key)).await.unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), &ns);
    let uids =
        |pods: Vec<Pod>| -> BTreeSet<String> { pods.into_iter().filter_map(|p| p.metadata.uid).collect() };
    let node_pods = ListParams::default().labels("app.kubernetes.io/component=node");
    let before = uids(pods.list(&node_pods).await.unwrap().items);

    // The status as an older operator wrote it: nodes, slots, no layout.
    pause(true).await;
    set_layout(serde_json::Value::Null).await;
    assert_eq!(status(&setup.clusters).await.data_layout, None);
    pause(false).await;
    setup
        .status_until(
            "cache",
            "its layout recorded",
            Duration::from_secs(60),
            |status| {
                (status.data_layout == Some(redis_operator::crd::DataLayout::OneStatefulSet))
                    .then_some(())
                    .ok_or(format!("{:?}", status.data_layout))
            },
        )
        .await;
    let kept = ready(&setup.clusters, "cache", 6).await;
    assert_eq!(recorded_ids(&kept), recorded_ids(&formed), "no node moved");
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), &ns);
    let names: Vec<String> = statefulsets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert_eq!(
        names,
        vec!["cache".to_string()],
        "no StatefulSet per shard beside the one"
    );
    assert_eq!(
        uids(pods.list(&node_pods).await.unwrap().items),
        before,
        "no pod replaced"
    );
    assert_all_readable(&client, &keys).await;
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_three_to_four_to_three_shards_under_writes_loses_no_key() {
    let started = Instant::now();
    let mut setup = Setup::start("redis-cluster-scale").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", cluster_spec(3, 1), 6).await;
    let password = setup.password("cache").await;
    let client = Arc::new(ClusterClient::new(seeds(&ns, 6), &password));
    let preloaded: Vec<String> = (0..1000).map(|n| format!("preloaded-{n}")).collect();
    for key in &preloaded {
        client.set(key, &value_of(key)).await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(client.clone(), stop.clone());

    // What status shows while it works: the move under way is recorded.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let clusters = setup.clusters.clone();
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while sampling.load(Ordering::Relaxed) {
                if let Ok(cluster) = clusters.get("cache").await
                    && let Some(rebalance) = cluster.status.and_then(|s| s.rebalance)
                {
                    seen.push(rebalance);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            seen
        })
    };

    let before = recorded_ids(&status(&setup.clusters).await);
    let scale_out = Instant::now();
    set_shards(&setup.clusters, 4).await;

    // The operator restarts while moving slots: a new one resumes from what status and the
    // nodes show (a slot left halfway is finished first).
    wait::until("a slot move recorded", Duration::from_secs(90), || async {
        match status(&setup.clusters).await.rebalance {
            Some(rebalance) if rebalance.current.is_some() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    setup.operator.shutdown.cancel();
    (&mut setup.operator.task).await.unwrap().unwrap();
    setup.operator = start_operator(setup.client.clone(), &ns);
    let status_out = ready(&setup.clusters, "cache", 8).await;
    eprintln!("3 -> 4 shards in {:?}", scale_out.elapsed());
    assert_serving(&setup, &password, 4, &status_out).await;
    let after_out = recorded_ids(&status_out);
    for (name, id) in &before {
        assert_eq!(after_out.get(name), Some(id), "{name} kept its id");
    }
    let counts: Vec<usize> = {
        let mut counts = Vec::new();
        for ordinal in [0, 2, 4, 6] {
            let me = myself(&view_of(&ns, &password, ordinal).await).cloned().unwrap();
            counts.push(me.slot_count());
        }
        counts
    };
    assert_eq!(counts, vec![4096; 4], "an even share");

    let scale_in = Instant::now();
    set_shards(&setup.clusters, 3).await;
    let status_in = ready(&setup.clusters, "cache", 6).await;
    eprintln!("4 -> 3 shards in {:?}", scale_in.elapsed());
    assert_serving(&setup, &password, 3, &status_in).await;
    assert_eq!(
        recorded_ids(&status_in),
        before,
        "the remaining nodes are the original ones"
    );
    assert_eq!(data_pods_wanted(&setup.client, &ns).await, 6);
    // The leaving shard's StatefulSet goes once empty, and its volumes with its pods: a fourth
    // shard added again starts empty, not on data the cluster forgot.
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), &ns);
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(setup.client.clone(), &ns);
    wait::until(
        "the fourth shard's StatefulSet and volumes removed",
        Duration::from_secs(60),
        || async {
            let statefulset = statefulsets
                .get_opt("cache-shard-3")
                .await
                .map_err(|e| e.to_string())?;
            let left: Vec<String> = claims
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter_map(|claim| claim.metadata.name)
                .filter(|name| name.starts_with("data-cache-shard-3-"))
                .collect();
            (statefulset.is_none() && left.is_empty())
                .then_some(())
                .ok_or(format!(
                    "StatefulSet present: {}, claims {left:?}",
                    statefulset.is_some()
                ))
        },
    )
    .await;

    stop.store(true, Ordering::Relaxed);
    let (written, errors) = writer.await.unwrap();
    sampling.store(false, Ordering::Relaxed);
    let recorded = sampler.await.unwrap();
    assert!(errors.is_empty(), "writes failed: {errors:?}");
    assert!(
        written.len() > 500,
        "the writer wrote only {} keys",
        written.len()
    );
    assert!(
        recorded
            .iter()
            .any(|r| r.target_shards == 4 && r.current.as_ref().is_some_and(|m| m.to == after_out[&pod(6)])),
        "a move to the new shard was recorded: {recorded:?}"
    );
    assert!(
        recorded
            .iter()
            .any(|r| r.target_shards == 3
                && r.current.as_ref().is_some_and(|m| m.from == after_out[&pod(6)])),
        "a move off the leaving shard was recorded: {recorded:?}"
    );
    assert_all_readable(&client, &preloaded).await;
    assert_all_readable(&client, &written).await;
    let mut total = 0;
    for ordinal in [0, 2, 4] {
        total += admin(node_address(&ns, ordinal), &password)
            .await
            .key_count()
            .await
            .unwrap();
    }
    assert_eq!(
        total as usize,
        preloaded.len() + written.len(),
        "no key lost or duplicated"
    );
    eprintln!(
        "scaled 3 -> 4 -> 3 with {} concurrent writes in {:?}",
        written.len(),
        started.elapsed()
    );
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_blackholed_from_the_operator_is_neither_forgotten_nor_emptied_by_a_scale_in() {
    let setup = Setup::start("redis-cluster-blackhole").await;
    let ns = setup.ns().to_string();
    let formed = setup.create_ready("cache", cluster_spec(4, 1), 8).await;
    let password = setup.password("cache").await;
    let ids = recorded_ids(&formed);
    let leaving = ids[&pod(6)].clone();

    // The operator reaches shard 3's primary through a proxy; the nodes still talk directly.
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), node_address(&ns, 6))
        .await
        .expect("fault proxy");
    let key = format!("{ns}/cache");
    setup
        .operator
        .context
        .state
        .clients
        .route(&key, Kind::Node, 6, proxy.address())
        .await;
    proxy.set(Fault::Blackhole);
    wait::until("node 6 reported Unknown", Duration::from_secs(60), || async {
        let status = status(&setup.clusters).await;
        match status.nodes.iter().find(|n| n.name == pod(6)) {
            Some(node) if node.health == "Unknown" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Scaling in would empty and remove shard 3, whose primary the operator cannot see.
    set_shards(&setup.clusters, 3).await;
    wait::until("the scale-in to wait", Duration::from_secs(60), || async {
        let status = status(&setup.clusters).await;
        match condition(&status, "Progressing") {
            Some(c) if c.reason == "ScaleInBlocked" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Long enough for several passes, and for the breaker to open and probe again.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let status = status(&setup.clusters).await;
    let progressing = condition(&status, "Progressing").unwrap();
    assert_eq!(progressing.reason, "ScaleInBlocked", "{}", progressing.message);
    let node = status.nodes.iter().find(|n| n.name == pod(6)).unwrap();
    assert_eq!(node.health, "Unknown");
    assert_eq!(node.node_id.as_deref(), Some(leaving.as_str()));
    assert_eq!(
        node.slots,
        vec!["12288-16383".to_string()],
        "its slots, as the others see them"
    );
    assert_eq!(data_pods_wanted(&setup.client, &ns).await, 8);
    for ordinal in 0..8 {
        let view = view_of(&ns, &password, ordinal).await;
        let entry = view.iter().find(|n| n.id == leaving);
        assert!(entry.is_some(), "node {ordinal} forgot the Unknown node");
        assert_eq!(
            entry.unwrap().slot_count(),
            4096,
            "node {ordinal}: its slots stayed"
        );
        assert!(myself(&view).unwrap().migrating.is_empty() && myself(&view).unwrap().importing.is_empty());
    }
    assert!(events(&setup.client, &ns, "RemovingShards").await.is_empty());
    assert!(events(&setup.client, &ns, "MovingSlots").await.is_empty());

    // Visible again: the scale-in goes ahead.
    proxy.set(Fault::None);
    let shrunk = ready(&setup.clusters, "cache", 6).await;
    assert_serving(&setup, &password, 3, &shrunk).await;
    for ordinal in 0..6 {
        assert!(
            view_of(&ns, &password, ordinal)
                .await
                .iter()
                .all(|n| n.id != leaving),
            "node {ordinal} still knows the removed node"
        );
    }
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pod_and_the_operator_restarted_keep_the_cluster_and_its_node_ids() {
    let mut setup = Setup::start("redis-cluster-restart").await;
    let ns = setup.ns().to_string();
    let mut spec = cluster_spec(3, 1);
    // So the keys, and not only nodes.conf, survive processes killed without a chance to save.
    spec.persistence.append_only = true;
    spec.persistence.append_fsync = redis_operator::crd::AppendFsync::Always;
    setup
        .clusters
        .create(&PostParams::default(), &RedisCluster::new("cache", spec))
        .await
        .unwrap();
    let formed = ready(&setup.clusters, "cache", 6).await;
    let password = setup.password("cache").await;
    let ids = recorded_ids(&formed);
    let slots_before: BTreeMap<String, Vec<String>> = formed
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.slots.clone()))
        .collect();
    let client = ClusterClient::new(seeds(&ns, 6), &password);
    let keys: Vec<String> = (0..300).map(|n| format!("kept-{n}")).collect();
    for key in &keys {
        client.set(key, &value_of(key)).await.unwrap();
    }
    drop(client);

    // The operator goes away and every server dies; a new operator starts while none answers.
    setup.operator.shutdown.cancel();
    (&mut setup.operator.task).await.unwrap().unwrap();
    for ordinal in 0..6 {
        setup.pods.kill(&ns, &pod(ordinal)).await;
    }
    setup.operator = start_operator(setup.client.clone(), &ns);
    wait::until("every node reported Unknown", Duration::from_secs(60), || async {
        let status = status(&setup.clusters).await;
        let unknown = status.nodes.iter().filter(|n| n.health == "Unknown").count();
        match condition(&status, "Ready") {
            Some(ready) if ready.status == "False" && unknown == 6 => Ok(()),
            other => Err(format!("{unknown} Unknown, Ready {other:?}")),
        }
    })
    .await;
    assert_eq!(
        recorded_ids(&status(&setup.clusters).await),
        ids,
        "ids are kept while nobody answers"
    );

    // The pods are replaced: every server restarts from its volume, on the same address.
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), &ns);
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app.kubernetes.io/component=node"),
    )
    .await
    .unwrap();
    let recovered = ready(&setup.clusters, "cache", 6).await;
    assert_serving(&setup, &password, 3, &recovered).await;
    assert_eq!(
        recorded_ids(&recovered),
        ids,
        "the same nodes, known by their ids"
    );
    for (ordinal, id) in ids.values().enumerate() {
        let me = myself(&view_of(&ns, &password, ordinal).await).cloned().unwrap();
        assert_eq!(&me.id, id, "node {ordinal} kept its id");
    }
    let slots_after: BTreeMap<String, Vec<String>> = recovered
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.slots.clone()))
        .collect();
    // Primaries may have traded places with their replicas; each shard serves what it did.
    for shard in 0..3 {
        let served = |slots: &BTreeMap<String, Vec<String>>| -> Vec<String> {
            (2 * shard..2 * shard + 2)
                .flat_map(|o| slots[&pod(o)].clone())
                .collect()
        };
        assert_eq!(served(&slots_after), served(&slots_before), "shard {shard}");
    }
    assert_eq!(
        events(&setup.client, &ns, "FormingCluster").await.len(),
        1,
        "formed once, never again"
    );
    let client = ClusterClient::new(seeds(&ns, 6), &password);
    assert_all_readable(&client, &keys).await;
    setup.stop().await;
}
