//! The operator's declared permissions are enough: run it as a ServiceAccount bound to exactly
//! the generated rules (and nothing else), with real Redis processes behind the pods, and it
//! forms a replication deployment (the generated password Secret, child objects of both
//! StatefulSets, role labels on the pods), grows it by one replica, publishes events and can
//! hold its leader-election Lease.

use crate::support;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::{
    Api, CustomResourceExt, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use quorum_core::leader::{LeaderElector, LeaseTimings};
use quorum_e2e::{
    control_plane::{BoundAccount, TestNamespace, admin_client, install_crd},
    local_members::{LocalMembers, RedisLauncher},
};
use redis_operator::{
    OPERATOR_NAME,
    crd::{RedisBackup, RedisCluster},
    packaging,
    resources::ROLE_LABEL,
};

#[tokio::test]
async fn the_generated_rules_are_enough_to_run_the_operator() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    install_crd(&admin, &RedisCluster::crd()).await;
    install_crd(&admin, &RedisBackup::crd()).await;
    let namespace = TestNamespace::create(&admin, "redis-rbac").await;
    let ns = namespace.name().to_string();

    // The account, with the generated rules and nothing more.
    let account = BoundAccount::create(
        &admin,
        &ns,
        "redis-operator",
        "quorum-redis-operator",
        packaging::rules(),
        packaging::leader_election_rules(),
    )
    .await;
    let as_operator = account.client.clone();
    let scratch = std::env::temp_dir().join(format!("quorum-redis-rbac-{ns}"));
    let pods_backing = LocalMembers::start(
        admin.clone(),
        RedisLauncher,
        scratch.join("pods"),
        Some(ns.clone()),
    );
    let operator = support::start_operator(as_operator.clone(), &ns);

    let clusters: Api<RedisCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(
            &PostParams::default(),
            &RedisCluster::new("cache", support::replication_spec(1)),
        )
        .await
        .unwrap();
    support::ready(&clusters, "cache", 2).await;
    clusters
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    support::ready(&clusters, "cache", 3).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    assert_eq!(
        pods.get("cache-0")
            .await
            .unwrap()
            .labels()
            .get(ROLE_LABEL)
            .map(String::as_str),
        Some("primary")
    );

    // Events were published as the operator.
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    let published = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        published
            .iter()
            .any(|e| e.reporting_component.as_deref() == Some(OPERATOR_NAME)),
        "no event from the operator: {:?}",
        published.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );

    // The leader-election Lease, created and renewed under the generated Role.
    let elector = LeaderElector::new(
        as_operator,
        &ns,
        &format!("{OPERATOR_NAME}-leader"),
        "rbac-test",
        LeaseTimings::default(),
    );
    assert!(elector.try_acquire_or_renew().await.expect("create the Lease"));
    assert!(elector.try_acquire_or_renew().await.expect("renew the Lease"));

    operator.stop().await;
    drop(pods_backing);
    account.delete(&admin).await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}
