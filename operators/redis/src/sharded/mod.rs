//! Cluster mode: hash slots sharded over primaries, each with replicas.
//!
//! One pass: observe every node ([`observe`]), decide one step ([`decide::decide`], pure),
//! size the StatefulSet, record the step in status (a slot move is recorded before it is
//! made, so an operator restarted halfway resumes it), take it ([`execute`]), label the pods
//! from what they said, and report. Failover is Redis Cluster's own; the operator follows it
//! in labels and status, asks for one to hand a primary's slots to its replica before
//! restarting it onto a new pod template, and asks for one sooner than Redis would when the
//! kubelet holds a crashed primary's server back.

pub mod decide;
pub mod observe;

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{apps::v1::StatefulSet, core::v1::Pod},
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::ResourceExt;
use quorum_core::{
    availability::{health::Health, retry::Idempotency},
    conditions::{ConditionType, ConditionUpdate},
    pass::{UnreadableRecord, publish},
    repair::{RepairRecord, WipedPod},
    rollout::{Templates, needs_take_over, pending_members, restart_pod, take_over_updates, unready_members},
};

use crate::{
    admin::{
        AdminError, RedisAdmin,
        cluster::SlotRange,
        migrate::{MigrationError, MigrationSettings, migrate_slots_until},
        rebalance::SlotMove,
    },
    clients::CallFailure,
    crd::{NodeStatus, RebalanceStatus, RedisClusterStatus, SlotMoveStatus},
    pass::replicas_of,
    pass::{Error, Pass, Progress, set_conditions},
    resources::{
        DataNodes, RoleLabel, build_shard_statefulset, build_statefulset, shard_of, statefulset_name,
    },
};

use decide::{Decision, Facts, NodeFact, Reason, Step, Topology, decide_pass, pending_moves, serving};
use observe::observe_nodes;

/// How long one pass keeps moving slots before it reports and yields; the rest of the batch
/// is left to the next pass.
const MOVE_BUDGET: Duration = Duration::from_secs(5);

/// How long a handover may take before the step is reported failed; the primary keeps its
/// slots if it did not happen (Redis ends a manual failover that did not complete by itself).
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// The recorded move's slot range, for the messages of a record that cannot be read.
const RECORDED_SLOTS_FIELD: &str = "status.rebalance.current.slots";

/// One reconcile pass in cluster mode.
pub async fn pass(pass: &Pass<'_>) -> Result<Progress, Error> {
    let name = pass.name();
    let spec = &pass.cluster.spec;
    let data = &pass.addresses.nodes;
    let statefulsets = DataStatefulSets::observe(pass).await?;
    let pods = statefulsets.pods(data.nodes_per_shard());
    let mut data_pods = pass.data_pods().await?;
    let previous = pass.cluster.status.clone().unwrap_or_default();
    let recorded_ids: BTreeMap<usize, String> = previous
        .nodes
        .iter()
        .filter_map(|node| Some((data.ordinal_of(&node.name)?, node.node_id.clone()?)))
        .collect();
    // A recorded move this operator cannot read is never taken for no move: the pass waits.
    let recorded = recorded_move(&previous);

    // Observe.
    let nodes = observe_nodes(pass, pods.unwrap_or(0), &recorded_ids).await;
    let facts = Facts {
        desired_shards: spec.shard_count(),
        nodes_per_shard: spec.nodes_per_shard(),
        pods,
        nodes,
        recorded_ids,
        recorded_move: recorded.clone().unwrap_or_default(),
        layout: formation_layout(&previous, spec.shard_count(), spec.nodes_per_shard()),
        templates: statefulsets.templates(data, data_pods.pods()),
        repair: pass
            .repair(data_pods.pods(), |member| data.ordinal_of(member))
            .await?,
        pending: pending_members(data_pods.pods(), |pod| data.ordinal_of(pod)),
        unready: unready_members(data_pods.pods(), |pod| data.ordinal_of(pod)),
        held_back: quorum_core::pod_failures::held_back(
            data_pods.pods(),
            crate::resources::SERVER_CONTAINER,
            |pod| data.ordinal_of(pod),
        ),
    };

    // Decide.
    let decision = decide_pass(&name, &facts, recorded.as_ref().err());
    let topology = Topology::new(&facts);
    tracing::info!(cluster = %pass.key, ?decision, "decided");

    // The StatefulSets: grown by a step; shrunk only after the leaving nodes are forgotten.
    let replicas = match &decision {
        Decision::Act(Step::ScaleNodes { replicas }) => *replicas,
        _ => pods.unwrap_or(facts.desired_nodes()),
    };
    let settled = |shard| shard_rolled(&facts, shard);
    statefulsets.size(pass, replicas, false, settled).await?;

    let mut progress = match &decision {
        Decision::Settled => Progress::Settled,
        Decision::Wait(wait) => Progress::from(wait.clone()),
        Decision::Act(step) => Progress::Acted {
            reason: step_reason(step),
            message: describe(data, step),
        },
    };

    // Labels and status from what the nodes said, recorded before the step is taken.
    pass.set_role_labels(&mut data_pods, &role_labels(&facts)).await?;
    let rebalance = match &recorded {
        // Kept as stored, until a person removes it or an operator that can read it resumes it.
        Err(_) => previous.rebalance.clone(),
        Ok(_) => rebalance_record(&previous, &decision, pending_moves(&facts, &topology), pass),
    };
    // A wipe is recorded before it is taken: one request wipes one pod, never a second after a
    // restart of the operator.
    let wiping = match &decision {
        Decision::Act(Step::WipeNode { pod_uid, .. }) => {
            facts.repair.as_ref().map(|repair| repair.wiping(pod_uid))
        }
        _ => None,
    };
    let wiping = wiping.as_ref();
    let mut status = build_status(pass, &facts, &topology, &progress, rebalance, wiping);
    let mut writer = pass.status_writer();
    writer.write(&status).await?;
    pass.observe_members(&status);

    // Act.
    let mut failure = None;
    let outcome = match &decision {
        Decision::Act(step) => Some((step, execute(pass, &facts, step).await)),
        _ => None,
    };
    match &outcome {
        Some((Step::RemoveShards { replicas, .. }, Ok(()))) => {
            // Forgotten everywhere: now the pods may go.
            statefulsets.size(pass, *replicas, true, settled).await?;
        }
        Some((Step::WipeNode { ordinal, pod_uid }, Ok(()))) => {
            pass.wipe_data_pod(&data.name(*ordinal), pod_uid).await?;
        }
        Some((Step::RestartNode { ordinal }, Ok(()))) => {
            // Only the pod observed: one replaced meanwhile is not restarted twice.
            if let Some(uid) = facts.templates.outdated_pod(*ordinal) {
                restart_pod(&pass.context.client, &pass.namespace(), &data.name(*ordinal), uid).await?;
            }
        }
        _ => {}
    }
    if let Some((step, Err(source))) = outcome {
        let message = format!("{} failed: {source}", describe(data, step));
        progress = Progress::Failed {
            reason: Reason::StepFailed,
            message,
        };
        status = build_status(
            pass,
            &facts,
            &topology,
            &progress,
            status.rebalance.clone(),
            wiping,
        );
        writer.write(&status).await?;
        failure = Some(Error::Step {
            step: describe(data, step),
            source,
        });
    }
    publish(&pass.context.events, pass.cluster, &progress).await;
    match failure {
        Some(error) => Err(error),
        None => Ok(progress),
    }
}

/// The data StatefulSets as this pass found them: the one StatefulSet, or each shard's by its
/// shard.
struct DataStatefulSets {
    by_shard: BTreeMap<usize, StatefulSet>,
    one: Option<StatefulSet>,
}

impl DataStatefulSets {
    async fn observe(pass: &Pass<'_>) -> Result<Self, Error> {
        let data = &pass.addresses.nodes;
        let mut found = Self {
            by_shard: BTreeMap::new(),
            one: None,
        };
        for statefulset in pass.data_statefulsets().await? {
            let own = statefulset.name_any();
            if own == statefulset_name(data.cluster()) {
                found.one = Some(statefulset);
            } else if let Some(shard) = data.shard_of_statefulset(&own) {
                found.by_shard.insert(shard, statefulset);
            }
        }
        Ok(found)
    }

    /// Which pods run their own StatefulSet's current template, by ordinal across the
    /// deployment.
    fn templates(&self, data: &DataNodes, pods: &[Pod]) -> Templates {
        match data.nodes_per_shard() {
            None => Templates::observe(self.one.as_ref(), pods, |pod| data.ordinal_of(pod)),
            Some(per_shard) => Templates::combine(self.by_shard.iter().map(|(shard, statefulset)| {
                Templates::observe(Some(statefulset), pods, |pod| {
                    data.ordinal_of(pod)
                        .filter(|ordinal| shard_of(*ordinal, per_shard) == *shard)
                })
            })),
        }
    }

    /// Pods the StatefulSets of the deployment's layout hold in all; `None` before they exist.
    /// Only shards `0..n` without a gap count: the ordinals assume them, and a shard beyond a
    /// missing one is left as it is, never taken for leaving.
    fn pods(&self, per_shard: Option<usize>) -> Option<usize> {
        let Some(per_shard) = per_shard else {
            return replicas_of(self.one.as_ref());
        };
        let contiguous = (0..)
            .take_while(|shard| self.by_shard.contains_key(shard))
            .count();
        (contiguous > 0).then(|| {
            (0..contiguous)
                .filter_map(|shard| replicas_of(self.by_shard.get(&shard)))
                .sum::<usize>()
                .min(contiguous * per_shard)
        })
    }

    /// Sizes the data StatefulSets to `nodes` pods in all.
    ///
    /// With a StatefulSet per shard: missing shards below `nodes` are created; a shard beyond
    /// them is scaled to no pods only with `remove_leaving` (after the step that made every
    /// other node forget it; its volumes go with its pods, so a shard added again starts empty)
    /// and removed once empty. An existing shard's StatefulSet, whose template may have
    /// changed, is applied only as [`ShardRoll::next`] allows, so a new pod template reaches
    /// one shard at a time, each rolled onto it and back in the cluster (`settled`) before the
    /// next. A StatefulSet made before the operator rolled cluster-mode pods itself is taken
    /// over first (no pod restarts: its template is unchanged).
    async fn size(
        &self,
        pass: &Pass<'_>,
        nodes: usize,
        remove_leaving: bool,
        settled: impl Fn(usize) -> bool,
    ) -> Result<(), Error> {
        let client = &pass.context.client;
        for statefulset in self.by_shard.values().chain(&self.one) {
            if needs_take_over(statefulset) {
                take_over_updates(client, statefulset).await?;
            }
        }
        let Some(per_shard) = pass.addresses.nodes.nodes_per_shard() else {
            return pass.apply(&build_statefulset(pass.cluster, nodes as i32)?).await;
        };
        let applier = &pass.context.applier;
        let shards = nodes.div_ceil(per_shard);
        let staying: BTreeMap<usize, bool> = self
            .by_shard
            .iter()
            .filter(|(shard, _)| **shard < shards)
            .map(|(shard, _)| (*shard, settled(*shard)))
            .collect();
        let mut roll = ShardRoll::next(&staying);
        for shard in 0..shards {
            let current = self.by_shard.get(&shard);
            if current.is_some() && !roll.may_apply(shard) {
                continue;
            }
            let stored = applier
                .apply(&build_shard_statefulset(pass.cluster, shard, per_shard as i32)?)
                .await?;
            if let Some(current) = current
                && stored.metadata.generation != current.metadata.generation
            {
                roll = ShardRoll::Only(shard);
            }
        }
        for (shard, current) in self.by_shard.range(shards..) {
            if is_empty(current) {
                applier
                    .apply_or_remove::<StatefulSet, _>(pass.cluster, &current.name_any(), None)
                    .await?;
            } else if remove_leaving {
                applier
                    .apply(&build_shard_statefulset(pass.cluster, *shard, 0)?)
                    .await?;
            }
        }
        Ok(())
    }
}

/// Which existing shards' StatefulSets a pass may apply (and so roll onto a new template).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardRoll {
    /// Every shard is settled: each in order, until one of them changes.
    InOrder,
    /// Only this one: the lowest shard not yet settled, or the one that just changed.
    Only(usize),
}

impl ShardRoll {
    /// From each staying shard's state (`true`: rolled out and back in the cluster).
    pub fn next(settled: &BTreeMap<usize, bool>) -> Self {
        settled
            .iter()
            .find(|(_, settled)| !**settled)
            .map_or(Self::InOrder, |(shard, _)| Self::Only(*shard))
    }

    fn may_apply(self, shard: usize) -> bool {
        match self {
            Self::InOrder => true,
            Self::Only(only) => only == shard,
        }
    }
}

/// Whether a StatefulSet wants no pod and has none left.
fn is_empty(statefulset: &StatefulSet) -> bool {
    replicas_of(Some(statefulset)) == Some(0) && statefulset.status.as_ref().is_none_or(|s| s.replicas == 0)
}

/// Whether a new pod template may go on to the shards after `shard`: every one of its pods runs
/// its StatefulSet's current template (read from the pods: an `OnDelete` StatefulSet's
/// controller never reports its update done) and is back in the cluster, answering with
/// `cluster_state:ok`, each replica's link to its primary up. Before any node serves
/// (formation), there is nothing a restart could disturb, so every shard may take it.
fn shard_rolled(facts: &Facts, shard: usize) -> bool {
    let serving = facts
        .nodes
        .iter()
        .any(|node| node.answered().is_some_and(|view| view.state_ok));
    let nodes = facts.nodes_per_shard;
    !serving
        || (shard * nodes..(shard + 1) * nodes).all(|ordinal| {
            facts.templates.is_current(ordinal) && facts.node(ordinal).is_some_and(NodeFact::in_the_cluster)
        })
}

/// Takes one step.
async fn execute(pass: &Pass<'_>, facts: &Facts, step: &Step) -> Result<(), CallFailure> {
    let clients = &pass.context.state.clients;
    let (key, addresses) = (&pass.key, &pass.addresses);
    let address_of = |ordinal: usize| {
        facts
            .nodes
            .iter()
            .find(|n| n.ordinal == ordinal)
            .and_then(|n| n.address)
    };
    match step {
        Step::ScaleNodes { .. } | Step::RestartNode { .. } | Step::WipeNode { .. } => Ok(()),
        Step::HandOver { replica, .. } => {
            clients
                .node(
                    key,
                    addresses,
                    *replica,
                    "cluster_failover",
                    Idempotency::Mutation,
                    |admin| async move { admin.hand_over_to_me(HANDOVER_TIMEOUT).await },
                )
                .await
        }
        Step::FailOverHeldBack { replica, .. } => {
            clients
                .node(
                    key,
                    addresses,
                    *replica,
                    "cluster_failover_force",
                    Idempotency::Mutation,
                    |admin| async move { admin.take_over_now(HANDOVER_TIMEOUT).await },
                )
                .await
        }
        Step::Form {
            introducer,
            meet,
            assign,
        } => {
            for address in meet.iter().filter_map(|ordinal| address_of(*ordinal)) {
                clients
                    .node(
                        key,
                        addresses,
                        *introducer,
                        "cluster_meet",
                        Idempotency::Mutation,
                        |admin| async move { admin.cluster_meet(address).await },
                    )
                    .await?;
            }
            for (ordinal, ranges) in assign {
                clients
                    .node(
                        key,
                        addresses,
                        *ordinal,
                        "cluster_addslotsrange",
                        Idempotency::Mutation,
                        |admin| async move { admin.cluster_add_slot_ranges(ranges).await },
                    )
                    .await?;
            }
            Ok(())
        }
        Step::Meet { pairs } => {
            let meetings = pairs
                .iter()
                .filter_map(|(from, to)| Some((*from, address_of(*to)?)))
                .map(|(from, address)| {
                    clients.node(
                        key,
                        addresses,
                        from,
                        "cluster_meet",
                        Idempotency::Mutation,
                        move |admin| async move { admin.cluster_meet(address).await },
                    )
                });
            futures::future::join_all(meetings).await.into_iter().collect()
        }
        Step::Replicate { assignments } => {
            for (node, _, primary_id) in assignments {
                clients
                    .node(
                        key,
                        addresses,
                        *node,
                        "cluster_replicate",
                        Idempotency::Mutation,
                        |admin| async move { admin.cluster_replicate(primary_id).await },
                    )
                    .await?;
            }
            Ok(())
        }
        Step::FinishMigration { slot, source, target } => {
            move_slots(pass, facts, *source, *target, SlotRange::single(*slot)).await
        }
        Step::MoveSlots {
            slots,
            source,
            target,
            ..
        } => move_slots(pass, facts, *source, *target, *slots).await,
        Step::RemoveShards { forget, on, .. } | Step::ForgetStrays { forget, on } => {
            // Every remaining node at once: a forgotten node is kept out for 60 s only, and a
            // node that still knows it would gossip it back afterwards.
            let forgets = on.iter().map(|ordinal| {
                clients.node(
                    key,
                    addresses,
                    *ordinal,
                    "cluster_forget",
                    Idempotency::Mutation,
                    |admin| async move {
                        for id in forget {
                            match admin.cluster_forget(id).await {
                                Err(error) if error.refusal().is_some_and(|m| m.contains("Unknown node")) => {
                                }
                                other => other?,
                            }
                        }
                        Ok(())
                    },
                )
            });
            futures::future::join_all(forgets).await.into_iter().collect()
        }
    }
}

/// Moves `slots` from pod `source` to pod `target` slot by slot with the resumable migration,
/// for at most [`MOVE_BUDGET`]. The migration talks to both nodes (and tells the other
/// primaries the new owner) over the cached clients; each command has the clients' timeout.
async fn move_slots(
    pass: &Pass<'_>,
    facts: &Facts,
    source: usize,
    target: usize,
    slots: SlotRange,
) -> Result<(), CallFailure> {
    let clients = &pass.context.state.clients;
    let handle = |ordinal: usize| {
        clients.node(
            &pass.key,
            &pass.addresses,
            ordinal,
            "connect",
            Idempotency::Read,
            |admin| async move { Ok(admin) },
        )
    };
    let source_admin = handle(source).await?;
    let target_admin = handle(target).await?;
    let mut others: Vec<RedisAdmin> = Vec::new();
    for node in facts
        .nodes
        .iter()
        .filter(|n| n.ordinal != source && n.ordinal != target)
        .filter(|n| n.me().is_some_and(|me| me.flags.primary))
    {
        if let Ok(admin) = handle(node.ordinal).await {
            others.push(admin);
        }
    }
    migrate_slots_until(
        &source_admin,
        &target_admin,
        slots,
        &others,
        MigrationSettings::default(),
        Some(Instant::now() + MOVE_BUDGET),
    )
    .await
    .map_err(|error| match error {
        MigrationError::Admin(error) => CallFailure::Failed(error),
        other => CallFailure::Failed(AdminError::Unexpected {
            endpoint: source_admin.endpoint().to_string(),
            command: "migrate slot",
            detail: other.to_string(),
        }),
    })?;
    Ok(())
}

/// Where a repair asked for stands, for `status.repair`; `None` once the request is gone.
/// `wiping` is the pod this pass wipes for it. The node is back once it is in the cluster
/// again: `cluster_state:ok` and a replica with its link up.
fn repair_record(facts: &Facts, wiping: Option<&WipedPod>, progress: &Progress) -> Option<RepairRecord> {
    let repair = facts.repair.as_ref()?;
    let back = repair
        .ordinal
        .and_then(|ordinal| facts.node(ordinal))
        .is_some_and(|node| node.in_the_cluster() && node.me().is_some_and(|me| me.flags.replica));
    let waiting = progress.message().unwrap_or("waiting for the next pass");
    Some(repair.record(wiping, waiting, back))
}

/// The role label of each pod that answered: a primary by its own word, a replica while its
/// link is up. Pods that did not answer keep theirs (failover is Redis's; the operator does
/// not guess).
pub fn role_labels(facts: &Facts) -> BTreeMap<usize, RoleLabel> {
    facts
        .nodes
        .iter()
        .filter_map(|node| {
            let view = node.answered()?;
            let me = view.me()?;
            let role = if me.flags.primary {
                RoleLabel::Primary
            } else if me.flags.replica && view.link_up {
                RoleLabel::Replica
            } else {
                RoleLabel::None
            };
            Some((node.ordinal, role))
        })
        .collect()
}

/// The rebalance in status: a new record for a move about to be made (keeping when the
/// rebalance started), none once nothing is left to move, else the one recorded.
fn rebalance_record(
    previous: &RedisClusterStatus,
    decision: &Decision,
    pending: Option<usize>,
    pass: &Pass<'_>,
) -> Option<RebalanceStatus> {
    let target_shards = pass.cluster.spec.shard_count() as i32;
    match decision {
        Decision::Act(Step::MoveSlots {
            planned,
            remaining_moves,
            ..
        }) => Some(RebalanceStatus {
            target_shards,
            current: Some(move_record(planned)),
            remaining_moves: *remaining_moves as i32,
            started_at: previous
                .rebalance
                .as_ref()
                .filter(|r| r.target_shards == target_shards)
                .map_or(Time(pass.now), |r| r.started_at.clone()),
        }),
        _ if pending == Some(0) => None,
        _ => previous.rebalance.clone(),
    }
}

fn build_status(
    pass: &Pass<'_>,
    facts: &Facts,
    topology: &Topology,
    progress: &Progress,
    rebalance: Option<RebalanceStatus>,
    wiping: Option<&WipedPod>,
) -> RedisClusterStatus {
    let data = &pass.addresses.nodes;
    let mut status = pass.cluster.status.clone().unwrap_or_default();
    let previous_nodes = std::mem::take(&mut status.nodes);
    let now = pass.now;
    status.repair = repair_record(facts, wiping, progress);
    // Said, not silently ignored: Redis Cluster promotes a shard's replica itself.
    status.recovery = quorum_core::recovery::request(pass.cluster, None, |_| None).map(|request| {
        request.waiting(
            "cluster mode takes no recovery request: Redis Cluster promotes a shard's replica itself, so nothing is \
             changed; remove the annotation",
        )
    });
    let name_of_id = |id: &str| {
        topology
            .ordinals
            .get(id)
            .map_or_else(|| id.to_string(), |ordinal| data.name(*ordinal))
    };
    status.nodes = facts
        .nodes
        .iter()
        .map(|node| {
            let view = node.answered();
            let me = view.and_then(|v| v.me());
            let id = topology.ids.get(&node.ordinal);
            let role = match me {
                Some(me) if me.flags.primary => "Primary",
                Some(me) if me.flags.replica => "Replica",
                _ => "Unknown",
            };
            let slots = id
                .and_then(|id| topology.ownership.get(id))
                .map(|ranges| ranges.iter().copied().map(format_range).collect())
                .unwrap_or_default();
            let replica_of = me
                .filter(|me| me.flags.replica)
                .and_then(|me| me.primary_id.as_deref());
            NodeStatus {
                name: data.name(node.ordinal),
                role: role.into(),
                health: node.health.as_str().into(),
                node_id: id.cloned(),
                shard: Some(shard_of(node.ordinal, facts.nodes_per_shard) as i32),
                slots,
                following: replica_of.map(name_of_id),
                link: replica_of
                    .and(view)
                    .map(|v| if v.link_up { "up" } else { "down" }.to_string()),
                message: node.health.detail().map(str::to_string),
                failing_since: quorum_core::status::failing_since(
                    crate::replication::previous_failing_since(&previous_nodes, &data.name(node.ordinal)),
                    &node.health,
                    now,
                ),
            }
        })
        .collect();
    status.primary = None;
    status.sentinels = vec![];
    status.shards = topology.serving_primaries() as i32;
    status.ready_nodes = facts.nodes.iter().filter(|node| node.in_the_cluster()).count() as i32;
    status.rebalance = rebalance;
    let ready = match serving(facts, topology) {
        Ok(message) => ConditionUpdate::new(ConditionType::Ready, true, "Serving", message),
        Err((reason, message)) => ConditionUpdate::new(ConditionType::Ready, false, reason, message),
    };
    let (covered, _) = topology.coverage();
    let degraded = match facts.nodes.iter().find(|n| !n.health.is_healthy()) {
        Some(node) => Some((
            if matches!(node.health, Health::Unhealthy(_)) {
                "NodeUnhealthy"
            } else {
                "NodeUnknown"
            },
            format!(
                "{}: {}",
                data.name(node.ordinal),
                node.health.detail().unwrap_or_default()
            ),
        )),
        // Before formation nothing is served yet, which is not a fault.
        None if covered != usize::from(crate::admin::cluster::SLOT_COUNT) && covered > 0 => Some((
            "SlotsUncovered",
            format!("{covered} of 16384 slots are served by exactly one primary"),
        )),
        None => None,
    };
    set_conditions(&mut status, pass.cluster, ready, progress, degraded, pass.now);
    status
}

/// `start-end`, as status writes slot ranges.
fn format_range(range: SlotRange) -> String {
    format!("{}-{}", range.start, range.end)
}

/// The slots each shard starts with: a restored backup's, whose keys are in those slots, as
/// recorded with its snapshots; an even split for a new, empty cluster.
fn formation_layout(
    status: &RedisClusterStatus,
    shards: usize,
    nodes_per_shard: usize,
) -> Vec<Vec<SlotRange>> {
    let restored = status.restore.as_ref().and_then(|restore| {
        let mut layout = vec![Vec::new(); shards];
        for snapshot in &restore.snapshots {
            let shard = usize::try_from(snapshot.ordinal).ok()? / nodes_per_shard.max(1);
            let ranges: Option<Vec<SlotRange>> =
                snapshot.slots.iter().map(|text| parse_range(text)).collect();
            layout.get_mut(shard)?.extend(ranges?);
        }
        layout.iter().all(|ranges| !ranges.is_empty()).then_some(layout)
    });
    restored.unwrap_or_else(|| decide::even_layout(shards))
}

fn parse_range(text: &str) -> Option<SlotRange> {
    let (start, end) = text.split_once('-').unwrap_or((text, text));
    let range = SlotRange::new(start.trim().parse().ok()?, end.trim().parse().ok()?);
    (range.start <= range.end).then_some(range)
}

/// The slot move recorded in status (`status.rebalance.current`), if any; a record this
/// operator cannot read is an error, never taken for no move.
pub fn recorded_move(status: &RedisClusterStatus) -> Result<Option<SlotMove>, UnreadableRecord> {
    let Some(recorded) = status.rebalance.as_ref().and_then(|r| r.current.as_ref()) else {
        return Ok(None);
    };
    Ok(Some(SlotMove {
        slots: parse_recorded_slots(&recorded.slots)?,
        from: recorded.from.clone(),
        to: recorded.to.clone(),
    }))
}

/// The record of a slot move about to be made, as [`recorded_move`] reads it back.
fn move_record(planned: &SlotMove) -> SlotMoveStatus {
    SlotMoveStatus {
        slots: format_range(planned.slots),
        from: planned.from.clone(),
        to: planned.to.clone(),
    }
}

/// The slot range of a recorded move: `start-end` as [`format_range`] writes it, with
/// `start <= end <= 16383`. Anything else is unreadable.
pub fn parse_recorded_slots(text: &str) -> Result<SlotRange, UnreadableRecord> {
    let unreadable = |problem: String| UnreadableRecord::new(RECORDED_SLOTS_FIELD, problem);
    let slot = |part: &str| {
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse::<u16>().ok())
            .flatten()
    };
    let Some((start, end)) = text
        .split_once('-')
        .and_then(|(start, end)| Some((slot(start)?, slot(end)?)))
    else {
        return Err(unreadable(format!("`{text}` is not a slot range `start-end`")));
    };
    let last = crate::admin::cluster::SLOT_COUNT - 1;
    if start > end || end > last {
        return Err(unreadable(format!(
            "`{text}` is no range of slots 0 to {last} (start at most end)"
        )));
    }
    Ok(SlotRange::new(start, end))
}

/// The event reason of a step.
pub fn step_reason(step: &Step) -> Reason {
    match step {
        Step::ScaleNodes { .. } => Reason::ScalingNodes,
        Step::Form { .. } => Reason::FormingCluster,
        Step::Meet { .. } => Reason::MeetingNodes,
        Step::FinishMigration { .. } => Reason::FinishingSlotMove,
        Step::Replicate { .. } => Reason::PlacingReplicas,
        Step::MoveSlots { .. } => Reason::MovingSlots,
        Step::RemoveShards { .. } => Reason::RemovingShards,
        Step::ForgetStrays { .. } => Reason::ForgettingStrayNodes,
        Step::RestartNode { .. } => Reason::RestartingNode,
        Step::HandOver { .. } => Reason::SwitchoverRequested,
        Step::FailOverHeldBack { .. } => Reason::FailingOverHeldBack,
        Step::WipeNode { .. } => Reason::RebuildingNode,
    }
}

/// A step in words, for events and conditions.
pub fn describe(data: &DataNodes, step: &Step) -> String {
    let node = |ordinal: &usize| data.name(*ordinal);
    let nodes = |ordinals: &mut dyn Iterator<Item = usize>| {
        ordinals.map(|o| data.name(o)).collect::<Vec<_>>().join(", ")
    };
    match step {
        Step::ScaleNodes { replicas } => format!("scaling the data nodes to {replicas} pods"),
        Step::RestartNode { ordinal } => {
            format!("restarting {} onto the current pod template", node(ordinal))
        }
        Step::WipeNode { ordinal, .. } => format!(
            "rebuilding {} on request: its claim and pod deleted, so it comes back empty under a new node id \
             and copies everything from its shard's primary",
            node(ordinal)
        ),
        Step::HandOver { primary, replica } => format!(
            "handing the slots of {}, which runs an older pod template, to its replica {} \
             (CLUSTER FAILOVER: its clients held until the replica has every write it acknowledged)",
            node(primary),
            node(replica)
        ),
        Step::FailOverHeldBack {
            primary,
            replica,
            held_back,
        } => format!(
            "asking {} to take the slots of its primary, {}, now (CLUSTER FAILOVER FORCE): the kubelet holds back \
             its server ({held_back}), so it would not answer before cluster-node-timeout",
            node(replica),
            node(primary)
        ),
        Step::Form {
            introducer, assign, ..
        } => format!(
            "forming the cluster: {} meets the others, and {} take the initial slots",
            node(introducer),
            nodes(&mut assign.iter().map(|(o, _)| *o))
        ),
        Step::Meet { pairs } => format!(
            "introducing nodes: {}",
            pairs
                .iter()
                .map(|(from, to)| format!("{} meets {}", node(from), node(to)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Step::FinishMigration { slot, source, target } => format!(
            "finishing the move of slot {slot} from {} to {}",
            node(source),
            node(target)
        ),
        Step::Replicate { assignments } => format!(
            "placing replicas: {}",
            assignments
                .iter()
                .map(|(replica, primary, _)| format!("{} follows {}", node(replica), node(primary)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Step::MoveSlots {
            planned,
            slots,
            source,
            target,
            remaining_moves,
        } => format!(
            "moving slots {} from {} to {} (part of {}; {remaining_moves} more moves planned)",
            format_range(*slots),
            node(source),
            node(target),
            format_range(planned.slots)
        ),
        Step::ForgetStrays { forget, on } => format!(
            "making {} forget node ids no pod has, which the cluster reports failed: {}",
            nodes(&mut on.iter().copied()),
            forget.join(", ")
        ),
        Step::RemoveShards { forget, replicas, .. } => format!(
            "removing {} nodes that serve no slots: every remaining node forgets them, then the StatefulSet \
             shrinks to {replicas} pods",
            forget.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_template_reaches_one_shard_at_a_time_each_settled_before_the_next() {
        let states = |settled: &[bool]| {
            settled
                .iter()
                .copied()
                .enumerate()
                .collect::<BTreeMap<usize, bool>>()
        };
        let cases = [
            (
                "every shard settled: in order, until one changes",
                states(&[true, true, true]),
                ShardRoll::InOrder,
            ),
            (
                "shard 1 rolling: only it",
                states(&[true, false, true]),
                ShardRoll::Only(1),
            ),
            (
                "shards 0 and 2 unsettled (a second change mid-roll): only the lowest",
                states(&[false, true, false]),
                ShardRoll::Only(0),
            ),
            ("no shard yet", states(&[]), ShardRoll::InOrder),
        ];
        for (case, states, expected) in cases {
            assert_eq!(ShardRoll::next(&states), expected, "{case}");
        }
        assert!(ShardRoll::Only(1).may_apply(1) && !ShardRoll::Only(1).may_apply(0));
    }

    #[test]
    fn a_restored_cluster_takes_the_layout_its_snapshots_recorded() {
        let snapshot = |ordinal: i32, slots: &[&str]| crate::crd::RestoreSnapshot {
            ordinal,
            location: format!("s3://backups/shard-{ordinal}.rdb"),
            sha256: "0".repeat(64),
            slots: slots.iter().map(|s| s.to_string()).collect(),
        };
        let mut status = RedisClusterStatus {
            restore: Some(crate::crd::RestoreStatus {
                backup_name: "nightly".into(),
                snapshots: vec![
                    snapshot(0, &["0-99", "200-8000"]),
                    snapshot(2, &["100-199", "8001-16383"]),
                ],
                image: "operator".into(),
                s3_endpoint: None,
                s3_region: None,
                credentials_secret_name: None,
                allow_http: false,
            }),
            ..RedisClusterStatus::default()
        };
        assert_eq!(
            formation_layout(&status, 2, 2),
            vec![
                vec![SlotRange::new(0, 99), SlotRange::new(200, 8000)],
                vec![SlotRange::new(100, 199), SlotRange::new(8001, 16383)],
            ]
        );
        status.restore = None;
        assert_eq!(formation_layout(&status, 2, 2), decide::even_layout(2));
    }

    #[test]
    fn recorded_ranges_read_back() {
        assert_eq!(parse_range("4096-5461"), Some(SlotRange::new(4096, 5461)));
        assert_eq!(parse_range("7"), Some(SlotRange::single(7)));
        assert_eq!(parse_range("9-3"), None);
        assert_eq!(
            parse_range(&format_range(SlotRange::new(1, 2))),
            Some(SlotRange::new(1, 2))
        );
    }

    fn status_with(current: serde_json::Value) -> RedisClusterStatus {
        serde_json::from_value(serde_json::json!({
            "rebalance": {
                "targetShards": 4,
                "current": current,
                "remainingMoves": 2,
                "startedAt": "2026-01-01T00:00:00Z"
            }
        }))
        .expect("a status as stored")
    }

    #[test]
    fn recorded_slot_moves_read_back_and_are_written_as_they_were_stored() {
        let from = format!("{:040x}", 1);
        let to = format!("{:040x}", 7);
        for (slots, range) in [
            ("4096-5461", SlotRange::new(4096, 5461)),
            ("0-0", SlotRange::single(0)),
            ("9558-10922", SlotRange::new(9558, 10922)),
            ("16383-16383", SlotRange::single(16383)),
            ("0-16383", SlotRange::new(0, 16383)),
        ] {
            let stored = serde_json::json!({"slots": slots, "from": from, "to": to});
            let status = status_with(stored.clone());
            let read = recorded_move(&status).unwrap().expect("a move is recorded");
            assert_eq!(
                read,
                SlotMove {
                    slots: range,
                    from: from.clone(),
                    to: to.clone()
                },
                "{slots}"
            );
            assert_eq!(parse_recorded_slots(slots), Ok(range));
            assert_eq!(
                serde_json::to_value(move_record(&read)).unwrap(),
                stored,
                "written as it was stored"
            );
        }
        assert_eq!(recorded_move(&RedisClusterStatus::default()), Ok(None));
        let mut between_moves = status_with(serde_json::Value::Null);
        between_moves.rebalance.as_mut().unwrap().current = None;
        assert_eq!(recorded_move(&between_moves), Ok(None));
    }

    #[test]
    fn a_malformed_recorded_slot_range_is_unreadable_never_absent() {
        for slots in [
            "",
            "7",
            "-",
            "4096-",
            "-5461",
            "5461-4096",
            "0-16384",
            "16384-16384",
            "1-2-3",
            " 1-2",
            "1-2 ",
            "+1-2",
            "a-b",
            "4096..5461",
            "0-99999",
        ] {
            let error = parse_recorded_slots(slots).unwrap_err();
            assert_eq!(error.field, "status.rebalance.current.slots", "{slots:?}");
            let status = status_with(serde_json::json!({"slots": slots, "from": "a", "to": "b"}));
            assert_eq!(recorded_move(&status).unwrap_err(), error, "{slots:?}");
            // Kept as stored, so writing the status back does not erase it.
            assert_eq!(
                serde_json::to_value(&status).unwrap()["rebalance"]["current"]["slots"],
                slots
            );
        }
    }

    #[test]
    fn unanswered_pods_keep_their_labels() {
        let facts = Facts {
            desired_shards: 3,
            nodes_per_shard: 1,
            pods: Some(1),
            nodes: vec![NodeFact {
                ordinal: 0,
                address: None,
                health: Health::Unknown("timed out".into()),
                view: None,
            }],
            recorded_ids: BTreeMap::new(),
            recorded_move: None,
            layout: decide::even_layout(3),
            templates: Templates::Unknown,
            repair: None,
            pending: Default::default(),
            unready: Default::default(),
            held_back: Default::default(),
        };
        assert!(role_labels(&facts).is_empty());
    }
}
