//! The Helm chart's RBAC is enough: `helm install` of `charts/quorum-mongodb-operator` into
//! the local control plane, then the operator runs (as a host process would: in this test
//! process) under a token of the ServiceAccount the chart created, takes its Lease and brings
//! the sample `MongoDBReplicaSet` users are shown to Ready, and an application's writes are
//! kept. The members are the replica-set simulator (`mongo-sim`), or real `mongod` processes
//! when `QUORUM_MONGOD` names one.

use crate::support;

use kube::{Api, CustomResourceExt, api::PostParams};
use mongodb_operator::crd::{MongoDBBackup, MongoDBReplicaSet};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, assert_lease_held, install_crd},
    helm::ChartRelease,
    local_members::{LocalMembers, MongoLauncher},
    tools::repository_root,
};

#[tokio::test]
async fn the_operator_runs_under_the_charts_service_account() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    quorum_core::install_crypto_provider();
    let admin = admin_client().await;
    // The chart's CRDs are these; installing them first keeps a stale copy from an older run
    // (which `helm install` would leave alone) out of the way.
    install_crd(&admin, &MongoDBReplicaSet::crd()).await;
    install_crd(&admin, &MongoDBBackup::crd()).await;
    let namespace = TestNamespace::create(&admin, "mongodb-helm").await;
    let ns = namespace.name().to_string();
    // The admission policy is cluster-scoped with a fixed name: another test's release may own
    // it (`e2e/tests/packaging.rs` checks it renders).
    let chart =
        ChartRelease::install(&admin, "quorum-mongodb-operator", &ns, &["admissionPolicy=false"]).await;
    let as_chart = chart.service_account_client(&admin).await;

    let state = std::env::temp_dir().join(format!("quorum-mongodb-helm-{ns}"));
    let pods = LocalMembers::start(admin.clone(), MongoLauncher, state.clone(), Some(ns.clone()));
    let operator = support::start_operator_with(as_chart, &ns, true);

    let sample: MongoDBReplicaSet = serde_yaml::from_str(
        &std::fs::read_to_string(repository_root().join("samples/mongodb-replicaset.yaml")).unwrap(),
    )
    .expect("samples/mongodb-replicaset.yaml is a MongoDBReplicaSet");
    let name = sample.metadata.name.clone().expect("a name");
    let sets: Api<MongoDBReplicaSet> = Api::namespaced(admin.clone(), &ns);
    sets.create(&PostParams::default(), &sample).await.unwrap();
    support::ready(&sets, &name, sample.spec.members).await;
    let members = usize::try_from(sample.spec.members).expect("positive members");
    support::writes_are_kept(&admin, &ns, &name, members).await;
    assert_lease_held(&admin, &ns, "quorum-mongodb-operator").await;

    operator.stop().await;
    drop(pods);
    chart.uninstall();
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(state);
}
