//! What a user runs, on the real node: the operator installed by its chart runs as a container
//! of its image under the chart's restricted security context, and the members are real etcd
//! containers from the StatefulSet the operator builds, found through cluster DNS, probed by the
//! kubelet, reached by clients through the client Service and kept on volumes from the dynamic
//! provisioner. Nothing here launches a database process itself.

#[allow(dead_code)] // each test binary uses part of the support
mod support;

use std::time::Duration;

use etcd_client::{Client as EtcdClient, ConnectOptions};
use etcd_operator::crd::{EtcdCluster, EtcdTls};
use k8s_openapi::{
    ByteString,
    api::{apps::v1::StatefulSet, core::v1::Secret},
};
use kube::{
    Api, Client,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use quorum_core::{
    crd::{RepairPhase, RepairRecord},
    recovery::{RECOVER_ANNOTATION, RecoveryPhase, RecoveryRecord},
};
use quorum_e2e::{
    history::{History, Writer},
    real_node::{self, STORAGE_CLASS},
    real_pods::{self, OnRealNode},
    wait,
};

const CHART: &str = "quorum-etcd-operator";
const CLUSTER: &str = "demo";

/// A cluster of `replicas` members placed on the real node, on local-path volumes.
fn real_cluster(replicas: i32, tls: Option<EtcdTls>) -> EtcdCluster {
    let mut spec = support::cluster_spec(replicas, None);
    spec.storage.storage_class_name = Some(STORAGE_CLASS.into());
    spec.pod_template = Some(real_node::pod_overrides());
    spec.tls = tls;
    EtcdCluster::new(CLUSTER, spec)
}

const MEMBERS: &str = "app.kubernetes.io/instance=demo,app.kubernetes.io/component=member";

/// A client of the cluster through its client Service's cluster IP, as an application in the
/// cluster reaches it (retried while kube-proxy catches up with the endpoints).
async fn service_client(admin: &Client, namespace: &str) -> EtcdClient {
    let ip = real_node::cluster_ip(admin, namespace, CLUSTER).await;
    let endpoint = format!("http://{ip}:2379");
    wait::until(
        &format!("a client through the Service at {endpoint}"),
        Duration::from_secs(30),
        || async {
            let options = ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(2))
                .with_timeout(Duration::from_secs(5));
            let mut client = EtcdClient::connect([endpoint.as_str()], Some(options))
                .await
                .map_err(|error| error.to_string())?;
            client.status().await.map_err(|error| error.to_string())?;
            Ok(client)
        },
    )
    .await
}

/// The etcd operator installed by its chart in a new namespace, on the real node.
async fn install(prefix: &str) -> OnRealNode {
    OnRealNode::install(prefix, CHART, &["admissionPolicy=false"]).await
}

/// As [`install`], with backups allowed to the plain-HTTP S3 store the tests deploy.
async fn install_with_backups(prefix: &str) -> OnRealNode {
    OnRealNode::install(
        prefix,
        CHART,
        &["admissionPolicy=false", "backups.allowHttp=true"],
    )
    .await
}

fn clusters(setup: &OnRealNode) -> Api<EtcdCluster> {
    Api::namespaced(setup.admin.clone(), &setup.ns)
}

/// Creates `cluster` and waits until the operator reports it Ready with 3 members and their
/// pods are Ready by their own probes.
async fn create_ready(setup: &OnRealNode, cluster: &EtcdCluster) -> etcd_operator::crd::EtcdClusterStatus {
    clusters(setup)
        .create(&PostParams::default(), cluster)
        .await
        .unwrap();
    let status = support::ready_with(&clusters(setup), CLUSTER, 3, Duration::from_secs(240)).await;
    setup.members_ready(MEMBERS, 3, Duration::from_secs(120)).await;
    status
}

#[tokio::test]
async fn the_chart_installed_operator_forms_a_cluster_of_real_members() {
    let mut setup = install("real-etcd").await;
    let (admin, ns) = (setup.admin.clone(), setup.ns.clone());
    let status = create_ready(&setup, &real_cluster(3, None)).await;
    assert!(status.leader.is_some(), "{status:?}");

    // The members' volumes come from the provisioner, bound to the real node.
    let statefulset = Api::<StatefulSet>::namespaced(admin.clone(), &ns)
        .get(CLUSTER)
        .await
        .unwrap();
    let claim = &statefulset.spec.unwrap().volume_claim_templates.unwrap()[0];
    assert_eq!(
        claim.spec.as_ref().unwrap().storage_class_name.as_deref(),
        Some(STORAGE_CLASS)
    );

    // An application's write and read through the client Service.
    let mut client = service_client(&admin, &ns).await;
    client
        .put("greeting", "hello from a real pod", None)
        .await
        .unwrap();
    let read = client.get("greeting", None).await.unwrap();
    assert_eq!(read.kvs()[0].value_str().unwrap(), "hello from a real pod");

    // What a user does by hand works: exec into a member, read its log.
    let member = format!("{CLUSTER}-0");
    let health = real_node::exec(&ns, &member, "etcd", &["etcdctl", "endpoint", "health"]);
    assert!(health.contains("is healthy"), "{health}");
    let got = real_node::exec(
        &ns,
        &member,
        "etcd",
        &["etcdctl", "get", "greeting", "--print-value-only"],
    );
    assert_eq!(got.trim(), "hello from a real pod");
    let log = real_node::logs(&ns, &member, "etcd");
    assert!(log.contains("ready to serve client requests"), "{log}");

    // A healthy cluster keeps no admin circuit open: circuits tripped while members started
    // close once they answer, and nothing is probed that cannot answer.
    wait::until(
        "no admin circuit open for the healthy cluster",
        Duration::from_secs(60),
        || async {
            match setup.operator_metric("quorum_admin_circuits_open").await? {
                0.0 => Ok(()),
                open => Err(format!("{open} open")),
            }
        },
    )
    .await;

    // The operator container passes its own probes under the chart's security context; removing
    // the operator leaves the databases running.
    setup.uninstall_operator().await;
    setup.members_ready(MEMBERS, 3, Duration::from_secs(30)).await;
    let read = client.get("greeting", None).await.unwrap();
    assert_eq!(read.kvs()[0].value_str().unwrap(), "hello from a real pod");

    setup.remove().await;
}

/// A certificate naming every member's DNS name, the client Service and loopback.
fn issue_for_members(namespace: &str) -> etcd_operator::admin::TlsMaterial {
    let mut names: Vec<String> = (0..7)
        .map(|ordinal| format!("{CLUSTER}-{ordinal}.{CLUSTER}-peer.{namespace}.svc.cluster.local"))
        .collect();
    names.extend([
        format!("{CLUSTER}.{namespace}.svc"),
        format!("{CLUSTER}.{namespace}.svc.cluster.local"),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
    ]);
    support::issue_certificate(names, CLUSTER)
}

fn scheme(tls: bool) -> &'static str {
    if tls { "https://" } else { "http://" }
}

async fn create_tls_secret(admin: &Client, namespace: &str, name: &str) {
    let material = issue_for_members(namespace);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [
                ("ca.crt", material.ca_pem),
                ("tls.crt", material.cert_pem),
                ("tls.key", material.key_pem),
            ]
            .into_iter()
            .map(|(key, value)| (key.to_string(), ByteString(value)))
            .collect(),
        ),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// Client TLS (with client-certificate authentication), peer TLS, and both, from formation: the
/// members' own probes pass in each, the operator sees every member through its TLS clients, a
/// client holding the certificate writes and reads inside a member, and a backup is stored by
/// its Job, whose process reaches the members with the cluster's client material as the
/// operator does (before, a Job never read it, so every backup of a cluster with client TLS
/// failed).
#[tokio::test]
async fn members_with_client_peer_or_both_tls_form_pass_their_probes_and_are_backed_up() {
    use etcd_operator::crd::EtcdBackup;
    for (label, client_tls, peer_tls) in [
        ("client", true, false),
        ("peer", false, true),
        ("both", true, true),
    ] {
        let setup = install_with_backups(&format!("real-tls-{label}")).await;
        let ns = setup.ns.clone();
        for (wanted, secret) in [(client_tls, "client-tls"), (peer_tls, "peer-tls")] {
            if wanted {
                create_tls_secret(&setup.admin, &ns, secret).await;
            }
        }
        let tls = EtcdTls {
            client_secret_name: client_tls.then(|| "client-tls".to_string()),
            peer_secret_name: peer_tls.then(|| "peer-tls".to_string()),
        };
        let status = create_ready(&setup, &real_cluster(3, Some(tls))).await;
        assert!(status.leader.is_some(), "{label}: {status:?}");

        let member = format!("{CLUSTER}-0");
        let mut etcdctl = vec!["etcdctl"];
        if client_tls {
            etcdctl.extend([
                "--endpoints=https://127.0.0.1:2379",
                "--cacert=/etc/etcd/tls/client/ca.crt",
                "--cert=/etc/etcd/tls/client/tls.crt",
                "--key=/etc/etcd/tls/client/tls.key",
            ]);
        }
        let put = [etcdctl.clone(), vec!["put", "secured", label]].concat();
        real_node::exec(&ns, &member, "etcd", &put);
        let get = [etcdctl.clone(), vec!["get", "secured", "--print-value-only"]].concat();
        assert_eq!(real_node::exec(&ns, &member, "etcd", &get).trim(), label);
        let members = [etcdctl, vec!["member", "list"]].concat();
        let listed = real_node::exec(&ns, &member, "etcd", &members);
        // `ID, status, name, peer URLs, client URLs, learner`: every member's advertised peer URL
        // has the scheme of the peer TLS setting, and its client URL that of the client's.
        let (peer_scheme, client_scheme) = (scheme(peer_tls), scheme(client_tls));
        let rows: Vec<Vec<&str>> = listed.lines().map(|line| line.split(", ").collect()).collect();
        assert_eq!(rows.len(), 3, "{label}: {listed}");
        for row in rows {
            assert!(row[3].starts_with(peer_scheme), "{label}: {listed}");
            assert!(row[4].starts_with(client_scheme), "{label}: {listed}");
        }

        let store = setup.deploy_s3_store().await;
        store.back_up_once::<EtcdBackup>(&setup, CLUSTER, "etcd").await;
        setup.remove().await;
    }
}

/// A writer through the client Service: one put per interval, acknowledged when etcd answered.
fn start_writer(client: &EtcdClient) -> Writer {
    let client = client.clone();
    Writer::start("history", Duration::from_millis(200), 3_000, move |key, value| {
        let mut client = client.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(5), client.put(key, value, None))
                .await
                .is_ok_and(|put| put.is_ok())
        }
    })
}

/// Reads back every key the history wrote (linearizable reads through the Service) and checks
/// that no acknowledged write was lost; returns how many were checked. A read that fails is
/// tried again, bounded, as a client would: the Service's connection may land on a member that
/// is restarting while the others keep the cluster Ready; only what is read is judged.
async fn check_history(client: &mut EtcdClient, history: &History) -> usize {
    let mut held = std::collections::BTreeMap::new();
    for operation in &history.operations {
        let read = wait::until(
            &format!("a read of {} through the Service", operation.key),
            Duration::from_secs(60),
            || {
                let mut client = client.clone();
                let key = operation.key.clone();
                async move { client.get(key, None).await.map_err(|error| error.to_string()) }
            },
        )
        .await;
        held.insert(
            operation.key.clone(),
            read.kvs().first().map(|kv| kv.value_str().unwrap().to_string()),
        );
    }
    let checked = history
        .check(&held)
        .unwrap_or_else(|violations| panic!("lost or invented writes: {violations:#?}"));
    assert!(checked > 0, "the writer had no write acknowledged");
    checked
}

async fn scale(clusters: &Api<EtcdCluster>, replicas: i32) {
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

/// Scale 3 -> 5 -> 3 -> 5 under a steady writer: the members removed by the scale-down lose their
/// volumes with their pods, so the members added again under the same names start empty and join
/// (an old volume would hold the data directory of a member the cluster removed, which etcd
/// refuses to start from), and no acknowledged write is lost.
#[tokio::test]
async fn members_removed_and_added_again_start_from_empty_volumes() {
    let setup = install("real-scale").await;
    let (admin, ns, clusters) = (&setup.admin, setup.ns.clone(), &clusters(&setup));
    create_ready(&setup, &real_cluster(3, None)).await;
    let mut client = service_client(admin, &ns).await;
    let writer = start_writer(&client);

    let removed_claims = [format!("data-{CLUSTER}-3"), format!("data-{CLUSTER}-4")];
    for (replicas, members) in [(5, 5), (3, 3), (5, 5)] {
        scale(clusters, replicas).await;
        support::ready_with(clusters, CLUSTER, members, Duration::from_secs(300)).await;
        setup
            .members_ready(MEMBERS, members, Duration::from_secs(120))
            .await;
        if members == 3 {
            for claim in &removed_claims {
                setup.claim_deleted(claim, Duration::from_secs(60)).await;
            }
        }
    }
    let listed = real_node::exec(
        &ns,
        &format!("{CLUSTER}-4"),
        "etcd",
        &["etcdctl", "member", "list"],
    );
    assert_eq!(
        listed.lines().filter(|line| line.contains(", started, ")).count(),
        5,
        "{listed}"
    );

    let history = writer.stop().await;
    let checked = check_history(&mut client, &history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");

    setup.remove().await;
}

/// Member names and etcd member ids, as the operator reports them.
async fn member_ids(clusters: &Api<EtcdCluster>) -> Vec<(String, Option<String>)> {
    let status = clusters.get(CLUSTER).await.unwrap().status.unwrap_or_default();
    let mut ids: Vec<_> = status
        .members
        .into_iter()
        .map(|member| (member.name, member.id))
        .collect();
    ids.sort();
    ids
}

/// The etcd process killed inside a member's container: the kubelet restarts it and the member
/// rejoins with its data. Then a member's pod deleted: the StatefulSet recreates it on the same
/// volume and it rejoins. Neither changes the membership: the operator removes, replaces or wipes
/// nothing, and no acknowledged write is lost.
#[tokio::test]
async fn a_killed_member_or_a_deleted_pod_rejoins_with_its_data_and_membership() {
    let setup = install("real-restart").await;
    let (admin, ns, clusters) = (&setup.admin, setup.ns.clone(), &clusters(&setup));
    create_ready(&setup, &real_cluster(3, None)).await;
    let members_before = member_ids(clusters).await;
    assert!(
        members_before.iter().all(|(_, id)| id.is_some()),
        "{members_before:?}"
    );
    let mut client = service_client(admin, &ns).await;
    let writer = start_writer(&client);
    const MEMBERSHIP_STEPS: [&str; 4] = [
        "RemovingMember",
        "ReplacingMember",
        "WipingMember",
        "AddingMember",
    ];
    let steps_before = setup.occurrences(&MEMBERSHIP_STEPS).await;

    // The process dies; the pod, its address and its volume stay.
    let killed = format!("{CLUSTER}-1");
    let volume = setup.claim_uid(&format!("data-{killed}")).await;
    setup
        .kill_and_await_restart(&killed, "etcd", Duration::from_secs(120))
        .await;
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(120)).await;
    assert_eq!(setup.claim_uid(&format!("data-{killed}")).await, volume);

    // The pod goes; the StatefulSet makes a new one on the same claim.
    let deleted = format!("{CLUSTER}-2");
    let volume = setup.claim_uid(&format!("data-{deleted}")).await;
    setup
        .delete_and_await_recreated(&deleted, Duration::from_secs(120))
        .await;
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(120)).await;
    assert_eq!(setup.claim_uid(&format!("data-{deleted}")).await, volume);

    assert_eq!(
        member_ids(clusters).await,
        members_before,
        "the membership changed"
    );
    assert_eq!(
        setup.occurrences(&MEMBERSHIP_STEPS).await,
        steps_before,
        "membership steps taken"
    );

    let history = writer.stop().await;
    let checked = check_history(&mut client, &history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");

    setup.remove().await;
}

/// Every member down at once, twice (every etcd process killed, then every pod deleted), each
/// time back on its volume: the cluster comes back by itself with the same members, the operator
/// removes, replaces or wipes nothing, and no acknowledged write is lost.
#[tokio::test]
async fn a_total_outage_ends_with_the_same_members_and_every_acknowledged_write() {
    let setup = install("real-outage").await;
    let (admin, ns, clusters) = (&setup.admin, setup.ns.clone(), &clusters(&setup));
    create_ready(&setup, &real_cluster(3, None)).await;
    let members_before = member_ids(clusters).await;
    let client = service_client(admin, &ns).await;
    let writer = start_writer(&client);
    const MEMBERSHIP_STEPS: [&str; 4] = [
        "RemovingMember",
        "ReplacingMember",
        "WipingMember",
        "AddingMember",
    ];
    let steps_before = setup.occurrences(&MEMBERSHIP_STEPS).await;
    writer.acknowledged_at_least(10, Duration::from_secs(60)).await;

    setup.total_outage(MEMBERS, Duration::from_secs(180)).await;
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(180)).await;
    writer
        .acknowledged_at_least(writer.acknowledged() + 10, Duration::from_secs(60))
        .await;

    assert_eq!(
        member_ids(clusters).await,
        members_before,
        "the membership changed"
    );
    assert_eq!(
        setup.occurrences(&MEMBERSHIP_STEPS).await,
        steps_before,
        "membership steps taken"
    );
    let history = writer.stop().await;
    let mut client = service_client(admin, &ns).await;
    let checked = check_history(&mut client, &history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// The reason of the cluster's `Progressing` condition and the recovery record, once `until`
/// holds for them.
async fn progress_until(
    clusters: &Api<EtcdCluster>,
    what: &str,
    timeout: Duration,
    until: impl Fn(&str, Option<&RecoveryRecord>) -> bool,
) -> (String, Option<RecoveryRecord>) {
    wait::until(what, timeout, || async {
        let status = clusters
            .get(CLUSTER)
            .await
            .map_err(|error| error.to_string())?
            .status
            .unwrap_or_default();
        let reason = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .map(|c| c.reason.clone())
            .unwrap_or_default();
        if until(&reason, status.recovery.as_ref()) {
            Ok((reason, status.recovery))
        } else {
            Err(format!("{reason} {:?} {:?}", status.recovery, status.in_flight))
        }
    })
    .await
}

/// Two members of three down for good, their pods off the node and their volumes kept: the
/// operator reports the quorum lost and forces nothing by itself. A request naming a member that
/// does not answer is refused and changes nothing. A request naming the survivor recovers from
/// it: the lost members' pods and volumes are deleted, the survivor restarts with
/// `--force-new-cluster` into a cluster of itself under its own member id, then without the flag,
/// and the lost members come back empty under new ids, one at a time. The cluster keeps its name
/// and client Service, and every write acknowledged before the loss is read back through it.
#[tokio::test]
async fn a_quorum_lost_for_good_is_recovered_from_the_named_survivor_on_request() {
    recover_from_the_survivor("real-recover", false).await;
}

/// The same recovery with the operator stopped and started again as soon as each phase is
/// recorded: every phase is resumed where it stood, none is skipped or taken twice out of turn.
#[tokio::test]
async fn a_recovery_resumes_every_recorded_phase_after_an_operator_restart() {
    recover_from_the_survivor("real-recover-restarts", true).await;
}

async fn recover_from_the_survivor(prefix: &str, restart_operator_at_each_step: bool) {
    let setup = install(prefix).await;
    let (admin, ns, clusters) = (&setup.admin, setup.ns.clone(), &clusters(&setup));
    create_ready(&setup, &real_cluster(3, None)).await;
    let client = service_client(admin, &ns).await;
    let writer = start_writer(&client);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    let members_before = member_ids(clusters).await;
    let survivor = format!("{CLUSTER}-2");
    let lost = [format!("{CLUSTER}-0"), format!("{CLUSTER}-1")];

    // The operator stopped while the members go, so it first sees them gone, not going.
    setup.scale_operator(0).await;
    setup.hold_off_the_node(CLUSTER, &lost).await;
    setup.scale_operator(1).await;
    progress_until(
        clusters,
        "the quorum reported lost",
        Duration::from_secs(180),
        |reason, _| reason == "QuorumLost",
    )
    .await;
    let acknowledged_before_recovery = writer.acknowledged();

    real_pods::annotate(clusters, CLUSTER, RECOVER_ANNOTATION, Some(&lost[0])).await;
    let (_, refused) = progress_until(
        clusters,
        "a request naming a silent member refused",
        Duration::from_secs(120),
        |reason, record| {
            reason == "RecoveryRefused" && record.is_some_and(|r| r.message.contains("does not answer"))
        },
    )
    .await;
    assert_eq!(refused.unwrap().phase, RecoveryPhase::Waiting);
    assert_eq!(
        setup.occurrences(&["RecoveringFromMember"]).await,
        Default::default(),
        "a refused request changed something"
    );

    real_pods::annotate(clusters, CLUSTER, RECOVER_ANNOTATION, Some(&survivor)).await;
    const PHASES: [&str; 2] = ["RecoveringFromMember", "RestartingMember"];
    let seen = std::sync::Mutex::new(0);
    let restarts = std::sync::atomic::AtomicUsize::new(0);
    // A wiped member told of the old membership would join it under its old id and serve,
    // empty, in the old cluster: while the recovery runs, none of them may be Ready.
    let joined_the_old_cluster = std::sync::Mutex::new(Vec::new());
    let done = wait::until("the recovery done", Duration::from_secs(600), || async {
        if restart_operator_at_each_step && setup.restart_operator_after_new_steps(&PHASES, &seen).await {
            restarts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let status = clusters
            .get(CLUSTER)
            .await
            .map_err(|error| error.to_string())?
            .status
            .unwrap_or_default();
        if status.in_flight.as_ref().is_some_and(|step| {
            matches!(
                step.action.as_str(),
                "Recover" | "ForceNewCluster" | "EndForceNewCluster"
            )
        }) {
            for pod in setup.pods_of(MEMBERS).await {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if lost.contains(&name) && real_node::pod_ready(&pod) {
                    joined_the_old_cluster.lock().unwrap().push(name);
                }
            }
        }
        match status.recovery {
            Some(record) if record.phase == RecoveryPhase::Done => Ok(record),
            other => Err(format!("{other:?} {:?}", status.in_flight)),
        }
    })
    .await;
    let joined = joined_the_old_cluster.into_inner().unwrap();
    assert!(
        joined.is_empty(),
        "wiped members served during the recovery: {joined:?}"
    );
    let taken = setup.occurrences(&PHASES).await;
    // Wiping the lost members and ending the forced cluster; the survivor restarted with the
    // flag and again without it.
    assert!(
        taken.get("RecoveringFromMember").is_some_and(|n| *n >= 2)
            && taken.get("RestartingMember").is_some_and(|n| *n >= 2),
        "{taken:?}"
    );
    if restart_operator_at_each_step {
        // Each restart follows a step reported since the last one; how many there are depends
        // on how many steps a started operator takes before the test next looks (two wipes
        // may come in one second). Two restarts mid-recovery are two resumptions from the
        // recorded phase.
        let restarts = restarts.into_inner();
        assert!(restarts >= 2, "the operator was restarted {restarts} times");
    }
    assert_eq!(done.replaced.as_deref(), Some("demo-0, demo-1"), "{done:?}");
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(300)).await;
    setup.members_ready(MEMBERS, 3, Duration::from_secs(120)).await;
    // The recovery emptied the lost members' volumes: one deleted again after its member was
    // added back may be under a learner the leader already counts as caught up.
    assert_eq!(
        setup.occurrences(&["WipingMember"]).await,
        Default::default(),
        "a member the recovery emptied was wiped again after it was added back"
    );
    writer
        .acknowledged_at_least(
            acknowledged_before_recovery.max(writer.acknowledged()) + 10,
            Duration::from_secs(120),
        )
        .await;

    let members_after = member_ids(clusters).await;
    for ((name, before), (_, after)) in members_before.iter().zip(&members_after) {
        if *name == survivor {
            assert_eq!(before, after, "the survivor kept its member id");
        } else {
            assert_ne!(before, after, "{name} came back as a new member");
        }
    }
    let forced = setup
        .pods()
        .get(&survivor)
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert!(
        !forced.contains_key(etcd_operator::resources::FORCE_NEW_CLUSTER_LABEL),
        "the survivor still runs with --force-new-cluster"
    );
    let history = writer.stop().await;
    let mut client = service_client(admin, &ns).await;
    let checked = check_history(&mut client, &history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    real_pods::annotate(clusters, CLUSTER, RECOVER_ANNOTATION, None).await;
    setup.remove().await;
}

/// Every member lost for good, their pods off the node with their volumes: the operator reaches
/// none and wipes nothing by itself. A request for the newest backup restores the cluster in
/// place: every member's pod and volume is deleted and the members form the cluster again from
/// the snapshot, under the same name and client Service; every write acknowledged before the
/// backup is read back through it, and a key written after the backup is gone with the volumes.
#[tokio::test]
async fn a_cluster_with_every_member_lost_is_restored_in_place_from_its_newest_backup() {
    use etcd_operator::crd::EtcdBackup;

    let setup = install_with_backups("real-restore-in-place").await;
    let (admin, ns, clusters) = (&setup.admin, setup.ns.clone(), &clusters(&setup));
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, &real_cluster(3, None)).await;
    let service_ip = real_node::cluster_ip(admin, &ns, CLUSTER).await;
    let mut client = service_client(admin, &ns).await;
    let writer = start_writer(&client);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    let history = writer.stop().await;
    store.back_up_once::<EtcdBackup>(&setup, CLUSTER, "etcd").await;
    wait::until(
        "the backup recorded on the cluster",
        Duration::from_secs(60),
        || async {
            let status = clusters
                .get(CLUSTER)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            status.last_backup.ok_or_else(|| "no lastBackup yet".to_string())
        },
    )
    .await;
    client
        .put("after-the-backup", "lost-with-the-volumes", None)
        .await
        .unwrap();
    drop(client);

    let members: Vec<String> = (0..3).map(|ordinal| format!("{CLUSTER}-{ordinal}")).collect();
    setup.scale_operator(0).await;
    setup.hold_off_the_node(CLUSTER, &members).await;
    setup.scale_operator(1).await;
    progress_until(
        clusters,
        "no member reachable",
        Duration::from_secs(180),
        |reason, _| reason == "NoMemberReachable",
    )
    .await;
    assert_eq!(
        setup.occurrences(&["RestoringInPlace", "WipingMember"]).await,
        Default::default(),
        "a member was wiped without a request"
    );

    real_pods::annotate(
        clusters,
        CLUSTER,
        RECOVER_ANNOTATION,
        Some(quorum_core::recovery::NEWEST_BACKUP),
    )
    .await;
    let (_, done) = progress_until(
        clusters,
        "the restore in place done",
        Duration::from_secs(600),
        |_, record| record.is_some_and(|r| r.phase == RecoveryPhase::Done),
    )
    .await;
    let done = done.unwrap();
    assert!(
        done.replaced
            .as_deref()
            .is_some_and(|given_up| given_up.contains(real_pods::ONE_SHOT_BACKUP)),
        "{done:?}"
    );
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(300)).await;
    setup.members_ready(MEMBERS, 3, Duration::from_secs(180)).await;
    assert_eq!(
        real_node::cluster_ip(admin, &ns, CLUSTER).await,
        service_ip,
        "the client Service was replaced"
    );
    let status = clusters.get(CLUSTER).await.unwrap().status.unwrap_or_default();
    assert_eq!(status.restoring_from, None, "{status:?}");

    let mut client = service_client(admin, &ns).await;
    let checked = check_history(&mut client, &history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    let after = client.get("after-the-backup", None).await.unwrap();
    assert!(
        after.kvs().is_empty(),
        "a key written after the backup came back from the deleted volumes: {:?}",
        after.kvs()
    );
    client.put("written-after-restore", "new", None).await.unwrap();
    real_pods::annotate(clusters, CLUSTER, RECOVER_ANNOTATION, None).await;
    setup.remove().await;
}

/// A new pod template (a changed override; an operator release that builds pods differently is
/// the same) under a steady writer through the client Service: the operator restarts the
/// members one at a time, the leader last after handing leadership to a restarted member, the
/// membership unchanged, and no acknowledged write lost.
#[tokio::test]
async fn a_new_pod_template_restarts_one_member_at_a_time_the_leader_last() {
    roll_under_a_writer("real-etcd-roll", false).await;
}

/// The same with the operator's pod stopped and started again after each step it reports (each
/// member's restart, the leadership handed over): a new process finds where the roll stands
/// from the recorded step and the pods, and goes on; each member is still restarted once, one
/// at a time.
#[tokio::test]
async fn a_roll_goes_on_after_an_operator_restart_at_every_step() {
    roll_under_a_writer("real-etcd-roll-restarts", true).await;
}

async fn roll_under_a_writer(prefix: &str, restart_operator_at_each_step: bool) {
    let setup = install(prefix).await;
    let (admin, ns, clusters) = (&setup.admin, setup.ns.clone(), &clusters(&setup));
    let status = create_ready(&setup, &real_cluster(3, None)).await;
    let old_leader = status.leader.clone().expect("a leader");
    let members_before = member_ids(clusters).await;
    let client = service_client(admin, &ns).await;
    let writer = start_writer(&client);
    writer.acknowledged_at_least(10, Duration::from_secs(60)).await;
    let rolled = setup
        .roll_to_a_new_template(
            (clusters, CLUSTER),
            (MEMBERS, 3),
            (
                &["UpgradingMember", "MovingLeader"],
                restart_operator_at_each_step,
            ),
            old_leader,
            || async { clusters.get(CLUSTER).await.ok()?.status?.leader },
        )
        .await;
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(120)).await;
    rolled.assert_one_at_a_time_leader_last(3);
    assert_eq!(
        member_ids(clusters).await,
        members_before,
        "the membership changed"
    );
    writer
        .acknowledged_at_least(writer.acknowledged() + 10, Duration::from_secs(60))
        .await;
    let history = writer.stop().await;
    let mut client = service_client(admin, &ns).await;
    let checked = check_history(&mut client, &history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// Sets (or, with `None`, removes) the repair request.
async fn request_repair(clusters: &Api<EtcdCluster>, member: Option<&str>) {
    real_pods::request_repair(clusters, CLUSTER, member).await;
}

/// The repair record in status once it satisfies `until`.
async fn repair_record(
    clusters: &Api<EtcdCluster>,
    what: &str,
    until: impl Fn(Option<&RepairRecord>) -> bool,
) -> Option<RepairRecord> {
    real_pods::repair_record(
        clusters,
        CLUSTER,
        what,
        |c: &EtcdCluster| c.status.as_ref()?.repair.clone(),
        until,
    )
    .await
}

/// `quorum.dev/repair` naming a member that does not exist is refused, with a record and an
/// event that say why, and changes nothing; naming a follower rebuilds it from its peers on a
/// new, empty volume under a new member id, once, while a writer runs, and no acknowledged
/// write is lost; removing the annotation ends the request.
#[tokio::test]
async fn a_repair_request_rebuilds_the_named_member_on_an_empty_volume() {
    let setup = install("real-repair").await;
    let (admin, ns, clusters) = (&setup.admin, setup.ns.clone(), &clusters(&setup));
    let status = create_ready(&setup, &real_cluster(3, None)).await;
    let leader = status.leader.clone().expect("a leader");
    let target = (0..3)
        .map(|ordinal| format!("{CLUSTER}-{ordinal}"))
        .find(|member| *member != leader)
        .unwrap();
    let members_before = member_ids(clusters).await;
    let client = service_client(admin, &ns).await;
    let writer = start_writer(&client);
    writer.acknowledged_at_least(10, Duration::from_secs(60)).await;

    request_repair(clusters, Some(&format!("{CLUSTER}-7"))).await;
    let refused = repair_record(
        clusters,
        "the request for a member that does not exist refused",
        |r| r.is_some_and(|r| r.message.contains("not a voting member")),
    )
    .await
    .unwrap();
    assert_eq!(refused.phase, RepairPhase::Waiting, "{refused:?}");
    assert!(
        setup
            .occurrences(&["RepairRefused"])
            .await
            .contains_key("RepairRefused")
    );
    assert_eq!(
        member_ids(clusters).await,
        members_before,
        "the membership changed"
    );

    let claim = format!("data-{target}");
    let volume = setup.claim_uid(&claim).await;
    request_repair(clusters, Some(&target)).await;
    let done = repair_record(clusters, &format!("{target} rebuilt"), |r| {
        r.is_some_and(|r| r.member == target && r.phase == RepairPhase::Done)
    })
    .await
    .unwrap();
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(120)).await;
    assert_ne!(setup.claim_uid(&claim).await, volume, "{target} kept its volume");
    let members_after = member_ids(clusters).await;
    let id_of = |members: &[(String, Option<String>)]| {
        members
            .iter()
            .find(|(name, _)| *name == target)
            .and_then(|(_, id)| id.clone())
    };
    assert_ne!(id_of(&members_after), id_of(&members_before), "{members_after:?}");
    assert_eq!(done.replaced, id_of(&members_before), "{done:?}");
    for (name, id) in &members_before {
        if *name != target {
            assert!(
                members_after.contains(&(name.clone(), id.clone())),
                "{members_after:?}"
            );
        }
    }

    // Once done, the standing request is not taken again; removing it ends it.
    let replacements = setup.occurrences(&["ReplacingMember"]).await;
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(60)).await;
    request_repair(clusters, None).await;
    repair_record(clusters, "the record gone with the request", |r| r.is_none()).await;
    assert_eq!(setup.occurrences(&["ReplacingMember"]).await, replacements);
    assert_eq!(member_ids(clusters).await, members_after);

    writer
        .acknowledged_at_least(writer.acknowledged() + 10, Duration::from_secs(60))
        .await;
    let history = writer.stop().await;
    let mut client = service_client(admin, &ns).await;
    let checked = check_history(&mut client, &history).await;
    eprintln!("{checked} acknowledged writes checked, none lost");
    setup.remove().await;
}

/// Deletes the cluster, creates `again` under its name, waits until the operator holds it back
/// naming the deleted cluster's claims and how to remove them, and removes them as a human would.
async fn recreate_after_removing_leftovers(setup: &OnRealNode, again: EtcdCluster) {
    let (ns, clusters) = (setup.ns.clone(), &clusters(setup));
    clusters
        .delete(CLUSTER, &kube::api::DeleteParams::default())
        .await
        .unwrap();
    wait::until("the deleted cluster gone", Duration::from_secs(60), || async {
        match clusters.get_opt(CLUSTER).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    clusters.create(&PostParams::default(), &again).await.unwrap();
    let claims: Vec<String> = (0..3)
        .map(|ordinal| format!("data-{CLUSTER}-{ordinal}"))
        .collect();
    let message = wait::until(
        "the new cluster held back by the deleted one's claims",
        Duration::from_secs(120),
        || async {
            let cluster = clusters.get(CLUSTER).await.map_err(|e| e.to_string())?;
            let conditions = cluster.status.map(|s| s.conditions).unwrap_or_default();
            let degraded = conditions.iter().find(|c| c.type_ == "Degraded");
            match degraded {
                Some(c)
                    if c.status == "True"
                        && c.reason == quorum_core::predecessor::REASON
                        && claims.iter().all(|claim| c.message.contains(claim.as_str())) =>
                {
                    Ok(c.message.clone())
                }
                _ => Err(format!("{conditions:?}")),
            }
        },
    )
    .await;
    assert!(message.contains("kubectl delete pvc"), "{message}");

    // The human does what the condition says.
    let mut delete = vec!["delete", "pvc", "-n", ns.as_str(), "--wait=false"];
    delete.extend(claims.iter().map(String::as_str));
    let (command, output) = real_node::kubectl(&delete);
    assert!(output.status.success(), "{command}: {output:?}");
}

/// A cluster deleted and created again under its name never starts on the deleted one's volumes:
/// the operator holds it back, saying which claims to remove and how, and once a human has
/// removed them the cluster forms empty.
#[tokio::test]
async fn a_cluster_created_again_under_its_name_never_starts_on_the_deleted_ones_volumes() {
    let setup = install("real-recreate").await;
    let (admin, ns, clusters) = (&setup.admin, setup.ns.clone(), &clusters(&setup));
    create_ready(&setup, &real_cluster(3, None)).await;
    let mut client = service_client(admin, &ns).await;
    client.put("written-before", "old", None).await.unwrap();
    drop(client);

    recreate_after_removing_leftovers(&setup, real_cluster(3, None)).await;
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(300)).await;
    setup.members_ready(MEMBERS, 3, Duration::from_secs(120)).await;

    let mut client = service_client(admin, &ns).await;
    let read = client.get("written-before", None).await.unwrap();
    assert!(
        read.kvs().is_empty(),
        "the deleted cluster's key is back: {:?}",
        read.kvs()
    );
    client.put("written-after", "new", None).await.unwrap();
    setup.remove().await;
}

/// The same with `restoreFrom`: a cluster deleted and created again from a backup holds exactly
/// the backup's data, never what the deleted cluster's volumes held after it. A backup Job
/// beside the members writes the snapshot to an S3 store in the cluster, and each member's `restore` init container
/// (the operator's image with etcdutl) reads it back over the pod network.
#[tokio::test]
async fn a_cluster_created_again_from_a_backup_holds_exactly_the_backups_data() {
    use etcd_operator::crd::{EtcdBackup, RestoreSource};

    let setup = install_with_backups("real-restore").await;
    let (admin, ns, clusters) = (&setup.admin, setup.ns.clone(), &clusters(&setup));
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, &real_cluster(3, None)).await;
    let mut client = service_client(admin, &ns).await;
    client.put("in-the-backup", "kept", None).await.unwrap();

    // What an earlier release's Jobs ran as goes when this one starts a Job.
    real_pods::leave_a_shared_backup_identity(&setup, CHART).await;
    let one_shot = store.back_up_once::<EtcdBackup>(&setup, CLUSTER, "etcd").await;
    real_pods::shared_backup_identity_gone(&setup, CHART).await;
    store
        .schedule_every_minute::<EtcdBackup>(&setup, CLUSTER, "etcd")
        .await;
    client
        .put("after-the-backup", "lost-with-the-volumes", None)
        .await
        .unwrap();
    drop(client);

    let mut again = real_cluster(3, None);
    again.spec.restore_from = Some(RestoreSource {
        backup_name: real_pods::ONE_SHOT_BACKUP.into(),
    });
    recreate_after_removing_leftovers(&setup, again).await;
    support::ready_with(clusters, CLUSTER, 3, Duration::from_secs(300)).await;
    let members = setup.members_ready(MEMBERS, 3, Duration::from_secs(120)).await;
    real_pods::assert_init_container_succeeded(&members, "restore");

    let mut client = service_client(admin, &ns).await;
    let kept = client.get("in-the-backup", None).await.unwrap();
    assert_eq!(
        kept.kvs().first().map(|kv| kv.value().to_vec()),
        Some(b"kept".to_vec()),
        "the backup's key is not restored"
    );
    let after = client.get("after-the-backup", None).await.unwrap();
    assert!(
        after.kvs().is_empty(),
        "a key written after the backup came back from the deleted cluster's volumes: {:?}",
        after.kvs()
    );
    client.put("written-after-restore", "new", None).await.unwrap();
    store
        .scheduled_runs_pruned::<EtcdBackup>(&setup, "etcd", &[one_shot])
        .await;
    setup.remove().await;
}

/// A scheduled run whose Job cannot be made (a ResourceQuota allows no Job in the namespace) is
/// recorded `Failed` (`JobNotCreated`) with the API server's reason, and nothing is stored; the
/// schedule goes on, and once Jobs are allowed again its next run is stored.
#[tokio::test]
async fn a_run_whose_job_cannot_be_made_fails_and_the_next_scheduled_run_is_stored() {
    use etcd_operator::crd::EtcdBackup;
    use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec};

    let setup = install_with_backups("real-backup-job").await;
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, &real_cluster(3, None)).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let no_jobs = ResourceQuota {
        metadata: kube::api::ObjectMeta {
            name: Some("no-jobs".into()),
            ..Default::default()
        },
        spec: Some(ResourceQuotaSpec {
            hard: Some(
                [(
                    "count/jobs.batch".to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("0".into()),
                )]
                .into(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    quotas.create(&PostParams::default(), &no_jobs).await.unwrap();
    // The quota admission plugin enforces a quota once its controller has computed its usage.
    wait::until("the quota in force", Duration::from_secs(60), || async {
        let quota = quotas.get("no-jobs").await.map_err(|e| e.to_string())?;
        match quota.status.and_then(|status| status.used) {
            Some(used) if used.contains_key("count/jobs.batch") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    store
        .schedule_every_minute::<EtcdBackup>(&setup, CLUSTER, "etcd")
        .await;
    let scheduled_run = || store.scheduled_run::<EtcdBackup>(&setup);
    let refused = wait::until("a run refused its Job", Duration::from_secs(150), || async {
        let run = scheduled_run().await?;
        let reason = run
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.reason.clone());
        match (reason.as_deref(), &run.message) {
            (Some("JobNotCreated"), Some(_)) => Ok(run.clone()),
            _ => Err(format!("{reason:?}: {:?}", run.message)),
        }
    })
    .await;
    let message = refused.message.clone().unwrap();
    assert!(
        message.contains("could not be created") && message.contains("quota"),
        "{message}"
    );
    assert_eq!(refused.last_snapshot, None, "a refused run stored nothing");
    assert!(
        store.keys("etcd").await.is_empty(),
        "a refused run stored nothing"
    );

    quotas.delete("no-jobs", &Default::default()).await.unwrap();
    store.scheduled_run_stored::<EtcdBackup>(&setup, "etcd").await;
    setup.remove().await;
}

/// A scheduled run whose Job is killed midway (its pod deleted while the store hangs, so the
/// run cannot have finished) is recorded `Failed` with why, stores nothing, and does not hold
/// up the schedule: the next run is stored.
#[tokio::test]
async fn a_run_killed_midway_fails_stores_nothing_and_the_next_scheduled_run_is_stored() {
    use etcd_operator::crd::EtcdBackup;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{DeleteParams, ListParams};
    use quorum_core::crd::BackupPhase;

    let setup = install_with_backups("real-backup-killed").await;
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, &real_cluster(3, None)).await;
    store.freeze();
    store
        .schedule_every_minute::<EtcdBackup>(&setup, CLUSTER, "etcd")
        .await;
    let scheduled_run = || store.scheduled_run::<EtcdBackup>(&setup);
    let job = wait::until(
        "a scheduled run's Job named",
        Duration::from_secs(120),
        || async {
            let run = scheduled_run().await?;
            match (run.phase, run.job) {
                (Some(BackupPhase::Running), Some(job)) => Ok(job),
                (phase, job) => Err(format!("{phase:?}, Job {job:?}")),
            }
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let in_job = ListParams::default().labels(&format!("job-name={job}"));
    let pod = wait::until("the Job's pod running", Duration::from_secs(120), || async {
        let listed = pods.list(&in_job).await.map_err(|e| e.to_string())?.items;
        listed
            .into_iter()
            .find(|pod| real_node::container_running(pod, "backup"))
            .ok_or_else(|| "not running yet".to_string())
    })
    .await;
    pods.delete(
        &pod.metadata.name.unwrap(),
        &DeleteParams::default().grace_period(1),
    )
    .await
    .unwrap();

    let failed = wait::until(
        "the killed run recorded Failed",
        Duration::from_secs(120),
        || async {
            let run = scheduled_run().await?;
            match run.phase {
                Some(BackupPhase::Failed) => Ok(run),
                phase => Err(format!("{phase:?}: {:?}", run.message)),
            }
        },
    )
    .await;
    let reason = failed
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.clone());
    assert!(
        matches!(reason.as_deref(), Some("JobFailed" | "Interrupted")),
        "{reason:?}: {:?}",
        failed.message
    );
    assert!(
        failed.message.is_some_and(|m| !m.is_empty()),
        "a failed run says why"
    );
    assert_eq!(failed.last_snapshot, None, "a killed run stored nothing");
    store.thaw();
    assert!(store.keys("etcd").await.is_empty(), "a killed run stored nothing");

    store.scheduled_run_stored::<EtcdBackup>(&setup, "etcd").await;
    setup.remove().await;
}

/// A backup with `verify` restores its snapshot into a throw-away one-member cluster, which
/// holds at the recorded revision every key and value the snapshot recorded; recorded content
/// that no longer matches fails the next drill
/// ([`real_pods::InClusterS3::drill_verifies_then_catches_altered_content`]).
#[tokio::test]
async fn a_restore_drill_verifies_a_backup_and_catches_one_whose_content_differs() {
    use etcd_operator::crd::EtcdBackup;

    let setup = install_with_backups("real-etcd-drill").await;
    let store = setup.deploy_s3_store().await;
    create_ready(&setup, &real_cluster(3, None)).await;
    let client = service_client(&setup.admin, &setup.ns).await;
    let writer = start_writer(&client);
    writer.acknowledged_at_least(20, Duration::from_secs(60)).await;
    writer.stop().await;
    store
        .drill_verifies_then_catches_altered_content::<EtcdBackup, EtcdCluster>(&setup, CLUSTER, "etcd", 20)
        .await;
    setup.remove().await;
}
