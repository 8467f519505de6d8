//! What a settled cluster costs the API server: passes over it write nothing and read nothing
//! but the object someone changed (everything else comes from the operator's watch caches), yet
//! still take back what someone else changed. Counted by the operator's own client, which records
//! every request it sends (reads, writes of any kind, deletions included), whatever else runs
//! meanwhile.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

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
    local_members::{EtcdLauncher, LocalMembers},
    tools::etcd_binary,
    wait,
};

fn passes(metrics: &str) -> u64 {
    metrics
        .lines()
        .find(|line| line.starts_with(r#"quorum_reconcile_total{controller="etcdclusters"}"#))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

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

    // A pass is asked for by touching an annotation (the test's write, to the cluster object
    // itself, which is not counted), and counted by the operator's pass counter.
    let pass = |round: usize| {
        let clusters = clusters.clone();
        let context = operator.context.clone();
        async move {
            let before = passes(&context.metrics.render());
            let poke =
                serde_json::json!({"metadata": {"annotations": {"test.quorum.dev/poke": round.to_string()}}});
            clusters
                .patch("main", &PatchParams::default(), &Patch::Merge(&poke))
                .await
                .unwrap();
            wait::until("a pass", Duration::from_secs(30), || async {
                let after = passes(&context.metrics.render());
                if after > before {
                    Ok(())
                } else {
                    Err(format!("{after} passes"))
                }
            })
            .await;
        }
    };
    // The first passes after the operator started apply every child once.
    pass(0).await;
    let before = sent.writes().len();
    let reads_before = sent.reads().len();
    assert!(
        sent.writes().iter().any(|(_, path)| path.contains("/events")),
        "the operator's events go through the recorded client: {:?}",
        sent.writes()
    );
    for round in 1..=3 {
        pass(round).await;
    }
    // The operator's events are written through the same client: none may be among these.
    // (Counting the events in the namespace instead also counts the controllers' own, which
    // arrive late when the machine is busy.)
    let written = &sent.writes()[before..];
    assert!(
        written.is_empty(),
        "three passes over a settled cluster wrote: {written:?}"
    );
    // Each poke changed the cluster object, so a pass reads it as stored (status is the
    // operator's memory); its StatefulSet, Services, ConfigMap, budget, pods and scheduled
    // backup come from the watch caches.
    let cluster_path = format!("/apis/etcd.quorum.dev/v1alpha1/namespaces/{ns}/etcdclusters/main");
    let read = &sent.reads()[reads_before..];
    assert!(
        read.iter().all(|(_, target)| target == &cluster_path),
        "three passes over a settled cluster read more than the cluster itself: {read:?}"
    );

    // A selector someone else widened (an atomic map: its values alone still hold every label
    // the operator wants) is taken back by the next pass.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let wanted = budgets.get("main").await.unwrap().spec.unwrap().selector;
    let widened = serde_json::json!({"spec": {"selector": {"matchLabels": {"tampered": "yes"}}}});
    budgets
        .patch("main", &PatchParams::default(), &Patch::Merge(&widened))
        .await
        .unwrap();
    pass(4).await;
    let selector = budgets.get("main").await.unwrap().spec.unwrap().selector;
    assert_eq!(selector, wanted, "the operator's selector is back");

    operator.stop().await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}
