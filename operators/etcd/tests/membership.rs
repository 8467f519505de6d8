//! Membership changes and the safety gate, against real etcd processes: the operator's own
//! observe -> decide -> execute loop, with a fault proxy between it and each member.

use std::{
    collections::BTreeSet,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::support::{CLUSTER, Harness};
use etcd_operator::decide::{Decision, Step, decide};
use quorum_core::availability::health::Health;
use quorum_e2e::{fault_proxy::Fault, wait};

/// Writes keys through every member until stopped; returns the keys etcd acknowledged.
fn start_writer(urls: Vec<String>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<BTreeSet<String>> {
    tokio::spawn(async move {
        let mut acknowledged = BTreeSet::new();
        let mut client = etcd_client::Client::connect(&urls, None)
            .await
            .expect("writer connects");
        let mut n = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let key = format!("during/{n:06}");
            let put = tokio::time::timeout(Duration::from_secs(2), client.put(key.as_str(), "v", None)).await;
            if let Ok(Ok(_)) = put {
                acknowledged.insert(key);
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        acknowledged
    })
}

async fn all_keys(url: &str) -> BTreeSet<String> {
    let mut client = etcd_client::Client::connect([url], None).await.unwrap();
    let response = client
        .get(
            "",
            Some(etcd_client::GetOptions::new().with_all_keys().with_keys_only()),
        )
        .await
        .unwrap();
    response
        .kvs()
        .iter()
        .map(|kv| kv.key_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn scale_three_to_five_to_three_keeps_every_key() {
    let mut harness = Harness::start(3).await;
    let first_url = harness.processes.members[0].client_url();
    let mut seed = etcd_client::Client::connect([first_url.as_str()], None)
        .await
        .unwrap();
    for i in 0..100 {
        seed.put(format!("before/{i:03}"), "v", None).await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    // The writer talks to the three members that stay throughout.
    let writer = start_writer(harness.processes.client_urls(), stop.clone());

    let up = harness.converge(5, 200).await;
    let view = harness.observe().await;
    assert_eq!(view.members.len(), 5);
    assert!(
        view.members
            .iter()
            .all(|m| !m.learner && m.observation.health == Health::Healthy)
    );
    // One member at a time: add as a learner, start its pod, promote; twice.
    // (A step etcd declined for now, such as an add during its start-up health window, is
    // simply asked again: consecutive repeats are one step.)
    let mut kinds: Vec<&str> = up
        .iter()
        .filter_map(|s| match s {
            Step::AddLearner { .. } => Some("add"),
            Step::StartPod { .. } => Some("start"),
            Step::Promote { .. } => Some("promote"),
            _ => None,
        })
        .collect();
    kinds.dedup();
    assert_eq!(
        kinds,
        ["add", "start", "promote", "add", "start", "promote"],
        "{up:?}"
    );

    let down = harness.converge(3, 200).await;
    let mut removed: Vec<usize> = down
        .iter()
        .filter_map(|s| match s {
            Step::Remove { ordinal, .. } => Some(*ordinal),
            _ => None,
        })
        .collect();
    removed.dedup();
    assert_eq!(removed, [4, 3], "highest ordinal first, one at a time: {down:?}");
    let stop_index = |ordinal| down.iter().position(|s| *s == Step::StopPod { ordinal }).unwrap();
    let remove_index = |ordinal| {
        down.iter()
            .position(|s| matches!(s, Step::Remove { ordinal: o, .. } if *o == ordinal))
            .unwrap()
    };
    assert!(
        remove_index(4) < stop_index(4),
        "removed from etcd before its pod goes"
    );
    assert!(remove_index(3) < stop_index(3));

    stop.store(true, Ordering::SeqCst);
    let acknowledged = writer.await.unwrap();
    assert!(
        acknowledged.len() > 50,
        "the writer made progress: {}",
        acknowledged.len()
    );
    let stored = all_keys(&first_url).await;
    for i in 0..100 {
        assert!(stored.contains(&format!("before/{i:03}")), "before/{i:03} lost");
    }
    let lost: Vec<_> = acknowledged.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert_eq!(harness.observe().await.members.len(), 3);
    let _ = CLUSTER;
}

#[tokio::test]
async fn a_blackholed_member_is_unknown_and_blocks_scale_down_and_replacement() {
    let harness = Harness::start(3).await;
    harness.proxies[&1].set(Fault::Blackhole);

    let view = harness.observe().await;
    let member = |ordinal: usize| {
        view.members
            .iter()
            .find(|m| m.ordinal == ordinal)
            .unwrap()
            .clone()
    };
    assert!(
        matches!(member(1).observation.health, Health::Unknown(_)),
        "unreachable from the operator, but its peers still see it: {:?}",
        member(1).observation.health
    );
    assert_eq!(member(0).observation.health, Health::Healthy);
    assert_eq!(member(2).observation.health, Health::Healthy);

    // Scale down would remove member 2 while member 1 is Unknown: refused.
    let scale_down = decide(&harness.facts(&view, 2));
    assert!(
        matches!(&scale_down, Decision::Wait(w) if w.reason == "MemberUnknown"),
        "{scale_down:?}"
    );
    // However long it stays Unknown, it is never replaced: no step at all is taken.
    let mut facts = harness.facts(&view, 3);
    for m in facts.members.as_mut().unwrap() {
        m.unhealthy_for = Some(Duration::from_secs(3600));
    }
    let decision = decide(&facts);
    assert!(!matches!(decision, Decision::Act(_)), "{decision:?}");

    // One-way cut (requests arrive, answers are lost) is just as Unknown.
    harness.proxies[&1].set(Fault::CutToClient);
    let view = harness.observe().await;
    let health = &view
        .members
        .iter()
        .find(|m| m.ordinal == 1)
        .unwrap()
        .observation
        .health;
    assert!(matches!(health, Health::Unknown(_)), "{health:?}");
}

#[tokio::test]
async fn a_killed_member_is_unhealthy_and_replaced_only_while_quorum_allows() {
    let mut harness = Harness::start(3).await;
    harness.processes.member("demo-2").kill().await;

    let view = wait::until(
        "peers to report member 2 down",
        Duration::from_secs(20),
        || async {
            let view = harness.observe().await;
            let health = view
                .members
                .iter()
                .find(|m| m.ordinal == 2)
                .map(|m| m.observation.health.clone());
            match health {
                Some(Health::Unhealthy(_)) => Ok(view),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // Not before the grace period...
    let early = decide(&harness.facts(&view, 3));
    assert!(!matches!(early, Decision::Act(_)), "{early:?}");
    // ...then replaced: two healthy members of three keep quorum through it.
    harness.unhealthy_for.insert(2, Duration::from_secs(600));
    let decision = decide(&harness.facts(&view, 3));
    let replace_step = match decision {
        Decision::Act(step @ Step::Replace { ordinal: 2, .. }) => step,
        other => panic!("expected Replace of member 2, got {other:?}"),
    };
    // But not if another member is also down: that would leave one of three.
    harness.processes.member("demo-1").kill().await;
    let both_down = wait::until(
        "peers to report member 1 down",
        Duration::from_secs(20),
        || async {
            let view = harness.observe().await;
            let healthy = view
                .members
                .iter()
                .filter(|m| m.observation.health.is_healthy())
                .count();
            if healthy <= 1 {
                Ok(view)
            } else {
                Err(format!("{healthy} healthy"))
            }
        },
    )
    .await;
    harness.unhealthy_for.insert(1, Duration::from_secs(600));
    let refused = decide(&harness.facts(&both_down, 3));
    assert!(matches!(refused, Decision::Wait(_)), "{refused:?}");
    // Once the survivor has given up its leader, and has followed none for a while (as status
    // records), the quorum is reported lost, naming who answers and whose log reaches furthest;
    // still nothing is changed.
    harness.unhealthy_for.insert(0, Duration::from_secs(60));
    let lost = wait::until("the quorum reported lost", Duration::from_secs(20), || async {
        let view = harness.observe().await;
        match decide(&harness.facts(&view, 3)) {
            Decision::Wait(wait) if wait.reason == "QuorumLost" => Ok(wait.message),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    for said in [
        "voting members [1, 2] do not answer",
        "members [0] have followed no leader",
        "member 0 holds the log that reaches furthest",
    ] {
        assert!(lost.contains(said), "{said}: {lost}");
    }

    // Bring member 1 back; the replacement of member 2 goes through and etcd drops it.
    let initial = format!(
        "demo-0={},demo-1={},demo-2={}",
        harness.processes.peer_url(0),
        harness.processes.peer_url(1),
        harness.processes.peer_url(2)
    );
    harness.processes.spawn("demo-1", 1, &initial, "existing").await;
    harness.processes.wait_healthy(1).await;
    harness.unhealthy_for.remove(&1);
    let view = wait::until(
        "member 1 healthy, member 2 still down",
        Duration::from_secs(20),
        || async {
            let view = harness.observe().await;
            let healthy = view
                .members
                .iter()
                .filter(|m| m.observation.health.is_healthy())
                .count();
            let failed = view
                .members
                .iter()
                .any(|m| m.ordinal == 2 && matches!(m.observation.health, Health::Unhealthy(_)));
            if healthy == 2 && failed {
                Ok(view)
            } else {
                Err(format!("{:?}", view.members))
            }
        },
    )
    .await;
    assert_eq!(
        decide(&harness.facts(&view, 3)),
        Decision::Act(replace_step.clone())
    );
    harness.take(&view, &replace_step).await;
    let after = harness.observe().await;
    assert_eq!(
        after.membership.unwrap().len(),
        2,
        "the failed member was removed"
    );
}
