//! Gathering: what each member says about itself and about its peers, turned into tri-state
//! health through `quorum_core::availability`. No Kubernetes here.
//!
//! Every member that might exist is asked for its status directly (one client per member),
//! each reachable member is asked which peers it is connected to, and the membership list is
//! taken from a member that answered. A member the operator cannot reach is `Unknown` unless a
//! majority of its peers report their connection to it down, which makes it `Unhealthy`.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use k8s_openapi::jiff::Timestamp;

use quorum_core::availability::{
    clients::MemberKey,
    health::{Health, Observation, classify},
    member_clients::{AdminCalls, MemberClients},
    metrics::AdminMetrics,
    retry::{CallError, Idempotency},
};

use crate::{
    admin::{
        AdminError, EtcdAdmin, MemberInfo, MemberReport, PeerLink, TlsMaterial, is_https, member_channel,
        metrics_client,
    },
    decide::MemberFact,
    resolver::MemberResolver,
};

/// The engine label in metrics.
pub const ENGINE: &str = "etcd";

/// Cached admin clients with breakers, timeouts and retries: the one way the operator talks
/// to etcd members.
pub struct EtcdClients {
    /// Logged in to with the cluster's client TLS material, for members on `https://` client
    /// URLs.
    members: MemberClients<EtcdAdmin, Arc<TlsMaterial>>,
    channels: Arc<MemberChannels>,
    metrics: MetricsClients,
}

/// Each member's one gRPC connection ([`member_channel`]), shared by its admin client and its
/// leader watch ([`crate::leader_events`]) rather than one each: a connection's buffers, tasks and
/// link checks cost more than anything else the operator holds per member. Kept while its
/// cluster is followed (it dials again by itself when it breaks), replaced when the cluster's TLS
/// material changes.
pub struct MemberChannels {
    timeout: std::time::Duration,
    link_check: std::time::Duration,
    /// By cluster and endpoint.
    dialled: BuiltWith<(String, String), etcd_client::Channel>,
}

impl MemberChannels {
    /// Channels dialled within `timeout`, their link checked every `link_check` while a watch
    /// holds them ([`member_channel`]).
    pub fn new(timeout: std::time::Duration, link_check: std::time::Duration) -> Self {
        Self {
            timeout,
            link_check,
            dialled: BuiltWith::default(),
        }
    }

    /// The channel to the member of `cluster` at `endpoint`, logged in to with `tls`.
    ///
    /// # Errors
    /// As [`member_channel`].
    pub fn channel(
        &self,
        cluster: &str,
        endpoint: &str,
        tls: Option<&Arc<TlsMaterial>>,
    ) -> Result<etcd_client::Channel, AdminError> {
        self.dialled
            .get_or_build((cluster.to_string(), endpoint.to_string()), tls, || {
                member_channel(
                    endpoint,
                    self.timeout,
                    self.link_check,
                    tls.map(|material| &**material),
                )
            })
    }

    fn forget_cluster(&self, cluster: &str) {
        self.dialled.retain(|(of, _)| of != cluster);
    }
}

/// The clients that read members' `/metrics`: one for every member on plain HTTP (under no
/// cluster), one per cluster for members on TLS, built on first use ([`metrics_client`] says
/// why they are shared).
#[derive(Default)]
struct MetricsClients(BuiltWith<Option<String>, reqwest::Client>);

impl MetricsClients {
    fn client(
        &self,
        cluster: &str,
        endpoint: &str,
        timeout: std::time::Duration,
        tls: Option<&Arc<TlsMaterial>>,
    ) -> Result<reqwest::Client, AdminError> {
        let material = tls.filter(|_| is_https(endpoint));
        self.0
            .get_or_build(material.map(|_| cluster.to_string()), material, || {
                metrics_client(endpoint, timeout, material.map(|material| &**material))
            })
    }

    fn forget_cluster(&self, cluster: &str) {
        self.0.retain(|of| of.as_deref() != Some(cluster));
    }
}

/// What is built from the TLS material it is for (a connection, a client), by key: built on
/// first use, and again when the material changes.
struct BuiltWith<K, T>(Mutex<Built<K, T>>);

/// By key: what was built, and the material it was built with.
type Built<K, T> = HashMap<K, (Option<Arc<TlsMaterial>>, T)>;

impl<K, T> Default for BuiltWith<K, T> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<K: Eq + std::hash::Hash, T: Clone> BuiltWith<K, T> {
    fn get_or_build(
        &self,
        key: K,
        tls: Option<&Arc<TlsMaterial>>,
        build: impl FnOnce() -> Result<T, AdminError>,
    ) -> Result<T, AdminError> {
        let mut built = self.lock();
        if let Some((built_with, thing)) = built.get(&key)
            && built_with.as_ref() == tls
        {
            return Ok(thing.clone());
        }
        let thing = build()?;
        built.insert(key, (tls.cloned(), thing.clone()));
        Ok(thing)
    }

    fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.lock().retain(|key, _| keep(key));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Built<K, T>> {
        // Every write is one insert or removal: a poisoned map is still whole.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What one pass of gathering saw.
#[derive(Clone, Debug)]
pub struct ClusterView {
    /// The membership list from a member that answered; `None` when none did.
    pub membership: Option<Vec<MemberInfo>>,
    /// Each answering member's report, by ordinal.
    pub reports: BTreeMap<usize, MemberReport>,
    /// The membership joined with health, for the decision.
    pub members: Vec<MemberFact>,
    /// Members not healthy whose leader watch broke before this pass saw them so, by ordinal,
    /// with when it broke ([`crate::leader_events`]): where their failure is dated from.
    pub heard_failing_at: BTreeMap<usize, Timestamp>,
}

impl ClusterView {
    /// The ordinal of the leader, when a member reported one that is in the membership.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().find(|m| m.leader).map(|m| m.ordinal)
    }
}

impl EtcdClients {
    /// Clients whose connections are checked every `link_check` while a member's leader watch
    /// holds them.
    pub fn new(calls: AdminCalls, metrics: AdminMetrics, link_check: std::time::Duration) -> Self {
        Self {
            channels: Arc::new(MemberChannels::new(calls.policy.timeout, link_check)),
            members: MemberClients::new(ENGINE, calls, metrics),
            metrics: MetricsClients::default(),
        }
    }

    pub fn metrics(&self) -> &AdminMetrics {
        self.members.metrics()
    }

    /// The members' connections, for their leader watches.
    pub fn channels(&self) -> Arc<MemberChannels> {
        self.channels.clone()
    }

    /// Sets the TLS material used to reach the members of `cluster` (`None`: plain HTTP, or
    /// no material, so `https://` members cannot be reached). When the material changes, the
    /// cluster's cached clients and breakers are dropped so the next calls connect with it;
    /// setting the same material again keeps them.
    pub async fn set_tls(&self, cluster: &str, tls: Option<TlsMaterial>) {
        self.members
            .set_login(cluster, tls.map(Arc::new), |current, new| current == new)
            .await;
    }

    /// The client TLS material of `cluster`, as last set.
    pub fn tls(&self, cluster: &str) -> Option<Arc<TlsMaterial>> {
        self.members.login(cluster)
    }

    /// Runs one admin verb against one member through its breaker, timeout and (for reads)
    /// retries, connecting (or reusing the cached client) first.
    pub async fn call<T, F, Fut>(
        &self,
        key: &MemberKey,
        endpoint: &str,
        verb: &'static str,
        idempotency: Idempotency,
        verb_call: F,
    ) -> Result<T, CallError<AdminError>>
    where
        F: Fn(EtcdAdmin) -> Fut,
        Fut: Future<Output = Result<T, AdminError>>,
    {
        let tls = self.members.login(&key.cluster);
        let cache = self.members.cache();
        // A client connected with other material than the cluster's now (set_tls raced with
        // its connection) is not reused.
        if cache
            .client(key, endpoint)
            .await
            .is_some_and(|client| client.tls() != tls.as_deref())
        {
            cache.invalidate(key).await;
        }
        let timeout = self.members.policy().timeout;
        let connect = || async {
            let channel = self.channels.channel(&key.cluster, endpoint, tls.as_ref())?;
            let metrics = self
                .metrics
                .client(&key.cluster, endpoint, timeout, tls.as_ref())?;
            EtcdAdmin::connect_sharing(endpoint, channel, tls.clone(), metrics).await
        };
        self.members
            .call(key, endpoint, verb, idempotency, connect, verb_call)
            .await
    }

    /// Drops the cached clients and TLS material of a deleted cluster.
    pub async fn forget_cluster(&self, cluster: &str) {
        self.members.forget_cluster(cluster).await;
        self.channels.forget_cluster(cluster);
        self.metrics.forget_cluster(cluster);
    }

    /// Gathers the cluster's state, asking members `0..candidates`.
    pub async fn observe(&self, cluster: &str, resolver: &MemberResolver, candidates: usize) -> ClusterView {
        let mut reports = BTreeMap::new();
        let mut unreachable = BTreeMap::new();
        let mut links: BTreeMap<usize, Vec<PeerLink>> = BTreeMap::new();
        let mut membership = None;
        for ordinal in 0..candidates {
            let Some(endpoint) = resolver.client_url(ordinal) else {
                continue;
            };
            let key = MemberKey::new(cluster, ordinal.to_string());
            match self
                .call(&key, &endpoint, "status", Idempotency::Read, |admin| async move {
                    admin.status().await
                })
                .await
            {
                Ok(report) => {
                    reports.insert(ordinal, report);
                }
                Err(error) => {
                    unreachable.insert(ordinal, error.to_string());
                    continue;
                }
            }
            if let Ok(peer_links) = self
                .call(
                    &key,
                    &endpoint,
                    "peer_links",
                    Idempotency::Read,
                    |admin| async move { admin.peer_links().await },
                )
                .await
            {
                links.insert(ordinal, peer_links);
            }
        }
        // The list is each member's own (the client cannot ask for a linearizable one): asked
        // of the leader first, then of members that follow one, and of a member that knows no
        // leader last, whose list may predate changes it could not hear of (a member cut off
        // from its peers still lists itself after its removal).
        for ordinal in membership_order(&reports) {
            let Some(endpoint) = resolver.client_url(ordinal) else {
                continue;
            };
            let key = MemberKey::new(cluster, ordinal.to_string());
            if let Ok(list) = self
                .call(
                    &key,
                    &endpoint,
                    "member_list",
                    Idempotency::Read,
                    |admin| async move { admin.members().await },
                )
                .await
            {
                membership = Some(list);
                break;
            }
        }
        let members = membership
            .as_deref()
            .map(|list| join(cluster, resolver, list, &reports, &unreachable, &links))
            .unwrap_or_default();
        ClusterView {
            membership,
            reports,
            members,
            heard_failing_at: BTreeMap::new(),
        }
    }
}

/// How a member's own report translates into health.
pub fn self_health(report: &MemberReport) -> Health {
    if !report.errors.is_empty() {
        return Health::Unhealthy(format!("reports errors: {}", report.errors.join("; ")));
    }
    if report.leader_id == 0 {
        return Health::Unhealthy("reports no leader".to_string());
    }
    Health::Healthy
}

fn join(
    cluster: &str,
    resolver: &MemberResolver,
    membership: &[MemberInfo],
    reports: &BTreeMap<usize, MemberReport>,
    unreachable: &BTreeMap<usize, String>,
    links: &BTreeMap<usize, Vec<PeerLink>>,
) -> Vec<MemberFact> {
    let leader_id = reports.values().map(|r| r.leader_id).find(|id| *id != 0);
    let voters = membership.iter().filter(|m| !m.learner).count();
    membership
        .iter()
        .filter_map(|member| {
            let ordinal = member
                .peer_urls
                .iter()
                .find_map(|url| resolver.ordinal_of_peer_url(url))?;
            let report = reports.get(&ordinal).filter(|r| r.member_id == member.id);
            let self_report = match report {
                Some(report) => Ok(self_health(report)),
                None => Err(unreachable
                    .get(&ordinal)
                    .cloned()
                    .unwrap_or_else(|| "not asked".to_string())),
            };
            // The testimony of the other members that answered: is their link to it up? etcd
            // creates a link's gauge on the first connection, so a peer with no gauge for the
            // member has not reached it since that peer started: that counts as "not connected".
            let peer_reports: Vec<bool> = links
                .iter()
                .filter(|(peer, _)| **peer != ordinal)
                .map(|(_, peer_links)| peer_links.iter().any(|l| l.remote == member.id && l.active))
                .collect();
            let other_voters = voters - usize::from(!member.learner);
            let health = classify(self_report, &peer_reports, other_voters);
            Some(MemberFact {
                ordinal,
                id: member.id,
                learner: member.learner,
                started: !member.name.is_empty(),
                leader: leader_id == Some(member.id),
                version: report.map(|r| r.version.clone()),
                raft_index: report.map(|r| r.raft_index),
                observation: Observation::new(
                    crate::resolver::member_name(cluster_name(cluster), ordinal),
                    health,
                    !member.learner,
                ),
                unhealthy_for: None,
            })
        })
        .collect()
}

/// `namespace/name` keys name clusters in caches; members are named after the bare name.
fn cluster_name(cluster: &str) -> &str {
    cluster.rsplit('/').next().unwrap_or(cluster)
}

/// Shared handle type used by the reconciler.
pub type SharedClients = Arc<EtcdClients>;

/// The members to ask for the membership list, in order: the one that leads, then those that
/// follow a leader, then those that know none; by ordinal within each.
fn membership_order(reports: &BTreeMap<usize, MemberReport>) -> Vec<usize> {
    let mut ordinals: Vec<usize> = reports.keys().copied().collect();
    ordinals.sort_by_key(|ordinal| {
        let report = &reports[ordinal];
        match report.leader_id {
            0 => 2,
            leader if leader == report.member_id => 0,
            _ => 1,
        }
    });
    ordinals
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Members 0 and 1 were cut off from the others: 0 knows no leader, 1 still follows the old
    /// one; 2 leads. The list is asked of 2 first, then 1, then 0.
    #[test]
    fn the_membership_is_asked_of_the_leader_first_and_of_a_leaderless_member_last() {
        let report = |member_id: u64, leader_id: u64| MemberReport {
            member_id,
            cluster_id: 1,
            leader_id,
            version: "3.6.16".into(),
            raft_index: 10,
            raft_applied_index: 10,
            errors: Vec::new(),
            learner: false,
            db_size: 0,
            revision: 1,
        };
        let reports = BTreeMap::from([(0, report(100, 0)), (1, report(101, 102)), (2, report(102, 102))]);
        assert_eq!(membership_order(&reports), vec![2, 1, 0]);
    }

    #[test]
    fn what_is_built_is_kept_for_its_material_and_built_again_for_another() {
        let material = |ca: &str| {
            Arc::new(TlsMaterial {
                ca_pem: ca.as_bytes().to_vec(),
                cert_pem: Vec::new(),
                key_pem: Vec::new(),
            })
        };
        let (first, second) = (material("first"), material("second"));
        let built: BuiltWith<&str, u32> = BuiltWith::default();
        let builds = std::cell::Cell::new(0);
        let build = || {
            builds.set(builds.get() + 1);
            Ok(builds.get())
        };
        assert_eq!(built.get_or_build("a", Some(&first), build).unwrap(), 1);
        assert_eq!(
            built.get_or_build("a", Some(&first.clone()), build).unwrap(),
            1,
            "kept"
        );
        assert_eq!(
            built.get_or_build("a", Some(&second), build).unwrap(),
            2,
            "new material"
        );
        assert_eq!(built.get_or_build("a", None, build).unwrap(), 3, "no material");
        assert_eq!(built.get_or_build("b", None, build).unwrap(), 4, "another key");
        built.retain(|key| *key != "a");
        assert_eq!(built.get_or_build("a", None, build).unwrap(), 5, "forgotten");
        assert_eq!(built.get_or_build("b", None, build).unwrap(), 4, "kept");
    }
}
