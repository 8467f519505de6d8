//! The Helm chart's RBAC is enough: install the chart into the local control plane, then run
//! the operator (as a host process would: in this test process) under a token of the
//! ServiceAccount the chart created, and it brings the sample `EtcdCluster` to Ready with a
//! real etcd behind each member pod.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{crd::EtcdCluster, reconcile::MemberAddresses};
use kube::{Api, api::PostParams};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, kubeconfig_path, service_account_client},
    local_members::{EtcdLauncher, LocalMembers},
    tools::{etcd_binary, packaging_tool, pinned_version, repository_root, succeeds},
};

#[tokio::test]
async fn the_operator_runs_under_the_charts_service_account() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    let namespace = TestNamespace::create(&admin, "helm-rbac").await;
    let ns = namespace.name().to_string();
    let helm = packaging_tool("helm");
    let kubeconfig = kubeconfig_path().display().to_string();
    let release = format!("rbac-{}", &ns[ns.len() - 6..]);
    let chart = repository_root().join("charts/quorum-etcd-operator");
    succeeds(
        &helm,
        &[
            "install",
            &release,
            &chart.display().to_string(),
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            &ns,
            "--set",
            // Cluster-scoped with a fixed name: another test's release may own it.
            "admissionPolicy=false",
            "--set",
            &format!("watchNamespaces={{{ns}}}"),
        ],
        None,
    );
    let account = format!("{release}-quorum-etcd-operator");
    let as_chart = service_account_client(&admin, &ns, &account).await;

    let version = pinned_version("ETCD_VERSION").trim_start_matches('v').to_string();
    let state = std::env::temp_dir().join(format!("quorum-helm-rbac-{ns}"));
    let _members = LocalMembers::start(
        admin.clone(),
        EtcdLauncher::new(BTreeMap::from([(version.clone(), etcd_binary())])),
        state.clone(),
        Some(ns.clone()),
    );
    let operator = support::operator::start_with(as_chart, &ns, MemberAddresses::Loopback, true);

    // The sample users are shown (also the bundle's alm-examples).
    let sample: EtcdCluster = serde_yaml::from_str(
        &std::fs::read_to_string(repository_root().join("samples/etcd-cluster.yaml")).unwrap(),
    )
    .unwrap();
    let name = sample.metadata.name.clone().unwrap();
    let clusters: Api<EtcdCluster> = Api::namespaced(admin.clone(), &ns);
    clusters.create(&PostParams::default(), &sample).await.unwrap();
    support::ready_with(&clusters, &name, 3, Duration::from_secs(120)).await;

    operator.stop().await;
    succeeds(
        &helm,
        &[
            "uninstall",
            &release,
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            &ns,
        ],
        None,
    );
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(state);
}
