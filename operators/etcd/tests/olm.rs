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

use crate::support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{
    crd::{EtcdBackup, EtcdCluster},
    reconcile::MemberAddresses,
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use quorum_e2e::{
    control_plane::{admin_client, assert_lease_held},
    local_members::{EtcdLauncher, LocalMembers},
    olm::SubscribedOperator,
    tools::{etcd_binary, pinned_version},
};

const PACKAGE: &str = "quorum-etcd-operator";
const CSV: &str = "quorum-etcd-operator.v0.1.0";

#[tokio::test]
async fn a_subscription_installs_the_operator_through_olm_and_it_reconciles_the_example() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    let mut installed = SubscribedOperator::install(&admin, "etcd-olm", PACKAGE, CSV).await;
    let ns = installed.ns().to_string();

    // The operator, in-process, with the ServiceAccount OLM created and nothing else.
    let example = installed.example("EtcdCluster");
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
    let as_operator = installed.service_account_client(&admin).await;
    let _members = LocalMembers::start(
        admin.clone(),
        EtcdLauncher::new(BTreeMap::from([(version.clone(), etcd_binary())])),
        installed.scratch.join("members"),
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
    assert_lease_held(&admin, &ns, PACKAGE).await;
    installed.assert_running();

    operator.stop().await;
    let _ = Api::<EtcdCluster>::namespaced(admin.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = Api::<EtcdBackup>::namespaced(admin.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    installed.uninstall(&admin).await;
}
