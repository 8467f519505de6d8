//! Bad input is refused by the API server itself, with a message that names the field, before
//! the operator sees it: the CRD's schema and CEL rules against the real local control plane.

use crate::support;

use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use mysql_operator::crd::{Flavor, MySQLCluster, MySqlRestoreSource, ReplicationMode, ReplicationSpec};
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
    restored.spec.restore_from = Some(MySqlRestoreSource::newest("nightly"));
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

/// Every field of the `MySQLCluster` and `MySQLBackup` specs is checked at admission: what the
/// operator could not build is refused with a message naming the field, boundary values are
/// accepted, and version and TLS changes follow what MySQL and MariaDB support.
#[tokio::test]
async fn every_field_of_the_spec_is_validated_naming_the_field() {
    use mysql_operator::crd::MySQLBackup;
    use quorum_e2e::admission::{self, Row, spec};
    use serde_json::json;

    let (clusters, backups) = (MySQLCluster::crd(), MySQLBackup::crd());
    let valid = serde_json::to_value(MySQLCluster::new("valid", support::cluster_spec(3))).unwrap();
    let version = |flavor: &str, version: &str| spec(json!({"flavor": flavor, "version": version}));
    let upgrade = |version: &str| spec(json!({"version": version}));
    let user = |user: serde_json::Value| {
        let mut valid = json!({"name": "app", "passwordSecret": "app-password", "database": "shop"});
        admission::merge(&mut valid, &user);
        spec(json!({"users": [valid]}))
    };
    let replication = |replication: serde_json::Value| spec(json!({"replication": replication}));
    let tls = |secret: &str| spec(json!({"tls": {"secretName": secret}}));

    let mut rows = admission::cluster_rows();
    rows.extend([
        Row::refused("no members", spec(json!({"replicas": 0})), &["spec.replicas"]),
        Row::refused("ten members", spec(json!({"replicas": 10})), &["spec.replicas"]),
        Row::accepted("nine members", spec(json!({"replicas": 9}))),
        Row::refused(
            "an unknown flavor",
            spec(json!({"flavor": "Percona"})),
            &["spec.flavor"],
        ),
        Row::update_refused(
            "the flavor changed after creation",
            json!({}),
            version("MySQL", "8.4.3"),
            &["flavor is immutable"],
        ),
        Row::refused("MySQL 5.7", version("MySQL", "5.7.44"), &["spec.version"]),
        Row::refused(
            "a MariaDB version for MySQL",
            version("MySQL", "10.11.19"),
            &["spec.version"],
        ),
        Row::refused("MariaDB 10.6", upgrade("10.6.20"), &["spec.version"]),
        Row::accepted("MySQL 8.4", version("MySQL", "8.4.3")),
        Row::update_accepted(
            "MySQL 8.0 to 8.4 LTS",
            version("MySQL", "8.0.40"),
            upgrade("8.4.3"),
        ),
        Row::update_accepted(
            "a MySQL patch release",
            version("MySQL", "8.0.40"),
            upgrade("8.0.41"),
        ),
        Row::update_refused(
            "MySQL 8.4 back to 8.0",
            version("MySQL", "8.4.3"),
            upgrade("8.0.40"),
            &["spec.version", "downgrades are not supported"],
        ),
        Row::update_refused(
            "a MySQL patch downgrade",
            version("MySQL", "8.0.40"),
            upgrade("8.0.39"),
            &["spec.version", "downgrades are not supported"],
        ),
        Row::update_accepted(
            "MariaDB 10.11 to the next LTS, 11.4",
            json!({}),
            upgrade("11.4.5"),
        ),
        Row::update_accepted(
            "MariaDB 10.11 to a release before the next LTS",
            json!({}),
            upgrade("11.2.6"),
        ),
        Row::update_accepted(
            "MariaDB 11.4 to the next LTS, 11.8",
            upgrade("11.4.5"),
            upgrade("11.8.3"),
        ),
        Row::update_accepted("a MariaDB patch release", json!({}), upgrade("10.11.20")),
        Row::update_refused(
            "MariaDB 10.11 to 11.8, skipping the LTS 11.4",
            json!({}),
            upgrade("11.8.3"),
            &["spec.version", "one LTS release at a time"],
        ),
        Row::update_refused(
            "MariaDB 11.4 back to 10.11",
            upgrade("11.4.5"),
            upgrade("10.11.19"),
            &["spec.version", "downgrades are not supported"],
        ),
        Row::update_refused(
            "a MariaDB patch downgrade",
            json!({}),
            upgrade("10.11.18"),
            &["spec.version", "downgrades are not supported"],
        ),
        Row::refused(
            "a setting the operator owns",
            spec(json!({"config": {"gtid-mode": "OFF"}})),
            &["spec.config", "gtid_mode"],
        ),
        Row::accepted(
            "a setting the operator leaves alone",
            spec(json!({"config": {"max_connections": "500"}})),
        ),
        Row::refused(
            "the commit flush of MariaDB members that recover as replicas (SemiSync)",
            spec(json!({"config": {"innodb-flush-log-at-trx-commit": "2"}})),
            &["spec.config", "innodb_flush_log_at_trx_commit"],
        ),
        Row::accepted(
            "the commit flush of Async MariaDB members",
            spec(json!({"config": {"innodb_flush_log_at_trx_commit": "2"}, "replication": {"mode": "Async"}})),
        ),
        Row::accepted(
            "the commit flush of MySQL members",
            spec(json!({"flavor": "MySQL", "version": "8.4.3", "config": {"innodb_flush_log_at_trx_commit": "2"}})),
        ),
        Row::refused(
            "a root password Secret that is no object name",
            spec(json!({"rootPasswordSecret": "root password"})),
            &["spec.rootPasswordSecret"],
        ),
        Row::accepted(
            "a root password Secret",
            spec(json!({"rootPasswordSecret": "shop-root"})),
        ),
        Row::refused(
            "a reserved account",
            user(json!({"name": "root"})),
            &["spec.users[0].name"],
        ),
        Row::refused(
            "an account name with a dash",
            user(json!({"name": "shop-app"})),
            &["spec.users[0].name"],
        ),
        Row::refused(
            "an account password Secret that is no object name",
            user(json!({"passwordSecret": "App_Password"})),
            &["spec.users[0].passwordSecret"],
        ),
        Row::refused(
            "a database name with a dash",
            user(json!({"database": "my-shop"})),
            &["spec.users[0].database"],
        ),
        Row::refused(
            "an unknown access",
            user(json!({"access": "Admin"})),
            &["spec.users[0].access"],
        ),
        Row::accepted(
            "a read-only account at the name limits",
            user(json!({"name": "a".repeat(32), "database": "d".repeat(64), "access": "ReadOnly"})),
        ),
        Row::refused(
            "an unknown replication mode",
            replication(json!({"mode": "Sync"})),
            &["spec.replication.mode"],
        ),
        Row::refused(
            "waiting for no replica",
            replication(json!({"waitForReplicaCount": 0})),
            &["spec.replication.waitForReplicaCount"],
        ),
        Row::refused(
            "waiting for as many replicas as members",
            replication(json!({"waitForReplicaCount": 3})),
            &["spec.replication.waitForReplicaCount"],
        ),
        Row::refused(
            "binary logs kept longer than MariaDB allows",
            replication(json!({"binlogExpireSeconds": 8_553_601})),
            &["spec.replication.binlogExpireSeconds"],
        ),
        Row::accepted(
            "asynchronous replication keeping binary logs for ever",
            replication(json!({"mode": "Async", "waitForReplicaCount": 2, "binlogExpireSeconds": 0})),
        ),
        Row::refused(
            "a TLS Secret that is no object name",
            tls("MySQL TLS"),
            &["spec.tls.secretName"],
        ),
        Row::accepted("TLS", tls("shop-tls")),
        Row::update_refused(
            "TLS turned on after creation",
            json!({}),
            tls("shop-tls"),
            &["spec.tls", "tls is immutable"],
        ),
        Row::update_refused(
            "TLS turned off after creation",
            tls("shop-tls"),
            spec(json!({"tls": null})),
            &["spec.tls", "tls is immutable"],
        ),
        Row::update_refused(
            "the TLS Secret changed after creation",
            tls("shop-tls"),
            tls("other-tls"),
            &["spec.tls", "tls is immutable"],
        ),
        // The cluster's backup policy archiving its log, for point-in-time restores.
        Row::accepted(
            "a backup policy that archives the log",
            spec(json!({"backup": {"schedule": "*/15 * * * *", "destination": {"filesystem": {"path": "/backups"}},
                "retain": 96, "archiveBinlogs": true}})),
        ),
        Row::accepted(
            "a physical backup policy",
            spec(json!({"backup": {"schedule": "0 3 * * *", "destination": {"filesystem": {"path": "/backups"}},
                "retain": 7, "method": "Physical"}})),
        ),
        Row::refused(
            "a physical backup policy that archives the log",
            spec(json!({"backup": {"schedule": "*/15 * * * *", "destination": {"filesystem": {"path": "/backups"}},
                "retain": 96, "archiveBinlogs": true, "method": "Physical"}})),
            &["spec.backup", "method: Physical cannot be combined with archiveBinlogs or verify"],
        ),
        Row::refused(
            "a backup method that is neither",
            spec(json!({"backup": {"schedule": "0 3 * * *", "destination": {"filesystem": {"path": "/backups"}},
                "method": "Snapshot"}})),
            &["spec.backup.method"],
        ),
        Row::refused(
            "a log archive flag that is no boolean",
            spec(json!({"backup": {"schedule": "*/15 * * * *", "destination": {"filesystem": {"path": "/backups"}},
                "archiveBinlogs": "yes"}})),
            &["spec.backup.archiveBinlogs"],
        ),
        // restoreFrom.pointInTime
        Row::accepted(
            "restored to a time",
            spec(json!({"restoreFrom": {"backupName": "nightly", "pointInTime": {"time": "2026-11-30T12:00:00Z"}}})),
        ),
        Row::accepted(
            "restored to a GTID position",
            spec(json!({"restoreFrom": {"backupName": "nightly", "pointInTime": {"gtid": "0-1-42,1-2-7"}}})),
        ),
        Row::refused(
            "restored to a time and a position",
            spec(json!({"restoreFrom": {"backupName": "nightly",
                "pointInTime": {"time": "2026-11-30T12:00:00Z", "gtid": "0-1-42"}}})),
            &["spec.restoreFrom.pointInTime", "takes exactly one of time and gtid"],
        ),
        Row::refused(
            "a point that is neither",
            spec(json!({"restoreFrom": {"backupName": "nightly", "pointInTime": {}}})),
            &["spec.restoreFrom.pointInTime", "takes exactly one of time and gtid"],
        ),
        Row::refused(
            "a position in MySQL's notation",
            spec(json!({"restoreFrom": {"backupName": "nightly",
                "pointInTime": {"gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"}}})),
            &["spec.restoreFrom.pointInTime.gtid"],
        ),
        Row::refused(
            "a time that is no time",
            spec(json!({"restoreFrom": {"backupName": "nightly", "pointInTime": {"time": "yesterday"}}})),
            &["spec.restoreFrom.pointInTime.time"],
        ),
    ]);
    let backup_rows = [
        Row::accepted(
            "a schedule that archives the binary log",
            spec(json!({"schedule": "*/15 * * * *", "retain": 4, "archiveBinlogs": true})),
        ),
        Row::refused(
            "archiving the binary log without a schedule",
            spec(json!({"archiveBinlogs": true, "schedule": null, "retain": null})),
            &["spec", "archiveBinlogs needs schedule and retain"],
        ),
        Row::refused(
            "archiving the binary log without retain",
            spec(json!({"archiveBinlogs": true, "retain": null})),
            &["spec", "archiveBinlogs needs schedule and retain"],
        ),
        Row::accepted("a physical backup", spec(json!({"method": "Physical"}))),
        Row::refused(
            "a physical backup that archives the binary log",
            spec(
                json!({"schedule": "*/15 * * * *", "retain": 4, "archiveBinlogs": true, "method": "Physical"}),
            ),
            &[
                "spec",
                "method: Physical cannot be combined with archiveBinlogs or verify",
            ],
        ),
        Row::refused(
            "a physical backup drilled",
            spec(json!({"verify": true, "method": "Physical"})),
            &[
                "spec",
                "method: Physical cannot be combined with archiveBinlogs or verify",
            ],
        ),
    ];
    admission::check_engine_with_backup_rows(
        "mysql-every-field",
        &clusters,
        &valid,
        &rows,
        &backups,
        &backup_rows,
    )
    .await;
}
