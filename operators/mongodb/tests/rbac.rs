//! The operator's declared permissions are enough: run it as a ServiceAccount bound to exactly
//! the generated rules (and nothing else), with simulator members behind the pods, and it
//! forms a three-member replica set (generated Secrets, child objects, pods read for their
//! versions), takes a `MongoDBBackup` of it (the backup's status and the set's `lastBackup`),
//! publishes events and can hold its leader-election Lease.

use crate::support;

use std::time::Duration;

use crate::support::{Setup, insert_orders, spec};
use k8s_openapi::api::core::v1::Event;
use kube::{
    Api, CustomResourceExt,
    api::{ListParams, PostParams},
};
use mongodb_operator::{
    OPERATOR_NAME,
    crd::{BackupDestination, BackupPhase, MongoDBBackup, MongoDBBackupSpec, MongoDBReplicaSet},
    packaging,
};
use quorum_core::{
    crd::FilesystemDestination,
    leader::{LeaderElector, LeaseTimings},
};
use quorum_e2e::{
    control_plane::{BoundAccount, TestNamespace, admin_client, install_crd},
    local_members::{LocalMembers, MongoLauncher},
    wait,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_generated_rules_are_enough_to_run_the_operator() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    quorum_core::install_crypto_provider();
    let admin = admin_client().await;
    install_crd(&admin, &MongoDBReplicaSet::crd()).await;
    install_crd(&admin, &MongoDBBackup::crd()).await;
    let namespace = TestNamespace::create(&admin, "mongodb-rbac").await;
    let ns = namespace.name().to_string();

    // The account, with the generated rules and nothing more.
    let account = BoundAccount::create(
        &admin,
        &ns,
        "mongodb-operator",
        "quorum-mongodb-operator",
        packaging::rules(),
        packaging::leader_election_rules(),
    )
    .await;
    let as_operator = account.client.clone();
    let scratch = std::env::temp_dir().join(format!("quorum-mongodb-rbac-{ns}"));
    // The test itself acts as the cluster's administrator; only the operator runs as the account.
    let setup = Setup {
        client: admin.clone(),
        pods: LocalMembers::start(
            admin.clone(),
            MongoLauncher,
            scratch.join("pods"),
            Some(ns.clone()),
        ),
        operator: support::start_operator(as_operator.clone(), &ns),
        sets: Api::namespaced(admin.clone(), &ns),
        namespace,
    };

    let status = setup.create_ready("main", spec(3), 3).await;
    assert!(status.primary.is_some());
    let application = setup.application("main", 3).await;
    insert_orders(&application, 0, 50).await;

    let backups: Api<MongoDBBackup> = Api::namespaced(admin.clone(), &ns);
    backups
        .create(
            &PostParams::default(),
            &MongoDBBackup::new(
                "once",
                MongoDBBackupSpec {
                    backup: quorum_core::crd::BackupSpec {
                        cluster_name: "main".into(),
                        destination: BackupDestination {
                            s3: None,
                            filesystem: Some(FilesystemDestination {
                                path: scratch.join("backups").display().to_string(),
                            }),
                        },
                        schedule: None,
                        retain: None,
                        verify: false,
                    },
                    archive_oplog: false,
                },
            ),
        )
        .await
        .unwrap();
    let backup = wait::until("the backup to succeed", Duration::from_secs(90), || async {
        let status = backups
            .get("once")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        match status.run.phase {
            Some(BackupPhase::Succeeded) => Ok(status),
            Some(BackupPhase::Failed) => panic!("the backup failed: {:?}", status.run.message),
            _ => Err(format!("{status:?}")),
        }
    })
    .await;
    assert_eq!(backup.documents, Some(50));
    // Written by the backup controller onto the set's status subresource.
    let snapshot = backup.run.last_snapshot.expect("the snapshot is recorded");
    setup
        .status_until(
            "main",
            "lastBackup on the set",
            Duration::from_secs(10),
            |status| match status.last_backup {
                Some(last) if last == snapshot => Ok(()),
                other => Err(format!("{other:?}")),
            },
        )
        .await;

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

    setup.stop().await;
    account.delete(&admin).await;
    let _ = std::fs::remove_dir_all(scratch);
}
