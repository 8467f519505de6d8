//! Gathering: what each member says about itself, and what the replicas say about the
//! primary, turned into tri-state health through `quorum_core::availability`. No Kubernetes.
//!
//! Every member is asked directly (one client per member). The primary, when the operator
//! cannot reach it, is `Unhealthy` only if a majority of the other members are replicas whose
//! IO threads positively report the connection to it lost; otherwise it is `Unknown`, which
//! never leads to a failover. A replica the operator cannot reach is `Unknown`.

use std::{collections::BTreeMap, time::Instant};

use quorum_core::availability::{
    clients::MemberKey,
    health::{Health, classify},
    member_clients::{AdminCalls, MemberClients},
    metrics::AdminMetrics,
    per_cluster::PerCluster,
    retry::{CallError, Idempotency},
};

use crate::{
    address::Addresses,
    admin::{AdminError, Credentials, IoThread, MemberReport, MySqlAdmin},
    crd::Flavor,
    decide::{MemberFact, Replication, ServerState},
};

/// The engine label in metrics.
pub const ENGINE: &str = "mysql";

/// Cached admin clients with breakers, timeouts and retries: the one way the operator talks
/// to the servers.
pub struct MySqlClients {
    /// Logged in to as root (of the server flavor), dialled at a route, by ordinal, where that
    /// differs from the address the replicas use.
    members: MemberClients<MySqlAdmin, (Flavor, Credentials), usize, std::net::SocketAddr>,
    /// The fingerprint of the application accounts last applied, by cluster key: accounts are
    /// written to the primary (and so to the binary log) only when they changed.
    applied_users: PerCluster<String>,
}

/// What one pass of gathering saw.
#[derive(Clone, Debug)]
pub struct ClusterView {
    /// Each answering member's report, by ordinal.
    pub reports: BTreeMap<usize, MemberReport>,
    /// Every member with its health, for the decision.
    pub members: Vec<MemberFact>,
}

impl MySqlClients {
    pub fn new(calls: AdminCalls, metrics: AdminMetrics) -> Self {
        Self {
            members: MemberClients::new(ENGINE, calls, metrics),
            applied_users: PerCluster::default(),
        }
    }

    /// Dials member `ordinal` of `cluster` at `address` instead of its member address.
    pub async fn route(&self, cluster: &str, ordinal: usize, address: std::net::SocketAddr) {
        self.members
            .route(
                cluster,
                ordinal,
                address,
                &MemberKey::new(cluster, ordinal.to_string()),
            )
            .await;
    }

    /// Whether the accounts with `fingerprint` differ from those last applied to `cluster`.
    pub fn users_changed(&self, cluster: &str, fingerprint: &str) -> bool {
        self.applied_users.get(cluster).as_deref() != Some(fingerprint)
    }

    pub fn users_applied(&self, cluster: &str, fingerprint: String) {
        self.applied_users.set(cluster, fingerprint);
    }

    /// Counts a change of primary and its duration.
    pub fn record_failover(&self, record: &crate::crd::FailoverRecord) {
        self.members.metrics().observe_primary_change(
            ENGINE,
            &record.kind,
            record.duration_millis as f64 / 1000.0,
        );
        if let Some(millis) = record.from_loss_millis {
            self.members
                .metrics()
                .observe_failover_from_loss(ENGINE, millis as f64 / 1000.0);
        }
    }

    /// Sets how to log in to the members of `cluster`. When the credentials change, the
    /// cluster's cached clients are dropped so the next calls log in with them.
    pub async fn set_credentials(&self, cluster: &str, flavor: Flavor, credentials: Credentials) {
        let same = |(current_flavor, current): &(Flavor, Credentials),
                    (flavor, credentials): &(Flavor, Credentials)| {
            current_flavor == flavor && current.same(credentials)
        };
        self.members
            .set_login(cluster, Some((flavor, credentials)), same)
            .await;
    }

    /// Drops the cached clients and credentials of a deleted cluster.
    pub async fn forget_cluster(&self, cluster: &str) {
        self.applied_users.forget(cluster);
        self.members.forget_cluster(cluster).await;
    }

    /// Runs one admin verb against one member through its breaker, timeout and (for reads)
    /// retries.
    pub async fn call<T, F, Fut>(
        &self,
        cluster: &str,
        addresses: &Addresses,
        ordinal: usize,
        verb: &'static str,
        idempotency: Idempotency,
        verb_call: F,
    ) -> Result<T, CallError<AdminError>>
    where
        F: Fn(MySqlAdmin) -> Fut,
        Fut: Future<Output = Result<T, AdminError>>,
    {
        let key = MemberKey::new(cluster, ordinal.to_string());
        let (host, port) = match self.members.routed(cluster, &ordinal) {
            Some(address) => (address.ip().to_string(), address.port()),
            None => (addresses.host(ordinal), addresses.port()),
        };
        let endpoint = format!("{host}:{port}");
        let timeout = self.members.policy().timeout;
        // The pool connects on its first query, so connecting is part of every call.
        let connect = || async {
            let (flavor, credentials) = self
                .members
                .login(cluster)
                .ok_or_else(|| AdminError::Unexpected(format!("no credentials known for {cluster}")))?;
            Ok(MySqlAdmin::new(flavor, &host, port, &credentials, timeout))
        };
        let result = self
            .members
            .call(&key, &endpoint, verb, idempotency, connect, verb_call)
            .await;
        if let Err(CallError::Failed(error)) = &result
            && error.is_access_denied()
        {
            // The pooled connections keep the privileges they logged in with: without new
            // ones, a privilege granted to fix this refusal would never be seen.
            self.members.cache().invalidate(&key).await;
        }
        result
    }

    /// Asks members `0..members` for their state, concurrently.
    pub async fn observe(&self, cluster: &str, addresses: &Addresses, members: usize) -> ClusterView {
        let asks = (0..members).map(|ordinal| async move {
            let report = self
                .call(
                    cluster,
                    addresses,
                    ordinal,
                    "report",
                    Idempotency::Read,
                    |admin| async move { admin.report().await },
                )
                .await;
            (ordinal, report)
        });
        let answers = futures::future::join_all(asks).await;
        let now = Instant::now();
        let mut reports = BTreeMap::new();
        let mut unreachable = BTreeMap::new();
        for (ordinal, answer) in answers {
            match answer {
                Ok(report) => {
                    reports.insert(ordinal, report);
                }
                Err(error) => {
                    unreachable.insert(ordinal, error.to_string());
                }
            }
        }
        let states: BTreeMap<usize, ServerState> = reports
            .iter()
            .map(|(ordinal, report)| (*ordinal, server_state(report, addresses, members)))
            .collect();
        let members = (0..members)
            .map(|ordinal| {
                let self_report = match (reports.get(&ordinal), unreachable.get(&ordinal)) {
                    (Some(report), _) => Ok(self_health(report)),
                    (None, Some(error)) => Err(error.clone()),
                    (None, None) => Err("not asked".to_string()),
                };
                MemberFact {
                    ordinal,
                    health: testified_health(ordinal, self_report, &states, members),
                    observed_at: now,
                    state: states.get(&ordinal).cloned(),
                }
            })
            .collect();
        ClusterView { reports, members }
    }
}

/// A member's own report of its health: a replica whose SQL thread stopped on an error is
/// Unhealthy; any other answering member is Healthy.
pub fn self_health(report: &MemberReport) -> Health {
    match &report.replica {
        Some(replica) if replica.last_sql_errno != 0 => Health::Unhealthy(format!(
            "replication SQL thread error {}: {}",
            replica.last_sql_errno, replica.last_sql_error
        )),
        _ => Health::Healthy,
    }
}

/// Combines the operator's view of `ordinal` with the testimony of the members replicating
/// from it: only they can say it is down.
fn testified_health(
    ordinal: usize,
    self_report: Result<Health, String>,
    states: &BTreeMap<usize, ServerState>,
    members: usize,
) -> Health {
    let testimony: Vec<bool> = states
        .values()
        .filter_map(|state| state.replication.as_ref())
        .filter(|replication| replication.source == Some(ordinal))
        .map(|replication| !replication.source_lost)
        .collect();
    // Replicas of another source say nothing about this member: they count as not reporting.
    classify(self_report, &testimony, members.saturating_sub(1))
}

/// The decision's view of a report.
pub fn server_state(report: &MemberReport, addresses: &Addresses, members: usize) -> ServerState {
    ServerState {
        read_only: report.read_only,
        executed: report.executed.clone(),
        replication: report.replica.as_ref().map(|replica| Replication {
            source: addresses.ordinal_of(&replica.source_host, members),
            io_running: matches!(replica.io_thread, IoThread::Running),
            sql_running: replica.sql_running,
            source_lost: replica.source_lost(),
            lag_seconds: replica.seconds_behind,
            received: replica.received.clone(),
        }),
        semi_sync_source: report.semi_sync_source_on,
        semi_sync_replica: report.semi_sync_replica_on,
        binlog_expire_seconds: report.binlog_expire_seconds,
    }
}
