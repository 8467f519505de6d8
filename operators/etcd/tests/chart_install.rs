//! The Helm chart's RBAC is enough: install the chart into the local control plane, then run
//! the operator (as a host process would: in this test process) under a token of the
//! ServiceAccount the chart created, and it takes its Lease and brings the sample
//! `EtcdCluster` to Ready with a real etcd behind each member pod.

use crate::support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{crd::EtcdCluster, reconcile::MemberAddresses};
use kube::{Api, api::PostParams};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, assert_lease_held},
    helm::ChartRelease,
    local_members::{EtcdLauncher, LocalMembers},
    tools::{etcd_binary, pinned_version, repository_root},
};

#[tokio::test]
async fn the_operator_runs_under_the_charts_service_account() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    let namespace = TestNamespace::create(&admin, "helm-rbac").await;
    let ns = namespace.name().to_string();
    // The admission policy is cluster-scoped with a fixed name: another test's release may own it.
    let chart = ChartRelease::install(&admin, "quorum-etcd-operator", &ns, &["admissionPolicy=false"]).await;
    let as_chart = chart.service_account_client(&admin).await;

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
    assert_lease_held(&admin, &ns, "quorum-etcd-operator").await;

    operator.stop().await;
    chart.uninstall();
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(state);
}
