//! The operator's declared permissions are enough: run it as a ServiceAccount bound to exactly
//! the generated rules (and nothing else), with a real MariaDB behind each member pod, and it
//! forms a cluster (generated password Secrets, child objects, role labels on the pods, the
//! application account from a user's Secret), grows it by one member, hands the primary over on
//! request (removing the request annotation), publishes events and can hold its
//! leader-election Lease.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::{
    Api, CustomResourceExt, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use mysql_operator::{
    OPERATOR_NAME,
    crd::{MySQLBackup, MySQLCluster, SWITCHOVER_ANNOTATION},
    packaging,
    resources::ROLE_LABEL,
};
use quorum_core::leader::{LeaderElector, LeaseTimings};
use quorum_e2e::{
    control_plane::{BoundAccount, TestNamespace, admin_client, install_crd},
    local_members::{LocalMembers, MariaDbLauncher},
    wait,
};

#[tokio::test]
async fn the_generated_rules_are_enough_to_run_the_operator() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    install_crd(&admin, &MySQLCluster::crd()).await;
    install_crd(&admin, &MySQLBackup::crd()).await;
    let namespace = TestNamespace::create(&admin, "mysql-rbac").await;
    let ns = namespace.name().to_string();

    // The account, with the generated rules and nothing more.
    let account = BoundAccount::create(
        &admin,
        &ns,
        "mysql-operator",
        "quorum-mysql-operator",
        packaging::rules(),
        packaging::leader_election_rules(),
    )
    .await;
    let as_operator = account.client.clone();
    let post = PostParams::default();
    let scratch = std::env::temp_dir().join(format!("quorum-mysql-rbac-{ns}"));
    let members = LocalMembers::start(
        admin.clone(),
        MariaDbLauncher,
        scratch.join("members"),
        Some(ns.clone()),
    );
    let operator = support::start_operator(as_operator.clone(), &ns);
    support::create_app_secret(&admin, &ns).await;

    // Formation: generated Secrets, objects, role labels, the application account.
    let clusters: Api<MySQLCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(&post, &MySQLCluster::new("main", support::cluster_spec(2)))
        .await
        .unwrap();
    support::ready(&clusters, "main", 1).await;
    let primary_ip = quorum_core::naming::loopback_ip(&ns, "main", 0);
    wait::until(
        "the application account on the primary",
        Duration::from_secs(60),
        || async {
            support::app_connection(primary_ip)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        },
    )
    .await;

    // Growth by one member (seeded from a snapshot), through the scale subresource.
    clusters
        .patch_scale(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    support::ready(&clusters, "main", 2).await;

    // A switchover on request: the pods' role labels move, the annotation is removed.
    clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: "main-1"}}}),
            ),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    wait::until("the switchover to main-1", Duration::from_secs(90), || async {
        let cluster = clusters.get("main").await.map_err(|e| e.to_string())?;
        let primary = cluster.status.as_ref().and_then(|s| s.primary.clone());
        let labelled = pods
            .get("main-1")
            .await
            .map_err(|e| e.to_string())?
            .labels()
            .get(ROLE_LABEL)
            .cloned();
        let asked = cluster.annotations().contains_key(SWITCHOVER_ANNOTATION);
        if primary.as_deref() == Some("main-1") && labelled.as_deref() == Some("primary") && !asked {
            Ok(())
        } else {
            Err(format!(
                "primary {primary:?}, main-1 labelled {labelled:?}, annotation still there: {asked}"
            ))
        }
    })
    .await;
    support::ready(&clusters, "main", 2).await;

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
    drop(members);
    account.delete(&admin).await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}
