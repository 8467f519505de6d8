//! A Subscription install with real OLM v0, out of cluster: OLM's CRDs on the local control
//! plane, its `olm` and `catalog` operators as host processes (built by
//! `e2e/toolchain/packaging.sh olm`), and an inline catalog rendered from
//! `bundle/quorum-etcd-operator` by `opm render` and served by `opm serve` (no catalog pod, no
//! bundle image, no unpack Job). A CatalogSource, an OperatorGroup and a Subscription make OLM
//! resolve the package, run the InstallPlan (CRDs, ServiceAccount, RBAC, Deployment) and bring
//! the CSV to `Succeeded`; KWOK runs the Deployment's pod. The operator then runs in-process
//! under a token of the ServiceAccount OLM created, so only the CSV's permissions are behind it,
//! and reconciles the CSV's `alm-examples` EtcdCluster to Ready with real etcd members.
//! `olm_upgrade.rs` upgrades through the channel with the same machinery (`quorum_e2e::olm`).

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{
    crd::{EtcdBackup, EtcdCluster},
    reconcile::MemberAddresses,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, service_account_client},
    local_members::{EtcdLauncher, LocalMembers},
    olm::{
        CatalogServer, Olm, OlmApis, alm_example, published_bundles, published_packages_and_channels,
        write_inline_catalog,
    },
    tools::{etcd_binary, pinned_version, repository_root},
};
use serde_json::json;

const BUNDLE: &str = "bundle/quorum-etcd-operator";
const PACKAGE: &str = "quorum-etcd-operator";
const CSV: &str = "quorum-etcd-operator.v0.1.0";

#[tokio::test]
async fn a_subscription_installs_the_operator_through_olm_and_it_reconciles_the_example() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    let namespace = TestNamespace::create(&admin, "etcd-olm").await;
    let ns = namespace.name().to_string();
    let scratch = std::env::temp_dir().join(format!("quorum-olm-{ns}"));
    std::fs::create_dir_all(&scratch).expect("scratch directory");

    // The catalog: the published packages and channels, every bundle inline.
    let catalog_dir = scratch.join("catalog");
    let bundles = published_bundles();
    assert!(bundles.contains(&repository_root().join(BUNDLE)), "{bundles:?}");
    write_inline_catalog(&catalog_dir, &published_packages_and_channels(), &bundles);
    let mut opm_serve = CatalogServer::start(&catalog_dir, &scratch).await;
    let mut olm = Olm::start(&admin, &scratch).await;

    // CatalogSource -> OperatorGroup -> Subscription.
    let apis = OlmApis::new(&admin, &ns);
    apis.add_catalog(&mut olm, "quorum-inline", opm_serve.port).await;
    apis.subscribe(PACKAGE, "quorum-inline", json!({})).await;
    let plan_name = apis.next_install_plan(&mut olm, PACKAGE, None).await;
    let plan = apis.completed_plan(&mut olm, &plan_name).await;
    assert_eq!(
        plan.data["spec"]["clusterServiceVersionNames"],
        json!([CSV]),
        "{}",
        plan.data["spec"]
    );
    let csv = apis.succeeded_csv(&mut olm, CSV).await;

    // What OLM created from the CSV: the ServiceAccount, the RBAC, the Deployment and its pod.
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .get(PACKAGE)
        .await
        .expect("OLM created the ServiceAccount");
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get(PACKAGE)
        .await
        .expect("OLM created the Deployment");
    assert_eq!(
        deployment
            .metadata
            .labels
            .unwrap_or_default()
            .get("olm.owner")
            .map(String::as_str),
        Some(CSV)
    );
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns)
        .list(&ListParams::default().labels("app.kubernetes.io/name=quorum-etcd-operator"))
        .await
        .unwrap();
    assert!(
        pods.items
            .iter()
            .any(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")),
        "the operator's pod is Running (KWOK): {:?}",
        pods.items.iter().map(|pod| &pod.status).collect::<Vec<_>>()
    );
    let owned_by_csv = ListParams::default().labels(&format!("olm.owner={CSV},olm.owner.namespace={ns}"));
    let roles = Api::<Role>::namespaced(admin.clone(), &ns)
        .list(&owned_by_csv)
        .await
        .unwrap();
    let role_bindings = Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .list(&owned_by_csv)
        .await
        .unwrap();
    let cluster_roles = Api::<ClusterRole>::all(admin.clone())
        .list(&owned_by_csv)
        .await
        .unwrap();
    let cluster_role_bindings = Api::<ClusterRoleBinding>::all(admin.clone())
        .list(&owned_by_csv)
        .await
        .unwrap();
    assert!(
        !roles.items.is_empty() && !role_bindings.items.is_empty(),
        "OLM created the Role and RoleBinding for `permissions`"
    );
    assert!(
        !cluster_roles.items.is_empty() && !cluster_role_bindings.items.is_empty(),
        "OLM created the ClusterRole and ClusterRoleBinding for `clusterPermissions`"
    );

    // The operator, in-process, with the ServiceAccount OLM created and nothing else.
    let example = alm_example(&csv, "EtcdCluster");
    let cluster_name = example["metadata"]["name"].as_str().expect("a name").to_string();
    let version = example["spec"]["version"]
        .as_str()
        .expect("a version")
        .to_string();
    assert_eq!(
        version,
        pinned_version("ETCD_VERSION").trim_start_matches('v'),
        "the example's etcd version is the pinned one (the local members run that binary)"
    );
    let as_operator = service_account_client(&admin, &ns, PACKAGE).await;
    let _members = LocalMembers::start(
        admin.clone(),
        EtcdLauncher::new(BTreeMap::from([(version.clone(), etcd_binary())])),
        scratch.join("members"),
        Some(ns.clone()),
    );
    let operator = support::operator::start_with(as_operator, &ns, MemberAddresses::Loopback, true);

    let example_cluster: EtcdCluster =
        serde_json::from_value(example).expect("the example is an EtcdCluster");
    let clusters: Api<EtcdCluster> = Api::namespaced(admin.clone(), &ns);
    clusters
        .create(&PostParams::default(), &example_cluster)
        .await
        .unwrap();
    let replicas = usize::try_from(example_cluster.spec.replicas).expect("positive replicas");
    support::ready_with(&clusters, &cluster_name, replicas, Duration::from_secs(180)).await;
    // The operator held its Lease under OLM's Role.
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(admin.clone(), &ns)
        .get("quorum-etcd-operator-leader")
        .await
        .expect("the operator holds its Lease");
    assert!(lease.spec.unwrap().holder_identity.is_some());
    olm.assert_running();
    opm_serve.assert_running();

    operator.stop().await;
    let _ = Api::<EtcdCluster>::namespaced(admin.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = Api::<EtcdBackup>::namespaced(admin.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    apis.uninstall(&mut olm, PACKAGE, CSV).await;
    drop(olm);
    drop(opm_serve);
    apis.remove_cluster_rbac(&admin).await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}
