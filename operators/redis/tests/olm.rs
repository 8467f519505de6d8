//! A Subscription install with real OLM v0 (`quorum_e2e::olm`): an inline catalog of every
//! published bundle served by `opm serve`, a CatalogSource, an OperatorGroup and a Subscription
//! to `quorum-redis-operator`; OLM runs the InstallPlan and brings the CSV to `Succeeded`. The
//! operator then runs in-process under a token of the ServiceAccount OLM created, so only the
//! CSV's permissions are behind it, takes its Lease and brings the CSV's `alm-examples`
//! RedisCluster (a primary, two replicas, three Sentinels) to Ready with real Redis processes
//! behind the pods.

use crate::support;

use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use quorum_e2e::{
    control_plane::{admin_client, assert_lease_held},
    local_members::{LocalMembers, RedisLauncher},
    olm::SubscribedOperator,
};
use redis_operator::crd::{Mode, RedisCluster};

const PACKAGE: &str = "quorum-redis-operator";
const CSV: &str = "quorum-redis-operator.v0.1.0";

#[tokio::test]
async fn a_subscription_installs_the_operator_through_olm_and_it_reconciles_the_example() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    quorum_core::install_crypto_provider();
    let admin = admin_client().await;
    let mut installed = SubscribedOperator::install(&admin, "redis-olm", PACKAGE, CSV).await;
    let ns = installed.ns().to_string();

    let as_operator = installed.service_account_client(&admin).await;
    let pods = LocalMembers::start(
        admin.clone(),
        RedisLauncher,
        installed.scratch.join("pods"),
        Some(ns.clone()),
    );
    let operator = support::start_operator_with(as_operator, &ns, true);

    // What OperatorHub offers to create first.
    let example: RedisCluster =
        serde_json::from_value(installed.example("RedisCluster")).expect("the example is a RedisCluster");
    assert_eq!(example.spec.mode, Mode::Replication);
    let name = example.metadata.name.clone().expect("a name");
    let clusters: Api<RedisCluster> = Api::namespaced(admin.clone(), &ns);
    clusters.create(&PostParams::default(), &example).await.unwrap();
    let nodes = 1 + example.spec.replicas.expect("replicas");
    let status = support::ready(&clusters, &name, nodes).await;
    support::writes_replicate(&admin, &ns, &example, &status).await;
    assert_lease_held(&admin, &ns, PACKAGE).await;
    installed.assert_running();

    operator.stop().await;
    clusters
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("deleting the example");
    drop(pods);
    installed.uninstall(&admin).await;
}
