//! The operator's declared permissions are enough: run it as a ServiceAccount bound to exactly
//! the generated rules (and nothing else), and it forms a real cluster, scales it, takes a
//! backup, publishes events and holds its leader-election Lease.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{
    crd::{BackupDestination, BackupPhase, EtcdBackup, EtcdBackupSpec, EtcdCluster, FilesystemDestination},
    packaging,
    reconcile::MemberAddresses,
};
use k8s_openapi::{
    api::{
        core::v1::ServiceAccount,
        rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd, service_account_client},
    local_members::{EtcdLauncher, LocalMembers},
    tools::{etcd_binary, pinned_version},
    wait,
};

fn named(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    }
}

#[tokio::test]
async fn the_generated_rules_are_enough_to_run_the_operator() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    install_crd(&admin, &EtcdCluster::crd()).await;
    install_crd(&admin, &EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&admin, "etcd-rbac").await;
    let ns = namespace.name().to_string();

    // The account, with the generated rules and nothing more.
    let post = PostParams::default();
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(
            &post,
            &ServiceAccount {
                metadata: named("etcd-operator", None),
                ..ServiceAccount::default()
            },
        )
        .await
        .unwrap();
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: "etcd-operator".into(),
        namespace: Some(ns.clone()),
        ..Subject::default()
    };
    let cluster_wide = format!("quorum-etcd-operator-{ns}");
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &post,
            &ClusterRole {
                metadata: named(&cluster_wide, None),
                rules: Some(packaging::rules()),
                ..ClusterRole::default()
            },
        )
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &post,
            &ClusterRoleBinding {
                metadata: named(&cluster_wide, None),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "ClusterRole".into(),
                    name: cluster_wide.clone(),
                },
                subjects: Some(vec![subject.clone()]),
            },
        )
        .await
        .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(
            &post,
            &Role {
                metadata: named("leader-election", None),
                rules: Some(packaging::leader_election_rules()),
            },
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(
            &post,
            &RoleBinding {
                metadata: named("leader-election", None),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: "leader-election".into(),
                },
                subjects: Some(vec![subject]),
            },
        )
        .await
        .unwrap();

    let as_operator = service_account_client(&admin, &ns, "etcd-operator").await;
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
            cluster_name: "main".into(),
            destination: BackupDestination {
                s3: None,
                filesystem: Some(FilesystemDestination {
                    path: scratch.join("store").display().to_string(),
                }),
            },
            schedule: None,
            retain: None,
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
        if status.phase == Some(BackupPhase::Succeeded) {
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
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&cluster_wide, &Default::default())
        .await
        .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .delete(&cluster_wide, &Default::default())
        .await
        .unwrap();
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}
