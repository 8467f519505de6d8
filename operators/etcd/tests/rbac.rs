//! The operator's declared permissions are enough: run it as a ServiceAccount bound to exactly
//! the generated rules (and nothing else), and it forms a real cluster, scales it, takes a
//! backup, publishes events and holds its leader-election Lease.

use crate::support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{
    crd::{BackupDestination, BackupPhase, EtcdBackup, EtcdBackupSpec, EtcdCluster, FilesystemDestination},
    packaging,
    reconcile::MemberAddresses,
};
use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use quorum_e2e::{
    control_plane::{BoundAccount, TestNamespace, admin_client, install_crd},
    local_members::{EtcdLauncher, LocalMembers},
    tools::{etcd_binary, pinned_version},
    wait,
};

#[tokio::test]
async fn the_generated_rules_are_enough_to_run_the_operator() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    install_crd(&admin, &EtcdCluster::crd()).await;
    install_crd(&admin, &EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&admin, "etcd-rbac").await;
    let ns = namespace.name().to_string();

    // The account, with the generated rules and nothing more.
    let account = BoundAccount::create(
        &admin,
        &ns,
        "etcd-operator",
        "quorum-etcd-operator",
        packaging::rules(),
        packaging::leader_election_rules(),
    )
    .await;
    let as_operator = account.client.clone();
    let post = PostParams::default();
    let version = pinned_version("ETCD_VERSION").trim_start_matches('v').to_string();
    let scratch = std::env::temp_dir().join(format!("quorum-rbac-{ns}"));
    let _members = LocalMembers::start(
        admin.clone(),
        EtcdLauncher::new(BTreeMap::from([(version.clone(), etcd_binary())])),
        scratch.join("members"),
        Some(ns.clone()),
    );
    let operator = support::operator::start_with(as_operator, &ns, MemberAddresses::Loopback, true);

    let clusters: Api<EtcdCluster> = Api::namespaced(admin.clone(), &ns);
    let spec = support::cluster_spec(3, Some(&version));
    clusters
        .create(&post, &EtcdCluster::new("main", spec))
        .await
        .unwrap();
    support::ready_with(&clusters, "main", 3, Duration::from_secs(120)).await;
    clusters
        .patch_scale(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    support::ready_with(&clusters, "main", 4, Duration::from_secs(120)).await;

    let backups: Api<EtcdBackup> = Api::namespaced(admin.clone(), &ns);
    let backup = EtcdBackup::new(
        "once",
        EtcdBackupSpec {
            backup: quorum_core::crd::BackupSpec {
                cluster_name: "main".into(),
                destination: BackupDestination {
                    s3: None,
                    filesystem: Some(FilesystemDestination {
                        path: scratch.join("store").display().to_string(),
                    }),
                },
                schedule: None,
                retain: None,
                verify: false,
            },
        },
    );
    backups.create(&post, &backup).await.unwrap();
    wait::until("the backup to succeed", Duration::from_secs(60), || async {
        let status = backups
            .get("once")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        if status.run.phase == Some(BackupPhase::Succeeded) {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;

    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(admin.clone(), &ns)
        .get("quorum-etcd-operator-leader")
        .await
        .expect("the operator holds its Lease");
    assert!(lease.spec.unwrap().holder_identity.is_some());

    operator.stop().await;
    account.delete(&admin).await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}
