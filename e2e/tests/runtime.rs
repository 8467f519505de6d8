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
