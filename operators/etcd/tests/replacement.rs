//! A member whose process dies (its data lost with it) is replaced through the whole operator:
//! its peers report it down, the gate lets the replacement through (two healthy members of
//! three keep quorum), it is removed from the membership, added back as a learner under the
//! same name, its volume and pod are deleted so it starts empty, and it is promoted once it
//! has caught up. Real control plane, real etcd processes.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use etcd_operator::{
    crd::{EtcdBackup, EtcdCluster},
    reconcile::MemberAddresses,
};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::{
    Api, CustomResourceExt, ResourceExt,
    api::{ListParams, PostParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd},
    local_members::{EtcdLauncher, LocalMembers},
    tools::{etcd_binary, pinned_version},
    wait,
};

#[tokio::test]
async fn a_member_that_died_with_its_data_is_replaced_under_the_same_name() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    install_crd(&client, &EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-replace").await;
    let ns = namespace.name().to_string();
    let version = pinned_version("ETCD_VERSION").trim_start_matches('v').to_string();
    let state = std::env::temp_dir().join(format!("quorum-replace-{ns}"));
    let members = LocalMembers::start(
        client.clone(),
        EtcdLauncher::new(BTreeMap::from([(version.clone(), etcd_binary())])),
        state.clone(),
        Some(ns.clone()),
    );
    let operator = support::operator::start_replacing_after(
        client.clone(),
        &ns,
        MemberAddresses::Loopback,
        Duration::from_secs(3),
    );

    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    let spec = support::cluster_spec(3, Some(&version));
    clusters
        .create(&PostParams::default(), &EtcdCluster::new("main", spec))
        .await
        .unwrap();
    let ids = |status: &etcd_operator::crd::EtcdClusterStatus| -> BTreeMap<String, String> {
        status
            .members
            .iter()
            .map(|m| (m.name.clone(), m.id.clone().unwrap_or_default()))
            .collect()
    };
    let healthy_three = || async {
        let status = clusters
            .get("main")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        let healthy = status
            .members
            .iter()
            .filter(|m| m.health == "Healthy" && !m.learner)
            .count();
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if healthy == 3 && ready {
            Ok(status)
        } else {
            Err(format!("{:?}", status.members))
        }
    };
    let before = wait::until("three healthy members", Duration::from_secs(120), healthy_three).await;
    // A version of the cluster from before the replacement, which a watch cache lagging behind
    // the status writes could still hand to a pass.
    let earlier_version = clusters.get("main").await.unwrap().metadata.resource_version;

    // The process dies and its data with it.
    members.kill(&ns, "main-2").await;
    let _ = std::fs::remove_dir_all(state.join(&ns).join("main-2"));

    let after = wait::until(
        "main-2 replaced and healthy again",
        Duration::from_secs(180),
        || async {
            let status = healthy_three().await?;
            if ids(&status)["main-2"] != ids(&before)["main-2"] {
                Ok(status)
            } else {
                Err("not replaced yet".into())
            }
        },
    )
    .await;
    assert_eq!(
        ids(&after)["main-0"],
        ids(&before)["main-0"],
        "the healthy members were left alone"
    );
    assert_eq!(ids(&after)["main-1"], ids(&before)["main-1"]);

    // A pass handed a copy some status writes behind (as a lagging watch cache can, at the
    // version it had then), which still lists main-2's old volume as to be wiped, must not wipe
    // the replacement that joined.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pod_uid = pods.get("main-2").await.unwrap().uid();
    let claim_uid = claims.get("data-main-2").await.unwrap().uid();
    let mut stale = clusters.get("main").await.unwrap();
    stale.status.get_or_insert_default().wipe_pending = vec![2];
    stale.metadata.resource_version = earlier_version;
    etcd_operator::reconcile::reconcile(Arc::new(stale), operator.context.clone())
        .await
        .expect("a pass");
    assert_eq!(
        pods.get_opt("main-2").await.unwrap().and_then(|pod| pod.uid()),
        pod_uid,
        "main-2's pod kept"
    );
    assert_eq!(
        claims
            .get_opt("data-main-2")
            .await
            .unwrap()
            .and_then(|claim| claim.uid()),
        claim_uid,
        "main-2's volume kept"
    );

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for expected in [
        "ReplacingMember",
        "AddingMember",
        "WipingMember",
        "PromotingMember",
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
