//! The Helm chart's RBAC is enough: `helm install` of `charts/quorum-redis-operator` into the
//! local control plane, then the operator runs (as a host process would: in this test process)
//! under a token of the ServiceAccount the chart created, takes its Lease and brings the sample
//! `RedisCluster` users are shown to Ready with real Redis processes behind the pods.

use crate::support;

use kube::{Api, CustomResourceExt, api::PostParams};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, assert_lease_held, install_crd},
    helm::ChartRelease,
    local_members::{LocalMembers, RedisLauncher},
    tools::repository_root,
};
use redis_operator::crd::{RedisBackup, RedisCluster};

#[tokio::test]
async fn the_operator_runs_under_the_charts_service_account() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    quorum_core::install_crypto_provider();
    let admin = admin_client().await;
    // The chart's CRDs are these; installing them first keeps a stale copy from an older run
    // (which `helm install` would leave alone) out of the way.
    install_crd(&admin, &RedisCluster::crd()).await;
    install_crd(&admin, &RedisBackup::crd()).await;
    let namespace = TestNamespace::create(&admin, "redis-helm").await;
    let ns = namespace.name().to_string();
    let chart = ChartRelease::install(&admin, "quorum-redis-operator", &ns, &[]).await;
    let as_chart = chart.service_account_client(&admin).await;

    let state = std::env::temp_dir().join(format!("quorum-redis-helm-{ns}"));
    let pods = LocalMembers::start(admin.clone(), RedisLauncher, state.clone(), Some(ns.clone()));
    let operator = support::start_operator_with(as_chart, &ns, true);

    let sample: RedisCluster = serde_yaml::from_str(
        &std::fs::read_to_string(repository_root().join("samples/redis-cluster.yaml")).unwrap(),
    )
    .expect("samples/redis-cluster.yaml is a RedisCluster");
    let name = sample.metadata.name.clone().expect("a name");
    let clusters: Api<RedisCluster> = Api::namespaced(admin.clone(), &ns);
    clusters.create(&PostParams::default(), &sample).await.unwrap();
    let status = support::ready(&clusters, &name, 1 + sample.spec.replicas.expect("replicas")).await;
    support::writes_replicate(&admin, &ns, &sample, &status).await;
    assert_lease_held(&admin, &ns, "quorum-redis-operator").await;

    operator.stop().await;
    drop(pods);
    chart.uninstall();
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(state);
}
