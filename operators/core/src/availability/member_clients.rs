//! One engine's way to its members: the cached admin clients with their breakers, the login
//! they are built with (credentials or TLS material), and the routes by which the operator dials
//! a member elsewhere than at its own address; all kept per cluster and forgotten with it.

use std::hash::Hash;

use super::{
    breaker::BreakerSettings,
    clients::{CallSpec, ClientCache, MemberKey},
    metrics::AdminMetrics,
    per_cluster::{PerCluster, Routes},
    retry::{CallError, CallPolicy, Idempotency},
};

/// How an operator calls its members: each call's timeout and retries, and each member's
/// circuit breaker.
#[derive(Clone, Copy, Debug, Default)]
pub struct AdminCalls {
    pub policy: CallPolicy,
    pub breaker: BreakerSettings,
}

/// The clients of one engine's members. `C` is the engine's client, `L` its login, `M` how it
/// names a member in a route and `A` the address a route dials.
pub struct MemberClients<C, L, M = (), A = ()> {
    engine: &'static str,
    cache: ClientCache<C>,
    policy: CallPolicy,
    metrics: AdminMetrics,
    logins: PerCluster<L>,
    routes: Routes<M, A>,
}

impl<C: Clone, L: Clone, M: Eq + Hash + Clone, A: Clone> MemberClients<C, L, M, A> {
    pub fn new(engine: &'static str, calls: AdminCalls, metrics: AdminMetrics) -> Self {
        Self {
            engine,
            cache: ClientCache::new(calls.breaker),
            policy: calls.policy,
            metrics,
            logins: PerCluster::default(),
            routes: Routes::default(),
        }
    }

    pub fn metrics(&self) -> &AdminMetrics {
        &self.metrics
    }

    pub fn policy(&self) -> CallPolicy {
        self.policy
    }

    /// The cached clients, for what a call does not cover (dropping one client).
    pub fn cache(&self) -> &ClientCache<C> {
        &self.cache
    }

    /// How the members of `cluster` are logged in to, once set.
    pub fn login(&self, cluster: &str) -> Option<L> {
        self.logins.get(cluster)
    }

    /// Sets (or, with `None`, removes) how the members of `cluster` are logged in to. When that
    /// changes (`same` says whether two logins are alike), the cluster's cached clients and
    /// breakers are dropped so the next calls log in anew; `true` then.
    pub async fn set_login(
        &self,
        cluster: &str,
        login: Option<L>,
        same: impl FnOnce(&L, &L) -> bool,
    ) -> bool {
        let changed = match login {
            Some(login) => self.logins.replace(cluster, login, same),
            None => self.logins.forget(cluster).is_some(),
        };
        if changed {
            self.cache
                .forget_cluster(cluster, &self.metrics, self.engine)
                .await;
        }
        changed
    }

    /// Dials `member` of `cluster` (whose cached client is `key`) at `address` from now on.
    pub async fn route(&self, cluster: &str, member: M, address: A, key: &MemberKey) {
        self.routes.set(cluster, member, address);
        self.cache.invalidate(key).await;
    }

    /// Where `member` of `cluster` is dialled instead of its own address, if anywhere.
    pub fn routed(&self, cluster: &str, member: &M) -> Option<A> {
        self.routes.get(cluster, member)
    }

    /// Drops everything kept for a deleted cluster: clients, breakers (and their share of the
    /// open-circuit gauge), login and routes.
    pub async fn forget_cluster(&self, cluster: &str) {
        self.logins.forget(cluster);
        self.routes.forget(cluster);
        self.cache
            .forget_cluster(cluster, &self.metrics, self.engine)
            .await;
    }

    /// Runs `verb` on the member `key` at `endpoint` through its breaker, timeout and (for
    /// reads) retries, connecting first when no client is cached ([`ClientCache::call`]).
    pub async fn call<T, E, Connect, ConnectFut, F, Fut>(
        &self,
        key: &MemberKey,
        endpoint: &str,
        verb: &'static str,
        idempotency: Idempotency,
        connect: Connect,
        verb_call: F,
    ) -> Result<T, CallError<E>>
    where
        Connect: Fn() -> ConnectFut,
        ConnectFut: Future<Output = Result<C, E>>,
        F: Fn(C) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let spec = CallSpec {
            engine: self.engine,
            verb,
            idempotency,
            policy: self.policy,
            metrics: &self.metrics,
        };
        self.cache.call(key, endpoint, spec, connect, verb_call).await
    }

    /// How many members, of every cluster, have a cached client or breaker.
    pub async fn len(&self) -> usize {
        self.cache.len().await
    }

    pub async fn is_empty(&self) -> bool {
        self.cache.is_empty().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::availability::retry::CallPolicy;

    type Clients = MemberClients<u32, &'static str, usize, &'static str>;

    fn clients() -> Clients {
        let calls = AdminCalls {
            policy: CallPolicy {
                timeout: Duration::from_millis(200),
                read_attempts: 1,
                backoff_first: Duration::from_millis(1),
                backoff_max: Duration::from_millis(1),
            },
            breaker: BreakerSettings {
                failure_threshold: 1,
                cooldown: Duration::from_secs(60),
            },
        };
        MemberClients::new("test", calls, AdminMetrics::default())
    }

    async fn call(
        clients: &Clients,
        cluster: &str,
        member: usize,
        answer: Result<u32, String>,
    ) -> Result<u32, CallError<String>> {
        let key = MemberKey::new(cluster, member.to_string());
        let endpoint = clients.routed(cluster, &member).unwrap_or("own-address");
        let answer = &answer;
        clients
            .call(
                &key,
                endpoint,
                "read",
                Idempotency::Read,
                || async { answer.clone() },
                |client| async move { Ok(client) },
            )
            .await
    }

    #[tokio::test]
    async fn a_new_login_drops_the_clusters_clients_and_a_deleted_cluster_leaves_nothing() {
        let clients = clients();
        clients.set_login("ns/a", Some("first"), |a, b| a == b).await;
        call(&clients, "ns/a", 0, Ok(1)).await.unwrap();
        call(&clients, "ns/b", 0, Ok(1)).await.unwrap();
        assert_eq!(clients.len().await, 2);

        // The same login keeps the clients; another drops those of its cluster only.
        assert!(!clients.set_login("ns/a", Some("first"), |a, b| a == b).await);
        assert_eq!(clients.len().await, 2);
        assert!(clients.set_login("ns/a", Some("second"), |a, b| a == b).await);
        assert_eq!(clients.len().await, 1);
        assert_eq!(clients.login("ns/a"), Some("second"));

        // A member that cannot be reached opens its circuit, counted in the gauge.
        assert!(call(&clients, "ns/a", 1, Err("refused".into())).await.is_err());
        assert_eq!(clients.metrics().open_circuits("test"), 1);

        clients
            .route("ns/a", 0, "elsewhere", &MemberKey::new("ns/a", "0"))
            .await;
        assert_eq!(clients.routed("ns/a", &0), Some("elsewhere"));

        clients.forget_cluster("ns/a").await;
        assert_eq!(clients.len().await, 1, "only ns/b's client is left");
        assert_eq!(clients.login("ns/a"), None);
        assert_eq!(clients.routed("ns/a", &0), None);
        assert_eq!(clients.metrics().open_circuits("test"), 0);
    }
}
