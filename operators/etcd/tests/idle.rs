//! What a settled cluster costs the API server: passes over it write nothing and read nothing
//! but the object someone changed (everything else comes from the operator's watch caches), yet
//! still take back what someone else changed. Counted by the operator's own client, which records
//! every request it sends (reads, writes of any kind, deletions included), whatever else runs
//! meanwhile.

use crate::support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{
    crd::{EtcdBackup, EtcdCluster},
    reconcile::MemberAddresses,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd, recording_admin_client},
    idle,
    local_members::{EtcdLauncher, LocalMembers},
    tools::etcd_binary,
    wait,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_over_a_settled_cluster_write_nothing_read_only_what_changed_and_take_back_a_widened_selector()
{
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let client = admin_client().await;
    // Both kinds: a pass reads the cluster's scheduled EtcdBackup, and without its CRD (a fresh
    // control plane, this binary run alone) no pass ever completes.
    install_crd(&client, &EtcdCluster::crd()).await;
    install_crd(&client, &EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-idle").await;
    let ns = namespace.name().to_string();
    let scratch = std::env::temp_dir().join(format!("quorum-idle-{ns}"));
    let spec = support::cluster_spec(3, None);
    let _members = LocalMembers::start(
        client.clone(),
        EtcdLauncher::new(BTreeMap::from([(spec.version.clone(), etcd_binary())])),
        scratch.clone(),
        Some(ns.clone()),
    );
    // The operator's own client records what it sends: other tests may write to the same API
    // server meanwhile.
    let (operator_client, sent) = recording_admin_client().await;
    let operator = support::operator::start(operator_client, &ns, MemberAddresses::Loopback);
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &EtcdCluster::new("main", spec))
        .await
        .unwrap();
    support::ready_with(&clusters, "main", 3, Duration::from_secs(120)).await;

    let metrics = operator.context.metrics.clone();
    // The operator's events go through the recorded client too: none may be among the writes.
    idle::poke(&clusters, "main", &metrics, "etcdclusters", 0).await;
    assert!(
        sent.writes().iter().any(|(_, path)| path.contains("/events")),
        "the operator's events go through the recorded client: {:?}",
        sent.writes()
    );
    // Each poke changes the cluster object, so a pass reads it as stored (status is the
    // operator's memory); its StatefulSet, Services, ConfigMap, budget, pods and scheduled
    // backup come from the watch caches.
    idle::assert_settled_passes_are_free(
        &clusters,
        "main",
        &format!("/apis/etcd.quorum.dev/v1alpha1/namespaces/{ns}/etcdclusters/main"),
        &metrics,
        "etcdclusters",
        &sent,
        3,
    )
    .await;

    // A selector someone else widened (an atomic map: its values alone still hold every label
    // the operator wants) is taken back by the next pass.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let wanted = budgets.get("main").await.unwrap().spec.unwrap().selector;
    let widened = serde_json::json!({"spec": {"selector": {"matchLabels": {"tampered": "yes"}}}});
    budgets
        .patch("main", &PatchParams::default(), &Patch::Merge(&widened))
        .await
        .unwrap();
    // A pass reads the budget from its watch cache, which may not hold the change yet when the
    // pass after the poke starts: a pass that sees it takes it back.
    let round = std::sync::atomic::AtomicUsize::new(4);
    wait::until(
        "the operator's selector back",
        Duration::from_secs(60),
        || async {
            let selector = budgets
                .get("main")
                .await
                .map_err(|e| e.to_string())?
                .spec
                .unwrap()
                .selector;
            if selector == wanted {
                return Ok(());
            }
            let round = round.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            idle::poke(&clusters, "main", &metrics, "etcdclusters", round).await;
            Err(format!("{selector:?}"))
        },
    )
    .await;

    operator.stop().await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}
