//! Admin clients cached per cluster and member, each with its own circuit breaker.
//!
//! A cached client is reused while the member's endpoint stays the same; a new endpoint (the
//! pod moved, TLS changed) replaces it. When a cluster is deleted its entries are dropped.

use std::{collections::HashMap, sync::Arc};

use tokio::sync::Mutex;

use super::{
    breaker::{BreakerSettings, CircuitBreaker},
    metrics::AdminMetrics,
    retry::{AdminCall, CallError, CallPolicy, Idempotency},
};

/// What an admin call is, for its timeout, retries and metrics.
#[derive(Clone, Copy)]
pub struct CallSpec<'a> {
    pub engine: &'static str,
    pub verb: &'static str,
    pub idempotency: Idempotency,
    pub policy: CallPolicy,
    pub metrics: &'a AdminMetrics,
}

/// Identifies a member: the cluster (`namespace/name`) and the member's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct MemberKey {
    pub cluster: String,
    pub member: String,
}

impl MemberKey {
    pub fn new(cluster: impl Into<String>, member: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            member: member.into(),
        }
    }
}

struct Entry<C> {
    endpoint: String,
    client: Option<C>,
    breaker: Arc<CircuitBreaker>,
}

/// The cache. `C` is the engine's client type, cheap to clone (a connection handle).
pub struct ClientCache<C> {
    settings: BreakerSettings,
    entries: Mutex<HashMap<MemberKey, Entry<C>>>,
}

impl<C: Clone> ClientCache<C> {
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The breaker for a member at `endpoint`: the same one across calls while the endpoint
    /// is unchanged, a fresh one when it changes.
    pub async fn breaker(&self, key: &MemberKey, endpoint: &str) -> Arc<CircuitBreaker> {
        let mut entries = self.entries.lock().await;
        self.entry(&mut entries, key, endpoint).breaker.clone()
    }

    /// The cached client for a member at `endpoint`, if one was stored.
    pub async fn client(&self, key: &MemberKey, endpoint: &str) -> Option<C> {
        let mut entries = self.entries.lock().await;
        self.entry(&mut entries, key, endpoint).client.clone()
    }

    /// Stores a freshly connected client for a member at `endpoint`.
    pub async fn store(&self, key: &MemberKey, endpoint: &str, client: C) {
        let mut entries = self.entries.lock().await;
        self.entry(&mut entries, key, endpoint).client = Some(client);
    }

    /// Drops a member's client (after a failure that may have broken the connection); its
    /// breaker stays.
    pub async fn invalidate(&self, key: &MemberKey) {
        if let Some(entry) = self.entries.lock().await.get_mut(key) {
            entry.client = None;
        }
    }

    /// Drops every entry of a cluster (deleted, or its credentials or TLS changed). A breaker
    /// dropped while open no longer counts in the open-circuit gauge.
    pub async fn forget_cluster(&self, cluster: &str, metrics: &AdminMetrics, engine: &str) {
        self.entries.lock().await.retain(|key, entry| {
            let keep = key.cluster != cluster;
            if !keep && entry.breaker.is_open() {
                metrics.breaker_closed(engine);
            }
            keep
        });
    }

    /// Runs one admin call against the member at `endpoint` through its breaker, timeout and
    /// (for reads) retries, connecting first when no client is cached. The connection counts
    /// as part of the call, so a member that cannot be reached trips its breaker.
    pub async fn call<T, E, Connect, ConnectFut, F, Fut>(
        &self,
        key: &MemberKey,
        endpoint: &str,
        spec: CallSpec<'_>,
        connect: Connect,
        verb_call: F,
    ) -> Result<T, CallError<E>>
    where
        Connect: Fn() -> ConnectFut,
        ConnectFut: Future<Output = Result<C, E>>,
        F: Fn(C) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let breaker = {
            let mut entries = self.entries.lock().await;
            // A member at a new endpoint gets a fresh breaker; an open one it replaces no longer
            // counts as open.
            if entries
                .get(key)
                .is_some_and(|entry| entry.endpoint != endpoint && entry.breaker.is_open())
            {
                spec.metrics.breaker_closed(spec.engine);
            }
            self.entry(&mut entries, key, endpoint).breaker.clone()
        };
        let call = AdminCall {
            engine: spec.engine,
            verb: spec.verb,
            idempotency: spec.idempotency,
            policy: spec.policy,
            breaker: &breaker,
            metrics: spec.metrics,
        };
        call.run(|| async {
            let client = match self.client(key, endpoint).await {
                Some(client) => client,
                None => {
                    let client = connect().await?;
                    self.store(key, endpoint, client.clone()).await;
                    client
                }
            };
            verb_call(client).await
        })
        .await
    }

    /// How many members have entries (for tests and metrics).
    pub async fn len(&self) -> usize {
        self.entries.lock().await.len()
    }

    pub async fn is_empty(&self) -> bool {
        self.len().await == 0
    }

    fn entry<'a>(
        &self,
        entries: &'a mut HashMap<MemberKey, Entry<C>>,
        key: &MemberKey,
        endpoint: &str,
    ) -> &'a mut Entry<C> {
        let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
            endpoint: endpoint.to_string(),
            client: None,
            breaker: Arc::new(CircuitBreaker::new(self.settings)),
        });
        if entry.endpoint != endpoint {
            *entry = Entry {
                endpoint: endpoint.to_string(),
                client: None,
                breaker: Arc::new(CircuitBreaker::new(self.settings)),
            };
        }
        entry
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[tokio::test]
    async fn clients_and_breakers_are_kept_per_member_and_endpoint() {
        let cache: ClientCache<u32> = ClientCache::new(BreakerSettings {
            failure_threshold: 1,
            cooldown: std::time::Duration::from_secs(60),
        });
        let m0 = MemberKey::new("ns/a", "a-0");
        cache.store(&m0, "10.0.0.1:2379", 7).await;
        assert_eq!(cache.client(&m0, "10.0.0.1:2379").await, Some(7));

        let breaker = cache.breaker(&m0, "10.0.0.1:2379").await;
        breaker.record_failure(Instant::now());
        assert!(
            cache.breaker(&m0, "10.0.0.1:2379").await.is_open(),
            "same breaker while the endpoint holds"
        );

        // The member moved: a new endpoint gets a fresh client slot and a closed breaker.
        assert_eq!(cache.client(&m0, "10.0.0.2:2379").await, None);
        assert!(!cache.breaker(&m0, "10.0.0.2:2379").await.is_open());

        cache.store(&MemberKey::new("ns/b", "b-0"), "x", 1).await;
        let metrics = AdminMetrics::default();
        cache.forget_cluster("ns/a", &metrics, "etcd").await;
        assert_eq!(cache.len().await, 1);
    }

    #[tokio::test]
    async fn a_forgotten_cluster_leaves_no_open_circuit_in_the_gauge() {
        let cache: ClientCache<u32> = ClientCache::new(BreakerSettings {
            failure_threshold: 1,
            cooldown: std::time::Duration::from_secs(60),
        });
        let metrics = AdminMetrics::default();
        let spec = CallSpec {
            engine: "etcd",
            verb: "status",
            idempotency: Idempotency::Mutation,
            policy: CallPolicy::default(),
            metrics: &metrics,
        };
        for member in ["a-0", "a-1"] {
            let failed: Result<u32, _> = cache
                .call(
                    &MemberKey::new("ns/a", member),
                    member,
                    spec,
                    || async { Err::<u32, _>("connection refused") },
                    |client| async move { Ok(client) },
                )
                .await;
            assert!(failed.is_err());
        }
        assert_eq!(metrics.open_circuits("etcd"), 2);
        // a-1 moved: its open breaker is replaced by a closed one.
        let moved: Result<u32, CallError<&str>> = cache
            .call(
                &MemberKey::new("ns/a", "a-1"),
                "a-1 elsewhere",
                spec,
                || async { Ok(1) },
                |client| async move { Ok(client) },
            )
            .await;
        assert_eq!(moved.ok(), Some(1));
        assert_eq!(metrics.open_circuits("etcd"), 1);
        cache.forget_cluster("ns/a", &metrics, "etcd").await;
        assert_eq!(cache.len().await, 0);
        assert_eq!(metrics.open_circuits("etcd"), 0);
    }
}
