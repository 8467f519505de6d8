//! Bad input is refused by the API server itself, with a message that names the field, before
//! the operator sees it: the CRD's schema and CEL rules against the real local control plane.

use crate::support::{cluster_spec, replication_spec};
use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use quorum_e2e::control_plane::{TestNamespace, admin_client, install_crd};
use redis_operator::crd::{RedisBackup, RedisBackupSpec, RedisCluster};

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
            backup: quorum_core::crd::BackupSpec {
                cluster_name: "cache".into(),
                destination: serde_json::from_value(serde_json::json!({"filesystem": {"path": "/backups"}}))
                    .unwrap(),
                schedule: None,
                retain: Some(3),
                verify: false,
            },
        },
    );
    let message = refusal(&backups, &retain_once).await;
    assert!(
        message.contains("retain applies only to scheduled backups"),
        "{message}"
    );
    retain_once.spec.backup.retain = None;
    retain_once.spec.backup.destination = serde_json::from_value(serde_json::json!({})).unwrap();
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

/// Every field of the `RedisCluster` and `RedisBackup` specs is checked at admission: what the
/// operator could not build is refused with a message naming the field, boundary values are
/// accepted, and version changes follow Redis's upgrade path.
#[tokio::test]
async fn every_field_of_the_spec_is_validated_naming_the_field() {
    use quorum_e2e::admission::{self, Row, spec};
    use serde_json::json;

    let (clusters, backups) = (RedisCluster::crd(), RedisBackup::crd());
    let valid = serde_json::to_value(RedisCluster::new("valid", replication_spec(1))).unwrap();
    // A cluster-mode deployment, from the valid replication-mode one.
    let cluster_mode = |extra: serde_json::Value| {
        let mut change = spec(
            json!({"mode": "Cluster", "replicas": null, "sentinel": null, "shards": 3, "replicasPerShard": 1}),
        );
        admission::merge(&mut change, &spec(extra));
        change
    };
    let sentinel = |sentinel: serde_json::Value| spec(json!({"sentinel": sentinel}));
    let version = |version: &str| spec(json!({"version": version}));
    let persistence = |persistence: serde_json::Value| spec(json!({"persistence": persistence}));

    let mut rows = admission::cluster_rows();
    rows.extend([
        Row::refused(
            "an unknown mode",
            spec(json!({"mode": "Standalone"})),
            &["spec.mode"],
        ),
        Row::update_refused(
            "the mode changed after creation",
            json!({}),
            cluster_mode(json!({})),
            &["mode is immutable"],
        ),
        Row::refused(
            "a negative replica count",
            spec(json!({"replicas": -1})),
            &["spec.replicas"],
        ),
        Row::refused("nine replicas", spec(json!({"replicas": 9})), &["spec.replicas"]),
        Row::accepted("no replicas", spec(json!({"replicas": 0}))),
        Row::accepted("eight replicas", spec(json!({"replicas": 8}))),
        Row::refused(
            "four Sentinels",
            sentinel(json!({"replicas": 4})),
            &["spec.sentinel.replicas"],
        ),
        Row::refused(
            "nine Sentinels",
            sentinel(json!({"replicas": 9})),
            &["spec.sentinel.replicas"],
        ),
        Row::refused(
            "a quorum above the Sentinels",
            sentinel(json!({"quorum": 4})),
            &["spec.sentinel.quorum"],
        ),
        Row::refused(
            "a quorum of zero",
            sentinel(json!({"quorum": 0})),
            &["spec.sentinel.quorum"],
        ),
        Row::refused(
            "a down-after below a second",
            sentinel(json!({"downAfterMillis": 999})),
            &["spec.sentinel.downAfterMillis"],
        ),
        Row::refused(
            "a failover timeout below five seconds",
            sentinel(json!({"failoverTimeoutMillis": 4999})),
            &["spec.sentinel.failoverTimeoutMillis"],
        ),
        Row::accepted(
            "seven Sentinels at their limits",
            sentinel(
                json!({"replicas": 7, "quorum": 7, "downAfterMillis": 1000, "failoverTimeoutMillis": 5000}),
            ),
        ),
        Row::refused(
            "shards in replication mode",
            spec(json!({"shards": 3})),
            &["spec.shards"],
        ),
        Row::refused(
            "replicas per shard in replication mode",
            spec(json!({"replicasPerShard": 1})),
            &["spec.replicasPerShard"],
        ),
        Row::refused("two shards", cluster_mode(json!({"shards": 2})), &["spec.shards"]),
        Row::refused("33 shards", cluster_mode(json!({"shards": 33})), &["spec.shards"]),
        Row::refused(
            "five replicas per shard",
            cluster_mode(json!({"replicasPerShard": 5})),
            &["spec.replicasPerShard"],
        ),
        Row::refused(
            "Sentinels in cluster mode",
            cluster_mode(json!({"sentinel": {"replicas": 3}})),
            &["spec.replicas"],
        ),
        Row::accepted(
            "a sharded cluster at its limits",
            cluster_mode(json!({"shards": 32, "replicasPerShard": 4})),
        ),
        Row::update_refused(
            "replicas per shard changed after creation",
            cluster_mode(json!({})),
            spec(json!({"replicasPerShard": 2})),
            &["replicasPerShard is immutable"],
        ),
        Row::update_refused(
            "replicas per shard added after a creation without them",
            cluster_mode(json!({"replicasPerShard": null})),
            spec(json!({"replicasPerShard": 1})),
            &["replicasPerShard is immutable"],
        ),
        Row::update_accepted(
            "shards added after creation",
            cluster_mode(json!({})),
            spec(json!({"shards": 4})),
        ),
        Row::refused("Redis 6.2", version("6.2.14"), &["spec.version"]),
        Row::refused("Redis 7.1", version("7.1.0"), &["spec.version"]),
        Row::accepted("Redis 7.4", version("7.4.2")),
        Row::update_accepted("7.0 to 7.2", json!({}), version("7.2.7")),
        Row::update_accepted("7.2 to 7.4", version("7.2.7"), version("7.4.2")),
        Row::update_accepted("a patch release", json!({}), version("7.0.16")),
        Row::update_refused(
            "7.0 to 7.4, skipping 7.2",
            json!({}),
            version("7.4.2"),
            &["spec.version", "one release at a time"],
        ),
        Row::update_refused(
            "7.2 back to 7.0",
            version("7.2.7"),
            version("7.0.15"),
            &["spec.version", "downgrades are not supported"],
        ),
        Row::update_refused(
            "a patch downgrade",
            json!({}),
            version("7.0.14"),
            &["spec.version", "downgrades are not supported"],
        ),
        Row::refused(
            "an odd RDB save list",
            persistence(json!({"rdbSave": "3600"})),
            &["spec.persistence.rdbSave"],
        ),
        Row::refused(
            "an unknown fsync policy",
            persistence(json!({"appendFsync": "Sometimes"})),
            &["spec.persistence.appendFsync"],
        ),
        Row::accepted(
            "no RDB snapshots, fsync on every write",
            persistence(json!({"rdbSave": "", "appendOnly": true, "appendFsync": "Always"})),
        ),
        Row::update_refused(
            "the append-only file turned off",
            json!({}),
            persistence(json!({"appendOnly": false})),
            &["persistence.appendOnly cannot be turned off"],
        ),
        Row::refused(
            "a setting the operator owns",
            spec(json!({"config": {"RequirePass": "x"}})),
            &["spec.config", "requirepass"],
        ),
        Row::accepted(
            "a setting the operator leaves alone",
            spec(json!({"config": {"maxmemory-policy": "allkeys-lru"}})),
        ),
        Row::refused(
            "an auth Secret that is no object name",
            spec(json!({"authSecret": "Redis Auth"})),
            &["spec.authSecret"],
        ),
        Row::accepted("an auth Secret", spec(json!({"authSecret": "cache-auth"}))),
        Row::refused(
            "restore drills of a Cluster mode backup policy",
            cluster_mode(json!({"backup": {
                "schedule": "0 3 * * *",
                "destination": {"filesystem": {"path": "/backups"}},
                "verify": true,
            }})),
            &[
                "spec.backup.verify",
                "restore drills are available for Replication mode",
            ],
        ),
    ]);
    admission::check_engine("redis-every-field", &clusters, &valid, &rows, &backups).await;
}
