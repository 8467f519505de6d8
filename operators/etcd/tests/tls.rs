//! Members that serve clients over TLS with client-certificate authentication, as
//! `spec.tls.clientSecretName` makes them: real etcd processes on `https://` client URLs.
//!
//! With the cluster's TLS material the operator's clients see every member Healthy, with a
//! leader and the peers' own testimony from `/metrics`, and membership changes go through.
//! Without it (or with material from another CA) no member can be verified: none is judged
//! Unhealthy, the decision waits, and nothing is changed.

use crate::support;

use std::{collections::BTreeMap, net::Ipv4Addr, path::Path, time::Duration};

use etcd_operator::{
    admin::{EtcdAdmin, TlsMaterial},
    decide::{Decision, Facts, Step, decide},
    execute::{StepError, StepOutcome, execute},
    observe::{ClusterView, EtcdClients},
    resolver::{FixedAddresses, MemberResolver},
};
use quorum_core::availability::{
    breaker::BreakerSettings,
    clients::MemberKey,
    health::Health,
    member_clients::AdminCalls,
    metrics::AdminMetrics,
    retry::{CallPolicy, Idempotency},
};
use quorum_e2e::{
    etcd::{EtcdProcesses, TlsFiles},
    wait,
};

const CLUSTER: &str = "secure";
const KEY: &str = "test/secure";

/// A CA, and one certificate for every member's address that serves and authenticates clients.
fn issue(ips: &[Ipv4Addr], common_name: &str) -> TlsMaterial {
    support::issue_certificate(ips.iter().map(ToString::to_string).collect(), common_name)
}

fn write_files(dir: &Path, material: &TlsMaterial) -> TlsFiles {
    let files = TlsFiles {
        ca: dir.join("ca.crt"),
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    std::fs::write(&files.ca, &material.ca_pem).unwrap();
    std::fs::write(&files.cert, &material.cert_pem).unwrap();
    std::fs::write(&files.key, &material.key_pem).unwrap();
    files
}

fn clients() -> EtcdClients {
    EtcdClients::new(
        AdminCalls {
            policy: CallPolicy {
                timeout: Duration::from_millis(800),
                read_attempts: 2,
                backoff_first: Duration::from_millis(50),
                backoff_max: Duration::from_millis(100),
            },
            breaker: BreakerSettings {
                failure_threshold: 3,
                cooldown: Duration::from_secs(60),
            },
        },
        AdminMetrics::default(),
        etcd_operator::leader_events::ListenSettings::default().keepalive,
    )
}

/// `https://` client URLs for ordinals `0..slots`, as the resolver gives them for a cluster
/// with client TLS; peers on plain HTTP.
fn resolver(processes: &EtcdProcesses, slots: usize) -> MemberResolver {
    MemberResolver::Fixed(
        (0..slots)
            .map(|ordinal| {
                (
                    ordinal,
                    FixedAddresses {
                        client_url: format!("https://{}:2379", processes.ip(ordinal)),
                        peer_url: processes.peer_url(ordinal),
                    },
                )
            })
            .collect(),
    )
}

fn facts(view: &ClusterView, desired: usize) -> Facts {
    Facts {
        cluster: "demo".into(),
        desired_members: desired,
        desired_version: view
            .reports
            .values()
            .next()
            .map(|r| r.version.clone())
            .unwrap_or_default(),
        bootstrapped: true,
        statefulset_replicas: Some(3),
        members: view.membership.as_ref().map(|_| view.members.clone()),
        wipe_pending: Vec::new(),
        rejoin_pending: Vec::new(),
        pod_versions: Default::default(),
        templates: Default::default(),
        in_flight: None,
        repair: None,
        recovery: None,
        forced_pods: Default::default(),
        ready_pods: Default::default(),
        pod_uids: Default::default(),
        newest_backup: None,
        freshness: Duration::from_secs(30),
        replace_after: Duration::from_secs(1),
        now: std::time::Instant::now(),
    }
}

/// Nothing answered, so nothing can be judged Unhealthy, no step is possible, and the decision
/// waits rather than acting on a cluster it cannot see.
async fn assert_unverifiable(
    clients: &EtcdClients,
    resolver: &MemberResolver,
    tls: Option<&TlsMaterial>,
    why: &str,
) {
    let view = clients.observe(KEY, resolver, 4).await;
    assert!(view.membership.is_none(), "{why}: {view:?}");
    assert!(view.reports.is_empty(), "{why}: {view:?}");
    assert!(
        !view
            .members
            .iter()
            .any(|m| matches!(m.observation.health, Health::Unhealthy(_))),
        "{why}: a member it cannot reach is never Unhealthy: {view:?}"
    );
    match decide(&facts(&view, 3)) {
        Decision::Wait(wait) => assert_eq!(wait.reason, "NoMemberReachable", "{why}"),
        other => panic!("{why}: expected to wait, decided {other:?}"),
    }
    // Each member, asked directly through the admin layer with the same material: neither the
    // gRPC API nor `/metrics` answers (the handshake fails; nothing is sent in clear).
    for ordinal in 0..3 {
        let endpoint = resolver.client_url(ordinal).unwrap();
        let admin = EtcdAdmin::connect(&endpoint, Duration::from_secs(2), tls)
            .await
            .expect("connecting is lazy");
        let status = tokio::time::timeout(Duration::from_secs(3), admin.status()).await;
        assert!(
            !matches!(status, Ok(Ok(_))),
            "{why}: member {ordinal} answered: {status:?}"
        );
        let links = admin.peer_links().await;
        assert!(links.is_err(), "{why}: member {ordinal} gave metrics: {links:?}");
    }
    // A membership change has no member to go to: nothing is changed.
    match execute(
        clients,
        KEY,
        resolver,
        &view,
        &Step::AddLearner { ordinal: 3 },
        Duration::ZERO,
    )
    .await
    {
        Err(StepError::NoHealthyMember(_)) => {}
        other => panic!("{why}: a step without a reachable member: {other:?}"),
    }
}

#[tokio::test]
async fn tls_members_are_reached_with_the_clusters_material_and_unknown_without_it() {
    quorum_core::install_crypto_provider();
    let mut processes = EtcdProcesses::new();
    // Ordinal 3 is only ever a learner that is added and removed, never started.
    let ips: Vec<Ipv4Addr> = (0..4).map(|i| processes.ip(i)).collect();
    let material = issue(&ips, "secure-member");
    let files = write_files(&processes.dir, &material);
    processes.start_named_with_client_tls(CLUSTER, 3, &files).await;
    let resolver = resolver(&processes, 4);
    let clients = clients();

    // Without the cluster's material, TLS members cannot be verified.
    clients.set_tls(KEY, None).await;
    assert_unverifiable(&clients, &resolver, None, "without TLS material").await;

    // With the material (which drops the clients and open breakers of the attempts above),
    // every member answers: Healthy, with a leader.
    clients.set_tls(KEY, Some(material.clone())).await;
    let view = wait::until("every TLS member Healthy", Duration::from_secs(30), || async {
        let view = clients.observe(KEY, &resolver, 4).await;
        if view.members.len() == 3
            && view.leader().is_some()
            && view
                .members
                .iter()
                .all(|m| m.observation.health == Health::Healthy)
        {
            Ok(view)
        } else {
            Err(format!("{view:?}"))
        }
    })
    .await;
    assert_eq!(view.reports.len(), 3);
    let mut original: Vec<u64> = view.membership.as_ref().unwrap().iter().map(|m| m.id).collect();
    original.sort_unstable();
    assert_eq!(original.len(), 3, "the attempts without material changed nothing");
    assert!(
        view.membership
            .as_ref()
            .unwrap()
            .iter()
            .all(|m| m.client_urls.iter().all(|url| url.starts_with("https://")))
    );
    assert!(matches!(decide(&facts(&view, 3)), Decision::Settled));

    // The peers' testimony, from `/metrics` over TLS: each member is connected to the others.
    let ids: BTreeMap<usize, u64> = view.members.iter().map(|m| (m.ordinal, m.id)).collect();
    for ordinal in 0..3 {
        let endpoint = resolver.client_url(ordinal).unwrap();
        let links = wait::until(
            "peer links reported over TLS",
            Duration::from_secs(10),
            || async {
                let links = clients
                    .call(
                        &MemberKey::new(KEY, ordinal.to_string()),
                        &endpoint,
                        "peer_links",
                        Idempotency::Read,
                        |admin| async move { admin.peer_links().await },
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let others_active = ids
                    .iter()
                    .filter(|(other, _)| **other != ordinal)
                    .all(|(_, id)| links.iter().any(|l| l.remote == *id && l.active));
                if others_active {
                    Ok(links)
                } else {
                    Err(format!("{links:?}"))
                }
            },
        )
        .await;
        assert!(links.iter().all(|l| l.local == ids[&ordinal]), "{links:?}");
    }

    // A membership change over TLS: add a learner, see it, remove it.
    let added = wait::until("the learner added over TLS", Duration::from_secs(30), || async {
        let view = clients.observe(KEY, &resolver, 4).await;
        if let Some(learner) = view.members.iter().find(|m| m.ordinal == 3) {
            return Ok(learner.clone());
        }
        match execute(
            &clients,
            KEY,
            &resolver,
            &view,
            &Step::AddLearner { ordinal: 3 },
            Duration::ZERO,
        )
        .await
        {
            Ok(outcome) => Err(format!("{outcome:?}")),
            Err(error) => panic!("adding a learner over TLS: {error}"),
        }
    })
    .await;
    assert!(added.learner && !added.started, "{added:?}");
    let view = clients.observe(KEY, &resolver, 4).await;
    assert_eq!(view.membership.as_ref().unwrap().len(), 4);
    let outcome = execute(
        &clients,
        KEY,
        &resolver,
        &view,
        &Step::Remove {
            ordinal: 3,
            id: added.id,
        },
        Duration::ZERO,
    )
    .await
    .unwrap_or_else(|error| panic!("removing the learner over TLS: {error}"));
    assert_eq!(outcome, StepOutcome::Done);
    let view = clients.observe(KEY, &resolver, 4).await;
    let mut now: Vec<u64> = view.membership.as_ref().unwrap().iter().map(|m| m.id).collect();
    now.sort_unstable();
    assert_eq!(now, original);

    // Material from another CA is not trusted by the members, nor are they by it.
    let foreign = issue(&ips, "foreign-member");
    clients.set_tls(KEY, Some(foreign.clone())).await;
    assert_unverifiable(&clients, &resolver, Some(&foreign), "with another CA's material").await;

    // Dropping the material again takes effect at once: the cached TLS clients are gone.
    clients.set_tls(KEY, Some(material.clone())).await;
    assert!(clients.observe(KEY, &resolver, 4).await.membership.is_some());
    clients.set_tls(KEY, None).await;
    assert_unverifiable(&clients, &resolver, None, "after the material was withdrawn").await;

    // Throughout, the membership stayed as it was.
    clients.set_tls(KEY, Some(material)).await;
    let view = clients.observe(KEY, &resolver, 4).await;
    let mut after: Vec<u64> = view.membership.as_ref().unwrap().iter().map(|m| m.id).collect();
    after.sort_unstable();
    assert_eq!(after, original);
    assert!(
        view.members
            .iter()
            .all(|m| m.observation.health == Health::Healthy)
    );
}
