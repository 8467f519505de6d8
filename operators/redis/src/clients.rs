//! Cached admin clients with breakers, timeouts and retries: the one way the operator talks to
//! the data nodes and the Sentinels. No Kubernetes.

use std::net::SocketAddr;

use quorum_core::availability::{
    clients::MemberKey,
    member_clients::{AdminCalls, MemberClients},
    metrics::AdminMetrics,
    retry::{CallError, Idempotency},
};

use crate::{
    address::{Addresses, Kind},
    admin::{AdminError, Credentials, RedisAdmin, sentinel::SentinelAdmin},
};

/// The engine label in metrics.
pub const ENGINE: &str = "redis";

/// A failed call to one pod.
pub type CallFailure = CallError<AdminError>;

/// The data nodes' and the Sentinels' admin clients, each kind with the password and its routes
/// (where the operator dials a pod when that differs from the address the servers use for each
/// other), by ordinal.
pub struct RedisClients {
    nodes: MemberClients<RedisAdmin, Credentials, usize, SocketAddr>,
    sentinels: MemberClients<SentinelAdmin, Credentials, usize, SocketAddr>,
}

impl RedisClients {
    pub fn new(calls: AdminCalls, metrics: AdminMetrics) -> Self {
        Self {
            nodes: MemberClients::new(ENGINE, calls, metrics.clone()),
            sentinels: MemberClients::new(ENGINE, calls, metrics),
        }
    }

    pub fn metrics(&self) -> &AdminMetrics {
        self.nodes.metrics()
    }

    /// Dials pod `ordinal` of `kind` at `address` instead of its own address.
    pub async fn route(&self, cluster: &str, kind: Kind, ordinal: usize, address: SocketAddr) {
        let key = member_key(cluster, kind, ordinal);
        match kind {
            Kind::Node => self.nodes.route(cluster, ordinal, address, &key).await,
            Kind::Sentinel => self.sentinels.route(cluster, ordinal, address, &key).await,
        }
    }

    /// Sets the password of `cluster`'s servers. When it changes, the cluster's cached clients
    /// are dropped so the next calls log in with it.
    pub async fn set_credentials(&self, cluster: &str, credentials: Credentials) {
        self.sentinels
            .set_login(cluster, Some(credentials.clone()), Credentials::same)
            .await;
        self.nodes
            .set_login(cluster, Some(credentials), Credentials::same)
            .await;
    }

    pub fn credentials(&self, cluster: &str) -> Option<Credentials> {
        self.nodes.login(cluster)
    }

    /// How many data nodes and Sentinels, of every cluster, have a cached client or breaker.
    pub async fn cached_members(&self) -> usize {
        self.nodes.len().await + self.sentinels.len().await
    }

    /// Drops the cached clients and credentials of a deleted cluster.
    pub async fn forget_cluster(&self, cluster: &str) {
        self.nodes.forget_cluster(cluster).await;
        self.sentinels.forget_cluster(cluster).await;
    }

    /// The address the operator dials for pod `ordinal` of `kind`.
    pub async fn dial_address(
        &self,
        cluster: &str,
        addresses: &Addresses,
        kind: Kind,
        ordinal: usize,
    ) -> Option<SocketAddr> {
        let routed = match kind {
            Kind::Node => self.nodes.routed(cluster, &ordinal),
            Kind::Sentinel => self.sentinels.routed(cluster, &ordinal),
        };
        match routed {
            Some(address) => Some(address),
            None => addresses.resolve(kind, ordinal).await,
        }
    }

    /// Runs one admin verb against data node `ordinal` through its breaker, timeout and (for
    /// reads) retries.
    pub async fn node<T, F, Fut>(
        &self,
        cluster: &str,
        addresses: &Addresses,
        ordinal: usize,
        verb: &'static str,
        idempotency: Idempotency,
        verb_call: F,
    ) -> Result<T, CallFailure>
    where
        F: Fn(RedisAdmin) -> Fut,
        Fut: Future<Output = Result<T, AdminError>>,
    {
        let address = self.dial_address(cluster, addresses, Kind::Node, ordinal).await;
        let credentials = self.credentials(cluster);
        let timeout = self.nodes.policy().timeout;
        call_at(
            &self.nodes,
            member_key(cluster, Kind::Node, ordinal),
            address,
            verb,
            idempotency,
            move |address| RedisAdmin::connect(address, credentials.clone(), timeout),
            verb_call,
        )
        .await
    }

    /// Runs one admin verb against Sentinel `ordinal`.
    pub async fn sentinel<T, F, Fut>(
        &self,
        cluster: &str,
        addresses: &Addresses,
        ordinal: usize,
        verb: &'static str,
        idempotency: Idempotency,
        verb_call: F,
    ) -> Result<T, CallFailure>
    where
        F: Fn(SentinelAdmin) -> Fut,
        Fut: Future<Output = Result<T, AdminError>>,
    {
        let address = self
            .dial_address(cluster, addresses, Kind::Sentinel, ordinal)
            .await;
        let credentials = self.sentinels.login(cluster);
        let timeout = self.sentinels.policy().timeout;
        call_at(
            &self.sentinels,
            member_key(cluster, Kind::Sentinel, ordinal),
            address,
            verb,
            idempotency,
            move |address| SentinelAdmin::connect(address, credentials.clone(), timeout),
            verb_call,
        )
        .await
    }
}

/// Connects (once, cached) and calls the pod at `address`, the connection counted as part of
/// the call so that a pod that cannot be reached trips its breaker; a pod whose name does not
/// resolve fails without a call.
async fn call_at<C, T, Connect, ConnectFut, F, Fut>(
    clients: &MemberClients<C, Credentials, usize, SocketAddr>,
    key: MemberKey,
    address: Option<SocketAddr>,
    verb: &'static str,
    idempotency: Idempotency,
    connect: Connect,
    verb_call: F,
) -> Result<T, CallFailure>
where
    C: Clone,
    Connect: Fn(SocketAddr) -> ConnectFut,
    ConnectFut: Future<Output = Result<C, AdminError>>,
    F: Fn(C) -> Fut,
    Fut: Future<Output = Result<T, AdminError>>,
{
    let Some(address) = address else {
        return Err(CallError::Failed(AdminError::Unreachable {
            endpoint: format!("{}/{}", key.cluster, key.member),
            detail: "its name does not resolve (no pod, or no address yet)".to_string(),
        }));
    };
    clients
        .call(
            &key,
            &address.to_string(),
            verb,
            idempotency,
            || connect(address),
            verb_call,
        )
        .await
}

fn member_key(cluster: &str, kind: Kind, ordinal: usize) -> MemberKey {
    let member = match kind {
        Kind::Node => ordinal.to_string(),
        Kind::Sentinel => format!("sentinel-{ordinal}"),
    };
    MemberKey::new(cluster, member)
}
