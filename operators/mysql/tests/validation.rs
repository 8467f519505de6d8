//! Bad input is refused by the API server itself, with a message that names the field, before
//! the operator sees it: the CRD's schema and CEL rules against the real local control plane.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use mysql_operator::crd::{Flavor, MySQLCluster, ReplicationMode, ReplicationSpec, RestoreSource};
use quorum_e2e::control_plane::{TestNamespace, admin_client, install_crd};

async fn refusal(clusters: &Api<MySQLCluster>, cluster: &MySQLCluster) -> String {
    match clusters.create(&PostParams::default(), cluster).await {
        Ok(_) => panic!(
            "the API server accepted an invalid MySQLCluster: {:?}",
            cluster.spec
        ),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            status.message
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}

#[tokio::test]
async fn invalid_clusters_are_refused_naming_the_field() {
    let client = admin_client().await;
    install_crd(&client, &MySQLCluster::crd()).await;
    let namespace = TestNamespace::create(&client, "mysql-validation").await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), namespace.name());

    let mut owned_setting = MySQLCluster::new("owned", support::cluster_spec(3));
    owned_setting.spec.config.insert("server-id".into(), "7".into());
    let message = refusal(&clusters, &owned_setting).await;
    assert!(
        message.contains("spec.config") && message.contains("server_id"),
        "{message}"
    );

    let mut wrong_version = MySQLCluster::new("version", support::cluster_spec(3));
    wrong_version.spec.flavor = Flavor::MySQL;
    let message = refusal(&clusters, &wrong_version).await;
    assert!(message.contains("spec.version"), "{message}");

    let mut too_many_acks = MySQLCluster::new("acks", support::cluster_spec(2));
    too_many_acks.spec.replication = Some(ReplicationSpec {
        mode: ReplicationMode::SemiSync,
        wait_for_replica_count: 2,
        ..ReplicationSpec::default()
    });
    let mut kept_too_long = MySQLCluster::new("binlogs", support::cluster_spec(2));
    kept_too_long.spec.replication = Some(ReplicationSpec {
        binlog_expire_seconds: 8_553_601,
        ..ReplicationSpec::default()
    });
    let message = refusal(&clusters, &kept_too_long).await;
    assert!(
        message.contains("spec.replication.binlogExpireSeconds"),
        "{message}"
    );
    let message = refusal(&clusters, &too_many_acks).await;
    assert!(
        message.contains("spec.replication.waitForReplicaCount"),
        "{message}"
    );

    let mut reserved_user = MySQLCluster::new("user", support::cluster_spec(1));
    reserved_user.spec.users[0].name = "quorum_admin".into();
    let message = refusal(&clusters, &reserved_user).await;
    assert!(message.contains("users[0].name"), "{message}");

    let mut no_members = MySQLCluster::new("members", support::cluster_spec(1));
    no_members.spec.replicas = 0;
    let message = refusal(&clusters, &no_members).await;
    assert!(message.contains("spec.replicas"), "{message}");

    // A valid cluster is accepted, and its flavor cannot change afterwards.
    clusters
        .create(
            &PostParams::default(),
            &MySQLCluster::new("valid", support::cluster_spec(3)),
        )
        .await
        .expect("a valid MySQLCluster is accepted");
    let change = serde_json::json!({"spec": {"flavor": "MySQL", "version": "8.4.3"}});
    let error = clusters
        .patch("valid", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect_err("the flavor is immutable");
    assert!(error.to_string().contains("flavor is immutable"), "{error}");

    // Where a cluster's data comes from is decided when it is created: restoreFrom can be
    // neither added, changed nor removed afterwards.
    let add = serde_json::json!({"spec": {"restoreFrom": {"backupName": "nightly"}}});
    let error = clusters
        .patch("valid", &PatchParams::default(), &Patch::Merge(&add))
        .await
        .expect_err("restoreFrom cannot be added");
    assert!(
        error.to_string().contains("spec.restoreFrom")
            && error.to_string().contains("restoreFrom is immutable"),
        "{error}"
    );
    let mut restored = MySQLCluster::new("restored", support::cluster_spec(3));
    restored.spec.restore_from = Some(RestoreSource {
        backup_name: "nightly".into(),
    });
    clusters
        .create(&PostParams::default(), &restored)
        .await
        .expect("a cluster created from a backup is accepted");
    for change in [
        serde_json::json!({"spec": {"restoreFrom": {"backupName": "weekly"}}}),
        serde_json::json!({"spec": {"restoreFrom": null}}),
    ] {
        let error = clusters
            .patch("restored", &PatchParams::default(), &Patch::Merge(&change))
            .await
            .expect_err("restoreFrom is immutable");
        assert!(
            error.to_string().contains("spec.restoreFrom")
                && error.to_string().contains("restoreFrom is immutable"),
            "{change}: {error}"
        );
    }
    namespace.delete().await;
}

/// A name too long for the StatefulSet (whose pods get a label made of its name and a hash) is
/// refused at admission rather than failing pod creation later.
#[tokio::test]
async fn names_too_long_for_the_statefulset_are_refused_naming_metadata_name() {
    let client = admin_client().await;
    install_crd(&client, &MySQLCluster::crd()).await;
    let namespace = TestNamespace::create(&client, "mysql-long-name").await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), namespace.name());
    quorum_e2e::control_plane::assert_names_limited_to(&clusters, mysql_operator::crd::MAX_NAME, |name| {
        MySQLCluster::new(name, support::cluster_spec(3))
    })
    .await;
    namespace.delete().await;
}
