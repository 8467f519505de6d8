//! The replication-mode decision: a pure function from what was observed to the one step to
//! take, or why to wait. Table-tested below.
//!
//! Sentinel decides who the primary is; the operator follows. It never promotes a node on its
//! own view: it tells new Sentinels what the others agree on, points stray nodes at the agreed
//! primary (as Sentinel itself would), grows and shrinks the StatefulSets, and asks Sentinel to
//! fail over when the primary's pod is the one leaving. Only at formation, when no Sentinel
//! knows any primary and no primary was ever recorded, does it choose one: the first node.
//!
//! The Sentinels know nodes by address. When every data pod comes back on a new one, they name
//! an address no node has any more; the operator maps it back to the node it recorded at that
//! address when the Sentinels last agreed (never by offset or run id: a restart from the
//! append-only file resets both), and re-points the Sentinels there one at a time.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    time::Duration,
};

use quorum_core::{
    availability::{
        gate::{self, Disruption, Freshness, GateInput, Quorum, Verdict},
        health::{Health, Observation},
    },
    rollout::{RollTarget, Templates},
};

use quorum_core::{
    recovery::{RECOVER_ANNOTATION, RecoveryRequest, request_command},
    repair::PodRepair,
};

use crate::admin::{ReplicationInfo, Role, WriteFence};
pub use crate::reasons::Reason;
use crate::resources::node_name;

/// One data node, as observed.
#[derive(Clone, Debug)]
pub struct NodeFact {
    pub ordinal: usize,
    /// Where the servers reach it (its pod's address); `None` while it has none.
    pub address: Option<SocketAddr>,
    pub health: Health,
    /// `INFO replication`, when it answered.
    pub replication: Option<ReplicationInfo>,
    /// The write fence it runs with, when it answered.
    pub write_fence: Option<WriteFence>,
    /// How many keys it holds; `None` while it cannot tell (loading its data, or no answer).
    pub keys: Option<u64>,
}

impl NodeFact {
    /// How the safety gate sees this node: observed by this pass, and every node counts.
    fn observation(&self) -> Observation {
        Observation::new(format!("node {}", self.ordinal), self.health.clone(), true)
    }

    pub(crate) fn answered(&self) -> Option<&ReplicationInfo> {
        self.replication.as_ref().filter(|_| self.health.is_healthy())
    }
}

/// What one Sentinel says about the primary it monitors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelView {
    pub primary: SocketAddr,
    pub quorum: u32,
    pub down_after: Duration,
    pub failover_timeout: Duration,
    pub failover_in_progress: bool,
    /// The epoch of the configuration it holds: a Sentinel that led a failover, and every
    /// Sentinel that has heard of it since, holds the epoch that failover was voted for.
    pub config_epoch: u64,
    /// Replicas and other Sentinels it has discovered (including ones long gone).
    pub known_replicas: u32,
    pub known_sentinels: u32,
}

/// One Sentinel, as observed.
#[derive(Clone, Debug)]
pub struct SentinelFact {
    pub ordinal: usize,
    pub health: Health,
    /// `None` when it answered and monitors nothing (a new Sentinel), or did not answer.
    pub view: Option<SentinelView>,
}

/// The Sentinel settings the spec asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentinelSettings {
    pub quorum: u32,
    pub down_after: Duration,
    pub failover_timeout: Duration,
}

/// Everything the decision looks at.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The deployment's name.
    pub cluster: String,
    pub desired_nodes: usize,
    /// The data StatefulSet's replicas; `None` before it exists.
    pub node_pods: Option<usize>,
    pub desired_sentinels: usize,
    pub sentinel_pods: Option<usize>,
    pub nodes: Vec<NodeFact>,
    pub sentinels: Vec<SentinelFact>,
    /// The primary recorded in status by an earlier pass.
    pub recorded_primary: Option<usize>,
    /// The address the recorded primary had when a majority of the Sentinels last agreed on it.
    pub recorded_primary_address: Option<SocketAddr>,
    pub settings: SentinelSettings,
    /// The write fence every node should run with (a replica may be promoted by Sentinel).
    pub write_fence: WriteFence,
    /// Which data pods run the data StatefulSet's current template.
    pub templates: Templates,
    /// Every Sentinel pod runs its StatefulSet's current template and is ready: none is about
    /// to be restarted by the StatefulSet controller in the middle of a handover.
    pub sentinels_rolled: bool,
    /// Sentinel pods made before Sentinels had volumes, by ordinal, with each pod's uid.
    pub sentinels_without_volume: BTreeMap<usize, String>,
    /// Sentinel pods that exist, are not being deleted and are Ready
    /// ([`quorum_core::rollout::ready_members`]).
    pub sentinels_ready: BTreeSet<usize>,
    /// A repair a person asked for, while the request stands.
    pub repair: Option<PodRepair>,
    /// Data pods the API server reports `Pending`: nothing of theirs runs or serves.
    pub pending: BTreeSet<usize>,
    /// Data pods not Ready by the kubelet's probes ([`quorum_core::rollout::unready_members`]).
    pub unready: BTreeSet<usize>,
    /// Data nodes whose server the kubelet is not running and holds back (a crash loop's
    /// back-off), with its reason.
    pub held_back: BTreeMap<usize, String>,
    /// A recovery a person asked for, while the request stands.
    pub recovery: Option<RecoveryRequest>,
    /// The node a recovery made the primary, until every Sentinel has been seen monitoring it
    /// (`status.primaryOnRequest`).
    pub primary_on_request: Option<usize>,
}

impl Facts {
    /// The address of node `ordinal`'s pod, when it has one.
    pub fn address_of(&self, ordinal: usize) -> Option<SocketAddr> {
        self.nodes.iter().find(|n| n.ordinal == ordinal)?.address
    }
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Set the data StatefulSet's replicas (grow; shrinking goes through `RemoveNode`).
    ScaleNodes { replicas: usize },
    /// Set the Sentinel StatefulSet's replicas.
    ScaleSentinels { replicas: usize },
    /// Tell a Sentinel to monitor the primary, with the spec's settings and the password.
    Monitor { sentinel: usize, primary: SocketAddr },
    /// Tell a Sentinel that names the primary's old address, or a primary a recovery replaced,
    /// to monitor the primary at its address (`SENTINEL REMOVE`, then as `Monitor`); one
    /// Sentinel per pass.
    RepointSentinel { sentinel: usize, primary: SocketAddr },
    /// Correct a Sentinel's quorum, down-after or failover timeout.
    Configure { sentinel: usize },
    /// Point a node at the primary (`REPLICAOF`).
    Replicate { node: usize, primary: SocketAddr },
    /// Set a node's write fence (`CONFIG SET min-replicas-*`).
    FenceWrites { node: usize, fence: WriteFence },
    /// Hand the primary's role to a replica without losing a write: hold the primary's
    /// writes, wait until every replica has its whole stream, have `sentinel` fail over, point
    /// the old primary at the new one, then release the writes (which it now refuses as a
    /// replica). Taken when the primary's pod is leaving or must restart onto a new template.
    HandOver { primary: usize, sentinel: usize },
    /// Delete a data pod that runs an older template, so its StatefulSet re-creates it on the
    /// current one with the same volume; never the primary (it hands over first).
    RestartNode { ordinal: usize },
    /// Delete a replica's claim and pod (exactly the pod observed), so it comes back on an empty
    /// volume and copies everything again from the primary: a repair asked for.
    WipeNode { ordinal: usize, pod_uid: String },
    /// Make replica `to` the primary in place of `from`, lost for good, on a person's request
    /// (`REPLICAOF NO ONE`), and every Sentinel that answers monitor it instead.
    Promote { from: usize, to: usize },
    /// Remove the highest node, a replica, by shrinking the StatefulSet.
    RemoveNode { ordinal: usize },
    /// Have `sentinel` fail the primary over now (`SENTINEL FAILOVER`): its server is not
    /// running and the kubelet holds it back, so waiting for `down-after` would only keep
    /// writes stopped. Sentinel chooses the replica, as in the failover it would make. `held_back`
    /// is the kubelet's reason, or why it will hold the server back.
    FailOver {
        sentinel: usize,
        primary: usize,
        held_back: String,
    },
    /// Make a Sentinel forget replicas and Sentinels that are gone (`SENTINEL RESET`); one
    /// Sentinel per pass, so the others keep the quorum meanwhile.
    ResetSentinel { sentinel: usize },
    /// Replace a Sentinel's pod (the incarnation `pod_uid`) made before Sentinels had volumes:
    /// its StatefulSet makes it again on a volume of its own.
    MoveSentinelOntoVolume { sentinel: usize, pod_uid: String },
}

/// Why no step is taken now: a reason from [`Reason`] and a sentence for people.
pub type Wait = quorum_core::pass::Wait<Reason>;

/// The decision: a step, a wait, or `Settled` (the deployment matches its spec).
pub type Decision = quorum_core::pass::Decision<Step, Reason>;

fn wait(reason: Reason, message: impl Into<String>) -> Decision {
    Decision::wait(reason, message)
}

/// Which node is the primary, and on whose word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrimaryFinding {
    /// A majority of the Sentinels name it (or every Sentinel that monitors anything does,
    /// and the node itself says it is a primary).
    Agreed {
        ordinal: usize,
        address: SocketAddr,
    },
    /// No Sentinel monitors anything; the node recorded (or, at formation, chosen) is a
    /// primary by its own word.
    Recorded {
        ordinal: usize,
        address: SocketAddr,
    },
    /// A majority of the Sentinels name the recorded primary, some of them at the address it had
    /// when they last agreed (`from`), which no node has now; it answers at `to`.
    Moved {
        ordinal: usize,
        from: SocketAddr,
        to: SocketAddr,
    },
    Unknown(Wait),
}

impl PrimaryFinding {
    pub fn ordinal(&self) -> Option<usize> {
        match self {
            PrimaryFinding::Agreed { ordinal, .. }
            | PrimaryFinding::Recorded { ordinal, .. }
            | PrimaryFinding::Moved { ordinal, .. } => Some(*ordinal),
            PrimaryFinding::Unknown(_) => None,
        }
    }
}

/// The node an address a Sentinel names belongs to.
enum Named {
    /// The node that has this address now.
    Node(usize),
    /// The recorded primary, at the address it had when the Sentinels last agreed.
    FormerAddressOf(usize),
    /// Another node has the recorded primary's former address now: the Sentinels may be
    /// talking to the wrong server there.
    Reused {
        holder: usize,
        recorded: usize,
    },
    NoNode,
}

fn named(facts: &Facts, address: SocketAddr) -> Named {
    let holder = facts
        .nodes
        .iter()
        .find(|n| n.address == Some(address))
        .map(|n| n.ordinal);
    let former = facts
        .recorded_primary
        .filter(|_| facts.recorded_primary_address == Some(address));
    match (holder, former) {
        (Some(holder), Some(recorded)) if holder != recorded => Named::Reused { holder, recorded },
        (Some(holder), _) => Named::Node(holder),
        (None, Some(recorded)) => Named::FormerAddressOf(recorded),
        (None, None) => Named::NoNode,
    }
}

/// The failover the Sentinels would make `down-after` from now, asked for now: the primary does
/// not answer and the kubelet says its server is not running and is held back (a second crash
/// within minutes waits ten seconds or more for its restart), a replica that follows it answers,
/// and a Sentinel that names it answers. `None` otherwise: an unanswered call alone is no
/// evidence that the primary is down, and the Sentinels decide.
fn fail_over_held_back(facts: &Facts, primary: usize) -> Option<Step> {
    let held_back = facts.held_back.get(&primary)?;
    let address = facts.address_of(primary)?;
    let followed = facts.nodes.iter().any(|node| {
        node.ordinal != primary
            && node
                .answered()
                .is_some_and(|info| info.role == Role::Replica && info.follows(address))
    });
    let sentinel = facts.sentinels.iter().find(|sentinel| {
        sentinel.health.is_healthy() && sentinel.view.as_ref().is_some_and(|view| view.primary == address)
    })?;
    followed.then(|| Step::FailOver {
        sentinel: sentinel.ordinal,
        primary,
        held_back: held_back.clone(),
    })
}

/// The primary's address to record in status for the next pass. A new primary, or one never
/// recorded, is recorded at once. The same primary on a new address is recorded only once a
/// majority of the Sentinels name the new one: until then a Sentinel that still names the old
/// address (one that did not answer when the first was re-pointed, say) is known by that address
/// and re-pointed too, where recording the new address would leave it naming an address no node
/// has, which nothing may follow.
pub fn primary_address_to_record(facts: &Facts, ordinal: usize, address: SocketAddr) -> SocketAddr {
    let Some(recorded) = facts.recorded_primary_address else {
        return address;
    };
    if facts.recorded_primary != Some(ordinal) || recorded == address {
        return address;
    }
    let majority = sentinel_majority(facts);
    let naming_new = facts
        .sentinels
        .iter()
        .filter(|s| s.view.as_ref().is_some_and(|v| v.primary == address))
        .count();
    if naming_new >= majority { address } else { recorded }
}

/// The primary's address to record after a pass that found `finding`, left `serving` taking
/// writes and handed the primary over to `handed_over_to`. The recorded address is how a
/// Sentinel naming an address no node has any more is known to mean the recorded primary: it
/// is kept while no node takes writes (a Sentinel failing the primary over, every pod coming
/// back on a new address at once), as the recorded primary is, and dropped only when another
/// node takes over.
pub fn primary_address_after(
    facts: &Facts,
    finding: &PrimaryFinding,
    serving: Option<usize>,
    handed_over_to: Option<usize>,
) -> Option<SocketAddr> {
    match (handed_over_to, finding) {
        (Some(to), _) => facts.address_of(to),
        (None, PrimaryFinding::Agreed { ordinal, address }) => {
            Some(primary_address_to_record(facts, *ordinal, *address))
        }
        _ if serving.is_none() || serving == facts.recorded_primary => facts.recorded_primary_address,
        _ => None,
    }
}

/// How many Sentinels make a majority: of those wanted, or of those there are when more are
/// (a scale-down still under way).
fn sentinel_majority(facts: &Facts) -> usize {
    facts.desired_sentinels.max(facts.sentinels.len()) / 2 + 1
}

/// The view of the one Sentinel whose configuration epoch is higher than every other answering
/// Sentinel's. Sentinel moves a primary's epoch forward only by a failover that a majority of
/// the Sentinels voted for, and spreads it to the others, which adopt any newer configuration:
/// a view ahead of all the others is the one they are all about to hold.
fn newest_configuration(facts: &Facts) -> Option<&SentinelView> {
    let mut views: Vec<&SentinelView> = facts.sentinels.iter().filter_map(|s| s.view.as_ref()).collect();
    views.sort_by_key(|view| std::cmp::Reverse(view.config_epoch));
    match views.as_slice() {
        [newest, next, ..] if newest.config_epoch > next.config_epoch => Some(newest),
        _ => None,
    }
}

/// The node a majority of the Sentinels took as the primary while another Sentinel is still
/// failing over the one before: their configuration is at least as new as the failing-over
/// Sentinels', they name another node than those do, and that node says it is the primary.
/// Either that Sentinel led this very failover and is still reconfiguring the other nodes (a
/// dead former primary keeps it at it until its failover timeout), or its own attempt cannot
/// win (the others no longer monitor the primary it would replace, so they give it no vote) and
/// it takes the newer configuration at its timeout. Meanwhile writes go where they will stay.
fn failover_completed_by_majority(facts: &Facts) -> Option<PrimaryFinding> {
    let views: Vec<&SentinelView> = facts.sentinels.iter().filter_map(|s| s.view.as_ref()).collect();
    let failing_over: Vec<&&SentinelView> = views.iter().filter(|view| view.failover_in_progress).collect();
    let failing_over_epoch = failing_over.iter().map(|view| view.config_epoch).max()?;
    let being_replaced: Vec<SocketAddr> = failing_over.iter().map(|view| view.primary).collect();
    let mut votes: BTreeMap<usize, (usize, SocketAddr)> = BTreeMap::new();
    for view in views.iter().filter(|view| {
        !view.failover_in_progress
            && view.config_epoch >= failing_over_epoch
            && !being_replaced.contains(&view.primary)
    }) {
        if let Named::Node(ordinal) = named(facts, view.primary) {
            votes.entry(ordinal).or_insert((0, view.primary)).0 += 1;
        }
    }
    let (&ordinal, &(count, address)) = votes.iter().max_by_key(|(_, (count, _))| *count)?;
    (count >= sentinel_majority(facts) && answers_as(facts, ordinal, Role::Primary))
        .then_some(PrimaryFinding::Agreed { ordinal, address })
}

/// Whether node `ordinal` answered this pass, saying it has `role`.
fn answers_as(facts: &Facts, ordinal: usize, role: Role) -> bool {
    facts
        .nodes
        .iter()
        .find(|n| n.ordinal == ordinal)
        .and_then(NodeFact::answered)
        .is_some_and(|info| info.role == role)
}

/// Whether a Sentinel is failing `ordinal` over: what that node takes meanwhile is dropped if the
/// failover promotes another.
fn being_failed_over(facts: &Facts, ordinal: usize) -> bool {
    facts
        .sentinels
        .iter()
        .filter_map(|s| s.view.as_ref())
        .filter(|view| view.failover_in_progress)
        .any(|view| match named(facts, view.primary) {
            Named::Node(named) | Named::FormerAddressOf(named) => named == ordinal,
            Named::Reused { .. } | Named::NoNode => false,
        })
}

/// The primary, as the Sentinels agree or, before any Sentinel knows one, as recorded.
pub fn find_primary(facts: &Facts) -> PrimaryFinding {
    let unknown = |reason: Reason, message: String| PrimaryFinding::Unknown(Wait { reason, message });
    if let Some(finding) = failover_completed_by_majority(facts) {
        return finding;
    }
    if facts
        .sentinels
        .iter()
        .any(|s| s.view.as_ref().is_some_and(|v| v.failover_in_progress))
    {
        return unknown(
            Reason::FailoverInProgress,
            "a Sentinel is failing over; waiting for it to finish".into(),
        );
    }
    // A recovery made this node the primary outside the Sentinels: those naming another one
    // missed it (they were out of reach), and following them could make it, and the replicas
    // that follow it, drop every write it took since. It stays the primary while it says it is.
    // Should it stop answering, the others' choice waits for it; should it answer as a
    // replica, the Sentinels it was made known to have failed over since, as they may.
    if let Some(promoted) = facts.primary_on_request {
        let node = facts.nodes.iter().find(|n| n.ordinal == promoted);
        match node.and_then(|n| n.address.zip(n.answered())) {
            Some((address, info)) if info.role == Role::Primary => {
                return PrimaryFinding::Agreed {
                    ordinal: promoted,
                    address,
                };
            }
            Some(_) => {}
            None => {
                return unknown(
                    Reason::PrimaryUnknown,
                    format!(
                        "node {promoted}, made the primary on request, does not answer, and not every Sentinel has \
                         been seen monitoring it: no other node is taken for the primary until it answers"
                    ),
                );
            }
        }
    }
    // Votes per node: a Sentinel naming the recorded primary's former address votes for it.
    let mut votes: BTreeMap<usize, usize> = BTreeMap::new();
    let mut former_addresses: BTreeMap<usize, SocketAddr> = BTreeMap::new();
    let mut no_node: BTreeMap<SocketAddr, usize> = BTreeMap::new();
    for view in facts.sentinels.iter().filter_map(|s| s.view.as_ref()) {
        match named(facts, view.primary) {
            Named::Node(ordinal) => *votes.entry(ordinal).or_default() += 1,
            Named::FormerAddressOf(ordinal) => {
                *votes.entry(ordinal).or_default() += 1;
                former_addresses.insert(ordinal, view.primary);
            }
            Named::Reused { holder, recorded } => {
                return unknown(
                    Reason::PrimaryAddressReused,
                    format!(
                        "the Sentinels name {}, the address of node {recorded} when they last agreed on it as the primary, \
                         which node {holder} has now; not deciding which server they mean: check the nodes' data and \
                         re-point the Sentinels by hand",
                        view.primary
                    ),
                );
            }
            Named::NoNode => *no_node.entry(view.primary).or_default() += 1,
        }
    }
    let says_primary = |ordinal: usize| answers_as(facts, ordinal, Role::Primary);
    if let Some(newest) = newest_configuration(facts)
        && let Named::Node(ordinal) = named(facts, newest.primary)
        && says_primary(ordinal)
    {
        // A failover a majority voted for, ahead of the Sentinels that have not heard of it:
        // they take it as soon as they do (Sentinel's own rule, the newest epoch wins), and
        // waiting for their hello messages would keep writes on the dead primary meanwhile.
        return PrimaryFinding::Agreed {
            ordinal,
            address: newest.primary,
        };
    }
    let majority = sentinel_majority(facts);
    let leading = votes
        .iter()
        .max_by_key(|(_, count)| **count)
        .map(|(o, c)| (*o, *c));
    let not_a_node = no_node.iter().max_by_key(|(_, count)| **count);
    if let Some((address, &count)) = not_a_node
        && leading.is_none_or(|(_, leading)| count >= leading)
    {
        let recorded = match (facts.recorded_primary, facts.recorded_primary_address) {
            (Some(ordinal), Some(at)) => format!("; node {ordinal} was the primary at {at}"),
            _ => String::new(),
        };
        return unknown(
            Reason::PrimaryNotANode,
            format!(
                "the Sentinels name {address} as the primary, which is no node of this cluster{recorded}"
            ),
        );
    }
    if let Some((ordinal, count)) = leading {
        let unanimous = votes.len() == 1 && no_node.is_empty();
        if count >= majority && answers_as(facts, ordinal, Role::Replica) {
            // Right after a failover, Sentinels that have not heard of it yet still name the
            // node that was the primary and now follows the new one.
            return unknown(
                Reason::FailoverInProgress,
                format!(
                    "the Sentinels name node {ordinal}, which says it is a replica; waiting for them to catch up"
                ),
            );
        }
        // Fewer than a majority, even in agreement, only confirm the node last recorded (or
        // name the first one): a Sentinel that missed a failover still names the old primary,
        // and following it would make the node that took the writes since a replica of it.
        let confirms = facts.recorded_primary.is_none_or(|recorded| recorded == ordinal);
        if count >= majority || (unanimous && confirms && says_primary(ordinal)) {
            let Some(address) = facts.address_of(ordinal) else {
                return unknown(
                    Reason::PrimaryUnknown,
                    format!("the Sentinels name node {ordinal}, whose pod has no address"),
                );
            };
            return match former_addresses.get(&ordinal) {
                Some(&from) => PrimaryFinding::Moved {
                    ordinal,
                    from,
                    to: address,
                },
                None => PrimaryFinding::Agreed { ordinal, address },
            };
        }
        return unknown(
            Reason::SentinelsDisagree,
            format!("no majority of the Sentinels names one primary (votes per node: {votes:?})"),
        );
    }
    // No Sentinel monitors anything: all are new, or none answered.
    if facts.sentinels.iter().any(|s| !s.health.is_healthy()) && facts.recorded_primary.is_some() {
        return unknown(
            Reason::SentinelsUnknown,
            "a Sentinel does not answer and none that answers monitors a primary".into(),
        );
    }
    let candidate = match facts.recorded_primary {
        Some(recorded) => recorded,
        None => {
            // Formation: every node must have answered, so a node that is already a primary
            // with replicas (an operator that lost its status) is not overruled.
            if let Some(node) = facts.nodes.iter().find(|n| n.answered().is_none()) {
                return unknown(
                    Reason::NodesStarting,
                    format!("node {} has not answered yet", node.ordinal),
                );
            }
            let leaders: Vec<usize> = facts
                .nodes
                .iter()
                .filter(|n| {
                    n.answered()
                        .is_some_and(|i| i.role == Role::Primary && !i.replicas.is_empty())
                })
                .map(|n| n.ordinal)
                .collect();
            match leaders.as_slice() {
                [] => 0,
                [only] => *only,
                _ => {
                    return unknown(
                        Reason::SeveralPrimaries,
                        format!("nodes {leaders:?} each have replicas; not choosing between them"),
                    );
                }
            }
        }
    };
    let node = facts.nodes.iter().find(|n| n.ordinal == candidate);
    match node.and_then(|n| n.address.zip(n.answered())) {
        Some((address, info)) if info.role == Role::Primary => PrimaryFinding::Recorded {
            ordinal: candidate,
            address,
        },
        _ => unknown(
            Reason::PrimaryUnknown,
            format!("node {candidate} is not a primary the operator can see; no Sentinel knows another"),
        ),
    }
}

/// `status.primaryOnRequest` after a pass: the node a recovery promoted in it (`promoted`), or
/// the one recorded for as long as it serves as the primary and a Sentinel is yet to be seen
/// monitoring it; none once every Sentinel answers and names it, or once it answers as a
/// replica (the Sentinels failed over since).
pub fn primary_on_request_after(facts: &Facts, promoted: Option<usize>) -> Option<usize> {
    if promoted.is_some() {
        return promoted;
    }
    let recorded = facts.primary_on_request?;
    let node = facts.nodes.iter().find(|n| n.ordinal == recorded);
    if node
        .and_then(NodeFact::answered)
        .is_some_and(|info| info.role == Role::Replica)
    {
        return None;
    }
    let address = node.and_then(|n| n.address);
    let monitoring = facts
        .sentinels
        .iter()
        .filter(|s| s.health.is_healthy())
        .filter(|s| s.view.as_ref().is_some_and(|v| Some(v.primary) == address))
        .count();
    let everyone = monitoring == facts.sentinels.len() && monitoring >= facts.desired_sentinels;
    (!everyone).then_some(recorded)
}

/// The node that takes writes now: the primary the Sentinels agree on or, while they cannot
/// agree (restarting, unreachable, split, failing over another node), the one last recorded, for
/// as long as it does not itself say it is no longer a primary and no Sentinel is failing it
/// over. A Sentinel outage is then no write outage, only a majority of the Sentinels naming
/// another node moves the primary, and a primary that comes back in the middle of its own
/// failover takes no write that the failover would drop.
pub fn serving_primary(facts: &Facts) -> Option<usize> {
    serving_primary_given(facts, &find_primary(facts))
}

/// [`serving_primary`], from a [`find_primary`] already made.
pub fn serving_primary_given(facts: &Facts, finding: &PrimaryFinding) -> Option<usize> {
    match *finding {
        PrimaryFinding::Agreed { ordinal, .. }
        | PrimaryFinding::Recorded { ordinal, .. }
        | PrimaryFinding::Moved { ordinal, .. } => Some(ordinal),
        PrimaryFinding::Unknown(_) => {
            let recorded = facts.recorded_primary?;
            if being_failed_over(facts, recorded) {
                return None;
            }
            let demoted = facts
                .nodes
                .iter()
                .find(|node| node.ordinal == recorded)
                .and_then(NodeFact::answered)
                .is_some_and(|info| info.role != Role::Primary);
            (!demoted).then_some(recorded)
        }
    }
}

/// Why a node found again after a restart (rather than agreed on by Sentinels that watched it
/// all along) may not be the source every other node resynchronises from yet: it must answer as
/// a primary, have loaded its data, and not be empty while another node holds keys (a
/// re-created volume).
fn unfit_source(facts: &Facts, ordinal: usize) -> Option<Wait> {
    let node = facts.nodes.iter().find(|n| n.ordinal == ordinal);
    let Some((node, info)) = node.and_then(|n| Some((n, n.answered()?))) else {
        return Some(Wait {
            reason: Reason::PrimaryUnknown,
            message: format!("node {ordinal}, the recorded primary, does not answer"),
        });
    };
    if info.role != Role::Primary {
        return Some(Wait {
            reason: Reason::PrimaryUnknown,
            message: format!("node {ordinal}, the recorded primary, says it is a replica"),
        });
    }
    let Some(keys) = node.keys else {
        return Some(Wait {
            reason: Reason::PrimaryLoading,
            message: format!("node {ordinal}, the recorded primary, has not finished loading its data"),
        });
    };
    if keys == 0
        && let Some(other) = facts.nodes.iter().find(|n| n.keys.is_some_and(|k| k > 0))
    {
        return Some(Wait {
            reason: Reason::PrimaryEmpty,
            message: format!(
                "node {ordinal}, the recorded primary, holds no key while node {} holds {}; its volume may be new. \
                 Not making the others copy it: check which node holds the data and re-point the Sentinels by hand",
                other.ordinal,
                other.keys.unwrap_or_default()
            ),
        });
    }
    None
}

/// The first node whose write fence differs from the wanted one and may be changed now.
fn fence_writes(facts: &Facts, primary: usize) -> Option<Step> {
    let wanted = facts.write_fence;
    facts
        .nodes
        .iter()
        .filter(|node| node.ordinal < facts.desired_nodes)
        .find(|node| {
            let (Some(info), Some(current)) = (node.answered(), node.write_fence) else {
                return false;
            };
            if current == wanted {
                return false;
            }
            let raising = wanted.min_replicas > current.min_replicas;
            if node.ordinal != primary || !raising {
                return true;
            }
            let in_sync = info.replicas.iter().filter(|r| r.state == "online").count();
            in_sync >= wanted.min_replicas as usize
        })
        .map(|node| Step::FenceWrites {
            node: node.ordinal,
            fence: wanted,
        })
}

/// The one step to take now.
pub fn decide(facts: &Facts) -> Decision {
    if facts.node_pods.is_none_or(|pods| pods < facts.desired_nodes) {
        return Decision::Act(Step::ScaleNodes {
            replicas: facts.desired_nodes.max(facts.node_pods.unwrap_or(0)),
        });
    }
    if facts.sentinel_pods != Some(facts.desired_sentinels) {
        return Decision::Act(Step::ScaleSentinels {
            replicas: facts.desired_sentinels,
        });
    }
    // A pod that runs nothing disturbs nothing when it is replaced, and one stuck on an older
    // template (one no node can take, say) may start only on the current one.
    if let Some(ordinal) = facts.templates.stuck(&facts.pending) {
        return Decision::Act(Step::RestartNode { ordinal });
    }
    let (primary, primary_address) = match find_primary(facts) {
        PrimaryFinding::Agreed { ordinal, address } => (ordinal, address),
        PrimaryFinding::Recorded { ordinal, address } => {
            if facts.recorded_primary.is_some()
                && let Some(why) = unfit_source(facts, ordinal)
            {
                return Decision::Wait(why);
            }
            (ordinal, address)
        }
        PrimaryFinding::Moved { ordinal, from, to } => {
            if let Some(why) = unfit_source(facts, ordinal) {
                return Decision::Wait(why);
            }
            return match facts
                .sentinels
                .iter()
                .find(|s| s.health.is_healthy() && s.view.as_ref().is_some_and(|v| v.primary == from))
            {
                Some(sentinel) => Decision::Act(Step::RepointSentinel {
                    sentinel: sentinel.ordinal,
                    primary: to,
                }),
                None => wait(
                    Reason::PrimaryUnknown,
                    format!("no Sentinel that names node {ordinal} at {from} answers"),
                ),
            };
        }
        PrimaryFinding::Unknown(why) => return recover_on_request(facts, why),
    };
    let primary_seen = facts
        .nodes
        .iter()
        .find(|n| n.ordinal == primary)
        .and_then(NodeFact::answered)
        .is_some_and(|info| info.role == Role::Primary);

    if !primary_seen && let Some(step) = fail_over_held_back(facts, primary) {
        return Decision::Act(step);
    }

    // Sentinels first: once they watch the primary, a failure from here on is theirs to
    // handle.
    let agreed_epoch = facts
        .sentinels
        .iter()
        .filter_map(|s| s.view.as_ref())
        .filter(|view| view.primary == primary_address)
        .map(|view| view.config_epoch)
        .max();
    let names_a_replica = |address: SocketAddr| matches!(named(facts, address), Named::Node(ordinal) if answers_as(facts, ordinal, Role::Replica));
    for sentinel in facts.sentinels.iter().filter(|s| s.health.is_healthy()) {
        match &sentinel.view {
            Some(view) if facts.primary_on_request == Some(primary) && view.primary != primary_address => {
                return Decision::Act(Step::RepointSentinel {
                    sentinel: sentinel.ordinal,
                    primary: primary_address,
                });
            }
            None if primary_seen => {
                return Decision::Act(Step::Monitor {
                    sentinel: sentinel.ordinal,
                    primary: primary_address,
                });
            }
            // Left behind when the others moved on: it watches an address no node has any more
            // (every pod came back on a new one) and so never hears them. It is re-pointed at
            // the primary the others agree on, as they were.
            Some(view)
                if primary_seen
                    && view.primary != primary_address
                    && !facts.nodes.iter().any(|node| node.address == Some(view.primary)) =>
            {
                return Decision::Act(Step::RepointSentinel {
                    sentinel: sentinel.ordinal,
                    primary: primary_address,
                });
            }
            // Naming a node that follows the primary, with the configuration epoch of the
            // others that agree on it: a Sentinel takes another's view only from a newer epoch,
            // so neither gives way and it names that replica for good (never learning the
            // replicas, never voting on a failover of the primary). One with an older epoch
            // takes the others' view from their next hello message, and one with a newer epoch
            // hands them its own: Sentinel's own business.
            Some(view)
                if primary_seen
                    && view.primary != primary_address
                    && agreed_epoch == Some(view.config_epoch)
                    && names_a_replica(view.primary) =>
            {
                return Decision::Act(Step::RepointSentinel {
                    sentinel: sentinel.ordinal,
                    primary: primary_address,
                });
            }
            Some(view)
                if view.quorum != facts.settings.quorum
                    || view.down_after != facts.settings.down_after
                    || view.failover_timeout != facts.settings.failover_timeout =>
            {
                return Decision::Act(Step::Configure {
                    sentinel: sentinel.ordinal,
                });
            }
            _ => {}
        }
    }

    // Stray nodes follow the primary: new, restarted or former primaries.
    if primary_seen {
        for node in &facts.nodes {
            if node.ordinal == primary || node.ordinal >= facts.desired_nodes {
                continue;
            }
            if let Some(info) = node.answered()
                && !info.follows(primary_address)
            {
                return Decision::Act(Step::Replicate {
                    node: node.ordinal,
                    primary: primary_address,
                });
            }
        }
    }

    // Write fences: lowered at once (a primary fenced for replicas it no longer has would refuse
    // every write), raised on the primary only once enough replicas are in sync to meet it.
    if primary_seen && let Some(step) = fence_writes(facts, primary) {
        return Decision::Act(step);
    }

    // Scale in: the highest node leaves, never while it is the primary.
    let node_pods = facts.node_pods.unwrap_or(0);
    if node_pods > facts.desired_nodes {
        let leaving = node_pods - 1;
        if leaving == primary {
            return match hand_over(facts, primary) {
                Ok(step) if primary_seen => Decision::Act(step),
                Ok(_) => wait(
                    Reason::PrimaryLeaving,
                    format!(
                        "node {leaving} is the primary and must hand over before it leaves; it does not answer"
                    ),
                ),
                Err(why) => wait(
                    Reason::PrimaryLeaving,
                    format!("node {leaving} is the primary and must hand over before it leaves: {why}"),
                ),
            };
        }
        let observations: Vec<Observation> = facts
            .nodes
            .iter()
            .filter(|n| n.ordinal < node_pods)
            .map(NodeFact::observation)
            .collect();
        return match gate::check(&GateInput {
            target: &format!("node {leaving}"),
            disruption: Disruption::Remove,
            observations: &observations,
            in_flight: None,
            freshness: Freshness::ThisPass,
            quorum: Quorum::EveryOtherMember,
        }) {
            Verdict::Proceed => Decision::Act(Step::RemoveNode { ordinal: leaving }),
            Verdict::Wait(blocking) => wait(
                Reason::ScaleInBlocked,
                format!("node {leaving} leaves only while every other node is healthy; {blocking}"),
            ),
        };
    }

    // Sentinels that remember nodes or Sentinels that are gone forget them, one at a time.
    let replicas_expected = facts.desired_nodes.saturating_sub(1) as u32;
    let sentinels_expected = facts.desired_sentinels.saturating_sub(1) as u32;
    if let Some(sentinel) = facts.sentinels.iter().find(|s| {
        s.health.is_healthy()
            && s.view.as_ref().is_some_and(|v| {
                v.known_replicas > replicas_expected || v.known_sentinels > sentinels_expected
            })
    }) && facts.sentinels.iter().all(|s| s.health.is_healthy())
    {
        return Decision::Act(Step::ResetSentinel {
            sentinel: sentinel.ordinal,
        });
    }
    // Sentinels made before Sentinels had volumes move onto volumes one at a time, each only
    // while every Sentinel's pod is Ready and every Sentinel answers and watches a primary: the
    // others keep the quorum, and the one replaced is told what to monitor as a new Sentinel. A
    // pod just deleted may still answer, so its answer alone does not count.
    // The lowest first: the StatefulSet controller goes through the pods from ordinal 0 and
    // stops at the first it cannot bring onto its claim template (a pod's volumes never
    // change), so a higher ordinal deleted first would never be made again.
    let sentinel_move_blocked = match facts.sentinels_without_volume.iter().next() {
        Some((&sentinel, pod_uid)) => match sentinel_move_blocker(facts) {
            None => {
                return Decision::Act(Step::MoveSentinelOntoVolume {
                    sentinel,
                    pod_uid: pod_uid.clone(),
                });
            }
            Some(blocker) => Some(format!(
                "Sentinel {sentinel} moves onto a volume of its own once {blocker}"
            )),
        },
        None => None,
    };

    if !primary_seen {
        return wait(
            Reason::PrimaryUnknown,
            format!("the Sentinels name node {primary}, which the operator cannot reach"),
        );
    }
    // While a roll is under way, a node restarting or resyncing is its expected progress.
    let rolling = facts.templates.rolling(facts.nodes.iter().map(|n| n.ordinal));
    let node_wait = |otherwise: Reason, what: String| {
        if rolling {
            wait(
                Reason::RestartInProgress,
                format!("rolling onto the current pod template: {what}"),
            )
        } else {
            wait(otherwise, what)
        }
    };
    if let Some(node) = facts.nodes.iter().find(|n| !n.health.is_healthy()) {
        return node_wait(
            Reason::NodeNotHealthy,
            format!("node {} is {}", node.ordinal, node.health.as_str()),
        );
    }
    if let Some(node) = facts
        .nodes
        .iter()
        .filter(|n| n.ordinal != primary)
        .find(|n| n.answered().is_some_and(|i| !i.link_up))
    {
        return node_wait(
            Reason::ReplicaSyncing,
            format!("node {} is syncing from the primary", node.ordinal),
        );
    }
    if facts.sentinels.iter().any(|s| s.view.is_none()) {
        return wait(Reason::SentinelsStarting, "a Sentinel has not answered yet");
    }
    if let Some((ordinal, view)) = facts.sentinels.iter().find_map(|s| {
        s.view
            .as_ref()
            .filter(|v| v.known_replicas < replicas_expected || v.known_sentinels < sentinels_expected)
            .map(|v| (s.ordinal, v))
    }) {
        return wait(
            Reason::SentinelsDiscovering,
            format!(
                "Sentinel {ordinal} knows {} of {replicas_expected} replicas and {} of {sentinels_expected} other Sentinels; \
                 it learns the rest from the primary and the other Sentinels within seconds",
                view.known_replicas, view.known_sentinels
            ),
        );
    }
    if let Some(repair) = &facts.repair
        && let Some(decision) = repair_node(facts, primary, repair)
    {
        return decision;
    }
    match (roll(facts, primary), sentinel_move_blocked) {
        (Decision::Settled, Some(blocked)) => wait(Reason::MovingSentinelOntoVolume, blocked),
        (decision, _) => decision,
    }
}

/// Why no Sentinel may be replaced now, if one may not: every Sentinel's pod must be Ready and
/// every Sentinel must answer and watch a primary.
fn sentinel_move_blocker(facts: &Facts) -> Option<String> {
    if let Some(ordinal) =
        (0..facts.desired_sentinels).find(|ordinal| !facts.sentinels_ready.contains(ordinal))
    {
        return Some(format!("Sentinel {ordinal}'s pod is Ready"));
    }
    facts
        .sentinels
        .iter()
        .find(|s| !s.health.is_healthy() || s.view.is_none())
        .map(|s| {
            format!(
                "Sentinel {} answers and watches a primary (it is {})",
                s.ordinal,
                s.health.as_str()
            )
        })
}

/// The primary cannot be found and the operator waits (`blocked`): the Sentinels do not agree on
/// a node it can see, or none knows one and the recorded primary does not answer. A person who
/// knows the recorded primary is lost for good may name the replica to serve from
/// ([`RECOVER_ANNOTATION`]). It is promoted only if the recorded primary does not answer, no
/// Sentinel is failing over, no node that answers still has its link to a primary up (then the
/// primary is not lost) or serves as one, and the named node answers and is at least as far
/// along the same replication stream as every node that answers; what only the lost primary
/// (and the nodes that do not answer) held is given up, which is why only a person asks for it.
/// Once per request.
fn recover_on_request(facts: &Facts, blocked: Wait) -> Decision {
    if blocked.reason == Reason::FailoverInProgress {
        return Decision::Wait(blocked);
    }
    let Some(request) = facts.recovery.as_ref().filter(|request| request.is_open()) else {
        return Decision::Wait(with_recovery_command(facts, blocked));
    };
    let refused = |message: String| wait(Reason::RecoveryRefused, message);
    let Some(from) = facts.recorded_primary else {
        return refused(format!(
            "{RECOVER_ANNOTATION}: no primary was ever recorded for this deployment, so none is lost; nothing is promoted"
        ));
    };
    let to = match request.target(facts.desired_nodes) {
        Ok(to) => to,
        Err(refusal) => return refused(refusal),
    };
    match promotion_refusal(facts, from, to) {
        Some(refusal) => refused(refusal),
        None => Decision::Act(Step::Promote { from, to }),
    }
}

/// A wait with no recovery asked for, when one would be taken: it names the node a request
/// would promote (the furthest along of those that answer) and the exact command that asks for
/// it, for the person who knows the recorded primary is lost for good.
fn with_recovery_command(facts: &Facts, mut blocked: Wait) -> Wait {
    let Some(from) = facts.recorded_primary else {
        return blocked;
    };
    let mut candidates: Vec<(usize, u64)> = facts
        .nodes
        .iter()
        .filter(|n| n.ordinal != from && n.address.is_some())
        .filter_map(|n| Some((n.ordinal, n.answered()?.offset)))
        .collect();
    candidates.sort_by_key(|(ordinal, offset)| (std::cmp::Reverse(*offset), *ordinal));
    if let Some((to, _)) = candidates
        .into_iter()
        .find(|(to, _)| promotion_refusal(facts, from, *to).is_none())
    {
        blocked.message = format!(
            "{}. If node {from}, the recorded primary, is lost for good, promote node {to}, the furthest along of the \
             nodes that answer (what only node {from} held is given up), with `{}`",
            blocked.message,
            request_command("RedisCluster", &facts.cluster, &node_name(&facts.cluster, to))
        );
    }
    blocked
}

/// Why node `to` may not be promoted in place of the lost primary `from`, if it may not.
fn promotion_refusal(facts: &Facts, from: usize, to: usize) -> Option<String> {
    if to == from {
        return Some(format!(
            "{RECOVER_ANNOTATION} names the primary (node {from}), the node that is lost: name the replica to promote"
        ));
    }
    let node = |ordinal: usize| facts.nodes.iter().find(|n| n.ordinal == ordinal);
    if node(from).is_some_and(|n| n.health.is_healthy()) {
        return Some(format!(
            "the primary (node {from}) answers: it is not lost, nothing is promoted"
        ));
    }
    let Some(target) = node(to)
        .filter(|n| n.address.is_some())
        .and_then(NodeFact::answered)
    else {
        return Some(format!(
            "node {to} does not answer; only a node that answers is promoted"
        ));
    };
    for (ordinal, info) in facts
        .nodes
        .iter()
        .filter(|n| n.ordinal != to)
        .filter_map(|n| Some((n.ordinal, n.answered()?)))
    {
        if info.role == Role::Primary {
            return Some(format!(
                "node {ordinal} serves as a primary: the Sentinels or a person chose one already; nothing is promoted"
            ));
        }
        if info.link_up {
            return Some(format!(
                "node {ordinal} still has its link to its primary up: the primary is not lost, nothing is promoted"
            ));
        }
        if info.replication_id != target.replication_id {
            return Some(format!(
                "node {ordinal} follows another replication history ({}) than node {to} ({}); nothing is promoted: \
                 restore a new deployment from the newest backup",
                info.replication_id, target.replication_id
            ));
        }
        if info.offset > target.offset {
            return Some(format!(
                "node {ordinal} is further along the primary's stream (offset {}) than node {to} (offset {}): name the \
                 node that holds the most",
                info.offset, target.offset
            ));
        }
    }
    None
}

/// The next step of a repair a person asked for, reached only with every node healthy and in
/// sync: the named replica is wiped, once per request (the pod recorded as wiped is wiped again
/// only while it is still that pod); the primary hands its role over first. `None` once the
/// request is done with.
fn repair_node(facts: &Facts, primary: usize, repair: &PodRepair) -> Option<Decision> {
    let ordinal = match repair.target(facts.desired_nodes) {
        Ok(ordinal) => ordinal,
        Err(refusal) => return Some(wait(Reason::RepairRefused, refusal)),
    };
    if repair.wiped() {
        return None;
    }
    if ordinal == primary {
        return Some(match hand_over(facts, primary) {
            Ok(step) if facts.nodes.len() > 1 => Decision::Act(step),
            Ok(_) => wait(
                Reason::RepairRefused,
                format!(
                    "node {ordinal} is the only node and the primary: there is nothing to rebuild it from"
                ),
            ),
            Err(why) => wait(
                Reason::RestartBlocked,
                format!(
                    "node {ordinal}, the primary, hands its role over before it is rebuilt, once this clears: {why}"
                ),
            ),
        });
    }
    let Some(pod_uid) = repair.pod_uid.clone() else {
        return Some(wait(
            Reason::RestartInProgress,
            format!("node {ordinal} is to be rebuilt and has no pod yet"),
        ));
    };
    Some(Decision::Act(Step::WipeNode { ordinal, pod_uid }))
}

/// The handover of `primary`'s role through a Sentinel that watches it, or why it must wait:
/// every node healthy and following the primary with its link up, every Sentinel answering and
/// none about to restart.
fn hand_over(facts: &Facts, primary: usize) -> Result<Step, String> {
    if let Some(node) = facts
        .nodes
        .iter()
        .find(|n| n.ordinal != primary && n.address.is_none())
    {
        return Err(format!("node {} has no address", node.ordinal));
    }
    if let Some(node) = facts.nodes.iter().find(|n| !n.health.is_healthy()) {
        return Err(format!("node {} is {}", node.ordinal, node.health.as_str()));
    }
    if let Some(node) = facts
        .nodes
        .iter()
        .filter(|n| n.ordinal != primary)
        .find(|n| n.answered().is_none_or(|i| !i.link_up || i.sync_in_progress))
    {
        return Err(format!("node {} is not in sync with the primary", node.ordinal));
    }
    if !facts.sentinels_rolled {
        return Err("the Sentinels are being restarted onto their current pod template".into());
    }
    if let Some(sentinel) = facts
        .sentinels
        .iter()
        .find(|s| !s.health.is_healthy() || s.view.is_none())
    {
        return Err(format!(
            "Sentinel {} does not watch the primary",
            sentinel.ordinal
        ));
    }
    let sentinel = facts.sentinels.first().ok_or("no Sentinel")?;
    Ok(Step::HandOver {
        primary,
        sentinel: sentinel.ordinal,
    })
}

/// The next step of a managed roll onto the current pod template, `Settled` when every data pod
/// runs it. Reached only once every node is healthy and in sync and every Sentinel knows them
/// all, so each restart starts from a whole deployment.
fn roll(facts: &Facts, primary: usize) -> Decision {
    // A pod being replaced (deleted, not yet created again) may still answer as it was.
    if let Templates::Known { .. } = facts.templates
        && let Some(node) = facts
            .nodes
            .iter()
            .find(|n| !facts.templates.is_current(n.ordinal) && !facts.templates.is_outdated(n.ordinal))
    {
        return wait(
            Reason::RestartInProgress,
            format!(
                "rolling onto the current pod template: node {}'s pod is being replaced",
                node.ordinal
            ),
        );
    }
    if let Some(ordinal) = facts.unready.first()
        && facts.templates.next(Some(primary)).is_some()
    {
        return wait(
            Reason::RestartInProgress,
            format!(
                "rolling onto the current pod template: node {ordinal}'s pod is not Ready by its probes yet; \
                 the next node restarts once it is"
            ),
        );
    }
    match facts.templates.next(Some(primary)) {
        None => Decision::Settled,
        Some(RollTarget::Replica(ordinal)) => restart(facts, ordinal),
        Some(RollTarget::Primary(ordinal)) if facts.nodes.len() == 1 => restart(facts, ordinal),
        // The primary goes last, once its role is with a replica on the current template.
        Some(RollTarget::Primary(ordinal)) => match hand_over(facts, ordinal) {
            Ok(step) => Decision::Act(step),
            Err(why) => wait(
                Reason::RestartBlocked,
                format!(
                    "the primary, node {ordinal}, runs an older pod template; it hands its role over once this clears: {why}"
                ),
            ),
        },
    }
}

/// Restarts node `ordinal` onto the current pod template, once every other node is healthy.
fn restart(facts: &Facts, ordinal: usize) -> Decision {
    let observations: Vec<Observation> = facts.nodes.iter().map(NodeFact::observation).collect();
    match gate::check(&GateInput {
        target: &format!("node {ordinal}"),
        disruption: Disruption::Restart,
        observations: &observations,
        in_flight: None,
        freshness: Freshness::ThisPass,
        quorum: Quorum::EveryOtherMember,
    }) {
        Verdict::Proceed => Decision::Act(Step::RestartNode { ordinal }),
        Verdict::Wait(blocking) => wait(
            Reason::RestartBlocked,
            format!(
                "{blocking}; a node is restarted onto the current pod template only while all the others are healthy"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::info::parse_replication;

    fn address(ordinal: usize) -> SocketAddr {
        format!("127.0.9.{}:6379", ordinal + 1).parse().unwrap()
    }

    fn primary_info(replicas: &[usize]) -> ReplicationInfo {
        let mut text = format!("role:master\r\nconnected_slaves:{}\r\n", replicas.len());
        for (index, replica) in replicas.iter().enumerate() {
            text.push_str(&format!(
                "slave{index}:ip=127.0.9.{},port=6379,state=online,offset=10,lag=0\r\n",
                replica + 1
            ));
        }
        text.push_str("master_replid:abc\r\nmaster_repl_offset:10\r\n");
        parse_replication(&text).unwrap()
    }

    fn replica_info(of: usize, link_up: bool) -> ReplicationInfo {
        parse_replication(&format!(
            "role:slave\r\nmaster_host:127.0.9.{}\r\nmaster_port:6379\r\nmaster_link_status:{}\r\n\
             master_last_io_seconds_ago:1\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:10\r\n\
             connected_slaves:0\r\nmaster_replid:abc\r\nmaster_repl_offset:10\r\n",
            of + 1,
            if link_up { "up" } else { "down" }
        ))
        .unwrap()
    }

    fn node(ordinal: usize, info: ReplicationInfo) -> NodeFact {
        NodeFact {
            ordinal,
            address: Some(address(ordinal)),
            health: Health::Healthy,
            replication: Some(info),
            write_fence: Some(FENCE),
            keys: Some(100),
        }
    }

    const FENCE: WriteFence = WriteFence {
        min_replicas: 1,
        max_lag_seconds: 10,
    };
    const UNFENCED: WriteFence = WriteFence {
        min_replicas: 0,
        max_lag_seconds: 10,
    };

    fn unreachable_node(ordinal: usize) -> NodeFact {
        NodeFact {
            ordinal,
            address: Some(address(ordinal)),
            health: Health::Unknown("timed out".into()),
            replication: None,
            write_fence: None,
            keys: None,
        }
    }

    fn settings() -> SentinelSettings {
        SentinelSettings {
            quorum: 2,
            down_after: Duration::from_secs(5),
            failover_timeout: Duration::from_secs(60),
        }
    }

    fn watching(ordinal: usize, primary: usize) -> SentinelFact {
        SentinelFact {
            ordinal,
            health: Health::Healthy,
            view: Some(SentinelView {
                primary: address(primary),
                quorum: 2,
                down_after: Duration::from_secs(5),
                failover_timeout: Duration::from_secs(60),
                failover_in_progress: false,
                config_epoch: 0,
                known_replicas: 2,
                known_sentinels: 2,
            }),
        }
    }

    fn unreachable_sentinel(ordinal: usize) -> SentinelFact {
        SentinelFact {
            ordinal,
            health: Health::Unknown("connection refused".into()),
            view: None,
        }
    }

    fn new_sentinel(ordinal: usize) -> SentinelFact {
        SentinelFact {
            ordinal,
            health: Health::Healthy,
            view: None,
        }
    }

    fn facts(nodes: Vec<NodeFact>, sentinels: Vec<SentinelFact>, recorded: Option<usize>) -> Facts {
        Facts {
            cluster: "cache".into(),
            desired_nodes: 3,
            node_pods: Some(3),
            desired_sentinels: 3,
            sentinel_pods: Some(3),
            nodes,
            sentinels,
            recorded_primary: recorded,
            recorded_primary_address: recorded.map(address),
            settings: settings(),
            write_fence: FENCE,
            templates: Templates::Known {
                outdated: Default::default(),
                current: (0..3).collect(),
            },
            sentinels_rolled: true,
            sentinels_without_volume: BTreeMap::new(),
            sentinels_ready: (0..3).collect(),
            repair: None,
            pending: BTreeSet::new(),
            unready: BTreeSet::new(),
            held_back: BTreeMap::new(),
            recovery: None,
            primary_on_request: None,
        }
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

    /// Two Sentinels out of reach, the third missed the failover to node 1 and still names
    /// node 0, which came back answering as a primary (a restarted node does): one Sentinel is
    /// no majority, so node 1 keeps the writes and is not made a replica of node 0.
    #[test]
    fn a_minority_of_sentinels_naming_an_old_primary_moves_nothing() {
        let stale = facts(
            vec![
                node(0, primary_info(&[])),
                node(1, primary_info(&[2])),
                node(2, replica_info(1, true)),
            ],
            vec![watching(0, 0), unreachable_sentinel(1), unreachable_sentinel(2)],
            Some(1),
        );
        assert_eq!(serving_primary(&stale), Some(1));
        let decision = decide(&stale);
        assert!(
            !matches!(decision, Decision::Act(Step::Replicate { node: 1, .. })),
            "{decision:?}"
        );
        // The same lone Sentinel naming the recorded primary confirms it.
        let confirming = facts(
            vec![
                node(0, replica_info(1, true)),
                node(1, primary_info(&[0, 2])),
                node(2, replica_info(1, true)),
            ],
            vec![watching(0, 1), unreachable_sentinel(1), unreachable_sentinel(2)],
            Some(1),
        );
        assert!(matches!(
            find_primary(&confirming),
            PrimaryFinding::Agreed { ordinal: 1, .. }
        ));
    }

    #[test]
    fn a_repair_wipes_a_replica_once_from_a_whole_deployment_and_the_primary_hands_over_first() {
        let settled = || facts(settled_nodes(0), all_watching(0), Some(0));
        assert_eq!(
            decide(&with_repair(settled(), "cache-2", Some(2), None)),
            Decision::Act(Step::WipeNode {
                ordinal: 2,
                pod_uid: "uid-2".into()
            })
        );
        // Recorded, and its pod is still there (stopped between the record and the wipe): again.
        assert_eq!(
            decide(&with_repair(settled(), "cache-2", Some(2), Some("uid-2"))),
            Decision::Act(Step::WipeNode {
                ordinal: 2,
                pod_uid: "uid-2".into()
            })
        );
        // Another pod under the name: the request is done with.
        assert_eq!(
            decide(&with_repair(settled(), "cache-2", Some(2), Some("uid-old"))),
            Decision::Settled
        );
        // Another pod under the name on the claim recorded (replaced before the wipe reached
        // it): the same data, so the pod now there is wiped.
        let mut replaced_before_the_wipe = with_repair(settled(), "cache-2", Some(2), Some("uid-old"));
        if let Some(repair) = &mut replaced_before_the_wipe.repair {
            repair.claim_uid = Some("claim-of-uid-old".into());
        }
        assert_eq!(
            decide(&replaced_before_the_wipe),
            Decision::Act(Step::WipeNode {
                ordinal: 2,
                pod_uid: "uid-2".into()
            })
        );
        assert!(matches!(
            decide(&with_repair(settled(), "cache-0", Some(0), None)),
            Decision::Act(Step::HandOver { primary: 0, .. })
        ));
        for (case, facts, reason) in [
            (
                "a name that is no node",
                with_repair(settled(), "other-1", None, None),
                Reason::RepairRefused,
            ),
            (
                "an ordinal beyond the deployment",
                with_repair(settled(), "cache-7", Some(7), None),
                Reason::RepairRefused,
            ),
            (
                "another node syncing",
                {
                    let mut nodes = settled_nodes(0);
                    nodes[1] = node(1, replica_info(0, false));
                    with_repair(facts(nodes, all_watching(0), Some(0)), "cache-2", Some(2), None)
                },
                Reason::ReplicaSyncing,
            ),
        ] {
            let Decision::Wait(wait) = decide(&facts) else {
                panic!("{case}: not a wait")
            };
            assert_eq!(wait.reason, reason, "{case}: {wait:?}");
        }
    }

    #[test]
    fn an_unfenced_primary_is_fenced_once_a_replica_is_in_sync_and_every_node_follows() {
        let mut nodes = settled_nodes(0);
        nodes[0].write_fence = Some(UNFENCED);
        nodes[2].write_fence = Some(UNFENCED);
        let facts = facts(nodes.clone(), all_watching(0), Some(0));
        assert_eq!(
            decide(&facts),
            Decision::Act(Step::FenceWrites {
                node: 0,
                fence: FENCE
            })
        );
        // No replica in sync yet: fencing the primary now would refuse every write.
        nodes[0] = node(0, primary_info(&[]));
        nodes[0].write_fence = Some(UNFENCED);
        assert_eq!(
            decide(&super::tests::facts(nodes, all_watching(0), Some(0))),
            Decision::Act(Step::FenceWrites {
                node: 2,
                fence: FENCE
            })
        );
    }

    #[test]
    fn a_fence_the_spec_no_longer_wants_is_lowered_before_a_replica_leaves() {
        let mut facts = facts(settled_nodes(0), all_watching(0), Some(0));
        facts.desired_nodes = 1;
        facts.write_fence = UNFENCED;
        assert_eq!(
            decide(&facts),
            Decision::Act(Step::FenceWrites {
                node: 0,
                fence: UNFENCED
            })
        );
    }

    fn settled_nodes(primary: usize) -> Vec<NodeFact> {
        (0..3)
            .map(|o| {
                if o == primary {
                    node(o, primary_info(&[(o + 1) % 3, (o + 2) % 3]))
                } else {
                    node(o, replica_info(primary, true))
                }
            })
            .collect()
    }

    fn all_watching(primary: usize) -> Vec<SentinelFact> {
        (0..3).map(|s| watching(s, primary)).collect()
    }

    /// A replica whose primary is gone: its link down, `offset` bytes of the stream processed,
    /// on replication history `history`.
    fn orphan(ordinal: usize, offset: u64, history: &str) -> NodeFact {
        node(
            ordinal,
            parse_replication(&format!(
                "role:slave\r\nmaster_host:127.0.9.1\r\nmaster_port:6379\r\nmaster_link_status:down\r\n\
                 master_last_io_seconds_ago:-1\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:{offset}\r\n\
                 connected_slaves:0\r\nmaster_replid:{history}\r\nmaster_repl_offset:{offset}\r\n"
            ))
            .unwrap(),
        )
    }

    fn recover_from(member: &str, ordinal: Option<usize>) -> Option<RecoveryRequest> {
        Some(RecoveryRequest {
            member: member.into(),
            ordinal,
            done: None,
            expired: false,
        })
    }

    #[test]
    fn a_recovery_request_promotes_the_named_replica_only_while_the_primary_is_lost_and_only_if_it_holds_the_most()
     {
        // Node 0, the recorded primary, is gone; every Sentinel is new (its pod deleted), so
        // none fails over: the operator waits for a person.
        let lost = |nodes: Vec<NodeFact>, recovery: Option<RecoveryRequest>| {
            let mut facts = facts(nodes, (0..3).map(new_sentinel).collect(), Some(0));
            facts.recovery = recovery;
            facts
        };
        let orphans = || vec![unreachable_node(0), orphan(1, 500, "abc"), orphan(2, 400, "abc")];
        let blocked = decide(&lost(orphans(), None));
        assert!(
            matches!(&blocked, Decision::Wait(wait) if wait.reason == Reason::PrimaryUnknown),
            "{blocked:?}"
        );
        // The wait names the node a request would promote and the command that asks for it.
        let command = "`kubectl annotate rediscluster cache quorum.dev/recover-from=cache-1`";
        assert!(
            matches!(&blocked, Decision::Wait(wait) if wait.message.contains("promote node 1")
                && wait.message.ends_with(command)),
            "{blocked:?}"
        );
        // The same with node 2 ahead; none named while a replica is linked (no loss) or while
        // the nodes that answer follow different histories (no node a request would promote).
        let mut two_ahead = orphans();
        two_ahead[2] = orphan(2, 600, "abc");
        assert!(matches!(decide(&lost(two_ahead, None)), Decision::Wait(wait)
                if wait.message.ends_with("recover-from=cache-2`")),);
        let mut linked = orphans();
        linked[2] = node(2, replica_info(0, true));
        let mut elsewhere = orphans();
        elsewhere[2] = orphan(2, 400, "other");
        for nodes in [linked, elsewhere] {
            let decision = decide(&lost(nodes, None));
            assert!(
                matches!(&decision, Decision::Wait(wait) if !wait.message.contains("kubectl")),
                "{decision:?}"
            );
        }
        assert_eq!(
            decide(&lost(orphans(), recover_from("cache-1", Some(1)))),
            Decision::Act(Step::Promote { from: 0, to: 1 })
        );
        // A request taken (done) or expired is never taken again.
        let mut done = recover_from("cache-1", Some(1));
        done.as_mut().unwrap().done = Some("cache-0".into());
        assert_eq!(decide(&lost(orphans(), done)), blocked);
        let mut expired = recover_from("cache-1", Some(1));
        expired.as_mut().unwrap().expired = true;
        assert_eq!(decide(&lost(orphans(), expired)), blocked);

        let mut linked = orphans();
        linked[2] = node(2, replica_info(0, true));
        let mut elsewhere = orphans();
        elsewhere[2] = orphan(2, 400, "other");
        let mut chosen = orphans();
        chosen[2] = node(2, primary_info(&[]));
        let mut silent = orphans();
        silent[1] = unreachable_node(1);
        for (case, nodes, request, refusal) in [
            (
                "a node ahead of the one named",
                orphans(),
                recover_from("cache-2", Some(2)),
                "node 1 is further along",
            ),
            (
                "the lost primary named",
                orphans(),
                recover_from("cache-0", Some(0)),
                "names the primary (node 0)",
            ),
            (
                "a name that is no node",
                orphans(),
                recover_from("other-1", None),
                "not one of this cluster's 3 members",
            ),
            (
                "the named node silent",
                silent,
                recover_from("cache-1", Some(1)),
                "node 1 does not answer",
            ),
            (
                "a replica still linked",
                linked,
                recover_from("cache-1", Some(1)),
                "node 2 still has its link",
            ),
            (
                "another replication history",
                elsewhere,
                recover_from("cache-1", Some(1)),
                "another replication history",
            ),
            (
                "another node serving as primary",
                chosen,
                recover_from("cache-1", Some(1)),
                "node 2 serves as a primary",
            ),
        ] {
            let decision = decide(&lost(nodes, request));
            let Decision::Wait(wait) = &decision else {
                panic!("{case}: {decision:?}")
            };
            assert_eq!(wait.reason, Reason::RecoveryRefused, "{case}: {wait:?}");
            assert!(wait.message.contains(refusal), "{case}: {wait:?}");
        }
        // The primary answering is no loss: the pass goes on as usual, the request untaken.
        let mut back = facts(settled_nodes(0), all_watching(0), Some(0));
        back.recovery = recover_from("cache-1", Some(1));
        assert_eq!(decide(&back), Decision::Settled);
    }

    #[test]
    fn a_formed_deployment_is_settled() {
        assert_eq!(
            decide(&facts(settled_nodes(0), all_watching(0), Some(0))),
            Decision::Settled
        );
    }

    #[test]
    fn a_deployment_is_settled_only_once_every_sentinel_knows_every_replica_and_sentinel() {
        // A Sentinel learns the replicas from the primary's INFO every ten seconds: until it
        // has, a failover it starts finds no replica to promote (NOGOODSLAVE).
        let mut sentinels = all_watching(0);
        sentinels[1].view.as_mut().unwrap().known_replicas = 1;
        assert_eq!(
            decide(&facts(settled_nodes(0), sentinels, Some(0))),
            wait(
                Reason::SentinelsDiscovering,
                "Sentinel 1 knows 1 of 2 replicas and 2 of 2 other Sentinels; it learns the rest from the primary and the other Sentinels within seconds"
            )
        );
        let mut sentinels = all_watching(0);
        sentinels[2].view.as_mut().unwrap().known_sentinels = 0;
        assert_eq!(
            decide(&facts(settled_nodes(0), sentinels, Some(0))),
            wait(
                Reason::SentinelsDiscovering,
                "Sentinel 2 knows 2 of 2 replicas and 0 of 2 other Sentinels; it learns the rest from the primary and the other Sentinels within seconds"
            )
        );
    }

    #[test]
    fn pods_come_first() {
        let mut facts = facts(vec![], vec![], None);
        facts.node_pods = None;
        assert_eq!(decide(&facts), Decision::Act(Step::ScaleNodes { replicas: 3 }));
        facts.node_pods = Some(3);
        facts.sentinel_pods = Some(1);
        assert_eq!(
            decide(&facts),
            Decision::Act(Step::ScaleSentinels { replicas: 3 })
        );
    }

    #[test]
    fn formation_waits_for_every_node_then_chooses_the_first() {
        let empty = |o| node(o, primary_info(&[]));
        let starting = facts(
            vec![empty(0), empty(1), unreachable_node(2)],
            (0..3).map(new_sentinel).collect(),
            None,
        );
        assert!(matches!(
            decide(&starting),
            Decision::Wait(Wait {
                reason: Reason::NodesStarting,
                ..
            })
        ));
        let answered = facts(
            vec![empty(0), empty(1), empty(2)],
            (0..3).map(new_sentinel).collect(),
            None,
        );
        assert_eq!(
            decide(&answered),
            Decision::Act(Step::Monitor {
                sentinel: 0,
                primary: address(0)
            })
        );
        let monitored = facts(vec![empty(0), empty(1), empty(2)], all_watching(0), Some(0));
        assert_eq!(
            decide(&monitored),
            Decision::Act(Step::Replicate {
                node: 1,
                primary: address(0)
            })
        );
    }

    #[test]
    fn the_operator_follows_the_sentinels_after_a_failover() {
        // Sentinel promoted node 1; node 0 came back as a primary with its old data.
        let nodes = vec![
            node(0, primary_info(&[])),
            node(1, primary_info(&[2])),
            node(2, replica_info(1, true)),
        ];
        let decision = decide(&facts(nodes, all_watching(1), Some(0)));
        assert_eq!(
            decision,
            Decision::Act(Step::Replicate {
                node: 0,
                primary: address(1)
            })
        );
    }

    #[test]
    fn the_operator_never_promotes_when_the_sentinels_disagree_or_are_failing_over() {
        let disagreeing = vec![watching(0, 0), watching(1, 1), new_sentinel(2)];
        assert!(matches!(
            decide(&facts(settled_nodes(0), disagreeing, Some(0))),
            Decision::Wait(Wait {
                reason: Reason::SentinelsDisagree,
                ..
            })
        ));
        let mut failing_over = all_watching(0);
        failing_over[2].view.as_mut().unwrap().failover_in_progress = true;
        assert!(matches!(
            decide(&facts(settled_nodes(0), failing_over, Some(0))),
            Decision::Wait(Wait {
                reason: Reason::FailoverInProgress,
                ..
            })
        ));
    }

    #[test]
    fn an_unreachable_primary_is_left_to_the_sentinels() {
        let mut nodes = settled_nodes(0);
        nodes[0] = unreachable_node(0);
        let decision = decide(&facts(nodes, all_watching(0), Some(0)));
        assert!(matches!(
            decision,
            Decision::Wait(Wait {
                reason: Reason::PrimaryUnknown,
                ..
            })
        ));
    }

    #[test]
    fn a_primary_the_kubelet_holds_back_is_failed_over_at_once_and_only_then() {
        let crashed = || {
            vec![
                unreachable_node(0),
                node(1, replica_info(0, false)),
                node(2, replica_info(0, false)),
            ]
        };
        let held_back = |mut facts: Facts| {
            facts.held_back.insert(0, "CrashLoopBackOff".into());
            facts
        };
        let fail_over = Decision::Act(Step::FailOver {
            sentinel: 0,
            primary: 0,
            held_back: "CrashLoopBackOff".into(),
        });
        assert_eq!(
            decide(&held_back(facts(crashed(), all_watching(0), Some(0)))),
            fail_over
        );
        // The first Sentinel that answers and names the primary is asked.
        let first_down = vec![unreachable_sentinel(0), watching(1, 0), watching(2, 0)];
        assert_eq!(
            decide(&held_back(facts(crashed(), first_down, Some(0)))),
            Decision::Act(Step::FailOver {
                sentinel: 1,
                primary: 0,
                held_back: "CrashLoopBackOff".into(),
            })
        );

        let waits = |facts: Facts, reason: Reason, case: &str| {
            match decide(&facts) {
                Decision::Wait(wait) => assert_eq!(wait.reason, reason, "{case}: {wait:?}"),
                other => panic!("{case}: {other:?}"),
            };
        };
        waits(
            facts(crashed(), all_watching(0), Some(0)),
            Reason::PrimaryUnknown,
            "unreachable, but the kubelet says nothing: the Sentinels decide",
        );
        let mut failing_over = all_watching(0);
        failing_over[2].view.as_mut().unwrap().failover_in_progress = true;
        waits(
            held_back(facts(crashed(), failing_over, Some(0))),
            Reason::FailoverInProgress,
            "a Sentinel is failing over already",
        );
        waits(
            held_back(facts(
                vec![unreachable_node(0), unreachable_node(1), unreachable_node(2)],
                all_watching(0),
                Some(0),
            )),
            Reason::PrimaryUnknown,
            "no replica that follows it answers",
        );
        let served = held_back(facts(settled_nodes(0), all_watching(0), Some(0)));
        assert!(
            !matches!(decide(&served), Decision::Act(Step::FailOver { .. })),
            "the primary answers: the kubelet's word is older than the answer"
        );
    }

    #[test]
    fn the_last_agreed_primary_keeps_serving_until_a_majority_names_another() {
        type Case = (&'static str, Vec<NodeFact>, Vec<SentinelFact>, Option<usize>);
        let cases: Vec<Case> = vec![
            ("agreed", settled_nodes(1), all_watching(1), Some(1)),
            (
                "every Sentinel down: the recorded primary serves on",
                settled_nodes(1),
                vec![
                    unreachable_sentinel(0),
                    unreachable_sentinel(1),
                    unreachable_sentinel(2),
                ],
                Some(1),
            ),
            (
                "Sentinels split one to one, the third down",
                settled_nodes(1),
                vec![watching(0, 1), watching(1, 2), unreachable_sentinel(2)],
                Some(1),
            ),
            (
                "a majority names another node, which says it is the primary",
                {
                    let mut nodes = settled_nodes(1);
                    nodes[2] = node(2, primary_info(&[]));
                    nodes
                },
                vec![watching(0, 2), watching(1, 2), watching(2, 1)],
                Some(2),
            ),
            (
                "the recorded primary says it is a replica now",
                {
                    let mut nodes = settled_nodes(1);
                    nodes[1] = node(1, replica_info(2, true));
                    nodes
                },
                vec![watching(0, 1), watching(1, 2), unreachable_sentinel(2)],
                None,
            ),
            (
                "the recorded primary unreachable: it may still be the primary",
                {
                    let mut nodes = settled_nodes(1);
                    nodes[1] = unreachable_node(1);
                    nodes
                },
                vec![
                    unreachable_sentinel(0),
                    unreachable_sentinel(1),
                    unreachable_sentinel(2),
                ],
                Some(1),
            ),
        ];
        for (case, nodes, sentinels, expected) in cases {
            let facts = facts(nodes, sentinels, Some(1));
            assert_eq!(serving_primary(&facts), expected, "{case}");
        }
    }

    fn at_epoch(mut sentinel: SentinelFact, epoch: u64) -> SentinelFact {
        sentinel.view.as_mut().unwrap().config_epoch = epoch;
        sentinel
    }

    #[test]
    fn a_failover_is_followed_as_soon_as_its_leader_holds_it_without_waiting_for_the_others_to_hear() {
        // Node 0, the primary, was killed; the Sentinel that led the failover (epoch 1) promoted
        // node 1, and the other two have not had its hello message yet.
        let after_failover = || {
            vec![
                unreachable_node(0),
                node(1, primary_info(&[2])),
                node(2, replica_info(1, true)),
            ]
        };
        let leader_ahead = || vec![watching(0, 0), at_epoch(watching(1, 1), 1), watching(2, 0)];
        type Case = (&'static str, Vec<NodeFact>, Vec<SentinelFact>, Option<usize>);
        let cases: Vec<Case> = vec![
            (
                "the leader's newer configuration",
                after_failover(),
                leader_ahead(),
                Some(1),
            ),
            (
                "the leader's newer configuration, another Sentinel down",
                after_failover(),
                vec![
                    watching(0, 0),
                    at_epoch(watching(1, 1), 1),
                    unreachable_sentinel(2),
                ],
                Some(1),
            ),
            (
                "the node it names does not say it is a primary (yet): the majority's",
                {
                    let mut nodes = after_failover();
                    nodes[1] = node(1, replica_info(0, false));
                    nodes
                },
                leader_ahead(),
                Some(0),
            ),
            (
                "the node it names does not answer: the majority's",
                {
                    let mut nodes = after_failover();
                    nodes[1] = unreachable_node(1);
                    nodes
                },
                leader_ahead(),
                Some(0),
            ),
            (
                "two Sentinels share the newest epoch: no view is ahead, the majority's",
                after_failover(),
                vec![
                    at_epoch(watching(0, 0), 1),
                    at_epoch(watching(1, 1), 1),
                    watching(2, 0),
                ],
                Some(0),
            ),
            (
                "a Sentinel behind the others (re-monitored, epoch 0) is not followed",
                settled_nodes(0),
                vec![
                    at_epoch(watching(0, 0), 3),
                    at_epoch(watching(1, 0), 3),
                    watching(2, 1),
                ],
                Some(0),
            ),
        ];
        for (case, nodes, sentinels, expected) in cases {
            let facts = facts(nodes, sentinels, Some(0));
            let found = find_primary(&facts).ordinal();
            assert_eq!(found, expected, "{case}: {:?}", find_primary(&facts));
        }
        // While the leader is still failing over, nothing is followed yet.
        let mut failing_over = leader_ahead();
        failing_over[1].view.as_mut().unwrap().failover_in_progress = true;
        assert!(matches!(
            find_primary(&facts(after_failover(), failing_over, Some(0))),
            PrimaryFinding::Unknown(Wait {
                reason: Reason::FailoverInProgress,
                ..
            })
        ));
    }

    #[test]
    fn a_new_sentinel_is_told_what_the_others_agree_on() {
        let sentinels = vec![watching(0, 1), new_sentinel(1), watching(2, 1)];
        let decision = decide(&facts(settled_nodes(1), sentinels, Some(0)));
        assert_eq!(
            decision,
            Decision::Act(Step::Monitor {
                sentinel: 1,
                primary: address(1)
            })
        );
    }

    #[test]
    fn no_sentinel_and_an_unreachable_recorded_primary_means_wait() {
        let mut nodes = settled_nodes(0);
        nodes[0] = unreachable_node(0);
        let decision = decide(&facts(nodes, (0..3).map(new_sentinel).collect(), Some(0)));
        assert!(matches!(
            decision,
            Decision::Wait(Wait {
                reason: Reason::PrimaryUnknown,
                ..
            })
        ));
    }

    #[test]
    fn drifted_sentinel_settings_are_corrected() {
        let mut sentinels = all_watching(0);
        sentinels[1].view.as_mut().unwrap().down_after = Duration::from_secs(30);
        assert_eq!(
            decide(&facts(settled_nodes(0), sentinels, Some(0))),
            Decision::Act(Step::Configure { sentinel: 1 })
        );
    }

    #[test]
    fn scale_in_removes_a_replica_only_while_the_rest_are_healthy() {
        let mut shrinking = facts(settled_nodes(0), all_watching(0), Some(0));
        shrinking.desired_nodes = 2;
        assert_eq!(decide(&shrinking), Decision::Act(Step::RemoveNode { ordinal: 2 }));
        shrinking.nodes[1] = unreachable_node(1);
        assert!(matches!(
            decide(&shrinking),
            Decision::Wait(Wait {
                reason: Reason::ScaleInBlocked,
                ..
            })
        ));
    }

    #[test]
    fn a_leaving_primary_is_failed_over_by_sentinel_first() {
        let mut shrinking = facts(settled_nodes(2), all_watching(2), Some(2));
        shrinking.desired_nodes = 2;
        assert_eq!(
            decide(&shrinking),
            Decision::Act(Step::HandOver {
                primary: 2,
                sentinel: 0
            })
        );
    }

    #[test]
    fn a_sentinel_left_watching_an_address_no_node_has_is_repointed_at_the_agreed_primary() {
        let mut behind = facts(settled_nodes(0), all_watching(0), Some(0));
        let gone: SocketAddr = "127.0.9.99:6379".parse().unwrap();
        behind.sentinels[2].view.as_mut().unwrap().primary = gone;
        assert_eq!(
            decide(&behind),
            Decision::Act(Step::RepointSentinel {
                sentinel: 2,
                primary: address(0)
            })
        );
        // One naming a replica with an older configuration than the others takes theirs from
        // their next hello message: Sentinel's own business, not re-pointed.
        let view = behind.sentinels[2].view.as_mut().unwrap();
        view.primary = address(1);
        view.config_epoch = 0;
        for other in [0, 1] {
            behind.sentinels[other].view.as_mut().unwrap().config_epoch = 3;
        }
        assert!(!matches!(
            decide(&behind),
            Decision::Act(Step::RepointSentinel { .. })
        ));
    }

    #[test]
    fn a_sentinel_naming_a_replica_with_the_epoch_of_the_others_is_repointed() {
        // Sentinel takes another's view only from a newer epoch: with the same one, neither
        // side gives way and it names the replica for good.
        let naming_node_1_at = |epoch: u64| {
            let mut facts = facts(settled_nodes(0), all_watching(0), Some(0));
            for (ordinal, sentinel) in facts.sentinels.iter_mut().enumerate() {
                let view = sentinel.view.as_mut().unwrap();
                view.config_epoch = if ordinal == 2 { epoch } else { 3 };
                if ordinal == 2 {
                    view.primary = address(1);
                    view.known_replicas = 0;
                }
            }
            facts
        };
        assert_eq!(
            decide(&naming_node_1_at(3)),
            Decision::Act(Step::RepointSentinel {
                sentinel: 2,
                primary: address(0)
            })
        );
        // With a newer epoch the others take its view from its hello messages: Sentinel's own
        // business.
        assert!(!matches!(
            decide(&naming_node_1_at(4)),
            Decision::Act(Step::RepointSentinel { .. })
        ));
    }

    #[test]
    fn sentinels_made_without_volumes_move_onto_volumes_one_at_a_time_while_all_watch() {
        let mut moving = facts(settled_nodes(0), all_watching(0), Some(0));
        moving.sentinels_without_volume = BTreeMap::from([(0, "uid-0".into()), (2, "uid-2".into())]);
        // The lowest first: the StatefulSet controller makes no higher pod while pod 0 is old.
        assert_eq!(
            decide(&moving),
            Decision::Act(Step::MoveSentinelOntoVolume {
                sentinel: 0,
                pod_uid: "uid-0".into()
            })
        );
        // Just deleted, its pod gone, the old process still answering: nothing more moves
        // until its replacement is Ready.
        moving.sentinels_without_volume.remove(&0);
        moving.sentinels_ready.remove(&0);
        assert_eq!(
            decide(&moving),
            Decision::wait(
                Reason::MovingSentinelOntoVolume,
                "Sentinel 2 moves onto a volume of its own once Sentinel 0's pod is Ready"
            ),
            "a move that cannot be taken says what it waits for, never Settled"
        );
        // The one replaced is new: it waits until it is told what to monitor.
        moving.sentinels_ready.insert(0);
        moving.sentinels[0].view = None;
        assert!(!matches!(
            decide(&moving),
            Decision::Act(Step::MoveSentinelOntoVolume { .. })
        ));
        moving.sentinels[0] = all_watching(0).remove(0);
        assert_eq!(
            decide(&moving),
            Decision::Act(Step::MoveSentinelOntoVolume {
                sentinel: 2,
                pod_uid: "uid-2".into()
            })
        );
        // A Sentinel that does not answer: the others keep the quorum, none is replaced.
        moving.sentinels[1].health = Health::Unknown("timed out".into());
        assert!(!matches!(
            decide(&moving),
            Decision::Act(Step::MoveSentinelOntoVolume { .. })
        ));
        // Every Sentinel on a volume: nothing to move.
        let settled = facts(settled_nodes(0), all_watching(0), Some(0));
        assert_eq!(decide(&settled), Decision::Settled);
    }

    #[test]
    fn sentinels_forget_gone_replicas_one_at_a_time_when_all_answer() {
        let mut sentinels = all_watching(0);
        sentinels[0].view.as_mut().unwrap().known_replicas = 3;
        assert_eq!(
            decide(&facts(settled_nodes(0), sentinels.clone(), Some(0))),
            Decision::Act(Step::ResetSentinel { sentinel: 0 })
        );
        sentinels[2].health = Health::Unknown("timed out".into());
        sentinels[2].view = None;
        assert!(!matches!(
            decide(&facts(settled_nodes(0), sentinels, Some(0))),
            Decision::Act(Step::ResetSentinel { .. })
        ));
    }

    #[test]
    fn a_syncing_replica_is_not_settled() {
        let mut nodes = settled_nodes(0);
        nodes[2] = node(2, replica_info(0, false));
        assert!(matches!(
            decide(&facts(nodes, all_watching(0), Some(0))),
            Decision::Wait(Wait {
                reason: Reason::ReplicaSyncing,
                ..
            })
        ));
    }
    /// Every data pod came back on a new address (`127.0.10.x`); the Sentinels still name the
    /// primary's old one (`127.0.9.1`), and every node is a primary of nothing.
    fn moved_nodes() -> Vec<NodeFact> {
        (0..3)
            .map(|o| NodeFact {
                address: Some(moved(o)),
                ..node(o, primary_info(&[]))
            })
            .collect()
    }

    fn moved(ordinal: usize) -> SocketAddr {
        format!("127.0.10.{}:6379", ordinal + 1).parse().unwrap()
    }

    fn naming(ordinal: usize, primary: SocketAddr) -> SentinelFact {
        let mut sentinel = watching(ordinal, 0);
        sentinel.view.as_mut().unwrap().primary = primary;
        sentinel
    }

    #[test]
    fn every_node_on_a_new_address_repoints_the_sentinels_to_the_recorded_primary_one_at_a_time() {
        type Case = (&'static str, Vec<SentinelFact>, Decision);
        let cases: Vec<Case> = vec![
            (
                "every Sentinel names the old address",
                all_watching(0),
                Decision::Act(Step::RepointSentinel {
                    sentinel: 0,
                    primary: moved(0),
                }),
            ),
            (
                "one re-pointed: the majority holds across old and new address",
                vec![naming(0, moved(0)), watching(1, 0), watching(2, 0)],
                Decision::Act(Step::RepointSentinel {
                    sentinel: 1,
                    primary: moved(0),
                }),
            ),
            (
                "all re-pointed: the others follow the primary at its new address",
                (0..3).map(|s| naming(s, moved(0))).collect(),
                Decision::Act(Step::Replicate {
                    node: 1,
                    primary: moved(0),
                }),
            ),
        ];
        for (case, sentinels, expected) in cases {
            assert_eq!(
                decide(&facts(moved_nodes(), sentinels, Some(0))),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn a_moved_primary_is_followed_only_when_it_is_a_fit_source() {
        let waits = |nodes: Vec<NodeFact>, reason: Reason| {
            let decision = decide(&facts(nodes, all_watching(0), Some(0)));
            assert!(
                matches!(&decision, Decision::Wait(w) if w.reason == reason),
                "{reason}: {decision:?}"
            );
        };
        let mut unreachable = moved_nodes();
        unreachable[0] = NodeFact {
            address: Some(moved(0)),
            ..unreachable_node(0)
        };
        waits(unreachable, Reason::PrimaryUnknown);
        let mut loading = moved_nodes();
        loading[0].keys = None;
        waits(loading, Reason::PrimaryLoading);
        let mut empty = moved_nodes();
        empty[0].keys = Some(0);
        waits(empty, Reason::PrimaryEmpty);
        // Nothing anywhere: an empty primary is as good as any.
        let mut all_empty = moved_nodes();
        for node in &mut all_empty {
            node.keys = Some(0);
        }
        assert_eq!(
            decide(&facts(all_empty, all_watching(0), Some(0))),
            Decision::Act(Step::RepointSentinel {
                sentinel: 0,
                primary: moved(0)
            })
        );
    }

    #[test]
    fn an_address_of_the_recorded_primary_that_another_node_has_now_waits_for_a_human() {
        // Node 1 came back on the primary's old address, node 0 on a new one.
        let mut nodes = moved_nodes();
        nodes[1].address = Some(address(0));
        let decision = decide(&facts(nodes.clone(), all_watching(0), Some(0)));
        assert!(
            matches!(&decision, Decision::Wait(w) if w.reason == Reason::PrimaryAddressReused),
            "{decision:?}"
        );
        assert_eq!(serving_primary(&facts(nodes, all_watching(0), Some(0))), Some(0));
    }

    #[test]
    fn a_sentinel_that_answers_late_after_a_total_outage_is_repointed_too() {
        // Every pod came back on a new address. Only Sentinel 0 answers at first; it is
        // re-pointed at node 0's new address. The old address stays recorded until a majority
        // names the new one, so Sentinels 1 and 2, answering later with the old address, are
        // known to mean node 0 and re-pointed as well.
        let first = facts(
            moved_nodes(),
            vec![
                naming(0, moved(0)),
                unreachable_sentinel(1),
                unreachable_sentinel(2),
            ],
            Some(0),
        );
        assert_eq!(primary_address_to_record(&first, 0, moved(0)), address(0));
        let later = facts(
            moved_nodes(),
            vec![naming(0, moved(0)), watching(1, 0), watching(2, 0)],
            Some(0),
        );
        assert_eq!(
            decide(&later),
            Decision::Act(Step::RepointSentinel {
                sentinel: 1,
                primary: moved(0)
            })
        );
        let majority = facts(
            moved_nodes(),
            vec![naming(0, moved(0)), naming(1, moved(0)), watching(2, 0)],
            Some(0),
        );
        assert_eq!(primary_address_to_record(&majority, 0, moved(0)), moved(0));
        // A new primary is recorded at once, and so is the first one.
        assert_eq!(primary_address_to_record(&first, 1, moved(1)), moved(1));
        let mut unrecorded = first.clone();
        unrecorded.recorded_primary_address = None;
        assert_eq!(primary_address_to_record(&unrecorded, 0, moved(0)), moved(0));
    }

    #[test]
    fn the_recorded_address_outlives_a_failover_attempt_made_while_every_pod_was_gone() {
        // Every data pod deleted at once: while they are gone a Sentinel starts failing node 0
        // over, so no node takes writes. Its pods come back on new addresses, the attempt runs
        // out, and the Sentinels name node 0's old address again: only the recorded address
        // says that they mean node 0.
        let mut attempt = all_watching(0);
        attempt[1].view.as_mut().unwrap().failover_in_progress = true;
        let during = facts(moved_nodes(), attempt, Some(0));
        let finding = find_primary(&during);
        let serving = serving_primary_given(&during, &finding);
        assert_eq!(serving, None, "{finding:?}");
        let kept = primary_address_after(&during, &finding, serving, None);
        assert_eq!(kept, Some(address(0)));
        let mut after = facts(moved_nodes(), all_watching(0), Some(0));
        after.recorded_primary_address = kept;
        assert_eq!(
            decide(&after),
            Decision::Act(Step::RepointSentinel {
                sentinel: 0,
                primary: moved(0)
            })
        );
        // Another node taking over drops it; the same node agreed on elsewhere records that.
        let taken = facts(moved_nodes(), all_watching(0), Some(0));
        let elsewhere = PrimaryFinding::Unknown(Wait {
            reason: Reason::SentinelsDisagree,
            message: String::new(),
        });
        assert_eq!(primary_address_after(&taken, &elsewhere, Some(1), None), None);
        assert_eq!(
            primary_address_after(&taken, &elsewhere, Some(0), Some(2)),
            Some(moved(2))
        );
    }

    #[test]
    fn an_address_nobody_recorded_still_waits() {
        let stray: SocketAddr = "127.0.9.7:6379".parse().unwrap();
        let sentinels: Vec<_> = (0..3).map(|s| naming(s, stray)).collect();
        let decision = decide(&facts(moved_nodes(), sentinels, Some(0)));
        assert!(
            matches!(&decision, Decision::Wait(w) if w.reason == Reason::PrimaryNotANode),
            "{decision:?}"
        );
        let mut unrecorded = facts(moved_nodes(), all_watching(0), Some(0));
        unrecorded.recorded_primary_address = None;
        assert!(matches!(
            decide(&unrecorded),
            Decision::Wait(Wait {
                reason: Reason::PrimaryNotANode,
                ..
            })
        ));
    }

    #[test]
    fn after_a_recovery_sentinels_that_missed_it_are_repointed_at_the_new_primary_never_followed() {
        // Node 1 was made the primary on request while node 0 was lost and most Sentinels were
        // out of reach; node 2 follows it. Node 0 comes back as the primary it was, and so do
        // two Sentinels that never heard of the recovery. Following them would make nodes 1
        // and 2 replicas of node 0 and drop every write since the recovery.
        let nodes = || {
            vec![
                node(0, primary_info(&[])),
                node(1, primary_info(&[2])),
                node(2, replica_info(1, true)),
            ]
        };
        let recovered = |nodes: Vec<NodeFact>, sentinels: Vec<SentinelFact>| Facts {
            primary_on_request: Some(1),
            ..facts(nodes, sentinels, Some(1))
        };
        let stale = || vec![watching(0, 0), watching(1, 0), watching(2, 1)];
        assert_eq!(
            decide(&recovered(nodes(), stale())),
            Decision::Act(Step::RepointSentinel {
                sentinel: 0,
                primary: address(1)
            })
        );
        assert_eq!(
            primary_on_request_after(&recovered(nodes(), stale()), None),
            Some(1)
        );
        // Once every Sentinel monitors node 1, node 0 follows it, and the record ends.
        let repointed = recovered(nodes(), all_watching(1));
        assert_eq!(
            decide(&repointed),
            Decision::Act(Step::Replicate {
                node: 0,
                primary: address(1)
            })
        );
        assert_eq!(primary_on_request_after(&repointed, None), None);
        // A Sentinel out of reach may still name node 0: the record stays.
        let one_unreachable = recovered(
            nodes(),
            vec![watching(0, 1), watching(1, 1), unreachable_sentinel(2)],
        );
        assert_eq!(primary_on_request_after(&one_unreachable, None), Some(1));
        // Node 1 out of reach: the stale majority is not followed in the meantime.
        let mut gone = nodes();
        gone[1] = unreachable_node(1);
        let decision = decide(&recovered(gone, stale()));
        assert!(
            matches!(&decision, Decision::Wait(w) if w.reason == Reason::PrimaryUnknown),
            "{decision:?}"
        );
        // Node 1 answering as a replica: the Sentinels failed over since, as they may.
        let mut demoted = settled_nodes(2);
        demoted[1] = node(1, replica_info(2, true));
        let failed_over = recovered(demoted, all_watching(2));
        assert_eq!(primary_on_request_after(&failed_over, None), None);
        assert_eq!(
            find_primary(&failed_over),
            PrimaryFinding::Agreed {
                ordinal: 2,
                address: address(2)
            }
        );
        // The pass that promotes records it.
        assert_eq!(
            primary_on_request_after(&facts(nodes(), stale(), Some(0)), Some(1)),
            Some(1)
        );
    }

    #[test]
    fn a_minority_naming_a_gone_address_does_not_block_the_majority() {
        let gone: SocketAddr = "127.0.9.7:6379".parse().unwrap();
        let sentinels = vec![watching(0, 0), watching(1, 0), naming(2, gone)];
        assert_eq!(
            find_primary(&facts(settled_nodes(0), sentinels, Some(0))),
            PrimaryFinding::Agreed {
                ordinal: 0,
                address: address(0)
            }
        );
    }

    #[test]
    fn sentinels_that_forgot_everything_monitor_the_recorded_primary_only_if_it_holds_the_data() {
        let new_sentinels = || (0..3).map(new_sentinel).collect::<Vec<_>>();
        assert_eq!(
            decide(&facts(moved_nodes(), new_sentinels(), Some(0))),
            Decision::Act(Step::Monitor {
                sentinel: 0,
                primary: moved(0)
            })
        );
        let mut empty = moved_nodes();
        empty[0].keys = Some(0);
        assert!(matches!(
            decide(&facts(empty, new_sentinels(), Some(0))),
            Decision::Wait(Wait {
                reason: Reason::PrimaryEmpty,
                ..
            })
        ));
    }

    #[test]
    fn a_failover_attempt_toward_a_moved_primary_is_not_interrupted() {
        let mut sentinels = all_watching(0);
        sentinels[1].view.as_mut().unwrap().failover_in_progress = true;
        assert!(matches!(
            decide(&facts(moved_nodes(), sentinels, Some(0))),
            Decision::Wait(Wait {
                reason: Reason::FailoverInProgress,
                ..
            })
        ));
    }

    fn with_outdated(mut facts: Facts, outdated: &[usize]) -> Facts {
        facts.templates = Templates::Known {
            outdated: outdated.iter().map(|o| (*o, format!("uid-{o}"))).collect(),
            current: (0..3).filter(|o| !outdated.contains(o)).collect(),
        };
        facts
    }

    #[test]
    fn a_replica_stuck_pending_on_an_older_template_is_replaced_without_waiting_for_it() {
        // Node 2 could not be placed under the old template: it does not answer, so a roll
        // waiting for every node to be healthy would wait for ever.
        let mut nodes = settled_nodes(0);
        nodes[2] = unreachable_node(2);
        let mut stuck = with_outdated(facts(nodes, all_watching(0), Some(0)), &[0, 1, 2]);
        stuck.pending = [2].into();
        assert_eq!(decide(&stuck), Decision::Act(Step::RestartNode { ordinal: 2 }));
        // Pending on the current template: it waits like any node starting.
        let mut placed = with_outdated(stuck.clone(), &[0, 1]);
        placed.nodes = stuck.nodes.clone();
        let decision = decide(&placed);
        assert!(decision.step().is_none(), "{decision:?}");
    }

    #[test]
    fn a_new_template_restarts_replicas_one_at_a_time_then_hands_the_primary_over_and_restarts_it() {
        let settled = || facts(settled_nodes(0), all_watching(0), Some(0));
        assert_eq!(
            decide(&with_outdated(settled(), &[0, 1, 2])),
            Decision::Act(Step::RestartNode { ordinal: 1 })
        );
        assert_eq!(
            decide(&with_outdated(settled(), &[0, 2])),
            Decision::Act(Step::RestartNode { ordinal: 2 })
        );
        // Every replica current: the primary hands its role over rather than restarting.
        assert_eq!(
            decide(&with_outdated(settled(), &[0])),
            Decision::Act(Step::HandOver {
                primary: 0,
                sentinel: 0
            })
        );
        // The Sentinels made node 1 the primary: node 0 is now a replica and restarts.
        let handed_over = facts(settled_nodes(1), all_watching(1), Some(1));
        assert_eq!(
            decide(&with_outdated(handed_over, &[0])),
            Decision::Act(Step::RestartNode { ordinal: 0 })
        );
        assert_eq!(decide(&with_outdated(settled(), &[])), Decision::Settled);
    }

    #[test]
    fn the_roll_waits_for_a_restarted_node_to_be_back_and_in_sync() {
        let mut restarting = with_outdated(facts(settled_nodes(0), all_watching(0), Some(0)), &[0, 2]);
        restarting.nodes[1] = unreachable_node(1);
        let Decision::Wait(wait) = decide(&restarting) else {
            panic!("a restart while node 1 is down")
        };
        assert_eq!(wait.reason, Reason::RestartInProgress, "{wait:?}");

        let mut syncing = with_outdated(facts(settled_nodes(0), all_watching(0), Some(0)), &[0, 2]);
        syncing.nodes[1] = node(1, replica_info(0, false));
        let Decision::Wait(wait) = decide(&syncing) else {
            panic!("a restart while node 1 syncs")
        };
        assert_eq!(wait.reason, Reason::RestartInProgress, "{wait:?}");

        // Outside a roll the same waits are for a person to look at.
        let mut down = facts(settled_nodes(0), all_watching(0), Some(0));
        down.nodes[1] = unreachable_node(1);
        assert!(matches!(
            decide(&down),
            Decision::Wait(Wait {
                reason: Reason::NodeNotHealthy,
                ..
            })
        ));
    }

    #[test]
    fn nothing_restarts_while_the_current_template_is_unknown() {
        let mut facts = facts(settled_nodes(0), all_watching(0), Some(0));
        facts.templates = Templates::Unknown;
        assert_eq!(decide(&facts), Decision::Settled);
    }

    #[test]
    fn a_lone_primary_restarts_in_place() {
        let mut lone = facts(vec![node(0, primary_info(&[]))], all_watching(0), Some(0));
        lone.desired_nodes = 1;
        lone.node_pods = Some(1);
        for sentinel in &mut lone.sentinels {
            sentinel.view.as_mut().unwrap().known_replicas = 0;
        }
        lone.templates = Templates::Known {
            outdated: [(0, "uid-0".to_string())].into(),
            current: Default::default(),
        };
        assert_eq!(decide(&lone), Decision::Act(Step::RestartNode { ordinal: 0 }));
    }

    #[test]
    fn the_primary_hands_over_only_while_every_node_is_in_sync_and_no_sentinel_restarts() {
        let last = || with_outdated(facts(settled_nodes(0), all_watching(0), Some(0)), &[0]);
        let mut sentinels_rolling = last();
        sentinels_rolling.sentinels_rolled = false;
        let Decision::Wait(wait) = decide(&sentinels_rolling) else {
            panic!("a handover while the Sentinels roll")
        };
        assert_eq!(wait.reason, Reason::RestartBlocked, "{wait:?}");

        // A leaving primary waits the same way for a replica to be back in sync.
        let mut shrinking = facts(settled_nodes(2), all_watching(2), Some(2));
        shrinking.desired_nodes = 2;
        shrinking.nodes[0] = node(0, replica_info(2, false));
        let Decision::Wait(wait) = decide(&shrinking) else {
            panic!("a handover while node 0 syncs")
        };
        assert_eq!(wait.reason, Reason::PrimaryLeaving, "{wait:?}");
        assert!(wait.message.contains("node 0 is not in sync"), "{wait:?}");
    }

    #[test]
    fn a_pod_being_replaced_holds_the_roll() {
        let mut replacing = facts(settled_nodes(0), all_watching(0), Some(0));
        // Node 2's pod is terminating: neither on the old template nor on the new one, yet its
        // server may still answer.
        replacing.templates = Templates::Known {
            outdated: [(0, "uid-0".to_string())].into(),
            current: [1].into(),
        };
        let Decision::Wait(wait) = decide(&replacing) else {
            panic!("a restart while node 2's pod is replaced")
        };
        assert_eq!(wait.reason, Reason::RestartInProgress, "{wait:?}");
    }

    #[test]
    fn a_pod_back_but_not_ready_by_its_probes_holds_the_roll() {
        let mut unready = facts(settled_nodes(0), all_watching(0), Some(0));
        unready.templates = Templates::Known {
            outdated: [(0, "uid-0".to_string()), (2, "uid-2".to_string())].into(),
            current: [1].into(),
        };
        unready.unready = [1].into();
        let Decision::Wait(wait) = decide(&unready) else {
            panic!("node 2 restarted while node 1's pod is not Ready")
        };
        assert_eq!(wait.reason, Reason::RestartInProgress, "{wait:?}");
        assert!(wait.message.contains("node 1's pod is not Ready"), "{wait:?}");
        unready.unready.clear();
        assert_eq!(decide(&unready), Decision::Act(Step::RestartNode { ordinal: 2 }));
        // With nothing to roll, a pod not Ready holds nothing up.
        let mut rolled = facts(settled_nodes(0), all_watching(0), Some(0));
        rolled.unready = [1].into();
        assert_eq!(decide(&rolled), Decision::Settled);
    }

    #[test]
    fn a_primary_a_sentinel_is_still_failing_over_takes_no_writes_when_it_is_back() {
        // Node 1 was the primary and crashed. Sentinels 0 and 1 failed it over to node 0 (epoch
        // 4); Sentinel 2 began a failover of its own, which cannot win, and names node 1 until
        // its failover timeout. Node 1 restarts and answers as a primary: what it took now would
        // be dropped when it follows node 0, so node 0, the majority's newer choice, serves.
        let nodes = vec![
            node(0, primary_info(&[2])),
            node(1, primary_info(&[])),
            node(2, replica_info(0, true)),
        ];
        let mut sentinels = vec![watching(0, 0), watching(1, 0), watching(2, 1)];
        for sentinel in &mut sentinels[..2] {
            sentinel.view.as_mut().unwrap().config_epoch = 4;
        }
        sentinels[2].view.as_mut().unwrap().failover_in_progress = true;
        let completed = facts(nodes.clone(), sentinels.clone(), Some(1));
        assert!(matches!(
            find_primary(&completed),
            PrimaryFinding::Agreed { ordinal: 0, .. }
        ));
        assert_eq!(serving_primary(&completed), Some(0));
        // Sentinel 2 led that failover (epoch 4 too) and still reconfigures the nodes, the dead
        // former primary among them, before it names node 0 itself.
        let mut leading = sentinels.clone();
        leading[2].view.as_mut().unwrap().config_epoch = 4;
        let leading = facts(nodes.clone(), leading, Some(1));
        assert_eq!(serving_primary(&leading), Some(0));
        // And node 1 follows node 0, as the Sentinels would have it.
        assert!(matches!(
            decide(&leading),
            Decision::Act(Step::Replicate { node: 1, .. })
        ));

        // The same Sentinel failing node 1 over before the others have chosen: nobody serves
        // until the failover ends (node 1 takes writes again if it is still the primary then).
        let mut alone = all_watching(1);
        alone[2].view.as_mut().unwrap().failover_in_progress = true;
        let in_progress = facts(nodes.clone(), alone.clone(), Some(1));
        let PrimaryFinding::Unknown(wait) = find_primary(&in_progress) else {
            panic!("a failover in progress was not waited for")
        };
        assert_eq!(wait.reason, Reason::FailoverInProgress);
        assert_eq!(serving_primary(&in_progress), None);

        // A majority on the newer epoch whose node does not say it is the primary yet: waited
        // for, and the node being failed over still takes nothing.
        let mut not_yet = nodes;
        not_yet[0] = node(0, replica_info(1, false));
        let promoting = facts(not_yet, sentinels, Some(1));
        assert!(matches!(find_primary(&promoting), PrimaryFinding::Unknown(_)));
        assert_eq!(serving_primary(&promoting), None);

        // A failover of another node than the recorded primary leaves the recorded one serving.
        let mut elsewhere = all_watching(1);
        let view = elsewhere[2].view.as_mut().unwrap();
        view.failover_in_progress = true;
        view.primary = address(2);
        assert_eq!(
            serving_primary(&facts(settled_nodes(1), elsewhere, Some(1))),
            Some(1)
        );
    }

    #[test]
    fn sentinels_still_naming_a_primary_that_now_follows_another_are_not_followed() {
        // Node 0 handed over to node 1 and follows it; the Sentinels have not all heard yet.
        let mut nodes = settled_nodes(1);
        nodes[0] = node(0, replica_info(1, true));
        let sentinels = vec![watching(0, 1), watching(1, 0), watching(2, 0)];
        let facts = facts(nodes, sentinels, Some(1));
        let PrimaryFinding::Unknown(wait) = find_primary(&facts) else {
            panic!("the stale majority followed")
        };
        assert_eq!(wait.reason, Reason::FailoverInProgress);
        assert_eq!(
            serving_primary(&facts),
            Some(1),
            "the node that has the role keeps taking writes"
        );
    }
}
