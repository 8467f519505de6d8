//! A Subscription install with real OLM v0 (`quorum_e2e::olm`): an inline catalog of every
//! published bundle served by `opm serve`, a CatalogSource, an OperatorGroup and a Subscription
//! to `quorum-mongodb-operator`; OLM runs the InstallPlan and brings the CSV to `Succeeded`.
//! The operator then runs in-process under a token of the ServiceAccount OLM created, so only
//! the CSV's permissions are behind it, takes its Lease and brings the CSV's `alm-examples`
//! MongoDBReplicaSet to Ready. The members are the replica-set simulator (`mongo-sim`), or
//! real `mongod` processes when `QUORUM_MONGOD` names one.

use crate::support;

use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use mongodb_operator::crd::MongoDBReplicaSet;
use quorum_e2e::{
    control_plane::{admin_client, assert_lease_held},
    local_members::{LocalMembers, MongoLauncher},
    olm::SubscribedOperator,
};

const PACKAGE: &str = "quorum-mongodb-operator";
const CSV: &str = "quorum-mongodb-operator.v0.1.0";

#[tokio::test]
async fn a_subscription_installs_the_operator_through_olm_and_it_reconciles_the_example() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    quorum_core::install_crypto_provider();
    let admin = admin_client().await;
    let mut installed = SubscribedOperator::install(&admin, "mongodb-olm", PACKAGE, CSV).await;
    let ns = installed.ns().to_string();

    let as_operator = installed.service_account_client(&admin).await;
    let pods = LocalMembers::start(
        admin.clone(),
        MongoLauncher,
        installed.scratch.join("pods"),
        Some(ns.clone()),
    );
    let operator = support::start_operator_with(as_operator, &ns, true);

    // What OperatorHub offers to create first.
    let example: MongoDBReplicaSet = serde_json::from_value(installed.example("MongoDBReplicaSet"))
        .expect("the example is a MongoDBReplicaSet");
    let name = example.metadata.name.clone().expect("a name");
    let sets: Api<MongoDBReplicaSet> = Api::namespaced(admin.clone(), &ns);
    sets.create(&PostParams::default(), &example).await.unwrap();
    support::ready(&sets, &name, example.spec.members).await;
    let members = usize::try_from(example.spec.members).expect("positive members");
    support::writes_are_kept(&admin, &ns, &name, members).await;
    assert_lease_held(&admin, &ns, PACKAGE).await;
    installed.assert_running();

    operator.stop().await;
    sets.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("deleting the example");
    drop(pods);
    installed.uninstall(&admin).await;
}
