//! What every pass over a `RedisCluster` shares, in both modes: the operator's settings and
//! state, the reconcile error, the [`Pass`] a mode's story runs with (its objects, its status
//! writes, its role labels) and the conditions it sets. [`crate::reconcile`] prepares a pass and
//! hands it to [`crate::replication`] or [`crate::sharded`]; neither mode depends on the other
//! or on `reconcile`.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{
    api::{apps::v1::StatefulSet, core::v1::Pod},
    jiff::Timestamp,
};
use kube::ResourceExt;
use quorum_core::{
    availability::retry::CallError,
    conditions::ConditionUpdate,
    events::Severity,
    naming::PodHosts,
    pass::{Findings, Reason as _},
    role_labels::LabelledPods,
    runner::Context,
    status::StatusWriter,
};

use crate::{
    address::Addresses,
    admin::AdminError,
    clients::RedisClients,
    crd::{RedisCluster, RedisClusterStatus},
    reasons::Reason,
    resources::{DataNodes, NODE_COMPONENT, ROLE_LABEL, RoleLabel, SENTINEL_COMPONENT, selector},
    sentinel_events::{ListenSettings, SentinelEvents},
};

pub use quorum_core::config::{MemberAddresses, MemberConfig};

/// Operator-wide settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where members are found (`--cluster-domain`, `--member-addresses`) and whether backups
    /// may go to an `http://` S3 endpoint (`--allow-http-backups`).
    pub members: MemberConfig,
    /// The operator's own image: a restored cluster's data pods run it as their restore step.
    pub operator_image: String,
    /// How long a settled cluster waits for its next pass when nothing wakes it sooner (a watched
    /// object changing, a Sentinel switching the primary).
    pub settled_recheck: Duration,
    /// How the subscriptions to the Sentinels' primary switches behave.
    pub sentinel_events: ListenSettings,
}

/// The operator's own state in the shared context.
pub struct State {
    pub clients: RedisClients,
    pub settings: Settings,
    /// Subscriptions to the Sentinels' primary switches of replication-mode clusters.
    pub sentinel_events: SentinelEvents,
    /// When the pass after a step comes.
    pub follow_ups: quorum_core::pass::FollowUps<(Reason, String)>,
}

impl quorum_core::runner::ForgetsClusters for State {
    fn forget_cluster<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, ()> {
        // Gone: its Sentinel subscriptions go with it.
        if let Some(cluster) = quorum_core::wakeups::ObjectKey::parse(key) {
            self.sentinel_events.forget(&cluster);
        }
        self.follow_ups.forget_cluster(key);
        Box::pin(self.clients.forget_cluster(key))
    }
}

impl State {
    pub fn addresses(&self, cluster: &RedisCluster) -> Addresses {
        Addresses {
            nodes: DataNodes::of(cluster),
            hosts: PodHosts::new(&self.settings.members, cluster),
        }
    }
}

/// A failed pass, naming what failed; a failed step is an admin call the servers refused or
/// did not answer.
pub type Error = quorum_core::pass::PassError<CallError<AdminError>>;

/// What a mode's pass needs from the shared part.
pub struct Pass<'a> {
    pub context: &'a Context<State>,
    pub cluster: &'a RedisCluster,
    /// `namespace/name`, the clients' cluster key.
    pub key: String,
    pub addresses: Addresses,
    pub now: Timestamp,
}

/// Where a pass left the cluster, for the `Progressing` condition, its one event and the
/// requeue.
pub type Progress = quorum_core::pass::Progress<Reason>;

impl Pass<'_> {
    pub fn name(&self) -> String {
        self.cluster.name_any()
    }

    pub fn namespace(&self) -> String {
        self.cluster.namespace().unwrap_or_default()
    }

    /// One of the cluster's StatefulSets; `None` when it does not exist.
    pub async fn statefulset(&self, name: &str) -> Result<Option<StatefulSet>, Error> {
        let found = self
            .context
            .read::<StatefulSet>(&self.namespace(), name)
            .await
            .map_err(Error::api(format!("reading StatefulSet {name}")))?;
        Ok(found.map(Arc::unwrap_or_clone))
    }

    /// The replica count of one of the cluster's StatefulSets; `None` when it does not exist.
    pub async fn statefulset_replicas(&self, name: &str) -> Result<Option<usize>, Error> {
        Ok(replicas_of(self.statefulset(name).await?.as_ref()))
    }

    /// The data StatefulSets of this deployment (each shard's, or the one), from the cache.
    pub async fn data_statefulsets(&self) -> Result<Vec<StatefulSet>, Error> {
        let listed = self
            .context
            .cache
            .list_or_read::<StatefulSet>(
                &self.context.client,
                &self.namespace(),
                &crate::resources::labels(self.cluster, NODE_COMPONENT),
            )
            .await
            .map_err(Error::api("listing data StatefulSets"))?;
        Ok(listed.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    /// The data pods, as they are now, for this pass to label.
    pub async fn data_pods(&self) -> Result<LabelledPods, Error> {
        let listed = self
            .context
            .pods(&self.namespace(), &selector(self.cluster, NODE_COMPONENT))
            .await
            .map_err(Error::api("listing data pods"))?;
        Ok(LabelledPods::new(
            listed.into_iter().map(Arc::unwrap_or_clone).collect(),
            ROLE_LABEL,
        ))
    }

    /// The Sentinels' pods.
    pub async fn sentinel_pods(&self) -> Result<Vec<Pod>, Error> {
        let listed = self
            .context
            .pods(&self.namespace(), &selector(self.cluster, SENTINEL_COMPONENT))
            .await
            .map_err(Error::api("listing Sentinel pods"))?;
        Ok(listed.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    /// The repair a person asked for, resolved against the data `pods` and the named node's
    /// data claim (read only while a request stands); `ordinal_of` gives a node name's ordinal.
    pub async fn repair(
        &self,
        pods: &[Pod],
        ordinal_of: impl FnOnce(&str) -> Option<usize>,
    ) -> Result<Option<quorum_core::repair::PodRepair>, Error> {
        let recorded = self.cluster.status.as_ref().and_then(|s| s.repair.as_ref());
        quorum_core::repair::observe(&self.context.client, self.cluster, recorded, pods, ordinal_of)
            .await
            .map_err(Error::api("reading the data claim of the node to repair"))
    }

    /// Rebuilds data pod `pod` for a repair: its claim, then the pod (the incarnation `uid`
    /// only), are deleted, so it comes back on an empty volume.
    pub async fn wipe_data_pod(&self, pod: &str, uid: &str) -> Result<(), Error> {
        quorum_core::wipe::wipe_member(
            &self.context.client,
            &self.namespace(),
            pod,
            Some(uid.to_string()),
        )
        .await
        .map_err(Error::api(format!("wiping {pod}")))
    }

    pub async fn apply<K>(&self, object: &K) -> Result<(), Error>
    where
        K: quorum_core::cache::Cacheable + serde::Serialize,
    {
        self.context.applier.apply(object).await?;
        Ok(())
    }

    /// Publishes one of the pass's own events; its outcome is published with
    /// [`quorum_core::pass::publish`].
    pub async fn publish(&self, severity: Severity, reason: Reason, message: impl Into<String>) {
        publish(self.context, self.cluster, severity, reason, message.into()).await;
    }

    /// The writer of this pass's status: each write diffed against the one before.
    pub fn status_writer(&self) -> StatusWriter<'_, RedisCluster, RedisClusterStatus> {
        StatusWriter::new(&self.context.client, self.cluster, self.cluster.status.as_ref())
    }

    /// Counts the data nodes by health in the metrics, as the status this pass wrote says, and
    /// the voters: the Sentinels in replication mode, in cluster mode one per shard for its
    /// primary (the primaries elect a failed one's replacement).
    pub fn observe_members(&self, status: &RedisClusterStatus) {
        let voters: Vec<&str> = match self.cluster.spec.mode {
            crate::crd::Mode::Replication => status.sentinels.iter().map(|s| s.health.as_str()).collect(),
            crate::crd::Mode::Cluster => shard_voters(&status.nodes),
        };
        self.context.metrics.observe_members_of(
            crate::clients::ENGINE,
            self.cluster,
            status.nodes.iter().map(|node| node.health.as_str()),
            voters,
        );
    }

    /// Sets each data pod's role label where it differs from `roles`; pods not in `roles` keep
    /// theirs (a node the operator cannot see is not moved in or out of a Service on a guess).
    pub async fn set_role_labels(
        &self,
        pods: &mut LabelledPods,
        roles: &BTreeMap<usize, RoleLabel>,
    ) -> Result<(), Error> {
        let nodes = &self.addresses.nodes;
        pods.set(&self.context.client, &self.namespace(), |pod| {
            Some(roles.get(&nodes.ordinal_of(pod)?)?.as_str())
        })
        .await?;
        Ok(())
    }
}

/// The replica count of a StatefulSet; `None` when it does not exist.
pub fn replicas_of(statefulset: Option<&StatefulSet>) -> Option<usize> {
    statefulset
        .and_then(|s| s.spec.as_ref()?.replicas)
        .map(|r| r.max(0) as usize)
}

/// Sets `Ready`, `Progressing` and `Degraded` on `status` from a pass's findings.
pub fn set_conditions(
    status: &mut RedisClusterStatus,
    cluster: &RedisCluster,
    ready: ConditionUpdate,
    progress: &Progress,
    degraded: Option<(&'static str, String)>,
    now: Timestamp,
) {
    let generation = cluster.metadata.generation;
    status.observed_generation = generation;
    let findings = Findings {
        ready,
        progress,
        settled: "the deployment matches its spec",
        degraded,
        healthy: "every node the operator can see is healthy",
    };
    quorum_core::pass::set_conditions(&mut status.conditions, generation, findings, now);
    quorum_core::backup::set_backup_stale(
        &mut status.conditions,
        cluster.spec.backup.as_ref(),
        status.last_backup.as_ref(),
        cluster.metadata.creation_timestamp.as_ref().map(|t| t.0),
        generation,
        now,
    );
    quorum_core::backup::drill::set_drill_conditions(
        &mut status.conditions,
        status.last_drill.as_ref(),
        generation,
        now,
    );
}

pub(crate) async fn publish(
    context: &Context<State>,
    cluster: &RedisCluster,
    severity: Severity,
    reason: Reason,
    message: String,
) {
    context
        .events
        .publish(cluster, severity, reason.as_str(), "Reconcile", message)
        .await;
}

/// Cluster mode: one voter per shard that serves slots (as a down primary still shows in the
/// topology), as healthy as the best of its primaries that serve them (`Healthy` if one is; else
/// `Unknown` if a node of the shard is not reachable, which may be serving; else `Unhealthy`).
pub fn shard_voters(nodes: &[crate::crd::NodeStatus]) -> Vec<&'static str> {
    let shards: std::collections::BTreeSet<i32> = nodes.iter().filter_map(|node| node.shard).collect();
    shards
        .into_iter()
        .filter_map(|shard| {
            let of_shard = || nodes.iter().filter(move |node| node.shard == Some(shard));
            // A shard serving no slot (being added, drained, or not formed yet) does not vote.
            if of_shard().all(|node| node.slots.is_empty()) {
                return None;
            }
            Some(
                if of_shard()
                    .any(|node| node.role == "Primary" && !node.slots.is_empty() && node.health == "Healthy")
                {
                    "Healthy"
                } else if of_shard().any(|node| node.health == "Unknown") {
                    "Unknown"
                } else {
                    "Unhealthy"
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::NodeStatus;

    fn node(shard: i32, role: &str, health: &str, slots: &[&str]) -> NodeStatus {
        NodeStatus {
            name: format!("cache-{shard}-{role}"),
            role: role.into(),
            health: health.into(),
            node_id: None,
            shard: Some(shard),
            slots: slots.iter().map(|slots| (*slots).to_string()).collect(),
            following: None,
            link: None,
            message: None,
            failing_since: None,
        }
    }

    #[test]
    fn a_shard_votes_healthy_only_through_a_healthy_primary_serving_slots() {
        let nodes = [
            node(0, "Primary", "Healthy", &["0-5460"]),
            node(0, "Replica", "Healthy", &[]),
            // Its primary down, its replica not yet promoted: the shard has no voter.
            node(1, "Primary", "Unhealthy", &["5461-10922"]),
            node(1, "Replica", "Healthy", &[]),
            // A node the operator cannot reach may be serving.
            node(2, "Primary", "Unknown", &["10923-16383"]),
            node(2, "Replica", "Healthy", &[]),
            // A shard being added: no slots yet, no vote.
            node(3, "Primary", "Healthy", &[]),
            node(3, "Replica", "Healthy", &[]),
        ];
        assert_eq!(shard_voters(&nodes), ["Healthy", "Unhealthy", "Unknown"]);
    }
}
