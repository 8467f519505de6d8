//! The cluster-mode decision: a pure function from what was observed to the one step to take,
//! or why to wait. Table-tested below.
//!
//! Redis Cluster fails over on its own (a replica promotes itself once a majority of primaries
//! agree its primary failed); the operator asks for it sooner only when the kubelet holds a
//! crashed primary's server back, which would otherwise keep its slots unserved for
//! `cluster-node-timeout`. It forms the cluster once, introduces
//! nodes to one another with `CLUSTER MEET` (which is also how nodes that came back on new
//! addresses find each other again), keeps each shard's replicas on their shard's primary,
//! moves slots in bounded batches toward an even share, and removes a shard only once it
//! serves no slot. Nodes are known by id, which they keep in `nodes.conf` across restarts and
//! address changes, never by address.
//!
//! The order of the rules is the order of safety: formation only while no slot has an owner
//! other than its initial one (so a cluster with data is never formed again); introductions
//! next, as they change nothing but who talks to whom; then a slot left half-moved is finished
//! before anything else moves; only then are replicas placed, slots moved and shards removed.
//! A node the operator cannot reach is never the source or target of a move, never forgotten
//! and never counted as removable.
//!
//! Last, with the cluster whole, a node rebuilt on request, then a managed roll onto the pods'
//! current templates: one shard at a time, its replicas first, then its primary after it has
//! handed its slots to a replica already restarted (`CLUSTER FAILOVER`, which holds the
//! primary's clients until the replica has every write it acknowledged), so no acknowledged
//! write is lost to a restart. A primary to be rebuilt hands its slots over the same way first.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    ops::Range,
};

use quorum_core::{
    availability::health::Health, pass::UnreadableRecord, repair::PodRepair, rollout::Templates,
};

use crate::admin::{
    cluster::{ClusterNode, SLOT_COUNT, SlotRange, myself, shared_config_epoch},
    rebalance::{SlotMove, check_removable, initial_ranges, plan_rebalance},
};
pub use crate::reasons::Reason;

/// The most slots one pass moves, so a pass stays short and its progress is reported often.
pub const MAX_SLOTS_PER_PASS: usize = 1024;

/// What one node answered.
#[derive(Clone, Debug)]
pub struct NodeView {
    /// Its `CLUSTER NODES`: its own line (`myself`) and its view of the others.
    pub nodes: Vec<ClusterNode>,
    /// `cluster_state:ok` in its `CLUSTER INFO`.
    pub state_ok: bool,
    /// For a replica, `master_link_status:up`.
    pub link_up: bool,
    /// For a replica, where it replicates from (`master_host`, `master_port`).
    pub replicating_from: Option<SocketAddr>,
    /// The replication offset it holds (`master_repl_offset`): 0 for a replica that never
    /// finished a sync from its primary.
    pub offset: u64,
}

impl NodeView {
    pub fn me(&self) -> Option<&ClusterNode> {
        myself(&self.nodes)
    }

    fn line(&self, id: &str) -> Option<&ClusterNode> {
        self.nodes.iter().find(|node| node.id == id)
    }

    fn handshake_with(&self, address: SocketAddr) -> bool {
        self.nodes
            .iter()
            .any(|node| node.flags.handshake && node.address == Some(address))
    }
}

/// One data node (pod), as observed.
#[derive(Clone, Debug)]
pub struct NodeFact {
    pub ordinal: usize,
    /// Where the other nodes reach it (its pod's address); `None` while it has none.
    pub address: Option<SocketAddr>,
    pub health: Health,
    /// Its answer, when it answered.
    pub view: Option<NodeView>,
}

impl NodeFact {
    pub fn answered(&self) -> Option<&NodeView> {
        self.view.as_ref().filter(|_| self.health.is_healthy())
    }

    pub fn me(&self) -> Option<&ClusterNode> {
        self.answered()?.me()
    }

    /// Whether it serves its part of the cluster: it answers with `cluster_state:ok`, as a
    /// primary or as a replica whose link to its primary is up.
    pub fn in_the_cluster(&self) -> bool {
        self.answered().is_some_and(|view| {
            view.state_ok
                && view
                    .me()
                    .is_some_and(|me| me.flags.primary || (me.flags.replica && view.link_up))
        })
    }
}

/// Everything the decision looks at.
#[derive(Clone, Debug)]
pub struct Facts {
    pub desired_shards: usize,
    /// A primary and its replicas.
    pub nodes_per_shard: usize,
    /// The StatefulSet's replicas; `None` before it exists.
    pub pods: Option<usize>,
    /// One per pod, by ordinal.
    pub nodes: Vec<NodeFact>,
    /// The node ids recorded in status by earlier passes, by ordinal.
    pub recorded_ids: BTreeMap<usize, String>,
    /// The slot move recorded in status before it was started.
    pub recorded_move: Option<SlotMove>,
    /// The slots each shard's first node is given at formation, by shard: the layout a restored
    /// backup recorded (its keys are in those slots), or an even split.
    pub layout: Vec<Vec<SlotRange>>,
    /// Which pods run their StatefulSet's current template.
    pub templates: Templates,
    /// A repair a person asked for (`quorum.dev/repair`), resolved against the pods.
    pub repair: Option<PodRepair>,
    /// Pods the API server reports `Pending` (not placed on a node, or their containers not
    /// started): nothing of theirs runs or serves.
    pub pending: BTreeSet<usize>,
    /// Pods not Ready by the kubelet's probes ([`quorum_core::rollout::unready_members`]).
    pub unready: BTreeSet<usize>,
    /// Pods whose server the kubelet holds back, and why ([`quorum_core::pod_failures::held_back`]).
    pub held_back: BTreeMap<usize, String>,
}

/// `shards` shards sharing the slots evenly: the layout of a new, empty cluster.
pub fn even_layout(shards: usize) -> Vec<Vec<SlotRange>> {
    initial_ranges(shards)
        .into_iter()
        .map(|range| vec![range])
        .collect()
}

impl Facts {
    pub fn desired_nodes(&self) -> usize {
        self.desired_shards * self.nodes_per_shard
    }

    fn pod_count(&self) -> usize {
        self.pods.unwrap_or(0)
    }

    pub fn node(&self, ordinal: usize) -> Option<&NodeFact> {
        self.nodes.iter().find(|node| node.ordinal == ordinal)
    }

    fn healthy(&self, ordinal: usize) -> bool {
        self.node(ordinal).is_some_and(|node| node.health.is_healthy())
    }

    fn health_of(&self, ordinal: usize) -> &'static str {
        self.node(ordinal).map_or("Unknown", |node| node.health.as_str())
    }

    /// The pods of `shard`, those that exist.
    pub fn shard_ordinals(&self, shard: usize) -> Range<usize> {
        let nodes_per_shard = self.nodes_per_shard.max(1);
        let start = shard * nodes_per_shard;
        start..(start + nodes_per_shard).min(self.pod_count()).max(start)
    }
}

/// The cluster as the facts show it: who is who, and who serves which slots.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Each pod's node id: its own answer, else the id recorded in status.
    pub ids: BTreeMap<usize, String>,
    pub ordinals: BTreeMap<String, usize>,
    /// Each primary's slots. A node that answered speaks for itself; for one that did not,
    /// the first answering node that lists it does, for slots no answering node claims.
    pub ownership: BTreeMap<String, Vec<SlotRange>>,
}

impl Topology {
    pub fn new(facts: &Facts) -> Self {
        let mut ids = BTreeMap::new();
        for node in &facts.nodes {
            let id = match node.me() {
                Some(me) => Some(me.id.clone()),
                None => facts.recorded_ids.get(&node.ordinal).cloned(),
            };
            if let Some(id) = id {
                ids.insert(node.ordinal, id);
            }
        }
        let ordinals = ids.iter().map(|(ordinal, id)| (id.clone(), *ordinal)).collect();

        let mut ownership: BTreeMap<String, Vec<SlotRange>> = BTreeMap::new();
        let mut claimed = vec![false; usize::from(SLOT_COUNT)];
        let answered: Vec<&ClusterNode> = facts.nodes.iter().filter_map(NodeFact::me).collect();
        for me in answered.iter().filter(|me| me.flags.primary) {
            ownership.insert(me.id.clone(), me.slots.clone());
            for slot in me.slots.iter().flat_map(SlotRange::slots) {
                claimed[usize::from(slot)] = true;
            }
        }
        let speaking: BTreeSet<&str> = answered.iter().map(|me| me.id.as_str()).collect();
        for view in facts.nodes.iter().filter_map(NodeFact::answered) {
            for line in &view.nodes {
                if !line.flags.primary
                    || line.flags.handshake
                    || speaking.contains(line.id.as_str())
                    || ownership.contains_key(&line.id)
                {
                    continue;
                }
                let unclaimed = line
                    .slots
                    .iter()
                    .flat_map(SlotRange::slots)
                    .filter(|slot| !claimed[usize::from(*slot)]);
                ownership.insert(line.id.clone(), as_ranges(unclaimed));
            }
        }
        Self {
            ids,
            ordinals,
            ownership,
        }
    }

    pub fn slot_count(&self, id: &str) -> usize {
        self.ownership
            .get(id)
            .map_or(0, |ranges| ranges.iter().map(SlotRange::len).sum())
    }

    fn slots_of_ordinal(&self, ordinal: usize) -> usize {
        self.ids.get(&ordinal).map_or(0, |id| self.slot_count(id))
    }

    /// Slots served by exactly one primary, and slots claimed by more than one.
    pub fn coverage(&self) -> (usize, usize) {
        let mut seen = vec![0u8; usize::from(SLOT_COUNT)];
        for slot in self.ownership.values().flatten().flat_map(SlotRange::slots) {
            let count = &mut seen[usize::from(slot)];
            *count = count.saturating_add(1);
        }
        (
            seen.iter().filter(|count| **count == 1).count(),
            seen.iter().filter(|count| **count > 1).count(),
        )
    }

    /// Primaries that serve at least one slot.
    pub fn serving_primaries(&self) -> usize {
        self.ownership
            .values()
            .filter(|ranges| !ranges.is_empty())
            .count()
    }

    /// The pod that is `shard`'s primary now: the one of its pods that serves slots (after a
    /// failover, a former replica), or, while the shard serves none, the one its other pods
    /// follow, else its first pod. `None` when two of its pods serve slots.
    pub fn shard_primary(&self, facts: &Facts, shard: usize) -> Option<usize> {
        let pods = facts.shard_ordinals(shard);
        let serving: Vec<usize> = pods.clone().filter(|o| self.slots_of_ordinal(*o) > 0).collect();
        match serving.as_slice() {
            [one] => Some(*one),
            [] => {
                let first = pods.start;
                if pods.is_empty() {
                    return None;
                }
                let followed = facts
                    .node(first)
                    .and_then(NodeFact::me)
                    .filter(|me| me.flags.replica)
                    .and_then(|me| self.ordinals.get(me.primary_id.as_deref()?))
                    .filter(|o| pods.contains(o));
                Some(followed.copied().unwrap_or(first))
            }
            _ => None,
        }
    }
}

/// Sorted slots as contiguous ranges.
pub fn as_ranges(slots: impl IntoIterator<Item = u16>) -> Vec<SlotRange> {
    let mut ranges: Vec<SlotRange> = Vec::new();
    for slot in slots {
        match ranges.last_mut() {
            Some(last) if last.end + 1 == slot => last.end = slot,
            _ => ranges.push(SlotRange::single(slot)),
        }
    }
    ranges
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Grow the StatefulSet (shrinking goes through [`Step::RemoveShards`]).
    ScaleNodes { replicas: usize },
    /// Form the cluster: `introducer` meets every node of `meet`, and each shard's first pod
    /// takes the initial slots it does not have yet. Replicas are placed by later passes, once
    /// the handshakes are done.
    Form {
        introducer: usize,
        meet: Vec<usize>,
        assign: Vec<(usize, Vec<SlotRange>)>,
    },
    /// `CLUSTER MEET`: each `(from, to)` pair, `from` meeting `to` at its current address.
    Meet { pairs: Vec<(usize, usize)> },
    /// Finish moving `slot`, left migrating or importing.
    FinishMigration { slot: u16, source: usize, target: usize },
    /// `CLUSTER REPLICATE`: each `(node, primary, primary id)`.
    Replicate {
        assignments: Vec<(usize, usize, String)>,
    },
    /// Move `slots` (a bounded batch of `planned`, recorded in status first) from pod `source`
    /// to pod `target`.
    MoveSlots {
        planned: SlotMove,
        slots: SlotRange,
        source: usize,
        target: usize,
        /// Moves of the plan after `planned`.
        remaining_moves: usize,
    },
    /// Restart pod `ordinal` onto its StatefulSet's current template: a replica, or a shard's
    /// only node.
    RestartNode { ordinal: usize },
    /// `CLUSTER FAILOVER` on `replica`, so that `primary` hands its slots over without losing
    /// an acknowledged write before it is restarted or rebuilt.
    HandOver { primary: usize, replica: usize },
    /// `CLUSTER FAILOVER FORCE` on `replica`: `primary` does not answer and the kubelet holds
    /// its server back (`held_back` says why), so the replica takes its slots now rather than
    /// after `cluster-node-timeout`, as Redis Cluster would then.
    FailOverHeldBack {
        primary: usize,
        replica: usize,
        held_back: String,
    },
    /// Rebuild replica `ordinal` on request: its claim, then its pod (`pod_uid` only), are
    /// deleted, so it comes back empty under a new node id and copies its shard's primary.
    WipeNode { ordinal: usize, pod_uid: String },
    /// `CLUSTER FORGET` each id of `forget`, none of them a pod's, on each pod of `on` (at once,
    /// as for [`Step::RemoveShards`]).
    ForgetStrays { forget: Vec<String>, on: Vec<usize> },
    /// `CLUSTER FORGET` each id of `forget` on each pod of `on` (at once: a forgotten node is
    /// kept out for only 60 s), then shrink the StatefulSet to `replicas`.
    RemoveShards {
        forget: Vec<String>,
        on: Vec<usize>,
        replicas: usize,
    },
}

/// Why no step is taken now: a reason from [`Reason`] and a sentence for people.
pub type Wait = quorum_core::pass::Wait<Reason>;

/// The decision: a step, a wait, or `Settled` (the deployment matches its spec).
pub type Decision = quorum_core::pass::Decision<Step, Reason>;

fn wait(reason: Reason, message: impl Into<String>) -> Decision {
    Decision::wait(reason, message)
}

/// Where the slot move in flight is recorded in a `RedisCluster`, as a JSON pointer (for the
/// `kubectl patch` that removes it).
pub const RECORDED_MOVE_POINTER: &str = "/status/rebalance/current";

/// The one step of a pass over the cluster `cluster`: none while the slot move recorded in status
/// cannot be read (`unreadable`), so a recorded move is neither forgotten nor resumed on a guess;
/// else [`decide`].
pub fn decide_pass(cluster: &str, facts: &Facts, unreadable: Option<&UnreadableRecord>) -> Decision {
    match unreadable {
        Some(unreadable) => wait(
            Reason::InFlightUnreadable,
            unreadable.wait_message("rediscluster", cluster, RECORDED_MOVE_POINTER),
        ),
        None => decide(facts),
    }
}

/// The one step to take now.
pub fn decide(facts: &Facts) -> Decision {
    during_roll(facts, next_step(facts))
}

/// While a roll is under way, a node restarting, rejoining or resyncing is its expected
/// progress, and the wait says so.
fn during_roll(facts: &Facts, decision: Decision) -> Decision {
    match decision {
        Decision::Wait(wait)
            if matches!(
                wait.reason,
                Reason::NodeUnknown
                    | Reason::NodeUnhealthy
                    | Reason::NodesStarting
                    | Reason::Joining
                    | Reason::ClusterStateNotOk
                    | Reason::ReplicaSyncing
            ) && facts.templates.rolling(0..facts.pod_count()) =>
        {
            Decision::wait(
                Reason::RestartInProgress,
                format!("rolling onto the current pod template: {}", wait.message),
            )
        }
        other => other,
    }
}

fn next_step(facts: &Facts) -> Decision {
    let desired = facts.desired_nodes();
    if facts.pods.is_none_or(|pods| pods < desired) {
        return Decision::Act(Step::ScaleNodes {
            replicas: desired.max(facts.pod_count()),
        });
    }
    // A pod that runs nothing disturbs nothing when it is replaced, and one stuck on an older
    // template (one its node cannot take, say) may start only on the current one.
    if let Some(ordinal) = facts.templates.stuck(&facts.pending) {
        return Decision::Act(Step::RestartNode { ordinal });
    }
    let topology = Topology::new(facts);
    if let Some(decision) = formation(facts, &topology) {
        return decision;
    }
    if let Some(step) = fail_over_held_back(facts, &topology) {
        return Decision::Act(step);
    }
    let members = members(facts, &topology);
    if let Some(pairs) = introductions(&topology, &members) {
        return Decision::Act(Step::Meet { pairs });
    }
    if let Some(decision) = unfinished_migration(facts, &topology) {
        return decision;
    }
    if let Some(why) = joining(&topology, &members) {
        return Decision::Wait(why);
    }
    if let Some(assignments) = misplaced_replicas(facts, &topology) {
        return Decision::Act(Step::Replicate { assignments });
    }
    if let Some((forget, on)) = strays(facts, &topology) {
        return Decision::Act(Step::ForgetStrays { forget, on });
    }
    rebalance_or_remove(facts, &topology)
}

/// The failover Redis Cluster would make `cluster-node-timeout` from now, asked for now: a
/// primary that serves slots does not answer, the kubelet says its server is not running and is
/// held back (a second crash within minutes waits ten seconds or more for its restart), and a
/// replica that follows it answers. `None` otherwise: an unanswered call alone is no evidence
/// that a primary is down, and Redis decides. The replica that holds the most of the primary's
/// stream takes what it has, as Redis's own failover would a moment later; never one that has
/// not finished a sync (offset 0: new, or wiped by a repair), which Redis's own failover would
/// refuse for its data's age: forced, it would take the slots empty, and the primary, back with
/// its data, would become its replica and drop it.
fn fail_over_held_back(facts: &Facts, topology: &Topology) -> Option<Step> {
    facts.held_back.iter().find_map(|(&primary, held_back)| {
        let node = facts.nodes.iter().find(|node| node.ordinal == primary)?;
        if node.answered().is_some() {
            return None;
        }
        let id = topology.ids.get(&primary)?;
        if topology.ownership.get(id).is_none_or(Vec::is_empty) {
            return None;
        }
        let replica = facts
            .nodes
            .iter()
            .filter_map(|node| Some((node, node.answered()?)))
            .filter(|(_, view)| {
                view.offset > 0
                    && view
                        .me()
                        .is_some_and(|me| me.flags.replica && me.primary_id.as_ref() == Some(id))
            })
            .max_by_key(|(node, view)| (view.offset, std::cmp::Reverse(node.ordinal)))
            .map(|(node, _)| node)?;
        Some(Step::FailOverHeldBack {
            primary,
            replica: replica.ordinal,
            held_back: held_back.clone(),
        })
    })
}

/// Node ids the nodes still list that are no pod's: what is left of a node whose volume was
/// replaced (it came back with a new id) or of one removed by hand. Forgotten only while every
/// pod answers (so none of them can be the owner of such an id), and only ids that serve no
/// slot, follow no one that answers and that every node listing them flags `fail`, Redis's own
/// verdict agreed by a majority of its primaries.
fn strays(facts: &Facts, topology: &Topology) -> Option<(Vec<String>, Vec<usize>)> {
    if facts.nodes.len() != facts.pod_count() || facts.nodes.iter().any(|n| n.answered().is_none()) {
        return None;
    }
    let pods: BTreeSet<&String> = topology.ids.values().collect();
    let views: Vec<(usize, &NodeView)> = facts
        .nodes
        .iter()
        .filter_map(|n| Some((n.ordinal, n.answered()?)))
        .collect();
    let mut listed: BTreeMap<&str, Vec<&ClusterNode>> = BTreeMap::new();
    for (_, view) in &views {
        for line in view
            .nodes
            .iter()
            .filter(|l| !l.flags.myself && !l.flags.handshake)
        {
            if !pods.contains(&line.id) {
                listed.entry(line.id.as_str()).or_default().push(line);
            }
        }
    }
    let followed: BTreeSet<&str> = views
        .iter()
        .filter_map(|(_, view)| view.me()?.primary_id.as_deref())
        .collect();
    let forget: Vec<String> = listed
        .into_iter()
        .filter(|(id, lines)| {
            !followed.contains(id)
                && lines
                    .iter()
                    .all(|line| line.flags.failed && line.slots.is_empty())
        })
        .map(|(id, _)| id.to_string())
        .collect();
    if forget.is_empty() {
        return None;
    }
    let on = views
        .iter()
        .filter(|(_, view)| view.nodes.iter().any(|line| forget.contains(&line.id)))
        .map(|(ordinal, _)| *ordinal)
        .collect();
    Some((forget, on))
}

/// Formation, or its completion after a pass that stopped halfway: only while every pod
/// answered, each keeps the id recorded for it, and every slot with an owner is owned by the
/// first pod of the shard the initial split gives it to. Anything else with uncovered slots
/// is a cluster that lost data, which is not the operator's to paper over.
fn formation(facts: &Facts, topology: &Topology) -> Option<Decision> {
    let (covered, duplicated) = topology.coverage();
    if covered == usize::from(SLOT_COUNT) || duplicated > 0 {
        return None;
    }
    let initial_owner = |slot: u16| {
        let shard = facts
            .layout
            .iter()
            .position(|ranges| ranges.iter().any(|range| range.contains(slot)))?;
        topology.ids.get(&facts.shard_ordinals(shard).start)
    };
    let consistent = topology.ownership.iter().all(|(id, owned)| {
        owned
            .iter()
            .flat_map(SlotRange::slots)
            .all(|slot| initial_owner(slot) == Some(id))
    });
    if !consistent {
        return None;
    }
    let staying = 0..facts.desired_nodes();
    if let Some(node) = staying
        .clone()
        .filter_map(|o| facts.node(o))
        .find(|n| n.me().is_none())
    {
        // With ids recorded the cluster was seen formed: its nodes are down or out of
        // sight, and what they serve is not known until they answer.
        return Some(if facts.recorded_ids.is_empty() {
            wait(
                Reason::NodesStarting,
                format!(
                    "node {} has not answered yet; the cluster forms once every node has",
                    node.ordinal
                ),
            )
        } else {
            wait(
                Reason::NodesNotAnswering,
                format!(
                    "node {} is {} and no answering node shows the slots served; nothing is changed until \
                     the nodes answer",
                    node.ordinal,
                    node.health.as_str()
                ),
            )
        });
    }
    let changed = facts
        .recorded_ids
        .iter()
        .filter(|(ordinal, _)| staying.contains(ordinal))
        .find(|(ordinal, id)| topology.ids.get(ordinal) != Some(id));
    if let Some((ordinal, recorded)) = changed {
        return Some(wait(
            Reason::NodeIdsChanged,
            format!(
                "node {ordinal} answers with id {}, not the {recorded} recorded for it: its nodes.conf was lost; \
                 the operator does not form a new cluster in place of one that served slots",
                topology.ids.get(ordinal).map_or("-", String::as_str)
            ),
        ));
    }
    let introducer = facts.node(0)?;
    let introducer_view = introducer.answered()?;
    let meet = staying
        .clone()
        .skip(1)
        .filter(|ordinal| {
            let node = facts.node(*ordinal);
            let id = topology.ids.get(ordinal);
            let address = node.and_then(|n| n.address);
            address.is_some()
                && id
                    .and_then(|id| introducer_view.line(id))
                    .and_then(|line| line.address)
                    != address
        })
        .collect();
    let mut assign = Vec::new();
    for (shard, ranges) in facts.layout.iter().enumerate() {
        let first = facts.shard_ordinals(shard).start;
        let owned: BTreeSet<u16> = topology
            .ids
            .get(&first)
            .and_then(|id| topology.ownership.get(id))
            .into_iter()
            .flatten()
            .flat_map(SlotRange::slots)
            .collect();
        let missing = as_ranges(
            ranges
                .iter()
                .flat_map(SlotRange::slots)
                .filter(|slot| !owned.contains(slot)),
        );
        if !missing.is_empty() {
            assign.push((first, missing));
        }
    }
    Some(Decision::Act(Step::Form {
        introducer: introducer.ordinal,
        meet,
        assign,
    }))
}

/// The pods that must all know one another: every pod that stays, and a leaving pod while it
/// still serves slots. Only pods that answered: the operator introduces nodes it can vouch for.
fn members<'a>(facts: &'a Facts, topology: &Topology) -> Vec<&'a NodeFact> {
    facts
        .nodes
        .iter()
        .filter(|node| node.me().is_some())
        .filter(|node| node.ordinal < facts.desired_nodes() || topology.slots_of_ordinal(node.ordinal) > 0)
        .collect()
}

/// `(from, to)` pairs where `from` does not know `to` by its id at its current address (a new
/// node, or one that came back on another address) and is not already shaking hands with
/// it. The first member introduces everyone it lacks; the others' gaps are closed pair by pair
/// only once it knows everyone, as gossip usually closes them first.
fn introductions(topology: &Topology, members: &[&NodeFact]) -> Option<Vec<(usize, usize)>> {
    let mut pairs = Vec::new();
    for from in members {
        let Some(view) = from.answered() else { continue };
        for to in members.iter().filter(|to| to.ordinal != from.ordinal) {
            let (Some(address), Some(id)) = (to.address, topology.ids.get(&to.ordinal)) else {
                continue;
            };
            let known_there = view
                .line(id)
                .is_some_and(|line| line.address == Some(address) && !line.flags.no_address);
            if !known_there && !view.handshake_with(address) {
                pairs.push((from.ordinal, to.ordinal));
            }
        }
    }
    let first = members.first()?.ordinal;
    let from_first: Vec<(usize, usize)> = pairs.iter().copied().filter(|(from, _)| *from == first).collect();
    match (from_first.is_empty(), pairs.is_empty()) {
        (_, true) => None,
        (false, _) => Some(from_first),
        (true, false) => Some(pairs),
    }
}

/// A slot some node shows as migrating or importing: finished before any other move, by the
/// resumable migration, once both of its nodes answer.
fn unfinished_migration(facts: &Facts, topology: &Topology) -> Option<Decision> {
    for node in &facts.nodes {
        let Some(me) = node.me() else { continue };
        let pending = me
            .migrating
            .iter()
            .map(|(slot, target)| {
                (
                    *slot,
                    Some(node.ordinal),
                    topology.ordinals.get(target).copied(),
                    target,
                )
            })
            .chain(me.importing.iter().map(|(slot, source)| {
                (
                    *slot,
                    topology.ordinals.get(source).copied(),
                    Some(node.ordinal),
                    source,
                )
            }))
            .next();
        let Some((slot, source, target, other)) = pending else {
            continue;
        };
        return Some(match (source, target) {
            (Some(source), Some(target)) if facts.healthy(source) && facts.healthy(target) => {
                shared_epoch(facts, topology).unwrap_or(Decision::Act(Step::FinishMigration {
                    slot,
                    source,
                    target,
                }))
            }
            (Some(source), Some(target)) => wait(
                Reason::MigrationBlocked,
                format!(
                    "slot {slot} is halfway from node {source} ({}) to node {target} ({}); it is finished \
                     once both answer, and nothing else moves meanwhile",
                    facts.health_of(source),
                    facts.health_of(target)
                ),
            ),
            _ => wait(
                Reason::StrayMigration,
                format!(
                    "node {} shows slot {slot} moving to or from {other}, which is no node of this cluster",
                    node.ordinal
                ),
            ),
        });
    }
    None
}

/// A wait while two primaries hold the same config epoch, which Redis is about to resolve by
/// giving one of them a new one: no slot moves meanwhile ([`shared_config_epoch`] says why). A
/// primary that answers speaks for itself; one that does not, by the first answering node that
/// lists it. A node flagged failed or still in a handshake pings no one, so it collides with no
/// one.
fn shared_epoch(facts: &Facts, topology: &Topology) -> Option<Decision> {
    let answered: Vec<&ClusterNode> = facts.nodes.iter().filter_map(NodeFact::me).collect();
    let speaking: BTreeSet<&str> = answered.iter().map(|me| me.id.as_str()).collect();
    let mut silent: BTreeMap<&str, &ClusterNode> = BTreeMap::new();
    for line in facts
        .nodes
        .iter()
        .filter_map(NodeFact::answered)
        .flat_map(|view| &view.nodes)
        .filter(|line| !line.flags.failed && !line.flags.handshake && !speaking.contains(line.id.as_str()))
    {
        silent.entry(line.id.as_str()).or_insert(line);
    }
    let (first, second, epoch) = shared_config_epoch(answered.into_iter().chain(silent.into_values()))?;
    let name = |id: &str| match topology.ordinals.get(id) {
        Some(ordinal) => format!("node {ordinal}"),
        None => format!("node id {id}"),
    };
    Some(wait(
        Reason::ConfigEpochShared,
        format!(
            "the primaries {} and {} both hold config epoch {epoch}; Redis gives one of them a new epoch \
             at their next ping, and no slot moves until it has (a move meanwhile could hand the slot back \
             to its source and delete its keys on the target)",
            name(first),
            name(second)
        ),
    ))
}

/// Members whose handshakes or links are not up yet.
fn joining(topology: &Topology, members: &[&NodeFact]) -> Option<Wait> {
    for from in members {
        let Some(view) = from.answered() else { continue };
        for to in members.iter().filter(|to| to.ordinal != from.ordinal) {
            let Some(id) = topology.ids.get(&to.ordinal) else {
                continue;
            };
            let joined = view
                .line(id)
                .is_some_and(|line| line.connected && !line.flags.handshake);
            if !joined {
                return Some(Wait {
                    reason: Reason::Joining,
                    message: format!("node {} is not linked to node {} yet", from.ordinal, to.ordinal),
                });
            }
        }
    }
    None
}

/// Pods of a staying shard that should replicate its primary and do not: new pods (empty
/// primaries), replicas of another node, and replicas of the right primary still connecting to
/// an address it no longer has. A pod that serves slots is never made a replica.
///
/// The last happens when every pod comes back at a new address: a replica that learns its
/// primary's new address from another node's gossip, rather than from the primary itself,
/// updates its view of the cluster but keeps replicating from the old address, its link down
/// for good. Told to replicate the same primary again, it connects to the address it now knows.
fn misplaced_replicas(facts: &Facts, topology: &Topology) -> Option<Vec<(usize, usize, String)>> {
    let mut assignments = Vec::new();
    for shard in 0..facts.desired_shards {
        let Some(primary) = topology.shard_primary(facts, shard) else {
            continue;
        };
        let Some(primary_id) = topology.ids.get(&primary) else {
            continue;
        };
        for ordinal in facts.shard_ordinals(shard).filter(|o| *o != primary) {
            let Some(view) = facts.node(ordinal).and_then(NodeFact::answered) else {
                continue;
            };
            let Some(me) = view.me() else { continue };
            let follows = me.flags.replica && me.primary_id.as_deref() == Some(primary_id.as_str());
            let serves = me.flags.primary && !me.slots.is_empty();
            let primary_line = view
                .line(primary_id)
                .filter(|line| line.flags.primary && !line.flags.handshake);
            let knows_primary = primary_line.is_some();
            let primary_address = facts.node(primary).and_then(|node| node.address);
            let knows_where_primary_is =
                primary_address.is_some() && primary_line.is_some_and(|line| line.address == primary_address);
            let replicates_from_elsewhere = follows
                && !view.link_up
                && knows_where_primary_is
                && view.replicating_from != primary_address;
            // A replica of a node that still owns slots (a primary whose volume was lost and
            // came back as a new, empty node under another id) holds those slots' keys, maybe
            // their only copy: never made a replica of a node that serves none.
            let holds_others_slots = me.flags.replica
                && !follows
                && me
                    .primary_id
                    .as_deref()
                    .and_then(|followed| view.line(followed))
                    .is_some_and(|line| !line.slots.is_empty());
            if holds_others_slots && topology.slots_of_ordinal(primary) == 0 {
                continue;
            }
            if (!follows && !serves && knows_primary) || replicates_from_elsewhere {
                assignments.push((ordinal, primary, primary_id.clone()));
            }
        }
    }
    (!assignments.is_empty()).then_some(assignments)
}

fn rebalance_or_remove(facts: &Facts, topology: &Topology) -> Decision {
    let desired = facts.desired_nodes();
    let pods = facts.pod_count();
    let scaling_in = pods > desired;
    if let Some(ordinal) = (0..desired).find(|o| !topology.ids.contains_key(o)) {
        return wait(
            Reason::NodesStarting,
            format!("node {ordinal} has not answered yet"),
        );
    }
    let mut primaries = BTreeSet::new();
    for shard in 0..facts.desired_shards {
        match topology.shard_primary(facts, shard) {
            Some(primary) if topology.ids.contains_key(&primary) => {
                primaries.insert(topology.ids[&primary].clone());
            }
            _ => {
                return wait(
                    Reason::ShardWithoutPrimary,
                    format!(
                        "shard {shard} has more than one node serving slots; waiting for Redis to settle it"
                    ),
                );
            }
        }
    }
    let plan = match plan_rebalance(&topology.ownership, &primaries) {
        Ok(plan) => plan,
        Err(error) => {
            return wait(
                Reason::SlotsUncovered,
                format!(
                    "{error}; no slot moves and no node leaves until every slot is served by one primary"
                ),
            );
        }
    };
    let blocked_reason = if scaling_in {
        Reason::ScaleInBlocked
    } else {
        Reason::RebalanceBlocked
    };
    if let Some(first) = plan.first() {
        return match choose_move(facts, topology, &plan) {
            Some((planned, range)) => {
                let source = topology.ordinals[&planned.from];
                let target = topology.ordinals[&planned.to];
                // A node that has not learned every slot's owner yet (one that just met the
                // cluster) refuses MIGRATE with CLUSTERDOWN, leaving the slot half moved, and
                // refuses every client that `ASK` sends there the same way.
                if let Some(node) = [source, target]
                    .into_iter()
                    .filter_map(|ordinal| facts.node(ordinal))
                    .find(|node| node.answered().is_some_and(|view| !view.state_ok))
                {
                    return wait(
                        Reason::ClusterStateNotOk,
                        format!(
                            "node {} does not report cluster_state:ok yet; no slot moves to or from it until it does",
                            node.ordinal
                        ),
                    );
                }
                if let Some(wait) = shared_epoch(facts, topology) {
                    return wait;
                }
                let batch_end = range.start as usize + range.len().min(MAX_SLOTS_PER_PASS) - 1;
                Decision::Act(Step::MoveSlots {
                    slots: SlotRange::new(range.start, batch_end as u16),
                    planned,
                    source,
                    target,
                    remaining_moves: plan.len() - 1,
                })
            }
            None => wait(
                blocked_reason,
                format!(
                    "{} slot moves are planned and every one involves a node the operator cannot vouch for \
                     (the next: {} from {} to {}); slots move only between nodes that answer",
                    plan.len(),
                    first.slots,
                    describe_id(facts, topology, &first.from),
                    describe_id(facts, topology, &first.to),
                ),
            ),
        };
    }
    if scaling_in {
        return remove_shards(facts, topology);
    }
    match settled_or_waiting(facts) {
        Decision::Settled => facts
            .repair
            .as_ref()
            .and_then(|repair| repair_node(facts, topology, repair))
            .unwrap_or_else(|| roll(facts, topology)),
        waiting => waiting,
    }
}

/// The next step of a repair a person asked for, reached only with the cluster whole: the
/// named replica is wiped, once per request (the pod recorded as wiped is wiped again only
/// while it is still that pod); a primary hands its slots to a linked replica first, and a
/// shard's only node is refused. `None` once the request is done with.
fn repair_node(facts: &Facts, topology: &Topology, repair: &PodRepair) -> Option<Decision> {
    let ordinal = match repair.target(facts.pod_count()) {
        Ok(ordinal) => ordinal,
        Err(refusal) => return Some(wait(Reason::RepairRefused, refusal)),
    };
    if repair.wiped() {
        return None;
    }
    let shard = ordinal / facts.nodes_per_shard.max(1);
    let Some(primary) = topology.shard_primary(facts, shard) else {
        return Some(wait(
            Reason::RestartBlocked,
            format!("node {ordinal} is to be rebuilt and shard {shard} has no single primary"),
        ));
    };
    if ordinal == primary {
        if facts.shard_ordinals(shard).len() == 1 {
            return Some(wait(
                Reason::RepairRefused,
                format!(
                    "node {ordinal} is the only node of shard {shard}: there is nothing to rebuild it from, so \
                     nothing is changed; remove the annotation"
                ),
            ));
        }
        return Some(match linked_replica(facts, topology, shard, primary, |_| true) {
            Some(replica) => Decision::Act(Step::HandOver { primary, replica }),
            None => wait(
                Reason::RestartBlocked,
                format!(
                    "node {ordinal}, shard {shard}'s primary, hands its slots over before it is rebuilt; \
                     none of its replicas is linked to it"
                ),
            ),
        });
    }
    Some(match repair.pod_uid.clone() {
        Some(pod_uid) => Decision::Act(Step::WipeNode { ordinal, pod_uid }),
        None => wait(
            Reason::RestartInProgress,
            format!("node {ordinal} is to be rebuilt and has no pod yet"),
        ),
    })
}

/// A node of `shard` other than `primary`, accepted by `eligible`, that replicates `primary`
/// with its link up: one that can take the primary's slots with `CLUSTER FAILOVER`.
fn linked_replica(
    facts: &Facts,
    topology: &Topology,
    shard: usize,
    primary: usize,
    eligible: impl Fn(usize) -> bool,
) -> Option<usize> {
    let primary_id = topology.ids.get(&primary);
    facts.shard_ordinals(shard).find(|o| {
        *o != primary
            && eligible(*o)
            && facts.node(*o).and_then(NodeFact::answered).is_some_and(|view| {
                view.link_up
                    && view
                        .me()
                        .is_some_and(|me| me.flags.replica && me.primary_id.as_ref() == primary_id)
            })
    })
}

/// The next step of a managed roll onto the pods' current templates, `Settled` when every pod
/// runs its own. Reached only with the cluster whole (every node healthy, `cluster_state:ok`,
/// every replica linked, no slot to move), so each restart starts from a whole cluster. The
/// lowest shard with a pod behind goes first: its replicas one at a time, then its primary,
/// once it has handed its slots to a replica already restarted. A shard of one node is
/// restarted as it is: there is no one to hand its slots to.
fn roll(facts: &Facts, topology: &Topology) -> Decision {
    let templates = &facts.templates;
    if let Templates::Unknown = templates {
        return Decision::Settled;
    }
    if let Some(ordinal) =
        (0..facts.pod_count()).find(|o| !templates.is_current(*o) && !templates.is_outdated(*o))
    {
        return wait(
            Reason::RestartInProgress,
            format!("rolling onto the current pod template: node {ordinal}'s pod is being replaced"),
        );
    }
    let Some(shard) = (0..facts.desired_shards)
        .find(|shard| facts.shard_ordinals(*shard).any(|o| templates.is_outdated(o)))
    else {
        return Decision::Settled;
    };
    if let Some(ordinal) = facts.unready.first() {
        return wait(
            Reason::RestartInProgress,
            format!(
                "rolling onto the current pod template: node {ordinal}'s pod is not Ready by its probes yet; \
                 the next node restarts once it is"
            ),
        );
    }
    let Some(primary) = topology.shard_primary(facts, shard) else {
        return wait(
            Reason::RestartBlocked,
            format!("shard {shard} runs an older pod template and has no single primary"),
        );
    };
    if let Some(ordinal) = facts
        .shard_ordinals(shard)
        .find(|o| *o != primary && templates.is_outdated(*o))
    {
        return Decision::Act(Step::RestartNode { ordinal });
    }
    if facts.shard_ordinals(shard).len() == 1 {
        return Decision::Act(Step::RestartNode { ordinal: primary });
    }
    match linked_replica(facts, topology, shard, primary, |o| templates.is_current(o)) {
        Some(replica) => Decision::Act(Step::HandOver { primary, replica }),
        None => wait(
            Reason::RestartBlocked,
            format!(
                "shard {shard}'s primary, node {primary}, runs an older pod template and hands its slots over \
                 before its restart; none of its replicas on the current template is linked to it"
            ),
        ),
    }
}

/// The recorded move while the plan still has it (so a restarted operator carries on with it),
/// else the first planned move between two nodes that answer. The range is what is left of
/// the move.
fn choose_move(facts: &Facts, topology: &Topology, plan: &[SlotMove]) -> Option<(SlotMove, SlotRange)> {
    let movable = |step: &SlotMove| {
        let healthy = |id: &String| topology.ordinals.get(id).is_some_and(|o| facts.healthy(*o));
        healthy(&step.from) && healthy(&step.to)
    };
    if let Some(recorded) = &facts.recorded_move {
        for step in plan
            .iter()
            .filter(|s| s.from == recorded.from && s.to == recorded.to && movable(s))
        {
            let start = step.slots.start.max(recorded.slots.start);
            let end = step.slots.end.min(recorded.slots.end);
            if start <= end {
                return Some((recorded.clone(), SlotRange::new(start, end)));
            }
        }
    }
    plan.iter()
        .find(|s| movable(s))
        .map(|step| (step.clone(), step.slots))
}

fn describe_id(facts: &Facts, topology: &Topology, id: &str) -> String {
    match topology.ordinals.get(id) {
        Some(ordinal) => format!("node {ordinal} ({})", facts.health_of(*ordinal)),
        None => format!("node id {id} (no pod of this cluster)"),
    }
}

/// The leaving pods serve no slot: every remaining node forgets them, then they go. Never
/// while a leaving node is Unknown (it might serve slots the others do not know of), or a
/// remaining node does not answer (it would keep the forgotten nodes and gossip them back).
fn remove_shards(facts: &Facts, topology: &Topology) -> Decision {
    let desired = facts.desired_nodes();
    let leaving = desired..facts.pod_count();
    let mut forget = Vec::new();
    for ordinal in leaving.clone() {
        let health = facts.node(ordinal).map(|n| &n.health);
        if !matches!(health, Some(Health::Healthy | Health::Unhealthy(_))) {
            return wait(
                Reason::ScaleInBlocked,
                format!(
                    "node {ordinal} is leaving and the operator cannot reach it; it is neither forgotten nor \
                     removed until it answers or the cluster reports it failed"
                ),
            );
        }
        let Some(id) = topology.ids.get(&ordinal) else {
            return wait(
                Reason::ScaleInBlocked,
                format!("node {ordinal} is leaving and its node id was never seen"),
            );
        };
        if let Err(error) = check_removable(&topology.ownership, id) {
            return wait(Reason::ScaleInBlocked, format!("node {ordinal}: {error}"));
        }
        forget.push(id.clone());
    }
    if let Some(ordinal) = (0..desired).find(|o| !facts.healthy(*o)) {
        return wait(
            Reason::ScaleInBlocked,
            format!(
                "every remaining node must forget the leaving ones within 60 s; node {ordinal} is {}",
                facts.health_of(ordinal)
            ),
        );
    }
    let known: BTreeSet<&String> = (0..desired)
        .filter_map(|o| facts.node(o)?.answered())
        .flat_map(|view| view.nodes.iter().map(|line| &line.id))
        .collect();
    forget.retain(|id| known.contains(id));
    Decision::Act(Step::RemoveShards {
        forget,
        on: (0..desired).collect(),
        replicas: desired,
    })
}

fn settled_or_waiting(facts: &Facts) -> Decision {
    if let Some(node) = facts.nodes.iter().find(|n| !n.health.is_healthy()) {
        return wait(
            if matches!(node.health, Health::Unhealthy(_)) {
                Reason::NodeUnhealthy
            } else {
                Reason::NodeUnknown
            },
            format!(
                "node {} is {}",
                node.ordinal,
                node.health.detail().unwrap_or_default()
            ),
        );
    }
    if let Some(node) = facts
        .nodes
        .iter()
        .find(|n| n.answered().is_some_and(|v| !v.state_ok))
    {
        return wait(
            Reason::ClusterStateNotOk,
            format!("node {} does not report cluster_state:ok yet", node.ordinal),
        );
    }
    if let Some(node) = facts.nodes.iter().find(|n| {
        n.answered()
            .is_some_and(|v| v.me().is_some_and(|me| me.flags.replica) && !v.link_up)
    }) {
        return wait(
            Reason::ReplicaSyncing,
            format!("node {} is syncing from its primary", node.ordinal),
        );
    }
    Decision::Settled
}

/// How many slot moves the even share still needs, when it can be planned (every staying
/// shard has one primary with a known id, and every slot one owner).
pub fn pending_moves(facts: &Facts, topology: &Topology) -> Option<usize> {
    let primaries = (0..facts.desired_shards)
        .map(|shard| topology.ids.get(&topology.shard_primary(facts, shard)?).cloned())
        .collect::<Option<BTreeSet<String>>>()?;
    plan_rebalance(&topology.ownership, &primaries)
        .ok()
        .map(|plan| plan.len())
}

/// Whether the cluster serves every slot with every shard whole: `Ok` with a summary, or the
/// reason and message of the first thing missing.
pub fn serving(facts: &Facts, topology: &Topology) -> Result<String, (&'static str, String)> {
    let (covered, duplicated) = topology.coverage();
    if covered != usize::from(SLOT_COUNT) {
        return Err((
            "SlotsUncovered",
            format!(
                "{covered} of {SLOT_COUNT} slots are served by one primary ({duplicated} are claimed twice)"
            ),
        ));
    }
    for node in &facts.nodes {
        match node.answered() {
            None => {
                return Err((
                    "NodeNotAnswering",
                    format!("node {} is {}", node.ordinal, node.health.as_str()),
                ));
            }
            Some(view) if !view.state_ok => {
                return Err((
                    "ClusterStateNotOk",
                    format!("node {} does not report cluster_state:ok", node.ordinal),
                ));
            }
            Some(_) => {}
        }
    }
    for shard in 0..facts.desired_shards {
        let Some(primary) = topology.shard_primary(facts, shard) else {
            return Err(("ShardNotReady", format!("shard {shard} has no single primary")));
        };
        let Some(primary_id) = topology
            .ids
            .get(&primary)
            .filter(|id| topology.slot_count(id) > 0)
        else {
            return Err(("ShardNotReady", format!("shard {shard} serves no slots")));
        };
        let shard_pods = facts.shard_ordinals(shard);
        if shard_pods.len() < facts.nodes_per_shard {
            return Err(("ShardNotReady", format!("shard {shard} is missing pods")));
        }
        for ordinal in shard_pods.filter(|o| *o != primary) {
            let linked = facts
                .node(ordinal)
                .and_then(NodeFact::answered)
                .is_some_and(|view| {
                    view.link_up
                        && view.me().is_some_and(|me| {
                            me.flags.replica && me.primary_id.as_deref() == Some(primary_id.as_str())
                        })
                });
            if !linked {
                return Err((
                    "ShardNotReady",
                    format!(
                        "node {ordinal} is not a linked replica of shard {shard}'s primary (node {primary})"
                    ),
                ));
            }
        }
    }
    Ok(format!(
        "{} shards serve all {SLOT_COUNT} slots, each with its replicas linked",
        topology.serving_primaries()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::cluster::parse_cluster_nodes;

    // Two pods per shard: ordinals 0,1 shard 0; 2,3 shard 1; 4,5 shard 2; 6,7 shard 3.
    fn id(ordinal: usize) -> String {
        format!("{:040x}", ordinal + 1)
    }

    fn address(ordinal: usize) -> SocketAddr {
        format!("127.0.9.{}:6379", ordinal + 1).parse().unwrap()
    }

    /// One node's state, to render into `CLUSTER NODES` lines.
    #[derive(Clone, Debug)]
    struct Node {
        ordinal: usize,
        address: SocketAddr,
        primary_of: Option<usize>,
        slots: Vec<SlotRange>,
        migrating: Vec<(u16, usize)>,
        importing: Vec<(u16, usize)>,
        failed: bool,
        /// A replica shows its primary's.
        config_epoch: u64,
    }

    fn primary(ordinal: usize, slots: &[SlotRange]) -> Node {
        Node {
            ordinal,
            address: address(ordinal),
            primary_of: None,
            slots: slots.to_vec(),
            migrating: vec![],
            importing: vec![],
            failed: false,
            config_epoch: ordinal as u64 + 1,
        }
    }

    fn replica(ordinal: usize, of: usize) -> Node {
        Node {
            primary_of: Some(of),
            config_epoch: of as u64 + 1,
            ..primary(ordinal, &[])
        }
    }

    fn line(node: &Node, me: bool) -> String {
        let mut flags = vec![];
        if me {
            flags.push("myself");
        }
        flags.push(if node.primary_of.is_some() {
            "slave"
        } else {
            "master"
        });
        if node.failed {
            flags.push("fail");
        }
        let mut text = format!(
            "{} {}@{} {} {} 0 0 {} connected",
            id(node.ordinal),
            node.address,
            node.address.port() + 10000,
            flags.join(","),
            node.primary_of.map_or("-".to_string(), id),
            node.config_epoch,
        );
        for range in &node.slots {
            text.push_str(&format!(" {}-{}", range.start, range.end));
        }
        if me {
            for (slot, to) in &node.migrating {
                text.push_str(&format!(" [{slot}->-{}]", id(*to)));
            }
            for (slot, from) in &node.importing {
                text.push_str(&format!(" [{slot}-<-{}]", id(*from)));
            }
        }
        text
    }

    /// The view of `me` when it knows `known`.
    fn view(me: &Node, known: &[Node]) -> NodeView {
        let mut text = line(me, true);
        for other in known.iter().filter(|o| o.ordinal != me.ordinal) {
            text.push('\n');
            text.push_str(&line(other, false));
        }
        NodeView {
            nodes: parse_cluster_nodes(&text).unwrap(),
            state_ok: true,
            link_up: me.primary_of.is_some(),
            replicating_from: me.primary_of.map(address),
            offset: 1000,
        }
    }

    fn answering(node: &Node, known: &[Node]) -> NodeFact {
        NodeFact {
            ordinal: node.ordinal,
            address: Some(address(node.ordinal)),
            health: Health::Healthy,
            view: Some(view(node, known)),
        }
    }

    fn unreachable(ordinal: usize) -> NodeFact {
        NodeFact {
            ordinal,
            address: Some(address(ordinal)),
            health: Health::Unknown("timed out".into()),
            view: None,
        }
    }

    fn facts(shards: usize, nodes: Vec<NodeFact>) -> Facts {
        Facts {
            desired_shards: shards,
            nodes_per_shard: 2,
            pods: Some(nodes.len()),
            recorded_ids: (0..nodes.len()).map(|o| (o, id(o))).collect(),
            nodes,
            recorded_move: None,
            layout: even_layout(shards),
            templates: Templates::Unknown,
            repair: None,
            pending: BTreeSet::new(),
            unready: BTreeSet::new(),
            held_back: BTreeMap::new(),
        }
    }

    /// A formed cluster of `shards` even shards, each primary with its replica.
    fn formed(shards: usize) -> Vec<Node> {
        initial_ranges(shards)
            .into_iter()
            .enumerate()
            .flat_map(|(shard, range)| [primary(2 * shard, &[range]), replica(2 * shard + 1, 2 * shard)])
            .collect()
    }

    fn everyone_knows_everyone(nodes: &[Node]) -> Vec<NodeFact> {
        nodes.iter().map(|node| answering(node, nodes)).collect()
    }

    fn reason(decision: &Decision) -> Reason {
        match decision {
            Decision::Wait(wait) => wait.reason,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    #[test]
    fn a_held_back_primary_hands_its_slots_to_its_replica_at_once() {
        /// `nodes` where `down` does not answer and the kubelet holds back the servers of
        /// `held_back`.
        fn with_one_down(nodes: &[Node], down: usize, held_back: &[usize]) -> Facts {
            let answers = nodes
                .iter()
                .map(|node| {
                    if node.ordinal == down {
                        unreachable(down)
                    } else {
                        answering(node, nodes)
                    }
                })
                .collect();
            let mut facts = facts(3, answers);
            facts.held_back = held_back
                .iter()
                .map(|&ordinal| (ordinal, "exited 3 s after its restart".to_string()))
                .collect();
            facts
        }
        let takes_over =
            |facts: &Facts| matches!(decide(facts), Decision::Act(Step::FailOverHeldBack { .. }));

        let nodes = formed(3);
        assert_eq!(
            decide(&with_one_down(&nodes, 2, &[2])),
            Decision::Act(Step::FailOverHeldBack {
                primary: 2,
                replica: 3,
                held_back: "exited 3 s after its restart".into(),
            })
        );
        // Its replica never finished a sync (new, or wiped by a repair): it holds none of the
        // slots' keys, so it is not forced to take them; Redis's own failover refuses it too.
        let mut unsynced = with_one_down(&nodes, 2, &[2]);
        unsynced.nodes[3].view.as_mut().unwrap().offset = 0;
        assert!(!takes_over(&unsynced));
        // Unanswered, but the kubelet says nothing (a restart on its way, or the network):
        // Redis decides.
        assert!(!takes_over(&with_one_down(&nodes, 2, &[])));
        // A held-back replica serves no slots: nothing to take over.
        assert!(!takes_over(&with_one_down(&nodes, 3, &[3])));
        // Once the replica serves the slots, the former primary, still held back, is left be.
        let mut after = nodes.clone();
        after[2] = Node {
            failed: true,
            ..replica(2, 3)
        };
        after[3] = primary(3, &nodes[2].slots);
        assert!(!takes_over(&with_one_down(&after, 2, &[2])));
    }

    #[test]
    fn a_formed_cluster_is_settled_and_serving() {
        let facts = facts(3, everyone_knows_everyone(&formed(3)));
        assert_eq!(decide(&facts), Decision::Settled);
        let topology = Topology::new(&facts);
        assert!(
            serving(&facts, &topology).is_ok(),
            "{:?}",
            serving(&facts, &topology)
        );
        assert_eq!(topology.serving_primaries(), 3);
    }

    #[test]
    fn pods_come_first() {
        let mut facts = facts(3, vec![]);
        facts.pods = None;
        assert_eq!(decide(&facts), Decision::Act(Step::ScaleNodes { replicas: 6 }));
        facts.pods = Some(4);
        assert_eq!(decide(&facts), Decision::Act(Step::ScaleNodes { replicas: 6 }));
    }

    #[test]
    fn fresh_nodes_form_a_cluster_once_every_one_answered() {
        let fresh: Vec<Node> = (0..6).map(|o| primary(o, &[])).collect();
        let mut starting: Vec<NodeFact> = fresh.iter().map(|n| answering(n, &[])).collect();
        starting[5] = unreachable(5);
        let mut waiting = facts(3, starting);
        waiting.recorded_ids.clear();
        assert_eq!(reason(&decide(&waiting)), "NodesStarting");

        let mut answered = facts(3, fresh.iter().map(|n| answering(n, &[])).collect());
        answered.recorded_ids.clear();
        let ranges = initial_ranges(3);
        assert_eq!(
            decide(&answered),
            Decision::Act(Step::Form {
                introducer: 0,
                meet: vec![1, 2, 3, 4, 5],
                assign: vec![(0, vec![ranges[0]]), (2, vec![ranges[1]]), (4, vec![ranges[2]])],
            })
        );
    }

    #[test]
    fn a_restored_cluster_forms_with_the_slots_its_backup_recorded() {
        // Backed up after a rebalance: each shard's keys are in these slots, not an even split.
        let layout = vec![
            vec![SlotRange::new(0, 99), SlotRange::new(200, 5000)],
            vec![SlotRange::new(100, 199), SlotRange::new(5001, 10999)],
            vec![SlotRange::new(11000, 16383)],
        ];
        let fresh: Vec<Node> = (0..6).map(|o| primary(o, &[])).collect();
        let mut restored = facts(3, fresh.iter().map(|n| answering(n, &[])).collect());
        restored.recorded_ids.clear();
        restored.layout = layout.clone();
        assert_eq!(
            decide(&restored),
            Decision::Act(Step::Form {
                introducer: 0,
                meet: vec![1, 2, 3, 4, 5],
                assign: vec![
                    (0, layout[0].clone()),
                    (2, layout[1].clone()),
                    (4, layout[2].clone())
                ],
            })
        );
    }

    #[test]
    fn a_formation_stopped_halfway_is_completed_without_touching_assigned_slots() {
        // Met, and shard 0 has its slots; the pass stopped before shards 1 and 2 got theirs.
        let ranges = initial_ranges(3);
        let mut nodes: Vec<Node> = (0..6).map(|o| primary(o, &[])).collect();
        nodes[0].slots = vec![ranges[0]];
        let facts = facts(3, everyone_knows_everyone(&nodes));
        assert_eq!(
            decide(&facts),
            Decision::Act(Step::Form {
                introducer: 0,
                meet: vec![],
                assign: vec![(2, vec![ranges[1]]), (4, vec![ranges[2]])],
            })
        );
    }

    #[test]
    fn nodes_with_new_ids_and_no_slots_are_not_formed_over_a_recorded_cluster() {
        // Every pod lost its nodes.conf: new ids, no slots. Status remembers the old cluster.
        let fresh: Vec<Node> = (0..6).map(|o| primary(o, &[])).collect();
        let mut lost = facts(3, fresh.iter().map(|n| answering(n, &[])).collect());
        lost.recorded_ids = (0..6).map(|o| (o, format!("{:040x}", o + 100))).collect();
        assert_eq!(reason(&decide(&lost)), "NodeIdsChanged");
    }

    #[test]
    fn a_formed_cluster_with_every_node_down_is_left_alone() {
        let down = facts(3, (0..6).map(unreachable).collect());
        assert_eq!(reason(&decide(&down)), "NodesNotAnswering");
    }

    #[test]
    fn a_full_restart_on_new_addresses_is_met_again_not_formed() {
        // Every node came back on a new address, keeping its id and slots, and still knows the
        // others at their old addresses.
        let old = formed(3);
        let mut facts = facts(3, everyone_knows_everyone(&old));
        for node in &mut facts.nodes {
            node.address = Some(format!("127.0.8.{}:6379", node.ordinal + 1).parse().unwrap());
        }
        let decision = decide(&facts);
        assert_eq!(
            decision,
            Decision::Act(Step::Meet {
                pairs: (1..6).map(|to| (0, to)).collect()
            })
        );
    }

    #[test]
    fn once_the_first_node_knows_everyone_the_others_gaps_are_closed() {
        let nodes = formed(3);
        let mut facts = facts(3, everyone_knows_everyone(&nodes));
        // Node 3 does not know node 5 yet.
        let without_five: Vec<Node> = nodes.iter().filter(|n| n.ordinal != 5).cloned().collect();
        facts.nodes[3] = answering(&nodes[3], &without_five);
        assert_eq!(decide(&facts), Decision::Act(Step::Meet { pairs: vec![(3, 5)] }));
    }

    /// Pod 0, a primary, came back from a lost volume as a new, empty node while the others
    /// still list its old id, failed, with its slots, and its replica (pod 1) has not taken
    /// them over: pod 1 holds the shard's only copy, so it is not made a replica of the empty
    /// node (a full sync from it would drop every key of the shard).
    #[test]
    fn a_replica_holding_a_lost_primarys_slots_is_not_pointed_at_an_empty_node() {
        let reborn = format!("{:040x}", 777);
        let reborn_line = format!(
            "{reborn} {}@{} master - 0 0 2 connected",
            address(0),
            address(0).port() + 10000
        );
        let mut nodes = formed(3);
        nodes[0].failed = true;
        let mut facts = facts(3, everyone_knows_everyone(&nodes));
        for node in &mut facts.nodes[1..] {
            let view = node.view.as_mut().unwrap();
            view.nodes.extend(parse_cluster_nodes(&reborn_line).unwrap());
        }
        facts.nodes[1].view.as_mut().unwrap().link_up = false;
        let mut own = vec![format!(
            "{reborn} {}@{} myself,master - 0 0 2 connected",
            address(0),
            address(0).port() + 10000
        )];
        own.extend(nodes[1..].iter().map(|node| line(node, false)));
        facts.nodes[0].view = Some(NodeView {
            nodes: parse_cluster_nodes(&own.join("\n")).unwrap(),
            state_ok: false,
            link_up: false,
            replicating_from: None,
            offset: 0,
        });
        // Nothing is done: slots move only between nodes that answer, and the old id does not.
        let decision = decide(&facts);
        assert!(matches!(decision, Decision::Wait(_)), "{decision:?}");
    }

    #[test]
    fn new_replicas_follow_their_shards_primary_after_joining() {
        let mut nodes = formed(3);
        nodes[3] = primary(3, &[]);
        nodes[5] = primary(5, &[]);
        let facts = facts(3, everyone_knows_everyone(&nodes));
        assert_eq!(
            decide(&facts),
            Decision::Act(Step::Replicate {
                assignments: vec![(3, 2, id(2)), (5, 4, id(4))]
            })
        );
    }

    #[test]
    fn scaling_out_meets_the_new_shard_places_its_replica_then_moves_slots_in_batches() {
        let mut nodes = formed(3);
        nodes.push(primary(6, &[]));
        nodes.push(primary(7, &[]));
        // The new pods know nobody yet.
        let mut out = facts(4, everyone_knows_everyone(&nodes[..6]));
        out.nodes.push(answering(&nodes[6], &[]));
        out.nodes.push(answering(&nodes[7], &[]));
        out.pods = Some(8);
        out.recorded_ids.retain(|o, _| *o < 6);
        assert_eq!(
            decide(&out),
            Decision::Act(Step::Meet {
                pairs: vec![(0, 6), (0, 7)]
            })
        );

        let met = facts(4, everyone_knows_everyone(&nodes));
        assert_eq!(
            decide(&met),
            Decision::Act(Step::Replicate {
                assignments: vec![(7, 6, id(6))]
            })
        );

        nodes[7] = replica(7, 6);
        let placed = facts(4, everyone_knows_everyone(&nodes));
        let Decision::Act(Step::MoveSlots {
            planned,
            slots,
            source,
            target,
            remaining_moves,
        }) = decide(&placed)
        else {
            panic!("expected a move, got {:?}", decide(&placed));
        };
        assert_eq!((source, target), (0, 6));
        assert_eq!(planned.to, id(6));
        assert_eq!(planned.slots, SlotRange::new(4096, 5461));
        assert_eq!(slots, SlotRange::new(4096, 4096 + MAX_SLOTS_PER_PASS as u16 - 1));
        assert_eq!(remaining_moves, 2);
    }

    #[test]
    fn no_slot_moves_to_or_from_a_node_that_does_not_report_cluster_state_ok() {
        // A node that just met the cluster answers MIGRATE with CLUSTERDOWN until it has
        // learned every slot's owner, and so would every client sent there with ASK.
        let mut nodes = formed(3);
        nodes.push(primary(6, &[]));
        nodes.push(replica(7, 6));
        for (not_ok, role) in [(6, "target"), (0, "source")] {
            let mut joining = facts(4, everyone_knows_everyone(&nodes));
            joining.nodes[not_ok].view.as_mut().unwrap().state_ok = false;
            let decision = decide(&joining);
            assert_eq!(
                reason(&decision),
                Reason::ClusterStateNotOk,
                "the {role}: {decision:?}"
            );
            assert_eq!(decision.step(), None);
        }
        assert!(matches!(
            decide(&facts(4, everyone_knows_everyone(&nodes))),
            Decision::Act(Step::MoveSlots { .. })
        ));
    }

    #[test]
    fn no_slot_moves_and_no_half_moved_slot_is_finished_while_two_primaries_share_a_config_epoch() {
        // A cluster formed without SET-CONFIG-EPOCH reports cluster_state:ok while its primaries
        // still share epoch 0. Were a slot moved then, a source given a new epoch after the
        // target took the slot would claim it back, and the target would delete its keys.
        let mut nodes = formed(3);
        nodes.push(primary(6, &[]));
        nodes.push(replica(7, 6));
        let settled = facts(4, everyone_knows_everyone(&nodes));
        assert!(matches!(decide(&settled), Decision::Act(Step::MoveSlots { .. })));

        // The source and a primary that takes no part in the move.
        let mut sharing = nodes.clone();
        sharing[2].config_epoch = 1;
        sharing[3].config_epoch = 1;
        let decision = decide(&facts(4, everyone_knows_everyone(&sharing)));
        assert_eq!(reason(&decision), Reason::ConfigEpochShared, "{decision:?}");
        let Decision::Wait(wait) = &decision else {
            unreachable!()
        };
        assert!(
            wait.message
                .contains("node 0 and node 2 both hold config epoch 1"),
            "{}",
            wait.message
        );

        // A primary that does not answer, as the others last saw it.
        let mut silent = facts(4, everyone_knows_everyone(&sharing));
        silent.nodes[2] = unreachable(2);
        silent.nodes[3] = answering(&sharing[3], &sharing);
        assert_eq!(reason(&decide(&silent)), Reason::ConfigEpochShared);

        // ... but not one every node flags as failed, which pings no one.
        let mut failed = sharing.clone();
        failed[2].failed = true;
        let mut with_failed = facts(4, everyone_knows_everyone(&failed));
        with_failed.nodes[2] = unreachable(2);
        let decision = decide(&with_failed);
        assert!(
            !matches!(&decision, Decision::Wait(wait) if wait.reason == Reason::ConfigEpochShared),
            "{decision:?}"
        );

        // A half-moved slot waits too, then is finished once the epochs differ.
        let mut half = sharing.clone();
        half[0].migrating = vec![(4200, 6)];
        half[6].importing = vec![(4200, 0)];
        assert_eq!(
            reason(&decide(&facts(4, everyone_knows_everyone(&half)))),
            Reason::ConfigEpochShared
        );
        half[2].config_epoch = 9;
        half[3].config_epoch = 9;
        assert_eq!(
            decide(&facts(4, everyone_knows_everyone(&half))),
            Decision::Act(Step::FinishMigration {
                slot: 4200,
                source: 0,
                target: 6
            })
        );
    }

    #[test]
    fn a_recorded_move_that_cannot_be_read_moves_no_slot_and_takes_no_step() {
        let mut nodes = formed(3);
        nodes.push(primary(6, &[]));
        nodes.push(replica(7, 6));
        let mut pending = facts(4, everyone_knows_everyone(&nodes));
        pending.recorded_move = None;
        assert!(matches!(
            decide_pass("cache", &pending, None),
            Decision::Act(Step::MoveSlots { .. })
        ));
        let unreadable = UnreadableRecord::new("status.rebalance.current.slots", "`9-3` is no range");
        let decision = decide_pass("cache", &pending, Some(&unreadable));
        assert_eq!(decision.step(), None);
        let Decision::Wait(wait) = decision else {
            panic!("expected a wait, got {decision:?}");
        };
        assert_eq!(wait.reason, Reason::InFlightUnreadable);
        assert_eq!(
            wait.message,
            unreadable.wait_message("rediscluster", "cache", "/status/rebalance/current")
        );
        assert!(
            wait.message.contains("kubectl patch rediscluster cache"),
            "{}",
            wait.message
        );
        assert!(
            wait.message.contains("status.rebalance.current.slots"),
            "{}",
            wait.message
        );
        // Whatever else is pending: pods to add are not added either.
        pending.pods = Some(6);
        pending.desired_shards = 5;
        assert_eq!(
            reason(&decide_pass("cache", &pending, Some(&unreadable))),
            "InFlightUnreadable"
        );
    }

    #[test]
    fn a_recorded_move_is_resumed_where_it_stopped() {
        let mut nodes = formed(3);
        nodes.push(primary(6, &[SlotRange::new(4096, 4999)]));
        nodes.push(replica(7, 6));
        nodes[0].slots = vec![SlotRange::new(0, 4095), SlotRange::new(5000, 5461)];
        let mut resumed = facts(4, everyone_knows_everyone(&nodes));
        // Recorded before it started: the second giver's move, chosen when the first was blocked.
        let recorded = SlotMove {
            slots: SlotRange::new(9558, 10922),
            from: id(2),
            to: id(6),
        };
        resumed.recorded_move = Some(recorded.clone());
        // Node 2 already gave 9558-9999 away.
        resumed.nodes[2] = answering(
            &primary(2, &[SlotRange::new(5462, 9557), SlotRange::new(10000, 10922)]),
            &nodes,
        );
        for node in &mut resumed.nodes {
            if let Some(view) = &mut node.view
                && let Some(line) = view.nodes.iter_mut().find(|l| l.id == id(6))
            {
                line.slots = vec![SlotRange::new(4096, 4999), SlotRange::new(9558, 9999)];
            }
        }
        let Decision::Act(Step::MoveSlots {
            planned,
            slots,
            source,
            ..
        }) = decide(&resumed)
        else {
            panic!("expected a move, got {:?}", decide(&resumed));
        };
        assert_eq!(planned, recorded);
        assert_eq!(source, 2);
        assert_eq!(slots, SlotRange::new(10000, 10922));
    }

    #[test]
    fn a_migrating_slot_is_finished_before_anything_else() {
        let mut nodes = formed(3);
        nodes.push(primary(6, &[]));
        nodes.push(primary(7, &[]));
        nodes[0].migrating = vec![(4200, 6)];
        nodes[6].importing = vec![(4200, 0)];
        // A replica to place and slots to move are pending too.
        let pending = facts(4, everyone_knows_everyone(&nodes));
        assert_eq!(
            decide(&pending),
            Decision::Act(Step::FinishMigration {
                slot: 4200,
                source: 0,
                target: 6
            })
        );
        // Only the target shows it (the source's MIGRATING was never set).
        nodes[0].migrating.clear();
        let half = facts(4, everyone_knows_everyone(&nodes));
        assert_eq!(
            decide(&half),
            Decision::Act(Step::FinishMigration {
                slot: 4200,
                source: 0,
                target: 6
            })
        );
        // The source does not answer: nothing moves, nothing else happens.
        let mut blocked = facts(4, everyone_knows_everyone(&nodes));
        blocked.nodes[0] = unreachable(0);
        assert_eq!(reason(&decide(&blocked)), "MigrationBlocked");
    }

    #[test]
    fn slots_never_move_to_or_from_an_unknown_node() {
        let mut nodes = formed(3);
        nodes.push(primary(6, &[]));
        nodes.push(replica(7, 6));
        let mut out = facts(4, everyone_knows_everyone(&nodes));
        out.nodes[6] = unreachable(6);
        assert_eq!(reason(&decide(&out)), "RebalanceBlocked");

        // Only one giver is unknown: the others' moves go ahead.
        let mut partly = facts(4, everyone_knows_everyone(&nodes));
        partly.nodes[0] = unreachable(0);
        let Decision::Act(Step::MoveSlots { source, target, .. }) = decide(&partly) else {
            panic!("expected a move, got {:?}", decide(&partly));
        };
        assert_eq!((source, target), (2, 6));
    }

    #[test]
    fn scaling_in_empties_the_leaving_primary_whichever_pod_it_is_now() {
        // Shard 3 failed over: pod 7 is its primary now.
        let mut nodes = formed(4);
        nodes[6] = replica(6, 7);
        nodes[7] = primary(7, &[initial_ranges(4)[3]]);
        let shrinking = facts(3, everyone_knows_everyone(&nodes));
        let Decision::Act(Step::MoveSlots { source, planned, .. }) = decide(&shrinking) else {
            panic!("expected a move, got {:?}", decide(&shrinking));
        };
        assert_eq!(source, 7);
        assert_eq!(planned.from, id(7));
    }

    #[test]
    fn a_scale_in_involving_an_unknown_node_waits_and_forgets_nothing() {
        let nodes = formed(4);
        let mut shrinking = facts(3, everyone_knows_everyone(&nodes));
        shrinking.nodes[6] = unreachable(6);
        let decision = decide(&shrinking);
        assert_eq!(reason(&decision), "ScaleInBlocked", "{decision:?}");

        // Its slots are gone, but it is Unknown: still not forgotten.
        let mut emptied = formed(4);
        emptied[6].slots.clear();
        for (shard, range) in initial_ranges(3).into_iter().enumerate() {
            emptied[2 * shard].slots = vec![range];
        }
        let mut unknown_leaver = facts(3, everyone_knows_everyone(&emptied));
        unknown_leaver.nodes[7] = unreachable(7);
        assert_eq!(reason(&decide(&unknown_leaver)), "ScaleInBlocked");

        // A remaining node is Unknown: the forget could not reach it in time.
        let mut unknown_stayer = facts(3, everyone_knows_everyone(&emptied));
        unknown_stayer.nodes[3] = unreachable(3);
        assert_eq!(reason(&decide(&unknown_stayer)), "ScaleInBlocked");

        let ready = facts(3, everyone_knows_everyone(&emptied));
        assert_eq!(
            decide(&ready),
            Decision::Act(Step::RemoveShards {
                forget: vec![id(6), id(7)],
                on: (0..6).collect(),
                replicas: 6
            })
        );
    }

    #[test]
    fn a_leaving_node_that_still_owns_slots_is_never_forgotten() {
        // The views cannot be balanced (a slot is unserved): no plan, so no move; and the
        // leaving primary still owns slots, so it is not removed either.
        let mut nodes = formed(4);
        nodes[0].slots = vec![SlotRange::new(0, 4000)];
        let shrinking = facts(3, everyone_knows_everyone(&nodes));
        let decision = decide(&shrinking);
        assert_eq!(reason(&decision), "SlotsUncovered");
        assert!(!matches!(decision, Decision::Act(Step::RemoveShards { .. })));
    }

    #[test]
    fn an_unreachable_node_that_the_cluster_reports_failed_is_unhealthy_not_unknown_for_removal() {
        let mut emptied = formed(4);
        emptied[6].slots.clear();
        for (shard, range) in initial_ranges(3).into_iter().enumerate() {
            emptied[2 * shard].slots = vec![range];
        }
        let mut crashed = facts(3, everyone_knows_everyone(&emptied));
        crashed.nodes[7] = NodeFact {
            health: Health::Unhealthy("5 of 7 peers flag it fail".into()),
            ..unreachable(7)
        };
        assert!(matches!(
            decide(&crashed),
            Decision::Act(Step::RemoveShards { .. })
        ));
    }

    #[test]
    fn what_is_left_of_a_replaced_node_is_forgotten_once_every_pod_answers() {
        let ghost = format!("{:040x}", 999);
        let nodes = formed(3);
        let haunted = |failed: bool| {
            let mut facts = facts(3, everyone_knows_everyone(&nodes));
            for node in &mut facts.nodes {
                let line = format!(
                    "{ghost} :0@0 master,{}noaddr - 0 0 0 disconnected",
                    if failed { "fail," } else { "" }
                );
                node.view
                    .as_mut()
                    .unwrap()
                    .nodes
                    .extend(parse_cluster_nodes(&line).unwrap());
            }
            facts
        };
        assert_eq!(
            decide(&haunted(true)),
            Decision::Act(Step::ForgetStrays {
                forget: vec![ghost.clone()],
                on: (0..6).collect()
            })
        );
        // Not agreed failed: it may be a node being added by hand; left alone.
        assert_eq!(decide(&haunted(false)), Decision::Settled);
        // A pod does not answer: the id might be its own.
        let mut unsure = haunted(true);
        unsure.nodes[3] = unreachable(3);
        unsure.recorded_ids.remove(&3);
        assert!(!matches!(
            decide(&unsure),
            Decision::Act(Step::ForgetStrays { .. })
        ));
    }

    #[test]
    fn an_unknown_node_is_not_settled_and_keeps_its_slots_in_the_picture() {
        let nodes = formed(3);
        let mut facts = facts(3, everyone_knows_everyone(&nodes));
        facts.nodes[2] = unreachable(2);
        assert_eq!(reason(&decide(&facts)), "NodeUnknown");
        let topology = Topology::new(&facts);
        assert_eq!(topology.coverage(), (usize::from(SLOT_COUNT), 0));
        assert_eq!(topology.slot_count(&id(2)), 5461);
        assert_eq!(serving(&facts, &topology).unwrap_err().0, "NodeNotAnswering");
    }

    #[test]
    fn a_replica_still_replicating_from_its_primarys_old_address_is_told_to_replicate_it_again() {
        let nodes = formed(3);
        let mut facts = facts(3, everyone_knows_everyone(&nodes));
        let view = facts.nodes[3].view.as_mut().unwrap();
        view.link_up = false;
        view.replicating_from = Some(SocketAddr::from(([10, 0, 9, 9], 6379)));
        let follows = facts.nodes[3].me().unwrap().primary_id.clone().unwrap();
        let primary = *Topology::new(&facts).ordinals.get(&follows).unwrap();
        assert_eq!(
            decide(&facts),
            Decision::Act(Step::Replicate {
                assignments: vec![(3, primary, follows)]
            })
        );
        // Still connecting to the right address: a link coming up is waited for, not redone.
        facts.nodes[3].view.as_mut().unwrap().replicating_from = Some(address(primary));
        assert_eq!(reason(&decide(&facts)), "ReplicaSyncing");
    }

    #[test]
    fn a_replica_with_its_link_down_is_not_settled_nor_serving() {
        let nodes = formed(3);
        let mut facts = facts(3, everyone_knows_everyone(&nodes));
        facts.nodes[1].view.as_mut().unwrap().link_up = false;
        assert_eq!(reason(&decide(&facts)), "ReplicaSyncing");
        let topology = Topology::new(&facts);
        assert_eq!(serving(&facts, &topology).unwrap_err().0, "ShardNotReady");
    }

    /// A formed cluster of `shards` shards of one node each (no replicas).
    fn lone_shards(shards: usize) -> Facts {
        let nodes: Vec<Node> = initial_ranges(shards)
            .into_iter()
            .enumerate()
            .map(|(shard, range)| primary(shard, &[range]))
            .collect();
        let mut lone = facts(shards, everyone_knows_everyone(&nodes));
        lone.nodes_per_shard = 1;
        lone
    }

    /// `facts` with the pods of `outdated` on an older template and every other pod on the
    /// current one.
    fn on_templates(mut facts: Facts, outdated: &[usize]) -> Facts {
        facts.templates = Templates::Known {
            outdated: outdated.iter().map(|o| (*o, format!("uid-{o}"))).collect(),
            current: (0..facts.nodes.len()).filter(|o| !outdated.contains(o)).collect(),
        };
        facts
    }

    /// Shard `shard` of `formed` after its replica took its primary's slots.
    fn handed_over(mut nodes: Vec<Node>, shard: usize) -> Vec<Node> {
        let (old, new) = (2 * shard, 2 * shard + 1);
        let slots = nodes[old].slots.clone();
        nodes[new] = primary(new, &slots);
        nodes[old] = replica(old, new);
        nodes
    }

    #[test]
    fn a_new_template_restarts_a_shards_replica_then_hands_its_slots_over_and_restarts_the_old_primary() {
        let whole = everyone_knows_everyone(&formed(3));
        // Shard 1 (nodes 2 and 3, node 2 its primary) took the new template.
        assert_eq!(
            decide(&on_templates(facts(3, whole.clone()), &[2, 3])),
            Decision::Act(Step::RestartNode { ordinal: 3 }),
            "the replica first"
        );
        assert_eq!(
            decide(&on_templates(facts(3, whole.clone()), &[2])),
            Decision::Act(Step::HandOver {
                primary: 2,
                replica: 3
            }),
            "the primary hands its slots to the restarted replica"
        );
        let after = everyone_knows_everyone(&handed_over(formed(3), 1));
        assert_eq!(
            decide(&on_templates(facts(3, after.clone()), &[2])),
            Decision::Act(Step::RestartNode { ordinal: 2 }),
            "the old primary, a replica now, last"
        );
        assert_eq!(decide(&on_templates(facts(3, after), &[])), Decision::Settled);
        assert_eq!(decide(&on_templates(facts(3, whole), &[])), Decision::Settled);
    }

    #[test]
    fn the_lowest_shard_behind_rolls_first_and_a_one_node_shard_restarts_as_it_is() {
        let whole = everyone_knows_everyone(&formed(3));
        assert_eq!(
            decide(&on_templates(facts(3, whole), &[0, 1, 4, 5])),
            Decision::Act(Step::RestartNode { ordinal: 1 })
        );
        let lone = lone_shards(3);
        assert_eq!(
            decide(&on_templates(lone, &[1, 2])),
            Decision::Act(Step::RestartNode { ordinal: 1 })
        );
    }

    #[test]
    fn a_roll_waits_for_the_whole_cluster_and_says_so() {
        // Node 3 restarted and not back yet: nothing else restarts.
        let mut restarting = everyone_knows_everyone(&formed(3));
        restarting[3] = unreachable(3);
        let decision = decide(&on_templates(facts(3, restarting), &[2]));
        assert_eq!(reason(&decision), "RestartInProgress", "{decision:?}");

        // Node 3 back and resyncing: no handover to it yet.
        let mut syncing = everyone_knows_everyone(&formed(3));
        syncing[3].view.as_mut().unwrap().link_up = false;
        let decision = decide(&on_templates(facts(3, syncing.clone()), &[2]));
        assert_eq!(reason(&decision), "RestartInProgress", "{decision:?}");
        // The same wait with no roll under way is what it is.
        assert_eq!(
            reason(&decide(&on_templates(facts(3, syncing), &[]))),
            "ReplicaSyncing"
        );

        // A pod deleted and not created again yet, on either template.
        let whole = everyone_knows_everyone(&formed(3));
        let mut replacing = on_templates(facts(3, whole.clone()), &[2]);
        if let Templates::Known { current, .. } = &mut replacing.templates {
            current.remove(&3);
        }
        let decision = decide(&replacing);
        assert_eq!(reason(&decision), "RestartInProgress", "{decision:?}");

        // Node 3 answers and is linked, but its pod is not Ready by its probes yet: neither
        // the next restart nor a handover to it, until it is.
        let mut unready = on_templates(facts(3, whole.clone()), &[2]);
        unready.unready = [3].into();
        let decision = decide(&unready);
        assert_eq!(reason(&decision), "RestartInProgress", "{decision:?}");
        assert!(
            matches!(&decision, Decision::Wait(wait) if wait.message.contains("node 3's pod is not Ready")),
            "{decision:?}"
        );
        unready.unready.clear();
        assert_eq!(
            decide(&unready),
            Decision::Act(Step::HandOver {
                primary: 2,
                replica: 3
            })
        );
        // With nothing to roll, a pod not Ready holds nothing up.
        let mut rolled = on_templates(facts(3, whole.clone()), &[]);
        rolled.unready = [3].into();
        assert_eq!(decide(&rolled), Decision::Settled);

        // Templates not known (a StatefulSet's controller behind its spec): nothing restarts.
        assert_eq!(decide(&facts(3, whole)), Decision::Settled);
    }

    #[test]
    fn no_restart_while_slots_move_or_a_node_does_not_answer() {
        // A node of another shard unreachable: its shard's slots may be failing over.
        let mut unknown = everyone_knows_everyone(&formed(3));
        unknown[5] = unreachable(5);
        let decision = decide(&on_templates(facts(3, unknown), &[2, 3]));
        assert!(decision.step().is_none(), "{decision:?}");

        // A fourth shard to fill first: the slots move before anything restarts.
        let mut grown = formed(3);
        grown.extend([primary(6, &[]), replica(7, 6)]);
        let decision = decide(&on_templates(facts(4, everyone_knows_everyone(&grown)), &[0, 1]));
        assert!(
            matches!(decision, Decision::Act(Step::MoveSlots { .. })),
            "{decision:?}"
        );
    }

    fn with_repair(mut facts: Facts, member: &str, ordinal: Option<usize>, taken: Option<&str>) -> Facts {
        facts.repair = Some(PodRepair {
            member: member.into(),
            ordinal,
            taken: taken.map(str::to_string),
            taken_claim: taken.map(|uid| format!("claim-of-{uid}")),
            pod_uid: ordinal.map(|o| format!("uid-{o}")),
            claim_uid: ordinal.map(|o| format!("claim-of-uid-{o}")),
        });
        facts
    }

    #[test]
    fn a_repair_wipes_a_replica_once_from_a_whole_cluster_and_a_primary_hands_its_slots_over_first() {
        let whole = || facts(3, everyone_knows_everyone(&formed(3)));
        assert_eq!(
            decide(&with_repair(whole(), "cache-shard-1-1", Some(3), None)),
            Decision::Act(Step::WipeNode {
                ordinal: 3,
                pod_uid: "uid-3".into()
            })
        );
        // Recorded, and its pod is still there (stopped between the record and the wipe): again.
        assert_eq!(
            decide(&with_repair(whole(), "cache-shard-1-1", Some(3), Some("uid-3"))),
            Decision::Act(Step::WipeNode {
                ordinal: 3,
                pod_uid: "uid-3".into()
            })
        );
        // Another pod under the name: the request is done with, and a roll may go on.
        assert_eq!(
            decide(&with_repair(whole(), "cache-shard-1-1", Some(3), Some("uid-old"))),
            Decision::Settled
        );
        assert_eq!(
            decide(&on_templates(
                with_repair(whole(), "cache-shard-1-1", Some(3), Some("uid-old")),
                &[5]
            )),
            Decision::Act(Step::RestartNode { ordinal: 5 })
        );
        // The primary hands its slots to its replica first; then it is a replica, wiped.
        assert_eq!(
            decide(&with_repair(whole(), "cache-shard-1-0", Some(2), None)),
            Decision::Act(Step::HandOver {
                primary: 2,
                replica: 3
            })
        );
        let after = facts(3, everyone_knows_everyone(&handed_over(formed(3), 1)));
        assert_eq!(
            decide(&with_repair(after, "cache-shard-1-0", Some(2), None)),
            Decision::Act(Step::WipeNode {
                ordinal: 2,
                pod_uid: "uid-2".into()
            })
        );
        // A repair comes before a roll.
        assert_eq!(
            decide(&on_templates(
                with_repair(whole(), "cache-shard-2-1", Some(5), None),
                &[0, 1]
            )),
            Decision::Act(Step::WipeNode {
                ordinal: 5,
                pod_uid: "uid-5".into()
            })
        );

        let lone = lone_shards(3);
        let mut syncing = everyone_knows_everyone(&formed(3));
        syncing[1].view.as_mut().unwrap().link_up = false;
        let mut unknown = everyone_knows_everyone(&formed(3));
        unknown[4] = unreachable(4);
        for (case, facts, reason) in [
            (
                "a name that is no node",
                with_repair(whole(), "other-1", None, None),
                Reason::RepairRefused,
            ),
            (
                "an ordinal beyond the deployment",
                with_repair(whole(), "cache-shard-3-1", Some(7), None),
                Reason::RepairRefused,
            ),
            (
                "a shard's only node",
                with_repair(lone, "cache-shard-1-0", Some(1), None),
                Reason::RepairRefused,
            ),
            (
                "another node syncing",
                with_repair(facts(3, syncing), "cache-shard-1-1", Some(3), None),
                Reason::ReplicaSyncing,
            ),
            (
                "another node unreachable",
                with_repair(facts(3, unknown), "cache-shard-1-1", Some(3), None),
                Reason::NodeUnknown,
            ),
        ] {
            let Decision::Wait(wait) = decide(&facts) else {
                panic!("{case}: not a wait")
            };
            assert_eq!(wait.reason, reason, "{case}: {wait:?}");
        }
    }

    #[test]
    fn a_pod_stuck_pending_on_an_older_template_is_replaced_at_once() {
        // Before formation, one pod of each shard could not be placed under the old template.
        let fresh: Vec<Node> = (0..6).map(|o| primary(o, &[])).collect();
        let mut nodes: Vec<NodeFact> = fresh.iter().map(|n| answering(n, &[])).collect();
        for ordinal in [1, 3, 5] {
            nodes[ordinal] = unreachable(ordinal);
        }
        let mut stuck = on_templates(facts(3, nodes), &[0, 1, 3, 5]);
        stuck.recorded_ids.clear();
        stuck.pending = [1, 3, 5].into();
        assert_eq!(decide(&stuck), Decision::Act(Step::RestartNode { ordinal: 1 }));
        // On the current template, it waits to be placed like any starting pod.
        let mut placed = on_templates(stuck.clone(), &[0, 3, 5]);
        placed.pending = [1, 3, 5].into();
        assert_eq!(decide(&placed), Decision::Act(Step::RestartNode { ordinal: 3 }));
        placed.pending.clear();
        let decision = decide(&placed);
        assert!(decision.step().is_none(), "{decision:?}");
    }
}
