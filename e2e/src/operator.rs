//! An operator run in the test process as its binary runs it, on one test namespace, with the
//! short timeouts, retries and breaker cool-downs the tests rely on to see faults quickly.
//!
//! [`start`] runs an engine's [`Operator`] as its process does, with the engine's test settings.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use futures::future::BoxFuture;
use quorum_core::{
    availability::{breaker::BreakerSettings, retry::CallPolicy},
    config::{LogFormat, OperatorConfig},
    runner::{AdminCalls, Context, Operator, RetryPolicy, RunError, Runtime},
};
use tokio_util::sync::CancellationToken;

/// The runtime of `operator` watching `namespace` only, metrics on an ephemeral loopback port,
/// failed passes retried after 200 ms up to 2 s; with `leader_elect`, it first takes its Lease
/// in `namespace`, as a deployed operator does.
pub fn runtime(
    operator: &'static str,
    identity: &str,
    client: kube::Client,
    namespace: &str,
    leader_elect: bool,
) -> Runtime {
    let config = OperatorConfig {
        watch_namespaces: vec![namespace.to_string()],
        log_format: LogFormat::Text,
        metrics_address: SocketAddr::from(([127, 0, 0, 1], 0)),
        leader_elect,
        leader_election_namespace: Some(namespace.to_string()),
        identity: Some(identity.to_string()),
        pod_namespace: None,
        api_qps: 20,
        api_burst: 30,
        max_concurrent_reconciles: 10,
    };
    Runtime::new(operator, config, client).with_retry_policy(RetryPolicy {
        first: Duration::from_millis(200),
        max: Duration::from_secs(2),
    })
}

/// Admin calls that give up after `timeout`, with two read attempts and short backoffs.
pub fn call_policy(timeout: Duration) -> CallPolicy {
    CallPolicy {
        timeout,
        read_attempts: 2,
        backoff_first: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
    }
}

/// A member's circuit opens after five failures and is tried again after a second.
pub fn breaker() -> BreakerSettings {
    BreakerSettings {
        failure_threshold: 5,
        cooldown: Duration::from_secs(1),
    }
}

/// Starts operator `O` on `namespace` with `settings`, each admin call given up after
/// `call_timeout`; with `leader_elect`, it first takes its Lease in `namespace`, as a deployed
/// operator does.
pub fn start<O: Operator>(
    client: kube::Client,
    namespace: &str,
    leader_elect: bool,
    settings: O::Settings,
    call_timeout: Duration,
) -> Running<O::State> {
    let runtime = runtime(
        O::NAME,
        &format!("{}-test", O::NAME),
        client,
        namespace,
        leader_elect,
    );
    let calls = AdminCalls {
        policy: call_policy(call_timeout),
        breaker: breaker(),
    };
    let context = runtime.context(O::state(settings, calls, runtime.metrics()));
    let controllers = O::controllers(&runtime, context.clone());
    Running::start(runtime, context, controllers)
}

/// A running operator; [`Running::stop`] shuts it down as SIGTERM would.
pub struct Running<S> {
    pub context: Arc<Context<S>>,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<Result<(), RunError>>,
}

impl<S> Running<S> {
    /// Runs `controllers` on `runtime` in a task of its own.
    pub fn start(
        runtime: Runtime,
        context: Arc<Context<S>>,
        controllers: Vec<BoxFuture<'static, ()>>,
    ) -> Self {
        let shutdown = runtime.shutdown_token();
        let task = tokio::spawn(runtime.run(controllers));
        Self {
            context,
            shutdown,
            task,
        }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("operator task").expect("clean shutdown");
    }
}
