//! A Subscription install with real OLM v0 (`quorum_e2e::olm`): an inline catalog of every
//! published bundle served by `opm serve`, a CatalogSource, an OperatorGroup and a Subscription
//! to `quorum-mysql-operator`; OLM runs the InstallPlan and brings the CSV to `Succeeded`. The
//! operator then runs in-process under a token of the ServiceAccount OLM created, so only the
//! CSV's permissions are behind it, takes its Lease and brings the CSV's `alm-examples`
//! MySQLCluster to Ready with a real MariaDB behind each member pod.

use crate::support;

use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use mysql_operator::crd::MySQLCluster;
use quorum_e2e::{
    control_plane::{admin_client, assert_lease_held},
    local_members::{LocalMembers, MariaDbLauncher},
    olm::SubscribedOperator,
};

const PACKAGE: &str = "quorum-mysql-operator";
const CSV: &str = "quorum-mysql-operator.v0.1.0";

#[tokio::test]
async fn a_subscription_installs_the_operator_through_olm_and_it_reconciles_the_example() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    let mut installed = SubscribedOperator::install(&admin, "mysql-olm", PACKAGE, CSV).await;
    let ns = installed.ns().to_string();

    let as_operator = installed.service_account_client(&admin).await;
    let members = LocalMembers::start(
        admin.clone(),
        MariaDbLauncher,
        installed.scratch.join("members"),
        Some(ns.clone()),
    );
    let operator = support::start_operator_with(as_operator, &ns, true);

    // What OperatorHub offers to create first; its application account's Secret is the
    // user's, as in the sample.
    let example: MySQLCluster =
        serde_json::from_value(installed.example("MySQLCluster")).expect("the example is a MySQLCluster");
    let sample = support::create_sample_secret(&admin, &ns).await;
    assert_eq!(
        serde_json::to_value(&example.spec).unwrap(),
        serde_json::to_value(&sample.spec).unwrap(),
        "the first alm-example is the documented sample"
    );
    let name = example.metadata.name.clone().expect("a name");
    let clusters: Api<MySQLCluster> = Api::namespaced(admin.clone(), &ns);
    clusters.create(&PostParams::default(), &example).await.unwrap();
    let status = support::ready(&clusters, &name, example.spec.replicas - 1).await;
    support::application_account_connects(&ns, &example, &status).await;
    assert_lease_held(&admin, &ns, PACKAGE).await;
    installed.assert_running();

    operator.stop().await;
    clusters
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("deleting the example");
    drop(members);
    installed.uninstall(&admin).await;
}
