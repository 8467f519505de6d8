//! Replication mode, the whole operator against the real local control plane *and* real
//! `redis-server` processes: KWOK runs the pods, and `LocalMembers` runs a real data node or
//! Sentinel for each pod (through the pods' own `start.sh`) on the loopback address the
//! operator resolves for it.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{ConfigMap, Pod, Service},
};
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use quorum_core::naming::loopback_ip;
use quorum_e2e::wait;
use redis::AsyncCommands;
use redis_operator::{
    crd::RedisCluster,
    resources::ROLE_LABEL,
};
use support::{Setup, data_connection, ready, replication_spec};

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
            let role = pod.metadata.labels.unwrap_or_default().get(ROLE_LABEL).cloned().unwrap_or_default();
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

#[tokio::test]
async fn a_replication_deployment_forms_with_sentinels_watching_and_role_services() {
    let setup = Setup::start("redis-form").await;
    let ns = setup.ns().to_string();
    setup
        .clusters
        .create(&PostParams::default(), &RedisCluster::new("cache", replication_spec(2)))
        .await
        .unwrap();
    let status = ready(&setup.clusters, "cache", 3).await;
    assert_eq!(status.primary.as_deref(), Some("cache-0"));
    assert_eq!(status.nodes.len(), 3);
    assert_eq!(status.sentinels.len(), 3);
    assert!(status.sentinels.iter().all(|s| s.primary.as_deref() == Some("cache-0")));

    // The objects.
    let statefulsets: Api<StatefulSet> = Api::namespaced(setup.client.clone(), &ns);
    assert_eq!(statefulsets.get("cache").await.unwrap().spec.unwrap().replicas, Some(3));
    assert_eq!(
        statefulsets.get("cache-sentinel").await.unwrap().spec.unwrap().replicas,
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
    let mut primary = data_connection(node_address(&ns, "cache", 0), &password).await.unwrap();
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
