//! Replication mode, the whole operator against the real local control plane *and* real
//! `redis-server` processes: KWOK runs the pods, and `LocalMembers` runs a real data node or
//! Sentinel for each pod (through the pods' own `start.sh`) on the loopback address the
//! operator resolves for it.

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use crate::support::{Setup, data_connection, ready, replication_spec};
use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{ConfigMap, Event, Pod, Service},
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};
use quorum_core::naming::loopback_ip;
use quorum_e2e::{
    fault_proxy::{Fault, FaultProxy},
    wait,
};
use redis::AsyncCommands;
use redis_operator::{
    address::Kind,
    admin::sentinel::{MonitoredPrimary, parse_monitored_primary},
    resources::ROLE_LABEL,
};

fn node_address(namespace: &str, cluster: &str, ordinal: usize) -> SocketAddr {
    SocketAddr::new(loopback_ip(namespace, cluster, ordinal).into(), 6379)
}

fn sentinel_address(namespace: &str, cluster: &str, ordinal: usize) -> SocketAddr {
    SocketAddr::new(
        loopback_ip(namespace, &format!("{cluster}-sentinel"), ordinal).into(),
        26379,
    )
}

/// The role label of each data pod, by pod name.
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

/// What a Sentinel names as the primary.
async fn sentinel_primary(address: SocketAddr, password: &str) -> Option<SocketAddr> {
    let mut connection = data_connection(address, password).await.ok()?;
    let answer: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg("primary")
        .query_async(&mut connection)
        .await
        .ok()?;
    let (ip, port) = answer?;
    format!("{ip}:{port}").parse().ok()
}

/// A settled deployment costs the API server nothing: passes over it write nothing (no status,
/// no event, no child, no label) and read nothing but the cluster object the test touched.
#[tokio::test]
async fn passes_over_a_settled_deployment_write_nothing_and_read_only_what_changed() {
    let (operator_client, sent) = quorum_e2e::control_plane::recording_admin_client().await;
    let setup = Setup::start_with("redis-idle", Duration::from_secs(30), operator_client).await;
    setup.create_ready("cache", replication_spec(2), 3).await;
    quorum_e2e::idle::assert_settled_passes_are_free(
        &setup.clusters,
        "cache",
        &format!(
            "/apis/redis.quorum.dev/v1alpha1/namespaces/{}/redisclusters/cache",
            setup.ns()
        ),
        &setup.operator.context.metrics,
        "redisclusters",
        &sent,
        5,
    )
    .await;
    setup.stop().await;
}

#[tokio::test]
async fn a_replication_deployment_forms_with_sentinels_watching_and_role_services() {
    let setup = Setup::start("redis-form").await;
    let ns = setup.ns().to_string();
    let status = setup.create_ready("cache", replication_spec(2), 3).await;
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    assert_eq!(status.nodes.len(), 3);
    assert_eq!(status.sentinels.len(), 3);
    assert!(
        status
            .sentinels
            .iter()
            .all(|s| s.primary.as_deref() == Some("cache-0"))
    );

    // The objects.
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), &ns);
    assert_eq!(
        statefulsets.get("cache").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );
    assert_eq!(
        statefulsets
            .get("cache-sentinel")
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas,
        Some(3)
    );
    let services: Api<Service> = Api::namespaced(setup.client.clone(), &ns);
    for name in ["cache", "cache-primary", "cache-replicas", "cache-sentinel"] {
        assert!(services.get_opt(name).await.unwrap().is_some(), "Service {name}");
    }
    let password = setup.password("cache").await;
    let configs: Api<ConfigMap> = Api::namespaced(setup.client.clone(), &ns);
    for name in ["cache-config", "cache-sentinel-config"] {
        let config = configs.get(name).await.unwrap();
        let text = serde_json::to_string(&config.data).unwrap();
        assert!(!text.contains(&password), "the password is in ConfigMap {name}");
    }
    let labels = role_labels(&setup.client, &ns).await;
    assert_eq!(labels["cache-0"], "primary");
    assert_eq!(labels["cache-1"], "replica");
    assert_eq!(labels["cache-2"], "replica");

    // Every Sentinel names the primary; a write there reaches the replicas.
    for ordinal in 0..3 {
        assert_eq!(
            sentinel_primary(sentinel_address(&ns, "cache", ordinal), &password).await,
            Some(node_address(&ns, "cache", 0))
        );
    }
    let mut primary = data_connection(node_address(&ns, "cache", 0), &password)
        .await
        .unwrap();
    let _: () = primary.set("greeting", "hello").await.unwrap();
    for ordinal in 1..3 {
        let mut replica = data_connection(node_address(&ns, "cache", ordinal), &password)
            .await
            .unwrap();
        wait::until("the write on a replica", Duration::from_secs(10), || {
            let mut replica = replica.clone();
            async move {
                let value: Option<String> = replica.get("greeting").await.map_err(|e| e.to_string())?;
                match value {
                    Some(value) if value == "hello" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
        let refused: redis::RedisResult<()> = replica.set("greeting", "x").await;
        assert!(refused.is_err(), "a replica accepted a write");
    }
    setup.stop().await;
}

/// Writes `count` keys on the primary and waits until `replicas` replicas acknowledged them.
async fn write_replicated(address: SocketAddr, password: &str, prefix: &str, count: usize, replicas: usize) {
    let mut primary = data_connection(address, password).await.unwrap();
    for number in 0..count {
        let _: () = primary.set(format!("{prefix}-{number}"), number).await.unwrap();
    }
    let acknowledged: usize = redis::cmd("WAIT")
        .arg(replicas)
        .arg(10_000)
        .query_async(&mut primary)
        .await
        .unwrap();
    assert!(
        acknowledged >= replicas,
        "only {acknowledged} replicas acknowledged"
    );
}

/// Waits until `address` acknowledges a write of `key` (a fenced primary refuses it until a
/// replica follows).
async fn until_taking_writes(address: SocketAddr, password: &str, what: &str, key: &str) {
    wait::until(what, Duration::from_secs(60), || async {
        let mut connection = data_connection(address, password)
            .await
            .map_err(|e| e.to_string())?;
        connection
            .set::<_, _, ()>(key, 1)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
}

async fn count_keys(address: SocketAddr, password: &str, prefix: &str) -> usize {
    let mut connection = data_connection(address, password).await.unwrap();
    let keys: Vec<String> = connection.keys(format!("{prefix}-*")).await.unwrap();
    keys.len()
}

#[tokio::test]
async fn sentinel_fails_over_a_killed_primary_and_the_operator_follows() {
    let setup = Setup::start("redis-failover").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(2), 3).await;
    let password = setup.password("cache").await;
    write_replicated(node_address(&ns, "cache", 0), &password, "before", 200, 2).await;

    let killed_at = jiff::Timestamp::now();
    setup.pods.kill(&ns, "cache-0").await;
    let status = setup
        .status_until(
            "cache",
            "a new primary in status",
            // Room for Sentinel's retries: an attempt that finds no replica in sync or elects
            // no leader (a loaded machine, with the other tests of this file running beside
            // it) is aborted and tried again after twice the 10 s failover timeout.
            Duration::from_secs(180),
            |status| match (&status.primary, &status.last_failover) {
                (Some(primary), Some(_)) if primary != "cache-0" => Ok(status),
                _ => Err(format!("{:?} {:?}", status.primary, status.last_failover)),
            },
        )
        .await;
    let new_primary = status.primary.clone().unwrap();
    let record = status.last_failover.unwrap();
    assert_eq!(
        (record.from.as_str(), record.to.as_str()),
        ("cache-0", new_primary.as_str())
    );
    // Timed from the operator's first failed observation of cache-0: after the kill, before the
    // Sentinels' new primary was seen (status times are whole seconds: one second of slack).
    let lost_at = record
        .lost_at
        .clone()
        .expect("the old primary was seen failing first")
        .0;
    let from_loss = record.from_loss_millis.expect("a time from loss");
    assert!(
        lost_at >= killed_at - jiff::SignedDuration::from_secs(1),
        "{record:?}, killed at {killed_at}"
    );
    assert!(lost_at <= record.observed_at.0, "{record:?}");
    let kill_to_seen = record.observed_at.0.duration_since(killed_at).as_millis() as i64;
    assert!(
        from_loss > 0 && from_loss <= kill_to_seen + 1_000,
        "{record:?}, killed at {killed_at}"
    );
    let new_ordinal: usize = new_primary.trim_start_matches("cache-").parse().unwrap();
    wait::until("the new primary labelled", Duration::from_secs(30), || async {
        let labels = role_labels(&setup.client, &ns).await;
        (labels.get(&new_primary).map(String::as_str) == Some("primary")
            && labels.get("cache-0").map(String::as_str) != Some("primary"))
        .then_some(())
        .ok_or_else(|| format!("{labels:?}"))
    })
    .await;
    // Every acknowledged write is on the new primary, which takes writes.
    let new_address = node_address(&ns, "cache", new_ordinal);
    assert_eq!(count_keys(new_address, &password, "before").await, 200);
    // The new primary takes writes once the other replica follows it (the write fence).
    until_taking_writes(
        new_address,
        &password,
        "the new primary taking writes",
        "probe-after-failover",
    )
    .await;
    write_replicated(new_address, &password, "after", 50, 1).await;

    // The old primary's pod is replaced; it comes back as a replica of the new primary.
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), &ns);
    pods.delete("cache-0", &Default::default()).await.unwrap();
    let status = ready(&setup.clusters, "cache", 3).await;
    assert_eq!(status.primary.as_deref(), Some(new_primary.as_str()));
    let old = status.nodes.iter().find(|n| n.name == "cache-0").unwrap();
    assert_eq!(old.role, "Replica");
    assert_eq!(old.following.as_deref(), Some(new_primary.as_str()));
    let mut old_connection = data_connection(node_address(&ns, "cache", 0), &password)
        .await
        .unwrap();
    let refused: redis::RedisResult<()> = old_connection.set("stray", 1).await;
    assert!(refused.is_err(), "the old primary accepted a write");
    assert_eq!(
        count_keys(node_address(&ns, "cache", 0), &password, "after").await,
        50
    );
    setup.stop().await;
}

/// `SENTINEL MASTER primary` of the Sentinel at `address`, read by the operator's own parser.
async fn sentinel_master(address: SocketAddr, password: &str) -> Result<MonitoredPrimary, String> {
    let mut connection = data_connection(address, password)
        .await
        .map_err(|e| e.to_string())?;
    let flat: Vec<String> = redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg("primary")
        .query_async(&mut connection)
        .await
        .map_err(|e| e.to_string())?;
    parse_monitored_primary(&flat)
}

/// A Sentinel left naming a replica, with the same configuration epoch as the Sentinels naming
/// the primary, never takes their view (Sentinel takes another's only from a newer epoch): it
/// learns no replica and would never vote on a failover of the primary. The operator re-points
/// it at the primary the others agree on, and it learns the replicas.
#[tokio::test]
async fn a_sentinel_left_naming_a_replica_at_the_others_epoch_is_repointed_at_the_primary() {
    let setup = Setup::start("redis-sentinel-stray").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(2), 3).await;
    let password = setup.password("cache").await;
    let primary = node_address(&ns, "cache", 0);
    let agreed = sentinel_master(sentinel_address(&ns, "cache", 0), &password)
        .await
        .unwrap();
    assert_eq!(
        agreed.config_epoch, 0,
        "no failover yet, so a Sentinel monitoring anew has the others' epoch: {agreed:?}"
    );

    let stray = sentinel_address(&ns, "cache", 2);
    let replica = node_address(&ns, "cache", 1);
    let mut sentinel = data_connection(stray, &password).await.unwrap();
    let _: () = redis::cmd("SENTINEL")
        .arg("REMOVE")
        .arg("primary")
        .query_async(&mut sentinel)
        .await
        .unwrap();
    let _: () = redis::cmd("SENTINEL")
        .arg("MONITOR")
        .arg("primary")
        .arg(replica.ip().to_string())
        .arg(replica.port())
        .arg(agreed.quorum)
        .query_async(&mut sentinel)
        .await
        .unwrap();
    for (option, value) in [
        ("auth-pass", password.clone()),
        (
            "down-after-milliseconds",
            agreed.down_after.as_millis().to_string(),
        ),
        (
            "failover-timeout",
            agreed.failover_timeout.as_millis().to_string(),
        ),
    ] {
        let _: () = redis::cmd("SENTINEL")
            .arg("SET")
            .arg("primary")
            .arg(option)
            .arg(value)
            .query_async(&mut sentinel)
            .await
            .unwrap();
    }
    assert_eq!(sentinel_primary(stray, &password).await, Some(replica));

    wait::until(
        "the stray Sentinel naming the primary and knowing both replicas",
        Duration::from_secs(120),
        || async {
            let view = sentinel_master(stray, &password).await?;
            (view.address == primary && view.replicas == 2)
                .then_some(())
                .ok_or_else(|| format!("names {}, knows {} replicas", view.address, view.replicas))
        },
    )
    .await;
    let status = ready(&setup.clusters, "cache", 3).await;
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    setup.stop().await;
}

/// A failover the Sentinels decide on their own changes nothing Kubernetes watches (no pod
/// restarts, no object changes). The operator learns of it from the Sentinels' `+switch-master`
/// announcements: with its scheduled pass an hour away, the new primary still gets the primary
/// role label (and with it the primary Service), the failover is recorded, and every write the
/// old primary acknowledged is on the new one.
#[tokio::test]
async fn a_sentinel_failover_moves_the_primary_label_without_waiting_for_a_scheduled_pass() {
    let setup = Setup::start_rechecking("redis-switch", Duration::from_secs(3600)).await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(2), 3).await;
    let password = setup.password("cache").await;
    // Settled: the pass that said so scheduled the next one an hour later.
    setup
        .status_until(
            "cache",
            "the deployment settled",
            Duration::from_secs(120),
            |status| {
                let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing");
                match progressing {
                    Some(condition) if condition.status == "False" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    write_replicated(node_address(&ns, "cache", 0), &password, "before", 100, 2).await;

    let mut sentinel = data_connection(sentinel_address(&ns, "cache", 0), &password)
        .await
        .unwrap();
    let _: String = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg("primary")
        .query_async(&mut sentinel)
        .await
        .expect("SENTINEL FAILOVER accepted");
    let old_primary = node_address(&ns, "cache", 0);
    let new_address = wait::until(
        "the Sentinels naming a new primary",
        Duration::from_secs(60),
        || async {
            match sentinel_primary(sentinel_address(&ns, "cache", 0), &password).await {
                Some(address) if address != old_primary => Ok(address),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let new_ordinal = (1..3)
        .find(|&ordinal| node_address(&ns, "cache", ordinal) == new_address)
        .expect("the new primary is a node of the deployment");
    let new_primary = format!("cache-{new_ordinal}");

    let status = setup
        .status_until(
            "cache",
            "the operator following the switch",
            Duration::from_secs(60),
            |status| match (&status.primary, &status.last_failover) {
                (Some(primary), Some(_)) if *primary == new_primary => Ok(status),
                _ => Err(format!("{:?} {:?}", status.primary, status.last_failover)),
            },
        )
        .await;
    let record = status.last_failover.unwrap();
    assert_eq!(
        (record.from.as_str(), record.to.as_str()),
        ("cache-0", new_primary.as_str())
    );
    wait::until("the new primary labelled", Duration::from_secs(30), || async {
        let labels = role_labels(&setup.client, &ns).await;
        (labels.get(&new_primary).map(String::as_str) == Some("primary")
            && labels.get("cache-0").map(String::as_str) == Some("replica"))
        .then_some(())
        .ok_or_else(|| format!("{labels:?}"))
    })
    .await;
    assert_eq!(count_keys(new_address, &password, "before").await, 100);
    until_taking_writes(
        new_address,
        &password,
        "the new primary taking writes",
        "probe-after-switch",
    )
    .await;
    write_replicated(new_address, &password, "after", 50, 2).await;
    assert_eq!(count_keys(old_primary, &password, "after").await, 50);

    // Deleted, the cluster's Sentinel subscriptions end with it.
    let subscriptions = &setup.operator.context.state.sentinel_events;
    assert_eq!(subscriptions.len(), 1);
    setup.clusters.delete("cache", &Default::default()).await.unwrap();
    wait::until(
        "the subscriptions of the deleted cluster ended",
        Duration::from_secs(60),
        || async {
            if subscriptions.is_empty() {
                Ok(())
            } else {
                Err(format!("{} followed", subscriptions.len()))
            }
        },
    )
    .await;
    setup.stop().await;
}

#[tokio::test]
async fn replicas_are_added_synced_and_removed_and_sentinels_forget_them() {
    let setup = Setup::start("redis-scale").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(1), 2).await;
    let password = setup.password("cache").await;
    write_replicated(node_address(&ns, "cache", 0), &password, "data", 300, 1).await;

    let scale = |replicas: i32| serde_json::json!({"spec": {"replicas": replicas}});
    setup
        .clusters
        .patch("cache", &PatchParams::default(), &Patch::Merge(&scale(3)))
        .await
        .unwrap();
    ready(&setup.clusters, "cache", 4).await;
    for ordinal in 2..4 {
        assert_eq!(
            count_keys(node_address(&ns, "cache", ordinal), &password, "data").await,
            300
        );
    }

    setup
        .clusters
        .patch("cache", &PatchParams::default(), &Patch::Merge(&scale(1)))
        .await
        .unwrap();
    let status = ready(&setup.clusters, "cache", 2).await;
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), &ns);
    assert_eq!(
        statefulsets.get("cache").await.unwrap().spec.unwrap().replicas,
        Some(2)
    );
    // Every Sentinel forgot the removed replicas.
    for ordinal in 0..3 {
        let address = sentinel_address(&ns, "cache", ordinal);
        wait::until(
            "a Sentinel knowing one replica",
            Duration::from_secs(60),
            || async {
                let mut connection = data_connection(address, &password)
                    .await
                    .map_err(|e| e.to_string())?;
                let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg("primary")
                    .query_async(&mut connection)
                    .await
                    .map_err(|e| e.to_string())?;
                (replicas.len() == 1)
                    .then_some(())
                    .ok_or_else(|| format!("{} replicas", replicas.len()))
            },
        )
        .await;
    }
    setup.stop().await;
}

/// A deleted deployment leaves nothing behind in the operator: its cached clients, breakers
/// and password go, and a circuit that was open for one of its Sentinels no longer counts in
/// `quorum_admin_circuits_open`.
#[tokio::test]
async fn a_deleted_deployment_leaves_no_client_and_no_open_circuit_behind() {
    let setup = Setup::start("redis-forgotten").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(1), 2).await;
    let state = &setup.operator.context.state;
    assert!(
        state.clients.cached_members().await >= 4,
        "the operator caches a client per node and Sentinel"
    );

    setup.pods.kill(&ns, "cache-sentinel-2").await;
    let metrics = state.clients.metrics();
    wait::until(
        "the circuit to the killed Sentinel open",
        Duration::from_secs(60),
        || async {
            let open = metrics.open_circuits(redis_operator::clients::ENGINE);
            (open >= 1).then_some(()).ok_or(format!("{open} open"))
        },
    )
    .await;

    setup.clusters.delete("cache", &Default::default()).await.unwrap();
    wait::until(
        "the deleted deployment forgotten",
        Duration::from_secs(90),
        || async {
            let cached = state.clients.cached_members().await;
            let open = metrics.open_circuits(redis_operator::clients::ENGINE);
            let credentials = state.clients.credentials(&format!("{ns}/cache")).is_some();
            (cached == 0 && open == 0 && !credentials)
                .then_some(())
                .ok_or(format!(
                    "{cached} members cached, {open} circuits open, password kept: {credentials}"
                ))
        },
    )
    .await;
    setup.stop().await;
}

/// Every Sentinel down is no write outage: the primary they last agreed on keeps its role label
/// (so the primary Service keeps selecting it) and takes writes; once the Sentinels are back
/// they watch the same primary, with nothing failed over and every acknowledged write kept.
#[tokio::test]
async fn every_sentinel_down_keeps_the_agreed_primary_serving_writes() {
    let setup = Setup::start("redis-sentinels-down").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(2), 3).await;
    let password = setup.password("cache").await;
    let primary = node_address(&ns, "cache", 0);
    write_replicated(primary, &password, "before", 100, 2).await;

    for ordinal in 0..3 {
        setup.pods.kill(&ns, &format!("cache-sentinel-{ordinal}")).await;
    }
    setup
        .status_until(
            "cache",
            "the operator to find no Sentinel answering",
            Duration::from_secs(60),
            |status| {
                let down =
                    status.sentinels.len() == 3 && status.sentinels.iter().all(|s| s.health != "Healthy");
                down.then_some(())
                    .ok_or_else(|| format!("{:?}", status.sentinels))
            },
        )
        .await;
    let labels = role_labels(&setup.client, &ns).await;
    assert_eq!(
        labels.get("cache-0").map(String::as_str),
        Some("primary"),
        "the agreed primary keeps its label while no Sentinel answers: {labels:?}"
    );
    write_replicated(primary, &password, "during", 100, 2).await;

    // The Sentinels' pods are replaced: they come back and watch the same primary.
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), &ns);
    for ordinal in 0..3 {
        pods.delete(&format!("cache-sentinel-{ordinal}"), &Default::default())
            .await
            .unwrap();
    }
    wait::until(
        "the Sentinels to watch cache-0 again",
        Duration::from_secs(90),
        || async {
            let mut named = Vec::new();
            for ordinal in 0..3 {
                named.push(sentinel_primary(sentinel_address(&ns, "cache", ordinal), &password).await);
            }
            named
                .iter()
                .all(|address| *address == Some(primary))
                .then_some(())
                .ok_or_else(|| format!("{named:?}"))
        },
    )
    .await;
    let status = ready(&setup.clusters, "cache", 3).await;
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    assert!(status.last_failover.is_none(), "{:?}", status.last_failover);
    for ordinal in 0..3 {
        let node = node_address(&ns, "cache", ordinal);
        assert_eq!(count_keys(node, &password, "before").await, 100, "node {ordinal}");
        assert_eq!(count_keys(node, &password, "during").await, 100, "node {ordinal}");
    }
    setup.stop().await;
}

#[tokio::test]
async fn a_primary_blackholed_from_the_operator_is_unknown_and_nothing_is_done_about_it() {
    let setup = Setup::start("redis-blackhole").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(2), 3).await;
    let password = setup.password("cache").await;

    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), node_address(&ns, "cache", 0))
        .await
        .expect("fault proxy");
    let key = format!("{ns}/cache");
    let clients = &setup.operator.context.state.clients;
    clients.route(&key, Kind::Node, 0, proxy.address()).await;
    ready(&setup.clusters, "cache", 3).await;
    proxy.set(Fault::Blackhole);

    let status = setup
        .status_until(
            "cache",
            "the primary reported Unknown",
            Duration::from_secs(60),
            |status| {
                let primary = status.nodes.iter().find(|n| n.name == "cache-0").cloned();
                match primary {
                    Some(node) if node.health == "Unknown" => Ok(status),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    // Longer than the Sentinels' down-after and many operator passes: still the same primary,
    // which still takes writes, and the operator asked for no change.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let status = setup.clusters.get("cache").await.unwrap().status.unwrap();
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    assert!(status.last_failover.is_none());
    let progressing = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(progressing.reason, "PrimaryUnknown", "{progressing:?}");
    write_replicated(node_address(&ns, "cache", 0), &password, "during", 20, 2).await;
    let events: Api<Event> = Api::namespaced(setup.client.clone(), &ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert!(
        !reasons
            .iter()
            .any(|r| r == "PrimaryChanged" || r == "SwitchoverRequested"),
        "{reasons:?}"
    );

    proxy.set(Fault::None);
    let status = ready(&setup.clusters, "cache", 3).await;
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    setup.stop().await;
}

#[tokio::test]
async fn a_refused_replicaof_leaves_the_deployment_as_it_was_and_says_why() {
    let setup = Setup::start("redis-refused").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(2), 3).await;
    let password = setup.password("cache").await;
    write_replicated(node_address(&ns, "cache", 0), &password, "data", 100, 2).await;

    // Someone detaches node 2 by hand and forbids REPLICAOF on it: the operator's step to point
    // it back at the primary is refused by the server.
    let mut stray = data_connection(node_address(&ns, "cache", 2), &password)
        .await
        .unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut stray)
        .await
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-replicaof")
        .arg("-slaveof")
        .query_async(&mut stray)
        .await
        .unwrap();

    let status = setup
        .status_until(
            "cache",
            "the step reported failed",
            Duration::from_secs(60),
            |status| {
                let progressing = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Progressing")
                    .cloned();
                match progressing {
                    Some(condition) if condition.reason == "StepFailed" => Ok((status, condition)),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    let (status, condition) = status;
    assert!(condition.message.contains("cache-2"), "{}", condition.message);
    assert!(
        condition.message.contains("NOPERM") || condition.message.contains("permission"),
        "{}",
        condition.message
    );
    let ready_condition = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready_condition.status, "False");
    let events: Api<Event> = Api::namespaced(setup.client.clone(), &ns);
    wait::until("a StepFailed event", Duration::from_secs(30), || async {
        let events = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("StepFailed") && e.type_.as_deref() == Some("Warning"))
            .then_some(())
            .ok_or_else(|| "no StepFailed event yet".to_string())
    })
    .await;

    // Everything else is as it was: the same primary with its data, node 1 still its replica,
    // node 2 keeping its data, and no Sentinel changed its mind.
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    assert!(status.last_failover.is_none());
    let node1 = status.nodes.iter().find(|n| n.name == "cache-1").unwrap();
    assert_eq!(node1.following.as_deref(), Some("cache-0"));
    assert_eq!(
        count_keys(node_address(&ns, "cache", 2), &password, "data").await,
        100
    );
    for ordinal in 0..3 {
        assert_eq!(
            sentinel_primary(sentinel_address(&ns, "cache", ordinal), &password).await,
            Some(node_address(&ns, "cache", 0))
        );
    }
    let labels = role_labels(&setup.client, &ns).await;
    assert_eq!(labels["cache-0"], "primary");
    assert_ne!(labels["cache-2"], "primary");

    // Once the server allows it again, the deployment converges.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("+@all")
        .query_async(&mut stray)
        .await
        .unwrap();
    let status = ready(&setup.clusters, "cache", 3).await;
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    setup.stop().await;
}

/// Write fencing: a primary whose replicas are all gone (as one cut off from them and from the
/// Sentinels would find) refuses writes within the fence's lag instead of acknowledging writes
/// a failover would discard, and takes writes again once a replica is back in sync.
#[tokio::test]
async fn a_primary_without_replicas_refuses_writes_until_one_is_back() {
    let setup = Setup::start("redis-fence").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(2), 3).await;
    let password = setup.password("cache").await;
    let primary = node_address(&ns, "cache", 0);
    write_replicated(primary, &password, "before", 50, 2).await;

    setup.pods.kill(&ns, "cache-1").await;
    setup.pods.kill(&ns, "cache-2").await;
    let refusal = wait::until("the primary refusing writes", Duration::from_secs(60), || async {
        let mut connection = data_connection(primary, &password)
            .await
            .map_err(|e| e.to_string())?;
        match connection.set::<_, _, ()>("during", 1).await {
            Err(error) => Ok(error.to_string()),
            Ok(()) => Err("the write was acknowledged".to_string()),
        }
    })
    .await;
    assert!(refusal.contains("NOREPLICAS"), "{refusal}");

    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), &ns);
    for replica in ["cache-1", "cache-2"] {
        pods.delete(replica, &Default::default()).await.unwrap();
    }
    ready(&setup.clusters, "cache", 3).await;
    until_taking_writes(primary, &password, "the primary taking writes again", "after").await;
    assert_eq!(count_keys(primary, &password, "before").await, 50);
    setup.stop().await;
}

/// The fence follows the spec: scaled down to no replica, the primary's fence is lowered before
/// the last replica leaves, so writes go on.
#[tokio::test]
async fn a_primary_left_without_replicas_by_the_spec_keeps_taking_writes() {
    let setup = Setup::start("redis-unfence").await;
    let ns = setup.ns().to_string();
    setup.create_ready("cache", replication_spec(1), 2).await;
    let password = setup.password("cache").await;
    let primary = node_address(&ns, "cache", 0);
    write_replicated(primary, &password, "before", 20, 1).await;

    let scale = serde_json::json!({"spec": {"replicas": 0}});
    setup
        .clusters
        .patch("cache", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    ready(&setup.clusters, "cache", 1).await;
    let mut connection = data_connection(primary, &password).await.unwrap();
    let _: () = connection
        .set("alone", 1)
        .await
        .expect("a primary with no replica by the spec takes writes");
    setup.stop().await;
}

/// Sentinels made by an earlier release, on pod-lifetime volumes, are moved onto volumes of
/// their own: their StatefulSet (whose claim templates the API server never lets change) is made
/// again with its pods left running, each Sentinel is replaced onto its own claim, and the
/// deployment forms and replicates as before.
#[tokio::test]
async fn sentinels_made_without_volumes_are_moved_onto_volumes_of_their_own() {
    use kube::api::PostParams;
    use quorum_core::runner::PAUSE_ANNOTATION;
    use redis_operator::{crd::RedisCluster, resources::build_sentinel_statefulset};

    let setup = Setup::start("redis-sentinel-volumes").await;
    let ns = setup.ns().to_string();
    // Paused, so the operator leaves it alone while the earlier release's Sentinels are made.
    let mut paused = RedisCluster::new("cache", replication_spec(2));
    paused
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(PAUSE_ANNOTATION.into(), "true".into());
    let created = setup
        .clusters
        .create(&PostParams::default(), &paused)
        .await
        .unwrap();
    let mut earlier = build_sentinel_statefulset(&created, 3).unwrap();
    let spec = earlier.spec.as_mut().unwrap();
    spec.volume_claim_templates = None;
    spec.persistent_volume_claim_retention_policy = None;
    let pod = spec.template.spec.as_mut().unwrap();
    pod.volumes
        .get_or_insert_default()
        .push(k8s_openapi::api::core::v1::Volume {
            name: "data".into(),
            empty_dir: Some(Default::default()),
            ..Default::default()
        });
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), &ns);
    statefulsets
        .create(&PostParams::default(), &earlier)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(setup.client.clone(), &ns);
    let sentinel_pods = ListParams::default().labels("app.kubernetes.io/component=sentinel");
    let before: Vec<Option<String>> = wait::until(
        "the earlier release's three Sentinels",
        Duration::from_secs(60),
        || async {
            let listed = pods.list(&sentinel_pods).await.map_err(|e| e.to_string())?.items;
            match listed.len() {
                3 => Ok(listed.into_iter().map(|p| p.metadata.uid).collect()),
                n => Err(format!("{n} pods")),
            }
        },
    )
    .await;

    setup
        .clusters
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {PAUSE_ANNOTATION: null}}})),
        )
        .await
        .unwrap();
    wait::until(
        "every Sentinel replaced onto a claim of its own",
        Duration::from_secs(180),
        || async {
            let statefulset = statefulsets
                .get("cache-sentinel")
                .await
                .map_err(|e| e.to_string())?;
            let claims = statefulset
                .spec
                .as_ref()
                .and_then(|s| s.volume_claim_templates.as_ref())
                .map_or(0, Vec::len);
            let listed = pods.list(&sentinel_pods).await.map_err(|e| e.to_string())?.items;
            let replaced = listed
                .iter()
                .filter(|p| !before.contains(&p.metadata.uid) && p.metadata.deletion_timestamp.is_none())
                .count();
            if claims == 1 && replaced == 3 {
                Ok(())
            } else {
                Err(format!(
                    "{claims} claim templates, {replaced} of 3 Sentinels replaced"
                ))
            }
        },
    )
    .await;
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(setup.client.clone(), &ns);
    for ordinal in 0..3 {
        claims
            .get(&format!("data-cache-sentinel-{ordinal}"))
            .await
            .unwrap_or_else(|e| panic!("Sentinel {ordinal}'s claim: {e}"));
    }
    ready(&setup.clusters, "cache", 3).await;
    let password = setup.password("cache").await;
    write_replicated(node_address(&ns, "cache", 0), &password, "moved", 50, 2).await;
    setup.stop().await;
}
