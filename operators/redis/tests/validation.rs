//! Bad input is refused by the API server itself, with a message that names the field, before
//! the operator sees it: the CRD's schema and CEL rules against the real local control plane.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use quorum_e2e::control_plane::{TestNamespace, admin_client, install_crd};
use redis_operator::crd::{RedisBackup, RedisBackupSpec, RedisCluster};
use support::{cluster_spec, replication_spec};

async fn refusal<K>(api: &Api<K>, object: &K) -> String
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => panic!("the API server accepted an invalid object: {object:?}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            status.message
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}

#[tokio::test]
async fn invalid_deployments_are_refused_naming_the_field() {
    let client = admin_client().await;
    install_crd(&client, &RedisCluster::crd()).await;
    install_crd(&client, &RedisBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "redis-validation").await;
    let clusters: Api<RedisCluster> = Api::namespaced(client.clone(), namespace.name());

    let message = refusal(&clusters, &RedisCluster::new("two-shards", cluster_spec(2, 1))).await;
    assert!(message.contains("spec.shards"), "{message}");

    let message = refusal(&clusters, &RedisCluster::new("negative", replication_spec(-1))).await;
    assert!(message.contains("spec.replicas"), "{message}");

    let mut no_shards = RedisCluster::new("no-shards", cluster_spec(3, 1));
    no_shards.spec.shards = None;
    let message = refusal(&clusters, &no_shards).await;
    assert!(message.contains("shards: required in Cluster mode"), "{message}");

    let mut mixed = RedisCluster::new("mixed", cluster_spec(3, 1));
    mixed.spec.replicas = Some(2);
    let message = refusal(&clusters, &mixed).await;
    assert!(message.contains("spec.replicas"), "{message}");

    let mut owned = RedisCluster::new("owned", replication_spec(1));
    owned.spec.config.insert("requirepass".into(), "x".into());
    let message = refusal(&clusters, &owned).await;
    assert!(
        message.contains("spec.config") && message.contains("requirepass"),
        "{message}"
    );

    let mut even_sentinels = RedisCluster::new("even", replication_spec(1));
    even_sentinels.spec.sentinel.as_mut().unwrap().replicas = 4;
    let message = refusal(&clusters, &even_sentinels).await;
    assert!(message.contains("spec.sentinel.replicas"), "{message}");

    let mut big_quorum = RedisCluster::new("quorum", replication_spec(1));
    big_quorum.spec.sentinel.as_mut().unwrap().quorum = Some(4);
    let message = refusal(&clusters, &big_quorum).await;
    assert!(message.contains("spec.sentinel.quorum"), "{message}");

    let mut old_version = RedisCluster::new("version", replication_spec(1));
    old_version.spec.version = "6.2.14".into();
    let message = refusal(&clusters, &old_version).await;
    assert!(message.contains("spec.version"), "{message}");

    // Valid deployments are accepted; mode and the shard layout cannot change afterwards.
    clusters
        .create(
            &PostParams::default(),
            &RedisCluster::new("cache", replication_spec(1)),
        )
        .await
        .expect("a valid replication deployment is accepted");
    clusters
        .create(
            &PostParams::default(),
            &RedisCluster::new("sessions", cluster_spec(3, 1)),
        )
        .await
        .expect("a valid cluster deployment is accepted");
    for (name, change, field) in [
        (
            "cache",
            serde_json::json!({"spec": {"mode": "Cluster", "replicas": null, "sentinel": null, "shards": 3}}),
            "mode is immutable",
        ),
        (
            "sessions",
            serde_json::json!({"spec": {"replicasPerShard": 2}}),
            "replicasPerShard is immutable",
        ),
        (
            "cache",
            serde_json::json!({"spec": {"persistence": {"appendOnly": false}}}),
            "persistence.appendOnly cannot be turned off",
        ),
    ] {
        let error = clusters
            .patch(name, &PatchParams::default(), &Patch::Merge(&change))
            .await
            .expect_err("an immutable field changed");
        assert!(error.to_string().contains(field), "{error}");
    }

    let backups: Api<RedisBackup> = Api::namespaced(client.clone(), namespace.name());
    let mut retain_once = RedisBackup::new(
        "once",
        RedisBackupSpec {
            cluster_name: "cache".into(),
            destination: serde_json::from_value(serde_json::json!({"filesystem": {"path": "/backups"}}))
                .unwrap(),
            schedule: None,
            retain: Some(3),
        },
    );
    let message = refusal(&backups, &retain_once).await;
    assert!(
        message.contains("retain applies only to scheduled backups"),
        "{message}"
    );
    retain_once.spec.retain = None;
    retain_once.spec.destination = serde_json::from_value(serde_json::json!({})).unwrap();
    let message = refusal(&backups, &retain_once).await;
    assert!(
        message.contains("set exactly one of s3 or filesystem"),
        "{message}"
    );
    namespace.delete().await;
}

/// A name too long for the Sentinels' StatefulSet (`<name>-sentinel`, whose pods get a label made
/// of it and a hash) is refused at admission rather than failing pod creation later.
#[tokio::test]
async fn names_too_long_for_the_statefulsets_are_refused_naming_metadata_name() {
    let client = admin_client().await;
    install_crd(&client, &RedisCluster::crd()).await;
    let namespace = TestNamespace::create(&client, "redis-long-name").await;
    let clusters: Api<RedisCluster> = Api::namespaced(client.clone(), namespace.name());
    quorum_e2e::control_plane::assert_names_limited_to(&clusters, redis_operator::crd::MAX_NAME, |name| {
        RedisCluster::new(name, replication_spec(2))
    })
    .await;
    namespace.delete().await;
}
