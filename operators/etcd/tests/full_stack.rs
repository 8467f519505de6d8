//! The whole operator against the real local control plane *and* real etcd: KWOK runs the
//! pods, and `LocalMembers` runs a real etcd process for each member pod on the loopback
//! address the operator resolves for it. Creating an `EtcdCluster` forms a real cluster;
//! `kubectl scale` (the scale subresource) really adds and removes members, one at a time.

use crate::support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{
    crd::{EtcdCluster, EtcdClusterSpec, EtcdClusterStatus},
    reconcile::MemberAddresses,
};
use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Event};
use kube::{
    Api, CustomResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use quorum_core::naming::loopback_ip;
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd},
    local_members::{EtcdLauncher, LocalMembers},
    tools::etcd_binary,
    wait,
};

fn spec(replicas: i32) -> EtcdClusterSpec {
    support::cluster_spec(replicas, None)
}

async fn settled_with(clusters: &Api<EtcdCluster>, members: usize) -> EtcdClusterStatus {
    wait::until(
        &format!("{members} healthy members, Ready and settled"),
        Duration::from_secs(120),
        || async {
            let cluster = clusters.get("main").await.map_err(|e| e.to_string())?;
            let status = cluster.status.clone().unwrap_or_default();
            let is = |type_: &str, value: &str| {
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == value)
            };
            let healthy = status
                .members
                .iter()
                .filter(|m| m.health == "Healthy" && !m.learner)
                .count();
            if healthy == members
                && is("Ready", "True")
                && is("Progressing", "False")
                && status.replicas == members as i32
            {
                Ok(status)
            } else {
                Err(format!("{:?} {:?}", status.members, status.conditions))
            }
        },
    )
    .await
}

#[tokio::test]
async fn a_real_cluster_forms_and_scales_three_to_five_to_three_keeping_its_keys() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    // The operator also runs the EtcdBackup controller, which needs its CRD.
    install_crd(&client, &etcd_operator::crd::EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-full").await;
    let ns = namespace.name().to_string();
    let state = std::env::temp_dir().join(format!("quorum-local-members-{ns}"));
    let members = LocalMembers::start(
        client.clone(),
        EtcdLauncher::new(BTreeMap::from([(spec(1).version, etcd_binary())])),
        state.clone(),
        Some(ns.clone()),
    );
    let operator = support::operator::start(client.clone(), &ns, MemberAddresses::Loopback);

    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &EtcdCluster::new("main", spec(3)))
        .await
        .unwrap();
    let formed = settled_with(&clusters, 3).await;
    assert!(formed.leader.is_some(), "a leader is reported");
    assert!(formed.cluster_id.is_some());
    assert_eq!(formed.version.as_deref(), Some(spec(1).version.as_str()));

    // Keys written through the members' own addresses.
    let url = |ordinal| format!("http://{}:2379", loopback_ip(&ns, "main", ordinal));
    let mut kv = etcd_client::Client::connect([url(0), url(1), url(2)], None)
        .await
        .unwrap();
    for i in 0..50 {
        kv.put(format!("k{i:02}"), "v", None).await.unwrap();
    }

    // `kubectl scale etcdcluster main --replicas=5`
    clusters
        .patch_scale(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    let grown = settled_with(&clusters, 5).await;
    assert_eq!(grown.members.len(), 5);
    assert_eq!(members.running().await.len(), 5);

    clusters
        .patch_scale(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    settled_with(&clusters, 3).await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    wait::until("the StatefulSet back at 3", Duration::from_secs(30), || async {
        let replicas = statefulsets
            .get("main")
            .await
            .map_err(|e| e.to_string())?
            .spec
            .unwrap()
            .replicas;
        if replicas == Some(3) {
            Ok(())
        } else {
            Err(format!("{replicas:?}"))
        }
    })
    .await;

    let mut kv = etcd_client::Client::connect([url(0)], None).await.unwrap();
    let keys = kv
        .get(
            "k",
            Some(etcd_client::GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .unwrap();
    assert_eq!(keys.kvs().len(), 50, "every key survived 3 -> 5 -> 3");

    // The steps are visible as events, in order.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|e| e.reason.clone())
        .collect();
    for expected in [
        "Bootstrapping",
        "AddingMember",
        "StartingMember",
        "PromotingMember",
        "RemovingMember",
        "StoppingMember",
    ] {
        assert!(
            reasons.iter().any(|r| r == expected),
            "no {expected} event in {reasons:?}"
        );
    }

    operator.stop().await;
    drop(members);
    namespace.delete().await;
}

/// A step in flight recorded by another operator version (or mangled by hand) is never taken
/// for "no step": the operator says so in status and events, keeps the record, and changes no
/// membership until a person removes it with the command the condition names.
#[tokio::test]
async fn an_unreadable_step_in_flight_holds_every_membership_change_until_a_person_removes_it() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    install_crd(&client, &etcd_operator::crd::EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-unreadable").await;
    let ns = namespace.name().to_string();
    let state = std::env::temp_dir().join(format!("quorum-local-members-{ns}"));
    let members = LocalMembers::start(
        client.clone(),
        EtcdLauncher::new(BTreeMap::from([(spec(1).version, etcd_binary())])),
        state.clone(),
        Some(ns.clone()),
    );
    let operator = support::operator::start(client.clone(), &ns, MemberAddresses::Loopback);
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &EtcdCluster::new("main", spec(3)))
        .await
        .unwrap();
    settled_with(&clusters, 3).await;
    let url = |ordinal| format!("http://{}:2379", loopback_ip(&ns, "main", ordinal));
    let mut kv = etcd_client::Client::connect([url(0), url(1), url(2)], None)
        .await
        .unwrap();
    for i in 0..20 {
        kv.put(format!("k{i:02}"), "v", None).await.unwrap();
    }
    operator.stop().await;

    // A record of a kind this operator does not know, and a spec that asks for two members more.
    clusters
        .patch_status(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"inFlight": {
                "action": "Rewind", "ordinal": 2, "startedAt": "2026-01-01T00:00:00Z"
            }}})),
        )
        .await
        .unwrap();
    clusters
        .patch_scale(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    let operator = support::operator::start(client.clone(), &ns, MemberAddresses::Loopback);
    let waiting = wait::until(
        "Progressing to say the record cannot be read",
        Duration::from_secs(60),
        || async {
            let cluster = clusters.get("main").await.map_err(|e| e.to_string())?;
            let status = cluster.status.unwrap_or_default();
            status
                .conditions
                .iter()
                .find(|c| c.type_ == "Progressing" && c.reason == "InFlightUnreadable")
                .map(|c| (c.message.clone(), status.clone()))
                .ok_or_else(|| format!("{:?}", status.conditions))
        },
    )
    .await;
    let (message, status) = waiting;
    assert!(
        message.contains("status.inFlight.action")
            && message.contains(
                "kubectl patch etcdcluster main --subresource=status --type=merge -p '{\"status\":{\"inFlight\":null}}'"
            ),
        "{message}"
    );
    assert_eq!(
        status.in_flight.as_ref().map(|step| step.action.to_string()),
        Some("Rewind".to_string()),
        "the record is kept as stored"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    wait::until("a warning event", Duration::from_secs(30), || async {
        let listed = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        listed
            .items
            .iter()
            .find(|e| {
                e.reason.as_deref() == Some("InFlightUnreadable") && e.type_.as_deref() == Some("Warning")
            })
            .map(|_| ())
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    // The pass that wrote the condition took no step: still three members, three pods.
    let listed = kv.member_list().await.unwrap();
    assert_eq!(
        listed.members().len(),
        3,
        "no member added: {:?}",
        listed.members()
    );
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        statefulsets.get("main").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );

    // The person's command from the message: the cluster grows as asked, every key kept.
    clusters
        .patch_status(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"inFlight": null}})),
        )
        .await
        .unwrap();
    settled_with(&clusters, 5).await;
    let keys = kv
        .get(
            "k",
            Some(etcd_client::GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .unwrap();
    assert_eq!(keys.kvs().len(), 20, "every acknowledged key is still there");

    operator.stop().await;
    drop(members);
    namespace.delete().await;
}
