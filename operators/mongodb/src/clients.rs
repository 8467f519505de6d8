//! Cached admin clients with breakers, timeouts and retries: the one way the operator talks to
//! the members. No Kubernetes.

use std::time::Duration;

use quorum_core::availability::{
    clients::MemberKey,
    member_clients::{AdminCalls, MemberClients},
    metrics::AdminMetrics,
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

/// The members' admin clients, the administrator's login and the routes by which the operator
/// dials a member (known to the set by its host) elsewhere.
pub struct MongoClients {
    members: MemberClients<MongoAdmin, Credentials, String, String>,
}

impl MongoClients {
    pub fn new(calls: AdminCalls, metrics: AdminMetrics) -> Self {
        Self {
            members: MemberClients::new(ENGINE, calls, metrics),
        }
    }

    pub fn metrics(&self) -> &AdminMetrics {
        self.members.metrics()
    }

    pub fn policy(&self) -> CallPolicy {
        self.members.policy()
    }

    /// Dials the member known to the set as `host` at `address` instead.
    pub async fn route(&self, cluster: &str, host: &str, address: &str) {
        self.members
            .route(
                cluster,
                host.to_string(),
                address.to_string(),
                &MemberKey::new(cluster, host),
            )
            .await;
    }

    /// The address the operator dials for the member known as `host`.
    pub fn dial_address(&self, cluster: &str, host: &str) -> String {
        self.members
            .routed(cluster, &host.to_string())
            .unwrap_or_else(|| host.to_string())
    }

    /// Sets the administrator's login for `cluster`; when it changes, the cluster's cached
    /// clients are dropped so the next calls log in with it.
    pub async fn set_credentials(&self, cluster: &str, credentials: Credentials) {
        self.members
            .set_login(cluster, Some(credentials), Credentials::same)
            .await;
    }

    pub fn credentials(&self, cluster: &str) -> Option<Credentials> {
        self.members.login(cluster)
    }

    /// Drops the cached clients and login of a deleted cluster.
    pub async fn forget_cluster(&self, cluster: &str) {
        self.members.forget_cluster(cluster).await;
    }

    /// A client of its own for a long operation (a restore) on the member known as `host`,
    /// outside the cache, breaker and call timeout that suit short admin calls.
    pub fn long_running(&self, cluster: &str, host: &str) -> Result<MongoAdmin, AdminError> {
        MongoAdmin::connect(
            &self.dial_address(cluster, host),
            self.credentials(cluster).as_ref(),
            self.policy().timeout,
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
        let driver_timeout = self.policy().timeout.mul_f64(0.8).max(Duration::from_millis(100));
        let result = self
            .members
            .call(
                &key,
                &address,
                verb,
                idempotency,
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
                self.members.cache().invalidate(&key).await;
            }
        }
        result
    }
}
