//! A member whose process dies (its data lost with it) is replaced through the whole operator:
//! its peers report it down, the gate lets the replacement through (two healthy members of
//! three keep quorum), it is removed from the membership, added back as a learner under the
//! same name, its volume and pod are deleted so it starts empty, and it is promoted once it
//! has caught up. Real control plane, real etcd processes.

use crate::support;

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

/// A namespace with the CRDs, a launcher of real etcd processes for its pods, and an operator
/// that replaces a member Unhealthy for `replace_after`.
struct Local {
    client: kube::Client,
    namespace: TestNamespace,
    ns: String,
    version: String,
    state: std::path::PathBuf,
    members: LocalMembers,
    operator: support::operator::Running,
    clusters: Api<EtcdCluster>,
}

impl Local {
    async fn start(prefix: &str, replace_after: Duration) -> Self {
        quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
        let client = admin_client().await;
        install_crd(&client, &EtcdCluster::crd()).await;
        install_crd(&client, &EtcdBackup::crd()).await;
        let namespace = TestNamespace::create(&client, prefix).await;
        let ns = namespace.name().to_string();
        let version = pinned_version("ETCD_VERSION").trim_start_matches('v').to_string();
        let state = std::env::temp_dir().join(format!("quorum-{prefix}-{ns}"));
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
            replace_after,
        );
        let clusters = Api::namespaced(client.clone(), &ns);
        Self {
            client,
            namespace,
            ns,
            version,
            state,
            members,
            operator,
            clusters,
        }
    }
}

#[tokio::test]
async fn a_member_that_died_with_its_data_is_replaced_under_the_same_name() {
    let Local {
        client,
        namespace,
        ns,
        version,
        state,
        members,
        operator,
        clusters,
    } = Local::start("etcd-replace", Duration::from_secs(3)).await;
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

/// The leader's process killed (and not started again) under a writer: the other two elect a
/// leader, and the operator records the change in `status.lastLeaderChange` with a
/// `PrimaryChanged` event, from the killed member, timed from when its leader watch broke (after
/// the kill, no later than the operator's sight of the new leader). No acknowledged write lost.
#[tokio::test]
async fn a_killed_leader_is_recorded_as_a_leader_change_keeping_every_acknowledged_write() {
    use quorum_e2e::history::Writer;
    // No replacement during the test: the killed member stays a member.
    let Local {
        client,
        namespace,
        ns,
        version,
        state,
        members,
        operator,
        clusters,
    } = Local::start("etcd-leader-loss", Duration::from_secs(3600)).await;
    clusters
        .create(
            &PostParams::default(),
            &EtcdCluster::new("main", support::cluster_spec(3, Some(&version))),
        )
        .await
        .unwrap();
    let leader = wait::until(
        "three healthy members and a leader",
        Duration::from_secs(120),
        || async {
            let status = clusters
                .get("main")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let healthy = status.members.iter().filter(|m| m.health == "Healthy").count();
            match status.leader {
                Some(leader) if healthy == 3 => Ok(leader),
                other => Err(format!("{other:?} {:?}", status.members)),
            }
        },
    )
    .await;

    let urls: Vec<String> = (0..3)
        .map(|ordinal| {
            format!(
                "http://{}:2379",
                quorum_core::naming::loopback_ip(&ns, "main", ordinal)
            )
        })
        .collect();
    let writer_client = etcd_client::Client::connect(&urls, None)
        .await
        .expect("writer connects");
    let writer = Writer::start("history", Duration::from_millis(10), 30_000, move |key, value| {
        let mut client = writer_client.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(2), client.put(key, value, None))
                .await
                .is_ok_and(|put| put.is_ok())
        }
    });
    writer.acknowledged_at_least(50, Duration::from_secs(120)).await;

    let killed_at = jiff::Timestamp::now();
    members.kill(&ns, &leader).await;
    let change = wait::until("the leader change recorded", Duration::from_secs(120), || async {
        let status = clusters
            .get("main")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        match status.last_leader_change {
            Some(change) if change.from == leader => Ok(change),
            other => Err(format!("{:?} {other:?}", status.leader)),
        }
    })
    .await;
    assert_ne!(change.to, leader);
    eprintln!("{change:?}, killed at {killed_at}");
    // etcd reports no election time, but the killed leader's watch breaks at once: the loss is
    // dated from that break even when the pass it wakes runs after the election (a loaded
    // machine), and the time is bounded by the kill and the sight of the new leader (status
    // times are whole seconds: one second of slack on each, and the figure runs from the stored,
    // truncated loss time to the precise sight, so up to two against the stored sight).
    let (Some(lost_at), Some(from_loss)) = (change.lost_at.clone(), change.from_loss_millis) else {
        panic!("the loss is dated from the broken watch: {change:?}, killed at {killed_at}");
    };
    let lost_at = lost_at.0;
    assert!(
        lost_at >= killed_at - jiff::SignedDuration::from_secs(1)
            && lost_at < change.observed_at.0 + jiff::SignedDuration::from_secs(1),
        "{change:?}, killed at {killed_at}"
    );
    let kill_to_seen = change.observed_at.0.duration_since(killed_at).as_millis() as i64;
    assert!(
        from_loss > 0 && from_loss <= kill_to_seen + 2_000,
        "{change:?}, killed at {killed_at}"
    );
    // The event is published after the status that records the change: it may be a moment
    // behind it.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    wait::until("a PrimaryChanged event", Duration::from_secs(30), || {
        let events = events.clone();
        async move {
            let reasons: Vec<String> = events
                .list(&ListParams::default().fields("involvedObject.name=main"))
                .await
                .map_err(|error| error.to_string())?
                .items
                .into_iter()
                .filter_map(|event| event.reason)
                .collect();
            if reasons.iter().any(|r| r == "PrimaryChanged") {
                Ok(())
            } else {
                Err(format!("{reasons:?}"))
            }
        }
    })
    .await;

    writer
        .acknowledged_at_least(writer.acknowledged() + 50, Duration::from_secs(120))
        .await;
    let history = writer.stop().await;
    let survivor = (0..3)
        .map(|ordinal| format!("main-{ordinal}"))
        .find(|name| *name != leader)
        .unwrap();
    let ordinal: usize = survivor.trim_start_matches("main-").parse().unwrap();
    let url = format!(
        "http://{}:2379",
        quorum_core::naming::loopback_ip(&ns, "main", ordinal)
    );
    let mut reader = etcd_client::Client::connect([url], None).await.unwrap();
    let held: BTreeMap<String, Option<String>> = reader
        .get("history/", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap()
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap().to_string(),
                Some(kv.value_str().unwrap().to_string()),
            )
        })
        .collect();
    let checked = history
        .check(&held)
        .unwrap_or_else(|violations| panic!("{violations:#?}"));
    eprintln!("{checked} acknowledged writes checked, none lost");
    operator.stop().await;
    drop(members);
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(&state);
}
