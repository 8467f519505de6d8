//! Cached admin clients with breakers, timeouts and retries: the one way the operator talks to
//! the members. No Kubernetes.

use std::time::Duration;

use quorum_core::availability::{
    breaker::BreakerSettings,
    clients::{CallSpec, ClientCache, MemberKey},
    metrics::AdminMetrics,
    per_cluster::{PerCluster, Routes},
    retry::{CallError, CallPolicy, Idempotency},
};

use crate::admin::{AdminError, Credentials, MongoAdmin, codes};

/// The engine label in metrics.
pub const ENGINE: &str = "mongodb";

/// A failed call to one member.
pub type CallFailure = CallError<AdminError>;

/// Whether a failed call says nothing about the member (it may be fine, only out of reach).
pub fn is_unreachable(failure: &CallFailure) -> bool {
    match failure {
        CallError::Failed(error) => error.is_unreachable(),
        other => other.is_unreachable(),
    }
}

/// The server's refusal code, when it refused.
pub fn refusal_code(failure: &CallFailure) -> Option<i32> {
    match failure {
        CallError::Failed(error) => error.code(),
        _ => None,
    }
}

pub struct MongoClients {
    members: ClientCache<MongoAdmin>,
    policy: CallPolicy,
    metrics: AdminMetrics,
    /// The administrator's login by cluster key (`namespace/name`).
    credentials: PerCluster<Credentials>,
    /// Where the operator dials a member when that differs from the `host:port` the members
    /// use for each other.
    routes: Routes<String, String>,
}

impl MongoClients {
    pub fn new(policy: CallPolicy, breaker: BreakerSettings, metrics: AdminMetrics) -> Self {
        Self {
            members: ClientCache::new(breaker),
            policy,
            metrics,
            credentials: PerCluster::default(),
            routes: Routes::default(),
        }
    }

    pub fn metrics(&self) -> &AdminMetrics {
        &self.metrics
    }

    pub fn policy(&self) -> CallPolicy {
        self.policy
    }

    /// Dials the member known to the set as `host` at `address` instead.
    pub async fn route(&self, cluster: &str, host: &str, address: &str) {
        self.routes.set(cluster, host.to_string(), address.to_string());
        self.members.invalidate(&MemberKey::new(cluster, host)).await;
    }

    /// The address the operator dials for the member known as `host`.
    pub fn dial_address(&self, cluster: &str, host: &str) -> String {
        self.routes
            .get(cluster, &host.to_string())
            .unwrap_or_else(|| host.to_string())
    }

    /// Sets the administrator's login for `cluster`; when it changes, the cluster's cached
    /// clients are dropped so the next calls log in with it.
    pub async fn set_credentials(&self, cluster: &str, credentials: Credentials) {
        if self.credentials.replace(cluster, credentials, Credentials::same) {
            self.members.forget_cluster(cluster, &self.metrics, ENGINE).await;
        }
    }

    pub fn credentials(&self, cluster: &str) -> Option<Credentials> {
        self.credentials.get(cluster)
    }

    /// Drops the cached clients and login of a deleted cluster.
    pub async fn forget_cluster(&self, cluster: &str) {
        self.credentials.forget(cluster);
        self.routes.forget(cluster);
        self.members.forget_cluster(cluster, &self.metrics, ENGINE).await;
    }

    /// A client of its own for a long operation (a restore) on the member known as `host`,
    /// outside the cache, breaker and call timeout that suit short admin calls.
    pub fn long_running(&self, cluster: &str, host: &str) -> Result<MongoAdmin, AdminError> {
        MongoAdmin::connect(
            &self.dial_address(cluster, host),
            self.credentials(cluster).as_ref(),
            self.policy.timeout,
        )
    }

    /// Runs one admin verb against the member known to the set as `host`.
    pub async fn member<T, F, Fut>(
        &self,
        cluster: &str,
        host: &str,
        verb: &'static str,
        idempotency: Idempotency,
        verb_call: F,
    ) -> Result<T, CallFailure>
    where
        F: Fn(MongoAdmin) -> Fut,
        Fut: Future<Output = Result<T, AdminError>>,
    {
        let key = MemberKey::new(cluster, host);
        let address = self.dial_address(cluster, host);
        let credentials = self.credentials(cluster);
        // The driver gets most of the call's time so that its own error (refused, no route)
        // is what the operator reports, rather than a bare timeout.
        let driver_timeout = self.policy.timeout.mul_f64(0.8).max(Duration::from_millis(100));
        let spec = CallSpec {
            engine: ENGINE,
            verb,
            idempotency,
            policy: self.policy,
            metrics: &self.metrics,
        };
        let result = self
            .members
            .call(
                &key,
                &address,
                spec,
                || async { MongoAdmin::connect(&address, credentials.as_ref(), driver_timeout) },
                verb_call,
            )
            .await;
        if let Err(CallError::Failed(error)) = &result {
            // A server keeps a session's privileges as they were at login: after a refusal
            // for lack of them, log in again next time.
            if matches!(
                error.code(),
                Some(codes::UNAUTHORIZED | codes::AUTHENTICATION_FAILED)
            ) {
                self.members.invalidate(&key).await;
            }
        }
        result
    }
}
