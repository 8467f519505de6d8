//! The operator runtime as a process would run it: HTTP endpoint, readiness, leader election
//! and graceful shutdown, against the real API server.

use std::{net::SocketAddr, time::Duration};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use quorum_core::{
    config::{LogFormat, OperatorConfig},
    leader::LeaseTimings,
    runner::Runtime,
};
use quorum_e2e::control_plane::{TestNamespace, admin_client};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn serves_health_and_metrics_holds_the_lease_and_releases_it_on_shutdown() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "runtime").await;
    let port = free_port();
    let config = OperatorConfig {
        watch_namespaces: vec![namespace.name().to_string()],
        log_format: LogFormat::Text,
        metrics_address: SocketAddr::from(([127, 0, 0, 1], port)),
        leader_elect: true,
        leader_election_namespace: Some(namespace.name().to_string()),
        identity: Some("replica-a".into()),
        pod_namespace: None,
        api_qps: 20,
        api_burst: 30,
        max_concurrent_reconciles: 10,
    };
    let runtime = Runtime::new("runtime-test", config, client.clone()).with_lease_timings(LeaseTimings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
    });
    let shutdown = runtime.shutdown_token();
    let running = tokio::spawn(runtime.run(Vec::new()));

    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace.name());
    quorum_e2e::wait::until("ready and leading", Duration::from_secs(20), || async {
        let ready = http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let lease = leases
            .get_opt("runtime-test-leader")
            .await
            .map_err(|e| e.to_string())?;
        let holder = lease.and_then(|l| l.spec).and_then(|s| s.holder_identity);
        if ready.status().is_success() && holder.as_deref() == Some("replica-a") {
            Ok(())
        } else {
            Err(format!("readyz {} holder {holder:?}", ready.status()))
        }
    })
    .await;
    let healthz = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert!(healthz.status().is_success());
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert!(metrics.status().is_success());
    assert!(
        metrics.text().await.unwrap().ends_with("# EOF\n"),
        "OpenMetrics text"
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("shuts down promptly")
        .unwrap()
        .expect("clean shutdown");
    let lease = leases.get("runtime-test-leader").await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity,
        None,
        "the lease is released on shutdown"
    );
    namespace.delete().await;
}

fn runtime_named(client: &kube::Client, namespace: &str, identity: &str, port: u16) -> Runtime {
    let config = OperatorConfig {
        watch_namespaces: vec![namespace.to_string()],
        log_format: LogFormat::Text,
        metrics_address: SocketAddr::from(([127, 0, 0, 1], port)),
        leader_elect: true,
        leader_election_namespace: Some(namespace.to_string()),
        identity: Some(identity.into()),
        pod_namespace: None,
        api_qps: 20,
        api_burst: 30,
        max_concurrent_reconciles: 10,
    };
    Runtime::new("runtime-test", config, client.clone()).with_lease_timings(LeaseTimings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
    })
}

/// `/readyz` and `/healthz` of the process on `port`: status codes and the phase they name.
async fn probes(port: u16) -> Result<((u16, String), (u16, String)), String> {
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for path in ["readyz", "healthz"] {
        let answer = http
            .get(format!("http://127.0.0.1:{port}/{path}"))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        answers.push((
            answer.status().as_u16(),
            answer.text().await.map_err(|e| e.to_string())?,
        ));
    }
    let healthz = answers.pop().unwrap();
    Ok((answers.pop().unwrap(), healthz))
}

/// The probes name the phase: a standby waiting for the lease answers ready as `Standby` (a
/// one-replica rolling update needs the new pod ready before the old one, holding the lease,
/// stops), and `Running` once the leader handed the lease over and its controllers run.
#[tokio::test]
async fn a_standby_answers_its_phase_and_runs_once_it_leads() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "runtime-standby").await;
    let (leader_port, standby_port) = (free_port(), free_port());
    let leader = runtime_named(&client, namespace.name(), "replica-a", leader_port);
    let stop_leader = leader.shutdown_token();
    let leader = tokio::spawn(leader.run(Vec::new()));
    quorum_e2e::wait::until("the first replica leading", Duration::from_secs(20), || async {
        match probes(leader_port).await? {
            ((200, ready), (200, _)) if ready == "Running" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let standby = runtime_named(&client, namespace.name(), "replica-b", standby_port);
    let stop_standby = standby.shutdown_token();
    let standby = tokio::spawn(standby.run(Vec::new()));
    quorum_e2e::wait::until(
        "the second replica standing by",
        Duration::from_secs(20),
        || async {
            match probes(standby_port).await? {
                ((200, ready), (200, _)) if ready == "Standby" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    stop_leader.cancel();
    leader.await.unwrap().expect("clean shutdown");
    quorum_e2e::wait::until(
        "the standby ready once it leads",
        Duration::from_secs(20),
        || async {
            match probes(standby_port).await? {
                ((200, ready), (200, _)) if ready == "Running" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    stop_standby.cancel();
    standby.await.unwrap().expect("clean shutdown");
    namespace.delete().await;
}

/// A controller that ends without a shutdown request has stopped working, even while another
/// runs on: the process reports it and ends (so the kubelet restarts it) instead of serving
/// probes with part of its work undone, and hands its lease over.
#[tokio::test]
async fn controllers_that_stop_by_themselves_end_the_process_and_release_the_lease() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "runtime-stopped").await;
    let runtime = runtime_named(&client, namespace.name(), "replica-a", free_port());
    let stopped: futures::future::BoxFuture<'static, ()> = Box::pin(futures::future::ready(()));
    let running: futures::future::BoxFuture<'static, ()> = Box::pin(futures::future::pending());
    let outcome = tokio::time::timeout(Duration::from_secs(20), runtime.run(vec![running, stopped]))
        .await
        .expect("the process ends when its controllers stop");
    assert!(
        matches!(outcome, Err(quorum_core::runner::RunError::ControllersStopped)),
        "{outcome:?}"
    );
    let lease = Api::<Lease>::namespaced(client.clone(), namespace.name())
        .get("runtime-test-leader")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity,
        None,
        "the lease is handed over"
    );
    namespace.delete().await;
}
