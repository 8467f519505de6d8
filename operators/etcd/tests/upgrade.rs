//! A rolling version upgrade, end to end: the whole operator against the real local control
//! plane, and real etcd processes of two versions. `LocalMembers` starts each member pod's
//! process with the binary of the pod's `etcd.quorum.dev/version` label, so the operator
//! deleting a pod (the StatefulSet is `OnDelete`) really restarts that member on the new
//! version, from the same data directory.
//!
//! A cluster formed at the previous minor (`ETCD_PREVIOUS_VERSION`) has its `spec.version`
//! changed to the pinned one (`ETCD_VERSION`). While it rolls, the test watches every status
//! the operator writes and polls the pods, and checks `docs/etcd.md`'s rules: one member at a
//! time (never two members' pods being replaced at once, never two members not Healthy), the
//! non-leaders first, and the leader last, after leadership was handed to an upgraded member.
//! At the end every member runs the new version and every key is still there.

use crate::support;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use etcd_operator::{
    crd::{EtcdBackup, EtcdCluster, EtcdClusterSpec, EtcdClusterStatus, EtcdStorage},
    reconcile::MemberAddresses,
};
use futures::StreamExt;
use k8s_openapi::{
    api::core::v1::{Event, Pod},
    apimachinery::pkg::api::resource::Quantity,
};
use kube::{
    Api, CustomResourceExt, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use quorum_core::naming::loopback_ip;
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd},
    local_members::{EtcdLauncher, LocalMembers},
    tools::{etcd_binary, etcd_binary_for, pinned_version},
    wait,
};
use tokio_util::sync::CancellationToken;

const CLUSTER: &str = "main";
const MEMBERS: usize = 3;
const KEYS: usize = 100;

/// A pinned version as `spec.version` takes it (`v3.6.16` -> `3.6.16`).
fn bare(variable: &str) -> String {
    pinned_version(variable).trim_start_matches('v').to_string()
}

fn spec(replicas: i32, version: &str) -> EtcdClusterSpec {
    EtcdClusterSpec {
        replicas,
        version: version.to_string(),
        image: None,
        storage: EtcdStorage {
            size: Quantity("1Gi".into()),
            storage_class_name: None,
        },
        resources: None,
        pod_template: None,
        tls: None,
        backup: None,
        restore_from: None,
    }
}

fn member(ordinal: usize) -> String {
    format!("{CLUSTER}-{ordinal}")
}

fn ordinal_of(name: &str) -> Option<usize> {
    name.strip_prefix(CLUSTER)?.strip_prefix('-')?.parse().ok()
}

fn client_url(namespace: &str, ordinal: usize) -> String {
    format!("http://{}:2379", loopback_ip(namespace, CLUSTER, ordinal))
}

/// What one member says about itself, asked directly (no load balancing).
#[derive(Clone, Debug, PartialEq, Eq)]
struct SelfReport {
    version: String,
    member_id: u64,
    leader_id: u64,
}

async fn ask(namespace: &str, ordinal: usize) -> Result<SelfReport, String> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(1));
    let mut client = etcd_client::Client::connect([client_url(namespace, ordinal)], Some(options))
        .await
        .map_err(|e| e.to_string())?;
    let status = client.status().await.map_err(|e| e.to_string())?;
    Ok(SelfReport {
        version: status.version().to_string(),
        member_id: status.header().map_or(0, |h| h.member_id()),
        leader_id: status.leader(),
    })
}

fn condition_is(status: &EtcdClusterStatus, type_: &str, value: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == value)
}

fn progressing_reason(status: &EtcdClusterStatus) -> Option<&str> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .map(|c| c.reason.as_str())
}

fn not_healthy(status: &EtcdClusterStatus) -> Vec<String> {
    status
        .members
        .iter()
        .filter(|m| m.health != "Healthy")
        .map(|m| format!("{} {}", m.name, m.health))
        .collect()
}

fn upgrading(status: &EtcdClusterStatus) -> Option<usize> {
    let step = status.in_flight.as_ref()?;
    (step.action == "Upgrade").then_some(step.ordinal as usize)
}

/// A compact line for failure messages and the timeline.
fn brief(status: &EtcdClusterStatus) -> String {
    let members: Vec<String> = status
        .members
        .iter()
        .map(|m| format!("{}:{}{}", m.name, m.health, if m.leader { "*" } else { "" }))
        .collect();
    format!(
        "leader={:?} version={:?} inFlight={:?} progressing={:?} members=[{}]",
        status.leader,
        status.version,
        status
            .in_flight
            .as_ref()
            .map(|s| format!("{}({})", s.action, s.ordinal)),
        progressing_reason(status),
        members.join(" ")
    )
}

/// Waits until the cluster is Ready and settled with every member Healthy, and every member
/// (asked directly), `status.version` and every pod's version label at `version`.
async fn settled_at(
    clusters: &Api<EtcdCluster>,
    pods: &Api<Pod>,
    namespace: &str,
    version: &str,
    timeout: Duration,
) -> EtcdClusterStatus {
    wait::until(
        &format!("{MEMBERS} healthy members, Ready and settled, all at {version}"),
        timeout,
        || async {
            let cluster = clusters.get(CLUSTER).await.map_err(|e| e.to_string())?;
            let status = cluster.status.clone().unwrap_or_default();
            let healthy = status
                .members
                .iter()
                .filter(|m| m.health == "Healthy" && !m.learner)
                .count();
            let settled = healthy == MEMBERS
                && status.members.len() == MEMBERS
                && condition_is(&status, "Ready", "True")
                && condition_is(&status, "Progressing", "False")
                && status.replicas == MEMBERS as i32
                && status.observed_generation == cluster.metadata.generation
                && status.version.as_deref() == Some(version);
            if !settled {
                return Err(brief(&status));
            }
            for ordinal in 0..MEMBERS {
                let report = ask(namespace, ordinal).await?;
                if report.version != version {
                    return Err(format!("{} runs {}", member(ordinal), report.version));
                }
                let pod = pods.get(&member(ordinal)).await.map_err(|e| e.to_string())?;
                let label = pod.labels().get("etcd.quorum.dev/version").cloned();
                if label.as_deref() != Some(version) {
                    return Err(format!("pod {} is labelled {label:?}", member(ordinal)));
                }
            }
            Ok(status)
        },
    )
    .await
}

/// Every member of `namespace` runs as a process this test started (with this test's binaries),
/// not one a `LocalMembers` of another test process started first.
async fn assert_own_members(members: &LocalMembers, namespace: &str) {
    let running = members.running().await;
    let missing: Vec<String> = (0..MEMBERS)
        .map(|o| format!("{namespace}/{}", member(o)))
        .filter(|m| !running.contains(m))
        .collect();
    assert!(
        missing.is_empty(),
        "{missing:?} are not run by this test's LocalMembers (another process's LocalMembers, \
         backing every namespace, started them first?); running here: {running:?}"
    );
}

/// One member's pod as a poll saw it.
#[derive(Clone, Debug)]
struct PodSeen {
    uid: String,
    terminating: bool,
    version: Option<String>,
}

/// One poll: the member pods and the cluster's status, at the same moment (roughly).
#[derive(Clone, Debug)]
struct Sample {
    at: Duration,
    pods: BTreeMap<usize, PodSeen>,
    status: EtcdClusterStatus,
}

async fn sample(
    clusters: &Api<EtcdCluster>,
    pods: &Api<Pod>,
    selector: &str,
    start: Instant,
) -> Option<Sample> {
    let listed = pods.list(&ListParams::default().labels(selector)).await.ok()?;
    let status = clusters.get(CLUSTER).await.ok()?.status.unwrap_or_default();
    let pods = listed
        .items
        .iter()
        .filter_map(|pod| {
            Some((
                ordinal_of(&pod.name_any())?,
                PodSeen {
                    uid: pod.uid().unwrap_or_default(),
                    terminating: pod.metadata.deletion_timestamp.is_some(),
                    version: pod.labels().get("etcd.quorum.dev/version").cloned(),
                },
            ))
        })
        .collect();
    Some(Sample {
        at: start.elapsed(),
        pods,
        status,
    })
}

/// When a member's replacement began and ended, as sample indices.
#[derive(Clone, Debug)]
struct Window {
    ordinal: usize,
    start: usize,
    /// `None`: not back by the last sample.
    end: Option<usize>,
}

/// A member's replacement begins at the first sample where its original pod is gone or
/// terminating, and ends at the first later sample where its new pod exists, the operator
/// reports the member Healthy and no longer records its upgrade as in flight (it clears the
/// record only once the member is back, healthy, on the new version).
fn replacement_windows(samples: &[Sample], original: &BTreeMap<usize, String>) -> Vec<Window> {
    let mut windows: Vec<Window> = original
        .iter()
        .filter_map(|(&ordinal, uid)| {
            let replaced = |s: &Sample| {
                s.pods
                    .get(&ordinal)
                    .is_none_or(|p| p.terminating || &p.uid != uid)
            };
            let start = samples.iter().position(replaced)?;
            let end = samples[start..]
                .iter()
                .position(|s| {
                    let back = s
                        .pods
                        .get(&ordinal)
                        .is_some_and(|p| !p.terminating && &p.uid != uid);
                    let healthy = s
                        .status
                        .members
                        .iter()
                        .any(|m| m.name == member(ordinal) && m.health == "Healthy");
                    back && healthy && upgrading(&s.status) != Some(ordinal)
                })
                .map(|i| start + i);
            Some(Window { ordinal, start, end })
        })
        .collect();
    windows.sort_by_key(|w| w.start);
    windows
}

#[tokio::test]
async fn a_rolling_upgrade_restarts_one_member_at_a_time_the_leader_last_keeping_every_key() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let previous = bare("ETCD_PREVIOUS_VERSION");
    let current = bare("ETCD_VERSION");
    assert_ne!(previous, current);
    let client = admin_client().await;
    // The operator runs the EtcdBackup controller too; without its CRD that controller's
    // store never becomes ready and kube-runtime's graceful shutdown waits for it forever.
    install_crd(&client, &EtcdCluster::crd()).await;
    install_crd(&client, &EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-upgrade").await;
    let ns = namespace.name().to_string();
    let state = std::env::temp_dir().join(format!("quorum-local-members-{ns}"));
    let members = LocalMembers::start(
        client.clone(),
        EtcdLauncher::new(BTreeMap::from([
            (previous.clone(), etcd_binary_for("ETCD_PREVIOUS_VERSION")),
            (current.clone(), etcd_binary()),
        ])),
        state.clone(),
        Some(ns.clone()),
    );
    let operator = support::operator::start(client.clone(), &ns, MemberAddresses::Loopback);
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // A cluster formed at the previous version.
    let began = Instant::now();
    clusters
        .create(
            &PostParams::default(),
            &EtcdCluster::new(CLUSTER, spec(MEMBERS as i32, &previous)),
        )
        .await
        .unwrap();
    let formed = settled_at(&clusters, &pods, &ns, &previous, Duration::from_secs(120)).await;
    let formed_in = began.elapsed();
    assert_own_members(&members, &ns).await;
    let leader_at_start = formed.leader.clone().expect("a leader is reported");
    let reports: Vec<SelfReport> = {
        let mut reports = Vec::new();
        for ordinal in 0..MEMBERS {
            reports.push(ask(&ns, ordinal).await.unwrap());
        }
        reports
    };
    let leader_id = reports[0].leader_id;
    assert!(
        reports.iter().all(|r| r.leader_id == leader_id),
        "the members agree on the leader: {reports:?}"
    );
    assert_eq!(
        reports.iter().position(|r| r.member_id == leader_id).map(member),
        Some(leader_at_start.clone()),
        "status.leader is the member etcd says leads"
    );

    let urls: Vec<String> = (0..MEMBERS).map(|o| client_url(&ns, o)).collect();
    let mut kv = etcd_client::Client::connect(urls.clone(), None).await.unwrap();
    for i in 0..KEYS {
        kv.put(format!("k{i:03}"), format!("v{i}"), None).await.unwrap();
    }

    let original: BTreeMap<usize, String> = pods
        .list(&ListParams::default().labels(&formed.selector))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| Some((ordinal_of(&p.name_any())?, p.uid()?)))
        .collect();
    assert_eq!(original.len(), MEMBERS, "{original:?}");

    // Every status the operator writes from here on, and a poll of pods and status.
    let start = Instant::now();
    let stop = CancellationToken::new();
    let statuses: Arc<Mutex<Vec<(Duration, EtcdClusterStatus)>>> = Arc::default();
    let watching = {
        let stream = watcher(
            clusters.clone(),
            watcher::Config::default().fields(&format!("metadata.name={CLUSTER}")),
        )
        .applied_objects();
        let statuses = statuses.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    next = stream.next() => match next {
                        Some(Ok(cluster)) => {
                            let status = cluster.status.unwrap_or_default();
                            let mut statuses = statuses.lock().unwrap();
                            if statuses.last().is_none_or(|(_, last)| *last != status) {
                                statuses.push((start.elapsed(), status));
                            }
                        }
                        Some(Err(error)) => tracing::warn!(%error, "watching the EtcdCluster"),
                        None => break,
                    },
                }
            }
        })
    };
    let polling = {
        let clusters = clusters.clone();
        let pods = pods.clone();
        let selector = formed.selector.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while !stop.is_cancelled() {
                if let Some(sample) = sample(&clusters, &pods, &selector, start).await {
                    samples.push(sample);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            samples
        })
    };
    // Let the watch list the object before the change.
    wait::until(
        "the watch to see the cluster",
        Duration::from_secs(10),
        || async {
            if statuses.lock().unwrap().is_empty() {
                Err("nothing yet".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;

    // The upgrade.
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"version": current}})),
        )
        .await
        .unwrap();
    let upgraded = settled_at(&clusters, &pods, &ns, &current, Duration::from_secs(300)).await;
    let upgraded_in = start.elapsed();
    // A last look, then stop watching.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let samples = polling.await.unwrap();
    watching.await.unwrap();
    let statuses = statuses.lock().unwrap().clone();

    let timeline = || -> String {
        let mut lines: Vec<String> = statuses
            .iter()
            .map(|(at, s)| format!("{:>7.3}s status {}", at.as_secs_f64(), brief(s)))
            .collect();
        let mut previous_pods = String::new();
        for s in &samples {
            let pods: Vec<String> = s
                .pods
                .iter()
                .map(|(o, p)| {
                    format!(
                        "{}:{}{}:{}",
                        member(*o),
                        &p.uid[..8.min(p.uid.len())],
                        if p.terminating { "(terminating)" } else { "" },
                        p.version.as_deref().unwrap_or("?")
                    )
                })
                .collect();
            let pods = pods.join(" ");
            if pods != previous_pods {
                lines.push(format!("{:>7.3}s pods   {pods}", s.at.as_secs_f64()));
                previous_pods = pods;
            }
        }
        lines.sort();
        lines.join("\n")
    };

    // (a) One member at a time: never two members' pods being replaced at once ...
    let windows = replacement_windows(&samples, &original);
    assert_eq!(
        windows.len(),
        MEMBERS,
        "every member's pod was replaced: {windows:?}\n{}",
        timeline()
    );
    for (index, s) in samples.iter().enumerate() {
        let open: Vec<usize> = windows
            .iter()
            .filter(|w| w.start <= index && w.end.is_none_or(|end| index < end))
            .map(|w| w.ordinal)
            .collect();
        assert!(
            open.len() <= 1,
            "members {open:?} were being replaced at once at {:?}: {windows:?}\n{}",
            s.at,
            timeline()
        );
    }
    // ... each exactly once, onto the new version ...
    for ordinal in 0..MEMBERS {
        let uids: BTreeSet<&str> = samples
            .iter()
            .filter_map(|s| s.pods.get(&ordinal).map(|p| p.uid.as_str()))
            .collect();
        assert_eq!(
            uids.len(),
            2,
            "{} had pods {uids:?}: restarted exactly once\n{}",
            member(ordinal),
            timeline()
        );
        let last = samples
            .last()
            .and_then(|s| s.pods.get(&ordinal))
            .expect("a pod at the end");
        assert_eq!(last.version.as_deref(), Some(current.as_str()));
    }
    // ... and never more than one member not Healthy, in every status the operator wrote and
    // in every poll.
    for (at, status) in &statuses {
        let troubled = not_healthy(status);
        assert!(
            troubled.len() <= 1,
            "{troubled:?} at once at {at:?}\n{}",
            timeline()
        );
    }
    for s in &samples {
        let troubled = not_healthy(&s.status);
        assert!(
            troubled.len() <= 1,
            "{troubled:?} at once at {:?}\n{}",
            s.at,
            timeline()
        );
    }

    // (b) Non-leaders first, the leader last after handing leadership over.
    let order: Vec<usize> = windows.iter().map(|w| w.ordinal).collect();
    let last = *order.last().unwrap();
    for &ordinal in &order {
        // The status recording the upgrade is written before the pod is deleted, from the
        // same observation the decision was made on: the leader then was someone else.
        let (at, recorded) = statuses
            .iter()
            .find(|(_, s)| upgrading(s) == Some(ordinal))
            .unwrap_or_else(|| {
                panic!(
                    "no status recorded the upgrade of {}\n{}",
                    member(ordinal),
                    timeline()
                )
            });
        assert_ne!(
            recorded.leader.as_deref(),
            Some(member(ordinal).as_str()),
            "{} was taken down while it led (status at {at:?})\n{}",
            member(ordinal),
            timeline()
        );
    }
    let moving: Vec<&(Duration, EtcdClusterStatus)> = statuses
        .iter()
        .filter(|(_, s)| progressing_reason(s) == Some("MovingLeader"))
        .collect();
    let (moved_at, before_move) = moving
        .first()
        .copied()
        .unwrap_or_else(|| panic!("no status shows leadership being handed over\n{}", timeline()));
    assert_eq!(
        before_move.leader.as_deref(),
        Some(member(last).as_str()),
        "leadership was handed over by the member upgraded last (status at {moved_at:?})\n{}",
        timeline()
    );
    let leaders_before_move: BTreeSet<&str> = statuses
        .iter()
        .take_while(|(at, _)| at < moved_at)
        .filter_map(|(_, s)| s.leader.as_deref())
        .collect();
    if leaders_before_move.len() == 1 {
        assert_eq!(
            member(last),
            leader_at_start,
            "the leader at the start is upgraded last\n{}",
            timeline()
        );
    } else {
        eprintln!(
            "leadership changed on its own before the hand-over: {leaders_before_move:?}; the leader when only \
             it remained outdated ({}) was upgraded last",
            member(last)
        );
    }
    // Leadership ends with an upgraded member that was not restarted after the hand-over.
    let final_leader = upgraded.leader.clone().expect("a leader at the end");
    assert!(order.iter().any(|&o| member(o) == final_leader));

    // (c) Ready, settled, every member on the new version (checked by `settled_at`).
    assert_eq!(upgraded.version.as_deref(), Some(current.as_str()));
    assert!(condition_is(&upgraded, "Ready", "True"));
    assert!(upgraded.in_flight.is_none(), "{:?}", upgraded.in_flight);
    assert_own_members(&members, &ns).await;

    // (d) Every key, with its value, through each member.
    for url in &urls {
        let mut kv = etcd_client::Client::connect([url.clone()], None).await.unwrap();
        let got = kv
            .get("k", Some(etcd_client::GetOptions::new().with_prefix()))
            .await
            .unwrap();
        let found: BTreeMap<String, String> = got
            .kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key_str().unwrap().to_string(),
                    kv.value_str().unwrap().to_string(),
                )
            })
            .collect();
        let expected: BTreeMap<String, String> =
            (0..KEYS).map(|i| (format!("k{i:03}"), format!("v{i}"))).collect();
        assert_eq!(
            found, expected,
            "every key survived the upgrade, read through {url}"
        );
    }

    // The steps are visible as events.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let events = events.list(&ListParams::default()).await.unwrap().items;
    let reasons: Vec<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    for expected in ["UpgradingMember", "MovingLeader"] {
        assert!(reasons.contains(&expected), "no {expected} event in {reasons:?}");
    }
    let moved_from = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("MovingLeader"))
        .filter_map(|e| e.message.as_deref())
        .collect::<Vec<_>>();
    assert!(
        moved_from
            .iter()
            .all(|m| m.contains(&format!("from member {last} "))),
        "hand-over events {moved_from:?} name member {last}"
    );

    let replaced: Vec<String> = windows
        .iter()
        .map(|w| {
            let took = w
                .end
                .map(|end| samples[end].at.saturating_sub(samples[w.start].at));
            format!("{} in {took:?}", member(w.ordinal))
        })
        .collect();
    eprintln!(
        "formed at {previous} in {formed_in:?}; upgraded to {current} in {upgraded_in:?}; leader at start \
         {leader_at_start}, at end {final_leader}; replaced in order: {}\n{}",
        replaced.join(", "),
        timeline()
    );

    tokio::time::timeout(Duration::from_secs(60), operator.stop())
        .await
        .expect("the operator shuts down gracefully within a minute");
    drop(members);
    namespace.delete().await;
}
