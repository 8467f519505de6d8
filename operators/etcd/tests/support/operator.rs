//! The etcd operator, run in the test process as its binary would run it, on one namespace.

use std::{net::SocketAddr, time::Duration};

use etcd_operator::{
    OPERATOR_NAME,
    observe::EtcdClients,
    reconcile::{MemberAddresses, Settings, State},
};
use quorum_core::{
    availability::{breaker::BreakerSettings, retry::CallPolicy},
    config::{LogFormat, OperatorConfig},
    runner::{Context, RetryPolicy, RunError, Runtime},
};

/// A running operator; [`Running::stop`] shuts it down as SIGTERM would.
pub struct Running {
    pub context: std::sync::Arc<Context<State>>,
    pub shutdown: tokio_util::sync::CancellationToken,
    pub task: tokio::task::JoinHandle<Result<(), RunError>>,
}

impl Running {
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("operator task").expect("clean shutdown");
    }
}

/// Starts the operator watching `namespace`, finding members as `addresses` says.
pub fn start(client: kube::Client, namespace: &str, addresses: MemberAddresses) -> Running {
    start_with(client, namespace, addresses, false)
}

/// As [`start`], with leader election on a Lease in `namespace` when `leader_elect`.
pub fn start_with(
    client: kube::Client,
    namespace: &str,
    addresses: MemberAddresses,
    leader_elect: bool,
) -> Running {
    start_configured(
        client,
        namespace,
        addresses,
        leader_elect,
        Duration::from_secs(300),
    )
}

/// As [`start`], replacing a member once it has been Unhealthy for `replace_after`.
pub fn start_replacing_after(
    client: kube::Client,
    namespace: &str,
    addresses: MemberAddresses,
    replace_after: Duration,
) -> Running {
    start_configured(client, namespace, addresses, false, replace_after)
}

fn start_configured(
    client: kube::Client,
    namespace: &str,
    addresses: MemberAddresses,
    leader_elect: bool,
    replace_after: Duration,
) -> Running {
    let config = OperatorConfig {
        watch_namespaces: vec![namespace.to_string()],
        log_format: LogFormat::Text,
        metrics_address: SocketAddr::from(([127, 0, 0, 1], 0)),
        leader_elect,
        leader_election_namespace: Some(namespace.to_string()),
        identity: Some("etcd-test".into()),
        pod_namespace: None,
    };
    let runtime = Runtime::new(OPERATOR_NAME, config, client).with_retry_policy(RetryPolicy {
        first: Duration::from_millis(200),
        max: Duration::from_secs(2),
    });
    let state = State {
        clients: EtcdClients::new(
            CallPolicy {
                timeout: Duration::from_millis(800),
                read_attempts: 2,
                backoff_first: Duration::from_millis(50),
                backoff_max: Duration::from_millis(200),
            },
            BreakerSettings {
                failure_threshold: 5,
                cooldown: Duration::from_secs(1),
            },
            runtime.metrics().admin.clone(),
        ),
        settings: Settings {
            cluster_domain: "cluster.local".into(),
            member_addresses: addresses,
            freshness: Duration::from_secs(30),
            replace_after,
            allow_http_backups: true,
            operator_image: "quorum/etcd-operator:test".into(),
        },
    };
    let context = runtime.context(state);
    let controllers = etcd_operator::controllers(&runtime, context.clone());
    let shutdown = runtime.shutdown_token();
    let task = tokio::spawn(runtime.run(controllers));
    Running {
        context,
        shutdown,
        task,
    }
}
